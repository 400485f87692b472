"""The blocking transport of the client core: sockets, no event loop, no background thread.

For places where an event loop does not fit: Spark calls its data sources from plain threads
in short-lived Python workers. It sends what ``rivulet.client.core`` builds and reads answers
with it, so requests, error handling and backoff are the asyncio client's. A connection can
pipeline (``submit`` then ``receive``, in order), which lets a reader keep one Fetch in flight
while it decodes the previous answer.
"""

from __future__ import annotations

import logging
import socket
import ssl
import struct
import threading
import time
from typing import Callable, Generic, Iterable, Mapping, NoReturn, TypeVar, cast

from rivulet.client import core
from rivulet.client.config import parse_bootstrap, ssl_context
from rivulet.common.types import TopicPartition as TP
from rivulet.protocol import framing
from rivulet.client.connection import FIRST_ANSWER_MAX, AuthenticationFailed, describe_answer, not_kafka
from rivulet.protocol.errors import ErrorCode, ApiError
from rivulet.protocol.schema import Request, Struct
from rivulet.security.client_config import SaslCredentials, sasl_credentials
from rivulet.security.sasl import SaslError, client_exchange

log = logging.getLogger("rivulet.client.blocking")

_SIZE = struct.Struct(">i")
R = TypeVar("R", bound=Struct)  # a request's response message
_R_co = TypeVar("_R_co", bound=Struct, covariant=True)


class Pending(Generic[_R_co]):
    """A request submitted and not yet received: what ``receive`` reads the answer as."""

    __slots__ = ("correlation_id", "api_key", "version")

    def __init__(self, correlation_id: int, api_key: int, version: int) -> None:
        self.correlation_id, self.api_key, self.version = correlation_id, api_key, version


