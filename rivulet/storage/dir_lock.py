"""The `.lock` file that keeps two brokers off one log directory, as Kafka's LogManager takes.

An advisory ``flock`` is held for the life of the process, so a kill -9 releases it; the
holder's PID is written into the file only to name it in the second broker's error.
"""

from __future__ import annotations

import errno
import fcntl
import os

LOCK_FILE = ".lock"


class LogDirLockedError(OSError):
    """Another process holds a log directory: start-up must stop before writing anything."""


class DirLock:
    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, LOCK_FILE)
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = _read_pid(fd)
            os.close(fd)
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            who = f"process {holder}" if holder else "another process"
            raise LogDirLockedError(
                f"Failed to acquire lock on file {LOCK_FILE} in {os.path.dirname(self.path)}: "
                f"a broker in {who} is using this directory") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        return int(text) if text.isdigit() else None
    except OSError:
        return None
