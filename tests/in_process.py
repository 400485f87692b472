"""Unit tests against an in-process Broker: an async test body in an event loop of its own, and
the broker shut down whatever the body's outcome.

    @in_loop
    async def test_restart(tmp_path):
        async with running(start(tmp_path)) as b:
            ...

``with_broker(start)`` makes the common case, one broker for the whole test, a decorator whose
body takes that broker only.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from rivulet.common.types import TopicPartition
from rivulet.replication.metadata_cache import (
    BrokerEndpoint, LiveBroker, MetadataCache, MetadataUpdate, PartitionMetadata)
from rivulet.server.broker import Broker

AsyncTest = Callable[[Path], Awaitable[None]]
BrokerBody = Callable[[Broker], Awaitable[None]]
Test = Callable[[Path], None]


def in_loop(test: AsyncTest) -> Test:
    """``async def test_x(tmp_path)`` as pytest runs it: in a new event loop (asyncio.run)."""
    def run(tmp_path: Path) -> None:
        asyncio.run(test(tmp_path))
    # Named as the body, so pytest collects and reports it by that name; no __wrapped__, so that
    # pytest reads the fixtures (tmp_path) from this function's own signature.
    run.__name__, run.__qualname__, run.__doc__ = test.__name__, test.__qualname__, test.__doc__
    return run


@contextlib.asynccontextmanager
async def running(starting: Awaitable[Broker]) -> AsyncIterator[Broker]:
    """The broker ``starting`` gives, shut down on leaving the block."""
    b = await starting
    try:
        yield b
    finally:
        await b.shutdown()


def with_broker(start: Callable[[Path], Awaitable[Broker]]) -> Callable[[BrokerBody], Test]:
    """A test that is its body only: ``async def test_x(b)`` run against ``start(tmp_path)``."""
    def wrap(body: BrokerBody) -> Test:
        async def test(tmp_path: Path) -> None:
            async with running(start(tmp_path)) as b:
                await body(b)
        test.__name__, test.__qualname__, test.__doc__ = body.__name__, body.__qualname__, body.__doc__
        return in_loop(test)
    return wrap


def cache_led_by(b: Broker, topic: str, partitions: int, node_id: int = 99) -> MetadataCache:
    """The metadata of another node (``node_id``) in a cluster where ``b`` leads all of ``topic``
    and is the only live broker: what that node's links need to reach ``b`` over the wire."""
    node = b.node
    cache = MetadataCache(node_id=node_id)
    cache.update(MetadataUpdate(
        controller_id=node.node_id, controller_epoch=1,
        live_brokers=[LiveBroker(node.node_id, (BrokerEndpoint("PLAINTEXT", node.host, node.port),))],
        partitions={TopicPartition(topic, p): PartitionMetadata(node.node_id, 0, [], []) for p in range(partitions)},
        topic_ids={}))
    return cache
