"""Registered schemas as Arrow types and wire-format values decoded into Arrow columns
(rivulet.registry.arrow): each schema type, schema evolution, and the per-value faults."""

from __future__ import annotations

import base64
import datetime
import io
import json
import struct
from decimal import Decimal

import fastavro
import pyarrow as pa
import pytest

from rivulet.registry.arrow import BAD_MAGIC, UNDECODABLE, UNKNOWN_ID, ArrowDecoder, arrow_type
from rivulet.registry.client import SCHEMA_NOT_FOUND, RegisteredSchema, RegistryError
from rivulet.registry.protobuf_schema import file_descriptors
from rivulet.registry.schema_types import AVRO, JSON, PROTOBUF, ResolvedReference

pytestmark = pytest.mark.fast


class Schemas:
    """Schemas by id, as a registry answers them; counts the look-ups."""

    def __init__(self, *schemas: RegisteredSchema) -> None:
        self.by_id = {s.schema_id: s for s in schemas}
        self.asked: list[int] = []

    def schema_by_id(self, schema_id: int) -> RegisteredSchema:
        self.asked.append(schema_id)
        if schema_id not in self.by_id:
            raise RegistryError("not found", 404, SCHEMA_NOT_FOUND)
        return self.by_id[schema_id]


def wire(schema_id: int, payload: bytes, indexes: bytes = b"") -> bytes:
    return b"\x00" + struct.pack(">I", schema_id) + indexes + payload


def avro_value(schema: dict, value: dict, named: dict | None = None) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema, named_schemas=named if named is not None else {}),
                               value)
    return buf.getvalue()


USER_V1 = {"type": "record", "name": "User", "namespace": "app", "fields": [
    {"name": "name", "type": "string"},
    {"name": "age", "type": "int"},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "attrs", "type": {"type": "map", "values": "long"}},
    {"name": "email", "type": ["null", "string"], "default": None},
    {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "BLUE"]}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
    {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "either", "type": ["null", "int", "string"]},
]}
USER_V2 = dict(USER_V1, fields=USER_V1["fields"] + [{"name": "country", "type": "string", "default": "NL"}])
AT = datetime.datetime(2026, 11, 29, 8, 0, tzinfo=datetime.timezone.utc)


def user(i: int) -> dict:
    return {"name": f"u{i}", "age": i, "tags": ["a", "b"][:i % 3], "attrs": {"k": i}, "email": None if i % 2 else "e",
            "color": "BLUE", "at": AT, "price": Decimal("12.34"), "id": "0b5d7a3e-4a39-4c83-9f39-2c1cf7d7f0a1",
            "either": i if i % 2 else "s"}


def test_avro_schema_to_arrow_types():
    t = arrow_type(RegisteredSchema(1, AVRO, json.dumps(USER_V1)))
    assert t == pa.struct([
        ("name", pa.string()), ("age", pa.int32()), ("tags", pa.list_(pa.string())),
        ("attrs", pa.map_(pa.string(), pa.int64())), ("email", pa.string()), ("color", pa.string()),
        ("at", pa.timestamp("us", "UTC")), ("price", pa.decimal128(9, 2)), ("id", pa.string()),
        ("either", pa.struct([("member0", pa.int32()), ("member1", pa.string())])),
    ])


def test_avro_values_decode_into_a_struct_column():
    v1 = RegisteredSchema(1, AVRO, json.dumps(USER_V1))
    dec = ArrowDecoder(Schemas(v1), v1)
    out = dec.decode([wire(1, avro_value(USER_V1, user(i))) for i in range(3)] + [None])
    assert out.faults == ()
    rows = out.column.to_pylist()
    assert rows[3] is None
    assert rows[1]["name"] == "u1" and rows[1]["age"] == 1 and rows[1]["tags"] == ["a"]
    assert rows[1]["attrs"] == [("k", 1)] and rows[1]["email"] is None and rows[0]["email"] == "e"
    assert rows[1]["at"] == AT and rows[1]["price"] == Decimal("12.34") and rows[1]["color"] == "BLUE"
    assert rows[1]["id"] == "0b5d7a3e-4a39-4c83-9f39-2c1cf7d7f0a1"
    assert rows[1]["either"] == {"member0": 1, "member1": None}
    assert rows[0]["either"] == {"member0": None, "member1": "s"}


