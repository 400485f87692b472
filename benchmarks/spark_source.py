"""The PySpark source's throughput on local[2], next to Spark's own Kafka connector.

    python -m benchmarks.spark_source                      # its own broker, 1,000,000 x 100 B
    python -m benchmarks.spark_source --records 200000 --skip-kafka
    python -m benchmarks.spark_source --only pipeline,cluster-pipeline   # the pipeline, both connectors

It produces the records with librdkafka, then times Spark jobs that read the whole topic:
format("rivulet") into the noop sink, into Parquet, and as a streaming AvailableNow query;
the same through Spark's Kafka connector (spark-sql-kafka-0-10_2.13 for the installed Spark,
or the nearest release Maven Central has, fetched from there), which also checks that the Java client
reads Rivulet's log identically (row count and a checksum of every value and offset). Two
reference rows bound what a Python data source can do here: Spark's own overhead (a Python
source yielding ready-made Arrow batches) and the decoder alone on one core. The pipeline
(the demo's, JSON orders into windows, to a topic and to Parquet) runs on both connectors on
local[2] and, with ``cluster-pipeline``, on a standalone cluster of one and then two 1-core
workers.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from rivulet.testing import BrokerProcess


@dataclass
class Row:
    """One path's rounds: seconds and the 1-minute load average after each."""

    name: str
    rows: int
    seconds: list[float] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)  # CPU seconds of every process involved
    note: str = ""
    unit: str = "rows/s"

    @property
    def median(self) -> float:
        return statistics.median(self.seconds) if self.seconds else 0.0

    @property
    def rps(self) -> float:
        return self.rows / self.median if self.median else 0.0

    @property
    def cpu_per_million(self) -> float:
        return statistics.median(self.cpu) * 1e6 / self.rows if self.cpu else 0.0

    @property
    def load(self) -> str:
        if not self.loads:
            return ""
        lo, hi = min(self.loads), max(self.loads)
        return f"{lo:.1f}" if abs(hi - lo) < 0.05 else f"{lo:.1f}-{hi:.1f}"


def load_average() -> float:
    return os.getloadavg()[0]


def tree_cpu_seconds(root: int | None = None) -> float:
    """CPU time (user + system, with that of reaped children) of a process and all its
    descendants: here the benchmark, its broker, Spark's JVM and its Python workers. Unlike
    the wall clock it hardly depends on what else the machine is running."""
    root = os.getpid() if root is None else root
    procs: dict[int, tuple[int, float]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        procs[int(d)] = (int(fields[1]), sum(int(x) for x in fields[11:15]) / tick)
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += procs.get(pid, (0, 0.0))[1]
        todo.extend(children.get(pid, ()))
    return total


def alternate(jobs: list[tuple[Row, Callable[[], object]]], repeat: int, first_round: int = 1) -> None:
    """Run the jobs in turn, ``repeat`` rounds (A B A B ...), so that a change in the machine's
    load during the run hits every path alike; each job has had its warm-up."""
    for r in range(repeat):
        for row, fn in jobs:
            c0 = tree_cpu_seconds()
            t0 = time.perf_counter()
            fn()
            row.seconds.append(time.perf_counter() - t0)
            row.cpu.append(tree_cpu_seconds() - c0)
            row.loads.append(load_average())
            print(f"  round {first_round + r}: {row.name}: {row.rows / row.seconds[-1]:,.0f} {row.unit}, "
                  f"{row.cpu[-1]:.2f} CPU s (load {row.loads[-1]:.1f})", flush=True)


def produce(bootstrap: str, topic: str, count: int, size: int) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                  "batch.num.messages": 100_000, "queue.buffering.max.messages": 2_000_000,
                  "queue.buffering.max.kbytes": 2_000_000, "compression.type": "none"})
    payload = bytes(i % 251 for i in range(size))
    t0 = time.perf_counter()
    for i in range(count):
        while True:
            try:
                p.produce(topic, payload, key=b"%08d" % (i % 100_000))
                break
            except BufferError:
                p.poll(0.001)
    assert p.flush(300) == 0
    return time.perf_counter() - t0


MAVEN = "https://repo1.maven.org/maven2"


