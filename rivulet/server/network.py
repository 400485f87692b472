"""The socket layer: Kafka frames in, responses out, one request at a time per connection.

As Kafka's SocketServer mutes a channel while a request of its is in flight, a connection
starts its next request only once every earlier one has been answered (handed to the
transport): a request that arrives sooner waits, unparsed, and the socket is not read
meanwhile. So a client that pipelines an OffsetCommit and an OffsetFetch sees its commit.
One exception: a Produce behind Produces starts at once, as the log appends a producer's
requests in the order they start (``ReplicaManager.append_records``); their answers still go
out in request order, each in a slot of a FIFO. Handlers answer synchronously, return a
Future for work that completes later (long-poll fetches, acks=all produces, group joins), or
NO_RESPONSE (acks=0 produces; CLOSE_CONNECTION when one failed, as Kafka closes then).

A malformed frame closes only its own connection; every other connection carries on.
Memory follows what has arrived, not what a size prefix announces: small frames are parsed
out of the server's shared read buffer, and a frame split across reads grows a buffer of its
own as its bytes come in (``socket_server.py`` has the limits and the memory pool).

A client over its quota is answered at once and then muted (KIP-219): ``throttle`` stops
reading from its socket for the throttle time, and requests it had already sent wait,
unparsed, until the time is up.

On a SASL listener the connection has an ``Authenticator`` (``authentication.SaslSession``):
until it has authenticated, the authenticator answers the requests it intercepts and the
rest never reach the handler; a failure is answered and then the connection closes.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import struct
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from rivulet.protocol import framing
from rivulet.protocol.accel import speedups
from rivulet.protocol.errors import ErrorCode, ProtocolDecodeError
from rivulet.protocol.messages.produce_request import ProduceRequest
from rivulet.protocol.schema import Part, Struct
from rivulet.common.cluster import NodeEndpoint
from rivulet.common.logs import RateLimitFilter
from rivulet.common.promise import Promise
from rivulet.security.principal import KafkaPrincipal
from rivulet.security.sasl import AuthenticationFailed
from rivulet.security.ssl_principal import NoMatchingRule, SslPrincipalMapper, principal_from_dn
from rivulet.security.tls import peer_dn
from rivulet.server import file_sender
from rivulet.server.answer import CLOSE_CONNECTION, NO_RESPONSE, Answer
from rivulet.server.file_sender import FileSender, Send
from rivulet.server.metrics.requests import RequestMetrics, request_name
from rivulet.server.tls_transport import TlsTransport

log = logging.getLogger(__name__)
# Hostile or broken clients can repeat the same fault endlessly; each kind is logged once
# per interval with a count of what was held back.
log.addFilter(RateLimitFilter())


class RequestHandler(Protocol):
    """What a connection hands decoded requests to (``KafkaApis``)."""

    def handle(self, header: framing.RequestHeader, body: Struct, conn: KafkaConnection) -> Answer: ...

    def api_versions_error(self, code: ErrorCode) -> Struct: ...


class Authenticator(Protocol):
    """A SASL listener's per-connection authentication state (``authentication.SaslSession``)."""

    principal: KafkaPrincipal | None
    raw_tokens: bool  # after a v0 SaslHandshake, tokens come as raw frames

    def receive_limit(self) -> int | None:
        """The largest frame accepted before authentication (``sasl.server.max.receive.size``);
        None once authenticated."""
        ...

    def intercepts(self, api_key: int) -> bool: ...

    def handle(self, api_key: int, api_version: int, body: Struct) -> Struct:
        """The answer; raises ``AuthenticationFailed`` when the connection must close."""
        ...

    def raw_token(self, token: bytes) -> bytes: ...

    def session_expired(self) -> bool: ...


def _resolve(fut: asyncio.Future[Struct], value: Struct) -> None:
    if not fut.done():
        fut.set_result(value)


@dataclass(frozen=True, slots=True)
class Listener:
    """One named listener: its security protocol, the TLS context of SSL and SASL_SSL ones,
    each connection's SASL state on SASL ones, and where clients are told to find this broker
    on it."""

    name: str
    security_protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    principal_mapper: SslPrincipalMapper | None = None
    advertised: NodeEndpoint | None = None
    authenticator: Callable[[tuple[str, int]], Authenticator] | None = None


