"""The schema types the registry knows, each behind one small interface: parse a schema text
(with the schemas it references), give its canonical text, and say why it cannot read data
written with another."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

AVRO = "AVRO"
JSON = "JSON"
PROTOBUF = "PROTOBUF"
# The names readers of topics give the types (rivulet consume --value-format, the Spark
# source's valueFormat), as the serializers are called.
FORMAT_TYPES = {"avro": AVRO, "json-schema": JSON, "protobuf": PROTOBUF}


@dataclass(frozen=True)
class Reference:
    """A schema reference: the ``name`` the referring schema uses for it, and the subject and
    version it is registered under."""

    name: str
    subject: str
    version: int

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True)
class ResolvedReference:
    """A reference with the text of the schema it names (and, depth first, of the schemas that
    one references)."""

    name: str
    schema: str
    dependencies: tuple[ResolvedReference, ...] = field(default=())


class ParsedSchema(Protocol):
    """A schema of one type, parsed."""

    schema_type: str

    def canonical(self) -> str:
        """The text the registry stores and answers, and compares to find a schema again."""
        ...

    def formatted(self, fmt: str) -> str:
        """The text in the ``format`` a GET asks for (Protobuf's ``serialized``); the
        canonical text for a format the type does not have."""
        ...

    def normalized(self) -> str:
        """The canonical text with what does not change the schema's meaning taken out
        (``normalize=true``)."""
        ...

    def read_errors(self, writer: ParsedSchema, reader_name: str = "new", writer_name: str = "old") -> list[str]:
        """Why data written with ``writer`` cannot be read with this schema, in Confluent's
        ``{errorType:..., description:..., additionalInfo:...}`` form (the two schemas called
        ``reader_name`` and ``writer_name`` in it); empty if it can."""
        ...


class CanonicalText:
    """What a schema type whose only text is its canonical one shares: that text for every
    format and, unless the type says otherwise, when normalized."""

    def __init__(self, text: str) -> None:
        self._canonical = text

    def canonical(self) -> str:
        return self._canonical

    def formatted(self, fmt: str) -> str:
        return self._canonical

    def normalized(self) -> str:
        return self._canonical


class SchemaProvider(Protocol):
    schema_type: str

    def parse(self, text: str, references: list[ResolvedReference]) -> ParsedSchema:
        """The parsed schema; ``ValueError`` with a message for the client if it is not one."""
        ...
