"""Log compaction on a real Log: latest value per key, offsets unchanged, tombstones kept for
delete.retention.ms, segments swapped crash-safely (what __consumer_offsets relies on)."""

from __future__ import annotations

import os

import pytest

from rivulet.protocol import records as rec
from rivulet.storage import Log, LogConfig
from rivulet.storage.cleaner import CLEANER_OFFSET_CHECKPOINT, LogCleaner, encode_retained_batch
from rivulet.storage.producer_state import AppendOrigin

pytestmark = pytest.mark.fast

NOW = 1_700_000_000_000


def compacted(tmp_path, **kw) -> Log:
    cfg = LogConfig(cleanup_policy=("compact",), segment_bytes=kw.pop("segment_bytes", 600),
                    delete_retention_ms=kw.pop("delete_retention_ms", 1000), **kw)
    return Log(str(tmp_path / "topic-0"), cfg)


def append(lg: Log, pairs: list[tuple[bytes, bytes | None]], ts: int = NOW, compression: int = 0) -> None:
    batch = rec.encode_batch([rec.Record(0, ts, k, v, [("h", b"x")]) for k, v in pairs], compression=compression)
    headers = rec.validate_produce_records(batch, max_batch_size=1 << 20)
    lg.append_as_leader(bytearray(batch), headers, leader_epoch=0, now_ms=ts)
    lg.high_watermark = lg.log_end_offset


def read_batches(lg: Log):
    """Every batch, fetching segment after segment as a consumer would."""
    offset = lg.log_start_offset
    while offset < lg.log_end_offset:
        data = bytes(lg.read(offset, 1 << 30).records)
        if not data:
            break
        for b in rec.decode_records(data):
            yield b
            offset = b.header.next_offset


def read_all(lg: Log) -> list[rec.Record]:
    """Every record, from the log start."""
    return [r for b in read_batches(lg) for r in b.records if r.offset >= lg.log_start_offset]


def latest(records: list[rec.Record]) -> dict[bytes, tuple[int, bytes | None]]:
    m = {}
    for r in records:
        m[r.key] = (r.offset, r.value)
    return m


def fill(lg: Log, rounds: int = 30) -> None:
    for i in range(rounds):
        append(lg, [(f"k{i % 5}".encode(), f"v{i}".encode() * 8), (b"other", f"o{i}".encode())])
    append(lg, [(b"k1", None)])  # tombstone for k1
    for i in range(5):
        append(lg, [(b"tail", f"t{i}".encode() * 40)])  # push everything above into older segments


def test_compaction_keeps_latest_per_key_at_unchanged_offsets(tmp_path):
    lg = compacted(tmp_path)
    fill(lg)
    before = read_all(lg)
    assert len(lg.segment_base_offsets()) > 3
    leo = lg.log_end_offset
    stats = LogCleaner(None).clean_log_now(lg, now=NOW)
    assert stats is not None and stats.records_kept < stats.records_read
    after = read_all(lg)
    assert lg.log_end_offset == leo
    # Every surviving record sits at its original offset with its original content.
    original = {r.offset: r for r in before}
    for r in after:
        o = original[r.offset]
        assert (r.key, r.value, r.timestamp, r.headers) == (o.key, o.value, o.timestamp, o.headers)
    # The latest value (or tombstone) of every key survives; older ones are gone below the active segment.
    assert latest(after) == latest(before)
    active_base = lg.segment_base_offsets()[-1]
    cleaned_keys = [r.key for r in after if r.offset < active_base]
    assert len(cleaned_keys) == len(set(cleaned_keys))
    assert any(r.key == b"k1" and r.value is None for r in after)  # tombstone kept for now
    assert [r.offset for r in after] == sorted(r.offset for r in after)


def test_tombstones_removed_after_delete_retention(tmp_path):
    lg = compacted(tmp_path, delete_retention_ms=1000)
    fill(lg)
    cleaner = LogCleaner(None)
    cleaner.clean_log_now(lg, now=NOW)
    assert any(r.key == b"k1" for r in read_all(lg))
    assert cleaner.horizons[lg.dir] == NOW + 1000
    cleaner.clean_log_now(lg, now=NOW + 999, force=True)
    assert any(r.key == b"k1" for r in read_all(lg))  # horizon not reached
    stats = cleaner.clean_log_now(lg, now=NOW + 1000)  # due: cleaned even with nothing dirty
    assert stats is not None and stats.tombstones_removed == 1
    assert not any(r.key == b"k1" for r in read_all(lg))


