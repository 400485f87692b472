"""`rivulet demo`: a broker, a stream of orders, and the Spark pipeline on it, for about a minute.

It starts a Rivulet broker (on 127.0.0.1:9092 when that port is free, else on a free port),
an order generator (Rivulet's producer, a few thousand JSON orders a second with event times
up to a few seconds late), and `rivulet pipeline` (revenue per category per 10-second window,
to a topic and to Parquet). While it runs it shows events/s, the pipeline's consumer lag and
batches; at the end it prints the windows, and checks them against a batch recount of the
input topic. The orders topic is also an Iceberg table (with the ``iceberg`` extra installed):
the demo ends with Spark SQL over the table's rows, which must agree with the pipeline's windows
(``demo_table.py``).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rivulet.cli.demo_table import TableCheck, iceberg_installed, topic_configs
from rivulet.cli.pipeline import PipelineConfig, PipelineStats, StopSignal, run_interruptibly

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from rivulet.client.errors import KafkaError
    from rivulet.client.types import Message

INPUT_TOPIC = "orders"
OUTPUT_TOPIC = "orders-by-window"
GROUP = "rivulet-demo-pipeline"

CATALOG = {
    "books": [("novel", 14.99), ("cookbook", 24.5), ("atlas", 39.0)],
    "electronics": [("headphones", 89.0), ("charger", 19.99), ("keyboard", 59.0), ("monitor", 219.0)],
    "garden": [("seeds", 3.5), ("hose", 27.0), ("gloves", 9.99)],
    "grocery": [("coffee", 8.75), ("tea", 5.25), ("olive oil", 12.4), ("chocolate", 2.99)],
    "toys": [("puzzle", 17.0), ("kite", 22.0), ("blocks", 31.5)],
}
CATEGORY_WEIGHTS = {"books": 2, "electronics": 3, "garden": 1, "grocery": 5, "toys": 2}

SCHEMA = ("order_id STRING, customer_id STRING, product STRING, category STRING, quantity INT, "
          "price DOUBLE, currency STRING, event_time TIMESTAMP")


class OrderGenerator(threading.Thread):
    """Orders at a steady rate; event time is now minus up to ``max_late`` seconds."""

    def __init__(self, bootstrap: str, rate: int, max_late: float = 4.0, topic: str = INPUT_TOPIC,
                 close_after: float = 0.0) -> None:
        super().__init__(name="order-generator", daemon=True)
        from rivulet import Producer
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": "lz4"})
        self.topic = topic
        self.rate = rate
        self.max_late = max_late
        # the end mark's event time is this far past the last order's (0: no mark)
        self.close_after = close_after
        self.end_mark: float | None = None  # the end mark's event time, once sent
        self.sent = 0
        self.failed = 0
        self.halt = threading.Event()
        self.rng = random.Random(7)
        self.customers = [f"c{n:05d}" for n in range(2000)]
        self.categories = list(CATEGORY_WEIGHTS)
        self.weights = [CATEGORY_WEIGHTS[c] for c in self.categories]

    def order(self) -> tuple[bytes, bytes]:
        rng = self.rng
        cat = rng.choices(self.categories, self.weights)[0]
        product, price = rng.choice(CATALOG[cat])
        late = rng.random() * self.max_late if rng.random() < 0.3 else rng.random() * 0.5
        ts = datetime.fromtimestamp(time.time() - late, timezone.utc)
        customer = rng.choice(self.customers)
        doc = {"order_id": uuid.UUID(int=rng.getrandbits(128)).hex[:16], "customer_id": customer,
               "product": product, "category": cat, "quantity": rng.choice((1, 1, 1, 2, 2, 3, 5)),
               "price": price, "currency": "EUR",
               "event_time": ts.isoformat(timespec="milliseconds").replace("+00:00", "Z")}
        return customer.encode(), json.dumps(doc, separators=(",", ":")).encode()

    def send_end_mark(self) -> None:
        """An event that is no order (only an event time, ``close_after`` seconds past now): the
        watermark follows the latest event time, so without a later event the last windows would
        stay open, unwritten (append mode writes a window once the watermark passes its end)."""
        self.end_mark = time.time() + self.close_after
        ts = datetime.fromtimestamp(self.end_mark, timezone.utc)
        doc = {"event_time": ts.isoformat(timespec="milliseconds").replace("+00:00", "Z")}
        self.producer.produce(self.topic, json.dumps(doc, separators=(",", ":")).encode(), None,
                              on_delivery=self._delivered)

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.failed += 1

    def run(self) -> None:
        tick = 0.05
        per_tick = max(1, int(self.rate * tick))
        nxt = time.monotonic()
        while not self.halt.is_set():
            for _ in range(per_tick):
                key, value = self.order()
                self.producer.produce(self.topic, value, key, on_delivery=self._delivered)
            self.sent += per_tick
            self.producer.poll(0)
            nxt += tick
            delay = nxt - time.monotonic()
            if delay > 0:
                self.halt.wait(delay)
        if self.close_after:
            self.send_end_mark()
        self.producer.flush(30)
        self.producer.close()


class Lag:
    """The pipeline's consumer lag: end offsets minus what the source committed to its group."""

    def __init__(self, bootstrap: str) -> None:
        from rivulet.admin import AdminClient
        self.admin = AdminClient({"bootstrap.servers": bootstrap})

    def end_offsets(self, partitions: int) -> dict[int, int]:
        from rivulet import TopicPartition
        from rivulet.admin import OffsetSpec
        tps = [TopicPartition(INPUT_TOPIC, p) for p in range(partitions)]
        return {tp.partition: f.result(10).offset
                for tp, f in self.admin.list_offsets({tp: OffsetSpec.latest() for tp in tps}).items()}

    def __call__(self, partitions: int) -> tuple[int, int]:
        from rivulet import TopicPartition
        from rivulet.admin import ConsumerGroupTopicPartitions
        tps = [TopicPartition(INPUT_TOPIC, p) for p in range(partitions)]
        ends = self.end_offsets(partitions)
        got = self.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(GROUP, tps)])[GROUP].result(10)
        done = {tp.partition: tp.offset for tp in got.topic_partitions if tp.offset >= 0}
        end = sum(ends.values())
        return end, sum(max(0, e - done.get(p, 0)) for p, e in ends.items())

    def close(self) -> None:
        self.admin.close()


