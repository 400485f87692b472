"""Unit tests for the durable log: appends, reads, indexes, rolling, recovery, retention."""

from __future__ import annotations

import gzip
import os
import struct
import threading

import crc32c
import pytest

from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.protocol.records import parse_batch_header
from rivulet.storage import Log, LogConfig, UnexpectedAppendOffsetError
from rivulet.storage.checkpoints import read_epoch_checkpoint

pytestmark = pytest.mark.fast


# -- batch building helpers -----------------------------------------------------------------


def _zz(n: int) -> bytes:
    v = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def make_batch(
    values: list[bytes],
    *,
    base_ts: int = 1_000,
    ts_deltas: list[int] | None = None,
    base_offset: int = 0,
    ple: int = -1,
    attributes: int = 0,
    compress=None,
) -> bytes:
    """A valid magic-v2 batch; ``compress`` (bytes -> bytes) wraps the record section."""
    deltas = ts_deltas if ts_deltas is not None else [0] * len(values)
    recs = bytearray()
    for i, v in enumerate(values):
        body = b"\x00" + _zz(deltas[i]) + _zz(i) + _zz(-1) + _zz(len(v)) + v + _zz(0)
        recs += _zz(len(body)) + body
    payload = compress(bytes(recs)) if compress else bytes(recs)
    max_ts = base_ts + max(deltas) if base_ts >= 0 else -1
    after_crc = struct.pack(">hiqqqhii", attributes, len(values) - 1, base_ts, max_ts, -1, -1, -1, len(values))
    after_crc += payload
    batch_length = 4 + 1 + 4 + len(after_crc)
    return struct.pack(">qiibI", base_offset, batch_length, ple, 2, crc32c.crc32c(after_crc)) + after_crc


def headers_of(buf: bytes) -> list:
    out, pos = [], 0
    while pos < len(buf):
        h = parse_batch_header(buf, pos)
        out.append(h)
        pos += h.size
    return out


def batches(buf: bytes | memoryview) -> list:
    return headers_of(bytes(buf))


def append(log: Log, *batch_list: bytes, epoch: int = 0, now_ms: int = 0):
    data = b"".join(batch_list)
    return log.append_as_leader(data, headers_of(data), leader_epoch=epoch, now_ms=now_ms)


def records(n: int, size: int = 10) -> list[bytes]:
    return [bytes([65 + i % 26]) * size for i in range(n)]


def small_config(**kw) -> LogConfig:
    return LogConfig(**kw)


@pytest.fixture
def pdir(tmp_path):
    return str(tmp_path / "orders-0")


def reopen(log: Log, config: LogConfig | None = None, **kw) -> Log:
    log.close()
    return Log(log.dir, config or log.config, **kw)


# -- offsets and reads ----------------------------------------------------------------------


def test_offsets_assigned_and_batches_rewritten(pdir):
    log = Log(pdir, LogConfig())
    info = append(log, make_batch(records(2)), make_batch(records(3)), make_batch(records(1)), epoch=7)
    assert (info.first_offset, info.last_offset) == (0, 5)
    assert info.log_append_time == -1 and info.log_start_offset == 0
    assert info.num_batches == 3 and info.num_records == 6
    info2 = append(log, make_batch(records(4)), epoch=7)
    assert (info2.first_offset, info2.last_offset) == (6, 9)
    assert log.log_end_offset == 10
    got = batches(log.read(0, 1 << 20).records)
    assert [h.base_offset for h in got] == [0, 2, 5, 6]
    assert all(h.partition_leader_epoch == 7 for h in got)
    # The CRC does not cover base offset / epoch, so the rewritten batches stay valid.
    data = bytes(log.read(0, 1 << 20).records)
    pos = 0
    for h in got:
        assert crc32c.crc32c(data[pos + 21 : pos + h.size]) == h.crc
        pos += h.size


def test_append_modifies_bytearray_in_place_and_log_append_time(pdir):
    log = Log(pdir, LogConfig())
    buf = bytearray(make_batch(records(2)))
    info = log.append_as_leader(buf, headers_of(bytes(buf)), leader_epoch=3, now_ms=5555, log_append_time=True)
    assert info.log_append_time == 5555
    assert parse_batch_header(buf).partition_leader_epoch == 3
    assert info.max_timestamp == 5555


