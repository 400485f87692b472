"""TransactionStateManager: the transaction cache and its durable copy in ``__transaction_state``.

Kafka's design on one asyncio loop: every change to a transaction is a record appended to
the transactional id's partition (acks=all); the cached metadata changes only once the
append is acknowledged. On start-up each partition is replayed into the cache; requests
for ids on a partition still loading get COORDINATOR_LOAD_IN_PROGRESS. Transactions found
in PrepareCommit/PrepareAbort are handed back for their markers to be (re)written, and
Ongoing ones are left to the timeout, so a restart finishes every transaction in flight.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Callable, Iterable


from rivulet.common.cluster import ConfigValues
from rivulet.common.regex import InvalidRegex, compile_re2
from rivulet.common.time import SYSTEM_CLOCK, Clock
from rivulet.common.types import TopicPartition
from rivulet.protocol import records as rec
from rivulet.protocol.errors import ErrorCode
from rivulet.replication.internal_log import coordinator_append_error, replay_log
from rivulet.replication.replica_manager import ProduceResult, ReplicaManager
from rivulet.transaction import txn_log
from rivulet.transaction.metadata import TransactionMetadata, TxnState, TxnTransitMetadata
from rivulet.transaction.txn_log import TRANSACTION_STATE_TOPIC_NAME

log = logging.getLogger(__name__)

ErrorCallback = Callable[[ErrorCode], None]
PendingCompletion = Callable[[int, bool, TransactionMetadata, TxnTransitMetadata], None]


@dataclass(slots=True)
class TxnPartitionCache:
    coordinator_epoch: int
    metadata: dict[str, TransactionMetadata] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CoordinatorEpochAndTxnMetadata:
    coordinator_epoch: int
    metadata: TransactionMetadata


class TransactionStateManager:
    def __init__(self, config: ConfigValues, replica_manager: ReplicaManager, transaction_version: Callable[[], int],
                 clock: Clock = SYSTEM_CLOCK) -> None:
        """``transaction_version``: the finalized transaction.version, which picks the version
        of the values written (Kafka's transactionVersionLevel)."""
        cfg = config
        self.replica_manager = replica_manager
        self.transaction_version = transaction_version
        self.transactional_id_expiration_ms: int = cfg["transactional.id.expiration.ms"]
        self.max_timeout_ms: int = cfg["transaction.max.timeout.ms"]
        self.load_buffer_size: int = cfg["transaction.state.log.load.buffer.size"]
        self.clock = clock
        self.num_partitions = 0
        self.cache: dict[int, TxnPartitionCache] = {}
        self.loading: set[int] = set()
        self.shutting_down = False

    def startup(self, num_partitions: int) -> None:
        """The partition count of __transaction_state, which ids map to (Kafka's startup)."""
        self.num_partitions = num_partitions

    def add_loading(self, partitions: Iterable[int]) -> None:
        """Partitions about to load: their ids answer COORDINATOR_LOAD_IN_PROGRESS until then
        (Kafka's addLoadingPartition)."""
        self.loading.update(partitions)

    def partition_for(self, transactional_id: str) -> int:
        return txn_log.partition_for(transactional_id, self.num_partitions)

    def validate_transaction_timeout_ms(self, timeout_ms: int) -> bool:
        return 0 < timeout_ms <= self.max_timeout_ms

    # -- the cache -----------------------------------------------------------------------------

    def get_transaction_state(
        self, transactional_id: str, created: TransactionMetadata | None = None
    ) -> tuple[ErrorCode, CoordinatorEpochAndTxnMetadata | None]:
        """(NONE, entry or None) when this node owns the id's partition; else the error."""
        if self.num_partitions <= 0:
            return ErrorCode.NOT_COORDINATOR, None
        p = self.partition_for(transactional_id)
        if p in self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, None
        entry = self.cache.get(p)
        if entry is None:
            return ErrorCode.NOT_COORDINATOR, None
        md = entry.metadata.get(transactional_id)
        if md is None and created is not None:
            md = entry.metadata[transactional_id] = created
        return ErrorCode.NONE, (CoordinatorEpochAndTxnMetadata(entry.coordinator_epoch, md) if md else None)

    def put_transaction_state_if_not_exists(
        self, md: TransactionMetadata
    ) -> tuple[ErrorCode, CoordinatorEpochAndTxnMetadata | None]:
        err, found = self.get_transaction_state(md.transactional_id, md)
        if err == ErrorCode.NONE and found is None:
            return ErrorCode.UNKNOWN_SERVER_ERROR, None
        return err, found

    def all_transactions(self) -> list[TransactionMetadata]:
        return [md for p, e in self.cache.items() if p not in self.loading for md in e.metadata.values()]

    # -- appends to the log ----------------------------------------------------------------------

    def append_transaction_to_log(
        self,
        transactional_id: str,
        coordinator_epoch: int,
        new_metadata: TxnTransitMetadata,
        callback: ErrorCallback,
        retry_on_error: Callable[[ErrorCode], bool] = lambda _e: False,
    ) -> None:
        """Write ``new_metadata``; on success complete the pending transition, then call back."""
        record = rec.Record(0, self.clock.milliseconds(), txn_log.key_to_bytes(transactional_id),
                            txn_log.value_to_bytes(new_metadata, txn_log.value_version_for(self.transaction_version())), [])
        tp = TopicPartition(TRANSACTION_STATE_TOPIC_NAME, self.partition_for(transactional_id))
        log.debug("appending %s for %s", new_metadata, transactional_id)

        def on_result(results: dict[TopicPartition, ProduceResult]) -> None:
            err = ErrorCode(results[tp].error)
            if err != ErrorCode.NONE:
                log.debug("appending %s for %s to %s failed: %s", new_metadata, transactional_id, tp, err.name)
                err = coordinator_append_error(err)
            self._after_append(transactional_id, coordinator_epoch, new_metadata, err, callback, retry_on_error)

        self._append(tp, rec.encode_batch([record]), new_metadata.txn_timeout_ms, on_result)

    def _append(self, tp: TopicPartition, batch: bytes, timeout_ms: int,
                on_result: Callable[[dict[TopicPartition, ProduceResult]], None]) -> None:
        try:
            result = self.replica_manager.append_records(
                {tp: bytearray(batch)}, required_acks=-1, timeout_ms=timeout_ms, internal=True)
        except Exception:
            log.exception("append to %s failed", tp)
            result = {tp: ProduceResult(error=ErrorCode.KAFKA_STORAGE_ERROR)}
        if isinstance(result, asyncio.Future):
            def done(f: asyncio.Future) -> None:
                if f.cancelled() or f.exception() is not None:
                    on_result({tp: ProduceResult(error=ErrorCode.KAFKA_STORAGE_ERROR)})
                else:
                    on_result(f.result())
            result.add_done_callback(done)
        else:
            on_result(result)

    def _after_append(self, transactional_id: str, coordinator_epoch: int, new_metadata: TxnTransitMetadata,
                      err: ErrorCode, callback: ErrorCallback, retry_on_error: Callable[[ErrorCode], bool]) -> None:
        if err == ErrorCode.NONE:
            state_err, found = self.get_transaction_state(transactional_id)
            if state_err != ErrorCode.NONE:
                log.info("cached metadata of %s is unavailable (%s); not completing transition to %s",
                         transactional_id, state_err.name, new_metadata)
                err = state_err
            elif found is None:
                err = ErrorCode.NOT_COORDINATOR  # the partition moved away meanwhile
            elif found.coordinator_epoch != coordinator_epoch:
                err = ErrorCode.NOT_COORDINATOR
            else:
                found.metadata.complete_transition_to(new_metadata)
        else:
            state_err, found = self.get_transaction_state(transactional_id)
            if state_err == ErrorCode.NONE and found is not None and found.coordinator_epoch == coordinator_epoch:
                if not retry_on_error(err):
                    # No transition happened: let the next request try again.
                    found.metadata.pending_state = None
        callback(err)

    # -- loading -----------------------------------------------------------------------------------

    async def load_partition(self, partition: int, coordinator_epoch: int, on_pending: PendingCompletion) -> None:
        """Replay ``__transaction_state-<partition>`` into the cache, yielding between chunks."""
        tp = TopicPartition(TRANSACTION_STATE_TOPIC_NAME, partition)
        self.loading.add(partition)
        try:
            loaded = await self._read_partition(tp)
            if self.shutting_down:
                return
            entry = TxnPartitionCache(coordinator_epoch, loaded)
            self.cache[partition] = entry
            pending: list[tuple[bool, TransactionMetadata, TxnTransitMetadata]] = []
            now = self.clock.milliseconds()
            for md in loaded.values():
                if md.state == TxnState.PREPARE_ABORT:
                    pending.append((False, md, md.prepare_complete(now)))
                elif md.state == TxnState.PREPARE_COMMIT:
                    pending.append((True, md, md.prepare_complete(now)))
        finally:
            self.loading.discard(partition)
        if loaded:
            log.info("loaded %d transactional id(s) from %s", len(loaded), tp)
        # Markers of decided transactions go out only once the partition has left loading,
        # so their final write is not refused with COORDINATOR_LOAD_IN_PROGRESS.
        for commit, md, transit in pending:
            on_pending(coordinator_epoch, commit, md, transit)

    async def _read_partition(self, tp: TopicPartition) -> dict[str, TransactionMetadata]:
        p = self.replica_manager.partitions.get(tp)
        loaded: dict[str, TransactionMetadata] = {}
        if p is not None:
            await replay_log(p.log, lambda r: self._load_record(r, loaded), buffer_size=self.load_buffer_size,
                             stopped=lambda: self.shutting_down)
        return loaded

    @staticmethod
    def _load_record(r: rec.Record, loaded: dict[str, TransactionMetadata]) -> None:
        if r.key is None:
            return
        try:
            key = txn_log.read_key(r.key)
        except Exception:
            log.warning("skipping undecodable key at offset %d of %s", r.offset, TRANSACTION_STATE_TOPIC_NAME)
            return
        if isinstance(key, txn_log.UnknownKey):
            return
        md = txn_log.read_value(key, r.value)
        if md is None:
            loaded.pop(key, None)
        else:
            loaded[key] = md

    def remove_partition(self, partition: int) -> None:
        self.cache.pop(partition, None)
        self.loading.discard(partition)

    # -- timeouts and expiration -------------------------------------------------------------------

    def timed_out_transactions(self) -> list[tuple[str, int, int]]:
        """(transactional id, producer id, epoch) of Ongoing transactions past their timeout."""
        now = self.clock.milliseconds()
        out = []
        for md in self.all_transactions():
            if md.pending_transition_in_progress:
                continue
            if md.state == TxnState.ONGOING and md.txn_start_timestamp + md.txn_timeout_ms < now:
                out.append((md.transactional_id, md.producer_id, md.producer_epoch))
        return out

    def remove_expired_transactional_ids(self) -> None:
        """transactional.id.expiration.ms: tombstone ids idle in Empty/Complete* that long."""
        now = self.clock.milliseconds()
        for partition, entry in list(self.cache.items()):
            if partition in self.loading:
                continue
            expired: list[tuple[TransactionMetadata, TxnTransitMetadata]] = []
            for md in entry.metadata.values():
                if md.pending_transition_in_progress or not md.state.is_expiration_allowed:
                    continue
                if md.txn_last_update_timestamp <= now - self.transactional_id_expiration_ms:
                    expired.append((md, md.prepare_dead()))
            if expired:
                self._write_tombstones(partition, entry.coordinator_epoch, expired)

    def _write_tombstones(self, partition: int, coordinator_epoch: int,
                          expired: list[tuple[TransactionMetadata, TxnTransitMetadata]]) -> None:
        tp = TopicPartition(TRANSACTION_STATE_TOPIC_NAME, partition)
        now = self.clock.milliseconds()
        records = [rec.Record(0, now, txn_log.key_to_bytes(md.transactional_id), None, []) for md, _ in expired]

        def on_result(results: dict[TopicPartition, ProduceResult]) -> None:
            ok = results[tp].error == ErrorCode.NONE
            entry = self.cache.get(partition)
            for md, transit in expired:
                if entry is None or entry.coordinator_epoch != coordinator_epoch:
                    return
                current = entry.metadata.get(md.transactional_id)
                if ok and current is md and md.pending_state == TxnState.DEAD and \
                        md.producer_epoch == transit.producer_epoch:
                    del entry.metadata[md.transactional_id]
                    log.debug("removed expired transactional id %s", md.transactional_id)
                else:
                    md.pending_state = None

        self._append(tp, rec.encode_batch(records), 30_000, on_result)

    # -- listing -------------------------------------------------------------------------------------

    def list_transaction_states(self, producer_ids: set[int], states: set[str], duration_ms: int = -1,
                                id_pattern: str | None = None) -> tuple[ErrorCode, list[str], list[TransactionMetadata]]:
        """ListTransactions: (error, unknown state filters, matching transactions). ``id_pattern``
        (v2, KIP-1152) must match a whole transactional id, with RE2's syntax as Kafka's RE2/J."""
        if self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, [], []
        pattern = None
        if id_pattern:
            try:
                pattern = compile_re2(id_pattern)
            except InvalidRegex:
                return ErrorCode.INVALID_REGULAR_EXPRESSION, [], []
        unknown = [s for s in states if TxnState.from_name(s) is None]
        wanted = {TxnState.from_name(s) for s in states} - {None}
        now = self.clock.milliseconds()
        out = []
        for md in self.all_transactions():
            if md.state == TxnState.DEAD:
                continue  # transient: being expired
            if producer_ids and md.producer_id not in producer_ids:
                continue
            if states and md.state not in wanted:
                continue
            if duration_ms >= 0 and now - md.txn_start_timestamp <= duration_ms:
                continue
            if pattern is not None and pattern.fullmatch(md.transactional_id) is None:
                continue
            out.append(md)
        return ErrorCode.NONE, unknown, out

    def shutdown(self) -> None:
        self.shutting_down = True
        self.cache.clear()
        self.loading.clear()
