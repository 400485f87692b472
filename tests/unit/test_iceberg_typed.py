"""A schema mode's table on a real SQLite catalog (no broker: the log's batches are built here,
the registry is a map of schemas): typed value columns, the schema evolving with a new
version, invalid records in the dead-letter table once each, or dropped."""

from __future__ import annotations

import uuid

import pytest

pytest.importorskip("pyiceberg", reason="the iceberg extra: pip install -e '.[iceberg]'")

from pyiceberg.exceptions import CommitFailedException  # noqa: E402

from rivulet.iceberg.catalog import CatalogSettings, open_catalog  # noqa: E402
from rivulet.iceberg.table import PartitionSlice, StaleStateError, TopicTable  # noqa: E402
from rivulet.iceberg.values import TypedValues  # noqa: E402
from rivulet.protocol import records as rec  # noqa: E402
from rivulet.registry.client import SCHEMA_NOT_FOUND, SUBJECT_NOT_FOUND, RegisteredSchema, RegistryError  # noqa: E402
from rivulet.registry.schema_types import AVRO  # noqa: E402
from tests.unit.test_registry_arrow import avro_value, wire  # noqa: E402

pytestmark = pytest.mark.fast

TS = 1_700_000_000_000
V1 = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}]}
V2 = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"}, {"name": "item", "type": "string"},
    {"name": "qty", "type": "int", "default": 1}]}


class Registry:
    """Schemas by id and subjects' latest, as the broker's registry answers them."""

    def __init__(self) -> None:
        self.by_id: dict[int, RegisteredSchema] = {}
        self.subjects: dict[str, int] = {}

    def register(self, schema_id: int, schema: dict, subject: str = "orders-value") -> None:
        import json
        self.by_id[schema_id] = RegisteredSchema(schema_id, AVRO, json.dumps(schema))
        self.subjects[subject] = schema_id

    def schema_by_id(self, schema_id: int) -> RegisteredSchema:
        if schema_id not in self.by_id:
            raise RegistryError("not found", 404, SCHEMA_NOT_FOUND)
        return self.by_id[schema_id]

    def latest(self, subject: str) -> RegisteredSchema:
        if subject not in self.subjects:
            raise RegistryError("not found", 404, SUBJECT_NOT_FOUND)
        return self.by_id[self.subjects[subject]]


def _slice(partition: int, base: int, values: list[bytes | None]) -> PartitionSlice:
    batch = rec.encode_batch([rec.Record(base + i, TS + i, f"k{base + i}".encode(), v, [])
                              for i, v in enumerate(values)], base_offset=base, base_timestamp=TS)
    return PartitionSlice(partition, base, base + len(values), [batch], [])


@pytest.fixture
def catalog(tmp_path):
    return open_catalog(CatalogSettings.resolve("", "", str(tmp_path)))


def _rows(catalog, name: str) -> list[dict]:
    return sorted(catalog.load_table(("rivulet", name)).scan().to_arrow().to_pylist(),
                  key=lambda r: (r["partition"], r["offset"]))


def test_typed_values_evolve_and_invalid_ones_are_dead_lettered(catalog) -> None:
    registry = Registry()
    registry.register(1, V1)
    topic_id = uuid.uuid4()
    table = TopicTable(catalog, "orders", topic_id, (), TypedValues(registry, "value_schema_id_prefix", "orders"))
    state, outcome = table.commit([_slice(0, 0, [wire(1, avro_value(V1, {"id": 1, "item": "pen"})), None,
                                                 b"not-prefixed", wire(9, b"\x02")])], table.state())
    assert outcome.rows == 2 and outcome.dead_lettered == {0: 2} and state.next_offsets == {0: 4}
    rows = _rows(catalog, "orders")
    assert [(r["offset"], r["value"]) for r in rows] == [(0, {"id": 1, "item": "pen"}), (1, None)]
    dead = _rows(catalog, "orders~dlq")
    assert [(r["offset"], r["value"], r["key"]) for r in dead] == [(2, b"not-prefixed", b"k2"),
                                                                    (3, wire(9, b"\x02"), b"k3")]
    assert dead[0]["reason"].startswith("bad-magic") and dead[1]["reason"] == "unknown-schema-id: schema 9 not found"
    # A compatible new version adds its column; rows of the old one read through it.
    registry.register(2, V2)
    state, outcome = table.commit([_slice(0, 4, [wire(2, avro_value(V2, {"id": 2, "item": "ink", "qty": 5})),
                                                 wire(1, avro_value(V1, {"id": 3, "item": "cap"}))])], state)
    assert outcome.rows == 2 and not outcome.dead_lettered
    rows = _rows(catalog, "orders")
    assert [r["value"] for r in rows] == [{"id": 1, "item": "pen", "qty": None}, None,
                                          {"id": 2, "item": "ink", "qty": 5}, {"id": 3, "item": "cap", "qty": 1}]
    # An incompatible version (a column's type changed) cannot evolve the table: its values go
    # to the dead-letter table with both reasons.
    registry.register(3, {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]})
    state, outcome = table.commit([_slice(0, 6, [wire(3, avro_value(
        {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]}, {"id": "x"}))])], state)
    assert outcome.rows == 0 and outcome.dead_lettered == {0: 1} and state.next_offsets == {0: 7}
    reason = _rows(catalog, "orders~dlq")[-1]["reason"]
    assert "schema 3 cannot evolve the table" in reason and "undecodable" in reason


