"""Translation's columns (``arrow.records`` over a slice) against the per-record reference: every
committed record in [start, end) once, as a read_committed consumer sees it, with its key, value,
offset, timestamp and headers, on random logs of plain, transactional (committed and aborted),
compressed, log-append-time, compacted and header-carrying batches cut into several chunks."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("pyiceberg", reason="the iceberg extra: pip install -e '.[iceberg]'")

import pyarrow as pa  # noqa: E402
from pyiceberg.io.pyarrow import schema_to_pyarrow  # noqa: E402

from rivulet.arrow import records as arrow_records  # noqa: E402
from rivulet.iceberg.offsets import PartitionSlice  # noqa: E402
from rivulet.iceberg.table import KEY_VALUE_SCHEMA, _arrow_table, _Columns  # noqa: E402
from rivulet.protocol import records as rec  # noqa: E402
from rivulet.protocol.compression import GZIP, LZ4, SNAPPY, ZSTD  # noqa: E402

pytestmark = pytest.mark.fast

TS = 1_700_000_000_000
SCHEMA = schema_to_pyarrow(KEY_VALUE_SCHEMA)


def reference_rows(sl: PartitionSlice) -> list[dict]:
    """What the table must hold for ``sl``: each record decoded as an object, then filtered."""
    located = [(chunk, pos, h) for chunk in sl.chunks for pos, h in rec.iter_batches(chunk)]
    aborted = {first for first, _ in rec.aborted_batches([h for _, _, h in located], sl.aborted)}
    rows = []
    for chunk, pos, h in located:
        if h.is_control or h.base_offset in aborted or h.next_offset <= sl.start or h.base_offset >= sl.end:
            continue
        for r in rec.decode_batch(chunk, pos).records:
            if sl.start <= r.offset < sl.end:
                rows.append({"key": r.key, "value": r.value, "partition": sl.partition, "offset": r.offset,
                             "timestamp": r.timestamp * 1000, "headers": [(k, v) for k, v in r.headers]})
    return rows


def translated_rows(slices: list[PartitionSlice]) -> list[dict]:
    cols = _Columns()
    for sl in slices:
        cols.add(sl)
    table = _arrow_table(cols.arrays(), SCHEMA)
    assert table.schema.equals(SCHEMA)
    out = table.to_pylist()
    for row in out:
        row["timestamp"] = int(row["timestamp"].timestamp() * 1_000_000)
        row["headers"] = [(h["key"], h["value"]) for h in row["headers"]]
    return out


def _bytes(rnd: random.Random) -> bytes | None:
    return rnd.choice([None, b"", rnd.randbytes(rnd.randint(1, 200)), rnd.randbytes(rnd.randint(200, 20_000))
                       if rnd.random() < 0.05 else b"x" * rnd.randint(1, 30)])


def random_log(rnd: random.Random, partition: int) -> PartitionSlice:
    """A partition's log: batches of random records from plain and transactional producers,
    with markers, then a random [start, end) over it and the batches cut into chunks."""
    batches: list[bytes] = []
    aborted: list[tuple[int, int]] = []
    open_txns: dict[int, tuple[int, bool]] = {}   # pid -> (first offset, will abort)
    offset = rnd.randint(0, 1000)
    ts = TS
    uniform = rnd.random() < 0.3   # same-shaped records: the galloping layout
    for _ in range(rnd.randint(1, 25)):
        pid = rnd.choice([-1, -1, 7, 8, 9])
        if pid >= 0 and pid in open_txns and rnd.random() < 0.3:
            first, abort = open_txns.pop(pid)
            if abort:
                aborted.append((pid, first))
            batches.append(rec.encode_control_batch(rec.ControlRecordType.ABORT if abort else rec.ControlRecordType.COMMIT,
                                                    producer_id=pid, producer_epoch=0, coordinator_epoch=0,
                                                    base_offset=offset, timestamp=ts))
            offset += 1
            continue
        if pid >= 0 and pid not in open_txns:
            open_txns[pid] = (offset, rnd.random() < 0.5)
        n = rnd.choice([1, 2, rnd.randint(3, 50), rnd.randint(200, 700)])
        records = []
        o = offset
        for i in range(n):
            if uniform:
                key, value, headers = b"k%04d" % (i % 10_000), b"v" * 20, []
            else:
                key, value = _bytes(rnd), _bytes(rnd)
                headers = [(rnd.choice(["h", "", "ключ", "trace-id"]), _bytes(rnd))
                           for _ in range(rnd.choice([0, 0, 0, 1, 3]))]
            records.append(rec.Record(o, ts + rnd.randint(-5, 100), key, value, headers))
            o += 1 if uniform or rnd.random() < 0.9 else rnd.randint(2, 5)   # compaction's gaps
        batches.append(rec.encode_batch(records, base_offset=offset, base_timestamp=ts,
                                        compression=rnd.choice([0, 0, GZIP, SNAPPY, LZ4, ZSTD]),
                                        timestamp_type=rec.LOG_APPEND_TIME if rnd.random() < 0.15 else rec.CREATE_TIME,
                                        producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                                        base_sequence=0 if pid >= 0 else -1, transactional=pid >= 0))
        offset = o
        ts += 7
    # Transactions still open end before the slice's end (at most the last stable offset).
    lso = min([first for first, _ in open_txns.values()] + [offset])
    first_offset = rec.decode_batch(batches[0], 0, verify_crc=False).header.base_offset
    start = rnd.randint(first_offset, lso)
    end = rnd.randint(start, lso)
    # The leader reads whole batches from the one holding ``start``; they arrive in chunks.
    headers = [h for b in batches for _, h in rec.iter_batches(b)]
    keep = [b for b, h in zip(batches, headers, strict=True) if h.next_offset > start]
    chunks, i = [], 0
    while i < len(keep):
        k = rnd.randint(1, 4)
        chunks.append(b"".join(keep[i:i + k]))
        i += k
    return PartitionSlice(partition, start, end, chunks, aborted)


@pytest.mark.parametrize("c_layout", [True, False], ids=["c-layout", "arrow-compute"])
@pytest.mark.parametrize("seed", range(40))
def test_columns_hold_the_committed_records_in_range(seed: int, c_layout: bool,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    if c_layout and arrow_records._record_layout is None:
        pytest.fail("the C accelerator is not built: python setup.py build_ext --inplace")
    if not c_layout:
        monkeypatch.setattr(arrow_records, "_record_layout", None)
    rnd = random.Random(seed)
    slices = [random_log(rnd, p) for p in range(rnd.randint(1, 3))]
    want = [row for sl in slices for row in reference_rows(sl)]
    assert translated_rows(slices) == want


def test_aborted_transaction_spanning_chunks_is_dropped_and_a_later_one_kept() -> None:
    """The aborted transaction starts in one chunk and ends in the next; the same producer's
    next transaction, committed, follows in a third: the abort marker must close the first."""
    pid = 5
    txn = dict(producer_id=pid, producer_epoch=0, base_sequence=0, transactional=True, base_timestamp=TS)
    a1 = rec.encode_batch([rec.Record(0, TS, None, b"a0", [])], base_offset=0, **txn)
    a2 = rec.encode_batch([rec.Record(1, TS, None, b"a1", [])], base_offset=1, **txn)
    abort = rec.encode_control_batch(rec.ControlRecordType.ABORT, producer_id=pid, producer_epoch=0,
                                     coordinator_epoch=0, base_offset=2, timestamp=TS)
    c1 = rec.encode_batch([rec.Record(3, TS, None, b"c3", [("h", None)])], base_offset=3, **txn)
    commit = rec.encode_control_batch(rec.ControlRecordType.COMMIT, producer_id=pid, producer_epoch=0,
                                      coordinator_epoch=0, base_offset=4, timestamp=TS)
    sl = PartitionSlice(0, 0, 5, [a1, a2 + abort, c1 + commit], [(pid, 0)])
    rows = translated_rows([sl])
    assert [(r["offset"], r["value"], r["headers"]) for r in rows] == [(3, b"c3", [("h", None)])]
    assert rows == reference_rows(sl)


def test_no_rows_give_the_table_schema() -> None:
    empty = PartitionSlice(0, 0, 1, [rec.encode_control_batch(rec.ControlRecordType.COMMIT, producer_id=1,
                                                              producer_epoch=0, coordinator_epoch=0, base_offset=0,
                                                              timestamp=TS)], [])
    assert translated_rows([empty]) == []
    assert translated_rows([]) == []
    assert pa.Table.from_pylist([], SCHEMA).schema.equals(_arrow_table(_Columns().arrays(), SCHEMA).schema)
