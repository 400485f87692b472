"""Request handlers of the group APIs, in front of the GroupCoordinator.

Version differences (which fields exist, where errors go) are settled here, so the
coordinator works on plain values. A handler whose answer depends on other members
(JoinGroup, SyncGroup) or on a log append (OffsetCommit, TxnOffsetCommit) answers through
a ``Reply``.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, Awaitable, Callable, Iterable, Iterator, Mapping, TypeVar

from rivulet.common.cluster import MetadataView
from rivulet.common.time import Clock
from rivulet.common.types import TopicPartition
from rivulet.coordinator.consumer_heartbeat import (
    GroupHeartbeatAnswer,
    HeartbeatRequest as ConsumerHeartbeat,
    HeartbeatResult,
    preferred_assignor,
)
from rivulet.coordinator.group_coordinator import GroupCoordinator
from rivulet.coordinator.group_metadata import (
    DEAD,
    JoinGroupResult,
    OffsetAndMetadata,
    SyncGroupResult,
)
from rivulet.coordinator.group_metadata_manager import INVALID_OFFSET, PartitionData, convert_write_error
from rivulet.coordinator.offsets_topic import GROUP_METADATA_TOPIC_NAME
from rivulet.coordinator.consumer_group import ConsumerGroup
from rivulet.coordinator.share_group import (
    ASSIGNOR as SHARE_ASSIGNOR,
    ShareGroup,
    ShareHeartbeatRequest,
    ShareHeartbeatResult,
)
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.framing import RequestHeader
from rivulet.protocol.messages import (
    consumer_group_describe_response as cgdr,
    consumer_group_heartbeat_response as cghr,
    delete_groups_response as dgr,
    describe_groups_response as dsr,
    heartbeat_response as hbr,
    join_group_response as jgr,
    leave_group_response as lgr,
    list_groups_response as lsr,
    offset_commit_response as ocr,
    offset_delete_response as odr,
    offset_fetch_response as ofr,
    share_group_describe_response as sgdr,
    share_group_heartbeat_response as sghr,
    sync_group_response as sgr,
    txn_offset_commit_response as tocr,
)
from rivulet.protocol.messages.consumer_group_describe_request import ConsumerGroupDescribeRequest
from rivulet.protocol.messages.consumer_group_heartbeat_request import ConsumerGroupHeartbeatRequest
from rivulet.protocol.messages.delete_groups_request import DeleteGroupsRequest
from rivulet.protocol.messages.describe_groups_request import DescribeGroupsRequest
from rivulet.protocol.messages.heartbeat_request import HeartbeatRequest
from rivulet.protocol.messages.join_group_request import JoinGroupRequest
from rivulet.protocol.messages.leave_group_request import LeaveGroupRequest
from rivulet.protocol.messages.list_groups_request import ListGroupsRequest
from rivulet.protocol.messages.offset_commit_request import OffsetCommitRequest
from rivulet.protocol.messages.offset_delete_request import OffsetDeleteRequest
from rivulet.protocol.messages.offset_fetch_request import OffsetFetchRequest
from rivulet.protocol.messages.share_group_describe_request import ShareGroupDescribeRequest
from rivulet.protocol.messages.share_group_heartbeat_request import ShareGroupHeartbeatRequest
from rivulet.protocol.messages.sync_group_request import SyncGroupRequest
from rivulet.protocol.messages.txn_offset_commit_request import TxnOffsetCommitRequest
from rivulet.protocol.schema import ZERO_UUID
from rivulet.replication.metadata_cache import MetadataCache
from rivulet.replication.replica_manager import TxnOperation
from rivulet.security.acls import AclOperation as Op, ResourceType
from rivulet.server.acls import OPERATIONS_NOT_REQUESTED, Authz
from rivulet.server.answer import Answer, Reply
from rivulet.server.handlers import Handler, partition_count
from rivulet.server.network import KafkaConnection

D = TypeVar("D")  # a DescribedGroup of ConsumerGroupDescribe or ShareGroupDescribe
G = TypeVar("G")  # the group it describes
H = TypeVar("H", HeartbeatResult, ShareHeartbeatResult)


def _by_topic_id(assignment: Mapping[uuid.UUID, Iterable[int]]) -> list[tuple[uuid.UUID, list[int]]]:
    """An assignment as the responses list it: by topic id, partitions sorted."""
    return [(t, sorted(ps)) for t, ps in sorted(assignment.items(), key=lambda kv: str(kv[0]))]


def _heartbeat_fields(r: GroupHeartbeatAnswer, assignment_type: type, partitions_type: type) -> dict[str, Any]:
    """The fields ConsumerGroupHeartbeat's and ShareGroupHeartbeat's responses share."""
    assignment = None
    if r.assignment is not None and r.error == ErrorCode.NONE:
        assignment = assignment_type(topic_partitions=[
            partitions_type(topic_id=t, partitions=ps) for t, ps in _by_topic_id(r.assignment)])
    return dict(throttle_time_ms=0, error_code=r.error, error_message=r.error_message,
                member_id=r.member_id if r.error == ErrorCode.NONE else None, member_epoch=r.member_epoch,
                heartbeat_interval_ms=r.heartbeat_interval_ms, assignment=assignment)


def client_host(conn: KafkaConnection) -> str:
    """As Java's InetAddress.toString() prints a peer without a host name: '/127.0.0.1'."""
    return "/" + str(conn.peer[0])


