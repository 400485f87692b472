"""Rivulet and Apache Kafka side by side: identical workloads against both, on this machine.

The brokers alternate A B A B (Rivulet, Kafka, Rivulet, Kafka for two rounds), each round on a
fresh data directory. After start-up each broker gets an untimed warm-up (``--warmup``) so that
Kafka's JIT has compiled its produce and fetch paths. The table reports the median of the
rounds for each figure and the spread between rounds:

* produce throughput, 100 B and 1 KiB records, acks=1 and acks=all, loaded by librdkafka
  (``benchmarks.produce_consume.produce``) and by Kafka's Java ProducerPerformance
  (``tests.java_tools.producer_perf``, idempotence off like the librdkafka load);
* consume throughput from the full acks=1 topics: librdkafka (``produce_consume.consume``)
  and Kafka's ConsumerPerformance;
* end-to-end latency at a fixed 5,000 msg/s (``produce_consume.latency``);
* the time for a classic consumer group of 10 members to be Stable (``benchmarks.groups``;
  group.initial.rebalance.delay.ms=0 on both brokers);
* start-up time, from the broker process's creation (``/proc/<pid>/stat``) to its first
  successful Metadata response, and the broker's resident memory (VmRSS, summed over its
  process tree; for Kafka the java process) after the workloads.

    python -m benchmarks.compare                        # 2 rounds, default counts
    python -m benchmarks.compare --rounds 1 --records-100 50000 --records-1k 20000

Progress goes to stderr, the markdown table and the run's context to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path

_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

import confluent_kafka  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from benchmarks import groups  # noqa: E402
from benchmarks.produce_consume import consume, create_topic, latency, produce  # noqa: E402
from benchmarks.reference.kafka import KAFKA_VERSION, KafkaReference  # noqa: E402
from rivulet.testing import BrokerProcess  # noqa: E402
from tests import java_tools  # noqa: E402

PARTITIONS = 4
JAVA_LATENCY_RECORDS = 2000
LATENCY_RATE = 5000
# librdkafka's default (5) batches; 0 sends one request per record (see produce_consume.latency)
LATENCY_LINGERS = (5, 0)
GROUP_MEMBERS = 10

# (key, label, unit, higher_is_better)
FIGURES: list[tuple[str, str, str, bool]] = []


def _figure(key: str, label: str, unit: str, higher_is_better: bool) -> str:
    FIGURES.append((key, label, unit, higher_is_better))
    return key


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- process facts


def _boottime_now() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def process_started_at(pid: int) -> float:
    """The process's creation time on the CLOCK_BOOTTIME scale (resolution one clock tick)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22 overall: starttime


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            out += [int(x) for x in (task / "children").read_text().split()]
    except OSError:
        pass
    return out


def rss_kib(pid: int) -> int:
    """VmRSS of the process and all its descendants, in KiB."""
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
        stack += _children(p)
    return total


def wait_metadata(bootstrap: str, timeout: float = 120.0) -> None:
    """Poll until the broker answers Metadata listing at least one broker."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while True:
        try:
            if admin.list_topics(timeout=2).brokers:
                return
        except Exception:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.02)


# ---------------------------------------------------------------------------- brokers


class Broker:
    """Start a broker, measure start-up, yield its bootstrap; both kinds behind one face."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.impl: BrokerProcess | KafkaReference | None = None

    def start(self) -> float:
        if self.kind == "rivulet":
            self.impl = BrokerProcess({"group.initial.rebalance.delay.ms": "0"})
        else:
            self.impl = KafkaReference(group_initial_rebalance_delay_ms=0)
        self.impl.start()  # Rivulet: until it listens; Kafka: format, then until Metadata works
        wait_metadata(self.impl.bootstrap)
        done = _boottime_now()
        return done - process_started_at(self.pid)

    @property
    def pid(self) -> int:
        return self.impl.proc.pid

    @property
    def bootstrap(self) -> str:
        return self.impl.bootstrap

    def close(self) -> None:
        if self.impl is None:
            return
        if self.kind == "kafka":
            self.impl.stop()
        self.impl.cleanup()
        self.impl = None


