"""What the registry knows, as the records of ``_schemas`` left it: a pure state machine that
every instance replays in the topic's order, in the key and value formats Confluent's
registry writes (so that Confluent's, Karapace's and this one read each other's topic).

Keys are JSON objects whose ``keytype`` says what they are:

- ``SCHEMA`` (``subject``, ``version``, ``magic`` 1): the value holds ``subject``, ``version``,
  ``id``, ``schemaType`` (absent for Avro), ``references``, ``schema`` and ``deleted`` (a soft
  delete); a null value is a permanent delete.
- ``CONFIG`` / ``MODE`` (``subject``, null for the global one): ``{"compatibilityLevel": ...}`` /
  ``{"mode": ...}``; a null value removes a subject's setting.
- ``DELETE_SUBJECT`` / ``CLEAR_SUBJECT``: a subject soft deleted up to a version / cleared.
- ``NOOP``: written only to learn how far the topic goes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from rivulet.registry.schema_types import AVRO, Reference

SCHEMA = "SCHEMA"
CONFIG = "CONFIG"
MODE = "MODE"
NOOP = "NOOP"
DELETE_SUBJECT = "DELETE_SUBJECT"
CLEAR_SUBJECT = "CLEAR_SUBJECT"


@dataclass(frozen=True)
class SchemaVersion:
    """One version of a subject, as its SCHEMA record states it."""

    subject: str
    version: int
    schema_id: int
    schema_type: str
    schema: str
    references: tuple[Reference, ...] = ()
    deleted: bool = False

    def content_key(self) -> tuple[str, str, tuple[Reference, ...]]:
        """What makes two registrations the same schema (and so the same id)."""
        return self.schema_type, self.schema, self.references


def _compact(doc: dict[str, object]) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def schema_key(subject: str, version: int) -> bytes:
    return _compact({"keytype": SCHEMA, "subject": subject, "version": version, "magic": 1})


def schema_value(v: SchemaVersion) -> bytes:
    doc: dict[str, object] = {"subject": v.subject, "version": v.version, "id": v.schema_id}
    if v.schema_type != AVRO:
        doc["schemaType"] = v.schema_type
    doc["references"] = [r.to_json() for r in v.references]
    doc["schema"] = v.schema
    doc["deleted"] = v.deleted
    return _compact(doc)


def config_key(subject: str | None) -> bytes:
    return _compact({"keytype": CONFIG, "subject": subject, "magic": 0})


def config_value(level: str) -> bytes:
    return _compact({"compatibilityLevel": level})


def mode_key(subject: str | None) -> bytes:
    return _compact({"keytype": MODE, "subject": subject, "magic": 0})


def mode_value(mode: str) -> bytes:
    return _compact({"mode": mode})


def noop_key() -> bytes:
    return _compact({"keytype": NOOP, "magic": 0})


def delete_subject_key(subject: str) -> bytes:
    return _compact({"keytype": DELETE_SUBJECT, "subject": subject, "magic": 0})


def delete_subject_value(subject: str, version: int) -> bytes:
    return _compact({"subject": subject, "version": version})


def clear_subject_key(subject: str) -> bytes:
    return _compact({"keytype": CLEAR_SUBJECT, "subject": subject, "magic": 0})


def clear_subject_value(subject: str) -> bytes:
    return _compact({"subject": subject})


def _set(settings: dict[str, str], subject: str, value: str | None) -> None:
    if value is None:
        settings.pop(subject, None)
    else:
        settings[subject] = value


@dataclass
class RegistryState:
    """Subjects, versions, ids, configs and modes; changed only by ``apply``."""

    versions: dict[str, dict[int, SchemaVersion]] = field(default_factory=dict)
    # An id's schema: the first registration that took it (the same content always has one id).
    by_id: dict[int, SchemaVersion] = field(default_factory=dict)
    by_content: dict[tuple[str, str, tuple[Reference, ...]], int] = field(default_factory=dict)
    # The highest id ever seen, kept across permanent deletes so that no id is used twice.
    max_id: int = 0
    global_level: str | None = None
    subject_levels: dict[str, str] = field(default_factory=dict)
    global_mode: str | None = None
    subject_modes: dict[str, str] = field(default_factory=dict)
    skipped: int = 0  # records of a kind or shape this registry does not read

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """Replay one record of ``_schemas``; one it cannot read is counted and skipped, as
        Confluent's reader does."""
        try:
            k = json.loads(key) if key else None
            v = json.loads(value) if value is not None else None
            if not isinstance(k, dict):
                raise ValueError("not a JSON object")
            kind = k.get("keytype")
            if kind == SCHEMA:
                self._apply_schema(k, v)
            elif kind in (CONFIG, MODE):
                self._apply_setting(kind == CONFIG, k.get("subject"), v)
            elif kind == DELETE_SUBJECT and v is not None:
                self._soft_delete_subject(v["subject"], int(v["version"]))
            elif kind in (NOOP, CLEAR_SUBJECT):
                pass  # CLEAR_SUBJECT's work is done by the SCHEMA tombstones that come with it
            else:
                self.skipped += 1
        except (ValueError, KeyError, TypeError):
            self.skipped += 1

    def _apply_setting(self, compatibility: bool, subject: object, v: dict | None) -> None:
        """A CONFIG (compatibility level) or MODE record, for the whole registry or one subject."""
        value = None if v is None else str(v["compatibilityLevel" if compatibility else "mode"])
        if subject is not None:
            _set(self.subject_levels if compatibility else self.subject_modes, str(subject), value)
        elif compatibility:
            self.global_level = value
        else:
            self.global_mode = value

    def _apply_schema(self, k: dict, v: dict | None) -> None:
        subject, version = str(k["subject"]), int(k["version"])
        if v is None:
            self._remove(subject, version)
            return
        refs = tuple(Reference(str(r["name"]), str(r["subject"]), int(r["version"]))
                     for r in v.get("references") or [])
        sv = SchemaVersion(subject, version, int(v["id"]), str(v.get("schemaType") or AVRO), str(v["schema"]), refs,
                           bool(v.get("deleted", False)))
        self.versions.setdefault(subject, {})[version] = sv
        self.by_id.setdefault(sv.schema_id, sv)
        self.by_content.setdefault(sv.content_key(), sv.schema_id)
        self.max_id = max(self.max_id, sv.schema_id)

    def _remove(self, subject: str, version: int) -> None:
        versions = self.versions.get(subject, {})
        gone = versions.pop(version, None)
        if not versions:
            self.versions.pop(subject, None)
        if gone is None:
            return
        # The id lives on while another version holds the same schema.
        holders = [sv for vs in self.versions.values() for sv in vs.values() if sv.schema_id == gone.schema_id]
        if holders:
            self.by_id[gone.schema_id] = holders[0]
        else:
            self.by_id.pop(gone.schema_id, None)
            self.by_content.pop(gone.content_key(), None)

    def _soft_delete_subject(self, subject: str, up_to: int) -> None:
        for version, sv in list(self.versions.get(subject, {}).items()):
            if version <= up_to and not sv.deleted:
                self.versions[subject][version] = SchemaVersion(sv.subject, sv.version, sv.schema_id, sv.schema_type,
                                                                sv.schema, sv.references, True)

    # -- reading

    def subject_versions(self, subject: str, deleted: bool = False) -> list[SchemaVersion]:
        """The subject's versions, oldest first; soft-deleted ones only with ``deleted``."""
        vs = self.versions.get(subject, {})
        return [vs[n] for n in sorted(vs) if deleted or not vs[n].deleted]

    def referenced_by(self, subject: str, version: int) -> list[SchemaVersion]:
        """The live versions whose schema references ``subject`` at ``version``."""
        return [sv for vs in self.versions.values() for sv in vs.values()
                if not sv.deleted and any(r.subject == subject and r.version == version for r in sv.references)]
