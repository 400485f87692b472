"""The registry's operations, one per REST call, over the replayed state: what each answers
and which records of ``_schemas`` a change writes, with Confluent's errors. It knows nothing of
HTTP (``rest.py``) nor of Kafka (the ``Store``)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol, TypeVar

from rivulet.registry import compatibility as C
from rivulet.registry import errors as E
from rivulet.registry import state as S
from rivulet.registry.client import SCHEMA_NOT_FOUND, SUBJECT_NOT_FOUND, RegisteredSchema, RegistryError
from rivulet.registry.schema_types import AVRO, ParsedSchema, Reference, ResolvedReference, SchemaProvider
from rivulet.registry.state import RegistryState, SchemaVersion

READWRITE = "READWRITE"
READONLY = "READONLY"
IMPORT = "IMPORT"
MODES = (READWRITE, READONLY, IMPORT)
MAX_VERSION = 2**31 - 1
Record = tuple[bytes, bytes | None]
_T = TypeVar("_T")


class Store(Protocol):
    """Where the state lives: ``reading()`` holds it still while an answer is made; ``write``
    appends records and returns once they are replayed into ``state``."""

    state: RegistryState

    def reading(self) -> AbstractContextManager[object]:
        ...

    def write(self, records: list[Record]) -> None:
        ...

    def sync(self) -> None:
        """Return once everything written to the topic so far is replayed."""
        ...


def parse_version(version: str, allow_negative_one: bool = True) -> int | None:
    """A path's version: a number in [1, 2^31-1], or ``latest`` (and -1) as None; else 42202."""
    if version == "latest" or (allow_negative_one and version == "-1"):
        return None
    try:
        n = int(version)
    except ValueError:
        raise E.invalid_version(version) from None
    if not 1 <= n <= MAX_VERSION:
        raise E.invalid_version(version)
    return n


def _schema_json(sv: SchemaVersion, text: str | None = None) -> dict[str, object]:
    """A schema as Confluent answers it: ``schemaType`` only when not Avro, ``references``
    only when there are some; ``text`` in place of the stored one (another ``format``)."""
    doc: dict[str, object] = {}
    if sv.schema_type != AVRO:
        doc["schemaType"] = sv.schema_type
    if sv.references:
        doc["references"] = [r.to_json() for r in sv.references]
    doc["schema"] = sv.schema if text is None else text
    return doc


def _version_json(sv: SchemaVersion, text: str | None = None) -> dict[str, object]:
    return {"subject": sv.subject, "version": sv.version, "id": sv.schema_id, **_schema_json(sv, text)}


