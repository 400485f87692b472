"""Producer throughput with idempotence off and on, and in transactions of 100 and 10,000
records, against a Rivulet broker process. The load generator is librdkafka (confluent-kafka).

    python -m benchmarks.transactions                      # starts its own broker
    python -m benchmarks.transactions --bootstrap host:port

Every run reads back the topic with read_committed to check that all committed records
arrived exactly once, then prints one table.
"""

from __future__ import annotations

import argparse
import time
import uuid
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from rivulet.testing import BrokerProcess


@dataclass
class Result:
    name: str
    records: int
    seconds: float
    size: int
    transactions: int = 0

    @property
    def rps(self) -> float:
        return self.records / self.seconds

    @property
    def mbps(self) -> float:
        return self.records * self.size / self.seconds / 1e6


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(30)


BASE = {"linger.ms": 10, "batch.size": 1_000_000, "batch.num.messages": 100_000,
        "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 2_000_000, "acks": "all"}


def _send(p: Producer, topic: str, payload: bytes, n: int) -> None:
    for _ in range(n):
        while True:
            try:
                p.produce(topic, payload)
                break
            except BufferError:
                p.poll(0.001)


WARMUP_TOPIC = "bench-txn-warmup"


def plain(bootstrap: str, topic: str, count: int, size: int, idempotent: bool) -> Result:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": idempotent, **BASE})
    payload = bytes(i % 251 for i in range(size))
    # Connected and (if idempotent) holding a producer id before the clock starts, as a
    # transactional producer is after init_transactions(): librdkafka's first id request can
    # wait for its retry timer, which would otherwise dominate a short run.
    p.produce(WARMUP_TOPIC, b"warm-up")
    assert p.flush(30) == 0
    t0 = time.perf_counter()
    _send(p, topic, payload, count)
    assert p.flush(120) == 0
    return Result(f"idempotence {'on' if idempotent else 'off'}", count, time.perf_counter() - t0, size)


def transactional(bootstrap: str, topic: str, count: int, size: int, per_txn: int) -> Result:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "bench-" + uuid.uuid4().hex[:6], **BASE})
    p.init_transactions(30)
    payload = bytes(i % 251 for i in range(size))
    txns = max(1, count // per_txn)
    t0 = time.perf_counter()
    for _ in range(txns):
        p.begin_transaction()
        _send(p, topic, payload, per_txn)
        p.commit_transaction(60)
    dt = time.perf_counter() - t0
    return Result(f"transactions of {per_txn:,}", txns * per_txn, dt, size, txns)


def count_committed(bootstrap: str, topic: str, partitions: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check-" + uuid.uuid4().hex[:6],
                  "isolation.level": "read_committed", "enable.partition.eof": True, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    n, eof = 0, set()
    deadline = time.monotonic() + 120
    while len(eof) < partitions and time.monotonic() < deadline:
        for m in c.consume(10_000, 0.5):
            if m.error():
                eof.add(m.partition())
            else:
                n += 1
    c.close()
    return n


def run(bootstrap: str, count: int, size: int, partitions: int, repeat: int) -> list[str]:
    create_topic(bootstrap, WARMUP_TOPIC, 1)
    results = []
    for name, fn in (("off", lambda t: plain(bootstrap, t, count, size, False)),
                     ("on", lambda t: plain(bootstrap, t, count, size, True)),
                     ("t100", lambda t: transactional(bootstrap, t, min(count, 20_000), size, 100)),
                     ("t10k", lambda t: transactional(bootstrap, t, count, size, 10_000))):
        runs = []
        for _ in range(repeat):
            topic = f"bench-txn-{name}-{uuid.uuid4().hex[:6]}"
            create_topic(bootstrap, topic, partitions)
            r = fn(topic)
            got = count_committed(bootstrap, topic, partitions)
            assert got == r.records, f"{name}: read {got} committed records, expected {r.records}"
            runs.append(r)
        results.append(sorted(runs, key=lambda r: r.rps)[len(runs) // 2])  # the median run
    lines = [f"| {'producer':<24} | {'records':>8} | {'txns':>5} | {'records/s':>10} | {'MB/s':>6} |",
             f"|{'-' * 26}|{'-' * 9}:|{'-' * 6}:|{'-' * 11}:|{'-' * 7}:|"]
    for r in results:
        lines.append(f"| {r.name:<24} | {r.records:>8} | {r.transactions or '-':>5} | {r.rps:>10,.0f} | "
                     f"{r.mbps:>6.1f} |")
    lines.append(f"\n{size} B records, {partitions} partition(s), acks=all, median of {repeat} run(s); committed "
                 "counts checked with read_committed.")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", help="use a running broker instead of starting one")
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if args.bootstrap:
        lines = run(args.bootstrap, args.records, args.size, args.partitions, args.repeat)
    else:
        with BrokerProcess() as broker:
            lines = run(broker.bootstrap, args.records, args.size, args.partitions, args.repeat)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
