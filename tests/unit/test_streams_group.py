"""KIP-1071 streams groups: StreamsGroupHeartbeat's state machine (join, epochs, fencing,
revocation before reassignment, leave), the topology's internal topics, and the sticky assignor."""

from __future__ import annotations

import pytest

from rivulet.coordinator.modern_group import GroupState, HeartbeatError, MemberState
from rivulet.coordinator.streams_group import (
    Assignment,
    assign_delayed,
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
from rivulet.protocol.messages.streams_group_heartbeat_request import CopartitionGroup, Subtopology, TopicInfo, Topology
from test_consumer_group import Topics

CONFIG = StreamsGroupConfig(initial_rebalance_delay_ms=0, assignment_interval_ms=0)  # the delays' own tests set them


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
    return heartbeat(group, req, topics, config, 0.0)


def beat(group: StreamsGroup, topics: Topics, member_id: str, epoch: int, active=None):
    req = StreamsHeartbeatRequest(group_id="g", member_id=member_id, member_epoch=epoch,
                                  active_tasks=active, standby_tasks=None if active is None else {},
                                  warmup_tasks=None if active is None else {})
    validate(req)
    return heartbeat(group, req, topics, CONFIG, 0.0)


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
    assert r.error == ErrorCode.NONE and r.member_epoch == 2  # a new group's first epoch, as Kafka's
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
    assert (group.group_epoch, r.member_epoch) == (2, 2)  # as Kafka 4.3.1: a new group starts at 2
    # The coordinator created them: the group epoch moves and the member gets every task.
    topics = Topics(input=2, **{"app-repartition": 2, "app-store-changelog": 2})
    r = beat(group, topics, "a", r.member_epoch, active={})
    assert r.status == [] and (group.group_epoch, r.member_epoch) == (3, 3)
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
    assert b.member_epoch == 3 and count(b.assignment.active) == 0  # a still holds them all
    assert group.members["b"].state == MemberState.UNRELEASED_TASKS
    # a is told to give up half; it keeps its epoch until it reports them gone.
    owned_a = a.assignment.active
    r = beat(group, topics, "a", 2, active=owned_a)
    assert r.member_epoch == 2 and count(r.assignment.active) == 4
    assert group.members["a"].state == MemberState.UNREVOKED_TASKS
    assert group.state() == GroupState.RECONCILING
    r = beat(group, topics, "a", 2, active=r.assignment.active)
    assert r.member_epoch == 3 and r.assignment is None  # nothing new for it
    r = beat(group, topics, "b", 3, active={})
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
        beat(group, topics, "nobody", 2)
    assert e.value.code == ErrorCode.UNKNOWN_MEMBER_ID


def test_leaving_and_expiry_move_the_tasks_to_the_others():
    group = StreamsGroup("g")
    topics = ready_topics()
    a = join(group, topics, "a")
    join(group, topics, "b")
    beat(group, topics, "a", 2, active=a.assignment.active)
    r = leave(group, "a")
    assert r.member_epoch == -1 and r.cancel_session and "a" not in group.members
    r = beat(group, topics, "b", 3, active={})
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
    beat(group, topics, "a", 2, active=a.assignment.active)  # a revoking: tasks pending revocation
    loaded = StreamsGroup("g")
    for k, v in snapshot(group):
        key_bytes, value_bytes = consumer_group_record(k, v)
        key = read_message_key(key_bytes)
        loaded.replay(key.key, read_consumer_group_value(key, value_bytes))
    assert (loaded.group_epoch, loaded.target_epoch) == (group.group_epoch, group.target_epoch)
    assert loaded.members == group.members and loaded.target == group.target
    assert loaded.topology == group.topology
    assert group.members["a"].pending_revocation.active and group.members["a"].state == MemberState.UNREVOKED_TASKS
    # Tombstones remove a member.
    for k, v in loaded.delete_records()[:3]:
        loaded.replay(k, v)
    assert list(loaded.members) == ["b"]


def joined_topology(copartition: list[CopartitionGroup], repartition_partitions: int = 0) -> Topology:
    """A join: subtopology 0 reads ``left`` and ``right`` (and the repartition topic) together."""
    return Topology(epoch=1, subtopologies=[
        Subtopology(subtopology_id="0", source_topics=["left", "right"],
                    repartition_source_topics=[TopicInfo(name="app-rekeyed", partitions=repartition_partitions)],
                    copartition_groups=copartition),
        Subtopology(subtopology_id="1", source_topics=["other"], repartition_sink_topics=["app-rekeyed"]),
    ])


def test_copartitioned_source_topics_must_agree_and_a_flexible_repartition_topic_follows_them():
    both = [CopartitionGroup(source_topics=[0, 1], repartition_source_topics=[0])]
    # The repartition topic would take its writer's 6 partitions; copartitioned with 3-partition
    # sources it takes theirs, and so do the tasks reading it.
    ok = configure_topology(joined_topology(both), Topics(left=3, right=3, other=6))
    assert ok.status == [] and ok.tasks == {"0": 3, "1": 6}
    assert ok.missing_internal == [TopicNeed("app-rekeyed", 3)]
    bad = configure_topology(joined_topology(both), Topics(left=3, right=4, other=6))
    assert bad.status == [(StatusCode.INCORRECTLY_PARTITIONED_TOPICS,
                           "Following topics do not have the same number of partitions: [{left=3, right=4}]")]
    # A repartition topic whose count the topology fixes cannot be coerced.
    fixed = configure_topology(joined_topology(both, repartition_partitions=5), Topics(left=3, right=3, other=6))
    assert fixed.status == [(StatusCode.INCORRECTLY_PARTITIONED_TOPICS,
                             "Number of partitions [5] of repartition topic [app-rekeyed] doesn't match number of "
                             "partitions [3] of the source topic.")]
    # Not copartitioned: nothing to agree on.
    assert configure_topology(joined_topology([]), Topics(left=3, right=4, other=6)).status == []


def test_a_member_revoking_tasks_gets_its_rebalance_timeout_and_it_ends_once_revoked():
    group = StreamsGroup("g")
    topics = ready_topics()
    a = join(group, topics, "a")
    assert a.revocation_timeout_ms is None
    join(group, topics, "b")
    r = beat(group, topics, "a", 2, active=a.assignment.active)
    assert r.revocation_timeout_ms == 30000 and not r.cancel_revocation  # the joining request's timeout
    r2 = beat(group, topics, "a", 2, active=a.assignment.active)  # still revoking: the deadline runs on
    assert r2.revocation_timeout_ms is None and not r2.cancel_revocation
    r = beat(group, topics, "a", 2, active=r.assignment.active)
    assert r.cancel_revocation and r.member_epoch == 3


def test_members_with_an_endpoint_are_told_where_the_partitions_are_when_their_epoch_is_behind():
    group = StreamsGroup("g")
    topics = ready_topics()

    def with_endpoint(member_id: str, port: int):
        req = StreamsHeartbeatRequest(group_id="g", member_id=member_id, member_epoch=0, rebalance_timeout_ms=30000,
                                      topology=word_count(), process_id=member_id, user_endpoint=("h", port),
                                      active_tasks={}, standby_tasks={}, warmup_tasks={})
        return heartbeat(group, req, topics, CONFIG, 0.0)
    a = with_endpoint("a", 1)
    assert [(e.host, e.port) for e in a.partitions_by_user_endpoint] == [("h", 1)]
    # Every task's partition of the subtopology's input and repartition topics.
    assert a.partitions_by_user_endpoint[0].active == [("input", [0, 1, 2, 3]), ("app-repartition", [0, 1, 2, 3])]
    # Up to date: nothing sent.
    req = StreamsHeartbeatRequest(group_id="g", member_id="a", member_epoch=2,
                                  endpoint_information_epoch=a.endpoint_information_epoch)
    assert heartbeat(group, req, topics, CONFIG, 0.0).partitions_by_user_endpoint is None
    b = with_endpoint("b", 2)
    assert b.endpoint_information_epoch > a.endpoint_information_epoch
    assert sorted(e.port for e in b.partitions_by_user_endpoint) == [1, 2]
    # A member without an endpoint joining, or one leaving, moves nothing an endpoint serves yet.
    c = join(group, topics, "c")
    assert c.endpoint_information_epoch == b.endpoint_information_epoch
    fence(group, "c")
    assert group.endpoint_information_epoch == b.endpoint_information_epoch


DELAYED = "Assignment delayed due to the configured initial rebalance delay."


def test_a_new_group_waits_out_its_initial_rebalance_delay_then_assigns_once_to_all():
    """As Kafka 4.3.1 answers (checked against it): members joining during the delay wait at epoch 1
    with no tasks and ASSIGNMENT_DELAYED; when it ends, one assignment at the group epoch for all."""
    config = StreamsGroupConfig(initial_rebalance_delay_ms=3000, assignment_interval_ms=0)
    group = StreamsGroup("g")
    topics = ready_topics()
    a = join(group, topics, "a", config=config)
    assert a.initial_delay_ms == 3000  # the coordinator arms the delay
    assert (a.member_epoch, a.status, a.assignment) == (1, [(StatusCode.ASSIGNMENT_DELAYED, DELAYED)], Assignment())
    assert (group.group_epoch, group.target_epoch, group.state()) == (2, 1, GroupState.ASSIGNING)
    b = join(group, topics, "b", config=config)
    assert b.initial_delay_ms is None  # one delay per group
    assert (b.member_epoch, b.status, count(b.assignment.active)) == (1, [(StatusCode.ASSIGNMENT_DELAYED, DELAYED)], 0)
    r = beat(group, topics, "a", 1, active={})
    assert (r.member_epoch, r.status, r.assignment) == (1, [(StatusCode.ASSIGNMENT_DELAYED, DELAYED)], None)

    assert assign_delayed(group, config, 0.0)
    assert (group.group_epoch, group.target_epoch) == (3, 3)
    ra, rb = beat(group, topics, "a", 1, active={}), beat(group, topics, "b", 1, active={})
    assert (ra.member_epoch, rb.member_epoch, ra.status, rb.status) == (3, 3, [], [])
    assert count(ra.assignment.active) == count(rb.assignment.active) == 4
    assert group.state() == GroupState.STABLE


def test_the_initial_rebalance_delay_starts_again_once_the_group_emptied_and_is_off_at_zero():
    config = StreamsGroupConfig(initial_rebalance_delay_ms=3000, assignment_interval_ms=0)
    group = StreamsGroup("g")
    topics = ready_topics()
    join(group, topics, "a", config=config)
    fence(group, "a")
    assert not assign_delayed(group, config, 0.0)  # ended with nobody left: nothing to assign
    again = join(group, topics, "b", config=config)
    assert again.initial_delay_ms == 3000 and again.member_epoch == 1
    # Without a delay a new group assigns at once.
    now = join(StreamsGroup("h"), topics, "a")
    assert (now.initial_delay_ms, now.member_epoch, now.status, count(now.assignment.active)) == (None, 2, [], 8)


def test_a_change_within_the_assignment_interval_is_assigned_once_it_has_passed():
    """As Kafka 4.3.1 answers (checked against it, assignment interval 1 s): b joining just after
    a's assignment waits at the present target epoch with ASSIGNMENT_DELAYED, and a keeps its tasks;
    the first heartbeat after the interval computes the new target."""
    config = StreamsGroupConfig(initial_rebalance_delay_ms=0, assignment_interval_ms=1000)
    group = StreamsGroup("g")
    topics = ready_topics()

    def at(now_ms: float, member_id: str, epoch: int, active=None):
        req = StreamsHeartbeatRequest(group_id="g", member_id=member_id, member_epoch=epoch, rebalance_timeout_ms=30000,
                                      topology=word_count() if epoch == 0 else None, process_id=member_id,
                                      active_tasks={} if active is None else active, standby_tasks={}, warmup_tasks={})
        validate(req)
        return heartbeat(group, req, topics, config, now_ms)
    a = at(0, "a", 0)
    assert (a.member_epoch, a.status, count(a.assignment.active)) == (2, [], 8)  # the first assignment: at once
    interval = [(StatusCode.ASSIGNMENT_DELAYED, "Assignment delayed due to the configured assignment interval.")]
    b = at(100, "b", 0)
    assert (b.member_epoch, b.status, count(b.assignment.active)) == (2, interval, 0)
    assert (group.group_epoch, group.target_epoch, group.state()) == (3, 2, GroupState.ASSIGNING)
    r = at(900, "a", 2, a.assignment.active)
    assert (r.member_epoch, r.status, r.assignment) == (2, interval, None)
    r = at(1000, "a", 2, a.assignment.active)  # the interval has passed: a gives half up
    assert (r.member_epoch, r.status, count(r.assignment.active)) == (2, [], 4)
    assert group.target_epoch == 3


def test_an_older_topology_is_stale_at_every_heartbeat_and_another_one_refused():
    """As Kafka 4.3.1 answers (checked against it): a member with an older topology epoch is told
    so at each heartbeat; a newer or different topology is INVALID_REQUEST, even when the group is
    empty or the member is its only one."""
    group = StreamsGroup("g")
    topics = ready_topics()
    join(group, topics, "a")
    stale = (StatusCode.STALE_TOPOLOGY, "The member's topology epoch 0 is behind the group's topology epoch 1.")
    r = join(group, topics, "old", topology=word_count(epoch=0))
    assert stale in r.status
    assert stale in beat(group, topics, "old", r.member_epoch, active={}).status
    fence(group, "old")

    def refused(member_id: str) -> tuple[ErrorCode, str]:
        with pytest.raises(HeartbeatError) as e:
            join(group, topics, member_id, topology=word_count(epoch=2))
        return e.value.code, e.value.message
    updates = (ErrorCode.INVALID_REQUEST, "Topology updates are not supported yet.")
    assert refused("a") == updates  # the only member, rejoining
    assert refused("new") == updates
    fence(group, "a")
    assert refused("b") == updates  # the group is empty
    assert join(group, topics, "b").error == ErrorCode.NONE and group.topology.epoch == 1


def test_a_changed_standby_setting_moves_the_group_epoch_and_is_recorded():
    """As Kafka 4.3.1: num.standby.replicas (a group config) changing between heartbeats moves the
    group epoch, so the tasks are assigned again with it; the setting is in the group's record."""
    from rivulet.coordinator.streams_group import snapshot
    from rivulet.protocol.messages.streams_group_metadata_key import StreamsGroupMetadataKey

    group = StreamsGroup("g")
    topics = ready_topics()
    join(group, topics, "a", process="p1")
    join(group, topics, "b", process="p2")
    before = group.group_epoch
    beat(group, topics, "a", group.members["a"].member_epoch)
    assert group.group_epoch == before  # nothing changed
    with_standby = StreamsGroupConfig(initial_rebalance_delay_ms=0, assignment_interval_ms=0, num_standby_replicas=1)
    req = StreamsHeartbeatRequest(group_id="g", member_id="a", member_epoch=group.members["a"].member_epoch)
    heartbeat(group, req, topics, with_standby, 0.0)
    assert group.group_epoch == before + 1 and count(group.target["a"].standby) > 0
    metadata = next(v for k, v in snapshot(group) if isinstance(k, StreamsGroupMetadataKey))
    assert [(c.key, c.value) for c in metadata.last_assignment_configs] == [("num.standby.replicas", "1")]
    loaded = StreamsGroup("g")
    loaded.replay(StreamsGroupMetadataKey(group_id="g"), metadata)
    assert loaded.assignment_configs == {"num.standby.replicas": "1"}


def test_a_shutdown_request_names_the_first_member_that_asked_until_the_group_empties():
    group = StreamsGroup("g")
    topics = ready_topics()
    join(group, topics, "a")
    join(group, topics, "b")
    for member in ("b", "a"):
        req = StreamsHeartbeatRequest(group_id="g", member_id=member, member_epoch=group.members[member].member_epoch,
                                      shutdown_application=True)
        r = heartbeat(group, req, topics, CONFIG, 0.0)
    assert (StatusCode.SHUTDOWN_APPLICATION, "Streams group member b encountered a fatal error and requested a "
            "shutdown for the entire application.") in r.status
    leave(group, "a")
    leave(group, "b")
    assert group.shutdown_requested_by is None
    assert not [c for c, _ in join(group, topics, "c").status if c == StatusCode.SHUTDOWN_APPLICATION]


def test_a_full_group_refuses_a_new_member_but_not_its_own():
    """group.streams.max.size: a member joining a group that has that many is refused with
    Kafka's error and message; the members already in it go on heartbeating."""
    group, topics = StreamsGroup("g"), Topics(input=2)
    small = StreamsGroupConfig(initial_rebalance_delay_ms=0, assignment_interval_ms=0, max_size=1)
    first = join(group, topics, "a", config=small)
    with pytest.raises(HeartbeatError) as e:
        join(group, topics, "b", config=small)
    assert (e.value.code, e.value.message) == (
        ErrorCode.GROUP_MAX_SIZE_REACHED, "The streams group has reached its maximum capacity of 1 members.")
    assert set(group.members) == {"a"}
    assert join(group, topics, "a", config=small).member_epoch >= first.member_epoch


def test_a_standby_becomes_active_only_once_its_process_gave_the_standby_up():
    """As Kafka 4.3.1 when a peer dies: the survivor first drops its standby tasks (keeping its
    epoch), then takes the dead member's tasks it held no standby of, and those it did only at the
    heartbeat after, once no process holds them as standby any more. Kafka Streams' kill -9
    scenario (tests/java/StreamsEos.java) goes through the same three steps on both brokers."""
    config = StreamsGroupConfig(initial_rebalance_delay_ms=0, assignment_interval_ms=0, num_standby_replicas=1)
    group, topics = StreamsGroup("g"), ready_topics()

    def send(member_id: str, epoch: int, held: Assignment | None = None):
        req = StreamsHeartbeatRequest(
            group_id="g", member_id=member_id, member_epoch=epoch, rebalance_timeout_ms=30000 if epoch == 0 else -1,
            topology=word_count() if epoch == 0 else None, process_id=f"process-{member_id}" if epoch == 0 else None,
            active_tasks=None if held is None else held.active, standby_tasks=None if held is None else held.standby,
            warmup_tasks=None if held is None else held.warmup)
        validate(req)
        return heartbeat(group, req, topics, config, 0.0)

    held: dict[str, Assignment] = {}
    for m in ("a", "b"):
        r = send(m, 0, Assignment())
        held[m] = r.assignment
    for _ in range(4):  # until both hold their targets
        for m in ("a", "b"):
            r = send(m, group.members[m].member_epoch, held[m])
            if r.assignment is not None:
                held[m] = r.assignment
    a = group.members["a"]
    assert a.state == MemberState.STABLE and a.assigned == group.target["a"]
    everything = {"0": frozenset(range(4)), "1": frozenset(range(4))}
    assert count(a.assigned.active) == 4 and count(a.assigned.standby) > 0  # subtopology 1 keeps a store

    def minus(x, y):
        return {sub: ps - y.get(sub, frozenset()) for sub, ps in x.items() if ps - y.get(sub, frozenset())}
    free_of_b = minus(minus(everything, a.assigned.active), a.assigned.standby)  # b's, not a's standby

    fence(group, "b")
    first = send("a", a.member_epoch, held["a"])  # the new target has every task active on a
    assert first.member_epoch == a.member_epoch and group.members["a"].state == MemberState.UNREVOKED_TASKS
    assert first.assignment == Assignment(active=a.assigned.active)  # the standby tasks go first
    second = send("a", a.member_epoch, first.assignment)
    assert second.member_epoch == group.target_epoch and group.members["a"].state == MemberState.UNRELEASED_TASKS
    # Still standby tasks of a's process when this was computed: not yet.
    assert group.members["a"].assigned == Assignment(active={
        sub: a.assigned.active.get(sub, frozenset()) | free_of_b.get(sub, frozenset()) for sub in everything
        if a.assigned.active.get(sub) or free_of_b.get(sub)})
    third = send("a", second.member_epoch, group.members["a"].assigned)
    assert third.assignment == Assignment(active=everything)
    assert group.members["a"].state == MemberState.STABLE


def test_tasks_pending_revocation_of_every_kind_survive_a_coordinator_move():
    from rivulet.coordinator.offsets_topic import consumer_group_record, read_consumer_group_value, read_message_key
    from rivulet.coordinator.streams_group import snapshot

    group = StreamsGroup("g")
    join(group, ready_topics(), "a")
    revoking = Assignment(active={"0": frozenset({1})}, standby={"1": frozenset({2})}, warmup={"1": frozenset({3})})
    group.members["a"] = StreamsGroupMember("a", state=MemberState.UNREVOKED_TASKS, pending_revocation=revoking,
                                            member_epoch=group.members["a"].member_epoch)
    loaded = StreamsGroup("g")
    for k, v in snapshot(group):
        key_bytes, value_bytes = consumer_group_record(k, v)
        key = read_message_key(key_bytes)
        loaded.replay(key.key, read_consumer_group_value(key, value_bytes))
    assert loaded.members["a"].pending_revocation == revoking
