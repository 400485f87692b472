"""Where share-partition state outlives the leader: Kafka's Persister seam.

The broker's persister talks to the share coordinator (``__share_group_state``) through the
Read/Write/Initialize/DeleteShareGroupState and ReadShareGroupStateSummary APIs, locally or
over the inter-broker client; ``InMemorySharePersister`` keeps the same contract in memory
(unit tests). Every call is a coroutine: the coordinator may be another broker. Failures
raise ``ApiError`` with Kafka's codes (FENCED_STATE_EPOCH, FENCED_LEADER_EPOCH,
COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, ...).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Iterable, Protocol

from rivulet.common.types import share_coordinator_key
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.protocol.messages import read_share_group_state_response as rsr

from .partition import RecordState, SharePartitionSnapshot, StateBatch

__all__ = ["InMemorySharePersister", "SharePartitionKey", "SharePersister", "ShareStateSummary",
           "UNINITIALIZED_START_OFFSET", "in_flight_count", "snapshot_of_read", "state_batches",
           "summarize"]

UNINITIALIZED_START_OFFSET = -1  # a start offset of -1: no state yet (share.auto.offset.reset decides)


@dataclass(frozen=True, slots=True)
class SharePartitionKey:
    """Kafka's SharePartitionKey: state is keyed by topic id, so a topic made again under its
    name starts afresh."""

    group_id: str
    topic_id: uuid.UUID
    partition: int

    def coordinator_key(self) -> str:
        """What FindCoordinator (key type SHARE) takes and the coordinator partition is hashed from."""
        return share_coordinator_key(self.group_id, self.topic_id, self.partition)


@dataclass(frozen=True, slots=True)
class ShareStateSummary:
    """ReadShareGroupStateSummary's answer for one share partition: its start offset, how many
    records past it are delivery-complete (Acknowledged or Archived; -1 unknown), and its epochs."""

    start_offset: int
    delivery_complete_count: int
    state_epoch: int = 0
    leader_epoch: int = -1


_COMPLETE = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


def _count_from_start(snapshot: SharePartitionSnapshot, complete: bool) -> int:
    return sum(b.last_offset - max(b.first_offset, snapshot.start_offset) + 1
               for b in snapshot.state_batches
               if (b.delivery_state in _COMPLETE) == complete and b.last_offset >= snapshot.start_offset)


def delivery_complete_count(snapshot: SharePartitionSnapshot) -> int:
    return _count_from_start(snapshot, True)


def in_flight_count(snapshot: SharePartitionSnapshot) -> int:
    """The records of the state batches at or past the start offset that are neither
    Acknowledged nor Archived: acquired or available for redelivery when the state was last
    written (it keeps Acquired records as Available, and records acquired since are not in it)."""
    return _count_from_start(snapshot, False)


def snapshot_of_read(result: rsr.PartitionResult) -> SharePartitionSnapshot | None:
    """One partition's ReadShareGroupState answer as a snapshot; None when it has no state."""
    if result.start_offset == -1 and result.state_epoch == 0 and not result.state_batches:
        return None
    return SharePartitionSnapshot(result.start_offset, state_batches(result.state_batches), result.state_epoch)


class WireStateBatch(Protocol):
    """A state batch as the share-state requests, answers and records carry it."""

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


def state_batches(raw: Iterable[WireStateBatch]) -> tuple[StateBatch, ...]:
    return tuple(StateBatch(b.first_offset, b.last_offset, RecordState(b.delivery_state), b.delivery_count)
                 for b in raw)


def summarize(snapshot: SharePartitionSnapshot, leader_epoch: int = -1) -> ShareStateSummary:
    return ShareStateSummary(snapshot.start_offset, delivery_complete_count(snapshot), snapshot.state_epoch,
                             leader_epoch)


