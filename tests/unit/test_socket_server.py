"""The socket server's shared limits, without sockets (but for the listening socket's backlog)."""

from __future__ import annotations

import asyncio
import shutil
import struct
import subprocess

import pytest

from rivulet.common.config import ConfigError
from rivulet.server.socket_server import (ConnectionQuotas, MemoryPool, SocketServer, SocketServerConfig,
                                          parse_ip_overrides)

pytestmark = pytest.mark.fast


class FakeConn:
    def __init__(self) -> None:
        self.woken = 0
        self.granted: list[int] = []

    def update_reading(self) -> None:
        self.woken += 1

    def memory_granted(self, n: int) -> None:
        self.granted.append(n)


def test_memory_pool_lets_in_what_fits_and_queues_what_does_not():
    pool = MemoryPool(100)
    a, b, c, small = FakeConn(), FakeConn(), FakeConn(), FakeConn()
    assert pool.try_reserve(a, 60)
    assert not pool.try_reserve(b, 60) and pool.queued(b)  # does not fit in the 40 left
    assert not pool.try_reserve(c, 70) and pool.queued(c)
    assert pool.try_reserve(small, 30)  # a small frame still gets in while large ones wait
    assert pool.used == 90 and not pool.exhausted()
    assert not pool.try_reserve(b, 60)  # asking again keeps its place
    pool.release(30)
    assert (b.granted, c.granted) == ([], [])  # 60 used: neither fits yet
    pool.release(60)
    # The oldest queued frame first; the next one waits for more to come back.
    assert (b.granted, c.granted) == ([60], []) and pool.used == 60
    assert not pool.queued(b) and pool.queued(c)
    pool.release(60)
    assert c.granted == [70] and pool.used == 70


def test_memory_pool_lets_a_frame_larger_than_itself_in_alone():
    pool = MemoryPool(100)
    a, big = FakeConn(), FakeConn()
    assert pool.try_reserve(a, 10)
    assert not pool.try_reserve(big, 250)
    pool.release(10)
    assert big.granted == [250] and pool.used == 250 and pool.exhausted()  # overshoots by one frame


def test_memory_pool_wakes_waiters_when_it_stops_being_exhausted_and_forgets_closed_ones():
    pool = MemoryPool(100)
    holder, a, b, q = FakeConn(), FakeConn(), FakeConn(), FakeConn()
    assert pool.try_reserve(holder, 100) and pool.exhausted()
    pool.wait(a)
    pool.wait(b)
    assert not pool.try_reserve(q, 50)
    pool.forget(b)
    pool.forget(q)  # closed while queued: nothing is granted to it
    pool.release(100)
    assert (a.woken, b.woken, q.granted) == (1, 0, [])
    assert pool.used == 0


def test_unbounded_pool_never_exhausts():
    pool = MemoryPool(-1)
    assert pool.try_reserve(FakeConn(), 10**12)
    assert not pool.exhausted()


def test_connection_quotas_per_ip_override_and_total():
    q = ConnectionQuotas(max_connections=4, per_ip=2, overrides={"10.0.0.9": 3})
    assert q.refusal("10.0.0.1") is None
    assert q.refusal("10.0.0.1") is None
    assert q.refusal("10.0.0.1") == "10.0.0.1 already has the configured maximum of 2 connections"
    assert q.refusal("10.0.0.9") is None
    assert q.refusal("10.0.0.9") is None
    assert q.refusal("10.0.0.9") == "the broker already has the configured maximum of 4 connections"
    q.closed("10.0.0.1")
    assert q.refusal("10.0.0.9") is None
    assert q.total == 4 and q.by_ip == {"10.0.0.1": 1, "10.0.0.9": 3}


def test_ip_overrides_parse_and_refuse_garbage():
    assert parse_ip_overrides("") == {}
    assert parse_ip_overrides("127.0.0.1:5, broker-host:10,::1:2") == {"127.0.0.1": 5, "broker-host": 10, "::1": 2}
    for bad in ("127.0.0.1", "127.0.0.1:x", ":4", "h:-1"):
        with pytest.raises(ConfigError):
            parse_ip_overrides(bad)


