"""KIP-392's replica selectors: which replica a consumer in a given rack reads from."""

from __future__ import annotations

import pytest

from rivulet.replication.replica_selector import (
    LEADER_SELECTOR,
    RACK_AWARE_SELECTOR,
    ReplicaView,
    select_read_replica,
)

pytestmark = pytest.mark.fast

LEADER = ReplicaView(1, "a", 100, 0)


def test_the_leader_selector_and_no_rack_keep_the_leader() -> None:
    followers = [ReplicaView(2, "b", 100, 0)]
    assert select_read_replica(LEADER_SELECTOR, "b", LEADER, followers) == 1
    assert select_read_replica(None, "b", LEADER, followers) == 1
    assert select_read_replica(RACK_AWARE_SELECTOR, "", LEADER, followers) == 1


def test_rack_aware_prefers_the_leader_in_the_same_rack_then_the_furthest_follower() -> None:
    followers = [ReplicaView(2, "b", 90, 5), ReplicaView(3, "b", 95, 1), ReplicaView(4, "c", 100, 9)]
    assert select_read_replica(RACK_AWARE_SELECTOR, "a", LEADER, followers) == 1
    assert select_read_replica(RACK_AWARE_SELECTOR, "b", LEADER, followers) == 3
    assert select_read_replica(RACK_AWARE_SELECTOR, "d", LEADER, followers) == 1
    tie = [ReplicaView(2, "b", 95, 5), ReplicaView(3, "b", 95, 1)]
    assert select_read_replica(RACK_AWARE_SELECTOR, "b", LEADER, tie) == 2  # the most recently caught up
