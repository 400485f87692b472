"""Fetched record batches straight into Arrow columns, without a Python object per record: the
hot path of the Spark source and of Iceberg translation.

The general decoder (``rivulet.protocol.records``) builds a Python object per record. Here
the record bytes of a fetch are copied once into one buffer (a chunk), and the fields are
found with pyarrow.compute for the whole chunk at once; Python only locates where each record
starts, and for batches of same-shaped records not even that (see ``_uniform_starts``).
Keys and values are then gathered by Arrow: the positions [key start, key end, value start,
value end] of consecutive records never decrease, so read as the offsets of one binary array
they make every fourth element a key and every fourth+2 a value, which ``take`` compacts in
C++. Nulls are told from empty values by the length byte in front (zigzag -1 is 0x01, 0 is
0x00). Anything unusual (varints over 3 bytes, few records, malformed data) goes through a
per-record loop, ``Chunk._parse``. With the C accelerator built, ``record_layout`` does the
whole walk in one pass and without the GIL, so a translation thread leaves the event loop run.
"""

from __future__ import annotations

import os
from array import array
from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

from rivulet.protocol.compression import decompress
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.protocol.record_walk import Faults, Header, read_headers, varint, walk_records
from rivulet.protocol.records import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    HEADER_SIZE,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    ControlRecordType,
    crc_matches,
    decode_batch,
    iter_batches,
    parse_control_record,
    record_starts,
)

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADERS_TYPE = pa.list_(pa.field("element", HEADER_TYPE))
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")

ARROW_SCHEMA = pa.schema([
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", TIMESTAMP_TYPE),
    pa.field("timestampType", pa.int32()),
    pa.field("headers", HEADERS_TYPE),
])
ARROW_SCHEMA_NO_HEADERS = pa.schema(list(ARROW_SCHEMA)[:-1])

MAX_DECOMPRESSED = 256 << 20


def _corrupt(msg: str) -> ApiError:
    return ApiError(ErrorCode.CORRUPT_MESSAGE, msg)


# What the source says of malformed records: the broker stored them, so they are corrupt.
_FAULTS = Faults(
    ErrorCode.CORRUPT_MESSAGE,
    size="invalid record size {n}",
    offset_delta="",  # not checked: a compacted batch has gaps
    key="invalid key length {n}",
    value="invalid value length {n}",
    header_count="invalid header count {n}",
    header_key="invalid header key length {n}",
    header_value="invalid header value length {n}",
    unfilled="record fields do not fill the record",
    past_end="record runs past the end of its batch",
    left_over="record batch holds more bytes than its records",
)


def _headers(buf: Any, q: int, end: int) -> list[Header]:
    """The headers of the record ending at ``end`` whose header count is at ``q``."""
    out, q = read_headers(buf, q, end, _FAULTS)
    if q != end or out is None:
        raise _FAULTS.error(_FAULTS.unfilled)
    return out


