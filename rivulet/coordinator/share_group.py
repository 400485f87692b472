"""KIP-932 share groups as the coordinator keeps them (Kafka's ShareGroup and ShareGroupMember),
and ShareGroupHeartbeat's steps.

A share group is a modern group like a KIP-848 consumer group: a group epoch bumped when
subscriptions or the subscribed topics change, a target assignment computed by a server-side
assignor (``simple``), members with epochs, and state changed only by replaying the
``ShareGroup*`` records of ``__consumer_offsets``. What it does not have: revocation. Members
may share partitions (the share partitions on their leaders hand each record to one member),
so a member moves to its target assignment and the target epoch in one step.

As Kafka 4.3's, only partitions whose share state is initialized are assigned: a heartbeat
records the subscribed partitions without state as initializing and names them for the service,
which initializes their state in the share coordinator (InitializeShareGroupState) and records
them initialized; a later heartbeat then moves the group epoch and assigns them.

Pure: a heartbeat returns the records of its change, which the service replays into the group
and appends, and whether the member's session goes on or ends.
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Union

from rivulet.common.cluster import MetadataView
from rivulet.coordinator.assignors import SHARE_ASSIGNORS, MemberSpec
from rivulet.coordinator.consumer_heartbeat import GroupHeartbeatAnswer, subscription_hash
from rivulet.coordinator.modern_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    GroupMember,
    GroupSessionConfig,
    GroupState,
    HeartbeatError,
    MemberState,
    assignment_due,
    fenced_epoch,
    next_group_epoch,
)
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages.share_group_current_member_assignment_key import (
    ShareGroupCurrentMemberAssignmentKey,
)
from rivulet.protocol.messages.share_group_current_member_assignment_value import (
    ShareGroupCurrentMemberAssignmentValue,
    TopicPartitions as CurrentTopicPartitions,
)
from rivulet.protocol.messages.share_group_member_metadata_key import ShareGroupMemberMetadataKey
from rivulet.protocol.messages.share_group_member_metadata_value import ShareGroupMemberMetadataValue
from rivulet.protocol.messages.share_group_metadata_key import ShareGroupMetadataKey
from rivulet.protocol.messages.share_group_metadata_value import ShareGroupMetadataValue
from rivulet.protocol.messages.share_group_state_partition_metadata_key import ShareGroupStatePartitionMetadataKey
from rivulet.protocol.messages.share_group_state_partition_metadata_value import (
    ShareGroupStatePartitionMetadataValue,
    TopicInfo,
    TopicPartitionsInfo,
)
from rivulet.protocol.messages.share_group_target_assignment_member_key import ShareGroupTargetAssignmentMemberKey
from rivulet.protocol.messages.share_group_target_assignment_member_value import (
    ShareGroupTargetAssignmentMemberValue,
    TopicPartition as TargetTopicPartition,
)
from rivulet.protocol.messages.share_group_target_assignment_metadata_key import (
    ShareGroupTargetAssignmentMetadataKey,
)
from rivulet.protocol.messages.share_group_target_assignment_metadata_value import (
    ShareGroupTargetAssignmentMetadataValue,
)

SHARE_PROTOCOL_TYPE = "share"
ASSIGNOR = SHARE_ASSIGNORS["simple"]  # group.share.assignors names it alone (or by Kafka's class name)

RecordKey = Union[ShareGroupMetadataKey, ShareGroupMemberMetadataKey, ShareGroupTargetAssignmentMemberKey,
                  ShareGroupTargetAssignmentMetadataKey, ShareGroupCurrentMemberAssignmentKey,
                  ShareGroupStatePartitionMetadataKey]
Record = tuple[RecordKey, object]
"""A ``__consumer_offsets`` record of a share group: its key, and its value or None (a tombstone)."""


@dataclass(frozen=True)
class ShareGroupConfig(GroupSessionConfig):
    """The broker's ``group.share.*`` settings."""

    max_size: int = 200


@dataclass(frozen=True)
class ShareGroupMember(GroupMember):
    state: MemberState = MemberState.STABLE
    subscribed_topic_names: tuple[str, ...] = ()
    assigned: Mapping[uuid.UUID, frozenset[int]] = field(default_factory=dict)

    def subscription_value(self) -> ShareGroupMemberMetadataValue:
        return ShareGroupMemberMetadataValue(rack_id=self.rack_id, client_id=self.client_id,
                                             client_host=self.client_host,
                                             subscribed_topic_names=list(self.subscribed_topic_names))

    def assignment_value(self) -> ShareGroupCurrentMemberAssignmentValue:
        return ShareGroupCurrentMemberAssignmentValue(
            member_epoch=self.member_epoch, previous_member_epoch=self.previous_member_epoch, state=int(self.state),
            assigned_partitions=[CurrentTopicPartitions(topic_id=t, partitions=sorted(ps))
                                 for t, ps in sorted(self.assigned.items(), key=lambda kv: str(kv[0])) if ps])


