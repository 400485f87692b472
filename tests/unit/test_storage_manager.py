"""Unit tests for LogConfig, checkpoint files and the LogManager."""

from __future__ import annotations

import os
import struct
import uuid

import crc32c
import pytest

from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.protocol.records import parse_batch_header
from rivulet.storage import (
    ConfigSource,
    ConfigType,
    LogConfig,
    LogManager,
    describe_topic_configs,
    read_or_create_meta,
)
from rivulet.storage.checkpoints import (
    CLEAN_SHUTDOWN,
    read_epoch_checkpoint,
    read_offset_checkpoint,
    read_partition_metadata,
    uuid_from_kafka,
    uuid_to_kafka,
    write_offset_checkpoint,
)

pytestmark = pytest.mark.fast


def make_batch(n: int, base_ts: int = 1000, size: int = 10) -> bytes:
    recs = bytearray()
    for i in range(n):
        # attributes 0, timestampDelta 0, offsetDelta i, key null (-1 -> 0x01), value, no headers
        body = b"\x00\x00" + bytes([i * 2]) + b"\x01" + bytes([size * 2]) + b"v" * size + b"\x00"
        recs += bytes([len(body) * 2]) + body
    after_crc = struct.pack(">hiqqqhii", 0, n - 1, base_ts, base_ts, -1, -1, -1, n) + bytes(recs)
    return struct.pack(">qiibI", 0, 9 + len(after_crc), -1, 2, crc32c.crc32c(after_crc)) + after_crc


def append(log, data: bytes, epoch: int = 0):
    hs, pos = [], 0
    while pos < len(data):
        h = parse_batch_header(data, pos)
        hs.append(h)
        pos += h.size
    return log.append_as_leader(data, hs, leader_epoch=epoch, now_ms=0)


# -- LogConfig ---------------------------------------------------------------------------


def test_log_config_defaults_match_kafka():
    c = LogConfig()
    assert c.segment_bytes == 1073741824
    assert c.segment_ms == 604800000
    assert c.segment_index_bytes == 10485760
    assert c.index_interval_bytes == 4096
    assert c.retention_ms == 604800000 and c.retention_bytes == -1
    assert c.flush_messages == c.flush_ms == 9223372036854775807
    assert c.max_message_bytes == 1048588
    assert c.message_timestamp_type == "CreateTime" and not c.log_append_time
    assert c.cleanup_policy == ("delete",) and c.delete_enabled
    assert c.to_props()["cleanup.policy"] == "delete"


def test_from_props_applies_and_validates():
    base = LogConfig(retention_ms=1000)
    c = LogConfig.from_props(
        {
            "segment.bytes": "1048576",
            "internal.segment.bytes": "2048",
            "cleanup.policy": "compact, delete",
            "message.timestamp.type": "LogAppendTime",
            "min.cleanable.dirty.ratio": "0.25",
            "preallocate": "TRUE",
        },
        base,
    )
    assert c.segment_bytes == 1048576 and c.segment_size == 2048 and c.retention_ms == 1000
    assert c.cleanup_policy == ("compact", "delete") and c.compact_enabled
    assert c.log_append_time and c.min_cleanable_dirty_ratio == 0.25 and c.preallocate
    bad = {
        "segment.bytes": "1048575",
        "internal.segment.bytes": "small",
        "retention.ms": "-2",
        "flush.messages": "0",
        "cleanup.policy": "shred",
        "compression.type": "brotli",
        "message.timestamp.type": "Now",
        "min.insync.replicas": "abc",
        "max.message.bytes": "99999999999",
        "preallocate": "yes",
        "min.cleanable.dirty.ratio": "1.5",
        "no.such.config": "1",
    }
    for name, value in bad.items():
        with pytest.raises(ApiError) as e:
            LogConfig.from_props({name: value}, base)
        assert e.value.code == ErrorCode.INVALID_CONFIG
        assert name in str(e.value)


