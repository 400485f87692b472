"""Replica placement (Kafka's AdminUtils.assignReplicasToBrokers) and leader election rules."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from rivulet.controller.election import (
    Election,
    controlled_shutdown_leader,
    offline_partition_leader,
    preferred_replica_leader,
)
from rivulet.controller.placement import BrokerRack, assign_replicas_to_brokers, rack_alternated
from rivulet.protocol.errors import ApiError, ErrorCode

pytestmark = pytest.mark.fast


def brokers(*ids: int, racks: dict[int, str] | None = None) -> list[BrokerRack]:
    return [BrokerRack(i, (racks or {}).get(i)) for i in ids]


def test_rack_unaware_matches_kafkas_fixed_start_layout():
    got = assign_replicas_to_brokers(brokers(0, 1, 2, 3, 4), 10, 3, fixed_start_index=0)
    assert got == {0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
                   5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2]}


def test_rack_unaware_spreads_leaders_and_never_repeats_a_broker():
    got = assign_replicas_to_brokers(brokers(1, 2, 3), 30, 3, rng=random.Random(7))
    assert all(sorted(r) == [1, 2, 3] for r in got.values())
    assert Counter(r[0] for r in got.values()) == {1: 10, 2: 10, 3: 10}


def test_start_partition_id_continues_a_topics_leaders():
    whole = assign_replicas_to_brokers(brokers(0, 1, 2, 3), 8, 2, fixed_start_index=1)
    tail = assign_replicas_to_brokers(brokers(0, 1, 2, 3), 3, 2, fixed_start_index=1, start_partition_id=5)
    # as Kafka's, the follower shift restarts from the given one: only the leaders continue
    assert tail.keys() == {5, 6, 7} and all(tail[p][0] == whole[p][0] for p in tail)


def test_rack_alternated_broker_list():
    assert rack_alternated({0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}) == \
        [0, 3, 1, 5, 4, 2]


def test_rack_aware_puts_each_replica_on_another_rack():
    racks = {0: "a", 1: "a", 2: "b", 3: "b", 4: "c", 5: "c"}
    got = assign_replicas_to_brokers(brokers(*racks, racks=racks), 12, 3, rng=random.Random(1))
    for replicas in got.values():
        assert len(set(replicas)) == 3
        assert {racks[b] for b in replicas} == {"a", "b", "c"}
    assert Counter(r[0] for r in got.values()) == {b: 2 for b in racks}


def test_rack_aware_with_fewer_racks_than_replicas_uses_every_rack_then_other_brokers():
    racks = {0: "a", 1: "a", 2: "b", 3: "b"}
    got = assign_replicas_to_brokers(brokers(*racks, racks=racks), 8, 3, fixed_start_index=0)
    for replicas in got.values():
        assert len(set(replicas)) == 3 and {racks[b] for b in replicas} == {"a", "b"}


@pytest.mark.parametrize("partitions,rf,code,message", [
    (0, 1, ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0."),
    (1, 0, ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0."),
    (1, 4, ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor: 4 larger than available brokers: 3."),
])
def test_refusals(partitions, rf, code, message):
    with pytest.raises(ApiError) as e:
        assign_replicas_to_brokers(brokers(1, 2, 3), partitions, rf)
    assert e.value.code == code and str(e.value.message) == message


def test_some_brokers_without_a_rack_is_refused():
    with pytest.raises(ApiError) as e:
        assign_replicas_to_brokers(brokers(1, 2, racks={1: "a"}), 1, 1)
    assert e.value.code == ErrorCode.INVALID_REPLICATION_FACTOR


def test_offline_partition_election_takes_the_first_live_isr_member():
    assert offline_partition_leader([1, 2, 3], [2, 3], live={1, 2, 3}, unclean_enabled=False) == Election(2, (2, 3))
    assert offline_partition_leader([1, 2, 3], [1, 2, 3], live={2, 3}, unclean_enabled=False) == Election(2, (2, 3))


def test_offline_partition_election_unclean_only_when_enabled():
    assert offline_partition_leader([1, 2, 3], [1], live={2, 3}, unclean_enabled=False) is None
    assert offline_partition_leader([1, 2, 3], [1], live={3, 2}, unclean_enabled=True) == Election(2, (2,), True)
    assert offline_partition_leader([1, 2], [1], live=set(), unclean_enabled=True) is None


def test_preferred_replica_election():
    assert preferred_replica_leader([1, 2], [2, 1], live={1, 2}) == Election(1, (2, 1))
    assert preferred_replica_leader([1, 2], [2], live={1, 2}) is None
    assert preferred_replica_leader([1, 2], [1, 2], live={2}) is None


def test_controlled_shutdown_election_moves_leadership_and_drops_the_broker_from_the_isr():
    assert controlled_shutdown_leader([1, 2, 3], [1, 2, 3], {1, 2, 3}, shutting_down={1}) == Election(2, (2, 3))
    assert controlled_shutdown_leader([1, 2], [1], {1, 2}, shutting_down={1}) is None
