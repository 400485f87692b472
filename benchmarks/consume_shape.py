"""What the consume rows hand the load generator: the stored batches and the Fetch answers.

For Rivulet and Kafka 4.3.1 (both up at once, as ``benchmarks.compare`` starts them) this
produces the same records with the same ``rdkafka_performance`` command, then reports

- what each broker stored: record batches, records per batch, batches per MB (read from the
  partitions' segment files);
- what each answered one consumer reading it all (``rdkafka_performance -C -d fetch,msg``):
  Fetch requests, partition answers with records, their mean size, how many were exactly
  ``max.partition.fetch.bytes`` (1 MiB: the last batch cut), and the bytes answered over the
  bytes stored (above 1.0: cut batches sent again);
- then ``--rounds`` consume runs without the debug log, alternating the brokers: the
  generator's rate, its CPU per record, and that of its busiest thread.

``--security tls|sasl_ssl`` loads the brokers over that listener as ``benchmarks.compare``
does, and ``--acks all`` produces with acks=all; with either, one more produce of a topic of
its own, with librdkafka's protocol debug log, counts the Produce requests and their mean size.

``--fixed-batches`` produces with ``linger.ms=1000`` and ``sticky.partitioning.linger.ms=0``
instead of the rows' ``linger.ms=10``, so that every batch is full (``batch.size``) whatever
either broker's timing: the same stored layout on both, for comparing the answers alone::

    python -m benchmarks.consume_shape --records 1000000 [--fixed-batches] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import struct
import subprocess
import tempfile
from pathlib import Path

from benchmarks import compare, rdkafka_perf
from benchmarks.instant_fetch import PARTITIONS, consume_sampled

FIXED = ["-X", "linger.ms=1000", "-X", "sticky.partitioning.linger.ms=0"]
_HEADER = struct.Struct(">qi")
_COUNT_AT = 57  # a v2 batch's record count, from its start
FULL_ANSWER = 1 << 20  # librdkafka's max.partition.fetch.bytes


def stored(data_dir: Path, topic: str) -> tuple[int, int, int]:
    """(batches, records, bytes) in the topic's segment files."""
    batches = records = size = 0
    for seg in data_dir.glob(f"{topic}-*/*.log"):
        b = seg.read_bytes()
        pos = 0
        while pos + _COUNT_AT + 4 <= len(b):
            _, length = _HEADER.unpack_from(b, pos)
            if length <= 0:
                break
            batches += 1
            records += struct.unpack_from(">i", b, pos + _COUNT_AT)[0]
            size += 12 + length
            pos += 12 + length
    return batches, records, size


def produce_requests(bootstrap: str, topic: str, records: int, size: int, acks: str,
                     extra: list[str]) -> tuple[int, float]:
    """One produce with librdkafka's protocol debug log: (Produce requests, their mean bytes)."""
    argv = [str(rdkafka_perf.require_binary()),
            *rdkafka_perf.producer_args(bootstrap, topic, records, size, acks, extra=[*extra, "-d", "protocol"])]
    with tempfile.TemporaryFile("w+") as err:
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=err, timeout=600, check=True)
        err.seek(0)
        sizes = [int(x) for x in re.findall(r"Sent ProduceRequest \(v\d+, (\d+) bytes", err.read())]
    return len(sizes), statistics.mean(sizes) if sizes else 0.0


def answers(bootstrap: str, topic: str, records: int, extra: list[str]) -> dict[str, float]:
    """One debug-logged read of the whole topic: librdkafka's own account of each answer."""
    argv = [str(rdkafka_perf.require_binary()),
            *rdkafka_perf.consumer_args(bootstrap, topic, PARTITIONS, records, extra=[*extra, "-d", "fetch,msg"])]
    with tempfile.TemporaryFile("w+") as err:
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=err, timeout=600, check=True)
        err.seek(0)
        log = err.read()
    sizes = [int(x) for x in re.findall(r"MessageSet size (\d+)", log)]
    with_records = [s for s in sizes if s > 0]
    return {"fetch_requests": len(re.findall(r"Fetch \d+/\d+/\d+ toppar", log)),
            "partition_answers": len(with_records),
            "mean_answer_bytes": statistics.mean(with_records) if with_records else 0.0,
            "full_answers": sum(1 for s in with_records if s == FULL_ANSWER),
            "answered_bytes": sum(sizes)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fixed-batches", action="store_true")
    ap.add_argument("--security", choices=compare.SECURITY, default="plaintext")
    ap.add_argument("--acks", choices=("1", "all"), default="1")
    args = ap.parse_args(argv)
    security = compare.Security.named(args.security, Path(tempfile.mkdtemp(prefix="rivulet-shape-certs-")))
    brokers = {kind: compare.Broker(kind, security) for kind in ("rivulet", "kafka")}
    conf = rdkafka_perf.config_args(security.client_conf())
    topics: dict[str, str] = {}
    try:
        for kind, broker in brokers.items():
            broker.start()
            topic = topics[kind] = compare._topic(f"shape-{args.size}")
            compare._create(broker.bootstrap, [topic], PARTITIONS)
            produce_extra = [*conf, *(FIXED if args.fixed_batches else [])]
            p = rdkafka_perf.produce(broker.load_bootstrap, topic, args.records, args.size, args.acks,
                                     extra=produce_extra)
            batches, count, size = stored(Path(broker.impl.data_dir), topic)
            a = answers(broker.load_bootstrap, topic, args.records, conf)
            if args.security != "plaintext" or args.acks != "1":
                logged = compare._topic(f"shape-log-{args.size}")
                compare._create(broker.bootstrap, [logged], PARTITIONS)
                n, mean = produce_requests(broker.load_bootstrap, logged, args.records, args.size, args.acks,
                                           produce_extra)
                lb, lc, _ = stored(Path(broker.impl.data_dir), logged)
                print(f"{kind}: a debug-logged produce: {n} Produce requests of {mean:,.0f} B on average, "
                      f"{lc / max(lb, 1):,.0f} records a stored batch", flush=True)
            print(f"{kind}: produced at {p.records_per_sec:,.0f} records/s; stored {batches} batches, "
                  f"{count / batches:,.0f} records a batch, {batches / (size / 1e6):.2f} batches a MB; "
                  f"{a['fetch_requests']} Fetch requests, {a['partition_answers']} partition answers with records "
                  f"of {a['mean_answer_bytes']:,.0f} B on average ({a['full_answers']} exactly 1 MiB), "
                  f"bytes answered / stored {a['answered_bytes'] / size:.3f}", flush=True)
        rows: dict[str, list[tuple[float, float, float]]] = {k: [] for k in brokers}
        for i in range(args.rounds):
            for kind, broker in brokers.items():
                load = os.getloadavg()[0]
                s, cpu, by_thread = consume_sampled(broker.load_bootstrap, topics[kind], args.records, conf)
                busiest = max(by_thread.values())
                rows[kind].append((s.records_per_sec, cpu / args.records * 1e9, busiest / args.records * 1e9))
                print(f"  round {i + 1} {kind}: {s.records_per_sec:,.0f} records/s, generator "
                      f"{cpu / args.records * 1e9:.0f} ns CPU a record (busiest thread {busiest / args.records * 1e9:.0f}), "
                      f"1-minute load {load:.2f}", flush=True)
        for kind, r in rows.items():
            if r:
                print(f"{kind}: median {statistics.median(x[0] for x in r):,.0f} records/s, generator "
                      f"{statistics.median(x[1] for x in r):.0f} ns a record, busiest thread "
                      f"{statistics.median(x[2] for x in r):.0f}")
    finally:
        for broker in brokers.values():
            broker.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
