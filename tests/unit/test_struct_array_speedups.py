"""The C reader of integer-only struct arrays (``_speedups.read_int_structs``) against the
compiled Python readers of rivulet.protocol.schema.

Every message whose schema has such an array at some version (a Fetch request's partitions,
ListOffsets', OffsetForLeaderEpoch's, the aborted transactions of a Fetch response, a
producer snapshot's entries, ...; found from the generated schemas, so a new one is covered)
must decode to the same structs, or fail with the same error, with the C reader and without
it: random messages of every version, random truncations and corrupted bytes, and hostile
element counts (negative, zero, one short, past the frame, the largest int32 or varint).
"""

from __future__ import annotations

import importlib
import pkgutil
import struct
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rivulet.protocol.messages as messages
from rivulet.protocol import schema
from rivulet.protocol.accel import speedups
from rivulet.protocol.errors import ProtocolDecodeError
from rivulet.protocol.messages import fetch_request as fq
from rivulet.protocol.schema import F, Struct

pytestmark = pytest.mark.fast

C_READER = schema._read_int_structs
SKIP_WITHOUT_C = pytest.mark.skipif(C_READER is None, reason="the C extension is not built "
                                    "(test_records_speedups reports it)")


def _flex_of(f: F, flex: bool, version: int) -> bool:
    return schema._modes(f, flex, version)[0]


def _int_arrays(cls: type[Struct], version: int, flex: bool, seen: frozenset = frozenset()) -> list[tuple[type, str]]:
    """(struct, field) of every array the C reader reads in ``cls`` at ``version``, nested included."""
    out = []
    for f in cls.FIELDS:
        if f.kind != "struct" or not schema._in(f.versions, version) or f.struct in seen:
            continue
        if f.is_array and schema._int_struct_plan(f.struct, version, _flex_of(f, flex, version)) is not None:
            out.append((cls, f.name))
        out += _int_arrays(f.struct, version, flex, seen | {cls})
    return out


def _top_level_messages() -> list[type[Struct]]:
    found = []
    for info in pkgutil.iter_modules(messages.__path__):
        module = importlib.import_module(f"{messages.__name__}.{info.name}")
        found += [c for c in vars(module).values() if isinstance(c, type) and issubclass(c, Struct)
                  and c.__module__ == module.__name__ and vars(c).get("NAME")]
    return sorted(found, key=lambda c: c.NAME)


def _versions(cls: type[Struct]) -> range:
    return range(cls.VALID_VERSIONS[0], cls.VALID_VERSIONS[1] + 1)


USERS = [(cls, v) for cls in _top_level_messages() for v in _versions(cls) if _int_arrays(cls, v, cls.is_flexible(v))]
USER_CLASSES = sorted({cls for cls, _ in USERS}, key=lambda c: c.NAME)


def _reachable(cls: type, seen: set[type] | None = None) -> set[type]:
    seen = set() if seen is None else seen
    seen.add(cls)
    for f in cls.FIELDS:
        if f.kind == "struct" and f.struct not in seen:
            _reachable(f.struct, seen)
    return seen


# ------------------------------------------------------------ random messages from the schemas

_INTS = {"int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1), "int32": (-(2**31), 2**31 - 1),
         "int64": (-(2**63), 2**63 - 1), "uint16": (0, 2**16 - 1), "uint32": (0, 2**32 - 1)}


def _scalar(kind: str) -> st.SearchStrategy:
    if kind in _INTS:
        lo, hi = _INTS[kind]
        return st.one_of(st.sampled_from(sorted({lo, max(lo, -1), 0, 1, hi})), st.integers(lo, hi))
    return {"bool": st.booleans(), "float64": st.floats(allow_nan=False), "uuid": st.uuids(),
            "string": st.text(max_size=5), "bytes": st.binary(max_size=6), "records": st.binary(max_size=6)}[kind]


def _struct(cls: type, version: int, flex: bool, depth: int = 0) -> st.SearchStrategy:
    fields = {}
    for f in cls.FIELDS:
        if not schema._in(f.versions, version):
            continue
        if f.kind == "struct":
            if depth > 4:  # a recursive schema: its defaults below this depth
                continue
            one = _struct(f.struct, version, _flex_of(f, flex, version), depth + 1)
        else:
            one = _scalar(f.kind)
        # The outer arrays longer (the integer ones among them have several elements for C).
        value = st.lists(one, max_size=6 if f.kind == "struct" and not depth else 3) if f.is_array else one
        fields[f.name] = st.one_of(st.none(), value) if schema._in(f.nullable, version) else value
    return st.builds(cls, **fields)


@st.composite
def _cases(draw: st.DrawFn, cls: type[Struct]) -> tuple[int, Struct]:
    """A version of ``cls`` with such an array, and a message of it."""
    version = draw(st.sampled_from([v for c, v in USERS if c is cls]))
    return version, draw(_struct(cls, version, cls.is_flexible(version)))


# ------------------------------------------------------------ decoding both ways

class _Readers:
    """The compiled readers of every class a message reaches, with the C reader and without,
    each compiled once and swapped in for a decode."""

    def __init__(self) -> None:
        self.saved: dict[type, dict] = {}
        self.sets: dict[tuple[type, bool], dict] = {}

    def decode(self, cls: type[Struct], data: bytes, version: int, with_c: bool) -> tuple[str, Any]:
        """(outcome, value): the message as a dict, or the error's text."""
        classes = _reachable(cls)
        old = schema._read_int_structs
        for c in classes:
            self.saved.setdefault(c, c._readers)
            c._readers = self.sets.setdefault((c, with_c), {})
        schema._read_int_structs = C_READER if with_c else None  # read when a reader is compiled
        try:
            return "ok", cls.decode(data, version).to_dict()
        except ProtocolDecodeError as e:
            return "error", str(e)
        finally:
            schema._read_int_structs = old
            for c in classes:
                c._readers = self.saved[c]


