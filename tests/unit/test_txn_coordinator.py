"""The transaction coordinator inside an in-process broker: two-phase commit, fencing,
timeouts, expiration, verification and recovery of decided transactions after a restart."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rivulet.common.types import TopicPartition
from rivulet.protocol import records as rec
from rivulet.protocol.errors import ErrorCode
from rivulet.replication.metadata_cache import MetadataCache
from rivulet.replication.replica_manager import TxnOperation, coordinator_answer
from rivulet.server.broker import Broker
from rivulet.server.config import BrokerConfig
from rivulet.transaction.metadata import TxnState
from rivulet.transaction.txn_log import TRANSACTION_STATE_TOPIC_NAME
from tests import in_process
from tests.in_process import BrokerBody, Test, cache_led_by, in_loop, running

pytestmark = pytest.mark.fast

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


async def start(path: Path, **overrides: object) -> Broker:
    props = {"log.dirs": str(path), "listeners": "PLAINTEXT://127.0.0.1:0",
             "transaction.state.log.num.partitions": "3", "offsets.topic.num.partitions": "3",
             "log.cleaner.enable": "false"}
    props.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
    b = Broker(BrokerConfig(props))
    await b.start()
    # As a client does first: FindCoordinator, which has __transaction_state made on a new broker.
    await until(lambda: b.transaction_coordinator.find_coordinator("a")[0] == ErrorCode.NONE)
    await until(lambda: not b.transaction_coordinator.state_manager.loading)
    if b.metadata.get("t") is None:
        b.topics.create_topic("t", 2, 1, {})
    return b


def with_broker(**overrides: object) -> Callable[[BrokerBody], Test]:
    """The test is its body, run against a broker ``start`` gives on its tmp_path with these settings."""
    return in_process.with_broker(lambda path: start(path, **overrides))


async def until(cond, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.01)


async def call(fn, *args):
    fut = asyncio.get_running_loop().create_future()

    def cb(*res):
        if not fut.done():
            fut.set_result(res[0] if len(res) == 1 else res)
    fn(*args, cb)
    return await fut


async def produce(b: Broker, tp: TopicPartition, pid: int, epoch: int, seq: int, tid: str | None,
                  n: int = 2) -> ErrorCode:
    data = rec.encode_batch([rec.Record(0, None, None, b"x", []) for _ in range(n)], producer_id=pid,
                            producer_epoch=epoch, base_sequence=seq, transactional=True)
    res = b.replica_manager.append_records({tp: bytearray(data)}, required_acks=-1, timeout_ms=5000,
                                           transactional_id=tid)
    if isinstance(res, asyncio.Future):
        res = await res
    return ErrorCode(res[tp].error)


def md(b: Broker, tid: str):
    err, found = b.transaction_coordinator.state_manager.get_transaction_state(tid)
    assert err == ErrorCode.NONE
    return found.metadata if found else None


def part(b: Broker, tp: TopicPartition):
    return b.replica_manager.partitions[tp]


async def open_txn(b: Broker, tid: str, timeout_ms: int = 60_000) -> tuple[int, int]:
    tc = b.transaction_coordinator
    err, pid, epoch = await call(tc.handle_init_producer_id, tid, timeout_ms, None)
    assert err == ErrorCode.NONE
    assert await call(tc.handle_add_partitions, tid, pid, epoch, {TP0, TP1}) == ErrorCode.NONE
    assert await produce(b, TP0, pid, epoch, 0, tid) == ErrorCode.NONE
    assert await produce(b, TP1, pid, epoch, 0, tid) == ErrorCode.NONE
    return pid, epoch


@with_broker()
async def test_commit_writes_markers_everywhere(b: Broker) -> None:
    tc = b.transaction_coordinator
    pid, epoch = await open_txn(b, "a")
    assert md(b, "a").state == TxnState.ONGOING
    assert part(b, TP0).last_stable_offset == 0
    assert await call(tc.handle_end_transaction, "a", pid, epoch, True) == ErrorCode.NONE
    await until(lambda: md(b, "a").state == TxnState.COMPLETE_COMMIT)
    for tp in (TP0, TP1):
        p = part(b, tp)
        assert p.log.log_end_offset == 3 and p.last_stable_offset == 3
    assert md(b, "a").topic_partitions == set()
    # Retried commit: NONE; an abort now: INVALID_TXN_STATE; a stale epoch: fenced.
    assert await call(tc.handle_end_transaction, "a", pid, epoch, True) == ErrorCode.NONE
    assert await call(tc.handle_end_transaction, "a", pid, epoch, False) == ErrorCode.INVALID_TXN_STATE
    assert await call(tc.handle_end_transaction, "a", pid, epoch - 1, True) == ErrorCode.PRODUCER_FENCED
    assert await call(tc.handle_end_transaction, "nope", pid, epoch, True) == \
        ErrorCode.INVALID_PRODUCER_ID_MAPPING


@in_loop
async def test_decided_transaction_is_finished_after_a_restart(tmp_path: Path) -> None:
    async with running(start(tmp_path)) as b:
        tc = b.transaction_coordinator
        tc.markers.add_txn_markers_to_send = lambda *a: None  # "crash" before any marker is written
        pid, epoch = await open_txn(b, "r")
        assert await call(tc.handle_end_transaction, "r", pid, epoch, True) == ErrorCode.NONE
        assert md(b, "r").state == TxnState.PREPARE_COMMIT
        assert part(b, TP0).last_stable_offset == 0
    async with running(start(tmp_path)) as b:
        await until(lambda: md(b, "r").state == TxnState.COMPLETE_COMMIT)
        for tp in (TP0, TP1):
            assert part(b, tp).last_stable_offset == part(b, tp).log.log_end_offset == 3
            assert part(b, tp).log.collect_aborted_transactions(0, 3) == []


@in_loop
async def test_ongoing_transaction_survives_restart_then_times_out(tmp_path: Path) -> None:
    async with running(start(tmp_path)) as b:
        pid, epoch = await open_txn(b, "o", timeout_ms=300)
    async with running(start(tmp_path, transaction_abort_timed_out_transaction_cleanup_interval_ms=50)) as b:
        assert md(b, "o").state in (TxnState.ONGOING, TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT)
        await until(lambda: md(b, "o").state == TxnState.COMPLETE_ABORT)
        m = md(b, "o")
        assert (m.producer_id, m.producer_epoch) == (pid, epoch + 1)  # fenced by the bump
        for tp in (TP0, TP1):
            p = part(b, tp)
            assert p.last_stable_offset == p.log.log_end_offset == 3
            assert p.log.collect_aborted_transactions(0, 3) == [(pid, 0)]
        # The timed-out producer is fenced everywhere.
        assert await produce(b, TP0, pid, epoch, 2, "o") == ErrorCode.INVALID_PRODUCER_EPOCH
        tc = b.transaction_coordinator
        assert await call(tc.handle_end_transaction, "o", pid, epoch, True) == ErrorCode.PRODUCER_FENCED


@with_broker()
async def test_new_instance_fences_and_aborts_the_open_transaction(b: Broker) -> None:
    tc = b.transaction_coordinator
    pid, epoch = await open_txn(b, "f")
    err, _, _ = await call(tc.handle_init_producer_id, "f", 60_000, None)
    assert err == ErrorCode.CONCURRENT_TRANSACTIONS  # the abort runs; the client retries
    await until(lambda: md(b, "f").state == TxnState.COMPLETE_ABORT)
    err, pid2, epoch2 = await call(tc.handle_init_producer_id, "f", 60_000, None)
    assert (err, pid2, epoch2) == (ErrorCode.NONE, pid, epoch + 2)
    assert part(b, TP1).log.collect_aborted_transactions(0, 10) == [(pid, 0)]


@with_broker()
async def test_epoch_exhaustion_rotates_the_producer_id(b: Broker) -> None:
    tc = b.transaction_coordinator
    err, pid, epoch = await call(tc.handle_init_producer_id, "x", 60_000, None)
    md(b, "x").producer_epoch = 32766
    err, pid2, epoch2 = await call(tc.handle_init_producer_id, "x", 60_000, (pid, 32766))
    assert err == ErrorCode.NONE and pid2 != pid and epoch2 == 0
    assert md(b, "x").last_producer_id == pid
    # A retry of that call (its answer lost) is recognised through the last producer id.
    err, pid3, epoch3 = await call(tc.handle_init_producer_id, "x", 60_000, (pid, 32766))
    assert (err, pid3, epoch3) == (ErrorCode.NONE, pid2, 0)  # the same answer again


@with_broker()
async def test_produce_is_verified_with_the_coordinator(b: Broker) -> None:
    tc = b.transaction_coordinator
    err, pid, epoch = await call(tc.handle_init_producer_id, "k", 60_000, None)
    # A transactional write to a partition never added to the transaction (KIP-890).
    assert await produce(b, TP0, pid, epoch, 0, "k") == ErrorCode.INVALID_TXN_STATE
    # Without a transactional id (the Produce handler refuses such a request first, as Kafka).
    assert await b.replica_manager.txn_verifier.verify(None, pid, epoch, TP0) == ErrorCode.INVALID_TXN_STATE
    assert await call(tc.handle_add_partitions, "k", pid, epoch, {TP0}) == ErrorCode.NONE
    assert await produce(b, TP0, pid, epoch, 0, "k") == ErrorCode.NONE
    assert await produce(b, TP0, pid, epoch, 2, "k") == ErrorCode.NONE  # open here: no check
    assert await call(tc.handle_end_transaction, "k", pid, epoch, False) == ErrorCode.NONE
    await until(lambda: md(b, "k").state == TxnState.COMPLETE_ABORT)
    # A late write after the abort would start a hanging transaction: refused.
    assert await produce(b, TP0, pid, epoch, 4, "k") == ErrorCode.INVALID_TXN_STATE
    assert part(b, TP0).last_stable_offset == part(b, TP0).log.log_end_offset


@with_broker()
async def test_verify_only_and_listing(b: Broker) -> None:
    tc = b.transaction_coordinator
    pid, epoch = await open_txn(b, "v")
    other = TopicPartition("t", 5)
    # As Kafka's coordinator: TRANSACTION_ABORTABLE for a partition outside the transaction.
    assert tc.handle_verify_partitions("v", pid, epoch, {TP0, other}) == {
        TP0: ErrorCode.NONE, other: ErrorCode.TRANSACTION_ABORTABLE}
    assert tc.handle_verify_partitions("v", pid, epoch + 1, {TP0}) == {TP0: ErrorCode.PRODUCER_FENCED}
    assert tc.handle_verify_partitions("w", pid, epoch, {TP0}) == {TP0: ErrorCode.INVALID_PRODUCER_ID_MAPPING}
    err, unknown, found = tc.state_manager.list_transaction_states(set(), {"Ongoing", "Bogus"})
    assert err == ErrorCode.NONE and unknown == ["Bogus"]
    assert [m.transactional_id for m in found] == ["v"]
    err, _, found = tc.state_manager.list_transaction_states({pid + 1}, set())
    assert found == []
    assert tc.describe("v")[1].state == TxnState.ONGOING
    assert tc.describe("zzz")[0] == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND


@in_loop
async def test_idle_transactional_ids_expire(tmp_path: Path) -> None:
    async with running(start(tmp_path, transactional_id_expiration_ms=1,
                             transaction_remove_expired_transaction_cleanup_interval_ms=50)) as b:
        tc = b.transaction_coordinator
        err, pid, epoch = await call(tc.handle_init_producer_id, "gone", 60_000, None)
        assert err == ErrorCode.NONE
        await until(lambda: md(b, "gone") is None)
    # The tombstone is in the log: a restart does not bring the id back.
    async with running(start(tmp_path)) as b:
        assert md(b, "gone") is None
        n = sum(1 for i in range(3)
                if part(b, TopicPartition(TRANSACTION_STATE_TOPIC_NAME, i)).log.log_end_offset == 2)
        assert n == 1  # InitProducerId record + tombstone


# -- transaction.version 2 (dormant: no handler calls it until the version is finalized) -------------

def producer_epoch_at(b: Broker, tp: TopicPartition, pid: int) -> int:
    return part(b, tp).log.producer_state.last_entry(pid).producer_epoch


@with_broker()
async def test_tv2_end_txn_bumps_the_epoch_and_answers_retries(b: Broker) -> None:
    tc = b.transaction_coordinator
    end = tc.handle_end_transaction_tv2
    pid, e = await open_txn(b, "v2")
    assert await call(end, "v2", pid, e, True) == (ErrorCode.NONE, pid, e + 1)
    await until(lambda: md(b, "v2").state == TxnState.COMPLETE_COMMIT)
    # The markers carry the bumped epoch: the partitions now know the producer at e + 1.
    assert producer_epoch_at(b, TP0, pid) == producer_epoch_at(b, TP1, pid) == e + 1
    assert part(b, TP0).last_stable_offset == 3
    # A retry (the old epoch) gets the same answer; the other result is an invalid state.
    assert await call(end, "v2", pid, e, True) == (ErrorCode.NONE, pid, e + 1)
    assert await call(end, "v2", pid, e, False) == (ErrorCode.INVALID_TXN_STATE, -1, -1)
    assert await call(end, "v2", pid, e + 1, True) == (ErrorCode.INVALID_TXN_STATE, -1, -1)
    assert await call(end, "v2", pid, e - 1, True) == (ErrorCode.PRODUCER_FENCED, -1, -1)
    assert await call(end, "v2", pid + 1, e + 1, True) == (ErrorCode.INVALID_PRODUCER_ID_MAPPING, -1, -1)
    # The next transaction runs at e + 1, from sequence 0, and its commit bumps again.
    assert await call(tc.handle_add_partitions, "v2", pid, e + 1, {TP0}) == ErrorCode.NONE
    assert await produce(b, TP0, pid, e + 1, 0, "v2") == ErrorCode.NONE
    assert await call(end, "v2", pid, e + 1, True) == (ErrorCode.NONE, pid, e + 2)
    await until(lambda: md(b, "v2").state == TxnState.COMPLETE_COMMIT)
    assert producer_epoch_at(b, TP0, pid) == e + 2 and part(b, TP0).last_stable_offset == 6
    # An abort with nothing open is allowed at the current epoch, and bumps too.
    assert await call(end, "v2", pid, e + 2, False) == (ErrorCode.NONE, pid, e + 3)
    await until(lambda: md(b, "v2").state == TxnState.COMPLETE_ABORT)
    assert await call(end, "v2", pid, e + 2, False) == (ErrorCode.NONE, pid, e + 3)
    # A commit in CompleteAbort, at the retry epoch or the current one: INVALID_TXN_STATE,
    # as Kafka 4.3.1 answered the same EndTxn v5 sequence (KAFKA-20785, later than 4.3.1,
    # answers PRODUCER_FENCED to the retry); an epoch ahead of the coordinator's is fenced.
    assert await call(end, "v2", pid, e + 2, True) == (ErrorCode.INVALID_TXN_STATE, -1, -1)
    assert await call(end, "v2", pid, e + 3, True) == (ErrorCode.INVALID_TXN_STATE, -1, -1)
    assert await call(end, "v2", pid, e + 4, False) == (ErrorCode.PRODUCER_FENCED, -1, -1)
    assert await call(end, "v2", pid, e + 2, False) == (ErrorCode.NONE, pid, e + 3)


@with_broker()
async def test_tv2_end_txn_from_empty_and_while_prepared(b: Broker) -> None:
    tc = b.transaction_coordinator
    end = tc.handle_end_transaction_tv2
    err, pid, e = await call(tc.handle_init_producer_id, "em", 60_000, None)
    assert await call(end, "em", pid, e, True) == (ErrorCode.INVALID_TXN_STATE, -1, -1)
    assert await call(end, "em", pid + 1, e, False) == (ErrorCode.INVALID_PRODUCER_ID_MAPPING, -1, -1)
    err, pid, e = await call(tc.handle_init_producer_id, "em", 60_000, (pid, e))
    assert err == ErrorCode.NONE
    # In Empty the epoch below is not a retry: the producer was fenced by a new instance.
    assert await call(end, "em", pid, e - 1, False) == (ErrorCode.PRODUCER_FENCED, -1, -1)
    assert await call(end, "em", pid, e, False) == (ErrorCode.NONE, pid, e + 1)
    tc.markers.add_txn_markers_to_send = lambda *a: None  # leave the next one prepared
    pid2, e2 = await open_txn(b, "pp")
    assert await call(end, "pp", pid2, e2, True) == (ErrorCode.NONE, pid2, e2 + 1)
    assert md(b, "pp").state == TxnState.PREPARE_COMMIT
    # Its completion is pending: that is answered before the producer id, the epoch and the
    # result are looked at (Kafka 4.3.1's order).
    for p, epoch, commit in ((pid2, e2, True), (pid2, e2, False), (pid2, e2 + 1, True), (pid2, e2 - 1, True),
                             (pid2 + 1, e2, True)):
        assert await call(end, "pp", p, epoch, commit) == (ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1)


@with_broker()
async def test_tv2_exhausted_epoch_moves_to_a_new_producer_id(b: Broker) -> None:
    tc = b.transaction_coordinator
    end = tc.handle_end_transaction_tv2
    err, pid, _ = await call(tc.handle_init_producer_id, "ov", 60_000, None)
    e = 32766
    md(b, "ov").producer_epoch = e
    assert await call(tc.handle_add_partitions, "ov", pid, e, {TP0}) == ErrorCode.NONE
    assert await produce(b, TP0, pid, e, 0, "ov") == ErrorCode.NONE
    err, pid2, e2 = await call(end, "ov", pid, e, True)
    assert err == ErrorCode.NONE and pid2 != pid and e2 == 0
    await until(lambda: md(b, "ov").state == TxnState.COMPLETE_COMMIT)
    m = md(b, "ov")
    assert (m.producer_id, m.producer_epoch, m.last_producer_id, m.last_producer_epoch) == (pid2, 0, pid, e)
    assert producer_epoch_at(b, TP0, pid) == 32767  # the marker went out under the old id
    # A retry with the old id and epoch is recognised and answered with the new ones.
    assert await call(end, "ov", pid, e, True) == (ErrorCode.NONE, pid2, 0)
    assert await call(end, "ov", pid, e, False) == (ErrorCode.INVALID_TXN_STATE, -1, -1)


@with_broker()
async def test_tv2_coordinator_abort_bumps_once_so_the_client_abort_succeeds(b: Broker) -> None:
    tc = b.transaction_coordinator
    pid, e = await open_txn(b, "to")
    m = md(b, "to")
    fence = m.prepare_fence_producer_epoch()  # as a timeout starts its abort
    got = await call(lambda cb: tc._end_transaction_tv2("to", pid, fence.producer_epoch, False,
                                                         from_client=False, callback=cb))
    assert got == (ErrorCode.NONE, pid, e + 1)
    await until(lambda: md(b, "to").state == TxnState.COMPLETE_ABORT)
    assert md(b, "to").producer_epoch == e + 1
    assert part(b, TP0).log.collect_aborted_transactions(0, 10) == [(pid, 0)]
    # The producer learns of it at its next send, and its abortTransaction is a retry.
    assert await produce(b, TP0, pid, e, 2, "to") == ErrorCode.INVALID_PRODUCER_EPOCH
    assert await call(tc.handle_end_transaction_tv2, "to", pid, e, False) == (ErrorCode.NONE, pid, e + 1)


@in_loop
async def test_tv2_prepared_rotation_survives_a_restart_in_version_1_values(tmp_path: Path) -> None:
    async with running(start(tmp_path)) as b:
        tc = b.transaction_coordinator
        # Level 2 (a new cluster's) writes version 1 values, as level 1 does.
        tc.state_manager.transaction_version = lambda: 2
        tc.markers.add_txn_markers_to_send = lambda *a: None  # "crash" before any marker is written
        err, pid, _ = await call(tc.handle_init_producer_id, "rs", 60_000, None)
        md(b, "rs").producer_epoch = 32766
        assert await call(tc.handle_add_partitions, "rs", pid, 32766, {TP0}) == ErrorCode.NONE
        assert await produce(b, TP0, pid, 32766, 0, "rs") == ErrorCode.NONE
        err, pid2, _ = await call(tc.handle_end_transaction_tv2, "rs", pid, 32766, False)
        assert err == ErrorCode.NONE and pid2 != pid
    async with running(start(tmp_path)) as b:
        # Reloaded from the log: the prepared abort completes as the next producer id.
        await until(lambda: md(b, "rs").state == TxnState.COMPLETE_ABORT)
        m = md(b, "rs")
        assert (m.producer_id, m.producer_epoch, m.last_producer_id) == (pid2, 0, pid)
        assert part(b, TP0).log.collect_aborted_transactions(0, 10) == [(pid, 0)]


@with_broker()
async def test_tv2_partition_added_by_a_leader_keeps_the_client_version(b: Broker) -> None:
    tc = b.transaction_coordinator
    err, pid, e = await call(tc.handle_init_producer_id, "la", 60_000, None)
    # As AddPartitionsToTxn v4+ without verify_only (a leader, for a Produce v12) adds.
    assert await call(lambda cb: tc.handle_add_partitions("la", pid, e, {TP0}, cb,
                                                          client_transaction_version=2)) == ErrorCode.NONE
    assert (md(b, "la").state, md(b, "la").client_transaction_version) == (TxnState.ONGOING, 2)
    assert await produce(b, TP0, pid, e, 0, "la") == ErrorCode.NONE
    assert await call(tc.handle_end_transaction_tv2, "la", pid, e, True) == (ErrorCode.NONE, pid, e + 1)
    await until(lambda: md(b, "la").state == TxnState.COMPLETE_COMMIT)
    assert producer_epoch_at(b, TP0, pid) == e + 1 and part(b, TP0).last_stable_offset == 3


@with_broker(transaction_abort_timed_out_transaction_cleanup_interval_ms=50)
async def test_tv2_timeout_abort_lets_the_producer_abort_and_go_on(b: Broker) -> None:
    tc = b.transaction_coordinator
    tc.state_manager.transaction_version = lambda: 2  # as with transaction.version 2 finalized
    pid, e = await open_txn(b, "tt", timeout_ms=300)
    await until(lambda: md(b, "tt").state == TxnState.COMPLETE_ABORT)
    assert md(b, "tt").producer_epoch == e + 1  # one bump: the abort's
    assert part(b, TP0).log.collect_aborted_transactions(0, 3) == [(pid, 0)]
    # The Java producer's abortTransaction after its failed send: a retry, not a fence.
    assert await produce(b, TP0, pid, e, 2, "tt") == ErrorCode.INVALID_PRODUCER_EPOCH
    assert await call(tc.handle_end_transaction_tv2, "tt", pid, e, False) == (ErrorCode.NONE, pid, e + 1)
    # And a new instance fences an open transaction with a single bump too.
    assert await call(tc.handle_add_partitions, "tt", pid, e + 1, {TP1}) == ErrorCode.NONE
    err, _, _ = await call(tc.handle_init_producer_id, "tt", 60_000, None)
    assert err == ErrorCode.CONCURRENT_TRANSACTIONS
    await until(lambda: md(b, "tt").state == TxnState.COMPLETE_ABORT)
    assert await call(tc.handle_init_producer_id, "tt", 60_000, None) == (ErrorCode.NONE, pid, e + 3)


def at_transaction_version(b: Broker, level: int) -> None:
    """The cluster's finalized transaction.version set to ``level`` (a new one's is 2)."""
    from rivulet.server.features import TRANSACTION_VERSION, FinalizedFeatures

    levels = {k: v for k, v in b.features.finalized.levels.items() if k != TRANSACTION_VERSION}
    if level:
        levels[TRANSACTION_VERSION] = level
    b.features.set_finalized(FinalizedFeatures(levels, b.features.finalized.epoch + 1))


@with_broker()
async def test_end_txn_v5_answers_the_next_epoch_by_its_version_alone(b: Broker) -> None:
    """Kafka's transactionVersionForEndTxn: v5 is a transaction.version 2 client's, refused
    (UNSUPPORTED_VERSION) below level 2 as Kafka 4.3.1 answers it; v4 and below are classic."""
    from rivulet.protocol.framing import RequestHeader
    from rivulet.protocol.messages.end_txn_request import EndTxnRequest

    async def end_txn(b: Broker, version: int, tid: str, pid: int, epoch: int, commit: bool):
        resp = b.apis.handlers[26](RequestHeader(26, version, 1, "t"),
                                   EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                                 committed=commit), None)
        if isinstance(resp, asyncio.Future):
            resp = await resp
        return ErrorCode(resp.error_code), resp.producer_id, resp.producer_epoch

    at_transaction_version(b, 0)  # an existing cluster kept at 0
    pid, e = await open_txn(b, "h0")
    assert await end_txn(b, 5, "h0", pid, e, True) == (ErrorCode.UNSUPPORTED_VERSION, -1, -1)
    assert md(b, "h0").state == TxnState.ONGOING
    at_transaction_version(b, 2)
    pid2, e2 = await open_txn(b, "h2")
    assert await end_txn(b, 5, "h2", pid2, e2, True) == (ErrorCode.NONE, pid2, e2 + 1)
    await until(lambda: md(b, "h2").state == TxnState.COMPLETE_COMMIT)
    assert await end_txn(b, 5, "h2", pid2, e2, True) == (ErrorCode.NONE, pid2, e2 + 1)  # a retry
    # v4 keeps the classic rules whatever the level (Kafka picks by the version).
    assert await end_txn(b, 4, "h2", pid2, e2, True) == (ErrorCode.PRODUCER_FENCED, pid2, e2)


async def produce_adding(b: Broker, tp: TopicPartition, pid: int, epoch: int, seq: int, tid: str | None) -> ErrorCode:
    """A Produce v12 of a transaction.version 2 producer: the partition joins implicitly."""
    data = rec.encode_batch([rec.Record(0, None, None, b"x", [])], producer_id=pid, producer_epoch=epoch,
                            base_sequence=seq, transactional=True)
    res = b.replica_manager.append_records({tp: bytearray(data)}, required_acks=-1, timeout_ms=5000,
                                           transactional_id=tid,
                                           txn_operation=TxnOperation.ADD_PARTITION)
    if isinstance(res, asyncio.Future):
        res = await res
    return ErrorCode(res[tp].error)


@with_broker()
async def test_tv2_produce_adds_its_partition_to_the_transaction(b: Broker) -> None:
    tc = b.transaction_coordinator
    err, pid, e = await call(tc.handle_init_producer_id, "pa", 60_000, None)
    # Without the add (Produce v11 and below) a partition not in the transaction is refused.
    assert await produce(b, TP0, pid, e, 0, "pa") == ErrorCode.INVALID_TXN_STATE
    assert await produce_adding(b, TP0, pid, e, 0, "pa") == ErrorCode.NONE
    m = md(b, "pa")
    assert (m.state, m.topic_partitions, m.client_transaction_version) == (TxnState.ONGOING, {TP0}, 2)
    assert await produce_adding(b, TP0, pid, e, 1, "pa") == ErrorCode.NONE  # already in: no add
    # The coordinator's errors, as a producer reads them.
    assert await produce_adding(b, TP1, pid, e - 1, 0, "pa") == ErrorCode.INVALID_PRODUCER_EPOCH
    assert await produce_adding(b, TP1, pid + 1, e, 0, "pa") == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    # No transactional id (the Produce handler refuses such a request before): nothing to add.
    assert await b.replica_manager.txn_verifier.add(None, pid, e, TP1) == ErrorCode.INVALID_TXN_STATE
    assert await call(tc.handle_end_transaction_tv2, "pa", pid, e, True) == (ErrorCode.NONE, pid, e + 1)
    await until(lambda: md(b, "pa").state == TxnState.COMPLETE_COMMIT)
    assert part(b, TP0).last_stable_offset == 3 and md(b, "pa").topic_partitions == set()
    # While the commit is being decided, the next transaction's add waits: CONCURRENT_TRANSACTIONS,
    # which a transaction.version 2 producer retries (Kafka 4.3.1 leaves it as it is for Produce v12+).
    tc.markers.add_txn_markers_to_send = lambda *a: None
    assert await produce_adding(b, TP1, pid, e + 1, 0, "pa") == ErrorCode.NONE
    assert await call(tc.handle_end_transaction_tv2, "pa", pid, e + 1, False) == (ErrorCode.NONE, pid, e + 2)
    assert await produce_adding(b, TP0, pid, e + 2, 0, "pa") == ErrorCode.CONCURRENT_TRANSACTIONS


@with_broker(add_partitions_to_txn_retry_backoff_max_ms=10_000)
async def test_one_node_asks_again_while_the_last_transaction_completes(b: Broker) -> None:
    """On one node as in a cluster: a producer that begins its next transaction while the
    coordinator still completes the last (its markers not written yet) is asked about again every
    add.partitions.to.txn.retry.backoff.ms, and answered once the last one has completed -- the
    add (Produce v12) and the check (v11 and below) alike."""
    tc = b.transaction_coordinator
    send_markers = tc.markers.add_txn_markers_to_send
    held: list[tuple] = []
    tc.markers.add_txn_markers_to_send = lambda *a: held.append(a)
    for tid, adds in (("r2", True), ("r1", False)):
        pid, e = await open_txn(b, tid)
        assert await call(tc.handle_end_transaction_tv2, tid, pid, e, True) == (ErrorCode.NONE, pid, e + 1)
        assert md(b, tid).state == TxnState.PREPARE_COMMIT and len(held) == 1
        if adds:
            sent = asyncio.ensure_future(produce_adding(b, TP0, pid, e + 1, 0, tid))
        else:
            sent = asyncio.ensure_future(produce(b, TP0, pid, e + 1, 0, tid))
        await asyncio.sleep(0.2)  # several rounds of CONCURRENT_TRANSACTIONS
        assert not sent.done()
        send_markers(*held.pop())
        # Added once the commit completed; the check finds the partition outside the new one.
        assert await sent == (ErrorCode.NONE if adds else ErrorCode.INVALID_TXN_STATE)
        assert md(b, tid).state == (TxnState.ONGOING if adds else TxnState.COMPLETE_COMMIT)


@with_broker()
async def test_tv2_added_partition_takes_a_new_producer_at_sequence_0(b: Broker) -> None:
    """The implicit add tells the log the producer is a TV2 one: with no state on the partition
    its first batch must be at sequence 0; without the add (Produce v11) KIP-360 accepts any."""
    tc = b.transaction_coordinator
    err, pid, e = await call(tc.handle_init_producer_id, "s0", 60_000, None)
    assert await produce_adding(b, TP0, pid, e, 4, "s0") == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert part(b, TP0).log.log_end_offset == 0
    assert await produce_adding(b, TP0, pid, e, 0, "s0") == ErrorCode.NONE
    err, pid2, e2 = await call(tc.handle_init_producer_id, "s1", 60_000, None)
    assert await call(tc.handle_add_partitions, "s1", pid2, e2, {TP1}) == ErrorCode.NONE
    assert await produce(b, TP1, pid2, e2, 4, "s1") == ErrorCode.NONE


@with_broker()
async def test_produce_v12_adds_partitions_by_its_version_alone(b: Broker) -> None:
    """Kafka decides the implicit add by Produce's version (v12+); below level 2 the coordinator
    refuses it (UNSUPPORTED_VERSION), as Kafka 4.3.1 does."""
    from types import SimpleNamespace

    from rivulet.protocol.framing import RequestHeader
    from rivulet.protocol.messages import produce_request as prq
    from rivulet.server.features import TRANSACTION_VERSION

    async def produce_v12(b: Broker, tid: str, pid: int, epoch: int, seq: int, version: int = 12,
                          partition: int = 0) -> ErrorCode:
        data = rec.encode_batch([rec.Record(0, None, None, b"x", [])], producer_id=pid, producer_epoch=epoch,
                                base_sequence=seq, transactional=True)
        req = prq.ProduceRequest(transactional_id=tid, acks=-1, timeout_ms=5000, topic_data=[prq.TopicProduceData(
            name="t", partition_data=[prq.PartitionProduceData(index=partition, records=bytearray(data))])])
        conn = SimpleNamespace(request_size=len(data), user=None, throttle=lambda ms: None, principal=None,
                               listener=SimpleNamespace(name="PLAINTEXT"))
        resp = b.apis.handlers[0](RequestHeader(0, version, 1, "p"), req, conn)
        if isinstance(resp, asyncio.Future):
            resp = await resp
        return ErrorCode(resp.responses[0].partition_responses[0].error_code)

    tc = b.transaction_coordinator
    assert b.features.level(TRANSACTION_VERSION) == 2  # a new cluster's
    at_transaction_version(b, 0)  # an existing cluster kept at 0
    err, pid, e = await call(tc.handle_init_producer_id, "p12", 60_000, None)
    # v11: the partition must have been added (AddPartitionsToTxn), at any level
    # (TRANSACTION_ABORTABLE from v11, as Kafka 4.3.1 answers).
    assert await produce_v12(b, "p12", pid, e, 0, version=11) == ErrorCode.TRANSACTION_ABORTABLE
    # v12 is a transaction.version 2 producer's by its version; below level 2 its add is
    # refused, UNSUPPORTED_VERSION, as Kafka 4.3.1 answers.
    assert await produce_v12(b, "p12", pid, e, 0) == ErrorCode.UNSUPPORTED_VERSION
    assert md(b, "p12").topic_partitions == set()
    at_transaction_version(b, 2)
    assert await produce_v12(b, "p12", pid, e, 0) == ErrorCode.NONE
    assert (md(b, "p12").topic_partitions, md(b, "p12").client_transaction_version) == ({TP0}, 2)
    assert await produce_v12(b, "p12", pid, e, 0, version=11, partition=1) == ErrorCode.TRANSACTION_ABORTABLE
    assert await produce_v12(b, "p12", pid, e, 0, partition=1) == ErrorCode.NONE
    assert md(b, "p12").topic_partitions == {TP0, TP1}


@with_broker(add_partitions_to_txn_retry_backoff_max_ms=0)
async def test_a_produce_error_the_producer_retries_is_logged(b: Broker) -> None:
    """A partition's answer that the producer retries (here CONCURRENT_TRANSACTIONS: the
    coordinator still completes the last transaction, and no time is left to ask again) is logged at INFO
    with the producer id, epoch and transactional id, once per error per interval however often
    it is retried."""
    import logging
    from types import SimpleNamespace

    from rivulet.common.logs import RateLimitFilter
    from rivulet.protocol.framing import RequestHeader
    from rivulet.protocol.messages import produce_request as prq

    tc = b.transaction_coordinator
    pid, e = await open_txn(b, "lg")
    tc.markers.add_txn_markers_to_send = lambda *a: None  # the commit stays prepared
    assert await call(tc.handle_end_transaction_tv2, "lg", pid, e, True) == (ErrorCode.NONE, pid, e + 1)
    lines: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda r: lines.append(r.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("rivulet.server.handlers.records")
    logger.addHandler(handler)
    level, filters = logger.level, logger.filters
    logger.setLevel(logging.INFO)
    logger.filters = [RateLimitFilter(level=logging.INFO)]  # a window of its own, whatever ran before
    try:
        for _ in range(3):
            data = rec.encode_batch([rec.Record(0, None, None, b"x", [])], producer_id=pid, producer_epoch=e + 1,
                                    base_sequence=0, transactional=True)
            req = prq.ProduceRequest(transactional_id="lg", acks=-1, timeout_ms=5000, topic_data=[prq.TopicProduceData(
                name="t", partition_data=[prq.PartitionProduceData(index=0, records=bytearray(data))])])
            conn = SimpleNamespace(request_size=len(data), user=None, throttle=lambda ms: None, principal=None,
                                   listener=SimpleNamespace(name="PLAINTEXT"))
            resp = b.apis.handlers[0](RequestHeader(0, 12, 1, "franz"), req, conn)
            if isinstance(resp, asyncio.Future):
                resp = await resp
            assert resp.responses[0].partition_responses[0].error_code == ErrorCode.CONCURRENT_TRANSACTIONS
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.filters = filters
    assert lines == [f"produce to t-0 answered CONCURRENT_TRANSACTIONS, which the producer retries: producer id {pid} "
                     f"epoch {e + 1} sequence 0, transactional id lg, client franz (transactional write to t-0 "
                     "failed verification with the coordinator, which answered CONCURRENT_TRANSACTIONS)"]


class _NoLocalCoordinator:
    """The verifier's ``local``: its node (99) coordinates no transactional id here."""

    def verify_produce(self, transactional_id, producer_id, producer_epoch, tp) -> ErrorCode:
        raise AssertionError("asked the local coordinator")

    def add_partition(self, transactional_id, producer_id, producer_epoch, tp, callback) -> None:
        raise AssertionError("asked the local coordinator")


