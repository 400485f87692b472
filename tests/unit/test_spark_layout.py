"""The PySpark source's record layout in C (``_speedups.record_layout``) against its pyarrow
path: whenever both describe a chunk they describe it identically, valid chunks are always
described and match the reference decoder, and damaged ones never crash."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_records_speedups import FUZZ

pa = pytest.importorskip("pyarrow", reason="pyarrow comes with the spark extra, which CI installs")

from rivulet.protocol.records import HEADER_SIZE, Record, encode_batch  # noqa: E402
from rivulet.arrow import records as _records  # noqa: E402
from rivulet.arrow.records import Chunk  # noqa: E402

pytestmark = pytest.mark.fast

T0 = 1_700_000_000_000


def chunk_of(batches: list[list[Record]], want_headers: bool, lat: int | None = None) -> Chunk:
    chunk = Chunk(want_headers)
    offset = 0
    for recs in batches:
        chunk.add(encode_batch(recs, base_offset=offset, base_timestamp=T0)[HEADER_SIZE:], offset, T0, len(recs),
                  True, lat)
        offset += len(recs)
    return chunk


def layouts(chunk: Chunk) -> tuple:
    c = _records._record_layout(chunk.data, chunk.batches, chunk.want_headers)
    arrow = Chunk(chunk.want_headers)
    arrow.data, arrow.batches, arrow.n, arrow.ts_types = chunk.data, chunk.batches, chunk.n, chunk.ts_types
    try:
        ok = arrow._vectorized_arrow()
    except Exception:
        ok = False
    return c, (arrow if ok else None)


def same(c: tuple, arrow: Chunk) -> None:
    pos, offsets, timestamps, with_headers = c
    assert pa.py_buffer(pos).to_pybytes() == arrow.pos.cast(pa.int32()).buffers()[1].to_pybytes()[
        arrow.pos.offset * 4:(arrow.pos.offset + len(arrow.pos)) * 4]
    assert list(memoryview(offsets).cast("q")) == arrow.offsets.to_pylist()
    assert list(memoryview(timestamps).cast("q")) == arrow.timestamps.to_pylist()
    assert [i for i, _, _ in with_headers] == [i for i, _ in arrow.headers]


records_st = st.lists(
    st.builds(
        Record,
        offset=st.just(0),
        timestamp=st.one_of(st.integers(T0 - 100_000, T0 + 100_000), st.integers(T0 - 10**9, T0 + 10**9)),
        key=st.none() | st.binary(max_size=80),
        value=st.none() | st.binary(max_size=300),
        headers=st.lists(st.tuples(st.text(max_size=4), st.none() | st.binary(max_size=6)), max_size=2),
    ),
    min_size=1,
    max_size=300,
)


@FUZZ
@given(st.lists(records_st, min_size=1, max_size=3), st.booleans(), st.data())
def test_c_and_pyarrow_layouts_agree(batches: list[list[Record]], want_headers: bool, data: st.DataObject) -> None:
    chunk = chunk_of(batches, want_headers)
    c, arrow = layouts(chunk)
    assert c is not None  # a valid chunk is always described
    if arrow is not None:
        same(c, arrow)
    want = [r for recs in batches for r in recs]
    pos = list(memoryview(c[0]).cast("i"))
    for i, r in enumerate(want):
        ks, ke, vs, ve = pos[4 * i:4 * i + 4]
        assert bytes(chunk.data[ks:ke]) == (r.key or b"")
        assert chunk.data[ks - 1] == (1 if r.key is None else chunk.data[ks - 1])  # null: zigzag -1
        assert bytes(chunk.data[vs:ve]) == (r.value or b"")
    assert list(memoryview(c[2]).cast("q")) == [r.timestamp for r in want]
    assert [i for i, _, _ in c[3]] == ([i for i, r in enumerate(want) if r.headers] if want_headers else [])

    # Damaged: either path may refuse, neither may crash, and where both describe it they agree.
    raw = bytearray(chunk.data)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.sampled_from([0x00, 0x01, 0x02, 0x7F, 0x80, 0xFF, raw[at] ^ 0x10]))
    damaged = Chunk(want_headers)
    damaged.data, damaged.batches, damaged.n, damaged.ts_types = raw, chunk.batches, chunk.n, chunk.ts_types
    c, arrow = layouts(damaged)
    if c is not None and arrow is not None:
        same(c, arrow)


def test_log_append_time_and_compacted_offsets() -> None:
    recs = [Record(0, T0 + i, b"k%d" % i, b"v" * i, []) for i in range(400)]
    chunk = chunk_of([recs], False, lat=T0 + 99)
    c, arrow = layouts(chunk)
    same(c, arrow)
    assert set(memoryview(c[2]).cast("q")) == {T0 + 99}


def test_odd_batches_are_left_to_the_other_paths() -> None:
    recs = [Record(0, T0, b"k", b"v", []) for _ in range(300)]
    raw = encode_batch(recs, base_offset=0, base_timestamp=T0)[HEADER_SIZE:]
    layout = _records._record_layout
    assert layout(bytearray(raw), [(0, len(raw), 300, 0, T0, True, None)], False) is not None
    assert layout(bytearray(raw), [(0, len(raw), 301, 0, T0, True, None)], False) is None  # runs out
    assert layout(bytearray(raw), [(0, len(raw) - 1, 300, 0, T0, True, None)], False) is None
    assert layout(bytearray(raw), [(0, len(raw), 299, 0, T0, True, None)], False) is None  # bytes left
    assert layout(bytearray(raw), [(0, len(raw) + 5, 300, 0, T0, True, None)], False) is None
    assert layout(bytearray(raw), [("x",)], False) is None
    assert layout(bytearray(), [], False) is None
    with pytest.raises(TypeError):
        layout(bytearray(raw), "not a list", False)
    rnd = random.Random(3)
    for _ in range(200):  # random bytes: never a crash
        junk = bytearray(rnd.randbytes(rnd.randrange(1, 400)))
        layout(junk, [(0, len(junk), rnd.randrange(1, 50), 0, T0, True, None)], True)


@pytest.mark.parametrize("codecs", [(0, 0, 0), (0, 1, 0), (1, 0, 0), (3, 3, 4, 3)],
                         ids=["plain", "gzip-between", "gzip-first", "lz4-zstd-one-reused-buffer"])
def test_records_decoded_in_place_equal_copied_and_outlive_their_buffer(codecs: tuple[int, ...]) -> None:
    from rivulet.arrow.records import decode_into
    batches, offset = [], 0
    for b, codec in enumerate(codecs):
        recs = [Record(0, T0 + i, None if i % 7 == 0 else b"k%d" % i, b"v%d" % (b * 1000 + i) * 3, [])
                for i in range(300)]
        batches.append(encode_batch(recs, base_offset=offset, base_timestamp=T0, compression=codec))
        offset += len(recs)
    frame = bytearray(b"".join(batches))
    records = memoryview(frame)
    copied = Chunk(False)
    decode_into(copied, bytes(frame), 0, offset, False, None)
    in_place = Chunk(False, over=records)
    decode_into(in_place, records, 0, offset, False, None)
    assert in_place.copied == any(codecs) and copied.copied
    if not any(codecs):
        assert in_place.data is records  # the uncompressed batches were not copied
    got = in_place.to_arrow("t", 0)
    frame[:] = bytes(len(frame))  # the buffer is reused for the next fetch
    want = copied.to_arrow("t", 0)
    assert got.equals(want) and got.num_rows == offset
    assert got.column("key")[0].as_py() is None and got.column("value")[1].as_py() == b"v1" * 3


def test_decoding_does_not_import_pandas() -> None:
    # pandas costs every Python worker (and the streaming source's driver-side process) a
    # third of a second of CPU to import; the decoding path has no use for it.
    import subprocess
    import sys
    code = """if True:
        import sys
        from rivulet.protocol.records import Record, encode_batch
        from rivulet.arrow.records import Chunk, decode_into
        recs = [Record(0, 1_700_000_000_000 + i, None if i % 5 else b"k", b"v" * (i % 3), []) for i in range(400)]
        records = memoryview(bytearray(encode_batch(recs, base_offset=0, base_timestamp=1_700_000_000_000)))
        chunk = Chunk(False, over=records)
        decode_into(chunk, records, 0, 400, False, None)
        lo, hi = chunk.bounds(10, 390)
        assert chunk.to_arrow("t", 3, lo, hi).num_rows == 380
        print("pandas" in sys.modules)
    """
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_per_record_loop_refuses_what_the_decoder_refuses() -> None:
    # The source's per-record loop walks records with the decoder's walk (record_walk): a
    # damaged record is refused (CORRUPT_MESSAGE) where the decoder refuses it, never made
    # into a row nor an OverflowError, and an intact one gives the decoder's fields.
    from rivulet.protocol import records
    from rivulet.protocol.errors import ApiError, ErrorCode
    rnd = random.Random(11)
    refused = 0
    for k in range(400):
        recs = [Record(0, T0 + rnd.randint(-1000, 1000), None if rnd.random() < .2 else rnd.randbytes(rnd.randint(0, 30)),
                       None if rnd.random() < .2 else rnd.randbytes(rnd.randint(0, 60)),
                       [("h", None if rnd.random() < .5 else b"x")] * rnd.choice([0, 1, 2]))
                for _ in range(rnd.randint(1, 8))]
        sec = bytearray(encode_batch(recs, base_offset=0, base_timestamp=T0)[HEADER_SIZE:])
        if k % 4:
            at = rnd.randrange(len(sec))
            sec[at] = rnd.choice([0x00, 0x01, 0x03, 0x7F, 0x80, 0xFF, sec[at] ^ 0x10])
        try:
            want = records._py_parse_records(bytes(sec), 0, len(sec), len(recs), 5, T0, None)
        except ApiError:
            want = None
        chunk = Chunk(True)
        chunk.add(sec, 5, T0, len(recs), False, None)
        try:
            got = chunk.to_arrow("t", 0).to_pylist()
        except ApiError as exc:
            assert want is None and exc.code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD)
            refused += 1
            continue
        assert want is not None, f"record section {k} became rows though the decoder refuses it"
        assert [(r["offset"], r["key"], r["value"], r["headers"] or []) for r in got] == \
            [(r.offset, r.key, r.value, [{"key": n, "value": v} for n, v in r.headers]) for r in want]
    assert refused > 30
