"""The topics a streams group's topology needs (repartition and changelog topics), created as
Kafka's group coordinator has them created, by a CreateTopics of its own: on one node with their
logs, in a cluster by the controller (ZooKeeper), with replicas on the live brokers."""

from __future__ import annotations

from rivulet.server.topics import TopicManager
from rivulet.server.zk_cluster import ZkClusterMember


class GroupTopicCreation:
    """``GroupTopicCreator`` for a broker: ``cluster`` is None on one node."""

    def __init__(self, topics: TopicManager, cluster: ZkClusterMember | None, default_replication_factor: int) -> None:
        self.topics = topics
        self.cluster = cluster
        self.default_replication_factor = default_replication_factor

    async def create_group_topic(self, name: str, num_partitions: int, replication_factor: int,
                                 configs: dict[str, str]) -> None:
        rf = replication_factor if replication_factor > 0 else self.default_replication_factor
        if self.cluster is None:
            await self.topics.create_topic_off_loop(name, num_partitions, rf, configs)
            return
        self.topics.validate_new_topic(name, num_partitions, rf, configs)
        await self.cluster.refresh_brokers(watch=False)  # placement over every broker registered by now
        await self.cluster.create_topic(name, self.cluster.assign_replicas(num_partitions, rf), configs)
