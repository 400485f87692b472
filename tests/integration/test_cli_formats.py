"""`--format json` on the describe and list commands, and nothing but data on a piped stdout
(progress is for terminals only)."""

from __future__ import annotations

import json
import uuid

import pytest

from rivulet.testing import BrokerProcess
from tests.integration.test_cli import rivulet

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def broker():
    b = BrokerProcess().start()
    yield b
    b.cleanup()


def ok(*args: str) -> str:
    r = rivulet(*args)
    assert r.returncode == 0, r.stderr
    assert "\x1b[" not in r.stdout + r.stderr, "no terminal codes when piped"
    return r.stdout


def as_json(*args: str) -> object:
    return json.loads(ok(*args, "--format", "json"))


def test_json_formats_of_topics_groups_cluster_configs_and_offsets(broker):
    b = ("-b", broker.bootstrap)
    topic, group = f"fmt-{uuid.uuid4().hex[:8]}", f"fmt-group-{uuid.uuid4().hex[:6]}"
    ok("topics", "create", *b, "--topic", topic, "--partitions", "3", "--config", "retention.ms=3600000")
    # Generated records, piped: the summary on stderr, nothing on stdout, no progress bar.
    assert ok("produce", *b, "-t", topic, "--random", "300", "--keys", "30") == ""
    ok("consume", *b, "-t", topic, "-G", group, "-o", "beginning", "-c", "300", "-q", "-f", "%o\\n")

    assert topic in as_json("topics", "list", *b)
    (described,) = as_json("topics", "describe", *b, "--topic", topic)
    assert described["name"] == topic and described["partition_count"] == 3
    assert described["configs"] == {"retention.ms": "3600000"}
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2]
    assert all(p["leader"] == 1 and p["isr"] == [1] for p in described["partitions"])

    assert {"group": group, "protocol_type": "consumer", "state": "Empty"} in as_json("groups", "list", *b)
    rows = as_json("groups", "describe", *b, "--group", group)
    assert [(r["topic"], r["partition"]) for r in rows] == [(topic, 0), (topic, 1), (topic, 2)]
    assert sum(r["current_offset"] for r in rows) == 300
    assert all(r["lag"] == 0 and r["consumer_id"] is None for r in rows)
    state = as_json("groups", "describe", *b, "--group", group, "--state")
    assert state["group"] == group and state["state"] == "Empty" and state["members"] == 0
    assert state["coordinator"]["id"] == 1 and state["coordinator"]["port"] == broker.port
    assert as_json("groups", "describe", *b, "--group", group, "--members") == []

    # The Kafka-compatible text layout is unchanged by the formats.
    text = ok("groups", "describe", *b, "--group", group).splitlines()
    assert text[:2] == ["", f"Consumer group '{group}' has no active members."]
    assert text[3].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                               "CONSUMER-ID", "HOST", "CLIENT-ID"]
    assert [line.split()[-3:] for line in text[4:]] == [["-", "-", "-"]] * 3

    # reset-offsets over every partition, piped: its table only, no progress.
    reset = ok("groups", "reset-offsets", *b, "--group", group, "--topic", topic, "--to-earliest", "--execute")
    assert reset.splitlines()[1].split() == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert [r["lag"] for r in as_json("groups", "describe", *b, "--group", group)] == \
        [r["log_end_offset"] for r in rows]

    info = as_json("cluster", "info", *b)
    assert info["controller_id"] == 1 and info["brokers"] == [
        {"id": 1, "host": "127.0.0.1", "port": broker.port, "rack": None}]
    configs = as_json("configs", "describe", *b, "--entity-type", "topics", "--entity-name", topic)
    assert {"name": "retention.ms", "value": "3600000", "source": "DYNAMIC_TOPIC_CONFIG"} in configs
    offsets = as_json("offsets", "get", *b, "--topic", topic)
    assert [(o["partition"], o["start_offset"]) for o in offsets] == [(0, 0), (1, 0), (2, 0)]
    assert sum(o["end_offset"] for o in offsets) == 300


def _with_terminal_stderr(*args: str) -> tuple[int, str, str]:
    """Runs the CLI with stderr on a pseudo-terminal and stdout piped: (exit code, stdout, what
    the terminal got)."""
    import os
    import subprocess
    import sys
    primary, secondary = os.openpty()
    try:
        done = subprocess.run([sys.executable, "-m", "rivulet", *args], stdout=subprocess.PIPE, stderr=secondary,
                              stdin=subprocess.DEVNULL, timeout=120, env={**os.environ, "COLUMNS": "100"})
        os.close(secondary)
        shown = b""
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # EIO: nothing more from the terminal
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(primary)
    return done.returncode, done.stdout.decode(), shown.decode(errors="replace")


def test_progress_shows_on_a_terminal_and_leaves_stdout_as_it_was(broker):
    b = ("-b", broker.bootstrap)
    topic, group = f"prog-{uuid.uuid4().hex[:8]}", f"prog-group-{uuid.uuid4().hex[:6]}"
    ok("topics", "create", *b, "--topic", topic, "--partitions", "4")
    rc, out, shown = _with_terminal_stderr("produce", *b, "-t", topic, "--random", "2000")
    assert rc == 0 and out == ""
    assert "producing to" in shown and "records produced" in shown
    ok("consume", *b, "-t", topic, "-G", group, "-o", "beginning", "-c", "2000", "-q", "-f", "%o\\n")
    reset = ("groups", "reset-offsets", *b, "--group", group, "--topic", topic, "--to-earliest", "--dry-run")
    rc, out, shown = _with_terminal_stderr(*reset)
    assert rc == 0 and "planning" in shown
    assert out == ok(*reset)  # byte for byte what a script reads
