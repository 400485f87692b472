"""Request handlers for the group APIs: decoded requests in, responses out.

Version differences (which fields exist, where errors go) are settled here, so the
coordinator works on plain values. A handler whose answer depends on other members
(JoinGroup, SyncGroup) or on a log append (OffsetCommit) returns a Future.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Callable

from rivulet.coordinator.group_metadata import (
    JoinGroupResult,
    OffsetAndMetadata,
    SyncGroupResult,
    TopicPartitionKey,
)
from rivulet.coordinator.group_metadata_manager import INVALID_OFFSET, PartitionData
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages import (
    delete_groups_response as dgr,
    describe_groups_response as dsr,
    find_coordinator_response as fcr,
    heartbeat_response as hbr,
    join_group_response as jgr,
    leave_group_response as lgr,
    list_groups_response as lsr,
    offset_commit_response as ocr,
    offset_delete_response as odr,
    offset_fetch_response as ofr,
    sync_group_response as sgr,
)

if TYPE_CHECKING:
    from rivulet.coordinator.group_coordinator import GroupCoordinator

log = logging.getLogger(__name__)

API_VERSIONS: dict[int, tuple[int, int]] = {
    8: (2, 9),    # OffsetCommit
    9: (1, 9),    # OffsetFetch
    10: (0, 6),   # FindCoordinator
    11: (0, 9),   # JoinGroup
    12: (0, 4),   # Heartbeat
    13: (0, 5),   # LeaveGroup
    14: (0, 5),   # SyncGroup
    15: (0, 5),   # DescribeGroups
    16: (0, 5),   # ListGroups
    42: (0, 2),   # DeleteGroups
    47: (0, 0),   # OffsetDelete
}

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
# READ, DELETE and DESCRIBE: what a group resource supports when no authorizer is set.
GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
AUTHORIZED_OPERATIONS_OMITTED = -2147483648

# Kafka's default exception messages for the errors FindCoordinator reports.
_MESSAGES = {
    ErrorCode.NONE: "NONE",
    ErrorCode.COORDINATOR_NOT_AVAILABLE: "The coordinator is not available.",
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: "The coordinator is loading and hence can't process requests.",
    ErrorCode.NOT_COORDINATOR: "This is not the correct coordinator.",
    ErrorCode.INVALID_REQUEST: "This most likely occurs because of a request being malformed by the client "
                               "library or the message was sent to an incompatible broker. See the broker logs "
                               "for more details.",
}


class _Reply:
    """Collects a callback's answer: returned directly if it came synchronously, else via a Future."""

    __slots__ = ("_build", "_value", "_future", "_done")

    def __init__(self, build: Callable[[Any], Any]) -> None:
        self._build = build
        self._value: Any = None
        self._future: asyncio.Future | None = None
        self._done = False

    def __call__(self, result: Any) -> None:
        if self._done:
            return
        self._done = True
        try:
            value = self._build(result)
        except Exception as e:  # never let one member's answer break another's request
            log.exception("building a group response failed")
            if self._future is not None and not self._future.done():
                self._future.set_exception(e)
            return
        if self._future is not None:
            if not self._future.done():
                self._future.set_result(value)
        else:
            self._value = value

    def result(self) -> Any:
        if self._done and self._future is None:
            return self._value
        self._future = asyncio.get_running_loop().create_future()
        return self._future


def client_host(conn: Any) -> str:
    """As Java's InetAddress.toString() prints a peer without a host name: '/127.0.0.1'."""
    peer = getattr(conn, "peer", None) or ("", 0)
    return "/" + str(peer[0])


