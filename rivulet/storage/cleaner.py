"""Log compaction (Kafka's LogCleaner) for logs whose cleanup.policy includes ``compact``.

One pass over a log:

1. Pick the cleanable range: every segment below the active one whose end is under the high
   watermark and whose newest record is older than min.compaction.lag.ms. Clean only when
   the dirty share of it (bytes past the last cleaned offset) reaches
   min.cleanable.dirty.ratio, or a tombstone's delete horizon has passed.
2. Map each key in the dirty part to its last offset.
3. Rewrite the range, segment group by segment group (groups stay under segment.bytes),
   keeping a record only if it is the newest for its key; a tombstone is kept until its
   batch's delete horizon (KIP-534: set to now + delete.retention.ms the first time the
   cleaner writes the batch) has passed. Batches keep their base and last offsets, so no
   offset ever changes; emptied batches disappear.
4. Swap each cleaned group in for the segments it replaces, in Kafka's crash-safe order:
   ``.swap`` files first, old segments removed, then the rename that makes the swap final.
   Log recovery finishes an interrupted swap.

Transactions (Kafka's CleanedTransactionMetadata): the cleanable range stops below the first
unstable offset, so every transaction in it is decided. Records of aborted transactions never
enter the key map and are discarded. A transaction marker stays while its transaction keeps
data; after that it gets a delete horizon like a tombstone and goes when the horizon passes.
A cleaned segment has no ``.txnindex`` entries: the aborted data they pointed at is gone, and
an entry whose marker was removed would make read_committed consumers drop the producer's
next transaction.

The first offset not yet cleaned is checkpointed per log dir in ``cleaner-offset-checkpoint``,
Kafka's file, so a restart does not count the whole log as dirty again.

Steps 2-3 (all the reading and writing) run in a worker thread and only touch segments that
are no longer written; step 4 runs on the event loop, where reads happen, and gives up if the
log changed meanwhile (retention, truncation, deletion).

Step 1 pins the segments it picks (``Log.pin_segments``) so retention cannot close them under
the worker; step 4 is the Log's own ``replace_segments``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from dataclasses import dataclass, field
from typing import Callable

from rivulet.common.time import SYSTEM_CLOCK
from rivulet.protocol import records as rec
from rivulet.protocol.compression import compress
from rivulet.storage.checkpoints import read_offset_checkpoint, write_offset_checkpoint
from rivulet.storage.log import Log
from rivulet.storage.manager import LogManager
from rivulet.storage.segment import LOG_SUFFIX, LogSegment, segment_file_name

log = logging.getLogger(__name__)

_TMP_DIR = "cleaner.tmp"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"


# ---------------------------------------------------------------- record encoding

def encode_retained_batch(h: rec.BatchHeader, records: list[rec.Record], delete_horizon_ms: int | None) -> bytes:
    """The batch ``h`` holding only ``records``, with its base and last offsets, producer
    fields and codec unchanged (Kafka keeps the last offset so producer sequences survive).
    With a delete horizon, the base timestamp carries it and the attribute flag says so."""
    log_append = h.is_log_append_time
    if delete_horizon_ms is not None:
        base_ts = delete_horizon_ms
    elif log_append:
        base_ts = h.base_timestamp
    else:
        base_ts = records[0].timestamp
    max_ts = h.max_timestamp if log_append else max(r.timestamp for r in records)
    body = b"".join(rec.encode_record(r.offset - h.base_offset, 0 if log_append else r.timestamp - base_ts,
                                      r.key, r.value, r.headers) for r in records)
    return rec.assemble_batch(
        [compress(h.compression, body) if h.compression else body], base_offset=h.base_offset,
        partition_leader_epoch=h.partition_leader_epoch,
        attributes=h.attributes | (rec.DELETE_HORIZON_MASK if delete_horizon_ms is not None else 0),
        last_offset_delta=h.last_offset_delta, base_timestamp=base_ts, max_timestamp=max_ts,
        producer_id=h.producer_id, producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
        records_count=len(records))


def delete_horizon(h: rec.BatchHeader) -> int | None:
    return h.base_timestamp if h.attributes & rec.DELETE_HORIZON_MASK else None


class _AbortedTxns:
    """Which batches belong to aborted transactions, walking batches in offset order: the
    same rule read_committed consumers apply to a fetch's aborted-transaction list."""

    def __init__(self, aborted: list[tuple[int, int]]) -> None:
        self._pending = sorted(aborted, key=lambda e: e[1], reverse=True)  # (pid, first offset)
        self._open: set[int] = set()

    def batch_is_aborted(self, h: rec.BatchHeader) -> bool:
        pending = self._pending
        while pending and pending[-1][1] <= h.last_offset:
            self._open.add(pending.pop()[0])
        if h.is_control:
            self._open.discard(h.producer_id)
            return False
        return h.is_transactional and h.producer_id in self._open


