"""The pipeline end to end on local Spark, and a query killed with SIGKILL in the middle of a
micro-batch: exact window counts across a restart, and Parquet output with neither
duplicates nor gaps after the crash."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from test_spark import consume_all, create_topic, produce, spark_session, topic_name  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.spark]

SCHEMA = "order_id STRING, category STRING, quantity INT, price DOUBLE, event_time TIMESTAMP"
BASE = datetime(2026, 1, 1, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    s = spark_session(tmp_path_factory.mktemp("spark"))
    yield s
    s.stop()


def pipeline_config(bootstrap: str, src: str, tmp_path, per_trigger: int, watermark: str,
                    metrics: dict[str, str], topic: str | None = None, parquet: bool = True):
    """The tests' pipeline: SCHEMA's orders, 10 s windows per category, run to the end of the
    input (AvailableNow), its checkpoint and Parquet output in ``tmp_path``."""
    from rivulet.cli.pipeline import PipelineConfig
    output: dict[str, dict[str, str]] = {}
    if topic is not None:
        output["topic"] = {"topic": topic}
    if parquet:
        output["parquet"] = {"path": str(tmp_path / "pq")}
    return PipelineConfig.from_dict({
        "source": {"bootstrap_servers": bootstrap, "topic": src, "max_offsets_per_trigger": per_trigger},
        "events": {"schema": SCHEMA, "event_time": "event_time"},
        "aggregate": {"window": "10 seconds", "watermark": watermark, "group_by": ["category"], "metrics": metrics},
        "output": output,
        "checkpoint": {"location": str(tmp_path / "cp")},
        "trigger": {"available_now": True},
    })


def order(i: int, second: float, category: str, quantity: int) -> dict:
    ts = (BASE + timedelta(seconds=second)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    doc = {"order_id": f"o{i}", "category": category, "quantity": quantity, "price": 2.5, "event_time": ts}
    return {"value": json.dumps(doc).encode(), "key": category.encode()}


def test_pipeline_counts_are_exact_across_a_restart(broker, spark, tmp_path):
    from rivulet.cli.pipeline import PipelineStats, start
    src = create_topic(broker.bootstrap, topic_name("orders"), 3)
    dst = create_topic(broker.bootstrap, topic_name("agg"), 2)
    cfg = pipeline_config(broker.bootstrap, src, tmp_path, 2000, "10 seconds",
                          {"orders": "count(*)", "items": "sum(quantity)"}, topic=dst)
    cats = ["books", "garden", "toys"]
    expected: Counter = Counter()
    items: Counter = Counter()
    events, n = [], 0

    def add(second: float, cat: str, q: int) -> None:
        nonlocal n
        events.append(order(n, second, cat, q))
        expected[(int(second) // 10 * 10, cat)] += 1
        items[(int(second) // 10 * 10, cat)] += q
        n += 1

    def jitter(i: int) -> float:  # out of order by up to 1.5 s, well inside the watermark
        return ((i * 37) % 300) / 100.0 - 1.5

    # Run 1: windows [0, 30) s, slightly out of order; a line that does not parse is dropped.
    for i in range(3000):
        add(max(0.0, i / 100.0 + jitter(i)), cats[i % 3], 1 + i % 4)
    produce(broker.bootstrap, src, events + [{"value": b"not json"}])
    q = start(spark, cfg, PipelineStats())
    q.awaitTermination(300)
    assert q.exception() is None

    # Run 2, from the checkpoint: late data for the still-open window [20, 30), then [30, 60),
    # then one event an hour later that moves the watermark past every window above.
    events = []
    for i in range(2000):
        add(25 + i * 35 / 2000 + jitter(i), cats[i % 3], 1 + i % 2)
    events.append(order(n, 3600, "sentinel", 1))
    produce(broker.bootstrap, src, events)
    q = start(spark, cfg, PipelineStats())
    q.awaitTermination(300)
    assert q.exception() is None

    def key(r):
        start = r["window_start"] if isinstance(r["window_start"], datetime) else \
            datetime.fromisoformat(r["window_start"].replace("Z", "+00:00"))
        return int((start.replace(tzinfo=timezone.utc) - BASE).total_seconds()), r["category"]

    rows = spark.read.parquet(str(tmp_path / "pq")).collect()
    got = {key(r.asDict()): (r.orders, r["items"]) for r in rows}
    assert len(rows) == len(got), "a window was written twice"
    assert got == {k: (expected[k], items[k]) for k in expected}
    assert sum(c for c, _ in got.values()) == 5000

    msgs = consume_all(broker.bootstrap, dst, 2)
    from_topic = {key(json.loads(m.value())): json.loads(m.value())["orders"] for m in msgs}
    assert len(msgs) == len(from_topic) == len(expected)
    assert from_topic == dict(expected)


CHILD = textwrap.dedent("""
    import sys, time
    from pyspark.sql import SparkSession
    bootstrap, topic, out, cp = sys.argv[1:5]
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    # No rivulet.spark.register(): format("rivulet") is found through pyspark_rivulet.
    df = (spark.readStream.format("rivulet").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic).option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", "750").load())

    from pyspark.sql.functions import udf

    @udf("long", useArrow=False)
    def slow(offset):  # every micro-batch takes a while, so there is a middle to kill it in
        if offset % 60 == 0:
            time.sleep(0.05)
        return offset

    q = (df.withColumn("offset", slow("offset")).writeStream.format("parquet").option("path", out)
         .option("checkpointLocation", cp).trigger(availableNow=True).start())
    q.awaitTermination()
    print("DONE", flush=True)
