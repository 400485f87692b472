"""The produce path's record walk in C (``_speedups.check_records``) against the Python one.

For every input, valid or hostile, both return the same largest timestamp, append the same
record errors and raise the same ApiError; ``validate_produce_records`` answers the same with
and without the accelerator.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_records_speedups import FUZZ, T0, record_sections

from rivulet.protocol import records
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.protocol.records import HEADER_SIZE, Record, RecordValidationError, encode_batch

pytestmark = pytest.mark.fast

try:
    from rivulet.protocol import _speedups
except ImportError:  # reported by test_records_speedups.test_extension_is_built
    _speedups = None
else:
    if not hasattr(_speedups, "check_records"):
        _speedups = None
    elif not records.SPEEDUPS:  # RIVULET_NO_SPEEDUPS=1: bind it here, to compare all the same
        _speedups.setup_checker(records._py_check_records)

needs_c = pytest.mark.skipif(_speedups is None, reason="the C accelerator is not built")


def walk(fn: Any, args: tuple) -> tuple:
    errors: list[tuple[int, str, ErrorCode]] = []
    try:
        result = fn(*args, errors)
    except ApiError as exc:
        return ("error", exc.code, exc.message, exc.__suppress_context__, exc.__cause__, errors)
    return ("ok", result, type(result), errors)


def both(*args: Any) -> tuple:
    py = walk(records._py_check_records, args)
    if _speedups is not None:
        assert walk(_speedups.check_records, args) == py
    return py


def section(recs: list[Record], base_ts: int = T0) -> tuple[bytes, int]:
    """The records section of a batch holding ``recs`` (offset deltas 0..n-1)."""
    batch = encode_batch(recs, base_offset=0, base_timestamp=base_ts)
    return batch[HEADER_SIZE:], len(recs)


records_st = st.lists(
    st.builds(
        Record,
        offset=st.just(0),
        timestamp=st.one_of(st.integers(T0 - 10**6, T0 + 10**6), st.just(-1)),
        key=st.none() | st.binary(max_size=200),
        value=st.none() | st.binary(max_size=300),
        headers=st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=20)), max_size=3),
    ),
    min_size=1,
    max_size=30,
)
bounds_st = st.none() | st.just((T0 - 500_000, T0 + 500_000)) | st.just((T0 - 10**7, T0 + 10**7))


@FUZZ
@given(records_st, st.booleans(), bounds_st, st.sampled_from(["bytes", "bytearray", "memoryview"]),
       st.binary(max_size=6), st.binary(max_size=6))
def test_well_formed_batches(recs: list[Record], require_keys: bool, bounds: Any, kind: str,
                             prefix: bytes, suffix: bytes) -> None:
    data, count = section(recs)
    buf: Any = prefix + data + suffix
    if kind == "bytearray":
        buf = bytearray(buf)
    elif kind == "memoryview":
        buf = memoryview(buf)
    out = both(buf, len(prefix), len(prefix) + len(data), count, require_keys, T0, bounds)
    keyless = any(r.key is None for r in recs)
    outside = bounds is not None and any(r.timestamp != -1 and not bounds[0] <= r.timestamp <= bounds[1] for r in recs)
    assert out[0] == "ok"
    assert bool(out[-1]) == ((require_keys and keyless) or outside)
    assert out[1] == max(-1, max(r.timestamp for r in recs))


@FUZZ
@given(records_st, st.data())
def test_damaged_batches(recs: list[Record], data: st.DataObject) -> None:
    raw, count = section(recs)
    buf = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 3))):
        if not buf:
            break
        at = data.draw(st.integers(0, len(buf) - 1))
        kind = data.draw(st.sampled_from(["flip", "set", "truncate", "insert"]))
        if kind == "flip":
            buf[at] ^= 1 << data.draw(st.integers(0, 7))
        elif kind == "set":
            buf[at] = data.draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF]))
        elif kind == "truncate":
            del buf[at:]
        else:
            buf[at:at] = data.draw(st.binary(min_size=1, max_size=4))
    end = len(buf) + data.draw(st.sampled_from([0, 0, -1, 1, 5]))
    count += data.draw(st.sampled_from([0, 0, 0, -1, 1]))
    both(bytes(buf), 0, end, count, data.draw(st.booleans()), T0, data.draw(bounds_st))


@FUZZ
@given(record_sections(), st.booleans(), bounds_st)
def test_hostile_sections(args: tuple, require_keys: bool, bounds: Any) -> None:
    buf, pos, end, count, _base_offset, base_ts, _lat = args
    both(buf, pos, end, count, require_keys, base_ts, bounds)


@needs_c
def test_odd_arguments_go_to_the_python_walk() -> None:
    data, count = section([Record(0, T0, b"k", b"v", [])])
    for args in [
        (data, -1, len(data), count, False, T0, None),  # negative position
        (data, 0, len(data), count, False, 1 << 70, None),  # base timestamp past 64 bits
        (data, 0, len(data), count, False, (1 << 63) - 1, None),  # the sum overflows
        (data, 0, len(data), count, False, T0, [T0, T0]),  # bounds as a list
        (data, 0, 1 << 70, count, False, T0, None),
        (data, 0, len(data), 1 << 70, False, T0, None),
    ]:
        both(*args)
    with pytest.raises(TypeError):
        _speedups.check_records(data, 0)


@needs_c
def test_validate_produce_records_same_with_and_without(monkeypatch: pytest.MonkeyPatch) -> None:
    batch = encode_batch([Record(0, T0, None, b"v", []), Record(0, T0 + 1, b"k", b"w", [("h", b"x")])],
                         base_offset=0, base_timestamp=T0)

    def answer() -> Any:
        try:
            headers = records.validate_produce_records(batch, max_batch_size=1 << 20, require_keys=True)
        except RecordValidationError as exc:
            return (exc.code, exc.message, exc.record_errors)
        return [(h.max_timestamp, h.records_count) for h in headers]

    assert records._check_records is _speedups.check_records or not records.SPEEDUPS
    fast = answer()
    monkeypatch.setattr(records, "_check_records", records._py_check_records)
    assert answer() == fast
    assert fast[0] == ErrorCode.INVALID_RECORD and fast[2] == [(0, records.COMPACTED_WITHOUT_KEY)]


@needs_c
def test_no_leaks() -> None:
    data, count = section([Record(0, T0, b"k", b"v", [("h", b"x")])] * 5)
    bad = data[:-1]
    args_ok = (data, 0, len(data), count, False, T0, None, [])
    for _ in range(100):
        _speedups.check_records(*args_ok)
        with pytest.raises(ApiError):
            _speedups.check_records(bad, 0, len(bad), count, False, T0, None, [])
    before = sys.getrefcount(data), sys.getrefcount(bad)
    for _ in range(1000):
        _speedups.check_records(*args_ok)
        with pytest.raises(ApiError):
            _speedups.check_records(bad, 0, len(bad), count, False, T0, None, [])
    assert (sys.getrefcount(data), sys.getrefcount(bad)) == before
