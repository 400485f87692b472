"""The schema registry's operations over its replayed state: Confluent's answers and error
codes, and the records of ``_schemas`` each change writes (replayed here as the topic would
be; the integration tests run them through a broker)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from rivulet.registry import errors as E
from rivulet.registry.avro_schema import AvroProvider
from rivulet.registry.service import SchemaRegistry
from rivulet.registry.state import RegistryState

pytestmark = pytest.mark.fast


class LogStore:
    """The records in a list, replayed into the state as they are written."""

    def __init__(self) -> None:
        self.state = RegistryState()
        self.log: list[tuple[bytes, bytes | None]] = []
        self.lock = threading.RLock()

    @contextmanager
    def reading(self) -> Iterator[object]:
        with self.lock:
            yield self.state

    def sync(self) -> None:
        pass

    def write(self, records: list[tuple[bytes, bytes | None]]) -> None:
        for k, v in records:
            self.log.append((k, v))
            self.state.apply(k, v)


def rec(*fields: tuple[str, str] | dict, name: str = "R") -> dict:
    fs = [f if isinstance(f, dict) else {"name": f[0], "type": f[1]} for f in fields]
    return {"schema": json.dumps({"type": "record", "name": name, "fields": fs})}


@pytest.fixture
def reg() -> SchemaRegistry:
    return SchemaRegistry(LogStore(), {"AVRO": AvroProvider()})


def code(fn, *args, **kw) -> int:
    with pytest.raises(E.RestError) as e:
        fn(*args, **kw)
    return e.value.error_code


def test_register_is_idempotent_and_ids_are_global(reg):
    assert reg.register("a", rec(("x", "int"))) == {"id": 1}
    assert reg.register("a", rec(("x", "int"))) == {"id": 1}
    # The same schema under another subject keeps its id; a new one gets the next.
    assert reg.register("b", rec(("x", "int"))) == {"id": 1}
    assert reg.register("b", rec(("x", "int"), {"name": "y", "type": "int", "default": 0})) == {"id": 2}
    assert reg.versions("b") == [1, 2]
    assert reg.id_versions(1) == [{"subject": "a", "version": 1}, {"subject": "b", "version": 1}]
    assert reg.subjects() == ["a", "b"]


def test_errors_are_confluents(reg):
    reg.register("a", rec(("x", "int")))
    assert code(reg.versions, "nope") == E.SUBJECT_NOT_FOUND
    assert code(reg.get_version, "a", "2") == E.VERSION_NOT_FOUND
    assert code(reg.get_version, "a", "0") == E.INVALID_VERSION
    assert code(reg.get_version, "a", "x") == E.INVALID_VERSION
    assert code(reg.schema_by_id, 99) == E.SCHEMA_NOT_FOUND
    assert code(reg.register, "a", {"schema": "{bad"}) == E.INVALID_SCHEMA
    assert code(reg.register, "a", {"schema": '"int"', "schemaType": "XML"}) == E.INVALID_SCHEMA
    assert code(reg.register, "a", rec(("x", "string"))) == E.INCOMPATIBLE_SCHEMA
    assert code(reg.set_config, None, {"compatibility": "SIDEWAYS"}) == E.INVALID_COMPATIBILITY_LEVEL
    assert code(reg.set_mode, None, {"mode": "WRITEONLY"}) == E.INVALID_MODE
    assert code(reg.lookup, "a", rec(("y", "int"))) == E.SCHEMA_NOT_FOUND
    assert code(reg.get_config, "a") == E.SUBJECT_COMPATIBILITY_NOT_CONFIGURED
    assert code(reg.register, "bad\x01subject", rec(("x", "int"))) == E.INVALID_SUBJECT
    # Nothing was written by the refused requests: one record, the first registration.
    assert len(reg.store.log) == 1


def test_incompatible_message_and_levels(reg):
    reg.register("a", rec(("x", "int")))
    with pytest.raises(E.RestError) as e:
        reg.register("a", rec(("x", "int"), ("y", "int")))
    assert e.value.status == 409 and e.value.message.startswith(
        'Schema being registered is incompatible with an earlier schema for subject "a", details: '
        "[{errorType:'READER_FIELD_MISSING_DEFAULT_VALUE'")
    assert reg.set_config("a", {"compatibility": "none"}) == {"compatibility": "NONE"}
    assert reg.get_config("a") == {"compatibilityLevel": "NONE"}
    assert reg.get_config("b", default_to_global=True) == {"compatibilityLevel": "BACKWARD"}
    assert reg.register("a", rec(("x", "int"), ("y", "int"))) == {"id": 2}
    assert reg.delete_config("a") == {"compatibilityLevel": "NONE"}
    verdict = reg.check_compatibility("a", "latest", rec(("z", "int")), verbose=True)
    assert verdict["is_compatible"] is False and verdict["messages"]
    assert reg.check_compatibility("a", "1", rec(("x", "int"))) == {"is_compatible": True}
    assert reg.check_compatibility("new-subject", "latest", rec(("x", "int"))) == {"is_compatible": True}


def test_soft_then_hard_delete_and_ids_never_reused(reg):
    reg.register("a", rec(("x", "int")))
    reg.register("a", rec(("x", "int"), {"name": "y", "type": "int", "default": 0}))
    assert code(reg.delete_version, "a", "1", permanent=True) == E.SCHEMAVERSION_NOT_SOFT_DELETED
    assert reg.delete_version("a", "1") == 1
    assert code(reg.delete_version, "a", "1") == E.SCHEMAVERSION_SOFT_DELETED
    assert reg.versions("a") == [2] and reg.versions("a", deleted=True) == [1, 2]
    assert reg.get_version("a", "1", deleted=True)["id"] == 1
    assert code(reg.delete_subject, "a", permanent=True) == E.SUBJECT_NOT_SOFT_DELETED
    assert reg.delete_subject("a") == [2]
    assert reg.subjects() == [] and reg.subjects(deleted=True) == ["a"]
    assert code(reg.delete_subject, "a") == E.SUBJECT_SOFT_DELETED
    assert reg.delete_subject("a", permanent=True) == [1, 2]
    assert code(reg.versions, "a", deleted=True) == E.SUBJECT_NOT_FOUND
    assert code(reg.schema_by_id, 1) == E.SCHEMA_NOT_FOUND
    # A new schema after the hard delete takes a new id; versions of the subject start again.
    assert reg.register("a", rec(("z", "int"))) == {"id": 3}
    assert reg.versions("a") == [1]


def test_references_resolve_and_protect_what_they_name(reg):
    addr = {"schema": json.dumps({"type": "record", "name": "Addr", "namespace": "t",
                                  "fields": [{"name": "street", "type": "string"}]})}
    assert reg.register("addr", addr) == {"id": 1}
    user = {"schema": json.dumps({"type": "record", "name": "User", "namespace": "t",
                                  "fields": [{"name": "home", "type": "t.Addr"}]}),
            "references": [{"name": "t.Addr", "subject": "addr", "version": 1}]}
    assert reg.register("user", user) == {"id": 2}
    assert reg.referenced_by("addr", "1") == [2]
    assert reg.schema_by_id(2)["references"] == [{"name": "t.Addr", "subject": "addr", "version": 1}]
    assert code(reg.delete_version, "addr", "1") == E.REFERENCE_EXISTS
    dangling = dict(user, references=[{"name": "t.Addr", "subject": "addr", "version": 7}])
    assert code(reg.register, "user2", dangling) == E.INVALID_SCHEMA


def test_modes(reg):
    reg.register("a", rec(("x", "int")))
    assert reg.get_mode(None) == {"mode": "READWRITE"}
    assert reg.set_mode("a", {"mode": "READONLY"}) == {"mode": "READONLY"}
    assert code(reg.register, "a", rec(("x", "int"), ("y", "int"))) == E.OPERATION_NOT_PERMITTED
    assert reg.delete_mode("a") == {"mode": "READONLY"}
    assert code(reg.set_mode, None, {"mode": "IMPORT"}) == E.OPERATION_NOT_PERMITTED
    assert reg.set_mode("fresh", {"mode": "IMPORT"}) == {"mode": "IMPORT"}
    assert reg.register("fresh", dict(rec(("q", "int")), id=100, version=5)) == {"id": 100}
    assert reg.get_version("fresh", "5")["id"] == 100


def test_state_replays_confluents_records():
    """Records as Confluent's registry writes them, read back."""
    st = RegistryState()
    st.apply(b'{"keytype":"SCHEMA","subject":"s","version":1,"magic":1}',
             b'{"subject":"s","version":1,"id":7,"schema":"\\"string\\"","deleted":false}')
    st.apply(b'{"keytype":"CONFIG","subject":null,"magic":0}', b'{"compatibilityLevel":"FULL"}')
    st.apply(b'{"keytype":"NOOP","magic":0}', None)
    st.apply(b'{"keytype":"DELETE_SUBJECT","subject":"s","magic":0}', b'{"subject":"s","version":1}')
    st.apply(b'{"keytype":"SOMETHING_NEW","magic":0}', b"{}")
    st.apply(b"not json", b"{}")
    assert st.by_id[7].schema == '"string"' and st.max_id == 7
    assert st.global_level == "FULL"
    assert st.subject_versions("s") == [] and len(st.subject_versions("s", deleted=True)) == 1
    assert st.skipped == 2
    st.apply(b'{"keytype":"SCHEMA","subject":"s","version":1,"magic":1}', None)
    assert st.versions == {} and 7 not in st.by_id and st.max_id == 7
