"""DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets (KIP-932):
Kafka's authorization and response shapes around the group coordinator's share-offset APIs."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TypeVar

from rivulet.coordinator.group_coordinator import GroupCoordinator
from rivulet.coordinator.share_offsets import ShareOffsetsPartition, ShareOffsetsResult, ShareOffsetsTopic
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.framing import RequestHeader
from rivulet.protocol.messages import (
    alter_share_group_offsets_response as asgor,
    delete_share_group_offsets_response as dsgor,
    describe_share_group_offsets_response as dscr,
)
from rivulet.protocol.messages.alter_share_group_offsets_request import AlterShareGroupOffsetsRequest
from rivulet.protocol.messages.delete_share_group_offsets_request import DeleteShareGroupOffsetsRequest
from rivulet.protocol.messages.describe_share_group_offsets_request import DescribeShareGroupOffsetsRequest
from rivulet.security.acls import AclOperation as Op, ResourceType
from rivulet.server.acls import Authz
from rivulet.server.answer import Answer, Reply
from rivulet.server.handlers import Handler
from rivulet.server.network import KafkaConnection

GROUP_AUTHORIZATION_MESSAGE = "Group authorization failed."
TOPIC_AUTHORIZATION_MESSAGE = "Topic authorization failed."


@dataclass(eq=False)
class ShareOffsetHandlers:
    coordinator: GroupCoordinator
    authz: Authz

    def handlers(self) -> dict[int, Handler]:
        return {90: self.handle_describe, 91: self.handle_alter, 92: self.handle_delete}

    # ------------------------------------------------------------ DescribeShareGroupOffsets
    def handle_describe(self, header: RequestHeader, req: DescribeShareGroupOffsetsRequest,
                        conn: KafkaConnection) -> Answer:
        loop = asyncio.get_running_loop()
        answers: list[asyncio.Future] = []
        for g in req.groups:
            answer = loop.create_future()
            answers.append(answer)
            if not self.authz.group(conn, Op.DESCRIBE, g.group_id):
                answer.set_result(dscr.DescribeShareGroupOffsetsResponseGroup(
                    group_id=g.group_id, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                    error_message=GROUP_AUTHORIZATION_MESSAGE))
                continue
            refused: list[ShareOffsetsTopic] = []
            if g.topics is None:  # every partition with state, less the topics the caller may not describe
                wanted = None
            else:
                visible = self.authz.allowed(conn, Op.DESCRIBE, ResourceType.TOPIC, (t.topic_name for t in g.topics))
                wanted = [(t.topic_name, list(t.partitions)) for t in g.topics if t.topic_name in visible]
                refused = [ShareOffsetsTopic(t.topic_name, partitions=[
                    ShareOffsetsPartition(p, error=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                          error_message=TOPIC_AUTHORIZATION_MESSAGE) for p in t.partitions])
                    for t in g.topics if t.topic_name not in visible]

            def done(result: ShareOffsetsResult, group_id: str = g.group_id, answer: asyncio.Future = answer,
                     refused: list[ShareOffsetsTopic] = refused, all_topics: bool = wanted is None) -> None:
                if all_topics:
                    visible = self.authz.allowed(conn, Op.DESCRIBE, ResourceType.TOPIC,
                                                 (t.name for t in result.topics))
                    result.topics = [t for t in result.topics if t.name in visible]
                if not answer.done():
                    answer.set_result(_described(group_id, result, refused))
            if wanted == []:  # no topics named: nothing to describe
                done(ShareOffsetsResult())
            else:
                self.coordinator.handle_describe_share_group_offsets(g.group_id, wanted, done)

        async def response() -> dscr.DescribeShareGroupOffsetsResponse:
            return dscr.DescribeShareGroupOffsetsResponse(throttle_time_ms=0, groups=list(await asyncio.gather(*answers)))
        return asyncio.ensure_future(response())

    # ------------------------------------------------------------ AlterShareGroupOffsets
    def handle_alter(self, header: RequestHeader, req: AlterShareGroupOffsetsRequest,
                     conn: KafkaConnection) -> Answer:
        if not self.authz.group(conn, Op.READ, req.group_id):
            return _group_refused(asgor.AlterShareGroupOffsetsResponse)
        readable = self.authz.allowed(conn, Op.READ, ResourceType.TOPIC, (t.topic_name for t in req.topics))
        refused = [ShareOffsetsTopic(t.topic_name, partitions=[
            ShareOffsetsPartition(p.partition_index, error=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                  error_message=TOPIC_AUTHORIZATION_MESSAGE) for p in t.partitions])
            for t in req.topics if t.topic_name not in readable]

        def build(result: ShareOffsetsResult) -> asgor.AlterShareGroupOffsetsResponse:
            return asgor.AlterShareGroupOffsetsResponse(
                throttle_time_ms=0, error_code=result.error, error_message=result.error_message,
                responses=[] if result.error != ErrorCode.NONE else [asgor.AlterShareGroupOffsetsResponseTopic(
                    topic_name=t.name, topic_id=t.topic_id, partitions=[
                        asgor.AlterShareGroupOffsetsResponsePartition(
                            partition_index=p.partition, error_code=p.error, error_message=p.error_message)
                        for p in t.partitions]) for t in result.topics + refused])
        reply: Reply[ShareOffsetsResult] = Reply(build)
        self.coordinator.handle_alter_share_group_offsets(
            req.group_id, [(t.topic_name, [(p.partition_index, p.start_offset) for p in t.partitions])
                           for t in req.topics if t.topic_name in readable], reply)
        return reply.answer()

    # ------------------------------------------------------------ DeleteShareGroupOffsets
    def handle_delete(self, header: RequestHeader, req: DeleteShareGroupOffsetsRequest,
                      conn: KafkaConnection) -> Answer:
        if not self.authz.group(conn, Op.DELETE, req.group_id):
            return _group_refused(dsgor.DeleteShareGroupOffsetsResponse)
        names = list(dict.fromkeys(t.topic_name for t in req.topics))
        readable = self.authz.allowed(conn, Op.READ, ResourceType.TOPIC, names)
        refused = [ShareOffsetsTopic(n, error=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                     error_message=TOPIC_AUTHORIZATION_MESSAGE) for n in names if n not in readable]

        def build(result: ShareOffsetsResult) -> dsgor.DeleteShareGroupOffsetsResponse:
            return dsgor.DeleteShareGroupOffsetsResponse(
                throttle_time_ms=0, error_code=result.error, error_message=result.error_message,
                responses=[] if result.error != ErrorCode.NONE else [dsgor.DeleteShareGroupOffsetsResponseTopic(
                    topic_name=t.name, topic_id=t.topic_id, error_code=t.error, error_message=t.error_message)
                    for t in result.topics + refused])
        reply: Reply[ShareOffsetsResult] = Reply(build)
        self.coordinator.handle_delete_share_group_offsets(req.group_id, [n for n in names if n in readable], reply)
        return reply.answer()


def _described(group_id: str, result: ShareOffsetsResult, refused: list[ShareOffsetsTopic]
               ) -> dscr.DescribeShareGroupOffsetsResponseGroup:
    return dscr.DescribeShareGroupOffsetsResponseGroup(
        group_id=group_id, error_code=result.error, error_message=result.error_message,
        topics=[] if result.error != ErrorCode.NONE else [dscr.DescribeShareGroupOffsetsResponseTopic(
            topic_name=t.name, topic_id=t.topic_id, partitions=[
                dscr.DescribeShareGroupOffsetsResponsePartition(
                    partition_index=p.partition, start_offset=p.start_offset, leader_epoch=p.leader_epoch,
                    lag=p.lag, error_code=p.error, error_message=p.error_message)
                for p in t.partitions]) for t in result.topics + refused])


R = TypeVar("R", asgor.AlterShareGroupOffsetsResponse, dsgor.DeleteShareGroupOffsetsResponse)


def _group_refused(response: type[R]) -> R:
    """Alter/DeleteShareGroupOffsets' answer when the group itself is refused."""
    return response(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                    error_message=GROUP_AUTHORIZATION_MESSAGE)
