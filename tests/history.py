"""A history checker for replication tests, in the manner of Jepsen's Kafka workload.

Producers record what the cluster acknowledged, (partition, offset, value); consumers record
what they read back, in the order they read it. ``check`` then looks for the anomalies a
broken replication protocol produces:

- lost: an acknowledged record that no read returned at its offset;
- inconsistent: one offset seen with two different values (by reads or an acknowledgement);
- duplicate: one value at two offsets of the same partition (producers write unique values
  with idempotence on, so a retry that was appended twice shows here);
- nonmonotonic: one consumer's reads of a partition going back or repeating an offset
  without a seek in between (a consumer that restarts begins a new read sequence).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field


@dataclass
class Anomalies:
    lost: list[tuple[int, int, bytes]] = field(default_factory=list)
    inconsistent: list[tuple[int, int, set[bytes]]] = field(default_factory=list)
    duplicate: list[tuple[int, bytes, list[int]]] = field(default_factory=list)
    nonmonotonic: list[tuple[int, int, int]] = field(default_factory=list)  # partition, previous, next

    def __bool__(self) -> bool:
        return bool(self.lost or self.inconsistent or self.duplicate or self.nonmonotonic)

    def summary(self, limit: int = 5) -> str:
        parts = []
        for name in ("lost", "inconsistent", "duplicate", "nonmonotonic"):
            items = getattr(self, name)
            if items:
                parts.append(f"{len(items)} {name} (first: {items[:limit]})")
        return "; ".join(parts) or "no anomalies"


class History:
    def __init__(self) -> None:
        self.acked: dict[tuple[int, int], bytes] = {}
        self._ack_conflicts: list[tuple[int, int, set[bytes]]] = []
        self.seen: dict[tuple[int, int], set[bytes]] = defaultdict(set)
        self._sequences: list[list[tuple[int, int]]] = []

    def ack(self, partition: int, offset: int, value: bytes) -> None:
        """The cluster acknowledged ``value`` at ``offset`` (a producer's delivery report)."""
        old = self.acked.setdefault((partition, offset), value)
        if old != value:
            self._ack_conflicts.append((partition, offset, {old, value}))

    def new_read_sequence(self) -> None:
        """A consumer (re)starts or seeks: its next reads need not follow the earlier ones."""
        self._sequences.append([])

    def read(self, partition: int, offset: int, value: bytes) -> None:
        if not self._sequences:
            self.new_read_sequence()
        self.seen[(partition, offset)].add(value)
        self._sequences[-1].append((partition, offset))

    def check(self) -> Anomalies:
        out = Anomalies(inconsistent=list(self._ack_conflicts))
        for (p, o), value in sorted(self.acked.items()):
            seen = self.seen.get((p, o), set())
            if value not in seen:
                out.lost.append((p, o, value))
        for (p, o), values in sorted(self.seen.items()):
            acked = self.acked.get((p, o))
            everything = values | ({acked} if acked is not None else set())
            if len(everything) > 1:
                out.inconsistent.append((p, o, everything))
        offsets_of: dict[tuple[int, bytes], set[int]] = defaultdict(set)
        for (p, o), values in self.seen.items():
            for v in values:
                offsets_of[(p, v)].add(o)
        for (p, o), v in self.acked.items():
            offsets_of[(p, v)].add(o)
        for (p, v), offsets in sorted(offsets_of.items()):
            if len(offsets) > 1:
                out.duplicate.append((p, v, sorted(offsets)))
        for seq in self._sequences:
            last: dict[int, int] = {}
            for p, o in seq:
                if p in last and o <= last[p]:
                    out.nonmonotonic.append((p, last[p], o))
                last[p] = o
        return out
