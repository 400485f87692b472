"""TxnOffsetCommit (API 28): the request side, in front of the group coordinator.

Kafka splits it the same way: KafkaApis checks the partitions and maps errors for old
clients; GroupCoordinator.handleTxnCommitOffsets validates the member and writes the offsets
as a transactional batch (the producer's id and epoch) to ``__consumer_offsets``, keeping them
pending until the transaction's marker lands there. The group coordinator needs:

- ``handle_txn_commit_offsets(group_id, producer_id, producer_epoch, member_id,
  group_instance_id, generation_id, offsets: dict[TopicPartitionKey, OffsetAndMetadata],
  callback: Callable[[dict[TopicPartitionKey, ErrorCode]], None]) -> None``
- ``on_transaction_completed(producer_id, partitions: list[int], commit: bool) -> None``,
  called by the marker writer once COMMIT/ABORT is durable in those ``__consumer_offsets``
  partitions.

This handler is registered only when the group coordinator offers the first method and has
not registered API 28 itself.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages import txn_offset_commit_response as tocr

API_KEY = 28
VERSIONS = (0, 3)


class TxnOffsetCommitApi:
    def __init__(self, broker: Any) -> None:
        self.broker = broker

    @staticmethod
    def available(broker: Any) -> bool:
        gc = getattr(broker, "group_coordinator", None)
        return gc is not None and hasattr(gc, "handle_txn_commit_offsets")

    def register(self, apis: Any) -> None:
        if API_KEY not in apis.handlers and self.available(self.broker):
            apis.register(API_KEY, VERSIONS, self.handle)

    def handle(self, header, req, conn) -> Any:
        from rivulet.coordinator.group_metadata import OffsetAndMetadata, TopicPartitionKey, wall_clock_ms

        v = header.api_version
        b = self.broker
        errors: dict[Any, ErrorCode] = {}
        offsets: dict[Any, Any] = {}
        now = wall_clock_ms()
        for t in req.topics:
            info = b.metadata.get(t.name)
            for p in t.partitions:
                key = TopicPartitionKey(t.name, p.partition_index)
                if info is None or not 0 <= p.partition_index < info.num_partitions:
                    errors[key] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                epoch = p.committed_leader_epoch if v >= 2 else -1
                offsets[key] = OffsetAndMetadata(
                    committed_offset=p.committed_offset, leader_epoch=None if epoch < 0 else epoch,
                    metadata=p.committed_metadata or "", commit_timestamp=now, expire_timestamp=None)

        def response(results: dict[Any, ErrorCode]) -> tocr.TxnOffsetCommitResponse:
            merged = {**results, **errors}
            by_topic: dict[str, list[tocr.TxnOffsetCommitResponsePartition]] = {}
            for key, err in merged.items():
                if v < 2 and err == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                    err = ErrorCode.COORDINATOR_NOT_AVAILABLE  # clients before 2.3 crash on the loading error
                by_topic.setdefault(key.topic, []).append(
                    tocr.TxnOffsetCommitResponsePartition(partition_index=key.partition, error_code=err))
            return tocr.TxnOffsetCommitResponse(throttle_time_ms=0, topics=[
                tocr.TxnOffsetCommitResponseTopic(name=n, partitions=ps) for n, ps in by_topic.items()])

        if not offsets:
            return response({})
        fut = asyncio.get_running_loop().create_future()

        def done(results: dict[Any, ErrorCode]) -> None:
            if not fut.done():
                fut.set_result(response(results))

        b.group_coordinator.handle_txn_commit_offsets(
            req.group_id, req.producer_id, req.producer_epoch, req.member_id if v >= 3 else "",
            req.group_instance_id if v >= 3 else None, req.generation_id if v >= 3 else -1, offsets, done)
        return fut.result() if fut.done() else fut
