"""Differences from Kafka found while running franz-go's integration suite (pkg/kgo) against
Rivulet and probing the requests it sends with raw ones; each test pins Kafka 4's answer."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from rivulet.client.connection import BrokerConnection
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages import (
    add_offsets_to_txn_request as aoq,
    describe_groups_request as dgq,
    init_producer_id_request as ipq,
    list_offsets_request as loq,
    offset_commit_request as ocq,
    produce_request as prq,
    txn_offset_commit_request as tocq,
)
from rivulet.protocol import records as rec
from tests.group_members import find_coordinator

pytestmark = pytest.mark.integration

LOADING = (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR)


def run(coro):
    return asyncio.run(coro)


async def open_conn(broker) -> BrokerConnection:
    host, port = broker.bootstrap.split(":")
    return await BrokerConnection(host, int(port)).connect()


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(30)


async def commit(conn, group: str, topic: str, generation: int, member: str, version: int) -> int:
    """OffsetCommit of one partition, retried while the coordinator loads; the partition's error."""
    for _ in range(100):
        resp = await conn.send(ocq.OffsetCommitRequest(
            group_id=group, generation_id_or_member_epoch=generation, member_id=member, topics=[
                ocq.OffsetCommitRequestTopic(name=topic, partitions=[
                    ocq.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])]), version=version)
        err = resp.topics[0].partitions[0].error_code
        if err not in LOADING:
            return err
        await asyncio.sleep(0.1)
    return err


async def group_state(conn, group: str) -> str:
    resp = await conn.send(dgq.DescribeGroupsRequest(groups=[group]))
    return resp.groups[0].group_state


def test_offset_commit_with_a_generation_for_an_unknown_group(broker):
    """Kafka 4's group coordinator answers GROUP_ID_NOT_FOUND from OffsetCommit v9 on (franz-go
    sends v9), ILLEGAL_GENERATION to older versions, and creates no group for either; a
    commit with generation -1 still makes a simple group."""
    topic = f"fg-commit-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic)

    async def go():
        conn = await open_conn(broker)
        try:
            g = f"fg-g-{uuid.uuid4().hex[:8]}"
            await find_coordinator(conn, g)
            assert await commit(conn, g, topic, 3, "kgo-member", 9) == ErrorCode.GROUP_ID_NOT_FOUND
            assert await commit(conn, g, topic, 3, "kgo-member", 8) == ErrorCode.ILLEGAL_GENERATION
            assert await commit(conn, g, topic, 3, "kgo-member", 2) == ErrorCode.ILLEGAL_GENERATION
            assert await group_state(conn, g) == "Dead"
            assert await commit(conn, g, topic, -1, "", 9) == ErrorCode.NONE
            assert await group_state(conn, g) == "Empty"
        finally:
            await conn.close()
    run(go())


def test_txn_offset_commit_with_a_generation_for_an_unknown_group(broker):
    """Kafka 4: a TxnOffsetCommit carrying a generation for a group that does not exist is
    ILLEGAL_GENERATION, and no group is created. The transaction must hold the group's offsets
    partition first (KIP-890 part 1, checked before the group): for an unknown transactional id
    Kafka 4.3.1 answers INVALID_PRODUCER_ID_MAPPING."""
    topic = f"fg-txncommit-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic)

    async def go():
        conn = await open_conn(broker)
        try:
            g = f"fg-tg-{uuid.uuid4().hex[:8]}"
            await find_coordinator(conn, g)

            async def txn_commit(tid: str, pid: int, epoch: int) -> int:
                for _ in range(100):
                    resp = await conn.send(tocq.TxnOffsetCommitRequest(
                        transactional_id=tid, group_id=g, producer_id=pid, producer_epoch=epoch,
                        generation_id=2, member_id="kgo-member", topics=[tocq.TxnOffsetCommitRequestTopic(
                            name=topic, partitions=[tocq.TxnOffsetCommitRequestPartition(
                                partition_index=0, committed_offset=5)])]), version=3)
                    err = resp.topics[0].partitions[0].error_code
                    if err not in LOADING:
                        return err
                    await asyncio.sleep(0.1)
                return err

            tid = f"fg-txn-{uuid.uuid4().hex[:8]}"
            await find_coordinator(conn, tid, key_type=1)
            for _ in range(100):
                init = await conn.send(ipq.InitProducerIdRequest(
                    transactional_id=tid, transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1))
                if init.error_code not in LOADING:
                    break
                await asyncio.sleep(0.1)
            assert init.error_code == 0
            assert await txn_commit("fg-txn", 12345, 0) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
            added = await conn.send(aoq.AddOffsetsToTxnRequest(
                transactional_id=tid, producer_id=init.producer_id, producer_epoch=init.producer_epoch, group_id=g))
            assert added.error_code == 0
            assert await txn_commit(tid, init.producer_id, init.producer_epoch) == ErrorCode.ILLEGAL_GENERATION
            assert await group_state(conn, g) == "Dead"
        finally:
            await conn.close()
    run(go())


