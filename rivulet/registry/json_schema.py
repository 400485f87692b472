"""JSON Schema through the ``jsonschema`` library (the schema checked against its draft's
meta-schema), with Confluent's compatibility rules for it: a change from the schema that wrote
to the one that reads is compatible or not by its kind (Confluent's JSON schema diff), the
content model of an object deciding what added and removed properties mean:

- open (``additionalProperties`` absent or true): data written may hold any property, so a
  property added with a schema other than ``{}`` may refuse old data; a removed one is fine;
- closed (``additionalProperties: false``): an added optional property is fine, an added
  required one or a removed one is not.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import jsonschema
import jsonschema.exceptions
import jsonschema.validators

from rivulet.registry.schema_types import JSON, CanonicalText, ParsedSchema, ResolvedReference

# Limits whose tightening refuses data the looser one allowed: (keyword, larger is looser).
_LIMITS = (("maxLength", True), ("minLength", False), ("maximum", True), ("minimum", False),
           ("exclusiveMaximum", True), ("exclusiveMinimum", False), ("maxItems", True), ("minItems", False),
           ("maxProperties", True), ("minProperties", False))


def _types(node: dict) -> set[str]:
    t = node.get("type")
    if t is None:
        return set()
    return {t} if isinstance(t, str) else set(t)


def _open(node: dict) -> bool:
    return node.get("additionalProperties", True) is not False


class _Diff:
    """The changes from ``writer`` (the schema data was written with) to ``reader``, each one
    Confluent's kind, path and whether a reader survives it."""

    def __init__(self) -> None:
        self.found: list[tuple[str, str, bool]] = []

    def add(self, kind: str, path: str, compatible: bool) -> None:
        self.found.append((kind, path, compatible))

    def compare(self, w: object, r: object, path: str) -> None:
        if not isinstance(w, dict) or not isinstance(r, dict):
            if w != r:
                self.add("TYPE_CHANGED" if (w is False or r is False) else "SCHEMA_CHANGED", path,
                         r is True or r == {})
            return
        self._compare_types(w, r, path)
        for kw, larger_is_looser in _LIMITS:
            self._compare_limit(w.get(kw), r.get(kw), kw, larger_is_looser, path)
        if "enum" in w or "enum" in r:
            we, re_ = w.get("enum"), r.get("enum")
            if re_ is not None and (we is None or not all(v in re_ for v in we)):
                self.add("ENUM_ARRAY_NARROWED" if we is not None else "ENUM_ARRAY_ADDED", path, False)
            elif we is not None and (re_ is None or len(re_) > len(we)):
                self.add("ENUM_ARRAY_EXTENDED" if re_ is not None else "ENUM_ARRAY_REMOVED", path, True)
        if "const" in r and w.get("const") != r.get("const"):
            self.add("CONST_CHANGED", path, False)
        self._compare_object(w, r, path)
        if "items" in w or "items" in r:
            self.compare(w.get("items", {}), r.get("items", {}), f"{path}/items")

    def _compare_types(self, w: dict, r: dict, path: str) -> None:
        wt, rt = _types(w), _types(r)
        if wt == rt or not rt:
            if wt and not rt:
                self.add("TYPE_EXTENDED", path, True)
            return
        # integer data is number data: a reader of number reads it.
        widened = {"number" if t == "integer" and "number" in rt else t for t in wt}
        if not wt or not widened <= rt:
            self.add("TYPE_CHANGED" if not wt & rt else "TYPE_NARROWED", path, False)
        else:
            self.add("TYPE_EXTENDED", path, True)

    def _compare_limit(self, wv: object, rv: object, kw: str, larger_is_looser: bool, path: str) -> None:
        name = "".join("_" + c if c.isupper() else c.upper() for c in kw).lstrip("_")
        if wv == rv:
            return
        if rv is None:
            self.add(f"{name}_REMOVED", path, True)
        elif wv is None:
            self.add(f"{name}_ADDED", path, False)
        elif isinstance(wv, (int, float)) and isinstance(rv, (int, float)):
            looser = rv > wv if larger_is_looser else rv < wv
            self.add(f"{name}_{'INCREASED' if rv > wv else 'DECREASED'}", path, looser)

    def _compare_object(self, w: dict, r: dict, path: str) -> None:
        wp, rp = w.get("properties") or {}, r.get("properties") or {}
        wreq, rreq = set(w.get("required") or []), set(r.get("required") or [])
        if _open(w) and not _open(r):
            self.add("ADDITIONAL_PROPERTIES_REMOVED", path, False)
        elif not _open(w) and _open(r):
            self.add("ADDITIONAL_PROPERTIES_ADDED", path, True)
        elif isinstance(w.get("additionalProperties"), dict) or isinstance(r.get("additionalProperties"), dict):
            self.compare(w.get("additionalProperties", {}), r.get("additionalProperties", {}),
                         f"{path}/additionalProperties")
        for name in rp.keys() - wp.keys():
            p = f"{path}/properties/{name}"
            if name in rreq:
                self.add("REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL" if not _open(w)
                         else "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", p, False)
            elif not _open(w):
                self.add("OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL", p, True)
            elif rp[name] in ({}, True):
                self.add("PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL", p, True)
            else:
                self.add("PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", p, False)
        for name in wp.keys() - rp.keys():
            p = f"{path}/properties/{name}"
            if _open(r):
                self.add("PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL", p, True)
            else:
                self.add("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", p, False)
        for name in sorted(wp.keys() & rp.keys()):
            self.compare(wp[name], rp[name], f"{path}/properties/{name}")
        for name in sorted(rreq - wreq):
            if name in wp:
                self.add("REQUIRED_ATTRIBUTE_ADDED", f"{path}/required/{name}", False)
        for name in sorted(wreq - rreq):
            self.add("REQUIRED_ATTRIBUTE_REMOVED", f"{path}/required/{name}", True)


