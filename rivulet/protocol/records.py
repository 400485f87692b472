"""Magic v2 record batches (sans-IO): the one home of the batch format in Rivulet.

Layout of a batch header (61 bytes, big-endian), as Kafka writes it; ``*_OFFSET`` below
are the byte offsets of its fields and ``_HEADER`` the struct reading them all:

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 |
    crc uint32 | attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 |
    maxTimestamp int64 | producerId int64 | producerEpoch int16 | baseSequence int32 |
    recordsCount int32

The CRC-32C covers everything from ``attributes`` to the end of the batch, so the
broker may rewrite ``baseOffset`` and ``partitionLeaderEpoch`` without touching it.

Here: the header (``BatchHeader``, ``parse_batch_header``, ``LOCATOR``), framing
(``iter_batches``), building batches (``encode_batch``, ``encode_control_batch``,
``encode_record`` + ``assemble_batch`` for the cleaner's rewritten batches), reading them
(``decode_batch``, ``decode_records``, ``parse_control_record``), partial walks
(``record_starts``, ``record_offsets_and_timestamps``), cutting a batch down to some of its
records (``cut_batch``, for a share fetch), the broker's produce-path check
(``validate_produce_records``, which walks records without materialising them because the
broker stores the client's bytes unchanged) and the one
in-place rewrite of a produced batch (``patch_appended_batches``). Storage, the cleaner,
the server and the Spark source take the layout from here. Every malformed input surfaces
as a ``ApiError``; nothing reads past the blob.

Record decoding and encoding run in C when the optional extension
``rivulet.protocol._speedups`` is built (``SPEEDUPS``); ``_py_parse_records`` and
``_py_encode_records`` are the references they are tested against, and the extension's
header constants mirror the ones here. The record layout itself, and the varints, are read
by ``rivulet.protocol.record_walk`` (``walk_records``), in the decoder and the produce check
here and in the Spark source.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Protocol

from crc32c import crc32c

from rivulet.common.time import now_ms
from rivulet.protocol.accel import speedups
from rivulet.protocol.compression import DEFAULT_MAX_DECOMPRESSED_SIZE, compress, decompress
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.protocol.record_walk import Faults, varint, walk_records

HEADER_SIZE = 61
# Offsets of the fields inside a batch.
BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
LOG_OVERHEAD = 12  # baseOffset + batchLength: bytes before batchLength starts counting
PLE_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
MAGIC_V2 = 2
# Smallest batchLength a v2 batch can declare (a header and no records).
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
# Bytes needed before the magic byte can be read; the same in every message format.
HEADER_SIZE_UP_TO_MAGIC = MAGIC_OFFSET + 1
# Kafka's LegacyRecord.RECORD_OVERHEAD_V0: below this no message format can be valid.
_MIN_ANY_FORMAT_LENGTH = 14

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_SEQUENCE = -1
CREATE_TIME = 0
LOG_APPEND_TIME = 1

_HEADER = struct.Struct(">qiibIhiqqqhii")
assert _HEADER.size == HEADER_SIZE
# baseOffset, batchLength and lastOffsetDelta: all a log read needs to find and bound batches.
LOCATOR = struct.Struct(f">qi{LAST_OFFSET_DELTA_OFFSET - LOG_OVERHEAD}xi")
_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")
_CONTROL_KEY = struct.Struct(">hh")
_END_TXN_VALUE = struct.Struct(">hi")

# Attribute bits.
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40


@dataclass(slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies in a log or a records field."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)


def parse_batch_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Read the fixed header at ``pos``; the caller checks that HEADER_SIZE bytes exist."""
    return BatchHeader(*_HEADER.unpack_from(buf, pos))


def _byte_view(data: bytes | bytearray | memoryview) -> memoryview:
    view = memoryview(data)
    return view if view.format == "B" else view.cast("B")


def _batch_end(view: memoryview, pos: int) -> int:
    if pos < 0 or len(view) - pos < HEADER_SIZE:
        raise ApiError(ErrorCode.CORRUPT_MESSAGE, "record batch is truncated")
    (length,) = _INT32.unpack_from(view, pos + LENGTH_OFFSET)
    end = pos + LOG_OVERHEAD + length
    if length < MIN_BATCH_LENGTH or end > len(view):
        raise ApiError(ErrorCode.CORRUPT_MESSAGE, "record batch is truncated")
    return end


