"""The one way a request handler answers now or later.

A handler returns a response, an ``asyncio.Future`` or a ``Promise`` of one, ``NO_RESPONSE``
or ``CLOSE_CONNECTION``. Coordinators answer through callbacks and the ReplicaManager with a result or
a Future of one (a Promise for a Fetch); ``Reply`` turns either into the handler's answer: the
response itself when the answer came synchronously, else a Future the connection waits on.
``then`` keeps a Promise a Promise, so that a completed Fetch is written on the stack that
completed it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Generic, TypeVar, Union

from rivulet.common.promise import Promise

log = logging.getLogger(__name__)

R = TypeVar("R")
T = TypeVar("T")

NO_RESPONSE: Any = object()  # acks=0 produces: nothing goes back
# A failed acks=0 produce: no answer, and the connection closes, as Kafka's does, so that the
# producer learns of the error and refreshes its metadata.
CLOSE_CONNECTION: Any = object()
# Any: each handler answers with its own response class, and Future and Promise are invariant in
# theirs (a handler's Future[ProduceResponse] would not be a Future[Struct]).
Answer = Union[Any, "asyncio.Future[Any]", "Promise[Any]"]


class Reply(Generic[T]):
    """A callback for a coordinator: ``build`` turns its result into the response."""

    __slots__ = ("_build", "_value", "_future", "_done")

    def __init__(self, build: Callable[[T], Any]) -> None:
        self._build = build
        self._value: Any = None
        self._future: asyncio.Future | None = None
        self._done = False

    def __call__(self, result: T) -> None:
        if self._done:
            return
        self._done = True
        try:
            value = self._build(result)
        except Exception as e:  # one failed answer must never break the caller (another member's request)
            log.exception("building a response failed")
            self.fail(e)
            return
        if self._future is not None:
            if not self._future.done():
                self._future.set_result(value)
        else:
            self._value = value

    def fail(self, exc: BaseException | None) -> None:
        """Answer with an error (the connection logs it and closes); None cancels."""
        self._done = True
        if self._future is None:
            self._future = asyncio.get_running_loop().create_future()
        if self._future.done():
            return
        if exc is None:
            self._future.cancel()
        else:
            self._future.set_exception(exc)

    def answer(self) -> Answer:
        """The response if it is known already, else a Future of it."""
        if self._future is not None:
            return self._future
        if self._done:
            return self._value
        self._future = asyncio.get_running_loop().create_future()
        return self._future


def then(result: R | asyncio.Future | Promise[R], build: Callable[[R], Any]) -> Answer:
    """Build the response from ``result`` now, or when its Future or Promise resolves."""
    if isinstance(result, Promise):
        return _then_promise(result, build)
    if not isinstance(result, asyncio.Future):
        return build(result)
    reply: Reply[R] = Reply(build)

    def done(f: asyncio.Future) -> None:
        if f.cancelled():
            reply.fail(None)
        elif f.exception() is not None:
            reply.fail(f.exception())  # surfaced by the connection, which logs and closes
        else:
            reply(f.result())
    result.add_done_callback(done)
    return reply.answer()


def _then_promise(result: Promise[R], build: Callable[[R], Any]) -> Promise[Any]:
    answer: Promise[Any] = Promise()

    def done(p: Promise[R]) -> None:
        try:
            value = build(p.result())
        except Exception as e:  # surfaced by the connection, which logs and closes
            answer.set_exception(e)
            return
        answer.set_result(value)
    result.add_done_callback(done)
    return answer
