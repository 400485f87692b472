"""The group coordinator's delayed operations (Kafka's DelayedJoin, InitialDelayedJoin,
DelayedSync and DelayedHeartbeat). Each is a thin shell: the decisions live in the
coordinator, which owns the group state."""

from __future__ import annotations

from typing import Callable, Hashable, Protocol

from rivulet.coordinator.group_metadata import GroupMetadata
from rivulet.delayed import DelayedOperation, DelayedOperationPurgatory


class GroupCoordinator(Protocol):
    """The decisions these operations defer to (``group_coordinator.GroupCoordinator``)."""

    def try_complete_join(self, group: GroupMetadata, force_complete: Callable[[], bool]) -> bool: ...

    def on_complete_join(self, group: GroupMetadata) -> None: ...

    def try_complete_pending_sync(self, group: GroupMetadata, generation_id: int,
                                  force_complete: Callable[[], bool]) -> bool: ...

    def on_expire_pending_sync(self, group: GroupMetadata, generation_id: int) -> None: ...

    def try_complete_heartbeat(self, group: GroupMetadata, member_id: str, is_pending: bool,
                               force_complete: Callable[[], bool]) -> bool: ...

    def on_expire_heartbeat(self, group: GroupMetadata, member_id: str, is_pending: bool) -> None: ...


def join_key(group_id: str) -> Hashable:
    return ("join", group_id)


def sync_key(group_id: str) -> Hashable:
    return ("sync", group_id)


def member_key(group_id: str, member_id: str) -> Hashable:
    return ("member", group_id, member_id)


class DelayedJoin(DelayedOperation):
    """PreparingRebalance: completes once every known member has rejoined, or at the
    rebalance timeout, when the laggards are dropped."""

    def __init__(self, coordinator: GroupCoordinator, group: GroupMetadata, rebalance_timeout_ms: int) -> None:
        super().__init__(rebalance_timeout_ms)
        self.coordinator = coordinator
        self.group = group

    def try_complete(self) -> bool:
        return self.coordinator.try_complete_join(self.group, self.force_complete)

    def on_complete(self) -> None:
        self.coordinator.on_complete_join(self.group)

    def on_expiration(self) -> None:
        pass


class InitialDelayedJoin(DelayedJoin):
    """The first rebalance of an Empty group waits group.initial.rebalance.delay.ms, and again
    each time a new member arrived meanwhile, up to the rebalance timeout, so a group starting
    many consumers at once settles in one rebalance instead of many.

    When the delay is over, the decision waits behind the requests already received
    (``after_io``), as Kafka 4.3's coordinator runtime queues an expired timer's operation
    behind the events already queued: JoinGroups that had arrived join this round, even with
    a delay of 0."""

    def __init__(self, coordinator: GroupCoordinator, purgatory: DelayedOperationPurgatory, group: GroupMetadata,
                 configured_delay_ms: int, delay_ms: int, remaining_ms: int,
                 after_io: Callable[[Callable[[], object]], None]) -> None:
        super().__init__(coordinator, group, delay_ms)
        self.purgatory = purgatory
        self.configured_delay_ms = configured_delay_ms
        self.delay_ms = delay_ms
        self.remaining_ms = remaining_ms
        self.after_io = after_io
        self.generation_id = group.generation_id  # of the rebalance it delays

    def try_complete(self) -> bool:
        return False  # only time completes it

    def on_complete(self) -> None:
        self.after_io(self._delay_over)

    def _delay_over(self) -> None:
        group = self.group
        if group.generation_id != self.generation_id:
            return  # a session expiry already ended this join phase, as Kafka cancels the timer
        if group.new_member_added and self.remaining_ms != 0:
            group.new_member_added = False
            delay = min(self.configured_delay_ms, self.remaining_ms)
            remaining = max(self.remaining_ms - self.delay_ms, 0)
            self.purgatory.try_complete_else_watch(
                InitialDelayedJoin(self.coordinator, self.purgatory, group, self.configured_delay_ms, delay,
                                   remaining, self.after_io),
                [join_key(group.group_id)])
        else:
            super().on_complete()


class DelayedSync(DelayedOperation):
    """CompletingRebalance: members that never send SyncGroup within the rebalance timeout
    are removed and the group rebalances without them."""

    def __init__(self, coordinator: GroupCoordinator, group: GroupMetadata, generation_id: int,
                 rebalance_timeout_ms: int) -> None:
        super().__init__(rebalance_timeout_ms)
        self.coordinator = coordinator
        self.group = group
        self.generation_id = generation_id

    def try_complete(self) -> bool:
        return self.coordinator.try_complete_pending_sync(self.group, self.generation_id, self.force_complete)

    def on_complete(self) -> None:
        pass

    def on_expiration(self) -> None:
        self.coordinator.on_expire_pending_sync(self.group, self.generation_id)


class DelayedHeartbeat(DelayedOperation):
    """A member's session: expires unless a heartbeat (or a parked join/sync) satisfies it."""

    def __init__(self, coordinator: GroupCoordinator, group: GroupMetadata, member_id: str, is_pending: bool,
                 timeout_ms: int) -> None:
        super().__init__(timeout_ms)
        self.coordinator = coordinator
        self.group = group
        self.member_id = member_id
        self.is_pending = is_pending

    def try_complete(self) -> bool:
        return self.coordinator.try_complete_heartbeat(self.group, self.member_id, self.is_pending,
                                                       self.force_complete)

    def on_complete(self) -> None:
        pass

    def on_expiration(self) -> None:
        self.coordinator.on_expire_heartbeat(self.group, self.member_id, self.is_pending)


class DelayedDeadline(DelayedOperation):
    """A KIP-848 member's session or revocation deadline. It completes unfired once it is no
    longer the live one (a heartbeat replaced it, or it was cancelled), and runs ``on_expire``
    if it is still live when its time comes."""

    def __init__(self, delay_ms: int, still_live: Callable[[], bool], on_expire: Callable[[], None]) -> None:
        super().__init__(delay_ms)
        self.still_live = still_live
        self.on_expire = on_expire

    def try_complete(self) -> bool:
        return False if self.still_live() else self.force_complete()

    def on_complete(self) -> None:
        pass

    def on_expiration(self) -> None:
        if self.still_live():
            self.on_expire()


class MemberDeadlines:
    """The deadlines of modern groups' members (a session, a revocation, a classic member's
    rejoin and sync), one live deadline per (kind, group, member) in the heartbeat purgatory:
    scheduling one again replaces it, and one that is no longer live completes unfired."""

    def __init__(self, purgatory: DelayedOperationPurgatory) -> None:
        self.purgatory = purgatory
        self._live: dict[tuple[str, str, str], object] = {}

    def __contains__(self, slot: tuple[str, str, str]) -> bool:
        return slot in self._live

    def schedule(self, kind: str, group_id: str, member_id: str, timeout_ms: int,
                 on_expire: Callable[[], None]) -> None:
        slot = (kind, group_id, member_id)
        token = object()
        self._live[slot] = token
        key = (kind,) + member_key(group_id, member_id)
        self.purgatory.check_and_complete(key)  # the deadline it replaces

        def fire() -> None:
            self._live.pop(slot, None)
            on_expire()
        self.purgatory.try_complete_else_watch(DelayedDeadline(
            timeout_ms, lambda: self._live.get(slot) is token, fire), [key])

    def cancel(self, kind: str, group_id: str, member_id: str) -> None:
        if self._live.pop((kind, group_id, member_id), None) is not None:
            self.purgatory.check_and_complete((kind,) + member_key(group_id, member_id))
