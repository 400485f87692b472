"""What creating (and deleting) a large topic costs other clients: Metadata and Produce latency
measured by a second client while a 2,000-partition topic is created and deleted.

    python -m benchmarks.topic_create_latency                  # starts its own broker
    python -m benchmarks.topic_create_latency --partitions 5000
    python -m benchmarks.topic_create_latency --bootstrap host:port

The probe client (confluent-kafka) sends one request at a time, alternating a Metadata request
for its own topic and a one-record acks=1 Produce, so each latency is one request's round
trip. docs/performance.md records the results.
"""

from __future__ import annotations

import argparse
import threading
import time
from dataclasses import dataclass, field

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from rivulet.testing import BrokerProcess

PROBE_TOPIC = "latency-probe"


@dataclass
class Probe:
    """Latencies (ms) of a second client's requests, and every failure it saw.

    Requests are due on a fixed schedule (one every ``interval`` seconds, Metadata and Produce
    in turn) and a latency counts from when the request was due, not when it could be sent:
    a stall then shows as every request it held up (no coordinated omission), not as one.
    """

    interval: float = 0.005
    metadata: list[tuple[float, float]] = field(default_factory=list)  # (due, latency ms)
    produce: list[tuple[float, float]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self, bootstrap: str) -> None:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0,
                             "enable.idempotence": False, "message.timeout.ms": 60_000})
        delivered: list[str | None] = []

        def on_delivery(err, msg) -> None:
            delivered.append(None if err is None else err.str())

        due = time.perf_counter()
        turn = 0
        while not self._stop.is_set():
            now = time.perf_counter()
            if now < due:
                time.sleep(due - now)
            if turn % 2 == 0:
                try:
                    md = admin.list_topics(PROBE_TOPIC, timeout=60)
                    if md.topics[PROBE_TOPIC].error is not None:
                        self.errors.append(f"metadata: {md.topics[PROBE_TOPIC].error}")
                except Exception as e:  # a timeout is a failure to answer: recorded, never hidden
                    self.errors.append(f"metadata: {e}")
                self.metadata.append((due, (time.perf_counter() - due) * 1000))
            else:
                delivered.clear()
                producer.produce(PROBE_TOPIC, b"probe", partition=0, on_delivery=on_delivery)
                if producer.flush(60) != 0 or delivered != [None]:
                    self.errors.append(f"produce: {delivered or 'not delivered'}")
                self.produce.append((due, (time.perf_counter() - due) * 1000))
            turn += 1
            due += self.interval

    def stop(self) -> None:
        self._stop.set()

    def window(self, start: float, end: float) -> tuple[list[float], list[float]]:
        """Metadata and Produce latencies of the requests due between ``start`` and ``end``."""
        return ([ms for due, ms in self.metadata if start <= due <= end],
                [ms for due, ms in self.produce if start <= due <= end])


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def summary(name: str, values: list[float]) -> str:
    return (f"| {name} | {len(values)} | {percentile(values, 50):.1f} | {percentile(values, 99):.1f} | "
            f"{max(values, default=float('nan')):.1f} |")


@dataclass
class Phase:
    action: str
    seconds: float
    metadata_ms: list[float]
    produce_ms: list[float]
    errors: list[str]


def measure(bootstrap: str, partitions: int, topic: str = "big") -> list[Phase]:
    """Create then delete ``topic`` while a probe runs: its latencies during each."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(PROBE_TOPIC, num_partitions=1, replication_factor=1)])[PROBE_TOPIC].result(30)
    phases = []
    for action in ("create", "delete"):
        probe = Probe()
        th = threading.Thread(target=probe.run, args=(bootstrap,), daemon=True)
        th.start()
        time.sleep(0.5)  # the probe's connections are up and warm before the big request
        t0 = time.perf_counter()
        if action == "create":
            admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                                operation_timeout=300, request_timeout=300)[topic].result(300)
        else:
            admin.delete_topics([topic], operation_timeout=300, request_timeout=300)[topic].result(300)
        t1 = time.perf_counter()
        time.sleep(0.2)
        probe.stop()
        th.join(120)
        md, prod = probe.window(t0, t1)
        phases.append(Phase(action, t1 - t0, md, prod, probe.errors))
    return phases


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=2000)
    ap.add_argument("--bootstrap", help="an already running broker (else one is started)")
    args = ap.parse_args()
    broker = None if args.bootstrap else BrokerProcess().start()
    try:
        bootstrap = args.bootstrap or broker.bootstrap
        phases = measure(bootstrap, args.partitions)
        for ph in phases:
            print(f"{ph.action} {args.partitions} partitions: {ph.seconds:.2f} s")
        print("| while | requests | p50 ms | p99 ms | max ms |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for ph in phases:
            print(summary(f"Metadata, {ph.action}", ph.metadata_ms))
            print(summary(f"Produce, {ph.action}", ph.produce_ms))
        for ph in phases:
            for e in ph.errors:
                print(f"error during {ph.action}: {e}")
    finally:
        if broker is not None:
            broker.cleanup()


if __name__ == "__main__":
    main()
