"""A history check in the manner of Jepsen's Kafka workload: a 3-broker ZooKeeper-mode cluster
takes acks=all writes of unique values from an idempotent producer while a nemesis, one fault
at a time, kills a partition leader with kill -9 (then restarts it), pauses one with SIGSTOP
(then resumes it) and kills the controller. Afterwards every acknowledged (partition, offset,
value) must be read back and no offset may show two values."""

from __future__ import annotations

import time

import pytest
from cluster import ZkCluster, eventually, three_brokers
from history import History
from test_replication_faults import Writer, create_topic, read_back

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

TOPIC = "jepsen"
PARTITIONS = 3
ROUNDS = 6  # faults, one after another: kill a leader, pause a leader, kill the controller, twice
BROKER = {"replica.lag.time.max.ms": "3000", "replica.fetch.wait.max.ms": "100", "replica.fetch.backoff.ms": "200"}


def leader_of(cluster: ZkCluster, partition: int) -> int:
    try:
        return cluster.partition_state(TOPIC, partition)["leader"]
    except Exception:
        return -1


def healthy(cluster: ZkCluster) -> bool:
    """Every partition has its three replicas in the ISR again."""
    try:
        return all(sorted(cluster.partition_state(TOPIC, p)["isr"]) == [1, 2, 3] for p in range(PARTITIONS))
    except Exception:
        return False


def test_acknowledged_writes_survive_leader_kills_pauses_and_controller_kills(zk_connect):
    with three_brokers(zk_connect, **BROKER) as cluster:
        create_topic(cluster, TOPIC, PARTITIONS, **{"min.insync.replicas": "2"})

        history = History()
        writer = Writer(cluster, TOPIC, history, acks="all", **{"enable.idempotence": True})
        writer.start()
        for n in range(ROUNDS):
            time.sleep(2)
            kind = n % 3
            if kind == 0:  # kill -9 the leader of a partition, then bring it back
                victim = leader_of(cluster, n % PARTITIONS)
                cluster.brokers[victim].kill()
                eventually(lambda v=victim: leader_of(cluster, n % PARTITIONS) not in (v, -1), what="a new leader")
                time.sleep(2)
                cluster.brokers[victim].start()
            elif kind == 1:  # SIGSTOP a leader past its session timeout, then resume it
                victim = leader_of(cluster, n % PARTITIONS)
                cluster.brokers[victim].pause()
                try:
                    eventually(lambda v=victim: leader_of(cluster, n % PARTITIONS) not in (v, -1),
                               what="a new leader while paused")
                    time.sleep(1)
                finally:
                    cluster.brokers[victim].resume()
            else:  # kill -9 the controller, then bring it back
                victim = cluster.controller()
                cluster.brokers[victim].kill()
                eventually(lambda v=victim: cluster.controller() not in (None, v), what="a new controller")
                time.sleep(1)
                cluster.brokers[victim].start()
            eventually(lambda: healthy(cluster), timeout=60, what=f"recovery after fault {n}")
        writer.finish()
        assert not writer.is_alive() and writer.acked > 0
        read = read_back(cluster, TOPIC, history, PARTITIONS)
        anomalies = history.check()
        assert not anomalies, f"{anomalies.summary()} ({writer.acked} acknowledged, {writer.failed} failed)"
        assert read >= writer.acked
