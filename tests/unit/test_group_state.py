"""The group state machine, membership bookkeeping, protocol selection, placement, offset expiry."""

from __future__ import annotations

import itertools

import pytest

from rivulet.common.types import TopicPartition
from rivulet.coordinator.group_metadata import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    CommitRecordMetadataAndOffset,
    GroupMetadata,
    GroupState,
    IllegalStateTransition,
    JoinGroupResult,
    MemberMetadata,
    OffsetAndMetadata,
    SyncGroupResult,
    partition_for,
)
from rivulet.common.java_hash import java_abs, java_string_hashcode
from rivulet.protocol.errors import ErrorCode

pytestmark = pytest.mark.fast

LEGAL = {
    (STABLE, PREPARING_REBALANCE), (COMPLETING_REBALANCE, PREPARING_REBALANCE), (EMPTY, PREPARING_REBALANCE),
    (PREPARING_REBALANCE, COMPLETING_REBALANCE),
    (COMPLETING_REBALANCE, STABLE),
    (PREPARING_REBALANCE, EMPTY),
    (STABLE, DEAD), (PREPARING_REBALANCE, DEAD), (COMPLETING_REBALANCE, DEAD), (EMPTY, DEAD), (DEAD, DEAD),
}


def group_in(state: GroupState) -> GroupMetadata:
    """A group driven to ``state`` through legal transitions only."""
    g = GroupMetadata("g", clock=lambda: 42)
    path = {
        EMPTY: [],
        PREPARING_REBALANCE: [PREPARING_REBALANCE],
        COMPLETING_REBALANCE: [PREPARING_REBALANCE, COMPLETING_REBALANCE],
        STABLE: [PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE],
        DEAD: [DEAD],
    }[state]
    for s in path:
        g.transition_to(s)
    assert g.state is state
    return g


@pytest.mark.parametrize("src,dst", sorted(LEGAL, key=str))
def test_legal_transitions(src, dst):
    g = group_in(src)
    g.transition_to(dst)
    assert g.state is dst
    assert g.current_state_timestamp == 42


@pytest.mark.parametrize("src,dst", sorted(set(itertools.product(GroupState, GroupState)) - LEGAL, key=str))
def test_illegal_transitions_raise(src, dst):
    g = group_in(src)
    with pytest.raises(IllegalStateTransition):
        g.transition_to(dst)
    assert g.state is src


def test_full_lifecycle_walk():
    g = GroupMetadata("g")
    for s in (PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE,
              PREPARING_REBALANCE, EMPTY, PREPARING_REBALANCE, EMPTY, DEAD, DEAD):
        g.transition_to(s)
    assert g.is_(DEAD)


def test_can_rebalance_only_from_stable_completing_empty():
    assert {s for s in GroupState if group_in(s).can_rebalance()} == {STABLE, COMPLETING_REBALANCE, EMPTY}


def member(mid: str, protocols=(("range", b"r"), ("roundrobin", b"rr")), instance=None, rebalance=30000):
    return MemberMetadata(mid, instance, "client", "/127.0.0.1", rebalance, 10000, "consumer", list(protocols))


def test_protocol_support_and_vote():
    g = GroupMetadata("g")
    assert not g.supports_protocols("", {"range"})  # an empty group needs a protocol type
    assert not g.supports_protocols("consumer", set())
    assert g.supports_protocols("consumer", {"anything"})
    g.add(member("a", [("range", b""), ("roundrobin", b"")]))
    g.transition_to(PREPARING_REBALANCE)
    assert g.supports_protocols("consumer", {"roundrobin", "sticky"})
    assert not g.supports_protocols("consumer", {"sticky"})
    assert not g.supports_protocols("connect", {"range"})
    g.add(member("b", [("roundrobin", b""), ("range", b"")]))
    g.add(member("c", [("roundrobin", b""), ("range", b"")]))
    assert g.candidate_protocols() == {"range", "roundrobin"}
    assert g.select_protocol() == "roundrobin"  # two first-choice votes against one
    g.remove("b")
    g.remove("c")
    assert g.select_protocol() == "range"
    with pytest.raises(RuntimeError):
        GroupMetadata("x").select_protocol()


