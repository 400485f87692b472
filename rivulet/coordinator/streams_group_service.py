"""Serves KIP-1071 streams groups for the group coordinator: runs StreamsGroupHeartbeat's steps
(``streams_group``) against the cached group, creates the internal topics its topology needs,
and keeps each member's session in the heartbeat purgatory."""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from rivulet.common.cluster import GroupTopicCreator, MetadataView
from rivulet.common.time import Clock
from rivulet.coordinator.modern_group import GroupMember, HeartbeatError, MemberState
from rivulet.coordinator.modern_group_service import ModernGroupService
from rivulet.coordinator.delayed_ops import MemberDeadlines
from rivulet.coordinator.group_config import GroupConfigs
from rivulet.coordinator.group_metadata import GroupMetadata
from rivulet.coordinator.group_metadata_manager import GroupMetadataManager
from rivulet.coordinator.streams_group import (
    STREAMS_PROTOCOL_TYPE,
    StreamsGroup,
    StreamsGroupConfig,
    StreamsGroupMember,
    StreamsHeartbeatRequest,
    StreamsHeartbeatResult,
    TopicNeed,
    assign_delayed,
    configure_topology,
    fence,
    heartbeat,
    leave,
    member_tombstones,
    partition_hash,
    snapshot,
)
from rivulet.coordinator.offsets_topic import consumer_group_record
from rivulet.protocol.errors import ApiError, ErrorCode

log = logging.getLogger(__name__)
INITIAL_REBALANCE = "initial-rebalance"  # the deadline of a new group's initial rebalance delay

