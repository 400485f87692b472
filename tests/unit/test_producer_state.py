"""Producer state in the log: Kafka's sequence/epoch rules, transactions, the LSO, the
aborted-transaction index, snapshots and their recovery."""

from __future__ import annotations

import os
import struct

import crc32c
import pytest

from rivulet.protocol import records as rec
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.storage import Log, LogConfig
from rivulet.storage.producer_state import (
    INT32_MAX,
    AppendOrigin,
    CorruptSnapshotError,
    ProducerStateEntry,
    ProducerStateManager,
    decrement_sequence,
    increment_sequence,
    read_snapshot,
    write_snapshot,
)

pytestmark = pytest.mark.fast

NOW = 1_700_000_000_000


def batch(n: int = 1, *, pid: int = 7, epoch: int = 0, seq: int = 0, txn: bool = False, ts: int = NOW) -> bytes:
    return rec.encode_batch([rec.Record(0, ts + i, b"k", b"v%d" % i, []) for i in range(n)], producer_id=pid,
                            producer_epoch=epoch, base_sequence=seq, transactional=txn)


def plain(n: int = 1) -> bytes:
    return rec.encode_batch([rec.Record(0, NOW + i, None, b"p", []) for i in range(n)])


def marker(commit: bool, *, pid: int = 7, epoch: int = 0, coordinator_epoch: int = 0) -> bytes:
    kind = rec.ControlRecordType.COMMIT if commit else rec.ControlRecordType.ABORT
    return rec.encode_control_batch(kind, producer_id=pid, producer_epoch=epoch, coordinator_epoch=coordinator_epoch,
                                    timestamp=NOW)


def append(lg: Log, data: bytes, origin: AppendOrigin = AppendOrigin.CLIENT, transaction_version: int = 0):
    buf = bytearray(data)
    headers = [h for _, h in rec.iter_batches(buf)]
    info = lg.append_as_leader(buf, headers, leader_epoch=0, now_ms=NOW, origin=origin,
                               transaction_version=transaction_version)
    lg.high_watermark = lg.log_end_offset
    return info


def expect_error(code: ErrorCode, fn, *args, **kw) -> None:
    with pytest.raises(ApiError) as e:
        fn(*args, **kw)
    assert e.value.code == code


@pytest.fixture
def make_log(tmp_path):
    logs: list[Log] = []

    def make(name: str = "t-0", **kw) -> Log:
        cfg = kw.pop("config", LogConfig())
        lg = Log(str(tmp_path / name), cfg, time_ms=lambda: NOW, **kw)
        logs.append(lg)
        return lg

    yield make
    for lg in logs:
        lg.close(final=False)


# -- sequence numbers and epochs ------------------------------------------------------------------


def test_sequence_helpers_wrap_at_int32_max():
    assert increment_sequence(INT32_MAX, 1) == 0
    assert increment_sequence(INT32_MAX - 1, 3) == 1
    assert decrement_sequence(1, 3) == INT32_MAX - 1
    assert decrement_sequence(10, 3) == 7


def test_in_order_batches_and_a_gap(make_log):
    lg = make_log()
    assert append(lg, batch(3, seq=0)).first_offset == 0
    assert append(lg, batch(2, seq=3)).first_offset == 3
    expect_error(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, append, lg, batch(1, seq=6))
    assert lg.log_end_offset == 5
    e = lg.producer_state.last_entry(7)
    assert (e.producer_epoch, e.first_seq, e.last_seq, e.last_data_offset) == (0, 0, 4, 4)


def test_retried_batch_gets_its_original_offsets_without_a_second_append(make_log):
    lg = make_log()
    append(lg, plain(2))
    first = append(lg, batch(3, seq=0))
    append(lg, batch(1, seq=3))
    leo = lg.log_end_offset
    dup = append(lg, batch(3, seq=0))
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (first.first_offset, first.last_offset)
    assert dup.log_append_time == NOW + 2  # Kafka answers with the stored batch's timestamp
    assert lg.log_end_offset == leo


def test_only_the_last_five_batches_are_remembered(make_log):
    lg = make_log()
    for i in range(6):
        append(lg, batch(1, seq=i))
    assert append(lg, batch(1, seq=1)).duplicate  # still one of the last five
    expect_error(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, append, lg, batch(1, seq=0))
    # An overlapping but different range is not a duplicate either.
    expect_error(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, append, lg, batch(2, seq=4))


