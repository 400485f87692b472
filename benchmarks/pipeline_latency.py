"""End-to-end latency of the demo's pipeline: from the producer's send of an order to its
window's row readable (read_committed) in the output topic.

    python -m benchmarks.pipeline_latency                   # 2,000 orders/s, 60 s a round, 2 rounds
    python -m benchmarks.pipeline_latency --seconds 90 --repeat 3 --skip-real-time

A generator sends the demo's JSON orders at ``--rate`` a second, each with its send time
(``sent_ms``) and an event time of that moment, 30% of them up to 4 s late. The pipeline is the
demo's (10 s windows per category under a 5 s watermark, append mode) with Spark's default
trigger (each micro-batch as soon as the last is done) on ``local[2]``, once on Rivulet's
source and exactly-once sink and once on spark-sql-kafka, rounds alternated; its metrics add
``max(sent_ms)``. A read_committed consumer notes when each window row becomes readable.

Two figures per run, p50 and p99:
- per order: its window's row readable minus the order's send. In append mode a window is
  written once the watermark passes its end, so this holds the window's own length and the
  watermark's delay (about 5 + 5 s on average) besides what the pipeline adds;
- per window row, after close: readable minus the send of the first order that could close the
  window (its end plus the watermark delay): what the connectors and micro-batches add.

Real-time Mode (``--skip-real-time`` to leave out): Python data sources cannot take part, so the
same pipeline runs through spark-sql-kafka's source and sink against the same Rivulet broker,
in update mode (a row at every change of a window); its per-order figure is the first row of
the order's window whose ``max(sent_ms)`` reaches the order's send. Every source and shuffle
partition needs a task slot of its own at once, so it runs on ``local[partitions + shuffle]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.spark_source import kafka_connector_jars, load_average, tree_cpu_seconds
from rivulet.testing import BrokerProcess

SCHEMA = ("order_id STRING, customer_id STRING, product STRING, category STRING, quantity INT, "
          "price DOUBLE, currency STRING, event_time TIMESTAMP, sent_ms BIGINT")
CATEGORIES = {"books": ("novel", 14.99), "electronics": ("charger", 19.99), "garden": ("seeds", 3.5),
              "grocery": ("coffee", 8.75), "toys": ("kite", 22.0)}
WINDOW_MS = 10_000
WATERMARK_MS = 5_000
MAX_LATE_S = 4.0


class Generator(threading.Thread):
    """Orders at a steady rate; remembers each one's send time, window and category."""

    def __init__(self, bootstrap: str, topic: str, rate: int) -> None:
        super().__init__(name="orders", daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "lz4"})
        self.topic = topic
        self.rate = rate
        self.halt = threading.Event()
        self.sent: list[tuple[int, int, str]] = []  # (sent_ms, window_start_ms, category)
        self.started_ms = 0
        self.stopped_ms = 0

    def run(self) -> None:
        rng = random.Random(7)
        cats = list(CATEGORIES)
        tick = 0.01
        per_tick = max(1, int(self.rate * tick))
        nxt = time.monotonic()
        self.started_ms = int(time.time() * 1000)
        i = 0
        while not self.halt.is_set():
            for _ in range(per_tick):
                cat = cats[rng.randrange(len(cats))]
                product, price = CATEGORIES[cat]
                sent_ms = int(time.time() * 1000)
                late_ms = int(rng.random() * MAX_LATE_S * 1000) if rng.random() < 0.3 else 0
                event_ms = sent_ms - late_ms
                customer = f"c{rng.randrange(2000):05d}"
                doc = {"order_id": f"{i:016x}", "customer_id": customer, "product": product, "category": cat,
                       "quantity": 1 + i % 3, "price": price, "currency": "EUR",
                       "event_time": datetime.fromtimestamp(event_ms / 1000, timezone.utc)
                       .isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                       "sent_ms": sent_ms}
                self.producer.produce(self.topic, json.dumps(doc, separators=(",", ":")).encode(),
                                      key=customer.encode())
                self.sent.append((sent_ms, event_ms - event_ms % WINDOW_MS, cat))
                i += 1
            self.producer.poll(0)
            nxt += tick
            delay = nxt - time.monotonic()
            if delay > 0:
                self.halt.wait(delay)
        self.stopped_ms = int(time.time() * 1000)
        self.producer.flush(30)


