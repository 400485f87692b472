"""A storage I/O error takes its log directory offline (Kafka's LogDirFailureChannel),
driven through the fault-injection seam of rivulet.storage.log_dir_failure."""

from __future__ import annotations

import errno
import os

import pytest

from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.storage import LogConfig, LogManager
from rivulet.storage import log_dir_failure
from rivulet.storage.log_dir_failure import FaultyFileOps, KafkaStorageError
from tests.unit.test_storage_manager import append, make_batch

pytestmark = pytest.mark.fast


@pytest.fixture
def faults():
    ops = FaultyFileOps()
    ops.armed = False
    previous = log_dir_failure.install(ops)
    yield ops
    log_dir_failure.install(previous)


def _manager(tmp_path, n_dirs: int = 2) -> LogManager:
    dirs = [str(tmp_path / f"d{i}") for i in range(n_dirs)]
    m = LogManager(dirs, LogConfig())
    m.startup()
    return m


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EIO, errno.EROFS, errno.EDQUOT])
def test_write_error_takes_the_dir_offline_and_others_keep_serving(tmp_path, faults, err):
    m = _manager(tmp_path)
    a = m.create_log("a", 0)
    b = m.create_log("b", 0)
    assert os.path.dirname(a.dir) != os.path.dirname(b.dir)
    append(a, make_batch(2))
    append(b, make_batch(2))
    faults.err, faults.armed = err, True
    with pytest.raises(KafkaStorageError) as e:
        append(a, make_batch(2))
    assert e.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    faults.armed = False
    assert m.failure_channel.is_offline(os.path.dirname(a.dir))
    assert a.offline and not b.offline
    # Nothing more is appended or read there, even with the disk back.
    with pytest.raises(ApiError) as e:
        append(a, make_batch(1))
    assert e.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    with pytest.raises(ApiError):
        a.read(0, 1 << 20)
    assert append(b, make_batch(1)).first_offset == 2
    # New logs go to the dir still online.
    c = m.create_log("c", 0)
    assert os.path.dirname(c.dir) == os.path.dirname(b.dir)
    offline = m.shutdown()
    assert list(offline) == [os.path.dirname(a.dir)]


def test_torn_write_is_cut_and_recovery_keeps_every_acknowledged_batch(tmp_path, faults):
    m = _manager(tmp_path, 1)
    lg = m.create_log("t", 0)
    for _ in range(3):
        append(lg, make_batch(2))
    seg_path = os.path.join(lg.dir, "00000000000000000000.log")
    good = os.path.getsize(seg_path)
    faults.short_write, faults.armed = 10, True
    with pytest.raises(KafkaStorageError):
        append(lg, make_batch(2))
    faults.armed = False
    assert os.path.getsize(seg_path) == good  # the torn tail is gone at once
    assert m.shutdown()  # the dir is reported offline; no clean-shutdown marker
    m2 = _manager(tmp_path, 1)
    assert not m2.had_clean_shutdown[str(tmp_path / "d0")]
    lg2 = m2.get_log("t", 0)
    assert lg2.log_end_offset == 6
    assert append(lg2, make_batch(1)).first_offset == 6
    m2.shutdown()


def test_torn_tail_left_on_disk_is_truncated_at_recovery(tmp_path, faults):
    m = _manager(tmp_path, 1)
    lg = m.create_log("t", 0)
    append(lg, make_batch(2))
    seg_path = os.path.join(lg.dir, "00000000000000000000.log")
    m.shutdown()
    with open(seg_path, "ab") as f:  # a torn batch that could not be cut before the crash
        f.write(make_batch(3)[:25])
    m2 = _manager(tmp_path, 1)
    assert m2.get_log("t", 0).log_end_offset == 2
    m2.shutdown()


def test_failed_fsync_takes_the_dir_offline(tmp_path, faults):
    m = _manager(tmp_path, 1)
    lg = m.create_log("t", 0)
    append(lg, make_batch(2))
    faults.fail_fsync, faults.err, faults.armed = True, errno.EIO, True
    with pytest.raises(KafkaStorageError):
        lg.flush()
    assert lg.offline
    faults.armed = False
    m.shutdown()


