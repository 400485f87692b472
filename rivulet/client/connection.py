"""One client connection to one broker: requests out, responses matched by correlation id.

On connect it asks ApiVersions and afterwards sends every request at the highest version
both sides support (capped by what the caller's code understands). Requests pipeline: the
broker answers in order, so responses are matched to a FIFO of waiters. A request that times
out closes the connection, as Java's client does: a late answer would otherwise be read by
whoever waits next, and a broker that stopped answering is better found by reconnecting.

Reading is a BufferedProtocol: small responses are cut from one scratch buffer, and a large
one (a Fetch response of megabytes) is received straight into a buffer of its own size, so its
bytes are not copied on the way in (a StreamReader would copy them twice).
"""

from __future__ import annotations

import asyncio
import ssl
import struct
from collections import deque
from typing import TypeVar

from rivulet.client import core
from rivulet.protocol import framing
from rivulet.protocol.errors import ProtocolDecodeError
from rivulet.protocol.messages import api_versions_response as avr
from rivulet.protocol.schema import OutBuf, Part, Request, Struct
from rivulet.security.client_config import SaslCredentials
from rivulet.security.sasl import SaslError, client_exchange

R = TypeVar("R", bound=Struct)  # a request's response message
_SIZE = struct.Struct(">i")
_I16 = struct.Struct(">h")
_HDR = struct.Struct(">hhi")
_SCRATCH = 1 << 16
# A response larger than this gets its own buffer (and is read into it directly).
_LARGE = 1 << 15
_MAX_FRAME = 1 << 30
# ApiVersions' answer is a few KiB: a larger size prefix on a connection's first answer means the
# peer is not speaking Kafka (HTTP/1.1 reads as 1.2 GB, a TLS alert as 352 MB).
FIRST_ANSWER_MAX = 1 << 20
# With probe_silence, when ApiVersions has had no answer this share of the connection set-up time
# before its end (at most 2 s before), the client half-closes: some servers answer only at the end
# of a request (an HTTP server waiting for its request line), and their answer says what they are.
_PROBE_SHARE = 0.4
_PROBE_MAX = 2.0


def encode_request_parts(body: Struct, api_version: int, correlation_id: int, client_id: bytes | None
                         ) -> list[Part]:
    """A request frame as buffers for a vectored write: the bytes framing.encode_request makes,
    but with large records fields (a produce batch) left where they are instead of copied."""
    out = OutBuf(b"\0\0\0\0")
    out += _HDR.pack(body.API_KEY, api_version, correlation_id)
    hv = framing.request_header_version(body.API_KEY, api_version)
    if hv >= 1:
        if client_id is None:
            out += b"\xff\xff"
        else:
            out += _I16.pack(len(client_id))
            out += client_id
    if hv >= 2:
        out.append(0)  # no tagged fields
    body.encode_into(out, api_version)
    _SIZE.pack_into(out, 0, out.total_size() - 4)
    return out.parts()


class ConnectionClosed(ConnectionError):
    pass


class AuthenticationFailed(ConnectionClosed):
    """The broker refused this client's SASL credentials (librdkafka's _AUTHENTICATION)."""


class NotKafkaBroker(ConnectionClosed):
    """The peer answered, but not as a Kafka broker does (an HTTP server, a TLS port spoken to in
    plaintext, ...): retrying does not help."""


class RequestTimedOut(TimeoutError):
    pass


def not_kafka(host: str, port: int, what: str) -> NotKafkaBroker:
    """The error for the peer at host:port; ``what``: what it answered (see describe_answer)."""
    return NotKafkaBroker(f"{host}:{port} is not a Kafka broker: {what}")


def describe_answer(head: bytes) -> str:
    """What a peer that is not a Kafka broker is, from the first bytes it sent."""
    if head.startswith(b"HTTP/"):
        status = head.split(b"\r\n", 1)[0].split(b"\n", 1)[0][:60].decode("latin-1")
        return f"it answered like an HTTP server ({status!r})"
    if head.lstrip().lower().startswith((b"<!doctype html", b"<html")):
        return "it answered like an HTTP server (with an HTML page)"  # an HTTP/0.9 answer: no status line
    if len(head) >= 3 and head[0] in (0x15, 0x16) and head[1] == 3 and head[2] <= 4:
        what = "a TLS alert" if head[0] == 0x15 else "TLS"
        return f"it answered with {what}: the port expects TLS (security.protocol SSL or SASL_SSL)"
    if head.startswith(b"SSH-"):
        return "it answered like an SSH server"
    return f"its answer does not parse as Kafka (it began {head[:16]!r})"


