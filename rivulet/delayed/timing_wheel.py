"""Hierarchical timing wheel: Kafka's TimingWheel + TimerTaskList + DelayQueue.

Layout, flattened for CPython speed (one ``add`` call does all the work):

* Level ``k`` has ``tick_k = tick_ms * wheel_size**k`` and covers
  ``[current_k, current_k + tick_k * wheel_size)``.  Level ``k + 1`` (the
  overflow wheel) is created on demand with ``tick_{k+1} = interval_k``.
* Each slot of a level is a :class:`TimerTaskList` (a circular doubly linked
  list whose sentinel is the list itself), so cancelling a task is O(1).
* A heap of ``(expiration, level, bucket)`` plays the role of Kafka's
  DelayQueue: time advances bucket by bucket, never tick by tick.  A popped
  bucket is flushed: its tasks are re-inserted, which moves them to a finer
  level, or runs them when they are due at the current tick.
* ``_bounds`` lets ``bisect`` pick the level in C: ``bounds[0]`` is the end of
  the current tick (anything earlier is due), ``bounds[k + 1]`` is the end of
  level ``k``.  The bounds only change when the clock advances.

Not thread-safe: everything runs on the broker's single event-loop thread.
The re-entrancy rules (a task's ``run`` may add or cancel tasks) are
described on :meth:`TimingWheel.advance_to`.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from heapq import heappop, heappush
from typing import Callable

__all__ = ["TimerTask", "TimerTaskList", "TimingWheel"]

_log = logging.getLogger(__name__)

Clock = Callable[[], int]


class _Cancelled:
    """Marker stored in ``TimerTask._bucket`` once a task is cancelled."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<cancelled>"


_CANCELLED = _Cancelled()

# A bounds table that sends every add() down the slow path (used while a pass
# is running and after shutdown) without costing the hot path a flag test.
_DIVERT = [float("inf")]


class TimerTask:
    """A unit of work run once its delay has elapsed.

    Subclasses override :meth:`run`.  The task is itself the list node, so
    scheduling allocates nothing besides the task.  ``delay_ms`` must be an
    ``int``; it is read when the task is added, so a task that has run may be
    re-armed by setting ``delay_ms`` and adding it again.  ``add`` sets
    ``expiration_ms`` (absolute, in the timer's clock).
    """

    __slots__ = ("delay_ms", "expiration_ms", "_bucket", "_prev", "_next")

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = delay_ms
        # None: not scheduled; a TimerTaskList: linked in it; _CANCELLED.
        self._bucket: TimerTaskList | _Cancelled | None = None

    def run(self) -> None:
        """Called by the timer when the task expires (never if cancelled)."""
        raise NotImplementedError

    def cancel(self) -> None:
        """Unschedule the task for good, in O(1).  Idempotent.

        A cancelled task is never run, and adding it again is ignored.
        """
        b = self._bucket
        if b is None or b is _CANCELLED:
            self._bucket = _CANCELLED
            return
        p = self._prev
        n = self._next
        p._next = n
        n._prev = p
        # Dropping the links breaks the node cycle, so refcounting frees it.
        self._prev = self._next = None
        self._bucket = _CANCELLED
        b._owner._size -= 1

    @property
    def is_cancelled(self) -> bool:
        return self._bucket is _CANCELLED

    @property
    def is_scheduled(self) -> bool:
        """True while the task sits in a timer, waiting to run."""
        b = self._bucket
        return b is not None and b is not _CANCELLED

    def __repr__(self) -> str:
        state = "cancelled" if self.is_cancelled else "scheduled" if self.is_scheduled else "idle"
        return f"<{type(self).__name__} delay_ms={self.delay_ms} {state}>"


