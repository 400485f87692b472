"""Serves KIP-932 share groups for the group coordinator: runs ShareGroupHeartbeat's steps
(``share_group``) against the cached group, replays their records into it, appends them to
``__consumer_offsets``, keeps each member's session in the heartbeat purgatory, and initializes
the state of the share partitions a heartbeat recorded initializing (Kafka's persister call
after the heartbeat), so that a later heartbeat assigns them."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Callable, Coroutine

from rivulet.common.cluster import MetadataView
from rivulet.common.time import Clock
from rivulet.common.types import TopicPartition
from rivulet.coordinator.modern_group import GroupMember, HeartbeatError
from rivulet.coordinator.modern_group_service import ModernGroupService
from rivulet.coordinator.delayed_ops import MemberDeadlines
from rivulet.coordinator.group_config import GroupConfigs
from rivulet.coordinator.group_metadata import DEAD, EMPTY, GroupMetadata
from rivulet.coordinator import share_offsets
from rivulet.coordinator.group_metadata_manager import GroupMetadataManager
from rivulet.coordinator.share_group import (
    SHARE_PROTOCOL_TYPE,
    Record,
    ShareGroup,
    ShareGroupConfig,
    ShareHeartbeatRequest,
    ShareHeartbeatResult,
    StatePartitions,
    fence,
    heartbeat,
    initialized_record,
    leave,
)
from rivulet.coordinator.share_offsets import (
    NON_EMPTY_MESSAGE,
    PartitionEndsView,
    ShareOffsetsResult,
    ShareOffsetsTopic,
    ShareStateStore,
)
from rivulet.protocol.errors import ApiError, ErrorCode

log = logging.getLogger(__name__)

# A share partition's state initialized without a start offset: share.auto.offset.reset decides
# when its leader first reads it (Kafka's InitializeShareGroupState from a heartbeat).
NO_START_OFFSET = -1


class ShareGroupService(ModernGroupService[ShareGroup]):
    KINDS = ("session",)  # members share partitions: nothing is revoked

    def __init__(self, config: ShareGroupConfig, manager: GroupMetadataManager, metadata: MetadataView,
                 deadlines: MemberDeadlines, clock: Clock, group_configs: GroupConfigs | None = None,
                 share_state: ShareStateStore | None = None) -> None:
        """``share_state``: where share partitions' state is initialized; None (no share
        coordinator) records them initialized at once."""
        super().__init__(manager, deadlines)
        self.config = config
        self.metadata = metadata
        self.clock = clock
        self.group_configs = group_configs
        self.share_state = share_state

    def config_of(self, group_id: str) -> ShareGroupConfig:
        """The broker's settings with the group's own session timeout, heartbeat interval and
        assignment interval."""
        if self.group_configs is None:
            return self.config
        return self.group_configs.share_group_config(group_id, self.config)

    # ------------------------------------------------------------ ShareGroupHeartbeat
    def heartbeat(self, req: ShareHeartbeatRequest, callback: Callable[[ShareHeartbeatResult], None]) -> None:
        """Called by the group coordinator once the request is valid and the group is local;
        answers through ``callback`` once the records of the change are acknowledged."""
        try:
            group, share = self._group_for(req)
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
            self._cancel_all(group.group_id, member_id)
            log.info("[GroupId %s] Member %s has left group.", group.group_id, member_id)
        elif result.session_timeout_ms is not None:
            self._schedule_session(group, member_id, result.session_timeout_ms)
        if not result.records:
            callback(result)
            return

        def stored(error: ErrorCode) -> None:
            callback(result if error == ErrorCode.NONE else ShareHeartbeatResult(error=error, member_id=member_id))
            if error == ErrorCode.NONE and result.initialize:
                self._initialize_state(group, result.initialize)
        self.manager.store_consumer_group_records(group.group_id, result.records, stored)

    def _initialize_state(self, group: GroupMetadata, partitions: StatePartitions) -> None:
        """Initialize the state of share partitions recorded initializing, then record them
        initialized (those that failed leave initializing, for a later heartbeat to retry)."""
        group_id = group.group_id

        def record(done: StatePartitions, failed: StatePartitions) -> None:
            if self.manager.get_group(group_id) is not group or group.share is None:
                return  # deleted, or no longer this coordinator's: its next owner starts again
            self._store(group, [initialized_record(group.share, done, failed)], lambda _error: None)

        state = self.share_state
        if state is None:
            record(partitions, {})
            return

        async def initialize() -> None:
            tps = [(topic_id, name, p) for topic_id, (name, ps) in partitions.items() for p in sorted(ps)]
            outcomes = await asyncio.gather(
                *(state.initialize_share_state(group_id, TopicPartition(name, p), NO_START_OFFSET)
                  for _t, name, p in tps), return_exceptions=True)
            done: dict[uuid.UUID, set[int]] = {}
            failed: dict[uuid.UUID, set[int]] = {}
            for (topic_id, _name, p), outcome in zip(tps, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    if not isinstance(outcome, ApiError):
                        log.error("initializing the share state of %s-%d for group %s failed", _name, p, group_id,
                                  exc_info=outcome)
                    failed.setdefault(topic_id, set()).add(p)
                else:
                    done.setdefault(topic_id, set()).add(p)
            record({t: (partitions[t][0], frozenset(ps)) for t, ps in done.items()},
                   {t: (partitions[t][0], frozenset(ps)) for t, ps in failed.items()})
        asyncio.ensure_future(initialize())

    def _group_for(self, req: ShareHeartbeatRequest) -> tuple[GroupMetadata, ShareGroup]:
        """The share group the heartbeat is for (a new one for a joining member), and its state."""
        group = self.manager.get_group(req.group_id)
        if group is None:
            if req.member_epoch != 0:
                # Kafka's two paths word it differently: a heartbeat's lookup, and a leave's.
                kind = "Share group" if req.member_epoch > 0 else "Group"
                raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"{kind} {req.group_id} not found.")
            group = self._new_group(req.group_id)
        if group.share is None:
            # Kafka does not convert between share groups and other kinds.
            raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {req.group_id} is not a share group.")
        return group, group.share

    def _apply(self, group: GroupMetadata, records: list[Record]) -> None:
        assert group.share is not None
        for key, value in records:
            group.share.replay(key, value)

    # ------------------------------------------------------------ deadlines
    def _state(self, group: GroupMetadata) -> ShareGroup | None:
        return group.share

    def _session_timeout(self, group: GroupMetadata, member: GroupMember) -> int:
        return self.config_of(group.group_id).session_timeout_ms

    def _fence(self, group: GroupMetadata, member_id: str) -> None:
        assert group.share is not None
        records = fence(group.share, member_id)
        self._apply(group, records)
        self.manager.store_consumer_group_records(group.group_id, records, lambda _error: None)

    def on_group_loaded(self, group: GroupMetadata) -> None:
        if group.share is not None:
            group.protocol_type = SHARE_PROTOCOL_TYPE
        super().on_group_loaded(group)
        if group.share is not None and group.share.initializing:
            # Recorded initializing by a coordinator that stopped before it recorded the outcome.
            self._initialize_state(group, dict(group.share.initializing))

    # ------------------------------------------------------------ share-group offsets
    async def describe_offsets(self, group_id: str, topics: list[tuple[str, list[int]]] | None,
                               state: ShareStateStore, ends: PartitionEndsView) -> ShareOffsetsResult:
        """DescribeShareGroupOffsets for one group (``topics`` None: every initialized partition)."""
        if topics is None:
            group = self.manager.get_group(group_id)
            topics = share_offsets.initialized_partitions(group.share if group is not None else None, self.metadata)
        return ShareOffsetsResult(topics=await share_offsets.describe(group_id, topics, self.metadata, state, ends))

    def alter_offsets(self, group_id: str, topics: list[tuple[str, list[tuple[int, int]]]], state: ShareStateStore,
                      callback: Callable[[ShareOffsetsResult], None]) -> None:
        """AlterShareGroupOffsets: an empty share group (made if there is none) gets new
        share-partition start offsets; its partitions are recorded initializing, their state is
        initialized, then they are recorded initialized."""
        group = self.manager.get_group(group_id)
        if group is None:
            group = self._new_group(group_id)
        refusal = _not_empty_share_group(group, group_id)
        if refusal is not None:
            callback(refusal)
            return
        share = group.share
        assert share is not None
        answer, offsets, records = share_offsets.alter_plan(share, topics, self.metadata)
        if not offsets:
            callback(ShareOffsetsResult(topics=answer))
            return

        async def initialize() -> None:
            initialized = {}
            for tp, offset in offsets.items():
                try:
                    await state.initialize_share_state(group_id, tp, offset)
                    initialized[tp] = offset
                except ApiError as e:
                    _failed(answer, e.code, tp, e.message)
            if not initialized:
                callback(ShareOffsetsResult(topics=answer))
                return
            done = [share_offsets.initialized_record(share, initialized, self.metadata)]
            self._store(group, done, lambda e: callback(ShareOffsetsResult(topics=answer) if e == ErrorCode.NONE
                                                         else ShareOffsetsResult(e, None, _failed(answer, e))))

        def stored(error: ErrorCode) -> None:
            if error != ErrorCode.NONE:
                callback(ShareOffsetsResult(error, None, _failed(answer, error)))
            else:
                spawn(initialize(), callback)
        self._store(group, records, stored)

    def delete_offsets(self, group_id: str, names: list[str], state: ShareStateStore,
                       callback: Callable[[ShareOffsetsResult], None]) -> None:
        """DeleteShareGroupOffsets: an empty share group's state of these topics goes; the
        topics are recorded deleting, their state deleted, then they are forgotten."""
        group = self.manager.get_group(group_id)
        refusal = _not_empty_share_group(group, group_id)
        if refusal is not None:
            callback(refusal)
            return
        assert group is not None and group.share is not None
        share = group.share
        to_delete, others, records = share_offsets.delete_plan(share, names, self.metadata)
        if not to_delete:
            callback(ShareOffsetsResult(topics=others))
            return

        async def delete() -> None:
            await state.delete_share_state(group_id, [tp for _name, tps in to_delete.values() for tp in tps])
            deleted = [ShareOffsetsTopic(name, topic_id) for topic_id, (name, _tps) in to_delete.items()]
            self._store(group, [share_offsets.deleted_record(share, set(to_delete))],
                        lambda e: callback(ShareOffsetsResult(topics=deleted + others) if e == ErrorCode.NONE
                                           else ShareOffsetsResult(e)))

        def stored(error: ErrorCode) -> None:
            if error != ErrorCode.NONE:
                callback(ShareOffsetsResult(error))
            else:
                spawn(delete(), callback)
        self._store(group, records, stored)

    def _new_group(self, group_id: str) -> GroupMetadata:
        group = self.manager.add_group(GroupMetadata(group_id, EMPTY, self.clock.milliseconds))
        group.share = ShareGroup(group_id)
        group.protocol_type = SHARE_PROTOCOL_TYPE
        return group

    def _store(self, group: GroupMetadata, records: list[Record], callback: Callable[[ErrorCode], None]) -> None:
        self._apply(group, records)
        self.manager.store_consumer_group_records(group.group_id, records, callback)


def _not_empty_share_group(group: GroupMetadata | None, group_id: str) -> ShareOffsetsResult | None:
    """Kafka's refusals of a share group's offsets being changed: it must be an empty share group."""
    if group is None or group.is_(DEAD):
        return ShareOffsetsResult(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
    if group.share is None:
        return ShareOffsetsResult(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
    if group.share.members:
        return ShareOffsetsResult(ErrorCode.NON_EMPTY_GROUP, NON_EMPTY_MESSAGE)
    return None


def _failed(topics: list[ShareOffsetsTopic], error: ErrorCode, only: TopicPartition | None = None,
            message: str | None = None) -> list[ShareOffsetsTopic]:
    """Every partition that was to be altered (or ``only`` that one) answers ``error``."""
    for t in topics:
        for p in t.partitions:
            if p.error == ErrorCode.NONE and (only is None or only == TopicPartition(t.name, p.partition)):
                p.error, p.error_message = error, message
    return topics


def spawn(coro: Coroutine[object, object, None], callback: Callable[[ShareOffsetsResult], None]) -> None:
    """Run an offsets step that answers through ``callback``; one that fails answers
    UNKNOWN_SERVER_ERROR rather than never."""
    def done(task: asyncio.Future) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("a share-group offsets step failed", exc_info=task.exception())
            callback(ShareOffsetsResult(ErrorCode.UNKNOWN_SERVER_ERROR))
    asyncio.ensure_future(coro).add_done_callback(done)
