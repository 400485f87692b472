"""A SparkSession for command-line jobs: small, quiet, with ``format("rivulet")`` registered.

Spark's own output (log4j, the JVM's warnings, Python worker tracebacks) goes to a log file
instead of the terminal: the JVM inherits file descriptor 2 when it starts, so fd 2 points at
the log file for that moment, and Python's ``sys.stderr`` keeps the real terminal.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_REPO_ROOT = str(Path(__file__).resolve().parents[2])
_SITE_DIR = str(Path(__file__).resolve().parents[1] / "spark_site")


def worker_pythonpath() -> None:
    """Make Spark's Python workers import this same ``rivulet`` (and ``pyspark_rivulet``).

    Workers start from the JVM with their own sys.path; a source checkout that is not the
    installed one would otherwise lose to whatever ``rivulet`` the interpreter finds first.
    With a pip-installed Spark, ``rivulet/spark_site`` goes on the path too: its
    ``sitecustomize`` has every Python process Spark starts import PySpark from the package's
    bytecode rather than compile it from ``pyspark.zip`` (see there).
    """
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    wanted = [_REPO_ROOT, _SITE_DIR] if _pip_installed_spark() else [_REPO_ROOT]
    missing = [p for p in wanted if p not in parts]
    if missing:
        os.environ["PYTHONPATH"] = os.pathsep.join([*missing, *parts])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def _pip_installed_spark() -> bool:
    """Whether Spark runs from the installed PySpark package (no other SPARK_HOME): its Python
    workers can then use ``rivulet.spark_daemon``, which needs this layout to do anything."""
    import pyspark
    home = os.environ.get("SPARK_HOME")
    return home is None or os.path.realpath(home) == os.path.realpath(os.path.dirname(pyspark.__file__))


def quiet_session(master: str = "local[2]", app_name: str = "rivulet", conf: Mapping[str, Any] | None = None,
                  log_path: str | os.PathLike | None = None, log_level: str = "ERROR") -> SparkSession:
    """Build (or get) a SparkSession with the UI and progress bar off and the logs in ``log_path``.

    Only the session that starts the JVM (the first in this process) sends the JVM's output to
    its ``log_path``; a later one reuses that JVM, whose output stays there (``jvm_stderr``)."""
    from pyspark.sql import SparkSession

    import rivulet.spark

    worker_pythonpath()
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.streaming.metricsEnabled", "false"))
    if _pip_installed_spark():
        builder = builder.config("spark.python.daemon.module", "rivulet.spark_daemon")
    for k, v in (conf or {}).items():
        builder = builder.config(k, str(v))
    saved = None
    log_file = None
    if log_path is not None:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        log_file = open(log_path, "ab")
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(log_file.fileno(), 2)
    try:
        spark = builder.getOrCreate()
    except Exception as e:
        if log_path is None:
            raise
        tail = Path(log_path).read_text(errors="replace")[-4000:]
        raise RuntimeError(f"Spark did not start ({e}); the end of {log_path}:\n{tail}") from e
    finally:
        if saved is not None:
            os.dup2(saved, 2)
            os.close(saved)
            assert log_file is not None
            log_file.close()
    spark.sparkContext.setLogLevel(log_level)
    rivulet.spark.register(spark)
    return spark


def jvm_stderr(spark: SparkSession) -> Path:
    """The file the Spark JVM's stderr goes to, its Python workers' too: the ``log_path`` of the
    session that started the JVM, whichever session asks (Linux: read from /proc)."""
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    return Path(os.readlink(f"/proc/{pid}/fd/2"))
