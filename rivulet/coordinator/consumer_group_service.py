"""Serves KIP-848 consumer groups for the group coordinator: runs ConsumerGroupHeartbeat's steps
(``consumer_heartbeat``) against the cached group, replays their records into it, appends them
to ``__consumer_offsets``, and keeps each member's session and revocation deadlines in the
heartbeat purgatory."""

from __future__ import annotations

import logging
from typing import Callable

from rivulet.common.cluster import MetadataView
from rivulet.common.time import Clock
from rivulet.coordinator.consumer_group import (
    ConsumerGroup,
    MemberState,
    Record,
)
from rivulet.coordinator.consumer_heartbeat import (
    ConsumerGroupConfig,
    HeartbeatError,
    HeartbeatRequest,
    HeartbeatResult,
    fence,
    heartbeat,
    leave,
)
from rivulet.coordinator.delayed_ops import DelayedDeadline, member_key
from rivulet.coordinator.group_config import GroupConfigs
from rivulet.coordinator.group_metadata import CONSUMER_PROTOCOL_TYPE, EMPTY, GroupMetadata
from rivulet.coordinator.group_metadata_manager import GroupMetadataManager
from rivulet.delayed.purgatory import DelayedOperationPurgatory
from rivulet.protocol.errors import ErrorCode

log = logging.getLogger(__name__)


