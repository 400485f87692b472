"""Values in the registry's wire format (magic byte 0, a 4-byte big-endian schema id, then the
data; Protobuf puts its message indexes first) decoded to JSON text with the writer's schema,
fetched by id (through a ``RegistryClient``) and kept. For ``rivulet consume --value-format``
and the console's message browser (``rivulet.registry.arrow`` decodes into Arrow columns)."""

from __future__ import annotations

import io
import json
from collections.abc import Callable

import avro.io
import avro.name
import avro.schema

from rivulet.registry.client import RegisteredSchema, RegistryError, SchemaLookup
from rivulet.registry.prefix import HEADER_BYTES, schema_id_of
from rivulet.registry.schema_types import AVRO, FORMAT_TYPES, JSON, PROTOBUF, ResolvedReference


class WireFormatError(ValueError):
    pass


def _zigzag_varint(buf: io.BytesIO) -> int:
    shift = result = 0
    while True:
        b = buf.read(1)
        if not b:
            raise WireFormatError("truncated message indexes")
        result |= (b[0] & 0x7F) << shift
        if not b[0] & 0x80:
            return (result >> 1) ^ -(result & 1)
        shift += 7


def _json_default(v: object) -> object:
    if isinstance(v, bytes):
        return v.decode("latin-1")
    return str(v)


class WireDecoder:
    """``fmt``: one of ``FORMAT_TYPES``, the only type decoded (a value of another is an error);
    None decodes each value as its schema's type."""

    def __init__(self, client: SchemaLookup, fmt: str | None = None) -> None:
        if fmt is not None and fmt not in FORMAT_TYPES:
            raise ValueError(f"value format {fmt!r}: one of {', '.join(FORMAT_TYPES)}")
        self.client = client
        self.fmt = fmt
        self._readers: dict[int, Callable[[io.BytesIO], object]] = {}

    def decode(self, value: bytes | None) -> bytes | None:
        """The value as JSON text; None stays None."""
        if value is None:
            return None
        schema_id = schema_id_of(value)
        if schema_id is None:
            raise WireFormatError("not in the schema registry's wire format (no magic byte 0)")
        reader = self._readers.get(schema_id)
        if reader is None:
            reader = self._readers[schema_id] = self._reader(schema_id)
        return json.dumps(reader(io.BytesIO(value[HEADER_BYTES:])), default=_json_default).encode()

    def _reader(self, schema_id: int) -> Callable[[io.BytesIO], object]:
        try:
            registered = self.client.schema_by_id(schema_id)
        except RegistryError as e:
            raise WireFormatError(str(e)) from None
        if self.fmt is not None and registered.schema_type != FORMAT_TYPES[self.fmt]:
            raise WireFormatError(f"schema {schema_id} is a {registered.schema_type} schema, not {self.fmt}")
        if registered.schema_type == JSON:
            return lambda buf: json.loads(buf.read())
        if registered.schema_type == AVRO:
            return _avro_reader(registered)
        if registered.schema_type == PROTOBUF:
            return _protobuf_reader(registered)
        raise WireFormatError(f"schema {schema_id} has the unknown type {registered.schema_type}")


def _avro_reader(registered: RegisteredSchema) -> Callable[[io.BytesIO], object]:
    names = avro.name.Names()
    seen: set[str] = set()

    def add(refs: tuple[ResolvedReference, ...]) -> None:  # named types, depth first
        for ref in refs:
            if ref.name not in seen:
                seen.add(ref.name)
                add(ref.dependencies)
                avro.schema.make_avsc_object(json.loads(ref.schema), names)
    add(registered.references)
    datum = avro.io.DatumReader(avro.schema.make_avsc_object(json.loads(registered.schema), names))
    return lambda buf: datum.read(avro.io.BinaryDecoder(buf))


def _protobuf_reader(registered: RegisteredSchema) -> Callable[[io.BytesIO], object]:
    from google.protobuf import json_format, message_factory

    from rivulet.registry.protobuf_schema import SchemaFiles
    files = SchemaFiles(registered.schema, registered.references)

    def read(buf: io.BytesIO) -> object:
        count = _zigzag_varint(buf)
        indexes = [_zigzag_varint(buf) for _ in range(count)] or [0]
        cls = message_factory.GetMessageClass(files.message_at(indexes))
        return json_format.MessageToDict(cls.FromString(buf.read()))
    return read
