"""The client's request framing must be byte-for-byte what the protocol codec produces; a peer
that is not a Kafka broker is named for what it is, quickly."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from rivulet.client.connection import BrokerConnection, NotKafkaBroker, RequestTimedOut, encode_request_parts
from rivulet.protocol import framing
from rivulet.protocol import records as rec
from rivulet.protocol.messages import api_versions_request as avq
from rivulet.protocol.messages import api_versions_response as avr
from rivulet.protocol.messages import fetch_request as fq
from rivulet.protocol.messages import metadata_request as mq
from rivulet.protocol.messages import produce_request as prq

pytestmark = pytest.mark.fast


def produce(size: int) -> prq.ProduceRequest:
    batch = rec.encode_batch([rec.Record(0, 1, None, b"x" * size, [])])
    return prq.ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
        prq.TopicProduceData(name="t", partition_data=[prq.PartitionProduceData(index=0, records=batch)])])


@pytest.mark.parametrize("req,versions", [
    (avq.ApiVersionsRequest(client_software_name="rivulet", client_software_version="0.1.0"), (0, 3)),
    (mq.MetadataRequest(topics=[mq.MetadataRequestTopic(name="t")], allow_auto_topic_creation=False), (1, 9, 12)),
    (fq.FetchRequest(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                     session_id=0, session_epoch=-1, topics=[fq.FetchTopic(topic="t", partitions=[
                         fq.FetchPartition(partition=0, fetch_offset=5, partition_max_bytes=1 << 20)])],
                     forgotten_topics_data=[], rack_id=""), (4, 11, 12)),
    (produce(10), (3, 8, 9, 11)),
    (produce(100_000), (3, 9, 11)),  # a large batch stays out of line
])
@pytest.mark.parametrize("client_id", ["rivulet", None])
def test_parts_join_to_the_codec_frame(req, versions, client_id):
    for v in versions:
        parts = encode_request_parts(req, v, 42, None if client_id is None else client_id.encode())
        assert b"".join(bytes(p) for p in parts) == framing.encode_request(req, v, 42, client_id)


def test_large_records_are_not_copied():
    req = produce(100_000)
    parts = encode_request_parts(req, 11, 1, b"c")
    batch = req.topic_data[0].partition_data[0].records
    assert any(p is batch for p in parts)


# ---------------------------------------------------------------- a peer that is not Kafka
# Real loopback servers: an HTTP server, a silent listener, and raw ones that answer set bytes.

@contextlib.contextmanager
def http_server() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def raw_server(answer: Callable[[bytes], bytes | None], close_after: bool = False) -> Iterator[int]:
    """Accepts connections; once a request arrives, sends ``answer(request)`` (None: stays silent)."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            held.append(conn)
            try:
                out = answer(conn.recv(65536))
                if out is not None:
                    conn.sendall(out)
                if close_after:
                    conn.close()
            except OSError:
                pass
    threading.Thread(target=serve, daemon=True).start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()
        for c in held:
            c.close()


def connect(port: int, budget: float, probe_silence: bool = True) -> tuple[BaseException, float]:
    async def attempt() -> BaseException:
        conn = BrokerConnection("127.0.0.1", port, probe_silence=probe_silence)
        try:
            await conn.connect(budget)
        except Exception as e:  # noqa: BLE001 - the failure is what is tested
            return e
        finally:
            await conn.close()
        raise AssertionError("connected to a peer that is not Kafka")
    started = time.monotonic()
    err = asyncio.run(attempt())
    return err, time.monotonic() - started


def api_versions_answer(request: bytes, correlation_id: int | None = None) -> bytes:
    """A well-formed ApiVersions v3 answer to ``request`` (its correlation id unless given)."""
    header, _ = framing.decode_request(request[4:])
    resp = avr.ApiVersionsResponse(error_code=0, api_keys=[
        avr.ApiVersion(api_key=k, min_version=lo, max_version=hi)
        for k, (lo, hi) in framing.api_version_ranges().items()])
    cid = header.correlation_id if correlation_id is None else correlation_id
    return bytes(framing.encode_response(resp, 18, 3, cid))