def test_from_broker_props_maps_names_and_units():
    c = LogConfig.from_broker_props(
        {
            "log.segment.bytes": "2000000",
            "log.roll.hours": "2",
            "log.retention.minutes": "30",
            "log.retention.hours": "1",  # minutes wins over hours
            "log.flush.interval.messages": "1",
            "message.max.bytes": "5000",
            "log.cleanup.policy": "compact",
            "log.index.interval.bytes": "100",
            "log.segment.delete.delay.ms": "0",
            "log.message.timestamp.type": "LogAppendTime",
            "min.insync.replicas": "2",
            "compression.type": "zstd",
            "node.id": "1",  # unrelated broker settings are ignored
        }
    )
    assert c.segment_bytes == 2000000
    assert c.segment_ms == 7_200_000
    assert c.retention_ms == 1_800_000
    assert c.flush_messages == 1 and c.max_message_bytes == 5000
    assert c.cleanup_policy == ("compact",) and c.index_interval_bytes == 100
    assert c.file_delete_delay_ms == 0 and c.log_append_time
    assert c.min_insync_replicas == 2 and c.compression_type == "zstd"
    assert LogConfig.from_broker_props({"log.roll.ms": "5", "log.roll.hours": "9"}).segment_ms == 5
    assert LogConfig.from_broker_props({"log.retention.ms": "-1"}).retention_ms == -1
    assert LogConfig.from_broker_props({"log.retention.hours": "-1"}).retention_ms == -1
    with pytest.raises(ApiError):
        LogConfig.from_broker_props({"log.segment.bytes": "lots"})
    with pytest.raises(ApiError, match="Invalid value 1048575 for configuration log.segment.bytes: Value must be at "
                       "least 1048576"):
        LogConfig.from_broker_props({"log.segment.bytes": "1048575"})  # Kafka 4's lower bound


