"""The source, the sink and the pipeline on a Spark standalone cluster (a master and two
1-core workers on two loopback addresses, so every task runs in an executor JVM apart from the
driver, with its own Python workers) against a 3-broker Rivulet cluster (replication factor 3).

Faults first (the test runs its own driver process, which needs the cluster's cores: the
module's in-process session starts only after it): under streaming queries writing to a topic
(the transactional sink) and to Parquet, with spark.speculation=true, an executor killed with
SIGKILL mid-batch, the leader of a source partition killed, and the driver killed with SIGKILL
and restarted from the checkpoints. The outputs are checked after each fault: after the
executor's and the leader's deaths, what both outputs have committed so far holds each input
once (Parquet without gaps); after the driver's restart, Parquet holds each input offset once
with no gap, and the topic read read_committed holds each input record once."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pq = pytest.importorskip("pyarrow.parquet")

from test_spark import (consume_all, mutual_tls_round_trip, produce, run_available_now,  # noqa: E402
                        sasl_ssl_round_trip, source, topic_name)
from test_spark_pipeline import BASE, SCHEMA, order  # noqa: E402

from spark_cluster import spark_env  # noqa: E402

from tests.cluster import three_brokers  # noqa: E402
from tests.integration.test_replication_faults import BROKER_CONFIG, create_topic  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.cluster]


@pytest.fixture(scope="module")
def brokers(module_zk_connect):
    with three_brokers(module_zk_connect, **BROKER_CONFIG, **{"min.insync.replicas": "2"}) as c:
        yield c


@pytest.fixture(autouse=True)
def _all_brokers_up(brokers):
    """The fault test kills a broker: a failure before it restarts one must not fail the rest."""
    brokers.heal()
    yield


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


DRIVER = Path(__file__).resolve().parents[1] / "spark_fault_driver.py"
PARTITIONS, PER_PARTITION = 3, 900  # 300 offsets a batch: 9 batches


def batches(cp: Path) -> tuple[set[int], set[int]]:
    """The batch ids a query's checkpoint has planned (offset log) and finished (commit log)."""
    def ids(d: Path) -> set[int]:
        return {int(p.name) for p in d.glob("[0-9]*") if p.name.isdigit()} if d.exists() else set()
    return ids(cp / "offsets"), ids(cp / "commits")


def committed_parquet_files(out: Path) -> list[str]:
    """The files Spark's file sink committed, from its log (_spark_metadata: a compacted file
    every 10 batches and one file per batch after it); files of failed attempts are not in it."""
    log = out / "_spark_metadata"
    entries = sorted((p for p in log.iterdir() if re.fullmatch(r"\d+(\.compact)?", p.name)),
                     key=lambda p: int(p.name.split(".")[0]))
    compacts = [p for p in entries if p.name.endswith(".compact")]
    start = int(compacts[-1].name.split(".")[0]) if compacts else -1
    files: list[str] = []
    for p in entries:
        n = int(p.name.split(".")[0])
        if n > start or p == (compacts[-1] if compacts else None):
            for line in p.read_text().splitlines()[1:]:  # the first line is the log version
                e = json.loads(line)
                if e["action"] == "add":
                    files.append(e["path"].removeprefix("file:"))
                else:
                    files.remove(e["path"].removeprefix("file:"))
    return files


def parquet_rows(out: Path) -> list[tuple[str, int, int]]:
    """(topic, partition, offset) of every row in the Parquet files the sink has committed."""
    files = committed_parquet_files(out) if (out / "_spark_metadata").exists() else []
    if not files:
        return []
    table = pq.ParquetDataset(files).read()
    return list(zip(table.column("topic").to_pylist(), table.column("partition").to_pylist(),
                    table.column("offset").to_pylist()))


def errors_and_tail(log: str) -> str:
    """A failed driver's log for an assertion message: its error lines (log4j ERRORs, each
    exception and every "Caused by" of its chain, the serialization stack Spark adds to a
    NotSerializableException), then its last 3000 characters. The end alone can miss the root
    cause: a deep Java stack puts it thousands of characters above the end."""
    wanted = re.compile(r" ERROR |^\S+(Exception|Error)\b|^Caused by: |Serialization stack:|^\t- ")
    errors = [line for line in log.splitlines() if wanted.search(line)]
    return "\n".join(dict.fromkeys(errors)) + "\n--- the log's end:\n" + log[-3000:]


def exactly_once_so_far(brokers, out: Path, dst: str) -> tuple[int, int]:
    """Check both outputs as they stand between faults: Parquet holds each offset once and, per
    partition, every offset below the highest one (committed batches are whole); the topic, read
    read_committed, holds no record twice. Returns (Parquet rows, committed topic records)."""
    rows = parquet_rows(out)
    assert len(rows) == len(set(rows)), Counter(r for r in rows if rows.count(r) > 1)
    for p in range(PARTITIONS):
        offsets = sorted(o for _, q, o in rows if q == p)
        assert offsets == list(range(len(offsets))), f"partition {p} has gaps"
    committed = Counter(m.value() for m in consume_all(brokers.bootstrap, dst, 2))
    assert not committed or max(committed.values()) == 1, [v for v, n in committed.items() if n > 1]
    return len(rows), sum(committed.values())


