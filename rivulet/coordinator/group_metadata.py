"""The classic group protocol's in-memory state: groups, members, committed offsets.

Pure data and the group state machine (Kafka's GroupMetadata / MemberMetadata); no I/O and
no timers. Every mutation is synchronous, so one call on the event loop never interleaves
with another change to the same group.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterable

from rivulet.coordinator.consumer_group import ConsumerGroup
from rivulet.coordinator.share_group import ShareGroup
from rivulet.coordinator.streams_group import StreamsGroup
from rivulet.common.placement import partition_for as coordinator_partition
from rivulet.common.time import SYSTEM_CLOCK
from rivulet.common.types import TopicPartition
from rivulet.protocol.consumer_protocol import decode_subscription
from rivulet.protocol.errors import ErrorCode

CONSUMER_PROTOCOL_TYPE = "consumer"
UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1
NO_LEADER = ""
NO_PROTOCOL = ""
# A new member's JoinGroup is parked at most this long (Kafka's NewMemberJoinTimeoutMs):
# it cannot heartbeat yet and a muted socket hides its disconnect.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000


# ---------------------------------------------------------------- placement

def partition_for(group_id: str, num_partitions: int) -> int:
    """The __consumer_offsets partition (and so the coordinator) of a group."""
    return coordinator_partition(group_id, num_partitions)


# ---------------------------------------------------------------- states

class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


EMPTY = GroupState.EMPTY
PREPARING_REBALANCE = GroupState.PREPARING_REBALANCE
COMPLETING_REBALANCE = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD

# target state -> the states it may be entered from (Kafka's validPreviousStates)
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    PREPARING_REBALANCE: frozenset({STABLE, COMPLETING_REBALANCE, EMPTY}),
    COMPLETING_REBALANCE: frozenset({PREPARING_REBALANCE}),
    STABLE: frozenset({COMPLETING_REBALANCE}),
    DEAD: frozenset({STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE, EMPTY, DEAD}),
    EMPTY: frozenset({PREPARING_REBALANCE}),
}


class IllegalStateTransition(RuntimeError):
    """A transition the state machine forbids: always a coordinator bug."""


# ---------------------------------------------------------------- results handed to callbacks

@dataclass(slots=True)
class JoinGroupMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(slots=True)
class JoinGroupResult:
    member_id: str
    error: ErrorCode = ErrorCode.NONE
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = NO_LEADER
    skip_assignment: bool = False
    members: list[JoinGroupMember] = field(default_factory=list)


@dataclass(slots=True)
class SyncGroupResult:
    error: ErrorCode = ErrorCode.NONE
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


JoinCallback = Callable[[JoinGroupResult], None]
SyncCallback = Callable[[SyncGroupResult], None]


# ---------------------------------------------------------------- offsets

@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    committed_offset: int
    leader_epoch: int | None = None
    metadata: str = ""
    commit_timestamp: int = 0
    # Only set by OffsetCommit v2-v4 with an explicit retention time (old expiry semantics).
    expire_timestamp: int | None = None


@dataclass(frozen=True, slots=True)
class CommitRecordMetadataAndOffset:
    """An offset plus the __consumer_offsets offset of the batch that stored it, so the
    newest write wins even when loading replays records out of commit order."""

    appended_batch_offset: int | None
    offset_and_metadata: OffsetAndMetadata

    def older_than(self, other: CommitRecordMetadataAndOffset) -> bool:
        return (self.appended_batch_offset or -1) < (other.appended_batch_offset or -1)


# ---------------------------------------------------------------- members

@dataclass(slots=True)
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


class MemberMetadata:
    """One member of a group, with the callbacks of its parked JoinGroup / SyncGroup."""

    __slots__ = ("member_id", "group_instance_id", "client_id", "client_host", "rebalance_timeout_ms",
                 "session_timeout_ms", "protocol_type", "supported_protocols", "assignment",
                 "awaiting_join_callback", "awaiting_sync_callback", "is_new", "heartbeat_satisfied")

    def __init__(self, member_id: str, group_instance_id: str | None, client_id: str, client_host: str,
                 rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                 supported_protocols: list[tuple[str, bytes]], assignment: bytes = b"") -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.supported_protocols = list(supported_protocols)
        self.assignment = assignment
        self.awaiting_join_callback: JoinCallback | None = None
        self.awaiting_sync_callback: SyncCallback | None = None
        self.is_new = False
        self.heartbeat_satisfied = False

    @property
    def is_static_member(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.awaiting_join_callback is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync_callback is not None

    @property
    def has_satisfied_heartbeat(self) -> bool:
        if self.is_new:
            # A new member may be expired while its JoinGroup is parked.
            return self.heartbeat_satisfied
        if self.is_awaiting_join or self.is_awaiting_sync:
            return True  # a parked request counts as a heartbeat
        return self.heartbeat_satisfied

    def protocol_names(self) -> set[str]:
        return {name for name, _ in self.supported_protocols}

    def metadata(self, protocol: str) -> bytes:
        for name, meta in self.supported_protocols:
            if name == protocol:
                return meta
        raise ValueError(f"Member does not support protocol {protocol}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Same protocols, same order, same metadata bytes."""
        if len(protocols) != len(self.supported_protocols):
            return False
        return all(a[0] == b[0] and bytes(a[1]) == bytes(b[1])
                   for a, b in zip(protocols, self.supported_protocols))

    def vote(self, candidates: set[str]) -> str:
        """This member's most preferred protocol among the candidates."""
        for name, _ in self.supported_protocols:
            if name in candidates:
                return name
        raise ValueError("Member does not support any of the candidate protocols")

    def summary(self, protocol: str) -> MemberSummary:
        return MemberSummary(self.member_id, self.group_instance_id, self.client_id, self.client_host,
                             self.metadata(protocol), self.assignment)

    def summary_no_metadata(self) -> MemberSummary:
        return MemberSummary(self.member_id, self.group_instance_id, self.client_id, self.client_host, b"", b"")

    def __repr__(self) -> str:
        return (f"MemberMetadata(member_id={self.member_id!r}, group_instance_id={self.group_instance_id!r}, "
                f"client_id={self.client_id!r}, client_host={self.client_host!r}, "
                f"session_timeout_ms={self.session_timeout_ms}, rebalance_timeout_ms={self.rebalance_timeout_ms}, "
                f"protocols={[p for p, _ in self.supported_protocols]})")


