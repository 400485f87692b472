"""DelayedOperation / DelayedOperationPurgatory: Kafka semantics on one thread."""

from __future__ import annotations

import asyncio

import pytest

from rivulet.delayed import DelayedOperation, DelayedOperationPurgatory, RateMeter, Timer
from rivulet.delayed import purgatory as purgatory_module

pytestmark = pytest.mark.fast


class Op(DelayedOperation):
    """Completes when ``ready()`` says so; counts its callbacks."""

    def __init__(self, delay_ms, ready=lambda: False, name=None):
        super().__init__(delay_ms)
        self.ready = ready
        self.name = name
        self.tries = 0
        self.completions = 0
        self.expirations = 0
        self.after_complete = None
        self.after_expire = None

    def try_complete(self):
        self.tries += 1
        return self.force_complete() if self.ready() else False

    def on_complete(self):
        self.completions += 1
        if self.after_complete is not None:
            self.after_complete(self)

    def on_expiration(self):
        self.expirations += 1
        if self.after_expire is not None:
            self.after_expire(self)

    def __eq__(self, other):  # watched by identity, so any __eq__ is fine
        return isinstance(other, Op) and other.name == self.name

    __hash__ = None


class Flag:
    def __init__(self):
        self.on = False

    def __call__(self):
        return self.on


@pytest.fixture
def timer():
    t = Timer()
    yield t
    t.shutdown()


@pytest.fixture
def purgatory(timer):
    p = DelayedOperationPurgatory("produce", timer, purge_interval=1000)
    yield p
    p.shutdown()


# -- try_complete_else_watch --------------------------------------------------------


def test_completes_immediately_without_watching(timer, purgatory):
    op = Op(100, ready=lambda: True)
    assert purgatory.try_complete_else_watch(op, ["p0", "p1"]) is True
    assert op.is_completed and op.completions == 1 and op.tries == 1
    assert purgatory.watched() == 0 and purgatory.delayed() == 0 and timer.size == 0


def test_watched_under_every_key_and_timed(timer, purgatory):
    op = Op(100)
    assert purgatory.try_complete_else_watch(op, ["p0", "p1", "p2"]) is False
    assert op.tries == 2  # checked before and after watching
    assert purgatory.watched() == 3 and purgatory.watched_keys() == 3
    assert purgatory.delayed() == 1 and timer.size == 1


def test_without_recheck_checked_once_then_watched_and_timed(timer, purgatory):
    op = Op(100)
    assert purgatory.try_complete_else_watch(op, ["p0", "p1"], recheck=False) is False
    assert op.tries == 1
    assert purgatory.watched() == 2 and purgatory.delayed() == 1 and timer.size == 1
    op.ready = lambda: True
    assert purgatory.check_and_complete("p1") == 1 and op.completions == 1


def test_requires_keys(purgatory):
    with pytest.raises(ValueError):
        purgatory.try_complete_else_watch(Op(10), [])


def test_completed_during_first_check_is_not_timed(timer, purgatory):
    # try_complete returns False, but the operation got completed meanwhile
    # (e.g. its callback path forced it): nothing may be left in the timer.
    class Sneaky(Op):
        def try_complete(self):
            self.tries += 1
            self.force_complete()
            return False

    op = Sneaky(100)
    assert purgatory.try_complete_else_watch(op, ["p0"]) is True
    assert op.completions == 1 and op.tries == 1
    assert timer.size == 0 and purgatory.delayed() == 0 and purgatory.watched() == 0


def test_event_between_first_check_and_watch_is_not_missed(timer, purgatory):
    # The event lands after the first check but before the watch exists, so
    # no check_and_complete will ever try the operation: the second check must.
    flag = Flag()

    class Racy(Op):
        def try_complete(self):
            done = super().try_complete()
            if self.tries == 1:
                flag.on = True  # "the follower fetch arrives now"
                assert purgatory.check_and_complete("p0") == 0  # not watched yet
            return done

    op = Racy(100, ready=flag)
    assert purgatory.try_complete_else_watch(op, ["p0", "p1"]) is True
    assert op.tries == 2 and op.completions == 1 and op.expirations == 0
    assert timer.size == 0 and purgatory.delayed() == 0
    timer.advance_clock(1_000)
    assert op.expirations == 0
    # It is still on the watch lists until a check or the reaper drops it.
    assert purgatory.watched() == 2
    assert purgatory.check_and_complete("p0") == 0
    assert purgatory.watched() == 1
    assert purgatory.purge_completed() == 1
    assert purgatory.watched() == 0 and purgatory.watched_keys() == 0


