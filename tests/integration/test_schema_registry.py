"""The schema registry a broker serves on schema.registry.listeners, driven by confluent-kafka's
SchemaRegistryClient, AvroSerializer and AvroDeserializer unchanged, and by plain HTTP for
Confluent's error bodies and content types."""

from __future__ import annotations

import json
import time
import uuid

import httpx
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from conftest import wait_for_registry
from rivulet.testing import BrokerProcess, free_port

pytestmark = pytest.mark.integration

V1 = {"type": "record", "name": "Reading", "namespace": "rivulet.test",
      "fields": [{"name": "sensor", "type": "string"}, {"name": "value", "type": "double"}]}
V2 = {**V1, "fields": V1["fields"] + [{"name": "unit", "type": "string", "default": "C"}]}
BAD = {**V1, "fields": V1["fields"] + [{"name": "site", "type": "string"}]}  # no default: not BACKWARD


def test_serializers_round_trip_and_evolve(registry_broker):
    broker, url = registry_broker
    topic = f"readings-{uuid.uuid4().hex[:6]}"
    client = SchemaRegistryClient({"url": url})
    ser1 = AvroSerializer(client, json.dumps(V1))
    ser2 = AvroSerializer(client, json.dumps(V2))
    p = Producer({"bootstrap.servers": broker.bootstrap})
    ctx = SerializationContext(topic, MessageField.VALUE)
    p.produce(topic, ser1({"sensor": "s1", "value": 1.5}, ctx))
    p.produce(topic, ser2({"sensor": "s2", "value": 2.5, "unit": "F"}, ctx))
    assert p.flush(30) == 0
    subject = f"{topic}-value"
    assert client.get_subjects().count(subject) == 1
    assert client.get_versions(subject) == [1, 2]
    latest = client.get_latest_version(subject)
    assert latest.version == 2 and json.loads(latest.schema.schema_str)["fields"][2]["name"] == "unit"

    # A consumer with no schema of its own reads each record with the writer's schema by id.
    de = AvroDeserializer(client)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 2 and time.monotonic() < deadline:
        m = c.poll(1)
        if m is not None and m.error() is None:
            got.append(de(m.value(), ctx))
    c.close()
    assert got == [{"sensor": "s1", "value": 1.5}, {"sensor": "s2", "value": 2.5, "unit": "F"}]

    # An incompatible change is refused with 409, and nothing changes.
    with pytest.raises(SchemaRegistryError) as e:
        client.register_schema(subject, Schema(json.dumps(BAD), "AVRO"))
    assert e.value.http_status_code == 409 and e.value.error_code == 409
    assert "READER_FIELD_MISSING_DEFAULT_VALUE" in e.value.error_message
    assert client.get_versions(subject) == [1, 2]
    assert client.test_compatibility(subject, Schema(json.dumps(BAD), "AVRO")) is False
    assert client.test_compatibility(subject, Schema(json.dumps(V2), "AVRO")) is True


def test_lookup_deletes_and_config_through_the_client(registry_broker):
    _broker, url = registry_broker
    client = SchemaRegistryClient({"url": url})
    subject = f"s-{uuid.uuid4().hex[:6]}"
    sid = client.register_schema(subject, Schema(json.dumps(V1), "AVRO"))
    assert client.get_schema(sid).schema_str == json.dumps(V1, separators=(",", ":"))
    found = client.lookup_schema(subject, Schema(json.dumps(V1), "AVRO"))
    assert found.schema_id == sid and found.version == 1
    assert client.set_compatibility(subject, "FULL_TRANSITIVE") == {"compatibility": "FULL_TRANSITIVE"}
    assert client.get_compatibility(subject) == "FULL_TRANSITIVE"
    client.register_schema(subject, Schema(json.dumps(V2), "AVRO"))
    assert client.delete_version(subject, 1) == 1
    assert client.get_versions(subject) == [2]
    assert sorted(client.delete_subject(subject)) == [2]
    assert subject not in client.get_subjects()
    assert sorted(client.delete_subject(subject, permanent=True)) == [1, 2]
    with pytest.raises(SchemaRegistryError) as e:
        client.get_versions(subject)
    assert e.value.error_code == 40401


