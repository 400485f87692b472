"""Transaction metadata state machine, __transaction_state records, producer id blocks."""

from __future__ import annotations

import json
import os
import struct

import pytest

from rivulet.common.java_hash import java_string_hashcode
from rivulet.common.types import TopicPartition
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.transaction import txn_log
from rivulet.transaction.metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    SHORT_MAX,
    IllegalTxnStateError,
    TransactionMetadata,
    TxnState,
)
from rivulet.transaction.producer_id_manager import ProducerIdManager

pytestmark = pytest.mark.fast

S = TxnState
TP = TopicPartition


def fresh(epoch: int = NO_PRODUCER_EPOCH) -> TransactionMetadata:
    return TransactionMetadata("tx", 100, NO_PRODUCER_ID, epoch, NO_PRODUCER_EPOCH, 60_000, S.EMPTY, set(), -1, 0)


def test_java_hash_and_partition_for():
    assert java_string_hashcode("hello") == 99162322
    assert java_string_hashcode("") == 0
    assert java_string_hashcode("polygenelubricants") == -(2**31)
    assert txn_log.partition_for("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) is 0
    assert txn_log.partition_for("hello", 50) == 99162322 % 50
    assert java_string_hashcode("é😀") == (((0xE9 * 31 + 0xD83D) * 31 + 0xDE00) & 0xFFFFFFFF)


def test_full_commit_cycle():
    md = fresh()
    t = md.prepare_increment_producer_epoch(60_000, None, 1)
    assert (t.producer_epoch, t.last_producer_epoch, t.txn_state) == (0, NO_PRODUCER_EPOCH, S.EMPTY)
    assert md.pending_transition_in_progress
    md.complete_transition_to(t)
    assert (md.producer_epoch, md.state, md.pending_state) == (0, S.EMPTY, None)
    t = md.prepare_add_partitions({TP("a", 0)}, 5)
    md.complete_transition_to(t)
    assert md.state == S.ONGOING and md.txn_start_timestamp == 5
    md.complete_transition_to(md.prepare_add_partitions({TP("a", 1)}, 6))
    assert md.txn_start_timestamp == 5 and md.topic_partitions == {TP("a", 0), TP("a", 1)}
    md.complete_transition_to(md.prepare_abort_or_commit(S.PREPARE_COMMIT, 7))
    done = md.prepare_complete(8)
    md.remove_partition(TP("a", 0))
    md.remove_partition(TP("a", 1))
    md.complete_transition_to(done)
    assert md.state == S.COMPLETE_COMMIT and not md.topic_partitions
    with pytest.raises(IllegalTxnStateError):
        md.prepare_abort_or_commit(S.PREPARE_ABORT, 9)  # not from CompleteCommit


def test_epoch_bump_rules():
    md = fresh(epoch=4)
    md.last_producer_epoch = 3
    t = md.prepare_increment_producer_epoch(1000, 4, 1)  # the current producer recovering (KIP-360)
    assert (t.producer_epoch, t.last_producer_epoch) == (5, 4)
    md.pending_state = None
    t = md.prepare_increment_producer_epoch(1000, 3, 1)  # a retry of the last bump
    assert (t.producer_epoch, t.last_producer_epoch) == (4, 3)
    md.pending_state = None
    assert md.prepare_increment_producer_epoch(1000, 2, 1) is None  # fenced
    t = md.prepare_increment_producer_epoch(1000, None, 1)  # a new instance
    assert (t.producer_epoch, t.last_producer_epoch) == (5, NO_PRODUCER_EPOCH)


def test_fence_then_abort_with_the_bumped_epoch():
    md = fresh(epoch=2)
    md.state = S.ONGOING
    md.topic_partitions = {TP("a", 0)}
    md.txn_start_timestamp = 1
    fence = md.prepare_fence_producer_epoch()
    assert fence.txn_state == S.PREPARE_EPOCH_FENCE and fence.producer_epoch == 3
    with pytest.raises(IllegalTxnStateError):
        md.complete_transition_to(fence)  # a fence always continues as PrepareAbort


def test_transition_while_pending_is_refused():
    md = fresh()
    md.prepare_increment_producer_epoch(1000, None, 1)
    with pytest.raises(IllegalTxnStateError):
        md.prepare_add_partitions({TP("a", 0)}, 2)


def test_log_records_round_trip():
    md = fresh(epoch=1)
    md.state = S.ONGOING
    md.topic_partitions = {TP("b", 2), TP("a", 1), TP("a", 0)}
    md.txn_start_timestamp = 10
    md.txn_last_update_timestamp = 11
    t = md.prepare_abort_or_commit(S.PREPARE_ABORT, 12)
    key = txn_log.key_to_bytes("tx")
    assert key == struct.pack(">hh", 0, 2) + b"tx"
    value = txn_log.value_to_bytes(t)
    assert struct.unpack_from(">hqhib", value, 0) == (0, 100, 1, 60_000, 3)
    assert txn_log.read_key(key) == "tx"
    back = txn_log.read_value("tx", value)
    assert (back.producer_id, back.producer_epoch, back.state, back.txn_start_timestamp,
            back.txn_last_update_timestamp) == (100, 1, S.PREPARE_ABORT, 10, 12)
    assert back.topic_partitions == md.topic_partitions
    assert txn_log.read_value("tx", None) is None


def test_empty_state_writes_null_partitions():
    md = fresh()
    value = txn_log.value_to_bytes(md.prepare_increment_producer_epoch(1000, None, 1))
    # version, pid, epoch, timeout, status, then the partitions array length: -1 (null).
    assert struct.unpack_from(">i", value, 2 + 8 + 2 + 4 + 1) == (-1,)
    assert txn_log.read_value("tx", value).topic_partitions == set()


def test_producer_id_blocks_survive_restarts(tmp_path):
    m = ProducerIdManager(str(tmp_path), block_size=10)
    assert [m.generate_producer_id() for _ in range(3)] == [0, 1, 2]
    assert json.load(open(tmp_path / "producer-id-block.json"))["next_block_start"] == 10
    m2 = ProducerIdManager(str(tmp_path), block_size=10)
    assert m2.generate_producer_id() == 10  # the rest of the old block is skipped, never reused
    ids = [m2.generate_producer_id() for _ in range(10)]
    assert ids[-1] == 20 and json.load(open(tmp_path / "producer-id-block.json"))["next_block_start"] == 30


def test_producer_id_block_that_cannot_be_recorded_answers_coordinator_load_in_progress(tmp_path, monkeypatch):
    import errno

    import rivulet.transaction.producer_id_manager as pim

    m = ProducerIdManager(str(tmp_path), block_size=10)
    real = pim.write_atomic

    def full_disk(path, text, **kw):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(pim, "write_atomic", full_disk)
    with pytest.raises(ApiError) as e:  # Kafka's answer while no id block can be had: retriable
        m.generate_producer_id()
    assert e.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS and "No space left" in e.value.message
    monkeypatch.setattr(pim, "write_atomic", real)
    assert m.generate_producer_id() == 0  # the block was never handed out, so it is still free


# -- transaction.version 2 (dormant: only transitions prepared with client version 2) ----------------

def ongoing(epoch: int, pid: int = 100) -> TransactionMetadata:
    md = TransactionMetadata("tx", pid, NO_PRODUCER_ID, epoch, NO_PRODUCER_EPOCH, 60_000, S.ONGOING,
                             {TP("a", 0)}, 5, 5)
    return md


def end(md: TransactionMetadata, state: TxnState, now: int, **tv2) -> None:
    """PrepareX then CompleteX, as the coordinator and the marker writer do."""
    md.complete_transition_to(md.prepare_abort_or_commit(state, now, **tv2))
    done = md.prepare_complete(now + 1)
    for tp in list(md.topic_partitions):
        md.remove_partition(tp)
    md.complete_transition_to(done)


def test_tv2_commit_bumps_the_epoch_and_remembers_the_old_one():
    md = ongoing(epoch=7)
    t = md.prepare_abort_or_commit(S.PREPARE_COMMIT, 9, client_transaction_version=2)
    assert (t.producer_id, t.producer_epoch, t.last_producer_epoch, t.client_transaction_version) == (100, 8, 7, 2)
    md.complete_transition_to(t)
    assert (md.state, md.producer_epoch, md.last_producer_epoch, md.client_transaction_version) == \
        (S.PREPARE_COMMIT, 8, 7, 2)
    done = md.prepare_complete(10)
    assert (done.producer_id, done.producer_epoch, done.last_producer_epoch) == (100, 8, 7)
    md.remove_partition(TP("a", 0))
    md.complete_transition_to(done)
    assert (md.state, md.producer_id, md.producer_epoch, md.last_producer_id) == (S.COMPLETE_COMMIT, 100, 8, 100)
    # The next transaction runs at the bumped epoch; a TV0 commit of it leaves the epoch alone.
    md.complete_transition_to(md.prepare_add_partitions({TP("a", 1)}, 11, client_transaction_version=2))
    assert md.client_transaction_version == 2
    end(md, S.PREPARE_COMMIT, 12)
    assert (md.producer_epoch, md.client_transaction_version) == (8, 0)


def test_tv2_exhausted_epoch_moves_to_the_next_producer_id_on_completion():
    md = ongoing(epoch=SHORT_MAX - 1)
    t = md.prepare_abort_or_commit(S.PREPARE_COMMIT, 9, client_transaction_version=2, next_producer_id=200)
    assert (t.producer_epoch, t.next_producer_id) == (SHORT_MAX, 200)
    md.complete_transition_to(t)
    assert (md.producer_id, md.producer_epoch, md.next_producer_id) == (100, SHORT_MAX, 200)
    done = md.prepare_complete(10)
    # The client saw MAX-1 last: that stays the last epoch of the new id at epoch 0.
    assert (done.producer_id, done.producer_epoch, done.last_producer_epoch, done.last_producer_id,
            done.next_producer_id) == (200, 0, SHORT_MAX - 1, 100, NO_PRODUCER_ID)
    md.remove_partition(TP("a", 0))
    md.complete_transition_to(done)
    assert (md.producer_id, md.producer_epoch, md.last_producer_id, md.next_producer_id) == \
        (200, 0, 100, NO_PRODUCER_ID)


def test_tv2_abort_at_short_max_is_not_bumped():
    md = ongoing(epoch=SHORT_MAX)
    t = md.prepare_abort_or_commit(S.PREPARE_ABORT, 9, client_transaction_version=2)
    assert (t.producer_epoch, t.last_producer_epoch) == (SHORT_MAX, SHORT_MAX)
    md.complete_transition_to(t)


@pytest.mark.parametrize("state", [S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT])
def test_tv2_abort_with_nothing_open_starts_its_transaction_now(state):
    md = fresh(epoch=3)
    md.state = state
    md.txn_start_timestamp = -1 if state == S.EMPTY else 4
    with pytest.raises(IllegalTxnStateError):
        md.prepare_abort_or_commit(S.PREPARE_ABORT, 9)  # TV0/TV1 refuse it, as before
    t = md.prepare_abort_or_commit(S.PREPARE_ABORT, 9, client_transaction_version=2, no_partition_added=True)
    assert (t.txn_start_timestamp, t.producer_epoch, t.topic_partitions) == (9, 4, frozenset())
    md.complete_transition_to(t)
    done = md.prepare_complete(10)
    md.complete_transition_to(done)
    assert (md.state, md.producer_epoch, md.txn_start_timestamp) == (S.COMPLETE_ABORT, 4, 9)
    md2 = fresh(epoch=3)
    md2.state = state
    with pytest.raises(IllegalTxnStateError):
        md2.prepare_abort_or_commit(S.PREPARE_COMMIT, 9, client_transaction_version=2, no_partition_added=True)


def test_tv2_completion_refuses_unexpected_metadata():
    md = ongoing(epoch=7)
    t = md.prepare_abort_or_commit(S.PREPARE_COMMIT, 9, client_transaction_version=2)
    md.producer_epoch = 6  # the bump no longer starts from the current epoch
    with pytest.raises(IllegalTxnStateError):
        md.complete_transition_to(t)
    md = ongoing(epoch=SHORT_MAX - 1)
    md.complete_transition_to(md.prepare_abort_or_commit(S.PREPARE_ABORT, 9, client_transaction_version=2,
                                                         next_producer_id=200))
    done = md.prepare_complete(10)
    md.producer_id = 101  # the rotation does not start from the current id
    with pytest.raises(IllegalTxnStateError):
        md.complete_transition_to(done)


@pytest.mark.parametrize("version", [0, 1])
def test_tv2_fields_in_log_values(version):
    md = ongoing(epoch=SHORT_MAX - 1)
    t = md.prepare_abort_or_commit(S.PREPARE_ABORT, 9, client_transaction_version=2, next_producer_id=200)
    value = txn_log.value_to_bytes(t, version)
    assert struct.unpack_from(">h", value)[0] == version
    back = txn_log.read_value("tx", value)
    assert (back.producer_id, back.producer_epoch, back.state) == (100, SHORT_MAX, S.PREPARE_ABORT)
    expected = (100, 200, 2) if version == 1 else (NO_PRODUCER_ID, NO_PRODUCER_ID, 0)
    assert (back.last_producer_id, back.next_producer_id, back.client_transaction_version) == expected
    assert txn_log.value_version_for(0) == 0 and txn_log.value_version_for(1) == 1 == txn_log.value_version_for(2)
