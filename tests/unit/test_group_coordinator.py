"""Join / sync / heartbeat / leave / offsets flows against the coordinator, with fake members
and a manually driven timer (no broker, no sockets)."""

from __future__ import annotations

import asyncio

import pytest

from rivulet.common.types import TopicPartition
from rivulet.coordinator.group_metadata import (
    COMPLETING_REBALANCE,
    EMPTY,
    NEW_MEMBER_JOIN_TIMEOUT_MS,
    PREPARING_REBALANCE,
    STABLE,
    OffsetAndMetadata,
)
from rivulet.coordinator.offsets_topic import GroupKey, read_group_message_value, read_message_key
from rivulet.protocol.errors import ErrorCode as E
from test_group_support import Member, make_coordinator, new_coordinator

pytestmark = pytest.mark.fast


def settle(b) -> None:
    """Run the timer passes a 0 ms initial delay takes: one, plus one more per pass in which
    new members arrived (InitialDelayedJoin re-arms while the group keeps growing)."""
    for _ in range(3):
        b.advance(1)


def stable_group(c, b, n: int, group: str = "g", **kw) -> list[Member]:
    """n members through a complete rebalance; the leader assigns 'A<i>' to member i."""
    members = [Member(c, group, f"c{i}", **kw) for i in range(n)]
    for m in members:
        m.join_fully()
    settle(b)
    for m in members:
        assert m.join_result.error == E.NONE, m.join_result
    leader = next(m for m in members if m.join_result.leader_id == m.member_id)
    for m in members:
        if m is not leader:
            m.sync()
    leader.sync({m.member_id: f"A{i}".encode() for i, m in enumerate(members)})
    for m in members:
        assert m.sync_result.error == E.NONE
    assert c.manager.get_group(group).is_(STABLE)
    return members


def group(c, gid="g"):
    return c.manager.get_group(gid)


# ---------------------------------------------------------------- JoinGroup

def test_member_id_required_then_join():
    c, b = make_coordinator()
    m = Member(c, "g", "client-x")
    m.join()
    r = m.join_result
    assert r.error == E.MEMBER_ID_REQUIRED and r.member_id.startswith("client-x-")
    assert group(c).is_pending_member(r.member_id) and group(c).size == 0
    m.join()
    b.advance(1)
    r = m.join_result
    assert r.error == E.NONE and r.generation_id == 1 and r.leader_id == m.member_id
    assert r.protocol_type == "consumer" and r.protocol_name == "range"
    assert [x.member_id for x in r.members] == [m.member_id]


def test_v3_join_gets_an_id_at_once():
    c, b = make_coordinator()
    m = Member(c, "g", "old")
    m.join(version=3)
    assert m.joins == []  # parked: no MEMBER_ID_REQUIRED before v4
    b.advance(1)
    assert m.join_result.error == E.NONE and m.member_id.startswith("old-")


def test_leader_alone_gets_member_list_and_all_answered_at_once():
    c, b = make_coordinator()
    ms = [Member(c, "g", f"c{i}") for i in range(3)]
    for m in ms:
        m.join_fully()
    assert all(m.join_result.error == E.MEMBER_ID_REQUIRED for m in ms)  # nobody answered yet
    settle(b)
    results = [m.join_result for m in ms]
    assert len({r.generation_id for r in results}) == 1
    leader = results[0].leader_id
    for m, r in zip(ms, results):
        assert r.error == E.NONE and r.leader_id == leader
        if m.member_id == leader:
            assert sorted(x.member_id for x in r.members) == sorted(x.member_id for x in ms)
            assert {x.metadata for x in r.members} == {b"meta-c0", b"meta-c1", b"meta-c2"}
        else:
            assert r.members == []
    assert group(c).is_(COMPLETING_REBALANCE)


def test_followers_wait_for_leader_and_assignment_is_persisted_first():
    async def run():
        c, b = make_coordinator()
        await c.wait_loaded()
        leader, follower = stable_group(c, b, 2)
        # force a rebalance so a new sync round happens with deferred appends
        leader.join()
        follower.join()
        b.advance(1)
        assert leader.join_result.generation_id == 2
        b.replica_manager.defer = True
        follower.sync()
        assert len(follower.syncs) == 1  # parked (only the earlier answer)
        lead = leader if leader.join_result.leader_id == leader.member_id else follower
        other = follower if lead is leader else leader
        lead.sync({lead.member_id: b"L", other.member_id: b"F"})
        await asyncio.sleep(0)
        assert group(c).is_(COMPLETING_REBALANCE)  # the record is not durable yet: nobody answered
        assert len(other.syncs) == len(lead.syncs) == 1 or other.sync_result.assignment != b"F"
        b.replica_manager.release()
        await asyncio.sleep(0)
        assert group(c).is_(STABLE)
        assert lead.sync_result.assignment == b"L" and other.sync_result.assignment == b"F"
        # the durable record holds the assignment
        last = b.replica_manager.partitions
        recs = [r for p in last.values() for r in p.log.records() if isinstance(read_message_key(r.key), GroupKey)]
        loaded = read_group_message_value("g", recs[-1].value)
        assert loaded.generation_id == 2 and loaded.get(other.member_id).assignment == b"F"
    asyncio.run(run())


def test_store_failure_propagates_error_and_rebalances():
    c, b = make_coordinator()
    ms = [Member(c, "g", f"c{i}") for i in range(2)]
    for m in ms:
        m.join_fully()
    settle(b)
    leader = next(m for m in ms if m.join_result.leader_id == m.member_id)
    other = next(m for m in ms if m is not leader)
    other.sync()
    b.replica_manager.fail_with = E.NOT_LEADER_OR_FOLLOWER
    leader.sync({leader.member_id: b"x", other.member_id: b"y"})
    assert leader.sync_result.error == E.NOT_COORDINATOR == other.sync_result.error
    assert other.sync_result.assignment == b""
    assert group(c).is_(PREPARING_REBALANCE)


