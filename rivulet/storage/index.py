"""Sparse offset and time indexes, in Kafka's on-disk format.

``.index``: entries of (relative offset int32, file position int32), big-endian.
``.timeindex``: entries of (timestamp int64, relative offset int32), big-endian.

Files are append-only and never pre-allocated, so they always look like the trimmed
index files Kafka leaves behind after a clean shutdown. Entries are mirrored in
``array`` objects for bisecting; the full arrays of an inactive segment are only
read on first lookup (Kafka's LazyIndex idea) so start-up touches just each file's
tail.

An index holds no descriptor between uses (Kafka maps its indexes and closes their files):
lookups read the arrays, and new entries wait in memory until ``commit`` writes them
(open, pwrite, close) at a flush, a roll, a truncation or a close, as Kafka's mapped pages
reach the disk only at a flush. After a crash an index may so lack its last entries; recovery
rebuilds the indexes of every segment from the recovery point on, and an index that is merely
short stays right below it: a lookup past its last entry scans on from there.
"""

from __future__ import annotations

import array
import bisect
import os
import struct
import sys

from rivulet.storage import log_dir_failure

_NATIVE_BIG = sys.byteorder == "big"
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_INT32_MAX = 0x7FFFFFFF


class CorruptIndexError(Exception):
    """An index file fails its sanity checks; the caller rebuilds it from the log."""