class SchemaRegistry:
    """The operations. ``providers`` are the schema types served, by name."""

    def __init__(self, store: Store, providers: Mapping[str, SchemaProvider], default_level: str = C.DEFAULT_LEVEL,
                 max_schema_bytes: int = 1 << 20, shared: bool = False) -> None:
        """``shared``: other instances may have written to the topic (a cluster's former
        writer): each change then first reads the topic to its end, as Confluent's writer does."""
        self.store = store
        self.shared = shared
        self.providers = dict(providers)
        self.default_level = default_level
        self.max_schema_bytes = max_schema_bytes
        # One change at a time: a check and the write it decides stay together.
        self._writing = threading.Lock()
        self._parsed: dict[tuple[str, str, tuple[Reference, ...]], ParsedSchema] = {}

    @contextmanager
    def _change(self) -> Iterator[None]:
        with self._writing:
            if self.shared:
                self.store.sync()
            yield

    @property
    def state(self) -> RegistryState:
        return self.store.state

    # -- schemas

    def _provider(self, schema_type: str) -> SchemaProvider:
        provider = self.providers.get(schema_type.upper())
        if provider is None:
            raise E.error(E.INVALID_SCHEMA, f"Invalid schema type {schema_type}")
        return provider

    def _resolve(self, refs: tuple[Reference, ...], seen: frozenset[tuple[str, int]] = frozenset()
                 ) -> list[ResolvedReference]:
        out = []
        for r in refs:
            sv = self.state.versions.get(r.subject, {}).get(r.version)
            if sv is None or (r.subject, r.version) in seen:
                raise E.error(E.INVALID_SCHEMA, f"Invalid schema: no schema reference found for subject "
                                                f"\"{r.subject}\" and version {r.version}")
            deps = self._resolve(sv.references, seen | {(r.subject, r.version)})
            out.append(ResolvedReference(r.name, sv.schema, tuple(deps)))
        return out

    def _parse(self, schema_type: str, text: str, refs: tuple[Reference, ...],
               resolved: list[ResolvedReference] | None = None) -> ParsedSchema:
        key = (schema_type, text, refs)
        parsed = self._parsed.get(key)
        if parsed is None:
            try:
                parsed = self._provider(schema_type).parse(text, self._resolve(refs) if resolved is None else resolved)
            except ValueError as e:
                raise E.error(E.INVALID_SCHEMA, str(e)) from None
            self._parsed[key] = parsed
        return parsed

    def _parse_request(self, schema_type: str, text: str, refs: tuple[Reference, ...]) -> ParsedSchema:
        """A request's schema, parsed outside the state's lock (protoc takes a while, and the
        topic's replay waits on that lock): only its references are read under it."""
        if (schema_type, text, refs) not in self._parsed:
            with self.store.reading():
                resolved = self._resolve(refs)
            return self._parse(schema_type, text, refs, resolved)
        return self._parsed[(schema_type, text, refs)]

    def _parse_version(self, sv: SchemaVersion) -> ParsedSchema:
        return self._parse(sv.schema_type, sv.schema, sv.references)

    def _request_schema(self, body: object) -> tuple[str, str, tuple[Reference, ...]]:
        """The schema type, text and references of a register, lookup or compatibility body."""
        if not isinstance(body, dict):
            raise E.RestError(422, 422, "Unrecognized request body: a JSON object is expected")
        text = body.get("schema")
        if not isinstance(text, str) or not text:
            raise E.error(E.INVALID_SCHEMA, "Empty schema")
        if len(text.encode()) > self.max_schema_bytes:
            raise E.error(E.SCHEMA_TOO_LARGE, f"Schema size {len(text.encode())} exceeds the maximum of "
                                              f"{self.max_schema_bytes} bytes")
        schema_type = body.get("schemaType") or AVRO
        if not isinstance(schema_type, str):
            raise E.error(E.INVALID_SCHEMA, f"Invalid schema type {schema_type}")
        raw_refs = body.get("references") or []
        try:
            refs = tuple(Reference(str(r["name"]), str(r["subject"]), int(r["version"])) for r in raw_refs)
        except (KeyError, TypeError, ValueError):
            raise E.error(E.INVALID_SCHEMA, f"Invalid schema references {raw_refs}") from None
        return schema_type.upper(), text, refs

    # -- subjects

    def subjects(self, deleted: bool = False, prefix: str = "") -> list[str]:
        with self.store.reading():
            return sorted(s for s in self.state.versions
                          if s.startswith(prefix) and self.state.subject_versions(s, deleted))

    def _live_or_404(self, subject: str, deleted: bool = False) -> list[SchemaVersion]:
        versions = self.state.subject_versions(subject, deleted)
        if not versions:
            raise E.subject_not_found(subject)
        return versions

    def versions(self, subject: str, deleted: bool = False) -> list[int]:
        with self.store.reading():
            return [sv.version for sv in self._live_or_404(subject, deleted)]

    def _find_version(self, subject: str, version: str, deleted: bool = False) -> SchemaVersion:
        n = parse_version(version)
        versions = self._live_or_404(subject, deleted)
        if n is None:
            return versions[-1]
        for sv in versions:
            if sv.version == n:
                return sv
        raise E.version_not_found(n)

    def _formatted(self, sv: SchemaVersion, fmt: str | None) -> str | None:
        return self._parse_version(sv).formatted(fmt) if fmt else None

    def get_version(self, subject: str, version: str, deleted: bool = False,
                    fmt: str | None = None) -> dict[str, object]:
        with self.store.reading():
            sv = self._find_version(subject, version, deleted)
            return _version_json(sv, self._formatted(sv, fmt))

    def get_version_schema(self, subject: str, version: str, deleted: bool = False) -> str:
        with self.store.reading():
            return self._find_version(subject, version, deleted).schema

    def referenced_by(self, subject: str, version: str) -> list[int]:
        with self.store.reading():
            sv = self._find_version(subject, version)
            return sorted({r.schema_id for r in self.state.referenced_by(sv.subject, sv.version)})

    def lookup(self, subject: str, body: object, deleted: bool = False, normalize: bool = False) -> dict[str, object]:
        """POST /subjects/{subject}: the version holding this schema."""
        schema_type, text, refs = self._request_schema(body)
        with self.store.reading():
            self._live_or_404(subject, deleted)
        parsed = self._parse_request(schema_type, text, refs)
        with self.store.reading():
            for sv in reversed(self._live_or_404(subject, deleted)):
                if sv.content_key() == (schema_type, parsed.canonical(), refs):
                    return _version_json(sv)
            raise E.schema_not_found()

    # -- configs and modes

    def level(self, subject: str | None) -> str:
        st = self.state
        if subject is not None and subject in st.subject_levels:
            return st.subject_levels[subject]
        return st.global_level or self.default_level

    def get_config(self, subject: str | None, default_to_global: bool = False) -> dict[str, object]:
        with self.store.reading():
            if subject is not None and subject not in self.state.subject_levels and not default_to_global:
                raise E.not_configured(subject, "compatibility")
            return {"compatibilityLevel": self.level(subject)}

    def set_config(self, subject: str | None, body: object) -> dict[str, object]:
        level = body.get("compatibility") if isinstance(body, dict) else None
        if not isinstance(level, str) or level.upper() not in C.LEVELS:
            raise E.invalid_compatibility_level()
        self._check_writable(subject)
        with self._change():
            self.store.write([(S.config_key(subject), S.config_value(level.upper()))])
        return {"compatibility": level.upper()}

    def delete_config(self, subject: str | None) -> dict[str, object]:
        with self._change():
            with self.store.reading():
                if subject is not None and subject not in self.state.subject_levels:
                    raise E.not_configured(subject, "compatibility")
                before = self.level(subject)
            self.store.write([(S.config_key(subject), None)])
        return {"compatibilityLevel": before}

    def mode(self, subject: str | None) -> str:
        st = self.state
        if subject is not None and subject in st.subject_modes:
            return st.subject_modes[subject]
        return st.global_mode or READWRITE

    def get_mode(self, subject: str | None, default_to_global: bool = False) -> dict[str, object]:
        with self.store.reading():
            if subject is not None and subject not in self.state.subject_modes and not default_to_global:
                raise E.not_configured(subject, "mode")
            return {"mode": self.mode(subject)}

    def set_mode(self, subject: str | None, body: object, force: bool = False) -> dict[str, object]:
        mode = body.get("mode") if isinstance(body, dict) else None
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise E.invalid_mode()
        mode = mode.upper()
        with self._change():
            with self.store.reading():
                if mode == IMPORT and not force and (
                        self.state.subject_versions(subject) if subject is not None else self.state.versions):
                    raise E.error(E.OPERATION_NOT_PERMITTED, "Cannot import since found existing subjects")
            self.store.write([(S.mode_key(subject), S.mode_value(mode))])
        return {"mode": mode}

    def delete_mode(self, subject: str) -> dict[str, object]:
        with self._change():
            with self.store.reading():
                if subject not in self.state.subject_modes:
                    raise E.not_configured(subject, "mode")
                before = self.state.subject_modes[subject]
            self.store.write([(S.mode_key(subject), None)])
        return {"mode": before}

    def _check_writable(self, subject: str | None) -> None:
        if self.mode(subject) == READONLY:
            raise E.error(E.OPERATION_NOT_PERMITTED, f"Subject {subject} is in read-only mode"
                          if subject is not None else "The registry is in read-only mode")

    # -- compatibility

    def _previous(self, subject: str) -> list[C.Previous]:
        return [C.Previous(sv.version, self._parse_version(sv))
                for sv in reversed(self.state.subject_versions(subject))]

    def check_compatibility(self, subject: str, version: str | None, body: object,
                            verbose: bool = False) -> dict[str, object]:
        """POST /compatibility/subjects/{subject}/versions[/{version}]."""
        schema_type, text, refs = self._request_schema(body)
        parsed = self._parse_request(schema_type, text, refs)
        with self.store.reading():
            level = self.level(subject)
            if version is None:
                against = self._previous(subject)
            else:
                n = parse_version(version)
                live = self.state.subject_versions(subject)
                if not live and n is None:
                    against = []  # nothing to be incompatible with
                else:
                    sv = self._find_version(subject, version)
                    against = [C.Previous(sv.version, self._parse_version(sv))]
                    level = level.removesuffix("_TRANSITIVE")
            messages = C.check(parsed, against, level)
        out: dict[str, object] = {"is_compatible": not messages}
        if verbose:
            out["messages"] = messages
        return out

    # -- changes

    def register(self, subject: str, body: object, normalize: bool = False) -> dict[str, object]:
        """POST /subjects/{subject}/versions: the schema's id, registered if it is new to
        the subject and compatible with its versions."""
        _check_subject(subject)
        schema_type, text, refs = self._request_schema(body)
        assert isinstance(body, dict)
        wanted_id, wanted_version = body.get("id"), body.get("version")
        if self.mode(subject) == READONLY:
            raise E.error(E.OPERATION_NOT_PERMITTED, f"Subject {subject} is in read-only mode")
        parsed = self._parse_request(schema_type, text, refs)
        with self._change():
            with self.store.reading():
                st = self.state
                mode = self.mode(subject)
                if mode == READONLY:
                    raise E.error(E.OPERATION_NOT_PERMITTED, f"Subject {subject} is in read-only mode")
                canonical = parsed.normalized() if normalize else parsed.canonical()
                content = (schema_type, canonical, refs)
                for sv in reversed(st.subject_versions(subject)):
                    if sv.content_key() == content:
                        return {"id": sv.schema_id}
                existing_id = st.by_content.get(content)
                if mode == IMPORT:
                    schema_id, version = self._import_target(subject, wanted_id, wanted_version, content)
                else:
                    if wanted_id not in (None, -1, 0) and wanted_id != existing_id:
                        raise E.error(E.OPERATION_NOT_PERMITTED, f"Subject {subject} is not in import mode")
                    messages = C.check(parsed, self._previous(subject), self.level(subject))
                    if messages:
                        raise E.error(
                            E.INCOMPATIBLE_SCHEMA, f"Schema being registered is incompatible with an earlier schema for subject "
                            f"\"{subject}\", details: [{', '.join(messages)}]")
                    schema_id = existing_id if existing_id is not None else st.max_id + 1
                    every = st.subject_versions(subject, deleted=True)
                    version = (every[-1].version if every else 0) + 1
                record = SchemaVersion(subject, version, schema_id, schema_type, canonical, refs)
            self.store.write([(S.schema_key(subject, version), S.schema_value(record))])
        return {"id": schema_id}

    def _import_target(self, subject: str, wanted_id: object, wanted_version: object,
                       content: tuple[str, str, tuple[Reference, ...]]) -> tuple[int, int]:
        """IMPORT mode keeps the id (and version) the request names, as a migration does."""
        st = self.state
        if not isinstance(wanted_id, int) or wanted_id < 1:
            raise E.error(E.OPERATION_NOT_PERMITTED, "Subject " + subject + " is in import mode: an id is required")
        holder = st.by_id.get(wanted_id)
        if holder is not None and holder.content_key() != content:
            raise E.RestError(422, E.ID_DOES_NOT_MATCH, f"Schema already registered with id {wanted_id} "
                              "instead of input id")
        every = st.subject_versions(subject, deleted=True)
        version = wanted_version if isinstance(wanted_version, int) and wanted_version > 0 else \
            (every[-1].version if every else 0) + 1
        return wanted_id, version

    def delete_version(self, subject: str, version: str, permanent: bool = False) -> int:
        with self._change():
            with self.store.reading():
                self._check_writable(subject)
                n = parse_version(version)
                every = self.state.subject_versions(subject, deleted=True)
                if not every:
                    raise E.subject_not_found(subject)
                if n is None:
                    live = [sv for sv in every if not sv.deleted]
                    if not live and not permanent:
                        raise E.subject_not_found(subject)
                    sv = (live or every)[-1]
                else:
                    found = [sv for sv in every if sv.version == n]
                    if not found:
                        raise E.version_not_found(n)
                    sv = found[0]
                if permanent and not sv.deleted:
                    raise E.not_soft_deleted(subject, sv.version)
                if not permanent and sv.deleted:
                    raise E.soft_deleted(subject, sv.version)
                if self.state.referenced_by(subject, sv.version):
                    raise E.reference_exists(f"{{subject={subject},version={sv.version}}}")
            if permanent:
                self.store.write([(S.schema_key(subject, sv.version), None)])
            else:
                self.store.write([(S.schema_key(subject, sv.version), S.schema_value(_deleted(sv)))])
        return sv.version

    def delete_subject(self, subject: str, permanent: bool = False) -> list[int]:
        with self._change():
            with self.store.reading():
                self._check_writable(subject)
                every = self.state.subject_versions(subject, deleted=True)
                if not every:
                    raise E.subject_not_found(subject)
                live = [sv for sv in every if not sv.deleted]
                if permanent and live:
                    raise E.not_soft_deleted(subject)
                if not permanent and not live:
                    raise E.soft_deleted(subject)
                for sv in live:
                    if self.state.referenced_by(subject, sv.version):
                        raise E.reference_exists(f"{{subject={subject},version={sv.version}}}")
            if permanent:
                records: list[Record] = [(S.schema_key(subject, sv.version), None) for sv in every]
                records.append((S.clear_subject_key(subject), S.clear_subject_value(subject)))
                self.store.write(records)
                return [sv.version for sv in every]
            records = [(S.delete_subject_key(subject), S.delete_subject_value(subject, live[-1].version))]
            records += [(S.schema_key(subject, sv.version), S.schema_value(_deleted(sv))) for sv in live]
            self.store.write(records)
            return [sv.version for sv in live]

    # -- ids

    def schema_by_id(self, schema_id: int, subject: str | None = None, fmt: str | None = None) -> dict[str, object]:
        with self.store.reading():
            sv = self.state.by_id.get(schema_id)
            if sv is not None and subject:
                holders = [v for v in self.state.subject_versions(subject, deleted=True) if v.schema_id == schema_id]
                sv = holders[0] if holders else None
            if sv is None:
                raise E.schema_not_found(schema_id)
            return _schema_json(sv, self._formatted(sv, fmt))

    # -- in the broker's process (the Iceberg translator), as a RegistryClient would answer

    def registered_by_id(self, schema_id: int) -> RegisteredSchema:
        """The schema of an id, its references resolved (the text registered: Protobuf's
        .proto, not serialized). Shared (a cluster's): an id not seen yet is looked for again
        once the topic is read to its end, as another broker's registry may have just taken it."""
        found = self._registered(lambda: self.state.by_id.get(schema_id))
        if found is None and self.shared:
            self._in_process(self.store.sync)
            found = self._registered(lambda: self.state.by_id.get(schema_id))
        if found is None:
            raise RegistryError(f"schema {schema_id} not found", 404, SCHEMA_NOT_FOUND)
        return found

    def registered_latest(self, subject: str) -> RegisteredSchema:
        """The subject's latest live version, as ``registered_by_id``."""
        found = self._registered(lambda: (self.state.subject_versions(subject) or [None])[-1])
        if found is None:
            raise RegistryError(f"subject {subject} not found", 404, SUBJECT_NOT_FOUND)
        return found

    def _registered(self, find: Callable[[], SchemaVersion | None]) -> RegisteredSchema | None:
        def read() -> RegisteredSchema | None:
            with self.store.reading():
                sv = find()
                if sv is None:
                    return None
                return RegisteredSchema(sv.schema_id, sv.schema_type, sv.schema, tuple(self._resolve(sv.references)))
        return self._in_process(read)

    @staticmethod
    def _in_process(fn: Callable[[], _T]) -> _T:
        """``fn``, its store's errors (not read yet, unreadable) as a client would see them."""
        try:
            return fn()
        except E.RestError as e:
            raise RegistryError(e.message, e.status, e.error_code) from None

    def id_versions(self, schema_id: int, deleted: bool = False) -> list[dict[str, object]]:
        with self.store.reading():
            found = [{"subject": sv.subject, "version": sv.version}
                     for s in sorted(self.state.versions) for sv in self.state.subject_versions(s, deleted)
                     if sv.schema_id == schema_id]
            if not found:
                raise E.schema_not_found(schema_id)
            return found

    def id_subjects(self, schema_id: int, deleted: bool = False) -> list[str]:
        return sorted({str(v["subject"]) for v in self.id_versions(schema_id, deleted)})

    def schemas(self, deleted: bool = False) -> list[dict[str, object]]:
        """GET /schemas: every version, by subject."""
        with self.store.reading():
            return [_version_json(sv) for s in sorted(self.state.versions)
                    for sv in self.state.subject_versions(s, deleted)]

    def types(self) -> list[str]:
        return sorted(self.providers)


def _deleted(sv: SchemaVersion) -> SchemaVersion:
    return SchemaVersion(sv.subject, sv.version, sv.schema_id, sv.schema_type, sv.schema, sv.references, True)


def _check_subject(subject: str) -> None:
    # Confluent refuses control characters and its reserved names.
    if not subject or any(ord(c) < 0x20 for c in subject) or subject in ("__GLOBAL", "__EMPTY"):
        raise E.invalid_subject(subject)