class TimerTaskList:
    """One bucket: a circular doubly linked list of tasks, itself the sentinel.

    ``expiration_ms`` is the start of the time span the bucket covers, or -1
    while the bucket is not in the delay queue (a change of expiration is
    what tells ``add`` to queue the bucket again, as in Kafka).
    """

    __slots__ = ("_prev", "_next", "expiration_ms", "_owner")

    def __init__(self, owner: TimingWheel) -> None:
        self._prev: TimerTask | TimerTaskList = self
        self._next: TimerTask | TimerTaskList = self
        self.expiration_ms = -1
        self._owner = owner

    def __bool__(self) -> bool:
        return self._next is not self

    def __len__(self) -> int:
        n = 0
        node = self._next
        while node is not self:
            n += 1
            node = node._next
        return n

    def _append(self, task: TimerTask) -> None:
        tail = self._prev
        task._prev = tail
        task._next = self
        tail._next = task
        self._prev = task
        task._bucket = self

    def _pop_first(self) -> TimerTask | None:
        task = self._next
        if task is self:
            return None
        n = task._next
        self._next = n
        n._prev = self
        task._prev = task._next = None
        task._bucket = None
        return task

    def _clear(self) -> None:
        while self._pop_first() is not None:
            pass


class TimingWheel:
    """All levels of the wheel plus the delay queue, driven by ``advance_to``.

    ``clock`` returns the current time in integer milliseconds; tasks expire
    at ``clock() + delay_ms`` as read when they are added.
    """

    def __init__(self, tick_ms: int = 1, wheel_size: int = 20, *, clock: Clock) -> None:
        if tick_ms < 1 or wheel_size < 2:
            raise ValueError("tick_ms must be >= 1 and wheel_size >= 2")
        self._tick_ms = int(tick_ms)
        self._wheel_size = int(wheel_size)
        self._clock = clock
        self._size = 0
        self._queue: list[tuple[int, int, TimerTaskList]] = []
        # Tasks that were due when added; run at the start of the next pass.
        self._due = TimerTaskList(self)
        # The due list being drained by the current pass (for shutdown).
        self._draining: TimerTaskList | None = None
        # Tasks added while a pass runs; placed once the pass has finished.
        self._incoming = TimerTaskList(self)
        self._advancing = False
        self._closed = False
        # Per level k: tick, current time, buckets.  The *_i lists are indexed
        # by bisect position i = k + 1 (index 0 means "due").
        self._level_ticks: list[int] = []
        self._currents: list[int] = []
        self._ticks_i: list[int] = [0]
        self._slots_i: list[list[TimerTaskList]] = [[]]
        # Expiration of the armed wake-up; add() calls _wake_for() when a
        # bucket expires earlier.  -inf disables wake-ups (manual driving).
        self._wake_at: float = float("-inf")
        t0 = clock()
        self._time = t0
        self._nbounds: list[int] = [t0 - t0 % self._tick_ms + self._tick_ms]
        self._top = 1
        self._add_level(t0)
        # add() bisects this; it is _nbounds except while diverted (_DIVERT).
        self._bounds: list = self._nbounds

    # -- public ---------------------------------------------------------------

    @property
    def size(self) -> int:
        """Number of scheduled tasks (including those due but not yet run)."""
        return self._size

    def __len__(self) -> int:
        return self._size

    @property
    def tick_ms(self) -> int:
        return self._tick_ms

    @property
    def wheel_size(self) -> int:
        return self._wheel_size

    @property
    def levels(self) -> int:
        """Number of wheels created so far (overflow wheels are lazy)."""
        return len(self._level_ticks)

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def current_time_ms(self) -> int:
        """The lowest wheel's time: the last pass's ``now``, truncated to a tick."""
        return self._currents[0]

    @property
    def next_expiration_ms(self) -> int | None:
        """When the next pass has work: the earliest queued bucket's expiration
        (a lower bound for its tasks), the wheel time if tasks are due, or
        None when nothing is scheduled."""
        if self._due or self._incoming:
            return self._currents[0]
        q = self._queue
        return q[0][0] if q else None

    def add(self, task: TimerTask) -> None:
        """Schedule ``task`` to run ``task.delay_ms`` from now.  O(1).

        Never runs user code: a task that is already due is queued and runs
        on the next pass.  Adding a scheduled task re-arms it; adding a
        cancelled task does nothing.
        """
        b = task._bucket
        if b is not None:
            if b is _CANCELLED:
                return
            TimerTask.cancel(task)  # re-arm: leave the old slot first
            task._bucket = None
        exp = self._clock() + task.delay_ms
        task.expiration_ms = exp
        i = bisect_right(self._bounds, exp)
        if not 0 < i < self._top:
            # Due, beyond the top wheel, during a pass, or shut down.
            self._add_slow(task, exp)
            return
        self._insert(task, exp, i)

    def advance_to(self, now_ms: int) -> int:
        """Run every task due at ``now_ms``; returns how many ran.

        Resolution is one tick: due means expiring before the end of the
        tick that contains ``now_ms`` (with the default 1 ms tick: <= now).

        Order: tasks that were already due when added run first, then
        buckets in expiration order; within one tick, in insertion order.
        Re-entrancy: a task's ``run`` may cancel any task (a cancelled task
        never runs, even later in this pass) and may add tasks; those are
        placed after the pass, so one that is due by then (e.g. delay 0) runs
        on the *next* pass, never in this one.  A nested call is a no-op.
        """
        if self._advancing or self._closed:
            return 0
        self._advancing = True
        self._bounds = _DIVERT
        ran = 0
        finished = False
        try:
            if self._due:
                ran += self._run_due()
            ran += self._flush_until(now_ms)
            finished = True
        finally:
            self._advancing = False
            if not self._closed:
                if finished and now_ms > self._time:
                    # Safe: no queued bucket expires at or before now_ms, so
                    # no slot is reused while still holding older tasks.
                    self._set_time(now_ms)
                self._bounds = self._nbounds
                self._place_incoming()
        return ran

    def _clear_all(self) -> None:
        """Drop every scheduled task without running it (shutdown)."""
        for slots in self._slots_i[1:]:
            for bucket in slots:
                bucket._clear()
                bucket.expiration_ms = -1
        self._due._clear()
        self._incoming._clear()
        if self._draining is not None:
            self._draining._clear()
        self._queue.clear()
        self._size = 0

    # -- hooks ------------------------------------------------------------------

    def _wake_for(self, when_ms: int) -> None:
        """Make sure a pass runs at ``when_ms`` (overridden by the asyncio timer)."""

    def _report(self, task: TimerTask, exc: BaseException) -> None:
        _log.error("timer task %r failed", task, exc_info=exc)

    # -- internals ------------------------------------------------------------

    def _add_slow(self, task: TimerTask, exp: int) -> None:
        if self._closed:
            raise RuntimeError("timer is shut down")
        if self._advancing:
            self._size += 1
            self._incoming._append(task)
        else:
            self._place(task, exp)

    def _place(self, task: TimerTask, exp: int) -> None:
        i = bisect_right(self._nbounds, exp)
        if i == 0:
            # Already due: never run user code from add(); the next pass runs it.
            self._size += 1
            self._due._append(task)
            now = self._currents[0]
            if now < self._wake_at:
                self._wake_for(now)
            return
        if i == self._top:
            i = self._grow(exp)
        self._insert(task, exp, i)

    def _insert(self, task: TimerTask, exp: int, i: int) -> None:
        """Put ``task`` in its bucket of wheel ``i``; a bucket that starts a new expiration
        goes into the queue (and may bring the next wake-up forward)."""
        tick = self._ticks_i[i]
        vid = exp // tick
        bucket = self._slots_i[i][vid % self._wheel_size]
        bucket._append(task)
        self._size += 1
        vid *= tick
        if bucket.expiration_ms != vid:
            bucket.expiration_ms = vid
            heappush(self._queue, (vid, i, bucket))
            if vid < self._wake_at:
                self._wake_for(vid)

    def _run(self, task: TimerTask) -> None:
        """Run a task taken off the wheel; what it raises is reported, not propagated."""
        self._size -= 1
        try:
            task.run()
        except Exception as exc:
            self._report(task, exc)

    def _run_due(self) -> int:
        # Swap the list first: tasks made due while draining wait a pass.
        due = self._draining = self._due
        self._due = TimerTaskList(self)
        ran = 0
        try:
            while True:
                task = due._pop_first()
                if task is None:
                    return ran
                ran += 1
                self._run(task)
        finally:
            self._draining = None

    def _flush_until(self, now_ms: int) -> int:
        q = self._queue
        slots_i = self._slots_i
        ticks_i = self._ticks_i
        ws = self._wheel_size
        currents = self._currents
        nbounds = self._nbounds  # mutated in place, never replaced
        tick0 = self._tick_ms
        span0 = tick0 * ws
        due_before = nbounds[0]
        ran = 0
        while q and q[0][0] <= now_ms:
            bexp, _, bucket = heappop(q)
            bucket.expiration_ms = -1
            # bexp is a multiple of tick0; usually only the first level moves.
            if bexp > currents[0]:
                if bexp < self._level1_moves_at:
                    self._time = currents[0] = bexp
                    nbounds[0] = due_before = bexp + tick0
                    nbounds[1] = bexp + span0
                else:
                    self._set_time(bexp)
                    due_before = nbounds[0]
            # Pop one at a time so a run() that cancels a task still in this
            # bucket finds the list consistent.
            while True:
                task = bucket._next
                if task is bucket:
                    break
                n = task._next
                bucket._next = n
                n._prev = bucket
                exp = task.expiration_ms
                if exp < due_before:
                    task._prev = task._next = None
                    task._bucket = None
                    ran += 1
                    self._run(task)
                    continue
                # Cascade to a finer level (never a coarser one); the links
                # are overwritten below, so they were not cleared above.
                i = bisect_right(nbounds, exp)
                tick = ticks_i[i]
                vid = exp // tick
                nb = slots_i[i][vid % ws]
                nb._append(task)
                vid *= tick
                if nb.expiration_ms != vid:
                    nb.expiration_ms = vid
                    heappush(q, (vid, i, nb))
        return ran

    def _place_incoming(self) -> None:
        incoming = self._incoming
        while True:
            task = incoming._pop_first()
            if task is None:
                return
            self._size -= 1
            # Keep the expiration computed when the task was added.
            self._place(task, task.expiration_ms)

    def _add_level(self, t: int) -> None:
        ws = self._wheel_size
        tick = self._level_ticks[-1] * ws if self._level_ticks else self._tick_ms
        current = t - t % tick
        self._level_ticks.append(tick)
        self._currents.append(current)
        self._ticks_i.append(tick)
        self._slots_i.append([TimerTaskList(self) for _ in range(ws)])
        self._nbounds.append(current + tick * ws)
        self._top = len(self._nbounds)
        self._update_level1_mark()

    def _grow(self, exp: int) -> int:
        # Overflow wheels start at the current time, truncated to their tick.
        while exp >= self._nbounds[-1]:
            self._add_level(self._time)
        return bisect_right(self._nbounds, exp)

    def _set_time(self, t: int) -> None:
        """Advance every level's current time to ``t`` (truncated to its tick)."""
        if t > self._time:
            self._time = t
        currents = self._currents
        ticks = self._level_ticks
        nb = self._nbounds
        c = t - t % ticks[0]
        if c <= currents[0]:
            return  # same tick: no coarser level can have moved either
        currents[0] = c
        # In place: add() may hold this very list as self._bounds.
        nb[0] = c + ticks[0]
        nb[1] = c + ticks[0] * self._wheel_size
        for k in range(1, len(ticks)):
            tick = ticks[k]
            c = t - t % tick
            if c <= currents[k]:
                break  # coarser levels are unchanged too
            currents[k] = c
            nb[k + 1] = c + tick * self._wheel_size
        self._update_level1_mark()

    def _update_level1_mark(self) -> None:
        # First time at which level 1's current moves (see _flush_until).
        if len(self._currents) > 1:
            self._level1_moves_at = self._currents[1] + self._level_ticks[1]
        else:
            self._level1_moves_at = float("inf")