class Chunk:
    """Records of one topic-partition: batches are appended raw, then ``finish`` decodes them.

    Decoding is vectorized: a Python loop only hops from record to record (one varint each)
    and pyarrow.compute reads every other field at once for the whole chunk. Batches that
    do not fit that path (few records, varints over 3 bytes, anything malformed) go through
    ``_parse``, the per-record loop, which also produces the precise error.
    """

    __slots__ = ("data", "want_headers", "n", "batches", "ts_types", "pos", "offsets", "timestamps",
                 "headers", "_done", "_pos", "_offs", "_ts", "vectorized", "copied", "over")

    def __init__(self, want_headers: bool, over: Any = None) -> None:
        # Over a buffer (a fetch response's records), uncompressed batches stay where they are
        # (``add_span``) until a batch that must be copied (a decompressed one) arrives.
        self.over = over
        self.data: Any = bytearray() if over is None else over
        self.copied = over is None
        self.want_headers = want_headers
        self.n = 0
        self.batches: list[tuple[int, int, int, int, int, bool, int | None]] = []
        self.ts_types = array("i")
        # Filled by finish(): per record [key start, key end, value start, value end] (+1
        # closing entry) as int32, offsets and timestamps (ms) as int64.
        self.pos: pa.Array | None = None
        self.offsets: pa.Array | None = None
        self.timestamps: pa.Array | None = None
        self.headers: list[tuple[int, list]] = []   # (record index, headers), records that have any
        self._done = False
        self.vectorized = False

    def add(self, raw: Any, base_offset: int, base_ts: int, count: int, contiguous: bool,
            log_append_time: int | None) -> None:
        """Append the ``count`` records of one batch, whose records section is ``raw`` (copied)."""
        if not self.copied:
            self._copy_spans()
        data = self.data
        start = len(data)
        data += raw
        self._append(start, len(data), count, base_offset, base_ts, contiguous, log_append_time)

    def add_span(self, start: int, stop: int, base_offset: int, base_ts: int, count: int, contiguous: bool,
                 log_append_time: int | None) -> None:
        """Like ``add`` for the records at [start, stop) of the buffer the chunk was made over,
        without copying them (copied if an earlier batch had to be)."""
        if self.copied:
            self.add(self.over[start:stop], base_offset, base_ts, count, contiguous, log_append_time)
            return
        self._append(start, stop, count, base_offset, base_ts, contiguous, log_append_time)

    def _append(self, start: int, stop: int, count: int, base_offset: int, base_ts: int, contiguous: bool,
                log_append_time: int | None) -> None:
        if stop > 0x7FFFFFFF:  # positions are int32
            raise _corrupt("chunk larger than 2 GiB")
        self.batches.append((start, stop, count, base_offset, base_ts, contiguous, log_append_time))
        self.ts_types.extend(array("i", [0 if log_append_time is None else 1]) * count)
        self.n += count

    def _copy_spans(self) -> None:
        """Copy the batches added in place into a buffer of the chunk's own."""
        data = bytearray()
        moved = []
        for start, stop, *rest in self.batches:
            at = len(data)
            data += self.over[start:stop]
            moved.append((at, len(data), *rest))
        self.batches = moved
        self.data = data
        self.copied = True

    def finish(self) -> None:
        if self._done:
            return
        try:
            self.vectorized = self._vectorized()
        except (IndexError, pa.ArrowException):  # e.g. a length pointing past the data
            self.vectorized = False
            self.headers = []
        if not self.vectorized:
            self._python()
        self._done = True

    def bounds(self, start: int, end: int) -> tuple[int, int]:
        """Row indexes [lo, hi) of the offsets in [start, end)."""
        self.finish()
        if not self.n:
            return 0, 0
        assert self.offsets is not None
        lo = pc.sum(pc.less(self.offsets, _scalar(start, pa.int64()))).as_py() or 0
        hi = pc.sum(pc.less(self.offsets, _scalar(end, pa.int64()))).as_py() or 0
        return lo, hi

    # ------------------------------------------------------------ vectorized decoding
    def _vectorized(self) -> bool:
        if _record_layout is not None and self.n >= LAYOUT_MIN_RECORDS:
            layout = _record_layout(self.data, self.batches, self.want_headers)
            if layout is not None:
                pos, offsets, timestamps, with_headers = layout
                n, i64 = self.n, pa.int64()
                self.pos = pa.Array.from_buffers(_I32, 4 * n + 1, [None, pa.py_buffer(pos)])
                self.offsets = pa.Array.from_buffers(i64, n, [None, pa.py_buffer(offsets)])
                self.timestamps = pa.Array.from_buffers(i64, n, [None, pa.py_buffer(timestamps)])
                self.headers = [(i, _headers(self.data, ve, end)) for i, ve, end in with_headers]
                return True
        return self.n >= VECTOR_MIN_RECORDS and self._vectorized_arrow()

    def _vectorized_arrow(self) -> bool:
        data = self.data
        n = self.n
        starts = array("i")
        expect = array("i")   # the size each start was placed by, -1 where the loop found it
        base_off = array("q")
        base_ts = array("q")
        own_ts = array("q")
        try:
            for start, stop, count, bo, bt, contiguous, lat in self.batches:
                if not (contiguous and _uniform_starts(data, start, stop, count, starts, expect)):
                    if record_starts(data, start, count, starts) != stop:
                        return False
                    expect.extend(_MINUS_ONE * count)
                base_off.extend(array("q", [bo]) * count)
                base_ts.extend(array("q", [bt if lat is None else lat]) * count)
                own_ts.extend(array("q", [1 if lat is None else 0]) * count)
        except (IndexError, ApiError):
            return False  # the per-record loop says what is wrong
        buf = pa.py_buffer(data)
        u8 = pa.Array.from_buffers(pa.uint8(), len(data), [None, buf])
        last = len(data) - 1
        add = pc.add
        zero = _i32(0)
        st = pa.Array.from_buffers(_I32, n, [None, pa.py_buffer(starts)])
        size, w, wide = _vvarint(u8, st, last)
        guessed = pa.Array.from_buffers(_I32, n, [None, pa.py_buffer(expect)])
        if pc.any(pc.and_(pc.not_equal(guessed, _i32(-1)), pc.not_equal(size, guessed))).as_py():
            return False  # a record is not where the uniform layout put it
        body = add(st, w)
        rec_end = add(body, size)
        q = add(body, _ONE)  # attributes
        ts, w, wide1 = _vvarint(u8, q, last)
        q = add(q, w)
        od, w, wide2 = _vvarint(u8, q, last)
        q = add(q, w)
        kl, w, wide3 = _vvarint(u8, q, last)
        ks = add(q, w)
        ke = add(ks, pc.max_element_wise(kl, zero))
        vl, w, wide4 = _vvarint(u8, pc.min_element_wise(ke, _i32(last)), last)
        vs = add(ke, w)
        ve = add(vs, pc.max_element_wise(vl, zero))
        if wide or wide1 or wide2 or wide3 or wide4:
            return False
        if pc.any(pc.or_(pc.less(kl, _i32(-1)), pc.less(vl, _i32(-1)))).as_py() or \
                pc.any(pc.greater_equal(ve, rec_end)).as_py():
            return False
        hcount = u8.take(pc.min_element_wise(ve, _i32(last)))
        has_headers = pc.not_equal(hcount, 0)
        # A record without headers ends right after its header count.
        if not pc.all(pc.or_(pc.equal(add(ve, _ONE), rec_end), has_headers)).as_py():
            return False
        if self.want_headers and pc.any(has_headers).as_py():
            ve_l, end_l = ve.to_pylist(), rec_end.to_pylist()
            for i in pc.indices_nonzero(has_headers).to_pylist():
                self.headers.append((i, _headers(data, ve_l[i], end_l[i])))
        # (Arithmetic with Python ints widens to int64: back to int32, the binary offsets' type.)
        inter = pa.concat_arrays([a.cast(_I32) for a in (ks, ke, vs, ve)]).take(_interleave4(n))
        self.pos = pa.concat_arrays([inter, ve.slice(n - 1, 1).cast(_I32)])
        i64 = pa.int64()
        self.offsets = add(pa.Array.from_buffers(i64, n, [None, pa.py_buffer(base_off)]), od.cast(i64))
        self.timestamps = add(pa.Array.from_buffers(i64, n, [None, pa.py_buffer(base_ts)]),
                              pc.multiply(ts.cast(i64), pa.Array.from_buffers(i64, n, [None, pa.py_buffer(own_ts)])))
        return True

    # ------------------------------------------------------------ the per-record loop
    def _python(self) -> None:
        data = self.data
        self._pos = array("i")
        self._offs = array("q")
        self._ts = array("q")
        self.headers = []
        done = 0
        for start, stop, count, bo, bt, contiguous, lat in self.batches:
            self._parse(data, start, stop, count, bo, bt, contiguous, lat is None, done)
            if contiguous:
                self._offs.extend(range(bo, bo + count))
            if lat is not None:
                self._ts.extend(array("q", [lat]) * count)
            done += count
        n = self.n
        pos = self._pos
        pos.append(pos[-1] if n else 0)
        self.pos = pa.Array.from_buffers(pa.int32(), 4 * n + 1, [None, pa.py_buffer(pos)])
        self.offsets = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(self._offs)])
        self.timestamps = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(self._ts)])

    def _parse(self, buf: Any, p: int, stop: int, count: int, base_off: int, base_ts: int, contiguous: bool,
               own_ts: bool, idx: int) -> None:
        put = self._pos.extend
        put_ts = self._ts.append
        put_off = self._offs.append
        headers = self.headers
        for ts_delta, offset_delta, key_at, key_length, value_at, value_length, hdrs, _end in walk_records(
                buf, p, stop, count, _FAULTS, headers=self.want_headers):
            put((key_at, key_at + key_length if key_length > 0 else key_at,
                 value_at, value_at + value_length if value_length > 0 else value_at))
            if own_ts:
                put_ts(base_ts + ts_delta)
            if not contiguous:
                put_off(base_off + offset_delta)
            if hdrs:
                headers.append((idx, hdrs))
            idx += 1

    # ------------------------------------------------------------ to Arrow
    def to_arrow(self, topic: str, partition: int, lo: int = 0, hi: int | None = None) -> pa.RecordBatch:
        """Rows [lo, hi) as a RecordBatch in the Spark source's schema (``ARROW_SCHEMA``)."""
        hi = self.n if hi is None else hi
        keys, values = self.keys_values(lo, hi)
        m = hi - lo
        ts_types = pa.Array.from_buffers(pa.int32(), self.n, [None, pa.py_buffer(self.ts_types)]).slice(lo, m)
        cols = [keys, values, pa.repeat(_string(topic), m), pa.repeat(_i32(partition), m),
                self.offset_column(lo, hi), self.timestamp_column(lo, hi), ts_types]
        if not self.want_headers:
            return pa.RecordBatch.from_arrays(cols, schema=ARROW_SCHEMA_NO_HEADERS)
        cols.append(self._headers_column(lo, hi))
        return pa.RecordBatch.from_arrays(cols, schema=ARROW_SCHEMA)

    def keys_values(self, lo: int, hi: int) -> tuple[pa.Array, pa.Array]:
        """The keys and values of rows [lo, hi), binary (null where the record has none)."""
        self.finish()
        assert self.pos is not None
        n = self.n
        data = pa.py_buffer(self.data)
        positions = self.pos
        if positions.type != _I32 or len(positions) != 4 * n + 1:
            raise AssertionError("record positions must be 4n+1 int32")
        spans = pa.Array.from_buffers(pa.binary(), 4 * n, [None, positions.buffers()[1], data],
                                      offset=positions.offset)
        data_u8 = pa.Array.from_buffers(pa.uint8(), len(self.data), [None, data])
        idx = _stride4(lo, hi)
        return _column(spans, positions, data_u8, idx), _column(spans, positions, data_u8, pc.add(idx, _TWO))

    def offset_column(self, lo: int, hi: int) -> pa.Array:
        self.finish()
        assert self.offsets is not None
        return self.offsets.slice(lo, hi - lo)

    def timestamp_column(self, lo: int, hi: int) -> pa.Array:
        """Timestamps of rows [lo, hi) in microseconds, UTC (the record's, or its batch's log
        append time)."""
        self.finish()
        assert self.timestamps is not None
        return pc.multiply(self.timestamps.slice(lo, hi - lo), _THOUSAND).view(TIMESTAMP_TYPE)

    def headers_column(self, lo: int, hi: int, empty: bool = False) -> pa.Array:
        """Headers of rows [lo, hi): a list of (key, value) structs, null for a record without
        any, or an empty list with ``empty`` (the Iceberg table's way). Needs ``want_headers``."""
        self.finish()
        return self._headers_column(lo, hi, empty)

    def _headers_column(self, lo: int, hi: int, empty: bool = False) -> pa.Array:
        m = hi - lo
        rows = [(i - lo, h) for i, h in self.headers if lo <= i < hi]
        if not rows and not empty:
            return pa.nulls(m, HEADERS_TYPE)
        counts = array("i", [0]) * m   # headers per row; only rows with headers are visited
        valid = array("b", [0]) * m
        keys: list[str] = []
        vals: list[bytes | None] = []
        for i, h in rows:
            if h:
                valid[i] = 1
                counts[i] = len(h)
                for k, v in h:
                    keys.append(k)
                    vals.append(v)
        offsets = pc.cumulative_sum(pa.Array.from_buffers(_I32, m, [None, pa.py_buffer(counts)]))
        offsets = pa.concat_arrays([_ARANGE_ZERO, offsets])
        structs = pa.StructArray.from_arrays([pa.array(keys, pa.string()), pa.array(vals, pa.binary())],
                                             fields=list(HEADER_TYPE))
        mask = None if empty else pc.equal(pa.Array.from_buffers(pa.int8(), m, [None, pa.py_buffer(valid)]),
                                           _scalar(0, pa.int8()))
        return pa.ListArray.from_arrays(offsets, structs, type=HEADERS_TYPE, mask=mask)


