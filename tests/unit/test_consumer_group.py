"""KIP-848 consumer groups without sockets: the assignors, one member's reconciliation, the
heartbeat's records replayed into the group, and a randomized run checking that no partition
is ever usable by two members at once."""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass

import pytest

from rivulet.coordinator.assignors import MemberSpec, RangeAssignor, UniformAssignor
from rivulet.coordinator.consumer_group import (
    ConsumerGroup,
    ConsumerGroupMember,
    reconcile,
)
from rivulet.coordinator.modern_group import GroupState, MemberState
from rivulet.coordinator.consumer_heartbeat import (
    ConsumerGroupConfig,
    HeartbeatError,
    HeartbeatRequest,
    HeartbeatResult,
    fence,
    heartbeat,
    leave,
    validate,
)
from rivulet.protocol.errors import ErrorCode

pytestmark = pytest.mark.fast

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


@dataclass
class Topic:
    name: str
    topic_id: uuid.UUID
    num_partitions: int


class Topics:
    def __init__(self, **partitions: int) -> None:
        self.by_name = {n: Topic(n, uuid.UUID(int=i + 1), c) for i, (n, c) in enumerate(partitions.items())}
        self.racks: dict[tuple[str, int], frozenset[str]] = {}

    def get(self, name: str) -> Topic | None:
        return self.by_name.get(name)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return next((t.name for t in self.by_name.values() if t.topic_id == topic_id), None)

    def topic_names(self) -> list[str]:
        return list(self.by_name)

    def partition_racks(self, topic: str, partition: int) -> frozenset[str]:
        return self.racks.get((topic, partition), frozenset())


CONFIG = ConsumerGroupConfig(assignment_interval_ms=0)  # the interval's own tests set it


class Coordinator:
    """Drives the pure heartbeat as the group coordinator does: replay every record at once.
    It also round-trips each record through the codec, as loading would."""

    def __init__(self, topics: Topics, config: ConsumerGroupConfig = CONFIG) -> None:
        self.topics = topics
        self.config = config
        self.group = ConsumerGroup("g")
        self.log: list = []

    def apply(self, records) -> None:
        for key, value in records:
            key = type(key).decode(key.encode(0), 0, 0)
            if value is not None:
                value = type(value).decode(value.encode(0), 0, 0)
            self.log.append((key, value))
            self.group.replay(key, value)

    def beat(self, member_id: str, epoch: int, owned=None, topics=None, now: int = 0, **kw) -> HeartbeatResult:
        req = HeartbeatRequest("g", member_id, epoch, subscribed_topic_names=topics, owned=owned,
                               rebalance_timeout_ms=kw.pop("rebalance_timeout_ms", 30000 if epoch == 0 else -1), **kw)
        if epoch == 0 and owned is None:
            req.owned = []
        validate(req, 1, self.config)
        res = leave(self.group, req) if epoch < 0 else heartbeat(self.group, req, self.topics, self.config, now)
        self.apply(res.records)
        return res


def owned_list(assignment) -> list:
    return [(t, sorted(ps)) for t, ps in assignment.items()]


# ---------------------------------------------------------------------------- assignors

def test_uniform_balances_and_keeps_what_members_had():
    parts = {T1: 6, T2: 3}
    both = frozenset({T1, T2})
    first = UniformAssignor().assign({"a": MemberSpec(both), "b": MemberSpec(both)}, parts)
    assert sorted(sum(map(len, a.values())) for a in first.values()) == [4, 5]
    # A third member: each existing member gives up only what balance needs.
    specs = {m: MemberSpec(both, None, {t: frozenset(ps) for t, ps in a.items()}) for m, a in first.items()}
    specs["c"] = MemberSpec(both)
    second = UniformAssignor().assign(specs, parts)
    assert sorted(sum(map(len, a.values())) for a in second.values()) == [3, 3, 3]
    for m in ("a", "b"):
        for t, ps in second[m].items():
            assert ps <= first[m].get(t, set())  # nothing moved between a and b
    every = [(t, p) for a in second.values() for t, ps in a.items() for p in ps]
    assert len(every) == len(set(every)) == 9


