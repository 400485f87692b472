"""Request handlers of the data path: Produce, Fetch, ListOffsets, OffsetForLeaderEpoch,
DeleteRecords, in front of the ReplicaManager."""

from __future__ import annotations
from dataclasses import dataclass

import logging
import time
from typing import Any, Callable

from rivulet.common.file_region import FileRegion
from rivulet.common.logs import RateLimitFilter
from rivulet.common.time import Clock
from rivulet.common.types import TopicPartition
from rivulet.protocol.accel import speedups
from rivulet.protocol.errors import NO_ERROR, ApiError, ErrorCode
from rivulet.protocol.fetch_answer import AnswerTopic, FetchAnswer, PartitionResult, partition_data
from rivulet.protocol.framing import RequestHeader
from rivulet.protocol.messages import (
    delete_records_response as drr,
    fetch_response as fr,
    list_offsets_response as lor,
    offset_for_leader_epoch_response as ofler,
    produce_response as pr,
)
from rivulet.protocol.messages.delete_records_request import DeleteRecordsRequest
from rivulet.protocol.messages.fetch_request import FetchPartition, FetchRequest
from rivulet.protocol.messages.list_offsets_request import ListOffsetsRequest
from rivulet.protocol.messages.offset_for_leader_epoch_request import OffsetForLeaderEpochRequest
from rivulet.protocol.messages.produce_request import ProduceRequest
from rivulet.protocol.records import count_records, first_batch_is_transactional, iter_batches
from rivulet.protocol.schema import ZERO_UUID
from rivulet.replication.metadata_cache import MetadataCache
from rivulet.replication.partition import Partition
from rivulet.replication.replica_manager import (
    FetchParams,
    FetchRequestPartition,
    FetchResult,
    ProduceResult,
    ReplicaManager,
    TxnOperation,
)
from rivulet.security.acls import AclOperation as Op, ResourceType
from rivulet.server.acls import Authz
from rivulet.server.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    CachedPartition,
    FetchSession,
    FetchSessionCache,
    PartitionKey,
    key_of,
    must_answer,
    next_epoch,
)
from rivulet.server.answer import CLOSE_CONNECTION, NO_RESPONSE, Answer, then
from rivulet.server.handlers import Handler
from rivulet.server.metadata import INTERNAL_TOPICS
from rivulet.server.network import KafkaConnection
from rivulet.server.quotas import ClientQuotas
from rivulet.storage import Log
from rivulet.server.topics import TopicManager

log = logging.getLogger(__name__)
# One line per error per interval: a producer retrying a partition every few seconds shows up.
log.addFilter(RateLimitFilter(level=logging.INFO))

# Partition errors of a Produce that a producer retries (Kafka's RetriableException ones it can
# meet here): it sends the batch again, so nothing else tells that it kept failing.
_RETRIED_PRODUCE_ERRORS = frozenset({
    ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.CORRUPT_MESSAGE, ErrorCode.CONCURRENT_TRANSACTIONS,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})


def _log_retried(tp: TopicPartition, error: ErrorCode, records: bytes | bytearray | memoryview | None,
                 transactional_id: str | None, client_id: str, why: str | None) -> None:
    """An INFO line (rate-limited per error) for a produce answer the producer will retry."""
    if not log.isEnabledFor(logging.INFO):
        return
    pid = epoch = seq = -1
    try:
        if records is not None:
            _pos, h = next(iter_batches(records))
            pid, epoch, seq = h.producer_id, h.producer_epoch, h.base_sequence
    except (StopIteration, ApiError):
        pass
    log.info("produce to %s answered %s, which the producer retries: producer id %d epoch %d sequence %d, "
             "transactional id %s, client %s%s", tp, ErrorCode(error).name, pid, epoch, seq, transactional_id,
             client_id, f" ({why})" if why else "", extra={"kind": f"retried produce {ErrorCode(error).name}"})


