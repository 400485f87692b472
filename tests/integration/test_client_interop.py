"""Rivulet's client against confluent-kafka (librdkafka), both ways, on a real broker.

Bytes, headers, timestamps and offsets must come through identical, the same key must land on
the same partition (confluent-kafka with ``partitioner=murmur2_random``, Java's algorithm), and
a consumer group may mix members of both clients.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from ck_helpers import ck_consume, ck_produce

from rivulet import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from rivulet.client.errors import KafkaError
from rivulet.testing import BrokerProcess

pytestmark = pytest.mark.integration

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def make_records(n: int, seed: int = 0) -> list[dict]:
    base_ts = 1_700_000_000_000
    out = []
    for i in range(n):
        tomb = i % 11 == 5
        key = None if i % 7 == 3 and not tomb else f"key-{i % 13}".encode()
        value = None if tomb else f"{seed}-{i}-".encode() + bytes((i * 31 + j) % 256 for j in range(200))
        headers = [("h1", f"v{i}".encode()), ("empty", b"")] if i % 3 == 0 else []
        out.append({"key": key, "value": value, "headers": headers, "timestamp": base_ts + i})
    return out


def normalize(recs: list[dict]) -> list[tuple]:
    return [(r["key"], r["value"], [(k, v) for k, v in r["headers"]], r["timestamp"]) for r in recs]


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from rivulet.admin import AdminClient, NewTopic
    a = AdminClient({"bootstrap.servers": bootstrap})
    a.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    a.close()


def rivulet_produce(bootstrap: str, topic: str, records: list[dict], partition: int | None = 0, **conf) -> list:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    reports = []
    for r in records:
        p.produce(topic, r["value"], r["key"], partition=partition, headers=r["headers"] or None,
                  timestamp=r["timestamp"], on_delivery=lambda err, msg: reports.append((err, msg)))
    assert p.flush(30) == 0
    p.close()
    assert [e for e, _ in reports if e is not None] == []
    return [m for _, m in reports]


def rivulet_consume(bootstrap: str, topic: str, count: int, partition: int = 0, timeout: float = 30) -> list[dict]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        for m in c.consume(500, 0.5):
            assert m.error() is None, m.error()
            out.append({"key": m.key(), "value": m.value(), "headers": list(m.headers() or []),
                        "timestamp": m.timestamp()[1], "offset": m.offset()})
    c.close()
    return out






@pytest.mark.parametrize("codec", CODECS)
def test_rivulet_to_confluent(broker, codec):
    topic = topic_name(f"r2c-{codec}")
    records = make_records(300)
    reports = rivulet_produce(broker.bootstrap, topic, records, **{"compression.type": codec})
    assert [m.offset() for m in reports] == list(range(len(records)))
    got = ck_consume(broker.bootstrap, topic, len(records))
    assert normalize(got) == normalize(records)
    assert [g["offset"] for g in got] == list(range(len(records)))


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_to_rivulet(broker, codec):
    topic = topic_name(f"c2r-{codec}")
    records = make_records(300, seed=1)
    ck_produce(broker.bootstrap, topic, records, **{"compression.type": codec})
    got = rivulet_consume(broker.bootstrap, topic, len(records))
    assert normalize(got) == normalize(records)
    assert [g["offset"] for g in got] == list(range(len(records)))


@pytest.mark.parametrize("partitioner", [None, "murmur2_random", "murmur2", "consistent_random", "consistent",
                                         "fnv1a_random", "fnv1a"])
def test_same_key_same_partition_as_librdkafka(broker, partitioner):
    """Each librdkafka partitioner, and both clients' defaults (None), place every key alike."""
    parts = 7
    ours, theirs = topic_name("part-r"), topic_name("part-c")
    create_topic(broker.bootstrap, ours, parts)
    create_topic(broker.bootstrap, theirs, parts)
    keys = [f"user-{i}".encode() for i in range(200)] + [b"", b"\x00\xff", "ünï".encode()]
    records = [{"key": k, "value": b"v", "headers": [], "timestamp": 1_700_000_000_000} for k in keys]
    conf = {} if partitioner is None else {"partitioner": partitioner}
    reports = rivulet_produce(broker.bootstrap, ours, records, partition=None, **conf)
    mine = {m.key(): m.partition() for m in reports}
    ck_produce(broker.bootstrap, theirs, records, partition=None, **conf)
    from confluent_kafka import Consumer as CKConsumer
    from confluent_kafka import TopicPartition as CKTopicPartition
    c = CKConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "x", "enable.auto.commit": False})
    c.assign([CKTopicPartition(theirs, p, 0) for p in range(parts)])
    got: dict[bytes, int] = {}
    deadline = time.monotonic() + 30
    while len(got) < len(keys) and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got[m.key()] = m.partition()
    c.close()
    if partitioner in (None, "consistent_random"):  # an empty key is "no key" there: any partition
        del got[b""], mine[b""]
    assert got == mine
    assert len(set(mine.values())) == parts


