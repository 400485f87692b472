"""KIP-848 consumer groups as the coordinator keeps them: members, the group epoch, the target
assignment, and the reconciliation that walks each member towards its target without two
members ever owning a partition at once (Kafka's ConsumerGroup, ConsumerGroupMember and
CurrentAssignmentBuilder).

The state changes only by replaying ``__consumer_offsets`` records (``ConsumerGroup.replay``):
a heartbeat computes records, the coordinator replays them at once and appends them, and a
coordinator that loads the partition replays the same records, so both reach the same state.
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Union

from rivulet.coordinator.modern_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    GroupState,
    MemberState,
    RevokingMember,
    reconciliation_state,
)
from rivulet.protocol.messages.consumer_group_current_member_assignment_key import (
    ConsumerGroupCurrentMemberAssignmentKey,
)
from rivulet.protocol.messages.consumer_group_current_member_assignment_value import (
    ConsumerGroupCurrentMemberAssignmentValue,
    TopicPartitions as CurrentTopicPartitions,
)
from rivulet.protocol.messages.consumer_group_member_metadata_key import ConsumerGroupMemberMetadataKey
from rivulet.protocol.messages.consumer_group_member_metadata_value import (
    ClassicMemberMetadata as ClassicMemberMetadataValue,
    ClassicProtocol,
    ConsumerGroupMemberMetadataValue,
)
from rivulet.protocol.messages.consumer_group_metadata_key import ConsumerGroupMetadataKey
from rivulet.protocol.messages.consumer_group_metadata_value import ConsumerGroupMetadataValue
from rivulet.protocol.messages.consumer_group_regular_expression_key import ConsumerGroupRegularExpressionKey
from rivulet.protocol.messages.consumer_group_regular_expression_value import ConsumerGroupRegularExpressionValue
from rivulet.protocol.messages.consumer_group_target_assignment_member_key import (
    ConsumerGroupTargetAssignmentMemberKey,
)
from rivulet.protocol.messages.consumer_group_target_assignment_member_value import (
    ConsumerGroupTargetAssignmentMemberValue,
    TopicPartition as TargetTopicPartition,
)
from rivulet.protocol.messages.consumer_group_target_assignment_metadata_key import (
    ConsumerGroupTargetAssignmentMetadataKey,
)
from rivulet.protocol.messages.consumer_group_target_assignment_metadata_value import (
    ConsumerGroupTargetAssignmentMetadataValue,
)

Assignment = dict[uuid.UUID, set[int]]
"""Partitions by topic id."""
EpochAssignment = dict[uuid.UUID, dict[int, int]]
"""Partitions by topic id, each with the epoch it was assigned at (to fence zombie commits)."""

RecordKey = Union[ConsumerGroupMetadataKey, ConsumerGroupMemberMetadataKey, ConsumerGroupTargetAssignmentMemberKey,
                  ConsumerGroupTargetAssignmentMetadataKey, ConsumerGroupCurrentMemberAssignmentKey,
                  ConsumerGroupRegularExpressionKey]
Record = tuple[RecordKey, object]
"""A ``__consumer_offsets`` record of a consumer group: its key, and its value or None (a tombstone)."""


@dataclass(frozen=True)
class ClassicMember:
    """What a member of the classic protocol brings to a consumer group (online migration): its
    session timeout and its JoinGroup protocols, (name, subscription) most preferred first."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]

    @property
    def protocol_name(self) -> str:
        return self.protocols[0][0]

    def value(self) -> ClassicMemberMetadataValue:
        return ClassicMemberMetadataValue(session_timeout_ms=self.session_timeout_ms, supported_protocols=[
            ClassicProtocol(name=n, metadata=m) for n, m in self.protocols])