def _frozen(assignment: Mapping[uuid.UUID, Iterable[int]]) -> dict[uuid.UUID, frozenset[int]]:
    return {t: frozenset(ps) for t, ps in assignment.items() if ps}


class ShareGroup:
    """One share group's state, changed only through ``replay``."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.metadata_hash = 0
        self.members: dict[str, ShareGroupMember] = {}
        self.target_assignment: dict[str, dict[uuid.UUID, frozenset[int]]] = {}
        self.target_assignment_epoch = 0
        self.target_assignment_timestamp_ms: int | None = None  # when it was computed; None: never
        # ShareGroupStatePartitionMetadata: the share partitions whose state exists for the group
        # (topic id -> name, partitions), those being initialized (AlterShareGroupOffsets) and the
        # topics whose state is being deleted (DeleteShareGroupOffsets).
        self.initialized: dict[uuid.UUID, tuple[str, frozenset[int]]] = {}
        self.initializing: dict[uuid.UUID, tuple[str, frozenset[int]]] = {}
        self.deleting: dict[uuid.UUID, str] = {}
        self.has_state_metadata = False

    # -- reads

    def state(self) -> GroupState:
        return GroupState.STABLE if self.members else GroupState.EMPTY

    def subscribed_topic_names(self) -> set[str]:
        return {n for m in self.members.values() for n in m.subscribed_topic_names}

    # -- records of a change, for the caller to replay and append

    def epoch_record(self, epoch: int, metadata_hash: int) -> Record:
        return (ShareGroupMetadataKey(group_id=self.group_id),
                ShareGroupMetadataValue(epoch=epoch, metadata_hash=metadata_hash))

    def subscription_record(self, member: ShareGroupMember) -> Record:
        return (ShareGroupMemberMetadataKey(group_id=self.group_id, member_id=member.member_id),
                member.subscription_value())

    def current_assignment_record(self, member: ShareGroupMember) -> Record:
        return (ShareGroupCurrentMemberAssignmentKey(group_id=self.group_id, member_id=member.member_id),
                member.assignment_value())

    def target_member_record(self, member_id: str, assignment: Mapping[uuid.UUID, Iterable[int]]) -> Record:
        return (ShareGroupTargetAssignmentMemberKey(group_id=self.group_id, member_id=member_id),
                ShareGroupTargetAssignmentMemberValue(topic_partitions=[
                    TargetTopicPartition(topic_id=t, partitions=sorted(ps))
                    for t, ps in sorted(assignment.items(), key=lambda kv: str(kv[0])) if ps]))

    def target_epoch_record(self, epoch: int, timestamp_ms: int) -> Record:
        return (ShareGroupTargetAssignmentMetadataKey(group_id=self.group_id),
                ShareGroupTargetAssignmentMetadataValue(assignment_epoch=epoch, assignment_timestamp=timestamp_ms))

    def state_partitions_record(self, initialized: Mapping[uuid.UUID, tuple[str, frozenset[int]]],
                                initializing: Mapping[uuid.UUID, tuple[str, frozenset[int]]] | None = None,
                                deleting: Mapping[uuid.UUID, str] | None = None) -> Record:
        """The group's ShareGroupStatePartitionMetadata; what is not given stays as it is."""
        def infos(topics: Mapping[uuid.UUID, tuple[str, frozenset[int]]]) -> list[TopicPartitionsInfo]:
            return [TopicPartitionsInfo(topic_id=t, topic_name=name, partitions=sorted(ps))
                    for t, (name, ps) in sorted(topics.items(), key=lambda kv: str(kv[0])) if ps]
        deleting = self.deleting if deleting is None else deleting
        return (ShareGroupStatePartitionMetadataKey(group_id=self.group_id),
                ShareGroupStatePartitionMetadataValue(
                    initializing_topics=infos(self.initializing if initializing is None else initializing),
                    initialized_topics=infos(initialized),
                    deleting_topics=[TopicInfo(topic_id=t, topic_name=name)
                                     for t, name in sorted(deleting.items(), key=lambda kv: str(kv[0]))]))

    def fence_records(self, member_id: str) -> list[Record]:
        """Removing a member: its current assignment, its target, then its subscription."""
        return [(ShareGroupCurrentMemberAssignmentKey(group_id=self.group_id, member_id=member_id), None),
                (ShareGroupTargetAssignmentMemberKey(group_id=self.group_id, member_id=member_id), None),
                (ShareGroupMemberMetadataKey(group_id=self.group_id, member_id=member_id), None)]

    def delete_records(self) -> list[Record]:
        """Removing the group (it must be empty): its share-partition metadata, target assignment
        metadata, then the group record."""
        records: list[Record] = []
        for member_id in self.members:
            records += self.fence_records(member_id)
        if self.has_state_metadata:
            records.append((ShareGroupStatePartitionMetadataKey(group_id=self.group_id), None))
        return records + [(ShareGroupTargetAssignmentMetadataKey(group_id=self.group_id), None),
                          (ShareGroupMetadataKey(group_id=self.group_id), None)]

    # -- replay

    def replay(self, key: RecordKey, value: object) -> None:
        if isinstance(key, ShareGroupMetadataKey):
            if isinstance(value, ShareGroupMetadataValue):
                self.group_epoch, self.metadata_hash = value.epoch, value.metadata_hash
        elif isinstance(key, ShareGroupMemberMetadataKey):
            if value is None:
                self.members.pop(key.member_id, None)
            else:
                assert isinstance(value, ShareGroupMemberMetadataValue)
                old = self.members.get(key.member_id) or ShareGroupMember(key.member_id)
                self.members[key.member_id] = dataclasses.replace(
                    old, rack_id=value.rack_id, client_id=value.client_id, client_host=value.client_host,
                    subscribed_topic_names=tuple(value.subscribed_topic_names))
        elif isinstance(key, ShareGroupCurrentMemberAssignmentKey):
            old = self.members.get(key.member_id) or ShareGroupMember(key.member_id)
            if value is None:
                if key.member_id in self.members:
                    self.members[key.member_id] = dataclasses.replace(
                        old, member_epoch=LEAVE_GROUP_MEMBER_EPOCH, previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                        assigned={})
            else:
                assert isinstance(value, ShareGroupCurrentMemberAssignmentValue)
                self.members[key.member_id] = dataclasses.replace(
                    old, member_epoch=value.member_epoch, previous_member_epoch=value.previous_member_epoch,
                    state=MemberState.of(value.state),
                    assigned=_frozen({tp.topic_id: tp.partitions for tp in value.assigned_partitions}))
        elif isinstance(key, ShareGroupTargetAssignmentMemberKey):
            if value is None:
                self.target_assignment.pop(key.member_id, None)
            else:
                assert isinstance(value, ShareGroupTargetAssignmentMemberValue)
                self.target_assignment[key.member_id] = _frozen(
                    {tp.topic_id: tp.partitions for tp in value.topic_partitions})
        elif isinstance(key, ShareGroupTargetAssignmentMetadataKey):
            if isinstance(value, ShareGroupTargetAssignmentMetadataValue):
                self.target_assignment_epoch = value.assignment_epoch
                self.target_assignment_timestamp_ms = value.assignment_timestamp
        elif isinstance(key, ShareGroupStatePartitionMetadataKey):
            if value is None:
                self.initialized, self.initializing, self.deleting = {}, {}, {}
                self.has_state_metadata = False
            else:
                assert isinstance(value, ShareGroupStatePartitionMetadataValue)
                self.has_state_metadata = True
                self.initialized = {t.topic_id: (t.topic_name, frozenset(t.partitions))
                                    for t in value.initialized_topics}
                self.initializing = {t.topic_id: (t.topic_name, frozenset(t.partitions))
                                     for t in value.initializing_topics}
                self.deleting = {t.topic_id: t.topic_name for t in value.deleting_topics}


