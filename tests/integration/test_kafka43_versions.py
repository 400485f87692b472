"""Kafka 4.3's newest versions of the APIs Rivulet serves, sent raw to a broker process: each
answers as Kafka 4.3 does at that version."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from rivulet.client import core
from rivulet.client.connection import BrokerConnection
from rivulet.protocol import records as rec
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages import (
    describe_cluster_request as dcq,
    describe_groups_request as dgq,
    describe_log_dirs_request as dlq,
    fetch_request as fq,
    list_offsets_request as loq,
    list_transactions_request as ltq,
    metadata_request as mq,
    offset_commit_request as ocq,
    offset_fetch_request as ofq,
    produce_request as prq,
)
from tests.group_members import find_coordinator

pytestmark = pytest.mark.integration


async def _conn(broker) -> BrokerConnection:
    host, port = broker.bootstrap.split(":")
    return await BrokerConnection(host, int(port)).connect()


def _topic(broker) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic
    name = f"v43-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    return name


def test_the_newest_versions_are_advertised(broker):
    async def main():
        conn = await _conn(broker)
        try:
            assert conn.version_for(0, 99) == 13  # Produce
            assert conn.version_for(1, 99) == 18  # Fetch
            assert conn.version_for(2, 99) == 11  # ListOffsets
            assert conn.version_for(26, 99) == 5  # EndTxn
            assert conn.version_for(27, 99) == 2  # WriteTxnMarkers
            assert conn.version_for(28, 99) == 5  # TxnOffsetCommit
            assert conn.version_for(66, 99) == 2  # ListTransactions
            assert conn.version_for(3, 99) == 13  # Metadata
            assert conn.version_for(8, 99) == 10  # OffsetCommit
            assert conn.version_for(9, 99) == 10  # OffsetFetch
            assert conn.version_for(15, 99) == 6  # DescribeGroups
            assert conn.version_for(35, 99) == 5  # DescribeLogDirs
            assert conn.version_for(60, 99) == 2  # DescribeCluster
        finally:
            await conn.close()
    asyncio.run(main())


def test_describe_groups_v6_says_an_unknown_group_is_not_found(broker):
    async def main():
        conn = await _conn(broker)
        try:
            await find_coordinator(conn, "no-such-group")
            req = dgq.DescribeGroupsRequest(groups=["no-such-group"])
            old = (await conn.send(req, version=5)).groups[0]
            assert (old.error_code, old.group_state) == (ErrorCode.NONE, "Dead")
            new = (await conn.send(req, version=6)).groups[0]
            assert new.error_code == ErrorCode.GROUP_ID_NOT_FOUND
            assert new.error_message == "Group no-such-group not found."
        finally:
            await conn.close()
    asyncio.run(main())


def test_metadata_v13_describe_cluster_v2_and_describe_log_dirs_v5(broker):
    topic = _topic(broker)

    async def main():
        conn = await _conn(broker)
        try:
            md = await conn.send(mq.MetadataRequest(topics=[mq.MetadataRequestTopic(name=topic)],
                                                    allow_auto_topic_creation=False), version=13)
            assert md.error_code == ErrorCode.NONE and md.topics[0].name == topic
            assert md.topics[0].error_code == ErrorCode.NONE and md.topics[0].topic_id.int != 0
            dc = await conn.send(dcq.DescribeClusterRequest(include_fenced_brokers=True), version=2)
            assert dc.error_code == ErrorCode.NONE and [b.is_fenced for b in dc.brokers] == [False]
            dl = await conn.send(dlq.DescribeLogDirsRequest(topics=None), version=5)
            assert dl.results and all(r.error_code == ErrorCode.NONE and r.is_cordoned is False for r in dl.results)
        finally:
            await conn.close()
    asyncio.run(main())


def test_produce_v12_and_fetch_v18(broker):
    topic = _topic(broker)

    async def main():
        conn = await _conn(broker)
        try:
            batch = rec.encode_batch([rec.Record(0, 0, b"k", b"v43", [])])
            pr = await conn.send(core.produce_request(None, -1, 10_000, {(topic, 0): batch}), version=12)
            assert pr.responses[0].partition_responses[0].error_code == ErrorCode.NONE
            md = await conn.send(core.metadata_request([topic]))
            tid = md.topics[0].topic_id
            fr = await conn.send(fq.FetchRequest(
                replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
                session_epoch=-1, topics=[fq.FetchTopic(topic_id=tid, partitions=[fq.FetchPartition(
                    partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
                    partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id=""), version=18)
            part = fr.responses[0].partitions[0]
            assert part.error_code == ErrorCode.NONE and part.high_watermark == 1
            values = [r.value for pos, _h in rec.iter_batches(part.records)
                      for r in rec.decode_batch(part.records, pos).records]
            assert values == [b"v43"]
        finally:
            await conn.close()
    asyncio.run(main())


def test_list_offsets_v11_earliest_pending_upload_without_tiered_storage(broker):
    """-6 (KIP-1023) from v11 on; with no remote storage Kafka answers offset -1 and epoch -1.
    Each special timestamp needs its version: an older one answers UNSUPPORTED_VERSION."""
    topic = _topic(broker)

    async def main():
        conn = await _conn(broker)
        try:
            async def lookup(ts: int, version: int):
                r = await conn.send(loq.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
                    loq.ListOffsetsTopic(name=topic, partitions=[
                        loq.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=ts)])]),
                    version=version)
                p = r.topics[0].partitions[0]
                return p.error_code, p.offset, p.leader_epoch

            assert await lookup(-6, 11) == (ErrorCode.NONE, -1, -1)
            assert (await lookup(-6, 10))[0] == ErrorCode.UNSUPPORTED_VERSION
            assert (await lookup(-5, 8))[0] == ErrorCode.UNSUPPORTED_VERSION
            assert (await lookup(-3, 6))[0] == ErrorCode.UNSUPPORTED_VERSION
            assert await lookup(-2, 11) == (ErrorCode.NONE, 0, 0)
        finally:
            await conn.close()
    asyncio.run(main())


def test_list_transactions_v2_filters_by_a_whole_id_pattern(broker):
    """KIP-1152: the pattern (RE2 syntax) must match the whole transactional id; a malformed
    one answers INVALID_REGULAR_EXPRESSION."""
    from confluent_kafka import Producer

    prefix = f"v43-{uuid.uuid4().hex[:6]}"
    producers = []
    for suffix in ("a", "b"):
        p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"{prefix}-{suffix}"})
        p.init_transactions(30)
        producers.append(p)

    async def main():
        conn = await _conn(broker)
        try:
            async def listed(pattern, version=2):
                r = await conn.send(ltq.ListTransactionsRequest(
                    state_filters=[], producer_id_filters=[], duration_filter=-1,
                    transactional_id_pattern=pattern), version=version)
                return r.error_code, sorted(t.transactional_id for t in r.transaction_states
                                            if t.transactional_id.startswith(prefix))

            assert await listed(None) == (ErrorCode.NONE, [f"{prefix}-a", f"{prefix}-b"])
            assert await listed(f"{prefix}-[b-z]") == (ErrorCode.NONE, [f"{prefix}-b"])
            assert await listed(prefix) == (ErrorCode.NONE, [])  # a prefix alone is not the whole id
            assert await listed(f"{prefix}-.*", version=1) == (ErrorCode.NONE, [f"{prefix}-a", f"{prefix}-b"])
            assert (await listed("(ab(cd"))[0] == ErrorCode.INVALID_REGULAR_EXPRESSION
        finally:
            await conn.close()
    asyncio.run(main())


def test_produce_v13_names_topics_by_id(broker):
    topic = _topic(broker)

    async def main():
        conn = await _conn(broker)
        try:
            tid = (await conn.send(core.metadata_request([topic]))).topics[0].topic_id
            unknown = uuid.uuid4()
            batch = rec.encode_batch([rec.Record(0, 0, None, b"by-id", [])])
            resp = await conn.send(prq.ProduceRequest(acks=-1, timeout_ms=10_000, topic_data=[
                prq.TopicProduceData(topic_id=t, partition_data=[prq.PartitionProduceData(index=0, records=batch)])
                for t in (tid, unknown)]), version=13)
            got = {t.topic_id: (t.name, [(p.error_code, p.base_offset) for p in t.partition_responses])
                   for t in resp.responses}
            assert got == {tid: ("", [(ErrorCode.NONE, 0)]), unknown: ("", [(ErrorCode.UNKNOWN_TOPIC_ID, -1)])}
        finally:
            await conn.close()
    asyncio.run(main())


def test_offset_commit_and_fetch_v10_name_topics_by_id(broker):
    topic = _topic(broker)
    group = f"v43-{uuid.uuid4().hex[:6]}"

    async def main():
        conn = await _conn(broker)
        try:
            tid = (await conn.send(core.metadata_request([topic]))).topics[0].topic_id
            unknown = uuid.uuid4()
            await find_coordinator(conn, group)
            for _ in range(100):  # the coordinator may still be loading its partition
                resp = await conn.send(ocq.OffsetCommitRequest(
                    group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
                        ocq.OffsetCommitRequestTopic(topic_id=t, partitions=[
                            ocq.OffsetCommitRequestPartition(partition_index=0, committed_offset=7)])
                        for t in (tid, unknown)]), version=10)
                errors = {t.topic_id: t.partitions[0].error_code for t in resp.topics}
                if errors[tid] not in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                       ErrorCode.NOT_COORDINATOR):
                    break
                await asyncio.sleep(0.1)
            assert errors == {tid: ErrorCode.NONE, unknown: ErrorCode.UNKNOWN_TOPIC_ID}
            assert all(t.name == "" for t in resp.topics)

            def fetch(topics):
                return conn.send(ofq.OffsetFetchRequest(groups=[ofq.OffsetFetchRequestGroup(
                    group_id=group, topics=topics)], require_stable=False), version=10)

            got = (await fetch([ofq.OffsetFetchRequestTopics(topic_id=t, partition_indexes=[0])
                                for t in (tid, unknown)])).groups[0]
            assert got.error_code == ErrorCode.NONE
            assert {t.topic_id: (t.partitions[0].committed_offset, t.partitions[0].error_code) for t in got.topics} \
                == {tid: (7, ErrorCode.NONE), unknown: (-1, ErrorCode.UNKNOWN_TOPIC_ID)}
            every = (await fetch(None)).groups[0]
            assert [(t.topic_id, t.partitions[0].committed_offset) for t in every.topics] == [(tid, 7)]
        finally:
            await conn.close()
    asyncio.run(main())
