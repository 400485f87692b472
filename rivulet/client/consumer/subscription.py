"""SubscriptionState: what the consumer subscribed to, what it was assigned, and where it is.

Two ways in, as in Java's client: ``subscribe()`` (topics or a pattern; the group assigns
partitions) and ``assign()`` (partitions by hand; no group membership). Each assigned partition
has a TopicPartitionState holding

* ``position``: the next offset the application will get, what a commit stores;
* ``committed``: the last committed offset known (from OffsetFetch or our own commits);
* ``high_watermark`` / ``last_stable_offset`` / ``log_start_offset`` from the last fetch;
* ``paused``, and ``reset_strategy`` when the position must be looked up with ListOffsets.

A partition without a position is not fetchable; updateFetchPositions gives it one from the
committed offset, or else by ``auto.offset.reset``. The fetcher runs ahead of ``position``
(``fetch_offset``) to prefetch; ``epoch`` changes on every seek, so records fetched for an
older position are recognised and dropped.

KIP-320: a position carries the leader epoch of the record before it. When the partition's
leader changes, or the position comes from a commit, the position awaits validation: the new
leader says where that epoch ends in its log (OffsetsForLeaderEpoch), and a position past it
was on a log that has since been truncated.
"""

from __future__ import annotations

import enum
import re
from typing import Iterable

from rivulet.client.core import EpochEndOffset, OffsetAndMetadata  # noqa: F401  (re-exported)
from rivulet.common.types import TopicPartition as TP

EARLIEST = "earliest"
LATEST = "latest"
NONE = "none"
WAIT_FOR_SEEK = "error"  # reset_strategy of a partition whose offset could not be reset


class Validation(enum.Enum):
    """How an epoch check of a position (KIP-320) ended."""

    VALID = "valid"                # the leader's log agrees up to the position
    TRUNCATED = "truncated"        # moved back to where the logs diverge
    RESET = "reset"                # no common point known: auto.offset.reset applies
    LOG_TRUNCATION = "truncation"  # truncated, and auto.offset.reset=none: the application decides


