"""The broker's TLS read path alone: its event loop's CPU per MB to take ciphertext off the
socket and decrypt it into an application buffer, without a broker, a disk or a load generator
that competes for the figure.

The loop (uvloop, as the broker's) serves one ``TlsTransport`` (TLS 1.3, AES-256-GCM, as the
broker's listener) whose application is a sink: a 1 MiB buffer, as a Produce frame's, that
each read fills and that is then reused. A client process writes ``--mb`` MiB over TLS in 1 MiB
writes as fast as it can. Per round: MB/s and the loop thread's CPU (user+sys) per MB, the
1-minute load average beside it. On a shared machine the CPU per MB is the figure.

    python -m benchmarks.tls_read --mb 1024 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
import sys
import tempfile
import time
from pathlib import Path

import uvloop  # type: ignore[import-not-found]

from rivulet.server.socket_server import TLS_RECEIVE_SIZE
from rivulet.server.tls_transport import TlsTransport
from tests.tls_certs import make_test_certs

CHUNK = 1 << 20

CLIENT = """
import socket, ssl, sys
ctx = ssl.create_default_context(cafile=sys.argv[3])
ctx.minimum_version = ssl.TLSVersion.TLSv1_3
chunk = b"x" * (1 << 20)
with socket.create_connection(("127.0.0.1", int(sys.argv[1]))) as raw:
    with ctx.wrap_socket(raw, server_hostname="localhost") as s:
        for _ in range(int(sys.argv[2])):
            s.sendall(chunk)
        s.recv(1)
"""


class Sink(asyncio.BufferedProtocol):
    """Takes ``total`` bytes into one reused buffer, then answers a byte."""

    def __init__(self, total: int, done: asyncio.Future[float]) -> None:
        self.buf = memoryview(bytearray(CHUNK))
        self.left = total
        self.done = done
        self.transport: asyncio.Transport | None = None
        self.cpu0 = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.cpu0 = time.thread_time()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.buf

    def buffer_updated(self, nbytes: int) -> None:
        self.left -= nbytes
        if self.left <= 0 and not self.done.done():
            self.done.set_result(time.thread_time() - self.cpu0)
            assert self.transport is not None
            self.transport.write(b"k")

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(ConnectionError("closed early"))


async def round_(ctx: ssl.SSLContext, ca: Path, mb: int) -> tuple[float, float]:
    """(MB/s, loop CPU ms per MB) of one client's ``mb`` MiB."""
    loop = asyncio.get_running_loop()
    receive = memoryview(bytearray(TLS_RECEIVE_SIZE))
    done: asyncio.Future[float] = loop.create_future()
    server = await loop.create_server(
        lambda: TlsTransport(ctx, lambda: Sink(mb * CHUNK, done), 10.0, receive), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    start = time.monotonic()
    client = await asyncio.create_subprocess_exec(sys.executable, "-c", CLIENT, str(port), str(mb), str(ca))
    cpu = await done
    wall = time.monotonic() - start
    await client.wait()
    server.close()
    return mb * CHUNK / 1e6 / wall, cpu / (mb * CHUNK / 1e6) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    certs = make_test_certs(Path(tempfile.mkdtemp(prefix="rivulet-tls-read-")))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_cert_chain(certs.broker.cert, certs.broker.key)
    loop = uvloop.new_event_loop()
    for r in range(args.rounds):
        load = os.getloadavg()[0]
        rate, ms = loop.run_until_complete(round_(ctx, certs.ca.pem, args.mb))
        print(f"round {r + 1}: {rate:,.0f} MB/s; the loop {ms:.3f} ms CPU a MB; 1-minute load average "
              f"{load:.2f} -> {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
