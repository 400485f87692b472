"""The socket layer: Kafka frames in, responses out, in request order per connection.

A connection may pipeline many requests; each gets a slot in a FIFO, and a response is
written only when every earlier slot has been answered, as Kafka guarantees. Handlers
answer synchronously, return a Future for work that completes later (long-poll fetches,
acks=all produces, group joins), or NO_RESPONSE (acks=0 produces).

A malformed frame closes only its own connection; every other connection carries on.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections import deque
from typing import Any, Protocol

from rivulet.protocol import framing
from rivulet.protocol.errors import ErrorCode, ProtocolDecodeError
from rivulet.server.answer import NO_RESPONSE, Answer

log = logging.getLogger(__name__)


class RequestHandler(Protocol):
    """What a connection hands decoded requests to (``KafkaApis``)."""

    def handle(self, header: framing.RequestHeader, body: Any, conn: KafkaConnection) -> Answer: ...

    def api_versions_error(self, code: ErrorCode) -> Any: ...

_SIZE = struct.Struct(">i")
# Stop reading from a client that has this many requests waiting for answers.
MAX_IN_FLIGHT = 256
HIGH_WATER = 4 * 1024 * 1024


class _Slot:
    __slots__ = ("header", "response", "ready")

    def __init__(self, header: framing.RequestHeader) -> None:
        self.header = header
        self.response: Any = None
        self.ready = False


# Small frames are parsed out of a fixed staging buffer; a frame larger than this gets a
# buffer of its own that the socket reads into directly, so a 1 MiB produce is copied once.
STAGE_SIZE = 256 * 1024


class KafkaConnection(asyncio.BufferedProtocol):
    """One client connection."""

    def __init__(self, apis: RequestHandler, max_request_bytes: int, registry: set[KafkaConnection]) -> None:
        self.apis = apis
        self.registry = registry  # the broker's open connections, closed at shutdown
        self.max_request_bytes = max_request_bytes
        self.transport: asyncio.Transport | None = None
        self.stage = bytearray(STAGE_SIZE)
        self.stage_view = memoryview(self.stage)
        self.start = 0  # first unparsed byte in stage
        self.end = 0  # end of received bytes in stage
        self.big: bytearray | None = None  # a large frame being received
        self.big_filled = 0
        self.pending: deque[_Slot] = deque()
        self.closed = False
        self.peer = ("?", 0)
        self._reading_paused = False
        self._writing_paused = False

    # ------------------------------------------------------------ asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.peer = transport.get_extra_info("peername") or ("?", 0)
        self.registry.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.registry.discard(self)
        self.pending.clear()

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._update_reading()

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.big is not None:
            return memoryview(self.big)[self.big_filled:]
        if self.end == STAGE_SIZE:
            # Move the partial frame to the front; same-length slice assignment never resizes.
            n = self.end - self.start
            self.stage[0:n] = self.stage_view[self.start:self.end]
            self.start, self.end = 0, n
        return self.stage_view[self.end:]

    def buffer_updated(self, nbytes: int) -> None:
        if self.big is not None:
            self.big_filled += nbytes
            if self.big_filled == len(self.big):
                frame, self.big = self.big, None
                self._on_frame(frame)
            self._update_reading()
            return
        self.end += nbytes
        stage, view = self.stage, self.stage_view
        while not self.closed:
            avail = self.end - self.start
            if avail < 4:
                break
            size = _SIZE.unpack_from(stage, self.start)[0]
            if size < 0 or size > self.max_request_bytes:
                log.warning("closing %s: request of %d bytes exceeds socket.request.max.bytes (%d)",
                            self.peer, size, self.max_request_bytes)
                self.close()
                return
            if avail - 4 >= size:
                frame = bytearray(view[self.start + 4:self.start + 4 + size])
                self.start += 4 + size
                self._on_frame(frame)
                continue
            if size + 4 > STAGE_SIZE // 2:
                # Too big to stage: give it its own buffer and receive the rest straight into it.
                self.big = bytearray(size)
                have = avail - 4
                self.big[:have] = view[self.start + 4:self.end]
                self.big_filled = have
                self.start = self.end = 0
            break
        if self.start == self.end:
            self.start = self.end = 0
        self._update_reading()

    # ------------------------------------------------------------ request handling
    def _on_frame(self, frame: bytearray) -> None:
        try:
            header, body_pos = framing.decode_request_header(frame)
        except framing.UnsupportedApi as e:
            if e.api_key == framing.API_VERSIONS_KEY:
                # A v0-format error reply lets an older or newer client discover our versions.
                hdr = framing.RequestHeader(e.api_key, 0, e.correlation_id)
                slot = _Slot(hdr)
                self.pending.append(slot)
                self._complete(slot, self.apis.api_versions_error(ErrorCode.UNSUPPORTED_VERSION))
                return
            log.warning("closing %s: %s", self.peer, e)
            self.close()
            return
        except ProtocolDecodeError as e:
            log.warning("closing %s: bad request header: %s", self.peer, e)
            self.close()
            return
        slot = _Slot(header)
        self.pending.append(slot)
        try:
            body = framing.request_class(header.api_key).decode(frame, header.api_version, body_pos)
            result = self.apis.handle(header, body, self)
        except ProtocolDecodeError as e:
            log.warning("closing %s: malformed %s v%d: %s", self.peer,
                        framing.request_class(header.api_key).NAME, header.api_version, e)
            self.close()
            return
        except Exception:
            log.exception("error handling %s v%d from %s; closing the connection",
                          framing.request_class(header.api_key).NAME, header.api_version, self.peer)
            self.close()
            return
        if isinstance(result, asyncio.Future):
            result.add_done_callback(lambda f, s=slot: self._future_done(s, f))
        else:
            self._complete(slot, result)

    def _future_done(self, slot: _Slot, fut: asyncio.Future) -> None:
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
        if self.closed:
            return
        pending = self.pending
        transport = self.transport
        while pending and pending[0].ready:
            s = pending.popleft()
            if s.response is NO_RESPONSE:
                continue
            h = s.header
            parts = framing.encode_response_parts(s.response, h.api_key, h.api_version, h.correlation_id)
            if len(parts) == 1:
                transport.write(parts[0])  # type: ignore[union-attr]
            else:
                transport.writelines(parts)  # type: ignore[union-attr]
        self._update_reading()

    def _update_reading(self) -> None:
        if self.closed or self.transport is None:
            return
        should_pause = self._writing_paused or len(self.pending) >= MAX_IN_FLIGHT
        if should_pause and not self._reading_paused:
            self.transport.pause_reading()
            self._reading_paused = True
        elif not should_pause and self._reading_paused:
            self.transport.resume_reading()
            self._reading_paused = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.pending.clear()
            if self.transport is not None:
                self.transport.close()
