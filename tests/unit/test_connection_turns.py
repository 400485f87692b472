"""A connection's turn-taking, as Kafka's muted channel: a request starts only once every
earlier one on its connection has been answered, but a Produce behind Produces. Without
sockets: a fake transport and a handler whose answers the tests give."""

from __future__ import annotations

import asyncio
import struct

import pytest
from test_socket_server import FakeTransport

from rivulet.client import core
from rivulet.protocol import framing
from rivulet.server.network import KafkaConnection
from rivulet.server.socket_server import SocketServer, SocketServerConfig

pytestmark = pytest.mark.fast


class Transport(FakeTransport):
    """``test_socket_server``'s fake, keeping the correlation ids of the answers, in the order
    they were written."""

    def __init__(self) -> None:
        super().__init__()
        self.answered: list[int] = []

    def write(self, data: bytes) -> None:
        self.answered.append(struct.unpack_from(">i", data, 4)[0])


class Apis:
    """Starts every request and leaves it waiting until the test answers it."""

    def __init__(self) -> None:
        self.started: list[int] = []
        self.bodies: dict[int, object] = {}
        self.waiting: dict[int, tuple[int, asyncio.Future]] = {}

    def handle(self, header: framing.RequestHeader, body: object, conn: KafkaConnection) -> asyncio.Future:
        self.started.append(header.correlation_id)
        self.bodies[header.correlation_id] = body
        fut = asyncio.get_running_loop().create_future()
        self.waiting[header.correlation_id] = (header.api_key, fut)
        return fut

    def answer(self, correlation_id: int) -> None:
        api_key, fut = self.waiting.pop(correlation_id)
        fut.set_result(framing.response_class(api_key)())

    def api_versions_error(self, code: object) -> object:
        raise AssertionError("not expected")


def commit(cid: int) -> bytes:
    req = core.offset_commit_request("g", {("t", 0): core.OffsetAndMetadata(cid, "", None)})
    return framing.encode_request(req, 8, cid, "c")


def fetch_offsets(cid: int) -> bytes:
    return framing.encode_request(core.offset_fetch_request("g", [("t", 0)]), 7, cid, "c")


def produce(cid: int) -> bytes:
    return framing.encode_request(core.produce_request(None, 1, 1000, {("t", 0): b""}), 9, cid, "c")


def connect(server: SocketServer) -> tuple[KafkaConnection, Transport]:
    conn = KafkaConnection(server)
    transport = Transport()
    conn.connection_made(transport)
    return conn, transport


def receive(conn: KafkaConnection, data: bytes) -> None:
    """One socket read delivering ``data``, through the shared read buffer."""
    buf = conn.get_buffer(len(data))
    buf[:len(data)] = data
    conn.buffer_updated(len(data))


def new_server(apis: Apis, **config: int) -> SocketServer:
    server = SocketServer(SocketServerConfig(max_request_bytes=1 << 20, connections_max_idle_ms=600_000, **config))
    server.handler = apis
    return server


def run(scenario) -> None:
    asyncio.run(scenario())


def test_a_pipelined_request_starts_only_once_the_one_before_is_answered():
    async def scenario() -> None:
        apis = Apis()
        conn, transport = connect(new_server(apis))
        receive(conn, commit(1) + fetch_offsets(2))
        assert apis.started == [1]  # the OffsetFetch waits, unparsed, as in a muted Kafka channel
        assert conn.awaiting_turn and transport.paused
        await asyncio.sleep(0.01)
        assert apis.started == [1]
        apis.answer(1)
        await asyncio.sleep(0)  # the future's callback writes the answer
        assert transport.answered == [1]
        await asyncio.sleep(0)  # the next request starts on a callback of its own
        assert apis.started == [1, 2] and not conn.awaiting_turn and not transport.paused
        apis.answer(2)
        await asyncio.sleep(0)
        assert transport.answered == [1, 2]
        conn.close()

    run(scenario)


def test_a_produce_behind_produces_starts_at_once():
    async def scenario() -> None:
        apis = Apis()
        conn, transport = connect(new_server(apis))
        receive(conn, produce(1) + produce(2) + produce(3))
        assert apis.started == [1, 2, 3] and not conn.awaiting_turn and not transport.paused
        apis.answer(3)
        apis.answer(2)
        await asyncio.sleep(0)
        assert transport.answered == []  # answers still go out in request order
        apis.answer(1)
        await asyncio.sleep(0)
        assert transport.answered == [1, 2, 3]
        conn.close()

    run(scenario)


def test_a_request_other_than_produce_behind_a_produce_waits_and_so_does_a_produce_behind_it():
    async def scenario() -> None:
        apis = Apis()
        conn, transport = connect(new_server(apis))
        receive(conn, produce(1) + produce(2) + fetch_offsets(3) + produce(4))
        assert apis.started == [1, 2] and conn.awaiting_turn and transport.paused
        apis.answer(1)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert apis.started == [1, 2] and transport.paused  # one Produce is still unanswered
        apis.answer(2)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert apis.started == [1, 2, 3] and transport.paused  # the Produce waits behind the OffsetFetch
        apis.answer(3)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert apis.started == [1, 2, 3, 4] and not transport.paused
        apis.answer(4)
        await asyncio.sleep(0)
        assert transport.answered == [1, 2, 3, 4]
        conn.close()

    run(scenario)


