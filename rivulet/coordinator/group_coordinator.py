"""GroupCoordinator: the classic rebalance protocol and offset management (Kafka's
kafka.coordinator.group.GroupCoordinator).

The broker runs one asyncio loop, so every handler below changes a group's state in one
synchronous stretch; the only suspension points are appends to __consumer_offsets, and their
callbacks re-check the group (state, generation) before acting, as Kafka's do under the
group lock. Answers go out through callbacks: a parked JoinGroup or SyncGroup keeps its
callback on the member until the rebalance decides its answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Awaitable, Callable, Iterable, Iterator

from rivulet.common.cluster import ConfigValues, GroupTopicCreator, InternalTopicCreator, MetadataView, NodeEndpoint
from rivulet.common.time import SYSTEM_CLOCK, Clock
from rivulet.common.types import TopicPartition
from rivulet.coordinator.consumer_group import ConsumerGroup
from rivulet.coordinator.consumer_group_classic import ClassicJoin
from rivulet.coordinator.consumer_group_service import ConsumerGroupService
from rivulet.coordinator.group_config import GroupConfigs
from rivulet.coordinator.consumer_heartbeat import (
    ConsumerGroupConfig,
    HeartbeatRequest,
    HeartbeatResult,
    validate as validate_heartbeat,
)
from rivulet.coordinator.modern_group import HeartbeatError
from rivulet.coordinator.delayed_ops import (
    DelayedHeartbeat,
    DelayedJoin,
    DelayedSync,
    InitialDelayedJoin,
    MemberDeadlines,
    join_key,
    member_key,
    sync_key,
)
from rivulet.coordinator.group_metadata import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    NEW_MEMBER_JOIN_TIMEOUT_MS,
    PREPARING_REBALANCE,
    STABLE,
    UNKNOWN_MEMBER_ID,
    GroupMetadata,
    JoinCallback,
    JoinGroupResult,
    MemberMetadata,
    OffsetAndMetadata,
    SyncCallback,
    SyncGroupResult,
)
from rivulet.coordinator.group_metadata_manager import GroupMetadataManager, PartitionData, config_value
from rivulet.coordinator.offsets_topic import GROUP_METADATA_TOPIC_NAME
from rivulet.coordinator.share_group import (
    ShareGroup,
    ShareGroupConfig,
    ShareHeartbeatRequest,
    ShareHeartbeatResult,
    validate as validate_share_heartbeat,
)
from rivulet.coordinator.share_group_service import ShareGroupService, spawn
from rivulet.coordinator.streams_group import (
    StreamsGroup,
    StreamsGroupConfig,
    StreamsHeartbeatRequest,
    StreamsHeartbeatResult,
    validate as validate_streams_heartbeat,
)
from rivulet.coordinator.streams_group_service import StreamsGroupService
from rivulet.coordinator.share_offsets import PartitionEndsView, ShareOffsetsResult, ShareStateStore
from rivulet.delayed import DelayedOperationPurgatory, Timer
from rivulet.protocol.errors import ErrorCode
from rivulet.replication.internal_log import InternalTopicCoordinator
from rivulet.replication.replica_manager import ReplicaManager
from rivulet.storage.config import segment_size_configs

log = logging.getLogger(__name__)

# Which request a group id arrives with: offset commits/fetches, DescribeGroups and
# DeleteGroups accept the empty group id (old clients commit under it).
JOIN, SYNC, HEARTBEAT, LEAVE = "join", "sync", "heartbeat", "leave"
OFFSET_COMMIT, OFFSET_FETCH, OFFSET_DELETE = "offset_commit", "offset_fetch", "offset_delete"
TXN_OFFSET_COMMIT = "txn_offset_commit"
DESCRIBE, DELETE = "describe", "delete"
CONSUMER_HEARTBEAT = "consumer_group_heartbeat"
SHARE_HEARTBEAT = "share_group_heartbeat"
STREAMS_HEARTBEAT = "streams_group_heartbeat"
SHARE_OFFSETS = "share_group_offsets"  # Alter/DeleteShareGroupOffsets: an empty group id is INVALID_GROUP_ID
_EMPTY_ID_OK = frozenset({OFFSET_COMMIT, OFFSET_FETCH, DESCRIBE, DELETE})

LeaveMember = tuple[str, str | None, str | None]  # (member id, group.instance.id, reason)
LeaveResult = tuple[str, str | None, ErrorCode]


class GroupCoordinator(InternalTopicCoordinator):
    """Owns every group whose __consumer_offsets partition this node leads."""

    def __init__(self, config: ConfigValues, replica_manager: ReplicaManager, metadata: MetadataView,
                 topic_creator: InternalTopicCreator, node: NodeEndpoint, timer: Timer,
                 clock: Clock = SYSTEM_CLOCK, group_configs: GroupConfigs | None = None, *,
                 streams_topics: GroupTopicCreator, share_state: ShareStateStore | None = None,
                 partition_ends: PartitionEndsView | None = None,
                 on_share_group_deleted: Callable[[str, list[TopicPartition]], None] | None = None) -> None:
        """``streams_topics`` creates the topics streams groups' topologies need; ``share_state``:
        the share partitions' state (Kafka's Persister), which the share-group offset APIs read
        and change; ``partition_ends``: the partitions' latest offsets, for
        the lag; ``on_share_group_deleted`` is told of each share group DeleteGroups removes,
        with the partitions it recorded state for."""
        super().__init__(replica_manager, metadata, topic_creator, node, clock)
        self.config = config
        self.min_session_timeout_ms: int = config["group.min.session.timeout.ms"]
        self.max_session_timeout_ms: int = config["group.max.session.timeout.ms"]
        self.max_group_size: int = config["group.max.size"]
        self.initial_rebalance_delay_ms: int = config["group.initial.rebalance.delay.ms"]
        self.heartbeat_purgatory: DelayedOperationPurgatory = DelayedOperationPurgatory("Heartbeat", timer)
        self.rebalance_purgatory: DelayedOperationPurgatory = DelayedOperationPurgatory("Rebalance", timer)
        self.after_io = timer.after_io  # an initial join's end waits behind the requests received
        self.manager: GroupMetadataManager | None = None
        self.consumer_groups: ConsumerGroupService | None = None
        self.share_groups: ShareGroupService | None = None
        self.streams_groups: StreamsGroupService | None = None
        self.on_share_group_deleted = on_share_group_deleted
        self.share_state = share_state
        self.streams_topics = streams_topics
        self.partition_ends = partition_ends
        self.group_configs = group_configs
        self.consumer_group_config = ConsumerGroupConfig(
            heartbeat_interval_ms=config_value(config, "group.consumer.heartbeat.interval.ms", 5000),
            session_timeout_ms=config_value(config, "group.consumer.session.timeout.ms", 45000),
            max_size=config_value(config, "group.consumer.max.size", 2147483647),
            assignors=tuple(config_value(config, "group.consumer.assignors", ["uniform", "range"])),
            migration_policy=str(config_value(config, "group.consumer.migration.policy", "bidirectional")).lower(),
            assignment_interval_ms=config_value(config, "group.consumer.assignment.interval.ms", 1000),
            classic_max_size=config_value(config, "group.max.size", 2147483647))
        # Kafka serves share groups once the share.version feature is 1 (a new 4.2+ cluster's
        # default); Rivulet has no finalized features, so Kafka's own switch stands for it.
        self.share_groups_enabled: bool = bool(config_value(config, "group.share.enable", True))
        self.share_group_config = ShareGroupConfig(
            heartbeat_interval_ms=config_value(config, "group.share.heartbeat.interval.ms", 5000),
            session_timeout_ms=config_value(config, "group.share.session.timeout.ms", 45000),
            max_size=config_value(config, "group.share.max.size", 200),
            assignment_interval_ms=config_value(config, "group.share.assignment.interval.ms", 1000))
        self.streams_group_config = StreamsGroupConfig(
            heartbeat_interval_ms=config_value(config, "group.streams.heartbeat.interval.ms", 5000),
            session_timeout_ms=config_value(config, "group.streams.session.timeout.ms", 45000),
            num_standby_replicas=config_value(config, "group.streams.num.standby.replicas", 0),
            max_size=config_value(config, "group.streams.max.size", 2**31 - 1),
            initial_rebalance_delay_ms=config_value(config, "group.streams.initial.rebalance.delay.ms", 3000),
            assignment_interval_ms=config_value(config, "group.streams.assignment.interval.ms", 1000))
        self._active = False
        self._load_queue: deque[int] = deque()
        self._loader: asyncio.Task | None = None
        self._expirer: asyncio.Task | None = None
        self.completed_rebalances = 0

    # ------------------------------------------------------------ lifecycle
    def offsets_topic_configs(self) -> dict[str, str]:
        """The configs __consumer_offsets is created with."""
        return {"cleanup.policy": "compact", **segment_size_configs(self.config["offsets.topic.segment.bytes"]),
                "compression.type": "producer"}

    def internal_topic(self) -> tuple[str, int, dict[str, str]]:
        return GROUP_METADATA_TOPIC_NAME, self.config["offsets.topic.num.partitions"], self.offsets_topic_configs()

    def startup(self, *, lead_all: bool = True) -> None:
        """``lead_all``: single-node mode, this node leads every __consumer_offsets partition
        (from start-up if the data dir holds the topic, else once the first FindCoordinator has
        made it)."""
        cfg = self.config
        n = self._start_leading(lead_all)
        self.manager = GroupMetadataManager(cfg, self.replica_manager, clock=self.clock.milliseconds,
                                            num_partitions=n)
        self.consumer_groups = ConsumerGroupService(self.consumer_group_config, self.manager, self.metadata,
                                                    self.heartbeat_purgatory, self.clock, self.group_configs,
                                                    classic_control=self)
        self.share_groups = ShareGroupService(self.share_group_config, self.manager, self.metadata,
                                              MemberDeadlines(self.heartbeat_purgatory), self.clock,
                                              self.group_configs, self.share_state)
        self.streams_groups = StreamsGroupService(self.streams_group_config, self.manager, self.metadata,
                                                  self.streams_topics, MemberDeadlines(self.heartbeat_purgatory),
                                                  self.clock, self.group_configs)
        self._active = True
        self._lead_existing_topic()
        if _running_loop() is not None:
            self._expirer = asyncio.get_running_loop().create_task(self._expire_offsets_periodically())

    def shutdown(self) -> None:
        self._active = False
        self._stop_creation()
        for t in (self._loader, self._expirer):
            if t is not None:
                t.cancel()
        self._loader = self._expirer = None
        if self.manager is not None:
            self.manager.shutdown()
        self.heartbeat_purgatory.shutdown()
        self.rebalance_purgatory.shutdown()

    @property
    def is_active(self) -> bool:
        return self._active

    def partition_for(self, group_id: str) -> int:
        return self.manager.partition_for(group_id)

    def _lead_every_partition(self, num_partitions: int) -> None:
        for p in range(num_partitions):
            self.on_become_leader(p)

    def on_become_leader(self, partition: int) -> None:
        """This node now leads __consumer_offsets-<partition>: load its groups and offsets.

        Groups on the partition answer COORDINATOR_LOAD_IN_PROGRESS until the load ends.
        Loading runs in chunks on the loop (synchronously when no loop is running)."""
        m = self.manager
        if m is None or partition in m.owned_partitions or partition in m.loading_partitions:
            return
        m.loading_partitions.add(partition)
        self._load_queue.append(partition)
        if _running_loop() is None:
            while self._load_queue:
                for _ in self._load_one(self._load_queue.popleft()):
                    pass
        elif self._loader is None or self._loader.done():
            self._loader = asyncio.get_running_loop().create_task(self._run_loads())

    def on_resign(self, partition: int) -> None:
        """Leadership of __consumer_offsets-<partition> moved away: drop its groups."""
        if self.manager is not None:
            self.manager.remove_groups_for_partition(partition, self._on_group_unloaded)

    async def _run_loads(self) -> None:
        while self._load_queue:
            partition = self._load_queue.popleft()
            try:
                for _ in self._load_one(partition):
                    await asyncio.sleep(0)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("loading __consumer_offsets-%d failed", partition)

    def _load_one(self, partition: int) -> Iterator[None]:
        return self.manager.load_steps(partition, self._on_group_loaded)

    def wait_loaded(self) -> Awaitable[None]:
        """An awaitable that resolves once every scheduled partition has loaded (tests, tools)."""
        async def wait() -> None:
            while self._loader is not None and not self._loader.done():
                await asyncio.shield(self._loader)
        return wait()

    async def _expire_offsets_periodically(self) -> None:
        interval = self.config["offsets.retention.check.interval.ms"] / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                if self.manager is not None:
                    self.manager.cleanup_expired_offsets()
            except Exception:
                log.exception("offset expiration failed; will retry")

    def on_partitions_deleted(self, partitions: Iterable[TopicPartition]) -> int:
        """Topic partitions were deleted: forget (and tombstone) every group's offsets for them."""
        tps = [TopicPartition(t, p) for t, p in partitions]
        if self.manager is None or not tps:
            return 0
        return self.manager.cleanup_group_metadata(self.manager.current_groups(), lambda g: g.remove_offsets(tps))

    def _on_group_loaded(self, group: GroupMetadata) -> None:
        log.info("Loading group metadata for %s with generation %d", group.group_id, group.generation_id)
        if group.size > self.max_group_size:
            self._prepare_rebalance(group, f"Freshly-loaded group is over capacity ({self.max_group_size}). "
                                           "Rebalancing in order to give a chance for consumers to commit offsets")
        for member in group.all_member_metadata():
            self._complete_and_schedule_next_heartbeat_expiration(group, member)
        if self.consumer_groups is not None:
            self.consumer_groups.on_group_loaded(group)
        if self.share_groups is not None:
            self.share_groups.on_group_loaded(group)
        if self.streams_groups is not None:
            self.streams_groups.on_group_loaded(group)

    def _on_group_unloaded(self, group: GroupMetadata) -> None:
        log.info("Unloading group metadata for %s with generation %d", group.group_id, group.generation_id)
        if self.consumer_groups is not None:
            self.consumer_groups.on_group_unloaded(group)
        if self.share_groups is not None:
            self.share_groups.on_group_unloaded(group)
        if self.streams_groups is not None:
            self.streams_groups.on_group_unloaded(group)
        previous = group.state
        group.transition_to(DEAD)
        if previous is PREPARING_REBALANCE:
            for m in group.all_member_metadata():
                group.maybe_invoke_join_callback(m, JoinGroupResult(m.member_id, ErrorCode.NOT_COORDINATOR))
            self.rebalance_purgatory.check_and_complete(join_key(group.group_id))
        elif previous in (STABLE, COMPLETING_REBALANCE):
            for m in group.all_member_metadata():
                group.maybe_invoke_sync_callback(m, SyncGroupResult(ErrorCode.NOT_COORDINATOR))
                self.heartbeat_purgatory.check_and_complete(member_key(group.group_id, m.member_id))
        self._remove_sync_expiration(group)

    # ------------------------------------------------------------ FindCoordinator
    def find_group_coordinator(self, group_id: str) -> tuple[ErrorCode, int, str, int]:
        """(error, node id, host, port) of the coordinator of ``group_id``: this node, as the
        leader of every __consumer_offsets partition; COORDINATOR_NOT_AVAILABLE while the topic
        is being made (the first call starts that)."""
        if self.manager is None or not self._active or not self._topic_led():
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        partition = self.partition_for(group_id)
        if self.replica_manager.partitions.get(_offsets_tp(partition)) is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        return ErrorCode.NONE, self.node.node_id, self.node.host, self.node.port

    # ------------------------------------------------------------ validation
    def _validate_group_status(self, group_id: str | None, api: str) -> ErrorCode | None:
        if group_id is None or (not group_id and api not in _EMPTY_ID_OK):
            return ErrorCode.INVALID_GROUP_ID
        if not self._active or self.manager is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if self.manager.is_group_loading(group_id):
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if not self.manager.is_group_local(group_id):
            return ErrorCode.NOT_COORDINATOR
        return None

    @staticmethod
    def _validate_current_member(group: GroupMetadata, member_id: str,
                                 group_instance_id: str | None, operation: str) -> ErrorCode | None:
        """A static member's instance id must map to its member id; any member id must exist."""
        if group_instance_id is not None:
            current = group.current_static_member_id(group_instance_id)
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if current != member_id:
                log.info("Request memberId=%s for static member with groupInstanceId=%s is fenced by current "
                         "memberId=%s during operation %s", member_id, group_instance_id, current, operation)
                return ErrorCode.FENCED_INSTANCE_ID
            return None
        if not group.has(member_id):
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None

    def _accept_joining_member(self, group: GroupMetadata, member_id: str) -> bool:
        st = group.state
        if st in (EMPTY, DEAD):
            return True
        if st is PREPARING_REBALANCE:
            # Counting awaiting members (not the size) kicks out the last rejoiners of an
            # oversized group, and copes with group.max.size having been lowered.
            return (group.has(member_id) and group.get(member_id).is_awaiting_join) \
                or group.num_awaiting < self.max_group_size
        return group.has(member_id) or group.size < self.max_group_size

    # ------------------------------------------------------------ JoinGroup
    def handle_join_group(self, group_id: str, member_id: str, group_instance_id: str | None,
                          require_known_member_id: bool, support_skipping_assignment: bool, client_id: str,
                          client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                          protocols: list[tuple[str, bytes]], callback: JoinCallback,
                          reason: str | None = None) -> None:
        err = self._validate_group_status(group_id, JOIN)
        if err is not None:
            callback(JoinGroupResult(member_id, err))
            return
        if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
            callback(JoinGroupResult(member_id, ErrorCode.INVALID_SESSION_TIMEOUT))
            return
        is_unknown = member_id == UNKNOWN_MEMBER_ID
        is_new = self.manager.get_group(group_id) is None
        # A group comes into being only for a member without an id; a known id for a group
        # that does not exist is stale.
        group = self.manager.get_or_maybe_create_group(group_id, is_unknown)
        if group is None:
            callback(JoinGroupResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID))
            return
        if group.share is not None or group.streams is not None:
            # As Kafka: a group of another kind that a classic member cannot join.
            callback(JoinGroupResult(UNKNOWN_MEMBER_ID, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        if group.consumer is not None:
            if group.consumer.members:
                # A classic member of a consumer group (online migration).
                assert self.consumer_groups is not None
                self.consumer_groups.classic_join(group, ClassicJoin(
                    group_id, member_id, group_instance_id, require_known_member_id, client_id, client_host,
                    rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols), callback)
                return
            # An empty consumer group becomes a classic one, keeping its offsets.
            self.manager.store_consumer_group_records(group_id, group.consumer.delete_records(), lambda _e: None)
            group.consumer = None
            group.protocol_type = None
            is_new = True  # Kafka removes the consumer group and creates a classic one
        reason = reason or "not provided"
        if not self._accept_joining_member(group, member_id):
            group.remove(member_id)
            callback(JoinGroupResult(UNKNOWN_MEMBER_ID, ErrorCode.GROUP_MAX_SIZE_REACHED))
        elif is_unknown:
            self._do_new_member_join(group, group_instance_id, require_known_member_id, support_skipping_assignment,
                                     client_id, client_host, rebalance_timeout_ms, session_timeout_ms,
                                     protocol_type, protocols, callback, reason)
        else:
            self._do_current_member_join(group, member_id, group_instance_id, client_id, client_host,
                                         rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols,
                                         callback, reason)
        if group.is_(PREPARING_REBALANCE):
            self.rebalance_purgatory.check_and_complete(join_key(group.group_id))
        if is_new:
            self._store_new_group(group)

    def _store_new_group(self, group: GroupMetadata) -> None:
        """As Kafka: a group a JoinGroup creates is written at once as an empty record, so that it
        survives a restart or a coordinator move. No answer waits for it: the join's own answer
        (MEMBER_ID_REQUIRED, an error) has gone out already, or comes when the rebalance ends."""
        def stored(error: ErrorCode) -> None:
            if error == ErrorCode.NONE:
                return
            log.warning("Failed to write empty metadata for group %s: %s", group.group_id, error.name)
            # Kafka reverts its state to before the write, dropping the group it created.
            if self.manager.get_group(group.group_id) is group and group.is_(EMPTY) and not group.has_offsets():
                group.transition_to(DEAD)
                self.manager.remove_group(group)

        self.manager.store_new_group(group, stored)

    def _do_new_member_join(self, group: GroupMetadata, group_instance_id: str | None, require_known_member_id: bool,
                            support_skipping_assignment: bool, client_id: str, client_host: str,
                            rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                            protocols: list[tuple[str, bytes]], callback: JoinCallback, reason: str) -> None:
        if group.is_(DEAD):
            # Just removed (migrated or deleted): the member should find the coordinator again.
            callback(JoinGroupResult(UNKNOWN_MEMBER_ID, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(protocol_type, {p for p, _ in protocols}):
            callback(JoinGroupResult(UNKNOWN_MEMBER_ID, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        new_member_id = group.generate_member_id(client_id, group_instance_id)
        if group_instance_id is not None:
            old_member_id = group.current_static_member_id(group_instance_id)
            if old_member_id is not None:
                log.info("Static member with groupInstanceId=%s and unknown member id joins group %s in %s state. "
                         "Replacing previously mapped member %s with this groupInstanceId.",
                         group_instance_id, group.group_id, group.state, old_member_id)
                self._update_static_member_and_rebalance(group, old_member_id, new_member_id, group_instance_id,
                                                         protocols, rebalance_timeout_ms, session_timeout_ms,
                                                         callback, reason, support_skipping_assignment)
            else:
                self._add_member_and_rebalance(rebalance_timeout_ms, session_timeout_ms, new_member_id,
                                               group_instance_id, client_id, client_host, protocol_type, protocols,
                                               group, callback, reason)
        elif require_known_member_id:
            # KIP-394: hand out the id and park nothing; the member rejoins with it, so a
            # client that never comes back does not hold up the rebalance.
            log.info("Dynamic member with unknown member id joins group %s in %s state. Created a new member id %s "
                     "and requesting the member to rejoin with this id.", group.group_id, group.state, new_member_id)
            group.add_pending_member(new_member_id)
            self._add_pending_member_expiration(group, new_member_id, session_timeout_ms)
            callback(JoinGroupResult(new_member_id, ErrorCode.MEMBER_ID_REQUIRED))
        else:
            log.info("Dynamic member with unknown member id joins group %s in state %s. Created a new member id %s "
                     "and added the member to the group.", group.group_id, group.state, new_member_id)
            self._add_member_and_rebalance(rebalance_timeout_ms, session_timeout_ms, new_member_id, None, client_id,
                                           client_host, protocol_type, protocols, group, callback, reason)

    def _do_current_member_join(self, group: GroupMetadata, member_id: str, group_instance_id: str | None,
                                client_id: str, client_host: str, rebalance_timeout_ms: int,
                                session_timeout_ms: int, protocol_type: str, protocols: list[tuple[str, bytes]],
                                callback: JoinCallback, reason: str) -> None:
        if group.is_(DEAD):
            callback(JoinGroupResult(member_id, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(protocol_type, {p for p, _ in protocols}):
            callback(JoinGroupResult(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        if group.is_pending_member(member_id):
            if group_instance_id is not None:
                raise RuntimeError(f"Received unexpected JoinGroup with groupInstanceId={group_instance_id} "
                                   f"for pending member with memberId={member_id}")
            log.info("Pending dynamic member with id %s joins group %s in %s state. Adding to the group now.",
                     member_id, group.group_id, group.state)
            self._add_member_and_rebalance(rebalance_timeout_ms, session_timeout_ms, member_id, None, client_id,
                                           client_host, protocol_type, protocols, group, callback, reason)
            return
        err = self._validate_current_member(group, member_id, group_instance_id, "join-group")
        if err is not None:
            callback(JoinGroupResult(member_id, err))
            return
        st = group.state
        member = group.get(member_id) if group.has(member_id) else None
        if st is PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms, session_timeout_ms,
                                              f"Member {member_id} joining group during {st}; client reason: {reason}",
                                              callback)
        elif st is COMPLETING_REBALANCE:
            if member.matches(protocols):
                # It missed its JoinGroup answer: give the current generation again.
                callback(self._current_join_result(group, member_id, include_members=group.is_leader(member_id)))
            else:
                self._update_member_and_rebalance(
                    group, member, protocols, rebalance_timeout_ms, session_timeout_ms,
                    f"Updating metadata for member {member_id} during {st}; client reason: {reason}", callback)
        elif st is STABLE:
            if group.is_leader(member_id):
                # The leader rejoining forces a rebalance: that is how it reacts to changes
                # the member metadata does not show (new partitions, say).
                self._update_member_and_rebalance(
                    group, member, protocols, rebalance_timeout_ms, session_timeout_ms,
                    f"Leader {member_id} re-joining group during {st}; client reason: {reason}", callback)
            elif not member.matches(protocols):
                self._update_member_and_rebalance(
                    group, member, protocols, rebalance_timeout_ms, session_timeout_ms,
                    f"Updating metadata for member {member_id} during {st}; client reason: {reason}", callback)
            else:
                callback(self._current_join_result(group, member_id, include_members=False))
        else:
            log.warning("Attempt to add rejoining member %s of group %s in unexpected group state %s",
                        member_id, group.group_id, st)
            callback(JoinGroupResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID))

    @staticmethod
    def _current_join_result(group: GroupMetadata, member_id: str, include_members: bool,
                             skip_assignment: bool = False, leader_id: str | None = None) -> JoinGroupResult:
        return JoinGroupResult(
            member_id=member_id, error=ErrorCode.NONE, generation_id=group.generation_id,
            protocol_type=group.protocol_type, protocol_name=group.protocol_name,
            leader_id=group.leader_id if leader_id is None else leader_id, skip_assignment=skip_assignment,
            members=group.current_member_metadata() if include_members else [])

    def _add_member_and_rebalance(self, rebalance_timeout_ms: int, session_timeout_ms: int, member_id: str,
                                  group_instance_id: str | None, client_id: str, client_host: str,
                                  protocol_type: str, protocols: list[tuple[str, bytes]], group: GroupMetadata,
                                  callback: JoinCallback, reason: str) -> None:
        member = MemberMetadata(member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
                                session_timeout_ms, protocol_type, protocols)
        member.is_new = True
        # The initial delay may be extended while new members keep arriving: in any rebalance
        # begun from Empty, also of a group that had generations before (as Kafka 4.3).
        if group.is_(PREPARING_REBALANCE) and group.previous_state is EMPTY:
            group.new_member_added = True
        group.add(member, callback)
        # A new member cannot heartbeat while its JoinGroup is parked, and the coordinator
        # cannot see it disconnect: bound the wait so defunct joiners do not pile up.
        self._complete_and_schedule_next_expiration(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group, f"Adding new member {member_id} with group instance id "
                                             f"{group_instance_id}; client reason: {reason}")

    def _update_static_member_and_rebalance(self, group: GroupMetadata, old_member_id: str, new_member_id: str,
                                            group_instance_id: str, protocols: list[tuple[str, bytes]],
                                            rebalance_timeout_ms: int, session_timeout_ms: int,
                                            callback: JoinCallback, reason: str,
                                            support_skipping_assignment: bool) -> None:
        current_leader = group.leader_id
        member = group.replace_static_member(group_instance_id, old_member_id, new_member_id)
        # The old id's heartbeat expires harmlessly: that id is no longer in the group.
        self._complete_and_schedule_next_heartbeat_expiration(group, member)
        old_protocols = list(member.supported_protocols)
        old_rebalance_timeout, old_session_timeout = member.rebalance_timeout_ms, member.session_timeout_ms
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, callback)
        st = group.state
        if st is STABLE:
            # KIP-345: a known instance restarting changes nothing unless the protocol the
            # group would pick changes; persist the new member id and hand back the state.
            if group.protocol_name == group.select_protocol():
                log.info("Static member which joins during Stable stage and doesn't affect selectProtocol will "
                         "not trigger rebalance.")
                assignment = {m.member_id: m.assignment for m in group.all_member_metadata()}

                def stored(error: ErrorCode) -> None:
                    if error != ErrorCode.NONE:
                        log.warning("Failed to persist metadata for group %s: %s", group.group_id, error.name)
                        group.update_member(member, old_protocols, old_rebalance_timeout, old_session_timeout, None)
                        old = group.replace_static_member(group_instance_id, new_member_id, old_member_id)
                        self._complete_and_schedule_next_heartbeat_expiration(group, old)
                        callback(JoinGroupResult(
                            member_id=UNKNOWN_MEMBER_ID, error=error, generation_id=group.generation_id,
                            protocol_type=group.protocol_type, protocol_name=group.protocol_name,
                            leader_id=current_leader))
                    elif support_skipping_assignment:
                        # KIP-814: a static leader learns it leads (to keep watching metadata)
                        # but must not run the assignor: the stable group would ignore it.
                        is_leader = group.is_leader(new_member_id)
                        group.maybe_invoke_join_callback(member, self._current_join_result(
                            group, new_member_id, include_members=is_leader, skip_assignment=is_leader))
                    else:
                        # Older clients: name the old leader id, so a static leader does not
                        # see itself as leader and run a pointless assignment.
                        group.maybe_invoke_join_callback(member, self._current_join_result(
                            group, new_member_id, include_members=False, leader_id=current_leader))

                self.manager.store_group(group, assignment, stored)
            else:
                self._maybe_prepare_rebalance(
                    group, f"Group's selectedProtocol will change because static member {new_member_id} with "
                           f"instance id {group_instance_id} joined with change of protocol; client reason: {reason}")
        elif st is COMPLETING_REBALANCE:
            # The leader may already be assigning to the old member id: start over.
            self._prepare_rebalance(group, f"Updating metadata for static member {new_member_id} with instance id "
                                           f"{group_instance_id}; client reason: {reason}")
        elif st in (EMPTY, DEAD):
            raise RuntimeError(f"Group {group.group_id} was not supposed to be in the state {st} when the unknown "
                               f"static member {group_instance_id} rejoins.")

    def _update_member_and_rebalance(self, group: GroupMetadata, member: MemberMetadata,
                                     protocols: list[tuple[str, bytes]], rebalance_timeout_ms: int,
                                     session_timeout_ms: int, reason: str, callback: JoinCallback) -> None:
        _answer_displaced_join(group, member)
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, callback)
        self._maybe_prepare_rebalance(group, reason)

    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        # Members parked in SyncGroup must rejoin.
        if group.is_(COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS)
        self._remove_sync_expiration(group)
        if group.is_(EMPTY):
            delay = self.initial_rebalance_delay_ms
            op: DelayedJoin = InitialDelayedJoin(self, self.rebalance_purgatory, group, delay, delay,
                                                 max(group.rebalance_timeout_ms() - delay, 0), self.after_io)
        else:
            op = DelayedJoin(self, group, group.rebalance_timeout_ms())
        group.transition_to(PREPARING_REBALANCE)
        log.info("Preparing to rebalance group %s in state %s with old generation %d (%s-%d) (reason: %s)",
                 group.group_id, group.state, group.generation_id, GROUP_METADATA_TOPIC_NAME,
                 self.partition_for(group.group_id), reason)
        self.rebalance_purgatory.try_complete_else_watch(op, [join_key(group.group_id)])

    def _remove_member_and_update_group(self, group: GroupMetadata, member: MemberMetadata, reason: str) -> None:
        # A new member may time out while still parked in JoinGroup: answer it first so a
        # live client retries.
        group.maybe_invoke_join_callback(member, JoinGroupResult(UNKNOWN_MEMBER_ID, ErrorCode.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        st = group.state
        if st in (STABLE, COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, reason)
        elif st is PREPARING_REBALANCE:
            self.rebalance_purgatory.check_and_complete(join_key(group.group_id))

    def _remove_pending_member_and_update_group(self, group: GroupMetadata, member_id: str) -> None:
        group.remove(member_id)
        if group.is_(PREPARING_REBALANCE):
            self.rebalance_purgatory.check_and_complete(join_key(group.group_id))

    def try_complete_join(self, group: GroupMetadata, force_complete: Callable[[], bool]) -> bool:
        if group.consumer is not None:
            return force_complete()  # it became a consumer group: no classic rebalance to finish
        return force_complete() if group.has_all_members_joined() else False

    def on_complete_join(self, group: GroupMetadata) -> None:
        """End of PreparingRebalance: drop dynamic members that did not rejoin, open the next
        generation and answer every parked JoinGroup at once."""
        if group.consumer is not None:
            return
        laggards = [m for m in group.not_yet_rejoined_members() if not m.is_static_member]
        if laggards:
            log.info("Group %s removed dynamic members who haven't joined: %s", group.group_id,
                     [m.member_id for m in laggards])
            for m in laggards:
                group.remove(m.member_id)
                self._remove_heartbeat_for_leaving_member(group, m.member_id)
        if group.is_(DEAD):
            log.info("Group %s is dead, skipping rebalance stage", group.group_id)
            return
        if not group.maybe_elect_new_joined_leader() and group.all_members():
            # Only static members that have not rejoined remain: wait for them (or for their
            # sessions to expire) with another DelayedJoin.
            log.error("Group %s could not complete rebalance because no members rejoined", group.group_id)
            self.rebalance_purgatory.try_complete_else_watch(
                DelayedJoin(self, group, group.rebalance_timeout_ms()), [join_key(group.group_id)])
            return
        group.init_next_generation()
        if group.is_(EMPTY):
            log.info("Group %s with generation %d is now empty (%s-%d)", group.group_id, group.generation_id,
                     GROUP_METADATA_TOPIC_NAME, self.partition_for(group.group_id))

            def stored(error: ErrorCode) -> None:
                if error != ErrorCode.NONE:
                    # Harmless: the previous generation would come back with no live members.
                    log.warning("Failed to write empty metadata for group %s: %s", group.group_id, error.name)

            self.manager.store_group(group, {}, stored)
            return
        log.info("Stabilized group %s generation %d (%s-%d) with %d members", group.group_id, group.generation_id,
                 GROUP_METADATA_TOPIC_NAME, self.partition_for(group.group_id), group.size)
        for m in group.all_member_metadata():
            result = self._current_join_result(group, m.member_id, include_members=group.is_leader(m.member_id))
            group.maybe_invoke_join_callback(m, result)
            self._complete_and_schedule_next_heartbeat_expiration(group, m)
            m.is_new = False
            group.add_pending_sync_member(m.member_id)
        self._schedule_pending_sync(group)

    # ------------------------------------------------------------ online migration (ClassicGroupControl)
    def release_classic_members(self, group: GroupMetadata) -> None:
        """Called by the consumer group service as ``group`` becomes a consumer group."""
        members = group.all_member_metadata()
        for m in members:
            group.maybe_invoke_join_callback(m, JoinGroupResult(m.member_id, ErrorCode.REBALANCE_IN_PROGRESS))
            group.maybe_invoke_sync_callback(m, SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS))
        group.clear_classic_members()
        for m in members:
            self._remove_heartbeat_for_leaving_member(group, m.member_id)
        self.rebalance_purgatory.check_and_complete(join_key(group.group_id))
        self.rebalance_purgatory.check_and_complete(sync_key(group.group_id))

    def rebalance_restored_group(self, group: GroupMetadata, reason: str) -> None:
        """Called by the consumer group service once ``group`` is classic again."""
        for m in group.all_member_metadata():
            self._complete_and_schedule_next_heartbeat_expiration(group, m)
        self._prepare_rebalance(group, reason)

    # ------------------------------------------------------------ SyncGroup
    def handle_sync_group(self, group_id: str, generation_id: int, member_id: str, protocol_type: str | None,
                          protocol_name: str | None, group_instance_id: str | None,
                          group_assignment: dict[str, bytes], callback: SyncCallback) -> None:
        err = self._validate_group_status(group_id, SYNC)
        if err == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            # The rebalance state was lost with the old coordinator: rejoin without
            # rediscovering it (old clients do not expect the loading error here).
            callback(SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS))
            return
        if err is not None:
            callback(SyncGroupResult(err))
            return
        group = self.manager.get_group(group_id)
        if group is not None and (group.share is not None or group.streams is not None):
            callback(SyncGroupResult(ErrorCode.GROUP_ID_NOT_FOUND))
            return
        if group is None or (group.consumer is not None and not group.consumer.members):
            callback(SyncGroupResult(ErrorCode.UNKNOWN_MEMBER_ID))
            return
        if group.consumer is not None:
            assert self.consumer_groups is not None
            self.consumer_groups.classic_sync(group, member_id, group_instance_id, generation_id, protocol_type,
                                              protocol_name, callback)
            return
        self._do_sync_group(group, generation_id, member_id, protocol_type, protocol_name, group_instance_id,
                            group_assignment, callback)

    def _validate_sync_group(self, group: GroupMetadata, generation_id: int, member_id: str,
                             protocol_type: str | None, protocol_name: str | None,
                             group_instance_id: str | None) -> ErrorCode | None:
        if group.is_(DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        err = self._validate_current_member(group, member_id, group_instance_id, "sync-group")
        if err is not None:
            return err
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if protocol_type is not None and group.protocol_type != protocol_type:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if protocol_name is not None and group.protocol_name != protocol_name:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        return None

    def _do_sync_group(self, group: GroupMetadata, generation_id: int, member_id: str, protocol_type: str | None,
                       protocol_name: str | None, group_instance_id: str | None,
                       group_assignment: dict[str, bytes], callback: SyncCallback) -> None:
        err = self._validate_sync_group(group, generation_id, member_id, protocol_type, protocol_name,
                                        group_instance_id)
        if err is not None:
            callback(SyncGroupResult(err))
            return
        st = group.state
        if st is EMPTY:
            callback(SyncGroupResult(ErrorCode.UNKNOWN_MEMBER_ID))
        elif st is PREPARING_REBALANCE:
            callback(SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS))
        elif st is COMPLETING_REBALANCE:
            member = group.get(member_id)
            if member.is_awaiting_sync:
                # A retried SyncGroup replaces the parked one; answer the old request rather
                # than leave it (and everything pipelined behind it) hanging.
                group.maybe_invoke_sync_callback(member, SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS))
            member.awaiting_sync_callback = callback
            self._remove_pending_sync_member(group, member_id)
            if group.is_leader(member_id):
                log.info("Assignment received from leader %s for group %s for generation %d. The group has %d "
                         "members, %d of which are static.", member_id, group.group_id, group.generation_id,
                         group.size, len(group.all_static_members()))
                assignment = {mid: bytes(a) for mid, a in group_assignment.items()}
                missing = [mid for mid in group.all_members() if mid not in assignment]
                if missing:
                    log.warning("Setting empty assignments for members %s of %s for generation %d", missing,
                                group.group_id, group.generation_id)
                    for mid in missing:
                        assignment[mid] = b""

                def stored(error: ErrorCode) -> None:
                    # Someone may have joined while the record was being written: act only if
                    # this generation is still the one completing.
                    if group.is_(COMPLETING_REBALANCE) and generation_id == group.generation_id:
                        if error != ErrorCode.NONE:
                            self._reset_and_propagate_assignment_error(group, error)
                            self._maybe_prepare_rebalance(
                                group, f"Error {error.name} when storing group assignment during SyncGroup "
                                       f"(member: {member_id})")
                        else:
                            self._set_and_propagate_assignment(group, assignment)
                            group.transition_to(STABLE)

                self.manager.store_group(group, assignment, stored)
                self.completed_rebalances += 1
        elif st is STABLE:
            self._remove_pending_sync_member(group, member_id)
            member = group.get(member_id)
            callback(SyncGroupResult(ErrorCode.NONE, group.protocol_type, group.protocol_name, member.assignment))
            self._complete_and_schedule_next_heartbeat_expiration(group, member)
        else:
            raise RuntimeError(f"Reached unexpected condition for Dead group {group.group_id}")

    def _set_and_propagate_assignment(self, group: GroupMetadata, assignment: dict[str, bytes]) -> None:
        if not group.is_(COMPLETING_REBALANCE):
            raise RuntimeError(f"group {group.group_id} is {group.state}, not CompletingRebalance")
        for m in group.all_member_metadata():
            m.assignment = assignment[m.member_id]
        self._propagate_assignment(group, ErrorCode.NONE)

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, error: ErrorCode) -> None:
        if not group.is_(COMPLETING_REBALANCE):
            raise RuntimeError(f"group {group.group_id} is {group.state}, not CompletingRebalance")
        for m in group.all_member_metadata():
            m.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: GroupMetadata, error: ErrorCode) -> None:
        ok = error == ErrorCode.NONE
        for m in group.all_member_metadata():
            if not m.assignment and ok:
                log.warning("Sending empty assignment to member %s of %s for generation %d with no errors",
                            m.member_id, group.group_id, group.generation_id)
            result = SyncGroupResult(error, group.protocol_type if ok else None,
                                     group.protocol_name if ok else None, m.assignment)
            if group.maybe_invoke_sync_callback(m, result):
                # Its session may have lapsed while it waited for the leader or the write;
                # that expiry was ignored, so restart the clock now.
                self._complete_and_schedule_next_heartbeat_expiration(group, m)

    # pending sync (members must send SyncGroup within the rebalance timeout)
    def _remove_pending_sync_member(self, group: GroupMetadata, member_id: str) -> None:
        group.remove_pending_sync_member(member_id)
        self.rebalance_purgatory.check_and_complete(sync_key(group.group_id))

    def _remove_sync_expiration(self, group: GroupMetadata) -> None:
        group.clear_pending_sync_members()
        self.rebalance_purgatory.check_and_complete(sync_key(group.group_id))

    def _schedule_pending_sync(self, group: GroupMetadata) -> None:
        op = DelayedSync(self, group, group.generation_id, group.rebalance_timeout_ms())
        self.rebalance_purgatory.try_complete_else_watch(op, [sync_key(group.group_id)])

    def try_complete_pending_sync(self, group: GroupMetadata, generation_id: int,
                                  force_complete: Callable[[], bool]) -> bool:
        if generation_id != group.generation_id or group.state in (DEAD, EMPTY, PREPARING_REBALANCE):
            return force_complete()
        return force_complete() if group.has_received_sync_from_all_members() else False

    def on_expire_pending_sync(self, group: GroupMetadata, generation_id: int) -> None:
        if generation_id != group.generation_id:
            log.error("Received unexpected notification of sync expiration for %s with an old generation %d "
                      "while the group has %d.", group.group_id, generation_id, group.generation_id)
            return
        if group.state in (DEAD, EMPTY, PREPARING_REBALANCE):
            log.error("Received unexpected notification of sync expiration after group %s already transitioned "
                      "to the %s state.", group.group_id, group.state)
            return
        if not group.has_received_sync_from_all_members():
            pending = group.all_pending_sync_members()
            for mid in pending:
                group.remove(mid)
                self._remove_heartbeat_for_leaving_member(group, mid)
            log.debug("Group %s removed members who haven't sent their sync request: %s", group.group_id, pending)
            self._prepare_rebalance(group, f"Removing {sorted(pending)} on pending sync request expiration")

    # ------------------------------------------------------------ LeaveGroup
    def handle_leave_group(self, group_id: str, leaving: list[LeaveMember],
                           callback: Callable[[ErrorCode, list[LeaveResult]], None]) -> None:
        err = self._validate_group_status(group_id, LEAVE)
        if err is not None:
            callback(err, [])
            return
        group = self.manager.get_group(group_id)
        if group is None:
            callback(ErrorCode.NONE, [(mid, iid, ErrorCode.UNKNOWN_MEMBER_ID) for mid, iid, _ in leaving])
            return
        if group.share is not None or group.streams is not None:
            callback(ErrorCode.GROUP_ID_NOT_FOUND, [])
            return
        if group.consumer is not None:
            assert self.consumer_groups is not None
            self.consumer_groups.classic_leave(group, leaving, callback)
            return
        if group.is_(DEAD):
            callback(ErrorCode.COORDINATOR_NOT_AVAILABLE, [])
            return
        results: list[LeaveResult] = []
        for member_id, instance_id, reason in leaving:
            if member_id == UNKNOWN_MEMBER_ID:
                # Administrative removal by group.instance.id (KIP-345).
                current = group.current_static_member_id(instance_id) if instance_id is not None else None
                if current is not None:
                    self._remove_current_member(group, current, reason)
                    results.append((member_id, instance_id, ErrorCode.NONE))
                else:
                    results.append((member_id, instance_id, ErrorCode.UNKNOWN_MEMBER_ID))
            elif group.is_pending_member(member_id):
                self._remove_pending_member_and_update_group(group, member_id)
                self.heartbeat_purgatory.check_and_complete(member_key(group.group_id, member_id))
                log.info("Pending member with memberId=%s has left group %s through explicit `LeaveGroup` request",
                         member_id, group.group_id)
                results.append((member_id, instance_id, ErrorCode.NONE))
            else:
                e = self._validate_current_member(group, member_id, instance_id, "leave-group")
                if e is None:
                    self._remove_current_member(group, member_id, reason)
                    e = ErrorCode.NONE
                results.append((member_id, instance_id, e))
        callback(ErrorCode.NONE, results)

    def _remove_current_member(self, group: GroupMetadata, member_id: str, reason: str | None) -> None:
        member = group.get(member_id)
        reason = reason or "not provided"
        self._remove_member_and_update_group(group, member, f"Removing member {member_id} on LeaveGroup; client "
                                                            f"reason: {reason}")
        self._remove_heartbeat_for_leaving_member(group, member_id)
        log.info("Member %s has left group %s through explicit `LeaveGroup`; client reason: %s", member,
                 group.group_id, reason)

    # ------------------------------------------------------------ ConsumerGroupHeartbeat (KIP-848)
    def handle_consumer_group_heartbeat(self, req: HeartbeatRequest, version: int,
                                        callback: Callable[[HeartbeatResult], None]) -> None:
        if not self._active or self.manager is None or self.consumer_groups is None:
            callback(HeartbeatResult(error=ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        refused = self._heartbeat_refusal(req.group_id, CONSUMER_HEARTBEAT,
                                          lambda: validate_heartbeat(req, version, self.consumer_group_config))
        if refused is not None:
            callback(HeartbeatResult(error=refused[0], error_message=refused[1]))
        else:
            self.consumer_groups.heartbeat(req, callback)

    def _heartbeat_refusal(self, group_id: str, api: str,
                           validate: Callable[[], None]) -> tuple[ErrorCode, str | None] | None:
        """(error, message) when a KIP-848 or KIP-932 heartbeat fails ``validate`` (Kafka's checks
        of the request itself) or the group's status; None when its group service takes it."""
        try:
            validate()
        except HeartbeatError as e:
            return e.code, e.message
        err = self._validate_group_status(group_id, api)
        return None if err is None else (err, None)

    # ------------------------------------------------------------ ShareGroupHeartbeat (KIP-932)
    def handle_share_group_heartbeat(self, req: ShareHeartbeatRequest,
                                     callback: Callable[[ShareHeartbeatResult], None]) -> None:
        if not self._active or self.manager is None or self.share_groups is None:
            callback(ShareHeartbeatResult(error=ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        refused = self._heartbeat_refusal(req.group_id, SHARE_HEARTBEAT, lambda: validate_share_heartbeat(req))
        if refused is not None:
            callback(ShareHeartbeatResult(error=refused[0], error_message=refused[1]))
        else:
            self.share_groups.heartbeat(req, callback)

    # ------------------------------------------------------------ StreamsGroupHeartbeat (KIP-1071)
    def handle_streams_group_heartbeat(self, req: StreamsHeartbeatRequest,
                                       callback: Callable[[StreamsHeartbeatResult], None]) -> None:
        if not self._active or self.manager is None or self.streams_groups is None:
            callback(StreamsHeartbeatResult(error=ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        try:
            validate_streams_heartbeat(req)
        except HeartbeatError as e:
            callback(StreamsHeartbeatResult(error=e.code, error_message=e.message))
            return
        err = self._validate_group_status(req.group_id, STREAMS_HEARTBEAT)
        if err is not None:
            callback(StreamsHeartbeatResult(error=err))
            return
        self.streams_groups.heartbeat(req, callback)

    # ------------------------------------------------------------ Heartbeat
    def handle_heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None,
                         generation_id: int) -> ErrorCode:
        err = self._validate_group_status(group_id, HEARTBEAT)
        if err is not None:
            # While loading, heartbeats are answered blindly: the state is not known yet.
            return ErrorCode.NONE if err == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS else err
        group = self.manager.get_group(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.share is not None or group.streams is not None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.consumer is not None:
            assert self.consumer_groups is not None
            return self.consumer_groups.classic_heartbeat(group, member_id, group_instance_id, generation_id)
        if group.is_(DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        err = self._validate_current_member(group, member_id, group_instance_id, "heartbeat")
        if err is not None:
            return err
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        st = group.state
        if st is EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        member = group.get(member_id)
        self._complete_and_schedule_next_heartbeat_expiration(group, member)
        # Heartbeats are how members learn of a rebalance they must join.
        return ErrorCode.REBALANCE_IN_PROGRESS if st is PREPARING_REBALANCE else ErrorCode.NONE

    def _complete_and_schedule_next_heartbeat_expiration(self, group: GroupMetadata, member: MemberMetadata) -> None:
        self._complete_and_schedule_next_expiration(group, member, member.session_timeout_ms)

    def _complete_and_schedule_next_expiration(self, group: GroupMetadata, member: MemberMetadata,
                                               timeout_ms: int) -> None:
        key = member_key(group.group_id, member.member_id)
        member.heartbeat_satisfied = True
        self.heartbeat_purgatory.check_and_complete(key)
        member.heartbeat_satisfied = False
        self.heartbeat_purgatory.try_complete_else_watch(
            DelayedHeartbeat(self, group, member.member_id, False, timeout_ms), [key])

    def _add_pending_member_expiration(self, group: GroupMetadata, member_id: str, timeout_ms: int) -> None:
        self.heartbeat_purgatory.try_complete_else_watch(
            DelayedHeartbeat(self, group, member_id, True, timeout_ms), [member_key(group.group_id, member_id)])

    def _remove_heartbeat_for_leaving_member(self, group: GroupMetadata, member_id: str) -> None:
        self.heartbeat_purgatory.check_and_complete(member_key(group.group_id, member_id))

    def try_complete_heartbeat(self, group: GroupMetadata, member_id: str, is_pending: bool,
                               force_complete: Callable[[], bool]) -> bool:
        if group.is_(DEAD):
            return force_complete()
        if is_pending:
            return force_complete() if group.has(member_id) else False
        if not group.has(member_id) or group.get(member_id).has_satisfied_heartbeat:
            return force_complete()
        return False

    def on_expire_heartbeat(self, group: GroupMetadata, member_id: str, is_pending: bool) -> None:
        if group.is_(DEAD):
            log.info("Received notification of heartbeat expiration for member %s after group %s had already "
                     "been unloaded or deleted.", member_id, group.group_id)
        elif is_pending:
            log.info("Pending member %s in group %s has been removed after session timeout expiration.",
                     member_id, group.group_id)
            self._remove_pending_member_and_update_group(group, member_id)
        elif group.has(member_id):
            member = group.get(member_id)
            if not member.has_satisfied_heartbeat:
                log.info("Member %s in group %s has failed, removing it from the group", member_id, group.group_id)
                self._remove_member_and_update_group(group, member,
                                                     f"removing member {member_id} on heartbeat expiration")
        # As Kafka 4.3: an expiry that leaves every member joined ends the join phase at once,
        # even an initial one, whose delay joins and LeaveGroups never cut short.
        if group.is_(PREPARING_REBALANCE) and group.previous_state is EMPTY and group.has_all_members_joined():
            self.on_complete_join(group)

    # ------------------------------------------------------------ OffsetCommit
    def handle_commit_offsets(self, group_id: str, member_id: str, group_instance_id: str | None,
                              generation_id: int, offsets: dict[TopicPartition, OffsetAndMetadata],
                              callback: Callable[[dict[TopicPartition, ErrorCode]], None],
                              api_version: int = 0) -> None:
        err = self._validate_group_status(group_id, OFFSET_COMMIT)
        if err is not None:
            callback({tp: err for tp in offsets})
            return
        group = self.manager.get_group(group_id)
        if group is None:
            if generation_id < 0:
                # Not using group management: a standalone group that only stores offsets.
                log.info("Creating simple consumer group %s via manual offset commit.", group_id)
                group = self.manager.add_group(GroupMetadata(group_id, EMPTY, self.clock.milliseconds))
            else:
                # A generation for a group that does not exist: Kafka 4's coordinator answers
                # GROUP_ID_NOT_FOUND from OffsetCommit v9 on, ILLEGAL_GENERATION before.
                callback({tp: (ErrorCode.GROUP_ID_NOT_FOUND if api_version >= 9 else ErrorCode.ILLEGAL_GENERATION)
                          for tp in offsets})
                return
        err = self._validate_offset_commit(group, generation_id, member_id, group_instance_id,
                                           api_version=api_version)
        if err is not None:
            callback({tp: err for tp in offsets})
            return
        if group.consumer is not None:
            self.manager.store_offsets(group, member_id, offsets, callback)
            return
        st = group.state
        if st is EMPTY:
            self.manager.store_offsets(group, member_id, offsets, callback)
        elif st in (STABLE, PREPARING_REBALANCE):
            # Commits of the previous generation are still welcome while rebalancing; the
            # heartbeat tells the member to rejoin.
            self._complete_and_schedule_next_heartbeat_expiration(group, group.get(member_id))
            self.manager.store_offsets(group, member_id, offsets, callback)
        elif st is COMPLETING_REBALANCE:
            # The member already has the new generation's JoinGroup answer: it should sync first.
            callback({tp: ErrorCode.REBALANCE_IN_PROGRESS for tp in offsets})
        else:
            raise RuntimeError(f"Logic error: unexpected group state {st}")

    def handle_txn_commit_offsets(self, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
                                  group_instance_id: str | None, generation_id: int,
                                  offsets: dict[TopicPartition, OffsetAndMetadata],
                                  callback: Callable[[dict[TopicPartition, ErrorCode]], None]) -> None:
        """TxnOffsetCommit: offsets written inside a transaction, visible once it commits."""
        err = self._validate_group_status(group_id, TXN_OFFSET_COMMIT)
        if err is not None:
            callback({tp: err for tp in offsets})
            return
        group = self.manager.get_group(group_id)
        if group is None:
            if generation_id >= 0:
                # As Kafka 4's coordinator: a generation for a group that does not exist is a
                # stale one, and no group is created for it.
                callback({tp: ErrorCode.ILLEGAL_GENERATION for tp in offsets})
                return
            group = self.manager.add_group(GroupMetadata(group_id, EMPTY, self.clock.milliseconds))
        err = self._validate_offset_commit(group, generation_id, member_id, group_instance_id, transactional=True)
        if err == ErrorCode.STALE_MEMBER_EPOCH:
            # TxnOffsetCommit has no STALE_MEMBER_EPOCH: Kafka answers ILLEGAL_GENERATION, which
            # producers abort on (CommitFailedException) rather than failing for good.
            err = ErrorCode.ILLEGAL_GENERATION
        if err is not None:
            callback({tp: err for tp in offsets})
            return
        self.manager.store_offsets(group, member_id, offsets, callback, producer_id, producer_epoch)

    def on_transaction_completed(self, producer_id: int, partitions: Iterable[int], commit: bool) -> None:
        """The transaction coordinator wrote producer_id's marker to these __consumer_offsets
        partitions (Kafka's scheduleHandleTxnCompletion)."""
        if self.manager is not None:
            self.manager.complete_txn_offsets(producer_id, partitions, commit)

    def _validate_offset_commit(self, group: GroupMetadata, generation_id: int, member_id: str,
                                group_instance_id: str | None, transactional: bool = False,
                                api_version: int = 9) -> ErrorCode | None:
        if group.is_(DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if group.share is not None:
            return ErrorCode.GROUP_ID_NOT_FOUND  # a share group keeps no committed offsets here
        if group.streams is not None:
            return _validate_streams_member_epoch(group.streams, generation_id, member_id)
        if group.consumer is not None:
            return _validate_consumer_member_epoch(group, generation_id, member_id, transactional, api_version)
        if generation_id < 0 and group.is_(EMPTY):
            return None  # admin client or a consumer without group management
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            err = self._validate_current_member(group, member_id, group_instance_id,
                                                "txn-offset-commit" if transactional else "offset-commit")
            if err is not None:
                return err
            return ErrorCode.ILLEGAL_GENERATION if generation_id != group.generation_id else None
        if not transactional and not group.is_(EMPTY):
            # Only members commit to a non-empty group; old TxnOffsetCommit versions carry no
            # member id, so transactional commits are exempt.
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None

    # ------------------------------------------------------------ OffsetFetch
    def handle_fetch_offsets(self, group_id: str, require_stable: bool,
                             partitions: list[TopicPartition] | None, member_id: str | None = None,
                             member_epoch: int = -1) -> tuple[ErrorCode, dict[TopicPartition, PartitionData]]:
        """``member_id``/``member_epoch`` (OffsetFetch v9+): a KIP-848 member fetching for
        itself must be current."""
        err = self._validate_group_status(group_id, OFFSET_FETCH)
        if err is not None:
            return err, {}
        group = self.manager.get_group(group_id)
        if group is not None and group.share is not None:
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        if group is not None and group.consumer is not None and member_epoch >= 0:
            member = group.consumer.members.get(member_id or "")
            if member is None:
                return ErrorCode.UNKNOWN_MEMBER_ID, {}
            if member.member_epoch != member_epoch:
                return ErrorCode.STALE_MEMBER_EPOCH, {}
        # Answered whatever the group's state: standalone consumers only store offsets.
        return ErrorCode.NONE, self.manager.get_offsets(group_id, require_stable, partitions)

    # ------------------------------------------------------------ OffsetDelete
    def handle_delete_offsets(self, group_id: str, partitions: list[TopicPartition]
                              ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        err = self._validate_group_status(group_id, OFFSET_DELETE)
        if err is not None:
            return err, {}
        group = self.manager.get_group(group_id)
        if group is None or group.is_(DEAD):
            return (ErrorCode.GROUP_ID_NOT_FOUND if self.manager.group_not_exists(group_id)
                    else ErrorCode.NOT_COORDINATOR), {}
        if group.share is not None:
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        errors: dict[TopicPartition, ErrorCode] = {}
        if group.is_empty:
            eligible = list(partitions)
        elif group.is_consumer_group:
            eligible = []
            for tp in partitions:
                if group.is_subscribed_to_topic(tp.topic):
                    errors[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                else:
                    eligible.append(tp)
        else:
            return ErrorCode.NON_EMPTY_GROUP, {}
        if eligible:
            # As Kafka 4's coordinator: the offsets go, the group stays (Empty, describable,
            # deletable) until the next expiry pass.
            n = self.manager.cleanup_group_metadata([group], lambda g: g.remove_offsets(eligible), expire_empty=False)
            for tp in eligible:
                errors[tp] = ErrorCode.NONE
            log.info("The following offsets of the group %s were deleted: %s. A total of %d offsets were removed.",
                     group_id, eligible, n)
        return ErrorCode.NONE, errors

    # ------------------------------------------------------------ DeleteGroups
    def handle_delete_groups(self, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
        errors: dict[str, ErrorCode] = {}
        eligible: list[GroupMetadata] = []
        for gid in group_ids:
            err = self._validate_group_status(gid, DELETE)
            if err is not None:
                errors[gid] = err
                continue
            group = self.manager.get_group(gid)
            if group is None or group.is_(DEAD):
                errors[gid] = (ErrorCode.GROUP_ID_NOT_FOUND if self.manager.group_not_exists(gid)
                               else ErrorCode.NOT_COORDINATOR)
            elif group.is_empty:
                group.transition_to(DEAD)
                eligible.append(group)
            else:
                errors[gid] = ErrorCode.NON_EMPTY_GROUP
        if eligible:
            n = self.manager.cleanup_group_metadata(eligible, lambda g: g.remove_all_offsets())
            for g in eligible:
                errors[g.group_id] = ErrorCode.NONE
                if g.share is not None:
                    recorded = [*g.share.initialized.values(), *g.share.initializing.values()]
                    tps = sorted({TopicPartition(name, p) for name, ps in recorded for p in ps})
                    if self.on_share_group_deleted is not None:
                        self.on_share_group_deleted(g.group_id, tps)
            log.info("The following groups were deleted: %s. A total of %d offsets were removed.",
                     ", ".join(g.group_id for g in eligible), n)
        return errors

    # ------------------------------------------------------------ ListGroups / DescribeGroups
    def handle_list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()
                           ) -> tuple[ErrorCode, list[GroupMetadata]]:
        if not self._active or self.manager is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self.manager.is_loading() else ErrorCode.NONE
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        groups = [g for g in self.manager.current_groups()
                  if (not wanted_states or g.in_states(wanted_states))
                  and (not wanted_types or g.group_type in wanted_types)]
        return error, groups

    def handle_describe_group(self, group_id: str) -> tuple[ErrorCode, tuple[str, str, str, list]]:
        """(error, (state, protocol type, protocol, member summaries)). A consumer group is not
        a classic one: it is described as one that does not exist."""
        err = self._validate_group_status(group_id, DESCRIBE)
        if err is not None:
            return err, ("", "", "", [])
        group = self.manager.get_group(group_id)
        if group is None or group.consumer is not None or group.share is not None or group.streams is not None:
            return ErrorCode.NONE, (DEAD.value, "", "", [])
        return ErrorCode.NONE, group.summary()

    def handle_consumer_group_describe(self, group_id: str
                                       ) -> tuple[ErrorCode, str | None, ConsumerGroup | None]:
        """ConsumerGroupDescribe: (error, its message, the group)."""
        err, message, group = self._modern_group(group_id, "consumer")
        return err, message, group.consumer if group is not None else None

    def handle_share_group_describe(self, group_id: str) -> tuple[ErrorCode, str | None, ShareGroup | None]:
        """ShareGroupDescribe: (error, its message, the group)."""
        err, message, group = self._modern_group(group_id, "share")
        return err, message, group.share if group is not None else None

    def handle_streams_group_describe(self, group_id: str) -> tuple[ErrorCode, str | None, StreamsGroup | None]:
        """StreamsGroupDescribe: (error, its message, the group)."""
        err, message, group = self._modern_group(group_id, "streams")
        return err, message, group.streams if group is not None else None

    # ------------------------------------------------------------ share-group offsets
    def _share_offsets_refusal(self, group_id: str, api: str = SHARE_OFFSETS) -> ShareOffsetsResult | None:
        err = self._validate_group_status(group_id, api)
        if err is None and (self.share_groups is None or self.share_state is None or self.partition_ends is None):
            err = ErrorCode.COORDINATOR_NOT_AVAILABLE
        return None if err is None else ShareOffsetsResult(err)

    def handle_describe_share_group_offsets(self, group_id: str, topics: list[tuple[str, list[int]]] | None,
                                            callback: Callable[[ShareOffsetsResult], None]) -> None:
        """DescribeShareGroupOffsets for one group; ``topics`` None: all its initialized partitions."""
        refusal = self._share_offsets_refusal(group_id, DESCRIBE)
        if refusal is not None:
            callback(refusal)
            return
        assert self.share_groups is not None and self.share_state is not None and self.partition_ends is not None
        describing = self.share_groups.describe_offsets(group_id, topics, self.share_state, self.partition_ends)

        async def describe() -> None:
            callback(await describing)
        spawn(describe(), callback)

    def handle_alter_share_group_offsets(self, group_id: str, topics: list[tuple[str, list[tuple[int, int]]]],
                                         callback: Callable[[ShareOffsetsResult], None]) -> None:
        if self._share_offsets_served(group_id, callback):
            assert self.share_groups is not None and self.share_state is not None
            self.share_groups.alter_offsets(group_id, topics, self.share_state, callback)

    def handle_delete_share_group_offsets(self, group_id: str, topics: list[str],
                                          callback: Callable[[ShareOffsetsResult], None]) -> None:
        if self._share_offsets_served(group_id, callback):
            assert self.share_groups is not None and self.share_state is not None
            self.share_groups.delete_offsets(group_id, topics, self.share_state, callback)

    def _share_offsets_served(self, group_id: str, callback: Callable[[ShareOffsetsResult], None]) -> bool:
        """Whether this coordinator serves the group's Alter/Delete; else ``callback`` has its refusal."""
        refusal = self._share_offsets_refusal(group_id)
        if refusal is not None:
            callback(refusal)
        return refusal is None

    def _modern_group(self, group_id: str, group_type: str) -> tuple[ErrorCode, str | None, GroupMetadata | None]:
        err = self._validate_group_status(group_id, DESCRIBE)
        if err is not None:
            return err, None, None
        group = self.manager.get_group(group_id)
        if group is None or group.is_(DEAD):
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.", None
        if group.group_type != group_type:
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a {group_type} group.", None
        return ErrorCode.NONE, None, group

    def is_modern_group(self, group_id: str) -> bool:
        """A KIP-848 consumer group, a KIP-932 share group or a KIP-1071 streams group that this
        node coordinates."""
        group = self.manager.get_group(group_id) if self.manager is not None else None
        return group is not None and (group.consumer is not None or group.share is not None
                                      or group.streams is not None)


def _validate_consumer_member_epoch(group: GroupMetadata, epoch: int, member_id: str, transactional: bool,
                                    api_version: int) -> ErrorCode | None:
    """A KIP-848 group takes offsets from its members at their current epoch, and from anyone
    (the admin client, a consumer without group management) while it has no members."""
    consumer = group.consumer
    assert consumer is not None
    if epoch < 0 and not consumer.members:
        return None
    member = consumer.members.get(member_id)
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if member.classic is not None:
        # A classic member commits with its generation, which is its member epoch.
        return ErrorCode.ILLEGAL_GENERATION if epoch != member.member_epoch else None
    if not transactional and api_version < 9:
        return ErrorCode.UNSUPPORTED_VERSION  # members of the new protocol commit with v9 or later
    return ErrorCode.STALE_MEMBER_EPOCH if epoch != member.member_epoch else None


def _validate_streams_member_epoch(streams: StreamsGroup, epoch: int, member_id: str) -> ErrorCode | None:
    """A streams group takes offsets from its members at their current epoch, and from anyone
    while it has no members."""
    if epoch < 0 and not streams.members:
        return None
    member = streams.members.get(member_id)
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    return ErrorCode.STALE_MEMBER_EPOCH if epoch != member.member_epoch else None


def _answer_displaced_join(group: GroupMetadata, member: MemberMetadata) -> None:
    """A member's new JoinGroup replaces its parked one. Kafka never answers the old request
    (its connection was muted, so it is a dead client's); here a connection can pipeline, so
    the old one is answered rather than left to block the responses queued behind it."""
    if member.is_awaiting_join:
        group.maybe_invoke_join_callback(member, JoinGroupResult(member.member_id, ErrorCode.REBALANCE_IN_PROGRESS))


def _offsets_tp(partition: int) -> TopicPartition:
    return TopicPartition(GROUP_METADATA_TOPIC_NAME, partition)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
