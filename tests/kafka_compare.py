"""Helpers for the tests that send the same requests to Rivulet and to a real Kafka broker."""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, TypeVar

T = TypeVar("T")


async def read_until_changed(fetch: Callable[[], Awaitable[T]], previous: T, tries: int = 50) -> T:
    """A read after a change, once it shows: Kafka's brokers apply the controller's metadata a
    moment after answering the change (Rivulet's answer is the same at the first read)."""
    now = await fetch()
    for _ in range(tries - 1):
        if now != previous:
            return now
        await asyncio.sleep(0.1)
        now = await fetch()
    return now
