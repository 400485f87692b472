"""Spark reads the broker's Iceberg tables through Iceberg's own Spark runtime (issue 31).

One broker with its schema registry and a topic per mode (key_value with an aborted transaction,
value_schema_id_prefix with Avro, value_schema_latest with Protobuf); once the tables have every
record, one Spark session reads the three with ``spark.table("rivulet.<topic>")`` over a JDBC
catalog on the broker's SQLite catalog database, and its rows must equal pyiceberg's scan, column
for column, and the topic read back with read_committed and deserialized.

No Iceberg Spark runtime runs on the project's PySpark (4.3; Maven Central has runtimes up to
Spark 4.1), so the session runs tests/iceberg_spark_reader.py in a virtual environment of its
own with PySpark 4.1, made once in the cache beside Kafka's jars; Spark's Ivy fetches the
Iceberg runtime and SQLite's JDBC driver from Maven Central into the same cache. Neither being
had fails the test (docs/spark.md names the versions).
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("pyiceberg", reason="the iceberg extra: pip install -e '.[iceberg]'")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402
from google.protobuf.message import Message  # noqa: E402

from benchmarks.reference.kafka import cache_root, locked  # noqa: E402
from rivulet.iceberg.catalog import CatalogSettings, open_catalog  # noqa: E402
from rivulet.testing import BrokerProcess, free_port  # noqa: E402
from tests.integration.test_iceberg import _create, _ends, _topic_rows, _wait_for_table  # noqa: E402
from tests.integration.test_iceberg_schemas import reading_classes  # noqa: E402
from conftest import wait_for_registry  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.spark]  # a Spark JVM: with the heavy tests

# The newest PySpark an Iceberg Spark runtime runs on; the runtime itself is pinned in the reader.
PYSPARK = "4.1.4"
READER = Path(__file__).resolve().parents[1] / "iceberg_spark_reader.py"
KV, AVRO, PROTO = "orders.kv", "orders-avro", "readings-latest"

ORDER = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"}, {"name": "item", "type": "string"}, {"name": "price", "type": "double"},
    {"name": "paid", "type": "boolean"}, {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "SHIPPED"]}},
    {"name": "coupon", "type": ["null", "string"], "default": None}]}
# The Protobuf schema as registered, and the same built in Python to write the values.
READING_PROTO = """syntax = "proto3";
package lab;
enum Unit { CELSIUS = 0; KELVIN = 1; }
message Reading {
  string sensor = 1;
  double value = 2;
  repeated int32 samples = 3;
  Unit unit = 4;
  Location at = 5;
  int64 seq = 6;
}
message Location { double lat = 1; double lon = 2; }
"""


def _reading_value(msg: Message) -> dict:
    """A Reading as the table's column holds it: enums by name, an unset message as null."""
    at = {"lat": msg.at.lat, "lon": msg.at.lon} if msg.HasField("at") else None
    return {"sensor": msg.sensor, "value": msg.value, "samples": list(msg.samples),
            "unit": msg.DESCRIPTOR.fields_by_name["unit"].enum_type.values_by_number[msg.unit].name,
            "at": at, "seq": msg.seq}


def plain(v: object) -> object:
    """A value as the reader prints Spark's (binary as "b64:...", timestamps in microseconds)."""
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, bytes):
        return "b64:" + base64.b64encode(v).decode()
    if isinstance(v, datetime.datetime):
        assert v.tzinfo is not None, v
        return round(v.timestamp() * 1_000_000)
    return v


def _pyspark41_python() -> Path:
    """The Python of a virtual environment with PySpark 4.1 (made once, in the cache): Iceberg's
    Spark runtime does not run on the project's PySpark 4.3."""
    home = cache_root() / f"pyspark-{PYSPARK}-venv"
    python = home / "bin" / "python"
    done = home / ".complete"
    with locked(cache_root() / f"pyspark-{PYSPARK}-venv.lock"):
        if not done.exists():
            shutil.rmtree(home, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", str(home)], check=True, capture_output=True, timeout=300)
            pip = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                                  f"pyspark=={PYSPARK}"], capture_output=True, text=True, timeout=1200)
            assert pip.returncode == 0, f"cannot install PySpark {PYSPARK}: {pip.stderr[-2000:]}"
            done.touch()
    return python


