"""Server-side partition assignors of KIP-848 consumer groups (``group.consumer.assignors``;
a member names one with ``group.remote.assignor``). The coordinator runs them when the group
epoch moves past the target assignment's; they see members and partition counts only."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Mapping, Protocol

Assignment = dict[uuid.UUID, set[int]]
"""Partitions by topic id."""


@dataclass(frozen=True)
class MemberSpec:
    """What an assignor knows of one member: its subscription (resolved to topic ids), its rack,
    and its current target assignment, which a sticky assignor keeps where it can."""

    subscribed_topic_ids: frozenset[uuid.UUID]
    rack_id: str | None = None
    assigned: Mapping[uuid.UUID, frozenset[int]] = field(default_factory=dict)


class PartitionAssignor(Protocol):
    name: str

    def assign(self, members: Mapping[str, MemberSpec],
               partitions_per_topic: Mapping[uuid.UUID, int]) -> dict[str, Assignment]:
        """The target assignment of every member; a partition goes to at most one member, and
        only to a member subscribed to its topic."""
        ...


class UniformAssignor:
    """Balanced and sticky: every member subscribed to a topic may own its partitions, counts
    differ by at most one between members that could trade, and a member keeps what it had
    unless balance requires moving it."""

    name = "uniform"

    def assign(self, members: Mapping[str, MemberSpec],
               partitions_per_topic: Mapping[uuid.UUID, int]) -> dict[str, Assignment]:
        result: dict[str, Assignment] = {m: {} for m in members}
        count = dict.fromkeys(members, 0)
        eligible: dict[uuid.UUID, list[str]] = {}
        for member_id in sorted(members):
            for topic_id in members[member_id].subscribed_topic_ids:
                if partitions_per_topic.get(topic_id, 0) > 0:
                    eligible.setdefault(topic_id, []).append(member_id)
        total = sum(partitions_per_topic[t] for t in eligible)
        # With every member able to own everything, nobody keeps more than its fair share.
        homogeneous = all(len(ms) == len(members) for ms in eligible.values())
        cap = -(-total // len(members)) if members and homogeneous else total
        owner: dict[tuple[uuid.UUID, int], str] = {}
        for member_id in sorted(members):
            spec = members[member_id]
            for topic_id in sorted(spec.assigned):
                if topic_id not in spec.subscribed_topic_ids or topic_id not in eligible:
                    continue
                for p in sorted(spec.assigned[topic_id]):
                    if p < partitions_per_topic[topic_id] and (topic_id, p) not in owner and count[member_id] < cap:
                        owner[(topic_id, p)] = member_id
                        result[member_id].setdefault(topic_id, set()).add(p)
                        count[member_id] += 1
        # The rest, the least flexible first, each to the least loaded member that may take it.
        free = [(len(eligible[t]), str(t), t, p) for t in eligible for p in range(partitions_per_topic[t])
                if (t, p) not in owner]
        for _, _, topic_id, p in sorted(free):
            member_id = min(eligible[topic_id], key=lambda m: (count[m], m))
            owner[(topic_id, p)] = member_id
            result[member_id].setdefault(topic_id, set()).add(p)
            count[member_id] += 1
        self._balance(result, count, eligible)
        return result

    @staticmethod
    def _balance(result: dict[str, Assignment], count: dict[str, int],
                 eligible: dict[uuid.UUID, list[str]]) -> None:
        # Each move lowers the sum of squared counts, so this ends.
        while True:
            moved = False
            for giver in sorted(count, key=lambda m: (-count[m], m)):
                best: tuple[int, str, uuid.UUID, int] | None = None
                for topic_id, parts in result[giver].items():
                    for taker in eligible[topic_id]:
                        if count[taker] + 1 < count[giver] and (best is None or count[taker] < best[0]):
                            best = (count[taker], taker, topic_id, max(parts))
                if best is not None:
                    _, taker, topic_id, p = best
                    result[giver][topic_id].discard(p)
                    if not result[giver][topic_id]:
                        del result[giver][topic_id]
                    result[taker].setdefault(topic_id, set()).add(p)
                    count[giver] -= 1
                    count[taker] += 1
                    moved = True
                    break
            if not moved:
                return


class RangeAssignor:
    """Per topic, the members subscribed to it in member-id order each take a contiguous range;
    the first ``partitions % members`` take one more. Topics with the same partition count are
    thus co-partitioned across members with the same subscription."""

    name = "range"

    def assign(self, members: Mapping[str, MemberSpec],
               partitions_per_topic: Mapping[uuid.UUID, int]) -> dict[str, Assignment]:
        result: dict[str, Assignment] = {m: {} for m in members}
        subscribers: dict[uuid.UUID, list[str]] = {}
        for member_id in sorted(members):
            for topic_id in members[member_id].subscribed_topic_ids:
                if partitions_per_topic.get(topic_id, 0) > 0:
                    subscribers.setdefault(topic_id, []).append(member_id)
        for topic_id, ms in subscribers.items():
            n = partitions_per_topic[topic_id]
            per, extra = divmod(n, len(ms))
            start = 0
            for i, member_id in enumerate(ms):
                size = per + (1 if i < extra else 0)
                if size:
                    result[member_id][topic_id] = set(range(start, start + size))
                start += size
        return result


ASSIGNORS: dict[str, PartitionAssignor] = {a.name: a for a in (UniformAssignor(), RangeAssignor())}
