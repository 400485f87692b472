"""Partition leader election, as Kafka's PartitionLeaderElectionAlgorithms: who leads, and
with which ISR, when a leader is lost, when a broker shuts down, or when the preferred
replica should lead again. Pure: the controller supplies the assignment and liveness."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass


@dataclass(frozen=True)
class Election:
    leader: int
    isr: tuple[int, ...]
    unclean: bool = False


def offline_partition_leader(assignment: list[int], isr: Collection[int], live: Collection[int],
                             unclean_enabled: bool) -> Election | None:
    """The first live replica (in assignment order) that is in the ISR; else, only when unclean
    election is enabled, the first live replica, alone in the new ISR. None: no leader."""
    for r in assignment:
        if r in live and r in isr:
            return Election(r, tuple(i for i in isr if i in live))
    if unclean_enabled:
        for r in assignment:
            if r in live:
                return Election(r, (r,), unclean=True)
    return None


def preferred_replica_leader(assignment: list[int], isr: Collection[int], live: Collection[int]
                             ) -> Election | None:
    """The first replica of the assignment, when it is live and in the ISR."""
    if assignment and assignment[0] in live and assignment[0] in isr:
        return Election(assignment[0], tuple(isr))
    return None


def controlled_shutdown_leader(assignment: list[int], isr: Collection[int], live: Collection[int],
                               shutting_down: Collection[int]) -> Election | None:
    """A live ISR member that is not shutting down; the shutting-down brokers leave the ISR."""
    for r in assignment:
        if r in live and r in isr and r not in shutting_down:
            return Election(r, tuple(i for i in isr if i not in shutting_down))
    return None
