"""Fetch answers sent from the segment files (sendfile) carry exactly the records that TLS
connections carry, whose large answers a sender thread reads, encrypts and writes
(``rivulet/server/tls_transport.py``); read_committed and aborted transactions included, and
in request order among small answers pipelined with them. Clients that ask for large answers
and never read them, or close mid-answer, hold at most the sender threads' share of the
broker, which serves everyone else meanwhile and releases every descriptor when they go.
Broken input to the broker's own TLS layer loses only its own connection."""

from __future__ import annotations

import os
import random
import socket
import ssl
import struct
import time
import uuid

import pytest
from ck_helpers import ck_consume_values
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from test_metrics_endpoint import scrape, total

from rivulet.protocol import framing
from rivulet.protocol.messages import api_versions_request as avq
from rivulet.protocol.messages import fetch_request as fq
from rivulet.testing import BrokerProcess, free_port

pytestmark = pytest.mark.integration

PARTITIONS = 3
PER_PARTITION = 1500
VALUE_SIZE = 2000


class Broker:
    def __init__(self, proc: BrokerProcess, ssl_port: int, metrics_port: int) -> None:
        self.proc, self.plain, self.metrics_port = proc, proc.bootstrap, metrics_port
        self.ssl_port, self.ssl = ssl_port, f"127.0.0.1:{ssl_port}"


@pytest.fixture(scope="module")
def broker(tls_certs):
    ssl_port, metrics_port = free_port(), free_port()
    proc = BrokerProcess({})
    proc.overrides.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{proc.port},SSL://127.0.0.1:{ssl_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL",
        **tls_certs.broker_ssl_props(),
        "metrics.listener": f"http://127.0.0.1:{metrics_port}",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.num.partitions": "1",
    })
    proc.start()
    yield Broker(proc, ssl_port, metrics_port)
    proc.cleanup()


def value(p: int, i: int, aborted: bool = False) -> bytes:
    head = f"{'A' if aborted else 'C'}{p}:{i}:".encode()
    return head + bytes((i * 7 + p) % 251 for _ in range(VALUE_SIZE - len(head)))


@pytest.fixture(scope="module")
def topic(broker):
    """Per partition: committed records, then an aborted transaction's, then committed again."""
    name = f"zc-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.plain})
    admin.create_topics([NewTopic(name, num_partitions=PARTITIONS, replication_factor=1)])[name].result(30)
    p = Producer({"bootstrap.servers": broker.plain, "transactional.id": f"tx-{name}", "linger.ms": 20})
    p.init_transactions(30)
    third = PER_PARTITION // 3
    for step, abort in [(range(0, third), False), (range(third, 2 * third), True),
                        (range(2 * third, PER_PARTITION), False)]:
        p.begin_transaction()
        for i in step:
            for part in range(PARTITIONS):
                p.produce(name, value(part, i, abort), partition=part)
        p.flush(60)
        if abort:
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
    return name


def expected(committed_only: bool) -> dict[int, list[bytes]]:
    third = PER_PARTITION // 3
    return {part: [value(part, i, third <= i < 2 * third) for i in range(PER_PARTITION)
                   if not (committed_only and third <= i < 2 * third)] for part in range(PARTITIONS)}


def confluent_read(bootstrap: str, topic: str, committed: bool, conf: dict[str, str]) -> dict[int, list[bytes]]:
    return ck_consume_values(bootstrap, topic, PARTITIONS, sum(len(v) for v in expected(committed).values()), {
        "isolation.level": "read_committed" if committed else "read_uncommitted",
        "fetch.max.bytes": 20_000_000, "max.partition.fetch.bytes": 8_000_000, **conf}, skip_errors=True)


