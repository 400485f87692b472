"""The PySpark source and sink against a real broker, on local Spark (local[2], one session
for the module): schema and values, offsets options, admission control, data loss, the
informational commits, and the sink's no-duplicates guarantee on replay."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

pytestmark = [pytest.mark.integration, pytest.mark.spark]


# ---------------------------------------------------------------- shared helpers (also used by test_spark_pipeline)

def topic_name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> str:
    from rivulet.admin import AdminClient, NewTopic
    a = AdminClient({"bootstrap.servers": bootstrap})
    try:
        a.create_topics([NewTopic(name, partitions)])[name].result(30)
    finally:
        a.close()
    return name


def produce(bootstrap: str, topic: str, records: list[dict], **conf) -> None:
    """Produce with librdkafka (independent of Rivulet's client). Each record: value, and
    optionally key, partition, headers, timestamp."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    for r in records:
        kw = {k: r[k] for k in ("key", "headers", "timestamp") if k in r}
        if "partition" in r:
            kw["partition"] = r["partition"]
        while True:
            try:
                p.produce(topic, r.get("value"), **kw)
                break
            except BufferError:
                p.poll(0.1)
    assert p.flush(60) == 0


def consume_all(bootstrap: str, topic: str, partitions: int, isolation: str = "read_committed") -> list:
    """Every message up to each partition's end, with librdkafka."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check-" + uuid.uuid4().hex[:6],
                  "isolation.level": isolation, "enable.partition.eof": True, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out, eof = [], set()
    deadline = time.monotonic() + 60
    while len(eof) < partitions and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error():
            if m.error().code() == -191:
                eof.add(m.partition())
                continue
            raise AssertionError(m.error())
        out.append(m)
    c.close()
    assert len(eof) == partitions
    return out


def spark_session(tmp_root: Path):
    from rivulet.spark.session import quiet_session
    return quiet_session("local[2]", "rivulet-tests", {"spark.sql.shuffle.partitions": 2,
                                                       "spark.default.parallelism": 2},
                         log_path=tmp_root / "spark.log")


def source(spark, bootstrap: str, topic: str, streaming: bool = True, **options):
    r = spark.readStream if streaming else spark.read
    r = r.format("rivulet").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    for k, v in options.items():
        r = r.option(k, str(v))
    return r.load()


def run_available_now(df, checkpoint: Path, sink: str = "parquet", path: Path | None = None, **options):
    w = df.writeStream.format(sink).option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
    if path is not None:
        w = w.option("path", str(path))
    for k, v in options.items():
        w = w.option(k, str(v))
    q = w.start()
    q.awaitTermination(300)
    assert not q.isActive, "the query did not finish"
    if q.exception() is not None:
        raise q.exception()
    return q


@pytest.fixture(scope="module")
def spark_root(tmp_path_factory):
    """The module's Spark directory; its spark.log gets Spark's and its Python workers' stderr."""
    return tmp_path_factory.mktemp("spark")


@pytest.fixture(scope="module")
def spark(spark_root):
    s = spark_session(spark_root)
    yield s
    s.stop()


# ---------------------------------------------------------------- batch reads


def test_batch_read_matches_what_was_produced(broker, spark):
    t = create_topic(broker.bootstrap, topic_name(), 2)
    recs = []
    for i in range(600):
        r = {"value": None if i % 50 == 7 else f"value-{i}".encode() * (1 + i % 3), "partition": i % 2,
             "timestamp": 1_700_000_000_000 + i}
        if i % 3:
            r["key"] = f"k{i}".encode()
        elif i % 6 == 3:
            r["key"] = b""  # empty, not null
        if i % 10 == 0:
            r["headers"] = [("h1", f"x{i}".encode()), ("h2", None)]
        recs.append(r)
    produce(broker.bootstrap, t, recs)
    # Spark's Kafka source: no headers column unless includeHeaders=true.
    assert source(spark, broker.bootstrap, t, streaming=False).columns == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    df = source(spark, broker.bootstrap, t, streaming=False, includeHeaders="true")
    assert [f.name for f in df.schema.fields] == ["key", "value", "topic", "partition", "offset", "timestamp",
                                                  "timestampType", "headers"]
    rows = df.orderBy("partition", "offset").collect()
    assert len(rows) == 600
    expected = sorted(recs, key=lambda r: r["partition"])
    for p in (0, 1):
        mine = [r for r in rows if r.partition == p]
        theirs = [r for r in expected if r["partition"] == p]
        assert [r.offset for r in mine] == list(range(len(theirs)))
        for got, want in zip(mine, theirs):
            assert got.topic == t
            assert got.key == want.get("key")
            assert got.value == want["value"]
            assert int(got.timestamp.timestamp() * 1000) == want["timestamp"]
            assert got.timestampType == 0
            if "headers" in want:
                assert [(h.key, h.value) for h in got.headers] == want["headers"]
            else:
                assert got.headers is None
    without = source(spark, broker.bootstrap, t, streaming=False, includeHeaders="false")
    assert "headers" not in without.columns and without.count() == 600


def test_a_small_batch_is_one_task_unless_min_partitions_asks_for_more(broker, spark):
    """A Python source's task costs a fixed hand-over between the JVM and a Python worker: the
    ranges of a small batch share one task, read one after another; minPartitions keeps a task
    per partition. Either way every record is read once."""
    t = create_topic(broker.bootstrap, topic_name(), 4)
    produce(broker.bootstrap, t, [{"value": f"v{i}".encode(), "partition": i % 4} for i in range(400)])
    expected = sorted((p, o, f"v{4 * o + p}".encode()) for p in range(4) for o in range(100))
    for options, tasks in (({}, 1), ({"minPartitions": 4}, 4)):
        df = source(spark, broker.bootstrap, t, streaming=False, **options)
        assert df.rdd.getNumPartitions() == tasks
        assert sorted((r.partition, r.offset, r.value) for r in df.collect()) == expected


def test_compressed_batches_and_log_append_time(broker, spark):
    t = create_topic(broker.bootstrap, topic_name(), 1)
    from rivulet.admin import AdminClient, ConfigResource
    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    a.alter_configs([ConfigResource("topic", t, {"message.timestamp.type": "LogAppendTime"})])[
        ConfigResource("topic", t)].result(30)
    a.close()
    for codec in ("gzip", "lz4", "zstd", "snappy"):
        produce(broker.bootstrap, t, [{"value": f"{codec}-{i}".encode(), "key": b"k"} for i in range(300)],
                **{"compression.type": codec})
    rows = source(spark, broker.bootstrap, t, streaming=False).orderBy("offset").collect()
    assert [r.value for r in rows] == [f"{c}-{i}".encode() for c in ("gzip", "lz4", "zstd", "snappy")
                                       for i in range(300)]
    assert {r.timestampType for r in rows} == {1}


def test_starting_and_ending_offsets_json(broker, spark, tmp_path):
    t = create_topic(broker.bootstrap, topic_name(), 2)
    produce(broker.bootstrap, t, [{"value": f"{p}:{i}".encode(), "partition": p} for p in (0, 1) for i in range(100)])
    start = json.dumps({t: {"0": 10, "1": -2}})
    end = json.dumps({t: {"0": 20, "1": -1}})
    got = source(spark, broker.bootstrap, t, streaming=False, startingOffsets=start, endingOffsets=end) \
        .select("partition", "offset").collect()
    assert sorted((r.partition, r.offset) for r in got) == \
        [(0, o) for o in range(10, 20)] + [(1, o) for o in range(100)]

    # Streaming: the JSON start is honoured; -1 means latest.
    q = run_available_now(source(spark, broker.bootstrap, t, startingOffsets=json.dumps({t: {"0": 95, "1": -1}})),
                          tmp_path / "cp", path=tmp_path / "out")
    got = spark.read.parquet(str(tmp_path / "out")).select("partition", "offset").collect()
    assert sorted((r.partition, r.offset) for r in got) == [(0, o) for o in range(95, 100)]
    assert q.lastProgress is not None

    with pytest.raises(Exception, match="every partition"):
        source(spark, broker.bootstrap, t, streaming=False, startingOffsets=json.dumps({t: {"0": 0}})).count()
    with pytest.raises(Exception, match="not valid for batch"):
        source(spark, broker.bootstrap, t, streaming=False, startingOffsets="latest").count()


def test_offsets_by_timestamp(broker, spark):
    """startingTimestamp / endingOffsetsByTimestamp: the first offset at or after the time, as
    ListOffsets finds it; a start time past every record fails unless the strategy is latest."""
    t = create_topic(broker.bootstrap, topic_name("ts"), 2)
    t0 = 1_700_000_000_000
    produce(broker.bootstrap, t, [{"value": b"v", "partition": p, "timestamp": t0 + i * 1000}
                                  for p in (0, 1) for i in range(50)])
    got = source(spark, broker.bootstrap, t, streaming=False, startingTimestamp=t0 + 10_000,
                 endingOffsetsByTimestamp=json.dumps({t: {"0": t0 + 20_000, "1": t0 + 15_500}})) \
        .select("partition", "offset").collect()
    assert sorted((r.partition, r.offset) for r in got) == \
        [(0, o) for o in range(10, 20)] + [(1, o) for o in range(10, 16)]
    # startingTimestamp wins over startingOffsets, as in Spark.
    assert source(spark, broker.bootstrap, t, streaming=False, startingOffsets="earliest",
                  startingTimestamp=t0 + 45_000).count() == 10
    with pytest.raises(Exception, match="No offset matched the timestamp"):
        source(spark, broker.bootstrap, t, streaming=False, startingTimestamp=t0 + 10**9).count()
    assert source(spark, broker.bootstrap, t, streaming=False, startingTimestamp=t0 + 10**9,
                  startingOffsetsByTimestampStrategy="latest").count() == 0
    with pytest.raises(Exception, match="every partition"):
        source(spark, broker.bootstrap, t, streaming=False,
               startingOffsetsByTimestamp=json.dumps({t: {"0": t0}})).count()


def test_min_offsets_per_trigger_holds_batches_back_until_max_trigger_delay(broker):
    """The reader the driver uses, without Spark: fewer than minOffsetsPerTrigger waiting
    offsets give no batch (end == start) until maxTriggerDelay has passed."""
    from pyspark.sql.streaming.datasource import ReadMinRows
    from rivulet.spark.source import RivuletStreamReader, SourceOptions
    t = create_topic(broker.bootstrap, topic_name("min"), 2)
    produce(broker.bootstrap, t, [{"value": b"v", "partition": i % 2} for i in range(30)])
    opts = SourceOptions.parse({"kafka.bootstrap.servers": broker.bootstrap, "subscribe": t,
                                "startingOffsets": "earliest", "minOffsetsPerTrigger": "50",
                                "maxTriggerDelay": "1h", "commitOffsets": "false"}, streaming=True)
    reader = RivuletStreamReader(opts)
    try:
        limit = reader.getDefaultReadLimit()
        assert limit == ReadMinRows(50)
        start = reader.initialOffset()
        assert reader.latestOffset(start, limit) == start  # 30 waiting: held back
        produce(broker.bootstrap, t, [{"value": b"v", "partition": i % 2} for i in range(30)])
        end = reader.latestOffset(start, limit)
        assert end == {t: {"0": 30, "1": 30}}
        produce(broker.bootstrap, t, [{"value": b"v", "partition": 0}])
        assert reader.latestOffset(end, limit) == end
        reader.opts.max_trigger_delay_ms = 0  # the delay has passed: take what there is
        assert reader.latestOffset(end, limit) == {t: {"0": 31, "1": 30}}
    finally:
        reader.stop()


def test_assign_and_subscribe_pattern(broker, spark):
    prefix = topic_name("pat")
    a, b = create_topic(broker.bootstrap, prefix + "-a", 2), create_topic(broker.bootstrap, prefix + "-b", 1)
    produce(broker.bootstrap, a, [{"value": b"a", "partition": i % 2} for i in range(40)])
    produce(broker.bootstrap, b, [{"value": b"b"} for _ in range(10)])
    def r():  # DataFrameReader accumulates options: a fresh one per query
        return spark.read.format("rivulet").option("bootstrap.servers", broker.bootstrap)
    got = r().option("subscribePattern", prefix + "-.*").load().groupBy("topic").count().collect()
    assert {x.topic: x["count"] for x in got} == {a: 40, b: 10}
    got = r().option("assign", json.dumps({a: [1]})).load().select("topic", "partition").distinct().collect()
    assert [(x.topic, x.partition) for x in got] == [(a, 1)]


def test_reader_pickles_without_its_connections(broker):
    """Spark ships the stream reader to executors: its sockets must stay behind."""
    import pickle
    from rivulet.spark.source import RivuletStreamReader, SourceOptions
    t = create_topic(broker.bootstrap, topic_name(), 2)
    reader = RivuletStreamReader(SourceOptions.parse({"kafka.bootstrap.servers": broker.bootstrap,
                                                      "subscribe": t}, streaming=True))
    assert reader.initialOffset() == {t: {"0": 0, "1": 0}}
    assert reader._offsets._cluster is not None  # the driver side is connected
    clone = pickle.loads(pickle.dumps(reader))
    assert clone._offsets._cluster is None and clone.opts == reader.opts
    reader.stop()


# ---------------------------------------------------------------- streaming


def test_max_offsets_per_trigger_bounds_every_batch(broker, spark, tmp_path):
    t = create_topic(broker.bootstrap, topic_name(), 3)
    # Uneven backlog: the limit is shared in proportion to it.
    counts = {0: 3000, 1: 1500, 2: 500}
    produce(broker.bootstrap, t, [{"value": b"x" * 20, "partition": p} for p, n in counts.items() for _ in range(n)])
    q = run_available_now(source(spark, broker.bootstrap, t, startingOffsets="earliest", maxOffsetsPerTrigger=1000),
                          tmp_path / "cp", path=tmp_path / "out")
    progress = [p for p in q.recentProgress if p["numInputRows"] > 0]
    assert len(progress) >= 5
    assert all(p["numInputRows"] <= 1000 for p in progress)
    assert sum(p["numInputRows"] for p in progress) == 5000
    first = json.loads(progress[0]["sources"][0]["endOffset"])[t]
    assert (int(first["0"]), int(first["1"]), int(first["2"])) == (600, 300, 100)
    out = spark.read.parquet(str(tmp_path / "out"))
    assert out.count() == 5000 == out.select("topic", "partition", "offset").distinct().count()


def test_processed_offsets_are_committed_to_a_group(broker, spark, tmp_path):
    t = create_topic(broker.bootstrap, topic_name(), 2)
    produce(broker.bootstrap, t, [{"value": b"v", "partition": i % 2} for i in range(300)])
    group = "spark-" + t
    run_available_now(source(spark, broker.bootstrap, t, startingOffsets="earliest", commitOffsets="true",
                             **{"kafka.group.id": group}),
                      tmp_path / "cp", path=tmp_path / "out")
    from rivulet import TopicPartition
    from rivulet.admin import AdminClient, ConsumerGroupTopicPartitions
    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    try:
        deadline = time.monotonic() + 20
        while True:
            res = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(
                group, [TopicPartition(t, 0), TopicPartition(t, 1)])])[group].result(10)
            offsets = {tp.partition: tp.offset for tp in res.topic_partitions}
            if offsets == {0: 150, 1: 150} or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        a.close()
    assert offsets == {0: 150, 1: 150}


