"""Followers fetch from their leaders (Kafka's ReplicaFetcherManager and ReplicaFetcherThread).

One ``ReplicaFetcher`` task per leader broker, on the event loop, over one
``rivulet.client.connection.BrokerConnection``. A partition starts in the truncating state:
the fetcher asks the leader where the follower's latest epoch ends (OffsetsForLeaderEpoch)
and cuts its divergent tail (KIP-101, KIP-279); it then fetches from its log end with the
epoch of its last batch, appending the leader's batches unchanged (offsets, epochs, bytes),
and takes the leader's high watermark and log start. A diverging epoch in the answer (KIP-595,
Fetch v12+) truncates again; an offset out of range restarts at the leader's log start or end.
Fetches go in a fetch session with the leader (KIP-227, ``protocol/fetch_session.py``), as
Kafka's ReplicaFetcherThread's: after the first full fetch only changed, added and forgotten
partitions are sent, while the leader keeps the session; the session is closed when the
fetcher's last partition leaves it.

The truncation rules (``truncation_offset``) are pure, for the unit tests.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Callable, Iterable

from rivulet.client.connection import PLAINTEXT_CONNECTOR, BrokerConnection, BrokerConnector
from rivulet.common.types import TopicPartition
from rivulet.protocol import records as rec
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.protocol.fetch_session import SESSION_ERRORS, FetchRequestData, FetchSessionHandler, PartitionFetch
from rivulet.protocol.messages import fetch_request as fq
from rivulet.protocol.messages import list_offsets_request as loq
from rivulet.protocol.messages import offset_for_leader_epoch_request as oeq
from rivulet.replication.link import BrokerLink
from rivulet.replication.partition import Partition
from rivulet.replication.replica_manager import LeaderEndpoint, ReplicaManager
from rivulet.storage.log import UnexpectedAppendOffsetError

log = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
# Errors after which the partition waits for the controller's next word, retrying slowly.
_RETRY_LATER = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_TOPIC_ID,
                ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.REPLICA_NOT_AVAILABLE, ErrorCode.LEADER_NOT_AVAILABLE}


@dataclass(frozen=True, slots=True)
class FetcherConfig:
    """replica.fetch.* in force."""

    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 1048576  # per partition (replica.fetch.max.bytes)
    response_max_bytes: int = 10485760
    backoff_ms: int = 1000
    request_timeout_ms: int = 30000


def truncation_offset(leader_epoch: int, leader_end_offset: int, follower_end_for_epoch: tuple[int, int] | None,
                      follower_leo: int, follower_hw: int) -> tuple[int, bool]:
    """Where a follower truncates given the leader's (epoch, end offset) for the follower's
    latest epoch (from OffsetsForLeaderEpoch or a diverging epoch) and the follower's own
    (epoch, end offset) for that epoch; (offset, complete). Not complete: the follower knew
    no such epoch, cut back to its previous one, and asks again."""
    if leader_end_offset == UNDEFINED_OFFSET:
        return min(follower_hw, follower_leo), True  # the leader cannot say: keep what is committed
    if leader_epoch == UNDEFINED_EPOCH or follower_end_for_epoch is None:
        return min(leader_end_offset, follower_leo), True
    follower_epoch, follower_end = follower_end_for_epoch
    if follower_epoch != leader_epoch:
        return min(follower_end, follower_leo), False
    return min(follower_end, leader_end_offset, follower_leo), True


class _FetchState:
    __slots__ = ("partition", "leader_epoch", "truncating", "retry_at")

    def __init__(self, partition: Partition) -> None:
        self.partition = partition
        self.leader_epoch = partition.leader_epoch
        self.truncating = True
        self.retry_at = 0.0

    @property
    def current(self) -> bool:
        """Still the same followership (no LeaderAndIsr has moved it since)."""
        p = self.partition
        return not p.deleted and not p.is_leader and p.leader_epoch == self.leader_epoch


class ReplicaFetcher:
    """Fetches every partition this broker follows from one leader."""

    def __init__(self, leader: LeaderEndpoint, rm: ReplicaManager, node_id: int, config: FetcherConfig,
                 broker_epoch: Callable[[], int], connector: BrokerConnector = PLAINTEXT_CONNECTOR) -> None:
        self.leader = leader
        self.rm = rm
        self.node_id = node_id
        self.config = config
        self.broker_epoch = broker_epoch
        self.partitions: dict[TopicPartition, _FetchState] = {}
        self._wakeup = asyncio.Event()
        self._link = BrokerLink(f"broker-{node_id}-fetcher", config.request_timeout_ms, connector)
        self.session = FetchSessionHandler(leader.broker_id)
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"replica-fetcher-{self.leader.broker_id}")

    def add(self, partitions: Iterable[Partition]) -> None:
        for p in partitions:
            self.partitions[p.tp] = _FetchState(p)
        self._wakeup.set()

    def remove(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self.partitions.pop(tp, None)

    async def close(self, end_session: bool = False) -> None:
        """Stop fetching; with ``end_session`` (the fetcher's partitions are gone, the leader is
        still there) also tell the leader to drop the fetch session, over a connection still open."""
        await self._link.close(self._task, drop=False)
        data = self.session.close() if end_session else None
        conn = self._link.open_connection()
        if data is not None and conn is not None:
            try:
                # A full request, which forgets nothing: the version given for that is moot.
                resp = await conn.send(self._fetch_request(data, 12, max_wait_ms=0),
                                       conn.version_for(fq.FetchRequest.API_KEY, 17), timeout=1.0)
                self.session.handle_response(resp.error_code, resp.session_id, resp.throttle_time_ms, set())
            except (ConnectionError, OSError, TimeoutError, ApiError) as e:
                log.debug("closing the fetch session with broker %d: %s", self.leader.broker_id, e)
        await self._link.drop()

    # ------------------------------------------------------------ the loop
    async def _run(self) -> None:
        backoff = self.config.backoff_ms / 1000
        failures = 0
        while True:
            ready = self._ready()
            if not ready:
                self._wakeup.clear()
                wait = self._next_retry()
                try:
                    await asyncio.wait_for(self._wakeup.wait(), wait)
                except TimeoutError:
                    pass
                continue
            try:
                conn = await self._connection()
                truncating = [st for st in ready if st.truncating]
                if truncating:
                    await self._truncate(conn, truncating)
                fetching = [st for st in self._ready() if not st.truncating]
                if fetching:
                    await self._fetch(conn, fetching)
                failures = 0
            except asyncio.CancelledError:
                raise
            except (ConnectionError, OSError, TimeoutError, ApiError) as e:
                # The first failure in a row is a warning; the rest (a leader that is gone until the
                # controller moves its partitions) would flood the log every backoff.
                failures += 1
                log.log(logging.WARNING if failures == 1 else logging.DEBUG,
                        "fetching from broker %d (%s:%d) failed: %s; retrying every %.1f s", self.leader.broker_id,
                        self.leader.host, self.leader.port, e, backoff)
                await self._drop_connection()
                await asyncio.sleep(backoff)
            except Exception:
                log.exception("replica fetcher for broker %d failed; retrying", self.leader.broker_id)
                await self._drop_connection()
                await asyncio.sleep(backoff)

    def _ready(self) -> list[_FetchState]:
        now = time.monotonic()
        return [st for st in self.partitions.values() if st.retry_at <= now and st.current]

    def _next_retry(self) -> float | None:
        pending = [st.retry_at for st in self.partitions.values() if st.current]
        return max(0.0, min(pending) - time.monotonic()) if pending else None

    def _delay(self, st: _FetchState) -> None:
        st.retry_at = time.monotonic() + self.config.backoff_ms / 1000

    async def _connection(self) -> BrokerConnection:
        return await self._link.connection(self.leader.broker_id, self.leader.host, self.leader.port)

    async def _drop_connection(self) -> None:
        await self._link.drop()

    # ------------------------------------------------------------ truncation (KIP-101, KIP-279)
    async def _truncate(self, conn: BrokerConnection, states: list[_FetchState]) -> None:
        asked: dict[TopicPartition, _FetchState] = {}
        topics: dict[str, list[oeq.OffsetForLeaderPartition]] = {}
        for st in states:
            p = st.partition
            latest = p.log.latest_epoch
            if latest is None:
                st.truncating = False  # nothing written under any epoch: nothing can diverge
                continue
            asked[p.tp] = st
            topics.setdefault(p.tp.topic, []).append(oeq.OffsetForLeaderPartition(
                partition=p.tp.partition, current_leader_epoch=st.leader_epoch, leader_epoch=latest))
        if not asked:
            return
        req = oeq.OffsetForLeaderEpochRequest(replica_id=self.node_id, topics=[
            oeq.OffsetForLeaderTopic(topic=t, partitions=ps) for t, ps in topics.items()])
        resp = await conn.send(req, conn.version_for(req.API_KEY, 4))
        for t in resp.topics:
            for r in t.partitions:
                st = asked.get(TopicPartition(t.topic, r.partition))
                if st is None or not st.current or self.partitions.get(st.partition.tp) is not st:
                    continue
                if r.error_code != ErrorCode.NONE:
                    log.info("%s-%d: OffsetsForLeaderEpoch from broker %d: %s", t.topic, r.partition,
                             self.leader.broker_id, ErrorCode(r.error_code).name)
                    self._delay(st)
                    continue
                if self._truncate_to_epoch_end(st, r.leader_epoch, r.end_offset):
                    st.truncating = False

    def _truncate_to_epoch_end(self, st: _FetchState, leader_epoch: int, leader_end: int) -> bool:
        p = st.partition
        lg = p.log
        mine = lg.end_offset_for_epoch(leader_epoch) if leader_epoch >= 0 else (UNDEFINED_EPOCH, UNDEFINED_OFFSET)
        offset, complete = truncation_offset(leader_epoch, leader_end, mine if mine[0] >= 0 else None,
                                             lg.log_end_offset, lg.high_watermark)
        if offset < lg.log_end_offset:
            log.info("%s-%d: truncating from %d to %d (leader %d's epoch %d ends at %d)", p.tp.topic, p.tp.partition,
                     lg.log_end_offset, offset, self.leader.broker_id, leader_epoch, leader_end)
        # Also at the log end: the truncation drops a trailing epoch with no batches.
        if lg.truncate_to(offset):
            self.rm.fetch_purgatory.check_and_complete(p.tp)
        return complete

    # ------------------------------------------------------------ fetching
    def _fetch_version(self, conn: BrokerConnection, states: list[_FetchState]) -> int:
        # Topic ids (v13+) only when every partition has one.
        cap = 17 if all(st.partition.topic_id.int != 0 for st in states) else 12
        return conn.version_for(fq.FetchRequest.API_KEY, cap)

    def _fetch_request(self, data: FetchRequestData, version: int, max_wait_ms: int) -> fq.FetchRequest:
        cfg = self.config
        return fq.FetchRequest(
            cluster_id=None, replica_id=self.node_id,
            replica_state=fq.ReplicaState(replica_id=self.node_id, replica_epoch=self.broker_epoch()),
            max_wait_ms=max_wait_ms, min_bytes=cfg.min_bytes, max_bytes=cfg.response_max_bytes,
            isolation_level=0, session_id=data.session_id, session_epoch=data.epoch,
            topics=data.topics(), forgotten_topics_data=data.forgotten_topics(version), rack_id="")

    async def _fetch(self, conn: BrokerConnection, states: list[_FetchState]) -> None:
        v = self._fetch_version(conn, states)
        cfg = self.config
        wanted: dict[tuple[str, int], PartitionFetch] = {}
        asked: dict[TopicPartition, _FetchState] = {}
        for st in states:
            p = st.partition
            lg = p.log
            asked[p.tp] = st
            latest = lg.latest_epoch
            wanted[p.tp] = PartitionFetch(p.topic_id, lg.log_end_offset, st.leader_epoch,
                                          latest if latest is not None else UNDEFINED_EPOCH, lg.log_start_offset,
                                          cfg.max_bytes)
        req = self._fetch_request(self.session.build(wanted), v, cfg.max_wait_ms)
        try:
            resp = await conn.send(req, v, timeout=cfg.request_timeout_ms / 1000 + cfg.max_wait_ms / 1000)
        except BaseException:
            self.session.handle_error()  # no answer: the next fetch is a full one
            raise
        names = {st.partition.topic_id: st.partition.tp.topic for st in states}
        answered = {TopicPartition(names.get(t.topic_id, "") if v >= 13 else t.topic, pd.partition_index)
                    for t in resp.responses for pd in t.partitions}
        if not self.session.handle_response(resp.error_code, resp.session_id, resp.throttle_time_ms, answered):
            # As Kafka's ReplicaFetcherThread: a topic id mismatch backs off like any refusal.
            if resp.error_code not in SESSION_ERRORS - {ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR} \
                    and resp.error_code != ErrorCode.NONE:
                raise ApiError(ErrorCode(resp.error_code), "fetch refused")
            # A session error or an answer that does not fit the session: a full fetch next, now.
            log.info("fetch session with broker %d: %s; starting over with a full fetch", self.leader.broker_id,
                     ErrorCode(resp.error_code).name if resp.error_code else "an answer naming unknown partitions")
            return
        out_of_range: list[_FetchState] = []
        for t in resp.responses:
            topic = names.get(t.topic_id, "") if v >= 13 else t.topic
            for pd in t.partitions:
                st = asked.get(TopicPartition(topic, pd.partition_index))
                if st is None or not st.current or self.partitions.get(st.partition.tp) is not st:
                    continue  # the partition moved on while the fetch was out
                err = ErrorCode(pd.error_code)
                if err == ErrorCode.NONE:
                    self._process(st, pd)
                elif err == ErrorCode.OFFSET_OUT_OF_RANGE:
                    out_of_range.append(st)
                else:
                    if err not in _RETRY_LATER:
                        log.warning("%s-%d: fetch from broker %d: %s", topic, pd.partition_index,
                                    self.leader.broker_id, err.name)
                    self._delay(st)
        if out_of_range:
            await self._handle_out_of_range(conn, out_of_range)

    def _process(self, st: _FetchState, pd: object) -> None:
        p = st.partition
        lg = p.log
        div = pd.diverging_epoch
        if div is not None and div.epoch >= 0 and div.end_offset >= 0:
            if not self._truncate_to_epoch_end(st, div.epoch, div.end_offset):
                st.truncating = True
            return
        data = pd.records
        if data:
            batches = list(rec.iter_batches(data))
            if batches:
                headers = [h for _, h in batches]
                end = batches[-1][0] + headers[-1].size  # a partial batch at the end waits for the next fetch
                records = memoryview(data)[:end]
                try:
                    try:
                        lg.append_as_follower(records, headers)
                    except UnexpectedAppendOffsetError as e:
                        # An empty log asked for the leader's log start, which DeleteRecords put in
                        # the middle of a batch: the log starts over at that batch, as Kafka's does.
                        leo = lg.log_end_offset
                        if not (leo == lg.log_start_offset and e.first_offset < leo <= headers[0].last_offset):
                            raise
                        lg.truncate_fully_and_start_at(e.first_offset)
                        lg.append_as_follower(records, headers)
                    p.stats.replication_bytes_in += len(records)
                except ApiError as e:
                    log.warning("%s-%d: appending the leader's batches failed: %s", p.tp.topic, p.tp.partition, e)
                    st.truncating = True
                    self._delay(st)
                    return
        before = lg.high_watermark
        p.update_follower_high_watermark(pd.high_watermark)
        start = min(pd.log_start_offset, lg.high_watermark)
        if start > lg.log_start_offset:
            lg.maybe_increment_log_start_offset(start)
        if data or lg.high_watermark != before:
            # Consumers reading this follower (KIP-392) wait on its HW.
            self.rm.fetch_purgatory.check_and_complete(p.tp)

    async def _handle_out_of_range(self, conn: BrokerConnection, states: list[_FetchState]) -> None:
        """The leader has not our fetch offset: its log ends before ours (truncate to its end)
        or starts after ours (start over empty at its log start)."""
        latest = await self._list_offsets(conn, states, LATEST_TIMESTAMP)
        earliest = await self._list_offsets(conn, states, EARLIEST_TIMESTAMP)
        for st in states:
            p = st.partition
            lg = p.log
            end, start = latest.get(p.tp), earliest.get(p.tp)
            if end is None or start is None or not st.current:
                self._delay(st)
                continue
            if end < lg.log_end_offset:
                log.warning("%s-%d: the leader's log ends at %d, before ours at %d: truncating", p.tp.topic,
                            p.tp.partition, end, lg.log_end_offset)
                lg.truncate_to(end)
            elif start > lg.log_end_offset:
                log.info("%s-%d: the leader's log starts at %d, after our end %d: starting over there", p.tp.topic,
                         p.tp.partition, start, lg.log_end_offset)
                lg.truncate_fully_and_start_at(start)

    async def _list_offsets(self, conn: BrokerConnection, states: list[_FetchState],
                            timestamp: int) -> dict[TopicPartition, int]:
        by_topic: dict[str, list[loq.ListOffsetsPartition]] = {}
        for st in states:
            tp = st.partition.tp
            by_topic.setdefault(tp.topic, []).append(loq.ListOffsetsPartition(
                partition_index=tp.partition, current_leader_epoch=st.leader_epoch, timestamp=timestamp))
        req = loq.ListOffsetsRequest(replica_id=self.node_id, isolation_level=0, timeout_ms=0, topics=[
            loq.ListOffsetsTopic(name=t, partitions=ps) for t, ps in by_topic.items()])
        resp = await conn.send(req, conn.version_for(req.API_KEY, 10))
        out = {}
        for t in resp.topics:
            for r in t.partitions:
                if r.error_code == ErrorCode.NONE:
                    out[TopicPartition(t.name, r.partition_index)] = r.offset
        return out


class ReplicaFetcherManager:
    """Which leader each followed partition is fetched from: one ``ReplicaFetcher`` per leader
    broker, created when the first partition needs it and closed when its last one goes."""

    def __init__(self, rm: ReplicaManager, node_id: int, config: FetcherConfig,
                 broker_epoch: Callable[[], int] = lambda: -1, connector: BrokerConnector = PLAINTEXT_CONNECTOR
                 ) -> None:
        self.rm = rm
        self.connector = connector
        self.node_id = node_id
        self.config = config
        self.broker_epoch = broker_epoch
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._closing: set[asyncio.Task] = set()

    def add_partitions(self, leader: LeaderEndpoint, partitions: list[Partition]) -> None:
        f = self.fetchers.get(leader.broker_id)
        if f is not None and f.leader != leader:
            # The leader came back on another address.
            self._close(self.fetchers.pop(leader.broker_id))
            f = None
        if f is None:
            f = self.fetchers[leader.broker_id] = ReplicaFetcher(leader, self.rm, self.node_id, self.config,
                                                                 self.broker_epoch, self.connector)
            f.start()
        for other in self.fetchers.values():
            if other is not f:
                other.remove(p.tp for p in partitions)
        f.add(partitions)
        log.debug("fetching %s from broker %d", [f"{p.tp.topic}-{p.tp.partition}" for p in partitions],
                  leader.broker_id)

    def remove_partitions(self, tps: Iterable[TopicPartition]) -> None:
        tps = list(tps)
        for broker_id, f in list(self.fetchers.items()):
            f.remove(tps)
            if not f.partitions:
                self._close(self.fetchers.pop(broker_id), end_session=True)

    def _close(self, f: ReplicaFetcher, end_session: bool = False) -> None:
        task = asyncio.get_running_loop().create_task(f.close(end_session))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def fetch_state(self, tp: TopicPartition) -> tuple[int, bool] | None:
        """(leader broker id, truncating) of a followed partition; for tests and status."""
        for broker_id, f in self.fetchers.items():
            st = f.partitions.get(tp)
            if st is not None:
                return broker_id, st.truncating
        return None

    async def shutdown(self) -> None:
        fetchers = list(self.fetchers.values())
        self.fetchers.clear()
        for f in fetchers:
            await f.close()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
