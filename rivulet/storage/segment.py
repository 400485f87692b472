"""One log segment: ``<base>.log`` plus its ``.index``, ``.timeindex`` and ``.txnindex``.

Not thread-safe by itself: the owning :class:`~rivulet.storage.log.Log` serialises
access. The one exception is :meth:`LogSegment.sync`, which a flusher thread runs
while the segment is pinned; a pinned segment defers closing its descriptor until
the last pin is released, so an fsync never races a close.

A segment holds one descriptor, its ``.log``'s: the indexes keep their entries in memory and
open their files only to write or sync them (see :mod:`rivulet.storage.index`).
"""

from __future__ import annotations

import itertools
import logging
import os
import random
import struct
from collections.abc import Callable, Sequence

from rivulet.common.file_region import FileRegion
from rivulet.protocol import records as rec
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.protocol.records import LOCATOR, LOG_OVERHEAD, MIN_BATCH_LENGTH, BatchHeader
from rivulet.storage import log_dir_failure
from rivulet.storage.batches import InvalidBatch, iter_headers, iter_valid_batches
from rivulet.storage.index import CorruptIndexError, OffsetIndex, TimeIndex, write_file_at

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
_EMPTY = b""
_LOCATOR_SIZE = LOCATOR.size
_COUNT = struct.Struct(">i")
# The zero-copy walk reads batch headers in chunks of this size, never the records between.
_HEADER_CHUNK = 64 * 1024
# Its first read, before it knows the batches' size: the index entry it starts from is at most
# about index.interval.bytes before the wanted batch, so one page covers a walk over small
# batches to it, and of large ones (the consume rows': about 1 MB each) it copies a page
# instead of a whole chunk.
_FIRST_HEADER_CHUNK = 4096

# (position in the appended buffer, last offset, max timestamp, size) per batch.
AppendEntry = tuple[int, int, int, int]
EpochCallback = Callable[[int, int], None]
# Recovery hands every valid batch (its header, its bytes) to producer-state rebuilding.
BatchCallback = Callable[[BatchHeader, memoryview], None]

# Kafka's AbortedTxn: version int16 (0), producerId, firstOffset, lastOffset, lastStableOffset.
_ABORTED_TXN = struct.Struct(">hqqqq")
ABORTED_TXN_SIZE = _ABORTED_TXN.size  # 34
AbortedTxn = tuple[int, int, int, int]  # (producer id, first offset, last offset, last stable offset)