def test_completed_by_a_nested_check_during_its_second_try(timer, purgatory):
    # The event fires while the second check runs; the nested check_and_complete
    # completes the (now watched) operation although the outer try says "no".
    flag = Flag()

    class Reentrant(Op):
        def try_complete(self):
            if self.tries == 1 and not flag.on:
                self.tries += 1
                flag.on = True
                assert purgatory.check_and_complete("k") == 1
                return False  # this stale evaluation says "not yet"
            return super().try_complete()

    op = Reentrant(100, ready=flag)
    assert purgatory.try_complete_else_watch(op, ["k"]) is True
    assert op.completions == 1 and op.tries == 3
    assert timer.size == 0 and purgatory.delayed() == 0
    assert purgatory.watched() == 0 and purgatory.watched_keys() == 0


# -- check_and_complete --------------------------------------------------------------


def test_check_and_complete_completes_only_ready_operations(timer, purgatory):
    flags = [Flag() for _ in range(4)]
    ops = [Op(1_000, ready=f, name=i) for i, f in enumerate(flags)]
    for op in ops:
        purgatory.try_complete_else_watch(op, ["p0"])
    assert purgatory.check_and_complete("p0") == 0
    flags[1].on = flags[3].on = True
    assert purgatory.check_and_complete("p0") == 2
    assert [op.completions for op in ops] == [0, 1, 0, 1]
    assert purgatory.watched() == 2 and purgatory.delayed() == 2 and timer.size == 2
    assert purgatory.check_and_complete("nobody-watches-this") == 0


def test_key_is_removed_when_its_last_watcher_completes(purgatory):
    flag = Flag()
    purgatory.try_complete_else_watch(Op(1_000, ready=flag), ["p0"])
    purgatory.try_complete_else_watch(Op(1_000), ["p1"])
    flag.on = True
    assert purgatory.check_and_complete("p0") == 1
    assert purgatory.watched_keys() == 1


def test_on_complete_may_watch_and_check_the_same_key(timer, purgatory):
    flag = Flag()
    first = Op(1_000, ready=flag, name="first")
    second = Op(1_000, ready=flag, name="second")
    newcomer = Op(1_000, name="newcomer")

    def chain(_):
        # Re-entrant: new watcher on the key being iterated, plus a nested check.
        purgatory.try_complete_else_watch(newcomer, ["p0"])
        purgatory.check_and_complete("p0")

    first.after_complete = chain
    purgatory.try_complete_else_watch(first, ["p0"])
    purgatory.try_complete_else_watch(second, ["p0"])
    flag.on = True
    total = purgatory.check_and_complete("p0")
    assert first.completions == 1 and second.completions == 1
    assert total == 1  # the nested check completed `second`
    assert newcomer.completions == 0 and purgatory.watched() == 1
    assert purgatory.delayed() == 1 and timer.size == 1


# -- expiration and races ---------------------------------------------------------------


def test_expiry_completes_then_reports_expiration(timer, purgatory):
    op = Op(100)
    purgatory.try_complete_else_watch(op, ["p0"])
    timer.advance_clock(99)
    assert op.completions == 0
    timer.advance_clock(100)
    assert (op.completions, op.expirations) == (1, 1)
    assert op.is_completed and purgatory.delayed() == 0 and timer.size == 0
    assert op.force_complete() is False and op.completions == 1
    assert purgatory.metrics()["expirations_total"] == 1


def test_trigger_then_expiry_completes_once(timer, purgatory):
    flag = Flag()
    op = Op(100, ready=flag)
    purgatory.try_complete_else_watch(op, ["p0"])
    flag.on = True
    assert purgatory.check_and_complete("p0") == 1
    timer.advance_clock(10_000)
    assert (op.completions, op.expirations) == (1, 0)
    assert purgatory.metrics()["expirations_total"] == 0


def test_expiry_then_trigger_completes_once(timer, purgatory):
    flag = Flag()
    op = Op(100, ready=flag)
    purgatory.try_complete_else_watch(op, ["p0", "p1"])
    timer.advance_clock(100)
    flag.on = True
    assert purgatory.check_and_complete("p0") == 0
    assert purgatory.check_and_complete("p1") == 0
    assert (op.completions, op.expirations) == (1, 1)
    assert op.tries == 2  # completed operations are not tried again
    assert purgatory.watched() == 0


