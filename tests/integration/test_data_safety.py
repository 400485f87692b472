"""Data-safety rails a new user relies on, checked against the filesystem."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ck_helpers import ck_consume, ck_produce
from rivulet.testing import BrokerProcess

pytestmark = pytest.mark.integration

STDOUT_LOG = "broker-stdout.log"  # BrokerProcess's own output file, shared by both brokers here


def _snapshot(data_dir: str) -> dict[str, tuple[int, int]]:
    """Every entry below the data dir with its size and mtime, the shared stdout log aside."""
    out = {}
    for root, dirs, files in os.walk(data_dir):
        for name in dirs + files:
            if name == STDOUT_LOG:
                continue
            st = os.stat(os.path.join(root, name))
            out[os.path.relpath(os.path.join(root, name), data_dir)] = (st.st_size, st.st_mtime_ns)
    return out


def test_second_broker_on_the_same_log_dir_refuses_to_start(tmp_path):
    first = BrokerProcess({"num.partitions": "1"}, data_dir=str(tmp_path)).start()
    try:
        records = [{"key": b"k", "value": b"v%d" % i, "headers": None, "timestamp": 0} for i in range(5)]
        ck_produce(first.bootstrap, "kept", records)
        before = _snapshot(str(tmp_path))
        second = BrokerProcess({"num.partitions": "1"}, data_dir=str(tmp_path))
        with pytest.raises(RuntimeError) as e:
            second.start()
        msg = str(e.value)
        assert "Failed to acquire lock on file .lock" in msg
        assert f"process {first.proc.pid}" in msg
        assert "Traceback" not in msg
        # It stopped before writing a byte: nothing in the live directory changed.
        assert _snapshot(str(tmp_path)) == before
        # And the first broker still has everything.
        assert [r["value"] for r in ck_consume(first.bootstrap, "kept", 5)] == [b"v%d" % i for i in range(5)]
    finally:
        first.cleanup()


def test_lock_dies_with_a_killed_broker(tmp_path):
    first = BrokerProcess({"num.partitions": "1"}, data_dir=str(tmp_path)).start()
    ck_produce(first.bootstrap, "t", [{"key": None, "value": b"x", "headers": None, "timestamp": 0}])
    first.kill()  # kill -9: the flock goes with the process
    second = BrokerProcess({"num.partitions": "1"}, data_dir=str(tmp_path)).start()
    try:
        assert [r["value"] for r in ck_consume(second.bootstrap, "t", 1)] == [b"x"]
    finally:
        second.cleanup()


def test_demo_never_deletes_a_users_files(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    precious = out / "thesis.tex"
    precious.write_text("years of work")
    proc = subprocess.run([sys.executable, "-m", "rivulet", "demo", "--output", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert f"--output {out} is not empty and was not written by the demo" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert precious.read_text() == "years of work"
    assert sorted(p.name for p in out.iterdir()) == ["thesis.tex"]


def test_demo_output_rerun_clears_only_its_own_entries(tmp_path):
    from rivulet.cli.demo import OUTPUT_MARKER, _prepare_output
    out = tmp_path / "demo"
    assert _prepare_output(out) is None
    (out / "checkpoint").mkdir()
    (out / "checkpoint" / "offsets").write_text("0")
    (out / "spark.log").write_text("log")
    (out / "notes.txt").write_text("mine")
    assert _prepare_output(out) is None
    assert sorted(p.name for p in out.iterdir()) == [OUTPUT_MARKER, "notes.txt"]
    assert (out / "notes.txt").read_text() == "mine"


def test_demo_without_java_fails_in_one_line(tmp_path):
    """No Java: one line that says so, not Spark's start-up traceback."""
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)  # nothing on it, java least of all
    proc = subprocess.run([sys.executable, "-m", "rivulet", "demo", "--output", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "rivulet demo: Spark needs Java, and there is none in PATH: install Java 17 or later "
        "(Debian: apt-get install default-jre-headless) or set JAVA_HOME"]
    assert not (tmp_path / "out").exists()


def test_java_version_is_checked(tmp_path, monkeypatch):
    from rivulet.cli.pipeline import java_missing
    fake = tmp_path / "bin" / "java"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho \'openjdk version "11.0.2" 2019-01-15\' >&2\n')
    fake.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    assert java_missing() == (f"Spark needs Java 17 or later, and {fake} is Java 11: install Java 17 or later "
                              "(Debian: apt-get install default-jre-headless) or set JAVA_HOME")
    fake.write_text('#!/bin/sh\necho \'openjdk version "17.0.15" 2025-04-15\' >&2\n')
    assert java_missing() is None


def test_port_in_use_stops_start_up_before_it_writes(tmp_path):
    import socket
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        data = tmp_path / "data"
        proc = subprocess.run([sys.executable, "-m", "rivulet", "broker", "--override", f"log.dirs={data}",
                               "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}"],
                              capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rivulet broker: cannot start:") and "in use" in lines[0], lines
    # Only what identifies the directory was written: no partition of an internal topic.
    assert sorted(p.name for p in data.iterdir()) == [".lock", "meta.properties"]