def test_sendfile_and_tls_answers_carry_the_same_records(broker, topic, tls_certs):
    before = scrape(broker.metrics_port)
    plain = confluent_read(broker.plain, topic, True, {})
    after = scrape(broker.metrics_port)
    assert plain == expected(True)
    # Those answers went out with sendfile: tens of MB of records, in more than one answer.
    assert total(after, "rivulet_network_zero_copy_sends_total") > total(before, "rivulet_network_zero_copy_sends_total")
    sent = total(after, "rivulet_network_zero_copy_bytes_total") - total(before, "rivulet_network_zero_copy_bytes_total")
    assert sent >= PARTITIONS * PER_PARTITION * VALUE_SIZE * 2 // 3

    before = scrape(broker.metrics_port)
    tls = confluent_read(broker.ssl, topic, True, tls_conf(tls_certs))
    after = scrape(broker.metrics_port)
    assert tls == plain
    # Those went out from the TLS sender threads, not read and encrypted on the event loop.
    assert total(after, "rivulet_network_tls_sender_sends_total") > total(before, "rivulet_network_tls_sender_sends_total")
    sent = total(after, "rivulet_network_tls_sender_bytes_total") - total(before, "rivulet_network_tls_sender_bytes_total")
    assert sent >= PARTITIONS * PER_PARTITION * VALUE_SIZE * 2 // 3
    assert confluent_read(broker.plain, topic, False, {}) == expected(False)


def test_kafka_python_and_rivulet_read_the_same(broker, topic):
    kp = KafkaConsumer(bootstrap_servers=broker.plain, enable_auto_commit=False, isolation_level="read_committed",
                       fetch_max_bytes=20_000_000, max_partition_fetch_bytes=8_000_000, consumer_timeout_ms=15000)
    kp.assign([KpTopicPartition(topic, part) for part in range(PARTITIONS)])
    kp.seek_to_beginning()
    want = expected(True)
    n = sum(map(len, want.values()))
    got: dict[int, list[bytes]] = {part: [] for part in range(PARTITIONS)}
    for m in kp:
        got[m.partition].append(m.value)
        n -= 1
        if n == 0:
            break
    kp.close()
    assert got == want

    import rivulet
    rc = rivulet.Consumer({"bootstrap.servers": broker.plain, "group.id": uuid.uuid4().hex,
                          "enable.auto.commit": False, "isolation.level": "read_committed"})
    rc.assign([rivulet.TopicPartition(topic, part, rivulet.OFFSET_BEGINNING) for part in range(PARTITIONS)])
    got = {part: [] for part in range(PARTITIONS)}
    n, idle = sum(map(len, want.values())), 0
    while n > 0 and idle < 30:
        msgs = rc.consume(1000, 1.0)
        idle = 0 if msgs else idle + 1
        for m in msgs:
            got[m.partition()].append(m.value())
        n -= len(msgs)
    rc.close()
    assert got == want


def tls_conf(tls_certs) -> dict[str, str]:
    return {"security.protocol": "SSL", "ssl.ca.location": str(tls_certs.ca.pem)}


def fetch_frame(topic: str, correlation_id: int = 1) -> bytes:
    req = fq.FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=50_000_000, isolation_level=0, session_id=0,
        session_epoch=-1, topics=[fq.FetchTopic(topic=topic, partitions=[fq.FetchPartition(
            partition=part, fetch_offset=0, partition_max_bytes=20_000_000, current_leader_epoch=-1,
            log_start_offset=-1, last_fetched_epoch=-1) for part in range(PARTITIONS)])],
        forgotten_topics_data=[], rack_id="")
    return framing.encode_request(req, 12, correlation_id, "zero-copy-test")


def api_versions_frame(correlation_id: int) -> bytes:
    req = avq.ApiVersionsRequest(client_software_name="t", client_software_version="1")
    return framing.encode_request(req, 3, correlation_id, "zero-copy-test")


def connect(broker, tls_certs, listener: str, rcvbuf: int = 0) -> socket.socket:
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect(("127.0.0.1", broker.proc.port if listener == "plaintext" else broker.ssl_port))
    s.settimeout(30)
    if listener == "plaintext":
        return s
    ctx = ssl.create_default_context(cafile=str(tls_certs.ca.pem))
    ctx.check_hostname = False
    return ctx.wrap_socket(s)


def recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        assert chunk, "the broker closed the connection"
        buf += chunk
    return bytes(buf)