@with_broker()
async def test_cluster_verifier_add_asks_the_remote_coordinator_to_add(b: Broker) -> None:
    """Cluster mode's implicit add (Produce v12): node 99's verifier sends the in-process broker,
    the coordinator of every transactional id, AddPartitionsToTxn v5 without verify_only; the
    coordinator's errors come back as they are and the replica manager maps them for a producer."""
    from rivulet.replication.link import BrokerLinks
    from rivulet.replication.metadata_cache import MetadataCache
    from rivulet.replication.replica_manager import ReplicaManager
    from rivulet.transaction.remote_verifier import ClusterTxnVerifier

    class RecordingLinks(BrokerLinks):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.sent: list[tuple[object, int | None]] = []

        async def send(self, broker_id, request, max_version=None, endpoint=None):
            self.sent.append((request, max_version))
            return await super().send(broker_id, request, max_version, endpoint)

    def mapped(err: ErrorCode, operation: TxnOperation = TxnOperation.DEFAULT_ERROR) -> ErrorCode:
        failure = ReplicaManager._verification_failure(TP1, err, operation)
        return ErrorCode.NONE if failure is None else failure.code

    links = RecordingLinks("txn-verify", 99, cache_led_by(b, TRANSACTION_STATE_TOPIC_NAME, 3), "PLAINTEXT",
                           request_timeout_ms=10_000)
    verifier = ClusterTxnVerifier(links, _NoLocalCoordinator())
    tc = b.transaction_coordinator
    try:
        err, pid, e = await call(tc.handle_init_producer_id, "ca", 60_000, None)
        assert await verifier.add("ca", pid, e, TP0) == ErrorCode.NONE
        (req, max_version), = links.sent
        assert max_version == 5
        (t,) = req.transactions
        assert (t.transactional_id, t.producer_id, t.producer_epoch, t.verify_only) == ("ca", pid, e, False)
        assert [(x.name, list(x.partitions)) for x in t.topics] == [("t", [0])]
        m = md(b, "ca")
        assert (m.state, m.topic_partitions, m.client_transaction_version) == (TxnState.ONGOING, {TP0}, 2)
        # The same partition again: in already (a verify agrees).
        assert await verifier.add("ca", pid, e, TP0) == ErrorCode.NONE
        assert await verifier.verify("ca", pid, e, TP0) == ErrorCode.NONE
        assert links.sent[-1][0].transactions[0].verify_only is True
        # The coordinator's refusals, raw, then as the producer reads them.
        assert await verifier.add("ca", pid, e - 1, TP1) == ErrorCode.PRODUCER_FENCED
        assert mapped(ErrorCode.PRODUCER_FENCED) == ErrorCode.INVALID_PRODUCER_EPOCH
        assert await verifier.add("ca", pid + 1, e, TP1) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        assert mapped(ErrorCode.INVALID_PRODUCER_ID_MAPPING) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        assert await verifier.add("nobody", pid, e, TP1) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        tc.markers.add_txn_markers_to_send = lambda *a: None  # the commit stays prepared
        assert await call(tc.handle_end_transaction_tv2, "ca", pid, e, True) == (ErrorCode.NONE, pid, e + 1)
        assert await verifier.add("ca", pid, e + 1, TP1) == ErrorCode.CONCURRENT_TRANSACTIONS
        assert mapped(ErrorCode.CONCURRENT_TRANSACTIONS) == ErrorCode.NOT_ENOUGH_REPLICAS  # retriable
        # A transaction.version 2 producer (Produce v12+) gets it as it is, as Kafka 4.3.1 answers.
        assert mapped(ErrorCode.CONCURRENT_TRANSACTIONS, TxnOperation.ADD_PARTITION) == \
            ErrorCode.CONCURRENT_TRANSACTIONS
        assert mapped(ErrorCode.CONCURRENT_TRANSACTIONS, TxnOperation.GENERIC_ERROR_SUPPORTED) == \
            ErrorCode.NOT_ENOUGH_REPLICAS
        assert mapped(ErrorCode.COORDINATOR_NOT_AVAILABLE, TxnOperation.ADD_PARTITION) == \
            ErrorCode.NOT_ENOUGH_REPLICAS
        n = len(links.sent)
        # Answered without a request: no transactional id, no coordinator known or reachable.
        assert await verifier.add(None, pid, e, TP1) == ErrorCode.INVALID_TXN_STATE
        assert await ClusterTxnVerifier(BrokerLinks("x", 99, MetadataCache(node_id=99), "PLAINTEXT"),
                                        _NoLocalCoordinator()).add("ca", pid, e, TP1) == \
            ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert mapped(ErrorCode.COORDINATOR_NOT_AVAILABLE) == ErrorCode.NOT_ENOUGH_REPLICAS
        assert len(links.sent) == n
        # transaction.partition.verification.enable=false turns verify off, never the add.
        off = ClusterTxnVerifier(links, _NoLocalCoordinator(), verification_enabled=False)
        assert await off.verify("ca", pid, e - 5, TP1) == ErrorCode.NONE
        assert await off.add("ca", pid, e - 5, TP1) == ErrorCode.PRODUCER_FENCED
    finally:
        await links.close()