# ---------------------------------------------------------------- ShareGroupHeartbeat


@dataclass
class ShareHeartbeatRequest:
    """ShareGroupHeartbeat's fields, None where the member sent no change."""

    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: list[str] | None = None
    client_id: str = ""
    client_host: str = ""


StatePartitions = dict[uuid.UUID, tuple[str, frozenset[int]]]
"""Share partitions by topic id: (topic name, partitions)."""


@dataclass
class ShareHeartbeatResult(GroupHeartbeatAnswer):
    records: list[Record] = field(default_factory=list)
    # The partitions this heartbeat recorded initializing: the service initializes their state.
    initialize: StatePartitions = field(default_factory=dict)


def validate(req: ShareHeartbeatRequest) -> None:
    """Kafka's checks of a ShareGroupHeartbeat before it looks at the group (INVALID_REQUEST)."""
    def invalid(message: str) -> HeartbeatError:
        return HeartbeatError(ErrorCode.INVALID_REQUEST, message)
    if not req.member_id.strip():
        raise invalid("MemberId can't be empty.")
    if not req.group_id.strip():
        raise invalid("GroupId can't be empty.")
    if req.rack_id is not None and not req.rack_id.strip():
        raise invalid("RackId can't be empty.")
    if req.member_epoch == 0:
        if not req.subscribed_topic_names:
            raise invalid("SubscribedTopicNames must be set in first request.")
    elif req.member_epoch < LEAVE_GROUP_MEMBER_EPOCH:
        raise invalid("MemberEpoch is invalid.")


