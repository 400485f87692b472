"""A topic's table in key_value mode: its schema and partition spec, records into Arrow, and the
commit that adds a translation's rows and moves the table's offsets on in one snapshot.

Everything here runs on the translation thread and imports pyiceberg and pyarrow.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    Transform,
    TruncateTransform,
    YearTransform,
)
from pyiceberg.types import (
    BinaryType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)

from rivulet.iceberg.catalog import NAMESPACE
from rivulet.iceberg.offsets import TOPIC_ID, PartitionSlice, TableState, next_offsets, summary_after
from rivulet.protocol import records as rec
from rivulet.storage.config import SpecField

# pyiceberg retries a failed commit on the new current snapshot by default; a translation's
# commit is only right on the snapshot whose offsets it started from, so it must fail instead.
_NO_COMMIT_RETRIES = {"commit.retry.num-retries": "0"}

KEY_VALUE_SCHEMA = Schema(
    NestedField(1, "key", BinaryType(), required=False),
    NestedField(2, "value", BinaryType(), required=False),
    NestedField(3, "partition", IntegerType(), required=True),
    NestedField(4, "offset", LongType(), required=True),
    NestedField(5, "timestamp", TimestamptzType(), required=True),
    NestedField(6, "headers", ListType(7, StructType(
        NestedField(8, "key", StringType(), required=False),
        NestedField(9, "value", BinaryType(), required=False)), element_required=True), required=False),
)
_COLUMN_IDS = {"key": 1, "partition": 3, "offset": 4, "timestamp": 5}
_HEADER_TYPE = pa.list_(pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())]),
                                 nullable=False))


def table_identifier(topic: str) -> tuple[str, str]:
    """``rivulet.<topic>``, as a tuple: a topic name's dots are not namespaces."""
    return NAMESPACE, topic


def partition_spec(fields: Sequence[SpecField]) -> PartitionSpec:
    out = []
    for i, f in enumerate(fields):
        transform: Transform
        if f.transform == "identity":
            transform, name = IdentityTransform(), f.column
        elif f.transform == "bucket":
            transform, name = BucketTransform(f.width), f"{f.column}_bucket_{f.width}"
        elif f.transform == "truncate":
            transform, name = TruncateTransform(f.width), f"{f.column}_trunc_{f.width}"
        else:
            transform = {"year": YearTransform(), "month": MonthTransform(), "day": DayTransform(),
                         "hour": HourTransform()}[f.transform]
            name = f"{f.column}_{f.transform}"
        out.append(PartitionField(source_id=_COLUMN_IDS[f.column], field_id=1000 + i, transform=transform, name=name))
    return PartitionSpec(*out)