def test_a_request_arriving_across_reads_while_one_is_in_flight_waits_whole():
    async def scenario() -> None:
        apis = Apis()
        conn, transport = connect(new_server(apis))
        second = fetch_offsets(2)
        receive(conn, commit(1) + second[:3])  # not even its size prefix yet: reading goes on
        assert apis.started == [1] and not conn.awaiting_turn and not transport.paused
        receive(conn, second[3:10])
        assert conn.awaiting_turn and transport.paused
        apis.answer(1)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert not transport.paused and apis.started == [1]  # the rest is read now
        receive(conn, second[10:])
        assert apis.started == [1, 2]
        conn.close()

    run(scenario)


def test_closing_while_a_request_waits_frees_its_bytes_and_never_starts_it():
    async def scenario() -> None:
        apis = Apis()
        server = new_server(apis, queued_max_request_bytes=1 << 20)
        conn, transport = connect(server)
        first = commit(1)
        receive(conn, first + fetch_offsets(2))
        assert server.pool.used == len(first) - 4 and conn.awaiting_turn
        assert not conn.idle()
        conn.close()
        assert server.pool.used == 0 and conn.held == b"" and not conn.awaiting_turn
        assert conn not in server.connections
        apis.answer(1)
        await asyncio.sleep(0.01)
        assert apis.started == [1] and transport.answered == []

    run(scenario)


def test_closing_after_the_answer_but_before_the_turn_starts_nothing():
    async def scenario() -> None:
        apis = Apis()
        conn, transport = connect(new_server(apis))
        receive(conn, commit(1) + fetch_offsets(2))
        apis.answer(1)
        await asyncio.sleep(0)  # the answer is written, the turn scheduled
        assert transport.answered == [1]
        conn.close()
        await asyncio.sleep(0.01)
        assert apis.started == [1]

    run(scenario)


def test_a_waiting_requests_bytes_survive_other_connections_reusing_the_shared_read_buffer():
    async def scenario() -> None:
        apis = Apis()
        server = new_server(apis)
        a, _ = connect(server)
        b, _ = connect(server)
        receive(a, commit(1) + fetch_offsets(2))
        # b's reads go through the same shared buffer, over where a's waiting frame was read.
        receive(b, produce(10) + produce(11))
        apis.answer(1)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert apis.started == [1, 10, 11, 2]
        body = apis.bodies[2]
        assert body.group_id == "g" and [(t.name, t.partition_indexes) for t in body.topics] == [("t", [0])]
        a.close()
        b.close()

    run(scenario)


def test_the_waiting_request_starts_on_a_later_callback_not_on_the_stack_that_answered():
    """An answer completed synchronously by another connection's request (a Promise set while
    that connection parses the shared read buffer) must not start the waiting frame there."""
    from rivulet.common.promise import Promise

    async def scenario() -> None:
        started: list[tuple[int, int]] = []
        waiting: Promise[object] = Promise()

        class Handler:
            def handle(self, header, body, conn):
                started.append((id(conn), header.correlation_id))
                if header.correlation_id == 1:
                    return waiting  # a's long wait, completed by b's produce below
                if header.correlation_id == 10:
                    waiting.set_result(framing.response_class(8)())
                    # b's next frame is still in the shared buffer, unparsed: a must not be
                    # parsing its own waiting frame into it now.
                    assert started[-1] == (id(conn), 10)
                return framing.response_class(header.api_key)()

            def api_versions_error(self, code):
                raise AssertionError("not expected")

        server = new_server(Apis())
        server.handler = Handler()
        a, ta = connect(server)
        b, tb = connect(server)
        receive(a, commit(1) + fetch_offsets(2))
        receive(b, produce(10) + produce(11))
        assert [cid for _, cid in started] == [1, 10, 11] and ta.answered == [1] and tb.answered == [10, 11]
        await asyncio.sleep(0)
        assert [cid for _, cid in started] == [1, 10, 11, 2] and ta.answered == [1, 2]
        a.close()
        b.close()

    run(scenario)


def test_a_throttled_connection_waits_out_its_mute_before_its_next_turn():
    async def scenario() -> None:
        apis = Apis()
        conn, transport = connect(new_server(apis))
        receive(conn, commit(1) + fetch_offsets(2))
        conn.throttle(50)
        apis.answer(1)
        await asyncio.sleep(0.01)
        assert apis.started == [1] and transport.paused  # answered, but still muted
        await asyncio.sleep(0.1)
        assert apis.started == [1, 2] and not transport.paused
        conn.close()

    run(scenario)