class BlockingConnection:
    """One blocking connection to one broker, versions negotiated with ApiVersions."""

    def __init__(self, host: str, port: int, client_id: str = "rivulet", timeout: float = 60.0,
                 sasl: SaslCredentials | None = None, ssl_context: ssl.SSLContext | None = None) -> None:
        self.host, self.port = host, port
        self.client_id = client_id
        self.timeout = timeout
        self.sock = socket.create_connection((host, port), timeout=min(timeout, 30.0))
        if ssl_context is not None:
            try:
                self.sock = ssl_context.wrap_socket(self.sock, server_hostname=host)
            except BaseException:
                self.sock.close()
                raise
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:  # big fetch responses: let the kernel buffer the one in flight while we decode
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        except OSError:
            pass
        self.sock.settimeout(timeout)
        self._cid = 0
        self._pending: list[Pending[Struct]] = []
        self._frame: bytearray | None = None  # receive(reuse_buffer=True)'s
        self.api_versions: dict[int, tuple[int, int]] = {}
        self._handshake()
        if sasl is not None:
            self._authenticate(sasl)

    def _handshake(self) -> None:
        try:
            resp = self.request(core.api_versions_request(), version=3)
        except ApiError:
            resp = None
        if resp is None or resp.error_code == ErrorCode.UNSUPPORTED_VERSION:
            resp = self.request(core.api_versions_request(None), version=0)
        self.api_versions = core.read_api_versions(resp, f"{self.host}:{self.port}")

    def _authenticate(self, sasl: SaslCredentials) -> None:
        steps = client_exchange(sasl.new_client())
        try:
            request = next(steps)
            while True:
                request = steps.send(self.request(request))
        except StopIteration:
            pass  # a worker's connection lives for a task, well within any SASL session
        except (SaslError, ConnectionError) as e:
            self.close()
            raise AuthenticationFailed(f"{self.host}:{self.port}: SASL authentication error: {e}") from None

    def version(self, api_key: int) -> int:
        return core.pick_version(api_key, self.api_versions.get(api_key))

    def submit(self, req: Request[R], version: int | None = None) -> Pending[R]:
        if version is None:
            version = self.version(req.API_KEY)
        self._cid = (self._cid + 1) & 0x7FFFFFFF
        self.sock.sendall(framing.encode_request(req, version, self._cid, self.client_id))
        pending: Pending[R] = Pending(self._cid, req.API_KEY, version)
        self._pending.append(pending)
        return pending

    def receive(self, pending: Pending[R], reuse_buffer: bool = False) -> R:
        """The answer to ``pending``, which must be the oldest request submitted (answers come
        in order). With ``reuse_buffer`` its frame is read
        into the connection's own buffer, which the next such call overwrites: whoever asks so
        must be done with the answer (a Fetch's records are views into the frame) by then. That
        spares a fresh, zeroed allocation the size of every (large) answer."""
        if not self._pending or self._pending[0] is not pending:
            raise RuntimeError("receive() must take the oldest request submitted")
        self._pending.pop(0)
        cid, api_key, version = pending.correlation_id, pending.api_key, pending.version
        head = self._read(4)
        size = _SIZE.unpack(head)[0]
        first = not self.api_versions  # the answer to ApiVersions: the peer's first
        if first and not 0 <= size <= FIRST_ANSWER_MAX:  # not Kafka (HTTP/ reads as 1.2 GB): say what
            self.close_with(not_kafka(self.host, self.port, describe_answer(bytes(head) + self._some())))
        frame = self._read_reusing(size) if reuse_buffer else self._read(size)
        try:
            got, body = framing.decode_response(frame, api_key, version)
        except Exception:
            if first:
                self.close_with(not_kafka(self.host, self.port, describe_answer(bytes(head) + bytes(frame[:60]))))
            raise
        if got != cid:
            what = f"the answer to {framing.api_name(api_key)} has correlation id {got}, expected {cid}"
            self.close_with(not_kafka(self.host, self.port, what) if first
                            else ConnectionError(f"{self.host}:{self.port}: {what}"))
        return cast(R, body)  # the answer's class is decoded from the request's api key

    def _some(self) -> bytes:
        """What the peer has sent so far, without waiting long (to say what it is)."""
        try:
            self.sock.settimeout(0.5)
            return self.sock.recv(60)
        except OSError:
            return b""

    def close_with(self, err: Exception) -> NoReturn:
        self.close()
        raise err

    def request(self, req: Request[R], version: int | None = None) -> R:
        return self.receive(self.submit(req, version))

    def _read(self, n: int) -> bytearray:
        buf = bytearray(n)
        self._fill(memoryview(buf))
        return buf

    def _read_reusing(self, n: int) -> memoryview:
        if self._frame is None or len(self._frame) < n:
            self._frame = bytearray(n + (n >> 3))  # a little room: the next answer may be larger
        view = memoryview(self._frame)[:n]
        self._fill(view)
        return view

    def _fill(self, view: memoryview) -> None:
        n = len(view)
        got = 0
        recv_into = self.sock.recv_into
        while got < n:
            k = recv_into(view[got:], n - got)
            if k == 0:
                raise ConnectionError(f"connection to {self.host}:{self.port} closed")
            got += k

    @property
    def busy(self) -> bool:
        return bool(self._pending)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


NET_ERRORS = (OSError, ConnectionError)


