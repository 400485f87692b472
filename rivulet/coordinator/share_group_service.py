"""Serves KIP-932 share groups for the group coordinator: runs ShareGroupHeartbeat's steps
(``share_group``) against the cached group, replays their records into it, appends them to
``__consumer_offsets``, and keeps each member's session in the heartbeat purgatory."""

from __future__ import annotations

import dataclasses
import logging
from typing import Callable

from rivulet.common.cluster import MetadataView
from rivulet.common.time import Clock
from rivulet.coordinator.consumer_heartbeat import HeartbeatError
from rivulet.coordinator.delayed_ops import MemberDeadlines
from rivulet.coordinator.group_config import GroupConfigs
from rivulet.coordinator.group_metadata import EMPTY, GroupMetadata
from rivulet.coordinator.group_metadata_manager import GroupMetadataManager
from rivulet.coordinator.share_group import (
    SHARE_PROTOCOL_TYPE,
    Record,
    ShareGroup,
    ShareGroupConfig,
    ShareHeartbeatRequest,
    ShareHeartbeatResult,
    fence,
    heartbeat,
    leave,
)
from rivulet.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

_SESSION = "share-session"


class ShareGroupService:
    def __init__(self, config: ShareGroupConfig, manager: GroupMetadataManager, metadata: MetadataView,
                 deadlines: MemberDeadlines, clock: Clock, group_configs: GroupConfigs | None = None) -> None:
        self.config = config
        self.manager = manager
        self.metadata = metadata
        self.deadlines = deadlines
        self.clock = clock
        self.group_configs = group_configs

    def config_of(self, group_id: str) -> ShareGroupConfig:
        """The broker's settings with the group's own session timeout and heartbeat interval."""
        if self.group_configs is None:
            return self.config
        own = self.group_configs.get(group_id)
        return dataclasses.replace(self.config, session_timeout_ms=own.share_session_timeout_ms,
                                   heartbeat_interval_ms=own.share_heartbeat_interval_ms)

    # ------------------------------------------------------------ ShareGroupHeartbeat
    def heartbeat(self, req: ShareHeartbeatRequest, callback: Callable[[ShareHeartbeatResult], None]) -> None:
        """Called by the group coordinator once the request is valid and the group is local;
        answers through ``callback`` once the records of the change are acknowledged."""
        try:
            group = self._group_for(req)
            share = group.share
            assert share is not None
            if req.member_epoch < 0:
                result = leave(share, req)
            else:
                result = heartbeat(share, req, self.metadata, self.config_of(req.group_id), self.clock.milliseconds())
        except HeartbeatError as e:
            callback(ShareHeartbeatResult(error=e.code, error_message=e.message, member_id=req.member_id))
            return
        self._apply(group, result.records)
        member_id = result.member_id or req.member_id
        if result.cancel_session:
            self.deadlines.cancel(_SESSION, group.group_id, member_id)
            log.info("[GroupId %s] Member %s has left group.", group.group_id, member_id)
        elif result.session_timeout_ms is not None:
            self._schedule_session(group, member_id, result.session_timeout_ms)
        if not result.records:
            callback(result)
            return

        def stored(error: ErrorCode) -> None:
            callback(result if error == ErrorCode.NONE else ShareHeartbeatResult(error=error, member_id=member_id))
        self.manager.store_consumer_group_records(group.group_id, result.records, stored)

    def _group_for(self, req: ShareHeartbeatRequest) -> GroupMetadata:
        group = self.manager.get_group(req.group_id)
        if group is None:
            if req.member_epoch != 0:
                # Kafka's two paths word it differently: a heartbeat's lookup, and a leave's.
                kind = "Share group" if req.member_epoch > 0 else "Group"
                raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"{kind} {req.group_id} not found.")
            group = self.manager.add_group(GroupMetadata(req.group_id, EMPTY, self.clock.milliseconds))
            group.share = ShareGroup(req.group_id)
            group.protocol_type = SHARE_PROTOCOL_TYPE
        if group.share is None:
            # Kafka does not convert between share groups and other kinds.
            raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {req.group_id} is not a share group.")
        return group

    def _apply(self, group: GroupMetadata, records: list[Record]) -> None:
        assert group.share is not None
        for key, value in records:
            group.share.replay(key, value)

    # ------------------------------------------------------------ sessions
    def _schedule_session(self, group: GroupMetadata, member_id: str, timeout_ms: int) -> None:
        self.deadlines.schedule(_SESSION, group.group_id, member_id, timeout_ms,
                                lambda: self._session_expired(group, member_id))

    def _session_expired(self, group: GroupMetadata, member_id: str) -> None:
        share = group.share
        if share is None or member_id not in share.members or self.manager.get_group(group.group_id) is not group:
            return
        records = fence(share, member_id)
        self._apply(group, records)
        log.info("[GroupId %s] Member %s fenced from the group because its session expired.",
                 group.group_id, member_id)
        self.manager.store_consumer_group_records(group.group_id, records, lambda _error: None)

    def on_group_loaded(self, group: GroupMetadata) -> None:
        """A loaded group's members each get a full session to heartbeat to the new coordinator."""
        if group.share is None:
            return
        group.protocol_type = SHARE_PROTOCOL_TYPE
        timeout = self.config_of(group.group_id).session_timeout_ms
        for member_id in group.share.members:
            self._schedule_session(group, member_id, timeout)

    def on_group_unloaded(self, group: GroupMetadata) -> None:
        if group.share is None:
            return
        for member_id in group.share.members:
            self.deadlines.cancel(_SESSION, group.group_id, member_id)