def read_frame(s: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", recv_exact(s, 4))
    return recv_exact(s, size)


def broker_fds(broker) -> int:
    return len(os.listdir(f"/proc/{broker.proc.proc.pid}/fd"))


@pytest.mark.parametrize("listener", ["plaintext", "tls"])
def test_clients_that_never_read_their_answers_hold_no_one_up(broker, topic, tls_certs, listener):
    baseline = broker_fds(broker)
    stalled = []
    for i in range(20):  # more than the sender threads: the rest are answered on the loop
        s = connect(broker, tls_certs, listener, rcvbuf=4096)
        s.sendall(fetch_frame(topic, i))
        stalled.append(s)
    try:
        # Clients that close mid-answer: some of it read, the rest never.
        for i in range(5):
            with connect(broker, tls_certs, listener) as s:
                s.sendall(fetch_frame(topic, 100 + i) + api_versions_frame(200 + i))
                assert len(recv_exact(s, 100_000)) == 100_000
        assert confluent_read(broker.plain, topic, True, {}) == expected(True)
    finally:
        for s in stalled:
            s.close()
    # Every stalled answer's descriptors (its socket, its regions) are released.
    deadline = time.monotonic() + 30
    while broker_fds(broker) > baseline + 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert broker_fds(broker) <= baseline + 2
    assert confluent_read(broker.plain, topic, False, {}) == expected(False)


def test_pipelined_answers_keep_request_order_and_match_plaintext(broker, topic, tls_certs):
    with socket.create_connection(("127.0.0.1", broker.proc.port), timeout=30) as plain:
        plain.sendall(fetch_frame(topic, 1))
        reference = read_frame(plain)  # sent with sendfile
    assert len(reference) > PARTITIONS * PER_PARTITION * VALUE_SIZE
    with connect(broker, tls_certs, "tls") as s:
        # Large and small answers pipelined on one connection, several times over.
        frames = [fetch_frame(topic, 1), api_versions_frame(2), api_versions_frame(3), fetch_frame(topic, 1),
                  api_versions_frame(5), fetch_frame(topic, 1), api_versions_frame(7)]
        s.sendall(b"".join(frames))
        answers = [read_frame(s) for _ in frames]
    for frame, answer in zip(frames, answers, strict=True):
        header, _ = framing.decode_request_header(frame[4:])
        assert struct.unpack_from(">i", answer)[0] == header.correlation_id
        if header.api_key == 1:
            assert answer == reference
        else:
            _, resp = framing.decode_response(answer, header.api_key, header.api_version)
            assert resp.error_code == 0


def closed_by_broker(s: socket.socket) -> bool:
    """True once the broker has closed ``s`` (EOF or reset) within the socket's timeout."""
    try:
        while s.recv(65536):
            pass
    except (ConnectionResetError, ssl.SSLError):
        pass
    except TimeoutError:
        return False
    return True


def test_hostile_tls_input_closes_only_its_own_connection(broker, topic, tls_certs):
    """The broker's own TLS layer meets broken input: bytes that are no ClientHello, records that
    are no TLS after a good handshake, a Kafka frame that lies about its size inside good TLS,
    and a handshake left half done. Each loses its own connection only; a TLS client is served
    meanwhile and every record is still there afterwards."""
    rng = random.Random(20261130)
    half = socket.create_connection(("127.0.0.1", broker.ssl_port))
    # The first bytes of a ClientHello record, then nothing: the handshake timeout's case.
    half.sendall(bytes.fromhex("160301020001"))
    try:
        for _ in range(5):
            with socket.create_connection(("127.0.0.1", broker.ssl_port), timeout=30) as s:
                s.sendall(rng.randbytes(4096))
                assert closed_by_broker(s)
        for _ in range(5):
            s = connect(broker, tls_certs, "tls")
            # Garbage on the wire under the TLS session: the broker's record layer must refuse it.
            plain = socket.socket(fileno=os.dup(s.fileno()))
            plain.settimeout(30)
            plain.sendall(bytes([23, 3, 3, 0, 64]) + rng.randbytes(64))
            assert closed_by_broker(plain)
            plain.close()
            s.close()
        with connect(broker, tls_certs, "tls") as s:
            s.sendall(struct.pack(">i", 0x7FFFFFF0) + rng.randbytes(64))
            assert closed_by_broker(s)
        with connect(broker, tls_certs, "tls") as s:  # the half handshake holds no one up
            s.sendall(api_versions_frame(7))
            assert struct.unpack(">i", read_frame(s)[:4]) == (7,)
        assert confluent_read(broker.ssl, topic, False, tls_conf(tls_certs)) == expected(False)
        half.settimeout(30)
        assert closed_by_broker(half)  # ssl.handshake timeout (10 s), as asyncio's transport did
    finally:
        half.close()
