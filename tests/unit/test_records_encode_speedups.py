"""The C batch encoder (rivulet.protocol._speedups.encode_records) against the pure-Python one.

``records.encode_batch`` writes the records in C when they are of the usual kinds and hands
everything else to ``records._py_encode_records``; both must give the same bytes for every
input, and the same exception (type and message) for every bad one. The C code must never
crash, whatever the records are. Also here: the C murmur2 against the Python one, and the
C record constructor the producer uses.
"""

from __future__ import annotations

import collections
import gc
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any, NamedTuple
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rivulet.client.producer import partitioner
from rivulet.client.producer.accumulator import PendingRecord
from rivulet.protocol import records
from rivulet.protocol.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from rivulet.protocol.records import HEADER_SIZE, Record, decode_batch

pytestmark = pytest.mark.fast

try:
    from rivulet.protocol import _speedups
except ImportError:  # reported by test_records_speedups.test_extension_is_built
    _speedups = None
else:
    if not hasattr(_speedups, "encode_records"):
        _speedups = None
    else:
        _speedups.setup_encoder(records.crc32c)  # also under RIVULET_NO_SPEEDUPS=1: compare all the same

needs_c = pytest.mark.skipif(_speedups is None, reason="the C accelerator is not built")

FUZZ = settings(
    max_examples=int(os.environ.get("RIVULET_FUZZ_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
T0 = 1_700_000_000_000
CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]


# --- record types encode_batch is given ------------------------------------------------------


@dataclass
class Plain:
    """A plain class: attributes in the instance __dict__."""

    key: Any
    value: Any
    headers: Any
    timestamp: Any


class Reordered(NamedTuple):
    """A named tuple whose fields are not in Record's order."""

    timestamp: Any
    extra: Any
    headers: Any
    value: Any
    key: Any


class WithProperty:
    """Reading ``key`` runs Python code: never the C path."""

    __slots__ = ("value", "headers", "timestamp", "_key")

    def __init__(self, key: Any, value: Any, headers: Any, timestamp: Any) -> None:
        self._key, self.value, self.headers, self.timestamp = key, value, headers, timestamp

    @property
    def key(self) -> Any:
        return self._key


class WithGetattr:
    """Fields come from __getattr__: never the C path."""

    def __init__(self, key: Any, value: Any, headers: Any, timestamp: Any) -> None:
        self._f = {"key": key, "value": value, "headers": headers, "timestamp": timestamp}

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["_f"][name]
        except KeyError:
            raise AttributeError(name) from None


class Missing:
    """No ``headers`` at all: AttributeError from both."""

    __slots__ = ("key", "value", "timestamp")

    def __init__(self, key: Any, value: Any, headers: Any, timestamp: Any) -> None:
        self.key, self.value, self.timestamp = key, value, timestamp


def make(kind: str, key: Any, value: Any, headers: Any, ts: Any) -> Any:
    if kind == "record":
        return Record(0, ts, key, value, headers)
    if kind == "pending":
        return PendingRecord(key, value, headers, ts)
    if kind == "reordered":
        return Reordered(ts, "x", headers, value, key)
    if kind == "short":  # a PendingRecord too short for its fields: IndexError from both
        return tuple.__new__(PendingRecord, (key, value))
    return {"plain": Plain, "property": WithProperty, "getattr": WithGetattr, "missing": Missing}[kind](
        key, value, headers, ts
    )


def rarely(common: st.SearchStrategy, rare: st.SearchStrategy) -> st.SearchStrategy:
    """``rare`` about one time in twelve, so that most batches stay on the C path."""
    return st.integers(0, 11).flatmap(lambda i: rare if i == 7 else common)


blobs = st.binary(max_size=300) | st.sampled_from([b"", b"\x00", bytes(range(256)) * 40])
odd_blobs = st.sampled_from(
    [
        lambda: bytearray(b"ba"),
        lambda: memoryview(b"mv"),
        lambda: "str",
        lambda: 5,
        lambda: 1.5,
        lambda: True,
        lambda: [b"x"],
        lambda: memoryview(b"abcd").cast("I"),  # len 1, 4 bytes
    ]
).map(lambda make_one: make_one())
keys_values = rarely(st.none() | blobs, odd_blobs)
header_names = rarely(
    st.text(max_size=10) | st.binary(max_size=10),
    st.sampled_from(["\ud800", "a\udfffb", 3, None, bytearray(b"n"), ("t",)]),
)
header_values = rarely(st.none() | st.binary(max_size=40), st.sampled_from(["s", 7, bytearray(b"b"), memoryview(b"m")]))
header_items = rarely(
    st.tuples(header_names, header_values),
    st.sampled_from([["n", b"v"], ("n",), ("n", b"v", b"w"), "nv", b"nv", None]),
)
headers = rarely(
    st.none() | st.just([]) | st.lists(header_items, max_size=4) | st.lists(header_items, max_size=3).map(tuple),
    st.sampled_from([(), "", 0, {"a": b"b"}, {"ab": b"c"}, b"xy", "hv", collections.deque([("h", b"v")]), 5]),
)
timestamps = st.one_of(
    st.none(),
    st.integers(T0 - 10**6, T0 + 10**6),
    st.integers(-(1 << 40), 1 << 40),
    st.sampled_from([0, -1, I64_MIN, I64_MAX, I64_MIN + 1, I64_MAX - 1, 1 << 62, -(1 << 62)]),
    rarely(st.integers(-(1 << 70), 1 << 70), st.sampled_from([1.5, True, "5", 1 << 64, -(1 << 64) - 3])),
)
kinds = rarely(
    st.sampled_from(["record", "pending", "plain", "reordered"]),
    st.sampled_from(["property", "getattr", "missing", "short"]),
)


@st.composite
def record_lists(draw: st.DrawFn, max_size: int = 12) -> Any:
    kind = draw(kinds)
    mixed = draw(st.integers(0, 9)) == 0
    recs = []
    for _ in range(draw(st.integers(1, max_size))):
        k = draw(kinds) if mixed else kind
        recs.append(make(k, draw(keys_values), draw(keys_values), draw(headers), draw(timestamps)))
    container = draw(rarely(st.sampled_from([list, tuple]), st.sampled_from([collections.deque, lambda r: r[:0]])))
    return container(recs)


encode_kwargs = st.fixed_dictionaries(
    {},
    optional={
        "base_offset": rarely(st.integers(0, 1 << 40), st.sampled_from([-1, I64_MAX, 1 << 63, "0"])),
        "compression": rarely(st.sampled_from(CODECS), st.sampled_from([7, -1, None])),
        "timestamp_type": rarely(st.sampled_from([0, 1]), st.sampled_from([2, None])),
        "producer_id": st.integers(-1, 1 << 40),
        "producer_epoch": rarely(st.integers(-1, 100), st.just(1 << 20)),
        "base_sequence": st.integers(-1, (1 << 31) - 1),
        "transactional": st.booleans(),
        "control": st.booleans(),
        "partition_leader_epoch": st.integers(-1, 1000),
        "base_timestamp": rarely(
            st.none() | st.integers(T0 - 10**6, T0 + 10**6) | st.sampled_from([I64_MIN, I64_MAX, 0]),
            st.sampled_from([1 << 64, 1.5, "t"]),
        ),
        "compression_level": st.none() | st.sampled_from([1, 3]),
    },
)


def outcome(fn: Any, recs: Any, kw: dict[str, Any]) -> Any:
    # A batch without any timestamp takes "now": the same now for both encoders.
    with mock.patch.object(records, "now_ms", return_value=1_234_567_891):
        try:
            return ("ok", fn(recs, **kw))
        except Exception as exc:  # noqa: BLE001 - every exception must match
            return ("error", type(exc), str(exc))


def c_encode_batch(recs: Any, **kw: Any) -> bytes:
    """encode_batch with the C encoder bound, whatever RIVULET_NO_SPEEDUPS says."""
    with mock.patch.object(records, "_c_encode_records", _speedups.encode_records):
        return records.encode_batch(recs, **kw)


def py_encode_batch(recs: Any, **kw: Any) -> bytes:
    """encode_batch with the pure-Python records encoder only."""
    with mock.patch.object(records, "_c_encode_records", None):
        return records.encode_batch(recs, **kw)


def both(recs: Any, **kw: Any) -> Any:
    py = outcome(py_encode_batch, recs, kw)
    if _speedups is not None:
        c = outcome(c_encode_batch, recs, kw)
        assert c == py
    return py


def on_c_path(recs: Any, base_timestamp: int = T0) -> bool:
    return _speedups.encode_records(recs, base_timestamp, None) is not None


# --- equivalence ---------------------------------------------------------------------------------


@needs_c
@FUZZ
@given(record_lists(), encode_kwargs)
def test_same_bytes_and_errors(recs: Any, kw: dict[str, Any]) -> None:
    both(recs, **kw)


@needs_c
@FUZZ
@given(
    st.lists(
        st.tuples(
            st.none() | st.binary(max_size=64),
            st.none() | st.binary(max_size=2000),
            st.none()
            | st.lists(st.tuples(st.text(max_size=6) | st.binary(max_size=6), st.none() | st.binary(max_size=8)), max_size=3),
            st.integers(T0 - 10**5, T0 + 10**5) | st.none(),
        ).map(lambda fields: PendingRecord(*fields)),
        min_size=1,
        max_size=60,
    ),
    st.sampled_from(CODECS),
)
def test_producer_records_take_the_c_path(recs: list[PendingRecord], codec: int) -> None:
    """What the producer sends always goes through C, and decodes back to what was sent."""
    assert on_c_path(recs)
    kind, batch = both(recs, compression=codec, producer_id=3, producer_epoch=1, base_sequence=10)
    assert kind == "ok"
    got = decode_batch(batch)
    assert got.header.records_count == len(recs) and got.header.compression == codec
    assert [(r.key, r.value, r.headers) for r in got.records] == [
        (s.key, s.value, [(n if isinstance(n, str) else n.decode("utf-8", "replace"), v) for n, v in s.headers or []])
        for s in recs
    ]


@needs_c
@pytest.mark.parametrize("codec", CODECS)
def test_big_batches(codec: int) -> None:
    """Several thousand records across Python's 64 KiB chunks, values up to 20 KiB."""
    recs = [
        PendingRecord(
            None if i % 7 == 0 else b"key-%d" % i,
            bytes((i * 31 + j) % 251 for j in range((i * 997) % 20_000)) if i % 11 else None,
            [("trace", b"%d" % i), (b"raw", None)] if i % 5 == 0 else None,
            T0 + (i * 13) % 5000 - 2500,
        )
        for i in range(3000)
    ]
    assert on_c_path(recs)
    kind, batch = both(recs, compression=codec, base_offset=1 << 33)
    assert kind == "ok" and len(batch) > (1 << 20 if codec == NONE else 0)
    got = decode_batch(batch)
    assert [r.offset for r in got.records] == [(1 << 33) + i for i in range(3000)]
    assert got.header.max_timestamp == max(r.timestamp for r in recs)
    # Offset deltas past the 8192 varint table of the Python encoder.
    many = [Record(0, T0 + i, None, b"%d" % i, []) for i in range(20_000)]
    assert on_c_path(many)
    assert both(many, compression=codec)[0] == "ok"


@needs_c
@pytest.mark.parametrize(
    "ts, base",
    [
        (I64_MAX, I64_MIN),  # the delta needs 65 bits: the Python encoder's job
        (I64_MIN, I64_MAX),
        (I64_MAX, 0),
        (I64_MIN, 0),
        (I64_MIN, -1),
        (0, I64_MIN),
        (-1, T0),
        (None, I64_MIN),
        (1 << 63, 0),  # past int64: struct.error from both
        (T0, 1 << 63),
    ],
)
def test_timestamp_extremes(ts: int | None, base: int) -> None:
    recs = [Record(0, ts, b"k", b"v", []), Record(0, T0, None, None, [("h", None)])]
    both(recs, base_timestamp=base)
    both(recs, base_timestamp=base, compression=ZSTD)
    both(recs[:1])


@needs_c
def test_error_messages_match() -> None:
    cases: list[tuple[Any, dict[str, Any]]] = [
        ([], {}),
        ((), {}),
        ([Record(0, T0, b"k", b"v", [])], {"timestamp_type": 3}),
        ([Record(0, T0, 5, b"v", [])], {}),  # int key
        ([Record(0, T0, "k", b"v", [])], {}),  # str key
        ([Record(0, T0, b"k", 2.5, [])], {}),
        ([Record(0, T0, b"k", b"v", [("\ud800", b"x")])], {}),  # not encodable
        ([Record(0, T0, b"k", b"v", [("h", "x")])], {}),  # str header value
        ([Record(0, T0, b"k", b"v", [("h",)])], {}),
        ([Record(0, T0, b"k", b"v", 7)], {}),
        ([Record(0, 1.5, b"k", b"v", [])], {}),
        ([Record(0, "t", b"k", b"v", [])], {"base_timestamp": T0}),
        ([Record(0, T0, b"k", b"v", [])], {"base_offset": 1 << 63}),
        ([Record(0, T0, b"k", b"v", [])], {"producer_epoch": 1 << 15}),
        ([Record(0, T0, b"k", b"v", [])], {"compression": 9}),
        ([Record(0, T0, b"k", b"v", [])], {"compression": "gzip"}),
        ([Record(0, T0, 5, b"v", [])], {"compression": 9}),  # the record's error comes first
        ([Record(0, T0, 5, b"v", [])], {"base_offset": 1 << 63}),
        ([Missing(b"k", b"v", None, T0)], {}),
        ([tuple.__new__(PendingRecord, (b"k",))], {}),
        ([object()], {}),
        (5, {}),
        (None, {}),
    ]
    for recs, kw in cases:
        kind = both(recs, **kw)[0]
        assert kind == "error", (recs, kw)
    # Python's encoder takes an int header name as bytes(n), zeros: the C one leaves it to Python.
    assert both([Record(0, T0, b"k", b"v", [(3, b"x")])])[0] == "ok"


@needs_c
def test_what_takes_the_c_path() -> None:
    good = [Record(0, T0, b"k", b"v", [("h", b"x"), (b"b", None)])]
    assert on_c_path(good) and on_c_path(tuple(good))
    assert on_c_path([PendingRecord(None, b"v", None, None)])
    assert on_c_path([Plain(None, b"v", (), T0)])
    assert on_c_path([Reordered(T0, 0, None, b"v", b"k")])
    assert on_c_path([Record(0, I64_MAX, b"k", b"v", [])], 0)
    off = [
        collections.deque(good),
        [Record(0, T0, bytearray(b"k"), b"v", [])],
        [Record(0, T0, b"k", memoryview(b"v"), [])],
        [Record(0, T0, b"k", b"v", [["h", b"x"]])],
        [Record(0, T0, b"k", b"v", [("h", bytearray(b"x"))])],
        [Record(0, T0, b"k", b"v", {"h": b"x"})],
        [Record(0, T0, b"k", b"v", [("\ud800", b"x")])],
        [Record(0, True, b"k", b"v", [])],
        [Record(0, 1 << 64, b"k", b"v", [])],
        [WithProperty(b"k", b"v", None, T0)],
        [WithGetattr(b"k", b"v", None, T0)],
        [Missing(b"k", b"v", None, T0)],
        [tuple.__new__(PendingRecord, (b"k",))],
    ]
    for recs in off:
        assert not on_c_path(recs), recs
    assert not on_c_path([Record(0, I64_MAX, b"k", b"v", [])], -1)  # the delta needs 65 bits
    assert not on_c_path(good, 1 << 63) and not on_c_path(good, True)  # type: ignore[arg-type]


@needs_c
def test_c_encoder_arguments() -> None:
    good = [Record(0, T0, b"k", b"v", [])]
    with pytest.raises(TypeError):
        _speedups.encode_records(good, T0)
    with pytest.raises(TypeError):
        _speedups.encode_records(good, T0, b"short header")
    body, max_ts = _speedups.encode_records(good, T0, None)
    assert max_ts == T0 and body == py_encode_batch(good)[HEADER_SIZE:]
    # A header whose record count disagrees with the records: left to Python.
    header = py_encode_batch(good * 2)[:HEADER_SIZE]
    assert _speedups.encode_records(good, T0, header) is None


class Mutating:
    """A record whose headers property empties the list being encoded."""

    def __init__(self, target: list[Any]) -> None:
        self.target = target
        self.key, self.value, self.timestamp = b"k", b"v", T0

    @property
    def headers(self) -> Any:
        self.target.clear()
        gc.collect()
        return None


@needs_c
def test_hostile_records_do_not_crash() -> None:
    def fresh() -> list[Any]:
        recs: list[Any] = [Record(0, T0, b"k", b"v" * 100, [("h", b"x")]) for _ in range(50)]
        recs.insert(10, Mutating(recs))
        return recs

    # The property runs in Python only (the C encoder does not take such records): the same
    # outcome from both, and no crash.
    assert outcome(c_encode_batch, fresh(), {}) == outcome(py_encode_batch, fresh(), {})
    for kind in ["property", "getattr", "missing", "short"]:
        both([make(kind, b"k", b"v", None, T0) for _ in range(3)])


@needs_c
def test_no_leaks() -> None:
    good = [PendingRecord(b"k%d" % i, b"v" * 100, [("h", b"x")] if i % 2 else None, T0 + i) for i in range(100)]
    bad = good + [PendingRecord(b"k", 5, None, T0)]
    odd = good + [PendingRecord(b"k", b"v", None, 1 << 70)]
    for _ in range(100):  # warm up caches and free lists
        records.encode_batch(good)
    gc.collect()
    before = sys.getallocatedblocks()
    for _ in range(1000):
        c_encode_batch(good)
        c_encode_batch(good, compression=SNAPPY)
        assert _speedups.encode_records(bad, T0, None) is None
        assert _speedups.encode_records(odd, T0, None) is None
    gc.collect()
    assert sys.getallocatedblocks() - before < 500


def test_env_var_forces_pure_python() -> None:
    """RIVULET_NO_SPEEDUPS=1: every C path (decoder, encoder, records, murmur2) is off."""
    code = (
        "from rivulet.protocol import records as r; from rivulet.client.producer import accumulator as a, partitioner as p; "
        "assert not r.SPEEDUPS and r._parse_records is r._py_parse_records; "
        "assert r._c_encode_records is None and a.make_record is None and p._c_murmur2 is None; "
        "b = r.encode_batch([r.Record(0, 5, b'k', b'v', [('h', None)])], base_offset=7); "
        "print(r.decode_batch(b).records, p.murmur2(b'abc'))"
    )
    env = dict(os.environ, RIVULET_NO_SPEEDUPS="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[Record(offset=7, timestamp=5, key=b'k', value=b'v', headers=[('h', None)])] 479470107"


# --- murmur2 -----------------------------------------------------------------------------------


@needs_c
@FUZZ
@given(st.binary(max_size=200))
def test_murmur2_same_as_python(data: bytes) -> None:
    assert _speedups.murmur2(data) == partitioner._py_murmur2(data) == partitioner.murmur2(data)
    assert partitioner._murmur2_positive(data) == partitioner._py_murmur2(data) & 0x7FFFFFFF


@needs_c
def test_murmur2_other_types() -> None:
    assert partitioner.murmur2(bytearray(b"abcde")) == partitioner._py_murmur2(b"abcde")
    with pytest.raises(TypeError):
        _speedups.murmur2("abc")
    for bad in ["abcd", None, 5]:
        with pytest.raises(TypeError):
            partitioner._py_murmur2(bad)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            partitioner.murmur2(bad)  # type: ignore[arg-type]


# --- the producer's record constructor ------------------------------------------------------


@needs_c
def test_make_record() -> None:
    args = (b"k", b"v", None, T0, None, None)
    r = _speedups.make_record(PendingRecord, *args)
    assert type(r) is PendingRecord and r == tuple.__new__(PendingRecord, args) and r.timestamp == T0
    assert not gc.is_tracked(r)  # nothing in it can be part of a cycle
    for tracked in [(b"k", b"v", [("h", b"x")], T0, None, None), (None, b"v", None, T0, print, None),
                    (None, b"v", None, T0, None, Plain(None, None, None, None)), (None, ([],), None, T0, None, None)]:
        assert gc.is_tracked(_speedups.make_record(PendingRecord, *tracked))
    assert _speedups.make_record(tuple) == () and type(_speedups.make_record(tuple)) is tuple
    short = _speedups.make_record(PendingRecord, 1, 2, 3, 4)  # as tuple.__new__ allows
    assert short == tuple.__new__(PendingRecord, (1, 2, 3, 4)) and short.timestamp == 4
    with pytest.raises(TypeError):
        _speedups.make_record(list, 1)
    with pytest.raises(TypeError):
        _speedups.make_record()
    # A cycle through a record that holds a callback is still collected.
    holder: list[Any] = []
    holder.append(_speedups.make_record(PendingRecord, None, b"v", None, T0, holder.append, None))
    del holder
    assert gc.collect() >= 2
