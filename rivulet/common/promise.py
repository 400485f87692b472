"""``Promise``: a result that comes later, whose callbacks run as soon as it is set.

An ``asyncio.Future`` runs its callbacks on a later turn of the event loop. A waiting Fetch
that a Produce completes went through two of them (the replica manager's future, then the
handler's) before its answer was written, and the Produce's own answer went out first: the
consumer heard of the records a few hundred microseconds after the append. Kafka completes
the fetch on the request thread right after the append and hands the answer straight to the
network thread. A ``Promise`` carries that hand-over in one call: the producer of the result
sets it, and whoever waits (the handler building the answer, the connection writing it) runs
there and then.

Callbacks run on the setter's stack, so one that raises is logged and the others still run:
the append that completed a fetch must never fail because that fetch's answer did.
"""

from __future__ import annotations

import logging
from typing import Callable, Generic, TypeVar

__all__ = ["Promise"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class Promise(Generic[T]):
    """Set once with a result or an exception; ``add_done_callback`` runs the callback at
    once when it is set already, else when it is. The reading side mirrors
    ``asyncio.Future``'s (``done``, ``cancelled``, ``exception``, ``result``), so a waiter
    treats either alike."""

    __slots__ = ("_done", "_result", "_exception", "_callbacks")

    def __init__(self) -> None:
        self._done = False
        self._result: T | None = None
        self._exception: BaseException | None = None
        self._callbacks: list[Callable[[Promise[T]], None]] = []

    def done(self) -> bool:
        return self._done

    def cancelled(self) -> bool:
        return False  # nothing cancels a Promise: a closed connection simply drops its answer

    def exception(self) -> BaseException | None:
        if not self._done:
            raise RuntimeError("the promise is not set yet")
        return self._exception

    def result(self) -> T:
        if not self._done:
            raise RuntimeError("the promise is not set yet")
        if self._exception is not None:
            raise self._exception
        return self._result  # type: ignore[return-value]

    def set_result(self, value: T) -> None:
        if self._done:
            raise RuntimeError("the promise is set already")
        self._result = value
        self._settle()

    def set_exception(self, exc: BaseException) -> None:
        if self._done:
            raise RuntimeError("the promise is set already")
        self._exception = exc
        self._settle()

    def add_done_callback(self, callback: Callable[[Promise[T]], None]) -> None:
        if self._done:
            self._run(callback)
        else:
            self._callbacks.append(callback)

    def _settle(self) -> None:
        self._done = True
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            self._run(callback)

    def _run(self, callback: Callable[[Promise[T]], None]) -> None:
        try:
            callback(self)
        except Exception:
            log.exception("a promise's callback failed")
