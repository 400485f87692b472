"""Spark's own Kafka connector (spark-sql-kafka-0-10, from Maven Central as
benchmarks/spark_source.py fetches it) at its edges against a Rivulet broker: the answers
below are what the same probe got from Kafka 4.3.1 (docs/compatibility.md)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from test_spark import consume_all, create_topic, produce, topic_name  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.spark]

PROBE = Path(__file__).resolve().parents[1] / "spark_kafka_probe.py"
# An hour ago, to the second: within the default retention (Kafka and Rivulet delete records
# older than 7 days 30 s after start, log.initial.task.delay.ms).
BASE_MS = (int(time.time()) - 3600) * 1000


def prepare_topics(bootstrap: str) -> dict[str, str]:
    """The probe's topics: ``ts`` 2 partitions of 10 records a second apart (keys on even
    offsets, headers on every third), ``tx`` plain and transactional records with an aborted
    transaction between two committed ones, ``dl`` 40 records of which DeleteRecords removed
    the first 30, and an empty ``sink`` of 2 partitions."""
    from confluent_kafka import Producer

    from rivulet import TopicPartition
    from rivulet.admin import AdminClient

    names = {k: create_topic(bootstrap, topic_name(f"sk-{k}"), n)
             for k, n in (("ts", 2), ("tx", 1), ("dl", 1), ("sink", 2))}
    ts = []
    for p in range(2):
        for i in range(10):
            r: dict = {"value": f"{p}-{i}".encode(), "partition": p, "timestamp": BASE_MS + i * 1000}
            if i % 2 == 0:
                r["key"] = f"k{i}".encode()
            if i % 3 == 0:
                r["headers"] = [("h", f"v{i}".encode()), ("none", None), ("h", b"again")]
            ts.append(r)
    produce(bootstrap, names["ts"], ts)

    # Offsets: n0 n1 | c1-0 c1-1 COMMIT(4) | a1-0 a1-1 ABORT(7) | c2-0 c2-1 COMMIT(10) | n2
    tx = names["tx"]
    produce(bootstrap, tx, [{"value": b"n0"}, {"value": b"n1"}])
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": topic_name("sk-tid")})
    p.init_transactions(30)
    for label, commit in (("c1", True), ("a1", False), ("c2", True)):
        p.begin_transaction()
        for i in range(2):
            p.produce(tx, f"{label}-{i}".encode())
        p.flush(30)
        (p.commit_transaction if commit else p.abort_transaction)(30)
    produce(bootstrap, tx, [{"value": b"n2"}])

    produce(bootstrap, names["dl"], [{"value": str(i).encode()} for i in range(40)])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        for f in admin.delete_records([TopicPartition(names["dl"], 0, 30)]).values():
            f.result(30)
    finally:
        admin.close()
    return names


def run_probe(bootstrap: str, names: dict[str, str], tmp: Path) -> dict:
    import pyspark

    from benchmarks.spark_source import kafka_connector_jars
    from rivulet.spark.session import worker_pythonpath
    worker_pythonpath()
    jars, _ = kafka_connector_jars(pyspark.__version__)  # cached after the first fetch
    proc = subprocess.run([sys.executable, str(PROBE), bootstrap, ",".join(jars), names["ts"], names["tx"],
                           names["dl"], names["sink"], str(BASE_MS), str(tmp)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def expected(names: dict[str, str]) -> dict:
    """What Kafka 4.3.1 answers the probe."""
    ts = names["ts"]
    committed = [[0, 0, "n0"], [0, 1, "n1"], [0, 2, "c1-0"], [0, 3, "c1-1"], [0, 8, "c2-0"], [0, 9, "c2-1"],
                 [0, 11, "n2"]]
    no_headers: list = []
    headers = [["h", "v0"], ["none", None], ["h", "again"]]
    return {
        # The default strategy (error) refuses a timestamp no record reaches; `latest` starts
        # that partition at its end.
        "by_timestamp": f"error: No offset matched from request of topic-partition {ts}-1 and timestamp "
                        f"{BASE_MS + 10**8}.",
        "by_timestamp_latest": [[0, o, f"0-{o}"] for o in range(5, 10)],
        "starting_timestamp": [[0, 8, "0-8"]] + [[1, o, f"1-{o}"] for o in range(8, 10)],
        "headers": [[0, 0, "k0", headers], [0, 1, None, no_headers], [1, 0, "k0", headers], [1, 1, None, no_headers]],
        "min_partitions": [4, 20],
        # Control records and the aborted transaction's records leave gaps in the offsets,
        # never an error, batch or streaming.
        "tx_committed": committed,
        "tx_uncommitted": [[0, o, v] for o, v in enumerate(["n0", "n1", "c1-0", "c1-1"])] +
                          [[0, 5, "a1-0"], [0, 6, "a1-1"], [0, 8, "c2-0"], [0, 9, "c2-1"], [0, 11, "n2"]],
        "tx_committed_range": [[0, 8, "c2-0"]],
        # maxOffsetsPerTrigger counts offsets, markers and aborted records too: [0, 4) [4, 8) [8, 12).
        "tx_stream": [committed, [4, 0, 3]],
        "data_loss_fail": "error: org.apache.spark.sql.kafka010.KafkaIllegalStateException: Some data may have "
                          "been lost because they are not available in Kafka any more;",
        "data_loss_skip": [[0, o, str(o)] for o in range(30, 40)],
        "sink": None,
    }


def test_spark_kafka_connector_edges(broker, tmp_path):
    names = prepare_topics(broker.bootstrap)
    got = run_probe(broker.bootstrap, names, tmp_path)
    want = expected(names)
    for key in want:
        assert got.get(key) == want[key], (key, got.get(key))
    # The sink: the partition column, headers (a null header value too) and a null key. Two
    # tasks write each partition, in either order.
    written = sorted((m.partition(), m.value(), m.key(), m.headers())
                     for m in consume_all(broker.bootstrap, names["sink"], 2))
    assert written == [(0, b"v0", b"k0", [("h", b"x0"), ("empty", None)]),
                       (0, b"v2", b"k2", [("h", b"x2"), ("empty", None)]),
                       (1, b"v1", None, [("h", b"x1"), ("empty", None)]),
                       (1, b"v3", None, [("h", b"x3"), ("empty", None)])]