class TopicPartitionState:
    __slots__ = ("position", "committed", "high_watermark", "last_stable_offset", "log_start_offset",
                 "paused", "reset_strategy", "fetch_offset", "epoch", "eof_reported", "leader_epoch",
                 "fetch_epoch", "current_leader_epoch", "awaiting_validation")

    def __init__(self) -> None:
        self.position: int | None = None
        self.committed: OffsetAndMetadata | None = None
        self.high_watermark: int | None = None
        self.last_stable_offset: int | None = None
        self.log_start_offset: int | None = None
        self.paused = False
        self.reset_strategy: str | None = None
        self.fetch_offset: int | None = None
        self.epoch = 0
        self.eof_reported = False
        # The leader epoch of the record before ``position`` (what a commit stores), and of the
        # batch before ``fetch_offset`` (a Fetch's last_fetched_epoch); None: not known.
        self.leader_epoch: int | None = None
        self.fetch_epoch: int | None = None
        # The metadata's leader epoch the position was last checked against; -1: none yet.
        self.current_leader_epoch = -1
        self.awaiting_validation = False

    def await_reset(self, strategy: str) -> None:
        self.reset_strategy = strategy
        self.position = None
        self.fetch_offset = None
        self.leader_epoch = self.fetch_epoch = None
        self.awaiting_validation = False
        self.epoch += 1

    def wait_for_seek(self) -> None:
        """No offset to go on (out of range or truncated, or auto.offset.reset=none): nothing
        is fetched, nor reset, until the application seeks."""
        self.reset_strategy = WAIT_FOR_SEEK
        self.position = None
        self.epoch += 1

    def await_committed(self) -> None:
        """Start again from the committed offset: the next position update looks it up."""
        self.position = None
        self.fetch_offset = None
        self.reset_strategy = None
        self.epoch += 1

    def seek(self, offset: int, leader_epoch: int | None = None) -> None:
        """Move to ``offset``, taken as valid (a user's seek, or the end of a check)."""
        self.position = offset
        self.fetch_offset = offset
        self.leader_epoch = self.fetch_epoch = leader_epoch
        self.reset_strategy = None
        self.eof_reported = False
        self.awaiting_validation = False
        self.epoch += 1

    def seek_unvalidated(self, offset: int, leader_epoch: int | None) -> None:
        """Move to a committed offset; with its epoch known, the leader checks it first."""
        self.seek(offset, leader_epoch)
        self.awaiting_validation = leader_epoch is not None

    def leader_changed(self, leader_epoch: int) -> bool:
        """The metadata gives the partition's leader ``leader_epoch``. True when the position
        must be checked against the new leader before fetching again (its epoch is known)."""
        if leader_epoch < 0 or leader_epoch == self.current_leader_epoch or self.position is None:
            return False
        first = self.current_leader_epoch < 0
        self.current_leader_epoch = leader_epoch
        if first or self.leader_epoch is None:
            return False
        self.awaiting_validation = True
        return True

    def pause(self) -> None:
        """Stop handing out and fetching this partition: what was fetched ahead is dropped, and
        a resume fetches again from the position."""
        self.paused = True
        # A resume's Fetch starts at the position, so its last_fetched_epoch must be the
        # position's epoch too, or the leader's KIP-320 check compares the wrong batch.
        self.fetch_offset = self.position
        self.fetch_epoch = self.leader_epoch
        self.epoch += 1

    def resume(self) -> None:
        self.paused = False

    def consumed_to(self, offset: int, leader_epoch: int | None) -> None:
        """The application got the records before ``offset``, the last of leader epoch
        ``leader_epoch``: the position (and what a commit stores) moves there."""
        self.position = offset
        self.leader_epoch = leader_epoch

    def fetch_from_position(self) -> None:
        """Nothing fetched ahead: the next Fetch starts at the position."""
        if self.fetch_offset is None:
            self.fetch_offset = self.position
            self.fetch_epoch = self.leader_epoch

    def fetched_ahead_to(self, offset: int, last_epoch: int | None) -> None:
        """A pipelined Fetch goes on from ``offset``, after a batch of leader epoch ``last_epoch``,
        before the records up to it are decoded."""
        self.fetch_offset = offset
        self.fetch_epoch = last_epoch

    def decoded_to(self, offset: int, next_offset: int) -> None:
        """The records a Fetch from ``offset`` returned were decoded up to ``next_offset``: the
        next Fetch starts there, unless the pipelined one already moved it on."""
        if self.fetch_offset == offset:
            self.fetch_offset = next_offset

    def validate_against(self, leader_epoch: int) -> None:
        """The position is about to be checked with the leader of ``leader_epoch`` (KIP-320)."""
        self.current_leader_epoch = leader_epoch

    def rewind(self) -> None:
        """Drop what was fetched ahead of the position: it came from a leader whose log may
        be cut back. The caller holds the fetch buffer's lock."""
        self.fetch_offset = self.position
        self.fetch_epoch = self.leader_epoch
        self.epoch += 1

    def complete_validation(self, end: EpochEndOffset, can_reset: bool) -> Validation:
        """Apply the leader's answer for the position's epoch (OffsetsForLeaderEpoch, or a
        Fetch's DivergingEpoch), as Java's SubscriptionState.maybeCompleteValidation does."""
        assert self.position is not None
        if end.undefined:
            outcome = Validation.RESET if can_reset else Validation.LOG_TRUNCATION
        elif end.end_offset < self.position:
            if can_reset:
                self.seek(end.end_offset, end.epoch)
                return Validation.TRUNCATED
            outcome = Validation.LOG_TRUNCATION
        else:
            self.awaiting_validation = False
            return Validation.VALID
        self.awaiting_validation = False
        return outcome

    @property
    def has_valid_position(self) -> bool:
        return self.position is not None

    @property
    def is_fetchable(self) -> bool:
        return not self.paused and self.position is not None and not self.awaiting_validation

    @property
    def awaiting_reset(self) -> bool:
        return self.reset_strategy is not None

    def __repr__(self) -> str:
        return (f"TopicPartitionState(position={self.position}, committed={self.committed}, "
                f"hw={self.high_watermark}, paused={self.paused}, reset={self.reset_strategy})")


