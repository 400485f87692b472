"""Transactions with real clients: commit/abort visibility under both isolation levels, the
broker aborting a transaction on its own, kill -9 in the middle of one, the admin APIs, and
librdkafka's consume-transform-produce loop surviving broker crashes."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from types import SimpleNamespace

import pytest

from rivulet.protocol import records as rec
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages import (
    add_offsets_to_txn_request as aoq,
    add_partitions_to_txn_request as aptq,
    api_versions_request as avq,
    describe_producers_request as dpq,
    describe_transactions_request as dtq,
    end_txn_request as etq,
    find_coordinator_request as fcq,
    list_transactions_request as ltq,
    produce_request as prq,
    txn_offset_commit_request as tocq,
    update_features_request as ufq,
)
from test_idempotence import Raw, create_topic, topic_name

pytestmark = pytest.mark.integration


def consume(bootstrap: str, topic: str, isolation: str, partitions: int = 1, timeout: float = 30,
            engine: str = "ck") -> list[bytes]:
    """Everything up to the end of each partition (the LSO under read_committed)."""
    if engine == "kp":
        from kafka import KafkaConsumer, TopicPartition as KTP
        c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False,
                          consumer_timeout_ms=3000)
        c.assign([KTP(topic, p) for p in range(partitions)])
        c.seek_to_beginning()
        out = [m.value for m in c]
        c.close()
        return out
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-" + uuid.uuid4().hex[:6],
                  "isolation.level": isolation, "enable.partition.eof": True, "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: list[bytes] = []
    eof: set[int] = set()
    deadline = time.monotonic() + timeout
    while len(eof) < partitions and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error():
            if m.error().code() == -191:  # _PARTITION_EOF
                eof.add(m.partition())
                continue
            raise AssertionError(m.error())
        eof.discard(m.partition())
        out.append(m.value())
    c.close()
    assert len(eof) == partitions, "did not reach the end of every partition"
    return out


def txn_producer(bootstrap: str, tid: str, **conf):
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5, **conf})
    p.init_transactions(30)
    return p


def latest(broker, topic: str, isolation: int) -> int:
    async def go():
        raw = await Raw.open(broker)
        try:
            return await raw.latest(topic, isolation)
        finally:
            await raw.close()
    return asyncio.run(go())


def wait_for(cond, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.1)


def test_aborted_records_reach_only_read_uncommitted(broker):
    topic = topic_name("txn-vis")
    create_topic(broker.bootstrap, topic, 2)
    p = txn_producer(broker.bootstrap, "vis-" + uuid.uuid4().hex[:6])
    p.begin_transaction()
    for i in range(20):
        p.produce(topic, value=b"c%d" % i, partition=i % 2)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, value=b"a%d" % i, partition=i % 2)
    p.flush(30)  # the aborted records are in the log, ahead of the marker
    p.abort_transaction(30)
    p.begin_transaction()
    for i in range(6):
        p.produce(topic, value=b"d%d" % i, partition=i % 2)
    p.commit_transaction(30)
    committed = sorted([b"c%d" % i for i in range(20)] + [b"d%d" % i for i in range(6)])
    assert sorted(consume(broker.bootstrap, topic, "read_committed", 2)) == committed
    assert sorted(consume(broker.bootstrap, topic, "read_committed", 2, engine="kp")) == committed
    everything = consume(broker.bootstrap, topic, "read_uncommitted", 2)
    assert sorted(everything) == sorted(committed + [b"a%d" % i for i in range(10)])


def test_read_committed_waits_for_the_commit(broker):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    topic = topic_name("txn-wait")
    create_topic(broker.bootstrap, topic)
    p = txn_producer(broker.bootstrap, "wait-" + uuid.uuid4().hex[:6])
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, value=b"w%d" % i, partition=0)
    p.flush(30)
    assert latest(broker, topic, 1) == 0 and latest(broker, topic, 0) == 5  # ListOffsets: LSO vs HW
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused", "isolation.level": "read_committed",
                  "fetch.wait.max.ms": 10000})  # long polls: the commit has to wake them
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    assert c.poll(1.0) is None
    p.commit_transaction(30)
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 5 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    c.close()
    assert got == [b"w%d" % i for i in range(5)]
    assert latest(broker, topic, 1) == 6


def test_broker_aborts_a_timed_out_transaction(broker_factory):
    from confluent_kafka import KafkaException
    b = broker_factory({"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"})
    topic = "txn-timeout"
    create_topic(b.bootstrap, topic)
    p = txn_producer(b.bootstrap, "slow", **{"transaction.timeout.ms": 1500})
    p.begin_transaction()
    for i in range(4):
        p.produce(topic, value=b"t%d" % i, partition=0)
    p.flush(30)
    assert latest(b, topic, 1) == 0
    wait_for(lambda: latest(b, topic, 1) == latest(b, topic, 0) == 5)  # data + the broker's ABORT marker
    with pytest.raises(KafkaException):
        p.commit_transaction(30)  # fenced: the broker bumped the epoch when it aborted
    assert consume(b.bootstrap, topic, "read_committed") == []
    assert len(consume(b.bootstrap, topic, "read_uncommitted")) == 4


def test_kill9_mid_transaction(broker_factory):
    b = broker_factory({"log.flush.interval.messages": "1"})
    topic = "txn-kill"
    create_topic(b.bootstrap, topic, 2)
    p = txn_producer(b.bootstrap, "crashy")
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, value=b"ok%d" % i, partition=i % 2)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, value=b"lost%d" % i, partition=i % 2)
    p.flush(30)
    b.kill()
    del p
    b.start()

    async def describe():
        raw = await Raw.open(b)
        try:
            return (await raw.conn.send(dtq.DescribeTransactionsRequest(transactional_ids=["crashy"])))\
                .transaction_states[0]
        finally:
            await raw.close()

    def recovered():
        st = asyncio.run(describe())
        return st.error_code == 0 and st.transaction_state == "Ongoing"
    wait_for(recovered)  # the open transaction came back from __transaction_state
    assert latest(b, topic, 1) < latest(b, topic, 0)
    p2 = txn_producer(b.bootstrap, "crashy")  # fences the old epoch and aborts its transaction
    p2.begin_transaction()
    for i in range(4):
        p2.produce(topic, value=b"new%d" % i, partition=i % 2)
    p2.commit_transaction(30)
    got = consume(b.bootstrap, topic, "read_committed", 2)
    assert sorted(got) == sorted([b"ok%d" % i for i in range(10)] + [b"new%d" % i for i in range(4)])
    assert len(consume(b.bootstrap, topic, "read_uncommitted", 2)) == 24


def test_admin_apis(broker):
    topic = topic_name("txn-admin")
    create_topic(broker.bootstrap, topic)
    tid = "admin-" + uuid.uuid4().hex[:6]
    p = txn_producer(broker.bootstrap, tid)
    p.begin_transaction()
    p.produce(topic, value=b"x", partition=0)
    p.flush(30)

    async def go():
        raw = await Raw.open(broker)
        try:
            d = (await raw.conn.send(dtq.DescribeTransactionsRequest(transactional_ids=[tid, "missing"])))
            st, missing = d.transaction_states
            assert (st.error_code, st.transaction_state) == (0, "Ongoing")
            assert [(t.topic, t.partitions) for t in st.topics] == [(topic, [0])]
            assert missing.error_code == 105  # TRANSACTIONAL_ID_NOT_FOUND
            lst = await raw.conn.send(ltq.ListTransactionsRequest(state_filters=["Ongoing"], producer_id_filters=[]))
            assert lst.error_code == 0 and tid in [t.transactional_id for t in lst.transaction_states]
            lst = await raw.conn.send(ltq.ListTransactionsRequest(state_filters=["Nope"], producer_id_filters=[]))
            assert lst.unknown_state_filters == ["Nope"] and lst.transaction_states == []
            prod = await raw.conn.send(dpq.DescribeProducersRequest(
                topics=[dpq.TopicRequest(name=topic, partition_indexes=[0])]))
            (ap,) = prod.topics[0].partitions[0].active_producers
            assert ap.producer_id == st.producer_id and ap.current_txn_start_offset == 0 and ap.last_sequence == 0
        finally:
            await raw.close()
    asyncio.run(go())
    p.commit_transaction(30)


# What Kafka 4.3.1 answered to `_offsets_check_probe`'s requests (transaction.version 0 and 2 alike).
KAFKA_431_OFFSETS_CHECK = {
    **{f"no partition yet, v{v}": "INVALID_TXN_STATE" for v in (0, 2, 3)},
    "no partition yet, v4": "TRANSACTION_ABORTABLE",
    "AddPartitionsToTxn": "NONE",
    "data partition only, v3": "INVALID_TXN_STATE",
    "data partition only, v4": "TRANSACTION_ABORTABLE",
    **{f"{case}, v{v}": answer for v in (3, 4) for case, answer in (
        ("epoch + 1", "INVALID_PRODUCER_EPOCH"), ("another producer id", "INVALID_PRODUCER_ID_MAPPING"),
        ("unknown transactional id", "INVALID_PRODUCER_ID_MAPPING"))},
    "AddOffsetsToTxn": "NONE",
    "offsets partition added, v3": "NONE",
    "offsets partition added, v4": "NONE",
    "EndTxn": "NONE",
}


async def _txn_offset_commit(raw: Raw, transactional_id: str, group: str, topic: str, version: int,
                             pid: int, epoch: int) -> str:
    """A raw TxnOffsetCommit of offset 5 for ``topic``-0: the partition's error name, asked
    again while __consumer_offsets loads."""
    for _ in range(200):
        r = await raw.conn.send(tocq.TxnOffsetCommitRequest(
            transactional_id=transactional_id, group_id=group, producer_id=pid, producer_epoch=epoch,
            generation_id=-1, member_id="", topics=[tocq.TxnOffsetCommitRequestTopic(
                name=topic, partitions=[tocq.TxnOffsetCommitRequestPartition(
                    partition_index=0, committed_offset=5)])]), version=version)
        err = ErrorCode(r.topics[0].partitions[0].error_code)
        if err not in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE):
            break
        await asyncio.sleep(0.1)
    return err.name


def _offsets_check_probe(bootstrap: str) -> dict[str, str]:
    """TxnOffsetCommits of a transaction that has not added the group's offsets partition
    (no AddOffsetsToTxn), then has: each answer by name."""
    topic = topic_name("txn-offsets-check")
    create_topic(bootstrap, topic)
    tid, group = "toc-" + uuid.uuid4().hex[:6], "toc-g-" + uuid.uuid4().hex[:6]
    out: dict[str, str] = {}

    async def go():
        raw = await Raw.open(SimpleNamespace(bootstrap=bootstrap))
        try:
            async def commit(version: int, pid: int, epoch: int, transactional_id: str = tid) -> str:
                return await _txn_offset_commit(raw, transactional_id, group, topic, version, pid, epoch)

            await raw.conn.send(fcq.FindCoordinatorRequest(key=group, key_type=0, coordinator_keys=[group]))
            init = await raw.init_pid(tid)
            pid, epoch = init.producer_id, init.producer_epoch
            for v in (0, 2, 3, 4):
                out[f"no partition yet, v{v}"] = await commit(v, pid, epoch)
            add = await raw.conn.send(aptq.AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
                v3_and_below_topics=[aptq.AddPartitionsToTxnTopic(name=topic, partitions=[0])]), version=3)
            out["AddPartitionsToTxn"] = ErrorCode(
                add.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code).name
            for v in (3, 4):
                out[f"data partition only, v{v}"] = await commit(v, pid, epoch)
                out[f"epoch + 1, v{v}"] = await commit(v, pid, epoch + 1)
                out[f"another producer id, v{v}"] = await commit(v, pid + 1000, epoch)
                out[f"unknown transactional id, v{v}"] = await commit(v, pid, epoch, "nobody-" + tid)
            added = await raw.conn.send(aoq.AddOffsetsToTxnRequest(
                transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group))
            out["AddOffsetsToTxn"] = ErrorCode(added.error_code).name
            for v in (3, 4):
                out[f"offsets partition added, v{v}"] = await commit(v, pid, epoch)
            end = await raw.conn.send(etq.EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                                        committed=False))
            out["EndTxn"] = ErrorCode(end.error_code).name
        finally:
            await raw.close()
    asyncio.run(go())
    return out


def test_txn_offset_commit_needs_the_offsets_partition_in_the_transaction(broker):
    """KIP-890 part 1: a TxnOffsetCommit whose transaction never added the group's offsets
    partition is refused as Kafka 4.3.1 refuses it: INVALID_TXN_STATE below v4,
    TRANSACTION_ABORTABLE at v4, the coordinator's fencing errors; accepted once added."""
    assert _offsets_check_probe(broker.bootstrap) == KAFKA_431_OFFSETS_CHECK


