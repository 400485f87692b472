"""``Timer``: the timing wheel driven by an asyncio loop or by hand.

Kafka's SystemTimer has a reaper thread blocking on the DelayQueue.  Here the
loop itself is the waiter: the timer keeps exactly one ``loop.call_at`` handle,
armed for the earliest queued bucket.  ``add`` re-arms it only when a bucket
that expires earlier than the armed one is queued (or a task is already due);
each wake-up runs one pass and arms the handle for the new earliest bucket.
Nothing polls: an idle timer has no handle at all.

Without a loop the timer is manual (for deterministic tests): time only moves
when ``advance_clock(now_ms)`` is called, unless a ``clock`` is injected.
"""

from __future__ import annotations

import asyncio
import math
from heapq import heappop
from time import monotonic_ns
from typing import Callable

from .timing_wheel import _DIVERT, TimerTask, TimingWheel

__all__ = ["Timer", "monotonic_ms"]


def monotonic_ms() -> int:
    """The default clock: monotonic time in integer milliseconds."""
    return monotonic_ns() // 1_000_000


class Timer(TimingWheel):
    """Hierarchical timing wheel with an asyncio (or manual) driver.

    * ``Timer(loop)``: tasks run on ``loop`` at (or up to one tick after)
      their expiration.  Must be used from the loop's thread.
    * ``Timer()``: manual mode; the clock starts at 0 and only moves with
      ``advance_clock(now_ms)``.
    * ``clock`` (either mode): a zero-argument callable returning integer
      milliseconds; defaults to :func:`monotonic_ms` with a loop.

    A task added with an expiration that is already due runs on the next
    pass, never inside ``add``: the next loop iteration with a loop, the next
    ``advance_clock`` call in manual mode.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop | None = None,
        *,
        tick_ms: int = 1,
        wheel_size: int = 20,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self._loop = loop
        self._handle: asyncio.TimerHandle | None = None
        self._manual_ms = 0
        self._owns_clock = clock is None and loop is None
        if clock is None:
            clock = self._manual_clock if loop is None else monotonic_ms
        super().__init__(tick_ms, wheel_size, clock=clock)
        if loop is not None:
            self._wake_at = math.inf  # nothing armed yet

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        return self._loop

    @property
    def now_ms(self) -> int:
        return self._clock()

    @property
    def wakeup_pending(self) -> bool:
        """Whether a loop wake-up is armed (at most one ever is)."""
        return self._handle is not None

    def advance_clock(self, now_ms: int | None = None) -> int:
        """Run every task due at ``now_ms`` (default: the clock's now).

        In manual mode with the built-in clock, ``now_ms`` also moves that
        clock forward (it never goes back).  Returns the number of tasks run.
        Also safe to call with a loop; the wake-up is re-armed afterwards.
        """
        if now_ms is None:
            now = self._clock()
        elif self._owns_clock:
            if now_ms > self._manual_ms:
                self._manual_ms = now_ms
            now = self._manual_ms
        else:
            now = now_ms
        ran = self.advance_to(now)
        if self._loop is not None and not self._advancing:
            self._rearm()
        return ran

    def after_io(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` once the loop has taken in the I/O ready now, so that requests already
        received are handled first (manual mode: at once).

        Two hops: a callback scheduled from a timer task runs before the loop next polls for I/O
        (uvloop runs due timers, then ready callbacks, then polls; asyncio runs ready callbacks
        before the ones its poll adds); the second, scheduled while the first runs, waits for
        that poll.
        """
        loop = self._loop
        if loop is None:
            callback()
        else:
            loop.call_soon(loop.call_soon, callback)

    def shutdown(self) -> None:
        """Cancel the wake-up and drop all pending tasks without running them.

        Later ``add`` calls raise ``RuntimeError``.
        """
        self._closed = True
        self._bounds = _DIVERT
        self._cancel_handle()
        self._wake_at = -math.inf
        self._clear_all()

    @property
    def is_shutdown(self) -> bool:
        return self._closed

    # -- internals ------------------------------------------------------------

    def _manual_clock(self) -> int:
        return self._manual_ms

    def _cancel_handle(self) -> None:
        h = self._handle
        if h is not None:
            self._handle = None
            h.cancel()

    def _wake_for(self, when_ms: int) -> None:
        # Called by add() only when when_ms is earlier than what is armed.
        loop = self._loop
        if loop is None or self._closed:
            return
        self._cancel_handle()
        delay_ms = when_ms - self._clock()
        # Relative to loop.time(): our clock and the loop's need not agree
        # on an epoch, only on the rate.
        when = loop.time() + (delay_ms / 1000.0 if delay_ms > 0 else 0.0)
        self._handle = loop.call_at(when, self._on_wakeup)
        self._wake_at = when_ms

    def _rearm(self) -> None:
        # Buckets emptied by cancellation stay queued (a heap has no O(1)
        # delete); dropping them here spares a useless wake-up for the head.
        q = self._queue
        while q and not q[0][2]:
            heappop(q)[2].expiration_ms = -1
        nxt = self.next_expiration_ms
        if nxt is None:
            self._cancel_handle()
            self._wake_at = math.inf
        elif self._handle is None or nxt != self._wake_at:
            self._wake_for(nxt)

    def _on_wakeup(self) -> None:
        self._handle = None
        self._wake_at = math.inf
        if self._closed:
            return
        self.advance_to(self._clock())
        self._rearm()

    def _report(self, task: TimerTask, exc: BaseException) -> None:
        loop = self._loop
        if loop is None:
            super()._report(task, exc)
        else:
            loop.call_exception_handler(
                {"message": f"timer task {task!r} failed", "exception": exc, "task": task}
            )
