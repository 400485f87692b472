"""Each partition's latest offset for the share-group lag (DescribeShareGroupOffsets), as
Kafka's group coordinator gets it through its PartitionMetadataClient: the high watermark of a
partition this broker leads, else its leader's answer to ListOffsets (latest) over the
inter-broker listener (cluster mode)."""

from __future__ import annotations

import logging

from rivulet.common.types import TopicPartition
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages import list_offsets_request as loq
from rivulet.replication.link import PLAINTEXT_CONNECTOR, BrokerConnector, BrokerLink
from rivulet.replication.metadata_cache import MetadataCache
from rivulet.replication.replica_manager import ReplicaManager

__all__ = ["PartitionEnds"]

log = logging.getLogger(__name__)

LATEST_TIMESTAMP = -1


class PartitionEnds:
    def __init__(self, replica_manager: ReplicaManager, *, node_id: int = -1,
                 metadata_cache: MetadataCache | None = None, listener: str = "", request_timeout_ms: int = 30000,
                 connector: BrokerConnector = PLAINTEXT_CONNECTOR) -> None:
        self.replica_manager = replica_manager
        self.node_id = node_id
        self.metadata_cache = metadata_cache
        self.listener = listener
        self._link = BrokerLink(f"broker-{node_id}-partition-ends", request_timeout_ms, connector)

    async def latest_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The latest offset of each partition whose leader answers; the others are left out."""
        out: dict[TopicPartition, int] = {}
        elsewhere: dict[tuple[int, str, int], list[TopicPartition]] = {}
        for tp in tps:
            p = self.replica_manager.partitions.get(tp)
            if p is not None and p.is_leader and not p.deleted:
                out[tp] = p.high_watermark
            elif self.metadata_cache is not None:
                leader, _epoch, endpoint = self.metadata_cache.leader_and_endpoint(tp, self.listener)
                if endpoint is not None and leader != self.node_id:
                    elsewhere.setdefault((leader, endpoint.host, endpoint.port), []).append(tp)
        for node, asked in elsewhere.items():
            out.update(await self._ask(node, asked))
        return out

    async def _ask(self, node: tuple[int, str, int], tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        req = loq.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
            loq.ListOffsetsTopic(name=t, partitions=[
                loq.ListOffsetsPartition(partition_index=p, timestamp=LATEST_TIMESTAMP) for p in ps])
            for t, ps in by_topic.items()])
        try:
            conn = await self._link.connection(*node)
            resp = await conn.send(req, conn.version_for(req.API_KEY))
        except (ConnectionError, OSError, TimeoutError) as e:
            log.info("ListOffsets to broker %d for the share-group lag failed: %s", node[0], e)
            await self._link.drop()
            return {}
        return {TopicPartition(t.name, p.partition_index): p.offset for t in resp.topics for p in t.partitions
                if p.error_code == ErrorCode.NONE}

    async def close(self) -> None:
        await self._link.drop()
