"""The C record decoder (rivulet.protocol._speedups) against the pure-Python one.

Both must return equal records and raise the same ApiError (code and message) for every
input, valid or hostile, and the C one must never read outside the buffer or crash.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rivulet.protocol import records
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.protocol.records import HEADER_SIZE, Record, decode_batch, encode_batch, parse_batch_header

pytestmark = pytest.mark.fast

try:
    from rivulet.protocol import _speedups
except ImportError:  # reported by test_extension_is_built
    _speedups = None
else:
    if not records.SPEEDUPS:  # RIVULET_NO_SPEEDUPS=1: bind it here, to compare all the same
        _speedups.setup(Record, records._invalid, records._py_parse_records)

needs_c = pytest.mark.skipif(_speedups is None, reason="the C accelerator is not built")

FUZZ = settings(
    max_examples=int(os.environ.get("RIVULET_FUZZ_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
T0 = 1_700_000_000_000


def outcome(fn: Any, *args: Any) -> Any:
    """The records with the type of every field, or the error's code, message and context flag."""
    try:
        result = fn(*args)
    except ApiError as exc:
        return ("error", exc.code, exc.message, exc.__suppress_context__, exc.__cause__)
    assert type(result) is list
    shapes = [
        (type(r), type(r.offset), type(r.timestamp), type(r.key), type(r.value), [tuple(map(type, h)) for h in r.headers])
        for r in result
    ]
    return ("ok", result, shapes)


def both(*args: Any) -> Any:
    """Run both decoders on the same arguments and check they agree."""
    py = outcome(records._py_parse_records, *args)
    if _speedups is not None:
        c = outcome(_speedups.parse_records, *args)
        assert c == py
    return py


# --- building records byte by byte --------------------------------------------------------


def uvarint(v: int, pad: int = 0) -> bytes:
    """Unsigned varint, with ``pad`` redundant continuation bytes (still decodable)."""
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v or pad:
            out.append(b | 0x80)
            if not v:
                pad -= 1
                while pad:
                    out.append(0x80)
                    pad -= 1
                out.append(0)
                return bytes(out)
        else:
            out.append(b)
            return bytes(out)


def zz(n: int) -> int:
    return n << 1 if n >= 0 else ((-n) << 1) - 1


def varint(n: int, pad: int = 0) -> bytes:
    return uvarint(zz(n), pad)


def rarely(common: st.SearchStrategy, rare: st.SearchStrategy) -> st.SearchStrategy:
    """``rare`` one time in ten, so that most records stay valid and reach the next field."""
    return st.integers(0, 9).flatmap(lambda i: rare if i == 7 else common)


@st.composite
def varint_of(draw: st.DrawFn, n: int, max_len: int) -> bytes:
    """n as a zigzag varint, sometimes padded with redundant bytes, rarely past ``max_len``."""
    minimal = len(varint(n))
    room = max(0, max_len - minimal)
    pad = draw(st.sampled_from([0, 0, 0, 0, 0, min(1, room), room]))
    if draw(st.integers(0, 39)) == 29:
        pad = room + 1  # one byte too many
    return varint(n, pad)


ts_deltas = st.one_of(
    st.integers(-1000, 1000),
    st.integers(-(1 << 40), 1 << 40),
    st.sampled_from([I64_MIN, I64_MAX, I64_MIN + 1, I64_MAX - 1, -1, 0, (1 << 62), -(1 << 62)]),
    st.integers(-(1 << 69), (1 << 69) - 1),  # only reachable with 10-byte varints
)
offset_deltas = st.one_of(st.integers(0, 100), st.integers(-(1 << 34), (1 << 34) - 1))
lengths_or_null = rarely(st.none() | st.binary(max_size=40), st.sampled_from([-2, -3, -100, -(1 << 34)]))