PLAINTEXT_LISTENER = Listener("PLAINTEXT")


class RequestMemory(Protocol):
    """``queued.max.request.bytes`` (``socket_server.MemoryPool``)."""

    def exhausted(self) -> bool: ...

    def try_reserve(self, conn: KafkaConnection, n: int) -> bool: ...

    def queued(self, conn: KafkaConnection) -> bool: ...

    def release(self, n: int) -> None: ...

    def wait(self, conn: KafkaConnection) -> None: ...

    def forget(self, conn: KafkaConnection) -> None: ...


class ConnectionLimits(Protocol):
    """``max.connections`` and ``max.connections.per.ip`` (``socket_server.ConnectionQuotas``)."""

    def refusal(self, ip: str) -> str | None: ...

    def closed(self, ip: str) -> None: ...


class ConnectionRateLimits(Protocol):
    """``connection_creation_rate`` per IP (``quotas.ConnectionRateQuotas``)."""

    def throttle_ms(self, ip: str) -> int: ...


class RequestLogger(Protocol):
    """The slow-request log (``request_log.RequestLog``): told of each answered request with
    the same clock readings as ``RequestMetrics.record``."""

    def request_completed(self, conn: KafkaConnection, header: framing.RequestHeader, request: str,
                          received: float, dispatched: float, handled: float, completed: float,
                          write_start: float, sent: float, response: object) -> None: ...


class ConnectionHost(Protocol):
    """What a connection shares with the other connections of its listener
    (``socket_server.SocketServer``)."""

    handler: RequestHandler | None
    max_request_bytes: int
    pool: RequestMemory
    quotas: ConnectionLimits
    connection_rates: ConnectionRateLimits
    stage: bytearray
    stage_view: memoryview
    connections: set[KafkaConnection]
    request_metrics: RequestMetrics | None  # None unless metrics.listener is set
    request_log: RequestLogger | None  # None unless it would log something
    file_sender: FileSender | None  # None: record sets are read and written on the loop
    failed_authentication_delay_ms: int  # connection.failed.authentication.delay.ms

    def authentication_failed(self, listener: str) -> None: ...

    def authenticated(self, listener: str) -> None: ...

_SIZE = struct.Struct(">i")
_API_KEY = struct.Struct(">h")
_PRODUCE = ProduceRequest.API_KEY
# Stop reading from a client that has this many requests waiting for answers (only a
# producer's pipelined Produce requests are ever in flight together).
MAX_IN_FLIGHT = 256
# A frame that does not arrive in one read gets a buffer of its own, at first this large (or
# the frame's size if smaller), grown FRAME_GROWTH-fold as bytes arrive: what a size prefix
# alone announces is never allocated up front past this. Through the 100 KiB socket buffers a
# 1 MiB produce request arrives in many small reads; growing from 64 KiB by doubling copied
# it about twice over, and halved the broker's 1 KiB produce rate. The first buffer is also
# FRAME_GROWTH times what the first read brought: a 1 MB Produce's first read brings 80-190
# KiB, so at 4x (and a first buffer of twice that read) nearly every such frame was grown once,
# copying 256-512 KiB. The buffers are unfilled, so the pages a client makes the broker
# touch are still only those it sent.
FIRST_FRAME_CHUNK = 256 * 1024
FRAME_GROWTH = 16
# A frame's buffer is parsed only once the socket reads have filled every byte of it, so
# bytearray(n)'s zero fill is a pass over memory for nothing: the C helper leaves it out.
_speedups = speedups()
_frame_buffer = _speedups.unfilled_bytearray if _speedups is not None else bytearray


class _Slot:
    __slots__ = ("header", "response", "ready", "reserved", "close_after", "request", "received", "dispatched",
                 "handled", "completed")

    def __init__(self, header: framing.RequestHeader, reserved: int, received: float = 0.0) -> None:
        self.header = header
        self.close_after = False  # a failed authentication: close once this answer is written
        self.response: Any = None  # the handler's answer: a response, or NO_RESPONSE
        self.ready = False
        self.reserved = reserved  # pool bytes this request holds until it is answered
        # With request metrics: the request's name for them, and when it was read, handed to
        # its handler, back from it, and answered (time.perf_counter).
        self.request: str | None = None
        self.received = received
        self.dispatched = self.handled = self.completed = 0.0


