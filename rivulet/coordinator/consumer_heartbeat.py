"""ConsumerGroupHeartbeat as the group coordinator answers it (KIP-848): validate the request,
update the member's subscription (bumping the group epoch when subscriptions or the subscribed
topics change), compute a new target assignment when the group epoch moved past it, and take
one reconciliation step for the member. Pure: it returns the records of the change, which the
coordinator replays into the group and appends to ``__consumer_offsets``, and the timers to
arm or cancel."""

from __future__ import annotations

import dataclasses
import hashlib
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from rivulet.common.cluster import MetadataView
from rivulet.common.regex import InvalidRegex, compile_re2
from rivulet.coordinator.assignors import ASSIGNORS, MemberSpec, PartitionAssignor
from rivulet.coordinator.consumer_group import (
    Assignment,
    ConsumerGroup,
    ConsumerGroupMember,
    FencedMemberEpoch,
    OwnedPartitions,
    Record,
    member_topic_names,
    reconcile,
)
from rivulet.coordinator.modern_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    GroupSessionConfig,
    HeartbeatError,
    MemberState,
    assignment_due,
    fenced_epoch,
    next_group_epoch,
)
from rivulet.protocol.errors import ErrorCode


@dataclass(frozen=True)
class ConsumerGroupConfig(GroupSessionConfig):
    """The broker's ``group.consumer.*`` settings."""

    max_size: int = 2**31 - 1
    assignors: tuple[str, ...] = ("uniform", "range")
    migration_policy: str = "bidirectional"  # group.consumer.migration.policy, lower-cased
    classic_max_size: int = 2**31 - 1  # group.max.size: a group turning classic must fit it


