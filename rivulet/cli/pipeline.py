"""`rivulet pipeline run --config pipeline.toml`: a Spark Structured Streaming job on Rivulet.

It reads JSON events from a topic, parses them with a declared schema, computes event-time
windowed aggregates under a watermark, and writes each closed window to an output topic and
to Parquet. It resumes from its checkpoint. Both outputs are written from one foreachBatch
so the aggregation runs once; each write is idempotent per micro-batch (Parquet: one
directory per batch id, overwritten on replay; the topic: the rivulet sink's transactional
marker keyed by query id and batch id), so a replayed batch changes nothing.
See examples/pipeline.toml for every setting.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Callable

from rivulet.cli.output import progress
from rivulet.common.config import ConfigError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

DEFAULT_METRICS = {"events": "count(*)"}
# The source and sink formats the pipeline can use: Rivulet's, or Spark's own Kafka connector
# (the same options; at-least-once output).
CONNECTORS = ("rivulet", "kafka")


@dataclass
class PipelineConfig:
    bootstrap_servers: str = "127.0.0.1:9092"
    input_topic: str = "events"
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    source_options: dict[str, str] = field(default_factory=dict)
    # "rivulet", or "kafka" for Spark's JVM connector (its jars on the session's classpath)
    source_format: str = "rivulet"
    schema: str = ""
    event_time: str = "event_time"
    window: str = "10 seconds"
    slide: str | None = None
    watermark: str = "10 seconds"
    group_by: list[str] = field(default_factory=list)
    metrics: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_METRICS))
    output_topic: str | None = None
    output_bootstrap_servers: str | None = None
    output_key: str | None = None
    output_format: str = "rivulet"
    # Rivulet's sink writes a batch's window rows from the driver up to this many (0: never)
    driver_write_max_rows: int = 10_000
    parquet_path: str | None = None
    checkpoint: str = "pipeline-checkpoint"
    # "" runs Spark's default trigger: the next micro-batch as soon as the last one is done
    trigger_interval: str = "5 seconds"
    available_now: bool = False
    # Spark's Real-time Mode, with this batch duration (e.g. "5 minutes"): only on Spark's
    # Kafka connector (a Python data source cannot take part), to the topic only, in update mode
    real_time: str | None = None
    master: str = "local[2]"
    app_name: str = "rivulet-pipeline"
    shuffle_partitions: int = 2
    spark_conf: dict[str, str] = field(default_factory=dict)
    spark_log: str | None = None
    query_name: str = "rivulet_pipeline"

    @classmethod
    def load(cls, path: str | Path) -> "PipelineConfig":
        try:
            with open(path, "rb") as f:
                doc = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise ConfigError(f"{path}: {e}") from None
        return cls.from_dict(doc)

    @classmethod
    def from_dict(cls, doc: dict[str, Any], base: Path | None = None) -> "PipelineConfig":  # Any: the file's JSON
        known = {"source", "events", "aggregate", "output", "checkpoint", "trigger", "spark"}
        unknown = set(doc) - known
        if unknown:
            raise ConfigError(f"unknown section(s) {sorted(unknown)}; expected {sorted(known)}")
        c = cls()

        def rel(p: str) -> str:
            return str(base / p) if base is not None and not Path(p).is_absolute() else p

        src = dict(doc.get("source", {}))
        c.bootstrap_servers = src.pop("bootstrap_servers", c.bootstrap_servers)
        if "topic" not in src:
            raise ConfigError("[source] topic is required")
        c.input_topic = src.pop("topic")
        c.starting_offsets = src.pop("starting_offsets", c.starting_offsets)
        c.max_offsets_per_trigger = src.pop("max_offsets_per_trigger", None)
        c.fail_on_data_loss = bool(src.pop("fail_on_data_loss", True))
        c.source_options = {str(k): str(v) for k, v in src.pop("options", {}).items()}
        c.source_format = _connector(src.pop("format", c.source_format), "[source] format")
        if src:
            raise ConfigError(f"[source]: unknown key(s) {sorted(src)}")
        ev = dict(doc.get("events", {}))
        c.schema = ev.pop("schema", "")
        if not c.schema:
            raise ConfigError("[events] schema is required (Spark DDL, e.g. \"id STRING, ts TIMESTAMP\")")
        c.event_time = ev.pop("event_time", c.event_time)
        if ev:
            raise ConfigError(f"[events]: unknown key(s) {sorted(ev)}")
        ag = dict(doc.get("aggregate", {}))
        c.window = ag.pop("window", c.window)
        c.slide = ag.pop("slide", None) or None
        c.watermark = ag.pop("watermark", c.watermark)
        c.group_by = list(ag.pop("group_by", []))
        c.metrics = {str(k): str(v) for k, v in ag.pop("metrics", DEFAULT_METRICS).items()}
        if not c.metrics:
            raise ConfigError("[aggregate.metrics] needs at least one metric")
        if ag:
            raise ConfigError(f"[aggregate]: unknown key(s) {sorted(ag)}")
        out = dict(doc.get("output", {}))
        topic = dict(out.pop("topic", {}))
        c.output_topic = topic.pop("topic", None)
        c.output_bootstrap_servers = topic.pop("bootstrap_servers", None)
        c.output_key = topic.pop("key", None)
        c.output_format = _connector(topic.pop("format", c.output_format), "[output.topic] format")
        if topic:
            raise ConfigError(f"[output.topic]: unknown key(s) {sorted(topic)}")
        pq = dict(out.pop("parquet", {}))
        c.parquet_path = rel(pq.pop("path")) if "path" in pq else None
        if pq or out:
            raise ConfigError(f"[output]: unknown key(s) {sorted(set(pq) | set(out))}")
        if c.output_topic is None and c.parquet_path is None:
            raise ConfigError("give at least one output: [output.topic] topic or [output.parquet] path")
        cp = dict(doc.get("checkpoint", {}))
        if "location" not in cp:
            raise ConfigError("[checkpoint] location is required")
        c.checkpoint = rel(cp.pop("location"))
        if cp:
            raise ConfigError(f"[checkpoint]: unknown key(s) {sorted(cp)}")
        tr = dict(doc.get("trigger", {}))
        c.trigger_interval = tr.pop("processing_time", c.trigger_interval)
        c.available_now = bool(tr.pop("available_now", False))
        c.real_time = tr.pop("real_time", None) or None
        if tr:
            raise ConfigError(f"[trigger]: unknown key(s) {sorted(tr)}")
        sp = dict(doc.get("spark", {}))
        c.master = sp.pop("master", c.master)
        c.app_name = sp.pop("app_name", c.app_name)
        c.shuffle_partitions = int(sp.pop("shuffle_partitions", c.shuffle_partitions))
        c.spark_conf = {str(k): str(v) for k, v in sp.pop("conf", {}).items()}
        c.spark_log = rel(sp.pop("log", "spark.log"))
        c.query_name = sp.pop("query_name", c.query_name)
        if sp:
            raise ConfigError(f"[spark]: unknown key(s) {sorted(sp)}")
        c.check_real_time()
        return c

    def check_real_time(self) -> None:
        """What Spark's Real-time Mode allows: its Kafka source and sink (Python data sources are
        refused, STREAMING_REAL_TIME_MODE.INPUT_STREAM_NOT_SUPPORTED), no foreachBatch, so no
        Parquet, and update mode: a window's row is written again at every change."""
        if not self.real_time:
            return
        if self.source_format != "kafka" or self.output_format != "kafka":
            raise ConfigError("[trigger] real_time needs format = \"kafka\" under [source] and [output.topic]: "
                              "Spark's Real-time Mode takes only its own Kafka connector")
        if self.parquet_path or not self.output_topic:
            raise ConfigError("[trigger] real_time writes to [output.topic] only: Real-time Mode has no file "
                              "sink and no foreachBatch; remove [output.parquet]")
        if self.available_now:
            raise ConfigError("[trigger] real_time and available_now exclude each other")


