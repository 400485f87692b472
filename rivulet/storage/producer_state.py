"""Per-partition producer state: idempotence, transactions and the last stable offset.

Kafka's ProducerStateManager and ProducerAppendInfo. For every producer id that wrote to
the partition the broker keeps its epoch, the sequence/offset ranges of its last five
batches (to answer retries with the original offsets), the coordinator epoch of its last
transaction marker and the first offset of its open transaction. Open transactions decide
the first unstable offset, and so the last stable offset (LSO) read_committed consumers see.

The state is snapshotted to ``<offset>.snapshot`` files in Kafka's layout (int16 version 1,
uint32 CRC-32C of everything after it, then the ProducerSnapshot entries) and rebuilt on
load from the latest snapshot plus the batches after it (see :mod:`rivulet.storage.log`).

Not thread-safe: the owning Log calls in under its lock.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum

from crc32c import crc32c

from rivulet.common.time import SYSTEM_CLOCK
from rivulet.common.types import TV_EPOCH_BUMP
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.protocol.messages.producer_snapshot import ProducerEntry, ProducerSnapshot
from rivulet.protocol.records import ControlRecordType
from rivulet.storage.log_dir_failure import discarding

log = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
INT32_MAX = 2**31 - 1
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
_VERSION = struct.Struct(">h")
_CRC = struct.Struct(">I")
_ENTRIES_OFFSET = 6  # int16 version + uint32 crc
_SNAPSHOT_FILE = re.compile(r"^(\d+)\.snapshot$")


class AppendOrigin(Enum):
    """How much an append is validated: clients fully, coordinators without sequence
    numbers, replication and log loading not at all."""

    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"


def increment_sequence(sequence: int, increment: int) -> int:
    """Sequence numbers wrap from INT32_MAX to 0."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def decrement_sequence(sequence: int, decrement: int) -> int:
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def snapshot_file_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


class CorruptSnapshotError(Exception):
    pass


@dataclass(slots=True)
class BatchMetadata:
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


