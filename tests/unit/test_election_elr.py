"""KIP-966's election rules (rivulet/controller/election.py), as Kafka 4.3's PartitionChangeBuilder
applies them at eligible.leader.replicas.version 1: the ELR kept below min ISR, elections from
it, the last known leader, and unclean election last."""

from __future__ import annotations

import pytest

from rivulet.controller.election import NO_LEADER, ElrState, elr_change, eligible_leader_replicas, preferred_elr_leader

pytestmark = pytest.mark.fast

REPLICAS = [1, 2, 3]


def test_elr_is_empty_while_the_isr_keeps_min_isr():
    assert eligible_leader_replicas((1, 2, 3), (1, 2), (), min_isr=2) == ()
    # reaching min ISR again clears an ELR the partition had
    assert eligible_leader_replicas((1,), (1, 2), (3,), min_isr=2) == ()


def test_replicas_leaving_below_min_isr_become_eligible_unless_they_stopped_uncleanly():
    assert eligible_leader_replicas((1, 2), (1,), (), min_isr=2) == (2,)
    assert eligible_leader_replicas((1,), (), (2,), min_isr=2) == (1, 2)
    assert eligible_leader_replicas((1, 2), (1,), (3,), min_isr=2, unclean_shutdown=(3,)) == (2,)


def test_losing_every_isr_member_one_by_one():
    """RF 3, min ISR 2: each loss below min ISR moves the lost replica into the ELR; the last
    one leaves the ISR empty, the partition leaderless and its leader remembered."""
    s = ElrState(1, (1, 2, 3))
    s = elr_change(REPLICAS, s, (1, 2), live={1, 2}, min_isr=2, unclean_enabled=False)
    assert s == ElrState(1, (1, 2), (), ())
    s = elr_change(REPLICAS, s, (1,), live={1}, min_isr=2, unclean_enabled=False)
    assert s == ElrState(1, (1,), (2,), ())
    s = elr_change(REPLICAS, s, (), live=set(), min_isr=2, unclean_enabled=False)
    assert s == ElrState(NO_LEADER, (), (1, 2), (1,))


def test_a_returning_elr_member_leads_alone_and_leaves_the_elr():
    s = ElrState(NO_LEADER, (), (1, 2), (1,))
    s = elr_change(REPLICAS, s, (), live={2}, min_isr=2, unclean_enabled=False)
    assert s == ElrState(2, (2,), (1,), ())
    assert not s.recovering


def test_the_isr_goes_before_the_elr():
    s = ElrState(3, (1, 3), (2,))
    after = elr_change(REPLICAS, s, (1,), live={1, 2}, min_isr=2, unclean_enabled=False)
    # 1 is in the ISR: it leads, and 3 (lost below min ISR) joins 2 in the ELR
    assert after == ElrState(1, (1,), (2, 3), ())


def test_the_last_known_leader_leads_uncleanly_when_isr_and_elr_are_empty():
    s = ElrState(NO_LEADER, (), (), (3,))
    assert elr_change(REPLICAS, s, (), live={1, 2}, min_isr=2, unclean_enabled=False) == s
    after = elr_change(REPLICAS, s, (), live={3}, min_isr=2, unclean_enabled=False)
    assert after == ElrState(3, (3,), (), (), recovering=True)


def test_unclean_election_comes_last_and_clears_the_elr():
    s = ElrState(NO_LEADER, (), (2,), ())
    # 2 is eligible but down: without unclean election the partition waits for it
    assert elr_change(REPLICAS, s, (), live={3}, min_isr=2, unclean_enabled=False) == s
    assert elr_change(REPLICAS, s, (), live={3}, min_isr=2, unclean_enabled=True) == \
        ElrState(3, (3,), (), (), recovering=True)


def test_controlled_shutdown_keeps_the_broker_eligible():
    """A broker shutting down cleanly leaves the ISR (it may not lead) but, below min ISR, stays
    in the ELR; one that stopped uncleanly does not."""
    s = ElrState(2, (1, 2))
    assert elr_change(REPLICAS, s, (1,), live={1}, min_isr=2, unclean_enabled=False) == ElrState(1, (1,), (2,))
    assert elr_change(REPLICAS, s, (1,), live={1}, min_isr=2, unclean_enabled=False,
                      unclean_shutdown=(2,)) == ElrState(1, (1,), ())


def test_min_isr_one_has_an_elr_only_once_the_isr_is_empty():
    s = ElrState(1, (1, 2))
    s = elr_change(REPLICAS, s, (1,), live={1}, min_isr=1, unclean_enabled=False)
    assert s == ElrState(1, (1,), ())
    s = elr_change(REPLICAS, s, (), live=set(), min_isr=1, unclean_enabled=False)
    assert s == ElrState(NO_LEADER, (), (1,), (1,))


def test_the_preferred_replica_from_the_isr_or_else_from_the_elr():
    assert preferred_elr_leader(REPLICAS, ElrState(2, (2, 1)), live={1, 2}) == ElrState(1, (2, 1))
    assert preferred_elr_leader(REPLICAS, ElrState(NO_LEADER, (), (1, 3), (2,)), live={1}) == \
        ElrState(1, (1,), (3,), ())
    assert preferred_elr_leader(REPLICAS, ElrState(2, (2,), (1,)), live={1, 2}) is None  # ISR first
    assert preferred_elr_leader(REPLICAS, ElrState(2, (2, 1)), live={2}) is None
