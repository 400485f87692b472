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

from benchmarks.produce_consume import Result, consume, produce
from benchmarks.replication import Cluster, create


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


def run(count: int, size: int, partitions: int) -> list[str]:
    rows: list[tuple[str, Result]] = []
    for n in (1, 2, 3):
        cluster = Cluster(n)
        try:
            topic = f"scale-{n}"
            create(cluster.bootstrap, cluster.zk, topic, partitions, 1)
            produced = parallel_produce(cluster.bootstrap, topic, count, size, n)
            rows.append((f"{n} broker(s), RF=1", produced))
            # Each producer makes count // n records: read back exactly what was written.
            rows.append((f"{n} broker(s), RF=1", consume(cluster.bootstrap, topic, partitions, produced.records, size)))
            if n == 3:
                create(cluster.bootstrap, cluster.zk, "scale-rf3", partitions, 3)
                produced = parallel_produce(cluster.bootstrap, "scale-rf3", count, size, n)
                rows.append(("3 brokers, RF=3",
                             consume(cluster.bootstrap, "scale-rf3", partitions, produced.records, size)))
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