def test_read_from_inside_a_batch_returns_whole_batch(pdir):
    log = Log(pdir, LogConfig())
    append(log, make_batch(records(3)), make_batch(records(5)), make_batch(records(2)))
    got = batches(log.read(5, 1 << 20).records)
    assert [h.base_offset for h in got] == [3, 8]
    got = batches(log.read(9, 1 << 20).records)
    assert [h.base_offset for h in got] == [8]


def test_kip74_min_one_batch_and_max_bytes(pdir):
    log = Log(pdir, LogConfig())
    big = make_batch(records(5, size=500))
    small = make_batch(records(1))
    append(log, big, small, small)
    res = log.read(0, 100)
    assert len(res.records) == len(big)  # first batch despite max_bytes
    res = log.read(0, 100, min_one_batch=False)
    assert len(res.records) == 0
    # Never a partial batch: stop before exceeding max_bytes.
    res = log.read(0, len(big) + len(small) + 5)
    assert len(res.records) == len(big) + len(small)
    res = log.read(0, len(big) + 2 * len(small))
    assert len(res.records) == len(big) + 2 * len(small)


def test_max_offset_is_exclusive_bound(pdir):
    log = Log(pdir, LogConfig())
    append(log, make_batch(records(2)), make_batch(records(2)), make_batch(records(2)))
    got = batches(log.read(0, 1 << 20, max_offset=4).records)
    assert [h.base_offset for h in got] == [0, 2]
    assert len(log.read(4, 1 << 20, max_offset=4).records) == 0
    assert len(log.read(5, 1 << 20, max_offset=4).records) == 0
    log.high_watermark = 2
    res = log.read(0, 1 << 20, max_offset=log.high_watermark)
    assert [h.base_offset for h in batches(res.records)] == [0]
    assert log.high_watermark == 2 and log.log_end_offset == 6


def test_out_of_range(pdir):
    log = Log(pdir, LogConfig())
    append(log, make_batch(records(3)))
    with pytest.raises(ApiError) as e:
        log.read(4, 100)
    assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    with pytest.raises(ApiError):
        log.read(-1, 100)
    res = log.read(3, 100)
    assert len(res.records) == 0 and res.fetch_offset_metadata is None  # at the end: no position looked up


def test_high_watermark_is_clamped(pdir):
    log = Log(pdir, LogConfig())
    append(log, make_batch(records(3)))
    log.high_watermark = 99
    assert log.high_watermark == 3
    log.high_watermark = -5
    assert log.high_watermark == 0


def test_message_too_large_and_record_list_too_large(pdir):
    log = Log(pdir, LogConfig(max_message_bytes=200, segment_bytes=300))
    with pytest.raises(ApiError) as e:
        append(log, make_batch(records(1, size=300)))
    assert e.value.code == ErrorCode.MESSAGE_TOO_LARGE
    b = make_batch(records(1, size=50))
    with pytest.raises(ApiError) as e:
        append(log, b, b, b, b)
    assert e.value.code == ErrorCode.RECORD_LIST_TOO_LARGE
    assert log.log_end_offset == 0


# -- segments, indexes, rolling ------------------------------------------------------------


def test_roll_by_size_and_kafka_file_names(pdir):
    b = make_batch(records(4, size=100))
    log = Log(pdir, LogConfig(segment_bytes=len(b) * 3))
    for _ in range(10):
        append(log, b)
    bases = log.segment_base_offsets()
    assert bases == [0, 12, 24, 36]
    names = sorted(os.listdir(pdir))
    for base in bases:
        for suffix in (".log", ".index", ".timeindex"):
            assert f"{base:020d}{suffix}" in names
    assert os.path.getsize(os.path.join(pdir, f"{0:020d}.log")) == 3 * len(b)
    # Reads cross segment boundaries correctly.
    for off in range(40):
        first = batches(log.read(off, 1 << 20).records)[0]
        assert first.base_offset <= off <= first.last_offset


def test_internal_segment_bytes_rolls_below_the_segment_bytes_bound(pdir):
    b = make_batch(records(4, size=100))
    cfg = LogConfig.from_props({"segment.bytes": "1048576", "internal.segment.bytes": str(len(b) * 3)})
    log = Log(pdir, cfg)
    for _ in range(10):
        append(log, b)
    assert log.segment_base_offsets() == [0, 12, 24, 36]  # as segment.bytes would, were it allowed so small


def test_read_stops_at_segment_end_and_continues(pdir):
    b = make_batch(records(2))
    log = Log(pdir, LogConfig(segment_bytes=len(b) * 2))
    for _ in range(6):
        append(log, b)
    offsets = []
    off = 0
    while off < log.log_end_offset:
        got = batches(log.read(off, 1 << 20).records)
        offsets += [h.base_offset for h in got]
        off = got[-1].last_offset + 1
    assert offsets == [0, 2, 4, 6, 8, 10]


