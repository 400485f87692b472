"""Rivulet's client against the real Apache Kafka broker (benchmarks/reference/kafka.py).

The reference broker has every feature the client uses (idempotence, the classic group
protocol, admin APIs), so this checks the client against the implementation it imitates,
independently of Rivulet's broker. Skipped, with the reason printed, when Java, Maven or
Maven Central is unavailable.
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conftest import kafka_reference  # noqa: E402  (tests/ on the path above)

if TYPE_CHECKING:
    from benchmarks.reference.kafka import KafkaReference

pytestmark = [pytest.mark.java, pytest.mark.integration]


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def kafka(java: None) -> Iterator[KafkaReference]:
    with kafka_reference({"num.partitions": "3"}) as ref:
        yield ref


def test_round_trip_with_idempotence(kafka):
    from rivulet import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    from rivulet.client.producer.partitioner import murmur2_partition
    topic = name("j-rt")
    p = Producer({"bootstrap.servers": kafka.bootstrap, "compression.type": "zstd", "partitioner": "murmur2_random"})
    reports = []
    for i in range(300):
        p.produce(topic, f"v{i}".encode(), key=f"k{i % 10}".encode(), headers=[("i", str(i).encode())],
                  on_delivery=lambda err, msg: reports.append((err, msg)))
    assert p.flush(60) == 0
    assert p._aio.idem.enabled and p._aio.idem.producer_id >= 0
    p.close()
    assert all(err is None for err, _ in reports)
    assert all(m.partition() == murmur2_partition(m.key(), 3) for _, m in reports)
    c = Consumer({"bootstrap.servers": kafka.bootstrap})
    c.assign([TopicPartition(topic, q, OFFSET_BEGINNING) for q in range(3)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 300 and time.monotonic() < deadline:
        got += [m for m in c.consume(100, 0.5) if m.error() is None]
    c.close()
    assert sorted(int(m.value()[1:]) for m in got) == list(range(300))
    assert all(m.headers() == [("i", m.value()[1:])] for m in got)


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_group_rebalances_on_kafka(kafka, strategy):
    from rivulet import Consumer, Producer
    topic, group = name(f"j-g-{strategy}"), name("g")
    p = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 2})
    conf = {"bootstrap.servers": kafka.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "partition.assignment.strategy": strategy, "heartbeat.interval.ms": 300,
            "auto.commit.interval.ms": 200}
    seen: list = []
    stops = []

    def member() -> threading.Thread:
        stop = threading.Event()

        def run() -> None:
            c = Consumer(conf)
            c.subscribe([topic])
            while not stop.is_set():
                for m in c.consume(100, 0.2):
                    if m.error() is None:
                        seen.append((m.partition(), m.offset()))
            c.close()
        t = threading.Thread(target=run, daemon=True)
        t.start()
        stops.append((stop, t))
        return t
    total = 0
    for _ in range(3):
        member()
        for _ in range(100):
            p.produce(topic, str(total).encode(), key=str(total).encode())
            total += 1
        p.flush(30)
        time.sleep(1.0)
    stop, t = stops.pop(0)
    stop.set()
    t.join(30)
    for _ in range(100):
        p.produce(topic, str(total).encode(), key=str(total).encode())
        total += 1
    p.flush(30)
    p.close()
    deadline = time.monotonic() + 60
    while len(set(seen)) < total and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)
    for stop, t in stops:
        stop.set()
        t.join(30)
    assert len(set(seen)) == total
    assert len(seen) == total, "records consumed twice"


def test_admin_on_kafka(kafka):
    from rivulet import Consumer, Producer, TopicPartition
    from rivulet.admin import AdminClient, ConfigResource, NewPartitions, NewTopic, OffsetSpec, ResourceType
    a = AdminClient({"bootstrap.servers": kafka.bootstrap})
    topic = name("j-adm")
    a.create_topics([NewTopic(topic, 2, 1, config={"retention.ms": "100000"})])[topic].result(30)
    a.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
    res = ConfigResource(ResourceType.TOPIC, topic)
    assert a.describe_configs([res])[res].result(30)["retention.ms"].value == "100000"
    p = Producer({"bootstrap.servers": kafka.bootstrap})
    for _ in range(10):
        p.produce(topic, b"x", partition=0)
    p.flush(30)
    p.close()
    tp = TopicPartition(topic, 0)
    assert a.list_offsets({tp: OffsetSpec.latest()})[tp].result(30).offset == 10
    assert a.delete_records([TopicPartition(topic, 0, 3)])[tp].result(30).low_watermark == 3
    group = name("j-adm-g")
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    deadline = time.monotonic() + 30
    n = 0
    while n < 7 and time.monotonic() < deadline:
        n += len([m for m in c.consume(10, 0.5) if m.error() is None])
    c.commit(asynchronous=False)
    desc = a.describe_consumer_groups([group])[group].result(30)
    assert len(desc.members) == 1 and desc.partition_assignor == "range"
    c.close()
    assert a.delete_topics([topic])[topic].result(30) is None
    a.close()


def test_idempotent_producer_across_a_kafka_restart(kafka):
    """Kafka keeps producer state across restarts: retried batches are not written twice."""
    from rivulet import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    topic = name("j-restart")
    p = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 5, "request.timeout.ms": 5000,
                  "retry.backoff.ms": 100, "delivery.timeout.ms": 180000})
    errors = []
    for i in range(500):
        p.produce(topic, str(i).encode(), partition=0, on_delivery=lambda err, msg: errors.append(err) if err else 0)
    assert p.flush(60) == 0
    kafka.stop()
    for i in range(500, 1000):
        p.produce(topic, str(i).encode(), partition=0, on_delivery=lambda err, msg: errors.append(err) if err else 0)
    kafka.start()
    assert p.flush(120) == 0
    p.close()
    assert errors == []
    c = Consumer({"bootstrap.servers": kafka.bootstrap})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < 1000 and time.monotonic() < deadline:
        got += [m.value() for m in c.consume(200, 0.5) if m.error() is None]
    c.close()
    assert [int(v) for v in got] == list(range(1000))
    assert not [v for v, k in Counter(got).items() if k > 1]
