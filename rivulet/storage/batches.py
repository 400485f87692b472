"""Walking the batches of a segment file: positional reads over the batch format that
:mod:`rivulet.protocol.records` defines.

Only the fixed header is parsed; record bodies are left to the format module.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from rivulet.protocol import records as rec
from rivulet.protocol.records import HEADER_SIZE, BatchHeader


def iter_headers(fd: int, start: int, end: int, chunk: int = 65536) -> Iterator[tuple[int, BatchHeader]]:
    """(file position, header) of each batch in ``[start, end)``, without reading record bodies.

    Stops quietly at a torn or implausible batch; callers that must tell corruption
    apart from a clean end use :func:`iter_valid_batches` instead.
    """
    pos = start
    buf = b""
    buf_pos = start
    while end - pos >= HEADER_SIZE:
        off = pos - buf_pos
        if off + HEADER_SIZE > len(buf):
            buf = os.pread(fd, min(chunk, end - pos), pos)
            buf_pos, off = pos, 0
            if len(buf) < HEADER_SIZE:
                return
        h = rec.parse_batch_header(buf, off)
        if h.batch_length < rec.MIN_BATCH_LENGTH or pos + h.size > end:
            return
        yield pos, h
        pos += h.size


class InvalidBatch(Exception):
    pass


def iter_valid_batches(
    fd: int, start: int, end: int, chunk: int = 4 << 20
) -> Iterator[tuple[int, BatchHeader, memoryview]]:
    """Yield (position, header, bytes) of every batch in ``[start, end)`` after checking its
    length, magic and CRC.

    Raises :class:`InvalidBatch` at the first bad batch (its position is the
    exception's argument), which recovery turns into a truncation point.
    """
    pos = start
    buf = b""
    buf_pos = start
    while pos < end:
        if end - pos < HEADER_SIZE:
            raise InvalidBatch(pos, f"{end - pos} trailing bytes are too short for a batch")
        off = pos - buf_pos
        if off + HEADER_SIZE > len(buf):
            buf = os.pread(fd, min(chunk, end - pos), pos)
            buf_pos, off = pos, 0
        h = rec.parse_batch_header(buf, off)
        size = h.size
        if h.batch_length < rec.MIN_BATCH_LENGTH:
            raise InvalidBatch(pos, f"batch length {h.batch_length} is below the minimum")
        if pos + size > end:
            raise InvalidBatch(pos, f"batch of {size} bytes is cut off by the end of the file")
        if h.magic != rec.MAGIC_V2:
            raise InvalidBatch(pos, f"unsupported magic {h.magic}")
        if off + size > len(buf):
            buf = os.pread(fd, max(size, min(chunk, end - pos)), pos)
            buf_pos, off = pos, 0
            if len(buf) < size:
                raise InvalidBatch(pos, "short read")
        view = memoryview(buf)[off : off + size]
        if not rec.crc_matches(view, 0, size, h.crc):
            raise InvalidBatch(pos, "CRC mismatch")
        if h.last_offset_delta < 0:
            raise InvalidBatch(pos, f"negative lastOffsetDelta {h.last_offset_delta}")
        yield pos, h, view
        pos += size
