"""Real clients produce and consume against a real broker process; bytes must match exactly.

Consumers here use manual assignment, so these tests exercise Produce, Fetch, ListOffsets and
Metadata without a group coordinator.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import uuid

import pytest
from ck_helpers import ck_consume, ck_produce

pytestmark = pytest.mark.integration

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def make_records(n: int, size: int = 100, seed: int = 0) -> list[dict]:
    """Keys, null keys, tombstones, headers and explicit timestamps, mixed."""
    base_ts = 1_700_000_000_000
    out = []
    for i in range(n):
        value_is_null = i % 11 == 5  # a tombstone always carries a key
        key = None if i % 7 == 3 and not value_is_null else f"key-{i % 13}".encode()
        value = None if value_is_null else (f"{seed}-{i}-".encode() + bytes((i * 31 + j) % 256 for j in range(size)))
        headers = [("h1", f"v{i}".encode()), ("empty", b"")] if i % 3 == 0 else []
        out.append({"key": key, "value": value, "headers": headers, "timestamp": base_ts + i})
    return out


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# ---------------------------------------------------------------- confluent-kafka





def normalize(recs: list[dict]) -> list[tuple]:
    return [(r["key"], r["value"], [(k, v) for k, v in r["headers"]], r["timestamp"]) for r in recs]


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka_round_trip(broker, codec):
    topic = topic_name(f"ck-{codec}")
    records = make_records(500)
    ck_produce(broker.bootstrap, topic, records, **{"compression.type": codec})
    got = ck_consume(broker.bootstrap, topic, len(records))
    assert normalize(got) == normalize(records)
    assert [r["offset"] for r in got] == list(range(len(records)))


def test_confluent_kafka_many_partitions(broker):
    from confluent_kafka.admin import AdminClient, NewTopic
    topic = topic_name("ck-many")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=64, replication_factor=1)])[topic].result(30)
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(64 * 10):
        p.produce(topic, value=f"v{i}".encode(), partition=i % 64)
    assert p.flush(30) == 0
    for part in (0, 31, 63):
        got = ck_consume(broker.bootstrap, topic, 10, partition=part)
        assert [g["value"] for g in got] == [f"v{i}".encode() for i in range(part, 640, 64)]


def test_messages_near_message_max_bytes(broker):
    topic = topic_name("ck-big")
    # The default message.max.bytes is 1048588; a 1,000,000-byte value fits with its batch overhead.
    big = [{"key": b"k", "value": bytes(range(256)) * 3906 + b"1234", "headers": [], "timestamp": 1_700_000_000_000}]
    ck_produce(broker.bootstrap, topic, big, **{"message.max.bytes": 2_000_000})
    got = ck_consume(broker.bootstrap, topic, 1)
    assert got[0]["value"] == big[0]["value"]


def test_too_large_message_is_rejected(broker):
    from confluent_kafka import KafkaError, Producer
    topic = topic_name("ck-toolarge")
    p = Producer({"bootstrap.servers": broker.bootstrap, "message.max.bytes": 3_000_000})
    errors = []
    p.produce(topic, value=b"x" * 1_100_000, on_delivery=lambda err, msg: errors.append(err))
    p.flush(30)
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE


# ---------------------------------------------------------------- kafka-python

@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_round_trip(broker, codec):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    topic = topic_name(f"kp-{codec}")
    records = make_records(300, seed=1)
    prod = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=None if codec == "none" else codec,
                         linger_ms=5, acks=1, enable_idempotence=False)
    futures = [prod.send(topic, value=r["value"], key=r["key"], partition=0, headers=r["headers"],
                         timestamp_ms=r["timestamp"]) for r in records]
    prod.flush(30)
    offsets = [f.get(30).offset for f in futures]
    assert offsets == list(range(len(records)))
    prod.close()
    cons = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, group_id=None,
                         consumer_timeout_ms=10000)
    tp = TopicPartition(topic, 0)
    cons.assign([tp])
    cons.seek_to_beginning(tp)
    got = []
    for m in cons:
        got.append({"key": m.key, "value": m.value, "headers": list(m.headers), "timestamp": m.timestamp})
        if len(got) == len(records):
            break
    cons.close()
    assert normalize(got) == normalize(records)


# ---------------------------------------------------------------- aiokafka

@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_aiokafka_round_trip(broker, codec):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition
    topic = topic_name(f"aio-{codec}")
    records = make_records(300, seed=2)

    async def run():
        prod = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5, acks=1,
                                compression_type=None if codec == "none" else codec)
        await prod.start()
        try:
            for r in records:
                await prod.send(topic, value=r["value"], key=r["key"], partition=0, headers=r["headers"],
                                timestamp_ms=r["timestamp"])
            await prod.flush()
        finally:
            await prod.stop()
        cons = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
        await cons.start()
        try:
            tp = TopicPartition(topic, 0)
            cons.assign([tp])
            await cons.seek_to_beginning(tp)
            got = []
            while len(got) < len(records):
                batch = await asyncio.wait_for(cons.getmany(tp, timeout_ms=1000), 30)
                for m in batch.get(tp, []):
                    got.append({"key": m.key, "value": m.value, "headers": list(m.headers),
                                "timestamp": m.timestamp})
            return got
        finally:
            await cons.stop()

    got = asyncio.run(run())
    assert normalize(got) == normalize(records)


# ---------------------------------------------------------------- kcat

def kcat() -> str:
    path = shutil.which("kcat") or shutil.which("kafkacat")
    if path is None:
        pytest.fail("kcat is not installed (.ci/run installs it with apt-get)")
    return path


@pytest.mark.parametrize("codec", CODECS)
def test_kcat_round_trip(broker, codec):
    topic = topic_name(f"kcat-{codec}")
    lines = [f"key{i}\tvalue-{i}-" + "x" * (i % 50) for i in range(200)]
    subprocess.run([kcat(), "-b", broker.bootstrap, "-P", "-t", topic, "-p", "0", "-K", "\t", "-z", codec],
                   input="\n".join(lines) + "\n", text=True, check=True, timeout=60)
    out = subprocess.run([kcat(), "-b", broker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e",
                          "-f", "%k\t%s\n"], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.splitlines() == lines


def test_cross_client_bytes_identical(broker):
    """What confluent-kafka writes, kafka-python reads byte for byte (and the offsets agree)."""
    from kafka import KafkaConsumer, TopicPartition
    topic = topic_name("cross")
    records = make_records(200, size=1000, seed=3)
    ck_produce(broker.bootstrap, topic, records, **{"compression.type": "lz4"})
    cons = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, consumer_timeout_ms=10000)
    tp = TopicPartition(topic, 0)
    cons.assign([tp])
    cons.seek_to_beginning(tp)
    got = []
    for m in cons:
        got.append({"key": m.key, "value": m.value, "headers": list(m.headers), "timestamp": m.timestamp})
        if len(got) == len(records):
            break
    cons.close()
    assert normalize(got) == normalize(records)