def test_an_http_server_is_named_within_the_budget():
    # Python's http.server answers a binary request only once the client half-closes.
    with http_server() as port:
        err, took = connect(port, 4)
    assert isinstance(err, NotKafkaBroker), err
    assert str(err).startswith(f"127.0.0.1:{port} is not a Kafka broker: it answered like an HTTP server"), err
    assert took < 4


@pytest.mark.parametrize("answer,expected", [
    (b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", "it answered like an HTTP server ('HTTP/1.1 400"),
    (b"\x15\x03\x03\x00\x02\x02\x46", "it answered with a TLS alert: the port expects TLS"),
    (b"SSH-2.0-OpenSSH_9.6\r\n", "it answered like an SSH server"),
    (b"\x7f\xff\xff\xf0garbage", "its answer does not parse as Kafka"),
])
@pytest.mark.parametrize("close_after", [False, True])
def test_what_answered_is_named(answer, expected, close_after):
    with raw_server(lambda _req: answer, close_after) as port:
        err, _ = connect(port, 10)
    assert isinstance(err, NotKafkaBroker), err
    assert f"is not a Kafka broker: {expected}" in str(err), err


def test_a_wrong_correlation_id_is_not_kafka():
    with raw_server(lambda req: api_versions_answer(req, correlation_id=12345)) as port:
        err, _ = connect(port, 10)
    assert isinstance(err, NotKafkaBroker), err
    assert "correlation id 12345" in str(err), err


@pytest.mark.parametrize("probe_silence", [True, False])
def test_a_silent_peer_times_out_within_the_budget(probe_silence):
    with raw_server(lambda _req: None) as port:
        err, took = connect(port, 2, probe_silence)
    assert isinstance(err, RequestTimedOut), err
    assert "no answer to ApiVersions within 2 s" in str(err)
    assert took < 10  # the budget, not request.timeout.ms (30 s)


def test_without_probing_a_slow_first_answer_is_waited_for():
    # The broker's own connections keep the whole set-up time for an answer: here one at 1.5 s of 2.
    def slow(req: bytes) -> bytes:
        time.sleep(1.5)
        return api_versions_answer(req)

    async def attempt() -> dict:
        conn = await BrokerConnection("127.0.0.1", port).connect(2)
        await conn.close()
        return conn.api_versions
    with raw_server(slow) as port:
        assert 18 in asyncio.run(attempt())


def test_a_timed_out_request_names_its_api():
    answered = []

    def answer(req: bytes) -> bytes | None:
        if answered:
            return None
        answered.append(req)
        return api_versions_answer(req)

    async def attempt() -> BaseException:
        conn = await BrokerConnection("127.0.0.1", port).connect(10)
        try:
            await conn.send(mq.MetadataRequest(topics=[], allow_auto_topic_creation=False), timeout=0.5)
        except RequestTimedOut as e:
            return e
        finally:
            await conn.close()
        raise AssertionError("a silent peer answered")
    with raw_server(answer) as port:
        err = asyncio.run(attempt())
    assert "Metadata v" in str(err) and f"request to 127.0.0.1:{port} timed out" in str(err), err


def test_api_names():
    assert (framing.api_name(18), framing.api_name(3), framing.api_name(1)) == ("ApiVersions", "Metadata", "Fetch")
    assert framing.api_name(9999) == "API key 9999"


@pytest.mark.parametrize("answer,expected", [
    (b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", "it answered like an HTTP server ('HTTP/1.1 400"),
    (b"\x15\x03\x03\x00\x02\x02\x46", "it answered with a TLS alert: the port expects TLS"),
])
def test_the_blocking_connection_names_what_answered(answer, expected):
    # The Spark source's executors connect with it: a 1.2 GB "size" is not allocated, it is named.
    from rivulet.client.blocking import BlockingConnection
    with raw_server(lambda _req: answer) as port:
        with pytest.raises(NotKafkaBroker, match=f"127.0.0.1:{port} is not a Kafka broker: {re.escape(expected)}"):
            BlockingConnection("127.0.0.1", port, timeout=10)
    with raw_server(lambda req: api_versions_answer(req, correlation_id=777)) as port:
        with pytest.raises(NotKafkaBroker, match="has correlation id 777"):
            BlockingConnection("127.0.0.1", port, timeout=10)