def test_avro_values_of_an_older_schema_read_as_the_reader_schema():
    v1 = RegisteredSchema(1, AVRO, json.dumps(USER_V1))
    v2 = RegisteredSchema(2, AVRO, json.dumps(USER_V2))
    lookup = Schemas(v1, v2)
    dec = ArrowDecoder(lookup, v2)
    out = dec.decode([wire(1, avro_value(USER_V1, user(1))),
                      wire(2, avro_value(USER_V2, dict(user(2), country="SE"))),
                      wire(1, avro_value(USER_V1, user(3)))])
    assert out.faults == ()
    assert [r["country"] for r in out.column.to_pylist()] == ["NL", "SE", "NL"]
    assert lookup.asked == [1]  # the reader's own id needs no look-up; each id is asked once


def test_avro_references_resolve_named_types():
    address = {"type": "record", "name": "Address", "namespace": "app", "fields": [{"name": "city", "type": "string"}]}
    person = {"type": "record", "name": "Person", "namespace": "app",
              "fields": [{"name": "home", "type": "app.Address"}]}
    reg = RegisteredSchema(5, AVRO, json.dumps(person),
                           (ResolvedReference("app.Address", json.dumps(address)),))
    named: dict = {}
    fastavro.parse_schema(address, named_schemas=named)
    dec = ArrowDecoder(Schemas(reg), reg)
    out = dec.decode([wire(5, avro_value(person, {"home": {"city": "Delft"}}, named))])
    assert out.column.to_pylist() == [{"home": {"city": "Delft"}}]


def test_faults_are_reported_per_value_and_the_others_decode():
    v1 = RegisteredSchema(1, AVRO, json.dumps(USER_V1))
    lookup = Schemas(v1)
    dec = ArrowDecoder(lookup, v1)
    good = wire(1, avro_value(USER_V1, user(1)))
    out = dec.decode([b"plain text", good, wire(77, b"\x02"), wire(1, b"\x02"), b"\x00\x00", good, wire(77, b"")])
    assert [(f.index, f.kind) for f in out.faults] == [
        (0, BAD_MAGIC), (2, UNKNOWN_ID), (3, UNDECODABLE), (4, BAD_MAGIC), (6, UNKNOWN_ID)]
    assert out.faults[1].schema_id == 77
    rows = out.column.to_pylist()
    assert [r is not None for r in rows] == [False, True, False, False, False, True, False]
    assert lookup.asked == [77]  # an unknown id is asked once per call


def test_an_unreachable_registry_raises_rather_than_faulting_every_value():
    v1 = RegisteredSchema(1, AVRO, json.dumps(USER_V1))

    class Down:
        def schema_by_id(self, schema_id: int) -> RegisteredSchema:
            raise RegistryError("connection refused")
    with pytest.raises(RegistryError):
        ArrowDecoder(Down(), v1).decode([wire(2, b"")])


def test_a_schema_of_another_type_is_a_fault():
    v1 = RegisteredSchema(1, AVRO, json.dumps(USER_V1))
    js = RegisteredSchema(2, JSON, json.dumps({"type": "object", "properties": {"a": {"type": "integer"}}}))
    out = ArrowDecoder(Schemas(v1, js), v1).decode([wire(2, b"{}")])
    assert [(f.kind, f.schema_id) for f in out.faults] == [(UNDECODABLE, 2)]


