"""Protobuf schemas: ``.proto`` text compiled by protoc (grpcio-tools' bundled compiler, run as a
child process so that its messages can be read), or a base64 ``FileDescriptorProto`` as
confluent-kafka's ProtobufSerializer registers it; compared with Confluent's rules (its
protobuf schema diff): fields are matched by number; adding or removing a field or a message,
renaming a field, string and bytes swapped, enums and oneofs added or removed are compatible;
a removed message, a changed package, a field's kind, scalar type or message type changed, a
required field added or removed, a field moved into a oneof or out of one are not. Each change
is read from the writer's schema to the reader's, so a message removed is refused BACKWARD and
allowed FORWARD (where it reads as added), and the opposite for a field added to a oneof."""

from __future__ import annotations

import base64
import binascii
import functools
import importlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import Descriptor
from google.protobuf.message import DecodeError

from rivulet.registry.schema_types import PROTOBUF, ParsedSchema, ResolvedReference

FDP = descriptor_pb2.FileDescriptorProto
FieldP = descriptor_pb2.FieldDescriptorProto
COMPATIBLE = {"MESSAGE_ADDED", "MESSAGE_MOVED", "ENUM_ADDED", "ENUM_REMOVED", "ENUM_CONST_ADDED",
              "ENUM_CONST_CHANGED", "ENUM_CONST_REMOVED", "FIELD_ADDED", "FIELD_REMOVED", "FIELD_NAME_CHANGED",
              "FIELD_STRING_OR_BYTES_LABEL_CHANGED", "ONEOF_ADDED", "ONEOF_REMOVED", "ONEOF_FIELD_ADDED"}
MAIN_FILE = "rivulet_registry_schema.proto"
COMPILE_TIMEOUT_S = 30.0


def _decode_serialized(text: str) -> FDP | None:
    """A base64 FileDescriptorProto, or None if the text is not one."""
    if "{" in text or ";" in text:
        return None
    try:
        return FDP.FromString(base64.b64decode(text, validate=True))
    except (binascii.Error, ValueError, DecodeError):
        return None


def _protoc_includes() -> list[str]:
    """protoc's -I for the built-in files: Confluent's (ours), grpcio-tools' google/protobuf and,
    when installed, googleapis-common-protos' google/type (which Confluent's registry has built in
    too), mapped to its import prefix alone so that nothing else of the package shadows a file."""
    try:
        import grpc_tools
    except ImportError:
        raise ValueError("compiling .proto text needs grpcio-tools (pip install 'rivulet[registry]')") from None
    includes = [f"-I{CONFLUENT_PROTOS}", f"-I{os.path.join(os.path.dirname(grpc_tools.__file__), '_proto')}"]
    try:
        from google.type import date_pb2
    except ImportError:
        return includes
    return [*includes, f"-Igoogle/type={os.path.dirname(os.path.abspath(date_pb2.__file__))}"]


def _compile(text: str, references: list[ResolvedReference]) -> FDP:
    """protoc over the text and its references (each written under its reference name)."""
    includes = _protoc_includes()
    with tempfile.TemporaryDirectory(prefix="rivulet-proto-") as tmp:
        for ref in _flatten(references):
            serialized = _decode_serialized(ref.schema)
            if serialized is not None:
                raise ValueError(f"reference {ref.name} is a serialized descriptor; a .proto text is expected")
            path = os.path.join(tmp, ref.name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(ref.schema)
        with open(os.path.join(tmp, MAIN_FILE), "w") as f:
            f.write(text)
        out = os.path.join(tmp, "out.pb")
        r = subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{tmp}", *includes,
                            f"--descriptor_set_out={out}", MAIN_FILE], capture_output=True, text=True,
                           timeout=COMPILE_TIMEOUT_S, cwd=tmp)
        if r.returncode != 0:
            # protoc names the file as written here: the client knows it as its schema.
            message = (r.stderr or r.stdout).replace(os.path.join(tmp, MAIN_FILE), "line").replace(tmp + "/", "")
            raise ValueError(message.replace(MAIN_FILE, "line").strip())
        with open(out, "rb") as f:
            files = descriptor_pb2.FileDescriptorSet.FromString(f.read()).file
    return next(fd for fd in files if fd.name == MAIN_FILE)


