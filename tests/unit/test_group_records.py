"""__consumer_offsets record formats: byte layout, round trips, tombstones, replay on load."""

from __future__ import annotations

import struct

import pytest

from rivulet.common.types import TopicPartition
from rivulet.coordinator.group_metadata import (
    COMPLETING_REBALANCE,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    GroupMetadata,
    MemberMetadata,
    OffsetAndMetadata,
)
from rivulet.coordinator.offsets_topic import (
    GroupKey,
    OffsetKey,
    UnknownKey,
    consumer_group_record,
    group_metadata_key,
    group_metadata_value,
    offset_commit_key,
    offset_commit_value,
    read_consumer_group_value,
    read_group_message_value,
    read_message_key,
    read_offset_message_value,
)
from rivulet.protocol import records as rec
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages.consumer_group_metadata_key import ConsumerGroupMetadataKey
from rivulet.protocol.messages.consumer_group_metadata_value import ConsumerGroupMetadataValue
from rivulet.protocol.messages.consumer_protocol_subscription import ConsumerProtocolSubscription
from test_group_support import Member, make_coordinator, new_coordinator

pytestmark = pytest.mark.fast


def kstr(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def test_offset_commit_key_layout():
    # int16 key version 1, then group, topic (int16-length strings) and int32 partition.
    assert offset_commit_key("g", "topic", 7) == b"\x00\x01" + kstr("g") + kstr("topic") + struct.pack(">i", 7)
    assert read_message_key(offset_commit_key("grp", "t", 3)) == OffsetKey("grp", "t", 3)
    v0 = b"\x00\x00" + kstr("grp") + kstr("t") + struct.pack(">i", 3)  # version 0 reads the same
    assert read_message_key(v0) == OffsetKey("grp", "t", 3)


def test_group_metadata_key_layout():
    assert group_metadata_key("my-group") == b"\x00\x02" + kstr("my-group")
    assert read_message_key(group_metadata_key("组")) == GroupKey("组")
    assert read_message_key(b"\x03\xe8anything") == UnknownKey(1000)  # records of kinds not served
    # A KIP-848 group's records: the key after its record type, the value after its version.
    key, value = consumer_group_record(ConsumerGroupMetadataKey(group_id="g"),
                                       ConsumerGroupMetadataValue(epoch=7, metadata_hash=-3))
    assert key == b"\x00\x03\x00\x01g" and value[:2] == b"\x00\x00"
    parsed = read_message_key(key)
    assert parsed.key == ConsumerGroupMetadataKey(group_id="g")
    assert read_consumer_group_value(parsed, value) == ConsumerGroupMetadataValue(epoch=7, metadata_hash=-3)
    assert read_consumer_group_value(parsed, None) is None


def test_offset_commit_value_v3_layout_and_round_trip():
    om = OffsetAndMetadata(1234, 7, "meta ✓", 1_700_000_000_123, None)
    data = offset_commit_value(om)
    meta = "meta ✓".encode()
    assert data == (b"\x00\x03" + struct.pack(">q", 1234) + struct.pack(">i", 7)
                    + struct.pack(">h", len(meta)) + meta + struct.pack(">q", 1_700_000_000_123))
    assert read_offset_message_value(data) == om
    no_epoch = OffsetAndMetadata(5, None, "", 1, None)
    assert read_offset_message_value(offset_commit_value(no_epoch)) == no_epoch
    assert offset_commit_value(no_epoch)[10:14] == struct.pack(">i", -1)


def test_offset_commit_value_with_expire_timestamp_is_v1():
    om = OffsetAndMetadata(9, None, "m", 100, 5000)
    data = offset_commit_value(om)
    assert data == b"\x00\x01" + struct.pack(">q", 9) + kstr("m") + struct.pack(">q", 100) + struct.pack(">q", 5000)
    assert read_offset_message_value(data) == om


def test_tombstones_read_as_none():
    assert read_offset_message_value(None) is None
    assert read_group_message_value("g", None) is None
    with pytest.raises(ValueError):
        read_offset_message_value(b"\x00\x09" + b"\x00" * 30)


def subscription(*topics: str) -> bytes:
    return b"\x00\x01" + ConsumerProtocolSubscription(topics=list(topics), user_data=None, owned_partitions=[]).encode(1)


def stable_group() -> GroupMetadata:
    g = GroupMetadata("g", clock=lambda: 1_700_000_000_000)
    g.add(MemberMetadata("m1", None, "c1", "/10.0.0.1", 45000, 10000, "consumer",
                         [("range", subscription("a", "b")), ("roundrobin", b"x")]))
    g.add(MemberMetadata("m2", "static-2", "c2", "/10.0.0.2", 30000, 12000, "consumer",
                         [("range", subscription("c"))]))
    for s in (PREPARING_REBALANCE,):
        g.transition_to(s)
    g.init_next_generation()
    return g


def test_group_metadata_value_round_trip():
    g = stable_group()
    data = group_metadata_value(g, {"m1": b"A1", "m2": b"A2"})
    assert data[:2] == b"\x00\x03"
    loaded = read_group_message_value("g", data)
    assert loaded.is_(STABLE)
    assert (loaded.generation_id, loaded.protocol_type, loaded.protocol_name, loaded.leader_id) == \
           (1, "consumer", "range", "m1")
    assert loaded.current_state_timestamp == 1_700_000_000_000
    m2 = loaded.get("m2")
    assert (m2.group_instance_id, m2.client_id, m2.client_host, m2.rebalance_timeout_ms, m2.session_timeout_ms,
            m2.assignment) == ("static-2", "c2", "/10.0.0.2", 30000, 12000, b"A2")
    assert loaded.get("m1").supported_protocols == [("range", subscription("a", "b"))]
    assert loaded.current_static_member_id("static-2") == "m2"
    assert loaded.subscribed_topics == {"a", "b", "c"}


def test_empty_group_value_round_trip():
    g = GroupMetadata("g")
    g.protocol_type = "consumer"
    g.transition_to(PREPARING_REBALANCE)
    g.init_next_generation()
    loaded = read_group_message_value("g", group_metadata_value(g, {}))
    assert loaded.is_(EMPTY) and loaded.generation_id == 1 and loaded.protocol_name is None
    assert loaded.leader_id is None and loaded.protocol_type == "consumer"


def test_group_value_requires_assignment_for_every_member():
    g = stable_group()
    with pytest.raises(RuntimeError):
        group_metadata_value(g, {"m1": b""})
    assert g.is_(COMPLETING_REBALANCE)


def test_older_group_value_versions_load():
    g = stable_group()
    from rivulet.protocol.messages.group_metadata_value import GroupMetadataValue, MemberMetadata as MV
    v0 = GroupMetadataValue(protocol_type="consumer", generation=3, protocol="range", leader="m1",
                            members=[MV(member_id="m1", client_id="c", client_host="/h", session_timeout=7000,
                                        subscription=b"s", assignment=b"a")])
    loaded = read_group_message_value("g", b"\x00\x00" + v0.encode(0))
    assert loaded.get("m1").rebalance_timeout_ms == 7000  # v0 has no rebalance timeout
    assert loaded.current_state_timestamp is None
    assert g is not loaded


def test_coordinator_writes_and_replays_the_log():
    """Commits, a group, tombstones: a second coordinator on the same log sees exactly the result."""
    c, b = make_coordinator()
    b.add_topic("t", 4)
    m = Member(c, "g1", "c1")
    m.join_fully()
    b.advance(1)
    m.sync({m.member_id: b"assign"})
    committed = []
    offsets = {TopicPartition("t", p): OffsetAndMetadata(10 * p + 1, 3, f"m{p}", b.now) for p in range(4)}
    c.handle_commit_offsets("g1", m.member_id, None, m.generation, offsets, committed.append)
    assert committed[-1] == {tp: 0 for tp in offsets}
    # a simple (standalone) group, then deleted offsets for one partition
    c.handle_commit_offsets("simple", "", None, -1, {TopicPartition("t", 0): OffsetAndMetadata(5)},
                            committed.append)
    c.handle_commit_offsets("gone", "", None, -1, {TopicPartition("t", 1): OffsetAndMetadata(6)},
                            committed.append)
    assert c.handle_delete_groups(["gone"]) == {"gone": 0}
    c.handle_delete_offsets("simple", [TopicPartition("t", 0)])

    c3 = new_coordinator(b)  # a new coordinator over the same log, as after a restart
    c3.startup()
    g = c3.manager.get_group("g1")
    assert g is not None and g.is_(STABLE) and g.generation_id == 1
    assert g.get(m.member_id).assignment == b"assign"
    assert g.all_offsets() == offsets
    assert c3.manager.get_group("gone") is None
    assert c3.manager.get_group("simple") is None  # all its offsets were tombstoned
    # every record has a key; deleted ones end in tombstones
    recs = [r for p in b.replica_manager.partitions.values() for r in p.log.records()]
    assert all(r.key is not None for r in recs)
    # "gone"'s and "simple"'s offset and "gone"'s GroupMetadata tombstone (as Kafka deletes any
    # classic group); "simple" outlives its offsets until the next expiry pass, as in Kafka 4
    assert sum(1 for r in recs if r.value is None) == 3


def test_replay_keeps_newest_and_applies_tombstones_in_log_order():
    c, b = make_coordinator()
    b.add_topic("t", 1)
    tp = TopicPartition("t", 0)
    done = []
    for off in (1, 2, 3):
        c.handle_commit_offsets("s", "", None, -1, {tp: OffsetAndMetadata(off)}, done.append)
    c.manager.cleanup_group_metadata([c.manager.get_group("s")], lambda g: g.remove_offsets([tp]))
    c.handle_commit_offsets("s", "", None, -1, {tp: OffsetAndMetadata(4)}, done.append)
    c2 = new_coordinator(b)
    c2.startup()
    assert c2.manager.get_group("s").offset(tp).committed_offset == 4


def test_replay_of_transactional_offsets_honours_markers():
    c, b = make_coordinator()
    part = c.partition_for("txg")
    log = next(p.log for tp, p in b.replica_manager.partitions.items() if tp.partition == part)
    key = offset_commit_key("txg", "t", 0)

    def txn(pid: int, offset: int) -> None:
        log.append(rec.encode_batch([rec.Record(0, 1, key, offset_commit_value(OffsetAndMetadata(offset)), [])],
                                    producer_id=pid, producer_epoch=0, base_sequence=0, transactional=True))

    txn(11, 100)
    log.append(rec.encode_control_batch(rec.ControlRecordType.COMMIT, producer_id=11, producer_epoch=0,
                                        coordinator_epoch=0, timestamp=1))
    txn(12, 200)
    log.append(rec.encode_control_batch(rec.ControlRecordType.ABORT, producer_id=12, producer_epoch=0,
                                        coordinator_epoch=0, timestamp=1))
    c2 = new_coordinator(b)
    c2.startup()
    assert c2.manager.get_group("txg").offset(TopicPartition("t", 0)).committed_offset == 100


def _group_records(b, group_id: str) -> list[rec.Record]:
    return [r for p in b.replica_manager.partitions.values() for r in p.log.records()
            if r.key == group_metadata_key(group_id)]


def test_a_group_a_join_creates_is_written_empty_at_once_and_outlives_a_restart_as_kafkas():
    from rivulet.protocol.messages.group_metadata_value import GroupMetadataValue
    c, b = make_coordinator()
    created = b.now
    m = Member(c, "new", "c1")
    m.join()  # v4+: MEMBER_ID_REQUIRED, answered without waiting for the write
    assert m.join_result.error == ErrorCode.MEMBER_ID_REQUIRED
    [r] = _group_records(b, "new")
    # Kafka's newEmptyGroupMetadataRecord: value v3, protocol type "" (not the member's), generation 0,
    # no protocol, leader or members, the group's state timestamp.
    assert r.value[:2] == b"\x00\x03"
    assert GroupMetadataValue.decode(r.value, 3, 2) == GroupMetadataValue(
        protocol_type="", generation=0, protocol=None, leader=None, current_state_timestamp=created, members=[])
    m.join()  # the group exists now: nothing more is written for it until the join completes
    assert len(_group_records(b, "new")) == 1

    c2 = new_coordinator(b)  # a restart: the group is there, Empty
    c2.startup()
    g = c2.manager.get_group("new")
    assert g is not None and g.is_(EMPTY) and g.generation_id == 0 and g.protocol_type is None
    assert g.current_state_timestamp == created
    assert [x.group_id for x in c2.handle_list_groups()[1]] == ["new"]
    assert c2.handle_describe_group("new") == (ErrorCode.NONE, ("Empty", "", "", []))

    # Empty and without offsets it dies at the next expiry run, tombstone and all, as in Kafka
    # (offsets.retention.minutes plays no part: there are no offsets to wait for).
    c2.manager.cleanup_expired_offsets()
    assert c2.manager.get_group("new") is None
    assert _group_records(b, "new")[-1].value is None
    c3 = new_coordinator(b)
    c3.startup()
    assert c3.manager.get_group("new") is None


def test_a_join_to_an_existing_or_unknown_member_group_writes_no_empty_record():
    c, b = make_coordinator()
    old = Member(c, "g", "c0")
    old.join_fully()
    before = len(_group_records(b, "g"))
    assert before == 1  # the new group's
    Member(c, "g", "c1").join()
    stale = Member(c, "nope", "c2")
    stale.member_id = "stale-id"  # a known id for a group that does not exist creates nothing
    stale.join()
    assert stale.join_result.error == ErrorCode.UNKNOWN_MEMBER_ID
    assert len(_group_records(b, "g")) == before and _group_records(b, "nope") == []


def test_a_new_group_whose_empty_record_fails_is_dropped_as_kafka_reverts_it():
    c, b = make_coordinator()
    b.replica_manager.fail_with = ErrorCode.NOT_ENOUGH_REPLICAS
    m = Member(c, "lost", "c1")
    m.join()
    assert m.join_result.error == ErrorCode.MEMBER_ID_REQUIRED  # answered before the write's outcome
    assert c.manager.get_group("lost") is None
    b.replica_manager.fail_with = None
    m.join()  # with its id, for a group that no longer exists
    assert m.join_result.error == ErrorCode.UNKNOWN_MEMBER_ID
