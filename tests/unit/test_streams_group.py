"""KIP-1071 streams groups: StreamsGroupHeartbeat's state machine (join, epochs, fencing,
revocation before reassignment, leave), the topology's internal topics, and the sticky assignor."""

from __future__ import annotations

import pytest

from rivulet.coordinator.modern_group import GroupState, HeartbeatError, MemberState
from rivulet.coordinator.streams_group import (
    Assignment,
    StatusCode,
    StreamsGroup,
    StreamsGroupConfig,
    StreamsGroupMember,
    StreamsHeartbeatRequest,
    TopicNeed,
    assign,
    configure_topology,
    fence,
    heartbeat,
    leave,
    validate,
)
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages.streams_group_heartbeat_request import Subtopology, TopicInfo, Topology
from test_consumer_group import Topics

CONFIG = StreamsGroupConfig()


def word_count(epoch: int = 1) -> Topology:
    """Two subtopologies: 0 reads ``input`` and writes the repartition topic; 1 reads it and keeps
    a store whose changelog it writes."""
    return Topology(epoch=epoch, subtopologies=[
        Subtopology(subtopology_id="0", source_topics=["input"], repartition_sink_topics=["app-repartition"]),
        Subtopology(subtopology_id="1", source_topics=[],
                    repartition_source_topics=[TopicInfo(name="app-repartition")],
                    state_changelog_topics=[TopicInfo(name="app-store-changelog",
                                                      topic_configs=[])]),
    ])


def join(group: StreamsGroup, topics: Topics, member_id: str, process: str | None = None,
         topology: Topology | None = None, config: StreamsGroupConfig = CONFIG):
    req = StreamsHeartbeatRequest(group_id="g", member_id=member_id, member_epoch=0, rebalance_timeout_ms=30000,
                                  topology=topology or word_count(), process_id=process or member_id,
                                  active_tasks={}, standby_tasks={}, warmup_tasks={})
    validate(req)
    return heartbeat(group, req, topics, config)


def beat(group: StreamsGroup, topics: Topics, member_id: str, epoch: int, active=None):
    req = StreamsHeartbeatRequest(group_id="g", member_id=member_id, member_epoch=epoch,
                                  active_tasks=active, standby_tasks=None if active is None else {},
                                  warmup_tasks=None if active is None else {})
    validate(req)
    return heartbeat(group, req, topics, CONFIG)


def count(tasks) -> int:
    return sum(len(ps) for ps in tasks.values())


def test_internal_topics_are_sized_from_the_topology():
    configured = configure_topology(word_count(), Topics(input=4))
    assert configured.tasks == {"0": 4, "1": 4}
    assert configured.missing_internal == [TopicNeed("app-repartition", 4), TopicNeed("app-store-changelog", 4)]
    # A repartition topic with a fixed count keeps it, and sizes its readers.
    fixed = word_count()
    fixed.subtopologies[1].repartition_source_topics[0].partitions = 2
    assert configure_topology(fixed, Topics(input=4)).tasks == {"0": 4, "1": 2}
    # Existing internal topics of the wrong size cannot run.
    wrong = configure_topology(word_count(), Topics(input=4, **{"app-repartition": 3, "app-store-changelog": 4}))
    assert [c for c, _ in wrong.status] == [StatusCode.INCORRECTLY_PARTITIONED_TOPICS]


def test_a_member_without_its_source_topics_gets_no_tasks_and_the_status():
    group = StreamsGroup("g")
    r = join(group, Topics(), "a")
    assert r.error == ErrorCode.NONE and r.member_epoch == 1
    assert (StatusCode.MISSING_SOURCE_TOPICS, "Source topics input are missing.") in r.status
    assert r.assignment == Assignment()
    assert group.state() == GroupState.NOT_READY


def test_missing_internal_topics_are_reported_then_the_tasks_given():
    group = StreamsGroup("g")
    topics = Topics(input=2)
    r = join(group, topics, "a")
    assert [c for c, _ in r.status] == [StatusCode.MISSING_INTERNAL_TOPICS]
    assert [t.name for t in r.missing_internal_topics] == ["app-repartition", "app-store-changelog"]
    assert count(r.assignment.active) == 0
    # The coordinator created them: the group epoch moves and the member gets every task.
    topics = Topics(input=2, **{"app-repartition": 2, "app-store-changelog": 2})
    r = beat(group, topics, "a", r.member_epoch, active={})
    assert r.status == [] and r.member_epoch == 2
    assert r.assignment.active == {"0": frozenset({0, 1}), "1": frozenset({0, 1})}
    assert group.state() == GroupState.STABLE


def ready_topics() -> Topics:
    return Topics(input=4, **{"app-repartition": 4, "app-store-changelog": 4})


