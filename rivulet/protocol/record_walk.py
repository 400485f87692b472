"""The walk over a v2 batch's records in Python, and the varints it reads: their one home.

A record: length varint | attributes int8 | timestampDelta varint | offsetDelta varint |
key (length varint, bytes) | value (length varint, bytes) | header count varint | headers,
each header a key (length varint, UTF-8 bytes) and a value (length varint, bytes). Lengths
and deltas are zigzag varints; a length of -1 is null.

``walk_records`` reads that layout for every Python reader of records: the decoder
(``records._py_parse_records``), the broker's produce check (``records._py_check_records``)
and the per-record loop of ``arrow.records`` (the Spark source, Iceberg translation). Each
caller says, with a ``Faults``, which error code and messages its refusals carry. The C accelerator
(``_speedups``) is the fast path for all three; it hands every input it would refuse back to
these callers, so the errors are worded here and in the callers' ``Faults`` only.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from rivulet.protocol.errors import ApiError, ErrorCode

Buffer = bytes | bytearray | memoryview
Header = tuple[str, bytes | None]


def uvarint(buf: Buffer, pos: int, max_bytes: int) -> tuple[int, int]:
    """Unsigned varint at ``pos`` of at most ``max_bytes`` bytes -> (value, next pos).

    IndexError past the end of ``buf`` is left to the caller, which maps it once.
    """
    result = 0
    shift = 0
    stop = pos + max_bytes
    while pos < stop:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
    raise ApiError(ErrorCode.INVALID_RECORD, "varint is too long")


def varint(buf: Buffer, pos: int, max_bytes: int = 10) -> tuple[int, int]:
    """Zigzag varint at ``pos`` -> (value, next pos); see ``uvarint``."""
    b = buf[pos]
    if b < 0x80:  # most lengths, and the first 64 deltas
        return (b >> 1) ^ -(b & 1), pos + 1
    v, pos = uvarint(buf, pos, max_bytes)
    return (v >> 1) ^ -(v & 1), pos


class Faults(NamedTuple):
    """The error code and messages of one caller's refusals. In the messages, ``{n}`` is the
    value read and ``{i}`` the record's index in its batch."""

    code: ErrorCode
    size: str
    offset_delta: str
    key: str
    value: str
    header_count: str
    header_key: str
    header_value: str
    unfilled: str
    past_end: str
    left_over: str

    def error(self, message: str, n: int = 0, i: int = 0) -> ApiError:
        return ApiError(self.code, message.format(n=n, i=i))


# One record as walk_records yields it: (timestamp delta, offset delta, key start, key length,
# value start, value length, headers (None unless kept), end). A null key or value has
# length -1 and starts right after its length varint, as an empty one does. A plain tuple:
# a NamedTuple's constructor would cost the walk a Python call per record.
Fields = tuple[int, int, int, int, int, int, "list[Header] | None", int]


def read_headers(buf: Buffer, p: int, rec_end: int, faults: Faults, i: int = 0, *, keep: bool = True,
                 bounded: bool = True) -> tuple[list[Header] | None, int]:
    """The headers of record ``i`` from its header count at ``p`` -> (headers, where they end).

    ``keep=False`` only walks them (None). ``bounded=False`` lets a length run past the
    record (``rec_end``) and stops there, for the caller's check that the fields fill it.
    Header keys are decoded leniently, as Java's client does.
    """
    n, p = varint(buf, p, 5)
    if n < 0:
        raise faults.error(faults.header_count, n, i)
    out: list[Header] | None = [] if keep else None
    for _ in range(n):
        kl, p = varint(buf, p, 5)
        q = p + kl
        if kl < 0 or (bounded and q > rec_end):
            raise faults.error(faults.header_key, kl, i)
        name = str(buf[p:q], "utf-8", "replace") if out is not None else ""
        vl, p = varint(buf, q, 5)
        q = p + vl
        value: bytes | None = None
        if vl >= 0:
            if bounded and q > rec_end:
                raise faults.error(faults.header_value, vl, i)
            if out is not None:
                value = bytes(buf[p:q])
            p = q
        elif vl != -1:
            raise faults.error(faults.header_value, vl, i)
        if out is not None:
            out.append((name, value))
        if p > rec_end:
            break  # unbounded: the caller reports it; stops a huge header count early
    return out, p


def walk_records(buf: Buffer, pos: int, end: int, count: int, faults: Faults, *, headers: bool = True,
                 bounded: bool = True, sequential: bool = False) -> Iterator[Fields]:
    """Yield the fields of each of ``count`` records that must fill exactly buf[pos:end].

    A record that does not parse raises ``faults``' error at once, before it is yielded:
    a size under 6 bytes or past ``end``, a negative length other than -1, a length past
    the record (unless ``bounded=False``: the produce check lets such a length run on and
    refuses the record when its fields do not fill it), a read past ``buf``, bytes left
    after the last record. ``sequential`` refuses offset deltas other than 0, 1, ...
    (produced batches); ``headers=False`` walks the headers without keeping them.

    Each varint's
    one-byte form is read in line (nearly every length and the first 64 deltas) and longer
    ones by ``varint``: a call per field would cost the Python walk half its speed.
    """
    try:
        for i in range(count):
            b = buf[pos]
            if b < 0x80:
                size, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                size, pos = varint(buf, pos, 5)
            rec_end = pos + size
            if size < 6 or rec_end > end:
                raise faults.error(faults.size, size, i)
            b = buf[pos + 1]  # past the attributes byte, unused in v2
            if b < 0x80:
                ts_delta, p = (b >> 1) ^ -(b & 1), pos + 2
            else:
                ts_delta, p = varint(buf, pos + 1, 10)
            b = buf[p]
            if b < 0x80:
                offset_delta, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                offset_delta, p = varint(buf, p, 5)
            if sequential and offset_delta != i:
                raise faults.error(faults.offset_delta, offset_delta, i)
            # Key, then value: a length, then its bytes (none when null, -1).
            lengths = []
            for message in (faults.key, faults.value):
                b = buf[p]
                if b < 0x80:
                    n, p = (b >> 1) ^ -(b & 1), p + 1
                else:
                    n, p = varint(buf, p, 5)
                if n < 0:
                    if n != -1:
                        raise faults.error(message, n, i)
                    lengths.append((p, n))
                else:
                    if bounded and p + n > rec_end:
                        raise faults.error(message, n, i)
                    lengths.append((p, n))
                    p += n
            if buf[p] == 0:  # no headers: the common case, without a call
                hdrs, p = ([] if headers else None), p + 1
            else:
                hdrs, p = read_headers(buf, p, rec_end, faults, i, keep=headers, bounded=bounded)
            if p != rec_end:
                raise faults.error(faults.unfilled, size, i)
            (key_at, key_length), (value_at, value_length) = lengths
            yield ts_delta, offset_delta, key_at, key_length, value_at, value_length, hdrs, rec_end
            pos = rec_end
    except IndexError:
        raise faults.error(faults.past_end) from None
    if pos != end:
        raise faults.error(faults.left_over, count)
