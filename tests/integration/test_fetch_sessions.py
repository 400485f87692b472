"""Rivulet's consumer in fetch sessions (KIP-227) against real brokers: Apache Kafka 4.3.1
(benchmarks/reference/kafka.py), which keeps sessions, and Rivulet's own broker, which may or may
not (one answering session id 0 gets full fetches throughout). Either way every record is read,
across a partition paused (forgotten by the session) and resumed (added back).
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from rivulet import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from rivulet.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conftest import kafka_reference  # noqa: E402  (tests/ on the path above)

if TYPE_CHECKING:
    from benchmarks.reference.kafka import KafkaReference

pytestmark = pytest.mark.integration

PARTITIONS, ROUNDS, PER_ROUND = 3, 6, 50


@dataclass
class Seen:
    session_ids: set[int]
    incremental_requests: int
    sessions_left: int


def consume_in_sessions(bootstrap: str) -> Seen:
    """Produce in rounds while one consumer reads them, pausing partition 2 for two rounds;
    assert every record is read once, in order; report what the consumer's sessions did."""
    topic = f"fs-{uuid.uuid4().hex[:8]}"
    a = AdminClient({"bootstrap.servers": bootstrap})
    a.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    a.close()
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    c = Consumer({"bootstrap.servers": bootstrap, "fetch.wait.max.ms": 100, "enable.partition.eof": False})
    c.assign([TopicPartition(topic, q, OFFSET_BEGINNING) for q in range(PARTITIONS)])
    fetcher = c._aio.fetcher
    got: dict[int, list[int]] = {q: [] for q in range(PARTITIONS)}
    session_ids: set[int] = set()
    paused = [TopicPartition(topic, 2)]
    for r in range(ROUNDS):
        if r == 2:
            c.pause(paused)
        if r == 4:
            c.resume(paused)
        for i in range(PER_ROUND):
            for q in range(PARTITIONS):
                p.produce(topic, f"{r * PER_ROUND + i}".encode(), partition=q)
        assert p.flush(30) == 0
        want = (r + 1) * PER_ROUND
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(
                len(got[q]) < want for q in range(PARTITIONS) if q != 2 or not 2 <= r < 4):
            for m in c.consume(200, 0.2):
                assert m.error() is None, m.error()
                got[m.partition()].append(int(m.value()))
            session_ids.update(s.session_id for s in list(fetcher.sessions.values()))
        if 2 <= r < 4:
            assert len(got[2]) <= 2 * PER_ROUND  # paused: nothing past what came before
    p.close()
    incremental = sum(s.incremental_requests for s in list(fetcher.sessions.values()))
    c.close()
    assert got == {q: list(range(ROUNDS * PER_ROUND)) for q in range(PARTITIONS)}
    return Seen(session_ids, incremental, len(fetcher.sessions))


def test_rivulet_broker_with_or_without_sessions(broker):
    seen = consume_in_sessions(broker.bootstrap)
    if seen.session_ids == {0}:  # a broker that keeps no session: full fetches only
        assert seen.incremental_requests == 0
    else:
        assert seen.incremental_requests > 0
    assert seen.sessions_left == 0


@pytest.fixture(scope="module")
def kafka(java: None) -> Iterator[KafkaReference]:
    with kafka_reference() as ref:
        yield ref


@pytest.mark.java
def test_kafka_keeps_a_session_and_gets_incremental_fetches(kafka):
    seen = consume_in_sessions(kafka.bootstrap)
    assert seen.session_ids - {0}, "Kafka gave the consumer no fetch session"
    assert seen.incremental_requests > 0
    assert seen.sessions_left == 0
