"""`rivulet cluster up|status|down`: a local cluster in one command, a ZooKeeper server and N
brokers in ZooKeeper mode on loopback ports, each its own background process.

Everything lives under one directory (``--dir``, default ``./rivulet-cluster``): ZooKeeper's
data and log, each broker's log dir and its output, and ``cluster.json``, which says which
processes `status` and `down` look after.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rivulet.cli.common import CliError, parse_kv
from rivulet.cli.output import Column, print_table
from rivulet.common.logs import parse_levels
from rivulet.controller.zk_server import ZooKeeperNotFound, ZooKeeperServer
from rivulet.testing import free_port

STATE_FILE = "cluster.json"


@dataclass
class Member:
    name: str
    pid: int
    port: int
    log: str
    metrics_port: int = 0  # a broker's Prometheus endpoint (metrics.listener), 0 for none
    registry_port: int = 0  # a broker's schema registry (schema.registry.listeners), 0 for none


@dataclass
class ClusterState:
    zookeeper: Member
    brokers: list[Member]

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.zookeeper.port}"

    def save(self, root: Path) -> None:
        (root / STATE_FILE).write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, root: Path) -> "ClusterState":
        path = root / STATE_FILE
        if not path.exists():
            raise CliError(f"no cluster in {root} (no {STATE_FILE}; start one with `rivulet cluster up`)")
        doc = json.loads(path.read_text())
        return cls(Member(**doc["zookeeper"]), [Member(**b) for b in doc["brokers"]])


def registry_installed() -> bool:
    """Whether the schema registry's libraries are there (the registry extra)."""
    import importlib.util
    return all(importlib.util.find_spec(m) is not None for m in ("avro", "jsonschema"))


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of this process is not alive
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return True


def _port(wanted: int, asked: set[int]) -> int:
    """``wanted``, or a free port none of the members was asked to take (a port chosen for one
    member must not be one a later member is started on)."""
    if wanted > 0:
        return wanted
    port = free_port()
    while port in asked:
        port = free_port()
    return port


def _asked_ports(args: argparse.Namespace) -> set[int]:
    """The ports given on the command line: the brokers', metrics' and registries' bases up."""
    asked = {args.zookeeper_port} if args.zookeeper_port > 0 else set()
    for base in (args.port, args.metrics_port, args.registry_port or 0):
        if base > 0:
            asked.update(range(base, base + args.brokers))
    return asked