# KIP-890 for the group's offsets partition: (transactional id, producer id, epoch, partition,
# operation) -> the coordinator's answer as the leader gives it (ReplicaManager.join_transaction).
TransactionJoiner = Callable[[str, int, int, TopicPartition, TxnOperation], Awaitable[ErrorCode]]


class GroupHandlers:
    def __init__(self, coordinator: GroupCoordinator, metadata: MetadataView, clock: Clock, authz: Authz,
                 join_transaction: TransactionJoiner, metadata_cache: MetadataCache | None = None) -> None:
        """``join_transaction``: a TxnOffsetCommit first has the producer's coordinator check that
        the group's offsets partition is in the transaction (KIP-890); a v5 has it added instead
        (KIP-890 part 2), by its version alone as Kafka."""
        self.c = coordinator
        self.authz = authz
        self.metadata = metadata
        self.clock = clock
        self.metadata_cache = metadata_cache  # cluster mode: which partitions exist
        self.join_transaction = join_transaction
        self._joining: set[asyncio.Task] = set()  # the loop keeps only weak references to tasks

    def handlers(self) -> dict[int, Handler]:
        served: dict[int, Handler] = {
            8: self.handle_offset_commit, 9: self.handle_offset_fetch, 11: self.handle_join_group,
            12: self.handle_heartbeat, 13: self.handle_leave_group, 14: self.handle_sync_group,
            15: self.handle_describe_groups, 16: self.handle_list_groups, 28: self.handle_txn_offset_commit,
            42: self.handle_delete_groups, 47: self.handle_offset_delete,
            68: self.handle_consumer_group_heartbeat, 69: self.handle_consumer_group_describe,
        }
        if self.c.share_groups_enabled:
            served.update({76: self.handle_share_group_heartbeat, 77: self.handle_share_group_describe})
        return served

    def _named(self, topics: list[Any], by_id: bool) -> tuple[list[Any], dict[str, Any], list[Any]]:
        """Requests that name topics by id (OffsetCommit v10+, OffsetFetch v10+): the entries
        whose id is known, with their names filled in; name -> id; the entries with unknown ids."""
        if not by_id:
            return topics, {}, []
        known, ids, unknown = [], {}, []
        for t in topics:
            name = self.metadata.topic_name(t.topic_id)
            if name is None:
                unknown.append(t)
            else:
                t.name = name
                ids[name] = t.topic_id
                known.append(t)
        return known, ids, unknown

    def _requested(self, topics: list[Any], conn: KafkaConnection
                   ) -> Iterator[tuple[TopicPartition, Any, ErrorCode]]:
        """(partition, its request entry, NONE or why it is refused) for every partition named:
        TOPIC_AUTHORIZATION_FAILED without READ on its topic, else UNKNOWN_TOPIC_OR_PARTITION
        if it does not exist, as Kafka checks them in that order."""
        readable = self.authz.allowed(conn, Op.READ, ResourceType.TOPIC, (t.name for t in topics))
        for t in topics:
            count = partition_count(self.metadata, self.metadata_cache, t.name)
            for p in t.partitions:
                if t.name not in readable:
                    refusal = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                elif 0 <= p.partition_index < count:
                    refusal = ErrorCode.NONE
                else:
                    refusal = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                yield TopicPartition(t.name, p.partition_index), p, refusal

    # ------------------------------------------------------------ JoinGroup
    def handle_join_group(self, header: RequestHeader, req: JoinGroupRequest, conn: KafkaConnection) -> Answer:
        v = header.api_version
        instance_id = req.group_instance_id if v >= 5 else None
        # v0 has no rebalance timeout: the session timeout serves as both.
        rebalance_timeout = req.rebalance_timeout_ms if v >= 1 else req.session_timeout_ms

        def build(r: JoinGroupResult) -> jgr.JoinGroupResponse:
            return jgr.JoinGroupResponse(
                throttle_time_ms=0, error_code=r.error, generation_id=r.generation_id,
                protocol_type=r.protocol_type,
                protocol_name=r.protocol_name if v >= 7 else (r.protocol_name or ""),
                leader=r.leader_id or "", skip_assignment=r.skip_assignment, member_id=r.member_id,
                members=[jgr.JoinGroupResponseMember(member_id=m.member_id, group_instance_id=m.group_instance_id,
                                                     metadata=m.metadata) for m in r.members])

        reply = Reply(build)
        if not self.authz.group(conn, Op.READ, req.group_id):
            reply(JoinGroupResult("", ErrorCode.GROUP_AUTHORIZATION_FAILED))
            return reply.answer()
        self.c.handle_join_group(
            req.group_id, req.member_id, instance_id,
            require_known_member_id=v >= 4 and instance_id is None, support_skipping_assignment=v >= 9,
            client_id=header.client_id or "", client_host=client_host(conn),
            rebalance_timeout_ms=rebalance_timeout, session_timeout_ms=req.session_timeout_ms,
            protocol_type=req.protocol_type, protocols=[(p.name, bytes(p.metadata)) for p in req.protocols],
            callback=reply, reason=req.reason if v >= 8 else None)
        return reply.answer()

    # ------------------------------------------------------------ SyncGroup
    def handle_sync_group(self, header: RequestHeader, req: SyncGroupRequest, conn: KafkaConnection) -> Answer:
        v = header.api_version

        def build(r: SyncGroupResult) -> sgr.SyncGroupResponse:
            return sgr.SyncGroupResponse(throttle_time_ms=0, error_code=r.error, protocol_type=r.protocol_type,
                                         protocol_name=r.protocol_name, assignment=r.assignment)

        reply = Reply(build)
        if not self.authz.group(conn, Op.READ, req.group_id):
            reply(SyncGroupResult(ErrorCode.GROUP_AUTHORIZATION_FAILED))
            return reply.answer()
        if v >= 5 and (req.protocol_type is None or req.protocol_name is None):
            # From v5 both are mandatory.
            reply(SyncGroupResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return reply.answer()
        assignment = {a.member_id: bytes(a.assignment) for a in req.assignments}
        self.c.handle_sync_group(
            req.group_id, req.generation_id, req.member_id,
            req.protocol_type if v >= 5 else None, req.protocol_name if v >= 5 else None,
            req.group_instance_id if v >= 3 else None, assignment, reply)
        return reply.answer()

    # ------------------------------------------------------------ Heartbeat
    def handle_heartbeat(
        self, header: RequestHeader, req: HeartbeatRequest, conn: KafkaConnection
    ) -> hbr.HeartbeatResponse:
        v = header.api_version
        if not self.authz.group(conn, Op.READ, req.group_id):
            return hbr.HeartbeatResponse(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
        err = self.c.handle_heartbeat(req.group_id, req.member_id, req.group_instance_id if v >= 3 else None,
                                      req.generation_id)
        return hbr.HeartbeatResponse(throttle_time_ms=0, error_code=err)

    def _group_heartbeat(self, conn: KafkaConnection, group_id: str, names: list[str] | None,
                         build: Callable[[H], object], refusal: Callable[..., H],
                         submit: Callable[[Reply[H]], None]) -> Answer:
        """A consumer or share group heartbeat, authorized as Kafka does (READ on the group, then
        DESCRIBE on every subscribed topic) before ``submit`` hands it to the coordinator;
        ``refusal(error=code)`` is the result a refused one gets."""
        reply: Reply[H] = Reply(build)
        if not self.authz.group(conn, Op.READ, group_id):
            reply(refusal(error=ErrorCode.GROUP_AUTHORIZATION_FAILED))
        elif names and len(self.authz.allowed(conn, Op.DESCRIBE, ResourceType.TOPIC, names)) < len(set(names)):
            reply(refusal(error=ErrorCode.TOPIC_AUTHORIZATION_FAILED))
        else:
            submit(reply)
        return reply.answer()

    # ------------------------------------------------------------ ConsumerGroupHeartbeat (KIP-848)
    def handle_consumer_group_heartbeat(self, header: RequestHeader, req: ConsumerGroupHeartbeatRequest,
                                        conn: KafkaConnection) -> Answer:
        def build(r: HeartbeatResult) -> cghr.ConsumerGroupHeartbeatResponse:
            return cghr.ConsumerGroupHeartbeatResponse(**_heartbeat_fields(r, cghr.Assignment, cghr.TopicPartitions))

        names = req.subscribed_topic_names
        owned = None if req.topic_partitions is None else \
            [(tp.topic_id, list(tp.partitions)) for tp in req.topic_partitions]

        def submit(reply: Reply[HeartbeatResult]) -> None:
            self.c.handle_consumer_group_heartbeat(ConsumerHeartbeat(
                group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch,
                instance_id=req.instance_id, rack_id=req.rack_id, rebalance_timeout_ms=req.rebalance_timeout_ms,
                subscribed_topic_names=None if names is None else list(names),
                subscribed_topic_regex=req.subscribed_topic_regex if header.api_version >= 1 else None,
                server_assignor=req.server_assignor, owned=owned, client_id=header.client_id or "",
                client_host=client_host(conn)), header.api_version, reply)
        return self._group_heartbeat(conn, req.group_id, names, build, HeartbeatResult, submit)

    # ------------------------------------------------------------ ShareGroupHeartbeat (KIP-932)
    def handle_share_group_heartbeat(self, header: RequestHeader, req: ShareGroupHeartbeatRequest,
                                     conn: KafkaConnection) -> Answer:
        def build(r: ShareHeartbeatResult) -> sghr.ShareGroupHeartbeatResponse:
            return sghr.ShareGroupHeartbeatResponse(**_heartbeat_fields(r, sghr.Assignment, sghr.TopicPartitions))

        names = req.subscribed_topic_names

        def submit(reply: Reply[ShareHeartbeatResult]) -> None:
            self.c.handle_share_group_heartbeat(ShareHeartbeatRequest(
                group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch, rack_id=req.rack_id,
                subscribed_topic_names=None if names is None else list(names), client_id=header.client_id or "",
                client_host=client_host(conn)), reply)
        return self._group_heartbeat(conn, req.group_id, names, build, ShareHeartbeatResult, submit)

    # ------------------------------------------------------------ LeaveGroup
    def handle_leave_group(self, header: RequestHeader, req: LeaveGroupRequest, conn: KafkaConnection) -> Answer:
        v = header.api_version
        if v >= 3:
            leaving = [(m.member_id, m.group_instance_id, m.reason if v >= 5 else None) for m in req.members]
        else:
            leaving = [(req.member_id, None, None)]

        def build(res: tuple[ErrorCode, list]) -> lgr.LeaveGroupResponse:
            top, members = res
            if v >= 3:
                return lgr.LeaveGroupResponse(
                    throttle_time_ms=0, error_code=top,
                    members=[lgr.MemberResponse(member_id=mid, group_instance_id=iid, error_code=e)
                             for mid, iid, e in members])
            # One member only: its error becomes the response's.
            err = top
            if err == ErrorCode.NONE:
                err = next((e for _, _, e in members if e != ErrorCode.NONE), ErrorCode.NONE)
            return lgr.LeaveGroupResponse(throttle_time_ms=0, error_code=err)

        reply = Reply(build)
        if not self.authz.group(conn, Op.READ, req.group_id):
            reply((ErrorCode.GROUP_AUTHORIZATION_FAILED, []))
            return reply.answer()
        self.c.handle_leave_group(req.group_id, leaving, lambda top, members: reply((top, members)))
        return reply.answer()

    # ------------------------------------------------------------ OffsetCommit
    def handle_offset_commit(self, header: RequestHeader, req: OffsetCommitRequest, conn: KafkaConnection) -> Answer:
        v = header.api_version
        now = self.clock.milliseconds()
        expire = None
        if 2 <= v <= 4 and req.retention_time_ms != -1:
            expire = now + req.retention_time_ms  # KIP-211: old clients may still ask for one
        order: list[TopicPartition] = []
        early: dict[TopicPartition, ErrorCode] = {}
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        group_refused = not self.authz.group(conn, Op.READ, req.group_id)
        topics, ids, unknown = self._named(req.topics, v >= 10)
        for tp, p, refusal in self._requested(topics, conn):
            order.append(tp)
            if group_refused or refusal:
                early[tp] = ErrorCode.GROUP_AUTHORIZATION_FAILED if group_refused else refusal
                continue
            epoch = p.committed_leader_epoch if v >= 6 else -1
            offsets[tp] = OffsetAndMetadata(
                committed_offset=p.committed_offset, leader_epoch=None if epoch == -1 else epoch,
                metadata=p.committed_metadata if p.committed_metadata is not None else "",
                commit_timestamp=now, expire_timestamp=expire)

        def build(errors: dict[TopicPartition, ErrorCode]) -> ocr.OffsetCommitResponse:
            merged = {**errors, **early}
            topics: dict[str, list[ocr.OffsetCommitResponsePartition]] = {}
            seen: set[TopicPartition] = set()
            for tp in order:
                if tp in seen:
                    continue
                seen.add(tp)
                topics.setdefault(tp.topic, []).append(ocr.OffsetCommitResponsePartition(
                    partition_index=tp.partition, error_code=merged.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR)))
            out = [ocr.OffsetCommitResponseTopic(name=n, topic_id=ids.get(n, ZERO_UUID), partitions=ps)
                   for n, ps in topics.items()]
            out += [ocr.OffsetCommitResponseTopic(topic_id=t.topic_id, partitions=[ocr.OffsetCommitResponsePartition(
                partition_index=p.partition_index, error_code=ErrorCode.UNKNOWN_TOPIC_ID) for p in t.partitions])
                for t in unknown]
            return ocr.OffsetCommitResponse(throttle_time_ms=0, topics=out)

        reply = Reply(build)
        if not offsets:
            reply({})
            return reply.answer()
        generation = req.generation_id_or_member_epoch
        self.c.handle_commit_offsets(req.group_id, req.member_id, req.group_instance_id if v >= 7 else None,
                                     generation, offsets, reply, api_version=v)
        return reply.answer()

    # ------------------------------------------------------------ OffsetFetch
    def _fetch_group(self, group_id: str, topics: list[tuple[str, list[int]]] | None, require_stable: bool,
                     conn: KafkaConnection, member: tuple[str | None, int] = (None, -1)
                     ) -> tuple[ErrorCode, list[tuple[str, list[tuple[int, PartitionData]]]]]:
        """A group's committed offsets, as Kafka authorizes them: DESCRIBE on the group, and on
        each topic (a topic named without it is refused, one not named is left out)."""
        if not self.authz.group(conn, Op.DESCRIBE, group_id):
            return ErrorCode.GROUP_AUTHORIZATION_FAILED, []
        wanted = None if topics is None else [TopicPartition(t, p) for t, ps in topics for p in ps]
        describable = self.authz.allowed(conn, Op.DESCRIBE, ResourceType.TOPIC, (t for t, _ in topics or ()))
        asked = None if wanted is None else [tp for tp in wanted if tp.topic in describable]
        err, data = self.c.handle_fetch_offsets(group_id, require_stable, asked, *member)
        if err != ErrorCode.NONE:
            return err, []
        out: dict[str, list[tuple[int, PartitionData]]] = {}
        if wanted is None:
            keys = sorted(data, key=lambda k: (k.topic, k.partition))
            describable = self.authz.allowed(conn, Op.DESCRIBE, ResourceType.TOPIC, (k.topic for k in keys))
            keys = [k for k in keys if k.topic in describable]
        else:
            keys = wanted
        for tp in keys:
            refused = PartitionData(INVALID_OFFSET, None, "", ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            out.setdefault(tp.topic, []).append(
                (tp.partition, data.get(tp, PartitionData()) if tp.topic in describable else refused))
        return ErrorCode.NONE, list(out.items())

    def handle_offset_fetch(
        self, header: RequestHeader, req: OffsetFetchRequest, conn: KafkaConnection
    ) -> ofr.OffsetFetchResponse:
        v = header.api_version
        require_stable = req.require_stable if v >= 7 else False
        if v >= 8:
            groups = []
            for g in req.groups:
                named, _, unknown = self._named(g.topics or [], v >= 10)
                topics = None if g.topics is None else [(t.name, list(t.partition_indexes)) for t in named]
                member = (g.member_id, g.member_epoch) if v >= 9 else (None, -1)
                err, result = self._fetch_group(g.group_id, topics, require_stable, conn, member)
                out = []
                for name, parts in result:
                    topic_id = ZERO_UUID
                    if v >= 10:
                        info = self.metadata.get(name)
                        if info is None:
                            continue  # offsets of a topic that is gone: no id to name it by
                        topic_id = info.topic_id
                    out.append(ofr.OffsetFetchResponseTopics(name=name, topic_id=topic_id, partitions=[
                        ofr.OffsetFetchResponsePartitions(
                            partition_index=p, committed_offset=d.offset,
                            committed_leader_epoch=-1 if d.leader_epoch is None else d.leader_epoch,
                            metadata=d.metadata, error_code=d.error) for p, d in parts]))
                if err == ErrorCode.NONE:
                    out += [ofr.OffsetFetchResponseTopics(topic_id=t.topic_id, partitions=[
                        ofr.OffsetFetchResponsePartitions(partition_index=p, committed_offset=INVALID_OFFSET,
                                                          committed_leader_epoch=-1, metadata="",
                                                          error_code=ErrorCode.UNKNOWN_TOPIC_ID)
                        for p in t.partition_indexes]) for t in unknown]
                groups.append(ofr.OffsetFetchResponseGroup(group_id=g.group_id, error_code=err, topics=out))
            return ofr.OffsetFetchResponse(throttle_time_ms=0, groups=groups)
        topics = None if req.topics is None else [(t.name, list(t.partition_indexes)) for t in req.topics]
        err, result = self._fetch_group(req.group_id, topics, require_stable, conn)
        if err != ErrorCode.NONE and v < 2:
            # No top-level error before v2: every requested partition carries it.
            result = [(name, [(p, PartitionData(INVALID_OFFSET, None, "", err)) for p in ps])
                      for name, ps in (topics or [])]
        return ofr.OffsetFetchResponse(
            throttle_time_ms=0, error_code=err,
            topics=[ofr.OffsetFetchResponseTopic(name=name, partitions=[
                ofr.OffsetFetchResponsePartition(
                    partition_index=p, committed_offset=d.offset,
                    committed_leader_epoch=-1 if d.leader_epoch is None else d.leader_epoch,
                    metadata=d.metadata, error_code=d.error) for p, d in parts])
                for name, parts in result])

    # ------------------------------------------------------------ OffsetDelete
    def handle_offset_delete(
        self, header: RequestHeader, req: OffsetDeleteRequest, conn: KafkaConnection
    ) -> odr.OffsetDeleteResponse:
        order: list[TopicPartition] = []
        errors: dict[TopicPartition, ErrorCode] = {}
        candidates: list[TopicPartition] = []
        if not self.authz.group(conn, Op.DELETE, req.group_id):
            return odr.OffsetDeleteResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, throttle_time_ms=0,
                                            topics=[])
        for tp, _, refusal in self._requested(req.topics, conn):
            order.append(tp)
            if refusal:
                errors[tp] = refusal
            else:
                candidates.append(tp)
        group_error, partition_errors = self.c.handle_delete_offsets(req.group_id, candidates)
        if group_error != ErrorCode.NONE:
            return odr.OffsetDeleteResponse(error_code=group_error, throttle_time_ms=0, topics=[])
        errors.update(partition_errors)
        topics: dict[str, list[odr.OffsetDeleteResponsePartition]] = {}
        seen: set[TopicPartition] = set()
        for tp in order:
            if tp in seen or tp not in errors:
                continue
            seen.add(tp)
            topics.setdefault(tp.topic, []).append(
                odr.OffsetDeleteResponsePartition(partition_index=tp.partition, error_code=errors[tp]))
        return odr.OffsetDeleteResponse(error_code=ErrorCode.NONE, throttle_time_ms=0, topics=[
            odr.OffsetDeleteResponseTopic(name=n, partitions=ps) for n, ps in topics.items()])

    # ------------------------------------------------------------ DescribeGroups / ListGroups / DeleteGroups
    def handle_describe_groups(
        self, header: RequestHeader, req: DescribeGroupsRequest, conn: KafkaConnection
    ) -> dsr.DescribeGroupsResponse:
        v = header.api_version
        include_ops = v >= 3 and req.include_authorized_operations
        out = []
        for gid in req.groups:
            if not self.authz.group(conn, Op.DESCRIBE, gid):
                out.append(dsr.DescribedGroup(
                    error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=gid, group_state="", protocol_type="",
                    protocol_data="", members=[], authorized_operations=OPERATIONS_NOT_REQUESTED))
                continue
            err, (state, ptype, protocol, members) = self.c.handle_describe_group(gid)
            if v >= 6 and err == ErrorCode.NONE and state == DEAD.value:
                # KIP-1043: a group that does not exist is an error, no longer a Dead group.
                message = (f"Group {gid} is not a classic group." if self.c.is_modern_group(gid)
                           else f"Group {gid} not found.")
                out.append(dsr.DescribedGroup(
                    error_code=ErrorCode.GROUP_ID_NOT_FOUND, error_message=message, group_id=gid,
                    group_state="", protocol_type="", protocol_data="", members=[],
                    authorized_operations=OPERATIONS_NOT_REQUESTED))
                continue
            out.append(dsr.DescribedGroup(
                error_code=err, group_id=gid, group_state=state, protocol_type=ptype, protocol_data=protocol,
                members=[dsr.DescribedGroupMember(
                    member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                    client_host=m.client_host, member_metadata=m.metadata, member_assignment=m.assignment)
                    for m in members],
                authorized_operations=self.authz.operations(conn, ResourceType.GROUP, gid)
                if include_ops and err == ErrorCode.NONE else OPERATIONS_NOT_REQUESTED))
        return dsr.DescribeGroupsResponse(throttle_time_ms=0, groups=out)

    def _describe_each(self, conn: KafkaConnection, group_ids: list[str], described: Callable[..., D],
                       lookup: Callable[[str], tuple[ErrorCode, str | None, G | None]],
                       build: Callable[[str, G], D]) -> list[D]:
        """Consumer/ShareGroupDescribe: each group the caller may describe, found by ``lookup``
        and answered by ``build``; the others answered with their error."""
        out = []
        for gid in group_ids:
            if not self.authz.group(conn, Op.DESCRIBE, gid):
                out.append(described(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=gid))
                continue
            err, message, group = lookup(gid)
            out.append(described(error_code=err, error_message=message, group_id=gid) if group is None
                       else build(gid, group))
        return out

    def handle_consumer_group_describe(self, header: RequestHeader, req: ConsumerGroupDescribeRequest,
                                       conn: KafkaConnection) -> cgdr.ConsumerGroupDescribeResponse:
        def assignment(parts: Mapping[uuid.UUID, Iterable[int]]) -> cgdr.Assignment:
            return cgdr.Assignment(topic_partitions=[
                cgdr.TopicPartitions(topic_id=t, topic_name=self.metadata.topic_name(t) or "", partitions=ps)
                for t, ps in _by_topic_id(parts)])

        def build(gid: str, group: ConsumerGroup) -> cgdr.DescribedGroup:
            members = [cgdr.Member(
                member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
                client_id=m.client_id, client_host=m.client_host,
                subscribed_topic_names=list(m.subscribed_topic_names), subscribed_topic_regex=m.subscribed_topic_regex,
                assignment=assignment(m.assigned), target_assignment=assignment(group.target_assignment.get(
                    m.member_id, {})), member_type=0 if m.classic is not None else 1) for m in group.members.values()]
            return cgdr.DescribedGroup(
                error_code=ErrorCode.NONE, group_id=gid, group_state=group.state().value,
                group_epoch=group.group_epoch, assignment_epoch=group.target_assignment_epoch,
                assignor_name=preferred_assignor(group.members.values(), self.c.consumer_group_config),
                members=members, authorized_operations=self.authz.operations(conn, ResourceType.GROUP, gid)
                if req.include_authorized_operations else OPERATIONS_NOT_REQUESTED)
        return cgdr.ConsumerGroupDescribeResponse(throttle_time_ms=0, groups=self._describe_each(
            conn, req.group_ids, cgdr.DescribedGroup, self.c.handle_consumer_group_describe, build))

    def handle_share_group_describe(self, header: RequestHeader, req: ShareGroupDescribeRequest,
                                    conn: KafkaConnection) -> sgdr.ShareGroupDescribeResponse:
        def build(gid: str, group: ShareGroup) -> sgdr.DescribedGroup:
            names = {t: self.metadata.topic_name(t) or "" for m in group.members.values() for t in m.assigned}
            if len(self.authz.allowed(conn, Op.DESCRIBE, ResourceType.TOPIC, set(names.values()))) < \
                    len(set(names.values())):
                # As Kafka: the group is not shown with topics the caller may not describe.
                return sgdr.DescribedGroup(
                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, group_id=gid,
                    error_message="The group has described topic(s) that the client is not authorized to describe.")
            members = [sgdr.Member(
                member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch, client_id=m.client_id,
                client_host=m.client_host, subscribed_topic_names=list(m.subscribed_topic_names),
                assignment=sgdr.Assignment(topic_partitions=[
                    sgdr.TopicPartitions(topic_id=t, topic_name=names[t], partitions=ps)
                    for t, ps in _by_topic_id(m.assigned)]))
                for m in group.members.values()]
            return sgdr.DescribedGroup(
                error_code=ErrorCode.NONE, group_id=gid, group_state=group.state().value,
                group_epoch=group.group_epoch, assignment_epoch=group.target_assignment_epoch,
                assignor_name=SHARE_ASSIGNOR.name, members=members,
                authorized_operations=self.authz.operations(conn, ResourceType.GROUP, gid)
                if req.include_authorized_operations else OPERATIONS_NOT_REQUESTED)
        return sgdr.ShareGroupDescribeResponse(throttle_time_ms=0, groups=self._describe_each(
            conn, req.group_ids, sgdr.DescribedGroup, self.c.handle_share_group_describe, build))

    def handle_list_groups(
        self, header: RequestHeader, req: ListGroupsRequest, conn: KafkaConnection
    ) -> lsr.ListGroupsResponse:
        v = header.api_version
        states = req.states_filter if v >= 4 else []
        types = req.types_filter if v >= 5 else []
        err, groups = self.c.handle_list_groups(states, types)
        if not self.authz.cluster(conn, Op.DESCRIBE):  # else only the groups it may describe
            visible = self.authz.allowed(conn, Op.DESCRIBE, ResourceType.GROUP, (g.group_id for g in groups))
            groups = [g for g in groups if g.group_id in visible]
        return lsr.ListGroupsResponse(throttle_time_ms=0, error_code=err, groups=[
            lsr.ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type or "", group_state=g.state_name,
                            group_type=g.group_type) for g in groups])

    def handle_delete_groups(
        self, header: RequestHeader, req: DeleteGroupsRequest, conn: KafkaConnection
    ) -> dgr.DeleteGroupsResponse:
        names = list(dict.fromkeys(req.groups_names))
        deletable = self.authz.allowed(conn, Op.DELETE, ResourceType.GROUP, names)
        errors = self.c.handle_delete_groups([g for g in names if g in deletable])
        errors.update((g, ErrorCode.GROUP_AUTHORIZATION_FAILED) for g in names if g not in deletable)
        return dgr.DeleteGroupsResponse(throttle_time_ms=0, results=[
            dgr.DeletableGroupResult(group_id=g, error_code=errors[g]) for g in names])

    # ------------------------------------------------------------ TxnOffsetCommit
    def handle_txn_offset_commit(
        self, header: RequestHeader, req: TxnOffsetCommitRequest, conn: KafkaConnection
    ) -> Answer:
        """Offsets committed inside a transaction: written to __consumer_offsets with the
        producer's id and epoch, pending until the transaction's marker lands there."""
        v = header.api_version
        errors: dict[TopicPartition, ErrorCode] = {}
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        now = self.clock.milliseconds()
        # As Kafka: WRITE on the transactional id, then READ on the group, refuse every partition.
        if not self.authz.transactional_id(conn, Op.WRITE, req.transactional_id):
            refused = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        elif not self.authz.group(conn, Op.READ, req.group_id):
            refused = ErrorCode.GROUP_AUTHORIZATION_FAILED
        else:
            refused = ErrorCode.NONE
        for key, p, refusal in self._requested(req.topics, conn):
            if refused or refusal:
                errors[key] = refused or refusal
                continue
            epoch = p.committed_leader_epoch if v >= 2 else -1
            offsets[key] = OffsetAndMetadata(
                committed_offset=p.committed_offset, leader_epoch=None if epoch < 0 else epoch,
                metadata=p.committed_metadata or "", commit_timestamp=now, expire_timestamp=None)

        def build(results: dict[TopicPartition, ErrorCode]) -> tocr.TxnOffsetCommitResponse:
            merged = {**results, **errors}
            by_topic: dict[str, list[tocr.TxnOffsetCommitResponsePartition]] = {}
            for key, err in merged.items():
                if v < 2 and err == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                    err = ErrorCode.COORDINATOR_NOT_AVAILABLE  # clients before 2.3 crash on the loading error
                by_topic.setdefault(key.topic, []).append(
                    tocr.TxnOffsetCommitResponsePartition(partition_index=key.partition, error_code=err))
            return tocr.TxnOffsetCommitResponse(throttle_time_ms=0, topics=[
                tocr.TxnOffsetCommitResponseTopic(name=n, partitions=ps) for n, ps in by_topic.items()])

        reply = Reply(build)
        if not offsets:
            reply({})
            return reply.answer()

        def commit() -> None:
            self.c.handle_txn_commit_offsets(
                req.group_id, req.producer_id, req.producer_epoch, req.member_id if v >= 3 else "",
                req.group_instance_id if v >= 3 else None, req.generation_id if v >= 3 else -1, offsets, reply)

        if self.c.is_active:
            # KIP-890: the producer's transaction must hold the group's offsets partition
            # (AddOffsetsToTxn); a transaction.version 2 producer sends none, and v5 adds it here.
            operation = TxnOperation.for_txn_offset_commit(v)
            tp = TopicPartition(GROUP_METADATA_TOPIC_NAME, self.c.partition_for(req.group_id))
            task = asyncio.get_running_loop().create_task(
                self._commit_once_joined(req, tp, operation, offsets, reply, commit))
            self._joining.add(task)
            task.add_done_callback(self._joining.discard)
            return reply.answer()
        commit()
        return reply.answer()

    async def _commit_once_joined(self, req: TxnOffsetCommitRequest, tp: TopicPartition, operation: TxnOperation,
                                  offsets: dict[TopicPartition, OffsetAndMetadata],
                                  reply: Reply[dict[TopicPartition, ErrorCode]], commit: Callable[[], None]) -> None:
        try:
            err = convert_write_error(await self.join_transaction(
                req.transactional_id, req.producer_id, req.producer_epoch, tp, operation))
        except Exception as e:  # answer the request rather than leave it hanging
            reply.fail(e)
            return
        if err != ErrorCode.NONE:
            reply({key: err for key in offsets})
            return
        commit()
