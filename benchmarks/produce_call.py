"""What one ``Producer.produce()`` call costs, for changes to the producer's per-record path.

Keyless 100-byte records into the open batch of their sticky partition: linger.ms and the batch
limits are so high that no batch fills or leaves while a round is timed, so the sender thread
stays idle and the figure is ``produce()`` alone (the application's thread). One broker
(``rivulet.testing.BrokerProcess``) answers the metadata; each round ends with a flush.

    python -m benchmarks.produce_call                           # this tree
    python -m benchmarks.produce_call --trees /work/main,.      # alternate two checkouts
    python -m benchmarks.produce_call --shortcut                # the sticky shortcut's batch
        # update alone, in line against a method of the accumulator (no broker)

``--trees`` runs each checkout in its own process (PYTHONPATH set to it), alternating the order
pair by pair, and prints each run's best and median round with the load average.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import time
import timeit
import uuid


def run_rounds(bootstrap: str, records: int, rounds: int) -> list[float]:
    """ns per produce() call, one figure per round."""
    from rivulet.client import Producer
    topic = "produce-call-" + uuid.uuid4().hex[:8]
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 60000, "batch.size": 1 << 30,
                  "batch.num.messages": 1000000, "queue.buffering.max.messages": 2000000,
                  "queue.buffering.max.kbytes": 2000000, "acks": 1, "enable.idempotence": False})
    p.produce(topic, b"x" * 100)
    p.flush(30)
    value = b"v" * 100
    out = []
    for _ in range(rounds):
        produce = p.produce
        gc.collect()
        t0 = time.perf_counter()
        for _ in range(records):
            produce(topic, value)
        out.append((time.perf_counter() - t0) / records * 1e9)
        p.flush(60)
    p.close()
    return out


def shortcut(records: int, rounds: int) -> None:
    """The sticky shortcut's update of the batch and the accumulator's counters, as
    ``AIOProducer.produce`` writes it in line, against the same lines as a method."""
    from rivulet.client.producer.accumulator import PendingRecord, ProducerBatch, RecordAccumulator

    class WithMethod(RecordAccumulator):
        def append_to(self, b: ProducerBatch, record: PendingRecord, size: int, has_callback: bool) -> bool:
            b.records.append(record)
            b.size += size
            if has_callback:
                b.has_callbacks = True
            self.queued_messages += 1
            self.queued_bytes += size
            if b.size < self.batch_size and len(b.records) < self.batch_num:
                return False
            b.full = True
            return True

    acc = WithMethod(1 << 40, 1 << 40, 5, 0, 1 << 40, 1 << 40)
    rec = PendingRecord(None, b"v" * 100, None, 1, None, None)

    def inline() -> None:
        b = ProducerBatch("t", 0, 0.0, 0.0)
        size, cb, fut = 111, None, None
        for _ in range(records):
            b.records.append(rec)
            b.size += size
            if cb is not None or fut is not None:
                b.has_callbacks = True
            acc.queued_messages += 1
            acc.queued_bytes += size
            if b.size < acc.batch_size and len(b.records) < acc.batch_num:
                continue
            b.full = True

    def method() -> None:
        b = ProducerBatch("t", 0, 0.0, 0.0)
        size, cb, fut = 111, None, None
        for _ in range(records):
            if not acc.append_to(b, rec, size, cb is not None or fut is not None):
                continue

    times: dict[str, list[float]] = {"inline": [], "method": []}
    for i in range(rounds):
        for name, fn in (("inline", inline), ("method", method))[:: 1 if i % 2 else -1]:
            times[name].append(timeit.timeit(fn, number=1) / records * 1e9)
    for name, v in times.items():
        print(f"{name}: min {min(v):.0f} ns, median {statistics.median(v):.0f} ns a record")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=100_000, help="produce() calls a round")
    ap.add_argument("--rounds", type=int, default=15, help="rounds a run")
    ap.add_argument("--pairs", type=int, default=4, help="with --trees: runs of each tree")
    ap.add_argument("--trees", help="comma-separated checkouts to alternate")
    ap.add_argument("--shortcut", action="store_true", help="the sticky shortcut's update alone, no broker")
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)  # a child run of --trees
    args = ap.parse_args()
    if args.shortcut:
        shortcut(args.records * 2, args.rounds)
        return
    if args.bootstrap:
        print(" ".join(f"{x:.0f}" for x in run_rounds(args.bootstrap, args.records, args.rounds)))
        return
    from rivulet.testing import BrokerProcess
    trees = [os.path.abspath(t) for t in (args.trees.split(",") if args.trees else ["."])]
    with BrokerProcess() as broker:
        for i in range(args.pairs if args.trees else 1):
            for tree in trees if i % 2 == 0 else trees[::-1]:
                # This file, run with the tree's rivulet (the tree need not have it).
                out = subprocess.run([sys.executable, os.path.abspath(__file__), "--bootstrap", broker.bootstrap,
                                      "--records", str(args.records), "--rounds", str(args.rounds)],
                                     env=dict(os.environ, PYTHONPATH=tree), cwd=tree, capture_output=True, text=True,
                                     check=True)
                rounds = [float(x) for x in out.stdout.split()]
                load = open("/proc/loadavg").read().split()[0]
                print(f"{tree}: best {min(rounds):.0f} ns, median {statistics.median(rounds):.0f} ns a produce() "
                      f"(load average {load})", flush=True)


if __name__ == "__main__":
    main()