def test_list_offsets_latest_tiered_without_tiered_storage(broker):
    """ListOffsets LATEST_TIERED_TIMESTAMP (-5, KIP-1005): with no remote storage Kafka answers
    offset -1 and leader epoch -1 (not the log end offset); the other specials are unchanged."""
    topic = f"fg-lo-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic)

    async def go():
        conn = await open_conn(broker)
        try:
            data = rec.encode_batch([rec.Record(0, int(time.time() * 1000), None, b"v%d" % i, [])
                                     for i in range(3)])
            resp = await conn.send(prq.ProduceRequest(acks=-1, timeout_ms=10_000, topic_data=[
                prq.TopicProduceData(name=topic, partition_data=[prq.PartitionProduceData(index=0, records=data)])]))
            assert resp.responses[0].partition_responses[0].error_code == 0

            async def lookup(ts: int):
                r = await conn.send(loq.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
                    loq.ListOffsetsTopic(name=topic, partitions=[
                        loq.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=ts)])]),
                    version=9)
                p = r.topics[0].partitions[0]
                return p.error_code, p.offset, p.leader_epoch

            assert await lookup(-5) == (0, -1, -1)
            assert await lookup(-1) == (0, 3, 0)
            assert await lookup(-2) == (0, 0, 0)
            assert await lookup(-4) == (0, 0, 0)
        finally:
            await conn.close()
    run(go())


def test_authorized_operations_are_reported_when_asked_for(broker):
    """Without an authorizer Kafka reports every operation a resource type supports when a
    client asks (Metadata v8+ topic operations, DescribeCluster cluster operations); Rivulet
    answered "not requested" (INT_MIN), which clients read as no operations allowed."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient, AclOperation

    topic = f"fg-ops-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    desc = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True)[topic].result(30)
    assert set(desc.authorized_operations) == {
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE, AclOperation.ALTER,
        AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
    cluster = admin.describe_cluster(include_authorized_operations=True).result(30)
    assert set(cluster.authorized_operations) == {
        AclOperation.CREATE, AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE}
    # not asked for: not reported
    assert not admin.describe_cluster().result(30).authorized_operations


def test_describe_topic_partitions_pages_with_a_cursor(broker):
    """KIP-966: topics in name order, at most response_partition_limit partitions an answer,
    and a cursor to the first partition left out."""
    from rivulet.protocol.messages import describe_topic_partitions_request as dtpq
    prefix = f"dtp-{uuid.uuid4().hex[:6]}"
    a, b = f"{prefix}-a", f"{prefix}-b"
    create_topic(broker.bootstrap, b, 3)
    create_topic(broker.bootstrap, a, 2)

    async def describe(names, limit=2000, cursor=None):
        conn = await open_conn(broker)
        try:
            return await conn.send(dtpq.DescribeTopicPartitionsRequest(
                topics=[dtpq.TopicRequest(name=n) for n in names], response_partition_limit=limit,
                cursor=dtpq.Cursor(topic_name=cursor[0], partition_index=cursor[1]) if cursor else None), version=0)
        finally:
            await conn.close()

    def pages(resp):
        return [(t.name, [p.partition_index for p in t.partitions]) for t in resp.topics]

    resp = run(describe([b, a, f"{prefix}-missing", "bad/name"]))
    assert [(t.name, t.error_code) for t in resp.topics] == [
        ("bad/name", ErrorCode.INVALID_TOPIC_EXCEPTION), (a, 0), (b, 0),
        (f"{prefix}-missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    assert resp.next_cursor is None
    t = resp.topics[2]
    assert t.topic_id.int != 0 and not t.is_internal
    assert [p.partition_index for p in t.partitions] == [0, 1, 2]
    for p in t.partitions:
        assert [p.leader_id] == p.replica_nodes == p.isr_nodes and p.leader_id >= 0 and p.leader_epoch >= 0
        assert p.offline_replicas == [] and p.eligible_leader_replicas == [] and p.error_code == 0

    first = run(describe([a, b], limit=3))
    assert pages(first) == [(a, [0, 1]), (b, [0])]
    assert (first.next_cursor.topic_name, first.next_cursor.partition_index) == (b, 1)
    second = run(describe([a, b], limit=3, cursor=(b, 1)))
    assert pages(second) == [(b, [1, 2])] and second.next_cursor is None
    exact = run(describe([a, b], limit=2))  # the limit ends exactly with a topic
    assert pages(exact) == [(a, [0, 1])]
    assert (exact.next_cursor.topic_name, exact.next_cursor.partition_index) == (b, 0)
    # The cursor's topic must be among those asked for.
    wrong = run(describe([a], cursor=(b, 0)))
    assert [(t.name, t.error_code) for t in wrong.topics] == [(a, ErrorCode.INVALID_REQUEST)]
    # No topics asked for: every topic from the cursor on.
    everything = run(describe([], cursor=(a, 1)))
    names = [t.name for t in everything.topics]
    assert names == sorted(names) and names[:2] == [a, b] and pages(everything)[0] == (a, [1])
