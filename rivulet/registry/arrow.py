"""Registered schemas as Arrow types, and values in the registry's wire format decoded into
Arrow columns: the one home of both, for the Spark source (and tables built from topics).

The wire format: magic byte 0, the schema id (4 bytes, big endian), for Protobuf the message
indexes (a zigzag varint count, then that many zigzag varints; a count of 0 means [0]), then
the payload. A value that cannot be decoded (another magic byte, an id the registry does not
know, a payload the schema does not read, data that does not fit the column) is reported as a
``ValueFault`` and left null in the column, so that the caller decides: fail, drop or
dead-letter.

The column's type is the reader's schema (for Spark: the subject's latest at planning). Avro
values written with another schema are read through Avro's resolution rules; Protobuf and JSON
values are matched to the reader's fields by name (missing fields null, others dropped).

Types, as Spark's ``from_avro`` and ``from_protobuf`` give them:

- Avro: record -> struct, enum -> string, fixed and bytes -> binary, array -> list, map ->
  map<string, V>, a union with null -> the other type, nullable; another union -> a struct of
  ``member0``, ``member1``... (one set); logical types decimal -> decimal128, date -> date32,
  timestamp-* -> timestamp (UTC; local-timestamp-* without a zone), time-* -> time, uuid ->
  string.
- Protobuf: message -> struct (oneof members as plain nullable fields), enum -> its name,
  repeated -> list, map -> map, uint32 -> int64, uint64 -> decimal(20, 0), bytes -> binary,
  google.protobuf.Timestamp -> timestamp, Duration -> duration; a field with presence that is
  unset is null, a proto3 scalar without presence its value (0 included).
- JSON Schema: object with properties -> struct, string, integer -> int64, number -> float64,
  boolean, array with items -> list, a type with "null" -> nullable; anything else (oneOf,
  anyOf, an open object without properties, a reference to another subject) -> the value as
  JSON text.
"""

from __future__ import annotations

import datetime
import io
import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal

import pyarrow as pa

from rivulet.registry.client import RegisteredSchema, RegistryError, SchemaLookup
from rivulet.registry.prefix import HEADER_BYTES, schema_id_of
from rivulet.registry.schema_types import AVRO, JSON, PROTOBUF



# What made a value a fault.
BAD_MAGIC = "bad-magic"
UNKNOWN_ID = "unknown-schema-id"
UNDECODABLE = "undecodable"

Convert = Callable[[object], object]


@dataclass(frozen=True)
class ValueFault:
    """Why the value at ``index`` of a decoded list is null in the column."""

    index: int
    kind: str  # BAD_MAGIC, UNKNOWN_ID or UNDECODABLE
    message: str
    schema_id: int | None = None


@dataclass(frozen=True)
class Decoded:
    column: pa.Array
    faults: tuple[ValueFault, ...]


# ---------------------------------------------------------------------------- Avro


_AVRO_PRIMITIVES: dict[str, pa.DataType] = {
    "null": pa.null(), "boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(), "float": pa.float32(),
    "double": pa.float64(), "bytes": pa.binary(), "string": pa.string(),
}
_AVRO_LOGICAL: dict[str, pa.DataType] = {
    "date": pa.date32(), "time-millis": pa.time32("ms"), "time-micros": pa.time64("us"),
    "timestamp-millis": pa.timestamp("us", "UTC"), "timestamp-micros": pa.timestamp("us", "UTC"),
    "timestamp-nanos": pa.timestamp("ns", "UTC"), "local-timestamp-millis": pa.timestamp("us"),
    "local-timestamp-micros": pa.timestamp("us"), "uuid": pa.string(),
}


