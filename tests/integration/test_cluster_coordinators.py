"""Consumer groups and transactions on a 3-broker cluster through the death (kill -9) of the
broker that coordinates them: the coordinator moves with the leadership of its internal
partition, commits and transactions go on, and nothing committed is lost or seen twice; a
commit its followers cannot replicate in time, and a TxnOffsetCommit whose transaction
coordinator does not answer, each answered as Kafka 4.3 answers it."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from rivulet.protocol.errors import ErrorCode
from tests.cluster import ZkCluster, eventually, find_coordinator, three_brokers
from tests.integration.test_replication_faults import BROKER_CONFIG, create_topic

pytestmark = [pytest.mark.integration, pytest.mark.cluster]


@pytest.fixture
def cluster(zk_connect):
    with three_brokers(zk_connect, **BROKER_CONFIG, **{"transaction.state.log.num.partitions": "3",
                                                      "transaction.state.log.replication.factor": "3",
                                                      "transaction.state.log.min.isr": "2"}) as c:
        yield c


def coordinator(cluster: ZkCluster, key: str, key_type: int = 0) -> int:
    found = [-1]

    def ask() -> bool:
        b = next(b for b in cluster.brokers.values() if b.proc is not None)
        found[0] = find_coordinator(b, key, key_type)
        return found[0] >= 0
    eventually(ask, 60, f"a coordinator for {key}")
    return found[0]


def test_a_group_goes_on_after_its_coordinator_is_killed(cluster):
    topic, group = f"grp-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, topic, 3, **{"min.insync.replicas": "2"})
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    values = [b"v%05d" % i for i in range(3000)]
    for v in values:
        p.produce(topic, v, key=v)
    assert p.flush(60) == 0
    conf = {"bootstrap.servers": cluster.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False}
    c = Consumer(conf)
    c.subscribe([topic])
    seen: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(seen) < 1000 and time.monotonic() < deadline:
        m = c.poll(1)
        if m is not None and not m.error():
            seen.append(m.value())
    c.commit(asynchronous=False)
    committed_before = sum(max(tp.offset, 0) for tp in c.committed([TopicPartition(topic, i) for i in range(3)], 30))
    assert committed_before == len(seen)

    doomed = coordinator(cluster, group)
    cluster.brokers[doomed].kill()
    eventually(lambda: coordinator(cluster, group) not in (-1, doomed), 60, "the group coordinator to move")
    # The same member goes on reading and committing through the new coordinator.
    deadline = time.monotonic() + 90
    while len(seen) < 2000 and time.monotonic() < deadline:
        m = c.poll(1)
        if m is not None and not m.error():
            seen.append(m.value())
    for _ in range(30):
        try:
            c.commit(asynchronous=False)
            break
        except KafkaException:
            time.sleep(1)  # the coordinator is still loading the group
    c.close()
    # A new member starts where the group committed: every record read, none lost.
    c = Consumer(conf)
    c.subscribe([topic])
    deadline = time.monotonic() + 90
    while len(set(seen)) < len(values) and time.monotonic() < deadline:
        m = c.poll(1)
        if m is not None and not m.error():
            seen.append(m.value())
    c.close()
    assert set(seen) == set(values)
    assert len(seen) - len(values) < 1000, "the group restarted far behind its commits"


def _watermarks(c: Consumer, tp: TopicPartition) -> tuple[int, int] | str:
    # Only for the failure message: just after a restart a leader may be moving back, and
    # NOT_LEADER_OR_FOLLOWER is then Kafka's answer too, not a failure of the test.
    try:
        return c.get_watermark_offsets(tp, 10, cached=False)
    except KafkaException as e:
        return str(e.args[0])


def test_transactions_go_on_after_their_coordinator_is_killed(cluster):
    topic, txn_id = f"txn-{uuid.uuid4().hex[:6]}", f"t-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, topic, 3, **{"min.insync.replicas": "2"})
    p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id,
                  "transaction.timeout.ms": 30000})
    p.init_transactions(60)
    committed: list[bytes] = []
    aborted: list[bytes] = []

    def one(n: int, commit: bool) -> None:
        batch = [b"%s-%d-%d" % (b"c" if commit else b"a", n, i) for i in range(50)]
        p.begin_transaction()
        for v in batch:
            p.produce(topic, v, key=v)
        if commit:
            p.commit_transaction(60)
            committed.extend(batch)
        else:
            p.flush(30)  # written, then aborted (unsent records would just be dropped)
            p.abort_transaction(60)
            aborted.extend(batch)

    for n in range(10):
        one(n, commit=n % 3 != 0)
    doomed = coordinator(cluster, txn_id, key_type=1)
    cluster.brokers[doomed].kill()
    eventually(lambda: coordinator(cluster, txn_id, 1) not in (-1, doomed), 60, "the transaction coordinator to move")
    for n in range(10, 20):
        for attempt in range(30):
            try:
                one(n, commit=n % 3 != 0)
                break
            except KafkaException as e:
                if not e.args[0].retriable():
                    raise
                time.sleep(1)
    p.flush(30)
    cluster.restart(doomed)  # the rest of the test reads with all three back
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": uuid.uuid4().hex,
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    c.subscribe([topic])
    got: list[bytes] = []
    errors: list[str] = []
    deadline = time.monotonic() + 90
    while len(got) < len(committed) and time.monotonic() < deadline:
        m = c.poll(1)
        if m is not None and not m.error():
            got.append(m.value())
        elif m is not None:
            errors.append(str(m.error()))
    extra = c.poll(3)
    # What the consumer and the brokers saw, should this ever come out short.
    assigned = c.assignment()
    marks = [(tp.partition, _watermarks(c, tp)) for tp in assigned]
    positions = [(tp.partition, tp.offset) for tp in c.position(assigned)]
    c.close()
    if sorted(got) != sorted(committed) or extra is not None:
        logs = "\n".join(f"--- broker {i}\n{b.output()[-3000:]}" for i, b in cluster.brokers.items())
        raise AssertionError(f"read {len(got)} of {len(committed)} committed (extra: {extra}); errors {errors[-5:]}; "
                             f"assigned {assigned}, watermarks {marks}, positions {positions}\n{logs}")
    assert not set(got) & set(aborted)
    # read_uncommitted sees the aborted records too: they were written, then aborted.
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": uuid.uuid4().hex,
                  "auto.offset.reset": "earliest", "isolation.level": "read_uncommitted"})
    c.subscribe([topic])
    raw: set[bytes] = set()
    deadline = time.monotonic() + 90
    while len(raw) < len(committed) + len(aborted) and time.monotonic() < deadline:
        m = c.poll(1)
        if m is not None and not m.error():
            raw.add(m.value())
    c.close()
    assert raw == set(committed) | set(aborted)


def test_a_producers_pipelined_requests_append_in_order_while_one_waits_for_its_coordinator(cluster):
    # franz-go pipelines a producer's Produce requests to a leader; Kafka reads the next only
    # once it has answered the last. The first here adds a partition to the transaction, so the
    # leader asks the coordinator (another broker) first; the second writes only a partition
    # already in it and must append after the first, not overtake it (out of sequence).
    import asyncio

    from confluent_kafka.admin import AdminClient

    from rivulet.client.connection import BrokerConnection
    from rivulet.protocol import records as rec
    from rivulet.protocol.messages import add_partitions_to_txn_request as aptq
    from rivulet.protocol.messages import init_producer_id_request as ipq
    from rivulet.protocol.messages import produce_request as prq

    topic = f"pipe-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, topic, 6)
    leaders: dict[int, list[int]] = {}
    for p, m in AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(topic, timeout=10) \
            .topics[topic].partitions.items():
        leaders.setdefault(m.leader, []).append(p)
    leader, (p, q) = next((b, ps[:2]) for b, ps in leaders.items() if len(ps) >= 2)
    txn_id = next(t for t in (f"t-{uuid.uuid4().hex[:8]}" for _ in range(1000)) if coordinator(cluster, t, 1) != leader)
    coord = cluster.brokers[coordinator(cluster, txn_id, 1)]

    def batch(pid: int, seq: int) -> bytes:
        return rec.encode_batch([rec.Record(0, None, None, b"r%d" % (seq + i), []) for i in range(2)],
                                producer_id=pid, producer_epoch=0, base_sequence=seq, transactional=True)

    def produce(pid: int, seqs: dict[int, int]) -> prq.ProduceRequest:
        return prq.ProduceRequest(transactional_id=txn_id, acks=-1, timeout_ms=10_000, topic_data=[
            prq.TopicProduceData(name=topic, partition_data=[
                prq.PartitionProduceData(index=part, records=batch(pid, s)) for part, s in seqs.items()])])

    def errors(resp: prq.ProduceResponse) -> dict[int, int]:
        return {x.index: x.error_code for t in resp.responses for x in t.partition_responses}

    async def go() -> None:
        to_coord = await BrokerConnection("127.0.0.1", coord.port).connect()
        to_leader = await BrokerConnection("127.0.0.1", cluster.brokers[leader].port).connect()
        try:
            init = await to_coord.send(ipq.InitProducerIdRequest(
                transactional_id=txn_id, transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1))
            assert init.error_code == 0
            pid = init.producer_id
            added = await to_coord.send(aptq.AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=0,
                v3_and_below_topics=[aptq.AddPartitionsToTxnTopic(name=topic, partitions=[p, q])]), version=3)
            assert all(r.partition_error_code == 0 for t in added.results_by_topic_v3_and_below
                       for r in t.results_by_partition)
            assert errors(await to_leader.send(produce(pid, {p: 0}))) == {p: 0}
            first = to_leader.send_nowait(produce(pid, {p: 2, q: 0}))
            second = to_leader.send_nowait(produce(pid, {p: 4}))
            assert errors(await to_leader.wait(first)) == {p: 0, q: 0}
            assert errors(await to_leader.wait(second)) == {p: 0}
        finally:
            await to_coord.close()
            await to_leader.close()
    asyncio.run(go())


def test_a_commit_not_replicated_in_time_is_answered_coordinator_not_available(zk_connect):
    # Kafka 4.3.1 (three KRaft nodes, the coordinator's two followers SIGSTOPped) answers
    # COORDINATOR_NOT_AVAILABLE once offsets.commit.timeout.ms has passed, which clients retry
    # elsewhere; Rivulet answered REQUEST_TIMED_OUT, on which franz-go ends a transaction with an
    # error. The lag limit is long so that the ISR does not shrink (and the write complete) first.
    import asyncio

    from rivulet.client import core
    from rivulet.client.connection import BrokerConnection
    from rivulet.client.core import OffsetAndMetadata

    config = {**BROKER_CONFIG, "replica.lag.time.max.ms": "30000", "offsets.commit.timeout.ms": "1000"}
    with three_brokers(zk_connect, **config) as c:
        topic, group = f"ct-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
        create_topic(c, topic)
        coord = coordinator(c, group)

        async def commit(offset: int) -> int:
            conn = await BrokerConnection("127.0.0.1", c.brokers[coord].port).connect(10)
            try:
                resp = await conn.send(core.offset_commit_request(group, {(topic, 0): OffsetAndMetadata(offset)}))
            finally:
                await conn.close()
            return resp.topics[0].partitions[0].error_code

        eventually(lambda: asyncio.run(commit(1)) == 0, 60, "a commit with every replica up")
        followers = [b for i, b in c.brokers.items() if i != coord]
        for b in followers:
            b.pause()
        try:
            error = asyncio.run(commit(2))
        finally:
            for b in followers:
                b.resume()
        assert error == ErrorCode.COORDINATOR_NOT_AVAILABLE


def test_a_txn_offset_commit_whose_transaction_coordinator_is_unreachable_is_answered_load_in_progress(zk_connect):
    # KIP-890: the group coordinator asks the transactional id's coordinator (another broker)
    # whether the offsets partition is in the transaction. With that broker SIGSTOPped the ask
    # times out (request.timeout.ms), which Kafka 4.3's AddPartitionsToTxnManager gives as
    # NETWORK_EXCEPTION and its group coordinator answers COORDINATOR_LOAD_IN_PROGRESS (its
    # CoordinatorOperationExceptionHelper); Rivulet answered COORDINATOR_NOT_AVAILABLE. The
    # timeout is short of the ZooKeeper session, so the broker is still registered meanwhile.
    import asyncio

    from rivulet.client.connection import BrokerConnection
    from rivulet.protocol.messages import init_producer_id_request as ipq
    from rivulet.protocol.messages import txn_offset_commit_request as tocq

    config = {**BROKER_CONFIG, "request.timeout.ms": "2000", "transaction.state.log.num.partitions": "3",
              "transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2"}
    with three_brokers(zk_connect, **config) as c:
        topic, group = f"to-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
        create_topic(c, topic)
        group_coord = coordinator(c, group)
        txn_id = next(t for t in (f"t-{uuid.uuid4().hex[:8]}" for _ in range(1000))
                      if coordinator(c, t, 1) != group_coord)
        txn_coord = c.brokers[coordinator(c, txn_id, 1)]

        async def init() -> tuple[int, int, int]:
            conn = await BrokerConnection("127.0.0.1", txn_coord.port).connect(10)
            try:
                r = await conn.send(ipq.InitProducerIdRequest(
                    transactional_id=txn_id, transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1))
            finally:
                await conn.close()
            return r.error_code, r.producer_id, r.producer_epoch

        async def commit(pid: int, epoch: int) -> int:
            conn = await BrokerConnection("127.0.0.1", c.brokers[group_coord].port).connect(10)
            try:
                r = await conn.send(tocq.TxnOffsetCommitRequest(
                    transactional_id=txn_id, group_id=group, producer_id=pid, producer_epoch=epoch,
                    generation_id=-1, member_id="", group_instance_id=None,
                    topics=[tocq.TxnOffsetCommitRequestTopic(name=topic, partitions=[
                        tocq.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                                             committed_leader_epoch=-1, committed_metadata="")])]),
                    version=3, timeout=30)
            finally:
                await conn.close()
            return r.topics[0].partitions[0].error_code

        found: list[tuple[int, int, int]] = []
        eventually(lambda: found.append(asyncio.run(init())) or found[-1][0] == 0, 60, "a producer id")
        _err, pid, epoch = found[-1]
        # Reachable, the coordinator refuses: no AddOffsetsToTxn put the offsets partition in the transaction.
        eventually(lambda: asyncio.run(commit(pid, epoch)) == ErrorCode.INVALID_TXN_STATE, 60,
                   "the coordinator's refusal")
        txn_coord.pause()
        try:
            error = asyncio.run(commit(pid, epoch))
        finally:
            txn_coord.resume()
        assert error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