def _group_ids(bootstrap: str) -> set[str]:
    from rivulet.admin import AdminClient
    a = AdminClient({"bootstrap.servers": bootstrap})
    try:
        return {g.group_id for g in a.list_consumer_groups().result(30).valid}
    finally:
        a.close()


def test_streaming_read_commits_to_no_group_by_default(broker, spark, tmp_path):
    # As Spark's Kafka source: the checkpoint holds the progress, the broker keeps no group.
    t = create_topic(broker.bootstrap, topic_name(), 2)
    produce(broker.bootstrap, t, [{"value": b"v", "partition": i % 2} for i in range(100)])
    before = _group_ids(broker.bootstrap)
    run_available_now(source(spark, broker.bootstrap, t, startingOffsets="earliest"), tmp_path / "cp",
                      path=tmp_path / "out")
    assert spark.read.parquet(str(tmp_path / "out")).count() == 100
    assert _group_ids(broker.bootstrap) - before == set()


def _delete_records(bootstrap: str, topic: str, partition: int, before: int) -> None:
    from rivulet import TopicPartition
    from rivulet.admin import AdminClient
    a = AdminClient({"bootstrap.servers": bootstrap})
    try:
        for f in a.delete_records([TopicPartition(topic, partition, before)]).values():
            f.result(30)
    finally:
        a.close()


