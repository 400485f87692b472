"""SASL in a ZooKeeper cluster: the brokers talk to each other over a SASL_PLAINTEXT listener
with SCRAM-SHA-512 (sasl.mechanism.inter.broker.protocol), as the inter-broker user that
`rivulet users add --zookeeper` wrote into /config/users before any broker ran; a SCRAM user
added through one broker authenticates on the others (the /config/changes notification),
and its removal reaches them too."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from rivulet.testing import BrokerProcess, free_port
from tests.cluster import ZkCluster, eventually
from tests.integration.test_replication_faults import BROKER_CONFIG, create_topic
from tests.integration.test_sasl import ck_round_trip, first_error

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

BROKER_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
               'username="broker" password="broker-secret";')


def start_broker(cluster: ZkCluster, broker_id: int) -> BrokerProcess:
    b = BrokerProcess({"zookeeper.connect": cluster.connect, "zookeeper.session.timeout.ms": "4000",
                       "broker.id": str(broker_id), **BROKER_CONFIG, "min.insync.replicas": "3"})
    b.sasl_port = free_port()
    b.overrides.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{b.port},REPLICATION://127.0.0.1:{b.sasl_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,REPLICATION:SASL_PLAINTEXT",
        "inter.broker.listener.name": "REPLICATION",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.replication.scram-sha-512.sasl.jaas.config": BROKER_JAAS,
    })
    cluster.brokers[broker_id] = b.start()
    return b


def users(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rivulet", "users", *args], input=stdin, capture_output=True,
                          text=True, timeout=60)


def test_inter_broker_scram_and_users_across_brokers(zk_connect):
    from confluent_kafka import Consumer, Producer, TopicPartition
    r = users("add", "--zookeeper", zk_connect, "--user", "broker", "--mechanism", "SCRAM-SHA-512",
              "--password", "broker-secret")
    assert r.returncode == 0, r.stderr
    assert "broker\tSCRAM-SHA-512=[iterations=4096]" in users("list", "--zookeeper", zk_connect).stdout
    cluster = ZkCluster(zk_connect)
    try:
        for i in (1, 2, 3):
            start_broker(cluster, i)
        cluster.wait_for_brokers([1, 2, 3])
        # Kafka's ZooKeeper-mode form: {"version":1,"config":{"SCRAM-SHA-512":"salt=...,stored_key=..."}}
        stored = cluster.json("/config/users/broker")
        assert stored["version"] == 1 and stored["config"]["SCRAM-SHA-512"].startswith("salt=")
        assert stored["config"]["SCRAM-SHA-512"].endswith(",iterations=4096")
        assert cluster.json("/brokers/ids/1")["listener_security_protocol_map"]["REPLICATION"] == "SASL_PLAINTEXT"
        topic = f"sasl-repl-{uuid.uuid4().hex[:6]}"
        create_topic(cluster, topic, 2)
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
        for i in range(100):
            p.produce(topic, f"v{i}".encode(), key=f"k{i}".encode())
        assert p.flush(60) == 0
        # With min.insync.replicas=3 every acknowledged write was fetched by both followers,
        # over the SASL listener.
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": topic})
        assert sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=20)[1] for p in range(2)) == 100
        c.close()
        # A user added through broker 1 authenticates on broker 3, and its removal reaches it.
        b1, b3 = cluster.brokers[1], cluster.brokers[3]
        r = subprocess.run([sys.executable, "-m", "rivulet", "users", "add", "-b", b1.bootstrap, "--user", "app",
                            "--mechanism", "SCRAM-SHA-512", "--password", "app-secret"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        conf = {"bootstrap.servers": f"127.0.0.1:{b3.sasl_port}", "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "app", "sasl.password": "app-secret"}
        eventually(lambda: _authenticates(conf), 30, "the new user authenticating on another broker")
        ck_round_trip(conf, f"sasl-app-{uuid.uuid4().hex[:6]}")
        r = subprocess.run([sys.executable, "-m", "rivulet", "users", "remove", "-b", b1.bootstrap, "--user", "app"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        eventually(lambda: not _authenticates(conf), 30, "the removed user refused on another broker")
        assert "invalid credentials" in first_error(conf).str()
    finally:
        cluster.close()


def _authenticates(conf: dict) -> bool:
    from confluent_kafka.admin import AdminClient
    try:
        AdminClient(conf).list_topics(timeout=5)
        return True
    except Exception:
        return False