class TransactionIndex:
    """``<base>.txnindex``: the aborted transactions whose ABORT marker is in this segment,
    in Kafka's format. Created on the first entry; entries are cached once read. Each entry
    (one an aborted transaction, so rare) is written through a descriptor opened for it."""

    def __init__(self, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._entries: list[AbortedTxn] | None = None
        self._detached = False
        self.dirty = False

    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            self._entries = self._read()
        return self._entries

    def _read(self) -> list[AbortedTxn]:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return []
        if len(data) % ABORTED_TXN_SIZE:
            raise CorruptIndexError(f"{self.path}: size {len(data)} is not a multiple of {ABORTED_TXN_SIZE}")
        out = []
        for pos in range(0, len(data), ABORTED_TXN_SIZE):
            version, pid, first, last, lso = _ABORTED_TXN.unpack_from(data, pos)
            if version != 0:
                raise CorruptIndexError(f"{self.path}: unknown aborted transaction version {version}")
            out.append((pid, first, last, lso))
        return out

    def sanity_check(self) -> None:
        self._entries = None
        _ = self.entries

    def append(self, producer_id: int, first_offset: int, last_offset: int, last_stable_offset: int) -> None:
        entries = self.entries
        if entries and entries[-1][2] >= last_offset:
            raise ValueError(f"the last offset of appended aborted transaction ({last_offset}) must exceed "
                             f"{entries[-1][2]} in {self.path}")
        if not self._detached:
            write_file_at(self.path, _ABORTED_TXN.pack(0, producer_id, first_offset, last_offset, last_stable_offset),
                          len(entries) * ABORTED_TXN_SIZE, create=True)
        entries.append((producer_id, first_offset, last_offset, last_stable_offset))
        self.dirty = True

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """Aborted transactions overlapping [fetch_offset, upper_bound_offset); True when no later
        segment can hold more (an entry's LSO reached the bound)."""
        out = []
        for e in self.entries:
            if e[2] >= fetch_offset and e[1] < upper_bound_offset:
                out.append(e)
            if e[3] >= upper_bound_offset:
                return out, True
        return out, False

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose marker is at or after ``offset``."""
        entries = self.entries
        keep = 0
        while keep < len(entries) and entries[keep][2] < offset:
            keep += 1
        if keep == len(entries):
            return
        del entries[keep:]
        if not log_dir_failure.discarding() and not self._detached and os.path.exists(self.path):
            os.truncate(self.path, keep * ABORTED_TXN_SIZE)
            self.dirty = True

    def reset(self) -> None:
        self._entries = []
        if not log_dir_failure.discarding() and not self._detached and os.path.exists(self.path):
            os.truncate(self.path, 0)
            self.dirty = True

    def sync(self) -> None:
        if self.dirty:
            self.dirty = False
            log_dir_failure.sync_file(self.path)

    def detach(self, keep_entries: bool) -> None:
        """As ``_IndexFile.detach``: the file is about to go; readers keep the entries in memory."""
        if keep_entries:
            try:
                _ = self.entries
            except (CorruptIndexError, OSError):
                self._entries = []
        self._detached = True
        self.dirty = False


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


# Every segment made in this process takes the next number. A waiting Fetch takes one too when
# it starts waiting: a segment numbered after it was rolled since (see Log.segment_made_since).
_serials = itertools.count()


def segment_serial() -> int:
    """A number below every segment's made from now on (``itertools.count`` is atomic under the
    GIL: segments are also made on worker threads)."""
    return next(_serials)


class LogSegment:
    def __init__(
        self,
        dir: str,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_bytes: int,
        jitter_ms: int,
        created_ms: int,
        fresh: bool,
    ) -> None:
        self.dir = dir
        self.base_offset = base_offset
        self.serial = next(_serials)
        self.log_path = os.path.join(dir, segment_file_name(base_offset, LOG_SUFFIX))
        self.index_path = os.path.join(dir, segment_file_name(base_offset, INDEX_SUFFIX))
        self.time_index_path = os.path.join(dir, segment_file_name(base_offset, TIME_INDEX_SUFFIX))
        self.txn_index_path = os.path.join(dir, segment_file_name(base_offset, TXN_INDEX_SUFFIX))
        self.indexes_existed = os.path.exists(self.index_path) and os.path.exists(self.time_index_path)
        if fresh:
            for p in (self.index_path, self.time_index_path, self.txn_index_path):
                _unlink(p)
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | (os.O_TRUNC if fresh else 0), 0o644)
        self.offset_index = OffsetIndex(self.index_path, base_offset, max_index_bytes)
        self.time_index = TimeIndex(self.time_index_path, base_offset, max_index_bytes)
        self.txn_index = TransactionIndex(self.txn_index_path, base_offset)
        self.size = os.fstat(self.fd).st_size
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset  # last offset of the batch holding it
        self.index_interval_bytes = index_interval_bytes
        self.bytes_since_last_index_entry = 0
        self.created_ms = created_ms
        self.roll_jitter_ms = random.randrange(jitter_ms) if jitter_ms > 0 else 0
        self._rolling_ts: int | None = None
        self._rolling_known = fresh
        self._indexes_ready = fresh
        self.dirty = False  # log bytes written since the last sync
        self._pins = 0
        self._close_pending = False
        self.closed = False

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, size={self.size}, next={self.next_offset})"

    # -- loading -------------------------------------------------------------------

    def load_clean(self) -> bool:
        """Trust a segment below the recovery point: only cheap index checks.

        Returns False when the indexes are missing or inconsistent; the caller
        then runs :meth:`recover` to rebuild them.
        """
        if not self.indexes_existed:
            log.warning("%s: index files missing, rebuilding", self.log_path)
            return False
        try:
            self.offset_index.open_existing(self.size)
            entry_offset, pos = self.offset_index.last_entry()
            next_offset = self.base_offset
            end = pos
            tail_ts, tail_off = -1, self.base_offset
            for bpos, b in iter_headers(self.fd, pos, self.size):
                if bpos == pos and self.offset_index.entries and b.last_offset != entry_offset:
                    raise CorruptIndexError(f"{self.index_path}: last entry does not match the log")
                next_offset = b.next_offset
                end = bpos + b.size
                if b.max_timestamp > tail_ts:
                    tail_ts, tail_off = b.max_timestamp, b.last_offset
            if end != self.size:
                raise CorruptIndexError(f"{self.log_path}: batches end at {end}, file at {self.size}")
            self.next_offset = next_offset
            self.time_index.open_existing(next_offset)
            self.txn_index.sanity_check()
        except CorruptIndexError as e:
            log.warning("%s; rebuilding indexes", e)
            return False
        self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last_entry()
        if tail_ts > self.max_timestamp:
            # A time index short of its closing entry (entries reach the file at a flush or a
            # roll): the batches past the last offset-index entry, just read, hold the rest.
            self.max_timestamp, self.offset_of_max_timestamp = tail_ts, tail_off
        self.bytes_since_last_index_entry = self.size - self.offset_index.last_entry()[1]
        return True

    def refresh_max_timestamp(self) -> None:
        """Scan past the last time-index entry (the active segment's tail is not indexed)."""
        self.ensure_indexes()
        ts, off = self.time_index.last_entry()
        start = self.offset_index.lookup(off) if ts >= 0 else 0
        self.max_timestamp, self.offset_of_max_timestamp = ts, off
        for _, b in iter_headers(self.fd, start, self.size):
            if b.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = b.max_timestamp, b.last_offset

    def ensure_indexes(self) -> None:
        """Materialise both indexes; a corrupt one is rebuilt from the log."""
        if self._indexes_ready:
            return
        try:
            self.offset_index.ensure_loaded()
            self.time_index.ensure_loaded()
        except CorruptIndexError as e:
            log.warning("%s; rebuilding indexes", e)
            self.recover()
        self._indexes_ready = True

    def recover(self, on_batch_epoch: EpochCallback | None = None, on_batch: BatchCallback | None = None) -> int:
        """Re-validate every batch (length, magic, CRC, offsets), rebuild both
        indexes and cut the file at the first invalid byte. Returns bytes truncated.

        With ``on_batch`` (producer-state replay) the caller rebuilds the transaction index
        too, so it starts empty; otherwise it only loses entries past the truncation."""
        oi, ti = self.offset_index, self.time_index
        oi.reset()
        ti.reset()
        if on_batch is not None:
            self.txn_index.reset()
        valid = 0
        last_index_entry = 0
        max_ts, off_max = -1, self.base_offset
        next_offset = self.base_offset
        interval = self.index_interval_bytes
        try:
            for bpos, b, view in iter_valid_batches(self.fd, 0, self.size):
                if b.base_offset < next_offset:
                    raise InvalidBatch(bpos, f"offset {b.base_offset} goes backwards")
                if not oi.can_append_offset(b.last_offset):
                    raise InvalidBatch(bpos, f"offset {b.last_offset} overflows the segment")
                if b.max_timestamp > max_ts:
                    max_ts, off_max = b.max_timestamp, b.last_offset
                if valid - last_index_entry > interval:
                    oi.append(b.last_offset, valid)
                    ti.maybe_append(max_ts, off_max)
                    last_index_entry = valid
                valid += b.size
                next_offset = b.next_offset
                if on_batch_epoch is not None and b.partition_leader_epoch >= 0:
                    on_batch_epoch(b.partition_leader_epoch, b.base_offset)
                if on_batch is not None:
                    on_batch(b, view)
        except InvalidBatch as e:
            log.warning("%s: invalid data at byte %s (%s)", self.log_path, e.args[0], e.args[1])
        truncated = self.size - valid
        if truncated:
            log.warning("%s: truncating %d bytes during recovery", self.log_path, truncated)
            if not log_dir_failure.discarding():  # read-only recovery: cut in memory only
                os.ftruncate(self.fd, valid)
            self.size = valid
        # Recovered bytes may still sit only in the page cache: let the next flush sync them.
        self.dirty = True
        self.next_offset = next_offset
        self.max_timestamp, self.offset_of_max_timestamp = max_ts, off_max
        self.bytes_since_last_index_entry = valid - last_index_entry
        ti.maybe_append(max_ts, off_max, skip_full_check=True)
        if on_batch is None:
            try:
                self.txn_index.truncate_to(next_offset)
            except CorruptIndexError:
                self.txn_index.reset()
        oi.commit()
        ti.commit()
        self._rolling_known = False
        self._indexes_ready = True
        return truncated

    # -- writes ----------------------------------------------------------------------

    def append(self, buf: bytes | bytearray | memoryview, entries: Sequence[AppendEntry]) -> None:
        """Write ``buf`` (whole batches, offsets already final) and index them."""
        start = self.size
        log_dir_failure.pwrite_all(self.fd, buf, start)
        self.size = start + len(buf)
        self.dirty = True
        if start == 0:
            self._rolling_ts, self._rolling_known = entries[0][2], True
        oi, ti = self.offset_index, self.time_index
        max_ts, off_max = self.max_timestamp, self.offset_of_max_timestamp
        interval = self.index_interval_bytes
        since = self.bytes_since_last_index_entry
        for pos, last, ts, size in entries:
            if ts > max_ts:
                max_ts, off_max = ts, last
            if since > interval:
                oi.append(last, start + pos)
                ti.maybe_append(max_ts, off_max)
                since = 0
            since += size
        self.bytes_since_last_index_entry = since
        self.max_timestamp, self.offset_of_max_timestamp = max_ts, off_max
        self.next_offset = entries[-1][1] + 1
        # The new index entries stay in memory until write_indexes (a flush or a roll).

    def on_become_inactive(self) -> None:
        """Record the final max timestamp, as Kafka does when a segment is rolled or closed."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, skip_full_check=True)
        self.write_indexes()

    def write_indexes(self) -> None:
        """Write the index entries held in memory to their files (under the log's lock: a
        flush runs it before ``sync``, which then only fsyncs)."""
        self.offset_index.commit()
        self.time_index.commit()

    def truncate_to(self, offset: int, now_ms: int) -> int:
        """Remove every batch whose last offset is >= ``offset``. Returns bytes removed."""
        self.ensure_indexes()
        pos = self.position_of(offset)
        if pos is None:
            return 0
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        removed = self.size - pos
        os.ftruncate(self.fd, pos)
        self.size = pos
        self.dirty = True
        entry_pos = self.offset_index.last_entry()[1]
        self.next_offset = self.base_offset
        for _, b in iter_headers(self.fd, entry_pos, self.size):
            self.next_offset = b.next_offset
        if pos == 0:
            self.created_ms = now_ms
            self._rolling_ts, self._rolling_known = None, True
        self.bytes_since_last_index_entry = self.size - entry_pos
        self.refresh_max_timestamp()
        return removed

    # -- reads -------------------------------------------------------------------------

    def position_of(self, offset: int) -> int | None:
        """Position of the first batch whose last offset is >= ``offset``."""
        for bpos, b in iter_headers(self.fd, self.offset_index.lookup(offset), self.size):
            if b.last_offset >= offset:
                return bpos
        return None

    def read(
        self, target: int, max_bytes: int, bound: int, min_one_batch: bool, slack: int,
    ) -> tuple[bytes | memoryview, int] | None:
        """Whole batches starting with the one holding ``target``.

        Returns None when no batch here reaches ``target`` (look in the next
        segment), else (data, position of the first batch); data may be empty when
        the first batch lies at/after ``bound`` or exceeds ``max_bytes``.
        """
        if target >= self.next_offset:
            return None
        self.ensure_indexes()
        fd, end = self.fd, self.size
        pread = os.pread
        unpack = LOCATOR.unpack_from
        window = max_bytes + slack
        bpos = self.offset_index.lookup(target)
        buf = pread(fd, min(end - bpos, window), bpos)
        o = 0
        # Locate the batch holding ``target``: one pread normally covers it.
        while True:
            if o + _LOCATOR_SIZE > len(buf):
                q = bpos + o
                if end - q < _LOCATOR_SIZE:
                    return None
                buf = pread(fd, min(end - q, window), q)
                bpos, o = q, 0
            base, length, lod = unpack(buf, o)
            if length < MIN_BATCH_LENGTH:
                raise ApiError(ErrorCode.CORRUPT_MESSAGE, f"{self.log_path}: bad batch length at {bpos + o}")
            if base + lod >= target:
                break
            o += length + LOG_OVERHEAD
        start = bpos + o
        first = length + LOG_OVERHEAD
        if base >= bound or start + first > end:
            return _EMPTY, start
        if first > max_bytes:
            if not min_one_batch:
                return _EMPTY, start
            if o + first <= len(buf):
                return memoryview(buf)[o : o + first], start
            return pread(fd, first, start), start
        need = min(max_bytes, end - start)
        if o + need > len(buf):
            buf = pread(fd, need, start)
            o = 0
        limit = o + need
        q = o + first
        # Walk headers only; records are never touched.
        while q + _LOCATOR_SIZE <= limit:
            base, length, _ = unpack(buf, q)
            if base >= bound or length < MIN_BATCH_LENGTH:
                break
            nq = q + length + LOG_OVERHEAD
            if nq > limit:
                break
            q = nq
        if o == 0 and q == len(buf):
            return buf, start
        return memoryview(buf)[o:q], start

    def read_region(
        self, target: int, max_bytes: int, bound: int, min_one_batch: bool, zero_copy_min: int,
        hold: Callable[[LogSegment], Callable[[], None]],
    ) -> tuple[bytes | FileRegion, int] | None:
        """``read``'s choice of batches from their headers alone, handed out as a FileRegion
        of this segment's descriptor when at least ``zero_copy_min`` bytes (else bytes): a
        Fetch's records never pass through Python. ``hold(segment)`` pins the segment open and
        returns what unpins it, which the region calls when it is closed."""
        if target >= self.next_offset:
            return None
        self.ensure_indexes()
        fd, end = self.fd, self.size
        chunk, chunk_pos, last_length = _EMPTY, 0, -1

        def header(q: int) -> tuple[int, int, int, int] | None:
            """(base offset, length, last offset delta, record count) of the batch at ``q``."""
            nonlocal chunk, chunk_pos, last_length
            if q + rec.HEADER_SIZE > end:
                return None
            if q < chunk_pos or q + rec.HEADER_SIZE > chunk_pos + len(chunk):
                # Small batches: a chunk holds many headers. Large ones: only the header, or
                # the walk would read nearly every byte it is meant to leave to sendfile.
                if last_length < 0:
                    want = _FIRST_HEADER_CHUNK
                elif last_length > _HEADER_CHUNK // 8:
                    want = rec.HEADER_SIZE
                else:
                    want = _HEADER_CHUNK
                chunk, chunk_pos = os.pread(fd, min(end - q, want), q), q
            o = q - chunk_pos
            base, length, lod = LOCATOR.unpack_from(chunk, o)
            last_length = length
            return base, length, lod, _COUNT.unpack_from(chunk, o + rec.RECORDS_COUNT_OFFSET)[0]

        q = self.offset_index.lookup(target)
        while True:
            h = header(q)
            if h is None:
                return None
            base, length, lod, count = h
            if length < MIN_BATCH_LENGTH:
                raise ApiError(ErrorCode.CORRUPT_MESSAGE, f"{self.log_path}: bad batch length at {q}")
            if base + lod >= target:
                break
            q += length + LOG_OVERHEAD
        start = q
        first = length + LOG_OVERHEAD
        if base >= bound or start + first > end:
            return _EMPTY, start
        if first > max_bytes and not min_one_batch:
            return _EMPTY, start
        q, next_offset, records = start + first, base + lod + 1, count
        limit = start + min(max_bytes, end - start)
        while first <= max_bytes:
            h = header(q)
            if h is None:
                break
            base, length, lod, count = h
            nq = q + length + LOG_OVERHEAD
            if base >= bound or length < MIN_BATCH_LENGTH or nq > limit:
                break
            q, next_offset, records = nq, base + lod + 1, records + count
        size = q - start
        if size >= zero_copy_min:
            return FileRegion(fd, start, size, next_offset, records, hold(self)), start
        return os.pread(fd, size, start), start

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> tuple[int, int] | None:
        """First record with timestamp >= ``timestamp`` and offset >= ``start_offset``."""
        self.ensure_indexes()
        _, indexed_offset = self.time_index.lookup(timestamp)
        pos = self.offset_index.lookup(max(indexed_offset, start_offset))
        for bpos, b in iter_headers(self.fd, pos, self.size):
            if b.max_timestamp < timestamp or b.last_offset < start_offset:
                continue
            try:
                records = rec.record_offsets_and_timestamps(os.pread(self.fd, b.size, bpos))
            except Exception as e:  # undecodable (e.g. codec missing): batch granularity
                log.debug("cannot decode batch at %d for timestamp search: %s", bpos, e)
                return max(b.base_offset, start_offset), b.max_timestamp
            for off, ts in records:
                if ts >= timestamp and off >= start_offset:
                    return off, ts
        return None

    def max_timestamp_record(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record carrying this segment's max timestamp."""
        if self.max_timestamp < 0:
            return None
        self.ensure_indexes()
        target = self.offset_of_max_timestamp
        for bpos, b in iter_headers(self.fd, self.offset_index.lookup(target), self.size):
            if b.last_offset < target:
                continue
            try:
                records = rec.record_offsets_and_timestamps(os.pread(self.fd, b.size, bpos))
            except Exception:
                break
            for off, ts in records:
                if ts == self.max_timestamp:
                    return off, ts
            break
        return target, self.max_timestamp

    # -- time-based roll and retention -------------------------------------------------

    def time_waited_for_roll(self, now_ms: int, max_timestamp_in_append: int) -> int:
        """Kafka's rule: by record timestamps when the first batch has one, else wall time."""
        if not self._rolling_known:
            self._rolling_known = True
            self._rolling_ts = None
            for _, b in iter_headers(self.fd, 0, self.size):
                self._rolling_ts = b.max_timestamp
                break
        if self._rolling_ts is not None and self._rolling_ts >= 0:
            return max_timestamp_in_append - self._rolling_ts
        return now_ms - self.created_ms

    @property
    def largest_timestamp(self) -> int:
        """Max record timestamp, or the file's mtime when records carry none (as Kafka)."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        try:
            return int(os.stat(self.log_path).st_mtime * 1000)
        except FileNotFoundError:
            return -1

    # -- durability and lifecycle ----------------------------------------------------------

    @property
    def needs_sync(self) -> bool:
        return self.dirty or self.offset_index.needs_sync or self.time_index.needs_sync or self.txn_index.dirty

    def pin(self) -> None:
        self._pins += 1

    def unpin(self) -> None:
        self._pins -= 1
        if self._pins == 0 and self._close_pending:
            self._close_now()

    def sync(self) -> None:
        """fsync the log and dirty indexes; runs on a flusher thread while pinned."""
        if self.closed:
            return
        if self.dirty:
            log_dir_failure.file_ops.fdatasync(self.fd)
            self.dirty = False
        self.offset_index.sync()
        self.time_index.sync()
        self.txn_index.sync()

    def close(self, *, final: bool = True) -> None:
        if self.closed or self._close_pending:
            return
        if final:
            # Persist the closing time-index entry now, so a clean start-up sees it.
            self.on_become_inactive()
            self.offset_index.sync()
            self.time_index.sync()
        if self._pins:
            self._close_pending = True
        else:
            self._close_now()

    def _close_now(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._close_pending = False
        self.offset_index.close()
        self.time_index.close()
        os.close(self.fd)
        self.fd = -1

    def delete_files(self) -> None:
        """Unlink the files now; descriptors close when no flush holds them."""
        self._close_for_deletion()
        for p in self._paths():
            _unlink(p)

    def rename_for_deletion(self) -> list[str]:
        """Kafka's asynchronous segment deletion: close, rename each file to ``*.deleted`` (quick,
        on the loop) and return the new paths for a worker thread to unlink later; start-up
        removes any left over."""
        self._close_for_deletion()
        doomed = []
        for p in self._paths():
            try:
                os.rename(p, p + ".deleted")
            except FileNotFoundError:
                continue
            doomed.append(p + ".deleted")
        return doomed

    def _close_for_deletion(self) -> None:
        # The .log's descriptor closes when no pin (a flush, the cleaner) holds it; what the
        # holders look up in the indexes is then read from memory, the files being gone.
        readers = self._pins > 0 and not self.closed
        self.offset_index.detach(readers)
        self.time_index.detach(readers)
        self.txn_index.detach(readers)
        self.close(final=False)

    def _paths(self) -> tuple[str, ...]:
        return (self.log_path, self.index_path, self.time_index_path, self.txn_index_path)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