def test_trigger_and_expiry_racing_in_one_pass(timer, purgatory):
    # Both expire in the same tick; the first one's expiration fires the event
    # that completes the second: the second must complete once, not expire.
    flag = Flag()
    a = Op(50, name="a")
    b = Op(50, ready=flag, name="b")

    def fire_event(_):
        flag.on = True
        purgatory.check_and_complete("p0")

    a.after_expire = fire_event
    purgatory.try_complete_else_watch(a, ["p0"])
    purgatory.try_complete_else_watch(b, ["p0"])
    assert timer.advance_clock(50) == 1  # b left the timer before its turn
    assert (a.completions, a.expirations) == (1, 1)
    assert (b.completions, b.expirations) == (1, 0)
    assert purgatory.delayed() == 0 and timer.size == 0


def test_force_complete_from_inside_on_complete_runs_once(timer, purgatory):
    op = Op(50)
    results = []
    op.after_complete = lambda o: results.append(o.force_complete())
    purgatory.try_complete_else_watch(op, ["p0"])
    assert op.force_complete() is True
    assert results == [False] and op.completions == 1
    timer.advance_clock(100)
    assert op.expirations == 0


def test_expiration_from_on_expiration_of_another_in_same_bucket(timer, purgatory):
    # a's on_expiration force-completes b, which sits later in the same bucket.
    a, b = Op(20, name="a"), Op(20, name="b")
    a.after_expire = lambda _: b.force_complete()
    purgatory.try_complete_else_watch(a, ["k"])
    purgatory.try_complete_else_watch(b, ["k"])
    timer.advance_clock(20)
    assert (b.completions, b.expirations) == (1, 0)
    assert purgatory.delayed() == 0


# -- reaper --------------------------------------------------------------------------------


def test_reaper_purges_completed_operations_from_other_keys(timer):
    purgatory = DelayedOperationPurgatory("fetch", timer, purge_interval=10)
    flag = Flag()
    ops = [Op(10_000, ready=flag, name=i) for i in range(30)]
    for op in ops:
        purgatory.try_complete_else_watch(op, ["a", "b"])
    stayer = Op(10_000, name="stayer")
    purgatory.try_complete_else_watch(stayer, ["a", "b"])
    assert purgatory.watched() == 62
    flag.on = True
    assert purgatory.check_and_complete("a") == 30
    # "b" still lists the 30 completed operations; the estimate (30) passed
    # the purge interval, so the reaper is queued on the timer.
    assert purgatory.watched() == 1 + 31
    assert timer.size == 2  # stayer + the reaper
    timer.advance_clock(timer.now_ms)  # the reaper runs on the next pass
    assert purgatory.watched() == 2 and purgatory.watched_keys() == 2
    assert timer.size == 1 and purgatory.delayed() == 1
    stayer.force_complete()
    purgatory.shutdown()


def test_reaper_waits_for_the_purge_interval(timer):
    purgatory = DelayedOperationPurgatory("fetch", timer, purge_interval=50)
    flag = Flag()
    for i in range(20):
        purgatory.try_complete_else_watch(Op(10_000, ready=flag, name=i), ["a", "b"])
    flag.on = True
    purgatory.check_and_complete("a")
    timer.advance_clock(1)
    assert purgatory.watched() == 20  # below the interval: not purged yet
    assert timer.size == 0
    purgatory.shutdown()


# -- cancel_for_key, shutdown, metrics ----------------------------------------------------


def test_cancel_for_key_returns_pending_ops_and_drops_their_timeouts(timer, purgatory):
    done_flag = Flag()
    pending = [Op(100, name=i) for i in range(3)]
    done = Op(100, ready=done_flag, name="done")
    for op in pending + [done]:
        purgatory.try_complete_else_watch(op, ["p0"])
    done_flag.on = True
    done.safe_try_complete()
    cancelled = purgatory.cancel_for_key("p0")
    assert cancelled == pending and all(a is b for a, b in zip(cancelled, pending))
    assert purgatory.watched_keys() == 0 and purgatory.delayed() == 0
    assert timer.size == 0
    timer.advance_clock(1_000)
    assert all(op.completions == 0 and op.expirations == 0 for op in pending)
    assert purgatory.cancel_for_key("p0") == []