def test_roll_by_time_uses_record_timestamps(pdir):
    log = Log(pdir, LogConfig(segment_ms=1000))
    append(log, make_batch(records(1), base_ts=10_000), now_ms=0)
    append(log, make_batch(records(1), base_ts=10_500), now_ms=0)
    assert log.segment_base_offsets() == [0]
    info = append(log, make_batch(records(1), base_ts=11_001), now_ms=0)
    assert info.rolled
    assert log.segment_base_offsets() == [0, 2]


def test_roll_by_time_without_timestamps_uses_wall_clock(pdir):
    now = [1_000_000]
    log = Log(pdir, LogConfig(segment_ms=1000), time_ms=lambda: now[0])
    append(log, make_batch(records(1), base_ts=-1), now_ms=now[0])
    now[0] += 500
    append(log, make_batch(records(1), base_ts=-1), now_ms=now[0])
    assert log.segment_base_offsets() == [0]
    now[0] += 600
    append(log, make_batch(records(1), base_ts=-1), now_ms=now[0])
    assert log.segment_base_offsets() == [0, 2]


def test_roll_when_index_full(pdir):
    # 24 bytes hold 3 offset entries / 2 time entries; an entry per batch.
    log = Log(pdir, LogConfig(segment_index_bytes=24, index_interval_bytes=0))
    for i in range(8):
        append(log, make_batch(records(1), base_ts=1000 + i))
    assert len(log.segment_base_offsets()) > 1
    for off in range(8):
        assert batches(log.read(off, 1 << 20).records)[0].base_offset == off


def test_offset_index_entries_match_log(pdir):
    log = Log(pdir, LogConfig(index_interval_bytes=200))
    sizes = [1, 7, 3, 12, 2, 9, 1, 4, 6, 2] * 5
    for n in sizes:
        append(log, make_batch(records(n, size=20)))
    log.flush()
    with open(os.path.join(pdir, f"{0:020d}.index"), "rb") as f:
        idx = f.read()
    assert idx and len(idx) % 8 == 0
    with open(os.path.join(pdir, f"{0:020d}.log"), "rb") as f:
        data = f.read()
    prev = (0, 0)
    for rel, pos in struct.iter_unpack(">ii", idx):
        assert (rel, pos) > prev
        prev = (rel, pos)
        # Kafka's rule: the entry's offset lives in the batch at that position.
        h = parse_batch_header(data, pos)
        assert h.base_offset <= rel <= h.last_offset
    for off in range(log.log_end_offset):
        first = batches(log.read(off, 1 << 20).records)[0]
        assert first.base_offset <= off <= first.last_offset


def test_time_index_lookup_is_record_level(pdir):
    log = Log(pdir, LogConfig(index_interval_bytes=0))
    append(log, make_batch(records(3), base_ts=1000, ts_deltas=[0, 10, 20]))  # 0..2
    append(log, make_batch(records(3), base_ts=2000, ts_deltas=[0, 5, 50]))  # 3..5
    append(log, make_batch(records(2), base_ts=3000, ts_deltas=[0, 1]))  # 6..7
    assert log.fetch_offset_by_timestamp(0) == (0, 1000)
    assert log.fetch_offset_by_timestamp(1005) == (1, 1010)
    assert log.fetch_offset_by_timestamp(1020) == (2, 1020)
    assert log.fetch_offset_by_timestamp(1021) == (3, 2000)
    assert log.fetch_offset_by_timestamp(2006) == (5, 2050)
    assert log.fetch_offset_by_timestamp(3001) == (7, 3001)
    assert log.fetch_offset_by_timestamp(3002) is None
    log.flush()  # the entries reach the file at a flush
    with open(os.path.join(pdir, f"{0:020d}.timeindex"), "rb") as f:
        entries = list(struct.iter_unpack(">qi", f.read()))
    assert entries and all(a[0] < b[0] for a, b in zip(entries, entries[1:]))


def test_time_lookup_across_segments_and_max_timestamp(pdir):
    b = make_batch(records(2), base_ts=0)
    log = Log(pdir, LogConfig(segment_bytes=len(b) * 2))
    ts = [100, 200, 900, 300, 400, 500]  # offset 4..5 holds the max
    for t in ts:
        append(log, make_batch(records(2), base_ts=t, ts_deltas=[0, 1]))
    assert len(log.segment_base_offsets()) == 3
    assert log.fetch_offset_by_timestamp(250) == (4, 900)
    assert log.fetch_offset_by_timestamp(450) == (4, 900)
    assert log.fetch_offset_by_timestamp(902) is None
    assert log.max_timestamp_offset() == (5, 901)