class SharePersister(Protocol):
    async def read_state(self, key: SharePartitionKey, leader_epoch: int = -1) -> SharePartitionSnapshot | None:
        """The state last written (its ``state_epoch`` set; a start offset of -1 when it was
        initialized without one), None when there is none. A ``leader_epoch`` older than the
        one recorded is FENCED_LEADER_EPOCH; a newer one is recorded."""
        ...

    async def write_state(self, key: SharePartitionKey, snapshot: SharePartitionSnapshot, *,
                          leader_epoch: int = -1, delivery_complete_count: int = -1) -> None:
        """Record the share partition's state; ``snapshot.state_epoch`` older than the
        recorded one is FENCED_STATE_EPOCH (an admin reset the offsets meanwhile)."""
        ...

    async def initialize_state(self, key: SharePartitionKey, start_offset: int, state_epoch: int | None = None
                               ) -> None:
        """Start the state afresh at ``start_offset`` (-1: none yet) under ``state_epoch``,
        which may not be older than the one recorded (FENCED_STATE_EPOCH); None: the next one. The
        leader's share partition, fenced by it, reads the new state on its next write."""
        ...

    async def read_summary(self, key: SharePartitionKey, leader_epoch: int = -1) -> ShareStateSummary | None:
        """Epochs and start offset without the batches; None when there is no state."""
        ...

    async def delete_state(self, key: SharePartitionKey) -> None: ...


class InMemorySharePersister:
    """State kept for the process's lifetime only, with the coordinator's epoch checks."""

    def __init__(self) -> None:
        self._states: dict[SharePartitionKey, tuple[SharePartitionSnapshot, int]] = {}  # with the leader epoch

    async def read_state(self, key: SharePartitionKey, leader_epoch: int = -1) -> SharePartitionSnapshot | None:
        found = self._found(key, leader_epoch)
        if found is None:
            return None
        snapshot, recorded = found
        if leader_epoch > recorded:
            self._states[key] = (snapshot, leader_epoch)
        return snapshot

    async def write_state(self, key: SharePartitionKey, snapshot: SharePartitionSnapshot, *,
                          leader_epoch: int = -1, delivery_complete_count: int = -1) -> None:
        found = self._states.get(key)
        if found is not None:
            if snapshot.state_epoch < found[0].state_epoch:
                raise ApiError(ErrorCode.FENCED_STATE_EPOCH, "The state epoch is fenced.")
            self._check_leader_epoch(leader_epoch, found[1])
            leader_epoch = max(leader_epoch, found[1])
        self._states[key] = (snapshot, leader_epoch)

    async def initialize_state(self, key: SharePartitionKey, start_offset: int, state_epoch: int | None = None
                               ) -> None:
        found = self._states.get(key)
        if state_epoch is None:
            state_epoch = 0 if found is None else found[0].state_epoch + 1
        if found is not None and state_epoch < found[0].state_epoch:
            raise ApiError(ErrorCode.FENCED_STATE_EPOCH, "The state epoch is fenced.")
        self._states[key] = (SharePartitionSnapshot(start_offset, (), state_epoch), -1)

    async def read_summary(self, key: SharePartitionKey, leader_epoch: int = -1) -> ShareStateSummary | None:
        found = self._found(key, leader_epoch)
        return None if found is None else summarize(*found)

    async def delete_state(self, key: SharePartitionKey) -> None:
        self._states.pop(key, None)

    def _found(self, key: SharePartitionKey, leader_epoch: int) -> tuple[SharePartitionSnapshot, int] | None:
        """The partition's (snapshot, recorded leader epoch), if any, once ``leader_epoch`` is checked."""
        found = self._states.get(key)
        if found is not None:
            self._check_leader_epoch(leader_epoch, found[1])
        return found

    @staticmethod
    def _check_leader_epoch(leader_epoch: int, recorded: int) -> None:
        if leader_epoch != -1 and leader_epoch < recorded:
            raise ApiError(ErrorCode.FENCED_LEADER_EPOCH, "The leader epoch is fenced.")
