"""TlsTransport's read side: ciphertext read into the one receive buffer its server shares,
decrypted into the application's buffer, in order, whatever the reads' sizes."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest

from rivulet.server.tls_transport import TlsTransport


class Raw(asyncio.Transport):
    """The TCP transport's side: keeps what the TLS layer writes."""

    def __init__(self) -> None:
        super().__init__()
        self.out = bytearray()
        self.closed = False
        self.aborted = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.out += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = self.aborted = True

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class App(asyncio.BufferedProtocol):
    """An application that reads into a small buffer of its own and keeps every byte."""

    def __init__(self, size: int) -> None:
        self.buf = bytearray(size)
        self.got = bytearray()
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        pass

    def get_buffer(self, sizehint: int) -> memoryview:
        return memoryview(self.buf)

    def buffer_updated(self, nbytes: int) -> None:
        self.got += self.buf[:nbytes]

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True


class Peer:
    """A client's SSLObject over memory BIOs."""

    def __init__(self, ca: str, cert: Path | None = None, key: Path | None = None) -> None:
        ctx = ssl.create_default_context(cafile=ca)
        if cert is not None:
            ctx.load_cert_chain(cert, key)
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.obj = ctx.wrap_bio(self.incoming, self.outgoing, server_hostname="localhost")

    def step(self) -> bytes:
        try:
            self.obj.do_handshake()
        except ssl.SSLWantReadError:
            pass
        return self.outgoing.read()


def feed(tls: TlsTransport, receive: memoryview, data: bytes, chunk: int) -> None:
    """Deliver ``data`` as the loop would: each read written into the shared buffer."""
    for pos in range(0, len(data), chunk):
        piece = data[pos:pos + chunk]
        buf = tls.get_buffer(-1)
        assert buf.obj is receive.obj  # the server's one buffer, nothing of its own
        buf[:len(piece)] = piece
        tls.buffer_updated(len(piece))


def serve(tls_certs, receive: memoryview, app: App, client_auth: bool = False) -> tuple[TlsTransport, Raw]:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tls_certs.broker.cert, tls_certs.broker.key)
    if client_auth:
        ctx.load_verify_locations(cafile=str(tls_certs.ca.pem))
        ctx.verify_mode = ssl.CERT_REQUIRED
    tls = TlsTransport(ctx, lambda: app, 10.0, receive)
    raw = Raw()
    tls.connection_made(raw)
    return tls, raw


def connect(tls_certs, receive: memoryview, app: App, peer: Peer | None = None,
            client_auth: bool = False) -> tuple[TlsTransport, Raw, Peer]:
    tls, raw = serve(tls_certs, receive, app, client_auth)
    peer = peer or Peer(str(tls_certs.ca.pem))
    while not raw.closed:
        hello = peer.step()
        if hello:
            feed(tls, receive, hello, 1 << 20)
        if raw.out:
            peer.incoming.write(bytes(raw.out))
            raw.out.clear()
        elif not hello:
            break
    return tls, raw, peer


@pytest.mark.parametrize("chunk", [7, 1000, 16 * 1024 + 5, 256 * 1024])
def test_records_of_any_split_arrive_whole_and_in_order(tls_certs, chunk):
    receive = memoryview(bytearray(256 * 1024))
    app = App(40_000)  # smaller than what one read may carry: the transport refills it
    with asyncio.Runner() as runner:
        async def run() -> None:
            tls, _raw, peer = connect(tls_certs, receive, app)
            sent = bytes(range(256)) * 2_000  # 512,000 bytes, 32 records
            peer.obj.write(sent)
            feed(tls, receive, peer.outgoing.read(), chunk)
            assert bytes(app.got) == sent
        runner.run(run())


def test_connections_share_the_receive_buffer(tls_certs):
    receive = memoryview(bytearray(64 * 1024))
    apps = [App(50_000), App(50_000)]
    with asyncio.Runner() as runner:
        async def run() -> None:
            conns = [connect(tls_certs, receive, app) for app in apps]
            sent = [b"a" * 100_000, b"b" * 70_000]
            wires = []
            for (_tls, _raw, peer), data in zip(conns, sent, strict=True):
                peer.obj.write(data)
                wires.append(peer.outgoing.read())
            # Reads of the two connections alternate through the one buffer.
            for pos in range(0, max(map(len, wires)), 30_000):
                for (tls, _raw, _peer), wire in zip(conns, wires, strict=True):
                    if pos < len(wire):
                        feed(tls, receive, wire[pos:pos + 30_000], 30_000)
            assert [bytes(a.got) for a in apps] == sent
        runner.run(run())


def test_close_notify_closes_and_a_broken_record_aborts(tls_certs):
    receive = memoryview(bytearray(64 * 1024))
    with asyncio.Runner() as runner:
        async def run() -> None:
            app = App(1024)
            tls, raw, peer = connect(tls_certs, receive, app)
            try:
                peer.obj.unwrap()
            except ssl.SSLWantReadError:
                pass
            feed(tls, receive, peer.outgoing.read(), 1 << 16)
            assert tls.is_closing() and raw.closed

            app2 = App(1024)
            tls2, raw2, peer2 = connect(tls_certs, receive, app2)
            peer2.obj.write(b"x" * 100)
            wire = bytearray(peer2.outgoing.read())
            wire[-1] ^= 1  # the record's tag no longer matches
            feed(tls2, receive, bytes(wire), 1 << 16)
            assert raw2.closed and app2.got == b""
        runner.run(run())


def test_a_refused_handshake_sends_its_alert_and_closes(tls_certs):
    """As Kafka's SslTransportLayer, the alert OpenSSL makes for a failed handshake is sent
    before the connection closes, so the client learns why (librdkafka reports it) instead of
    seeing a reset. Once sent, the close is an orderly one."""
    receive = memoryview(bytearray(64 * 1024))
    with asyncio.Runner() as runner:
        async def run() -> None:
            # A client certificate from a CA the listener does not trust.
            stranger = Peer(str(tls_certs.ca.pem), tls_certs.stranger.cert, tls_certs.stranger.key)
            app = App(1024)
            tls, raw, peer = connect(tls_certs, receive, app, stranger, client_auth=True)
            assert raw.closed and not raw.aborted and tls.is_closing()
            with pytest.raises(ssl.SSLError, match="UNKNOWN_CA"):
                peer.obj.read(10)
            assert app.got == b""

            # The client refuses the broker's certificate: its alert ends the handshake, and
            # the broker closes without a reset.
            tls2, raw2 = serve(tls_certs, receive, App(1024))
            doubter = Peer(str(tls_certs.other_ca.pem))
            feed(tls2, receive, doubter.step(), 1 << 20)
            doubter.incoming.write(bytes(raw2.out))
            with pytest.raises(ssl.SSLCertVerificationError):
                doubter.obj.do_handshake()
            feed(tls2, receive, doubter.outgoing.read(), 1 << 20)
            assert raw2.closed and not raw2.aborted and tls2.is_closing()
        runner.run(run())