def _fmt(n: float) -> str:
    return f"{n:,.0f}"


class CatchUp:
    """After the generator stops, whether to wait for the pipeline: a deadline that moves with
    progress, so a busy machine's slow pipeline is waited for and a stuck one is not.

    ``observe`` answers WAIT, DONE (it has read every order, stayed caught up for ``settle``
    seconds, time for the last batch's output, and closed every window) or STALLED (no progress
    for ``patience`` seconds)."""

    WAIT, DONE, STALLED = "wait", "done", "stalled"

    def __init__(self, expected: int, started: float, patience: float = 60.0, settle: float = 4.0) -> None:
        self.expected = expected
        self.patience = patience
        self.settle = settle
        self.read = 0  # the most orders the pipeline was seen to have read (committed)
        self.batches = 0
        self.progress_at = started
        self.caught_up_since: float | None = None

    def observe(self, now: float, read: int | None, batches: int, closed: bool = True) -> str:
        """``read``: the orders the pipeline's group has committed, None when it could not be
        asked this time; ``batches``: the micro-batches it has finished; ``closed``: its
        watermark has passed every order's window, so it has written them all."""
        if (read is not None and read > self.read) or batches > self.batches:
            self.progress_at = now
        self.read = max(self.read, read or 0)
        self.batches = max(self.batches, batches)
        if read is not None:
            caught_up = read >= self.expected
            self.caught_up_since = (self.caught_up_since or now) if caught_up else None
        if self.caught_up_since is not None and now - self.caught_up_since >= self.settle and closed:
            return self.DONE
        if now - self.progress_at >= self.patience:
            return self.STALLED
        return self.WAIT


