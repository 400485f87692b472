"""The source, the sink and the pipeline on a Spark standalone cluster (a master and two
1-core workers, so every task runs in an executor JVM apart from the driver, with its own
Python workers) against a 3-broker Rivulet cluster (replication factor 3)."""

from __future__ import annotations

import json
import os
from collections import Counter
from datetime import datetime, timezone

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from test_spark import consume_all, produce, source, run_available_now, topic_name  # noqa: E402
from test_spark_pipeline import BASE, SCHEMA, order  # noqa: E402

from tests.cluster import three_brokers  # noqa: E402
from tests.integration.test_replication_faults import BROKER_CONFIG, create_topic  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.cluster]


@pytest.fixture(scope="module")
def brokers(module_zk_connect):
    with three_brokers(module_zk_connect, **BROKER_CONFIG, **{"min.insync.replicas": "2"}) as c:
        yield c


@pytest.fixture(scope="module")
def spark(spark_standalone, tmp_path_factory):
    from rivulet.spark.session import quiet_session
    s = quiet_session(spark_standalone.master_url, "rivulet-cluster-tests",
                      {"spark.sql.shuffle.partitions": 2, "spark.executor.memory": "768m",
                       "spark.default.parallelism": 2},
                      log_path=tmp_path_factory.mktemp("spark-driver") / "spark.log")
    spark_standalone.wait_for_executors(2)
    yield s
    s.stop()


def executor_pid(col):
    """A column: the pid of the executor JVM the Python worker runs under (-1 if none)."""
    from pyspark.sql import functions as F

    def find(_: int) -> int:  # defined here so that it is pickled by value: executors lack this module
        pid = os.getpid()
        while pid > 1:
            if b"CoarseGrainedExecutorBackend" in open(f"/proc/{pid}/cmdline", "rb").read():
                return pid
            pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        return -1
    return F.udf(find, "long", useArrow=False)(col)


def _topic(brokers, prefix: str, partitions: int) -> str:
    name = topic_name(prefix)
    create_topic(brokers, name, partitions)
    return name


def test_source_and_sink_run_in_executors_apart_from_the_driver(brokers, spark, spark_standalone, tmp_path):
    src, dst = _topic(brokers, "cl-in", 3), _topic(brokers, "cl-out", 2)
    produce(brokers.bootstrap, src, [{"value": f"v{i}".encode(), "key": f"k{i % 7}".encode(), "partition": i % 3}
                                     for i in range(3000)])

    # Batch: every record once, read by Python workers of the executor JVMs, not the driver's.
    df = source(spark, brokers.bootstrap, src, streaming=False).withColumn("executor", executor_pid("offset"))
    rows = df.select("partition", "offset", "value", "executor").collect()
    assert len(rows) == len({(r.partition, r.offset) for r in rows}) == 3000
    assert Counter(r.partition for r in rows) == {0: 1000, 1: 1000, 2: 1000}
    assert {r.value for r in rows} == {f"v{i}".encode() for i in range(3000)}
    executors = set(spark_standalone.executor_pids())
    assert len(executors) == 2 and {r.executor for r in rows} <= executors, ({r.executor for r in rows}, executors)

    # Streaming, Rivulet to Rivulet through the transactional sink, several batches.
    stream = source(spark, brokers.bootstrap, src, startingOffsets="earliest", maxOffsetsPerTrigger=800)
    q = run_available_now(stream.select("key", "value"), tmp_path / "cp", sink="rivulet",
                          **{"kafka.bootstrap.servers": brokers.bootstrap, "topic": dst})
    assert len(q.recentProgress) >= 4
    msgs = consume_all(brokers.bootstrap, dst, 2)
    assert Counter(m.value() for m in msgs) == Counter(f"v{i}".encode() for i in range(3000))


def test_pipeline_on_the_cluster_counts_every_window_exactly(brokers, spark, tmp_path):
    from rivulet.cli.pipeline import PipelineConfig, PipelineStats, start
    src, dst = _topic(brokers, "cl-orders", 3), _topic(brokers, "cl-agg", 2)
    cfg = PipelineConfig.from_dict({
        "source": {"bootstrap_servers": brokers.bootstrap, "topic": src, "max_offsets_per_trigger": 1500},
        "events": {"schema": SCHEMA, "event_time": "event_time"},
        "aggregate": {"window": "10 seconds", "watermark": "5 seconds", "group_by": ["category"],
                      "metrics": {"orders": "count(*)"}},
        "output": {"topic": {"topic": dst}, "parquet": {"path": str(tmp_path / "pq")}},
        "checkpoint": {"location": str(tmp_path / "cp")},
        "trigger": {"available_now": True},
    })
    cats = ["books", "garden", "toys"]
    expected: Counter = Counter()
    events = []
    for i in range(3000):
        second = i / 100.0
        events.append(order(i, second, cats[i % 3], 1))
        expected[(int(second) // 10 * 10, cats[i % 3])] += 1
    events.append(order(3000, 3600, "sentinel", 1))  # moves the watermark past every window above
    produce(brokers.bootstrap, src, events)
    q = start(spark, cfg, PipelineStats())
    q.awaitTermination(300)
    assert q.exception() is None

    def key(r: dict) -> tuple[int, str]:
        s = r["window_start"] if isinstance(r["window_start"], datetime) else \
            datetime.fromisoformat(r["window_start"].replace("Z", "+00:00"))
        return int((s.replace(tzinfo=timezone.utc) - BASE).total_seconds()), r["category"]

    rows = [r.asDict() for r in spark.read.parquet(str(tmp_path / "pq")).collect()]
    got = {key(r): r["orders"] for r in rows}
    assert len(rows) == len(got) and got == dict(expected)
    msgs = consume_all(brokers.bootstrap, dst, 2)
    from_topic = {key(json.loads(m.value())): json.loads(m.value())["orders"] for m in msgs}
    assert len(msgs) == len(from_topic) and from_topic == dict(expected)
