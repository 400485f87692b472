"""Topics as Iceberg tables in the schema modes, against a broker serving its schema registry:
values produced with confluent-kafka's AvroSerializer and ProtobufSerializer become typed
columns (read back with pyiceberg and compared with the topic read back and deserialized); a
new compatible version adds a column; records the table cannot hold land in ``<topic>~dlq``
with their reason; a broker running no registry reads another's by URL; and a broker killed
with kill -9 while it translates leaves each record in the typed table once."""

from __future__ import annotations

import io
import json
import random
import ssl
import struct
import urllib.request
from collections import Counter

import httpx
import pytest

pytest.importorskip("pyiceberg", reason="the iceberg extra: pip install -e '.[iceberg]'")
import fastavro  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402

from rivulet.iceberg.catalog import CatalogSettings, open_catalog  # noqa: E402
from rivulet.testing import BrokerProcess, free_port  # noqa: E402
from tests.integration.test_iceberg import _create, _ends, _topic_rows, _wait_for_table, kill_while_translating  # noqa: E402
from conftest import wait_for_registry  # noqa: E402

ORDER_V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"}, {"name": "item", "type": "string"}, {"name": "price", "type": "double"},
    {"name": "tags", "type": {"type": "array", "items": "string"}}]}
ORDER_V2 = {**ORDER_V1, "fields": [*ORDER_V1["fields"], {"name": "coupon", "type": ["null", "string"], "default": None}]}


def _with_registry(overrides: dict[str, str] | None = None, data_dir: str | None = None) -> tuple[BrokerProcess, str]:
    port = free_port()
    b = BrokerProcess({"num.partitions": "1", "schema.registry.listeners": f"http://127.0.0.1:{port}",
                       "metrics.listener": f"http://127.0.0.1:{free_port()}", **(overrides or {})}, data_dir=data_dir)
    b.start()
    url = f"http://127.0.0.1:{port}"
    wait_for_registry(url)
    return b, url


@pytest.fixture(scope="module")
def registry_broker():
    b, url = _with_registry()
    yield b, url
    b.cleanup()


def _table(data_dir: str, name: str) -> list[dict]:
    table = open_catalog(CatalogSettings.resolve("", "", data_dir)).load_table(("rivulet", name))
    return sorted(table.scan().to_arrow().to_pylist(), key=lambda r: (r["partition"], r["offset"]))


def test_avro_values_become_typed_columns_and_evolve(registry_broker) -> None:
    b, url = registry_broker
    topic = "orders-avro"
    _create(b.bootstrap, topic, 2, {"iceberg.mode": "value_schema_id_prefix", "iceberg.target.lag.ms": "300"})
    client = SchemaRegistryClient({"url": url})
    ctx = SerializationContext(topic, MessageField.VALUE)
    v1, v2 = AvroSerializer(client, json.dumps(ORDER_V1)), AvroSerializer(client, json.dumps(ORDER_V2))
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
    for i in range(40):
        order = {"id": i, "item": f"item-{i % 7}", "price": i * 1.25, "tags": [f"t{i % 3}"] * (i % 3)}
        value = v1(order, ctx) if i < 25 else v2({**order, "coupon": f"C{i}" if i % 2 else None}, ctx)
        p.produce(topic, key=f"customer-{i % 5}".encode(), value=value)
    v1_id = struct.unpack(">I", v1({"id": 0, "item": "", "price": 0.0, "tags": []}, ctx)[1:5])[0]
    bad = {b"oops": "bad-magic", b"\x00" + struct.pack(">I", 99999) + b"\x02": "unknown-schema-id",
           b"\x00" + struct.pack(">I", v1_id) + b"\xff": "undecodable"}
    for value in bad:
        p.produce(topic, key=b"bad", value=value, partition=1)
    p.produce(topic, key=b"tombstone", value=None, partition=0)
    assert p.flush(30) == 0
    ends = _ends(b.bootstrap, topic, 2)
    assert _wait_for_table(b.data_dir, topic, ends) == ends
    # The table against the topic read back and deserialized (the V1 records read as V2).
    records = _topic_rows(b.bootstrap, topic, 2)
    de = AvroDeserializer(client, json.dumps(ORDER_V2))
    expected = [(r[0], r[1], r[2], None if r[3] is None else {"coupon": None, **de(r[3], ctx)})
                for r in records if r[3] not in bad]
    rows = _table(b.data_dir, topic)
    assert [(r["partition"], r["offset"], r["key"], r["value"]) for r in rows] == expected
    assert len(expected) == 41 and sum(1 for e in expected if e[3] and e[3]["coupon"]) == 8
    assert [r["timestamp"].timestamp() * 1000 for r in rows] == [r[4] for r in records if r[3] not in bad]
    # The evolved schema: the V2 column added to the V1 ones.
    schema = open_catalog(CatalogSettings.resolve("", "", b.data_dir)).load_table(("rivulet", topic)).schema()
    assert [f.name for f in schema.find_field("value").field_type.fields] == ["id", "item", "price", "tags", "coupon"]
    dead = _table(b.data_dir, f"{topic}~dlq")
    assert [(r["partition"], r["value"]) for r in dead] == [(1, v) for v in bad]
    assert [r["reason"].split(":")[0] for r in dead] == list(bad.values())
    assert [r["offset"] for r in dead] == [r[1] for r in records if r[3] in bad]
    text = urllib.request.urlopen(f"http://127.0.0.1:{b.overrides['metrics.listener'].rsplit(':', 1)[1]}/metrics",
                                  timeout=10).read().decode()
    assert f'rivulet_iceberg_records_dead_lettered_total{{partition="1",topic="{topic}"}} 3.0' in text