def test_leader_and_awaiting_bookkeeping():
    g = GroupMetadata("g")
    calls = []
    g.add(member("a"), calls.append)
    g.add(member("b"))
    assert g.leader_id == "a" and g.num_awaiting == 1
    assert not g.has_all_members_joined()
    assert [m.member_id for m in g.not_yet_rejoined_members()] == ["b"]
    g.update_member(g.get("b"), [("range", b"x")], 1000, 7000, calls.append)
    assert g.num_awaiting == 2 and g.has_all_members_joined()
    assert g.rebalance_timeout_ms() == 30000
    g.add_pending_member("p")
    assert not g.has_all_members_joined()
    g.remove("p")
    g.remove("a")  # awaiting member leaves: counter follows, leadership moves
    assert g.num_awaiting == 1 and g.leader_id == "b"
    g.maybe_invoke_join_callback(g.get("b"), JoinGroupResult("b"))
    assert g.num_awaiting == 0 and len(calls) == 1
    with pytest.raises(RuntimeError):
        g.add_pending_member("b")


def test_elect_new_joined_leader():
    g = GroupMetadata("g")
    g.add(member("a"))
    g.add(member("b"), lambda r: None)
    assert g.maybe_elect_new_joined_leader() and g.leader_id == "b"
    h = GroupMetadata("h")
    h.add(member("a"))
    assert not h.maybe_elect_new_joined_leader()
    assert not GroupMetadata("empty").maybe_elect_new_joined_leader()


def test_static_member_replacement_fences_old_callbacks():
    g = GroupMetadata("g")
    joins, syncs = [], []
    m = member("old", instance="i1")
    g.add(m, joins.append)
    m.awaiting_sync_callback = syncs.append
    assert g.current_static_member_id("i1") == "old"
    with pytest.raises(RuntimeError):
        g.add(member("dup", instance="i1"))
    replaced = g.replace_static_member("i1", "old", "new")
    assert replaced is m and m.member_id == "new" and g.leader_id == "new"
    assert joins[0].error == ErrorCode.FENCED_INSTANCE_ID and joins[0].member_id == "old"
    assert syncs[0].error == ErrorCode.FENCED_INSTANCE_ID
    assert g.is_static_member_fenced("i1", "old") and not g.is_static_member_fenced("i1", "new")
    assert not g.has("old") and g.has("new") and g.num_awaiting == 0
    g.remove("new")
    assert not g.has_static_member("i1")


def test_heartbeat_satisfaction_rules():
    m = member("a")
    assert not m.has_satisfied_heartbeat
    m.awaiting_sync_callback = lambda r: None
    assert m.has_satisfied_heartbeat  # a parked request counts as a heartbeat
    m.is_new = True
    assert not m.has_satisfied_heartbeat  # ...except for new members
    m.heartbeat_satisfied = True
    assert m.has_satisfied_heartbeat


def test_member_matches_and_metadata():
    m = member("a", [("range", b"1"), ("rr", b"2")])
    assert m.matches([("range", b"1"), ("rr", b"2")])
    assert not m.matches([("rr", b"2"), ("range", b"1")])
    assert not m.matches([("range", b"1"), ("rr", b"3")])
    assert not m.matches([("range", b"1")])
    assert m.metadata("rr") == b"2"
    with pytest.raises(ValueError):
        m.metadata("sticky")
    assert m.vote({"rr"}) == "rr"


def test_init_next_generation_and_summary():
    g = GroupMetadata("g")
    g.add(member("a"))
    g.transition_to(PREPARING_REBALANCE)
    g.init_next_generation()
    assert g.is_(COMPLETING_REBALANCE) and g.generation_id == 1 and g.protocol_name == "range"
    assert g.summary()[2] == "" and g.summary()[3][0].metadata == b""
    assert [x.member_id for x in g.current_member_metadata()] == ["a"]
    g.transition_to(STABLE)
    state, ptype, protocol, members = g.summary()
    assert (state, ptype, protocol, members[0].metadata) == ("Stable", "consumer", "range", b"r")
    g.transition_to(PREPARING_REBALANCE)
    g.remove("a")
    g.init_next_generation()
    assert g.is_(EMPTY) and g.generation_id == 2 and g.protocol_name is None


def om(offset, ts=0, expire=None):
    return OffsetAndMetadata(offset, None, "", ts, expire)


def test_offset_commit_staging():
    g = GroupMetadata("g")
    tp = TopicPartition("t", 0)
    g.prepare_offset_commit({tp: om(5)})
    assert g.has_offsets() and g.offset(tp) is None and g.has_pending_offset_commits_for(tp)
    g.on_offset_commit_append(tp, CommitRecordMetadataAndOffset(10, om(5)))
    assert g.offset(tp).committed_offset == 5 and not g.has_pending_offset_commits_for(tp)
    # An older record (lower log offset) never replaces a newer one.
    g.prepare_offset_commit({tp: om(3)})
    g.on_offset_commit_append(tp, CommitRecordMetadataAndOffset(9, om(3)))
    assert g.offset(tp).committed_offset == 5
    g.prepare_offset_commit({tp: om(7)})
    g.fail_pending_offset_write(tp, om(7))
    assert not g.has_pending_offset_commits_for(tp) and g.offset(tp).committed_offset == 5
    assert g.remove_all_offsets() == {tp: om(5)} and not g.has_offsets()


