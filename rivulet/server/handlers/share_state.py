"""The share coordinator's APIs (KIP-932), which partition leaders send to the broker leading
the share partition's ``__share_group_state`` partition: InitializeShareGroupState (83),
ReadShareGroupState (84), WriteShareGroupState (85), DeleteShareGroupState (86) and
ReadShareGroupStateSummary (87). Brokers' requests: CLUSTER_ACTION on the cluster, as Kafka
checks them; each partition is answered on its own (NOT_COORDINATOR where another broker
serves it)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
import uuid
from typing import Any, Awaitable, Callable, Sequence

from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.protocol.framing import RequestHeader
from rivulet.protocol.messages import (
    delete_share_group_state_response as dsr,
    initialize_share_group_state_response as isr,
    read_share_group_state_response as rsr,
    read_share_group_state_summary_response as rss,
    write_share_group_state_response as wsr,
)
from rivulet.protocol.messages.delete_share_group_state_request import DeleteShareGroupStateRequest
from rivulet.protocol.messages.initialize_share_group_state_request import InitializeShareGroupStateRequest
from rivulet.protocol.messages.read_share_group_state_request import ReadShareGroupStateRequest
from rivulet.protocol.messages.read_share_group_state_summary_request import ReadShareGroupStateSummaryRequest
from rivulet.protocol.messages.write_share_group_state_request import PartitionData as WritePartitionData
from rivulet.protocol.messages.write_share_group_state_request import WriteShareGroupStateRequest
from rivulet.security.acls import AclOperation as Op
from rivulet.server.acls import Authz
from rivulet.server.answer import Answer
from rivulet.server.handlers import Handler
from rivulet.server.network import KafkaConnection
from rivulet.share import SharePartitionKey, SharePartitionSnapshot
from rivulet.share.persister import state_batches
from rivulet.share.coordinator import ShareCoordinator

# (partition result) -> what one partition's answer is built from
_Outcome = tuple[ErrorCode, "str | None", Any]


async def _each(calls: Sequence[tuple[uuid.UUID, int, Callable[[], Awaitable[Any]]]]
                ) -> list[tuple[uuid.UUID, int, _Outcome]]:
    async def one(call: Callable[[], Awaitable[Any]]) -> _Outcome:
        try:
            return ErrorCode.NONE, None, await call()
        except ApiError as e:
            return e.code, e.message, None
    outcomes = await asyncio.gather(*(one(c) for _, _, c in calls))
    return [(tid, part, o) for (tid, part, _), o in zip(calls, outcomes)]


def _by_topic(outcomes: list[tuple[uuid.UUID, int, _Outcome]], part: Callable[[int, _Outcome], Any],
              topic: Callable[[uuid.UUID, list], Any]) -> list:
    grouped: dict[uuid.UUID, list] = {}
    for tid, p, o in outcomes:
        grouped.setdefault(tid, []).append(part(p, o))
    return [topic(tid, parts) for tid, parts in grouped.items()]


@dataclass(eq=False)
class ShareStateHandlers:
    coordinator: ShareCoordinator
    authz: Authz

    def handlers(self) -> dict[int, Handler]:
        return {83: self.handle_initialize, 84: self.handle_read, 85: self.handle_write, 86: self.handle_delete,
                87: self.handle_read_summary}

    def _run(self, conn: KafkaConnection, group_id: str, topics: Sequence[Any],
             call: Callable[[SharePartitionKey, Any], Awaitable[Any]],
             build: Callable[[list[tuple[uuid.UUID, int, _Outcome]]], Any]) -> Answer:
        if not self.authz.cluster(conn, Op.CLUSTER_ACTION):
            refused = (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None, None)
            return build([(t.topic_id, p.partition, refused) for t in topics for p in t.partitions])
        calls = [(t.topic_id, p.partition,
                  (lambda key, p: lambda: call(key, p))(SharePartitionKey(group_id, t.topic_id, p.partition), p))
                 for t in topics for p in t.partitions]
        return asyncio.ensure_future(_build_after(_each(calls), build))

    def handle_initialize(self, header: RequestHeader, req: InitializeShareGroupStateRequest,
                          conn: KafkaConnection) -> Answer:
        def build(outcomes: list) -> isr.InitializeShareGroupStateResponse:
            return isr.InitializeShareGroupStateResponse(results=_by_topic(
                outcomes, lambda p, o: isr.PartitionResult(partition=p, error_code=o[0], error_message=o[1]),
                lambda tid, parts: isr.InitializeStateResult(topic_id=tid, partitions=parts)))
        return self._run(conn, req.group_id, req.topics,
                         lambda key, p: self.coordinator.initialize_state(key, p.start_offset, p.state_epoch), build)

    def handle_read(self, header: RequestHeader, req: ReadShareGroupStateRequest, conn: KafkaConnection) -> Answer:
        def part(p: int, o: _Outcome) -> rsr.PartitionResult:
            snap: SharePartitionSnapshot | None = o[2]
            if o[0] != ErrorCode.NONE:
                return rsr.PartitionResult(partition=p, error_code=o[0], error_message=o[1], state_epoch=0,
                                           start_offset=-1, state_batches=[])
            if snap is None:  # no state: the leader starts by share.auto.offset.reset
                return rsr.PartitionResult(partition=p, error_code=0, state_epoch=0, start_offset=-1,
                                           state_batches=[])
            return rsr.PartitionResult(partition=p, error_code=0, state_epoch=snap.state_epoch,
                                       start_offset=snap.start_offset, state_batches=[
                                           rsr.StateBatch(first_offset=b.first_offset, last_offset=b.last_offset,
                                                          delivery_state=int(b.delivery_state),
                                                          delivery_count=b.delivery_count)
                                           for b in snap.state_batches])

        def build(outcomes: list) -> rsr.ReadShareGroupStateResponse:
            return rsr.ReadShareGroupStateResponse(results=_by_topic(
                outcomes, part, lambda tid, parts: rsr.ReadStateResult(topic_id=tid, partitions=parts)))
        return self._run(conn, req.group_id, req.topics,
                         lambda key, p: self.coordinator.read_state(key, p.leader_epoch), build)

    def handle_write(self, header: RequestHeader, req: WriteShareGroupStateRequest, conn: KafkaConnection) -> Answer:
        def write(key: SharePartitionKey, p: WritePartitionData) -> Awaitable[None]:
            snapshot = SharePartitionSnapshot(p.start_offset, state_batches(p.state_batches), p.state_epoch)
            return self.coordinator.write_state(key, snapshot, leader_epoch=p.leader_epoch)

        def build(outcomes: list) -> wsr.WriteShareGroupStateResponse:
            return wsr.WriteShareGroupStateResponse(results=_by_topic(
                outcomes, lambda p, o: wsr.PartitionResult(partition=p, error_code=o[0], error_message=o[1]),
                lambda tid, parts: wsr.WriteStateResult(topic_id=tid, partitions=parts)))
        return self._run(conn, req.group_id, req.topics, write, build)

    def handle_delete(self, header: RequestHeader, req: DeleteShareGroupStateRequest, conn: KafkaConnection) -> Answer:
        def build(outcomes: list) -> dsr.DeleteShareGroupStateResponse:
            return dsr.DeleteShareGroupStateResponse(results=_by_topic(
                outcomes, lambda p, o: dsr.PartitionResult(partition=p, error_code=o[0], error_message=o[1]),
                lambda tid, parts: dsr.DeleteStateResult(topic_id=tid, partitions=parts)))
        return self._run(conn, req.group_id, req.topics, lambda key, p: self.coordinator.delete_state(key), build)

    def handle_read_summary(self, header: RequestHeader, req: ReadShareGroupStateSummaryRequest,
                            conn: KafkaConnection) -> Answer:
        def part(p: int, o: _Outcome) -> rss.PartitionResult:
            s = o[2]
            if o[0] != ErrorCode.NONE or s is None:
                return rss.PartitionResult(partition=p, error_code=o[0], error_message=o[1], state_epoch=0,
                                           leader_epoch=-1, start_offset=-1, delivery_complete_count=-1)
            return rss.PartitionResult(partition=p, error_code=0, state_epoch=s.state_epoch,
                                       leader_epoch=s.leader_epoch, start_offset=s.start_offset,
                                       delivery_complete_count=s.delivery_complete_count)

        def build(outcomes: list) -> rss.ReadShareGroupStateSummaryResponse:
            return rss.ReadShareGroupStateSummaryResponse(results=_by_topic(
                outcomes, part, lambda tid, parts: rss.ReadStateSummaryResult(topic_id=tid, partitions=parts)))
        return self._run(conn, req.group_id, req.topics,
                         lambda key, p: self.coordinator.read_summary(key, p.leader_epoch), build)


async def _build_after(outcomes: Awaitable[list], build: Callable[[list], Any]) -> Any:
    return build(await outcomes)