def _connector(name: str, where: str) -> str:
    if name not in CONNECTORS:
        raise ConfigError(f"{where} must be one of {sorted(CONNECTORS)}, got {name!r}")
    return name


@dataclass
class PipelineStats:
    """What the foreachBatch writer saw (it runs in the driver's Python process)."""

    batches: int = 0
    windows_out: int = 0
    last_batch_id: int = -1
    lock: threading.Lock = field(default_factory=threading.Lock)


def session_for(cfg: PipelineConfig) -> SparkSession:
    from rivulet.spark.session import quiet_session
    conf = {"spark.sql.shuffle.partitions": cfg.shuffle_partitions, **cfg.spark_conf}
    return quiet_session(cfg.master, cfg.app_name, conf, log_path=cfg.spark_log)


def events_frame(spark: SparkSession, cfg: PipelineConfig) -> DataFrame:
    """The input topic's JSON events, parsed; rows that do not parse are dropped."""
    from pyspark.sql import functions as F
    opts = {"kafka.bootstrap.servers": cfg.bootstrap_servers, "subscribe": cfg.input_topic,
            "startingOffsets": cfg.starting_offsets, "failOnDataLoss": str(cfg.fail_on_data_loss).lower(),
            "includeHeaders": "false", **cfg.source_options}
    if cfg.max_offsets_per_trigger:
        opts["maxOffsetsPerTrigger"] = str(cfg.max_offsets_per_trigger)
    if cfg.source_format == "rivulet":
        # Rivulet's source parses the JSON itself, in C++ (Arrow's reader), instead of from_json
        # in the JVM a row at a time; a value that does not parse is a null value, dropped below.
        opts.update(valueFormat="json", valueSchema=cfg.schema, mode="PERMISSIVE")
        raw = spark.readStream.format(cfg.source_format).options(**opts).load()
        parsed = raw.select("value.*")
    else:
        raw = spark.readStream.format(cfg.source_format).options(**opts).load()
        parsed = raw.select(F.from_json(F.col("value").cast("string"), cfg.schema,
                                        {"mode": "PERMISSIVE", "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss[.SSS][XXX]"})
                            .alias("e")).select("e.*")
    return parsed.where(F.col(cfg.event_time).isNotNull())


