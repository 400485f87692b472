"""Leader epoch cache (Kafka's LeaderEpochFileCache), persisted to leader-epoch-checkpoint."""

from __future__ import annotations

import logging
import os
import threading

from rivulet.storage.checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
    CorruptCheckpointError,
    DeferredSync,
    read_epoch_checkpoint,
    write_epoch_checkpoint,
)

log = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    """Ordered (epoch, start_offset) entries: epoch N's records start at its offset.

    Every change is written through to the checkpoint file. Changes are rare
    (leader elections, truncations), so the fsync cost stays off the hot path.

    A new log's cache (given the log's ``deferred``) has no file to read and writes without
    fsync while the log defers: its first flush of records makes the file durable before any
    of them count as durable, and until then a crash loses only entries the leader states
    again (the log is empty on disk).
    """

    def __init__(self, partition_dir: str, *, deferred: DeferredSync | None = None) -> None:
        self.path = os.path.join(partition_dir, LEADER_EPOCH_CHECKPOINT)
        self._lock = threading.Lock()
        self._deferred = deferred
        entries: list[tuple[int, int]] = []
        if deferred is None:
            try:
                entries = read_epoch_checkpoint(self.path)
            except (CorruptCheckpointError, ValueError) as e:
                log.warning("discarding corrupt %s: %s", self.path, e)
        self._entries: list[tuple[int, int]] = entries

    # -- queries -----------------------------------------------------------------

    def entries(self) -> list[tuple[int, int]]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1][0] if self._entries else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """Epoch of the leader that wrote ``offset`` (largest entry starting <= offset)."""
        found = None
        for epoch, start in self._entries:
            if start > offset:
                break
            found = epoch
        return found

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (largest epoch <= requested, first offset after it).

        The end offset is the start of the next higher epoch, or the LEO when the
        requested epoch is the latest. Unknown/too-new epochs give (-1, -1).
        """
        entries = self._entries
        if requested_epoch == UNDEFINED_EPOCH or not entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if entries[-1][0] == requested_epoch:
            return requested_epoch, log_end_offset
        higher = next(((e, s) for e, s in entries if e > requested_epoch), None)
        if higher is None:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        floor = None
        for e, s in entries:
            if e > requested_epoch:
                break
            floor = (e, s)
        if floor is None:
            # Older than anything we know: the caller truncates to where history begins.
            return requested_epoch, higher[1]
        return floor[0], higher[1]

    # -- updates -----------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; True if the cache changed."""
        if epoch < 0 or start_offset < 0:
            return False
        last = self._entries[-1] if self._entries else None
        if last is not None and last[0] == epoch and start_offset >= last[1]:
            return False  # fast path: same epoch continuing
        with self._lock:
            entries = self._entries
            # Entries that this one contradicts (not older in epoch and offset) go away.
            while entries and (entries[-1][0] >= epoch or entries[-1][1] >= start_offset):
                entries.pop()
            entries.append((epoch, start_offset))
            self._persist()
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after ``end_offset`` (log truncated to it)."""
        with self._lock:
            n = len(self._entries)
            while self._entries and self._entries[-1][1] >= end_offset:
                self._entries.pop()
            if len(self._entries) != n:
                self._persist()

    def truncate_from_start(self, start_offset: int) -> None:
        """Log start moved to ``start_offset``: entries before it collapse into one."""
        with self._lock:
            entries = self._entries
            keep_from = 0
            for i, (_, s) in enumerate(entries):
                if s <= start_offset:
                    keep_from = i
            if not entries or entries[0][1] >= start_offset:
                return
            first_epoch = entries[keep_from][0]
            self._entries = [(first_epoch, start_offset)] + entries[keep_from + 1 :]
            self._persist()

    def clear(self) -> None:
        with self._lock:
            self._entries = []
            self._persist()

    def _persist(self) -> None:
        deferred = self._deferred
        if deferred is not None and deferred.deferring:
            write_epoch_checkpoint(self.path, self._entries, sync=False)
            deferred.wrote(self.path)
        else:
            write_epoch_checkpoint(self.path, self._entries)
