"""ElectLeaders and the partition reassignment APIs on a single node, answered as a one-node
Kafka 4.3's controller answers them (its ReplicationControlManager): the node is the only,
hence preferred, replica of every partition, so no election is ever needed, no reassignment
is ever under way, and the only reassignment there can be keeps a partition where it is. It
describes the quorum as a one-node KRaft cluster's: itself the leader and only voter."""

from __future__ import annotations

from rivulet.common.cluster import NodeEndpoint
from rivulet.common.time import Clock
from rivulet.common.types import TopicPartition
from rivulet.controller.context import QuorumDescription, ReplicaProgress
from rivulet.controller.controller import PREFERRED
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.replication.replica_manager import ReplicaManager
from rivulet.server.handlers.controller import Outcome
from rivulet.server.topics import TopicManager, check_manual_assignment

NOT_NEEDED: Outcome = (ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition.")


class OneNodePartitionAdmin:
    """The ``PartitionAdmin`` (server/handlers/controller.py) of a broker without a cluster."""

    def __init__(self, topics: TopicManager, replica_manager: ReplicaManager, node: NodeEndpoint, listener: str,
                 clock: Clock) -> None:
        """``listener``: the name of the listener ``node``'s address is on."""
        self.topics = topics
        self.replica_manager = replica_manager
        self.node = node
        self.node_id = node.node_id
        self.listener = listener
        self.clock = clock

    @property
    def is_active(self) -> bool:
        return True  # the one node is its own controller

    def describe_quorum(self) -> QuorumDescription:
        """No election was ever held (epoch 0); the metadata offset is the count of changes the
        node's metadata file has recorded (``MetadataStore.changes``)."""
        now = self.clock.milliseconds()
        offset = self.topics.metadata.changes
        return QuorumDescription(self.node_id, 0, offset, [ReplicaProgress(self.node_id, offset, now, now)], [],
                                 {self.node_id: [(self.listener, self.node.host, self.node.port)]})

    def _num_partitions(self, topic: str) -> int | None:
        info = self.topics.get(topic)
        return info.num_partitions if info is not None else None

    def _offline(self, tp: TopicPartition) -> bool:
        """The only replica's log dir failed: the partition has no leader to keep."""
        p = self.replica_manager.partitions.get(tp)
        return p.log.offline if p is not None else tp in self.replica_manager.offline_partitions

    async def elect_leaders(self, election_type: int,
                            partitions: list[TopicPartition] | None) -> dict[TopicPartition, Outcome]:
        if partitions is None:
            partitions = [TopicPartition(t, i) for t in self.topics.topic_names()
                          for i in range(self._num_partitions(t) or 0)]
        out: dict[TopicPartition, Outcome] = {}
        for tp in partitions:
            count = self._num_partitions(tp.topic)
            if count is None:
                out[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {tp.topic}")
            elif not 0 <= tp.partition < count:
                out[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {tp.topic}-{tp.partition}")
            elif self._offline(tp):
                # no other replica to elect, cleanly or not
                out[tp] = (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, "The preferred leader was not available.") \
                    if election_type == PREFERRED else \
                    (ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, "Eligible topic partition leaders are not available.")
            else:
                out[tp] = NOT_NEEDED
        return out

    async def alter_reassignments(self, wanted: dict[TopicPartition, list[int] | None],
                                  allow_rf_change: bool = True) -> dict[TopicPartition, Outcome]:
        return {tp: self._reassignment(tp, target) for tp, target in wanted.items()}

    def _reassignment(self, tp: TopicPartition, target: list[int] | None) -> Outcome:
        """Kafka's checks, in its order; a valid target can only be this node, where the
        partition already is: done at once, nothing to move (and the replication factor, 1,
        unchanged, whatever ``allow_rf_change`` says)."""
        count = self._num_partitions(tp.topic)
        if count is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {tp.topic}."
        if not 0 <= tp.partition < count:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {tp.topic}:{tp.partition}."
        if target is None:
            return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None  # a cancel: nothing is under way
        try:
            check_manual_assignment(target, (self.node_id,))
        except ApiError as e:
            return e.code, e.message
        return ErrorCode.NONE, None

    async def list_reassignments(self, tps: list[TopicPartition] | None
                                 ) -> dict[TopicPartition, tuple[list[int], list[int], list[int]]]:
        return {}  # a reassignment here completes as it is made