VECTOR_MIN_RECORDS = 256
# The C layout has no fixed cost to pay back: it takes chunks of any size, so the per-record
# Python loop (the shared record walk) runs only without the accelerator or on odd data.
LAYOUT_MIN_RECORDS = 1

# The layout of a chunk's records in one C pass (rivulet.protocol._speedups), when built;
# the pyarrow.compute path below is what it must agree with.
_record_layout: Callable[[bytearray, list, bool], tuple[bytes, bytes, bytes, list] | None] | None = None
if os.environ.get("RIVULET_NO_SPEEDUPS", "") in ("", "0"):
    try:
        from rivulet.protocol._speedups import record_layout as _record_layout
    except ImportError:  # not built, or built before it existed
        pass
_I32 = pa.int32()


_MINUS_ONE = array("i", [-1])
MAX_RUNS = 32


def _uniform_starts(buf: Any, start: int, stop: int, count: int, starts: array, expect: array) -> bool:
    """Record starts without visiting each record, for batches of same-shaped records.

    Records with fixed-size keys and values differ only where a varint grows a byte (the
    offset delta at 64 and 8192, the timestamp delta at 64 ms, ...): the batch is a few runs
    of equal strides. Each run is measured by galloping (is the record k strides on still
    the same size?) and a binary search, so a batch costs a few dozen varint reads instead
    of one per record. This only places the starts: ``_vectorized`` then checks every
    record's size against its run, which proves the layout (each start is the previous one
    plus its declared size), and falls back to the per-record walk if one differs.
    """
    if count < 64:
        return False
    mark = len(starts)
    pos = start
    i = 0
    runs = 0

    def size_at(q: int) -> int | None:
        if q >= stop:
            return None
        try:  # q may land inside a record, on anything
            return varint(buf, q, 10)[0]
        except (ApiError, IndexError):
            return None

    while i < count:
        runs += 1
        try:
            size, body = varint(buf, pos, 10)
        except (ApiError, IndexError):
            size, body = 0, pos
        stride = body - pos + size
        if runs > MAX_RUNS or size <= 0 or (runs > 3 and i < 16 * runs):  # not same-shaped
            del starts[mark:]
            del expect[mark:]
            return False
        left = count - i
        good, k = 0, 1   # record i+good has this size; find the first k that does not
        while k < left and size_at(pos + k * stride) == size:
            good, k = k, min(2 * k, left)
        if k >= left and size_at(pos + (left - 1) * stride) == size:
            m = left
        else:
            lo, hi = good, k   # lo: same size, hi: differs (or past the batch)
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if size_at(pos + mid * stride) == size:
                    lo = mid
                else:
                    hi = mid
            m = hi
        end = pos + m * stride
        starts.extend(array("i", range(pos, end, stride)))
        expect.extend(array("i", [size]) * m)
        pos = end
        i += m
    if pos != stop:
        del starts[mark:]
        del expect[mark:]
        return False
    return True


