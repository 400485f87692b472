"""ReplicaManager: appends to and reads from the partitions this node leads.

Produce and fetch requests that cannot be answered at once wait in two purgatories, as in
Kafka: a DelayedProduce (acks=all) until the high watermark passes the appended offsets,
and a DelayedFetch until enough bytes are readable or max wait passes. An append, a HW
advance, a deletion or a leadership change calls check_and_complete for that partition.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Callable

from rivulet.delayed import DelayedOperation, DelayedOperationPurgatory, Timer
from rivulet.protocol import records as rec
from rivulet.protocol.errors import ErrorCode, KafkaError
from rivulet.replication.partition import Partition, TopicPartition

log = logging.getLogger(__name__)

CONSUMER_REPLICA_ID = -1


def now_ms() -> int:
    return int(time.time() * 1000)


# ---------------------------------------------------------------- produce

@dataclass(slots=True)
class ProduceResult:
    error: ErrorCode = ErrorCode.NONE
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    message: str | None = None
    required_offset: int = -1  # acks=all waits until the HW reaches this


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
            elif p.high_watermark >= self.results[tp].required_offset:
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


@dataclass(slots=True)
class FetchResult:
    error: ErrorCode = ErrorCode.NONE
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes | None = None


@dataclass(slots=True)
class FetchParams:
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int = 0
    partitions: list[FetchRequestPartition] = field(default_factory=list)

    @property
    def is_from_follower(self) -> bool:
        return self.replica_id >= 0


class DelayedFetch(DelayedOperation):
    """Long-poll fetch: wait for min_bytes across all partitions, or max_wait_ms."""

    def __init__(self, params: FetchParams, rm: ReplicaManager, future: asyncio.Future) -> None:
        super().__init__(params.max_wait_ms)
        self.params = params
        self.rm = rm
        self.future = future

    def try_complete(self) -> bool:
        accumulated = 0
        for fp in self.params.partitions:
            p = self.rm.partitions.get(fp.tp)
            if p is None or p.deleted:
                return self.force_complete()  # the read reports the error
            if fp.current_leader_epoch >= 0 and fp.current_leader_epoch != p.leader_epoch:
                return self.force_complete()
            end = p.log.log_end_offset if self.params.is_from_follower else p.high_watermark
            if end < fp.fetch_offset or fp.fetch_offset < p.log.log_start_offset:
                return self.force_complete()  # out of range now: answer with the error
            if end > fp.fetch_offset:
                accumulated += self.rm.bytes_available(p, fp.fetch_offset, end, fp.max_bytes)
                if accumulated >= self.params.min_bytes:
                    return self.force_complete()
        return False

    def on_expiration(self) -> None:
        pass

    def on_complete(self) -> None:
        if not self.future.done():
            self.future.set_result(self.rm.read_from_local_log(self.params))


# ---------------------------------------------------------------- the manager

class ReplicaManager:
    def __init__(self, node_id: int, timer: Timer, *, produce_purge_interval: int = 1000,
                 fetch_purge_interval: int = 1000) -> None:
        self.node_id = node_id
        self.partitions: dict[TopicPartition, Partition] = {}
        self.timer = timer
        self.produce_purgatory = DelayedOperationPurgatory("Produce", timer, purge_interval=produce_purge_interval)
        self.fetch_purgatory = DelayedOperationPurgatory("Fetch", timer, purge_interval=fetch_purge_interval)
        self._flush_executor = None  # default executor; fsync never runs on the event loop

    # -------------------------------------------------------- partitions
    def add_partition(self, partition: Partition) -> None:
        self.partitions[partition.tp] = partition

    def remove_partition(self, tp: TopicPartition) -> Partition | None:
        p = self.partitions.pop(tp, None)
        if p is not None:
            p.deleted = True
            # Waiting fetches and produces learn at once that the partition is gone.
            self.fetch_purgatory.check_and_complete(tp)
            self.produce_purgatory.check_and_complete(tp)
        return p

    def get_partition_or_error(self, tp: TopicPartition) -> Partition:
        p = self.partitions.get(tp)
        if p is None or p.deleted:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return p

    # -------------------------------------------------------- produce
    def append_records(
        self,
        entries: dict[TopicPartition, memoryview | bytes | None],
        *,
        required_acks: int,
        timeout_ms: int,
        max_message_bytes: Callable[[TopicPartition], int],
        log_append_time: Callable[[TopicPartition], bool],
        internal: bool = False,
    ) -> dict[TopicPartition, ProduceResult] | asyncio.Future:
        """Validate and append each partition's records; wait for acks=all and for fsyncs."""
        results: dict[TopicPartition, ProduceResult] = {}
        flushes: list[Partition] = []
        now = now_ms()
        for tp, data in entries.items():
            res = results[tp] = ProduceResult()
            try:
                p = self.get_partition_or_error(tp)
                if not data:
                    res.log_start_offset = p.log.log_start_offset
                    continue
                headers = rec.validate_produce_records(data, max_batch_size=max_message_bytes(tp))
                if required_acks == -1 and len(p.isr) < p.log.config.min_insync_replicas:
                    raise KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS)
                # Request frames are bytearrays: offsets are assigned in place, without a copy.
                writable = isinstance(data, bytearray) or (isinstance(data, memoryview) and not data.readonly)
                buf = data if writable else bytearray(data)
                append_time = log_append_time(tp)
                if append_time:
                    for pos, _h in rec.iter_batches(buf):
                        rec.set_log_append_time(buf, pos, now)
                info = p.log.append_as_leader(buf, headers, leader_epoch=p.leader_epoch, now_ms=now,
                                              log_append_time=append_time)
                res.base_offset = info.first_offset
                res.log_append_time = now if append_time else -1
                res.log_start_offset = p.log.log_start_offset
                res.required_offset = info.last_offset + 1
                if info.flush_needed:
                    flushes.append(p)
                if p.maybe_increment_high_watermark():
                    self.fetch_purgatory.check_and_complete(tp)
                    self.produce_purgatory.check_and_complete(tp)
                else:
                    # Followers may long-poll on the LEO.
                    self.fetch_purgatory.check_and_complete(tp)
            except KafkaError as e:
                res.error = e.code
                res.message = e.message
        if required_acks == 0:
            if flushes:
                asyncio.get_running_loop().create_task(self._flush(flushes))
            return results
        if not flushes and (required_acks != -1 or self._all_replicated(results)):
            return results
        fut = asyncio.get_running_loop().create_future()
        if flushes:
            task = asyncio.get_running_loop().create_task(self._flush(flushes))
            task.add_done_callback(lambda _t: self._after_flush(results, required_acks, timeout_ms, fut))
        else:
            self._after_flush(results, required_acks, timeout_ms, fut)
        return fut

    def _all_replicated(self, results: dict[TopicPartition, ProduceResult]) -> bool:
        for tp, r in results.items():
            if r.error == ErrorCode.NONE and r.required_offset >= 0:
                p = self.partitions.get(tp)
                if p is None or p.high_watermark < r.required_offset:
                    return False
        return True

    def _after_flush(self, results: dict[TopicPartition, ProduceResult], required_acks: int, timeout_ms: int,
                     fut: asyncio.Future) -> None:
        if required_acks != -1 or self._all_replicated(results):
            if not fut.done():
                fut.set_result(results)
            return
        op = DelayedProduce(timeout_ms, self, results, fut)
        self.produce_purgatory.try_complete_else_watch(op, [tp for tp in op.waiting])

    async def _flush(self, partitions: list[Partition]) -> None:
        loop = asyncio.get_running_loop()
        for p in partitions:
            try:
                await loop.run_in_executor(self._flush_executor, p.log.flush)
            except Exception:  # a failed fsync must not lose the response path
                log.exception("flush of %s failed", p.tp)

    # -------------------------------------------------------- fetch
    def fetch_messages(self, params: FetchParams) -> dict[TopicPartition, FetchResult] | asyncio.Future:
        results = self.read_from_local_log(params)
        if params.max_wait_ms <= 0 or not params.partitions:
            return results
        total = 0
        for r in results.values():
            if r.error != ErrorCode.NONE:
                return results
            if r.records:
                total += len(r.records)
        if total >= params.min_bytes:
            return results
        fut = asyncio.get_running_loop().create_future()
        op = DelayedFetch(params, self, fut)
        self.fetch_purgatory.try_complete_else_watch(op, [fp.tp for fp in params.partitions])
        return fut

    def bytes_available(self, p: Partition, fetch_offset: int, end: int, max_bytes: int) -> int:
        try:
            data = p.log.read(fetch_offset, max_bytes, max_offset=end, min_one_batch=True).records
        except KafkaError:
            return 0
        return len(data) if data else 0

    def read_from_local_log(self, params: FetchParams) -> dict[TopicPartition, FetchResult]:
        results: dict[TopicPartition, FetchResult] = {}
        remaining = params.max_bytes
        min_one = True
        for fp in params.partitions:
            res = results[fp.tp] = FetchResult()
            p = self.partitions.get(fp.tp)
            if p is None or p.deleted:
                res.error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            lg = p.log
            res.high_watermark = p.high_watermark
            res.last_stable_offset = p.last_stable_offset
            res.log_start_offset = lg.log_start_offset
            try:
                p.check_leader_epoch(fp.current_leader_epoch)
                max_offset = lg.log_end_offset if params.is_from_follower else (
                    p.last_stable_offset if params.isolation_level == 1 else p.high_watermark)
                limit = min(fp.max_bytes, remaining)
                info = lg.read(fp.fetch_offset, limit, max_offset=max_offset, min_one_batch=min_one)
                data = info.records
                if data:
                    res.records = data
                    remaining = max(0, remaining - len(data))
                    min_one = False
                else:
                    res.records = b""
            except KafkaError as e:
                res.error = e.code
        return results

    # -------------------------------------------------------- lifecycle
    def shutdown(self) -> None:
        self.produce_purgatory.shutdown()
        self.fetch_purgatory.shutdown()
