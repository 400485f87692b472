"""Decoding values in the schema registry's wire format: values/s of rivulet.registry.arrow's
ArrowDecoder (into an Arrow struct column, what the Spark source's valueFormat does per batch)
for Avro, Protobuf and JSON Schema, against fastavro's schemaless reader alone (Python dicts,
no Arrow) and against rivulet.registry.wire's decoder (JSON text, what `rivulet consume
--value-format` and the console do). In process: the schemas are looked up in a dict, so this
is the decoding alone.

    python -m benchmarks.registry_decode
    python -m benchmarks.registry_decode --values 200000 --batch 5000

docs/performance.md records the results.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import struct
import time
from collections.abc import Callable

import fastavro

from rivulet.registry.arrow import ArrowDecoder
from rivulet.registry.client import RegisteredSchema
from rivulet.registry.protobuf_schema import file_descriptors

AVRO = {"type": "record", "name": "Reading", "fields": [
    {"name": "sensor", "type": "string"}, {"name": "value", "type": "double"}, {"name": "count", "type": "long"},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "unit", "type": ["null", "string"], "default": None}]}
PROTO = """syntax = "proto3";
message Reading { string sensor = 1; double value = 2; int64 count = 3; repeated string tags = 4; optional string unit = 5; }
"""
JSON_SCHEMA = {"type": "object", "properties": {
    "sensor": {"type": "string"}, "value": {"type": "number"}, "count": {"type": "integer"},
    "tags": {"type": "array", "items": {"type": "string"}}, "unit": {"type": ["string", "null"]}}}


class Dict:
    def __init__(self, schema: RegisteredSchema) -> None:
        self.schema = schema

    def schema_by_id(self, schema_id: int) -> RegisteredSchema:
        return self.schema


def record(i: int) -> dict:
    return {"sensor": f"s{i % 100}", "value": i / 3, "count": i, "tags": ["a", "b"][: i % 3],
            "unit": "C" if i % 2 else None}


def rate(values: list[bytes], batch: int, decode: Callable[[list[bytes]], object]) -> float:
    t0 = time.perf_counter()
    for at in range(0, len(values), batch):
        decode(values[at:at + batch])
    return len(values) / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--values", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=4096)
    args = ap.parse_args()
    header = b"\x00" + struct.pack(">I", 1)

    parsed = fastavro.parse_schema(AVRO)
    avro_values = []
    for i in range(args.values):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, record(i))
        avro_values.append(header + buf.getvalue())
    avro = RegisteredSchema(1, "AVRO", json.dumps(AVRO))

    from google.protobuf import descriptor_pool, message_factory
    files = file_descriptors(PROTO, [])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(files[-1])
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("Reading"))
    proto_values = [header + b"\x00" + cls(**record(i)).SerializeToString() for i in range(args.values)]
    proto = RegisteredSchema(1, "PROTOBUF", base64.b64encode(files[-1].SerializeToString()).decode())

    json_values = [header + json.dumps(record(i)).encode() for i in range(args.values)]
    js = RegisteredSchema(1, "JSON", json.dumps(JSON_SCHEMA))

    def fastavro_only(values: list[bytes]) -> object:
        return [fastavro.schemaless_reader(io.BytesIO(memoryview(v)[5:]), parsed) for v in values]

    from rivulet.registry.wire import WireDecoder
    wire = WireDecoder(Dict(js), "json-schema")
    rows = [
        ("Avro: ArrowDecoder (Arrow struct column)", avro_values, ArrowDecoder(Dict(avro), avro).decode),
        ("Avro: fastavro schemaless_reader alone (dicts)", avro_values, fastavro_only),
        ("Protobuf: ArrowDecoder", proto_values, ArrowDecoder(Dict(proto), proto).decode),
        ("JSON Schema: ArrowDecoder", json_values, ArrowDecoder(Dict(js), js).decode),
        ("JSON Schema: wire.WireDecoder (JSON text)", json_values, lambda vs: [wire.decode(v) for v in vs]),
    ]
    print(f"{args.values} values, batches of {args.batch}")
    print("| decoder | values/s |\n| --- | ---: |")
    for name, values, decode in rows:
        decode(values[:args.batch])  # warm: schemas parsed, classes built
        print(f"| {name} | {rate(values, args.batch, decode):,.0f} |")


if __name__ == "__main__":
    main()