def test_epoch_rules(make_log):
    lg = make_log()
    append(lg, batch(1, epoch=3, seq=0))
    append(lg, batch(1, epoch=3, seq=1))
    expect_error(ErrorCode.INVALID_PRODUCER_EPOCH, append, lg, batch(1, epoch=2, seq=2))
    # A new epoch has to start over at sequence 0.
    expect_error(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, append, lg, batch(1, epoch=4, seq=2))
    append(lg, batch(1, epoch=4, seq=0))
    e = lg.producer_state.last_entry(7)
    assert (e.producer_epoch, e.last_seq, len(e.batch_metadata)) == (4, 0, 1)
    # A retry under the old epoch is no duplicate any more.
    expect_error(ErrorCode.INVALID_PRODUCER_EPOCH, append, lg, batch(1, epoch=3, seq=1))


def test_unknown_producer_is_accepted_at_any_sequence(make_log):
    # Since KIP-360 (Kafka 2.5) a broker without state for the producer (never seen, or
    # expired) accepts any sequence instead of answering UNKNOWN_PRODUCER_ID.
    lg = make_log()
    assert append(lg, batch(2, pid=42, seq=17)).first_offset == 0
    expect_error(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, append, lg, batch(1, pid=42, seq=20))
    append(lg, batch(1, pid=42, seq=19))


def test_sequence_wraps_around(make_log):
    lg = make_log()
    append(lg, batch(2, seq=INT32_MAX - 1))
    append(lg, batch(1, seq=0))
    assert lg.producer_state.last_entry(7).last_seq == 0


def test_coordinator_appends_skip_sequence_checks_but_not_epochs(make_log):
    lg = make_log()
    append(lg, batch(1, epoch=1, seq=0), AppendOrigin.COORDINATOR)
    append(lg, batch(1, epoch=1, seq=0), AppendOrigin.COORDINATOR)  # same seq: fine for a coordinator
    assert lg.log_end_offset == 2
    expect_error(ErrorCode.INVALID_PRODUCER_EPOCH, append, lg, batch(1, epoch=0, seq=0), AppendOrigin.COORDINATOR)


# -- transactions ------------------------------------------------------------------------------------


def test_open_transaction_holds_back_the_first_unstable_offset(make_log):
    lg = make_log()
    append(lg, plain(2))
    append(lg, batch(2, txn=True))
    append(lg, plain(1))
    assert lg.first_unstable_offset == 2
    append(lg, batch(1, seq=2, txn=True))
    assert lg.first_unstable_offset == 2
    info = append(lg, marker(True), AppendOrigin.COORDINATOR)
    assert info.first_offset == 6
    assert lg.first_unstable_offset is None
    assert lg.producer_state.last_entry(7).current_txn_first_offset is None
    assert lg.collect_aborted_transactions(0, lg.log_end_offset) == []


def test_marker_above_the_high_watermark_keeps_the_transaction_unstable(make_log):
    lg = make_log()
    append(lg, batch(1, txn=True))
    buf = bytearray(marker(False))
    lg.append_as_leader(buf, [h for _, h in rec.iter_batches(buf)], leader_epoch=0, now_ms=NOW,
                        origin=AppendOrigin.COORDINATOR)
    assert lg.first_unstable_offset == 0  # decided, but the marker is not below the HW yet
    lg.high_watermark = lg.log_end_offset
    assert lg.first_unstable_offset is None


def test_abort_goes_into_the_transaction_index(make_log):
    lg = make_log()
    append(lg, batch(2, pid=1, txn=True))           # 0-1  pid 1
    append(lg, batch(1, pid=2, txn=True))           # 2    pid 2
    append(lg, marker(False, pid=1), AppendOrigin.COORDINATOR)  # 3 abort pid 1
    append(lg, marker(True, pid=2), AppendOrigin.COORDINATOR)   # 4 commit pid 2
    entries = lg.active_segment.txn_index.entries
    # (pid, first, last, LSO when it completed: pid 2's transaction was still open at 2).
    assert entries == [(1, 0, 3, 2)]
    assert lg.collect_aborted_transactions(0, 5) == [(1, 0)]
    assert lg.collect_aborted_transactions(4, 5) == []
    with open(lg.active_segment.txn_index_path, "rb") as f:
        raw = f.read()
    assert raw == struct.pack(">hqqqq", 0, 1, 0, 3, 2)


def test_empty_transaction_marker_changes_nothing(make_log):
    lg = make_log()
    append(lg, marker(False, pid=9), AppendOrigin.COORDINATOR)
    assert lg.active_segment.txn_index.entries == []
    assert lg.producer_state.last_entry(9).coordinator_epoch == 0


def test_non_transactional_write_inside_a_transaction_is_refused(make_log):
    lg = make_log()
    append(lg, batch(1, txn=True))
    expect_error(ErrorCode.INVALID_TXN_STATE, append, lg, batch(1, seq=1, txn=False))


