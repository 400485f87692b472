"""The table's offset bookkeeping and the key_value translation, on a real SQLite catalog in a
temporary directory (no broker: the log's batches are built here)."""

from __future__ import annotations

import os
import time
import uuid

import pytest

pytest.importorskip("pyiceberg", reason="the iceberg extra: pip install -e '.[iceberg]'")

from pyiceberg.exceptions import CommitFailedException  # noqa: E402

from rivulet.iceberg.catalog import CatalogSettings, open_catalog  # noqa: E402
from rivulet.iceberg.offsets import next_offsets, summary_after  # noqa: E402
from rivulet.iceberg.table import LostOffsetsError, PartitionSlice, StaleStateError, TopicTable  # noqa: E402
from rivulet.protocol import records as rec  # noqa: E402
from rivulet.storage.config import parse_partition_spec  # noqa: E402

pytestmark = pytest.mark.fast

TS = 1_700_000_000_000


def test_next_offsets_read_only_the_partition_entries() -> None:
    assert next_offsets({"rivulet.next-offset.0": "12", "rivulet.next-offset.3": "7", "added-records": "5",
                         "rivulet.next-offset.x": "1"}) == {0: 12, 3: 7}
    assert next_offsets(None) == {}


def test_summary_carries_every_partition_forward_and_never_goes_back() -> None:
    assert summary_after({0: 10, 1: 4}, {1: 9, 2: 3}) == {
        "rivulet.next-offset.0": "10", "rivulet.next-offset.1": "9", "rivulet.next-offset.2": "3"}
    assert summary_after({}, {0: 1}, "d1c0") == {"rivulet.next-offset.0": "1", "rivulet.topic-id": "d1c0"}
    with pytest.raises(ValueError, match="go back"):
        summary_after({0: 10}, {0: 9})


def _batch(base: int, n: int, **kw: object) -> bytes:
    return rec.encode_batch([rec.Record(base + i, TS + i, f"k{base + i}".encode(), f"v{base + i}".encode(),
                                        [("h", b"x")] if i == 0 else []) for i in range(n)],
                            base_offset=base, base_timestamp=TS, **kw)


def _marker(kind: rec.ControlRecordType, base: int, pid: int) -> bytes:
    return rec.encode_control_batch(kind, producer_id=pid, producer_epoch=0, coordinator_epoch=0, base_offset=base,
                                    timestamp=TS)


@pytest.fixture
def catalog(tmp_path):
    return open_catalog(CatalogSettings.resolve("", "", str(tmp_path)))


def test_commit_adds_committed_records_once_and_records_offsets(catalog) -> None:
    topic_id = uuid.uuid4()
    table = TopicTable(catalog, "orders.eu", topic_id, parse_partition_spec("(hour(timestamp))"))
    assert table.name == "rivulet.orders.eu"
    base = table.state()
    assert base == base.__class__(None, {}, str(topic_id))
    # Offsets 0-2 plain, 3-4 an aborted transaction and its marker at 5, 6-7 a committed one, marker at 8.
    chunk = b"".join([_batch(0, 3), _batch(3, 2, producer_id=7, producer_epoch=0, transactional=True),
                      _marker(rec.ControlRecordType.ABORT, 5, 7),
                      _batch(6, 2, producer_id=8, producer_epoch=0, transactional=True),
                      _marker(rec.ControlRecordType.COMMIT, 8, 8)])
    state, outcome = table.commit([PartitionSlice(0, 1, 9, [chunk], [(7, 3)]), PartitionSlice(2, 0, 0, [], [])], base)
    rows = outcome.rows
    assert rows == 4 and state.next_offsets == {0: 9, 2: 0} and state.topic_id == str(topic_id)
    again = TopicTable(catalog, "orders.eu", topic_id, ())
    assert again.state() == state
    got = catalog.load_table(("rivulet", "orders.eu")).scan().to_arrow().sort_by("offset").to_pylist()
    assert [(r["partition"], r["offset"], r["key"], r["value"]) for r in got] == [
        (0, 1, b"k1", b"v1"), (0, 2, b"k2", b"v2"), (0, 6, b"k6", b"v6"), (0, 7, b"k7", b"v7")]
    assert got[2]["headers"] == [{"key": "h", "value": b"x"}] and got[0]["headers"] == []
    assert got[0]["timestamp"].timestamp() * 1000 == TS + 1
    spec = catalog.load_table(("rivulet", "orders.eu")).spec()
    assert [f.name for f in spec.fields] == ["timestamp_hour"]


def test_a_commit_on_a_stale_state_adds_nothing(catalog) -> None:
    first = TopicTable(catalog, "t", None, ())
    second = TopicTable(catalog, "t", None, ())  # another leader, which read the same state
    base = first.state()
    first.commit([PartitionSlice(0, 0, 3, [_batch(0, 3)], [])], base)
    with pytest.raises((CommitFailedException, StaleStateError)):
        second.commit([PartitionSlice(0, 0, 3, [_batch(0, 3)], [])], base)
    now = second.state()
    assert now.next_offsets == {0: 3}
    second.commit([PartitionSlice(0, 3, 5, [_batch(3, 2)], [])], now)
    offsets = catalog.load_table(("rivulet", "t")).scan().to_arrow()["offset"].to_pylist()
    assert sorted(offsets) == [0, 1, 2, 3, 4]
    # Through pyiceberg's own table object, which does not see the other's commit: the
    # snapshot id it asserts is stale, and it must not retry on the new one.
    with pytest.raises((CommitFailedException, StaleStateError)):
        first.commit([PartitionSlice(0, 3, 5, [_batch(3, 2)], [])], first.state().__class__(
            catalog.load_table(("rivulet", "t")).history()[0].snapshot_id, {0: 3}))


