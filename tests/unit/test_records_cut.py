"""``records.cut_batch``: a batch cut down to some of its records, as a share fetch answers a
batch acquired in part, and ``records.join_batches``, such an answer's batches made one; the C
record walk (``_speedups.record_span``) and re-basing (``_speedups.rebase_records``) against the
Python ones."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rivulet.protocol import records as rec
from rivulet.protocol.compression import GZIP

pytestmark = pytest.mark.fast

try:
    from rivulet.protocol._speedups import rebase_records as c_rebase_records
    from rivulet.protocol._speedups import record_span as c_record_span
except ImportError:  # reported by test_records_speedups.test_extension_is_built
    c_rebase_records = c_record_span = None

T0 = 1_700_000_000_000


def batch(n: int, base: int = 0, **kw) -> bytes:
    return rec.encode_batch([rec.Record(0, T0 + i, b"k%d" % i if i % 3 else None, b"v" * (i % 200),
                                        [("h", b"%d" % i)] if i % 5 == 0 else []) for i in range(n)],
                            base_offset=base, **kw)


def test_a_cut_batch_holds_only_the_records_asked_for_and_keeps_the_batch_fields() -> None:
    whole = batch(300, base=1000, producer_id=7, producer_epoch=2, base_sequence=0, partition_leader_epoch=4)
    cut = rec.cut_batch(whole, 1100, 1199)
    assert cut is not None and len(cut) < len(whole)
    got = rec.decode_batch(cut)  # the CRC is checked
    was = rec.decode_batch(whole)
    assert [r.offset for r in got.records] == list(range(1100, 1200))
    assert got.records == was.records[100:200]
    h, w = got.header, was.header
    assert (h.base_offset, h.last_offset, h.records_count) == (1000, 1299, 100)  # as compaction leaves a batch
    assert (h.base_timestamp, h.max_timestamp, h.producer_id, h.producer_epoch, h.base_sequence,
            h.partition_leader_epoch, h.attributes) == (w.base_timestamp, w.max_timestamp, w.producer_id,
                                                        w.producer_epoch, w.base_sequence,
                                                        w.partition_leader_epoch, w.attributes)
    # Offsets past either end are clamped to the batch.
    assert [r.offset for r in rec.decode_batch(rec.cut_batch(whole, 0, 1009)).records] == list(range(1000, 1010))
    assert [r.offset for r in rec.decode_batch(rec.cut_batch(whole, 1290, 5000)).records] == list(range(1290, 1300))


def test_batches_that_cannot_be_cut_by_slicing_are_left_whole() -> None:
    assert rec.cut_batch(batch(10), 0, 9) is None  # all of it
    assert rec.cut_batch(batch(10), 20, 30) is None  # none of it
    assert rec.cut_batch(batch(10, compression=GZIP), 2, 5) is None
    gappy = bytearray(batch(10))  # compacted: fewer records than offsets
    rec._INT32.pack_into(gappy, rec.LAST_OFFSET_DELTA_OFFSET, 20)
    assert rec.cut_batch(bytes(gappy), 2, 5) is None


@pytest.mark.skipif(c_record_span is None, reason="the C accelerator is not built")
@given(n=st.integers(1, 60), a=st.integers(0, 70), b=st.integers(0, 70), chop=st.integers(0, 40))
def test_the_c_record_walk_answers_as_the_python_one(n: int, a: int, b: int, chop: int) -> None:
    data = batch(n)
    stop = max(rec.HEADER_SIZE, len(data) - chop)  # a cut short section does not frame
    first, last = min(a, b), max(a, b)
    assert c_record_span(data, rec.HEADER_SIZE, stop, first, last) == \
        rec._py_record_span(data, rec.HEADER_SIZE, stop, first, last)


def test_joined_batches_hold_every_record_as_it_was_in_one_batch() -> None:
    first = batch(300, base=1000, partition_leader_epoch=4)
    second = batch(300, base=1300, partition_leader_epoch=4)
    parts = [rec.cut_batch(first, 1200, 1299), rec.cut_batch(second, 1300, 1349)]
    joined = rec.join_batches(parts)
    assert joined is not None
    got = rec.decode_batch(joined)  # the CRC is checked
    assert got.records == rec.decode_batch(parts[0]).records + rec.decode_batch(parts[1]).records
    h = got.header
    assert (h.base_offset, h.last_offset, h.records_count, h.partition_leader_epoch) == (1000, 1599, 150, 4)
    assert (h.base_timestamp, h.max_timestamp) == (T0, T0 + 299)
    # Offsets and timestamps past what one byte's delta holds are re-based too.
    far = batch(10, base=900_000)
    far_records = [rec.Record(r.offset, r.timestamp - 10**9, r.key, r.value, r.headers)
                   for r in rec.decode_batch(far).records]
    far = rec.encode_batch(far_records, base_offset=900_000)
    got = rec.decode_batch(rec.join_batches([batch(5, base=10), far])).records
    assert [r.offset for r in got] == [*range(10, 15), *range(900_000, 900_010)]
    assert [r.timestamp for r in got[5:]] == [r.timestamp for r in far_records]


def test_an_idempotent_producer_s_batches_join_while_their_sequences_run_on() -> None:
    a = batch(10, base=0, producer_id=7, producer_epoch=1, base_sequence=100)
    b = batch(10, base=10, producer_id=7, producer_epoch=1, base_sequence=110)
    h = rec.decode_batch(rec.join_batches([a, b])).header
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.records_count) == (7, 1, 100, 20)
    assert rec.join_batches([a, batch(10, base=10, producer_id=7, producer_epoch=1, base_sequence=0)]) is None
    assert rec.join_batches([a, batch(10, base=10, producer_id=8, producer_epoch=1, base_sequence=110)]) is None


def test_batches_that_cannot_be_one_are_left_apart() -> None:
    plain = batch(10, base=0)
    assert rec.join_batches([plain]) is None  # nothing to join
    assert rec.join_batches([plain, batch(10, base=10, compression=GZIP)]) is None
    assert rec.join_batches([plain, batch(10, base=10, transactional=True, producer_id=3,
                                          producer_epoch=0, base_sequence=0)]) is None
    assert rec.join_batches([plain, batch(10, base=10, partition_leader_epoch=2)]) is None
    assert rec.join_batches([plain, batch(10, base=5)]) is None  # offsets not ascending


@pytest.mark.skipif(c_rebase_records is None, reason="the C accelerator is not built")
@given(n=st.integers(0, 40), shift=st.integers(0, 1 << 31), ts_shift=st.integers(-(1 << 50), 1 << 50),
       chop=st.integers(0, 30))
def test_the_c_rebase_answers_as_the_python_one(n: int, shift: int, ts_shift: int, chop: int) -> None:
    data = batch(max(n, 1))
    stop = max(rec.HEADER_SIZE, len(data) - chop)  # a cut short section does not frame
    assert c_rebase_records(data, rec.HEADER_SIZE, stop, n, shift, ts_shift) == \
        rec._py_rebase_records(data, rec.HEADER_SIZE, stop, n, shift, ts_shift)
