"""Where share-partition state outlives the broker: Kafka's Persister seam.

This increment keeps the state in memory (``InMemorySharePersister``); the durable one
writes ``__share_group_state`` through Read/WriteShareGroupState behind the same protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from rivulet.common.types import TopicPartition

from .partition import RecordState, SharePartitionSnapshot

__all__ = ["InMemorySharePersister", "SharePersister", "ShareStateSummary", "summarize"]


@dataclass(frozen=True, slots=True)
class ShareStateSummary:
    """ReadShareGroupStateSummary's answer for one share partition: its start offset and how
    many records past it are delivery-complete (Acknowledged or Archived)."""

    start_offset: int
    delivery_complete_count: int


def summarize(snapshot: SharePartitionSnapshot) -> ShareStateSummary:
    done = sum(b.last_offset - max(b.first_offset, snapshot.start_offset) + 1
               for b in snapshot.state_batches
               if b.delivery_state in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
               and b.last_offset >= snapshot.start_offset)
    return ShareStateSummary(snapshot.start_offset, done)


class SharePersister(Protocol):
    def read_state(self, group_id: str, tp: TopicPartition) -> SharePartitionSnapshot | None:
        """The share partition's last written state, None when the group has none for it."""
        ...

    def write_state(self, group_id: str, tp: TopicPartition, snapshot: SharePartitionSnapshot) -> None: ...

    def delete_state(self, group_id: str, tp: TopicPartition) -> None: ...

    def read_summary(self, group_id: str, tp: TopicPartition) -> ShareStateSummary | None:
        """ReadShareGroupStateSummary: None when the group has no state for the partition."""
        ...

    def initialize_state(self, group_id: str, tp: TopicPartition, start_offset: int) -> None:
        """InitializeShareGroupState: the partition's state starts afresh at ``start_offset``."""
        ...


class InMemorySharePersister:
    """State kept for the broker's lifetime only."""

    def __init__(self) -> None:
        self._states: dict[tuple[str, TopicPartition], SharePartitionSnapshot] = {}

    def read_state(self, group_id: str, tp: TopicPartition) -> SharePartitionSnapshot | None:
        return self._states.get((group_id, tp))

    def write_state(self, group_id: str, tp: TopicPartition, snapshot: SharePartitionSnapshot) -> None:
        self._states[(group_id, tp)] = snapshot

    def delete_state(self, group_id: str, tp: TopicPartition) -> None:
        self._states.pop((group_id, tp), None)

    def read_summary(self, group_id: str, tp: TopicPartition) -> ShareStateSummary | None:
        snapshot = self._states.get((group_id, tp))
        return None if snapshot is None else summarize(snapshot)

    def initialize_state(self, group_id: str, tp: TopicPartition, start_offset: int) -> None:
        self._states[(group_id, tp)] = SharePartitionSnapshot(start_offset, ())
