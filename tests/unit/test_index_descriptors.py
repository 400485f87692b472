"""A segment holds one descriptor, its .log's: the offset, time and transaction indexes keep
their entries in memory and open their files only to write or sync them (as Kafka maps its
indexes and closes their files). Their entries reach the files at a flush, a roll, a
truncation or a close, so after a crash an index may be short of the log."""

from __future__ import annotations

import os
import shutil
import struct

import pytest

from rivulet.storage import Log, LogConfig
from tests.unit.test_storage import append, batches, make_batch, records

pytestmark = [
    pytest.mark.fast,
    pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd to count descriptors"),
]


def _fds_under(path: str) -> list[str]:
    """The files under ``path`` this process holds descriptors on."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the listing's own descriptor, closed since
        if target.startswith(path + os.sep):
            out.append(target)
    return out


def _every_offset_reads(lg: Log) -> None:
    for off in range(lg.log_start_offset, lg.log_end_offset):
        first = batches(lg.read(off, 1 << 20).records)[0]
        assert first.base_offset <= off <= first.last_offset


def _index_entries_on_disk(lg: Log, base: int, suffix: str = ".index") -> int:
    return os.path.getsize(os.path.join(lg.dir, f"{base:020d}{suffix}")) // (8 if suffix == ".index" else 12)


def _batch() -> bytes:
    return make_batch(records(4, 200))


def test_one_descriptor_per_segment_through_writes_rolls_truncation_retention_and_close(tmp_path):
    b = _batch()
    pdir = str(tmp_path / "orders-0")
    lg = Log(pdir, LogConfig(segment_bytes=len(b) * 6, index_interval_bytes=0, retention_bytes=len(b) * 12))
    assert len(_fds_under(lg.dir)) == 1
    for i in range(40):
        append(lg, b, now_ms=i)
        assert sorted(_fds_under(lg.dir)) == sorted(s.log_path for s in lg.log_segments())
    assert len(lg.log_segments()) >= 6
    active = lg.active_segment
    assert active.offset_index.entries > 0 and active.time_index.entries > 0
    _every_offset_reads(lg)

    lg.flush()
    assert len(_fds_under(lg.dir)) == len(lg.log_segments())
    assert _index_entries_on_disk(lg, active.base_offset) == active.offset_index.entries

    # Truncation into the middle of a segment (a follower's divergence) drops segments after it.
    cut = lg.log_segments()[-3].base_offset + 8  # two batches in
    assert lg.truncate_to(cut)
    assert sorted(_fds_under(lg.dir)) == sorted(s.log_path for s in lg.log_segments())
    assert lg.log_end_offset == lg.active_segment.next_offset
    _every_offset_reads(lg)

    # Retention renames segments to *.deleted; they take no descriptor along.
    lg.high_watermark = lg.log_end_offset
    assert lg.delete_retention_segments(0) > 0
    assert sorted(_fds_under(lg.dir)) == sorted(s.log_path for s in lg.log_segments())
    _every_offset_reads(lg)

    lg.close()
    assert _fds_under(lg.dir) == []


def test_a_pinned_segment_deleted_under_its_reader_is_still_looked_up_from_memory(tmp_path):
    b = _batch()
    pdir = str(tmp_path / "orders-0")
    cfg = LogConfig(segment_bytes=len(b) * 6, index_interval_bytes=0, retention_bytes=len(b) * 6)
    lg = Log(pdir, cfg)
    for i in range(20):
        append(lg, b, now_ms=i)
    lg.close()
    # Reopened cleanly, the older segments' indexes are read only on first lookup.
    lg = Log(pdir, cfg, recovery_point=20 * 4, had_clean_shutdown=True)
    first, second = lg.log_segments()[:2]
    lg.pin_segments([first])  # what the cleaner's worker does
    lg.high_watermark = lg.log_end_offset
    assert lg.delete_retention_segments(0) > 0
    assert not os.path.exists(first.index_path) and not os.path.exists(first.time_index_path)
    assert first.offset_index.entries > 0
    for off in range(first.base_offset, second.base_offset):
        pos = first.position_of(off)
        assert pos == (off - first.base_offset) // 4 * len(b)
    # Only the renamed .log stays open, until the pin is released.
    assert [p for p in _fds_under(lg.dir) if p.endswith(".deleted")] == [first.log_path + ".deleted"]
    lg.unpin_segments([first])
    assert sorted(_fds_under(lg.dir)) == sorted(s.log_path for s in lg.log_segments())
    lg.close()


def test_the_txn_index_holds_no_descriptor(tmp_path):
    pdir = str(tmp_path / "orders-0")
    lg = Log(pdir, LogConfig())
    seg = lg.active_segment
    seg.txn_index.append(7, 0, 3, 0)
    seg.txn_index.append(8, 4, 9, 4)
    assert len(_fds_under(lg.dir)) == 1
    with open(seg.txn_index_path, "rb") as f:
        assert len(f.read()) == 2 * 34
    seg.txn_index.truncate_to(5)
    assert os.path.getsize(seg.txn_index_path) == 34 and seg.txn_index.entries == [(7, 0, 3, 0)]
    assert len(_fds_under(lg.dir)) == 1
    lg.close()


def test_index_entries_reach_the_file_at_a_flush_a_roll_and_a_close(tmp_path):
    b = _batch()
    pdir = str(tmp_path / "orders-0")
    lg = Log(pdir, LogConfig(segment_bytes=len(b) * 6, index_interval_bytes=0))
    for i in range(4):
        append(lg, b, now_ms=i)
    first = lg.active_segment
    assert first.offset_index.entries == 3  # every batch after the first
    assert _index_entries_on_disk(lg, 0) == 0  # held in memory
    lg.flush()
    assert _index_entries_on_disk(lg, 0) == 3
    for i in range(4, 8):
        append(lg, b, now_ms=i)  # rolls after the sixth batch
    assert len(lg.log_segments()) == 2
    assert _index_entries_on_disk(lg, 0) == first.offset_index.entries == 5
    assert _index_entries_on_disk(lg, 0, ".timeindex") == first.time_index.entries
    second = lg.active_segment
    assert second.offset_index.entries == 1 and _index_entries_on_disk(lg, second.base_offset) == 0
    lg.close()
    assert _index_entries_on_disk(lg, second.base_offset) == 1


def test_recovery_after_a_crash_rebuilds_an_index_short_of_the_log(tmp_path):
    b = _batch()
    pdir = str(tmp_path / "orders-0")
    cfg = LogConfig(segment_bytes=len(b) * 100, index_interval_bytes=0)
    lg = Log(pdir, cfg)
    for i in range(10):
        append(lg, b, now_ms=i)
    lg.flush()
    rp = lg.recovery_point
    for i in range(10, 25):
        append(lg, b, now_ms=i)
    seg = lg.active_segment
    assert _index_entries_on_disk(lg, 0) == 9 < seg.offset_index.entries == 24
    # kill -9: the files as they are now (the entries held in memory are lost), no clean shutdown.
    crashed = str(tmp_path / "crashed" / "orders-0")
    shutil.copytree(pdir, crashed)
    lg.close()
    lg = Log(crashed, cfg, recovery_point=rp)
    assert lg.log_end_offset == 25 * 4
    seg = lg.active_segment
    assert seg.offset_index.entries == 24
    _every_offset_reads(lg)
    lg.flush()
    assert _index_entries_on_disk(lg, 0) == 24
    lg.close()


def test_a_short_index_below_the_recovery_point_neither_loses_lookups_nor_the_max_timestamp(tmp_path):
    pdir = str(tmp_path / "orders-0")
    b = make_batch(records(4, 200), base_ts=1_000)
    cfg = LogConfig(segment_bytes=len(b) * 6, index_interval_bytes=0)
    lg = Log(pdir, cfg)
    for i in range(15):
        # The latest timestamps are in the first segment's last batch.
        ts = 50_000 if i == 5 else 1_000 + i
        append(lg, make_batch(records(4, 200), base_ts=ts, base_offset=0), now_ms=i)
    leo = lg.log_end_offset
    first = lg.log_segments()[0]
    assert first.max_timestamp == 50_000 and lg.max_timestamp_offset() == (20, 50_000)
    lg.close()
    # The first segment's indexes lose their last entries (and the time index its closing one).
    for suffix, size in ((".index", 8), (".timeindex", 12)):
        path = os.path.join(pdir, f"{0:020d}{suffix}")
        entries = os.path.getsize(path) // size
        assert entries >= 3
        os.truncate(path, (entries - 2) * size)
    with open(os.path.join(pdir, f"{0:020d}.timeindex"), "rb") as f:
        assert max(ts for ts, _ in struct.iter_unpack(">qi", f.read())) < 50_000

    lg = Log(pdir, cfg, recovery_point=leo, had_clean_shutdown=True)
    first = lg.log_segments()[0]
    assert first.offset_index.entries == 3  # loaded as it is, not rebuilt
    assert first.max_timestamp == 50_000
    assert lg.max_timestamp_offset() == (20, 50_000)
    assert lg.fetch_offset_by_timestamp(50_000) == (20, 50_000)
    assert lg.fetch_offset_by_timestamp(1_004) == (16, 1_004)
    _every_offset_reads(lg)
    # Lookups past the short index's last entry scan on from it, never past the batch.
    for off in range(0, first.next_offset):
        assert first.position_of(off) == off // 4 * len(b)
    lg.close()


def test_a_log_renamed_for_deletion_under_a_flush_closes_when_the_flush_ends(tmp_path):
    # Deleting a topic closes its logs and renames their dirs; a flush holding a segment
    # defers its close, which then finds the index files gone with the dir.
    b = _batch()
    pdir = str(tmp_path / "orders-0")
    lg = Log(pdir, LogConfig(index_interval_bytes=0))
    for i in range(5):
        append(lg, b, now_ms=i)
    segs = lg.log_segments()
    assert segs[-1].offset_index.needs_sync  # entries held in memory
    lg.pin_segments(segs)
    lg.close(final=False)
    doomed = str(tmp_path / "orders-0.abc-delete")
    os.rename(pdir, doomed)
    assert len(_fds_under(doomed)) == 1
    lg.unpin_segments(segs)
    assert _fds_under(doomed) == []
