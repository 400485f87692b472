"""A waiting consumer Fetch's read at completion is a fresh read, whatever changed while it waited.

``DelayedFetch.on_complete`` reads again, as Kafka's DelayedFetch.onComplete does. These tests
pin that answer, field by field, against the Python read loop (the reference, which reads
every partition anew) after each change a waiting Fetch's partitions can see: an append, a HW,
LSO or log start move, a roll, a truncation, a leader or epoch change, an aborted transaction,
the partition deleted, made anew or closed. Any shortcut of that read (session 26 tried reusing
the first read's caught-up results, branch idlefetch-stamps) must keep them passing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Callable, Iterator

import pytest

from rivulet.common.promise import Promise
from rivulet.common.types import TopicPartition
from rivulet.delayed import Timer
from rivulet.protocol import records as rec
from rivulet.protocol.errors import ErrorCode
from rivulet.replication import replica_manager as rmod
from rivulet.replication.partition import Partition
from rivulet.replication.replica_manager import (
    DelayedFetch,
    FetchParams,
    FetchRequestPartition,
    FetchResult,
    ReplicaManager,
)
from rivulet.storage import Log, LogConfig

pytestmark = pytest.mark.fast

T0 = 1_700_000_000_000
EPOCH = 3
N = 4  # partitions in the fetch; the change touches the first, the others stay caught up
PID = 7


def _batch(n: int, **kw: int | bool) -> bytearray:
    return bytearray(rec.encode_batch([rec.Record(0, T0 + i, None, b"x" * 30, []) for i in range(n)], **kw))


def _marker(commit: bool) -> bytearray:
    kind = rec.ControlRecordType.COMMIT if commit else rec.ControlRecordType.ABORT
    return bytearray(rec.encode_control_batch(kind, producer_id=PID, producer_epoch=0, coordinator_epoch=0,
                                              timestamp=T0))


def _append(rm: ReplicaManager, tp: TopicPartition, data: bytearray) -> None:
    assert rm.append_records({tp: data}, required_acks=1, timeout_ms=1000)[tp].error == 0


def _txn(rm: ReplicaManager, tp: TopicPartition, n: int = 2) -> None:
    _append(rm, tp, _batch(n, producer_id=PID, producer_epoch=0, base_sequence=0, transactional=True))


def _end_txn(rm: ReplicaManager, tp: TopicPartition, commit: bool) -> None:
    res = rm.append_records({tp: _marker(commit)}, required_acks=1, timeout_ms=1000, origin=rmod.AppendOrigin.COORDINATOR)
    assert res[tp].error == 0


@pytest.fixture
def make(tmp_path) -> Iterator[Callable[[], ReplicaManager]]:
    """Managers of N led partitions with 6 records each (HW = LEO = 6), closed afterwards."""
    loop = asyncio.new_event_loop()
    made: list[tuple[ReplicaManager, Timer]] = []

    def build() -> ReplicaManager:
        timer = Timer(loop)
        rm = ReplicaManager(0, timer)
        made.append((rm, timer))
        base = tmp_path / f"rm-{len(made)}"
        for i in range(N):
            tp = TopicPartition("t", i)
            rm.add_partition(Partition(tp, uuid.uuid4(), Log(str(base / f"t-{i}"), LogConfig()), 0,
                                       leader_epoch=EPOCH))
            _append(rm, tp, _batch(3))
            _append(rm, tp, _batch(3))
        return rm

    yield build
    for rm, timer in made:
        rm.shutdown()
        timer.shutdown()
        for p in rm.partitions.values():
            if not p.log.closed:
                p.log.close()
    loop.close()


def _params(read_committed: bool, offset: int = 6) -> FetchParams:
    return FetchParams(replica_id=-1, max_wait_ms=60_000, min_bytes=1 << 30, max_bytes=1 << 20,
                       isolation_level=int(read_committed),
                       partitions=[FetchRequestPartition(TopicPartition("t", i), offset, 1 << 20, EPOCH)
                                   for i in range(N)])


def _fields(results: dict[TopicPartition, FetchResult]) -> list[tuple[TopicPartition, dict[str, object]]]:
    out = []
    for tp, r in results.items():
        f = {k.name: getattr(r, k.name) for k in dataclasses.fields(FetchResult)}
        f["records"] = None if r.records is None else bytes(r.records)
        f["fetch_offset_metadata"] = None  # where the offset lies: not part of the answer
        f["aborted_transactions_type"] = type(r.aborted_transactions)
        out.append((tp, f))
    return out


def _reference(rm: ReplicaManager, params: FetchParams, monkeypatch: pytest.MonkeyPatch) -> list:
    """A fresh read by the Python loop, which reads every partition anew."""
    with monkeypatch.context() as m:
        m.setattr(rmod, "_read_caught_up", None)
        return _fields(rm.read_from_local_log(params))


# Each change, made to partition 0 while the fetch waits (6 records, HW = LEO = 6).
def _nothing(rm: ReplicaManager, p: Partition) -> None:
    pass


def _appended(rm: ReplicaManager, p: Partition) -> None:
    _append(rm, p.tp, _batch(2))


def _hw_moved(rm: ReplicaManager, p: Partition) -> None:
    # Appended past the HW first (as a leader waiting for its followers), then the HW follows.
    p.log.high_watermark = 4
    p.log.high_watermark = 6


def _hw_back(rm: ReplicaManager, p: Partition) -> None:
    p.log.high_watermark = 5


def _lso_held(rm: ReplicaManager, p: Partition) -> None:
    _txn(rm, p.tp)  # an open transaction: the LSO stays at 6, the HW moves to 8


def _lso_moved(rm: ReplicaManager, p: Partition) -> None:
    _txn(rm, p.tp)
    _end_txn(rm, p.tp, commit=True)


def _aborted(rm: ReplicaManager, p: Partition) -> None:
    _txn(rm, p.tp, 3)
    _end_txn(rm, p.tp, commit=False)


def _log_start_moved(rm: ReplicaManager, p: Partition) -> None:
    assert p.log.maybe_increment_log_start_offset(3)


def _rolled(rm: ReplicaManager, p: Partition) -> None:
    p.log.roll()


def _rolled_and_appended(rm: ReplicaManager, p: Partition) -> None:
    p.log.roll()
    _append(rm, p.tp, _batch(1))


def _truncated(rm: ReplicaManager, p: Partition) -> None:
    assert p.log.truncate_to(4)


def _started_afresh(rm: ReplicaManager, p: Partition) -> None:
    p.log.truncate_fully_and_start_at(6)  # same offsets, a new segment


def _epoch_bumped(rm: ReplicaManager, p: Partition) -> None:
    p.leader_epoch += 1


def _leader_moved(rm: ReplicaManager, p: Partition) -> None:
    p.leader_id = p.node_id + 1


def _fenced(rm: ReplicaManager, p: Partition) -> None:
    p.fenced = True


def _deleted(rm: ReplicaManager, p: Partition) -> None:
    rm.remove_partition(p.tp)


def _made_anew(rm: ReplicaManager, p: Partition) -> None:
    # Deleted and created again under the same name: a new log, from offset 0.
    rm.remove_partition(p.tp)
    p.log.close()
    lg = Log(p.log.dir + "-new", LogConfig())
    rm.add_partition(Partition(p.tp, uuid.uuid4(), lg, 0, leader_epoch=EPOCH))


def _closed(rm: ReplicaManager, p: Partition) -> None:
    p.log.close()


# Changes a consumer's answer does not show (the HW back where it was; a roll).
UNSEEN = (_hw_moved, _rolled)

CHANGES = [_nothing, _appended, _hw_moved, _hw_back, _lso_held, _lso_moved, _aborted, _log_start_moved, _rolled,
           _rolled_and_appended, _truncated, _started_afresh, _epoch_bumped, _leader_moved, _fenced, _deleted,
           _made_anew, _closed]


@pytest.mark.parametrize("read_committed", [False, True])
@pytest.mark.parametrize("change", CHANGES, ids=lambda c: c.__name__.strip("_"))
def test_the_read_at_completion_is_a_fresh_read(make: Callable[[], ReplicaManager], change: Callable,
                                               read_committed: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    rm = make()
    params = _params(read_committed)
    first = rm.read_from_local_log(params)
    assert all(r.error == ErrorCode.NONE and not r.records for r in first.values())  # it would wait
    change(rm, rm.partitions[TopicPartition("t", 0)])
    expected = _reference(rm, params, monkeypatch)
    assert _fields(rm.read_from_local_log(params)) == expected
    if change is not _nothing:
        assert expected != _fields(first) or change in UNSEEN, "the change shows in the answer"


@pytest.mark.parametrize("change", CHANGES, ids=lambda c: c.__name__.strip("_"))
def test_an_expired_delayed_fetch_answers_a_fresh_read(make: Callable[[], ReplicaManager], change: Callable,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole path: the fetch waits with its first read, then is completed (as its timer
    would) after the change."""
    rm = make()
    params = _params(read_committed=True)
    promise: Promise[dict[TopicPartition, FetchResult]] = Promise()
    fetch_offsets = {tp: r.fetch_offset_metadata for tp, r in rm.read_from_local_log(params).items()
                     if r.fetch_offset_metadata is not None}
    op = DelayedFetch(params, rm, promise, fetch_offsets)
    change(rm, rm.partitions[TopicPartition("t", 0)])
    expected = _reference(rm, params, monkeypatch)
    assert op.force_complete()
    assert _fields(promise.result()) == expected


def test_a_fetch_past_the_hw_is_answered_fresh_as_the_hw_moves(make: Callable[[], ReplicaManager],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A fetch offset past the HW (below the LEO) is caught up at the HW it saw: the HW moving
    under it changes the answer's HW, not its records."""
    rm = make()
    p = rm.partitions[TopicPartition("t", 0)]
    p.log.high_watermark = 4
    params = _params(read_committed=False, offset=5)
    first = rm.read_from_local_log(params)
    p.log.high_watermark = 5
    expected = _reference(rm, params, monkeypatch)
    assert _fields(rm.read_from_local_log(params)) == expected
    assert _fields(first)[0][1]["high_watermark"] == 4
    assert expected[0][1]["high_watermark"] == 5