def test_max_timestamp_offset_is_first_record_with_max(pdir):
    log = Log(pdir, LogConfig())
    assert log.max_timestamp_offset() == (-1, -1)
    append(log, make_batch(records(4), base_ts=100, ts_deltas=[0, 50, 50, 10]))
    assert log.max_timestamp_offset() == (1, 150)


def test_timestamp_lookup_in_compressed_batch(pdir):
    log = Log(pdir, LogConfig())
    append(log, make_batch(records(3), base_ts=500, ts_deltas=[0, 7, 9], attributes=1, compress=gzip.compress))
    assert log.fetch_offset_by_timestamp(505) == (1, 507)


def test_timestamp_lookup_undecodable_falls_back_to_batch(pdir, monkeypatch):
    from rivulet.protocol import records as rec

    def broken(codec, data, max_size=None):
        raise ApiError(ErrorCode.CORRUPT_MESSAGE)

    monkeypatch.setattr(rec, "decompress", broken)  # e.g. a codec whose library is missing
    log = Log(pdir, LogConfig())
    append(log, make_batch(records(1), base_ts=100))
    append(log, make_batch(records(3), base_ts=500, ts_deltas=[0, 7, 9], attributes=1, compress=gzip.compress))
    assert log.fetch_offset_by_timestamp(505) == (1, 509)


# -- follower appends, truncation, epochs ---------------------------------------------------


def test_append_as_follower_keeps_offsets_and_epochs(pdir):
    log = Log(pdir, LogConfig())
    data = make_batch(records(2), base_offset=0, ple=1) + make_batch(records(3), base_offset=2, ple=3)
    info = log.append_as_follower(data, headers_of(data))
    assert (info.first_offset, info.last_offset) == (0, 4)
    assert log.epoch_entries() == [(1, 0), (3, 2)]
    with pytest.raises(UnexpectedAppendOffsetError):
        d2 = make_batch(records(1), base_offset=3, ple=3)
        log.append_as_follower(d2, headers_of(d2))
    d3 = make_batch(records(1), base_offset=10, ple=3)  # gaps are allowed (compaction)
    log.append_as_follower(d3, headers_of(d3))
    assert log.log_end_offset == 11
    assert batches(log.read(6, 1000).records)[0].base_offset == 10


def test_truncate_to(pdir):
    b = make_batch(records(2))
    log = Log(pdir, LogConfig(segment_bytes=len(b) * 2))
    for e in range(6):
        append(log, b, epoch=e)
    log.high_watermark = 12
    assert log.segment_base_offsets() == [0, 4, 8]
    log.flush()
    assert log.truncate_to(6)
    assert log.log_end_offset == 6
    assert log.segment_base_offsets() == [0, 4]
    assert log.high_watermark == 6 and log.recovery_point == 6
    assert log.epoch_entries() == [(0, 0), (1, 2), (2, 4)]
    assert not log.truncate_to(6)
    assert append(log, b, epoch=9).first_offset == 6
    assert [h.base_offset for h in batches(log.read(4, 1 << 20).records)] == [4, 6]
    assert not os.path.exists(os.path.join(pdir, f"{8:020d}.log"))
    # The truncated segment is sound after a restart.
    log = reopen(log)
    assert log.log_end_offset == 8
    assert [h.base_offset for h in batches(log.read(0, 1 << 20).records)] == [0, 2]


def test_truncate_fully_and_start_at(pdir):
    log = Log(pdir, LogConfig())
    append(log, make_batch(records(5)), epoch=2)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (100, 100, 100)
    assert log.epoch_entries() == []
    assert log.segment_base_offsets() == [100]
    assert append(log, make_batch(records(1)), epoch=4).first_offset == 100
    with pytest.raises(ApiError):
        log.read(50, 100)
    assert log.truncate_to(50)  # below the first segment: starts afresh there
    assert log.log_end_offset == 50 and log.segment_base_offsets() == [50]


