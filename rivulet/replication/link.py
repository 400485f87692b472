"""One inter-broker connection kept by a background task (a replica fetcher, the
AlterPartition sender): opened on first use, dropped on failure, closed with its task."""

from __future__ import annotations

import asyncio

from rivulet.client.connection import PLAINTEXT_CONNECTOR, BrokerConnection, BrokerConnector  # noqa: F401  (re-exported)


class BrokerLink:
    def __init__(self, client_id: str, request_timeout_ms: int, connector: BrokerConnector = PLAINTEXT_CONNECTOR
                 ) -> None:
        self.client_id = client_id
        self.connector = connector
        self.request_timeout_ms = request_timeout_ms
        self._conn: BrokerConnection | None = None
        self._to: tuple[int, str, int] | None = None

    async def connection(self, broker_id: int, host: str, port: int) -> BrokerConnection:
        """The open connection to ``broker_id`` at host:port, (re)connecting when needed."""
        key = (broker_id, host, port)
        if self._conn is None or self._conn.closed or self._to != key:
            await self.drop()
            self._conn = await self.connector.connection(
                host, port, self.client_id, self.request_timeout_ms, broker_id).connect(
                timeout=self.request_timeout_ms / 1000)
            self._to = key
        return self._conn

    async def drop(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()

    async def close(self, task: asyncio.Task | None) -> None:
        """Cancel the task that uses this link, then close the connection."""
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        await self.drop()
