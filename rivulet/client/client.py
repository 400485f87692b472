"""The network side every client shares: bootstrap, connections per broker, cluster metadata.

Connections are kept per (broker, purpose): "data" for produce/fetch, "group" for the group
coordinator. A broker answers one connection's requests in order, so a JoinGroup that waits
for the rebalance (or a Fetch long-poll) on the data connection would hold up everything
queued behind it; separate connections keep heartbeats and fetches independent.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from typing import Awaitable, Callable, Iterable, TypeVar

from rivulet.client import core
from rivulet.client import errors as E
from rivulet.client.errors import KafkaError
from rivulet.client.config import CommonConfig, parse_bootstrap, ssl_context
from rivulet.client.connection import (AuthenticationFailed, BrokerConnection, ConnectionClosed, NotKafkaBroker,
                                       RequestTimedOut)
from rivulet.client.core import Cluster, PartitionMeta, TopicMeta  # noqa: F401  (re-exported)
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages import metadata_response as mr
from rivulet.protocol.schema import Request, Struct
from rivulet.security.client_config import sasl_credentials

log = logging.getLogger("rivulet.client")
R = TypeVar("R", bound=Struct)  # a request's response message
T = TypeVar("T")
# Broker connection failures, on a logger of their own so that an application can route them.
broker_log = logging.getLogger("rivulet.client.brokers")

# What a request over this transport fails with when the connection, not the broker, failed.
NET_ERRORS = (ConnectionError, OSError, asyncio.TimeoutError, RequestTimedOut)


def _log_broker_error(err: KafkaError) -> None:
    broker_log.error("%s", err.str())


def now() -> float:
    return time.monotonic()


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait for ``event`` up to ``timeout`` seconds; True if it was set.

    asyncio.timeout rather than wait_for: on 3.11, wait_for swallows a cancellation that
    arrives as the awaited event fires, and a loop built on it then never stops.
    """
    if event.is_set():
        return True
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
        return True
    except TimeoutError:
        return False


async def cancel_and_wait(*tasks: asyncio.Task | None) -> None:
    """Cancel the tasks and wait until they have stopped, whatever they end with."""
    for task in tasks:
        if task is not None:
            task.cancel()
    for task in tasks:
        if task is not None:
            try:
                await task
            except BaseException:
                pass


async def wait_future(fut: Awaitable[T], timeout: float | None) -> T:
    """Await ``fut`` up to ``timeout`` seconds (TimeoutError), with the same care as wait_event."""
    async with asyncio.timeout(timeout):
        return await fut