# ------------------------------------------------------------ KIP-219: muting a throttled connection
class FakeTransport:
    def get_extra_info(self, name: str) -> object:
        return ("127.0.0.1", 5555) if name == "peername" else None

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def __init__(self, writes: list[tuple[str, bytes]] | None = None, name: str = "") -> None:
        self.paused = False
        self.closed = False
        self.writes = writes if writes is not None else []
        self.name = name

    def write(self, data: bytes) -> None:
        self.writes.append((self.name, bytes(data)))

    def writelines(self, parts: list) -> None:
        self.write(b"".join(parts))

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


def _api_versions_v0(correlation_id: int) -> bytes:
    body = struct.pack(">hhih", 18, 0, correlation_id, 3) + b"raw"
    return struct.pack(">i", len(body)) + body


def test_a_throttled_connection_reads_and_parses_nothing_until_its_time_is_up():
    from rivulet.server.answer import NO_RESPONSE
    from rivulet.server.network import KafkaConnection
    from rivulet.server.socket_server import SocketServer, SocketServerConfig

    async def scenario() -> None:
        handled: list[int] = []

        class Apis:
            def handle(self, header, body, conn):
                handled.append(header.correlation_id)
                if header.correlation_id == 1:
                    conn.throttle(50)
                return NO_RESPONSE

            def api_versions_error(self, code):
                raise AssertionError("not expected")

        server = SocketServer(SocketServerConfig(max_request_bytes=1 << 20, connections_max_idle_ms=600_000))
        server.handler = Apis()
        conn = KafkaConnection(server)
        transport = FakeTransport()
        conn.connection_made(transport)
        data = b"".join(_api_versions_v0(i) for i in (1, 2, 3))
        buf = conn.get_buffer(len(data))
        buf[:len(data)] = data
        conn.buffer_updated(len(data))
        # Answered (nothing to send for these), then muted: the two requests behind it wait.
        assert handled == [1] and transport.paused and conn.throttled
        await asyncio.sleep(0.2)
        assert handled == [1, 2, 3] and not transport.paused and not conn.throttled
        conn.close()

    asyncio.run(scenario())


def test_an_answer_completed_by_another_connections_request_is_written_before_that_requests_own():
    """A Fetch waiting on a Promise that a Produce on another connection sets (the append
    completes the DelayedFetch) is written on the Produce's stack, before the Produce's answer,
    without a turn of the event loop."""
    from rivulet.common.promise import Promise
    from rivulet.protocol.messages import api_versions_response as avr
    from rivulet.server.network import KafkaConnection
    from rivulet.server.socket_server import SocketServer, SocketServerConfig

    async def scenario() -> None:
        waiting: Promise[avr.ApiVersionsResponse] = Promise()

        class Apis:
            def handle(self, header, body, conn):
                if header.correlation_id == 1:  # the consumer's long poll
                    return waiting
                waiting.set_result(avr.ApiVersionsResponse(error_code=0, api_keys=[]))  # the append
                return avr.ApiVersionsResponse(error_code=0, api_keys=[])

            def api_versions_error(self, code):
                raise AssertionError("not expected")

        server = SocketServer(SocketServerConfig(max_request_bytes=1 << 20, connections_max_idle_ms=600_000))
        server.handler = Apis()
        writes: list[tuple[str, bytes]] = []
        consumer, producer = KafkaConnection(server), KafkaConnection(server)
        consumer.connection_made(FakeTransport(writes, "consumer"))
        producer.connection_made(FakeTransport(writes, "producer"))
        for conn, cid in ((consumer, 1), (producer, 2)):
            data = _api_versions_v0(cid)
            buf = conn.get_buffer(len(data))
            buf[:len(data)] = data
            conn.buffer_updated(len(data))
        assert [name for name, _ in writes] == ["consumer", "producer"]
        assert [struct.unpack_from(">i", data, 4)[0] for _, data in writes] == [1, 2]  # correlation ids
        consumer.close()
        producer.close()

    asyncio.run(scenario())


class _RecordsOfProduce:
    """A handler keeping each Produce's first record set, answering none."""

    def __init__(self, got: list[bytes]) -> None:
        self.got = got

    def handle(self, header, body, conn):
        from rivulet.server.answer import NO_RESPONSE
        self.got.append(bytes(body.topic_data[0].partition_data[0].records))
        return NO_RESPONSE

    def api_versions_error(self, code):
        raise AssertionError("not expected")


