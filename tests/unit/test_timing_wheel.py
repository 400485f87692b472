"""Hierarchical timing wheel and its asyncio / manual drivers."""

from __future__ import annotations

import asyncio
import random
import sys

import pytest

from rivulet.delayed import Timer, TimerTask

pytestmark = pytest.mark.fast

HOUR = 3_600_000
DAY = 24 * HOUR


class Rec(TimerTask):
    """Records (clock at run time, name) into a shared log."""

    __slots__ = ("name", "log", "timer", "action")

    def __init__(self, delay_ms, name, log, timer, action=None):
        super().__init__(delay_ms)
        self.name = name
        self.log = log
        self.timer = timer
        self.action = action

    def run(self):
        self.log.append((self.timer.now_ms, self.name))
        if self.action is not None:
            self.action(self)


def names(log):
    return [n for _, n in log]


def drain(timer):
    """Advance from bucket to bucket until nothing is left; returns the number of passes."""
    passes = 0
    while (nxt := timer.next_expiration_ms) is not None:
        timer.advance_clock(max(nxt, timer.now_ms))
        passes += 1
        assert passes < 10_000
    return passes


# -- resolution and ordering -------------------------------------------------


def test_millisecond_resolution_on_the_first_wheel():
    timer = Timer()
    log = []
    for d in range(1, 20):
        timer.add(Rec(d, d, log, timer))
    assert timer.size == 19 and timer.levels == 1
    for now in range(1, 20):
        assert timer.advance_clock(now) == 1
        assert log[-1] == (now, now)
    assert timer.size == 0


def test_task_does_not_run_a_millisecond_early():
    timer = Timer()
    log = []
    timer.advance_clock(1000)
    timer.add(Rec(7_777, "x", log, timer))
    assert timer.advance_clock(8_776) == 0
    assert timer.advance_clock(8_777) == 1
    assert log == [(8_777, "x")]


def test_big_jump_runs_in_expiration_order_fifo_within_a_millisecond():
    timer = Timer()
    log = []
    rng = random.Random(7)
    delays = [rng.randint(1, 50_000) for _ in range(3_000)]
    for i, d in enumerate(delays):
        timer.add(Rec(d, (d, i), log, timer))
    assert timer.levels == 4  # 20 ms, 400 ms, 8 s, 160 s
    assert timer.advance_clock(50_000) == 3_000
    assert names(log) == sorted(names(log))  # by delay, then by insertion


def test_each_task_runs_in_the_first_pass_that_reaches_it():
    rng = random.Random(11)
    tick = 3
    timer = Timer(tick_ms=tick, wheel_size=8)  # non-default geometry, coarse tick
    log = []
    pending = set()
    now = 0
    for _ in range(60):
        for _ in range(50):
            t = Rec(rng.randint(-3, 20_000), None, log, timer)
            t.name = t
            timer.add(t)
            pending.add(t)
        now += rng.choice([1, 2, 5, 40, 333, 4_000])
        timer.advance_clock(now)
        # Resolution is one tick: due means "expires before the end of the
        # current tick" (as in Kafka), and nothing due may be left behind.
        end_of_tick = now - now % tick + tick
        expected = {t for t in pending if t.expiration_ms < end_of_tick}
        assert {t for _, t in log} == expected
        assert all(ran_at == now for ran_at, _ in log)
        pending -= expected
        log.clear()
        assert timer.size == len(pending)


