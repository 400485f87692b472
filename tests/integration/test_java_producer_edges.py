"""Kafka's Java producer at edges where Rivulet once answered unlike Kafka 4.3.1
(tests/java/ProducerEdges.java; every expected line is what the probe printed against a
Kafka 4.3.1 broker)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.java]

SOURCE = Path(__file__).resolve().parents[1] / "java" / "ProducerEdges.java"


def test_java_producer_edges_answer_as_kafka(java, broker):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import java_tools as jt

    run = uuid.uuid4().hex[:8]
    p = subprocess.run(jt.program_command(SOURCE, [broker.bootstrap, run]), capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = p.stdout.splitlines()
    assert lines == [
        "acks-all-min-isr-above-replicas ok",
        "keyless-to-compacted InvalidRecordException: Compacted topic cannot accept message without key in topic "
        "partition compact-R-0",
        "polled 1",
        "send-offsets-stale-epoch CommitFailedException: Transaction offset Commit failed due to consumer group "
        "metadata mismatch: Specified group generation id is not valid.",
        "abort ok",
        "next-transaction ok",
        "committed 1",
    ], p.stdout + p.stderr[-3000:]