def test_references(registry_broker):
    _broker, url = registry_broker
    client = SchemaRegistryClient({"url": url})
    tag = uuid.uuid4().hex[:6]
    addr = {"type": "record", "name": "Addr", "namespace": f"t{tag}", "fields": [{"name": "city", "type": "string"}]}
    client.register_schema(f"addr-{tag}", Schema(json.dumps(addr), "AVRO"))
    user = {"type": "record", "name": "User", "namespace": f"t{tag}",
            "fields": [{"name": "home", "type": f"t{tag}.Addr"}]}
    refs = [SchemaReference(f"t{tag}.Addr", f"addr-{tag}", 1)]
    uid = client.register_schema(f"user-{tag}", Schema(json.dumps(user), "AVRO", refs))
    got = client.get_schema(uid)
    assert [(r.name, r.subject, r.version) for r in got.references] == [(f"t{tag}.Addr", f"addr-{tag}", 1)]
    r = httpx.get(f"{url}/subjects/addr-{tag}/versions/1/referencedby")
    assert r.json() == [uid]
    r = httpx.delete(f"{url}/subjects/addr-{tag}/versions/1")
    assert r.status_code == 422 and r.json()["error_code"] == 42206


def test_error_bodies_and_content_types(registry_broker):
    _broker, url = registry_broker
    r = httpx.get(f"{url}/subjects/none-such/versions")
    assert r.status_code == 404 and r.json() == {"error_code": 40401, "message": "Subject 'none-such' not found."}
    assert r.headers["content-type"] == "application/vnd.schemaregistry.v1+json"
    r = httpx.get(f"{url}/schemas/ids/987654")
    assert r.status_code == 404 and r.json() == {"error_code": 40403, "message": "Schema 987654 not found"}
    r = httpx.post(f"{url}/subjects/x/versions", content=json.dumps({"schema": "{not avro"}),
                   headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    assert r.status_code == 422 and r.json()["error_code"] == 42201
    r = httpx.put(f"{url}/config", json={"compatibility": "SOMETIMES"})
    assert r.status_code == 422 and r.json()["error_code"] == 42203
    r = httpx.get(f"{url}/subjects/x/versions/zero")
    assert r.status_code == 422 and r.json()["error_code"] == 42202
    r = httpx.post(f"{url}/subjects/x/versions", content=b"<xml/>", headers={"Content-Type": "text/xml"})
    assert r.status_code == 415
    assert httpx.get(f"{url}/schemas/types").json() == ["AVRO", "JSON", "PROTOBUF"]


def test_schemas_survive_a_restart_and_ids_continue(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with BrokerProcess({"schema.registry.listeners": url}, data_dir=str(tmp_path)) as b:
        wait_for_registry(url)
        client = SchemaRegistryClient({"url": url})
        first = client.register_schema("kept", Schema(json.dumps(V1), "AVRO"))
        b.kill()  # kill -9: what was answered is in the topic, acknowledged by acks=all
        b.start()
        wait_for_registry(url)
        client = SchemaRegistryClient({"url": url})
        assert client.get_schema(first).schema_str == json.dumps(V1, separators=(",", ":"))
        second = client.register_schema("other", Schema(json.dumps(V2), "AVRO"))
        assert second > first


def test_rivulet_registry_command_against_a_cluster(broker_factory, tmp_path):
    """``rivulet registry -b ...``: the registry on its own, beside a broker that serves none."""
    import subprocess
    import sys
    b = broker_factory()
    port = free_port()
    log = open(tmp_path / "registry.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "rivulet", "registry", "-b", b.bootstrap, "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for_registry(url)
        client = SchemaRegistryClient({"url": url})
        sid = client.register_schema("standalone", Schema(json.dumps(V1), "AVRO"))
        assert client.get_schema(sid).schema_str == json.dumps(V1, separators=(",", ":"))
    finally:
        proc.terminate()
        assert proc.wait(30) == 0
        log.close()
    assert "Rivulet schema registry on http://127.0.0.1:" in (tmp_path / "registry.log").read_text()


def test_json_schema_serializers(registry_broker):
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
    _broker, url = registry_broker
    client = SchemaRegistryClient({"url": url})
    topic = f"json-{uuid.uuid4().hex[:6]}"
    v1 = {"type": "object", "title": "Reading", "properties": {"sensor": {"type": "string"}},
          "required": ["sensor"], "additionalProperties": False}
    ctx = SerializationContext(topic, MessageField.VALUE)
    data = JSONSerializer(json.dumps(v1), client)({"sensor": "s1"}, ctx)
    assert JSONDeserializer(None, schema_registry_client=client)(data, ctx) == {"sensor": "s1"}
    subject = f"{topic}-value"
    assert client.get_latest_version(subject).schema.schema_type == "JSON"
    # Closed content model: an optional property may be added, a required one may not.
    v2 = {**v1, "properties": {**v1["properties"], "unit": {"type": "string"}}}
    client.register_schema(subject, Schema(json.dumps(v2), "JSON"))
    v3 = {**v2, "required": ["sensor", "site"], "properties": {**v2["properties"], "site": {"type": "string"}}}
    with pytest.raises(SchemaRegistryError) as e:
        client.register_schema(subject, Schema(json.dumps(v3), "JSON"))
    assert e.value.error_code == 409 and "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL" in e.value.error_message
    r = httpx.get(f"{url}/subjects/{subject}/versions/latest")
    assert r.json()["schemaType"] == "JSON" and r.json()["version"] == 2


def test_protobuf_serializers(registry_broker):
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    _broker, url = registry_broker
    client = SchemaRegistryClient({"url": url})
    topic = f"proto-{uuid.uuid4().hex[:6]}"
    fdp = descriptor_pb2.FileDescriptorProto(name=f"{topic}.proto", package="rivulet.test", syntax="proto3")
    m = fdp.message_type.add(name="Reading")
    m.field.add(name="sensor", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    Reading = message_factory.GetMessageClass(pool.FindMessageTypeByName("rivulet.test.Reading"))
    ctx = SerializationContext(topic, MessageField.VALUE)
    ser = ProtobufSerializer(Reading, client, {"use.deprecated.format": False})
    data = ser(Reading(sensor="s1"), ctx)
    got = ProtobufDeserializer(Reading, {"use.deprecated.format": False})(data, ctx)
    assert got.sensor == "s1"
    latest = client.get_latest_version(f"{topic}-value")
    assert latest.schema.schema_type == "PROTOBUF"
    # A .proto text as other clients send it: a field's type changed is refused.
    bad = 'syntax = "proto3";\npackage rivulet.test;\nmessage Reading { int64 sensor = 1; }\n'
    with pytest.raises(SchemaRegistryError) as e:
        client.register_schema(f"{topic}-value", Schema(bad, "PROTOBUF"))
    assert e.value.error_code == 409 and "FIELD_SCALAR_KIND_CHANGED" in e.value.error_message
    good = 'syntax = "proto3";\npackage rivulet.test;\nmessage Reading { string sensor = 1; double value = 2; }\n'
    assert client.register_schema(f"{topic}-value", Schema(good, "PROTOBUF")) > latest.schema_id


def test_protobuf_serializer_with_a_well_known_type(registry_broker):
    # The serializer registers the schema without google/protobuf/timestamp.proto as a reference
    # (every Confluent registry has it built in); confluent-kafka-python's own
    # test_proto_serializers failed here with 42201.
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2
    _broker, url = registry_broker
    client = SchemaRegistryClient({"url": url})
    topic = f"proto-wkt-{uuid.uuid4().hex[:6]}"
    stamp = descriptor_pb2.FileDescriptorProto()
    timestamp_pb2.DESCRIPTOR.CopyToProto(stamp)
    fdp = descriptor_pb2.FileDescriptorProto(name=f"{topic}.proto", package="rivulet.test", syntax="proto3",
                                             dependency=[stamp.name])
    m = fdp.message_type.add(name="Event")
    m.field.add(name="at", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
                type_name=".google.protobuf.Timestamp", label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(stamp)
    pool.Add(fdp)
    Event = message_factory.GetMessageClass(pool.FindMessageTypeByName("rivulet.test.Event"))
    ctx = SerializationContext(topic, MessageField.VALUE)
    data = ProtobufSerializer(Event, client, {"use.deprecated.format": False})(Event(at={"seconds": 42}), ctx)
    assert ProtobufDeserializer(Event, {"use.deprecated.format": False})(data, ctx).at.seconds == 42
    assert client.get_latest_version(f"{topic}-value").schema.references == []


def test_protobuf_serializer_with_confluents_decimal_and_meta(registry_broker):
    # confluent/type/decimal.proto and confluent/meta.proto are never registered as references
    # either (the serializer skips every confluent/ file): the registry resolves them built in.
    from confluent_kafka.schema_registry.confluent import meta_pb2
    from confluent_kafka.schema_registry.confluent.type import decimal_pb2
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    _broker, url = registry_broker
    client = SchemaRegistryClient({"url": url})
    topic = f"proto-confluent-{uuid.uuid4().hex[:6]}"
    pool = descriptor_pool.DescriptorPool()
    deps = []
    for module in (descriptor_pb2, meta_pb2, decimal_pb2):
        dep = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(dep)
        pool.Add(dep)
        deps.append(dep.name)
    fdp = descriptor_pb2.FileDescriptorProto(name=f"{topic}.proto", package="rivulet.test", syntax="proto3",
                                             dependency=deps[1:])
    m = fdp.message_type.add(name="Price")
    field = m.field.add(name="amount", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
                        type_name=".confluent.type.Decimal", label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    field.options.Extensions[meta_pb2.field_meta].doc = "the price"
    pool.Add(fdp)
    Price = message_factory.GetMessageClass(pool.FindMessageTypeByName("rivulet.test.Price"))
    ctx = SerializationContext(topic, MessageField.VALUE)
    value = Price(amount={"value": b"\x04\xd2", "precision": 6, "scale": 2})
    data = ProtobufSerializer(Price, client, {"use.deprecated.format": False})(value, ctx)
    assert ProtobufDeserializer(Price, {"use.deprecated.format": False})(data, ctx).amount.scale == 2
    assert client.get_latest_version(f"{topic}-value").schema.references == []


def test_odd_subjects_and_oversized_bodies(registry_broker):
    _broker, url = registry_broker
    client = SchemaRegistryClient({"url": url})
    tag = uuid.uuid4().hex[:6]
    odd = [f"{tag}/versions", f"{tag} spa ce", f"{tag}ünï", f"{tag}%x", f"{tag}:.:"]
    for s in odd:
        client.register_schema(s, Schema('"string"', "AVRO"))
        assert client.get_versions(s) == [1] and client.get_latest_version(s).subject == s
    assert set(odd) <= set(client.get_subjects())
    r = httpx.post(f"{url}/subjects/{tag}-big/versions", content=b'{"schema":"' + b"x" * (17 << 20) + b'"}',
                   headers={"Content-Type": "application/json"})
    assert r.status_code == 413
    big = json.dumps({"type": "record", "name": "R", "doc": "x" * (2 << 20), "fields": []})
    r = httpx.post(f"{url}/subjects/{tag}-big/versions", json={"schema": big})
    assert r.json()["error_code"] == 42209
    r = httpx.post(f"{url}/subjects/{tag}-bad/versions", json={"schema": '"int"', "schemaType": "XML"})
    assert r.status_code == 422 and r.json()["error_code"] == 42201
    r = httpx.post(f"{url}/subjects/{tag}-ctl%01/versions", json={"schema": '"int"'})
    assert r.status_code == 422 and r.json()["error_code"] == 42208
    assert not [s for s in client.get_subjects() if s.startswith(f"{tag}-")]  # nothing refused was stored


def test_rivulet_consume_decodes_the_wire_format(registry_broker):
    """``rivulet consume --value-format``: values the serializers wrote, printed as JSON."""
    import subprocess
    import sys
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    broker, url = registry_broker
    client = SchemaRegistryClient({"url": url})
    tag = uuid.uuid4().hex[:6]
    fdp = descriptor_pb2.FileDescriptorProto(name=f"c{tag}.proto", package=f"c{tag}", syntax="proto3")
    msg = fdp.message_type.add(name="Outer")
    msg.nested_type.add(name="Inner").field.add(name="n", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
                                                 label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    Inner = message_factory.GetMessageClass(pool.FindMessageTypeByName(f"c{tag}.Outer.Inner"))
    cases = {
        "avro": (AvroSerializer(client, json.dumps(V1)), {"sensor": "s1", "value": 1.5}),
        "json-schema": (JSONSerializer(json.dumps({"type": "object", "properties": {"a": {"type": "string"}}}),
                                       client), {"a": "x"}),
        "protobuf": (ProtobufSerializer(Inner, client, {"use.deprecated.format": False}), Inner(n=7)),
    }
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for fmt, (ser, value) in cases.items():
        topic = f"wire-{fmt}-{tag}"
        p.produce(topic, ser(value, SerializationContext(topic, MessageField.VALUE)))
    assert p.flush(30) == 0
    expected = {"avro": {"sensor": "s1", "value": 1.5}, "json-schema": {"a": "x"}, "protobuf": {"n": "7"}}
    for fmt, want in expected.items():
        r = subprocess.run([sys.executable, "-m", "rivulet", "consume", "-b", broker.bootstrap, "-t",
                            f"wire-{fmt}-{tag}", "-e", "-q", "--value-format", fmt, "-r", url],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert [json.loads(line) for line in r.stdout.splitlines()] == [want], (fmt, r.stdout, r.stderr)


def test_console_shows_subjects_versions_and_decoded_records(registry_broker):
    """The web console given the registry: its subjects, a subject's versions and schema, and a
    topic's values decoded with their writers' schemas in the message browser."""
    from rivulet.cli.console.app import create_app
    from rivulet.cli.console.backend import ClusterView
    from rivulet.cli.console.registry import RegistryView
    from rivulet.registry.client import RegistryClient
    broker, url = registry_broker
    topic = f"console-{uuid.uuid4().hex[:6]}"
    client = SchemaRegistryClient({"url": url})
    ctx = SerializationContext(topic, MessageField.VALUE)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    p.produce(topic, AvroSerializer(client, json.dumps(V1))({"sensor": "s1", "value": 1.5}, ctx))
    p.produce(topic, AvroSerializer(client, json.dumps(V2))({"sensor": "s2", "value": 2.5, "unit": "F"}, ctx))
    p.produce(topic, b"plain bytes")
    assert p.flush(30) == 0
    view = ClusterView({"bootstrap.servers": broker.bootstrap})
    try:
        app = create_app(view, broker.bootstrap, RegistryView(RegistryClient(url))).test_client()
        page = app.get("/schemas")
        assert page.status_code == 200 and f'data-subject="{topic}-value"' in page.text
        page = app.get(f"/schemas/{topic}-value")
        assert page.status_code == 200 and "Version 2," in page.text and "&#34;unit&#34;" in page.text
        assert "compatibility BACKWARD" in page.text
        page = app.get(f"/schemas/{topic}-value?version=1")
        assert "Version 1," in page.text and "&#34;unit&#34;" not in page.text
        assert app.get(f"/schemas/no-such-{topic}").status_code == 404
        page = app.get(f"/topics/{topic}/messages?offset=0&view=registry")
        assert page.status_code == 200
        assert "&#34;sensor&#34;: &#34;s1&#34;" in page.text and "&#34;unit&#34;: &#34;F&#34;" in page.text
        assert "(not in the schema registry&#39;s wire format)" in page.text
        assert "<option selected>registry</option>" in page.text
    finally:
        view.close()