# Scalars made from buffers: pa.scalar, pa.array and Python numbers handed to pyarrow.compute
# import pandas (a third of a second of CPU in every Python worker and in the streaming
# source's driver-side process); the decoding path never needs it.
_INT_CODES = {pa.int32(): "i", pa.int64(): "q", pa.uint8(): "B", pa.int8(): "b"}


def _scalar(v: int, typ: pa.DataType) -> pa.Scalar:
    return pa.Array.from_buffers(typ, 1, [None, pa.py_buffer(array(_INT_CODES[typ], [v]))])[0]


def _i32(v: int) -> pa.Scalar:
    return _scalar(v, _I32)


def _string(v: str) -> pa.Scalar:
    b = v.encode()
    return pa.Array.from_buffers(pa.string(), 1, [None, pa.py_buffer(array("i", [0, len(b)])), pa.py_buffer(b)])[0]


_ZERO, _ONE, _TWO, _SEVEN, _X7F = _i32(0), _i32(1), _i32(2), _i32(7), _i32(0x7F)
_THOUSAND = _scalar(1000, pa.int64())
_U8_ONE = _scalar(1, pa.uint8())
_NULL_BINARY = pa.nulls(1, pa.binary())[0]
_ARANGE_ZERO = pa.Array.from_buffers(_I32, 1, [None, pa.py_buffer(array("i", [0]))])


