"""The prefix of a value in the schema registry's wire format: magic byte 0, then the schema id
(4 bytes, big endian); Protobuf's message indexes follow it. One reading of it for the
decoders (``wire``, ``arrow``) and the Iceberg translator."""

from __future__ import annotations

import struct

from rivulet.registry.schema_types import PROTOBUF

MAGIC = 0
HEADER_BYTES = 5
_ID = struct.Struct(">I")


def schema_id_of(value: bytes | memoryview) -> int | None:
    """The schema id a value names, or None if it is not in the wire format."""
    if len(value) < HEADER_BYTES or value[0] != MAGIC:
        return None
    return int(_ID.unpack_from(value, 1)[0])


def framed(schema_id: int, schema_type: str, payload: bytes) -> bytes:
    """A value written with ``schema_id``'s schema without the wire format's prefix, given it
    (Protobuf: the schema's first message, message indexes [0], written as a count of 0)."""
    return bytes((MAGIC,)) + _ID.pack(schema_id) + (b"\x00" if schema_type == PROTOBUF else b"") + payload
