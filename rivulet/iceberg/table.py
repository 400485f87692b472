"""A topic's table: its schema and partition spec, records into Arrow, and the commit that adds
a translation's rows and moves the table's offsets on in one snapshot. In the schema modes the
value is a typed column (``values.TypedValues``) whose schema evolves with the registry's, and
the records it cannot hold go to the dead-letter table ``<topic>~dlq`` (Redpanda's name), or
are dropped.

Everything here runs on the translation thread and imports pyiceberg and pyarrow.
"""

from __future__ import annotations

import time
import uuid
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot, ancestors_of
from pyiceberg.table.update.snapshot import ExpireSnapshots
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

from rivulet.arrow.records import TIMESTAMP_TYPE, Chunk, decode_into
from rivulet.iceberg.catalog import NAMESPACE
from rivulet.iceberg.offsets import (
    NEXT_OFFSET,
    TOPIC_ID,
    VALUE_MESSAGE,
    VALUE_SCHEMA_ID,
    PartitionSlice,
    TableState,
    next_offsets,
    summary_after,
)
from rivulet.iceberg.values import Invalid, TypedValues
from rivulet.storage.config import ICEBERG_DLQ, SpecField

# pyiceberg retries a failed commit on the new current snapshot by default; a translation's
# commit is only right on the snapshot whose offsets it started from, so it must fail instead.
# Each commit writes a new metadata file; Iceberg's defaults keep them all, so the old ones
# are deleted past the latest 100 (write.metadata.previous-versions-max).
_TABLE_PROPERTIES = {"commit.retry.num-retries": "0", "write.metadata.delete-after-commit.enabled": "true"}
# The age Iceberg's expire_snapshots (Spark's procedure, Trino's) defaults to; the topic's
# iceberg.snapshot.max.age.ms is kept here, so that they expire what the broker would.
MAX_SNAPSHOT_AGE = "history.expire.max-snapshot-age-ms"
_EXPIRY_SLACK_MS = 3_600_000

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
# The schema modes' table before its first schema is known: the record's metadata; the typed
# ``value`` column is added by the first schema update (and evolves with the registry's).
METADATA_SCHEMA = Schema(*[f for f in KEY_VALUE_SCHEMA.fields if f.name != "value"])
DEAD_LETTER_SCHEMA = Schema(*KEY_VALUE_SCHEMA.fields, NestedField(10, "reason", StringType(), required=True))
_COLUMN_IDS = {"key": 1, "partition": 3, "offset": 4, "timestamp": 5}
_METADATA = ("key", "partition", "offset", "timestamp", "headers")
_HEADER_TYPE = pa.list_(pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())]),
                                 nullable=False))


def table_identifier(topic: str) -> tuple[str, str]:
    """``rivulet.<topic>``, as a tuple: a topic name's dots are not namespaces."""
    return NAMESPACE, topic


def dead_letter_identifier(topic: str) -> tuple[str, str]:
    """``rivulet.<topic>~dlq`` (no topic name has a ``~``)."""
    return NAMESPACE, f"{topic}~dlq"


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
    """The records' columns (the value as bytes), decoded by ``arrow.records`` a slice at a time:
    no Python object per record, and the C walk leaves the GIL to the event loop."""

    def __init__(self) -> None:
        self._parts: list[dict[str, pa.Array]] = []

    def add(self, sl: PartitionSlice) -> None:
        """The committed records of ``sl`` in [start, end): control batches and aborted
        transactions' batches (as a read_committed consumer finds them) never become rows."""
        buf = sl.chunks[0] if len(sl.chunks) == 1 else b"".join(sl.chunks)  # one walk sees every marker
        view = memoryview(buf)
        chunk = Chunk(True, over=view)
        decode_into(chunk, view, sl.start, sl.end, True, [(first, pid) for pid, first in sl.aborted])
        if not chunk.n:
            return
        lo, hi = chunk.bounds(sl.start, sl.end)
        keys, values = chunk.keys_values(lo, hi)
        self._parts.append({"key": keys, "value": values, "partition": pa.repeat(_partition(sl.partition), hi - lo),
                            "offset": chunk.offset_column(lo, hi), "timestamp": chunk.timestamp_column(lo, hi),
                            "headers": chunk.headers_column(lo, hi, empty=True)})

    @property
    def values(self) -> list[bytes | None]:
        """The values as bytes, for the schema modes' decoders."""
        return self.arrays()["value"].to_pylist()

    def arrays(self) -> dict[str, pa.Array]:
        if not self._parts:
            return {"key": pa.array([], pa.binary()), "value": pa.array([], pa.binary()),
                    "partition": pa.array([], pa.int32()), "offset": pa.array([], pa.int64()),
                    "timestamp": pa.array([], TIMESTAMP_TYPE), "headers": pa.array([], _HEADER_TYPE)}
        if len(self._parts) == 1:
            return dict(self._parts[0])
        return {name: pa.concat_arrays([p[name] for p in self._parts]) for name in self._parts[0]}