# Marks a directory as the demo's own, so a rerun may clear what the demo wrote there.
OUTPUT_MARKER = ".rivulet-demo"
OUTPUT_ENTRIES = ("orders-by-window", "checkpoint", "spark.log")


def _prepare_output(out: Path) -> str | None:
    """Make ``out`` ready for a run without ever deleting a user's files: a directory is
    cleared only of the demo's own entries, and only when an earlier demo marked it."""
    if out.exists() and not out.is_dir():
        return f"--output {out} exists and is not a directory"
    if out.exists() and any(out.iterdir()):
        if not (out / OUTPUT_MARKER).exists():
            return (f"--output {out} is not empty and was not written by the demo; "
                    "name a new or empty directory")
        for name in OUTPUT_ENTRIES:
            entry = out / name
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            elif entry.exists() or entry.is_symlink():
                entry.unlink()
    out.mkdir(parents=True, exist_ok=True)
    (out / OUTPUT_MARKER).write_text("written by `rivulet demo`; a rerun clears only its own entries\n")
    return None


def watermark_at(progress: dict[str, Any] | None) -> float:  # Any: Spark's progress JSON
    """A micro-batch's watermark in seconds since the epoch (0 before there is one)."""
    wm = ((progress or {}).get("eventTime") or {}).get("watermark")
    return datetime.fromisoformat(wm.replace("Z", "+00:00")).timestamp() if wm else 0.0


def warm_up(spark: SparkSession, cfg: PipelineConfig) -> None:
    """Run the pipeline once, to its end, over a second of orders in scratch topics: Spark's
    Python workers start and import the connectors, the sink's producers start, the JVM loads
    and compiles the job's code. Without it the demo's first two micro-batches paid for all of
    that; on a busy machine they took tens of seconds each while orders came in at full rate,
    and the demo fell far behind before it began."""
    import dataclasses

    from rivulet.admin import AdminClient, NewTopic
    from rivulet.cli.pipeline import PipelineStats, release_markers, start
    tag = uuid.uuid4().hex[:6]
    src, out = f"{INPUT_TOPIC}-warm-up-{tag}", f"{OUTPUT_TOPIC}-warm-up-{tag}"
    admin = AdminClient({"bootstrap.servers": cfg.bootstrap_servers})
    try:
        for f in admin.create_topics([NewTopic(src, 4), NewTopic(out, 2)]).values():
            f.result(30)
        gen = OrderGenerator(cfg.bootstrap_servers, 1000, topic=src, close_after=60.0)
        for _ in range(1000):
            key, value = gen.order()
            gen.producer.produce(src, value, key)
        gen.send_end_mark()  # so that the run writes windows: the sink starts too
        gen.producer.flush(30)
        gen.producer.close()
        scratch = tempfile.mkdtemp(prefix="rivulet-demo-warm-up-")
        try:
            warm = dataclasses.replace(
                cfg, input_topic=src, output_topic=out, parquet_path=f"{scratch}/parquet",
                checkpoint=f"{scratch}/checkpoint", available_now=True, query_name=f"rivulet_demo_warm_up_{tag}",
                source_options={k: v for k, v in cfg.source_options.items() if k != "commitOffsets"})
            query = start(spark, warm, PipelineStats())
            query.awaitTermination()
            if query.exception() is None:
                release_markers(warm, query.id)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        for f in admin.delete_topics([src, out]).values():
            f.result(30)
    finally:
        admin.close()


def demo_main(args: argparse.Namespace) -> int:
    return run_interruptibly("demo", lambda stop: _demo(args, stop))


