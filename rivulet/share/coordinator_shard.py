"""One ``__share_group_state`` partition's state, as Kafka's ShareCoordinatorShard: pure.

Each share partition's state is a ShareSnapshot record (the whole state) followed by
ShareUpdate records (the batches a write changed, laid over the snapshot when replayed).
After ``share.coordinator.snapshot.update.records.per.snapshot`` updates the next write is a
new snapshot with the merged state and the next snapshot epoch, so a reload replays at most
that many updates over the last snapshot (compaction keeps one record per key: the last
snapshot and the last update). Requests are turned into records here; the state changes only
when a record is replayed (after its append is acknowledged, or when the partition loads).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from typing import Sequence

from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.protocol.messages import share_snapshot_value as ssv, share_update_value as suv
from rivulet.protocol.messages.share_snapshot_key import ShareSnapshotKey
from rivulet.protocol.messages.share_update_key import ShareUpdateKey

from .partition import SharePartitionSnapshot, StateBatch
from .persister import (UNINITIALIZED_START_OFFSET, SharePartitionKey, ShareStateSummary, delivery_complete_count,
                        state_batches)

__all__ = ["ShareCoordinatorShard", "ShareGroupOffset", "StateRecord", "combine_batches", "decode_record"]

_INT16 = struct.Struct(">h")
StateRecord = tuple[bytes, "bytes | None"]  # (key, value); a None value is a tombstone


@dataclass(frozen=True, slots=True)
class ShareGroupOffset:
    """A share partition's state as the coordinator keeps it (Kafka's ShareGroupOffset)."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    state_batches: tuple[StateBatch, ...]
    create_timestamp: int = 0
    write_timestamp: int = 0

    def snapshot(self) -> SharePartitionSnapshot:
        return SharePartitionSnapshot(self.start_offset, self.state_batches, self.state_epoch)


def combine_batches(current: Sequence[StateBatch], new: Sequence[StateBatch], start_offset: int
                    ) -> tuple[StateBatch, ...]:
    """``new`` laid over ``current`` (a newer batch wins where they overlap, and within ``new``
    a later one), cut at ``start_offset``, with touching batches of one state and count joined."""
    layers = [_disjoint(current)] + [[b] for b in new] if not _sorted_disjoint(new) else \
        [_disjoint(current), list(new)]
    merged: list[StateBatch] = []
    for layer in layers:
        merged = _overlay(merged, layer)
    out: list[StateBatch] = []
    for b in merged:
        if b.last_offset < start_offset:
            continue
        if b.first_offset < start_offset:
            b = replace(b, first_offset=start_offset)
        prev = out[-1] if out else None
        if prev is not None and prev.last_offset + 1 == b.first_offset and prev.delivery_state == b.delivery_state \
                and prev.delivery_count == b.delivery_count:
            out[-1] = replace(prev, last_offset=b.last_offset)
        else:
            out.append(b)
    return tuple(out)


def _sorted_disjoint(batches: Sequence[StateBatch]) -> bool:
    return all(a.last_offset < b.first_offset for a, b in zip(batches, batches[1:]))


def _disjoint(batches: Sequence[StateBatch]) -> list[StateBatch]:
    """Sorted and without overlaps (the coordinator's own state always is)."""
    if _sorted_disjoint(batches):
        return list(batches)
    merged: list[StateBatch] = []
    for b in batches:  # a later batch wins, as in a write
        merged = _overlay(merged, [b])
    return merged


def _overlay(below: list[StateBatch], above: list[StateBatch]) -> list[StateBatch]:
    """Both sorted and disjoint: ``above`` with what it leaves of ``below``, sorted. One sweep,
    so a window of thousands of single-offset runs costs thousands of steps, not millions."""
    out: list[StateBatch] = []
    i = 0
    for b in below:
        lo = b.first_offset
        while i < len(above) and above[i].last_offset < lo:
            out.append(above[i])
            i += 1
        j = i
        while lo <= b.last_offset:
            if j >= len(above) or above[j].first_offset > b.last_offset:
                out.append(replace(b, first_offset=lo))
                break
            a = above[j]
            if a.first_offset > lo:
                out.append(StateBatch(lo, a.first_offset - 1, b.delivery_state, b.delivery_count))
            lo = max(lo, a.last_offset + 1)
            j += 1
    out.extend(above[i:])
    out.sort(key=lambda x: x.first_offset)
    return out


# -- records --------------------------------------------------------------------------------

