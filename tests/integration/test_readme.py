"""The README's shell commands, run as written, in order, in a fresh copy of the checkout
with a fresh virtual environment: the set-up a new user follows must work, and its plain
editable install leaves format("rivulet") visible to a plain SparkSession."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import textwrap
import time
import uuid
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]
PORT = 9092  # the README names Kafka's default port
SELF = "bash .ci/run"  # the command that runs this very test: not run again from inside it
# Checks on what a command printed, by a piece of the command.
EXPECT_OUTPUT = {
    "rivulet topics list": "events",
    "rivulet topics describe": "events",
    "kcat -b 127.0.0.1:9092 -C": "hello",
    "rivulet consume": "hello",
    "rivulet groups list": "my-app",
}


def check_demo_output(out: str) -> None:
    """What `rivulet demo` printed: its checks passed, over every order it produced. Its end mark
    moves the watermark past the last orders' windows, so the checks cover every order, not only
    those of the windows the run had closed when the generator stopped (about half of a 20 s
    run's before the mark). And Spark SQL over the orders topic's Iceberg table agrees with the
    pipeline's windows."""
    held = [line for line in out.splitlines() if "closed windows hold" in line]
    assert len(held) == 1 and "✓" in held[0], out
    covered, produced = (int(x.replace(",", "")) for x in held[0].split("hold ")[1].split(" orders")[0].split(" of "))
    assert produced > 0 and covered >= 0.95 * produced, held[0]
    table = [line for line in out.splitlines() if "Spark SQL over the table" in line]
    assert len(table) == 1 and "✓" in table[0] and "closed windows" in table[0], out


def readme_commands(text: str) -> list[str]:
    """Every command of the README's ```sh blocks, continuation lines joined."""
    commands: list[str] = []
    for block in re.findall(r"^```sh\n(.*?)^```", text, flags=re.S | re.M):
        pending = ""
        for line in block.splitlines():
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            line = (pending + line).strip()
            pending = ""
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


def test_readme_commands_parse():
    cmds = readme_commands((ROOT / "README.md").read_text())
    assert cmds[0].startswith("bash scripts/setup.sh") and "rivulet demo" in cmds[0]
    assert SELF in cmds
    assert any(c.startswith("rivulet broker") for c in cmds)


def test_demo_output_check_reads_the_demos_lines():
    ok = ("  ✓ closed windows hold 61,900 of 61,900 orders (100%); every window matches a batch recount\n"
          "  ✓ Spark SQL over the table agrees with all 20 closed windows (orders, items, revenue)\n")
    check_demo_output(ok)
    with pytest.raises(AssertionError):
        check_demo_output(ok.replace("61,900 of", "40,000 of"))
    with pytest.raises(AssertionError):
        check_demo_output(ok.replace("✓ Spark", "✗ Spark"))
    with pytest.raises(AssertionError):
        check_demo_output(ok.splitlines()[0])


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _fresh_copy(dst: Path) -> None:
    """The files git knows of, as a clean clone has them (no .venv, no build outputs)."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in files.decode().split("\0"):
        if rel and (ROOT / rel).is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, dst / rel)


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


def _plain_spark_reads_a_topic(python: Path, work: Path, env: dict[str, str], tmp_path: Path) -> None:
    """The README's set-up is a plain editable install (`pip install -e '.[...]'`, no config
    settings): Rivulet comes from the checkout, and Spark finds its data source unregistered."""
    from confluent_kafka import Producer

    from rivulet.admin import AdminClient, NewTopic
    topic = f"plain-{uuid.uuid4().hex[:8]}"
    bootstrap = f"127.0.0.1:{PORT}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.create_topics([NewTopic(topic, 1)])[topic].result(30)
    finally:
        admin.close()
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(3):
        p.produce(topic, f"v{i}".encode())
    assert p.flush(60) == 0
    where = subprocess.run([str(python), "-c", "import rivulet; print(rivulet.__file__)"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    assert where.stdout.strip() == str(work / "rivulet" / "__init__.py"), where.stdout + where.stderr
    script = tmp_path / "read.py"
    script.write_text(READ)
    run = subprocess.run([str(python), str(script), bootstrap, topic], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=600)
    assert "VALUES ['v0', 'v1', 'v2']" in run.stdout, run.stdout[-3000:] + run.stderr[-5000:]


@pytest.mark.timeout(1200)  # a fresh venv (PySpark, the registry's libraries) and the demo
def test_readme_commands_run_as_written(tmp_path):
    if _port_open(PORT):
        pytest.fail(f"port {PORT} is in use; the README's commands need Kafka's default port free")
    work = tmp_path / "rivulet"
    _fresh_copy(work)
    commands = readme_commands((work / "README.md").read_text())
    venv_bin = work / ".venv" / "bin"
    env = {**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ['PATH']}", "VIRTUAL_ENV": str(work / ".venv")}
    for var in ("PYTHONPATH", "PYSPARK_PYTHON", "RIVULET_BOOTSTRAP"):
        env.pop(var, None)

    background: list[tuple[str, subprocess.Popen]] = []
    ran: list[str] = []
    demo_checked = False
    try:
        for cmd in commands:
            if cmd == SELF:
                continue
            if cmd.startswith("rivulet broker"):
                # Runs in the foreground in the README; here in the background until the end.
                log = open(tmp_path / "broker.log", "wb")
                proc = subprocess.Popen(["bash", "-c", f"exec {cmd}"], cwd=work, env=env,
                                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
                background.append((cmd, proc))
                deadline = time.monotonic() + 60
                while not _port_open(PORT):
                    assert proc.poll() is None, f"{cmd!r} exited: {(tmp_path / 'broker.log').read_text()}"
                    assert time.monotonic() < deadline, f"{cmd!r} did not start listening"
                    time.sleep(0.1)
                ran.append(cmd)
                continue
            done = subprocess.run(["bash", "-c", cmd], cwd=work, env=env, capture_output=True, text=True,
                                  timeout=600, stdin=subprocess.DEVNULL)
            assert done.returncode == 0, f"{cmd!r} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            for piece, expected in EXPECT_OUTPUT.items():
                if cmd.startswith(piece):
                    assert expected in done.stdout, f"{cmd!r} printed:\n{done.stdout[-3000:]}"
            if "rivulet demo" in cmd:  # the README's first command, the demo with its defaults
                check_demo_output(done.stdout)
                demo_checked = True
            ran.append(cmd)
        # Every command but this test's own ran, the demo and a broker among them.
        assert len(ran) == len(commands) - 1
        assert demo_checked
        assert (work / ".venv" / "bin" / "rivulet").exists()
        # Spark finds Python data sources with pkgutil.iter_modules(), from any directory: the
        # README's editable install must not hide pyspark_rivulet from it.
        found = subprocess.run([str(venv_bin / "python"), "-c", "import pkgutil; print(sorted(m.name for m in "
                                "pkgutil.iter_modules() if m.name.startswith('pyspark_')))"],
                               cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        assert "pyspark_rivulet" in found.stdout, (found.stdout, found.stderr)
        # And so a plain SparkSession in that venv reads a topic with format("rivulet"), no
        # registration call: the README's broker is still up.
        _plain_spark_reads_a_topic(venv_bin / "python", work, env, tmp_path)
    finally:
        for cmd, proc in background:
            proc.send_signal(signal.SIGTERM)
            try:
                rc = proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                rc = proc.wait()
            assert rc == 0, f"{cmd!r} did not stop cleanly on SIGTERM (exit {rc})"
