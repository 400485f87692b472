"""Server-side partition assignors of KIP-848 consumer groups (``group.consumer.assignors``;
a member names one with ``group.remote.assignor``). The coordinator runs them when the group
epoch moves past the target assignment's; they see members, partition counts, and, when
members say their rack (``client.rack``), the racks of each partition's replicas: a member is
then given partitions with a replica in its rack where that costs no balance."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Callable, Mapping, Protocol

Assignment = dict[uuid.UUID, set[int]]
"""Partitions by topic id."""
PartitionRacks = Callable[[uuid.UUID, int], frozenset[str]]
"""The racks of the replicas of (topic id, partition)."""


@dataclass(frozen=True)
class MemberSpec:
    """What an assignor knows of one member: its subscription (resolved to topic ids), its rack,
    and its current target assignment, which a sticky assignor keeps where it can."""

    subscribed_topic_ids: frozenset[uuid.UUID]
    rack_id: str | None = None
    assigned: Mapping[uuid.UUID, frozenset[int]] = field(default_factory=dict)


class PartitionAssignor(Protocol):
    name: str

    def assign(self, members: Mapping[str, MemberSpec], partitions_per_topic: Mapping[uuid.UUID, int],
               racks: PartitionRacks | None = None) -> dict[str, Assignment]:
        """The target assignment of every member; a partition goes to at most one member, and
        only to a member subscribed to its topic."""
        ...


class UniformAssignor:
    """Balanced and sticky: every member subscribed to a topic may own its partitions, counts
    differ by at most one between members that could trade, and a member keeps what it had
    unless balance requires moving it."""

    name = "uniform"

    def assign(self, members: Mapping[str, MemberSpec], partitions_per_topic: Mapping[uuid.UUID, int],
               racks: PartitionRacks | None = None) -> dict[str, Assignment]:
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
                # Over its share, a member keeps first what lies in its rack.
                def far(p: int) -> bool:
                    return racks is not None and member_id not in _near(members, racks, topic_id, p)
                for p in sorted(spec.assigned[topic_id], key=lambda p: (far(p), p)):
                    if p < partitions_per_topic[topic_id] and (topic_id, p) not in owner and count[member_id] < cap:
                        owner[(topic_id, p)] = member_id
                        result[member_id].setdefault(topic_id, set()).add(p)
                        count[member_id] += 1
        # The rest, the least flexible first, each to the least loaded member that may take it,
        # or in a rack holding a replica while it is under its share (balancing evens it out).
        free = [(len(eligible[t]), str(t), t, p) for t in eligible for p in range(partitions_per_topic[t])
                if (t, p) not in owner]
        for _, _, topic_id, p in sorted(free):
            near = [m for m in eligible[topic_id] if count[m] < cap and m in _near(members, racks, topic_id, p)]
            member_id = min(near or eligible[topic_id], key=lambda m: (count[m], m))
            owner[(topic_id, p)] = member_id
            result[member_id].setdefault(topic_id, set()).add(p)
            count[member_id] += 1
        near_cache: dict[tuple[uuid.UUID, int], set[str]] = {}

        def near(topic_id: uuid.UUID, p: int, member_id: str) -> bool:
            key = (topic_id, p)
            if key not in near_cache:
                near_cache[key] = _near(members, racks, topic_id, p)
            return member_id in near_cache[key]
        self._balance(result, count, eligible, near if racks is not None else None)
        return result

    @staticmethod
    def _balance(result: dict[str, Assignment], count: dict[str, int], eligible: dict[uuid.UUID, list[str]],
                 near: Callable[[uuid.UUID, int, str], bool] | None) -> None:
        # Each move lowers the sum of squared counts, so this ends. Of equally good moves, one
        # that brings a partition to a member in its replicas' rack is taken.
        while True:
            moved = False
            for giver in sorted(count, key=lambda m: (-count[m], m)):
                best: tuple[int, bool, str, uuid.UUID, int] | None = None
                for topic_id, parts in result[giver].items():
                    for taker in eligible[topic_id]:
                        if count[taker] + 1 >= count[giver]:
                            continue
                        for p in sorted(parts, reverse=True) if near is not None else (max(parts),):
                            key = (count[taker], near is None or not near(topic_id, p, taker), taker, topic_id, p)
                            if best is None or key[:3] < best[:3]:
                                best = key
                if best is not None:
                    _, _, taker, topic_id, p = best
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

    def assign(self, members: Mapping[str, MemberSpec], partitions_per_topic: Mapping[uuid.UUID, int],
               racks: PartitionRacks | None = None) -> dict[str, Assignment]:
        result: dict[str, Assignment] = {m: {} for m in members}
        subscribers: dict[uuid.UUID, list[str]] = {}
        for member_id in sorted(members):
            for topic_id in members[member_id].subscribed_topic_ids:
                if partitions_per_topic.get(topic_id, 0) > 0:
                    subscribers.setdefault(topic_id, []).append(member_id)
        for topic_id, ms in subscribers.items():
            n = partitions_per_topic[topic_id]
            per, extra = divmod(n, len(ms))
            quota = {m: per + (1 if i < extra else 0) for i, m in enumerate(ms)}
            left = list(range(n))
            if racks is not None and any(members[m].rack_id for m in ms):
                # As the client's range assignor does with racks (KIP-881): the same counts, but
                # a partition goes first to a member in its replicas' rack that has room.
                rest = []
                for p in left:
                    near = _near(members, racks, topic_id, p)
                    taker = next((m for m in ms if m in near and quota[m]), None)
                    if taker is None:
                        rest.append(p)
                    else:
                        result[taker].setdefault(topic_id, set()).add(p)
                        quota[taker] -= 1
                left = rest
            for member_id in ms:
                take, left = left[:quota[member_id]], left[quota[member_id]:]
                if take:
                    result[member_id].setdefault(topic_id, set()).update(take)
        return result


def _near(members: Mapping[str, MemberSpec], racks: PartitionRacks | None, topic_id: uuid.UUID,
          partition: int) -> set[str]:
    """The members in a rack that holds a replica of the partition."""
    if racks is None:
        return set()
    where = racks(topic_id, partition)
    return {m for m, spec in members.items() if spec.rack_id is not None and spec.rack_id in where}


ASSIGNORS: dict[str, PartitionAssignor] = {a.name: a for a in (UniformAssignor(), RangeAssignor())}


class SimpleAssignor:
    """The share groups' assignor (``group.share.assignors``, KIP-932): members of a share group
    may share a partition, so every subscribed partition gets a member even when members are
    fewer than partitions, and extra members share partitions rather than idle. Balance comes
    first, then stickiness.

    As Kafka's: with M members and P partitions, each partition is shared by ``ceil(M / P)``
    members and the ``ceil(M / P) * P`` places are spread so that member counts differ by at
    most one. When every member subscribes to the same topics, M and P count the whole group;
    otherwise each topic is balanced on its own, over its subscribers and its partitions."""

    name = "simple"

    def assign(self, members: Mapping[str, MemberSpec], partitions_per_topic: Mapping[uuid.UUID, int],
               racks: PartitionRacks | None = None,
               assignable: Mapping[uuid.UUID, frozenset[int]] | None = None) -> dict[str, Assignment]:
        """``assignable``: only these partitions of each topic (a share group's initialized ones)."""
        result: dict[str, Assignment] = {m: {} for m in members}
        order = sorted(members)

        def partitions_of(t: uuid.UUID) -> list[int]:
            n = partitions_per_topic.get(t, 0)
            if assignable is None:
                return list(range(n))
            return sorted(p for p in assignable.get(t, ()) if p < n)
        topics = sorted({t for m in order for t in members[m].subscribed_topic_ids if partitions_of(t)}, key=str)
        if len({members[m].subscribed_topic_ids for m in order}) == 1:
            pools = [(order, [(t, p) for t in topics for p in partitions_of(t)])]
        else:
            pools = [([m for m in order if t in members[m].subscribed_topic_ids],
                      [(t, p) for p in partitions_of(t)]) for t in topics]
        for pool_members, pool_partitions in pools:
            if pool_members and pool_partitions:
                self._assign_pool(members, pool_members, pool_partitions, result)
        return result

    @staticmethod
    def _assign_pool(members: Mapping[str, MemberSpec], order: list[str], partitions: list[tuple[uuid.UUID, int]],
                     result: dict[str, Assignment]) -> None:
        share = -(-len(order) // len(partitions))
        places = share * len(partitions)
        # Member i takes ceil(places*(i+1)/M) - ceil(places*i/M): counts differ by at most one.
        quota = {m: -(-places * (i + 1) // len(order)) - -(-places * i // len(order)) for i, m in enumerate(order)}
        holders: dict[tuple[uuid.UUID, int], list[str]] = {tp: [] for tp in partitions}
        count = dict.fromkeys(order, 0)

        def give(member_id: str, tp: tuple[uuid.UUID, int]) -> None:
            holders[tp].append(member_id)
            result[member_id].setdefault(tp[0], set()).add(tp[1])
            count[member_id] += 1
        for member_id in order:  # stickiness: what a member had, within both limits
            assigned = members[member_id].assigned
            for tp in sorted(((t, p) for t in assigned for p in assigned[t]), key=lambda tp: (str(tp[0]), tp[1])):
                if tp in holders and count[member_id] < quota[member_id] and len(holders[tp]) < share:
                    give(member_id, tp)
        # The rest: the least shared partitions first, each to the member furthest below its quota.
        for tp in sorted(partitions, key=lambda tp: (len(holders[tp]), str(tp[0]), tp[1])):
            while len(holders[tp]) < share:
                free = [m for m in order if m not in holders[tp] and count[m] < quota[m]]
                if not free:
                    break  # as Kafka, a slight imbalance is tolerated rather than reshuffled
                give(min(free, key=lambda m: (count[m] - quota[m], m)), tp)


SHARE_ASSIGNORS: dict[str, SimpleAssignor] = {"simple": SimpleAssignor()}