def aggregate(events: DataFrame, cfg: PipelineConfig) -> DataFrame:
    from pyspark.sql import functions as F
    w = F.window(cfg.event_time, cfg.window, cfg.slide) if cfg.slide else F.window(cfg.event_time, cfg.window)
    grouped = events.withWatermark(cfg.event_time, cfg.watermark).groupBy(w.alias("window"), *cfg.group_by)
    agg = grouped.agg(*[F.expr(expr).alias(name) for name, expr in cfg.metrics.items()])
    return agg.select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                      *cfg.group_by, *cfg.metrics)


def topic_columns(cfg: PipelineConfig) -> tuple[Column, Column]:
    """The output topic's key and value over ``aggregate``'s columns: JSON values keyed by the
    group-by columns. Named from the config, not asked of a frame, so the pipeline builds them
    once per query: built per micro-batch they cost a Py4J call per column, in every batch."""
    from pyspark.sql import functions as F
    columns = ["window_start", "window_end", *cfg.group_by, *cfg.metrics]
    key = F.col(cfg.output_key).cast("string") if cfg.output_key else \
        F.concat_ws("|", *[F.col(c).cast("string") for c in cfg.group_by]) if cfg.group_by \
        else F.lit(None).cast("string")
    return key.alias("key"), F.to_json(F.struct(*columns)).alias("value")


def topic_rows(df: DataFrame, cfg: PipelineConfig, columns: tuple[Column, Column] | None = None) -> DataFrame:
    """The windows as the output topic holds them (``topic_columns``, or ``columns`` built by it)."""
    return df.select(*(columns or topic_columns(cfg)))


def driver_rows(df: DataFrame, cfg: PipelineConfig, n: int, columns: tuple[Column, Column] | None = None
                ) -> pa.Table | None:
    """A batch's ``n`` topic rows (``n`` from its count) as an Arrow table in the driver, when
    Rivulet's sink writes them from there: 1 to ``driver_write_max_rows`` of them (None: they go
    through the sink as a Spark job). ``df`` is persisted and counted, so this is a one-stage job
    over the cached batch, run only in the batches that close windows; the count, the batch's one
    job otherwise, costs less than a ``limit(max + 1).toArrow()`` did as that job (CollectLimit's
    shuffle to one partition, its projection in the stateful stage, more Py4J calls in every
    batch). Which way a batch goes depends only on its rows, so a replayed batch goes the same
    way (each way has its own marker)."""
    if not (cfg.output_topic and cfg.output_format == "rivulet" and 0 < n <= cfg.driver_write_max_rows):
        return None
    # foreachBatch runs in the stream's thread, whose local properties name the query
    if not df.sparkSession.sparkContext.getLocalProperty("sql.streaming.queryId"):
        return None
    return topic_rows(df, cfg, columns).toArrow()