def _partition(p: int) -> pa.Scalar:
    return pa.Array.from_buffers(pa.int32(), 1, [None, pa.py_buffer(array("i", [p]))])[0]


def _arrow_table(columns: Mapping[str, pa.Array], schema: pa.Schema, as_is: str = "") -> pa.Table:
    """The columns as ``schema``'s fields (in its order; those it has that are not given left
    out: optional ones), cast to their types but ``as_is`` (a typed value, whose struct may be a
    part of the table's)."""
    fields, arrays = [], []
    for f in schema:
        if f.name not in columns:
            continue
        column = columns[f.name]
        if f.name == as_is:
            fields.append(pa.field(f.name, column.type, nullable=True, metadata=f.metadata))
        else:
            fields.append(f)
            column = column.cast(f.type)
        arrays.append(column)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def to_arrow(slices: Sequence[PartitionSlice], schema: pa.Schema) -> pa.Table:
    """The key_value rows of ``slices``: committed records only, as a read_committed consumer sees them."""
    cols = _Columns()
    for sl in slices:
        cols.add(sl)
    return _arrow_table(cols.arrays(), schema)


@dataclass(slots=True)
class Outcome:
    """What a commit did: rows added, and per partition the records the table could not hold,
    dead-lettered or dropped (``example``: the first, with its reason)."""

    rows: int = 0
    dead_lettered: dict[int, int] = field(default_factory=dict)
    dropped: dict[int, int] = field(default_factory=dict)
    example: str = ""


def _load_or_create(catalog: Catalog, identifier: tuple[str, str], schema: Schema, topic_id: uuid.UUID | None,
                    spec: Sequence[SpecField]) -> Table:
    try:
        table = catalog.load_table(identifier)
    except NoSuchTableError:
        props = {**_TABLE_PROPERTIES, **({TOPIC_ID: str(topic_id)} if topic_id is not None else {})}
        try:
            return catalog.create_table(identifier, schema, partition_spec=partition_spec(spec), properties=props)
        except TableAlreadyExistsError:  # another broker made it first
            table = catalog.load_table(identifier)
    if any(table.properties.get(k) != v for k, v in _TABLE_PROPERTIES.items()):
        with table.transaction() as txn:
            txn.set_properties(_TABLE_PROPERTIES)
    return table