def test_clean_then_reopen_and_fetch_from_the_middle(tmp_path):
    lg = compacted(tmp_path)
    fill(lg)
    before = latest(read_all(lg))
    LogCleaner(None).clean_log_now(lg, now=NOW)
    offsets = [r.offset for r in read_all(lg)]
    lg.close()
    reopened = Log(lg.dir, lg.config)
    assert latest(read_all(reopened)) == before
    # A fetch from an offset removed by compaction returns the next surviving batch.
    gap = next(o for o in range(offsets[0], offsets[-1]) if o not in offsets)
    data = reopened.read(gap, 1 << 20).records
    first = next(rec.decode_records(bytes(data)))
    assert first.header.last_offset >= gap
    assert not any(n.endswith((".swap", ".cleaned")) for n in os.listdir(lg.dir))
    assert not os.path.exists(os.path.join(lg.dir, "cleaner.tmp"))
    reopened.close()


def test_dirty_ratio_and_non_compacted_logs(tmp_path):
    lg = compacted(tmp_path, min_cleanable_dirty_ratio=0.99)
    fill(lg)
    cleaner = LogCleaner(None)
    assert cleaner.clean_log_now(lg, now=NOW) is not None  # all dirty: ratio 1.0
    append(lg, [(b"x", b"y")])
    assert cleaner.clean_log_now(lg, now=NOW) is None  # little new dirt
    plain = Log(str(tmp_path / "plain-0"), LogConfig(segment_bytes=600))
    fill(plain)
    assert cleaner.clean_log_now(plain, now=NOW, force=True) is None  # delete policy: never compacted


def test_min_compaction_lag_protects_recent_segments(tmp_path):
    lg = compacted(tmp_path, min_compaction_lag_ms=60_000)
    fill(lg)
    assert LogCleaner(None).clean_log_now(lg, now=NOW + 1000, force=True) is None
    assert LogCleaner(None).clean_log_now(lg, now=NOW + 61_000, force=True) is not None


def test_compressed_batches_and_interrupted_swap_recovery(tmp_path):
    lg = compacted(tmp_path, segment_bytes=400)
    for i in range(20):
        append(lg, [(b"a", b"1" * 50), (f"b{i % 3}".encode(), b"2" * 50)], compression=1)
    for i in range(3):
        append(lg, [(b"z", b"z" * 200)])
    want = latest(read_all(lg))
    LogCleaner(None).clean_log_now(lg, now=NOW)
    assert latest(read_all(lg)) == want
    # A crash between ".swap" and the final rename: recovery completes the swap.
    base = lg.segment_base_offsets()[0]
    name = f"{base:020d}.log"
    lg.close()
    os.replace(os.path.join(lg.dir, name), os.path.join(lg.dir, name + ".swap"))
    again = Log(lg.dir, lg.config)
    assert latest(read_all(again)) == want
    again.close()


def test_crash_while_writing_cleaned_segment_leaves_log_loadable(tmp_path):
    lg = compacted(tmp_path, segment_bytes=400)
    for i in range(20):
        append(lg, [(f"k{i % 4}".encode(), b"v" * 50)])
    want = read_all(lg)
    lg.close()
    # SIGKILL while the cleaner was writing its output: its scratch directory remains.
    scratch = os.path.join(lg.dir, "cleaner.tmp", "0")
    os.makedirs(scratch)
    open(os.path.join(scratch, f"{0:020d}.log"), "wb").write(b"partial")
    again = Log(lg.dir, lg.config)
    assert read_all(again) == want
    assert "cleaner.tmp" not in os.listdir(lg.dir)
    again.close()


