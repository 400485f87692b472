"""``valueFormat=json``: JSON values parsed into a typed ``value`` column in the source, by
Arrow's JSON reader (C++), instead of by ``from_json`` in Spark's JVM, a row at a time.

The schema is a Spark DDL string (``"id STRING, n INT, at TIMESTAMP"``, as ``from_json`` takes)
or a ``StructType``'s JSON. DDL is parsed here: the source plans its schema in a Python process
that has no JVM, so PySpark's own DDL parser (which calls into the JVM) cannot be used.
"""

from __future__ import annotations

import json
import re
from array import array
from typing import Callable

import pyarrow as pa
import pyarrow.json as pj

from rivulet.registry.arrow import UNDECODABLE, Decoded, ValueFault

try:
    from pyspark.sql.types import (
        ArrayType, BinaryType, BooleanType, ByteType, DataType, DateType, DecimalType, DoubleType, FloatType,
        IntegerType, LongType, MapType, ShortType, StringType, StructField, StructType, TimestampNTZType,
        TimestampType,
    )
except ImportError as e:  # pragma: no cover
    raise ImportError("rivulet.spark needs PySpark: pip install 'rivulet[spark]'") from e

_SIMPLE: dict[str, DataType] = {
    "string": StringType(), "varchar": StringType(), "char": StringType(), "int": IntegerType(),
    "integer": IntegerType(), "bigint": LongType(), "long": LongType(), "smallint": ShortType(),
    "short": ShortType(), "tinyint": ByteType(), "byte": ByteType(), "double": DoubleType(),
    "float": FloatType(), "real": FloatType(), "boolean": BooleanType(), "binary": BinaryType(),
    "date": DateType(), "timestamp": TimestampType(), "timestamp_ltz": TimestampType(),
    "timestamp_ntz": TimestampNTZType(),
}
_TOKEN = re.compile(r"\s*(`(?:[^`]|``)*`|[A-Za-z_][A-Za-z0-9_]*|\d+|'(?:[^'\\]|\\.)*'|[<>(),:])")


class _Ddl:
    """A recursive-descent reader of Spark's DDL types."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[str] = []
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            m = _TOKEN.match(text, pos)
            if m is None:
                raise ValueError(f"valueSchema: cannot read {text[pos:pos + 20]!r} in {text!r}")
            self.tokens.append(m.group(1))
            pos = m.end()
        self.at = 0

    def peek(self) -> str | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (expected is not None and tok.lower() != expected):
            raise ValueError(f"valueSchema: expected {expected or 'more'} in {self.text!r}, got {tok!r}")
        self.at += 1
        return tok

    def name(self) -> str:
        tok = self.take()
        return tok[1:-1].replace("``", "`") if tok.startswith("`") else tok

    def fields(self, end: str | None) -> StructType:
        fields: list[StructField] = []
        while True:
            name = self.name()
            if self.peek() == ":":
                self.take()
            typ = self.type()
            if (self.peek() or "").lower() == "not":  # read, and left out: from_json's result is nullable
                self.take()
                self.take("null")
            if (self.peek() or "").lower() == "comment":
                self.take()
                self.take()
            fields.append(StructField(name, typ, True))
            if self.peek() != ",":
                break
            self.take()
        if self.peek() != end:
            raise ValueError(f"valueSchema: unexpected {self.peek()!r} in {self.text!r}")
        return StructType(fields)

    def type(self) -> DataType:
        word = self.take().lower()
        if word in ("decimal", "dec", "numeric"):
            precision, scale = 10, 0
            if self.peek() == "(":
                self.take()
                precision = int(self.take())
                if self.peek() == ",":
                    self.take()
                    scale = int(self.take())
                self.take(")")
            return DecimalType(precision, scale)
        if word in ("varchar", "char") and self.peek() == "(":
            self.take()
            self.take()
            self.take(")")
            return StringType()
        if word == "array":
            self.take("<")
            element = self.type()
            self.take(">")
            return ArrayType(element, True)
        if word == "map":
            self.take("<")
            key = self.type()
            self.take(",")
            value = self.type()
            self.take(">")
            return MapType(key, value, True)
        if word == "struct":
            self.take("<")
            if self.peek() == ">":
                self.take()
                return StructType([])
            inner = self.fields(">")
            self.take(">")
            return inner
        if word in _SIMPLE:
            return _SIMPLE[word]
        raise ValueError(f"valueSchema: unknown type {word!r} in {self.text!r}")


def _all_nullable(doc: object) -> object:
    """A StructType's JSON with every field, element and map value nullable."""
    if isinstance(doc, dict):
        return {k: True if k in ("nullable", "containsNull", "valueContainsNull") else _all_nullable(v)
                for k, v in doc.items()}
    if isinstance(doc, list):
        return [_all_nullable(v) for v in doc]
    return doc


