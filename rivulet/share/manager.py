"""``SharePartitionManager``: the leader's share partitions, share sessions and ShareFetch long polls.

As Kafka's SharePartitionManager: one ``SharePartition`` per (share group, topic-partition),
made on the first ShareFetch for it (its start offset from the persister, else from
``share.auto.offset.reset``); one share session per (group, member id), whose epoch orders
the member's ShareFetch and ShareAcknowledge requests. A ShareFetch that acquires nothing
waits as a ``DelayedShareFetch`` in the replica manager's fetch purgatory, watched under its
partitions (so a moving HW, a new leader or a deleted partition wakes it, as they wake a
Fetch) and under each share partition's key (released or expired records wake it).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from rivulet.common.time import Clock
from rivulet.common.types import TopicPartition
from rivulet.delayed import DelayedOperation, DelayedOperationPurgatory, Timer
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.protocol.fetch_session import FINAL_EPOCH, INITIAL_EPOCH, next_epoch  # share sessions count the same way
from rivulet.protocol.records import BatchHeader, aborted_batches, cut_batch, iter_batches, join_batches
from rivulet.replication.partition import Partition
from rivulet.replication.replica_manager import FetchParams, FetchRequestPartition, ReplicaManager, readable_bytes

from .partition import (
    AcknowledgementBatch,
    AcknowledgeType,
    AcquiredRecords,
    SharePartition,
    SharePartitionSnapshot,
    merge_acquired,
)
from .persister import UNINITIALIZED_START_OFFSET, InMemorySharePersister, SharePartitionKey, SharePersister
from .reset import initial_start_offset

__all__ = [
    "INITIAL_EPOCH",
    "FINAL_EPOCH",
    "ShareFetchRequestData",
    "SharePartitionManager",
    "SharePartitionResult",
    "ShareGroupSettings",
]

log = logging.getLogger(__name__)

# A share fetch's first log read; each further one (while more can be acquired) doubles.
_FIRST_READ_BYTES = 64 * 1024


class ShareGroupSettings(Protocol):
    """A share group's configs in force (the coordinator's ``GroupConfig`` has these names)."""

    @property
    def share_record_lock_duration_ms(self) -> int: ...
    @property
    def share_delivery_count_limit(self) -> int: ...
    @property
    def share_partition_max_record_locks(self) -> int: ...
    @property
    def share_auto_offset_reset(self) -> str: ...
    @property
    def share_isolation_level(self) -> str: ...
    @property
    def share_renew_acknowledge_enable(self) -> bool: ...


@dataclass(slots=True)
class SharePartitionResult:
    """One partition's part of a ShareFetch or ShareAcknowledge answer."""

    error: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    acknowledge_error: ErrorCode = ErrorCode.NONE
    acknowledge_error_message: str | None = None
    records: bytes | memoryview = b""
    acquired: list[AcquiredRecords] = field(default_factory=list)
    # The persister write of the acknowledgements: the answer waits for it, and its failure
    # becomes ``acknowledge_error`` (Kafka answers an acknowledgement once its state is written).
    persisted: Awaitable[None] | None = field(default=None, compare=False, repr=False)


@dataclass(slots=True)
class ShareFetchRequestData:
    group_id: str
    member_id: str
    partitions: list[TopicPartition]  # to fetch from, in the request's order
    max_wait_ms: int
    max_bytes: int
    max_records: int
    record_limit: bool = False
    min_bytes: int = 1


@dataclass(slots=True)
class _Session:
    epoch: int  # the next epoch the member must send
    owner: Hashable  # the client connection that opened it
    partitions: dict[TopicPartition, uuid.UUID] = field(default_factory=dict)  # in the order added
    waiting: set[DelayedShareFetch] = field(default_factory=set)  # the member's long polls


class DelayedShareFetch(DelayedOperation):
    """A ShareFetch waiting for records it can acquire (``min_bytes`` of them), or for ``max_wait_ms``."""

    def __init__(self, manager: SharePartitionManager, request: ShareFetchRequestData,
                 future: asyncio.Future, acked: dict[TopicPartition, SharePartitionResult]) -> None:
        super().__init__(request.max_wait_ms)
        self.manager = manager
        self.request = request
        self.future = future
        self.acked = acked
        self.abandoned = False

    def abandon(self) -> None:
        """Its member's session ended (the connection closed): answer without acquiring, so
        the records the session's end releases are not taken again by nobody."""
        self.abandoned = True
        self.force_complete()

    def try_complete(self) -> bool:
        if self.manager.could_acquire(self.request):
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.manager.fetch_done(self)
        if self.future.done():
            return
        try:
            result = self.manager.acquire_now(self.request, self.acked, acquire=not self.abandoned)
        except Exception as e:  # answered as the request's failure, never left waiting
            self.future.set_exception(e)
        else:
            self.future.set_result(result)

    def on_expiration(self) -> None:
        pass


