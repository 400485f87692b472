"""The listeners and what every connection shares: connection limits, the request memory
pool, idle expiry and the read buffer.

Kafka's SocketServer in one event loop: each accepted connection is a ``KafkaConnection``
(``network.py``) that parses frames and hands them to the request handler; this module
decides whether a connection may exist at all, how much memory requests may hold, and when
an idle connection goes.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping

from rivulet.common.config import ConfigError
from rivulet.server import file_sender, tls_transport
from rivulet.server.file_sender import FileSender
from rivulet.server.metrics.requests import RequestMetrics
from rivulet.server.tls_transport import TlsTransport
from rivulet.server.network import (
    PLAINTEXT_LISTENER,
    ConnectionRateLimits,
    KafkaConnection,
    Listener,
    RequestHandler,
    RequestLogger,
)

log = logging.getLogger(__name__)

# One read buffer for every connection: the loop reads one socket at a time, and a frame
# still incomplete when the read ends moves into a buffer of its own. An idle connection so
# holds no buffer at all.
STAGE_SIZE = 256 * 1024
# Likewise one buffer that TLS connections read their ciphertext into, before it goes into
# their memory BIOs: a read of at most this much, as asyncio's and uvloop's own reads.
TLS_RECEIVE_SIZE = 256 * 1024
UNLIMITED = 2**31 - 1
# A TLS client that has not completed its handshake by then is dropped.
TLS_HANDSHAKE_TIMEOUT_S = 10.0


class MemoryPool:
    """Bytes held by requests being received or processed (``queued.max.request.bytes``): one
    pool for every connection of every listener, as Kafka's MemoryPool.

    A frame reserves the size its prefix announces when it starts, and gives it back once its
    request is answered (or its connection closes). It is let in when it fits in what is left,
    or when the pool is empty (so a frame larger than the whole pool overshoots it alone);
    otherwise its connection stops reading and queues. Kafka's non-strict pool lets a frame in
    whenever any memory is left; here a large frame waits instead, so small requests keep being
    served while large ones wait. Returned memory goes to the queued frames first, oldest first,
    each that fits. Connections that stopped reading because the pool is exhausted, before a
    frame of theirs was seen, are woken once it is not. A capacity of -1 is unbounded (Kafka's
    default)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._queued: dict[KafkaConnection, int] = {}  # frames that did not fit, oldest first
        self._waiting: set[KafkaConnection] = set()  # paused while the pool was exhausted

    @property
    def bounded(self) -> bool:
        return self.capacity > 0

    def exhausted(self) -> bool:
        return self.bounded and self.used >= self.capacity

    def _fits(self, n: int) -> bool:
        return not self.bounded or self.used == 0 or self.used + n <= self.capacity

    def try_reserve(self, conn: KafkaConnection, n: int) -> bool:
        """Reserve ``n`` bytes for a frame of ``conn``; False (and ``conn`` queued, keeping its
        place if it was already) when it does not fit: ``conn.memory_granted`` tells it later."""
        if conn not in self._queued and self._fits(n):
            self.used += n
            return True
        self._queued.setdefault(conn, n)
        return False

    def queued(self, conn: KafkaConnection) -> bool:
        return conn in self._queued

    def release(self, n: int) -> None:
        self.used -= n
        for conn, size in list(self._queued.items()):
            if self._fits(size):
                del self._queued[conn]
                self.used += size
                conn.memory_granted(size)
        if self._waiting and not self.exhausted():
            waiting, self._waiting = self._waiting, set()
            for conn in waiting:
                conn.update_reading()

    def wait(self, conn: KafkaConnection) -> None:
        """``conn`` stopped reading because the pool is exhausted; it is woken when it is not."""
        self._waiting.add(conn)

    def forget(self, conn: KafkaConnection) -> None:
        self._waiting.discard(conn)
        self._queued.pop(conn, None)


