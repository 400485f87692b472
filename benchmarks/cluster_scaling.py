"""How far more broker processes take Rivulet past one core: produce and consume throughput
of 1, 2 and 3 cluster-mode brokers on this machine, RF=1, the partitions' leaders spread over
the brokers; consume at RF=3 on three brokers; and one Apache Kafka broker (KRaft, the
reference of ``benchmarks.reference.kafka``) under the same load.

    python -m benchmarks.rdkafka_perf build      # once
    python -m benchmarks.cluster_scaling

The load generators are librdkafka's rdkafka_performance processes: as many producers as
there are brokers (three for Kafka), each writing its share to every partition, and one
consumer over all partitions. A rate is all records over the span from the first process's
start to the last one's exit. It prints one table; docs/performance.md records the results.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from benchmarks import rdkafka_perf
from benchmarks.compare import Rate, _rdk_parallel
from benchmarks.produce_consume import create_topic, wait_for_leaders
from benchmarks.reference.kafka import KafkaReference
from benchmarks.replication import Cluster, create


def _produce(bootstrap: str, topic: str, count: int, size: int, processes: int) -> Rate:
    each = count // processes
    return _rdk_parallel([rdkafka_perf.producer_args(bootstrap, topic, each, size, "1")] * processes,
                         rdkafka_perf.parse_producer, each)


def _consume(bootstrap: str, topic: str, partitions: int, count: int) -> Rate:
    return _rdk_parallel([rdkafka_perf.consumer_args(bootstrap, topic, partitions, count)],
                         rdkafka_perf.parse_consumer, count)


def run(count: int, size: int, partitions: int) -> list[str]:
    rdkafka_perf.require_binary()
    rows: list[tuple[str, str, Rate]] = []

    def measure(name: str, bootstrap: str, producers: int, make: Callable[[str, int], None], rf3: bool) -> None:
        topic = "scale-rf1"
        make(topic, 1)
        produced = _produce(bootstrap, topic, count, size, producers)
        rows.append((name, f"produce x{producers}", produced))
        written = (count // producers) * producers
        rows.append((name, "consume", _consume(bootstrap, topic, partitions, written)))
        if rf3:
            make("scale-rf3", 3)
            _produce(bootstrap, "scale-rf3", count, size, producers)
            rows.append((name + ", RF=3", "consume", _consume(bootstrap, "scale-rf3", partitions, written)))

    for n in (1, 2, 3):
        cluster = Cluster(n)
        try:
            measure(f"Rivulet, {n} broker(s)", cluster.bootstrap, n,
                    lambda t, rf: create(cluster.bootstrap, cluster.zk, t, partitions, rf), n == 3)
        finally:
            cluster.close()
    with KafkaReference() as kafka:
        def make_kafka(topic: str, rf: int) -> None:
            create_topic(kafka.bootstrap, topic, partitions)
            wait_for_leaders(kafka.bootstrap, [topic])
        measure("Kafka 4.3.1, 1 broker", kafka.bootstrap, 3, make_kafka, False)
    lines = [f"load average before the last row: {os.getloadavg()[0]:.2f}",
             f"{'cluster':28} {'case':12} {'records/s':>12} {'MB/s':>8} {'seconds':>8}"]
    lines += [f"{c:28} {case:12} {r.records_per_sec:12,.0f} {r.mb_per_sec:8.1f} {r.seconds:8.2f}" for c, case, r in rows]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=1_000_000, help="records per case")
    ap.add_argument("--size", type=int, default=1024, help="record size in bytes")
    ap.add_argument("--partitions", type=int, default=6)
    args = ap.parse_args()
    print("\n".join(run(args.count, args.size, args.partitions)))


if __name__ == "__main__":
    main()