def test_shutdown_drops_pending_operations(timer):
    purgatory = DelayedOperationPurgatory("produce", timer)
    op = Op(100)
    purgatory.try_complete_else_watch(op, ["p0"])
    purgatory.shutdown()
    assert timer.size == 0 and purgatory.watched() == 0 and purgatory.delayed() == 0
    timer.advance_clock(1_000)
    assert op.completions == 0
    with pytest.raises(RuntimeError):
        purgatory.try_complete_else_watch(Op(100), ["p0"])


def test_shared_timer_counts_per_purgatory(timer):
    produce = DelayedOperationPurgatory("produce", timer)
    fetch = DelayedOperationPurgatory("fetch", timer)
    produce.try_complete_else_watch(Op(100), ["p0"])
    fetch.try_complete_else_watch(Op(100), ["p0"])
    fetch.try_complete_else_watch(Op(200), ["p0"])
    assert (produce.delayed(), fetch.delayed(), timer.size) == (1, 2, 3)
    produce.shutdown()
    assert (fetch.delayed(), timer.size) == (2, 2)
    fetch.shutdown()


def test_metrics(timer, purgatory):
    for i in range(5):
        purgatory.try_complete_else_watch(Op(1_000, name=i), ["p0", f"q{i}"])
    m = purgatory.metrics()
    assert m["purgatory_size"] == 10 and m["watched_keys"] == 6
    assert m["num_delayed_operations"] == 5 and m["expirations_per_sec"] == 0
    timer.advance_clock(1_000)
    m = purgatory.metrics()
    assert m["expirations_total"] == 5 and m["num_delayed_operations"] == 0
    assert m["expirations_per_sec"] == pytest.approx(5.0)  # 5 in the 1 s since creation


def test_rate_meter_window():
    now = [0]
    meter = RateMeter(lambda: now[0], window_ms=10_000, samples=10)
    assert meter.rate() == 0
    for i in range(10):
        now[0] = 500 + 1_000 * i
        meter.mark(100)
    now[0] = 10_000  # the sub-window [0, 1 s) has just aged out
    assert meter.count == 1_000
    assert meter.rate() == pytest.approx(100.0)  # 900 events over [1 s, 10 s)
    now[0] += 30_000
    assert meter.rate() == 0 and meter.count == 1_000


# -- on a real loop ------------------------------------------------------------------------


def test_expiry_and_trigger_on_a_real_loop():
    async def main():
        timer = Timer(asyncio.get_running_loop())
        purgatory = DelayedOperationPurgatory("produce", timer)
        flag = Flag()
        expired = asyncio.get_running_loop().create_future()
        slow = Op(5, name="slow")
        slow.after_expire = lambda _: expired.set_result(None)
        fast = Op(60_000, ready=flag, name="fast")
        purgatory.try_complete_else_watch(slow, ["p0"])
        purgatory.try_complete_else_watch(fast, ["p0"])
        await asyncio.wait_for(expired, 30)
        flag.on = True
        assert purgatory.check_and_complete("p0") == 1
        assert timer.size == 0
        purgatory.shutdown()
        timer.shutdown()
        return slow, fast

    slow, fast = asyncio.run(main())
    assert (slow.completions, slow.expirations) == (1, 1)
    assert (fast.completions, fast.expirations) == (1, 0)


def test_reaper_purges_a_slice_per_timer_pass(timer, monkeypatch):
    # Kafka purges on its reaper thread; on the one loop a purge goes about PURGE_SLICE watch
    # entries per pass, so that a million entries never stall it in one go.
    monkeypatch.setattr(purgatory_module, "PURGE_SLICE", 25)
    purgatory = DelayedOperationPurgatory("fetch", timer, purge_interval=10)
    flag = Flag()
    keys = [f"k{i}" for i in range(10)]
    ops = [Op(10_000, ready=flag, name=i) for i in range(20)]
    for op in ops:
        purgatory.try_complete_else_watch(op, ["trigger", *keys])
    stayer = Op(10_000, name="stayer")
    purgatory.try_complete_else_watch(stayer, keys)
    flag.on = True
    assert purgatory.check_and_complete("trigger") == 20
    assert purgatory.watched() == 10 * 21 and timer.size == 2  # the stayer and the reaper
    passes = []
    while purgatory.watched() > 10:
        timer.advance_clock(timer.now_ms)
        passes.append(purgatory.watched())
    # Each pass looks at two keys (21 entries each: the slice is whole keys, about 25 entries).
    assert passes == [170, 130, 90, 50, 10]
    assert purgatory.watched_keys() == 10 and purgatory.delayed() == 1
    assert timer.size == 1  # the stayer alone: the purge is done
    timer.advance_clock(timer.now_ms)
    assert timer.size == 1 and purgatory.watched() == 10
    stayer.force_complete()
    purgatory.shutdown()


