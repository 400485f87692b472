"""The schema registry's Protobuf compatibility table (Confluent's protobuf diff rules), .proto
texts compiled by protoc, and serialized descriptors as confluent-kafka registers them."""

from __future__ import annotations

import base64
import functools

import pytest

from rivulet.registry import compatibility as C
from rivulet.registry.protobuf_schema import ProtobufProvider
from rivulet.registry.schema_types import ResolvedReference

pytestmark = pytest.mark.fast

P = ProtobufProvider()
# Each text compiled once (protoc runs as a child process).
parse = functools.lru_cache(maxsize=None)(lambda text: P.parse(text, []))


def proto(body: str, package: str = "t") -> str:
    return f'syntax = "proto3";\npackage {package};\n{body}\n'


BASE = proto("message M { string a = 1; int32 b = 2; }")
TABLE = [
    ("field added", BASE, proto("message M { string a = 1; int32 b = 2; int64 c = 3; }"), True, True),
    ("field removed", BASE, proto("message M { string a = 1; }"), True, True),
    ("field renamed", BASE, proto("message M { string a = 1; int32 bee = 2; }"), True, True),
    ("string to bytes", BASE, proto("message M { bytes a = 1; int32 b = 2; }"), True, True),
    ("scalar type changed", BASE, proto("message M { string a = 1; double b = 2; }"), False, False),
    ("scalar to message", BASE, proto("message N { }\nmessage M { string a = 1; N b = 2; }"), False, False),
    ("made repeated", BASE, proto("message M { string a = 1; repeated int32 b = 2; }"), False, False),
    ("message added", BASE, BASE + "message N { string x = 1; }\n", True, False),
    ("message removed", BASE + "message N { string x = 1; }\n", BASE, False, True),
    ("package changed", BASE, proto("message M { string a = 1; int32 b = 2; }", package="u"), False, False),
    ("enum value added", proto("enum E { X = 0; }\nmessage M { E e = 1; }"),
     proto("enum E { X = 0; Y = 1; }\nmessage M { E e = 1; }"), True, True),
    ("oneof added with a new field", BASE, proto("message M { string a = 1; int32 b = 2; oneof o { int32 c = 3; } }"),
     True, False),
    ("two fields moved into a oneof", BASE, proto("message M { oneof o { string a = 1; int32 b = 2; } }"), False, False),
    ("field moved out of a oneof", proto("message M { oneof o { string a = 1; int32 b = 2; } }"),
     proto("message M { string a = 1; oneof o { int32 b = 2; } }"), False, False),
    ("nested message field changed", proto("message M { message I { int32 x = 1; } I i = 1; }"),
     proto("message M { message I { string x = 1; } I i = 1; }"), False, False),
]


@pytest.mark.parametrize("case,old,new,backward,forward", TABLE, ids=[t[0] for t in TABLE])
def test_protobuf_compatibility_table(case, old, new, backward, forward):
    previous = [C.Previous(1, parse(old))]
    expected = {"BACKWARD": backward, "BACKWARD_TRANSITIVE": backward, "FORWARD": forward,
                "FORWARD_TRANSITIVE": forward, "FULL": backward and forward}
    for level, compatible in expected.items():
        errors = C.check(parse(new), previous, level)
        assert (not errors) == compatible, (case, level, errors)
    assert C.check(parse(new), previous, "NONE") == []


def test_serialized_descriptors_and_references():
    dep = proto("message Addr { string city = 1; }", package="common")
    user = proto('import "common/addr.proto";\nmessage User { common.Addr home = 1; }')
    refs = [ResolvedReference("common/addr.proto", dep)]
    parsed = P.parse(user, refs)
    serialized = parsed.formatted("serialized")
    again = P.parse(serialized, refs)
    assert again.descriptor.message_type[0].name == "User"
    assert C.check(again, [C.Previous(1, parsed)], "FULL") == []
    assert parsed.formatted("") == user.strip()


def test_serialized_descriptors_importing_well_known_types_need_no_reference():
    # confluent-kafka's ProtobufSerializer never registers google/protobuf/*.proto as a
    # reference (Confluent's registry has them built in): its schema imports them bare, and so
    # may a reference it registers (here an options file extending descriptor.proto).
    stamped = proto('import "google/protobuf/timestamp.proto";\n'
                    'message Event { google.protobuf.Timestamp at = 1; }')
    again = P.parse(P.parse(stamped, []).formatted("serialized"), [])
    assert again.descriptor.message_type[0].name == "Event"
    options = proto('import "google/protobuf/descriptor.proto";\n'
                    'extend google.protobuf.MessageOptions { string owner = 50001; }', package="opts")
    ref = ResolvedReference("opts/options.proto", P.parse(options, []).formatted("serialized"))
    user = proto('import "opts/options.proto";\nmessage User { option (opts.owner) = "x"; string n = 1; }')
    parsed = P.parse(P.parse(user, [ResolvedReference("opts/options.proto", options)]).formatted("serialized"), [ref])
    assert parsed.descriptor.message_type[0].name == "User"