def _demo(args: argparse.Namespace, stop: StopSignal) -> int:
    from rivulet.testing import BrokerProcess, free_port

    out = Path(args.output).resolve()
    problem = _prepare_output(out)
    if problem:
        print(f"rivulet demo: {problem}", file=sys.stderr)
        return 2
    from rivulet.cli.local_cluster import port_free, registry_base_port, registry_installed
    port = args.port or (9092 if port_free(9092) else free_port())
    data_dir = tempfile.mkdtemp(prefix="rivulet-demo-")
    props = {"listeners": f"PLAINTEXT://127.0.0.1:{port}", "num.partitions": "4", "offsets.topic.num.partitions": "4"}
    registry = ""
    if registry_installed():
        registry = f"http://127.0.0.1:{registry_base_port(None, 1) or free_port()}"
        props["schema.registry.listeners"] = registry
    broker = BrokerProcess(props, data_dir=data_dir, port=port)
    say = print
    say(f"▶ starting a Rivulet broker on 127.0.0.1:{port} (data in {data_dir})"
        + (f", its schema registry on {registry}" if registry else ""), flush=True)
    broker.start()
    gen: OrderGenerator | None = None
    spark = None
    lag: Lag | None = None
    try:
        from rivulet.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        as_table = iceberg_installed()  # the orders topic is also the Iceberg table rivulet.orders
        orders = NewTopic(INPUT_TOPIC, 4, config=topic_configs() if as_table else None)
        for f in admin.create_topics([orders, NewTopic(OUTPUT_TOPIC, 2)]).values():
            f.result(30)
        admin.close()

        from rivulet.cli.pipeline import PipelineStats, session_for, start
        window_s, watermark_s = 10.0, 5.0
        cfg = PipelineConfig(
            bootstrap_servers=broker.bootstrap, input_topic=INPUT_TOPIC, starting_offsets="earliest",
            max_offsets_per_trigger=20_000, source_options={"kafka.group.id": GROUP, "commitOffsets": "true"},
            schema=SCHEMA, event_time="event_time", window=f"{window_s:.0f} seconds",
            watermark=f"{watermark_s:.0f} seconds",
            group_by=["category"],
            metrics={"orders": "count(*)", "items": "sum(quantity)", "revenue": "round(sum(quantity * price), 2)",
                     "customers": "approx_count_distinct(customer_id)"},
            output_topic=OUTPUT_TOPIC, parquet_path=str(out / "orders-by-window"),
            checkpoint=str(out / "checkpoint"), trigger_interval="2 seconds",
            spark_log=str(out / "spark.log"), query_name="rivulet_demo")
        say(f"▶ starting Spark (local[2]); its logs go to {cfg.spark_log}", flush=True)
        spark = session_for(cfg)
        stop.attach(spark)
        if stop.is_set():
            return 0

        say("▶ warming Spark up: the pipeline once over a second of orders in a scratch topic", flush=True)
        warm_up(spark, cfg)
        if stop.is_set():
            return 0

        stats = PipelineStats()
        query = start(spark, cfg, stats)
        say(f"▶ pipeline: {INPUT_TOPIC} → 10 s windows by category (watermark 5 s) → "
            f"topic '{OUTPUT_TOPIC}' + Parquet", flush=True)
        # the end mark moves the watermark past every order's window once the generator stops
        gen = OrderGenerator(broker.bootstrap, args.rate, close_after=window_s + watermark_s + 1)
        gen.start()
        say(f"▶ generating ~{_fmt(args.rate)} orders/s into '{INPUT_TOPIC}' for {args.duration:.0f} s", flush=True)
        lag = Lag(broker.bootstrap)
        t0 = time.monotonic()
        last_sent, last_t = 0, t0
        stopping_at = t0 + args.duration
        catch_up: CatchUp | None = None
        verdict = CatchUp.WAIT
        tty = sys.stdout.isatty()
        ticks = 0
        while True:
            if stop.event.wait(1.0):
                return 0
            now = time.monotonic()
            if not query.isActive:  # one line; the rest (Spark's query description) is in its log
                why = (str(query.exception() or "") or "no reason given").splitlines()[0]
                print(f"rivulet demo: the pipeline failed: {why} (see {cfg.spark_log})", file=sys.stderr, flush=True)
                return 1
            if gen.is_alive() and now >= stopping_at:
                gen.halt.set()
                gen.join(30)
                say(("\n" if tty else "") + f"▶ generator stopped after {_fmt(gen.sent)} orders; "
                    "waiting for the pipeline to catch up", flush=True)
            rate = (gen.sent - last_sent) / (now - last_t)
            last_sent, last_t = gen.sent, now
            try:
                end, behind = lag(4)
            except Exception:  # the group has no commit yet, or the broker is busy: next time
                end, behind = -1, -1
            p = query.lastProgress or {}
            line = (f"  t={now - t0:4.0f}s  produced {_fmt(gen.sent):>8} ({_fmt(rate):>6}/s)  "
                    f"pipeline {_fmt(p.get('processedRowsPerSecond', 0.0)):>7} ev/s  "
                    f"lag {_fmt(behind) if behind >= 0 else '-':>7}  "
                    f"batches {stats.batches:>3}  windows out {stats.windows_out:>4}")
            ticks += 1
            if tty:
                say("\r" + line, end="", flush=True)
            elif ticks % 5 == 0:  # a log, not a terminal: a line every 5 s
                say(line, flush=True)
            if not gen.is_alive():
                catch_up = catch_up or CatchUp(gen.sent - gen.failed, now)
                # (half a second of slack: the mark's event time is written in milliseconds)
                closed = gen.end_mark is not None and watermark_at(p) >= gen.end_mark - watermark_s - 0.5
                verdict = catch_up.observe(now, end - behind if behind >= 0 else None, stats.batches, closed)
                if verdict != CatchUp.WAIT:
                    break
        if tty:
            say("")
        query.stop()
        assert catch_up is not None
        complete = verdict == CatchUp.DONE
        if not complete:
            say(f"✗ stopped early: the pipeline made no progress for {catch_up.patience:.0f} s, having read "
                f"{_fmt(catch_up.read)} of {_fmt(catch_up.expected)} orders in {stats.batches} micro-batches "
                f"(a machine too busy? see {cfg.spark_log})", flush=True)
        table = TableCheck(data_dir, INPUT_TOPIC, lag.end_offsets(4), cfg.window) if as_table else None
        ok = summary(spark, cfg, gen.sent, stats, complete, table)
        say("\nThe same job on your own broker (rivulet broker, then produce JSON orders to 'orders'):")
        say("  rivulet pipeline run --config examples/pipeline.toml")
        say("and its progress, as a consumer group:")
        say("  rivulet groups describe --group rivulet-pipeline")
        return 0 if complete and ok else 1
    finally:
        if gen is not None and gen.is_alive():
            gen.halt.set()
            gen.join(10)
        if lag is not None:
            lag.close()
        if spark is not None:
            spark.stop()
        broker.cleanup()
        shutil.rmtree(data_dir, ignore_errors=True)