def _flatten(refs: list[ResolvedReference] | tuple[ResolvedReference, ...]) -> Iterator[ResolvedReference]:
    for r in refs:
        yield from _flatten(r.dependencies)
        yield r


def _reference_files(references: list[ResolvedReference] | tuple[ResolvedReference, ...]) -> list[FDP]:
    """The files of the references, depth first, each named as its reference."""
    files = []
    for ref in _flatten(references):
        dep = _decode_serialized(ref.schema.strip()) or _compile(ref.schema, list(ref.dependencies))
        dep.name = ref.name
        files.append(dep)
    return files


def file_descriptors(text: str, references: list[ResolvedReference] | tuple[ResolvedReference, ...]) -> list[FDP]:
    """A schema's files, its references' first, as a descriptor pool that decodes its data
    takes them; ``ValueError`` if one does not compile."""
    return _reference_files(references) + [_decode_serialized(text.strip()) or _compile(text, list(references))]


# The files a Confluent registry has built in, by the package whose modules register them in
# protobuf's default pool (google.type: googleapis-common-protos). Clients import them without
# registering them as references.
BUILT_IN = (("google/protobuf/", "google.protobuf."), ("google/type/", "google.type."))
# Confluent's own built-in files (confluent/meta.proto, confluent/type/decimal.proto), as .proto
# text of ours: protoc finds them there when a text imports them, and a serialized descriptor
# importing them gets them compiled once.
CONFLUENT_PROTOS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "protos")


@functools.cache
def _confluent_file(name: str) -> FDP | None:
    """Confluent's built-in file ``name`` compiled, or None when it is not one."""
    if not os.path.isfile(os.path.join(CONFLUENT_PROTOS, name)):
        return None
    try:
        includes = _protoc_includes()
    except ValueError:
        return None
    with tempfile.TemporaryDirectory(prefix="rivulet-proto-") as tmp:
        out = os.path.join(tmp, "out.pb")
        r = subprocess.run([sys.executable, "-m", "grpc_tools.protoc", *includes, f"--descriptor_set_out={out}",
                            name], capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, cwd=tmp)
        if r.returncode != 0:
            raise RuntimeError(f"built-in {name} does not compile: {r.stderr or r.stdout}")
        with open(out, "rb") as f:
            return descriptor_pb2.FileDescriptorSet.FromString(f.read()).file[0]


def _built_in_file(name: str) -> FDP | None:
    """A built-in file by its import name, or None when it is not one (or not installed here)."""
    if name.startswith("confluent/"):
        return _confluent_file(name)
    package = next((p for prefix, p in BUILT_IN if name.startswith(prefix) and name.endswith(".proto")), None)
    if package is None:
        return None
    try:
        importlib.import_module(package + name.split("/", 2)[2][:-len(".proto")].replace("/", ".") + "_pb2")
        fd = descriptor_pool.Default().FindFileByName(name)
    except (ImportError, KeyError):
        return None
    proto = FDP()
    fd.CopyToProto(proto)
    return proto


def _pool(files: list[FDP]) -> descriptor_pool.DescriptorPool:
    """The files in a descriptor pool of their own, with the built-in files they import."""
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()
    for fdp in files:
        _add_built_in(pool, list(fdp.dependency), added)
        pool.Add(fdp)
        added.add(fdp.name)
    return pool


def _add_built_in(pool: descriptor_pool.DescriptorPool, names: list[str], added: set[str]) -> None:
    for name in names:
        proto = None if name in added else _built_in_file(name)
        if proto is None:
            # Not built in here: the pool then names it as a file that has not been loaded.
            continue
        _add_built_in(pool, list(proto.dependency), added)
        pool.Add(proto)
        added.add(name)


