"""Produce/consume throughput and end-to-end latency against a Rivulet broker process.

The load generator is librdkafka (confluent-kafka), on the same machine as the broker.

    python -m benchmarks.produce_consume                 # starts its own broker
    python -m benchmarks.produce_consume --bootstrap host:port   # an already running broker
    python -m benchmarks.produce_consume --tls           # plaintext and TLS on one broker, side by side
    python -m benchmarks.produce_consume --metrics       # produce with and without metrics.listener

It prints one table; docs/performance.md records the results.
"""

from __future__ import annotations

import argparse
import statistics
import threading
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
    bytes: int

    @property
    def rps(self) -> float:
        return self.records / self.seconds

    @property
    def mbps(self) -> float:
        return self.bytes / self.seconds / 1e6


def create_topic(bootstrap: str, name: str, partitions: int, conf: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **(conf or {})})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(30)


def wait_for_leaders(bootstrap: str, topics: list[str], timeout: float = 60.0) -> None:
    """Until Metadata lists every partition of ``topics`` with a leader: a load generator that
    starts sooner spends its first seconds retrying (rdkafka_performance backs off 500 ms), which
    a broker slow to elect (Kafka, with hundreds of new partitions) would pay inside the timing."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while True:
        md = admin.list_topics(timeout=10)
        ready = all(
            t in md.topics and md.topics[t].error is None and md.topics[t].partitions
            and all(p.leader >= 0 and p.error is None for p in md.topics[t].partitions.values())
            for t in topics)
        if ready:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"partitions of {topics} still without a leader after {timeout:.0f}s")
        time.sleep(0.1)


def produce(bootstrap: str, topic: str, count: int, size: int, acks: str, conf: dict[str, str] | None = None
            ) -> Result:
    p = Producer({**(conf or {}), "bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 10, "batch.size": 1_000_000,
                  "batch.num.messages": 100_000, "queue.buffering.max.messages": 1_000_000,
                  "queue.buffering.max.kbytes": 2_000_000, "enable.idempotence": False})
    payload = bytes(i % 251 for i in range(size))
    t0 = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                p.produce(topic, payload)
                break
            except BufferError:
                p.poll(0.001)
    remaining = p.flush(120)
    dt = time.perf_counter() - t0
    assert remaining == 0, f"{remaining} records not delivered"
    return Result(f"produce {size} B acks={acks}", count, dt, count * size)


def consume(bootstrap: str, topic: str, partitions: int, count: int, size: int,
            conf: dict[str, str] | None = None) -> Result:
    c = Consumer({**(conf or {}), "bootstrap.servers": bootstrap, "group.id": "bench-" + uuid.uuid4().hex[:6],
                  "enable.auto.commit": False, "fetch.max.bytes": 52_428_800,
                  "max.partition.fetch.bytes": 10_485_760, "queued.max.messages.kbytes": 1_048_576})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got = 0
    nbytes = 0
    t0 = None
    while got < count:
        # consume(n) returns at n records or its timeout: ask for no more than remain, or the
        # last call waits out the timeout and the wait is counted as consuming.
        msgs = c.consume(min(10_000, count - got), 1.0)
        if t0 is None and msgs:
            t0 = time.perf_counter()
        for m in msgs:
            if m.error() is None:
                got += 1
                nbytes += len(m.value())
    dt = time.perf_counter() - (t0 or time.perf_counter())
    c.close()
    return Result(f"consume {size} B", got, dt, nbytes)


def latency(bootstrap: str, topic: str, rate: int, seconds: float, linger_ms: int = 0,
            conf: dict[str, str] | None = None, acks: str = "1") -> dict[str, float]:
    """Produce at a fixed rate on one partition and time each record until a consumer has it.

    ``linger_ms=0`` sends every record as its own request as soon as it is produced. Kafka reads
    one request at a time per connection (it mutes the socket until the response is out), so
    at thousands of requests a second on one connection it queues; librdkafka's default
    linger.ms=5 batches instead."""
    c = Consumer({**(conf or {}), "bootstrap.servers": bootstrap, "group.id": "lat-" + uuid.uuid4().hex[:6],
                  "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    lat: list[float] = []
    stop = threading.Event()
    total = int(rate * seconds) + 1

    def reader() -> None:
        # poll(), not consume(n): consume blocks until n records or its timeout.
        while not stop.is_set() and len(lat) < total:
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                lat.append((time.perf_counter_ns() - int(m.value()[:20])) / 1e6)

    th = threading.Thread(target=reader)
    th.start()
    p = Producer({**(conf or {}), "bootstrap.servers": bootstrap, "acks": acks, "linger.ms": linger_ms,
                  "enable.idempotence": False})
    # Warm up: the consumer has fetched once before the clock starts.
    p.produce(topic, f"{time.perf_counter_ns():020d}".encode(), partition=0)
    p.flush(10)
    while not lat:
        time.sleep(0.01)
    lat.clear()
    t0 = time.perf_counter()
    for i in range(total):
        target = t0 + i / rate
        delay = target - time.perf_counter()
        if delay > 0:
            time.sleep(delay)  # sleeping, unlike spinning, leaves the GIL to the reader
        p.produce(topic, f"{time.perf_counter_ns():020d}".encode() + b"x" * 80, partition=0)
        p.poll(0)
    p.flush(30)
    th.join(30)
    stop.set()
    c.close()
    lat.sort()

    def pct(q: float) -> float:
        return lat[min(len(lat) - 1, int(q * len(lat)))]
    return {"count": len(lat), "p50": pct(0.50), "p99": pct(0.99), "p999": pct(0.999),
            "mean": statistics.fmean(lat)}


def measure(bootstrap: str, count_1k: int, count_100: int, partitions: int, lat_seconds: float,
            conf: dict[str, str] | None = None) -> tuple[list[Result], dict[str, float]]:
    results: list[Result] = []
    for size, count in ((100, count_100), (1024, count_1k)):
        for acks in ("1", "all"):
            topic = f"bench-{size}-{acks}-{uuid.uuid4().hex[:6]}"
            create_topic(bootstrap, topic, partitions, conf)
            results.append(produce(bootstrap, topic, count, size, acks, conf))
            if acks == "1":
                results.append(consume(bootstrap, topic, partitions, count, size, conf))
    topic = f"bench-lat-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, 1, conf)
    return results, latency(bootstrap, topic, 5000, lat_seconds, conf=conf)


def _latency_line(lat: dict[str, float], seconds: float, what: str = "") -> str:
    return (f"End-to-end latency{what} at 5,000 msg/s for {seconds:.0f} s ({lat['count']} records, 100 B): "
            f"p50 {lat['p50']:.2f} ms, p99 {lat['p99']:.2f} ms, p99.9 {lat['p999']:.2f} ms, mean {lat['mean']:.2f} ms")


def run(bootstrap: str, count_1k: int, count_100: int, partitions: int, lat_seconds: float) -> list[str]:
    results, lat = measure(bootstrap, count_1k, count_100, partitions, lat_seconds)
    lines = [f"| {'workload':<26} | {'records':>9} | {'records/s':>10} | {'MB/s':>7} |",
             f"|{'-' * 28}|{'-' * 11}:|{'-' * 11}:|{'-' * 8}:|"]
    for r in results:
        lines.append(f"| {r.name:<26} | {r.records:>9} | {r.rps:>10,.0f} | {r.mbps:>7.1f} |")
    return lines + ["", _latency_line(lat, lat_seconds)]


def run_tls(count_1k: int, count_100: int, partitions: int, lat_seconds: float) -> list[str]:
    """One broker with a PLAINTEXT and an SSL listener (certificates made for the run), the
    same workloads over each, plaintext first."""
    import sys
    import tempfile
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from tls_certs import make_test_certs

    from rivulet.testing import free_port

    with tempfile.TemporaryDirectory(prefix="rivulet-bench-tls-") as d:
        certs = make_test_certs(Path(d))
        tls_port = free_port()
        broker = BrokerProcess()
        broker.overrides.update({"listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SSL://127.0.0.1:{tls_port}",
                                 **certs.broker_ssl_props()})
        tls_conf = {"security.protocol": "SSL", "ssl.ca.location": str(certs.ca.pem)}
        with broker:
            plain, plain_lat = measure(broker.bootstrap, count_1k, count_100, partitions, lat_seconds)
            tls, tls_lat = measure(f"127.0.0.1:{tls_port}", count_1k, count_100, partitions, lat_seconds, tls_conf)
    lines = [f"| {'workload':<26} | {'plaintext MB/s':>14} | {'TLS MB/s':>9} | {'TLS / plaintext':>15} |",
             f"|{'-' * 28}|{'-' * 15}:|{'-' * 10}:|{'-' * 16}:|"]
    for p, t in zip(plain, tls):
        lines.append(f"| {p.name:<26} | {p.mbps:>14.1f} | {t.mbps:>9.1f} | {t.mbps / p.mbps:>14.0%} |")
    return lines + ["", _latency_line(plain_lat, lat_seconds, " (plaintext)"),
                    _latency_line(tls_lat, lat_seconds, " (TLS)")]


def run_metrics(count_1k: int, count_100: int, partitions: int, rounds: int, scrape_every: float) -> list[str]:
    """The metrics endpoint's cost: two brokers, one with metrics.listener scraped every
    ``scrape_every`` seconds throughout, the same produce workloads on each in turn (which goes
    first alternates by round, so that the machine's drift falls on both); medians of the rounds."""
    import urllib.request

    from rivulet.testing import free_port

    port = free_port()
    plain, timed = BrokerProcess(), BrokerProcess({"metrics.listener": f"http://127.0.0.1:{port}"})
    stop = threading.Event()
    scrape_seconds: list[float] = []
    collect_seconds: list[float] = []  # on the broker's loop, as the endpoint reports it
    page = [b""]

    def scraper() -> None:
        while not stop.wait(scrape_every):
            t0 = time.perf_counter()
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
                page[0] = r.read()
            scrape_seconds.append(time.perf_counter() - t0)
            collect_seconds.extend(float(line.split()[1]) for line in page[0].splitlines()
                                   if line.startswith(b"rivulet_metrics_collect_seconds "))

    mbps: dict[tuple[str, int], list[float]] = {}
    with plain, timed:
        th = threading.Thread(target=scraper, daemon=True)
        th.start()
        for i in range(rounds):
            order = [("without", plain), ("with", timed)]
            for name, broker in order if i % 2 == 0 else order[::-1]:
                for size, count in ((100, count_100), (1024, count_1k)):
                    topic = f"bench-metrics-{size}-{uuid.uuid4().hex[:6]}"
                    create_topic(broker.bootstrap, topic, partitions)
                    mbps.setdefault((name, size), []).append(produce(broker.bootstrap, topic, count, size, "1").mbps)
        stop.set()
        th.join(30)
    # Each round's two runs are next to each other in time: their ratio is less exposed to the
    # machine's drift than the two medians are.
    lines = [f"| {'workload':<22} | {'without MB/s':>12} | {'with MB/s':>9} | {'with / without, per round (median)':>34} |",
             f"|{'-' * 24}|{'-' * 13}:|{'-' * 10}:|{'-' * 35}:|"]
    for size in (100, 1024):
        off, on = mbps[("without", size)], mbps[("with", size)]
        ratio = statistics.median(b / a for a, b in zip(off, on))
        lines.append(f"| {f'produce {size} B acks=1':<22} | {statistics.median(off):>12.1f} | "
                     f"{statistics.median(on):>9.1f} | {ratio:>34.1%} |")
    rounds_line = ", ".join(f"{name} {size} B: " + " ".join(f"{v:.1f}" for v in values)
                            for (name, size), values in sorted(mbps.items()))
    def produce_sample(prefix: str) -> float:
        return sum(float(line.rsplit(b" ", 1)[1]) for line in page[0].splitlines()
                   if line.startswith(f'{prefix}{{request="Produce"'.encode()))
    produce_requests = produce_sample("kafka_network_requestmetrics_requests_total")
    local_ms = (produce_sample("kafka_network_requestmetrics_localtime_seconds_sum") * 1000
                / max(1.0, produce_sample("kafka_network_requestmetrics_localtime_seconds_count")))
    record_us = record_cost_us()
    return lines + ["", f"{rounds} rounds (MB/s each: {rounds_line}); {len(scrape_seconds)} scrapes of "
                        f"{len(page[0]):,} bytes, one every {scrape_every} s, "
                        f"{statistics.fmean(scrape_seconds or [0]) * 1000:.1f} ms each on average "
                        f"(of which {statistics.fmean(collect_seconds or [0]) * 1000:.2f} ms on the broker's "
                        f"event loop, max {max(collect_seconds or [0]) * 1000:.2f} ms); "
                        f"{produce_requests:,.0f} Produce requests timed",
                    f"Recording one Produce request's metrics: {record_us:.2f} us (in-process), against a mean "
                    f"local time of {local_ms:.3f} ms per Produce request: {record_us / 10 / local_ms:.1f}%"]


def record_cost_us(n: int = 200_000) -> float:
    """What the connection adds per request with metrics.listener: five clock readings and
    RequestMetrics.record of a three-partition Produce answer."""
    from rivulet.protocol.messages import produce_response as pr
    from rivulet.server.metrics.requests import RequestMetrics

    m = RequestMetrics()
    resp = pr.ProduceResponse(responses=[pr.TopicProduceResponse(name="t", partition_responses=[
        pr.PartitionProduceResponse(index=i) for i in range(3)])])
    clock = time.perf_counter
    t0 = clock()
    for _ in range(n):
        a, b, c, d, e = clock(), clock(), clock(), clock(), clock()
        m.record("Produce", 9, a, b, c, d, e, clock(), resp)
    return (clock() - t0) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", help="use a running broker instead of starting one")
    ap.add_argument("--records-1k", type=int, default=500_000)
    ap.add_argument("--records-100", type=int, default=2_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--latency-seconds", type=float, default=10)
    ap.add_argument("--tls", action="store_true", help="plaintext and TLS (an SSL listener) side by side")
    ap.add_argument("--metrics", action="store_true", help="produce with and without metrics.listener (scraped)")
    ap.add_argument("--rounds", type=int, default=5, help="--metrics: rounds of each workload on each broker")
    ap.add_argument("--scrape-every", type=float, default=1.0, help="--metrics: seconds between scrapes")
    args = ap.parse_args()
    if args.metrics:
        lines = run_metrics(args.records_1k, args.records_100, args.partitions, args.rounds, args.scrape_every)
    elif args.tls:
        lines = run_tls(args.records_1k, args.records_100, args.partitions, args.latency_seconds)
    elif args.bootstrap:
        lines = run(args.bootstrap, args.records_1k, args.records_100, args.partitions, args.latency_seconds)
    else:
        with BrokerProcess() as broker:
            lines = run(broker.bootstrap, args.records_1k, args.records_100, args.partitions, args.latency_seconds)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
