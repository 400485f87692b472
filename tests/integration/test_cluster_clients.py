"""The real clients against a 3-broker cluster (RF=3, min.insync.replicas=2), not only against one
broker: kafka-python, aiokafka, kcat and confluent-kafka produce, consume and run groups across
three leaders; Rivulet's own consumer goes on through a leader's kill -9, checking its position
against the new leader's log (KIP-320)."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import time
import uuid

import pytest

from tests.cluster import ZkCluster, eventually, three_brokers
from tests.integration.test_replication_faults import BROKER_CONFIG, create_topic

pytestmark = [pytest.mark.integration, pytest.mark.cluster]


@pytest.fixture(scope="module")
def cluster(module_zk_connect):
    with three_brokers(module_zk_connect, **BROKER_CONFIG, **{"min.insync.replicas": "2",
                                                             "group.initial.rebalance.delay.ms": "0"}) as c:
        yield c


def _topic(cluster: ZkCluster, prefix: str, partitions: int = 3) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, name, partitions)
    return name


def _leaders(cluster: ZkCluster, topic: str, partitions: int = 3) -> set[int]:
    return {cluster.partition_state(topic, p)["leader"] for p in range(partitions)}


def test_kafka_python_produces_and_consumes_as_a_group(cluster):
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

    topic = _topic(cluster, "kp")
    assert _leaders(cluster, topic) == {1, 2, 3}  # one leader per broker: every client talks to all three
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        described = admin.describe_topics([topic])[0]
        assert sorted(len(p["replica_nodes"]) for p in described["partitions"]) == [3, 3, 3], described
        assert len(admin.describe_cluster()["brokers"]) == 3
    finally:
        admin.close()
    p = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    values = [b"kp-%04d" % i for i in range(600)]
    for v in values:
        p.send(topic, v, key=v)
    p.flush(30)
    p.close()
    c = KafkaConsumer(topic, bootstrap_servers=cluster.bootstrap, group_id=f"g-{topic}",
                      auto_offset_reset="earliest", consumer_timeout_ms=20000)
    got = [m.value for m in c]
    c.commit()
    c.close()
    assert sorted(got) == values


def test_aiokafka_transactions_across_three_leaders(cluster):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic = _topic(cluster, "aio")

    async def run() -> list[bytes]:
        p = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, transactional_id=f"tx-{topic}")
        await p.start()
        try:
            async with p.transaction():
                for i in range(300):
                    await p.send(topic, b"ok-%03d" % i, partition=i % 3)
            await p.begin_transaction()
            await p.send(topic, b"aborted", partition=0)
            await p.abort_transaction()
        finally:
            await p.stop()
        c = AIOKafkaConsumer(topic, bootstrap_servers=cluster.bootstrap, group_id=f"g-{topic}",
                             auto_offset_reset="earliest", isolation_level="read_committed")
        await c.start()
        got: list[bytes] = []
        try:
            deadline = time.monotonic() + 60
            while len(got) < 300 and time.monotonic() < deadline:
                batch = await c.getmany(timeout_ms=1000)
                got += [m.value for ms in batch.values() for m in ms]
            extra = await c.getmany(timeout_ms=2000)
            got += [m.value for ms in extra.values() for m in ms]
        finally:
            await c.stop()
        return got

    got = asyncio.run(run())
    assert sorted(got) == [b"ok-%03d" % i for i in range(300)]


def test_kcat_metadata_produce_and_consume(cluster):
    topic = _topic(cluster, "kcat")
    md = json.loads(subprocess.run(["kcat", "-b", cluster.bootstrap, "-L", "-J", "-t", topic],
                                   capture_output=True, text=True, timeout=60, check=True).stdout)
    assert sorted(b["id"] for b in md["brokers"]) == [1, 2, 3]
    t = md["topics"][0]
    for p in t["partitions"]:
        assert len(p["replicas"]) == 3 and len(p["isrs"]) == 3 and p["leader"] in (1, 2, 3)
    lines = "\n".join(f"k{i}:v{i}" for i in range(300)) + "\n"
    subprocess.run(["kcat", "-b", cluster.bootstrap, "-P", "-t", topic, "-K:", "-X", "acks=all"],
                   input=lines, text=True, timeout=60, check=True)
    out = subprocess.run(["kcat", "-b", cluster.bootstrap, "-C", "-t", topic, "-e", "-q", "-f", "%k:%s\n"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert sorted(out.split()) == sorted(lines.split())


def test_confluent_kafka_group_of_three_members(cluster):
    from confluent_kafka import Consumer, Producer

    topic = _topic(cluster, "ck", partitions=6)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True})
    for i in range(1200):
        p.produce(topic, b"ck-%04d" % i, key=b"%d" % i)
    assert p.flush(30) == 0
    members = [Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{topic}",
                         "auto.offset.reset": "earliest", "partition.assignment.strategy": "cooperative-sticky"})
               for _ in range(3)]
    for m in members:
        m.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 90
    while len(got) < 1200 and time.monotonic() < deadline:
        for m in members:
            msg = m.poll(0.2)
            if msg is not None and not msg.error():
                got.append(msg.value())
    owned = [len(m.assignment()) for m in members]
    for m in members:
        m.close()
    assert sorted(got) == sorted(b"ck-%04d" % i for i in range(1200))
    assert sum(owned) == 6 and all(n > 0 for n in owned)


def test_rivulet_consumer_goes_on_through_a_leader_kill(cluster, caplog):
    from rivulet import Consumer, Producer, TopicPartition

    # The clients' own account (connections, metadata, fetches) goes with a failure's report.
    caplog.set_level(logging.DEBUG, logger="rivulet")

    topic = _topic(cluster, "riv", partitions=1)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(2000):
        p.produce(topic, b"r-%05d" % i)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{topic}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[int] = []
    deadline = time.monotonic() + 30
    while len(got) < 1000 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.offset())
    assert c.commit(asynchronous=False)[0].offset == 1000  # with all three up: the group's home is made
    leader = cluster.partition_state(topic, 0)["leader"]
    epoch = cluster.partition_state(topic, 0)["leader_epoch"]
    cluster.brokers[leader].kill()
    try:
        eventually(lambda: cluster.partition_state(topic, 0)["leader_epoch"] > epoch, 60, "a new leader")
        for i in range(2000, 3000):
            p.produce(topic, b"r-%05d" % i)
        assert p.flush(60) == 0
        deadline = time.monotonic() + 60
        while len(got) < 3000 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.offset())
        committed = c.commit(asynchronous=False)
    finally:
        c.close()
        p.close()
        cluster.restart(leader)
        eventually(lambda: sorted(cluster.partition_state(topic, 0)["isr"]) == [1, 2, 3], 90, "a full ISR again")
    assert got == list(range(3000))  # in order, none twice, none missed
    # The commit carries the leader epoch of the last record read: the new leader's.
    assert committed[0].offset == 3000 and committed[0].leader_epoch > epoch
