"""The PySpark source's throughput on local[2], next to Spark's own Kafka connector.

    python -m benchmarks.spark_source                      # its own broker, 1,000,000 x 100 B
    python -m benchmarks.spark_source --records 200000 --skip-kafka

It produces the records with librdkafka, then times Spark jobs that read the whole topic:
format("rivulet") into the noop sink, into Parquet, and as a streaming AvailableNow query;
the same through Spark's Kafka connector (spark-sql-kafka-0-10_2.13 for the installed Spark,
or the nearest release Maven Central has, fetched from there), which also checks that the Java client
reads Rivulet's log identically (row count and a checksum of every value and offset). Two
reference rows bound what a Python data source can do here: Spark's own overhead (a Python
source yielding ready-made Arrow batches) and the decoder alone on one core.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from rivulet.testing import BrokerProcess


@dataclass
class Row:
    name: str
    rows: int
    seconds: float
    note: str = ""

    @property
    def rps(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0


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


def timed(fn, repeat: int) -> float:
    """Median of ``repeat`` runs (after the caller's warm-up)."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def decoder_alone(bootstrap: str, topic: str, partitions: int) -> Row:
    """Fetch + decode to Arrow of the whole topic on one core, without Spark."""
    from rivulet.spark.source import RangePartition, SourceOptions, read_range, OffsetReader
    opts = SourceOptions(bootstrap=bootstrap, subscribe=[topic], include_headers=True)
    reader = OffsetReader(opts)
    ends = reader.latest()
    reader.close()
    t0 = time.perf_counter()
    n = 0
    for (t, p), end in sorted(ends.items()):
        for rb in read_range(opts, RangePartition(t, p, 0, end)):
            n += rb.num_rows
    return Row("fetch + decode to Arrow, 1 core, no Spark", n, time.perf_counter() - t0)


def spark_ceiling(spark, rows: int, size: int) -> Row:
    """A Python data source that only yields ready-made Arrow batches of the source's schema."""
    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from rivulet.spark import SCHEMA
    from rivulet.spark._records import ARROW_SCHEMA, HEADERS_TYPE, TIMESTAMP_TYPE

    per_task = rows // 4

    class Reader(DataSourceReader):
        def partitions(self):
            return [InputPartition(i) for i in range(4)]

        def read(self, partition):
            n = 65536
            v = pa.array([b"x" * size] * n, pa.binary())
            k = pa.array([b"%08d" % i for i in range(n)], pa.binary())
            o = pa.array(range(n), pa.int64())
            b = pa.RecordBatch.from_arrays(
                [k, v, pa.repeat(pa.scalar("t"), n), pa.repeat(pa.scalar(0, pa.int32()), n), o,
                 o.cast(TIMESTAMP_TYPE), pa.repeat(pa.scalar(0, pa.int32()), n), pa.nulls(n, HEADERS_TYPE)],
                schema=ARROW_SCHEMA)
            left = per_task
            while left > 0:
                yield b.slice(0, min(n, left))
                left -= n

    class Ceiling(DataSource):
        @classmethod
        def name(cls):
            return "bench_ceiling"

        def schema(self):
            return SCHEMA

        def reader(self, schema):
            return Reader()

    spark.dataSource.register(Ceiling)
    job = lambda: spark.read.format("bench_ceiling").load().write.format("noop").mode("overwrite").save()  # noqa
    job()
    return Row("Spark's Python-source overhead alone -> noop", per_task * 4, timed(job, 3),
               "ready-made Arrow batches")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", help="an already running broker (default: start one)")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-kafka", action="store_true", help="do not fetch and run Spark's Kafka connector")
    args = ap.parse_args()

    broker = None
    if args.bootstrap:
        bootstrap = args.bootstrap
    else:
        broker = BrokerProcess().start()
        bootstrap = broker.bootstrap
    tmp = tempfile.mkdtemp(prefix="rivulet-spark-bench-")
    results: list[Row] = []
    try:
        topic = f"spark-bench-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(30)
        secs = produce(bootstrap, topic, args.records, args.size)
        print(f"produced {args.records:,} x {args.size} B into {topic} ({args.partitions} partitions) "
              f"in {secs:.1f} s", flush=True)

        import pyspark
        from rivulet.spark.session import quiet_session
        conf = {"spark.sql.shuffle.partitions": 2, "spark.driver.memory": "2g"}
        kafka_note = ""
        if not args.skip_kafka:
            try:
                jars, version = kafka_connector_jars(pyspark.__version__)
                conf["spark.jars"] = ",".join(jars)
                kafka_note = f"spark-sql-kafka {version}"
                if version != pyspark.__version__:
                    kafka_note += f" (Maven Central has no {pyspark.__version__})"
            except RuntimeError as e:
                print(f"skipping Spark's Kafka connector: {e}", flush=True)
                args.skip_kafka = True
        print(f"starting Spark {pyspark.__version__} local[2]" + (f" with {kafka_note}" if kafka_note else ""),
              flush=True)
        spark = quiet_session("local[2]", "rivulet-spark-bench", conf, log_path=os.path.join(tmp, "spark.log"))
        n = args.records

        def rivulet_df():
            return (spark.read.format("rivulet").option("kafka.bootstrap.servers", bootstrap)
                    .option("subscribe", topic).load())

        assert rivulet_df().count() == n
        rivulet_df().write.format("noop").mode("overwrite").save()  # warm-up
        results.append(Row("rivulet -> noop", n, timed(
            lambda: rivulet_df().write.format("noop").mode("overwrite").save(), args.repeat)))
        pq = os.path.join(tmp, "pq")
        results.append(Row("rivulet -> parquet", n, timed(
            lambda: rivulet_df().write.mode("overwrite").parquet(pq), args.repeat)))

        def stream():
            cp = os.path.join(tmp, f"cp-{uuid.uuid4().hex[:6]}")
            q = (spark.readStream.format("rivulet").option("kafka.bootstrap.servers", bootstrap)
                 .option("subscribe", topic).option("startingOffsets", "earliest").load()
                 .writeStream.format("noop").option("checkpointLocation", cp).trigger(availableNow=True).start())
            q.awaitTermination()
        results.append(Row("rivulet stream (AvailableNow) -> noop", n, timed(stream, args.repeat),
                           "incl. query start and commit"))

        if not args.skip_kafka:
            def kafka_df():
                return (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                        .option("subscribe", topic).load())
            from pyspark.sql import functions as F
            check = [F.count(F.lit(1)),
                     F.sum(F.xxhash64("key", "value", "offset", "partition").bitwiseAND(F.lit(0xFFFFFFFF)))]
            ours = rivulet_df().agg(*check).first()
            theirs = kafka_df().agg(*check).first()
            same = tuple(ours) == tuple(theirs)
            print(f"Spark's Kafka connector reads {theirs[0]:,} rows; checksums "
                  f"{'match' if same else 'DIFFER'} ({ours[1]} vs {theirs[1]})", flush=True)
            kafka_df().write.format("noop").mode("overwrite").save()  # warm-up
            results.append(Row("spark-sql-kafka (Java client) -> noop", n, timed(
                lambda: kafka_df().write.format("noop").mode("overwrite").save(), args.repeat), kafka_note))
            results.append(Row("spark-sql-kafka (Java client) -> parquet", n, timed(
                lambda: kafka_df().write.mode("overwrite").parquet(pq), args.repeat)))

        results.append(spark_ceiling(spark, n, args.size))
        spark.stop()
        results.append(decoder_alone(bootstrap, topic, args.partitions))
    finally:
        if broker is not None:
            broker.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"\n{args.records:,} records of {args.size} B, {args.partitions} partitions, local[2], "
          f"median of {args.repeat}, {os.cpu_count()} cores\n")
    print(f"| {'path':<46} | {'rows':>9} | {'seconds':>7} | {'rows/s':>10} | note")
    print(f"|{'-' * 48}|{'-' * 11}|{'-' * 9}|{'-' * 12}|------")
    for r in results:
        print(f"| {r.name:<46} | {r.rows:>9,} | {r.seconds:>7.2f} | {r.rps:>10,.0f} | {r.note}")


if __name__ == "__main__":
    main()