@dataclass(frozen=True)
class ConsumerGroupMember(RevokingMember):
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    assigned: Mapping[uuid.UUID, Mapping[int, int]] = field(default_factory=dict)
    pending_revocation: Mapping[uuid.UUID, Mapping[int, int]] = field(default_factory=dict)
    classic: ClassicMember | None = None  # set for a member that speaks the classic protocol

    def with_epoch(self, epoch: int, **changes: object) -> ConsumerGroupMember:
        """A copy moved to ``epoch``, remembering the epoch it leaves (a member whose response
        was lost may come back with it)."""
        previous = self.previous_member_epoch if epoch == self.member_epoch else self.member_epoch
        return dataclasses.replace(self, member_epoch=epoch, previous_member_epoch=previous,
                                   **changes)  # type: ignore[arg-type]

    def assigned_sets(self) -> Assignment:
        return {t: set(ps) for t, ps in self.assigned.items()}

    def subscription_value(self) -> ConsumerGroupMemberMetadataValue:
        return ConsumerGroupMemberMetadataValue(
            instance_id=self.instance_id, rack_id=self.rack_id, client_id=self.client_id,
            client_host=self.client_host, subscribed_topic_names=list(self.subscribed_topic_names),
            subscribed_topic_regex=self.subscribed_topic_regex, rebalance_timeout_ms=self.rebalance_timeout_ms,
            server_assignor=self.server_assignor,
            classic_member_metadata=self.classic.value() if self.classic is not None else None)

    def assignment_value(self) -> ConsumerGroupCurrentMemberAssignmentValue:
        return ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch=self.member_epoch, previous_member_epoch=self.previous_member_epoch,
            state=int(self.state), assigned_partitions=_with_epochs(self.assigned),
            partitions_pending_revocation=_with_epochs(self.pending_revocation))


def _with_epochs(parts: Mapping[uuid.UUID, Mapping[int, int]]) -> list[CurrentTopicPartitions]:
    out = []
    for topic_id in sorted(parts, key=str):
        ps = sorted(parts[topic_id])
        out.append(CurrentTopicPartitions(topic_id=topic_id, partitions=ps,
                                          assignment_epochs=[parts[topic_id][p] for p in ps]))
    return out


def _from_epochs(parts: Iterable[CurrentTopicPartitions], default_epoch: int) -> dict[uuid.UUID, dict[int, int]]:
    out: dict[uuid.UUID, dict[int, int]] = {}
    for tp in parts:
        epochs = tp.assignment_epochs or []
        out[tp.topic_id] = {p: (epochs[i] if i < len(epochs) else default_epoch)
                            for i, p in enumerate(tp.partitions)}
    return out


def member_topic_names(member: ConsumerGroupMember, resolved: Mapping[str, frozenset[str]]) -> set[str]:
    """The topics a member subscribes to: its names, and what its regular expression matches
    (``resolved``: each expression and its topics; one not resolved yet matches nothing)."""
    names = set(member.subscribed_topic_names)
    if member.subscribed_topic_regex:
        names |= resolved.get(member.subscribed_topic_regex, frozenset())
    return names


OwnedPartitions = list[tuple[uuid.UUID, list[int]]]
"""What a member reports it owns in a heartbeat: (topic id, partitions) pairs."""


