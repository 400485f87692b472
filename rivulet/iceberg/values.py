"""The typed value column of the schema modes (``value_schema_id_prefix``,
``value_schema_latest``): which registered schema the table's ``value`` column follows, and the
values decoded into it through ``rivulet.registry.arrow``, with why a value cannot be held.

The column follows one reader schema. ``value_schema_latest``: the subject
``<topic>-value``'s latest version (values carry no prefix). ``value_schema_id_prefix``: the
newest (highest id) of the schemas the values name that the registry knows, so that a new
version registered and used by producers evolves the table; values written with older versions
are read through it (Avro's resolution; Protobuf by field number). A version the table's
schema cannot evolve to (a changed column type) is refused: its values are read with the
reader the table has, and those that do not read are invalid, with both reasons.

Runs on the translation thread; imports pyarrow and the registry's decoders.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from rivulet.iceberg.offsets import VALUE_MESSAGE, VALUE_SCHEMA_ID
from rivulet.registry.arrow import BAD_MAGIC, UNKNOWN_ID, ArrowDecoder, arrow_type, protobuf_message
from rivulet.registry.client import RegisteredSchema, RegistryError, SubjectLookup
from rivulet.registry.prefix import framed, schema_id_of
from rivulet.registry.schema_types import PROTOBUF
from rivulet.storage.config import ICEBERG_SCHEMA_LATEST

# (row index, why its value cannot be held)
Invalid = tuple[int, str]


@dataclass(frozen=True)
class ValueSchema:
    """What the column follows: a registered schema and, for Protobuf, the message of it that
    the values hold (None: the file's first)."""

    registered: RegisteredSchema
    message: str | None = None

    @property
    def schema_id(self) -> int:
        return self.registered.schema_id

    def arrow_type(self) -> pa.DataType:
        return arrow_type(self.registered, self.message)


def value_subject(topic: str) -> str:
    """The subject of a topic's values (Confluent's TopicNameStrategy)."""
    return f"{topic}-value"


class TypedValues:
    """One topic's value column. Not thread-safe: the translation thread alone uses it."""

    def __init__(self, lookup: SubjectLookup, mode: str, topic: str) -> None:
        self._lookup = lookup
        self._latest = mode == ICEBERG_SCHEMA_LATEST
        self._subject = value_subject(topic)
        self.reader: ValueSchema | None = None
        self._decoder: ArrowDecoder | None = None
        self._refused: dict[int, str] = {}  # schema id -> why the table cannot follow it

    def candidate(self, values: Sequence[bytes | None]) -> ValueSchema | None:
        """The schema the column should follow for ``values`` (None: none known yet)."""
        if self._latest:
            try:
                return ValueSchema(self._lookup.latest(self._subject))
            except RegistryError as e:
                if e.not_found:  # not registered yet: wait for it rather than call the values invalid
                    raise RegistryError(f"value_schema_latest: no subject {self._subject} in the schema registry") from None
                raise
        best = self.reader
        first: dict[int, bytes] = {}  # schema id -> its first value
        for v in values:
            schema_id = None if v is None else schema_id_of(v)
            if schema_id is not None and schema_id not in first:
                first[schema_id] = v  # type: ignore[assignment]
        for schema_id in sorted(first, reverse=True):
            if best is not None and schema_id <= best.schema_id:
                break
            if schema_id in self._refused:
                continue
            try:
                found = self._lookup.schema_by_id(schema_id)
            except RegistryError as e:
                if e.not_found:
                    continue  # its values are invalid (unknown schema id)
                raise
            if best is not None and found.schema_type != best.registered.schema_type:
                continue
            if found.schema_type != PROTOBUF:
                return ValueSchema(found)
            try:
                return ValueSchema(found, protobuf_message(found, first[schema_id]))
            except ValueError:
                continue  # its message indexes name no message: the value is invalid
        return best

    def follow(self, reader: ValueSchema) -> None:
        """The table's column now has ``reader``'s type."""
        if reader != self.reader:
            self.reader = reader
            self._decoder = ArrowDecoder(self._lookup, reader.registered, reader.message)

    def resume(self, schema_id: int, message: str | None) -> None:
        """Follow the schema the table's last snapshot recorded (the table has its type), so
        that a new leader reads values as the last one did; one the registry no longer has is
        left for ``candidate`` to replace."""
        try:
            self.follow(ValueSchema(self._lookup.schema_by_id(schema_id), message))
        except RegistryError as e:
            if not e.not_found:
                raise

    def recorded(self) -> dict[str, str]:
        """The snapshot summary entries naming the schema followed (none while there is none)."""
        if self.reader is None:
            return {}
        out = {VALUE_SCHEMA_ID: str(self.reader.schema_id)}
        if self.reader.message is not None:
            out[VALUE_MESSAGE] = self.reader.message
        return out

    def forget(self) -> None:
        """A commit failed: the table may not have the reader's type; the next one finds out."""
        self.reader = None
        self._decoder = None

    def refuse(self, schema_id: int, reason: str) -> None:
        self._refused[schema_id] = reason

    def decode(self, values: Sequence[bytes | None]) -> tuple[pa.Array | None, list[Invalid]]:
        """The column (None while no schema is known) and the values it cannot hold."""
        if self._latest and self.reader is not None:
            values = [None if v is None else framed(self.reader.schema_id, self.reader.registered.schema_type, v)
                      for v in values]
        if self._decoder is None:
            return None, [(i, self._unreadable(v)) for i, v in enumerate(values) if v is not None]
        decoded = self._decoder.decode(values)
        invalid = []
        for f in decoded.faults:
            reason = f"{f.kind}: {f.message}"
            if f.schema_id is not None and f.schema_id in self._refused:
                reason = f"{reason} ({self._refused[f.schema_id]})"
            invalid.append((f.index, reason))
        return decoded.column, invalid

    @staticmethod
    def _unreadable(value: bytes) -> str:
        schema_id = schema_id_of(value)
        if schema_id is None:
            return f"{BAD_MAGIC}: not in the schema registry's wire format (magic byte 0 and a schema id)"
        return f"{UNKNOWN_ID}: schema {schema_id} not found"
