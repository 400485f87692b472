"""StreamsGroupHeartbeat and StreamsGroupDescribe (KIP-1071): Kafka's authorization and response
shapes around the group coordinator's streams groups."""

from __future__ import annotations


from rivulet.coordinator.group_coordinator import GroupCoordinator
from rivulet.coordinator.streams_group import (
    StreamsGroup,
    StreamsHeartbeatRequest,
    StreamsHeartbeatResult,
    Tasks,
)
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.framing import RequestHeader
from rivulet.protocol.messages import (
    streams_group_describe_response as sgdr,
    streams_group_heartbeat_response as sghr,
)
from rivulet.protocol.messages.streams_group_describe_request import StreamsGroupDescribeRequest
from rivulet.protocol.messages.streams_group_heartbeat_request import (
    StreamsGroupHeartbeatRequest,
    TaskIds,
    TaskOffset,
    TopicInfo,
)
from rivulet.security.acls import AclOperation as Op, ResourceType
from rivulet.server.acls import OPERATIONS_NOT_REQUESTED, Authz
from rivulet.server.answer import Answer, Reply
from rivulet.server.handlers import Handler
from rivulet.server.network import KafkaConnection


def _tasks_in(ids: list[TaskIds] | None) -> Tasks | None:
    return None if ids is None else {t.subtopology_id: frozenset(t.partitions) for t in ids}


def _offsets_in(offsets: list[TaskOffset] | None) -> dict[tuple[str, int], int] | None:
    return None if offsets is None else {(o.subtopology_id, o.partition): o.offset for o in offsets}


def _sorted(tasks: Tasks) -> list[tuple[str, list[int]]]:
    return [(sub, sorted(ps)) for sub, ps in sorted(tasks.items()) if ps]


