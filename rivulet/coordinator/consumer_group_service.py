"""Serves KIP-848 consumer groups for the group coordinator: runs ConsumerGroupHeartbeat's steps
(``consumer_heartbeat``) and those of classic members' requests (``consumer_group_classic``)
against the cached group, replays their records into it, appends them to ``__consumer_offsets``,
converts groups between the protocols (``group_migration``), and keeps each member's deadlines
in the heartbeat purgatory: its session, its revocation, and a classic member's rejoin and sync."""

from __future__ import annotations

import logging
from typing import Callable, Protocol

from rivulet.common.cluster import MetadataView
from rivulet.common.time import Clock
from rivulet.coordinator import consumer_group_classic as classic
from rivulet.coordinator.consumer_group import (
    ConsumerGroup,
    ConsumerGroupMember,
    Record,
)
from rivulet.coordinator.modern_group import GroupMember, HeartbeatError, MemberState
from rivulet.coordinator.modern_group_service import ModernGroupService
from rivulet.coordinator.consumer_heartbeat import (
    ConsumerGroupConfig,
    HeartbeatRequest,
    HeartbeatResult,
    Step,
    fence,
    heartbeat,
    leave,
)
from rivulet.coordinator.delayed_ops import MemberDeadlines
from rivulet.coordinator.group_config import GroupConfigs
from rivulet.coordinator.group_metadata import (
    CONSUMER_PROTOCOL_TYPE,
    EMPTY,
    NO_LEADER,
    GroupMetadata,
    JoinCallback,
    JoinGroupResult,
    SyncCallback,
    SyncGroupResult,
)
from rivulet.coordinator.group_migration import (
    ConversionError,
    classic_assignment,
    classic_members,
    consumer_group_records,
    downgrades,
    upgrade_refused,
)
from rivulet.coordinator.group_metadata_manager import GroupMetadataManager
from rivulet.delayed.purgatory import DelayedOperationPurgatory
from rivulet.protocol.errors import ErrorCode

log = logging.getLogger(__name__)


LeaveResult = tuple[str, "str | None", ErrorCode]


class ClassicGroupControl(Protocol):
    """The classic side of the group coordinator, which a group leaves or comes back to."""

    def release_classic_members(self, group: GroupMetadata) -> None:
        """``group`` became a consumer group: answer its members' parked JoinGroup and SyncGroup
        requests (they join again), drop them from the classic state and stop their timers."""

    def rebalance_restored_group(self, group: GroupMetadata, reason: str) -> None:
        """``group`` is classic again, Stable with its members: start their sessions and a rebalance."""


