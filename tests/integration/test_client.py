"""Rivulet's own client (sync and asyncio) against a real Rivulet broker process."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import threading
import time
import uuid
import zlib

import pytest

from rivulet import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_CREATE_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    NoOffsetForPartitionError,
    Producer,
    TopicPartition,
)
from rivulet.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConsumerGroupTopicPartitions,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)
from rivulet.aio import AIOConsumer, AIOProducer

pytestmark = pytest.mark.integration

INIT_PRODUCER_ID = 22


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create(bootstrap: str, topic: str, partitions: int = 1, **config: str) -> None:
    a = AdminClient({"bootstrap.servers": bootstrap})
    a.create_topics([NewTopic(topic, partitions, 1, config=config)])[topic].result(30)
    a.close()


def produce(bootstrap: str, topic: str, n: int, partition: int | None = None, key=None, **conf) -> list:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, **conf})
    reports: list = []
    for i in range(n):
        k = key(i) if callable(key) else key
        p.produce(topic, f"v{i}".encode(), k, partition=partition,
                  on_delivery=lambda err, msg: reports.append((err, msg)))
    assert p.flush(30) == 0
    p.close()
    assert all(err is None for err, _ in reports), [err for err, _ in reports if err][:3]
    return [m for _, m in reports]


def drain(c: Consumer, n: int, timeout: float = 30) -> list:
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        for m in c.consume(min(100, n - len(out)), 0.2):
            if m.error() is None:
                out.append(m)
    return out


def broker_supports(bootstrap: str, api_key: int) -> bool:
    from rivulet.client.config import parse_bootstrap
    from rivulet.client.connection import BrokerConnection

    async def probe() -> bool:
        host, port = parse_bootstrap(bootstrap)[0]
        c = await BrokerConnection(host, port).connect()
        try:
            return api_key in c.api_versions
        finally:
            await c.close()
    return asyncio.run(probe())


# ---------------------------------------------------------------- producer


def test_delivery_reports_offsets_and_fields(broker):
    topic = name("dr")
    p = Producer({"bootstrap.servers": broker.bootstrap})
    got = []
    for i in range(50):
        p.produce(topic, value=f"v{i}", key=b"k", headers={"h": b"x", "s": "y"}, timestamp=1_700_000_000_000 + i,
                  partition=0, on_delivery=lambda err, msg: got.append((err, msg)))
    assert len(p) == 50
    assert p.flush(30) == 0 and len(p) == 0
    p.close()
    assert [e for e, _ in got] == [None] * 50
    msgs = [m for _, m in got]
    assert [m.offset() for m in msgs] == list(range(50))
    m = msgs[7]
    assert (m.topic(), m.partition(), m.key(), m.value()) == (topic, 0, b"k", b"v7")
    assert m.timestamp() == (TIMESTAMP_CREATE_TIME, 1_700_000_000_007)
    assert m.headers() == [("h", b"x"), ("s", b"y")]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compression_round_trip(broker, codec):
    topic = name(f"z-{codec}")
    produce(broker.bootstrap, topic, 300, partition=0, **{"compression.type": codec})
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": name("g")})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = drain(c, 300)
    c.close()
    assert [m.value() for m in got] == [f"v{i}".encode() for i in range(300)]


def test_keys_partition_by_their_partitioner_and_null_keys_stick(broker):
    from rivulet.client.producer.partitioner import murmur2_partition
    topic = name("keys")
    create(broker.bootstrap, topic, 5)
    msgs = produce(broker.bootstrap, topic, 200, key=lambda i: f"user-{i % 17}".encode(), partitioner="murmur2_random")
    for m in msgs:
        assert m.partition() == murmur2_partition(m.key(), 5)
    # The default is librdkafka's consistent_random: CRC32 of the key.
    for m in produce(broker.bootstrap, topic, 50, key=lambda i: f"user-{i % 17}".encode()):
        assert m.partition() == zlib.crc32(m.key()) % 5
    # Keyless records fill one partition's batch before moving on (sticky partitioning).
    keyless = produce(broker.bootstrap, topic, 200, **{"batch.num.messages": 50, "linger.ms": 1000})
    runs = 1 + sum(1 for a, b in zip(keyless, keyless[1:]) if a.partition() != b.partition())
    assert runs <= 8
    # A slow producer's batches each go out alone: every new batch moves to another partition.
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    parts = []
    for _ in range(10):
        p.produce(topic, b"slow", on_delivery=lambda err, msg: parts.append(msg.partition()))
        p.flush(10)
    p.close()
    assert all(a != b for a, b in zip(parts, parts[1:]))


def test_flush_and_close_lose_nothing(broker):
    topic = name("noloss")
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50, "queue.buffering.max.messages": 500})
    sent = 0
    for i in range(3000):
        while True:
            try:
                p.produce(topic, str(i).encode(), partition=0)
                break
            except BufferError:  # the confluent-kafka contract: poll, then retry
                p.poll(0.05)
        sent += 1
    assert p.close() == 0
    lo, hi = Consumer({"bootstrap.servers": broker.bootstrap}).get_watermark_offsets(TopicPartition(topic, 0), 10)
    assert hi - lo == sent


def test_queue_full_raises_buffer_error(broker):
    p = Producer({"bootstrap.servers": broker.bootstrap, "queue.buffering.max.messages": 3, "linger.ms": 10000})
    topic = name("full")
    for _ in range(3):
        p.produce(topic, b"x")
    with pytest.raises(BufferError):
        p.produce(topic, b"x")
    assert p.flush(30) == 0
    p.close()


def test_unknown_partition_is_refused(broker):
    topic = name("unk")
    create(broker.bootstrap, topic, 2)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    p.list_topics(topic)
    p.produce(topic, b"x", partition=1)
    p.flush(10)
    with pytest.raises(KafkaException) as ei:
        p.produce(topic, b"x", partition=5)
    assert ei.value.args[0].code() == KafkaError._UNKNOWN_PARTITION
    p.close()


def test_message_too_large_fails_its_delivery(broker):
    topic = name("big")
    p = Producer({"bootstrap.servers": broker.bootstrap, "batch.size": 3_000_000, "max.request.size": 3_000_000})
    errs = []
    p.produce(topic, b"x" * 1_200_000, on_delivery=lambda err, msg: errs.append(err))
    p.flush(30)
    p.close()
    assert len(errs) == 1 and errs[0] is not None and errs[0].code() == KafkaError.MSG_SIZE_TOO_LARGE


def test_acks_zero(broker):
    topic = name("acks0")
    create(broker.bootstrap, topic, 1)
    msgs = produce(broker.bootstrap, topic, 100, partition=0, acks=0)
    assert all(m.offset() < 0 for m in msgs)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        c = Consumer({"bootstrap.servers": broker.bootstrap})
        _, hi = c.get_watermark_offsets(TopicPartition(topic, 0), 10)
        c.close()
        if hi == 100:
            break
        time.sleep(0.1)
    assert hi == 100


def test_idempotence_is_on_when_the_broker_supports_it(broker):
    assert broker_supports(broker.bootstrap, INIT_PRODUCER_ID)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    p.produce(name("idem"), b"x", partition=0)
    assert p.flush(30) == 0
    assert p._aio.idem.enabled and p._aio.idem.producer_id >= 0
    p.close()


def test_idempotence_falls_back_when_the_broker_lacks_init_producer_id(broker, caplog, monkeypatch):
    from rivulet.client.connection import BrokerConnection
    # Hide the API from the client, as a broker without it would.
    real = BrokerConnection.has_api
    monkeypatch.setattr(BrokerConnection, "has_api", lambda self, key: key != INIT_PRODUCER_ID and real(self, key))
    topic = name("idem-fallback")
    with caplog.at_level(logging.INFO, logger="rivulet.producer"):
        p = Producer({"bootstrap.servers": broker.bootstrap})
        p.produce(topic, b"x", partition=0)
        assert p.flush(30) == 0
    assert p._aio.idem.enabled is False
    assert "does not support InitProducerId" in caplog.text
    p.close()


def test_asyncio_producer(broker):
    topic = name("aio-p")

    async def run():
        async with AIOProducer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1}) as p:
            first = await p.send_and_wait(topic, b"a", key=b"k", partition=0)
            futs = [await p.send(topic, f"b{i}".encode(), partition=0) for i in range(20)]
            rest = await asyncio.gather(*futs)
            seen = []
            p.produce(topic, b"c", partition=0, on_delivery=lambda err, msg: seen.append(msg.offset()))
            await p.flush()
            return first, rest, seen
    first, rest, seen = asyncio.run(run())
    assert first.offset() == 0 and [m.offset() for m in rest] == list(range(1, 21)) and seen == [21]


def test_delivery_times_out_when_no_broker_answers():
    from rivulet.testing import free_port
    seen = []
    p = Producer({"bootstrap.servers": f"127.0.0.1:{free_port()}", "delivery.timeout.ms": 1000,
                  "retry.backoff.ms": 50, "error_cb": seen.append})
    errs = []
    for _ in range(3):
        p.produce("t", b"x", on_delivery=lambda err, msg: errs.append(err))
    assert p.flush(20) == 0
    p.close()
    assert [e.code() for e in errs] == [KafkaError._MSG_TIMED_OUT] * 3
    assert seen and seen[0].code() == KafkaError._TRANSPORT  # error_cb heard the broker was down


def test_delivery_times_out_for_a_missing_topic():
    from rivulet.testing import BrokerProcess
    with BrokerProcess({"auto.create.topics.enable": "false"}) as b:
        p = Producer({"bootstrap.servers": b.bootstrap, "delivery.timeout.ms": 1500})
        errs = []
        p.produce("does-not-exist", b"x", on_delivery=lambda err, msg: errs.append(err))
        assert p.flush(20) == 0
        p.close()
    assert errs and errs[0].code() in (KafkaError._UNKNOWN_TOPIC, KafkaError._MSG_TIMED_OUT)


# ---------------------------------------------------------------- consumer


def test_subscribe_commits_and_resumes(broker):
    topic, group = name("sub"), name("g")
    create(broker.bootstrap, topic, 3)
    produce(broker.bootstrap, topic, 90, key=lambda i: str(i).encode())
    assigned, revoked = [], []
    conf = {"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False}
    c = Consumer(conf)
    c.subscribe([topic], on_assign=lambda cons, ps: assigned.append(sorted(p.partition for p in ps)),
                on_revoke=lambda cons, ps: revoked.append(sorted(p.partition for p in ps)))
    first = drain(c, 60)
    c.commit(asynchronous=False)
    committed = c.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
    positions = c.position([TopicPartition(topic, p) for p in range(3)])
    assert [tp.offset for tp in committed] == [tp.offset for tp in positions]
    c.close()
    assert assigned == [[0, 1, 2]] and revoked == [[0, 1, 2]]
    c = Consumer(conf)
    c.subscribe([topic])
    rest = drain(c, 90 - sum(tp.offset for tp in committed))
    c.close()
    seen = {(m.partition(), m.offset()) for m in first} | {(m.partition(), m.offset()) for m in rest}
    assert len(seen) == 90


def test_async_commit_reports_to_on_commit(broker):
    topic, group = name("oc"), name("g")
    produce(broker.bootstrap, topic, 10, partition=0)
    results = []
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "on_commit": lambda err, parts: results.append((err, [(p.partition, p.offset) for p in parts]))})
    c.subscribe([topic])
    msgs = drain(c, 10)
    assert c.commit(message=msgs[4]) is None  # asynchronous by default, as confluent-kafka
    deadline = time.monotonic() + 10
    while not results and time.monotonic() < deadline:
        c.poll(0.1)
    assert results[0] == (None, [(0, 5)])
    c.close()


def test_stored_offsets_are_what_gets_committed(broker):
    topic = name("store")
    produce(broker.bootstrap, topic, 10, partition=0)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": name("g"), "auto.offset.reset": "earliest",
                  "enable.auto.offset.store": False, "enable.auto.commit": False})
    c.subscribe([topic])
    msgs = drain(c, 10)
    c.store_offsets(message=msgs[5])
    assert c.commit(asynchronous=False)[0].offset == 6
    assert c.committed([TopicPartition(topic, 0)])[0].offset == 6
    c.close()


def test_auto_commit(broker):
    topic, group = name("ac"), name("g")
    produce(broker.bootstrap, topic, 20, partition=0)
    conf = {"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "auto.commit.interval.ms": 100}
    c = Consumer(conf)
    c.subscribe([topic])
    assert len(drain(c, 20)) == 20
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        c.poll(0.1)
        if c.committed([TopicPartition(topic, 0)])[0].offset == 20:
            break
    assert c.committed([TopicPartition(topic, 0)])[0].offset == 20
    c.close()


def test_auto_offset_reset_latest_and_none(broker):
    topic = name("reset")
    produce(broker.bootstrap, topic, 5, partition=0)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": name("g"), "auto.offset.reset": "latest"})
    c.subscribe([topic])
    deadline = time.monotonic() + 10
    while c.position([TopicPartition(topic, 0)])[0].offset < 0 and time.monotonic() < deadline:
        c.poll(0.1)
    assert c.position([TopicPartition(topic, 0)])[0].offset == 5
    c.close()
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": name("g"), "auto.offset.reset": "none"})
    c.assign([TopicPartition(topic, 0)])
    with pytest.raises(NoOffsetForPartitionError) as ei:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            c.poll(0.2)
    assert ei.value.partitions == [TopicPartition(topic, 0)]
    c.seek(TopicPartition(topic, 0, 3))
    assert [m.offset() for m in drain(c, 2)] == [3, 4]
    c.close()


def test_commits_carry_leader_epochs_and_the_leader_checks_them(broker):
    """KIP-320: a commit stores the leader epoch of the last record consumed, and a consumer
    that starts from a commit asks the leader (OffsetsForLeaderEpoch) whether its log still
    holds that epoch up to the offset before it fetches."""
    topic = name("epochs")
    produce(broker.bootstrap, topic, 20, partition=0)
    tp = TopicPartition(topic, 0)
    base = {"bootstrap.servers": broker.bootstrap, "enable.auto.commit": False}
    c = Consumer({**base, "group.id": name("g"), "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    msgs = drain(c, 20)
    assert {m.leader_epoch() for m in msgs} == {0}
    committed = c.commit(asynchronous=False)
    assert [(p.offset, p.leader_epoch) for p in committed] == [(20, 0)]
    assert [(p.offset, p.leader_epoch) for p in c.committed([tp], timeout=10)] == [(20, 0)]
    c.close()

    def start_from(offset: int, epoch: int, reset: str) -> Consumer:
        group = name("g")
        setter = Consumer({**base, "group.id": group})
        setter.commit(offsets=[TopicPartition(topic, 0, offset, leader_epoch=epoch)], asynchronous=False)
        setter.close()
        c = Consumer({**base, "group.id": group, "auto.offset.reset": reset})
        c.subscribe([topic])
        return c

    c = start_from(10, 0, "earliest")  # an epoch the leader has, past the offset: valid
    assert [m.offset() for m in drain(c, 10)] == list(range(10, 20))
    c.close()
    c = start_from(10, 7, "earliest")  # an epoch the leader never had: the reset policy decides
    assert drain(c, 1)[0].offset() == 0
    c.close()
    c = start_from(10, 7, "error")
    deadline, err = time.monotonic() + 20, None
    while err is None and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None:
            assert m.error() is not None, f"a record at {m.offset()} despite the unknown epoch"
            err = m.error()
    assert err is not None and err.code() == KafkaError._LOG_TRUNCATION, err
    c.seek(TopicPartition(topic, 0, 15))  # the application decides where to go on
    assert [m.offset() for m in drain(c, 5)] == list(range(15, 20))
    c.close()


def test_assign_seek_position_pause_resume(broker):
    topic = name("seek")
    produce(broker.bootstrap, topic, 50, partition=0)
    tp = TopicPartition(topic, 0)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": name("g"), "fetch.wait.max.ms": 100})
    c.assign([TopicPartition(topic, 0, 10)])
    assert [m.offset() for m in drain(c, 5)] == [10, 11, 12, 13, 14]
    assert c.position([tp])[0].offset == 15
    c.seek(TopicPartition(topic, 0, 40))
    assert drain(c, 1)[0].offset() == 40
    c.pause([tp])
    assert c.consume(10, 0.5) == []
    c.resume([tp])
    assert drain(c, 1)[0].offset() == 41
    c.seek(TopicPartition(topic, 0, OFFSET_END))
    # The ListOffsets that finds the end waits on the broker behind the consumer's long-poll
    # Fetch on the same connection (as in Kafka, up to fetch.wait.max.ms); a record produced
    # before it is answered would lie before the end it finds (Kafka 4.3.1 then skips it too).
    assert c.consume(10, 1.0) == []
    produce(broker.bootstrap, topic, 1, partition=0)
    assert drain(c, 1)[0].offset() == 50
    assert c.get_watermark_offsets(tp, 10) == (0, 51)
    assert c.get_watermark_offsets(tp, cached=True)[1] == 51
    assert [a.partition for a in c.assignment()] == [0]
    c.unassign()
    assert c.assignment() == []
    c.close()


def test_offsets_for_times(broker):
    topic = name("times")
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        p.produce(topic, b"x", partition=0, timestamp=1_700_000_000_000 + i * 1000)
    p.flush(10)
    p.close()
    c = Consumer({"bootstrap.servers": broker.bootstrap})
    found = c.offsets_for_times([TopicPartition(topic, 0, 1_700_000_004_500)], 10)
    assert found[0].offset == 5
    assert c.offsets_for_times([TopicPartition(topic, 0, 1_800_000_000_000)], 10)[0].offset == OFFSET_END
    c.close()


def test_pattern_subscription_finds_new_topics(broker):
    prefix = name("pat")
    produce(broker.bootstrap, f"{prefix}-a", 3, partition=0)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": name("g"), "auto.offset.reset": "earliest",
                  "metadata.max.age.ms": 300})
    c.subscribe([f"^{prefix}-.*"])
    assert {m.topic() for m in drain(c, 3)} == {f"{prefix}-a"}
    produce(broker.bootstrap, f"{prefix}-b", 4, partition=0)
    got = drain(c, 4)
    assert {m.topic() for m in got} == {f"{prefix}-b"} and len(got) == 4
    c.close()


def test_unsubscribe_revokes_then_subscribe_again(broker):
    t1, t2 = name("uns-a"), name("uns-b")
    produce(broker.bootstrap, t1, 3, partition=0)
    produce(broker.bootstrap, t2, 3, partition=0)
    events = []
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": name("g"), "auto.offset.reset": "earliest"})
    c.subscribe([t1], on_assign=lambda cons, ps: events.append(("assign", [p.topic for p in ps])),
                on_revoke=lambda cons, ps: events.append(("revoke", [p.topic for p in ps])))
    assert {m.topic() for m in drain(c, 3)} == {t1}
    c.unsubscribe()
    assert c.assignment() == [] and events == [("assign", [t1]), ("revoke", [t1])]
    assert c.committed([TopicPartition(t1, 0)])[0].offset == 3  # auto-commit on the way out
    c.assign([TopicPartition(t2, 0)])
    with pytest.raises(KafkaException):  # assign() and subscribe() do not mix
        c.subscribe([t2])
    c.unassign()
    c.subscribe([t2])
    assert {m.topic() for m in drain(c, 3)} == {t2}
    c.close()


def test_on_assign_can_choose_offsets(broker):
    topic = name("onassign")
    produce(broker.bootstrap, topic, 10, partition=0)

    def on_assign(consumer, partitions):
        for p in partitions:
            p.offset = 7
        consumer.assign(partitions)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": name("g")})
    c.subscribe([topic], on_assign=on_assign)
    assert [m.offset() for m in drain(c, 3)] == [7, 8, 9]
    c.close()


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_group_of_two_splits_partitions(broker, strategy):
    topic, group = name(f"two-{strategy}"), name("g")
    create(broker.bootstrap, topic, 4)
    conf = {"bootstrap.servers": broker.bootstrap, "group.id": group, "partition.assignment.strategy": strategy,
            "heartbeat.interval.ms": 200}
    a, b = Consumer(conf), Consumer(conf)
    a.subscribe([topic])
    deadline = time.monotonic() + 15
    while len(a.assignment()) < 4 and time.monotonic() < deadline:
        a.poll(0.1)
    b.subscribe([topic])
    while time.monotonic() < deadline:
        a.poll(0.05)
        b.poll(0.05)
        if len(a.assignment()) == 2 and len(b.assignment()) == 2:
            break
    sa, sb = {p.partition for p in a.assignment()}, {p.partition for p in b.assignment()}
    assert len(sa) == 2 and len(sb) == 2 and not sa & sb
    b.close()
    while len(a.assignment()) < 4 and time.monotonic() < deadline + 15:
        a.poll(0.1)
    assert len(a.assignment()) == 4
    a.close()


def test_asyncio_consumer(broker):
    topic = name("aio-c")
    produce(broker.bootstrap, topic, 30, partition=0)

    async def run():
        async with AIOConsumer({"bootstrap.servers": broker.bootstrap, "group.id": name("g"),
                                "auto.offset.reset": "earliest"}) as c:
            c.subscribe([topic])
            got = []
            async for m in c:
                got.append(m.offset())
                if len(got) == 30:
                    break
            await c.commit()
            return got, (await c.committed([TopicPartition(topic, 0)]))[0].offset
    got, committed = asyncio.run(run())
    assert got == list(range(30)) and committed == 30


def test_consumer_in_a_thread_while_another_produces(broker):
    topic = name("live")
    got, done = [], threading.Event()

    def consume():
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": name("g"), "auto.offset.reset": "earliest",
                      "fetch.max.wait.ms": 50})
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(got) < 200 and time.monotonic() < deadline:
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                got.append(int(m.value()))
        c.close()
        done.set()
    create(broker.bootstrap, topic, 1)
    t = threading.Thread(target=consume)
    t.start()
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(200):
        p.produce(topic, str(i).encode())
        p.poll(0)
        time.sleep(0.002)
    p.flush(10)
    p.close()
    assert done.wait(40)
    t.join()
    assert got == list(range(200))


# ---------------------------------------------------------------- admin


def test_admin_topics_configs_groups_offsets(broker):
    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = name("adm")
    assert a.create_topics([NewTopic(topic, 2, 1, config={"retention.ms": "100000"})])[topic].result(30) is None
    with pytest.raises(KafkaException) as ei:
        a.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    assert ei.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    a.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
    assert len(a.list_topics(topic).topics[topic].partitions) == 3
    res = ConfigResource(ResourceType.TOPIC, topic)
    assert a.describe_configs([res])[res].result(30)["retention.ms"].value == "100000"
    inc = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "200000", incremental_operation=AlterConfigOpType.SET)])
    a.incremental_alter_configs([inc])[inc].result(30)
    assert a.describe_configs([res])[res].result(30)["retention.ms"].value == "200000"
    produce(broker.bootstrap, topic, 10, partition=0)
    tp = TopicPartition(topic, 0)
    assert a.list_offsets({tp: OffsetSpec.latest()})[tp].result(30).offset == 10
    assert a.delete_records([TopicPartition(topic, 0, 4)])[tp].result(30).low_watermark == 4
    assert a.list_offsets({tp: OffsetSpec.earliest()})[tp].result(30).offset == 4
    group = name("adm-g")
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    drain(c, 6)
    c.commit(asynchronous=False)
    assert group in {g.group_id for g in a.list_consumer_groups().result(30).valid}
    desc = a.describe_consumer_groups([group])[group].result(30)
    assert len(desc.members) == 1 and len(desc.members[0].assignment.topic_partitions) == 3
    offs = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(30)
    assert {(p.partition, p.offset) for p in offs.topic_partitions} >= {(0, 10)}
    c.close()
    assert a.delete_consumer_groups([group])[group].result(30) is None
    assert a.delete_topics([topic])[topic].result(30) is None
    assert topic not in a.list_topics().topics
    a.close()


# ---------------------------------------------------------------- CLI


def cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rivulet", *args], input=stdin, capture_output=True, timeout=60)


def test_cli_produce_and_consume(broker):
    topic = name("cli")
    r = cli("produce", "-b", broker.bootstrap, "-t", topic, "-K", ":", "-H", "src=cli",
            stdin=b"k1:one\nk2:two\nthree\n")
    assert r.returncode == 0, r.stderr
    r = cli("consume", "-b", broker.bootstrap, "-t", topic, "-e", "-q", "-f", "%k|%s|%p|%o|%h\\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"k1|one|0|0|src=cli\nk2|two|0|1|src=cli\n|three|0|2|src=cli\n"
    r = cli("consume", "-b", broker.bootstrap, "-t", topic, "-e", "-q", "-o", "-1")
    assert r.stdout == b"three\n"
    r = cli("consume", "-b", broker.bootstrap, "-t", topic, "-e", "-q", "-o", "1", "-K", "=")
    assert r.stdout == b"k2=two\n=three\n"


def test_cli_random_data_at_a_rate_and_group_consume(broker):
    topic = name("cli-rand")
    r = cli("produce", "-b", broker.bootstrap, "-t", topic, "--random", "300", "--size", "64", "--rate", "1000",
            "--keys", "7")
    assert r.returncode == 0, r.stderr
    assert b"300 of 300 records produced" in r.stderr
    r = cli("consume", "-b", broker.bootstrap, "-t", topic, "-G", name("g"), "-e", "-q", "-f", "%k %S\\n")
    lines = r.stdout.splitlines()
    assert len(lines) == 300 and set(lines) == {f"key-{i} 64".encode() for i in range(7)}


def test_cli_consume_from_a_timestamp(broker):
    topic = name("cli-ts")
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(5):
        p.produce(topic, f"r{i}".encode(), partition=0, timestamp=1_700_000_000_000 + i)
    p.flush(10)
    p.close()
    r = cli("consume", "-b", broker.bootstrap, "-t", topic, "-e", "-q", "-o", "s@1700000000003", "-f", "%T %s\\n")
    assert r.stdout == b"1700000000003 r3\n1700000000004 r4\n"