def test_fail_on_data_loss_after_delete_records(broker, spark, tmp_path):
    t = create_topic(broker.bootstrap, topic_name(), 1)
    produce(broker.bootstrap, t, [{"value": str(i).encode()} for i in range(500)])
    cp, out = tmp_path / "cp", tmp_path / "out"
    run_available_now(source(spark, broker.bootstrap, t, startingOffsets="earliest"), cp, path=out)
    # More data arrives, and then part of it is deleted before the query reads it.
    produce(broker.bootstrap, t, [{"value": str(i).encode()} for i in range(500, 1000)])
    _delete_records(broker.bootstrap, t, 0, 700)
    with pytest.raises(Exception, match="failOnDataLoss"):
        run_available_now(source(spark, broker.bootstrap, t, startingOffsets="earliest"), cp, path=out)
    # The same query, told to skip what is gone, goes on from the log start.
    run_available_now(source(spark, broker.bootstrap, t, startingOffsets="earliest", failOnDataLoss="false"),
                      cp, path=out)
    offsets = sorted(r.offset for r in spark.read.parquet(str(out)).select("offset").collect())
    assert offsets == list(range(500)) + list(range(700, 1000))

    # Batch queries: the same rule for a range that starts below the log start.
    start = json.dumps({t: {"0": 600}})
    with pytest.raises(Exception, match="failOnDataLoss"):
        source(spark, broker.bootstrap, t, streaming=False, startingOffsets=start).count()
    assert source(spark, broker.bootstrap, t, streaming=False, startingOffsets=start,
                  failOnDataLoss="false").count() == 300


# ---------------------------------------------------------------- sink


def test_batch_write_takes_spark_kafka_sink_columns(broker, spark):
    t1 = create_topic(broker.bootstrap, topic_name("w"), 3)
    t2 = create_topic(broker.bootstrap, topic_name("w"), 1)
    from pyspark.sql import functions as F
    df = spark.range(300).select(
        F.col("id").cast("string").alias("key"),
        F.concat(F.lit("v"), F.col("id").cast("string")).alias("value"),
        F.when(F.col("id") % 2 == 0, F.lit(t1)).otherwise(F.lit(t2)).alias("topic"),
        F.when((F.col("id") % 2 == 0) & (F.col("id") < 30), F.lit(2)).otherwise(F.lit(None).cast("int"))
        .alias("partition"),
        F.array(F.struct(F.lit("n").alias("key"), F.col("id").cast("string").cast("binary").alias("value")))
        .alias("headers"))
    df.write.format("rivulet").option("kafka.bootstrap.servers", broker.bootstrap).mode("append").save()
    msgs = consume_all(broker.bootstrap, t1, 3) + consume_all(broker.bootstrap, t2, 1)
    assert len(msgs) == 300
    by_key = {int(m.key()): m for m in msgs}
    assert sorted(by_key) == list(range(300))
    for i, m in by_key.items():
        assert m.value() == f"v{i}".encode()
        assert m.topic() == (t1 if i % 2 == 0 else t2)
        assert m.headers() == [("n", str(i).encode())]
        if i % 2 == 0 and i < 30:
            assert m.partition() == 2
    # A keyed row goes where Kafka's default partitioner puts it.
    from rivulet.client.producer.partitioner import murmur2_partition
    assert all(m.partition() == murmur2_partition(m.key(), 3) for i, m in by_key.items() if i % 2 == 0 and i >= 30)