@pytest.mark.timeout(900)  # Spark JVMs and restarts: far slower on a busy machine
def test_exactly_once_through_executor_leader_and_driver_kills(brokers, spark_standalone, tmp_path):
    src = topic_name("f-in")
    dst = topic_name("f-out")
    create_topic(brokers, src, PARTITIONS)
    create_topic(brokers, dst, 2)
    produce(brokers.bootstrap, src, [{"value": f"{p}-{i}".encode(), "partition": p}
                                     for p in range(PARTITIONS) for i in range(PER_PARTITION)])
    out, cp, marks = tmp_path / "out", tmp_path / "cp", tmp_path / "marks"
    marks.mkdir()
    args = [sys.executable, str(DRIVER), spark_standalone.master_url, brokers.bootstrap, src, dst, str(out),
            str(cp), str(marks), str(PARTITIONS)]
    log_path = tmp_path / "driver.log"
    log = open(log_path, "ab")
    faults: dict[str, int] = {}  # fault -> the topic query's batch under way when it struck
    after: dict[str, tuple[int, int]] = {}  # fault -> (Parquet rows, topic records) checked after it

    def tail() -> str:
        return errors_and_tail(log_path.read_text(errors="replace"))

    child = subprocess.Popen(args, env=spark_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and child.poll() is None and "driver" not in faults:
            started, done = batches(cp / "topic")
            running = started - done
            if not done or not running:
                time.sleep(0.05)
                continue
            batch = max(running)
            if "executor" not in faults:
                time.sleep(0.3)  # into the batch: its tasks are reading and writing
                os.kill(spark_standalone.executor_pids()[0], signal.SIGKILL)
                faults["executor"] = batch
            elif "leader" not in faults and batch >= faults["executor"] + 2:
                after["executor"] = exactly_once_so_far(brokers, out, dst)
                leader = brokers.partition_state(src, 0)["leader"]
                brokers.brokers[leader].kill()
                faults["leader"], faults["leader_id"] = batch, leader
            elif "leader" in faults and batch >= faults["leader"] + 2:
                if "leader" not in after:
                    after["leader"] = exactly_once_so_far(brokers, out, dst)
                    continue  # the check took time: kill the driver inside a batch still running
                time.sleep(0.3)
                if (cp / "topic" / "commits" / str(batch)).exists():
                    continue  # it finished meanwhile: kill the driver inside the next batch
                os.killpg(child.pid, signal.SIGKILL)
                faults["driver"] = batch
            time.sleep(0.05)
    finally:
        if child.poll() is None and "driver" not in faults:
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    assert set(faults) == {"executor", "leader", "leader_id", "driver"}, f"faults {faults}; the driver's log:\n{tail()}"
    assert not (cp / "topic" / "commits" / str(faults["driver"])).exists(), "the batch finished before the kill"

    # Restarted from the checkpoints, on a new application; the killed broker rejoins meanwhile.
    child = subprocess.Popen(args, env=spark_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        brokers.restart(faults["leader_id"])
        rc = child.wait(300)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    log.close()
    assert rc == 0 and "DONE" in log_path.read_text(errors="replace"), tail()

    rows = parquet_rows(out)
    assert len(rows) == len(set(rows)) == PARTITIONS * PER_PARTITION
    for p in range(PARTITIONS):
        assert sorted(o for _, q, o in rows if q == p) == list(range(PER_PARTITION)), f"partition {p}"

    committed = consume_all(brokers.bootstrap, dst, 2)
    everything = consume_all(brokers.bootstrap, dst, 2, isolation="read_uncommitted")
    expected = Counter(f"{p}-{i}".encode() for p in range(PARTITIONS) for i in range(PER_PARTITION))
    assert Counter(m.value() for m in committed) == expected
    # The source rode out the leader's death (it keeps fetching until a new leader is elected)
    # without failing a task.
    assert "ConnectionError: fetching" not in log_path.read_text(errors="replace")

    # What the faults made Spark do, for the record: later attempts of a task (retries after
    # the executor's death, speculative copies), tasks of the replayed batch, aborted rows.
    names = [f.name.split("-") for f in marks.iterdir()]
    later = sum(1 for n in names if int(n[3]) > 0)
    firsts = Counter(tuple(n[:3]) for n in names if n[3] == "0")
    print(f"\nfaults in topic batches {faults} (leader_id: the broker killed); checked exactly once after the "
          f"executor's and the leader's deaths at (parquet rows, topic records) {after}; parquet rows {len(rows)}, "
          f"distinct {len(set(rows))}; topic read_committed {len(committed)}, read_uncommitted {len(everything)}; "
          f"task attempts after the first {later}; tasks run again by the restarted driver "
          f"{sum(1 for n in firsts.values() if n > 1)}; tasks in all {len(firsts)}")


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


def test_security_options_reach_the_executors(spark, tls_certs, tmp_path):
    """kafka.security.protocol, kafka.ssl.* and kafka.sasl.* pass from the query to the
    executors, whose Python workers open the TLS and SASL_SSL connections themselves."""
    mutual_tls_round_trip(spark, tls_certs)
    sasl_ssl_round_trip(spark, tls_certs, tmp_path)