def _fetch_jar(group: str, artifact: str, versions: list[str], cache: str) -> tuple[str, str] | None:
    """The first of ``versions`` Maven Central has: (local path, version)."""
    import urllib.error
    import urllib.request
    os.makedirs(cache, exist_ok=True)
    for v in versions:
        path = os.path.join(cache, f"{artifact}-{v}.jar")
        if os.path.exists(path):
            return path, v
        url = f"{MAVEN}/{group.replace('.', '/')}/{artifact}/{v}/{artifact}-{v}.jar"
        try:
            with urllib.request.urlopen(url, timeout=60) as r:
                data = r.read()
        except (urllib.error.URLError, OSError):
            continue
        with open(path + ".part", "wb") as f:
            f.write(data)
        os.replace(path + ".part", path)
        return path, v
    return None


def kafka_connector_jars(spark_version: str) -> tuple[list[str], str]:
    """spark-sql-kafka for the installed Spark and its runtime dependencies, from Maven Central.

    Fetched jar by jar rather than through spark.jars.packages: when a release is newer than
    what Maven Central holds (or a transitive artifact is missing), the nearest earlier
    connector of the same major version is used instead, and the report says which.
    """
    cache = os.path.join(os.path.expanduser("~"), ".cache", "rivulet-bench", "jars")
    major = spark_version.split(".")[0]
    fallbacks = [spark_version] + [v for v in ("4.2.0", "4.1.3", "4.1.2", "4.0.4", "4.0.0") if v.startswith(major)]
    got = _fetch_jar("org.apache.spark", "spark-sql-kafka-0-10_2.13", fallbacks, cache)
    if got is None:
        raise RuntimeError("spark-sql-kafka-0-10_2.13 is not reachable on Maven Central")
    connector, version = got
    jars = [connector]
    for group, artifact, versions in (
            ("org.apache.spark", "spark-token-provider-kafka-0-10_2.13", fallbacks),
            ("org.apache.kafka", "kafka-clients", ["3.9.2", "3.9.1", "3.9.0"]),
            ("org.apache.commons", "commons-pool2", ["2.13.1", "2.12.1", "2.12.0"])):
        dep = _fetch_jar(group, artifact, versions, cache)
        if dep is None:
            raise RuntimeError(f"{artifact} is not reachable on Maven Central")
        jars.append(dep[0])
    return jars, version


def decoder_alone(bootstrap: str, topic: str, repeat: int) -> Row:
    """Fetch + decode to Arrow of the whole topic on one core, without Spark."""
    from rivulet.spark.source import OffsetReader, RangePartition, SourceOptions, read_range
    opts = SourceOptions(bootstrap=bootstrap, subscribe=[topic], include_headers=True)
    reader = OffsetReader(opts)
    ends = reader.latest()
    reader.close()

    def job() -> None:
        n = 0
        for (t, p), end in sorted(ends.items()):
            for rb in read_range(opts, RangePartition(t, p, 0, end)):
                n += rb.num_rows
        assert n == sum(ends.values())
    job()
    row = Row("fetch + decode to Arrow, 1 core, no Spark", sum(ends.values()))
    alternate([(row, job)], repeat)
    return row


def register_ceiling(spark, rows: int, size: int, batch_rows: int = 65536) -> None:
    """``format("bench_ceiling")``: a Python data source that only yields ready-made Arrow
    batches of the source's schema (4 partitions, like the topic): what Spark's own handling of
    a Python source costs, the most any Python source can reach here."""
    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from rivulet.spark import SCHEMA_NO_HEADERS
    from rivulet.arrow.records import ARROW_SCHEMA_NO_HEADERS, TIMESTAMP_TYPE

    per_task = rows // 4

    class Reader(DataSourceReader):
        def partitions(self):
            return [InputPartition(i) for i in range(4)]

        def read(self, partition):
            n = batch_rows
            v = pa.array([b"x" * size] * n, pa.binary())
            k = pa.array([b"%08d" % i for i in range(n)], pa.binary())
            o = pa.array(range(n), pa.int64())
            b = pa.RecordBatch.from_arrays(
                [k, v, pa.repeat(pa.scalar("t"), n), pa.repeat(pa.scalar(0, pa.int32()), n), o,
                 o.cast(TIMESTAMP_TYPE), pa.repeat(pa.scalar(0, pa.int32()), n)],
                schema=ARROW_SCHEMA_NO_HEADERS)
            left = per_task
            while left > 0:
                yield b.slice(0, min(n, left))
                left -= n

    class Ceiling(DataSource):
        @classmethod
        def name(cls):
            return "bench_ceiling"

        def schema(self):
            return SCHEMA_NO_HEADERS

        def reader(self, schema):
            return Reader()

    spark.dataSource.register(Ceiling)


