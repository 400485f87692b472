"""A span of a log segment file that travels to a socket without entering Python's memory.

The storage layer hands one out in place of the bytes a Fetch would return (Kafka's
FileRecords slice), the codec passes it through as an out-of-line part of the response, and
the socket layer sends it with ``os.sendfile``, or reads it (``read``) where it cannot.
"""

from __future__ import annotations

import os


class FileRegion:
    """``size`` bytes at ``position`` of a file, held open through a descriptor of its own: a
    segment deleted, compacted away or closed meanwhile is still read whole, as it was.

    It also carries what the broker would otherwise read from the bytes: the offset after its
    last batch (``next_offset``) and the number of records in it (``record_count``)."""

    __slots__ = ("fd", "position", "size", "next_offset", "record_count")

    def __init__(self, fd: int, position: int, size: int, next_offset: int, record_count: int) -> None:
        self.fd = fd  # owned: closed by close(), or when the region is dropped unsent
        self.position = position
        self.size = size
        self.next_offset = next_offset
        self.record_count = record_count

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
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        # A response dropped unsent (its connection closed first) must not leak a descriptor.
        if self.fd >= 0:
            try:
                self.close()
            except OSError:
                pass