def parse_schema(text: str) -> StructType:
    """A DDL string or a StructType's JSON as a StructType, nullable throughout as from_json's
    result is (ValueError if it is neither)."""
    text = text.strip()
    if not text:
        raise ValueError("valueFormat=json needs the option valueSchema (a DDL string such as "
                         "'id STRING, n INT' or a StructType's JSON)")
    if text.startswith("{"):
        try:
            parsed = StructType.fromJson(_all_nullable(json.loads(text)))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"valueSchema: not a StructType's JSON: {e}") from None
        return parsed
    ddl = _Ddl(text)
    if ddl.peek() is not None and ddl.peek().lower() == "struct" and ddl.tokens[1:2] == ["<"]:
        ddl.take()
        ddl.take("<")
        schema = ddl.fields(">")
        ddl.take(">")
    else:
        schema = ddl.fields(None)
    if ddl.peek() is not None:
        raise ValueError(f"valueSchema: unexpected {ddl.peek()!r} in {text!r}")
    return schema


class JsonDecoder:
    """Values (binary, one JSON document each) into a struct column of ``arrow_type``."""

    def __init__(self, arrow_type: pa.StructType) -> None:
        # Nullable throughout, as from_json's result; dates are read as text and cast after,
        # as Arrow's reader takes a date only as a number of days.
        if _has(arrow_type, lambda t: pa.types.is_binary(t) or pa.types.is_map(t)):
            raise ValueError(f"valueFormat=json does not read MAP or BINARY fields ({arrow_type}); parse such "
                             "values with from_json")
        self.arrow_type = _nullable(arrow_type)
        self.schema = pa.schema(list(self.arrow_type))
        self.options = pj.ParseOptions(explicit_schema=pa.schema(list(_as_read(self.arrow_type))),
                                       unexpected_field_behavior="ignore")
        try:
            self._read_lines(pa.py_buffer(b"{}"))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise ValueError(f"valueFormat=json cannot read the type {arrow_type}: {e}") from None

    def decode_column(self, values: pa.Array) -> Decoded:
        """Each value's row; a null value is a null row, a value that is not a JSON object of
        the schema's types a null row with its ``ValueFault``."""
        # pyarrow.compute (about 40 ms to import) here and in _lines only: the planner process
        # builds a decoder to check the schema and never decodes.
        import pyarrow.compute as pc
        if values.type != pa.binary():
            values = values.cast(pa.binary())
        valid = values.is_valid() if values.null_count else None
        docs = values if valid is None else values.filter(valid)
        faults: list[ValueFault] = []
        table = self._parse(docs, 0, len(docs), faults)
        fields = list(self.arrow_type)
        column = pa.StructArray.from_arrays([table.column(i).combine_chunks() for i in range(table.num_columns)],
                                            fields=fields)
        if faults:
            bad = array("b", bytes(len(docs)))
            for f in faults:
                bad[f.index] = 1
            mask = pc.cast(pa.Array.from_buffers(pa.int8(), len(docs), [None, pa.py_buffer(bad)]), pa.bool_())
            column = pa.StructArray.from_arrays(column.flatten(), fields=fields, mask=mask)
        if valid is not None:
            # Back to one row per value: a null row where the value was null.
            at = pc.subtract(pc.cumulative_sum(pc.cast(valid, pa.int32())), _ONE)
            column = column.take(pc.if_else(valid, at, _NULL_I32))
            present = pc.indices_nonzero(valid)
            faults = [ValueFault(present[f.index].as_py(), f.kind, f.message) for f in faults]
        return Decoded(column, tuple(faults))

    def _parse(self, docs: pa.Array, start: int, stop: int, faults: list[ValueFault]) -> pa.Table:
        """Rows ``start:stop`` of ``docs``; a block Arrow refuses is halved until the refused
        values are found, each then a null row (so one bad value costs log2(n) parses)."""
        part = docs.slice(start, stop - start)
        try:
            table = self._read(part)
            if table.num_rows == stop - start:
                return table
            reason = "not one JSON object"
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            reason = str(e).removeprefix("JSON parse error: ")
        if stop - start == 1:
            faults.append(ValueFault(start, UNDECODABLE, reason))
            return pa.table([pa.nulls(1, f.type) for f in self.arrow_type], schema=self.schema)
        mid = (start + stop) // 2
        return pa.concat_tables([self._parse(docs, start, mid, faults), self._parse(docs, mid, stop, faults)])


    def _read(self, docs: pa.Array) -> pa.Table:
        return self._read_lines(_lines(docs))

    def _read_lines(self, lines: pa.Buffer) -> pa.Table:
        table = pj.read_json(pa.BufferReader(lines), parse_options=self.options,
                             read_options=pj.ReadOptions(use_threads=False, block_size=1 << 30))
        return table if table.schema == self.schema else table.cast(self.schema)