def _avro_type(node: object, named: dict[str, object], stack: tuple[str, ...]) -> tuple[
        pa.DataType, Convert | None]:
    """The Arrow type of an Avro schema node (as fastavro parsed it: names fully qualified),
    and what turns fastavro's value for it into one Arrow takes (None: as it is)."""
    if isinstance(node, str):
        if node in _AVRO_PRIMITIVES:
            return _AVRO_PRIMITIVES[node], None
        if node in stack:
            raise ValueError(f"Avro type {node} is recursive: it has no Arrow type")
        if node not in named:
            raise ValueError(f"Avro type {node} is not defined")
        return _avro_type(named[node], named, stack)
    if isinstance(node, list):
        return _avro_union(node, named, stack)
    if not isinstance(node, dict):
        raise ValueError(f"not an Avro schema: {node!r}")
    t = node["type"]
    logical = node.get("logicalType")
    if logical == "decimal" and t in ("bytes", "fixed"):
        precision, scale = int(node.get("precision", 0)), int(node.get("scale", 0))
        return (pa.decimal128 if precision <= 38 else pa.decimal256)(precision, scale), None
    if isinstance(logical, str) and logical in _AVRO_LOGICAL:
        return _AVRO_LOGICAL[logical], (str if logical == "uuid" else None)
    if t == "record" or t == "error":
        name = str(node["name"])
        fields = []
        converts: list[tuple[str, Convert]] = []
        for f in node["fields"]:
            ftype, fconv = _avro_type(f["type"], named, stack + (name,))
            fields.append(pa.field(f["name"], ftype))
            if fconv is not None:
                converts.append((f["name"], fconv))
        return pa.struct(fields), (_convert_fields(converts) if converts else None)
    if t == "enum":
        return pa.string(), None
    if t == "fixed":
        return pa.binary(), None
    if t == "array":
        item, conv = _avro_type(node["items"], named, stack)
        return pa.list_(item), (_convert_items(conv) if conv else None)
    if t == "map":
        value, conv = _avro_type(node["values"], named, stack)
        return pa.map_(pa.string(), value), (_convert_values(conv) if conv else None)
    return _avro_type(t, named, stack)


def _avro_union(members: list, named: dict[str, object], stack: tuple[str, ...]) -> tuple[
        pa.DataType, Convert | None]:
    others = [m for m in members if m != "null"]
    if len(others) == 1:
        return _avro_type(others[0], named, stack)
    if not others:
        return pa.null(), None
    typed = [_avro_type(m, named, stack) for m in others]
    checks = [_avro_branch_check(m, named) for m in others]
    struct_type = pa.struct([pa.field(f"member{i}", t) for i, (t, _) in enumerate(typed)])

    def convert(v: object) -> object:
        if v is None:
            return None
        if isinstance(v, tuple):  # a record of the union, named (fastavro's return_record_name)
            name, v = v
            at = next(i for i, m in enumerate(others) if _avro_name(m, named) == name)
        else:
            at = next(i for i, check in enumerate(checks) if check(v))
        conv = typed[at][1]
        return {f"member{at}": conv(v) if conv else v}
    return struct_type, convert


def _avro_name(node: object, named: dict[str, object]) -> str | None:
    if isinstance(node, str):
        return node if node in named else None
    return str(node["name"]) if isinstance(node, dict) and "name" in node else None


def _avro_branch_check(node: object, named: dict[str, object]) -> Callable[[object], bool]:
    """Whether a value fastavro read belongs to this member of a union."""
    if isinstance(node, str) and node in named:
        node = named[node]
    t = node.get("type") if isinstance(node, dict) else node
    logical = node.get("logicalType") if isinstance(node, dict) else None
    if logical == "decimal":
        return lambda v: isinstance(v, Decimal)
    if logical == "uuid":
        return lambda v: isinstance(v, uuid.UUID)
    if logical == "date":
        return lambda v: isinstance(v, datetime.date) and not isinstance(v, datetime.datetime)
    if isinstance(logical, str) and "timestamp" in logical:
        return lambda v: isinstance(v, datetime.datetime)
    if isinstance(logical, str) and logical.startswith("time-"):
        return lambda v: isinstance(v, datetime.time)
    if t == "enum":
        symbols = set(node["symbols"])  # type: ignore[index]
        return lambda v: isinstance(v, str) and v in symbols
    simple: dict[str, Callable[[object], bool]] = {
        "boolean": lambda v: isinstance(v, bool),
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "long": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "float": lambda v: isinstance(v, float), "double": lambda v: isinstance(v, float),
        "string": lambda v: isinstance(v, str), "bytes": lambda v: isinstance(v, bytes),
        "fixed": lambda v: isinstance(v, bytes), "array": lambda v: isinstance(v, list),
        "map": lambda v: isinstance(v, dict), "record": lambda v: isinstance(v, dict),
    }
    return simple.get(str(t), lambda v: False)