def test_uniform_with_different_subscriptions_gives_each_topic_to_its_subscribers():
    result = UniformAssignor().assign(
        {"a": MemberSpec(frozenset({T1})), "b": MemberSpec(frozenset({T1, T2})), "c": MemberSpec(frozenset({T2}))},
        {T1: 4, T2: 2})
    assert set(result["a"]) <= {T1} and set(result["c"]) <= {T2}
    counts = sorted(sum(map(len, a.values())) for a in result.values())
    assert counts == [2, 2, 2]


def test_range_gives_contiguous_ranges_in_member_order():
    both = frozenset({T1, T2})
    result = RangeAssignor().assign({"m2": MemberSpec(both), "m1": MemberSpec(both)}, {T1: 5, T2: 2})
    assert result == {"m1": {T1: {0, 1, 2}, T2: {0}}, "m2": {T1: {3, 4}, T2: {1}}}


# ---------------------------------------------------------------------------- reconciliation

def test_a_member_revokes_before_moving_to_the_new_epoch():
    m = ConsumerGroupMember("a", member_epoch=1, assigned={T1: {0: 1, 1: 1}})
    step = reconcile(m, 2, {T1: {0}}, {T1}, lambda t, p: -1, owned=[(T1, [0, 1])])
    assert (step.state, step.member_epoch, dict(step.assigned), dict(step.pending_revocation)) == \
        (MemberState.UNREVOKED_PARTITIONS, 1, {T1: {0: 1}}, {T1: {1: 1}})
    # Not reported: it may still hold partition 1.
    assert reconcile(step, 2, {T1: {0}}, {T1}, lambda t, p: -1, owned=None) is step
    done = reconcile(step, 2, {T1: {0}}, {T1}, lambda t, p: -1, owned=[(T1, [0])])
    assert (done.state, done.member_epoch, done.previous_member_epoch, dict(done.assigned)) == \
        (MemberState.STABLE, 2, 1, {T1: {0: 1}})


def test_a_partition_still_held_elsewhere_is_not_given():
    m = ConsumerGroupMember("b", member_epoch=0)
    held = {(T1, 1)}
    step = reconcile(m, 2, {T1: {0, 1}}, {T1}, lambda t, p: 1 if (t, p) in held else -1, owned=[])
    assert (step.state, step.member_epoch, dict(step.assigned)) == (MemberState.UNRELEASED_PARTITIONS, 2, {T1: {0: 2}})
    held.clear()
    step = reconcile(step, 2, {T1: {0, 1}}, {T1}, lambda t, p: -1, owned=[(T1, [0])])
    assert (step.state, dict(step.assigned)) == (MemberState.STABLE, {T1: {0: 2, 1: 2}})


# ---------------------------------------------------------------------------- heartbeats

def test_two_members_hand_over_partitions_in_order():
    c = Coordinator(Topics(t=4))
    r = c.beat("a", 0, topics=["t"])
    assert (r.member_epoch, r.assignment) == (2, {T1: {0, 1, 2, 3}})
    assert c.group.state() == GroupState.STABLE
    r = c.beat("b", 0, topics=["t"])
    assert r.member_epoch == 3 and r.assignment == {}  # its partitions are still a's
    assert c.group.members["b"].state == MemberState.UNRELEASED_PARTITIONS
    assert c.group.state() == GroupState.RECONCILING
    r = c.beat("a", 2)  # a is told to give two up, and stays at epoch 2 until it has
    assert r.member_epoch == 2 and len(r.assignment[T1]) == 2
    kept = r.assignment
    r = c.beat("b", 3)  # nothing released yet
    assert r.assignment is None and c.group.members["b"].assigned == {}
    r = c.beat("a", 2, owned=owned_list(kept))
    assert r.member_epoch == 3 and r.assignment == kept
    r = c.beat("b", 3, owned=[])
    assert r.assignment == {T1: {0, 1, 2, 3} - kept[T1]}
    assert c.group.state() == GroupState.STABLE