class SchemaFiles:
    """A registered schema's files in a descriptor pool of their own, to decode data: its
    messages by the wire format's message indexes, or by name."""

    def __init__(self, text: str, references: list[ResolvedReference] | tuple[ResolvedReference, ...]) -> None:
        files = file_descriptors(text, references)
        self.pool = _pool(files)
        self.file = files[-1]
        self._prefix = f"{self.file.package}." if self.file.package else ""

    def message_at(self, indexes: list[int]) -> Descriptor:
        """The message the indexes name: the file's, then nested ones ([0]: the first)."""
        if not indexes or not 0 <= indexes[0] < len(self.file.message_type):
            raise ValueError(f"no message at index {indexes[:1]} of the schema")
        message = self.pool.FindMessageTypeByName(self._prefix + self.file.message_type[indexes[0]].name)
        for i in indexes[1:]:
            if not 0 <= i < len(message.nested_types):
                raise ValueError(f"no nested message at index {i} of {message.full_name}")
            message = message.nested_types[i]
        return message

    def message_named(self, name: str) -> Descriptor:
        """A message by its full name, or by its name in the file's package."""
        try:
            return self.pool.FindMessageTypeByName(name if "." in name else self._prefix + name)
        except KeyError:
            raise ValueError(f"the schema has no message {name}") from None



class _Diff:
    def __init__(self, original: FDP, update: FDP) -> None:
        self.found: list[tuple[str, str]] = []
        if original.package != update.package:
            self.add("PACKAGE_CHANGED", "#/")
        self.types(original.message_type, update.message_type, original.enum_type, update.enum_type, "#/")

    def add(self, kind: str, path: str) -> None:
        self.found.append((kind, path))

    def types(self, om, um, oe, ue, path: str) -> None:  # type: ignore[no-untyped-def]
        o_idx = {m.name: i for i, m in enumerate(om)}
        u_idx = {m.name: i for i, m in enumerate(um)}
        o, u = {m.name: m for m in om}, {m.name: m for m in um}
        for name in sorted(o.keys() | u.keys()):
            p = f"{path}{name}"
            if name not in u:
                if not o[name].options.map_entry:
                    self.add("MESSAGE_REMOVED", p)
            elif name not in o:
                if not u[name].options.map_entry:
                    self.add("MESSAGE_ADDED", p)
            else:
                self.message(o[name], u[name], p)
                if o_idx[name] != u_idx[name]:
                    self.add("MESSAGE_MOVED", p)
        oen, uen = {e.name: e for e in oe}, {e.name: e for e in ue}
        for name in sorted(oen.keys() | uen.keys()):
            p = f"{path}{name}"
            if name not in uen:
                self.add("ENUM_REMOVED", p)
            elif name not in oen:
                self.add("ENUM_ADDED", p)
            else:
                ov = {v.number: v.name for v in oen[name].value}
                uv = {v.number: v.name for v in uen[name].value}
                for n in sorted(ov.keys() | uv.keys()):
                    if n not in uv:
                        self.add("ENUM_CONST_REMOVED", f"{p}/{n}")
                    elif n not in ov:
                        self.add("ENUM_CONST_ADDED", f"{p}/{n}")
                    elif ov[n] != uv[n]:
                        self.add("ENUM_CONST_CHANGED", f"{p}/{n}")

    def message(self, o: descriptor_pb2.DescriptorProto, u: descriptor_pb2.DescriptorProto, path: str) -> None:
        of, uf = {f.number: f for f in o.field}, {f.number: f for f in u.field}
        o_oneofs = [d.name for d in o.oneof_decl]
        u_oneofs = [d.name for d in u.oneof_decl]
        for name in sorted(set(o_oneofs) - set(u_oneofs)):
            self.add("ONEOF_REMOVED", f"{path}/oneof/{name}")
        for name in sorted(set(u_oneofs) - set(o_oneofs)):
            self.add("ONEOF_ADDED", f"{path}/oneof/{name}")
        moved_into: dict[str, int] = {}
        for n in sorted(of.keys() | uf.keys()):
            p = f"{path}/{n}"
            if n not in uf:
                self.add("REQUIRED_FIELD_REMOVED" if of[n].label == FieldP.LABEL_REQUIRED else "FIELD_REMOVED", p)
                if of[n].HasField("oneof_index") and not of[n].proto3_optional:
                    self.add("ONEOF_FIELD_REMOVED", p)
                continue
            if n not in of:
                if uf[n].label == FieldP.LABEL_REQUIRED:
                    self.add("REQUIRED_FIELD_ADDED", p)
                elif uf[n].HasField("oneof_index") and not uf[n].proto3_optional:
                    self.add("ONEOF_FIELD_ADDED", p)
                else:
                    self.add("FIELD_ADDED", p)
                continue
            a, b = of[n], uf[n]
            if a.name != b.name:
                self.add("FIELD_NAME_CHANGED", p)
            self.field_type(a, b, p)
            a_one = o_oneofs[a.oneof_index] if a.HasField("oneof_index") and not a.proto3_optional else None
            b_one = u_oneofs[b.oneof_index] if b.HasField("oneof_index") and not b.proto3_optional else None
            if a_one is None and b_one is not None:
                moved_into[b_one] = moved_into.get(b_one, 0) + 1
                if b_one in o_oneofs:
                    self.add("FIELD_MOVED_TO_EXISTING_ONEOF", p)
            elif a_one is not None and b_one is None:
                self.add("ONEOF_FIELD_REMOVED", p)
        for name, count in moved_into.items():
            if count > 1:
                self.add("MULTIPLE_FIELDS_MOVED_TO_ONEOF", f"{path}/oneof/{name}")
        self.types(o.nested_type, u.nested_type, o.enum_type, u.enum_type, f"{path}/")

    def field_type(self, a: descriptor_pb2.FieldDescriptorProto, b: descriptor_pb2.FieldDescriptorProto,
                   p: str) -> None:
        named = (FieldP.TYPE_MESSAGE, FieldP.TYPE_ENUM, FieldP.TYPE_GROUP)
        if (a.type in named) != (b.type in named):
            self.add("FIELD_KIND_CHANGED", p)
        elif a.type in named:
            if a.type_name.rsplit(".", 1)[-1] != b.type_name.rsplit(".", 1)[-1] or a.type != b.type:
                self.add("FIELD_NAMED_TYPE_CHANGED", p)
        elif a.type != b.type:
            if {a.type, b.type} == {FieldP.TYPE_STRING, FieldP.TYPE_BYTES}:
                self.add("FIELD_STRING_OR_BYTES_LABEL_CHANGED", p)
            else:
                self.add("FIELD_SCALAR_KIND_CHANGED", p)
        if (a.label == FieldP.LABEL_REPEATED) != (b.label == FieldP.LABEL_REPEATED):
            self.add("FIELD_KIND_CHANGED", p)