class SubscriptionState:
    NONE, AUTO_TOPICS, AUTO_PATTERN, USER_ASSIGNED = "none", "topics", "pattern", "assigned"

    def __init__(self, default_reset: str = LATEST) -> None:
        self.default_reset = default_reset
        self.type = self.NONE
        self.subscription: set[str] = set()
        self.pattern: re.Pattern | None = None
        self.pattern_source: list[str] = []
        self.assignment: dict[TP, TopicPartitionState] = {}
        # Topics of every member's subscription (the leader needs them to assign).
        self.group_subscription: set[str] = set()
        self.version = 0  # bumped when the assignment changes

    # ------------------------------------------------------------ subscribing
    def _set_type(self, t: str) -> None:
        if self.type == self.NONE:
            self.type = t
        elif self.type != t:
            raise ValueError("subscribe() and assign() cannot be mixed; unsubscribe() or unassign() first")

    def subscribe(self, topics: Iterable[str]) -> bool:
        """Literal topic names, and ``^regex`` patterns as confluent-kafka accepts them."""
        topics = list(topics)
        patterns = [t for t in topics if t.startswith("^")]
        literal = {t for t in topics if not t.startswith("^")}
        if patterns:
            self._set_type(self.AUTO_PATTERN)
            # A mixed list matches the literal names exactly and the patterns as regexes.
            parts = [p for p in patterns] + [f"^{re.escape(t)}$" for t in sorted(literal)]
            self.pattern = re.compile("|".join(f"(?:{p})" for p in parts))
            self.pattern_source = topics
            changed = True
            self.subscription = set()
        else:
            self._set_type(self.AUTO_TOPICS)
            changed = literal != self.subscription
            self.subscription = literal
            self.pattern = None
        return changed

    def matches(self, topic: str) -> bool:
        if self.pattern is not None:
            return self.pattern.match(topic) is not None
        return topic in self.subscription

    def update_pattern_matches(self, all_topics: Iterable[str], exclude_internal: bool = True) -> bool:
        """Recompute a pattern's topics from the cluster's; True if they changed."""
        if self.pattern is None:
            return False
        found = {t for t in all_topics if self.pattern.match(t) and not (exclude_internal and t.startswith("__"))}
        if found != self.subscription:
            self.subscription = found
            return True
        return False

    @property
    def partitions_auto_assigned(self) -> bool:
        return self.type in (self.AUTO_TOPICS, self.AUTO_PATTERN)

    def group_subscribe(self, topics: set[str]) -> None:
        """The group leader: the topics of every member's subscription (Java's groupSubscribe)."""
        self.group_subscription = topics

    def unsubscribe(self) -> None:
        self.subscription = set()
        self.pattern = None
        self.group_subscription = set()
        self.assignment = {}
        self.type = self.NONE
        self.version += 1

    # ------------------------------------------------------------ assignment
    def assign_from_user(self, partitions: Iterable[TP]) -> None:
        self._set_type(self.USER_ASSIGNED)
        self._set_assignment(partitions)

    def assign_from_subscribed(self, partitions: Iterable[TP]) -> None:
        if not self.partitions_auto_assigned:
            raise ValueError("not subscribed")
        self._set_assignment(partitions)

    def _set_assignment(self, partitions: Iterable[TP]) -> None:
        new: dict[TP, TopicPartitionState] = {}
        for tp in partitions:
            new[tp] = self.assignment.get(tp) or TopicPartitionState()
        self.assignment = new
        self.version += 1

    def incremental_assign_from_user(self, partitions: Iterable[TP]) -> None:
        """incremental_assign(): user assignment unless subscribed; the partitions join the rest."""
        if self.type == self.NONE:
            self.type = self.USER_ASSIGNED
        self.add_partitions(partitions)

    def unassign(self) -> None:
        """No partitions; a user assignment ends, a subscription stays (its next rebalance assigns)."""
        self.assignment = {}
        if self.type == self.USER_ASSIGNED:
            self.type = self.NONE
            self.version += 1

    def add_partitions(self, partitions: Iterable[TP]) -> None:
        new = dict(self.assignment)
        for tp in partitions:
            if tp not in new:
                new[tp] = TopicPartitionState()
        self.assignment = new
        self.version += 1

    def remove_partitions(self, partitions: Iterable[TP]) -> None:
        gone = set(partitions)
        self.assignment = {tp: s for tp, s in self.assignment.items() if tp not in gone}
        self.version += 1

    def is_assigned(self, tp: TP) -> bool:
        return tp in self.assignment

    def assigned_partitions(self) -> list[TP]:
        return list(self.assignment)

    def state(self, tp: TP) -> TopicPartitionState:
        try:
            return self.assignment[tp]
        except KeyError:
            raise KeyError(f"partition {tp[0]}-{tp[1]} is not assigned to this consumer") from None

    # ------------------------------------------------------------ positions
    def fetchable_partitions(self) -> list[TP]:
        return [tp for tp, s in self.assignment.items() if s.is_fetchable]

    def missing_fetch_positions(self) -> list[TP]:
        return [tp for tp, s in self.assignment.items() if s.position is None]

    def has_all_fetch_positions(self) -> bool:
        return all(s.position is not None for s in self.assignment.values())

    def seek(self, tp: TP, offset: int) -> None:
        self.state(tp).seek(offset)

    def position(self, tp: TP) -> int | None:
        return self.state(tp).position

    def request_offset_reset(self, tp: TP, strategy: str | None = None) -> None:
        self.state(tp).await_reset(strategy or self.default_reset)

    def is_offset_reset_needed(self, tp: TP) -> bool:
        return self.state(tp).awaiting_reset

    def committed(self, tp: TP, oam: OffsetAndMetadata | None) -> None:
        s = self.assignment.get(tp)
        if s is not None:
            s.committed = oam

    def pause(self, tp: TP) -> None:
        self.state(tp).paused = True

    def resume(self, tp: TP) -> None:
        self.state(tp).paused = False

    def paused_partitions(self) -> list[TP]:
        return [tp for tp, s in self.assignment.items() if s.paused]

    def all_consumed(self) -> dict[TP, OffsetAndMetadata]:
        """Positions to commit: every assigned partition with a position."""
        return {tp: OffsetAndMetadata(s.position, None, s.leader_epoch)
                for tp, s in self.assignment.items() if s.position is not None}
