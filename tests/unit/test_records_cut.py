"""``records.cut_batch``: a batch cut down to some of its records, as a share fetch answers a
batch acquired in part; the C record walk (``_speedups.record_span``) against the Python one."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rivulet.protocol import records as rec
from rivulet.protocol.compression import GZIP

pytestmark = pytest.mark.fast

try:
    from rivulet.protocol._speedups import record_span as c_record_span
except ImportError:  # reported by test_records_speedups.test_extension_is_built
    c_record_span = None

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