class OutputReader(threading.Thread):
    """Every row of the output topic with the moment a read_committed consumer got it."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        super().__init__(name="output", daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"latency-{uuid.uuid4().hex[:6]}",
                                  "isolation.level": "read_committed", "enable.auto.commit": False,
                                  "fetch.wait.max.ms": 5, "fetch.error.backoff.ms": 5})
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        self.halt = threading.Event()
        self.rows: list[tuple[int, dict]] = []  # (readable_ms, row)

    def run(self) -> None:
        while not self.halt.is_set():
            m = self.consumer.poll(0.05)
            if m is None or m.error():
                continue
            self.rows.append((int(time.time() * 1000), json.loads(m.value())))
        self.consumer.close()


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


@dataclass
class Run:
    """One run's latencies (ms) and what it cost."""

    name: str
    per_order: list[int] = field(default_factory=list)
    after_close: list[int] = field(default_factory=list)
    missing: int = 0
    orders: int = 0
    cpu_s: float = 0.0
    load: float = 0.0
    phases: dict[str, list[int]] = field(default_factory=dict)  # durationMs of the measured micro-batches

    @staticmethod
    def pct(xs: list[int], q: float) -> float:
        if not xs:
            return float("nan")
        s = sorted(xs)
        return s[min(len(s) - 1, int(q * len(s)))] / 1000

    def line(self) -> str:
        close = (f", after close p50 {self.pct(self.after_close, 0.5):.2f} s p99 {self.pct(self.after_close, 0.99):.2f} s"
                 f" ({len(self.after_close)} rows)" if self.after_close else "")
        return (f"{self.name}: per order p50 {self.pct(self.per_order, 0.5):.2f} s p99 "
                f"{self.pct(self.per_order, 0.99):.2f} s ({len(self.per_order):,} orders"
                f"{f', {self.missing} not found' if self.missing else ''}){close}; "
                f"{self.cpu_s * 1e6 / max(1, self.orders):.1f} CPU s / M orders; load {self.load:.1f}")


def measure(gen: Generator, reader: OutputReader, warmup_ms: int, real_time: bool, name: str) -> Run:
    """Latencies of the windows that opened after the warm-up and closed before the generator
    stopped (their last orders sent and the watermark past their end)."""
    run = Run(name)
    cutoff = gen.stopped_ms - WATERMARK_MS - int(MAX_LATE_S * 1000) - 1000
    wanted = {(w, c) for _, w, c in gen.sent if w >= gen.started_ms + warmup_ms and w + WINDOW_MS <= cutoff}
    rows: dict[tuple[int, str], list[tuple[int, int]]] = {}
    for readable, row in reader.rows:
        key = (_ms(row["window_start"]), row["category"])
        if key in wanted:
            rows.setdefault(key, []).append((readable, int(row["last_sent"])))
    for key in wanted:
        got = sorted(rows.get(key, []))
        if not real_time and got:
            run.after_close.append(got[0][0] - (key[0] + WINDOW_MS + WATERMARK_MS))
    for sent_ms, w, c in gen.sent:
        if (w, c) not in wanted:
            continue
        got = rows.get((w, c), [])
        # the first row readable that counts an order sent this late (append mode: the one row)
        first = min((r for r, last in got if last >= sent_ms), default=None)
        if first is None:
            run.missing += 1
        else:
            run.per_order.append(first - sent_ms)
    return run


def batch_phases(progress: list, since_ms: float, until_ms: int) -> dict[str, list[int]]:
    """Each phase's durationMs (latestOffset, addBatch, walCommit, ...) of the micro-batches
    that started within the measured part of a run."""
    phases: dict[str, list[int]] = {}
    for p in progress:
        started = _ms(p.timestamp)
        if since_ms <= started <= until_ms and p.numInputRows:
            for k, v in (p.durationMs or {}).items():
                phases.setdefault(k, []).append(int(v))
            if any(op.numRowsRemoved for op in p.stateOperators or []):  # it wrote closed windows
                phases.setdefault("addBatch of a batch that wrote windows", []).append(int(p.durationMs["addBatch"]))
    return phases