def test_a_second_member_gets_its_tasks_only_after_the_first_revoked_them():
    group = StreamsGroup("g")
    topics = ready_topics()
    a = join(group, topics, "a")
    assert count(a.assignment.active) == 8
    b = join(group, topics, "b")
    assert b.member_epoch == 2 and count(b.assignment.active) == 0  # a still holds them all
    assert group.members["b"].state == MemberState.UNRELEASED_TASKS
    # a is told to give up half; it keeps its epoch until it reports them gone.
    owned_a = a.assignment.active
    r = beat(group, topics, "a", 1, active=owned_a)
    assert r.member_epoch == 1 and count(r.assignment.active) == 4
    assert group.members["a"].state == MemberState.UNREVOKED_TASKS
    assert group.state() == GroupState.RECONCILING
    r = beat(group, topics, "a", 1, active=r.assignment.active)
    assert r.member_epoch == 2 and r.assignment is None  # nothing new for it
    r = beat(group, topics, "b", 2, active={})
    assert count(r.assignment.active) == 4
    both = [group.members[m].assigned.active for m in ("a", "b")]
    assert not any(both[0].get(s, frozenset()) & both[1].get(s, frozenset()) for s in ("0", "1"))
    assert group.state() == GroupState.STABLE


def test_epochs_are_fenced_and_unknown_members_refused():
    group = StreamsGroup("g")
    topics = ready_topics()
    join(group, topics, "a")
    with pytest.raises(HeartbeatError) as e:
        beat(group, topics, "a", 5)
    assert e.value.code == ErrorCode.FENCED_MEMBER_EPOCH
    with pytest.raises(HeartbeatError) as e:
        beat(group, topics, "nobody", 1)
    assert e.value.code == ErrorCode.UNKNOWN_MEMBER_ID


def test_leaving_and_expiry_move_the_tasks_to_the_others():
    group = StreamsGroup("g")
    topics = ready_topics()
    a = join(group, topics, "a")
    join(group, topics, "b")
    beat(group, topics, "a", 1, active=a.assignment.active)
    r = leave(group, "a", None, -1)
    assert r.member_epoch == -1 and r.cancel_session and "a" not in group.members
    r = beat(group, topics, "b", 2, active={})
    assert count(r.assignment.active) == 8
    fence(group, "b")
    assert group.state() == GroupState.EMPTY


def test_validation_follows_kafka():
    def invalid(**kw) -> str:
        base = dict(group_id="g", member_id="m", member_epoch=0, rebalance_timeout_ms=1000, topology=word_count())
        with pytest.raises(HeartbeatError) as e:
            validate(StreamsHeartbeatRequest(**{**base, **kw}))
        return f"{e.value.code.name}: {e.value.message}"
    assert invalid(rebalance_timeout_ms=-1) == "INVALID_REQUEST: RebalanceTimeoutMs must be provided in first request."
    assert invalid(topology=None) == "INVALID_REQUEST: Topology must be non-null when (re-)joining."
    assert invalid(member_id="") == "INVALID_REQUEST: MemberId can't be empty."
    assert invalid(member_epoch=3) == "INVALID_REQUEST: Topology can only be provided when (re-)joining."
    assert invalid(member_epoch=-3, topology=None) == \
        "INVALID_REQUEST: MemberEpoch is -3, but must be greater than or equal to -2."
    bad = word_count()
    bad.subtopologies[1].state_changelog_topics[0].partitions = 3
    assert invalid(topology=bad) == ("STREAMS_INVALID_TOPOLOGY: Changelog topic app-store-changelog must have an "
                                     "undefined partition count, but it is set to 3.")


def test_the_assignor_is_sticky_and_places_standbys_on_other_processes():
    members = {m: StreamsGroupMember(m, process_id=p) for m, p in (("a", "p1"), ("b", "p2"), ("c", "p3"))}
    first = assign({m: members[m] for m in ("a", "b")}, {"0": 6}, {}, 1)
    assert sorted(count(x.active) for x in first.values()) == [3, 3]
    for x in first.values():
        assert not (x.active.get("0", frozenset()) & x.standby.get("0", frozenset()))
    second = assign(members, {"0": 6}, first, 1)
    assert sorted(count(x.active) for x in second.values()) == [2, 2, 2]
    for m in ("a", "b"):  # what a and b keep, they had before
        assert second[m].active["0"] <= first[m].active["0"]


def test_the_records_bring_the_group_back_as_it_was():
    """What a coordinator taking the group over loads: every record encoded and decoded as
    __consumer_offsets holds them, replayed into a new group."""
    from rivulet.coordinator.offsets_topic import consumer_group_record, read_consumer_group_value, read_message_key
    from rivulet.coordinator.streams_group import snapshot

    group = StreamsGroup("g")
    topics = ready_topics()
    a = join(group, topics, "a")
    join(group, topics, "b")
    beat(group, topics, "a", 1, active=a.assignment.active)  # a revoking: tasks pending revocation
    loaded = StreamsGroup("g")
    for k, v in snapshot(group):
        key_bytes, value_bytes = consumer_group_record(k, v)
        key = read_message_key(key_bytes)
        loaded.replay(key.key, read_consumer_group_value(key, value_bytes))
    assert (loaded.group_epoch, loaded.target_epoch) == (group.group_epoch, group.target_epoch)
    assert loaded.members == group.members and loaded.target == group.target
    assert loaded.topology == group.topology
    assert group.members["a"].pending_revocation and group.members["a"].state == MemberState.UNREVOKED_TASKS
    # Tombstones remove a member.
    for k, v in loaded.delete_records()[:3]:
        loaded.replay(k, v)
    assert list(loaded.members) == ["b"]
