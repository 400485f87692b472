"""Fetch from the closest replica (KIP-392): which replica a consumer should read from, as
Kafka's ``replica.selector.class`` chooses. ``LeaderSelector`` keeps consumers on the leader;
``RackAwareReplicaSelector`` prefers a replica in the consumer's rack (``client.rack``), the one
furthest along (then the most recently caught up), else the leader. Pure."""

from __future__ import annotations

from dataclasses import dataclass

LEADER_SELECTOR = "org.apache.kafka.common.replica.LeaderSelector"
RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
SELECTORS = (LEADER_SELECTOR, RACK_AWARE_SELECTOR)


@dataclass(frozen=True, slots=True)
class ReplicaView:
    broker_id: int
    rack: str | None
    log_end_offset: int
    last_caught_up_time_ms: int


def select_read_replica(selector: str | None, client_rack: str, leader: ReplicaView,
                        candidates: list[ReplicaView]) -> int:
    """The broker the consumer should fetch from; ``candidates`` are the followers that hold
    the fetch offset (the leader is always one)."""
    if selector != RACK_AWARE_SELECTOR or not client_rack:
        return leader.broker_id
    if leader.rack == client_rack:
        return leader.broker_id
    same_rack = [r for r in candidates if r.rack == client_rack]
    if not same_rack:
        return leader.broker_id
    best = max(same_rack, key=lambda r: (r.log_end_offset, r.last_caught_up_time_ms))
    return best.broker_id
