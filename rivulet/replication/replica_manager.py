"""ReplicaManager: appends to and reads from the partitions this node leads.

Appends carry an origin, as in Kafka: client produces get full idempotence checks,
coordinator appends (group offsets, transaction state, transaction markers) skip sequence
checks and may write control batches. read_committed fetches stop at the last stable offset
and carry the aborted transactions in range.

Produce and fetch requests that cannot be answered at once wait in two purgatories, as in
Kafka: a DelayedProduce (acks=all) until the high watermark passes the appended offsets,
and a DelayedFetch until enough bytes are readable (judged from log positions, without
reading them) or max wait passes. An append, a HW
advance, a deletion or a leadership change calls check_and_complete for that partition.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import uuid
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Iterable, Protocol

from rivulet.common.file_region import FileRegion
from rivulet.common.promise import Promise
from rivulet.common.time import SYSTEM_CLOCK, Clock
from rivulet.common.types import TV_EPOCH_BUMP, TopicPartition
from rivulet.delayed import DelayedOperation, DelayedOperationPurgatory, Timer
from rivulet.protocol import records as rec
from rivulet.protocol.accel import speedups
from rivulet.protocol.errors import NO_ERROR, ApiError, ErrorCode
from rivulet.replication.metadata_cache import MetadataCache, MetadataUpdate
from rivulet.replication.partition import (
    DEFAULT_REPLICA_LAG_TIME_MAX_MS,
    AlterPartitionManager,
    Partition,
    PartitionState,
)
from rivulet.replication.replica_selector import ReplicaView, select_read_replica
from rivulet.storage.config import LogConfig
from rivulet.storage.log import NOTHING_READ, Log, LogOffsetMetadata, LogState
from rivulet.storage.log_dir_failure import KafkaStorageError
from rivulet.storage.producer_state import AppendOrigin
from rivulet.storage.segment import segment_serial

log = logging.getLogger(__name__)

CONSUMER_REPLICA_ID = -1
# StopReplica's leader epochs that stop a replica whatever its epoch (Kafka's LeaderAndIsr).
EPOCH_DURING_DELETE = -2
NO_EPOCH = -1


class ReplicaLogs(Protocol):
    """Where a replica's log comes from in cluster mode: the topic's config decides how it is made."""

    def log_for_replica(self, tp: TopicPartition, topic_id: uuid.UUID) -> Log: ...

    def open_replica_logs(self, replicas: list[tuple[TopicPartition, uuid.UUID]]) -> None: ...

    def delete_replica_log(self, tp: TopicPartition) -> None: ...


@dataclass(frozen=True, slots=True)
class LeaderEndpoint:
    broker_id: int
    host: str
    port: int


class FollowerFetching(Protocol):
    """The replica fetchers: which partitions follow which leader (Kafka's ReplicaFetcherManager)."""

    def add_partitions(self, leader: LeaderEndpoint, partitions: list[Partition]) -> None: ...

    def remove_partitions(self, tps: Iterable[TopicPartition]) -> None: ...


@dataclass(slots=True)
class LeaderAndIsrPartition:
    """One partition of a LeaderAndIsr request, with its topic id."""

    tp: TopicPartition
    topic_id: uuid.UUID
    state: PartitionState


class TxnOperation(enum.Enum):
    """What a client's request version lets a leader do about a partition its transaction has
    not added yet (Kafka's TransactionSupportedOperation): check it with the coordinator, or
    have the coordinator add it (transaction.version 2)."""

    DEFAULT_ERROR = "default"  # check; the client knows INVALID_TXN_STATE, not TRANSACTION_ABORTABLE
    GENERIC_ERROR_SUPPORTED = "generic"  # check; TRANSACTION_ABORTABLE as it is (Produce v11, TxnOffsetCommit v4)
    ADD_PARTITION = "add"  # Produce v12, TxnOffsetCommit v5

    @classmethod
    def for_produce(cls, version: int) -> TxnOperation:
        """By the version alone, as Kafka: v12+ is a transaction.version 2 producer's."""
        if version >= 12:
            return cls.ADD_PARTITION
        return cls.GENERIC_ERROR_SUPPORTED if version >= 11 else cls.DEFAULT_ERROR

    @classmethod
    def for_txn_offset_commit(cls, version: int) -> TxnOperation:
        """By the version alone, as Kafka: v5+ is a transaction.version 2 producer's (below
        level 2 the coordinator refuses the add, UNSUPPORTED_VERSION)."""
        if version >= 5:
            return cls.ADD_PARTITION
        return cls.GENERIC_ERROR_SUPPORTED if version >= 4 else cls.DEFAULT_ERROR


def coordinator_answer(err: ErrorCode, operation: TxnOperation) -> ErrorCode:
    """A coordinator's refusal of a partition as the requesting leader answers it (Kafka's
    AddPartitionsToTxnManager): the producer expects INVALID_PRODUCER_EPOCH for a fenced epoch,
    and an old client INVALID_TXN_STATE for a partition outside the transaction."""
    if err == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if err == ErrorCode.TRANSACTION_ABORTABLE and operation is TxnOperation.DEFAULT_ERROR:
        return ErrorCode.INVALID_TXN_STATE
    return err


class AsyncTxnVerifier(Protocol):
    """KIP-890: may ``transactional_id``'s producer open a transaction on ``tp``? Its coordinator
    answers, on this broker or another (rivulet/transaction/remote_verifier.py)."""

    async def verify(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                     tp: TopicPartition) -> ErrorCode: ...

    async def add(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                  tp: TopicPartition) -> ErrorCode:
        """KIP-890 part 2: have the coordinator add ``tp`` to the transaction (Produce v12)."""
        ...


class LeadershipListener(Protocol):
    """Told which partitions this broker now leads and follows (the coordinators load and
    unload their internal partitions from it)."""

    def on_leadership_change(self, leaders: list[Partition], followers: list[Partition]) -> None: ...


# ---------------------------------------------------------------- produce

@dataclass(slots=True)
class ProduceResult:
    error: ErrorCode = ErrorCode.NONE
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    message: str | None = None
    required_offset: int = -1  # acks=all waits until the HW reaches this
    record_errors: list[tuple[int, str]] | None = None  # (index in batch, message), Produce v8+


class DelayedProduce(DelayedOperation):
    """acks=all: answer once every partition's HW covers what was appended to it."""

    def __init__(self, delay_ms: int, rm: ReplicaManager, results: dict[TopicPartition, ProduceResult],
                 future: asyncio.Future) -> None:
        super().__init__(delay_ms)
        self.rm = rm
        self.results = results
        self.future = future
        self.waiting = {tp for tp, r in results.items() if r.error == ErrorCode.NONE and r.required_offset >= 0}

    def try_complete(self) -> bool:
        for tp in list(self.waiting):
            p = self.rm.partitions.get(tp)
            if p is None or p.deleted:
                self.results[tp].error = ErrorCode.NOT_LEADER_OR_FOLLOWER
                self.waiting.discard(tp)
                continue
            done, error = p.check_enough_replicas_reach_offset(self.results[tp].required_offset)
            if done:
                self.results[tp].error = error
                self.waiting.discard(tp)
        if not self.waiting:
            return self.force_complete()
        return False

    def on_expiration(self) -> None:
        for tp in self.waiting:
            self.results[tp].error = ErrorCode.REQUEST_TIMED_OUT

    def on_complete(self) -> None:
        if not self.future.done():
            self.future.set_result(self.results)


# ---------------------------------------------------------------- fetch

@dataclass(slots=True)
class FetchRequestPartition:
    tp: TopicPartition
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    log_start_offset: int = -1
    last_fetched_epoch: int = -1  # KIP-320/595: the epoch of the follower's last fetched batch


@dataclass(slots=True)
class FetchResult:
    error: ErrorCode = ErrorCode.NONE
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes | memoryview | FileRegion | None = None
    # read_committed only: (producer id, first offset) of aborted transactions in range.
    aborted_transactions: list[tuple[int, int]] | None = None
    # Where the fetch offset lies in the log, from this read; a DelayedFetch measures from it.
    fetch_offset_metadata: LogOffsetMetadata | None = None
    # (epoch, end offset) when the follower's log diverges from ours: it truncates, then refetches.
    diverging_epoch: tuple[int, int] | None = None
    # KIP-392: the replica the consumer should fetch from instead (no records then).
    preferred_read_replica: int = -1


# A partition's record set at least this large is handed out as a FileRegion of its segment
# (on connections that send files); below it a pread costs less than the region. Whether the
# answer then goes out from the files is the socket layer's choice, by the whole answer's size
# (``file_sender.ZERO_COPY_MIN``): a Fetch of a thousand partitions of 100 KiB each is sent
# from the files as Kafka's transferTo would, not read into memory partition by partition.
REGION_MIN = 16 * 1024


# The C accelerator's walk of a consumer fetch (``read_from_local_log``): it answers the
# partitions with nothing to read itself and hands every other one to the Python read, in
# request order. None without the accelerator (or with RIVULET_NO_SPEEDUPS=1): the Python
# loop, the reference, reads them all.
_read_caught_up: Callable[[list[FetchRequestPartition], dict[TopicPartition, Partition],
                           dict[TopicPartition, FetchResult], bool, bool,
                           Callable[[FetchRequestPartition], FetchResult]], None] | None = None
# Its walk of a waiting consumer fetch's check (``DelayedFetch.try_complete``): the index of
# the next partition not caught up at its HW. None without the accelerator: the check looks at
# every partition, the reference.
_skip_caught_up: Callable[[list[FetchRequestPartition], dict[TopicPartition, Partition], int, bool], int] | None = None
_speedups = speedups()
if _speedups is not None:
    _speedups.setup_fetch_read(FetchResult, FetchRequestPartition, NO_ERROR, NOTHING_READ, TopicPartition, LogState)
    _read_caught_up = _speedups.read_caught_up
    _skip_caught_up = _speedups.skip_caught_up


@dataclass(slots=True)
class FetchParams:
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int = 0
    partitions: list[FetchRequestPartition] = field(default_factory=list)
    # Followers and consumers without client metadata (Fetch before v11) read from the leader
    # only; newer consumers may read a follower, up to its HW (KIP-392).
    fetch_only_leader: bool = True
    client_rack: str = ""  # a consumer's client.rack (Fetch v11+), for KIP-392's replica selector
    replica_epoch: int = -1  # a follower's broker epoch (Fetch v15+, KIP-903)
    # The answer goes out on a connection that can send from files (not TLS): large record
    # sets come as FileRegions of the segments, sent with sendfile as Kafka's transferTo.
    zero_copy: bool = False

    @property
    def is_from_follower(self) -> bool:
        return self.replica_id >= 0


def readable_bytes(fetch_offset: LogOffsetMetadata, end: LogOffsetMetadata, max_bytes: int) -> int | None:
    """Kafka's DelayedFetch decision for one partition, from offset positions alone: None when
    the fetch must be answered now (its offset is past ``end``, the HW, LSO or LEO it may read
    up to, after a truncation; or ``end`` has moved on to a later segment, which is always
    enough), else the bytes readable from it, at most ``max_bytes``."""
    if fetch_offset.message_offset > end.message_offset:
        return None
    if fetch_offset.message_offset == end.message_offset:
        # Compared first: right after a roll the end keeps its offset but not its segment.
        return 0
    if fetch_offset.on_older_segment(end):
        return None
    if fetch_offset.on_same_segment(end):
        return min(end.position_diff(fetch_offset), max_bytes)
    return 0


def _diverged(lg: Log, fp: FetchRequestPartition) -> bool:
    """Kafka's case H: the epoch a follower last fetched ends, in our log, before its fetch
    offset (or is unknown here), as a truncation while its Fetch waited makes it."""
    epoch, end = lg.end_offset_for_epoch(fp.last_fetched_epoch)
    return epoch < 0 or end < 0 or epoch < fp.last_fetched_epoch or end < fp.fetch_offset


class DelayedFetch(DelayedOperation):
    """Long-poll fetch: wait for min_bytes across all partitions, or max_wait_ms.

    Completion is decided from offset positions (``readable_bytes``): where each fetch offset
    was found by the first read against where the HW (consumers), the LSO (read_committed) or
    the LEO (followers) lies now. No record is read until the fetch completes, once.

    The answer is a ``Promise``: completed by an append, it is built and written on the
    append's stack, before the producer's own answer, as Kafka's request thread completes
    the fetch right after the append and its network thread sends the answer at once."""

    def __init__(self, params: FetchParams, rm: ReplicaManager, promise: Promise[dict[TopicPartition, FetchResult]],
                 fetch_offsets: dict[TopicPartition, LogOffsetMetadata]) -> None:
        super().__init__(params.max_wait_ms)
        self.params = params
        self.rm = rm
        self.promise = promise
        # Where each fetch offset lies, from the first read or looked up once the end moves past it.
        self.fetch_offsets = fetch_offsets
        # Segments numbered above this were rolled while the fetch waited.
        self.serial = segment_serial()

    def try_complete(self) -> bool:
        """Kafka's DelayedFetch.tryComplete: complete at once for a partition whose state calls
        for an answer (``_readable`` says which), else once the bytes readable across the
        partitions reach min_bytes (case G)."""
        accumulated = 0
        params = self.params
        fps = params.partitions
        n = len(fps)
        partitions = self.rm.partitions
        fetch_only_leader = params.fetch_only_leader
        # A consumer's partitions caught up at the HW (nearly all of a waiting Fetch of many)
        # are passed over in C: ``_readable`` would find nothing readable in each.
        skip = None if params.is_from_follower else _skip_caught_up
        i = 0
        while i < n:
            if skip is not None:
                i = skip(fps, partitions, i, fetch_only_leader)
                if i >= n:
                    break
            fp = fps[i]
            i += 1
            readable = self._readable(fp, partitions.get(fp.tp))
            if readable is None:
                return self.force_complete()
            accumulated += readable
        if accumulated >= params.min_bytes:
            return self.force_complete()
        return False

    def _readable(self, fp: FetchRequestPartition, p: Partition | None) -> int | None:
        """One partition's part of the check: None when the fetch must be answered now (the
        partition gone (Kafka's cases B, C), its log offline or closed (D), its leader or
        epoch changed (A, E), the fetch offset out of range or past where it may read (F), a
        follower's last fetched epoch diverged (H)), else the bytes readable from it."""
        params = self.params
        if p is None or p.deleted:
            return None  # the read reports the error
        if fp.current_leader_epoch >= 0 and fp.current_leader_epoch != p.leader_epoch:
            return None
        if params.fetch_only_leader and not p.is_leader:
            return None  # leadership moved: the read answers NOT_LEADER_OR_FOLLOWER
        lg = p.log
        state = lg.state
        offset = fp.fetch_offset
        if state.closed or state.offline:
            return None  # the read reports it
        if offset < state.log_start or offset > state.leo:
            return None  # out of range now: answer with the error
        from_follower = params.is_from_follower
        if from_follower:
            if fp.last_fetched_epoch >= 0 and _diverged(lg, fp):
                return None  # the read answers where to truncate to
            end_offset = state.leo
        elif params.isolation_level == 1:
            end_offset = p.last_stable_offset
            if end_offset < offset:
                return 0  # behind an open transaction: nothing readable yet
        else:
            end_offset = state.hw
        if offset == end_offset:
            # Caught up: nothing readable, and no position to look up; Kafka too goes straight
            # to case G on equal offsets.
            return 0
        try:
            end = lg.log_end_offset_metadata if from_follower else lg.offset_metadata(end_offset)
            start = self.fetch_offsets.get(fp.tp)
            if start is None or start.message_offset != offset:
                # Looked up now that the end moved past it. Its segment rolled since the fetch
                # began waiting: the offset was the log end on an older segment, which Kafka's
                # position of it (taken then) says (case F).
                if lg.segment_made_since(offset, self.serial):
                    return None
                start = self.fetch_offsets[fp.tp] = lg.offset_metadata(offset)
        except ApiError:
            return None  # e.g. the log was closed: the read reports it
        return readable_bytes(start, end, fp.max_bytes)

    def on_expiration(self) -> None:
        pass

    def on_complete(self) -> None:
        promise = self.promise
        results = self.rm.read_from_local_log(self.params)
        # Completed, it stays on its partitions' watch lists until the purge (Kafka's lazy
        # removal, after fetch.purgatory.purge.interval.requests operations): it lets go of its
        # request and answer meanwhile, or a caught-up consumer of 1,000 partitions would keep
        # hundreds of MB of them alive (about 0.2 MB a waiting Fetch).
        self.params, self.promise, self.fetch_offsets = _SPENT_PARAMS, _SPENT_PROMISE, {}
        promise.set_result(results)


# What a completed DelayedFetch holds instead of its request and its answer (see on_complete).
_SPENT_PARAMS = FetchParams(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=0)
_SPENT_PROMISE: Promise[dict[TopicPartition, FetchResult]] = Promise()
_SPENT_PROMISE.set_result({})


# ---------------------------------------------------------------- the manager

class ReplicaManager:
    def __init__(self, node_id: int, timer: Timer, *, produce_purge_interval: int = 1000,
                 fetch_purge_interval: int = 1000, clock: Clock = SYSTEM_CLOCK,
                 replica_logs: ReplicaLogs | None = None, alter_partition: AlterPartitionManager | None = None,
                 replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS,
                 metadata_cache: MetadataCache | None = None, replica_selector: str | None = None,
                 fetchers: Callable[[ReplicaManager], FollowerFetching] | None = None,
                 leadership: LeadershipListener | None = None, txn_verifier: AsyncTxnVerifier | None = None,
                 add_retry_backoff_ms: int = 20, add_retry_max_ms: int = 100) -> None:
        """Cluster mode gives ``replica_logs``, ``alter_partition``, ``metadata_cache`` (with
        the racks ``replica_selector``, KIP-392, picks a follower by) and ``fetchers``, which
        builds the replica fetchers on this manager, as Kafka's ReplicaManager makes its own.
        ``leadership`` is told what this node now leads and follows. KIP-890: a transactional
        batch that would open a transaction on a partition is appended only once the
        transaction coordinator has that partition: ``txn_verifier`` asks it, on whichever
        broker it runs (one path on one node and in a cluster); an answer of
        CONCURRENT_TRANSACTIONS is asked again every ``add_retry_backoff_ms`` for up to
        ``add_retry_max_ms`` (add.partitions.to.txn.retry.backoff.*, as Kafka's ReplicaManager)."""
        self.node_id = node_id
        self.clock = clock
        # Cluster mode: the controller's LeaderAndIsr decides what this node leads and follows.
        self.replica_logs = replica_logs
        self.alter_partition = alter_partition
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.controller_epoch = -1
        self.leadership = leadership
        self.replica_selector = replica_selector
        self.metadata_cache = metadata_cache
        self.partitions: dict[TopicPartition, Partition] = {}
        # Partitions whose log dir was offline at start-up: KAFKA_STORAGE_ERROR, not unknown.
        self.offline_partitions: set[TopicPartition] = set()
        self.timer = timer
        self.produce_purgatory = DelayedOperationPurgatory("Produce", timer, purge_interval=produce_purge_interval)
        self.fetch_purgatory = DelayedOperationPurgatory("Fetch", timer, purge_interval=fetch_purge_interval)
        self._flush_executor = None  # default executor; fsync never runs on the event loop
        self.txn_verifier = txn_verifier
        self.add_retry_backoff_ms = add_retry_backoff_ms
        self.add_retry_max_ms = add_retry_max_ms
        # Producer id -> done once the latest of its requests waiting here has appended.
        self._appending: dict[int, asyncio.Future] = {}
        self.fetchers: FollowerFetching | None = fetchers(self) if fetchers is not None else None

    # -------------------------------------------------------- partitions
    def on_high_watermark_advanced(self, tp: TopicPartition) -> None:
        """An ISR change moved a leader's HW: waiting produces and consumer fetches may complete."""
        self.fetch_purgatory.check_and_complete(tp)
        self.produce_purgatory.check_and_complete(tp)

    def new_partition(self, tp: TopicPartition, topic_id: uuid.UUID, lg: Log) -> Partition:
        """A partition this node leads alone (single-node mode, or a log opened before the
        controller spoke), not yet served (``add_partition``). It has this manager's clock, ISR
        channel and HW listener from the start, so a later LeaderAndIsr finds it ready for
        cluster mode. Safe on a worker thread."""
        return Partition(tp, topic_id, lg, self.node_id, clock=self.clock,
                         replica_lag_time_max_ms=self.replica_lag_time_max_ms,
                         alter_partition=self.alter_partition, listener=self)

    def add_partition(self, partition: Partition) -> None:
        self.partitions[partition.tp] = partition

    def remove_partition(self, tp: TopicPartition) -> Partition | None:
        p = self.partitions.pop(tp, None)
        if p is not None:
            p.mark_deleted()
            # Waiting fetches and produces learn at once that the partition is gone.
            self.fetch_purgatory.check_and_complete(tp)
            self.produce_purgatory.check_and_complete(tp)
        return p

    def get_partition_or_error(self, tp: TopicPartition) -> Partition:
        p = self.partitions.get(tp)
        if p is None and tp in self.offline_partitions:
            raise KafkaStorageError(f"the log directory of {tp.topic}-{tp.partition} is offline")
        if p is None or p.deleted:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if p.log.offline:
            raise KafkaStorageError(f"the log directory of {tp.topic}-{tp.partition} is offline")
        return p

    # -------------------------------------------------------- the controller's requests
    def become_leader_or_follower(
        self, controller_id: int, controller_epoch: int, states: list[LeaderAndIsrPartition],
        live_leaders: dict[int, LeaderEndpoint],
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """LeaderAndIsr: lead or follow each partition whose leader epoch is newer than ours.

        A stale controller epoch refuses the whole request; a partition whose epoch is not newer
        answers STALE_CONTROLLER_EPOCH (NONE when it repeats the state we have for the same
        topic id), one whose replicas leave out this node UNKNOWN_TOPIC_OR_PARTITION."""
        if controller_epoch < self.controller_epoch:
            log.warning("ignoring LeaderAndIsr from controller %d with epoch %d: the latest known epoch is %d",
                        controller_id, controller_epoch, self.controller_epoch)
            return ErrorCode.STALE_CONTROLLER_EPOCH, {s.tp: ErrorCode.STALE_CONTROLLER_EPOCH for s in states}
        self.controller_epoch = controller_epoch
        errors: dict[TopicPartition, ErrorCode] = {}
        to_lead: list[tuple[Partition, PartitionState]] = []
        to_follow: list[tuple[Partition, PartitionState]] = []
        for s in states:
            tp, state = s.tp, s.state
            errors[tp] = ErrorCode.NONE
            if tp in self.offline_partitions:
                errors[tp] = ErrorCode.KAFKA_STORAGE_ERROR
                continue
            p = self.partitions.get(tp)
            if p is not None and p.log.offline:
                errors[tp] = ErrorCode.KAFKA_STORAGE_ERROR
                continue
            current_epoch = p.leader_epoch if p is not None and p.controller_epoch >= 0 else NO_EPOCH
            if state.leader_epoch > current_epoch:
                if self.node_id not in state.replicas:
                    errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                try:
                    if p is None:
                        p = self._create_replica(tp, s.topic_id)
                except ApiError as e:
                    errors[tp] = e.code
                    continue
                p.maybe_set_topic_id(s.topic_id)
                (to_lead if state.leader == self.node_id else to_follow).append((p, state))
            elif state.leader_epoch < current_epoch:
                log.info("%s-%d: ignoring LeaderAndIsr with leader epoch %d, older than %d", tp.topic, tp.partition,
                         state.leader_epoch, current_epoch)
                errors[tp] = ErrorCode.STALE_CONTROLLER_EPOCH
            elif p is None or p.topic_id != s.topic_id:
                errors[tp] = ErrorCode.STALE_CONTROLLER_EPOCH
        led = self._make_leaders(to_lead)
        followed = self._make_followers(to_follow, live_leaders)
        if led or followed:
            if self.leadership is not None:
                self.leadership.on_leadership_change(led, followed)
        return ErrorCode.NONE, errors

    def replicas_to_create(self, states: list[LeaderAndIsrPartition]) -> list[tuple[TopicPartition, uuid.UUID]]:
        """The partitions of a LeaderAndIsr that would make this node a new replica: their logs
        can be opened off the loop first (hundreds of new logs take a second or more)."""
        if self.replica_logs is None:
            return []
        return [(s.tp, s.topic_id) for s in states if s.tp not in self.partitions
                and s.tp not in self.offline_partitions and self.node_id in s.state.replicas]

    def open_replica_logs(self, replicas: list[tuple[TopicPartition, uuid.UUID]]) -> None:
        """The file work of ``replicas_to_create``, safe on a worker thread as nothing serves
        these logs yet. A failure is left for ``become_leader_or_follower`` to answer."""
        assert self.replica_logs is not None
        self.replica_logs.open_replica_logs(replicas)

    def _create_replica(self, tp: TopicPartition, topic_id: uuid.UUID) -> Partition:
        if self.replica_logs is None:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        lg = self.replica_logs.log_for_replica(tp, topic_id)
        # Replicas given (and no leader yet) keep the single-node defaults away: the state comes next.
        p = Partition(tp, topic_id, lg, self.node_id, leader_epoch=NO_EPOCH, clock=self.clock,
                      replica_lag_time_max_ms=self.replica_lag_time_max_ms, alter_partition=self.alter_partition,
                      listener=self, replicas=[self.node_id])
        self.partitions[tp] = p
        return p

    def _make_leaders(self, items: list[tuple[Partition, PartitionState]]) -> list[Partition]:
        if not items:
            return []
        if self.fetchers is not None:
            self.fetchers.remove_partitions([p.tp for p, _ in items])
        out = []
        for p, state in items:
            p.make_leader(state)
            log.info("%s-%d: leader in epoch %d, ISR %s, LEO %d, HW %d", p.tp.topic, p.tp.partition,
                     p.leader_epoch, p.isr, p.log.log_end_offset, p.high_watermark)
            out.append(p)
            # Waiting operations see the new epoch (fetches naming the old one answer now).
            self.fetch_purgatory.check_and_complete(p.tp)
            self.produce_purgatory.check_and_complete(p.tp)
        return out

    def _make_followers(self, items: list[tuple[Partition, PartitionState]],
                        live_leaders: dict[int, LeaderEndpoint]) -> list[Partition]:
        if not items:
            return []
        out = []
        by_leader: dict[LeaderEndpoint, list[Partition]] = {}
        for p, state in items:
            p.make_follower(state)
            out.append(p)
            log.info("%s-%d: following %d in epoch %d", p.tp.topic, p.tp.partition, p.leader_id, p.leader_epoch)
            self.fetch_purgatory.check_and_complete(p.tp)
            self.produce_purgatory.check_and_complete(p.tp)
            leader = live_leaders.get(state.leader)
            if leader is not None:
                by_leader.setdefault(leader, []).append(p)
            else:
                log.warning("%s-%d: its leader %d is not among the live leaders the controller named (%s); "
                            "not fetching until it is", p.tp.topic, p.tp.partition, state.leader, sorted(live_leaders))
        if self.fetchers is not None:
            # Every changed follower starts over from its leader, truncating first (KIP-101).
            self.fetchers.remove_partitions([p.tp for p in out])
            for leader, parts in by_leader.items():
                self.fetchers.add_partitions(leader, parts)
        return out

    def fence_leaderships(self, quiet_ms: int | None = None) -> list[TopicPartition]:
        """This broker's ZooKeeper session expired: the controller has elected (or will elect)
        other leaders, so its led partitions stop leading until a LeaderAndIsr says otherwise.
        Waiting acks=all produces answer NOT_LEADER_OR_FOLLOWER at once (they could never be
        committed here), new ones too, and clients go and look for the new leaders.
        ``quiet_ms``: the expiry is only presumed (no contact with ZooKeeper for the session
        timeout): only partitions whose other ISR members stopped fetching that long ago
        stop, so that a ZooKeeper outage alone does not stop writes. Returns those fenced."""
        now = self.clock.milliseconds()
        fenced = [p for p in self.partitions.values()
                  if p.is_leader and not p.deleted and (quiet_ms is None or p.followers_quiet(now, quiet_ms))]
        for p in fenced:
            p.fence()
        for p in fenced:
            self.produce_purgatory.check_and_complete(p.tp)
            self.fetch_purgatory.check_and_complete(p.tp)
        return [p.tp for p in fenced]

    def unfence_leaderships(self) -> list[TopicPartition]:
        """The ZooKeeper session turned out alive: nobody else was elected, lead again."""
        resumed = [p for p in self.partitions.values() if p.fenced]
        for p in resumed:
            p.unfence()
        return [p.tp for p in resumed]

    def is_fenced(self, tp: TopicPartition) -> bool:
        p = self.partitions.get(tp)
        return p is not None and p.fenced

    def maybe_shrink_isrs(self) -> None:
        """Kafka's isr-expiration: each led partition drops followers that lag too long."""
        for p in list(self.partitions.values()):
            if p.is_leader and not p.deleted and not p.log.offline:
                p.maybe_shrink_isr()

    def maybe_update_metadata_cache(self, update: MetadataUpdate) -> ErrorCode:
        """UpdateMetadata (cluster mode): the controller's view of the cluster, refused from a
        controller of an older epoch."""
        if update.controller_epoch < self.controller_epoch:
            log.warning("ignoring UpdateMetadata from controller %d with epoch %d: the latest known epoch is %d",
                        update.controller_id, update.controller_epoch, self.controller_epoch)
            return ErrorCode.STALE_CONTROLLER_EPOCH
        assert self.metadata_cache is not None
        self.metadata_cache.update(update)
        self.controller_epoch = update.controller_epoch
        return ErrorCode.NONE

    def stop_replicas(
        self, controller_id: int, controller_epoch: int, partitions: dict[TopicPartition, tuple[int, bool]],
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """StopReplica: stop following (and with ``delete``, remove) each partition given with
        (leader epoch, delete). An older leader epoch than ours answers FENCED_LEADER_EPOCH."""
        if controller_epoch < self.controller_epoch:
            return ErrorCode.STALE_CONTROLLER_EPOCH, {tp: ErrorCode.STALE_CONTROLLER_EPOCH for tp in partitions}
        self.controller_epoch = controller_epoch
        errors: dict[TopicPartition, ErrorCode] = {}
        stopped: dict[TopicPartition, bool] = {}
        for tp, (leader_epoch, delete) in partitions.items():
            p = self.partitions.get(tp)
            if p is None:
                if tp in self.offline_partitions:
                    errors[tp] = ErrorCode.KAFKA_STORAGE_ERROR
                    continue
                stopped[tp] = delete  # a log left from before may still go
            elif p.log.offline:
                errors[tp] = ErrorCode.KAFKA_STORAGE_ERROR
                continue
            elif leader_epoch in (EPOCH_DURING_DELETE, NO_EPOCH) or leader_epoch >= p.leader_epoch:
                stopped[tp] = delete
            else:
                errors[tp] = ErrorCode.FENCED_LEADER_EPOCH
                continue
            errors[tp] = ErrorCode.NONE
        if self.fetchers is not None:
            self.fetchers.remove_partitions(list(stopped))
        resigned = []
        for tp, delete in stopped.items():
            if not delete:
                continue  # as Kafka: the replica keeps its state, only its fetcher stops
            p = self.remove_partition(tp)
            if p is not None and p.is_leader:
                resigned.append(p)
            if self.replica_logs is not None:
                try:
                    self.replica_logs.delete_replica_log(tp)
                except ApiError as e:
                    errors[tp] = e.code
        if resigned and self.leadership is not None:
            self.leadership.on_leadership_change([], resigned)
        return ErrorCode.NONE, errors

    # -------------------------------------------------------- produce
    def append_records(
        self,
        entries: dict[TopicPartition, memoryview | bytes | None],
        *,
        required_acks: int,
        timeout_ms: int,
        internal: bool = False,
        origin: AppendOrigin | None = None,
        transactional_id: str | None = None,
        in_turn: bool = False,
        transaction_version: int = 0,
        txn_operation: TxnOperation = TxnOperation.DEFAULT_ERROR,
    ) -> dict[TopicPartition, ProduceResult] | asyncio.Future:
        """Validate and append each partition's records; wait for acks=all and for fsyncs.

        ``txn_operation`` (``TxnOperation.for_produce``): what the client's version allows for a
        transactional batch that would open the transaction on a partition: the coordinator
        checks the partition is in it (KIP-890; refused as INVALID_TXN_STATE, or from v11 as
        TRANSACTION_ABORTABLE) or, for ``ADD_PARTITION`` (Produce v12 of a transaction.version 2
        producer), adds it first (KIP-890 part 2); on one node as in a cluster. Only a request
        with such a batch (or behind one of its producer's) waits for that, as a task; the rest
        append here, synchronously.

        ``transaction_version``: the markers' (WriteTxnMarkers v2), or 2 for client batches whose
        partitions the coordinator has just added (``_append_after``).

        ``origin`` defaults to COORDINATOR for ``internal`` appends, CLIENT otherwise;
        ``in_turn``: the producers' earlier requests here have appended (``_append_in_turn``)."""
        if origin is None:
            origin = AppendOrigin.COORDINATOR if internal else AppendOrigin.CLIENT
        # Only a transactional producer's request names its transactional id (the Produce handler
        # refuses transactional batches without one, as Kafka), so plain and idempotent produce
        # skip the look at their batches.
        if transactional_id is not None and self.txn_verifier is not None and not in_turn \
                and origin is AppendOrigin.CLIENT:
            ahead = self._appends_ahead(entries) if self._appending else None
            if ahead or self._needs_verification(entries):
                return self._append_in_turn(entries, ahead or set(), required_acks, timeout_ms, transactional_id,
                                            txn_operation)
        results: dict[TopicPartition, ProduceResult] = {}
        flushes: list[Partition] = []
        now = self.clock.milliseconds()
        for tp, data in entries.items():
            res = results[tp] = ProduceResult()
            p = None
            try:
                p = self.get_partition_or_error(tp)
                if origin == AppendOrigin.CLIENT:
                    p.stats.produce_requests += 1
                p.check_leader()
                if not data:
                    res.log_start_offset = p.log.log_start_offset
                    continue
                headers = self._headers_for_append(data, p.log.config.max_message_bytes, origin, p.log.config, now,
                                                   tp)
                p.check_min_isr(required_acks)
                # Request frames are bytearrays: the Log patches them in place, without a copy.
                append_time = p.log.config.log_append_time
                info = p.log.append_as_leader(data, headers, leader_epoch=p.leader_epoch, now_ms=now,
                                              log_append_time=append_time, origin=origin,
                                              transaction_version=transaction_version)
                res.base_offset = info.first_offset
                res.log_start_offset = p.log.log_start_offset
                res.required_offset = info.last_offset + 1
                if origin == AppendOrigin.CLIENT:
                    p.stats.bytes_in += info.valid_bytes
                    p.stats.messages_in += info.num_records
                if info.duplicate:
                    # Kafka answers a retried batch with its original offset and timestamp.
                    res.log_append_time = info.log_append_time
                    continue
                res.log_append_time = now if append_time else -1
                if info.flush_needed:
                    flushes.append(p)
                if p.maybe_increment_high_watermark():
                    self.fetch_purgatory.check_and_complete(tp)
                    self.produce_purgatory.check_and_complete(tp)
                else:
                    # Followers may long-poll on the LEO.
                    self.fetch_purgatory.check_and_complete(tp)
            except ApiError as e:
                if p is not None and origin == AppendOrigin.CLIENT:
                    p.stats.failed_produce_requests += 1
                res.error = e.code
                res.message = e.message
                res.record_errors = e.record_errors if isinstance(e, rec.RecordValidationError) else None
        if required_acks == 0:
            if flushes:
                asyncio.get_running_loop().create_task(self._flush(flushes, {}))
            return results
        if not flushes and (required_acks != -1 or self._all_replicated(results)):
            return results
        fut = asyncio.get_running_loop().create_future()
        if flushes:
            task = asyncio.get_running_loop().create_task(self._flush(flushes, results))
            task.add_done_callback(lambda _t: self._after_flush(results, required_acks, timeout_ms, fut))
        else:
            self._after_flush(results, required_acks, timeout_ms, fut)
        return fut

    async def _verify_partition(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                                tp: TopicPartition) -> ErrorCode:
        verifier = self.txn_verifier
        assert verifier is not None
        return await self._retrying(lambda: verifier.verify(transactional_id, producer_id, producer_epoch, tp))

    async def _add_partition(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                             tp: TopicPartition) -> ErrorCode:
        """KIP-890 part 2's implicit AddPartitionsToTxn, answered once the coordinator has logged it."""
        verifier = self.txn_verifier
        assert verifier is not None
        return await self._retrying(lambda: verifier.add(transactional_id, producer_id, producer_epoch, tp))

    async def _retrying(self, ask: Callable[[], Awaitable[ErrorCode]]) -> ErrorCode:
        """The coordinator's answer, asked again while it is CONCURRENT_TRANSACTIONS (the
        transaction's previous end still completing, as right after a transaction.version 2
        producer's EndTxn) for up to ``add_retry_max_ms``, as Kafka's ReplicaManager does before
        it answers the producer with a retriable error."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.add_retry_max_ms / 1000
        while True:
            err = await ask()
            if err != ErrorCode.CONCURRENT_TRANSACTIONS or loop.time() >= deadline:
                return err
            await asyncio.sleep(self.add_retry_backoff_ms / 1000)

    async def join_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                               tp: TopicPartition, operation: TxnOperation) -> ErrorCode:
        """KIP-890 for a partition this broker leads that a coordinator writes to (the group's
        offsets partition of a TxnOffsetCommit): unless the producer's transaction is open there
        already, its coordinator checks the partition is in the transaction (or, for
        ``ADD_PARTITION``, adds it). The coordinator's refusal as ``coordinator_answer`` gives it."""
        p = self.partitions.get(tp)
        if p is None or not p.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self._in_open_transaction(p, producer_id, producer_epoch):
            return ErrorCode.NONE
        if self.txn_verifier is None:
            err = ErrorCode.NONE
        elif operation is TxnOperation.ADD_PARTITION:
            err = await self._add_partition(transactional_id, producer_id, producer_epoch, tp)
        else:
            err = await self._verify_partition(transactional_id, producer_id, producer_epoch, tp)
        return coordinator_answer(err, operation)

    @staticmethod
    def _in_open_transaction(p: Partition, producer_id: int, producer_epoch: int) -> bool:
        entry = p.log.producer_state.last_entry(producer_id)
        return entry is not None and entry.current_txn_first_offset is not None \
            and entry.producer_epoch == producer_epoch

    @staticmethod
    def _verification_failure(tp: TopicPartition, err: ErrorCode,
                              operation: TxnOperation = TxnOperation.DEFAULT_ERROR) -> ApiError | None:
        """A produce's answer for the coordinator's refusal of ``tp`` (Kafka's
        AddPartitionsToTxnManager, then its ReplicaManager)."""
        if err == ErrorCode.NONE:
            return None
        answered = ErrorCode(err)
        err = coordinator_answer(err, operation)
        if err == ErrorCode.CONCURRENT_TRANSACTIONS and operation is TxnOperation.ADD_PARTITION:
            pass  # a transaction.version 2 producer retries it as it is, as Kafka 4.3.1 leaves it
        elif err in (ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                     ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NETWORK_EXCEPTION):
            err = ErrorCode.NOT_ENOUGH_REPLICAS  # retriable for a producer, as Kafka maps it
        # The coordinator's own answer, for the broker's log (the client sees only ``err``).
        return ApiError(err, f"transactional write to {tp} failed verification with the coordinator, "
                             f"which answered {answered.name}")

    def _needs_verification(self, entries: dict[TopicPartition, memoryview | bytes | None]
                            ) -> dict[TopicPartition, tuple[int, int]]:
        """The partitions whose transactional batch would open a transaction here: (producer id, epoch)."""
        out = {}
        for tp, data in entries.items():
            if not rec.first_batch_is_transactional(data):
                continue
            p = self.partitions.get(tp)
            if p is None or not p.is_leader:
                continue  # the append answers the error
            try:
                _pos, h = next(rec.iter_batches(data))
            except (StopIteration, ApiError):
                continue
            if not self._in_open_transaction(p, h.producer_id, h.producer_epoch):
                out[tp] = (h.producer_id, h.producer_epoch)
        return out

    @staticmethod
    def _producer_ids(entries: dict[TopicPartition, memoryview | bytes | None]) -> set[int]:
        """The producers (idempotent or transactional) whose batches ``entries`` hold."""
        out = set()
        for data in entries.values():
            if not data:
                continue
            try:
                _pos, h = next(rec.iter_batches(data))
            except (StopIteration, ApiError):
                continue
            if h.producer_id >= 0:
                out.add(h.producer_id)
        return out

    def _appends_ahead(self, entries: dict[TopicPartition, memoryview | bytes | None]) -> set[asyncio.Future]:
        """The turns of the earlier requests of ``entries``' producers still waiting here."""
        return {t for pid in self._producer_ids(entries) if (t := self._appending.get(pid)) is not None}

    def _append_in_turn(self, entries: dict[TopicPartition, memoryview | bytes | None],
                        ahead: set[asyncio.Future], required_acks: int, timeout_ms: int,
                        transactional_id: str | None, operation: TxnOperation) -> asyncio.Task:
        """Append after the producers' earlier requests here, and after the coordinator has
        vouched for the partitions whose batch would open a transaction (KIP-890's check or
        add). Kafka reads a connection's next request only once it has answered the last, so
        a producer's appends keep its requests' order; here requests run side by side, and a
        later one must not overtake one that waits for its coordinator (out of sequence)."""
        loop = asyncio.get_running_loop()
        turn = loop.create_future()
        pids = self._producer_ids(entries)
        for pid in pids:
            self._appending[pid] = turn
        return loop.create_task(self._append_after(entries, ahead, turn, pids, required_acks, timeout_ms,
                                                   transactional_id, operation))

    async def _append_after(self, entries: dict[TopicPartition, memoryview | bytes | None],
                            ahead: set[asyncio.Future], turn: asyncio.Future, pids: set[int],
                            required_acks: int, timeout_ms: int,
                            transactional_id: str | None, operation: TxnOperation
                            ) -> dict[TopicPartition, ProduceResult]:
        refused: dict[TopicPartition, ProduceResult] = {}
        add_partitions = operation is TxnOperation.ADD_PARTITION
        try:
            if ahead:
                await asyncio.wait(ahead)
            # Asked now: an earlier request may have opened the transaction here meanwhile.
            to_verify = self._needs_verification(entries)
            if to_verify:
                ask = self._add_partition if add_partitions else self._verify_partition
                tps = list(to_verify)
                answers = await asyncio.gather(*(ask(transactional_id, *to_verify[tp], tp) for tp in tps))
                for tp, err in zip(tps, answers):
                    failure = self._verification_failure(tp, err, operation)
                    if failure is not None:
                        refused[tp] = ProduceResult(error=failure.code, message=failure.message)
            rest = {tp: data for tp, data in entries.items() if tp not in refused}
            # Added for a transaction.version 2 producer: its first sequence on a partition that
            # keeps no state of it must be 0 (the producer state's check).
            result = self.append_records(rest, required_acks=required_acks, timeout_ms=timeout_ms,
                                         transactional_id=transactional_id, in_turn=True, txn_operation=operation,
                                         transaction_version=TV_EPOCH_BUMP if add_partitions and to_verify else 0)
        finally:
            # Appended (or refused): the producers' next requests may go, without waiting for acks.
            turn.set_result(None)
            for pid in pids:
                if self._appending.get(pid) is turn:
                    del self._appending[pid]
        if isinstance(result, asyncio.Future):
            result = await result
        return {**result, **refused}

    @staticmethod
    def _headers_for_append(data: memoryview | bytes, max_batch_size: int, origin: AppendOrigin,
                            config: LogConfig, now: int, tp: TopicPartition) -> list:
        if origin != AppendOrigin.CLIENT:
            # Coordinators write control batches (transaction markers) the client check refuses;
            # they build those batches themselves.
            batches = list(rec.iter_batches(data))
            if batches and batches[0][1].is_control:
                return [h for _, h in batches]
            return rec.validate_produce_records(data, max_batch_size=max_batch_size)
        bounds = None
        if not config.log_append_time:  # Kafka checks CreateTime topics only
            bounds = (now - config.message_timestamp_before_max_ms, now + config.message_timestamp_after_max_ms)
        return rec.validate_produce_records(data, max_batch_size=max_batch_size,
                                            require_keys=config.compact_enabled, timestamp_bounds=bounds,
                                            topic_partition=f"{tp.topic}-{tp.partition}")

    def append_txn_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: list[TopicPartition],
        *,
        timeout_ms: int,
        transaction_version: int = 0,
    ) -> dict[TopicPartition, ProduceResult] | asyncio.Future:
        """Write a COMMIT/ABORT marker to each partition (WriteTxnMarkers), acks=all;
        ``transaction_version`` is the transaction's client version (WriteTxnMarkers v2)."""
        kind = rec.ControlRecordType.COMMIT if commit else rec.ControlRecordType.ABORT
        now = self.clock.milliseconds()
        batch = rec.encode_control_batch(kind, producer_id=producer_id, producer_epoch=producer_epoch,
                                         coordinator_epoch=coordinator_epoch, timestamp=now)
        entries = {tp: bytearray(batch) for tp in partitions}
        return self.append_records(entries, required_acks=-1, timeout_ms=timeout_ms,
                                   origin=AppendOrigin.COORDINATOR, transaction_version=transaction_version)

    def _all_replicated(self, results: dict[TopicPartition, ProduceResult]) -> bool:
        for tp, r in results.items():
            if r.error == ErrorCode.NONE and r.required_offset >= 0:
                p = self.partitions.get(tp)
                if p is None or p.high_watermark < r.required_offset \
                        or len(p.isr) < p.effective_min_isr:
                    return False  # the DelayedProduce answers it, with its error
        return True

    def _after_flush(self, results: dict[TopicPartition, ProduceResult], required_acks: int, timeout_ms: int,
                     fut: asyncio.Future) -> None:
        if required_acks != -1 or self._all_replicated(results):
            if not fut.done():
                fut.set_result(results)
            return
        op = DelayedProduce(timeout_ms, self, results, fut)
        self.produce_purgatory.try_complete_else_watch(op, [tp for tp in op.waiting])

    async def _flush(self, partitions: list[Partition], results: dict[TopicPartition, ProduceResult]) -> None:
        loop = asyncio.get_running_loop()
        for p in partitions:
            try:
                await loop.run_in_executor(self._flush_executor, p.log.flush)
            except ApiError as e:  # the log dir went offline: the append is not acknowledged
                res = results.get(p.tp)
                if res is not None:
                    res.error, res.message = e.code, e.message
            except Exception:  # a failed fsync must not lose the response path
                log.exception("flush of %s failed", p.tp)

    # -------------------------------------------------------- fetch
    def fetch_messages(self, params: FetchParams
                       ) -> dict[TopicPartition, FetchResult] | Promise[dict[TopicPartition, FetchResult]]:
        """The results now, or a Promise of them that the DelayedFetch sets when it completes."""
        results = self.read_from_local_log(params)
        if params.max_wait_ms <= 0 or not params.partitions:
            return results
        total = 0
        for r in results.values():
            # Kafka answers at once an error, a diverging epoch or a preferred read replica.
            if r.error != NO_ERROR or r.diverging_epoch is not None or r.preferred_read_replica >= 0:
                return results
            if r.records:
                total += len(r.records)
        if total >= params.min_bytes:
            return results
        promise: Promise[dict[TopicPartition, FetchResult]] = Promise()
        fetch_offsets = {tp: r.fetch_offset_metadata for tp, r in results.items()
                         if r.fetch_offset_metadata is not None}
        op = DelayedFetch(params, self, promise, fetch_offsets)
        # Its check only reads offsets: no event can make it complete between check and watch.
        self.fetch_purgatory.try_complete_else_watch(op, [fp.tp for fp in params.partitions], recheck=False)
        return promise

    def read_from_local_log(self, params: FetchParams) -> dict[TopicPartition, FetchResult]:
        results: dict[TopicPartition, FetchResult] = {}
        remaining = params.max_bytes
        min_one = True
        hw_moved: list[TopicPartition] = []
        # The same for every partition: a fetch can name thousands.
        partitions = self.partitions
        from_follower = params.is_from_follower
        read_committed = params.isolation_level == 1 and not from_follower
        fetch_only_leader = params.fetch_only_leader
        zero_copy_min = REGION_MIN if params.zero_copy else 0

        def read(fp: FetchRequestPartition) -> FetchResult:
            """One partition's read, in request order (``remaining`` and ``min_one`` carry over)."""
            nonlocal remaining, min_one
            tp = fp.tp
            p = partitions.get(tp)
            if p is None or p.deleted:
                return FetchResult(ErrorCode.KAFKA_STORAGE_ERROR if p is None and tp in self.offline_partitions
                                   else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            lg = p.log
            hw, lso = p.watermarks()
            res = FetchResult(NO_ERROR, hw, lso, lg.log_start_offset)
            try:
                if fetch_only_leader:
                    p.check_leader(fp.current_leader_epoch)
                else:
                    p.check_leader_epoch(fp.current_leader_epoch)
                if from_follower:
                    diverging = self._diverging_epoch(p, fp)
                    if diverging is not None:
                        # The follower truncates to it before fetching again; its LEO is not known.
                        res.diverging_epoch = diverging
                        res.records = b""
                        return res
                    if p.update_follower_fetch(params.replica_id, fp.fetch_offset, fp.log_start_offset,
                                               params.replica_epoch):
                        hw_moved.append(fp.tp)
                    res.high_watermark, res.last_stable_offset = p.watermarks()
                elif params.client_rack and self.replica_selector is not None and p.is_leader:
                    preferred = self._preferred_read_replica(p, fp.fetch_offset, params.client_rack)
                    if preferred != self.node_id:
                        res.preferred_read_replica = preferred
                        res.records = b""
                        return res
                max_offset = lg.log_end_offset if from_follower else (
                    res.last_stable_offset if read_committed else res.high_watermark)
                limit = min(fp.max_bytes, remaining)
                info = lg.read(fp.fetch_offset, limit, max_offset=max_offset, min_one_batch=min_one,
                               zero_copy_min=zero_copy_min)
                res.fetch_offset_metadata = info.fetch_offset_metadata
                data = info.records
                if data:
                    res.records = data
                    remaining = max(0, remaining - len(data))
                    min_one = False
                else:
                    res.records = b""
                if read_committed:
                    # Up to the LSO (nearly always none), then only those the records returned
                    # reach: the same as collecting up to the offset after them, whose batches
                    # are walked only when something was aborted.
                    aborted = lg.collect_aborted_transactions(fp.fetch_offset, max_offset) if data else []
                    if aborted:
                        end = _next_offset_after(data)
                        aborted = [a for a in aborted if a[1] < end]
                    res.aborted_transactions = aborted
            except ApiError as e:
                res.error = e.code
            return res

        if _read_caught_up is not None and not from_follower and not (
                params.client_rack and self.replica_selector is not None):
            # A consumer's caught-up partitions (most of a full fetch of many) are answered in C;
            # the others go to ``read`` in their turn, so the results are those of the loop below.
            _read_caught_up(params.partitions, partitions, results, fetch_only_leader, read_committed, read)
        else:
            for fp in params.partitions:
                results[fp.tp] = read(fp)
        for tp in hw_moved:
            # A follower's fetch moved the HW: acks=all produces and consumers' fetches may complete.
            self.on_high_watermark_advanced(tp)
        return results

    def _preferred_read_replica(self, p: Partition, fetch_offset: int, client_rack: str) -> int:
        cache = self.metadata_cache
        if cache is None:
            return self.node_id

        def rack(broker_id: int) -> str | None:
            b = cache.alive_broker(broker_id)
            return b.rack if b is not None else None

        leader = ReplicaView(self.node_id, rack(self.node_id), p.log.log_end_offset, self.clock.milliseconds())
        candidates = [ReplicaView(fs.broker_id, rack(fs.broker_id), fs.log_end_offset, fs.last_caught_up_time_ms)
                      for fs in p.followers.values()
                      if fs.log_start_offset <= fetch_offset <= fs.log_end_offset and cache.alive_broker(fs.broker_id)]
        return select_read_replica(self.replica_selector, client_rack, leader, candidates)

    @staticmethod
    def _diverging_epoch(p: Partition, fp: FetchRequestPartition) -> tuple[int, int] | None:
        """KIP-595's check of a follower's fetch: where its last fetched epoch ends in our log
        when that is before its fetch offset (or the epoch is unknown here), else None."""
        if fp.last_fetched_epoch < 0:
            return None
        epoch, end = p.log.end_offset_for_epoch(fp.last_fetched_epoch)
        if epoch < 0 or end < 0:
            raise ApiError(ErrorCode.OFFSET_OUT_OF_RANGE,
                           f"could not determine the end offset of epoch {fp.last_fetched_epoch}")
        if fp.fetch_offset < p.log.log_start_offset:
            raise ApiError(ErrorCode.OFFSET_OUT_OF_RANGE)
        if epoch < fp.last_fetched_epoch or end < fp.fetch_offset:
            return epoch, end
        return None

    # -------------------------------------------------------- lifecycle
    def shutdown(self) -> None:
        self.produce_purgatory.shutdown()
        self.fetch_purgatory.shutdown()


def _next_offset_after(data: bytes | memoryview | FileRegion) -> int:
    """The offset following the last whole batch of a fetch's records."""
    if isinstance(data, FileRegion):
        return data.next_offset
    last = None
    for _pos, h in rec.iter_batches(data):
        last = h
    return last.next_offset if last is not None else 0
