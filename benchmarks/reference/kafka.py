"""Apache Kafka as the reference implementation: fetch it with Maven, run KRaft nodes.

The jars are resolved from Maven Central (see pom.xml next to this file) into a per-version
cache outside the repository, ``~/.cache/rivulet/kafka-<version>/libs``; nothing downloaded is
ever committed. The broker runs as ``java -cp <libs>/* kafka.Kafka server.properties`` in
combined broker+controller mode, on free loopback ports, with data and logs in a temp dir;
``KafkaCluster`` runs several such nodes as one cluster, every node a voter of the quorum.

    python -m benchmarks.reference.kafka fetch           # resolve the jars (idempotent)
    python -m benchmarks.reference.kafka start           # run a broker until Ctrl-C

    with KafkaReference() as kafka:
        run_something_against(kafka.bootstrap)
"""

from __future__ import annotations

import argparse
import atexit
import base64
import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from rivulet.testing import free_port

# The one place the reference version is pinned. 4.3.1 is the newest release for which both
# kafka_2.13 and kafka-tools resolve on Maven Central (4.4.0 has the broker but no tools yet).
KAFKA_VERSION = "4.3.1"

POM = Path(__file__).with_name("pom.xml")
_MARKER = ".complete.json"


class FetchError(RuntimeError):
    """Java, Maven or Maven Central is unavailable, or resolution failed."""


class KafkaStartError(RuntimeError):
    """The reference broker failed to format its storage, start, or answer Metadata."""


# ---------------------------------------------------------------------------- the jar cache


def cache_root() -> Path:
    """``$RIVULET_CACHE_DIR``, else ``$XDG_CACHE_HOME/rivulet``, else ``~/.cache/rivulet``."""
    if env := os.environ.get("RIVULET_CACHE_DIR"):
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "rivulet"


def kafka_home(version: str = KAFKA_VERSION) -> Path:
    return cache_root() / f"kafka-{version}"


def libs_dir(version: str = KAFKA_VERSION) -> Path:
    return kafka_home(version) / "libs"


def classpath(version: str = KAFKA_VERSION) -> str:
    """A ``java -cp`` argument; the JVM expands the wildcard itself, so no shell is needed."""
    return str(libs_dir(version) / "*")


def is_fetched(version: str = KAFKA_VERSION) -> bool:
    """True when a previous fetch finished and every jar it recorded is still there."""
    info = fetch_info(version)
    if info is None:
        return False
    libs = libs_dir(version)
    return bool(info.get("jars")) and all((libs / j).is_file() for j in info["jars"])