def test_recursive_avro_type_has_no_arrow_type():
    node = {"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]}
    with pytest.raises(ValueError, match="recursive"):
        arrow_type(RegisteredSchema(1, AVRO, json.dumps(node)))


PROTO_V1 = """
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Order {
  string id = 1;
  int64 amount = 2;
  repeated string items = 3;
  map<string, int32> counts = 4;
  Status status = 5;
  optional string note = 6;
  google.protobuf.Timestamp at = 7;
  Line first = 8;
  uint64 big = 9;
  message Line { string sku = 1; }
}
enum Status { NEW = 0; PAID = 1; }
message Other { bool flag = 1; }
"""
PROTO_V2 = PROTO_V1.replace("uint64 big = 9;", "uint64 big = 9;\n  string channel = 10;")


def proto_message(text: str, name: str):  # type: ignore[no-untyped-def]
    from google.protobuf import descriptor_pool, message_factory
    pool = descriptor_pool.DescriptorPool()
    files = file_descriptors(text, [])
    from google.protobuf import timestamp_pb2
    from google.protobuf.descriptor_pb2 import FileDescriptorProto
    ts = FileDescriptorProto()
    timestamp_pb2.DESCRIPTOR.CopyToProto(ts)
    pool.Add(ts)
    for f in files:
        pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def serialized(text: str) -> str:
    return base64.b64encode(file_descriptors(text, [])[-1].SerializeToString()).decode()


def test_protobuf_values_decode_with_message_indexes_and_evolution():
    v1 = RegisteredSchema(1, PROTOBUF, serialized(PROTO_V1))
    v2 = RegisteredSchema(2, PROTOBUF, serialized(PROTO_V2))
    dec = ArrowDecoder(Schemas(v1, v2), v2)
    assert dec.arrow_type.field("status").type == pa.string()
    assert dec.arrow_type.field("at").type == pa.timestamp("us", "UTC")
    assert dec.arrow_type.field("big").type == pa.decimal128(20, 0)
    order = proto_message(PROTO_V1, "shop.Order")(id="o1", amount=5, items=["x", "y"], status=1, big=2**64 - 1)
    order.counts["x"] = 3
    order.at.FromDatetime(AT.replace(tzinfo=None))
    order.first.sku = "s1"
    order2 = proto_message(PROTO_V2, "shop.Order")(id="o2", channel="web")
    other = proto_message(PROTO_V1, "shop.Other")(flag=True)
    out = dec.decode([wire(1, order.SerializeToString(), b"\x00"),      # [0] written as one 0
                      wire(2, order2.SerializeToString(), b"\x02\x00"),  # [0] written in full
                      wire(1, other.SerializeToString(), b"\x02\x02")])  # [1]: not the column's message
    rows = out.column.to_pylist()
    assert rows[0] == {"id": "o1", "amount": 5, "items": ["x", "y"], "counts": [("x", 3)], "status": "PAID",
                       "note": None, "at": AT, "first": {"sku": "s1"}, "big": Decimal(2**64 - 1), "channel": ""}
    assert rows[1]["id"] == "o2" and rows[1]["channel"] == "web" and rows[1]["amount"] == 0
    assert rows[1]["first"] is None and rows[1]["status"] == "NEW"
    assert rows[2] is None and [f.index for f in out.faults] == [2]


def test_json_schema_values_decode_into_typed_columns():
    schema = {"type": "object", "properties": {
        "name": {"type": "string"}, "n": {"type": "integer"}, "score": {"type": ["number", "null"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "extra": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
        "pos": {"$ref": "#/definitions/Pos"}},
        "definitions": {"Pos": {"type": "object", "properties": {"x": {"type": "integer"}}}}}
    reg = RegisteredSchema(3, JSON, json.dumps(schema))
    dec = ArrowDecoder(Schemas(reg), reg)
    assert dec.arrow_type.field("pos").type == pa.struct([("x", pa.int64())])
    out = dec.decode([wire(3, json.dumps({"name": "a", "n": 1, "score": 2, "tags": ["t"], "extra": 7,
                                          "pos": {"x": 1}, "unknown": 1}).encode()),
                      wire(3, b'{"name": "b", "n": "not a number"}'),
                      wire(3, b"{not json")])
    rows = out.column.to_pylist()
    assert rows[0] == {"name": "a", "n": 1, "score": 2.0, "tags": ["t"], "extra": "7", "pos": {"x": 1}}
    assert rows[1] is None and rows[2] is None
    assert [(f.index, f.kind) for f in out.faults] == [(1, UNDECODABLE), (2, UNDECODABLE)]


def test_a_writer_schema_that_does_not_parse_is_a_fault_of_its_values():
    v1 = RegisteredSchema(1, AVRO, json.dumps(USER_V1))
    broken = RegisteredSchema(2, AVRO, json.dumps({"type": "record", "name": "X", "fields": [{"name": "a"}]}))
    good = wire(1, avro_value(USER_V1, user(1)))
    out = ArrowDecoder(Schemas(v1, broken), v1).decode([wire(2, b"\x02"), good])
    assert [(f.index, f.kind, f.schema_id) for f in out.faults] == [(0, UNDECODABLE, 2)]
    assert out.column.to_pylist()[1]["name"] == "u1"


def test_a_union_of_records_is_told_apart_by_name():
    a = {"type": "record", "name": "A", "fields": [{"name": "x", "type": "int"}]}
    b = {"type": "record", "name": "B", "fields": [{"name": "x", "type": "int"}]}
    holder = {"type": "record", "name": "H", "fields": [{"name": "u", "type": ["null", a, b]}]}
    reg = RegisteredSchema(1, AVRO, json.dumps(holder))
    out = ArrowDecoder(Schemas(reg), reg).decode([wire(1, avro_value(holder, {"u": ("B", {"x": 2})})),
                                                  wire(1, avro_value(holder, {"u": ("A", {"x": 1})})),
                                                  wire(1, avro_value(holder, {"u": None}))])
    assert out.faults == ()
    assert [r["u"] for r in out.column.to_pylist()] == [
        {"member0": None, "member1": {"x": 2}}, {"member0": {"x": 1}, "member1": None}, None]
