"""``__consumer_offsets`` and ``__transaction_state`` made when first needed, as Kafka 4.3.1
makes them: a fresh broker lists neither; what the coordinators' requests answer before; the
first FindCoordinator for a key has the topic made and answers COORDINATOR_NOT_AVAILABLE; then
the topic is there with the configured partitions and configs and the coordinator answers;
Metadata naming an internal topic with auto-creation has it made too. The same raw requests go
to a real Kafka 4.3.1 and to Rivulet, and the answers must match."""

from __future__ import annotations

import asyncio

import pytest

from conftest import kafka_reference
from rivulet.client.connection import BrokerConnection
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages import (
    describe_configs_request as dcq,
    describe_groups_request as dgq,
    find_coordinator_request as fcq,
    init_producer_id_request as ipq,
    join_group_request as jgq,
    list_groups_request as lgq,
    metadata_request as mq,
    offset_commit_request as ocq,
    offset_fetch_request as ofq,
)

pytestmark = pytest.mark.integration

# Partition counts apart from either broker's default, so the answer shows the configured one.
SETTINGS = {"offsets.topic.num.partitions": "5", "transaction.state.log.num.partitions": "3",
            "share.coordinator.state.topic.num.partitions": "4"}
INTERNAL = ("__consumer_offsets", "__transaction_state")
GROUP, TXN = 0, 1
TOPIC_RESOURCE = 2
CONFIGS = ("cleanup.policy", "compression.type", "segment.bytes", "min.insync.replicas",
           "unclean.leader.election.enable")


def create_topic(bootstrap: str, name: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])[name].result(30)


async def _topics(conn: BrokerConnection, names: list[str] | None = None,
                  auto_create: bool = False) -> dict[str, tuple[int, bool, int]]:
    """Metadata: each topic's (error, is_internal, partition count)."""
    topics = None if names is None else [mq.MetadataRequestTopic(name=n) for n in names]
    resp = await conn.send(mq.MetadataRequest(topics=topics, allow_auto_topic_creation=auto_create), 12)
    return {t.name: (t.error_code, t.is_internal, len(t.partitions)) for t in resp.topics}


async def _find(conn: BrokerConnection, key_type: int, key: str) -> int:
    resp = await conn.send(fcq.FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key]), 6)
    return resp.coordinators[0].error_code


async def _configs(conn: BrokerConnection, topic: str) -> dict[str, str | None]:
    resp = await conn.send(dcq.DescribeConfigsRequest(resources=[dcq.DescribeConfigsResource(
        resource_type=TOPIC_RESOURCE, resource_name=topic, configuration_keys=list(CONFIGS))]), 4)
    return {c.name: c.value for c in resp.results[0].configs}


async def _before(conn: BrokerConnection) -> dict[str, object]:
    """What the coordinators answer while neither topic exists."""
    join = await conn.send(jgq.JoinGroupRequest(
        group_id="g", session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="", protocol_type="consumer",
        protocols=[jgq.JoinGroupRequestProtocol(name="range", metadata=b"")]), 9)
    commit = await conn.send(ocq.OffsetCommitRequest(
        group_id="g", generation_id_or_member_epoch=-1, member_id="", topics=[ocq.OffsetCommitRequestTopic(
            name="t", partitions=[ocq.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])]), 9)
    fetch = await conn.send(ofq.OffsetFetchRequest(groups=[ofq.OffsetFetchRequestGroup(group_id="g", topics=None)]), 9)
    describe = await conn.send(dgq.DescribeGroupsRequest(groups=["g"]), 5)
    listed = await conn.send(lgq.ListGroupsRequest(), 5)
    txn = await conn.send(ipq.InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=60000), 5)
    while True:  # Kafka's first block of producer ids may still be on its way from its controller
        idempotent = await conn.send(ipq.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000), 5)
        if idempotent.error_code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            break
        await asyncio.sleep(0.05)
    return {
        "JoinGroup": ErrorCode(join.error_code),
        "OffsetCommit": ErrorCode(commit.topics[0].partitions[0].error_code),
        "OffsetFetch": ErrorCode(fetch.groups[0].error_code),
        "DescribeGroups": ErrorCode(describe.groups[0].error_code),
        "ListGroups": (ErrorCode(listed.error_code), [g.group_id for g in listed.groups]),
        "InitProducerId(transactional)": ErrorCode(txn.error_code),
        "InitProducerId(idempotent)": ErrorCode(idempotent.error_code),
        "topics": await _topics(conn, list(INTERNAL)),
    }


async def _made(conn: BrokerConnection, key_type: int, key: str, topic: str) -> dict[str, object]:
    """The first FindCoordinator for ``key``, then (asked again until it answers) the topic."""
    first = ErrorCode(await _find(conn, key_type, key))
    for _ in range(600):
        again = ErrorCode(await _find(conn, key_type, key))
        if again != ErrorCode.COORDINATOR_NOT_AVAILABLE:
            break
        await asyncio.sleep(0.05)
    return {"first": first, "then": again, "topic": (await _topics(conn, [topic]))[topic],
            "configs": await _configs(conn, topic)}


async def _observe(bootstrap: str) -> dict[str, object]:
    host, port = bootstrap.rsplit(":", 1)
    create_topic(bootstrap, "t")
    conn = await BrokerConnection(host, int(port)).connect(30)
    try:
        seen: dict[str, object] = {"listed": sorted(n for n in await _topics(conn) if n.startswith("__"))}
        seen["before"] = await _before(conn)
        seen["group"] = await _made(conn, GROUP, "g", "__consumer_offsets")
        seen["listed after the group's"] = sorted(n for n in await _topics(conn) if n.startswith("__"))
        seen["txn"] = await _made(conn, TXN, "tx", "__transaction_state")
        # Metadata naming an internal topic, auto-creation allowed, has it made as for its coordinator.
        share = "__share_group_state"
        seen["share asked for"] = (await _topics(conn, [share], auto_create=True))[share]
        for _ in range(600):
            if (made := (await _topics(conn, [share]))[share])[0] == ErrorCode.NONE:
                break
            await asyncio.sleep(0.05)
        seen["share made"] = made
        return seen
    finally:
        await conn.close()


def test_internal_topics_are_made_on_the_first_find_coordinator_as_kafka_does(java, broker_factory):
    with kafka_reference(SETTINGS) as ref:
        kafka = asyncio.run(_observe(ref.bootstrap))
    rivulet = asyncio.run(_observe(broker_factory(SETTINGS).bootstrap))
    assert rivulet == kafka
    # What Kafka answered, spelled out.
    assert kafka["listed"] == []
    assert kafka["group"]["first"] == kafka["txn"]["first"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert kafka["group"]["topic"] == (ErrorCode.NONE, True, 5)
    assert kafka["txn"]["topic"] == (ErrorCode.NONE, True, 3)
    assert kafka["listed after the group's"] == ["__consumer_offsets"]
    assert kafka["share asked for"] == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, True, 0)
    assert kafka["share made"] == (ErrorCode.NONE, True, 4)
