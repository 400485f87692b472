"""An event loop on a daemon thread of its own: what the blocking clients (``sync``, the admin
client's ``AdminClient``) run the asyncio core on."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Callable, Coroutine, Generic, TypeVar

from rivulet.client import errors as E

T = TypeVar("T")
C = TypeVar("C")


def new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop  # type: ignore[import-not-found]
        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


class LoopThread:
    """An event loop running on its own daemon thread."""

    def __init__(self, name: str) -> None:
        self.loop = new_event_loop()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), name=name, daemon=True)
        self.thread.start()
        ready.wait()

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(ready.set)
        try:
            self.loop.run_forever()
        finally:
            try:
                pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
                for t in pending:
                    t.cancel()
                if pending:
                    self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            finally:
                self.loop.close()

    def submit(self, coro: Coroutine[object, object, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[object, object, T], timeout: float | None = None) -> T:
        if threading.current_thread() is self.thread:
            coro.close()
            raise RuntimeError("a blocking client call was made from its own callback thread")
        fut = self.submit(coro)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise E.KafkaException(E.local("_TIMED_OUT", "operation timed out")) from None

    def call(self, fn: Callable[..., T], *args: object) -> T:
        """Run a plain function on the loop's thread and return its result."""
        async def _call() -> T:
            return fn(*args)
        return self.run(_call())

    def stop(self) -> None:
        if self.thread.is_alive():
            try:
                self.loop.call_soon_threadsafe(self.loop.stop)
            except RuntimeError:
                pass
            if threading.current_thread() is not self.thread:
                self.thread.join(10)


class ThreadStopper(Generic[C]):
    """A blocking client's finalizer: stops the loop thread its asyncio client runs on.

    It holds that client until then. A blocking client dropped inside a reference cycle is
    collected together with whatever only it reaches; were its asyncio client among that, the
    collector would find the client's tasks still pending (one waiting on an event that only the
    client refers to is reached through nothing else) and destroy them, which asyncio logs as
    "Task was destroyed but it is pending". Held here, they stay reachable until the stopping
    loop cancels them.
    """

    def __init__(self, thread: LoopThread, client: C) -> None:
        self.thread = thread
        self.client = client

    def __call__(self) -> None:
        self.thread.stop()