def test_a_sync_whose_write_times_out_is_coordinator_not_available():
    # Kafka 4.3.1's appendGroupMetadataErrorToResponseError; Kafka 3 said REBALANCE_IN_PROGRESS.
    c, b = make_coordinator()
    leader = Member(c, "g", "c0")
    leader.join_fully()
    settle(b)
    b.replica_manager.fail_with = E.REQUEST_TIMED_OUT
    leader.sync({leader.member_id: b"x"})
    assert leader.sync_result.error == E.COORDINATOR_NOT_AVAILABLE
    assert group(c).is_(PREPARING_REBALANCE)


def test_new_member_triggers_rebalance_and_heartbeats_say_so():
    c, b = make_coordinator()
    a, = stable_group(c, b, 1)
    newcomer = Member(c, "g", "late")
    newcomer.join_fully()
    assert group(c).is_(PREPARING_REBALANCE)
    assert a.heartbeat() == E.REBALANCE_IN_PROGRESS
    a.sync()
    assert a.sync_result.error == E.REBALANCE_IN_PROGRESS
    a.join()  # all known members rejoined: the join completes at once
    assert a.join_result.generation_id == 2 and newcomer.join_result.generation_id == 2
    assert group(c).size == 2


def test_laggard_removed_at_rebalance_timeout():
    c, b = make_coordinator()
    a, slow = stable_group(c, b, 2, rebalance_timeout_ms=20000)
    a.join()  # leader rejoin in Stable starts a rebalance
    assert group(c).is_(PREPARING_REBALANCE)
    for _ in range(4):  # slow stays alive (heartbeats) but never rejoins
        assert slow.heartbeat() == E.REBALANCE_IN_PROGRESS
        b.advance(4999)
    assert a.join_result.generation_id == 1  # still waiting for slow
    assert slow.heartbeat() == E.REBALANCE_IN_PROGRESS
    b.advance(10)
    assert a.join_result.generation_id == 2 and a.join_result.error == E.NONE
    assert not group(c).has(slow.member_id) and group(c).size == 1
    assert slow.heartbeat() == E.UNKNOWN_MEMBER_ID


def test_session_timeout_removes_member_and_rebalances():
    c, b = make_coordinator()
    a, dead = stable_group(c, b, 2, session_timeout_ms=6000)
    b.advance(3000)
    assert a.heartbeat() == E.NONE
    assert group(c).has(dead.member_id)
    b.advance(3001)
    assert not group(c).has(dead.member_id)
    assert group(c).is_(PREPARING_REBALANCE)
    assert a.heartbeat() == E.REBALANCE_IN_PROGRESS
    a.join()
    assert group(c).is_(COMPLETING_REBALANCE) and group(c).size == 1


def test_last_member_expiring_empties_group():
    c, b = make_coordinator()
    stable_group(c, b, 1, session_timeout_ms=6000)
    b.advance(5999)
    assert group(c).is_(STABLE)
    b.advance(2)  # expired: PreparingRebalance, whose DelayedJoin with nobody left completes at once
    g = group(c)
    assert g.is_(EMPTY) and g.generation_id == 2 and g.size == 0


def test_pending_member_expires_after_session_timeout():
    c, b = make_coordinator()
    a, = stable_group(c, b, 1, session_timeout_ms=6000)
    p = Member(c, "g", "pending", session_timeout_ms=6000)
    p.join()
    assert group(c).is_pending_member(p.member_id)
    b.advance(3000)
    a.heartbeat()
    b.advance(3001)
    assert not group(c).is_pending_member(p.member_id)
    assert group(c).is_(STABLE)  # a pending member never joined, so no rebalance


def test_pending_member_holds_the_join_until_it_rejoins():
    c, b = make_coordinator()
    a, f = stable_group(c, b, 2)
    a.join()  # the leader rejoins: rebalance begins, waiting for f
    p = Member(c, "g", "p")
    p.join()  # MEMBER_ID_REQUIRED: pending
    f.join()
    assert group(c).is_(PREPARING_REBALANCE)  # every member rejoined, but a pending one blocks completion
    p.join()
    assert group(c).is_(COMPLETING_REBALANCE) and group(c).size == 3