class SharePartitionManager:
    def __init__(self, replica_manager: ReplicaManager, timer: Timer, clock: Clock,
                 settings: Callable[[str], ShareGroupSettings], persister: SharePersister | None = None,
                 *, max_sessions: int = 2000, topic_id: Callable[[str], uuid.UUID | None] | None = None,
                 reread_settings: Callable[[str], Awaitable[None]] | None = None) -> None:
        """``reread_settings``: re-read a group's configs from where they are stored, before a
        share partition without state takes its start from ``share.auto.offset.reset``."""
        self.replica_manager = replica_manager
        self.timer = timer
        self.clock = clock
        self.settings = settings
        self._reread_settings = reread_settings
        self.persister: SharePersister = persister or InMemorySharePersister()
        self.partitions: dict[tuple[str, TopicPartition], SharePartition] = {}
        # Each share partition's persister key and the leader epoch it was loaded under.
        self._keys: dict[tuple[str, TopicPartition], tuple[SharePartitionKey, int]] = {}
        self._loading: dict[tuple[str, TopicPartition], asyncio.Future] = {}
        self._load_failed: dict[tuple[str, TopicPartition], ApiError] = {}
        # The last write of each share partition: writes of one partition go out one at a time,
        # in order, so that an older state never lands after a newer one.
        self._writes: dict[SharePartitionKey, asyncio.Future] = {}
        self._queued: dict[SharePartitionKey, tuple[SharePartition, asyncio.Future]] = {}  # not sent yet
        self._topic_id = topic_id  # topic ids of partitions not hosted here (deleting a group's state)
        self.sessions: dict[tuple[str, str], _Session] = {}
        self.max_sessions = max_sessions  # group.share.max.share.sessions

    @property
    def purgatory(self) -> DelayedOperationPurgatory:
        """The fetch purgatory: share fetches wake on what wakes fetches."""
        return self.replica_manager.fetch_purgatory

    # -- sessions -------------------------------------------------------------------------

    def update_session(self, group_id: str, member_id: str, epoch: int, added: Mapping[TopicPartition, uuid.UUID],
                       forgotten: Sequence[TopicPartition] = (), *, owner: Hashable = None) -> None:
        """Check a request's session epoch and move the session on: epoch 0 opens a new session
        (dropping the member's old one) owned by the connection ``owner``, -1 is checked by
        ``close_session``, any other must be the session's next. Raises SHARE_SESSION_NOT_FOUND
        or INVALID_SHARE_SESSION_EPOCH, and SHARE_SESSION_LIMIT_REACHED for a new session on a
        broker holding ``max_sessions`` already."""
        key = (group_id, member_id)
        if epoch == INITIAL_EPOCH:
            if key not in self.sessions and len(self.sessions) >= self.max_sessions:
                raise ApiError(ErrorCode.SHARE_SESSION_LIMIT_REACHED,
                               "The share session cache is full.")
            self.sessions[key] = session = _Session(epoch=1, owner=owner)
        else:
            session = self._session(key, epoch)
            session.epoch = next_epoch(epoch)
        # Added first, then forgotten, as Kafka's ShareSession.update: a partition listed only to
        # carry acknowledgements and forgotten in the same request leaves the session, so later
        # answers do not hold a partition the member no longer asks for.
        session.partitions.update(added)
        for tp in forgotten:
            session.partitions.pop(tp, None)

    def session_partitions(self, group_id: str, member_id: str) -> dict[TopicPartition, uuid.UUID]:
        """The partitions of the member's share session, with their topic ids."""
        session = self.sessions.get((group_id, member_id))
        return dict(session.partitions) if session is not None else {}

    def check_session(self, group_id: str, member_id: str, epoch: int) -> None:
        """Raise as ``update_session`` would, without moving the session on."""
        self._session((group_id, member_id), epoch)

    def _session(self, key: tuple[str, str], epoch: int) -> _Session:
        session = self.sessions.get(key)
        if session is None:
            raise ApiError(ErrorCode.SHARE_SESSION_NOT_FOUND, "The share session was not found.")
        if epoch != FINAL_EPOCH and epoch != session.epoch:
            raise ApiError(ErrorCode.INVALID_SHARE_SESSION_EPOCH, "The share session epoch is invalid.")
        return session

    def close_session(self, group_id: str, member_id: str) -> None:
        """Epoch -1: the session ends and the member's acquired records are released."""
        key = (group_id, member_id)
        self._session(key, FINAL_EPOCH)
        session = self.sessions.pop(key)
        for op in list(session.waiting):
            op.abandon()
        for (group, tp), sp in list(self.partitions.items()):
            # As Kafka, only a partition where the member held records is written: writing the
            # others would persist a start offset no acknowledgement has made yet.
            if group == group_id and sp.release_member(member_id):
                self._persist(group, tp, sp)

    def connection_closed(self, owner: Hashable) -> None:
        """The client connection ``owner`` closed: the sessions it opened end, and their
        members' acquired records are released at once rather than when their locks expire."""
        for group_id, member_id in [k for k, s in self.sessions.items() if s.owner == owner]:
            self.close_session(group_id, member_id)

    # -- acknowledgements --------------------------------------------------------------------

    def acknowledge(self, group_id: str, member_id: str, tp: TopicPartition,
                    batches: Sequence[AcknowledgementBatch], *, renew_allowed: bool) -> SharePartitionResult:
        result = SharePartitionResult()
        sp = self.partitions.get((group_id, tp))
        try:
            if sp is None:
                # No share partition here: the partition moved, or nothing was ever acquired.
                self._leader_partition(tp)
                raise ApiError(ErrorCode.INVALID_RECORD_STATE, "The share partition has no acquired records.")
            if any(AcknowledgeType.RENEW in b.acknowledge_types for b in batches):
                if not renew_allowed:
                    raise ApiError(ErrorCode.INVALID_REQUEST, "Renew acknowledgements are not enabled.")
                if not self.settings(group_id).share_renew_acknowledge_enable:
                    # As Kafka: the group refusing renewals makes them invalid record states.
                    raise ApiError(ErrorCode.INVALID_RECORD_STATE,
                                   "Renew acknowledgements are not enabled for the group.")
            sp.acknowledge(member_id, batches)
        except ApiError as e:
            result.acknowledge_error = e.code
            result.acknowledge_error_message = e.message
            return result
        write = self._persist(group_id, tp, sp)
        if write is not None:
            result.persisted = asyncio.ensure_future(self._ack_written(write, result))
        return result

    @staticmethod
    async def _ack_written(write: Awaitable[None], result: SharePartitionResult) -> None:
        try:
            await write
        except ApiError as e:
            result.acknowledge_error = e.code
            result.acknowledge_error_message = e.message

    # -- fetch -----------------------------------------------------------------------------

    def fetch(self, request: ShareFetchRequestData, acked: dict[TopicPartition, SharePartitionResult]
              ) -> dict[TopicPartition, SharePartitionResult] | asyncio.Future:
        """Acquire records for the member: at once if there are any (or no wait is allowed),
        else a future completed by a ``DelayedShareFetch``. ``acked`` holds the answers of the
        acknowledgements the request carried, merged into the result. Share partitions not
        loaded yet are read from the persister first."""
        loads = [f for tp in request.partitions if (f := self._load(request.group_id, tp)) is not None]
        if loads:
            return asyncio.ensure_future(self._fetch_after(loads, request, acked))
        return self._fetch_loaded(request, acked)

    async def ensure_loaded(self, group_id: str, tps: Sequence[TopicPartition]) -> None:
        """Read the state of those of the group's share partitions led here and not loaded yet."""
        loads = [f for tp in tps if (f := self._load(group_id, tp)) is not None]
        if loads:
            await asyncio.wait(loads)

    async def _fetch_after(self, loads: list[asyncio.Future], request: ShareFetchRequestData,
                           acked: dict[TopicPartition, SharePartitionResult]) -> dict[TopicPartition, SharePartitionResult]:
        await asyncio.wait(loads)
        result = self._fetch_loaded(request, acked)
        return await result if isinstance(result, asyncio.Future) else result

    def _fetch_loaded(self, request: ShareFetchRequestData, acked: dict[TopicPartition, SharePartitionResult]
                      ) -> dict[TopicPartition, SharePartitionResult] | asyncio.Future:
        # Kafka's first try is the delayed fetch's own: short of MinBytes it acquires nothing and waits.
        waits = request.max_wait_ms > 0 and bool(request.partitions)
        if not waits or request.min_bytes <= 1 or self.could_acquire(request):
            results = self.acquire_now(request, acked)
            if not waits or any(r.acquired or r.error != ErrorCode.NONE for r in results.values()):
                return results
        fut = asyncio.get_running_loop().create_future()
        op = DelayedShareFetch(self, request, fut, acked)
        session = self.sessions.get((request.group_id, request.member_id))
        if session is not None:
            session.waiting.add(op)
        keys: list[Hashable] = list(request.partitions)
        keys += [self._wake_key(request.group_id, tp) for tp in request.partitions]
        self.purgatory.try_complete_else_watch(op, keys)
        return fut

    def fetch_done(self, op: DelayedShareFetch) -> None:
        """A long poll completed or expired: it is no longer its session's to abandon."""
        session = self.sessions.get((op.request.group_id, op.request.member_id))
        if session is not None:
            session.waiting.discard(op)

    def could_acquire(self, request: ShareFetchRequestData) -> bool:
        """Whether a waiting fetch completes now, as Kafka's DelayedShareFetch.tryComplete
        decides: a partition answers an error, or those that could acquire something (Available
        records, or new ones under the record lock limit) hold MinBytes from their next fetch
        offset to the end they may read, counted as a Fetch's long poll counts them."""
        acquirable: list[tuple[Partition, SharePartition]] = []
        for tp in request.partitions:
            p = self.replica_manager.partitions.get(tp)
            if p is None or p.deleted or not p.is_leader:
                return True
            sp = self.partitions.get((request.group_id, tp))
            if sp is None:
                if (request.group_id, tp) in self._loading:
                    continue  # its load wakes the fetch when done
                return True
            if sp.next_fetch_offset() < sp.end_offset or (
                    sp.in_flight_count < sp.max_record_locks
                    and self._fetchable_end(request.group_id, p) > sp.end_offset):
                if request.min_bytes <= 1:
                    return True  # one record is a byte at least
                acquirable.append((p, sp))
        return bool(acquirable) and self._min_bytes_reached(request, acquirable)

    def _min_bytes_reached(self, request: ShareFetchRequestData,
                           acquirable: list[tuple[Partition, SharePartition]]) -> bool:
        # Kafka splits max bytes evenly over the partitions it can acquire from, and counts at
        # most that much of each (PartitionMaxBytesStrategy UNIFORM, isMinBytesSatisfied).
        per_partition = max(1, request.max_bytes // len(acquirable))
        committed = self._isolation(request.group_id) == 1
        total = 0
        for p, sp in acquirable:
            lg = p.log
            try:
                end = lg.offset_metadata(p.last_stable_offset) if committed else lg.high_watermark_metadata
                n = readable_bytes(lg.offset_metadata(sp.next_fetch_offset()), end, per_partition)
            except ApiError:
                return True  # e.g. the log was closed: the fetch answers the error
            if n is None:
                return True
            total += n
        return total >= request.min_bytes

    def acquire_now(self, request: ShareFetchRequestData, acked: dict[TopicPartition, SharePartitionResult],
                    *, acquire: bool = True) -> dict[TopicPartition, SharePartitionResult]:
        results: dict[TopicPartition, SharePartitionResult] = {}
        budget = request.max_records if request.max_records > 0 else 2**31 - 1
        if not acquire:
            budget = 0
        per_partition = max(1, request.max_bytes // max(1, len(request.partitions)))
        for tp in request.partitions:
            res = results[tp] = SharePartitionResult()
            if budget <= 0:
                continue
            try:
                sp = self._share_partition(request.group_id, tp)
                if sp is None:
                    continue
                budget -= self._read_and_acquire(request, tp, sp, per_partition, budget, res)
            except ApiError as e:
                res.error = e.code
                res.error_message = e.message
        for tp, ack in acked.items():
            res = results.setdefault(tp, SharePartitionResult())
            res.acknowledge_error = ack.acknowledge_error
            res.acknowledge_error_message = ack.acknowledge_error_message
        return results

    def _read_and_acquire(self, request: ShareFetchRequestData, tp: TopicPartition, sp: SharePartition,
                          max_bytes: int, budget: int, res: SharePartitionResult) -> int:
        """Acquire from the log batches that a read of ``max_bytes`` from the next fetch offset
        (one segment, as a Fetch) would return, reading them in growing windows that stop once
        nothing more can be acquired: a share fetch takes a few hundred records, and reading the
        whole ``max_bytes`` (librdkafka asks for 50 MiB) each time was most of its cost. Returns
        how much of ``budget`` (the request's max records) it used, as
        ``SharePartition.acquire`` counts."""
        p = self._leader_partition(tp)
        self._refresh(request.group_id, sp)
        sp.archive_before(p.log.log_start_offset)
        if not sp.can_acquire():
            return 0
        spent = 0
        offset = sp.next_fetch_offset()
        isolation = self._isolation(request.group_id)
        left, window, segment = max_bytes, min(max_bytes, _FIRST_READ_BYTES), None
        acquired: list[AcquiredRecords] = []
        # The reads from the one holding the first acquired record on (contiguous: each starts
        # at the batch after the last one's), and their batches: (read, position, header).
        reads: list[memoryview] = []
        batches: list[tuple[int, int, BatchHeader]] = []
        while True:
            params = FetchParams(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=window,
                                 isolation_level=isolation, partitions=[FetchRequestPartition(tp, offset, window)])
            read = self.replica_manager.read_from_local_log(params)[tp]
            if read.error != ErrorCode.NONE:
                raise ApiError(read.error)
            data = memoryview(read.records)
            meta = read.fetch_offset_metadata
            seg = None if meta is None else meta.segment_base_offset
            if not data or left < max_bytes and (len(data) > left or seg != segment):
                break  # past what one read of max_bytes would have returned
            segment = seg
            headers = list(iter_batches(data))
            if not headers:
                break
            got, counted = sp.acquire(request.member_id, [(h.base_offset, h.last_offset) for _, h in headers],
                                      budget, record_limit=request.record_limit)
            budget -= counted
            spent += counted
            if read.aborted_transactions:
                # A read_committed group never gets an aborted transaction's records: the
                # response has no aborted-transactions list for the consumer to skip them by.
                aborted = aborted_batches([h for _, h in headers], read.aborted_transactions)
                for a_first, a_last in aborted:
                    sp.archive_acquired(a_first, a_last)
                got = subtract_ranges(got, aborted)
            if got or reads:
                reads.append(data)
                batches += [(len(reads) - 1, pos, h) for pos, h in headers]
            acquired += got
            left -= len(data)
            offset = headers[-1][1].last_offset + 1
            if budget <= 0 or left <= 0 or (offset >= sp.end_offset and sp.in_flight_count >= sp.max_record_locks):
                break
            window = min(left, 2 * window)
        if acquired:
            res.acquired = merge_acquired(acquired)
            res.records = _answer_records(reads, batches, res.acquired)
        return spent

    def unsend(self, group_id: str, member_id: str, results: Mapping[TopicPartition, SharePartitionResult]) -> None:
        """The answer of a fetch goes out without its records (its client is throttled): what
        it acquired is Available again, as if never acquired, and the results hold no records."""
        for tp, res in results.items():
            sp = self.partitions.get((group_id, tp))
            if sp is not None and res.acquired:
                sp.unacquire(member_id, res.acquired)
            res.records, res.acquired = b"", []

    # -- share partitions ----------------------------------------------------------------------

    def _share_partition(self, group_id: str, tp: TopicPartition) -> SharePartition | None:
        """The loaded share partition, else None with its load started (a failed load raises
        its error once)."""
        key = (group_id, tp)
        sp = self.partitions.get(key)
        if sp is not None:
            return sp
        self._leader_partition(tp)
        failed = self._load_failed.pop(key, None)
        if failed is not None:
            raise failed
        self._load(group_id, tp)
        return None

    def _load(self, group_id: str, tp: TopicPartition) -> asyncio.Future | None:
        """Start reading the share partition's state from the persister (None: loaded already,
        or not led here, which the fetch answers)."""
        key = (group_id, tp)
        if key in self.partitions:
            return None
        loading = self._loading.get(key)
        if loading is not None:
            return loading
        p = self.replica_manager.partitions.get(tp)
        if p is None or p.deleted or not p.is_leader:
            return None
        fut = self._loading[key] = asyncio.ensure_future(self._read_state(group_id, p))
        return fut

    async def _read_state(self, group_id: str, p: Partition) -> None:
        tp, epoch = p.tp, p.leader_epoch
        key = (group_id, tp)
        pkey = SharePartitionKey(group_id, p.topic_id, tp.partition)
        try:
            snapshot = await self.persister.read_state(pkey, epoch)
            if self._reread_settings is not None and (snapshot is None
                                                      or snapshot.start_offset == UNINITIALIZED_START_OFFSET):
                await self._reread_settings(group_id)
        except ApiError as e:
            self._load_failed[key] = e
            return
        except Exception as e:
            log.exception("reading the share state of %s for group %s failed", tp, group_id)
            self._load_failed[key] = ApiError(ErrorCode.UNKNOWN_SERVER_ERROR, str(e))
            return
        finally:
            self._loading.pop(key, None)
            self.purgatory.check_and_complete(self._wake_key(group_id, tp))
        if key in self.partitions or self.replica_manager.partitions.get(tp) is not p \
                or not p.is_leader or p.leader_epoch != epoch:
            return  # leadership moved while reading: the next fetch starts again
        self._install(group_id, p, pkey, snapshot)
        self.purgatory.check_and_complete(self._wake_key(group_id, tp))

    def _install(self, group_id: str, p: Partition, pkey: SharePartitionKey,
                 snapshot: SharePartitionSnapshot | None) -> SharePartition:
        tp = p.tp
        conf = self.settings(group_id)
        kw = dict(lock_duration_ms=conf.share_record_lock_duration_ms,
                  delivery_count_limit=conf.share_delivery_count_limit,
                  max_record_locks=conf.share_partition_max_record_locks,
                  on_available=self._waker(group_id, tp), on_expired=self._expiry_writer(group_id, tp))
        if snapshot is not None and snapshot.start_offset != UNINITIALIZED_START_OFFSET:
            sp = SharePartition(snapshot.start_offset, self.timer, state_batches=snapshot.state_batches,
                                state_epoch=snapshot.state_epoch, **kw)
        else:
            lg = p.log

            def found(ts: int) -> int | None:
                hit = lg.fetch_offset_by_timestamp(ts)
                return None if hit is None else hit[0]

            start = initial_start_offset(conf.share_auto_offset_reset, log_start_offset=lg.log_start_offset,
                                         latest_offset=p.high_watermark, now_ms=self.clock.milliseconds(),
                                         offset_for_timestamp=found)
            sp = SharePartition(start, self.timer, state_epoch=snapshot.state_epoch if snapshot else 0, **kw)
        self.partitions[(group_id, tp)] = sp
        self._keys[(group_id, tp)] = (pkey, p.leader_epoch)
        return sp

    def _refresh(self, group_id: str, sp: SharePartition) -> None:
        # Group configs may change between fetches (IncrementalAlterConfigs on the GROUP).
        conf = self.settings(group_id)
        sp.set_limits(conf.share_record_lock_duration_ms, conf.share_delivery_count_limit,
                      conf.share_partition_max_record_locks)

    def _leader_partition(self, tp: TopicPartition) -> Partition:
        p = self.replica_manager.get_partition_or_error(tp)
        p.check_leader(-1)
        return p

    def _isolation(self, group_id: str) -> int:
        return 1 if self.settings(group_id).share_isolation_level == "read_committed" else 0

    def _fetchable_end(self, group_id: str, p: Partition) -> int:
        return p.last_stable_offset if self._isolation(group_id) == 1 else p.high_watermark

    @staticmethod
    def _wake_key(group_id: str, tp: TopicPartition) -> Hashable:
        return ("share", group_id, tp)

    def _expiry_writer(self, group_id: str, tp: TopicPartition) -> Callable[[], None]:
        def write() -> None:
            sp = self.partitions.get((group_id, tp))
            if sp is not None:
                self._persist(group_id, tp, sp)
        return write

    def _waker(self, group_id: str, tp: TopicPartition) -> Callable[[], None]:
        key = self._wake_key(group_id, tp)

        def wake() -> None:
            self.purgatory.check_and_complete(key)
        return wake

    def _persist(self, group_id: str, tp: TopicPartition, sp: SharePartition) -> asyncio.Future | None:
        """Write the share partition's state, after any earlier write of it; the future fails
        with the persister's error. A write not sent yet takes later changes along (it reads
        the state when it goes out), so acknowledgements arriving faster than writes complete
        share writes. FENCED_STATE_EPOCH (an admin reset the state) drops the share partition,
        so that the next fetch reads the new state."""
        found = self._keys.get((group_id, tp))
        if found is None:
            return None
        pkey, leader_epoch = found
        queued = self._queued.get(pkey)
        if queued is not None and queued[0] is sp:
            return queued[1]
        previous = self._writes.get(pkey)

        async def write() -> None:
            if previous is not None:
                await asyncio.wait([previous])
            if self._queued.get(pkey, (None, None))[1] is task:
                del self._queued[pkey]
            try:
                await self.persister.write_state(pkey, sp.snapshot(), leader_epoch=leader_epoch)
            except ApiError as e:
                log.warning("writing the share state of %s for group %s failed: %s", tp, group_id, e.code.name)
                if e.code == ErrorCode.FENCED_STATE_EPOCH and self.partitions.get((group_id, tp)) is sp:
                    self._forget(group_id, tp)
                raise
            finally:
                if self._writes.get(pkey) is task:
                    del self._writes[pkey]

        task = self._writes[pkey] = asyncio.ensure_future(write())
        self._queued[pkey] = (sp, task)
        task.add_done_callback(_retrieve)
        return task

    def _forget(self, group_id: str, tp: TopicPartition) -> SharePartition | None:
        sp = self.partitions.pop((group_id, tp), None)
        if sp is not None:
            sp.release_all()
        return sp

    def _delete(self, pkey: SharePartitionKey) -> asyncio.Future:
        previous = self._writes.get(pkey)

        async def delete() -> None:
            if previous is not None:
                await asyncio.wait([previous])
            try:
                await self.persister.delete_state(pkey)
            except ApiError as e:
                log.warning("deleting the share state of %s failed: %s", pkey, e.code.name)
            finally:
                if self._writes.get(pkey) is task:
                    del self._writes[pkey]

        task = self._writes[pkey] = asyncio.ensure_future(delete())
        task.add_done_callback(_retrieve)
        return task

    async def writes_done(self) -> None:
        """Wait for the persister writes under way (tests, shutdown)."""
        while self._writes:
            await asyncio.wait(list(self._writes.values()))

    def on_partitions_deleted(self, tps: list[TopicPartition]) -> None:
        """Deleted partitions take their share state with them (a topic made again starts afresh)."""
        gone = set(tps)
        for key in [k for k in self.partitions if k[1] in gone]:
            self._forget(*key)
            self._delete(self._keys.pop(key)[0])
        for session in self.sessions.values():
            for tp in gone:
                session.partitions.pop(tp, None)

    def delete_group_state(self, group_id: str, tps: list[TopicPartition]) -> None:
        """A share group was deleted (DeleteGroups): its share partitions and their state go, so
        a group made again under its id starts afresh. ``tps``: the partitions the group
        coordinator recorded (ShareGroupStatePartitionMetadata), here or not."""
        for key in {(group_id, tp) for tp in tps} | {k for k in self.partitions if k[0] == group_id}:
            self._delete_state(*key)

    def _delete_state(self, group_id: str, tp: TopicPartition) -> asyncio.Future | None:
        """Drop the share partition held here and delete its state (the task doing it)."""
        self._forget(group_id, tp)
        found = self._keys.pop((group_id, tp), None)
        pkey = found[0] if found is not None else self._state_key(group_id, tp)
        return self._delete(pkey) if pkey is not None else None

    def _state_key(self, group_id: str, tp: TopicPartition) -> SharePartitionKey | None:
        p = self.replica_manager.partitions.get(tp)
        topic_id = p.topic_id if p is not None else self._topic_id(tp.topic) if self._topic_id else None
        return None if topic_id is None else SharePartitionKey(group_id, topic_id, tp.partition)

    # -- the group coordinator's view of share state (the share-group offset APIs) ----------

    async def share_state_summary(self, group_id: str, tp: TopicPartition) -> tuple[int, int, int] | None:
        """ReadShareGroupStateSummary: (start offset, delivery-complete count, leader epoch) of
        the group's state of ``tp``, None without."""
        pkey = self._state_key(group_id, tp)
        summary = None if pkey is None else await self.persister.read_summary(pkey)
        if summary is None:
            return None
        return summary.start_offset, summary.delivery_complete_count, summary.leader_epoch

    async def initialize_share_state(self, group_id: str, tp: TopicPartition, start_offset: int) -> None:
        """InitializeShareGroupState (AlterShareGroupOffsets): the state starts afresh at
        ``start_offset`` under the next state epoch; a share partition held here is dropped, so
        the next ShareFetch reads the new state. Raises the persister's ApiError."""
        pkey = self._state_key(group_id, tp)
        if pkey is None:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        self._forget(group_id, tp)
        self._keys.pop((group_id, tp), None)
        previous = self._writes.get(pkey)
        if previous is not None:
            await asyncio.wait([previous])
        await self.persister.initialize_state(pkey, start_offset)

    async def delete_share_state(self, group_id: str, tps: list[TopicPartition]) -> None:
        """DeleteShareGroupState (DeleteShareGroupOffsets), answered once the state is gone."""
        tasks = [t for t in (self._delete_state(group_id, tp) for tp in tps) if t is not None]
        if tasks:
            await asyncio.wait(tasks)

    def on_leadership_change(self, leaders: list[Partition], followers: list[Partition]) -> None:
        """A ``LeadershipListener``: share partitions of partitions this broker now follows are
        written to the persister and forgotten; their new leader restores them."""
        gone = {p.tp for p in followers}
        for key in [k for k in self.partitions if k[1] in gone]:
            sp = self.partitions.pop(key)
            sp.release_all()
            self._persist(key[0], key[1], sp)
            del self._keys[key]


def _retrieve(task: asyncio.Future) -> None:
    # A persister's ApiError is the answer's business (or logged where it fails); others are bugs.
    if not task.cancelled() and (e := task.exception()) is not None and not isinstance(e, ApiError):
        log.error("a share state write or delete failed", exc_info=e)


def _answer_records(reads: list[memoryview], batches: list[tuple[int, int, BatchHeader]],
                    acquired: list[AcquiredRecords]) -> bytes | memoryview:
    """The records of a share fetch's answer (``acquired``: merged, ascending): the log batches
    from the first acquired record's to the last one's, as one slice of the log while each of
    them is acquired whole. A batch acquired in part (it crosses the record lock limit, or other
    members hold some of its records) is cut down to its records from the first acquired to the
    last where it is uncompressed (``records.cut_batch``), and batches holding no acquired
    record are then left out: the consumer decodes only what it was handed. Such an answer
    goes out as one batch where ``records.join_batches`` can make one."""
    lo_batch = hi_batch = -1
    pieces: list[bytes | memoryview] = []
    cut = False
    i = 0
    for k, (r, pos, h) in enumerate(batches):
        while i < len(acquired) and acquired[i].last_offset < h.base_offset:
            i += 1
        lo = hi = -1
        j = i
        while j < len(acquired) and acquired[j].first_offset <= h.last_offset:
            if lo < 0:
                lo = max(acquired[j].first_offset, h.base_offset)
            hi = min(acquired[j].last_offset, h.last_offset)
            j += 1
        if lo < 0:
            continue
        if lo_batch < 0:
            lo_batch = k
        hi_batch = k
        whole = reads[r][pos:pos + h.size]
        part = cut_batch(whole, lo, hi) if lo > h.base_offset or hi < h.last_offset else None
        cut = cut or part is not None
        pieces.append(whole if part is None else part)
    if cut:
        # Kafka would have handed the cut batch out whole, as one batch; the Java client polls
        # to a batch's end and acknowledges each poll's records while it holds more, so an
        # answer in two batches came back in two acknowledgements, splitting the lock window
        # between the members waiting for it. One batch: one acknowledgement of the answer.
        joined = join_batches(pieces)
        return b"".join(pieces) if joined is None else joined
    (r0, p0, _), (r1, p1, h1) = batches[lo_batch], batches[hi_batch]
    if r0 == r1:
        return reads[r0][p0:p1 + h1.size]  # one read: not copied
    return b"".join([reads[r0][p0:], *reads[r0 + 1:r1], reads[r1][:p1 + h1.size]])


def subtract_ranges(acquired: list[AcquiredRecords], ranges: Sequence[tuple[int, int]]) -> list[AcquiredRecords]:
    """``acquired`` less the offsets of ``ranges``."""
    out = acquired
    for first, last in ranges:
        cut: list[AcquiredRecords] = []
        for a in out:
            if a.last_offset < first or a.first_offset > last:
                cut.append(a)
                continue
            if a.first_offset < first:
                cut.append(AcquiredRecords(a.first_offset, first - 1, a.delivery_count))
            if a.last_offset > last:
                cut.append(AcquiredRecords(last + 1, a.last_offset, a.delivery_count))
        out = cut
    return out