def reconcile(member: ConsumerGroupMember, target_epoch: int, target: Mapping[uuid.UUID, set[int]],
              subscribed_topic_ids: set[uuid.UUID], owner_epoch: Callable[[uuid.UUID, int], int],
              owned: OwnedPartitions | None) -> ConsumerGroupMember:
    """One reconciliation step of ``member`` towards its target assignment.

    A partition leaves a member first (UNREVOKED_PARTITIONS until the member no longer reports
    it), then goes to the next member once nobody holds it (UNRELEASED_PARTITIONS while
    another member still does). ``owner_epoch(topic, partition)`` is the epoch of the member
    holding that partition, or -1. ``owned`` is None when the member did not report."""
    if member.state == MemberState.UNREVOKED_PARTITIONS and _owns_any(owned, member.pending_revocation):
        return member
    if member.state == MemberState.STABLE and member.member_epoch == target_epoch:
        return member
    if member.state == MemberState.UNKNOWN and (owned is None or owned):
        raise FencedMemberEpoch("The consumer group member is in a unknown state. "
                                "The member must abandon all its partitions and rejoin.")
    epoch = target_epoch if member.state == MemberState.UNKNOWN else member.member_epoch
    assigned: EpochAssignment = {}
    pending_revocation: EpochAssignment = {}
    pending_assignment: Assignment = {}
    unreleased = False
    for topic_id in set(target) | set(member.assigned):
        want = target.get(topic_id, set()) if topic_id in subscribed_topic_ids else set()
        current = member.assigned.get(topic_id, {})
        keep = {p: e for p, e in current.items() if p in want}
        revoke = {p: e for p, e in current.items() if p not in want}
        mine_revoking = member.pending_revocation.get(topic_id, {})
        add = set()
        for p in want:
            if p in keep:
                continue
            if owner_epoch(topic_id, p) != -1 and p not in mine_revoking:
                unreleased = True
            else:
                add.add(p)
        if keep:
            assigned[topic_id] = keep
        if revoke:
            pending_revocation[topic_id] = revoke
        if add:
            pending_assignment[topic_id] = add
    if pending_revocation and _owns_any(owned, pending_revocation):
        return member.with_epoch(epoch, state=MemberState.UNREVOKED_PARTITIONS, assigned=assigned,
                                 pending_revocation=pending_revocation)
    for topic_id, ps in pending_assignment.items():
        assigned.setdefault(topic_id, {}).update(dict.fromkeys(ps, target_epoch))
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return member.with_epoch(target_epoch, state=state, assigned=assigned, pending_revocation={})


def _owns_any(owned: OwnedPartitions | None, parts: Mapping[uuid.UUID, Mapping[int, int]]) -> bool:
    if owned is None:
        return True  # it did not say: assume it still holds them
    return any(p in parts.get(topic_id, {}) for topic_id, ps in owned for p in ps)


def _classic_of(value: ClassicMemberMetadataValue | None) -> ClassicMember | None:
    if value is None:
        return None
    return ClassicMember(value.session_timeout_ms,
                         tuple((p.name, bytes(p.metadata)) for p in value.supported_protocols))


class FencedMemberEpoch(Exception):
    """FENCED_MEMBER_EPOCH: the member must give up its partitions and rejoin."""


@dataclass
class ResolvedRegex:
    topics: frozenset[str]
    version: int
    timestamp: int


