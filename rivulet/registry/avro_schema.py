"""Avro schemas through the Apache ``avro`` library: parsing (named types from references
first, as Confluent's AvroSchema does), the canonical text in the key order of Avro's Java
``Schema.toString()``, and Avro's schema resolution rules (``avro.compatibility``, the port of
Java's SchemaCompatibility that Confluent's checks use)."""

from __future__ import annotations

import json

import avro.compatibility as compat
import avro.errors
import avro.name
import avro.schema

from rivulet.registry.schema_types import AVRO, CanonicalText, ParsedSchema, ResolvedReference

# Avro Java writes a schema's attributes in this order; the rest follow as given.
_KEY_ORDER = ("type", "name", "namespace", "doc", "fields", "symbols", "items", "values", "size", "default",
              "order", "aliases")
_FIELD_KEY_ORDER = ("name", "type", "doc", "default", "order", "aliases")

# Confluent's descriptions of Avro's incompatibility types; "{reader}" is the schema that reads.
_DESCRIPTIONS = {
    "name_mismatch": "The name of the schema has changed (path '{path}')",
    "fixed_size_mismatch": "The size of FIXED type field at path '{path}' in the {reader} schema does not match "
                           "with the {writer} schema",
    "missing_enum_symbols": "The {reader} schema is missing enum symbols '{info}' at path '{path}' in the "
                            "{writer} schema",
    "reader_field_missing_default_value": "The field '{info}' at path '{path}' in the {reader} schema has no "
                                          "default value and is missing in the {writer} schema",
    "type_mismatch": "The type (path '{path}') of a field in the {reader} schema does not match with the "
                     "{writer} schema",
    "missing_union_branch": "The {reader} schema is missing a type inside a union field at path '{path}' in the "
                            "{writer} schema",
}


def _ordered(node: object, in_fields: bool = False) -> object:
    if isinstance(node, list):
        return [_ordered(n, in_fields) for n in node]
    if not isinstance(node, dict):
        return node
    order = _FIELD_KEY_ORDER if in_fields else _KEY_ORDER
    keys = [k for k in order if k in node] + [k for k in node if k not in order]
    out: dict[str, object] = {}
    for k in keys:
        v = node[k]
        if k == "fields" and isinstance(v, list):
            out[k] = [_ordered(f, in_fields=True) for f in v]
        elif k == "default":
            out[k] = v  # a default is data, not a schema
        else:
            out[k] = _ordered(v)
    return out


class AvroSchema(CanonicalText):
    schema_type = AVRO

    def __init__(self, schema: avro.schema.Schema, text: str) -> None:
        super().__init__(text)
        self.schema = schema

    def read_errors(self, writer: ParsedSchema, reader_name: str = "new", writer_name: str = "old") -> list[str]:
        assert isinstance(writer, AvroSchema)
        result = compat.ReaderWriterCompatibilityChecker().get_compatibility(self.schema, writer.schema)
        if result.compatibility is compat.SchemaCompatibilityType.compatible:
            return []
        # The library keeps the paths and details as sets: paired in order, which is exact
        # for the usual single incompatibility.
        paths, infos = sorted(result.locations), sorted(result.messages)
        errors = []
        for i, kind in enumerate(result.incompatibilities):
            path = paths[min(i, len(paths) - 1)] if paths else "/"
            info = infos[min(i, len(infos) - 1)] if infos else ""
            desc = _DESCRIPTIONS.get(kind.value, kind.value).format(path=path, info=info, reader=reader_name,
                                                                    writer=writer_name)
            errors.append(f"{{errorType:'{kind.value.upper()}', description:'{desc}', additionalInfo:'{info}'}}")
        return errors


class AvroProvider:
    schema_type = AVRO

    def parse(self, text: str, references: list[ResolvedReference]) -> AvroSchema:
        names = avro.name.Names()
        try:
            seen: set[str] = set()
            for ref in references:
                self._add_named(ref, names, seen)
            # Referenced types stay names in the canonical text, as in Confluent's.
            referenced = dict(names.names)
            doc = json.loads(text)
            schema = avro.schema.make_avsc_object(doc, names)
        except (ValueError, TypeError, avro.errors.AvroException) as e:
            # json.JSONDecodeError is a ValueError too.
            raise ValueError(f"Invalid schema {text} with refs {[r.name for r in references]} of type AVRO, "
                             f"details: {e}") from None
        out = avro.name.Names()
        out.names = referenced
        canonical = json.dumps(_ordered(schema.to_json(out)), separators=(",", ":"))
        return AvroSchema(schema, canonical)

    def _add_named(self, ref: ResolvedReference, names: avro.name.Names, seen: set[str]) -> None:
        if ref.name in seen:
            return
        seen.add(ref.name)
        for dep in ref.dependencies:
            self._add_named(dep, names, seen)
        avro.schema.make_avsc_object(json.loads(ref.schema), names)