# ---------------------------------------------------------------- the pipeline


ORDER_SCHEMA = ("order_id STRING, customer_id STRING, product STRING, category STRING, quantity INT, "
                "price DOUBLE, currency STRING, event_time TIMESTAMP")
CATEGORIES = {"books": ("novel", 14.99), "electronics": ("charger", 19.99), "garden": ("seeds", 3.5),
              "grocery": ("coffee", 8.75), "toys": ("kite", 22.0)}


def produce_orders(bootstrap: str, topic: str, count: int, per_second: int = 5000) -> float:
    """The demo's order events (JSON, about 190 B), ``per_second`` of event time each second
    from a fixed start, 30% of them up to 4 s late: ``count / per_second`` seconds of stream."""
    import json
    import random
    from datetime import datetime, timedelta, timezone
    rng = random.Random(7)
    base = datetime(2026, 1, 1, tzinfo=timezone.utc)
    cats = list(CATEGORIES)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                  "queue.buffering.max.messages": 2_000_000, "compression.type": "lz4"})
    t0 = time.perf_counter()
    for i in range(count):
        cat = cats[rng.randrange(len(cats))]
        product, price = CATEGORIES[cat]
        late = rng.random() * 4.0 if rng.random() < 0.3 else 0.0
        ts = base + timedelta(seconds=i / per_second - late)
        customer = f"c{rng.randrange(2000):05d}"
        doc = {"order_id": f"{i:016x}", "customer_id": customer, "product": product, "category": cat,
               "quantity": rng.choice((1, 1, 1, 2, 2, 3, 5)), "price": price, "currency": "EUR",
               "event_time": ts.isoformat(timespec="milliseconds").replace("+00:00", "Z")}
        while True:
            try:
                p.produce(topic, json.dumps(doc, separators=(",", ":")).encode(), key=customer.encode())
                break
            except BufferError:
                p.poll(0.001)
    assert p.flush(300) == 0
    return time.perf_counter() - t0


def pipeline_job(spark, bootstrap: str, topic: str, connector: str, tmp: str, batch: int,
                 outputs: list[tuple[str, str]]) -> Callable[[], None]:
    """The demo's pipeline over the whole topic (AvailableNow, ``batch`` offsets a micro-batch)
    on one connector: parse JSON, revenue per category per 10 s window under a 5 s watermark,
    each closed window to a topic and to Parquet."""
    from rivulet.cli.pipeline import PipelineConfig, PipelineStats, start

    def run() -> None:
        tag = uuid.uuid4().hex[:6]
        out = os.path.join(tmp, f"pipeline-{connector}-{tag}")
        cfg = PipelineConfig(
            bootstrap_servers=bootstrap, input_topic=topic, starting_offsets="earliest",
            max_offsets_per_trigger=batch, source_format=connector, output_format=connector,
            schema=ORDER_SCHEMA, event_time="event_time", window="10 seconds", watermark="5 seconds",
            group_by=["category"],
            metrics={"orders": "count(*)", "items": "sum(quantity)", "revenue": "round(sum(quantity * price), 2)",
                     "customers": "approx_count_distinct(customer_id)"},
            output_topic=f"{topic}-by-window-{connector}-{tag}", parquet_path=os.path.join(out, "parquet"),
            checkpoint=os.path.join(out, "checkpoint"), available_now=True, query_name=f"bench_{connector}_{tag}")
        q = start(spark, cfg, PipelineStats())
        q.awaitTermination()
        if q.exception() is not None:
            raise RuntimeError(f"the {connector} pipeline failed: {q.exception()}")
        outputs.append((connector, cfg.parquet_path))
    return run


