"""GroupMetadataManager: the group cache and its durable copy in __consumer_offsets.

Writes go through the ReplicaManager like any produce (acks=all, offsets.commit.timeout.ms),
and the cache changes only after the append is acknowledged. Loading replays one partition
of __consumer_offsets into the cache in bounded chunks, yielding to the event loop between
chunks; requests for groups on a partition still loading get COORDINATOR_LOAD_IN_PROGRESS.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping

from rivulet.common.cluster import ConfigValues
from rivulet.common.time import SYSTEM_CLOCK
from rivulet.common.types import TopicPartition
from rivulet.coordinator.consumer_group import ConsumerGroup, Record as ConsumerGroupRecord
from rivulet.coordinator.share_group import ShareGroup, Record as ShareGroupRecord
from rivulet.coordinator.streams_group import Record as StreamsGroupRecord, StreamsGroup
from rivulet.coordinator.group_metadata import (
    DEAD,
    EMPTY,
    CommitRecordMetadataAndOffset,
    GroupMetadata,
    OffsetAndMetadata,
    partition_for,
)
from rivulet.coordinator.offsets_topic import (
    GROUP_METADATA_TOPIC_NAME,
    ConsumerGroupRecordKey,
    ShareGroupRecordKey,
    StreamsGroupRecordKey,
    GroupKey,
    OffsetKey,
    UnknownKey,
    consumer_group_record,
    empty_group_metadata_value,
    group_metadata_key,
    group_metadata_value,
    offset_commit_key,
    offset_commit_value,
    read_consumer_group_value,
    read_group_message_value,
    read_message_key,
    read_offset_message_value,
)
from rivulet.protocol import records as rec
from rivulet.protocol.messages.consumer_group_metadata_key import ConsumerGroupMetadataKey
from rivulet.protocol.messages.share_group_metadata_key import ShareGroupMetadataKey
from rivulet.protocol.messages.streams_group_metadata_key import StreamsGroupMetadataKey
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.replication.replica_manager import ProduceResult, ReplicaManager

log = logging.getLogger(__name__)

INVALID_OFFSET = -1
DEFAULT_LOAD_BUFFER_SIZE = 5 * 1024 * 1024


@dataclass(slots=True)
class PartitionData:
    """One partition of an OffsetFetch answer."""

    offset: int = INVALID_OFFSET
    leader_epoch: int | None = None
    metadata: str = ""
    error: ErrorCode = ErrorCode.NONE


def config_value(config: ConfigValues, name: str, default: Any) -> Any:
    try:
        value = config[name]
    except KeyError:
        return default
    return default if value is None else value


# How a failed append to __consumer_offsets is reported to a group's members and committers, as
# Kafka 4.3's coordinators report a failed write (an error not listed stays as it is): one not
# written in time is COORDINATOR_NOT_AVAILABLE, which clients retry (Kafka 3 said
# REBALANCE_IN_PROGRESS to members and REQUEST_TIMED_OUT to committers; franz-go ends a
# transaction on the latter), and one too large UNKNOWN_SERVER_ERROR (Kafka 3 answered a commit
# INVALID_COMMIT_OFFSET_SIZE). A TxnOffsetCommit whose KIP-890 check lost its link to the
# transaction coordinator (NETWORK_EXCEPTION) is COORDINATOR_LOAD_IN_PROGRESS, which older
# clients retry without looking the coordinator up again.
_WRITE_ERRORS = {
    ErrorCode.NETWORK_EXCEPTION: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.UNKNOWN_SERVER_ERROR,
}


def convert_write_error(error: ErrorCode) -> ErrorCode:
    """How a failed append of group records or offset commits is reported to the client."""
    return _WRITE_ERRORS.get(error, error)


def java_string_length(s: str) -> int:
    """String.length() in Java: UTF-16 code units (offset.metadata.max.bytes counts these)."""
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


def _replay_modern(key: ConsumerGroupRecordKey | ShareGroupRecordKey | StreamsGroupRecordKey, data: bytes | None,
                   loaded: dict, metadata_key: type,
                   group_type: Callable[[str], ConsumerGroup | ShareGroup | StreamsGroup]) -> None:
    """Replay a consumer or share group record into the groups loaded so far; the group
    record's tombstone means the group was deleted (None until it is made again)."""
    gid = key.key.group_id
    value = read_consumer_group_value(key, data)
    if isinstance(key.key, metadata_key) and value is None:
        loaded[gid] = None
        return
    group = loaded.get(gid)
    if group is None:
        group = loaded[gid] = group_type(gid)
    group.replay(key.key, value)