def _convert_fields(converts: list[tuple[str, Convert]]) -> Convert:
    def convert(v: object) -> object:
        if not isinstance(v, dict):
            return v
        out = dict(v)
        for name, conv in converts:
            if out.get(name) is not None:
                out[name] = conv(out[name])
        return out
    return convert


def _convert_items(conv: Convert) -> Convert:
    return lambda v: [None if x is None else conv(x) for x in v] if isinstance(v, list) else v


def _convert_values(conv: Convert) -> Convert:
    return lambda v: {k: None if x is None else conv(x) for k, x in v.items()} if isinstance(v, dict) else v


class _AvroSchema:
    def __init__(self, registered: RegisteredSchema) -> None:
        import fastavro.schema
        named: dict[str, object] = {}
        seen: set[str] = set()

        def add(refs: Sequence) -> None:  # references, depth first
            for ref in refs:
                if ref.name not in seen:
                    seen.add(ref.name)
                    add(ref.dependencies)
                    fastavro.schema.parse_schema(json.loads(ref.schema), named_schemas=named)
        try:
            add(registered.references)
            self.parsed = fastavro.schema.parse_schema(json.loads(registered.schema), named_schemas=named)
        except fastavro.schema.SchemaParseException as e:  # no ValueError
            raise ValueError(str(e)) from None
        self.arrow_type, self.convert = _avro_type(self.parsed, named, ())
        # Only a union of records needs their names to tell its branches apart (and asking
        # fastavro for them costs it a third more time).
        self.record_unions = _record_unions(self.parsed, named, set())


def _record_unions(node: object, named: dict[str, object], seen: set[str]) -> bool:
    if isinstance(node, str):
        if node in named and node not in seen:
            seen.add(node)
            return _record_unions(named[node], named, seen)
        return False
    if isinstance(node, list):
        records = [m for m in node if isinstance(_avro_named(m, named), dict)
                   and _avro_named(m, named).get("type") in ("record", "error")]  # type: ignore[union-attr]
        return len(records) > 1 or any(_record_unions(m, named, seen) for m in node)
    if not isinstance(node, dict):
        return False
    if "name" in node:
        seen.add(str(node["name"]))
    children = [f["type"] for f in node.get("fields", [])] + [node[k] for k in ("items", "values") if k in node]
    if not isinstance(node.get("type"), str):
        children.append(node.get("type"))
    return any(_record_unions(c, named, seen) for c in children)


def _avro_named(node: object, named: dict[str, object]) -> object:
    return named.get(node, node) if isinstance(node, str) else node


class _AvroReader:
    """Reads values written with ``writer`` as the ``reader`` schema (Avro's resolution)."""

    def __init__(self, writer: _AvroSchema, reader: _AvroSchema) -> None:
        import fastavro
        self._read = fastavro.schemaless_reader
        self.writer = writer.parsed
        self.reader = None if reader is writer else reader.parsed
        self.convert = reader.convert
        self.names = reader.record_unions

    def __call__(self, payload: memoryview) -> object:
        v = self._read(io.BytesIO(payload), self.writer, self.reader, return_record_name=self.names,
                       return_record_name_override=self.names)
        return self.convert(v) if self.convert else v


# ---------------------------------------------------------------------------- Protobuf


def _zigzag(buf: memoryview, at: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if at >= len(buf) or shift > 63:
            raise ValueError("truncated message indexes")
        b = buf[at]
        at += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), at
        shift += 7


class _ProtobufSchema:
    def __init__(self, registered: RegisteredSchema, message_name: str | None = None) -> None:
        from rivulet.registry.protobuf_schema import SchemaFiles
        self.files = SchemaFiles(registered.schema, registered.references)
        self.message = self.files.message_named(message_name) if message_name else self.files.message_at([0])
        self.arrow_type, self.to_python = _proto_type(self.message, ())


_PROTO_TIME = {"google.protobuf.Timestamp": pa.timestamp("us", "UTC"), "google.protobuf.Duration": pa.duration("us")}