class ProtobufSchema:
    schema_type = PROTOBUF

    def __init__(self, descriptor: FDP, text: str) -> None:
        self.descriptor = descriptor
        self._text = text

    def canonical(self) -> str:
        return self._text

    def normalized(self) -> str:
        return self._text

    def formatted(self, fmt: str) -> str:
        """``format=serialized``: the FileDescriptorProto in base64, as confluent-kafka's
        Protobuf serializers read it; else the text as registered."""
        if fmt == "serialized":
            return base64.b64encode(self.descriptor.SerializeToString()).decode()
        return self._text

    def read_errors(self, writer: ParsedSchema, reader_name: str = "new", writer_name: str = "old") -> list[str]:
        assert isinstance(writer, ProtobufSchema)
        return [f"{{errorType:'{kind}', description:'The {reader_name} schema has a change ({kind}) at '{path}' that "
                f"makes it incompatible with the {writer_name} schema', additionalInfo:'{path}'}}"
                for kind, path in _Diff(writer.descriptor, self.descriptor).found if kind not in COMPATIBLE]


class ProtobufProvider:
    schema_type = PROTOBUF

    def parse(self, text: str, references: list[ResolvedReference]) -> ProtobufSchema:
        try:
            descriptor = _decode_serialized(text.strip())
            if descriptor is not None:
                self._check(descriptor, references)
            else:
                descriptor = _compile(text, references)
        except (ValueError, TypeError, subprocess.TimeoutExpired) as e:
            raise ValueError(f"Invalid schema {text} with refs {[r.name for r in references]} of type PROTOBUF, "
                             f"details: {e}") from None
        return ProtobufSchema(descriptor, text.strip())

    def _check(self, descriptor: FDP, references: list[ResolvedReference]) -> None:
        """A serialized descriptor must build, with its references' files and the well-known
        types it imports."""
        _pool(_reference_files(references) + [descriptor]).FindFileByName(descriptor.name)
