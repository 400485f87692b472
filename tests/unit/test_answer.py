"""server/answer.py: a handler's answer is the response when it is known at once, else a
Future the connection waits on."""

from __future__ import annotations

import asyncio

import pytest

from rivulet.common.promise import Promise
from rivulet.server.answer import Reply, then

pytestmark = pytest.mark.fast


def run(coro):
    return asyncio.run(coro)


def test_reply_answered_synchronously_is_the_response():
    async def main():
        reply = Reply(lambda n: f"response {n}")
        reply(1)
        reply(2)  # only the first answer counts
        return reply.answer()
    assert run(main()) == "response 1"


def test_reply_answered_later_is_a_future():
    async def main():
        reply = Reply(lambda n: n * 2)
        out = reply.answer()
        assert isinstance(out, asyncio.Future) and not out.done()
        asyncio.get_running_loop().call_soon(reply, 21)
        return await out
    assert run(main()) == 42


def test_reply_whose_build_fails_answers_with_the_error():
    async def main():
        reply = Reply(lambda n: 1 // n)
        out = reply.answer()
        reply(0)  # must not raise into the coordinator that called back
        with pytest.raises(ZeroDivisionError):
            await out
        sync = Reply(lambda n: 1 // n)
        sync(0)
        failed = sync.answer()
        assert isinstance(failed, asyncio.Future) and isinstance(failed.exception(), ZeroDivisionError)
    run(main())


def test_then_builds_now_or_when_the_future_resolves():
    async def main():
        assert then(3, lambda n: n + 1) == 4
        fut = asyncio.get_running_loop().create_future()
        out = then(fut, lambda n: n + 1)
        fut.set_result(9)
        assert await out == 10
        failing = asyncio.get_running_loop().create_future()
        out = then(failing, lambda n: n)
        failing.set_exception(RuntimeError("disk"))
        with pytest.raises(RuntimeError):
            await out
        cancelled = asyncio.get_running_loop().create_future()
        out = then(cancelled, lambda n: n)
        cancelled.cancel()
        await asyncio.sleep(0)
        assert out.cancelled()
    run(main())


def test_then_of_a_promise_is_a_promise_built_when_it_is_set():
    p: Promise[int] = Promise()
    out = then(p, lambda n: n + 1)
    assert isinstance(out, Promise) and not out.done()
    p.set_result(1)
    assert out.done() and out.result() == 2  # on the setter's stack, no turn of a loop
    failing: Promise[int] = Promise()
    out = then(failing, lambda n: 1 // n)
    failing.set_result(0)
    assert isinstance(out.exception(), ZeroDivisionError)  # the connection logs it and closes