@st.composite
def field(draw: st.DrawFn, value: bytes | int | None) -> bytes:
    """A key, value or header value: None is length -1, an int is a bogus negative length."""
    if value is None:
        return draw(varint_of(-1, 5))
    if isinstance(value, int):
        return draw(varint_of(value, 5))
    return draw(varint_of(len(value), 5)) + value


@st.composite
def raw_record(draw: st.DrawFn) -> bytes:
    body = bytearray(b"\x00")  # attributes
    ts = draw(ts_deltas)
    # The timestamp delta may take up to 10 bytes; a value past 64 bits needs all of them.
    body += draw(varint_of(ts, 10))
    body += draw(varint_of(draw(offset_deltas), 5))
    body += draw(field(draw(lengths_or_null)))
    body += draw(field(draw(lengths_or_null)))
    headers = draw(
        st.lists(
            st.tuples(
                st.binary(max_size=8) | st.text(max_size=4).map(str.encode) | st.just(b"\xff\xfe\xc3"),
                st.none() | st.binary(max_size=10),
            ),
            max_size=3,
        )
    )
    count = len(headers)
    if draw(st.integers(0, 19)) == 13:
        count = draw(st.sampled_from([-1, -5, count + 1, count + 1000, (1 << 34) - 1]))
    body += draw(varint_of(count, 5))
    for name, hv in headers:
        if draw(st.integers(0, 19)) == 13:
            body += varint(draw(st.sampled_from([-2, -1, 100])))
        else:
            body += draw(varint_of(len(name), 5)) + name
        body += draw(field(hv))
    size = len(body)
    if draw(st.integers(0, 19)) == 13:
        size += draw(st.sampled_from([-7, -1, 1, 3, -size, -size - 1, 1 << 34]))
    return draw(varint_of(size, 5)) + bytes(body)


@st.composite
def record_sections(draw: st.DrawFn) -> tuple:
    """Arguments for _parse_records: records between random bytes, with nearby counts and ends."""
    recs = draw(st.lists(raw_record(), max_size=6))
    section = bytearray(b"".join(recs))
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2]))):  # damage
        if not section:
            break
        kind = draw(st.sampled_from(["flip", "set", "truncate", "insert"]))
        at = draw(st.integers(0, len(section) - 1))
        if kind == "flip":
            section[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set":
            section[at] = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF]))
        elif kind == "truncate":
            del section[at:]
        else:
            section[at:at] = draw(st.binary(min_size=1, max_size=4))
    prefix = draw(st.binary(max_size=8))
    suffix = draw(st.binary(max_size=8) | st.just(b"\x80" * 12) | st.just(b"\x10" * 40))
    pos = len(prefix)
    end = pos + len(section) + draw(st.sampled_from([0, 0, 0, 0, -1, 1, -3, 12]))
    count = len(recs) + draw(st.sampled_from([0, 0, 0, 0, -1, 1, 2, 1 << 30]))
    if draw(st.integers(0, 19)) == 13:
        count = draw(st.sampled_from([-1, 0, (1 << 31) - 1]))
    base_offset = draw(st.one_of(st.integers(0, 1 << 40), st.sampled_from([I64_MIN, I64_MAX, -1])))
    base_timestamp = draw(st.one_of(st.just(T0), st.integers(I64_MIN, I64_MAX), st.sampled_from([I64_MIN, I64_MAX])))
    log_append_time = draw(st.none() | st.just(T0 + 5) | st.sampled_from([I64_MAX, -1]))
    return (prefix + bytes(section) + suffix, pos, end, count, base_offset, base_timestamp, log_append_time)


# --- the extension is there -----------------------------------------------------------------


def test_extension_is_built() -> None:
    """pip install -e builds the accelerator wherever a compiler exists, as in CI; a silent
    fall-back to pure Python would make the consumer several times slower."""
    assert _speedups is not None, "rivulet.protocol._speedups is missing: run pip install -e . (needs gcc)"
    if os.environ.get("RIVULET_NO_SPEEDUPS", "") in ("", "0"):
        assert records.SPEEDUPS
        assert records._parse_records is _speedups.parse_records


