"""The schema registry's Avro compatibility table: each change checked under each level, as
Confluent's registry decides it (Avro's schema resolution rules)."""

from __future__ import annotations

import json

import pytest

from rivulet.registry import compatibility as C
from rivulet.registry.avro_schema import AvroProvider

pytestmark = pytest.mark.fast

P = AvroProvider()


def rec(*fields: dict) -> str:
    return json.dumps({"type": "record", "name": "R", "namespace": "t", "fields": list(fields)})


A = {"name": "a", "type": "int"}
B_REQ = {"name": "b", "type": "string"}
B_DEF = {"name": "b", "type": "string", "default": "x"}
A_LONG = {"name": "a", "type": "long"}
A_STR = {"name": "a", "type": "string"}
A_UNION = {"name": "a", "type": ["null", "int"], "default": None}
ENUM2 = json.dumps({"type": "enum", "name": "E", "symbols": ["X", "Y"]})
ENUM3 = json.dumps({"type": "enum", "name": "E", "symbols": ["X", "Y", "Z"]})
FIXED4 = json.dumps({"type": "fixed", "name": "F", "size": 4})
FIXED8 = json.dumps({"type": "fixed", "name": "F", "size": 8})

# (case, old schema, new schema, {level: compatible})
TABLE = [
    ("add field with default", rec(A), rec(A, B_DEF),
     {"BACKWARD": True, "FORWARD": True, "FULL": True, "NONE": True}),
    ("add field without default", rec(A), rec(A, B_REQ),
     {"BACKWARD": False, "FORWARD": True, "FULL": False, "NONE": True}),
    ("remove field with default", rec(A, B_DEF), rec(A),
     {"BACKWARD": True, "FORWARD": True, "FULL": True}),
    ("remove field without default", rec(A, B_REQ), rec(A),
     {"BACKWARD": True, "FORWARD": False, "FULL": False, "NONE": True}),
    ("promote int to long", rec(A), rec(A_LONG),
     {"BACKWARD": True, "FORWARD": False, "FULL": False}),
    ("int to string", rec(A), rec(A_STR),
     {"BACKWARD": False, "FORWARD": False, "FULL": False, "NONE": True}),
    ("int into a union with null", rec(A), rec(A_UNION),
     {"BACKWARD": True, "FORWARD": False, "FULL": False}),
    ("add an enum symbol", ENUM2, ENUM3,
     {"BACKWARD": True, "FORWARD": False, "FULL": False}),
    ("remove an enum symbol", ENUM3, ENUM2,
     {"BACKWARD": False, "FORWARD": True, "FULL": False}),
    ("fixed size changes", FIXED4, FIXED8,
     {"BACKWARD": False, "FORWARD": False, "FULL": False, "NONE": True}),
    ("record renamed", rec(A), json.dumps({"type": "record", "name": "S", "namespace": "t", "fields": [A]}),
     {"BACKWARD": False, "FULL": False, "NONE": True}),
    ("primitive to record", '"string"', rec(A),
     {"BACKWARD": False, "FORWARD": False, "NONE": True}),
    ("identical", rec(A, B_DEF), rec(A, B_DEF),
     {"BACKWARD": True, "FORWARD": True, "FULL": True}),
]


@pytest.mark.parametrize("case,old,new,expected", TABLE, ids=[t[0] for t in TABLE])
def test_avro_compatibility_table(case, old, new, expected):
    previous = [C.Previous(1, P.parse(old, []))]
    for level, compatible in expected.items():
        for lvl in (level, f"{level}_TRANSITIVE") if level != "NONE" else (level,):
            errors = C.check(P.parse(new, []), previous, lvl)
            assert (not errors) == compatible, (case, lvl, errors)


def test_transitive_checks_every_version_and_plain_only_the_latest():
    v1 = P.parse(rec(A), [])
    v2 = P.parse(rec(A, B_DEF), [])
    v3 = P.parse(rec(A, B_REQ), [])  # reads v2's data (b is there), not v1's (b missing, no default)
    previous = [C.Previous(2, v2), C.Previous(1, v1)]
    assert C.check(v3, previous, "BACKWARD") == []
    errors = C.check(v3, previous, "BACKWARD_TRANSITIVE")
    assert "{oldSchemaVersion: 1}" in errors and "{compatibility: 'BACKWARD_TRANSITIVE'}" in errors


def test_incompatibility_details_are_confluents():
    errors = C.check(P.parse(rec(A, B_REQ), []), [C.Previous(3, P.parse(rec(A), []))], "BACKWARD")
    assert errors[0] == ("{errorType:'READER_FIELD_MISSING_DEFAULT_VALUE', description:'The field 'b' at path "
                         "'/fields/1' in the new schema has no default value and is missing in the old schema', "
                         "additionalInfo:'b'}")
    assert errors[1:] == ["{oldSchemaVersion: 3}", f"{{oldSchema: '{P.parse(rec(A), []).canonical()}'}}",
                          "{compatibility: 'BACKWARD'}"]
    forward = C.check(P.parse(rec(A), []), [C.Previous(1, P.parse(rec(A, B_REQ), []))], "FORWARD")
    assert "in the old schema has no default value and is missing in the new schema" in forward[0]


def test_canonical_text_orders_keys_as_avro_java_and_keeps_referenced_names():
    from rivulet.registry.schema_types import ResolvedReference
    s = P.parse('{"fields":[{"type":"int","name":"a"}],"name":"R","type":"record"}', [])
    assert s.canonical() == '{"type":"record","name":"R","fields":[{"name":"a","type":"int"}]}'
    addr = ResolvedReference("t.Addr", '{"type":"record","name":"Addr","namespace":"t","fields":[]}')
    user = P.parse('{"type":"record","name":"U","fields":[{"name":"home","type":"t.Addr"}]}', [addr])
    assert '"type":"t.Addr"' in user.canonical()


@pytest.mark.parametrize("text", ['{"type":"recrd","name":"x"}', "not json", '{"type":"record","name":"R"}',
                                  '{"type":"record","name":"R","fields":[{"name":"a","type":"Missing"}]}'])
def test_malformed_schemas_are_refused(text):
    with pytest.raises(ValueError, match="Invalid schema"):
        P.parse(text, [])
