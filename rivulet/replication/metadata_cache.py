"""The broker's view of the cluster in ZooKeeper mode (Kafka's ZkMetadataCache): live brokers
with their endpoints and racks, the controller, and each partition's leader, epoch, replicas and
ISR, as the controller's UpdateMetadata requests state them. Metadata and DescribeCluster
answer from it, and NOT_LEADER_OR_FOLLOWER carries its leader as the KIP-951 hint.

Pure data: the request handler turns UpdateMetadata into ``MetadataUpdate`` and applies it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from rivulet.common.types import TopicPartition

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    listener: str
    host: str
    port: int
    security_protocol: int = 0  # PLAINTEXT


@dataclass(frozen=True, slots=True)
class LiveBroker:
    broker_id: int
    endpoints: tuple[BrokerEndpoint, ...]
    rack: str | None = None

    def endpoint(self, listener: str) -> BrokerEndpoint | None:
        for e in self.endpoints:
            if e.listener == listener:
                return e
        return None


@dataclass(slots=True)
class PartitionMetadata:
    """One partition as the controller last described it (UpdateMetadataPartitionState)."""

    leader: int
    leader_epoch: int
    isr: list[int]
    replicas: list[int]
    offline_replicas: list[int] = field(default_factory=list)
    zk_version: int = 0
    controller_epoch: int = 0
    # KIP-966, carried by Rivulet's tagged fields of UpdateMetadata; empty below
    # eligible.leader.replicas.version 1.
    eligible_leader_replicas: list[int] = field(default_factory=list)
    last_known_elr: list[int] = field(default_factory=list)


@dataclass(slots=True)
class MetadataUpdate:
    controller_id: int
    controller_epoch: int
    live_brokers: list[LiveBroker]
    # (topic, topic id) -> partition index -> state; a leader of -2 (Kafka's LeaderDuringDelete)
    # removes the partition from the cache.
    partitions: dict[TopicPartition, PartitionMetadata]
    topic_ids: dict[str, uuid.UUID]


LEADER_DURING_DELETE = -2


class MetadataCache:
    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.controller_id: int | None = None
        self.controller_epoch = -1
        self.brokers: dict[int, LiveBroker] = {}
        self._partitions: dict[str, dict[int, PartitionMetadata]] = {}
        self._topic_ids: dict[str, uuid.UUID] = {}
        self._topic_names: dict[uuid.UUID, str] = {}
        self._fenced_self: LiveBroker | None = None
        # Until the controller's first UpdateMetadata this view knows no broker, not even this one.
        self.initialized = False
        self._first_update_waiters: list[Callable[[], None]] = []

    # ------------------------------------------------------------ updates
    def set_self_fenced(self, fenced: bool) -> None:
        """This broker's ZooKeeper session expired: the controller no longer counts it live, so
        neither does this view (clients then ask the others for metadata) until the session
        resumes or the controller's next UpdateMetadata says what is live."""
        if fenced:
            entry = self.brokers.pop(self.node_id, None)
            self._fenced_self = entry or self._fenced_self
        elif self._fenced_self is not None:
            self.brokers[self.node_id] = self._fenced_self
            self._fenced_self = None

    def update(self, u: MetadataUpdate) -> list[TopicPartition]:
        """Apply an UpdateMetadata; returns the partitions it deleted."""
        self._fenced_self = None
        first = not self.initialized
        self.initialized = True
        self.controller_id = u.controller_id if u.controller_id >= 0 else None
        self.controller_epoch = u.controller_epoch
        self.brokers = {b.broker_id: b for b in u.live_brokers}
        for name, tid in u.topic_ids.items():
            if tid.int != 0:
                self._topic_ids[name] = tid
                self._topic_names[tid] = name
        deleted = []
        for tp, state in u.partitions.items():
            if state.leader == LEADER_DURING_DELETE:
                parts = self._partitions.get(tp.topic)
                if parts is not None and parts.pop(tp.partition, None) is not None:
                    deleted.append(tp)
                if parts is not None and not parts:
                    del self._partitions[tp.topic]
                    tid = self._topic_ids.pop(tp.topic, None)
                    if tid is not None:
                        self._topic_names.pop(tid, None)
                continue
            self._partitions.setdefault(tp.topic, {})[tp.partition] = state
        if first:
            waiters, self._first_update_waiters = self._first_update_waiters, []
            for fn in waiters:
                fn()
        return deleted

    def on_first_update(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` once the first UpdateMetadata is applied (at once if it was)."""
        if self.initialized:
            fn()
        else:
            self._first_update_waiters.append(fn)

    # ------------------------------------------------------------ queries
    def alive_broker(self, broker_id: int) -> LiveBroker | None:
        return self.brokers.get(broker_id)

    def alive_brokers(self) -> list[LiveBroker]:
        return [self.brokers[i] for i in sorted(self.brokers)]

    def topic_names(self) -> list[str]:
        return list(self._partitions)

    def contains_topic(self, name: str) -> bool:
        return name in self._partitions

    def topic_id(self, name: str) -> uuid.UUID | None:
        return self._topic_ids.get(name)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self._topic_names.get(topic_id)

    def partitions(self, topic: str) -> dict[int, PartitionMetadata]:
        """The topic's partitions by index (empty when unknown)."""
        return dict(sorted(self._partitions.get(topic, {}).items()))

    def num_partitions(self, topic: str) -> int | None:
        parts = self._partitions.get(topic)
        return len(parts) if parts is not None else None

    def partition_racks(self, topic: str, partition: int) -> frozenset[str]:
        """Racks of the live brokers holding a replica of the partition."""
        state = self._partitions.get(topic, {}).get(partition)
        if state is None:
            return frozenset()
        brokers = (self.brokers.get(r) for r in state.replicas)
        return frozenset(b.rack for b in brokers if b is not None and b.rack)

    def partition(self, tp: TopicPartition) -> PartitionMetadata | None:
        return self._partitions.get(tp.topic, {}).get(tp.partition)

    def leader_and_endpoint(self, tp: TopicPartition, listener: str) -> tuple[int, int, BrokerEndpoint | None]:
        """The KIP-951 hint for ``tp``: (leader id, leader epoch, its endpoint on ``listener``);
        (-1, -1, None) when unknown."""
        state = self.partition(tp)
        if state is None or state.leader < 0:
            return NO_LEADER, -1, None
        broker = self.brokers.get(state.leader)
        return state.leader, state.leader_epoch, broker.endpoint(listener) if broker is not None else None
