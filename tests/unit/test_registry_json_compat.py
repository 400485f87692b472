"""The schema registry's JSON Schema compatibility table: Confluent's rules for open and
closed content models, types, limits and enums, each case checked under each level."""

from __future__ import annotations

import json

import pytest

from rivulet.registry import compatibility as C
from rivulet.registry.json_schema import JsonSchemaProvider

pytestmark = pytest.mark.fast

P = JsonSchemaProvider()


def obj(props: dict, required: tuple[str, ...] = (), closed: bool = False, **extra: object) -> str:
    doc: dict = {"type": "object", "properties": props, **extra}
    if required:
        doc["required"] = list(required)
    if closed:
        doc["additionalProperties"] = False
    return json.dumps(doc)


S = {"type": "string"}
I = {"type": "integer"}  # noqa: E741
N = {"type": "number"}

# (case, old, new, {level: compatible})
TABLE = [
    ("open: add a typed property", obj({"a": S}), obj({"a": S, "b": I}),
     {"BACKWARD": False, "FORWARD": True, "FULL": False, "NONE": True}),
    ("open: add a property with an empty schema", obj({"a": S}), obj({"a": S, "b": {}}),
     {"BACKWARD": True, "FORWARD": True, "FULL": True}),
    ("open: remove a property", obj({"a": S, "b": I}), obj({"a": S}),
     {"BACKWARD": True, "FORWARD": False}),
    ("closed: add an optional property", obj({"a": S}, closed=True), obj({"a": S, "b": I}, closed=True),
     {"BACKWARD": True, "FORWARD": False, "FULL": False}),
    ("closed: add a required property", obj({"a": S}, closed=True), obj({"a": S, "b": I}, ("b",), closed=True),
     {"BACKWARD": False, "NONE": True}),
    ("closed: remove a property", obj({"a": S, "b": I}, closed=True), obj({"a": S}, closed=True),
     {"BACKWARD": False, "FORWARD": True}),
    ("make a property required", obj({"a": S}), obj({"a": S}, ("a",)),
     {"BACKWARD": False, "FORWARD": True, "FULL": False}),
    ("integer widened to number", obj({"a": I}), obj({"a": N}),
     {"BACKWARD": True, "FORWARD": False, "FULL": False}),
    ("string to integer", obj({"a": S}), obj({"a": I}),
     {"BACKWARD": False, "FORWARD": False, "NONE": True}),
    ("maxLength raised", obj({"a": {"type": "string", "maxLength": 5}}), obj({"a": {"type": "string", "maxLength": 9}}),
     {"BACKWARD": True, "FORWARD": False}),
    ("maxLength added", obj({"a": S}), obj({"a": {"type": "string", "maxLength": 9}}),
     {"BACKWARD": False, "FORWARD": True}),
    ("minimum raised", obj({"a": {"type": "integer", "minimum": 0}}), obj({"a": {"type": "integer", "minimum": 1}}),
     {"BACKWARD": False, "FORWARD": True}),
    ("enum extended", json.dumps({"enum": ["x", "y"]}), json.dumps({"enum": ["x", "y", "z"]}),
     {"BACKWARD": True, "FORWARD": False, "FULL": False}),
    ("open made closed", obj({"a": S}), obj({"a": S}, closed=True),
     {"BACKWARD": False, "FORWARD": True}),
    ("nested property type changed", obj({"o": json.loads(obj({"x": S}))}), obj({"o": json.loads(obj({"x": I}))}),
     {"BACKWARD": False, "FORWARD": False}),
    ("array items widened", obj({"l": {"type": "array", "items": I}}), obj({"l": {"type": "array", "items": N}}),
     {"BACKWARD": True, "FORWARD": False}),
    ("identical", obj({"a": S}, ("a",)), obj({"a": S}, ("a",)),
     {"BACKWARD": True, "FORWARD": True, "FULL_TRANSITIVE": True}),
]


@pytest.mark.parametrize("case,old,new,expected", TABLE, ids=[t[0] for t in TABLE])
def test_json_schema_compatibility_table(case, old, new, expected):
    previous = [C.Previous(1, P.parse(old, []))]
    for level, compatible in expected.items():
        errors = C.check(P.parse(new, []), previous, level)
        assert (not errors) == compatible, (case, level, errors)


def test_details_name_the_kind_and_path():
    errors = C.check(P.parse(obj({"a": S}, ("a",)), []), [C.Previous(2, P.parse(obj({"a": S}), []))], "BACKWARD")
    assert errors[0].startswith("{errorType:'REQUIRED_ATTRIBUTE_ADDED'") and "#/required/a" in errors[0]
    assert errors[-3:] == ["{oldSchemaVersion: 2}", f"{{oldSchema: '{obj({'a': S}).replace(' ', '')}'}}",
                           "{compatibility: 'BACKWARD'}"]


@pytest.mark.parametrize("text", ['{"type": "strng"}', "[1, 2]", "not json", '{"minLength": -1}'])
def test_malformed_json_schemas_are_refused(text):
    with pytest.raises(ValueError, match="Invalid schema"):
        P.parse(text, [])
