"""Timer benchmark: timing wheel vs heapq vs event-loop timer handles.

For each N, N delayed tasks (delays uniform in [1, 30 s], seeded) are
scheduled and then either all cancelled (the common case: the operation
completes before its timeout) or all expired, in the same process:

* ``wheel``      rivulet.delayed.Timer (hierarchical timing wheel)
* ``heapq``      a binary heap of (expiration, seq, task) with lazy
                 cancellation and asyncio-style compaction
* ``call_later`` asyncio's ``loop.call_later`` handles (pure-Python loop)
* ``uvloop``     uvloop's ``loop.call_later`` (C), cancel only: its clock
                 cannot be faked to expire 30 s of timers instantly

Columns, in nanoseconds per task unless noted:

* construct:  building the task object (the only allocation the wheel makes;
              with GC on, its cost at large N is mostly the cyclic GC)
* insert:     scheduling it (add / heappush / call_later), construct excluded
* cancel:     cancelling in insertion order (FIFO, like produce acks);
              "cancel rnd" in a random order (memory-bound at large N).  The
              event loops' deferred purge of cancelled handles (one loop
              iteration) is charged to cancel.
* ins+cancel: insert + cancel (FIFO), and its rate per second; the next
              column's rate also includes construct
* ins+expire: insert + expiry, jumping a fake clock past every deadline and
              running all tasks

GC stays on unless ``--gc off``.  Times are process CPU time (the host may
be shared), per-column best of ``--repeat`` runs.

    python -m benchmarks.timer [--sizes 1000,10000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import heapq
import itertools
import platform
import random
import sys
import time
from typing import Callable

from rivulet.delayed import Timer, TimerTask, monotonic_ms

MAX_DELAY_MS = 30_000

# CPU time of this process: the benchmark host is shared, and wall time
# would charge us for other processes' time slices.
_now = time.process_time


# -- contenders ------------------------------------------------------------------


class WheelTask(TimerTask):
    __slots__ = ()

    def run(self) -> None:
        pass


class HeapTask:
    __slots__ = ("delay_ms", "expiration_ms", "cancelled", "timer")

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = delay_ms
        self.cancelled = False

    def run(self) -> None:
        pass

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            self.timer._cancelled_one()


class HeapTimer:
    """The obvious alternative: heapq with lazy deletion (like asyncio's loop)."""

    def __init__(self, clock: Callable[[], int]) -> None:
        self._clock = clock
        self._queue: list[tuple[int, int, HeapTask]] = []
        self._seq = itertools.count()
        self._cancelled = 0

    def add(self, task: HeapTask) -> None:
        exp = self._clock() + task.delay_ms
        task.expiration_ms = exp
        task.timer = self
        heapq.heappush(self._queue, (exp, next(self._seq), task))

    def _cancelled_one(self) -> None:
        self._cancelled += 1
        q = self._queue
        # Rebuild once most entries are dead, so memory stays O(live).
        if self._cancelled > 100 and self._cancelled * 2 > len(q):
            self._queue = [e for e in q if not e[2].cancelled]
            heapq.heapify(self._queue)
            self._cancelled = 0

    def advance_clock(self, now: int) -> int:
        q = self._queue
        pop = heapq.heappop
        ran = 0
        while q and q[0][0] <= now:
            task = pop(q)[2]
            if task.cancelled:
                self._cancelled -= 1
                continue
            ran += 1
            task.run()
        return ran


class LoopTask:
    __slots__ = ("handle",)

    def run(self) -> None:
        pass


class FakeTimeLoop(asyncio.SelectorEventLoop):
    """An asyncio loop whose clock we move, to expire 30 s of handles at once."""

    fake_now = 0.0

    def time(self) -> float:
        return self.fake_now


def _one_iteration(loop: asyncio.AbstractEventLoop) -> None:
    loop.call_soon(loop.stop)
    loop.run_forever()


# -- measurements ------------------------------------------------------------------
#
# *_cancel returns (construct, insert, cancel) and *_expire (construct, insert,
# expire), each in ns per task; "insert" never includes "construct".


def _ns(t0: float, t1: float, n: int) -> float:
    return (t1 - t0) * 1e9 / n


def wheel_cancel(delays: list[int], order: list[int] | None) -> tuple[float, float, float]:
    loop = asyncio.new_event_loop()
    try:
        timer = Timer(loop, clock=monotonic_ms)  # the broker's configuration
        add = timer.add
        n = len(delays)
        gc.collect()
        t0 = _now()
        tasks = [WheelTask(d) for d in delays]
        t1 = _now()
        for t in tasks:
            add(t)
        t2 = _now()
        victims = tasks if order is None else [tasks[i] for i in order]
        t3 = _now()
        for t in victims:
            t.cancel()
        t4 = _now()
        assert timer.size == 0
        timer.shutdown()
        return _ns(t0, t1, n), _ns(t1, t2, n), _ns(t3, t4, n)
    finally:
        loop.close()


def wheel_expire(delays: list[int]) -> tuple[float, float, float]:
    now = [0]
    timer = Timer(clock=lambda: now[0])
    add = timer.add
    n = len(delays)
    gc.collect()
    t0 = _now()
    tasks = [WheelTask(d) for d in delays]
    t1 = _now()
    for t in tasks:
        add(t)
    t2 = _now()
    now[0] = MAX_DELAY_MS
    ran = timer.advance_clock()
    t3 = _now()
    assert ran == n and timer.size == 0
    return _ns(t0, t1, n), _ns(t1, t2, n), _ns(t2, t3, n)


def heap_cancel(delays: list[int], order: list[int] | None) -> tuple[float, float, float]:
    timer = HeapTimer(monotonic_ms)
    add = timer.add
    n = len(delays)
    gc.collect()
    t0 = _now()
    tasks = [HeapTask(d) for d in delays]
    t1 = _now()
    for t in tasks:
        add(t)
    t2 = _now()
    victims = tasks if order is None else [tasks[i] for i in order]
    t3 = _now()
    for t in victims:
        t.cancel()
    t4 = _now()
    return _ns(t0, t1, n), _ns(t1, t2, n), _ns(t3, t4, n)


def heap_expire(delays: list[int]) -> tuple[float, float, float]:
    now = [0]
    timer = HeapTimer(lambda: now[0])
    add = timer.add
    n = len(delays)
    gc.collect()
    t0 = _now()
    tasks = [HeapTask(d) for d in delays]
    t1 = _now()
    for t in tasks:
        add(t)
    t2 = _now()
    now[0] = MAX_DELAY_MS
    ran = timer.advance_clock(now[0])
    t3 = _now()
    assert ran == n
    return _ns(t0, t1, n), _ns(t1, t2, n), _ns(t2, t3, n)


def _loop_cancel(
    loop: asyncio.AbstractEventLoop, delays: list[int], order: list[int] | None
) -> tuple[float, float, float]:
    try:
        call_later = loop.call_later
        secs = [d / 1000.0 for d in delays]
        n = len(delays)
        gc.collect()
        t0 = _now()
        tasks = [LoopTask() for _ in secs]
        t1 = _now()
        for t, s in zip(tasks, secs):
            t.handle = call_later(s, t.run)
        t2 = _now()
        victims = tasks if order is None else [tasks[i] for i in order]
        t3 = _now()
        for t in victims:
            t.handle.cancel()
        _one_iteration(loop)  # asyncio purges cancelled handles here
        t4 = _now()
        return _ns(t0, t1, n), _ns(t1, t2, n), _ns(t3, t4, n)
    finally:
        loop.close()


def call_later_cancel(delays: list[int], order: list[int] | None) -> tuple[float, float, float]:
    return _loop_cancel(asyncio.new_event_loop(), delays, order)


def uvloop_cancel(delays: list[int], order: list[int] | None) -> tuple[float, float, float]:
    import uvloop

    return _loop_cancel(uvloop.new_event_loop(), delays, order)


def call_later_expire(delays: list[int]) -> tuple[float, float, float]:
    loop = FakeTimeLoop()
    try:
        call_later = loop.call_later
        secs = [d / 1000.0 for d in delays]
        n = len(delays)
        count = 0

        class Counted(LoopTask):
            __slots__ = ()

            def run(self) -> None:
                nonlocal count
                count += 1

        gc.collect()
        t0 = _now()
        tasks = [Counted() for _ in secs]
        t1 = _now()
        for t, s in zip(tasks, secs):
            t.handle = call_later(s, t.run)
        t2 = _now()
        loop.fake_now = MAX_DELAY_MS / 1000.0 + 1.0
        _one_iteration(loop)  # every handle is due: all run in this iteration
        t3 = _now()
        assert count == n
        return _ns(t0, t1, n), _ns(t1, t2, n), _ns(t2, t3, n)
    finally:
        loop.close()


# -- driver ---------------------------------------------------------------------------


def _best(fn: Callable[[], tuple[float, ...]], repeat: int) -> tuple[float, ...]:
    """Per-column minimum over ``repeat`` runs (the host is shared and noisy)."""
    runs = [fn() for _ in range(repeat)]
    return tuple(min(r[i] for r in runs) for i in range(len(runs[0])))


def _have_uvloop() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def _row(cells: list[str], widths: list[int]) -> str:
    """A markdown table row: first column left-aligned, the rest right-aligned."""
    out = [f"{c:>{w}}" if i else f"{c:<{w}}" for i, (c, w) in enumerate(zip(cells, widths))]
    return "| " + " | ".join(out) + " |"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", default="1000,10000,100000,1000000")
    ap.add_argument("--repeat", type=int, default=3, help="best of R runs per cell")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--gc", choices=["on", "off"], default="on", help="cyclic GC during the runs")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.gc == "off":
        gc.disable()

    contenders: list[tuple[str, Callable, Callable | None]] = [
        ("wheel", wheel_cancel, wheel_expire),
        ("heapq", heap_cancel, heap_expire),
        ("call_later", call_later_cancel, call_later_expire),
    ]
    if _have_uvloop():
        contenders.append(("uvloop", uvloop_cancel, None))

    print(
        f"Python {platform.python_version()} ({platform.machine()}, {sys.platform}), GC {args.gc}; "
        f"delays uniform in [1, {MAX_DELAY_MS}] ms; ns per task, best of {args.repeat}"
    )
    cols = [
        ("timer", 10), ("N", 9), ("construct", 9), ("insert", 6), ("cancel", 6), ("cancel rnd", 10),
        ("ins+cancel", 10), ("ins+cancel/s", 12), ("…+construct/s", 13), ("ins+expire", 10),
    ]
    widths = [w for _, w in cols]
    print(_row([c for c, _ in cols], widths))
    rule = [":" + "-" * (w + 1) if i == 0 else "-" * (w + 1) + ":" for i, w in enumerate(widths)]
    print("|" + "|".join(rule) + "|")
    for n in sizes:
        rng = random.Random(args.seed)
        delays = [rng.randint(1, MAX_DELAY_MS) for _ in range(n)]
        order = list(range(n))
        rng.shuffle(order)
        for name, cancel_fn, expire_fn in contenders:
            construct, insert, cancel = _best(lambda: cancel_fn(delays, None), args.repeat)
            cancel_rnd = _best(lambda: cancel_fn(delays, order), args.repeat)[2]
            if expire_fn is not None:
                _, ins2, exp = _best(lambda: expire_fn(delays), args.repeat)
                expire = f"{ins2 + exp:.0f}"
            else:
                expire = "n/a"
            pair = insert + cancel
            cells = [
                name, f"{n:,}", f"{construct:.0f}", f"{insert:.0f}", f"{cancel:.0f}",
                f"{cancel_rnd:.0f}", f"{pair:.0f}", f"{1e9 / pair:,.0f}",
                f"{1e9 / (pair + construct):,.0f}", expire,
            ]
            print(_row(cells, widths), flush=True)


if __name__ == "__main__":
    main()