def write_topic(df: DataFrame, cfg: PipelineConfig, batch_id: int, rows: pa.Table | None,
                columns: tuple[Column, Column] | None = None) -> None:
    """A micro-batch's window rows to the output topic: ``rows`` (from ``driver_rows``) from the
    driver in one transaction (``write_from_driver``), since a Spark job of a Python data
    source write would cost several times the transaction; else as a Spark job."""
    bootstrap = cfg.output_bootstrap_servers or cfg.bootstrap_servers
    if rows is not None:
        from rivulet.spark.sink import SinkOptions, write_from_driver
        query_id = df.sparkSession.sparkContext.getLocalProperty("sql.streaming.queryId")
        opts = SinkOptions.parse({"kafka.bootstrap.servers": bootstrap, "topic": cfg.output_topic})
        write_from_driver(opts, rows, query_id, batch_id)
        return
    (topic_rows(df, cfg, columns).write.format(cfg.output_format).mode("append")
     .option("kafka.bootstrap.servers", bootstrap).option("topic", cfg.output_topic).save())


def batch_writer(cfg: PipelineConfig, stats: PipelineStats) -> Callable[[DataFrame, int], None]:
    # once per query (Column objects name columns, they hold no frame): see topic_columns
    columns = topic_columns(cfg) if cfg.output_topic else None

    def write(df: DataFrame, batch_id: int) -> None:
        df = df.persist()
        try:
            n = df.count()
            rows = driver_rows(df, cfg, n, columns)
            if n:
                if cfg.parquet_path:
                    # One directory per batch, overwritten if the batch is replayed.
                    df.write.mode("overwrite").parquet(f"{cfg.parquet_path}/batch_id={batch_id}")
                if cfg.output_topic:
                    write_topic(df, cfg, batch_id, rows, columns)
            with stats.lock:
                stats.batches += 1
                stats.windows_out += n
                stats.last_batch_id = batch_id
        finally:
            df.unpersist()
    return write


def start(spark: SparkSession, cfg: PipelineConfig, stats: PipelineStats | None = None) -> StreamingQuery:
    """Start the streaming query (resuming from the checkpoint if there is one)."""
    stats = stats or PipelineStats()
    cfg.check_real_time()
    agg = aggregate(events_frame(spark, cfg), cfg)
    if cfg.real_time:
        return real_time_query(agg, cfg)
    writer = (agg.writeStream.outputMode("append").queryName(cfg.query_name)
              .foreachBatch(batch_writer(cfg, stats)).option("checkpointLocation", cfg.checkpoint))
    if cfg.available_now:
        writer = writer.trigger(availableNow=True)
    elif cfg.trigger_interval:
        writer = writer.trigger(processingTime=cfg.trigger_interval)
    return writer.start()


def real_time_query(agg: DataFrame, cfg: PipelineConfig) -> StreamingQuery:
    """The pipeline in Spark's Real-time Mode: every change of a window goes to the topic as it
    happens (update mode), through Spark's Kafka sink (at least once). Every task of the query
    runs at once, so Spark needs a slot for each source partition and each shuffle partition."""
    assert cfg.output_topic is not None
    return (topic_rows(agg, cfg).writeStream.format("kafka").outputMode("update").queryName(cfg.query_name)
            .option("kafka.bootstrap.servers", cfg.output_bootstrap_servers or cfg.bootstrap_servers)
            .option("topic", cfg.output_topic).option("checkpointLocation", cfg.checkpoint)
            .trigger(realTime=cfg.real_time).start())


def nothing_to_replay(checkpoint: str) -> bool:
    """Every batch the query planned (its offset log) is also done (its commit log)."""
    def last(log_dir: str) -> int:
        return max((int(f.name) for f in (Path(checkpoint) / log_dir).glob("[0-9]*") if f.name.isdigit()),
                   default=-1)
    return last("offsets") == last("commits")


def release_markers(cfg: PipelineConfig, query_id: str) -> None:
    """Delete the topic write's marker groups once no batch can be replayed: a resumed query
    starts with a new batch, which needs no marker, so a stopped pipeline leaves no groups."""
    if not cfg.output_topic or cfg.output_format != "rivulet" or not nothing_to_replay(cfg.checkpoint):
        return
    from rivulet.spark.sink import delete_query_markers
    try:
        delete_query_markers(cfg.output_bootstrap_servers or cfg.bootstrap_servers, query_id)
    except Exception as e:  # the groups are only clutter
        logging.getLogger("rivulet.spark").warning("could not delete the marker groups of query %s: %s",
                                                   query_id, e)


