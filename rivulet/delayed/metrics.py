"""A small windowed rate meter (events per second) for purgatory metrics."""

from __future__ import annotations

from typing import Callable

__all__ = ["RateMeter"]


class RateMeter:
    """Counts events and reports their rate over the last ``window_ms``.

    The window is kept as ``samples`` fixed sub-windows (a ring), so marking
    is O(1) and memory is constant; the oldest sub-window is dropped whole,
    which is the usual accuracy trade-off of Kafka's SampledStat.
    """

    __slots__ = ("_clock", "_sub_ms", "_samples", "_counts", "_epochs", "_start_ms", "count")

    def __init__(
        self, clock: Callable[[], int], window_ms: int = 30_000, samples: int = 30
    ) -> None:
        if samples < 1 or window_ms < samples:
            raise ValueError("need window_ms >= samples >= 1")
        self._clock = clock
        self._sub_ms = window_ms // samples
        self._samples = samples
        self._counts = [0] * samples
        self._epochs = [-1] * samples
        self._start_ms = clock()
        self.count = 0  # total since creation

    def mark(self, n: int = 1) -> None:
        epoch = self._clock() // self._sub_ms
        slot = epoch % self._samples
        if self._epochs[slot] != epoch:
            self._epochs[slot] = epoch
            self._counts[slot] = 0
        self._counts[slot] += n
        self.count += n

    def rate(self) -> float:
        """Events per second over the window (or since creation, if shorter)."""
        now = self._clock()
        oldest = now // self._sub_ms - self._samples + 1
        total = sum(c for c, e in zip(self._counts, self._epochs) if e >= oldest)
        span_ms = now - max(self._start_ms, oldest * self._sub_ms)
        return total * 1000.0 / max(span_ms, 1)