@with_broker(authorizer_class_name="org.apache.kafka.metadata.authorizer.StandardAuthorizer")
async def test_cluster_verifier_answers_a_refused_cluster_action_as_invalid_txn_state(b: Broker) -> None:
    """A coordinator that refuses this broker's AddPartitionsToTxn v4+ (no CLUSTER_ACTION: a
    top-level CLUSTER_AUTHORIZATION_FAILED) leaves the partition unverified: INVALID_TXN_STATE for
    a verify and an add alike, as Kafka's AddPartitionsToTxnManager (the client is not told of
    the broker's own right); a producer and a TxnOffsetCommit then answer INVALID_TXN_STATE.
    The broker's authorizer has no ACLs: node 99's anonymous PLAINTEXT link has no CLUSTER_ACTION."""
    from rivulet.replication.link import BrokerLinks
    from rivulet.replication.replica_manager import ReplicaManager
    from rivulet.coordinator.group_metadata_manager import convert_write_error
    from rivulet.transaction.remote_verifier import ClusterTxnVerifier

    links = BrokerLinks("txn-verify", 99, cache_led_by(b, TRANSACTION_STATE_TOPIC_NAME, 3), "PLAINTEXT",
                        request_timeout_ms=10_000)
    verifier = ClusterTxnVerifier(links, _NoLocalCoordinator())
    try:
        err, pid, e = await call(b.transaction_coordinator.handle_init_producer_id, "cz", 60_000, None)
        assert err == ErrorCode.NONE
        assert await verifier.verify("cz", pid, e, TP0) == ErrorCode.INVALID_TXN_STATE
        assert await verifier.add("cz", pid, e, TP0) == ErrorCode.INVALID_TXN_STATE
        assert md(b, "cz").topic_partitions == set()
        failure = ReplicaManager._verification_failure(TP0, ErrorCode.INVALID_TXN_STATE)
        assert failure is not None and failure.code == ErrorCode.INVALID_TXN_STATE
        assert convert_write_error(ErrorCode.INVALID_TXN_STATE) == ErrorCode.INVALID_TXN_STATE
    finally:
        await links.close()