def reading_classes(with_seq: bool = False) -> tuple[type, type]:
    """The test schema lab.Reading (string, double, repeated int32, enum, nested message; an
    int64 ``seq`` too with ``with_seq``) and lab.Location, as protobuf message classes."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="readings.proto", package="lab", syntax="proto3")
    unit = fdp.enum_type.add(name="Unit")
    unit.value.add(name="CELSIUS", number=0)
    unit.value.add(name="KELVIN", number=1)
    loc = fdp.message_type.add(name="Location")
    loc.field.add(name="lat", number=1, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    loc.field.add(name="lon", number=2, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    m = fdp.message_type.add(name="Reading")
    m.field.add(name="sensor", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    m.field.add(name="value", number=2, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    m.field.add(name="samples", number=3, type=F.TYPE_INT32, label=F.LABEL_REPEATED)
    m.field.add(name="unit", number=4, type=F.TYPE_ENUM, type_name=".lab.Unit", label=F.LABEL_OPTIONAL)
    m.field.add(name="at", number=5, type=F.TYPE_MESSAGE, type_name=".lab.Location", label=F.LABEL_OPTIONAL)
    if with_seq:
        m.field.add(name="seq", number=6, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return (message_factory.GetMessageClass(pool.FindMessageTypeByName("lab.Reading")),
            message_factory.GetMessageClass(pool.FindMessageTypeByName("lab.Location")))

def test_protobuf_values_become_typed_columns(registry_broker) -> None:
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    b, url = registry_broker
    topic = "readings-proto"
    _create(b.bootstrap, topic, 1, {"iceberg.mode": "value_schema_id_prefix", "iceberg.target.lag.ms": "300"})
    Reading, Location = reading_classes()
    ser = ProtobufSerializer(Reading, SchemaRegistryClient({"url": url}), {"use.deprecated.format": False})
    ctx = SerializationContext(topic, MessageField.VALUE)
    p = Producer({"bootstrap.servers": b.bootstrap})
    expected = []
    for i in range(12):
        msg = Reading(sensor=f"s{i % 3}", value=i / 4, samples=list(range(i % 4)), unit=i % 2)
        if i % 3 == 0:
            msg.at.CopyFrom(Location(lat=48.0 + i, lon=2.0))
        p.produce(topic, key=str(i).encode(), value=ser(msg, ctx))
        expected.append({"sensor": f"s{i % 3}", "value": i / 4, "samples": list(range(i % 4)),
                         "unit": ["CELSIUS", "KELVIN"][i % 2], "at": {"lat": 48.0 + i, "lon": 2.0} if i % 3 == 0 else None})
    assert p.flush(30) == 0
    _wait_for_table(b.data_dir, topic, {0: 12})
    rows = _table(b.data_dir, topic)
    assert [(r["offset"], r["key"], r["value"]) for r in rows] == [(i, str(i).encode(), e) for i, e in enumerate(expected)]


def test_latest_mode_reads_unprefixed_values(registry_broker) -> None:
    b, url = registry_broker
    topic = "orders-plain"
    SchemaRegistryClient({"url": url}).register_schema(f"{topic}-value", Schema(json.dumps(ORDER_V1), "AVRO"))
    _create(b.bootstrap, topic, 1, {"iceberg.mode": "value_schema_latest", "iceberg.target.lag.ms": "300",
                                    "iceberg.invalid.record.action": "drop"})
    parsed = fastavro.parse_schema(ORDER_V1)
    p = Producer({"bootstrap.servers": b.bootstrap})
    orders = [{"id": i, "item": "pen", "price": 1.5, "tags": []} for i in range(5)]
    for o in orders:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, o)
        p.produce(topic, value=buf.getvalue())
    p.produce(topic, value=b"\xff\xff")  # does not decode: dropped (and counted)
    assert p.flush(30) == 0
    _wait_for_table(b.data_dir, topic, {0: 6})
    assert [r["value"] for r in _table(b.data_dir, topic)] == orders
    assert "1 record(s) its Iceberg table cannot hold were dropped, such as partition 0 offset 5" in b.output()


def test_an_external_registry_by_url(registry_broker, broker_factory) -> None:
    """A broker running no registry of its own reads the schemas from another's by URL
    (iceberg.schema.registry.url), as from any Confluent-compatible registry."""
    _, url = registry_broker
    b = broker_factory({"num.partitions": "1", "iceberg.schema.registry.url": url})
    topic = "orders-elsewhere"
    _create(b.bootstrap, topic, 1, {"iceberg.mode": "value_schema_id_prefix", "iceberg.target.lag.ms": "300"})
    ser = AvroSerializer(SchemaRegistryClient({"url": url}), json.dumps(ORDER_V1))
    ctx = SerializationContext(topic, MessageField.VALUE)
    p = Producer({"bootstrap.servers": b.bootstrap})
    orders = [{"id": i, "item": f"item-{i}", "price": i / 4, "tags": ["a"] * (i % 2)} for i in range(6)]
    for o in orders:
        p.produce(topic, key=b"k", value=ser(o, ctx))
    assert p.flush(30) == 0
    _wait_for_table(b.data_dir, topic, {0: 6})
    assert [r["value"] for r in _table(b.data_dir, topic)] == orders
    schema = open_catalog(CatalogSettings.resolve("", "", b.data_dir)).load_table(("rivulet", topic)).schema()
    assert [f.name for f in schema.find_field("value").field_type.fields] == ["id", "item", "price", "tags"]


def test_an_external_registry_with_basic_auth(broker_factory) -> None:
    """iceberg.schema.registry.basic.auth.user.info is sent: the registry (this broker's own,
    read over HTTP as an external one) refuses callers without credentials."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    b = broker_factory({"num.partitions": "1", "schema.registry.listeners": url,
                        "schema.registry.authentication.method": "BASIC", "iceberg.schema.registry.url": url,
                        "iceberg.schema.registry.basic.auth.user.info": "sam:sam-secret"})
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "sam", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"sam-secret")]).values():
        f.result(30)
    wait_for_registry(url, auth=("sam", "sam-secret"))
    assert httpx.get(f"{url}/subjects", timeout=30).status_code == 401
    topic = "orders-guarded"
    _create(b.bootstrap, topic, 1, {"iceberg.mode": "value_schema_id_prefix", "iceberg.target.lag.ms": "300"})
    ser = AvroSerializer(SchemaRegistryClient({"url": url, "basic.auth.user.info": "sam:sam-secret"}),
                         json.dumps(ORDER_V1))
    ctx = SerializationContext(topic, MessageField.VALUE)
    p = Producer({"bootstrap.servers": b.bootstrap})
    orders = [{"id": i, "item": "pen", "price": 2.5, "tags": []} for i in range(3)]
    for o in orders:
        p.produce(topic, value=ser(o, ctx))
    assert p.flush(30) == 0
    _wait_for_table(b.data_dir, topic, {0: 3})
    assert [r["value"] for r in _table(b.data_dir, topic)] == orders



