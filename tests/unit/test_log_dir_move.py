"""Moving a replica between log dirs (AlterReplicaLogDirs): the future log is filled from the
current one, replaces it in one step, and a stop at any point leaves one whole log."""

from __future__ import annotations

import os

import pytest

from rivulet.common.types import TopicPartition
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.replication.log_dir_mover import copy_step
from rivulet.storage import LogConfig, LogManager
from tests.unit.test_storage_manager import append, make_batch

pytestmark = pytest.mark.fast

TP = TopicPartition("orders", 0)


def _manager(tmp_path) -> LogManager:
    m = LogManager([str(tmp_path / "a"), str(tmp_path / "b")], LogConfig(segment_bytes=4096))
    m.startup()
    return m


def _contents(log) -> bytes:
    return bytes(log.read(log.log_start_offset, 1 << 30).records)


def _filled(m: LogManager):
    log = m.create_log(TP.topic, TP.partition)
    for epoch in (0, 0, 3, 3, 5):
        append(log, make_batch(20, size=40), epoch=epoch)
    return log


def _other_dir(m: LogManager, log) -> str:
    return next(d for d in m.log_dirs if d != os.path.dirname(log.dir))


def test_the_future_log_catches_up_and_replaces_the_current_one(tmp_path):
    m = _manager(tmp_path)
    current = _filled(m)
    before = _contents(current)
    target = _other_dir(m, current)
    future = m.create_future_log(TP, target)
    assert future.dir.endswith("-future") and (future.topic, future.partition) == (TP.topic, TP.partition)
    assert m.create_future_log(TP, target) is future  # asked again: the same move
    steps = 0
    while not copy_step(current, future, chunk_bytes=1500):
        steps += 1
        if steps == 2:
            append(current, make_batch(5), epoch=5)  # produced to while it moves
    assert steps > 2
    moved = m.replace_current_with_future(TP)
    assert os.path.dirname(moved.dir) == target and m.get_log(*TP) is moved
    assert _contents(moved).startswith(before) and moved.log_end_offset == 105
    assert moved.epoch_entries() == current.epoch_entries() == [(0, 0), (3, 40), (5, 80)]
    assert not os.path.exists(current.dir) and m.future_log(TP) is None
    append(moved, make_batch(1), epoch=5)
    m.shutdown()
    again = LogManager(m.log_dirs, LogConfig(segment_bytes=4096))
    again.startup()
    assert os.path.dirname(again.get_log(*TP).dir) == target and again.get_log(*TP).log_end_offset == 106
    again.shutdown()


def test_the_future_log_follows_a_truncated_current_log(tmp_path):
    m = _manager(tmp_path)
    current = _filled(m)
    future = m.create_future_log(TP, _other_dir(m, current))
    while not copy_step(current, future):
        pass
    current.truncate_to(50)                      # a new leader cut the tail
    append(current, make_batch(7), epoch=6)      # and wrote its own
    assert copy_step(current, future)
    assert _contents(future) == _contents(current) and future.epoch_entries() == current.epoch_entries()


def test_a_move_to_the_current_dir_or_an_unknown_dir(tmp_path):
    m = _manager(tmp_path)
    current = _filled(m)
    assert m.create_future_log(TP, os.path.dirname(current.dir)) is None
    with pytest.raises(ApiError) as e:
        m.check_log_dir(str(tmp_path / "elsewhere"))
    assert e.value.code == ErrorCode.LOG_DIR_NOT_FOUND
    m.prefer_dir(TopicPartition("later", 0), m.log_dirs[1])
    assert os.path.dirname(m.create_log("later", 0).dir) == m.log_dirs[1]


def test_a_stop_during_the_copy_keeps_the_current_log(tmp_path):
    m = _manager(tmp_path)
    current = _filled(m)
    future = m.create_future_log(TP, _other_dir(m, current))
    copy_step(current, future, chunk_bytes=1000)
    m.shutdown()
    again = LogManager(m.log_dirs, LogConfig(segment_bytes=4096))
    again.startup()
    log = again.get_log(*TP)
    assert log.dir == current.dir and log.log_end_offset == 100 and again.future_log(TP) is None
    assert not any(n.endswith("-future") for d in again.log_dirs for n in os.listdir(d))


def test_a_stop_between_the_swaps_renames_keeps_the_copied_log(tmp_path):
    """The old dir was renamed for deletion, the future one not yet renamed: the future log
    (caught up and flushed before the first rename) is the partition's."""
    m = _manager(tmp_path)
    current = _filled(m)
    expected = _contents(current)
    future = m.create_future_log(TP, _other_dir(m, current))
    while not copy_step(current, future):
        pass
    future.flush()
    future.close()
    current.close()
    m.release_locks()  # the process stopped here
    os.rename(current.dir, current.dir + ".0123456789abcdef0123456789abcdef-delete")
    again = LogManager(m.log_dirs, LogConfig(segment_bytes=4096))
    again.startup()
    log = again.get_log(*TP)
    assert os.path.dirname(log.dir) == os.path.dirname(future.dir) and _contents(log) == expected
    assert sorted(os.listdir(os.path.dirname(current.dir))) == sorted(
        n for n in os.listdir(os.path.dirname(current.dir)) if not n.endswith(("-delete", "-future")))


def test_describe_dirs_shows_the_future_replica(tmp_path):
    m = _manager(tmp_path)
    current = _filled(m)
    target = _other_dir(m, current)
    future = m.create_future_log(TP, target)
    copy_step(current, future, chunk_bytes=1000)
    by_dir = {d.path: d for d in m.describe_dirs()}
    size, lag = by_dir[target].future_sizes[TP]
    assert size == future.size_in_bytes and lag == current.log_end_offset - future.log_end_offset > 0
    assert TP in by_dir[os.path.dirname(current.dir)].partition_sizes
    m.abort_future_log(TP)
    assert not os.path.exists(future.dir) and m.describe_dirs()[0].future_sizes == {}
