"""The Spark source's valueFormat=avro: an Avro topic written by confluent-kafka's
AvroSerializer (two compatible versions of the schema, and one value not in the wire format)
read through the broker's schema registry into a typed ``value`` column, on local[2]."""

from __future__ import annotations

import datetime
import json
import uuid

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.avro import AvroSerializer  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402

from test_spark import create_topic, produce, spark_session  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.spark]

V1 = {"type": "record", "name": "Reading", "namespace": "rivulet.test", "fields": [
    {"name": "sensor", "type": "string"},
    {"name": "value", "type": "double"},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}
V2 = {**V1, "fields": V1["fields"] + [{"name": "unit", "type": ["null", "string"], "default": None}]}
AT = datetime.datetime(2026, 11, 29, 9, 0, tzinfo=datetime.timezone.utc)


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    s = spark_session(tmp_path_factory.mktemp("spark"))
    yield s
    s.stop()


def test_avro_topic_reads_into_typed_columns(registry_broker, spark):
    from pyspark.sql.types import ArrayType, DoubleType, StringType, TimestampType
    broker, url = registry_broker
    topic = create_topic(broker.bootstrap, f"readings-{uuid.uuid4().hex[:6]}", 2)
    client = SchemaRegistryClient({"url": url})
    ctx = SerializationContext(topic, MessageField.VALUE)
    ser1, ser2 = AvroSerializer(client, json.dumps(V1)), AvroSerializer(client, json.dumps(V2))
    records = [{"value": ser1({"sensor": f"s{i}", "value": i / 2, "tags": ["a"] * (i % 3), "at": AT}, ctx),
                "partition": i % 2} for i in range(10)]
    records += [{"value": ser2({"sensor": "s10", "value": 5.0, "tags": [], "at": AT, "unit": "C"}, ctx),
                 "partition": 0},
                {"value": b"not avro", "partition": 1}]
    produce(broker.bootstrap, topic, records)

    df = (spark.read.format("rivulet").option("kafka.bootstrap.servers", broker.bootstrap)
          .option("subscribe", topic).option("valueFormat", "avro").option("schema.registry.url", url)
          .option("mode", "PERMISSIVE").load())
    value = df.schema["value"].dataType
    assert [(f.name, f.dataType) for f in value.fields] == [
        ("sensor", StringType()), ("value", DoubleType()), ("tags", ArrayType(StringType())),
        ("at", TimestampType()), ("unit", StringType())]  # the subject's latest: V2
    rows = df.selectExpr("value.*", "unix_millis(value.at) AS ms", "valueError", "rawValue").collect()

    assert len(rows) == 12
    good = sorted((r for r in rows if r.valueError is None), key=lambda r: r.sensor)
    bad = [r for r in rows if r.valueError is not None]
    assert sorted(r.sensor for r in good) == sorted(f"s{i}" for i in range(11))
    s5 = next(r for r in good if r.sensor == "s5")
    assert (s5.value, s5.tags, s5.unit, s5.ms) == (2.5, ["a", "a"], None, int(AT.timestamp() * 1000))
    assert next(r for r in good if r.sensor == "s10").unit == "C"  # written with V2
    assert len(bad) == 1 and bad[0].rawValue == b"not avro" and bad[0].sensor is None
    assert bad[0].valueError.startswith("bad-magic")