def test_stale_coordinator_epoch_is_fenced(make_log):
    lg = make_log()
    append(lg, batch(1, txn=True))
    append(lg, marker(True, coordinator_epoch=5), AppendOrigin.COORDINATOR)
    append(lg, batch(1, seq=1, txn=True))
    expect_error(ErrorCode.TRANSACTION_COORDINATOR_FENCED, append, lg, marker(False, coordinator_epoch=4),
                 AppendOrigin.COORDINATOR)
    # A marker with a bumped producer epoch (a fence) ends the transaction and the old epoch.
    append(lg, marker(False, epoch=1, coordinator_epoch=5), AppendOrigin.COORDINATOR)
    expect_error(ErrorCode.INVALID_PRODUCER_EPOCH, append, lg, batch(1, seq=2, txn=True))


def test_tv2_marker_must_carry_a_bumped_epoch(make_log):
    """KIP-1228: a transaction.version 2 marker's epoch is the one its EndTxn bumped to, so one
    not above the producer's is late or doubled; the versions below keep the old rule."""
    C = AppendOrigin.COORDINATOR
    lg = make_log()
    append(lg, batch(1, epoch=3, txn=True))
    expect_error(ErrorCode.INVALID_PRODUCER_EPOCH, append, lg, marker(True, epoch=3), C, 2)
    append(lg, marker(True, epoch=3), C, 1)  # TV1: the transaction's own epoch is fine
    # The next transaction at epoch 3 ends with a TV2 marker at 4; its records start at sequence 0.
    append(lg, batch(1, epoch=3, seq=1, txn=True))
    append(lg, marker(True, epoch=4), C, 2)
    assert lg.producer_state.last_entry(7).producer_epoch == 4
    append(lg, batch(1, epoch=4, seq=0, txn=True))
    expect_error(ErrorCode.INVALID_PRODUCER_EPOCH, append, lg, marker(False, epoch=4), C, 2)
    append(lg, marker(False, epoch=5), C, 2)
    assert lg.collect_aborted_transactions(0, lg.log_end_offset) == [(7, 4)]  # its first offset
    # The same marker again once its transaction has ended (a reloaded coordinator): written.
    end = lg.log_end_offset
    append(lg, marker(False, epoch=5), C, 2)
    assert lg.log_end_offset == end + 1
    # Not one of an older epoch (an admin's AbortTransaction moved the producer to 5 before a
    # coordinator's fence at 4 got here): Kafka refuses it, and the coordinator abandons it.
    expect_error(ErrorCode.INVALID_PRODUCER_EPOCH, append, lg, marker(False, epoch=4), C, 2)
    assert lg.log_end_offset == end + 1
    # Followers copy what the leader checked: the old rule.
    append(lg, batch(1, epoch=5, seq=0, txn=True))
    append(lg, marker(True, epoch=5), AppendOrigin.REPLICATION)


def test_tv2_added_producer_without_state_starts_at_sequence_0(make_log):
    """A partition added for a transaction.version 2 producer (Produce v12) that keeps no batches
    of it takes its first batch at sequence 0 only; without the add KIP-360 accepts any."""
    lg = make_log()
    expect_error(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, append, lg, batch(1, pid=8, seq=3, txn=True),
                 transaction_version=2)
    assert lg.log_end_offset == 0 and lg.producer_state.last_entry(8) is None
    append(lg, batch(1, pid=8, seq=0, txn=True), transaction_version=2)
    append(lg, batch(1, pid=8, seq=1, txn=True), transaction_version=2)  # state now: the usual rules
    # The older versions and idempotent batches keep KIP-360's leniency.
    append(lg, batch(1, pid=9, seq=5, txn=True), transaction_version=1)
    append(lg, batch(1, pid=10, seq=5), transaction_version=2)
    # After a TV2 marker the entry keeps its epoch but no batches: the next transaction starts at 0.
    append(lg, marker(True, pid=8, epoch=1), AppendOrigin.COORDINATOR, 2)
    expect_error(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, append, lg, batch(1, pid=8, epoch=1, seq=2, txn=True),
                 transaction_version=2)
    append(lg, batch(1, pid=8, epoch=1, seq=0, txn=True), transaction_version=2)
    # Followers copy the leader's batches unchecked.
    append(lg, batch(1, pid=11, seq=7, txn=True), AppendOrigin.REPLICATION, 2)
    assert lg.producer_state.last_entry(11).last_seq == 7


# -- snapshots -----------------------------------------------------------------------------------


