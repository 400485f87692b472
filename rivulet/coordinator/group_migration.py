"""Online migration between the two group protocols, as Kafka 4 does it: a classic group whose
members use the consumer protocol becomes a KIP-848 consumer group when a member of the new
protocol joins it, and a consumer group whose last member of the new protocol leaves, while
classic members remain, becomes classic again (``group.consumer.migration.policy``). In between,
classic members live in the consumer group (``consumer_group_classic``).

Pure: the checks and the converted state as data. The consumer group service replays and
appends the records; the classic side of the coordinator answers parked requests and starts the
rebalance."""

from __future__ import annotations

import base64
import uuid

from rivulet.common.cluster import MetadataView
from rivulet.coordinator.consumer_group import (
    ClassicMember,
    ConsumerGroup,
    ConsumerGroupMember,
    Record,
)
from rivulet.coordinator.modern_group import MemberState
from rivulet.coordinator.consumer_heartbeat import ConsumerGroupConfig
from rivulet.coordinator.group_metadata import CONSUMER_PROTOCOL_TYPE, GroupMetadata, MemberMetadata
from rivulet.protocol.consumer_protocol import decode_assignment, decode_subscription, encode_assignment, version_of

MIGRATION_POLICIES = ("disabled", "downgrade", "upgrade", "bidirectional")


class ConversionError(Exception):
    """The group cannot change protocol; the message says why."""


def new_member_id() -> str:
    """A member id as Kafka's coordinator makes one for a consumer group (a random Uuid)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def upgrade_refused(group: GroupMetadata, config: ConsumerGroupConfig) -> str | None:
    """Why a classic group with members may not become a consumer group, or None."""
    if config.migration_policy not in ("upgrade", "bidirectional"):
        return "the online upgrade is disabled"
    if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
        return "the group does not use the consumer embedded protocol"
    if group.size > config.max_size:
        return "the group size exceeds the consumer group maximum size"
    return None


def consumer_group_records(group: GroupMetadata, topics: MetadataView) -> list[Record]:
    """The records that create the consumer group a classic ``group`` becomes: each member
    stable at the classic generation, owning (and targeted with) what its last SyncGroup gave it.
    A member that never synced owns nothing. Raises ConversionError for metadata that is not the
    consumer protocol, or an assignment carrying a custom assignor's user data (it would be lost)."""
    consumer = ConsumerGroup(group.group_id)
    epoch = group.generation_id
    members: list[ConsumerGroupMember] = []
    for m in group.all_member_metadata():
        protocol = group.protocol_name or m.supported_protocols[0][0]
        try:
            subscription = decode_subscription(m.metadata(protocol))
            partitions, user_data = decode_assignment(m.assignment)
        except Exception:
            raise ConversionError(f"Cannot upgrade the classic group {group.group_id} to consumer group because "
                                  "the embedded consumer protocol is malformed.") from None
        if user_data:
            raise ConversionError(f"Cannot upgrade the classic group {group.group_id} to consumer group because "
                                  "userData from a custom assignor would be lost.")
        assigned: dict[uuid.UUID, dict[int, int]] = {}
        for name, p in partitions:
            info = topics.get(name)
            if info is not None:
                assigned.setdefault(info.topic_id, {})[p] = epoch
        members.append(ConsumerGroupMember(
            m.member_id, member_epoch=epoch, previous_member_epoch=epoch, state=MemberState.STABLE,
            instance_id=m.group_instance_id, rack_id=subscription.rack or None, client_id=m.client_id,
            client_host=m.client_host, subscribed_topic_names=tuple(sorted(set(subscription.topics))),
            rebalance_timeout_ms=m.rebalance_timeout_ms, assigned=assigned,
            classic=ClassicMember(m.session_timeout_ms, tuple((n, bytes(d)) for n, d in m.supported_protocols))))
    # Kafka's order: subscriptions, the group epoch, the targets and their epoch, then what each owns.
    records = [consumer.subscription_record(m) for m in members]
    records.append(consumer.epoch_record(epoch, 0))
    records += [consumer.target_member_record(m.member_id, m.assigned_sets()) for m in members]
    # Timestamp 0: the classic leader computed this assignment, not the coordinator's assignor, so
    # it does not hold the group's first one back for consumer.assignment.interval.ms.
    records.append(consumer.target_epoch_record(epoch, 0))
    records += [consumer.current_assignment_record(m) for m in members]
    return records


def downgrades(consumer: ConsumerGroup, leaving_member_id: str, config: ConsumerGroupConfig) -> bool:
    """Whether removing ``leaving_member_id`` turns the group classic again: it is the last
    member of the consumer protocol, classic members remain, and the policy and size allow it."""
    return consumer.all_classic_except(leaving_member_id) and len(consumer.members) > 1 \
        and config.migration_policy in ("downgrade", "bidirectional") \
        and len(consumer.members) - 1 <= config.classic_max_size


def classic_members(consumer: ConsumerGroup, leaving_member_id: str) -> list[MemberMetadata]:
    """The classic group's members: every member but the leaving one, with the protocols it
    joined with (their assignments are set once the group's protocol is chosen)."""
    out = []
    for m in consumer.members.values():
        if m.member_id == leaving_member_id or m.classic is None:
            continue
        out.append(MemberMetadata(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                                  m.classic.session_timeout_ms, CONSUMER_PROTOCOL_TYPE, list(m.classic.protocols)))
    return out


def classic_assignment(consumer: ConsumerGroup, member: MemberMetadata, protocol: str, topics: MetadataView) -> bytes:
    """A classic member's assignment after a downgrade: its target in the consumer group, written
    in the version of the subscription it joined with."""
    target = consumer.target_assignment.get(member.member_id, {})
    return encode_assignment(named_partitions(target, topics), version=version_of(member.metadata(protocol)))


def named_partitions(parts: dict[uuid.UUID, set[int]] | dict[uuid.UUID, dict[int, int]], topics: MetadataView
           ) -> list[tuple[str, int]]:
    out = []
    for topic_id, ps in parts.items():
        name = topics.topic_name(topic_id)
        if name is not None:
            out += [(name, p) for p in ps]
    return out
