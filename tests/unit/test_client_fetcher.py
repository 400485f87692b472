"""The fetcher's handling of a Fetch response: offsets, filtering, control records, errors."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace as NS

import pytest

from rivulet.client.config import resolve
from rivulet.client.client import KafkaClient
from rivulet.client.errors import KafkaError
from rivulet.client.consumer.fetcher import FetchBuffer, Fetcher
from rivulet.client.consumer.subscription import SubscriptionState
from rivulet.protocol import compression
from rivulet.protocol import records as rec

pytestmark = pytest.mark.fast

TP = ("t", 0)


def batch(base: int, n: int, **kw) -> bytes:
    recs = [rec.Record(base + i, 1_700_000_000_000 + base + i, None, b"v%d" % (base + i), []) for i in range(n)]
    return rec.encode_batch(recs, base_offset=base, **kw)


def setup(position: int, **conf):
    c = resolve({"bootstrap.servers": "127.0.0.1:1", **conf}, "consumer")
    subs = SubscriptionState(c["auto.offset.reset"])
    subs.assign_from_user([TP])
    subs.seek(TP, position)
    errors: list = []
    f = Fetcher(KafkaClient(c), subs, c, on_error=lambda tp, err: errors.append(err))
    return f, subs.state(TP), f.buffer, errors


def respond(f: Fetcher, st, data: bytes, hw: int = 10**6, aborted=None, code: int = 0, diverging=None) -> None:
    pd = NS(error_code=code, high_watermark=hw, last_stable_offset=hw, log_start_offset=0,
            aborted_transactions=aborted, records=memoryview(data), current_leader=None,
            diverging_epoch=NS(epoch=diverging[0], end_offset=diverging[1]) if diverging else None)
    f._handle_partition(TP, st, st.epoch, st.fetch_offset, pd)


def offsets(buf: FetchBuffer) -> list[int]:
    return [m.offset() for m in buf.take(10**6) if m.error() is None]


def test_records_below_the_position_in_a_returned_batch_are_dropped():
    f, st, buf, _ = setup(position=7)
    respond(f, st, batch(5, 5) + batch(10, 3))  # the broker returns the whole batch holding 7
    assert offsets(buf) == [7, 8, 9, 10, 11, 12]
    assert st.position == 13 and st.fetch_offset == 13


def test_compressed_batch_is_filtered_the_same_way():
    f, st, buf, _ = setup(position=2)
    respond(f, st, batch(0, 5, compression=compression.ZSTD))
    assert offsets(buf) == [2, 3, 4]


def test_trailing_partial_batch_is_left_for_the_next_fetch():
    f, st, buf, _ = setup(position=0)
    whole = batch(0, 3)
    respond(f, st, whole + batch(3, 3)[:40])
    assert offsets(buf) == [0, 1, 2] and st.fetch_offset == 3


def test_control_batches_are_skipped_and_aborted_transactions_filtered():
    f, st, buf, _ = setup(position=0)  # read_committed is the default, as librdkafka's
    committed = batch(0, 2, producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
    commit = rec.encode_control_batch(rec.ControlRecordType.COMMIT, producer_id=7, producer_epoch=0,
                                      coordinator_epoch=0, base_offset=2, timestamp=1)
    aborted = batch(3, 2, producer_id=8, producer_epoch=0, base_sequence=0, transactional=True)
    abort = rec.encode_control_batch(rec.ControlRecordType.ABORT, producer_id=8, producer_epoch=0,
                                     coordinator_epoch=0, base_offset=5, timestamp=1)
    plain = batch(6, 1)
    respond(f, st, committed + commit + aborted + abort + plain, aborted=[NS(producer_id=8, first_offset=3)])
    assert offsets(buf) == [0, 1, 6]
    assert st.position == 7


def test_read_uncommitted_returns_aborted_records_but_never_control_records():
    f, st, buf, _ = setup(position=0, **{"isolation.level": "read_uncommitted"})
    aborted = batch(0, 2, producer_id=8, producer_epoch=0, base_sequence=0, transactional=True)
    abort = rec.encode_control_batch(rec.ControlRecordType.ABORT, producer_id=8, producer_epoch=0,
                                     coordinator_epoch=0, base_offset=2, timestamp=1)
    respond(f, st, aborted + abort, aborted=[NS(producer_id=8, first_offset=0)])
    assert offsets(buf) == [0, 1] and st.fetch_offset == 3


def test_corrupt_batch_is_reported_and_skipped():
    f, st, buf, errors = setup(position=0, **{"check.crcs": True})
    bad = bytearray(batch(3, 2))
    bad[-1] ^= 0xFF  # breaks the CRC
    respond(f, st, batch(0, 3) + bytes(bad) + batch(5, 2))
    assert offsets(buf) == [0, 1, 2, 5, 6]
    assert len(errors) == 1 and errors[0].code() == KafkaError._BAD_MSG


def test_partition_eof_once_per_reaching_the_end():
    f, st, buf, _ = setup(position=0, **{"enable.partition.eof": True})
    respond(f, st, batch(0, 2), hw=2)
    msgs = buf.take(10)
    assert [m.offset() for m in msgs] == [0, 1, 2]
    assert msgs[-1].error().code() == KafkaError._PARTITION_EOF
    respond(f, st, b"", hw=2)
    assert buf.take(10) == []
    respond(f, st, batch(2, 1), hw=3)
    assert [m.error() is not None for m in buf.take(10)] == [False, True]


def test_out_of_range_resets_by_policy():
    f, st, buf, errors = setup(position=50, **{"auto.offset.reset": "earliest"})
    respond(f, st, b"", code=1)  # OFFSET_OUT_OF_RANGE
    assert st.position is None and st.reset_strategy == "earliest" and errors == [None]


def test_stale_response_after_a_seek_is_ignored():
    f, st, buf, _ = setup(position=0)
    epoch, offset = st.epoch, st.fetch_offset
    st.seek(100)
    pd = NS(error_code=0, high_watermark=10, last_stable_offset=10, log_start_offset=0, aborted_transactions=None,
            records=memoryview(batch(0, 3)), current_leader=None, diverging_epoch=None)
    f._handle_partition(TP, st, epoch, offset, pd)
    assert buf.take(10) == []  # fetched for the old position: dropped when taken
    assert st.position == 100


def test_batches_give_the_position_its_leader_epoch():
    f, st, buf, _ = setup(position=0)
    respond(f, st, batch(0, 3, partition_leader_epoch=2) + batch(3, 2, partition_leader_epoch=4))
    assert [m.leader_epoch() for m in buf.take(10)] == [2, 2, 2, 4, 4]
    assert (st.position, st.leader_epoch) == (5, 4)


@pytest.mark.parametrize("reset,end,expect", [
    ("earliest", (3, 8), (8, 3, None)),             # truncated below the position: continue there
    ("earliest", (3, 20), (10, 3, None)),           # diverges past the position: refetch from it
    ("error", (3, 8), (10, 3, KafkaError._LOG_TRUNCATION)),
])
def test_a_diverging_epoch_moves_the_position_back(reset, end, expect):
    f, st, buf, errors = setup(position=0, **{"auto.offset.reset": reset})
    respond(f, st, batch(0, 10, partition_leader_epoch=3))
    assert len(buf.take(100)) == 10 and (st.position, st.leader_epoch) == (10, 3)
    st.fetch_offset, st.fetch_epoch = 25, 5  # fetched ahead from the old leader
    respond(f, st, b"", diverging=end)
    assert st.position == expect[0] and st.fetch_offset == expect[0] and st.leader_epoch == expect[1]
    assert [e.code() for e in errors if e is not None] == ([expect[2]] if expect[2] else [])


def test_draining_the_full_buffer_wakes_the_fetcher():
    async def main():
        f, st, buf, _ = setup(position=0, **{"queued.max.messages.kbytes": 1})
        f._waker.bind(asyncio.get_running_loop())  # as start() does, without the fetch loop
        respond(f, st, batch(0, 200))
        assert buf.nbytes >= f.max_buffer  # at its limit: the fetch loop sends no more
        buf.take(1)
        assert not f._wake.is_set()  # still full
        buf.take(10**6)
        assert f._wake.is_set()  # below it again: fetch

    asyncio.run(main())