def _key_fields(key: SharePartitionKey) -> dict:
    return dict(group_id=key.group_id, topic_id=key.topic_id, partition=key.partition)


def snapshot_key(key: SharePartitionKey) -> bytes:
    return _INT16.pack(ShareSnapshotKey.API_KEY) + ShareSnapshotKey(**_key_fields(key)).encode(0)


def update_key(key: SharePartitionKey) -> bytes:
    return _INT16.pack(ShareUpdateKey.API_KEY) + ShareUpdateKey(**_key_fields(key)).encode(0)


def snapshot_record(key: SharePartitionKey, state: ShareGroupOffset) -> StateRecord:
    done = delivery_complete_count(state.snapshot()) if state.start_offset >= 0 else -1
    value = ssv.ShareSnapshotValue(
        snapshot_epoch=state.snapshot_epoch, state_epoch=state.state_epoch, leader_epoch=state.leader_epoch,
        start_offset=state.start_offset, delivery_complete_count=done, create_timestamp=state.create_timestamp,
        write_timestamp=state.write_timestamp,
        state_batches=[ssv.StateBatch(first_offset=b.first_offset, last_offset=b.last_offset,
                                      delivery_state=int(b.delivery_state), delivery_count=b.delivery_count)
                       for b in state.state_batches])
    return snapshot_key(key), _INT16.pack(0) + value.encode(0)


def update_record(key: SharePartitionKey, snapshot_epoch: int, leader_epoch: int, start_offset: int,
                  batches: Sequence[StateBatch]) -> StateRecord:
    value = suv.ShareUpdateValue(
        snapshot_epoch=snapshot_epoch, leader_epoch=leader_epoch, start_offset=start_offset,
        delivery_complete_count=-1,
        state_batches=[suv.StateBatch(first_offset=b.first_offset, last_offset=b.last_offset,
                                      delivery_state=int(b.delivery_state), delivery_count=b.delivery_count)
                       for b in batches])
    return update_key(key), _INT16.pack(0) + value.encode(0)


def decode_record(key: bytes, value: bytes | None
                  ) -> tuple[SharePartitionKey, ssv.ShareSnapshotValue | suv.ShareUpdateValue | None, bool] | None:
    """(share partition key, value or None for a tombstone, is a snapshot); None for a record
    type this coordinator does not know (skipped, as Kafka's serde skips unknown types)."""
    (record_type,) = _INT16.unpack_from(key, 0)
    if record_type == ShareSnapshotKey.API_KEY:
        k: ShareSnapshotKey | ShareUpdateKey = ShareSnapshotKey.decode(key, 0, 2)
        value_type: type = ssv.ShareSnapshotValue
    elif record_type == ShareUpdateKey.API_KEY:
        k = ShareUpdateKey.decode(key, 0, 2)
        value_type = suv.ShareUpdateValue
    else:
        return None
    pkey = SharePartitionKey(k.group_id, k.topic_id, k.partition)
    if value is None:
        return pkey, None, value_type is ssv.ShareSnapshotValue
    (version,) = _INT16.unpack_from(value, 0)
    return pkey, value_type.decode(value, version, 2), value_type is ssv.ShareSnapshotValue


# -- the shard ------------------------------------------------------------------------------

