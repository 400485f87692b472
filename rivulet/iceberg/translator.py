"""The leaders' translation of topics into their tables (every mode), exactly once.

A task on the event loop looks, every tick, at the partitions this broker leads whose topic's
``iceberg.mode`` is not ``none``. A topic is due once records have waited half its
``iceberg.target.lag.ms`` untranslated (or at once while a backlog is being worked off): the
loop reads its partitions' logs from the table's next offsets up to their last stable offsets
(whole batches, 1 MiB at a time with the loop free between reads, at most
``iceberg.translation.max.bytes`` in all), and hands them to the translation thread, which
decodes them (control records and aborted transactions dropped; in the schema modes the values
through the registry's schemas, the invalid ones dead-lettered first), writes Parquet and
commits one snapshot whose summary moves those partitions' offsets on.

Exactly once: the offsets come from the table's current snapshot, never from local state, and
a commit succeeds only on the snapshot it started from. A crash after the files are written
and before the commit leaves the table as it was (the files are orphans); any failure, a
commit lost to another leader included, makes the next round read the table's offsets again.
A single thread does all the table work, one topic at a time, so translation takes at most
one core's worth from the broker, and the catalog (SQLite by default) has one writer here.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar

from rivulet.common.file_region import FileRegion
from rivulet.common.logs import RateLimitFilter
from rivulet.common.time import Clock
from rivulet.common.types import TopicPartition
from rivulet.iceberg.catalog import CatalogSettings
from rivulet.iceberg.offsets import PartitionSlice, TableState
from rivulet.protocol import records as rec
from rivulet.protocol.errors import ApiError
from rivulet.registry.client import SubjectLookup
from rivulet.storage.config import ICEBERG_DLQ, ICEBERG_KEY_VALUE, ICEBERG_MODE_NONE, parse_partition_spec
from rivulet.storage.log import Log

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

    from rivulet.iceberg.table import TopicTable

log = logging.getLogger(__name__)
log.addFilter(RateLimitFilter(interval_s=60.0))  # a table that keeps failing is named once a minute

_READ_CHUNK = 1 << 20  # bytes per log read on the loop
_T = TypeVar("_T")


class LedPartition(Protocol):
    """What translation needs of a partition (``replication.Partition`` is one)."""

    tp: TopicPartition
    topic_id: uuid.UUID
    log: Log

    @property
    def is_leader(self) -> bool: ...

    @property
    def last_stable_offset(self) -> int: ...


@dataclass(slots=True)
class PartitionTranslation:
    """One partition's progress, for metrics and ``describe``."""

    next_offset: int = -1  # the table's, -1 until read
    lag: int = 0  # records between the table's next offset and the last stable offset
    translated: int = 0  # records (offsets) added to the table by this broker
    skipped: int = 0  # offsets removed from the log (retention, DeleteRecords) before translation
    dead_lettered: int = 0  # records the table could not hold, added to its dead-letter table by this broker
    dropped: int = 0  # records the table could not hold, dropped (iceberg.invalid.record.action=drop)


@dataclass(slots=True)
class TopicTranslation:
    """One topic's table as this broker translates into it."""

    topic: str
    table_name: str = ""
    snapshot_id: int | None = None
    commits: int = 0
    error: str | None = None
    partitions: dict[int, PartitionTranslation] = field(default_factory=dict)
    # Loop-side state: the open table (made on the thread), its state as last read, when
    # untranslated records were first seen, whether the last read stopped at the byte cap.
    _topic_id: uuid.UUID | None = None
    _mode: str = ICEBERG_KEY_VALUE
    _table: TopicTable | None = None
    _state: TableState | None = None
    _pending_since_ms: int | None = None
    _backlog: bool = False
    _busy: bool = False
    _retry_at_ms: int = 0


# Translation is background work: under a load that takes every core, produce and fetch go first
# and the table falls behind, catching up once the load eases. The thread's nice value is
# inherited by the threads it starts (pyarrow's and pyiceberg's pools, made on first use there).
TRANSLATION_NICE = 10


def _background_priority() -> None:
    if sys.platform == "linux":  # per-thread nice values: Linux only
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), TRANSLATION_NICE)
        except OSError as e:  # a sandbox may refuse it: translation then shares the CPU evenly
            log.warning("Iceberg translation thread keeps its priority: %s", e)


