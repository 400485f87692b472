"""Partition leader election, as Kafka's PartitionLeaderElectionAlgorithms: who leads, and
with which ISR, when a leader is lost, when a broker shuts down, or when the preferred
replica should lead again. Pure: the controller supplies the assignment and liveness."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass


NO_LEADER = -1  # a partition's leader when none is live


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


# ---------------------------------------------------------------- eligible leader replicas (KIP-966)
# The controller applies these only at a finalized eligible.leader.replicas.version 1, which a
# new cluster does not finalize yet (docs/plans/eligible-leader-replicas.md).
@dataclass(frozen=True)
class ElrState:
    """The part of a partition's state an ELR election reads and writes."""

    leader: int
    isr: tuple[int, ...]
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()
    recovering: bool = False  # leader_recovery_state RECOVERING: the leader was chosen uncleanly


def eligible_leader_replicas(isr: Collection[int], target_isr: Collection[int], elr: Collection[int],
                             min_isr: int, unclean_shutdown: Collection[int] = ()) -> tuple[int, ...]:
    """The ELR once the ISR becomes ``target_isr``: empty while the ISR keeps ``min_isr``
    members; else every replica of the old ISR and ELR that leaves, since each held every record
    the high watermark (which stops below min ISR) ever passed. A broker that stopped uncleanly
    may have lost its unflushed tail and is never eligible."""
    if len(target_isr) >= min_isr:
        return ()
    return tuple(sorted((set(elr) | set(isr)) - set(target_isr) - set(unclean_shutdown)))


def elr_change(assignment: list[int], state: ElrState, target_isr: tuple[int, ...], live: Collection[int],
               min_isr: int, unclean_enabled: bool, unclean_shutdown: Collection[int] = ()) -> ElrState:
    """The partition's next state when its ISR becomes ``target_isr`` (members lost, a shrink
    asked for, a broker shutting down) with ELR on, in Kafka's order: the ELR follows the ISR
    below min ISR, then a leader if the current one cannot stay: the first live replica of the
    ISR, else (the ISR empty) of the ELR, which then leads alone; else the last known leader,
    live, as an unclean choice; else, only with unclean election enabled, the first live replica.
    The ISR may become empty, and the leader it had is remembered as the last known ELR."""
    elr = eligible_leader_replicas(state.isr, target_isr, state.elr, min_isr, unclean_shutdown)
    isr = target_isr

    def valid(r: int) -> bool:
        return r in live and (r in isr or (not isr and r in elr))

    unclean = False
    if valid(state.leader):
        leader = state.leader
    else:
        leader = next((r for r in assignment if valid(r)), NO_LEADER)
        if leader == NO_LEADER and not isr and not elr and len(state.last_known_elr) == 1 \
                and state.last_known_elr[0] in live:
            leader, unclean = state.last_known_elr[0], True
        if leader == NO_LEADER and unclean_enabled:
            leader = next((r for r in assignment if r in live), NO_LEADER)
            unclean = leader != NO_LEADER
    if leader != state.leader and leader in elr:
        isr, elr = (leader,), tuple(r for r in elr if r != leader)
    if unclean:
        isr, elr = (leader,), ()
    last_known = state.last_known_elr
    if not isr and state.isr and state.leader != NO_LEADER:
        last_known = (state.leader,)
    elif leader != NO_LEADER:
        last_known = ()
    return ElrState(leader, isr, elr, last_known, state.recovering or unclean)


def preferred_elr_leader(assignment: list[int], state: ElrState, live: Collection[int]) -> ElrState | None:
    """ElectLeaders PREFERRED with ELR on: the preferred replica, live, from the ISR or, the ISR
    empty, from the ELR (it then leads alone). None: it may not lead."""
    if not assignment or assignment[0] not in live:
        return None
    p = assignment[0]
    if p in state.isr:
        return ElrState(p, state.isr, state.elr, (), state.recovering)
    if not state.isr and p in state.elr:
        return ElrState(p, (p,), tuple(r for r in state.elr if r != p), (), state.recovering)
    return None
