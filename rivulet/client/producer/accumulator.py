"""RecordAccumulator: records gathered into one open batch per partition until it is sent.

A batch is ready when it is full (``batch.size`` bytes or ``batch.num.messages`` records),
when its oldest record has waited ``linger.ms``, or when a flush or close asks for everything.
Once a broker has a ready batch, the sender drains one batch of every partition it leads (not
only the ready ones), as Java's client does: the request is going out anyway.

Appends come from the application's thread (the sync API) while the sender drains on the
event loop's thread, so both take one lock; it is held for a few dict and list operations.
"""

from __future__ import annotations

import threading
import time
from collections import deque
import asyncio
from typing import TYPE_CHECKING, Callable, Iterable, NamedTuple

from rivulet.common.types import TopicPartition as TP
from rivulet.protocol import records as rec

if TYPE_CHECKING:
    from rivulet.client.types import Message

# Bytes a record adds to a batch besides key, value and headers: length, attributes,
# timestamp and offset deltas, key and value lengths, header count (varints, typically small).
RECORD_OVERHEAD = 11
BATCH_OVERHEAD = rec.HEADER_SIZE


class PendingRecord(NamedTuple):
    """A record waiting in a batch, and whom to tell when it is delivered.

    A named tuple: made with ``tuple.__new__`` on the produce() hot path, it costs less than
    an object with an ``__init__``, and ``encode_batch`` reads its fields by name.
    """

    key: bytes | None
    value: bytes | None
    headers: list | None
    timestamp: int | None
    on_delivery: Callable | None = None
    future: asyncio.Future[Message] | None = None  # AIOProducer.send's


new_record = tuple.__new__

make_record: Callable[..., PendingRecord] | None = None
"""``make_record(PendingRecord, key, value, headers, timestamp, on_delivery, future)``: the C
accelerator's equivalent of ``new_record(PendingRecord, (...))`` (None without it). It makes
the same record, and leaves it untracked by the garbage collector when it holds no callback,
future or headers: CPython untracks plain tuples like that by itself, not subclasses, so a
busy producer's queued records would all reach the oldest generation and trigger full
collections (about a tenth of the producer's time at 1 KiB records)."""
if rec.SPEEDUPS:
    from rivulet.protocol import _speedups

    make_record = _speedups.make_record


class ProducerBatch:
    __slots__ = ("topic", "partition", "records", "size", "created", "full", "attempts", "retry_at",
                 "base_sequence", "producer_id", "producer_epoch", "encoded", "deadline", "done",
                 "has_callbacks", "codec")

    def __init__(self, topic: str, partition: int, created: float, deadline: float) -> None:
        self.topic = topic
        self.partition = partition
        self.records: list[PendingRecord] = []
        self.size = BATCH_OVERHEAD
        self.created = created
        self.full = False
        self.attempts = 0
        self.retry_at = 0.0
        self.base_sequence = -1
        self.producer_id = -1
        self.producer_epoch = -1
        self.encoded: bytes | None = None
        self.deadline = deadline
        self.done = False
        self.has_callbacks = False
        self.codec = 0

    @property
    def record_count(self) -> int:
        return len(self.records)

    def encode(self, codec: int, level: int | None) -> bytes:
        """The wire batch; kept for retries, which must resend identical bytes and sequences."""
        if self.encoded is None or self.codec != codec:
            self.encoded = rec.encode_batch(
                self.records, compression=codec, compression_level=level,
                producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                base_sequence=self.base_sequence)
            self.codec = codec
        return self.encoded

    def reset_sequence(self) -> None:
        self.base_sequence = -1
        self.producer_id = -1
        self.producer_epoch = -1
        self.encoded = None

    def __repr__(self) -> str:
        return f"ProducerBatch({self.topic}-{self.partition}, {len(self.records)} records, seq {self.base_sequence})"