class ProducerStateEntry:
    __slots__ = ("producer_id", "producer_epoch", "coordinator_epoch", "last_timestamp",
                 "current_txn_first_offset", "batch_metadata")

    def __init__(self, producer_id: int, producer_epoch: int = NO_PRODUCER_EPOCH, coordinator_epoch: int = -1,
                 last_timestamp: int = -1, current_txn_first_offset: int | None = None,
                 batch: BatchMetadata | None = None) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = last_timestamp
        self.current_txn_first_offset = current_txn_first_offset
        self.batch_metadata: deque[BatchMetadata] = deque()
        if batch is not None:
            self.batch_metadata.append(batch)

    def __repr__(self) -> str:
        return (f"ProducerStateEntry(pid={self.producer_id}, epoch={self.producer_epoch}, "
                f"seq={self.first_seq}..{self.last_seq}, txn_first={self.current_txn_first_offset}, "
                f"coordinator_epoch={self.coordinator_epoch})")

    @property
    def is_empty(self) -> bool:
        return not self.batch_metadata

    @property
    def first_seq(self) -> int:
        return self.batch_metadata[0].first_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batch_metadata[-1].last_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batch_metadata[-1].last_offset if self.batch_metadata else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batch_metadata[-1].offset_delta if self.batch_metadata else 0

    def copy_without_batches(self) -> ProducerStateEntry:
        """What an append starts from: the producer's fields, none of its batches."""
        return ProducerStateEntry(self.producer_id, self.producer_epoch, self.coordinator_epoch,
                                  self.last_timestamp, self.current_txn_first_offset)

    def maybe_update_producer_epoch(self, epoch: int) -> bool:
        if self.producer_epoch != epoch:
            self.batch_metadata.clear()  # sequences restart with every epoch
            self.producer_epoch = epoch
            return True
        return False

    def _add_batch_metadata(self, batch: BatchMetadata) -> None:
        if len(self.batch_metadata) == NUM_BATCHES_TO_RETAIN:
            self.batch_metadata.popleft()
        self.batch_metadata.append(batch)

    def add_batch(self, epoch: int, last_seq: int, last_offset: int, offset_delta: int, timestamp: int) -> None:
        self.maybe_update_producer_epoch(epoch)
        self._add_batch_metadata(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def update_marker(self, epoch: int, coordinator_epoch: int, timestamp: int) -> None:
        self.maybe_update_producer_epoch(epoch)
        self.current_txn_first_offset = None
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = timestamp

    def update(self, other: ProducerStateEntry) -> None:
        self.maybe_update_producer_epoch(other.producer_epoch)
        self.coordinator_epoch = other.coordinator_epoch
        self.last_timestamp = other.last_timestamp
        self.current_txn_first_offset = other.current_txn_first_offset
        for b in other.batch_metadata:
            self._add_batch_metadata(b)

    def find_duplicate_batch(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for b in self.batch_metadata:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None


@dataclass(slots=True)
class TxnMetadata:
    producer_id: int
    first_offset: int
    last_offset: int | None = None


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    is_aborted: bool


@dataclass(frozen=True, slots=True)
class ProducerBatch:
    """The fields of a stored or appended batch that producer state needs."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    base_offset: int
    last_offset_delta: int
    max_timestamp: int
    is_transactional: bool
    is_control: bool

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)


@dataclass(frozen=True, slots=True)
class Marker:
    """A control batch's transaction marker: COMMIT/ABORT, coordinator epoch, record time."""

    kind: int
    coordinator_epoch: int
    timestamp: int


class ProducerAppendInfo:
    """Validates one producer's batches of an append against its current state (Kafka's
    rules, origin-dependent) and collects the resulting entry and transaction changes."""

    def __init__(self, tp: str, producer_id: int, current: ProducerStateEntry, origin: AppendOrigin) -> None:
        self.tp = tp
        self.producer_id = producer_id
        self.current = current
        self.origin = origin
        self.updated = current.copy_without_batches()
        self.started: list[TxnMetadata] = []

    def _check_producer_epoch(self, epoch: int, offset: int, transaction_version: int = 0) -> None:
        """``transaction_version`` (a marker's, WriteTxnMarkers v2, KIP-1228): from 2 the coordinator
        bumped the epoch for the marker, so it must be above the producer's; else at least it."""
        current = self.updated.producer_epoch
        strict = transaction_version >= TV_EPOCH_BUMP
        if epoch < current or (strict and epoch == current):
            if strict and epoch == current and self.updated.current_txn_first_offset is None:
                # The same marker again with its transaction already ended (a coordinator
                # reloading PrepareCommit/PrepareAbort, a lost answer): written again, as Kafka
                # (KAFKA-19999). An older epoch is refused: the partition moved past it.
                log.info("Idempotent transaction marker retry detected for producer %d epoch %d. Transaction "
                         "already completed, allowing duplicate marker write.", self.producer_id, epoch)
                return
            message = (f"Epoch of producer {self.producer_id} at offset {offset} in {self.tp} is {epoch}, "
                       f"which is {'<=' if strict else 'smaller than'} the last seen epoch {current}")
            if self.origin == AppendOrigin.REPLICATION:
                log.warning(message)
            else:
                # Since Kafka 2.7 a produce gets INVALID_PRODUCER_EPOCH, not PRODUCER_FENCED:
                # the client can abort the transaction and carry on.
                raise ApiError(ErrorCode.INVALID_PRODUCER_EPOCH, message)

    def _check_sequence(self, epoch: int, first_seq: int, offset: int, added_at_tv2: bool = False) -> None:
        updated, current = self.updated, self.current
        if added_at_tv2 and first_seq != 0 and current.is_empty:
            # A transaction.version 2 producer just added this partition to its transaction and
            # the broker keeps no batches of it: its first batch here starts at 0, so anything else
            # is a lost earlier batch, not the KIP-360 leniency below (Kafka 4.x, ProducerAppendInfo).
            raise ApiError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"Invalid sequence number for producer {self.producer_id} at offset {offset} in partition "
                f"{self.tp}: {first_seq} (incoming seq. number). Expected 0 for a transaction.version 2 "
                f"producer the partition has no state for")
        if epoch != updated.producer_epoch:
            # A new epoch must start at sequence 0, unless the broker knows nothing of the
            # producer (expired or never seen): then any sequence is accepted (KIP-360).
            if first_seq != 0 and updated.producer_epoch != NO_PRODUCER_EPOCH:
                raise ApiError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"Invalid sequence number for new epoch of producer {self.producer_id} at offset {offset} in "
                    f"partition {self.tp}: {epoch} (request epoch), {first_seq} (seq. number), "
                    f"{updated.producer_epoch} (current producer epoch)")
            return
        if not updated.is_empty:
            last_seq = updated.last_seq
        elif epoch == current.producer_epoch:
            last_seq = current.last_seq
        else:
            last_seq = NO_SEQUENCE
        in_sequence = first_seq == last_seq + 1 or (first_seq == 0 and last_seq == INT32_MAX)
        if not (current.producer_epoch == NO_PRODUCER_EPOCH or in_sequence):
            raise ApiError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"Out of order sequence number for producer {self.producer_id} at offset {offset} in partition "
                f"{self.tp}: {first_seq} (incoming seq. number), {last_seq} (current end sequence number)")

    def append(self, batch: ProducerBatch, marker: Marker | None = None,
               transaction_version: int = 0) -> CompletedTxn | None:
        """``transaction_version``: a marker's, as its coordinator wrote it (0 on followers); for data,
        2 when the producer's coordinator has just added the partition for it (Produce v12), else 0."""
        if batch.is_control:
            if marker is None:
                return None  # an emptied control batch (compaction) or a non-transaction control type
            return self.append_end_txn_marker(marker, batch.producer_epoch, batch.base_offset, transaction_version)
        self.append_data_batch(batch.producer_epoch, batch.base_sequence, batch.last_sequence, batch.max_timestamp,
                               batch.base_offset, batch.last_offset, batch.is_transactional, transaction_version)
        return None

    def append_data_batch(self, epoch: int, first_seq: int, last_seq: int, last_timestamp: int, first_offset: int,
                          last_offset: int, is_transactional: bool, transaction_version: int = 0) -> None:
        self._check_producer_epoch(epoch, first_offset)
        if self.origin == AppendOrigin.CLIENT:
            self._check_sequence(epoch, first_seq, first_offset,
                                 is_transactional and transaction_version >= TV_EPOCH_BUMP)
        u = self.updated
        u.add_batch(epoch, last_seq, last_offset, last_offset - first_offset, last_timestamp)
        if u.current_txn_first_offset is not None and not is_transactional:
            raise ApiError(ErrorCode.INVALID_TXN_STATE,
                             f"Expected transactional write from producer {self.producer_id} at offset "
                             f"{first_offset} in partition {self.tp}")
        if u.current_txn_first_offset is None and is_transactional:
            u.current_txn_first_offset = first_offset
            self.started.append(TxnMetadata(self.producer_id, first_offset))

    def append_end_txn_marker(self, marker: Marker, epoch: int, offset: int,
                              transaction_version: int = 0) -> CompletedTxn | None:
        self._check_producer_epoch(epoch, offset, transaction_version)
        u = self.updated
        if u.coordinator_epoch > marker.coordinator_epoch:
            if self.origin == AppendOrigin.REPLICATION:
                log.info("invalid coordinator epoch %d < %d for producer %d at offset %d in %s",
                         marker.coordinator_epoch, u.coordinator_epoch, self.producer_id, offset, self.tp)
            else:
                raise ApiError(ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                                 f"Invalid coordinator epoch for producerId {self.producer_id} at offset {offset} "
                                 f"in partition {self.tp}: {marker.coordinator_epoch} (zombie), "
                                 f"{u.coordinator_epoch} (current)")
        # Only a transaction that wrote data here completes here; an empty one moves no LSO.
        completed = None
        if u.current_txn_first_offset is not None:
            completed = CompletedTxn(self.producer_id, u.current_txn_first_offset, offset,
                                     marker.kind == ControlRecordType.ABORT)
        u.update_marker(epoch, marker.coordinator_epoch, marker.timestamp)
        return completed