def test_retained_batch_encoding_keeps_offsets_and_crc():
    batch = rec.encode_batch([rec.Record(0, NOW + i, b"k%d" % i, b"v", []) for i in range(5)], base_offset=100)
    decoded = rec.decode_batch(batch)
    kept = [decoded.records[1], decoded.records[3]]
    out = encode_retained_batch(decoded.header, kept, NOW + 5000)
    d2 = rec.decode_batch(out)  # CRC verified
    assert d2.header.base_offset == 100 and d2.header.last_offset == 104
    assert [(r.offset, r.key, r.timestamp) for r in d2.records] == [(101, b"k1", NOW + 1), (103, b"k3", NOW + 3)]
    assert d2.header.attributes & rec.DELETE_HORIZON_MASK and d2.header.base_timestamp == NOW + 5000


# -- transactions (what TxnOffsetCommit leaves in __consumer_offsets) -------------------------

class Txn:
    """A transactional producer writing straight to a Log."""

    def __init__(self, lg: Log, pid: int) -> None:
        self.lg, self.pid, self.seq = lg, pid, 0

    def send(self, pairs: list[tuple[bytes, bytes | None]], ts: int = NOW) -> None:
        batch = rec.encode_batch([rec.Record(0, ts, k, v, []) for k, v in pairs], producer_id=self.pid,
                                 producer_epoch=0, base_sequence=self.seq, transactional=True)
        self.seq += len(pairs)
        headers = rec.validate_produce_records(batch, max_batch_size=1 << 20)
        self.lg.append_as_leader(bytearray(batch), headers, leader_epoch=0, now_ms=ts)
        self.lg.high_watermark = self.lg.log_end_offset

    def end(self, commit: bool, ts: int = NOW) -> int:
        kind = rec.ControlRecordType.COMMIT if commit else rec.ControlRecordType.ABORT
        batch = rec.encode_control_batch(kind, producer_id=self.pid, producer_epoch=0, coordinator_epoch=0,
                                         timestamp=ts)
        headers = [h for _pos, h in rec.iter_batches(batch)]  # the coordinator's path
        offset = self.lg.log_end_offset
        self.lg.append_as_leader(bytearray(batch), headers, leader_epoch=0, now_ms=ts,
                                 origin=AppendOrigin.COORDINATOR)
        self.lg.high_watermark = self.lg.log_end_offset
        return offset


def markers(lg: Log) -> list[int]:
    return [b.header.base_offset for b in read_batches(lg) if b.header.is_control]


def committed_view(lg: Log) -> dict[bytes, bytes | None]:
    """Latest value per key as a read_committed reader (the offsets loader) sees it."""
    aborted = {(pid, first) for pid, first in lg.collect_aborted_transactions(0, lg.log_end_offset)}
    pending = sorted(aborted, key=lambda e: e[1])
    open_aborted: set[int] = set()
    out: dict[bytes, bytes | None] = {}
    for b in read_batches(lg):
        h = b.header
        while pending and pending[0][1] <= h.last_offset:
            open_aborted.add(pending.pop(0)[0])
        if h.is_control:
            open_aborted.discard(h.producer_id)
        elif not (h.is_transactional and h.producer_id in open_aborted):
            for r in b.records:
                out[r.key] = r.value
    return out


def push_out_of_active(lg: Log) -> None:
    for i in range(6):
        append(lg, [(b"tail", b"t" * 200)])


def test_aborted_transaction_never_supersedes_a_committed_value(tmp_path):
    lg = compacted(tmp_path, delete_retention_ms=1000)
    append(lg, [(b"offset:g/t/0", b"committed-10")])
    t = Txn(lg, pid=7)
    t.send([(b"offset:g/t/0", b"aborted-99")])
    t.end(commit=False)
    push_out_of_active(lg)
    assert committed_view(lg)[b"offset:g/t/0"] == b"committed-10"
    LogCleaner(None).clean_log_now(lg, now=NOW, force=True)
    # Kafka's cleaner: the aborted record is discarded and does not shadow the committed one.
    values = [r.value for r in read_all(lg) if r.key == b"offset:g/t/0"]
    assert values == [b"committed-10"]
    assert committed_view(lg)[b"offset:g/t/0"] == b"committed-10"


