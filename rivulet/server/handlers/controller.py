"""Requests for the controller: AlterPartition (a leader's ISR change) and ControlledShutdown
in ZooKeeper mode, ElectLeaders, the partition reassignment APIs and DescribeQuorum on every broker. In a
cluster every broker answers them; one that is not the active controller says NOT_CONTROLLER,
as Kafka's, and the sender looks for the controller again. On one node the broker carries out
ElectLeaders and the reassignment APIs itself, as a one-node Kafka's controller does."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol

from rivulet.common.types import TopicPartition
from rivulet.controller.context import QuorumDescription, ReplicaProgress
from rivulet.controller.controller import PREFERRED, KafkaController
from rivulet.protocol.errors import DEFAULT_MESSAGES, ErrorCode
from rivulet.protocol.framing import RequestHeader
from rivulet.protocol.schema import ZERO_UUID
from rivulet.protocol.messages.alter_partition_request import AlterPartitionRequest
from rivulet.protocol.messages import alter_partition_reassignments_response as apr
from rivulet.protocol.messages import alter_partition_response as apar
from rivulet.protocol.messages import controlled_shutdown_response as csr
from rivulet.protocol.messages import describe_quorum_response as dqr
from rivulet.protocol.messages import elect_leaders_response as elr
from rivulet.protocol.messages import list_partition_reassignments_response as lpr
from rivulet.protocol.messages.alter_partition_reassignments_request import AlterPartitionReassignmentsRequest
from rivulet.protocol.messages.controlled_shutdown_request import ControlledShutdownRequest
from rivulet.protocol.messages.describe_quorum_request import DescribeQuorumRequest
from rivulet.protocol.messages.elect_leaders_request import ElectLeadersRequest
from rivulet.protocol.messages.list_partition_reassignments_request import ListPartitionReassignmentsRequest
from rivulet.replication.link import LINK_ERRORS, BrokerLinks
from rivulet.replication.metadata_cache import MetadataCache
from rivulet.security.acls import AclOperation
from rivulet.server.acls import Authz
from rivulet.server.answer import Answer
from rivulet.server.handlers import Handler
from rivulet.server.network import KafkaConnection

# API key -> versions, added to KafkaApis' table in ZooKeeper mode only (a single node, like
# Kafka 4's brokers, does not list them).
CLUSTER_MODE_VERSIONS: dict[int, tuple[int, int]] = {
    7: (0, 3),    # ControlledShutdown
    56: (0, 3),   # AlterPartition
}

# Partition outcome: the error code and message of one partition's answer.
Outcome = tuple[ErrorCode, str | None]


class PartitionAdmin(Protocol):
    """What carries out ElectLeaders and the reassignment APIs: the ``KafkaController`` in a
    cluster, ``OneNodePartitionAdmin`` (server/one_node_admin.py) on one node."""

    @property
    def is_active(self) -> bool:
        """False on a broker that is not the active controller (NOT_CONTROLLER)."""

    async def elect_leaders(self, election_type: int,
                            partitions: list[TopicPartition] | None) -> dict[TopicPartition, Outcome]: ...

    async def alter_reassignments(self, wanted: dict[TopicPartition, list[int] | None],
                                  allow_rf_change: bool = True) -> dict[TopicPartition, Outcome]: ...

    async def list_reassignments(self, tps: list[TopicPartition] | None
                                 ) -> dict[TopicPartition, tuple[list[int], list[int], list[int]]] | None: ...


def _refused(authz: Authz, conn: KafkaConnection, op: AclOperation) -> bool:
    """Brokers' requests need CLUSTER_ACTION, elections and reassignments ALTER (listing them
    DESCRIBE) on the cluster, as Kafka checks them."""
    return not authz.cluster(conn, op)


@dataclass(eq=False)
class ControllerHandlers:
    """The brokers' requests to the controller, in ZooKeeper mode."""

    controller: KafkaController
    authz: Authz

    def _refused(self, conn: KafkaConnection, op: AclOperation) -> bool:
        return _refused(self.authz, conn, op)

    def handlers(self) -> dict[int, Handler]:
        return {7: self.handle_controlled_shutdown, 56: self.handle_alter_partition}

    def handle_alter_partition(self, header: RequestHeader, req: AlterPartitionRequest,
                               conn: KafkaConnection) -> Answer:
        if self._refused(conn, AclOperation.CLUSTER_ACTION):
            return apar.AlterPartitionResponse(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                               topics=[])
        return asyncio.ensure_future(self.controller.alter_partition(req, header.api_version))

    def handle_controlled_shutdown(self, header: RequestHeader, req: ControlledShutdownRequest,
                                   conn: KafkaConnection) -> Answer:
        if self._refused(conn, AclOperation.CLUSTER_ACTION):
            return csr.ControlledShutdownResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                                  remaining_partitions=[])
        return asyncio.ensure_future(self.controller.controlled_shutdown(req.broker_id, req.broker_epoch))