def test_snapshot_file_layout(tmp_path):
    path = str(tmp_path / "00000000000000000042.snapshot")
    e = ProducerStateEntry(5, 2, 3, NOW, 40)
    e.add_batch(2, 9, 41, 1, NOW)
    write_snapshot(path, [e])
    raw = open(path, "rb").read()
    assert struct.unpack_from(">h", raw, 0) == (1,)
    assert struct.unpack_from(">I", raw, 2) == (crc32c.crc32c(raw[6:]),)
    assert struct.unpack_from(">i", raw, 6) == (1,)  # one entry, 46 bytes
    assert len(raw) == 10 + 46
    assert struct.unpack_from(">qhiqiqiq", raw, 10) == (5, 2, 9, 41, 1, NOW, 3, 40)
    (back,) = read_snapshot(path)
    assert (back.producer_id, back.producer_epoch, back.last_seq, back.first_seq, back.last_data_offset,
            back.coordinator_epoch, back.current_txn_first_offset) == (5, 2, 9, 8, 41, 3, 40)
    corrupt = bytearray(raw)
    corrupt[-1] ^= 1
    open(path, "wb").write(corrupt)
    with pytest.raises(CorruptSnapshotError):
        read_snapshot(path)


def test_rolls_take_snapshots_and_clean_restart_reloads(make_log, tmp_path):
    lg = make_log("r-0")
    append(lg, batch(2, seq=0))
    lg.roll()
    append(lg, batch(1, pid=8, txn=True))
    append(lg, batch(1, seq=2))
    lg.close()
    names = sorted(n for n in os.listdir(tmp_path / "r-0") if n.endswith(".snapshot"))
    assert names == ["00000000000000000002.snapshot", "00000000000000000004.snapshot"]
    lg2 = make_log("r-0", had_clean_shutdown=True, recovery_point=4)
    assert lg2.producer_state.last_entry(7).last_seq == 2
    assert lg2.first_unstable_offset == 2
    assert append(lg2, batch(1, seq=2)).duplicate


def test_unclean_restart_rebuilds_state_and_the_transaction_index(make_log, tmp_path):
    lg = make_log("u-0")
    append(lg, batch(2, pid=1, txn=True))
    append(lg, batch(1, pid=3, seq=0))
    lg.roll()
    append(lg, marker(False, pid=1), AppendOrigin.COORDINATOR)
    append(lg, batch(1, pid=2, txn=True))
    lg.flush()
    seg_dir = tmp_path / "u-0"
    for n in os.listdir(seg_dir):
        if n.endswith((".txnindex", ".snapshot")):
            os.unlink(seg_dir / n)
    lg.close(final=False)  # as a crash: no snapshot at the end
    lg2 = make_log("u-0", recovery_point=0)
    assert lg2.collect_aborted_transactions(0, lg2.log_end_offset) == [(1, 0)]
    assert lg2.first_unstable_offset == 0  # the abort marker is not below the HW (0) yet
    lg2.high_watermark = lg2.log_end_offset
    assert lg2.first_unstable_offset == 4
    assert lg2.producer_state.last_entry(3).last_seq == 0
    assert append(lg2, batch(1, pid=3, seq=0)).duplicate
    assert os.path.exists(seg_dir / "00000000000000000003.snapshot")


def test_truncation_reloads_producer_state(make_log):
    lg = make_log()
    append(lg, batch(1, seq=0))
    lg.roll()
    append(lg, batch(1, seq=1))
    append(lg, batch(1, seq=2, txn=False))
    lg.truncate_to(2)
    assert lg.producer_state.last_entry(7).last_seq == 1
    append(lg, batch(1, seq=2))


def test_expiry_spares_producers_with_open_transactions(tmp_path):
    ps = ProducerStateManager(str(tmp_path), "t-0", producer_id_expiration_ms=1000)
    idle = ProducerStateEntry(1, 0, -1, NOW)
    busy = ProducerStateEntry(2, 0, -1, NOW, current_txn_first_offset=5)
    ps.load_producer_entry(idle)
    ps.load_producer_entry(busy)
    assert ps.remove_expired_producers(NOW + 999) == 0
    assert ps.remove_expired_producers(NOW + 1000) == 1
    assert set(ps.producers) == {2}


def test_expired_producer_starts_over_at_any_sequence(make_log):
    lg = make_log(producer_id_expiration_ms=10)
    append(lg, batch(1, seq=0, ts=NOW - 100))
    assert lg.remove_expired_producers(NOW) == 1
    append(lg, batch(1, seq=5))  # accepted: the broker no longer knows the producer


def test_old_snapshots_go_once_the_recovery_point_passes_them(make_log, tmp_path):
    lg = make_log("s-0")
    for seq in range(5):
        append(lg, batch(1, seq=seq))
        lg.roll()
    snaps = lambda: sorted(int(n[:20]) for n in os.listdir(tmp_path / "s-0") if n.endswith(".snapshot"))  # noqa: E731
    assert snaps() == [1, 2, 3, 4, 5]
    lg.flush()
    # Kept: everything from the segment before the active one (recovery point at the end).
    assert lg.delete_snapshots_after_recovery_point_checkpoint() == 4
    assert snaps() == [4, 5]