def test_a_change_within_the_assignment_interval_is_assigned_at_a_heartbeat_after_it():
    """As Kafka 4.3.1 answers (checked against it, tests/integration/test_assignment_interval.py):
    a new group's first assignment is at once, at epoch 2; b joining 100 ms later moves the group
    epoch to 3 but gets the target of epoch 2 (nothing); the next target waits for a heartbeat
    once consumer.assignment.interval.ms has passed since the last."""
    c = Coordinator(Topics(t=4), ConsumerGroupConfig(assignment_interval_ms=1000))
    r = c.beat("a", 0, topics=["t"], now=10_000)
    assert (r.member_epoch, r.assignment) == (2, {T1: {0, 1, 2, 3}})
    assert (c.group.group_epoch, c.group.target_assignment_epoch) == (2, 2)
    r = c.beat("b", 0, topics=["t"], now=10_100)
    assert (r.member_epoch, r.assignment) == (2, {})
    assert (c.group.group_epoch, c.group.target_assignment_epoch, c.group.state()) == (3, 2, GroupState.ASSIGNING)
    r = c.beat("a", 2, now=10_999)  # still within the interval: nothing moves
    assert (r.member_epoch, r.assignment, r.records) == (2, None, [])
    r = c.beat("b", 2, owned=[], now=11_000)  # the interval has passed: this heartbeat assigns
    assert r.member_epoch == 3 and c.group.target_assignment_epoch == 3
    assert len(c.group.target_assignment["b"][T1]) == 2 and c.group.state() == GroupState.RECONCILING
    r = c.beat("a", 2, now=11_100)  # a is told to give b's two up
    assert r.member_epoch == 2 and len(r.assignment[T1]) == 2


def test_a_zero_assignment_interval_assigns_every_change_at_once():
    c = Coordinator(Topics(t=4), ConsumerGroupConfig(assignment_interval_ms=0))
    c.beat("a", 0, topics=["t"], now=10_000)
    assert c.beat("b", 0, topics=["t"], now=10_000).member_epoch == 3
    assert c.group.target_assignment_epoch == 3


def test_epochs_are_checked_and_a_lost_response_is_forgiven():
    c = Coordinator(Topics(t=2))
    c.beat("a", 0, topics=["t"])
    with pytest.raises(HeartbeatError) as e:
        c.beat("a", 6)
    assert e.value.code == ErrorCode.FENCED_MEMBER_EPOCH
    c.beat("b", 0, topics=["t"])
    kept = c.beat("a", 2).assignment
    assert c.beat("a", 2, owned=owned_list(kept)).member_epoch == 3
    # Epoch 2 again (its previous epoch), owning part of its assignment: the response that
    # carried epoch 3 was lost, and the member is told its epoch again.
    assert c.beat("a", 2, owned=owned_list(kept)).member_epoch == 3
    with pytest.raises(HeartbeatError) as e:  # ...but not while owning more than that
        c.beat("a", 2, owned=[(T1, [0, 1])])
    assert e.value.code == ErrorCode.FENCED_MEMBER_EPOCH
    with pytest.raises(HeartbeatError) as e:
        c.beat("nobody", 4)
    assert e.value.code == ErrorCode.UNKNOWN_MEMBER_ID


def test_leaving_and_fencing_give_partitions_back():
    c = Coordinator(Topics(t=2))
    c.beat("a", 0, topics=["t"])
    c.beat("b", 0, topics=["t"])
    r = c.beat("a", 2)
    c.beat("a", 2, owned=owned_list(r.assignment))
    c.beat("b", 3, owned=[])
    r = c.beat("a", -1)
    assert r.member_epoch == -1 and "a" not in c.group.members
    r = c.beat("b", 3, owned=owned_list(c.group.members["b"].assigned_sets()))
    assert r.assignment == {T1: {0, 1}} and r.member_epoch == c.group.group_epoch
    c.apply(fence(c.group, "b"))
    assert c.group.state() == GroupState.EMPTY and c.group.partition_epoch(T1, 0) == -1


def test_a_new_partition_moves_the_group_epoch():
    topics = Topics(t=2)
    c = Coordinator(topics)
    c.beat("a", 0, topics=["t"])
    topics.by_name["t"].num_partitions = 3
    r = c.beat("a", 2)
    assert r.member_epoch == 3 and r.assignment == {T1: {0, 1, 2}}