def _completed_on_abc(timer, monkeypatch, count: int, purge_interval: int) -> tuple[DelayedOperationPurgatory, Flag]:
    """A purgatory purging one key a slice, with ``count`` operations watched under "a", "b" and
    "c" and then completed through "a" (their entries under "b" and "c" are left to purge)."""
    monkeypatch.setattr(purgatory_module, "PURGE_SLICE", 1)
    purgatory = DelayedOperationPurgatory("fetch", timer, purge_interval=purge_interval)
    flag = Flag()
    for i in range(count):
        purgatory.try_complete_else_watch(Op(10_000, ready=flag, name=i), ["a", "b", "c"])
    flag.on = True
    purgatory.check_and_complete("a")
    return purgatory, flag


def test_no_new_purge_while_one_is_under_way(timer, monkeypatch):
    purgatory, flag = _completed_on_abc(timer, monkeypatch, 4, purge_interval=2)  # the reaper is queued
    timer.advance_clock(timer.now_ms)  # it begins a purge of "b" and "c", and does "c"
    assert purgatory.watched() == 4 and timer.size == 1
    for i in range(4):  # 4 more watched and completed meanwhile: past the interval again
        flag.on = False
        purgatory.try_complete_else_watch(Op(10_000, ready=flag, name=f"later{i}"), ["d", "e"])
        flag.on = True
        purgatory.check_and_complete("d")
    assert timer.size == 1  # still the one reaper, of the purge under way
    timer.advance_clock(timer.now_ms)  # "b": that purge is done, "e" was not in it
    assert purgatory.watched() == 4 and timer.size == 0
    # The next completion finds the pile past the interval: the next purge.
    flag.on = False
    purgatory.try_complete_else_watch(Op(10_000, ready=flag, name="next"), ["f"])
    flag.on = True
    purgatory.check_and_complete("f")
    assert timer.size == 1
    timer.advance_clock(timer.now_ms)
    timer.advance_clock(timer.now_ms)
    assert purgatory.watched() == 0 and purgatory.watched_keys() == 0 and timer.size == 0
    purgatory.shutdown()


def test_purge_completed_purges_at_once_in_place_of_a_purge_under_way(timer, monkeypatch):
    purgatory, _flag = _completed_on_abc(timer, monkeypatch, 5, purge_interval=3)
    timer.advance_clock(timer.now_ms)  # one slice: one key
    assert purgatory.watched() == 5
    assert purgatory.purge_completed() == 5
    assert purgatory.watched() == 0 and purgatory.watched_keys() == 0
    assert timer.size == 0  # the reaper of the purge it replaced is gone


def test_shutdown_ends_a_purge_under_way(timer, monkeypatch):
    purgatory, _flag = _completed_on_abc(timer, monkeypatch, 3, purge_interval=1)
    timer.advance_clock(timer.now_ms)
    assert timer.size == 1
    purgatory.shutdown()
    assert timer.size == 0 and purgatory.watched() == 0


_WATCHES = [purgatory_module._py_watch_keys]
if purgatory_module._speedups is not None:
    _WATCHES.append(purgatory_module._speedups.watch_keys)


@pytest.mark.parametrize("watch_keys", _WATCHES, ids=lambda f: f.__module__ or "C")
def test_watch_keys_adds_the_operation_under_every_key(watch_keys):
    a, b = Op(1, name="a"), Op(1, name="b")
    watchers = {"k0": {id(a): a}}
    watch_keys(watchers, ["k0", "k1", "k2"], id(b), b)
    assert list(watchers) == ["k0", "k1", "k2"]
    assert watchers["k0"] == {id(a): a, id(b): b} and watchers["k1"] == {id(b): b} == watchers["k2"]
    watch_keys(watchers, ("k1",), id(a), a)  # any sequence of keys
    assert list(watchers["k1"].values()) == [b, a]
    with pytest.raises(TypeError):
        watch_keys(watchers, [["unhashable"]], id(a), a)
