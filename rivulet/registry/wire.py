"""Values in the registry's wire format (magic byte 0, a 4-byte big-endian schema id, then the
data; Protobuf puts its message indexes first) decoded to JSON text with the writer's schema,
fetched by id from a registry's REST API and kept. For ``rivulet consume --value-format``."""

from __future__ import annotations

import base64
import io
import json
import struct
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

import avro.io
import avro.schema

FORMATS = ("avro", "json-schema", "protobuf")
TIMEOUT_S = 30.0


class WireFormatError(ValueError):
    pass


def _get_json(url: str) -> dict:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise WireFormatError(f"schema registry {url}: HTTP {e.code} {e.read().decode(errors='replace')}") from None
    except OSError as e:
        raise WireFormatError(f"schema registry {url}: {e}") from None


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
    """``registry``: the registry's base URL; ``fmt``: one of ``FORMATS``."""

    def __init__(self, registry: str, fmt: str) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"value format {fmt!r}: one of {', '.join(FORMATS)}")
        self.registry = registry.rstrip("/")
        self.fmt = fmt
        self._readers: dict[int, Callable[[io.BytesIO], object]] = {}

    def decode(self, value: bytes | None) -> bytes | None:
        """The value as JSON text; None stays None."""
        if value is None:
            return None
        if len(value) < 5 or value[0] != 0:
            raise WireFormatError("not in the schema registry's wire format (no magic byte 0)")
        (schema_id,) = struct.unpack(">I", value[1:5])
        reader = self._readers.get(schema_id)
        if reader is None:
            reader = self._readers[schema_id] = self._reader(schema_id)
        return json.dumps(reader(io.BytesIO(value[5:])), default=_json_default).encode()

    def _reader(self, schema_id: int) -> Callable[[io.BytesIO], object]:
        if self.fmt == "json-schema":
            return lambda buf: json.loads(buf.read())
        if self.fmt == "avro":
            doc = _get_json(f"{self.registry}/schemas/ids/{schema_id}")
            names = avro.name.Names()
            for ref in doc.get("references") or []:
                self._avro_reference(ref, names, set())
            schema = avro.schema.make_avsc_object(json.loads(doc["schema"]), names)
            datum = avro.io.DatumReader(schema)
            return lambda buf: datum.read(avro.io.BinaryDecoder(buf))
        return self._protobuf_reader(schema_id)

    def _avro_reference(self, ref: dict, names: avro.name.Names, seen: set[str]) -> None:
        if ref["name"] in seen:
            return
        seen.add(ref["name"])
        doc = _get_json(f"{self.registry}/subjects/{urllib.parse.quote(ref['subject'], safe='')}/versions/"
                        f"{ref['version']}")
        for dep in doc.get("references") or []:
            self._avro_reference(dep, names, seen)
        avro.schema.make_avsc_object(json.loads(doc["schema"]), names)

    def _protobuf_reader(self, schema_id: int) -> Callable[[io.BytesIO], object]:
        from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
        pool = descriptor_pool.DescriptorPool()

        def add(doc: dict, name: str, seen: set[str]) -> descriptor_pb2.FileDescriptorProto:
            for ref in doc.get("references") or []:
                if ref["name"] not in seen:
                    seen.add(ref["name"])
                    dep = _get_json(f"{self.registry}/subjects/{urllib.parse.quote(ref['subject'], safe='')}/"
                                    f"versions/{ref['version']}?format=serialized")
                    add(dep, ref["name"], seen)
            fdp = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(doc["schema"]))
            fdp.name = name
            pool.Add(fdp)
            return fdp
        main = add(_get_json(f"{self.registry}/schemas/ids/{schema_id}?format=serialized"), f"schema-{schema_id}",
                   set())

        def read(buf: io.BytesIO) -> object:
            count = _zigzag_varint(buf)
            indexes = [_zigzag_varint(buf) for _ in range(count)] or [0]
            message = main.message_type[indexes[0]]
            path = [message.name]
            for i in indexes[1:]:
                message = message.nested_type[i]
                path.append(message.name)
            full = ".".join(([main.package] if main.package else []) + path)
            cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(full))
            return json_format.MessageToDict(cls.FromString(buf.read()))
        return read
