"""The Fetcher: keeps one Fetch in flight per broker and turns responses into Messages.

It prefetches: a partition's ``fetch_offset`` runs ahead of its ``position`` (what the
application has been given), and the next Fetch goes out as soon as the previous answer
arrives (its batch headers say where to continue), before that answer is decoded, so the
broker reads the log while the client parses; this continues until ``queued.max.messages.kbytes``
are waiting. A batch can start before the
offset asked for (the broker returns whole batches), so records below the fetch offset are
dropped, as are control records and, under read_committed, aborted transactions' records.

Each broker gets a fetch session (KIP-227, ``protocol/fetch_session.py``): the first request
names every partition fetched there, later ones only what changed and what to forget, while the
broker keeps the session (a broker answering session id 0 gets full fetches throughout). A
session whose broker has no partition left to serve, and every session at ``stop``, is closed.

Buffered data goes into a FetchBuffer of chunks (one per partition per response) that the
consumer drains, possibly from another thread; each chunk remembers the partition state's
epoch, so a seek, pause or revocation silently invalidates what was fetched before it.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import uuid
from collections import deque
from typing import Callable, Iterable

from rivulet.client import core
from rivulet.client import errors as E
from rivulet.client.config import ConsumerConfig
from rivulet.client.wakeup import Waker
from rivulet.client.client import KafkaClient, cancel_and_wait, wait_event
from rivulet.client.connection import BrokerConnection, RequestTimedOut
from rivulet.client.stats import ClientStats
from rivulet.client.consumer.subscription import SubscriptionState, TopicPartitionState, Validation
from rivulet.client.types import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Message
from rivulet.common.types import TopicPartition as TP
from rivulet.protocol import records as rec
from rivulet.protocol.fetch_session import SESSION_ERRORS, FetchSessionHandler, PartitionFetch
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.errors import ApiError as ProtocolError
from rivulet.protocol.messages import fetch_request as fq, fetch_response as fr
from rivulet.protocol.schema import ZERO_UUID

log = logging.getLogger("rivulet.consumer")

# With the C accelerator, a batch's records go straight to Messages: no Record objects, no
# empty header lists, no per-record Python call (rivulet.protocol._speedups.parse_messages).
_parse_messages: Callable[..., list[Message]] | None = None
if rec.SPEEDUPS:
    from rivulet.protocol import _speedups

    _speedups.setup_messages(Message)
    _parse_messages = _speedups.parse_messages

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1


_LEADER_ERRORS = core.METADATA_ERRORS | {ErrorCode.OFFSET_NOT_AVAILABLE}


class Chunk:
    """Messages of one partition from one fetch response."""

    __slots__ = ("tp", "state", "epoch", "messages", "index", "next_offset", "nbytes", "last_epoch")

    def __init__(self, tp: TP, state: TopicPartitionState, epoch: int, messages: list[Message],
                 next_offset: int, nbytes: int, last_epoch: int | None = None) -> None:
        self.tp = tp
        self.state = state
        self.epoch = epoch
        self.messages = messages
        self.index = 0
        self.next_offset = next_offset
        self.nbytes = nbytes
        self.last_epoch = last_epoch  # leader epoch of the chunk's last batch


class FetchBuffer:
    """Chunks waiting for the application, and error/event messages for it.

    Filled on the event loop's thread, drained by whoever calls poll(). The byte count is
    two counters, each written by one side only, so no lock is needed for it.
    """

    def __init__(self, subs: SubscriptionState, notify: Callable[[], None] = lambda: None, *,
                 low_water: int = 0, on_drained: Callable[[], None] = lambda: None) -> None:
        self.subs = subs
        self.chunks: deque[Chunk] = deque()
        self.errors: deque[Message] = deque()
        self.added = 0
        self.removed = 0
        # Told whenever something is added, from the loop's thread: wakes a waiting poll().
        self.notify = notify
        # Told when a take() brings the bytes buffered below ``low_water``: the Fetcher, stopped
        # at its limit, fetches again.
        self.on_drained = on_drained
        self.low_water = low_water
        # Held while handing out messages, so fence() sees positions no take() is moving.
        self.lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        return self.added - self.removed

    def put(self, chunk: Chunk) -> None:
        """Called by the Fetcher with an answer's records for one partition."""
        self.added += chunk.nbytes
        self.chunks.append(chunk)
        self.notify()

    def put_error(self, m: Message) -> None:
        """Called by the Fetcher and the consumer: an error event for the next poll()."""
        self.errors.append(m)
        self.notify()

    def __bool__(self) -> bool:
        return bool(self.chunks) or bool(self.errors)

    def take(self, n: int) -> list[Message]:
        """Up to ``n`` messages in fetch order, advancing each partition's position."""
        with self.lock:
            return self._take(n)

    def fence(self, states: Iterable[TopicPartitionState]) -> None:
        """Stop handing out (and fetching) these partitions; afterwards their positions are final.

        Used before committing partitions that are being revoked: the application keeps
        polling meanwhile, and must not get records past the offset being committed.
        """
        with self.lock:
            for st in states:
                st.pause()

    def _take(self, n: int) -> list[Message]:
        out: list[Message] = []
        errors = self.errors
        while errors and len(out) < n:
            out.append(errors.popleft())
        chunks = self.chunks
        assignment = self.subs.assignment
        before = self.added - self.removed
        while chunks and len(out) < n:
            c = chunks[0]
            st = c.state
            if assignment.get(c.tp) is not st or st.epoch != c.epoch:
                chunks.popleft()
                self.removed += c.nbytes
                continue
            msgs = c.messages
            i = c.index
            want = n - len(out)
            part = msgs if i == 0 and len(msgs) <= want else msgs[i:i + want]
            c.index = i + len(part)
            out += part
            if c.index >= len(msgs):
                chunks.popleft()
                self.removed += c.nbytes
                st.consumed_to(c.next_offset, st.leader_epoch if c.last_epoch is None else c.last_epoch)
            elif part:
                last = part[-1]
                if last._error is None:
                    st.consumed_to(last._offset + 1, last._leader_epoch)
        if before >= self.low_water > self.added - self.removed:
            self.on_drained()
        return out

    def rewind(self, st: TopicPartitionState) -> None:
        """Drop what was fetched ahead of the partition's position (see TopicPartitionState.rewind)."""
        with self.lock:
            st.rewind()

    def clear(self) -> None:
        """Called by the consumer's unsubscribe: drop what is buffered."""
        with self.lock:
            while self.chunks:
                self.removed += self.chunks.popleft().nbytes


