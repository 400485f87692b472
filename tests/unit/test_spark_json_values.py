"""valueFormat=json's pieces without Spark's JVM: the DDL reader and the Arrow JSON decoder."""

from __future__ import annotations

import datetime
import json

import pytest

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

from pyspark.sql.pandas.types import to_arrow_type  # noqa: E402
from pyspark.sql.types import (  # noqa: E402
    ArrayType, DateType, DecimalType, IntegerType, LongType, MapType, StringType, StructField, StructType,
    TimestampType,
)

from rivulet.spark._json_values import JsonDecoder, parse_schema  # noqa: E402
from rivulet.spark._values import ValueFormat  # noqa: E402

pytestmark = pytest.mark.fast


def test_ddl_is_read_as_spark_reads_it_nullable_as_from_json_makes_it():
    got = parse_schema("id STRING NOT NULL, `odd name` BIGINT COMMENT 'x', d DECIMAL(10, 2), "
                       "tags ARRAY<STRING>, m MAP<STRING, INT>, s STRUCT<a: INT, day DATE>, t TIMESTAMP")
    assert got == StructType([
        StructField("id", StringType()), StructField("odd name", LongType()), StructField("d", DecimalType(10, 2)),
        StructField("tags", ArrayType(StringType())), StructField("m", MapType(StringType(), IntegerType())),
        StructField("s", StructType([StructField("a", IntegerType()), StructField("day", DateType())])),
        StructField("t", TimestampType())])
    assert parse_schema("struct<a: int>") == StructType([StructField("a", IntegerType())])
    strict = StructType([StructField("a", IntegerType(), False)])
    assert parse_schema(strict.json()) == StructType([StructField("a", IntegerType())])
    for bad, said in (("", "needs the option valueSchema"), ("a BLOB", "unknown type 'blob'"),
                      ("a INT,", "expected more"), ("a ARRAY<INT", "expected >"), ("{", "not a StructType")):
        with pytest.raises(ValueError, match=said):
            parse_schema(bad)


def decoder(ddl: str) -> JsonDecoder:
    return JsonDecoder(to_arrow_type(parse_schema(ddl), timezone="UTC"))


def test_values_decode_in_one_pass_and_each_bad_one_alone_is_null_with_its_reason():
    d = decoder("id STRING, n INT, at TIMESTAMP, day DATE, s STRUCT<a: INT, tags: ARRAY<STRING>>")
    good = [{"id": f"o{i}", "n": i, "at": "2026-01-01T00:00:01.5Z", "day": "2026-02-03",
             "s": {"a": i, "tags": ["t"] * i}, "unknown": [1]} for i in range(300)]
    values = [json.dumps(g, indent=1 if i % 2 else None).encode() for i, g in enumerate(good)]
    values[7] = None  # a tombstone: a null row, no fault
    values[10] = b'{"n": "ten"}'
    values[11] = b""
    values[250] = b'{"a": 1} {"a": 2}'
    values[251] = b'{"day": "not a day"}'
    values[299] = b"[]"
    out = d.decode_column(pa.array(values, pa.binary()).slice(0))
    rows = out.column.to_pylist()
    assert {f.index: f.kind for f in out.faults} == {10: "undecodable", 11: "undecodable", 250: "undecodable",
                                                       251: "undecodable", 299: "undecodable"}
    assert "number to string" in next(f.message for f in out.faults if f.index == 10)
    for i, row in enumerate(rows):
        if i in (7, 10, 11, 250, 251, 299):
            assert row is None
        else:
            assert row == {"id": f"o{i}", "n": i, "day": datetime.date(2026, 2, 3), "s": {"a": i, "tags": ["t"] * i},
                           "at": datetime.datetime(2026, 1, 1, 0, 0, 1, 500000, tzinfo=datetime.timezone.utc)}
    # A slice decodes as its own rows (the offsets of the sliced array are honoured).
    part = d.decode_column(pa.array(values, pa.binary()).slice(12, 3)).column.to_pylist()
    assert [r["n"] for r in part] == [12, 13, 14]


def test_types_arrow_cannot_read_and_registry_options_are_refused_when_planned():
    for ddl in ("m MAP<STRING, INT>", "b BINARY"):
        with pytest.raises(ValueError, match="does not read MAP or BINARY"):
            decoder(ddl)
    vf = ValueFormat.parse({"valueformat": "json", "valueschema": "a INT", "mode": "permissive"}, ["t"])
    assert vf is not None and vf.permissive and vf.planned() is vf
    with pytest.raises(ValueError, match="not valueFormat=json"):
        ValueFormat.parse({"valueformat": "json", "valueschema": "a INT", "schema.registry.url": "http://x"}, ["t"])
    with pytest.raises(ValueError, match="valueSchema is for valueFormat=json"):
        ValueFormat.parse({"valueformat": "avro", "valueschema": "a INT", "schema.registry.url": "http://x"}, ["t"])
    with pytest.raises(ValueError, match="does not read MAP"):
        ValueFormat.parse({"valueformat": "json", "valueschema": "m MAP<STRING, INT>"}, ["t"])


def test_a_worker_freezes_what_it_imported_once_so_sparks_collections_after_each_task_are_cheap():
    import subprocess
    import sys
    code = ("import gc, time; import rivulet.spark.source, rivulet.spark.sink; "
            "from rivulet.spark._worker import freeze_imported; "
            "before = gc.get_freeze_count(); freeze_imported(); first = gc.get_freeze_count(); freeze_imported(); "
            "print(before, first, gc.get_freeze_count())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    before, first, again = map(int, out)
    assert before == 0 and first > 10_000 and again == first


def test_planning_and_decoding_clean_values_import_no_pandas():
    # The streaming source's driver-side process plans with these options for every query, and
    # each Python worker decodes: importing pandas cost each about 0.3 CPU seconds.
    import subprocess
    import sys
    code = """
import sys
import pyarrow as pa
from array import array
from rivulet.spark.source import SourceOptions
from rivulet.spark._values import decode_batch
opts = SourceOptions.parse({"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t", "valueFormat": "json",
                            "valueSchema": "id INT, at TIMESTAMP", "mode": "PERMISSIVE"}, streaming=True)
doc = b'{"id":7,"at":"2026-01-01T00:00:00.000Z"}'
values = pa.Array.from_buffers(pa.binary(), 2, [None, pa.py_buffer(array("i", [0, len(doc), 2 * len(doc)])),
                                                pa.py_buffer(doc * 2)])
out = decode_batch(opts.value_format, pa.RecordBatch.from_arrays([values], names=["value"]))
assert out.schema.names == ["value", "valueError", "rawValue"], out.schema
assert out.column(1).null_count == 2 and out.column(2).null_count == 2
assert out.column(0).field("id").to_pylist() == [7, 7]
print("pandas" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