# ---------------------------------------------------------------- planning

@dataclass
class CleanStats:
    segments_read: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    tombstones_removed: int = 0
    # earliest delete horizon written: when it passes, the log is worth cleaning again
    next_horizon_ms: int | None = None


@dataclass
class _Plan:
    log: Log
    segments: list[LogSegment]
    aborted: list[tuple[int, int]]  # (producer id, first offset) overlapping the range
    first_dirty: int
    end_offset: int  # first offset past the cleanable range
    groups: list[list[LogSegment]]
    now_ms: int
    delete_retention_ms: int
    results: list[tuple[list[LogSegment], str]] = field(default_factory=list)  # (group, tmp dir)
    stats: CleanStats = field(default_factory=CleanStats)
    # filter pass: producers whose open transaction kept data
    txn_has_data: dict[int, bool] = field(default_factory=dict)


class _Aborted(Exception):
    """The cleaner is shutting down mid-pass."""


def _read_segment(seg: LogSegment) -> bytes:
    return os.pread(seg.fd, seg.size, 0) if seg.size else b""


class LogCleaner:
    """Compacts every log of ``log_manager`` whose policy includes ``compact``."""

    def __init__(self, log_manager: LogManager, *, backoff_ms: int = 15000, enabled: bool = True,
                 time_ms: Callable[[], int] = SYSTEM_CLOCK.milliseconds) -> None:
        self.log_manager = log_manager
        self.backoff_ms = backoff_ms
        self.enabled = enabled
        self.time_ms = time_ms
        # partition dir -> first offset not yet cleaned; persisted per log dir
        self.checkpoints: dict[str, int] = {}
        self._loaded_roots: set[str] = set()
        self.horizons: dict[str, int] = {}
        self._task: asyncio.Task | None = None
        self._busy: set[str] = set()
        self._stopping = False
        self.passes = 0

    # ------------------------------------------------------------ scheduling
    def start(self) -> None:
        if self.enabled and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def shutdown(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.backoff_ms / 1000)
            try:
                await self.clean_all()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("log cleaner pass failed; will retry")

    async def clean_all(self) -> int:
        """One pass over every compacted log; returns how many logs were cleaned."""
        loop = asyncio.get_running_loop()
        cleaned = 0
        for lg in self.log_manager.all_logs():
            plan = self._plan(lg, self.time_ms())
            if plan is None:
                continue
            self._busy.add(lg.dir)
            work = loop.run_in_executor(None, self._build, plan)
            try:
                await asyncio.shield(work)
            except asyncio.CancelledError:
                # The worker still reads the pinned segments: release them when it stops.
                self._stopping = True
                work.add_done_callback(lambda _f, p=plan: self._release(p))
                raise
            except OSError as e:
                self._release(plan)
                self._dir_failed(lg, e)
                continue
            except Exception:
                self._release(plan)
                raise
            try:
                if self._swap(plan):
                    cleaned += 1
            except OSError as e:
                self._dir_failed(lg, e)
            finally:
                self._release(plan)
        self.passes += 1
        return cleaned

    def _dir_failed(self, lg: Log, e: OSError) -> None:
        # As Kafka's cleaner: an I/O error takes the log dir offline rather than retrying forever.
        self.log_manager.failure_channel.maybe_add_offline_log_dir(
            os.path.dirname(lg.dir), f"cleaning {lg.topic}-{lg.partition} failed", e)

    def clean_log_now(self, lg: Log, now: int | None = None, force: bool = False) -> CleanStats | None:
        """Clean one log synchronously (tests and tools). ``force`` ignores the dirty ratio."""
        plan = self._plan(lg, self.time_ms() if now is None else now, force=force)
        if plan is None:
            return None
        try:
            self._build(plan)
            return plan.stats if self._swap(plan) else None
        finally:
            self._release(plan)

    def _release(self, plan: _Plan) -> None:
        lg = plan.log
        lg.unpin_segments(plan.segments)
        self._busy.discard(lg.dir)
        shutil.rmtree(os.path.join(lg.dir, _TMP_DIR), ignore_errors=True)

    # ------------------------------------------------------------ step 1: what to clean
    def _plan(self, lg: Log, now: int, force: bool = False) -> _Plan | None:
        cfg = lg.config
        if not cfg.compact_enabled or lg.closed or lg.offline or lg.read_only or lg.dir in self._busy:
            return None
        segs = lg.log_segments()
        if len(segs) < 2:
            return None
        cleanable: list[LogSegment] = []
        hw = lg.high_watermark
        fuo = lg.first_unstable_offset
        limit = hw if fuo is None else min(hw, fuo)  # only decided transactions
        for i, seg in enumerate(segs[:-1]):  # never the active segment
            upper = segs[i + 1].base_offset
            if upper > limit:
                break
            if cfg.min_compaction_lag_ms > 0 and seg.largest_timestamp > now - cfg.min_compaction_lag_ms:
                break
            cleanable.append(seg)
        if not cleanable:
            return None
        end_offset = segs[len(cleanable)].base_offset
        first_dirty = self._first_dirty(lg)
        total = sum(s.size for s in cleanable)
        dirty = sum(s.size for i, s in enumerate(cleanable)
                    if (segs[i + 1].base_offset if i + 1 < len(segs) else end_offset) > first_dirty)
        horizon_due = lg.dir in self.horizons and now >= self.horizons[lg.dir]
        max_lag_due = cfg.max_compaction_lag_ms < (1 << 62) and dirty > 0 and any(
            s.largest_timestamp <= now - cfg.max_compaction_lag_ms for s in cleanable if s.size)
        ratio = dirty / total if total else 0.0
        if not force and not horizon_due and not max_lag_due and (dirty == 0 or ratio < cfg.min_cleanable_dirty_ratio):
            return None
        # Pinned, a segment that retention deletes meanwhile keeps its descriptor open
        # until the worker is done reading it (the swap then notices the change).
        lg.pin_segments(cleanable)
        aborted = lg.collect_aborted_transactions(cleanable[0].base_offset, end_offset)
        groups: list[list[LogSegment]] = []
        size = 0
        for seg in cleanable:
            if groups and size + seg.size <= cfg.segment_size:
                groups[-1].append(seg)
                size += seg.size
            else:
                groups.append([seg])
                size = seg.size
        return _Plan(lg, cleanable, aborted, first_dirty, end_offset, groups, now, cfg.delete_retention_ms)

    # ------------------------------------------------------------ checkpoint
    def _first_dirty(self, lg: Log) -> int:
        root = os.path.dirname(lg.dir)
        if root not in self._loaded_roots:
            self._loaded_roots.add(root)
            saved = read_offset_checkpoint(os.path.join(root, CLEANER_OFFSET_CHECKPOINT))
            for (topic, partition), offset in saved.items():
                self.checkpoints.setdefault(os.path.join(root, f"{topic}-{partition}"), offset)
        start = lg.log_start_offset
        cp = self.checkpoints.get(lg.dir, start)
        # Kafka resets an out-of-range checkpoint (e.g. a topic deleted and created again).
        return cp if start <= cp <= lg.log_end_offset else start

    def _write_checkpoint(self, root: str) -> None:
        entries: dict[tuple[str, int], int] = {}
        for d, offset in self.checkpoints.items():
            if os.path.dirname(d) != root or not os.path.isdir(d):
                continue
            topic, _, partition = os.path.basename(d).rpartition("-")
            if topic and partition.isdigit():
                entries[(topic, int(partition))] = offset
        try:
            write_offset_checkpoint(os.path.join(root, CLEANER_OFFSET_CHECKPOINT), entries)
        except OSError as e:  # only costs a longer next pass
            log.warning("cannot write the cleaner checkpoint in %s: %s", root, e)

    # ------------------------------------------------------------ steps 2-3: worker thread
    def _build(self, plan: _Plan) -> None:
        offsets: dict[bytes, int] = {}
        stats = plan.stats
        aborted = _AbortedTxns(plan.aborted)
        for seg in plan.segments:
            data = _read_segment(seg)
            stats.segments_read += 1
            stats.bytes_read += len(data)
            for batch in rec.decode_records(data):
                h = batch.header
                if aborted.batch_is_aborted(h) or h.is_control or h.last_offset < plan.first_dirty:
                    continue
                for r in batch.records:
                    if r.key is not None and plan.first_dirty <= r.offset < plan.end_offset:
                        offsets[bytes(r.key)] = r.offset
        tmp_root = os.path.join(plan.log.dir, _TMP_DIR)
        shutil.rmtree(tmp_root, ignore_errors=True)
        aborted = _AbortedTxns(plan.aborted)
        for gi, group in enumerate(plan.groups):
            out = bytearray()
            for seg in group:
                if self._stopping:
                    raise _Aborted()
                data = _read_segment(seg)
                for pos, h in rec.iter_batches(data):
                    raw = memoryview(data)[pos:pos + h.size]
                    if aborted.batch_is_aborted(h):
                        plan.stats.records_read += h.records_count
                        continue
                    out += self._filter_batch(raw, rec.decode_batch(data, pos), offsets, plan)
            tmp = os.path.join(tmp_root, str(gi))
            os.makedirs(tmp)
            base = group[0].base_offset
            path = os.path.join(tmp, segment_file_name(base, LOG_SUFFIX))
            with open(path, "wb") as fh:
                fh.write(out)
                fh.flush()
                os.fsync(fh.fileno())
            cfg = plan.log.config
            seg = LogSegment(tmp, base, index_interval_bytes=cfg.index_interval_bytes,
                             max_index_bytes=cfg.segment_index_bytes, jitter_ms=0, created_ms=plan.now_ms,
                             fresh=False)
            seg.recover()
            seg.sync()
            seg.close(final=True)
            stats.bytes_written += len(out)
            plan.results.append((group, tmp))

    def _filter_batch(self, raw: memoryview, batch: rec.DecodedBatch, offsets: dict[bytes, int],
                      plan: _Plan) -> bytes | memoryview:
        h = batch.header
        stats = plan.stats
        horizon = delete_horizon(h)
        if h.is_control:
            return self._filter_marker(raw, batch, horizon, plan)
        kept: list[rec.Record] = []
        has_tombstone = False
        for r in batch.records:
            stats.records_read += 1
            if r.key is None:
                continue  # a compacted topic's record must have a key
            latest = offsets.get(bytes(r.key))
            if latest is not None and r.offset < latest:
                continue
            if r.value is None:
                if horizon is not None and plan.now_ms >= horizon:
                    stats.tombstones_removed += 1
                    continue
                has_tombstone = True
            kept.append(r)
        stats.records_kept += len(kept)
        if h.is_transactional and kept:
            plan.txn_has_data[h.producer_id] = True
        if not kept:
            return b""
        new_horizon = horizon
        if has_tombstone and horizon is None:
            new_horizon = plan.now_ms + plan.delete_retention_ms
        if has_tombstone:
            if stats.next_horizon_ms is None or new_horizon < stats.next_horizon_ms:
                stats.next_horizon_ms = new_horizon
        if len(kept) == len(batch.records) and new_horizon == horizon:
            return raw  # untouched: the original bytes, codec and CRC as written
        return encode_retained_batch(h, kept, new_horizon)

    def _filter_marker(self, raw: memoryview, batch: rec.DecodedBatch, horizon: int | None,
                       plan: _Plan) -> bytes | memoryview:
        h = batch.header
        stats = plan.stats
        stats.records_read += len(batch.records)
        if plan.txn_has_data.pop(h.producer_id, False):
            stats.records_kept += len(batch.records)
            return raw  # consumers still need it to decide the transaction's records
        if horizon is not None and plan.now_ms >= horizon:
            return b""
        if horizon is None:
            horizon = plan.now_ms + plan.delete_retention_ms
            raw = encode_retained_batch(h, list(batch.records), horizon)
        if stats.next_horizon_ms is None or horizon < stats.next_horizon_ms:
            stats.next_horizon_ms = horizon
        stats.records_kept += len(batch.records)
        return raw

    # ------------------------------------------------------------ step 4: event loop
    def _swap(self, plan: _Plan) -> bool:
        lg = plan.log
        if not lg.replace_segments(plan.segments, plan.results):
            log.info("%s changed while it was being cleaned; dropping this pass", lg.dir)
            return False
        self.checkpoints[lg.dir] = plan.end_offset
        self._write_checkpoint(os.path.dirname(lg.dir))
        if plan.stats.next_horizon_ms is not None:
            self.horizons[lg.dir] = plan.stats.next_horizon_ms
        else:
            self.horizons.pop(lg.dir, None)
        s = plan.stats
        log.info("%s: cleaned offsets [%d, %d): %d of %d records kept, %d tombstones removed, %d -> %d bytes",
                 lg.dir, lg.log_start_offset, plan.end_offset, s.records_kept, s.records_read, s.tombstones_removed,
                 s.bytes_read, s.bytes_written)
        return True