def _describe(kind: str, path: str, reader: str, writer: str) -> str:
    words = kind.lower().replace("_", " ")
    return f"A change ({words}) at path '{path}' in the {reader} schema makes it unable to read the {writer} schema's data"


class JsonSchema(CanonicalText):
    schema_type = JSON

    def __init__(self, doc: object, text: str) -> None:
        super().__init__(text)
        self.doc = doc

    def normalized(self) -> str:
        return json.dumps(self.doc, separators=(",", ":"), sort_keys=True)

    def changes_from(self, writer: JsonSchema) -> Iterator[tuple[str, str, bool]]:
        d = _Diff()
        d.compare(writer.doc, self.doc, "#")
        return iter(d.found)

    def read_errors(self, writer: ParsedSchema, reader_name: str = "new", writer_name: str = "old") -> list[str]:
        assert isinstance(writer, JsonSchema)
        return [f"{{errorType:'{kind}', description:'{_describe(kind, path, reader_name, writer_name)}', "
                f"additionalInfo:'{path}'}}" for kind, path, ok in self.changes_from(writer) if not ok]


class JsonSchemaProvider:
    schema_type = JSON

    def parse(self, text: str, references: list[ResolvedReference]) -> JsonSchema:
        try:
            doc = json.loads(text)
            if not isinstance(doc, (dict, bool)):
                raise ValueError("a JSON schema is an object or a boolean")
            jsonschema.validators.validator_for(doc).check_schema(doc)
            for ref in references:
                json.loads(ref.schema)
        except (ValueError, jsonschema.exceptions.SchemaError) as e:
            message = e.message if isinstance(e, jsonschema.exceptions.SchemaError) else str(e)
            raise ValueError(f"Invalid schema {text} with refs {[r.name for r in references]} of type JSON, "
                             f"details: {message}") from None
        return JsonSchema(doc, json.dumps(doc, separators=(",", ":")))