def test_plain_save_takes_the_default_save_mode_and_leaves_no_groups(broker, spark):
    # Spark's Kafka sink takes Append and ErrorIfExists (the default) and refuses Overwrite and Ignore.
    t = create_topic(broker.bootstrap, topic_name("w"), 2)
    before = _group_ids(broker.bootstrap)
    df = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(50)], "key string, value string").repartition(2)
    w = df.write.format("rivulet").option("kafka.bootstrap.servers", broker.bootstrap).option("topic", t)
    w.save()
    df.write.format("rivulet").option("kafka.bootstrap.servers", broker.bootstrap).mode("errorifexists").save(t)
    df.write.save(format="rivulet", mode="append", **{"kafka.bootstrap.servers": broker.bootstrap, "topic": t})
    for mode, said in (("overwrite", "Overwrite is not allowed"), ("ignore", "Ignore")):
        with pytest.raises(Exception, match=said):
            df.write.format("rivulet").option("kafka.bootstrap.servers", broker.bootstrap).option("topic", t) \
                .mode(mode).save()
    assert sorted(m.value() for m in consume_all(broker.bootstrap, t, 2)) == sorted(
        [f"v{i}".encode() for i in range(50)] * 3)
    # The markers of a finished batch job are deleted: no retry can need them.
    deadline = time.monotonic() + 20
    while (left := {g for g in _group_ids(broker.bootstrap) - before if g.startswith("rivulet-spark-")}) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == set()


REFUSED_SOURCE_OPTIONS = [
    ("kafka.auto.offset.reset", "earliest", "'auto.offset.reset' is not supported"),
    ("kafka.enable.auto.commit", "true", "'enable.auto.commit' is not supported"),
    ("kafka.value.deserializer", "x", "'value.deserializer' is not supported"),
    ("kafka.security.protocol", "TLS", "security.protocol=TLS is not supported yet"),
    ("kafka.sasl.mechanism", "PLAIN", "sasl.mechanism set, but security.protocol is PLAINTEXT"),
    ("kafka.ssl.truststore.locaton", "/x", 'No such configuration property: "ssl.truststore.locaton"'),
]


@pytest.mark.parametrize("option,value,said", REFUSED_SOURCE_OPTIONS)
def test_options_refused_as_by_spark_and_security_options(broker, option, value, said):
    """Each refusal, from the calls Spark makes on the data source to plan a batch and a
    streaming query (in a Python worker); the next test shows such a refusal failing real queries."""
    from rivulet.spark import RivuletDataSource
    t = create_topic(broker.bootstrap, topic_name(), 1)
    ds = RivuletDataSource({"kafka.bootstrap.servers": broker.bootstrap, "subscribe": t, option: value})
    with pytest.raises(ValueError, match=said):
        ds.reader(ds.schema())
    with pytest.raises(ValueError, match=said):
        ds.streamReader(ds.schema())


@pytest.mark.parametrize("option,value,said", [REFUSED_SOURCE_OPTIONS[0], REFUSED_SOURCE_OPTIONS[-1]])
def test_a_refused_option_fails_batch_and_streaming_queries(broker, spark, tmp_path, option, value, said):
    t = create_topic(broker.bootstrap, topic_name(), 1)
    with pytest.raises(Exception, match=said):
        source(spark, broker.bootstrap, t, streaming=False, **{option: value}).collect()
    with pytest.raises(Exception, match=said):
        run_available_now(source(spark, broker.bootstrap, t, **{option: value}), tmp_path / "cp", sink="noop")


def test_sink_refuses_serializers_and_security_options_and_warns_of_unknown_ones(broker, spark):
    from rivulet.spark import RivuletDataSource
    t = create_topic(broker.bootstrap, topic_name("w"), 1)
    df = spark.createDataFrame([("k", "v")], "key string, value string")
    refused = (("kafka.value.serializer", "x", "'value.serializer' is not supported"),
               ("kafka.security.protocol", "TLS", "not supported yet by Rivulet's sink"),
               ("kafka.sasl.jaas.config", "x", "sasl.jaas.config set, but security.protocol is PLAINTEXT"),
               ("kafka.ssl.keystore.location", "/nowhere", "ssl.keystore.location=/nowhere"))

    def options(option: str, value: str) -> dict[str, str]:
        return {"kafka.bootstrap.servers": broker.bootstrap, "topic": t,
                "kafka.security.protocol": "SSL" if option.startswith("kafka.ssl.") else "PLAINTEXT", option: value}
    for option, value, said in refused:  # as Spark's call for the writer meets them
        with pytest.raises(ValueError, match=said):
            RivuletDataSource(options(option, value)).writer(df.schema, False)
    for option, value, said in (refused[0], refused[-1]):  # and as they fail real writes
        with pytest.raises(Exception, match=said):
            df.write.format("rivulet").options(**options(option, value)).save()
    # Options it does not know are ignored as by Spark, but named in a warning (in the Python
    # worker's stderr, which goes to the Spark log); PLAINTEXT is what Rivulet speaks.
    df.write.format("rivulet").option("kafka.bootstrap.servers", broker.bootstrap).option("topic", t) \
        .option("kafka.security.protocol", "PLAINTEXT").option("kafka.linger.ms", "5").option("whatevr", "1").save()
    assert source(spark, broker.bootstrap, t, streaming=False, subscrib="1").count() == 1
    from rivulet.spark.session import jvm_stderr
    log = jvm_stderr(spark)
    for said in ("option whatevr is not an option of Rivulet's sink or of Spark's Kafka sink: it has no effect",
                 "option subscrib is not an option of Rivulet's source or of Spark's Kafka source: it has no effect",
                 "option kafka.linger.ms has no effect on Rivulet's sink"):
        deadline = time.monotonic() + 120  # a worker's stderr reaches the log late on a busy machine
        while said not in log.read_text(errors="replace"):
            assert time.monotonic() < deadline, f"no warning {said!r} in {log}"
            time.sleep(0.2)


