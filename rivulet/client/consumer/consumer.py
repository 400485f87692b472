"""The asyncio consumer: subscribe or assign, poll, commit; the Java client's poll loop in tasks.

Java's ``KafkaConsumer.poll()`` does, in the caller's thread: coordinator.poll() (find the
coordinator, join and sync if needed, auto-commit), updateFetchPositions() for partitions
without a position, then returns buffered records or sends fetches and waits. Here the same
steps run as tasks on the event loop, so that prefetching continues while the application
works through what it was given:

* the main task: coordinator discovery, (re)joining, updateFetchPositions (committed offset
  from OffsetFetch, else ``auto.offset.reset`` through ListOffsets, ``none`` is an error);
* the Fetcher's task: one Fetch in flight per broker while the buffer has room;
* the heartbeat task (in the coordinator) and the auto-commit task.

``poll()``/``consume()`` only take from the buffer, advancing positions, and record that the
application is alive (max.poll.interval.ms). Rebalance callbacks (``on_assign``, ``on_revoke``,
``on_lost``) are awaited by the main task before the membership moves on, as Java's listener
is; calling ``assign()`` or ``incremental_assign()`` inside ``on_assign`` overrides the
assignment's starting offsets, as in confluent-kafka.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from dataclasses import dataclass
from typing import Awaitable, Callable, Iterable

from rivulet.client import errors as E
from rivulet.client.wakeup import Waker
from rivulet.client.consumer.assignors import make_assignors
from rivulet.client.client import KafkaClient, cancel_and_wait, wait_event, wait_future
from rivulet.client.config import ClientConf, ConfigValue, ConsumerConfig, resolve
from rivulet.client.consumer.coordinator import STABLE, ConsumerCoordinator, GroupConsumer
from rivulet.client.consumer.membership import ConsumerMembership
from rivulet.client.consumer.fetcher import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, Fetcher
from rivulet.client.stats import ClientStats, emit_every, run_stats_cb
from rivulet.client.consumer.subscription import (
    WAIT_FOR_SEEK,
    OffsetAndMetadata,
    SubscriptionState,
    TopicPartitionState,
)
from rivulet.client.types import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    OFFSET_STORED,
    ClusterMetadata,
    ConsumerGroupMetadata,
    Message,
    TopicPartition,
)
from rivulet.common.types import TopicPartition as TP

log = logging.getLogger("rivulet.consumer")


def _partitions(offsets: dict[TP, OffsetAndMetadata]) -> list[TopicPartition]:
    """Offsets as a commit reports them to the application."""
    return [TopicPartition(t, p, om.offset, om.metadata, om.leader_epoch) for (t, p), om in offsets.items()]

class NoOffsetForPartitionError(E.KafkaException):
    """No committed offset and ``auto.offset.reset`` is ``none`` (Java's NoOffsetForPartitionException)."""

    def __init__(self, partitions: list[TP]) -> None:
        names = ", ".join(f"{t}-{p}" for t, p in partitions)
        super().__init__(E.local("_AUTO_OFFSET_RESET", f"no committed offset for {names} and "
                                 "auto.offset.reset is none"))
        self.partitions = [TopicPartition(t, p) for t, p in partitions]


def _tps(partitions: Iterable[TopicPartition] | TopicPartition) -> list[TopicPartition]:
    if isinstance(partitions, TopicPartition):
        return [partitions]
    out = list(partitions)
    for p in out:
        if not isinstance(p, TopicPartition):
            raise TypeError(f"expected TopicPartition, got {type(p).__name__}")
    return out


@dataclass(frozen=True)
class Handoff:
    """What a consumer hands to the application's thread rather than running on the loop's
    (the blocking Consumer serves it from poll()): ``notify`` when records or an error event are
    buffered, rebalance callbacks (``listener``, awaited by the loop), asynchronous commits'
    outcomes for on_commit, errors for error_cb, statistics for stats_cb."""

    notify: Callable[[], None]
    listener: Callable[[Callable, list[TopicPartition]], Awaitable[None]]
    commit_done: Callable[[E.KafkaError | None, list[TopicPartition]], None]
    error: Callable[[E.KafkaError], None]
    stats: Callable[[str], None]


class AIOConsumer:
    """An asyncio Kafka consumer with confluent-kafka's method names.

        c = AIOConsumer({"bootstrap.servers": "...", "group.id": "g", "auto.offset.reset": "earliest"})
        await c.start()
        c.subscribe(["topic"])
        async for msg in c: ...          # or: msg = await c.poll(1.0)
        await c.close()
    """

    def __init__(self, conf: ClientConf | None = None, *, handoff: Handoff | None = None,
                 **kwargs: ConfigValue) -> None:
        self.conf: ConsumerConfig = resolve(conf, "consumer", kwargs)
        c = self.conf
        self.error_cb: Callable | None = c["error_cb"]
        self.stats_cb: Callable[[str], object] | None = c["stats_cb"]
        self.on_commit: Callable | None = c["on_commit"]
        self._ready = asyncio.Event()
        # Without a handoff, callbacks run on the loop (asyncio API).
        self._on_error: Callable[[E.KafkaError], None] = handoff.error if handoff else self._run_error_cb
        self._on_stats: Callable[[str], None] = handoff.stats if handoff else self._run_stats_cb
        self._invoke_listener: Callable[[Callable, list[TopicPartition]], Awaitable[None]] = \
            handoff.listener if handoff else self._run_listener_here
        self._commit_done: Callable[[E.KafkaError | None, list[TopicPartition]], None] = \
            handoff.commit_done if handoff else self._run_on_commit
        self.subs = SubscriptionState(c["auto.offset.reset"])
        # A pattern subscription needs every topic's metadata (Java's ConsumerMetadata asks its
        # SubscriptionState the same).
        self.client = KafkaClient(c, self._on_error if self.error_cb is not None else None,
                                  all_topics=lambda: self.subs.pattern is not None)
        self.group_id: str | None = c["group.id"]
        self.stats_interval = c["statistics.interval.ms"] / 1000
        self.stats = ClientStats(c["client.id"], "consumer")
        self.fetcher = Fetcher(self.client, self.subs, c, self.stats, self._on_fetch_error,
                               handoff.notify if handoff else self._ready.set)
        self.buffer = self.fetcher.buffer
        self.auto_commit: bool = c["enable.auto.commit"] and self.group_id is not None
        self.auto_store: bool = c["enable.auto.offset.store"]
        self.auto_commit_interval = c["auto.commit.interval.ms"] / 1000
        self.backoff = c["retry.backoff.ms"] / 1000
        self._stored: dict[TP, OffsetAndMetadata] = {}
        self._on_assign: Callable | None = None
        self._on_revoke: Callable | None = None
        self._on_lost: Callable | None = None
        self._in_rebalance_cb = False
        self._rebalance_override: list[TopicPartition] | None = None
        self._raise: list[E.KafkaException] = []
        self._last_poll = time.monotonic()
        self._in_poll = False
        self._waker = Waker()
        self._wake_ev = self._waker.event
        # Held while joining and syncing; close() waits for it so it commits as a member.
        self._rebalancing = asyncio.Lock()
        self.coordinator: ConsumerCoordinator | None = None
        if self.group_id and c["group.protocol"] == "consumer":
            self.coordinator = ConsumerMembership(_GroupHooks(self), self.client, self.subs, c)
        elif self.group_id:
            self.coordinator = ConsumerCoordinator(_GroupHooks(self), self.client, self.subs, c,
                                                   make_assignors(c["partition.assignment.strategy"]))
        self.loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task] = []
        # Asynchronous commits still in flight: a synchronous commit waits for them first, so an
        # older commit can never land after a newer one.
        self._async_commits: set[asyncio.Task] = set()
        self._started = False
        self._closed = False

    def _run_stats_cb(self, doc: str) -> None:
        run_stats_cb(self.stats_cb, doc)

    def stats_json(self) -> str:
        """librdkafka's statistics document for this consumer, as stats_cb gets it."""
        extra: dict[TP, dict[str, object]] = {}
        for tp, st in list(self.subs.assignment.items()):
            committed = st.committed.offset if st.committed is not None else OFFSET_INVALID
            hi = st.high_watermark if st.high_watermark is not None else OFFSET_INVALID
            ls = st.last_stable_offset if st.last_stable_offset is not None else hi
            end = ls if self.fetcher.read_committed else hi
            extra[tp] = {
                "fetch_state": "stopped" if st.paused else "active",
                "app_offset": st.position if st.position is not None else OFFSET_INVALID,
                "committed_offset": committed, "hi_offset": hi, "ls_offset": ls,
                "lo_offset": st.log_start_offset if st.log_start_offset is not None else OFFSET_INVALID,
                "consumer_lag": end - committed if end >= 0 and committed >= 0 else -1,
            }
        return self.stats.render(self.client.cluster, lambda node: self.client.open_connection(node) is not None,
                                 0, 0, extra=extra)

    def _run_error_cb(self, err: E.KafkaError) -> None:
        E.call_error_cb(self.error_cb, err)

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        self.loop = asyncio.get_running_loop()
        self._waker.bind(self.loop)
        self.client.request_update()
        self.fetcher.start()
        self._tasks.append(self.loop.create_task(self._main()))
        if self.auto_commit and self.auto_commit_interval > 0:
            self._tasks.append(self.loop.create_task(self._auto_commit_loop()))
        if self.stats_cb is not None and self.stats_interval > 0:
            self._tasks.append(self.loop.create_task(
                emit_every(self.stats_interval, self.stats_json, self._on_stats, lambda: self._closed)))

    async def __aenter__(self) -> AIOConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __aiter__(self) -> AIOConsumer:
        return self

    async def __anext__(self) -> Message:
        while not self._closed:
            m = await self.poll(1.0)
            if m is not None:
                return m
        raise StopAsyncIteration

    def wake(self) -> None:
        """Let the main task look again (coordinator, joins, positions); any thread."""
        self._waker.wake()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("Consumer closed")

    # ------------------------------------------------------------ subscription
    def subscribe(self, topics: list[str], on_assign: Callable | None = None, on_revoke: Callable | None = None,
                  on_lost: Callable | None = None) -> None:
        """Join the group for these topics (``^``-prefixed entries are regular expressions)."""
        self._check_open()
        if not self.group_id:
            raise E.KafkaException(E.local("_INVALID_ARG", "subscribe() requires group.id"))
        if isinstance(topics, str) or not all(isinstance(t, str) and t for t in topics):
            raise TypeError("topics must be a list of non-empty str")
        try:
            self.subs.subscribe(topics)
        except ValueError as e:
            raise E.KafkaException(E.local("_STATE", str(e))) from None
        self._on_assign, self._on_revoke, self._on_lost = on_assign, on_revoke, on_lost
        self.client.want_topics(self.subs.subscription)
        if self.loop is not None:  # else start() asks for metadata
            self.client.request_update()
        self.coordinator.request_rejoin("subscription changed")

    async def unsubscribe(self) -> None:
        """Give up the subscription: commit (with auto-commit), on_revoke, leave the group."""
        self._check_open()
        c = self.coordinator
        if c is not None and self.subs.partitions_auto_assigned:
            async with self._rebalancing:
                if self.subs.assignment and c.generation >= 0:
                    await self._maybe_auto_commit_sync()
                if self.subs.assignment:
                    await self._partitions_gone(list(self.subs.assignment), lost=c.generation < 0)
                await c.maybe_leave_group("the consumer unsubscribed")
                c.rejoin_needed = True
        self.subs.unsubscribe()
        self.buffer.clear()

    def assign(self, partitions: list[TopicPartition]) -> None:
        """Consume exactly these partitions (no group membership), from their offsets if given."""
        self._check_open()
        tps = _tps(partitions)
        if self._in_rebalance_cb:
            self._rebalance_override = tps
            return
        try:
            self.subs.assign_from_user([(p.topic, p.partition) for p in tps])
        except ValueError as e:
            raise E.KafkaException(E.local("_STATE", str(e))) from None
        self.client.want_topics({p.topic for p in tps})
        self._apply_offsets(tps)
        self._changed()

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self._check_open()
        tps = _tps(partitions)
        if self._in_rebalance_cb:
            self._rebalance_override = tps
            return
        self.subs.incremental_assign_from_user([(p.topic, p.partition) for p in tps])
        self.client.want_topics({p.topic for p in tps})
        self._apply_offsets(tps)
        self._changed()

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        self._check_open()
        if self._in_rebalance_cb:
            return
        self.subs.remove_partitions([(p.topic, p.partition) for p in _tps(partitions)])
        self._changed()

    def unassign(self) -> None:
        self._check_open()
        if self._in_rebalance_cb:
            return
        self.subs.unassign()
        self._changed()

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in self.subs.assignment]

    def _changed(self) -> None:
        if self.loop is not None:
            if self._waker.on_loop_thread():
                self.client.request_update()
            else:
                self.loop.call_soon_threadsafe(self.client.request_update)
        self.fetcher.wake()
        self.wake()

    def _apply_offsets(self, tps: list[TopicPartition]) -> None:
        for p in tps:
            st = self.subs.assignment.get((p.topic, p.partition))
            if st is None:
                continue
            self._seek_state(st, p.offset)

    def _seek_state(self, st: TopicPartitionState, offset: int) -> None:
        if offset >= 0:
            st.seek(offset)
        elif offset == OFFSET_BEGINNING:
            st.await_reset("earliest")
        elif offset == OFFSET_END:
            st.await_reset("latest")
        elif offset in (OFFSET_STORED, OFFSET_INVALID):
            st.await_committed()
        else:
            raise E.KafkaException(E.local("_INVALID_ARG", f"invalid offset {offset}"))

    # ------------------------------------------------------------ rebalance callbacks
    async def _run_listener_here(self, cb: Callable, partitions: list[TopicPartition]) -> None:
        """Run a rebalance callback (plain or async) on the loop."""
        r = cb(self, partitions)
        if inspect.isawaitable(r):
            await r

    async def _run_listener(self, cb: Callable | None, partitions: list[TopicPartition]) -> list[TopicPartition] | None:
        if cb is None:
            return None
        self._rebalance_override = None
        self._in_rebalance_cb = True
        try:
            await self._invoke_listener(cb, partitions)
        except Exception:
            log.exception("rebalance callback raised")
        finally:
            self._in_rebalance_cb = False
        return self._rebalance_override

    async def _partitions_assigned(self, tps: list[TP], incremental: bool) -> None:
        objs = [TopicPartition(t, p) for t, p in tps]
        override = await self._run_listener(self._on_assign, objs) if (tps or not incremental) else None
        chosen = [(p.topic, p.partition) for p in override] if override is not None and not incremental else tps
        if incremental:
            self.subs.add_partitions(chosen)
        else:
            self.subs.assign_from_subscribed(chosen)
        if override:
            self._apply_offsets(override)
        self._changed()

    def _fence(self, tps: Iterable[TP]) -> None:
        self.buffer.fence([st for tp in tps if (st := self.subs.assignment.get(tp)) is not None])

    async def _partitions_gone(self, tps: list[TP], lost: bool) -> None:
        self._fence(tps)
        objs = [TopicPartition(t, p) for t, p in tps]
        cb = self._on_lost if lost and self._on_lost is not None else self._on_revoke
        log.debug("%s %s", "losing" if lost else "revoking", tps)
        await self._run_listener(cb, objs)
        self.subs.remove_partitions(tps)
        for tp in tps:
            self._stored.pop(tp, None)
        self._changed()

    # ------------------------------------------------------------ the main task
    async def _main(self) -> None:
        while not self._closed:
            self._wake_ev.clear()
            try:
                await self._step()
            except asyncio.CancelledError:
                raise
            except NoOffsetForPartitionError as e:
                self._raise.append(e)
                self.buffer.notify()
            except E.KafkaException as e:
                log.warning("consumer: %s", e)
                self._report(e.error)
                await asyncio.sleep(self.backoff)
            except Exception as e:
                log.exception("consumer main task failed")
                self._report(E.KafkaError.from_exception(e))
                await asyncio.sleep(self.backoff)
            await wait_event(self._wake_ev, 0.5)

    async def _step(self) -> None:
        c = self.coordinator
        if c is not None and c.fatal is not None:
            return
        if c is not None and self.subs.partitions_auto_assigned:
            if self.subs.pattern is not None:
                self._refresh_pattern()
            if not c.poll_expired and (c.need_rejoin() or c.coordinator_unknown()):
                async with self._rebalancing:
                    await c.ensure_active_group()
        await self._update_fetch_positions()

    def _refresh_pattern(self) -> None:
        cluster = self.client.cluster
        if not cluster.all_topics_known:
            return
        if self.subs.update_pattern_matches(cluster.topics, self.conf["exclude.internal.topics"]):
            self.client.want_topics(self.subs.subscription)
            self.coordinator.request_rejoin("pattern matches changed")

    async def _update_fetch_positions(self) -> None:
        """updateFetchPositions: positions checked against a new leader's log (KIP-320), then
        committed offsets, then auto.offset.reset for the rest."""
        await self.fetcher.validate_positions()
        assignment = self.subs.assignment
        missing = [tp for tp, st in assignment.items() if st.position is None and st.reset_strategy != WAIT_FOR_SEEK]
        if not missing:
            return
        need_committed = [tp for tp in missing if assignment[tp].reset_strategy is None]
        if need_committed:
            epochs = {tp: assignment[tp].epoch for tp in need_committed}
            if self.coordinator is not None:
                committed = await self.coordinator.fetch_committed(need_committed)
            else:
                committed = {}
            for tp in need_committed:
                st = self.subs.assignment.get(tp)
                if st is None or st.epoch != epochs[tp] or st.position is not None or st.reset_strategy:
                    continue
                om = committed.get(tp)
                if om is not None:
                    log.debug("%s-%d: starting at committed offset %d", tp[0], tp[1], om.offset)
                    st.committed = om
                    st.seek_unvalidated(om.offset, om.leader_epoch)
                else:
                    st.await_reset(self.subs.default_reset)
        to_reset = [tp for tp, st in self.subs.assignment.items()
                    if st.position is None and st.reset_strategy not in (None, WAIT_FOR_SEEK)]
        no_reset = [tp for tp in to_reset if self.subs.assignment[tp].reset_strategy == "none"]
        for tp in no_reset:
            self.subs.assignment[tp].wait_for_seek()
        others = [tp for tp in to_reset if tp not in no_reset]
        if others:
            await self.fetcher.reset_offsets(others)
        self.fetcher.wake()
        if no_reset:
            raise NoOffsetForPartitionError(no_reset)

    def _on_fetch_error(self, tp: TP | None, err: E.KafkaError | None) -> None:
        if tp is None or err is None:
            self.wake()  # a partition awaits validation or reset
            return
        if err.code() in (E.KafkaError.OFFSET_OUT_OF_RANGE, E.LOCAL_CODES["_LOG_TRUNCATION"]):
            st = self.subs.assignment.get(tp)
            if st is not None:
                st.wait_for_seek()
        self.buffer.put_error(Message(tp[0], tp[1], error=err))

    def _report(self, err: E.KafkaError) -> None:
        """An error event for the application, returned by its next poll()."""
        self.buffer.put_error(Message(None, -1, error=err))

    # ------------------------------------------------------------ polling
    def _mark_poll(self) -> None:
        self._last_poll = time.monotonic()
        c = self.coordinator
        if c is not None and c.poll_resumed():
            self.wake()

    # Between them a poll waits for records: max.poll.interval.ms does not run meanwhile.
    def _enter_poll(self) -> None:
        self._in_poll = True

    def _leave_poll(self) -> None:
        self._in_poll = False
        self._last_poll = time.monotonic()

    def _raise_pending(self) -> None:
        if self._raise:
            raise self._raise.pop(0)

    async def poll(self, timeout: float | None = None) -> Message | None:
        """The next message or error event, waiting up to ``timeout`` seconds (None: forever)."""
        msgs = await self.consume(1, timeout)
        return msgs[0] if msgs else None

    async def consume(self, num_messages: int = 1, timeout: float | None = None) -> list[Message]:
        self._check_open()
        if not self._started:
            await self.start()
        self._raise_pending()
        self._mark_poll()
        buf = self.buffer
        if buf:
            return self._take(num_messages)
        if timeout is not None and timeout <= 0:
            return []
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        self._enter_poll()
        try:
            while True:
                self._ready.clear()
                if buf:
                    out = self._take(num_messages)
                    if out:
                        return out
                self._raise_pending()
                if deadline is None:
                    await self._ready.wait()
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    return []
                if not await wait_event(self._ready, left):
                    return []
        finally:
            self._leave_poll()

    def _take(self, n: int) -> list[Message]:
        return self.buffer.take(n)

    getmany = consume

    # ------------------------------------------------------------ positions
    def seek(self, partition: TopicPartition) -> None:
        """Fetch from ``partition.offset`` next (OFFSET_BEGINNING/OFFSET_END allowed)."""
        self._check_open()
        st = self.subs.assignment.get((partition.topic, partition.partition))
        if st is None:
            raise E.KafkaException(E.local("_STATE", f"{partition.topic}-{partition.partition} is not assigned"))
        self._seek_state(st, partition.offset)
        self.fetcher.wake()
        self.wake()

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        out = []
        for p in _tps(partitions):
            st = self.subs.assignment.get((p.topic, p.partition))
            pos = st.position if st is not None and st.position is not None else OFFSET_INVALID
            out.append(TopicPartition(p.topic, p.partition, pos))
        return out

    def pause(self, partitions: list[TopicPartition]) -> None:
        for p in _tps(partitions):
            st = self.subs.assignment.get((p.topic, p.partition))
            if st is not None and not st.paused:
                st.pause()

    def resume(self, partitions: list[TopicPartition]) -> None:
        for p in _tps(partitions):
            st = self.subs.assignment.get((p.topic, p.partition))
            if st is not None and st.paused:
                st.resume()
        self.fetcher.wake()

    def store_offsets(self, message: Message | None = None, offsets: list[TopicPartition] | None = None) -> None:
        """Offsets for the next (auto or argument-less) commit, when enable.auto.offset.store=false."""
        if message is not None:
            self._stored[(message.topic(), message.partition())] = OffsetAndMetadata(message.offset() + 1, None,
                                                                                        message.leader_epoch())
        for p in _tps(offsets or []):
            self._stored[(p.topic, p.partition)] = OffsetAndMetadata(p.offset, p.metadata, p.leader_epoch)

    def consumer_group_metadata(self) -> ConsumerGroupMetadata:
        """The group's id, generation and member id, for a transactional producer's
        send_offsets_to_transaction()."""
        if not self.group_id:
            raise E.KafkaException(E.local("_INVALID_ARG", "consumer_group_metadata() needs group.id"))
        c = self.coordinator
        return ConsumerGroupMetadata(self.group_id, c.generation if c is not None else -1,
                                     c.member_id if c is not None else "", self.conf["group.instance.id"])

    def memberid(self) -> str | None:
        return self.coordinator.member_id if self.coordinator is not None else None

    # ------------------------------------------------------------ commits
    def _current_offsets(self) -> dict[TP, OffsetAndMetadata]:
        if self.auto_store:
            return self.subs.all_consumed()
        stored = self._stored.copy()  # one C-level copy: the application's thread may be storing
        return {tp: om for tp, om in stored.items() if tp in self.subs.assignment}

    def _commit_targets(self, message: Message | None, offsets: list[TopicPartition] | None
                        ) -> dict[TP, OffsetAndMetadata]:
        if message is not None and offsets is not None:
            raise E.KafkaException(E.local("_INVALID_ARG", "commit() takes message or offsets, not both"))
        if message is not None:
            if message.error() is not None:
                raise E.KafkaException(E.local("_INVALID_ARG", "cannot commit an error message"))
            return {(message.topic(), message.partition()): OffsetAndMetadata(message.offset() + 1, None,
                                                                                message.leader_epoch())}
        if offsets is not None:
            return {(p.topic, p.partition): OffsetAndMetadata(p.offset, p.metadata, p.leader_epoch)
                    for p in _tps(offsets)}
        return self._current_offsets()

    async def commit(self, message: Message | None = None, offsets: list[TopicPartition] | None = None,
                     asynchronous: bool = False) -> list[TopicPartition] | None:
        """Commit the consumed positions (or the given ones). Waits unless ``asynchronous``."""
        self._check_open()
        if self.coordinator is None:
            raise E.KafkaException(E.local("_INVALID_ARG", "commit() requires group.id"))
        targets = self._commit_targets(message, offsets)
        if not targets:
            raise E.KafkaException(E.local("_NO_OFFSET", "no offsets to commit"))
        if asynchronous:
            task = self.loop.create_task(self._commit_reporting(targets))
            self._async_commits.add(task)
            task.add_done_callback(self._async_commits.discard)
            return None
        deadline = time.monotonic() + self.conf["request.timeout.ms"] / 1000
        await self._await_async_commits(deadline)
        await self.coordinator.commit(targets, deadline)
        return _partitions(targets)

    async def _await_async_commits(self, deadline: float) -> None:
        """Called before a synchronous commit: the asynchronous ones issued earlier complete first."""
        if self._async_commits:
            await asyncio.wait(set(self._async_commits), timeout=max(0.0, deadline - time.monotonic()))

    async def _commit_reporting(self, targets: dict[TP, OffsetAndMetadata]) -> None:
        """An asynchronous commit (commit(asynchronous=True), auto-commit): it waits for a coordinator
        but is sent once, as Kafka's commitAsync; a retried copy could land after a newer commit."""
        err = None
        try:
            await self.coordinator.commit(targets, time.monotonic() + self.conf["request.timeout.ms"] / 1000,
                                          retry=False)
        except E.KafkaException as e:
            err = e.error
        except Exception as e:
            err = E.KafkaError.from_exception(e)
        if err is not None:
            log.debug("commit failed: %s", err)
        self._commit_done(err, _partitions(targets))

    def _run_on_commit(self, err: E.KafkaError | None, partitions: list[TopicPartition]) -> None:
        """Report an asynchronous commit to on_commit on the loop."""
        if self.on_commit is not None:
            try:
                self.on_commit(err, partitions)
            except Exception:
                log.exception("on_commit callback raised")

    async def _maybe_auto_commit_sync(self, partitions: list[TP] | None = None) -> None:
        """Commit before giving partitions up; they are fenced first so the positions are final."""
        if not self.auto_commit:
            return
        self._fence(self.subs.assignment if partitions is None else partitions)
        offsets = self._current_offsets()
        if partitions is not None:
            offsets = {tp: om for tp, om in offsets.items() if tp in partitions}
        offsets = {tp: om for tp, om in offsets.items() if self._changed_since_commit(tp, om)}
        if not offsets:
            return
        try:
            deadline = time.monotonic() + self.conf["request.timeout.ms"] / 1000
            await self._await_async_commits(deadline)
            await self.coordinator.commit(offsets, deadline)
            self._commit_done(None, _partitions(offsets))
        except E.KafkaException as e:
            log.warning("auto-commit before rebalance failed: %s", e)
            self._commit_done(e.error, _partitions(offsets))

    def _changed_since_commit(self, tp: TP, om: OffsetAndMetadata) -> bool:
        st = self.subs.assignment.get(tp)
        return st is None or st.committed is None or st.committed.offset != om.offset

    async def _auto_commit_loop(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.auto_commit_interval)
            c = self.coordinator
            if c is None or c.coordinator is None:
                continue
            if self.subs.partitions_auto_assigned and c.state != STABLE:
                continue
            offsets = {tp: om for tp, om in self._current_offsets().items() if self._changed_since_commit(tp, om)}
            if offsets:
                await self._commit_reporting(offsets)

    async def committed(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        """The group's committed offsets for these partitions (OFFSET_INVALID where none)."""
        self._check_open()
        if self.coordinator is None:
            raise E.KafkaException(E.local("_INVALID_ARG", "committed() requires group.id"))
        tps = _tps(partitions)
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        got = await self.coordinator.fetch_committed([(p.topic, p.partition) for p in tps], deadline)
        out = []
        for p in tps:
            om = got.get((p.topic, p.partition))
            out.append(TopicPartition(p.topic, p.partition, om.offset if om else OFFSET_INVALID,
                                      om.metadata if om else None, om.leader_epoch if om else None))
            if om is not None:
                self.subs.committed((p.topic, p.partition), om)
        return out

    # ------------------------------------------------------------ offsets and metadata
    async def get_watermark_offsets(self, partition: TopicPartition, timeout: float | None = None,
                                    cached: bool = False) -> tuple[int, int]:
        """(low, high) watermarks; ``cached`` answers from the last fetch without a request."""
        tp = (partition.topic, partition.partition)
        if cached:
            st = self.subs.assignment.get(tp)
            if st is None or st.high_watermark is None:
                return OFFSET_INVALID, OFFSET_INVALID
            low = st.log_start_offset if st.log_start_offset is not None else OFFSET_INVALID
            return low, st.high_watermark
        self.client.add_topics([partition.topic])
        lo = await self.fetcher.list_offsets({tp: EARLIEST_TIMESTAMP}, timeout)
        hi = await self.fetcher.list_offsets({tp: LATEST_TIMESTAMP}, timeout)
        return lo[tp][0], hi[tp][0]

    async def offsets_for_times(self, partitions: list[TopicPartition], timeout: float | None = None
                                ) -> list[TopicPartition]:
        """For each partition (its ``offset`` holding a timestamp in ms), the earliest offset at
        or after that time; OFFSET_END (-1) when there is none."""
        tps = _tps(partitions)
        self.client.add_topics({p.topic for p in tps})
        got = await self.fetcher.list_offsets({(p.topic, p.partition): p.offset for p in tps}, timeout)
        return [TopicPartition(p.topic, p.partition, got.get((p.topic, p.partition), (OFFSET_END, -1))[0])
                for p in tps]

    async def list_topics(self, topic: str | None = None, timeout: float | None = None) -> ClusterMetadata:
        resp = await wait_future(self.client.fetch_metadata(None if topic is None else [topic],
                                                                 allow_auto_create=False), timeout)
        return ClusterMetadata.from_response(resp)

    # ------------------------------------------------------------ closing
    async def close(self) -> None:
        """Commit (with auto-commit), run on_revoke, leave the group, disconnect."""
        if self._closed:
            return
        c = self.coordinator
        try:
            if c is not None and self._started:
                # No new joins; a join already under way completes first, so that the commit
                # below carries a generation the group accepts.
                c.closing = True
                try:
                    await wait_future(self._rebalancing.acquire(), min(c.rebalance_timeout_ms / 1000,
                                                                       c.request_timeout))
                except TimeoutError:
                    pass
                for t in self._tasks:
                    t.cancel()
                await self._await_async_commits(time.monotonic() + c.request_timeout)
                member = c.generation >= 0 or not self.subs.partitions_auto_assigned
                if self.subs.assignment and member:
                    await self._maybe_auto_commit_sync()
                if self.subs.partitions_auto_assigned and self.subs.assignment:
                    await self._partitions_gone(list(self.subs.assignment), lost=not member)
                if self.subs.partitions_auto_assigned:
                    await c.maybe_leave_group("the consumer is being closed")
        except Exception as e:
            log.debug("close: %s", e)
        finally:
            self._closed = True
            if c is not None:
                await c.close()
            await self.fetcher.stop()
            await cancel_and_wait(*self._tasks)
            await self.client.close()


class _GroupHooks(GroupConsumer):
    """The consumer as its group membership sees it (``coordinator.GroupConsumer``)."""

    __slots__ = ("_c",)

    def __init__(self, consumer: AIOConsumer) -> None:
        self._c = consumer

    @property
    def rebalancing(self) -> asyncio.Lock:
        return self._c._rebalancing

    def wake(self) -> None:
        self._c.wake()

    def fence(self, tps: Iterable[TP]) -> None:
        self._c._fence(tps)

    async def partitions_assigned(self, tps: list[TP], incremental: bool) -> None:
        await self._c._partitions_assigned(tps, incremental)

    async def partitions_gone(self, tps: list[TP], lost: bool) -> None:
        await self._c._partitions_gone(tps, lost)

    async def commit_before_revoke(self, partitions: list[TP] | None = None) -> None:
        await self._c._maybe_auto_commit_sync(partitions)

    def report(self, err: E.KafkaError) -> None:
        self._c._report(err)

    def in_poll(self) -> bool:
        return self._c._in_poll

    def last_poll(self) -> float:
        return self._c._last_poll