def test_google_type_files_are_built_in_and_unknown_google_files_are_invalid():
    from google.protobuf import descriptor_pb2
    fdp = descriptor_pb2.FileDescriptorProto(name="day.proto", package="t", syntax="proto3",
                                             dependency=["google/type/date.proto"])
    fdp.message_type.add(name="Day").field.add(name="d", number=1, type_name=".google.type.Date",
                                                type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE)
    serialized = base64.b64encode(fdp.SerializeToString()).decode()
    assert P.parse(serialized, []).descriptor.message_type[0].name == "Day"
    fdp.dependency[0] = "google/protobuf/no_such_file.proto"
    with pytest.raises(ValueError, match="Invalid schema .*no_such_file.proto"):
        P.parse(base64.b64encode(fdp.SerializeToString()).decode(), [])


@pytest.mark.parametrize("text", ['syntax = "proto3"; message M { strng a = 1; }', "message {",
                                  'syntax = "proto3"; message M { int32 a = 1; int32 b = 1; }'])
def test_malformed_protos_are_refused_with_protocs_reason(text):
    with pytest.raises(ValueError, match="Invalid schema") as e:
        P.parse(text, [])
    assert "rivulet-proto-" not in str(e.value)  # no temporary paths in the message


def test_confluents_own_files_are_built_in():
    # confluent-kafka's ProtobufSerializer never registers confluent/*.proto as a reference
    # either: Confluent's registry resolves confluent/meta.proto and confluent/type/decimal.proto
    # by name. A .proto text and the serialized descriptor the serializer sends both parse.
    from google.protobuf import descriptor_pb2

    from rivulet.registry.protobuf_schema import SchemaFiles
    text = proto('import "confluent/meta.proto";\nimport "confluent/type/decimal.proto";\n'
                 'message Price {\n  option (confluent.message_meta) = { doc: "a price", tags: ["PII"] };\n'
                 '  confluent.type.Decimal amount = 1 [(confluent.field_meta).params = { key: "precision" '
                 'value: "8" }];\n}')
    parsed = P.parse(text, [])
    assert list(parsed.descriptor.dependency) == ["confluent/meta.proto", "confluent/type/decimal.proto"]
    serialized = parsed.formatted("serialized")
    again = P.parse(serialized, [])
    assert C.check(again, [C.Previous(1, parsed)], "FULL") == []
    files = SchemaFiles(serialized, [])
    price = files.message_named("Price")
    decimal = price.fields_by_name["amount"].message_type
    assert decimal.full_name == "confluent.type.Decimal"
    assert [(f.name, f.number, f.type) for f in decimal.fields] == [
        ("value", 1, descriptor_pb2.FieldDescriptorProto.TYPE_BYTES),
        ("precision", 2, descriptor_pb2.FieldDescriptorProto.TYPE_UINT32),
        ("scale", 3, descriptor_pb2.FieldDescriptorProto.TYPE_INT32)]
    meta = files.pool.FindFileByName("confluent/meta.proto")
    assert {n: (e.number, e.containing_type.full_name) for n, e in meta.extensions_by_name.items()} == {
        "file_meta": (1088, "google.protobuf.FileOptions"), "message_meta": (1088, "google.protobuf.MessageOptions"),
        "field_meta": (1088, "google.protobuf.FieldOptions"), "enum_meta": (1088, "google.protobuf.EnumOptions"),
        "enum_value_meta": (1088, "google.protobuf.EnumValueOptions")}
    assert [(f.name, f.number) for f in meta.message_types_by_name["Meta"].fields] == [
        ("doc", 1), ("params", 2), ("tags", 3), ("rules", 4)]
    with pytest.raises(ValueError, match="(?s)Invalid schema .*confluent/no_such.proto: File not found"):
        P.parse(proto('import "confluent/no_such.proto";\nmessage M { int32 a = 1; }'), [])


def test_google_type_files_are_built_in_for_proto_text():
    # Confluent's registry resolves google/type/*.proto by name as it does google/protobuf/*: a
    # .proto text importing them compiles, and its serialized form decodes with the same types.
    from rivulet.registry.protobuf_schema import SchemaFiles
    text = proto('import "google/type/date.proto";\nimport "google/type/money.proto";\n'
                 'message Order {\n  google.type.Date day = 1;\n  google.type.Money total = 2;\n}')
    parsed = P.parse(text, [])
    assert list(parsed.descriptor.dependency) == ["google/type/date.proto", "google/type/money.proto"]
    order = SchemaFiles(parsed.formatted("serialized"), []).message_named("Order")
    assert order.fields_by_name["day"].message_type.full_name == "google.type.Date"
    assert [f.name for f in order.fields_by_name["total"].message_type.fields] == ["currency_code", "units", "nanos"]
    with pytest.raises(ValueError, match="(?s)Invalid schema .*google/type/no_such.proto: File not found"):
        P.parse(proto('import "google/type/no_such.proto";\nmessage M { int32 a = 1; }'), [])


def test_confluents_variant_file_is_built_in():
    # confluent-kafka's pool holds confluent/type/variant.proto as well; a schema importing it
    # without a reference parses, in text and in the serialized form the serializer sends.
    from rivulet.registry.protobuf_schema import SchemaFiles
    parsed = P.parse(proto('import "confluent/type/variant.proto";\n'
                           'message Event {\n  confluent.type.Variant payload = 1;\n}'), [])
    variant = SchemaFiles(parsed.formatted("serialized"), []).message_named("Event").fields_by_name["payload"]
    assert variant.message_type.full_name == "confluent.type.Variant"
    assert [(f.name, f.number) for f in variant.message_type.fields] == [("metadata", 1), ("value", 2)]
