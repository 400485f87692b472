"""How far more broker processes take Rivulet past one core: produce and consume throughput
of 1, 2 and 3 cluster-mode brokers on this machine, RF=1, the partitions' leaders spread over
the brokers; and consume throughput at RF=1 and RF=3 on three brokers.

    python -m benchmarks.cluster_scaling

The load generators are librdkafka (confluent-kafka) processes, as many as there are brokers,
so that one client's single thread is not what is measured. It prints one table;
docs/performance.md records the results.
"""

from __future__ import annotations

import argparse
import multiprocessing
import time

from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient

from benchmarks.produce_consume import Result, consume, produce
from benchmarks.replication import create, wait
from rivulet.controller.zk_server import ZooKeeperServer
from rivulet.testing import BrokerProcess


def _produce_part(args: tuple[str, str, int, int]) -> tuple[float, float, int]:
    bootstrap, topic, count, size = args
    t0 = time.time()
    r = produce(bootstrap, topic, count, size, "1")
    return t0, t0 + r.seconds, r.records


def parallel_produce(bootstrap: str, topic: str, count: int, size: int, processes: int) -> Result:
    """``processes`` producers at once; the rate is all records over the span from the first
    start to the last end."""
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        parts = pool.map(_produce_part, [(bootstrap, topic, count // processes, size)] * processes)
    start, end = min(p[0] for p in parts), max(p[1] for p in parts)
    records = sum(p[2] for p in parts)
    return Result(f"produce {size} B acks=1 x{processes}", records, end - start, records * size)


class Cluster:
    def __init__(self, brokers: int) -> None:
        self.zk_server = ZooKeeperServer().start()
        self.zk = KazooClient(hosts=self.zk_server.connect)
        self.zk.start(timeout=15)
        self.brokers = [BrokerProcess({"zookeeper.connect": self.zk_server.connect, "broker.id": str(i)}).start()
                        for i in range(1, brokers + 1)]
        wait(lambda: len(self.zk.get_children("/brokers/ids")) == brokers, f"{brokers} brokers")
        self.bootstrap = ",".join(b.bootstrap for b in self.brokers)
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        wait(lambda: all(len(AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=5).brokers) == brokers
                         for b in self.brokers) and admin.list_topics(timeout=5).controller_id >= 0,
             "every broker to know the others and the controller")

    def close(self) -> None:
        for b in self.brokers:
            b.cleanup()
        self.zk.stop()
        self.zk.close()
        self.zk_server.stop()
        self.zk_server.cleanup()


def run(count: int, size: int, partitions: int) -> list[str]:
    rows: list[tuple[str, Result]] = []
    for n in (1, 2, 3):
        cluster = Cluster(n)
        try:
            topic = f"scale-{n}"
            create(cluster.bootstrap, cluster.zk, topic, partitions, 1)
            rows.append((f"{n} broker(s), RF=1", parallel_produce(cluster.bootstrap, topic, count, size, n)))
            rows.append((f"{n} broker(s), RF=1", consume(cluster.bootstrap, topic, partitions, count, size)))
            if n == 3:
                create(cluster.bootstrap, cluster.zk, "scale-rf3", partitions, 3)
                parallel_produce(cluster.bootstrap, "scale-rf3", count, size, n)
                rows.append(("3 brokers, RF=3", consume(cluster.bootstrap, "scale-rf3", partitions, count, size)))
        finally:
            cluster.close()
    lines = [f"{'cluster':22} {'case':32} {'records/s':>12} {'MB/s':>8}"]
    lines += [f"{c:22} {r.name:32} {r.rps:12,.0f} {r.mbps:8.1f}" for c, r in rows]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=600_000, help="records per case")
    ap.add_argument("--size", type=int, default=1024, help="record size in bytes")
    ap.add_argument("--partitions", type=int, default=6)
    args = ap.parse_args()
    print("\n".join(run(args.count, args.size, args.partitions)))


if __name__ == "__main__":
    main()