def test_a_new_leader_reads_values_with_the_schema_the_table_followed(catalog) -> None:
    registry = Registry()
    registry.register(1, V1)
    registry.register(2, V2)
    first = TopicTable(catalog, "orders", None, (), TypedValues(registry, "value_schema_id_prefix", "orders"))
    state, _ = first.commit([_slice(0, 0, [wire(2, avro_value(V2, {"id": 1, "item": "pen", "qty": 3}))])],
                            first.state())
    summary = catalog.load_table(("rivulet", "orders")).current_snapshot().summary.additional_properties
    assert summary["rivulet.value-schema-id"] == "2"
    # The next leader sees only V1 values: it reads them as V2 (qty's default), as the first would.
    second = TopicTable(catalog, "orders", None, (), TypedValues(registry, "value_schema_id_prefix", "orders"))
    second.commit([_slice(0, 1, [wire(1, avro_value(V1, {"id": 2, "item": "ink"}))])], second.state())
    assert [r["value"] for r in _rows(catalog, "orders")] == [{"id": 1, "item": "pen", "qty": 3},
                                                              {"id": 2, "item": "ink", "qty": 1}]


def test_dead_letters_are_added_once_when_the_table_commit_fails(catalog) -> None:
    registry = Registry()
    registry.register(1, V1)
    good = wire(1, avro_value(V1, {"id": 1, "item": "pen"}))
    first = TopicTable(catalog, "orders", None, (), TypedValues(registry, "value_schema_id_prefix", "orders"))
    second = TopicTable(catalog, "orders", None, (), TypedValues(registry, "value_schema_id_prefix", "orders"))
    stale = second.state()
    first.commit([_slice(0, 0, [good, good])], first.state())
    # The other leader's commit: its dead letters go in first, then its table commit fails.
    with pytest.raises((CommitFailedException, StaleStateError)):
        second.commit([_slice(0, 0, [good, good, b"bad", good])], stale)
    assert len(_rows(catalog, "orders~dlq")) == 1
    now = second.state()
    _state, outcome = second.commit([_slice(0, 2, [b"bad", good])], now)
    assert outcome.rows == 1 and outcome.dead_lettered == {}  # offset 2 was dead-lettered already
    assert [r["offset"] for r in _rows(catalog, "orders~dlq")] == [2]
    assert [r["offset"] for r in _rows(catalog, "orders")] == [0, 1, 3]


def test_latest_mode_reads_unprefixed_values_and_drop_counts(catalog) -> None:
    registry = Registry()
    table = TopicTable(catalog, "orders", None, (), TypedValues(registry, "value_schema_latest", "orders"))
    with pytest.raises(RegistryError, match="no subject orders-value"):  # waits for the schema, loses nothing
        table.commit([_slice(0, 0, [avro_value(V1, {"id": 1, "item": "pen"})])], table.state())
    registry.register(1, V1)
    state, outcome = table.commit([_slice(0, 0, [avro_value(V1, {"id": 1, "item": "pen"}), b"\xff"])],
                                  table.state(), "drop")
    assert outcome.rows == 1 and outcome.dropped == {0: 1} and "partition 0 offset 1" in outcome.example
    assert [r["value"] for r in _rows(catalog, "orders")] == [{"id": 1, "item": "pen"}]
    assert state.next_offsets == {0: 2}
