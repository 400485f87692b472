"""Zero-copy Fetch answers: responses whose record sets are FileRegions, written by a thread.

Kafka sends a fetch's records from the segment file to the socket with ``transferTo``
(sendfile): the bytes never enter the JVM's heap. Rivulet does the same on connections
without TLS. A response holding FileRegions is handed, whole and in order, to a sender
thread that writes its header bytes and ``os.sendfile``s its regions on its own descriptor of
the socket, waiting for the socket with ``poll`` when it is full. The event loop writes
nothing else to that connection until the thread is done, so the answers stay in request
order; meanwhile it keeps reading and serving every connection, and the copy into the socket
runs outside the GIL. Only a connection whose transport has nothing buffered is handed over.

Over TLS (``tls_transport.py``) the thread reads the regions, encrypts them with the
connection's SSL object and writes the ciphertext, all off the event loop.

Run with RIVULET_NO_SENDFILE=1 to read regions into memory and write them through the
event loop instead.
"""

from __future__ import annotations

import asyncio
import logging
import os
import select
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Protocol

from rivulet.common.file_region import FileRegion
from rivulet.protocol.schema import Part

try:  # optional C accelerator: a whole answer per GIL release (see _sendfile.c)
    from rivulet.server._sendfile import send_parts as _c_send_parts
except ImportError:  # pragma: no cover - no compiler at install time
    _c_send_parts = None

log = logging.getLogger(__name__)

# Sends at once; past it an answer is read and written on the event loop, so a crowd of
# slow consumers holds no more than this many threads.
MAX_SENDERS = 16
_POLL_MS = 200  # how often a waiting sender looks whether its connection was closed
# Plaintext encrypted per turn of the connection's TLS lock: the loop waits at most one
# chunk's encryption to decrypt what its client sends.
TLS_CHUNK = 128 * 1024


class Encryptor(Protocol):
    """A TLS connection's SSL object, shared with the loop (``tls_transport.TlsTransport``)."""

    def encrypt(self, data: bytes | bytearray | memoryview) -> bytes: ...

    def end_send(self) -> bytes: ...


def enabled() -> bool:
    return os.environ.get("RIVULET_NO_SENDFILE", "") in ("", "0")


def _python_only() -> bool:
    # The pure-Python sender stays the reference; tests run both.
    return os.environ.get("RIVULET_PY_SENDFILE", "") not in ("", "0")


# An answer whose record sets sent from files total at least this goes to a sender thread;
# below it the loop reads them, as starting a send off the loop costs more than the copy saves.
ZERO_COPY_MIN = 256 * 1024


def regions_size(parts: list[Part]) -> int:
    """How many of the answer's bytes are FileRegions (0: none)."""
    return sum(p.size for p in parts if type(p) is FileRegion)


def read_regions(parts: list[Part]) -> list[Part]:
    """The parts with every FileRegion read into bytes (and closed); EOFError if one was
    truncated under its answer."""
    return [p.read() if type(p) is FileRegion else p for p in parts]


def _copy_into(source: FileRegion | memoryview, offset: int, dst: memoryview) -> int:
    """Copy ``source``'s bytes from ``offset`` into ``dst``; how many (a file may give fewer)."""
    if type(source) is FileRegion:
        n = os.preadv(source.fd, [dst], source.position + offset)
        if n == 0:
            raise EOFError(f"{source.size - offset} bytes of a file region were truncated away")
        return n
    dst[:] = source[offset:offset + len(dst)]
    return len(dst)


