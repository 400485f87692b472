"""ShareFetcher: a share consumer's fetches and acknowledgements, as Java's
ShareConsumeRequestManager.

One ShareFetch is in flight per leader at a time, in that leader's share session
(``share_session``). A fetch goes out when the application has taken every buffered record
and acknowledged what it took (acquired records are held under a lock that runs out, so they
are not hoarded; the acknowledgements free the partition's record locks), or when
acknowledgements for that leader wait: those ride on the fetch. Acknowledgements made while
a fetch long-polls go alone with ShareAcknowledge in the same session at once (records held
unacknowledged count against the partition's record locks, so waiting could stall the
group), as do those of ``acknowledge_now`` (commit_sync, commit_async); ``close`` sends the
last ones at epoch -1, which closes the session and releases what is still held.

Records are decoded only for the offsets the broker acquired for us; an acquired offset
holding no record (a control record) is acknowledged as a gap.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from rivulet.client import core
from rivulet.client import errors as E
from rivulet.client.config import ConsumerConfig
from rivulet.client.client import NET_ERRORS, KafkaClient, cancel_and_wait, wait_event
from rivulet.client.share.session import Acknowledgements, ShareSessionHandler, merge
from rivulet.common.types import ACKNOWLEDGE_GAP as GAP
from rivulet.client.types import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, ShareMessage
from rivulet.common.types import TopicPartition as TP
from rivulet.protocol import records as rec
from rivulet.protocol.errors import ApiError, ErrorCode

if TYPE_CHECKING:
    from rivulet.protocol.messages import share_fetch_response as sfr

log = logging.getLogger("rivulet.consumer")

# (partition, offsets acknowledged, error or None): what the acknowledgement commit callback is told.
AckResult = tuple[TP, set[int], E.KafkaError | None]


class ShareFetcher:
    def __init__(self, client: KafkaClient, group_id: str, member_id: str, conf: ConsumerConfig,
                 on_error: Callable[[E.KafkaError], None]) -> None:
        self.client = client
        self.group_id = group_id
        self.member_id = member_id
        self.max_wait_ms: int = conf["fetch.max.wait.ms"]
        self.min_bytes: int = conf["fetch.min.bytes"]
        self.max_bytes: int = conf["fetch.max.bytes"]
        self.max_records: int = conf["max.poll.records"]
        self.check_crcs: bool = conf["check.crcs"]
        self.on_error = on_error
        self.assigned: set[TP] = set()
        self.buffer: deque[ShareMessage] = deque()
        # The application holds the last poll's records: the next fetch waits for the poll that
        # acknowledges them, and carries those acknowledgements (a fetch sent before would find
        # the partition's record locks taken by them, and long-poll for nothing).
        self.holding = False
        self.pending: dict[TP, Acknowledgements] = {}
        self.results: list[AckResult] = []      # acknowledgement outcomes not yet handed to the callback
        self.arrived = asyncio.Event()          # records, or acknowledgement outcomes, came in
        self._sessions: dict[int, ShareSessionHandler] = {}
        self._acking: set[asyncio.Task] = set()
        self._inflight: dict[int, asyncio.Task] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.closed = False

    # ------------------------------------------------------------ driving
    def start(self) -> None:
        """Called by the share consumer's start()."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def wake(self) -> None:
        """Called by the share consumer when acknowledgements or a poll may let a ShareFetch go."""
        self._wake.set()

    def assign(self, partitions: Iterable[TP]) -> None:
        """Called by the share consumer when the membership's assignment changes."""
        self.assigned = set(partitions)
        self.wake()

    def add_acks(self, acks: dict[TP, Acknowledgements]) -> None:
        """Called by the share consumer's poll and commits with the acknowledgements made."""
        merge(self.pending, acks)
        self.wake()

    async def _run(self) -> None:
        while not self.closed:
            self._wake.clear()
            try:
                self._send_fetches()
            except Exception:  # a bug must not stop fetching silently
                log.exception("share fetch loop")
            await wait_event(self._wake, 1.0)

    def _leaders(self) -> dict[int, list[TP]]:
        by_node: dict[int, list[TP]] = {n: [] for n, s in self._sessions.items() if s.open}
        for tp in self.assigned:
            node = self.client.cluster.leader(tp[0], tp[1])
            if node < 0:
                self.client.request_update()
                continue
            by_node.setdefault(node, []).append(tp)
        return by_node

    def _send_fetches(self) -> None:
        loop = asyncio.get_running_loop()
        for node, parts in self._leaders().items():
            acks = self._take_acks(node)
            if node in self._inflight or self.buffer or self.holding:
                # No fetch now (one long-polls, or the application has records to take or to
                # acknowledge): acknowledgements do not wait, they go alone in the same session.
                if acks:
                    task = loop.create_task(self._acknowledge(node, acks, False))
                    self._acking.add(task)
                    task.add_done_callback(self._acking.discard)
                continue
            if parts or acks or self._sessions.get(node, None) is not None and self._sessions[node].partitions:
                self._inflight[node] = loop.create_task(self._fetch(node, parts, acks))

    def _take_acks(self, node: int) -> dict[TP, Acknowledgements]:
        mine = {tp: a for tp, a in self.pending.items() if self.client.cluster.leader(tp[0], tp[1]) == node}
        for tp in mine:
            del self.pending[tp]
        return mine

    def _session(self, node: int) -> ShareSessionHandler:
        s = self._sessions.get(node)
        if s is None:
            s = self._sessions[node] = ShareSessionHandler(self.group_id, self.member_id)
        return s

    def _topic_ids(self) -> dict[str, uuid.UUID]:
        return {name: tm.topic_id for name, tm in self.client.cluster.topics.items() if tm.topic_id is not None}

    # ------------------------------------------------------------ ShareFetch
    async def _fetch(self, node: int, parts: list[TP], acks: dict[TP, Acknowledgements]) -> None:
        sess = self._session(node)
        try:
            try:
                conn = await self.client.connection(node)
                if acks and not sess.open:
                    self._acked(acks, ErrorCode.SHARE_SESSION_NOT_FOUND)
                    acks = {}
                ids = self._topic_ids()
                generation = sess.generation
                # Built and written in one step: requests of a session go out in epoch order.
                req = sess.fetch_request(parts, acks, ids, max_wait_ms=self.max_wait_ms, min_bytes=self.min_bytes,
                                         max_bytes=self.max_bytes, max_records=self.max_records)
                fut = conn.send_nowait(req)
                assert fut is not None
                resp = await conn.wait(fut, self.client.request_timeout_ms / 1000 + self.max_wait_ms / 1000)
            except NET_ERRORS as e:
                log.debug("share fetch to %d failed: %s", node, e)
                sess.reset()
                self._acked(acks, ErrorCode.NETWORK_EXCEPTION)
                self.client.request_update()
                await asyncio.sleep(self.client.retry_backoff)
                return
            if resp.error_code:
                sess.handle_response(resp.error_code, generation)
                self._acked(acks, resp.error_code)
                self._top_level_error(node, resp.error_code, resp.error_message)
                return
            names = {v: k for k, v in ids.items()}
            answered: set[TP] = set()
            for t in resp.responses:
                name = names.get(t.topic_id)
                if name is None:
                    continue
                for pd in t.partitions:
                    tp = (name, pd.partition_index)
                    if tp in acks:
                        answered.add(tp)
                        self._acked({tp: acks[tp]}, pd.acknowledge_error_code)
                    self._partition(tp, pd)
            self._acked({tp: a for tp, a in acks.items() if tp not in answered}, 0)
        finally:
            self._inflight.pop(node, None)
            self.arrived.set()
            self.wake()

    def _top_level_error(self, node: int, code: int, message: str | None) -> None:
        if code in (ErrorCode.SHARE_SESSION_NOT_FOUND, ErrorCode.INVALID_SHARE_SESSION_EPOCH):
            log.debug("share session with %d restarts: %s", node, ErrorCode(code).name)
        elif core.action(code) in (core.Action.RETRY, core.Action.REFRESH_METADATA):
            self.client.request_update()
        else:
            self.on_error(E.KafkaError(code, f"ShareFetch failed: {ErrorCode(code).name} {message or ''}".rstrip()))

    def _partition(self, tp: TP, pd: sfr.PartitionData) -> None:
        code = pd.error_code
        if code:
            if code in core.METADATA_ERRORS:
                hint = pd.current_leader
                if hint is None or not self.client.cluster.new_leader(tp[0], tp[1], hint.leader_id, hint.leader_epoch):
                    self.client.request_update()
            else:
                self.on_error(E.KafkaError(code, f"ShareFetch {tp[0]}-{tp[1]}: {ErrorCode(code).name}"))
            return
        if not pd.acquired_records:
            return
        counts: dict[int, int] = {}
        for a in pd.acquired_records:
            for o in range(a.first_offset, a.last_offset + 1):
                counts[o] = a.delivery_count
        found = self._decode(tp, pd.records, counts)
        gaps = [o for o in counts if o not in found]
        if gaps:
            acks = Acknowledgements()
            for o in gaps:
                acks.add(o, GAP)
            merge(self.pending, {tp: acks})

    def _decode(self, tp: TP, data: bytes | memoryview | None, counts: dict[int, int]) -> set[int]:
        """Messages for the acquired offsets, appended to the buffer; returns their offsets."""
        found: set[int] = set()
        if data is None or not len(data):
            return found
        buf = data if isinstance(data, bytes) else bytes(data)
        topic, partition = tp
        try:
            for pos, h in rec.iter_batches(buf):
                if h.attributes & rec.CONTROL_MASK:
                    continue
                last = h.base_offset + h.last_offset_delta
                if not any(o in counts for o in range(h.base_offset, last + 1)):
                    continue
                ts_type = TIMESTAMP_LOG_APPEND_TIME if h.attributes & rec.TIMESTAMP_TYPE_MASK else TIMESTAMP_CREATE_TIME
                batch = rec.decode_batch(buf, pos, verify_crc=self.check_crcs)
                for r in batch.records:
                    dc = counts.get(r.offset)
                    if dc is None:
                        continue
                    ts = h.max_timestamp if ts_type == TIMESTAMP_LOG_APPEND_TIME else r.timestamp
                    self.buffer.append(ShareMessage(topic, partition, r.offset, r.key, r.value, r.headers or None,
                                                    ts_type, ts, h.partition_leader_epoch, dc))
                    found.add(r.offset)
        except ApiError as e:
            # Unreadable records are released to the group by their lock running out; say so.
            self.on_error(E.KafkaError(E.LOCAL_CODES["_BAD_MSG"], f"unreadable records at {topic}-{partition}: {e}"))
            return set(counts)
        return found

    # ------------------------------------------------------------ ShareAcknowledge
    async def acknowledge_now(self, *, close: bool = False) -> list[AckResult]:
        """Send every pending acknowledgement alone, leader by leader; with ``close`` end every
        session (epoch -1). Returns the outcomes of what it sent."""
        done: list[AckResult] = []
        nodes: dict[int, dict[TP, Acknowledgements]] = {}
        for tp, a in self.pending.items():
            nodes.setdefault(self.client.cluster.leader(tp[0], tp[1]), {})[tp] = a
        self.pending = {}
        if close:
            for n, s in self._sessions.items():
                if s.open:
                    nodes.setdefault(n, {})
        if self._acking:  # acknowledgements already on their way are answered first
            await asyncio.wait(list(self._acking))
        for node, acks in nodes.items():
            done += await self._acknowledge(node, acks, close)
        return done

    async def _acknowledge(self, node: int, acks: dict[TP, Acknowledgements], close: bool) -> list[AckResult]:
        sess = self._sessions.get(node)
        if sess is None or not sess.open:
            return self._acked(acks, ErrorCode.SHARE_SESSION_NOT_FOUND)
        generation = sess.generation
        try:
            conn = await self.client.connection(node)
            if not sess.open or sess.generation != generation:
                return self._acked(acks, ErrorCode.SHARE_SESSION_NOT_FOUND)
            ids = self._topic_ids()
            fut = conn.send_nowait(sess.acknowledge_request(acks, ids, close=close))
            assert fut is not None
            resp = await conn.wait(fut)
        except NET_ERRORS as e:
            log.debug("share acknowledge to %d failed: %s", node, e)
            sess.reset()
            return self._acked(acks, ErrorCode.NETWORK_EXCEPTION)
        if resp.error_code:
            sess.handle_response(resp.error_code, generation)
            return self._acked(acks, resp.error_code)
        names = {v: k for k, v in ids.items()}
        out: list[AckResult] = []
        for t in resp.responses:
            name = names.get(t.topic_id)
            for p in t.partitions:
                tp = (name, p.partition_index)
                if name is not None and tp in acks:
                    out += self._acked({tp: acks.pop(tp)}, p.error_code)
        return out + self._acked(acks, 0)

    def _acked(self, acks: dict[TP, Acknowledgements], code: int) -> list[AckResult]:
        err = E.KafkaError(code) if code else None
        out = [(tp, {o for o, k in a.offsets().items() if k != GAP}, err) for tp, a in acks.items()]
        out = [r for r in out if r[1]]
        self.results += out
        if out:
            self.arrived.set()
        return out

    async def close(self) -> None:
        """Called by the share consumer's close(): last acknowledgements at session epoch -1."""
        self.closed = True
        self.wake()
        await cancel_and_wait(self._task)
        if self._acking:
            await asyncio.wait(list(self._acking))
        if self._inflight:  # their answers are taken: the session's close releases the records
            await asyncio.wait(list(self._inflight.values()))