def _elect_leaders_failed(req: ElectLeadersRequest, code: ErrorCode) -> elr.ElectLeadersResponse:
    """The whole request refused with ``code``, as are each of the partitions it names."""
    return elr.ElectLeadersResponse(throttle_time_ms=0, error_code=code, replica_election_results=[
        elr.ReplicaElectionResult(topic=t.topic, partition_result=[
            elr.PartitionResult(partition_id=p, error_code=code, error_message=None) for p in t.partitions])
        for t in req.topic_partitions or ()])


@dataclass(eq=False)
class PartitionAdminHandlers:
    """ElectLeaders, AlterPartitionReassignments and ListPartitionReassignments, in front of
    the cluster's controller or of the one node."""

    controller: PartitionAdmin
    authz: Authz

    def _refused(self, conn: KafkaConnection, op: AclOperation) -> bool:
        return _refused(self.authz, conn, op)

    def handlers(self) -> dict[int, Handler]:
        return {43: self.handle_elect_leaders, 45: self.handle_alter_reassignments, 46: self.handle_list_reassignments}

    def handle_elect_leaders(self, header: RequestHeader, req: ElectLeadersRequest, conn: KafkaConnection) -> Answer:
        if self._refused(conn, AclOperation.ALTER):
            return _elect_leaders_failed(req, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        if req.timeout_ms <= 0:
            # Kafka's controller runs the election as an event with a deadline of now plus the
            # timeout: a timeout of 0 (kafka-go's default) has expired before it runs, so nothing
            # is elected and the request (v1+) and each partition named answer REQUEST_TIMED_OUT.
            return _elect_leaders_failed(req, ErrorCode.REQUEST_TIMED_OUT)
        return asyncio.ensure_future(self._elect_leaders(header.api_version, req))

    async def _elect_leaders(self, version: int, req: ElectLeadersRequest) -> elr.ElectLeadersResponse:
        election_type = req.election_type if version >= 1 else PREFERRED
        wanted = None if req.topic_partitions is None else [
            TopicPartition(t.topic, p) for t in req.topic_partitions for p in t.partitions]
        results = await self.controller.elect_leaders(election_type, wanted)
        if not self.controller.is_active:
            return elr.ElectLeadersResponse(throttle_time_ms=0, error_code=ErrorCode.NOT_CONTROLLER,
                                            replica_election_results=[])
        by_topic: dict[str, list[elr.PartitionResult]] = {}
        for tp, (code, message) in sorted(results.items()):
            if wanted is None and code == ErrorCode.ELECTION_NOT_NEEDED:
                continue  # asked for every partition: only those that changed or failed, as Kafka's
            by_topic.setdefault(tp.topic, []).append(
                elr.PartitionResult(partition_id=tp.partition, error_code=code, error_message=message))
        return elr.ElectLeadersResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, replica_election_results=[
            elr.ReplicaElectionResult(topic=t, partition_result=ps) for t, ps in by_topic.items()])

    def handle_alter_reassignments(self, header: RequestHeader, req: AlterPartitionReassignmentsRequest,
                                   conn: KafkaConnection) -> Answer:
        if self._refused(conn, AclOperation.ALTER):
            return apr.AlterPartitionReassignmentsResponse(
                throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=None, responses=[
                    apr.ReassignableTopicResponse(name=t.name, partitions=[apr.ReassignablePartitionResponse(
                        partition_index=p.partition_index, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                        error_message=None) for p in t.partitions]) for t in req.topics])
        return asyncio.ensure_future(self._alter_reassignments(req, header.api_version))

    async def _alter_reassignments(self, req: AlterPartitionReassignmentsRequest,
                                   version: int) -> apr.AlterPartitionReassignmentsResponse:
        wanted = {TopicPartition(t.name, p.partition_index): (None if p.replicas is None else list(p.replicas))
                  for t in req.topics for p in t.partitions}
        results = await self.controller.alter_reassignments(
            wanted, req.allow_replication_factor_change if version >= 1 else True)
        if not self.controller.is_active:
            return apr.AlterPartitionReassignmentsResponse(throttle_time_ms=0, error_code=ErrorCode.NOT_CONTROLLER,
                                                           error_message=None, responses=[])
        by_topic: dict[str, list[apr.ReassignablePartitionResponse]] = {}
        for tp, (code, message) in results.items():
            by_topic.setdefault(tp.topic, []).append(apr.ReassignablePartitionResponse(
                partition_index=tp.partition, error_code=code, error_message=message))
        # Kafka 4.3 answers a request naming nothing with an empty message, any other with none.
        return apr.AlterPartitionReassignmentsResponse(throttle_time_ms=0, error_code=ErrorCode.NONE,
                                                       error_message=None if req.topics else "", responses=[
            apr.ReassignableTopicResponse(name=t, partitions=ps) for t, ps in by_topic.items()])

    def handle_list_reassignments(self, header: RequestHeader, req: ListPartitionReassignmentsRequest,
                                  conn: KafkaConnection) -> Answer:
        if self._refused(conn, AclOperation.DESCRIBE):
            return lpr.ListPartitionReassignmentsResponse(
                throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=None, topics=[])
        return asyncio.ensure_future(self._list_reassignments(req))

    async def _list_reassignments(self, req: ListPartitionReassignmentsRequest) -> lpr.ListPartitionReassignmentsResponse:
        wanted = None if req.topics is None else [
            TopicPartition(t.name, p) for t in req.topics for p in t.partition_indexes]
        ongoing = await self.controller.list_reassignments(wanted)
        if ongoing is None:
            return lpr.ListPartitionReassignmentsResponse(throttle_time_ms=0, error_code=ErrorCode.NOT_CONTROLLER,
                                                          error_message=None, topics=[])
        by_topic: dict[str, list[lpr.OngoingPartitionReassignment]] = {}
        for tp, (replicas, adding, removing) in sorted(ongoing.items()):
            by_topic.setdefault(tp.topic, []).append(lpr.OngoingPartitionReassignment(
                partition_index=tp.partition, replicas=replicas, adding_replicas=adding, removing_replicas=removing))
        return lpr.ListPartitionReassignmentsResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
                                                      topics=[lpr.OngoingTopicReassignment(name=t, partitions=ps)
                                                              for t, ps in by_topic.items()])



