"""Record formats of __consumer_offsets: version-prefixed keys and values, as Kafka writes them.

Key versions 0 and 1 are offset commits, 2 is group metadata, 3 to 9 the records of KIP-848
consumer groups, 10 to 15 those of KIP-932 share groups, 17 to 23 those of KIP-1071 streams groups
(Kafka 4's coordinator record types; other types are skipped on load). A
record with a null value is a tombstone.
Values are written at the highest non-flexible version Kafka writes: OffsetCommitValue v3
(v1 when the commit carries an explicit expire timestamp), GroupMetadataValue v3.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from rivulet.common.time import SYSTEM_CLOCK
from rivulet.coordinator.group_metadata import (
    EMPTY,
    STABLE,
    GroupMetadata,
    MemberMetadata,
    OffsetAndMetadata,
)
from rivulet.protocol.schema import Struct
from rivulet.protocol.messages.consumer_group_current_member_assignment_key import (
    ConsumerGroupCurrentMemberAssignmentKey,
)
from rivulet.protocol.messages.consumer_group_current_member_assignment_value import (
    ConsumerGroupCurrentMemberAssignmentValue,
)
from rivulet.protocol.messages.consumer_group_member_metadata_key import ConsumerGroupMemberMetadataKey
from rivulet.protocol.messages.consumer_group_member_metadata_value import ConsumerGroupMemberMetadataValue
from rivulet.protocol.messages.consumer_group_metadata_key import ConsumerGroupMetadataKey
from rivulet.protocol.messages.consumer_group_metadata_value import ConsumerGroupMetadataValue
from rivulet.protocol.messages.consumer_group_regular_expression_key import ConsumerGroupRegularExpressionKey
from rivulet.protocol.messages.consumer_group_regular_expression_value import ConsumerGroupRegularExpressionValue
from rivulet.protocol.messages.consumer_group_target_assignment_member_key import (
    ConsumerGroupTargetAssignmentMemberKey,
)
from rivulet.protocol.messages.consumer_group_target_assignment_member_value import (
    ConsumerGroupTargetAssignmentMemberValue,
)
from rivulet.protocol.messages.consumer_group_target_assignment_metadata_key import (
    ConsumerGroupTargetAssignmentMetadataKey,
)
from rivulet.protocol.messages.consumer_group_target_assignment_metadata_value import (
    ConsumerGroupTargetAssignmentMetadataValue,
)
from rivulet.protocol.messages.group_metadata_key import GroupMetadataKey
from rivulet.protocol.messages.group_metadata_value import GroupMetadataValue, MemberMetadata as MemberValue
from rivulet.protocol.messages.legacy_offset_commit_key import LegacyOffsetCommitKey
from rivulet.protocol.messages.offset_commit_key import OffsetCommitKey
from rivulet.protocol.messages.offset_commit_value import OffsetCommitValue
from rivulet.protocol.messages.share_group_current_member_assignment_key import (
    ShareGroupCurrentMemberAssignmentKey,
)
from rivulet.protocol.messages.share_group_current_member_assignment_value import (
    ShareGroupCurrentMemberAssignmentValue,
)
from rivulet.protocol.messages.share_group_member_metadata_key import ShareGroupMemberMetadataKey
from rivulet.protocol.messages.share_group_member_metadata_value import ShareGroupMemberMetadataValue
from rivulet.protocol.messages.share_group_metadata_key import ShareGroupMetadataKey
from rivulet.protocol.messages.share_group_metadata_value import ShareGroupMetadataValue
from rivulet.protocol.messages.share_group_state_partition_metadata_key import ShareGroupStatePartitionMetadataKey
from rivulet.protocol.messages.share_group_state_partition_metadata_value import (
    ShareGroupStatePartitionMetadataValue,
)
from rivulet.protocol.messages.share_group_target_assignment_member_key import ShareGroupTargetAssignmentMemberKey
from rivulet.protocol.messages.share_group_target_assignment_member_value import (
    ShareGroupTargetAssignmentMemberValue,
)
from rivulet.protocol.messages.share_group_target_assignment_metadata_key import (
    ShareGroupTargetAssignmentMetadataKey,
)
from rivulet.protocol.messages.share_group_target_assignment_metadata_value import (
    ShareGroupTargetAssignmentMetadataValue,
)
from rivulet.protocol.messages.streams_group_metadata_key import StreamsGroupMetadataKey
from rivulet.protocol.messages.streams_group_metadata_value import StreamsGroupMetadataValue
from rivulet.protocol.messages.streams_group_topology_key import StreamsGroupTopologyKey
from rivulet.protocol.messages.streams_group_topology_value import StreamsGroupTopologyValue
from rivulet.protocol.messages.streams_group_member_metadata_key import StreamsGroupMemberMetadataKey
from rivulet.protocol.messages.streams_group_member_metadata_value import StreamsGroupMemberMetadataValue
from rivulet.protocol.messages.streams_group_target_assignment_metadata_key import StreamsGroupTargetAssignmentMetadataKey
from rivulet.protocol.messages.streams_group_target_assignment_metadata_value import StreamsGroupTargetAssignmentMetadataValue
from rivulet.protocol.messages.streams_group_target_assignment_member_key import StreamsGroupTargetAssignmentMemberKey
from rivulet.protocol.messages.streams_group_target_assignment_member_value import StreamsGroupTargetAssignmentMemberValue
from rivulet.protocol.messages.streams_group_current_member_assignment_key import StreamsGroupCurrentMemberAssignmentKey
from rivulet.protocol.messages.streams_group_current_member_assignment_value import StreamsGroupCurrentMemberAssignmentValue

GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_METADATA_VALUE_VERSION = 3
NO_PARTITION_LEADER_EPOCH = -1
DEFAULT_TIMESTAMP = -1

_VERSION = struct.Struct(">h")


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(frozen=True, slots=True)
class UnknownKey:
    version: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupRecordKey:
    """A KIP-848 consumer group record: its decoded key, and how to decode its value."""

    key: Any  # the record type's key message, which the group's replay takes by its type
    value_type: type[Struct]


@dataclass(frozen=True, slots=True)
class ShareGroupRecordKey:
    """A KIP-932 share group record: its decoded key, and how to decode its value."""

    key: Any  # the record type's key message, which the group's replay takes by its type
    value_type: type[Struct]


@dataclass(frozen=True, slots=True)
class StreamsGroupRecordKey:
    """A KIP-1071 streams group record: its decoded key, and how to decode its value."""

    key: Any  # the record type's key message, which the group's replay takes by its type
    value_type: type[Struct]


# Record type -> (key struct, value struct) of the consumer group records; type 4 (partition
# metadata) is no longer written by Kafka 4.1+ and is read for nothing.
_CONSUMER_GROUP_RECORDS = {k.API_KEY: (k, v) for k, v in (
    (ConsumerGroupMetadataKey, ConsumerGroupMetadataValue),
    (ConsumerGroupMemberMetadataKey, ConsumerGroupMemberMetadataValue),
    (ConsumerGroupTargetAssignmentMetadataKey, ConsumerGroupTargetAssignmentMetadataValue),
    (ConsumerGroupTargetAssignmentMemberKey, ConsumerGroupTargetAssignmentMemberValue),
    (ConsumerGroupCurrentMemberAssignmentKey, ConsumerGroupCurrentMemberAssignmentValue),
    (ConsumerGroupRegularExpressionKey, ConsumerGroupRegularExpressionValue))}
_SHARE_GROUP_RECORDS = {k.API_KEY: (k, v) for k, v in (
    (ShareGroupMemberMetadataKey, ShareGroupMemberMetadataValue),
    (ShareGroupMetadataKey, ShareGroupMetadataValue),
    (ShareGroupTargetAssignmentMetadataKey, ShareGroupTargetAssignmentMetadataValue),
    (ShareGroupTargetAssignmentMemberKey, ShareGroupTargetAssignmentMemberValue),
    (ShareGroupCurrentMemberAssignmentKey, ShareGroupCurrentMemberAssignmentValue),
    (ShareGroupStatePartitionMetadataKey, ShareGroupStatePartitionMetadataValue))}

_STREAMS_GROUP_RECORDS = {k.API_KEY: (k, v) for k, v in (
    (StreamsGroupMetadataKey, StreamsGroupMetadataValue),
    (StreamsGroupTopologyKey, StreamsGroupTopologyValue),
    (StreamsGroupMemberMetadataKey, StreamsGroupMemberMetadataValue),
    (StreamsGroupTargetAssignmentMetadataKey, StreamsGroupTargetAssignmentMetadataValue),
    (StreamsGroupTargetAssignmentMemberKey, StreamsGroupTargetAssignmentMemberValue),
    (StreamsGroupCurrentMemberAssignmentKey, StreamsGroupCurrentMemberAssignmentValue))}


def _prefixed(version: int, struct_obj) -> bytes:
    return _VERSION.pack(version) + struct_obj.encode(version)


def _key(struct_obj) -> bytes:
    # A key starts with its record type (Kafka 4's coordinator record types: 1 offset commit,
    # 2 group metadata; Kafka before 4 called it the key's version, with the same values).
    return _VERSION.pack(struct_obj.API_KEY) + struct_obj.encode(0)


def offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    return _key(OffsetCommitKey(group=group, topic=topic, partition=partition))


def group_metadata_key(group: str) -> bytes:
    return _key(GroupMetadataKey(group=group))


def offset_commit_value(om: OffsetAndMetadata) -> bytes:
    version = OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY if om.expire_timestamp is not None \
        else OFFSET_COMMIT_VALUE_VERSION
    return _prefixed(version, OffsetCommitValue(
        offset=om.committed_offset,
        leader_epoch=NO_PARTITION_LEADER_EPOCH if om.leader_epoch is None else om.leader_epoch,
        metadata=om.metadata,
        commit_timestamp=om.commit_timestamp,
        expire_timestamp=DEFAULT_TIMESTAMP if om.expire_timestamp is None else om.expire_timestamp))


def group_metadata_value(group: GroupMetadata, assignment: Mapping[str, bytes]) -> bytes:
    members = []
    for m in group.all_member_metadata():
        if group.protocol_name is None:
            raise RuntimeError("Attempted to write non-empty group metadata with no defined protocol.")
        if m.member_id not in assignment:
            raise RuntimeError(f"Attempted to write member {m.member_id} of group {group.group_id} "
                               "with no assignment.")
        members.append(MemberValue(
            member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
            client_host=m.client_host, rebalance_timeout=m.rebalance_timeout_ms,
            session_timeout=m.session_timeout_ms, subscription=m.metadata(group.protocol_name),
            assignment=bytes(assignment[m.member_id])))
    ts = group.current_state_timestamp
    return _prefixed(GROUP_METADATA_VALUE_VERSION, GroupMetadataValue(
        protocol_type=group.protocol_type or "", generation=group.generation_id, protocol=group.protocol_name,
        leader=group.leader_id, current_state_timestamp=-1 if ts is None else ts, members=members))


def empty_group_metadata_value(group: GroupMetadata) -> bytes:
    """What Kafka writes for a classic group a JoinGroup has just created: no protocol type,
    generation 0, no protocol, leader or members, whatever the joining member brought."""
    ts = group.current_state_timestamp
    return _prefixed(GROUP_METADATA_VALUE_VERSION, GroupMetadataValue(
        protocol_type="", generation=0, protocol=None, leader=None, current_state_timestamp=-1 if ts is None else ts,
        members=[]))


def consumer_group_record(key: object, value: object) -> tuple[bytes, bytes | None]:  # the groups' Records
    """A consumer or share group record (key struct, value struct or None) as written: the key
    after its record type, the value after its version (0, the only one)."""
    return _key(key), None if value is None else _prefixed(0, value)


def read_consumer_group_value(key: ConsumerGroupRecordKey | ShareGroupRecordKey | StreamsGroupRecordKey,
                              data: bytes | None) -> Struct | None:
    if data is None:
        return None
    (version,) = _VERSION.unpack_from(data, 0)
    return key.value_type.decode(data, version, 2)


def read_message_key(data: bytes) -> (OffsetKey | GroupKey | ConsumerGroupRecordKey | ShareGroupRecordKey
                                      | StreamsGroupRecordKey | UnknownKey):
    (record_type,) = _VERSION.unpack_from(data, 0)
    if record_type in _STREAMS_GROUP_RECORDS:
        key_type, value_type = _STREAMS_GROUP_RECORDS[record_type]
        return StreamsGroupRecordKey(key_type.decode(data, 0, 2), value_type)
    if record_type in _SHARE_GROUP_RECORDS:
        key_type, value_type = _SHARE_GROUP_RECORDS[record_type]
        return ShareGroupRecordKey(key_type.decode(data, 0, 2), value_type)
    if record_type in _CONSUMER_GROUP_RECORDS:
        key_type, value_type = _CONSUMER_GROUP_RECORDS[record_type]
        return ConsumerGroupRecordKey(key_type.decode(data, 0, 2), value_type)
    if record_type in (LegacyOffsetCommitKey.API_KEY, OffsetCommitKey.API_KEY):
        k = OffsetCommitKey.decode(data, 0, 2)  # both types have the same fields
        return OffsetKey(k.group, k.topic, k.partition)
    if record_type == GroupMetadataKey.API_KEY:
        return GroupKey(GroupMetadataKey.decode(data, 0, 2).group)
    return UnknownKey(record_type)


def read_offset_message_value(data: bytes | None) -> OffsetAndMetadata | None:
    if data is None:
        return None
    _, v = OffsetCommitValue.decode_versioned(data, "Unknown offset message version: {}")
    return OffsetAndMetadata(
        committed_offset=v.offset,
        leader_epoch=None if v.leader_epoch == NO_PARTITION_LEADER_EPOCH else v.leader_epoch,
        metadata=v.metadata if v.metadata is not None else "",
        commit_timestamp=v.commit_timestamp,
        expire_timestamp=None if v.expire_timestamp == DEFAULT_TIMESTAMP else v.expire_timestamp)


def read_group_message_value(group_id: str, data: bytes | None,
                             clock: Callable[[], int] = SYSTEM_CLOCK.milliseconds) -> GroupMetadata | None:
    """The group as the record describes it: Stable with its members, or Empty."""
    if data is None:
        return None
    version, v = GroupMetadataValue.decode_versioned(data, "Unknown group metadata message version: {}")
    members = [MemberMetadata(
        member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
        client_host=m.client_host,
        rebalance_timeout_ms=m.session_timeout if version == 0 else m.rebalance_timeout,
        session_timeout_ms=m.session_timeout, protocol_type=v.protocol_type,
        supported_protocols=[(v.protocol, bytes(m.subscription))], assignment=bytes(m.assignment))
        for m in v.members]
    group = GroupMetadata(group_id, STABLE if members else EMPTY, clock)
    group.generation_id = v.generation
    group.protocol_type = v.protocol_type or None
    group.protocol_name = v.protocol
    group.leader_id = v.leader
    group.current_state_timestamp = None if v.current_state_timestamp == -1 else v.current_state_timestamp
    for m in members:
        group.add(m)
    group.subscribed_topics = group.compute_subscribed_topics()
    return group
