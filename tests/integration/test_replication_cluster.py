"""Replication across real broker processes in ZooKeeper mode, driven by a real Kafka client
(confluent-kafka): a kill -9 of the leader during acks=all production loses no acknowledged
record, the ISR shrinks and re-expands when the broker returns; a leader paused with SIGSTOP
long enough to lose its leadership truncates its divergent tail when it resumes, and every
replica's log is byte-identical up to the high watermark."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import confluent_kafka
import pytest
from history import History
from cluster import ZkCluster, eventually

from rivulet.admin import AdminClient, NewTopic
from rivulet.protocol import records as rec
from rivulet.testing import BrokerProcess

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

BROKER = {"replica.lag.time.max.ms": "3000", "replica.fetch.wait.max.ms": "100", "replica.fetch.backoff.ms": "200",
          "offsets.topic.replication.factor": "3", "offsets.topic.num.partitions": "1",
          "transaction.state.log.num.partitions": "1"}


def state(cluster: ZkCluster) -> dict:
    try:
        return cluster.partition_state("orders", 0)
    except Exception:
        return {}


def bootstrap(cluster: ZkCluster, without: int | None = None) -> str:
    return ",".join(b.bootstrap for i, b in cluster.brokers.items() if i != without)


def segments(cluster: ZkCluster, broker_id: int) -> bytes:
    d = Path(cluster.brokers[broker_id].data_dir) / "orders-0"
    return b"".join(p.read_bytes() for p in sorted(d.glob("*.log")))


@pytest.fixture
def cluster(zk_connect):
    c = ZkCluster(zk_connect)
    try:
        for i in (1, 2, 3):
            c.start(i, **BROKER)
        admin = AdminClient({"bootstrap.servers": bootstrap(c)})
        eventually(lambda: len(admin.list_topics(timeout=10).brokers) == 3, what="three brokers")
        admin.create_topics([NewTopic("orders", 1, 3, config={"min.insync.replicas": "2"})])["orders"].result(30)
        eventually(lambda: len(state(c).get("isr", [])) == 3, what="the partition's leader and ISR")
        yield c
    finally:
        c.close()


def produce(servers: str, history: History, values: list[bytes], during: Callable[[int], None] | None = None,
            acks: str = "all") -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": servers, "acks": acks, "enable.idempotence": acks == "all",
                                  "message.timeout.ms": 60000, "linger.ms": 5})

    def report(err, msg) -> None:
        if err is None:
            history.ack(msg.partition(), msg.offset(), msg.value())

    for i, v in enumerate(values):
        p.produce("orders", v, partition=0, on_delivery=report)
        p.poll(0)
        if during is not None:
            during(i)
        if i % 50 == 49:
            p.flush(30)
    assert p.flush(90) == 0


def read_all(servers: str, history: History, expected: int) -> None:
    c = confluent_kafka.Consumer({"bootstrap.servers": servers, "group.id": "checker", "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest"})
    try:
        c.assign([confluent_kafka.TopicPartition("orders", 0, 0)])
        history.new_read_sequence()
        n = 0
        deadline = time.monotonic() + 60
        while n < expected and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            history.read(m.partition(), m.offset(), m.value())
            n += 1
    finally:
        c.close()


def test_killing_the_leader_during_acks_all_loses_no_acknowledged_record(cluster):
    history = History()
    first = state(cluster)["leader"]

    def kill_leader(i: int) -> None:
        if i == 150:
            cluster.brokers[first].kill()

    produce(bootstrap(cluster), history, [f"v{i}".encode() for i in range(300)], during=kill_leader)
    eventually(lambda: state(cluster).get("leader") not in (None, -1, first), what="a new leader")
    assert first not in state(cluster)["isr"]  # the ISR shrank
    read_all(bootstrap(cluster), history, len(history.acked))
    anomalies = history.check()
    assert not anomalies, anomalies.summary()
    assert len(history.acked) == 300

    # The broker returns, catches up and rejoins the ISR.
    cluster.brokers[first].start()  # the same data dir and port
    eventually(lambda: sorted(state(cluster).get("isr", [])) == [1, 2, 3], what="the ISR re-expands")


def test_a_paused_leader_truncates_its_divergent_tail_and_replicas_converge(cluster):
    history = History()
    old = state(cluster)["leader"]
    produce(bootstrap(cluster), history, [f"a{i}".encode() for i in range(50)])
    # The leader stops (SIGSTOP) long enough for its session to expire and another to lead.
    cluster.brokers[old].pause()
    try:
        eventually(lambda: state(cluster).get("leader") not in (None, -1, old), what="a new leader")
        new_epoch = state(cluster)["leader_epoch"]
        produce(bootstrap(cluster, without=old), history, [f"b{i}".encode() for i in range(50)])
    finally:
        cluster.brokers[old].resume()
    eventually(lambda: sorted(state(cluster).get("isr", [])) == [1, 2, 3], what="the old leader rejoins the ISR")
    read_all(bootstrap(cluster), history, len(history.acked))
    anomalies = history.check()
    if anomalies:
        for i, b in cluster.brokers.items():
            print(f"=== broker {i} (old leader {old})\n", b.output()[-6000:])
    assert not anomalies, anomalies.summary()

    # Every replica's log, up to the HW, holds the same bytes.
    def up_to_hw(data: bytes) -> bytes:
        end = 0
        for pos, h in rec.iter_batches(data):
            if h.last_offset >= 100:
                break
            end = pos + h.size
        return data[:end]

    eventually(lambda: len({up_to_hw(segments(cluster, i)) for i in (1, 2, 3)}) == 1, what="byte-identical replicas")
    data = up_to_hw(segments(cluster, old))
    assert data and max(h.partition_leader_epoch for _, h in rec.iter_batches(data)) == new_epoch
