"""The blocking API, shaped like confluent-kafka's: the asyncio clients on a background thread.

Each client owns an event loop on a daemon thread. The hot paths do not cross threads per
call: ``Producer.produce()`` appends to the accumulator under its lock and wakes the sender
only when a batch opens or fills; ``Consumer.poll()`` takes from the fetch buffer the loop
fills. Everything else runs on the loop and is waited for.

Callbacks run on the application's thread, as in confluent-kafka: delivery reports and
``on_commit`` from ``poll()``/``flush()``; rebalance callbacks from ``poll()`` (the loop
waits for them, so the group sees revocations before partitions move).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
import weakref
from collections import deque
from typing import Callable, Coroutine, Generic, TypeVar

from rivulet.client import errors as E
from rivulet.client.config import ClientConf, ConfigValue
from rivulet.client.loop import LoopThread, ThreadStopper
from rivulet.client.consumer.consumer import AIOConsumer
from rivulet.client.consumer.consumer import Handoff as ConsumerHandoff
from rivulet.client.producer.accumulator import ProducerBatch
from rivulet.client.producer.producer import AIOProducer, Handoff
from rivulet.client.share.consumer import AIOShareConsumer
from rivulet.client.stats import run_stats_cb
from rivulet.client.types import ClusterMetadata, ConsumerGroupMetadata, Headers, Message, Payload, TopicPartition

log = logging.getLogger("rivulet.client")
T = TypeVar("T")
R = TypeVar("R")


def _timeout(t: float | None) -> float | None:
    """confluent-kafka spells "forever" as -1 or None."""
    return None if t is None or t < 0 else t


def _call_error_cb(aio: AIOProducer, err: E.KafkaError) -> int:
    E.call_error_cb(aio.error_cb, err)
    return 1


def _call_stats_cb(aio: AIOProducer, doc: str) -> int:
    return run_stats_cb(aio.stats_cb, doc)


class _Inbox(Generic[R]):
    """What a blocking client's loop hands the application's thread, for poll() and the like to
    run there: (function, arguments), the function taking first what the client serves it with.
    Kept apart from the client so that the loop's tasks do not refer back to it: a client the
    application drops without close() is then freed at once, and its finalizer stops the thread
    (as confluent-kafka's destructor does)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.queue: deque[tuple[Callable[..., R], tuple]] = deque()

    def put(self, fn: Callable[..., R], *args: object) -> None:
        self.queue.append((fn, args))
        self.notify()

    def notify(self) -> None:
        with self.cond:
            self.cond.notify_all()


class _ProducerInbox(_Inbox[int]):
    """The Producer's: functions of its AIOProducer, each returning the events it served."""

    def report(self, batch: ProducerBatch, base_offset: int, log_append_time: int, err: E.KafkaError | None) -> None:
        self.put(AIOProducer.deliver, batch, base_offset, log_append_time, err)

    def error(self, err: E.KafkaError) -> None:
        self.put(_call_error_cb, err)

    def stats(self, doc: str) -> None:
        self.put(_call_stats_cb, doc)


class Producer:
    """A Kafka producer with confluent-kafka's API.

        p = Producer({"bootstrap.servers": "localhost:9092"})
        p.produce("topic", b"value", key=b"key", on_delivery=lambda err, msg: ...)
        p.poll(0)
        p.flush()
    """

    def __init__(self, conf: ClientConf | None = None, **kwargs: ConfigValue) -> None:
        inbox = _ProducerInbox()
        self._cond = inbox.cond
        self._reports = inbox.queue
        # First, so that a configuration it refuses raises before a thread is started.
        self._aio = AIOProducer(conf, handoff=Handoff(inbox.cond, inbox.report, inbox.error, inbox.stats), **kwargs)
        self._lt = LoopThread("rivulet-producer")
        self._finalizer = weakref.finalize(self, ThreadStopper(self._lt, self._aio))
        self._closed = False
        self._lt.run(self._aio.start())

    def produce(self, topic: str, value: Payload = None, key: Payload = None, partition: int | None = -1,
                on_delivery: Callable | None = None, timestamp: int | None = 0, headers: Headers = None,
                callback: Callable | None = None) -> None:
        """Queue a record. The delivery report comes to ``on_delivery(err, msg)`` from poll()/flush().
        Raises BufferError when the queue is full: poll() and try again."""
        self._aio.produce(topic, value, key, partition, on_delivery, timestamp, headers, callback)

    def _serve(self) -> int:
        n = 0
        reports = self._reports
        aio = self._aio
        while reports:
            fn, args = reports.popleft()
            n += fn(aio, *args)
        return n

    def poll(self, timeout: float | None = None) -> int:
        """Serve delivery reports, waiting up to ``timeout`` seconds for one; returns how many."""
        n = self._serve()
        timeout = _timeout(timeout)
        if n or timeout == 0:
            return n
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._reports:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                if deadline is None and self._aio.outstanding <= 0:
                    break
                self._cond.wait(left if left is not None else 0.5)
        return self._serve()

    def flush(self, timeout: float | None = None) -> int:
        """Send everything now and wait for every delivery report; returns how many are still
        outstanding (0 unless the timeout passed)."""
        timeout = _timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        aio = self._aio
        aio.acc.begin_flush()
        try:
            aio._wake()
            while True:
                self._serve()
                if aio.outstanding <= 0:
                    return 0
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return aio.outstanding
                with self._cond:
                    if not self._reports and aio.outstanding > 0:
                        self._cond.wait(0.1 if left is None else min(left, 0.1))
        finally:
            aio.acc.end_flush()

    def __len__(self) -> int:
        return max(0, self._aio.outstanding)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        resp = self._lt.run(self._aio.client.fetch_metadata(None if topic is None else [topic]), _timeout(timeout))
        return ClusterMetadata.from_response(resp)

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        """Fail queued (``_PURGE_QUEUE``) and/or in-flight (``_PURGE_INFLIGHT``) records; their
        delivery reports come from the next poll()/flush(). ``blocking=False`` does not wait."""
        if blocking:
            self._lt.call(self._aio.purge, in_queue, in_flight)
        else:
            self._lt.loop.call_soon_threadsafe(self._aio.purge, in_queue, in_flight)

    # ------------------------------------------------------------ transactions
    def _txn_run(self, coro: Coroutine[object, object, T], timeout: float | None) -> T:
        # The coroutine keeps its own deadline; this one only guards against a hang.
        return self._lt.run(coro, None if timeout is None else timeout + 5)

    def init_transactions(self, timeout: float | None = None) -> None:
        """Register the transactional id with its coordinator, fencing older producers with it."""
        timeout = _timeout(timeout)
        self._txn_run(self._aio.init_transactions(timeout), timeout)

    def begin_transaction(self) -> None:
        self._aio.begin_transaction()

    def send_offsets_to_transaction(self, positions: list[TopicPartition], group_metadata: ConsumerGroupMetadata,
                                    timeout: float | None = None) -> None:
        """Commit ``positions`` (the next offsets to consume) for the group of ``group_metadata``
        (``Consumer.consumer_group_metadata()``) as part of the transaction."""
        timeout = _timeout(timeout)
        self._txn_run(self._aio.send_offsets_to_transaction(positions, group_metadata, timeout), timeout)

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Flush (serving delivery reports), then commit the transaction."""
        timeout = _timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        txn = self._aio._txn_manager()
        txn._require("in transaction", what="commit_transaction")
        self.flush(timeout)
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            self._txn_run(self._aio.commit_transaction(left), left)
        finally:
            self._serve()

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Purge what is queued, wait for what is in flight, then abort the transaction."""
        timeout = _timeout(timeout)
        try:
            self._txn_run(self._aio.abort_transaction(timeout), timeout)
        finally:
            self._serve()

    def close(self, timeout: float | None = None) -> int:
        """Flush, then stop the client's thread. Returns the records left undelivered."""
        if self._closed:
            return 0
        left = self.flush(timeout)
        self._closed = True
        try:
            left = max(left, self._lt.run(self._aio.close(0)))
        finally:
            self._serve()
            self._finalizer()
        return left

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _run_rebalance_cb(c: Consumer, cb: Callable, partitions: list[TopicPartition],
                      done: concurrent.futures.Future[None]) -> None:
    try:
        cb(c, partitions)
    finally:
        if not done.done():  # else the loop stopped waiting
            done.set_result(None)


def _call_on_commit(c: Consumer, err: E.KafkaError | None, partitions: list[TopicPartition]) -> None:
    on_commit = c._aio.on_commit
    if on_commit is not None:
        on_commit(err, partitions)


def _call_consumer_error_cb(c: Consumer, err: E.KafkaError) -> None:
    if c._aio.error_cb is not None:
        c._aio.error_cb(err)


def _call_consumer_stats_cb(c: Consumer, doc: str) -> None:
    if c._aio.stats_cb is not None:
        c._aio.stats_cb(doc)


class _ConsumerInbox(_Inbox[None]):
    """The Consumer's: functions of the Consumer, which rebalance callbacks are given."""

    async def listener(self, cb: Callable, partitions: list[TopicPartition]) -> None:
        """Run a rebalance callback from poll(); the loop waits until it has run."""
        done: concurrent.futures.Future[None] = concurrent.futures.Future()
        self.put(_run_rebalance_cb, cb, partitions, done)
        await asyncio.wrap_future(done)

    def commit_done(self, err: E.KafkaError | None, partitions: list[TopicPartition]) -> None:
        self.put(_call_on_commit, err, partitions)

    def error(self, err: E.KafkaError) -> None:
        self.put(_call_consumer_error_cb, err)

    def stats(self, doc: str) -> None:
        self.put(_call_consumer_stats_cb, doc)


class Consumer:
    """A Kafka consumer with confluent-kafka's API.

        c = Consumer({"bootstrap.servers": "...", "group.id": "g", "auto.offset.reset": "earliest"})
        c.subscribe(["topic"])
        while True:
            msg = c.poll(1.0)
            if msg is None: continue
            if msg.error(): ...
            process(msg.value())
        c.close()
    """

    def __init__(self, conf: ClientConf | None = None, **kwargs: ConfigValue) -> None:
        inbox = _ConsumerInbox()
        self._cond = inbox.cond
        self._events = inbox.queue
        # First, so that a configuration it refuses raises before a thread is started.
        aio = self._aio = AIOConsumer(conf, handoff=ConsumerHandoff(
            inbox.notify, inbox.listener, inbox.commit_done, inbox.error, inbox.stats), **kwargs)
        self._lt = LoopThread("rivulet-consumer")
        self._finalizer = weakref.finalize(self, ThreadStopper(self._lt, aio))
        self._closed = False
        self._lt.run(aio.start())

    # ------------------------------------------------------------ crossing threads
    def _serve_events(self) -> None:
        events = self._events
        while events:
            fn, args = events.popleft()
            try:
                fn(self, *args)
            except Exception:
                log.exception("consumer callback raised")

    def _wait(self, coro: Coroutine[object, object, T], timeout: float | None = None) -> T:
        """Run on the loop and wait, serving callbacks meanwhile (a rebalance may need them)."""
        fut = self._lt.submit(coro)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self._serve_events()
            try:
                return fut.result(0.02)
            except concurrent.futures.TimeoutError:
                if deadline is not None and time.monotonic() > deadline:
                    fut.cancel()
                    raise E.KafkaException(E.local("_TIMED_OUT", "operation timed out")) from None

    def _call(self, fn: Callable[..., T], *args: object) -> T:
        if self._closed:
            raise RuntimeError("Consumer closed")
        if self._aio._in_rebalance_cb:
            return fn(*args)  # inside on_assign/on_revoke: the loop is waiting for us
        return self._lt.call(fn, *args)

    # ------------------------------------------------------------ subscription
    def subscribe(self, topics: list[str], on_assign: Callable | None = None, on_revoke: Callable | None = None,
                  on_lost: Callable | None = None) -> None:
        self._call(self._aio.subscribe, topics, on_assign, on_revoke, on_lost)

    def unsubscribe(self) -> None:
        if self._closed:
            raise RuntimeError("Consumer closed")
        self._wait(self._aio.unsubscribe())

    def assign(self, partitions: list[TopicPartition]) -> None:
        self._call(self._aio.assign, partitions)

    def unassign(self) -> None:
        self._call(self._aio.unassign)

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self._call(self._aio.incremental_assign, partitions)

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        self._call(self._aio.incremental_unassign, partitions)

    def assignment(self) -> list[TopicPartition]:
        return self._aio.assignment()

    # ------------------------------------------------------------ consuming
    def poll(self, timeout: float | None = None) -> Message | None:
        """The next message (or error event), waiting up to ``timeout`` seconds; None if none came."""
        msgs = self._consume(1, -1 if timeout is None else timeout)
        return msgs[0] if msgs else None

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        """Up to ``num_messages`` messages, waiting up to ``timeout`` seconds for the first."""
        return self._consume(num_messages, timeout)

    def _consume(self, num_messages: int, timeout: float | None) -> list[Message]:
        if self._closed:
            raise RuntimeError("Consumer closed")
        aio = self._aio
        buf = aio.buffer

        def take(first: bool) -> list[Message]:
            """Serve the callbacks due, raise a pending error, then take what is buffered."""
            if self._events:
                self._serve_events()
            aio._raise_pending()
            if first:
                aio._mark_poll()
            return buf.take(num_messages) if buf else []

        out = take(True)
        if out:
            return out
        timeout = _timeout(timeout)
        if timeout == 0:
            return []
        deadline = None if timeout is None else time.monotonic() + timeout
        aio._enter_poll()
        try:
            while True:
                with self._cond:
                    if not buf and not self._events and not aio._raise:
                        left = None if deadline is None else deadline - time.monotonic()
                        if left is not None and left <= 0:
                            return []
                        self._cond.wait(left if left is not None else 1.0)
                out = take(False)
                if out:
                    return out
                if deadline is not None and time.monotonic() >= deadline:
                    return []
        finally:
            aio._leave_poll()

    # ------------------------------------------------------------ positions and commits
    def seek(self, partition: TopicPartition) -> None:
        self._call(self._aio.seek, partition)

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return self._aio.position(partitions)

    def pause(self, partitions: list[TopicPartition]) -> None:
        self._call(self._aio.pause, partitions)

    def resume(self, partitions: list[TopicPartition]) -> None:
        self._call(self._aio.resume, partitions)

    def store_offsets(self, message: Message | None = None, offsets: list[TopicPartition] | None = None) -> None:
        self._aio.store_offsets(message, offsets)

    def commit(self, message: Message | None = None, offsets: list[TopicPartition] | None = None,
               asynchronous: bool = True) -> list[TopicPartition] | None:
        """Commit consumed positions (or the message's / the given offsets). Asynchronous by
        default, as in confluent-kafka; the result then goes to ``on_commit`` from poll()."""
        if self._closed:
            raise RuntimeError("Consumer closed")
        return self._wait(self._aio.commit(message, offsets, asynchronous))

    def committed(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        return self._wait(self._aio.committed(partitions, _timeout(timeout)))

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float | None = None,
                              cached: bool = False) -> tuple[int, int]:
        return self._wait(self._aio.get_watermark_offsets(partition, _timeout(timeout), cached))

    def offsets_for_times(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        return self._wait(self._aio.offsets_for_times(partitions, _timeout(timeout)))

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        return self._wait(self._aio.list_topics(topic, _timeout(timeout)))

    def consumer_group_metadata(self) -> ConsumerGroupMetadata:
        """The group's id, generation and member id, for Producer.send_offsets_to_transaction()."""
        return self._aio.consumer_group_metadata()

    def memberid(self) -> str | None:
        return self._aio.memberid()

    def close(self) -> None:
        """Commit (with auto-commit), run on_revoke, leave the group and stop the thread."""
        if self._closed:
            return
        try:
            self._wait(self._aio.close(), 60)
        finally:
            self._closed = True
            self._serve_events()
            self._finalizer()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ShareConsumer:
    """A share group member with confluent-kafka's ShareConsumer API.

        c = ShareConsumer({"bootstrap.servers": "...", "group.id": "queue"})
        c.subscribe(["topic"])
        while True:
            for msg in c.poll(1.0):
                if msg.error(): ...
                process(msg.value())      # accepted by the next poll (implicit mode)
        c.close()

    With ``share.acknowledgement.mode=explicit`` each record is acknowledged with
    ``acknowledge(msg, AcknowledgeType.RELEASE)`` and the like before the next poll. The
    acknowledgement commit callback runs on the application's thread, from poll, the commits
    and close.
    """

    def __init__(self, conf: ClientConf | None = None, **kwargs: ConfigValue) -> None:
        lt = self._lt = LoopThread("rivulet-share-consumer")
        try:
            self._aio = lt.run(_make_share_consumer(conf, kwargs))
        except BaseException:
            lt.stop()
            raise
        self._finalizer = weakref.finalize(self, ThreadStopper(lt, self._aio))
        self._callback: Callable | None = None

    def _run(self, coro: Coroutine[object, object, T]) -> T:
        self._check_open(coro)
        try:
            return self._lt.run(coro)
        finally:
            self._serve_callbacks()

    def _call(self, fn: Callable[..., T], *args: object) -> T:
        self._check_open()
        return self._lt.call(fn, *args)

    def _check_open(self, coro: Coroutine | None = None) -> None:
        if not self._lt.thread.is_alive():
            if coro is not None:
                coro.close()
            raise E.KafkaException(E.local("_STATE", "the share consumer is closed"))

    def _serve_callbacks(self) -> None:
        reports = self._lt.call(self._aio.take_reports) if self._lt.thread.is_alive() else []
        if self._callback is not None:
            for offsets, exc in reports:
                try:
                    self._callback(offsets, exc)
                except Exception:
                    log.exception("acknowledgement commit callback raised")

    def subscribe(self, topics: list[str]) -> None:
        """Replaces the subscription; an empty list is unsubscribe(), as in confluent-kafka."""
        if not topics:
            self.unsubscribe()
        else:
            self._call(self._aio.subscribe, topics)

    def subscription(self) -> list[str]:
        return self._call(self._aio.subscription)

    def unsubscribe(self) -> None:
        self._run(self._aio.unsubscribe())

    def poll(self, timeout: float | None = -1) -> list[Message]:
        """A batch of acquired records (and error events); empty if none came in ``timeout`` s."""
        return self._run(self._aio.poll(_timeout(timeout)))

    def acknowledge(self, message: Message, ack_type: int = 1) -> None:
        self._call(self._aio.acknowledge, message, ack_type)

    def acknowledge_offset(self, topic: str, partition: int, offset: int, ack_type: int = 1) -> None:
        self._call(self._aio.acknowledge_offset, topic, partition, offset, ack_type)

    def set_acknowledgement_commit_callback(self, callback: Callable | None) -> None:
        self._call(self._aio.set_acknowledgement_commit_callback, None)
        self._callback = callback

    def commit_sync(self, timeout: float | None = 60.0) -> dict[TopicPartition, E.KafkaException | None]:
        return self._run(self._aio.commit_sync(_timeout(timeout)))

    def commit_async(self) -> None:
        self._run(self._aio.commit_async())

    def close(self) -> None:
        """Send the acknowledgements waiting, release what is held, leave the group."""
        if not self._lt.thread.is_alive() or self._aio._closed:
            return
        try:
            self._run(self._aio.close())
        finally:
            self._finalizer()

    def __enter__(self) -> ShareConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _make_share_consumer(conf: ClientConf | None, kwargs: dict[str, ConfigValue]) -> AIOShareConsumer:
    # On the loop: its events belong to it. The callbacks run on the application's thread.
    c = AIOShareConsumer(conf, dispatch_callbacks=False, **kwargs)
    await c.start()
    return c