def read_file_at(path: str, spans: tuple[tuple[int, int], ...]) -> list[bytes]:
    """pread each (size, position) of ``spans`` through a descriptor held only meanwhile."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return [os.pread(fd, n, pos) for n, pos in spans]
    finally:
        os.close(fd)


def write_file_at(path: str, data: bytes | bytearray, pos: int, *, create: bool = False) -> None:
    """pwrite ``data`` through a descriptor held only meanwhile; without ``create`` a file
    deleted under us fails rather than coming back holding only this write."""
    if log_dir_failure.discarding():
        return
    fd = os.open(path, os.O_WRONLY | (os.O_CREAT if create else 0), 0o644)
    try:
        log_dir_failure.pwrite_all(fd, data, pos)
    finally:
        os.close(fd)


class _IndexFile:
    entry_size = 0

    def __init__(self, path: str, base_offset: int, max_index_bytes: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(0, max_index_bytes // self.entry_size)
        # The file exists from the start: recovery tells a missing index from an empty one.
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o644))
        self._closed = False
        self._detached = False  # the file is being deleted: nothing more goes to it
        self._loaded = False
        self._persisted = 0  # entries already written to the file
        self._pending = bytearray()
        self._count = 0  # entries including pending ones (valid before full load)
        self.dirty = False  # written since the last sync()

    # -- lifecycle --------------------------------------------------------------

    @property
    def needs_sync(self) -> bool:
        """Entries not yet written, or written and not yet synced."""
        return self.dirty or bool(self._pending)

    def sync(self) -> None:
        """fsync what ``commit`` wrote (a flusher thread may run this; it writes nothing)."""
        if self.dirty:
            self.dirty = False
            log_dir_failure.sync_file(self.path)

    def close(self) -> None:
        if self._closed:
            return
        self.commit()
        self._closed = True

    def commit(self) -> None:
        """Write the pending entries to the file in one pwrite."""
        if self._pending and not self._detached:
            try:
                write_file_at(self.path, self._pending, self._persisted * self.entry_size)
            except FileNotFoundError:
                # Gone with its log's dir (a deleted partition, closed under a flush that held
                # it): the entries stay in memory; a live segment missing its index would be
                # rebuilt at start-up anyway.
                self.detach(keep_entries=False)
                return
            self._persisted += len(self._pending) // self.entry_size
            self._pending.clear()
            self.dirty = True

    def detach(self, keep_entries: bool) -> None:
        """The file is about to be renamed or unlinked (segment deletion): write nothing more to
        it. With ``keep_entries``, readers still holding the segment find every entry in memory."""
        if keep_entries:
            try:
                self.ensure_loaded()
            except (CorruptIndexError, OSError):
                # No entries is a right index too: every lookup scans from the segment's start.
                self._clear_arrays()
                self._count = 0
                self._loaded = True
        self._pending.clear()
        self._persisted = self._count
        self._detached = True
        self.dirty = False

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        self._pending.clear()
        if not log_dir_failure.discarding() and (self._persisted or self._file_size()):
            self._truncate_file(0)
        self._persisted = 0
        self._count = 0
        self._clear_arrays()
        self._loaded = True

    def _truncate_file(self, entries: int) -> None:
        if not log_dir_failure.discarding() and not self._detached:
            os.truncate(self.path, entries * self.entry_size)
            self.dirty = True

    @property
    def entries(self) -> int:
        return self._count

    @property
    def is_full(self) -> bool:
        return self._count >= self.max_entries

    def _file_size(self) -> int:
        return os.stat(self.path).st_size

    def _truncate_entries(self, keep: int) -> None:
        if keep >= self._count:
            return
        self._del_arrays_from(keep)
        if keep >= self._persisted:  # only entries never written go
            del self._pending[(keep - self._persisted) * self.entry_size:]
        else:
            self._pending.clear()
            self._truncate_file(keep)
            self._persisted = keep
        self._count = keep

    def ensure_loaded(self) -> None:
        if not self._loaded:
            self._load()

    def truncate_to(self, offset: int) -> None:
        """Remove entries whose offset is >= ``offset``."""
        if self._count == 0:
            return
        self.ensure_loaded()
        self._truncate_entries(bisect.bisect_left(self._rel, offset - self.base_offset))

    # subclasses: both keep the entries' offsets relative to base_offset, ascending, in _rel
    _rel: array.array

    def _load(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _clear_arrays(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _del_arrays_from(self, n: int) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


class OffsetIndex(_IndexFile):
    entry_size = 8

    def __init__(self, path: str, base_offset: int, max_index_bytes: int) -> None:
        super().__init__(path, base_offset, max_index_bytes)
        self._rel = array.array("i")
        self._pos = array.array("i")
        self._last_rel = -1
        self._last_pos = 0

    def open_existing(self, log_size: int) -> None:
        """Cheap start-up check (Kafka's sanityCheck): length and last entry only."""
        size = self._file_size()
        if size % self.entry_size:
            raise CorruptIndexError(f"{self.path}: size {size} is not a multiple of 8")
        self._count = self._persisted = size // self.entry_size
        if self._count:
            rel, pos = _OFFSET_ENTRY.unpack(read_file_at(self.path, ((8, size - 8),))[0])
            if rel <= 0 or pos <= 0 or pos >= log_size:
                raise CorruptIndexError(
                    f"{self.path}: last entry ({rel}, {pos}) is invalid for a log of {log_size} bytes"
                )
            self._last_rel, self._last_pos = rel, pos
        else:
            self._loaded = True

    def _load(self) -> None:
        data = read_file_at(self.path, ((self._persisted * 8, 0),))[0]
        arr = array.array("i")
        arr.frombytes(data)
        if not _NATIVE_BIG:
            arr.byteswap()
        rel = arr[0::2]
        pos = arr[1::2]
        # Entries must be strictly increasing in both columns.
        if any(a >= b for a, b in zip(rel, rel[1:])) or any(a >= b for a, b in zip(pos, pos[1:])):
            raise CorruptIndexError(f"{self.path}: entries are not strictly increasing")
        if rel and rel[0] <= 0:
            raise CorruptIndexError(f"{self.path}: first entry has relative offset {rel[0]}")
        self._rel, self._pos = rel, pos
        self._loaded = True

    def _clear_arrays(self) -> None:
        self._rel = array.array("i")
        self._pos = array.array("i")
        self._last_rel, self._last_pos = -1, 0

    def _del_arrays_from(self, n: int) -> None:
        del self._rel[n:]
        del self._pos[n:]
        if n:
            self._last_rel, self._last_pos = self._rel[-1], self._pos[-1]
        else:
            self._last_rel, self._last_pos = -1, 0

    def last_entry(self) -> tuple[int, int]:
        """(offset, position) of the last entry, or (base_offset, 0) when empty."""
        if self._count == 0:
            return self.base_offset, 0
        return self.base_offset + self._last_rel, self._last_pos

    def append(self, offset: int, position: int) -> None:
        rel = offset - self.base_offset
        if rel <= self._last_rel or self._count >= self.max_entries:
            return  # sparse: a skipped entry only costs a slightly longer scan
        self.ensure_loaded()
        self._rel.append(rel)
        self._pos.append(position)
        self._pending += _OFFSET_ENTRY.pack(rel, position)
        self._count += 1
        self._last_rel, self._last_pos = rel, position

    def lookup(self, offset: int) -> int:
        """File position of the batch holding the largest indexed offset <= ``offset`` (0 if none)."""
        rel = offset - self.base_offset
        if self._count == 0 or rel < 0:
            return 0
        if rel >= self._last_rel:
            return self._last_pos
        self.ensure_loaded()
        i = bisect.bisect_right(self._rel, rel) - 1
        return self._pos[i] if i >= 0 else 0

    def can_append_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= _INT32_MAX


class TimeIndex(_IndexFile):
    entry_size = 12

    def __init__(self, path: str, base_offset: int, max_index_bytes: int) -> None:
        super().__init__(path, base_offset, max_index_bytes)
        self._ts = array.array("q")
        self._rel = array.array("i")
        self._last_ts = -1
        self._last_rel = 0

    def open_existing(self, next_offset: int) -> None:
        size = self._file_size()
        if size % self.entry_size:
            raise CorruptIndexError(f"{self.path}: size {size} is not a multiple of 12")
        self._count = self._persisted = size // self.entry_size
        if self._count:
            last, first = read_file_at(self.path, ((12, size - 12), (12, 0)))
            ts, rel = _TIME_ENTRY.unpack(last)
            first_ts, first_rel = _TIME_ENTRY.unpack(first)
            if (
                rel < 0
                or self.base_offset + rel >= max(next_offset, self.base_offset + 1)
                or ts < first_ts
                or rel < first_rel
                or first_ts < 0
            ):
                raise CorruptIndexError(f"{self.path}: last entry ({ts}, {rel}) is invalid")
            self._last_ts, self._last_rel = ts, rel
        else:
            self._loaded = True

    def _load(self) -> None:
        data = read_file_at(self.path, ((self._persisted * 12, 0),))[0]
        ts = array.array("q")
        rel = array.array("i")
        for t, r in _TIME_ENTRY.iter_unpack(data):
            ts.append(t)
            rel.append(r)
        if any(a >= b for a, b in zip(ts, ts[1:])) or any(a > b for a, b in zip(rel, rel[1:])):
            raise CorruptIndexError(f"{self.path}: entries are not monotonic")
        self._ts, self._rel = ts, rel
        self._loaded = True

    def _clear_arrays(self) -> None:
        self._ts = array.array("q")
        self._rel = array.array("i")
        self._last_ts, self._last_rel = -1, 0

    def _del_arrays_from(self, n: int) -> None:
        del self._ts[n:]
        del self._rel[n:]
        if n:
            self._last_ts, self._last_rel = self._ts[-1], self._rel[-1]
        else:
            self._last_ts, self._last_rel = -1, 0

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base_offset) when empty."""
        if self._count == 0:
            return -1, self.base_offset
        return self._last_ts, self.base_offset + self._last_rel

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Add an entry only when the timestamp grows (entries track the max so far)."""
        if timestamp <= self._last_ts:
            return
        if not skip_full_check and self._count >= self.max_entries:
            return
        rel = offset - self.base_offset
        if self._count and rel < self._last_rel:
            return
        self.ensure_loaded()
        self._ts.append(timestamp)
        self._rel.append(rel)
        self._pending += _TIME_ENTRY.pack(timestamp, rel)
        self._count += 1
        self._last_ts, self._last_rel = timestamp, rel

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """Largest entry with timestamp <= ``timestamp``, else (-1, base_offset)."""
        if self._count == 0:
            return -1, self.base_offset
        if timestamp >= self._last_ts:
            return self._last_ts, self.base_offset + self._last_rel
        self.ensure_loaded()
        i = bisect.bisect_right(self._ts, timestamp) - 1
        if i < 0:
            return -1, self.base_offset
        return self._ts[i], self.base_offset + self._rel[i]