class KafkaConnection(asyncio.BufferedProtocol):
    """One client connection."""

    def __init__(self, server: ConnectionHost, listener: Listener = PLAINTEXT_LISTENER) -> None:
        assert server.handler is not None, "connections are accepted only once the server serves"
        self.server = server
        self.listener = listener
        self.apis: RequestHandler = server.handler
        self.max_request_bytes = server.max_request_bytes
        self.transport: asyncio.Transport | None = None
        # Bytes read but not yet parsed: a size prefix split across reads, the requests that
        # followed one whose answer throttled this connection, or those waiting for their turn.
        self.held = b""
        # The frame at the start of ``held`` waits for the requests before it to be answered,
        # and ``_turn`` is the callback that starts it once they are.
        self.awaiting_turn = False
        self._turn: asyncio.Handle | None = None
        self.frame: bytearray | None = None  # a frame still arriving
        self.frame_size = 0
        self.filled = 0
        # Pool bytes granted to the frame at the start of ``held`` while it waited for memory.
        self.granted = 0
        self.pending: deque[_Slot] = deque()
        self.closed = False
        self.counted = False
        self.peer: tuple[str, int] = ("?", 0)
        self.principal = KafkaPrincipal.ANONYMOUS  # until the listener authenticates the connection
        # What the client says it is (ApiVersions v3+), "unknown" until then, as Kafka's ClientInformation.
        self.client_software_name = "unknown"
        self.client_software_version = "unknown"
        self.close_listeners: list[Callable[[KafkaConnection], None]] = []  # told once, when it closes
        self._new_authenticator = listener.authenticator
        self.authenticator: Authenticator | None = None
        self.request_size = 0  # the frame size of the request being dispatched
        self._throttle: asyncio.TimerHandle | None = None
        self._throttled_until = 0.0
        self.last_active = time.monotonic()
        self._reading_paused = False
        self._writing_paused = False
        self._sending: Send | None = None  # an answer a sender thread is writing
        self.tls: TlsTransport | None = None  # the broker's own TLS layer, on TLS listeners

    # ------------------------------------------------------------ asyncio callbacks
    @property
    def user(self) -> str:
        """The principal's name, as quotas key users."""
        return self.principal.name

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if isinstance(transport, TlsTransport):
            self.tls = transport
        self.peer = transport.get_extra_info("peername") or ("?", 0)
        throttle_ms = self.server.connection_rates.throttle_ms(self.peer[0])
        if throttle_ms > 0:
            # As Kafka: over its IP's connection rate, a connection is neither counted nor
            # served, and is closed once the throttle time has passed.
            log.debug("closing %s in %d ms: over its IP's connection_creation_rate", self.peer, throttle_ms)
            self.closed = True
            transport.pause_reading()  # type: ignore[attr-defined]
            asyncio.get_running_loop().call_later(throttle_ms / 1000, transport.close)
            return
        refusal = self.server.quotas.refusal(self.peer[0])
        if refusal is not None:
            log.warning("refusing a connection from %s: %s", self.peer, refusal,
                        extra={"kind": "refused connection"})
            self.closed = True
            transport.close()
            return
        if self.listener.security_protocol == "SSL" and not self._authenticate_tls(transport):
            return
        self.counted = True
        self.server.connections.add(self)
        if self._new_authenticator is not None:
            self.authenticator = self._new_authenticator(self.peer)
        self.update_reading()

    def _authenticate_tls(self, transport: asyncio.BaseTransport) -> bool:
        """An SSL listener's principal: the client certificate's subject, mapped by
        ``ssl.principal.mapping.rules`` (ANONYMOUS without one). The handshake is done: asyncio
        makes the connection only after it succeeds."""
        dn = peer_dn(transport.get_extra_info("ssl_object"))
        try:
            self.principal = principal_from_dn(dn, self.listener.principal_mapper or SslPrincipalMapper())
        except NoMatchingRule as e:
            self.server.authentication_failed(self.listener.name)
            log.warning("Failed authentication with %s (%s)", self.peer, e, extra={"kind": "failed authentication"})
            self.closed = True
            transport.close()
            return False
        self.server.authenticated(self.listener.name)
        return True

    @property
    def sends_files(self) -> bool:
        """Whether answers may carry FileRegions: over TLS only where a sender thread can
        encrypt them (the broker's own TLS layer, not asyncio's)."""
        return self.server.file_sender is not None and (self.listener.ssl_context is None or self.tls is not None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._release()

    def pause_writing(self) -> None:
        self._writing_paused = True
        self.update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self.update_reading()

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.frame is not None:
            return memoryview(self.frame)[self.filled:]
        n = len(self.held)
        if n:
            self.server.stage[:n] = self.held
        return self.server.stage_view[n:]

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = time.monotonic()
        if self.frame is not None:
            self._frame_bytes(nbytes)
        else:
            self._stage_bytes(len(self.held) + nbytes)
        self.update_reading()

    def _frame_bytes(self, nbytes: int) -> None:
        frame = self.frame
        assert frame is not None
        self.filled += nbytes
        if self.filled < len(frame):
            return
        if self.filled < self.frame_size:
            # Full but incomplete: grow with what has arrived, never past the announced size.
            # A new buffer, as the transport may still hold a view of the old one.
            grown = _frame_buffer(min(self.frame_size, FRAME_GROWTH * len(frame)))
            grown[:self.filled] = frame
            self.frame = grown
            return
        # The pool bytes reserved for the buffer pass to the request.
        self.frame, self.frame_size, self.filled = None, 0, 0
        self._on_frame(frame)

    def _stage_bytes(self, end: int) -> None:
        """Parse the frames in the shared read buffer's first ``end`` bytes; keep the rest."""
        stage, view = self.server.stage, self.server.stage_view
        pos = 0
        self.held = b""
        self.awaiting_turn = False
        while not self.closed:
            avail = end - pos
            if avail < 4 or self._throttle is not None:
                self.held = bytes(view[pos:end])
                return
            if self.pending and not self._may_start(pos, avail):
                # Owned bytes: the shared read buffer serves other connections meanwhile.
                self.held = bytes(view[pos:end])
                self.awaiting_turn = True
                return
            size = _SIZE.unpack_from(stage, pos)[0]
            sasl_limit = self.authenticator.receive_limit() if self.authenticator is not None else None
            if sasl_limit is not None and size > sasl_limit:
                log.warning("closing %s: a frame of %d bytes before authentication exceeds "
                            "sasl.server.max.receive.size (%d)", self.peer, size, sasl_limit,
                            extra={"kind": "oversized request"})
                self.close()
                return
            if size < 0 or size > self.max_request_bytes:
                log.warning("closing %s: request of %d bytes exceeds socket.request.max.bytes (%d)",
                            self.peer, size, self.max_request_bytes, extra={"kind": "oversized request"})
                self.close()
                return
            if not self._admit(size):
                # Nothing more is read until the pool grants the frame its memory.
                self.held = bytes(view[pos:end])
                return
            if avail - 4 >= size:
                frame = bytearray(view[pos + 4:pos + 4 + size])
                pos += 4 + size
                self._on_frame(frame)
                continue
            have = avail - 4
            # As a full buffer grows: FRAME_GROWTH times what has arrived, never the size alone.
            frame = _frame_buffer(min(size, max(FIRST_FRAME_CHUNK, FRAME_GROWTH * have)))
            frame[:have] = view[pos + 4:end]
            self.frame, self.frame_size, self.filled = frame, size, have
            return

    def _may_start(self, pos: int, avail: int) -> bool:
        """Whether the frame at ``pos`` of the shared read buffer may start while earlier
        requests still wait for their answers: only a Produce behind Produces. Requests start
        in order and anything else starts only on an empty FIFO, so the FIFO holds either
        Produces alone or one other request, and its last slot tells which."""
        if avail < 6 or (self.authenticator is not None and self.authenticator.raw_tokens):
            return False
        return self.pending[-1].header.api_key == _PRODUCE \
            and _API_KEY.unpack_from(self.server.stage, pos + 4)[0] == _PRODUCE

    def _take_turn(self) -> None:
        """Every earlier request is answered: start the one that waited, on a callback of its
        own, as ``_parse_held`` needs the shared read buffer."""
        self._turn = None
        self.awaiting_turn = False
        self._parse_held()

    def _admit(self, size: int) -> bool:
        """Reserve pool memory for a frame of ``size`` bytes about to be read."""
        if self.granted:
            assert self.granted == size, "a grant is for the frame that waited"
            self.granted = 0
            return True
        return self.server.pool.try_reserve(self, size)

    def memory_granted(self, size: int) -> None:
        """The pool reserved ``size`` bytes for the frame this connection holds: read it, once
        the loop is done with whatever connection is using the shared read buffer now."""
        self.granted = size
        asyncio.get_running_loop().call_soon(self._parse_held)

    def _parse_held(self) -> None:
        """Parse what was read and held back (while muted, or waiting for memory); the loop
        runs one callback at a time, so the shared read buffer is free."""
        if self.closed:
            return
        if len(self.held) >= 4 and self.frame is None and self._throttle is None:
            held = self.held
            self.server.stage[:len(held)] = held
            self._stage_bytes(len(held))
        self.update_reading()

    # ------------------------------------------------------------ request handling
    def _on_frame(self, frame: bytearray) -> None:
        """A whole request, for which ``len(frame)`` pool bytes are reserved until it is answered."""
        size = len(frame)
        timed = self.server.request_metrics is not None or self.server.request_log is not None
        received = time.perf_counter() if timed else 0.0
        auth = self.authenticator
        if auth is not None and auth.raw_tokens:
            self._raw_token(auth, frame)
            return
        try:
            header, body_pos = framing.decode_request_header(frame)
        except framing.UnsupportedApi as e:
            if e.api_key == framing.API_VERSIONS_KEY:
                # A v0-format error reply lets an older or newer client discover our versions.
                hdr = framing.RequestHeader(e.api_key, 0, e.correlation_id)
                slot = _Slot(hdr, size)
                self.pending.append(slot)
                self._complete(slot, self.apis.api_versions_error(ErrorCode.UNSUPPORTED_VERSION))
                return
            self.server.pool.release(size)
            log.warning("closing %s: %s", self.peer, e, extra={"kind": "unsupported API"})
            self.close()
            return
        except ProtocolDecodeError as e:
            self.server.pool.release(size)
            log.warning("closing %s: bad request header: %s", self.peer, e, extra={"kind": "bad request header"})
            self.close()
            return
        slot = _Slot(header, size, received)
        self.pending.append(slot)
        try:
            body = framing.request_class(header.api_key).decode(frame, header.api_version, body_pos)
            self.request_size = size
            if timed:
                slot.request = request_name(header.api_key, body)
                slot.dispatched = time.perf_counter()
            if auth is not None and auth.intercepts(header.api_key):
                result = self._authenticate(auth, header, body, slot)
            elif auth is not None and auth.session_expired():
                log.debug("closing %s: its authentication session expired", self.peer)
                self.close()
                return
            else:
                result = self.apis.handle(header, body, self)
            if timed:
                slot.handled = time.perf_counter()
        except ProtocolDecodeError as e:
            log.warning("closing %s: malformed %s v%d: %s", self.peer, framing.request_class(header.api_key).NAME,
                        header.api_version, e, extra={"kind": "malformed request"})
            self.close()
            return
        except Exception:
            log.exception("error handling %s v%d from %s; closing the connection",
                          framing.request_class(header.api_key).NAME, header.api_version, self.peer)
            self.close()
            return
        if isinstance(result, (asyncio.Future, Promise)):
            result.add_done_callback(lambda f, s=slot: self._future_done(s, f))
        else:
            self._complete(slot, result)

    def _authenticate(self, auth: Authenticator, header: framing.RequestHeader, body: Struct, slot: _Slot) -> Any:
        try:
            response = auth.handle(header.api_key, header.api_version, body)
        except AuthenticationFailed as failed:
            self.server.authentication_failed(self.listener.name)
            if failed.response is None:
                self.close()
                return NO_RESPONSE
            slot.close_after = True
            delay_ms = self._failure_delay_ms(auth)
            if not delay_ms:
                return failed.response
            # As Kafka's Selector: the failure's answer, and the close after it, are held back
            # (a guesser waits out each attempt); not after a failed re-authentication.
            held: asyncio.Future[Struct] = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_later(delay_ms / 1000, _resolve, held, failed.response)
            return held
        if auth.principal is not None and self.principal is not auth.principal:
            self.principal = auth.principal
            self.server.authenticated(self.listener.name)
        return response

    def _raw_token(self, auth: Authenticator, frame: bytearray) -> None:
        """A token after a v0 SaslHandshake: no Kafka header; the challenge goes back as a raw frame."""
        self.server.pool.release(len(frame))
        try:
            challenge = auth.raw_token(bytes(frame))
        except AuthenticationFailed:
            self.server.authentication_failed(self.listener.name)
            delay_ms = self._failure_delay_ms(auth)
            if delay_ms:
                asyncio.get_running_loop().call_later(delay_ms / 1000, self.close)
            else:
                self.close()
            return
        if auth.principal is not None and self.principal is not auth.principal:
            self.principal = auth.principal
            self.server.authenticated(self.listener.name)
        assert self.transport is not None
        self.transport.write(_SIZE.pack(len(challenge)) + challenge)

    def _failure_delay_ms(self, auth: Authenticator) -> int:
        """connection.failed.authentication.delay.ms, for a connection never authenticated."""
        return self.server.failed_authentication_delay_ms if auth.principal is None else 0

    def _future_done(self, slot: _Slot, fut: asyncio.Future | Promise) -> None:
        if fut.cancelled():
            self.close()
            return
        exc = fut.exception()
        if exc is not None:
            log.error("error completing %s for %s: %r", slot.header.api_key, self.peer, exc, exc_info=exc)
            self.close()
            return
        self._complete(slot, fut.result())

    def _complete(self, slot: _Slot, response: Any) -> None:
        slot.response = response
        slot.ready = True
        timed = self.server.request_metrics is not None or self.server.request_log is not None
        if timed:
            slot.completed = time.perf_counter()
        if self.closed:
            return
        self._flush()

    def _flush(self) -> None:
        """Write the answers that are ready, in request order, up to one a sender thread takes."""
        timed = self.server.request_metrics is not None or self.server.request_log is not None
        pending = self.pending
        transport = self.transport
        pool = self.server.pool
        while pending and pending[0].ready and self._sending is None:
            s = pending.popleft()
            pool.release(s.reserved)
            h = s.header
            if s.response is NO_RESPONSE or s.response is CLOSE_CONNECTION:
                if timed and s.request is not None:
                    now = time.perf_counter()
                    self._timed(s, s.request, now, now, None)
                if s.response is CLOSE_CONNECTION:
                    log.info("closing %s after an error in its acks=0 produce (correlation id %d)",
                             self.peer, h.correlation_id)
                    self.close()
                    return
                continue
            write_start = time.perf_counter() if timed else 0.0
            parts = framing.encode_response_parts(s.response, h.api_key, h.api_version, h.correlation_id)
            if len(parts) > 1 and (regions := file_sender.regions_size(parts)):
                if regions >= file_sender.ZERO_COPY_MIN and self._send_files(s, parts, regions, write_start):
                    return  # _files_sent goes on from here
                try:
                    parts = file_sender.read_regions(parts)
                except (OSError, EOFError) as e:
                    log.warning("closing %s: could not read its answer's records: %s", self.peer, e)
                    self.close()
                    return
            if len(parts) == 1:
                transport.write(parts[0])  # type: ignore[union-attr]
            else:
                transport.writelines(parts)  # type: ignore[union-attr]
            if timed and s.request is not None:
                self._timed(s, s.request, write_start, time.perf_counter(), s.response)
            if s.close_after:
                self.close()  # the transport writes what it holds first
                return
        self.last_active = time.monotonic()
        if self.awaiting_turn and not pending and self._sending is None and self._turn is None:
            # Not on this stack: it may be parsing another connection's frames out of the
            # shared read buffer, which the waiting frame is copied back into.
            self._turn = asyncio.get_running_loop().call_soon(self._take_turn)
        self.update_reading()

    def _send_files(self, s: _Slot, parts: list[Part], regions: int, write_start: float) -> bool:
        """Hand an answer holding FileRegions (``regions`` bytes of them) to a sender thread,
        if the socket is ours alone: nothing the transport still buffers may come after it."""
        sender, transport, tls = self.server.file_sender, self.transport, self.tls
        if sender is None or transport is None or not sender.available():
            return False
        done: Callable[[BaseException | None], None] = lambda exc: self._files_sent(s, write_start, exc)
        if tls is not None:
            sock = tls.begin_send()
            if sock is None:
                return False
            self._sending = sender.start(sock.fileno(), parts, regions, done, tls)
            if self._sending is None:
                tls.abandon_send()
            return self._sending is not None
        if transport.get_write_buffer_size() or transport.is_closing():
            return False
        sock = transport.get_extra_info("socket")
        if sock is None:
            return False
        self._sending = sender.start(sock.fileno(), parts, regions, done)
        return self._sending is not None

    def _files_sent(self, s: _Slot, write_start: float, exc: BaseException | None) -> None:
        self._sending = None
        if exc is not None:
            if not self.closed:
                log.debug("closing %s: its answer could not be sent: %r", self.peer, exc)
            self.close()
            return
        if s.request is not None and (self.server.request_metrics is not None or self.server.request_log is not None):
            self._timed(s, s.request, write_start, time.perf_counter(), s.response)
        if s.close_after:
            self.close()
            return
        if not self.closed:
            self._flush()

    def _timed(self, s: _Slot, request: str, write_start: float, sent: float, response: object) -> None:
        """Hand one answered request's clock readings to the metrics and the slow-request log."""
        metrics, request_log = self.server.request_metrics, self.server.request_log
        if metrics is not None:
            metrics.record(request, s.header.api_version, s.received, s.dispatched, s.handled, s.completed,
                           write_start, sent, response)
        if request_log is not None:
            request_log.request_completed(self, s.header, request, s.received, s.dispatched, s.handled, s.completed,
                                          write_start, sent, response)

    # ------------------------------------------------------------ quotas
    def throttle(self, ms: int) -> None:
        """Mute this connection for ``ms`` (KIP-219): its answers still go out, nothing more
        is read or parsed until the time is up."""
        if ms <= 0 or self.closed:
            return
        loop = asyncio.get_running_loop()
        until = loop.time() + ms / 1000
        if until <= self._throttled_until:
            return
        self._throttled_until = until
        if self._throttle is not None:
            self._throttle.cancel()
        self._throttle = loop.call_at(until, self._end_throttle)
        self.update_reading()

    def _end_throttle(self) -> None:
        self._throttle = None
        self._parse_held()

    @property
    def throttled(self) -> bool:
        return self._throttle is not None

    def idle(self) -> bool:
        """Nothing waiting for an answer or for memory. A frame that stopped arriving does not
        keep its connection (and the pool memory it holds), as in Kafka."""
        return not self.pending and self._sending is None and not self.granted \
            and not self.awaiting_turn and not self.server.pool.queued(self)

    def update_reading(self) -> None:
        """Read only while the client's answers drain, it has room for more requests in
        flight, no request of its waits for its turn, and the request memory pool has room."""
        if self.closed or self.transport is None:
            return
        pool = self.server.pool
        waiting = self.granted > 0 or pool.queued(self)  # a frame of ours waits for memory
        starved = self.frame is None and not waiting and pool.exhausted()
        should_pause = (self._writing_paused or len(self.pending) >= MAX_IN_FLIGHT or starved or waiting
                        or self._throttle is not None or self.awaiting_turn)
        if starved:
            pool.wait(self)
        if should_pause and not self._reading_paused:
            self.transport.pause_reading()
            self._reading_paused = True
        elif not should_pause and self._reading_paused:
            self.transport.resume_reading()
            self._reading_paused = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.close()
        self._release()

    def _release(self) -> None:
        """Give back what this connection held: pool bytes, its connection count, its mute
        timer, the requests waiting for their turn."""
        if self._sending is not None:
            self._sending.cancel()
        if self._turn is not None:
            self._turn.cancel()
            self._turn = None
        self.held = b""
        self.awaiting_turn = False
        if self._throttle is not None:
            self._throttle.cancel()
            self._throttle = None
        pool = self.server.pool
        pool.forget(self)  # first: what it gives back goes to the others
        for slot in self.pending:
            pool.release(slot.reserved)
        self.pending.clear()
        if self.frame is not None:
            pool.release(self.frame_size)
            self.frame = None
        if self.granted:
            pool.release(self.granted)
            self.granted = 0
        listeners, self.close_listeners = self.close_listeners, []
        for listener in listeners:
            listener(self)
        if self.counted:
            self.counted = False
            self.server.quotas.closed(self.peer[0])
            self.server.connections.discard(self)