class StreamsGroupHandlers:
    def __init__(self, coordinator: GroupCoordinator, authz: Authz) -> None:
        self.c = coordinator
        self.authz = authz

    def handlers(self) -> dict[int, Handler]:
        return {88: self.handle_heartbeat, 89: self.handle_describe}

    # ------------------------------------------------------------ StreamsGroupHeartbeat
    def handle_heartbeat(self, header: RequestHeader, req: StreamsGroupHeartbeatRequest,
                         conn: KafkaConnection) -> Answer:
        def build(r: StreamsHeartbeatResult) -> sghr.StreamsGroupHeartbeatResponse:
            ok = r.error == ErrorCode.NONE
            a = r.assignment if ok else None

            def ids(tasks: Tasks | None) -> list[sghr.TaskIds] | None:
                return None if tasks is None else [sghr.TaskIds(subtopology_id=s, partitions=ps)
                                                   for s, ps in _sorted(tasks)]
            return sghr.StreamsGroupHeartbeatResponse(
                throttle_time_ms=0, error_code=r.error, error_message=r.error_message,
                member_id=r.member_id if ok and r.member_id is not None else "", member_epoch=r.member_epoch,
                heartbeat_interval_ms=r.heartbeat_interval_ms, acceptable_recovery_lag=r.acceptable_recovery_lag,
                task_offset_interval_ms=r.task_offset_interval_ms,
                status=[sghr.Status(status_code=int(c), status_detail=d) for c, d in r.status] if ok else [],
                active_tasks=ids(a.active if a is not None else None),
                standby_tasks=ids(a.standby if a is not None else None),
                warmup_tasks=ids(a.warmup if a is not None else None),
                endpoint_information_epoch=r.endpoint_information_epoch,
                partitions_by_user_endpoint=None if r.partitions_by_user_endpoint is None else [
                    sghr.EndpointToPartitions(
                        user_endpoint=sghr.Endpoint(host=e.host, port=e.port),
                        active_partitions=[sghr.TopicPartition(topic=t, partitions=ps) for t, ps in e.active],
                        standby_partitions=[sghr.TopicPartition(topic=t, partitions=ps) for t, ps in e.standby])
                    for e in r.partitions_by_user_endpoint])

        reply = Reply(build)
        if not self.authz.group(conn, Op.READ, req.group_id):
            reply(StreamsHeartbeatResult(error=ErrorCode.GROUP_AUTHORIZATION_FAILED))
            return reply.answer()
        if req.topology is not None:
            sources = {t for s in req.topology.subtopologies for t in s.source_topics}
            if len(self.authz.allowed(conn, Op.DESCRIBE, ResourceType.TOPIC, sources)) < len(sources):
                reply(StreamsHeartbeatResult(error=ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                return reply.answer()
        endpoint = req.user_endpoint
        self.c.handle_streams_group_heartbeat(StreamsHeartbeatRequest(
            group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch,
            rebalance_timeout_ms=req.rebalance_timeout_ms, instance_id=req.instance_id, rack_id=req.rack_id,
            topology=req.topology, active_tasks=_tasks_in(req.active_tasks),
            standby_tasks=_tasks_in(req.standby_tasks), warmup_tasks=_tasks_in(req.warmup_tasks),
            process_id=req.process_id, user_endpoint=None if endpoint is None else (endpoint.host, endpoint.port),
            client_tags=None if req.client_tags is None else tuple((t.key, t.value) for t in req.client_tags),
            shutdown_application=req.shutdown_application, client_id=header.client_id or "",
            client_host="/" + str(conn.peer[0]), endpoint_information_epoch=req.endpoint_information_epoch,
            task_offsets=_offsets_in(req.task_offsets), task_end_offsets=_offsets_in(req.task_end_offsets)), reply)
        return reply.answer()

    # ------------------------------------------------------------ StreamsGroupDescribe
    def handle_describe(self, header: RequestHeader, req: StreamsGroupDescribeRequest,
                        conn: KafkaConnection) -> sgdr.StreamsGroupDescribeResponse:
        def assignment(active: Tasks, standby: Tasks, warmup: Tasks) -> sgdr.Assignment:
            def ids(tasks: Tasks) -> list[sgdr.TaskIds]:
                return [sgdr.TaskIds(subtopology_id=s, partitions=ps) for s, ps in _sorted(tasks)]
            return sgdr.Assignment(active_tasks=ids(active), standby_tasks=ids(standby), warmup_tasks=ids(warmup))

        def build(gid: str, group: StreamsGroup) -> sgdr.DescribedGroup:
            members = []
            for m in group.members.values():
                target = group.target.get(m.member_id)
                members.append(sgdr.Member(
                    member_id=m.member_id, member_epoch=m.member_epoch, instance_id=m.instance_id, rack_id=m.rack_id,
                    client_id=m.client_id, client_host=m.client_host, topology_epoch=m.topology_epoch,
                    process_id=m.process_id,
                    user_endpoint=None if m.user_endpoint is None else sgdr.Endpoint(host=m.user_endpoint[0],
                                                                                      port=m.user_endpoint[1]),
                    client_tags=[sgdr.KeyValue(key=k, value=v) for k, v in m.client_tags],
                    task_offsets=[], task_end_offsets=[],  # members cannot report them (refused as by Kafka 4.3.1)
                    assignment=assignment(m.assigned.active, m.assigned.standby, m.assigned.warmup),
                    target_assignment=assignment(target.active, target.standby, target.warmup) if target is not None
                    else assignment({}, {}, {}), is_classic=False))
            topology = None
            if group.topology is not None:
                topology = sgdr.Topology(epoch=group.topology.epoch, subtopologies=[
                    sgdr.Subtopology(
                        subtopology_id=s.subtopology_id, source_topics=list(s.source_topics),
                        repartition_sink_topics=list(s.repartition_sink_topics),
                        state_changelog_topics=[_topic_info(t) for t in s.state_changelog_topics],
                        repartition_source_topics=[_topic_info(t) for t in s.repartition_source_topics])
                    for s in group.topology.subtopologies])
            return sgdr.DescribedGroup(
                error_code=ErrorCode.NONE, group_id=gid, group_state=group.state().value,
                group_epoch=group.group_epoch, assignment_epoch=group.target_epoch, topology=topology,
                members=members, authorized_operations=self.authz.operations(conn, ResourceType.GROUP, gid)
                if req.include_authorized_operations else OPERATIONS_NOT_REQUESTED)

        out = []
        for gid in req.group_ids:
            if not self.authz.group(conn, Op.DESCRIBE, gid):
                out.append(sgdr.DescribedGroup(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=gid))
                continue
            err, message, group = self.c.handle_streams_group_describe(gid)
            out.append(sgdr.DescribedGroup(error_code=err, error_message=message, group_id=gid) if group is None
                       else build(gid, group))
        return sgdr.StreamsGroupDescribeResponse(throttle_time_ms=0, groups=out)


def _topic_info(t: TopicInfo) -> sgdr.TopicInfo:
    return sgdr.TopicInfo(name=t.name, partitions=t.partitions, replication_factor=t.replication_factor,
                          topic_configs=[sgdr.KeyValue(key=c.key, value=c.value) for c in t.topic_configs])