def phases_line(phases: dict[str, list[int]]) -> str:
    if not phases:
        return "no micro-batches"
    n = len(phases.get("triggerExecution", []))
    return f"{n} micro-batches, median ms: " + ", ".join(
        f"{k} {statistics.median(v):.0f}" for k, v in sorted(phases.items(), key=lambda kv: -statistics.median(kv[1])))


# What --compare-topic-write adds: Rivulet's connectors with the window rows written by a Spark job
SINK_JOB = "rivulet, topic write as a Spark job"
# What --read-on-driver adds: Rivulet's connectors with the source's readOnDriver=true
READ_ON_DRIVER = "rivulet, readOnDriver"


def run_pipeline(spark, bootstrap: str, connector: str, args: argparse.Namespace, tmp: str,
                 real_time: str | None = None) -> Run:
    from rivulet.cli.pipeline import PipelineConfig, release_markers, start
    variant, connector = connector, ("rivulet" if connector in (SINK_JOB, READ_ON_DRIVER) else connector)
    tag = uuid.uuid4().hex[:6]
    src, out = f"orders-{tag}", f"orders-by-window-{tag}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(src, args.partitions, 1), NewTopic(out, 2, 1)]).values():
        f.result(30)
    cfg = PipelineConfig(
        bootstrap_servers=bootstrap, input_topic=src, starting_offsets="earliest",
        source_format=connector, output_format=connector, schema=SCHEMA, event_time="event_time",
        window="10 seconds", watermark="5 seconds", group_by=["category"],
        metrics={"orders": "count(*)", "items": "sum(quantity)", "revenue": "round(sum(quantity * price), 2)",
                 "customers": "approx_count_distinct(customer_id)", "last_sent": "max(sent_ms)"},
        source_options={"readOnDriver": "true"} if variant == READ_ON_DRIVER else {},
        output_topic=out, checkpoint=os.path.join(tmp, f"cp-{tag}"), trigger_interval="",
        real_time=real_time, query_name=f"latency_{connector}_{tag}",
        driver_write_max_rows=0 if variant == SINK_JOB else PipelineConfig.driver_write_max_rows)
    reader = OutputReader(bootstrap, out, 2)
    reader.start()
    q = start(spark, cfg)
    gen = Generator(bootstrap, src, args.rate)
    c0 = tree_cpu_seconds()
    gen.start()
    time.sleep(args.seconds)
    gen.halt.set()
    gen.join()
    cpu = tree_cpu_seconds() - c0
    name = f"{'Real-time Mode, ' if real_time else ''}{variant}"
    # the last windows to count are written within a few seconds; wait for them, up to a minute
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        run = measure(gen, reader, args.warmup * 1000, bool(real_time), name)
        if not run.missing:
            break
        if not q.isActive:
            raise RuntimeError(f"the {name} pipeline failed: {q.exception()}")
        time.sleep(1)
    run.phases = batch_phases(q.recentProgress, gen.started_ms + args.warmup * 1000, gen.stopped_ms)
    q.stop()
    reader.halt.set()
    reader.join()
    if not real_time:
        release_markers(cfg, q.id)
    run.orders = len(gen.sent)
    run.cpu_s = cpu
    run.load = load_average()
    return run


