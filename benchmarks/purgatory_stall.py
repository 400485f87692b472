"""The purgatory's cost for waiting operations of many keys, and the longest stall of its loop.

In one process, on an asyncio loop with the broker's ``Timer``: ``--waiting`` operations wait at a
time (caught-up consumers), each watched under ``--keys`` partitions (a sessionless Fetch of that
many partitions), each expiring after ``--wait-ms`` (``fetch.wait.max.ms``); an expired one is
replaced at once, until ``--ops`` have expired. The purgatory's ``purge_interval`` is Kafka's
default, 1,000: about every 1,000 completions its reaper purges the watch lists.

Reported: the CPU per operation, of it the watch's (``try_complete_else_watch``), the longest of
the timer's passes in CPU time (expiry, and the purge the reaper runs there), and the loop's lag: a 1 ms ticker's longest late
wake-up, and how many were over 10 ms (what every other connection waits while the loop is stuck),
and the cyclic collector's longest pause (the broker's thresholds, ``tune_gc``), to tell the two apart.

    python -m benchmarks.purgatory_stall --ops 3000 --keys 1000 --waiting 20
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import time

from rivulet.cli.main import tune_gc
from rivulet.common.types import TopicPartition
from rivulet.delayed import DelayedOperation, DelayedOperationPurgatory, Timer


class _PassTimer(Timer):
    """The broker's timer, keeping the thread CPU time of its longest pass (expiry and purge
    run there): a stall of the loop that the machine's other load cannot account for."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.longest_pass = 0.0

    def _on_wakeup(self) -> None:
        t0 = time.thread_time()
        super()._on_wakeup()
        self.longest_pass = max(self.longest_pass, time.thread_time() - t0)


class _Wait(DelayedOperation):
    """Never satisfied: it waits out its time, as a caught-up consumer's Fetch does."""

    __slots__ = ("done",)

    def __init__(self, delay_ms: int, done: asyncio.Future[None]) -> None:
        super().__init__(delay_ms)
        self.done = done

    def try_complete(self) -> bool:
        return False

    def on_complete(self) -> None:
        self.done.set_result(None)

    def on_expiration(self) -> None:
        pass


async def _run(ops: int, keys: int, waiting: int, wait_ms: int) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    timer = _PassTimer(loop)
    purgatory: DelayedOperationPurgatory[_Wait] = DelayedOperationPurgatory("Fetch", timer, purge_interval=1000)
    tps = [TopicPartition("t", p) for p in range(keys)]
    watch_cpu = 0.0
    lags: list[float] = []
    stop = False

    async def ticker() -> None:
        while not stop:
            t0 = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append(time.perf_counter() - t0 - 0.001)

    async def waiter(n: int) -> None:
        nonlocal watch_cpu
        for _ in range(n):
            done: asyncio.Future[None] = loop.create_future()
            c0 = time.process_time()
            purgatory.try_complete_else_watch(_Wait(wait_ms, done), tps, recheck=False)
            watch_cpu += time.process_time() - c0
            await done

    gc_pauses: list[float] = []
    gc_start = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_start[0] = time.perf_counter()
        else:
            gc_pauses.append(time.perf_counter() - gc_start[0])

    gc.callbacks.append(on_gc)
    tick = asyncio.create_task(ticker())
    c0 = time.process_time()
    w0 = time.perf_counter()
    await asyncio.gather(*(waiter(ops // waiting) for _ in range(waiting)))
    cpu = time.process_time() - c0
    wall = time.perf_counter() - w0
    stop = True
    await tick
    gc.callbacks.remove(on_gc)
    done_ops = ops // waiting * waiting
    purgatory.shutdown()
    timer.shutdown()
    return {
        "ops": done_ops, "wall_s": wall, "cpu_ms_op": cpu / done_ops * 1e3, "watch_ms_op": watch_cpu / done_ops * 1e3,
        "max_lag_ms": max(lags) * 1e3, "lags_over_10ms": sum(lag > 0.010 for lag in lags),
        "longest_pass_ms": timer.longest_pass * 1e3, "gc_max_ms": max(gc_pauses, default=0.0) * 1e3, "gc_s": sum(gc_pauses),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", type=int, default=3000)
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--waiting", type=int, default=20)
    ap.add_argument("--wait-ms", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    tune_gc()
    for r in range(args.rounds):
        out = asyncio.run(_run(args.ops, args.keys, args.waiting, args.wait_ms))
        print(f"round {r + 1}: {out['ops']} operations of {args.keys} keys, {args.waiting} waiting at a time, "
              f"{out['wall_s']:.1f} s: CPU {out['cpu_ms_op']:.3f} ms an operation (watch {out['watch_ms_op']:.3f}); "
              f"longest timer pass {out['longest_pass_ms']:.1f} ms CPU; loop lag max {out['max_lag_ms']:.1f} ms, {out['lags_over_10ms']} ticks late by over 10 ms; "
              f"GC {out['gc_s'] * 1e3:.0f} ms, its longest pause {out['gc_max_ms']:.1f} ms; "
              f"1-minute load average {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
