"""ShareFetch and ShareAcknowledge (KIP-932), in front of the ``SharePartitionManager``."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Callable

from rivulet.common.types import TopicPartition
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.protocol.framing import RequestHeader
from rivulet.protocol.messages import share_acknowledge_response as sar, share_fetch_response as sfr
from rivulet.protocol.messages.share_acknowledge_request import ShareAcknowledgeRequest
from rivulet.protocol.messages.share_fetch_request import ShareFetchRequest
from rivulet.security.acls import AclOperation as Op, ResourceType
from rivulet.server.acls import Authz
from rivulet.server.answer import Answer, then
from rivulet.server.handlers import Handler
from rivulet.server.network import KafkaConnection
from rivulet.server.quotas import ClientQuotas
from rivulet.share import AcknowledgementBatch
from rivulet.share.manager import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    ShareFetchRequestData,
    SharePartitionManager,
    SharePartitionResult,
)

# (topic id, partition) as the request names it; the name is None for an unknown topic id.
_Named = tuple[uuid.UUID, int, "str | None"]


class ShareHandlers:
    def __init__(self, manager: SharePartitionManager, topic_name: Callable[[uuid.UUID], str | None],
                 authz: Authz, quotas: ClientQuotas) -> None:
        self.manager = manager
        self.topic_name = topic_name
        self.authz = authz
        self.quotas = quotas
        self._watched: set[int] = set()  # connections whose close ends the sessions they opened

    def handlers(self) -> dict[int, Handler]:
        return {78: self.handle_share_fetch, 79: self.handle_share_acknowledge}

    def _lock_ms(self, group_id: str) -> int:
        return self.manager.settings(group_id).share_record_lock_duration_ms

    def _resolve(self, conn: KafkaConnection, topic_ids: list[uuid.UUID]
                 ) -> tuple[dict[uuid.UUID, str | None], set[str]]:
        names = {tid: self.topic_name(tid) for tid in topic_ids}
        readable = self.authz.allowed(conn, Op.READ, ResourceType.TOPIC, (n for n in names.values() if n))
        return names, readable

    @staticmethod
    def _refused(name: str | None, readable: set[str]) -> ErrorCode | None:
        if name is None:
            return ErrorCode.UNKNOWN_TOPIC_ID
        if name not in readable:
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED
        return None

    def _acknowledge(self, group_id: str, member_id: str, tp: TopicPartition, batches: list,
                     renew_allowed: bool) -> SharePartitionResult:
        acks = [AcknowledgementBatch(b.first_offset, b.last_offset, list(b.acknowledge_types)) for b in batches]
        return self.manager.acknowledge(group_id, member_id, tp, acks, renew_allowed=renew_allowed)

    # ------------------------------------------------------------ ShareFetch
    def handle_share_fetch(self, header: RequestHeader, req: ShareFetchRequest, conn: KafkaConnection) -> Answer:
        # Throttled as a Fetch is (the handler judges both quotas itself, see KafkaApis).
        t0 = time.perf_counter_ns()
        v = header.api_version
        group_id, member_id, epoch = req.group_id or "", req.member_id or "", req.share_session_epoch
        user, client_id = conn.user, header.client_id or ""

        def fail(code: ErrorCode, message: str | None = None) -> sfr.ShareFetchResponse:
            ms = self.quotas.request.record_request_time(user, client_id, time.perf_counter_ns() - t0)
            conn.throttle(ms)
            return sfr.ShareFetchResponse(throttle_time_ms=ms, error_code=code, error_message=message, responses=[])

        if not self.authz.group(conn, Op.READ, group_id):
            return fail(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        if not member_id:
            return fail(ErrorCode.INVALID_REQUEST, "The member id is empty.")
        has_acks = any(fp.acknowledgement_batches for ft in req.topics for fp in ft.partitions)
        if epoch == INITIAL_EPOCH and has_acks:
            return fail(ErrorCode.INVALID_REQUEST, "Acknowledge data present in the initial share fetch request.")
        names, readable = self._resolve(conn, [ft.topic_id for ft in req.topics] +
                                        [ft.topic_id for ft in req.forgotten_topics_data])
        named: list[_Named] = [(ft.topic_id, fp.partition_index, names[ft.topic_id])
                               for ft in req.topics for fp in ft.partitions]
        refused = {(tid, part): code for tid, part, name in named
                   if (code := self._refused(name, readable)) is not None}
        wanted = {TopicPartition(name, part): tid for tid, part, name in named if (tid, part) not in refused and name}
        forgotten = [TopicPartition(n, part) for ft in req.forgotten_topics_data
                     if (n := names[ft.topic_id]) is not None for part in ft.partitions]
        try:
            if epoch != FINAL_EPOCH:
                self.manager.update_session(group_id, member_id, epoch, wanted, forgotten, owner=id(conn))
                if epoch == INITIAL_EPOCH:
                    self._watch(conn)
            else:
                self.manager.check_session(group_id, member_id, epoch)
        except ApiError as e:
            return fail(e.code, e.message)
        renew_allowed = v >= 2  # RENEW is v2's; the group's share.renew.acknowledge.enable is checked after
        acked: dict[TopicPartition, SharePartitionResult] = {}
        tp_ids = dict(wanted)
        for ft in req.topics:
            name = names[ft.topic_id]
            for fp in ft.partitions:
                if name is None or (ft.topic_id, fp.partition_index) in refused:
                    continue
                tp = TopicPartition(name, fp.partition_index)
                if fp.acknowledgement_batches:
                    acked[tp] = self._acknowledge(group_id, member_id, tp, fp.acknowledgement_batches, renew_allowed)
        if epoch == FINAL_EPOCH:
            try:
                self.manager.close_session(group_id, member_id)
            except ApiError as e:
                return fail(e.code, e.message)
            fetch_from: list[TopicPartition] = []
        elif v >= 2 and req.is_renew_ack:
            fetch_from = []  # a renewing request only acknowledges (KIP-1222)
        else:
            session = self.manager.session_partitions(group_id, member_id)
            tp_ids.update(session)
            fetch_from = list(session)
        max_bytes = self.quotas.consumer_max_bytes(user, client_id, req.max_bytes)
        request = ShareFetchRequestData(group_id, member_id, fetch_from, req.max_wait_ms, max_bytes,
                                        req.max_records, record_limit=v >= 2 and req.share_acquire_mode == 1,
                                        min_bytes=min(req.min_bytes, max_bytes))  # as KafkaApis caps it
        writes = [r.persisted for r in acked.values() if r.persisted is not None]
        result = self.manager.fetch(request, acked)
        spent = time.perf_counter_ns() - t0
        if writes:
            result = asyncio.ensure_future(_after_writes(writes, result))
        lock_ms = self._lock_ms(group_id)

        def build(results: dict[TopicPartition, SharePartitionResult]) -> sfr.ShareFetchResponse:
            size = sum(len(r.records) for r in results.values())
            throttle_ms = self.quotas.consumer_throttle_ms(user, client_id, spent, size)
            if throttle_ms > 0:
                # Kafka answers a throttled ShareFetch without records and leaves them acquired
                # until their locks expire; here they are Available again at once, uncounted.
                conn.throttle(throttle_ms)
                self.manager.unsend(group_id, member_id, results)
            topics: dict[uuid.UUID, sfr.ShareFetchableTopicResponse] = {}

            def topic(tid: uuid.UUID) -> sfr.ShareFetchableTopicResponse:
                t = topics.get(tid)
                if t is None:
                    t = topics[tid] = sfr.ShareFetchableTopicResponse(topic_id=tid, partitions=[])
                return t

            for (tid, part), code in refused.items():
                topic(tid).partitions.append(_fetch_partition(part, SharePartitionResult(error=code)))
            for tp, ack in acked.items():  # as written: a failed write is the acknowledgement's error
                r = results.setdefault(tp, SharePartitionResult())
                r.acknowledge_error, r.acknowledge_error_message = ack.acknowledge_error, ack.acknowledge_error_message
            for tp, r in results.items():
                topic(tp_ids[tp]).partitions.append(_fetch_partition(tp.partition, r))
            return sfr.ShareFetchResponse(throttle_time_ms=throttle_ms, error_code=0,
                                          acquisition_lock_timeout_ms=lock_ms, responses=list(topics.values()),
                                          node_endpoints=[])

        return then(result, build)

    def _watch(self, conn: KafkaConnection) -> None:
        if id(conn) in self._watched:
            return
        self._watched.add(id(conn))

        def closed(c: KafkaConnection) -> None:
            self._watched.discard(id(c))
            self.manager.connection_closed(id(c))
        conn.close_listeners.append(closed)

    # ------------------------------------------------------------ ShareAcknowledge
    def handle_share_acknowledge(self, header: RequestHeader, req: ShareAcknowledgeRequest,
                                 conn: KafkaConnection) -> sar.ShareAcknowledgeResponse:
        v = header.api_version
        group_id, member_id, epoch = req.group_id or "", req.member_id or "", req.share_session_epoch

        def fail(code: ErrorCode, message: str | None = None) -> sar.ShareAcknowledgeResponse:
            return sar.ShareAcknowledgeResponse(throttle_time_ms=0, error_code=code, error_message=message,
                                                responses=[])

        if not self.authz.group(conn, Op.READ, group_id):
            return fail(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        if not member_id:
            return fail(ErrorCode.INVALID_REQUEST, "The member id is empty.")
        if epoch == INITIAL_EPOCH:
            return fail(ErrorCode.INVALID_SHARE_SESSION_EPOCH, "A share acknowledge cannot open a share session.")
        try:
            if epoch == FINAL_EPOCH:
                self.manager.check_session(group_id, member_id, epoch)
            else:
                self.manager.update_session(group_id, member_id, epoch, {})
        except ApiError as e:
            return fail(e.code, e.message)
        names, readable = self._resolve(conn, [t.topic_id for t in req.topics])
        renew_allowed = v >= 2  # RENEW is v2's; the group's share.renew.acknowledge.enable is checked after
        responses = []
        writes = []
        for t in req.topics:
            name = names[t.topic_id]
            parts = []
            for p in t.partitions:
                refused = self._refused(name, readable)
                if refused is not None or name is None:
                    code, message = refused or ErrorCode.UNKNOWN_TOPIC_ID, None
                else:
                    r = self._acknowledge(group_id, member_id, TopicPartition(name, p.partition_index),
                                          p.acknowledgement_batches, renew_allowed)
                    if r.persisted is not None:
                        writes.append(r.persisted)
                    code, message = r.acknowledge_error, r.acknowledge_error_message
                parts.append((p.partition_index, code, message, r if refused is None and name is not None else None))
            responses.append((t.topic_id, parts))
        if epoch == FINAL_EPOCH:
            self.manager.close_session(group_id, member_id)
        lock_ms = self._lock_ms(group_id)

        def build(_: object = None) -> sar.ShareAcknowledgeResponse:
            # A write's failure is known only once it is done: read each result then.
            return sar.ShareAcknowledgeResponse(throttle_time_ms=0, error_code=0, acquisition_lock_timeout_ms=lock_ms,
                                                responses=[sar.ShareAcknowledgeTopicResponse(topic_id=tid, partitions=[
                                                    _ack_partition(part, code, message, r)
                                                    for part, code, message, r in parts]) for tid, parts in responses],
                                                node_endpoints=[])

        if writes:
            return then(asyncio.ensure_future(asyncio.wait(writes)), build)
        return build()


def _ack_partition(part: int, code: ErrorCode, message: str | None, r: SharePartitionResult | None
                   ) -> sar.PartitionData:
    if r is not None:
        code, message = r.acknowledge_error, r.acknowledge_error_message
    return sar.PartitionData(partition_index=part, error_code=code, error_message=message,
                             current_leader=sar.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1))


async def _after_writes(writes: list, result: object) -> object:
    """The fetch's answer once the acknowledgements it carried are written."""
    await asyncio.wait(writes)
    return await result if isinstance(result, asyncio.Future) else result


def _fetch_partition(part: int, r: SharePartitionResult) -> sfr.PartitionData:
    return sfr.PartitionData(
        partition_index=part, error_code=r.error, error_message=r.error_message,
        acknowledge_error_code=r.acknowledge_error, acknowledge_error_message=r.acknowledge_error_message,
        current_leader=sfr.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1), records=r.records,
        acquired_records=[sfr.AcquiredRecords(first_offset=a.first_offset, last_offset=a.last_offset,
                                              delivery_count=a.delivery_count) for a in r.acquired])