def test_read_and_write_over_mutual_tls(spark, tls_certs):
    """The source and the sink with kafka.security.protocol=SSL and librdkafka's ssl.* names:
    a broker whose only listener asks for a client certificate."""
    mutual_tls_round_trip(spark, tls_certs)


def test_read_and_write_over_sasl_ssl_with_scram(spark, tls_certs, tmp_path):
    """The source (batch and streaming) and the sink over SASL_SSL with SCRAM-SHA-512, as Spark
    users configure the Java client: kafka.sasl.mechanism and kafka.sasl.jaas.config."""
    sasl_ssl_round_trip(spark, tls_certs, tmp_path)


def mutual_tls_round_trip(spark, tls_certs) -> None:
    """Write and read 100 records over mutual TLS; a wrong CA is refused (also run on the
    standalone cluster, where executors open the connections)."""
    from rivulet.testing import BrokerProcess
    b = BrokerProcess()
    b.overrides.update({"listeners": f"SSL://localhost:{b.port}", "listener.security.protocol.map": "SSL:SSL",
                        **tls_certs.broker_ssl_props(client_auth="required")})
    b.start()
    try:
        bootstrap = f"localhost:{b.port}"
        tls = {"kafka.security.protocol": "SSL", "kafka.ssl.ca.location": str(tls_certs.ca.pem),
               "kafka.ssl.certificate.location": str(tls_certs.client.cert),
               "kafka.ssl.key.location": str(tls_certs.client.key)}
        t = topic_name("tls")
        df = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(100)], "key string, value string").repartition(2)
        w = df.write.format("rivulet").option("kafka.bootstrap.servers", bootstrap).option("topic", t)
        for k, v in tls.items():
            w = w.option(k, v)
        w.save()
        rows = source(spark, bootstrap, t, streaming=False, **tls).collect()
        assert sorted(r.value for r in rows) == sorted(f"v{i}".encode() for i in range(100))
        with pytest.raises(Exception, match="certificate|closed|SSL"):
            source(spark, bootstrap, t, streaming=False, **{**tls, "kafka.ssl.ca.location": str(
                tls_certs.other_ca.pem)}).collect()
    finally:
        b.cleanup()


def sasl_ssl_round_trip(spark, tls_certs, tmp_path) -> None:
    """Write, read (batch and AvailableNow) over SASL_SSL/SCRAM-SHA-512; a wrong password is
    refused (also run on the standalone cluster)."""
    from test_sasl import add_scram_users, sasl_overrides

    from rivulet.testing import BrokerProcess
    b = BrokerProcess()
    b.overrides.update({**sasl_overrides(b.port, "SASL_SSL"), **tls_certs.broker_ssl_props("listener.name.sasl_ssl.")})
    b.overrides["listeners"] = b.overrides["listeners"].replace("127.0.0.1", "localhost")
    b.start()
    try:
        bootstrap = f"localhost:{b.port}"
        add_scram_users(bootstrap, "SASL_SSL", **{"ssl.ca.location": str(tls_certs.ca.pem)})
        secure = {"kafka.security.protocol": "SASL_SSL", "kafka.ssl.ca.location": str(tls_certs.ca.pem),
                  "kafka.sasl.mechanism": "SCRAM-SHA-512",
                  "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                            'username="sue" password="sue-secret";'}
        t = topic_name("sasl-ssl")
        df = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(100)], "key string, value string").repartition(2)
        w = df.write.format("rivulet").option("kafka.bootstrap.servers", bootstrap).option("topic", t)
        for k, v in secure.items():
            w = w.option(k, v)
        w.save()
        rows = source(spark, bootstrap, t, streaming=False, **secure).collect()
        assert sorted(r.value for r in rows) == sorted(f"v{i}".encode() for i in range(100))
        run_available_now(source(spark, bootstrap, t, startingOffsets="earliest", **secure).select("value"),
                          tmp_path / "cp", path=tmp_path / "out")
        assert spark.read.parquet(str(tmp_path / "out")).count() == 100
        wrong = {**secure, "kafka.sasl.jaas.config": secure["kafka.sasl.jaas.config"].replace("sue-secret", "nope")}
        with pytest.raises(Exception, match="invalid credentials with SASL mechanism SCRAM-SHA-512"):
            source(spark, bootstrap, t, streaming=False, **wrong).collect()
    finally:
        b.cleanup()


def test_replayed_stream_batch_does_not_duplicate(broker, spark, tmp_path):
    src = create_topic(broker.bootstrap, topic_name("src"), 2)
    dst = create_topic(broker.bootstrap, topic_name("dst"), 2)
    produce(broker.bootstrap, src, [{"value": f"e{i}".encode(), "key": f"k{i}".encode()} for i in range(3000)])
    cp = tmp_path / "cp"

    def run():
        df = source(spark, broker.bootstrap, src, startingOffsets="earliest", maxOffsetsPerTrigger=1000)
        return run_available_now(df.select("key", "value"), cp, sink="rivulet", topic=dst,
                                 **{"kafka.bootstrap.servers": broker.bootstrap})

    q = run()
    assert sum(p["numInputRows"] for p in q.recentProgress) == 3000
    # A crash after the sink committed batch 2 but before Spark recorded the batch: Spark
    # replays it on restart.
    last = max(int(p.name) for p in (cp / "commits").iterdir() if p.name.isdigit())
    (cp / "commits" / str(last)).unlink()
    (cp / "commits" / f".{last}.crc").unlink(missing_ok=True)
    q = run()
    assert [p["batchId"] for p in q.recentProgress if p["numInputRows"]] == [last]
    values = sorted(m.value() for m in consume_all(broker.bootstrap, dst, 2))
    assert values == sorted(f"e{i}".encode() for i in range(3000))