# ---------------------------------------------------------------------------- workloads


def _topic(prefix: str) -> str:
    return f"cmp-{prefix}-{uuid.uuid4().hex[:6]}"


def measure(broker: Broker, args: argparse.Namespace) -> dict[str, float]:
    results: dict[str, float] = {}

    def attempt(name: str, fn: Callable[[], None]) -> None:
        t0 = time.perf_counter()
        try:
            fn()
            log(f"  {broker.kind}: {name} done in {time.perf_counter() - t0:.1f}s")
        except Exception:
            log(f"  {broker.kind}: {name} FAILED\n{traceback.format_exc()}")

    log(f"{broker.kind}: starting")
    results["startup"] = broker.start()
    log(f"  {broker.kind}: Metadata answered {results['startup']:.2f}s after process creation")
    bs = broker.bootstrap
    sizes = ((100, args.records_100), (1024, args.records_1k))

    if args.warmup:
        # Untimed: the same produce and fetch paths once, so Kafka's JIT has compiled them and
        # the figures below compare steady states, as a long-running broker would be in.
        def warm() -> None:
            for size, count in ((100, args.warmup), (1024, max(1, args.warmup // 3))):
                topic = _topic(f"warm-{size}")
                create_topic(bs, topic, PARTITIONS)
                produce(bs, topic, count, size, "1")
                consume(bs, topic, PARTITIONS, count, size)
        attempt("warm-up (untimed)", warm)

    for size, count in sizes:
        for acks in ("1", "all"):
            def rdk(size: int = size, count: int = count, acks: str = acks) -> None:
                topic = _topic(f"rdk-{size}-{acks}")
                create_topic(bs, topic, PARTITIONS)
                r = produce(bs, topic, count, size, acks)
                results[f"rdk_prod_{size}_{acks}_rps"] = r.rps
                results[f"rdk_prod_{size}_{acks}_mbps"] = r.mbps
                if acks == "1":
                    c = consume(bs, topic, PARTITIONS, count, size)
                    results[f"rdk_cons_{size}_rps"] = c.rps
                    results[f"rdk_cons_{size}_mbps"] = c.mbps
                    if not args.no_java_consumer:
                        j = java_tools.consumer_perf(bs, topic, num_records=count, timeout=300)
                        # fetch.* figures exclude the group join, which is measured separately.
                        results[f"java_cons_{size}_rps"] = j.fetch_records_per_sec
                        results[f"java_cons_{size}_mbps"] = j.fetch_mb_per_sec * 1.048576  # MiB/s -> MB/s
            attempt(f"librdkafka produce/consume {size} B acks={acks}", rdk)

            def jpp(size: int = size, count: int = count, acks: str = acks) -> None:
                topic = _topic(f"java-{size}-{acks}")
                create_topic(bs, topic, PARTITIONS)
                r = java_tools.producer_perf(bs, topic, num_records=count, record_size=size, acks=acks,
                                             props={"enable.idempotence": False}, timeout=300)
                results[f"java_prod_{size}_{acks}_rps"] = r.records_per_sec
                results[f"java_prod_{size}_{acks}_mbps"] = r.mb_per_sec * 1.048576  # MiB/s -> MB/s
            attempt(f"ProducerPerformance {size} B acks={acks}", jpp)

    def lat() -> None:
        for linger in LATENCY_LINGERS:
            topic = _topic(f"lat{linger}")  # a fresh topic: the consumer starts at its beginning
            create_topic(bs, topic, 1)
            r = latency(bs, topic, LATENCY_RATE, args.latency_seconds, linger_ms=linger)
            for q in ("p50", "p99", "p999"):
                results[f"lat{linger}_{q}"] = r[q]
    attempt(f"end-to-end latency at {LATENCY_RATE} msg/s", lat)

    def jlat() -> None:
        # Kafka's own EndToEndLatency: one record at a time, acks=all, round trip per record.
        topic = _topic("jlat")
        create_topic(bs, topic, 1)
        r = java_tools.end_to_end_latency(bs, topic, num_records=JAVA_LATENCY_RECORDS, record_size=100, acks="all")
        results["jlat_avg"] = r.avg_ms
        results["jlat_p99"] = float(r.p99_ms)
    attempt("Java EndToEndLatency", jlat)

    def grp() -> None:
        host, port = bs.rsplit(":", 1)

        async def go() -> float:
            group = f"cmp-{uuid.uuid4().hex[:8]}"
            elapsed, members, _ = await groups.rebalance(host, int(port), group, GROUP_MEMBERS, args.heartbeat_ms)
            for m in members:
                await m.c.close()
            return elapsed
        results["group_stable"] = asyncio.run(go()) * 1000
    attempt(f"{GROUP_MEMBERS}-member group to Stable", grp)

    results["rss"] = rss_kib(broker.pid) / 1024
    log(f"  {broker.kind}: RSS {results['rss']:.0f} MiB")
    return results


# ---------------------------------------------------------------------------- the table


def _declare_figures() -> None:
    for size, label in ((100, "100 B"), (1024, "1 KiB")):
        for acks in ("1", "all"):
            for unit, suffix in (("records/s", "rps"), ("MB/s", "mbps")):
                _figure(f"rdk_prod_{size}_{acks}_{suffix}", f"produce {label}, acks={acks}, librdkafka", unit, True)
                _figure(f"java_prod_{size}_{acks}_{suffix}", f"produce {label}, acks={acks}, Java ProducerPerformance",
                        unit, True)
    for size, label in ((100, "100 B"), (1024, "1 KiB")):
        for unit, suffix in (("records/s", "rps"), ("MB/s", "mbps")):
            _figure(f"rdk_cons_{size}_{suffix}", f"consume {label}, full topic, librdkafka", unit, True)
            _figure(f"java_cons_{size}_{suffix}", f"consume {label}, full topic, Java ConsumerPerformance", unit, True)
    for linger in LATENCY_LINGERS:
        for q, name in (("p50", "p50"), ("p99", "p99"), ("p999", "p99.9")):
            _figure(f"lat{linger}_{q}", f"end-to-end latency {name} at {LATENCY_RATE:,} msg/s, linger.ms={linger}",
                    "ms", False)
    _figure("jlat_avg", "Java EndToEndLatency average (acks=all, one at a time)", "ms", False)
    _figure("jlat_p99", "Java EndToEndLatency p99 (whole ms)", "ms", False)
    _figure("group_stable", f"{GROUP_MEMBERS}-member group start -> Stable", "ms", False)
    _figure("startup", "start-up to first Metadata response", "s", False)
    _figure("rss", "broker RSS after the run", "MiB", False)


def _fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "failed"
    if unit == "records/s":
        return f"{v:,.0f}"
    if unit in ("MB/s", "MiB"):
        return f"{v:,.1f}"
    if unit == "s":
        return f"{v:.2f}"
    return f"{v:,.2f}" if v < 100 else f"{v:,.0f}"


def table(runs: dict[str, list[dict[str, float]]]) -> list[str]:
    def med(kind: str, key: str) -> float | None:
        vals = [r[key] for r in runs[kind] if key in r]
        return statistics.median(vals) if vals else None

    def spread(kind: str, key: str) -> str:
        vals = [r[key] for r in runs[kind] if key in r]
        if len(vals) < 2 or statistics.median(vals) <= 0:
            return "-"
        return f"{(max(vals) - min(vals)) / statistics.median(vals) * 100:.0f}%"

    lines = [
        "| figure | unit | Rivulet | Kafka | ratio (> 1.0: Rivulet better) | spread R / K |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for key, label, unit, higher in FIGURES:
        r, k = med("rivulet", key), med("kafka", key)
        if r is None and k is None:
            continue
        if r is None or k is None or min(r, k) <= 0:
            ratio = "n/a"
        else:
            ratio = f"{(r / k if higher else k / r):.2f}"
            ratio += "" if higher else " (K/R)"
        lines.append(f"| {label} | {unit} | {_fmt(r, unit)} | {_fmt(k, unit)} | {ratio} | "
                     f"{spread('rivulet', key)} / {spread('kafka', key)} |")
    return lines


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def context(argv: list[str], args: argparse.Namespace, wall: float, load_before: str) -> list[str]:
    mem = next(ln.split(":", 1)[1].strip() for ln in Path("/proc/meminfo").read_text().splitlines()
               if ln.startswith("MemTotal"))
    try:
        jv = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    except (OSError, IndexError):
        jv = "unknown"
    import rivulet
    ck = confluent_kafka.version()
    ck = ck if isinstance(ck, str) else ck[0]  # a (str, int) tuple in upstream releases
    return [
        f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
        f"- command: `{' '.join(shlex.quote(a) for a in ['python', '-m', 'benchmarks.compare', *argv])}`",
        f"- versions: Rivulet {rivulet.__version__}, Apache Kafka {KAFKA_VERSION} ({jv}, -Xmx1g, G1), "
        f"Python {platform.python_version()}, confluent-kafka {ck} / "
        f"librdkafka {confluent_kafka.libversion()[0]}",
        f"- machine: {os.cpu_count()} CPUs (nproc {len(os.sched_getaffinity(0))}), MemTotal {mem}, "
        f"{platform.system()} {platform.release()}; brokers and load generators share the machine; "
        f"load average (1/5/15 min) {load_before} before the run, {loadavg()} after",
        f"- workload: {args.records_100:,} x 100 B and {args.records_1k:,} x 1 KiB records per produce run, "
        f"{PARTITIONS} partitions; untimed warm-up of {args.warmup:,} x 100 B + {args.warmup // 3:,} x 1 KiB "
        f"(librdkafka produce+consume) after start-up; "
        f"latency {args.latency_seconds:g} s at {LATENCY_RATE:,} msg/s on 1 partition; "
        f"{args.rounds} round(s) per broker alternating Rivulet, Kafka; medians shown, spread = (max - min) / median "
        f"over the rounds; ratio is Rivulet/Kafka for throughputs, Kafka/Rivulet (K/R) for latencies, times "
        f"and memory; wall time {wall / 60:.1f} min",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--records-100", type=int, default=300_000)
    ap.add_argument("--records-1k", type=int, default=100_000)
    ap.add_argument("--latency-seconds", type=float, default=10.0)
    ap.add_argument("--warmup", type=int, default=100_000,
                    help="untimed 100 B records (and a third as many 1 KiB) produced and consumed first; 0: none")
    ap.add_argument("--heartbeat-ms", type=int, default=100, help="group members' heartbeat interval")
    ap.add_argument("--no-java-consumer", action="store_true", help="skip ConsumerPerformance")
    argv = sys.argv[1:]
    args = ap.parse_args(argv)
    reason = java_tools.java_available()
    if reason is not None:
        sys.exit(f"Kafka's Java tools are unavailable: {reason}")
    _declare_figures()
    runs: dict[str, list[dict[str, float]]] = {"rivulet": [], "kafka": []}
    load_before = loadavg()
    t0 = time.monotonic()
    for i in range(args.rounds):
        for kind in ("rivulet", "kafka"):
            log(f"round {i + 1}/{args.rounds}: {kind}")
            broker = Broker(kind)
            try:
                runs[kind].append(measure(broker, args))
                log(f"  {kind} round {i + 1} figures: "
                    + ", ".join(f"{k}={v:.4g}" for k, v in runs[kind][-1].items()))
            finally:
                broker.close()
    lines = table(runs)
    print("\n".join(context(argv, args, time.monotonic() - t0, load_before)))
    print()
    print("\n".join(lines))


if __name__ == "__main__":
    main()
