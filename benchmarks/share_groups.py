"""Share groups (KIP-932): records acknowledged per second by 1, 4 and 8 share consumers on a
1-partition topic, against one classic consumer reading the same records.

A topic of one partition is filled with --records records of --size bytes before each run.
Each run uses a fresh group that starts at the earliest offset (share.auto.offset.reset set
as a GROUP config, as Kafka's tools set it). The consumers run on threads of this process,
each in its own client with its own background thread, polling in implicit acknowledgement
mode: every poll accepts the previous batch. The figure is records acknowledged, counted by
the acknowledgement commit callback, per second from subscribe() until the last
acknowledgement is confirmed (joining a share group is one heartbeat). The classic consumer's
figure is records consumed per second over the same span (auto-commit on, as usual; the broker
this starts has no initial rebalance delay), so it is the ceiling a queue is measured against:
a share consumer must also acknowledge every record, and its partition is shared.
Both clients run: confluent-kafka's ShareConsumer and Consumer (librdkafka), and Rivulet's own.
``--clients java`` adds Kafka's Java KafkaShareConsumer (``benchmarks/java/ShareAcks.java``, one
JVM, a thread per consumer, counted the same way; share rows only).
The machine's load average is printed before and after each run.

    python -m benchmarks.share_groups                    # starts its own broker
    python -m benchmarks.share_groups --records 100000 --bootstrap host:port
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rivulet.testing import BrokerProcess


SHARE_ACKS = Path(__file__).resolve().parent / "java" / "ShareAcks.java"
_JAVA_SUMMARY = re.compile(r"^acked (\d+) seconds ([0-9.]+) first ([0-9.]+) batch (\d+) failed \d+"
                           r" acks (\d+) largest (\d+) empty (\d+) emptys ([0-9.]+)$", re.M)


class ShareRunError(RuntimeError):
    """Fewer records than asked for were acknowledged (or consumed) before the timeout."""


def clients(name: str) -> tuple[Any, Any]:
    if name == "confluent":
        from confluent_kafka import Consumer, ShareConsumer
    else:
        from rivulet import Consumer, ShareConsumer
    return ShareConsumer, Consumer


def fill(bootstrap: str, records: int, size: int) -> str:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    topic = f"share-bench-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held until the result is in
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000})
    value = b"x" * size
    for _ in range(records):
        while True:
            try:
                p.produce(topic, value)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0
    return topic


def earliest(bootstrap: str, group: str) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.incremental_alter_configs([res]).values():
        f.result(30)


@dataclass(frozen=True)
class ShareFigures:
    """A share run: ``records`` acknowledged in ``seconds`` from before the first subscribe; the
    first acknowledgement confirmed ``first_ack_s`` in, for ``first_batch`` records. Its round
    trips as the clients saw them: ``acks`` commit callbacks (one per acknowledging request of
    a member), the most records one confirmed, and ``empty_polls`` polls that returned nothing
    between the first acknowledgement and the target, taking ``empty_poll_s`` seconds summed
    over the members."""

    records: int
    seconds: float
    first_ack_s: float
    first_batch: int
    acks: int = 0
    largest_ack: int = 0
    empty_polls: int = 0
    empty_poll_s: float = 0.0

    def trips(self) -> str:
        return (f"{self.acks} acknowledgement callbacks ({self.records / max(self.acks, 1):,.0f} records each, "
                f"at most {self.largest_ack:,}), {self.empty_polls} empty polls ({self.empty_poll_s:.2f} s)")

    @property
    def rate(self) -> float:
        """Records per second, the join included."""
        return self.records / max(self.seconds, 1e-9)

    @property
    def steady_rate(self) -> float | None:
        """Records per second after the first acknowledgement (the join and the first batch
        left out); None when the first batch was all of them."""
        span = self.seconds - self.first_ack_s
        return (self.records - self.first_batch) / span if span > 0 and self.records > self.first_batch else None


class Tally:
    def __init__(self, target: int) -> None:
        self.target = target
        self.lock = threading.Lock()
        self.count = 0
        self.failed = 0
        self.first = time.monotonic()
        self.last = 0.0
        self.first_ack = 0.0
        self.first_batch = 0
        self.acks = 0
        self.largest_ack = 0
        self.empty_polls = 0
        self.empty_poll_s = 0.0

    def add(self, n: int) -> None:
        with self.lock:
            if not self.count:
                self.first_ack, self.first_batch = time.monotonic(), n
            self.count += n
            self.acks += 1
            self.largest_ack = max(self.largest_ack, n)
            self.last = time.monotonic()

    def empty_poll(self, seconds: float) -> None:
        with self.lock:
            if self.count and not self.done:  # between the first acknowledgement and the last
                self.empty_polls += 1
                self.empty_poll_s += seconds

    def figures(self) -> ShareFigures:
        return ShareFigures(self.count, self.last - self.first, self.first_ack - self.first, self.first_batch,
                            self.acks, self.largest_ack, self.empty_polls, self.empty_poll_s)

    @property
    def done(self) -> bool:
        return self.count >= self.target

    def rate(self) -> float:
        return self.count / max(self.last - self.first, 1e-9)


def share_run(client: str, bootstrap: str, topic: str, records: int, members: int, timeout: float) -> float:
    return share_figures(client, bootstrap, topic, records, members, timeout).rate


def share_figures(client: str, bootstrap: str, topic: str, records: int, members: int,
                  timeout: float) -> ShareFigures:
    ShareConsumer, _ = clients(client)
    group = f"share-bench-{uuid.uuid4().hex[:6]}"
    earliest(bootstrap, group)
    tally = Tally(records)  # the clock starts before the members subscribe

    def acked(offsets: dict, exc: Any) -> None:
        n = sum(len(v) for v in offsets.values())
        if exc is not None:
            tally.failed += n
        else:
            tally.add(n)

    consumers = []
    for _ in range(members):
        c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
        c.set_acknowledgement_commit_callback(acked)
        c.subscribe([topic])
        consumers.append(c)
    deadline = time.monotonic() + timeout

    def loop(c: Any) -> None:
        while not tally.done and time.monotonic() < deadline:
            polled = time.monotonic()
            if not c.poll(0.1):
                tally.empty_poll(time.monotonic() - polled)

    threads = [threading.Thread(target=loop, args=(c,)) for c in consumers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in consumers:
        c.close()
    if not tally.done:
        raise ShareRunError(f"{client} x{members}: {tally.count} of {records} acknowledged in {timeout:.0f} s "
                         f"({tally.failed} failed)")
    return tally.figures()


def parse_java_summary(text: str) -> ShareFigures:
    """ShareAcks.java's summary line."""
    m = _JAVA_SUMMARY.search(text)
    if m is None:
        raise ShareRunError(f"no ShareAcks summary in: {text[-2000:]!r}")
    return ShareFigures(int(m[1]), float(m[2]), float(m[3]), int(m[4]), int(m[5]), int(m[6]), int(m[7]), float(m[8]))