class ConsumerGroup:
    """One consumer group's state, changed only through ``replay``."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.metadata_hash = 0
        self.members: dict[str, ConsumerGroupMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.target_assignment: dict[str, Assignment] = {}
        self.target_assignment_epoch = 0
        self.target_assignment_timestamp_ms: int | None = None  # when it was computed; None: never
        self.resolved_regexes: dict[str, ResolvedRegex] = {}
        # Who holds each partition (assigned or still revoking) and at which member epoch.
        self._partition_epochs: dict[tuple[uuid.UUID, int], int] = {}

    # -- reads

    def state(self) -> GroupState:
        if not self.members:
            return GroupState.EMPTY
        return reconciliation_state(self.members.values(), self.group_epoch, self.target_assignment_epoch)

    def partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        return self._partition_epochs.get((topic_id, partition), -1)

    def member_by_instance(self, instance_id: str) -> ConsumerGroupMember | None:
        member_id = self.static_members.get(instance_id)
        return self.members.get(member_id) if member_id is not None else None

    def classic_member_count(self) -> int:
        return sum(1 for m in self.members.values() if m.classic is not None)

    def supports_classic_protocols(self, protocol_type: str, names: Iterable[str]) -> bool:
        """Whether a classic member with these protocols may join: the consumer protocol, and a
        protocol every classic member already in the group supports."""
        names = set(names)
        if protocol_type != "consumer" or not names:
            return False
        classic = [m.classic for m in self.members.values() if m.classic is not None]
        return not classic or any(all(n in {p for p, _ in c.protocols} for c in classic) for n in names)

    def all_classic_except(self, member_id: str) -> bool:
        """Every member but ``member_id`` speaks the classic protocol, and it does not."""
        member = self.members.get(member_id)
        return member is not None and member.classic is None and \
            self.classic_member_count() == len(self.members) - 1

    def waiting_on_unreleased(self, member: ConsumerGroupMember) -> bool:
        """A member in UNRELEASED_PARTITIONS whose target partitions some other member still holds."""
        if member.state != MemberState.UNRELEASED_PARTITIONS:
            return False
        for topic_id, ps in self.target_assignment.get(member.member_id, {}).items():
            mine = member.assigned.get(topic_id, {})
            if any(p not in mine and self.partition_epoch(topic_id, p) != -1 for p in ps):
                return True
        return False

    def subscribed_topic_names(self) -> set[str]:
        resolved = {regex: r.topics for regex, r in self.resolved_regexes.items()}
        names: set[str] = set()
        for m in self.members.values():
            names |= member_topic_names(m, resolved)
        return names

    # -- records of a change, for the caller to replay and append

    def key(self) -> ConsumerGroupMetadataKey:
        return ConsumerGroupMetadataKey(group_id=self.group_id)

    def epoch_record(self, epoch: int, metadata_hash: int) -> Record:
        return (self.key(), ConsumerGroupMetadataValue(epoch=epoch, metadata_hash=metadata_hash))

    def subscription_record(self, member: ConsumerGroupMember) -> Record:
        return (ConsumerGroupMemberMetadataKey(group_id=self.group_id, member_id=member.member_id),
                member.subscription_value())

    def current_assignment_record(self, member: ConsumerGroupMember) -> Record:
        return (ConsumerGroupCurrentMemberAssignmentKey(group_id=self.group_id, member_id=member.member_id),
                member.assignment_value())

    def target_member_record(self, member_id: str, assignment: Mapping[uuid.UUID, set[int]]) -> Record:
        return (ConsumerGroupTargetAssignmentMemberKey(group_id=self.group_id, member_id=member_id),
                ConsumerGroupTargetAssignmentMemberValue(topic_partitions=[
                    TargetTopicPartition(topic_id=t, partitions=sorted(ps))
                    for t, ps in sorted(assignment.items(), key=lambda kv: str(kv[0])) if ps]))

    def target_epoch_record(self, epoch: int, timestamp_ms: int) -> Record:
        return (ConsumerGroupTargetAssignmentMetadataKey(group_id=self.group_id),
                ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=epoch, assignment_timestamp=timestamp_ms))

    def regex_record(self, regex: str, topics: frozenset[str] | None, version: int, timestamp_ms: int) -> Record:
        """A resolved regular expression, or its removal (``topics`` None)."""
        key = ConsumerGroupRegularExpressionKey(group_id=self.group_id, regular_expression=regex)
        if topics is None:
            return (key, None)
        return (key, ConsumerGroupRegularExpressionValue(topics=sorted(topics), version=version,
                                                          timestamp=timestamp_ms))

    def fence_records(self, member_id: str) -> list[Record]:
        """Removing a member: its current assignment, its target, then its subscription
        (the order in which a reader meets them matters)."""
        return [(ConsumerGroupCurrentMemberAssignmentKey(group_id=self.group_id, member_id=member_id), None),
                (ConsumerGroupTargetAssignmentMemberKey(group_id=self.group_id, member_id=member_id), None),
                (ConsumerGroupMemberMetadataKey(group_id=self.group_id, member_id=member_id), None)]

    def tombstone_records(self) -> list[Record]:
        """Removing the group with its members and resolved expressions (it becomes classic)."""
        records: list[Record] = []
        for member_id in self.members:
            records += self.fence_records(member_id)
        for regex in self.resolved_regexes:
            records.append(self.regex_record(regex, None, 0, 0))
        return records + self.delete_records()

    def delete_records(self) -> list[Record]:
        """Removing the group itself (it must be empty)."""
        return [(ConsumerGroupTargetAssignmentMetadataKey(group_id=self.group_id), None), (self.key(), None)]

    # -- replay

    def replay(self, key: RecordKey, value: object) -> None:
        if isinstance(key, ConsumerGroupMetadataKey):
            if isinstance(value, ConsumerGroupMetadataValue):
                self.group_epoch, self.metadata_hash = value.epoch, value.metadata_hash
        elif isinstance(key, ConsumerGroupMemberMetadataKey):
            if value is None:
                self._remove_member(key.member_id)
            else:
                assert isinstance(value, ConsumerGroupMemberMetadataValue)
                old = self.members.get(key.member_id) or ConsumerGroupMember(key.member_id)
                self._put_member(dataclasses.replace(
                    old, instance_id=value.instance_id, rack_id=value.rack_id, client_id=value.client_id,
                    client_host=value.client_host, subscribed_topic_names=tuple(value.subscribed_topic_names),
                    subscribed_topic_regex=value.subscribed_topic_regex or None,
                    rebalance_timeout_ms=value.rebalance_timeout_ms, server_assignor=value.server_assignor,
                    classic=_classic_of(value.classic_member_metadata)))
        elif isinstance(key, ConsumerGroupCurrentMemberAssignmentKey):
            old = self.members.get(key.member_id) or ConsumerGroupMember(key.member_id)
            if value is None:
                self._put_member(dataclasses.replace(
                    old, member_epoch=LEAVE_GROUP_MEMBER_EPOCH, previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                    state=MemberState.UNREVOKED_PARTITIONS, assigned={}, pending_revocation={}))
            else:
                assert isinstance(value, ConsumerGroupCurrentMemberAssignmentValue)
                self._put_member(dataclasses.replace(
                    old, member_epoch=value.member_epoch, previous_member_epoch=value.previous_member_epoch,
                    state=MemberState.of(value.state),
                    assigned=_from_epochs(value.assigned_partitions, value.member_epoch),
                    pending_revocation=_from_epochs(value.partitions_pending_revocation, value.member_epoch)))
        elif isinstance(key, ConsumerGroupTargetAssignmentMemberKey):
            if value is None:
                self.target_assignment.pop(key.member_id, None)
            else:
                assert isinstance(value, ConsumerGroupTargetAssignmentMemberValue)
                self.target_assignment[key.member_id] = {tp.topic_id: set(tp.partitions)
                                                         for tp in value.topic_partitions}
        elif isinstance(key, ConsumerGroupTargetAssignmentMetadataKey):
            if isinstance(value, ConsumerGroupTargetAssignmentMetadataValue):
                self.target_assignment_epoch = value.assignment_epoch
                self.target_assignment_timestamp_ms = value.assignment_timestamp
        elif isinstance(key, ConsumerGroupRegularExpressionKey):
            if value is None:
                self.resolved_regexes.pop(key.regular_expression, None)
            else:
                assert isinstance(value, ConsumerGroupRegularExpressionValue)
                self.resolved_regexes[key.regular_expression] = ResolvedRegex(
                    frozenset(value.topics), value.version, value.timestamp)

    def _put_member(self, member: ConsumerGroupMember) -> None:
        old = self.members.get(member.member_id)
        if old is not None:
            self._release(old)
            if old.instance_id is not None and self.static_members.get(old.instance_id) == old.member_id:
                del self.static_members[old.instance_id]
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        for parts in (member.assigned, member.pending_revocation):
            for topic_id, ps in parts.items():
                for p in ps:
                    self._partition_epochs[(topic_id, p)] = member.member_epoch

    def _remove_member(self, member_id: str) -> None:
        old = self.members.pop(member_id, None)
        if old is not None:
            self._release(old)
            if old.instance_id is not None and self.static_members.get(old.instance_id) == member_id:
                del self.static_members[old.instance_id]

    def _release(self, member: ConsumerGroupMember) -> None:
        for parts in (member.assigned, member.pending_revocation):
            for topic_id, ps in parts.items():
                for p in ps:
                    if self._partition_epochs.get((topic_id, p)) == member.member_epoch:
                        del self._partition_epochs[(topic_id, p)]
