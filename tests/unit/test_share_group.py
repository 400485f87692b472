"""KIP-932 share groups without sockets: the simple assignor, ShareGroupHeartbeat's steps and
errors, replay of the ShareGroup* records, and the coordinator around them (sessions through
the purgatory, reloading __consumer_offsets, group kinds that do not mix, list/describe/delete)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from rivulet.coordinator.assignors import MemberSpec, SimpleAssignor
from rivulet.coordinator.consumer_heartbeat import HeartbeatRequest, HeartbeatResult
from rivulet.coordinator.modern_group import GroupState, HeartbeatError
from rivulet.coordinator.group_coordinator import GroupCoordinator
from rivulet.coordinator.share_group import (
    ShareGroup,
    ShareGroupConfig,
    ShareHeartbeatRequest,
    ShareHeartbeatResult,
    heartbeat,
    initialized_record,
    leave,
    validate,
)
from rivulet.common.types import TopicPartition
from rivulet.coordinator.group_metadata import OffsetAndMetadata
from rivulet.protocol.errors import ApiError, ErrorCode
from test_consumer_group import Topics
from test_group_support import Member, group_handlers, make_coordinator, new_coordinator

pytestmark = pytest.mark.fast

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


def spec(*topics: uuid.UUID, assigned=None) -> MemberSpec:
    return MemberSpec(frozenset(topics), None, assigned or {})


def counts(result) -> dict[str, int]:
    return {m: sum(len(ps) for ps in a.values()) for m, a in result.items()}


def holders(result) -> dict[tuple[uuid.UUID, int], int]:
    out: dict[tuple[uuid.UUID, int], int] = {}
    for a in result.values():
        for t, ps in a.items():
            for p in ps:
                out[(t, p)] = out.get((t, p), 0) + 1
    return out


# ---------------------------------------------------------------- the simple assignor


def test_fewer_members_than_partitions_each_partition_once_and_balanced():
    result = SimpleAssignor().assign({m: spec(T1) for m in "abc"}, {T1: 8})
    assert sorted(counts(result).values()) == [2, 3, 3]
    assert holders(result) == {(T1, p): 1 for p in range(8)}


def test_more_members_than_partitions_share_them():
    # 5 members over 2 partitions: each partition shared by ceil(5/2) = 3, 6 places over 5 members.
    result = SimpleAssignor().assign({m: spec(T1) for m in "abcde"}, {T1: 2})
    assert set(holders(result).values()) == {3}
    assert sorted(counts(result).values()) == [1, 1, 1, 1, 2]
    # Every member gets something: none idles, unlike a consumer group.
    assert all(result[m] for m in "abcde")


def test_one_partition_goes_to_every_member():
    result = SimpleAssignor().assign({m: spec(T1) for m in "abcd"}, {T1: 1})
    assert all(a == {T1: {0}} for a in result.values())


def test_sticky_within_balance():
    members = {"a": spec(T1, assigned={T1: frozenset({0, 1, 2, 3})}), "b": spec(T1)}
    result = SimpleAssignor().assign(members, {T1: 4})
    assert counts(result) == {"a": 2, "b": 2}
    assert result["a"][T1] <= {0, 1, 2, 3} and result["a"][T1] | result["b"][T1] == {0, 1, 2, 3}
    again = SimpleAssignor().assign({m: spec(T1, assigned={T1: frozenset(result[m][T1])}) for m in "ab"}, {T1: 4})
    assert again == result


def test_heterogeneous_subscriptions_cover_every_partition_with_subscribers_only():
    members = {"a": spec(T1), "b": spec(T1, T2), "c": spec(T2)}
    result = SimpleAssignor().assign(members, {T1: 3, T2: 1})
    assert set(holders(result)) == {(T1, 0), (T1, 1), (T1, 2), (T2, 0)}
    assert T2 not in result["a"] and T1 not in result["c"]


def test_heterogeneous_subscriptions_balance_each_topic_on_its_own():
    # As Kafka's example: a on T1, c on T2, b on both gets half of each.
    members = {"a": spec(T1), "b": spec(T1, T2), "c": spec(T2)}
    result = SimpleAssignor().assign(members, {T1: 4, T2: 2})
    assert holders(result) == {**{(T1, p): 1 for p in range(4)}, **{(T2, p): 1 for p in range(2)}}
    assert (len(result["a"][T1]), len(result["b"][T1]), len(result["b"][T2]), len(result["c"][T2])) == (2, 2, 1, 1)
    # Three subscribers of a one-partition topic share it.
    result = SimpleAssignor().assign({"a": spec(T1, T2), "b": spec(T1), "c": spec(T1)}, {T1: 1, T2: 2})
    assert holders(result)[(T1, 0)] == 3 and result["a"][T2] == {0, 1}


def test_no_partitions_no_assignment():
    assert SimpleAssignor().assign({"a": spec(T1)}, {}) == {"a": {}}


# ---------------------------------------------------------------- ShareGroupHeartbeat, pure


class Group:
    """Runs heartbeats as the service does: replay every record, round-tripped through its codec,
    and record the partitions a heartbeat names initialized once it is done (the service without
    a share coordinator). ``initialized``: the topics' share state exists from the start (else
    a first member gets partitions only at a heartbeat after their state is initialized)."""

    def __init__(self, topics: Topics, config: ShareGroupConfig = ShareGroupConfig(assignment_interval_ms=0),
                 initialized: bool = True) -> None:
        self.topics = topics
        self.config = config
        self.group = ShareGroup("g")
        self.log: list = []
        self.beat_initializes = True
        if initialized:
            self.apply([self.group.state_partitions_record(
                {t.topic_id: (n, frozenset(range(t.num_partitions))) for n, t in topics.by_name.items()})])

    def apply(self, records) -> None:
        for key, value in records:
            key = type(key).decode(key.encode(0), 0, 0)
            if value is not None:
                value = type(value).decode(value.encode(0), 0, 0)
            self.log.append((key, value))
            self.group.replay(key, value)

    def beat(self, member_id: str, epoch: int, topics: list[str] | None = None, now: int = 0) -> ShareHeartbeatResult:
        req = ShareHeartbeatRequest("g", member_id, epoch, subscribed_topic_names=topics, client_id="c",
                                    client_host="/127.0.0.1")
        validate(req)
        result = leave(self.group, req) if epoch < 0 else heartbeat(self.group, req, self.topics, self.config, now)
        self.apply(result.records)
        if result.initialize and self.beat_initializes:
            self.apply([initialized_record(self.group, result.initialize, {})])
        return result

    def replayed(self) -> ShareGroup:
        fresh = ShareGroup("g")
        for key, value in self.log:
            fresh.replay(key, value)
        return fresh


def test_join_gets_every_partition_and_the_group_epoch():
    g = Group(Topics(t=3))
    r = g.beat("m1", 0, ["t"])
    assert (r.error, r.member_epoch, r.heartbeat_interval_ms, r.session_timeout_ms) == (ErrorCode.NONE, 2, 5000, 45000)
    assert r.assignment == {T1: {0, 1, 2}}
    assert g.group.state() == GroupState.STABLE
    assert (g.group.group_epoch, g.group.target_assignment_epoch) == (2, 2)
    assert g.group.initialized == {T1: ("t", frozenset({0, 1, 2}))}


def test_second_member_splits_and_the_first_moves_on_its_next_heartbeat():
    g = Group(Topics(t=4))
    g.beat("m1", 0, ["t"])
    r2 = g.beat("m2", 0, ["t"])
    assert r2.member_epoch == 3
    r1 = g.beat("m1", 2)
    assert r1.member_epoch == 3
    assert r1.assignment is not None and r2.assignment is not None
    assert r1.assignment[T1] | r2.assignment[T1] == {0, 1, 2, 3}
    assert len(r1.assignment[T1]) == len(r2.assignment[T1]) == 2
    # Nothing changed since: no assignment in the answer, no records.
    again = g.beat("m1", 3)
    assert again.assignment is None and again.records == [] and again.member_epoch == 3


def test_a_change_within_the_assignment_interval_is_assigned_at_a_heartbeat_after_it():
    """As Kafka 4.3.1 (KIP-1263): m2 joining 100 ms after the first assignment gets the target
    of epoch 2 (nothing), the group epoch at 3; a heartbeat once share.assignment.interval.ms
    has passed computes the next, and each member takes its part at its next heartbeat."""
    g = Group(Topics(t=4), ShareGroupConfig(assignment_interval_ms=1000))
    assert g.beat("m1", 0, ["t"], now=10_000).member_epoch == 2
    r2 = g.beat("m2", 0, ["t"], now=10_100)
    assert (r2.member_epoch, r2.assignment) == (2, {})
    assert (g.group.group_epoch, g.group.target_assignment_epoch) == (3, 2)
    r1 = g.beat("m1", 2, now=10_999)
    assert (r1.member_epoch, r1.assignment, r1.records) == (2, None, [])
    r2 = g.beat("m2", 2, now=11_000)
    assert r2.member_epoch == 3 and len(r2.assignment[T1]) == 2
    r1 = g.beat("m1", 2, now=11_100)
    assert r1.member_epoch == 3 and r1.assignment[T1] == {0, 1, 2, 3} - r2.assignment[T1]
    assert g.replayed().target_assignment_timestamp_ms == 11_000


def test_the_assignment_interval_is_the_brokers_unless_the_group_sets_its_own():
    from rivulet.coordinator.group_config import GroupConfigs
    from rivulet.server.config import BrokerConfig
    from test_group_support import FakeCluster
    b = FakeCluster(**{"group.share.assignment.interval.ms": 5000})
    configs = GroupConfigs(BrokerConfig({"group.share.assignment.interval.ms": "5000"}).items())
    configs.set_group("fast", {"share.assignment.interval.ms": "0"})
    c = GroupCoordinator(b.config, b.replica_manager, b.metadata, b, b.node, b.timer, b.clock, configs,
                         streams_topics=b)
    c.startup()
    b.add_topic("t", 2)
    for group in ("fast", "slow"):
        assert share_beat(c, "m1", 0, ["t"], group=group).member_epoch == 2
        b.advance(1000)
    assert share_beat(c, "m2", 0, ["t"], group="fast").member_epoch == 3  # its own interval: 0
    assert share_beat(c, "m2", 0, ["t"], group="slow").member_epoch == 2  # the broker's 5 s have not passed
    b.advance(4000)
    assert share_beat(c, "m2", 2, group="slow").member_epoch == 3


def test_more_members_than_partitions_all_get_assignments():
    g = Group(Topics(t=1))
    results = [g.beat(f"m{i}", 0, ["t"]) for i in range(3)]
    assert all(r.assignment == {T1: {0}} for r in results)


def test_subscription_change_bumps_the_epoch_and_moves_the_assignment():
    g = Group(Topics(a=1, b=2))
    g.beat("m1", 0, ["a"])
    r = g.beat("m1", 2, ["a", "b"])
    assert r.member_epoch == 3 and r.assignment == {T1: {0}, T2: {0, 1}}
    r = g.beat("m1", 3, ["b"])
    assert r.member_epoch == 4 and r.assignment == {T2: {0, 1}}


def test_a_full_request_is_answered_with_the_assignment():
    g = Group(Topics(t=2))
    g.beat("m1", 0, ["t"])
    assert g.beat("m1", 2, ["t"]).assignment == {T1: {0, 1}}


def test_topic_created_later_is_assigned_once_its_share_state_is_initialized():
    topics = Topics(t=1)
    g = Group(topics)
    assert g.beat("m1", 0, ["t", "later"]).assignment == {T1: {0}}
    topics.by_name["later"] = type(topics.by_name["t"])("later", T2, 2)
    r = g.beat("m1", 2)  # the new topic moves the group epoch, but has no share state yet
    assert r.member_epoch == 3 and r.assignment is None and r.initialize == {T2: ("later", frozenset({0, 1}))}
    r = g.beat("m1", 3)  # initialized since: the group epoch moves again and assigns it
    assert r.member_epoch == 4 and r.assignment == {T1: {0}, T2: {0, 1}}


def test_only_partitions_with_initialized_share_state_are_assigned_as_kafka():
    """As Kafka 4.3.1: the first member gets the group epoch and no partitions; its heartbeat
    records the subscribed partitions initializing and names them for the service; once they
    are recorded initialized, its next heartbeat moves the group epoch and assigns them.
    Partitions whose initialization failed leave initializing and are asked for again."""
    g = Group(Topics(t=3), initialized=False)
    g.beat_initializes = False
    r = g.beat("m1", 0, ["t"])
    assert (r.member_epoch, r.assignment, r.initialize) == (2, {}, {T1: ("t", frozenset({0, 1, 2}))})
    assert (g.group.initializing, g.group.initialized) == ({T1: ("t", frozenset({0, 1, 2}))}, {})
    r = g.beat("m1", 2)  # still being initialized: nothing new, nothing asked for again
    assert (r.member_epoch, r.assignment, r.initialize, r.records) == (2, None, {}, [])
    g.apply([initialized_record(g.group, {T1: ("t", frozenset({0, 2}))}, {T1: ("t", frozenset({1}))})])
    assert (g.group.initializing, g.group.initialized) == ({}, {T1: ("t", frozenset({0, 2}))})
    r = g.beat("m1", 2)
    assert (r.member_epoch, r.assignment, r.initialize) == (3, {T1: {0, 2}}, {T1: ("t", frozenset({1}))})
    g.apply([initialized_record(g.group, r.initialize, {})])
    r = g.beat("m1", 3)
    assert (r.member_epoch, r.assignment) == (4, {T1: {0, 1, 2}})
    assert (g.group.group_epoch, g.group.target_assignment_epoch) == (4, 4)
    assert g.beat("m1", 4).records == []  # all assigned: the group epoch stays


def test_a_deleted_topic_leaves_the_assignment_and_the_state_metadata():
    topics = Topics(a=1, b=2)
    g = Group(topics)
    g.beat("m1", 0, ["a", "b"])
    assert set(g.group.initialized) == {T1, T2}
    del topics.by_name["b"]
    r = g.beat("m1", 2)
    assert r.member_epoch == 3 and r.assignment == {T1: {0}}
    assert g.group.initialized == {T1: ("a", frozenset({0}))}
    assert g.replayed().initialized == g.group.initialized


def test_epoch_errors_and_the_lost_response():
    g = Group(Topics(t=2))
    g.beat("m1", 0, ["t"])
    g.beat("m2", 0, ["t"])
    g.beat("m1", 2)  # m1 now at 3, previous 2
    with pytest.raises(HeartbeatError) as e:
        g.beat("m1", 4)
    assert e.value.code == ErrorCode.FENCED_MEMBER_EPOCH
    assert g.beat("m1", 2).member_epoch == 3  # its last answer was lost: the previous epoch is fine
    with pytest.raises(HeartbeatError) as e:
        g.beat("m2", 6)
    assert e.value.code == ErrorCode.FENCED_MEMBER_EPOCH
    with pytest.raises(HeartbeatError) as e:
        g.beat("nobody", 2)
    assert e.value.code == ErrorCode.UNKNOWN_MEMBER_ID
    assert e.value.message == "Member nobody is not a member of group g."


def test_smaller_epoch_than_previous_is_fenced():
    g = Group(Topics(t=2))
    g.beat("m1", 0, ["t"])
    g.beat("m2", 0, ["t"])
    g.beat("m1", 2)
    g.beat("m3", 0, ["t"])
    g.beat("m1", 3)  # m1 at 4, previous 3
    with pytest.raises(HeartbeatError) as e:
        g.beat("m1", 2)
    assert e.value.code == ErrorCode.FENCED_MEMBER_EPOCH
    assert e.value.message == ("The share group member has a smaller member epoch (2) than the one known by the "
                               "group coordinator (4), and it does not match the previous member epoch (3). The "
                               "member must abandon all its partitions and rejoin.")
    # A known member cannot rejoin at epoch 0 once it moved on: it must leave first.
    with pytest.raises(HeartbeatError) as e:
        g.beat("m1", 0, ["t"])
    assert e.value.code == ErrorCode.FENCED_MEMBER_EPOCH


def test_leave_removes_the_member_and_bumps_the_epoch():
    g = Group(Topics(t=2))
    g.beat("m1", 0, ["t"])
    g.beat("m2", 0, ["t"])
    assert len(g.beat("m1", 2).assignment[T1]) == 1
    r = g.beat("m2", -1)
    assert (r.member_epoch, r.cancel_session) == (-1, True)
    assert set(g.group.members) == {"m1"} and "m2" not in g.group.target_assignment
    assert g.group.group_epoch == 4
    assert g.beat("m1", 3).assignment == {T1: {0, 1}}
    with pytest.raises(HeartbeatError) as e:
        g.beat("m2", -1)
    assert e.value.code == ErrorCode.UNKNOWN_MEMBER_ID
    g.beat("m1", -1)
    assert g.group.state() == GroupState.EMPTY


def test_group_max_size():
    g = Group(Topics(t=1), ShareGroupConfig(max_size=1, assignment_interval_ms=0))
    g.beat("m1", 0, ["t"])
    with pytest.raises(HeartbeatError) as e:
        g.beat("m2", 0, ["t"])
    assert e.value.code == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert e.value.message == "The share group has reached its maximum capacity of 1 members."
    assert g.beat("m1", 0, ["t"]).error == ErrorCode.NONE  # a member already in is not counted again
    with pytest.raises(HeartbeatError) as e:
        g.beat("m3", 1)  # the group is full before the member is looked up, as Kafka checks
    assert e.value.code == ErrorCode.GROUP_MAX_SIZE_REACHED


@pytest.mark.parametrize("req,message", [
    (ShareHeartbeatRequest("g", "", 0, subscribed_topic_names=["t"]), "MemberId can't be empty."),
    (ShareHeartbeatRequest("", "m", 0, subscribed_topic_names=["t"]), "GroupId can't be empty."),
    (ShareHeartbeatRequest("g", "m", 0, rack_id=" ", subscribed_topic_names=["t"]), "RackId can't be empty."),
    (ShareHeartbeatRequest("g", "m", 0), "SubscribedTopicNames must be set in first request."),
    (ShareHeartbeatRequest("g", "m", 0, subscribed_topic_names=[]), "SubscribedTopicNames must be set in first "
                                                                     "request."),
    (ShareHeartbeatRequest("g", "m", -2), "MemberEpoch is invalid."),
])
def test_invalid_requests(req, message):
    with pytest.raises(HeartbeatError) as e:
        validate(req)
    assert (e.value.code, e.value.message) == (ErrorCode.INVALID_REQUEST, message)


def test_replaying_the_records_rebuilds_the_group():
    g = Group(Topics(a=3, b=1))
    g.beat("m1", 0, ["a"])
    g.beat("m2", 0, ["a", "b"])
    g.beat("m1", 2)
    g.beat("m3", 0, ["b"])
    g.beat("m3", -1)
    fresh = g.replayed()
    assert fresh.members == g.group.members
    assert fresh.target_assignment == g.group.target_assignment
    assert (fresh.group_epoch, fresh.target_assignment_epoch, fresh.metadata_hash) == \
        (g.group.group_epoch, g.group.target_assignment_epoch, g.group.metadata_hash)
    assert fresh.initialized == g.group.initialized


# ---------------------------------------------------------------- the coordinator


class Answers:
    def __init__(self) -> None:
        self.results: list = []

    def __call__(self, result) -> None:
        self.results.append(result)

    @property
    def last(self):
        return self.results[-1]


def share_beat(c, member_id: str, epoch: int, topics: list[str] | None = None, group: str = "sg"):
    answers = Answers()
    c.handle_share_group_heartbeat(ShareHeartbeatRequest(group, member_id, epoch, subscribed_topic_names=topics,
                                                         client_id="cli", client_host="/127.0.0.1"), answers)
    return answers.last


def test_session_expiry_fences_through_the_purgatory():
    c, b = make_coordinator(**{"group.share.session.timeout.ms": 10000, "group.share.assignment.interval.ms": 0})
    b.add_topic("t", 2)
    assert share_beat(c, "m1", 0, ["t"]).member_epoch == 2
    assert share_beat(c, "m2", 0, ["t"]).member_epoch == 3
    b.advance(6000)
    assert share_beat(c, "m1", 2).member_epoch == 3  # m1 renews its session; m2 stays silent
    b.advance(6000)
    share = c.manager.get_group("sg").share
    assert set(share.members) == {"m1"} and share.group_epoch == 4
    r = share_beat(c, "m1", 3)
    assert r.member_epoch == 4 and r.assignment is not None and r.assignment[b.metadata.get("t").topic_id] == {0, 1}
    assert share_beat(c, "m2", 3).error == ErrorCode.UNKNOWN_MEMBER_ID


def test_group_config_sets_the_interval_and_the_session():
    from rivulet.coordinator.group_config import GroupConfigs
    from rivulet.server.config import BrokerConfig
    from test_group_support import FakeCluster
    b = FakeCluster()
    configs = GroupConfigs(BrokerConfig({}).items())
    configs.set_group("sg", {"share.heartbeat.interval.ms": "7000", "share.session.timeout.ms": "50000"})
    c = GroupCoordinator(b.config, b.replica_manager, b.metadata, b, b.node, b.timer, b.clock, configs,
                         streams_topics=b)
    c.startup()
    b.add_topic("t", 1)
    assert share_beat(c, "m1", 0, ["t"]).heartbeat_interval_ms == 7000
    assert share_beat(c, "m1", 0, ["t"], group="other").heartbeat_interval_ms == 5000
    b.advance(46000)  # past the broker's 45 s session, within the group's 50 s
    assert set(c.manager.get_group("sg").share.members) == {"m1"}
    assert c.manager.get_group("other").share.members == {}
    b.advance(5000)
    assert c.manager.get_group("sg").share.members == {}


def test_restart_reloads_the_group_from_the_log():
    c, b = make_coordinator()
    b.add_topic("t", 3)
    share_beat(c, "m1", 0, ["t"])
    share_beat(c, "m2", 0, ["t"])
    b.advance(1000)  # group.share.assignment.interval.ms: m1's heartbeat computes the next assignment
    assert share_beat(c, "m1", 2).member_epoch == 3
    before = c.manager.get_group("sg").share
    c.shutdown()
    c2 = new_coordinator(b)
    c2.startup()
    after = c2.manager.get_group("sg").share
    assert after is not None
    assert after.members == before.members and after.target_assignment == before.target_assignment
    assert (after.group_epoch, after.target_assignment_epoch) == (before.group_epoch, before.target_assignment_epoch)
    assert after.initialized == before.initialized
    # The members carry on at their epochs with the new coordinator, whose sessions run again.
    assert share_beat(c2, "m1", 3).error == ErrorCode.NONE
    b.advance(50000)
    assert c2.manager.get_group("sg").share.members.keys() == set()


class ShareState:
    """The share coordinator as the group coordinator reaches it: records each initialization;
    ``refuse`` partitions fail once."""

    def __init__(self, refuse: set[TopicPartition] | None = None) -> None:
        self.initialized: list[tuple[str, TopicPartition, int]] = []
        self.refuse = set(refuse or ())

    async def share_state_summary(self, group_id: str, tp: TopicPartition) -> tuple[int, int, int] | None:
        return None

    async def initialize_share_state(self, group_id: str, tp: TopicPartition, start_offset: int) -> None:
        if tp in self.refuse:
            self.refuse.discard(tp)
            raise ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        self.initialized.append((group_id, tp, start_offset))

    async def delete_share_state(self, group_id: str, tps: list[TopicPartition]) -> None:
        return None


async def loaded(beat):
    """The answer once the coordinator has loaded its partitions (off the loop when one runs)."""
    for _ in range(500):
        r = beat()
        if r.error != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            return r
        await asyncio.sleep(0.01)
    raise AssertionError("the coordinator never loaded")


def test_the_coordinator_initializes_share_state_in_the_share_coordinator_before_assigning():
    """Kafka's persister call after a heartbeat: InitializeShareGroupState without a start offset
    (-1: share.auto.offset.reset decides at the first fetch), then the partitions are recorded
    initialized and the member's next heartbeat gets them; a failed one is asked for again."""
    from test_group_support import FakeCluster

    async def main() -> None:
        b = FakeCluster(**{"group.share.assignment.interval.ms": 0})
        state = ShareState(refuse={TopicPartition("t", 1)})
        c = GroupCoordinator(b.config, b.replica_manager, b.metadata, b, b.node, b.timer, b.clock,
                             streams_topics=b, share_state=state)
        c.startup()
        b.add_topic("t", 3)
        tid = b.metadata.get("t").topic_id
        r = await loaded(lambda: share_beat(c, "m1", 0, ["t"]))
        assert (r.member_epoch, r.assignment) == (2, {})
        for _ in range(5):
            await asyncio.sleep(0)
        assert state.initialized == [("sg", TopicPartition("t", 0), -1), ("sg", TopicPartition("t", 2), -1)]
        share = c.manager.get_group("sg").share
        assert (share.initialized, share.initializing) == ({tid: ("t", frozenset({0, 2}))}, {})
        r = share_beat(c, "m1", 2)
        assert (r.member_epoch, r.assignment) == (3, {tid: {0, 2}})
        for _ in range(5):
            await asyncio.sleep(0)
        assert state.initialized[-1] == ("sg", TopicPartition("t", 1), -1)
        r = share_beat(c, "m1", 3)
        assert (r.member_epoch, r.assignment) == (4, {tid: {0, 1, 2}})
        # A coordinator that loads a group with partitions still recorded initializing (its
        # predecessor stopped before the outcome) initializes them again.
        c.manager.get_group("sg").share.replay(*share.state_partitions_record(
            share.initialized, {tid: ("t", frozenset({1}))}))
        c.manager.store_consumer_group_records("sg", [share.state_partitions_record(
            share.initialized, {tid: ("t", frozenset({1}))})], lambda _e: None)
        c.shutdown()
        c2 = GroupCoordinator(b.config, b.replica_manager, b.metadata, b, b.node, b.timer, b.clock,
                              streams_topics=b, share_state=state)
        c2.startup()
        await loaded(lambda: share_beat(c2, "m1", 4))
        for _ in range(5):
            await asyncio.sleep(0)
        assert state.initialized[-1] == ("sg", TopicPartition("t", 1), -1) and len(state.initialized) == 4
        assert c2.manager.get_group("sg").share.initializing == {}
    asyncio.run(main())