@pytest.fixture(scope="module")
def registry_broker():
    url = f"http://127.0.0.1:{free_port()}"
    b = BrokerProcess({"num.partitions": "1", "schema.registry.listeners": url}).start()
    try:
        wait_for_registry(url)
        yield b, url
    finally:
        b.cleanup()


def _produce_key_value(bootstrap: str) -> None:
    """Keys (some null), values (some tombstones), headers, and a committed and an aborted
    transaction between plain records."""
    _create(bootstrap, KV, 2, {"iceberg.mode": "key_value", "iceberg.target.lag.ms": "300"})
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(60):
        p.produce(KV, key=None if i % 9 == 4 else f"customer-{i % 7}".encode(),
                  value=None if i % 13 == 5 else f"order-{i}".encode(),
                  headers=[("source", b"web"), ("n", str(i).encode()), ("empty", None)] if i % 3 == 0 else None)
    assert p.flush(30) == 0
    t = Producer({"bootstrap.servers": bootstrap, "transactional.id": "kv-writer"})
    t.init_transactions(30)
    for commit in (True, False):
        t.begin_transaction()
        for i in range(10):
            t.produce(KV, key=f"tx-{i}".encode(), value=f"{'kept' if commit else 'aborted'}-{i}".encode(),
                      headers=[("tx", b"1")])
        t.flush(30)
        (t.commit_transaction if commit else t.abort_transaction)(30)
    p.produce(KV, key=b"after", value=b"plain", partition=1)
    assert p.flush(30) == 0


def _produce_avro(bootstrap: str, registry: SchemaRegistryClient) -> None:
    _create(bootstrap, AVRO, 2, {"iceberg.mode": "value_schema_id_prefix", "iceberg.target.lag.ms": "300"})
    ser = AvroSerializer(registry, json.dumps(ORDER))
    ctx = SerializationContext(AVRO, MessageField.VALUE)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    base = datetime.datetime(2026, 11, 29, 12, 0, tzinfo=datetime.timezone.utc)
    for i in range(30):
        order = {"id": i * 1_000_000_007, "item": f"item-{i % 4}", "price": i * 1.25, "paid": i % 2 == 0,
                 "tags": [f"t{i % 3}"] * (i % 3), "placed": base + datetime.timedelta(milliseconds=1234 * i),
                 "status": "SHIPPED" if i % 4 == 0 else "NEW", "coupon": f"C{i}" if i % 5 == 0 else None}
        p.produce(AVRO, key=f"customer-{i % 5}".encode(), value=ser(order, ctx),
                  headers=[("trace", f"t-{i}".encode())] if i % 2 else None)
    p.produce(AVRO, key=b"gone", value=None, partition=0)  # a tombstone: a row with a null value
    assert p.flush(30) == 0


def _produce_protobuf(bootstrap: str, registry: SchemaRegistryClient) -> None:
    registry.register_schema(f"{PROTO}-value", Schema(READING_PROTO, "PROTOBUF"))
    _create(bootstrap, PROTO, 1, {"iceberg.mode": "value_schema_latest", "iceberg.target.lag.ms": "300"})
    reading, location = reading_classes(with_seq=True)
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(12):
        msg = reading(sensor=f"s{i % 3}", value=i / 4, samples=list(range(i % 4)), unit=i % 2, seq=2**40 + i)
        if i % 3 == 0:
            msg.at.CopyFrom(location(lat=48.0 + i, lon=2.0))
        p.produce(PROTO, key=str(i).encode(), value=msg.SerializeToString(),
                  timestamp=1_700_000_000_000 + i if i % 2 else 0)
    assert p.flush(30) == 0


def _from_topic(bootstrap: str, topic: str, partitions: int, decode: Callable[[bytes], object]) -> list[dict]:
    """The topic read back with read_committed, as the table's rows."""
    return [{"partition": part, "offset": off, "key": key, "value": None if value is None else decode(value),
             "timestamp": ts * 1000, "headers": [{"key": k, "value": v} for k, v in headers]}
            for part, off, key, value, ts, headers in _topic_rows(bootstrap, topic, partitions)]