def test_a_request_larger_than_the_first_frame_chunk_arrives_whole_in_small_reads():
    # Its buffer starts at FIRST_FRAME_CHUNK and grows, unfilled (no zero fill) when the C
    # helper is built: every byte the handler sees must be one that was read.
    from rivulet.client import core
    from rivulet.protocol import framing, records as rec
    from rivulet.server.network import FIRST_FRAME_CHUNK, KafkaConnection, _frame_buffer
    from rivulet.server.socket_server import SocketServer, SocketServerConfig

    got: list[bytes] = []

    batch = rec.encode_batch([rec.Record(0, 0, None, bytes([i % 251]) * 1024, []) for i in range(900)])
    assert len(batch) > 3 * FIRST_FRAME_CHUNK
    data = framing.encode_request(core.produce_request(None, 1, 1000, {("t", 0): batch}), 9, 7, "c")
    server = SocketServer(SocketServerConfig(max_request_bytes=1 << 22, connections_max_idle_ms=600_000))
    server.handler = _RecordsOfProduce(got)
    conn = KafkaConnection(server)
    conn.connection_made(FakeTransport())
    pos = 0
    while pos < len(data):
        buf = conn.get_buffer(-1)
        n = min(len(buf), 100 * 1024, len(data) - pos)
        buf[:n] = data[pos:pos + n]
        conn.buffer_updated(n)
        pos += n
    assert got == [batch]
    big = _frame_buffer(FIRST_FRAME_CHUNK)
    assert type(big) is bytearray and len(big) == FIRST_FRAME_CHUNK
    conn.close()


def test_a_frame_whose_first_read_brings_a_quarter_of_it_gets_its_whole_buffer_at_once():
    """The buffer of a frame the shared read buffer cannot hold is FRAME_GROWTH times what
    arrived of it (at least FIRST_FRAME_CHUNK, at most the frame): a 0.9 MB Produce whose first
    read brings 256 KiB is read into one buffer, never grown and copied; a bare size prefix
    still gets FIRST_FRAME_CHUNK."""
    from rivulet.client import core
    from rivulet.protocol import framing, records as rec
    from rivulet.server.network import FIRST_FRAME_CHUNK, FRAME_GROWTH, KafkaConnection
    from rivulet.server.socket_server import STAGE_SIZE, SocketServer, SocketServerConfig

    got: list[bytes] = []

    batch = rec.encode_batch([rec.Record(0, 0, None, bytes([i % 251]) * 1024, []) for i in range(880)])
    data = framing.encode_request(core.produce_request(None, 1, 1000, {("t", 0): batch}), 9, 7, "c")
    assert STAGE_SIZE < len(data) - 4 <= FRAME_GROWTH * (STAGE_SIZE - 4)
    server = SocketServer(SocketServerConfig(max_request_bytes=1 << 22, connections_max_idle_ms=600_000))
    server.handler = _RecordsOfProduce(got)
    conn = KafkaConnection(server)
    conn.connection_made(FakeTransport())
    buffers = []
    pos = 0
    while pos < len(data):
        buf = conn.get_buffer(-1)
        n = min(len(buf), len(data) - pos)
        buf[:n] = data[pos:pos + n]
        conn.buffer_updated(n)
        pos += n
        if conn.frame is not None:
            buffers.append(conn.frame)
    assert got == [batch]
    assert len(buffers) >= 1 and all(b is buffers[0] for b in buffers)
    assert len(buffers[0]) == len(data) - 4
    # A prefix announcing 4 MiB with 10 bytes behind it: the first chunk, not the announced size.
    other = KafkaConnection(server)
    other.connection_made(FakeTransport())
    prefix = struct.pack(">i", 4 << 20) + bytes(10)
    buf = other.get_buffer(-1)
    buf[:len(prefix)] = prefix
    other.buffer_updated(len(prefix))
    assert other.frame is not None and len(other.frame) == FIRST_FRAME_CHUNK
    conn.close()
    other.close()


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2) to read a listening socket's backlog")
def test_listeners_listen_with_socket_listen_backlog_size():
    async def scenario() -> None:
        server = SocketServer(SocketServerConfig(max_request_bytes=1 << 20, connections_max_idle_ms=600_000,
                                                 listen_backlog_size=7))
        port = await server.bind("127.0.0.1", 0)
        await server.servers[0].start_serving()  # asyncio calls listen() only here
        try:
            # For a listening socket, ss's Send-Q column is the backlog it was given.
            out = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True,
                                 check=True).stdout.split()
            assert out[0] == "LISTEN" and out[2] == "7"
        finally:
            for s in server.servers:
                s.close()

    asyncio.run(scenario())