@pytest.mark.java
def test_kafka_answers_the_txn_offset_commit_check_as_pinned(kafka_ref):
    """The answers pinned above, asked of Kafka 4.3.1 itself (transaction.version 2, its default)."""
    assert _offsets_check_probe(kafka_ref) == KAFKA_431_OFFSETS_CHECK


# Kafka 4.3.1 at transaction.version 0 (downgraded from a new cluster's 2 with UpdateFeatures),
# asked with raw requests (2026-12-01): the same versions advertised as at 2; the requests a
# transaction.version 2 client sends refused, UNSUPPORTED_VERSION, unless nothing is to be added.
# Each refusal in a transaction of its own: after refusing a TxnOffsetCommit v5 (or an EndTxn v5),
# Kafka 4.3.1 kept answering that transaction CONCURRENT_TRANSACTIONS (AddOffsetsToTxn every 2 s
# for 48 s; EndTxn v4), a pending transition it never completes; Rivulet leaves none.
KAFKA_431_AT_TRANSACTION_VERSION_0 = {
    "advertised at 2": "Produce 13, AddPartitionsToTxn 5, EndTxn 5, TxnOffsetCommit 5",
    "advertised at 0": "Produce 13, AddPartitionsToTxn 5, EndTxn 5, TxnOffsetCommit 5",
    "TxnOffsetCommit v5, nothing added": "UNSUPPORTED_VERSION",
    "TxnOffsetCommit v4, nothing added": "TRANSACTION_ABORTABLE",
    "state after v5": "Empty",
    "AddOffsetsToTxn": "NONE",
    "TxnOffsetCommit v5 after AddOffsetsToTxn": "NONE",
    "EndTxn v5": "UNSUPPORTED_VERSION",
    "state after EndTxn v5": "Ongoing",
    "Produce v12, nothing added": "UNSUPPORTED_VERSION",
}