class GroupApis:
    def __init__(self, coordinator: GroupCoordinator) -> None:
        self.c = coordinator

    def register(self, apis: Any) -> None:
        handlers = {
            8: self.handle_offset_commit, 9: self.handle_offset_fetch, 10: self.handle_find_coordinator,
            11: self.handle_join_group, 12: self.handle_heartbeat, 13: self.handle_leave_group,
            14: self.handle_sync_group, 15: self.handle_describe_groups, 16: self.handle_list_groups,
            42: self.handle_delete_groups, 47: self.handle_offset_delete,
        }
        for key, fn in handlers.items():
            apis.register(key, API_VERSIONS[key], fn)

    # ------------------------------------------------------------ FindCoordinator
    def _resolve(self, key_type: int, key: str) -> tuple[ErrorCode, int, str, int]:
        resolver = self.c.coordinator_resolvers.get(key_type)
        if resolver is not None:
            return resolver(key)
        if key_type == TRANSACTION_KEY_TYPE:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1  # no transaction coordinator yet
        return ErrorCode.INVALID_REQUEST, -1, "", -1

    def handle_find_coordinator(self, header, req, conn) -> fcr.FindCoordinatorResponse:
        v = header.api_version
        key_type = req.key_type if v >= 1 else GROUP_KEY_TYPE
        if v < 4:
            err, node, host, port = self._resolve(key_type, req.key)
            if err != ErrorCode.NONE:
                node, host, port = -1, "", -1
            return fcr.FindCoordinatorResponse(throttle_time_ms=0, error_code=err, error_message=_MESSAGES.get(err),
                                               node_id=node, host=host, port=port)
        out = []
        for key in req.coordinator_keys:
            err, node, host, port = self._resolve(key_type, key)
            if err != ErrorCode.NONE:
                node, host, port = -1, "", -1
            out.append(fcr.Coordinator(key=key, node_id=node, host=host, port=port, error_code=err,
                                       error_message=None if err == ErrorCode.NONE else _MESSAGES.get(err)))
        return fcr.FindCoordinatorResponse(throttle_time_ms=0, coordinators=out)

    # ------------------------------------------------------------ JoinGroup
    def handle_join_group(self, header, req, conn) -> Any:
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

        reply = _Reply(build)
        self.c.handle_join_group(
            req.group_id, req.member_id, instance_id,
            require_known_member_id=v >= 4 and instance_id is None, support_skipping_assignment=v >= 9,
            client_id=header.client_id or "", client_host=client_host(conn),
            rebalance_timeout_ms=rebalance_timeout, session_timeout_ms=req.session_timeout_ms,
            protocol_type=req.protocol_type, protocols=[(p.name, bytes(p.metadata)) for p in req.protocols],
            callback=reply, reason=req.reason if v >= 8 else None)
        return reply.result()

    # ------------------------------------------------------------ SyncGroup
    def handle_sync_group(self, header, req, conn) -> Any:
        v = header.api_version

        def build(r: SyncGroupResult) -> sgr.SyncGroupResponse:
            return sgr.SyncGroupResponse(throttle_time_ms=0, error_code=r.error, protocol_type=r.protocol_type,
                                         protocol_name=r.protocol_name, assignment=r.assignment)

        reply = _Reply(build)
        if v >= 5 and (req.protocol_type is None or req.protocol_name is None):
            # From v5 both are mandatory.
            reply(SyncGroupResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return reply.result()
        assignment = {a.member_id: bytes(a.assignment) for a in req.assignments}
        self.c.handle_sync_group(
            req.group_id, req.generation_id, req.member_id,
            req.protocol_type if v >= 5 else None, req.protocol_name if v >= 5 else None,
            req.group_instance_id if v >= 3 else None, assignment, reply)
        return reply.result()

    # ------------------------------------------------------------ Heartbeat
    def handle_heartbeat(self, header, req, conn) -> hbr.HeartbeatResponse:
        v = header.api_version
        err = self.c.handle_heartbeat(req.group_id, req.member_id, req.group_instance_id if v >= 3 else None,
                                      req.generation_id)
        return hbr.HeartbeatResponse(throttle_time_ms=0, error_code=err)

    # ------------------------------------------------------------ LeaveGroup
    def handle_leave_group(self, header, req, conn) -> Any:
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

        reply = _Reply(build)
        self.c.handle_leave_group(req.group_id, leaving, lambda top, members: reply((top, members)))
        return reply.result()

    # ------------------------------------------------------------ OffsetCommit
    def handle_offset_commit(self, header, req, conn) -> Any:
        v = header.api_version
        meta = self.c.broker.metadata
        now = self.c.clock()
        expire = None
        if 2 <= v <= 4 and req.retention_time_ms != -1:
            expire = now + req.retention_time_ms  # KIP-211: old clients may still ask for one
        order: list[TopicPartitionKey] = []
        early: dict[TopicPartitionKey, ErrorCode] = {}
        offsets: dict[TopicPartitionKey, OffsetAndMetadata] = {}
        for t in req.topics:
            info = meta.get(t.name)
            for p in t.partitions:
                tp = TopicPartitionKey(t.name, p.partition_index)
                order.append(tp)
                if info is None or not 0 <= p.partition_index < info.num_partitions:
                    early[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                epoch = p.committed_leader_epoch if v >= 6 else -1
                offsets[tp] = OffsetAndMetadata(
                    committed_offset=p.committed_offset, leader_epoch=None if epoch == -1 else epoch,
                    metadata=p.committed_metadata if p.committed_metadata is not None else "",
                    commit_timestamp=now, expire_timestamp=expire)

        def build(errors: dict[TopicPartitionKey, ErrorCode]) -> ocr.OffsetCommitResponse:
            merged = {**errors, **early}
            topics: dict[str, list[ocr.OffsetCommitResponsePartition]] = {}
            seen: set[TopicPartitionKey] = set()
            for tp in order:
                if tp in seen:
                    continue
                seen.add(tp)
                topics.setdefault(tp.topic, []).append(ocr.OffsetCommitResponsePartition(
                    partition_index=tp.partition, error_code=merged.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR)))
            return ocr.OffsetCommitResponse(throttle_time_ms=0, topics=[
                ocr.OffsetCommitResponseTopic(name=n, partitions=ps) for n, ps in topics.items()])

        reply = _Reply(build)
        if not offsets:
            reply({})
            return reply.result()
        generation = req.generation_id_or_member_epoch
        self.c.handle_commit_offsets(req.group_id, req.member_id, req.group_instance_id if v >= 7 else None,
                                     generation, offsets, reply, api_version=v)
        return reply.result()

    # ------------------------------------------------------------ OffsetFetch
    def _fetch_group(self, group_id: str, topics: list[tuple[str, list[int]]] | None, require_stable: bool
                     ) -> tuple[ErrorCode, list[tuple[str, list[tuple[int, PartitionData]]]]]:
        wanted = None if topics is None else [TopicPartitionKey(t, p) for t, ps in topics for p in ps]
        err, data = self.c.handle_fetch_offsets(group_id, require_stable, wanted)
        if err != ErrorCode.NONE:
            return err, []
        out: dict[str, list[tuple[int, PartitionData]]] = {}
        keys = wanted if wanted is not None else sorted(data, key=lambda k: (k.topic, k.partition))
        for tp in keys:
            out.setdefault(tp.topic, []).append((tp.partition, data.get(tp, PartitionData())))
        return ErrorCode.NONE, list(out.items())

    def handle_offset_fetch(self, header, req, conn) -> ofr.OffsetFetchResponse:
        v = header.api_version
        require_stable = req.require_stable if v >= 7 else False
        if v >= 8:
            groups = []
            for g in req.groups:
                topics = None if g.topics is None else [(t.name, list(t.partition_indexes)) for t in g.topics]
                err, result = self._fetch_group(g.group_id, topics, require_stable)
                groups.append(ofr.OffsetFetchResponseGroup(group_id=g.group_id, error_code=err, topics=[
                    ofr.OffsetFetchResponseTopics(name=name, partitions=[
                        ofr.OffsetFetchResponsePartitions(
                            partition_index=p, committed_offset=d.offset,
                            committed_leader_epoch=-1 if d.leader_epoch is None else d.leader_epoch,
                            metadata=d.metadata, error_code=d.error) for p, d in parts])
                    for name, parts in result]))
            return ofr.OffsetFetchResponse(throttle_time_ms=0, groups=groups)
        topics = None if req.topics is None else [(t.name, list(t.partition_indexes)) for t in req.topics]
        err, result = self._fetch_group(req.group_id, topics, require_stable)
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
    def handle_offset_delete(self, header, req, conn) -> odr.OffsetDeleteResponse:
        meta = self.c.broker.metadata
        order: list[TopicPartitionKey] = []
        errors: dict[TopicPartitionKey, ErrorCode] = {}
        candidates: list[TopicPartitionKey] = []
        for t in req.topics:
            info = meta.get(t.name)
            for p in t.partitions:
                tp = TopicPartitionKey(t.name, p.partition_index)
                order.append(tp)
                if info is None or not 0 <= p.partition_index < info.num_partitions:
                    errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    candidates.append(tp)
        group_error, partition_errors = self.c.handle_delete_offsets(req.group_id, candidates)
        if group_error != ErrorCode.NONE:
            return odr.OffsetDeleteResponse(error_code=group_error, throttle_time_ms=0, topics=[])
        errors.update(partition_errors)
        topics: dict[str, list[odr.OffsetDeleteResponsePartition]] = {}
        seen: set[TopicPartitionKey] = set()
        for tp in order:
            if tp in seen or tp not in errors:
                continue
            seen.add(tp)
            topics.setdefault(tp.topic, []).append(
                odr.OffsetDeleteResponsePartition(partition_index=tp.partition, error_code=errors[tp]))
        return odr.OffsetDeleteResponse(error_code=ErrorCode.NONE, throttle_time_ms=0, topics=[
            odr.OffsetDeleteResponseTopic(name=n, partitions=ps) for n, ps in topics.items()])

    # ------------------------------------------------------------ DescribeGroups / ListGroups / DeleteGroups
    def handle_describe_groups(self, header, req, conn) -> dsr.DescribeGroupsResponse:
        v = header.api_version
        include_ops = v >= 3 and req.include_authorized_operations
        out = []
        for gid in req.groups:
            err, (state, ptype, protocol, members) = self.c.handle_describe_group(gid)
            out.append(dsr.DescribedGroup(
                error_code=err, group_id=gid, group_state=state, protocol_type=ptype, protocol_data=protocol,
                members=[dsr.DescribedGroupMember(
                    member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                    client_host=m.client_host, member_metadata=m.metadata, member_assignment=m.assignment)
                    for m in members],
                authorized_operations=GROUP_AUTHORIZED_OPERATIONS if include_ops and err == ErrorCode.NONE
                else AUTHORIZED_OPERATIONS_OMITTED))
        return dsr.DescribeGroupsResponse(throttle_time_ms=0, groups=out)

    def handle_list_groups(self, header, req, conn) -> lsr.ListGroupsResponse:
        v = header.api_version
        states = req.states_filter if v >= 4 else []
        types = req.types_filter if v >= 5 else []
        err, groups = self.c.handle_list_groups(states, types)
        return lsr.ListGroupsResponse(throttle_time_ms=0, error_code=err, groups=[
            lsr.ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type or "", group_state=g.state.value,
                            group_type="classic") for g in groups])

    def handle_delete_groups(self, header, req, conn) -> dgr.DeleteGroupsResponse:
        names = list(dict.fromkeys(req.groups_names))
        errors = self.c.handle_delete_groups(names)
        return dgr.DeleteGroupsResponse(throttle_time_ms=0, results=[
            dgr.DeletableGroupResult(group_id=g, error_code=errors[g]) for g in names])
