"""The C walk of a consumer fetch (``_speedups.read_caught_up``) against the Python read loop,
and the request's partitions made in C (``_speedups.fetch_wanted``) against the handler's.

``ReplicaManager.read_from_local_log`` answers a consumer's caught-up partitions in C and hands
every other one to the Python read; with RIVULET_NO_SPEEDUPS=1 the Python loop reads them all.
Both must give the same results, field by field and in the same order, for partitions of every
kind a fetch can name (caught up at the HW or past it below the LEO, with records to read, out
of range, at a fenced or unknown epoch, not led here, deleted, unknown, offline, closed, with an
open transaction holding the LSO back), in any order and with repeats, for read_uncommitted and
read_committed, leader-only or not, and with a byte budget the earlier partitions use up.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rivulet.common.promise import Promise
from rivulet.common.types import TopicPartition
from rivulet.delayed import Timer
from rivulet.protocol import records as rec
from rivulet.protocol.messages.fetch_request import FetchPartition
from rivulet.protocol.records import SPEEDUPS
from rivulet.replication import replica_manager as rmod
from rivulet.replication.partition import Partition
from rivulet.replication.replica_manager import FetchParams, FetchRequestPartition, FetchResult, ReplicaManager
from rivulet.server.handlers import records as records_handlers
from rivulet.storage import Log, LogConfig

pytestmark = pytest.mark.fast

T0 = 1_700_000_000_000
LEADER_EPOCH = 3


def _batch(n: int, **kw: int | bool) -> bytearray:
    return bytearray(rec.encode_batch([rec.Record(0, T0 + i, None, b"x" * 30, []) for i in range(n)], **kw))


def _append(rm: ReplicaManager, tp: TopicPartition, data: bytearray) -> None:
    assert rm.append_records({tp: data}, required_acks=1, timeout_ms=1000)[tp].error == 0


# Each kind of partition: how to make it from a fresh, led one with 6 records (HW = LEO = 6).
def _plain(rm: ReplicaManager, p: Partition) -> None:
    pass


def _hw_below_leo(rm: ReplicaManager, p: Partition) -> None:
    p.log.high_watermark = 4


def _empty(rm: ReplicaManager, p: Partition) -> None:
    p.log.truncate_fully_and_start_at(0)
    p.log.high_watermark = 0


def _log_start_moved(rm: ReplicaManager, p: Partition) -> None:
    p.log.maybe_increment_log_start_offset(3)


def _not_leader(rm: ReplicaManager, p: Partition) -> None:
    p.leader_id = p.node_id + 1


def _deleted(rm: ReplicaManager, p: Partition) -> None:
    p.deleted = True


def _closed(rm: ReplicaManager, p: Partition) -> None:
    p.log.close()


def _open_transaction(rm: ReplicaManager, p: Partition) -> None:
    _append(rm, p.tp, _batch(2, producer_id=7, producer_epoch=0, base_sequence=0, transactional=True))


def _unknown(rm: ReplicaManager, p: Partition) -> None:
    rm.partitions.pop(p.tp)


def _offline(rm: ReplicaManager, p: Partition) -> None:
    rm.partitions.pop(p.tp)
    rm.offline_partitions.add(p.tp)


KINDS: list[Callable[[ReplicaManager, Partition], None]] = [
    _plain, _hw_below_leo, _empty, _log_start_moved, _not_leader, _deleted, _closed, _open_transaction,
    _unknown, _offline]
# A fetch offset below, at and past the HW, past the LEO, and before the log start.
OFFSETS = [0, 2, 4, 6, 8, 9]
EPOCHS = [-1, LEADER_EPOCH - 1, LEADER_EPOCH, LEADER_EPOCH + 1]


@pytest.fixture(scope="module")
def manager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplicaManager]:
    loop = asyncio.new_event_loop()
    timer = Timer(loop)
    rm = ReplicaManager(0, timer)
    base = tmp_path_factory.mktemp("caught-up")
    logs = []
    for i, kind in enumerate(KINDS):
        tp = TopicPartition("t", i)
        lg = Log(str(base / f"t-{i}"), LogConfig())
        if kind is not _closed:
            logs.append(lg)
        p = Partition(tp, uuid.uuid4(), lg, 0, leader_epoch=LEADER_EPOCH)
        rm.add_partition(p)
        _append(rm, tp, _batch(3))
        _append(rm, tp, _batch(3))
        kind(rm, p)
    yield rm
    rm.shutdown()
    timer.shutdown()
    for lg in logs:
        lg.close()
    loop.close()


def _fields(r: FetchResult) -> dict[str, object]:
    out = {f.name: getattr(r, f.name) for f in dataclasses.fields(FetchResult)}
    out["records"] = None if r.records is None else bytes(r.records)
    out["aborted_transactions_type"] = type(r.aborted_transactions)
    return out


def _read(rm: ReplicaManager, params: FetchParams, walk: object, monkeypatch: pytest.MonkeyPatch
          ) -> list[tuple[TopicPartition, dict[str, object]]]:
    with monkeypatch.context() as m:
        m.setattr(rmod, "_read_caught_up", walk)
        return [(tp, _fields(r)) for tp, r in rm.read_from_local_log(params).items()]


def test_the_c_walk_is_used_when_the_accelerator_is_built() -> None:
    assert (rmod._read_caught_up is not None) == SPEEDUPS


requests = st.lists(st.tuples(st.integers(0, len(KINDS) - 1), st.sampled_from(OFFSETS), st.sampled_from(EPOCHS)),
                    max_size=14)


@pytest.mark.skipif(not SPEEDUPS, reason="the C accelerator is not built")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(wanted=requests, read_committed=st.booleans(), fetch_only_leader=st.booleans(),
       max_bytes=st.sampled_from([1, 200, 1 << 20]))
def test_same_results_as_the_python_loop(manager: ReplicaManager, wanted: list[tuple[int, int, int]],
                                         read_committed: bool, fetch_only_leader: bool, max_bytes: int,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    params = FetchParams(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=max_bytes, isolation_level=int(read_committed),
        fetch_only_leader=fetch_only_leader,
        partitions=[FetchRequestPartition(TopicPartition("t", k), offset, 1 << 20, epoch)
                    for k, offset, epoch in wanted])
    expected = _read(manager, params, None, monkeypatch)
    assert _read(manager, params, rmod._speedups.read_caught_up, monkeypatch) == expected


@pytest.mark.skipif(not SPEEDUPS, reason="the C accelerator is not built")
def test_caught_up_partitions_are_answered_without_the_python_read(manager: ReplicaManager) -> None:
    """The point of the walk: a caught-up partition never reaches ``read``; the others do."""
    fps = [FetchRequestPartition(TopicPartition("t", 0), 6, 1 << 20, LEADER_EPOCH),  # caught up
           FetchRequestPartition(TopicPartition("t", 0), 2, 1 << 20, LEADER_EPOCH),  # records to read
           FetchRequestPartition(TopicPartition("t", 1), 5, 1 << 20, -1)]  # past the HW, below the LEO
    called: list[FetchRequestPartition] = []

    def read(fp: FetchRequestPartition) -> FetchResult:
        called.append(fp)
        return FetchResult(0)

    results: dict[TopicPartition, FetchResult] = {}
    rmod._speedups.read_caught_up(fps, manager.partitions, results, False, False, read)
    assert called == [fps[1]]
    assert results[TopicPartition("t", 1)] == FetchResult(0, 4, 4, 0, b"")


# -- a waiting fetch's check (DelayedFetch.try_complete) passing over caught-up partitions in C --

def _waiting(rm: ReplicaManager, params: FetchParams) -> rmod.DelayedFetch:
    return rmod.DelayedFetch(params, rm, Promise(), {})


@pytest.mark.skipif(not SPEEDUPS, reason="the C accelerator is not built")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(wanted=requests, read_committed=st.booleans(), fetch_only_leader=st.booleans(),
       min_bytes=st.sampled_from([1, 100, 1 << 20]))
def test_the_c_skip_passes_over_only_what_the_check_finds_nothing_in(
        manager: ReplicaManager, wanted: list[tuple[int, int, int]], read_committed: bool, fetch_only_leader: bool,
        min_bytes: int, monkeypatch: pytest.MonkeyPatch) -> None:
    params = FetchParams(
        replica_id=-1, max_wait_ms=60_000, min_bytes=min_bytes, max_bytes=1 << 20,
        isolation_level=int(read_committed), fetch_only_leader=fetch_only_leader,
        partitions=[FetchRequestPartition(TopicPartition("t", k), offset, 1 << 20, epoch)
                    for k, offset, epoch in wanted])
    fps, partitions = params.partitions, manager.partitions
    check = _waiting(manager, params)
    for i in range(len(fps) + 1):
        j = rmod._speedups.skip_caught_up(fps, partitions, i, fetch_only_leader)
        assert i <= j <= len(fps)
        assert all(check._readable(fp, partitions.get(fp.tp)) == 0 for fp in fps[i:j])
    # The whole check decides the same with the walk as without it.
    with monkeypatch.context() as m:
        m.setattr(rmod, "_skip_caught_up", None)
        expected = _waiting(manager, params).try_complete()
    assert _waiting(manager, params).try_complete() == expected


@pytest.mark.skipif(not SPEEDUPS, reason="the C accelerator is not built")
def test_the_c_skip_stops_at_a_partition_past_its_hw_or_with_records(manager: ReplicaManager) -> None:
    fps = [FetchRequestPartition(TopicPartition("t", 0), 6, 1 << 20, LEADER_EPOCH),  # caught up at the HW
           FetchRequestPartition(TopicPartition("t", 1), 5, 1 << 20, -1),  # past the HW: Kafka's case F
           FetchRequestPartition(TopicPartition("t", 0), 6, 1 << 20, -1),
           FetchRequestPartition(TopicPartition("t", 0), 2, 1 << 20, -1)]  # records to read
    assert rmod._speedups.skip_caught_up(fps, manager.partitions, 0, True) == 1
    assert rmod._speedups.skip_caught_up(fps, manager.partitions, 2, True) == 3
    assert rmod._speedups.skip_caught_up(fps, manager.partitions, 4, True) == 4


# -- the request's partitions as FetchRequestPartitions (the handler's fetch_wanted) ----------

i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
request_partitions = st.lists(st.builds(
    FetchPartition, partition=i32, current_leader_epoch=i32, fetch_offset=i64, last_fetched_epoch=i32,
    log_start_offset=i64, partition_max_bytes=i32), max_size=8)


@pytest.mark.skipif(not SPEEDUPS, reason="the C accelerator is not built")
@settings(max_examples=300, deadline=None)
@given(parts=request_partitions, name=st.text(max_size=6), version=st.integers(4, 17))
def test_the_request_partitions_made_in_c_are_the_python_ones(parts: list[FetchPartition], name: str,
                                                              version: int) -> None:
    expected: list[FetchRequestPartition] = []
    tps = records_handlers._py_fetch_wanted(parts, name, version, expected)
    got: list[FetchRequestPartition] = [FetchRequestPartition(TopicPartition("x", 0), 0, 0)]  # appended to
    c_tps = rmod._speedups.fetch_wanted(parts, name, version, got)
    assert c_tps == tps and all(type(tp) is TopicPartition for tp in c_tps)
    assert got[1:] == expected and all(type(fp) is FetchRequestPartition for fp in got)
    assert all(fp.tp is tp for fp, tp in zip(got[1:], c_tps, strict=True))


def test_the_handler_uses_the_c_request_partitions_when_built() -> None:
    assert (records_handlers._fetch_wanted is records_handlers._py_fetch_wanted) == (not SPEEDUPS)
