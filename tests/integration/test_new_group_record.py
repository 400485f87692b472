"""A classic group that a JoinGroup creates, side by side with Kafka 4.3.1: the first JoinGroup
(answered MEMBER_ID_REQUIRED) has the group written to ``__consumer_offsets`` as an empty
GroupMetadata record, so a restarted broker still lists and describes it (Empty); with no
offsets, the next expiry run deletes it with a tombstone. The same raw requests go to a real
Kafka and to Rivulet, and what they answer and write must match."""

from __future__ import annotations

import asyncio
import time
from typing import Callable

import pytest

from conftest import kafka_reference
from rivulet.client.connection import BrokerConnection
from rivulet.coordinator.offsets_topic import GroupKey, read_message_key
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages import (
    describe_groups_request as dgq,
    find_coordinator_request as fcq,
    join_group_request as jgq,
    list_groups_request as lgq,
)
from rivulet.protocol.messages.group_metadata_value import GroupMetadataValue

pytestmark = pytest.mark.integration

GROUP = "new-group"
SETTINGS = {"offsets.topic.num.partitions": "1"}
RETRIES = 600
NOT_READY = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE)


async def _connect(bootstrap: str) -> BrokerConnection:
    host, port = bootstrap.rsplit(":", 1)
    conn = await BrokerConnection(host, int(port)).connect(30)
    for _ in range(RETRIES):  # the first FindCoordinator has __consumer_offsets made
        resp = await conn.send(fcq.FindCoordinatorRequest(key_type=0, coordinator_keys=[GROUP]), 6)
        if resp.coordinators[0].error_code == ErrorCode.NONE:
            return conn
        await asyncio.sleep(0.05)
    raise AssertionError("no coordinator")


async def _groups(conn: BrokerConnection, settle: bool = False) -> dict[str, object]:
    """ListGroups and DescribeGroups, once the coordinator has loaded. ``settle``: until the group
    is described as alive, since Kafka describes at its last committed offset: right after the
    JoinGroup, whose answer does not wait for the record, it can still describe the group Dead."""
    for _ in range(RETRIES):
        described = (await conn.send(dgq.DescribeGroupsRequest(groups=[GROUP]), 5)).groups[0]
        if described.error_code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS \
                and not (settle and described.group_state == "Dead"):
            break
        await asyncio.sleep(0.05)
    listed = await conn.send(lgq.ListGroupsRequest(), 5)
    return {"listed": [(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in listed.groups],
            "described": (ErrorCode(described.error_code), described.group_state, described.protocol_type,
                          described.protocol_data, len(described.members))}


async def _join(bootstrap: str) -> dict[str, object]:
    conn = await _connect(bootstrap)
    try:
        for _ in range(RETRIES):  # Kafka's coordinator may still be taking up the partition
            join = await conn.send(jgq.JoinGroupRequest(
                group_id=GROUP, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
                protocol_type="consumer", protocols=[jgq.JoinGroupRequestProtocol(name="range", metadata=b"")]), 9)
            if join.error_code not in NOT_READY:
                break
            await asyncio.sleep(0.05)
        return {"join": ErrorCode(join.error_code), **await _groups(conn, settle=True)}
    finally:
        await conn.close()


async def _after(bootstrap: str, until_gone: bool = False) -> dict[str, object]:
    conn = await _connect(bootstrap)
    try:
        seen = await _groups(conn)
        deadline = time.monotonic() + 60
        while until_gone and seen["listed"] and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            seen = await _groups(conn)
        return seen
    finally:
        await conn.close()


def _group_records(bootstrap: str) -> list[tuple | None]:
    """The GroupMetadata records of GROUP in __consumer_offsets, in order, as (value version,
    fields but the timestamp); a tombstone as None."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.partition.eof": True,
                  "enable.auto.commit": False})
    c.assign([TopicPartition("__consumer_offsets", 0, 0)])
    out: list[tuple | None] = []
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = c.poll(1)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    break
                raise AssertionError(msg.error())
            if read_message_key(msg.key()) != GroupKey(GROUP):
                continue
            if msg.value() is None:
                out.append(None)
                continue
            version, v = GroupMetadataValue.decode_versioned(msg.value(), "{}")
            assert v.current_state_timestamp > 0
            out.append((version, v.protocol_type, v.generation, v.protocol, v.leader, len(v.members)))
    finally:
        c.close()
    return out


def _observe(bootstrap: str, restart: Callable[[dict[str, str]], str]) -> dict[str, object]:
    seen: dict[str, object] = {"before restart": asyncio.run(_join(bootstrap))}
    bootstrap = restart({})
    seen["after restart"] = asyncio.run(_after(bootstrap))
    seen["records"] = _group_records(bootstrap)
    # Expiry runs every offsets.retention.check.interval.ms: Empty with no offsets, the group goes.
    bootstrap = restart({"offsets.retention.check.interval.ms": "1000"})
    seen["after expiry"] = asyncio.run(_after(bootstrap, until_gone=True))
    seen["records after expiry"] = _group_records(bootstrap)
    return seen


def test_a_new_group_is_written_empty_and_survives_a_restart_as_in_kafka(java, broker_factory):
    with kafka_reference(SETTINGS) as ref:
        def restart_kafka(overrides: dict[str, str]) -> str:
            ref.stop()
            ref.properties.update(overrides)
            return ref.start().bootstrap

        kafka = _observe(ref.bootstrap, restart_kafka)
    broker = broker_factory(SETTINGS)

    def restart_rivulet(overrides: dict[str, str]) -> str:
        broker.stop()
        broker.overrides.update(overrides)
        return broker.start().bootstrap

    rivulet = _observe(broker.bootstrap, restart_rivulet)
    assert rivulet == kafka
    # What Kafka did, spelled out.
    empty = ([(GROUP, "", "Empty", "classic")], (ErrorCode.NONE, "Empty", "", "", 0))
    assert kafka["before restart"] == {"join": ErrorCode.MEMBER_ID_REQUIRED, "listed": empty[0],
                                       "described": empty[1]}
    assert kafka["after restart"] == {"listed": empty[0], "described": empty[1]}
    assert kafka["records"] == [(3, "", 0, None, None, 0)]
    assert kafka["after expiry"]["listed"] == []
    assert kafka["records after expiry"] == [(3, "", 0, None, None, 0), None]