def _vvarint(u8: pa.Array, pos: pa.Array, last: int) -> tuple[pa.Array, Any, bool]:
    """The zigzag varints at ``pos``, all at once: (values, widths, any wider than 3 bytes).

    Widths come back as one int32 scalar when every varint has the same, the common case,
    which saves a pass per later field; one-byte varints skip the multi-byte arithmetic.
    """
    take = u8.take
    b0 = take(pos).cast(_I32)
    c0 = pc.shift_right(b0, _SEVEN)
    if not pc.any(pc.not_equal(c0, 0)).as_py():
        raw = b0
        width: Any = _ONE
    else:
        cap = _i32(last)
        b1 = take(pc.min_element_wise(pc.add(pos, _ONE), cap)).cast(_I32)
        c1 = pc.multiply(c0, pc.shift_right(b1, _SEVEN))
        raw = pc.add(pc.bit_wise_and(b0, _X7F), pc.multiply(c0, pc.shift_left(pc.bit_wise_and(b1, _X7F), _SEVEN)))
        if pc.any(pc.not_equal(c1, 0)).as_py():
            b2 = take(pc.min_element_wise(pc.add(pos, _TWO), cap)).cast(_I32)
            if pc.any(pc.not_equal(pc.multiply(c1, pc.shift_right(b2, _SEVEN)), 0)).as_py():
                return raw, _ONE, True
            raw = pc.add(raw, pc.multiply(c1, pc.shift_left(pc.bit_wise_and(b2, _X7F), _i32(14))))
            width = pc.add(pc.add(c0, c1), _ONE)
        elif pc.all(pc.equal(c0, 1)).as_py():
            width = _TWO
        else:
            width = pc.add(c0, _ONE)
    value = pc.bit_wise_xor(pc.shift_right(raw, _ONE), pc.negate(pc.bit_wise_and(raw, _ONE)))
    return value, width, False