AbortedIndexWriter = Callable[[CompletedTxn, int], None]


class ProducerStateManager:
    def __init__(self, log_dir: str, tp: str, *, producer_id_expiration_ms: int = 86_400_000,
                 time_ms: Callable[[], int] = SYSTEM_CLOCK.milliseconds) -> None:
        self.log_dir = log_dir
        self.tp = tp
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self._time_ms = time_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        # Keyed by first offset; appends arrive in offset order, so insertion order is sorted
        # (loads re-sort).
        self.ongoing_txns: dict[int, TxnMetadata] = {}
        self.unreplicated_txns: dict[int, TxnMetadata] = {}
        self.snapshots: dict[int, str] = {}
        self.last_map_offset = 0
        self.last_snap_offset = 0
        self.unsynced_snapshots: list[str] = []
        self._load_snapshot_list()

    # -- snapshots on disk -------------------------------------------------------------------

    def _load_snapshot_list(self) -> None:
        self.snapshots = {}
        try:
            names = os.listdir(self.log_dir)
        except FileNotFoundError:
            return
        for name in names:
            m = _SNAPSHOT_FILE.match(name)
            if m:
                self.snapshots[int(m.group(1))] = os.path.join(self.log_dir, name)

    def latest_snapshot_offset(self) -> int | None:
        return max(self.snapshots) if self.snapshots else None

    def oldest_snapshot_offset(self) -> int | None:
        return min(self.snapshots) if self.snapshots else None

    def _delete_snapshot(self, offset: int) -> None:
        path = self.snapshots.pop(offset, None)
        if path is not None:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            if path in self.unsynced_snapshots:
                self.unsynced_snapshots.remove(path)

    def remove_stray_snapshots(self, segment_base_offsets: Iterable[int]) -> None:
        """Drop snapshots that match no segment base, keeping the largest stray one if it lies
        beyond every segment base (the one a clean shutdown writes at the log end)."""
        bases = set(segment_base_offsets)
        self._load_snapshot_list()
        strays = sorted(o for o in self.snapshots if o not in bases)
        for o in strays[:-1]:
            self._delete_snapshot(o)
        if strays and bases and strays[-1] < max(bases):
            self._delete_snapshot(strays[-1])

    def delete_snapshots_before(self, offset: int) -> None:
        for o in [o for o in self.snapshots if o < offset]:
            self._delete_snapshot(o)

    def delete_snapshot(self, offset: int) -> None:
        """The snapshot at a deleted segment's base goes with the segment."""
        self._delete_snapshot(offset)

    def take_snapshot(self, sync: bool = True) -> str | None:
        """Write a snapshot at the map end offset unless one is already there."""
        if self.last_map_offset <= self.last_snap_offset or discarding():
            return None
        path = os.path.join(self.log_dir, snapshot_file_name(self.last_map_offset))
        write_snapshot(path, self.producers.values(), sync=sync)
        self.snapshots[self.last_map_offset] = path
        if not sync:
            self.unsynced_snapshots.append(path)
        self.last_snap_offset = self.last_map_offset
        log.debug("%s: wrote producer snapshot at %d with %d producer(s)", self.tp, self.last_map_offset,
                  len(self.producers))
        return path

    def take_pending_syncs(self) -> list[str]:
        out, self.unsynced_snapshots = self.unsynced_snapshots, []
        return out

    # -- loading -------------------------------------------------------------------------------

    def _now(self) -> int:
        return self._time_ms()

    def is_producer_expired(self, now_ms: int, entry: ProducerStateEntry) -> bool:
        return (entry.current_txn_first_offset is None
                and now_ms - entry.last_timestamp >= self.producer_id_expiration_ms)

    def _load_from_snapshot(self, log_start_offset: int, now_ms: int) -> None:
        while True:
            latest = self.latest_snapshot_offset()
            if latest is None:
                self.last_snap_offset = self.last_map_offset = log_start_offset
                return
            path = self.snapshots[latest]
            try:
                entries = read_snapshot(path)
            except (CorruptSnapshotError, OSError) as e:
                log.warning("%s: failed to load producer snapshot %s: %s", self.tp, path, e)
                self._delete_snapshot(latest)
                continue
            for entry in entries:
                if not self.is_producer_expired(now_ms, entry):
                    self.load_producer_entry(entry)
            self._sort_txns()
            self.last_snap_offset = self.last_map_offset = latest
            return

    def load_producer_entry(self, entry: ProducerStateEntry) -> None:
        self.producers[entry.producer_id] = entry
        if entry.current_txn_first_offset is not None:
            self.ongoing_txns[entry.current_txn_first_offset] = TxnMetadata(entry.producer_id,
                                                                            entry.current_txn_first_offset)

    def _sort_txns(self) -> None:
        self.ongoing_txns = dict(sorted(self.ongoing_txns.items()))

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, now_ms: int | None = None) -> None:
        """Forget state past ``log_end_offset`` and reload from the latest snapshot in range."""
        for o in [o for o in self.snapshots if o > log_end_offset or o <= log_start_offset]:
            self._delete_snapshot(o)
        if log_end_offset != self.last_map_offset:
            self.producers.clear()
            self.ongoing_txns.clear()
            self.unreplicated_txns.clear()  # the offset is at or below the HW
            self._load_from_snapshot(log_start_offset, self._now() if now_ms is None else now_ms)
        else:
            self.on_log_start_offset_incremented(log_start_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.producers.clear()
        self.ongoing_txns.clear()
        self.unreplicated_txns.clear()
        for o in list(self.snapshots):
            self._delete_snapshot(o)
        self.last_snap_offset = 0
        self.last_map_offset = offset

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        self._remove_unreplicated(log_start_offset)
        if self.last_map_offset < log_start_offset:
            self.last_map_offset = log_start_offset
        latest = self.latest_snapshot_offset()
        self.last_snap_offset = latest if latest is not None else log_start_offset

    # -- appends ---------------------------------------------------------------------------------

    @property
    def map_end_offset(self) -> int:
        return self.last_map_offset

    def update_map_end_offset(self, offset: int) -> None:
        self.last_map_offset = offset

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def prepare_update(self, producer_id: int, origin: AppendOrigin) -> ProducerAppendInfo:
        current = self.producers.get(producer_id) or ProducerStateEntry(producer_id)
        return ProducerAppendInfo(self.tp, producer_id, current, origin)

    def update(self, info: ProducerAppendInfo) -> None:
        entry = self.producers.get(info.producer_id)
        if entry is not None:
            entry.update(info.updated)
        else:
            self.producers[info.producer_id] = info.updated
        for txn in info.started:
            self.ongoing_txns[txn.first_offset] = txn

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO right after ``completed`` ends: the next open transaction of another
        producer, or just past the marker. Written into the aborted-transaction index."""
        for txn in self.ongoing_txns.values():
            if txn.producer_id != completed.producer_id:
                return txn.first_offset
        return completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        txn = self.ongoing_txns.pop(completed.first_offset, None)
        if txn is None:
            raise ValueError(f"attempted to complete transaction {completed} on {self.tp}, which was not started")
        txn.last_offset = completed.last_offset
        self.unreplicated_txns[completed.first_offset] = txn

    def apply_batches(self, batches: Iterable[tuple[ProducerBatch, Marker | None]],
                      write_aborted: AbortedIndexWriter | None = None) -> None:
        """Replay stored batches (log loading and recovery): no validation. ``write_aborted``
        receives each aborted transaction with its LSO, to rebuild a transaction index."""
        for batch, marker in batches:
            if batch.producer_id >= 0:
                info = self.prepare_update(batch.producer_id, AppendOrigin.REPLICATION)
                completed = info.append(batch, marker)
                self.update(info)
                if completed is not None:
                    if write_aborted is not None and completed.is_aborted:
                        write_aborted(completed, self.last_stable_offset(completed))
                    self.complete_txn(completed)
            self.last_map_offset = batch.last_offset + 1

    # -- the last stable offset --------------------------------------------------------------------

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        self._remove_unreplicated(high_watermark)

    def _remove_unreplicated(self, offset: int) -> None:
        if not self.unreplicated_txns:
            return
        for k in [k for k, t in self.unreplicated_txns.items() if t.last_offset is not None and t.last_offset < offset]:
            del self.unreplicated_txns[k]

    def first_unstable_offset(self) -> int | None:
        """The first offset of an undecided transaction, or of a decided one whose marker is
        not yet below the high watermark."""
        if not self.ongoing_txns and not self.unreplicated_txns:
            return None  # the usual case, asked by every fetch of every partition
        first = None
        for d in (self.ongoing_txns, self.unreplicated_txns):
            if d:
                o = next(iter(d))
                if first is None or o < first:
                    first = o
        return first

    def first_undecided_offset(self) -> int | None:
        return next(iter(self.ongoing_txns)) if self.ongoing_txns else None

    def is_empty(self) -> bool:
        return not self.producers and not self.unreplicated_txns

    def remove_expired_producers(self, now_ms: int) -> int:
        expired = [pid for pid, e in self.producers.items() if self.is_producer_expired(now_ms, e)]
        for pid in expired:
            del self.producers[pid]
        return len(expired)


# -- snapshot files --------------------------------------------------------------------------------

def write_snapshot(path: str, entries: Iterable[ProducerStateEntry], *, sync: bool = True) -> None:
    snap = ProducerSnapshot(crc=0, producer_entries=[
        ProducerEntry(producer_id=e.producer_id, epoch=e.producer_epoch, last_sequence=e.last_seq,
                      last_offset=e.last_data_offset, offset_delta=e.last_offset_delta, timestamp=e.last_timestamp,
                      coordinator_epoch=e.coordinator_epoch,
                      current_txn_first_offset=-1 if e.current_txn_first_offset is None else e.current_txn_first_offset)
        for e in entries])
    buf = bytearray(_VERSION.pack(SNAPSHOT_VERSION))
    buf += snap.encode(SNAPSHOT_VERSION)
    _CRC.pack_into(buf, 2, crc32c(memoryview(buf)[_ENTRIES_OFFSET:]))
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(buf)
        while view:
            view = view[os.write(fd, view):]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_snapshot(path: str) -> list[ProducerStateEntry]:
    with open(path, "rb") as f:
        buf = f.read()
    if len(buf) < _ENTRIES_OFFSET + 4:
        raise CorruptSnapshotError(f"snapshot of {len(buf)} bytes is too short")
    (version,) = _VERSION.unpack_from(buf, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"Snapshot contained an unknown file version {version}")
    (stored,) = _CRC.unpack_from(buf, 2)
    computed = crc32c(memoryview(buf)[_ENTRIES_OFFSET:])
    if stored != computed:
        raise CorruptSnapshotError(f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {stored}. "
                                   f"Computed crc: {computed}")
    try:
        snap = ProducerSnapshot.decode(buf, SNAPSHOT_VERSION, 2)
    except Exception as e:
        raise CorruptSnapshotError(f"Snapshot failed schema validation: {e}") from None
    out = []
    for p in snap.producer_entries:
        batch = BatchMetadata(p.last_sequence, p.last_offset, p.offset_delta, p.timestamp) if p.last_offset >= 0 \
            else None
        out.append(ProducerStateEntry(p.producer_id, p.epoch, p.coordinator_epoch, p.timestamp,
                                      p.current_txn_first_offset if p.current_txn_first_offset >= 0 else None,
                                      batch))
    return out
