"""``ShareCoordinator``: the share partitions' durable state in ``__share_group_state`` (Kafka's
ShareCoordinatorService over one ``ShareCoordinatorShard`` per partition of the topic).

A share partition (group, topic id, partition) belongs to the coordinator partition hashed
from ``"group:topicId:partition"``; the broker leading that partition serves its
Read/Write/Initialize/DeleteShareGroupState and ReadShareGroupStateSummary. Writes append
records through the ``ReplicaManager`` (acks=all, ``share.coordinator.write.timeout.ms``) and
change the shard only once acknowledged; a partition is replayed into its shard when this
broker becomes its leader, and answers COORDINATOR_LOAD_IN_PROGRESS until then.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from rivulet.common.cluster import ConfigValues, InternalTopicCreator, MetadataView, NodeEndpoint
from rivulet.common.placement import partition_for
from rivulet.common.time import Clock
from rivulet.common.types import TopicPartition
from rivulet.protocol import records as rec
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.replication.internal_log import InternalTopicCoordinator, coordinator_append_error, replay_log
from rivulet.replication.replica_manager import ReplicaManager
from rivulet.storage.config import segment_size_configs

from .coordinator_shard import ShareCoordinatorShard, StateRecord
from .partition import SharePartitionSnapshot
from .persister import SharePartitionKey, ShareStateSummary

__all__ = ["SHARE_GROUP_STATE_TOPIC_NAME", "ShareCoordinator", "ShareCoordinatorConfig"]

log = logging.getLogger(__name__)

SHARE_GROUP_STATE_TOPIC_NAME = "__share_group_state"


@dataclass(frozen=True, slots=True)
class ShareCoordinatorConfig:
    """``share.coordinator.*`` (Kafka's ShareCoordinatorConfig names and defaults)."""

    num_partitions: int = 50
    replication_factor: int = 3
    min_isr: int = 2
    segment_bytes: int = 100 * 1024 * 1024
    snapshot_update_records_per_snapshot: int = 500
    write_timeout_ms: int = 5000
    load_buffer_size: int = 5 * 1024 * 1024
    compression_codec: int = 0

    @classmethod
    def from_config(cls, config: ConfigValues) -> ShareCoordinatorConfig:
        def get(name: str, default: Any) -> Any:
            try:
                value = config[f"share.coordinator.{name}"]
            except KeyError:
                return default
            return default if value is None else value
        d = cls()
        return cls(num_partitions=get("state.topic.num.partitions", d.num_partitions),
                   replication_factor=get("state.topic.replication.factor", d.replication_factor),
                   min_isr=get("state.topic.min.isr", d.min_isr),
                   segment_bytes=get("state.topic.segment.bytes", d.segment_bytes),
                   snapshot_update_records_per_snapshot=get("snapshot.update.records.per.snapshot",
                                                            d.snapshot_update_records_per_snapshot),
                   write_timeout_ms=get("write.timeout.ms", d.write_timeout_ms),
                   load_buffer_size=get("load.buffer.size", d.load_buffer_size),
                   compression_codec=int(get("state.topic.compression.codec", d.compression_codec)))


class ShareCoordinator(InternalTopicCoordinator):
    """Serves the share-partition states of the ``__share_group_state`` partitions this broker
    leads. Its coroutines are the ``SharePersister`` contract, answered locally; they raise
    NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS or COORDINATOR_NOT_AVAILABLE when the key
    is not (yet) served here."""

    def __init__(self, config: ShareCoordinatorConfig, replica_manager: ReplicaManager,
                 metadata: MetadataView, topic_creator: InternalTopicCreator, node: NodeEndpoint,
                 clock: Clock) -> None:
        super().__init__(replica_manager, metadata, topic_creator, node, clock)
        self.config = config
        self.shards: dict[int, ShareCoordinatorShard] = {}
        self.loading: dict[int, asyncio.Task] = {}
        self._active = False

    # -- lifecycle -------------------------------------------------------------------------

    def state_topic_configs(self, replication_factor: int = 1) -> dict[str, str]:
        """The configs ``__share_group_state`` is created with (one replica on a single node,
        so a min.isr above it would refuse every write)."""
        return {"cleanup.policy": "compact", **segment_size_configs(self.config.segment_bytes),
                "compression.type": "producer",
                "min.insync.replicas": str(min(self.config.min_isr, replication_factor))}

    def internal_topic(self) -> tuple[str, int, dict[str, str]]:
        return SHARE_GROUP_STATE_TOPIC_NAME, self.config.num_partitions, self.state_topic_configs()

    def startup(self, *, lead_all: bool = True) -> None:
        """``lead_all``: single-node mode, this broker leads every partition of the topic; it is
        made when first needed and, when there already, loaded now. In cluster mode partitions
        come through ``on_become_leader``."""
        self._active = True
        self._start_leading(lead_all)
        self._lead_existing_topic()

    def shutdown(self) -> None:
        self._active = False
        self._stop_creation()
        for task in self.loading.values():
            task.cancel()
        self.loading.clear()
        self.shards.clear()

    @property
    def active(self) -> bool:
        return self._active

    def _lead_every_partition(self, num_partitions: int) -> None:
        for p in range(num_partitions):
            self.on_become_leader(p)

    async def _topic_ready(self) -> None:
        """Wait for the topic's creation when this call is its first use (single node)."""
        if not self._active or self._topic_led():
            return
        try:
            await asyncio.shield(self._create_topic())
        except Exception as e:
            raise ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"creating {SHARE_GROUP_STATE_TOPIC_NAME} "
                           f"failed: {e}") from e

    @property
    def num_partitions(self) -> int:
        topic = self.metadata.get(SHARE_GROUP_STATE_TOPIC_NAME)
        return topic.num_partitions if topic is not None else self.config.num_partitions

    def partition_for(self, coordinator_key: str) -> int:
        return partition_for(coordinator_key, self.num_partitions)

    def on_become_leader(self, partition: int) -> None:
        """This broker now leads ``__share_group_state-<partition>``: replay it into a shard."""
        if partition in self.shards or partition in self.loading:
            return
        tp = TopicPartition(SHARE_GROUP_STATE_TOPIC_NAME, partition)
        p = self.replica_manager.partitions.get(tp)
        shard = ShareCoordinatorShard(self.config.snapshot_update_records_per_snapshot)
        if p is None or p.log.log_end_offset == p.log.log_start_offset:
            self.shards[partition] = shard  # nothing to replay
            return

        def apply(r: rec.Record) -> None:
            if r.key is None:
                return
            try:
                shard.replay(bytes(r.key), None if r.value is None else bytes(r.value))
            except Exception:
                log.warning("skipping an undecodable record at offset %d of %s", r.offset, tp, exc_info=True)

        async def load() -> None:
            try:
                await replay_log(p.log, apply, buffer_size=self.config.load_buffer_size,
                                 stopped=lambda: not self._active)
                if self.loading.get(partition) is task:
                    self.shards[partition] = shard
                    log.info("loaded %d share partition state(s) from %s", len(shard.states), tp)
            finally:
                if self.loading.get(partition) is task:
                    del self.loading[partition]

        task = self.loading[partition] = asyncio.ensure_future(load())

    def on_resign(self, partition: int) -> None:
        """Leadership of ``__share_group_state-<partition>`` moved away: forget its states."""
        task = self.loading.pop(partition, None)
        if task is not None:
            task.cancel()
        self.shards.pop(partition, None)

    async def wait_loaded(self) -> None:
        while self.loading:
            await asyncio.wait(list(self.loading.values()))

    def find_coordinator(self, coordinator_key: str) -> tuple[ErrorCode, int, str, int]:
        """FindCoordinator key type 2 in single-node mode: this broker, once the key's partition
        is loaded; COORDINATOR_NOT_AVAILABLE while the topic is being made (the first call starts that)."""
        if not self._active or not self._topic_led():
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        try:
            self._shard(coordinator_key)
        except ApiError as e:
            if e.code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                return e.code, -1, "", -1
        return ErrorCode.NONE, self.node.node_id, self.node.host, self.node.port

    # -- the SharePersister contract ---------------------------------------------------------

    def _shard(self, coordinator_key: str) -> tuple[int, ShareCoordinatorShard]:
        if not self._active:
            raise ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if not self._topic_led():
            raise ApiError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        partition = self.partition_for(coordinator_key)
        shard = self.shards.get(partition)
        if shard is not None:
            return partition, shard
        if partition in self.loading:
            raise ApiError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        raise ApiError(ErrorCode.NOT_COORDINATOR)

    async def _append(self, partition: int, records: list[StateRecord]) -> None:
        """Append the records (acks=all) and replay them into the shard once acknowledged."""
        if not records:
            return
        tp = TopicPartition(SHARE_GROUP_STATE_TOPIC_NAME, partition)
        now = self.clock.milliseconds()
        batch = rec.encode_batch([rec.Record(i, now, k, v, []) for i, (k, v) in enumerate(records)],
                                 compression=self.config.compression_codec)
        try:
            result = self.replica_manager.append_records({tp: batch}, required_acks=-1,
                                                         timeout_ms=self.config.write_timeout_ms, internal=True)
            if isinstance(result, asyncio.Future):
                result = await result
        except ApiError as e:
            raise ApiError(coordinator_append_error(e.code)) from e
        error = result[tp].error
        if error != ErrorCode.NONE:
            raise ApiError(coordinator_append_error(error))
        shard = self.shards.get(partition)
        if shard is not None:
            for k, v in records:
                shard.replay(k, v)

    async def read_state(self, key: SharePartitionKey, leader_epoch: int = -1) -> SharePartitionSnapshot | None:
        await self._topic_ready()
        _, shard = self._shard(key.coordinator_key())
        state = shard.read(key, leader_epoch)
        return None if state is None else state.snapshot()

    async def write_state(self, key: SharePartitionKey, snapshot: SharePartitionSnapshot, *,
                          leader_epoch: int = -1, delivery_complete_count: int = -1) -> None:
        await self._topic_ready()
        partition, shard = self._shard(key.coordinator_key())
        record = shard.write(key, state_epoch=snapshot.state_epoch, leader_epoch=leader_epoch,
                             start_offset=snapshot.start_offset, batches=snapshot.state_batches,
                             now_ms=self.clock.milliseconds())
        await self._append(partition, [record])

    async def initialize_state(self, key: SharePartitionKey, start_offset: int, state_epoch: int | None = None
                               ) -> None:
        await self._topic_ready()
        partition, shard = self._shard(key.coordinator_key())
        if state_epoch is None:
            current = shard.states.get(key)
            state_epoch = 0 if current is None else current.state_epoch + 1
        record = shard.initialize(key, state_epoch=state_epoch, start_offset=start_offset,
                                  now_ms=self.clock.milliseconds())
        await self._append(partition, [record])

    async def read_summary(self, key: SharePartitionKey, leader_epoch: int = -1) -> ShareStateSummary | None:
        await self._topic_ready()
        _, shard = self._shard(key.coordinator_key())
        return shard.summary(key, leader_epoch)

    async def delete_state(self, key: SharePartitionKey) -> None:
        await self._topic_ready()
        partition, shard = self._shard(key.coordinator_key())
        await self._append(partition, shard.delete(key))