class IcebergTranslator:
    """Every topic table this broker's leaders write into (docs/iceberg.md)."""

    def __init__(self, partitions: Callable[[], Iterable[LedPartition]], settings: CatalogSettings,
                 max_bytes: int, clock: Clock, schemas: SubjectLookup | None = None, tick_ms: int = 250) -> None:
        """``schemas``: where the schema modes find the registered schemas (an external registry
        by URL, else the broker's own; None: neither, and those modes cannot translate)."""
        self._partitions = partitions
        self._schemas = schemas
        self._settings = settings
        self._max_bytes = max_bytes
        self._clock = clock
        self._tick_ms = tick_ms
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="iceberg", initializer=_background_priority)
        self._catalog: Catalog | None = None  # opened on the thread
        self.topics: dict[str, TopicTranslation] = {}
        self._task: asyncio.Task[None] | None = None
        self._rounds: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        """Stop translating; a commit under way on the thread finishes (or fails) first."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._rounds:
            await asyncio.gather(*self._rounds, return_exceptions=True)
        await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._tick_ms / 1000)
            try:
                self._tick()
            except Exception:
                log.exception("Iceberg translation tick failed; will retry")

    def _tick(self) -> None:
        now = self._clock.milliseconds()
        led: dict[str, list[LedPartition]] = {}
        for p in self._partitions():
            if p.is_leader and p.log.config.iceberg_mode != ICEBERG_MODE_NONE:
                led.setdefault(p.tp.topic, []).append(p)
        for topic in [t for t, tt in self.topics.items() if t not in led and not tt._busy]:
            del self.topics[topic]  # no longer led here, deleted, or its mode set back to none
        for topic, parts in led.items():
            t = self.topics.get(topic)
            mode = parts[0].log.config.iceberg_mode
            if t is not None and (t._topic_id != parts[0].topic_id or t._mode != mode) and not t._busy:
                t = None  # deleted and made again between two ticks (another topic), or another mode
            if t is None:
                t = self.topics[topic] = TopicTranslation(topic, _topic_id=parts[0].topic_id, _mode=mode)
            if t._busy or now < t._retry_at_ms:
                continue
            if t._state is None or self._pending(t, parts, now):
                t._busy = True
                task = asyncio.get_running_loop().create_task(self._round(t, parts))
                self._rounds.add(task)
                task.add_done_callback(self._rounds.discard)

    def _pending(self, t: TopicTranslation, parts: list[LedPartition], now: int) -> bool:
        """Update the lags; whether the topic is due for a round."""
        assert t._state is not None
        behind = False
        for p in parts:
            pt = t.partitions.setdefault(p.tp.partition, PartitionTranslation())
            pt.next_offset = t._state.next_offsets.get(p.tp.partition, 0)
            pt.lag = max(0, p.last_stable_offset - max(pt.next_offset, p.log.log_start_offset))
            behind = behind or pt.lag > 0
        if not behind:
            t._pending_since_ms = None
            return False
        if t._pending_since_ms is None:
            t._pending_since_ms = now
        # Half the target lag: the records seen first are committed well within it.
        lag_ms = min(p.log.config.iceberg_target_lag_ms for p in parts)
        return t._backlog or now - t._pending_since_ms >= lag_ms // 2

    async def _call(self, fn: Callable[..., _T], *args: object) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def _round(self, t: TopicTranslation, parts: list[LedPartition]) -> None:
        try:
            if t._table is None:
                p = parts[0]
                t._table = await self._call(self._open_table, t.topic, p.topic_id,
                                            p.log.config.iceberg_partition_spec, t._mode)
                t.table_name = t._table.name
            if t._state is None:
                t._state = _resumable(t.topic, parts, await self._call(t._table.state))
                t.snapshot_id = t._state.snapshot_id
                return  # the lags and whether it is due, next tick
            slices, capped = await self._read(t, parts, t._state)
            t._backlog = capped
            if not slices:
                return
            config = parts[0].log.config
            t._state, outcome = await self._call(t._table.commit, slices, t._state,
                                                 config.iceberg_invalid_record_action,
                                                 config.iceberg_snapshot_max_age_ms)
            t.snapshot_id = t._state.snapshot_id
            t.commits += 1
            t._pending_since_ms = None
            t.error = None
            for sl in slices:
                pt = t.partitions.setdefault(sl.partition, PartitionTranslation())
                pt.translated += sl.end - sl.start
                pt.next_offset = sl.end
                pt.dead_lettered += outcome.dead_lettered.get(sl.partition, 0)
                pt.dropped += outcome.dropped.get(sl.partition, 0)
            invalid = sum(outcome.dropped.values()) + sum(outcome.dead_lettered.values())
            if invalid:
                log.warning("topic %s: %d record(s) its Iceberg table cannot hold %s, such as %s", t.topic, invalid,
                            "were dropped" if config.iceberg_invalid_record_action != ICEBERG_DLQ else f"went to {t.table_name}~dlq",
                            outcome.example, extra={"kind": f"iceberg-invalid-{t.topic}"})
        except Exception as e:
            # Whatever failed (a commit lost to another leader, the catalog, a full disk), the
            # table's own offsets are the only truth: read them again before going on.
            t._state = None
            t._backlog = False
            t.error = f"{type(e).__name__}: {e}"
            t._retry_at_ms = self._clock.milliseconds() + 1000
            log.warning("Iceberg translation of topic %s failed, resuming from the table's offsets: %s",
                        t.topic, t.error, extra={"kind": f"iceberg-{t.topic}"})
        finally:
            t._busy = False

    def _open_table(self, topic: str, topic_id: uuid.UUID, spec: str, mode: str) -> TopicTable:
        """On the thread: the catalog (first use) and the topic's table, made if missing."""
        from rivulet.iceberg.catalog import open_catalog

        try:
            from rivulet.iceberg.table import TopicTable
            from rivulet.iceberg.values import TypedValues
        except ImportError as e:
            raise RuntimeError(f"topic {topic} has iceberg.mode set, and tables need the iceberg extra "
                               f"(pip install 'rivulet[iceberg]'): {e}") from None

        values = None
        if mode != ICEBERG_KEY_VALUE:
            if self._schemas is None:
                raise RuntimeError(f"topic {topic} has iceberg.mode={mode}, which reads a schema registry, and this "
                                   f"broker runs none (schema.registry.listeners) and names none "
                                   f"(iceberg.schema.registry.url)")
            values = TypedValues(self._schemas, mode, topic)
        if self._catalog is None:
            self._catalog = open_catalog(self._settings)
        return TopicTable(self._catalog, topic, topic_id, parse_partition_spec(spec), values)

    async def _read(self, t: TopicTranslation, parts: list[LedPartition],
                    state: TableState) -> tuple[list[PartitionSlice], bool]:
        """Each partition's committed batches past the table's offsets, within the byte budget;
        and whether the budget stopped it short of the last stable offsets."""
        budget = self._max_bytes
        slices: list[PartitionSlice] = []
        for p in sorted(parts, key=lambda p: p.tp.partition):
            if budget <= 0:
                return slices, True
            lg = p.log
            start = state.next_offsets.get(p.tp.partition, 0)
            if start < lg.log_start_offset:
                # Retention or DeleteRecords got there first: those records never reach the table.
                pt = t.partitions.setdefault(p.tp.partition, PartitionTranslation())
                pt.skipped += lg.log_start_offset - start
                log.warning("topic %s partition %d: offsets %d-%d were removed from the log before they reached "
                            "its Iceberg table", t.topic, p.tp.partition, start, lg.log_start_offset - 1)
                start = lg.log_start_offset
            lso = p.last_stable_offset
            if start >= lso:
                continue
            sl = PartitionSlice(p.tp.partition, start, start)
            position = start
            try:
                while position < lso and budget > 0:
                    info = lg.read(position, min(_READ_CHUNK, budget), max_offset=lso)
                    assert not isinstance(info.records, FileRegion)  # zero copy is off
                    data = bytes(info.records)
                    last = position
                    size = 0
                    for pos, h in rec.iter_batches(data):
                        last, size = h.next_offset, pos + h.size
                    if last <= position:
                        break
                    sl.chunks.append(data[:size])
                    budget -= size
                    position = last
                    await asyncio.sleep(0)  # the loop serves between reads
            except ApiError as e:  # the log moved under the read (truncated, deleted)
                log.warning("topic %s partition %d: read stopped at %d: %s", t.topic, p.tp.partition, position, e)
            sl.end = min(position, lso)
            if sl.end > sl.start:
                sl.aborted = lg.collect_aborted_transactions(sl.start, sl.end)
                slices.append(sl)
        return slices, budget <= 0