def test_read_on_driver_writes_each_record_once_through_a_replay(broker, spark, tmp_path):
    """readOnDriver: each micro-batch is one Spark partition (even with minPartitions), read by
    the driver's planner process; a batch replayed after a restart is read again by an executor
    task as one partition, so the sink (a marker per task partition) adds nothing. The offsets
    are the normal reader's: the query goes on without readOnDriver from the same checkpoint."""
    src = create_topic(broker.bootstrap, topic_name("src"), 2)
    dst = create_topic(broker.bootstrap, topic_name("dst"), 2)
    produce(broker.bootstrap, src, [{"value": f"e{i}".encode(), "key": f"k{i}".encode(), "partition": i % 2}
                                    for i in range(3000)])
    cp = tmp_path / "cp"

    def run(**options):
        df = source(spark, broker.bootstrap, src, startingOffsets="earliest", maxOffsetsPerTrigger=1000, **options)
        return run_available_now(df.select("key", "value"), cp, sink="rivulet", topic=dst,
                                 **{"kafka.bootstrap.servers": broker.bootstrap})

    q = run(readOnDriver="true", minPartitions=2)
    batches = [p for p in q.recentProgress if p["numInputRows"]]
    assert [p["numInputRows"] for p in batches] == [1000, 1000, 1000]
    assert json.loads(batches[0]["sources"][0]["endOffset"]) == {src: {"0": 500, "1": 500}}
    markers = {g for g in _group_ids(broker.bootstrap) if g.startswith(f"rivulet-spark-{q.id}-")}
    assert markers == {f"rivulet-spark-{q.id}-0"}, "a driver-read batch is one task partition"
    # A crash after the sink committed the last batch but before Spark recorded it: the new
    # planner process has nothing cached, so an executor reads the batch again.
    last = max(int(p.name) for p in (cp / "commits").iterdir() if p.name.isdigit())
    (cp / "commits" / str(last)).unlink()
    (cp / "commits" / f".{last}.crc").unlink(missing_ok=True)
    q = run(readOnDriver="true", minPartitions=2)
    assert [p["batchId"] for p in q.recentProgress if p["numInputRows"]] == [last]
    values = sorted(m.value() for m in consume_all(broker.bootstrap, dst, 2))
    assert values == sorted(f"e{i}".encode() for i in range(3000))
    # With no batch left to replay, the normal reader takes over the checkpoint's offsets.
    produce(broker.bootstrap, src, [{"value": f"e{i}".encode(), "partition": i % 2} for i in range(3000, 3500)])
    q = run()
    assert sum(p["numInputRows"] for p in q.recentProgress) == 500
    values = sorted(m.value() for m in consume_all(broker.bootstrap, dst, 2))
    assert values == sorted(f"e{i}".encode() for i in range(3500))


def test_read_on_driver_decodes_json_values_and_honours_read_committed(broker, spark, tmp_path):
    """The driver reads with the executors' decoder: valueFormat=json's columns, and
    read_committed skipping an aborted transaction."""
    from confluent_kafka import Producer
    t = create_topic(broker.bootstrap, topic_name("txn"), 1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tx-" + t})
    p.init_transactions()
    for outcome in ("commit", "abort", "commit"):
        p.begin_transaction()
        for i in range(50):
            p.produce(t, json.dumps({"n": i, "outcome": outcome}).encode())
        p.flush()
        (p.commit_transaction if outcome == "commit" else p.abort_transaction)()
    df = source(spark, broker.bootstrap, t, startingOffsets="earliest", readOnDriver="true", valueFormat="json",
                valueSchema="n INT, outcome STRING", **{"kafka.isolation.level": "read_committed"})
    run_available_now(df.select("value.*"), tmp_path / "cp", path=tmp_path / "out")
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted((r.outcome, r.n) for r in rows) == sorted([("commit", i) for i in range(50)] * 2)
    with pytest.raises(Exception, match="readOnDriver"):
        source(spark, broker.bootstrap, t, streaming=False, readOnDriver="true").count()


def test_sink_task_retry_after_a_partial_write(broker):
    """An attempt that produced rows but died before committing leaves nothing visible; the
    retry writes every row once. A retry of a committed task writes nothing."""
    import pyarrow as pa
    from rivulet import Producer
    from rivulet.spark.sink import SinkOptions, WorkerProducers, iter_rows, transactional_id, write_partition
    dst = create_topic(broker.bootstrap, topic_name("retry"), 2)
    opts = SinkOptions(bootstrap=broker.bootstrap, topic=dst)

    def rows():
        return iter([pa.RecordBatch.from_pydict({"key": [f"k{i}" for i in range(500)],
                                                 "value": [f"v{i}" for i in range(500)]})])

    # The attempt that dies: the sink's transactional id, rows produced, never committed.
    dying = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": transactional_id("q1", 7)})
    dying.init_transactions(30)
    dying.begin_transaction()
    for topic, part, rec in iter_rows(rows(), dst):
        dying.produce(topic, rec.value, rec.key)
    assert dying.flush(30) == 0  # produced, never committed: the task "dies" here
    assert len(consume_all(broker.bootstrap, dst, 2, "read_uncommitted")) == 500

    worker = WorkerProducers()
    first = write_partition(opts, rows(), "q1", 3, 7, worker)
    assert (first.rows, first.skipped) == (500, False)
    again = write_partition(opts, rows(), "q1", 3, 7, worker)
    assert again.skipped and again.rows == 0
    assert sorted(m.value() for m in consume_all(broker.bootstrap, dst, 2)) == sorted(f"v{i}".encode()
                                                                                      for i in range(500))
    nxt = write_partition(opts, rows(), "q1", 4, 7, worker)  # the next batch is written
    assert nxt.rows == 500 and len(consume_all(broker.bootstrap, dst, 2)) == 1000
    worker.close()
    dying.close(10)


def requests_answered(metrics_port: int) -> dict[str, int]:
    """Requests the broker has answered, by API name, from its Prometheus endpoint."""
    import re
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30) as r:
        lines = r.read().decode().splitlines()
    counts: dict[str, int] = {}
    for x in lines:
        m = re.match(r'kafka_network_requestmetrics_requests_total\{.*request="([A-Za-z]+)".*\} (\S+)$', x)
        if m:
            counts[m[1]] = counts.get(m[1], 0) + int(float(m[2]))
    return counts


def init_producer_ids(metrics_port: int) -> int:
    """InitProducerId requests the broker has answered."""
    return requests_answered(metrics_port).get("InitProducerId", 0)


def producer_id_and_epoch(bootstrap: str, tid: str) -> tuple[int, int]:
    """What the transaction coordinator holds for a transactional id (DescribeTransactions)."""
    from rivulet.client.blocking import BlockingClient
    from rivulet.protocol.messages import describe_transactions_request as dtq
    c = BlockingClient(bootstrap)
    try:
        (st,) = c.send_any(dtq.DescribeTransactionsRequest(transactional_ids=[tid])).transaction_states
    finally:
        c.close()
    assert st.error_code == 0, st
    return st.producer_id, st.producer_epoch