def _proto_type(message, stack: tuple[str, ...]) -> tuple[pa.DataType, Convert]:  # type: ignore[no-untyped-def]
    """The Arrow type of a message and what turns a decoded message into its Python value."""
    from google.protobuf.descriptor import FieldDescriptor as F
    if message.full_name in stack:
        raise ValueError(f"Protobuf message {message.full_name} is recursive: it has no Arrow type")
    scalars: dict[int, pa.DataType] = {
        F.TYPE_DOUBLE: pa.float64(), F.TYPE_FLOAT: pa.float32(), F.TYPE_INT64: pa.int64(),
        F.TYPE_UINT64: pa.decimal128(20, 0), F.TYPE_INT32: pa.int32(), F.TYPE_FIXED64: pa.decimal128(20, 0),
        F.TYPE_FIXED32: pa.int64(), F.TYPE_BOOL: pa.bool_(), F.TYPE_STRING: pa.string(),
        F.TYPE_BYTES: pa.binary(), F.TYPE_UINT32: pa.int64(), F.TYPE_SFIXED32: pa.int32(),
        F.TYPE_SFIXED64: pa.int64(), F.TYPE_SINT32: pa.int32(), F.TYPE_SINT64: pa.int64(),
    }
    stack = stack + (message.full_name,)

    def value_type(f) -> tuple[pa.DataType, Convert | None]:  # type: ignore[no-untyped-def]
        if f.type == F.TYPE_ENUM:
            names = {v.number: v.name for v in f.enum_type.values}
            return pa.string(), lambda v: names.get(v, str(v))
        if f.type in (F.TYPE_MESSAGE, F.TYPE_GROUP):
            if f.message_type.full_name == "google.protobuf.Timestamp":
                return _PROTO_TIME[f.message_type.full_name], lambda m: m.ToDatetime(tzinfo=datetime.timezone.utc)
            if f.message_type.full_name == "google.protobuf.Duration":
                return _PROTO_TIME[f.message_type.full_name], lambda m: m.ToTimedelta()
            return _proto_type(f.message_type, stack)
        return scalars[f.type], None

    fields = []
    readers: list[tuple[str, Callable[[object], object]]] = []
    for f in message.fields:
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            kt, _ = value_type(f.message_type.fields_by_name["key"])
            vt, vconv = value_type(f.message_type.fields_by_name["value"])
            fields.append(pa.field(f.name, pa.map_(kt, vt)))
            readers.append((f.name, _proto_map(f.name, vconv)))
            continue
        t, conv = value_type(f)
        repeated = f.is_repeated
        fields.append(pa.field(f.name, pa.list_(t) if repeated else t))
        readers.append((f.name, _proto_field(f.name, conv, repeated, f.has_presence)))

    def to_python(m: object) -> object:
        return {name: read(m) for name, read in readers}
    return pa.struct(fields), to_python


def _proto_map(name: str, conv: Convert | None) -> Callable[[object], object]:
    def read(m: object) -> object:
        entries = getattr(m, name)  # the message's field of the schema's name, as all readers here
        return [(k, conv(v) if conv else v) for k, v in entries.items()]
    return read


def _proto_field(name: str, conv: Convert | None, repeated: bool, presence: bool) -> Callable[[object], object]:
    if repeated:
        return lambda m: [conv(x) for x in getattr(m, name)] if conv else list(getattr(m, name))
    if presence:
        return lambda m: (conv(getattr(m, name)) if conv else getattr(m, name)) if m.HasField(name) else None
    return lambda m: conv(getattr(m, name)) if conv else getattr(m, name)


class _ProtobufReader:
    """Reads a message of the writer's file and gives it as the reader's message's value."""

    def __init__(self, writer: _ProtobufSchema, reader: _ProtobufSchema) -> None:
        from google.protobuf import message_factory
        self._factory = message_factory.GetMessageClass
        self.writer = writer
        self.reader = reader
        self._classes: dict[tuple[int, ...], tuple[type, Convert]] = {}

    def __call__(self, payload: memoryview) -> object:
        count, at = _zigzag(payload, 0)
        indexes = []
        for _ in range(count):
            i, at = _zigzag(payload, at)
            indexes.append(i)
        key = tuple(indexes or [0])
        found = self._classes.get(key)
        if found is None:
            message = self.writer.files.message_at(list(key))
            if message.full_name != self.reader.message.full_name:
                raise ValueError(f"a message {message.full_name}, not the column's {self.reader.message.full_name}")
            # Read as the reader's message: Protobuf matches the fields by number, so a field
            # the writer did not have is unset and one the reader dropped is skipped.
            found = self._classes[key] = (self._factory(self.reader.message), self.reader.to_python)
        cls, to_python = found
        return to_python(cls.FromString(bytes(payload[at:])))


