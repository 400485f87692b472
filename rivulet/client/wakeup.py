"""An asyncio.Event that any thread may set: the sync API's thread wakes the client's loop."""

from __future__ import annotations

import asyncio
import threading


class Waker:
    """Wraps one asyncio.Event; cross-thread wake-ups coalesce into a single loop callback."""

    __slots__ = ("event", "loop", "_thread", "_scheduled")

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread = 0
        self._scheduled = False

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Called on the loop's own thread when the owner starts."""
        self.loop = loop
        self._thread = threading.get_ident()

    def on_loop_thread(self) -> bool:
        return threading.get_ident() == self._thread

    def wake(self) -> None:
        if self.loop is None:
            return
        if self.on_loop_thread():
            self.event.set()
        elif not self._scheduled:
            self._scheduled = True
            try:
                self.loop.call_soon_threadsafe(self._set)
            except RuntimeError:  # the loop has closed
                pass

    def _set(self) -> None:
        self._scheduled = False
        self.event.set()
