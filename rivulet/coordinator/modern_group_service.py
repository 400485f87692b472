"""The common part of the modern groups' services (consumer, share and streams groups): their
members' deadlines in the heartbeat purgatory."""

from __future__ import annotations

import logging
from typing import Callable, Generic, Mapping, Protocol, TypeVar

from rivulet.coordinator.delayed_ops import MemberDeadlines
from rivulet.coordinator.group_metadata import GroupMetadata
from rivulet.coordinator.group_metadata_manager import GroupMetadataManager
from rivulet.coordinator.modern_group import GroupMember, RevokingMember

log = logging.getLogger(__name__)


class MemberTable(Protocol):
    """A modern group's state as the services' deadlines read it."""

    @property
    def members(self) -> Mapping[str, GroupMember]: ...


S = TypeVar("S", bound=MemberTable)


class ModernGroupService(Generic[S]):
    """The member deadlines of one kind of modern group, in the heartbeat purgatory: a session
    (re)armed by each heartbeat, and for a member that must give work up, a revocation of its
    rebalance timeout. A deadline that fires fences the member (``_fence``) if it is still the
    one it was armed for; a group loaded from ``__consumer_offsets`` gives every member a full
    session, and one unloaded cancels them."""

    KINDS: tuple[str, ...] = ("session", "revocation")
    REVOKED = "work"  # what a revoking member gives up, for the log

    def __init__(self, manager: GroupMetadataManager, deadlines: MemberDeadlines) -> None:
        self.manager = manager
        self.deadlines = deadlines

    # -- what each kind says
    def _state(self, group: GroupMetadata) -> S | None:
        """The group's state of this kind, or None if it is of another."""
        raise NotImplementedError

    def _fence(self, group: GroupMetadata, member_id: str) -> None:
        """Remove a live member (``_live`` holds) and store the records of its going."""
        raise NotImplementedError

    def _session_timeout(self, group: GroupMetadata, member: GroupMember) -> int:
        raise NotImplementedError

    def _revoking(self, member: GroupMember) -> bool:
        """Whether the member has work it was told to give up (its revocation deadline runs)."""
        return False

    # -- shared
    def _live(self, group: GroupMetadata, member_id: str) -> S | None:
        """The group's state if ``member_id`` is still in it and this coordinator still has it."""
        state = self._state(group)
        if state is None or member_id not in state.members or self.manager.get_group(group.group_id) is not group:
            return None
        return state

    def _schedule(self, kind: str, group: GroupMetadata, member_id: str, timeout_ms: int,
                  expired: Callable[[GroupMetadata, str, int], None]) -> None:
        """Arm ``kind`` for the member at its present epoch (``expired`` gets that epoch)."""
        state = self._state(group)
        member = state.members.get(member_id) if state is not None else None
        epoch = member.member_epoch if member is not None else -1
        self.deadlines.schedule(kind, group.group_id, member_id, timeout_ms, lambda: expired(group, member_id, epoch))

    def _cancel(self, kind: str, group_id: str, member_id: str) -> None:
        self.deadlines.cancel(kind, group_id, member_id)

    def _cancel_all(self, group_id: str, member_id: str) -> None:
        for kind in self.KINDS:
            self._cancel(kind, group_id, member_id)

    def _schedule_session(self, group: GroupMetadata, member_id: str, timeout_ms: int) -> None:
        self._schedule("session", group, member_id, timeout_ms, self._session_expired)

    def _schedule_revocation(self, group: GroupMetadata, member_id: str, timeout_ms: int) -> None:
        self._schedule("revocation", group, member_id, max(timeout_ms, 0), self._revocation_expired)

    def _session_expired(self, group: GroupMetadata, member_id: str, _epoch: int) -> None:
        if self._live(group, member_id) is None:
            return
        self._fence(group, member_id)
        log.info("[GroupId %s] Member %s fenced from the group because its session expired.",
                 group.group_id, member_id)

    def _revocation_expired(self, group: GroupMetadata, member_id: str, epoch: int) -> None:
        state = self._live(group, member_id)
        member = state.members[member_id] if state is not None else None
        if member is None or not self._revoking(member) or member.member_epoch != epoch:
            return
        self._fence(group, member_id)
        log.info("[GroupId %s] Member %s fenced from the group because it failed to revoke %s within its "
                 "rebalance timeout.", group.group_id, member_id, self.REVOKED)

    def on_group_loaded(self, group: GroupMetadata) -> None:
        """A loaded group's members each get a full session to heartbeat to the new coordinator,
        and one still revoking its rebalance timeout to finish."""
        state = self._state(group)
        if state is None:
            return
        for member in list(state.members.values()):
            self._schedule_session(group, member.member_id, self._session_timeout(group, member))
            if self._revoking(member) and isinstance(member, RevokingMember):
                self._schedule_revocation(group, member.member_id, member.rebalance_timeout_ms)

    def on_group_unloaded(self, group: GroupMetadata) -> None:
        state = self._state(group)
        if state is None:
            return
        for member_id in list(state.members):
            self._cancel_all(group.group_id, member_id)
