"""ControllerContext: the controller's in-memory copy of the cluster (Kafka's ControllerContext).

Filled from ZooKeeper when a broker becomes controller, then kept current by the controller's
own writes and by the watches it reacts to. Only the controller's event task touches it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from rivulet.common.types import TopicPartition
from rivulet.controller.zk_client import ControllerEpoch
from rivulet.controller.zk_data import BrokerRegistration, LeaderAndIsr, TopicAssignment

LEADER_DURING_DELETE = -2  # what UpdateMetadata says of a topic being deleted


@dataclass(frozen=True)
class ReplicaProgress:
    """A node's place in the metadata the controller publishes: DescribeQuorum's ReplicaState
    (-1 where unknown, as Kafka's)."""

    replica_id: int
    log_end_offset: int = -1
    last_fetch_timestamp: int = -1
    last_caught_up_timestamp: int = -1


@dataclass(frozen=True)
class QuorumDescription:
    """The ZooKeeper-era control plane as DescribeQuorum states a KRaft quorum: the active
    controller is the leader and only voter, its epoch the leader epoch, the other live brokers
    the observers; offsets are ZooKeeper zxids (``ControllerContext.published_offset``)."""

    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: list[ReplicaProgress]
    observers: list[ReplicaProgress]
    # voter id -> its (listener, host, port): DescribeQuorum v2's nodes
    voter_endpoints: dict[int, list[tuple[str, str, int]]]


@dataclass
class ControllerContext:
    epoch: ControllerEpoch
    live_brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    shutting_down: set[int] = field(default_factory=set)
    assignments: dict[str, TopicAssignment] = field(default_factory=dict)
    leadership: dict[TopicPartition, LeaderAndIsr] = field(default_factory=dict)
    topics_to_delete: set[str] = field(default_factory=set)
    # topic being deleted -> the brokers whose replicas have not confirmed their deletion yet
    deletion_pending: dict[str, set[int]] = field(default_factory=dict)
    # The metadata offset: the ZooKeeper zxid this controller's session had seen when it last
    # sent UpdateMetadata (at first, that of its election). zxids only grow, across
    # controllers too, and each names the ZooKeeper state the metadata was read from.
    published_offset: int = -1
    # broker -> the offset of the last UpdateMetadata it applied, and when (DescribeQuorum)
    applied: dict[int, ReplicaProgress] = field(default_factory=dict)
    # broker -> the broker epoch of its last registration a controller dealt with (the znode
    # /rivulet/accounted_registrations); None until this controller has read or written it.
    accounted: dict[int, int] | None = None

    # ------------------------------------------------------------ brokers
    def is_live(self, broker_id: int) -> bool:
        """Live and not shutting down: a broker that may lead or join an ISR."""
        return broker_id in self.live_brokers and broker_id not in self.shutting_down

    @property
    def live_ids(self) -> set[int]:
        return set(self.live_brokers)

    @property
    def leadable_ids(self) -> set[int]:
        return self.live_ids - self.shutting_down

    def broker_epoch(self, broker_id: int) -> int:
        b = self.live_brokers.get(broker_id)
        return -1 if b is None else b.epoch

    # ------------------------------------------------------------ topics and partitions
    def topic_id(self, topic: str) -> uuid.UUID | None:
        a = self.assignments.get(topic)
        return None if a is None else a.topic_id

    def partitions(self, topic: str | None = None) -> list[TopicPartition]:
        topics = [topic] if topic is not None else list(self.assignments)
        return [TopicPartition(t, p) for t in topics if t in self.assignments
                for p in sorted(self.assignments[t].replicas)]

    def replicas(self, tp: TopicPartition) -> list[int]:
        a = self.assignments.get(tp.topic)
        return [] if a is None else list(a.replicas.get(tp.partition, []))

    def partitions_on_broker(self, broker_id: int) -> list[TopicPartition]:
        return [tp for tp in self.partitions() if broker_id in self.replicas(tp)]

    def partitions_led_by(self, broker_id: int) -> list[TopicPartition]:
        return [tp for tp, s in self.leadership.items() if s.leader == broker_id]

    def offline_replicas(self, tp: TopicPartition) -> list[int]:
        return [r for r in self.replicas(tp) if r not in self.live_brokers]

    def remove_topic(self, topic: str) -> None:
        a = self.assignments.pop(topic, None)
        if a is not None:
            for p in a.replicas:
                self.leadership.pop(TopicPartition(topic, p), None)
        self.topics_to_delete.discard(topic)
        self.deletion_pending.pop(topic, None)
