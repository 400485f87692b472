"""What the console shows, as pure functions: record bytes as text, JSON or hex, a lag in time,
and the lag history per partition as the lines of a small chart (the SVG is drawn by the template)."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rivulet.common.types import TopicPartition

VIEWS = ("text", "json", "hex")
# The message browser's view decoding the schema registry's wire format, when it has a registry.
REGISTRY_VIEW = "registry"


def show_bytes(data: bytes | None, view: str) -> str:
    """``data`` as the chosen view; ``null`` for a missing key or value. Text shows bytes that
    are not UTF-8 as replacement characters, JSON falls back to text when the bytes do not
    parse, hex is two digits per byte in groups of four bytes."""
    if data is None:
        return "null"
    if view == "hex":
        h = data.hex()
        return " ".join(h[i:i + 8] for i in range(0, len(h), 8))
    text = data.decode("utf-8", errors="replace")
    if view == "json":
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            return text
    return text


def show_duration(ms: int | None) -> str:
    """A lag in time as people read it: ``0 s``, ``4.2 s``, ``3 min 5 s``, ``2 h 10 min``,
    ``3 d 4 h``; ``-`` when not known."""
    if ms is None:
        return "-"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s".replace(".0 s", " s")
    s = ms // 1000
    for unit, size, sub, sub_size in (("d", 86400, "h", 3600), ("h", 3600, "min", 60)):
        if s >= size:
            return f"{s // size} {unit} {s % size // sub_size} {sub}"
    return f"{s // 60} min {s % 60} s"


@dataclass
class LagHistory:
    """The last ``size`` samples of a group's lag per partition, oldest first; a partition
    without a committed offset is absent from a sample."""

    size: int = 60

    def __post_init__(self) -> None:
        self.samples: deque[dict[TopicPartition, int]] = deque(maxlen=self.size)

    def add(self, lags: Mapping[TopicPartition, int]) -> None:
        self.samples.append(dict(lags))


# Tableau's ten categorical colours: told apart easily, also in print.
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#bab0ac")


@dataclass(frozen=True)
class LagLine:
    tp: TopicPartition
    color: str
    lags: list[int | None]  # per sample; None where the partition had no committed offset
    path: str  # SVG path data; a gap where a sample lacks the partition

    @property
    def last(self) -> int | None:
        return self.lags[-1]


@dataclass(frozen=True)
class LagChart:
    """One line per partition over the samples, scaled to the box (the largest lag at the top)."""

    width: int
    height: int
    top: int
    lines: list[LagLine]
    left_out: int  # partitions not drawn, as only the ``most`` laggiest are


def lag_chart(samples: Sequence[Mapping[TopicPartition, int]], width: int = 480, height: int = 120,
              most: int = len(PALETTE)) -> LagChart | None:
    """The chart of the ``most`` partitions with the largest lag now (then ever); None without
    two samples to join."""
    if len(samples) < 2:
        return None
    seen = sorted({tp for s in samples for tp in s})
    peak = {tp: max(s.get(tp, 0) for s in samples) for tp in seen}
    chosen = sorted(sorted(seen, key=lambda tp: (-samples[-1].get(tp, -1), -peak[tp], tp))[:most])
    top = max([*peak.values(), 1])
    step = width / (len(samples) - 1)
    lines = []
    for i, tp in enumerate(chosen):
        lags = [s.get(tp) for s in samples]
        path, joined = [], False
        for x, lag in enumerate(lags):
            if lag is None:
                joined = False
                continue
            path.append(f"{'L' if joined else 'M'}{x * step:.1f},{height - lag * height / top:.1f}")
            joined = True
        lines.append(LagLine(tp, PALETTE[i % len(PALETTE)], lags, " ".join(path)))
    return LagChart(width, height, top, lines, len(seen) - len(chosen))
