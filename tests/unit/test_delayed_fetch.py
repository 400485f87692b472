"""DelayedFetch decides from log positions (Kafka's LogOffsetMetadata) and reads once."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from rivulet.common.file_region import FileRegion
from rivulet.common.promise import Promise
from rivulet.common.types import TopicPartition
from rivulet.delayed import Timer
from rivulet.protocol import records as rec
from rivulet.protocol.errors import ErrorCode
from rivulet.replication.replica_manager import (
    FetchParams,
    FetchRequestPartition,
    REGION_MIN,
    ReplicaManager,
    readable_bytes,
)
from rivulet.storage import Log, LogConfig
from rivulet.storage.log import LogOffsetMetadata

pytestmark = pytest.mark.fast

T0 = 1_700_000_000_000


def meta(offset: int, segment: int, position: int) -> LogOffsetMetadata:
    return LogOffsetMetadata(offset, segment, position)


# -- the decision, per partition -----------------------------------------------------------


def test_same_segment_counts_the_bytes_between_positions() -> None:
    assert readable_bytes(meta(10, 0, 1000), meta(15, 0, 1700), 1 << 20) == 700


def test_bytes_are_capped_by_the_partition_max_bytes() -> None:
    assert readable_bytes(meta(10, 0, 1000), meta(15, 0, 1700), 300) == 300


def test_end_on_a_later_segment_completes() -> None:
    assert readable_bytes(meta(10, 0, 1000), meta(11, 11, 0), 1 << 20) is None


def test_fetch_offset_past_the_end_completes() -> None:
    # A truncated leader, or a consumer ahead of the HW.
    assert readable_bytes(meta(20, 0, 3000), meta(15, 0, 1700), 1 << 20) is None


def test_nothing_new_at_the_same_offset_even_after_a_roll() -> None:
    assert readable_bytes(meta(15, 0, 1700), meta(15, 0, 1700), 1 << 20) == 0
    # The end kept its offset but a roll moved it to the new segment: still nothing to read.
    assert readable_bytes(meta(15, 0, 1700), meta(15, 15, 0), 1 << 20) == 0


# -- the Log's position metadata --------------------------------------------------------------


def _batch(n: int, size: int = 100) -> bytes:
    return rec.encode_batch([rec.Record(0, T0 + i, None, b"x" * size, []) for i in range(n)])


def _append(log: Log, data: bytes) -> None:
    buf = bytearray(data)
    headers = rec.validate_produce_records(buf, max_batch_size=1 << 30)
    log.append_as_leader(buf, headers, leader_epoch=0, now_ms=T0)
    log.high_watermark = log.log_end_offset


@pytest.fixture
def log(tmp_path):
    lg = Log(str(tmp_path / "t-0"), LogConfig())
    yield lg
    lg.close()


def test_log_exposes_leo_hw_and_offset_positions(log: Log) -> None:
    first, second = _batch(3), _batch(2)
    _append(log, first)
    _append(log, second)
    assert log.log_end_offset_metadata == meta(5, 0, len(first) + len(second))
    assert log.high_watermark_metadata == log.log_end_offset_metadata
    assert log.offset_metadata(0) == meta(0, 0, 0)
    assert log.offset_metadata(1) == meta(1, 0, 0)  # the position of the batch holding it
    assert log.offset_metadata(3) == meta(3, 0, len(first))
    log.high_watermark = 3
    assert log.high_watermark_metadata == meta(3, 0, len(first))


def test_read_records_the_fetch_offset_position(log: Log) -> None:
    first = _batch(3)
    _append(log, first)
    _append(log, _batch(2))
    assert log.read(4, 1 << 20).fetch_offset_metadata == meta(4, 0, len(first))
    # Nothing to read at the end: no position looked up (a waiting fetch finds it itself).
    assert log.read(5, 1 << 20).fetch_offset_metadata is None
    assert log.read(3, 1 << 20, max_offset=3).fetch_offset_metadata is None


def test_positions_follow_a_roll(log: Log) -> None:
    _append(log, _batch(3))
    log.roll()
    _append(log, _batch(1))
    assert log.log_end_offset_metadata == meta(4, 3, len(_batch(1)))
    assert log.offset_metadata(3) == meta(3, 3, 0)


def test_truncation_forgets_cached_positions(log: Log) -> None:
    _append(log, _batch(3))
    _append(log, _batch(3))
    log.high_watermark = 3
    assert log.high_watermark_metadata.relative_position_in_segment == len(_batch(3))
    log.truncate_to(3)
    _append(log, _batch(1, size=10))
    _append(log, _batch(1, size=10))
    assert log.offset_metadata(4) == meta(4, 0, len(_batch(3)) + len(_batch(1, size=10)))


# -- DelayedFetch through the ReplicaManager ----------------------------------------------------


class CountingLog(Log):
    reads = 0

    def read(self, *args, **kwargs):  # type: ignore[override]
        CountingLog.reads += 1
        return super().read(*args, **kwargs)


def _produce(rm: ReplicaManager, tp: TopicPartition, data: bytes) -> None:
    res = rm.append_records({tp: bytearray(data)}, required_acks=1, timeout_ms=1000)
    assert res[tp].error == ErrorCode.NONE


def _run_many(tmp_path, n: int, body):
    """``body(rm, tps, logs)`` on a replica manager leading partitions 0..n-1 of topic t."""
    async def main():
        timer = Timer(asyncio.get_running_loop())
        rm = ReplicaManager(0, timer)
        tps = [TopicPartition("t", i) for i in range(n)]
        logs = [CountingLog(str(tmp_path / f"t-{i}"), LogConfig()) for i in range(n)]
        for tp, lg in zip(tps, logs, strict=True):
            rm.add_partition(rm.new_partition(tp, uuid.uuid4(), lg))
        try:
            return await body(rm, tps, logs)
        finally:
            rm.shutdown()
            timer.shutdown()
            for lg in logs:
                lg.close()
    return asyncio.run(main())


def _run(tmp_path, body):
    """``body(rm, tp, log)`` on one partition."""
    async def one(rm, tps, logs):
        return await body(rm, tps[0], logs[0])
    return _run_many(tmp_path, 1, one)


def _params(tp: TopicPartition, offset: int, min_bytes: int, **kw) -> FetchParams:
    return FetchParams(replica_id=-1, max_wait_ms=60_000, min_bytes=min_bytes, max_bytes=1 << 20,
                       partitions=[FetchRequestPartition(tp, offset, 1 << 20, **kw)])


def test_waits_without_reading_until_min_bytes_then_reads_once(tmp_path) -> None:
    small = _batch(1, size=10)

    async def body(rm, tp, log):
        CountingLog.reads = 0
        fut = rm.fetch_messages(_params(tp, 0, min_bytes=3 * len(small)))
        assert isinstance(fut, Promise) and not fut.done()
        # The first read, before waiting (the C walk answers a caught-up partition without
        # Log.read, the Python loop calls it).
        first = CountingLog.reads
        assert first <= 1
        _produce(rm, tp, small)
        _produce(rm, tp, small)
        assert not fut.done()
        assert CountingLog.reads == first  # the appends were measured by position, not read
        _produce(rm, tp, small)
        assert fut.done()
        assert CountingLog.reads == first + 1  # one read, at completion
        result = fut.result()[tp]
        assert result.error == ErrorCode.NONE and len(result.records) == 3 * len(small)

    _run(tmp_path, body)


def _completed_by(rm: ReplicaManager, tp: TopicPartition, offset: int, event, **kw):
    """Park a fetch at ``offset`` that min bytes alone would keep waiting, run ``event``, and
    return the partition's answer, which must be out already."""
    fut = rm.fetch_messages(_params(tp, offset, min_bytes=1 << 20, **kw))
    assert not fut.done()
    event()
    rm.fetch_purgatory.check_and_complete(tp)
    assert fut.done()
    return fut.result()[tp]


