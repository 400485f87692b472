"""Spark processes for the tests, started with the installed PySpark's own launchers: a
standalone cluster on loopback (a master and two workers of 1 core and 1g, ``bin/spark-class``),
so executors are separate JVMs with their own Python workers as on a real cluster, and a Spark
Connect server (``bin/spark-submit``). Executors can be killed with SIGKILL; everything started
is killed on close."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from rivulet.testing import free_port

REPO_ROOT = str(Path(__file__).resolve().parents[1])


def spark_home() -> str:
    import pyspark
    return os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)


def spark_env(**extra: str) -> dict[str, str]:
    """The environment for Spark's processes. PYTHONPATH stands for Rivulet being installed on
    the workers: executors import it on their own, they share nothing with the driver."""
    env = dict(os.environ)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env.update(SPARK_HOME=spark_home(), SPARK_LOCAL_IP="127.0.0.1", SPARK_NO_DAEMONIZE="1",
               PYSPARK_PYTHON=sys.executable, PYTHONPATH=os.pathsep.join([REPO_ROOT, *[p for p in parts
                                                                                       if p != REPO_ROOT]]))
    env.update(extra)
    return env


class StandaloneCluster:
    def __init__(self, root: Path, workers: int = 2) -> None:
        self.root = root
        self.n_workers = workers
        self.port = free_port()
        self.procs: list[subprocess.Popen] = []
        self.workers: list[subprocess.Popen] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _launch(self, name: str, cls: str, *args: str, host: str = "127.0.0.1") -> subprocess.Popen:
        log = open(self.root / f"{name}.log", "wb")
        # Its own process group: the worker's executors and their Python workers are in it too.
        p = subprocess.Popen([os.path.join(spark_home(), "bin", "spark-class"), cls, *args],
                             env=spark_env(SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
                                           SPARK_WORKER_OPTS="-Dspark.worker.cleanup.enabled=false",
                                           SPARK_LOCAL_IP=host),
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.root)
        log.close()
        self.procs.append(p)
        return p

    def _wait_for(self, name: str, text: str, proc: subprocess.Popen, timeout: float = 90) -> None:
        path = self.root / f"{name}.log"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in path.read_text(errors="replace"):
                return
            if proc.poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError(f"Spark {name} did not start: {path.read_text(errors='replace')[-3000:]}")

    def start(self) -> "StandaloneCluster":
        self.root.mkdir(parents=True, exist_ok=True)
        m = self._launch("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                         "--port", str(self.port), "--webui-port", "0")
        self._wait_for("master", "I have been elected leader", m)
        for i in range(self.n_workers):
            # Each worker on its own loopback address: Spark treats them as two hosts, and runs a
            # speculative copy of a task only on a host the task is not already running on.
            host = f"127.0.0.{i + 1}"
            w = self._launch(f"worker{i}", "org.apache.spark.deploy.worker.Worker", "--host", host,
                             "--cores", "1", "--memory", "1g", "--webui-port", "0",
                             "--work-dir", str(self.root / f"work{i}"), self.master_url, host=host)
            self.workers.append(w)
        for i, w in enumerate(self.workers):
            self._wait_for(f"worker{i}", "Successfully registered with master", w)
        return self

    def executor_pids(self) -> list[int]:
        """The executor JVMs (CoarseGrainedExecutorBackend) the workers run now."""
        out = []
        for w in self.workers:
            kids = subprocess.run(["ps", "-o", "pid=", "--ppid", str(w.pid)], capture_output=True, text=True).stdout
            for pid in map(int, kids.split()):
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue
                if b"CoarseGrainedExecutorBackend" in cmdline:
                    out.append(pid)
        return out

    def wait_for_executors(self, n: int, timeout: float = 60) -> list[int]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pids = self.executor_pids()
            if len(pids) >= n:
                return pids
            time.sleep(0.2)
        raise AssertionError(f"fewer than {n} executors after {timeout}s: {self.executor_pids()}")

    def close(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for p in self.procs:  # whatever is left of each group: executors, Python workers
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


class ConnectServer:
    """A Spark Connect server (PySpark's own SparkConnectServer, launched with spark-submit as
    start-connect-server.sh does, but in the foreground) on loopback, running ``master``."""

    def __init__(self, root: Path, master: str = "local[2]", conf: dict[str, str] | None = None) -> None:
        self.root = root
        self.master = master
        self.conf = dict(conf or {})
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120) -> "ConnectServer":
        self.root.mkdir(parents=True, exist_ok=True)
        log_path = self.root / "connect-server.log"
        log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [os.path.join(spark_home(), "bin", "spark-submit"), "--class",
             "org.apache.spark.sql.connect.service.SparkConnectServer", "--master", self.master,
             "--conf", f"spark.connect.grpc.binding.port={self.port}",
             "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
             "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2",
             *[a for k, v in self.conf.items() for a in ("--conf", f"{k}={v}")]],
            env=spark_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.root)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "Spark Connect server started" in log_path.read_text(errors="replace"):
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        self.close()
        raise RuntimeError(f"the Spark Connect server did not start: {log_path.read_text(errors='replace')[-3000:]}")

    def close(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):  # the rest of its group: Python workers
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.proc = None