class KafkaClient:
    """Connections and metadata for one producer, consumer or admin client."""

    def __init__(self, conf: CommonConfig, on_broker_error: Callable[[KafkaError], None] | None = None, *,
                 all_topics: Callable[[], bool] = lambda: False) -> None:
        """``all_topics`` says whether the metadata of every topic is wanted (a consumer's
        pattern subscription), else only of ``wanted_topics``."""
        self.conf = conf
        self.bootstrap = parse_bootstrap(conf["bootstrap.servers"])
        self.client_id: str = conf["client.id"]
        self.request_timeout_ms: int = conf["request.timeout.ms"]
        self.retry_backoff = conf["retry.backoff.ms"] / 1000
        self.backoff = core.Backoff(conf["retry.backoff.ms"], conf["retry.backoff.max.ms"])
        self.connect_timeout = conf["socket.connection.setup.timeout.ms"] / 1000
        self.metadata_max_age = conf["metadata.max.age.ms"] / 1000
        self.allow_auto_create = bool(conf.get("allow.auto.create.topics"))
        self.ssl_context = ssl_context(conf)
        self.sasl = sasl_credentials(conf)
        self.cluster = Cluster()
        self._conns: dict[tuple[int, str], BrokerConnection] = {}
        self._connecting: dict[tuple[int, str], asyncio.Future] = {}
        self._failed_at: dict[int, float] = {}
        self._bootstrap_conn: BrokerConnection | None = None
        # Topics whose metadata is wanted, unless all_topics() says all of them.
        self.wanted_topics: set[str] = set()
        self._all_topics = all_topics
        self._md_task: asyncio.Task | None = None
        self._md_waiters: list[asyncio.Future] = []
        self._md_refresh_needed = asyncio.Event()
        self.closed = False
        # Told, as librdkafka tells error_cb, when a broker that was reachable stops accepting
        # connections (_TRANSPORT) and when then no known broker is reachable (_ALL_BROKERS_DOWN).
        # Without one they are logged as errors, as librdkafka logs them without an error_cb.
        self.on_broker_error: Callable[[KafkaError], None] = on_broker_error or _log_broker_error
        self._all_down_reported = False

    # ------------------------------------------------------------ connections
    def address(self, node_id: int) -> tuple[str, int] | None:
        """Where a broker (or, negative, a bootstrap server) listens; for connection()."""
        if node_id in self.cluster.brokers:
            return self.cluster.brokers[node_id]
        if node_id < 0 and -node_id - 1 < len(self.bootstrap):
            return self.bootstrap[-node_id - 1]
        return None

    async def connection(self, node_id: int, kind: str = "data") -> BrokerConnection:
        """The connection of one kind to a broker, made on first use; called by send(),
        any_connection() and the share fetcher."""
        key = (node_id, kind)
        c = self._conns.get(key)
        if c is not None and not c.closed:
            if not (c.session_ending() and c.in_flight == 0):
                return c
            await c.close()  # its SASL session is ending: a fresh connection re-authenticates
        pending = self._connecting.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        addr = self.address(node_id)
        if addr is None:
            raise ConnectionClosed(f"broker {node_id} is not known")
        fut = asyncio.get_running_loop().create_future()
        self._connecting[key] = fut
        try:
            conn = BrokerConnection(addr[0], addr[1], self.client_id, self.request_timeout_ms, node_id,
                                    ssl_context=self.ssl_context, sasl=self.sasl, probe_silence=True)
            await conn.connect(self.connect_timeout)
            self._conns[key] = conn
            self._failed_at.pop(node_id, None)
            self._all_down_reported = False
            fut.set_result(conn)
            return conn
        except BaseException as e:
            first = node_id not in self._failed_at
            self._failed_at[node_id] = now()
            if isinstance(e, AuthenticationFailed):
                self.on_broker_error(E.local("_AUTHENTICATION", str(e)))
            elif first and isinstance(e, Exception):
                self._report_down(node_id, addr, e)
            fut.set_exception(e if isinstance(e, Exception) else ConnectionClosed("cancelled"))
            fut.exception()
            if isinstance(e, OSError) and not isinstance(e, ConnectionClosed):
                raise ConnectionClosed(f"cannot connect to {addr[0]}:{addr[1]}: {e}") from e
            raise
        finally:
            self._connecting.pop(key, None)

    def _report_down(self, node_id: int, addr: tuple[str, int], exc: Exception) -> None:
        name = f"{addr[0]}:{addr[1]}/{'bootstrap' if node_id < 0 else node_id}"
        self.on_broker_error(E.local("_TRANSPORT", f"{name}: Connect to {addr[0]}:{addr[1]} failed: {exc}"))
        known = list(self.cluster.brokers) or [-i - 1 for i in range(len(self.bootstrap))]
        down = sum(1 for n in known if n in self._failed_at and not self._has_open(n))
        if down == len(known) and not self._all_down_reported:
            self._all_down_reported = True
            self.on_broker_error(E.local("_ALL_BROKERS_DOWN", f"{down}/{len(known)} brokers are down"))

    def _has_open(self, node_id: int) -> bool:
        return any(n == node_id and not c.closed for (n, _kind), c in self._conns.items())

    def open_connection(self, node_id: int, kind: str = "data") -> BrokerConnection | None:
        """The broker's connection if it is open now (no connecting)."""
        c = self._conns.get((node_id, kind))
        return c if c is not None and not c.closed else None

    async def send(self, node_id: int, request: Request[R], *, kind: str = "data", timeout: float | None = None,
                   max_version: int | None = None) -> R:
        """Called by every part that knows the broker to ask (leaders, coordinators)."""
        conn = await self.connection(node_id, kind)
        version = conn.version_for(request.API_KEY, max_version)
        return await conn.send(request, version, timeout=timeout)

    async def send_without_response(self, node_id: int, request: Request[Struct]) -> None:
        """A request the broker does not answer (a Produce with acks=0)."""
        conn = await self.connection(node_id)
        await conn.send_without_response(request, conn.version_for(request.API_KEY))

    def api_version(self, node_id: int, api_key: int) -> tuple[int, int] | None:
        """The broker's supported versions of an API, from any open connection to it."""
        for (nid, _), c in self._conns.items():
            if nid == node_id and c.api_versions:
                return c.api_versions.get(api_key)
        return None

    def candidate_nodes(self) -> list[int]:
        """Brokers to try for a request any of them can answer: connected first, then others."""
        known = list(self.cluster.brokers)
        random.shuffle(known)
        connected = [n for n in known if any(k[0] == n and not c.closed for k, c in self._conns.items())]
        rest = [n for n in known if n not in connected]
        rest.sort(key=lambda n: self._failed_at.get(n, 0.0))
        boot = [-(i + 1) for i in range(len(self.bootstrap))]
        return connected + rest + boot

    async def send_any(self, request: Request[R], *, timeout: float | None = None, max_version: int | None = None) -> R:
        """Send to whichever broker answers; raises the last connection error if none does."""
        last: BaseException | None = None
        for node in self.candidate_nodes():
            try:
                return await self.send(node, request, timeout=timeout, max_version=max_version)
            except (ConnectionError, OSError, asyncio.TimeoutError) as e:
                last = e
                continue
        if isinstance(last, (AuthenticationFailed, NotKafkaBroker)):  # retrying elsewhere does not help
            raise last
        raise ConnectionClosed(f"no broker reachable: {last}")

    def _attempts(self, deadline: float | None) -> core.Attempts:
        return core.Attempts(self.backoff, deadline if deadline is not None else now() + self.request_timeout_ms / 1000)

    async def coordinator(self, key: str, key_type: int = core.GROUP, deadline: float | None = None
                          ) -> core.Coordinator:
        """The coordinator of ``key``, asking again (with backoff) while none is available; called
        by the consumer's coordinator, the transaction manager and the admin client."""
        lookup = core.CoordinatorLookup(key, key_type, self._attempts(deadline), self.cluster)
        while True:
            try:
                resp = await self.send_any(lookup.request())
            except (ConnectionError, OSError, asyncio.TimeoutError) as e:
                step = lookup.on_unreachable(e)
            else:
                step = lookup.on_response(resp)
            if isinstance(step, core.Coordinator):
                return step
            await asyncio.sleep(step.delay)

    async def send_to_coordinator(self, key: str, key_type: int, request: Request[R], error_of: Callable[[R], int],
                                  deadline: float | None = None) -> R:
        """Send ``request`` to ``key``'s coordinator; while ``error_of(answer)`` says to retry,
        retry (finding the coordinator again when it moved). Other errors, partition errors
        about leaders among them, are returned with the answer for the caller to read."""
        call = core.CoordinatorCall(key, key_type, request, error_of, self._attempts(deadline))
        while True:
            node = (await self.coordinator(key, key_type, call.attempts.deadline)).node_id
            step: R | core.Retry
            try:
                resp = await self.send(node, request)
            except (ConnectionError, OSError, asyncio.TimeoutError):
                step = call.on_unreachable()
            else:
                step = call.on_response(resp)
            if not isinstance(step, core.Retry):
                return step
            await asyncio.sleep(step.delay)

    async def topic_names(self, topic_ids: Iterable[uuid.UUID], subscription: Iterable[str]) -> dict[uuid.UUID, str]:
        """Topic names for the ids a KIP-848 heartbeat assigned (called by the consumer's and the
        share consumer's memberships); metadata is fetched when an id is not known yet."""
        def known() -> dict[uuid.UUID, str]:
            return {tm.topic_id: name for name, tm in self.cluster.topics.items() if tm.topic_id is not None}
        names = known()
        if any(t not in names for t in topic_ids):
            try:
                await self.fetch_metadata(set(subscription) | self.wanted_topics, allow_auto_create=False)
            except NET_ERRORS as e:
                log.debug("metadata for assigned topic ids failed: %s", e)
            names = known()
        return names

    async def any_connection(self) -> BrokerConnection:
        """Called by the producer for InitProducerId, which any broker answers."""
        last: BaseException | None = None
        for node in self.candidate_nodes():
            try:
                return await self.connection(node)
            except (ConnectionError, OSError, asyncio.TimeoutError) as e:
                last = e
        if isinstance(last, NotKafkaBroker):
            raise last
        raise ConnectionClosed(f"no broker reachable: {last}")

    def close_connection(self, node_id: int, kind: str | None = None) -> None:
        """Drop a broker's connections (of one kind, or all), so the next request reconnects."""
        for key in [k for k in self._conns if k[0] == node_id and (kind is None or k[1] == kind)]:
            c = self._conns.pop(key)
            c._fail_all(ConnectionClosed("closed by the client"))

    # ------------------------------------------------------------ metadata
    async def fetch_metadata(self, topics: Iterable[str] | None, allow_auto_create: bool | None = None
                             ) -> mr.MetadataResponse:
        """One Metadata request (None = all topics); updates the cluster view."""
        names = None if topics is None else sorted(set(topics))
        req = core.metadata_request(names, self.allow_auto_create if allow_auto_create is None else allow_auto_create)
        resp = await self.send_any(req)
        self.cluster.update(resp, names)
        self._wake_md_waiters()
        return resp

    def _wake_md_waiters(self) -> None:
        waiters, self._md_waiters = self._md_waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    def want_topics(self, topics: Iterable[str]) -> None:
        """Track topics' metadata from the next refresh on (the caller asks for one if it must:
        it may not be on the loop's thread)."""
        self.wanted_topics |= set(topics)

    def add_topics(self, topics: Iterable[str]) -> bool:
        """Track topics' metadata; True (and a refresh requested) if any was new."""
        new = set(topics) - self.wanted_topics
        if new:
            self.wanted_topics |= new
            self.request_update()
        return bool(new)

    def set_topics(self, topics: Iterable[str]) -> None:
        """Called by the share consumer: the topics whose metadata is wanted."""
        topics = set(topics)
        if topics != self.wanted_topics:
            self.wanted_topics = topics
            self.request_update()

    def request_update(self) -> None:
        """Called when metadata is stale (a leader moved, a topic is new): refresh soon."""
        self._md_refresh_needed.set()
        if self._md_task is None and not self.closed:
            self._md_task = asyncio.get_running_loop().create_task(self._metadata_loop())

    async def wait_update(self, timeout: float | None = None) -> None:
        """Ask for fresh metadata and wait until the next response (or the timeout)."""
        fut = asyncio.get_running_loop().create_future()
        self._md_waiters.append(fut)
        self.request_update()
        try:
            await wait_future(fut, timeout)
        except TimeoutError:
            pass

    def start_metadata_refresh(self) -> None:
        """Called by the producer and share consumer when they start."""
        if self._md_task is None and not self.closed:
            self._md_task = asyncio.get_running_loop().create_task(self._metadata_loop())

    async def _metadata_loop(self) -> None:
        failures = 0   # refreshes that failed in a row
        pending = 0    # refreshes in a row that left wanted topics without leaders
        while not self.closed:
            await wait_event(self._md_refresh_needed, self.metadata_max_age)
            self._md_refresh_needed.clear()
            if self.closed:
                return
            try:
                if self._all_topics():
                    await self.fetch_metadata(None)
                else:
                    await self.fetch_metadata(self.wanted_topics)
                failures = 0
                # Topics that do not exist yet (or have no leader) are asked for again soon.
                if any(self._needs_retry(t) for t in self.wanted_topics):
                    await asyncio.sleep(self.backoff.delay(pending))
                    pending += 1
                    self._md_refresh_needed.set()
                else:
                    pending = 0
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.debug("metadata refresh failed: %s", e)
                await asyncio.sleep(self.backoff.delay(failures))
                failures += 1
                self._md_refresh_needed.set()

    def _needs_retry(self, topic: str) -> bool:
        t = self.cluster.topics.get(topic)
        if t is None:
            return True
        if t.error in (ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
            return True  # may be created any moment, by us or by someone else
        return t.error == 0 and len(t.available) < len(t.partitions)

    async def close(self) -> None:
        """Called by each client's close()."""
        self.closed = True
        await cancel_and_wait(self._md_task)
        self._md_task = None
        self._wake_md_waiters()
        conns = list(self._conns.values())
        self._conns.clear()
        for c in conns:
            await c.close()
