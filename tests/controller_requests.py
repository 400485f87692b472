"""The controller's requests to a broker, built as a ZooKeeper-mode controller sends them
(LeaderAndIsr v7, UpdateMetadata v8, StopReplica v4), for tests that play the controller."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from rivulet.protocol.messages import leader_and_isr_request as laq
from rivulet.protocol.messages import stop_replica_request as srq
from rivulet.protocol.messages import update_metadata_request as umq


@dataclass
class Part:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: list[int]
    replicas: list[int]
    partition_epoch: int = 0


def leader_and_isr(controller_epoch: int, parts: list[Part], topic_ids: dict[str, uuid.UUID],
                   brokers: dict[int, tuple[str, int]], controller_id: int = 0,
                   broker_epoch: int = -1) -> laq.LeaderAndIsrRequest:
    by_topic: dict[str, list[laq.LeaderAndIsrPartitionState]] = {}
    for p in parts:
        by_topic.setdefault(p.topic, []).append(laq.LeaderAndIsrPartitionState(
            partition_index=p.partition, controller_epoch=controller_epoch, leader=p.leader,
            leader_epoch=p.leader_epoch, isr=p.isr, partition_epoch=p.partition_epoch, replicas=p.replicas,
            adding_replicas=[], removing_replicas=[], is_new=False, leader_recovery_state=0))
    leaders = {p.leader for p in parts if p.leader in brokers}
    return laq.LeaderAndIsrRequest(
        controller_id=controller_id, is_k_raft_controller=False, controller_epoch=controller_epoch,
        broker_epoch=broker_epoch, type=0,
        topic_states=[laq.LeaderAndIsrTopicState(topic_name=t, topic_id=topic_ids[t], partition_states=ps)
                      for t, ps in by_topic.items()],
        live_leaders=[laq.LeaderAndIsrLiveLeader(broker_id=b, host_name=brokers[b][0], port=brokers[b][1])
                      for b in sorted(leaders)])


def update_metadata(controller_epoch: int, parts: list[Part], topic_ids: dict[str, uuid.UUID],
                    brokers: dict[int, tuple[str, int]], controller_id: int = 0, racks: dict[int, str] | None = None,
                    broker_epoch: int = -1) -> umq.UpdateMetadataRequest:
    by_topic: dict[str, list[umq.UpdateMetadataPartitionState]] = {}
    for p in parts:
        by_topic.setdefault(p.topic, []).append(umq.UpdateMetadataPartitionState(
            partition_index=p.partition, controller_epoch=controller_epoch, leader=p.leader,
            leader_epoch=p.leader_epoch, isr=p.isr, zk_version=p.partition_epoch, replicas=p.replicas,
            offline_replicas=[]))
    racks = racks or {}
    return umq.UpdateMetadataRequest(
        controller_id=controller_id, is_k_raft_controller=False, type=0, controller_epoch=controller_epoch,
        broker_epoch=broker_epoch,
        topic_states=[umq.UpdateMetadataTopicState(topic_name=t, topic_id=topic_ids[t], partition_states=ps)
                      for t, ps in by_topic.items()],
        live_brokers=[umq.UpdateMetadataBroker(
            id=b, endpoints=[umq.UpdateMetadataEndpoint(port=port, host=host, listener="PLAINTEXT",
                                                        security_protocol=0)],
            rack=racks.get(b)) for b, (host, port) in sorted(brokers.items())])


def stop_replica(controller_epoch: int, parts: dict[tuple[str, int], tuple[int, bool]], controller_id: int = 0,
                 broker_epoch: int = -1) -> srq.StopReplicaRequest:
    by_topic: dict[str, list[srq.StopReplicaPartitionState]] = {}
    for (t, i), (epoch, delete) in parts.items():
        by_topic.setdefault(t, []).append(srq.StopReplicaPartitionState(
            partition_index=i, leader_epoch=epoch, delete_partition=delete))
    return srq.StopReplicaRequest(
        controller_id=controller_id, is_k_raft_controller=False, controller_epoch=controller_epoch,
        broker_epoch=broker_epoch,
        topic_states=[srq.StopReplicaTopicState(topic_name=t, partition_states=ps) for t, ps in by_topic.items()])