def test_leader_epoch_cache(pdir):
    log = Log(pdir, LogConfig())
    assert log.latest_epoch is None
    assert log.end_offset_for_epoch(0) == (-1, -1)
    append(log, make_batch(records(3)), epoch=1)  # 0..2
    append(log, make_batch(records(2)), epoch=1)  # 3..4
    append(log, make_batch(records(4)), epoch=3)  # 5..8
    append(log, make_batch(records(1)), epoch=5)  # 9
    assert log.epoch_entries() == [(1, 0), (3, 5), (5, 9)]
    assert log.latest_epoch == 5
    assert log.end_offset_for_epoch(5) == (5, 10)  # latest: the LEO
    assert log.end_offset_for_epoch(3) == (3, 9)
    assert log.end_offset_for_epoch(2) == (1, 5)  # unknown in between: floor epoch
    assert log.end_offset_for_epoch(0) == (0, 0)  # older than all: starts of history
    assert log.end_offset_for_epoch(6) == (-1, -1)
    assert log.end_offset_for_epoch(-1) == (-1, -1)
    assert log.epoch_for_offset(6) == 3
    with open(os.path.join(pdir, "leader-epoch-checkpoint")) as f:
        assert f.read() == "0\n3\n1 0\n3 5\n5 9\n"
    # A new epoch whose start overlaps later entries replaces them.
    log.assign_epoch(4, 7)
    assert log.epoch_entries() == [(1, 0), (3, 5), (4, 7)]
    assert read_epoch_checkpoint(os.path.join(pdir, "leader-epoch-checkpoint")) == [(1, 0), (3, 5), (4, 7)]
    log = reopen(log, recovery_point=log.log_end_offset, had_clean_shutdown=True)
    assert log.epoch_entries() == [(1, 0), (3, 5), (4, 7)]
    # Recovery re-learns newer epochs from the batches themselves.
    log = reopen(log, recovery_point=0)
    assert log.epoch_entries() == [(1, 0), (3, 5), (4, 7), (5, 9)]


# -- log start, delete records, retention --------------------------------------------------


def test_delete_records(pdir):
    b = make_batch(records(2))
    log = Log(pdir, LogConfig(segment_bytes=len(b) * 2))
    for e in range(5):
        append(log, b, epoch=e)
    log.high_watermark = 6
    with pytest.raises(ApiError) as exc:
        log.delete_records_before(7)
    assert exc.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert log.delete_records_before(5) == 5
    assert log.log_start_offset == 5
    assert log.segment_base_offsets() == [4, 8]  # whole segments below 5 are gone
    assert not os.path.exists(os.path.join(pdir, f"{0:020d}.log"))
    assert log.epoch_entries()[0] == (2, 5)
    with pytest.raises(ApiError):
        log.read(4, 100)
    assert batches(log.read(5, 100).records)[0].base_offset == 4  # whole batch; client filters
    assert log.delete_records_before(-1) == 6  # -1 = high watermark
    assert not log.maybe_increment_log_start_offset(3)  # never moves backwards
    log = reopen(log, log_start_offset=6)
    assert log.log_start_offset == 6


def test_retention_by_time(pdir):
    b_size = len(make_batch(records(1), base_ts=0))
    log = Log(pdir, LogConfig(segment_bytes=b_size * 2, retention_ms=1000))
    for t in (0, 100, 1000, 1100, 5000):
        append(log, make_batch(records(1), base_ts=t))
    assert log.segment_base_offsets() == [0, 2, 4]
    log.high_watermark = log.log_end_offset
    assert log.delete_retention_segments(now_ms=2050) == 1  # only [0,2) ended more than 1 s ago
    assert log.segment_base_offsets() == [2, 4]
    assert log.log_start_offset == 2
    # Everything expired: the active segment is rolled first so it can go too.
    assert log.delete_retention_segments(now_ms=100_000) == 2
    assert log.segment_base_offsets() == [5]
    assert (log.log_start_offset, log.log_end_offset, log.size_in_bytes) == (5, 5, 0)
    assert append(log, make_batch(records(1), base_ts=100_000)).first_offset == 5


def test_retention_respects_high_watermark(pdir):
    b = make_batch(records(1), base_ts=0)
    log = Log(pdir, LogConfig(segment_bytes=len(b) * 2, retention_ms=10))
    for _ in range(6):
        append(log, b)
    log.high_watermark = 3
    assert log.delete_retention_segments(now_ms=1_000_000) == 1  # [0,2) only; [2,4) holds the HW
    assert log.log_start_offset == 2