def same_windows(spark, outputs: list[tuple[str, str]]) -> str:
    """Every run wrote the same closed windows (window, category, orders, items)."""
    cols = ["window_start", "category", "orders", "items"]
    frames = [(c, spark.read.parquet(path).select(*cols)) for c, path in outputs]
    ref_name, ref = frames[0]
    n = ref.count()
    for name, df in frames[1:]:
        if df.count() != n or ref.exceptAll(df).count() or df.exceptAll(ref).count():
            return f"{name} wrote other windows than {ref_name}"
    return f"every run wrote the same {n:,} windows"


# ---------------------------------------------------------------- main


SECTIONS = ("source", "sink", "pipeline", "cluster", "cluster-pipeline")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", help="an already running broker (default: start one)")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3, help="rounds of each path, alternated")
    ap.add_argument("--events", type=int, default=400_000, help="order events for the pipeline")
    ap.add_argument("--batch", type=int, default=100_000, help="the pipeline's maxOffsetsPerTrigger")
    ap.add_argument("--sink-batches", type=int, default=8, help="micro-batches of the sink's streaming copy")
    ap.add_argument("--only", default=",".join(SECTIONS),
                    help=f"comma-separated sections to run, of {', '.join(SECTIONS)}")
    ap.add_argument("--skip-kafka", action="store_true", help="do not fetch and run Spark's Kafka connector")
    args = ap.parse_args()
    only = {x.strip() for x in args.only.split(",") if x.strip()}
    if only - set(SECTIONS):
        ap.error(f"--only: unknown sections {sorted(only - set(SECTIONS))}")

    broker = None
    metrics_port: int | None = None
    if args.bootstrap:
        bootstrap = args.bootstrap
    else:
        from rivulet.testing import free_port
        metrics_port = free_port()
        broker = BrokerProcess({"metrics.listener": f"http://127.0.0.1:{metrics_port}"}).start()
        bootstrap = broker.bootstrap
    tmp = tempfile.mkdtemp(prefix="rivulet-spark-bench-")
    tables: list[tuple[str, list[Row]]] = []
    try:
        tag = uuid.uuid4().hex[:6]
        topic = f"spark-bench-{tag}"
        orders = f"orders-{tag}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        new = [NewTopic(topic, args.partitions, 1)]
        if only & {"pipeline", "cluster-pipeline"}:
            new.append(NewTopic(orders, args.partitions, 1))
        for f in admin.create_topics(new).values():
            f.result(30)
        if only & {"source", "sink", "cluster"}:
            secs = produce(bootstrap, topic, args.records, args.size)
            print(f"produced {args.records:,} x {args.size} B into {topic} ({args.partitions} partitions) "
                  f"in {secs:.1f} s", flush=True)
        if only & {"pipeline", "cluster-pipeline"}:
            secs = produce_orders(bootstrap, orders, args.events)
            print(f"produced {args.events:,} order events into {orders} in {secs:.1f} s", flush=True)

        import pyspark
        from rivulet.spark.session import quiet_session
        conf = {"spark.sql.shuffle.partitions": 2, "spark.driver.memory": "2g"}
        kafka_note = ""
        use_kafka = not args.skip_kafka and bool(only & {"source", "sink", "pipeline", "cluster-pipeline"})
        if use_kafka:
            try:
                jars, version = kafka_connector_jars(pyspark.__version__)
                conf["spark.jars"] = ",".join(jars)
                kafka_note = f"spark-sql-kafka {version}"
                if version != pyspark.__version__:
                    kafka_note += f" (Maven Central has no {pyspark.__version__})"
            except RuntimeError as e:
                print(f"skipping Spark's Kafka connector: {e}", flush=True)
                use_kafka = False
        if only & {"source", "sink", "pipeline"}:
            print(f"starting Spark {pyspark.__version__} local[2]" + (f" with {kafka_note}" if kafka_note else ""),
                  flush=True)
            spark = quiet_session("local[2]", "rivulet-spark-bench", conf, log_path=os.path.join(tmp, "spark.log"))
            if "source" in only:
                tables.append(("the source on local[2]", source_rows(spark, bootstrap, topic, args, tmp,
                                                                     use_kafka, kafka_note)))
            if "sink" in only:
                tables.append(("the sink on local[2]", sink_rows(spark, bootstrap, topic, args, tmp, use_kafka,
                                                                 kafka_note, metrics_port)))
            if "pipeline" in only:
                tables.append(("the pipeline on local[2]", pipeline_rows(spark, bootstrap, orders, args, tmp,
                                                                         use_kafka, kafka_note)))
            spark.stop()
        if "cluster" in only:
            tables.append(("the source on a standalone cluster", cluster_rows(bootstrap, topic, args, tmp)))
        if "cluster-pipeline" in only:
            tables.append(("the pipeline on a standalone cluster",
                           cluster_pipeline_rows(bootstrap, orders, args, tmp, conf.get("spark.jars") if use_kafka
                                                 else None, kafka_note)))
        if "source" in only:
            tables.append(("no Spark", [decoder_alone(bootstrap, topic, args.repeat)]))
    finally:
        if broker is not None:
            broker.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"\n{args.records:,} records of {args.size} B and {args.events:,} order events, {args.partitions} "
          f"partitions, median of {args.repeat} alternated rounds, {os.cpu_count()} cores; CPU s / M: CPU seconds of "
          f"every process (broker, Spark, Python workers) per million rows, median; load: the 1-minute load "
          f"average after each round (lowest-highest)\n")
    print(f"| {'path':<52} | {'rows':>9} | {'seconds':>7} | {'per second':>10} | CPU s / M | {'load':>7} | note")
    print(f"|{'-' * 54}|{'-' * 11}|{'-' * 9}|{'-' * 12}|-----------|{'-' * 9}|------")
    for title, rows in tables:
        print(f"| **{title}** | | | | | | |")
        for r in rows:
            print(f"| {r.name:<52} | {r.rows:>9,} | {r.median:>7.2f} | {r.rps:>10,.0f} | {r.cpu_per_million:>9.2f} "
                  f"| {r.load:>7} | {r.note}")