_ARANGE: pa.Array | None = None


def _arange(n: int) -> pa.Array:
    global _ARANGE
    if _ARANGE is None or len(_ARANGE) < n:
        size = max(n, 2 * len(_ARANGE) if _ARANGE is not None else 1 << 16)
        _ARANGE = pa.Array.from_buffers(_I32, size, [None, pa.py_buffer(array("i", range(size)))])
    return _ARANGE.slice(0, n)


def _interleave4(n: int) -> pa.Array:
    """Indexes that turn [a..., b..., c..., d...] (n each) into [a0, b0, c0, d0, a1, ...]."""
    k = _arange(4 * n)
    return pc.add(pc.shift_right(k, 2), pc.multiply(pc.bit_wise_and(k, 3), n))


_STRIDE: pa.Array | None = None


def _stride4(lo: int, hi: int) -> pa.Array:
    """[4*lo, 4*(lo+1), ..., 4*(hi-1)] as int32, sliced from a cached array."""
    global _STRIDE
    if _STRIDE is None or len(_STRIDE) < hi:
        size = max(hi, 2 * len(_STRIDE) if _STRIDE is not None else 1 << 16)
        _STRIDE = pa.Array.from_buffers(_I32, size, [None, pa.py_buffer(array("i", range(0, 4 * size, 4)))])
    return _STRIDE.slice(lo, hi - lo)


def _column(spans: pa.Array, positions: pa.Array, data_u8: pa.Array, idx: pa.Array) -> pa.Array:
    col = spans.take(idx)
    if len(col) == 0:
        return col
    empty = pc.equal(pc.binary_length(col), _ZERO)
    if not pc.any(empty).as_py():
        return col
    # A zero length is null when the length varint in front of it is zigzag(-1) == 0x01.
    marker = data_u8.take(pc.subtract(positions.take(idx), _ONE))
    null = pc.and_(empty, pc.equal(marker, _U8_ONE))
    if pc.all(null).as_py():
        return pa.nulls(len(col), pa.binary())
    if not pc.any(null).as_py():
        return col
    return pc.if_else(null, _NULL_BINARY, col)


