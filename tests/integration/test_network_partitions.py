"""Real network partitions of a three-broker cluster (RF=3, min.insync.replicas=2, acks=all,
idempotent producers): each broker runs in a network namespace of its own and the test cuts it
off with packet filters (tests/netns.py), from ZooKeeper and the other brokers but not from the
clients.

- A leader cut off that way stops leading once its session has expired on ZooKeeper's side:
  its waiting acks=all writes fail with NOT_LEADER_OR_FOLLOWER and its Metadata stops naming
  it, so the producers reach the new leaders soon after their election, instead of waiting
  for the whole partition on the cut-off broker. Nothing acknowledged is lost or duplicated.
- After every broker lost ZooKeeper for longer than the session timeout, the first one back
  takes every leadership; once the others' replicas are back in the ISR the leaderships return
  to the preferred replicas, long before leader.imbalance.check.interval.seconds (300 s).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from rivulet.controller.zk_server import ZooKeeperNotFound, ZooKeeperServer
from tests.cluster import ZkCluster, eventually
from tests.history import History
from tests.integration.test_replication_faults import BROKER_CONFIG, Writer, read_back
from tests.netns import ZK_HOST, BrokerNetworks, check_tools

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

SESSION_MS = 6000
# How long after the new leaders' election the producers must be acknowledged again: a cut-off
# leader gives up about a session timeout after the cut, near the election; generous here.
ACK_BOUND_S = 20.0


class Partitioned:
    def __init__(self, nets: BrokerNetworks, zk: ZooKeeperServer, cluster: ZkCluster) -> None:
        self.nets, self.zk, self.cluster = nets, zk, cluster

    def create_topic(self, assignment: list[list[int]]) -> str:
        topic = f"part-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": self.cluster.bootstrap})
        admin.create_topics([NewTopic(topic, len(assignment), replica_assignment=assignment, config={"min.insync.replicas": "2"})],
                            request_timeout=60)[topic].result(90)
        eventually(lambda: self.on_preferred_leaders(topic, assignment), 90, "preferred leaders and full ISRs")
        return topic

    def states(self, topic: str, partitions: int) -> list[dict]:
        return [self.cluster.partition_state(topic, p) for p in range(partitions)]

    def on_preferred_leaders(self, topic: str, assignment: list[list[int]]) -> bool:
        try:
            states = self.states(topic, len(assignment))
        except Exception:  # not created yet
            return False
        return all(s["leader"] == a[0] and sorted(s["isr"]) == sorted(a) for s, a in zip(states, assignment))


@pytest.fixture
def partitioned() -> Iterator[Partitioned]:
    why = check_tools()
    if why is not None:
        pytest.fail(f"these tests make network namespaces: {why}", pytrace=False)
    nets = BrokerNetworks(3)
    zk = cluster = None
    try:
        try:
            zk = ZooKeeperServer(host=ZK_HOST).start()
        except ZooKeeperNotFound as e:
            pytest.fail(f"these tests need a ZooKeeper server: {e}", pytrace=False)
        cluster = ZkCluster(zk.connect)
        for i in nets.ids:
            cluster.start(i, host=nets.address(i), prefix=nets.prefix(i), **BROKER_CONFIG,
                          **{"zookeeper.session.timeout.ms": str(SESSION_MS)})
        cluster.wait_for_brokers(nets.ids)
        yield Partitioned(nets, zk, cluster)
    finally:
        for i in nets.ids:  # healed first, so that the brokers stop cleanly
            try:
                nets.heal(i)
            except RuntimeError:
                pass  # not cut
        if cluster is not None:
            cluster.close()
        if zk is not None:
            zk.stop()
            zk.cleanup()
        nets.close()


def test_a_leader_cut_off_from_zookeeper_and_the_brokers_lets_its_producers_go(partitioned):
    p = partitioned
    cluster = p.cluster
    assignment = [[1, 2, 3], [1, 3, 2], [1, 2, 3]]  # broker 1 leads every partition
    topic = p.create_topic(assignment)
    history = History()
    writer = Writer(cluster, topic, history, acks="all", **{"enable.idempotence": True})
    writer.start()
    try:
        writer.wait_for(1000)
        p.nets.cut(1, p.zk.port)
        cut_at = time.monotonic()
        try:
            eventually(lambda: all(s["leader"] in (2, 3) for s in p.states(topic, 3)), 60,
                       "new leaders elected on the other side")
            elected_at = time.monotonic()
            acked = writer.acked
            eventually(lambda: writer.acked >= acked + 500, ACK_BOUND_S,
                       "the producer acknowledged by the new leaders while broker 1 is cut off")
            resumed_at = time.monotonic()
        finally:
            p.nets.heal(1)
        print(f"new leaders {elected_at - cut_at:.1f} s after the cut, producer acknowledged again "
              f"{resumed_at - elected_at:.1f} s after their election")
        eventually(lambda: all(sorted(s["isr"]) == [1, 2, 3] for s in p.states(topic, 3)), 120,
                   "broker 1 back in every ISR")
        writer.wait_for(500)
    finally:
        writer.finish()
    assert writer.acked > 0
    read_back(cluster, topic, history, 3)
    anomalies = history.check()
    assert not anomalies, anomalies.summary()


def test_leaderships_return_to_the_preferred_replicas_after_a_mass_reregistration(partitioned):
    p = partitioned
    cluster = p.cluster
    assignment = [[1, 2, 3], [2, 3, 1], [3, 1, 2], [1, 3, 2], [2, 1, 3], [3, 2, 1]]
    topic = p.create_topic(assignment)
    # ZooKeeper out of every broker's reach for longer than the session timeout.
    p.nets.cut_zookeeper(p.zk.port)
    eventually(lambda: cluster.registered() == [], 60, "every broker's session to expire")
    p.nets.heal(1)
    eventually(lambda: all(s["leader"] == 1 for s in p.states(topic, 6)), 60,
               "broker 1, back first, to take every leadership")
    assert json.loads(cluster.zk.get("/controller")[0])["brokerid"] == 1
    p.nets.heal(2)
    p.nets.heal(3)
    back_at = time.monotonic()
    # leader.imbalance.check.interval.seconds is 300: well before it.
    eventually(lambda: p.on_preferred_leaders(topic, assignment), 90,
               "every leadership back on its preferred replica")
    print(f"leaderships back on the preferred replicas {time.monotonic() - back_at:.1f} s after the others returned")