def compute_batch_crc(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """CRC-32C of the batch at ``pos`` as its header should carry it (attributes to end)."""
    view = _byte_view(buf)
    return crc32c(view[pos + ATTRIBUTES_OFFSET : _batch_end(view, pos)])


def crc_matches(view: memoryview, pos: int, end: int, crc: int) -> bool:
    """Whether the complete batch in view[pos:end] carries the CRC-32C of its bytes."""
    return crc32c(view[pos + ATTRIBUTES_OFFSET : end]) == crc


def first_batch_is_transactional(records: bytes | bytearray | memoryview | None) -> bool:
    """The transactional attribute bit of a records field's first v2 batch (False when there
    is none), read without parsing the header."""
    if not records or len(records) < ATTRIBUTES_OFFSET + 2 or records[MAGIC_OFFSET] != MAGIC_V2:
        return False
    # attributes is an int16: the bit lives in its low byte.
    return bool(records[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_MASK)


# --- in-place patches -------------------------------------------------------------------


def set_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    _INT64.pack_into(buf, pos + BASE_OFFSET_OFFSET, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    _INT32.pack_into(buf, pos + PLE_OFFSET, epoch)


def _restamp(view: memoryview, pos: int, end: int, attributes: int, max_timestamp: int) -> int:
    """Write attributes and maxTimestamp of the batch in view[pos:end]; return its new CRC."""
    _INT16.pack_into(view, pos + ATTRIBUTES_OFFSET, attributes)
    _INT64.pack_into(view, pos + MAX_TIMESTAMP_OFFSET, max_timestamp)
    crc = crc32c(view[pos + ATTRIBUTES_OFFSET : end])
    _UINT32.pack_into(view, pos + CRC_OFFSET, crc)
    return crc


def set_log_append_time(buf: bytearray | memoryview, pos: int, timestamp: int) -> None:
    """Stamp the batch at ``pos`` with LogAppendTime ``timestamp`` and recompute its CRC.

    As Kafka does, only the attributes and maxTimestamp change: consumers report
    maxTimestamp for every record of a LogAppendTime batch.
    """
    view = _byte_view(buf)
    end = _batch_end(view, pos)
    (attributes,) = _INT16.unpack_from(view, pos + ATTRIBUTES_OFFSET)
    _restamp(view, pos, end, attributes | TIMESTAMP_TYPE_MASK, timestamp)


def patch_appended_batches(
    buf: bytearray | memoryview,
    headers: Sequence[BatchHeader],
    *,
    first_offset: int,
    leader_epoch: int,
    log_append_time: int | None = None,
) -> None:
    """The broker's one rewrite of validated batches (laid out back to back in ``buf``, as
    ``headers`` describe them) before they are stored, as Kafka's LogValidator leaves them:

    - base offsets from ``first_offset`` on and the partition leader epoch (outside the CRC);
    - with ``log_append_time``, the LogAppendTime attribute bit and that maxTimestamp;
      otherwise, for CreateTime batches, the maxTimestamp validation took from the records
      (``headers``) where the bytes say otherwise (librdkafka sends 0 or -1);
    - the CRC, only when attributes or maxTimestamp changed.

    ``headers`` are updated to describe the patched bytes.
    """
    view = _byte_view(buf)
    int64, int16 = _INT64, _INT16
    pos = 0
    offset = first_offset
    for h in headers:
        end = pos + h.batch_length + LOG_OVERHEAD
        int64.pack_into(view, pos + BASE_OFFSET_OFFSET, offset)
        _INT32.pack_into(view, pos + PLE_OFFSET, leader_epoch)
        h.base_offset = offset
        h.partition_leader_epoch = leader_epoch
        if log_append_time is not None:
            h.attributes |= TIMESTAMP_TYPE_MASK
            h.max_timestamp = log_append_time
            h.crc = _restamp(view, pos, end, h.attributes, log_append_time)
        elif not h.attributes & TIMESTAMP_TYPE_MASK and \
                int64.unpack_from(view, pos + MAX_TIMESTAMP_OFFSET)[0] != h.max_timestamp:
            h.crc = _restamp(view, pos, end, int16.unpack_from(view, pos + ATTRIBUTES_OFFSET)[0], h.max_timestamp)
        pos = end
        offset += h.last_offset_delta + 1


def assemble_batch(
    payload: Sequence[bytes | bytearray],
    *,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    records_count: int,
) -> bytes:
    """A whole batch: its header (batchLength and CRC computed) followed by ``payload``, the
    records section in pieces (already compressed if the attributes name a codec)."""
    header = bytearray(_HEADER.pack(
        base_offset, HEADER_SIZE - LOG_OVERHEAD + sum(map(len, payload)), partition_leader_epoch, MAGIC_V2, 0,
        attributes, last_offset_delta, base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence,
        records_count))
    crc = crc32c(memoryview(header)[ATTRIBUTES_OFFSET:])
    for chunk in payload:
        crc = crc32c(chunk, crc)
    _UINT32.pack_into(header, CRC_OFFSET, crc)
    return b"".join((header, *payload))


# --- records ----------------------------------------------------------------------------


@dataclass(slots=True)
class Record:
    offset: int
    """Absolute offset."""
    timestamp: int
    """Absolute timestamp in ms (the batch's maxTimestamp for LogAppendTime batches)."""
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


class RecordLike(Protocol):
    """What ``encode_batch`` reads from each record; ``Record`` is one."""

    @property
    def key(self) -> bytes | bytearray | memoryview | None: ...

    @property
    def value(self) -> bytes | bytearray | memoryview | None: ...

    @property
    def headers(self) -> Sequence[tuple[str | bytes, bytes | None]] | None: ...

    @property
    def timestamp(self) -> int | None: ...


@dataclass(slots=True)
class DecodedBatch:
    header: BatchHeader
    records: list[Record]


class RecordValidationError(ApiError):
    """Records of a batch that break a per-record rule (a compacted topic's key, the
    timestamp range); Kafka lists them in the Produce response's record_errors."""

    def __init__(self, code: ErrorCode, message: str, record_errors: list[tuple[int, str]]) -> None:
        super().__init__(code, message)
        self.record_errors = record_errors


def _invalid(message: str) -> ApiError:
    return ApiError(ErrorCode.INVALID_RECORD, message)


def _corrupt(message: str) -> ApiError:
    return ApiError(ErrorCode.CORRUPT_MESSAGE, message)


# --- varints ----------------------------------------------------------------------------
# Record fields are zigzag varints. The encoder looks small values up in a table
# (lengths, offset deltas and timestamp deltas are nearly always below 8192, two bytes);
# the readers are record_walk's uvarint and varint.


def _zigzag_varint(n: int) -> bytes:
    v = n << 1 if n >= 0 else ((-n) << 1) - 1
    out = bytearray()
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


_ZZ_TABLE_SIZE = 8192
_ZZ: list[bytes] = [_zigzag_varint(n) for n in range(_ZZ_TABLE_SIZE)]
_ZZ_NULL = _zigzag_varint(-1)
_CHUNK_SIZE = 64 * 1024


# --- the record walk ---------------------------------------------------------------------
# The record layout is read by record_walk.walk_records (the decoder, the produce check, the
# Spark source's per-record loop); the helpers below read only the fields they need.


def record_starts(buf: bytes | bytearray | memoryview, pos: int, count: int, out: array[int]) -> int:
    """Append the position of each of ``count`` records from ``pos``; return where they end.
    Only the length varints are read (IndexError past the end of ``buf``)."""
    put = out.append
    for _ in range(count):
        put(pos)
        size, pos = varint(buf, pos, 5)
        pos += size
    return pos


def record_offsets_and_timestamps(batch: bytes | bytearray | memoryview, pos: int = 0) -> list[tuple[int, int]]:
    """(offset, timestamp) of every record of the complete batch at ``pos``, decoding only
    the offset and timestamp deltas (what a search by timestamp needs); a LogAppendTime
    batch's records all carry its maxTimestamp."""
    header, body, p, _stop = batch_records_section(batch, pos, verify_crc=False)
    log_append = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK else None
    out: list[tuple[int, int]] = []
    try:
        for _ in range(header.records_count):
            size, p = varint(body, p, 5)
            end = p + size
            ts_delta, q = varint(body, p + 1)  # past the attributes byte
            offset_delta, q = varint(body, q, 5)
            out.append((header.base_offset + offset_delta,
                        header.base_timestamp + ts_delta if log_append is None else log_append))
            p = end
    except IndexError:
        raise _invalid("record runs past the end of the batch") from None
    return out


def _py_record_span(buf: bytes | bytearray | memoryview, pos: int, stop: int, first: int,
                    last: int) -> tuple[int, int] | None:
    """Where records ``first..last`` (indexes) of those laid out in buf[pos:stop] lie, reading
    only their length varints; None when they do not frame. The C accelerator's
    ``record_span`` is tested against it."""
    start = pos
    try:
        for i in range(last + 1):
            if i == first:
                start = pos
            size, pos = varint(buf, pos, 5)
            if size < 0 or size > stop - pos:
                return None
            pos += size
    except (IndexError, ApiError):
        return None
    return start, pos


def _py_rebase_records(buf: bytes | bytearray | memoryview, pos: int, stop: int, count: int, offset_shift: int,
                       timestamp_shift: int) -> bytes | None:
    """The ``count`` records laid out in buf[pos:stop] with their offset and timestamp deltas
    raised by the shifts, for ``join_batches``; None when they do not frame. The C
    accelerator's ``rebase_records`` is tested against it."""
    if offset_shift < 0:
        return None
    out = bytearray()
    try:
        for _ in range(count):
            size, p = varint(buf, pos, 5)
            end = p + size
            if size < 2 or end > stop:
                return None
            ts_delta, q = varint(buf, p + 1, 9)  # past the attributes byte
            off_delta, q = varint(buf, q, 5)
            off = off_delta + offset_shift
            if q > end or not 0 <= off <= 0x7FFFFFFF:
                return None
            head = bytes((buf[p],)) + _zigzag_varint(ts_delta + timestamp_shift) + _zigzag_varint(off)
            out += _zigzag_varint(len(head) + end - q)
            out += head
            out += buf[q:end]
            pos = end
    except (IndexError, ApiError):
        return None
    return bytes(out) if pos == stop else None


def cut_batch(batch: bytes | bytearray | memoryview, first_offset: int, last_offset: int) -> bytes | None:
    """The complete batch ``batch`` holding only its records of offsets
    ``first_offset..last_offset``, as log compaction leaves a batch: base offset, last offset
    delta, timestamps and producer fields kept, the records count, length and CRC new. None
    where slicing cannot do it (compressed, control or non-v2 batches, and batches with gaps
    in their offsets) or where the range holds the whole batch."""
    view = _byte_view(batch)
    h = parse_batch_header(view)
    if h.magic != MAGIC_V2 or h.attributes & (COMPRESSION_MASK | CONTROL_MASK) \
            or h.records_count != h.last_offset_delta + 1:
        return None
    first = max(first_offset - h.base_offset, 0)  # contiguous offsets: a record's index is its delta
    last = min(last_offset - h.base_offset, h.records_count - 1)
    if first > last or (first == 0 and last == h.records_count - 1):
        return None
    span = _record_span(view, HEADER_SIZE, h.size, first, last)
    if span is None:
        return None
    return assemble_batch(
        [view[span[0]:span[1]]], base_offset=h.base_offset, partition_leader_epoch=h.partition_leader_epoch,
        attributes=h.attributes, last_offset_delta=h.last_offset_delta, base_timestamp=h.base_timestamp,
        max_timestamp=h.max_timestamp, producer_id=h.producer_id, producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence, records_count=last - first + 1)


def join_batches(batches: Sequence[bytes | bytearray | memoryview]) -> bytes | None:
    """One batch holding the records of ``batches`` (complete batches, offsets ascending):
    the first one's base offset, timestamp and producer fields, the other batches' records
    re-based onto them (offset and timestamp deltas), the last offset delta reaching the last
    batch's. None unless there are two or more and every one is a v2, uncompressed,
    non-transactional, non-control, create-time batch of the same partition leader epoch and
    producer whose sequences run on from the first's as its offsets do (records would not keep
    their sequence numbers otherwise)."""
    if len(batches) < 2:
        return None
    views = [_byte_view(b) for b in batches]
    hs = [parse_batch_header(v) for v in views]
    h0 = hs[0]
    for i, h in enumerate(hs):
        if i and h.base_offset <= hs[i - 1].last_offset:
            return None
        if h.magic != MAGIC_V2 or h.attributes != 0 or h.partition_leader_epoch != h0.partition_leader_epoch \
                or h.producer_id != h0.producer_id or h.producer_epoch != h0.producer_epoch or h.records_count == 0:
            return None
        if h0.producer_id != NO_PRODUCER_ID and h.base_sequence - h0.base_sequence != h.base_offset - h0.base_offset:
            return None
    payload: list[bytes | memoryview] = [views[0][HEADER_SIZE:h0.size]]
    for view, h in zip(views[1:], hs[1:], strict=True):
        records = _rebase_records(view, HEADER_SIZE, h.size, h.records_count, h.base_offset - h0.base_offset,
                                  h.base_timestamp - h0.base_timestamp)
        if records is None:
            return None
        payload.append(records)
    last = hs[-1]
    return assemble_batch(
        payload, base_offset=h0.base_offset, partition_leader_epoch=h0.partition_leader_epoch, attributes=0,
        last_offset_delta=last.last_offset - h0.base_offset, base_timestamp=h0.base_timestamp,
        max_timestamp=max(h.max_timestamp for h in hs), producer_id=h0.producer_id,
        producer_epoch=h0.producer_epoch, base_sequence=h0.base_sequence,
        records_count=sum(h.records_count for h in hs))


def _encode_headers(headers: Sequence[tuple[str | bytes, bytes | None]]) -> bytes:
    zz = _ZZ
    n = len(headers)
    out = bytearray(zz[n] if n < _ZZ_TABLE_SIZE else _zigzag_varint(n))
    for name, value in headers:
        kb = name.encode() if isinstance(name, str) else bytes(name)
        kl = len(kb)
        out += zz[kl] if kl < _ZZ_TABLE_SIZE else _zigzag_varint(kl)
        out += kb
        if value is None:
            out += _ZZ_NULL
        else:
            vl = len(value)
            out += zz[vl] if vl < _ZZ_TABLE_SIZE else _zigzag_varint(vl)
            out += value
    return bytes(out)


def encode_record(offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None,
                  headers: Sequence[tuple[str | bytes, bytes | None]]) -> bytes:
    """One record with explicit deltas (the log cleaner keeps records' original offsets)."""
    body = bytearray(b"\x00")  # record attributes: unused
    body += _zigzag_varint(timestamp_delta)
    body += _zigzag_varint(offset_delta)
    body += _ZZ_NULL if key is None else _zigzag_varint(len(key)) + bytes(key)
    body += _ZZ_NULL if value is None else _zigzag_varint(len(value)) + bytes(value)
    body += _encode_headers(headers)
    return _zigzag_varint(len(body)) + bytes(body)


# --- encoding ---------------------------------------------------------------------------


def _batch_attributes(compression: int, timestamp_type: int, transactional: bool, control: bool) -> int:
    attributes = compression | (TIMESTAMP_TYPE_MASK if timestamp_type == LOG_APPEND_TIME else 0)
    if transactional:
        attributes |= TRANSACTIONAL_MASK
    if control:
        attributes |= CONTROL_MASK
    return attributes


def _py_encode_records(records: Sequence[RecordLike], base: int) -> tuple[list[bytearray], int]:
    """A batch's records section in pure Python, in chunks, and its max timestamp: the
    reference the C encoder (``_speedups.encode_records``) is tested against, and what runs
    for any input the C encoder does not take."""
    max_ts = -(1 << 63)
    zz = _ZZ
    table = _ZZ_TABLE_SIZE
    enc = _zigzag_varint
    null = _ZZ_NULL
    no_headers = b"\x00"
    # Records go into chunks of about _CHUNK_SIZE that are joined once at the end: one
    # growing buffer would be copied by every realloc, and holding two batch-sized
    # buffers at once trips glibc's mmap threshold into page-faulting every batch.
    chunks: list[bytearray] = []
    body = bytearray()
    for i, r in enumerate(records):
        key = r.key
        value = r.value
        headers = r.headers
        ts = r.timestamp
        if ts is None:
            ts = base
        if ts > max_ts:
            max_ts = ts
        d = ts - base
        tsb = zz[d] if 0 <= d < table else enc(d)
        offb = zz[i] if i < table else enc(i)
        if key is None:
            kb = null
            kl = 0
        else:
            kl = len(key)
            kb = zz[kl] if kl < table else enc(kl)
        if value is None:
            vb = null
            vl = 0
        else:
            vl = len(value)
            vb = zz[vl] if vl < table else enc(vl)
        hb = _encode_headers(headers) if headers else no_headers
        size = 1 + len(tsb) + len(offb) + len(kb) + kl + len(vb) + vl + len(hb)
        body += zz[size] if size < table else enc(size)
        body += b"\x00"  # record attributes: unused
        body += tsb
        body += offb
        body += kb
        if kl:
            body += key  # type: ignore[operator]
        body += vb
        if vl:
            body += value  # type: ignore[operator]
        body += hb
        if len(body) >= _CHUNK_SIZE:
            chunks.append(body)
            body = bytearray()
    chunks.append(body)
    return chunks, max_ts


def encode_batch(
    records: Sequence[RecordLike],
    *,
    base_offset: int = 0,
    compression: int = 0,
    timestamp_type: int = CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    partition_leader_epoch: int = -1,
    base_timestamp: int | None = None,
    compression_level: int | None = None,
) -> bytes:
    """Build one magic v2 batch holding ``records`` at offsets ``base_offset``, +1, ...

    ``base_timestamp`` defaults to the first record's timestamp, as Kafka's producer
    does; a record whose timestamp is None gets ``base_timestamp`` or, failing that, now.

    With the C accelerator (``SPEEDUPS``) the records are written in C when they are of the
    usual kinds (bytes or None keys and values, int or None timestamps, headers of str or
    bytes names and bytes or None values); anything else goes to ``_py_encode_records``, the
    pure-Python encoder, which also raises every error. Both give the same bytes.
    """
    count = len(records)
    if count == 0:
        raise ValueError("a record batch needs at least one record")
    if timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
        raise ValueError(f"invalid timestamp type {timestamp_type}")
    if base_timestamp is None:
        base_timestamp = records[0].timestamp
        if base_timestamp is None:
            base_timestamp = now_ms()
    section = None
    if _c_encode_records is not None:
        try:
            attributes = _batch_attributes(compression, timestamp_type, transactional, control)
            # maxTimestamp, batchLength and the CRC are filled in once the records are written.
            header = _HEADER.pack(base_offset, 0, partition_leader_epoch, MAGIC_V2, 0, attributes, count - 1,
                                  base_timestamp, 0, producer_id, producer_epoch, base_sequence, count)
        except Exception:
            pass  # odd arguments: the Python encoder raises what it raises, in its order
        else:
            if not compression:
                batch = _c_encode_records(records, base_timestamp, header)
                if batch is not None:
                    return batch  # type: ignore[no-any-return]
            else:
                section = _c_encode_records(records, base_timestamp, None)
    if section is not None:
        body, max_ts = section
        chunks = [body]
    else:
        chunks, max_ts = _py_encode_records(records, base_timestamp)
        # Computed after the records, so that a bad record's error comes first.
        attributes = _batch_attributes(compression, timestamp_type, transactional, control)
    payload: list[bytes | bytearray] = chunks
    if compression:
        payload = [compress(compression, chunks[0] if len(chunks) == 1 else b"".join(chunks), compression_level)]
    return assemble_batch(
        payload, base_offset=base_offset, partition_leader_epoch=partition_leader_epoch, attributes=attributes,
        last_offset_delta=count - 1, base_timestamp=base_timestamp, max_timestamp=max_ts, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence, records_count=count)


# --- control records --------------------------------------------------------------------


class ControlRecordType(IntEnum):
    ABORT = 0
    COMMIT = 1


@dataclass(slots=True, frozen=True)
class ControlRecord:
    type: int
    """A ControlRecordType, or another type id Kafka may use (e.g. KRaft's)."""
    version: int
    coordinator_epoch: int | None
    """Set for transaction markers (ABORT/COMMIT) only."""


@dataclass(slots=True)
class _ControlInput:
    key: bytes
    value: bytes
    headers: list[tuple[str, bytes | None]]
    timestamp: int


def encode_control_batch(
    kind: ControlRecordType | int,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    base_offset: int = 0,
    timestamp: int,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A transaction marker batch (transactional + control) ending a producer's transaction."""
    if kind not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        raise ValueError(f"not a transaction marker type: {kind}")
    record = _ControlInput(
        key=_CONTROL_KEY.pack(0, kind),
        value=_END_TXN_VALUE.pack(0, coordinator_epoch),
        headers=[],
        timestamp=timestamp,
    )
    return encode_batch(
        [record],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        transactional=True,
        control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def parse_control_record(record: Record) -> ControlRecord:
    """Read a control batch's record: key = int16 version + int16 type; for transaction
    markers, value = int16 version + int32 coordinator epoch. Newer versions are read as
    version 0, since fields are only ever appended."""
    key = record.key
    if key is None or len(key) < _CONTROL_KEY.size:
        raise _invalid("control record key is shorter than 4 bytes")
    version, kind = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise _invalid(f"invalid control record key version {version}")
    if kind not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        return ControlRecord(kind, version, None)
    value = record.value
    if value is None or len(value) < _END_TXN_VALUE.size:
        raise _invalid("transaction marker value is shorter than 6 bytes")
    value_version, coordinator_epoch = _END_TXN_VALUE.unpack_from(value)
    if value_version < 0:
        raise _invalid(f"invalid transaction marker version {value_version}")
    return ControlRecord(ControlRecordType(kind), version, coordinator_epoch)


# --- decoding ---------------------------------------------------------------------------


# What the decoder says of malformed records (INVALID_RECORD, as Kafka's DefaultRecord).
_PARSE_FAULTS = Faults(
    ErrorCode.INVALID_RECORD,
    size="invalid record size {n}",
    offset_delta="",  # not checked: any offset delta decodes
    key="invalid key length {n}",
    value="invalid value length {n}",
    header_count="invalid header count {n}",
    header_key="invalid header key length {n}",
    header_value="invalid header value length {n}",
    unfilled="record fields do not fill the record's declared size",
    past_end="record runs past the end of the batch",
    left_over="bytes left after the batch's declared record count",
)


def _py_parse_records(
    buf: bytes,
    pos: int,
    end: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
) -> list[Record]:
    """Decode ``count`` records filling exactly buf[pos:end] (the pure-Python decoder).

    Only buf[:end] decides the outcome: a read at or past ``end`` is "record runs past
    the end of the batch", as in the C accelerator (``_speedups.parse_records``), and so
    is an ``end`` past the end of ``buf``.
    """
    if end > len(buf):
        raise _invalid("record runs past the end of the batch")

    def decode(data: bytes) -> list[Record]:
        """Varints and lengths are read up to len(data)."""
        records: list[Record] = []
        append = records.append
        for ts_delta, offset_delta, key_at, key_length, value_at, value_length, headers, _end in walk_records(
            data, pos, end, count, _PARSE_FAULTS
        ):
            append(Record(
                base_offset + offset_delta,
                base_timestamp + ts_delta if log_append_time is None else log_append_time,
                None if key_length < 0 else data[key_at:key_at + key_length],
                None if value_length < 0 else data[value_at:value_at + value_length],
                headers,
            ))
        return records

    try:
        return decode(buf)
    except ApiError:
        if end == len(buf):
            raise
    # decode reads up to len(buf), which can lie past ``end`` (decode_batch passes a whole
    # Fetch response). A success never reads past ``end`` (every record must end by it), so
    # only a failure can have seen those bytes: running again on a copy cut at ``end`` gives
    # the error that depends on buf[:end] alone.
    return decode(buf[: max(end, 0)])


_parse_records = _py_parse_records
_c_encode_records = None
SPEEDUPS = False
"""True when records are decoded and encoded by the C accelerator ``rivulet.protocol._speedups``.

It is built by ``pip install`` when a C compiler is present; without it, or with
RIVULET_NO_SPEEDUPS=1 in the environment, the pure-Python ``_py_parse_records`` and
``_py_encode_records`` are used. Both give the same records (and batch bytes) and raise the
same errors for every input."""
_speedups = speedups()
if _speedups is not None:
    _speedups.setup(Record, _invalid, _py_parse_records)
    _parse_records = _speedups.parse_records
    _speedups.setup_encoder(crc32c)
    _c_encode_records = _speedups.encode_records
    SPEEDUPS = True

_record_span = _py_record_span
_rebase_records = _py_rebase_records
if _speedups is not None:
    _record_span = _speedups.record_span
    _rebase_records = _speedups.rebase_records


def _frame(view: memoryview, pos: int) -> int:
    """Size of the batch starting at ``pos``, or -1 if only part of it is present.

    Raises for framing no complete batch can have, in the order Kafka's
    ByteBufferLogInputStream checks it.
    """
    remaining = len(view) - pos
    if remaining < LOG_OVERHEAD:
        return -1
    (length,) = _INT32.unpack_from(view, pos + LENGTH_OFFSET)
    if length < _MIN_ANY_FORMAT_LENGTH:
        raise _corrupt(f"record batch size {length} is below the minimum of any message format")
    if remaining < HEADER_SIZE_UP_TO_MAGIC:
        return -1
    magic = view[pos + MAGIC_OFFSET]
    if magic != MAGIC_V2:
        if magic in (0, 1):
            raise ApiError(
                ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, f"message format v{magic} is not supported; use v2"
            )
        raise _corrupt(f"invalid magic {magic}")
    if length < MIN_BATCH_LENGTH:
        raise _corrupt(f"record batch size {length} is smaller than a v2 batch header")
    if remaining < length + LOG_OVERHEAD:
        return -1
    return length + LOG_OVERHEAD


def iter_batches(data: bytes | bytearray | memoryview) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) of each complete batch in ``data``.

    Stops quietly at a trailing partial batch (a Fetch response cut at max_bytes, or a
    log segment's torn tail); the caller can tell from the last batch's end whether
    bytes were left over. Raises ApiError on framing that cannot be a v2 batch.
    """
    view = _byte_view(data)
    pos = 0
    size = len(view)
    while pos < size:
        batch_size = _frame(view, pos)
        if batch_size < 0:
            return
        yield pos, parse_batch_header(view, pos)
        pos += batch_size


def aborted_batches(headers: Sequence[BatchHeader], aborted: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """(first, last) offsets of the data batches of aborted transactions, found as a
    read_committed consumer finds them: a producer's aborted transaction is open from its
    first offset until that producer's next control batch (its marker)."""
    pending = sorted(aborted, key=lambda a: a[1])
    open_producers: set[int] = set()
    out: list[tuple[int, int]] = []
    i = 0
    for h in headers:
        while i < len(pending) and pending[i][1] <= h.last_offset:
            open_producers.add(pending[i][0])
            i += 1
        if h.is_control:
            open_producers.discard(h.producer_id)
        elif h.is_transactional and h.producer_id in open_producers:
            out.append((h.base_offset, h.last_offset))
    return out


def count_records(data: bytes | bytearray | memoryview) -> int:
    """Records in the complete v2 batches of ``data``, read from their headers alone (the
    broker's messages-out count: one step per batch, none per record)."""
    size = len(data)
    pos = total = 0
    while pos + HEADER_SIZE <= size:
        end = pos + LOG_OVERHEAD + _INT32.unpack_from(data, pos + LENGTH_OFFSET)[0]
        if end > size or end < pos + HEADER_SIZE:
            break
        total += _INT32.unpack_from(data, pos + RECORDS_COUNT_OFFSET)[0]
        pos = end
    return total


def batch_records_section(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    *,
    verify_crc: bool = True,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> tuple[BatchHeader, bytes, int, int]:
    """Check the complete batch at ``pos`` (framing, CRC) and find its records:
    (header, records_buf, start, stop), the records filling records_buf[start:stop].
    records_buf is ``buf`` itself for an uncompressed batch (whatever its type), else the
    decompressed bytes. ``decode_batch`` parses them into Records."""
    view = _byte_view(buf)
    if pos < 0 or _frame(view, pos) < 0:
        raise _corrupt("record batch is truncated")
    header = parse_batch_header(view, pos)
    end = pos + header.size
    if verify_crc and crc32c(view[pos + ATTRIBUTES_OFFSET : end]) != header.crc:
        raise _corrupt("record batch CRC mismatch")
    codec = header.attributes & COMPRESSION_MASK
    if codec:
        records_buf = decompress(codec, view[pos + HEADER_SIZE : end], max_decompressed_size)
        return header, records_buf, 0, len(records_buf)
    return header, buf, pos + HEADER_SIZE, end


def decode_batch(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    *,
    verify_crc: bool = True,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> DecodedBatch:
    """Decode the complete batch at ``pos``, decompressing its records."""
    header, records_buf, start, stop = batch_records_section(
        buf, pos, verify_crc=verify_crc, max_decompressed_size=max_decompressed_size
    )
    if not isinstance(records_buf, bytes):  # keys and values are slices: make them bytes
        records_buf = bytes(_byte_view(records_buf)[start:stop])
        start, stop = 0, len(records_buf)
    records = _parse_records(
        records_buf,
        start,
        stop,
        header.records_count,
        header.base_offset,
        header.base_timestamp,
        header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK else None,
    )
    return DecodedBatch(header, records)


def decode_records(
    data: bytes | bytearray | memoryview,
    *,
    verify_crc: bool = True,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> Iterator[DecodedBatch]:
    """Decode every complete batch of a records blob, skipping a trailing partial one."""
    if not isinstance(data, bytes):
        data = bytes(data)  # one copy lets keys and values be plain slices
    for pos, _ in iter_batches(data):
        yield decode_batch(data, pos, verify_crc=verify_crc, max_decompressed_size=max_decompressed_size)


# --- produce-path validation --------------------------------------------------------------


# What the produce check says of malformed records.
_CHECK_FAULTS = Faults(
    ErrorCode.INVALID_RECORD,
    size="invalid record size {n} at index {i}",
    offset_delta="record {i} has offset delta {n}, expected {i}",
    key="invalid key length {n} in record {i}",
    value="invalid value length {n} in record {i}",
    header_count="invalid header count {n} in record {i}",
    header_key="invalid header key length {n} in record {i}",
    header_value="invalid header value length {n} in record {i}",
    unfilled="record {i}'s fields do not fill its declared size {n}",
    past_end="record runs past the end of the batch",
    left_over="bytes left after the batch's declared {n} records",
)


def _py_check_records(
    buf: bytes | bytearray | memoryview,
    pos: int,
    end: int,
    count: int,
    require_keys: bool,
    base_timestamp: int,
    timestamp_bounds: tuple[int, int] | None,
    record_errors: list[tuple[int, str, ErrorCode]],
) -> int:
    """Walk ``count`` records filling exactly buf[pos:end] without materialising them:
    structure (raised at once), offset deltas 0..count-1, and the optional key and timestamp
    rules (appended to ``record_errors``, one per record). Returns the largest record
    timestamp (-1 when no record has one)."""
    check_ts = timestamp_bounds is not None
    lo, hi = timestamp_bounds if timestamp_bounds is not None else (0, 0)
    max_ts = NO_TIMESTAMP
    # Key and value: only their lengths matter; one running past its record is refused when
    # the record's fields do not fill it (bounded=False).
    walk = walk_records(buf, pos, end, count, _CHECK_FAULTS, headers=False, bounded=False, sequential=True)
    for i, (ts_delta, _offset_delta, _key_at, key_length, _value_at, _value_length, _headers, _end) in enumerate(walk):
        ts = base_timestamp + ts_delta
        if ts > max_ts:
            max_ts = ts
        if require_keys and key_length < 0:  # one error per record, the key's first (as Kafka)
            record_errors.append((i, COMPACTED_WITHOUT_KEY, ErrorCode.INVALID_RECORD))
        elif check_ts and not lo <= ts <= hi and ts != NO_TIMESTAMP:
            # Kafka's LogValidator wording; a produced batch's record offsets are its indexes.
            record_errors.append((i, f"Timestamp {ts} of message with offset {i} is out of range. The timestamp "
                                     f"should be within [{lo}, {hi}]", ErrorCode.INVALID_TIMESTAMP))
    return max_ts


COMPACTED_WITHOUT_KEY = "Compacted topic cannot accept message without key in topic partition"


def _record_validation_error(record_errors: list[tuple[int, str, ErrorCode]],
                             topic_partition: str | None) -> RecordValidationError:
    """Worded as Kafka's LogValidator: each record's message (which Kafka's Java producer
    shows for that record), and the batch's own message over them."""
    errors = [(i, f"{m} {topic_partition}" if m == COMPACTED_WITHOUT_KEY and topic_partition else m)
              for i, m, _code in record_errors]
    if any(code == ErrorCode.INVALID_TIMESTAMP for _i, _m, code in record_errors):
        return RecordValidationError(ErrorCode.INVALID_TIMESTAMP,
                                     "One or more records have been rejected due to invalid timestamp", errors)
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    return RecordValidationError(
        ErrorCode.INVALID_RECORD, f"One or more records have been rejected due to {len(errors)} record errors in "
        f"total, and only showing the first three errors at most: [{shown}]", errors)


_check_records = _py_check_records
if _speedups is not None:
    _speedups.setup_checker(_py_check_records)
    _check_records = _speedups.check_records


def _check_produced_header(header: BatchHeader, max_batch_size: int, view: memoryview, pos: int) -> None:
    """The checks of a produced batch before its records, in Kafka's order."""
    if header.base_offset != 0:
        raise _invalid(f"the baseOffset of a produced record batch must be 0, not {header.base_offset}")
    if header.size > max_batch_size:
        raise ApiError(
            ErrorCode.MESSAGE_TOO_LARGE,
            f"record batch of {header.size} bytes exceeds the maximum of {max_batch_size}",
        )
    if crc32c(view[pos + ATTRIBUTES_OFFSET : pos + header.size]) != header.crc:
        raise _corrupt("record batch CRC mismatch")
    codec = header.attributes & COMPRESSION_MASK
    if codec > 4:
        raise ApiError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec id {codec}")
    count = header.records_count
    if header.last_offset_delta < 0:
        raise _invalid(f"record batch has an invalid last offset delta {header.last_offset_delta}")
    if count <= 0:
        raise _invalid(f"invalid record count {count}")
    if header.last_offset_delta + 1 != count:
        raise _invalid(
            f"last offset delta {header.last_offset_delta} is inconsistent with the record count {count}"
        )
    if header.attributes & CONTROL_MASK:
        raise _invalid("clients may not write control records")
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise _invalid(f"invalid sequence number {header.base_sequence} for producer id {header.producer_id}")
    if header.attributes & TRANSACTIONAL_MASK and header.producer_id < 0:
        raise _invalid("a transactional record batch needs a producer id")


def validate_produce_records(
    data: bytes | bytearray | memoryview,
    *,
    max_batch_size: int,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
    allow_multiple_batches: bool = False,
    require_keys: bool = False,
    timestamp_bounds: tuple[int, int] | None = None,
    topic_partition: str | None = None,
) -> list[BatchHeader]:
    """Validate a partition's records from a Produce request as Kafka's broker does.

    The bytes are not modified; the broker stores them as received, except that a CreateTime
    batch whose maxTimestamp disagrees with its records is returned with the records' value,
    for ``apply_validated_max_timestamps`` to write (as Kafka's LogValidator does). Raises
    ApiError:

    - INVALID_RECORD: no complete batch, trailing bytes, more than one batch (Kafka
      accepts exactly one per partition from Produce v3 on; ``allow_multiple_batches``
      lifts that), baseOffset != 0, a count or offset range that disagrees with the
      records, a control batch, a producer id without a sequence or a transactional batch
      without a producer id, malformed records; with ``require_keys`` (compacted
      topics), records without a key (a RecordValidationError listing each).
      Magic 0 or 1 too, as Kafka 4 (without a message, as Kafka).
    - CORRUPT_MESSAGE: impossible framing, CRC mismatch, an undecodable compressed
      payload, or one expanding past ``max_decompressed_size``.
    - MESSAGE_TOO_LARGE: a batch larger than ``max_batch_size`` (max.message.bytes).
    - UNSUPPORTED_COMPRESSION_TYPE: codec ids 5-7.
    - INVALID_TIMESTAMP: with ``timestamp_bounds=(lo, hi)`` (CreateTime topics: now -
      message.timestamp.before.max.ms, now + message.timestamp.after.max.ms), records
      whose timestamp is outside it (a RecordValidationError listing each); like Kafka, a
      record without one (-1) passes.

    ``topic_partition`` ("topic-0") completes the keyless-record message, as Kafka names it.
    Version-dependent request checks (zstd needs Produce v7+) stay with the caller.
    """
    view = _byte_view(data)
    size = len(view)
    # Frame everything first: Kafka rejects a malformed or multi-batch request before it
    # looks inside any batch.
    positions: list[int] = []
    pos = 0
    while pos < size:
        try:
            batch_size = _frame(view, pos)
        except ApiError as e:
            # Kafka's ProduceRequest.validateRecords: Produce (v3+) carries magic v2 batches
            # only, anything older is INVALID_RECORD, answered without a message.
            if e.code == ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT:
                raise ApiError(ErrorCode.INVALID_RECORD) from None
            raise
        if batch_size < 0:
            if positions:
                raise _invalid("records end with a partial record batch")
            raise _invalid("records hold no complete record batch")
        positions.append(pos)
        pos += batch_size
    if not positions:
        raise _invalid("records hold no record batch")
    if len(positions) > 1 and not allow_multiple_batches:
        raise _invalid("a produce request may carry exactly one record batch per partition")

    headers: list[BatchHeader] = []
    for pos in positions:
        header = parse_batch_header(view, pos)
        end = pos + header.size
        _check_produced_header(header, max_batch_size, view, pos)
        codec = header.attributes & COMPRESSION_MASK
        count = header.records_count
        if codec:
            # Only walked, never kept: the thread's reusable buffer spares an allocation per batch.
            records_buf = decompress(codec, view[pos + HEADER_SIZE : end], max_decompressed_size,
                                     reuse_buffer=True)
            start, stop = 0, len(records_buf)
        elif isinstance(data, (bytes, bytearray)):
            records_buf, start, stop = data, pos + HEADER_SIZE, end
        else:
            # Walk the caller's buffer in place: indexing a view costs about what a copy
            # would save, and this spares the allocation.
            records_buf, start, stop = view, pos + HEADER_SIZE, end
        record_errors: list[tuple[int, str, ErrorCode]] = []
        max_ts = _check_records(
            records_buf, start, stop, count, require_keys, header.base_timestamp, timestamp_bounds, record_errors
        )
        if record_errors:
            raise _record_validation_error(record_errors, topic_partition)
        if not header.attributes & TIMESTAMP_TYPE_MASK and header.max_timestamp != max_ts:
            header.max_timestamp = max_ts  # the records decide; apply_validated_max_timestamps writes it
        headers.append(header)
    return headers
