"""The log of one partition: an ordered list of segments in ``<topic>-<partition>/``.

Threading: every method is meant for the event-loop thread, except :meth:`Log.flush`,
which may run in a worker thread (``loop.run_in_executor``) while appends and reads
continue. A re-entrant lock guards state shared with the flusher; fsyncs run outside
it on pinned segments (see :mod:`rivulet.storage.segment`).
"""

from __future__ import annotations

import bisect
import logging
import os
import re
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from rivulet.common.file_region import FileRegion
from rivulet.common.time import SYSTEM_CLOCK
from rivulet.protocol import records as rec
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.protocol.records import BatchHeader
from rivulet.storage.batches import iter_headers
from rivulet.storage.checkpoints import (
    DeferredSync,
    fsync_dir,
    read_partition_metadata,
    write_partition_metadata,
)
from rivulet.storage.config import LogConfig
from rivulet.storage.epoch import LeaderEpochCache
from rivulet.storage.log_dir_failure import (
    KafkaStorageError,
    LogDirFailureChannel,
    discarding,
    sync_file,
    writes_discarded,
)
from rivulet.storage.producer_state import (
    AppendOrigin,
    BatchMetadata,
    CompletedTxn,
    Marker,
    ProducerAppendInfo,
    ProducerBatch,
    ProducerStateEntry,
    ProducerStateManager,
)
from rivulet.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    _unlink,
    segment_file_name,
)

log = logging.getLogger(__name__)

_SEGMENT_FILE = re.compile(r"^(\d{20})(\.[a-z]+)(\.(?:swap|cleaned|deleted))?$")
_INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


FUTURE_SUFFIX = "-future"


def parse_topic_partition(dir_name: str) -> tuple[str, int] | None:
    """``my-topic-3`` -> ("my-topic", 3); topic names may themselves contain '-'. A future
    replica's dir, ``my-topic-3.<id>-future``, names the same partition."""
    if dir_name.endswith(FUTURE_SUFFIX):
        dir_name = dir_name.rpartition(".")[0]
    topic, sep, part = dir_name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        return None
    return topic, int(part)


def _positions(headers: Sequence[BatchHeader]) -> Iterator[int]:
    pos = 0
    for h in headers:
        yield pos
        pos += h.size


def _as_producer_batch(h: BatchHeader, base_offset: int) -> ProducerBatch:
    return ProducerBatch(h.producer_id, h.producer_epoch, h.base_sequence, base_offset, h.last_offset_delta,
                         h.max_timestamp, h.is_transactional, h.is_control)


def _marker_of(batch: bytes | memoryview) -> Marker | None:
    """The transaction marker a control batch carries; None for other control types."""
    try:
        decoded = rec.decode_batch(batch, verify_crc=False)
        if not decoded.records:
            return None
        r = decoded.records[0]
        c = rec.parse_control_record(r)
    except ApiError as e:
        log.warning("unreadable control batch: %s", e)
        return None
    if c.coordinator_epoch is None:
        return None
    return Marker(int(c.type), c.coordinator_epoch, r.timestamp)


def _producer_batch(h: BatchHeader, batch: bytes | memoryview) -> tuple[ProducerBatch, Marker | None]:
    return _as_producer_batch(h, h.base_offset), (_marker_of(batch) if h.is_control and h.producer_id >= 0
                                                   else None)


def _segment_producer_batches(
    seg: LogSegment, start: int, end: int
) -> Iterator[tuple[ProducerBatch, Marker | None]]:
    """Stored batches of ``seg`` from the one holding ``start`` to the last starting below
    ``end``; only headers are read, plus the bodies of transaction markers."""
    seg.ensure_indexes()
    fd = seg.fd
    for pos, h in iter_headers(fd, seg.offset_index.lookup(start), seg.size, chunk=1 << 20):
        if h.base_offset >= end:
            return
        if h.last_offset >= start:
            marker = None
            if h.is_control and h.producer_id >= 0:
                marker = _marker_of(os.pread(fd, h.size, pos))
            yield _as_producer_batch(h, h.base_offset), marker


class UnexpectedAppendOffsetError(ApiError):
    """A follower append starts below the log end offset (the fetcher must truncate)."""

    def __init__(self, first_offset: int, log_end_offset: int) -> None:
        super().__init__(
            ErrorCode.UNKNOWN_SERVER_ERROR,
            f"append at offset {first_offset} is below the log end offset {log_end_offset}",
        )
        self.first_offset = first_offset
        self.log_end_offset = log_end_offset


@dataclass(slots=True)
class LogAppendInfo:
    first_offset: int  # -1 for an empty append
    last_offset: int
    log_append_time: int  # -1 unless the batches use LogAppendTime
    log_start_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    num_batches: int
    num_records: int
    valid_bytes: int
    # flush.messages reached: call flush() (off-loop) before acknowledging.
    flush_needed: bool
    # A new segment was rolled: Kafka then flushes the finished segment(s);
    # call flush(first_offset) off-loop when convenient.
    rolled: bool
    # A retried idempotent batch: nothing was appended, the offsets are the original ones.
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class LogOffsetMetadata:
    """Where an offset lies in the log (Kafka's LogOffsetMetadata): its segment and the byte
    position, in that segment, of the batch holding it. A waiting fetch compares these
    positions instead of reading records."""

    message_offset: int
    segment_base_offset: int
    relative_position_in_segment: int

    def on_older_segment(self, other: LogOffsetMetadata) -> bool:
        return self.segment_base_offset < other.segment_base_offset

    def on_same_segment(self, other: LogOffsetMetadata) -> bool:
        return self.segment_base_offset == other.segment_base_offset

    def position_diff(self, other: LogOffsetMetadata) -> int:
        """Bytes from ``other`` to this position; both must be on the same segment."""
        return self.relative_position_in_segment - other.relative_position_in_segment


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    records: bytes | memoryview | FileRegion  # whole batches; may be empty
    # Where fetch_offset lies: what a DelayedFetch measures new data from (None when nothing
    # was read: it looks the position up itself then).
    fetch_offset_metadata: LogOffsetMetadata | None = None


# A read with nothing to return, shared: most partitions of a large fetch get it.
NOTHING_READ = FetchDataInfo(b"")


class LogState:
    """What a consumer fetch checks of a Log before reading it, kept here and nowhere else: the
    high watermark, log end and log start offsets, and whether the log is closed or offline.
    Slotted and public because the C accelerator's walk of caught-up partitions
    (``_speedups.read_caught_up``, reached through ``Log.state``) reads exactly these fields;
    the Log changes them in place under its lock."""

    __slots__ = ("hw", "leo", "log_start", "closed", "offline")

    def __init__(self) -> None:
        self.hw = self.leo = self.log_start = 0
        self.closed = self.offline = False


