"""Classic members of a KIP-848 consumer group (online migration): JoinGroup, SyncGroup,
Heartbeat and LeaveGroup of a consumer that speaks the classic protocol, answered by the
consumer group as Kafka 4 answers them.

Such a member is a consumer group member like any other: the server-side assignor gives it
its partitions, and it reconciles as the others do, but through rebalances of its own. Its
JoinGroup takes one reconciliation step with the partitions its subscription says it still
owns, and answers at once with the member epoch as the generation; its SyncGroup returns the
partitions it may own now. Its Heartbeat answers REBALANCE_IN_PROGRESS whenever it should join
again: the group epoch moved past it, it must give partitions up, or the partitions it waits for
were released. Pure, as ``consumer_heartbeat``: records and errors out, nothing changed here."""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass, field

from rivulet.common.cluster import MetadataView
from rivulet.coordinator.consumer_group import (
    ClassicMember,
    ConsumerGroup,
    ConsumerGroupMember,
    OwnedPartitions,
    Record,
)
from rivulet.coordinator.modern_group import HeartbeatError, MemberState
from rivulet.coordinator.consumer_heartbeat import ConsumerGroupConfig, Step, advance
from rivulet.coordinator.group_metadata import CONSUMER_PROTOCOL_TYPE
from rivulet.coordinator.group_migration import named_partitions, new_member_id
from rivulet.protocol.consumer_protocol import decode_subscription, encode_assignment, version_of
from rivulet.protocol.errors import ErrorCode


@dataclass
class ClassicJoin:
    """A JoinGroup request, as the consumer group reads it."""

    group_id: str
    member_id: str
    instance_id: str | None
    require_known_member_id: bool
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]] = field(default_factory=list)


@dataclass
class ClassicJoinResult:
    member_id: str
    error: ErrorCode = ErrorCode.NONE
    generation_id: int = -1
    protocol_name: str | None = None
    step: Step | None = None
    replaced: str | None = None  # the static member this one took the place of

    @property
    def records(self) -> list[Record]:
        return self.step.records if self.step is not None else []


def join(group: ConsumerGroup, req: ClassicJoin, topics: MetadataView, config: ConsumerGroupConfig,
         now_ms: int) -> ClassicJoinResult:
    """A classic member (re)joining: its subscription comes from its protocol metadata, and it
    reports in it the partitions it still owns."""
    member_id = req.member_id or new_member_id()
    existing = group.members.get(member_id)
    if len(group.members) >= config.max_size and existing is None:
        return ClassicJoinResult(member_id, ErrorCode.GROUP_MAX_SIZE_REACHED)
    if existing is not None and existing.classic is None:
        return ClassicJoinResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID)
    if not group.supports_classic_protocols(req.protocol_type, (n for n, _ in req.protocols)):
        return ClassicJoinResult(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    if not req.member_id and req.require_known_member_id:
        return ClassicJoinResult(member_id, ErrorCode.MEMBER_ID_REQUIRED)
    try:
        subscription = decode_subscription(req.protocols[0][1])
    except Exception:
        return ClassicJoinResult(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL)

    replaced: ConsumerGroupMember | None = None
    static = group.member_by_instance(req.instance_id) if req.instance_id is not None else None
    if static is not None and static.member_id != member_id:
        # A static member back under a new id takes its old self's place (and assignment).
        replaced = static
        member = dataclasses.replace(static, member_id=member_id, member_epoch=0, previous_member_epoch=0)
    else:
        member = existing or ConsumerGroupMember(member_id)
    updated = dataclasses.replace(
        member, instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
        rack_id=subscription.rack or member.rack_id,
        rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1
        else member.rebalance_timeout_ms,
        subscribed_topic_names=tuple(sorted(set(subscription.topics))), subscribed_topic_regex=None,
        client_id=req.client_id, client_host=req.client_host,
        classic=ClassicMember(req.session_timeout_ms, tuple((n, bytes(m)) for n, m in req.protocols)))
    by_id: dict[uuid.UUID, list[int]] = {}
    for name, p in subscription.owned:
        info = topics.get(name)
        if info is not None:
            by_id.setdefault(info.topic_id, []).append(p)
    owned: OwnedPartitions = list(by_id.items())
    try:
        step = advance(group, member, updated, replaced, owned, False, topics, config, now_ms)
    except HeartbeatError as e:
        return ClassicJoinResult(member_id, e.code)
    return ClassicJoinResult(member_id, generation_id=step.member.member_epoch,
                             protocol_name=req.protocols[0][0], step=step,
                             replaced=replaced.member_id if replaced is not None else None)


def member_of(group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerGroupMember:
    """The classic member a request names: UNKNOWN_MEMBER_ID, or FENCED_INSTANCE_ID when its
    instance id belongs to another member now."""
    if instance_id is None:
        member = group.members.get(member_id)
        if member is None:
            raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {member_id} is not a member of group {group.group_id}.")
    else:
        member = group.member_by_instance(instance_id)
        if member is None:
            raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member with instance id {instance_id} is not a member of group {group.group_id}.")
        if member.member_id != member_id:
            raise HeartbeatError(ErrorCode.FENCED_INSTANCE_ID,
                                 f"Static member {member_id} with instance id {instance_id} was fenced by member "
                                 f"{member.member_id}.")
    if member.classic is None:
        raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member.member_id} does not use the classic "
                                                          "protocol.")
    return member