def _wait_settled(bootstrap: str, group: str, parts: int, members: int) -> None:
    """Until the group is Stable with ``members`` members owning all ``parts`` partitions."""
    from rivulet.admin import AdminClient, ConsumerGroupState
    a = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 60
    try:
        while True:
            d = a.describe_consumer_groups([group])[group].result(30)
            owned = sum(len(m.assignment.topic_partitions) for m in d.members)
            if d.state == ConsumerGroupState.STABLE and len(d.members) == members and owned == parts:
                return
            assert time.monotonic() < deadline, f"group did not settle: {d.state}, {len(d.members)} members, {owned}"
            time.sleep(0.2)
    finally:
        a.close()


def _member_thread(kind: str, bootstrap: str, group: str, topic: str, seen: list, stop: threading.Event,
                   ready: threading.Event, strategy: str) -> threading.Thread:
    def run() -> None:
        conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                "partition.assignment.strategy": strategy, "session.timeout.ms": 10000,
                "heartbeat.interval.ms": 500, "auto.commit.interval.ms": 200}
        if kind == "ck":
            from confluent_kafka import Consumer as CKConsumer
            c = CKConsumer(conf)
        else:
            c = Consumer(conf)
        c.subscribe([topic])
        ready.set()
        while not stop.is_set():
            m = c.poll(0.2)
            if m is None or m.error() is not None:
                continue
            seen.append((kind, m.partition(), m.offset()))
        c.close()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("first", ["rivulet", "ck"])
@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_mixed_group_consumes_each_record_once(broker, strategy, first):
    """Members of both clients join and leave one group while records keep arriving. The first
    to join leads (runs the assignor) until it leaves; ``first`` picks which client that is."""
    topic = topic_name(f"mixed-{strategy}")
    group = topic_name("mixed-g")
    parts = 6
    create_topic(broker.bootstrap, topic, parts)
    seen: list = []
    produced = 0
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 2})

    def produce(n: int) -> None:
        nonlocal produced
        for _ in range(n):
            p.produce(topic, f"v{produced}".encode(), key=f"k{produced}".encode())
            produced += 1
        assert p.flush(30) == 0
        time.sleep(0.3)

    members = []
    other = "ck" if first == "rivulet" else "rivulet"
    for kind in (first, other, first, other):
        stop, ready = threading.Event(), threading.Event()
        members.append((stop, _member_thread(kind, broker.bootstrap, group, topic, seen, stop, ready, strategy)))
        assert ready.wait(30)
        produce(150)
    # One of each leaves; the rest take over their partitions. A member leaves only once the
    # group has settled: one closing while its rejoin is answered commits too late (its
    # OffsetCommit waits behind the JoinGroup on its connection, as Kafka's broker reads one
    # request at a time per connection, and finds the next generation), and its last records are
    # read again by their next owner: at least once, as with Kafka.
    for stop, t in (members[0], members[1]):
        _wait_settled(broker.bootstrap, group, parts, len([m for m in members if not m[0].is_set()]))
        stop.set()
        t.join(30)
        produce(150)
    deadline = time.monotonic() + 60
    while len(seen) < produced and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)  # anything consumed twice would show up now
    for stop, t in members[2:]:
        stop.set()
        t.join(30)
    p.close()
    positions = [(part, off) for _, part, off in seen]
    assert len(set(positions)) == produced, f"missing {produced - len(set(positions))} records"
    assert len(positions) == produced, "some records were consumed twice"
    kinds = {k for k, _, _ in seen}
    assert kinds == {"rivulet", "ck"}


def test_rivulet_consumer_sees_partition_eof_like_librdkafka(broker):
    topic = topic_name("eof")
    rivulet_produce(broker.bootstrap, topic, make_records(5))
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "e", "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    msgs = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        msgs.append(m)
        if m.error() is not None:
            break
    c.close()
    assert [m.offset() for m in msgs[:-1]] == list(range(5))
    assert msgs[-1].error().code() == KafkaError._PARTITION_EOF and msgs[-1].offset() == 5


def test_broker_process_fixture_is_what_users_get():
    # rivulet.testing is the documented way to test against Rivulet; the client works with it.
    with BrokerProcess() as b:
        topic = topic_name("bp")
        rivulet_produce(b.bootstrap, topic, make_records(3))
        assert len(rivulet_consume(b.bootstrap, topic, 3)) == 3
