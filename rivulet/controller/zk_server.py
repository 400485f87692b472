"""A local standalone ZooKeeper server as a child process, for `rivulet cluster up` and tests.

ZooKeeper itself is Java: Debian's ``zookeeper`` package (``/usr/share/java/zookeeper.jar``,
whose manifest names its dependencies), an unpacked release under ``$ZOOKEEPER_HOME``, or an
explicit ``$RIVULET_ZOOKEEPER_CLASSPATH``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["ZooKeeperNotFound", "ZooKeeperServer", "find_java", "find_zookeeper_classpath"]

MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
DEBIAN_JAR = Path("/usr/share/java/zookeeper.jar")
# Debian's jar finds its dependencies through its manifest, but no logging binding: this one
# makes the server's warnings readable in its log file instead of SLF4J's NOP notice.
DEBIAN_SLF4J_SIMPLE = Path("/usr/share/java/slf4j-simple.jar")
INSTALL_HINT = ("install Debian's zookeeper package (apt-get install zookeeper, which "
                "scripts/setup.sh does), or set ZOOKEEPER_HOME to an unpacked ZooKeeper release")


class ZooKeeperNotFound(RuntimeError):
    """No Java or no ZooKeeper jars on this machine."""


def find_java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise ZooKeeperNotFound("no java on PATH (ZooKeeper is a Java server): " + INSTALL_HINT)
    return java


def find_zookeeper_classpath() -> str:
    explicit = os.environ.get("RIVULET_ZOOKEEPER_CLASSPATH")
    if explicit:
        return explicit
    home = os.environ.get("ZOOKEEPER_HOME")
    if home:
        jars = sorted(str(p) for p in (Path(home) / "lib").glob("*.jar"))
        jars += sorted(str(p) for p in Path(home).glob("zookeeper-*.jar"))
        if not jars:
            raise ZooKeeperNotFound(f"ZOOKEEPER_HOME={home} holds no ZooKeeper jars")
        return os.pathsep.join(jars)
    if DEBIAN_JAR.exists():
        parts = [str(DEBIAN_JAR)]
        if DEBIAN_SLF4J_SIMPLE.exists():
            parts.append(str(DEBIAN_SLF4J_SIMPLE))
        return os.pathsep.join(parts)
    raise ZooKeeperNotFound("ZooKeeper not found: " + INSTALL_HINT)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _four_letter(port: int, word: bytes, timeout: float = 1.0, host: str = "127.0.0.1") -> bytes:
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(word)
        chunks = []
        while chunk := s.recv(4096):
            chunks.append(chunk)
        return b"".join(chunks)


class ZooKeeperServer:
    """A standalone ZooKeeper on a loopback port, with its own data dir (a temporary one
    unless given, removed at cleanup).

    ``tick_ms`` bounds the session timeouts the server grants (2 to 20 ticks by default);
    a short tick lets tests use short sessions, so a killed broker's znodes go quickly.
    """

    def __init__(self, port: int | None = None, data_dir: str | None = None,
                 tick_ms: int = 500, max_session_timeout_ms: int = 60000, host: str = "127.0.0.1") -> None:
        """``host``: the address it listens on (a test's network namespaces reach it on another)."""
        self.host = host
        self.port = port or _free_port()
        self._tmp = None if data_dir else tempfile.TemporaryDirectory(prefix="rivulet-zk-")
        self.data_dir = Path(data_dir or self._tmp.name)
        self.tick_ms = tick_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.log_path = self.data_dir / "zookeeper.log"
        self.proc: subprocess.Popen | None = None
        self._log = None

    @property
    def connect(self) -> str:
        """The ``zookeeper.connect`` string of this server."""
        return f"{self.host}:{self.port}"

    def write_config(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cfg = self.data_dir / "zoo.cfg"
        cfg.write_text("\n".join([
            f"dataDir={self.data_dir / 'data'}",
            f"clientPort={self.port}",
            f"clientPortAddress={self.host}",
            f"tickTime={self.tick_ms}",
            f"maxSessionTimeout={self.max_session_timeout_ms}",
            "maxClientCnxns=0",
            # Its embedded Jetty would take port 8080, which a second server could not.
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr",
            "",
        ]))
        return cfg

    def command(self) -> list[str]:
        return [find_java(), "-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-cp", find_zookeeper_classpath(), MAIN_CLASS, str(self.write_config())]

    def start(self, timeout: float = 60.0) -> "ZooKeeperServer":
        cmd = self.command()
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                rc = self.proc.returncode
                self._close()
                raise RuntimeError(f"ZooKeeper exited with {rc}: {self.output()[-3000:]}")
            if self.is_ok():
                return self
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"ZooKeeper did not answer on {self.connect}: {self.output()[-3000:]}")

    def is_ok(self) -> bool:
        try:
            return _four_letter(self.port, b"ruok", host=self.host) == b"imok"
        except OSError:
            return False

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._close()

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self._close()

    def _close(self) -> None:
        self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def cleanup(self) -> None:
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> "ZooKeeperServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