def heartbeat(group: ShareGroup, req: ShareHeartbeatRequest, topics: MetadataView, config: ShareGroupConfig,
              now_ms: int) -> ShareHeartbeatResult:
    """Answer a validated heartbeat of a member that is not leaving. ``group`` is the group as it
    stands (a new, empty one when it did not exist); nothing in it changes here."""
    member = group.members.get(req.member_id)
    if member is None and len(group.members) >= config.max_size:
        raise HeartbeatError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                             f"The share group has reached its maximum capacity of {config.max_size} members.")
    if member is None:
        if req.member_epoch != 0:
            raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {req.member_id} is not a member of group {group.group_id}.")
        member = ShareGroupMember(req.member_id)
    else:
        # As Kafka, epoch 0 too: a known member rejoins only from its first epoch (or the one before).
        _check_epoch(member, req.member_epoch)
    joined = req.member_id not in group.members
    updated = dataclasses.replace(
        member, rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
        subscribed_topic_names=tuple(sorted(set(req.subscribed_topic_names)))
        if req.subscribed_topic_names is not None else member.subscribed_topic_names,
        client_id=req.client_id, client_host=req.client_host)

    records: list[Record] = []
    bump = joined
    if updated != member or joined:
        records.append(group.subscription_record(updated))
        bump = bump or updated.subscribed_topic_names != member.subscribed_topic_names
    # As Kafka: with the target up to date, partitions initialized since it was computed move
    # the group epoch, so that they are assigned.
    if group.target_assignment_epoch >= group.group_epoch:
        bump = bump or _initialized_unassigned(group)
    members = dict(group.members)
    members[updated.member_id] = updated
    names = {n for m in members.values() for n in m.subscribed_topic_names}
    metadata_hash = subscription_hash(names, topics)
    group_epoch = group.group_epoch
    if bump or metadata_hash != group.metadata_hash:
        group_epoch = next_group_epoch(group_epoch)
        records.append(group.epoch_record(group_epoch, metadata_hash))

    initialized, initializing, initialize = _state_partitions(group, names, topics)
    target_epoch = group.target_assignment_epoch
    target = group.target_assignment.get(updated.member_id, {})
    if group_epoch > target_epoch and \
            assignment_due(group.target_assignment_timestamp_ms, now_ms, config.assignment_interval_ms):
        new_target = compute_target(group, members, topics, initialized)
        for member_id, assignment in new_target.items():
            if assignment != group.target_assignment.get(member_id, {}):
                records.append(group.target_member_record(member_id, assignment))
        records.append(group.target_epoch_record(group_epoch, now_ms))
        target_epoch, target = group_epoch, new_target.get(updated.member_id, {})

    # No revocation in a share group: the member takes its target at once.
    if updated.member_epoch != target_epoch or updated.assigned != target or joined:
        updated = dataclasses.replace(updated, member_epoch=target_epoch, state=MemberState.STABLE,
                                      previous_member_epoch=updated.member_epoch, assigned=target)
        records.append(group.current_assignment_record(updated))
    if initialized != group.initialized or initializing != group.initializing:
        records.append(group.state_partitions_record(initialized, initializing))
    result = ShareHeartbeatResult(member_id=updated.member_id, member_epoch=updated.member_epoch,
                                  heartbeat_interval_ms=config.heartbeat_interval_ms,
                                  session_timeout_ms=config.session_timeout_ms, records=records,
                                  initialize=initialize)
    if req.member_epoch == 0 or req.subscribed_topic_names is not None or updated.assigned != member.assigned:
        result.assignment = {t: set(ps) for t, ps in updated.assigned.items()}
    return result


def leave(group: ShareGroup, req: ShareHeartbeatRequest) -> ShareHeartbeatResult:
    """A member leaving (epoch -1): it is removed and the group epoch moves."""
    if req.member_id not in group.members:
        raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                             f"Member {req.member_id} is not a member of group {group.group_id}.")
    return ShareHeartbeatResult(member_id=req.member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                                records=fence(group, req.member_id), cancel_session=True)


