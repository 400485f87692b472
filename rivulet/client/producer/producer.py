"""The asyncio producer: partitioning, the accumulator, the Sender, idempotence, delivery reports.

``produce()`` only partitions and appends: it never waits for the network, so the sync
``Producer`` can call it from the application's thread while the Sender runs on the event
loop's thread. The Sender sends what is ready, at most ``max.in.flight.requests.per.connection``
requests per broker, retries with exponential backoff, and hands finished batches to a report
sink: callbacks run right away on the loop (asyncio API) or from ``poll()`` (sync API).

Idempotence (on by default when the broker advertises InitProducerId) gives every batch a
producer id, epoch and per-partition sequence number, so a retry the broker already wrote is
answered DUPLICATE_SEQUENCE_NUMBER rather than written twice. Batches keep their sequence
across retries; a retried batch goes out only when nothing else of its partition is in flight,
so the broker always sees sequences in order. When sequences cannot be reconciled (the broker
forgot the producer, or a batch failed for good and left a gap) the producer gets a new id
and renumbers whatever is still queued.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections import defaultdict, deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Coroutine

from rivulet.client import core
from rivulet.client import errors as E
from rivulet.client.producer.accumulator import RECORD_OVERHEAD, PendingRecord, ProducerBatch, RecordAccumulator
from rivulet.client.producer.accumulator import make_record as _make_record
from rivulet.client.producer.accumulator import new_record as _new_record
from rivulet.client.client import KafkaClient, wait_event, wait_future
from rivulet.client.config import ClientConf, ConfigValue, ProducerConfig, resolve
from rivulet.client.connection import RequestTimedOut
from rivulet.client.errors import KafkaError, KafkaException
from rivulet.client.producer.partitioner import StickyPartitions, partitioner_for
from rivulet.client.producer.transactions import TransactionManager
from rivulet.client.stats import ClientStats, emit_every, run_stats_cb
from rivulet.client.types import (TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, ClusterMetadata,
                                  ConsumerGroupMetadata, Headers, Message, Payload, TopicPartition)
from rivulet.common.time import now_ms
from rivulet.common.types import TopicPartition as TP
from rivulet.protocol import compression
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.errors import ApiError as ProtocolError
from rivulet.protocol.records import encode_batch as _encode_batch

if TYPE_CHECKING:
    from rivulet.protocol.messages import produce_response as prr

log = logging.getLogger("rivulet.producer")

INIT_PRODUCER_ID = 22
# The broker remembers the last five batches per producer and partition for deduplication.
MAX_IDEMPOTENT_IN_FLIGHT = 5

_LEADER_ERRORS = core.METADATA_ERRORS
_RESET_ERRORS = frozenset({ErrorCode.UNKNOWN_PRODUCER_ID, ErrorCode.INVALID_PRODUCER_EPOCH,
                           ErrorCode.INVALID_PRODUCER_ID_MAPPING})


def _to_bytes(v: object, what: str) -> bytes | None:  # the application's: checked
    if v is None or type(v) is bytes:
        return v
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    raise TypeError(f"{what} must be bytes, str or None, not {type(v).__name__}")


def _headers(h: Headers) -> tuple[list[tuple[str, bytes | None]] | None, int]:
    if not h:
        return None, 0
    items = h.items() if isinstance(h, Mapping) else h
    out = []
    size = 1
    for k, v in items:
        if not isinstance(k, str):
            if isinstance(k, bytes):
                k = k.decode()
            else:
                raise TypeError("header names must be str")
        v = _to_bytes(v, "a header value")
        out.append((k, v))
        size += len(k) + (len(v) if v is not None else 0) + 2
    return out, size


class _Idempotence:
    """Producer id, epoch and the sequence bookkeeping of every partition."""

    def __init__(self) -> None:
        self.enabled = False
        self.producer_id = -1
        self.epoch = -1
        self.next_seq: dict[TP, int] = defaultdict(int)
        self.acked_seq: dict[TP, int] = defaultdict(int)  # next sequence the broker expects
        self.in_flight: dict[TP, list[ProducerBatch]] = defaultdict(list)
        self.reset_needed = False

    def can_send(self, b: ProducerBatch) -> bool:
        if self.reset_needed or self.producer_id < 0:
            return False
        key = (b.topic, b.partition)
        inflight = self.in_flight[key]
        if b.base_sequence >= 0:
            # A retry: wait until everything before it has been answered, then resend alone.
            if inflight:
                return False
        elif len(inflight) >= MAX_IDEMPOTENT_IN_FLIGHT or any(x.attempts > 1 for x in inflight):
            return False
        if b.base_sequence < 0:
            b.base_sequence = self.next_seq[key]
            self.next_seq[key] = (b.base_sequence + len(b.records)) & 0x7FFFFFFF
            b.producer_id = self.producer_id
            b.producer_epoch = self.epoch
            b.encoded = None
        inflight.append(b)
        return True

    def finished(self, b: ProducerBatch, acked: bool) -> None:
        key = (b.topic, b.partition)
        lst = self.in_flight.get(key)
        if lst is not None and b in lst:
            lst.remove(b)
        if acked:
            self.acked_seq[key] = max(self.acked_seq[key], (b.base_sequence + len(b.records)) & 0x7FFFFFFF)

    def reset(self, producer_id: int, epoch: int) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.next_seq.clear()
        self.acked_seq.clear()
        self.in_flight.clear()
        self.reset_needed = False


@dataclass(frozen=True)
class Handoff:
    """Where a producer sends what must run on the application's thread, not the loop's (the
    blocking Producer serves it from poll()): finished batches, errors for error_cb, statistics
    for stats_cb. ``cond`` is notified as records are reported, so flush() can wait on it."""

    cond: threading.Condition
    report: Callable[[ProducerBatch, int, int, KafkaError | None], None]
    error: Callable[[KafkaError], None]
    stats: Callable[[str], None]


class AIOProducer:
    """An asyncio Kafka producer.

        p = AIOProducer({"bootstrap.servers": "localhost:9092"})
        await p.start()
        msg = await p.send_and_wait("topic", b"value", key=b"k")
        p.produce("topic", b"v", on_delivery=cb)     # non-blocking, callback on the loop
        await p.flush()
        await p.close()
    """

    def __init__(self, conf: ClientConf | None = None, *, handoff: Handoff | None = None,
                 **kwargs: ConfigValue) -> None:
        self.conf: ProducerConfig = resolve(conf, "producer", kwargs)
        c = self.conf
        self.error_cb: Callable | None = c["error_cb"]
        self.stats_cb: Callable[[str], object] | None = c["stats_cb"]
        # Without a handoff, callbacks run on the loop (asyncio API).
        self._on_error: Callable[[KafkaError], None] = handoff.error if handoff else self._run_error_cb
        self._on_stats: Callable[[str], None] = handoff.stats if handoff else self._run_stats_cb
        self.client = KafkaClient(c, self._on_error if self.error_cb is not None else None)
        self.acks: int = c["acks"]
        self.codec = compression.codec_id(c["compression.type"])
        self.level = None if c["compression.level"] < 0 else c["compression.level"]
        self.max_in_flight: int = c["max.in.flight.requests.per.connection"]
        self.retries: int = c["retries"]
        self.backoff = c["retry.backoff.ms"] / 1000
        self.backoff_max = c["retry.backoff.max.ms"] / 1000
        self.request_timeout_ms: int = c["request.timeout.ms"]
        self.max_request_size: int = c["max.request.size"]
        self.default_cb: Callable | None = c["on_delivery"]
        self.only_errors: bool = c["delivery.report.only.error"]
        # The producer's own generator for partitions chosen at random (tests seed it).
        self.rng = random.Random()
        self.partitioner = partitioner_for(c["partitioner"], self.rng)
        self.sticky = StickyPartitions(self.rng)
        self._sticky_now = self.sticky._current
        self._sticky_open = self.sticky.open
        # Every partitioner but random leaves a null key to the sticky one (checked without a call).
        self._null_sticky = c["partitioner"] != "random"
        self.acc = RecordAccumulator(c["batch.size"], c["batch.num.messages"], c["linger.ms"],
                                     c["delivery.timeout.ms"], c["queue.buffering.max.messages"],
                                     c["queue.buffering.max.kbytes"] * 1024)
        self.idem = _Idempotence()
        self._want_idempotence: bool = c["enable.idempotence"]
        self._idempotence_explicit = "enable.idempotence" in {**(conf or {}), **kwargs}
        self.loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._wakeup: asyncio.Event | None = None
        self._wake_scheduled = False
        self._sender: asyncio.Task | None = None
        self._in_flight: dict[int, int] = defaultdict(int)
        self._sending: set[ProducerBatch] = set()  # batches in a produce request awaiting its answer
        self._tasks: set[asyncio.Task] = set()
        self._drain_start = 0
        self._started = False
        self._closed = False
        self._fatal: KafkaError | None = None
        self._accepting = False  # started, not closed, no fatal error: produce() may append
        self._topics = self.client.cluster.topics
        # Records produced, and records reported: two counters, each changed under its own
        # lock (the accumulator's, the report condition's), so no update is lost between them.
        self._produced = 0
        self._reported = 0
        self._done_cond = handoff.cond if handoff else threading.Condition()
        # Where finished batches go: (batch, base offset, log-append time, error).
        self._report: Callable[[ProducerBatch, int, int, KafkaError | None], None] = \
            handoff.report if handoff else self._deliver_now
        self._space_waiters: deque[asyncio.Future] = deque()
        self.stats_interval = c["statistics.interval.ms"] / 1000
        self.stats = ClientStats(c["client.id"], "producer")
        self._stats_task: asyncio.Task | None = None
        # librdkafka's topic.metadata.propagation.max.ms: how long a topic the broker calls
        # unknown may still be on its way; after it, its queued records fail and produce() refuses it.
        self.propagation_max = c["topic.metadata.propagation.max.ms"] / 1000
        self._topic_wanted_at: dict[str, float] = {}
        self._missing_topics: set[str] = set()
        self.transactional_id: str | None = c["transactional.id"]
        self.txn: TransactionManager | None = None
        if self.transactional_id is not None:
            self.txn = TransactionManager(_TxnHooks(self), self.client, self.request_timeout_ms,
                                          self.transactional_id, c["transaction.timeout.ms"])

    def _run_stats_cb(self, doc: str) -> None:
        run_stats_cb(self.stats_cb, doc)

    def stats_json(self) -> str:
        """librdkafka's statistics document for this producer, as stats_cb gets it."""
        with self.acc.lock:
            queued = [(tp, len(b.records), b.size) for tp, dq in self.acc.batches.items() for b in dq]
        total: dict[TP, tuple[int, int]] = {}
        for tp, n, size in queued:
            a, b = total.get(tp, (0, 0))
            total[tp] = (a + n, b + size)
        return self.stats.render(self.client.cluster, lambda node: self.client.open_connection(node) is not None,
                                 max(0, self.outstanding), self.acc.queued_bytes,
                                 [(TP(*tp), n, size) for tp, (n, size) in total.items()])

    def _run_error_cb(self, err: KafkaError) -> None:
        E.call_error_cb(self.error_cb, err)

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        # A transactional producer accepts records only inside a transaction.
        self._accepting = self._fatal is None and not self._closed and self.txn is None
        self.loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._wakeup = asyncio.Event()
        self.client.start_metadata_refresh()
        self._sender = self.loop.create_task(self._run())
        if self.stats_cb is not None and self.stats_interval > 0:
            self._stats_task = self.loop.create_task(
                emit_every(self.stats_interval, self.stats_json, self._on_stats, lambda: self._closed))

    async def __aenter__(self) -> AIOProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self, timeout: float | None = None) -> int:
        """Deliver everything queued (within ``timeout`` seconds), then disconnect. Returns how
        many records were still undelivered (0 when nothing was lost)."""
        if self._closed:
            return 0
        left = await self.flush(timeout)
        self._closed = True
        self._accepting = False
        self.acc.close()
        if self._sender is not None:
            self._wake()
            try:
                await wait_future(asyncio.shield(self._sender), 1.0)
            except BaseException:
                self._sender.cancel()
                try:
                    await self._sender
                except BaseException:
                    pass
        # Anything still queued is failed, not silently dropped.
        self._fail_queued(E.local("_DESTROY", "producer closed before delivery"))
        for task in list(self._tasks):
            task.cancel()
        if self._stats_task is not None:
            self._stats_task.cancel()
        await self.client.close()
        return left

    @property
    def outstanding(self) -> int:
        """Records produced and not yet reported (what flush() waits for)."""
        return self._produced - self._reported

    def __len__(self) -> int:
        return self.outstanding

    # ------------------------------------------------------------ producing
    def produce(self, topic: str, value: Payload = None, key: Payload = None, partition: int | None = -1,
                on_delivery: Callable | None = None, timestamp: int | None = 0, headers: Headers = None,
                callback: Callable | None = None, _future: asyncio.Future[Message] | None = None) -> None:
        """Queue one record; never waits. Raises BufferError when the queue is full."""
        # The hot path of the whole producer: keep it to a few attribute reads and one lock.
        if not self._accepting:
            self._refuse()
        if value is not None and type(value) is not bytes:
            value = _to_bytes(value, "value")
        if key is not None and type(key) is not bytes:
            key = _to_bytes(key, "key")
        size = RECORD_OVERHEAD + (0 if key is None else len(key)) + (0 if value is None else len(value))
        hdrs = None
        if headers:
            hdrs, hsize = _headers(headers)
            size += hsize
        if not timestamp:
            timestamp = now_ms()
        cb = on_delivery or callback or self.default_cb
        if _make_record is not None:
            record = _make_record(PendingRecord, key, value, hdrs, timestamp, cb, _future)
        else:
            record = _new_record(PendingRecord, (key, value, hdrs, timestamp, cb, _future))
        tm = self._topics.get(topic)
        acc = self.acc
        # acquire/release rather than ``with``: measurably cheaper on this path.
        lock = acc.lock
        lock.acquire()
        try:
            if acc.queued_messages >= acc.max_messages or acc.queued_bytes + size > acc.max_bytes:
                raise BufferError("Local: Queue full")
            # A keyless record while its topic's sticky batch is still open (nearly every one
            # under load): straight into that batch. The shortcut is only there while the
            # topic's metadata object is the one it was made with (valid, no record waiting
            # for metadata) and the sticky partition has not moved; the batch may since have
            # filled or gone out, which ``full`` tells (every batch leaving its queue is marked).
            # (Only keyless records of a sticky partitioner ever make one.)
            if key is None and (c := self._sticky_open.get(topic)) is not None and c[0] is tm \
                    and (partition is None or not partition >= 0) and not (b := c[1]).full and not b.attempts:
                b.records.append(record)
                b.size += size
                if cb is not None or _future is not None:
                    b.has_callbacks = True
                # The accumulator's counters (and the batch's fields) in line, not through a
                # method as append() keeps them: this is the per-record path, where a call costs
                # as much as the rest of the shortcut (these lines alone: 188 ns a record inline,
                # 233 through a method, of about 1.1 us for produce(); docs/performance.md,
                # Clients); acc.lock is held, as append() needs.
                acc.queued_messages += 1
                acc.queued_bytes += size
                self._produced += 1
                if b.size < acc.batch_size and len(b.records) < acc.batch_num:
                    return
                b.full = True
                wake = True
            elif tm is None or tm.error or not tm.partitions or topic in acc.unpartitioned:
                # Behind records still waiting for metadata, so that order is kept.
                self._check_topic(topic)
                if tm is not None and tm.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and topic in self._missing_topics:
                    raise KafkaException(E.local("_UNKNOWN_TOPIC", "Unable to produce message: Local: Unknown topic"))
                acc.add_unpartitioned(topic, -1 if partition is None else partition,
                                      (record, time.monotonic()), size)  # type: ignore[arg-type]
                self._produced += 1
                wake = True
            else:
                n = len(tm.partitions)
                sticky = False
                if partition is not None and partition >= 0:
                    if partition >= n:
                        raise KafkaException(E.local("_UNKNOWN_PARTITION", f"partition {partition} of {topic} "
                                                     f"does not exist ({n} partitions)"))
                    p = partition
                else:
                    p = -1 if key is None and self._null_sticky else self.partitioner(key, n, tm.available)
                    if p < 0:
                        p = self._sticky_now.get(topic, n)
                        if p >= n:
                            p = self.sticky.partition(topic, n, tm.available)
                        elif not acc.has_open_batch(topic, p):
                            # The sticky partition's batch is full or gone out: move on, once
                            # per batch (Java's onNewBatch), so that a slow producer spreads too.
                            self.sticky.batch_closed(topic, p, n, tm.available)
                            p = self._sticky_now[topic]
                        sticky = key is None and self._null_sticky
                opened, full = acc.append(topic, p, record, size, cb is not None or _future is not None)
                self._produced += 1
                if sticky and not full:
                    self._sticky_open[topic] = (tm, acc.batches[(topic, p)][-1])
                wake = opened or full
        finally:
            lock.release()
        if wake:
            self._wake()

    def _refuse(self) -> None:
        if self._fatal is not None:
            raise KafkaException(self._fatal)
        if self._closed:
            raise KafkaException(E.local("_DESTROY", "the producer is closed"))
        if self.txn is not None and self._started:
            self.txn._raise_fatal()
            raise KafkaException(E.local("_STATE", f"produce() outside a transaction (the transactional producer "
                                                   f"is {self.txn.state}): call begin_transaction() first"))
        raise KafkaException(E.local("_STATE", "the producer is not started (await start())"))

    @staticmethod
    def _check_topic(topic: object) -> None:
        if type(topic) is not str or not topic:
            raise TypeError("topic must be a non-empty str")

    async def send(self, topic: str, value: Payload = None, key: Payload = None, partition: int | None = -1,
                   timestamp: int | None = 0, headers: Headers = None) -> asyncio.Future[Message]:
        """Queue a record, waiting for room if the queue is full; returns a future of the
        delivered Message (its exception is a KafkaException)."""
        if not self._started:
            await self.start()
        fut: asyncio.Future[Message] = self.loop.create_future()
        deadline = time.monotonic() + self.conf["max.block.ms"] / 1000
        while True:
            try:
                self.produce(topic, value, key, partition, None, timestamp, headers, _future=fut)
                return fut
            except BufferError:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise KafkaException(E.local("_QUEUE_FULL", "queue full for max.block.ms")) from None
                w = self.loop.create_future()
                self._space_waiters.append(w)
                try:
                    await wait_future(w, min(left, 0.1))
                except TimeoutError:
                    pass

    async def send_and_wait(self, topic: str, value: Payload = None, key: Payload = None, partition: int | None = -1,
                            timestamp: int | None = 0, headers: Headers = None) -> Message:
        return await (await self.send(topic, value, key, partition, timestamp, headers))

    async def flush(self, timeout: float | None = None) -> int:
        """Send everything queued now (ignoring linger.ms) and wait for it; returns what is left."""
        if not self._started:
            return self.outstanding
        deadline = None if timeout is None else time.monotonic() + timeout
        self.acc.begin_flush()
        try:
            self._wake()
            while self.outstanding > 0:
                if deadline is not None and time.monotonic() >= deadline:
                    break
                await asyncio.sleep(0.005 if deadline is None else min(0.005, max(0, deadline - time.monotonic())))
            return self.outstanding
        finally:
            self.acc.end_flush()

    # ------------------------------------------------------------ transactions
    def _txn_manager(self) -> TransactionManager:
        if self.txn is None:
            raise KafkaException(E.local("_NOT_CONFIGURED", "transactions need transactional.id to be set"))
        if self._closed:
            raise KafkaException(E.local("_DESTROY", "the producer is closed"))
        return self.txn

    @staticmethod
    def _deadline(timeout: float | None) -> float:
        return time.monotonic() + (1e9 if timeout is None or timeout < 0 else timeout)

    async def init_transactions(self, timeout: float | None = None) -> None:
        """Get the transactional id's producer id and epoch, fencing older producers with the same
        transactional id and finishing (aborting) whatever transaction they left open."""
        txn = self._txn_manager()
        if not self._started:
            await self.start()
        await txn.init(self._deadline(timeout))

    def begin_transaction(self) -> None:
        """Start a transaction: produce() is accepted until commit or abort."""
        self._txn_manager().begin()
        self._accepting = not self._closed and self._fatal is None

    async def send_offsets_to_transaction(self, offsets: list[TopicPartition], group_metadata: ConsumerGroupMetadata,
                                          timeout: float | None = None) -> None:
        """Commit a consumer group's offsets as part of the transaction (visible on commit only)."""
        await self._txn_manager().send_offsets(list(offsets), group_metadata, self._deadline(timeout))

    async def commit_transaction(self, timeout: float | None = None) -> None:
        """Flush everything produced in the transaction, then commit it."""
        await self._txn_manager().end(True, self._deadline(timeout))

    async def abort_transaction(self, timeout: float | None = None) -> None:
        """Drop what is still queued, wait for what is in flight, then abort the transaction."""
        await self._txn_manager().end(False, self._deadline(timeout))

    async def list_topics(self, topic: str | None = None, timeout: float | None = None) -> ClusterMetadata:
        resp = await wait_future(self.client.fetch_metadata(None if topic is None else [topic]), timeout)
        return ClusterMetadata.from_response(resp)

    # ------------------------------------------------------------ wakeups
    def _wake(self) -> None:
        if self._wakeup is None:
            return
        if threading.get_ident() == self._loop_thread:
            self._wakeup.set()
        elif not self._wake_scheduled:
            self._wake_scheduled = True
            try:
                self.loop.call_soon_threadsafe(self._do_wake)
            except RuntimeError:  # loop closed
                pass

    def _do_wake(self) -> None:
        self._wake_scheduled = False
        self._wakeup.set()

    # ------------------------------------------------------------ the sender
    def _leader(self, topic: str, partition: int) -> int:
        return self.client.cluster.leader(topic, partition)

    def _node_ok(self, node: int) -> bool:
        return self._in_flight[node] < self.max_in_flight

    async def _init_idempotence(self) -> bool:
        """One attempt at a producer id; False means try again later (no broker reachable yet).

        When the broker does not advertise InitProducerId, idempotence is turned off, as Java's
        client does when it is on by default (and with a warning when it was asked for).
        """
        try:
            conn = await self.client.any_connection()
        except (ConnectionError, OSError) as e:
            log.debug("no broker for InitProducerId yet: %s", e)
            return False
        if not conn.has_api(INIT_PRODUCER_ID):
            if self._idempotence_explicit:
                log.warning("enable.idempotence=true but the broker does not support InitProducerId; "
                            "producing without idempotence")
            else:
                log.info("broker does not support InitProducerId; idempotence is off")
            self.idem.enabled = False
            self._want_idempotence = False
            return True
        try:
            resp = await conn.send(core.init_producer_id_request(None, 2147483647))
        except (ConnectionError, OSError, asyncio.TimeoutError) as e:
            log.debug("InitProducerId failed: %s", e)
            return False
        code, pid = core.read_init_producer_id(resp)
        if pid is None:
            err = ErrorCode(code)
            if err.value in E.RETRIABLE_CODES:
                return False
            fatal = E.broker_error(err, f"InitProducerId failed: {err.name}")
            self._fence(fatal)
            raise KafkaException(fatal)
        self._new_producer_id(pid)
        log.debug("producer id %d epoch %d", pid.producer_id, pid.epoch)
        return True

    def _fence(self, err: KafkaError) -> None:
        """A fatal transactional error: every later produce fails with it."""
        self._fatal = err
        self._accepting = False

    def _accept_records(self, on: bool) -> None:
        """The TransactionManager opens or shuts produce (never reopened once closed)."""
        self._accepting = on and not self._closed

    def _new_producer_id(self, pid: core.ProducerIdAndEpoch) -> None:
        """InitProducerId's answer, for idempotence here or from the TransactionManager."""
        with self.acc.lock:
            self.idem.reset(pid.producer_id, pid.epoch)
            self.idem.enabled = True
            # Everything queued (retries included) is numbered afresh under the new id.
            for b in self.acc.all_batches():
                b.reset_sequence()

    async def _run(self) -> None:
        acc = self.acc
        wakeup = self._wakeup
        txn = self.txn
        # A transactional producer gets its id from init_transactions().
        pid_pending = self._want_idempotence and txn is None  # no answer about a producer id yet
        pid_retry_at = 0.0
        try:
            while True:
                wakeup.clear()
                now = time.monotonic()
                if (pid_pending or (self.idem.enabled and self.idem.reset_needed and txn is None)) \
                        and not self._requests_in_flight() and now >= pid_retry_at:
                    if await self._init_idempotence():
                        pid_pending = False
                    else:
                        pid_retry_at = time.monotonic() + self.backoff
                    now = time.monotonic()
                sends: list[tuple[int, list[ProducerBatch]]] = []
                with acc.lock:
                    new_topics = self._partition_waiting(now)
                    expired = acc.expired(now)
                    ready, next_in, unknown = acc.ready(now, self._leader, self._node_ok)
                    # Until the producer id is known (or refused), nothing may go out unnumbered.
                    can_send = self.idem.can_send if (self.idem.enabled or pid_pending) else _always
                    if txn is not None:
                        # A partition joins the transaction (AddPartitionsToTxn) before its first batch.
                        txn.partitions_to_add([tp for tp, dq in acc.batches.items() if dq])
                        can_send = self._txn_can_send
                    for node in ready:
                        self._drain_start += 1
                        batches = acc.drain(node, self.max_request_size, self._leader, now, can_send,
                                            self._drain_start)
                        if batches:
                            self._in_flight[node] += 1
                            self._sending.update(batches)
                            sends.append((node, batches))
                for b in expired:
                    self._fail_or_gap(b, E.local("_MSG_TIMED_OUT", "Local: Message timed out"))
                if unknown or new_topics:
                    self.client.request_update()
                    # Nothing wakes the sender when the refresh names the leader: look again
                    # after retry.backoff.ms, as Java's sender polls until the metadata answers.
                    next_in = min(next_in, self.backoff)
                for node, batches in sends:
                    t = self.loop.create_task(self._send(node, batches))
                    self._tasks.add(t)
                    t.add_done_callback(self._tasks.discard)
                if acc.unpartitioned:
                    next_in = min(next_in, 0.05)
                if txn is not None and txn.pending:
                    next_in = min(next_in, 0.05)
                if pid_pending or (self.idem.reset_needed and txn is None):
                    next_in = min(next_in, max(0.0, pid_retry_at - time.monotonic()) or self.backoff)
                if sends:
                    # More may be ready right away (other brokers, or the next full batch).
                    next_in = 0 if any(self._node_ok(n) for n, _ in sends) else next_in
                if self._closed and not self._requests_in_flight():
                    return
                if next_in > 0:
                    await wait_event(wakeup, None if next_in == float("inf") else next_in)
                else:
                    await asyncio.sleep(0)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a bug or a fatal error: fail everything rather than hang
            if not isinstance(e, KafkaException):
                log.exception("producer sender failed")
            self._fatal = self._fatal or KafkaError.from_exception(e)
            self._accepting = False
            self._fail_queued(self._fatal)

    def _txn_can_send(self, b: ProducerBatch) -> bool:
        return self.txn.can_send(b) and self.idem.can_send(b)

    def _fail_partitions(self, tps: set[TP], err: KafkaError) -> None:
        """Fail whatever is queued for these partitions (they could not join the transaction)."""
        with self.acc.lock:
            doomed = []
            for tp in tps:
                dq = self.acc.batches.get(tp)
                if dq:
                    for b in dq:
                        b.full = True  # out of its queue: produce() must not add to it
                    doomed.extend(dq)
                    dq.clear()
        for b in doomed:
            self._fail_or_gap(b, err)

    def _fail_queued(self, err: KafkaError) -> None:
        """Report everything still queued as failed (close, or a fatal error)."""
        with self.acc.lock:
            leftovers = list(self.acc.all_batches())
            for b in leftovers:
                b.full = True  # out of its queue: produce() must not add to it
            self.acc.batches.clear()
            pending = [(t, r) for t, lst in self.acc.unpartitioned.items() for r in lst]
            self.acc.unpartitioned.clear()
        for b in leftovers:
            self._complete(b, -1, -1, err)
        for t, (p, (r, _t0), size) in pending:
            self._complete(_single(t, p, r, size), -1, -1, err)

    def purge(self, in_queue: bool = True, in_flight: bool = True) -> None:
        """confluent-kafka's purge(): fail queued records with _PURGE_QUEUE and those in requests
        awaiting an answer with _PURGE_INFLIGHT (a late answer for them is ignored). Loop thread only."""
        doomed: list[tuple[ProducerBatch, KafkaError]] = []
        if in_queue:
            err = E.local("_PURGE_QUEUE", "Local: Purged in queue")
            with self.acc.lock:
                for b in self.acc.all_batches():
                    b.full = True  # out of its queue: produce() must not add to it
                    doomed.append((b, err))
                self.acc.batches.clear()
                pending = [(t, r) for t, lst in self.acc.unpartitioned.items() for r in lst]
                self.acc.unpartitioned.clear()
            doomed.extend((_single(t, p, r, size), err) for t, (p, (r, _t0), size) in pending)
        if in_flight:
            err = E.local("_PURGE_INFLIGHT", "Local: Purged in flight")
            doomed.extend((b, err) for b in self._sending if not b.done)
        for b, err in doomed:
            self._fail_or_gap(b, err)

    def _requests_in_flight(self) -> bool:
        return any(self._in_flight.values())

    def _partition_waiting(self, now: float) -> bool:
        """Give records queued before their topic's metadata arrived a partition. Holds the lock."""
        acc = self.acc
        if not acc.unpartitioned:
            return False
        wanted = False
        for topic in list(acc.unpartitioned):
            tm = self.client.cluster.topics.get(topic)
            if tm is None or tm.error or not tm.partitions:
                if topic not in self.client.wanted_topics:
                    self.client.wanted_topics.add(topic)
                    wanted = True
                wanted_at = self._topic_wanted_at.setdefault(topic, now)
                gone = tm is not None and tm.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION \
                    and now - wanted_at >= self.propagation_max
                if gone:
                    self._missing_topics.add(topic)
                waiting = acc.unpartitioned[topic]
                keep = []
                for item in waiting:
                    partition, (record, t0), size = item
                    if gone:
                        self.loop.call_soon(self._complete, _single(topic, partition, record, size), -1, -1,
                                            E.broker_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                    elif now - t0 >= acc.delivery_timeout:
                        why = ErrorCode(tm.error).name if tm is not None and tm.error else "no metadata"
                        code = "_UNKNOWN_TOPIC" if tm is not None and tm.error else "_MSG_TIMED_OUT"
                        self.loop.call_soon(self._complete, _single(topic, partition, record, size), -1, -1,
                                            E.local(code, f"topic {topic}: {why}"))
                    else:
                        keep.append(item)
                if keep:
                    acc.unpartitioned[topic] = keep
                else:
                    del acc.unpartitioned[topic]
                continue
            items = acc.unpartitioned.pop(topic)
            self._topic_wanted_at.pop(topic, None)
            self._missing_topics.discard(topic)
            n = len(tm.partitions)
            for partition, (record, _t0), size in items:
                if partition >= n:
                    self.loop.call_soon(self._complete, _single(topic, partition, record, size), -1, -1,
                                        E.local("_UNKNOWN_PARTITION", f"partition {partition} does not exist"))
                    continue
                acc.uncount(size)  # append() counts it again
                p = partition
                if p < 0:
                    p = self.partitioner(record.key, n, tm.available)
                    if p < 0:
                        p = self.sticky.partition(topic, n, tm.available)
                        if not acc.has_open_batch(topic, p) and acc.batches.get((topic, p)) is not None:
                            self.sticky.batch_closed(topic, p, n, tm.available)
                            p = self._sticky_now[topic]
                acc.append(topic, p, record, size, record.on_delivery is not None or record.future is not None)
        return wanted

    async def _send(self, node: int, batches: list[ProducerBatch]) -> None:
        """One ProduceRequest to one broker, and what its answer means for each batch."""
        try:
            data_by_tp: dict[TP, bytes] = {}
            by_tp: dict[TP, ProducerBatch] = {}
            for b in batches:
                b.attempts += 1
                if self.txn is not None and (b.encoded is None or b.codec != self.codec):
                    b.encoded = _encode_batch(b.records, compression=self.codec, compression_level=self.level,
                                              producer_id=b.producer_id, producer_epoch=b.producer_epoch,
                                              base_sequence=b.base_sequence, transactional=True)
                    b.codec = self.codec
                data_by_tp[(b.topic, b.partition)] = b.encode(self.codec, self.level)
                by_tp[(b.topic, b.partition)] = b
            req = core.produce_request(self.transactional_id, self.acks, self.request_timeout_ms, data_by_tp)
            self.stats.sent(node, sum(len(d) for d in data_by_tp.values()))
            try:
                if self.acks == 0:
                    await self.client.send_without_response(node, req)
                    for b in batches:
                        self._succeed(b, -1, -1)
                    return
                resp = await self.client.send(node, req, timeout=self.request_timeout_ms / 1000 + 5)
            except (ConnectionError, OSError, asyncio.TimeoutError, RequestTimedOut) as e:
                self.stats.failed(node)
                log.debug("produce to broker %d failed: %s", node, e)
                self.client.request_update()
                for b in batches:
                    self._retry_or_fail(b, E.local("_TRANSPORT", f"broker {node}: {e}"))
                return
            except ProtocolError as e:
                for b in batches:
                    self._fail_or_gap(b, E.broker_error(e.code, e.message))
                return
            self.stats.received(node)
            if resp.node_endpoints:
                self.client.cluster.add_brokers((e.node_id, e.host, e.port) for e in resp.node_endpoints)
            seen = set()
            for t in resp.responses:
                for pr in t.partition_responses:
                    b = by_tp.get((t.name, pr.index))
                    if b is None:
                        continue
                    seen.add((t.name, pr.index))
                    self._handle_partition(b, pr)
            for key, b in by_tp.items():
                if key not in seen:
                    self._retry_or_fail(b, E.local("_FAIL", "broker did not answer for this partition"))
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.exception("produce request failed")
            for b in batches:
                if not b.done:
                    self._fail_or_gap(b, KafkaError.from_exception(e))
        finally:
            self._in_flight[node] -= 1
            self._sending.difference_update(batches)
            if self._wakeup is not None:
                self._wakeup.set()

    def _handle_partition(self, b: ProducerBatch, pr: prr.PartitionProduceResponse) -> None:
        code = pr.error_code
        if code == 0:
            self._succeed(b, pr.base_offset, pr.log_append_time_ms)
            return
        if code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
            # Written by an earlier attempt whose answer was lost.
            self._succeed(b, pr.base_offset if pr.base_offset >= 0 else -1, pr.log_append_time_ms)
            return
        err = E.broker_error(code, pr.error_message)
        if code in _LEADER_ERRORS:
            hint = pr.current_leader  # KIP-951: the new leader, without a metadata round trip
            if hint is None or not self.client.cluster.new_leader(b.topic, b.partition, hint.leader_id,
                                                                  hint.leader_epoch):
                self.client.request_update()
        if self.txn is not None and code in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED,
                                             ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                                             ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED):
            # Another producer took over the transactional id: this one is done for.
            self.txn.set_fatal(err)
            self._fail_or_gap(b, self.txn.error)
            return
        if self.idem.enabled:
            key = (b.topic, b.partition)
            if code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
                if b.base_sequence != self.idem.acked_seq[key]:
                    # An earlier batch of this partition failed or is still out: resend in order.
                    self._retry_or_fail(b, err)
                    return
                log.warning("%s-%d: broker lost track of our sequence; resetting the producer id",
                            b.topic, b.partition)
                self.idem.reset_needed = True
                self._retry_or_fail(b, err)
                return
            if code in _RESET_ERRORS:
                self.idem.reset_needed = True
                self._retry_or_fail(b, err)
                return
        if err.retriable() or code in _LEADER_ERRORS:
            self._retry_or_fail(b, err)
        else:
            self._fail_or_gap(b, err)

    def _succeed(self, b: ProducerBatch, base_offset: int, log_append_time: int) -> None:
        self.stats.records_out(TP(b.topic, b.partition), len(b.records), b.size)
        if self.idem.enabled:
            self.idem.finished(b, True)
        self._complete(b, base_offset, log_append_time, None)

    def _retry_or_fail(self, b: ProducerBatch, err: KafkaError) -> None:
        now = time.monotonic()
        if self.idem.enabled:
            self.idem.finished(b, False)
        if b.attempts > self.retries or now >= b.deadline or self._closed:
            if now >= b.deadline:
                err = E.local("_MSG_TIMED_OUT", f"Local: Message timed out ({err.str()})")
            self._fail_or_gap(b, err)
            return
        # When a new producer id is due (reset_needed), _init_idempotence renumbers this batch and
        # everything queued behind it; until then can_send() holds them back.
        b.retry_at = now + min(self.backoff * (2 ** max(0, b.attempts - 1)), self.backoff_max)
        with self.acc.lock:
            self.acc.reenqueue(b)

    def _fail_or_gap(self, b: ProducerBatch, err: KafkaError) -> None:
        if self.txn is not None and not b.done:
            # A record of the transaction is lost: the transaction can only be aborted.
            self.txn.set_abortable(err)
        if self.idem.enabled and b.base_sequence >= 0:
            self.idem.finished(b, False)
            # Later sequences of this partition can no longer line up: start over with a new id.
            self.idem.reset_needed = True
        self._complete(b, -1, -1, err)

    def _complete(self, b: ProducerBatch, base_offset: int, log_append_time: int, err: KafkaError | None) -> None:
        if b.done:
            return
        b.done = True
        with self.acc.lock:
            self.acc.release(b)
        if self._space_waiters:
            while self._space_waiters:
                w = self._space_waiters.popleft()
                if not w.done():
                    w.set_result(None)
        if not b.has_callbacks and (self.default_cb is None or (self.only_errors and err is None)):
            self._count_done(len(b.records))
            return
        self._report(b, base_offset, log_append_time, err)

    def _count_done(self, n: int) -> None:
        with self._done_cond:
            self._reported += n
            if self._produced <= self._reported:
                self._done_cond.notify_all()

    def deliver(self, b: ProducerBatch, base_offset: int, log_append_time: int, err: KafkaError | None) -> int:
        """Run a finished batch's callbacks and resolve its futures; returns how many records."""
        topic, partition = b.topic, b.partition
        only_errors = self.only_errors and err is None
        for i, r in enumerate(b.records):
            cb = r.on_delivery
            fut = r.future
            if cb is None and fut is None:
                continue
            if log_append_time is not None and log_append_time >= 0:
                ts_type, ts = TIMESTAMP_LOG_APPEND_TIME, log_append_time
            else:
                ts_type, ts = TIMESTAMP_CREATE_TIME, r.timestamp
            m = Message(topic, partition, base_offset + i if base_offset >= 0 else -1001, r.key, r.value,
                        r.headers, ts_type, ts, err)
            if fut is not None:
                if not fut.done():
                    if err is None:
                        fut.set_result(m)
                    else:
                        fut.set_exception(KafkaException(err))
            elif cb is not None and not only_errors:
                try:
                    cb(err, m)
                except Exception:
                    log.exception("delivery callback raised")
        self._count_done(len(b.records))
        return len(b.records)

    def _deliver_now(self, b: ProducerBatch, base_offset: int, log_append_time: int, err: KafkaError | None) -> None:
        # Futures live on this loop; a callback runs here too (asyncio API).
        self.deliver(b, base_offset, log_append_time, err)


