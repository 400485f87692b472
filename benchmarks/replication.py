"""Replication: produce throughput on a 3-broker ZooKeeper-mode cluster at RF=1 and RF=3 with
acks=1 and acks=all, and the failover time after a kill -9 of a partition leader (from the kill
to the first acks=all record acknowledged by the new leader).

    python -m benchmarks.replication        # starts ZooKeeper and three brokers of its own

The load generator is librdkafka (confluent-kafka) on the same machine. It prints one table;
docs/performance.md records the results.
"""

from __future__ import annotations

import argparse
import json
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from benchmarks.produce_consume import Result, produce
from rivulet.controller.zk_server import ZooKeeperServer
from rivulet.testing import BrokerProcess


def wait(check, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


def state(zk: KazooClient, topic: str, partition: int = 0) -> dict:
    try:
        return json.loads(zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")[0])
    except Exception:
        return {}


def create(bootstrap: str, zk: KazooClient, topic: str, partitions: int, rf: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the result is in
    admin.create_topics([NewTopic(topic, partitions, rf, config={"min.insync.replicas": str(min(rf, 2))})],
                        request_timeout=60)[topic].result(90)
    for p in range(partitions):
        wait(lambda p=p: len(state(zk, topic, p).get("isr", [])) == rf, f"{topic}-{p} in sync")


def failover(brokers: dict[int, BrokerProcess], zk: KazooClient, topic: str) -> float:
    """Seconds from a kill -9 of the leader to the first acks=all record acknowledged again."""
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "message.timeout.ms": 60000})
    p.produce(topic, b"warm", partition=0)
    p.flush(30)
    leader = state(zk, topic)["leader"]
    acked: list[float] = []
    t0 = time.perf_counter()
    brokers[leader].kill()
    while not acked:
        p.produce(topic, b"x", partition=0, on_delivery=lambda err, _m: acked.append(time.perf_counter())
                  if err is None else None)
        p.poll(0.05)
    return acked[0] - t0


class Cluster:
    """A local ZooKeeper and ``brokers`` cluster-mode brokers (ids 1..n), every one of them
    knowing the others and the controller."""

    def __init__(self, brokers: int, **overrides: str) -> None:
        self.zk_server = ZooKeeperServer().start()
        self.zk = KazooClient(hosts=self.zk_server.connect)
        self.zk.start(timeout=15)
        self.brokers = {i: BrokerProcess({"zookeeper.connect": self.zk_server.connect, "broker.id": str(i),
                                          **overrides}).start() for i in range(1, brokers + 1)}
        wait(lambda: len(self.zk.get_children("/brokers/ids")) == brokers, f"{brokers} brokers")
        self.bootstrap = ",".join(b.bootstrap for b in self.brokers.values())
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        wait(lambda: all(len(AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=5).brokers) == brokers
                         for b in self.brokers.values()) and admin.list_topics(timeout=5).controller_id >= 0,
             "every broker to know the others and the controller")

    def close(self) -> None:
        for b in self.brokers.values():
            b.cleanup()
        self.zk.stop()
        self.zk.close()
        self.zk_server.stop()
        self.zk_server.cleanup()


def run(count: int, size: int, partitions: int) -> list[str]:
    cluster = Cluster(3, **{"zookeeper.session.timeout.ms": "6000"})
    try:
        results: list[Result] = []
        for rf in (1, 3):
            topic = f"bench-rf{rf}"
            create(cluster.bootstrap, cluster.zk, topic, partitions, rf)
            for acks in ("1", "all"):
                r = produce(cluster.bootstrap, topic, count, size, acks)
                r.name = f"RF={rf} produce {size} B acks={acks}"
                results.append(r)
        create(cluster.bootstrap, cluster.zk, "bench-failover", 1, 3)
        seconds = failover(cluster.brokers, cluster.zk, "bench-failover")
    finally:
        cluster.close()
    lines = [f"{'case':36} {'records/s':>12} {'MB/s':>8}"]
    lines += [f"{r.name:36} {r.rps:12,.0f} {r.mbps:8.1f}" for r in results]
    lines.append(f"failover after kill -9 of the leader: {seconds:.2f} s")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=200_000, help="records per case")
    ap.add_argument("--size", type=int, default=1024, help="record size in bytes")
    ap.add_argument("--partitions", type=int, default=3)
    args = ap.parse_args()
    print("\n".join(run(args.count, args.size, args.partitions)))


if __name__ == "__main__":
    main()