async def txn_offset_commit(b: Broker, version: int, tid: str, pid: int, epoch: int, group: str = "g") -> ErrorCode:
    """A TxnOffsetCommit of t-0 through the broker's handler, as a connection sends it."""
    from types import SimpleNamespace

    from rivulet.protocol.framing import RequestHeader
    from rivulet.protocol.messages import txn_offset_commit_request as tocq

    req = tocq.TxnOffsetCommitRequest(
        transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=epoch, generation_id=-1,
        member_id="", group_instance_id=None, topics=[tocq.TxnOffsetCommitRequestTopic(
            name="t", partitions=[tocq.TxnOffsetCommitRequestPartition(
                partition_index=0, committed_offset=5, committed_leader_epoch=-1, committed_metadata="")])])
    conn = SimpleNamespace(user=None, principal=None, listener=SimpleNamespace(name="PLAINTEXT"))
    resp = b.apis.handlers[28](RequestHeader(28, version, 1, "p"), req, conn)
    if isinstance(resp, asyncio.Future):
        resp = await resp
    (topic,) = resp.topics
    (p,) = topic.partitions
    return ErrorCode(p.error_code)


@with_broker()
async def test_txn_offset_commit_checks_the_offsets_partition_is_in_the_transaction(b: Broker) -> None:
    """KIP-890 part 1, as Kafka 4.3.1 answers it (tests/integration/test_transactions.py has the
    same over the wire): a TxnOffsetCommit whose transaction never added the group's offsets
    partition (no AddOffsetsToTxn) is refused, INVALID_TXN_STATE below v4, TRANSACTION_ABORTABLE
    from v4; a fenced or unknown producer as the coordinator says; once added, accepted, and the
    open transaction on the offsets partition needs no second check."""
    tc = b.transaction_coordinator
    await until(lambda: b.group_coordinator.find_group_coordinator("g")[0] == ErrorCode.NONE)
    offsets_tp = TopicPartition("__consumer_offsets", b.group_coordinator.partition_for("g"))
    err, pid, e = await call(tc.handle_init_producer_id, "k", 60_000, None)
    for v in range(4):
        assert await txn_offset_commit(b, v, "k", pid, e) == ErrorCode.INVALID_TXN_STATE, v
    assert await txn_offset_commit(b, 4, "k", pid, e) == ErrorCode.TRANSACTION_ABORTABLE
    assert await call(tc.handle_add_partitions, "k", pid, e, {TP0}) == ErrorCode.NONE
    assert await txn_offset_commit(b, 3, "k", pid, e) == ErrorCode.INVALID_TXN_STATE
    assert await txn_offset_commit(b, 4, "k", pid, e) == ErrorCode.TRANSACTION_ABORTABLE
    for v in (3, 4):
        assert await txn_offset_commit(b, v, "k", pid, e + 1) == ErrorCode.INVALID_PRODUCER_EPOCH
        assert await txn_offset_commit(b, v, "k", pid + 100, e) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        assert await txn_offset_commit(b, v, "nobody", pid, e) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    # AddOffsetsToTxn: the offsets partition is in the transaction.
    assert await call(tc.handle_add_partitions, "k", pid, e, {offsets_tp}) == ErrorCode.NONE
    assert await txn_offset_commit(b, 3, "k", pid, e) == ErrorCode.NONE
    assert await txn_offset_commit(b, 4, "k", pid, e) == ErrorCode.NONE
    # Open on the offsets partition now: accepted without asking (a wrong id would be refused).
    assert b.replica_manager._in_open_transaction(part(b, offsets_tp), pid, e)
    assert await b.replica_manager.join_transaction("nobody", pid, e, offsets_tp,
                                                    TxnOperation.DEFAULT_ERROR) == ErrorCode.NONE