def fetch_info(version: str = KAFKA_VERSION) -> dict | None:
    """What the completed fetch recorded (jars, bytes, seconds), or None."""
    try:
        return json.loads((kafka_home(version) / _MARKER).read_text())
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    # An flock (not a pid file) so a crashed fetch never leaves a stale lock behind.
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def fetch(version: str = KAFKA_VERSION, *, timeout: float = 900.0, verbose: bool = False) -> Path:
    """Resolve Kafka's broker and tools jars into the cache; returns the libs dir.

    Idempotent: returns at once when the cache is complete. Concurrent callers (parallel test
    sessions, a benchmark) serialise on a lock file, and the finished directory appears by
    rename, so nobody ever sees a half-filled classpath.
    """
    if is_fetched(version):
        return libs_dir(version)
    if shutil.which("java") is None:
        raise FetchError("java not found on PATH")
    mvn = shutil.which("mvn")
    if mvn is None:
        raise FetchError("Maven (mvn) not found on PATH; needed once to fetch Apache Kafka")
    home = kafka_home(version)
    with locked(home.with_name(home.name + ".lock")):
        if is_fetched(version):  # another process finished while we waited
            return libs_dir(version)
        for stale in home.parent.glob(f"{home.name}.partial-*"):  # left by a killed fetch; we hold the lock
            shutil.rmtree(stale, ignore_errors=True)
        scratch = Path(tempfile.mkdtemp(prefix=f"{home.name}.partial-", dir=home.parent))
        try:
            shutil.copy(POM, scratch / "pom.xml")
            cmd = [
                mvn, "-B", "-Dstyle.color=never", "-f", str(scratch / "pom.xml"), f"-Dkafka.version={version}",
                # Fully qualified: no plugin-prefix lookup; the version comes from the pom.
                "org.apache.maven.plugins:maven-dependency-plugin:copy-dependencies",
                f"-DoutputDirectory={scratch / 'libs'}",
            ]
            if not verbose:
                cmd.insert(2, "-q")
            started = time.monotonic()
            try:
                proc = subprocess.run(
                    cmd, cwd=scratch, timeout=timeout, text=True,
                    stdout=None if verbose else subprocess.PIPE, stderr=subprocess.STDOUT,
                )
            except subprocess.TimeoutExpired as e:
                raise FetchError(f"mvn did not finish within {timeout:.0f}s") from e
            seconds = time.monotonic() - started
            if proc.returncode != 0:
                # Maven's jansi emits colour resets even with style.color=never.
                tail = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout or "")[-4000:]
                raise FetchError(f"mvn failed to resolve Apache Kafka {version} (exit {proc.returncode}):\n{tail}")
            jars = sorted(p.name for p in (scratch / "libs").glob("*.jar"))
            if not any(j.startswith("kafka_2.13-") for j in jars):
                raise FetchError(f"mvn succeeded but kafka_2.13 is missing from {scratch / 'libs'}")
            info = {
                "version": version,
                "jars": jars,
                "bytes": sum((scratch / "libs" / j).stat().st_size for j in jars),
                "seconds": round(seconds, 1),
                "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            }
            (scratch / "pom.xml").unlink()
            shutil.rmtree(scratch / "target", ignore_errors=True)
            (scratch / _MARKER).write_text(json.dumps(info, indent=1))
            shutil.rmtree(home, ignore_errors=True)  # an incomplete leftover
            os.rename(scratch, home)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return libs_dir(version)


# ---------------------------------------------------------------------------- logging, ports


def write_log4j2_config(path: Path, *, level: str = "INFO", log_file: Path | None = None) -> Path:
    """A log4j2 properties file: everything to ``log_file`` if given, else to stderr.

    Tools log to stderr so their stdout carries nothing but the figures we parse.
    """
    if log_file is None:
        appender = ["appender.out.type = Console", "appender.out.target = SYSTEM_ERR"]
    else:
        appender = ["appender.out.type = File", f"appender.out.fileName = {log_file}"]
    lines = [
        "status = error",
        *appender,
        "appender.out.name = OUT",
        "appender.out.layout.type = PatternLayout",
        "appender.out.layout.pattern = [%d] %p %m (%c)%n",
        f"rootLogger.level = {level}",
        "rootLogger.appenderRef.out.ref = OUT",
        # The per-request trace and state-change chatter bury the interesting lines.
        "logger.request.name = kafka.request.logger",
        "logger.request.level = WARN",
        "logger.statechange.name = state.change.logger",
        "logger.statechange.level = WARN",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def random_cluster_id() -> str:
    """Kafka's cluster-id format: a UUID as 22 chars of unpadded URL-safe base64."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):  # the CLI would read it as an option
            return cid


# The start script's defaults, so the reference runs as a stock deployment would.
_JVM_FLAGS = [
    "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true",
]

# For tests, which compare answers and not speed: the C1 compiler only. C2's compiler threads
# were a large part of a reference broker's CPU over a test module.
TEST_JVM_FLAGS = ("-XX:TieredStopAtLevel=1",)


# ---------------------------------------------------------------------------- the broker


class KafkaReference:
    """One Apache Kafka KRaft node (broker+controller) on loopback, as a child process.

    ``group_initial_rebalance_delay_ms`` defaults to 0, like the Rivulet test broker, so group
    joins are not padded by Kafka's 3 s default. ``overrides`` win over everything.
    """

    def __init__(
        self,
        *,
        version: str = KAFKA_VERSION,
        port: int | None = None,
        group_initial_rebalance_delay_ms: int = 0,
        overrides: Mapping[str, str] | None = None,
        heap: str = "1g",
        log_level: str = "INFO",
        work_dir: str | Path | None = None,
        keep_work_dir: bool = False,
        jvm_flags: Sequence[str] = (),
        node_id: int = 1,
        controller_port: int | None = None,
        quorum_voters: str | None = None,
        cluster_id: str | None = None,
    ) -> None:
        """``node_id``, ``controller_port``, ``quorum_voters`` (``controller.quorum.voters``)
        and ``cluster_id``: for a node of a ``KafkaCluster``; alone, it is its own only voter."""
        self.version = version
        self.jvm_flags = tuple(jvm_flags)  # after the stock flags, so they win
        self.port = port or free_port()
        self.controller_port = controller_port or free_port()
        self.heap = heap
        self.log_level = log_level
        self._owns_work_dir = work_dir is None
        if work_dir is None:
            work_dir = tempfile.mkdtemp(prefix="rivulet-kafka-ref-")
        self.work_dir = Path(work_dir)
        self.keep_work_dir = keep_work_dir
        self.data_dir = self.work_dir / "data"
        self.log_path = self.work_dir / "server.log"  # log4j output
        self.stdout_path = self.work_dir / "stdout.log"  # JVM stdout/stderr (crashes, GC warnings)
        self.cluster_id = cluster_id or random_cluster_id()
        self.properties: dict[str, str] = {
            "process.roles": "broker,controller",
            "node.id": str(node_id),
            "controller.quorum.voters": quorum_voters or f"{node_id}@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "num.partitions": "1",
            "default.replication.factor": "1",
            "min.insync.replicas": "1",
            # Internal topics default to RF 3, which a single node can never satisfy.
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": str(group_initial_rebalance_delay_ms),
            "auto.create.topics.enable": "true",
            **{k: str(v) for k, v in (overrides or {}).items()},
        }
        self.proc: subprocess.Popen | None = None
        self._stdout = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _java(self, main: str, *args: str, heap: str) -> list[str]:
        java = shutil.which("java")
        if java is None:
            raise KafkaStartError("java not found on PATH")
        return [
            java, f"-Xms{heap}", f"-Xmx{heap}", *_JVM_FLAGS, *self.jvm_flags,
            f"-Dlog4j2.configurationFile={self.work_dir / 'log4j2.properties'}",
            # Otherwise log4j's own shutdown hook races Kafka's and the shutdown goes unlogged.
            "-Dlog4j2.shutdownHookEnabled=false",
            f"-Dkafka.logs.dir={self.work_dir}",
            "-cp", classpath(self.version), main, *args,
        ]

    def start(self, timeout: float = 120.0) -> KafkaReference:
        """Fetch if needed, format storage, start the JVM and wait until it answers Metadata."""
        if self.running:
            return self
        self.launch()
        return self.wait_ready(timeout)

    def launch(self) -> None:
        """Format storage and start the JVM, without waiting: a node of a cluster answers
        Metadata only once a majority of the quorum's voters runs."""
        fetch(self.version)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        config = self.work_dir / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self.properties.items()))
        write_log4j2_config(self.work_dir / "log4j2.properties", level=self.log_level, log_file=self.log_path)
        if not (self.data_dir / "meta.properties").exists():
            fmt = subprocess.run(
                self._java("kafka.tools.StorageTool", "format", "-t", self.cluster_id, "-c", str(config), heap="256m"),
                capture_output=True, text=True, timeout=120,
            )
            if fmt.returncode != 0:
                raise KafkaStartError(f"kafka-storage format failed:\n{fmt.stdout}\n{fmt.stderr}")
        self._stdout = open(self.stdout_path, "ab")
        # Own session: a terminal Ctrl-C reaches only us, and we stop the broker in order.
        self.proc = subprocess.Popen(
            self._java("kafka.Kafka", str(config), heap=self.heap),
            stdout=self._stdout, stderr=subprocess.STDOUT, start_new_session=True,
        )
        atexit.register(self.kill)

    def wait_ready(self, timeout: float = 120.0) -> KafkaReference:
        """Until the launched JVM answers Metadata; kills it if it does not."""
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.kill()
            raise
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        # TCP first, so librdkafka does not log a burst of connection-refused errors.
        while True:
            self._check_alive()
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise KafkaStartError(f"Kafka did not listen within {timeout:.0f}s:\n{self.output(3000)}")
                time.sleep(0.1)
        from confluent_kafka.admin import AdminClient  # lazy: fetching needs no Python client

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        last: Exception | None = None
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                md = admin.list_topics(timeout=2)
                if md.brokers:
                    return
            except Exception as e:  # KafkaException while the broker is still registering
                last = e
            time.sleep(0.1)
        raise KafkaStartError(f"Kafka did not answer Metadata within {timeout:.0f}s ({last}):\n{self.output(3000)}")

    def _check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            rc = self.proc.returncode
            self.proc = None
            raise KafkaStartError(f"Kafka exited with {rc}:\n{self.output(3000)}")

    def output(self, tail: int | None = None) -> str:
        """The broker's log and JVM output (the last ``tail`` characters of each)."""
        parts = []
        for p in (self.stdout_path, self.log_path):
            try:
                text = p.read_text(errors="replace")
            except OSError:
                continue
            parts.append(f"--- {p.name}\n{text[-tail:] if tail else text}")
        return "\n".join(parts)

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (Kafka's clean shutdown), then SIGKILL if it takes longer than ``timeout``."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self._release()
        return rc

    def kill(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._release()

    def _release(self) -> None:
        self.proc = None
        if self._stdout is not None:
            self._stdout.close()
            self._stdout = None
        atexit.unregister(self.kill)

    def cleanup(self) -> None:
        self.kill()
        if self._owns_work_dir and not self.keep_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> KafkaReference:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.cleanup()


class KafkaCluster:
    """``size`` KRaft nodes on loopback, each broker+controller, all of them voters of one
    static quorum (``controller.quorum.voters``), formatted with one cluster id. Internal
    topics keep Kafka's defaults (replication factor 3, min.insync.replicas 2).
    ``overrides`` go to every node and win."""

    def __init__(self, size: int = 3, *, heap: str = "1g", overrides: Mapping[str, str] | None = None,
                 version: str = KAFKA_VERSION) -> None:
        controller_ports = [free_port() for _ in range(size)]
        voters = ",".join(f"{i + 1}@127.0.0.1:{port}" for i, port in enumerate(controller_ports))
        cluster_id = random_cluster_id()
        self.nodes = [
            KafkaReference(version=version, heap=heap, node_id=i + 1, controller_port=port, quorum_voters=voters,
                           cluster_id=cluster_id, overrides={**cluster_properties(size), **(overrides or {})})
            for i, port in enumerate(controller_ports)]

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    def start(self, timeout: float = 120.0) -> KafkaCluster:
        """Every node launched, then each answering Metadata that lists all of them."""
        try:
            for node in self.nodes:
                node.launch()
            deadline = time.monotonic() + timeout
            for node in self.nodes:
                node.wait_ready(max(1.0, deadline - time.monotonic()))
            from confluent_kafka.admin import AdminClient

            for node in self.nodes:
                admin = AdminClient({"bootstrap.servers": node.bootstrap})
                while len(admin.list_topics(timeout=5).brokers) < len(self.nodes):
                    if time.monotonic() > deadline:
                        raise KafkaStartError(f"{node.bootstrap} does not list {len(self.nodes)} brokers "
                                              f"after {timeout:.0f}s:\n{node.output(3000)}")
                    time.sleep(0.1)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """One node after another, cleanly while the rest keep a majority of the quorum; the
        last ones' controlled shutdown could never finish (it would wait out the timeout)."""
        clean = len(self.nodes) - len(self.nodes) // 2
        for i, node in enumerate(self.nodes):
            if i < clean:
                node.stop()
            else:
                node.kill()

    def cleanup(self) -> None:
        for node in self.nodes:
            node.cleanup()

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.cleanup()


def cluster_properties(size: int) -> dict[str, str]:
    """What a node of a ``size``-node cluster sets over the single node's properties: the
    internal topics back at Kafka's defaults (replication factor 3, min ISR 2) when there are
    enough brokers for them."""
    rf, isr = str(min(size, 3)), str(min(size, 2))
    return {
        "offsets.topic.replication.factor": rf,
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": isr,
        "share.coordinator.state.topic.replication.factor": rf,
        "share.coordinator.state.topic.min.isr": isr,
    }


# ---------------------------------------------------------------------------- CLI


def _parse_overrides(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep:
            raise SystemExit(f"--override wants KEY=VALUE, got {item!r}")
        out[k] = v
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.reference.kafka", description=__doc__.split("\n")[0])
    ap.add_argument("--version", default=KAFKA_VERSION, help=f"Kafka version (default {KAFKA_VERSION})")
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch", help="resolve the broker and tools jars into the cache")
    f.add_argument("-v", "--verbose", action="store_true", help="show Maven's output")
    s = sub.add_parser("start", help="run a single KRaft broker in the foreground until Ctrl-C")
    s.add_argument("--port", type=int, default=None)
    s.add_argument("--rebalance-delay-ms", type=int, default=0, help="group.initial.rebalance.delay.ms")
    s.add_argument("--heap", default="1g")
    s.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    s.add_argument("--keep", action="store_true", help="keep the data/log dir after stopping")
    sub.add_parser("classpath", help="print the java -cp argument")
    args = ap.parse_args(argv)

    if args.cmd == "fetch":
        was = is_fetched(args.version)
        started = time.monotonic()
        try:
            libs = fetch(args.version, verbose=args.verbose)
        except FetchError as e:
            print(f"fetch failed: {e}", file=sys.stderr)
            return 1
        info = fetch_info(args.version) or {}
        # A concurrent fetch may have done the work while we waited on the lock.
        state = "already cached" if was else (
            f"ready after {time.monotonic() - started:.1f}s (the Maven run took {info.get('seconds', '?')}s)")
        print(f"Apache Kafka {args.version}: {state}; {len(info.get('jars', []))} jars, "
              f"{info.get('bytes', 0) / 2**20:.1f} MiB in {libs}")
        return 0
    if args.cmd == "classpath":
        print(classpath(args.version))
        return 0

    ref = KafkaReference(
        version=args.version, port=args.port, heap=args.heap, keep_work_dir=args.keep,
        group_initial_rebalance_delay_ms=args.rebalance_delay_ms, overrides=_parse_overrides(args.override),
    )
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        ref.start()
        print(f"Apache Kafka {args.version} listening on {ref.bootstrap} (logs in {ref.work_dir}); Ctrl-C stops it",
              flush=True)
        while not stop and ref.running:
            time.sleep(0.2)
        if not ref.running and not stop:
            print(f"Kafka exited unexpectedly:\n{ref.output(3000)}", file=sys.stderr)
            return 1
        rc = ref.stop()
        print(f"stopped (exit {rc})")
        return 0
    except KafkaStartError as e:
        print(e, file=sys.stderr)
        return 1
    finally:
        ref.cleanup()


if __name__ == "__main__":
    sys.exit(main())
