"""This broker's connections to the others: ``BrokerLink``, one connection kept by a
background task (a replica fetcher, the AlterPartition sender), opened on first use, dropped
on failure, closed with its task; ``BrokerLinks``, one such link per broker for one purpose
(transaction markers, KIP-890 checks, share state, partition ends), each broker found in the
metadata cache on the inter-broker listener."""

from __future__ import annotations

import asyncio

from rivulet.client.connection import PLAINTEXT_CONNECTOR, BrokerConnection, BrokerConnector  # noqa: F401  (re-exported)
from rivulet.common.types import TopicPartition
from rivulet.protocol.errors import ApiError
from rivulet.protocol.schema import Struct
from rivulet.replication.metadata_cache import BrokerEndpoint, MetadataCache

# What a failed exchange with another broker raises: the link is dropped and the caller retries.
LINK_ERRORS = (ConnectionError, OSError, TimeoutError, ApiError)


class BrokerLink:
    def __init__(self, client_id: str, request_timeout_ms: int, connector: BrokerConnector = PLAINTEXT_CONNECTOR
                 ) -> None:
        self.client_id = client_id
        self.connector = connector
        self.request_timeout_ms = request_timeout_ms
        self._conn: BrokerConnection | None = None
        self._to: tuple[int, str, int] | None = None
        # One connect at a time: callers racing on first use share it (else each opened one, and
        # all but the last were left open, their answers free to overtake the kept one's).
        self._connecting = asyncio.Lock()

    async def connection(self, broker_id: int, host: str, port: int) -> BrokerConnection:
        """The open connection to ``broker_id`` at host:port, (re)connecting when needed."""
        key = (broker_id, host, port)
        conn = self._conn
        if conn is not None and not conn.closed and self._to == key:
            return conn
        async with self._connecting:
            conn = self._conn
            if conn is None or conn.closed or self._to != key:
                await self.drop()
                conn = await self.connector.connection(
                    host, port, self.client_id, self.request_timeout_ms, broker_id).connect(
                    timeout=self.request_timeout_ms / 1000)
                self._conn, self._to = conn, key
            return conn

    def open_connection(self) -> BrokerConnection | None:
        """The connection, when it is open; None rather than connecting."""
        conn = self._conn
        return conn if conn is not None and not conn.closed else None

    async def drop(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()

    async def close(self, task: asyncio.Task | None, drop: bool = True) -> None:
        """Cancel the task that uses this link, then (unless ``drop`` is False: the caller has
        a last word to send) close the connection."""
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        if drop:
            await self.drop()


class BrokerLinks:
    """One ``BrokerLink`` per broker for one purpose, over the inter-broker ``listener``; the
    brokers' endpoints come from the metadata cache (cluster mode; without one, no broker is
    reachable and the callers serve everything locally)."""

    def __init__(self, purpose: str, node_id: int, cache: MetadataCache | None, listener: str,
                 request_timeout_ms: int = 30000, connector: BrokerConnector = PLAINTEXT_CONNECTOR) -> None:
        self.node_id = node_id
        self.cache = cache
        self.listener = listener
        self.request_timeout_ms = request_timeout_ms
        self._client_id = f"broker-{node_id}-{purpose}"
        self._connector = connector
        self._links: dict[int, BrokerLink] = {}

    def endpoint(self, broker_id: int) -> BrokerEndpoint | None:
        """Where a live ``broker_id`` listens on the inter-broker listener."""
        broker = self.cache.alive_broker(broker_id) if self.cache is not None else None
        return broker.endpoint(self.listener) if broker is not None else None

    def leader(self, tp: TopicPartition) -> tuple[int, BrokerEndpoint | None]:
        """``tp``'s leader as the metadata cache has it (-1 when none), and its endpoint."""
        if self.cache is None:
            return -1, None
        leader, _epoch, endpoint = self.cache.leader_and_endpoint(tp, self.listener)
        return leader, endpoint

    async def connection(self, broker_id: int, endpoint: BrokerEndpoint | None = None) -> BrokerConnection:
        """The open connection to ``broker_id`` (at ``endpoint``, else where the cache places it)."""
        endpoint = endpoint or self.endpoint(broker_id)
        if endpoint is None:
            raise ConnectionError(f"broker {broker_id} has no live endpoint on listener {self.listener}")
        link = self._links.get(broker_id)
        if link is None:
            link = self._links[broker_id] = BrokerLink(self._client_id, self.request_timeout_ms, self._connector)
        return await link.connection(broker_id, endpoint.host, endpoint.port)

    async def send(self, broker_id: int, request: Struct, max_version: int | None = None,
                   endpoint: BrokerEndpoint | None = None) -> Struct:
        """``request`` to ``broker_id`` at the highest version both speak (up to ``max_version``);
        on failure the connection is dropped and one of ``LINK_ERRORS`` raised."""
        try:
            conn = await self.connection(broker_id, endpoint)
            return await conn.send(request, conn.version_for(request.API_KEY, max_version))
        except LINK_ERRORS:
            await self.drop(broker_id)
            raise

    async def drop(self, broker_id: int) -> None:
        link = self._links.get(broker_id)
        if link is not None:
            await link.drop()

    async def close(self) -> None:
        for link in self._links.values():
            await link.drop()