def summary(spark: SparkSession, cfg: PipelineConfig, produced: int, stats: PipelineStats, complete: bool = True,
            table: TableCheck | None = None) -> bool:
    """The windows the pipeline wrote, checked against a batch recount of the input topic (when
    the pipeline read every order: checks of part of them would pass without meaning much) and,
    with ``table``, against Spark SQL over the topic's Iceberg table. True when every check passed."""
    from pyspark.sql import functions as F
    windows = spark.read.parquet(cfg.parquet_path)
    closed = windows.select("window_start", "window_end", "category", "orders", "items", "revenue").cache()
    n_windows = closed.count()
    print(f"\n■ {stats.batches} micro-batches; {n_windows} closed windows written to Parquet and to "
          f"'{OUTPUT_TOPIC}'")
    by_cat = (closed.groupBy("category").agg(F.sum("orders").alias("orders"), F.sum("items").alias("items"),
                                             F.round(F.sum("revenue"), 2).alias("revenue"))
              .orderBy(F.desc("revenue")).collect())
    print(f"\n  {'category':<12} {'orders':>8} {'items':>8} {'revenue (EUR)':>15}")
    for r in by_cat:
        print(f"  {r['category']:<12} {r['orders']:>8,} {r['items']:>8,} {r['revenue']:>15,.2f}")
    last = closed.orderBy(F.desc("window_start")).select("window_start").first()
    if last is not None:
        print(f"\n  latest closed window starts at {last['window_start']:%H:%M:%S} UTC")

    if not complete:
        print("\n  checks not made: the pipeline stopped before reading every order")
        print(f"\n  outputs: {Path(cfg.parquet_path)}  (checkpoint: {cfg.checkpoint}; Spark log: {cfg.spark_log})")
        closed.unpersist()
        return False

    # Recount the same windows from the input topic in one batch query: the streaming result
    # must match exactly (no event was later than the watermark allows).
    raw = (spark.read.format("rivulet").option("kafka.bootstrap.servers", cfg.bootstrap_servers)
           .option("subscribe", cfg.input_topic).option("includeHeaders", "false").load())
    ev = raw.select(F.from_json(F.col("value").cast("string"), cfg.schema).alias("e")).select("e.*")
    recount = (ev.groupBy(F.window("event_time", cfg.window).alias("w"), "category")
               .agg(F.count(F.lit(1)).alias("orders"))
               .select(F.col("w.start").alias("window_start"), "category", F.col("orders").alias("recount")))
    joined = closed.join(recount, ["window_start", "category"], "left")
    mismatched = joined.where(F.col("recount").isNull() | (F.col("recount") != F.col("orders"))).count()
    in_closed = closed.agg(F.sum("orders")).first()[0] or 0
    topic_rows = (spark.read.format("rivulet").option("kafka.bootstrap.servers", cfg.bootstrap_servers)
                  .option("subscribe", OUTPUT_TOPIC).option("kafka.isolation.level", "read_committed")
                  .load().count())
    total = ev.where(F.col("order_id").isNotNull()).count()  # not the end mark
    ok = "✓" if mismatched == 0 else "✗"
    print(f"\n  {ok} closed windows hold {_fmt(in_closed)} of {_fmt(total)} orders ({in_closed / max(1, total):.0%}); "
          f"{'every window matches' if mismatched == 0 else f'{mismatched} windows differ from'} "
          "a batch recount of the topic")
    ok = "✓" if topic_rows == n_windows else "✗"
    print(f"  {ok} '{OUTPUT_TOPIC}' holds {topic_rows} rows (read_committed), one per closed window")
    if total != produced:
        print(f"  ✗ the topic holds {total} orders but {produced} were produced")
    if table is not None:
        table_ok = table.run(spark, closed)
    else:
        table_ok = True
        print("  - no table check: pyiceberg is not installed (pip install 'rivulet[iceberg]')")
    print(f"\n  outputs: {Path(cfg.parquet_path)}  (checkpoint: {cfg.checkpoint}; Spark log: {cfg.spark_log})")
    closed.unpersist()
    return mismatched == 0 and topic_rows == n_windows and total == produced and table_ok


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    d = sub.add_parser("demo", help="start a broker, an order generator and the Spark pipeline (about a minute)")
    d.add_argument("--port", type=int, default=0, help="broker port (default 9092 when free, else any free port)")
    d.add_argument("--duration", type=float, default=30.0, help="seconds of order generation (default 30)")
    d.add_argument("--rate", type=int, default=2000, help="orders per second (default 2000)")
    d.add_argument("--output", default="rivulet-demo-out", help="directory for Parquet, checkpoint and logs")
    d.set_defaults(func=demo_main)