def parse_ip_overrides(spec: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host-or-ip:limit`` pairs, comma-separated."""
    out: dict[str, int] = {}
    for entry in filter(None, (e.strip() for e in (spec or "").split(","))):
        host, sep, limit = entry.rpartition(":")
        try:
            n = int(limit)
        except ValueError:
            n = -1
        if not sep or not host or n < 0:
            raise ConfigError(f"max.connections.per.ip.overrides entry '{entry}' is not host:limit")
        out[host] = n
    return out


class ConnectionQuotas:
    """``max.connections`` for the broker and ``max.connections.per.ip`` (with overrides).
    They change at run time (AlterConfigs, as Kafka's are): connections already open stay,
    new ones are judged by the new limits."""

    CONFIGS = frozenset({"max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides"})

    def __init__(self, max_connections: int, per_ip: int, overrides: dict[str, int]) -> None:
        self.max_connections = max_connections
        self.per_ip = per_ip
        self.overrides = overrides
        self.total = 0
        self.by_ip: Counter[str] = Counter()

    def reconfigurable_configs(self) -> frozenset[str]:
        return self.CONFIGS

    def validate_reconfiguration(self, values: Mapping[str, Any]) -> None:
        parse_ip_overrides(values["max.connections.per.ip.overrides"] or "")

    def reconfigure(self, values: Mapping[str, Any]) -> None:
        self.max_connections = values["max.connections"]
        self.per_ip = values["max.connections.per.ip"]
        self.overrides = parse_ip_overrides(values["max.connections.per.ip.overrides"] or "")

    def refusal(self, ip: str) -> str | None:
        """Why a new connection from ``ip`` may not be kept, or None (and then it is counted)."""
        limit = self.overrides.get(ip, self.per_ip)
        if self.by_ip[ip] >= limit:
            return f"{ip} already has the configured maximum of {limit} connections"
        if self.total >= self.max_connections:
            return f"the broker already has the configured maximum of {self.max_connections} connections"
        self.total += 1
        self.by_ip[ip] += 1
        return None

    def closed(self, ip: str) -> None:
        self.total -= 1
        self.by_ip[ip] -= 1
        if self.by_ip[ip] <= 0:
            del self.by_ip[ip]


class _NoConnectionRates:
    def throttle_ms(self, ip: str) -> int:
        return 0


@dataclass(frozen=True, slots=True)
class SocketServerConfig:
    max_request_bytes: int
    connections_max_idle_ms: int
    max_connections: int = UNLIMITED
    max_connections_per_ip: int = UNLIMITED
    max_connections_per_ip_overrides: str = ""
    queued_max_request_bytes: int = -1
    send_buffer_bytes: int = -1  # socket.send.buffer.bytes; -1: the OS default
    receive_buffer_bytes: int = -1  # socket.receive.buffer.bytes
    listen_backlog_size: int = 50  # socket.listen.backlog.size, as Kafka's default
    failed_authentication_delay_ms: int = 100  # connection.failed.authentication.delay.ms


class SocketServer:
    """The broker's listeners and the state their connections share."""

    def __init__(self, config: SocketServerConfig, connection_rates: ConnectionRateLimits | None = None, *,
                 request_metrics: RequestMetrics | None = None, request_log: RequestLogger | None = None) -> None:
        """``request_metrics``: with metrics.listener, every request is timed; ``request_log``:
        when request.log.threshold.ms would log anything."""
        self.handler: RequestHandler | None = None  # set by start_serving
        self.connection_rates: ConnectionRateLimits = connection_rates or _NoConnectionRates()
        self.config = config
        self.max_request_bytes = config.max_request_bytes
        self.failed_authentication_delay_ms = config.failed_authentication_delay_ms
        self.pool = MemoryPool(config.queued_max_request_bytes)
        self.quotas = ConnectionQuotas(config.max_connections, config.max_connections_per_ip,
                                       parse_ip_overrides(config.max_connections_per_ip_overrides))
        self.stage = bytearray(STAGE_SIZE)
        self.stage_view = memoryview(self.stage)
        self.tls_receive = memoryview(bytearray(TLS_RECEIVE_SIZE))
        self.connections: set[KafkaConnection] = set()
        self.request_metrics = request_metrics
        self.request_log = request_log
        self.file_sender: FileSender | None = (
            FileSender(max_stall_ms=config.connections_max_idle_ms) if file_sender.enabled() else None)
        # Per listener, as Kafka's successful- and failed-authentication-total.
        self.authentications: Counter[str] = Counter()
        self.authentication_failures: Counter[str] = Counter()
        self.servers: list[asyncio.base_events.Server] = []
        self._idle_task: asyncio.Task[None] | None = None

    def authenticated(self, listener: str) -> None:
        self.authentications[listener] += 1

    def authentication_failed(self, listener: str) -> None:
        self.authentication_failures[listener] += 1

    async def bind(self, host: str, port: int, listener: Listener = PLAINTEXT_LISTENER) -> int:
        """Open one listener without accepting yet; the bound port. Binding comes first at
        start-up, so a port in use stops the broker before it loads or writes anything.
        ``listener`` says how its connections are secured (TLS, SASL)."""
        loop = asyncio.get_running_loop()
        ctx = listener.ssl_context
        backlog = self.config.listen_backlog_size
        if ctx is not None and tls_transport.enabled():
            server = await loop.create_server(
                lambda: TlsTransport(ctx, lambda: KafkaConnection(self, listener), TLS_HANDSHAKE_TIMEOUT_S,
                                     self.tls_receive),
                host or None, port, reuse_address=True, backlog=backlog, start_serving=False)
        else:
            server = await loop.create_server(
                lambda: KafkaConnection(self, listener), host or None, port, reuse_address=True, backlog=backlog,
                start_serving=False, ssl=ctx, ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S if ctx is not None else None)
        # Accepted connections inherit the listening socket's buffer sizes (set before they
        # connect, so that the window the client is offered already reflects them), as Kafka
        # sets them on each accepted socket.
        for sock in server.sockets:
            if self.config.receive_buffer_bytes != -1:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.config.receive_buffer_bytes)
            if self.config.send_buffer_bytes != -1:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.config.send_buffer_bytes)
        self.servers.append(server)
        return server.sockets[0].getsockname()[1]

    async def start_serving(self, handler: RequestHandler) -> None:
        self.handler = handler
        for server in self.servers:
            await server.start_serving()
        self._idle_task = asyncio.get_running_loop().create_task(self._expire_idle())

    def close(self) -> None:
        for server in self.servers:
            server.close()
        if self._idle_task is not None:
            self._idle_task.cancel()
        for conn in list(self.connections):
            conn.close()
        if self.file_sender is not None:
            self.file_sender.close()

    async def _expire_idle(self) -> None:
        """Close connections with no traffic for ``connections.max.idle.ms`` and nothing pending."""
        idle_ms = self.config.connections_max_idle_ms
        every = min(max(idle_ms / 4000, 0.05), 30.0)
        while True:
            await asyncio.sleep(every)
            cutoff = time.monotonic() - idle_ms / 1000
            for conn in [c for c in self.connections if c.last_active < cutoff and c.idle()]:
                log.debug("closing %s: idle for more than connections.max.idle.ms (%d)", conn.peer, idle_ms)
                conn.close()
