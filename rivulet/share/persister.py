"""Where share-partition state outlives the broker: Kafka's Persister seam.

This increment keeps the state in memory (``InMemorySharePersister``); the durable one
writes ``__share_group_state`` through Read/WriteShareGroupState behind the same protocol.
"""

from __future__ import annotations

from typing import Protocol

from rivulet.common.types import TopicPartition

from .partition import SharePartitionSnapshot

__all__ = ["InMemorySharePersister", "SharePersister"]


class SharePersister(Protocol):
    def read_state(self, group_id: str, tp: TopicPartition) -> SharePartitionSnapshot | None:
        """The share partition's last written state, None when the group has none for it."""
        ...

    def write_state(self, group_id: str, tp: TopicPartition, snapshot: SharePartitionSnapshot) -> None: ...

    def delete_state(self, group_id: str, tp: TopicPartition) -> None: ...


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