class StreamsGroupService(ModernGroupService[StreamsGroup]):
    REVOKED = "tasks"

    def __init__(self, config: StreamsGroupConfig, manager: GroupMetadataManager, metadata: MetadataView,
                 topic_creator: GroupTopicCreator, deadlines: MemberDeadlines, clock: Clock,
                 group_configs: GroupConfigs | None = None) -> None:
        super().__init__(manager, deadlines)
        self.clock = clock
        self.config = config
        self.metadata = metadata
        self.topic_creator = topic_creator
        self.group_configs = group_configs
        self._creating: set[str] = set()
        # Per group, the records last written (encoded key -> encoded value): only changes are appended.
        self._written: dict[str, dict[bytes, bytes | None]] = {}

    def config_of(self, group_id: str) -> StreamsGroupConfig:
        """The broker's settings with the group's own session timeout, heartbeat interval,
        standby replicas, initial rebalance delay and assignment interval."""
        if self.group_configs is None:
            return self.config
        return self.group_configs.streams_group_config(group_id, self.config)

    def heartbeat(self, req: StreamsHeartbeatRequest, callback: Callable[[StreamsHeartbeatResult], None]) -> None:
        """Called by the group coordinator once the request is valid and the group is local."""
        try:
            group = self._group_for(req)
            streams = group.streams
            assert streams is not None
            if req.member_epoch < 0:
                result = leave(streams, req.member_id, req.shutdown_application)
            else:
                result = heartbeat(streams, req, self.metadata, self.config_of(req.group_id), self.clock.monotonic_ms())
        except HeartbeatError as e:
            callback(StreamsHeartbeatResult(error=e.code, error_message=e.message, member_id=req.member_id))
            return
        if result.cancel_session:
            self._cancel_all(group.group_id, req.member_id)
            log.info("[GroupId %s] Member %s has left group.", group.group_id, req.member_id)
        elif result.session_timeout_ms is not None:
            self._schedule_session(group, req.member_id, result.session_timeout_ms)
        if result.revocation_timeout_ms is not None:
            self._schedule_revocation(group, req.member_id, result.revocation_timeout_ms)
        elif result.cancel_revocation:
            self._cancel("revocation", group.group_id, req.member_id)
        if result.missing_internal_topics:
            self._create_internal_topics(result.missing_internal_topics)
        if result.initial_delay_ms is not None:
            self.deadlines.schedule(INITIAL_REBALANCE, group.group_id, "", result.initial_delay_ms,
                                    lambda: self._initial_delay_ended(group))

        def stored(error: ErrorCode) -> None:
            callback(result if error == ErrorCode.NONE else StreamsHeartbeatResult(error=error))
        self._store(group, stored)

    def _store(self, group: GroupMetadata, callback: Callable[[ErrorCode], None]) -> None:
        """Append the group's records that changed since the last ones written (a member gone:
        its tombstones), so that a coordinator taking the group over finds it as it is."""
        streams = group.streams
        assert streams is not None
        written = self._written.setdefault(group.group_id, {})
        now = {consumer_group_record(k, v)[0]: (k, v) for k, v in snapshot(streams)}
        changes = []
        for key_bytes, (k, v) in now.items():
            encoded = consumer_group_record(k, v)[1]
            if written.get(key_bytes, b"") != encoded:
                changes.append((k, v))
                written[key_bytes] = encoded
        gone = {m for m in streams.gone_members}
        streams.gone_members.clear()
        for member_id in gone:
            for k, v in member_tombstones(group.group_id, member_id):
                changes.insert(0, (k, v))
                written.pop(consumer_group_record(k, v)[0], None)
        if not changes:
            callback(ErrorCode.NONE)
            return
        self.manager.store_consumer_group_records(group.group_id, changes, callback)

    def _group_for(self, req: StreamsHeartbeatRequest) -> GroupMetadata:
        group = self.manager.get_or_maybe_create_group(req.group_id, create=req.member_epoch == 0)
        if group is None:
            raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Streams group {req.group_id} not found.")
        if group.streams is None:
            if group.is_empty and group.consumer is None and group.share is None:
                # A new group, or an empty classic one (which keeps its offsets), becomes a streams group.
                group.streams = StreamsGroup(req.group_id)
                group.protocol_type = STREAMS_PROTOCOL_TYPE
            else:
                raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {req.group_id} is not a streams group.")
        return group

    # ------------------------------------------------------------ internal topics
    def _create_internal_topics(self, needs: list[TopicNeed]) -> None:
        """Create the topology's missing internal topics off the event loop; a later heartbeat
        finds them and assigns the tasks."""
        for need in needs:
            if need.name in self._creating:
                continue
            self._creating.add(need.name)

            async def create(n: TopicNeed = need) -> None:
                try:
                    await self.topic_creator.create_group_topic(n.name, n.partitions, n.replication_factor,
                                                                dict(n.configs))
                    log.info("Created internal topic %s with %d partitions for a streams group.", n.name, n.partitions)
                except ApiError as e:
                    if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:  # else another coordinator's creation won
                        log.warning("Could not create internal topic %s: %s", n.name, e)
                except Exception:  # noqa: BLE001 - logged; the next heartbeat asks again
                    log.warning("Could not create internal topic %s", n.name, exc_info=True)
                finally:
                    self._creating.discard(n.name)
            asyncio.ensure_future(create())

    # ------------------------------------------------------------ deadlines
    def _initial_delay_ended(self, group: GroupMetadata) -> None:
        """The first assignment of a group, for every member that joined during its initial
        rebalance delay, stored as Kafka's timer does; the members take it at their next heartbeat."""
        streams = group.streams
        if streams is None or self.manager.get_group(group.group_id) is not group:
            return  # the group moved to another coordinator, or is gone
        if assign_delayed(streams, self.config_of(group.group_id), self.clock.monotonic_ms()):
            log.info("[GroupId %s] Computed the target assignment at epoch %d after the initial rebalance delay.",
                     group.group_id, streams.target_epoch)
            self._store(group, lambda _error: None)

    def _state(self, group: GroupMetadata) -> StreamsGroup | None:
        return group.streams

    def _session_timeout(self, group: GroupMetadata, member: GroupMember) -> int:
        return self.config_of(group.group_id).session_timeout_ms

    def _revoking(self, member: GroupMember) -> bool:
        return isinstance(member, StreamsGroupMember) and member.state == MemberState.UNREVOKED_TASKS

    def _fence(self, group: GroupMetadata, member_id: str) -> None:
        assert group.streams is not None
        fence(group.streams, member_id)
        self._cancel_all(group.group_id, member_id)
        self._store(group, lambda _error: None)

    def on_group_loaded(self, group: GroupMetadata) -> None:
        streams = group.streams
        if streams is None:
            return
        if streams.topology is not None:
            # Not recorded (Python's hashes differ between processes): worked out again here.
            streams.partition_hash = partition_hash(streams.topology, self.metadata)
            streams.configured = configure_topology(streams.topology, self.metadata)
        self._written[group.group_id] = {consumer_group_record(k, v)[0]: consumer_group_record(k, v)[1]
                                         for k, v in snapshot(streams)}
        super().on_group_loaded(group)

    def on_group_unloaded(self, group: GroupMetadata) -> None:
        self._written.pop(group.group_id, None)
        self.deadlines.cancel(INITIAL_REBALANCE, group.group_id, "")
        super().on_group_unloaded(group)