# ---------------------------------------------------------------------------- JSON Schema


def _json_type(node: object, root: dict, stack: tuple[str, ...]) -> pa.DataType:
    if not isinstance(node, dict):
        return pa.string()
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        if ref in stack:
            return pa.string()
        target: object = root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, dict) else None
        return _json_type(target, root, stack + (ref,))
    t = node.get("type")
    types = [t] if isinstance(t, str) else list(t) if isinstance(t, list) else []
    types = [x for x in types if x != "null"]
    if len(types) != 1 or any(k in node for k in ("oneOf", "anyOf", "allOf", "$ref")):
        return pa.string()
    kind = types[0]
    if kind == "object":
        props = node.get("properties")
        if not isinstance(props, dict) or not props:
            return pa.string()
        return pa.struct([pa.field(k, _json_type(v, root, stack)) for k, v in props.items()])
    if kind == "array":
        items = node.get("items")
        return pa.list_(_json_type(items, root, stack)) if isinstance(items, dict) else pa.string()
    return {"string": pa.string(), "integer": pa.int64(), "number": pa.float64(),
            "boolean": pa.bool_()}.get(kind, pa.string())


def _json_fit(t: pa.DataType) -> Convert | None:
    """What makes a parsed JSON value fit ``t``: JSON text where the type is a string but the
    value is not one."""
    if pa.types.is_string(t):
        return lambda v: v if isinstance(v, str) else json.dumps(v)
    if pa.types.is_struct(t):
        subs = [(t.field(i).name, _json_fit(t.field(i).type)) for i in range(t.num_fields)]

        def struct_fit(v: object) -> object:
            if not isinstance(v, dict):
                raise ValueError(f"expected a JSON object, got {json.dumps(v)[:80]}")
            return {name: None if v.get(name) is None else fit(v[name]) if fit else v[name] for name, fit in subs}
        return struct_fit
    if pa.types.is_list(t):
        item = _json_fit(t.value_type)
        return (lambda v: [None if x is None else item(x) for x in v] if isinstance(v, list) else v) if item else None
    if pa.types.is_floating(t):
        return lambda v: float(v) if isinstance(v, int) and not isinstance(v, bool) else v
    return None


class _JsonSchema:
    def __init__(self, registered: RegisteredSchema) -> None:
        doc = json.loads(registered.schema)
        self.arrow_type = _json_type(doc, doc if isinstance(doc, dict) else {}, ())
        self.fit = _json_fit(self.arrow_type)


class _JsonReader:
    def __init__(self, reader: _JsonSchema) -> None:
        self.fit = reader.fit

    def __call__(self, payload: memoryview) -> object:
        v = json.loads(bytes(payload))
        return None if v is None else self.fit(v) if self.fit else v


# ---------------------------------------------------------------------------- the decoder


_Parsed = _AvroSchema | _ProtobufSchema | _JsonSchema
_Reader = Callable[[memoryview], object]


def _parse(registered: RegisteredSchema, message_name: str | None) -> _Parsed:
    try:
        if registered.schema_type == AVRO:
            return _AvroSchema(registered)
        if registered.schema_type == PROTOBUF:
            return _ProtobufSchema(registered, message_name)
    except ImportError as e:  # fastavro, protobuf: the registry extra
        raise ValueError(f"decoding {registered.schema_type} values needs the registry extra "
                         f"(pip install 'rivulet[registry]'): {e}") from None
    except (ValueError, TypeError, KeyError) as e:  # protobuf's pool refuses with TypeError
        raise ValueError(f"schema {registered.schema_id} cannot be read: {e}") from None

    if registered.schema_type == JSON:
        return _JsonSchema(registered)
    raise ValueError(f"unknown schema type {registered.schema_type}")


def protobuf_message(registered: RegisteredSchema, value: bytes) -> str:
    """The full name of the message a wire-format value written with ``registered`` (a
    Protobuf schema) holds, by its message indexes; ``ValueError`` if they name none."""
    view = memoryview(value)[HEADER_BYTES:]
    count, at = _zigzag(view, 0)
    indexes = []
    for _ in range(count):
        i, at = _zigzag(view, at)
        indexes.append(i)
    return str(_ProtobufSchema(registered).files.message_at(indexes or [0]).full_name)