class ConsumerGroupService(ModernGroupService[ConsumerGroup]):
    KINDS = ("session", "revocation", "join", "sync")  # a classic member's rejoin and sync too
    REVOKED = "partitions"

    def __init__(self, config: ConsumerGroupConfig, manager: GroupMetadataManager, metadata: MetadataView,
                 purgatory: DelayedOperationPurgatory, clock: Clock, group_configs: GroupConfigs | None = None,
                 classic_control: ClassicGroupControl | None = None) -> None:
        super().__init__(manager, MemberDeadlines(purgatory))
        self.config = config
        self.classic_control = classic_control
        self.group_configs = group_configs
        self.metadata = metadata
        self.purgatory = purgatory
        self.clock = clock

    def config_of(self, group_id: str) -> ConsumerGroupConfig:
        """The broker's settings with the group's own session timeout, heartbeat interval and
        assignment interval."""
        if self.group_configs is None:
            return self.config
        return self.group_configs.consumer_group_config(group_id, self.config)

    # ------------------------------------------------------------ ConsumerGroupHeartbeat
    def heartbeat(self, req: HeartbeatRequest, callback: Callable[[HeartbeatResult], None]) -> None:
        """Called by the group coordinator once the request is valid and the group is local;
        answers through ``callback`` once the records of the change are acknowledged."""
        try:
            group, consumer = self._group_for(req)
            if req.member_epoch < 0 and req.member_epoch != -2 and \
                    downgrades(consumer, req.member_id, self.config_of(req.group_id)):
                self._downgrade(group, req.member_id, lambda error: callback(
                    HeartbeatResult(error=error, member_id=req.member_id, member_epoch=-1)))
                return
            if req.member_epoch < 0:
                result = leave(consumer, req)
            else:
                result = heartbeat(consumer, req, self.metadata, self.config_of(req.group_id),
                                   self.clock.milliseconds())
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

    def _group_for(self, req: HeartbeatRequest) -> tuple[GroupMetadata, ConsumerGroup]:
        """The group the heartbeat is for, made a consumer group if it may be, and its state."""
        group = self._find_or_make(req)
        assert group.consumer is not None
        return group, group.consumer

    def _find_or_make(self, req: HeartbeatRequest) -> GroupMetadata:
        group = self.manager.get_group(req.group_id)
        if group is None:
            if req.member_epoch != 0:
                raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group {req.group_id} not found.")
            group = self.manager.add_group(GroupMetadata(req.group_id, EMPTY, self.clock.milliseconds))
        if group.share is not None:
            raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {req.group_id} is not a consumer group.")
        if group.consumer is None:
            if group.size > 0 or not group.is_(EMPTY):
                refused = "the member is not joining" if req.member_epoch != 0 else \
                    upgrade_refused(group, self.config_of(req.group_id))
                if refused is not None:
                    log.info("Cannot upgrade classic group %s to consumer group because %s.", req.group_id, refused)
                    raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND,
                                         f"Group {req.group_id} is not a consumer group.")
                self._upgrade(group)
                return group
            # An empty classic group (only offsets) becomes a consumer group and keeps its offsets.
            group.consumer = ConsumerGroup(req.group_id)
            group.protocol_type = CONSUMER_PROTOCOL_TYPE
        return group

    def _apply(self, group: GroupMetadata, records: list[Record]) -> None:
        assert group.consumer is not None
        for key, value in records:
            group.consumer.replay(key, value)

    # ------------------------------------------------------------ online migration
    def _upgrade(self, group: GroupMetadata) -> None:
        """A classic group becomes a consumer group: its members keep what they own, and rejoin
        (as classic members of it) when their next heartbeat tells them to."""
        try:
            records = consumer_group_records(group, self.metadata)
        except ConversionError as e:
            log.warning("%s", e)
            raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, str(e)) from None
        group.consumer = ConsumerGroup(group.group_id)
        group.protocol_type = CONSUMER_PROTOCOL_TYPE
        if self.classic_control is not None:
            self.classic_control.release_classic_members(group)
        self._apply(group, records)
        for member in group.consumer.members.values():
            assert member.classic is not None
            self._schedule("session", group, member.member_id, member.classic.session_timeout_ms,
                           self._session_expired)
        log.info("[GroupId %s] Converted the classic group to a consumer group.", group.group_id)
        self.manager.store_group_conversion(group, records, None, lambda _error: None)

    def _downgrade(self, group: GroupMetadata, leaving_member_id: str, done: Callable[[ErrorCode], None]) -> None:
        """The last member of the consumer protocol leaves: the classic members that remain form
        a classic group again, at the group epoch as its generation, and rebalance."""
        consumer = group.consumer
        assert consumer is not None
        records = consumer.tombstone_records()
        members = classic_members(consumer, leaving_member_id)
        for member_id in list(consumer.members):
            self._cancel_all(group.group_id, member_id)
        group.restore_classic_members(consumer.group_epoch, members)
        assert group.protocol_name is not None
        for m in members:
            m.assignment = classic_assignment(consumer, m, group.protocol_name, self.metadata)
        log.info("[GroupId %s] Converted the consumer group to a classic group, member %s leaving.",
                 group.group_id, leaving_member_id)
        self.manager.store_group_conversion(group, records, {m.member_id: m.assignment for m in members}, done)
        if self.classic_control is not None:
            self.classic_control.rebalance_restored_group(
                group, f"Downgrade group {group.group_id} from consumer to classic.")

    # ------------------------------------------------------------ classic members (online migration)
    def classic_join(self, group: GroupMetadata, req: classic.ClassicJoin, callback: JoinCallback) -> None:
        """JoinGroup of a classic member to a consumer group with members; answered once the
        records of its step are acknowledged, with its member epoch as the generation."""
        consumer = group.consumer
        assert consumer is not None
        result = classic.join(consumer, req, self.metadata, self.config_of(group.group_id),
                              self.clock.milliseconds())
        if result.error != ErrorCode.NONE or result.step is None:
            callback(JoinGroupResult(result.member_id, result.error))
            return
        step = result.step
        self._apply(group, step.records)
        if result.replaced is not None:
            self._cancel_all(group.group_id, result.replaced)
        self._arm_step(group, step)
        member_id = result.member_id

        def stored(error: ErrorCode) -> None:
            if error != ErrorCode.NONE:
                callback(JoinGroupResult(member_id, error))
                return
            if group.consumer is not None and member_id in group.consumer.members:
                self._cancel("join", group.group_id, member_id)
                self._schedule("session", group, member_id, req.session_timeout_ms, self._session_expired)
                self._schedule("sync", group, member_id, max(req.rebalance_timeout_ms, 0), self._sync_expired)
            callback(JoinGroupResult(member_id, generation_id=result.generation_id,
                                     protocol_type=CONSUMER_PROTOCOL_TYPE, protocol_name=result.protocol_name,
                                     leader_id=NO_LEADER))
        self._store(group, step.records, stored)

    def classic_sync(self, group: GroupMetadata, member_id: str, instance_id: str | None, generation_id: int,
                     protocol_type: str | None, protocol_name: str | None, callback: SyncCallback) -> None:
        consumer = group.consumer
        assert consumer is not None
        try:
            assignment = classic.sync(consumer, member_id, instance_id, generation_id, protocol_type,
                                      protocol_name, self.metadata)
        except HeartbeatError as e:
            if e.code == ErrorCode.REBALANCE_IN_PROGRESS:
                self._await_rejoin(group, member_id)
            callback(SyncGroupResult(e.code))
            return
        self._cancel("sync", group.group_id, member_id)
        self._renew_classic_session(group, member_id)
        callback(SyncGroupResult(ErrorCode.NONE, protocol_type, protocol_name, assignment))

    def classic_heartbeat(self, group: GroupMetadata, member_id: str, instance_id: str | None,
                          generation_id: int) -> ErrorCode:
        consumer = group.consumer
        assert consumer is not None
        try:
            error = classic.heartbeat(consumer, member_id, instance_id, generation_id)
        except HeartbeatError as e:
            return e.code
        self._renew_classic_session(group, member_id)
        if error == ErrorCode.REBALANCE_IN_PROGRESS:
            self._await_rejoin(group, member_id)
        return error

    def classic_leave(self, group: GroupMetadata, leaving: list[tuple[str, str | None, str | None]],
                      callback: Callable[[ErrorCode, list[LeaveResult]], None]) -> None:
        consumer = group.consumer
        assert consumer is not None
        results, removed, records = classic.leave(consumer, leaving)
        self._apply(group, records)
        for member_id in removed:
            self._cancel_all(group.group_id, member_id)
            log.info("[GroupId %s] Member %s has left group through explicit `LeaveGroup` request.",
                     group.group_id, member_id)
        self._store(group, records, lambda error: callback(ErrorCode.NONE, results) if error == ErrorCode.NONE
                    else callback(ErrorCode.NONE, [(m, i, error) for m, i, _ in results]))

    def _renew_classic_session(self, group: GroupMetadata, member_id: str) -> None:
        member = group.consumer.members.get(member_id) if group.consumer is not None else None
        if member is not None and member.classic is not None:
            self._schedule("session", group, member_id, member.classic.session_timeout_ms, self._session_expired)

    def _await_rejoin(self, group: GroupMetadata, member_id: str) -> None:
        """A classic member told to rejoin has its rebalance timeout to do it."""
        member = group.consumer.members.get(member_id) if group.consumer is not None else None
        if member is not None and ("join", group.group_id, member_id) not in self.deadlines:
            self._schedule("join", group, member_id, max(member.rebalance_timeout_ms, 0), self._join_expired)

    def _arm_step(self, group: GroupMetadata, step: Step) -> None:
        result = HeartbeatResult(member_id=step.member.member_id)
        step.arm_revocation(result)
        self._arm(group, result)

    def _store(self, group: GroupMetadata, records: list[Record], done: Callable[[ErrorCode], None]) -> None:
        if records:
            self.manager.store_consumer_group_records(group.group_id, records, done)
        else:
            done(ErrorCode.NONE)

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

    def _state(self, group: GroupMetadata) -> ConsumerGroup | None:
        return group.consumer

    def _session_timeout(self, group: GroupMetadata, member: GroupMember) -> int:
        if isinstance(member, ConsumerGroupMember) and member.classic is not None:
            return member.classic.session_timeout_ms
        return self.config_of(group.group_id).session_timeout_ms

    def _revoking(self, member: GroupMember) -> bool:
        return isinstance(member, ConsumerGroupMember) and member.state == MemberState.UNREVOKED_PARTITIONS

    def _join_expired(self, group: GroupMetadata, member_id: str, _epoch: int) -> None:
        if self._live(group, member_id) is not None:
            self._fence(group, member_id)
            log.info("[GroupId %s] Member %s fenced from the group because it did not rejoin within its "
                     "rebalance timeout.", group.group_id, member_id)

    def _sync_expired(self, group: GroupMetadata, member_id: str, _epoch: int) -> None:
        if self._live(group, member_id) is not None:
            self._fence(group, member_id)
            log.info("[GroupId %s] Member %s fenced from the group because it did not sync within its "
                     "rebalance timeout.", group.group_id, member_id)

    def _fence(self, group: GroupMetadata, member_id: str) -> None:
        consumer = group.consumer
        assert consumer is not None
        if downgrades(consumer, member_id, self.config_of(group.group_id)):
            self._downgrade(group, member_id, lambda _error: None)
            return
        records = fence(consumer, member_id)
        self._apply(group, records)
        self._cancel_all(group.group_id, member_id)
        self.manager.store_consumer_group_records(group.group_id, records, lambda _error: None)