@with_broker(transaction_partition_verification_enable="false")
async def test_txn_offset_commit_is_not_checked_with_verification_disabled(b: Broker) -> None:
    """transaction.partition.verification.enable=false: Kafka skips the check (not the TV2 add)."""
    tc = b.transaction_coordinator
    await until(lambda: b.group_coordinator.find_group_coordinator("g")[0] == ErrorCode.NONE)
    err, pid, e = await call(tc.handle_init_producer_id, "k", 60_000, None)
    assert await txn_offset_commit(b, 3, "k", pid, e) == ErrorCode.NONE
    assert await txn_offset_commit(b, 4, "k", pid, e, "g2") == ErrorCode.NONE


@with_broker()
async def test_txn_offset_commit_v5_adds_the_offsets_partition_at_transaction_version_2(b: Broker) -> None:
    """KIP-890 part 2: a TV2 producer sends no AddOffsetsToTxn; at level 2 a TxnOffsetCommit v5
    has the coordinator add the group's __consumer_offsets partition, answering its refusals as
    Kafka's group coordinator does. v4 only checks (no AddOffsetsToTxn here: TRANSACTION_ABORTABLE)
    and adds nothing; v5 below level 2 is refused (UNSUPPORTED_VERSION), as by Kafka 4.3.1."""
    from rivulet.coordinator.group_metadata_manager import convert_write_error

    tc = b.transaction_coordinator
    # As a client's FindCoordinator does first: __consumer_offsets is made and loaded.
    await until(lambda: b.group_coordinator.find_group_coordinator("g")[0] == ErrorCode.NONE)
    await until(lambda: not b.group_coordinator.manager.is_loading())
    offsets_tp = TopicPartition("__consumer_offsets", b.group_coordinator.partition_for("g"))
    at_transaction_version(b, 0)  # an existing cluster kept at 0
    err, pid, e = await call(tc.handle_init_producer_id, "o5", 60_000, None)
    # Below transaction.version 2 the add is refused, as Kafka 4.3.1 does (UNSUPPORTED_VERSION);
    # once AddOffsetsToTxn has the partition in the transaction, v5 needs no add and commits.
    assert await txn_offset_commit(b, 5, "o5", pid, e) == ErrorCode.UNSUPPORTED_VERSION
    assert md(b, "o5").topic_partitions == set()
    assert await call(tc.handle_add_partitions, "o5", pid, e, {offsets_tp}) == ErrorCode.NONE
    assert await txn_offset_commit(b, 5, "o5", pid, e) == ErrorCode.NONE
    # EndTxn v5 and Produce v12's add, likewise refused below level 2; unlike Kafka 4.3.1's
    # refusals, none leaves a pending transition behind (its id then answers CONCURRENT_TRANSACTIONS).
    assert await call(tc.handle_end_transaction_tv2, "o5", pid, e, True) == (ErrorCode.UNSUPPORTED_VERSION, -1, -1)
    assert await produce_adding(b, TP0, pid, e, 0, "o5") == ErrorCode.UNSUPPORTED_VERSION
    assert md(b, "o5").pending_state is None and md(b, "o5").state == TxnState.ONGOING
    at_transaction_version(b, 2)
    err, pid4, e4 = await call(tc.handle_init_producer_id, "o4", 60_000, None)
    assert await txn_offset_commit(b, 4, "o4", pid4, e4, "g4") == ErrorCode.TRANSACTION_ABORTABLE
    assert md(b, "o4").topic_partitions == set()
    # Level 2 and v5: the offsets partition joins the transaction, as a TV2 one.
    err, pid, e = await call(tc.handle_init_producer_id, "o6", 60_000, None)
    assert await txn_offset_commit(b, 5, "o6", pid, e) == ErrorCode.NONE
    m = md(b, "o6")
    assert (m.state, m.topic_partitions, m.client_transaction_version) == (TxnState.ONGOING, {offsets_tp}, 2)
    assert await txn_offset_commit(b, 5, "o6", pid, e) == ErrorCode.NONE  # open there already: no second add
    # The coordinator's refusals, as the TxnOffsetCommit answers them.
    err, pid7, e7 = await call(tc.handle_init_producer_id, "o7", 60_000, None)
    assert await txn_offset_commit(b, 5, "o7", pid7, e7 - 1, "g7") == ErrorCode.INVALID_PRODUCER_EPOCH
    assert await txn_offset_commit(b, 5, "o7", pid7 + 100, e7, "g7") == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    tc.markers.add_txn_markers_to_send = lambda *a: None  # o6's commit stays prepared
    assert await call(tc.handle_end_transaction_tv2, "o6", pid, e, True) == (ErrorCode.NONE, pid, e + 1)
    assert await txn_offset_commit(b, 5, "o6", pid, e + 1) == ErrorCode.CONCURRENT_TRANSACTIONS
    # AddPartitionsToTxnManager's mapping, then Kafka's group coordinator's normalisation.
    assert coordinator_answer(ErrorCode.PRODUCER_FENCED, TxnOperation.ADD_PARTITION) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert coordinator_answer(ErrorCode.TRANSACTION_ABORTABLE, TxnOperation.DEFAULT_ERROR) == ErrorCode.INVALID_TXN_STATE
    assert coordinator_answer(ErrorCode.TRANSACTION_ABORTABLE, TxnOperation.GENERIC_ERROR_SUPPORTED) == \
        ErrorCode.TRANSACTION_ABORTABLE
    assert [TxnOperation.for_txn_offset_commit(v) for v in (3, 4, 5)] \
        == [TxnOperation.DEFAULT_ERROR, TxnOperation.GENERIC_ERROR_SUPPORTED, TxnOperation.ADD_PARTITION]
    assert convert_write_error(ErrorCode.NOT_LEADER_OR_FOLLOWER) == ErrorCode.NOT_COORDINATOR
    assert convert_write_error(ErrorCode.REQUEST_TIMED_OUT) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert convert_write_error(ErrorCode.TRANSACTION_ABORTABLE) == ErrorCode.TRANSACTION_ABORTABLE