# The one partition DescribeQuorum describes: KRaft's metadata log.
CLUSTER_METADATA = TopicPartition("__cluster_metadata", 0)


class QuorumView(Protocol):
    """Who describes the quorum: the ``KafkaController`` in a cluster (None unless active),
    ``OneNodePartitionAdmin`` on one node."""

    def describe_quorum(self) -> QuorumDescription | None: ...


def _replica_state(r: ReplicaProgress) -> dqr.ReplicaState:
    return dqr.ReplicaState(replica_id=r.replica_id, replica_directory_id=ZERO_UUID, log_end_offset=r.log_end_offset,
                            last_fetch_timestamp=r.last_fetch_timestamp,
                            last_caught_up_timestamp=r.last_caught_up_timestamp)


def quorum_response(q: QuorumDescription) -> dqr.DescribeQuorumResponse:
    """Kafka's answer of a leader: directory ids unset (a static quorum's voters have none), and
    v2's nodes the voters with their listeners (dropped below v2 by the codec)."""
    part = dqr.PartitionData(partition_index=CLUSTER_METADATA.partition, error_code=ErrorCode.NONE,
                             error_message="", leader_id=q.leader_id, leader_epoch=q.leader_epoch,
                             high_watermark=q.high_watermark, current_voters=[_replica_state(r) for r in q.voters],
                             observers=[_replica_state(r) for r in q.observers])
    nodes = [dqr.Node(node_id=v.replica_id, listeners=[dqr.Listener(name=n, host=h, port=p)
                                                        for n, h, p in q.voter_endpoints.get(v.replica_id, [])])
             for v in q.voters]
    return dqr.DescribeQuorumResponse(error_code=ErrorCode.NONE, error_message="", topics=[
        dqr.TopicData(topic_name=CLUSTER_METADATA.topic, partitions=[part])], nodes=nodes)