@pytest.mark.parametrize("tick,size,seed", [(1, 20, 1), (1, 4, 2), (5, 7, 3), (2, 64, 4)])
def test_random_workload_with_reentrant_adds_and_cancels(tick, size, seed):
    """Checks every pass against a model: exactly the due, uncancelled tasks run,
    in expiration order; tasks cancelled by an earlier run() in the same pass
    never run; tasks added by run() are placed after the pass."""
    rng = random.Random(seed)
    timer = Timer(tick_ms=tick, wheel_size=size)
    pending = set()
    ran = []
    cancelled_in_pass = set()
    totals = {"ran": 0, "cancelled_in_pass": 0, "children": 0}

    class Chaos(TimerTask):
        def run(self):
            assert not self.is_cancelled and self in pending
            ran.append(self)
            roll = rng.random()
            if roll < 0.2 and pending:
                victim = rng.choice(sorted(pending, key=id))
                if victim not in ran:
                    victim.cancel()
                    cancelled_in_pass.add(victim)
            elif roll < 0.4:
                child = Chaos(rng.choice([0, 1, tick, 50, 5_000, 3 * HOUR]))
                timer.add(child)
                pending.add(child)
                totals["children"] += 1

    now = 0
    for _ in range(150):
        for _ in range(rng.randint(0, 40)):
            delay = rng.choice([rng.randint(-2, 30), rng.randint(0, 50_000), rng.randint(0, 2 * DAY)])
            t = Chaos(delay)
            timer.add(t)
            pending.add(t)
        for t in rng.sample(sorted(pending, key=id), k=min(len(pending), rng.randint(0, 5))):
            t.cancel()
            pending.discard(t)
        before = set(pending)
        # Tasks already due when placed run first, in insertion order; the
        # rest run by expiration tick (FIFO within a tick).
        overdue_before = now - now % tick + tick
        now += rng.choice([0, 1, 3, 17, 400, 9_000, 2 * HOUR])
        end_of_tick = now - now % tick + tick
        assert timer.advance_clock(now) == len(ran)
        expected = {t for t in before if t.expiration_ms < end_of_tick} - cancelled_in_pass
        assert set(ran) == expected
        n_overdue = sum(1 for t in ran if t.expiration_ms < overdue_before)
        assert all(t.expiration_ms < overdue_before for t in ran[:n_overdue])
        rest = [t.expiration_ms // tick for t in ran[n_overdue:]]
        assert rest == sorted(rest)
        pending -= set(ran) | cancelled_in_pass
        totals["ran"] += len(ran)
        totals["cancelled_in_pass"] += len(cancelled_in_pass)
        ran.clear()
        cancelled_in_pass.clear()
        assert timer.size == len(pending)
        assert all(t.is_scheduled for t in pending)
    # The workload really exercised the re-entrant paths.
    assert totals["ran"] > 1_000, totals
    assert totals["cancelled_in_pass"] > 20 and totals["children"] > 50, totals


# -- overflow wheels ---------------------------------------------------------


def test_overflow_wheels_are_created_on_demand():
    timer = Timer(tick_ms=1, wheel_size=20)
    log = []
    timer.add(Rec(19, "a", log, timer))
    assert timer.levels == 1
    timer.add(Rec(20, "b", log, timer))
    assert timer.levels == 2  # tick 20 ms
    timer.add(Rec(8_000, "c", log, timer))
    assert timer.levels == 4  # 20 ms, 400 ms, 8 s, 160 s
    drain(timer)
    assert names(log) == ["a", "b", "c"]
    assert [t for t, _ in log] == [19, 20, 8_000]


@pytest.mark.parametrize("delay", [HOUR, 5 * HOUR + 17, 3 * DAY + 12_345, 400 * DAY + 1])
def test_far_future_tasks_fire_exactly_and_bucket_by_bucket(delay):
    timer = Timer()
    log = []
    timer.advance_clock(123_456)
    start = timer.now_ms
    timer.add(Rec(delay, "far", log, timer))
    timer.add(Rec(1, "near", log, timer))
    timer.advance_clock(start + delay - 1)
    assert names(log) == ["near"]
    passes = drain(timer)
    assert log[-1] == (start + delay, "far")
    # The clock jumps from bucket to bucket (a few per level), never tick by tick.
    assert passes <= 2 * timer.levels


def test_cascade_moves_tasks_down_a_level():
    timer = Timer(tick_ms=1, wheel_size=10)
    log = []
    timer.add(Rec(57, "x", log, timer))  # level 1 (tick 10), bucket [50, 60)
    assert timer.next_expiration_ms == 50
    timer.advance_clock(50)
    assert log == [] and timer.size == 1
    assert timer.next_expiration_ms == 57  # now in the 1 ms wheel
    timer.advance_clock(57)
    assert log == [(57, "x")]


# -- cancellation --------------------------------------------------------------


def test_cancelled_tasks_never_run():
    timer = Timer()
    log = []
    tasks = [Rec(d, d, log, timer) for d in range(1, 2_000, 3)]
    for t in tasks:
        timer.add(t)
    for t in tasks[::2]:
        t.cancel()
        t.cancel()  # idempotent
        assert t.is_cancelled and not t.is_scheduled
    assert timer.size == len(tasks) - len(tasks[::2])
    drain(timer)
    assert names(log) == [t.name for t in tasks[1::2]]
    assert timer.size == 0


def test_cancel_before_add_means_never_scheduled():
    timer = Timer()
    log = []
    t = Rec(5, "x", log, timer)
    t.cancel()
    timer.add(t)
    assert timer.size == 0 and not t.is_scheduled
    timer.advance_clock(10)
    assert log == []


def _lines_executed(fn):
    count = 0

    def tracer(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
        return tracer

    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(None)
    return count


def test_cancel_is_constant_work_whatever_the_bucket_size():
    # O(1) shown structurally, not by timing: the same lines run for a task
    # in the middle of a 10-task bucket and of a 20,000-task bucket.
    costs = []
    for n in (10, 20_000):
        timer = Timer()
        tasks = [Rec(7, i, [], timer) for i in range(n)]
        for t in tasks:
            timer.add(t)
        costs.append(_lines_executed(tasks[n // 2].cancel))
        assert timer.size == n - 1
    assert costs[0] == costs[1]


def test_run_may_cancel_a_later_task_of_the_same_bucket():
    timer = Timer()
    log = []
    victim = Rec(5, "victim", log, timer)
    killer = Rec(5, "killer", log, timer, action=lambda _: victim.cancel())
    timer.add(killer)
    timer.add(victim)
    timer.add(Rec(5, "after", log, timer))
    timer.advance_clock(5)
    assert names(log) == ["killer", "after"]
    assert timer.size == 0


def test_cancelling_a_due_task_before_the_pass():
    timer = Timer()
    log = []
    t = Rec(0, "x", log, timer)
    timer.add(t)
    assert timer.size == 1
    t.cancel()
    assert timer.size == 0
    timer.advance_clock(1)
    assert log == []


# -- adding while expiring, due tasks, re-arming -------------------------------


def test_due_task_never_runs_inside_add():
    timer = Timer()
    log = []
    timer.advance_clock(100)
    timer.add(Rec(0, "zero", log, timer))
    timer.add(Rec(-50, "past", log, timer))
    assert log == [] and timer.size == 2
    assert timer.next_expiration_ms == 100
    assert timer.advance_clock() == 2  # next pass, same clock
    assert names(log) == ["zero", "past"]


def test_tasks_added_from_run_are_scheduled_after_the_pass():
    timer = Timer()
    log = []

    def spawn(task):
        timer.add(Rec(0, "child0", log, timer))  # due: waits for the next pass
        timer.add(Rec(3, "child3", log, timer))  # 3 ms after the parent ran
        timer.add(Rec(2 * HOUR, "child2h", log, timer))

    timer.add(Rec(10, "parent", log, timer, action=spawn))
    timer.add(Rec(12, "sibling", log, timer))
    assert timer.advance_clock(20) == 2  # the children are not run by this pass
    assert log == [(20, "parent"), (20, "sibling")]
    assert timer.size == 3
    assert timer.advance_clock(20) == 1  # child0, on the next pass
    timer.advance_clock(22)
    assert names(log)[-1] == "child0"
    # child3 expires at parent's clock (20) + 3.
    timer.advance_clock(23)
    assert log[-1] == (23, "child3")
    drain(timer)
    assert log[-1] == (20 + 2 * HOUR, "child2h")


def test_self_rearming_task_with_zero_delay_does_not_spin():
    timer = Timer()
    runs = []

    class Again(TimerTask):
        def run(self):
            runs.append(timer.now_ms)
            timer.add(self)

    timer.add(Again(0))
    for _ in range(3):
        assert timer.advance_clock(5) == 1
    assert runs == [5, 5, 5]


def test_add_of_scheduled_task_rearms_it():
    timer = Timer()
    log = []
    t = Rec(100, "x", log, timer)
    timer.add(t)
    t.delay_ms = 10
    timer.add(t)
    assert timer.size == 1
    timer.advance_clock(10)
    assert log == [(10, "x")]
    t.delay_ms = 5
    timer.add(t)  # a task that ran may be added again
    timer.advance_clock(15)
    assert log[-1] == (15, "x")


def test_nested_advance_is_a_no_op():
    timer = Timer()
    inner = []
    timer.add(Rec(1, "a", [], timer, action=lambda _: inner.append(timer.advance_clock(1_000))))
    timer.add(Rec(500, "b", [], timer))
    assert timer.advance_clock(2) == 1
    assert inner == [0] and timer.size == 1


def test_failing_task_is_reported_and_does_not_stop_the_pass(caplog):
    timer = Timer()
    log = []

    def boom(_):
        raise ValueError("boom")

    timer.add(Rec(1, "bad", log, timer, action=boom))
    timer.add(Rec(1, "good", log, timer))
    assert timer.advance_clock(1) == 2
    assert names(log) == ["bad", "good"]
    assert "boom" in caplog.text


def test_shutdown_drops_everything():
    timer = Timer()
    log = []
    for d in (0, 5, 50, DAY):
        timer.add(Rec(d, d, log, timer))
    timer.shutdown()
    assert timer.size == 0 and timer.next_expiration_ms is None
    assert timer.advance_clock(2 * DAY) == 0
    assert log == []
    with pytest.raises(RuntimeError):
        timer.add(Rec(1, "late", log, timer))


def test_shutdown_from_inside_a_task():
    timer = Timer()
    log = []
    timer.add(Rec(1, "stopper", log, timer, action=lambda _: timer.shutdown()))
    timer.add(Rec(1, "same-bucket", log, timer))
    timer.add(Rec(2, "later", log, timer))
    timer.advance_clock(5)
    assert names(log) == ["stopper"]
    assert timer.size == 0


def test_injected_clock():
    now = [1_000]
    timer = Timer(clock=lambda: now[0])
    log = []
    timer.add(Rec(30, "x", log, timer))
    now[0] = 1_029
    assert timer.advance_clock() == 0
    now[0] = 1_030
    assert timer.advance_clock() == 1
    assert log == [(1_030, "x")]


# -- asyncio driver -------------------------------------------------------------


class CountingLoop:
    """Proxies the loop the timer sees, tracking every call_at handle."""

    def __init__(self, loop):
        self._loop = loop
        self.handles = []
        self._armed = set()  # created, not fired (may be cancelled)
        self.max_live = 0

    def time(self):
        return self._loop.time()

    def call_at(self, when, callback, *args):
        box = []

        def fire():
            self._armed.discard(box[0])
            callback(*args)

        handle = self._loop.call_at(when, fire)
        box.append(handle)
        self.handles.append(handle)
        self._armed.add(handle)
        self.max_live = max(self.max_live, self.live())
        return handle

    def call_exception_handler(self, context):
        self._loop.call_exception_handler(context)

    def live(self):
        return sum(1 for h in self._armed if not h.cancelled())


def _loop_factories():
    factories = [asyncio.new_event_loop]
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is optional
        pass
    else:
        factories.append(uvloop.new_event_loop)
    return factories


@pytest.fixture(params=_loop_factories(), ids=lambda f: f.__module__.split(".")[0])
def loop(request):
    loop = request.param()
    yield loop
    loop.close()


def test_single_wakeup_rearmed_only_for_earlier_buckets():
    loop = asyncio.new_event_loop()
    try:
        proxy = CountingLoop(loop)
        # A frozen clock: bucket placement must not depend on how fast this test runs.
        timer = Timer(proxy, clock=lambda: 1_000)
        assert not timer.wakeup_pending and proxy.handles == []
        log = []
        # Later and later buckets: one wake-up, armed by the first add.
        for d in range(50, 5_000, 7):
            timer.add(Rec(d, d, log, timer))
        assert len(proxy.handles) == 1
        # An earlier bucket re-arms (the old handle is cancelled).
        timer.add(Rec(10, "early", log, timer))
        assert len(proxy.handles) == 2
        assert proxy.handles[0].cancelled() and not proxy.handles[1].cancelled()
        # Same bucket again: nothing to do.
        timer.add(Rec(10, "early2", log, timer))
        assert len(proxy.handles) == 2
        timer.shutdown()
        assert all(h.cancelled() for h in proxy.handles)
    finally:
        loop.close()


def test_tasks_fire_on_a_real_loop_with_one_pending_handle(loop):
    proxy = CountingLoop(loop)
    timer = Timer(proxy)
    fired = []

    async def main():
        done = loop.create_future()
        tasks = []

        class Fire(TimerTask):
            def run(self):
                fired.append((timer.now_ms, self))
                assert proxy.live() == 0  # the wake-up running us is spent
                if len(fired) == len(tasks):
                    done.set_result(None)

        for d in (30, 1, 15, 2, 0, 8, 25, 4, 12, 20):
            t = Fire(d)
            tasks.append(t)
            timer.add(t)
            assert proxy.live() == 1
        cancelled = Fire(5)
        timer.add(cancelled)
        cancelled.cancel()
        await asyncio.wait_for(done, 30)
        return tasks, cancelled

    tasks, cancelled = loop.run_until_complete(main())
    assert proxy.max_live == 1
    assert [t for _, t in fired] == sorted(tasks, key=lambda t: t.expiration_ms)
    assert cancelled not in {t for _, t in fired}
    for ran_at, t in fired:
        assert ran_at >= t.expiration_ms  # never early, however slow the host is
    assert timer.size == 0 and not timer.wakeup_pending and proxy.live() == 0
    # No polling: a handful of wake-ups for 10 tasks, not one per millisecond.
    assert len(proxy.handles) <= 2 * len(tasks) + 2


def test_many_adds_on_a_loop_create_few_handles(loop):
    proxy = CountingLoop(loop)
    timer = Timer(proxy)
    count = 0

    class Inc(TimerTask):
        def run(self):
            nonlocal count
            count += 1

    async def main():
        for i in range(5_000):
            timer.add(Inc(1_000 + i % 40))
        assert timer.wakeup_pending
        n_handles = len(proxy.handles)
        for t in range(1_000):
            timer.add(Inc(2_000 + t))
        assert len(proxy.handles) == n_handles  # later buckets never re-arm
        timer.shutdown()

    loop.run_until_complete(main())
    assert count == 0 and not timer.wakeup_pending


def test_due_task_on_a_loop_runs_on_a_later_iteration(loop):
    timer = Timer(loop)
    order = []

    class Mark(TimerTask):
        def run(self):
            order.append("timer")

    async def main():
        timer.add(Mark(0))
        order.append("after-add")
        await asyncio.sleep(0)
        await asyncio.sleep(0.01)

    loop.run_until_complete(main())
    assert order == ["after-add", "timer"]


def test_failing_task_goes_to_the_loop_exception_handler(loop):
    timer = Timer(loop)
    seen = []
    loop.set_exception_handler(lambda _loop, ctx: seen.append(ctx["exception"]))

    class Bad(TimerTask):
        def run(self):
            raise KeyError("bad")

    async def main():
        timer.add(Bad(1))
        while timer.size:
            await asyncio.sleep(0.005)

    loop.run_until_complete(main())
    assert len(seen) == 1 and isinstance(seen[0], KeyError)
