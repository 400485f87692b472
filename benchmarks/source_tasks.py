"""What a small micro-batch of the source costs, by how many Spark tasks read it.

    python -m benchmarks.source_tasks --batches 12 --batch 3000 --repeat 3

The demo's JSON orders on a 4-partition topic, read by a streaming query (AvailableNow, in
micro-batches of ``--batch`` offsets, as the latency pipeline's at 2,000 orders/s) and parsed
into columns, into ``noop``: on Rivulet's source as it plans a small batch (its ranges in
fewer tasks), with ``minPartitions`` set to the partition count (a task per partition), with
``readOnDriver`` (the driver's planner process reads the batch, no Python task), and on
spark-sql-kafka (``from_json``). Variants alternate; per variant the median ``addBatch`` and
``triggerExecution`` of every micro-batch (Spark's ``durationMs``), on ``local[2]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import uuid

from benchmarks.pipeline_latency import SCHEMA
from benchmarks.spark_source import kafka_connector_jars, load_average, produce_orders
from rivulet.testing import BrokerProcess


def run(spark, bootstrap: str, topic: str, variant: str, batch: int, partitions: int, tmp: str) -> list[dict]:
    from pyspark.sql import functions as F
    fmt = "kafka" if variant == "spark-sql-kafka" else "rivulet"
    r = (spark.readStream.format(fmt).option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
         .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", batch))
    if variant == "rivulet, a task per partition":
        r = r.option("minPartitions", partitions)
    if variant == "rivulet, readOnDriver":
        r = r.option("readOnDriver", "true")
    if fmt == "rivulet":
        df = r.option("valueFormat", "json").option("valueSchema", SCHEMA).load().select("value.*")
    else:
        df = r.load().select(F.from_json(F.col("value").cast("string"), SCHEMA).alias("e")).select("e.*")
    q = (df.writeStream.format("noop").option("checkpointLocation", os.path.join(tmp, f"cp-{uuid.uuid4().hex[:6]}"))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    if q.exception() is not None:
        raise RuntimeError(f"{variant}: {q.exception()}")
    return [p["durationMs"] for p in q.recentProgress if p["numInputRows"]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, default=12, help="micro-batches per run")
    ap.add_argument("--batch", type=int, default=3000, help="offsets per micro-batch")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3, help="rounds, variants alternated")
    ap.add_argument("--skip-kafka", action="store_true")
    args = ap.parse_args()

    import pyspark

    from rivulet.spark.session import quiet_session
    broker = BrokerProcess({}).start()
    tmp = tempfile.mkdtemp(prefix="rivulet-source-tasks-")
    try:
        from confluent_kafka.admin import AdminClient, NewTopic
        topic = "orders"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(30)
        produce_orders(broker.bootstrap, topic, args.batches * args.batch)
        conf: dict[str, object] = {"spark.sql.shuffle.partitions": 2}
        variants = ["rivulet", "rivulet, a task per partition", "rivulet, readOnDriver"]
        if not args.skip_kafka:
            conf["spark.jars"] = ",".join(kafka_connector_jars(pyspark.__version__)[0])
            variants.append("spark-sql-kafka")
        spark = quiet_session("local[2]", "rivulet-source-tasks", conf, log_path=os.path.join(tmp, "spark.log"))
        for v in variants:  # warm-up: Python workers, imports, the JVM's compilation
            run(spark, broker.bootstrap, topic, v, args.batch, args.partitions, tmp)
        got: dict[str, list[dict]] = {v: [] for v in variants}
        loads: list[float] = []
        for _ in range(args.repeat):
            for v in variants:
                got[v] += run(spark, broker.bootstrap, topic, v, args.batch, args.partitions, tmp)
                loads.append(load_average())
        spark.stop()
        print(f"PySpark {pyspark.__version__}; {args.batches} micro-batches of {args.batch:,} orders over "
              f"{args.partitions} partitions a run, {args.repeat} rounds; load {min(loads):.1f}-{max(loads):.1f}")
        # readOnDriver reads in latestOffset (the planner process), not in addBatch's task
        print("| source | micro-batches | addBatch median / p90 ms | latestOffset median ms | triggerExecution median ms |"
              "\n|---|---:|---|---:|---:|")
        for v, ds in got.items():
            add = sorted(d["addBatch"] for d in ds)
            print(f"| {v} | {len(ds)} | {statistics.median(add):.0f} / {add[int(0.9 * (len(add) - 1))]:.0f} "
                  f"| {statistics.median(d.get('latestOffset', 0) for d in ds):.0f} "
                  f"| {statistics.median(d['triggerExecution'] for d in ds):.0f} |")
    finally:
        broker.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
