"""The driver of the fault tests (run as a child process, so that it can be killed with
SIGKILL and started again from its checkpoints): two streaming queries on one Rivulet source
frame, on the standalone cluster with speculation on, one into a topic through the
transactional sink, one into Parquet, both Trigger.AvailableNow.

Every task leaves an empty file ``<marks>/<query>-<batch>-<partition>-<attempt>-<unique>``, so the
test can tell retries and speculative attempts apart. The first attempt of partition 1's task
in every third batch is slow, for speculation to start a copy of it.

    python spark_fault_driver.py MASTER BOOTSTRAP SOURCE_TOPIC OUTPUT_TOPIC PARQUET_DIR CHECKPOINT_DIR MARKS_DIR PARTITIONS

PARTITIONS (the source topic's) is the source's minPartitions: a task per partition, which a
batch this small would not otherwise get (its ranges would share one task), so that partition
1's task exists for speculation to copy.
"""

from __future__ import annotations

import sys
import time

PER_ROW_S = 0.002
SLOW_FIRST_ATTEMPT_S = 2.5


def pace(marks: str):
    """A pass-through column function that paces the tasks and marks their attempts."""
    import os
    import time
    import uuid

    def run(offset: int) -> int:
        from pyspark import TaskContext
        ctx = TaskContext.get()
        batch = int(ctx.getLocalProperty("streaming.sql.batchId") or -1)
        query = (ctx.getLocalProperty("sql.streaming.queryId") or "none")[:8]
        key = (query, batch, ctx.partitionId(), ctx.attemptNumber())
        if getattr(run, "marked", None) != key:
            open(os.path.join(marks, "-".join(map(str, key)) + f"-{uuid.uuid4().hex[:6]}"), "w").close()
            run.marked = key  # type: ignore[attr-defined]
            if ctx.partitionId() == 1 and ctx.attemptNumber() == 0 and batch % 3 == 2:
                time.sleep(SLOW_FIRST_ATTEMPT_S)
        time.sleep(PER_ROW_S)
        return offset
    return run


def main() -> None:
    master, bootstrap, src, dst, out, cp, marks, partitions = sys.argv[1:9]
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (SparkSession.builder.master(master).appName("rivulet-faults")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.executor.memory", "768m").config("spark.sql.shuffle.partitions", "2")
             .config("spark.speculation", "true").config("spark.speculation.interval", "100ms")
             .config("spark.speculation.quantile", "0.5").config("spark.speculation.multiplier", "2")
             .config("spark.task.maxFailures", "8")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    df = (spark.readStream.format("rivulet").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", src).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "300")
          .option("minPartitions", partitions).load())
    df = df.where(F.udf(pace(marks), "long", useArrow=False)("offset") >= 0)  # a filter: both queries keep it
    to_topic = (df.select("key", "value").writeStream.format("rivulet").queryName("to_topic")
                .option("kafka.bootstrap.servers", bootstrap).option("topic", dst)
                .option("checkpointLocation", f"{cp}/topic").trigger(availableNow=True).start())
    # The second query starts once the first has its sources: both start a Python source runner,
    # which fills an environment map Spark shares between them without a lock (a suspect, never
    # reproduced, of one CI run's "Task not serializable").
    deadline = time.monotonic() + 60
    while to_topic.isActive and to_topic.status["message"] == "Initializing sources" and time.monotonic() < deadline:
        time.sleep(0.05)
    to_parquet = (df.select("topic", "partition", "offset", "value").writeStream.format("parquet")
                  .queryName("to_parquet").option("path", out).option("checkpointLocation", f"{cp}/parquet")
                  .trigger(availableNow=True).start())
    for q in (to_topic, to_parquet):
        q.awaitTermination()
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