class Decoded:
    """What one partition's records field held: where to continue, and the log's bounds."""

    __slots__ = ("next_offset", "first_offset")

    def __init__(self, next_offset: int, first_offset: int | None) -> None:
        self.next_offset = next_offset
        self.first_offset = first_offset


def next_offset_after(records: Any, offset: int, end: int) -> int:
    """Where ``decode_into`` will continue, from the batch headers alone (cheap), so that the
    next Fetch can be sent before this one is decoded."""
    nxt = offset
    for _, h in iter_batches(records):
        if h.base_offset >= end and h.base_offset + h.last_offset_delta + 1 > nxt:
            break
        nxt = max(nxt, h.base_offset + h.last_offset_delta + 1)
    return nxt


def decode_into(chunk: Chunk, records: Any, offset: int, end: int, read_committed: bool,
                aborted: list[tuple[int, int]] | None, verify_crc: bool = True) -> Decoded:
    """Decode a Fetch response's records for one partition into ``chunk``, up to ``end``.

    A chunk made with ``Chunk(..., over=records)`` (a memoryview of bytes) refers to the
    uncompressed batches in place instead of copying them, so ``records`` must stay unchanged
    until the chunk is turned into Arrow. Batches wholly below ``offset`` are skipped (a fetch returns the batch holding ``offset``),
    and decoding stops at the first batch starting at ``end`` or later. Control batches never
    become rows; under read_committed neither do aborted transactions (``aborted``: (first
    offset, producer id) from the response, used as Java's Fetcher uses them).
    ``first_offset`` is the base offset of the first batch at or past ``offset``, of any kind:
    above ``offset`` it means a gap, which is data loss only below the log start.
    """
    view = records if isinstance(records, memoryview) else memoryview(records)
    if view.format != "B":
        view = view.cast("B")
    # A chunk made over these very records takes the uncompressed batches where they are.
    in_place = chunk.over is records and view is records
    nxt = offset
    first: int | None = None
    aborted_list = sorted(aborted or [])
    ai = 0
    aborted_pids: set[int] = set()
    for pos, h in iter_batches(view):
        stop = pos + h.size
        batch_next = h.base_offset + h.last_offset_delta + 1
        if batch_next <= nxt:
            continue
        if h.base_offset >= end:
            break
        if first is None:
            first = h.base_offset
        if verify_crc and not crc_matches(view, pos, stop, h.crc):
            raise _corrupt(f"record batch at offset {h.base_offset} fails its CRC check")
        attrs = h.attributes
        if read_committed and h.producer_id >= 0:
            last = h.base_offset + h.last_offset_delta
            while ai < len(aborted_list) and aborted_list[ai][0] <= last:
                aborted_pids.add(aborted_list[ai][1])
                ai += 1
            if attrs & CONTROL_MASK:
                batch = decode_batch(view, pos, verify_crc=False)
                if batch.records and parse_control_record(batch.records[0]).type == ControlRecordType.ABORT:
                    aborted_pids.discard(h.producer_id)
                nxt = batch_next
                continue
            if attrs & TRANSACTIONAL_MASK and h.producer_id in aborted_pids:
                nxt = batch_next
                continue
        elif attrs & CONTROL_MASK:
            nxt = batch_next
            continue
        if h.records_count:
            codec = attrs & COMPRESSION_MASK
            facts = (h.base_offset, h.base_timestamp, h.records_count, h.records_count == h.last_offset_delta + 1,
                     h.max_timestamp if attrs & TIMESTAMP_TYPE_MASK else None)
            if codec:
                # Into this thread's reused buffer (no zero-filled buffer per batch, no copy out
                # of it): the chunk copies the records at once.
                chunk.add(decompress(codec, view[pos + HEADER_SIZE:stop], MAX_DECOMPRESSED, reuse_buffer=True),
                          *facts)
            elif in_place:
                chunk.add_span(pos + HEADER_SIZE, stop, *facts)
            else:
                chunk.add(view[pos + HEADER_SIZE:stop], *facts)
        nxt = batch_next
    return Decoded(nxt, first)
