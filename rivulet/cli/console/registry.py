"""The console's view of a schema registry: its subjects, a subject's versions and compatibility,
and record bytes in the registry's wire format decoded with their writer's schema."""

from __future__ import annotations

import json
import struct
import threading
from dataclasses import dataclass

from rivulet.registry.client import RegistryClient
from rivulet.registry.schema_types import AVRO
from rivulet.registry.wire import WireDecoder, WireFormatError


@dataclass(frozen=True)
class SubjectSummary:
    name: str
    latest: int
    schema_id: int
    schema_type: str


@dataclass(frozen=True)
class SubjectDetail:
    name: str
    versions: list[int]
    shown: dict  # the version shown, as the API answers it
    compatibility: str


class RegistryView:
    """``client`` reads the registry: its subjects, and the schemas values are decoded with."""

    def __init__(self, client: RegistryClient) -> None:
        self.client = client
        self.url = client.url
        self._decoder = WireDecoder(client)
        self._lock = threading.Lock()

    def subjects(self) -> list[SubjectSummary]:
        out = []
        for name in sorted(self.client.subjects()):
            latest = self.client.version(name)
            out.append(SubjectSummary(name, int(latest["version"]), int(latest["id"]),
                                      str(latest.get("schemaType") or AVRO)))
        return out

    def compatibility(self) -> str:
        return self.client.compatibility()

    def subject(self, name: str, version: int | None) -> SubjectDetail:
        return SubjectDetail(name, self.client.versions(name),
                             self.client.version(name, version if version is not None else "latest"),
                             self.client.compatibility(name))

    def decode(self, data: bytes | None) -> str:
        """The bytes decoded to JSON text with their writer's schema; why not, if they cannot be."""
        if data is None:
            return "null"
        if len(data) < 5 or data[0] != 0:
            return "(not in the schema registry's wire format)"
        (schema_id,) = struct.unpack_from(">I", data, 1)
        try:
            with self._lock:  # the decoder keeps what it fetched; pages are served on threads
                decoded = self._decoder.decode(data)
        except WireFormatError as e:
            return f"(schema {schema_id}: {e})"
        except Exception as e:  # each schema library raises its own for data it cannot read
            return f"(schema {schema_id}: cannot decode: {type(e).__name__}: {e})"
        return json.dumps(json.loads(decoded or b"null"), indent=2, ensure_ascii=False)