def _expire_snapshots(txn: Transaction, max_age_ms: int) -> list[str]:
    """In a commit's transaction, before its append: remove the snapshots older than
    ``max_age_ms`` (-1: none) but the current one, whose summary holds the offsets translation
    resumes from (and the new snapshot carries them on). Done in batches: only once the oldest
    is a tenth of the age (at most an hour) past it, so that a steady stream of commits does
    not expire one snapshot each. The removed snapshots' manifest lists, which nothing else
    reads (an append-only table's manifests and data files stay in the new snapshot), are
    returned, to delete once the commit is made. The newest snapshot that records offsets
    stays too, should another engine's commit (a compaction) have come after it."""
    meta = txn.table_metadata
    # Keeping them all leaves the property unset: Iceberg reads a negative age as "expire all".
    if max_age_ms < 0:
        if MAX_SNAPSHOT_AGE in meta.properties:
            txn.remove_properties(MAX_SNAPSHOT_AGE)
        return []
    if meta.properties.get(MAX_SNAPSHOT_AGE) != str(max_age_ms):
        txn.set_properties({MAX_SNAPSHOT_AGE: str(max_age_ms)})
    cutoff = int(time.time() * 1000) - max_age_ms  # pyiceberg stamps snapshots with the wall clock
    keep = {meta.current_snapshot_id, *(s.snapshot_id for s in [_offsets_snapshot(meta)] if s is not None)}
    old = [s for s in meta.snapshots if s.timestamp_ms < cutoff and s.snapshot_id not in keep]
    if not old or min(s.timestamp_ms for s in old) >= cutoff - min(max_age_ms // 10, _EXPIRY_SLACK_MS):
        return []
    ExpireSnapshots(txn).by_ids([s.snapshot_id for s in old]).commit()
    return [s.manifest_list for s in old]


def _delete_files(table: Table, paths: Sequence[str]) -> None:
    """Best effort: a file left behind is an orphan, which no reader sees."""
    for path in paths:
        try:
            table.io.delete(path)
        except OSError:
            pass


class _DeadLetters:
    """``<topic>~dlq``: the records the topic's table cannot hold, as key_value rows with the
    reason. Its snapshots record next offsets of their own: every invalid record below them is
    in it. It is committed before the topic's table, so a crash between the two leaves records
    the table will translate again, and the offsets keep them from being dead-lettered twice."""

    def __init__(self, catalog: Catalog, topic: str, topic_id: str | None, spec: Sequence[SpecField]) -> None:
        self._catalog = catalog
        self._topic = topic
        self._topic_id = topic_id
        self._spec = spec
        self._table: Table | None = None

    def add(self, rows: pa.Table, ends: Mapping[int, int], max_snapshot_age_ms: int) -> dict[int, int]:
        """Add ``rows`` (with their ``reason``) but those already in, moving the offsets of
        ``ends``' partitions on; the rows added per partition."""
        if self._table is None:
            self._table = _load_or_create(self._catalog, dead_letter_identifier(self._topic), DEAD_LETTER_SCHEMA,
                                          None if self._topic_id is None else uuid.UUID(self._topic_id), self._spec)
        table = self._table
        table.refresh()
        state = _state_of(table)
        previous = state.next_offsets if state.topic_id in (None, self._topic_id) else {}
        floor = pa.array([previous.get(p, 0) for p in rows["partition"].to_pylist()], pa.int64())
        rows = rows.filter(pc.greater_equal(rows["offset"], floor))
        if rows.num_rows == 0:
            return {}
        advanced = {p: max(previous.get(p, 0), end) for p, end in ends.items()}
        txn = table.transaction()
        if txn.table_metadata.current_snapshot_id != state.snapshot_id:
            raise StaleStateError(f"{'.'.join(dead_letter_identifier(self._topic))} moved on")
        expired = _expire_snapshots(txn, max_snapshot_age_ms)
        txn.append(_arrow_table({n: rows[n].combine_chunks() for n in rows.column_names},
                                schema_to_pyarrow(table.schema())),
                   snapshot_properties=summary_after(previous, advanced, self._topic_id))
        txn.commit_transaction()
        _delete_files(table, expired)
        added: dict[int, int] = {}
        for p in rows["partition"].to_pylist():
            added[p] = added.get(p, 0) + 1
        return added


class TopicTable:
    """One topic's table in the catalog. Not thread-safe: the translation thread alone uses it.
    ``values``: the typed value column of a schema mode (None: key_value)."""

    def __init__(self, catalog: Catalog, topic: str, topic_id: uuid.UUID | None, spec: Sequence[SpecField],
                 values: TypedValues | None = None) -> None:
        self.topic = topic
        self.identifier = table_identifier(topic)
        self._table = _load_or_create(catalog, self.identifier, KEY_VALUE_SCHEMA if values is None else METADATA_SCHEMA,
                                      topic_id, spec)
        self._arrow_schema = schema_to_pyarrow(self._table.schema())
        self._topic_id = None if topic_id is None else str(topic_id)
        self._values = values
        self._dead_letters = None if values is None else _DeadLetters(catalog, topic, self._topic_id, spec)

    @property
    def name(self) -> str:
        return ".".join(self.identifier)

    def state(self) -> TableState:
        """The current snapshot and its offsets, read again from the catalog."""
        self._table.refresh()
        return _state_of(self._table)

    def commit(self, slices: Sequence[PartitionSlice], base: TableState, invalid_action: str = ICEBERG_DLQ,
               max_snapshot_age_ms: int = -1) -> tuple[TableState, Outcome]:
        """Add the rows of ``slices`` and move their partitions' offsets on, in one snapshot
        whose parent must be ``base``'s: pyiceberg asserts the branch's snapshot id, so a
        commit made meanwhile (another leader's) fails this one with CommitFailedException
        and nothing is added. In a schema mode the same snapshot's schema update evolves the
        value column, and the invalid records go (``invalid_action``) to the dead-letter table
        first, or nowhere. The snapshots older than ``max_snapshot_age_ms`` (-1: none) are
        expired in the same commit (``_expire_snapshots``)."""
        advanced = {sl.partition: sl.end for sl in slices}
        props = summary_after(base.next_offsets, advanced, self._topic_id)
        cols = _Columns()
        for sl in slices:
            cols.add(sl)
        outcome = Outcome()
        txn = self._table.transaction()
        if txn.table_metadata.current_snapshot_id != base.snapshot_id:
            raise StaleStateError(f"{self.name} moved on from snapshot {base.snapshot_id}")
        try:
            if self._values is None:
                rows = _arrow_table(cols.arrays(), self._arrow_schema)
            else:
                rows = self._typed_rows(txn, cols, advanced, invalid_action, max_snapshot_age_ms, outcome)
                props.update(self._values.recorded())
            expired = _expire_snapshots(txn, max_snapshot_age_ms)
            txn.append(rows, snapshot_properties=props)
            txn.commit_transaction()
        except Exception:
            if self._values is not None:
                self._values.forget()  # the schema update may not have been committed
            raise
        _delete_files(self._table, expired)
        snap = self._table.current_snapshot()
        assert snap is not None
        outcome.rows = rows.num_rows
        return TableState(snap.snapshot_id, {**base.next_offsets, **advanced}, self._topic_id), outcome

    def _typed_rows(self, txn: Transaction, cols: _Columns, advanced: Mapping[int, int], invalid_action: str,
                    max_snapshot_age_ms: int, outcome: Outcome) -> pa.Table:
        values = self._values
        assert values is not None and self._dead_letters is not None
        snap = _offsets_snapshot(txn.table_metadata)
        summary = snap.summary.additional_properties if snap is not None and snap.summary else {}
        if values.reader is None and summary.get(VALUE_SCHEMA_ID, "").isdigit():
            values.resume(int(summary[VALUE_SCHEMA_ID]), summary.get(VALUE_MESSAGE))
        value_bytes = cols.values
        reader = values.candidate(value_bytes)
        if reader is not None and reader != values.reader:
            try:
                value_type = reader.arrow_type()
                with txn.update_schema() as update:
                    update.union_by_name(pa.schema([pa.field("value", value_type)]))
                values.follow(reader)
            except Exception as e:  # no Arrow type, no Iceberg type, or a change Iceberg refuses
                values.refuse(reader.schema_id, f"schema {reader.schema_id} cannot evolve the table: {e}")
        column, invalid = values.decode(value_bytes)
        arrays = cols.arrays()
        columns = {n: arrays[n] for n in _METADATA}
        if column is not None:
            columns["value"] = column
        rows = _arrow_table(columns, schema_to_pyarrow(txn.table_metadata.schema()), as_is="value")
        if not invalid:
            return rows
        self._invalid(arrays, invalid, advanced, invalid_action, max_snapshot_age_ms, outcome)
        keep = [True] * rows.num_rows
        for i, _ in invalid:
            keep[i] = False
        return rows.filter(pa.array(keep))

    def _invalid(self, arrays: Mapping[str, pa.Array], invalid: Sequence[Invalid], advanced: Mapping[int, int],
                 action: str, max_snapshot_age_ms: int, outcome: Outcome) -> None:
        first, reason = invalid[0]
        outcome.example = (f"partition {arrays['partition'][first].as_py()} offset {arrays['offset'][first].as_py()}: "
                           f"{reason}")
        at = pa.array([i for i, _ in invalid], pa.int64())
        if action == ICEBERG_DLQ:
            assert self._dead_letters is not None
            rows = pa.Table.from_arrays([arrays[n].take(at) for n in arrays] + [pa.array([r for _, r in invalid])],
                                        names=[*arrays, "reason"])
            outcome.dead_lettered = self._dead_letters.add(rows, advanced, max_snapshot_age_ms)
            return
        for p in arrays["partition"].take(at).to_pylist():
            outcome.dropped[p] = outcome.dropped.get(p, 0) + 1


def read_state(catalog: Catalog, topic: str) -> TableState | None:
    """The topic's table's current snapshot and offsets, None while there is no table; reads
    only (``rivulet topics describe``)."""
    try:
        return _state_of(catalog.load_table(table_identifier(topic)))
    except NoSuchTableError:
        return None


def _offsets_snapshot(meta: TableMetadata) -> Snapshot | None:
    """The newest snapshot, from the current one back through its parents, that this broker's
    translation committed (its summary records the offsets): a snapshot another engine
    committed on top (Spark's rewrite_data_files, an expiry) carries no summary entries on."""
    for snap in ancestors_of(meta.current_snapshot(), meta):
        if snap.summary is not None and any(k.startswith(NEXT_OFFSET) for k in snap.summary.additional_properties):
            return snap
    return None


def _state_of(table: Table) -> TableState:
    current = table.current_snapshot()
    made_for = table.properties.get(TOPIC_ID)
    if current is None:
        return TableState(None, {}, made_for)
    snap = _offsets_snapshot(table.metadata)
    if snap is None:
        # Starting over would add every record again: better to stop and say why.
        raise LostOffsetsError(f"no snapshot of {'.'.join(table.name())} from snapshot {current.snapshot_id} back "
                               f"records the offsets translation resumes from (another engine wrote or expired them)")
    summary = snap.summary.additional_properties if snap.summary else {}
    return TableState(current.snapshot_id, next_offsets(summary), summary.get(TOPIC_ID, made_for))


class LostOffsetsError(Exception):
    """The table has snapshots and none of its current one's ancestors records offsets."""


class StaleStateError(Exception):
    """The table changed since the offsets a translation started from were read."""
