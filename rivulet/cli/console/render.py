"""What the console shows, as pure functions: record bytes as text, JSON or hex, and the lag
history as a small SVG chart."""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass

VIEWS = ("text", "json", "hex")


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


@dataclass
class LagHistory:
    """The last ``size`` samples of a group's total lag, oldest first."""

    size: int = 60

    def __post_init__(self) -> None:
        self.samples: deque[int] = deque(maxlen=self.size)

    def add(self, lag: int) -> None:
        self.samples.append(lag)


def lag_chart(samples: list[int], width: int = 480, height: int = 120) -> str:
    """An SVG polyline of ``samples`` scaled to the box (the largest sample at the top); an
    empty string without two samples to join."""
    if len(samples) < 2:
        return ""
    top = max(max(samples), 1)
    step = width / (len(samples) - 1)
    points = " ".join(f"{i * step:.1f},{height - s * height / top:.1f}" for i, s in enumerate(samples))
    return (f'<svg class="lag-chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
            f'role="img" aria-label="total lag over time, at most {top}">'
            f'<polyline fill="none" stroke="currentColor" stroke-width="2" points="{points}"/></svg>')
