"""Random workloads with large clock jumps: the wheel always terminates and never fires early.

A regression guard for a cascade that once re-inserted a task into the bucket being
drained (stale lower-level bounds after a jump), spinning the event loop forever.
"""

from __future__ import annotations

import random

import pytest

from rivulet.delayed import Timer, TimerTask

pytestmark = pytest.mark.fast


class Task(TimerTask):
    def __init__(self, delay: int, log: list, now: int, timer: Timer) -> None:
        super().__init__(delay)
        self.log, self.due, self.timer, self.ran, self.cancelled_early = log, now + delay, timer, False, False

    def run(self) -> None:
        self.ran = True
        self.log.append((self.due, self.timer.now_ms))


@pytest.mark.parametrize("seed", range(300))
def test_random_jumps(seed):
    rnd = random.Random(seed)
    now = rnd.randint(0, 10**7)
    timer = Timer(clock=lambda: now)
    log: list = []
    tasks: list[Task] = []
    for _ in range(60):
        r = rnd.random()
        if r < 0.5:
            d = rnd.choice([rnd.randint(0, 30), rnd.randint(0, 2000), rnd.randint(0, 200_000), rnd.randint(0, 10**8)])
            t = Task(d, log, now, timer)
            timer.add(t)
            tasks.append(t)
        elif r < 0.6 and tasks:
            t = rnd.choice(tasks)
            if not t.ran:
                t.cancel()
                t.cancelled_early = True
        else:
            now += rnd.choice([1, rnd.randint(0, 50), rnd.randint(0, 5000), rnd.randint(0, 10**6)])
            timer.advance_clock(now)
    now += 10**9
    timer.advance_clock(now)
    timer.advance_clock(now)
    assert all(at >= due for due, at in log)
    assert len(log) == sum(1 for t in tasks if not t.cancelled_early)
