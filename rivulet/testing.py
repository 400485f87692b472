"""Run a real Rivulet broker as a child process: for your own tests and CI, and for ours.

    with BrokerProcess() as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap})
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


# Ports are handed out below the kernel's ephemeral range. A port that bind(0) chose is one
# the kernel may give any outgoing connection (or another process's bind(0)) while its broker
# restarts, and the restart then finds it taken. Each pytest-xdist worker walks a slice of its
# own, from a random point, so workers never hand out the same port.
_PORTS_LOW = 20000
_PORTS_HIGH = max(_PORTS_LOW + 800, min(_ephemeral_low(), 65536))
_SLICES = 8


def _port_walk() -> Iterator[int]:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    span = _PORTS_HIGH - _PORTS_LOW
    if worker.startswith("gw") and worker[2:].isdigit():
        size = span // _SLICES
        low = _PORTS_LOW + int(worker[2:]) % _SLICES * size
    else:
        size, low = span, _PORTS_LOW
    start = random.randrange(size)
    while True:
        for i in range(size):
            yield low + (start + i) % size


_ports = _port_walk()


def free_port() -> int:
    """A loopback port nothing listens on, outside the ephemeral range, not handed out before
    by this process (until its slice wraps)."""
    for _ in range(_PORTS_HIGH - _PORTS_LOW):
        port = next(_ports)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # the range is full: let the kernel choose
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BrokerProcess:
    """A broker on a loopback port with its own data dir; restartable on the same data."""

    def __init__(self, overrides: dict[str, str] | None = None, data_dir: str | None = None,
                 args: list[str] | None = None, host: str = "127.0.0.1", prefix: list[str] | None = None,
                 port: int | None = None) -> None:
        """``args``: more ``rivulet broker`` arguments, such as ``--log-format json``; ``host``:
        the address it listens on; ``prefix``: what runs the broker's command, such as
        ``ip netns exec <namespace>``; ``port``: the port it listens on (a free one by default;
        an ``overrides`` ``listeners`` must then name it)."""
        self.host = host
        self.prefix = list(prefix or [])
        self.port = port or free_port()
        self._tmp = None if data_dir else tempfile.TemporaryDirectory(prefix="rivulet-test-")
        self.data_dir = data_dir or self._tmp.name
        self.overrides = {
            "listeners": f"PLAINTEXT://{host}:{self.port}",
            "log.dirs": self.data_dir,
            "group.initial.rebalance.delay.ms": "0",
            **(overrides or {}),
        }
        self.args = list(args or [])
        self.proc: subprocess.Popen | None = None
        self.log_path = Path(self.data_dir) / "broker-stdout.log"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 90.0) -> "BrokerProcess":
        args = [*self.prefix, sys.executable, "-m", "rivulet", "broker", "--log-level", os.environ.get("RIVULET_LOG", "warning")]
        for k, v in self.overrides.items():
            args += ["--override", f"{k}={v}"]
        args += self.args
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}: {self.output()[-3000:]}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5) as s:
                    # A connection to a free port can land on itself (TCP's simultaneous
                    # open) when the kernel picks that port as its source.
                    if s.getsockname() != s.getpeername():
                        return self
            except OSError:
                pass
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"broker did not start listening: {self.output()[-3000:]}")

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def output_tail(self, max_bytes: int = 64 * 1024) -> str:
        """The end of the broker's output, read without the rest (a log may have grown large)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - max_bytes))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def segment_bytes(self, partition_dir: str) -> dict[str, int]:
        """The sizes of one partition's ``.log`` segments by name, e.g. ``segment_bytes("t-0")``.

        A segment the cleaner or retention deletes while it is listed is left out, not an error.
        """
        d = os.path.join(self.data_dir, partition_dir)
        sizes: dict[str, int] = {}
        for entry in os.scandir(d):
            if entry.name.endswith(".log"):
                try:
                    sizes[entry.name] = entry.stat().st_size
                except FileNotFoundError:
                    continue
        return sizes

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc is None:
            return 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.proc = None
        self._log.close()
        return rc

    def kill(self) -> None:
        """kill -9: no flush, no checkpoint."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
            self._log.close()

    def pause(self) -> None:
        """SIGSTOP: the process holds its sockets and sessions but does nothing (a long GC
        pause, a frozen VM)."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGCONT)

    def restart(self) -> "BrokerProcess":
        self.stop()
        return self.start()

    def __enter__(self) -> "BrokerProcess":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def cleanup(self) -> None:
        if self.proc is not None:
            self.kill()
        if self._tmp is not None:
            self._tmp.cleanup()