class BlockingClient:
    """Bootstrap, metadata and one connection per broker, with the core's calls on top."""

    def __init__(self, bootstrap: str, client_id: str = "rivulet", timeout: float = 60.0,
                 retry_timeout: float = 30.0, backoff: core.Backoff | None = None,
                 sasl: SaslCredentials | None = None, ssl_context: ssl.SSLContext | None = None) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        self.sasl = sasl
        self.ssl_context = ssl_context
        self.client_id = client_id
        self.timeout = timeout
        self.retry_timeout = retry_timeout
        self.backoff = backoff or core.Backoff()
        self.cluster = core.Cluster()
        self._conns: dict[int, BlockingConnection] = {}
        self._any: BlockingConnection | None = None

    # ------------------------------------------------------------ connections
    def conn(self, node: int) -> BlockingConnection:
        """The connection to broker ``node``, made on first use; called here and by the Spark source."""
        c = self._conns.get(node)
        if c is None:
            host, port = self.cluster.brokers[node]
            c = self._conns[node] = BlockingConnection(host, port, self.client_id, self.timeout, self.sasl,
                                                       self.ssl_context)
        return c

    def drop(self, node: int) -> None:
        """Called after a broken connection, so the next request reconnects."""
        c = self._conns.pop(node, None)
        if c is not None:
            c.close()

    def any_conn(self) -> BlockingConnection:
        """A connection to any broker (an idle one, else a bootstrap server), for send_any()."""
        for c in self._conns.values():
            if not c.busy:
                return c
        if self._any is not None:
            return self._any
        last: Exception | None = None
        for host, port in self.bootstrap:
            try:
                self._any = BlockingConnection(host, port, self.client_id, self.timeout, self.sasl,
                                               self.ssl_context)
                return self._any
            except AuthenticationFailed:
                raise
            except OSError as e:
                last = e
        raise ConnectionError(f"no bootstrap server reachable ({self.bootstrap}): {last}") from last

    def close(self) -> None:
        """Called by discard() and by the Spark source's driver when it is done."""
        for c in self._conns.values():
            c.close()
        self._conns.clear()
        if self._any is not None:
            self._any.close()
            self._any = None

    def send_any(self, req: Request[R]) -> R:
        """Send to any broker; on a broken connection, once more on fresh connections."""
        try:
            return self.any_conn().request(req)
        except NET_ERRORS:
            self.close()
            return self.any_conn().request(req)

    def _attempts(self) -> core.Attempts:
        return core.Attempts(self.backoff, time.monotonic() + self.retry_timeout)

    # ------------------------------------------------------------ metadata
    def metadata(self, topics: Iterable[str] | None = None, auto_create: bool = False) -> dict[str, int]:
        """Refresh brokers and leaders; {topic: partition count} of the topics found (internal
        ones only when named)."""
        names = None if topics is None else sorted(set(topics))
        self.cluster.update(self.send_any(core.metadata_request(names, auto_create)), names)
        return self.cluster.partition_counts(names)

    def leader(self, tp: tuple[str, int]) -> int:
        """The partition's leader, asking Metadata when unknown; for list_offsets and the Spark source."""
        node = self.cluster.leader(*tp)
        if node < 0:
            self.metadata([tp[0]])
            node = self.cluster.leader(*tp)
            if node < 0:
                raise ApiError(ErrorCode.LEADER_NOT_AVAILABLE, f"no leader for {tp[0]}-{tp[1]}")
        return node

    # ------------------------------------------------------------ offsets
    def list_offsets(self, specs: Mapping[tuple[str, int], int], isolation_level: int = 0) -> dict[TP, int]:
        """{partition: offset} for timestamps (EARLIEST, LATEST or ms); -1 when nothing
        matches a time. Under read_committed, LATEST is the last stable offset."""
        retry: core.LeaderRetry[int, core.ListedOffset] = core.LeaderRetry(
            {TP(*tp): ts for tp, ts in specs.items()}, "ListOffsets", self._attempts(), self.cluster)
        while True:
            by_node: dict[int, dict[TP, int]] = {}
            for tp, ts in retry.remaining.items():
                try:
                    by_node.setdefault(self.leader(tp), {})[tp] = ts
                except ApiError:
                    pass  # no leader yet: asked again next round
            for node, part in by_node.items():
                try:
                    resp = self.conn(node).request(core.list_offsets_request(part, isolation_level))
                except NET_ERRORS:
                    self.drop(node)
                    continue
                retry.on_results(core.read_list_offsets(resp))
            step = retry.next_round()
            if step is None:
                return {tp: found.offset for tp, found in retry.found.items()}
            time.sleep(step.delay)
            self.metadata({t for t, _ in retry.remaining})

    # ------------------------------------------------------------ coordinators and groups
    def coordinator(self, key: str, key_type: int = core.GROUP) -> int:
        """Node id of the group (0) or transaction (1) coordinator for ``key``."""
        lookup = core.CoordinatorLookup(key, key_type, self._attempts(), self.cluster)
        while True:
            # A broker not answering is raised at once: send_any has tried fresh connections.
            step = lookup.on_response(self.send_any(lookup.request()))
            if isinstance(step, core.Coordinator):
                return step.node_id
            time.sleep(step.delay)

    def send_to_coordinator(self, key: str, key_type: int, req: Request[R], error_of: Callable[[R], int]) -> R:
        """``req`` to ``key``'s coordinator, retried while ``error_of(answer)`` says so."""
        call = core.CoordinatorCall(key, key_type, req, error_of, self._attempts(), answer_when_out_of_time=False)
        while True:
            node = self.coordinator(key, key_type)
            step: R | core.Retry
            try:
                resp = self.conn(node).request(req)
            except NET_ERRORS:
                self.drop(node)
                step = call.on_unreachable()
            else:
                step = call.on_response(resp)
            if not isinstance(step, core.Retry):
                return step
            time.sleep(step.delay)

    def commit_offsets(self, group: str, offsets: Mapping[tuple[str, int], int], metadata: str = "") -> None:
        """A standalone commit (generation -1, no member), as a consumer with assign() does."""
        req = core.offset_commit_request(group, {tp: core.OffsetAndMetadata(o, metadata)
                                                 for tp, o in sorted(offsets.items())})
        res = core.read_offset_commit(self.send_to_coordinator(
            group, core.GROUP, req, lambda r: core.read_offset_commit(r).first_error()))
        res.raise_first(f"OffsetCommit for group {group!r}:")

    def committed(self, group: str, tps: Iterable[tuple[str, int]] | None, require_stable: bool = True
                  ) -> dict[TP, core.OffsetAndMetadata]:
        """What ``group`` has committed for ``tps`` (every partition it has committed when None)."""
        resp = self.send_to_coordinator(group, core.GROUP, core.offset_fetch_request(group, tps, require_stable),
                                        core.offset_fetch_error)
        res = core.read_offset_fetch(resp)
        res.raise_first(f"OffsetFetch for group {group!r}:")
        return {tp: om for tp, om in res.ok.items() if om is not None}


