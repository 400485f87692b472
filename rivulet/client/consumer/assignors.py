"""Partition assignors (range, roundrobin, cooperative-sticky) of classic groups, run by the
group leader. Subscriptions and assignments are encoded by ``rivulet.protocol.consumer_protocol``,
so the leader may be any of Java's client, librdkafka or Rivulet's.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterable

from rivulet.common.types import TopicPartition as TP
from rivulet.protocol.consumer_protocol import Subscription

_I32 = struct.Struct(">i")


@dataclass
class Member:
    member_id: str
    instance_id: str | None
    subscription: Subscription

    def sort_key(self) -> tuple:
        # Static members first, ordered by instance id, then the rest by member id (as Java).
        if self.instance_id is not None:
            return (0, self.instance_id, self.member_id)
        return (1, self.member_id, "")


class Assignor:
    name = ""
    cooperative = False

    def user_data(self, generation: int) -> bytes | None:
        return None

    def assign(self, partitions: dict[str, int], members: list[Member]) -> dict[str, list[TP]]:
        raise NotImplementedError


class RangeAssignor(Assignor):
    """Per topic, consecutive ranges of partitions to the members subscribed to it."""

    name = "range"

    def assign(self, partitions: dict[str, int], members: list[Member]) -> dict[str, list[TP]]:
        out: dict[str, list[TP]] = {m.member_id: [] for m in members}
        topics = sorted({t for m in members for t in m.subscription.topics})
        for topic in topics:
            n = partitions.get(topic)
            if not n:
                continue
            consumers = sorted((m for m in members if topic in m.subscription.topics), key=Member.sort_key)
            per, extra = divmod(n, len(consumers))
            for i, m in enumerate(consumers):
                start = per * i + min(i, extra)
                length = per + (1 if i < extra else 0)
                out[m.member_id].extend((topic, p) for p in range(start, start + length))
        return out


class RoundRobinAssignor(Assignor):
    """All partitions, sorted, dealt to the members in turn (skipping those not subscribed)."""

    name = "roundrobin"

    def assign(self, partitions: dict[str, int], members: list[Member]) -> dict[str, list[TP]]:
        out: dict[str, list[TP]] = {m.member_id: [] for m in members}
        consumers = sorted(members, key=Member.sort_key)
        if not consumers:
            return out
        topics = sorted({t for m in members for t in m.subscription.topics})
        i = 0
        for topic in topics:
            for p in range(partitions.get(topic) or 0):
                for _ in range(len(consumers)):
                    m = consumers[i % len(consumers)]
                    i += 1
                    if topic in m.subscription.topics:
                        out[m.member_id].append((topic, p))
                        break
        return out


class CooperativeStickyAssignor(Assignor):
    """Balanced, keeping partitions where they are, and never moving one in a single round.

    A partition that changes owner is left out of this round's assignment: its old owner sees
    it missing, revokes it and rejoins, and the follow-up rebalance hands it to the new owner.
    Consumers keep fetching everything else throughout.
    """

    name = "cooperative-sticky"
    cooperative = True

    def user_data(self, generation: int) -> bytes | None:
        # Java's CooperativeStickyAssignor puts the generation here for old leaders.
        return _I32.pack(generation)

    @staticmethod
    def _generation(s: Subscription) -> int:
        if s.generation >= 0:
            return s.generation
        ud = s.user_data
        if ud and len(ud) == 4:
            return _I32.unpack(ud)[0]
        if ud and len(ud) >= 8:  # librdkafka/Java StickyAssignor user data: partitions, then generation
            try:
                return _I32.unpack_from(ud, len(ud) - 4)[0]
            except struct.error:
                return -1
        return -1

    def assign(self, partitions: dict[str, int], members: list[Member]) -> dict[str, list[TP]]:
        members = sorted(members, key=Member.sort_key)
        subs = {m.member_id: set(m.subscription.topics) for m in members}
        existing = {(t, p) for t, n in partitions.items() for p in range(n)}
        # Previous owners: a partition claimed twice goes to the claim of the newest generation.
        owner: dict[TP, tuple[int, str]] = {}
        for m in members:
            gen = self._generation(m.subscription)
            for tp in m.subscription.owned:
                if tp not in existing or tp[0] not in subs[m.member_id]:
                    continue
                prev = owner.get(tp)
                if prev is None or gen > prev[0]:
                    owner[tp] = (gen, m.member_id)
        current: dict[str, set[TP]] = {m.member_id: set() for m in members}
        for tp, (_, mid) in owner.items():
            current[mid].add(tp)
        eligible: dict[TP, list[str]] = {
            tp: [m.member_id for m in members if tp[0] in subs[m.member_id]] for tp in sorted(existing)}
        # Unowned partitions, hardest to place first, each to the least loaded member able to take it.
        unassigned = sorted((tp for tp in existing if tp not in owner and eligible[tp]),
                            key=lambda tp: (len(eligible[tp]), tp))
        order = {m.member_id: i for i, m in enumerate(members)}
        for tp in unassigned:
            best = min(eligible[tp], key=lambda mid: (len(current[mid]), order[mid]))
            current[best].add(tp)
        self._balance(current, eligible, order)
        out: dict[str, list[TP]] = {}
        for mid, tps in current.items():
            # A partition moving away from a live owner waits for that owner to revoke it.
            out[mid] = sorted(tp for tp in tps if tp not in owner or owner[tp][1] == mid
                              or owner[tp][1] not in current)
        return out

    @staticmethod
    def _balance(current: dict[str, set[TP]], eligible: dict[TP, list[str]], order: dict[str, int]) -> None:
        """Move partitions from the most to the least loaded members until no move helps."""
        for _ in range(sum(len(v) for v in current.values()) + 1):
            moved = False
            by_load = sorted(current, key=lambda mid: (-len(current[mid]), order[mid]))
            for src in by_load:
                src_load = len(current[src])
                # Prefer the highest partitions, so that low ones stay put (deterministic).
                for tp in sorted(current[src], reverse=True):
                    targets = [mid for mid in eligible[tp] if len(current[mid]) < src_load - 1]
                    if targets:
                        dst = min(targets, key=lambda mid: (len(current[mid]), order[mid]))
                        current[src].discard(tp)
                        current[dst].add(tp)
                        moved = True
                        break
                if moved:
                    break
            if not moved:
                return


ASSIGNORS: dict[str, type[Assignor]] = {
    "range": RangeAssignor,
    "roundrobin": RoundRobinAssignor,
    "cooperative-sticky": CooperativeStickyAssignor,
}


def make_assignors(names: Iterable[str]) -> list[Assignor]:
    return [ASSIGNORS[n]() for n in names]
