"""Transaction markers for partitions led by other brokers (cluster mode): Kafka's
TransactionMarkerChannelManager sends WriteTxnMarkers to each partition's leader, found in the
metadata cache. The leader appends the COMMIT/ABORT batch and, on ``__consumer_offsets``,
completes the transaction's offsets in its own group coordinator."""

from __future__ import annotations

import asyncio
import logging

from rivulet.common.logs import RateLimitFilter
from rivulet.common.types import TopicPartition
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages import write_txn_markers_request as wtq
from rivulet.replication.link import LINK_ERRORS, BrokerLinks

log = logging.getLogger(__name__)
# A broker that stays unreachable is logged once per interval while the markers are retried.
log.addFilter(RateLimitFilter(level=logging.INFO))


class InterBrokerMarkerChannel:
    def __init__(self, links: BrokerLinks) -> None:
        """``links``: to the partitions' leaders, found in its metadata cache."""
        self.links = links
        self._locks: dict[int, asyncio.Lock] = {}

    def partition_exists(self, tp: TopicPartition) -> bool:
        return self.links.cache is not None and self.links.cache.partition(tp) is not None

    def leader_of(self, tp: TopicPartition) -> int:
        """The partition's leader, -1 when none is known."""
        return self.links.leader(tp)[0]

    async def write(self, broker_id: int, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                    commit: bool, tps: list[TopicPartition], transaction_version: int
                    ) -> dict[TopicPartition, ErrorCode]:
        """WriteTxnMarkers to ``broker_id``; a failure to reach it answers every partition with
        a retriable error. ``transaction_version`` goes in v2 (KIP-1228), which the leader checks
        the marker's epoch by."""
        if self.links.endpoint(broker_id) is None:
            return {tp: ErrorCode.NOT_LEADER_OR_FOLLOWER for tp in tps}
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        req = wtq.WriteTxnMarkersRequest(markers=[wtq.WritableTxnMarker(
            producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=commit,
            coordinator_epoch=coordinator_epoch, transaction_version=transaction_version,
            topics=[wtq.WritableTxnMarkerTopic(name=t, partition_indexes=ps) for t, ps in by_topic.items()])])
        # One request at a time per broker, as Kafka's channel: markers of one transaction stay in order.
        async with self._locks.setdefault(broker_id, asyncio.Lock()):
            try:
                resp = await self.links.send(broker_id, req, 1)
            except LINK_ERRORS as e:
                log.info("WriteTxnMarkers to broker %d failed: %s; retrying", broker_id, e,
                         extra={"kind": f"failed WriteTxnMarkers to broker {broker_id}"})
                return {tp: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS for tp in tps}
        out = {tp: ErrorCode.UNKNOWN_SERVER_ERROR for tp in tps}
        for m in resp.markers:
            for t in m.topics:
                for p in t.partitions:
                    out[TopicPartition(t.name, p.partition_index)] = ErrorCode(p.error_code)
        return out

    async def close(self) -> None:
        await self.links.close()