@pytest.fixture(scope="module")
def metered_broker():
    """A broker, and the port of its Prometheus endpoint, which counts the requests it answers."""
    from rivulet.testing import BrokerProcess, free_port
    port = free_port()
    b = BrokerProcess({"metrics.listener": f"http://127.0.0.1:{port}"}).start()
    yield b, port
    b.cleanup()


def test_sink_keeps_its_producer_across_batches_and_fences_zombies(metered_broker):
    """A worker's producer writes batch after batch of its partition under one producer id and
    epoch, with one InitProducerId. Another worker's attempt at the partition fences it: the
    kept producer finds out before it takes a row and starts afresh. An attempt fenced in the
    middle of its write commits nothing, and every batch lands once."""
    import pyarrow as pa
    from rivulet.spark.sink import SinkOptions, WorkerProducers, transactional_id, write_partition
    b, metrics_port = metered_broker
    dst = create_topic(b.bootstrap, topic_name("kept"), 2)
    opts = SinkOptions(bootstrap=b.bootstrap, topic=dst)
    tid = transactional_id("q2", 3)

    def rows(batch: int, n: int = 200):
        return iter([pa.RecordBatch.from_pydict({"value": [f"b{batch}-{i}" for i in range(n)]})])

    worker, other = WorkerProducers(), WorkerProducers()
    inits = init_producer_ids(metrics_port)
    seen = []
    for batch in range(3):
        assert write_partition(opts, rows(batch), "q2", batch, 3, worker).rows == 200
        seen.append(producer_id_and_epoch(b.bootstrap, tid))
    assert seen[0] == seen[1] == seen[2]
    assert init_producer_ids(metrics_port) - inits == 1

    # Batch 3's task runs in another worker: its InitProducerId fences the kept producer.
    assert write_partition(opts, rows(3), "q2", 3, 3, other).rows == 200
    pid, epoch = producer_id_and_epoch(b.bootstrap, tid)
    assert (pid, epoch) == (seen[0][0], seen[0][1] + 1)
    # Batch 4 back in the first worker: its fenced producer is replaced before a row is taken.
    assert write_partition(opts, rows(4), "q2", 4, 3, worker).rows == 200
    assert producer_id_and_epoch(b.bootstrap, tid) == (pid, epoch + 1)

    # A zombie: batch 5's attempt in the first worker is writing when a speculative copy in the
    # other worker starts, fences it (aborting its open transaction) and commits.
    def rows_then_speculative_copy():
        yield from rows(5, 100)
        assert write_partition(opts, rows(5), "q2", 5, 3, other).rows == 200
        yield from rows(5, 200)
    with pytest.raises(Exception, match="(?i)fenced|epoch"):
        write_partition(opts, rows_then_speculative_copy(), "q2", 5, 3, worker)
    again = write_partition(opts, rows(5), "q2", 5, 3, worker)  # a retry finds the batch written
    assert again.skipped and again.rows == 0

    got = [m.value().decode() for m in consume_all(b.bootstrap, dst, 2)]
    assert sorted(got) == sorted(f"b{batch}-{i}" for batch in range(6) for i in range(200))
    worker.close()
    other.close()


def test_a_kept_producers_batch_asks_only_for_its_transaction(metered_broker):
    """A micro-batch's task on a kept producer sends its transaction's requests and nothing
    else: the coordinators it found for the first batch serve the next ones (no
    FindCoordinator), as do its connections and metadata."""
    import pyarrow as pa
    from rivulet.spark.sink import SinkOptions, WorkerProducers, write_partition
    b, metrics_port = metered_broker
    dst = create_topic(b.bootstrap, topic_name("trips"), 1)
    opts = SinkOptions(bootstrap=b.bootstrap, topic=dst)
    worker = WorkerProducers()

    def rows(batch: int):
        return iter([pa.RecordBatch.from_pydict({"value": [f"b{batch}-{i}" for i in range(5)]})])

    assert write_partition(opts, rows(0), "q3", 0, 0, worker).rows == 5
    before = requests_answered(metrics_port)
    for batch in (1, 2):
        assert write_partition(opts, rows(batch), "q3", batch, 0, worker).rows == 5
    after = requests_answered(metrics_port)
    sent = {api: n - before.get(api, 0) for api, n in after.items() if n != before.get(api, 0)}
    assert sent == {"AddOffsetsToTxn": 2, "TxnOffsetCommit": 2, "AddPartitionsToTxn": 2, "Produce": 2, "EndTxn": 2}
    assert len(consume_all(b.bootstrap, dst, 1)) == 15
    worker.close()


def test_stream_to_the_sink_with_kept_producers_writes_each_record_once(metered_broker, spark, tmp_path):
    """A streaming copy of a 4-partition topic in 8 micro-batches through Python workers that
    keep their producers: each record lands once, with at most one InitProducerId per task
    (a worker's kept producer that another worker's InitProducerId fenced costs no extra one).
    How many fewer depends on which worker Spark hands each task."""
    b, metrics_port = metered_broker
    src = create_topic(b.bootstrap, topic_name("src"), 4)
    dst = create_topic(b.bootstrap, topic_name("dst"), 4)
    produce(b.bootstrap, src, [{"value": f"e{i}".encode(), "partition": i % 4} for i in range(8000)])
    inits = init_producer_ids(metrics_port)
    # minPartitions: a task per partition (a batch this small would otherwise be one task)
    df = source(spark, b.bootstrap, src, startingOffsets="earliest", maxOffsetsPerTrigger=1000, minPartitions=4)
    q = run_available_now(df.select("value"), tmp_path / "cp", sink="rivulet", topic=dst,
                          **{"kafka.bootstrap.servers": b.bootstrap})
    assert len([p for p in q.recentProgress if p["numInputRows"]]) == 8
    used = init_producer_ids(metrics_port) - inits
    assert 4 <= used <= 32, f"{used} InitProducerId requests for 8 micro-batches of 4 tasks"
    values = sorted(m.value() for m in consume_all(b.bootstrap, dst, 4))
    assert values == sorted(f"e{i}".encode() for i in range(8000))