def test_a_roll_completes_a_waiting_fetch(tmp_path) -> None:
    async def body(rm, tp, log):
        _produce(rm, tp, _batch(1))

        def roll_and_append():
            log.roll()
            _produce(rm, tp, _batch(1, size=5))  # far below min_bytes, but on a newer segment
        assert _completed_by(rm, tp, 1, roll_and_append).records

    _run(tmp_path, body)


def test_a_roll_before_the_wait_keeps_counting_bytes(tmp_path) -> None:
    # The fetch offset is the start of the new, empty active segment: later records on that
    # segment are counted against min_bytes (case G), not taken as a roll (case F).
    async def body(rm, tp, log):
        _produce(rm, tp, _batch(1))
        log.roll()
        fut = rm.fetch_messages(_params(tp, 1, min_bytes=1 << 20))
        _produce(rm, tp, _batch(1, size=5))
        assert not fut.done()

    _run(tmp_path, body)


def test_caught_up_partitions_accumulate_bytes_across_partitions(tmp_path) -> None:
    small = _batch(1, size=10)

    async def body(rm, tps, logs):
        _produce(rm, tps[0], small)  # partition 0 is not at offset 0's end; the others are empty
        params = FetchParams(replica_id=-1, max_wait_ms=60_000, min_bytes=3 * len(small), max_bytes=1 << 20,
                             partitions=[FetchRequestPartition(tp, 1 if tp == tps[0] else 0, 1 << 20)
                                         for tp in tps])
        fut = rm.fetch_messages(params)
        assert not fut.done()
        _produce(rm, tps[1], small)
        _produce(rm, tps[2], small)
        assert not fut.done()  # two batches of the three min_bytes asks for
        _produce(rm, tps[0], small)
        assert fut.done()
        assert [len(fut.result()[tp].records) for tp in tps] == [len(small)] * 3

    _run_many(tmp_path, 3, body)