def test_an_external_registry_over_mutual_tls(broker_factory, tls_certs) -> None:
    """iceberg.schema.registry.ssl.*: an https registry whose certificate a private CA signed,
    which requires a client certificate, is read with the CA and the certificate given (the
    registry is this broker's own, read over https as an external one)."""
    port = free_port()
    url = f"https://localhost:{port}"
    b = broker_factory({"num.partitions": "1", "schema.registry.listeners": url,
                        "schema.registry.ssl.client.authentication": "REQUIRED", **tls_certs.broker_ssl_props(),
                        "iceberg.schema.registry.url": url,
                        "iceberg.schema.registry.ssl.ca.location": str(tls_certs.ca.pem),
                        "iceberg.schema.registry.ssl.certificate.location": str(tls_certs.client.cert),
                        "iceberg.schema.registry.ssl.key.location": str(tls_certs.client.key)})
    conf = {"url": url, "ssl.ca.location": str(tls_certs.ca.pem),
            "ssl.certificate.location": str(tls_certs.client.cert), "ssl.key.location": str(tls_certs.client.key)}
    mutual = ssl.create_default_context(cafile=str(tls_certs.ca.pem))
    mutual.load_cert_chain(str(tls_certs.client.cert), str(tls_certs.client.key))
    wait_for_registry(url, verify=mutual)
    with pytest.raises(httpx.HTTPError):  # no client certificate: refused in the handshake
        httpx.get(f"{url}/subjects", verify=ssl.create_default_context(cafile=str(tls_certs.ca.pem)), timeout=30)
    topic = "orders-tls"
    _create(b.bootstrap, topic, 1, {"iceberg.mode": "value_schema_id_prefix", "iceberg.target.lag.ms": "300"})
    ser = AvroSerializer(SchemaRegistryClient(conf), json.dumps(ORDER_V1))
    ctx = SerializationContext(topic, MessageField.VALUE)
    p = Producer({"bootstrap.servers": b.bootstrap})
    orders = [{"id": i, "item": "pen", "price": 0.5, "tags": ["t"]} for i in range(4)]
    for o in orders:
        p.produce(topic, value=ser(o, ctx))
    assert p.flush(30) == 0
    _wait_for_table(b.data_dir, topic, {0: 4})
    assert [r["value"] for r in _table(b.data_dir, topic)] == orders


