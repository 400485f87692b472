"""Assignors and the consumer-protocol encoding shared with Java's client and librdkafka."""

from __future__ import annotations

import struct

import pytest

from rivulet.client.consumer.assignors import (
    CooperativeStickyAssignor,
    Member,
    RangeAssignor,
    RoundRobinAssignor,
)
from rivulet.protocol.consumer_protocol import (
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from rivulet.protocol.messages import consumer_protocol_subscription as cps

pytestmark = pytest.mark.fast


def members(subs: dict[str, list[str]], owned: dict[str, list] | None = None, gen: int = 1) -> list[Member]:
    owned = owned or {}
    return [Member(m, None, Subscription(topics, None, owned.get(m, []), gen)) for m, topics in subs.items()]


def flat(result: dict[str, list]) -> list:
    return sorted(tp for tps in result.values() for tp in tps)


def test_range_as_javas_example():
    # Kafka's RangeAssignor javadoc: C0 gets t0p0 t0p1 t1p0 t1p1, C1 gets t0p2 t1p2.
    r = RangeAssignor().assign({"t0": 3, "t1": 3}, members({"C0": ["t0", "t1"], "C1": ["t0", "t1"]}))
    assert r == {"C0": [("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)], "C1": [("t0", 2), ("t1", 2)]}


def test_roundrobin_as_javas_example():
    r = RoundRobinAssignor().assign({"t0": 3, "t1": 3}, members({"C0": ["t0", "t1"], "C1": ["t0", "t1"]}))
    assert r == {"C0": [("t0", 0), ("t0", 2), ("t1", 1)], "C1": [("t0", 1), ("t1", 0), ("t1", 2)]}


def test_roundrobin_skips_unsubscribed_members():
    r = RoundRobinAssignor().assign({"a": 2, "b": 2}, members({"C0": ["a"], "C1": ["a", "b"]}))
    assert r == {"C0": [("a", 0)], "C1": [("a", 1), ("b", 0), ("b", 1)]}


def test_range_ignores_unknown_topics_and_sorts_static_members_first():
    ms = [Member("m-b", None, Subscription(["t"])), Member("m-a", "static-1", Subscription(["t", "gone"]))]
    r = RangeAssignor().assign({"t": 3}, ms)
    assert r == {"m-a": [("t", 0), ("t", 1)], "m-b": [("t", 2)]}


def test_cooperative_sticky_initial_assignment_is_balanced():
    r = CooperativeStickyAssignor().assign({"t": 6}, members({"A": ["t"], "B": ["t"], "C": ["t"]}))
    assert flat(r) == [("t", p) for p in range(6)]
    assert sorted(len(v) for v in r.values()) == [2, 2, 2]


def test_cooperative_sticky_new_member_takes_partitions_in_two_rounds():
    a = CooperativeStickyAssignor()
    owned = {"A": [("t", 0), ("t", 1), ("t", 2)], "B": [("t", 3), ("t", 4), ("t", 5)]}
    subs = {"A": ["t"], "B": ["t"], "C": ["t"]}
    r1 = a.assign({"t": 6}, members(subs, owned))
    # Nothing changes hands within one round: A and B keep a subset of what they had.
    assert set(r1["A"]) < set(owned["A"]) and set(r1["B"]) < set(owned["B"])
    assert r1["C"] == []
    assert len(r1["A"]) == len(r1["B"]) == 2
    # Round two: A and B report what they kept; the revoked ones go to C.
    r2 = a.assign({"t": 6}, members(subs, {"A": r1["A"], "B": r1["B"]}, gen=2))
    assert r2["A"] == r1["A"] and r2["B"] == r1["B"]
    assert len(r2["C"]) == 2
    assert flat(r2) == [("t", p) for p in range(6)]


def test_cooperative_sticky_member_leaving_keeps_everyone_elses_partitions():
    owned = {"A": [("t", 0), ("t", 1)], "B": [("t", 2), ("t", 3)]}  # C owned 4 and 5, and left
    r = CooperativeStickyAssignor().assign({"t": 6}, members({"A": ["t"], "B": ["t"]}, owned))
    assert set(owned["A"]) <= set(r["A"]) and set(owned["B"]) <= set(r["B"])
    assert flat(r) == [("t", p) for p in range(6)]


def test_cooperative_sticky_respects_subscriptions():
    r = CooperativeStickyAssignor().assign({"x": 4, "y": 2}, members({"A": ["x"], "B": ["x", "y"]}))
    assert all(t == "x" for t, _ in r["A"])
    assert flat(r) == sorted([("x", p) for p in range(4)] + [("y", 0), ("y", 1)])
    assert sorted(len(v) for v in r.values()) == [3, 3]


def test_cooperative_sticky_double_claim_goes_to_the_newer_generation():
    ms = [Member("A", None, Subscription(["t"], None, [("t", 0)], 5)),
          Member("B", None, Subscription(["t"], None, [("t", 0)], 4))]
    r = CooperativeStickyAssignor().assign({"t": 2}, ms)
    assert ("t", 0) in r["A"] and ("t", 0) not in r["B"]


def test_cooperative_sticky_reads_generation_from_user_data():
    a = CooperativeStickyAssignor()
    s = Subscription(["t"], a.user_data(7), [], -1)
    assert a._generation(s) == 7


def test_subscription_round_trip_every_version():
    s = Subscription(["a", "b"], b"ud", [("a", 1), ("b", 0), ("a", 0)], 3, "rack1")
    for v in range(4):
        d = decode_subscription(encode_subscription(s, v))
        assert d.topics == ["a", "b"] and d.user_data == b"ud"
        assert d.owned == ([("a", 0), ("a", 1), ("b", 0)] if v >= 1 else [])
        assert d.generation == (3 if v >= 2 else -1)
        assert d.rack == ("rack1" if v >= 3 else None)


def test_subscription_from_a_newer_version_reads_known_fields():
    body = cps.ConsumerProtocolSubscription(topics=["t"], user_data=None, owned_partitions=[], generation_id=9,
                                            rack_id=None).encode(3)
    data = struct.pack(">h", 4) + body + b"\x00\x00\x00\x07"  # a future v4 appends a field
    d = decode_subscription(data)
    assert d.topics == ["t"] and d.generation == 9


def test_assignment_round_trip_and_empty():
    data = encode_assignment([("b", 1), ("a", 2), ("a", 0)], b"x")
    assert decode_assignment(data) == ([("a", 0), ("a", 2), ("b", 1)], b"x")
    assert decode_assignment(b"") == ([], None)
    assert decode_assignment(encode_assignment([], None, 0)) == ([], None)
