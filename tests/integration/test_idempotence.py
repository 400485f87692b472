"""Idempotent producers against a real broker: raw-protocol retries and error codes, producer
ids across restarts, and the idempotent defaults of librdkafka and kafka-python."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from rivulet.client.connection import BrokerConnection
from rivulet.protocol import records as rec
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages import (
    add_partitions_to_txn_request as aptq,
    end_txn_request as etq,
    find_coordinator_request as fcq,
    init_producer_id_request as ipq,
    list_offsets_request as loq,
    produce_request as prq,
)

pytestmark = pytest.mark.integration

RETRIABLE = (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
             ErrorCode.NOT_COORDINATOR, ErrorCode.CONCURRENT_TRANSACTIONS)


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(30)


class Raw:
    """A BrokerConnection with the few requests these tests send."""

    def __init__(self, conn: BrokerConnection) -> None:
        self.conn = conn

    @classmethod
    async def open(cls, broker) -> Raw:
        host, port = broker.bootstrap.split(":")
        return cls(await BrokerConnection(host, int(port)).connect())

    async def init_pid(self, transactional_id: str | None = None, timeout_ms: int = 60_000,
                       pid: int = -1, epoch: int = -1, version: int | None = None):
        """InitProducerId, retried while the coordinator is loading or busy (as clients do)."""
        if transactional_id:
            await self.conn.send(fcq.FindCoordinatorRequest(key=transactional_id, key_type=1,
                                                           coordinator_keys=[transactional_id]))
        for _ in range(200):
            r = await self.conn.send(ipq.InitProducerIdRequest(
                transactional_id=transactional_id, transaction_timeout_ms=timeout_ms, producer_id=pid,
                producer_epoch=epoch), version=version)
            if r.error_code not in RETRIABLE:
                return r
            await asyncio.sleep(0.1)
        return r

    async def produce(self, topic: str, records: bytes, transactional_id: str | None = None, acks: int = -1):
        resp = await self.conn.send(prq.ProduceRequest(
            transactional_id=transactional_id, acks=acks, timeout_ms=10_000, topic_data=[prq.TopicProduceData(
                name=topic, partition_data=[prq.PartitionProduceData(index=0, records=records)])]))
        return resp.responses[0].partition_responses[0]

    async def latest(self, topic: str, isolation: int = 0) -> int:
        resp = await self.conn.send(loq.ListOffsetsRequest(replica_id=-1, isolation_level=isolation, topics=[
            loq.ListOffsetsTopic(name=topic, partitions=[loq.ListOffsetsPartition(
                partition_index=0, current_leader_epoch=-1, timestamp=-1)])]))
        return resp.topics[0].partitions[0].offset

    async def close(self) -> None:
        await self.conn.close()


def batch(n: int, pid: int, epoch: int, seq: int, txn: bool = False) -> bytes:
    return rec.encode_batch([rec.Record(0, None, None, b"r%d" % (seq + i), []) for i in range(n)],
                            producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=txn)


def run(coro):
    return asyncio.run(coro)


def test_retried_produce_request_is_not_duplicated(broker):
    topic = topic_name("idem-retry")
    create_topic(broker.bootstrap, topic)

    async def go():
        raw = await Raw.open(broker)
        r = await raw.init_pid()
        assert r.error_code == 0 and r.producer_id >= 0 and r.producer_epoch == 0
        pid = r.producer_id
        b0 = batch(3, pid, 0, 0)
        first = await raw.produce(topic, b0)
        # The response was "lost": the client sends the very same request again.
        again = await raw.produce(topic, b0)
        assert (first.error_code, again.error_code) == (0, 0)
        assert again.base_offset == first.base_offset == 0
        # Kafka answers a duplicate with the stored batch's timestamp as its log append time.
        assert first.log_append_time_ms == -1
        assert again.log_append_time_ms == rec.parse_batch_header(b0).max_timestamp
        nxt = await raw.produce(topic, batch(2, pid, 0, 3))
        assert nxt.base_offset == 3
        # An older batch, still among the last five, also comes back with its offset.
        assert (await raw.produce(topic, batch(3, pid, 0, 0))).base_offset == 0
        assert await raw.latest(topic) == 5
        # A gap in the sequence.
        gap = await raw.produce(topic, batch(1, pid, 0, 7))
        assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and gap.base_offset == -1
        # A new epoch must restart at 0.
        bad = await raw.produce(topic, batch(1, pid, 1, 5))
        assert bad.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        ok = await raw.produce(topic, batch(1, pid, 1, 0))
        assert ok.error_code == 0 and ok.base_offset == 5
        old = await raw.produce(topic, batch(1, pid, 0, 5))
        assert old.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
        assert await raw.latest(topic) == 6
        # A producer the partition has never seen may start at any sequence (KIP-360).
        fresh = (await raw.init_pid()).producer_id
        assert (await raw.produce(topic, batch(2, fresh, 0, 17))).error_code == 0
        assert (await raw.produce(topic, batch(1, fresh, 0, 20))).error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert (await raw.produce(topic, batch(1, fresh, 0, 19))).base_offset == 8
        await raw.close()
    run(go())


def test_producer_ids_are_unique_across_restarts_and_state_survives_kill9(broker_factory):
    b = broker_factory()
    topic = "idem-restart"
    create_topic(b.bootstrap, topic)

    async def first():
        raw = await Raw.open(b)
        pids = [(await raw.init_pid()).producer_id for _ in range(3)]
        assert len(set(pids)) == 3
        pid = pids[-1]
        for seq in range(0, 10, 2):
            assert (await raw.produce(topic, batch(2, pid, 0, seq))).error_code == 0
        await raw.close()
        return pids

    pids = run(first())
    b.kill()
    b.start()

    async def second():
        raw = await Raw.open(b)
        new = (await raw.init_pid()).producer_id
        assert new not in pids and new > max(pids)
        pid = pids[-1]
        # The broker rebuilt the producer's state from its log: the retry is recognised.
        dup = await raw.produce(topic, batch(2, pid, 0, 8))
        assert (dup.error_code, dup.base_offset) == (0, 8)
        gap = await raw.produce(topic, batch(1, pid, 0, 11))
        assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert (await raw.produce(topic, batch(1, pid, 0, 10))).base_offset == 10
        await raw.close()
    run(second())
    b.stop()
    b.start()
    run(_expect_duplicate(b, topic, pids[-1]))


async def _expect_duplicate(b, topic: str, pid: int) -> None:
    raw = await Raw.open(b)
    dup = await raw.produce(topic, batch(1, pid, 0, 10))  # after a clean restart (snapshot at the end)
    assert (dup.error_code, dup.base_offset) == (0, 10)
    await raw.close()


def test_transactional_fencing_errors(broker):
    topic = topic_name("idem-fence")
    create_topic(broker.bootstrap, topic)
    tid = "fence-" + uuid.uuid4().hex[:6]

    async def go():
        raw = await Raw.open(broker)
        too_long = await raw.init_pid(tid, timeout_ms=900_001)
        assert too_long.error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT
        assert (await raw.init_pid("", 1000)).error_code == ErrorCode.INVALID_REQUEST
        a = await raw.init_pid(tid)
        b = await raw.init_pid(tid)  # a second instance fences the first
        assert a.producer_id == b.producer_id and b.producer_epoch == a.producer_epoch + 1
        pid = a.producer_id
        add = await raw.conn.send(aptq.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=a.producer_epoch,
            v3_and_below_topics=[aptq.AddPartitionsToTxnTopic(name=topic, partitions=[0])]), version=3)
        assert add.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == \
            ErrorCode.PRODUCER_FENCED
        old = await raw.conn.send(aptq.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=a.producer_epoch,
            v3_and_below_topics=[aptq.AddPartitionsToTxnTopic(name=topic, partitions=[0])]), version=1)
        assert old.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == \
            ErrorCode.INVALID_PRODUCER_EPOCH  # what pre-KIP-588 clients understand
        add = await raw.conn.send(aptq.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=b.producer_epoch,
            v3_and_below_topics=[aptq.AddPartitionsToTxnTopic(name=topic, partitions=[0]),
                                 aptq.AddPartitionsToTxnTopic(name="no-such-topic", partitions=[0])]), version=3)
        errs = {t.name: t.results_by_partition[0].partition_error_code for t in add.results_by_topic_v3_and_below}
        assert errs == {topic: ErrorCode.OPERATION_NOT_ATTEMPTED, "no-such-topic": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        add = await raw.conn.send(aptq.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=b.producer_epoch,
            v3_and_below_topics=[aptq.AddPartitionsToTxnTopic(name=topic, partitions=[0])]), version=3)
        assert add.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
        anon = await raw.produce(topic, batch(2, pid, b.producer_epoch, 0, txn=True))
        assert anon.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        ok = await raw.produce(topic, batch(2, pid, b.producer_epoch, 0, txn=True), transactional_id=tid)
        assert ok.error_code == 0
        zombie = await raw.produce(topic, batch(1, pid, a.producer_epoch, 2, txn=True), transactional_id=tid)
        assert zombie.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
        assert await raw.latest(topic, isolation=1) == 0  # LSO held at the open transaction
        assert await raw.latest(topic, isolation=0) == 2
        end = await raw.conn.send(etq.EndTxnRequest(transactional_id=tid, producer_id=pid,
                                                    producer_epoch=a.producer_epoch, committed=True))
        assert end.error_code == ErrorCode.PRODUCER_FENCED
        end = await raw.conn.send(etq.EndTxnRequest(transactional_id=tid, producer_id=pid + 1000,
                                                    producer_epoch=b.producer_epoch, committed=True))
        assert end.error_code == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        end = await raw.conn.send(etq.EndTxnRequest(transactional_id=tid, producer_id=pid,
                                                    producer_epoch=b.producer_epoch, committed=True))
        assert end.error_code == 0
        deadline = time.monotonic() + 20
        while await raw.latest(topic, isolation=1) != 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # markers are written after EndTxn answers
        assert await raw.latest(topic, isolation=1) == 3
        again = await raw.conn.send(etq.EndTxnRequest(transactional_id=tid, producer_id=pid,
                                                      producer_epoch=b.producer_epoch, committed=True))
        assert again.error_code == 0  # a retried commit of a completed commit
        wrong = await raw.conn.send(etq.EndTxnRequest(transactional_id=tid, producer_id=pid,
                                                      producer_epoch=b.producer_epoch, committed=False))
        assert wrong.error_code == ErrorCode.INVALID_TXN_STATE
        # KIP-360: the current producer may bump its own epoch and keep its id.
        bump = await raw.init_pid(tid, pid=pid, epoch=b.producer_epoch)
        assert (bump.error_code, bump.producer_id, bump.producer_epoch) == (0, pid, b.producer_epoch + 1)
        stale = await raw.init_pid(tid, pid=pid, epoch=a.producer_epoch)
        assert stale.error_code == ErrorCode.PRODUCER_FENCED
        assert (await raw.init_pid(tid, pid=pid, epoch=a.producer_epoch, version=3)).error_code == \
            ErrorCode.INVALID_PRODUCER_EPOCH
        await raw.close()
    run(go())


def test_transactional_batch_outside_the_transaction_by_produce_version(broker):
    """KIP-890: a transactional batch on a partition its transaction never added is refused;
    as Kafka 4.3.1 answered the same requests, INVALID_TXN_STATE up to Produce v10 and
    TRANSACTION_ABORTABLE from v11 (the first version whose clients know it), and a newer epoch
    than the coordinator's INVALID_PRODUCER_EPOCH at every version."""
    topic = topic_name("txn-unadded")
    create_topic(broker.bootstrap, topic)

    async def go():
        raw = await Raw.open(broker)
        try:
            for version, refused in ((3, ErrorCode.INVALID_TXN_STATE), (9, ErrorCode.INVALID_TXN_STATE),
                                     (10, ErrorCode.INVALID_TXN_STATE), (11, ErrorCode.TRANSACTION_ABORTABLE)):
                tid = f"unadded-{version}-" + uuid.uuid4().hex[:6]
                init = await raw.init_pid(tid)
                pid, epoch = init.producer_id, init.producer_epoch
                for e, expected in ((epoch, refused), (epoch + 1, ErrorCode.INVALID_PRODUCER_EPOCH)):
                    resp = await raw.conn.send(prq.ProduceRequest(
                        transactional_id=tid, acks=-1, timeout_ms=10_000, topic_data=[prq.TopicProduceData(
                            name=topic, partition_data=[prq.PartitionProduceData(
                                index=0, records=batch(1, pid, e, 0, txn=True))])]), version=version)
                    assert resp.responses[0].partition_responses[0].error_code == expected, (version, e)
            assert await raw.latest(topic) == 0
        finally:
            await raw.close()
    run(go())


