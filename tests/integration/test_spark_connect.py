"""The source and the sink from a Spark Connect client: a thin Python client talking to a Spark
Connect server over gRPC, as on Databricks serverless. The server (PySpark's SparkConnectServer)
runs its jobs on the standalone cluster's two workers, so the data source, registered in the
Connect session from the client, runs in the executors' Python workers."""

from __future__ import annotations

import os
from collections import Counter

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")
pytest.importorskip("grpc", reason="Spark Connect's client needs pip install 'rivulet[spark-connect]'")

from test_spark import consume_all, create_topic, topic_name  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.spark]


@pytest.fixture(scope="module")
def connect_server(spark_standalone, tmp_path_factory):
    from spark_cluster import ConnectServer
    server = ConnectServer(tmp_path_factory.mktemp("spark-connect"), spark_standalone.master_url,
                           {"spark.executor.memory": "768m", "spark.default.parallelism": "2"}).start()
    try:
        spark_standalone.wait_for_executors(2)  # the server's application holds both workers
        yield server
    finally:
        server.close()


# What SparkSession.builder.remote() sets for the whole process (and stop() leaves set), which
# would turn later classic sessions, and the Spark commands tests start, into Connect clients.
CONNECT_ENV = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")


@pytest.fixture(scope="module")
def spark(connect_server):
    from pyspark.sql import SparkSession

    import rivulet.spark
    saved = {k: os.environ.get(k) for k in CONNECT_ENV}
    s = SparkSession.builder.remote(connect_server.url).getOrCreate()
    try:
        rivulet.spark.register(s)  # spark.dataSource.register, over Connect
        yield s
    finally:
        s.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_source_and_sink_through_spark_connect(broker, spark, tmp_path):
    from pyspark.sql.connect.session import SparkSession as ConnectSession
    assert isinstance(spark, ConnectSession)
    src, dst = create_topic(broker.bootstrap, topic_name("sc-in"), 2), create_topic(broker.bootstrap,
                                                                                   topic_name("sc-out"), 1)
    rows = [(f"k{i}", f"v{i}") for i in range(500)]
    # A batch write in the default save mode, as with Spark's Kafka sink.
    (spark.createDataFrame(rows, "key string, value string").write.format("rivulet")
     .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", src).save())

    read = (spark.read.format("rivulet").option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", src).load())
    got = read.selectExpr("cast(key as string) k", "cast(value as string) v", "partition", "offset").collect()
    assert sorted((r.k, r.v) for r in got) == sorted(rows)
    assert len({(r.partition, r.offset) for r in got}) == 500

    # Streaming, Rivulet to Rivulet through the transactional sink, in several batches.
    q = (spark.readStream.format("rivulet").option("kafka.bootstrap.servers", broker.bootstrap)
         .option("subscribe", src).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 200).load()
         .selectExpr("key", "upper(cast(value as string)) as value")
         .writeStream.format("rivulet").option("kafka.bootstrap.servers", broker.bootstrap).option("topic", dst)
         .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None
    assert len(q.recentProgress) >= 3
    assert Counter(m.value() for m in consume_all(broker.bootstrap, dst, 1)) == \
        Counter(f"V{i}".encode() for i in range(500))
