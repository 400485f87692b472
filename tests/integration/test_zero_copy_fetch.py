"""Fetch answers sent from the segment files (sendfile) carry exactly the records that TLS
connections, which read them into memory, carry; read_committed and aborted transactions
included. Clients that ask for large answers and never read them hold at most the sender
threads' share of the broker, which serves everyone else meanwhile and releases every
descriptor when they go."""

from __future__ import annotations

import os
import socket
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from test_metrics_endpoint import scrape, total

from rivulet.protocol import framing
from rivulet.protocol.messages import fetch_request as fq
from rivulet.testing import BrokerProcess, free_port

pytestmark = pytest.mark.integration

PARTITIONS = 3
PER_PARTITION = 1500
VALUE_SIZE = 2000


class Broker:
    def __init__(self, proc: BrokerProcess, ssl: str, metrics_port: int) -> None:
        self.proc, self.plain, self.ssl, self.metrics_port = proc, proc.bootstrap, ssl, metrics_port


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
    yield Broker(proc, f"127.0.0.1:{ssl_port}", metrics_port)
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
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, "enable.auto.commit": False,
                  "isolation.level": "read_committed" if committed else "read_uncommitted",
                  "fetch.max.bytes": 20_000_000, "max.partition.fetch.bytes": 8_000_000, **conf})
    c.assign([TopicPartition(topic, part, OFFSET_BEGINNING) for part in range(PARTITIONS)])
    want = sum(len(v) for v in expected(committed).values())
    got: dict[int, list[bytes]] = {part: [] for part in range(PARTITIONS)}
    n, idle = 0, 0
    while n < want and idle < 30:
        msgs = c.consume(1000, 1.0)
        idle = 0 if msgs else idle + 1
        for m in msgs:
            if m.error() is None:
                got[m.partition()].append(m.value())
                n += 1
    c.close()
    return got


def test_sendfile_and_tls_answers_carry_the_same_records(broker, topic, tls_certs):
    before = scrape(broker.metrics_port)
    plain = confluent_read(broker.plain, topic, True, {})
    after = scrape(broker.metrics_port)
    assert plain == expected(True)
    # Those answers went out with sendfile: tens of MB of records, in more than one answer.
    assert total(after, "rivulet_network_zero_copy_sends_total") > total(before, "rivulet_network_zero_copy_sends_total")
    sent = total(after, "rivulet_network_zero_copy_bytes_total") - total(before, "rivulet_network_zero_copy_bytes_total")
    assert sent >= PARTITIONS * PER_PARTITION * VALUE_SIZE * 2 // 3

    tls = confluent_read(broker.ssl, topic, True, {"security.protocol": "SSL", "ssl.ca.location": str(tls_certs.ca.pem)})
    assert tls == plain
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


def fetch_frame(topic: str) -> bytes:
    req = fq.FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=50_000_000, isolation_level=0, session_id=0,
        session_epoch=-1, topics=[fq.FetchTopic(topic=topic, partitions=[fq.FetchPartition(
            partition=part, fetch_offset=0, partition_max_bytes=20_000_000, current_leader_epoch=-1,
            log_start_offset=-1, last_fetched_epoch=-1) for part in range(PARTITIONS)])],
        forgotten_topics_data=[], rack_id="")
    return framing.encode_request(req, 12, 1, "stalled")


def broker_fds(broker) -> int:
    return len(os.listdir(f"/proc/{broker.proc.proc.pid}/fd"))


def test_clients_that_never_read_their_answers_hold_no_one_up(broker, topic):
    baseline = broker_fds(broker)
    stalled = []
    for _ in range(20):  # more than the sender threads: the rest are answered on the loop
        s = socket.create_connection(("127.0.0.1", broker.proc.port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(fetch_frame(topic))
        stalled.append(s)
    try:
        assert confluent_read(broker.plain, topic, True, {}) == expected(True)
    finally:
        for s in stalled:
            s.close()
    # Every stalled answer's descriptors (its socket, its regions) are released.
    import time
    deadline = time.monotonic() + 30
    while broker_fds(broker) > baseline + 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert broker_fds(broker) <= baseline + 2
    assert confluent_read(broker.plain, topic, False, {}) == expected(False)
