"""``CoordinatorSharePersister``: the broker's ``SharePersister`` (Kafka's DefaultStatePersister).

Each call goes to the share coordinator of its key: the local ``ShareCoordinator`` when this
broker leads the key's ``__share_group_state`` partition (always, on a single node), else that
partition's leader over the inter-broker link, with the Read/Write/Initialize/Delete
ShareGroupState and ReadShareGroupStateSummary requests. While the coordinator is loading,
moving or not there yet (COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR,
COORDINATOR_NOT_AVAILABLE, a broken connection) the call is retried with backoff, up to the
request timeout, as Kafka's persister retries it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable, TypeVar

from rivulet.common.types import TopicPartition
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.protocol.messages import (
    delete_share_group_state_request as dsq,
    initialize_share_group_state_request as isq,
    find_coordinator_request as fcq,
    read_share_group_state_request as rsq,
    read_share_group_state_summary_request as rssq,
    write_share_group_state_request as wsq,
)
from rivulet.protocol.schema import Struct
from rivulet.replication.link import LINK_ERRORS, BrokerLinks

from .coordinator import SHARE_GROUP_STATE_TOPIC_NAME, ShareCoordinator
from .partition import SharePartitionSnapshot
from .persister import SharePartitionKey, ShareStateSummary, snapshot_of_read

__all__ = ["CoordinatorSharePersister"]

log = logging.getLogger(__name__)

T = TypeVar("T")
# The requests forwarded to the coordinator broker, each about one partition.
_StateRequest = (rsq.ReadShareGroupStateRequest | wsq.WriteShareGroupStateRequest
                 | isq.InitializeShareGroupStateRequest | rssq.ReadShareGroupStateSummaryRequest
                 | dsq.DeleteShareGroupStateRequest)

SHARE_KEY_TYPE = 2  # FindCoordinator's key type for a share partition

_RETRIABLE = frozenset({ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR,
                        ErrorCode.COORDINATOR_NOT_AVAILABLE})


class CoordinatorSharePersister:
    def __init__(self, coordinator: ShareCoordinator, links: BrokerLinks, *, retry_backoff_ms: int = 100) -> None:
        """``links`` (with a metadata cache in cluster mode): to each ``__share_group_state``
        partition's leader."""
        self.coordinator = coordinator
        self.links = links
        self.retry_backoff_ms = retry_backoff_ms
        self._lookup: asyncio.Future | None = None

    async def _call(self, key: SharePartitionKey, local: Callable[[], Awaitable[T]],
                    remote: Callable[[int], Awaitable[T]]) -> T:
        deadline = asyncio.get_running_loop().time() + self.links.request_timeout_ms / 1000
        backoff = self.retry_backoff_ms / 1000
        while True:
            try:
                leader = self._coordinator_node(key)
                if leader is None:
                    return await local()
                return await remote(leader)
            except ApiError as e:
                if e.code not in _RETRIABLE or asyncio.get_running_loop().time() + backoff > deadline:
                    raise
                log.debug("share state of %s: %s, retrying", key, e.code.name)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    def _coordinator_node(self, key: SharePartitionKey) -> int | None:
        """None when the local coordinator serves the key, else the broker that does."""
        cache = self.links.cache
        if cache is None:
            return None
        n = cache.num_partitions(SHARE_GROUP_STATE_TOPIC_NAME)
        if not n:
            self._have_topic_created(key)
            raise ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        tp = TopicPartition(SHARE_GROUP_STATE_TOPIC_NAME, self.coordinator.partition_for(key.coordinator_key()))
        leader, endpoint = self.links.leader(tp)
        if leader == self.links.node_id:
            return None
        if endpoint is None:
            raise ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return leader

    def _have_topic_created(self, key: SharePartitionKey) -> None:
        """No ``__share_group_state`` yet: ask for the key's coordinator (FindCoordinator key type
        SHARE, to this broker over the inter-broker listener), which has the controller create the
        topic, as Kafka's persister's lookup does."""
        if self.links.endpoint(self.links.node_id) is None or (self._lookup is not None and not self._lookup.done()):
            return
        request = fcq.FindCoordinatorRequest(key=key.coordinator_key(), key_type=SHARE_KEY_TYPE,
                                             coordinator_keys=[key.coordinator_key()])

        async def ask() -> None:
            try:
                await self.links.send(self.links.node_id, request)
            except LINK_ERRORS as e:
                log.info("looking up the share coordinator failed: %s", e)
        self._lookup = asyncio.ensure_future(ask())

    async def _send(self, node: int, request: _StateRequest) -> Struct:
        """One request to the coordinator broker; its one partition's result."""
        try:
            resp = await self.links.send(node, request)
        except (ConnectionError, OSError, TimeoutError) as e:
            log.info("share state request to broker %d failed: %s", node, e)
            raise ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(e)) from e
        result = resp.results[0].partitions[0]
        if result.error_code != ErrorCode.NONE:
            raise ApiError(ErrorCode(result.error_code), result.error_message)
        return result

    # -- the SharePersister contract ---------------------------------------------------------

    async def read_state(self, key: SharePartitionKey, leader_epoch: int = -1) -> SharePartitionSnapshot | None:
        async def remote(node: int) -> SharePartitionSnapshot | None:
            r = await self._send(node, rsq.ReadShareGroupStateRequest(group_id=key.group_id, topics=[
                rsq.ReadStateData(topic_id=key.topic_id, partitions=[
                    rsq.PartitionData(partition=key.partition, leader_epoch=leader_epoch)])]))
            return snapshot_of_read(r)
        return await self._call(key, lambda: self.coordinator.read_state(key, leader_epoch), remote)

    async def write_state(self, key: SharePartitionKey, snapshot: SharePartitionSnapshot, *,
                          leader_epoch: int = -1, delivery_complete_count: int = -1) -> None:
        async def remote(node: int) -> None:
            await self._send(node, wsq.WriteShareGroupStateRequest(group_id=key.group_id, topics=[
                wsq.WriteStateData(topic_id=key.topic_id, partitions=[wsq.PartitionData(
                    partition=key.partition, state_epoch=snapshot.state_epoch, leader_epoch=leader_epoch,
                    start_offset=snapshot.start_offset, delivery_complete_count=delivery_complete_count,
                    state_batches=[wsq.StateBatch(first_offset=b.first_offset, last_offset=b.last_offset,
                                                  delivery_state=int(b.delivery_state),
                                                  delivery_count=b.delivery_count)
                                   for b in snapshot.state_batches])])]))
        await self._call(key, lambda: self.coordinator.write_state(key, snapshot, leader_epoch=leader_epoch),
                         remote)

    async def initialize_state(self, key: SharePartitionKey, start_offset: int, state_epoch: int | None = None
                               ) -> None:
        async def remote(node: int) -> None:
            epoch = state_epoch
            if epoch is None:
                summary = await self.read_summary(key)
                epoch = 0 if summary is None else summary.state_epoch + 1
            await self._send(node, isq.InitializeShareGroupStateRequest(group_id=key.group_id, topics=[
                isq.InitializeStateData(topic_id=key.topic_id, partitions=[isq.PartitionData(
                    partition=key.partition, state_epoch=epoch, start_offset=start_offset)])]))
        await self._call(key, lambda: self.coordinator.initialize_state(key, start_offset, state_epoch), remote)

    async def read_summary(self, key: SharePartitionKey, leader_epoch: int = -1) -> ShareStateSummary | None:
        async def remote(node: int) -> ShareStateSummary | None:
            r = await self._send(node, rssq.ReadShareGroupStateSummaryRequest(group_id=key.group_id, topics=[
                rssq.ReadStateSummaryData(topic_id=key.topic_id, partitions=[
                    rssq.PartitionData(partition=key.partition, leader_epoch=leader_epoch)])]))
            if r.start_offset == -1 and r.state_epoch == 0:
                return None
            return ShareStateSummary(r.start_offset, r.delivery_complete_count, r.state_epoch, r.leader_epoch)
        return await self._call(key, lambda: self.coordinator.read_summary(key, leader_epoch), remote)

    async def delete_state(self, key: SharePartitionKey) -> None:
        async def remote(node: int) -> None:
            await self._send(node, dsq.DeleteShareGroupStateRequest(group_id=key.group_id, topics=[
                dsq.DeleteStateData(topic_id=key.topic_id, partitions=[dsq.PartitionData(partition=key.partition)])]))
        await self._call(key, lambda: self.coordinator.delete_state(key), remote)

    async def close(self) -> None:
        if self._lookup is not None:
            self._lookup.cancel()
        await self.links.close()