def _has(t: pa.DataType, test: Callable[[pa.DataType], bool]) -> bool:
    if test(t):
        return True
    if pa.types.is_struct(t):
        return any(_has(f.type, test) for f in t)
    return pa.types.is_list(t) and _has(t.value_type, test)


def _nullable(t: pa.DataType, leaf: Callable[[pa.DataType], pa.DataType] = lambda t: t) -> pa.DataType:
    """``t`` with every struct field and list element nullable, and ``leaf`` applied to the rest."""
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _nullable(f.type, leaf), True) for f in t])
    if pa.types.is_list(t):
        return pa.list_(pa.field(t.value_field.name, _nullable(t.value_type, leaf), True))
    return leaf(t)


def _as_read(t: pa.DataType) -> pa.DataType:
    return _nullable(t, lambda leaf: pa.string() if pa.types.is_date32(leaf) else leaf)


def _lines(docs: pa.Array) -> pa.Buffer:
    """The documents as newline-delimited JSON. Line breaks inside a document (whitespace
    between its tokens: a JSON string cannot hold a raw one) become spaces. An empty document
    is an empty line, which Arrow's reader skips: the row count then tells."""
    import pyarrow.compute as pc
    data = docs.buffers()[2]
    # Replacing costs two copies of every value; a search of the bytes (the whole buffer, a
    # slice's neighbours too: at worst a needless replace) finds the usual case, none.
    if data is not None and _has_line_break(data.to_pybytes()):
        docs = pc.replace_substring(pc.replace_substring(docs, "\n", " "), "\r", " ")
    joined = pc.binary_join_element_wise(docs, _NEWLINE, _EMPTY)
    if not len(joined):
        return pa.py_buffer(b"")
    ends = memoryview(joined.buffers()[1]).cast("i")
    return joined.buffers()[2][ends[joined.offset]:ends[joined.offset + len(joined)]]


def _has_line_break(raw: bytes) -> bool:
    return b"\n" in raw or b"\r" in raw


def _binary(v: bytes) -> pa.Scalar:
    # Built from buffers: pa.scalar would import pandas (a third of a second in a fresh worker).
    return pa.Array.from_buffers(pa.binary(), 1, [None, pa.py_buffer(array("i", [0, len(v)])), pa.py_buffer(v)])[0]


_NEWLINE, _EMPTY = _binary(b"\n"), _binary(b"")
_ONE = pa.Array.from_buffers(pa.int32(), 1, [None, pa.py_buffer(array("i", [1]))])[0]
_NULL_I32 = pa.nulls(1, pa.int32())[0]