""")


def test_query_killed_mid_batch_leaves_no_duplicates_or_gaps(broker, spark, tmp_path):
    t = create_topic(broker.bootstrap, topic_name("kill"), 2)
    counts = {0: 1700, 1: 1300}
    produce(broker.bootstrap, t, [{"value": f"{p}-{i}".encode(), "partition": p}
                                  for p, n in counts.items() for i in range(n)])
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    out, cp = tmp_path / "out", tmp_path / "cp"
    from rivulet.spark.session import worker_pythonpath
    worker_pythonpath()  # the child and its Spark workers import this checkout
    env = dict(os.environ)
    args = [sys.executable, str(script), broker.bootstrap, t, str(out), str(cp)]
    log = open(tmp_path / "child.log", "wb")

    child = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    killed_in = None
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and child.poll() is None:
            started = {int(p.name) for p in (cp / "offsets").glob("[0-9]*")} if (cp / "offsets").exists() else set()
            done = {int(p.name) for p in (cp / "commits").glob("[0-9]*")} if (cp / "commits").exists() else set()
            running = started - done
            if done and running:  # batch 0 is committed, a later one is under way
                time.sleep(0.2)  # into the batch: its tasks are writing files
                killed_in = max(running)
                os.killpg(child.pid, signal.SIGKILL)
                break
            time.sleep(0.02)
    finally:
        if child.poll() is None and killed_in is None:
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    assert killed_in is not None, (tmp_path / "child.log").read_text()[-3000:]
    assert not (cp / "commits" / str(killed_in)).exists(), "the batch finished before the kill"

    child = subprocess.run(args, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=300)
    log.close()
    assert child.returncode == 0 and "DONE" in (tmp_path / "child.log").read_text(), \
        (tmp_path / "child.log").read_text()[-3000:]

    df = spark.read.parquet(str(out))
    assert df.count() == df.select("topic", "partition", "offset").distinct().count() == sum(counts.values())
    for p, n in counts.items():
        offsets = sorted(r.offset for r in df.where(f"partition = {p}").select("offset").collect())
        assert offsets == list(range(n)), f"partition {p} has gaps or duplicates"


def test_available_now_writes_the_windows_the_watermark_closed_and_counts_the_open_ones(broker, spark, tmp_path):
    from rivulet.cli.pipeline import PipelineStats, describe_end, start
    src = create_topic(broker.bootstrap, topic_name("fixed"), 2)
    dst = create_topic(broker.bootstrap, topic_name("fixed-out"), 1)
    cfg = pipeline_config(broker.bootstrap, src, tmp_path, 1000, "10 seconds", {"orders": "count(*)"}, topic=dst)
    # 0..39.99 s: the final watermark is 29.99 s, so [0,10), [10,20) close, [20,30), [30,40) stay open.
    produce(broker.bootstrap, src, [order(i, i / 100.0, ["a", "b"][i % 2], 1) for i in range(4000)])
    stats = PipelineStats()
    q = start(spark, cfg, stats)
    q.awaitTermination(300)
    assert q.exception() is None
    assert stats.windows_out == 4 == spark.read.parquet(str(tmp_path / "pq")).count()
    assert describe_end(stats.batches, stats.windows_out, q.lastProgress).endswith(
        "4 windows written; 4 windows still open: the watermark (2026-01-01T00:00:29.990Z) has not passed their "
        "end, so they are written once later events move it past (as in Spark's append mode)")
    assert len(consume_all(broker.bootstrap, dst, 1)) == 4
    # The query is stopped with every batch committed: its marker groups go.
    from rivulet.cli.pipeline import nothing_to_replay, release_markers
    from test_spark import _group_ids
    mine = lambda: {g for g in _group_ids(broker.bootstrap) if g.startswith(f"rivulet-spark-{q.id}-")}  # noqa: E731
    assert mine() and nothing_to_replay(cfg.checkpoint)
    release_markers(cfg, q.id)
    deadline = time.monotonic() + 20
    while mine() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert mine() == set()


@pytest.mark.parametrize("max_rows", [10_000, 2])
def test_windows_go_from_the_driver_once_across_a_replayed_batch(broker, spark, tmp_path, max_rows):
    """A micro-batch's few window rows go to the topic in one transaction from the driver
    (its marker group is the driver's), and a batch replayed after a crash between the write
    and Spark's commit log adds nothing. A batch of more rows than driver_write_max_rows
    (here 3, one window of three categories, above 2) goes through the sink as a Spark job,
    the replay too."""
    from rivulet.cli.pipeline import PipelineStats, start
    from test_spark import _group_ids
    src = create_topic(broker.bootstrap, topic_name("drv"), 2)
    dst = create_topic(broker.bootstrap, topic_name("drv-out"), 2)
    cfg = pipeline_config(broker.bootstrap, src, tmp_path, 1000, "5 seconds", {"orders": "count(*)"}, topic=dst,
                          parquet=False)
    cfg.driver_write_max_rows = max_rows
    # 0..59.99 s: the final watermark is 54.99 s, so the windows [0,10) .. [40,50) close.
    produce(broker.bootstrap, src, [order(i, i / 100.0, ["a", "b", "c"][i % 3], 1) for i in range(6000)])
    q = start(spark, cfg, PipelineStats())
    q.awaitTermination(300)
    assert q.exception() is None
    groups = {g for g in _group_ids(broker.bootstrap) if g.startswith(f"rivulet-spark-{q.id}-")}
    driver = f"rivulet-spark-{q.id}-fb-{dst}-driver-0"
    if max_rows > 3:
        assert groups == {driver}
    else:
        assert groups and driver not in groups

    def windows() -> Counter:
        return Counter((json.loads(m.value())["window_start"], json.loads(m.value())["category"])
                       for m in consume_all(broker.bootstrap, dst, 2))
    first = windows()
    assert len(first) == 15 and set(first.values()) == {1}
    # The rows as before the key and value were built once per query from the config: keyed by
    # the group-by column, the aggregate's columns in its order (a replay must write the same).
    for m in consume_all(broker.bootstrap, dst, 2):
        value = json.loads(m.value())
        assert list(value) == ["window_start", "window_end", "category", "orders"]
        assert m.key() == value["category"].encode()
    # The driver dies after the last batch's write, before Spark records the batch as done.
    cp = tmp_path / "cp"
    last = max(int(p.name) for p in (cp / "commits").iterdir() if p.name.isdigit())
    (cp / "commits" / str(last)).unlink()
    (cp / "commits" / f".{last}.crc").unlink(missing_ok=True)
    replay = PipelineStats()
    q = start(spark, cfg, replay)
    q.awaitTermination(300)
    assert q.exception() is None
    assert replay.last_batch_id == last and replay.windows_out > 0  # the replay had windows to write
    assert windows() == first


def _wait_for_line(proc: subprocess.Popen, text: str, timeout: float) -> str:
    seen = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen += line
        if text in line:
            return seen
    raise AssertionError(f"no {text!r} in:\n{seen}")


@contextlib.contextmanager
def rivulet_running(args: list[str], ready: str) -> Iterator[subprocess.Popen]:
    """``python -m rivulet *args`` in a session of its own (so that signals reach its Spark
    JVM too), once it printed ``ready``; its whole group killed afterwards if still running."""
    proc = subprocess.Popen([sys.executable, "-m", "rivulet", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait_for_line(proc, ready, 240)
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def ctrl_c(proc: subprocess.Popen) -> str:
    """SIGINT to the whole group, as the terminal sends Ctrl-C; what the process wrote to stderr."""
    os.killpg(proc.pid, signal.SIGINT)
    return proc.communicate(timeout=120)[1]


@pytest.mark.parametrize("command", ["pipeline", "demo"])
def test_ctrl_c_ends_quietly_with_130(broker, tmp_path, command):
    from rivulet.spark.session import worker_pythonpath
    worker_pythonpath()
    if command == "pipeline":
        src = create_topic(broker.bootstrap, topic_name("ctrlc"), 1)
        conf = tmp_path / "p.toml"
        conf.write_text(textwrap.dedent(f"""
            [source]
            bootstrap_servers = "{broker.bootstrap}"
            topic = "{src}"
            [events]
            schema = "{SCHEMA}"
            event_time = "event_time"
            [aggregate]
            window = "10 seconds"
            watermark = "10 seconds"
            [aggregate.metrics]
            orders = "count(*)"
            [output.parquet]
            path = "{tmp_path / 'pq'}"
            [checkpoint]
            location = "{tmp_path / 'cp'}"
            [spark]
            log = "{tmp_path / 'spark.log'}"
            """))
        args, ready = ["pipeline", "run", "--config", str(conf)], "pipeline running"
    else:
        args, ready = ["demo", "--output", str(tmp_path / "out"), "--duration", "300"], "generating"
    with rivulet_running(args, ready) as proc:
        time.sleep(3)  # a batch under way
        err = ctrl_c(proc)
    assert proc.returncode == 130, err
    assert err.strip() == f"rivulet {command}: interrupted", err


def test_real_time_mode_through_spark_kafka_connector_on_rivulet(broker, tmp_path):
    """Spark's Real-time Mode takes no Python data source, so `real_time` runs the pipeline
    through spark-sql-kafka against the broker: every order of a window shows in that window's
    rows (update mode) while the query runs, without a micro-batch ever ending."""
    from benchmarks.spark_source import kafka_connector_jars
    from rivulet.spark.session import worker_pythonpath
    import pyspark
    worker_pythonpath()
    jars, _ = kafka_connector_jars(pyspark.__version__)  # cached after the first fetch
    src = create_topic(broker.bootstrap, topic_name("rtm-in"), 2)
    out = create_topic(broker.bootstrap, topic_name("rtm-out"), 1)
    conf = tmp_path / "p.toml"
    conf.write_text(textwrap.dedent(f"""
        [source]
        bootstrap_servers = "{broker.bootstrap}"
        topic = "{src}"
        starting_offsets = "earliest"
        format = "kafka"
        [events]
        schema = "{SCHEMA}"
        event_time = "event_time"
        [aggregate]
        window = "10 seconds"
        watermark = "10 seconds"
        group_by = ["category"]
        [aggregate.metrics]
        orders = "count(*)"
        items = "sum(quantity)"
        [output.topic]
        topic = "{out}"
        format = "kafka"
        [checkpoint]
        location = "{tmp_path / 'cp'}"
        [trigger]
        real_time = "5 minutes"
        [spark]
        master = "local[4]"    # a task slot for each of the 2 source and 2 shuffle partitions
        log = "{tmp_path / 'spark.log'}"
        conf = {{ "spark.jars" = "{','.join(jars)}" }}
        """))
    with rivulet_running(["pipeline", "run", "--config", str(conf)], "pipeline running") as proc:
        produce(broker.bootstrap, src, [order(i, 1.0 + i / 100, ("books", "toys")[i % 2], 1 + i % 3)
                                        for i in range(40)])
        want = {"books": (20, sum(1 + i % 3 for i in range(0, 40, 2))),
                "toys": (20, sum(1 + i % 3 for i in range(1, 40, 2)))}
        latest: dict[str, tuple[int, int]] = {}
        deadline = time.monotonic() + 180
        while latest != want and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(1)
            for rec in consume_all(broker.bootstrap, out, 1):
                row = json.loads(rec.value())
                assert row["window_start"].startswith("2026-01-01T00:00:00"), row
                latest[row["category"]] = max(latest.get(row["category"], (0, 0)), (row["orders"], row["items"]))
        assert proc.poll() is None, proc.communicate()[1]
        assert latest == want
        err = ctrl_c(proc)
    assert proc.returncode == 130, err