def arrow_type(registered: RegisteredSchema, message_name: str | None = None) -> pa.DataType:
    """The Arrow type of values of the schema (``message_name``: Protobuf's message, else the
    file's first); ``ValueError`` if it has none (a recursive type)."""
    return _parse(registered, message_name).arrow_type


class ArrowDecoder:
    """Decodes lists of wire-format values into a column of ``reader``'s type, the writers'
    schemas looked up by id in ``lookup`` (and kept: ids are never reused)."""

    def __init__(self, lookup: SchemaLookup, reader: RegisteredSchema, message_name: str | None = None) -> None:
        self._lookup = lookup
        self._message_name = message_name
        self._reader_schema = _parse(reader, message_name)
        self.schema_type = reader.schema_type
        self.arrow_type: pa.DataType = self._reader_schema.arrow_type
        self._parsed: dict[int, _Parsed] = {reader.schema_id: self._reader_schema}
        self._readers: dict[int, _Reader] = {}

    def decode_column(self, values: pa.Array) -> Decoded:
        """``decode`` of an Arrow binary column (a Spark source's ``value`` column)."""
        return self.decode(values.to_pylist())

    def decode(self, values: Sequence[bytes | memoryview | None]) -> Decoded:
        """A column of ``len(values)`` rows: a null value stays null; a value that cannot be
        decoded is null and has its ``ValueFault``."""
        faults: list[ValueFault] = []
        out: list[object] = []
        unknown: set[int] = set()  # ids asked for in this call and not found
        for i, raw in enumerate(values):
            if raw is None:
                out.append(None)
                continue
            view = memoryview(raw)
            schema_id = schema_id_of(view)
            if schema_id is None:
                faults.append(ValueFault(i, BAD_MAGIC, "not in the schema registry's wire format "
                                         "(magic byte 0 and a schema id)"))
                out.append(None)
                continue
            try:
                read = self._readers.get(schema_id) or self._reader_for(schema_id, unknown)
            except LookupError as e:
                faults.append(ValueFault(i, UNKNOWN_ID, str(e), schema_id))
                out.append(None)
                continue
            except ValueError as e:
                faults.append(ValueFault(i, UNDECODABLE, f"schema {schema_id}: {e}", schema_id))
                out.append(None)
                continue
            try:
                out.append(read(view[HEADER_BYTES:]))
            except Exception as e:  # each library raises its own: a value it cannot read
                faults.append(ValueFault(i, UNDECODABLE, f"schema {schema_id}: {type(e).__name__}: {e}", schema_id))
                out.append(None)
        return Decoded(self._column(out, faults), tuple(sorted(faults, key=lambda f: f.index)))

    def _column(self, out: list[object], faults: list[ValueFault]) -> pa.Array:
        try:
            return pa.array(out, type=self.arrow_type)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            pass
        # One value or more does not fit the column: find them one by one.
        for i, v in enumerate(out):
            if v is None:
                continue
            try:
                pa.array([v], type=self.arrow_type)
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as e:
                faults.append(ValueFault(i, UNDECODABLE, f"does not fit {self.arrow_type}: {e}"))
                out[i] = None
        return pa.array(out, type=self.arrow_type)

    def _reader_for(self, schema_id: int, unknown: set[int]) -> _Reader:
        if schema_id in unknown:
            raise LookupError(f"schema {schema_id} not found")
        writer = self._parsed.get(schema_id)
        if writer is None:
            try:
                registered = self._lookup.schema_by_id(schema_id)
            except RegistryError as e:
                if e.not_found:
                    unknown.add(schema_id)
                    raise LookupError(f"schema {schema_id} not found") from None
                raise
            if registered.schema_type != self.schema_type:
                raise ValueError(f"a {registered.schema_type} schema, not {self.schema_type}")
            writer = self._parsed[schema_id] = _parse(registered, self._message_name)
        reader = self._reader_schema
        if isinstance(writer, _AvroSchema) and isinstance(reader, _AvroSchema):
            read: _Reader = _AvroReader(writer, reader)
        elif isinstance(writer, _ProtobufSchema) and isinstance(reader, _ProtobufSchema):
            read = _ProtobufReader(writer, reader)
        elif isinstance(reader, _JsonSchema):
            read = _JsonReader(reader)
        else:
            raise ValueError(f"schema {schema_id} is not a {self.schema_type} schema")
        self._readers[schema_id] = read
        return read
