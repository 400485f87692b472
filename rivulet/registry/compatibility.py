"""Compatibility levels and the check a new schema passes before it is registered, as
Confluent's CompatibilityChecker: BACKWARD (the new schema reads data written with the
latest), FORWARD (the latest reads the new one's), FULL (both), their _TRANSITIVE forms
against every live version, NONE."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rivulet.registry.schema_types import ParsedSchema

NONE = "NONE"
BACKWARD = "BACKWARD"
BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
FORWARD = "FORWARD"
FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
FULL = "FULL"
FULL_TRANSITIVE = "FULL_TRANSITIVE"
LEVELS = (NONE, BACKWARD, BACKWARD_TRANSITIVE, FORWARD, FORWARD_TRANSITIVE, FULL, FULL_TRANSITIVE)
DEFAULT_LEVEL = BACKWARD


@dataclass(frozen=True)
class Previous:
    """A version the new schema is checked against (newest first)."""

    version: int
    schema: ParsedSchema


def _errors(new: ParsedSchema, old: ParsedSchema, level: str) -> list[str]:
    errors: list[str] = []
    if level.startswith(BACKWARD) or level.startswith(FULL):
        errors += new.read_errors(old)
    if level.startswith(FORWARD) or level.startswith(FULL):
        errors += old.read_errors(new, reader_name="old", writer_name="new")
    return errors


def check(new: ParsedSchema, previous: Sequence[Previous], level: str) -> list[str]:
    """Why ``new`` is not compatible under ``level`` with the live versions in ``previous``
    (newest first): the details of the first version it fails against, with Confluent's
    trailing ``{oldSchemaVersion: ...}``, ``{oldSchema: ...}`` and ``{compatibility: ...}``
    items; empty if it passes."""
    if level == NONE or not previous:
        return []
    against = previous if level.endswith("_TRANSITIVE") else previous[:1]
    for prev in against:
        if prev.schema.schema_type != new.schema_type:
            return [f"{{errorType:'TYPE_MISMATCH', description:'Incompatible schema type: {new.schema_type} is not "
                    f"{prev.schema.schema_type}', additionalInfo:''}}", f"{{oldSchemaVersion: {prev.version}}}",
                    f"{{oldSchema: '{prev.schema.canonical()}'}}", f"{{compatibility: '{level}'}}"]
        errors = _errors(new, prev.schema, level)
        if errors:
            return errors + [f"{{oldSchemaVersion: {prev.version}}}", f"{{oldSchema: '{prev.schema.canonical()}'}}",
                             f"{{compatibility: '{level}'}}"]
    return []