def test_retention_by_bytes(pdir):
    b = make_batch(records(1, size=100))
    log = Log(pdir, LogConfig(segment_bytes=len(b) * 2, retention_bytes=len(b) * 3))
    for _ in range(8):
        append(log, b)
    log.high_watermark = log.log_end_offset
    assert log.size_in_bytes == 8 * len(b)
    # Delete oldest segments while the rest stays above the limit.
    assert log.delete_retention_segments(now_ms=0) == 2
    assert log.segment_base_offsets() == [4, 6]
    assert log.size_in_bytes == 4 * len(b)
    assert log.log_start_offset == 4


def test_compact_only_policy_skips_retention(pdir):
    b = make_batch(records(1), base_ts=0)
    log = Log(pdir, LogConfig(segment_bytes=len(b), retention_ms=1, cleanup_policy=("compact",)))
    for _ in range(3):
        append(log, b)
    log.high_watermark = 3
    assert log.delete_retention_segments(now_ms=10**9) == 0


# -- recovery -----------------------------------------------------------------------------


def _fill(log: Log, n: int, per: int = 3) -> None:
    for i in range(n):
        append(log, make_batch(records(per), base_ts=1000 + i), epoch=1)


def test_recovery_truncates_torn_tail(pdir):
    log = Log(pdir, LogConfig())
    _fill(log, 5)
    size = log.size_in_bytes
    log.close()
    partial = make_batch(records(3))[:40]
    with open(os.path.join(pdir, f"{0:020d}.log"), "ab") as f:
        f.write(partial)
    log = Log(pdir, LogConfig(), recovery_point=0)
    assert log.log_end_offset == 15
    assert os.path.getsize(os.path.join(pdir, f"{0:020d}.log")) == size
    assert append(log, make_batch(records(1))).first_offset == 15
    assert len(batches(log.read(0, 1 << 20).records)) == 6


def test_recovery_truncates_garbage_and_corrupt_crc(pdir):
    log = Log(pdir, LogConfig())
    _fill(log, 4)
    log.close()
    path = os.path.join(pdir, f"{0:020d}.log")
    with open(path, "ab") as f:
        f.write(os.urandom(500))
    log = Log(pdir, LogConfig())
    assert log.log_end_offset == 12
    log.close()
    # Flip a byte inside the third batch's records: CRC fails, it and later batches go.
    third = 2 * len(make_batch(records(3)))
    with open(path, "r+b") as f:
        f.seek(third + 70)
        byte = f.read(1)
        f.seek(third + 70)
        f.write(bytes([byte[0] ^ 0xFF]))
    log = Log(pdir, LogConfig())
    assert log.log_end_offset == 6


def test_recovery_deletes_segments_after_corruption(pdir):
    b = make_batch(records(2), base_ts=1000)
    log = Log(pdir, LogConfig(segment_bytes=len(b) * 2))
    for _ in range(6):
        append(log, b)
    log.close()
    with open(os.path.join(pdir, f"{4:020d}.log"), "r+b") as f:
        f.truncate(len(b) + 10)
    log = Log(pdir, LogConfig(segment_bytes=len(b) * 2), recovery_point=2)
    assert log.segment_base_offsets() == [0, 4]
    assert log.log_end_offset == 6
    assert not os.path.exists(os.path.join(pdir, f"{8:020d}.log"))


def test_clean_load_skips_recovery_of_flushed_segments(pdir):
    b = make_batch(records(2))
    log = Log(pdir, LogConfig(segment_bytes=len(b) * 2))
    for _ in range(5):
        append(log, b)
    log.flush()
    rp = log.recovery_point
    assert rp == 10
    log.close()
    log = Log(pdir, LogConfig(segment_bytes=len(b) * 2), recovery_point=rp, had_clean_shutdown=True)
    assert log.log_end_offset == 10 and log.recovery_point == 10
    assert [h.base_offset for h in batches(log.read(8, 1000).records)] == [8]


