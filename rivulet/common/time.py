"""The one clock: wall-clock milliseconds for timestamps and expiry, a monotonic clock for
durations. Components take a ``Clock`` so tests can move time by hand (``MockClock``)."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def milliseconds(self) -> int:
        """Wall-clock time in ms since the epoch (record timestamps, expiry)."""
        ...

    def monotonic_ms(self) -> float:
        """A clock that never goes back, in ms (timeouts, durations)."""
        ...


class SystemClock:
    def milliseconds(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> float:
        return time.monotonic() * 1000.0


class MockClock:
    """A clock for tests: time moves only when ``sleep`` is called."""

    def __init__(self, wall_ms: int = 1_700_000_000_000, monotonic_ms: float = 0.0) -> None:
        self._wall = wall_ms
        self._mono = monotonic_ms

    def milliseconds(self) -> int:
        return self._wall

    def monotonic_ms(self) -> float:
        return self._mono

    def sleep(self, ms: float) -> None:
        self._wall += int(ms)
        self._mono += ms


SYSTEM_CLOCK = SystemClock()


def now_ms() -> int:
    """Wall-clock ms: for code with no Clock of its own to hand (CLI, client)."""
    return time.time_ns() // 1_000_000