def test_file_fsyncs_go_through_the_seam_and_a_file_gone_needs_none(tmp_path, faults):
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(b"x")
    faults.fail_fsync, faults.err, faults.armed = True, errno.EIO, True
    with pytest.raises(OSError):
        log_dir_failure.sync_file(str(path))
    log_dir_failure.sync_file(str(tmp_path / "deleted.snapshot"))
    assert faults.failures == 1


def test_checkpoint_failure_takes_the_dir_offline(tmp_path, monkeypatch):
    m = _manager(tmp_path, 1)
    m.create_log("t", 0)

    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("rivulet.storage.manager.write_offset_checkpoint", full)
    m.checkpoint()
    assert m.failure_channel.is_offline(str(tmp_path / "d0"))
    assert m.get_log("t", 0).offline
    with pytest.raises(KafkaStorageError):
        m.create_log("u", 0)
    m.shutdown()


@pytest.mark.parametrize("version", [0, 4])
def test_describe_log_dirs_reports_the_offline_dir(tmp_path, faults, version):
    from rivulet.protocol.messages.describe_log_dirs_request import DescribableLogDirTopic, DescribeLogDirsRequest
    from rivulet.protocol.messages.describe_log_dirs_response import DescribeLogDirsResponse
    from rivulet.server.handlers.log_dirs import LogDirHandlers

    m = _manager(tmp_path)
    a = m.create_log("a", 0)
    b = m.create_log("b", 0)
    append(b, make_batch(2))
    faults.armed = True
    with pytest.raises(KafkaStorageError):
        append(a, make_batch(1))
    faults.armed = False
    handle = LogDirHandlers(m).handlers()[35]
    resp = handle(None, DescribeLogDirsRequest(topics=None), None)
    resp = DescribeLogDirsResponse.decode(memoryview(resp.encode(version)), version)
    by_dir = {r.log_dir: r for r in resp.results}
    bad, good = by_dir[os.path.dirname(a.dir)], by_dir[os.path.dirname(b.dir)]
    assert bad.error_code == ErrorCode.KAFKA_STORAGE_ERROR and bad.topics == []
    assert good.error_code == 0
    assert [(t.name, [(p.partition_index, p.partition_size) for p in t.partitions]) for t in good.topics] == [
        ("b", [(0, b.size_in_bytes)])]
    if version >= 4:
        assert good.total_bytes > 0 and good.usable_bytes >= 0
    named = handle(None, DescribeLogDirsRequest(topics=[DescribableLogDirTopic(topic="x", partitions=[0])]), None)
    assert all(r.topics == [] for r in named.results)
    m.shutdown()


def test_a_dir_that_cannot_be_loaded_goes_offline_and_the_others_start(tmp_path, monkeypatch):
    from rivulet.storage import manager as manager_mod

    m = _manager(tmp_path)
    a, b = m.create_log("a", 0), m.create_log("b", 0)
    append(a, make_batch(2))
    append(b, make_batch(3))
    bad_dir = os.path.dirname(a.dir)
    m.shutdown()
    real_log = manager_mod.Log

    def log_or_full_disk(path, *args, **kw):
        if os.path.dirname(path) == bad_dir:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_log(path, *args, **kw)

    monkeypatch.setattr(manager_mod, "Log", log_or_full_disk)
    m2 = _manager(tmp_path)
    assert list(m2.failure_channel.offline_dirs()) == [bad_dir]
    assert m2.get_log("a", 0) is None and m2.is_offline_partition(("a", 0))
    with pytest.raises(KafkaStorageError):  # never re-created on the other dir
        m2.create_log("a", 0)
    assert m2.get_log("b", 0).log_end_offset == 3
    monkeypatch.setattr(manager_mod, "Log", real_log)
    assert os.path.dirname(m2.create_log("c", 0).dir) != bad_dir
    m2.shutdown()
    # The fault fixed, the next start recovers the dir: nothing was lost.
    m3 = _manager(tmp_path)
    assert m3.get_log("a", 0).log_end_offset == 2
    assert not m3.failure_channel.offline_dirs()
    m3.shutdown()