def _read_with_spark(data_dir: str, topics: list[str]) -> dict:
    python = _pyspark41_python()
    home = Path(data_dir, "iceberg")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(TZ="UTC", PYSPARK_PYTHON=str(python))  # the reader's datetimes are the session's UTC
    started, cpu = time.monotonic(), os.times()
    done = subprocess.run([str(python), str(READER), str(home / "catalog.db"), str(home / "warehouse"),
                           str(cache_root() / "ivy"), *topics], capture_output=True, text=True, env=env, timeout=900)
    after = os.times()
    assert done.returncode == 0, f"Spark with Iceberg's runtime failed:\n{done.stderr[-6000:]}"
    out = json.loads(done.stdout.strip().splitlines()[-1])
    python_cpu = after.children_user + after.children_system - cpu.children_user - cpu.children_system
    print(f"Spark reader: {time.monotonic() - started:.1f} s wall, CPU {python_cpu:.1f} s in Python and "
          f"{out['jvm_cpu_seconds']} s in the JVM (its session {out['seconds']} s)")
    return out["tables"]


@pytest.mark.timeout(900)  # the first run in a fresh cache downloads PySpark 4.1 (its venv is 0.5 GB)
def test_spark_reads_each_modes_table_through_icebergs_runtime(registry_broker) -> None:
    b, url = registry_broker
    registry = SchemaRegistryClient({"url": url})
    _produce_key_value(b.bootstrap)
    _produce_avro(b.bootstrap, registry)
    _produce_protobuf(b.bootstrap, registry)
    partitions = {KV: 2, AVRO: 2, PROTO: 1}
    for topic, n in partitions.items():
        ends = _ends(b.bootstrap, topic, n)
        assert _wait_for_table(b.data_dir, topic, ends) == ends
    spark = _read_with_spark(b.data_dir, list(partitions))

    catalog = open_catalog(CatalogSettings.resolve("", "", b.data_dir))
    avro = AvroDeserializer(registry, json.dumps(ORDER))
    ctx = SerializationContext(AVRO, MessageField.VALUE)
    reading, _ = reading_classes(with_seq=True)
    decoders = {KV: lambda v: v, AVRO: lambda v: avro(v, ctx), PROTO: lambda v: _reading_value(reading.FromString(v))}
    for topic, n in partitions.items():
        scanned = catalog.load_table(("rivulet", topic)).scan().to_arrow().to_pylist()
        iceberg = plain(sorted(scanned, key=lambda r: (r["partition"], r["offset"])))
        topic_rows = plain(_from_topic(b.bootstrap, topic, n, decoders[topic]))
        # Spark's rows are pyiceberg's, every column; both are the topic's committed records.
        assert spark[topic]["rows"] == iceberg, topic
        assert iceberg == topic_rows, topic
    kv = spark[KV]
    assert kv["schema"] == ("struct<key:binary,value:binary,partition:int,offset:bigint,timestamp:timestamp,"
                            "headers:array<struct<key:string,value:binary>>>")
    values = [r["value"] for r in kv["rows"]]
    assert len(kv["rows"]) == 71 and values.count(None) == 5
    assert plain(b"kept-0") in values and plain(b"aborted-0") not in values
    assert sum(1 for r in kv["rows"] if {"key": "empty", "value": None} in r["headers"]) == 20
    # The typed tables: the metadata columns, then the value's typed struct.
    typed_head = "struct<key:binary,partition:int,offset:bigint,timestamp:timestamp,headers:array<struct<key:string,value:binary>>"
    assert spark[AVRO]["schema"] == (
        f"{typed_head},value:struct<id:bigint,item:string,price:double,paid:boolean,tags:array<string>,"
        "placed:timestamp,status:string,coupon:string>>")
    typed = [r["value"] for r in spark[AVRO]["rows"] if r["value"]]
    assert len(typed) == 30 and sum(1 for v in typed if v["coupon"]) == 6
    assert spark[PROTO]["schema"] == (
        f"{typed_head},value:struct<sensor:string,value:double,samples:array<int>,unit:string,"
        "at:struct<lat:double,lon:double>,seq:bigint>>")
    assert [r["value"]["seq"] for r in spark[PROTO]["rows"]] == [2**40 + i for i in range(12)]