def _partition_error(index: int, code: ErrorCode) -> dqr.PartitionData:
    """A partition answered ``code`` with its default message, as Kafka 4.3.1's (v2 carries it)."""
    return dqr.PartitionData(partition_index=index, error_code=code, error_message=DEFAULT_MESSAGES[code],
                             leader_id=0, leader_epoch=0, high_watermark=0, current_voters=[], observers=[])


def _not_leader() -> dqr.DescribeQuorumResponse:
    """Kafka's answer of a node that does not lead the quorum."""
    return dqr.DescribeQuorumResponse(error_code=ErrorCode.NONE, error_message="", nodes=[], topics=[
        dqr.TopicData(topic_name=CLUSTER_METADATA.topic, partitions=[
            _partition_error(CLUSTER_METADATA.partition, ErrorCode.NOT_LEADER_OR_FOLLOWER)])])


@dataclass(eq=False)
class QuorumHandlers:
    """DescribeQuorum, answered as Kafka 4.3.1's: CLUSTER DESCRIBE, then the request must name
    ``__cluster_metadata`` partition 0 alone (else every partition it named is answered
    UNKNOWN_TOPIC_OR_PARTITION); a broker that is not the controller forwards it there, as a
    KRaft broker forwards it to the active controller."""

    quorum: QuorumView
    authz: Authz
    cache: MetadataCache | None = None  # where the controller is (cluster mode)
    links: BrokerLinks | None = None    # to it

    def handlers(self) -> dict[int, Handler]:
        return {55: self.handle_describe_quorum}

    def handle_describe_quorum(self, header: RequestHeader, req: DescribeQuorumRequest,
                               conn: KafkaConnection) -> Answer:
        if not self.authz.cluster(conn, AclOperation.DESCRIBE):
            code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            return dqr.DescribeQuorumResponse(error_code=code, error_message=DEFAULT_MESSAGES[code], topics=[], nodes=[])
        if not (len(req.topics) == 1 and req.topics[0].topic_name == CLUSTER_METADATA.topic
                and len(req.topics[0].partitions) == 1
                and req.topics[0].partitions[0].partition_index == CLUSTER_METADATA.partition):
            return dqr.DescribeQuorumResponse(error_code=ErrorCode.NONE, error_message="", nodes=[], topics=[
                dqr.TopicData(topic_name=t.topic_name, partitions=[
                    _partition_error(p.partition_index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) for p in t.partitions])
                for t in req.topics])
        q = self.quorum.describe_quorum()
        if q is not None:
            return quorum_response(q)
        return asyncio.ensure_future(self._forward(req, header.api_version))

    async def _forward(self, req: DescribeQuorumRequest, version: int) -> dqr.DescribeQuorumResponse:
        controller = self.cache.controller_id if self.cache is not None else None
        if controller is None or self.links is None or controller == self.links.node_id:
            return _not_leader()
        try:
            response = await self.links.send(controller, req, max_version=version)
        except LINK_ERRORS:
            return _not_leader()
        assert isinstance(response, dqr.DescribeQuorumResponse)
        return response