def test_every_dir_offline_stops_start_up_with_a_clear_message():
    from rivulet.storage.log_dir_failure import AllLogDirsOfflineError

    e = AllLogDirsOfflineError({"/data": "loading failed: [Errno 28] No space left on device"})
    assert isinstance(e, OSError)
    assert "every log directory is offline" in str(e) and "/data" in str(e) and "start again" in str(e)


def test_a_cleaner_io_error_takes_the_dir_offline(tmp_path, monkeypatch):
    import asyncio

    from rivulet.storage.cleaner import LogCleaner
    from tests.unit.test_group_log_cleaner import NOW, fill

    m = LogManager([str(tmp_path / "d0")], LogConfig())
    m.startup()
    lg = m.create_log("topic", 0, LogConfig(cleanup_policy=("compact",), segment_bytes=600))
    fill(lg)
    cleaner = LogCleaner(m, time_ms=lambda: NOW)

    def full(_plan):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cleaner, "_build", full)
    monkeypatch.setattr(cleaner, "_plan", lambda lg, now, force=False: LogCleaner._plan(cleaner, lg, now, True))
    assert asyncio.run(cleaner.clean_all()) == 0  # no exception, no retry loop
    assert lg.offline and m.failure_channel.is_offline(str(tmp_path / "d0"))
    assert cleaner._plan(lg, NOW) is None  # an offline log is not cleaned again
    m.shutdown()


def test_a_full_disk_at_start_up_recovers_read_only_and_changes_nothing(tmp_path, faults):
    d = str(tmp_path / "d0")
    m = LogManager([d], LogConfig())
    m.startup()
    lg = m.create_log("t", 0)
    for _ in range(3):
        append(lg, make_batch(2))
    lg.flush()
    seg_path = os.path.join(lg.dir, f"{0:020d}.log")
    lg.close(final=False)  # a crash: no marker, so start-up recovers (and rebuilds indexes)
    m.release_locks()
    with open(seg_path, "ab") as f:
        f.write(make_batch(2)[:30])  # a torn tail
    listing = sorted(os.listdir(lg.dir))
    faults.armed = True  # every write fails: the disk is full
    m2 = LogManager([d], LogConfig())
    m2.startup()
    failed_writes = faults.failures
    assert failed_writes >= 1  # the write that found the disk full
    assert list(m2.read_only_dirs) == [d] and "disk is full" in m2.read_only_dirs[d]
    assert not m2.failure_channel.offline_dirs()
    lg2 = m2.get_log("t", 0)
    assert lg2.read_only and lg2.log_end_offset == 6  # the torn tail cut, in memory
    lg2.high_watermark = lg2.log_end_offset
    assert len(lg2.read(0, 1 << 20).records) == 3 * len(make_batch(2))
    with pytest.raises(KafkaStorageError) as e:
        append(lg2, make_batch(1))
    assert e.value.code == ErrorCode.KAFKA_STORAGE_ERROR and "read-only" in e.value.message
    with pytest.raises(KafkaStorageError):  # no new logs on it either
        m2.create_log("u", 0)
    assert lg2.delete_retention_segments(10**15) == 0
    lg2.assign_epoch(5, 6)  # becoming leader: in memory only
    assert m2.shutdown() == {d: m2.read_only_dirs[d]}
    assert faults.failures == failed_writes  # read-only: not one write tried since
    assert sorted(os.listdir(lg.dir)) == listing  # no snapshot, no checkpoint
    assert not os.path.exists(os.path.join(d, ".kafka_cleanShutdown"))
    faults.armed = False  # space returns: the next start recovers for real
    m3 = LogManager([d], LogConfig())
    m3.startup()
    assert not m3.read_only_dirs and os.path.getsize(seg_path) == 3 * len(make_batch(2))
    assert append(m3.get_log("t", 0), make_batch(1)).first_offset == 6
    m3.shutdown()
