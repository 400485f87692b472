"""Low-level helpers over raw magic-v2 batches stored in segment files.

Only the fixed header is parsed on hot paths; record bodies are decoded solely for
timestamp look-ups, which need per-record timestamps and offsets.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator

import crc32c

from rivulet.protocol.records import ATTRIBUTES_OFFSET, HEADER_SIZE, LOG_OVERHEAD

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes,
# lastOffsetDelta, baseTimestamp, maxTimestamp: the first 43 header bytes.
HEAD = struct.Struct(">qiibIhiqq")
HEAD_SIZE = HEAD.size
# baseOffset, batchLength, lastOffsetDelta: just enough to walk and locate offsets.
LOCATE = struct.Struct(">qi11xi")
LOCATE_SIZE = LOCATE.size
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # batchLength of a batch with no records
_RECORDS_COUNT = struct.Struct(">i")
_COMPRESSION_MASK = 0x07
_LOG_APPEND_TIME = 0x08


class BatchInfo:
    """Header fields of one stored batch, plus its file position."""

    __slots__ = (
        "position",
        "base_offset",
        "size",
        "last_offset",
        "leader_epoch",
        "magic",
        "crc",
        "attributes",
        "base_timestamp",
        "max_timestamp",
    )

    def __init__(self, position: int, head: tuple) -> None:
        base, length, ple, magic, crc, attrs, lod, bts, mts = head
        self.position = position
        self.base_offset = base
        self.size = length + LOG_OVERHEAD
        self.last_offset = base + lod
        self.leader_epoch = ple
        self.magic = magic
        self.crc = crc
        self.attributes = attrs
        self.base_timestamp = bts
        self.max_timestamp = mts

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


def iter_headers(fd: int, start: int, end: int, chunk: int = 65536) -> Iterator[BatchInfo]:
    """Walk batch headers in ``[start, end)`` without reading record bodies.

    Stops quietly at a torn or implausible batch; callers that must tell corruption
    apart from a clean end use :func:`iter_valid_batches` instead.
    """
    pos = start
    buf = b""
    buf_pos = start
    while end - pos >= HEADER_SIZE:
        off = pos - buf_pos
        if off + HEAD_SIZE > len(buf):
            buf = os.pread(fd, min(chunk, end - pos), pos)
            buf_pos, off = pos, 0
            if len(buf) < HEAD_SIZE:
                return
        head = HEAD.unpack_from(buf, off)
        length = head[1]
        if length < MIN_BATCH_LENGTH or pos + length + LOG_OVERHEAD > end:
            return
        yield BatchInfo(pos, head)
        pos += length + LOG_OVERHEAD


class InvalidBatch(Exception):
    pass


def iter_valid_batches(
    fd: int, start: int, end: int, chunk: int = 4 << 20
) -> Iterator[tuple[BatchInfo, memoryview]]:
    """Yield every batch in ``[start, end)`` after checking its length, magic and CRC.

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
        head = HEAD.unpack_from(buf, off)
        length = head[1]
        size = length + LOG_OVERHEAD
        if length < MIN_BATCH_LENGTH:
            raise InvalidBatch(pos, f"batch length {length} is below the minimum")
        if pos + size > end:
            raise InvalidBatch(pos, f"batch of {size} bytes is cut off by the end of the file")
        if head[3] != 2:
            raise InvalidBatch(pos, f"unsupported magic {head[3]}")
        if off + size > len(buf):
            buf = os.pread(fd, max(size, min(chunk, end - pos)), pos)
            buf_pos, off = pos, 0
            if len(buf) < size:
                raise InvalidBatch(pos, "short read")
        view = memoryview(buf)[off : off + size]
        if crc32c.crc32c(view[ATTRIBUTES_OFFSET:]) != head[4]:
            raise InvalidBatch(pos, "CRC mismatch")
        if head[6] < 0:
            raise InvalidBatch(pos, f"negative lastOffsetDelta {head[6]}")
        yield BatchInfo(pos, head), view
        pos += size


# -- record-level decoding (timestamp look-ups only) ------------------------------


def _varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    shift = 0
    raw = 0
    while True:
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")
    return (raw >> 1) ^ -(raw & 1), pos


def record_offsets_and_timestamps(batch: bytes | memoryview, info: BatchInfo) -> list[tuple[int, int]]:
    """(offset, timestamp) of every record in a stored batch.

    Only the fields Kafka's timestamp search needs are decoded: offset and
    timestamp deltas. Compressed batches go through the shared codec helper.
    """
    (count,) = _RECORDS_COUNT.unpack_from(batch, HEADER_SIZE - 4)
    body: bytes | memoryview = memoryview(batch)[HEADER_SIZE:]
    codec = info.attributes & _COMPRESSION_MASK
    if codec:
        from rivulet.protocol.compression import decompress  # lazy: optional codecs

        body = decompress(codec, body)
    log_append = bool(info.attributes & _LOG_APPEND_TIME)
    out: list[tuple[int, int]] = []
    pos = 0
    for _ in range(count):
        length, pos = _varint(body, pos)
        end = pos + length
        pos += 1  # record attributes
        ts_delta, pos = _varint(body, pos)
        off_delta, pos = _varint(body, pos)
        ts = info.max_timestamp if log_append else info.base_timestamp + ts_delta
        out.append((info.base_offset + off_delta, ts))
        pos = end
    return out