LIST_OFFSETS_LATEST = -1
LIST_OFFSETS_EARLIEST = -2
LIST_OFFSETS_MAX_TIMESTAMP = -3
LIST_OFFSETS_EARLIEST_LOCAL = -4
LIST_OFFSETS_LATEST_TIERED = -5
LIST_OFFSETS_EARLIEST_PENDING_UPLOAD = -6
# The first ListOffsets version that carries each special timestamp (older ones answer
# UNSUPPORTED_VERSION, as Kafka's).
_LIST_OFFSETS_MIN_VERSION = {LIST_OFFSETS_MAX_TIMESTAMP: 7, LIST_OFFSETS_EARLIEST_LOCAL: 8,
                             LIST_OFFSETS_LATEST_TIERED: 9, LIST_OFFSETS_EARLIEST_PENDING_UPLOAD: 11}
# ListOffsets and OffsetForLeaderEpoch from this replica id may read a follower (Kafka's tools).
DEBUGGING_REPLICA_ID = -2


def _batch_epoch(lg: Log, offset: int) -> int:
    """The leader epoch of the batch holding ``offset``, which may lie below the log start (a
    segment's largest timestamp outlives DeleteRecords): the epoch cache, cut at the log start,
    then starts with the epoch that wrote it."""
    epoch = lg.epoch_for_offset(offset)
    if epoch is None:
        entries = lg.epoch_entries()
        epoch = entries[0][0] if entries and offset < entries[0][1] else -1
    return epoch


def _py_fetch_wanted(parts: list[FetchPartition], name: str, v: int,
                     wanted: list[FetchRequestPartition]) -> list[TopicPartition]:
    """A Fetch request topic's partitions: their keys, in order, each with its
    FetchRequestPartition appended to ``wanted`` (the fields version ``v`` lacks at -1)."""
    tps = [TopicPartition(name, fp.partition) for fp in parts]
    for fp, tp in zip(parts, tps, strict=True):
        wanted.append(FetchRequestPartition(
            tp, fp.fetch_offset, fp.partition_max_bytes,
            fp.current_leader_epoch if v >= 9 else -1, fp.log_start_offset if v >= 5 else -1,
            fp.last_fetched_epoch if v >= 12 else -1))
    return tps


# The C accelerator makes the same objects without a Python call for each (a consumer without
# a fetch session names a thousand partitions in each Fetch); RIVULET_NO_SPEEDUPS=1 keeps
# the reference above.
_fetch_wanted: Callable[[list[FetchPartition], str, int, list[FetchRequestPartition]], list[TopicPartition]]
_speedups = speedups()
_fetch_wanted = _py_fetch_wanted if _speedups is None else _speedups.fetch_wanted


def _changed(session: FetchSession, cached: list[CachedPartition], indexes: list[int],
             entries: list[PartitionResult | fr.PartitionData]) -> tuple[list[int], list[PartitionResult | fr.PartitionData]]:
    """What an incremental answer carries of one run of a topic's partitions: those with a change
    Kafka counts, each remembered as answered."""
    keep_i: list[int] = []
    keep_e: list[PartitionResult | fr.PartitionData] = []
    moved: list[CachedPartition] = []
    for cp, index, e in zip(cached, indexes, entries, strict=True):
        if type(e) is fr.PartitionData:
            error, records = e.error_code, e.records
            diverging = e.diverging_epoch.epoch != -1 or e.diverging_epoch.end_offset != -1
        else:
            error, records, diverging = e.error, e.records, e.diverging_epoch is not None
            if not records and not error and not diverging and e.high_watermark == cp.high_watermark \
                    and e.log_start_offset == cp.local_log_start_offset and e.preferred_read_replica == -1:
                continue  # the caught-up partition: nothing to answer, nothing to remember
        if must_answer(cp, error, records, e, diverging, True):
            keep_i.append(index)
            keep_e.append(e)
            if records is not None and len(records) > 0:
                moved.append(cp)
    for cp in moved:  # after the walk: the runs being walked stay as they are
        session.move_to_end(cp)
    return keep_i, keep_e