@dataclass
class HeartbeatRequest:
    """ConsumerGroupHeartbeat's fields, None where the member sent no change."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: OwnedPartitions | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass
class GroupHeartbeatAnswer:
    """What a modern group's heartbeat answers (consumer or share group), and the member's
    session timer for the coordinator."""

    error: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None
    session_timeout_ms: int | None = None  # (re)arm the session timer
    cancel_session: bool = False


@dataclass
class HeartbeatResult(GroupHeartbeatAnswer):
    records: list[Record] = field(default_factory=list)
    revocation_timeout_ms: int | None = None  # arm the revocation timer at this member epoch
    cancel_revocation: bool = False


def validate(req: HeartbeatRequest, version: int, config: ConsumerGroupConfig) -> None:
    """Kafka's checks of a heartbeat before it looks at the group: INVALID_REQUEST with the
    reason, UNSUPPORTED_ASSIGNOR for an assignor the broker does not run."""
    def invalid(message: str) -> HeartbeatError:
        return HeartbeatError(ErrorCode.INVALID_REQUEST, message)
    if not req.group_id:
        raise invalid("GroupId can't be empty.")
    if version >= 1 and not req.member_id:
        raise invalid("MemberId can't be empty.")
    if req.instance_id is not None and not req.instance_id:
        raise invalid("InstanceId can't be empty.")
    if req.rack_id is not None and not req.rack_id:
        raise invalid("RackId can't be empty.")
    if req.member_epoch == 0:
        if req.rebalance_timeout_ms == -1:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        if req.owned is None or req.owned:
            raise invalid("TopicPartitions must be empty when (re-)joining.")
        if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
            raise invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
    elif req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if req.instance_id is None:
            raise invalid("InstanceId can't be null.")
    elif req.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise invalid(f"MemberEpoch is invalid: {req.member_epoch}.")
    if req.subscribed_topic_regex:
        try:
            compile_re2(req.subscribed_topic_regex)
        except InvalidRegex as e:
            raise HeartbeatError(ErrorCode.INVALID_REGULAR_EXPRESSION,
                                 f"SubscribedTopicRegex `{req.subscribed_topic_regex}` is not a valid regular "
                                 f"expression: {e}.") from None
    if req.server_assignor is not None and req.server_assignor not in config.assignors:
        raise HeartbeatError(ErrorCode.UNSUPPORTED_ASSIGNOR,
                             f"ServerAssignor {req.server_assignor} is not supported. "
                             f"Supported assignors: {', '.join(config.assignors)}.")


def heartbeat(group: ConsumerGroup, req: HeartbeatRequest, topics: MetadataView, config: ConsumerGroupConfig,
              now_ms: int) -> HeartbeatResult:
    """Answer a validated heartbeat of a member that is not leaving. ``group`` is the group as it
    stands (a new, empty one when it did not exist); nothing in it changes here."""
    member = group.members.get(req.member_id)
    # A static member (group.instance.id) that comes back under a new member id takes over its
    # old self: its assignment, without a rebalance.
    replaced: ConsumerGroupMember | None = None
    static = group.member_by_instance(req.instance_id) if req.instance_id is not None else None
    if req.member_epoch == 0:
        if static is not None and static.member_id != req.member_id:
            if static.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise HeartbeatError(ErrorCode.UNRELEASED_INSTANCE_ID,
                                     f"Static member {req.member_id} with instance id {req.instance_id} cannot "
                                     f"join the group because the instance id is owned by {static.member_id} "
                                     "member.")
            replaced = static
            member = dataclasses.replace(static, member_id=req.member_id, member_epoch=0, previous_member_epoch=0)
        elif member is None:
            if len(group.members) >= config.max_size:
                raise HeartbeatError(ErrorCode.GROUP_MAX_SIZE_REACHED, "The consumer group has reached its "
                                     f"maximum capacity of {config.max_size} members.")
            member = ConsumerGroupMember(req.member_id)
    else:
        if req.instance_id is not None:
            _check_static(static, req.member_id, req.instance_id)
        if member is None:
            raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {req.member_id} is not a member of group {group.group_id}.")
        _check_epoch(member, req.member_epoch, req.owned)

    updated = dataclasses.replace(
        member,
        instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
        rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
        rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1
        else member.rebalance_timeout_ms,
        server_assignor=req.server_assignor if req.server_assignor is not None else member.server_assignor,
        subscribed_topic_names=tuple(sorted(set(req.subscribed_topic_names)))
        if req.subscribed_topic_names is not None else member.subscribed_topic_names,
        subscribed_topic_regex=(req.subscribed_topic_regex or None) if req.subscribed_topic_regex is not None
        else member.subscribed_topic_regex,
        client_id=req.client_id, client_host=req.client_host)
    step = advance(group, member, updated, replaced, req.owned, req.member_epoch == 0, topics, config, now_ms)
    result = HeartbeatResult(member_id=updated.member_id, heartbeat_interval_ms=config.heartbeat_interval_ms,
                             session_timeout_ms=config.session_timeout_ms, member_epoch=step.member.member_epoch,
                             records=step.records)
    step.arm_revocation(result)
    if req.owned is not None or req.member_epoch == 0 or step.assignment_changed:
        result.assignment = step.member.assigned_sets()
    return result


@dataclass
class Step:
    """What one request of a member changed: the member after reconciliation, and the records."""

    member: ConsumerGroupMember
    records: list[Record]
    assignment_changed: bool

    def arm_revocation(self, result: HeartbeatResult) -> None:
        """A member that must give partitions up has its rebalance timeout to do it."""
        if not self.assignment_changed:
            return
        if self.member.state == MemberState.UNREVOKED_PARTITIONS:
            result.revocation_timeout_ms = self.member.rebalance_timeout_ms
        else:
            result.cancel_revocation = True


def advance(group: ConsumerGroup, member: ConsumerGroupMember, updated: ConsumerGroupMember,
            replaced: ConsumerGroupMember | None, owned: OwnedPartitions | None, rejoining: bool,
            topics: MetadataView, config: ConsumerGroupConfig, now_ms: int) -> Step:
    """The steps every member's request takes, whichever protocol it speaks: persist the member
    (``updated``, which was ``member``), bump the group epoch when subscriptions or the subscribed
    topics changed, compute the target assignment when the epoch moved past it, and take one
    reconciliation step towards it given what the member ``owned``."""
    records: list[Record] = []
    joined = updated.member_id not in group.members
    bump = joined and replaced is None
    members = dict(group.members)
    if replaced is not None:
        records += group.fence_records(replaced.member_id)
        del members[replaced.member_id]
        records.append(group.target_member_record(
            updated.member_id, group.target_assignment.get(replaced.member_id, {})))
    if updated != member or joined:
        records.append(group.subscription_record(updated))
        bump = bump or updated.subscribed_topic_names != member.subscribed_topic_names \
            or updated.subscribed_topic_regex != member.subscribed_topic_regex
    members[updated.member_id] = updated
    resolved, regex_records = resolve_regexes(group, members.values(), topics, now_ms)
    if regex_records:
        records += regex_records
        bump = True
    metadata_hash = subscription_hash(_subscribed_names(resolved, members.values()), topics)
    group_epoch = group.group_epoch
    if bump or metadata_hash != group.metadata_hash:
        group_epoch = next_group_epoch(group_epoch)
        records.append(group.epoch_record(group_epoch, metadata_hash))

    target_epoch = group.target_assignment_epoch
    target = group.target_assignment.get(replaced.member_id if replaced is not None else updated.member_id, {})
    if group_epoch > target_epoch and \
            assignment_due(group.target_assignment_timestamp_ms, now_ms, config.assignment_interval_ms):
        assignor = ASSIGNORS[preferred_assignor(members.values(), config)]
        new_target = compute_target(group, members, topics, assignor, resolved, replaced)
        for member_id, assignment in new_target.items():
            if assignment != group.target_assignment.get(member_id, {}):
                records.append(group.target_member_record(member_id, assignment))
        records.append(group.target_epoch_record(group_epoch, now_ms))
        target_epoch, target = group_epoch, new_target.get(updated.member_id, {})

    changed = False
    if updated.state != MemberState.STABLE or updated.member_epoch != target_epoch or rejoining:
        before = updated
        try:
            updated = reconcile(updated, target_epoch, target, _subscribed_ids(resolved, updated, topics),
                                _owner_epoch(group, updated.member_id, replaced), owned)
        except FencedMemberEpoch as e:
            raise HeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH, str(e)) from None
        if updated != before or joined:
            changed = True
            records.append(group.current_assignment_record(updated))
    return Step(updated, records, changed)


def resolve_regexes(group: ConsumerGroup, members: Iterable[ConsumerGroupMember], topics: MetadataView,
                    now_ms: int) -> tuple[dict[str, frozenset[str]], list[Record]]:
    """The topics each subscribed regular expression matches now (RE2, the whole name, as Kafka
    matches with RE2/J), and the records of what changed since they were last resolved."""
    wanted = {m.subscribed_topic_regex for m in members if m.subscribed_topic_regex}
    records: list[Record] = []
    resolved: dict[str, frozenset[str]] = {}
    names = topics.topic_names() if wanted else []
    for regex in sorted(wanted):
        pattern = compile_re2(regex)
        matched = frozenset(n for n in names if pattern.fullmatch(n))
        resolved[regex] = matched
        old = group.resolved_regexes.get(regex)
        if old is None or old.topics != matched:
            version = old.version + 1 if old is not None else 1
            records.append(group.regex_record(regex, matched, version, now_ms))
    for regex in group.resolved_regexes:
        if regex not in wanted:
            records.append(group.regex_record(regex, None, 0, now_ms))
    return resolved, records


def _check_static(static: ConsumerGroupMember | None, member_id: str, instance_id: str) -> ConsumerGroupMember:
    """The member that holds ``instance_id``, which must be ``member_id`` (else it was fenced)."""
    if static is None:
        raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
    if static.member_id != member_id:
        raise HeartbeatError(ErrorCode.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id "
                             f"{instance_id} was fenced by member {static.member_id}.")
    return static


def leave(group: ConsumerGroup, req: HeartbeatRequest) -> HeartbeatResult:
    """A member leaving (epoch -1), or a static member leaving for now (epoch -2: it keeps its
    assignment until its session expires, so that it finds it again when it comes back)."""
    member = group.members.get(req.member_id)
    if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH and req.instance_id is not None:
        member = _check_static(group.member_by_instance(req.instance_id), req.member_id, req.instance_id)
        left = dataclasses.replace(member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, pending_revocation={})
        return HeartbeatResult(member_id=member.member_id, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                               records=[group.current_assignment_record(left)], cancel_revocation=True)
    if member is None:
        raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                             f"Member {req.member_id} is not a member of group {group.group_id}.")
    return HeartbeatResult(member_id=member.member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                           records=fence(group, member.member_id), cancel_session=True, cancel_revocation=True)


def fence(group: ConsumerGroup, member_id: str) -> list[Record]:
    """The records that remove a member (it left, or its session or revocation deadline
    passed); the group epoch moves so that the others get its partitions."""
    records = group.fence_records(member_id)
    records.append(group.epoch_record(group.group_epoch + 1, group.metadata_hash))
    return records


def compute_target(group: ConsumerGroup, members: Mapping[str, ConsumerGroupMember], topics: MetadataView,
                   assignor: PartitionAssignor, resolved: Resolved,
                   replaced: ConsumerGroupMember | None = None) -> dict[str, Assignment]:
    """The assignor's answer for ``members``; each keeps what its current target gives it where
    it can (a static member that took over another's place, that one's)."""
    specs: dict[str, MemberSpec] = {}
    partitions: dict[uuid.UUID, int] = {}
    names: dict[uuid.UUID, str] = {}
    for member_id, m in members.items():
        ids = _subscribed_ids(resolved, m, topics)
        for name in member_topic_names(m, resolved):
            info = topics.get(name)
            if info is not None:
                partitions[info.topic_id] = info.num_partitions
                names[info.topic_id] = name
        was = replaced.member_id if replaced is not None and m.instance_id == replaced.instance_id else member_id
        current = group.target_assignment.get(was, {})
        specs[member_id] = MemberSpec(frozenset(ids), m.rack_id, {t: frozenset(ps) for t, ps in current.items()})
    def racks(topic_id: uuid.UUID, partition: int) -> frozenset[str]:
        return topics.partition_racks(names[topic_id], partition)
    # Racks matter only once a member says where it is (client.rack).
    return assignor.assign(specs, partitions, racks if any(m.rack_id for m in members.values()) else None)


def preferred_assignor(members: Iterable[ConsumerGroupMember], config: ConsumerGroupConfig) -> str:
    """The assignor most members asked for (ties to the earlier in ``group.consumer.assignors``),
    else the first configured."""
    votes = Counter(m.server_assignor for m in members if m.server_assignor)
    if not votes:
        return config.assignors[0]
    return max(votes, key=lambda name: (votes[name], -config.assignors.index(name)))


def subscription_hash(names: set[str], topics: MetadataView) -> int:
    """A digest of the subscribed topics as they stand (id and partition count): when it moves,
    the group epoch moves and the target assignment is computed again."""
    h = hashlib.blake2b(digest_size=8)
    for name in sorted(names):
        info = topics.get(name)
        if info is not None:
            h.update(f"{name}\0{info.topic_id}\0{info.num_partitions}\n".encode())
    return int.from_bytes(h.digest(), "big", signed=True) if names else 0


def _check_epoch(member: ConsumerGroupMember, received: int, owned: OwnedPartitions | None) -> None:
    if received > member.member_epoch:
        raise fenced_epoch("consumer", received, member.member_epoch, "partitions")
    if received < member.member_epoch:
        # The response that carried the new epoch may have been lost.
        subset = owned is not None and all(p in member.assigned.get(t, {}) for t, ps in owned for p in ps)
        if received != member.previous_member_epoch or not subset:
            raise fenced_epoch("consumer", received, member.member_epoch, "partitions")


Resolved = Mapping[str, frozenset[str]]
"""Each regular expression the group's members subscribe with, and the topics it matches."""


def _subscribed_names(resolved: Resolved, members: Iterable[ConsumerGroupMember]) -> set[str]:
    names: set[str] = set()
    for m in members:
        names |= member_topic_names(m, resolved)
    return names


def _subscribed_ids(resolved: Resolved, m: ConsumerGroupMember, topics: MetadataView) -> set[uuid.UUID]:
    ids = set()
    for name in member_topic_names(m, resolved):
        info = topics.get(name)
        if info is not None:
            ids.add(info.topic_id)
    return ids


def _owner_epoch(group: ConsumerGroup, member_id: str,
                 replaced: ConsumerGroupMember | None = None) -> Callable[[uuid.UUID, int], int]:
    """Who else holds a partition: the group's view, less this member's own holdings (and those
    of the static member it replaces)."""
    mine = [m for m in (group.members.get(member_id), replaced) if m is not None]

    def epoch(topic_id: uuid.UUID, partition: int) -> int:
        for m in mine:
            if partition in m.assigned.get(topic_id, {}) or partition in m.pending_revocation.get(topic_id, {}):
                return -1
        return group.partition_epoch(topic_id, partition)
    return epoch