# Any in progress: Spark's StreamingQueryProgress JSON, of its own shape.
def open_windows(progress: dict[str, Any] | None) -> tuple[int, str | None]:
    """Windows still held in the aggregation's state after a batch, and the watermark then.

    Spark writes a window in append mode only once the watermark passes its end; with a fixed
    data set the last windows stay open (the watermark is the latest event time minus the
    delay), until later events move it.
    """
    if not progress:
        return 0, None
    held = sum(int(op.get("numRowsTotal", 0)) for op in progress.get("stateOperators") or [])
    return held, (progress.get("eventTime") or {}).get("watermark")


def describe_end(batches: int, written: int, progress: dict[str, Any] | None) -> str:
    held, watermark = open_windows(progress)
    line = f"stopped after {batches} batches; {written} windows written"
    if held:
        line += (f"; {held} windows still open: the watermark ({watermark}) has not passed their end, "
                 "so they are written once later events move it past (as in Spark's append mode)")
    return line


class StopSignal:
    """Ctrl-C and SIGTERM as a flag the command polls, with Spark's running jobs cancelled.

    Interrupting the main thread inside a Py4J call is what printed Py4J's tracebacks; here
    the call instead ends with the cancelled job's error, which the command takes as the
    interruption it is.
    """

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signum = 0
        self.spark: SparkSession | None = None

    def install(self) -> None:
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)

    def attach(self, spark: SparkSession) -> None:
        """After a SparkSession started: take SIGINT back from PySpark's own handler."""
        self.spark = spark
        self.install()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signum = signum
        self.event.set()
        if self.spark is not None:
            # From another thread: the handler runs on the main thread, which may be inside a
            # Py4J call reading its connection; a second call there would read it reentrantly.
            # Py4J gives each thread a connection of its own.
            threading.Thread(target=self._cancel_jobs, name="rivulet-cancel-jobs", daemon=True).start()

    def _cancel_jobs(self) -> None:
        try:
            self.spark.sparkContext.cancelAllJobs()
        except Exception:  # Spark is already stopping
            pass

    def is_set(self) -> bool:
        return self.event.is_set()

    @property
    def exit_code(self) -> int:
        return 128 + (self.signum or signal.SIGINT)


def run_interruptibly(name: str, body: Callable[[StopSignal], int]) -> int:
    """Run a Spark command; a Ctrl-C ends it with one line and 130 (SIGTERM: 143), no traceback.
    Without a usable Spark (PySpark, pyarrow, Java) it says why and returns 2."""
    missing = spark_missing()
    if missing:
        print(f"rivulet {name}: {missing}", file=sys.stderr)
        return 2
    stop = StopSignal()
    stop.install()
    # Py4J reports a call broken by the shutdown through logging; the user asked for it.
    py4j_log = logging.getLogger("py4j")
    py4j_log.addHandler(logging.NullHandler())
    py4j_log.propagate = False
    # The command reports a broker it cannot reach itself; the demo's broker stopping
    # under its own producer at Ctrl-C is not worth a line either.
    logging.getLogger("rivulet.client.brokers").setLevel(logging.CRITICAL)
    # PySpark's accumulator server prints a traceback when the JVM hangs up on it mid-read,
    # which an interruption makes it do, up to the process's end; after the user's Ctrl-C
    # that is noise too.
    from pyspark.accumulators import UpdateRequestHandler
    serve_updates = UpdateRequestHandler.handle

    def handle(handler: UpdateRequestHandler) -> None:
        try:
            serve_updates(handler)
        except (EOFError, OSError):
            if not stop.is_set():
                raise
    UpdateRequestHandler.handle = handle  # type: ignore[method-assign]
    try:
        code = body(stop)
    except KeyboardInterrupt:  # PySpark's own SIGINT handler, before attach()
        stop.signum = stop.signum or signal.SIGINT
        stop.event.set()
        code = 0
    except BaseException:
        if not stop.is_set():
            raise
        code = 0
    if stop.is_set():
        print(f"rivulet {name}: interrupted", file=sys.stderr, flush=True)
        return stop.exit_code
    return code


