"""What the modern groups (KIP-848 consumer groups, KIP-932 share groups, KIP-1071 streams
groups) have in common, each kind keeping only what differs: the group and member states, a
member's fields, the session settings and the heartbeat's errors (their services' common part
is ``modern_group_service``)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Iterable

from rivulet.protocol.errors import ErrorCode

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


class MemberState(enum.IntEnum):
    """Where a member is in its reconciliation, with Kafka's codes in the CurrentMemberAssignment
    records. A streams group names the same codes after tasks rather than partitions."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127
    UNREVOKED_TASKS = 1
    UNRELEASED_TASKS = 2

    @classmethod
    def of(cls, value: int) -> MemberState:
        return cls(value) if value in cls._value2member_map_ else cls.UNKNOWN


class GroupState(str, enum.Enum):
    """A modern group's state as ListGroups and the Describe APIs name it (NotReady: a streams
    group whose topology cannot run yet; a share group is only Empty or Stable)."""

    EMPTY = "Empty"
    NOT_READY = "NotReady"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class GroupSessionConfig:
    """The member session settings of a consumer, share or streams group, which a group's own
    configs override, and the shortest time between two target assignments (KIP-1263: the
    broker's ``group.<kind>.assignment.interval.ms``, a group's ``<kind>.assignment.interval.ms``)."""

    heartbeat_interval_ms: int = 5000
    session_timeout_ms: int = 45000
    assignment_interval_ms: int = 1000


def next_group_epoch(epoch: int) -> int:
    """The group epoch after a change. As Kafka 4.3.1 (KAFKA-20268), a new group stands at epoch 1
    with an empty target assignment at epoch 1, so its first change moves it to 2."""
    return 2 if epoch == 0 else epoch + 1


def assignment_due(assigned_at_ms: float | None, now_ms: float, interval_ms: int) -> bool:
    """Whether a group whose epoch moved past its target assignment may compute a new one now: its
    first at once, a later one once the assignment interval since the last has passed. Until then
    the members keep the present target; as Kafka 4.3.1, no timer computes it, a heartbeat after
    the interval does."""
    return assigned_at_ms is None or now_ms >= assigned_at_ms + interval_ms


@dataclass(frozen=True)
class GroupMember:
    """What a member of a consumer, share or streams group has whatever its kind."""

    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = 0
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True)
class RevokingMember(GroupMember):
    """A member of a group whose work moves only once its old owner gave it up (consumer and
    streams groups): its reconciliation state, its static id and its rebalance timeout."""

    state: MemberState = MemberState.STABLE
    instance_id: str | None = None
    rebalance_timeout_ms: int = -1


def reconciliation_state(members: Iterable[RevokingMember], group_epoch: int, target_epoch: int) -> GroupState:
    """A non-empty group's state from its epochs and its members: Assigning until the target
    caught up with the group epoch, Reconciling until every member reached it."""
    if group_epoch > target_epoch:
        return GroupState.ASSIGNING
    if any(m.state != MemberState.STABLE or m.member_epoch != target_epoch for m in members):
        return GroupState.RECONCILING
    return GroupState.STABLE


class HeartbeatError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def fenced_epoch(kind: str, received: int, known: int, owned: str) -> HeartbeatError:
    """FENCED_MEMBER_EPOCH for a ``kind`` ("consumer", "share", "streams") group member whose
    epoch is not the coordinator's; ``owned`` names what it must give up."""
    relation = "greater" if received > known else "smaller"
    return HeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH,
                          f"The {kind} group member has a {relation} member epoch ({received}) than the one known by "
                          f"the group coordinator ({known}). The member must abandon all its {owned} and rejoin.")