def test_a_registry_certificate_that_cannot_be_read_stops_the_broker_in_one_line(tmp_path) -> None:
    b = BrokerProcess({"iceberg.schema.registry.url": "https://registry.example:8081",
                       "iceberg.schema.registry.ssl.ca.location": str(tmp_path / "missing-ca.pem")})
    with pytest.raises(RuntimeError):
        b.start()
    try:
        out = b.output()
        lines = [line for line in out.splitlines() if "iceberg.schema.registry.ssl" in line]
        assert len(lines) == 1 and "No such file" in lines[0], out
        assert "Traceback" not in out and b.proc.returncode == 2
    finally:
        b.cleanup()

def test_kill_9_while_translating_typed_values_adds_each_record_once(tmp_path) -> None:
    (tmp_path / "data").mkdir()
    b, url = _with_registry({"iceberg.translation.max.bytes": "65536"}, str(tmp_path / "data"))
    try:
        topic = "typed-clicks"
        _create(b.bootstrap, topic, 2, {"iceberg.mode": "value_schema_id_prefix", "iceberg.target.lag.ms": "100"})
        ser = AvroSerializer(SchemaRegistryClient({"url": url}), json.dumps(ORDER_V1))
        ctx = SerializationContext(topic, MessageField.VALUE)

        def produce(p: Producer, n: int) -> int:
            for _ in range(3000):
                p.produce(topic, key=str(n % 13).encode(),
                          value=ser({"id": n, "item": "x" * 40, "price": 1.0, "tags": []}, ctx))
                n += 1
            return n
        n = kill_while_translating(b, topic, produce, random.Random(0))
        ends = _ends(b.bootstrap, topic, 2)
        assert sum(ends.values()) == n
        _wait_for_table(b.data_dir, topic, ends, timeout=180)
        rows = _table(b.data_dir, topic)
        twice = [k for k, c in Counter((r["partition"], r["offset"]) for r in rows).items() if c > 1]
        assert not twice, f"records in the table more than once: {twice[:10]}"
        assert sorted(r["value"]["id"] for r in rows) == list(range(n))
        assert [(r["partition"], r["offset"]) for r in rows] == [(r[0], r[1]) for r in _topic_rows(b.bootstrap, topic, 2)]
    finally:
        b.cleanup()
