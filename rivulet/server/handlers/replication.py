"""Request handlers of the controller's requests to a broker in cluster mode: LeaderAndIsr,
StopReplica and UpdateMetadata. The state changes are the ReplicaManager's and the
MetadataCache's; here every version's shape is turned into theirs, and requests from an
earlier life of this broker (a stale broker epoch) are refused."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Callable, Protocol

from rivulet.common.types import TopicPartition
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.framing import RequestHeader
from rivulet.protocol.messages import (
    leader_and_isr_response as lair,
    stop_replica_response as srr,
    update_metadata_response as umr,
)
from rivulet.protocol.messages.leader_and_isr_request import LeaderAndIsrRequest
from rivulet.protocol.messages.stop_replica_request import StopReplicaRequest
from rivulet.protocol.messages.update_metadata_request import UpdateMetadataRequest
from rivulet.protocol.schema import ZERO_UUID
from rivulet.replication.metadata_cache import (
    BrokerEndpoint,
    LiveBroker,
    MetadataUpdate,
    PartitionMetadata,
)
from rivulet.replication.partition import PartitionState
from rivulet.replication.replica_manager import LeaderAndIsrPartition, LeaderEndpoint, ReplicaManager
from rivulet.security.acls import AclOperation
from rivulet.server.acls import Authz
from rivulet.server.answer import Answer, then
from rivulet.server.handlers import Handler
from rivulet.server.network import KafkaConnection

log = logging.getLogger(__name__)

# API key -> versions, advertised in cluster mode only (a single node is nobody's follower).
INTER_BROKER_VERSIONS: dict[int, tuple[int, int]] = {
    4: (0, 7),   # LeaderAndIsr
    5: (0, 4),   # StopReplica
    6: (0, 8),   # UpdateMetadata
}


class TopicConfigSource(Protocol):
    """Where the topics' configs are read from before their new replicas' logs are made
    (ZooKeeper's /config/topics in ZooKeeper mode)."""

    async def read_topic_configs(self, topics: Iterable[str]) -> None: ...


@dataclass(eq=False)
class ReplicationHandlers:
    replica_manager: ReplicaManager
    # The czxid of this broker's registration znode: requests meant for an earlier
    # registration of the same id carry a smaller one.
    broker_epoch: Callable[[], int]
    # ``off_loop(fn, *args)`` runs file work on a worker thread that shutdown waits for.
    off_loop: Callable[..., asyncio.Future]
    authz: Authz
    topic_configs: TopicConfigSource | None = None

    def handlers(self) -> dict[int, Handler]:
        return {4: self.handle_leader_and_isr, 5: self.handle_stop_replica, 6: self.handle_update_metadata}

    def _refused(self, conn: KafkaConnection) -> bool:
        """The controller's requests need CLUSTER_ACTION, as Kafka's brokers check."""
        return not self.authz.cluster(conn, AclOperation.CLUSTER_ACTION)

    def _stale_broker_epoch(self, requested: int) -> bool:
        # -1: a controller that does not send broker epochs.
        return requested != -1 and requested < self.broker_epoch()

    # ------------------------------------------------------------ LeaderAndIsr
    def handle_leader_and_isr(self, header: RequestHeader, req: LeaderAndIsrRequest,
                              conn: KafkaConnection) -> Answer:
        v = header.api_version
        states: list[LeaderAndIsrPartition] = []
        ids: dict[str, object] = {}
        if v < 2:
            groups = [(None, ZERO_UUID, req.ungrouped_partition_states)]
        else:
            groups = [(t.topic_name, t.topic_id, t.partition_states) for t in req.topic_states]
        for name, topic_id, parts in groups:
            for ps in parts:
                topic = name if name is not None else ps.topic_name
                ids[topic] = topic_id
                states.append(LeaderAndIsrPartition(
                    TopicPartition(topic, ps.partition_index), topic_id,
                    PartitionState(controller_epoch=ps.controller_epoch, leader=ps.leader,
                                   leader_epoch=ps.leader_epoch, isr=list(ps.isr),
                                   partition_epoch=ps.partition_epoch, replicas=list(ps.replicas),
                                   is_new=ps.is_new)))
        if self._refused(conn):
            return self._leader_and_isr_response(v, states, ids, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                                 {s.tp: ErrorCode.CLUSTER_AUTHORIZATION_FAILED for s in states})
        if self._stale_broker_epoch(req.broker_epoch if v >= 2 else -1):
            log.info("refusing LeaderAndIsr with a stale broker epoch %d", req.broker_epoch)
            return self._leader_and_isr_response(v, states, ids, ErrorCode.STALE_BROKER_EPOCH,
                                                 {s.tp: ErrorCode.STALE_BROKER_EPOCH for s in states})
        leaders = {b.broker_id: LeaderEndpoint(b.broker_id, b.host_name, b.port) for b in req.live_leaders}

        def apply() -> lair.LeaderAndIsrResponse:
            top, errors = self.replica_manager.become_leader_or_follower(
                req.controller_id, req.controller_epoch, states, leaders)
            return self._leader_and_isr_response(v, states, ids, top, errors)

        new = self.replica_manager.replicas_to_create(states)
        if not new:
            return apply()
        # New replicas' logs are made on a worker thread, then the state applies in one step on
        # the loop; the controller sends this broker one request at a time, so none overtakes.
        opened = asyncio.ensure_future(self._open_replica_logs(new))
        return then(opened, lambda _: apply())

    async def _open_replica_logs(self, new: list[tuple[TopicPartition, uuid.UUID]]) -> None:
        # Their topics' configs first: a log made before them would take the defaults (a
        # LogAppendTime topic would keep its first batch's producer timestamps).
        if self.topic_configs is not None:
            await self.topic_configs.read_topic_configs({tp.topic for tp, _ in new})
        await self.off_loop(self.replica_manager.open_replica_logs, new)

    @staticmethod
    def _leader_and_isr_response(v: int, states: list[LeaderAndIsrPartition], ids: dict[str, object],
                                 top: ErrorCode, errors: dict[TopicPartition, ErrorCode]) -> lair.LeaderAndIsrResponse:
        resp = lair.LeaderAndIsrResponse(error_code=top)
        if v < 5:
            resp.partition_errors = [lair.LeaderAndIsrPartitionError(
                topic_name=s.tp.topic, partition_index=s.tp.partition, error_code=errors[s.tp]) for s in states]
        else:
            by_topic: dict[str, list[lair.LeaderAndIsrPartitionError]] = {}
            for s in states:
                by_topic.setdefault(s.tp.topic, []).append(lair.LeaderAndIsrPartitionError(
                    topic_name=s.tp.topic, partition_index=s.tp.partition, error_code=errors[s.tp]))
            resp.topics = [lair.LeaderAndIsrTopicError(topic_id=ids[name], partition_errors=errs)
                           for name, errs in by_topic.items()]
        return resp

    # ------------------------------------------------------------ StopReplica
    def handle_stop_replica(self, header: RequestHeader, req: StopReplicaRequest,
                            conn: KafkaConnection) -> srr.StopReplicaResponse:
        v = header.api_version
        parts: dict[TopicPartition, tuple[int, bool]] = {}
        if v == 0:
            for p in req.ungrouped_partitions:
                parts[TopicPartition(p.topic_name, p.partition_index)] = (-1, req.delete_partitions)
        elif v <= 2:
            for t in req.topics:
                for i in t.partition_indexes:
                    parts[TopicPartition(t.name, i)] = (-1, req.delete_partitions)
        else:
            for t in req.topic_states:
                for ps in t.partition_states:
                    parts[TopicPartition(t.topic_name, ps.partition_index)] = (ps.leader_epoch, ps.delete_partition)
        if self._refused(conn):
            top, errors = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, \
                {tp: ErrorCode.CLUSTER_AUTHORIZATION_FAILED for tp in parts}
        elif self._stale_broker_epoch(req.broker_epoch if v >= 1 else -1):
            top, errors = ErrorCode.STALE_BROKER_EPOCH, {tp: ErrorCode.STALE_BROKER_EPOCH for tp in parts}
        else:
            top, errors = self.replica_manager.stop_replicas(req.controller_id, req.controller_epoch, parts)
        return srr.StopReplicaResponse(error_code=top, partition_errors=[
            srr.StopReplicaPartitionError(topic_name=tp.topic, partition_index=tp.partition, error_code=errors[tp])
            for tp in parts])

    # ------------------------------------------------------------ UpdateMetadata
    def handle_update_metadata(self, header: RequestHeader, req: UpdateMetadataRequest,
                               conn: KafkaConnection) -> umr.UpdateMetadataResponse:
        v = header.api_version
        if self._refused(conn):
            return umr.UpdateMetadataResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        if self._stale_broker_epoch(req.broker_epoch if v >= 5 else -1):
            return umr.UpdateMetadataResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
        return umr.UpdateMetadataResponse(
            error_code=self.replica_manager.maybe_update_metadata_cache(update_from_request(req, v)))


def update_from_request(req: UpdateMetadataRequest, v: int) -> MetadataUpdate:
    """UpdateMetadata of any version in the cache's terms."""
    brokers = []
    for b in req.live_brokers:
        if v == 0:
            endpoints: tuple[BrokerEndpoint, ...] = (BrokerEndpoint("PLAINTEXT", b.v0_host, b.v0_port),)
        else:
            endpoints = tuple(BrokerEndpoint(e.listener if v >= 3 else _protocol_name(e.security_protocol),
                                             e.host, e.port, e.security_protocol) for e in b.endpoints)
        brokers.append(LiveBroker(b.id, endpoints, b.rack if v >= 2 else None))
    partitions: dict[TopicPartition, PartitionMetadata] = {}
    topic_ids = {}
    if v < 5:
        groups = [(None, req.ungrouped_partition_states)]
    else:
        groups = [(t.topic_name, t.partition_states) for t in req.topic_states]
        topic_ids = {t.topic_name: t.topic_id for t in req.topic_states if v >= 7}
    for name, states in groups:
        for ps in states:
            topic = name if name is not None else ps.topic_name
            partitions[TopicPartition(topic, ps.partition_index)] = PartitionMetadata(
                leader=ps.leader, leader_epoch=ps.leader_epoch, isr=list(ps.isr), replicas=list(ps.replicas),
                offline_replicas=list(ps.offline_replicas) if v >= 4 else [], zk_version=ps.zk_version,
                controller_epoch=ps.controller_epoch, eligible_leader_replicas=list(ps.eligible_leader_replicas),
                last_known_elr=list(ps.last_known_elr))
    return MetadataUpdate(req.controller_id, req.controller_epoch, brokers, partitions, topic_ids)


_PROTOCOLS = {0: "PLAINTEXT", 1: "SSL", 2: "SASL_PLAINTEXT", 3: "SASL_SSL"}


def _protocol_name(code: int) -> str:
    # Before v3 an endpoint's listener is named after its security protocol.
    return _PROTOCOLS.get(code, "PLAINTEXT")