def test_group_id_not_found_and_kinds_that_do_not_mix():
    c, b = make_coordinator()
    b.add_topic("t", 1)
    r = share_beat(c, "m1", 3)
    assert (r.error, r.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Share group sg not found.")
    r = share_beat(c, "m1", -1)
    assert (r.error, r.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group sg not found.")
    share_beat(c, "m1", 0, ["t"])
    # A consumer group's heartbeat on a share group's id, and the other way round.
    answers = Answers()
    c.handle_consumer_group_heartbeat(HeartbeatRequest("sg", "x", 0, rebalance_timeout_ms=1000,
                                                       subscribed_topic_names=["t"], owned=[]), 1, answers)
    assert (answers.last.error, answers.last.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND,
                                                                "Group sg is not a consumer group.")
    c.handle_consumer_group_heartbeat(HeartbeatRequest("cg", "x", 0, rebalance_timeout_ms=1000,
                                                       subscribed_topic_names=["t"], owned=[]), 1, answers)
    assert isinstance(answers.last, HeartbeatResult) and answers.last.error == ErrorCode.NONE
    r = share_beat(c, "y", 0, ["t"], group="cg")
    assert (r.error, r.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group cg is not a share group.")
    # A classic member cannot join a share group.
    m = Member(c, "sg")
    m.join()
    assert m.join_result.error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    # Nor commit offsets to it.
    committed = Answers()
    tp = TopicPartition("t", 0)
    c.handle_commit_offsets("sg", "", None, -1, {tp: OffsetAndMetadata(1, None, "", 0, None)}, committed, 9)
    assert committed.last == {tp: ErrorCode.GROUP_ID_NOT_FOUND}
    assert c.handle_fetch_offsets("sg", False, None)[0] == ErrorCode.GROUP_ID_NOT_FOUND


def test_list_describe_and_delete():
    deleted: list = []
    c, b = make_coordinator(lambda group_id, tps: deleted.append((group_id, tps)))
    b.add_topic("t", 1)
    share_beat(c, "m1", 0, ["t"])
    _, groups = c.handle_list_groups(types=["share"])
    assert [(g.group_id, g.group_type, g.protocol_type, g.state_name) for g in groups] == \
        [("sg", "share", "share", "Stable")]
    assert c.handle_list_groups(types=["consumer", "classic"])[1] == []
    assert [g.group_id for g in c.handle_list_groups(states=["stable"])[1]] == ["sg"]
    err, message, share = c.handle_share_group_describe("sg")
    assert err == ErrorCode.NONE and share is not None and list(share.members) == ["m1"]
    assert c.handle_share_group_describe("nope")[:2] == (ErrorCode.GROUP_ID_NOT_FOUND, "Group nope not found.")
    assert c.handle_describe_group("sg")[1][0] == "Dead"  # not a classic group
    assert c.handle_delete_groups(["sg"]) == {"sg": ErrorCode.NON_EMPTY_GROUP}
    share_beat(c, "m1", -1)
    assert c.handle_list_groups(states=["empty"])[1][0].group_id == "sg"
    c.manager.cleanup_expired_offsets()  # an empty share group does not expire
    assert c.manager.get_group("sg") is not None
    assert c.handle_delete_groups(["sg"]) == {"sg": ErrorCode.NONE}
    assert c.manager.get_group("sg") is None
    assert deleted == [("sg", [TopicPartition("t", 0)])]  # its share partitions' state goes too
    c.shutdown()
    c2 = new_coordinator(b)
    c2.startup()
    assert c2.manager.get_group("sg") is None  # the tombstones hold after a reload


def test_disabled_share_groups_are_neither_served_nor_listed():
    c, b = make_coordinator(**{"group.share.enable": False})
    assert c.share_groups_enabled is False
    served = group_handlers(c, b).handlers()
    assert 76 not in served and 77 not in served
    c, b = make_coordinator()
    served = group_handlers(c, b).handlers()
    assert 76 in served and 77 in served


def test_heartbeat_and_describe_on_the_wire():
    from rivulet.protocol.messages.share_group_describe_request import ShareGroupDescribeRequest
    from rivulet.protocol.messages.share_group_heartbeat_request import ShareGroupHeartbeatRequest
    from test_group_apis import call, setup
    c, b, apis = setup()
    topic_id = b.metadata.get("t").topic_id
    resp = call(apis, ShareGroupHeartbeatRequest(group_id="sg", member_id="m-1", member_epoch=0,
                                                 subscribed_topic_names=["t"]), 1)
    assert (resp.error_code, resp.member_id, resp.member_epoch, resp.heartbeat_interval_ms) == (0, "m-1", 2, 5000)
    assert resp.assignment.topic_partitions == []  # their share state is initialized after this answer
    b.advance(1000)  # group.share.assignment.interval.ms
    resp = call(apis, ShareGroupHeartbeatRequest(group_id="sg", member_id="m-1", member_epoch=2), 1)
    assert (resp.error_code, resp.member_epoch) == (0, 3)
    assert [(tp.topic_id, tp.partitions) for tp in resp.assignment.topic_partitions] == [(topic_id, [0, 1, 2])]
    resp = call(apis, ShareGroupHeartbeatRequest(group_id="sg", member_id="m-1", member_epoch=3), 1)
    assert (resp.error_code, resp.member_epoch, resp.assignment) == (0, 3, None)
    resp = call(apis, ShareGroupHeartbeatRequest(group_id="sg", member_id="m-1", member_epoch=0), 1)
    assert (resp.error_code, resp.error_message, resp.member_id) == (
        ErrorCode.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.", None)
    resp = call(apis, ShareGroupDescribeRequest(group_ids=["sg", "nope"], include_authorized_operations=True), 1)
    described, missing = resp.groups
    assert (described.error_code, described.group_state, described.group_epoch, described.assignment_epoch,
            described.assignor_name) == (0, "Stable", 3, 3, "simple")
    assert described.authorized_operations != -2147483648
    [m] = described.members
    assert (m.member_id, m.member_epoch, m.client_id, m.client_host, m.subscribed_topic_names) == (
        "m-1", 3, "cli", "/10.1.2.3", ["t"])
    assert [(tp.topic_name, tp.partitions) for tp in m.assignment.topic_partitions] == [("t", [0, 1, 2])]
    assert (missing.error_code, missing.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group nope not found.")
    resp = call(apis, ShareGroupHeartbeatRequest(group_id="sg", member_id="m-1", member_epoch=-1), 1)
    assert (resp.error_code, resp.member_epoch) == (0, -1)


@pytest.mark.parametrize("seed", range(20))
def test_simple_assignor_invariants_over_random_groups(seed):
    """Random groups and changes: every partition with a subscriber is held, only by its
    subscribers and at most ceil(subscribers / partitions) times; with one subscription for
    all, member counts differ by at most one; and an unchanged group keeps its assignment."""
    import random
    rnd = random.Random(seed)
    topics = [uuid.UUID(int=i + 1) for i in range(3)]
    counts_by_topic = {t: rnd.randint(1, 6) for t in topics}
    previous: dict = {}
    for _ in range(6):
        homogeneous = rnd.random() < 0.5
        common = frozenset(rnd.sample(topics, rnd.randint(1, 3)))
        members = {}
        for i in range(rnd.randint(1, 9)):
            subscribed = common if homogeneous else frozenset(rnd.sample(topics, rnd.randint(1, 3)))
            members[f"m{i}"] = MemberSpec(subscribed, None, {t: frozenset(ps) for t, ps in
                                                             previous.get(f"m{i}", {}).items()})
        result = SimpleAssignor().assign(members, counts_by_topic)
        held = holders(result)
        for t in topics:
            subscribers = [m for m, s in members.items() if t in s.subscribed_topic_ids]
            for p in range(counts_by_topic[t]):
                if subscribers:
                    assert 1 <= held.get((t, p), 0)
                    if not homogeneous:
                        assert held[(t, p)] <= -(-len(subscribers) // counts_by_topic[t])
                else:
                    assert (t, p) not in held
        for m, a in result.items():
            assert set(a) <= members[m].subscribed_topic_ids
        if homogeneous:
            sizes = counts(result).values()
            assert max(sizes) - min(sizes) <= 1
            total = sum(counts_by_topic[t] for t in common)
            assert max(held.values()) <= -(-len(members) // total)
        again = SimpleAssignor().assign({m: MemberSpec(s.subscribed_topic_ids, None, {
            t: frozenset(ps) for t, ps in result[m].items()}) for m, s in members.items()}, counts_by_topic)
        assert again == result
        previous = result


def test_resigning_the_partition_unloads_the_group_and_its_sessions():
    c, b = make_coordinator(**{"group.share.session.timeout.ms": 10000})
    b.add_topic("t", 1)
    share_beat(c, "m1", 0, ["t"])
    partition = c.partition_for("sg")
    appends = b.replica_manager.appends
    c.on_resign(partition)
    assert share_beat(c, "m1", 2).error == ErrorCode.NOT_COORDINATOR
    b.advance(20000)  # the unloaded member's session no longer runs: nothing is written
    assert b.replica_manager.appends == appends
    c.on_become_leader(partition)  # back: the group loads and its member gets a new session
    assert share_beat(c, "m1", 2).error == ErrorCode.NONE
    b.advance(20000)
    assert c.manager.get_group("sg").share.members == {}