@dataclass(eq=False)
class RecordHandlers:
    replica_manager: ReplicaManager
    metadata: TopicManager
    quotas: ClientQuotas
    authz: Authz
    fetch_sessions: FetchSessionCache
    clock: Clock
    # Cluster mode: where a partition's leader is, for the KIP-951 hints of NOT_LEADER_OR_FOLLOWER.
    metadata_cache: MetadataCache | None = None

    def handlers(self) -> dict[int, Handler]:
        return {0: self.handle_produce, 1: self.handle_fetch, 2: self.handle_list_offsets,
                21: self.handle_delete_records, 23: self.handle_offset_for_leader_epoch}

    def _known(self, tp: TopicPartition) -> bool:
        """Whether the cluster has this partition (on this broker or another)."""
        cache = self.metadata_cache
        if cache is not None and cache.partition(tp) is not None:
            return True
        info = self.metadata.get(tp.topic)
        return info is not None and 0 <= tp.partition < info.num_partitions

    def _partition_or_error(self, tp: TopicPartition) -> Partition:
        try:
            return self.replica_manager.get_partition_or_error(tp)
        except ApiError as e:
            code = self._hosted_elsewhere(tp, e.code)
            if code != e.code:
                raise ApiError(code) from None
            raise

    def _hosted_elsewhere(self, tp: TopicPartition, error: ErrorCode) -> ErrorCode:
        """In cluster mode a partition this broker holds no replica of is another's: as Kafka,
        NOT_LEADER_OR_FOLLOWER, so the client refreshes its metadata."""
        if error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and self.metadata_cache is not None \
                and self.metadata_cache.partition(tp) is not None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return error

    # ------------------------------------------------------------ Produce
    def handle_produce(self, header: RequestHeader, req: ProduceRequest, conn: KafkaConnection) -> Answer:
        t0 = time.perf_counter_ns()
        size = conn.request_size
        acks = req.acks
        v = header.api_version
        entries: dict[TopicPartition, Any] = {}
        early: dict[TopicPartition, ProduceResult] = {}
        transactional_id = req.transactional_id if v >= 3 else None
        # v13 names topics by id (KIP-516): an unknown id is answered UNKNOWN_TOPIC_ID.
        names = {id(td): self.metadata.topic_name(td.topic_id) if v >= 13 else td.name for td in req.topic_data}
        # Authorization, as Kafka: WRITE on the transactional id refuses the whole request,
        # WRITE on each topic its partitions (before telling whether the topic exists).
        txn_refused = transactional_id is not None and \
            not self.authz.transactional_id(conn, Op.WRITE, transactional_id)
        writable = self.authz.allowed(conn, Op.WRITE, ResourceType.TOPIC,
                                      (n for n in names.values() if n is not None))
        for td in req.topic_data:
            name = names[id(td)]
            if name is None:
                continue
            for pd in td.partition_data:
                tp = TopicPartition(name, pd.index)
                if txn_refused:
                    early[tp] = ProduceResult(error=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
                elif acks not in (0, 1, -1):
                    early[tp] = ProduceResult(error=ErrorCode.INVALID_REQUIRED_ACKS)
                elif name not in writable:
                    early[tp] = ProduceResult(error=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                elif not self._known(tp):
                    early[tp] = ProduceResult(error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                elif name in INTERNAL_TOPICS:
                    early[tp] = ProduceResult(error=ErrorCode.INVALID_TOPIC_EXCEPTION,
                                              message=f"Cannot append to internal topic {name}")
                else:
                    entries[tp] = pd.records
        if transactional_id is None and any(first_batch_is_transactional(r) for r in entries.values()):
            # Kafka refuses transactional records without a transactional id outright.
            for tp in entries:
                early[tp] = ProduceResult(error=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            entries = {}
        # KIP-890: v11 knows TRANSACTION_ABORTABLE; v12+ comes from a transaction.version 2
        # producer, which sends no AddPartitionsToTxn. Decided by the version alone, as Kafka (below
        # level 2 the coordinator refuses the add: UNSUPPORTED_VERSION, as Kafka 4.3.1).
        operation = TxnOperation.for_produce(header.api_version)
        result = self.replica_manager.append_records(
            entries, required_acks=acks, timeout_ms=req.timeout_ms, transactional_id=transactional_id,
            txn_operation=operation)
        spent = time.perf_counter_ns() - t0
        user, client_id = conn.user, header.client_id or ""

        def throttle() -> int:
            # Kafka's order: the byte rate always (acks=0 too), the request time unless acks=0;
            # the longer throttle wins and mutes the connection.
            ms = self.quotas.produce.maybe_record_and_get_throttle_time_ms(user, client_id, size)
            if acks != 0:
                ms = max(ms, self.quotas.request.record_request_time(user, client_id, spent))
            conn.throttle(ms)
            return ms

        if acks == 0:
            throttle()

            def no_answer(results: dict[TopicPartition, ProduceResult]) -> Any:
                # Kafka closes the connection on any error: the producer has no other way to learn it.
                failed = any(r.error != ErrorCode.NONE for r in (*early.values(), *results.values()))
                return CLOSE_CONNECTION if failed else NO_RESPONSE
            return then(result, no_answer)

        def build(results: dict[TopicPartition, ProduceResult]) -> pr.ProduceResponse:
            results = {**early, **results}
            by_topic: dict[Any, list[pr.PartitionProduceResponse]] = {}
            hints = _LeaderHints(self.metadata_cache, conn.listener.name)
            for td in req.topic_data:
                name = names[id(td)]
                key = td.topic_id if v >= 13 else td.name
                for pd in td.partition_data:
                    if name is None:
                        by_topic.setdefault(key, []).append(pr.PartitionProduceResponse(
                            index=pd.index, error_code=ErrorCode.UNKNOWN_TOPIC_ID, base_offset=-1,
                            log_append_time_ms=-1, log_start_offset=-1, record_errors=[], error_message=None))
                        continue
                    tp = TopicPartition(name, pd.index)
                    r = results[tp]
                    error = self._hosted_elsewhere(tp, r.error)
                    if error and error in _RETRIED_PRODUCE_ERRORS:
                        _log_retried(tp, error, pd.records, transactional_id, client_id, r.message)
                    part = pr.PartitionProduceResponse(
                        index=pd.index, error_code=error, base_offset=r.base_offset,
                        log_append_time_ms=r.log_append_time, log_start_offset=r.log_start_offset,
                        record_errors=[pr.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m)
                                       for i, m in r.record_errors or ()],
                        # As Kafka: only a record validation failure carries its own message;
                        # otherwise clients show their error code's standard text.
                        error_message=r.message if r.record_errors is not None else None)
                    if error == ErrorCode.NOT_LEADER_OR_FOLLOWER and v >= 10:
                        leader, epoch = hints.leader(tp)
                        part.current_leader = pr.LeaderIdAndEpoch(leader_id=leader, leader_epoch=epoch)
                    by_topic.setdefault(key, []).append(part)
            resp = pr.ProduceResponse(
                responses=[pr.TopicProduceResponse(name="" if v >= 13 else k, topic_id=k if v >= 13 else ZERO_UUID,
                                                   partition_responses=ps) for k, ps in by_topic.items()],
                throttle_time_ms=throttle())
            if v >= 10:
                resp.node_endpoints = [pr.NodeEndpoint(node_id=i, host=h, port=p, rack=rk)
                                       for i, h, p, rk in hints.endpoints()]
            return resp

        return then(result, build)

    # ------------------------------------------------------------ Fetch
    def handle_fetch(self, header: RequestHeader, req: FetchRequest, conn: KafkaConnection) -> Answer:
        t0 = time.perf_counter_ns()
        v = header.api_version
        replica_id = req.replica_state.replica_id if v >= 15 else req.replica_id
        from_follower = replica_id >= 0
        # KIP-227, as Kafka's FetchManager: epoch 0 or -1 is a full fetch (closing the session it
        # names), 0 opening a session; n > 0 an incremental fetch of session n's next epoch.
        # Before v7 the defaults (session 0, epoch -1) make every fetch sessionless.
        sessions = self.fetch_sessions
        session: FetchSession | None = None
        epoch = req.session_epoch
        if epoch == INITIAL_EPOCH or epoch == FINAL_EPOCH:
            if req.session_id != INVALID_SESSION_ID:
                sessions.remove(req.session_id)
        else:
            found = sessions.incremental(self.clock.milliseconds(), req.session_id, epoch, v >= 13,
                                         self._request_partitions(req, v), self._forgotten(req, v))
            if isinstance(found, ErrorCode):
                return fr.FetchResponse(throttle_time_ms=0, error_code=found, session_id=INVALID_SESSION_ID,
                                        responses=[])
            session = found  # None: the session is closed, emptied by this request
        opening = epoch == INITIAL_EPOCH
        user, client_id = conn.user, header.client_id or ""
        max_bytes = req.max_bytes if v >= 3 else 2**31 - 1
        if not from_follower:  # never ask for more than the consumer's quota lets through at once
            max_bytes = self.quotas.consumer_max_bytes(user, client_id, max_bytes)
        params = FetchParams(replica_id=replica_id, max_wait_ms=req.max_wait_ms,
                             min_bytes=min(req.min_bytes, max_bytes), max_bytes=max_bytes,
                             isolation_level=req.isolation_level if v >= 4 else 0,
                             fetch_only_leader=replica_id >= 0 or v < 11,
                             client_rack=req.rack_id if v >= 11 and replica_id < 0 else "",
                             replica_epoch=req.replica_state.replica_epoch if v >= 15 else -1,
                             zero_copy=conn.sends_files)
        order, names = self._plan(req, v, session, conn, from_follower, params.partitions)
        runs = session.runs() if session is not None else []  # the session's partitions, as in ``order``
        result = self.replica_manager.fetch_messages(params)
        spent = time.perf_counter_ns() - t0
        expected_epoch = next_epoch(epoch)

        def build(results: dict[TopicPartition, FetchResult]) -> fr.FetchResponse:
            # An incremental answer is for the epoch its request advanced the session to: a
            # duplicate request in between makes it stale (Kafka's IncrementalFetchContext).
            stale = session is not None and session.epoch != expected_epoch
            answer_id = session.id if session is not None else INVALID_SESSION_ID
            if not from_follower:
                # Kafka counts the whole response; its record sets are nearly all of it.
                size = sum(len(r.records) for r in results.values() if r.records is not None)
                ms = self.quotas.consumer_throttle_ms(user, client_id, spent, size)
                if ms > 0:
                    conn.throttle(ms)
                    return fr.FetchResponse(
                        throttle_time_ms=ms, error_code=ErrorCode.INVALID_FETCH_SESSION_EPOCH if stale else 0,
                        session_id=answer_id, responses=[])
            if stale:
                return fr.FetchResponse(throttle_time_ms=0, error_code=ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                                        session_id=answer_id, responses=[])
            self._count_fetch(results, from_follower)
            # The results go into the answer as they are (FetchAnswer writes them); only the
            # partitions answered otherwise get a PartitionData of their own.
            topics: list[AnswerTopic] = []
            hints = _LeaderHints(self.metadata_cache, conn.listener.name)
            answered: list[list[PartitionResult | fr.PartitionData]] = []
            last_key = None
            for n, (topic_id, name, indexes, tps, refused) in enumerate(order):
                if name is None or refused:
                    code = ErrorCode.UNKNOWN_TOPIC_ID if name is None else ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    entries: list[PartitionResult | fr.PartitionData] = [fr.PartitionData(
                        partition_index=part, high_watermark=-1, last_stable_offset=-1, log_start_offset=-1,
                        error_code=code, aborted_transactions=None, preferred_read_replica=-1, records=b"")
                        for part in indexes]
                else:
                    entries = [results[tp] for tp in tps]
                    for i, r in enumerate(entries):
                        if r.error != NO_ERROR:
                            entries[i] = self._failed_partition(indexes[i], tps[i], r, v, hints)
                if opening or session is not None:
                    answered.append(entries)
                if session is not None:
                    indexes, entries = _changed(session, runs[n][2], indexes, entries)
                    if not indexes:
                        continue
                key = topic_id if v >= 13 else name
                if key is not last_key and (not topics or key != last_key):  # identity first: cheap
                    topics.append(AnswerTopic(name or "", topic_id or ZERO_UUID, [], []))
                    last_key = key
                answer = topics[-1]
                answer.indexes += indexes
                answer.entries += entries
            if opening:
                answer_id = self._open_session(req, v, names, answered, from_follower)
            return FetchAnswer(topics, [fr.NodeEndpoint(node_id=i, host=h, port=p, rack=rk)
                                        for i, h, p, rk in hints.endpoints()] if v >= 16 else [], answer_id)

        return then(result, build)

    def _plan(self, req: FetchRequest, v: int, session: FetchSession | None, conn: KafkaConnection,
              from_follower: bool, wanted: list[FetchRequestPartition],
              ) -> tuple[list[tuple[Any, str | None, list[int], list[TopicPartition], bool]], dict[Any, str | None]]:
        """What a Fetch reads: the request's topics, or its session's partitions, with ``wanted``
        filled with the readable ones."""
        # Per request topic (a session's run of partitions of one topic): (topic id, topic name or
        # None when the id is unknown, its partition indexes, their keys, whether READ was refused).
        order: list[tuple[Any, str | None, list[int], list[TopicPartition], bool]] = []
        names: dict[Any, str | None] = {}
        if session is None:
            for ft in req.topics:
                names[id(ft)] = self.metadata.topic_name(ft.topic_id) if v >= 13 else ft.topic
            runs: list[tuple[Any, str | None, list[CachedPartition]]] = []
        else:
            # The session's partitions are read, not only the request's (it may name none).
            if session.uses_topic_ids:
                session.resolve_names(self.metadata.topic_name)
            runs = session.runs()
            for run in runs:
                names[id(run)] = run[1]
        # Authorization, as Kafka: a follower needs CLUSTER_ACTION (else every partition is refused),
        # a consumer READ on each topic.
        if from_follower:
            readable = set(names.values()) if self.authz.cluster(conn, Op.CLUSTER_ACTION) else set()
        else:
            readable = self.authz.allowed(conn, Op.READ, ResourceType.TOPIC, (n for n in names.values() if n))
        if session is None:
            for ft in req.topics:
                name = names[id(ft)]
                indexes = [fp.partition for fp in ft.partitions]
                if name is None:
                    order.append((ft.topic_id, None, indexes, [], False))
                    continue
                allowed = name in readable
                # A refused topic's partitions are answered from their indexes alone.
                tps = _fetch_wanted(ft.partitions, name, v, wanted) if allowed else []
                order.append((ft.topic_id, name, indexes, tps, not allowed))
        else:
            for run in runs:
                topic_id, name, cached = run
                indexes = [cp.partition for cp in cached]
                if name is None:
                    order.append((topic_id, None, indexes, [], False))
                    continue
                allowed = name in readable
                tps = []
                if allowed:
                    ws = [cp.wanted() for cp in cached]
                    wanted += ws
                    tps = [w.tp for w in ws]
                order.append((topic_id, name, indexes, tps, not allowed))
        return order, names

    def _request_partitions(self, req: FetchRequest, v: int) -> list[CachedPartition]:
        """The request's partitions as a session keeps them (the fields version ``v`` lacks at -1)."""
        out = []
        for ft in req.topics:
            name = self.metadata.topic_name(ft.topic_id) if v >= 13 else ft.topic
            topic_id = ft.topic_id if v >= 13 else ZERO_UUID
            for fp in ft.partitions:
                out.append(CachedPartition(
                    name, topic_id, fp.partition, fp.fetch_offset, fp.partition_max_bytes,
                    fp.current_leader_epoch if v >= 9 else -1, fp.log_start_offset if v >= 5 else -1,
                    fp.last_fetched_epoch if v >= 12 else -1))
        return out

    @staticmethod
    def _forgotten(req: FetchRequest, v: int) -> list[PartitionKey]:
        return [(ft.topic_id if v >= 13 else ft.topic, p) for ft in req.forgotten_topics_data for p in ft.partitions]

    def _open_session(self, req: FetchRequest, v: int, names: dict[Any, str | None],
                      answered: list[list[PartitionResult | fr.PartitionData]], from_follower: bool) -> int:
        """A full fetch's session, over every partition it answered (Kafka's FullFetchContext)."""
        uses_ids = v >= 13
        parts: dict[PartitionKey, CachedPartition] = {}
        for ft, entries in zip(req.topics, answered, strict=True):
            name = names[id(ft)]
            topic_id = ft.topic_id if uses_ids else ZERO_UUID
            for fp, e in zip(ft.partitions, entries, strict=True):
                parts[key_of(name, topic_id, fp.partition, uses_ids)] = CachedPartition(
                    name, topic_id, fp.partition, fp.fetch_offset, fp.partition_max_bytes,
                    fp.current_leader_epoch if v >= 9 else -1, fp.log_start_offset if v >= 5 else -1,
                    fp.last_fetched_epoch if v >= 12 else -1, e.high_watermark, e.log_start_offset)
        return self.fetch_sessions.create(self.clock.milliseconds(), from_follower, uses_ids, parts)

    def _failed_partition(self, index: int, tp: TopicPartition, r: FetchResult, v: int,
                          hints: _LeaderHints) -> fr.PartitionData:
        """A partition whose read failed: the error (where its leader is, when that is why)."""
        data = partition_data(index, r)
        data.error_code = error = self._hosted_elsewhere(tp, r.error)
        if v >= 16 and error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH):
            leader, epoch = hints.leader(tp)
            data.current_leader = fr.LeaderIdAndEpoch(leader_id=leader, leader_epoch=epoch)
        return data

    def _count_fetch(self, results: dict[TopicPartition, FetchResult], from_follower: bool) -> None:
        """Per-topic fetch counters (Kafka's BrokerTopicMetrics), counted once per answered
        partition; a follower's bytes are replication, not bytes out."""
        partitions = self.replica_manager.partitions
        for tp, r in results.items():
            p = partitions.get(tp)
            if p is None:
                continue
            stats = p.stats
            stats.fetch_requests += 1
            if r.error != NO_ERROR:
                stats.failed_fetch_requests += 1
            elif r.records and from_follower:
                stats.replication_bytes_out += len(r.records)
            elif r.records:
                stats.bytes_out += len(r.records)
                stats.messages_out += (r.records.record_count if isinstance(r.records, FileRegion)
                                       else count_records(r.records))

    # ------------------------------------------------------------ ListOffsets
    def handle_list_offsets(
        self, header: RequestHeader, req: ListOffsetsRequest, conn: KafkaConnection
    ) -> lor.ListOffsetsResponse:
        out = []
        describable = self.authz.allowed(conn, Op.DESCRIBE, ResourceType.TOPIC, (t.name for t in req.topics))
        for t in req.topics:
            parts = []
            for p in t.partitions:
                r = lor.ListOffsetsPartitionResponse(partition_index=p.partition_index, error_code=0,
                                                     timestamp=-1, offset=-1, leader_epoch=-1, old_style_offsets=[])
                try:
                    if t.name not in describable:
                        raise ApiError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                    tp = TopicPartition(t.name, p.partition_index)
                    part = self._partition_or_error(tp)
                    epoch = p.current_leader_epoch if header.api_version >= 4 else -1
                    if req.replica_id == DEBUGGING_REPLICA_ID:
                        part.check_leader_epoch(epoch)
                    else:
                        part.check_leader(epoch)
                    lg = part.log
                    ts = p.timestamp
                    if header.api_version < _LIST_OFFSETS_MIN_VERSION.get(ts, 0):
                        raise ApiError(ErrorCode.UNSUPPORTED_VERSION)
                    isolation = req.isolation_level if header.api_version >= 2 else 0
                    # Lookups by time never answer an offset a consumer of that isolation cannot read
                    # yet; a follower (a replica id) may see up to the leader's log end.
                    if req.replica_id >= 0:
                        fetchable = lg.log_end_offset
                    else:
                        fetchable = part.last_stable_offset if isolation == 1 else part.high_watermark
                    if ts == LIST_OFFSETS_LATEST:
                        r.offset = fetchable
                        r.leader_epoch = part.leader_epoch
                    elif ts in (LIST_OFFSETS_LATEST_TIERED, LIST_OFFSETS_EARLIEST_PENDING_UPLOAD):
                        pass  # no tiered storage: as Kafka without remote storage, offset -1 and epoch -1
                    elif ts == LIST_OFFSETS_EARLIEST or ts == LIST_OFFSETS_EARLIEST_LOCAL:
                        r.offset = lg.log_start_offset
                        r.leader_epoch = lg.epoch_for_offset(r.offset)
                    elif ts == LIST_OFFSETS_MAX_TIMESTAMP:
                        found = lg.max_timestamp_offset()  # (-1, -1) when no record has a timestamp
                        if 0 <= found[0] < fetchable:
                            r.offset, r.timestamp = found
                            r.leader_epoch = _batch_epoch(lg, r.offset)
                    elif ts < 0:
                        raise ApiError(ErrorCode.INVALID_REQUEST)
                    else:
                        found = lg.fetch_offset_by_timestamp(ts)
                        if found is not None and found[0] < fetchable:
                            r.offset, r.timestamp = found
                            r.leader_epoch = lg.epoch_for_offset(r.offset)
                except ApiError as e:
                    r.error_code = e.code
                parts.append(r)
            out.append(lor.ListOffsetsTopicResponse(name=t.name, partitions=parts))
        return lor.ListOffsetsResponse(throttle_time_ms=0, topics=out)

    # ------------------------------------------------------------ OffsetForLeaderEpoch
    def handle_offset_for_leader_epoch(
        self, header: RequestHeader, req: OffsetForLeaderEpochRequest, conn: KafkaConnection
    ) -> ofler.OffsetForLeaderEpochResponse:
        topics = []
        # Brokers' CLUSTER_ACTION covers every topic; a consumer (KIP-320) needs DESCRIBE on each.
        names = [t.topic for t in req.topics]
        describable = set(names) if self.authz.cluster(conn, Op.CLUSTER_ACTION) else \
            self.authz.allowed(conn, Op.DESCRIBE, ResourceType.TOPIC, names)
        for t in req.topics:
            parts = []
            for p in t.partitions:
                r = ofler.EpochEndOffset(error_code=0, partition=p.partition, leader_epoch=-1, end_offset=-1)
                try:
                    if t.topic not in describable:
                        raise ApiError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                    part = self._partition_or_error(TopicPartition(t.topic, p.partition))
                    if req.replica_id == DEBUGGING_REPLICA_ID:  # also v2, which has no replica id
                        part.check_leader_epoch(p.current_leader_epoch)
                    else:
                        part.check_leader(p.current_leader_epoch)
                    r.leader_epoch, r.end_offset = part.log.end_offset_for_epoch(p.leader_epoch)
                except ApiError as e:
                    r.error_code = e.code
                parts.append(r)
            topics.append(ofler.OffsetForLeaderTopicResult(topic=t.topic, partitions=parts))
        return ofler.OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)

    def handle_delete_records(
        self, header: RequestHeader, req: DeleteRecordsRequest, conn: KafkaConnection
    ) -> drr.DeleteRecordsResponse:
        topics = []
        deletable = self.authz.allowed(conn, Op.DELETE, ResourceType.TOPIC, (t.name for t in req.topics))
        for t in req.topics:
            parts = []
            for p in t.partitions:
                r = drr.DeleteRecordsPartitionResult(partition_index=p.partition_index, low_watermark=-1, error_code=0)
                try:
                    if t.name not in deletable:
                        raise ApiError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                    part = self._partition_or_error(TopicPartition(t.name, p.partition_index))
                    part.check_leader()  # followers take the new log start from their leader's fetches
                    offset = part.high_watermark if p.offset == -1 else p.offset
                    if offset < 0 or offset > part.high_watermark:
                        raise ApiError(ErrorCode.OFFSET_OUT_OF_RANGE)
                    part.log.delete_records_before(offset)
                    r.low_watermark = part.log.log_start_offset
                    self.replica_manager.fetch_purgatory.check_and_complete(part.tp)
                except ApiError as e:
                    r.error_code = e.code
                parts.append(r)
            topics.append(drr.DeleteRecordsTopicResult(name=t.name, partitions=parts))
        return drr.DeleteRecordsResponse(throttle_time_ms=0, topics=topics)


class _LeaderHints:
    """KIP-951: the current leader of each partition answered NOT_LEADER_OR_FOLLOWER (or
    FENCED_LEADER_EPOCH), and the endpoints of those leaders, from the metadata cache."""

    def __init__(self, cache: MetadataCache | None, listener: str) -> None:
        self.cache = cache
        self.listener = listener
        self._nodes: dict[int, tuple[str, int, str | None]] = {}

    def leader(self, tp: TopicPartition) -> tuple[int, int]:
        if self.cache is None:
            return -1, -1
        leader, epoch, endpoint = self.cache.leader_and_endpoint(tp, self.listener)
        if endpoint is None or leader == self.cache.node_id:
            return -1, -1  # this broker answered the error: naming itself would send the client back
        broker = self.cache.alive_broker(leader)
        self._nodes[leader] = (endpoint.host, endpoint.port, broker.rack if broker is not None else None)
        return leader, epoch

    def endpoints(self) -> list[tuple[int, str, int, str | None]]:
        return [(i, h, p, r) for i, (h, p, r) in sorted(self._nodes.items())]