def fence(group: ShareGroup, member_id: str) -> list[Record]:
    """The records that remove a member (it left, or its session expired); the group epoch moves
    so that the target assignment is computed again without it."""
    return group.fence_records(member_id) + [group.epoch_record(group.group_epoch + 1, group.metadata_hash)]


def compute_target(group: ShareGroup, members: Mapping[str, ShareGroupMember], topics: MetadataView,
                   initialized: Mapping[uuid.UUID, tuple[str, frozenset[int]]]
                   ) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
    """The simple assignor's answer for ``members``, sticky to the current target, over the
    ``initialized`` share partitions only (Kafka's assignable partitions)."""
    specs: dict[str, MemberSpec] = {}
    partitions: dict[uuid.UUID, int] = {}
    for member_id, m in members.items():
        ids = set()
        for name in m.subscribed_topic_names:
            info = topics.get(name)
            if info is not None and info.topic_id in initialized:
                ids.add(info.topic_id)
                partitions[info.topic_id] = info.num_partitions
        specs[member_id] = MemberSpec(frozenset(ids), m.rack_id, group.target_assignment.get(member_id, {}))
    assignable = {t: ps for t, (_name, ps) in initialized.items()}
    assigned = ASSIGNOR.assign(specs, partitions, assignable=assignable)
    return {m: _frozen(a) for m, a in assigned.items()}


def _initialized_unassigned(group: ShareGroup) -> bool:
    """Kafka's initializedAssignmentPending: a subscribed topic's initialized partitions differ
    from those its target assignment holds."""
    if not group.members or not group.initialized:
        return False
    names = group.subscribed_topic_names()
    targeted: dict[uuid.UUID, set[int]] = {}
    for assignment in group.target_assignment.values():
        for topic_id, ps in assignment.items():
            targeted.setdefault(topic_id, set()).update(ps)
    return any(name in names and targeted.get(topic_id) != ps for topic_id, (name, ps) in group.initialized.items())


def _state_partitions(group: ShareGroup, names: Iterable[str], topics: MetadataView
                      ) -> tuple[StatePartitions, StatePartitions, StatePartitions]:
    """(initialized, initializing, to initialize now) after this heartbeat: the partitions of
    subscribed topics that have no state and are not being initialized are added to those being
    initialized (Kafka's maybeCreateInitializeShareGroupStateRequest); a deleted topic's are
    dropped at once (Kafka lists them as deleting until their state is gone)."""
    initialized = {t: v for t, v in group.initialized.items() if topics.topic_name(t) is not None}
    initializing = {t: v for t, v in group.initializing.items() if topics.topic_name(t) is not None}
    initialize: StatePartitions = {}
    for name in names:
        info = topics.get(name)
        if info is None:
            continue
        done = initialized.get(info.topic_id, (name, frozenset()))[1]
        pending = initializing.get(info.topic_id, (name, frozenset()))[1]
        if len(done) + len(pending) >= info.num_partitions:
            continue  # the common case, without building a set of every partition
        missing = frozenset(range(info.num_partitions)) - done - pending
        if missing:
            initialize[info.topic_id] = (name, missing)
            initializing[info.topic_id] = (name, pending | missing)
    return initialized, initializing, initialize


def initialized_record(group: ShareGroup, done: StatePartitions, failed: StatePartitions) -> Record:
    """The record after the service initialized share partitions' state: ``done`` move from
    initializing to initialized (Kafka's initializeShareGroupState), ``failed`` leave
    initializing, to be tried again at a later heartbeat (uninitializeShareGroupState)."""
    initialized = dict(group.initialized)
    initializing = dict(group.initializing)
    for topic_id, (name, ps) in done.items():
        initialized[topic_id] = (name, initialized.get(topic_id, (name, frozenset()))[1] | ps)
    for topic_id, (_name, ps) in (*done.items(), *failed.items()):
        if topic_id in initializing:
            left = initializing[topic_id][1] - ps
            if left:
                initializing[topic_id] = (initializing[topic_id][0], left)
            else:
                del initializing[topic_id]
    return group.state_partitions_record(initialized, initializing)


def _check_epoch(member: ShareGroupMember, received: int) -> None:
    if received > member.member_epoch:
        raise fenced_epoch("share", received, member.member_epoch, "partitions")
    if received < member.member_epoch and received != member.previous_member_epoch:
        # The previous epoch is accepted: the response that carried the new one may have been lost.
        raise HeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH,
                             f"The share group member has a smaller member epoch ({received}) than the one known "
                             f"by the group coordinator ({member.member_epoch}), and it does not match the previous "
                             f"member epoch ({member.previous_member_epoch}). The member must abandon all its "
                             "partitions and rejoin.")