# --- equivalence ------------------------------------------------------------------------------


@FUZZ
@given(record_sections())
def test_same_results_and_errors(args: tuple) -> None:
    both(*args)


def test_a_null_header_value_read_past_the_record_end_is_the_same_error() -> None:
    """Found by the fuzz above: record 2's second header ends with a null value whose length
    byte lies past the record; the C walk went on to a third key, the Python one stopped."""
    data = (b"\xb0\x80\x80\x80\x00\x00\x80\x01\x00\x01\x8c\x00" + bytes(6) + b"\x02\x0e" + bytes(7)
            + b"\x81\x00 \x00\x80\x01\x80\x80\x80\x01\x01\x01\x06\x06\xff\xfe\xc3\x01\x00\x01\x02\x00\x01"
            + b"\x0c\x00\x00\x00\x01\x01\x00" * 4)
    result = both(data, 0, 78, 6, 0, T0, None)
    assert result[0] == "error" and result[2] == "record fields do not fill the record's declared size"


@FUZZ
@given(st.binary(max_size=200), st.integers(0, 8), st.integers(-2, 210), st.integers(-1, 40))
def test_random_bytes(data: bytes, pos: int, end: int, count: int) -> None:
    both(data, pos, end, count, 0, T0, None)


@FUZZ
@given(
    st.lists(
        st.builds(
            Record,
            offset=st.just(0),
            timestamp=st.integers(T0 - 10**6, T0 + 10**6),
            key=st.none() | st.binary(max_size=300),
            value=st.none() | st.binary(max_size=300),
            headers=st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=20)), max_size=3),
        ),
        min_size=1,
        max_size=20,
    ),
    st.integers(0, 1 << 40),
    st.booleans(),
)
def test_encoded_batches_round_trip(recs: list[Record], base_offset: int, log_append: bool) -> None:
    batch = encode_batch(recs, base_offset=base_offset, timestamp_type=int(log_append))
    h = parse_batch_header(batch)
    kind, decoded, _ = both(
        batch, HEADER_SIZE, len(batch), h.records_count, h.base_offset, h.base_timestamp,
        h.max_timestamp if log_append else None,
    )
    assert kind == "ok"
    assert [(r.offset, r.key, r.value, r.headers) for r in decoded] == [
        (base_offset + i, s.key, s.value, s.headers) for i, s in enumerate(recs)
    ]
    # Every strict prefix of the records section fails the same way in both.
    for cut in range(HEADER_SIZE, len(batch), max(1, (len(batch) - HEADER_SIZE) // 25)):
        assert both(batch[:cut], HEADER_SIZE, len(batch), h.records_count, h.base_offset, h.base_timestamp, None)[0] == "error"
        assert both(batch, HEADER_SIZE, cut, h.records_count, h.base_offset, h.base_timestamp, None)[0] == "error"


def record_bytes(ts: int = 0, od: int = 0, key: bytes | None = b"k", value: bytes | None = b"v",
                 headers: list[tuple[bytes, bytes | None]] = (), ts_raw: bytes | None = None) -> bytes:
    def opt(b: bytes | None) -> bytes:
        return varint(-1) if b is None else varint(len(b)) + b

    body = b"\x00" + (ts_raw if ts_raw is not None else varint(ts)) + varint(od) + opt(key) + opt(value)
    body += varint(len(headers)) + b"".join(varint(len(n)) + n + opt(v) for n, v in headers)
    return varint(len(body)) + body


@pytest.mark.parametrize(
    "rec, base_offset, base_ts, lat",
    [
        (record_bytes(ts=I64_MAX), 0, I64_MAX, None),  # timestamp past int64: Python int
        (record_bytes(ts=I64_MIN), 0, I64_MIN, None),
        (record_bytes(ts=-(1 << 69)), 0, T0, None),  # a 10-byte varint past 64 bits
        (record_bytes(ts=(1 << 69) - 1), 0, T0, None),
        (record_bytes(ts_raw=b"\xff" * 9 + b"\x7f"), 0, T0, None),  # the largest 10-byte varint
        (record_bytes(ts_raw=b"\xff" * 9 + b"\x01"), 0, T0, None),  # the largest fitting in 64 bits
        (record_bytes(ts_raw=b"\x80" * 9 + b"\x00"), 0, T0, None),  # zero, padded to 10 bytes
        (record_bytes(ts_raw=b"\x80" * 10 + b"\x00"), 0, T0, None),  # 11 bytes: too long
        (record_bytes(od=(1 << 34) - 1), I64_MAX, T0, None),  # offset past int64
        (record_bytes(od=-(1 << 34)), I64_MIN, T0, None),
        (record_bytes(od=5), 1 << 70, 1 << 70, None),  # arguments past int64: the Python path
        (record_bytes(key=None, value=None), 0, T0, T0),
        (record_bytes(key=b"", value=b"", headers=[(b"", b""), (b"\xff", None), ("é".encode(), b"x")]), 0, T0, None),
        (record_bytes(), 0, T0, object()),  # the LogAppendTime value is passed through as is
    ],
)
def test_edge_cases(rec: bytes, base_offset: int, base_ts: int, lat: Any) -> None:
    result = both(rec, 0, len(rec), 1, base_offset, base_ts, lat)
    if result[0] == "ok" and lat is not None:
        assert result[1][0].timestamp is lat


@pytest.mark.parametrize(
    "data, message",
    [
        (b"", "record runs past the end of the batch"),
        (b"\x80", "record runs past the end of the batch"),
        (b"\x80\x80\x80\x80\x80\x00", "varint is too long"),  # record size: 5 bytes at most
        (b"\x0a", "invalid record size 5"),
        (b"\x01", "invalid record size -1"),
        (b"\x0c\x00\x00\x00\x03\x00\x00", "invalid key length -2"),
        (b"\x0c\x00\x00\x00\x01\x03\x00", "invalid value length -2"),
        (b"\x0c\x00\x00\x00\x01\x01\x01", "invalid header count -1"),
        (b"\x0e\x00\x00\x00\x01\x01\x02\x03", "invalid header key length -2"),
        (b"\x10\x00\x00\x00\x01\x01\x02\x00\x03", "invalid header value length -2"),
        (b"\x0e\x00\x00\x00\x01\x01\x00\x00", "record fields do not fill the record's declared size"),
    ],
)
def test_error_messages(data: bytes, message: str) -> None:
    result = both(data, 0, len(data), 1, 0, 0, None)
    assert result[:3] == ("error", ErrorCode.INVALID_RECORD, message)


def test_reads_stop_at_end() -> None:
    """Bytes after ``end`` never change the outcome, in either decoder."""
    rec = record_bytes()
    for cut in range(len(rec) + 1):
        alone = both(rec[:cut], 0, cut, 1, 0, T0, None)
        for tail in (b"", b"\x00" * 20, b"\xff" * 20, rec):
            assert both(rec[:cut] + tail, 0, cut, 1, 0, T0, None) == alone
    assert both(rec + rec, 0, len(rec), 2, 0, T0, None)[2] == "record runs past the end of the batch"
    # An ``end`` beyond the buffer is refused: slices there would come back short.
    assert both(rec, 0, len(rec) + 5, 1, 0, T0, None)[2] == "record runs past the end of the batch"
    assert both(rec[:-1], 0, len(rec), 1, 0, T0, None)[2] == "record runs past the end of the batch"


def test_other_buffer_types_and_odd_arguments() -> None:
    """What the C path does not take itself (a bytearray, bools, ints past 64 bits) it hands
    to the Python implementation: same outcome either way."""
    rec = record_bytes(headers=[(b"h", b"v")])
    assert both(bytearray(rec), 0, len(rec), 1, 0, T0, None)[2][0][3] is bytearray
    for args in [(rec, True, len(rec), 1, 0, T0, None), (rec, 0, len(rec), 1, False, T0, None),
                 (rec, 0, len(rec), True, 0, T0, None), (rec, 0, len(rec), 0, 0, T0, None),
                 (rec, 0, len(rec), -5, 0, T0, None), (rec, 0, 1 << 80, 1, 0, T0, None),
                 (rec, 0, -(1 << 80), 1, 0, T0, None), (rec, 0, -3, 1, 0, T0, None)]:
        both(*args)


@needs_c
def test_wrong_argument_count() -> None:
    with pytest.raises(TypeError):
        _speedups.parse_records(b"", 0, 0, 0, 0, 0)


@needs_c
def test_plain_class_records() -> None:
    """A Record type whose slots cannot be filled directly is called like a class."""

    @dataclasses.dataclass
    class Plain:
        offset: int
        timestamp: int
        key: bytes | None
        value: bytes | None
        headers: list

    rec = record_bytes(headers=[(b"h", None)]) * 3
    try:
        assert _speedups.setup(Plain, records._invalid, records._py_parse_records) is False
        got = _speedups.parse_records(rec, 0, len(rec), 3, 10, T0, None)
        assert [dataclasses.astuple(r) for r in got] == [(10 + 0, T0, b"k", b"v", [("h", None)])] * 3
        assert all(type(r) is Plain for r in got)
    finally:
        assert _speedups.setup(Record, records._invalid, records._py_parse_records) is True


@needs_c
def test_no_leaks_on_errors_and_results() -> None:
    """Errors mid-batch release what was built; repeated decoding does not grow memory."""
    good = record_bytes(headers=[(b"h", b"v")]) * 50
    bad = good + b"\x10\x00\x00\x00\x01\x01\x02\x00\x03"
    for _ in range(200):  # warm up caches and free lists
        _speedups.parse_records(good, 0, len(good), 50, 0, T0, None)
    gc.collect()
    before = sys.getallocatedblocks()
    for _ in range(2000):
        _speedups.parse_records(good, 0, len(good), 50, 0, T0, None)
        with pytest.raises(ApiError):
            _speedups.parse_records(bad, 0, len(bad), 51, 0, T0, None)
    gc.collect()
    assert sys.getallocatedblocks() - before < 500


def test_decode_batch_pure_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """decode_batch over the pure-Python path gives what the default path gives."""
    recs = [Record(0, T0 + i, b"k%d" % i, b"v" * i, [("n", None)] if i % 2 else []) for i in range(30)]
    batch = encode_batch(recs, base_offset=1000, compression=1)
    default = decode_batch(batch)
    monkeypatch.setattr(records, "_parse_records", records._py_parse_records)
    assert decode_batch(batch) == default
    assert [r.offset for r in default.records] == list(range(1000, 1030))


# --- straight to the consumer's Messages --------------------------------------------------------

from rivulet.client.consumer import fetcher  # noqa: E402  (importing it binds Message to the accelerator)
from rivulet.client.types import Message  # noqa: E402

if _speedups is not None and fetcher._parse_messages is None:  # RIVULET_NO_SPEEDUPS=1
    _speedups.setup_messages(Message)


def message_fields(m: Any) -> tuple:
    return tuple((getattr(m, n), type(getattr(m, n))) for n in Message.__slots__)


def messages_outcome(fn: Any, *args: Any) -> Any:
    try:
        result = fn(*args)
    except ApiError as exc:
        return ("error", exc.code, exc.message)
    return ("ok", [(type(m), message_fields(m)) for m in result])


def py_messages(buf, pos, end, count, base_offset, base_timestamp, lat, min_offset, topic, partition, ts_type, le):
    """What the fetcher builds from Records when the accelerator is absent (it decodes bytes)."""
    recs = records._py_parse_records(bytes(buf), pos, end, count, base_offset, base_timestamp, lat)
    return [Message(topic, partition, r.offset, r.key, r.value, r.headers or None, ts_type, r.timestamp, None, le)
            for r in recs if r.offset >= min_offset]


def both_messages(*args: Any) -> Any:
    py = messages_outcome(py_messages, *args)
    if _speedups is not None:
        assert messages_outcome(_speedups.parse_messages, *args) == py
    return py


@FUZZ
@given(record_sections(), st.integers(-3, 8) | st.sampled_from([I64_MIN, I64_MAX, 1 << 70]), st.data())
def test_messages_same_as_records(args: tuple, skip: int, data: st.DataObject) -> None:
    base_offset = args[4]
    min_offset = base_offset + skip if abs(skip) < 100 and I64_MIN <= base_offset + skip <= I64_MAX else skip
    topic = data.draw(st.sampled_from(["t", "topic-é"]))
    both_messages(*args, min_offset, topic, data.draw(st.integers(0, 5)), data.draw(st.sampled_from([1, 2])),
                  data.draw(st.sampled_from([-1, 0, 7])))


def test_messages_filter_and_fields() -> None:
    recs = [Record(0, T0 + i, b"k", b"v%d" % i, [("h", b"x")] if i == 3 else []) for i in range(6)]
    batch = encode_batch(recs, base_offset=100)
    h = parse_batch_header(batch)
    args = (batch, HEADER_SIZE, len(batch), h.records_count, h.base_offset, h.base_timestamp, None)
    kind, got = both_messages(*args, 102, "t", 1, 1, 4)
    assert kind == "ok" and len(got) == 4
    if _speedups is not None:
        ms = _speedups.parse_messages(*args, 102, "t", 1, 1, 4)
        assert [m.offset() for m in ms] == [102, 103, 104, 105]
        assert [m.headers() for m in ms] == [None, [("h", b"x")], None, None]
        assert ms[0].timestamp() == (1, T0 + 2) and ms[0].topic() == "t" and ms[0].partition() == 1
        assert ms[0].leader_epoch() == 4 and ms[0].error() is None and ms[0].latency() is None
        assert ms[0].value() == b"v2" and ms[0].key() == b"k"
    # Any bytes-like buffer is read in place, with the result for its bytes.
    frame = bytearray(b"xx" + batch)
    for buf in (bytearray(batch), memoryview(frame)[2:], memoryview(batch).cast("c")):
        assert both_messages(buf, *args[1:], 102, "t", 1, 1, 4) == ("ok", got)
    # Not contiguous: copied, then the same.
    stretched = memoryview(bytes(b for c in batch for b in (c, 0)))[::2]
    assert both_messages(stretched, *args[1:], 102, "t", 1, 1, 4) == ("ok", got)
    # Arguments off the fast path: the Python decoder, then the same conversion.
    assert both_messages(*args, 102.0, "t", 1, 1, 4) == ("ok", got)
    far = (batch, HEADER_SIZE, len(batch), h.records_count, 1 << 70, h.base_timestamp, None)
    assert both_messages(*far, (1 << 70) + 4, "t", 1, 1, 4)[0] == "ok"
    assert both_messages(*far[:-1], T0, 0, "t", 1, 1, 4)[0] == "ok"
    assert both_messages(batch[:-1], *args[1:], 0, "t", 1, 1, 4)[0] == "error"


@needs_c
def test_messages_fast_path_checks_the_type() -> None:
    """Message slots are filled directly only when the type still stores its arguments as
    the fetcher expects; otherwise the type is called, with the same result."""

    class Changed(Message):
        __slots__ = ()

        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            self._latency = 0.0

    rec = record_bytes(headers=[(b"h", None)]) * 2
    try:
        assert _speedups.setup_messages(Changed) is False
        got = _speedups.parse_messages(rec, 0, len(rec), 2, 5, T0, None, 0, "t", 0, 1, -1)
        assert [type(m) for m in got] == [Changed, Changed] and got[0].latency() == 0.0
        assert [m.offset() for m in got] == [5, 5] and got[1].headers() == [("h", None)]
    finally:
        assert _speedups.setup_messages(Message) is True


def _fetcher_outcome(data: bytes, position: int, aborted: Any = None) -> tuple:
    """Messages and errors the fetcher makes of one partition's Fetch response."""
    from types import SimpleNamespace as NS

    from rivulet.client.client import KafkaClient
    from rivulet.client.config import resolve
    from rivulet.client.consumer.fetcher import Fetcher
    from rivulet.client.consumer.subscription import SubscriptionState

    tp = ("t", 0)
    conf = resolve({"bootstrap.servers": "127.0.0.1:1"}, "consumer")
    subs = SubscriptionState(conf["auto.offset.reset"])
    subs.assign_from_user([tp])
    subs.seek(tp, position)
    errors: list = []
    f = Fetcher(KafkaClient(conf), subs, conf, on_error=lambda _tp, err: errors.append(str(err)))
    buf = f.buffer
    st = subs.state(tp)
    pd = NS(error_code=0, high_watermark=10**6, last_stable_offset=10**6, log_start_offset=0,
            aborted_transactions=aborted, records=memoryview(bytearray(data)), current_leader=None,
            diverging_epoch=None)
    f._handle_partition(tp, st, st.epoch, st.fetch_offset, pd)
    return [message_fields(m) for m in buf.take(10**6)], errors, st.fetch_offset


def test_fetcher_same_messages_with_and_without_the_accelerator(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace as NS

    def batch(base: int, n: int, **kw: Any) -> bytes:
        recs = [Record(0, T0 + i, b"k" if i % 2 else None, b"v%d" % (base + i), [("h", b"%d" % i)] if i % 3 else [])
                for i in range(n)]
        return encode_batch(recs, base_offset=base, **kw)

    corrupt = bytearray(batch(10, 3))
    corrupt[-2] ^= 0xFF
    txn = dict(producer_id=8, producer_epoch=0, base_sequence=0, transactional=True)
    abort = records.encode_control_batch(records.ControlRecordType.ABORT, producer_id=8, producer_epoch=0,
                                         coordinator_epoch=0, base_offset=7, timestamp=1)
    cases = [
        (batch(0, 5) + batch(5, 5, compression=1), 3, None),
        (batch(0, 5, timestamp_type=1) + batch(5, 2)[:30], 0, None),
        (batch(0, 5) + bytes(corrupt) + batch(13, 2), 0, None),
        (batch(0, 5) + batch(5, 2, **txn) + abort + batch(8, 2), 1, [NS(producer_id=8, first_offset=5)]),
    ]
    for data, position, aborted in cases:
        default = _fetcher_outcome(data, position, aborted)
        monkeypatch.setattr(fetcher, "_parse_messages", None)
        monkeypatch.setattr(records, "_parse_records", records._py_parse_records)
        pure = _fetcher_outcome(data, position, aborted)
        monkeypatch.undo()
        assert default == pure
        assert default[0]  # every case delivers something


@needs_c
def test_records_are_made_by_filling_their_slots_and_a_dict_class_is_refused() -> None:
    # setup() says whether C fills Record's slots itself (the fast path) or calls the class.
    assert _speedups.setup(Record, records._invalid, records._py_parse_records) is True

    @dataclasses.dataclass
    class WithDict:
        offset: int
        timestamp: int
        key: Any
        value: Any
        headers: Any

    try:
        assert _speedups.setup(WithDict, records._invalid, records._py_parse_records) is False
    finally:
        assert _speedups.setup(Record, records._invalid, records._py_parse_records) is True
