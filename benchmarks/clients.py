"""Producer and consumer throughput of four Python clients against one Rivulet broker.

Rivulet's own client, confluent-kafka (librdkafka), kafka-python and aiokafka each produce the
same number of 1 KiB records into their own topic, then read them back, against the same broker
process in the same run. Settings are aligned where the clients allow it: acks=1, no
compression, no idempotence, linger 5 ms, batches up to 1 MB, consumers reading assigned
partitions from the beginning in batches.

    python -m benchmarks.clients                        # starts its own broker
    python -m benchmarks.clients --bootstrap host:port  # an already running broker
    python -m benchmarks.clients --records 100000 --only rivulet,confluent-kafka

Produce time runs from the first send to the last acknowledgement; consume time from the
first record received to the last. Rivulet's client encodes and decodes records in C when the
optional accelerator is built (the last line says which); RIVULET_NO_SPEEDUPS=1 measures the
pure-Python decoder. Each client runs ``--rounds`` times (order rotated) and
the median is printed, in one table.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
import uuid
from dataclasses import dataclass
from typing import Callable

from rivulet.testing import BrokerProcess

SIZE = 1024
PARTITIONS = 4
LINGER_MS = 5
BATCH = 1_000_000


@dataclass
class Result:
    client: str
    produce_s: float
    consume_s: float
    records: int

    def rate(self, seconds: float) -> float:
        return self.records / seconds if seconds > 0 else 0.0


def payload() -> bytes:
    return bytes(i % 251 for i in range(SIZE))


def create_topic(bootstrap: str, topic: str) -> None:
    from rivulet.admin import AdminClient, NewTopic
    a = AdminClient({"bootstrap.servers": bootstrap})
    a.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    a.close()


# ---------------------------------------------------------------- Rivulet


def rivulet_produce(bootstrap: str, topic: str, n: int) -> float:
    from rivulet import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": LINGER_MS, "batch.size": BATCH,
                  "enable.idempotence": False})
    v = payload()
    produce = p.produce
    t0 = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                produce(topic, v)
                break
            except BufferError:  # the queue is full: serve delivery reports, then retry
                p.poll(0.001)
    assert p.flush(120) == 0
    dt = time.perf_counter() - t0
    p.close()
    return dt


def rivulet_consume(bootstrap: str, topic: str, n: int) -> float:
    from rivulet import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-" + topic, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got, t0 = 0, None
    while got < n:
        msgs = c.consume(10_000, 1.0)
        if msgs and t0 is None:
            t0 = time.perf_counter()
        got += len(msgs)
    dt = time.perf_counter() - t0
    c.close()
    return dt


# ---------------------------------------------------------------- confluent-kafka


def confluent_produce(bootstrap: str, topic: str, n: int) -> float:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": LINGER_MS, "batch.size": BATCH,
                  "enable.idempotence": False})
    v = payload()
    produce = p.produce
    t0 = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                produce(topic, v)
                break
            except BufferError:  # the queue is full: serve delivery reports, then retry
                p.poll(0.001)
    assert p.flush(120) == 0
    return time.perf_counter() - t0


def confluent_consume(bootstrap: str, topic: str, n: int) -> float:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-" + topic, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got, t0 = 0, None
    while got < n:
        msgs = c.consume(10_000, 1.0)
        if msgs and t0 is None:
            t0 = time.perf_counter()
        got += len(msgs)
    dt = time.perf_counter() - t0
    c.close()
    return dt


# ---------------------------------------------------------------- kafka-python


def kafka_python_produce(bootstrap: str, topic: str, n: int) -> float:
    from kafka import KafkaProducer
    p = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=LINGER_MS, batch_size=BATCH,
                      enable_idempotence=False, max_request_size=1_048_576)
    v = payload()
    send = p.send
    t0 = time.perf_counter()
    for _ in range(n):
        send(topic, v)
    p.flush(120)
    dt = time.perf_counter() - t0
    p.close()
    return dt


def kafka_python_consume(bootstrap: str, topic: str, n: int) -> float:
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                      max_partition_fetch_bytes=1_048_576)
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    got, t0 = 0, None
    while got < n:
        batch = c.poll(timeout_ms=1000, max_records=10_000)
        k = sum(len(v) for v in batch.values())
        if k and t0 is None:
            t0 = time.perf_counter()
        got += k
    dt = time.perf_counter() - t0
    c.close()
    return dt


# ---------------------------------------------------------------- aiokafka


def aiokafka_produce(bootstrap: str, topic: str, n: int) -> float:
    from aiokafka import AIOKafkaProducer

    async def run() -> float:
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=LINGER_MS, max_batch_size=BATCH,
                             enable_idempotence=False, max_request_size=1_048_576)
        await p.start()
        v = payload()
        t0 = time.perf_counter()
        last = None
        for _ in range(n):
            last = await p.send(topic, v)
        await p.flush()
        await last
        dt = time.perf_counter() - t0
        await p.stop()
        return dt
    return asyncio.run(run())


def aiokafka_consume(bootstrap: str, topic: str, n: int) -> float:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition

    async def run() -> float:
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             max_partition_fetch_bytes=1_048_576)
        await c.start()
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        got, t0 = 0, None
        while got < n:
            batch = await c.getmany(timeout_ms=1000, max_records=10_000)
            k = sum(len(v) for v in batch.values())
            if k and t0 is None:
                t0 = time.perf_counter()
            got += k
        dt = time.perf_counter() - t0
        await c.stop()
        return dt
    return asyncio.run(run())


CLIENTS: dict[str, tuple[Callable[[str, str, int], float], Callable[[str, str, int], float]]] = {
    "rivulet": (rivulet_produce, rivulet_consume),
    "confluent-kafka": (confluent_produce, confluent_consume),
    "kafka-python": (kafka_python_produce, kafka_python_consume),
    "aiokafka": (aiokafka_produce, aiokafka_consume),
}


def run(bootstrap: str, n: int, only: list[str], rounds: int) -> list[Result]:
    """Every client once per round, in a rotated order; the median round of each is kept.

    On a shared machine one run can catch another process's burst; rounds and medians keep
    a single unlucky run from deciding the table.
    """
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in only}
    for r in range(rounds):
        order = only[r % len(only):] + only[:r % len(only)]
        for name in order:
            produce, consume = CLIENTS[name]
            topic = f"bench-{name}-{uuid.uuid4().hex[:6]}"
            create_topic(bootstrap, topic)
            gc.collect()
            p = produce(bootstrap, topic, n)
            gc.collect()
            c = consume(bootstrap, topic, n)
            times[name].append((p, c))
    return [Result(name, statistics.median(p for p, _ in times[name]), statistics.median(c for _, c in times[name]), n)
            for name in only]


def table(results: list[Result]) -> str:
    ref = next((r for r in results if r.client == "confluent-kafka"), None)
    lines = [f"{len(results) and results[0].records:,} records of {SIZE} B, {PARTITIONS} partitions, one broker "
             "(median of the rounds)",
             "",
             f"| {'client':<16} | {'produce rec/s':>13} | {'MB/s':>6} | {'vs ck':>6} | "
             f"{'consume rec/s':>13} | {'MB/s':>6} | {'vs ck':>6} |",
             f"|{'-' * 18}|{'-' * 14}:|{'-' * 7}:|{'-' * 7}:|{'-' * 14}:|{'-' * 7}:|{'-' * 7}:|"]
    for r in results:
        pr, cr = r.rate(r.produce_s), r.rate(r.consume_s)
        pv = f"{pr / ref.rate(ref.produce_s):.2f}" if ref else "-"
        cv = f"{cr / ref.rate(ref.consume_s):.2f}" if ref else "-"
        lines.append(f"| {r.client:<16} | {pr:>13,.0f} | {pr * SIZE / 1e6:>6.1f} | {pv:>6} | "
                     f"{cr:>13,.0f} | {cr * SIZE / 1e6:>6.1f} | {cv:>6} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", help="use a running broker instead of starting one")
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3, help="runs per client; the median is reported")
    ap.add_argument("--only", default=",".join(CLIENTS), help="comma-separated clients to run")
    args = ap.parse_args()
    only = [c.strip() for c in args.only.split(",") if c.strip()]
    for c in only:
        if c not in CLIENTS:
            ap.error(f"unknown client {c!r}; choose from {', '.join(CLIENTS)}")
    if args.bootstrap:
        results = run(args.bootstrap, args.records, only, args.rounds)
    else:
        with BrokerProcess() as broker:
            results = run(broker.bootstrap, args.records, only, args.rounds)
    print(table(results))
    if "rivulet" in only:
        from rivulet.protocol import records
        print(f"\nrivulet's record codec: {'C (rivulet.protocol._speedups)' if records.SPEEDUPS else 'pure Python'}")


if __name__ == "__main__":
    main()