def _transaction_version_0_probe(bootstrap: str) -> dict[str, str]:
    """What a broker advertises at transaction.version 2 and, after a downgrade to 0, what it
    answers to a transaction.version 2 client's TxnOffsetCommit v5, EndTxn v5 and Produce v12."""
    topic = topic_name("tv0")
    create_topic(bootstrap, topic)
    tid, group = "tv0-" + uuid.uuid4().hex[:6], "tv0-g-" + uuid.uuid4().hex[:6]
    out: dict[str, str] = {}
    current = {"tid": tid}

    async def go():
        raw = await Raw.open(SimpleNamespace(bootstrap=bootstrap))
        try:
            async def advertised() -> tuple[str, int]:
                r = await raw.conn.send(avq.ApiVersionsRequest(client_software_name="t", client_software_version="1"),
                                        version=3)
                top = {k.api_key: k.max_version for k in r.api_keys}
                level = {f.name: f.max_version_level for f in r.finalized_features}.get("transaction.version", 0)
                return (f"Produce {top[0]}, AddPartitionsToTxn {top[24]}, EndTxn {top[26]}, "
                        f"TxnOffsetCommit {top[28]}"), level

            out["advertised at 2"], level = await advertised()
            assert level == 2
            r = await raw.conn.send(ufq.UpdateFeaturesRequest(timeout_ms=30_000, validate_only=False, feature_updates=[
                ufq.FeatureUpdateKey(feature="transaction.version", max_version_level=0, allow_downgrade=True,
                                     upgrade_type=2)]), version=1)
            assert r.error_code == 0, r
            for _ in range(300):  # until this broker has the new level
                out["advertised at 0"], level = await advertised()
                if level == 0:
                    break
                await asyncio.sleep(0.1)
            assert level == 0

            async def commit(version: int, pid: int, epoch: int) -> str:
                return await _txn_offset_commit(raw, current["tid"], group, topic, version, pid, epoch)

            async def state() -> str:
                r = await raw.conn.send(dtq.DescribeTransactionsRequest(transactional_ids=[current["tid"]]))
                return r.transaction_states[0].transaction_state

            async def end(version: int, pid: int, epoch: int) -> str:
                r = await raw.conn.send(etq.EndTxnRequest(transactional_id=current["tid"], producer_id=pid,
                                                          producer_epoch=epoch, committed=True), version=version)
                return ErrorCode(r.error_code).name

            async def begin(suffix: str) -> tuple[int, int]:
                current["tid"] = tid + suffix
                init = await raw.init_pid(current["tid"])
                return init.producer_id, init.producer_epoch

            await raw.conn.send(fcq.FindCoordinatorRequest(key=group, key_type=0, coordinator_keys=[group]))
            pid, epoch = await begin("-a")
            out["TxnOffsetCommit v5, nothing added"] = await commit(5, pid, epoch)
            out["TxnOffsetCommit v4, nothing added"] = await commit(4, pid, epoch)
            out["state after v5"] = await state()
            pid, epoch = await begin("-b")
            added = await raw.conn.send(aoq.AddOffsetsToTxnRequest(
                transactional_id=current["tid"], producer_id=pid, producer_epoch=epoch, group_id=group))
            out["AddOffsetsToTxn"] = ErrorCode(added.error_code).name
            out["TxnOffsetCommit v5 after AddOffsetsToTxn"] = await commit(5, pid, epoch)
            out["EndTxn v5"] = await end(5, pid, epoch)
            out["state after EndTxn v5"] = await state()
            pid, epoch = await begin("-c")
            batch = rec.encode_batch([rec.Record(0, int(time.time() * 1000), None, b"v", [])], producer_id=pid,
                                     producer_epoch=epoch, base_sequence=0, transactional=True)
            r = await raw.conn.send(prq.ProduceRequest(transactional_id=current["tid"], acks=-1, timeout_ms=10_000, topic_data=[
                prq.TopicProduceData(name=topic, partition_data=[prq.PartitionProduceData(index=0, records=batch)])]),
                version=12)
            out["Produce v12, nothing added"] = ErrorCode(r.responses[0].partition_responses[0].error_code).name
        finally:
            await raw.close()
    asyncio.run(go())
    return out