def test_read_committed_hides_aborted_transactions(broker, spark):
    """read_committed, when asked for, skips aborted transactions and control markers; the
    default (read_uncommitted, as in Spark's Kafka source) returns every data record."""
    from confluent_kafka import Producer
    t = create_topic(broker.bootstrap, topic_name("txn"), 1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tx-" + t})
    p.init_transactions()
    for outcome in ("commit", "abort", "commit"):
        p.begin_transaction()
        for i in range(100):
            p.produce(t, f"{outcome}-{i}".encode())
        p.flush()
        (p.commit_transaction if outcome == "commit" else p.abort_transaction)()
    committed = source(spark, broker.bootstrap, t, streaming=False,
                       **{"kafka.isolation.level": "read_committed"}).collect()
    assert len(committed) == 200 and all(r.value.startswith(b"commit") for r in committed)
    everything = source(spark, broker.bootstrap, t, streaming=False).collect()
    assert len(everything) == 300 and sum(r.value.startswith(b"abort") for r in everything) == 100


# ---------------------------------------------------------------- the decoder (no Spark, no broker)


def _varint_len(buf: bytes, q: int) -> int:
    n = 1
    while buf[q] >= 0x80:
        q += 1
        n += 1
    return n


@pytest.mark.parametrize("layout", ["C", "pyarrow"])
@pytest.mark.parametrize("shape", ["vectorized", "per-record loop", "wide varints"])
def test_decoder_matches_the_reference_decoder(shape, layout, monkeypatch):
    """Odd shapes through every decoding path: 1-3 byte varints (and wider, which the pyarrow
    layout leaves to the loop and the C one reads), big keys and values, timestamps jumping
    back and forth, null and empty keys and values, headers, every codec, and offset gaps as
    compaction leaves them; compared with rivulet.protocol.records."""
    import random

    from rivulet.protocol.records import HEADER_SIZE, Record, decode_records, encode_batch, iter_batches
    from rivulet.arrow import records as _records
    from rivulet.arrow.records import Chunk, decode_into

    if layout == "C":
        assert _records._record_layout is not None, "the C accelerator is not built"
    else:
        monkeypatch.setattr(_records, "_record_layout", None)
    if shape == "per-record loop":
        monkeypatch.setattr(_records, "VECTOR_MIN_RECORDS", 1 << 40)
        monkeypatch.setattr(_records, "LAYOUT_MIN_RECORDS", 1 << 40)
    jumps = (0, 5, 300, 70_000, -400_000) + ((9_000_000,) if shape == "wide varints" else ())
    rng = random.Random(11)
    recs = []
    for i in range(700):
        key = None if i % 5 == 0 else b"" if i % 5 == 1 else bytes(rng.randrange(256) for _ in range(
            rng.choice((1, 70, 300))))
        value = None if i % 11 == 0 else b"" if i % 11 == 1 else bytes(rng.randrange(256) for _ in range(
            rng.choice((3, 100, 9000, 20000))))
        headers = [("a", b"1"), ("b", None)] if i % 7 == 0 else []
        recs.append(Record(0, 1_700_000_000_000 + rng.choice(jumps), key, value, headers))
    blob = b"".join(encode_batch(recs[i:i + 100], base_offset=i, compression=c)
                    for i, c in zip(range(0, 700, 100), (0, 1, 2, 3, 4, 0, 0)))
    want = [r for b in decode_records(blob) for r in b.records]
    chunk = Chunk(True)
    dec = decode_into(chunk, blob, 0, 10_000, False, None)
    assert dec.next_offset == 700 and chunk.n == 700
    rb = chunk.to_arrow("t", 3).to_pydict()
    assert chunk.vectorized == (shape == "vectorized" or (shape == "wide varints" and layout == "C"))
    assert rb["offset"] == [r.offset for r in want]
    assert rb["key"] == [r.key for r in want]
    assert rb["value"] == [r.value for r in want]
    assert [int(t.timestamp() * 1000) for t in rb["timestamp"]] == [r.timestamp for r in want]
    assert rb["headers"] == [[{"key": k, "value": v} for k, v in r.headers] or None for r in want]
    assert set(rb["partition"]) == {3} and set(rb["topic"]) == {"t"}
    without = Chunk(False)
    decode_into(without, blob, 0, 10_000, False, None)
    assert without.to_arrow("t", 3).to_pydict()["value"] == rb["value"]

    # Starting inside a batch and ending inside another: rows outside [from, until) are trimmed.
    chunk = Chunk(False)
    dec = decode_into(chunk, blob, 150, 420, False, None)
    got = chunk.to_arrow("t", 0, *chunk.bounds(150, 420)).to_pydict()
    assert got["offset"] == list(range(150, 420)) and dec.next_offset == 500

    # A compacted batch: records 0, 3, 4, 9 of 300 survive; the offset deltas keep the gaps.
    batch = encode_batch([Record(0, 5, b"k%d" % i, b"v%d" % i, []) for i in range(300)], base_offset=50)
    raw = batch[HEADER_SIZE:]
    parts, q = [], 0
    while q < len(raw):
        n = _varint_len(raw, q)
        size_zz = sum((b & 0x7F) << (7 * j) for j, b in enumerate(raw[q:q + n]))
        parts.append(raw[q:q + n + (size_zz >> 1)])
        q += n + (size_zz >> 1)
    kept = [0, 3, 4, 9] + list(range(20, 300))
    chunk = Chunk(False)
    chunk.add(b"".join(parts[i] for i in kept), 50, 5, len(kept), False, None)
    got = chunk.to_arrow("t", 0).to_pydict()
    assert got["offset"] == [50 + i for i in kept] and got["value"] == [b"v%d" % i for i in kept]
    assert next(iter_batches(batch))[1].records_count == 300


def test_decoder_uniform_runs():
    """Same-shaped records are placed by stride runs (timestamp and offset deltas growing a
    byte mid-batch), an odd record in the middle starts new runs, and every record is still
    where the reference decoder finds it."""
    from rivulet.protocol.records import Record, decode_records, encode_batch
    from rivulet.arrow.records import Chunk, decode_into

    def batch(base: int, odd: int | None) -> bytes:
        return encode_batch([Record(0, 1_700_000_000_000 + i // 20, b"%08d" % i,
                                    bytes([i % 251]) * (101 if i == odd else 100), []) for i in range(10_000)],
                            base_offset=base)
    blob = batch(0, None) + batch(10_000, 5_000) + batch(20_000, 9_999)
    want = [r for b in decode_records(blob) for r in b.records]
    chunk = Chunk(False)
    decode_into(chunk, blob, 0, 10 ** 9, False, None)
    rb = chunk.to_arrow("t", 0).to_pydict()
    assert chunk.vectorized
    assert rb["offset"] == [r.offset for r in want]
    assert rb["key"] == [r.key for r in want] and rb["value"] == [r.value for r in want]
    assert [int(t.timestamp() * 1000) for t in rb["timestamp"]] == [r.timestamp for r in want]