class RecordAccumulator:
    def __init__(self, batch_size: int, batch_num_messages: int, linger_ms: float, delivery_timeout_ms: int,
                 max_messages: int, max_bytes: int) -> None:
        self.batch_size = batch_size
        self.batch_num = batch_num_messages
        self.linger = linger_ms / 1000
        self.delivery_timeout = delivery_timeout_ms / 1000 if delivery_timeout_ms else float("inf")
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.lock = threading.Lock()
        self.batches: dict[TP, deque[ProducerBatch]] = {}
        # Records produced before their topic's partition count was known.
        self.unpartitioned: dict[str, list[tuple[int, PendingRecord, int]]] = {}
        self.queued_messages = 0
        self.queued_bytes = 0
        self.flushing = 0
        self.closing = False

    # A flush or close sends every batch at once, whatever linger.ms says (Java's
    # beginFlush/awaitFlushCompletion and close).
    def begin_flush(self) -> None:
        with self.lock:
            self.flushing += 1

    def end_flush(self) -> None:
        with self.lock:
            self.flushing -= 1

    def close(self) -> None:
        self.closing = True

    # ------------------------------------------------------------ appends
    def has_room(self, size: int) -> bool:
        return self.queued_messages < self.max_messages and self.queued_bytes + size <= self.max_bytes

    def append(self, topic: str, partition: int, record: PendingRecord, size: int,
               has_callback: bool = True) -> tuple[bool, bool]:
        """Add a record; returns (a new batch was opened, a batch became full). Caller holds the lock."""
        dq = self.batches.get((topic, partition))
        if dq is None:
            dq = self.batches[(topic, partition)] = deque()
        opened = False
        b = dq[-1] if dq else None
        if b is None or b.full or b.attempts:
            t = time.monotonic()
            b = ProducerBatch(topic, partition, t, t + self.delivery_timeout)
            dq.append(b)
            opened = True
        b.records.append(record)
        b.size += size
        if has_callback:
            b.has_callbacks = True
        self.queued_messages += 1
        self.queued_bytes += size
        if b.size >= self.batch_size or len(b.records) >= self.batch_num:
            b.full = True
            return opened, True
        return opened, False

    def has_open_batch(self, topic: str, partition: int) -> bool:
        """Whether a record for this partition would join an existing batch. Caller holds the lock."""
        dq = self.batches.get((topic, partition))
        if not dq:
            return False
        b = dq[-1]
        return not b.full and not b.attempts

    def add_unpartitioned(self, topic: str, partition: int, record: PendingRecord, size: int) -> None:
        """Called by AIOProducer.produce for a record the sender partitions later."""
        self.unpartitioned.setdefault(topic, []).append((partition, record, size))
        self.queued_messages += 1
        self.queued_bytes += size

    # ------------------------------------------------------------ sender side
    def ready(self, now: float, leader_of: Callable[[str, int], int],
              node_ok: Callable[[int], bool]) -> tuple[set[int], float, bool]:
        """Brokers with something to send now, seconds until the next batch may be, and whether
        some partition has no known leader. Caller holds the lock."""
        ready: set[int] = set()
        next_in = float("inf")
        unknown = False
        force = self.flushing > 0 or self.closing
        linger = self.linger
        for (topic, partition), dq in self.batches.items():
            if not dq:
                continue
            leader = leader_of(topic, partition)
            if leader < 0:
                unknown = True
                continue
            if leader in ready:
                continue
            b = dq[0]
            if b.retry_at > now:
                next_in = min(next_in, b.retry_at - now)
                continue
            if b.full or len(dq) > 1 or force or b.attempts:
                if node_ok(leader):
                    ready.add(leader)
                continue
            wait = b.created + linger - now
            if wait <= 0:
                if node_ok(leader):
                    ready.add(leader)
            else:
                next_in = min(next_in, wait)
        return ready, next_in, unknown

    def drain(self, node: int, max_size: int, leader_of: Callable[[str, int], int], now: float,
              can_send: Callable[[ProducerBatch], bool], start: int = 0) -> list[ProducerBatch]:
        """Up to one batch per partition led by ``node``, within ``max_size`` bytes. Caller holds the lock."""
        out: list[ProducerBatch] = []
        size = 0
        keys = [k for k, dq in self.batches.items() if dq]
        if not keys:
            return out
        n = len(keys)
        for i in range(n):
            topic, partition = keys[(start + i) % n]
            if leader_of(topic, partition) != node:
                continue
            dq = self.batches[(topic, partition)]
            b = dq[0]
            if b.retry_at > now:
                continue
            if out and size + b.size > max_size:
                break
            if not can_send(b):
                continue
            dq.popleft()
            b.full = True
            out.append(b)
            size += b.size
        return out

    def reenqueue(self, batch: ProducerBatch) -> None:
        """Put a batch being retried back at the head of its partition, in sequence order."""
        dq = self.batches.setdefault((batch.topic, batch.partition), deque())
        if batch.base_sequence >= 0:
            i = 0
            while i < len(dq) and 0 <= dq[i].base_sequence < batch.base_sequence:
                i += 1
            dq.insert(i, batch)
        else:
            dq.appendleft(batch)

    def expired(self, now: float) -> list[ProducerBatch]:
        """Queued batches past delivery.timeout.ms; removed. Caller holds the lock."""
        out = []
        for dq in self.batches.values():
            while dq and dq[0].deadline <= now:
                b = dq.popleft()
                b.full = True  # out of its queue: no more appends
                out.append(b)
        return out

    def uncount(self, size: int) -> None:
        """Take back one record of ``size`` counted as queued (it is appended again, and
        counted again, once its partition is known). Caller holds the lock."""
        self.queued_messages -= 1
        self.queued_bytes -= size

    def release(self, batch: ProducerBatch) -> None:
        """Called by the producer when a batch is done, to free its bytes."""
        self.queued_messages -= len(batch.records)
        self.queued_bytes -= batch.size - BATCH_OVERHEAD

    def has_pending(self, topic: str, partition: int) -> bool:
        dq = self.batches.get((topic, partition))
        return bool(dq)

    def all_batches(self) -> Iterable[ProducerBatch]:
        """Read by the producer under the lock: every batch queued (retries included)."""
        for dq in self.batches.values():
            yield from dq

    def empty(self) -> bool:
        return not any(self.batches.values()) and not any(self.unpartitioned.values())