def test_transaction_version_2_requests_at_level_0(broker_factory):
    """A cluster at transaction.version 0 answers what a transaction.version 2 client sends as
    Kafka 4.3.1 does: TxnOffsetCommit v5 and Produce v12 that would add a partition, and EndTxn
    v5, are UNSUPPORTED_VERSION (decided by the request's version, refused by the level);
    ApiVersions advertises the same versions at either level."""
    assert _transaction_version_0_probe(broker_factory().bootstrap) == KAFKA_431_AT_TRANSACTION_VERSION_0


@pytest.mark.java
def test_kafka_answers_transaction_version_2_requests_at_level_0_as_pinned(java):
    """The answers pinned above, asked of a Kafka 4.3.1 of its own (the downgrade would change a
    shared one)."""
    from tests.conftest import running_kafka

    with running_kafka() as bootstrap:
        assert _transaction_version_0_probe(bootstrap) == KAFKA_431_AT_TRANSACTION_VERSION_0


# -------------------------------------------------------------- consume-transform-produce

# librdkafka's exactly-once loop, run as its own process so the test can crash it with kill -9
# like any application. It prints the size of every committed transaction, and "call NAME"
# before / "done NAME" after each blocking transactional call so that the test can see one that
# overruns its timeout. A fifth argument turns librdkafka's debug log on (to the worker's stderr).
CTP_WORKER = r"""
import sys, time
from confluent_kafka import Consumer, KafkaException, Producer
bootstrap, source, sink, group = sys.argv[1:5]
debug = {"debug": "eos,protocol,broker,cgrp,topic"} if len(sys.argv) > 5 else {}
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                     "session.timeout.ms": 6000, "fetch.wait.max.ms": 100, **debug})

def call(name, fn, *args):  # traced; a retriable error (a timeout) is retried, as the API asks
    while True:
        print("call", name, flush=True)
        t = time.monotonic()
        try:
            return fn(*args)
        except KafkaException as e:
            if not e.args[0].retriable() or e.args[0].txn_requires_abort():
                raise
        finally:
            print("done", name, round(time.monotonic() - t, 1), flush=True)

def new_producer():
    # With its only broker down, librdkafka >= 2.10 re-bootstraps and decommissions the broker; a
    # group coordinator cached on it then holds send_offsets_to_transaction past its timeout, with no
    # request sent (librdkafka issues 5511 and 5456, client-side; Kafka's single broker alike).
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "ctp-" + group, "linger.ms": 5,
                  "transaction.timeout.ms": 10000, "metadata.recovery.strategy": "none", **debug})
    call("init_transactions", p.init_transactions, 60)
    return p

producer = new_producer()
consumer.subscribe([source])
while True:
    msgs = [m for m in consumer.consume(25, 0.5) if not m.error()]
    if not msgs:
        continue
    producer.begin_transaction()
    try:
        for m in msgs:
            producer.produce(sink, key=m.key(), value=m.value() + b"-out", partition=m.partition())
        call("send_offsets_to_transaction", producer.send_offsets_to_transaction,
             consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30)
        call("commit_transaction", producer.commit_transaction, 30)
    except KafkaException as e:
        try:
            if not e.args[0].txn_requires_abort():
                raise
            call("abort_transaction", producer.abort_transaction, 30)
        except KafkaException as f:
            if not f.args[0].fatal():
                raise
            # Fenced: the broker aborted the transaction with a new epoch, for instance when it
            # outlived transaction.timeout.ms while the broker was down. A new producer takes over.
            print("fatal", f.args[0], flush=True)
            producer = new_producer()
        # Rewind to the committed offsets: the aborted records will be read again.
        for tp in call("committed", consumer.committed, consumer.assignment(), 30):
            consumer.seek(tp)
        continue
    print(len(msgs), flush=True)
"""


