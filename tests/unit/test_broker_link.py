"""BrokerLink: one connection per link, however many callers ask for it at once."""

from __future__ import annotations

import asyncio

from rivulet.client.connection import BrokerConnection, BrokerConnector
from rivulet.replication.link import BrokerLink


class _Connection(BrokerConnection):
    """Connects after a pause (so that callers overlap) without a socket."""

    async def connect(self, timeout: float | None = None) -> BrokerConnection:
        await asyncio.sleep(0.01)
        return self


class _Connector(BrokerConnector):
    def __init__(self) -> None:
        super().__init__()
        self.made: list[_Connection] = []

    def connection(self, host: str, port: int, client_id: str, request_timeout_ms: int = 30000,
                   node_id: int = -1) -> BrokerConnection:
        conn = _Connection(host, port, client_id, request_timeout_ms, node_id)
        self.made.append(conn)
        return conn


def test_callers_racing_on_first_use_share_one_connection():
    connector = _Connector()
    link = BrokerLink("test", 1000, connector)

    async def main() -> list[BrokerConnection]:
        return list(await asyncio.gather(*(link.connection(1, "127.0.0.1", 9092) for _ in range(5))))

    got = asyncio.run(main())
    assert len(connector.made) == 1 and all(c is connector.made[0] for c in got)


def test_a_closed_or_moved_connection_is_replaced_once_and_closed():
    connector = _Connector()
    link = BrokerLink("test", 1000, connector)

    async def main() -> None:
        first = await link.connection(1, "127.0.0.1", 9092)
        moved = await asyncio.gather(*(link.connection(1, "127.0.0.1", 9093) for _ in range(3)))
        assert first.closed  # dropped when the broker moved
        assert len(connector.made) == 2 and all(c is connector.made[1] for c in moved)
        await connector.made[1].close()
        again = await link.connection(1, "127.0.0.1", 9093)
        assert again is connector.made[2] and not again.closed

    asyncio.run(main())