def describe_progress(p: dict[str, Any]) -> str:
    wm = (p.get("eventTime") or {}).get("watermark", "-")
    return (f"batch {p['batchId']}: {p['numInputRows']} events in, "
            f"{p.get('processedRowsPerSecond', 0.0):,.0f} events/s, watermark {wm}")


def spark_missing() -> str | None:
    """Why Spark cannot run here, or None."""
    try:
        import pyarrow  # noqa: F401
        import pyspark
    except ImportError as e:
        return f"{e.name} is not installed: pip install 'rivulet[spark]' (PySpark 4.2+, pyarrow; Java 17+)"
    major, minor = (int(x) for x in pyspark.__version__.split(".")[:2])
    if (major, minor) < (4, 2):
        return f"PySpark {pyspark.__version__} is too old: pip install 'pyspark>=4.2'"
    return java_missing()


def java_missing() -> str | None:
    """Why Spark would find no usable Java (17 or later), or None. Spark looks in JAVA_HOME
    first, then on PATH; asking here turns its long start-up traceback into one line."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    hint = "install Java 17 or later (Debian: apt-get install default-jre-headless) or set JAVA_HOME"
    if not java or not os.access(java, os.X_OK):
        where = f"JAVA_HOME={home}" if home else "PATH"
        return f"Spark needs Java, and there is none in {where}: {hint}"
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"Spark needs Java, and {java} did not run ({e}): {hint}"
    found = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if found:
        major = int(found.group(1))
        if major == 1 and found.group(2):  # "1.8.0_x" is Java 8
            major = int(found.group(2))
        if major < 17:
            return f"Spark needs Java 17 or later, and {java} is Java {major}: {hint}"
    return None


def run_main(args: argparse.Namespace) -> int:
    return run_interruptibly("pipeline", lambda stop: _run(args, stop))


def _run(args: argparse.Namespace, stop: StopSignal) -> int:
    try:
        cfg = PipelineConfig.load(args.config)
    except ConfigError as e:
        print(f"rivulet pipeline: {e}", file=sys.stderr)
        return 2
    if args.bootstrap_server:
        cfg.bootstrap_servers = args.bootstrap_server
    if args.available_now:
        cfg.available_now = True
    print(f"starting Spark ({cfg.master}); Spark's logs go to {cfg.spark_log}", flush=True)
    spark = session_for(cfg)
    stop.attach(spark)
    if stop.is_set():
        spark.stop()
        return 0
    stats = PipelineStats()
    query = start(spark, cfg, stats)
    print(f"pipeline running: {cfg.input_topic} -> "
          f"{', '.join(x for x in [cfg.output_topic and 'topic ' + cfg.output_topic, cfg.parquet_path and 'parquet ' + cfg.parquet_path] if x)}"
          f" (checkpoint {cfg.checkpoint})", flush=True)
    deadline = time.monotonic() + args.timeout if args.timeout else None
    seen = -1
    try:
        with progress("waiting for the first batch", None, "batches") as bar:
            while query.isActive and not stop.is_set():
                if deadline is not None and time.monotonic() > deadline:
                    break
                p = query.lastProgress
                if p and p["batchId"] != seen:
                    seen = p["batchId"]
                    line = f"{describe_progress(p)} | windows written so far: {stats.windows_out}"
                    print(line, flush=True)
                    bar.update(line)
                    bar.completed(stats.batches)
                stop.event.wait(1.0)
    finally:
        if query.isActive:
            query.stop()
        err = None if stop.is_set() else query.exception()
        last = query.lastProgress
        spark.stop()
        if err is None:
            release_markers(cfg, query.id)
    if err is not None:
        print(f"rivulet pipeline: the query failed: {err}", file=sys.stderr)
        return 1
    print(describe_end(stats.batches, stats.windows_out, last), flush=True)
    return 0


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("pipeline", help="run the Spark streaming pipeline (windowed aggregates of JSON events)")
    psub = p.add_subparsers(dest="pipeline_command", required=True)
    r = psub.add_parser("run", help="run the pipeline described by a TOML file")
    r.add_argument("--config", required=True, help="pipeline TOML (see examples/pipeline.toml)")
    r.add_argument("--bootstrap-server", help="override [source] bootstrap_servers")
    r.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    r.add_argument("--timeout", type=float, default=0, help="stop after this many seconds (0: run until stopped)")
    r.set_defaults(func=run_main)