def cache_led_by_a_dead_broker(b: Broker, topic: str, partitions: int) -> MetadataCache:
    """``b``'s view of a cluster where node 7, whose port refuses connections, leads all of ``topic``."""
    import socket

    from rivulet.replication.metadata_cache import BrokerEndpoint, LiveBroker, MetadataUpdate, PartitionMetadata

    with socket.socket() as s:  # a port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cache = MetadataCache(node_id=b.node.node_id)
    cache.update(MetadataUpdate(
        controller_id=b.node.node_id, controller_epoch=1,
        live_brokers=[LiveBroker(7, (BrokerEndpoint("PLAINTEXT", "127.0.0.1", port),))],
        partitions={TopicPartition(topic, p): PartitionMetadata(7, 0, [], []) for p in range(partitions)},
        topic_ids={}))
    return cache


@with_broker()
async def test_a_lost_link_to_the_transaction_coordinator_is_answered_as_kafka(b: Broker) -> None:
    """KIP-890's check over a link that fails (the coordinator's broker down): NETWORK_EXCEPTION,
    as Kafka's AddPartitionsToTxnManager gives it, which a TxnOffsetCommit answers
    COORDINATOR_LOAD_IN_PROGRESS (Kafka's CoordinatorOperationExceptionHelper; v0/v1 clients get
    COORDINATOR_NOT_AVAILABLE) and a Produce NOT_ENOUGH_REPLICAS (Kafka's ReplicaManager), at
    every version. Rivulet said COORDINATOR_NOT_AVAILABLE to the TxnOffsetCommit."""
    from rivulet.coordinator.group_metadata_manager import convert_write_error
    from rivulet.replication.link import BrokerLinks
    from rivulet.transaction.remote_verifier import ClusterTxnVerifier

    await until(lambda: b.group_coordinator.find_group_coordinator("g")[0] == ErrorCode.NONE)
    await until(lambda: not b.group_coordinator.manager.is_loading())
    err, pid, e = await call(b.transaction_coordinator.handle_init_producer_id, "lost", 60_000, None)
    assert err == ErrorCode.NONE
    links = BrokerLinks("txn-verify", b.node.node_id, cache_led_by_a_dead_broker(b, TRANSACTION_STATE_TOPIC_NAME, 3),
                        "PLAINTEXT", request_timeout_ms=10_000)
    verifier = ClusterTxnVerifier(links, _NoLocalCoordinator())
    local, b.replica_manager.txn_verifier = b.replica_manager.txn_verifier, verifier
    try:
        assert await verifier.verify("lost", pid, e, TP0) == ErrorCode.NETWORK_EXCEPTION
        assert await verifier.add("lost", pid, e, TP0) == ErrorCode.NETWORK_EXCEPTION
        for v in (2, 3, 4, 5):
            assert await txn_offset_commit(b, v, "lost", pid, e) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, v
        for v in (0, 1):
            assert await txn_offset_commit(b, v, "lost", pid, e) == ErrorCode.COORDINATOR_NOT_AVAILABLE, v
        assert await produce(b, TP0, pid, e, 0, "lost") == ErrorCode.NOT_ENOUGH_REPLICAS
        assert await produce_adding(b, TP1, pid, e, 0, "lost") == ErrorCode.NOT_ENOUGH_REPLICAS
        # Nothing was written: the transaction holds no partition.
        assert md(b, "lost").topic_partitions == set()
        assert convert_write_error(ErrorCode.NETWORK_EXCEPTION) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    finally:
        b.replica_manager.txn_verifier = local
        await links.close()