def _always(_b: ProducerBatch) -> bool:
    return True


def _single(topic: str, partition: int, record: PendingRecord, size: int) -> ProducerBatch:
    """A one-record batch, to report a record that never made it into a real one."""
    b = ProducerBatch(topic, partition, 0.0, 0.0)
    b.records.append(record)
    b.size += size
    b.has_callbacks = True
    return b


class _TxnHooks:
    """The producer as its TransactionManager sees it (``transactions.TxnProducer``)."""

    __slots__ = ("_p",)

    def __init__(self, producer: AIOProducer) -> None:
        self._p = producer

    def fence(self, err: KafkaError) -> None:
        self._p._fence(err)

    def accept_records(self, on: bool) -> None:
        self._p._accept_records(on)

    def new_producer_id(self, pid: core.ProducerIdAndEpoch) -> None:
        self._p._new_producer_id(pid)

    def producer_id(self) -> core.ProducerIdAndEpoch:
        return core.ProducerIdAndEpoch(self._p.idem.producer_id, self._p.idem.epoch)

    def epoch_bump_needed(self) -> bool:
        return self._p.idem.reset_needed

    def create_task(self, coro: Coroutine[object, object, None]) -> asyncio.Task:
        assert self._p.loop is not None  # transactions start after the producer
        return self._p.loop.create_task(coro)

    def fail_partitions(self, tps: set[TP], err: KafkaError) -> None:
        self._p._fail_partitions(tps, err)

    def wake(self) -> None:
        self._p._wake()

    async def flush(self, timeout: float) -> int:
        return await self._p.flush(timeout)

    def purge_queued(self, err: KafkaError) -> None:
        self._p._fail_queued(err)

    def requests_in_flight(self) -> bool:
        return self._p._requests_in_flight()
