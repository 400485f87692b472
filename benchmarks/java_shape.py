"""What the Java tools' rows make Kafka's Java client do, against Rivulet and Kafka 4.3.1.

The ProducerPerformance and ConsumerPerformance rows of ``benchmarks.compare`` run the load
generator at both cores with either broker, so their rates measure the client. This asks
whether either broker's answers make the client do more work per record, with figures that
do not move with the machine's load: the client's own metrics (``--print-metrics``), what each
broker stored, and the JVM's CPU per record, in all and per thread (from ``/proc``).

For both brokers (up at once, started as ``benchmarks.compare`` starts them) and each round,
alternating, with the rows' settings (4 partitions, ``linger.ms=10``, ``batch.size=1000000``,
idempotence off):

- ProducerPerformance, 100 B, acks=all and acks=1: records per Produce request and per stored
  batch, Produce requests and the mean of those in flight (requests x their mean latency over the
  sender's time, Little's law), the client's produce-to-ack (its ``request-latency-avg``) and
  send-to-callback (the tool's ``avg latency``) times, time in the accumulator, the main thread
  blocked on ``buffer.memory``, and the JVM's CPU per record;
- ConsumerPerformance over the acks=1 topic: records and bytes per Fetch answer, Fetches per
  second, mean Fetch latency, and the JVM's CPU per record;
- with ``--jfr``, one more run of each with a flight recording (``settings=profile``): where the
  client's threads spend their samples, by the Kafka method nearest the top of each stack::

    python -m benchmarks.java_shape --records 3000000 --rounds 2 [--jfr]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from benchmarks import compare
from benchmarks.consume_shape import stored
from benchmarks.instant_fetch import run_sampled
from tests import java_tools

PARTITIONS = compare.PARTITIONS
_METRIC = re.compile(r"^([\w.-]+):([\w.-]+):\{([^}]*)\}\s*:\s*(\S+)\s*$", re.M)
_PRODUCER_TOTAL = re.compile(r"^(\d+) records sent, ([\d.]+) records/sec .*?, ([\d.]+) ms avg latency.*99\.9th", re.M)


def metrics(stdout: str) -> dict[str, float]:
    """``group:name`` -> value over the client's metrics as ``--print-metrics`` prints them; a
    per-node figure (``node-id=node-1``, the broker; not the bootstrap's ``node--1``) as
    ``group:name:node``."""
    out: dict[str, float] = {}
    for group, name, tags, value in _METRIC.findall(stdout):
        try:
            v = float(value.replace(",", ""))
        except ValueError:
            continue
        if "node-id=node-" in tags:
            if "node-id=node--" in tags:  # the bootstrap connection: Metadata only
                continue
            out[f"{group}:{name}:node"] = v
        elif "topic=" not in tags and "partition=" not in tags:
            out[f"{group}:{name}"] = v
    return out


def thread_kinds(by_name: dict[str, float]) -> dict[str, float]:
    """The JVM's threads by role (their /proc names are cut at 15 characters)."""
    kinds: Counter[str] = Counter()
    for name, seconds in by_name.items():
        if name.startswith("kafka-producer") or name.startswith("kafka-coordinat") or name.startswith("consumer_backgr"):
            kind = "client thread"
        elif name == "java" or name == "main":
            kind = "main"
        elif "Compiler" in name or name.startswith("C1 ") or name.startswith("C2 "):
            kind = "JIT"
        elif name.startswith("G1") or name.startswith("GC ") or "GC" in name:
            kind = "GC"
        else:
            kind = "other"
        kinds[kind] += seconds
    return dict(kinds)


def jfr_profile(recording: Path, top: int = 12) -> tuple[int, list[tuple[str, str, float]]]:
    """The samples, and the most frequent (thread, Kafka method nearest the stack's top (else
    the leaf), share of samples); each thread's own share as (thread, "all", share)."""
    text = subprocess.run(["jfr", "print", "--json", "--events", "jdk.ExecutionSample", str(recording)],
                          capture_output=True, text=True, check=True).stdout
    events = json.loads(text)["recording"]["events"]
    counts: Counter[tuple[str, str]] = Counter()
    for e in events:
        v = e["values"]
        thread = (v.get("sampledThread") or {}).get("javaName") or "?"
        frames = v["stackTrace"]["frames"] if v.get("stackTrace") else []

        def name(f: dict[str, dict[str, dict[str, str]]]) -> str:
            m = f["method"]
            return f"{m['type']['name'].replace('/', '.').rsplit('.', 1)[-1]}.{m['name']}"
        kafka = next((f for f in frames if f["method"]["type"]["name"].replace("/", ".").startswith("org.apache.kafka")),
                     None)
        leaf = name(frames[0]) if frames else "?"
        label = leaf if kafka is None or kafka is frames[0] else f"{name(kafka)} > {leaf}"
        counts[(thread.split(" | ")[0], label)] += 1
    total = sum(counts.values()) or 1
    threads: Counter[str] = Counter()
    for (t, _), n in counts.items():
        threads[t] += n
    return total, [(t, "all", n / total) for t, n in threads.most_common(3)] + \
        [(t, m, n / total) for (t, m), n in counts.most_common(top)]


def _jvm(jfr: Path | None) -> list[str]:
    return [*java_tools.MEASURED_JVM,
            *([] if jfr is None else [f"-XX:StartFlightRecording=filename={jfr},settings=profile,dumponexit=true"])]


def produce(bs: str, topic: str, records: int, size: int, acks: str, jfr: Path | None = None) -> dict[str, float]:
    props = {**compare.JAVA_PRODUCER_PROPS, "acks": acks, "bootstrap.servers": bs}
    argv = java_tools.tool_command(java_tools.PRODUCER_PERF, [
        "--topic", topic, "--num-records", str(records), "--record-size", str(size), "--throughput", "-1",
        "--print-metrics", "--producer-props", *(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in props.items())],
        jvm_args=_jvm(jfr))
    out, cpu, by_name = run_sampled(argv, timeout=compare.TOOL_TIMEOUT)
    m = metrics(out)
    totals = list(_PRODUCER_TOTAL.finditer(out))  # the last: the run's total, after the periodic lines
    total = totals[-1] if totals else None
    if total is None or int(total.group(1)) != records:
        raise RuntimeError(f"ProducerPerformance fell short:\n{out[-3000:]}")
    rps = float(total.group(2))
    requests = m["producer-node-metrics:request-total:node"]
    latency_ms = m["producer-node-metrics:request-latency-avg:node"]
    seconds = records / rps
    r = {"records_per_sec": rps, "send_to_callback_ms": float(total.group(3)),
         "records_per_request": m["producer-metrics:records-per-request-avg"],
         "batch_bytes": m["producer-metrics:batch-size-avg"],
         "requests": requests, "requests_per_sec": requests / seconds,
         "produce_to_ack_ms": latency_ms, "produce_to_ack_max_ms": m["producer-node-metrics:request-latency-max:node"],
         "in_flight": requests * latency_ms / 1000 / seconds,
         "queue_ms": m["producer-metrics:record-queue-time-avg"],
         "buffer_wait_s": m["producer-metrics:bufferpool-wait-time-ns-total"] / 1e9,
         "sender_io_wait_s": m["producer-metrics:io-wait-time-ns-total"] / 1e9,
         "sender_polls": m["producer-metrics:select-total"],
         "cpu_ns": cpu / records * 1e9}
    r.update({f"{k}_ns": s / records * 1e9 for k, s in thread_kinds(by_name).items()})
    return r


def consume(bs: str, topic: str, records: int, jfr: Path | None = None) -> dict[str, float]:
    argv = java_tools.tool_command(java_tools.CONSUMER_PERF, [
        "--bootstrap-server", bs, "--topic", topic, "--num-records", str(records), "--group",
        compare._topic("shape-group"), "--timeout", "10000", "--print-metrics"], jvm_args=_jvm(jfr))
    out, cpu, by_name = run_sampled(argv, timeout=compare.TOOL_TIMEOUT)
    m = metrics(out)
    g = "consumer-fetch-manager-metrics"
    fetches = m[f"{g}:fetch-total"]
    row = next(ln for ln in out.splitlines()[::-1] if re.match(r"^\d{4}-", ln.strip()))
    fetch_ms = float(row.split(",")[7])  # fetch.time.ms: the run without the group join
    consumed = float(row.split(",")[4])  # data.consumed.in.nMsg
    if consumed < records:
        raise RuntimeError(f"ConsumerPerformance fell short:\n{out[-3000:]}")
    r = {"records_per_sec": consumed / (fetch_ms / 1000), "fetches": fetches,
         "fetches_per_sec": fetches / (fetch_ms / 1000), "records_per_fetch": m[f"{g}:records-per-request-avg"],
         "bytes_per_fetch": m[f"{g}:fetch-size-avg"], "fetch_latency_ms": m[f"{g}:fetch-latency-avg"],
         "client_io_wait_s": m["consumer-metrics:io-wait-time-ns-total"] / 1e9, "cpu_ns": cpu / records * 1e9}
    r.update({f"{k}_ns": s / records * 1e9 for k, s in thread_kinds(by_name).items()})
    return r


def _show(kind: str, what: str, r: dict[str, float]) -> None:
    print(f"  {kind} {what}: " + ", ".join(f"{k} {v:,.3g}" if abs(v) < 1000 else f"{k} {v:,.0f}"
                                          for k, v in r.items()), flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=3_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--acks", default="all,1")
    ap.add_argument("--jfr", action="store_true", help="then one run of each with a flight recording")
    ap.add_argument("--skip-consume", action="store_true")
    args = ap.parse_args(argv)
    brokers = {kind: compare.Broker(kind, compare.Security.named("plaintext", Path(tempfile.gettempdir())))
               for kind in ("rivulet", "kafka")}
    rows: dict[tuple[str, str], list[dict[str, float]]] = {}

    def run(kind: str, what: str, fn: Callable[..., dict[str, float]], *args: str | int) -> None:
        load = os.getloadavg()[0]
        r = fn(*args)
        r["load"] = load
        rows.setdefault((kind, what), []).append(r)
        _show(kind, what, r)

    try:
        for broker in brokers.values():
            broker.start()
        for i in range(args.rounds):
            print(f"round {i + 1}", flush=True)
            for kind, broker in brokers.items():
                consumed = None
                for acks in args.acks.split(","):
                    topic = compare._topic(f"jshape-{args.size}-{acks}")
                    compare._create(broker.bootstrap, [topic], PARTITIONS)
                    run(kind, f"produce acks={acks}", produce, broker.bootstrap, topic, args.records, args.size, acks)
                    batches, count, size = stored(Path(broker.impl.data_dir), topic)
                    rows[(kind, f"produce acks={acks}")][-1]["records_per_batch"] = count / batches
                    print(f"    stored {batches} batches, {count / batches:,.0f} records a batch", flush=True)
                    if acks == "1":
                        consumed = topic
                if consumed is not None and not args.skip_consume:
                    run(kind, "consume", consume, broker.bootstrap, consumed, args.records)
        if args.jfr:
            for kind, broker in brokers.items():
                with tempfile.TemporaryDirectory() as d:
                    topic = compare._topic(f"jshape-jfr-{args.size}")
                    compare._create(broker.bootstrap, [topic], PARTITIONS)
                    produce(broker.bootstrap, topic, args.records, args.size, "1", Path(d, "p.jfr"))
                    consume(broker.bootstrap, topic, args.records, Path(d, "c.jfr"))
                    for what, rec in (("produce acks=1", Path(d, "p.jfr")), ("consume", Path(d, "c.jfr"))):
                        samples, profile = jfr_profile(rec)
                        print(f"{kind} {what}, {samples} JFR samples (share, thread, Kafka frame > leaf):", flush=True)
                        for thread, method, share in profile:
                            print(f"    {share:6.1%}  {thread:28.28}  {method}", flush=True)
        print("medians over the rounds:")
        for (kind, what), rs in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            _show(kind, what, {k: statistics.median(r[k] for r in rs if k in r) for k in rs[0]})
    finally:
        for broker in brokers.values():
            broker.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