class GroupMetadataManager:
    def __init__(self, config: ConfigValues, replica_manager: ReplicaManager, *,
                 clock: Callable[[], int] = SYSTEM_CLOCK.milliseconds, num_partitions: int | None = None) -> None:
        self.config = config
        self.replica_manager = replica_manager
        self.clock = clock
        self.num_partitions = num_partitions or config["offsets.topic.num.partitions"]
        self.max_metadata_size: int = config["offset.metadata.max.bytes"]
        self.commit_timeout_ms: int = config["offsets.commit.timeout.ms"]
        self.retention_ms: int = config["offsets.retention.minutes"] * 60_000
        self.compression: int = int(config_value(config, "offsets.topic.compression.codec", 0))
        self.load_buffer_size: int = int(config_value(config, "offsets.load.buffer.size", DEFAULT_LOAD_BUFFER_SIZE))
        self.groups: dict[str, GroupMetadata] = {}
        self.owned_partitions: set[int] = set()
        self.loading_partitions: set[int] = set()
        # producer id -> groups with transactional offsets awaiting that producer's marker
        self.open_groups_for_producer: dict[int, set[str]] = {}
        self.shutting_down = False

    # ------------------------------------------------------------ placement
    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def is_partition_owned(self, partition: int) -> bool:
        return partition in self.owned_partitions

    def is_group_local(self, group_id: str) -> bool:
        return self.partition_for(group_id) in self.owned_partitions

    def is_group_loading(self, group_id: str) -> bool:
        return self.partition_for(group_id) in self.loading_partitions

    def is_loading(self) -> bool:
        return bool(self.loading_partitions)

    # ------------------------------------------------------------ the cache
    def current_groups(self) -> list[GroupMetadata]:
        return list(self.groups.values())

    def get_group(self, group_id: str) -> GroupMetadata | None:
        return self.groups.get(group_id)

    def add_group(self, group: GroupMetadata) -> GroupMetadata:
        """Cache the group unless one with its id is cached already; returns the cached one."""
        return self.groups.setdefault(group.group_id, group)

    def remove_group(self, group: GroupMetadata) -> None:
        """Forget ``group`` if it is the one cached under its id."""
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]

    def get_or_maybe_create_group(self, group_id: str, create: bool) -> GroupMetadata | None:
        if create:
            return self.add_group(GroupMetadata(group_id, EMPTY, self.clock))
        return self.groups.get(group_id)

    def group_not_exists(self, group_id: str) -> bool:
        """True when this coordinator owns the group's partition and has no live group of that id."""
        if not self.is_group_local(group_id):
            return False
        g = self.groups.get(group_id)
        return g is None or g.is_(DEAD)

    # ------------------------------------------------------------ writes
    def _append(self, partition: int, records: list[tuple[bytes, bytes | None]], required_acks: int,
                callback: Callable[[ProduceResult], None] | None, producer_id: int = rec.NO_PRODUCER_ID,
                producer_epoch: int = -1) -> None:
        tp = TopicPartition(GROUP_METADATA_TOPIC_NAME, partition)
        now = self.clock()
        txn = producer_id != rec.NO_PRODUCER_ID
        batch = rec.encode_batch([rec.Record(0, now, k, v, []) for k, v in records], compression=self.compression,
                                 producer_id=producer_id, producer_epoch=producer_epoch,
                                 base_sequence=0 if txn else rec.NO_SEQUENCE, transactional=txn)
        try:
            result = self.replica_manager.append_records(
                {tp: batch}, required_acks=required_acks, timeout_ms=self.commit_timeout_ms, internal=True)
        except Exception:
            log.exception("append to %s failed", tp)
            result = {tp: ProduceResult(error=ErrorCode.KAFKA_STORAGE_ERROR)}
        if callback is None:
            return
        if isinstance(result, asyncio.Future):
            def done(f: asyncio.Future) -> None:
                if f.cancelled() or f.exception() is not None:
                    if not f.cancelled():
                        log.error("append to %s failed", tp, exc_info=f.exception())
                    callback(ProduceResult(error=ErrorCode.KAFKA_STORAGE_ERROR))
                else:
                    callback(f.result()[tp])
            result.add_done_callback(done)
        else:
            callback(result[tp])

    def store_group(self, group: GroupMetadata, assignment: Mapping[str, bytes],
                    callback: Callable[[ErrorCode], None]) -> None:
        """Write the group's GroupMetadata record; callback(error) once it is acknowledged."""
        partition = self.partition_for(group.group_id)
        if not self.is_partition_owned(partition):
            callback(ErrorCode.NOT_COORDINATOR)
            return
        value = group_metadata_value(group, assignment)

        def on_append(res: ProduceResult) -> None:
            if res.error != ErrorCode.NONE:
                log.debug("metadata of group %s failed to append: %s", group.group_id, res.error.name)
            callback(convert_write_error(res.error))

        self._append(partition, [(group_metadata_key(group.group_id), value)], -1, on_append)

    def store_new_group(self, group: GroupMetadata, callback: Callable[[ErrorCode], None]) -> None:
        """Write the empty GroupMetadata record of a group a JoinGroup has just created, so that
        it outlives a restart or a coordinator move; callback(error) once it is acknowledged."""
        partition = self.partition_for(group.group_id)
        if not self.is_partition_owned(partition):
            callback(ErrorCode.NOT_COORDINATOR)
            return
        self._append(partition, [(group_metadata_key(group.group_id), empty_group_metadata_value(group))], -1,
                     lambda res: callback(convert_write_error(res.error)))

    def store_consumer_group_records(self, group_id: str,
                                     records: list[ConsumerGroupRecord] | list[ShareGroupRecord]
                                     | list[StreamsGroupRecord],
                                     callback: Callable[[ErrorCode], None]) -> None:
        """Append a KIP-848 consumer group's or a KIP-932 share group's records (already replayed
        into its state); callback(error) once they are acknowledged."""
        partition = self.partition_for(group_id)
        if not self.is_partition_owned(partition):
            callback(ErrorCode.NOT_COORDINATOR)
            return

        def on_append(res: ProduceResult) -> None:
            if res.error != ErrorCode.NONE:
                log.debug("records of consumer group %s failed to append: %s", group_id, res.error.name)
            callback(convert_write_error(res.error))

        self._append(partition, [consumer_group_record(k, v) for k, v in records], -1, on_append)

    def store_group_conversion(self, group: GroupMetadata, records: list[ConsumerGroupRecord],
                               classic_assignment: Mapping[str, bytes] | None,
                               callback: Callable[[ErrorCode], None]) -> None:
        """Append, in one batch, the records of a group changing protocol. Upgrade
        (``classic_assignment`` None): the classic record's tombstone, then the consumer group's
        records. Downgrade: the consumer group's tombstones, then the classic group's record."""
        partition = self.partition_for(group.group_id)
        if not self.is_partition_owned(partition):
            callback(ErrorCode.NOT_COORDINATOR)
            return
        entries = [consumer_group_record(k, v) for k, v in records]
        if classic_assignment is None:
            entries.insert(0, (group_metadata_key(group.group_id), None))
        else:
            entries.append((group_metadata_key(group.group_id), group_metadata_value(group, classic_assignment)))

        def on_append(res: ProduceResult) -> None:
            if res.error != ErrorCode.NONE:
                log.warning("conversion records of group %s failed to append: %s", group.group_id, res.error.name)
            callback(convert_write_error(res.error))

        self._append(partition, entries, -1, on_append)

    def store_offsets(self, group: GroupMetadata, member_id: str,
                      offsets: Mapping[TopicPartition, OffsetAndMetadata],
                      callback: Callable[[dict[TopicPartition, ErrorCode]], None],
                      producer_id: int = rec.NO_PRODUCER_ID, producer_epoch: int = -1) -> None:
        """Write the commits whose metadata fits offset.metadata.max.bytes; the cache takes
        them once the append is acknowledged. With a producer id they are transactional: they
        stay pending until the transaction's marker (see complete_txn_offsets)."""
        txn = producer_id != rec.NO_PRODUCER_ID
        ok = {tp: om for tp, om in offsets.items() if self.valid_metadata(om.metadata)}
        if not ok:
            callback({tp: ErrorCode.OFFSET_METADATA_TOO_LARGE for tp in offsets})
            return
        partition = self.partition_for(group.group_id)
        if not self.is_partition_owned(partition):
            callback({tp: ErrorCode.NOT_COORDINATOR for tp in offsets})
            return
        records = [(offset_commit_key(group.group_id, tp.topic, tp.partition), offset_commit_value(om))
                   for tp, om in ok.items()]

        def on_append(res: ProduceResult) -> None:
            if res.error == ErrorCode.NONE:
                if not group.is_(DEAD):
                    for tp, om in ok.items():
                        r = CommitRecordMetadataAndOffset(res.base_offset, om)
                        if txn:
                            group.on_txn_offset_commit_append(producer_id, tp, r)
                        else:
                            group.on_offset_commit_append(tp, r)
                error = ErrorCode.NONE
            else:
                if not group.is_(DEAD):
                    for tp, om in ok.items():
                        if txn:
                            group.fail_pending_txn_offset_commit(producer_id, tp)
                        else:
                            group.fail_pending_offset_write(tp, om)
                    if txn and not group.has_pending_offset_commits_from_producer(producer_id):
                        self._remove_producer_group(producer_id, group.group_id)
                error = convert_write_error(res.error)
            callback({tp: error if self.valid_metadata(om.metadata) else ErrorCode.OFFSET_METADATA_TOO_LARGE
                      for tp, om in offsets.items()})

        if txn:
            self.open_groups_for_producer.setdefault(producer_id, set()).add(group.group_id)
            group.prepare_txn_offset_commit(producer_id, ok)
        else:
            group.prepare_offset_commit(ok)
        self._append(partition, records, -1, on_append, producer_id, producer_epoch)

    def _remove_producer_group(self, producer_id: int, group_id: str) -> None:
        groups = self.open_groups_for_producer.get(producer_id)
        if groups is not None:
            groups.discard(group_id)
            if not groups:
                del self.open_groups_for_producer[producer_id]

    def complete_txn_offsets(self, producer_id: int, partitions: Iterable[int], is_commit: bool) -> None:
        """A transaction marker landed on these __consumer_offsets partitions: its groups'
        pending offsets become committed (or are dropped on abort)."""
        parts = set(partitions)
        for gid in list(self.open_groups_for_producer.get(producer_id, ())):
            if self.partition_for(gid) not in parts:
                continue
            group = self.groups.get(gid)
            if group is None:
                log.info("Group %s has moved away after the transaction marker was written", gid)
            elif not group.is_(DEAD):
                group.complete_pending_txn_offset_commit(producer_id, is_commit)
            self._remove_producer_group(producer_id, gid)

    def valid_metadata(self, metadata: str | None) -> bool:
        return metadata is None or java_string_length(metadata) <= self.max_metadata_size

    # ------------------------------------------------------------ reads
    def get_offsets(self, group_id: str, require_stable: bool,
                    tps: Iterable[TopicPartition] | None) -> dict[TopicPartition, PartitionData]:
        group = self.groups.get(group_id)
        if group is None or group.is_(DEAD):
            return {tp: PartitionData() for tp in (tps or [])}
        wanted = list(tps) if tps is not None else list(group.all_offsets())
        out: dict[TopicPartition, PartitionData] = {}
        for tp in wanted:
            if require_stable and group.has_pending_offset_commits_for(tp):
                out[tp] = PartitionData(error=ErrorCode.UNSTABLE_OFFSET_COMMIT)
                continue
            om = group.offset(tp)
            out[tp] = PartitionData() if om is None else PartitionData(om.committed_offset, om.leader_epoch,
                                                                        om.metadata)
        return out

    # ------------------------------------------------------------ removal and expiry
    def cleanup_group_metadata(self, groups: Iterable[GroupMetadata],
                               selector: Callable[[GroupMetadata], dict[TopicPartition, OffsetAndMetadata]],
                               expire_empty: bool = True) -> int:
        """Remove what ``selector`` picks from each group, kill groups left Empty with no
        offsets (unless not ``expire_empty``: the next expiry pass does), and write the
        tombstones (acks=0: a lost tombstone is rewritten by the next purge)."""
        removed_total = 0
        for group in list(groups):
            removed = selector(group)
            # A share group does not expire (Kafka's ShareGroup.shouldExpire): only DeleteGroups removes it.
            if expire_empty and group.is_empty and not group.has_offsets() and group.share is None:
                log.info("Group %s transitioned to Dead in generation %d", group.group_id, group.generation_id)
                group.transition_to(DEAD)
            is_dead = group.is_(DEAD)
            partition = self.partition_for(group.group_id)
            if not self.is_partition_owned(partition):
                log.info("__consumer_offsets-%d is no longer led here; skipping cleanup", partition)
                continue
            tombstones: list[tuple[bytes, bytes | None]] = [
                (offset_commit_key(group.group_id, tp.topic, tp.partition), None) for tp in removed]
            if is_dead and self.groups.get(group.group_id) is group:
                del self.groups[group.group_id]
                # As Kafka, a classic group's tombstone goes out even at generation 0: a JoinGroup
                # that created it wrote its empty record (one made by offsets alone wrote none).
                is_classic = group.consumer is None and group.share is None and group.streams is None
                if group.generation_id > 0 or is_classic:
                    tombstones.append((group_metadata_key(group.group_id), None))
                if group.consumer is not None:
                    tombstones += [consumer_group_record(k, v) for k, v in group.consumer.delete_records()]
                if group.share is not None:
                    tombstones += [consumer_group_record(k, v) for k, v in group.share.delete_records()]
                if group.streams is not None:
                    tombstones += [consumer_group_record(k, v) for k, v in group.streams.delete_records()]
            if tombstones:
                self._append(partition, tombstones, 0, None)
                removed_total += len(removed)
        return removed_total

    def cleanup_expired_offsets(self) -> int:
        now = self.clock()
        n = self.cleanup_group_metadata(self.current_groups(),
                                        lambda g: g.remove_expired_offsets(now, self.retention_ms))
        if n:
            log.info("Removed %d expired offsets in %d milliseconds.", n, self.clock() - now)
        return n

    # ------------------------------------------------------------ loading
    def load_steps(self, partition: int, on_group_loaded: Callable[[GroupMetadata], None]) -> Iterator[None]:
        """Replay __consumer_offsets-<partition> into the cache; yields between read chunks.

        The partition counts as loading until the generator finishes (or is closed)."""
        tp = TopicPartition(GROUP_METADATA_TOPIC_NAME, partition)
        self.loading_partitions.add(partition)
        try:
            p = self.replica_manager.partitions.get(tp)
            if p is None:
                log.warning("cannot load %s: no such partition here", tp)
                return
            lg = p.log
            offset = lg.log_start_offset
            end = lg.log_end_offset
            loaded_offsets: dict[tuple[str, TopicPartition], CommitRecordMetadataAndOffset] = {}
            pending_offsets: dict[int, dict[tuple[str, TopicPartition], CommitRecordMetadataAndOffset]] = {}
            loaded_groups: dict[str, GroupMetadata | None] = {}
            loaded_consumer_groups: dict[str, ConsumerGroup | None] = {}
            loaded_share_groups: dict[str, ShareGroup | None] = {}
            loaded_streams_groups: dict[str, StreamsGroup | None] = {}
            while offset < end and not self.shutting_down:
                try:
                    data = lg.read(offset, self.load_buffer_size, max_offset=end, min_one_batch=True).records
                except ApiError as e:
                    if e.code != ErrorCode.OFFSET_OUT_OF_RANGE:
                        raise
                    offset = lg.log_start_offset  # retention or the cleaner moved the start
                    continue
                if not data:
                    break
                for batch in rec.decode_records(data):
                    h = batch.header
                    if h.last_offset < offset:
                        continue
                    if h.is_control:
                        self._load_control(batch, pending_offsets, loaded_offsets)
                    else:
                        for r in batch.records:
                            if r.offset < offset:
                                continue
                            self._load_record(batch, r, loaded_offsets, pending_offsets, loaded_groups,
                                              loaded_consumer_groups, loaded_share_groups, loaded_streams_groups)
                    offset = max(offset, h.last_offset + 1)
                yield None
            if self.shutting_down:
                return
            by_group: dict[str, dict[TopicPartition, CommitRecordMetadataAndOffset]] = {}
            for (gid, tpk), r in loaded_offsets.items():
                by_group.setdefault(gid, {})[tpk] = r
            # Transactions with no marker yet: their offsets stay pending in their groups.
            pending_by_group: dict[str, dict[int, dict[TopicPartition, CommitRecordMetadataAndOffset]]] = {}
            for pid, entries in pending_offsets.items():
                for (gid, tpk), r in entries.items():
                    pending_by_group.setdefault(gid, {}).setdefault(pid, {})[tpk] = r
                    self.open_groups_for_producer.setdefault(pid, set()).add(gid)
            for gid, consumer in loaded_consumer_groups.items():
                if consumer is not None:
                    # A group converted from classic to consumer carries no classic state on.
                    group = GroupMetadata(gid, EMPTY, self.clock)
                    group.consumer = consumer
                    loaded_groups[gid] = group
            for gid, share in loaded_share_groups.items():
                if share is not None:
                    group = GroupMetadata(gid, EMPTY, self.clock)
                    group.share = share
                    loaded_groups[gid] = group
            for gid, streams in loaded_streams_groups.items():
                if streams is not None:
                    group = GroupMetadata(gid, EMPTY, self.clock)
                    group.streams = streams
                    group.protocol_type = "streams"
                    loaded_groups[gid] = group
            for gid, group in loaded_groups.items():
                if group is None:
                    continue
                group.initialize_offsets(by_group.pop(gid, {}))
                group.initialize_pending_txn_offsets(pending_by_group.pop(gid, {}))
                self._install_loaded(group, on_group_loaded)
            for gid in list(by_group) + [g for g in pending_by_group if g not in by_group]:
                group = GroupMetadata(gid, EMPTY, self.clock)
                group.initialize_offsets(by_group.get(gid, {}))
                group.initialize_pending_txn_offsets(pending_by_group.get(gid, {}))
                self._install_loaded(group, on_group_loaded)
            self.owned_partitions.add(partition)
            log.info("Finished loading offsets and group metadata from %s", tp)
        finally:
            self.loading_partitions.discard(partition)

    def _install_loaded(self, group: GroupMetadata, on_group_loaded: Callable[[GroupMetadata], None]) -> None:
        current = self.add_group(group)
        if current is not group:
            log.debug("group %s already cached with generation %d; loaded copy dropped",
                      group.group_id, current.generation_id)
            return
        on_group_loaded(group)

    def _load_record(self, batch: rec.DecodedBatch, r: rec.Record, loaded_offsets: dict, pending_offsets: dict,
                     loaded_groups: dict, loaded_consumer_groups: dict[str, ConsumerGroup | None],
                     loaded_share_groups: dict[str, ShareGroup | None],
                     loaded_streams_groups: dict[str, StreamsGroup | None]) -> None:
        if r.key is None:
            log.warning("skipping keyless record at offset %d of %s", r.offset, GROUP_METADATA_TOPIC_NAME)
            return
        try:
            key = read_message_key(r.key)
        except Exception:
            log.warning("skipping undecodable key at offset %d", r.offset)
            return
        if isinstance(key, OffsetKey):
            k = (key.group, TopicPartition(key.topic, key.partition))
            if batch.header.is_transactional:
                pid = batch.header.producer_id
                if r.value is None:
                    pending_offsets.get(pid, {}).pop(k, None)
                else:
                    pending_offsets.setdefault(pid, {})[k] = CommitRecordMetadataAndOffset(
                        batch.header.base_offset, read_offset_message_value(r.value))
            elif r.value is None:
                loaded_offsets.pop(k, None)
            else:
                loaded_offsets[k] = CommitRecordMetadataAndOffset(batch.header.base_offset,
                                                                  read_offset_message_value(r.value))
        elif isinstance(key, GroupKey):
            loaded_groups[key.group] = read_group_message_value(key.group, r.value, self.clock)
        elif isinstance(key, ConsumerGroupRecordKey):
            _replay_modern(key, r.value, loaded_consumer_groups, ConsumerGroupMetadataKey, ConsumerGroup)
        elif isinstance(key, ShareGroupRecordKey):
            _replay_modern(key, r.value, loaded_share_groups, ShareGroupMetadataKey, ShareGroup)
        elif isinstance(key, StreamsGroupRecordKey):
            _replay_modern(key, r.value, loaded_streams_groups, StreamsGroupMetadataKey, StreamsGroup)
        elif isinstance(key, UnknownKey):
            log.debug("ignoring record with key version %d at offset %d", key.version, r.offset)

    @staticmethod
    def _load_control(batch: rec.DecodedBatch, pending_offsets: dict, loaded_offsets: dict) -> None:
        if not batch.records:
            return
        try:
            marker = rec.parse_control_record(batch.records[0])
        except ApiError:
            return
        pending = pending_offsets.pop(batch.header.producer_id, None)
        if pending is None or marker.type != rec.ControlRecordType.COMMIT:
            return
        for k, r in pending.items():
            current = loaded_offsets.get(k)
            if current is None or current.older_than(r):
                loaded_offsets[k] = r

    def remove_groups_for_partition(self, partition: int,
                                    on_group_unloaded: Callable[[GroupMetadata], None]) -> None:
        self.owned_partitions.discard(partition)
        self.loading_partitions.discard(partition)
        for gid, group in list(self.groups.items()):
            if self.partition_for(gid) == partition:
                on_group_unloaded(group)
                del self.groups[gid]

    def shutdown(self) -> None:
        self.shutting_down = True
        self.groups.clear()
        self.open_groups_for_producer.clear()
        self.owned_partitions.clear()
        self.loading_partitions.clear()