class CtpWorker:
    def __init__(self, bootstrap: str, source: str, sink: str, group: str, progress: list[int],
                 debug_log: str | None = None) -> None:
        import subprocess
        import sys
        self.calls: list[tuple[str, float, float | None]] = []  # (name, started, seconds or None)
        self.fatal: list[str] = []
        args = [sys.executable, "-c", CTP_WORKER, bootstrap, source, sink, group]
        self.stderr = open(debug_log, "a") if debug_log else None
        self.proc = subprocess.Popen(args + (["debug"] if debug_log else []), stdout=subprocess.PIPE,
                                     stderr=self.stderr or subprocess.DEVNULL, text=True)
        self.reader = threading.Thread(target=self._read, args=(progress,), daemon=True)
        self.reader.start()

    def _read(self, progress: list[int]) -> None:
        for line in self.proc.stdout:
            word, _, rest = line.strip().partition(" ")
            if word.isdigit():
                progress.append(int(word))
            elif word == "call":
                self.calls.append((rest, time.monotonic(), None))
            elif word == "done" and self.calls:
                name, started, _ = self.calls[-1]
                self.calls[-1] = (name, started, time.monotonic() - started)
            elif word == "fatal":
                self.fatal.append(rest)

    def overrun(self, limit: float) -> str | None:
        """The call that has been (or was) blocked longer than ``limit`` seconds, if any."""
        for name, started, took in list(self.calls):
            took = time.monotonic() - started if took is None else took
            if took > limit:
                return f"{name} blocked for {took:.0f} s"
        return None

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        if self.stderr:
            self.stderr.close()