def test_snapshots_record_the_topic_id_their_offsets_belong_to(catalog) -> None:
    old, new = uuid.uuid4(), uuid.uuid4()
    first = TopicTable(catalog, "t", old, ())
    assert first.state().topic_id == str(old)  # the table's property, before any snapshot
    first.commit([PartitionSlice(0, 0, 3, [_batch(0, 3)], [])], first.state())
    # The topic deleted and made again: the table opens, and says whose offsets it holds.
    again = TopicTable(catalog, "t", new, ())
    state = again.state()
    assert state.topic_id == str(old) and state.next_offsets == {0: 3}
    fresh = state.__class__(state.snapshot_id, {}, str(new))
    after, outcome = again.commit([PartitionSlice(0, 0, 2, [_batch(0, 2)], [])], fresh)
    rows = outcome.rows
    assert rows == 2 and again.state() == after == state.__class__(after.snapshot_id, {0: 2}, str(new))
    assert len(catalog.load_table(("rivulet", "t")).scan().to_arrow()) == 5


def test_commits_expire_snapshots_older_than_the_max_age_and_keep_every_row(catalog) -> None:
    table = TopicTable(catalog, "t", None, ())
    state = table.state()
    for base in (0, 3, 6):  # kept: -1 expires nothing
        state, _ = table.commit([PartitionSlice(0, base, base + 3, [_batch(base, 3)], [])], state)
    iceberg = catalog.load_table(("rivulet", "t"))
    assert len(iceberg.snapshots()) == 3 and "history.expire.max-snapshot-age-ms" not in iceberg.properties
    old = [s.manifest_list for s in iceberg.snapshots()[:2]]
    time.sleep(0.05)
    state, _ = table.commit([PartitionSlice(0, 9, 12, [_batch(9, 3)], [])], state, max_snapshot_age_ms=20)
    iceberg = catalog.load_table(("rivulet", "t"))
    # The two older ones went; the one the commit started from stays beside the new one.
    assert [s.snapshot_id for s in iceberg.snapshots()][-1] == state.snapshot_id
    assert len(iceberg.snapshots()) == 2 and len(iceberg.history()) == 2
    assert iceberg.properties["history.expire.max-snapshot-age-ms"] == "20"
    assert not any(os.path.exists(p.removeprefix("file://")) for p in old)
    assert sorted(iceberg.scan().to_arrow()["offset"].to_pylist()) == list(range(12))
    assert TopicTable(catalog, "t", None, ()).state() == state  # a new leader resumes from it
    # Within the age (and its slack) nothing goes: a commit does not expire one snapshot each.
    state, _ = table.commit([PartitionSlice(0, 12, 13, [_batch(12, 1)], [])], state, max_snapshot_age_ms=60_000)
    assert len(catalog.load_table(("rivulet", "t")).snapshots()) == 3


def test_offsets_are_read_through_another_engines_snapshots_and_never_lost(catalog) -> None:
    table = TopicTable(catalog, "t", None, ())
    state = table.state()
    for base in (0, 3):
        state, _ = table.commit([PartitionSlice(0, base, base + 3, [_batch(base, 3)], [])], state)
    ours = state.snapshot_id
    # Another engine's commit on top (as a compaction's): its summary has none of our entries.
    iceberg = catalog.load_table(("rivulet", "t"))
    iceberg.append(iceberg.scan().to_arrow().slice(0, 0))
    iceberg = catalog.load_table(("rivulet", "t"))
    assert iceberg.current_snapshot().snapshot_id != ours
    resumed = table.state()
    assert resumed.next_offsets == {0: 6} and resumed.snapshot_id == iceberg.current_snapshot().snapshot_id
    time.sleep(0.05)
    # Expiry keeps the snapshot that records the offsets, though it is no longer the current one.
    state, _ = table.commit([PartitionSlice(0, 6, 7, [_batch(6, 1)], [])], resumed, max_snapshot_age_ms=20)
    kept = [s.snapshot_id for s in catalog.load_table(("rivulet", "t")).snapshots()]
    assert ours in kept and state.snapshot_id in kept and len(kept) == 3
    assert table.state().next_offsets == {0: 7}
    # Were they all expired by another engine, translation stops rather than starting over.
    iceberg = catalog.load_table(("rivulet", "t"))
    iceberg.append(iceberg.scan().to_arrow().slice(0, 0))
    iceberg = catalog.load_table(("rivulet", "t"))
    current = iceberg.current_snapshot().snapshot_id
    iceberg.maintenance.expire_snapshots().by_ids([s.snapshot_id for s in iceberg.snapshots()
                                                   if s.snapshot_id != current]).commit()
    with pytest.raises(LostOffsetsError):
        table.state()
