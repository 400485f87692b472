"""The confluent-kafka drop-in test: one script, run with ``confluent_kafka`` and with ``rivulet``
as the module, against a real broker. Keyed records with default settings must land on the
same partitions; purge(), stats_cb and the serializing clients must behave alike."""

from __future__ import annotations

import importlib
import json
import time
import uuid
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.integration

PARTITIONS = 6


def script(kafka: ModuleType, serialization: ModuleType, bootstrap: str, topic: str) -> dict[str, Any]:
    """What a confluent-kafka user writes; only ``kafka`` and ``serialization`` differ."""
    out: dict[str, Any] = {}
    admin = importlib.import_module(kafka.__name__ + ".admin")
    a = admin.AdminClient({"bootstrap.servers": bootstrap})
    ser_topic = topic + "-ser"
    for f in a.create_topics([admin.NewTopic(topic, PARTITIONS, 1), admin.NewTopic(ser_topic, 1, 1)]).values():
        f.result(30)

    # Keyed records, default settings.
    stats: list[str] = []
    reports: list[Any] = []
    p = kafka.Producer({"bootstrap.servers": bootstrap, "statistics.interval.ms": 200, "stats_cb": stats.append})
    for i in range(120):
        p.produce(topic, value=b"v", key=f"user-{i}".encode(), on_delivery=lambda e, m: reports.append((e, m)))
    assert p.flush(30) == 0
    assert all(e is None for e, _ in reports)
    out["partitions"] = {m.key(): m.partition() for _, m in reports}
    deadline = time.monotonic() + 30
    while not stats and time.monotonic() < deadline:
        p.poll(0.1)
    out["stats"] = json.loads(stats[-1])

    # purge(): queued records are reported as purged by the next flush().
    purged: list[Any] = []
    q = kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 60000})
    for i in range(5):
        q.produce(topic, value=b"x", key=b"k", on_delivery=lambda e, m: purged.append(e))
    q.purge(in_queue=True, in_flight=False)
    q.flush(10)
    out["purged"] = [e.code() for e in purged]
    out["purge_queue_code"] = kafka.KafkaError._PURGE_QUEUE
    q.purge()  # nothing left: a no-op

    # SerializingProducer / DeserializingConsumer.
    sp = kafka.SerializingProducer({"bootstrap.servers": bootstrap, "key.serializer": serialization.StringSerializer(),
                                    "value.serializer": serialization.IntegerSerializer()})
    sp.produce(ser_topic, key="serialized", value=42)
    assert sp.flush(30) == 0
    dc = kafka.DeserializingConsumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                                      "key.deserializer": serialization.StringDeserializer(),
                                      "value.deserializer": serialization.IntegerDeserializer()})
    dc.assign([kafka.TopicPartition(ser_topic, 0, kafka.OFFSET_BEGINNING)])
    got = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not got:
        m = dc.poll(0.5)
        if m is not None:
            got.append((m.key(), m.value()))
    dc.close()
    out["deserialized"] = got

    # A consumer's stats_cb, served by poll().
    cstats: list[str] = []
    c = kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"s-{uuid.uuid4().hex[:6]}",
                        "statistics.interval.ms": 200, "stats_cb": cstats.append, "auto.offset.reset": "earliest"})
    c.assign([kafka.TopicPartition(topic, p, kafka.OFFSET_BEGINNING) for p in range(PARTITIONS)])
    n = 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (n < 120 or not cstats or json.loads(cstats[-1])["rxmsgs"] < 120):
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            n += 1
    c.close()
    out["consumer_stats"] = json.loads(cstats[-1])
    return out


@pytest.fixture(scope="module")
def both(broker):
    ck = script(importlib.import_module("confluent_kafka"), importlib.import_module("confluent_kafka.serialization"),
                broker.bootstrap, f"ck-{uuid.uuid4().hex[:8]}")
    rv = script(importlib.import_module("rivulet"), importlib.import_module("rivulet.serialization"),
                broker.bootstrap, f"rv-{uuid.uuid4().hex[:8]}")
    return ck, rv


def test_keyed_records_land_on_the_same_partitions(both):
    ck, rv = both
    assert rv["partitions"] == ck["partitions"]
    assert len(set(rv["partitions"].values())) == PARTITIONS


def test_purge_reports_purge_queue(both):
    ck, rv = both
    assert rv["purged"] == ck["purged"] == [ck["purge_queue_code"]] * 5
    assert rv["purge_queue_code"] == ck["purge_queue_code"]


def test_serializing_clients(both):
    ck, rv = both
    assert rv["deserialized"] == ck["deserialized"] == [("serialized", 42)]


def test_stats_have_librdkafkas_shape(both):
    ck, rv = both
    theirs, ours = ck["stats"], rv["stats"]
    for key in ("name", "client_id", "type", "ts", "time", "msg_cnt", "msg_size", "txmsgs", "txmsg_bytes",
                "rxmsgs", "rxmsg_bytes", "brokers", "topics"):
        assert key in ours and type(ours[key]) is type(theirs[key]), key
    # Every field Rivulet gives is one librdkafka gives, with the same type.
    assert set(ours) <= set(theirs)
    assert ours["type"] == theirs["type"] == "producer"
    assert ours["txmsgs"] == theirs["txmsgs"] == 120
    ck_broker = next(b for b in theirs["brokers"].values() if b["nodeid"] >= 0)
    for b in ours["brokers"].values():
        assert set(b) <= set(ck_broker) and all(type(b[k]) is type(ck_broker[k]) for k in b if k != "toppars")
        assert b["state"] == "UP"
    (ck_topic,), (our_topic,) = theirs["topics"].values(), ours["topics"].values()
    assert set(our_topic) <= set(ck_topic)
    assert set(our_topic["partitions"]) == {str(p) for p in range(PARTITIONS)}
    ck_part = ck_topic["partitions"]["0"]
    for part in our_topic["partitions"].values():
        assert set(part) <= set(ck_part) and all(type(part[k]) is type(ck_part[k]) for k in part)
    assert sum(p["txmsgs"] for p in our_topic["partitions"].values()) == 120


def test_consumer_stats_have_librdkafkas_shape(both):
    ck, rv = both
    theirs, ours = ck["consumer_stats"], rv["consumer_stats"]
    assert set(ours) <= set(theirs)
    assert ours["type"] == theirs["type"] == "consumer"
    assert ours["rxmsgs"] == theirs["rxmsgs"] == 120
    (ck_topic,), (our_topic,) = theirs["topics"].values(), ours["topics"].values()
    ck_part = ck_topic["partitions"]["0"]
    for part in our_topic["partitions"].values():
        assert set(part) <= set(ck_part) and all(type(part[k]) is type(ck_part[k]) for k in part), part
    assert sum(p["rxmsgs"] for p in our_topic["partitions"].values()) == 120
    assert all(p["hi_offset"] == p["app_offset"] for p in our_topic["partitions"].values())