def test_new_member_join_timeout():
    c, b = make_coordinator()
    a, = stable_group(c, b, 1, session_timeout_ms=6000, rebalance_timeout_ms=10 * 60 * 1000)
    ghost = Member(c, "g", "ghost", session_timeout_ms=6000, rebalance_timeout_ms=10 * 60 * 1000)
    ghost.join_fully()
    assert group(c).is_(PREPARING_REBALANCE)
    for _ in range(NEW_MEMBER_JOIN_TIMEOUT_MS // 5000 - 1):
        assert a.heartbeat() == E.REBALANCE_IN_PROGRESS  # alive, but slow to rejoin
        b.advance(5000)
    assert ghost.join_result.error == E.MEMBER_ID_REQUIRED  # still parked after ~5 minutes
    a.heartbeat()
    b.advance(5001)
    # the parked new member was dropped (answered UNKNOWN_MEMBER_ID) and the rebalance goes on
    assert ghost.join_result.error == E.UNKNOWN_MEMBER_ID and ghost.join_result.member_id == ""
    assert not group(c).has(ghost.member_id) and group(c).is_(PREPARING_REBALANCE)
    a.join()
    assert a.join_result.generation_id == 2 and group(c).size == 1


def test_initial_rebalance_delay_gathers_joiners():
    c, b = make_coordinator(**{"group.initial.rebalance.delay.ms": 3000})
    first = Member(c, "g", "first", rebalance_timeout_ms=60000)
    first.join_fully()
    b.advance(2000)
    second = Member(c, "g", "second", rebalance_timeout_ms=60000)
    second.join_fully()
    b.advance(1500)  # first delay over, but a member arrived: wait another delay
    assert first.join_result.error == E.MEMBER_ID_REQUIRED
    b.advance(3000)
    assert first.join_result.error == E.NONE and second.join_result.error == E.NONE
    assert first.join_result.generation_id == second.join_result.generation_id == 1


def test_initial_delay_capped_by_rebalance_timeout():
    c, b = make_coordinator(**{"group.initial.rebalance.delay.ms": 3000})
    ms = [Member(c, "g", "m0", rebalance_timeout_ms=7000)]
    ms[0].join_fully()
    for i in range(1, 10):
        b.advance(2000)
        m = Member(c, "g", f"m{i}", rebalance_timeout_ms=7000)
        m.join_fully()
        ms.append(m)
        if ms[0].join_result.error == E.NONE:
            break
    assert ms[0].join_result.error == E.NONE  # did not wait forever


def test_initial_delay_of_a_group_emptied_after_generations_is_extended_too():
    # Kafka 4.3 extends the delay of any rebalance begun from Empty (ClassicGroup.previousState),
    # not only of a group's very first one.
    c, b = make_coordinator(**{"group.initial.rebalance.delay.ms": 3000})
    old = Member(c, "g", "old", rebalance_timeout_ms=60000)
    old.join_fully()
    b.advance(3001)
    old.sync({old.member_id: b"A"})
    old.leave()
    assert group(c).is_(EMPTY) and group(c).generation_id == 2
    first = Member(c, "g", "first", rebalance_timeout_ms=60000)
    first.join_fully()
    b.advance(2000)
    second = Member(c, "g", "second", rebalance_timeout_ms=60000)
    second.join_fully()
    b.advance(1500)  # the first delay is over, but a member arrived meanwhile: one more delay
    assert first.join_result.error == E.MEMBER_ID_REQUIRED
    b.advance(3000)
    assert first.join_result.error == second.join_result.error == E.NONE
    assert first.join_result.generation_id == second.join_result.generation_id == 3


def test_a_pending_member_expiring_during_an_extended_initial_delay_ends_it():
    # Kafka 4.3 completes the join phase when a session expiry leaves every member joined, even
    # an initial one, whose delay joins and LeaveGroups never cut short.
    c, b = make_coordinator(**{"group.initial.rebalance.delay.ms": 3000})
    a = Member(c, "g", "a", rebalance_timeout_ms=60000)
    a.join_fully()
    ghost = Member(c, "g", "ghost", session_timeout_ms=7000, rebalance_timeout_ms=60000)
    ghost.join()  # KIP-394's id handed out; it never comes back
    b.advance(2000)
    late = Member(c, "g", "late", rebalance_timeout_ms=60000)
    late.join_fully()
    b.advance(3000)  # 5000: the first delay saw a new member, another runs to 6000
    later = Member(c, "g", "later", rebalance_timeout_ms=60000)
    later.join_fully()
    b.advance(1500)  # 6500: and another, to 9000
    assert a.join_result.error == E.MEMBER_ID_REQUIRED and group(c).is_(PREPARING_REBALANCE)
    b.advance(600)  # 7100: the ghost's session is over and everyone else has joined
    assert group(c).is_(COMPLETING_REBALANCE) and group(c).generation_id == 1 and group(c).size == 3
    assert {m.join_result.generation_id for m in (a, late, later)} == {1}
    b.advance(3000)  # the delay's own end, later, changes nothing
    assert group(c).is_(COMPLETING_REBALANCE) and group(c).generation_id == 1


def test_new_member_during_completing_rebalance_sends_everyone_back_at_once():
    # What decides how fast a group of many consumers starting together settles: a member
    # joining before the leader's assignment is stored reaches the others through their
    # SyncGroup, at once; joining a Stable group, only through their next heartbeat
    # (test_new_member_triggers_rebalance_and_heartbeats_say_so).
    c, b = make_coordinator()
    ms = [Member(c, "g", f"c{i}") for i in range(2)]
    for m in ms:
        m.join_fully()
    settle(b)
    assert group(c).is_(COMPLETING_REBALANCE)
    leader = next(m for m in ms if m.join_result.leader_id == m.member_id)
    follower = next(m for m in ms if m is not leader)
    follower.sync()  # parked until the leader's assignment
    late = Member(c, "g", "late")
    late.join()  # KIP-394's first JoinGroup only hands out an id: nothing moves
    assert late.join_result.error == E.MEMBER_ID_REQUIRED and group(c).is_(COMPLETING_REBALANCE)
    assert follower.sync_result is None
    late.join()  # with its id: the member is added and a rebalance begins
    assert group(c).is_(PREPARING_REBALANCE)
    assert follower.sync_result.error == E.REBALANCE_IN_PROGRESS  # answered without waiting
    leader.sync({m.member_id: b"A" for m in ms})
    assert leader.sync_result.error == E.REBALANCE_IN_PROGRESS
    leader.join()
    follower.join()  # every member is back: the join completes with no time passing
    assert {m.join_result.generation_id for m in (leader, follower, late)} == {2}
    assert group(c).size == 3


@pytest.mark.parametrize("timeout", [5999, 1800001])
def test_invalid_session_timeout(timeout):
    c, b = make_coordinator()
    m = Member(c, "g", session_timeout_ms=timeout)
    m.join()
    assert m.join_result.error == E.INVALID_SESSION_TIMEOUT
    assert group(c) is None


def test_inconsistent_group_protocol():
    c, b = make_coordinator()
    stable_group(c, b, 1)
    other_type = Member(c, "g", "x", protocol_type="connect")
    other_type.join()
    assert other_type.join_result.error == E.INCONSISTENT_GROUP_PROTOCOL
    no_common = Member(c, "g", "y", protocols=[("sticky", b"")])
    no_common.join()
    assert no_common.join_result.error == E.INCONSISTENT_GROUP_PROTOCOL
    empty_type = Member(c, "h", "z", protocol_type="")
    empty_type.join()
    assert empty_type.join_result.error == E.INCONSISTENT_GROUP_PROTOCOL


def test_protocol_chosen_by_vote():
    c, b = make_coordinator()
    ms = [Member(c, "g", "a", protocols=[("roundrobin", b"1"), ("range", b"2")]),
          Member(c, "g", "b", protocols=[("range", b"3"), ("roundrobin", b"4")]),
          Member(c, "g", "c", protocols=[("range", b"5")])]
    for m in ms:
        m.join_fully()
    settle(b)
    assert {m.join_result.protocol_name for m in ms} == {"range"}
    leader = next(m for m in ms if m.join_result.members)
    assert {x.metadata for x in leader.join_result.members} == {b"2", b"3", b"5"}


def test_group_max_size():
    c, b = make_coordinator(**{"group.max.size": 2})
    stable_group(c, b, 2)
    third = Member(c, "g", "third")
    third.join_fully()
    assert third.join_result.error == E.GROUP_MAX_SIZE_REACHED and third.join_result.member_id == ""
    assert group(c).size == 2


def test_unknown_member_and_invalid_group():
    c, b = make_coordinator()
    m = Member(c, "nogroup")
    m.member_id = "made-up"
    m.join()
    assert m.join_result.error == E.UNKNOWN_MEMBER_ID and group(c, "nogroup") is None
    bad = Member(c, "")
    bad.join()
    assert bad.join_result.error == E.INVALID_GROUP_ID


def test_coordinator_loading_and_not_coordinator():
    c, b = make_coordinator()
    part = c.partition_for("g")
    c.manager.loading_partitions.add(part)
    m = Member(c, "g")
    m.join()
    assert m.join_result.error == E.COORDINATOR_LOAD_IN_PROGRESS
    assert m.heartbeat() == E.NONE  # answered blindly while loading
    m.sync()
    assert m.sync_result.error == E.REBALANCE_IN_PROGRESS
    c.manager.loading_partitions.discard(part)
    c.on_resign(part)
    m.join()
    assert m.join_result.error == E.NOT_COORDINATOR
    assert c.find_group_coordinator("g") == (E.NONE, 1, "127.0.0.1", 9092)
    c.on_become_leader(part)
    m.join()
    assert m.join_result.error == E.MEMBER_ID_REQUIRED


def test_rejoin_in_completing_rebalance_with_same_metadata_returns_current_generation():
    c, b = make_coordinator()
    ms = [Member(c, "g", f"c{i}") for i in range(2)]
    for m in ms:
        m.join_fully()
    settle(b)
    follower = next(m for m in ms if not m.join_result.members)
    follower.join()
    assert group(c).is_(COMPLETING_REBALANCE) and follower.join_result.generation_id == 1
    follower.protocols = [("range", b"changed")]
    follower.join()
    assert group(c).is_(PREPARING_REBALANCE)


def test_follower_rejoin_in_stable_same_metadata_no_rebalance():
    c, b = make_coordinator()
    ms = stable_group(c, b, 2)
    follower = next(m for m in ms if not m.join_result.members)
    follower.join()
    assert group(c).is_(STABLE) and follower.join_result.error == E.NONE
    assert follower.join_result.generation_id == 1 and follower.join_result.members == []


# ---------------------------------------------------------------- SyncGroup

def test_sync_errors():
    c, b = make_coordinator()
    a, = stable_group(c, b, 1)
    a.sync(generation=7)
    assert a.sync_result.error == E.ILLEGAL_GENERATION
    stranger = Member(c, "g")
    stranger.member_id = "nobody"
    stranger.generation = 1
    stranger.sync()
    assert stranger.sync_result.error == E.UNKNOWN_MEMBER_ID
    a.sync(protocol_type="connect")
    assert a.sync_result.error == E.INCONSISTENT_GROUP_PROTOCOL
    a.sync(protocol_name="roundrobin")
    assert a.sync_result.error == E.INCONSISTENT_GROUP_PROTOCOL
    a.sync(protocol_type="consumer", protocol_name="range")
    assert a.sync_result.error == E.NONE and a.sync_result.assignment == b"A0"
    nog = Member(c, "absent")
    nog.member_id = "x"
    nog.sync()
    assert nog.sync_result.error == E.UNKNOWN_MEMBER_ID


def test_missing_assignments_filled_empty():
    c, b = make_coordinator()
    ms = [Member(c, "g", f"c{i}") for i in range(2)]
    for m in ms:
        m.join_fully()
    settle(b)
    leader = next(m for m in ms if m.join_result.members)
    other = next(m for m in ms if m is not leader)
    other.sync()
    leader.sync({leader.member_id: b"all"})
    assert leader.sync_result.assignment == b"all" and other.sync_result.assignment == b""
    assert other.sync_result.error == E.NONE


def test_member_that_never_syncs_is_removed():
    c, b = make_coordinator()
    ms = [Member(c, "g", f"c{i}", rebalance_timeout_ms=10000) for i in range(2)]
    for m in ms:
        m.join_fully()
    settle(b)
    leader = next(m for m in ms if m.join_result.members)
    silent = next(m for m in ms if m is not leader)
    leader.sync({leader.member_id: b"a", silent.member_id: b"b"})
    assert group(c).is_(STABLE)
    b.advance(5000)
    leader.heartbeat()
    silent.heartbeat()  # heartbeats do not count as the missing SyncGroup
    b.advance(5001)
    assert not group(c).has(silent.member_id) and group(c).is_(PREPARING_REBALANCE)


def test_leader_silent_after_its_join_answer_is_expired_by_its_session():
    """As Kafka 4.3: answering the JoinGroups restarts each member's session timer, and a member
    neither heartbeating nor syncing is not covered by a parked request; the leader is removed,
    the follower's parked SyncGroup told to rejoin, and the leader's late SyncGroup finds its id
    unknown. (sarama's cooperative leader can take that long between its JoinGroup answer and its
    SyncGroup: docs/compatibility.md, the sarama row.)"""
    c, b = make_coordinator()
    leader, = stable_group(c, b, 1, session_timeout_ms=6000, rebalance_timeout_ms=60000)
    follower = Member(c, "g", "c1", session_timeout_ms=6000, rebalance_timeout_ms=60000)
    follower.join_fully()
    assert leader.heartbeat() == E.REBALANCE_IN_PROGRESS
    leader.join()
    assert leader.join_result.error == E.NONE and leader.join_result.leader_id == leader.member_id
    assert follower.join_result.error == E.NONE and follower.generation == leader.generation == 2
    follower.sync()
    assert follower.sync_result is None and group(c).is_(COMPLETING_REBALANCE)
    b.advance(5999)
    assert group(c).has(leader.member_id)
    b.advance(2)
    assert not group(c).has(leader.member_id) and group(c).is_(PREPARING_REBALANCE)
    assert follower.sync_result.error == E.REBALANCE_IN_PROGRESS
    leader.sync({leader.member_id: b"a", follower.member_id: b"b"})
    assert leader.sync_result.error == E.UNKNOWN_MEMBER_ID
    follower.join()
    assert follower.join_result.error == E.NONE and follower.generation == 3 and group(c).size == 1


# ---------------------------------------------------------------- static membership (KIP-345)

def test_static_member_restart_within_session_no_rebalance():
    c, b = make_coordinator()
    ms = stable_group(c, b, 2, instance_id=None)
    s = Member(c, "g", "static", instance_id="inst-1")
    s.join()
    for m in ms:
        m.join()
    b.advance(1)
    members = ms + [s]
    leader = next(m for m in members if m.join_result.members)
    for m in members:
        if m is not leader:
            m.sync()
    leader.sync({m.member_id: m.client_id.encode() for m in members})
    g = group(c)
    assert g.is_(STABLE) and g.generation_id == 2
    old_id = s.member_id
    # the static consumer restarts: unknown member id, same instance id and protocols
    restarted = Member(c, "g", "static", instance_id="inst-1")
    restarted.join()
    r = restarted.join_result
    assert r.error == E.NONE and r.generation_id == 2 and r.member_id != old_id
    assert g.is_(STABLE) and g.generation_id == 2
    restarted.sync()
    assert restarted.sync_result.assignment == b"static"
    # the old incarnation is fenced
    s.member_id = old_id
    assert s.heartbeat() == E.FENCED_INSTANCE_ID
    s.sync()
    assert s.sync_result.error == E.FENCED_INSTANCE_ID
    # and the others kept going without noticing
    for m in ms:
        assert m.heartbeat() == E.NONE


def test_static_member_with_changed_protocols_rebalances():
    c, b = make_coordinator()
    s = Member(c, "g", "s", instance_id="i", protocols=[("range", b""), ("roundrobin", b"")])
    s.join()
    settle(b)
    s.sync({s.member_id: b"x"})
    unsupported = Member(c, "g", "s", instance_id="i", protocols=[("sticky", b"")])
    unsupported.join()
    assert unsupported.join_result.error == E.INCONSISTENT_GROUP_PROTOCOL
    again = Member(c, "g", "s", instance_id="i", protocols=[("roundrobin", b""), ("range", b"")])
    again.join()  # its vote now changes the group's protocol: rebalance
    settle(b)
    assert again.join_result.generation_id == 2 and again.join_result.protocol_name == "roundrobin"
    assert group(c).is_(COMPLETING_REBALANCE)


def test_static_leader_rejoin_skip_assignment_v9_and_old_leader_before():
    c, b = make_coordinator()
    s = Member(c, "g", "lead", instance_id="L")
    s.join()
    f = Member(c, "g", "fol")
    f.join_fully()
    settle(b)
    assert s.join_result.leader_id == s.member_id
    f.sync()
    s.sync({s.member_id: b"1", f.member_id: b"2"})
    r9 = Member(c, "g", "lead", instance_id="L")
    r9.join(version=9)
    r = r9.join_result
    assert r.skip_assignment and r.leader_id == r9.member_id and len(r.members) == 2
    r8 = Member(c, "g", "lead", instance_id="L")
    r8.join(version=8)
    r = r8.join_result
    assert not r.skip_assignment and r.leader_id == r9.member_id != r8.member_id and r.members == []
    assert group(c).is_(STABLE) and group(c).generation_id == 1


def test_duplicate_static_member_fenced_while_parked():
    c, b = make_coordinator()
    a = Member(c, "g", "a", instance_id="i")
    a.join()  # parked in the initial delayed join
    dup = Member(c, "g", "a", instance_id="i")
    dup.join()
    assert a.join_result.error == E.FENCED_INSTANCE_ID
    b.advance(1)
    assert dup.join_result.error == E.NONE


def test_static_member_known_id_mismatch():
    c, b = make_coordinator()
    s = Member(c, "g", "s", instance_id="i")
    s.join()
    b.advance(1)
    s.sync({s.member_id: b""})
    wrong = Member(c, "g", "s", instance_id="i")
    wrong.member_id = "not-the-current-one"
    wrong.join()
    assert wrong.join_result.error == E.FENCED_INSTANCE_ID
    unknown = Member(c, "g", "s", instance_id="other")
    unknown.member_id = s.member_id
    unknown.join()
    assert unknown.join_result.error == E.UNKNOWN_MEMBER_ID


def test_static_members_are_not_dropped_by_join_timeout():
    c, b = make_coordinator()
    st = Member(c, "g", "st", instance_id="i", session_timeout_ms=60000, rebalance_timeout_ms=5000)
    dy = Member(c, "g", "dy", session_timeout_ms=60000, rebalance_timeout_ms=5000)
    st.join()
    dy.join_fully()
    settle(b)
    lead = st if st.join_result.members else dy
    other = dy if lead is st else st
    other.sync()
    lead.sync({st.member_id: b"s", dy.member_id: b"d"})
    dy.protocols = [("range", b"changed")]
    dy.join()  # new metadata: rebalance; the static leader stays silent
    b.advance(4999)
    assert dy.join_result.generation_id == 1
    b.advance(2)
    assert group(c).has(st.member_id)  # static: kept through the rebalance
    assert dy.join_result.generation_id == 2 and dy.join_result.leader_id == dy.member_id  # leadership moved


# ---------------------------------------------------------------- LeaveGroup

def test_leave_group_rebalances_and_batched_leave():
    c, b = make_coordinator()
    ms = stable_group(c, b, 3)
    top, res = ms[0].leave()
    assert top == E.NONE and res == [(ms[0].member_id, None, E.NONE)]
    assert group(c).is_(PREPARING_REBALANCE)
    out = []
    c.handle_leave_group("g", [(ms[1].member_id, None, "bye"), ("ghost", None, None)],
                         lambda t, r: out.append((t, r)))
    assert out[0][1][1][2] == E.UNKNOWN_MEMBER_ID and out[0][1][0][2] == E.NONE
    assert group(c).size == 1


def test_leave_static_by_instance_id_and_unknown_group():
    c, b = make_coordinator()
    s = Member(c, "g", "s", instance_id="inst")
    s.join()
    b.advance(1)
    s.sync({s.member_id: b""})
    out = []
    c.handle_leave_group("g", [("", "inst", None), ("", "nope", None)], lambda t, r: out.append(r))
    assert [e for _, _, e in out[0]] == [E.NONE, E.UNKNOWN_MEMBER_ID]
    assert group(c).size == 0
    c.handle_leave_group("nogroup", [("m", None, None)], lambda t, r: out.append((t, r)))
    assert out[-1] == (E.NONE, [("m", None, E.UNKNOWN_MEMBER_ID)])


def test_leaving_pending_member():
    c, b = make_coordinator()
    stable_group(c, b, 1)
    p = Member(c, "g", "p")
    p.join()
    assert p.leave()[1][0][2] == E.NONE
    assert not group(c).is_pending_member(p.member_id) and group(c).is_(STABLE)


# ---------------------------------------------------------------- heartbeat

def test_heartbeat_errors():
    c, b = make_coordinator()
    a, = stable_group(c, b, 1)
    assert a.heartbeat() == E.NONE
    assert a.heartbeat(generation=5) == E.ILLEGAL_GENERATION
    x = Member(c, "nogroup")
    x.member_id = "m"
    assert x.heartbeat(generation=1) == E.UNKNOWN_MEMBER_ID
    a.leave()
    b.advance(1)
    assert group(c).is_(EMPTY)
    assert a.heartbeat(generation=2) == E.UNKNOWN_MEMBER_ID


def test_heartbeat_in_completing_rebalance_is_fine():
    c, b = make_coordinator()
    ms = [Member(c, "g", f"c{i}") for i in range(2)]
    for m in ms:
        m.join_fully()
    settle(b)
    assert all(m.heartbeat() == E.NONE for m in ms)


# ---------------------------------------------------------------- offsets

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


def commit(c, gid, member_id, generation, offsets, instance=None):
    out = []
    c.handle_commit_offsets(gid, member_id, instance, generation, offsets, out.append)
    return out[0]


def test_commit_and_fetch_by_member():
    c, b = make_coordinator()
    a, = stable_group(c, b, 1)
    res = commit(c, "g", a.member_id, 1, {TP0: OffsetAndMetadata(42, 5, "hello", b.now)})
    assert res == {TP0: E.NONE}
    err, data = c.handle_fetch_offsets("g", False, [TP0, TP1])
    assert err == E.NONE
    assert (data[TP0].offset, data[TP0].leader_epoch, data[TP0].metadata) == (42, 5, "hello")
    assert data[TP1].offset == -1 and data[TP1].metadata == ""
    err, everything = c.handle_fetch_offsets("g", False, None)
    assert list(everything) == [TP0]


def test_commit_validation():
    c, b = make_coordinator()
    a, = stable_group(c, b, 1)
    off = {TP0: OffsetAndMetadata(1)}
    assert commit(c, "g", a.member_id, 9, off) == {TP0: E.ILLEGAL_GENERATION}
    assert commit(c, "g", "stranger", 1, off) == {TP0: E.UNKNOWN_MEMBER_ID}
    assert commit(c, "g", "", -1, off) == {TP0: E.UNKNOWN_MEMBER_ID}  # not a member of a live group
    assert commit(c, "fresh", "m", 3, off) == {TP0: E.ILLEGAL_GENERATION}  # unknown group, a generation
    assert commit(c, "fresh", "", -1, off) == {TP0: E.NONE}  # simple consumer
    assert group(c, "fresh").is_(EMPTY) and group(c, "fresh").protocol_type is None
    a.join()
    assert group(c).is_(COMPLETING_REBALANCE)
    assert commit(c, "g", a.member_id, 2, off) == {TP0: E.REBALANCE_IN_PROGRESS}
    assert commit(c, "", "", -1, off) == {TP0: E.NONE}  # empty group id is allowed for commits


def test_commit_during_preparing_rebalance_with_old_generation():
    c, b = make_coordinator()
    a, f = stable_group(c, b, 2)
    Member(c, "g", "new").join_fully()
    assert group(c).is_(PREPARING_REBALANCE)
    assert commit(c, "g", f.member_id, 1, {TP0: OffsetAndMetadata(7)}) == {TP0: E.NONE}


def test_offset_metadata_too_large():
    c, b = make_coordinator(**{"offset.metadata.max.bytes": 10})
    res = commit(c, "s", "", -1, {TP0: OffsetAndMetadata(1, None, "x" * 11), TP1: OffsetAndMetadata(2, None, "ok")})
    assert res == {TP0: E.OFFSET_METADATA_TOO_LARGE, TP1: E.NONE}
    res = commit(c, "s", "", -1, {TP0: OffsetAndMetadata(1, None, "😀" * 6)})  # 12 UTF-16 units
    assert res == {TP0: E.OFFSET_METADATA_TOO_LARGE}
    assert c.handle_fetch_offsets("s", False, [TP0])[1][TP0].offset == -1


def test_require_stable_sees_pending_commit():
    async def run():
        c, b = make_coordinator()
        await c.wait_loaded()
        b.replica_manager.defer = True
        out = []
        c.handle_commit_offsets("s", "", None, -1, {TP0: OffsetAndMetadata(5)}, out.append)
        assert out == []  # not acknowledged yet
        assert c.handle_fetch_offsets("s", True, [TP0])[1][TP0].error == E.UNSTABLE_OFFSET_COMMIT
        assert c.handle_fetch_offsets("s", False, [TP0])[1][TP0].offset == -1
        b.replica_manager.release()
        await asyncio.sleep(0)
        assert out == [{TP0: E.NONE}]
        assert c.handle_fetch_offsets("s", True, [TP0])[1][TP0].offset == 5
    asyncio.run(run())


def test_commit_error_mapping():
    c, b = make_coordinator()
    b.replica_manager.fail_with = E.MESSAGE_TOO_LARGE  # Kafka 4's coordinator, as for group records
    assert commit(c, "s", "", -1, {TP0: OffsetAndMetadata(1)}) == {TP0: E.UNKNOWN_SERVER_ERROR}
    b.replica_manager.fail_with = E.NOT_ENOUGH_REPLICAS
    assert commit(c, "s", "", -1, {TP0: OffsetAndMetadata(1)}) == {TP0: E.COORDINATOR_NOT_AVAILABLE}
    assert not group(c, "s").has_pending_offset_commits_for(TP0)


def test_a_commit_whose_write_times_out_is_coordinator_not_available():
    # Kafka 4.3.1's coordinator turns its write timeout into COORDINATOR_NOT_AVAILABLE, which
    # clients retry; REQUEST_TIMED_OUT in a TxnOffsetCommit made franz-go end the transaction.
    c, b = make_coordinator()
    b.replica_manager.fail_with = E.REQUEST_TIMED_OUT
    assert commit(c, "s", "", -1, {TP0: OffsetAndMetadata(1)}) == {TP0: E.COORDINATOR_NOT_AVAILABLE}
    assert txn_commit(c, "s", 7, {TP0: OffsetAndMetadata(2)}) == {TP0: E.COORDINATOR_NOT_AVAILABLE}
    assert not group(c, "s").has_pending_offset_commits_for(TP0)


def test_delete_offsets():
    c, b = make_coordinator()
    a, = stable_group(c, b, 1)
    g = group(c)
    g.subscribed_topics = {"t"}
    other = TopicPartition("u", 0)
    commit(c, "g", a.member_id, 1, {TP0: OffsetAndMetadata(1), other: OffsetAndMetadata(2)})
    err, res = c.handle_delete_offsets("g", [TP0, other])
    assert err == E.NONE and res == {TP0: E.GROUP_SUBSCRIBED_TO_TOPIC, other: E.NONE}
    assert g.offset(other) is None and g.offset(TP0) is not None
    assert c.handle_delete_offsets("nogroup", [TP0]) == (E.GROUP_ID_NOT_FOUND, {})
    commit(c, "s", "", -1, {TP0: OffsetAndMetadata(1)})
    assert c.handle_delete_offsets("s", [TP0]) == (E.NONE, {TP0: E.NONE})
    # Without offsets, the simple group stays Empty until the expiry pass, as in Kafka 4.3.1.
    assert group(c, "s").is_empty and c.manager.cleanup_expired_offsets() == 0
    assert c.manager.get_group("s") is None


def test_delete_groups():
    c, b = make_coordinator()
    stable_group(c, b, 1)
    commit(c, "s", "", -1, {TP0: OffsetAndMetadata(1)})
    res = c.handle_delete_groups(["g", "s", "missing", ""])
    assert res == {"g": E.NON_EMPTY_GROUP, "s": E.NONE, "missing": E.GROUP_ID_NOT_FOUND,
                   "": E.GROUP_ID_NOT_FOUND}
    assert group(c, "s") is None
    assert c.handle_fetch_offsets("s", False, [TP0])[1][TP0].offset == -1


def test_deleted_group_writes_metadata_tombstone():
    c, b = make_coordinator()
    a, = stable_group(c, b, 1)
    a.leave()
    b.advance(1)
    assert group(c).is_(EMPTY)
    assert c.handle_delete_groups(["g"]) == {"g": E.NONE}
    recs = [r for p in b.replica_manager.partitions.values() for r in p.log.records()]
    assert recs[-1].value is None and read_message_key(recs[-1].key) == GroupKey("g")
    a.join()
    assert a.join_result.error == E.UNKNOWN_MEMBER_ID  # a known id for a group that no longer exists


def test_offset_expiration_after_group_becomes_empty():
    c, b = make_coordinator(**{"offsets.retention.minutes": 1})
    a, = stable_group(c, b, 1)
    commit(c, "g", a.member_id, 1, {TP0: OffsetAndMetadata(9, None, "", b.now)})
    b.advance(120_000)
    a.heartbeat()
    assert c.manager.cleanup_expired_offsets() == 0  # stable and subscribed topics unknown: kept
    a.leave()
    b.advance(1)
    assert group(c).is_(EMPTY)
    b.advance(59_000)
    assert c.manager.cleanup_expired_offsets() == 0
    b.advance(1_000)
    assert c.manager.cleanup_expired_offsets() == 1
    assert group(c) is None  # Empty with no offsets: Dead and gone
    recs = [r for p in b.replica_manager.partitions.values() for r in p.log.records()]
    assert [r.value for r in recs[-2:]] == [None, None]


def test_partitions_deleted_hook():
    c, b = make_coordinator()
    commit(c, "s", "", -1, {TP0: OffsetAndMetadata(1), TP1: OffsetAndMetadata(2)})
    assert c.on_partitions_deleted([("t", 0)]) == 1
    assert group(c, "s").offset(TP0) is None and group(c, "s").offset(TP1) is not None


# ---------------------------------------------------------------- describe / list / reload

def test_describe_and_list():
    c, b = make_coordinator()
    ms = stable_group(c, b, 2)
    commit(c, "s", "", -1, {TP0: OffsetAndMetadata(1)})
    err, (state, ptype, protocol, members) = c.handle_describe_group("g")
    assert (err, state, ptype, protocol) == (E.NONE, "Stable", "consumer", "range")
    assert {m.member_id for m in members} == {m.member_id for m in ms}
    assert {m.assignment for m in members} == {b"A0", b"A1"}
    assert c.handle_describe_group("nope") == (E.NONE, ("Dead", "", "", []))
    err, groups = c.handle_list_groups()
    assert err == E.NONE and {g.group_id for g in groups} == {"g", "s"}
    assert [g.group_id for g in c.handle_list_groups(["STABLE"])[1]] == ["g"]
    assert [g.group_id for g in c.handle_list_groups(["empty"])[1]] == ["s"]
    assert len(c.handle_list_groups([], ["Classic"])[1]) == 2
    assert c.handle_list_groups([], ["consumer"])[1] == []
    ms[0].join()
    err, (state, _, protocol, members) = c.handle_describe_group("g")
    assert state == "PreparingRebalance" and protocol == "" and members[0].metadata == b""


def test_reload_restores_stable_group_and_expires_dead_members():
    c, b = make_coordinator()
    a, f = stable_group(c, b, 2, session_timeout_ms=6000)
    commit(c, "g", a.member_id, 1, {TP0: OffsetAndMetadata(77)})
    c.shutdown()
    c2 = new_coordinator(b)
    c2.startup()
    g = c2.manager.get_group("g")
    assert g.is_(STABLE) and g.generation_id == 1 and g.size == 2
    assert g.offset(TP0).committed_offset == 77
    a.c = c2
    assert a.heartbeat() == E.NONE
    b.advance(3000)
    assert a.heartbeat() == E.NONE
    b.advance(3500)
    assert not g.has(f.member_id) and g.is_(PREPARING_REBALANCE)  # f never came back


def test_shutdown_then_requests_are_refused():
    c, b = make_coordinator()
    c.shutdown()
    m = Member(c, "g")
    m.join()
    assert m.join_result.error == E.COORDINATOR_NOT_AVAILABLE
    assert c.handle_list_groups() == (E.COORDINATOR_NOT_AVAILABLE, [])
    assert m.heartbeat(generation=1) == E.COORDINATOR_NOT_AVAILABLE
    assert c.handle_describe_group("g")[0] == E.COORDINATOR_NOT_AVAILABLE


# ---------------------------------------------------------------- transactional offsets

def txn_commit(c, gid, pid, offsets, member="", generation=-1):
    out = []
    c.handle_txn_commit_offsets(gid, pid, 0, member, None, generation, offsets, out.append)
    return out[0]


def test_txn_offsets_of_a_consumer_protocol_member_at_a_wrong_epoch_are_illegal_generation():
    # TxnOffsetCommit has no STALE_MEMBER_EPOCH: Kafka 4.3.1 answers ILLEGAL_GENERATION, which
    # its Java producer turns into an abortable CommitFailedException (a fatal error otherwise).
    from rivulet.coordinator.consumer_heartbeat import HeartbeatRequest
    from test_group_support import TopicInfo

    c, b = make_coordinator()
    b.metadata.topics["t"] = TopicInfo("t", 2)
    out = []
    c.handle_consumer_group_heartbeat(HeartbeatRequest("cg", "m-1", 0, rebalance_timeout_ms=30000,
                                                       subscribed_topic_names=["t"], owned=[]), 1, out.append)
    epoch = out[0].member_epoch
    assert out[0].error == E.NONE and epoch > 0
    assert txn_commit(c, "cg", 42, {TP0: OffsetAndMetadata(1)}, "m-1", epoch + 7) == {TP0: E.ILLEGAL_GENERATION}
    assert txn_commit(c, "cg", 42, {TP0: OffsetAndMetadata(1)}, "m-1", epoch - 1) == {TP0: E.ILLEGAL_GENERATION}
    assert txn_commit(c, "cg", 42, {TP0: OffsetAndMetadata(1)}, "nobody", epoch) == {TP0: E.UNKNOWN_MEMBER_ID}
    assert txn_commit(c, "cg", 42, {TP0: OffsetAndMetadata(1)}, "m-1", epoch) == {TP0: E.NONE}


def test_txn_offsets_visible_only_after_commit_marker():
    c, b = make_coordinator()
    assert txn_commit(c, "tg", 42, {TP0: OffsetAndMetadata(10)}) == {TP0: E.NONE}
    assert c.handle_fetch_offsets("tg", False, [TP0])[1][TP0].offset == -1  # not visible yet
    assert c.handle_fetch_offsets("tg", True, [TP0])[1][TP0].error == E.UNSTABLE_OFFSET_COMMIT
    c.on_transaction_completed(42, [c.partition_for("tg")], True)
    assert c.handle_fetch_offsets("tg", True, [TP0])[1][TP0].offset == 10
    # an aborted transaction leaves the committed offset alone
    txn_commit(c, "tg", 43, {TP0: OffsetAndMetadata(99)})
    c.on_transaction_completed(43, [c.partition_for("tg")], False)
    assert c.handle_fetch_offsets("tg", True, [TP0])[1][TP0].offset == 10
    # a marker on another __consumer_offsets partition does not touch this group
    txn_commit(c, "tg", 44, {TP0: OffsetAndMetadata(50)})
    c.on_transaction_completed(44, [p for p in range(4) if p != c.partition_for("tg")], True)
    assert c.handle_fetch_offsets("tg", False, [TP0])[1][TP0].offset == 10


def test_txn_commit_validation_and_member_checks():
    c, b = make_coordinator()
    a, = stable_group(c, b, 1)
    # a live group accepts transactional commits without member id (old TxnOffsetCommit versions)...
    assert txn_commit(c, "g", 7, {TP0: OffsetAndMetadata(1)}) == {TP0: E.NONE}
    # ...but a given member id / generation must be right
    assert txn_commit(c, "g", 7, {TP0: OffsetAndMetadata(1)}, member="nobody", generation=1) == \
        {TP0: E.UNKNOWN_MEMBER_ID}
    assert txn_commit(c, "g", 7, {TP0: OffsetAndMetadata(1)}, member=a.member_id, generation=5) == \
        {TP0: E.ILLEGAL_GENERATION}
    assert txn_commit(c, "", 7, {TP0: OffsetAndMetadata(1)}) == {TP0: E.INVALID_GROUP_ID}


def test_pending_txn_offsets_survive_reload_until_the_marker():
    c, b = make_coordinator()
    txn_commit(c, "tg", 42, {TP0: OffsetAndMetadata(10)})
    c2 = new_coordinator(b)
    c2.startup()
    assert c2.handle_fetch_offsets("tg", True, [TP0])[1][TP0].error == E.UNSTABLE_OFFSET_COMMIT
    c2.on_transaction_completed(42, [c2.partition_for("tg")], True)
    assert c2.handle_fetch_offsets("tg", True, [TP0])[1][TP0].offset == 10
