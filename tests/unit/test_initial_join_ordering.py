"""group.initial.rebalance.delay.ms=0: a JoinGroup already received when the initial delay ends
joins the first generation, as on Kafka 4.3.1, whose coordinator runtime queues the expired
timer's operation behind the events already queued. Run on a real event loop (asyncio's, and
uvloop's, which the broker uses), with the second request waiting on a socket: the order is
what is checked, never a duration."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

import pytest

from rivulet.delayed import Timer
from rivulet.delayed.timing_wheel import TimerTask
from rivulet.protocol.errors import ErrorCode as E
from test_group_support import FakeCluster, Member, new_coordinator

pytestmark = pytest.mark.fast


def _loops() -> list[Callable[[], asyncio.AbstractEventLoop]]:
    loops: list[Callable[[], asyncio.AbstractEventLoop]] = [asyncio.new_event_loop]
    try:
        import uvloop
    except ImportError:
        return loops
    return loops + [uvloop.new_event_loop]


class _Call(TimerTask):
    def __init__(self, fn: Callable[[], None]) -> None:
        super().__init__(0)
        self.fn = fn

    def run(self) -> None:
        self.fn()


async def _until(done: Callable[[], bool]) -> None:
    for _ in range(1000):  # loop passes, not time
        if done():
            return
        await asyncio.sleep(0)
    raise AssertionError("never happened")


@pytest.mark.parametrize("new_loop", _loops(), ids=lambda f: f.__module__)
def test_after_io_runs_behind_io_already_received(new_loop):
    loop = new_loop()
    (r1, w1), (r2, w2) = socket.socketpair(), socket.socketpair()
    order: list[str] = []
    try:
        timer = Timer(loop)

        async def main() -> None:
            def on_first() -> None:  # a request whose handling starts a 0 ms timer ...
                loop.remove_reader(r1)
                timer.add(_Call(lambda: timer.after_io(lambda: order.append("expired"))))
                w2.send(b"x")  # ... while the next request arrives

            def on_second() -> None:
                loop.remove_reader(r2)
                order.append("request")
            loop.add_reader(r1, on_first)
            loop.add_reader(r2, on_second)
            w1.send(b"x")
            await _until(lambda: len(order) == 2)
        loop.run_until_complete(main())
    finally:
        for s in (r1, w1, r2, w2):
            s.close()
        loop.close()
    assert order == ["request", "expired"]


@pytest.mark.parametrize("new_loop", _loops(), ids=lambda f: f.__module__)
def test_a_join_already_received_joins_the_first_generation_with_no_initial_delay(new_loop):
    loop = new_loop()
    (r1, w1), (r2, w2) = socket.socketpair(), socket.socketpair()
    try:
        b = FakeCluster(**{"group.initial.rebalance.delay.ms": 0})
        b.timer = Timer(loop, clock=lambda: b.clock.milliseconds())
        c = new_coordinator(b)
        c.startup()
        first, second = Member(c, "g", "first"), Member(c, "g", "second")
        first.join()
        second.join()
        assert first.join_result.error == second.join_result.error == E.MEMBER_ID_REQUIRED

        async def main() -> None:
            def on_first() -> None:  # the first consumer's JoinGroup, read off its socket:
                loop.remove_reader(r1)
                first.join()  # Empty -> PreparingRebalance, the initial delay (0) starts
                w2.send(b"join")  # the second's arrives meanwhile

            def on_second() -> None:
                loop.remove_reader(r2)
                second.join()
            loop.add_reader(r1, on_first)
            loop.add_reader(r2, on_second)
            w1.send(b"join")
            await _until(lambda: first.generation > 0 and second.generation > 0)
        loop.run_until_complete(main())
    finally:
        for s in (r1, w1, r2, w2):
            s.close()
        loop.close()
    assert first.generation == second.generation == 1
    assert sorted(m.member_id for m in first.join_result.members + second.join_result.members) == \
        sorted([first.member_id, second.member_id])