def test_a_completed_fetch_left_on_a_watch_list_holds_neither_request_nor_answer(tmp_path) -> None:
    async def body(rm, tps, logs):
        params = FetchParams(replica_id=-1, max_wait_ms=60_000, min_bytes=1, max_bytes=1 << 20,
                             partitions=[FetchRequestPartition(tp, 0, 1 << 20) for tp in tps])
        fut = rm.fetch_messages(params)
        _produce(rm, tps[0], _batch(1))  # completes it through the first partition's list
        assert fut.done() and fut.result()[tps[0]].records
        # Until the purge it stays on the second partition's list (Kafka's lazy removal).
        [op] = rm.fetch_purgatory._watchers[tps[1]].values()
        assert op.is_completed
        assert op.params.partitions == [] and op.promise is not fut and op.fetch_offsets == {}

    _run_many(tmp_path, 2, body)


def test_a_closed_log_completes_a_caught_up_fetch(tmp_path) -> None:
    async def body(rm, tp, log):
        _produce(rm, tp, _batch(1))
        assert _completed_by(rm, tp, 1, log.close).error != ErrorCode.NONE

    _run(tmp_path, body)


def test_leader_change_and_deletion_complete(tmp_path) -> None:
    async def body(rm, tp, log):
        def new_epoch():
            rm.partitions[tp].leader_epoch = 1
        assert _completed_by(rm, tp, 0, new_epoch, current_leader_epoch=0).error == ErrorCode.FENCED_LEADER_EPOCH
        gone = _completed_by(rm, tp, 0, lambda: rm.remove_partition(tp))
        assert gone.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    _run(tmp_path, body)


def test_truncation_below_the_fetch_offset_completes(tmp_path) -> None:
    async def body(rm, tp, log):
        _produce(rm, tp, _batch(3))
        assert _completed_by(rm, tp, 3, lambda: log.truncate_to(1)).error == ErrorCode.OFFSET_OUT_OF_RANGE

    _run(tmp_path, body)


def test_read_committed_waits_for_the_last_stable_offset(tmp_path) -> None:
    txn = rec.encode_batch([rec.Record(0, T0, None, b"t" * 50, [])], producer_id=7, producer_epoch=0,
                           base_sequence=0, transactional=True)

    async def body(rm, tp, log):
        fut = rm.fetch_messages(FetchParams(replica_id=-1, max_wait_ms=60_000, min_bytes=1, max_bytes=1 << 20,
                                            isolation_level=1,
                                            partitions=[FetchRequestPartition(tp, 0, 1 << 20)]))
        _produce(rm, tp, txn)  # an open transaction holds the LSO at 0
        assert not fut.done()
        res = rm.append_txn_markers(7, 0, 0, True, [tp], timeout_ms=1000)
        assert res[tp].error == ErrorCode.NONE
        assert fut.done()
        result = fut.result()[tp]
        assert result.last_stable_offset == 2 and result.records

    _run(tmp_path, body)


@pytest.mark.parametrize("size", [50, REGION_MIN + 1])  # in memory, and a FileRegion of the segment (zero copy)
def test_read_committed_lists_the_aborted_transactions_the_records_reach(tmp_path, size: int) -> None:
    now = int(time.time() * 1000)  # a timestamp segment.ms does not roll the segment for

    def txn(pid: int) -> bytes:
        return rec.encode_batch([rec.Record(0, now, None, b"t" * size, [])], producer_id=pid, producer_epoch=0,
                                base_sequence=0, transactional=True)

    def fetch(rm: ReplicaManager, tp: TopicPartition, offset: int, max_bytes: int):
        return rm.read_from_local_log(FetchParams(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=max_bytes,
                                                  isolation_level=1, zero_copy=True,
                                                  partitions=[FetchRequestPartition(tp, offset, max_bytes)]))[tp]

    async def body(rm, tp, log):
        for pid, commit in ((7, False), (8, True), (9, False)):  # offsets 0-1, 2-3, 4-5
            _produce(rm, tp, txn(pid))
            assert rm.append_txn_markers(pid, 0, 0, commit, [tp], timeout_ms=1000)[tp].error == ErrorCode.NONE
        whole = fetch(rm, tp, 0, 1 << 20)
        assert log.active_segment.base_offset == 0  # one segment: a read may return all of it
        assert whole.aborted_transactions == [(7, 0), (9, 4)]
        first = fetch(rm, tp, 0, len(txn(7)))  # the first batch only: pid 9's abort is past it
        assert isinstance(first.records, FileRegion) == (size > REGION_MIN)
        data = first.records.read() if isinstance(first.records, FileRegion) else first.records
        assert [h.base_offset for _, h in rec.iter_batches(data)] == [0]
        assert first.aborted_transactions == [(7, 0)]
        assert fetch(rm, tp, 2, len(txn(8))).aborted_transactions == []  # pid 8 committed
        assert fetch(rm, tp, 6, 1 << 20).aborted_transactions == []  # nothing read

    _run(tmp_path, body)