def _supports_txn_offset_commit(broker) -> bool:
    async def go():
        raw = await Raw.open(broker)
        try:
            return 28 in raw.conn.api_versions
        finally:
            await raw.close()
    return asyncio.run(go())


def test_consume_transform_produce_exactly_once_across_kill9(broker_factory):
    from confluent_kafka import Producer
    b = broker_factory({"log.flush.interval.messages": "1",
                        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"})
    assert _supports_txn_offset_commit(b)
    source, sink = "ctp-in", "ctp-out"
    create_topic(b.bootstrap, source, 2)
    create_topic(b.bootstrap, sink, 2)
    n = 600
    p = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True})
    for i in range(n):
        p.produce(source, value=b"m%04d" % i, partition=i % 2)
    assert p.flush(30) == 0

    progress: list[int] = []
    worker = CtpWorker(b.bootstrap, source, sink, "ctp", progress)
    # Broker crash (the application restarts too), application crash alone, broker crash again;
    # each in the middle of whatever transaction is open at that moment.
    for broker_crash in (True, False, True):
        target = sum(progress) + 80
        wait_for(lambda: sum(progress) >= target, timeout=120)
        if broker_crash:
            b.kill()
        worker.kill()
        if broker_crash:
            b.start()
        worker = CtpWorker(b.bootstrap, source, sink, "ctp", progress)

    try:
        wait_for(lambda: len(consume(b.bootstrap, sink, "read_committed", 2, timeout=30)) >= n, timeout=180)
    finally:
        worker.kill()
    out = consume(b.bootstrap, sink, "read_committed", 2)
    assert sorted(out) == sorted(b"m%04d-out" % i for i in range(n)), (len(out), len(set(out)))
    # Transactions cut short left their records in the log: only read_uncommitted sees them.
    assert len(consume(b.bootstrap, sink, "read_uncommitted", 2)) >= len(out)