@pytest.mark.parametrize("damage", ["delete", "garbage", "nonmonotonic", "beyond_log"])
def test_indexes_rebuilt_when_missing_or_corrupt(pdir, damage):
    cfg = LogConfig(index_interval_bytes=50, segment_bytes=2000)
    log = Log(pdir, cfg)
    for i in range(40):
        append(log, make_batch(records(2), base_ts=1000 + 10 * i, ts_deltas=[0, 5]))
    assert len(log.segment_base_offsets()) > 1
    expected = bytes(log.read(0, 1 << 20).records)
    log.flush()
    leo = log.log_end_offset
    log.close()
    idx = os.path.join(pdir, f"{0:020d}.index")
    tidx = os.path.join(pdir, f"{0:020d}.timeindex")
    original = open(idx, "rb").read()
    if damage == "delete":
        os.unlink(idx)
        os.unlink(tidx)
    elif damage == "garbage":
        with open(idx, "ab") as f:
            f.write(b"\x01\x02\x03")
        with open(tidx, "wb") as f:
            f.write(os.urandom(17))
    elif damage == "nonmonotonic":
        entries = list(struct.iter_unpack(">ii", original))
        entries[1], entries[2] = entries[2], entries[1]
        with open(idx, "wb") as f:
            f.write(b"".join(struct.pack(">ii", *e) for e in entries))
    else:
        with open(idx, "ab") as f:
            f.write(struct.pack(">ii", 10_000, 10**9))
    log = Log(pdir, cfg, recovery_point=leo, had_clean_shutdown=True)
    assert bytes(log.read(0, 1 << 20).records) == expected
    for off in range(leo):
        first = batches(log.read(off, 1 << 20).records)[0]
        assert first.base_offset <= off <= first.last_offset
    assert log.fetch_offset_by_timestamp(1000 + 10 * 7 + 3) == (15, 1075)
    assert open(idx, "rb").read() == original  # rebuilt identically


def test_stray_files_handled(pdir):
    log = Log(pdir, LogConfig())
    _fill(log, 3)
    log.close()
    open(os.path.join(pdir, f"{5:020d}.log.deleted"), "wb").write(b"x")
    open(os.path.join(pdir, f"{7:020d}.index.deleted"), "wb").write(b"x")
    open(os.path.join(pdir, f"{9:020d}.index"), "wb").write(b"")  # orphan index
    open(os.path.join(pdir, "leader-epoch-checkpoint.tmp"), "wb").write(b"junk")
    log = Log(pdir, LogConfig())
    names = os.listdir(pdir)
    assert not [n for n in names if n.endswith((".deleted", ".tmp"))]
    assert f"{9:020d}.index" not in names
    assert log.log_end_offset == 9


def test_swap_file_completes_interrupted_compaction(pdir):
    b = make_batch(records(2))
    log = Log(pdir, LogConfig(segment_bytes=len(b) * 2))
    for _ in range(6):
        append(log, b)
    log.close()
    # A "compacted" replacement for segments 0 and 4: their batches in one file.
    with open(os.path.join(pdir, f"{0:020d}.log"), "rb") as f:
        data = f.read()
    with open(os.path.join(pdir, f"{4:020d}.log"), "rb") as f:
        data += f.read()
    with open(os.path.join(pdir, f"{0:020d}.log.swap"), "wb") as f:
        f.write(data)
    log = Log(pdir, LogConfig(segment_bytes=len(b) * 2))
    assert log.segment_base_offsets() == [0, 8]
    assert log.log_end_offset == 12
    assert [h.base_offset for h in batches(log.read(0, 1 << 20).records)] == [0, 2, 4, 6]
    # An incomplete swap (newer than a .cleaned file) is discarded instead.
    log.close()
    open(os.path.join(pdir, f"{0:020d}.log.cleaned"), "wb").write(b"")
    open(os.path.join(pdir, f"{8:020d}.log.swap"), "wb").write(b"garbage")
    log = Log(pdir, LogConfig(segment_bytes=len(b) * 2))
    assert log.segment_base_offsets() == [0, 8]
    assert not [n for n in os.listdir(pdir) if n.endswith((".swap", ".cleaned"))]


# -- flush policy and concurrency -------------------------------------------------------


def test_flush_messages_one_makes_every_append_durable(pdir):
    log = Log(pdir, LogConfig(flush_messages=1))
    for i in range(5):
        info = append(log, make_batch(records(2)))
        assert info.flush_needed
        assert log.flush()
        assert log.recovery_point == log.log_end_offset == 2 * (i + 1)
    assert not log.flush()  # nothing left to sync
    # Durable data survives an unclean restart from the recovery point untouched.
    rp = log.recovery_point
    log = reopen(log, recovery_point=rp)
    assert log.log_end_offset == 10


def test_flush_messages_threshold(pdir):
    log = Log(pdir, LogConfig(flush_messages=5))
    assert not append(log, make_batch(records(2))).flush_needed
    assert not append(log, make_batch(records(2))).flush_needed
    assert append(log, make_batch(records(2))).flush_needed
    log.flush()
    assert not append(log, make_batch(records(1))).flush_needed