# ---------------------------------------------------------------- one client per process
# Spark's Python workers are reused across tasks (spark.python.worker.reuse) and run one task
# at a time; keeping a worker's connections saves a handshake per partition per micro-batch.
_POOL: dict[tuple[str, tuple[tuple[str, str], ...]], BlockingClient] = {}
_POOL_LOCK = threading.Lock()


def _pool_key(bootstrap: str, security: Mapping[str, str] | None) -> tuple[str, tuple[tuple[str, str], ...]]:
    return bootstrap, tuple(sorted((security or {}).items()))


def pooled(bootstrap: str, client_id: str = "rivulet", security: Mapping[str, str] | None = None) -> BlockingClient:
    """The process's client of ``bootstrap`` with ``security`` (client properties:
    security.protocol, sasl.*, ssl.*)."""
    key = _pool_key(bootstrap, security)
    with _POOL_LOCK:
        c = _POOL.get(key)
        if c is None:
            c = _POOL[key] = BlockingClient(bootstrap, client_id, sasl=sasl_credentials(security or {}),
                                            ssl_context=ssl_context(security or {}))
        return c


def discard(bootstrap: str, security: Mapping[str, str] | None = None) -> None:
    """Close and forget the pooled client (after a failure, so the next one starts afresh)."""
    with _POOL_LOCK:
        c = _POOL.pop(_pool_key(bootstrap, security), None)
    if c is not None:
        c.close()