def source_rows(spark, bootstrap: str, topic: str, args: argparse.Namespace, tmp: str, use_kafka: bool,
                kafka_note: str) -> list[Row]:
    n = args.records

    def rivulet_df():
        return (spark.read.format("rivulet").option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", topic).load())

    def kafka_df():
        return (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", topic).load())

    def noop(df_fn):
        return lambda: df_fn().write.format("noop").mode("overwrite").save()

    pq = os.path.join(tmp, "pq")

    def parquet(df_fn):
        return lambda: df_fn().write.mode("overwrite").parquet(pq)

    def stream() -> None:
        cp = os.path.join(tmp, f"cp-{uuid.uuid4().hex[:6]}")
        q = (spark.readStream.format("rivulet").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest").load()
             .writeStream.format("noop").option("checkpointLocation", cp).trigger(availableNow=True).start())
        q.awaitTermination()

    register_ceiling(spark, n, args.size)
    ceiling = noop(lambda: spark.read.format("bench_ceiling").load())
    assert rivulet_df().count() == n
    jobs = [(Row("rivulet -> noop", n), noop(rivulet_df)),
            (Row("ceiling: Python source of ready-made Arrow batches -> noop", n), ceiling)]
    if use_kafka:
        from pyspark.sql import functions as F
        check = [F.count(F.lit(1)),
                 F.sum(F.xxhash64("key", "value", "offset", "partition").bitwiseAND(F.lit(0xFFFFFFFF)))]
        ours = rivulet_df().agg(*check).first()
        theirs = kafka_df().agg(*check).first()
        same = tuple(ours) == tuple(theirs)
        print(f"Spark's Kafka connector reads {theirs[0]:,} rows; checksums "
              f"{'match' if same else 'DIFFER'} ({ours[1]} vs {theirs[1]})", flush=True)
        jobs.append((Row("spark-sql-kafka (Java client) -> noop", n, note=kafka_note), noop(kafka_df)))
    jobs.append((Row("rivulet -> parquet", n), parquet(rivulet_df)))
    if use_kafka:
        jobs.append((Row("spark-sql-kafka (Java client) -> parquet", n), parquet(kafka_df)))
    jobs.append((Row("rivulet stream (AvailableNow) -> noop", n, note="incl. query start and commit"), stream))
    for _, fn in jobs:  # warm-up
        fn()
    alternate(jobs, args.repeat)
    rows = [r for r, _ in jobs]
    rows[0].note = (f"{rows[0].rps / rows[1].rps:.0%} of the ceiling's rate, "
                    f"{rows[0].cpu_per_million / rows[1].cpu_per_million:.2f}x its CPU (medians)")
    return rows


def init_producer_ids(metrics_port: int | None) -> int | None:
    """InitProducerId requests the benchmark's broker has answered (None: not our broker)."""
    if metrics_port is None:
        return None
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30) as r:
        text = r.read().decode()
    return int(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("kafka_network_requestmetrics_requests_total{")
                   and 'request="InitProducerId"' in line))