def test_replaying_the_log_rebuilds_the_group():
    c = Coordinator(Topics(t=3, u=2))
    c.beat("a", 0, topics=["t", "u"], server_assignor="range")
    c.beat("b", 0, topics=["t"])
    r = c.beat("a", 2)
    copy = ConsumerGroup("g")
    for key, value in c.log:
        copy.replay(key, value)
    assert copy.members == c.group.members and copy.target_assignment == c.group.target_assignment
    assert (copy.group_epoch, copy.target_assignment_epoch, copy.target_assignment_timestamp_ms, copy.state()) == \
        (c.group.group_epoch, c.group.target_assignment_epoch, c.group.target_assignment_timestamp_ms, c.group.state())
    assert r.member_epoch == 2


def test_a_static_member_comes_back_to_its_partitions_without_a_rebalance():
    c = Coordinator(Topics(t=4))
    c.beat("a", 0, topics=["t"], instance_id="i1")
    r = c.beat("b", 0, topics=["t"], instance_id="i2")
    kept = c.beat("a", 2, instance_id="i1").assignment
    c.beat("a", 2, owned=owned_list(kept), instance_id="i1")
    c.beat("b", 3, owned=[], instance_id="i2")
    with pytest.raises(HeartbeatError) as e:  # i1 is still in use
        c.beat("a2", 0, topics=["t"], instance_id="i1")
    assert e.value.code == ErrorCode.UNRELEASED_INSTANCE_ID
    assert c.beat("a", -2, instance_id="i1").member_epoch == -2
    assert c.group.members["a"].assigned_sets() == kept  # held for it until its session ends
    epoch = c.group.group_epoch
    r = c.beat("a2", 0, topics=["t"], instance_id="i1")
    assert r.assignment == kept and c.group.group_epoch == epoch and "a" not in c.group.members
    with pytest.raises(HeartbeatError) as e:  # the old incarnation is fenced
        c.beat("a", 3, instance_id="i1")
    assert e.value.code == ErrorCode.FENCED_INSTANCE_ID


def test_a_regular_expression_follows_the_topics_it_matches():
    topics = Topics(**{"orders-eu": 2, "orders-us": 1, "payments": 2})
    c = Coordinator(topics)
    r = c.beat("a", 0, subscribed_topic_regex="orders-.*")
    assert r.assignment == {T1: {0, 1}, uuid.UUID(int=2): {0}}
    assert c.group.resolved_regexes["orders-.*"].topics == {"orders-eu", "orders-us"}
    topics.by_name["orders-ap"] = Topic("orders-ap", uuid.UUID(int=9), 1)
    r = c.beat("a", r.member_epoch)
    assert r.assignment[uuid.UUID(int=9)] == {0} and c.group.resolved_regexes["orders-.*"].version == 2
    c.beat("a", -1)
    c.beat("b", 0, topics=["payments"])
    assert "orders-.*" not in c.group.resolved_regexes  # nobody subscribes with it any more