def test_confluent_idempotent_producer(broker):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    topic = topic_name("idem-ck")
    create_topic(broker.bootstrap, topic, 2)
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 2})
    errors = []
    for i in range(2000):
        p.produce(topic, value=b"%d" % i, partition=i % 2,
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
        p.poll(0)
    assert p.flush(30) == 0 and errors == []
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.partition.eof": True})
    c.assign([TopicPartition(topic, i, OFFSET_BEGINNING) for i in range(2)])
    seen, eof = [], set()
    deadline = time.monotonic() + 30
    while len(eof) < 2 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            eof.add(m.partition())
            continue
        seen.append(int(m.value()))
    c.close()
    assert sorted(seen) == list(range(2000))


def test_kafka_python_default_producer_is_idempotent(broker):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    topic = topic_name("idem-kp")
    create_topic(broker.bootstrap, topic)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap)  # defaults: enable_idempotence=True, acks=all
    assert p.config["enable_idempotence"] and p.config["acks"] == -1
    futures = [p.send(topic, value=b"v%d" % i, partition=0) for i in range(300)]
    offsets = [f.get(timeout=30).offset for f in futures]
    p.close()
    assert offsets == list(range(300))
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000)
    c.assign([TopicPartition(topic, 0)])
    c.seek_to_beginning()
    got = [m.value for m in c]
    c.close()
    assert got == [b"v%d" % i for i in range(300)]