class Log:
    """One partition's durable log (Kafka's UnifiedLog/LocalLog, minus tiering).

    It owns the partition's producer state (idempotence, transactions, the first unstable
    offset) and the per-segment aborted-transaction indexes that read_committed fetches use.
    """

    def __init__(
        self,
        dir: str,
        config: LogConfig,
        *,
        topic_id: uuid.UUID | None = None,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        high_watermark: int | None = None,
        had_clean_shutdown: bool = False,
        time_ms: Callable[[], int] = SYSTEM_CLOCK.milliseconds,
        producer_id_expiration_ms: int = 86_400_000,
        failure_channel: LogDirFailureChannel | None = None,
        sync_parent: bool = True,
    ) -> None:
        """``sync_parent`` False: a new log's dir entry is made durable by the caller (one fsync
        of the parent for many new logs)."""
        self.dir = os.path.abspath(dir)
        self._failure_channel = failure_channel
        self.state = LogState()
        self._read_only: str | None = None  # why changes are refused (see set_read_only)
        self._doomed_files: list[tuple[int, list[str]]] = []  # (when to unlink, segment files renamed *.deleted)
        parsed = parse_topic_partition(os.path.basename(self.dir))
        self.topic, self.partition = parsed if parsed else (os.path.basename(self.dir), -1)
        self.config = config
        self._time_ms = time_ms
        self._lock = threading.RLock()
        self._flush_lock = threading.Lock()
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._dir_dirty = False
        self._trunc_floor: int | None = None
        # offset -> (segment, position of its batch): see offset_metadata.
        self._offset_positions: dict[int, tuple[LogSegment, int]] = {}

        created = not os.path.isdir(self.dir)
        os.makedirs(self.dir, exist_ok=True)
        # A new log's small files wait for its first flush of records (see DeferredSync). Lost
        # in a crash before that, they are made again: the topic id comes from the metadata,
        # the epoch from the leader, and the log was empty on disk.
        self._deferred = DeferredSync(created)
        stored_id = None if created else read_partition_metadata(self.dir)
        if topic_id is not None and stored_id is not None and stored_id != topic_id:
            raise ApiError(
                ErrorCode.INCONSISTENT_TOPIC_ID,
                f"{self.dir} belongs to topic id {stored_id}, not {topic_id}",
            )
        if topic_id is not None and stored_id is None:
            self._deferred.wrote(write_partition_metadata(self.dir, topic_id, sync=not created))
        self.topic_id: uuid.UUID | None = topic_id or stored_id
        if created and sync_parent:
            fsync_dir(os.path.dirname(self.dir))

        self._epochs = LeaderEpochCache(self.dir, deferred=self._deferred if created else None)
        self.producer_state = ProducerStateManager(
            self.dir, f"{self.topic}-{self.partition}", producer_id_expiration_ms=producer_id_expiration_ms,
            time_ms=time_ms)
        try:
            self._load(recovery_point, log_start_offset, high_watermark, had_clean_shutdown)
        except BaseException:
            # A log that failed to load (out of descriptors, a bad disk) keeps none open.
            for seg in self._segments:
                try:
                    seg.close(final=False)
                except OSError:
                    pass  # the load's own error is the one to report
            raise
        self._last_flush_ms = self._time_ms()

    def assign_topic_id(self, topic_id: uuid.UUID) -> None:
        """Record the topic id of a log loaded without one (its partition.metadata was lost in a
        crash before the log's first flush), as Kafka assigns it when the partition is opened."""
        with self._lock:
            if self.topic_id is not None:
                return
            if self._read_only is None and not self.state.offline:
                write_partition_metadata(self.dir, topic_id)
            self.topic_id = topic_id

    # -- loading and recovery --------------------------------------------------------------

    def _new_segment(self, base_offset: int, *, fresh: bool) -> LogSegment:
        cfg = self.config
        return LogSegment(
            self.dir,
            base_offset,
            index_interval_bytes=cfg.index_interval_bytes,
            max_index_bytes=cfg.segment_index_bytes,
            jitter_ms=cfg.segment_jitter_ms,
            created_ms=self._time_ms(),
            fresh=fresh,
        )

    def _clean_stray_files(self) -> list[int]:
        """Handle leftovers of interrupted deletes/compactions; return base offsets of .log files."""
        names = os.listdir(self.dir)
        min_cleaned = None
        swaps: list[tuple[int, str, str]] = []
        for name in names:
            path = os.path.join(self.dir, name)
            if name.endswith(".tmp"):
                # An interrupted atomic write, or the cleaner's scratch directory of an
                # interrupted compaction: the originals are intact either way.
                if os.path.isdir(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    _unlink(path)
                continue
            m = _SEGMENT_FILE.match(name)
            if not m or not m.group(3):
                continue
            base, kind = int(m.group(1)), m.group(3)
            if kind == ".deleted":
                _unlink(path)  # deletion already decided
            elif kind == ".cleaned":
                _unlink(path)  # compaction output that never became a swap
                min_cleaned = base if min_cleaned is None else min(min_cleaned, base)
            else:
                swaps.append((base, m.group(2), path))
        for base, suffix, path in swaps:
            if (min_cleaned is not None and base >= min_cleaned) or suffix != LOG_SUFFIX:
                _unlink(path)  # incomplete swap, or a swapped index we will rebuild
                continue
            self._complete_swap(base, path)
        bases: set[int] = set()
        names = os.listdir(self.dir)
        for name in names:
            m = _SEGMENT_FILE.match(name)
            if m and not m.group(3) and m.group(2) == LOG_SUFFIX:
                bases.add(int(m.group(1)))
        for name in names:
            m = _SEGMENT_FILE.match(name)
            if m and not m.group(3) and m.group(2) in _INDEX_SUFFIXES and int(m.group(1)) not in bases:
                _unlink(os.path.join(self.dir, name))  # orphan index
        return sorted(bases)

    def _complete_swap(self, base: int, swap_path: str) -> None:
        """A finished compaction swap replaces every segment whose offsets it covers."""
        fd = os.open(swap_path, os.O_RDONLY)
        try:
            next_offset = base
            for _, b in iter_headers(fd, 0, os.fstat(fd).st_size):
                next_offset = b.next_offset
        finally:
            os.close(fd)
        for name in os.listdir(self.dir):
            m = _SEGMENT_FILE.match(name)
            if m and not m.group(3) and base <= int(m.group(1)) < max(next_offset, base + 1):
                _unlink(os.path.join(self.dir, name))
        os.replace(swap_path, swap_path[: -len(".swap")])
        log.info("%s: completed interrupted swap of segment %d", self.dir, base)

    def _load(
        self,
        recovery_point: int,
        log_start_checkpoint: int,
        high_watermark: int | None,
        had_clean_shutdown: bool,
    ) -> None:
        bases = self._clean_stray_files()
        segments = [self._new_segment(b, fresh=False) for b in bases]
        if not segments:
            segments = [self._new_segment(max(0, log_start_checkpoint), fresh=True)]
            self._dir_dirty = True
        self._segments = segments  # closed by __init__ if loading fails
        recover_from = len(segments)
        if not had_clean_shutdown:
            recover_from = max(0, bisect.bisect_right(bases, recovery_point) - 1) if bases else 0
        epochs = self._epochs

        def on_epoch(epoch: int, start: int) -> None:
            latest = epochs.latest_epoch
            if latest is None or epoch > latest:
                epochs.assign(epoch, start)

        kept: list[LogSegment] = []
        self.state.leo = self.state.log_start = self._recovery_point = self.state.hw = 0
        load_start = max(log_start_checkpoint, segments[0].base_offset)
        for i, seg in enumerate(segments):
            if i >= recover_from:
                truncated = self._recover_segment(seg, kept, load_start, on_epoch)
                kept.append(seg)
                if truncated and i + 1 < len(segments):
                    # Everything after a corrupt point is suspect, as in Kafka.
                    log.warning("%s: deleting %d segment(s) after corruption", self.dir, len(segments) - i - 1)
                    for later in segments[i + 1 :]:
                        if discarding():  # read-only recovery: they are only left out
                            later.close(final=False)
                        else:
                            later.delete_files()
                    break
            else:
                if not seg.load_clean():
                    self._recover_segment(seg, kept, load_start, None)
                kept.append(seg)
        self._segments = kept
        self._bases = [s.base_offset for s in kept]
        active = kept[-1]
        active.ensure_indexes()
        if len(kept) - 1 < recover_from:
            active.refresh_max_timestamp()  # its tail past the last time-index entry
        self.state.leo = active.next_offset
        self.state.log_start = max(log_start_checkpoint, kept[0].base_offset)
        if self.state.log_start > self.state.leo:
            log.warning("%s: log start %d is past the end %d; starting afresh", self.dir, self.state.log_start,
                        self.state.leo)
            self._truncate_fully_locked(self.state.log_start)
        self._recovery_point = self.state.leo if had_clean_shutdown else min(recovery_point, self.state.leo)
        epochs.truncate_from_end(self.state.leo)
        epochs.truncate_from_start(self.state.log_start)
        self.producer_state.remove_stray_snapshots(self._bases)
        self._rebuild_producer_state(self.state.leo, reload_from_clean_shutdown=had_clean_shutdown)
        self.state.hw = self.state.log_start
        self.high_watermark = high_watermark if high_watermark is not None else self.state.log_start

    # -- producer state ----------------------------------------------------------------------

    def _recover_segment(
        self,
        seg: LogSegment,
        earlier: list[LogSegment],
        log_start: int,
        on_epoch: Callable[[int, int], None] | None,
    ) -> int:
        """Kafka's recoverSegment: producer state as of the segment's start, then a replay of
        the segment that also rebuilds its transaction index; a snapshot at its end."""
        ps = self.producer_state
        self._rebuild_producer_state(seg.base_offset, segments=earlier, log_start=log_start)
        index = seg.txn_index

        def write_aborted(c: CompletedTxn, lso: int) -> None:
            index.append(c.producer_id, c.first_offset, c.last_offset, lso)

        def on_batch(h: BatchHeader, view: memoryview) -> None:
            ps.apply_batches([_producer_batch(h, view)], write_aborted)

        truncated = seg.recover(on_epoch, on_batch)
        ps.take_snapshot()
        return truncated

    def _rebuild_producer_state(
        self,
        last_offset: int,
        *,
        segments: list[LogSegment] | None = None,
        log_start: int | None = None,
        reload_from_clean_shutdown: bool = False,
    ) -> None:
        """Kafka's rebuildProducerState: the latest snapshot at or below ``last_offset``, then
        the batches from there to ``last_offset``."""
        ps = self.producer_state
        segs = self._segments if segments is None else segments
        start = self.state.log_start if log_start is None else log_start
        to_snapshot = [last_offset]
        if segs:
            to_snapshot[:0] = [s.base_offset for s in segs[-2:]]
        if ps.latest_snapshot_offset() is None and reload_from_clean_shutdown:
            # A clean shutdown always leaves a snapshot, so none means logs written before
            # producer state existed: nothing to rebuild, only empty snapshots to take.
            for offset in to_snapshot:
                ps.update_map_end_offset(offset)
                ps.take_snapshot()
            return
        was_empty = ps.is_empty() and ps.map_end_offset >= last_offset
        ps.truncate_and_reload(start, last_offset, self._time_ms())
        if last_offset > ps.map_end_offset and not was_empty:
            for i, seg in enumerate(segs):
                upper = segs[i + 1].base_offset if i + 1 < len(segs) else None
                if (upper is not None and upper <= ps.map_end_offset) or seg.base_offset >= last_offset:
                    continue
                begin = max(seg.base_offset, ps.map_end_offset, start)
                ps.update_map_end_offset(begin)
                if seg.base_offset in to_snapshot:
                    ps.take_snapshot()
                ps.apply_batches(_segment_producer_batches(seg, begin, last_offset))
        ps.update_map_end_offset(last_offset)
        ps.take_snapshot()

    def _analyze_producer_state(
        self,
        buf: bytes | bytearray | memoryview,
        batches: list[tuple[int, int, BatchHeader]],
        origin: AppendOrigin,
        transaction_version: int = 0,
    ) -> tuple[dict[int, ProducerAppendInfo], list[CompletedTxn], BatchMetadata | None]:
        """Validate each producer's batches against its state (offsets already assigned).
        A client batch whose sequence range is one of the producer's last five is a retry:
        its metadata comes back as the third element and nothing may be appended."""
        ps = self.producer_state
        infos: dict[int, ProducerAppendInfo] = {}
        completed: list[CompletedTxn] = []
        for pos, base, h in batches:
            if h.producer_id < 0:
                continue
            batch = _as_producer_batch(h, base)
            if origin == AppendOrigin.CLIENT:
                entry = ps.last_entry(h.producer_id)
                if entry is not None:
                    dup = entry.find_duplicate_batch(h.producer_epoch, h.base_sequence, batch.last_sequence)
                    if dup is not None:
                        return infos, completed, dup
            info = infos.get(h.producer_id)
            if info is None:
                info = infos[h.producer_id] = ps.prepare_update(h.producer_id, origin)
            marker = _marker_of(memoryview(buf)[pos : pos + h.size]) if h.is_control else None
            done = info.append(batch, marker, transaction_version)
            if done is not None:
                completed.append(done)
        return infos, completed, None

    def _apply_producer_state(
        self, infos: dict[int, ProducerAppendInfo], completed: list[CompletedTxn], next_offset: int
    ) -> None:
        ps = self.producer_state
        for info in infos.values():
            ps.update(info)
        segment = self._segments[-1]  # where the markers just landed
        for c in completed:
            lso = ps.last_stable_offset(c)
            if c.is_aborted:
                segment.txn_index.append(c.producer_id, c.first_offset, c.last_offset, lso)
            ps.complete_txn(c)
        ps.update_map_end_offset(next_offset)

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of an open (or not yet replicated) transaction, never below the
        log start; None when every transaction is decided."""
        fuo = self.producer_state.first_unstable_offset()
        return None if fuo is None else max(fuo, self.state.log_start)

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of every aborted transaction overlapping
        [start_offset, upper_bound_offset), from the segment holding start_offset onwards."""
        out: list[tuple[int, int]] = []
        segments = self._segments
        i = max(0, bisect.bisect_right(self._bases, start_offset) - 1)
        while i < len(segments):
            found, complete = segments[i].txn_index.collect(start_offset, upper_bound_offset)
            out.extend((pid, first) for pid, first, _last, _lso in found)
            if complete:
                break
            i += 1
        return out

    def delete_snapshots_after_recovery_point_checkpoint(self) -> int:
        """Drop producer snapshots below both the recovery point's segment and the last two
        segments (Kafka keeps those for truncation and recovery). Returns the offset kept from."""
        with self._lock:
            if self.state.closed:
                return 0
            bases = self._bases
            active = len(bases) - 1
            two_segments = bases[max(0, active - 1)]
            i = bisect.bisect_left(bases, self._recovery_point) - 1
            recovery = bases[i] if i >= 0 else self._recovery_point
            keep_from = min(recovery, two_segments)
            self.producer_state.delete_snapshots_before(keep_from)
            return keep_from

    def active_producers(self) -> dict[int, ProducerStateEntry]:
        return dict(self.producer_state.producers)

    def remove_expired_producers(self, now_ms: int) -> int:
        """producer.id.expiration.ms: forget idle producers without an open transaction."""
        with self._lock:
            if self.state.closed:
                return 0
            return self.producer_state.remove_expired_producers(now_ms)

    # -- properties ------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self.state.log_start

    @property
    def log_end_offset(self) -> int:
        return self.state.leo

    @property
    def high_watermark(self) -> int:
        return self.state.hw

    @high_watermark.setter
    def high_watermark(self, value: int) -> None:
        self.state.hw = min(max(value, self.state.log_start), self.state.leo)
        # Decided transactions below the HW stop holding back the LSO.
        self.producer_state.on_high_watermark_updated(self.state.hw)

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def unflushed_messages(self) -> int:
        return self.state.leo - self._recovery_point

    @property
    def last_flush_ms(self) -> int:
        return self._last_flush_ms

    @property
    def closed(self) -> bool:
        return self.state.closed

    def segment_base_offsets(self) -> list[int]:
        return list(self._bases)

    def log_segments(self) -> list[LogSegment]:
        """The segments, oldest first (Kafka's logSegments); a copy, so later rolls, retention
        or swaps do not change it under the caller."""
        with self._lock:
            return list(self._segments)

    def pin_segments(self, segments: Sequence[LogSegment]) -> None:
        """Keep ``segments`` open for a reader off the event loop (the cleaner's worker): one
        that retention or truncation deletes meanwhile closes only at ``unpin_segments``."""
        with self._lock:
            for seg in segments:
                seg.pin()

    def _hold_for_region(self, seg: LogSegment) -> Callable[[], None]:
        """Pin ``seg`` for a FileRegion of it; what unpins it, which the region calls once,
        on the sender thread that wrote it or on the loop."""
        with self._lock:
            seg.pin()

        def release() -> None:
            with self._lock:
                seg.unpin()
        return release

    def unpin_segments(self, segments: Sequence[LogSegment]) -> None:
        """Release ``pin_segments``; a segment deleted meanwhile closes now."""
        with self._lock:
            for seg in segments:
                seg.unpin()

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    def update_config(self, config: LogConfig) -> None:
        """Apply new topic configs; new segments pick up index and size settings."""
        with self._lock:
            self.config = config
            self._segments[-1].index_interval_bytes = config.index_interval_bytes

    def _check_open(self) -> None:
        if self.state.closed:
            raise ApiError(ErrorCode.KAFKA_STORAGE_ERROR, f"log {self.dir} is closed")
        if self.state.offline:
            raise KafkaStorageError(f"the log directory of {self.topic}-{self.partition} is offline")

    def _check_writable(self) -> None:
        self._check_open()
        if self._read_only is not None:
            raise KafkaStorageError(f"{self.topic}-{self.partition} is read-only: {self._read_only}")

    @property
    def read_only(self) -> bool:
        return self._read_only is not None

    def set_read_only(self, why: str) -> None:
        """Loaded by a read-only recovery (a full disk): reads are served, every change is
        refused with KAFKA_STORAGE_ERROR and nothing is written, until restart."""
        self._read_only = why

    @property
    def offline(self) -> bool:
        return self.state.offline

    def mark_offline(self) -> None:
        """Its log dir failed: refuse every append and read until restart."""
        self.state.offline = True

    def _io_failed(self, e: OSError, what: str) -> KafkaStorageError:
        self.state.offline = True
        if self._failure_channel is not None:
            self._failure_channel.maybe_add_offline_log_dir(
                os.path.dirname(self.dir), f"{what} of {self.topic}-{self.partition} failed", e)
        return KafkaStorageError(f"{what} of {self.topic}-{self.partition} failed: {e}")

    # -- appends ---------------------------------------------------------------------------

    def append_as_leader(
        self,
        records: bytes | bytearray | memoryview,
        headers: Sequence[BatchHeader],
        *,
        leader_epoch: int,
        now_ms: int,
        log_append_time: bool = False,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        transaction_version: int = 0,
    ) -> LogAppendInfo:
        """Assign offsets from the LEO and append validated batches.

        The batches get their final bytes here, in one in-place step
        (``records.patch_appended_batches``): base offsets, the partition leader epoch, with
        ``log_append_time`` the LogAppendTime stamp ``now_ms``, otherwise the maxTimestamp that
        validation took from the records, and the CRC where a timestamp changed. A
        ``bytearray`` or writable ``memoryview`` is modified directly, other types are copied
        once. ``headers`` come from ``records.validate_produce_records`` (or describe
        coordinator-built batches), in order, and are updated to the stored values.

        Batches with a producer id are checked against the producer state (``origin``
        decides how strictly) and may raise OUT_OF_ORDER_SEQUENCE_NUMBER,
        INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE or TRANSACTION_COORDINATOR_FENCED. A
        retried batch appends nothing: the result carries its original offsets and
        ``duplicate``. ``transaction_version``: of the markers among them (KIP-1228's check); for
        client data, 2 when the coordinator has just added the partitions for a TV2 producer.
        """
        if not headers:
            return self._empty_append_info()
        writable = isinstance(records, bytearray) or (isinstance(records, memoryview) and not records.readonly)
        buf = records if writable else bytearray(records)
        max_message_bytes = self.config.max_message_bytes
        with self._lock:
            self._check_writable()
            first = self.state.leo
            total = 0
            for h in headers:
                if h.size > max_message_bytes:
                    raise ApiError(
                        ErrorCode.MESSAGE_TOO_LARGE,
                        f"batch of {h.size} bytes exceeds max.message.bytes={max_message_bytes}",
                    )
                total += h.size
            if total != len(buf):
                raise ApiError(ErrorCode.CORRUPT_MESSAGE,
                                 f"batch sizes add up to {total}, records are {len(buf)} bytes")
            rec.patch_appended_batches(buf, headers, first_offset=first, leader_epoch=leader_epoch,
                                       log_append_time=now_ms if log_append_time else None)
            pos = 0
            entries = []
            placed: list[tuple[int, int, BatchHeader]] = []
            max_ts, off_max = -1, first
            num_records = 0
            for h in headers:
                size = h.size
                last = h.last_offset
                placed.append((pos, h.base_offset, h))
                if h.max_timestamp > max_ts:
                    max_ts, off_max = h.max_timestamp, last
                entries.append((pos, last, h.max_timestamp, size))
                num_records += h.records_count
                pos += size
            offset = headers[-1].next_offset
            self._check_append_size(pos)
            infos, completed, dup = self._analyze_producer_state(buf, placed, origin, transaction_version)
            if dup is not None:
                return LogAppendInfo(
                    first_offset=dup.first_offset,
                    last_offset=dup.last_offset,
                    log_append_time=dup.timestamp,  # as Kafka: the original batch's timestamp
                    log_start_offset=self.state.log_start,
                    max_timestamp=dup.timestamp,
                    offset_of_max_timestamp=dup.last_offset,
                    num_batches=0,
                    num_records=0,
                    valid_bytes=0,
                    flush_needed=False,
                    rolled=False,
                    duplicate=True,
                )
            self._epochs.assign(leader_epoch, first)
            return self._finish_append(buf, entries, infos, completed, first, offset, max_ts, off_max, now_ms,
                                       now_ms if log_append_time else -1, num_records, pos)

    def append_as_follower(
        self,
        records: bytes | bytearray | memoryview,
        headers: Sequence[BatchHeader],
        *,
        now_ms: int | None = None,
    ) -> LogAppendInfo:
        """Append batches fetched from the leader, keeping their offsets and epochs."""
        if not headers:
            return self._empty_append_info()
        if now_ms is None:
            now_ms = self._time_ms()
        with self._lock:
            self._check_writable()
            first = headers[0].base_offset
            if first < self.state.leo:
                raise UnexpectedAppendOffsetError(first, self.state.leo)
            pos = 0
            entries = []
            max_ts, off_max = -1, first
            num_records = 0
            expected = first
            for h in headers:
                if h.base_offset < expected:
                    raise ApiError(ErrorCode.CORRUPT_MESSAGE, f"offsets go backwards at {h.base_offset}")
                size = h.size
                last = h.base_offset + h.last_offset_delta
                if h.max_timestamp > max_ts:
                    max_ts, off_max = h.max_timestamp, last
                entries.append((pos, last, h.max_timestamp, size))
                num_records += h.records_count
                pos += size
                expected = last + 1
            if pos != len(records):
                raise ApiError(
                    ErrorCode.CORRUPT_MESSAGE, f"batch sizes add up to {pos}, records are {len(records)} bytes"
                )
            self._check_append_size(pos)
            infos, completed, _ = self._analyze_producer_state(
                records, [(p, h.base_offset, h) for p, h in zip(_positions(headers), headers)], AppendOrigin.REPLICATION
            )
            for h in headers:
                if h.partition_leader_epoch >= 0:
                    self._epochs.assign(h.partition_leader_epoch, h.base_offset)
            return self._finish_append(records, entries, infos, completed, first, expected, max_ts, off_max, now_ms,
                                       -1, num_records, pos)

    def _finish_append(
        self,
        buf: bytes | bytearray | memoryview,
        entries: list[tuple[int, int, int, int]],
        infos: dict[int, ProducerAppendInfo],
        completed: list[CompletedTxn],
        first: int,
        next_offset: int,
        max_ts: int,
        off_max: int,
        now_ms: int,
        log_append_time: int,
        num_records: int,
        valid_bytes: int,
    ) -> LogAppendInfo:
        """Write validated batches (offsets ``first`` to ``next_offset - 1``) and their producer state."""
        rolled = self._append_locked(buf, entries, first, next_offset - 1, max_ts, now_ms)
        self._apply_producer_state(infos, completed, next_offset)
        return LogAppendInfo(
            first_offset=first,
            last_offset=next_offset - 1,
            log_append_time=log_append_time,
            log_start_offset=self.state.log_start,
            max_timestamp=max_ts,
            offset_of_max_timestamp=off_max,
            num_batches=len(entries),
            num_records=num_records,
            valid_bytes=valid_bytes,
            flush_needed=self.state.leo - self._recovery_point >= self.config.flush_messages,
            rolled=rolled,
        )

    def _empty_append_info(self) -> LogAppendInfo:
        return LogAppendInfo(-1, -1, -1, self.state.log_start, -1, -1, 0, 0, 0, False, False)

    def _check_append_size(self, size: int) -> None:
        if size > self.config.segment_size:
            raise ApiError(
                ErrorCode.RECORD_LIST_TOO_LARGE,
                f"{size} bytes cannot fit in a segment of {self.config.segment_size} bytes",
            )

    def _append_locked(
        self,
        buf: bytes | bytearray | memoryview,
        entries: list[tuple[int, int, int, int]],
        first: int,
        last: int,
        max_ts: int,
        now_ms: int,
    ) -> bool:
        try:
            rolled = self._maybe_roll(len(buf), first, last, max_ts, now_ms)
            seg = self._segments[-1]
            seg.append(buf, entries)
        except OSError as e:
            # The dir goes offline so nothing after a torn batch is ever acknowledged; cut it
            # now where the disk allows (recovery cuts it otherwise).
            try:
                seg = self._segments[-1]
                os.ftruncate(seg.fd, seg.size)
            except OSError:
                pass
            raise self._io_failed(e, "append") from e
        self.state.leo = last + 1
        return rolled

    def _maybe_roll(self, size: int, first: int, last: int, max_ts: int, now_ms: int) -> bool:
        seg = self._segments[-1]
        if seg.size == 0:
            return False
        cfg = self.config
        if (
            seg.size > cfg.segment_size - size
            or seg.time_waited_for_roll(now_ms, max_ts) > cfg.segment_ms - seg.roll_jitter_ms
            or seg.offset_index.is_full
            or seg.time_index.is_full
            or not seg.offset_index.can_append_offset(last)
        ):
            self._roll(first)
            return True
        return False

    def _roll(self, new_base: int) -> LogSegment:
        old = self._segments[-1]
        old.on_become_inactive()
        if new_base <= old.base_offset:
            if new_base == old.base_offset and old.size == 0:
                return old
            raise ApiError(
                ErrorCode.KAFKA_STORAGE_ERROR,
                f"cannot roll to offset {new_base} below the active segment base {old.base_offset}",
            )
        seg = self._new_segment(new_base, fresh=True)
        self._segments.append(seg)
        self._bases.append(new_base)
        self._dir_dirty = True
        # A snapshot at every segment base lets recovery start at any segment; it is synced
        # with the next flush, off the event loop.
        self.producer_state.update_map_end_offset(new_base)
        self.producer_state.take_snapshot(sync=False)
        log.debug("%s: rolled new segment at %d", self.dir, new_base)
        return seg

    def replace_segments(self, old: Sequence[LogSegment], cleaned: list[tuple[list[LogSegment], str]]) -> bool:
        """The cleaner's swap (Kafka's replaceSegments): each group of segments in ``cleaned``
        gives way to the one segment written for it in its scratch directory. Nothing is swapped,
        and False returned, when the log changed since ``old``, the segments the cleaner read, were
        its first (closed, truncated, or segments deleted by retention)."""
        with self._lock:
            segs = self._segments
            n = len(old)
            if self.closed or len(segs) <= n or any(a is not b for a, b in zip(segs[:n], old, strict=True)):
                return False
            for group, tmp in cleaned:
                self._swap_in_cleaned(group, tmp)
        return True

    def _swap_in_cleaned(self, group: list[LogSegment], tmp: str) -> None:
        base = group[0].base_offset
        d = self.dir
        moved = []
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            src = os.path.join(tmp, segment_file_name(base, suffix))
            if os.path.exists(src):
                dst = os.path.join(d, segment_file_name(base, suffix) + ".swap")
                os.replace(src, dst)
                moved.append(dst)
        fsync_dir(d)
        for seg in group:
            seg.delete_files()
        for path in moved:
            os.replace(path, path[: -len(".swap")])
        fsync_dir(d)
        new = self._new_segment(base, fresh=False)
        if not new.load_clean():
            new.recover()
        i = self._segments.index(group[0])
        self._segments[i: i + len(group)] = [new]
        self._bases[i: i + len(group)] = [base]

    def roll(self) -> None:
        """Force a new segment at the LEO (no-op when the active one is empty)."""
        with self._lock:
            self._check_writable()
            if self._segments[-1].size:
                self._roll(self.state.leo)

    # -- reads -----------------------------------------------------------------------------

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
        zero_copy_min: int = 0,
    ) -> FetchDataInfo:
        """Raw whole batches from ``fetch_offset`` (the batch containing it first).

        ``max_offset`` is exclusive (HW for consumers, LEO for followers): batches
        starting at or after it are not returned. With ``min_one_batch`` (KIP-74)
        the first batch is returned even if larger than ``max_bytes``. With
        ``zero_copy_min``, records of at least that many bytes come as a FileRegion of the
        segment, for a socket to send without reading them.
        """
        self._check_open()
        leo, start = self.state.leo, self.state.log_start
        if fetch_offset > leo or fetch_offset < start:
            raise ApiError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {fetch_offset} is outside [{start}, {leo}] of {self.topic}-{self.partition}",
            )
        bound = leo if max_offset is None else min(max_offset, leo)
        if fetch_offset >= bound or max_bytes < 0:
            # Nothing to read: no position either. Most partitions of a large fetch end here, and
            # a waiting fetch finds the position itself (offset_metadata) if it needs it.
            return NOTHING_READ
        self._check_open()
        segments = self._segments
        i = max(0, bisect.bisect_right(self._bases, fetch_offset) - 1)
        # Room to walk from the index entry to the wanted batch within the first pread;
        # capped so a huge index.interval.bytes cannot inflate every read.
        slack = min(self.config.index_interval_bytes, 1 << 20) + 65536
        while i < len(segments):
            seg = segments[i]
            try:
                got = (seg.read_region(fetch_offset, max_bytes, bound, min_one_batch, zero_copy_min,
                                       self._hold_for_region)
                       if zero_copy_min else seg.read(fetch_offset, max_bytes, bound, min_one_batch, slack))
            except OSError as e:
                raise self._io_failed(e, "read") from e
            if got is not None:
                data, position = got
                return FetchDataInfo(data, LogOffsetMetadata(fetch_offset, seg.base_offset, position))
            i += 1
        return FetchDataInfo(b"", self.offset_metadata(fetch_offset))

    def offset_metadata(self, offset: int) -> LogOffsetMetadata:
        """Segment and position of ``offset`` (the LEO: the end of the active segment), found
        from the offset index and batch headers; the last few answers are kept, so the high
        watermark and last stable offset that waiting fetches ask for cost nothing after the
        first time. Positions are of batch starts, which later appends never move."""
        with self._lock:
            self._check_open()
            if offset >= self.state.leo:
                return self.log_end_offset_metadata
            i = max(0, bisect.bisect_right(self._bases, offset) - 1)
            seg = self._segments[i]
            cached = self._offset_positions.get(offset)
            if cached is not None and cached[0] is seg:
                return LogOffsetMetadata(offset, seg.base_offset, cached[1])
            seg.ensure_indexes()
            pos = seg.position_of(offset)
            if pos is None:  # past this segment's batches: the next segment's start
                if i + 1 < len(self._segments):
                    seg, pos = self._segments[i + 1], 0
                else:
                    pos = seg.size
            if len(self._offset_positions) >= 8:
                self._offset_positions.clear()
            self._offset_positions[offset] = (seg, pos)
            return LogOffsetMetadata(offset, seg.base_offset, pos)

    @property
    def log_end_offset_metadata(self) -> LogOffsetMetadata:
        active = self._segments[-1]
        return LogOffsetMetadata(self.state.leo, active.base_offset, active.size)

    def segment_made_since(self, offset: int, serial: int) -> bool:
        """Whether the segment holding ``offset`` was made after ``segment_serial()`` returned
        ``serial``: then ``offset`` was, back then, the log end on an older segment."""
        with self._lock:
            i = max(0, bisect.bisect_right(self._bases, offset) - 1)
            return self._segments[i].serial > serial

    @property
    def high_watermark_metadata(self) -> LogOffsetMetadata:
        return self.offset_metadata(self.state.hw)

    def fetch_offset_by_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """ListOffsets by time: (offset, timestamp) of the first record with timestamp >= ``timestamp``."""
        start = self.state.log_start
        for seg in self._segments:
            if seg.max_timestamp < timestamp or seg.next_offset <= start:
                continue
            found = seg.find_offset_by_timestamp(timestamp, start)
            if found is not None:
                return found
        return None

    def max_timestamp_offset(self) -> tuple[int, int]:
        """ListOffsets MAX_TIMESTAMP (-3): (offset, timestamp) of the first record with the
        largest timestamp; (-1, -1) when the log holds no timestamped records."""
        best = None
        for seg in self._segments:
            if seg.max_timestamp >= 0 and (best is None or seg.max_timestamp > best.max_timestamp):
                best = seg
        if best is None:
            return -1, -1
        return best.max_timestamp_record() or (-1, -1)

    # -- leader epochs ---------------------------------------------------------------------

    def assign_epoch(self, epoch: int, start_offset: int) -> None:
        with self._lock:
            self._change_epochs(lambda epochs: epochs.assign(epoch, start_offset))

    def _change_epochs(self, change: Callable[[LeaderEpochCache], None]) -> None:
        if self._read_only is not None:
            with writes_discarded():  # in memory only: nothing is written to a full disk
                change(self._epochs)
        else:
            change(self._epochs)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (epoch, end offset); (-1, -1) if unknown."""
        return self._epochs.end_offset_for(epoch, self.state.leo)

    @property
    def latest_epoch(self) -> int | None:
        return self._epochs.latest_epoch

    def epoch_for_offset(self, offset: int) -> int | None:
        return self._epochs.epoch_for_offset(offset)

    def epoch_entries(self) -> list[tuple[int, int]]:
        return self._epochs.entries()

    # -- log start, truncation ---------------------------------------------------------------

    def maybe_increment_log_start_offset(self, new_start: int) -> bool:
        """Raise the log start (DeleteRecords) and drop whole segments below it."""
        with self._lock:
            self._check_writable()
            if new_start > self.state.hw or new_start < 0:
                raise ApiError(
                    ErrorCode.OFFSET_OUT_OF_RANGE,
                    f"cannot move log start to {new_start}: high watermark is {self.state.hw}",
                )
            if new_start <= self.state.log_start:
                return False
            self.state.log_start = new_start
            self._epochs.truncate_from_start(new_start)
            self.producer_state.on_log_start_offset_incremented(new_start)
            self._delete_old_segments(lambda seg, nxt: nxt is not None and nxt.base_offset <= self.state.log_start)
            return True

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: offset -1 means the high watermark. Returns the new low watermark."""
        self.maybe_increment_log_start_offset(self.state.hw if offset == -1 else offset)
        return self.state.log_start

    def truncate_to(self, offset: int) -> bool:
        """Drop everything at or after ``offset`` (follower divergence). True if anything changed."""
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        with self._lock:
            if offset >= self.state.leo:
                # Nothing to cut, but an epoch this broker assigned when it led, with no batch
                # written under it, must go: else the follower keeps sending it as its last
                # fetched epoch and the leader keeps answering with a diverging epoch.
                self._change_epochs(lambda epochs: epochs.truncate_from_end(self.state.leo))
                return False
            self._check_writable()
            if self._segments[0].base_offset > offset:
                self._truncate_fully_locked(offset)
                return True
            while self._bases[-1] > offset:
                seg = self._segments.pop()
                self._bases.pop()
                seg.delete_files()
            self._segments[-1].truncate_to(offset, self._time_ms())
            self.state.leo = offset
            self._after_truncation(offset)
            self.state.log_start = min(self.state.log_start, offset)
            self._rebuild_producer_state(offset)
            return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete all data and restart the log empty at ``offset``."""
        with self._lock:
            self._check_writable()
            self._truncate_fully_locked(offset)

    def _truncate_fully_locked(self, offset: int) -> None:
        for seg in self._segments:
            seg.delete_files()
        seg = self._new_segment(offset, fresh=True)
        self._segments = [seg]
        self._bases = [offset]
        self._dir_dirty = True
        self.state.leo = offset
        self.state.log_start = offset
        self._epochs.clear()
        self.producer_state.truncate_fully_and_start_at(offset)
        self._after_truncation(offset)
        self._recovery_point = offset
        self.state.hw = offset

    def _after_truncation(self, offset: int) -> None:
        self._offset_positions.clear()  # batches past the cut may be written differently again
        self._epochs.truncate_from_end(offset)
        self._recovery_point = min(self._recovery_point, offset)
        self._trunc_floor = offset if self._trunc_floor is None else min(self._trunc_floor, offset)
        self.state.hw = min(self.state.hw, offset)

    # -- retention ---------------------------------------------------------------------------

    def delete_retention_segments(self, now_ms: int) -> int:
        """Kafka's deleteOldSegments: retention.ms, retention.bytes, then log-start breaches.

        Only segments entirely below the high watermark go. An expired, non-empty
        active segment is rolled first so it can be deleted. Returns segments deleted.
        """
        with self._lock:
            if self.state.closed or self.state.offline or self._read_only is not None:
                return 0
            cfg = self.config
            deleted = 0
            if cfg.delete_enabled:
                if cfg.retention_ms >= 0:
                    deleted += self._delete_old_segments(
                        lambda seg, nxt: now_ms - seg.largest_timestamp > cfg.retention_ms
                    )
                if cfg.retention_bytes >= 0:
                    excess = self.size_in_bytes - cfg.retention_bytes
                    if excess > 0:

                        def over_size(seg: LogSegment, nxt: LogSegment | None) -> bool:
                            nonlocal excess
                            if excess - seg.size >= 0:
                                excess -= seg.size
                                return True
                            return False

                        deleted += self._delete_old_segments(over_size)
            deleted += self._delete_old_segments(
                lambda seg, nxt: nxt is not None and nxt.base_offset <= self.state.log_start
            )
            return deleted

    def _delete_old_segments(self, predicate: Callable[[LogSegment, LogSegment | None], bool]) -> int:
        segs = self._segments
        deletable: list[LogSegment] = []
        for i, seg in enumerate(segs):
            nxt = segs[i + 1] if i + 1 < len(segs) else None
            upper = nxt.base_offset if nxt is not None else self.state.leo
            if nxt is None and seg.size == 0:
                break
            if self.state.hw >= upper and predicate(seg, nxt):
                deletable.append(seg)
            else:
                break
        if not deletable:
            return 0
        if len(deletable) == len(segs):
            self._roll(self.state.leo)  # a log always keeps one segment
        n = len(deletable)
        del self._segments[:n]
        del self._bases[:n]
        # Unlinking large files can take long: renamed now, unlinked off the loop after
        # file.delete.delay.ms (take_due_deletions), as Kafka deletes segments asynchronously.
        doomed: list[str] = []
        for seg in deletable:
            doomed += seg.rename_for_deletion()
            self.producer_state.delete_snapshot(seg.base_offset)
        self._doomed_files.append((self._time_ms() + self.config.file_delete_delay_ms, doomed))
        first_base = self._segments[0].base_offset
        if first_base > self.state.log_start:
            self.state.log_start = first_base
            self._epochs.truncate_from_start(first_base)
            self.producer_state.on_log_start_offset_incremented(first_base)
        self._recovery_point = max(self._recovery_point, first_base)
        log.info("%s: deleted %d segment(s); log start is now %d", self.dir, n, self.state.log_start)
        return n

    def take_due_deletions(self, now_ms: int) -> list[str]:
        """Files of deleted segments whose file.delete.delay.ms has passed, for the caller to unlink."""
        if not self._doomed_files:
            return []
        with self._lock:
            due = [paths for when, paths in self._doomed_files if when <= now_ms]
            self._doomed_files = [(when, paths) for when, paths in self._doomed_files if when > now_ms]
        return [p for paths in due for p in paths]

    # -- durability --------------------------------------------------------------------------

    def flush(self, up_to_offset: int | None = None, *, now_ms: int | None = None) -> bool:
        """fsync data below ``up_to_offset`` (default: the LEO) and advance the recovery point.

        Safe to run on a worker thread concurrently with appends and reads; flushes
        of one log are serialised. Returns True if anything was synced.
        """
        with self._flush_lock:
            with self._lock:
                if self.state.closed or self._read_only is not None:  # read-only: nothing new to sync
                    return False
                target = self.state.leo if up_to_offset is None else min(up_to_offset, self.state.leo)
                need_dir = self._dir_dirty
                # Dirty flags are exact (set under this lock right after each write),
                # so only segments with unsynced bytes (or unwritten index entries) below the
                # target need an fsync.
                segs = [s for s in self._segments if s.needs_sync and s.base_offset < target]
                snapshots = self.producer_state.take_pending_syncs()
                records = bool(segs) or bool(snapshots) or target > self._recovery_point
                # A new log's files (and its dir) wait for the first flush that makes records
                # durable: until then a crash loses nothing that is not made or stated again
                # (see __init__), and a shutdown syncs nothing for partitions never written.
                if not records and (not need_dir or self._deferred.deferring):
                    self._last_flush_ms = now_ms if now_ms is not None else self._time_ms()
                    return False
                files: list[str] = []
                if records:
                    files = self._deferred.take()
                    need_dir = need_dir or bool(files)  # their names too
                for s in segs:
                    s.pin()
                self._dir_dirty = False
                self._trunc_floor = None
            try:
                with self._lock:
                    # Index entries held in memory go to their files with the appends held
                    # off; the fsyncs below then run without the lock.
                    for s in segs:
                        s.write_indexes()
                for path in files:
                    sync_file(path)
                for s in segs:
                    s.sync()
                for path in snapshots:
                    sync_file(path)
                if need_dir:
                    fsync_dir(self.dir)
            except BaseException as e:
                with self._lock:
                    self._deferred.restore(files)
                    self._dir_dirty = self._dir_dirty or need_dir
                    for s in segs:
                        s.unpin()
                if isinstance(e, OSError):
                    raise self._io_failed(e, "flush") from e
                raise
            with self._lock:
                for s in segs:
                    s.unpin()
                if self._trunc_floor is not None:
                    target = min(target, self._trunc_floor)
                if not self.state.closed and target > self._recovery_point:
                    self._recovery_point = min(target, self.state.leo)
                self._last_flush_ms = now_ms if now_ms is not None else self._time_ms()
            return True

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self, *, final: bool = True) -> None:
        """Close files (descriptors held by an in-flight flush close when it ends).

        ``final`` records and syncs the active segment's closing time-index entry,
        as Kafka does; pass False when the log is about to be deleted.
        """
        with self._lock:
            if self.state.closed:
                return
            if final and not self.state.offline and self._read_only is None:
                # A snapshot at the log end spares the next start-up any log scan.
                try:
                    self.producer_state.update_map_end_offset(self.state.leo)
                    self.producer_state.take_snapshot()
                except OSError:
                    log.exception("%s: producer snapshot at close failed", self.dir)
            self.state.closed = True
            final = final and not self.state.offline and self._read_only is None  # nothing more written there
            for seg in self._segments:
                try:
                    seg.close(final=final and seg is self._segments[-1])
                except OSError as e:
                    self._io_failed(e, "close")
                    seg.close(final=False)

    def delete(self) -> None:
        """Close the log and remove its directory with all data."""
        with self._lock:
            self.state.closed = True
            for seg in self._segments:
                seg.close(final=False)
            shutil.rmtree(self.dir, ignore_errors=True)

    def __repr__(self) -> str:
        return (
            f"Log({self.topic}-{self.partition}, start={self.state.log_start}, hw={self.state.hw}, "
            f"leo={self.state.leo}, segments={len(self._segments)})"
        )