@with_broker()
async def test_debug_lines_name_the_request_and_its_answer(b: Broker) -> None:
    """With DEBUG on, AddPartitionsToTxn and EndTxn v5 log the request and the answer once
    answered; with it off, nothing."""
    import logging

    tc = b.transaction_coordinator
    err, pid, e = await call(tc.handle_init_producer_id, "dbg", 60_000, None)
    lines: list[str] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = lambda r: lines.append(r.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("rivulet.transaction.coordinator")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        assert await call(tc.handle_add_partitions, "dbg", pid, e, {TP1, TP0}) == ErrorCode.NONE
        assert await call(tc.handle_add_partitions, "dbg", pid, e - 1, {TP0}) == ErrorCode.PRODUCER_FENCED
        tc.markers.add_txn_markers_to_send = lambda *a: None  # the commit stays prepared
        assert await call(tc.handle_end_transaction_tv2, "dbg", pid, e, True) == (ErrorCode.NONE, pid, e + 1)
        logger.setLevel(logging.INFO)
        assert await call(tc.handle_add_partitions, "dbg", pid, e + 1, {TP0}) == ErrorCode.CONCURRENT_TRANSACTIONS
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert [line for line in lines if line.startswith(("AddPartitions", "EndTxn"))] == [
        f"AddPartitions ['t-0', 't-1'] to dbg at producer {pid} epoch {e} (client version 0) answered NONE",
        f"AddPartitions ['t-0'] to dbg at producer {pid} epoch {e - 1} (client version 0) answered PRODUCER_FENCED",
        f"EndTxn(commit) of dbg at producer {pid} epoch {e} answered NONE ({pid}, {e + 1})"]