READERS = _Readers()


def _same_both_ways(cls: type[Struct], data: bytes, version: int) -> tuple[str, Any]:
    python = READERS.decode(cls, data, version, False)
    assert READERS.decode(cls, data, version, True) == python
    return python


class _Counted(list):
    """A list whose length prefix states ``count`` elements (the writer reads len()), its real
    elements following."""

    count = 0

    def __len__(self) -> int:
        return self.count


def _mark(message: Struct, cls: type, name: str, index: int) -> _Counted | None:
    """The ``index``-th (modulo their number) non-empty array ``name`` of a ``cls`` in
    ``message``, made a ``_Counted`` in place; None when there is none."""
    found: list[Struct] = []

    def walk(s: Struct) -> None:
        for f in type(s).FIELDS:
            v = getattr(s, f.name)
            if type(s) is cls and f.name == name and v:
                found.append(s)
            if f.kind == "struct" and v is not None:
                for e in v if f.is_array else [v]:
                    walk(e)

    walk(message)
    if not found:
        return None
    owner = found[index % len(found)]
    counted = _Counted(getattr(owner, name))
    setattr(owner, name, counted)
    return counted


def _uvarint(n: int) -> bytes:
    out = bytearray()
    schema.write_uvarint(out, n)
    return bytes(out)


def _hostile_counts(real: int, flex: bool) -> list[bytes]:
    """Count prefixes for an array of ``real`` elements: null or negative, none, one short,
    one or many more than there are, and the largest."""
    if flex:  # a varint of the count + 1
        return [_uvarint(n + 1) for n in (-1, 0, real - 1, real + 1, real + 1000, 2**28)] + [b"\xff" * 5]
    return [struct.pack(">i", n) for n in (-(2**31), -7, -1, 0, real - 1, real + 1, real + 1000, 2**31 - 1)]


# ------------------------------------------------------------ the tests


def test_the_c_reader_is_used_when_built() -> None:
    assert (C_READER is not None) == (speedups() is not None)
    if C_READER is not None:
        assert schema._int_struct_plan(fq.FetchPartition, 16, True) is not None


def test_every_user_is_found() -> None:
    names = {cls.NAME for cls in USER_CLASSES}
    # A few known ones: the discovery works; the rest come with them.
    assert {"FetchRequest", "FetchResponse", "ListOffsetsRequest", "OffsetForLeaderEpochRequest",
            "ProducerSnapshot", "ShareFetchResponse", "DeleteRecordsRequest"} <= names
    assert len(names) >= 30


EACH_USER = pytest.mark.parametrize("cls", USER_CLASSES, ids=lambda c: c.NAME)


@SKIP_WITHOUT_C
@EACH_USER
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), cut=st.integers(0, 300), flip=st.tuples(st.integers(0, 300), st.integers(0, 255)))
def test_same_structs_and_errors_as_the_python_readers(cls: type[Struct], data: st.DataObject, cut: int,
                                                        flip: tuple[int, int]) -> None:
    version, message = data.draw(_cases(cls))
    encoded = message.encode(version)
    assert _same_both_ways(cls, encoded, version)[0] == "ok"
    _same_both_ways(cls, encoded[:cut % (len(encoded) + 1)], version)
    at, byte = flip
    at %= len(encoded)
    _same_both_ways(cls, encoded[:at] + bytes([byte]) + encoded[at + 1:], version)


@SKIP_WITHOUT_C
@EACH_USER
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), which=st.integers(0, 50), index=st.integers(0, 10))
def test_hostile_counts_give_the_same_structs_or_errors(cls: type[Struct], data: st.DataObject, which: int,
                                                       index: int) -> None:
    version, message = data.draw(_cases(cls))
    arrays = _int_arrays(cls, version, cls.is_flexible(version))
    owner, name = arrays[which % len(arrays)]
    flex = _flex_of(next(f for f in owner.FIELDS if f.name == name), cls.is_flexible(version), version)
    counted = _mark(message, owner, name, index)
    if counted is None:
        return  # no element in such an array of this message
    real = list.__len__(counted)
    # Two encodings stating counts of one size: they differ first where the prefix starts.
    counted.count = 0x11 if flex else 0x01010101
    first = message.encode(version)
    counted.count = 0x22 if flex else 0x02020202
    at = next(i for i, (x, y) in enumerate(zip(first, message.encode(version), strict=True)) if x != y)
    size = 1 if flex else 4
    for prefix in _hostile_counts(real, flex):
        _same_both_ways(cls, first[:at] + prefix + first[at + size:], version)


@SKIP_WITHOUT_C
def test_tagged_fields_of_an_element_are_read() -> None:
    dir_id = uuid.uuid4()
    req = fq.FetchRequest(topics=[fq.FetchTopic(topic_id=uuid.uuid4(), partitions=[
        fq.FetchPartition(partition=1, fetch_offset=5, replica_directory_id=dir_id, high_watermark=7),
        fq.FetchPartition(partition=2, fetch_offset=6)])])
    got = fq.FetchRequest.decode(req.encode(18), 18).topics[0].partitions
    assert [(p.partition, p.fetch_offset, p.replica_directory_id, p.high_watermark) for p in got] == [
        (1, 5, dir_id, 7), (2, 6, schema.ZERO_UUID, 2**63 - 1)]