class _Protocol(asyncio.BufferedProtocol):
    def __init__(self, conn: BrokerConnection) -> None:
        self.conn = conn
        self.transport: asyncio.Transport | None = None
        self.scratch = bytearray(_SCRATCH)
        self.have = 0  # valid bytes in scratch
        self.frame: bytearray | None = None  # a large response being received
        self.filled = 0
        self.paused = False
        self.drain_waiters: list[asyncio.Future] = []
        self.answered = False  # a first frame arrived: the peer speaks Kafka's framing

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.frame is not None:
            return memoryview(self.frame)[self.filled:]
        if self.have == len(self.scratch):
            self.scratch.extend(bytes(len(self.scratch)))
        return memoryview(self.scratch)[self.have:]

    def buffer_updated(self, nbytes: int) -> None:
        try:
            if self.frame is not None:
                self.filled += nbytes
                if self.filled == len(self.frame):
                    frame, self.frame = self.frame, None
                    self.conn._on_frame(frame)
                return
            self.have += nbytes
            self._cut_frames()
        except NotKafkaBroker as e:
            self.conn._fail_all(e)
        except Exception as e:  # a malformed frame: the connection is unusable
            if not self.answered:  # a first answer that does not decode: not Kafka at all
                self.conn._fail_all(self.conn.not_kafka(describe_answer(bytes(self.scratch[:self.have]))))
                return
            self.conn._fail_all(e if isinstance(e, ProtocolDecodeError) else ProtocolDecodeError(str(e)))

    def _cut_frames(self) -> None:
        buf = self.scratch
        pos = 0
        have = self.have
        while have - pos >= 4:
            size = _SIZE.unpack_from(buf, pos)[0]
            if not self.answered and not 0 <= size <= FIRST_ANSWER_MAX:
                raise self.conn.not_kafka(describe_answer(bytes(buf[pos:have])))
            if size < 0 or size > _MAX_FRAME:
                raise ProtocolDecodeError(f"invalid response size {size}")
            start = pos + 4
            if have - start >= size:
                self.conn._on_frame(bytes(buf[start:start + size]))
                self.answered = True
                pos = start + size
                continue
            if size > _LARGE:
                got = have - start
                self.frame = bytearray(size)
                self.frame[:got] = buf[start:have]
                self.filled = got
                pos = have
            break
        if pos:
            rest = have - pos
            if rest:
                buf[:rest] = buf[pos:have]
            self.have = rest
            if len(buf) > _SCRATCH and rest <= _SCRATCH:
                del buf[_SCRATCH:]

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.answered and self.have:  # a few bytes, then it hung up: say what they were
            self.conn._fail_all(self.conn.not_kafka(describe_answer(bytes(self.scratch[:self.have]))))
        if exc is not None:
            self.conn._fail_all(ConnectionClosed(str(exc)))
        elif not self.answered and self.conn.ssl_context is None:
            # What a TLS port does with a plaintext ClientHello-less request (Python's ssl, at least).
            self.conn._fail_all(ConnectionClosed("connection closed without an answer to ApiVersions "
                                                 "(is it a TLS port? this client speaks plaintext)"))
        else:
            self.conn._fail_all(ConnectionClosed("connection closed by the broker"))
        self.resume_writing()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        waiters, self.drain_waiters = self.drain_waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)