def java_share_run(bootstrap: str, topic: str, records: int, members: int, timeout: float) -> float:
    return java_share_figures(bootstrap, topic, records, members, timeout).rate


def java_share_figures(bootstrap: str, topic: str, records: int, members: int, timeout: float) -> ShareFigures:
    """share_figures with Kafka's Java KafkaShareConsumer: one JVM, a thread per consumer."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests import java_tools
    group = f"share-bench-{uuid.uuid4().hex[:6]}"
    earliest(bootstrap, group)
    try:  # source-file mode: the JVM compiles it, before its clock starts
        run = java_tools.run_tool(str(SHARE_ACKS), [bootstrap, topic, group, str(members), str(records), str(timeout)],
                                  timeout=timeout + 120, jvm_args=java_tools.MEASURED_JVM)
    except java_tools.JavaToolError as e:
        raise ShareRunError(f"java x{members}: {e}") from e
    return parse_java_summary(run.stdout)


def classic_run(client: str, bootstrap: str, topic: str, records: int, timeout: float) -> float:
    _, Consumer = clients(client)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"classic-bench-{uuid.uuid4().hex[:6]}",
                  "auto.offset.reset": "earliest"})
    tally = Tally(records)
    c.subscribe([topic])
    deadline = time.monotonic() + timeout
    try:
        while not tally.done and time.monotonic() < deadline:
            got = sum(1 for m in c.consume(1000, 0.1) if m.error() is None)
            if got:
                tally.add(got)
    finally:
        c.close()
    if not tally.done:
        raise ShareRunError(f"{client} classic: {tally.count} of {records} consumed in {timeout:.0f} s")
    return tally.rate()


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", help="an existing broker (default: start one)")
    ap.add_argument("--records", type=int, default=50_000)
    ap.add_argument("--size", type=int, default=100, help="value bytes")
    ap.add_argument("--members", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--clients", nargs="+", default=["confluent", "rivulet"], choices=["confluent", "rivulet", "java"])
    ap.add_argument("--timeout", type=float, default=300.0)
    args = ap.parse_args()
    broker = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        broker = BrokerProcess({"group.initial.rebalance.delay.ms": "0"})
        broker.start()
        bootstrap = broker.bootstrap
    try:
        print(f"{args.records} records of {args.size} B on a 1-partition topic; load average (1, 5, 15 min) "
              f"before and after each run")
        print(f"{'client':<10} {'consumers':<12} {'records/s':>10}   load before -> after")
        for client in args.clients:
            runs: list[tuple[str, Any]] = []
            if client != "java":
                runs.append(("classic x1", lambda t, client=client: classic_run(client, bootstrap, t, args.records,
                                                                                   args.timeout)))
            for k in args.members:
                share = java_share_run if client == "java" else functools.partial(share_run, client)
                runs.append((f"share x{k}", lambda t, k=k, share=share: share(bootstrap, t, args.records, k,
                                                                              args.timeout)))
            for label, run in runs:
                topic = fill(bootstrap, args.records, args.size)
                before = load()
                try:
                    rate = run(topic)
                except ShareRunError as e:
                    raise SystemExit(str(e)) from e
                print(f"{client:<10} {label:<12} {rate:>10,.0f}   {before} -> {load()}", flush=True)
    finally:
        if broker is not None:
            broker.cleanup()


if __name__ == "__main__":
    main()