class Send:
    """One response on its way out; ``cancel`` (from the loop) stops it at its next wait."""

    def __init__(self, fd: int, parts: list[Part], max_stall_s: float, tls: Encryptor | None = None) -> None:
        self.fd = fd  # a duplicate of the connection's socket, closed when the send ends
        self.parts = parts
        self.max_stall_s = max_stall_s
        self.tls = tls
        self.cancelled = False
        self._in_c = _c_send_parts is not None and not _python_only()

    def cancel(self) -> None:
        self.cancelled = True

    def run(self) -> None:
        """On a sender thread: write every part in order, or raise why it could not."""
        try:
            if self._in_c and self.tls is None:  # C waits for the socket itself: no poller
                self._send_all([(p.fd, p.position, p.size) if type(p) is FileRegion else p for p in self.parts])
                return
            poller = select.poll()
            poller.register(self.fd, select.POLLOUT)
            if self.tls is not None:
                self._send_encrypted(self.tls, poller)
                return
            for part in self.parts:
                if type(part) is FileRegion:
                    self._send_region(part, poller)
                else:
                    self._write(memoryview(part).cast("B"), poller)
        finally:
            os.close(self.fd)
            for part in self.parts:
                if type(part) is FileRegion:
                    part.close()

    def _send_encrypted(self, tls: Encryptor, poller: select.poll) -> None:
        """Read, encrypt and write the parts in chunks of TLS_CHUNK plaintext bytes, gathered
        (a region read straight) into one reused buffer."""
        view = memoryview(bytearray(TLS_CHUNK))
        fill = 0
        for part in self.parts:
            source = part if type(part) is FileRegion else memoryview(part).cast("B")
            size = source.size if type(source) is FileRegion else len(source)
            done = 0
            while done < size:
                n = _copy_into(source, done, view[fill:fill + min(TLS_CHUNK - fill, size - done)])
                done += n
                fill += n
                if fill == TLS_CHUNK:
                    self._encrypt_out(tls, view, poller)
                    fill = 0
        if fill:
            self._encrypt_out(tls, view[:fill], poller)
        while out := tls.end_send():
            self._write(memoryview(out), poller)

    def _encrypt_out(self, tls: Encryptor, chunk: memoryview, poller: select.poll) -> None:
        if self.cancelled:
            raise ConnectionAbortedError("the connection closed while its answer was sent")
        self._write(memoryview(tls.encrypt(chunk)), poller)

    def _send_all(self, spec: list[tuple[int, int, int] | bytes | bytearray | memoryview]) -> None:
        """``spec`` (bytes and (fd, position, size) regions) written in C, which waits for the
        socket without the GIL; back here every _POLL_MS to look whether the send was cancelled
        or the client stopped reading."""
        assert _c_send_parts is not None
        index, offset = 0, 0
        deadline = time.monotonic() + self.max_stall_s
        while True:
            at = index, offset
            index, offset = _c_send_parts(self.fd, spec, index, offset, _POLL_MS)
            if index == len(spec):
                return
            if self.cancelled:
                raise ConnectionAbortedError("the connection closed while its answer was sent")
            if (index, offset) != at:
                deadline = time.monotonic() + self.max_stall_s
            elif time.monotonic() > deadline:
                raise TimeoutError(f"the client read nothing for {self.max_stall_s:g} s")

    def _write(self, view: memoryview, poller: select.poll) -> None:
        if self._in_c:
            self._send_all([view])
            return
        while view:
            try:
                n = os.write(self.fd, view)
            except BlockingIOError:
                self._wait(poller)
                continue
            view = view[n:]

    def _send_region(self, region: FileRegion, poller: select.poll) -> None:
        offset, left = region.position, region.size
        while left:
            try:
                n = os.sendfile(self.fd, region.fd, offset, left)
            except BlockingIOError:
                self._wait(poller)
                continue
            if n == 0:
                raise EOFError(f"{left} bytes of a file region were truncated away while it was sent")
            offset += n
            left -= n

    def _wait(self, poller: select.poll) -> None:
        deadline = time.monotonic() + self.max_stall_s
        while not self.cancelled:
            if poller.poll(_POLL_MS):
                return  # writable, or an error the next write reports
            if time.monotonic() > deadline:
                # As an idle connection: a client that stops reading gives its sender back.
                raise TimeoutError(f"the client read nothing for {self.max_stall_s:g} s")
        raise ConnectionAbortedError("the connection closed while its answer was sent")


class FileSender:
    """The sender threads a listener's connections share."""

    def __init__(self, max_senders: int = MAX_SENDERS, max_stall_ms: int = 600_000) -> None:
        """``max_stall_ms``: how long a send may make no progress before its connection is
        closed (the broker's ``connections.max.idle.ms``)."""
        self.max_senders = max_senders
        self.max_stall_s = max_stall_ms / 1000
        self.active = 0
        # Answers sent from files, and their regions' bytes (the metrics endpoint shows both).
        self.sends = 0
        self.region_bytes_sent = 0
        # The same over TLS: read and encrypted by the thread.
        self.tls_sends = 0
        self.tls_region_bytes_sent = 0
        self._executor: ThreadPoolExecutor | None = None

    def available(self) -> bool:
        return self.active < self.max_senders

    def start(self, sock_fd: int, parts: list[Part], size: int, done: Callable[[BaseException | None], None],
              tls: Encryptor | None = None) -> Send | None:
        """Send ``parts`` on the socket ``sock_fd`` from a thread and call ``done(error)`` on
        the event loop once they are written; None (nothing started) when every sender is
        busy or no descriptor is left. With ``tls``, they are encrypted on the way. ``size``
        is ``regions_size(parts)``, which the caller counted to choose this path; it feeds
        the byte counters."""
        if self.active >= self.max_senders:
            return None
        try:
            fd = os.dup(sock_fd)
        except OSError:
            return None
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.max_senders, thread_name_prefix="rivulet-sendfile")
        send = Send(fd, parts, self.max_stall_s, tls)
        self.active += 1
        fut = asyncio.get_running_loop().run_in_executor(self._executor, send.run)

        def finished(f: asyncio.Future[None]) -> None:
            self.active -= 1
            if f.cancelled():  # shut down before it ran
                os.close(fd)
                done(ConnectionAbortedError("the broker stopped before the answer was sent"))
            else:
                exc = f.exception()
                if exc is None:
                    if tls is None:
                        self.sends += 1
                        self.region_bytes_sent += size
                    else:
                        self.tls_sends += 1
                        self.tls_region_bytes_sent += size
                done(exc)

        fut.add_done_callback(finished)
        return send

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
