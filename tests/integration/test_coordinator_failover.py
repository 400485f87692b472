"""Consumer groups and transactions through the death of their coordinator's broker, on three
cluster-mode broker processes: the leadership of ``__consumer_offsets`` and
``__transaction_state`` moves with the controller's election, the new leader loads the
committed offsets and the transactions, and clients carry on (FindCoordinator again)."""

from __future__ import annotations

import pytest
from cluster import ZkCluster, eventually, three_brokers
from confluent_kafka import Consumer, Producer, TopicPartition
from test_replication_faults import create_topic

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

BROKER = {"offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1",
          "replica.lag.time.max.ms": "3000", "replica.fetch.wait.max.ms": "100"}


def consume(cluster: ZkCluster, group: str, n: int, isolation: str = "read_committed",
            commit: bool = True) -> list[bytes]:
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "isolation.level": isolation})
    c.subscribe(["pay"])
    values: list[bytes] = []
    try:
        eventually(lambda: _poll_into(c, values) and len(values) >= n, 90, f"{n} records for {group}")
        if commit:
            c.commit(asynchronous=False)
    finally:
        c.close()
    return values


def _poll_into(c: Consumer, values: list[bytes]) -> bool:
    m = c.poll(0.5)
    if m is not None and not m.error():
        values.append(m.value())
    return True


def test_groups_and_transactions_survive_their_coordinators_broker(zk_connect):
    with three_brokers(zk_connect, **BROKER) as cluster:
        create_topic(cluster, "pay")
        p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "tx"})
        p.init_transactions(60)
        p.begin_transaction()
        for i in range(10):
            p.produce("pay", b"one-%d" % i)
        p.commit_transaction(60)
        p.begin_transaction()
        p.produce("pay", b"aborted")
        p.flush(30)
        p.abort_transaction(60)
        assert consume(cluster, "g", 10) == [b"one-%d" % i for i in range(10)]

        # The transaction coordinator's broker dies: the next transaction goes to the new one.
        victim = cluster.partition_state("__transaction_state", 0)["leader"]
        cluster.brokers[victim].kill()
        eventually(lambda: cluster.partition_state("__transaction_state", 0)["leader"] not in (victim, -1), 60,
                   "a new transaction coordinator")
        p.begin_transaction()
        for i in range(10):
            p.produce("pay", b"two-%d" % i)
        p.commit_transaction(90)
        p.flush(30)
        # It comes back (once its old session is gone) and catches up; then the group
        # coordinator's broker dies.
        eventually(lambda: victim not in cluster.registered(), 30, "the old registration to expire")
        cluster.brokers[victim].start()
        for topic in ("__transaction_state", "__consumer_offsets", "pay"):
            eventually(lambda t=topic: sorted(cluster.partition_state(t, 0)["isr"]) == [1, 2, 3], 90,
                       f"a full ISR of {topic}")
        victim = cluster.partition_state("__consumer_offsets", 0)["leader"]
        cluster.brokers[victim].kill()
        eventually(lambda: cluster.partition_state("__consumer_offsets", 0)["leader"] not in (victim, -1), 60,
                   "a new group coordinator")
        # The group resumes from its committed offset, served by the new group coordinator.
        assert consume(cluster, "g", 10) == [b"two-%d" % i for i in range(10)]
        everything = consume(cluster, "fresh", 20, commit=False)
        assert everything == [b"one-%d" % i for i in range(10)] + [b"two-%d" % i for i in range(10)]
        # read_uncommitted sees the aborted record too; read_committed never does.
        assert b"aborted" in consume(cluster, "raw", 21, isolation="read_uncommitted", commit=False)
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g"})
        committed = c.committed([TopicPartition("pay", 0)], timeout=30)[0].offset
        c.close()
        assert committed > 20  # past both transactions and their markers
