"""A small reading client of a schema registry's REST API (Confluent's, Karapace's or Rivulet's):
a schema by id and a subject's latest version, each with the schemas it references resolved,
over HTTP or HTTPS with basic authentication. What the decoders (``rivulet.registry.arrow``)
and the Spark source read schemas with; it caches nothing (its callers keep what they parse)."""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Protocol

from rivulet.registry.schema_types import AVRO, PROTOBUF, ResolvedReference

TIMEOUT_S = 30.0
SCHEMA_NOT_FOUND = 40403
SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402


class RegistryError(Exception):
    """The registry could not be asked, or answered an error (``status``, ``error_code``)."""

    def __init__(self, message: str, status: int = 0, error_code: int = 0) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code

    @property
    def not_found(self) -> bool:
        return self.error_code in (SCHEMA_NOT_FOUND, SUBJECT_NOT_FOUND, VERSION_NOT_FOUND)


@dataclass(frozen=True)
class RegisteredSchema:
    """A schema as the registry holds it. ``schema`` is Protobuf's base64 FileDescriptorProto
    (``format=serialized``) when fetched by this client, else the text registered;
    ``references`` are resolved, depth first."""

    schema_id: int
    schema_type: str
    schema: str
    references: tuple[ResolvedReference, ...] = ()


class SchemaLookup(Protocol):
    """Where decoders find the writers' schemas (a ``RegistryClient``). ``schema_by_id``
    raises ``RegistryError`` (``not_found`` for an unknown id)."""

    def schema_by_id(self, schema_id: int) -> RegisteredSchema:
        ...


class SubjectLookup(SchemaLookup, Protocol):
    """``SchemaLookup`` and a subject's latest version (``RegistryError``, ``not_found`` for an
    unknown subject): a ``RegistryClient``, or a broker's own registry in its process."""

    def latest(self, subject: str) -> RegisteredSchema:
        ...


def registry_client_tls(url: str, ca_location: str = "", certificate_location: str = "",
                 key_location: str = "") -> ssl.SSLContext | None:
    """The TLS context for a registry URL from Confluent's ``schema.registry.ssl.*`` locations (PEM
    files): None for http; for https the given CA (else the system's trust, or
    ``$SSL_CERT_FILE``), and a client certificate and key for mutual TLS."""
    if not url.lower().startswith("https"):
        return None
    context = ssl.create_default_context(cafile=ca_location or None)
    if certificate_location:
        context.load_cert_chain(certificate_location, key_location or None)
    return context


class RegistryClient:
    """``url``: the registry's base URL (``https://user:password@host:port`` gives the
    credentials too); ``user_info``: ``user:password`` for HTTP basic authentication
    (Confluent's ``basic.auth.user.info``); ``ssl_context`` for https URLs (with a client
    certificate for mutual TLS; else the system's trust, or ``$SSL_CERT_FILE``)."""

    def __init__(self, url: str, user_info: str = "", ssl_context: ssl.SSLContext | None = None,
                 timeout_s: float = TIMEOUT_S) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.username is not None:
            # Credentials in the URL (Confluent's basic.auth.credentials.source=URL).
            user_info = user_info or (f"{urllib.parse.unquote(parts.username)}:"
                                      f"{urllib.parse.unquote(parts.password or '')}")
            url = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
        self.url = url.rstrip("/")
        self._auth = "Basic " + base64.b64encode(user_info.encode()).decode() if user_info else ""
        self._ssl = ssl_context
        self._timeout = timeout_s

    def schema_by_id(self, schema_id: int) -> RegisteredSchema:
        doc = self._get(f"/schemas/ids/{schema_id}?format=serialized")
        return self._registered(schema_id, doc)

    def latest(self, subject: str) -> RegisteredSchema:
        doc = self._get(f"/subjects/{urllib.parse.quote(subject, safe='')}/versions/latest?format=serialized")
        return self._registered(int(doc["id"]), doc)

    def subjects(self) -> list[str]:
        return [str(s) for s in self._get_any("/subjects")]

    def versions(self, subject: str) -> list[int]:
        return [int(v) for v in self._get_any(f"/subjects/{urllib.parse.quote(subject, safe='')}/versions")]

    def version(self, subject: str, version: int | str = "latest") -> dict:
        """A version as the API answers it: subject, version, id, schemaType, schema, references."""
        return self._get(f"/subjects/{urllib.parse.quote(subject, safe='')}/versions/{version}")

    def compatibility(self, subject: str | None = None) -> str:
        """The subject's compatibility level (the registry's where it has none of its own)."""
        path = "/config" if subject is None else f"/config/{urllib.parse.quote(subject, safe='')}?defaultToGlobal=true"
        return str(self._get(path).get("compatibilityLevel", ""))

    def _registered(self, schema_id: int, doc: dict) -> RegisteredSchema:
        schema_type = str(doc.get("schemaType") or AVRO)
        refs = tuple(self._resolve(r, schema_type, set()) for r in doc.get("references") or [])
        return RegisteredSchema(schema_id, schema_type, str(doc["schema"]), refs)

    def _resolve(self, ref: dict, schema_type: str, seen: set[str]) -> ResolvedReference:
        if ref["name"] in seen:
            raise RegistryError(f"schema reference {ref['name']} refers back to itself")
        seen = seen | {ref["name"]}
        fmt = "?format=serialized" if schema_type == PROTOBUF else ""
        doc = self._get(f"/subjects/{urllib.parse.quote(ref['subject'], safe='')}/versions/{ref['version']}{fmt}")
        deps = tuple(self._resolve(d, schema_type, seen) for d in doc.get("references") or [])
        return ResolvedReference(str(ref["name"]), str(doc["schema"]), deps)

    def _get(self, path: str) -> dict:
        doc = self._get_any(path)
        if not isinstance(doc, dict):
            raise RegistryError(f"schema registry {self.url}{path}: not a JSON object")
        return doc

    def _get_any(self, path: str) -> object:
        req = urllib.request.Request(self.url + path, headers={"Accept": "application/vnd.schemaregistry.v1+json"})
        if self._auth:
            req.add_header("Authorization", self._auth)
        try:
            with urllib.request.urlopen(req, timeout=self._timeout, context=self._ssl) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            body = e.read().decode(errors="replace")
            try:
                code = int(json.loads(body).get("error_code", 0))
            except (ValueError, AttributeError):
                code = 0
            raise RegistryError(f"schema registry {self.url}{path}: HTTP {e.code} {body}", e.code, code) from None
        except OSError as e:
            raise RegistryError(f"schema registry {self.url}{path}: {e}") from None