def sync(group: ConsumerGroup, member_id: str, instance_id: str | None, generation_id: int,
         protocol_type: str | None, protocol_name: str | None, topics: MetadataView) -> bytes:
    """The partitions the member may own now, in the version of its subscription. Raises
    HeartbeatError (REBALANCE_IN_PROGRESS when it must join again first)."""
    member = member_of(group, member_id, instance_id)
    assert member.classic is not None
    if generation_id != member.member_epoch:
        raise HeartbeatError(ErrorCode.ILLEGAL_GENERATION, f"The generation id {generation_id} is not equal to "
                                                           f"the member epoch {member.member_epoch}.")
    if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or \
            (protocol_name is not None and protocol_name != member.classic.protocol_name):
        raise HeartbeatError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "The protocol type or name is not consistent "
                                                                    "with the member's.")
    if must_rejoin_before_sync(group, member):
        raise HeartbeatError(ErrorCode.REBALANCE_IN_PROGRESS, f"A new rebalance is triggered in group "
                                                              f"{group.group_id} and member {member_id} should "
                                                              "rejoin to catch up.")
    return encode_assignment(named_partitions(member.assigned, topics),
                             version=version_of(member.classic.protocols[0][1]))


def must_rejoin_before_sync(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
    # A member still revoking has rejoined already: it gets what it keeps, revokes, and rejoins.
    return group.group_epoch > member.member_epoch and member.state != MemberState.UNREVOKED_PARTITIONS


def heartbeat(group: ConsumerGroup, member_id: str, instance_id: str | None, generation_id: int) -> ErrorCode:
    """NONE, or REBALANCE_IN_PROGRESS when the member should join again: the group epoch moved
    past it, it has partitions to give up, or the partitions it waits for are free now."""
    member = member_of(group, member_id, instance_id)
    if generation_id != member.member_epoch:
        raise HeartbeatError(ErrorCode.ILLEGAL_GENERATION, f"The generation id {generation_id} is not equal to "
                                                           f"the member epoch {member.member_epoch}.")
    if member.member_epoch < group.group_epoch or member.state == MemberState.UNREVOKED_PARTITIONS or \
            (member.state == MemberState.UNRELEASED_PARTITIONS and not group.waiting_on_unreleased(member)):
        return ErrorCode.REBALANCE_IN_PROGRESS
    return ErrorCode.NONE


def leave(group: ConsumerGroup, leaving: list[tuple[str, str | None, str | None]]
          ) -> tuple[list[tuple[str, str | None, ErrorCode]], list[str], list[Record]]:
    """LeaveGroup of classic members: (each one's answer, the member ids removed, the records).
    A static member may be removed by instance id alone (an administrator's request)."""
    results: list[tuple[str, str | None, ErrorCode]] = []
    removed: list[str] = []
    records: list[Record] = []
    for member_id, instance_id, _reason in leaving:
        try:
            if instance_id is not None and not member_id:
                member = group.member_by_instance(instance_id)
                if member is None:
                    raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
                member = member_of(group, member.member_id, instance_id)
            else:
                member = member_of(group, member_id, instance_id)
        except HeartbeatError as e:
            results.append((member_id, instance_id, e.code))
            continue
        if member.member_id not in removed:
            removed.append(member.member_id)
            records += group.fence_records(member.member_id)
        results.append((member.member_id, instance_id, ErrorCode.NONE))
    if records:
        records.append(group.epoch_record(group.group_epoch + 1, group.metadata_hash))
    return results, removed, records
