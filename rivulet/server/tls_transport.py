"""TLS owned by the broker: a transport over ``ssl.SSLObject`` and memory BIOs that lets a
sender thread encrypt and send a large Fetch answer off the event loop.

asyncio's own SSL transport encrypts, and writes the ciphertext, on the event loop, and its
``SSLObject`` is private to it. Here the listener accepts plain TCP and ``TlsTransport``
stands between the socket and the ``KafkaConnection``: the loop does the handshake, decrypts
what arrives and encrypts small answers, as asyncio would. An answer carrying FileRegions is
handed to a sender thread (``file_sender.Send``) that reads the file, encrypts it with
``encrypt`` and writes the ciphertext to the socket itself; ``pread``, ``SSLObject.write``
and the socket write all release the GIL, so this runs on another core.

OpenSSL's SSL object may not be read and written at once, so every use of it holds
``_lock``; the sender takes it for one chunk at a time, so the loop waits at most one
chunk's encryption to decrypt. Ciphertext must reach the socket in the order the SSL object
made it: while a sender owns the socket, whatever the loop makes (a TLS 1.3 post-handshake
message, say) is queued for the sender to write after its own, and the loop writes nothing.

Run with RIVULET_ASYNCIO_TLS=1 to serve TLS listeners with asyncio's SSL transport instead
(record sets are then read and encrypted on the loop).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import threading
from typing import Any, Callable, Iterable

log = logging.getLogger(__name__)


def enabled() -> bool:
    return os.environ.get("RIVULET_ASYNCIO_TLS", "") in ("", "0")


class TlsTransport(asyncio.Transport, asyncio.BufferedProtocol):
    """The raw TCP transport's protocol, and the transport its application protocol sees.
    The application protocol (a ``BufferedProtocol``) is made once the handshake succeeds,
    as asyncio's SSL transport makes a connection only then.

    Ciphertext is read into ``receive``, one buffer every connection of the server shares (the
    loop reads one socket at a time, and each read goes into the memory BIO before the next),
    so no read makes a bytes object of its own and an idle connection holds no buffer."""

    def __init__(self, context: ssl.SSLContext, app_factory: Callable[[], asyncio.BufferedProtocol],
                 handshake_timeout_s: float, receive: memoryview) -> None:
        super().__init__()
        self._receive = receive
        self._context = context
        self._app_factory = app_factory
        self._handshake_timeout_s = handshake_timeout_s
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._sslobj: ssl.SSLObject | None = None
        self._raw: asyncio.Transport | None = None
        self._app: asyncio.BufferedProtocol | None = None
        self._lock = threading.Lock()
        self._handshake_timer: asyncio.TimerHandle | None = None
        self._app_paused = False
        self._closing = False
        # Set (under the lock) while a sender thread owns the socket; ciphertext the loop
        # makes meanwhile waits in _queue for the sender to write.
        self._sending = False
        self._queue: list[bytes] = []

    # ------------------------------------------------------------ the raw side
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._raw = transport  # type: ignore[assignment]
        self._sslobj = self._context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._handshake_timer = asyncio.get_running_loop().call_later(self._handshake_timeout_s, self._timed_out)

    def _timed_out(self) -> None:
        log.debug("closing %s: no TLS handshake within %g s", self.get_extra_info("peername"),
                  self._handshake_timeout_s)
        self.abort()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._receive

    def buffer_updated(self, nbytes: int) -> None:
        try:
            with self._lock:
                self._incoming.write(self._receive[:nbytes])
            if self._app is None:
                self._handshake()
            self._deliver()
        except ssl.SSLError as e:
            log.debug("closing %s: TLS error: %s", self.get_extra_info("peername"), e)
            if self._app is None:
                self._refuse()
            else:  # a broken record: the connection just goes, as with asyncio
                self.abort()

    def _refuse(self) -> None:
        """A failed handshake: send the alert OpenSSL made, then close once it is written, as
        Kafka's SslTransportLayer flushes before closing. The client learns why (a certificate
        refused, say) where a reset would tell it only that the connection was lost."""
        self._closing = True
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
            self._handshake_timer = None
        with self._lock:
            self._emit()
        if self._raw is not None:
            self._raw.close()

    def _handshake(self) -> None:
        assert self._sslobj is not None
        with self._lock:
            try:
                self._sslobj.do_handshake()
                done = True
            except ssl.SSLWantReadError:
                done = False
            self._emit()
        if not done:
            return
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
            self._handshake_timer = None
        self._app = self._app_factory()
        self._app.connection_made(self)

    def _deliver(self) -> None:
        """Decrypt what has arrived into the application's buffer while it reads."""
        app, sslobj = self._app, self._sslobj
        if app is None or sslobj is None:
            return
        while not self._app_paused and not self._closing:
            buf = app.get_buffer(-1)
            wants, n, ended = len(buf), 0, False
            with self._lock:
                # Fill the buffer (a record is at most 16 KiB) before the application parses it.
                while n < wants:
                    try:
                        got = sslobj.read(wants - n, buf[n:])
                    except ssl.SSLWantReadError:
                        break
                    except ssl.SSLZeroReturnError:
                        got = 0
                    if not got:
                        ended = True
                        break
                    n += got
                self._emit()
            if n:
                app.buffer_updated(n)
            if ended:  # the client's close_notify
                self.close()
                return
            if n < wants:
                return

    def eof_received(self) -> bool:
        return False  # the raw transport closes, and connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
            self._handshake_timer = None
        if self._app is not None:
            self._app.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._app is not None:
            self._app.pause_writing()

    def resume_writing(self) -> None:
        if self._app is not None:
            self._app.resume_writing()

    def _emit(self) -> None:
        """Send what the SSL object made; with the lock held."""
        data = self._outgoing.read()
        if not data:
            return
        if self._sending:
            self._queue.append(data)
        elif self._raw is not None and not self._raw.is_closing():
            self._raw.write(data)

    # ------------------------------------------------------------ the application's side
    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writelines((data,))

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        if self._closing or self._sslobj is None:
            return
        with self._lock:
            for data in list_of_data:
                self._sslobj.write(data)
            self._emit()

    def pause_reading(self) -> None:
        self._app_paused = True
        if self._raw is not None:
            self._raw.pause_reading()

    def resume_reading(self) -> None:
        if not self._app_paused:
            return
        self._app_paused = False
        if self._raw is not None:
            self._raw.resume_reading()
        # Records already decrypted or buffered are not announced by the socket again.
        asyncio.get_running_loop().call_soon(self._deliver)

    def is_reading(self) -> bool:
        return not self._app_paused

    def get_write_buffer_size(self) -> int:
        return self._raw.get_write_buffer_size() if self._raw is not None else 0

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        """Say close_notify and close once what is buffered is written. A send cut short
        left a record half-written, so then the socket just closes."""
        if self._closing:
            return
        self._closing = True
        if self._sslobj is not None and self._app is not None:
            with self._lock:
                if not self._sending:
                    try:
                        self._sslobj.unwrap()
                    except ssl.SSLError:
                        pass  # SSLWantReadError: the client's close_notify is not awaited
                    self._emit()
        if self._raw is not None:
            self._raw.close()

    def abort(self) -> None:
        self._closing = True
        if self._raw is not None:
            self._raw.abort()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "ssl_object":
            return self._sslobj
        if name == "sslcontext":
            return self._context
        if name in ("peercert", "cipher", "compression"):
            if self._sslobj is None:
                return default
            return {"peercert": self._sslobj.getpeercert, "cipher": self._sslobj.cipher,
                    "compression": self._sslobj.compression}[name]()
        return self._raw.get_extra_info(name, default) if self._raw is not None else default

    # ------------------------------------------------------------ a sender thread's side
    def begin_send(self) -> socket.socket | None:
        """On the loop: hand the socket to a sender thread, if nothing the loop wrote is still
        buffered; the socket, or None."""
        raw = self._raw
        if raw is None or self._closing or raw.is_closing() or raw.get_write_buffer_size():
            return None
        sock = raw.get_extra_info("socket")
        if sock is None:
            return None
        with self._lock:
            self._sending = True
        return sock

    def abandon_send(self) -> None:
        """On the loop: no sender took the socket after ``begin_send``."""
        with self._lock:
            self._sending = False
            queued, self._queue = self._queue, []
        if queued and self._raw is not None:
            self._raw.writelines(queued)

    def encrypt(self, data: bytes | bytearray | memoryview) -> bytes:
        """On the sender thread: ``data`` encrypted, after whatever the loop queued before it."""
        assert self._sslobj is not None
        with self._lock:
            self._sslobj.write(data)
            self._queue.append(self._outgoing.read())
            out = b"".join(self._queue)
            self._queue.clear()
        return out

    def end_send(self) -> bytes:
        """On the sender thread: what the loop queued meanwhile, to write before the send ends;
        b"" once nothing is left, and then the socket is the loop's again."""
        with self._lock:
            out = b"".join(self._queue)
            self._queue.clear()
            if not out:
                self._sending = False
        return out