def test_open_transaction_bounds_the_cleanable_range(tmp_path):
    lg = compacted(tmp_path)
    append(lg, [(b"k", b"old")])
    t = Txn(lg, pid=9)
    t.send([(b"k", b"pending")])  # undecided: nothing from here on may be cleaned
    push_out_of_active(lg)
    LogCleaner(None).clean_log_now(lg, now=NOW, force=True)
    assert [r.value for r in read_all(lg) if r.key == b"k"] == [b"old", b"pending"]
    t.end(commit=True)
    push_out_of_active(lg)
    LogCleaner(None).clean_log_now(lg, now=NOW, force=True)
    assert [r.value for r in read_all(lg) if r.key == b"k"] == [b"pending"]
    assert committed_view(lg)[b"k"] == b"pending"


def test_markers_outlive_their_data_by_delete_retention(tmp_path):
    lg = compacted(tmp_path, delete_retention_ms=1000)
    t = Txn(lg, pid=5)
    t.send([(b"a", b"1")])
    abort_at = t.end(commit=False)
    t.send([(b"b", b"2")])
    commit_at = t.end(commit=True)
    append(lg, [(b"b", b"3")])  # supersedes the committed record: that marker is now bare too
    push_out_of_active(lg)
    cleaner = LogCleaner(None)
    cleaner.clean_log_now(lg, now=NOW, force=True)
    assert markers(lg) == [abort_at, commit_at]  # both kept until their delete horizon
    assert lg.collect_aborted_transactions(0, lg.log_end_offset) == []  # no aborted data is left
    cleaner.clean_log_now(lg, now=NOW + 1001, force=True)
    assert markers(lg) == []
    # A later committed transaction of the same producer is not mistaken for the aborted one.
    t.send([(b"c", b"4")])
    t.end(commit=True)
    assert committed_view(lg)[b"c"] == b"4"
    again = Log(lg.dir, lg.config)  # the index survives a reload
    assert again.collect_aborted_transactions(0, again.log_end_offset) == []
    again.close()


def test_marker_stays_while_its_transaction_keeps_data(tmp_path):
    lg = compacted(tmp_path, delete_retention_ms=1000)
    t = Txn(lg, pid=3)
    t.send([(b"x", b"1")])
    commit_at = t.end(commit=True)
    push_out_of_active(lg)
    cleaner = LogCleaner(None)
    cleaner.clean_log_now(lg, now=NOW, force=True)
    cleaner.clean_log_now(lg, now=NOW + 10_000, force=True)
    assert commit_at in markers(lg)
    assert committed_view(lg)[b"x"] == b"1"


def test_cleaned_segment_drops_aborted_data_and_its_index_entries(tmp_path):
    """Aborted data goes, so the cleaned segment needs no .txnindex entry for it; a stale
    entry would drop the producer's next (committed) transaction."""
    lg = compacted(tmp_path, segment_bytes=10_000)
    t = Txn(lg, pid=11)
    t.send([(b"q", b"aborted")])
    t.end(commit=False)
    lg.roll()
    push_out_of_active(lg)
    lg.roll()
    assert lg.collect_aborted_transactions(0, lg.log_end_offset) == [(11, 0)]
    LogCleaner(None).clean_log_now(lg, now=NOW, force=True)
    assert lg.collect_aborted_transactions(0, lg.log_end_offset) == []
    assert [r.key for r in read_all(lg) if r.key == b"q"] == []
    t.send([(b"q", b"committed")])
    t.end(commit=True)
    assert committed_view(lg)[b"q"] == b"committed"


def test_cleaner_checkpoint_is_persisted(tmp_path):
    lg = compacted(tmp_path)
    fill(lg)
    cleaner = LogCleaner(None)
    cleaner.clean_log_now(lg, now=NOW + 1000)
    end = cleaner.checkpoints[lg.dir]
    text = open(tmp_path / CLEANER_OFFSET_CHECKPOINT).read().split("\n")
    assert text[:3] == ["0", "1", f"topic 0 {end}"]
    # A new cleaner (after a restart) starts from the saved mark: nothing dirty, nothing to do.
    assert LogCleaner(None).clean_log_now(lg, now=NOW + 1000) is None

