"""Hostile and idle connections: memory follows what arrives, limits close what is too many,
idle connections expire, and bad input cannot flood the log."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from ck_helpers import ck_consume, ck_produce
from rivulet.testing import BrokerProcess

pytestmark = pytest.mark.integration


def api_versions_frame(correlation_id: int = 1) -> bytes:
    client = b"raw"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client)) + client
    return struct.pack(">i", len(body)) + body


def answered(sock: socket.socket, correlation_id: int = 1, timeout: float = 10) -> bool:
    """Send ApiVersions v0 and read the answer; False when the broker closed the connection."""
    sock.settimeout(timeout)
    try:
        sock.sendall(api_versions_frame(correlation_id))
        head = sock.recv(8, socket.MSG_WAITALL)
    except (ConnectionResetError, BrokenPipeError):
        return False
    if len(head) < 8:
        return False
    size, cid = struct.unpack(">ii", head)
    rest = sock.recv(size - 4, socket.MSG_WAITALL)
    return cid == correlation_id and len(rest) == size - 4


def closed_by_broker(sock: socket.socket, timeout: float = 10) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def records(n: int, size: int = 10) -> list[dict]:
    return [{"key": None, "value": b"%0*d" % (size, i), "headers": None, "timestamp": 0} for i in range(n)]


def test_size_prefixes_alone_allocate_nothing_large(broker):
    """A prefix announcing 100 MB, and then silence, used to cost 100 MB per connection."""
    pid = broker.proc.pid
    before = rss_kib(pid)
    socks = []
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", broker.port))
        s.sendall(struct.pack(">i", 100_000_000) + b"\0" * 100)  # under socket.request.max.bytes
        socks.append(s)
    time.sleep(1.0)  # let the broker read what was sent
    grown_kib = rss_kib(pid) - before
    assert grown_kib < 20 * 1024, f"20 stalled 100 MB prefixes cost {grown_kib} KiB"
    # Everyone else is still served.
    ck_produce(broker.bootstrap, "prefix-victims", records(5))
    assert len(ck_consume(broker.bootstrap, "prefix-victims", 5)) == 5
    for s in socks:
        s.close()


def test_idle_connections_cost_a_few_kib():
    # 2000 connects back to back outrun the accept loop: at Kafka's listen backlog of 50 the
    # overflowing SYNs wait a 1 s retransmission each (30 s in all); memory is the subject here.
    with BrokerProcess({"socket.listen.backlog.size": "2048"}) as broker:
        pid = broker.proc.pid
        warm = socket.create_connection(("127.0.0.1", broker.port))
        assert answered(warm)
        before = rss_kib(pid)
        socks = [socket.create_connection(("127.0.0.1", broker.port)) for _ in range(2000)]
        assert answered(socks[-1])
        per_conn = (rss_kib(pid) - before) / len(socks)
        assert per_conn < 16, f"an idle connection costs {per_conn:.1f} KiB"
        for s in socks + [warm]:
            s.close()


def test_max_connections_per_ip_and_overrides():
    with BrokerProcess({"max.connections.per.ip": "3"}) as b:
        socks = [socket.create_connection(("127.0.0.1", b.port)) for _ in range(3)]
        assert all(answered(s, i) for i, s in enumerate(socks))
        extra = socket.create_connection(("127.0.0.1", b.port))
        assert closed_by_broker(extra)
        socks[0].close()
        time.sleep(0.3)
        again = socket.create_connection(("127.0.0.1", b.port))
        assert answered(again)  # a freed slot is usable again
        for s in socks[1:] + [again, extra]:
            s.close()
    with BrokerProcess({"max.connections.per.ip": "1", "max.connections.per.ip.overrides": "127.0.0.1:4"}) as b:
        socks = [socket.create_connection(("127.0.0.1", b.port)) for _ in range(4)]
        assert all(answered(s, i) for i, s in enumerate(socks))
        extra = socket.create_connection(("127.0.0.1", b.port))
        assert closed_by_broker(extra)
        for s in socks + [extra]:
            s.close()


def test_max_connections():
    with BrokerProcess({"max.connections": "2"}) as b:
        socks = [socket.create_connection(("127.0.0.1", b.port)) for _ in range(2)]
        assert all(answered(s, i) for i, s in enumerate(socks))
        extra = socket.create_connection(("127.0.0.1", b.port))
        assert closed_by_broker(extra)
        for s in socks + [extra]:
            s.close()


def test_connection_limits_change_at_run_time():
    """max.connections.per.ip is a dynamic config in Kafka: an AlterConfigs on the broker
    applies to the next connection, and open ones stay."""
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                       ResourceType)
    with BrokerProcess({}) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})

        def set_limit(value: str | None) -> None:
            op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
            res = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
                ConfigEntry("max.connections.per.ip", value, incremental_operation=op)])
            for f in admin.incremental_alter_configs([res]).values():
                f.result(timeout=10)

        socks = [socket.create_connection(("127.0.0.1", b.port)) for _ in range(2)]
        assert all(answered(s, i) for i, s in enumerate(socks))
        set_limit("2")  # the admin client's own connection is one more from 127.0.0.1
        extra = socket.create_connection(("127.0.0.1", b.port))
        assert closed_by_broker(extra)
        assert all(answered(s, 10 + i) for i, s in enumerate(socks))  # open ones stay
        set_limit(None)
        again = socket.create_connection(("127.0.0.1", b.port))
        assert answered(again)
        for s in socks + [extra, again]:
            s.close()


def test_idle_connections_expire():
    with BrokerProcess({"connections.max.idle.ms": "500"}) as b:
        idle = socket.create_connection(("127.0.0.1", b.port))
        busy = socket.create_connection(("127.0.0.1", b.port))
        assert answered(idle, 1) and answered(busy, 1)
        for i in range(15):  # 3 s of traffic on one, silence on the other
            assert answered(busy, i + 2)
            time.sleep(0.2)
        assert closed_by_broker(idle, timeout=5)
        assert answered(busy, 100)
        idle.close()
        busy.close()


def test_request_memory_pool_applies_back_pressure_not_errors():
    """With queued.max.request.bytes far below what producers send at once, every record is
    still acknowledged: connections wait for memory instead of failing."""
    # Kafka refuses a pool smaller than the largest request: both 256 KiB, and the producer's
    # requests kept under that, five in flight.
    pool = 256 * 1024
    with BrokerProcess({"queued.max.request.bytes": str(pool), "socket.request.max.bytes": str(pool),
                        "num.partitions": "1"}) as b:
        for i in range(3):
            ck_produce(b.bootstrap, "pooled", records(200, size=4000),
                       **{"batch.size": 200_000, "message.max.bytes": 200_000, "linger.ms": 50})
        got = ck_consume(b.bootstrap, "pooled", 600)
        assert [r["value"] for r in got] == [r["value"] for r in records(200, size=4000)] * 3


def test_bad_frames_do_not_flood_the_log(broker):
    before = broker.output().count("closing")
    for _ in range(300):
        s = socket.create_connection(("127.0.0.1", broker.port))
        s.sendall(struct.pack(">i", 12) + b"\xff" * 12)  # api key -1: not a request header
        closed_by_broker(s, timeout=5)
        s.close()
    time.sleep(0.2)
    lines = broker.output().count("closing") - before
    assert 1 <= lines <= 20, f"{lines} log lines for 300 bad frames"


class PartialFrame:
    """A connection that announces a frame of ``size`` bytes and sends ``sent`` of them from a
    thread; ``done`` once the broker has taken them all (a connection that waits for memory
    stops reading, so its sender stalls)."""

    def __init__(self, port: int, size: int, sent: int) -> None:
        import threading
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.error: BaseException | None = None
        payload = struct.pack(">i", size) + b"\0" * sent
        self.thread = threading.Thread(target=self._send, args=(payload,), daemon=True)
        self.thread.start()

    def _send(self, payload: bytes) -> None:
        try:
            self.sock.sendall(payload)
        except OSError as e:  # closed by the test
            self.error = e

    def done(self, timeout: float = 0) -> bool:
        self.thread.join(timeout)
        return not self.thread.is_alive() and self.error is None

    def close(self) -> None:
        self.sock.close()
        self.thread.join(30)


def test_request_memory_pool_is_one_pool_for_all_connections():
    """queued.max.request.bytes=64 MiB and eight connections at once, each announcing a 40 MB
    frame and sending 20 MB of it, then stalling: one frame is let in, the others wait unread,
    so the broker's RSS grows by what that frame holds, within the pool. A normal client is still served meanwhile, and once the connection holding the
    memory closes mid-frame, a waiting frame is let in."""
    pool, size, sent = 64 * 1024 * 1024, 40_000_000, 20_000_000
    with BrokerProcess({"queued.max.request.bytes": str(pool), "socket.request.max.bytes": str(pool)}) as b:
        probe = socket.create_connection(("127.0.0.1", b.port))
        assert answered(probe, 1)
        before = rss_kib(b.proc.pid)
        frames = [PartialFrame(b.port, size, sent) for _ in range(8)]
        try:
            deadline = time.monotonic() + 120
            while not any(f.done() for f in frames):  # the broker has read all of one frame
                assert time.monotonic() < deadline, "no frame was let in"
                time.sleep(0.2)
            # A normal client, on a new connection and on one opened before, is served while
            # the big frames wait (which also lets the broker read whatever it would).
            ck_produce(b.bootstrap, "pool-victims", records(5))
            assert len(ck_consume(b.bootstrap, "pool-victims", 5)) == 5
            assert answered(probe, 2)
            grown_mib = (rss_kib(b.proc.pid) - before) / 1024
            # The frames let in hold no more than the pool (RSS counts the 20 MB that arrived of
            # the one let in: about 21 MiB); every connection reading its frame grew it by 160 MiB.
            assert grown_mib < pool / 2**20, f"RSS grew by {grown_mib:.0f} MiB"
            let_in = [f for f in frames if f.done()]
            assert len(let_in) == 1, f"{len(let_in)} frames of 40 MB let into a pool of 64 MiB"
            # The connection holding the memory closes mid-frame: its memory goes to a waiting frame.
            let_in[0].close()
            waiting = [f for f in frames if f is not let_in[0]]
            deadline = time.monotonic() + 120
            while not any(f.done() for f in waiting):
                assert time.monotonic() < deadline, "no waiting frame was let in after the close"
                time.sleep(0.2)
            assert sum(f.done() for f in waiting) == 1
            assert answered(probe, 3)
        finally:
            for f in frames:
                f.close()
            probe.close()


def test_a_request_that_stops_arriving_expires_and_gives_its_memory_back():
    """A connection whose frame stops arriving part-way is closed after connections.max.idle.ms
    (it was kept for good, holding its pool memory), and the frame waiting for that memory
    gets in."""
    pool = 8 * 1024 * 1024
    with BrokerProcess({"connections.max.idle.ms": "1000", "queued.max.request.bytes": str(pool),
                        "socket.request.max.bytes": str(pool)}) as b:
        stalled = socket.create_connection(("127.0.0.1", b.port))
        stalled.sendall(struct.pack(">i", 6_000_000) + b"\0" * 1000)
        assert answered(socket.create_connection(("127.0.0.1", b.port)), 1)  # it was read
        waiting = PartialFrame(b.port, 6_000_000, 5_000_000)
        try:
            assert closed_by_broker(stalled, timeout=30)
            assert waiting.done(timeout=60), "the waiting frame did not get the memory back"
        finally:
            waiting.close()
            stalled.close()
