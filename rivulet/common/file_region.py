"""A span of a log segment file that travels to a socket without entering Python's memory.

The storage layer hands one out in place of the bytes a Fetch would return (Kafka's
FileRecords slice), the codec passes it through as an out-of-line part of the response, and
the socket layer sends it with ``os.sendfile``, or reads it (``read``) where it cannot.
"""

from __future__ import annotations

import os
from collections.abc import Callable


class FileRegion:
    """``size`` bytes at ``position`` of a file, held open while the region lives: a segment
    deleted, compacted away or closed meanwhile is still read whole, as it was.

    The descriptor is either the region's own (closed by ``close``) or, with ``release``,
    borrowed from a segment pinned open for it: ``close`` then calls ``release`` once, from
    whichever thread sent the region. A Fetch of a thousand partitions so costs no
    descriptors of its own, which at ten thousand partitions the process does not have.

    It also carries what the broker would otherwise read from the bytes: the offset after its
    last batch (``next_offset``) and the number of records in it (``record_count``)."""

    __slots__ = ("fd", "position", "size", "next_offset", "record_count", "_release")

    def __init__(self, fd: int, position: int, size: int, next_offset: int, record_count: int,
                 release: Callable[[], None] | None = None) -> None:
        self.fd = fd  # closed by close() (or released), or when the region is dropped unsent
        self.position = position
        self.size = size
        self.next_offset = next_offset
        self.record_count = record_count
        self._release = release

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"FileRegion(fd={self.fd}, position={self.position}, size={self.size})"

    def read(self) -> bytes:
        """The bytes, for a connection that cannot send from the file (TLS); closes the region.
        Raises EOFError when the file was truncated under it: a response frame's size is
        already fixed, so its connection can only be closed."""
        try:
            data = os.pread(self.fd, self.size, self.position)
        finally:
            self.close()
        if len(data) != self.size:
            raise EOFError(f"{self.size - len(data)} bytes of a file region were truncated away")
        return data

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd < 0:
            return
        release, self._release = self._release, None
        if release is None:
            os.close(fd)
        else:
            release()

    def __del__(self) -> None:
        # A response dropped unsent (its connection closed first) must not leak a descriptor.
        if self.fd >= 0:
            try:
                self.close()
            except OSError:
                pass