class _Columns:
    """The key_value columns, filled record by record."""

    def __init__(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.partitions: list[int] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.header_ends: list[int] = [0]
        self.header_keys: list[str] = []
        self.header_values: list[bytes | None] = []

    def add(self, sl: PartitionSlice) -> None:
        located = [(chunk, pos, h) for chunk in sl.chunks for pos, h in rec.iter_batches(chunk)]
        aborted = {first for first, _ in rec.aborted_batches([h for _, _, h in located], sl.aborted)}
        start, end = sl.start, sl.end
        for chunk, pos, h in located:
            # Control batches (markers) and aborted transactions' batches never become rows.
            if h.is_control or h.base_offset in aborted or h.next_offset <= start or h.base_offset >= end:
                continue
            for r in rec.decode_batch(chunk, pos).records:
                if start <= r.offset < end:
                    self._record(sl.partition, r)

    def _record(self, partition: int, r: rec.Record) -> None:
        self.keys.append(r.key)
        self.values.append(r.value)
        self.partitions.append(partition)
        self.offsets.append(r.offset)
        self.timestamps.append(r.timestamp * 1000)
        for k, v in r.headers or ():
            self.header_keys.append(k if isinstance(k, str) else bytes(k).decode("utf-8", "replace"))
            self.header_values.append(v)
        self.header_ends.append(len(self.header_keys))

    def table(self, schema: pa.Schema) -> pa.Table:
        headers = pa.ListArray.from_arrays(
            pa.array(self.header_ends, pa.int32()),
            pa.StructArray.from_arrays([pa.array(self.header_keys, pa.string()),
                                        pa.array(self.header_values, pa.binary())], names=["key", "value"]),
            type=_HEADER_TYPE)
        arrays = [pa.array(self.keys, pa.binary()), pa.array(self.values, pa.binary()),
                  pa.array(self.partitions, pa.int32()), pa.array(self.offsets, pa.int64()),
                  pa.array(self.timestamps, pa.timestamp("us", tz="UTC")), headers]
        return pa.Table.from_arrays(arrays, names=[f.name for f in schema]).cast(schema)


def to_arrow(slices: Sequence[PartitionSlice], schema: pa.Schema) -> pa.Table:
    """The rows of ``slices``: committed records only, as a read_committed consumer sees them."""
    cols = _Columns()
    for sl in slices:
        cols.add(sl)
    return cols.table(schema)


class TopicTable:
    """One topic's table in the catalog. Not thread-safe: the translation thread alone uses it."""

    def __init__(self, catalog: Catalog, topic: str, topic_id: uuid.UUID | None, spec: Sequence[SpecField]) -> None:
        self.topic = topic
        self.identifier = table_identifier(topic)
        self._table = self._load_or_create(catalog, topic_id, spec)
        self._arrow_schema = schema_to_pyarrow(self._table.schema())
        self._topic_id = None if topic_id is None else str(topic_id)

    @property
    def name(self) -> str:
        return ".".join(self.identifier)

    def _load_or_create(self, catalog: Catalog, topic_id: uuid.UUID | None, spec: Sequence[SpecField]) -> Table:
        try:
            table = catalog.load_table(self.identifier)
        except NoSuchTableError:
            props = {**_NO_COMMIT_RETRIES, **({TOPIC_ID: str(topic_id)} if topic_id is not None else {})}
            try:
                return catalog.create_table(self.identifier, KEY_VALUE_SCHEMA, partition_spec=partition_spec(spec),
                                            properties=props)
            except TableAlreadyExistsError:  # another broker made it first
                table = catalog.load_table(self.identifier)
        if table.properties.get("commit.retry.num-retries") != "0":
            with table.transaction() as txn:
                txn.set_properties(_NO_COMMIT_RETRIES)
        return table

    def state(self) -> TableState:
        """The current snapshot and its offsets, read again from the catalog."""
        self._table.refresh()
        return _state_of(self._table)

    def commit(self, slices: Sequence[PartitionSlice], base: TableState) -> tuple[TableState, int]:
        """Add the rows of ``slices`` and move their partitions' offsets on, in one snapshot
        whose parent must be ``base``'s: pyiceberg asserts the branch's snapshot id, so a
        commit made meanwhile (another leader's) fails this one with CommitFailedException
        and nothing is added. Returns the new state and the rows added."""
        advanced = {sl.partition: sl.end for sl in slices}
        props = summary_after(base.next_offsets, advanced, self._topic_id)
        rows = to_arrow(slices, self._arrow_schema)
        txn = self._table.transaction()
        if txn.table_metadata.current_snapshot_id != base.snapshot_id:
            raise StaleStateError(f"{self.name} moved on from snapshot {base.snapshot_id}")
        txn.append(rows, snapshot_properties=props)
        txn.commit_transaction()
        snap = self._table.current_snapshot()
        assert snap is not None
        return TableState(snap.snapshot_id, {**base.next_offsets, **advanced}, self._topic_id), rows.num_rows


def read_state(catalog: Catalog, topic: str) -> TableState | None:
    """The topic's table's current snapshot and offsets, None while there is no table; reads
    only (``rivulet topics describe``)."""
    try:
        return _state_of(catalog.load_table(table_identifier(topic)))
    except NoSuchTableError:
        return None


def _state_of(table: Table) -> TableState:
    snap = table.current_snapshot()
    made_for = table.properties.get(TOPIC_ID)
    if snap is None:
        return TableState(None, {}, made_for)
    summary = snap.summary.additional_properties if snap.summary else {}
    return TableState(snap.snapshot_id, next_offsets(summary), summary.get(TOPIC_ID, made_for))


class StaleStateError(Exception):
    """The table changed since the offsets a translation started from were read."""