def _resumable(topic: str, parts: list[LedPartition], state: TableState) -> TableState:
    """Where translation goes on from, as a consumer's position would: the table's offsets,
    unless they belong to another topic of the same name (deleted and made again: its records
    are translated from its log start into the same table, the new topic id recorded in the
    snapshots from then on) or lie past the log end (the log lost records the table holds: an
    unclean leader election, a lost log dir; translation goes on from the log end, as a consumer
    whose offset is out of range resets to it)."""
    topic_id = str(parts[0].topic_id)
    offsets = dict(state.next_offsets)
    if state.topic_id is not None and state.topic_id != topic_id:
        log.warning("topic %s (id %s) is not the topic whose records its Iceberg table holds so far (id %s, deleted "
                    "and made again under this name): translating it from its log start into the same table",
                    topic, topic_id, state.topic_id, extra={"kind": f"iceberg-id-{topic}"})
        offsets = {}
    for p in parts:
        end = p.log.log_end_offset
        at = offsets.get(p.tp.partition, 0)
        if at > end:
            log.warning("topic %s partition %d: its Iceberg table's next offset %d is past the log end offset %d (the "
                        "log lost offsets %d-%d, which the table holds): translating from %d on", topic,
                        p.tp.partition, at, end, end, at - 1, end, extra={"kind": f"iceberg-end-{p.tp}"})
            offsets[p.tp.partition] = end
    return TableState(state.snapshot_id, offsets, topic_id)