def test_default_policy_never_asks_for_flush_and_flush_up_to(pdir):
    b = make_batch(records(2))
    log = Log(pdir, LogConfig(segment_bytes=len(b) * 2))
    infos = [append(log, b) for _ in range(3)]
    assert not any(i.flush_needed for i in infos)
    assert infos[2].rolled
    log.flush(infos[2].first_offset)  # what the broker does after a roll
    assert log.recovery_point == 4
    log.flush()
    assert log.recovery_point == 6


def test_flush_in_worker_thread_while_appending(pdir):
    b = make_batch(records(4, size=200))
    log = Log(pdir, LogConfig(segment_bytes=len(b) * 8, flush_messages=1))
    stop = threading.Event()
    errors: list[BaseException] = []

    def flusher():
        try:
            while not stop.is_set():
                log.flush()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    t = threading.Thread(target=flusher)
    t.start()
    try:
        for i in range(300):
            append(log, b)
            if i % 50 == 49:
                log.high_watermark = log.log_end_offset
                log.delete_records_before(log.log_end_offset - 4)
    finally:
        stop.set()
        t.join()
    assert not errors
    log.flush()
    assert log.recovery_point == log.log_end_offset == 1200
    assert len(log.segment_base_offsets()) <= 2


def test_close_while_flush_pinned_defers_fd_close(pdir):
    log = Log(pdir, LogConfig())
    append(log, make_batch(records(2)))
    seg = log.active_segment
    seg.pin()  # as an in-flight flush would
    log.delete()
    assert not seg.closed and not os.path.exists(pdir)
    seg.sync()  # still safe: descriptors are open until unpinned
    seg.unpin()
    assert seg.closed


def test_closed_log_rejects_appends(pdir):
    log = Log(pdir, LogConfig())
    log.close()
    with pytest.raises(ApiError) as e:
        append(log, make_batch(records(1)))
    assert e.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert not log.flush()


def test_clean_restart_keeps_timestamps_of_unindexed_tail(pdir):
    cfg = LogConfig(index_interval_bytes=1 << 20)  # no time-index entries while appending
    log = Log(pdir, cfg)
    for t in (100, 300, 200):
        append(log, make_batch(records(2), base_ts=t, ts_deltas=[0, 1]))
    log.flush()
    log = reopen(log, recovery_point=log.log_end_offset, had_clean_shutdown=True)
    assert log.max_timestamp_offset() == (3, 301)
    assert log.fetch_offset_by_timestamp(250) == (2, 300)
    # Time-based rolling still measures from the first batch's timestamp.
    log.update_config(LogConfig(segment_ms=1000))
    assert not append(log, make_batch(records(1), base_ts=1101)).rolled  # exactly segment.ms: not yet
    assert append(log, make_batch(records(1), base_ts=1102)).rolled


def test_retention_falls_back_to_file_mtime_without_timestamps(pdir):
    b = make_batch(records(1), base_ts=-1)
    log = Log(pdir, LogConfig(segment_bytes=len(b), retention_ms=60_000))
    for _ in range(3):
        append(log, b)
    log.high_watermark = log.log_end_offset
    old = 1_000_000.0  # seconds since the epoch
    os.utime(os.path.join(pdir, f"{0:020d}.log"), (old, old))
    now_ms = int(old * 1000) + 120_000
    assert log.delete_retention_segments(now_ms) == 1
    assert log.segment_base_offsets() == [1, 2]


def test_read_with_zero_max_bytes(pdir):
    log = Log(pdir, LogConfig())
    append(log, make_batch(records(2)), make_batch(records(2)))
    assert [h.base_offset for h in batches(log.read(0, 0).records)] == [0]
    assert len(log.read(0, 0, min_one_batch=False).records) == 0


def test_timestamp_lookup_with_real_codecs(pdir):
    compression = pytest.importorskip("rivulet.protocol.compression")
    log = Log(pdir, LogConfig())
    for codec, base_ts in ((1, 100), (4, 200), (3, 300)):  # gzip, zstd, lz4
        append(
            log,
            make_batch(
                records(3),
                base_ts=base_ts,
                ts_deltas=[0, 4, 8],
                attributes=codec,
                compress=lambda data, c=codec: compression.compress(c, data),
            ),
        )
    assert log.fetch_offset_by_timestamp(103) == (1, 104)
    assert log.fetch_offset_by_timestamp(205) == (5, 208)
    assert log.fetch_offset_by_timestamp(301) == (7, 304)
    assert log.max_timestamp_offset() == (8, 308)