def sink_rows(spark, bootstrap: str, topic: str, args: argparse.Namespace, tmp: str, use_kafka: bool,
              kafka_note: str, metrics_port: int | None) -> list[Row]:
    """A streaming copy of the whole topic into a new topic of as many partitions, in
    ``--sink-batches`` micro-batches (AvailableNow): through Rivulet's sink exactly once, at
    least once (transactional=false), and through Spark's Kafka source and sink (at least once).
    Each row's note gives the InitProducerId requests per micro-batch of the last round."""
    from confluent_kafka.admin import AdminClient, NewTopic
    n = args.records
    per_batch = -(-n // args.sink_batches)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    inits: dict[str, int] = {}

    def copy(name: str, fmt: str, **sink_options: str) -> Callable[[], None]:
        def run() -> None:
            out = f"{topic}-copy-{uuid.uuid4().hex[:6]}"
            admin.create_topics([NewTopic(out, args.partitions, 1)])[out].result(30)
            before = init_producer_ids(metrics_port)
            w = (spark.readStream.format(fmt).option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
                 .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", per_batch).load()
                 .select("key", "value").writeStream.format(fmt).option("kafka.bootstrap.servers", bootstrap)
                 .option("topic", out).option("checkpointLocation", os.path.join(tmp, f"cp-{out}"))
                 .trigger(availableNow=True))
            for k, v in sink_options.items():
                w = w.option(k, v)
            q = w.start()
            q.awaitTermination()
            if q.exception() is not None:
                raise RuntimeError(f"the copy failed: {q.exception()}")
            progress = [p for p in q.recentProgress if p["numInputRows"]]
            copied = sum(p["numInputRows"] for p in progress)
            if copied != n:
                raise RuntimeError(f"the copy read {copied:,} rows, not {n:,}")
            after = init_producer_ids(metrics_port)
            if before is not None and after is not None:
                inits[name] = after - before
                print(f"    {after - before} InitProducerId requests for {len(progress)} micro-batches", flush=True)
        return run

    jobs = [(Row("rivulet -> rivulet sink (exactly once)", n), copy("exactly", "rivulet")),
            (Row("rivulet -> rivulet sink (transactional=false)", n), copy("plain", "rivulet", transactional="false"))]
    if use_kafka:
        jobs.append((Row("spark-sql-kafka -> spark-sql-kafka sink", n, note=kafka_note), copy("kafka", "kafka")))
    for _, fn in jobs:  # warm-up
        fn()
    alternate(jobs, args.repeat)
    for (row, _), name in zip(jobs, ("exactly", "plain", "kafka")[:len(jobs)], strict=True):
        if name in inits:
            row.note = "; ".join(x for x in (row.note, f"{args.sink_batches} batches of {per_batch:,}, "
                                             f"{inits[name]} InitProducerId") if x)
    return [r for r, _ in jobs]


def pipeline_rows(spark, bootstrap: str, orders: str, args: argparse.Namespace, tmp: str, use_kafka: bool,
                  kafka_note: str) -> list[Row]:
    outputs: list[tuple[str, str]] = []
    n = args.events
    jobs = [(Row("pipeline, rivulet source and sink", n, unit="events/s"),
             pipeline_job(spark, bootstrap, orders, "rivulet", tmp, args.batch, outputs))]
    if use_kafka:
        jobs.append((Row("pipeline, spark-sql-kafka source and sink", n, unit="events/s", note=kafka_note),
                     pipeline_job(spark, bootstrap, orders, "kafka", tmp, args.batch, outputs)))
    for _, fn in jobs:  # warm-up
        fn()
    alternate(jobs, args.repeat)
    check = same_windows(spark, outputs)
    print(check, flush=True)
    jobs[0][0].note = f"{-(-n // args.batch)} batches of {args.batch:,} + 1; {check}"
    return [r for r, _ in jobs]


@contextlib.contextmanager
def cluster_app(cluster, name: str, executors: int, tmp: str, conf: dict[str, object] | None = None):
    """An application on the standalone cluster allowed ``executors`` 1-core executors, once
    they are up; stopped afterwards, and its executors waited out so the next starts clean."""
    from rivulet.spark.session import quiet_session
    spark = quiet_session(cluster.master_url, name,
                          {"spark.cores.max": executors, "spark.executor.cores": 1, "spark.executor.memory": "768m",
                           "spark.sql.shuffle.partitions": 2, **(conf or {})},
                          log_path=os.path.join(tmp, f"{name}.log"))
    try:
        cluster.wait_for_executors(executors)
        yield spark
    finally:
        spark.stop()
        deadline = time.monotonic() + 30
        while cluster.executor_pids() and time.monotonic() < deadline:
            time.sleep(0.2)


def cluster_rows(bootstrap: str, topic: str, args: argparse.Namespace, tmp: str) -> list[Row]:
    """The source into noop on a standalone cluster of two 1-core workers (the tests' launcher),
    by an application allowed one executor, then two; alternated, each on a fresh application."""
    from pathlib import Path

    from tests.spark_cluster import StandaloneCluster

    n = args.records
    rows = {k: Row(f"rivulet -> noop, {k} worker{'s' if k > 1 else ''} of 1 core", n) for k in (1, 2)}
    cluster = StandaloneCluster(Path(tmp) / "cluster", workers=2).start()
    try:
        for r in range(args.repeat):
            for k, row in rows.items():
                with cluster_app(cluster, f"rivulet-bench-{k}-workers", k, tmp) as spark:
                    job = lambda: (spark.read.format("rivulet").option("kafka.bootstrap.servers", bootstrap)  # noqa
                                   .option("subscribe", topic).load().write.format("noop").mode("overwrite").save())
                    job()  # warm-up: the executors' Python workers
                    alternate([(row, job)], 1, first_round=r + 1)
    finally:
        cluster.close()
    return list(rows.values())


def cluster_pipeline_rows(bootstrap: str, orders: str, args: argparse.Namespace, tmp: str, kafka_jars: str | None,
                          kafka_note: str) -> list[Row]:
    """The pipeline on the standalone cluster of two 1-core workers: an application allowed one
    executor, then two, each running the pipeline on both connectors (alternated rounds after a
    warm-up of each). The CPU counted is every process this one started: the broker, the
    master and workers, their executors and Python workers, the driver."""
    from pathlib import Path

    from tests.spark_cluster import StandaloneCluster

    n = args.events
    rows: list[Row] = []
    cluster = StandaloneCluster(Path(tmp) / "cluster-pipeline", workers=2).start()
    try:
        for k in (1, 2):
            with cluster_app(cluster, f"rivulet-bench-pipeline-{k}", k, tmp,
                             {"spark.jars": kafka_jars} if kafka_jars else {}) as spark:
                outputs: list[tuple[str, str]] = []
                name = f"{k} worker{'s' if k > 1 else ''} of 1 core"
                jobs = [(Row(f"pipeline, rivulet source and sink, {name}", n, unit="events/s"),
                         pipeline_job(spark, bootstrap, orders, "rivulet", tmp, args.batch, outputs))]
                if kafka_jars:
                    jobs.append((Row(f"pipeline, spark-sql-kafka, {name}", n, unit="events/s", note=kafka_note),
                                 pipeline_job(spark, bootstrap, orders, "kafka", tmp, args.batch, outputs)))
                for _, fn in jobs:  # warm-up: the executors' JVM and Python workers
                    fn()
                alternate(jobs, args.repeat)
                jobs[0][0].note = same_windows(spark, outputs)
                rows += [r for r, _ in jobs]
    finally:
        cluster.close()
    return rows


if __name__ == "__main__":
    main()