class ShareCoordinatorShard:
    """The share partitions' states of one ``__share_group_state`` partition."""

    def __init__(self, snapshot_update_records_per_snapshot: int = 500) -> None:
        self.records_per_snapshot = snapshot_update_records_per_snapshot
        self.states: dict[SharePartitionKey, ShareGroupOffset] = {}
        self.updates_since_snapshot: dict[SharePartitionKey, int] = {}
        # Leader epochs seen by reads: a read with a newer epoch fences the older leader's writes.
        self.leader_epochs: dict[SharePartitionKey, int] = {}

    # -- replay ------------------------------------------------------------------------------

    def replay(self, key: bytes, value: bytes | None) -> None:
        decoded = decode_record(key, value)
        if decoded is None:
            return
        pkey, v, is_snapshot = decoded
        if v is None:
            if is_snapshot:
                self.states.pop(pkey, None)
                self.updates_since_snapshot.pop(pkey, None)
                self.leader_epochs.pop(pkey, None)
            return
        if isinstance(v, ssv.ShareSnapshotValue):
            self.states[pkey] = ShareGroupOffset(v.snapshot_epoch, v.state_epoch, v.leader_epoch, v.start_offset,
                                                 state_batches(v.state_batches), v.create_timestamp, v.write_timestamp)
            self.updates_since_snapshot[pkey] = 0
            self._see_leader_epoch(pkey, v.leader_epoch)
            return
        current = self.states.get(pkey)
        if current is None or v.snapshot_epoch != current.snapshot_epoch:
            return  # an update of a snapshot since replaced (or deleted)
        start = current.start_offset if v.start_offset == -1 else v.start_offset
        leader_epoch = current.leader_epoch if v.leader_epoch == -1 else v.leader_epoch
        self.states[pkey] = replace(current, start_offset=start, leader_epoch=leader_epoch,
                                    state_batches=combine_batches(current.state_batches,
                                                                  state_batches(v.state_batches), start))
        self.updates_since_snapshot[pkey] = self.updates_since_snapshot.get(pkey, 0) + 1
        self._see_leader_epoch(pkey, leader_epoch)

    def _see_leader_epoch(self, key: SharePartitionKey, epoch: int) -> None:
        if epoch > self.leader_epochs.get(key, -1):
            self.leader_epochs[key] = epoch

    # -- requests into records -------------------------------------------------------------

    def write(self, key: SharePartitionKey, *, state_epoch: int, leader_epoch: int, start_offset: int,
              batches: Sequence[StateBatch], now_ms: int) -> StateRecord:
        """WriteShareGroupState: the record to append (raises FENCED_LEADER_EPOCH or
        FENCED_STATE_EPOCH for a leader or state epoch older than recorded)."""
        self._check_leader_epoch(key, leader_epoch)
        current = self.states.get(key)
        if current is not None and current.state_epoch > state_epoch:
            raise ApiError(ErrorCode.FENCED_STATE_EPOCH, ErrorCode.FENCED_STATE_EPOCH.name)
        if current is None:
            return snapshot_record(key, ShareGroupOffset(0, state_epoch, leader_epoch, start_offset,
                                                         combine_batches((), batches, start_offset), now_ms, now_ms))
        if self.updates_since_snapshot.get(key, 0) >= self.records_per_snapshot:
            start = current.start_offset if start_offset == -1 else start_offset
            return snapshot_record(key, ShareGroupOffset(
                current.snapshot_epoch + 1, state_epoch, current.leader_epoch if leader_epoch == -1 else leader_epoch,
                start, combine_batches(current.state_batches, batches, start), current.create_timestamp, now_ms))
        return update_record(key, current.snapshot_epoch, leader_epoch, start_offset,
                             combine_batches((), batches, start_offset))

    def initialize(self, key: SharePartitionKey, *, state_epoch: int, start_offset: int, now_ms: int) -> StateRecord:
        """InitializeShareGroupState: a fresh snapshot (FENCED_STATE_EPOCH for an older epoch)."""
        current = self.states.get(key)
        if current is not None and current.state_epoch > state_epoch:
            raise ApiError(ErrorCode.FENCED_STATE_EPOCH, ErrorCode.FENCED_STATE_EPOCH.name)
        epoch = 0 if current is None else current.snapshot_epoch + 1
        return snapshot_record(key, ShareGroupOffset(epoch, state_epoch, -1, start_offset, (), now_ms, now_ms))

    def delete(self, key: SharePartitionKey) -> list[StateRecord]:
        """DeleteShareGroupState: tombstones for both of the key's records (none if unknown)."""
        if key not in self.states:
            return []
        return [(update_key(key), None), (snapshot_key(key), None)]

    # -- reads -----------------------------------------------------------------------------

    def read(self, key: SharePartitionKey, leader_epoch: int) -> ShareGroupOffset | None:
        """ReadShareGroupState: the state, None when there is none (the answer's start offset
        is then -1). A newer leader epoch is remembered, fencing the previous leader's writes."""
        self._check_leader_epoch(key, leader_epoch)
        state = self.states.get(key)
        if state is not None:
            self._see_leader_epoch(key, leader_epoch)
        return state

    def summary(self, key: SharePartitionKey, leader_epoch: int) -> ShareStateSummary | None:
        self._check_leader_epoch(key, leader_epoch)
        state = self.states.get(key)
        if state is None:
            return None
        done = delivery_complete_count(state.snapshot()) if state.start_offset != UNINITIALIZED_START_OFFSET else -1
        return ShareStateSummary(state.start_offset, done, state.state_epoch, state.leader_epoch)

    def _check_leader_epoch(self, key: SharePartitionKey, leader_epoch: int) -> None:
        if leader_epoch != -1 and self.leader_epochs.get(key, -1) > leader_epoch:
            raise ApiError(ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.FENCED_LEADER_EPOCH.name)
