"""Each partition's latest offset for the share-group lag (DescribeShareGroupOffsets), as
Kafka's group coordinator gets it through its PartitionMetadataClient: the high watermark of a
partition this broker leads, else its leader's answer to ListOffsets (latest) over the
inter-broker listener (cluster mode)."""

from __future__ import annotations

import logging

from rivulet.common.types import TopicPartition
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages import list_offsets_request as loq
from rivulet.replication.link import BrokerLinks
from rivulet.replication.replica_manager import ReplicaManager

__all__ = ["PartitionEnds"]

log = logging.getLogger(__name__)

LATEST_TIMESTAMP = -1


class PartitionEnds:
    def __init__(self, replica_manager: ReplicaManager, links: BrokerLinks) -> None:
        """``links``: to the leaders of partitions this broker does not lead (cluster mode)."""
        self.replica_manager = replica_manager
        self.links = links

    async def latest_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The latest offset of each partition whose leader answers; the others are left out."""
        out: dict[TopicPartition, int] = {}
        elsewhere: dict[int, list[TopicPartition]] = {}
        for tp in tps:
            p = self.replica_manager.partitions.get(tp)
            if p is not None and p.is_leader and not p.deleted:
                out[tp] = p.high_watermark
            else:
                leader, endpoint = self.links.leader(tp)
                if endpoint is not None and leader != self.links.node_id:
                    elsewhere.setdefault(leader, []).append(tp)
        for leader, asked in elsewhere.items():
            out.update(await self._ask(leader, asked))
        return out

    async def _ask(self, leader: int, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        req = loq.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
            loq.ListOffsetsTopic(name=t, partitions=[
                loq.ListOffsetsPartition(partition_index=p, timestamp=LATEST_TIMESTAMP) for p in ps])
            for t, ps in by_topic.items()])
        try:
            resp = await self.links.send(leader, req)
        except (ConnectionError, OSError, TimeoutError) as e:
            log.info("ListOffsets to broker %d for the share-group lag failed: %s", leader, e)
            return {}
        return {TopicPartition(t.name, p.partition_index): p.offset for t in resp.topics for p in t.partitions
                if p.error_code == ErrorCode.NONE}

    async def close(self) -> None:
        await self.links.close()