class ConsumerGroupService:
    def __init__(self, config: ConsumerGroupConfig, manager: GroupMetadataManager, metadata: MetadataView,
                 purgatory: DelayedOperationPurgatory, clock: Clock, group_configs: GroupConfigs | None = None
                 ) -> None:
        self.config = config
        self.group_configs = group_configs
        self.manager = manager
        self.metadata = metadata
        self.purgatory = purgatory
        self.clock = clock
        # The live deadline of each (kind, group, member): an older one that fires is ignored.
        self._deadlines: dict[tuple[str, str, str], object] = {}

    def config_of(self, group_id: str) -> ConsumerGroupConfig:
        """The broker's settings with the group's own session timeout and heartbeat interval."""
        if self.group_configs is None:
            return self.config
        return self.group_configs.consumer_group_config(group_id, self.config)

    # ------------------------------------------------------------ ConsumerGroupHeartbeat
    def heartbeat(self, req: HeartbeatRequest, callback: Callable[[HeartbeatResult], None]) -> None:
        """Called by the group coordinator once the request is valid and the group is local;
        answers through ``callback`` once the records of the change are acknowledged."""
        try:
            group = self._group_for(req)
            consumer = group.consumer
            assert consumer is not None
            if req.member_epoch < 0:
                result = leave(consumer, req)
            else:
                result = heartbeat(consumer, req, self.metadata, self.config_of(req.group_id), self.clock.milliseconds())
        except HeartbeatError as e:
            callback(HeartbeatResult(error=e.code, error_message=e.message, member_id=req.member_id))
            return
        self._apply(group, result.records)
        self._arm(group, result)
        if not result.records:
            callback(result)
            return

        def stored(error: ErrorCode) -> None:
            if error != ErrorCode.NONE:
                callback(HeartbeatResult(error=error, member_id=result.member_id))
            else:
                callback(result)
        self.manager.store_consumer_group_records(group.group_id, result.records, stored)

    def _group_for(self, req: HeartbeatRequest) -> GroupMetadata:
        group = self.manager.get_group(req.group_id)
        if group is None:
            if req.member_epoch != 0:
                raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group {req.group_id} not found.")
            group = self.manager.add_group(GroupMetadata(req.group_id, EMPTY, self.clock.milliseconds))
        if group.consumer is None:
            if group.size > 0 or not group.is_(EMPTY):
                # Online migration of a classic group with members is not served yet.
                raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {req.group_id} is not a consumer group.")
            # An empty classic group (only offsets) becomes a consumer group and keeps its offsets.
            group.consumer = ConsumerGroup(req.group_id)
            group.protocol_type = CONSUMER_PROTOCOL_TYPE
        return group

    def _apply(self, group: GroupMetadata, records: list[Record]) -> None:
        assert group.consumer is not None
        for key, value in records:
            group.consumer.replay(key, value)

    # ------------------------------------------------------------ timers
    def _arm(self, group: GroupMetadata, result: HeartbeatResult) -> None:
        member_id = result.member_id or ""
        if result.cancel_session:
            self._cancel("session", group.group_id, member_id)
        elif result.session_timeout_ms is not None:
            self._schedule("session", group, member_id, result.session_timeout_ms, self._session_expired)
        if result.revocation_timeout_ms is not None:
            self._schedule("revocation", group, member_id, result.revocation_timeout_ms, self._revocation_expired)
        elif result.cancel_revocation:
            self._cancel("revocation", group.group_id, member_id)

    def on_group_loaded(self, group: GroupMetadata) -> None:
        """A loaded group's members each get a full session to heartbeat to the new coordinator."""
        if group.consumer is None:
            return
        for member in group.consumer.members.values():
            self._schedule("session", group, member.member_id, self.config_of(group.group_id).session_timeout_ms,
                           self._session_expired)
            if member.state == MemberState.UNREVOKED_PARTITIONS:
                self._schedule("revocation", group, member.member_id, max(member.rebalance_timeout_ms, 0),
                               self._revocation_expired)

    def on_group_unloaded(self, group: GroupMetadata) -> None:
        if group.consumer is None:
            return
        for member_id in list(group.consumer.members):
            self._cancel("session", group.group_id, member_id)
            self._cancel("revocation", group.group_id, member_id)

    def _schedule(self, kind: str, group: GroupMetadata, member_id: str, timeout_ms: int,
                  expired: Callable[[GroupMetadata, str, int], None]) -> None:
        slot = (kind, group.group_id, member_id)
        token = object()
        self._deadlines[slot] = token
        key = (kind,) + member_key(group.group_id, member_id)
        self.purgatory.check_and_complete(key)  # the deadline it replaces
        assert group.consumer is not None
        epoch = group.consumer.members[member_id].member_epoch if member_id in group.consumer.members else -1
        self.purgatory.try_complete_else_watch(DelayedDeadline(
            timeout_ms, lambda: self._deadlines.get(slot) is token,
            lambda: expired(group, member_id, epoch)), [key])

    def _cancel(self, kind: str, group_id: str, member_id: str) -> None:
        if self._deadlines.pop((kind, group_id, member_id), None) is not None:
            self.purgatory.check_and_complete((kind,) + member_key(group_id, member_id))

    def _session_expired(self, group: GroupMetadata, member_id: str, _epoch: int) -> None:
        self._deadlines.pop(("session", group.group_id, member_id), None)
        if self._fence(group, member_id):
            log.info("[GroupId %s] Member %s fenced from the group because its session expired.",
                     group.group_id, member_id)

    def _revocation_expired(self, group: GroupMetadata, member_id: str, epoch: int) -> None:
        self._deadlines.pop(("revocation", group.group_id, member_id), None)
        member = group.consumer.members.get(member_id) if group.consumer is not None else None
        if member is not None and member.state == MemberState.UNREVOKED_PARTITIONS and member.member_epoch == epoch:
            self._fence(group, member_id)
            log.info("[GroupId %s] Member %s fenced from the group because it failed to revoke partitions "
                     "within its rebalance timeout.", group.group_id, member_id)

    def _fence(self, group: GroupMetadata, member_id: str) -> bool:
        consumer = group.consumer
        if consumer is None or member_id not in consumer.members or self.manager.get_group(group.group_id) is not group:
            return False
        records = fence(consumer, member_id)
        self._apply(group, records)
        self._cancel("session", group.group_id, member_id)
        self._cancel("revocation", group.group_id, member_id)
        self.manager.store_consumer_group_records(group.group_id, records, lambda _error: None)
        return True