class BrokerConnector:
    """How one side reaches brokers: plaintext, or TLS with ``ssl_context``, with SASL when
    ``sasl`` is given. The broker's own
    connections (replica fetchers, AlterPartition, the controller's channel, transaction
    markers) all take the inter-broker listener's from the one the broker builds."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None, sasl: SaslCredentials | None = None) -> None:
        self.ssl_context = ssl_context
        self.sasl = sasl

    def connection(self, host: str, port: int, client_id: str, request_timeout_ms: int = 30000,
                   node_id: int = -1) -> BrokerConnection:
        return BrokerConnection(host, port, client_id, request_timeout_ms, node_id, ssl_context=self.ssl_context,
                                sasl=self.sasl)


PLAINTEXT_CONNECTOR = BrokerConnector()


class BrokerConnection:
    def __init__(self, host: str, port: int, client_id: str = "rivulet", request_timeout_ms: int = 30000,
                 node_id: int = -1, ssl_context: ssl.SSLContext | None = None,
                 local_addr: tuple[str, int] | None = None, sasl: SaslCredentials | None = None,
                 probe_silence: bool = False) -> None:
        """``ssl_context``: TLS to the broker (security.protocol SSL), its certificate checked
        against ``host`` when the context checks host names. ``local_addr``: the address to
        connect from (the host the broker's ACLs see). ``sasl``: authenticate once connected.
        ``probe_silence``: half-close a peer silent near the end of the set-up time to hear what
        it is (for addresses a person gave; the broker's own connections, to brokers it knows from
        metadata, keep the whole set-up time for a slow answer)."""
        self.host = host
        self.probe_silence = probe_silence
        self.local_addr = local_addr
        self.sasl = sasl
        # When the broker ends the SASL session (KIP-368), in the loop's time; None: never.
        self.session_deadline: float | None = None
        self.port = port
        self.ssl_context = ssl_context
        self.node_id = node_id
        self.client_id = client_id
        self._client_id_bytes = None if client_id is None else client_id.encode()
        self.request_timeout = request_timeout_ms / 1000
        self.api_versions: dict[int, tuple[int, int]] = {}
        self._next_id = 0
        self._inflight: deque[tuple[int, int, int, asyncio.Future]] = deque()
        self._protocol: _Protocol | None = None
        self._transport: asyncio.Transport | None = None
        self.closed = False

    async def connect(self, timeout: float | None = None) -> BrokerConnection:
        """Connect (TLS included) and ask ApiVersions, all within ``timeout`` seconds (default:
        request.timeout.ms + 5 s); SASL's steps then take up to ``timeout`` each."""
        loop = asyncio.get_running_loop()
        budget = self.request_timeout + 5 if timeout is None else timeout
        deadline = loop.time() + budget
        try:
            async with asyncio.timeout_at(deadline):
                self._transport, self._protocol = await loop.create_connection(
                    lambda: _Protocol(self), self.host, self.port, ssl=self.ssl_context,
                    server_hostname=self.host if self.ssl_context is not None else None,
                    local_addr=self.local_addr)
        except TimeoutError:
            raise ConnectionClosed(f"connecting to {self.host}:{self.port} timed out") from None
        except ssl.SSLError as e:
            # Not worth retrying quietly: a certificate either side refuses stays refused.
            raise ConnectionClosed(f"TLS handshake with {self.host}:{self.port} failed: {e}") from None
        try:
            resp = await self._first_answer(deadline, budget)
        except BaseException:
            await self.close()
            raise
        self.api_versions = core.read_api_versions(resp, f"{self.host}:{self.port}")
        if self.sasl is not None:
            try:
                await self._authenticate(timeout)
            except BaseException:
                await self.close()
                raise
        return self

    async def _first_answer(self, deadline: float, budget: float) -> avr.ApiVersionsResponse:
        """ApiVersions' answer by ``deadline``; with probe_silence, silence until shortly before it
        half-closes the connection to learn what kind of server keeps silent (see _PROBE_SHARE)."""
        loop = asyncio.get_running_loop()
        fut = self.send_nowait(core.api_versions_request(), version=3)
        assert fut is not None and self._transport is not None
        probe = self.probe_silence and self._transport.can_write_eof()  # not TLS: it could not answer plaintext
        probe_at = deadline - (min(budget * _PROBE_SHARE, _PROBE_MAX) if probe else 0)
        await asyncio.wait({fut}, timeout=max(probe_at - loop.time(), 0))
        if fut.done():
            return fut.result()
        if probe:
            self._transport.write_eof()
            await asyncio.wait({fut}, timeout=max(deadline - loop.time(), 0))
            if fut.done() and isinstance(fut.exception(), NotKafkaBroker):
                return fut.result()
            # A Kafka broker answering now, after the half-close, is too late: the connection is spent.
        err = RequestTimedOut(f"no answer to ApiVersions within {budget:g} s of connecting "
                              "(not a Kafka broker, or one that is stuck)")
        self._fail_all(err)
        raise err

    def not_kafka(self, what: str) -> NotKafkaBroker:
        return not_kafka(self.host, self.port, what)

    async def _authenticate(self, timeout: float | None) -> None:
        steps = client_exchange(self.sasl.new_client())  # type: ignore[union-attr]
        started = asyncio.get_running_loop().time()
        try:
            request = next(steps)
            while True:
                request = steps.send(await self.send(request, timeout=timeout))
        except StopIteration as done:
            lifetime_ms = done.value
        except SaslError as e:
            raise AuthenticationFailed(f"{self.host}:{self.port}: SASL authentication error: {e}") from None
        except ConnectionClosed as e:
            raise AuthenticationFailed(f"{self.host}:{self.port}: SASL authentication failed: {e}") from None
        if lifetime_ms:
            # Reconnect (so re-authenticate) well before the broker's deadline, as Kafka's clients
            # re-authenticate at 85-95% of the session.
            self.session_deadline = started + lifetime_ms / 1000 * 0.85

    def session_ending(self) -> bool:
        """Past the point where this connection should be replaced by a fresh, authenticated one."""
        return self.session_deadline is not None and asyncio.get_running_loop().time() >= self.session_deadline

    def has_api(self, api_key: int) -> bool:
        return api_key in self.api_versions

    @property
    def in_flight(self) -> int:
        return len(self._inflight)

    def version_for(self, api_key: int, max_known: int | None = None) -> int:
        """The version to send ``api_key`` at: the highest both sides speak, capped by
        ``max_known`` or else the client core's cap for that request."""
        return core.pick_version(api_key, self.api_versions.get(api_key), max_known)

    def send_nowait(self, request: Request[R], version: int | None = None) -> asyncio.Future[R]:
        """Write a request now and return the future of its response (see ``wait``).

        Synchronous, so a caller can get the next request on the wire before it starts on
        CPU-bound work (the fetcher decoding the previous response).
        """
        fut = self._write(request, version, True)
        assert fut is not None
        return fut

    def _write(self, request: Request[R], version: int | None, expect_response: bool) -> asyncio.Future[R] | None:
        if self.closed or self._transport is None:
            raise ConnectionClosed(f"connection to {self.host}:{self.port} is closed")
        api_key = request.API_KEY
        if version is None:
            version = self.version_for(api_key)
        self._next_id = (self._next_id + 1) & 0x7FFFFFFF
        cid = self._next_id
        parts = encode_request_parts(request, version, cid, self._client_id_bytes)
        fut: asyncio.Future[R] | None = None
        if expect_response:
            fut = asyncio.get_running_loop().create_future()
            self._inflight.append((cid, api_key, version, fut))
        if len(parts) == 1:
            self._transport.write(parts[0])
        else:
            self._transport.writelines(parts)
        return fut

    async def wait(self, fut: asyncio.Future[R], timeout: float | None = None) -> R:
        """The response for ``send_nowait``'s future; a timeout closes the connection."""
        # By default a little past request.timeout.ms, so that the broker's own timeouts (a
        # request's timeout_ms) answer first.
        try:
            async with asyncio.timeout(self.request_timeout + 5 if timeout is None else timeout):
                return await fut
        except TimeoutError:
            what = next((f"{framing.api_name(api_key)} v{version}" for _, api_key, version, f in self._inflight
                         if f is fut), "a")
            err = RequestTimedOut(f"{what} request to {self.host}:{self.port} timed out")
            self._fail_all(err)
            raise err from None

    async def send(self, request: Request[R], version: int | None = None, timeout: float | None = None) -> R:
        """Send and await the response; ``timeout`` in seconds (default: request.timeout.ms + 5 s)."""
        fut = self.send_nowait(request, version)
        await self._drained()
        return await self.wait(fut, timeout)

    async def send_without_response(self, request: Request[Struct], version: int | None = None) -> None:
        """Send a request the broker does not answer (a Produce with acks=0)."""
        self._write(request, version, False)
        await self._drained()

    async def _drained(self) -> None:
        proto = self._protocol
        if proto is not None and proto.paused:
            w = asyncio.get_running_loop().create_future()
            proto.drain_waiters.append(w)
            await w

    def _on_frame(self, frame: bytes | bytearray) -> None:
        if not self._inflight:
            raise ProtocolDecodeError("response with no request waiting")
        # Left queued until it decodes, so that a failure here fails its waiter too (_fail_all).
        cid, api_key, version, fut = self._inflight[0]
        got_cid, body = framing.decode_response(frame, api_key, version)
        if got_cid != cid:
            what = f"the answer to {framing.api_name(api_key)} has correlation id {got_cid}, expected {cid}"
            if self._protocol is not None and not self._protocol.answered:
                raise self.not_kafka(what)
            raise ProtocolDecodeError(what)
        self._inflight.popleft()
        if not fut.done():
            fut.set_result(body)

    def _fail_all(self, err: BaseException) -> None:
        self.closed = True
        while self._inflight:
            fut = self._inflight.popleft()[3]
            if not fut.done():
                fut.set_exception(err)
                fut.exception()  # retrieved: a waiter may already be gone
        if self._transport is not None:
            self._transport.close()

    async def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()
        self._fail_all(ConnectionClosed("connection closed"))