# ---------------------------------------------------------------- groups

class GroupMetadata:
    """A classic group: membership, generation, chosen protocol, leader, and offsets."""

    def __init__(self, group_id: str, initial_state: GroupState = EMPTY,
                 clock: Callable[[], int] = SYSTEM_CLOCK.milliseconds) -> None:
        self.group_id = group_id
        self._state = initial_state
        # The state before the last transition: a PreparingRebalance entered from Empty is an
        # initial rebalance, whose delay new members extend (Kafka's ClassicGroup.previousState).
        self.previous_state: GroupState = DEAD
        self._clock = clock
        self.current_state_timestamp: int | None = clock()
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.new_member_added = False
        self._members: dict[str, MemberMetadata] = {}
        self._static_members: dict[str, str] = {}  # group.instance.id -> member id
        self._pending_members: set[str] = set()  # ids handed out with MEMBER_ID_REQUIRED
        self._pending_sync_members: set[str] = set()
        self._num_members_awaiting_join = 0
        self._supported_protocols: dict[str, int] = {}
        self._offsets: dict[TopicPartition, CommitRecordMetadataAndOffset] = {}
        self._pending_offset_commits: dict[TopicPartition, OffsetAndMetadata] = {}
        # TxnOffsetCommit: per producer id, offsets written but not yet committed by a marker.
        self._pending_txn_offset_commits: dict[int, dict[TopicPartition, CommitRecordMetadataAndOffset]] = {}
        # group.protocol_type == consumer: the union of the members' subscriptions, computed
        # per generation; None when unknown (offsets of every topic are then kept).
        self.subscribed_topics: set[str] | None = None
        # A KIP-848 consumer group: its members and assignments live here, and the classic
        # state above stays Empty with no members. None for a classic group.
        self.consumer: ConsumerGroup | None = None
        # A KIP-932 share group (protocol type "share"): likewise its own state, no offsets.
        self.share: ShareGroup | None = None
        # A KIP-1071 streams group (protocol type "streams"): its own members and tasks; its
        # offsets are the classic ones above.
        self.streams: StreamsGroup | None = None

    # ------------------------------------------------------------ state
    @property
    def state(self) -> GroupState:
        return self._state

    def is_(self, state: GroupState) -> bool:
        return self._state is state

    def can_rebalance(self) -> bool:
        return self._state in VALID_PREVIOUS_STATES[PREPARING_REBALANCE]

    def transition_to(self, target: GroupState) -> None:
        if self._state not in VALID_PREVIOUS_STATES[target]:
            allowed = ",".join(sorted(s.value for s in VALID_PREVIOUS_STATES[target]))
            raise IllegalStateTransition(
                f"Group {self.group_id} should be in the {allowed} states before moving to {target} state. "
                f"Instead it is in {self._state} state")
        self.previous_state = self._state
        self._state = target
        self.current_state_timestamp = self._clock()

    def in_states(self, lowercase_states: set[str]) -> bool:
        return self.state_name.lower() in lowercase_states

    @property
    def state_name(self) -> str:
        """As ListGroups names it: a modern group's own state, else the classic one."""
        if self.share is not None:
            return self.share.state().value
        if self.streams is not None:
            return self.streams.state().value
        return self.consumer.state().value if self.consumer is not None else self._state.value

    @property
    def is_empty(self) -> bool:
        """No members under any protocol."""
        return self.is_(EMPTY) and (self.consumer is None or not self.consumer.members) and \
            (self.share is None or not self.share.members) and (self.streams is None or not self.streams.members)

    @property
    def group_type(self) -> str:
        if self.share is not None:
            return "share"
        if self.streams is not None:
            return "streams"
        return "consumer" if self.consumer is not None else "classic"

    @property
    def is_consumer_group(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    # ------------------------------------------------------------ online migration
    def clear_classic_members(self) -> None:
        """The group became a consumer group: its classic members now live there. Their parked
        requests must have been answered."""
        self._members.clear()
        self._static_members.clear()
        self._pending_members.clear()
        self._pending_sync_members.clear()
        self._num_members_awaiting_join = 0
        self._supported_protocols.clear()
        self.leader_id = None
        self.protocol_name = None
        self._state = EMPTY
        self.current_state_timestamp = self._clock()

    def restore_classic_members(self, generation_id: int, members: Iterable[MemberMetadata]) -> None:
        """The consumer group this was became classic again, Stable at ``generation_id`` with
        ``members`` (their assignments set by the caller once the protocol is chosen)."""
        self.consumer = None
        self.protocol_type = CONSUMER_PROTOCOL_TYPE
        self.generation_id = generation_id
        for member in members:
            self.add(member)
        self.protocol_name = self.select_protocol()
        self.subscribed_topics = self.compute_subscribed_topics()
        self._state = STABLE
        self.current_state_timestamp = self._clock()

    # ------------------------------------------------------------ members
    def has(self, member_id: str) -> bool:
        return member_id in self._members

    def get(self, member_id: str) -> MemberMetadata:
        return self._members[member_id]

    @property
    def size(self) -> int:
        return len(self._members)

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id is not None and self.leader_id == member_id

    @property
    def leader_or_null(self) -> str | None:
        return self.leader_id

    @property
    def num_awaiting(self) -> int:
        return self._num_members_awaiting_join

    @property
    def num_pending(self) -> int:
        return len(self._pending_members)

    def all_members(self) -> list[str]:
        return list(self._members)

    def all_member_metadata(self) -> list[MemberMetadata]:
        return list(self._members.values())

    def all_static_members(self) -> list[str]:
        return list(self._static_members)

    def add(self, member: MemberMetadata, callback: JoinCallback | None = None) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self._static_members:
                raise RuntimeError(f"Static member with groupInstanceId={member.group_instance_id} cannot be "
                                   f"added to group {self.group_id} since it is already a member")
            self._static_members[member.group_instance_id] = member.member_id
        if not self._members:
            self.protocol_type = member.protocol_type
        if self.protocol_type != member.protocol_type or \
                not self.supports_protocols(member.protocol_type, member.protocol_names()):
            raise RuntimeError(f"member {member.member_id} does not support the protocols of group {self.group_id}")
        if self.leader_id is None:
            self.leader_id = member.member_id
        self._members[member.member_id] = member
        self._inc_protocols(member)
        member.awaiting_join_callback = callback
        if member.is_awaiting_join:
            self._num_members_awaiting_join += 1
        self._pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> None:
        member = self._members.pop(member_id, None)
        if member is not None:
            self._dec_protocols(member)
            if member.is_awaiting_join:
                self._num_members_awaiting_join -= 1
            if member.group_instance_id is not None:
                self._static_members.pop(member.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self._members), None)
        self._pending_members.discard(member_id)
        self._pending_sync_members.discard(member_id)

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick any member that did; False if none did
        (or the group has no leader at all)."""
        if self.leader_id is None:
            return False
        leader = self._members[self.leader_id]
        if leader.is_awaiting_join:
            return True
        for mid, m in self._members.items():
            if m.is_awaiting_join:
                self.leader_id = mid
                return True
        return False

    def replace_static_member(self, group_instance_id: str, old_member_id: str,
                              new_member_id: str) -> MemberMetadata:
        """A static member rejoined with an unknown member id: the old id is fenced and the
        member keeps everything else (assignment, protocols) under the new id."""
        member = self._members.pop(old_member_id, None)
        if member is None:
            raise ValueError(f"Cannot replace non-existing member id {old_member_id}")
        # Whoever still waits under the old id is a zombie duplicate: fence it now.
        self.maybe_invoke_join_callback(member, JoinGroupResult(old_member_id, ErrorCode.FENCED_INSTANCE_ID))
        self.maybe_invoke_sync_callback(member, SyncGroupResult(ErrorCode.FENCED_INSTANCE_ID))
        member.member_id = new_member_id
        self._members[new_member_id] = member
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        self._static_members[group_instance_id] = new_member_id
        return member

    def update_member(self, member: MemberMetadata, protocols: list[tuple[str, bytes]], rebalance_timeout_ms: int,
                      session_timeout_ms: int, callback: JoinCallback | None) -> None:
        self._dec_protocols(member)
        member.supported_protocols = list(protocols)
        self._inc_protocols(member)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if callback is not None and not member.is_awaiting_join:
            self._num_members_awaiting_join += 1
        elif callback is None and member.is_awaiting_join:
            self._num_members_awaiting_join -= 1
        member.awaiting_join_callback = callback

    def maybe_invoke_join_callback(self, member: MemberMetadata, result: JoinGroupResult) -> None:
        cb = member.awaiting_join_callback
        if cb is None:
            return
        member.awaiting_join_callback = None
        self._num_members_awaiting_join -= 1
        cb(result)

    def maybe_invoke_sync_callback(self, member: MemberMetadata, result: SyncGroupResult) -> bool:
        cb = member.awaiting_sync_callback
        if cb is None:
            return False
        member.awaiting_sync_callback = None
        cb(result)
        return True

    # static membership
    def has_static_member(self, group_instance_id: str) -> bool:
        return group_instance_id in self._static_members

    def current_static_member_id(self, group_instance_id: str) -> str | None:
        return self._static_members.get(group_instance_id)

    def is_static_member_fenced(self, group_instance_id: str, member_id: str) -> bool:
        current = self._static_members.get(group_instance_id)
        return current is not None and current != member_id

    # pending (MEMBER_ID_REQUIRED) members
    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self._pending_members

    def add_pending_member(self, member_id: str) -> None:
        if member_id in self._members:
            raise RuntimeError(f"Attempt to add pending member {member_id} which is already a stable member "
                               "of the group")
        self._pending_members.add(member_id)

    # members that must still send SyncGroup in this generation
    def add_pending_sync_member(self, member_id: str) -> None:
        if member_id not in self._members:
            raise RuntimeError(f"Attempt to add a pending sync for member {member_id} which is not a member of "
                               "the group")
        self._pending_sync_members.add(member_id)

    def remove_pending_sync_member(self, member_id: str) -> None:
        if member_id not in self._members:
            raise RuntimeError(f"Attempt to remove a pending sync for member {member_id} which is not a member "
                               "of the group")
        self._pending_sync_members.discard(member_id)

    def has_received_sync_from_all_members(self) -> bool:
        return not self._pending_sync_members

    def all_pending_sync_members(self) -> set[str]:
        return set(self._pending_sync_members)

    def clear_pending_sync_members(self) -> None:
        self._pending_sync_members.clear()

    def not_yet_rejoined_members(self) -> list[MemberMetadata]:
        return [m for m in self._members.values() if not m.is_awaiting_join]

    def has_all_members_joined(self) -> bool:
        return len(self._members) == self._num_members_awaiting_join and not self._pending_members

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self._members.values()), default=0)

    @staticmethod
    def generate_member_id(client_id: str, group_instance_id: str | None) -> str:
        prefix = group_instance_id if group_instance_id is not None else client_id
        return f"{prefix}-{uuid.uuid4()}"

    # ------------------------------------------------------------ protocols
    def _inc_protocols(self, member: MemberMetadata) -> None:
        for name, _ in member.supported_protocols:
            self._supported_protocols[name] = self._supported_protocols.get(name, 0) + 1

    def _dec_protocols(self, member: MemberMetadata) -> None:
        for name, _ in member.supported_protocols:
            n = self._supported_protocols.get(name, 0) - 1
            if n > 0:
                self._supported_protocols[name] = n
            else:
                self._supported_protocols.pop(name, None)

    def candidate_protocols(self) -> set[str]:
        n = len(self._members)
        return {p for p, c in self._supported_protocols.items() if c == n}

    def supports_protocols(self, member_protocol_type: str, member_protocols: set[str]) -> bool:
        if self.is_(EMPTY):
            return bool(member_protocol_type) and bool(member_protocols)
        n = len(self._members)
        return (self.protocol_type == member_protocol_type
                and any(self._supported_protocols.get(p, 0) == n for p in member_protocols))

    def select_protocol(self) -> str:
        """The protocol every member supports that gets the most first-choice votes."""
        if not self._members:
            raise RuntimeError("Cannot select protocol for empty group")
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self._members.values():
            p = m.vote(candidates)
            votes[p] = votes.get(p, 0) + 1
        return max(votes.items(), key=lambda kv: kv[1])[0]  # ties: first voted wins

    def compute_subscribed_topics(self) -> set[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self._members:
            return set()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        try:
            for m in self._members.values():
                topics |= parse_subscription_topics(m.metadata(self.protocol_name))
        except Exception:
            return None  # not the standard consumer protocol: keep all offsets
        return topics

    def is_subscribed_to_topic(self, topic: str) -> bool:
        if self.consumer is not None:
            return topic in self.consumer.subscribed_topic_names()
        return True if self.subscribed_topics is None else topic in self.subscribed_topics

    def init_next_generation(self) -> None:
        self.generation_id += 1
        if self._members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(COMPLETING_REBALANCE)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(EMPTY)
        self.clear_pending_sync_members()

    def current_member_metadata(self) -> list[JoinGroupMember]:
        """What the leader gets in its JoinGroup response: every member's chosen-protocol metadata."""
        if self._state in (DEAD, PREPARING_REBALANCE):
            raise RuntimeError(f"Cannot obtain member metadata for group in state {self._state}")
        return [JoinGroupMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
                for m in self._members.values()]

    def summary(self) -> tuple[str, str, str, list[MemberSummary]]:
        """(state, protocol type, protocol, members) for DescribeGroups."""
        if self.is_(STABLE):
            protocol = self.protocol_name
            if protocol is None:
                raise RuntimeError("Invalid null group protocol for stable group")
            return (self._state.value, self.protocol_type or "", protocol,
                    [m.summary(protocol) for m in self._members.values()])
        return (self._state.value, self.protocol_type or "", NO_PROTOCOL,
                [m.summary_no_metadata() for m in self._members.values()])

    # ------------------------------------------------------------ offsets
    def initialize_offsets(self, offsets: dict[TopicPartition, CommitRecordMetadataAndOffset]) -> None:
        self._offsets.update(offsets)

    def prepare_offset_commit(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        self._pending_offset_commits.update(offsets)

    def on_offset_commit_append(self, tp: TopicPartition, record: CommitRecordMetadataAndOffset) -> None:
        if tp in self._pending_offset_commits:
            if record.appended_batch_offset is None:
                raise RuntimeError("Cannot complete offset commit write without the record's log offset")
            current = self._offsets.get(tp)
            if current is None or current.older_than(record):
                self._offsets[tp] = record
        staged = self._pending_offset_commits.get(tp)
        if staged is not None and staged == record.offset_and_metadata:
            del self._pending_offset_commits[tp]

    def fail_pending_offset_write(self, tp: TopicPartition, offset: OffsetAndMetadata) -> None:
        if self._pending_offset_commits.get(tp) == offset:
            del self._pending_offset_commits[tp]

    def has_pending_offset_commits_for(self, tp: TopicPartition) -> bool:
        return tp in self._pending_offset_commits or any(
            tp in pending for pending in self._pending_txn_offset_commits.values())

    # transactional offsets (KIP-98 / KIP-447)
    def prepare_txn_offset_commit(self, producer_id: int, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        pending = self._pending_txn_offset_commits.setdefault(producer_id, {})
        for tp, om in offsets.items():
            pending[tp] = CommitRecordMetadataAndOffset(None, om)

    def on_txn_offset_commit_append(self, producer_id: int, tp: TopicPartition,
                                    record: CommitRecordMetadataAndOffset) -> None:
        pending = self._pending_txn_offset_commits.get(producer_id)
        if pending is not None and tp in pending and pending[tp].offset_and_metadata == record.offset_and_metadata:
            pending[tp] = record

    def fail_pending_txn_offset_commit(self, producer_id: int, tp: TopicPartition) -> None:
        pending = self._pending_txn_offset_commits.get(producer_id)
        if pending is not None:
            pending.pop(tp, None)
            if not pending:
                del self._pending_txn_offset_commits[producer_id]

    def complete_pending_txn_offset_commit(self, producer_id: int, is_commit: bool) -> None:
        """The transaction's marker is written: its offsets become visible (commit) or vanish."""
        pending = self._pending_txn_offset_commits.pop(producer_id, None)
        if not is_commit or not pending:
            return
        for tp, r in pending.items():
            if r.appended_batch_offset is None:
                raise RuntimeError(f"Trying to complete a transactional offset commit for producerId {producer_id} "
                                   f"and groupId {self.group_id} even though the offset commit record itself "
                                   "hasn't been appended to the log.")
            current = self._offsets.get(tp)
            if current is None or current.older_than(r):
                self._offsets[tp] = r

    def has_pending_offset_commits_from_producer(self, producer_id: int) -> bool:
        return producer_id in self._pending_txn_offset_commits

    def active_producers(self) -> list[int]:
        return list(self._pending_txn_offset_commits)

    def initialize_pending_txn_offsets(self, pending: dict[int, dict[TopicPartition, CommitRecordMetadataAndOffset]]
                                       ) -> None:
        for pid, offsets in pending.items():
            self._pending_txn_offset_commits.setdefault(pid, {}).update(offsets)

    def remove_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, OffsetAndMetadata]:
        removed: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp in tps:
            self._pending_offset_commits.pop(tp, None)
            for pending in self._pending_txn_offset_commits.values():
                pending.pop(tp, None)
            r = self._offsets.pop(tp, None)
            if r is not None:
                removed[tp] = r.offset_and_metadata
        return removed

    def remove_all_offsets(self) -> dict[TopicPartition, OffsetAndMetadata]:
        return self.remove_offsets(list(self._offsets))

    def remove_expired_offsets(self, now: int, retention_ms: int) -> dict[TopicPartition, OffsetAndMetadata]:
        """Kafka's expiry rule (KIP-211): an Empty group's offsets expire retention_ms after it
        became Empty; a Stable consumer group's offsets of topics nobody subscribes to expire
        retention_ms after their commit; standalone (no protocol) groups by commit time; an
        explicit expire timestamp (old commit versions) always wins."""

        def expired(base: Callable[[CommitRecordMetadataAndOffset], int],
                    subscribed: set[str] = frozenset()) -> dict[TopicPartition, OffsetAndMetadata]:
            out = {}
            for tp, r in self._offsets.items():
                if tp.topic in subscribed or tp in self._pending_offset_commits:
                    continue
                om = r.offset_and_metadata
                if om.expire_timestamp is None:
                    if now - base(r) >= retention_ms:
                        out[tp] = om
                elif now >= om.expire_timestamp:
                    out[tp] = om
            return out

        if self.consumer is not None:
            # A KIP-848 group: offsets of topics no member subscribes to expire by commit time.
            subscribed = self.consumer.subscribed_topic_names() if self.consumer.members else set()
            result = expired(lambda r: r.offset_and_metadata.commit_timestamp, subscribed)
        elif self.protocol_type is not None and self.is_(EMPTY):
            ts = self.current_state_timestamp
            result = expired(lambda r: ts if ts is not None else r.offset_and_metadata.commit_timestamp)
        elif (self.protocol_type == CONSUMER_PROTOCOL_TYPE and self.subscribed_topics is not None
              and self.is_(STABLE)):
            result = expired(lambda r: r.offset_and_metadata.commit_timestamp, self.subscribed_topics)
        elif self.protocol_type is None:
            result = expired(lambda r: r.offset_and_metadata.commit_timestamp)
        else:
            result = {}
        for tp in result:
            del self._offsets[tp]
        return result

    def all_offsets(self) -> dict[TopicPartition, OffsetAndMetadata]:
        return {tp: r.offset_and_metadata for tp, r in self._offsets.items()}

    def offset(self, tp: TopicPartition) -> OffsetAndMetadata | None:
        r = self._offsets.get(tp)
        return None if r is None else r.offset_and_metadata

    @property
    def num_offsets(self) -> int:
        return len(self._offsets)

    def has_offsets(self) -> bool:
        return bool(self._offsets) or bool(self._pending_offset_commits) or bool(self._pending_txn_offset_commits)

    def __repr__(self) -> str:
        return (f"GroupMetadata(group_id={self.group_id!r}, generation={self.generation_id}, "
                f"protocol_type={self.protocol_type!r}, state={self._state}, members={list(self._members)})")


def parse_subscription_topics(data: bytes) -> set[str]:
    """Topics of a member's ConsumerProtocolSubscription."""
    return set(decode_subscription(bytes(data)).topics)