class Fetcher:
    def __init__(self, client: KafkaClient, subs: SubscriptionState, conf: ConsumerConfig,
                 stats: ClientStats | None = None,
                 on_error: Callable[[TP | None, E.KafkaError | None], None] = lambda tp, err: None,
                 notify: Callable[[], None] = lambda: None) -> None:
        """``notify`` is told whenever the fetch buffer, which this Fetcher owns (as Java's
        Fetcher its FetchBuffer), gets records or an error event."""
        self.client = client
        self.stats = stats
        self.subs = subs
        self.read_committed = conf["isolation.level"] == "read_committed"
        self.isolation = 1 if self.read_committed else 0
        self.min_bytes: int = conf["fetch.min.bytes"]
        self.max_wait_ms: int = conf["fetch.max.wait.ms"]
        self.max_bytes: int = conf["fetch.max.bytes"]
        self.partition_max_bytes: int = conf["max.partition.fetch.bytes"]
        self.check_crcs: bool = conf["check.crcs"]
        self.eof: bool = conf["enable.partition.eof"]
        self.max_buffer: int = conf["queued.max.messages.kbytes"] * 1024
        self.request_timeout = conf["request.timeout.ms"] / 1000
        self.backoff = conf["retry.backoff.ms"] / 1000
        self._nodes_in_flight: set[int] = set()
        self.sessions: dict[int, FetchSessionHandler] = {}  # by broker
        self._tps_in_flight: set[TP] = set()
        self._waker = Waker()
        self._wake = self._waker.event
        self.buffer = FetchBuffer(subs, notify, low_water=self.max_buffer, on_drained=self.wake)
        self._task: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()
        self.loop: asyncio.AbstractEventLoop | None = None
        # (partition, error) for the application; (partition or None, None) to wake
        # updateFetchPositions.
        self.on_error = on_error

    def start(self) -> None:
        """Called by the consumer's start()."""
        self.loop = asyncio.get_running_loop()
        self._waker.bind(self.loop)
        self._task = self.loop.create_task(self._run())

    async def stop(self) -> None:
        """Called by the consumer's close()."""
        await cancel_and_wait(self._task)
        for t in list(self._tasks):
            t.cancel()
        # A fetch cancelled above got no answer: its session's next request is a full one,
        # which the close below is anyway.
        closing = [self._close_session(node, s) for node, s in self.sessions.items()]
        self.sessions.clear()
        if closing:
            await asyncio.gather(*closing, return_exceptions=True)

    async def _close_session(self, node: int, session: FetchSessionHandler) -> None:
        data = session.close()
        if data is None:
            return
        # A closing request is a full one: it forgets nothing, so the version does not matter here.
        req = core.session_fetch_request(data, 7, 0, self.min_bytes, self.max_bytes, self.isolation)
        try:
            resp = await self.client.send(node, req, timeout=min(self.request_timeout, 5.0))
        except (ConnectionError, OSError, asyncio.TimeoutError, RequestTimedOut, ProtocolError) as e:
            log.debug("closing the fetch session with broker %d: %s", node, e)
            return
        session.handle_response(resp.error_code, resp.session_id, resp.throttle_time_ms, set())

    def wake(self) -> None:
        """Look again for something to fetch; callable from any thread."""
        self._waker.wake()

    # ------------------------------------------------------------ the loop
    async def _run(self) -> None:
        while True:
            self._wake.clear()
            retry_in = None
            try:
                if self.buffer.nbytes < self.max_buffer:
                    retry_in = self._send_fetches()
            except Exception:
                log.exception("fetcher failed to send")
                retry_in = self.backoff
            await wait_event(self._wake, retry_in)

    def _send_fetches(self) -> float | None:
        """Send a Fetch to every broker that has none in flight; returns a retry delay, if any."""
        if self.buffer.nbytes >= self.max_buffer:
            return None
        by_node: dict[int, list[tuple[TP, TopicPartitionState]]] = {}
        unknown = False
        cluster = self.client.cluster
        validate = False
        for tp, st in self.subs.assignment.items():
            if st.paused or st.position is None or tp in self._tps_in_flight or st.awaiting_validation:
                continue
            if st.leader_changed(cluster.leader_epoch(tp[0], tp[1])):
                # KIP-320: the new leader checks the position before anything more is read.
                self.buffer.rewind(st)
                validate = True
                continue
            st.fetch_from_position()
            leader = cluster.leader(tp[0], tp[1])
            if leader < 0:
                unknown = True
                continue
            if leader in self._nodes_in_flight:
                continue
            by_node.setdefault(leader, []).append((tp, st))
        for node, session in self.sessions.items():
            if session.session_id and session.partitions and node not in by_node and node not in self._nodes_in_flight:
                # Nothing left to fetch there (moved, paused, revoked): the broker can let go.
                self._nodes_in_flight.add(node)
                t = self.loop.create_task(self._close_idle(node, session))
                self._tasks.add(t)
                t.add_done_callback(self._tasks.discard)
        for node, parts in by_node.items():
            self._nodes_in_flight.add(node)
            sent = {tp: (st, st.epoch, st.fetch_offset) for tp, st in parts}
            self._tps_in_flight.update(sent)
            names = {tp[0] for tp, _ in parts}
            ids = {n: tm.topic_id for n in names if (tm := cluster.topics.get(n)) is not None}
            cap = core.fetch_version_cap(ids, names)
            session = self.sessions.get(node)
            if session is None:
                session = self.sessions[node] = FetchSessionHandler(node)
            conn = self.client.open_connection(node)
            if conn is None:
                session.handle_error()  # a full fetch, which forgets nothing: any version will do
            version = conn.version_for(1, cap) if conn is not None else 7
            req = self._request(session, parts, ids, version)
            fut = None
            if conn is not None:
                try:
                    # On the wire now, before whatever CPU work the caller does next.
                    fut = conn.send_nowait(req, version)
                except (ConnectionError, ProtocolError):
                    fut = None
            by_id = {i: n for n, i in ids.items() if i is not None}
            t = self.loop.create_task(self._fetch(node, sent, req, conn if fut is not None else None, fut, cap, by_id,
                                                  session))
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)
        if validate:
            self.on_error(None, None)  # wakes updateFetchPositions, which validates
        if unknown:
            self.client.add_topics({tp[0] for tp in self.subs.assignment})
            self.client.request_update()
            return self.backoff
        return None

    async def _close_idle(self, node: int, session: FetchSessionHandler) -> None:
        try:
            await self._close_session(node, session)
        finally:
            self._nodes_in_flight.discard(node)
            self._wake.set()

    def _request(self, session: FetchSessionHandler, parts: list[tuple[TP, TopicPartitionState]],
                 topic_ids: dict[str, uuid.UUID | None], version: int) -> fq.FetchRequest:
        pmb = self.partition_max_bytes
        pf = tuple.__new__  # PartitionFetch's own constructor is a Python call per partition
        data = session.build({tp: pf(PartitionFetch, (
            topic_ids.get(tp[0]) or ZERO_UUID, st.fetch_offset, st.current_leader_epoch,
            -1 if st.fetch_epoch is None else st.fetch_epoch, -1, pmb)) for tp, st in parts})
        return core.session_fetch_request(data, version, self.max_wait_ms, self.min_bytes, self.max_bytes,
                                          self.isolation)

    def _release(self, node: int, sent: dict[TP, tuple[TopicPartitionState, int, int]]) -> None:
        self._nodes_in_flight.discard(node)
        for tp in sent:
            self._tps_in_flight.discard(tp)

    async def _fetch(self, node: int, sent: dict[TP, tuple[TopicPartitionState, int, int]], req: fq.FetchRequest,
                     conn: BrokerConnection | None, fut: asyncio.Future | None, cap: int | None, names: dict[uuid.UUID, str],
                     session: FetchSessionHandler) -> None:
        released = False
        try:
            timeout = self.request_timeout + self.max_wait_ms / 1000
            try:
                if fut is not None:
                    resp = await conn.wait(fut, timeout)
                else:
                    resp = await self.client.send(node, req, timeout=timeout, max_version=cap)
            except (ConnectionError, OSError, asyncio.TimeoutError, RequestTimedOut) as e:
                log.debug("fetch from broker %d failed: %s", node, e)
                session.handle_error()
                self.client.request_update()
                await asyncio.sleep(self.backoff)
                return
            answered: set[tuple[str, int]] = set()
            for t in resp.responses:
                topic = core.fetch_response_topic(t, names) or ""  # "": an id we never sent
                answered.update([(topic, pd.partition_index) for pd in t.partitions])
            if not session.handle_response(resp.error_code, resp.session_id, resp.throttle_time_ms, answered):
                # The next request is a full fetch; a session error needs no backoff.
                log.debug("fetch from broker %d: %s", node, ErrorCode(resp.error_code).name if resp.error_code
                          else "an answer that does not fit the fetch session")
                if resp.error_code == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR:
                    self.client.request_update()
                if resp.error_code and resp.error_code not in SESSION_ERRORS:
                    await asyncio.sleep(self.backoff)
                return
            if resp.node_endpoints:  # KIP-951: where the leaders named in the answer are
                self.client.cluster.add_brokers((e.node_id, e.host, e.port) for e in resp.node_endpoints)
            todo = []
            for t in resp.responses:
                topic = core.fetch_response_topic(t, names)
                for pd in t.partitions:
                    tp = (topic, pd.partition_index)
                    s = sent.get(tp)
                    if s is None:
                        continue
                    st, epoch, offset = s
                    if self.subs.assignment.get(tp) is not st or st.epoch != epoch or st.fetch_offset != offset:
                        continue  # sought, paused or revoked meanwhile
                    if pd.error_code == 0 and pd.records is not None:
                        # Where the next fetch starts is in the batch headers; decoding can wait.
                        end = offset
                        end_epoch = st.fetch_epoch
                        try:
                            for _, h in rec.iter_batches(pd.records):
                                end = h.base_offset + h.last_offset_delta + 1
                                end_epoch = h.partition_leader_epoch
                        except ProtocolError:
                            pass
                        if end > offset:
                            st.fetched_ahead_to(end, end_epoch)
                    todo.append((tp, st, epoch, offset, pd))
            # Pipelining: the next Fetch goes out before this response is decoded, so the broker
            # reads the log while we parse records.
            self._release(node, sent)
            released = True
            self._send_fetches()
            # Decoding allocates thousands of objects that all stay alive (they are the
            # records), so the collections it would trigger find nothing to free; deferring the
            # collector for these few milliseconds saves about a sixth of the consumer's CPU.
            gc_was_on = gc.isenabled()
            if gc_was_on:
                gc.disable()
            try:
                for item in todo:
                    self._handle_partition(*item)
            finally:
                if gc_was_on:
                    gc.enable()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("fetch response handling failed")
            await asyncio.sleep(self.backoff)
        finally:
            if not released:  # once only: by now the next fetch may hold the same slots
                self._release(node, sent)
            self._wake.set()

    def _handle_partition(self, tp: TP, st: TopicPartitionState, epoch: int, offset: int, pd: fr.PartitionData) -> None:
        code = pd.error_code
        if code:
            if code == ErrorCode.OFFSET_OUT_OF_RANGE:
                strategy = self.subs.default_reset
                if strategy == "none":
                    # The consumer reports it and waits for a seek.
                    self.on_error(tp, E.KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                                                   f"fetch offset {offset} is out of range for {tp[0]}-{tp[1]}"))
                else:
                    log.info("%s-%d: offset %d out of range, resetting to %s", tp[0], tp[1], offset, strategy)
                    st.await_reset(strategy)
                    self.on_error(tp, None)  # wakes updateFetchPositions
            elif code in _LEADER_ERRORS:
                hint = pd.current_leader
                if hint is None or not self.client.cluster.new_leader(tp[0], tp[1], hint.leader_id,
                                                                      hint.leader_epoch):
                    self.client.request_update()
            else:
                self.on_error(tp, E.broker_error(code))
            return
        diverging = core.diverging_epoch(pd)
        if diverging is not None:
            # The leader's log differs before the fetch offset: nothing was read. Back to the
            # position, which is checked against where the leader's log diverges.
            with self.buffer.lock:
                st.rewind()
                self._validated(tp, st, diverging)
            return
        st.high_watermark = pd.high_watermark
        if pd.last_stable_offset >= 0:
            st.last_stable_offset = pd.last_stable_offset
        if pd.log_start_offset >= 0:
            st.log_start_offset = pd.log_start_offset
        data = pd.records
        messages: list[Message] = []
        next_offset = offset
        last_epoch: int | None = None
        nbytes = 0
        if data is not None and len(data):
            nbytes = len(data)
            parse_messages = _parse_messages
            # The Python decoder slices keys and values out of bytes; the C one copies them out
            # of the response in place.
            buf = data if parse_messages is not None or isinstance(data, bytes) else bytes(data)
            aborted = self._aborted(pd) if self.read_committed else None
            topic, partition = tp
            mk = Message
            try:
                for pos, h in rec.iter_batches(buf):
                    end = h.base_offset + h.last_offset_delta + 1
                    if end <= next_offset:
                        continue
                    le = last_epoch = h.partition_leader_epoch
                    attrs = h.attributes
                    if attrs & rec.CONTROL_MASK:
                        if aborted is not None:
                            self._control(rec.decode_batch(buf, pos, verify_crc=False), aborted)
                        next_offset = end
                        continue
                    if aborted is not None and attrs & rec.TRANSACTIONAL_MASK and h.producer_id in aborted \
                            and aborted[h.producer_id] <= h.base_offset:
                        next_offset = end
                        continue
                    ts_type = TIMESTAMP_LOG_APPEND_TIME if attrs & rec.TIMESTAMP_TYPE_MASK else TIMESTAMP_CREATE_TIME
                    try:
                        if parse_messages is not None:
                            hd, rbuf, start, stop = rec.batch_records_section(buf, pos, verify_crc=self.check_crcs)
                            messages += parse_messages(
                                rbuf, start, stop, hd.records_count, hd.base_offset, hd.base_timestamp,
                                hd.max_timestamp if attrs & rec.TIMESTAMP_TYPE_MASK else None,
                                next_offset, topic, partition, ts_type, le)
                            next_offset = end
                            continue
                        records = rec.decode_batch(buf, pos, verify_crc=self.check_crcs).records
                    except ProtocolError as e:
                        # Reported, and skipped: the rest of the partition stays readable.
                        log.warning("%s-%d: corrupt batch at offset %d: %s", topic, partition, h.base_offset, e)
                        self.on_error(tp, E.KafkaError(E.LOCAL_CODES["_BAD_MSG"], f"corrupt record batch at "
                                                       f"{topic}-{partition} offset {h.base_offset}: {e}"))
                        next_offset = end
                        continue
                    # Empty header lists are dropped: one tracked object less per buffered record.
                    if h.base_offset >= next_offset:
                        messages += [mk(topic, partition, r.offset, r.key, r.value, r.headers or None, ts_type,
                                        r.timestamp, None, le) for r in records]
                    else:
                        messages += [mk(topic, partition, r.offset, r.key, r.value, r.headers or None, ts_type,
                                        r.timestamp, None, le) for r in records if r.offset >= next_offset]
                    next_offset = end
            except ProtocolError as e:  # framing no batch can have: nothing after it is readable
                log.warning("%s-%d: unreadable records at offset %d: %s", topic, partition, next_offset, e)
                self.on_error(tp, E.KafkaError(E.LOCAL_CODES["_BAD_MSG"], f"unreadable records at "
                                               f"{topic}-{partition} offset {next_offset}: {e}"))
        if next_offset > offset:
            st.eof_reported = False
        st.decoded_to(offset, next_offset)
        hw = st.last_stable_offset if self.read_committed and st.last_stable_offset is not None else st.high_watermark
        eof = self.eof and not st.eof_reported and hw is not None and next_offset >= hw
        if eof:
            st.eof_reported = True
            messages.append(Message(tp[0], tp[1], next_offset,
                                    error=E.KafkaError(E.LOCAL_CODES["_PARTITION_EOF"],
                                                       f"Fetch from broker reached end of partition at offset "
                                                       f"{next_offset} (HighwaterMark {st.high_watermark})")))
        if messages or next_offset > offset:
            if self.stats is not None:
                self.stats.records_in(tp, sum(1 for m in messages if m.error() is None), nbytes)
            self.buffer.put(Chunk(tp, st, epoch, messages, next_offset, nbytes, last_epoch))

    # ------------------------------------------------------------ position validation (KIP-320)
    def _validated(self, tp: TP, st: TopicPartitionState, end: core.EpochEndOffset) -> None:
        """Apply the leader's epoch end offset to the position; the caller holds the buffer lock."""
        position, epoch = st.position, st.leader_epoch
        outcome = st.complete_validation(end, self.subs.default_reset != "none")
        if outcome is Validation.VALID:
            return
        what = (f"{tp[0]}-{tp[1]}: the log was truncated at offset {end.end_offset} (leader epoch {end.epoch}), "
                f"before the position {position} (leader epoch {epoch})")
        if outcome is Validation.TRUNCATED:
            log.info("%s: continuing from offset %d", what, end.end_offset)
        elif outcome is Validation.RESET:
            log.info("%s-%d: the leader knows no epoch at or before %s: resetting to %s",
                     tp[0], tp[1], epoch, self.subs.default_reset)
            st.await_reset(self.subs.default_reset)
            self.on_error(tp, None)
        else:
            self.on_error(tp, E.KafkaError(E.LOCAL_CODES["_LOG_TRUNCATION"], what))

    async def validate_positions(self) -> None:
        """OffsetsForLeaderEpoch for every position awaiting validation, from its leader."""
        cluster = self.client.cluster
        by_node: dict[int, dict[TP, tuple[int, int]]] = {}
        asked: dict[TP, tuple[TopicPartitionState, int]] = {}
        for tp, st in self.subs.assignment.items():
            if not st.awaiting_validation or st.position is None:
                continue
            if st.leader_epoch is None:
                st.awaiting_validation = False
                continue
            leader = cluster.leader(tp[0], tp[1])
            if leader < 0:
                self.client.request_update()
                continue
            st.validate_against(cluster.leader_epoch(tp[0], tp[1]))
            by_node.setdefault(leader, {})[tp] = (st.current_leader_epoch, st.leader_epoch)
            asked[tp] = (st, st.epoch)
        if not by_node:
            return
        results = await asyncio.gather(*(self._offsets_for_leader_epoch(n, epochs) for n, epochs in by_node.items()),
                                       return_exceptions=True)
        for node, r in zip(by_node, results):
            if isinstance(r, BaseException):
                log.debug("OffsetsForLeaderEpoch to broker %d failed: %s", node, r)
                self.client.request_update()
                continue
            if r is None:  # the broker cannot check: the positions stand, as Java's client has it
                for tp in by_node[node]:
                    asked[tp][0].awaiting_validation = False
                continue
            for tp, end in r.ok.items():
                st, epoch = asked[tp]
                if self.subs.assignment.get(tp) is not st or st.epoch != epoch or not st.awaiting_validation:
                    continue  # sought or revoked meanwhile
                with self.buffer.lock:
                    self._validated(tp, st, end)
            for tp, code in r.errors.items():
                if code in _LEADER_ERRORS:
                    self.client.request_update()  # checked again once the metadata is current
                else:
                    self.on_error(tp, E.broker_error(code, f"OffsetsForLeaderEpoch {tp[0]}-{tp[1]}"))
        self.wake()

    async def _offsets_for_leader_epoch(self, node: int, epochs: dict[TP, tuple[int, int]]
                                        ) -> core.PartitionResults[core.EpochEndOffset] | None:
        """The leader's answer; None when it is too old to give epochs (below v2)."""
        versions = self.client.api_version(node, 23)
        if versions is not None and versions[1] < 2:
            return None
        resp = await self.client.send(node, core.offsets_for_leader_epoch_request(epochs),
                                      timeout=self.request_timeout)
        return core.read_offsets_for_leader_epoch(resp)

    @staticmethod
    def _aborted(pd: fr.PartitionData) -> dict[int, int]:
        out: dict[int, int] = {}
        for a in pd.aborted_transactions or []:
            if a.producer_id not in out or a.first_offset < out[a.producer_id]:
                out[a.producer_id] = a.first_offset
        return out

    @staticmethod
    def _control(batch: rec.DecodedBatch, aborted: dict[int, int]) -> None:
        # An ABORT marker ends that producer's aborted transaction.
        try:
            cr = rec.parse_control_record(batch.records[0])
        except Exception:
            return
        if cr.type == rec.ControlRecordType.ABORT:
            aborted.pop(batch.header.producer_id, None)

    # ------------------------------------------------------------ offsets by time
    async def list_offsets(self, timestamps: dict[TP, int], timeout: float | None = None) -> dict[TP, tuple[int, int]]:
        """ListOffsets per partition leader: {tp: (offset, timestamp)}; offset -1 when none."""
        out: dict[TP, tuple[int, int]] = {}
        remaining = dict(timestamps)
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while remaining:
            cluster = self.client.cluster
            by_node: dict[int, dict[TP, int]] = {}
            missing = False
            for tp, ts in remaining.items():
                leader = cluster.leader(*tp)
                if leader < 0:
                    missing = True
                    continue
                by_node.setdefault(leader, {})[tp] = ts
            results = await asyncio.gather(*(self._list_offsets_node(n, tps) for n, tps in by_node.items()),
                                           return_exceptions=True)
            for r in results:
                if isinstance(r, BaseException):
                    if isinstance(r, E.KafkaException):
                        raise r
                    continue
                for tp, v in r.items():
                    out[tp] = v
                    remaining.pop(tp, None)
            if not remaining:
                break
            if deadline is not None and loop.time() >= deadline:
                raise E.KafkaException(E.local("_TIMED_OUT", "timed out listing offsets"))
            if missing:
                self.client.add_topics({tp[0] for tp in remaining})
                await self.client.wait_update(self.backoff * 5)
            else:
                await asyncio.sleep(self.backoff)
        return out

    async def _list_offsets_node(self, node: int, tps: dict[TP, int]) -> dict[TP, tuple[int, int]]:
        req = core.list_offsets_request(tps, self.isolation, int(self.request_timeout * 1000))
        try:
            resp = await self.client.send(node, req)
        except (ConnectionError, OSError, asyncio.TimeoutError, RequestTimedOut):
            self.client.request_update()
            return {}
        res = core.read_list_offsets(resp)
        for tp, code in res.errors.items():
            if code in _LEADER_ERRORS:
                self.client.request_update()
            else:
                raise E.KafkaException(E.broker_error(code, f"ListOffsets {tp[0]}-{tp[1]}"))
        return {tp: (r.offset, r.timestamp) for tp, r in res.ok.items()}

    async def reset_offsets(self, partitions: list[TP]) -> None:
        """Positions for partitions awaiting reset, by ListOffsets (earliest or latest)."""
        want: dict[TP, int] = {}
        epochs: dict[TP, int] = {}
        for tp in partitions:
            st = self.subs.assignment.get(tp)
            if st is None or st.reset_strategy is None:
                continue
            want[tp] = EARLIEST_TIMESTAMP if st.reset_strategy == "earliest" else LATEST_TIMESTAMP
            epochs[tp] = st.epoch
        if not want:
            return
        found = await self.list_offsets(want)
        for tp, (offset, _) in found.items():
            st = self.subs.assignment.get(tp)
            # The assignment or position may have changed while we asked.
            if st is not None and st.epoch == epochs[tp] and st.reset_strategy is not None and offset >= 0:
                log.debug("%s-%d: reset to %s offset %d", tp[0], tp[1], st.reset_strategy, offset)
                st.seek(offset)
        self.wake()

