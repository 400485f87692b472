"""Three brokers whose inter-broker listener is SSL with mutual TLS: the controller's requests,
the replica fetchers and AlterPartition all go over it, while clients use a PLAINTEXT
listener. acks=all with min.insync.replicas=3 completes only when both followers fetched
the records, so every acknowledged write crossed TLS twice."""

from __future__ import annotations

import time
import uuid

import pytest

from rivulet.testing import BrokerProcess, free_port
from tests.cluster import ZkCluster, eventually
from tests.integration.test_replication_faults import BROKER_CONFIG, create_topic

pytestmark = [pytest.mark.integration, pytest.mark.cluster]


def start_tls_broker(cluster: ZkCluster, broker_id: int, certs) -> BrokerProcess:
    b = BrokerProcess({"zookeeper.connect": cluster.connect, "zookeeper.session.timeout.ms": "4000",
                       "broker.id": str(broker_id), **BROKER_CONFIG, "min.insync.replicas": "3"})
    b.overrides.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{b.port},REPLICATION://localhost:{free_port()}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,REPLICATION:SSL",
        "inter.broker.listener.name": "REPLICATION",
        # Each broker's certificate is both its server and its client certificate.
        **certs.broker_ssl_props("listener.name.replication.", client_auth="required"),
    })
    cluster.brokers[broker_id] = b.start()
    return b


def test_replication_and_the_controller_over_mutual_tls(zk_connect, tls_certs):
    from confluent_kafka import Consumer, Producer, TopicPartition
    cluster = ZkCluster(zk_connect)
    try:
        for i in (1, 2, 3):
            start_tls_broker(cluster, i, tls_certs)
        cluster.wait_for_brokers([1, 2, 3])
        reg = cluster.json("/brokers/ids/1")
        assert reg["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT", "REPLICATION": "SSL"}
        topic = f"tls-repl-{uuid.uuid4().hex[:6]}"
        create_topic(cluster, topic, 3)
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
        errors = []
        for i in range(300):
            p.produce(topic, f"v{i}".encode(), key=f"k{i}".encode(),
                      on_delivery=lambda err, _m: errors.append(err) if err else None)
        assert p.flush(60) == 0
        assert errors == []
        # The high watermark moves only once both followers fetched: it is the whole count.
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": topic})
        ends = [c.get_watermark_offsets(TopicPartition(topic, part), timeout=20)[1] for part in range(3)]
        c.close()
        assert sum(ends) == 300
        for part in range(3):
            assert sorted(cluster.partition_state(topic, part)["isr"]) == [1, 2, 3]
        # Leadership moves over TLS too: the leader of partition 0 goes, the controller elects
        # another from the ISR and tells the brokers, and the new leader serves every record.
        leader = cluster.partition_state(topic, 0)["leader"]
        cluster.brokers[leader].kill()
        eventually(lambda: cluster.partition_state(topic, 0)["leader"] not in (leader, -1), 60,
                   "a new leader elected over the SSL inter-broker listener")
        # Two in-sync replicas are below min.insync.replicas=3, so the new leader's high
        # watermark waits (Kafka 4's strict min ISR) until the old one is back in the ISR.
        cluster.restart(leader)
        eventually(lambda: sorted(cluster.partition_state(topic, 0)["isr"]) == [1, 2, 3], 90,
                   "the restarted broker to catch up over TLS and rejoin the ISR")
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": topic + "-after"})
        c.assign([TopicPartition(topic, 0, 0)])
        got = []
        deadline = time.monotonic() + 60
        while len(got) < ends[0] and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.offset())
        c.close()
        assert got == list(range(ends[0]))
    finally:
        cluster.close()