def test_describe_topic_configs():
    defaults = LogConfig.from_broker_props({"log.retention.hours": "1"})
    entries = {e.name: e for e in describe_topic_configs({"segment.bytes": "4096"}, defaults)}
    assert set(entries) >= {"segment.bytes", "retention.ms", "cleanup.policy", "max.message.bytes"}
    seg = entries["segment.bytes"]
    assert seg.value == "4096" and not seg.is_default
    assert seg.source == ConfigSource.DYNAMIC_TOPIC_CONFIG and seg.config_type == ConfigType.INT
    assert seg.synonyms[0] == ("segment.bytes", "4096", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    ret = entries["retention.ms"]
    assert ret.value == "3600000" and ret.source == ConfigSource.STATIC_BROKER_CONFIG and not ret.is_default
    mmb = entries["max.message.bytes"]
    assert mmb.value == "1048588" and mmb.is_default and mmb.source == ConfigSource.DEFAULT_CONFIG
    assert mmb.synonyms == (("message.max.bytes", "1048588", ConfigSource.DEFAULT_CONFIG),)
    with_props = {
        e.name: e
        for e in describe_topic_configs({}, defaults, broker_props={"log.retention.hours": "1"})
    }
    assert with_props["retention.ms"].synonyms[0] == ("log.retention.hours", "1", ConfigSource.STATIC_BROKER_CONFIG)


# -- checkpoint and metadata files ------------------------------------------------------------


def test_offset_checkpoint_round_trip(tmp_path):
    path = str(tmp_path / "recovery-point-offset-checkpoint")
    offsets = {("orders", 0): 42, ("my-topic", 3): 7}
    write_offset_checkpoint(path, offsets)
    with open(path) as f:
        text = f.read()
    assert text.splitlines()[:2] == ["0", "2"]
    assert "my-topic 3 7" in text and "orders 0 42" in text
    assert read_offset_checkpoint(path) == offsets
    assert read_offset_checkpoint(str(tmp_path / "missing")) == {}
    with open(path, "w") as f:
        f.write("0\n5\norders 0 1\n")  # count disagrees: ignored, not fatal
    assert read_offset_checkpoint(path) == {}


def test_kafka_uuid_text_form():
    u = uuid.UUID("7b1e54b0-6d2d-4bd1-9f3b-4dbd8e3c3bd1")
    s = uuid_to_kafka(u)
    assert len(s) == 22 and "=" not in s
    assert uuid_from_kafka(s) == u


def test_meta_properties(tmp_path):
    d = str(tmp_path / "data")
    cluster = read_or_create_meta(d, 1)
    assert len(cluster) == 22
    with open(os.path.join(d, "meta.properties")) as f:
        text = f.read()
    assert "node.id=1" in text and "version=1" in text and f"cluster.id={cluster}" in text
    assert read_or_create_meta(d, 1) == cluster
    with pytest.raises(RuntimeError):
        read_or_create_meta(d, 2)
    with pytest.raises(RuntimeError):
        read_or_create_meta(d, 1, cluster_id="AAAAAAAAAAAAAAAAAAAAAA")
    d2 = str(tmp_path / "data2")
    assert read_or_create_meta(d2, 1, cluster_id=cluster) == cluster


# -- LogManager -------------------------------------------------------------------------------


def test_manager_create_and_partition_metadata(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    m = LogManager(dirs, LogConfig())
    m.startup()
    tid = uuid.uuid4()
    l0 = m.create_log("orders", 0, LogConfig(), tid)
    l1 = m.create_log("orders", 1, LogConfig(), tid)
    assert os.path.dirname(l0.dir) != os.path.dirname(l1.dir)  # spread over dirs
    assert m.create_log("orders", 0, None, tid) is l0
    with pytest.raises(ApiError) as e:
        m.create_log("orders", 0, None, uuid.uuid4())
    assert e.value.code == ErrorCode.INCONSISTENT_TOPIC_ID
    with open(os.path.join(l0.dir, "partition.metadata")) as f:
        assert f.read() == f"version: 0\ntopic_id: {uuid_to_kafka(tid)}\n"
    assert read_partition_metadata(l0.dir) == tid
    assert m.get_log("orders", 0) is l0 and m.get_log("orders", 9) is None
    assert sorted(lg.partition for lg in m.all_logs()) == [0, 1]
    with pytest.raises(ApiError):
        m.create_log("../evil", 0, None, tid)
    m.shutdown()


def test_a_cordoned_dir_takes_no_new_partitions_while_another_can(tmp_path):
    """cordoned.log.dirs (KIP-1066): new logs go to the dirs not cordoned; the logs already on a
    cordoned dir stay; with every dir cordoned one is still made (a cluster's controller
    assigned it here), and DescribeLogDirs says which are cordoned."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    m = LogManager([a, b], LogConfig())
    m.startup()
    tid = uuid.uuid4()
    first = m.create_log("t", 0, LogConfig(), tid)
    m.cordon([os.path.dirname(first.dir)])
    assert not m.all_cordoned()
    others = [m.create_log("t", p, LogConfig(), tid) for p in (1, 2, 3)]
    assert {os.path.dirname(lg.dir) for lg in others} == {os.path.abspath(b if first.dir.startswith(a) else a)}
    assert m.get_log("t", 0) is first
    assert [d.cordoned for d in m.describe_dirs()] == [os.path.abspath(d) == os.path.dirname(first.dir) for d in (a, b)]
    m.cordon([a, b, str(tmp_path / "not-a-log-dir")])
    assert m.all_cordoned() and m.cordoned == {os.path.abspath(a), os.path.abspath(b)}
    assert m.create_log("t", 4, LogConfig(), tid) is not None
    m.cordon([])
    assert not m.all_cordoned() and not any(d.cordoned for d in m.describe_dirs())
    m.shutdown()


def test_manager_checkpoints_and_clean_restart(tmp_path):
    d = str(tmp_path / "data")
    m = LogManager([d], LogConfig())
    m.startup()
    tid = uuid.uuid4()
    lg = m.create_log("my-topic", 2, LogConfig(segment_bytes=300), tid)
    b = make_batch(2)
    for _ in range(6):
        append(lg, b)
    lg.high_watermark = lg.log_end_offset
    lg.delete_records_before(5)
    m.shutdown()
    assert os.path.exists(os.path.join(d, ".kafka_cleanShutdown"))
    assert read_offset_checkpoint(os.path.join(d, "recovery-point-offset-checkpoint")) == {("my-topic", 2): 12}
    assert read_offset_checkpoint(os.path.join(d, "log-start-offset-checkpoint")) == {("my-topic", 2): 5}
    assert read_offset_checkpoint(os.path.join(d, "replication-offset-checkpoint")) == {("my-topic", 2): 12}

    m2 = LogManager([d], LogConfig())
    m2.startup(topic_config=lambda topic: LogConfig(segment_bytes=300))
    assert m2.had_clean_shutdown[d] and m2.clean_start
    assert not os.path.exists(os.path.join(d, ".kafka_cleanShutdown"))  # a crash now means recovery
    lg2 = m2.get_log("my-topic", 2)
    assert (lg2.log_start_offset, lg2.log_end_offset, lg2.high_watermark) == (5, 12, 12)
    assert lg2.recovery_point == 12 and lg2.topic_id == tid
    assert lg2.config.segment_bytes == 300
    assert append(lg2, b).first_offset == 12
    m2.checkpoint()
    assert read_offset_checkpoint(os.path.join(d, "replication-offset-checkpoint")) == {("my-topic", 2): 12}
    m2.shutdown()


def test_manager_unclean_restart_recovers(tmp_path):
    d = str(tmp_path / "data")
    m = LogManager([d], LogConfig())
    m.startup()
    lg = m.create_log("t", 0, None, uuid.uuid4())
    for _ in range(3):
        append(lg, make_batch(3))
    m.checkpoint()  # recovery point still 0: nothing flushed
    # "Crash": no shutdown; leave a torn batch at the tail.
    seg_path = os.path.join(lg.dir, f"{0:020d}.log")
    lg.close()
    m.release_locks()  # the crashed process's flock dies with it
    with open(seg_path, "ab") as f:
        f.write(make_batch(3)[:30])
    m2 = LogManager([d], LogConfig())
    m2.startup()
    assert not m2.had_clean_shutdown[d] and not m2.clean_start  # what its registration says (KIP-966)
    lg2 = m2.get_log("t", 0)
    assert lg2.log_end_offset == 9
    assert os.path.getsize(seg_path) == 3 * len(make_batch(3))
    m2.shutdown()


def test_manager_delete_log_removes_data(tmp_path):
    d = str(tmp_path / "data")
    m = LogManager([d], LogConfig())
    m.startup()
    lg = m.create_log("doomed", 0, None, uuid.uuid4())
    append(lg, make_batch(2))
    lg.flush()
    keep = m.create_log("kept", 0, None, uuid.uuid4())
    assert m.delete_log("doomed", 0)
    assert not m.delete_log("doomed", 0)
    assert m.get_log("doomed", 0) is None
    assert sorted(os.listdir(d)) == [".lock", "kept-0"]
    m.checkpoint()
    assert ("doomed", 0) not in read_offset_checkpoint(os.path.join(d, "recovery-point-offset-checkpoint"))
    # A half-finished deletion from a previous run is finished at start-up.
    os.makedirs(os.path.join(d, "old-0.0123456789abcdef0123456789abcdef-delete"))
    m.shutdown()
    m2 = LogManager([d], LogConfig())
    m2.startup()
    assert sorted(n for n in os.listdir(d) if os.path.isdir(os.path.join(d, n))) == ["kept-0"]
    assert m2.get_log("kept", 0).dir == keep.dir
    m2.shutdown()


def test_manager_cleanup_and_flush_dirty(tmp_path):
    d = str(tmp_path / "data")
    m = LogManager([d], LogConfig())
    m.startup()
    b = make_batch(1, base_ts=0)
    lg = m.create_log("r", 0, LogConfig(segment_bytes=len(b), retention_ms=100, flush_ms=1000), uuid.uuid4())
    for _ in range(3):
        append(lg, b)
    lg.high_watermark = lg.log_end_offset
    assert m.cleanup(now_ms=10_000) == 3
    assert lg.log_start_offset == 3
    append(lg, make_batch(1, base_ts=10_000))
    last = lg.last_flush_ms
    assert m.flush_dirty(now_ms=last + 10) == 0  # flush.ms not yet elapsed
    assert lg.recovery_point < lg.log_end_offset
    assert m.flush_dirty(now_ms=last + 1000) == 1
    assert lg.recovery_point == lg.log_end_offset
    assert m.flush_dirty(now_ms=last + 5000) == 0  # nothing dirty
    m.shutdown()


def test_create_logs_is_all_or_nothing_and_out_of_descriptors_keeps_the_dir_online(tmp_path, monkeypatch):
    import errno

    import rivulet.storage.log as log_module
    from rivulet.storage.log_dir_failure import KafkaStorageError

    d = str(tmp_path / "data")
    m = LogManager([d], LogConfig())
    m.startup()
    m.create_log("kept", 0, None, uuid.uuid4())
    real = log_module.write_partition_metadata
    calls = []

    def failing(path, topic_id, *, sync=True):  # the fourth partition runs out of descriptors after its mkdir
        calls.append(path)
        if len(calls) == 4:
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        return real(path, topic_id, sync=sync)

    monkeypatch.setattr(log_module, "write_partition_metadata", failing)
    with pytest.raises(KafkaStorageError) as e:
        m.create_logs("big", range(10), None, uuid.uuid4())
    assert e.value.code == ErrorCode.KAFKA_STORAGE_ERROR and "open-file limit" in e.value.message
    assert len(calls) == 4
    assert [lg.topic for lg in m.all_logs()] == ["kept"]
    assert sorted(n for n in os.listdir(d) if os.path.isdir(os.path.join(d, n))) == ["kept-0"]  # nothing half-made
    assert m.online_dirs() == [d]  # a process limit, not a disk fault
    monkeypatch.setattr(log_module, "write_partition_metadata", real)
    assert [lg.partition for lg in m.create_logs("big", range(3), None, uuid.uuid4())] == [0, 1, 2]
    m.shutdown()


def test_startup_deletes_unwanted_partitions_unread(tmp_path):
    d = str(tmp_path / "data")
    m = LogManager([d], LogConfig())
    m.startup()
    for topic, n in (("kept", 2), ("gone", 2)):
        m.create_logs(topic, range(n), None, uuid.uuid4())
    m.shutdown()
    m2 = LogManager([d], LogConfig())
    m2.startup(wanted=lambda tp: tp == ("kept", 0) or tp == ("gone", 0))  # an interrupted create, a deletion
    assert sorted((lg.topic, lg.partition) for lg in m2.all_logs()) == [("gone", 0), ("kept", 0)]
    assert sorted(n for n in os.listdir(d) if os.path.isdir(os.path.join(d, n))) == ["gone-0", "kept-0"]
    m2.shutdown()


def test_delete_logs_renames_then_remove_deleted_removes(tmp_path):
    d = str(tmp_path / "data")
    m = LogManager([d], LogConfig())
    m.startup()
    m.create_logs("t", range(3), None, uuid.uuid4())
    doomed = m.delete_logs([("t", 0), ("t", 2), ("t", 9)])
    assert len(doomed) == 2 and all(p.endswith("-delete") and os.path.isdir(p) for p in doomed)
    assert [lg.partition for lg in m.all_logs()] == [1]
    m.remove_deleted(doomed)
    assert sorted(n for n in os.listdir(d) if os.path.isdir(os.path.join(d, n))) == ["t-1"]
    m.shutdown()


def test_retention_renames_segments_and_unlinks_them_after_file_delete_delay(tmp_path):
    d = str(tmp_path / "data")
    now = [1_000_000]
    m = LogManager([d], LogConfig(), time_ms=lambda: now[0])
    m.startup()
    b = make_batch(2)
    cfg = LogConfig(segment_bytes=len(b) * 2, retention_bytes=len(b) * 2, file_delete_delay_ms=60_000)
    lg = m.create_log("t", 0, cfg, uuid.uuid4())
    for _ in range(6):
        append(lg, b)
    lg.high_watermark = lg.log_end_offset
    assert m.cleanup(now[0]) == 2
    deleted = sorted(n for n in os.listdir(lg.dir) if n.endswith(".deleted"))
    assert f"{0:020d}.log.deleted" in deleted and f"{0:020d}.log" not in os.listdir(lg.dir)
    assert m.take_due_deletions(now[0] + 59_999) == []  # Kafka's file.delete.delay.ms
    now[0] += 60_000
    due = m.take_due_deletions(now[0])
    assert sorted(os.path.basename(p) for p in due) == deleted
    m.remove_files(due)
    assert not [n for n in os.listdir(lg.dir) if n.endswith(".deleted")]
    assert m.take_due_deletions(now[0]) == []
    assert lg.log_start_offset == 8 and len(lg.read(8, 1 << 20).records) == 2 * len(b)
    m.shutdown()


def test_create_log_makes_files_without_holding_the_manager_lock(tmp_path, monkeypatch):
    import threading

    from rivulet.storage import manager as manager_mod

    m = LogManager([str(tmp_path / "data")], LogConfig())
    m.startup()
    m.create_log("kept", 0)
    reached, go = threading.Event(), threading.Event()
    real = manager_mod.Log

    def slow_log(path, *args, **kw):  # a log whose files take long to make (fsyncs on a busy disk)
        reached.set()
        go.wait(10)
        return real(path, *args, **kw)

    monkeypatch.setattr(manager_mod, "Log", slow_log)
    made: list = []
    maker = threading.Thread(target=lambda: made.append(m.create_log("t", 0)))
    maker.start()
    assert reached.wait(10)
    seen: list = []
    reader = threading.Thread(target=lambda: seen.append([lg.topic for lg in m.all_logs()]))
    reader.start()
    reader.join(5)
    assert seen == [["kept"]], "all_logs waited for another thread's file work"
    again: list = []
    second = threading.Thread(target=lambda: again.append(m.create_log("t", 0)))  # waits for the first
    second.start()
    go.set()
    maker.join(10)
    second.join(10)
    assert made and again and again[0] is made[0]
    m.shutdown()


def test_startup_out_of_descriptors_stops_with_the_limit_and_takes_no_dir_offline(tmp_path, monkeypatch):
    import errno

    from rivulet.storage import manager as manager_mod

    d = str(tmp_path / "data")
    m = LogManager([d], LogConfig())
    m.startup()
    m.create_logs("t", range(3), None, uuid.uuid4())
    m.shutdown()
    real = manager_mod.Log
    opened = []

    def log_until_out_of_descriptors(path, *args, **kw):
        if len(opened) == 2:
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        opened.append(real(path, *args, **kw))
        return opened[-1]

    monkeypatch.setattr(manager_mod, "Log", log_until_out_of_descriptors)
    m2 = LogManager([d], LogConfig())
    with pytest.raises(manager_mod.TooManyOpenFilesError) as e:
        m2.startup()
    assert "open-file limit" in str(e.value) and "with 2 logs open" in str(e.value)
    assert not m2.failure_channel.offline_dirs() and m2.all_logs() == []
    assert all(lg.closed for lg in opened)  # what was loaded gave its descriptors back
    m2.release_locks()


def test_cleanup_steps_go_one_log_at_a_time(tmp_path):
    d = str(tmp_path / "data")
    m = LogManager([d], LogConfig())
    m.startup()
    b = make_batch(2)
    cfg = LogConfig(segment_bytes=len(b) * 2, retention_bytes=len(b) * 2)
    for topic in ("a", "b", "c"):
        lg = m.create_log(topic, 0, cfg, uuid.uuid4())
        for _ in range(4 if topic != "b" else 1):
            append(lg, b)
        lg.high_watermark = lg.log_end_offset
    steps = m.cleanup_steps(0)
    assert sorted([next(steps), next(steps), next(steps)]) == [0, 1, 1]  # one log each, "b" has nothing to delete
    assert list(steps) == []
    m.shutdown()


def _fsync_spy(monkeypatch) -> list[str]:
    """The paths fsynced from now on (files and dirs), in order."""
    synced: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return synced


def test_create_logs_fsyncs_the_parent_once_and_a_new_logs_files_at_its_first_flush(tmp_path, monkeypatch):
    # Creating thousands of partitions must not cost fsyncs each: one fsync of the parent makes
    # the new dirs durable; a new log's partition.metadata and leader-epoch-checkpoint become
    # durable with its first flush, before any of its records count as durable.
    d = str(tmp_path / "data")
    m = LogManager([d], LogConfig())
    m.startup()
    tid = uuid.uuid4()
    synced = _fsync_spy(monkeypatch)
    logs = m.create_logs("wide", range(50), None, tid)
    for lg in logs:
        lg.assign_epoch(0, 0)  # what becoming leader does
    assert synced == [d]
    assert read_partition_metadata(logs[7].dir) == tid  # written all the same
    assert logs[7].epoch_entries() == [(0, 0)]
    logs[8].flush()  # nothing written to it: its files wait (a shutdown of idle partitions syncs nothing each)
    assert synced == [d]
    lg = logs[7]
    append(lg, make_batch(2))
    synced.clear()
    lg.flush()
    files = {os.path.join(lg.dir, "partition.metadata"), os.path.join(lg.dir, "leader-epoch-checkpoint")}
    assert files <= set(synced) and synced[-1] == lg.dir
    synced.clear()
    lg.assign_epoch(1, 1)  # after the first flush, epoch changes are durable at once again
    assert synced == [os.path.join(lg.dir, "leader-epoch-checkpoint.tmp"), lg.dir]  # written, renamed, both synced
    m.shutdown()
    assert read_epoch_checkpoint(os.path.join(logs[8].dir, "leader-epoch-checkpoint")) == [(0, 0)]
    m2 = LogManager([d], LogConfig())
    m2.startup()
    assert m2.get_log("wide", 7).epoch_entries() == [(0, 0), (1, 1)]
    assert m2.get_log("wide", 8).topic_id == tid
    m2.shutdown()


def test_a_new_logs_deferral_ends_at_its_first_flush_even_with_no_epoch_written_before(tmp_path, monkeypatch):
    # The log's small files share one deferral: a first flush of records that found no
    # leader-epoch-checkpoint written yet still ends it, so a later epoch change is durable at
    # once rather than waiting for the next flush of records.
    d = str(tmp_path / "data")
    m = LogManager([d], LogConfig())
    m.startup()
    (lg,) = m.create_logs("late", [0], None, uuid.uuid4())
    data = make_batch(2)  # partition leader epoch -1: the follower assigns no epoch for it
    lg.append_as_follower(data, [parse_batch_header(data, 0)], now_ms=0)
    synced = _fsync_spy(monkeypatch)
    lg.flush()
    assert os.path.join(lg.dir, "partition.metadata") in synced and synced[-1] == lg.dir
    synced.clear()
    lg.assign_epoch(3, 2)
    assert synced == [os.path.join(lg.dir, "leader-epoch-checkpoint.tmp"), lg.dir]
    m.shutdown()


def test_new_logs_go_to_the_dir_with_fewest_partitions_in_a_batch_too(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "c")]
    m = LogManager(dirs, LogConfig())
    m.startup()
    m.create_logs("first", range(4), None, uuid.uuid4())  # a, b, c, a
    logs = m.create_logs("second", range(8), None, uuid.uuid4())  # b, c first: a has one more
    where = [os.path.basename(os.path.dirname(lg.dir)) for lg in logs]
    assert where[:2] == ["b", "c"] and sorted(where) == ["a", "a", "b", "b", "b", "c", "c", "c"]
    m.shutdown()


def test_a_log_that_lost_its_partition_metadata_takes_its_topic_id_again(tmp_path):
    # A crash before a new log's first flush may lose its partition.metadata (written without
    # fsync); opening the partition writes it again, as Kafka assigns a missing topic id.
    d = str(tmp_path / "data")
    m = LogManager([d], LogConfig())
    m.startup()
    tid = uuid.uuid4()
    lg = m.create_log("t", 0, None, tid)
    m.shutdown()
    os.unlink(os.path.join(lg.dir, "partition.metadata"))
    m2 = LogManager([d], LogConfig())
    m2.startup()
    again = m2.get_log("t", 0)
    assert again.topic_id is None
    again.assign_topic_id(tid)
    again.assign_topic_id(uuid.uuid4())  # only a missing id is assigned
    assert again.topic_id == tid and read_partition_metadata(again.dir) == tid
    m2.shutdown()


def test_a_manager_stopped_before_its_logs_loaded_vouches_for_nothing(tmp_path):
    """A broker start that fails before recovery (a port in use) stops its log manager: no
    clean-shutdown marker and no checkpoints, or the next start would skip the recovery an
    unclean stop before it still owes."""
    d = tmp_path / "d"
    m = LogManager([str(d)], LogConfig())
    m.shutdown()
    assert sorted(p.name for p in d.iterdir()) == [".lock"]
    again = LogManager([str(d)], LogConfig())  # its lock was let go
    again.startup()
    assert again.had_clean_shutdown == {str(d): False}
    again.shutdown()
    assert (d / CLEAN_SHUTDOWN).exists()
