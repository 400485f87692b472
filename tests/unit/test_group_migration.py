"""Online migration through the group coordinator, no sockets: a classic group becomes a
consumer group when a member of the consumer protocol joins, its classic members rejoin into
it, a reloaded coordinator finds it as it was, and it is classic again when the member of the
consumer protocol leaves."""

from __future__ import annotations

import pytest

from rivulet.coordinator.consumer_heartbeat import HeartbeatRequest, HeartbeatResult
from rivulet.coordinator.group_metadata import COMPLETING_REBALANCE, PREPARING_REBALANCE, STABLE
from rivulet.protocol.consumer_protocol import Subscription, decode_assignment, encode_assignment, encode_subscription
from rivulet.protocol.errors import ErrorCode as E
from test_group_support import Member, TopicInfo, make_coordinator, new_coordinator

pytestmark = pytest.mark.fast


def classic_members(c, b, n: int = 2) -> list[Member]:
    b.metadata.topics["t"] = TopicInfo("t", 4)
    members = [Member(c, "g", f"c{i}", protocols=[("range", encode_subscription(Subscription(["t"])))])
               for i in range(n)]
    for m in members:
        m.join_fully()
    for _ in range(3):
        b.advance(1)
    leader = next(m for m in members if m.join_result.leader_id == m.member_id)
    for m in members:
        if m is not leader:
            m.sync()
    leader.sync({m.member_id: encode_assignment([("t", 2 * i), ("t", 2 * i + 1)]) for i, m in enumerate(members)})
    assert c.manager.get_group("g").is_(STABLE)
    return members


def beat(c, member_id: str, epoch: int, **kw) -> HeartbeatResult:
    out: list[HeartbeatResult] = []
    req = HeartbeatRequest("g", member_id, epoch, rebalance_timeout_ms=30000 if epoch == 0 else -1,
                           subscribed_topic_names=["t"] if epoch == 0 else None, owned=[] if epoch == 0 else None,
                           **kw)
    c.handle_consumer_group_heartbeat(req, 1, out.append)
    return out[0]


def test_a_group_converts_reloads_and_converts_back():
    c, b = make_coordinator()
    a, f = classic_members(c, b)
    generation = a.generation
    r = beat(c, "new-member-id-0000000", 0)
    assert r.error == E.NONE and r.member_epoch == generation + 1
    g = c.manager.get_group("g")
    assert g.group_type == "consumer" and g.size == 0  # its classic members live in the consumer group
    assert set(g.consumer.members) == {a.member_id, f.member_id, "new-member-id-0000000"}
    # The classic members are told to rejoin; their JoinGroup answers at once, at their epoch.
    assert a.heartbeat() == E.REBALANCE_IN_PROGRESS
    a.join()
    assert a.join_result.error == E.NONE and a.join_result.leader_id == ""
    a.sync()
    assert a.sync_result.error == E.NONE and decode_assignment(a.sync_result.assignment)[0]
    # A coordinator that loads the partition finds the same group.
    c.shutdown()
    c2 = new_coordinator(b)
    c2.startup()
    g2 = c2.manager.get_group("g")
    assert g2.group_type == "consumer"
    assert {m: (x.member_epoch, x.classic is not None) for m, x in g2.consumer.members.items()} == \
        {m: (x.member_epoch, x.classic is not None) for m, x in g.consumer.members.items()}
    a.c = f.c = c2
    assert a.heartbeat() == E.NONE  # a rejoined at the group epoch before the reload
    # The member of the consumer protocol leaves: the group is classic again, and rebalances.
    r = beat(c2, "new-member-id-0000000", -1)
    assert r.error == E.NONE and r.member_epoch == -1
    g3 = c2.manager.get_group("g")
    assert g3.group_type == "classic" and g3.is_(PREPARING_REBALANCE)
    assert set(g3.all_members()) == {a.member_id, f.member_id}
    for m in (a, f):
        m.join()
    for _ in range(3):
        b.advance(1)
    assert all(m.join_result.error == E.NONE for m in (a, f))
    assert g3.is_(COMPLETING_REBALANCE) and a.join_result.generation_id == g3.generation_id
    # And a coordinator that loads it again finds it classic.
    c2.shutdown()
    c3 = new_coordinator(b)
    c3.startup()
    assert c3.manager.get_group("g").group_type == "classic"


def test_an_upgrade_the_policy_forbids_is_refused():
    c, b = make_coordinator(**{"group.consumer.migration.policy": "downgrade"})
    classic_members(c, b)
    r = beat(c, "new-member-id-0000000", 0)
    assert r.error == E.GROUP_ID_NOT_FOUND and c.manager.get_group("g").group_type == "classic"
