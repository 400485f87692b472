"""A plain editable install (`pip install -e '.[spark]'`, no config settings) in a fresh venv
leaves format("rivulet") visible to a plain SparkSession: Spark finds Python data sources with
pkgutil.iter_modules(), which an import-hook editable install hides pyspark_rivulet from."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap
import uuid
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]

READ = textwrap.dedent("""
    import sys
    from pyspark.sql import SparkSession
    spark = SparkSession.builder.master("local[1]").appName("plain").getOrCreate()
    try:
        df = spark.read.format("rivulet").option("kafka.bootstrap.servers", sys.argv[1]) \\
            .option("subscribe", sys.argv[2]).load()
        print("VALUES", sorted(r.value.decode() for r in df.select("value").collect()))
    finally:
        spark.stop()
""")


@pytest.mark.timeout(1800)  # a venv, an install and a Spark JVM
def test_plain_editable_install_reads_a_topic_without_registration(broker, tmp_path):
    from confluent_kafka import Producer

    topic = f"plain-{uuid.uuid4().hex[:8]}"
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(3):
        p.produce(topic, f"v{i}".encode())
    assert p.flush(60) == 0
    del p

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    # The fresh venv sees this environment's packages through a .pth of its own, so pip finds
    # PySpark and the rest installed and does not fetch them again; Rivulet itself is not there.
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    Path(site, "outer-env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    install = subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                              "-e", f"{ROOT}[spark]"], env=env, capture_output=True, text=True, timeout=900)
    assert install.returncode == 0, install.stdout + install.stderr
    where = subprocess.run([str(py), "-c", "import rivulet; print(rivulet.__file__)"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    assert where.stdout.strip() == str(ROOT / "rivulet" / "__init__.py"), where.stdout + where.stderr

    script = tmp_path / "read.py"
    script.write_text(READ)
    run = subprocess.run([str(py), str(script), broker.bootstrap, topic], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=1200)
    assert "VALUES ['v0', 'v1', 'v2']" in run.stdout, run.stdout[-3000:] + run.stderr[-5000:]