def test_expiry_empty_group_counts_from_when_it_became_empty():
    now = [1000]
    g = GroupMetadata("g", clock=lambda: now[0])
    g.protocol_type = "consumer"
    tp = TopicPartition("t", 0)
    g.initialize_offsets({tp: CommitRecordMetadataAndOffset(0, om(1, ts=0))})
    g.transition_to(PREPARING_REBALANCE)
    now[0] = 50_000
    g.transition_to(EMPTY)  # became empty at 50 s: the old commit time does not count
    assert g.remove_expired_offsets(50_000 + 9_999, 10_000) == {}
    assert g.remove_expired_offsets(50_000 + 10_000, 10_000) == {tp: om(1, ts=0)}


def test_expiry_stable_consumer_group_keeps_subscribed_topics():
    g = GroupMetadata("g")
    g.protocol_type = "consumer"
    g.subscribed_topics = {"live"}
    live, gone = TopicPartition("live", 0), TopicPartition("gone", 0)
    g.initialize_offsets({live: CommitRecordMetadataAndOffset(0, om(1)), gone: CommitRecordMetadataAndOffset(1, om(2))})
    for s in (PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE):
        g.transition_to(s)
    assert g.remove_expired_offsets(10**12, 1000) == {gone: om(2)}
    assert g.offset(live) is not None
    # A rebalancing group expires nothing.
    g.transition_to(PREPARING_REBALANCE)
    assert g.remove_expired_offsets(10**12, 1000) == {}


def test_expiry_standalone_and_explicit_expire_timestamp():
    g = GroupMetadata("g")  # no protocol type: offsets-only group
    a, b = TopicPartition("t", 0), TopicPartition("t", 1)
    g.initialize_offsets({a: CommitRecordMetadataAndOffset(0, om(1, ts=100)),
                          b: CommitRecordMetadataAndOffset(1, om(2, ts=100, expire=500))})
    assert g.remove_expired_offsets(499, 1_000_000) == {}
    assert g.remove_expired_offsets(500, 1_000_000) == {b: om(2, ts=100, expire=500)}
    assert g.remove_expired_offsets(1_000_100, 1_000_000) == {a: om(1, ts=100)}


# ---------------------------------------------------------------- placement (Java's String.hashCode)

def java_hash_by_definition(s: str) -> int:
    """s[0]*31^(n-1) + s[1]*31^(n-2) + ... + s[n-1] over UTF-16 code units, wrapped to int32."""
    units = [int.from_bytes(s.encode("utf-16-be")[i:i + 2], "big") for i in range(0, len(s.encode("utf-16-be")), 2)]
    n = len(units)
    total = sum(u * 31 ** (n - 1 - i) for i, u in enumerate(units)) % 2**32
    return total - 2**32 if total >= 2**31 else total


@pytest.mark.parametrize("s,expected", [
    ("", 0),
    ("hello", 99162322),
    ("Aa", 2112),
    ("BB", 2112),
    ("polygenelubricants", -2147483648),
])
def test_java_hashcode_known_values(s, expected):
    assert java_string_hashcode(s) == expected


@pytest.mark.parametrize("s", ["test-group", "", "consumer-group-1", "grüppe", "组-1", "😀 emoji", "a" * 300])
def test_java_hashcode_matches_definition(s):
    assert java_string_hashcode(s) == java_hash_by_definition(s)


def test_supplementary_characters_hash_as_surrogate_pairs():
    # U+1F600 is the UTF-16 pair D83D DE00: 0xD83D*31 + 0xDE00.
    assert java_string_hashcode("😀") == 0xD83D * 31 + 0xDE00 == 1772899


def test_partition_for():
    assert java_abs(-2147483648) == 0 and java_abs(-5) == 5
    assert partition_for("polygenelubricants", 50) == 0  # MIN_VALUE -> 0, not a negative partition
    assert partition_for("test-group", 50) == abs(java_hash_by_definition("test-group")) % 50
    assert partition_for("", 50) == 0
    for gid in ["a", "b", "组", "😀", "x" * 100]:
        p = partition_for(gid, 50)
        assert 0 <= p < 50 and p == abs(java_hash_by_definition(gid)) % 50


def test_callbacks_results_defaults():
    r = JoinGroupResult("m", ErrorCode.UNKNOWN_MEMBER_ID)
    assert (r.generation_id, r.leader_id, r.protocol_name, r.members) == (-1, "", None, [])
    assert SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS).assignment == b""