@pytest.mark.parametrize("change,code,message", [
    (dict(group_id=""), ErrorCode.INVALID_REQUEST, "GroupId can't be empty."),
    (dict(member_id=""), ErrorCode.INVALID_REQUEST, "MemberId can't be empty."),
    (dict(rebalance_timeout_ms=-1), ErrorCode.INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request."),
    (dict(owned=[(T1, [0])]), ErrorCode.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining."),
    (dict(subscribed_topic_names=None), ErrorCode.INVALID_REQUEST,
     "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."),
    (dict(instance_id=""), ErrorCode.INVALID_REQUEST, "InstanceId can't be empty."),
    (dict(subscribed_topic_regex="orders-("), ErrorCode.INVALID_REGULAR_EXPRESSION,
     "SubscribedTopicRegex `orders-(` is not a valid regular expression: missing closing )."),
    (dict(server_assignor="sticky"), ErrorCode.UNSUPPORTED_ASSIGNOR,
     "ServerAssignor sticky is not supported. Supported assignors: uniform, range."),
])
def test_invalid_heartbeats_are_refused_with_kafkas_reasons(change, code, message):
    req = HeartbeatRequest("g", "m", 0, rebalance_timeout_ms=1000, subscribed_topic_names=["t"], owned=[])
    for k, v in change.items():
        setattr(req, k, v)
    with pytest.raises(HeartbeatError) as e:
        validate(req, 1, CONFIG)
    assert (e.value.code, e.value.message) == (code, message)


@pytest.mark.parametrize("seed", range(12))
def test_randomized_members_never_share_a_partition(seed):
    """Members join, leave, heartbeat in any order and sometimes without reporting; at every
    moment the partitions each member was told it may use are disjoint, and once everyone
    heartbeats enough the group is stable with every partition owned."""
    rnd = random.Random(seed)
    c = Coordinator(Topics(t=7, u=3))
    usable: dict[str, dict] = {}  # what each member was last told it may use
    epochs: dict[str, int] = {}
    names = [f"m{i}" for i in range(6)]

    def step(member_id: str) -> None:
        if member_id not in epochs:
            subs = rnd.choice([["t"], ["t", "u"], ["u"]])
            r = c.beat(member_id, 0, topics=subs, server_assignor=rnd.choice([None, "range"]))
        else:
            report = rnd.random() < 0.8
            owned = owned_list(usable.get(member_id, {})) if report else None
            r = c.beat(member_id, epochs[member_id], owned=owned)
        epochs[member_id] = r.member_epoch
        if r.assignment is not None:
            usable[member_id] = r.assignment
        seen: dict = {}
        for m, a in usable.items():
            for t, ps in a.items():
                for p in ps:
                    assert (t, p) not in seen, f"{(t, p)} usable by {seen.get((t, p))} and {m}"
                    seen[(t, p)] = m

    for _ in range(300):
        action = rnd.random()
        member_id = rnd.choice(names)
        if action < 0.1 and member_id in epochs:
            c.beat(member_id, -1)
            del epochs[member_id]
            usable.pop(member_id, None)
        else:
            step(member_id)
    for _ in range(6):
        for member_id in list(epochs):
            c.beat(member_id, epochs[member_id], owned=owned_list(usable.get(member_id, {})))
            r = c.beat(member_id, epochs[member_id], owned=owned_list(usable.get(member_id, {})))
            epochs[member_id] = r.member_epoch
            usable[member_id] = r.assignment
    assert c.group.state() in (GroupState.STABLE, GroupState.EMPTY)
    subscribed = {n for m in c.group.members.values() for n in m.subscribed_topic_names}
    want = {(c.topics.get(n).topic_id, p) for n in subscribed for p in range(c.topics.get(n).num_partitions)}
    got = {(t, p) for a in usable.values() for t, ps in a.items() for p in ps}
    assert got == want


# ---------------------------------------------------------------------------- online migration

from rivulet.coordinator import consumer_group_classic as classic  # noqa: E402
from rivulet.coordinator.group_metadata import GroupMetadata, MemberMetadata  # noqa: E402
from rivulet.coordinator.group_migration import (  # noqa: E402
    ConversionError,
    classic_assignment,
    classic_members,
    consumer_group_records,
    downgrades,
    upgrade_refused,
)
from rivulet.protocol.consumer_protocol import (  # noqa: E402
    Subscription,
    decode_assignment,
    encode_assignment,
    encode_subscription,
)


def classic_join(c: Coordinator, member_id: str, owned=(), version: int = 1) -> classic.ClassicJoinResult:
    meta = encode_subscription(Subscription(["t"], owned=list(owned)), version)
    r = classic.join(c.group, classic.ClassicJoin("g", member_id, None, False, "client", "/127.0.0.1", 30000,
                                                  10000, "consumer", [("range", meta)]), c.topics, CONFIG, 0)
    c.apply(r.records)
    return r


def test_a_classic_member_of_a_consumer_group_reconciles_through_its_rejoins():
    c = Coordinator(Topics(t=4))
    c.beat("new", 0, topics=["t"])
    r = classic_join(c, "old")
    # It joins at once with its member epoch as generation, owning nothing yet: all is new's.
    assert (r.error, r.generation_id, r.protocol_name) == (ErrorCode.NONE, 3, "range")
    assert decode_assignment(classic.sync(c.group, "old", None, 3, "consumer", "range", c.topics))[0] == []
    assert c.group.members["old"].state == MemberState.UNRELEASED_PARTITIONS
    with pytest.raises(HeartbeatError) as e:
        classic.sync(c.group, "old", None, 2, "consumer", "range", c.topics)
    assert e.value.code == ErrorCode.ILLEGAL_GENERATION
    assert classic.heartbeat(c.group, "old", None, 3) == ErrorCode.NONE  # still waiting for new's partitions
    kept = c.beat("new", 2).assignment
    c.beat("new", 2, owned=owned_list(kept))
    # new let two go: old is told to rejoin, and gets them.
    assert classic.heartbeat(c.group, "old", None, 3) == ErrorCode.REBALANCE_IN_PROGRESS
    r = classic_join(c, "old")
    got = decode_assignment(classic.sync(c.group, "old", None, r.generation_id, None, None, c.topics))[0]
    assert sorted(p for _, p in got) == sorted({0, 1, 2, 3} - kept[T1])
    assert c.group.state() == GroupState.STABLE
    assert classic.heartbeat(c.group, "old", None, r.generation_id) == ErrorCode.NONE


def test_a_classic_member_revokes_through_its_sync_before_rejoining():
    c = Coordinator(Topics(t=4))
    c.beat("new", 0, topics=["t"])
    c.beat("new", 2)
    classic_join(c, "old")
    kept = c.beat("new", 2).assignment
    c.beat("new", 2, owned=owned_list(kept))
    r = classic_join(c, "old")
    old = sorted(p for _, p in decode_assignment(classic.sync(c.group, "old", None, r.generation_id, None, None,
                                                                c.topics))[0])
    # Two more members arrive: old must give a partition up. Told on its heartbeat, it rejoins
    # still owning both (cooperative), and its sync gives it only what it keeps.
    c.beat("third", 0, topics=["t"])
    c.beat("fourth", 0, topics=["t"])
    assert classic.heartbeat(c.group, "old", None, r.generation_id) == ErrorCode.REBALANCE_IN_PROGRESS
    r = classic_join(c, "old", owned=[("t", p) for p in old])
    assert c.group.members["old"].state == MemberState.UNREVOKED_PARTITIONS
    assert r.generation_id == 3  # its epoch does not move until it has revoked
    left = decode_assignment(classic.sync(c.group, "old", None, 3, None, None, c.topics))[0]
    assert len(left) == 1 and left[0][1] in old
    r = classic_join(c, "old", owned=left)
    assert r.generation_id == c.group.group_epoch and c.group.members["old"].state != MemberState.UNREVOKED_PARTITIONS


def test_classic_requests_of_unknown_or_new_protocol_members_are_refused():
    c = Coordinator(Topics(t=2))
    c.beat("new", 0, topics=["t"])
    with pytest.raises(HeartbeatError) as e:
        classic.heartbeat(c.group, "new", None, 1)  # it speaks the consumer protocol
    assert e.value.code == ErrorCode.UNKNOWN_MEMBER_ID
    with pytest.raises(HeartbeatError) as e:
        classic.heartbeat(c.group, "nobody", None, 1)
    assert e.value.code == ErrorCode.UNKNOWN_MEMBER_ID
    r = classic.join(c.group, classic.ClassicJoin("g", "", None, True, "c", "h", 30000, 10000, "consumer",
                                                  [("range", encode_subscription(Subscription(["t"])))]),
                     c.topics, CONFIG, 0)
    assert r.error == ErrorCode.MEMBER_ID_REQUIRED and r.member_id and not r.records
    classic_join(c, "old")
    r = classic.join(c.group, classic.ClassicJoin("g", "other", None, False, "c", "h", 30000, 10000, "consumer",
                                                  [("roundrobin", encode_subscription(Subscription(["t"])))]),
                     c.topics, CONFIG, 0)
    assert r.error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL  # old speaks range only
    results, removed, records = classic.leave(c.group, [("old", None, None), ("new", None, None)])
    assert [e for _, _, e in results] == [ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID] and removed == ["old"]
    c.apply(records)
    assert set(c.group.members) == {"new"}


def classic_group(topics: Topics, assignment_user_data: bytes | None = None) -> GroupMetadata:
    g = GroupMetadata("g")
    for member_id, parts in (("a", [0, 1]), ("b", [2, 3])):
        m = MemberMetadata(member_id, None, "client", "/h", 30000, 10000, "consumer",
                           [("range", encode_subscription(Subscription(["t"]), 1))])
        g.add(m)
        m.assignment = encode_assignment([("t", p) for p in parts], assignment_user_data, 1)
    g.generation_id = 5
    g.protocol_name = "range"
    return g


def test_a_classic_group_converts_with_each_member_keeping_its_partitions_and_back():
    topics = Topics(t=4)
    g = classic_group(topics)
    assert upgrade_refused(g, CONFIG) is None
    assert upgrade_refused(g, ConsumerGroupConfig(migration_policy="downgrade")) is not None
    c = Coordinator(topics)
    c.apply(consumer_group_records(g, topics))
    assert c.group.group_epoch == 5 and c.group.target_assignment_epoch == 5
    assert {m: (x.member_epoch, x.assigned_sets()) for m, x in c.group.members.items()} == \
        {"a": (5, {T1: {0, 1}}), "b": (5, {T1: {2, 3}})}
    # A member of the consumer protocol joins: the classic ones are told to rejoin.
    c.beat("new", 0, topics=["t"])
    assert c.group.group_epoch == 6
    assert classic.heartbeat(c.group, "a", None, 5) == ErrorCode.REBALANCE_IN_PROGRESS
    # It leaves: the group may go back to classic, with the remaining members at the group epoch.
    assert downgrades(c.group, "new", CONFIG) and not downgrades(c.group, "a", CONFIG)
    assert not downgrades(c.group, "new", ConsumerGroupConfig(migration_policy="upgrade"))
    back = classic_members(c.group, "new")
    assert sorted(m.member_id for m in back) == ["a", "b"]
    for m in back:
        assignment = decode_assignment(classic_assignment(c.group, m, "range", topics))[0]
        assert {p for _, p in assignment} == c.group.target_assignment[m.member_id].get(T1, set())
    tombstones = c.group.tombstone_records()
    c.apply(tombstones)
    assert not c.group.members and c.group.group_epoch == 6


def test_a_classic_group_with_assignor_user_data_is_not_converted():
    topics = Topics(t=4)
    with pytest.raises(ConversionError):
        consumer_group_records(classic_group(topics, b"sticky"), topics)


# ---------------------------------------------------------------------------- racks

def rack_of(layout: dict[int, str]):
    return lambda _topic_id, p: frozenset((layout[p],))


@pytest.mark.parametrize("assignor", [UniformAssignor(), RangeAssignor()])
def test_members_get_partitions_in_their_rack_at_no_cost_in_balance(assignor):
    members = {"m1": MemberSpec(frozenset({T1}), "rack-b"), "m2": MemberSpec(frozenset({T1}), "rack-a")}
    layout = {0: "rack-a", 1: "rack-a", 2: "rack-b", 3: "rack-b", 4: "rack-a", 5: "rack-b"}
    result = assignor.assign(members, {T1: 6}, rack_of(layout))
    assert result == {"m1": {T1: {2, 3, 5}}, "m2": {T1: {0, 1, 4}}}
    # All replicas in one rack: balance first, as without racks.
    lopsided = assignor.assign(members, {T1: 6}, rack_of(dict.fromkeys(range(6), "rack-a")))
    assert sorted(len(a[T1]) for a in lopsided.values()) == [3, 3]
    assert assignor.assign(members, {T1: 6}) == assignor.assign(
        {m: MemberSpec(s.subscribed_topic_ids) for m, s in members.items()}, {T1: 6})


def test_the_heartbeat_passes_the_replicas_racks_to_the_assignor():
    topics = Topics(t=4)
    topics.racks = {("t", p): frozenset(("east" if p % 2 else "west",)) for p in range(4)}
    c = Coordinator(topics)
    c.beat("a", 0, topics=["t"], rack_id="east")
    c.beat("a", 2)
    c.beat("b", 0, topics=["t"], rack_id="west")
    kept = c.beat("a", 2).assignment
    assert kept == {T1: {1, 3}}  # a keeps the partitions in its rack, b gets the others
