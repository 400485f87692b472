"""Log directory failure (Kafka's LogDirFailureChannel) and the storage I/O seam.

An I/O error on a log directory (ENOSPC, EIO, EROFS, EDQUOT, ...) takes the whole
directory offline until the broker restarts: its partitions answer KAFKA_STORAGE_ERROR,
nothing more is appended there, so no record written after a torn write can be
acknowledged; recovery at the next start cuts the torn tail at the last whole batch.

Segment and index writes, and the fsyncs of a log's files at a flush, go through
:data:`file_ops`, so tests can make them fail on demand with :class:`FaultyFileOps`.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rivulet.protocol.errors import ApiError, ErrorCode

log = logging.getLogger(__name__)
_fdatasync = getattr(os, "fdatasync", os.fsync)  # macOS has no fdatasync


class KafkaStorageError(ApiError):
    """A partition's log directory is offline (KAFKA_STORAGE_ERROR)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.KAFKA_STORAGE_ERROR, message)


class AllLogDirsOfflineError(OSError):
    """No log dir could be loaded: the broker cannot serve anything (Kafka halts then too)."""

    def __init__(self, offline: dict[str, str]) -> None:
        dirs = "; ".join(f"{d}: {why}" for d, why in offline.items())
        super().__init__(f"every log directory is offline ({dirs}); fix the fault (free space, remount "
                         f"read-write) and start again: recovery then resumes from what is on disk")


class LogDirFailureChannel:
    """The set of offline log dirs, and who to tell when one goes offline."""

    def __init__(self) -> None:
        self._offline: dict[str, str] = {}  # dir -> why
        self._lock = threading.Lock()
        self._listeners: list[Callable[[str], None]] = []

    def add_listener(self, listener: Callable[[str], None]) -> None:
        self._listeners.append(listener)

    def maybe_add_offline_log_dir(self, log_dir: str, message: str, error: BaseException | None = None) -> bool:
        """Mark ``log_dir`` offline; True the first time only (later failures are already known)."""
        with self._lock:
            if log_dir in self._offline:
                return False
            self._offline[log_dir] = f"{message}: {error}" if error is not None else message
        log.error("log directory %s is offline (%s); its partitions answer KAFKA_STORAGE_ERROR until restart",
                  log_dir, self._offline[log_dir])
        for listener in self._listeners:
            listener(log_dir)
        return True

    def is_offline(self, log_dir: str) -> bool:
        return log_dir in self._offline

    def offline_dirs(self) -> dict[str, str]:
        with self._lock:
            return dict(self._offline)


class FileOps:
    """The storage calls that may fail with a full or broken disk."""

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, pos: int) -> int:
        return os.pwrite(fd, data, pos)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def fdatasync(self, fd: int) -> None:
        _fdatasync(fd)


class FaultyFileOps(FileOps):
    """For tests: fail the next writes or fsyncs with ``err`` (ENOSPC, EIO, ...).

    ``short_write`` bytes are written by the failing pwrite before it fails, leaving a torn
    batch as a full disk does. ``after`` writes succeed first.
    """

    def __init__(self, err: int = errno.ENOSPC, *, short_write: int = 0, after: int = 0,
                 fail_fsync: bool = False) -> None:
        self.err = err
        self.short_write = short_write
        self.after = after
        self.fail_fsync = fail_fsync
        self.armed = True
        self.failures = 0

    def _fail(self) -> OSError:
        self.failures += 1
        return OSError(self.err, os.strerror(self.err))

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, pos: int) -> int:
        if not self.armed:
            return os.pwrite(fd, data, pos)
        if self.after > 0:
            self.after -= 1
            return os.pwrite(fd, data, pos)
        if self.short_write:
            n = os.pwrite(fd, memoryview(data)[:self.short_write], pos)
            self.short_write = 0
            if n:
                return n  # the next call, for the rest, fails
        raise self._fail()

    def fsync(self, fd: int) -> None:
        if self.armed and self.fail_fsync:
            raise self._fail()
        os.fsync(fd)

    def fdatasync(self, fd: int) -> None:
        self.fsync(fd)


file_ops: FileOps = FileOps()


def install(ops: FileOps) -> FileOps:
    """Replace the storage I/O seam (tests); returns the previous one."""
    global file_ops
    previous, file_ops = file_ops, ops
    return previous


# Errors that mean the disk has no room (for a start-up that then recovers read-only).
NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
class _ThreadState(threading.local):
    discard = False  # each thread's until writes_discarded sets it


_thread = _ThreadState()


@contextmanager
def writes_discarded() -> Iterator[None]:
    """Read-only recovery (a full disk): on this thread, storage writes are skipped and their
    effect kept in memory only, so nothing on disk changes and the next start recovers again."""
    previous = discarding()
    _thread.discard = True
    try:
        yield
    finally:
        _thread.discard = previous


def discarding() -> bool:
    return _thread.discard


def sync_file(path: str) -> None:
    """fsync a file written through descriptors since closed. One renamed or unlinked meanwhile
    (a deleted segment, a snapshot cleaned away) has nothing left to make durable."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        file_ops.fsync(fd)
    finally:
        os.close(fd)


def pwrite_all(fd: int, data: bytes | bytearray | memoryview, pos: int) -> None:
    if discarding():
        return
    view = memoryview(data)
    while view:
        n = file_ops.pwrite(fd, view, pos)
        view = view[n:]
        pos += n