def summary(runs: list[Run]) -> None:
    by: dict[str, list[Run]] = {}
    for r in runs:
        by.setdefault(r.name, []).append(r)
    print("\n| pipeline (default trigger unless said) | orders | per order p50 / p99 s | after close p50 / p99 s "
          "| CPU s / M | load |")
    print("|---|---|---|---|---|---|")
    for name, rs in by.items():
        per = [x for r in rs for x in r.per_order]
        close = [x for r in rs for x in r.after_close]
        cpu = statistics.median(r.cpu_s * 1e6 / max(1, r.orders) for r in rs)
        loads = [r.load for r in rs]
        c = f"{Run.pct(close, 0.5):.2f} / {Run.pct(close, 0.99):.2f} ({len(close)} rows)" if close else "-"
        print(f"| {name} | {len(per):,} | {Run.pct(per, 0.5):.2f} / {Run.pct(per, 0.99):.2f} | {c} | {cpu:.1f} "
              f"| {min(loads):.1f}-{max(loads):.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=int, default=2000, help="orders per second")
    ap.add_argument("--seconds", type=float, default=60, help="seconds of orders per run")
    ap.add_argument("--warmup", type=float, default=10, help="seconds of windows left out at a run's start")
    ap.add_argument("--repeat", type=int, default=2, help="rounds, alternated between the connectors")
    ap.add_argument("--warm-up-run", type=float, default=30, help="seconds of a first run per connector, left out")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--skip-kafka", action="store_true", help="only Rivulet's connectors (no Real-time Mode)")
    ap.add_argument("--skip-real-time", action="store_true")
    ap.add_argument("--compare-topic-write", action="store_true",
                    help="also run Rivulet's connectors with the window rows written by a Spark job, not the driver")
    ap.add_argument("--read-on-driver", action="store_true",
                    help="also run Rivulet's connectors with the source's readOnDriver=true")
    ap.add_argument("--phases", action="store_true", help="print each run's median durationMs per phase of a micro-batch")
    ap.add_argument("--event-log", metavar="DIR",
                    help="write Spark's event log here, for `python -m benchmarks.spark_jobs` (jobs and stages per batch)")
    args = ap.parse_args()

    import pyspark

    from rivulet.spark.session import quiet_session
    broker = BrokerProcess({}).start()
    tmp = tempfile.mkdtemp(prefix="rivulet-latency-")
    runs: list[Run] = []
    try:
        conf: dict[str, object] = {"spark.sql.shuffle.partitions": 2, "spark.driver.memory": "2g"}
        if args.event_log:
            os.makedirs(args.event_log, exist_ok=True)
            conf.update({"spark.eventLog.enabled": "true", "spark.eventLog.dir": os.path.abspath(args.event_log)})
        note = ""
        if not args.skip_kafka:
            jars, version = kafka_connector_jars(pyspark.__version__)
            conf["spark.jars"] = ",".join(jars)
            note = f" with spark-sql-kafka {version}"
        print(f"Spark {pyspark.__version__}{note}; {args.rate:,} orders/s for {args.seconds:.0f} s a run", flush=True)
        spark = quiet_session("local[2]", "rivulet-latency", conf, log_path=os.path.join(tmp, "spark.log"))
        connectors = ["rivulet"] + ([SINK_JOB] if args.compare_topic_write else []) + \
            ([READ_ON_DRIVER] if args.read_on_driver else []) + \
            ([] if args.skip_kafka else ["kafka"])
        # A first run per connector starts the Python workers and compiles the job; left out.
        warm = argparse.Namespace(**{**vars(args), "seconds": args.warm_up_run})
        for connector in connectors if args.warm_up_run else ():
            print(f"  warm-up: {run_pipeline(spark, broker.bootstrap, connector, warm, tmp).line()}", flush=True)
        for r in range(args.repeat):
            for connector in connectors:
                run = run_pipeline(spark, broker.bootstrap, connector, args, tmp)
                runs.append(run)
                print(f"  round {r + 1}: {run.line()}", flush=True)
                if args.phases:
                    print(f"    {phases_line(run.phases)}", flush=True)
        spark.stop()
        if not args.skip_kafka and not args.skip_real_time:
            slots = args.partitions + 2
            spark = quiet_session(f"local[{slots}]", "rivulet-latency-rtm", conf,
                                  log_path=os.path.join(tmp, "spark-rtm.log"))
            for r in range(args.repeat):
                run = run_pipeline(spark, broker.bootstrap, "kafka", args, tmp, real_time="5 minutes")
                run.name += f" (local[{slots}], update mode)"
                runs.append(run)
                print(f"  round {r + 1}: {run.line()}", flush=True)
            spark.stop()
    finally:
        broker.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
    summary(runs)


if __name__ == "__main__":
    main()