def port_free(port: int) -> bool:
    """Whether nothing listens on (or holds) 127.0.0.1:``port`` now."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


DEFAULT_REGISTRY_PORT = 8081  # Confluent's


def registry_base_port(wanted: int | None, brokers: int) -> int:
    """The first broker's registry port: as asked, or by default 8081 and up when all of them
    are free, else free ports (a registry already on 8081 should not stop the cluster)."""
    if wanted is not None:
        return wanted
    if all(port_free(DEFAULT_REGISTRY_PORT + j) for j in range(brokers)):
        return DEFAULT_REGISTRY_PORT
    return 0


def up(args: argparse.Namespace) -> int:
    root = Path(args.dir).resolve()
    if (root / STATE_FILE).exists():
        state = ClusterState.load(root)
        if any(alive(m.pid) for m in [state.zookeeper, *state.brokers]):
            raise CliError(f"a cluster is already running in {root}: `rivulet cluster down --dir {args.dir}` first")
    if args.brokers < 1:
        raise CliError("--brokers must be at least 1")
    overrides = parse_kv(args.override, "--override")
    try:
        parse_levels([args.log_level])
    except ValueError as e:
        raise CliError(f"--log-level: {e}", 2) from None
    root.mkdir(parents=True, exist_ok=True)
    asked = _asked_ports(args)
    zk = ZooKeeperServer(port=_port(args.zookeeper_port, asked), data_dir=str(root / "zookeeper"))
    try:
        zk.start()
    except ZooKeeperNotFound as e:
        raise CliError(str(e)) from None
    assert zk.proc is not None
    state = ClusterState(Member("zookeeper", zk.proc.pid, zk.port, str(zk.log_path)), [])
    registry_base = registry_base_port(args.registry_port, args.brokers)
    for i in range(1, args.brokers + 1):
        port = _port(args.port + i - 1 if args.port > 0 else 0, asked)
        metrics_port = _port(args.metrics_port + i - 1 if args.metrics_port > 0 else 0, asked)
        data = root / f"broker-{i}"
        data.mkdir(exist_ok=True)
        log_path = data / "broker.log"
        props = {"broker.id": str(i), "listeners": f"PLAINTEXT://127.0.0.1:{port}", "log.dirs": str(data / "data"),
                 "zookeeper.connect": zk.connect, "offsets.topic.replication.factor": str(min(3, args.brokers)),
                 "transaction.state.log.replication.factor": str(min(3, args.brokers)),
                 "transaction.state.log.min.isr": str(min(2, args.brokers)),
                 "default.replication.factor": str(min(args.replication_factor, args.brokers))}
        if args.racks:
            props["broker.rack"] = f"rack-{(i - 1) % args.racks + 1}"
        props["metrics.listener"] = f"http://127.0.0.1:{metrics_port}"
        registry_port = 0
        if registry_base >= 0 and registry_installed():
            registry_port = _port(registry_base + i - 1 if registry_base > 0 else 0, asked)
            props["schema.registry.listeners"] = f"http://127.0.0.1:{registry_port}"
            props["schema.registry.kafkastore.topic.replication.factor"] = str(min(3, args.brokers))
        props.update(overrides)
        cmd = [sys.executable, "-m", "rivulet", "broker", "--log-level", args.log_level, "--log-format",
               args.log_format]
        for k, v in props.items():
            cmd += ["--override", f"{k}={v}"]
        with open(log_path, "ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        state.brokers.append(Member(f"broker-{i}", proc.pid, port, str(log_path),
                                    metrics_port if "metrics.listener" not in overrides else 0,
                                    registry_port if "schema.registry.listeners" not in overrides else 0))
        state.save(root)
    try:
        _wait_registered(state, args.timeout)
    except CliError:
        # A half-started cluster is not left running: what did start is stopped, so the ports
        # are free for the next attempt.
        _stop(state, root, args.timeout)
        raise
    print(f"ZooKeeper and {args.brokers} broker(s) started in {root}")
    print(f"bootstrap servers: {','.join(f'127.0.0.1:{b.port}' for b in state.brokers)}")
    scraped = [f"http://127.0.0.1:{b.metrics_port}/metrics" for b in state.brokers if b.metrics_port]
    if scraped:
        print(f"Prometheus metrics: {' '.join(scraped)}")
    registries = [f"http://127.0.0.1:{b.registry_port}" for b in state.brokers if b.registry_port]
    if registries:
        print(f"schema registry: {' '.join(registries)}")
    print()
    return print_status(state)


def _wait_registered(state: ClusterState, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        registered, _ = _zk_view(state)
        if registered >= {i for i in range(1, len(state.brokers) + 1)}:
            return
        for b in state.brokers:
            if not alive(b.pid):
                tail = Path(b.log).read_text(errors="replace")[-2000:] if Path(b.log).exists() else ""
                raise CliError(f"{b.name} exited during start-up; its log ({b.log}) ends:\n{tail}")
        if time.monotonic() > deadline:
            raise CliError(f"brokers did not register in ZooKeeper within {timeout:.0f} s; see their logs")
        time.sleep(0.2)


def _zk_view(state: ClusterState) -> tuple[set[int], int | None]:
    """(registered broker ids, controller id) as ZooKeeper has them; empty when it is down."""
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoNodeError
    from kazoo.handlers.threading import KazooTimeoutError

    from rivulet.controller import zk_data as z

    if not alive(state.zookeeper.pid):
        return set(), None
    # kazoo logs a dropped connection as a warning; here ZooKeeper may still be starting.
    logging.getLogger("kazoo.client").setLevel(logging.ERROR)
    zk = KazooClient(hosts=state.connect, timeout=5)
    try:
        zk.start(timeout=5)
    except KazooTimeoutError:
        return set(), None
    try:
        ids = {int(c) for c in zk.get_children(z.BROKER_IDS)} if zk.exists(z.BROKER_IDS) else set()
        try:
            controller: int | None = z.decode_controller(zk.get(z.CONTROLLER)[0])
        except NoNodeError:
            controller = None
        return ids, controller
    finally:
        zk.stop()
        zk.close()


def print_status(state: ClusterState, fmt: str = "text") -> int:
    registered, controller = _zk_view(state)
    rows: list[list[object]] = []
    zk = state.zookeeper
    rows.append([zk.name, state.connect, zk.pid, "up" if alive(zk.pid) else "down", zk.log])
    down = 0 if alive(zk.pid) else 1
    for i, b in enumerate(state.brokers, 1):
        if not alive(b.pid):
            st = "down"
            down += 1
        elif i in registered:
            st = "controller" if controller == i else "registered"
        else:
            st = "starting"
        rows.append([f"{b.name} (id {i})", f"127.0.0.1:{b.port}", b.pid, st, b.log])
    print_table([Column("NODE", "node"), Column("ADDRESS", "address"), Column("PID", "pid"), Column("STATE", "state"),
                 Column("LOG", "log")], rows, fmt)
    return 0 if down == 0 else 1


def status(args: argparse.Namespace) -> int:
    return print_status(ClusterState.load(Path(args.dir).resolve()), args.format)


def _terminate(m: Member, timeout: float) -> None:
    if not alive(m.pid):
        return
    os.kill(m.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive(m.pid):
        if time.monotonic() > deadline:
            os.kill(m.pid, signal.SIGKILL)
            break
        time.sleep(0.1)


def _stop(state: ClusterState, root: Path, timeout: float) -> None:
    # One broker at a time, each with a controlled shutdown, then ZooKeeper.
    for b in reversed(state.brokers):
        print(f"stopping {b.name} (pid {b.pid})", flush=True)
        _terminate(b, timeout)
    print(f"stopping zookeeper (pid {state.zookeeper.pid})", flush=True)
    _terminate(state.zookeeper, timeout)
    (root / STATE_FILE).unlink(missing_ok=True)


def down(args: argparse.Namespace) -> int:
    root = Path(args.dir).resolve()
    _stop(ClusterState.load(root), root, args.timeout)
    if args.purge:
        shutil.rmtree(root)
        print(f"removed {root}")
    else:
        print(f"stopped; the data stays in {root} (`--purge` removes it)")
    return 0
