"""Spark's own Kafka connector (spark-sql-kafka-0-10) reading and writing a broker, run as a
child process: the connector's jars must be on the JVM's classpath when it starts, which a
test process whose JVM another module already started cannot give it.

    python spark_kafka_probe.py BOOTSTRAP JARS TS_TOPIC TX_TOPIC DL_TOPIC SINK_TOPIC BASE_MS CHECKPOINT_DIR

Prints one JSON object: each scenario's rows as [partition, offset, value, ...] lists, or
"error: <the connector's message>" for one that failed. tests/integration/
test_spark_kafka_connector.py prepares the topics and says what Kafka 4.3.1 answers.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any


def main() -> None:
    bootstrap, jars, ts, tx, dl, sink, base_ms, checkpoint = sys.argv[1:9]
    base = int(base_ms)
    from rivulet.spark.session import quiet_session
    spark = quiet_session("local[2]", "spark-kafka-probe", {"spark.jars": jars}, log_path=f"{checkpoint}/spark.log")
    out: dict[str, Any] = {}

    def run(name: str, job: Callable[[], Any]) -> None:
        try:
            out[name] = job()
        except Exception as e:  # the connector's refusals are results here
            text = str(e)
            # Py4J puts the Java exception's message after its own first line.
            lines = [ln for ln in text.splitlines() if "Exception:" in ln] or text.splitlines()[:1]
            out[name] = "error: " + lines[0].strip(" :")

    def read(**options: object):
        r = spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
        for k, v in options.items():
            r = r.option(k, str(v))
        return r.load()

    def rows(df) -> list[list[Any]]:
        return [[r.partition, r.offset, r.value.decode()]
                for r in df.orderBy("partition", "offset").collect()]

    committed = {"kafka.isolation.level": "read_committed"}
    # startingOffsetsByTimestamp: partition 1's timestamp is past its last record.
    by_ts = json.dumps({ts: {"0": base + 5000, "1": base + 10**8}})
    run("by_timestamp", lambda: rows(read(subscribe=ts, startingOffsetsByTimestamp=by_ts)))
    run("by_timestamp_latest", lambda: rows(read(subscribe=ts, startingOffsetsByTimestamp=by_ts,
                                                 startingOffsetsByTimestampStrategy="latest")))
    run("starting_timestamp", lambda: rows(read(subscribe=ts, startingTimestamp=base + 7500,
                                                endingOffsetsByTimestamp=json.dumps({ts: {"0": base + 9000,
                                                                                         "1": base + 10**8}}))))

    def headers() -> list[list[Any]]:
        df = read(subscribe=ts, includeHeaders="true")
        return [[r.partition, r.offset, r.key and r.key.decode(),
                 [[h.key, h.value and bytes(h.value).decode()] for h in r.headers or []]]
                for r in df.where("offset < 2").orderBy("partition", "offset").collect()]
    run("headers", headers)

    def min_partitions() -> list[int]:
        df = read(subscribe=ts, minPartitions=4)
        return [df.rdd.getNumPartitions(), df.count()]
    run("min_partitions", min_partitions)

    run("tx_committed", lambda: rows(read(subscribe=tx, **committed)))
    run("tx_uncommitted", lambda: rows(read(subscribe=tx)))
    # A range that starts on a commit marker, spans an aborted transaction and ends inside a
    # committed one.
    run("tx_committed_range", lambda: rows(read(subscribe=tx, **committed,
                                                startingOffsets=json.dumps({tx: {"0": 4}}),
                                                endingOffsets=json.dumps({tx: {"0": 9}}))))

    def tx_stream() -> list[Any]:
        df = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", tx).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "4").option("kafka.isolation.level", "read_committed").load())
        q = (df.selectExpr("partition", "offset", "value").writeStream.format("parquet")
             .option("path", f"{checkpoint}/tx-out").option("checkpointLocation", f"{checkpoint}/tx-cp")
             .trigger(availableNow=True).start())
        q.awaitTermination(120)
        if q.exception() is not None:
            raise q.exception()
        return [rows(spark.read.parquet(f"{checkpoint}/tx-out")), [p["numInputRows"] for p in q.recentProgress]]
    run("tx_stream", tx_stream)

    below_start = json.dumps({dl: {"0": 20}})
    run("data_loss_fail", lambda: rows(read(subscribe=dl, startingOffsets=below_start)))
    run("data_loss_skip", lambda: rows(read(subscribe=dl, startingOffsets=below_start, failOnDataLoss="false")))

    def write() -> None:
        from pyspark.sql import Row
        data = [Row(topic=sink, partition=i % 2, key=None if i % 2 else f"k{i}".encode(), value=f"v{i}".encode(),
                    headers=[Row(key="h", value=f"x{i}".encode()), Row(key="empty", value=None)])
                for i in range(4)]
        (spark.createDataFrame(data, "topic string, partition int, key binary, value binary, "
                                     "headers array<struct<key:string,value:binary>>")
         .write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("kafka.acks", "all").save())
    run("sink", write)
    spark.stop()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