class _Load:
    """Other clients keeping the broker busy: an idempotent producer writing as fast as it can."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from confluent_kafka import Producer
        p = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 2,
                      "message.timeout.ms": 600000, "queue.buffering.max.messages": 20000})
        while not self.stopping.is_set():
            try:
                p.produce(self.topic, value=b"x" * 200)
            except BufferError:
                p.poll(0.05)
            p.poll(0)
        p.flush(5)

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(30)


def test_consume_transform_produce_keeps_its_timeouts_across_broker_kill9s(broker_factory, tmp_path):
    """The loop stays alive while the broker is killed five times under load, sometimes for longer
    than the group's session or the transaction's timeout: every transactional call returns within
    its timeout (with a margin for the busy machine) and the output holds each input once."""
    from confluent_kafka import Producer
    b = broker_factory({"log.flush.interval.messages": "1",
                        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"})
    source, sink = "ctpl-in", "ctpl-out"
    for t in (source, sink, "ctpl-load"):
        create_topic(b.bootstrap, t, 2)
    n = 1200
    p = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True})
    for i in range(n):
        p.produce(source, value=b"m%04d" % i, partition=i % 2)
    assert p.flush(30) == 0

    debug_log = tmp_path / "librdkafka.log"
    progress: list[int] = []
    load = _Load(b.bootstrap, "ctpl-load")
    worker = CtpWorker(b.bootstrap, source, sink, "ctpl", progress, str(debug_log))

    def healthy() -> bool:
        stuck = worker.overrun(90)  # every call has a 30 s timeout (init_transactions 60 s)
        assert stuck is None, f"{stuck}; librdkafka's log: {debug_log}"
        assert worker.proc.poll() is None, (worker.fatal, worker.proc.returncode)
        return True

    def read_all() -> bool:
        return healthy() and len(consume(b.bootstrap, sink, "read_committed", 2, timeout=30)) >= n

    try:
        # Down for less and for more than session.timeout.ms (6 s) and transaction.timeout.ms (10 s).
        for down in (3, 8, 13, 5, 11):
            target = sum(progress) + 50
            wait_for(lambda target=target: healthy() and sum(progress) >= target, timeout=240)
            b.kill()
            time.sleep(down)
            b.start()
        wait_for(read_all, timeout=300)
    finally:
        worker.kill()
        load.stop()
    out = consume(b.bootstrap, sink, "read_committed", 2)
    assert sorted(out) == sorted(b"m%04d-out" % i for i in range(n)), (len(out), len(set(out)))


def test_compacted_offsets_keep_the_committed_transaction_not_the_aborted_one(broker_factory):
    """TxnOffsetCommit leaves transactional records in __consumer_offsets. The cleaner must not
    let an aborted commit shadow the committed one before it, across a restart."""
    import os
    from confluent_kafka import Consumer, TopicPartition
    b = broker_factory({"offsets.topic.num.partitions": "1", "offsets.topic.segment.bytes": "4096",
                        "log.cleaner.backoff.ms": "200"})
    topic, group = topic_name("cmp"), topic_name("g")
    create_topic(b.bootstrap, topic, 1)
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False})
    meta = consumer.consumer_group_metadata()
    p = txn_producer(b.bootstrap, topic_name("tid"))

    def txn(offset: int, commit: bool) -> None:
        p.begin_transaction()
        p.produce(topic, value=b"x", partition=0)
        p.send_offsets_to_transaction([TopicPartition(topic, 0, offset)], meta, 30)
        (p.commit_transaction if commit else p.abort_transaction)(30)

    for i in range(1, 40):
        txn(i, commit=i % 2 == 0)
    txn(200, commit=True)
    txn(999, commit=False)  # the newest record for the key, and aborted
    filler = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group + "-filler", "enable.auto.commit": False})
    for i in range(1, 200):  # other keys, so the transactions leave the active segment
        filler.commit(offsets=[TopicPartition(topic, 0, i)], asynchronous=False)
    filler.close()
    checkpoint = os.path.join(b.data_dir, "cleaner-offset-checkpoint")

    def cleaned_past_the_transactions() -> bool:
        try:
            lines = open(checkpoint).read().split("\n")
        except FileNotFoundError:
            return False
        return any(line.startswith("__consumer_offsets 0 ") and int(line.split()[2]) > 200 for line in lines)

    wait_for(cleaned_past_the_transactions, timeout=60)
    assert consumer.committed([TopicPartition(topic, 0)], 30)[0].offset == 200
    consumer.close()
    p.flush(5)
    b.kill()
    b.start()
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False})
    assert c.committed([TopicPartition(topic, 0)], 30)[0].offset == 200  # reloaded from the cleaned log
    c.close()


# -------------------------------------------------------------- other clients' transactions

def test_kafka_python_transactions(broker):
    from kafka import KafkaProducer
    topic = topic_name("txn-kp")
    create_topic(broker.bootstrap, topic)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="kp-" + uuid.uuid4().hex[:6])
    p.init_transactions()
    p.begin_transaction()
    for i in range(5):
        p.send(topic, value=b"k%d" % i, partition=0)
    p.commit_transaction()
    p.begin_transaction()
    for i in range(3):
        p.send(topic, value=b"x%d" % i, partition=0)
    p.flush()
    p.abort_transaction()
    p.close()
    assert consume(broker.bootstrap, topic, "read_committed") == [b"k%d" % i for i in range(5)]
    assert len(consume(broker.bootstrap, topic, "read_uncommitted")) == 8


@pytest.mark.java
def test_java_transactional_producer(broker):
    """Kafka's own Java client: ProducerPerformance with a transactional id commits every 3 s."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import java_tools as jt
    reason = jt.java_available()
    if reason is not None:
        pytest.skip(f"Kafka Java tools unavailable: {reason}")
    topic = topic_name("txn-java")
    create_topic(broker.bootstrap, topic)
    jt.producer_perf(broker.bootstrap, topic, num_records=20_000, record_size=50, props={
        "transactional.id": "java-" + uuid.uuid4().hex[:6], "max.block.ms": 20_000, "request.timeout.ms": 15_000, "delivery.timeout.ms": 30_000}, timeout=120)
    assert len(consume(broker.bootstrap, topic, "read_committed")) == 20_000
