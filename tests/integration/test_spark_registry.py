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


def test_json_values_read_into_typed_columns_as_from_json_reads_them(registry_broker, spark):
    """valueFormat=json needs no registry: the values parse in the source into the columns
    from_json gives, and a value that is not JSON of the schema is null with its reason."""
    from pyspark.sql import functions as F
    broker, _ = registry_broker
    topic = create_topic(broker.bootstrap, f"orders-{uuid.uuid4().hex[:6]}", 2)
    ddl = "id STRING, n INT, price DOUBLE, at TIMESTAMP, tags ARRAY<STRING>, item STRUCT<sku: STRING, day: DATE>"
    docs = [{"id": f"o{i}", "n": i, "price": i * 1.5, "at": f"2026-11-29T09:00:0{i % 10}.250Z",
             "tags": ["x"] * (i % 3), "item": {"sku": f"k{i}", "day": "2026-11-29"}, "extra": True}
            for i in range(20)]
    records = [{"value": json.dumps(d, indent=2 if i % 2 else None).encode(), "partition": i % 2}
               for i, d in enumerate(docs)]
    records += [{"value": b'{"id": "bad", "n": "three"}', "partition": 0}, {"value": b"[1, 2]", "partition": 1}]
    produce(broker.bootstrap, topic, records)

    def read(mode: str):
        return (spark.read.format("rivulet").option("kafka.bootstrap.servers", broker.bootstrap)
                .option("subscribe", topic).option("valueFormat", "json").option("valueSchema", ddl)
                .option("mode", mode).load())

    df = read("PERMISSIVE")
    rows = df.selectExpr("value.*", "valueError", "rawValue").collect()
    reference = (spark.read.format("rivulet").option("kafka.bootstrap.servers", broker.bootstrap)
                 .option("subscribe", topic).load()
                 .select(F.from_json(F.col("value").cast("string"), ddl).alias("v")).select("v.*")
                 .where("id LIKE 'o%'").collect())
    good = sorted((r for r in rows if r.valueError is None), key=lambda r: r.n)
    assert [tuple(r)[:6] for r in good] == [tuple(r) for r in sorted(reference, key=lambda r: r.n)]
    assert len(good) == 20 and good[3].at == datetime.datetime(2026, 11, 29, 9, 0, 3, 250000)
    bad = sorted((r for r in rows if r.valueError is not None), key=lambda r: r.rawValue)
    assert [r.rawValue for r in bad] == [b"[1, 2]", b'{"id": "bad", "n": "three"}']
    assert all(r.id is None and r.valueError.startswith("undecodable") for r in bad)
    with pytest.raises(Exception, match="cannot decode the value"):
        read("FAILFAST").collect()
