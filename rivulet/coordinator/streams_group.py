"""KIP-1071 streams groups as the coordinator keeps them (Kafka's StreamsGroup and
StreamsGroupMember), and StreamsGroupHeartbeat's steps.

A streams group is a modern group whose unit of work is a task (a subtopology and a partition)
rather than a partition: the members send the application's topology when they join, the
coordinator works out the internal topics it needs (repartition topics sized from their writers,
changelogs one partition per task), and a server-side assignor hands out active and standby
tasks. As in a KIP-848 consumer group an active task moves only once its old owner revoked it:
the old owner keeps its epoch until it reports the task gone, and the new one is given the task
only after that.

The state changes in memory; the service (``streams_group_service``) writes the ``StreamsGroup*``
records of ``__consumer_offsets`` that changed (``snapshot``), which a coordinator taking the
group over replays, keeps the sessions and creates the internal topics.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Mapping, TypeVar

from rivulet.common.cluster import MetadataView
from rivulet.coordinator.modern_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    GroupSessionConfig,
    GroupState,
    HeartbeatError,
    MemberState,
    RevokingMember,
    assignment_due,
    fenced_epoch,
    next_group_epoch,
    reconciliation_state,
)
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages import (
    streams_group_current_member_assignment_value as cav,
    streams_group_heartbeat_request as rq,
    streams_group_member_metadata_value as mv,
    streams_group_metadata_value as mdv,
    streams_group_target_assignment_member_value as tav,
    streams_group_topology_value as tv,
)
from rivulet.protocol.messages.streams_group_current_member_assignment_key import (
    StreamsGroupCurrentMemberAssignmentKey,
)
from rivulet.protocol.messages.streams_group_current_member_assignment_value import (
    StreamsGroupCurrentMemberAssignmentValue,
)
from rivulet.protocol.messages.streams_group_heartbeat_request import Subtopology, Topology
from rivulet.protocol.messages.streams_group_member_metadata_key import StreamsGroupMemberMetadataKey
from rivulet.protocol.messages.streams_group_member_metadata_value import StreamsGroupMemberMetadataValue
from rivulet.protocol.messages.streams_group_metadata_key import StreamsGroupMetadataKey
from rivulet.protocol.messages.streams_group_metadata_value import StreamsGroupMetadataValue
from rivulet.protocol.messages.streams_group_target_assignment_member_key import (
    StreamsGroupTargetAssignmentMemberKey,
)
from rivulet.protocol.messages.streams_group_target_assignment_member_value import (
    StreamsGroupTargetAssignmentMemberValue,
)
from rivulet.protocol.messages.streams_group_target_assignment_metadata_key import (
    StreamsGroupTargetAssignmentMetadataKey,
)
from rivulet.protocol.messages.streams_group_target_assignment_metadata_value import (
    StreamsGroupTargetAssignmentMetadataValue,
)
from rivulet.protocol.messages.streams_group_topology_key import StreamsGroupTopologyKey
from rivulet.protocol.messages.streams_group_topology_value import StreamsGroupTopologyValue

STREAMS_PROTOCOL_TYPE = "streams"
ASSIGNOR_NAME = "sticky"  # Kafka 4.3's only server-side streams assignor
# Kafka Streams' defaults, which the coordinator hands to its members.
ACCEPTABLE_RECOVERY_LAG = 10000
TASK_OFFSET_INTERVAL_MS = 60000

T = TypeVar("T")
Record = tuple[object, object]
"""A ``__consumer_offsets`` record of a streams group: its key struct, and its value or None."""
Tasks = Mapping[str, frozenset[int]]
"""Tasks by subtopology id: the partitions of each."""


class StatusCode(enum.IntEnum):
    """The status codes of StreamsGroupHeartbeatResponse (KIP-1071)."""

    STALE_TOPOLOGY = 0
    MISSING_SOURCE_TOPICS = 1
    INCORRECTLY_PARTITIONED_TOPICS = 2
    MISSING_INTERNAL_TOPICS = 3
    SHUTDOWN_APPLICATION = 4
    ASSIGNMENT_DELAYED = 5


@dataclass(frozen=True)
class StreamsGroupConfig(GroupSessionConfig):
    """The broker's ``group.streams.*`` settings (a group's own configs override them all)."""

    num_standby_replicas: int = 0
    max_size: int = 2**31 - 1  # group.streams.max.size: members beyond it are refused
    # How long a new group waits for more members before its first assignment (Kafka's
    # group.streams.initial.rebalance.delay.ms, and a group's streams.initial.rebalance.delay.ms).
    initial_rebalance_delay_ms: int = 3000


@dataclass(frozen=True)
class Assignment:
    active: Tasks = field(default_factory=dict)
    standby: Tasks = field(default_factory=dict)
    warmup: Tasks = field(default_factory=dict)


@dataclass(frozen=True)
class StreamsGroupMember(RevokingMember):
    topology_epoch: int = 0
    process_id: str = ""
    user_endpoint: tuple[str, int] | None = None
    client_tags: tuple[tuple[str, str], ...] = ()
    assigned: Assignment = field(default_factory=Assignment)
    # Tasks the member was told to give up and has not yet reported gone.
    pending_revocation: Assignment = field(default_factory=Assignment)


@dataclass(frozen=True)
class EndpointPartitions:
    """What a member with an application endpoint holds, as the topic partitions Interactive
    Queries route by: its active and standby tasks' source and repartition-source partitions."""

    host: str
    port: int
    active: list[tuple[str, list[int]]]
    standby: list[tuple[str, list[int]]]


@dataclass(frozen=True)
class TopicNeed:
    """An internal topic the topology needs: its partitions, replication factor (0: the
    broker's default.replication.factor) and configs."""

    name: str
    partitions: int
    configs: tuple[tuple[str, str], ...] = ()
    replication_factor: int = 0


@dataclass
class ConfiguredTopology:
    """The topology checked against the cluster (Kafka's ConfiguredTopology): how many tasks each
    subtopology has, the internal topics that do not exist yet, and why it cannot run if not."""

    tasks: dict[str, int] = field(default_factory=dict)
    missing_internal: list[TopicNeed] = field(default_factory=list)
    status: list[tuple[StatusCode, str]] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        return not self.status and not self.missing_internal


@dataclass
class TaskProcesses:
    """Kafka's current task-to-process maps of a streams group: a task assigned elsewhere, or still
    on its way out of a process, is not handed out again until it is released."""

    active: dict[tuple[str, int], str] = field(default_factory=dict)
    standby: dict[tuple[str, int], set[str]] = field(default_factory=dict)
    warmup: dict[tuple[str, int], set[str]] = field(default_factory=dict)

    def on(self, task: tuple[str, int], process_id: str) -> bool:
        """Whether ``process_id`` holds the task as a standby or warm-up task."""
        return process_id in self.standby.get(task, ()) or process_id in self.warmup.get(task, ())


class StreamsGroup:
    """One streams group's state."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.members: dict[str, StreamsGroupMember] = {}
        self.topology: Topology | None = None
        self.configured: ConfiguredTopology | None = None
        self.partition_hash = 0  # the partition counts of the topics the topology reads
        self.target: dict[str, Assignment] = {}
        self.target_epoch = 0
        self.endpoint_information_epoch = 0
        self.shutdown_requested_by: str | None = None  # the first member asking, until the group empties
        # The assignment settings of the last group epoch (Kafka's LastAssignmentConfigs): another
        # value at a heartbeat moves the group epoch, so that the tasks are assigned again with it.
        self.assignment_configs: dict[str, str] = {}
        self.gone_members: set[str] = set()  # removed since their tombstones were last written
        # The initial rebalance delay of a group a first member joined is running (in memory only:
        # as Kafka's timer, it is not in the records, so a coordinator loading the group assigns at once).
        self.initial_delay_running = False
        self.assigned_at_ms: float | None = None  # when the target was last computed (monotonic; in memory only)

    def state(self) -> GroupState:
        if not self.members:
            return GroupState.EMPTY
        if self.configured is None or not self.configured.ready:
            return GroupState.NOT_READY
        return reconciliation_state(self.members.values(), self.group_epoch, self.target_epoch)

    def replay(self, key: object, value: object) -> None:
        """Apply one ``StreamsGroup*`` record loaded from ``__consumer_offsets``."""
        _replay(self, key, value)

    def delete_records(self) -> list[Record]:
        """Removing the group (it must be empty): its records' tombstones, the group's last."""
        gid = self.group_id
        records: list[Record] = [r for m in self.members for r in member_tombstones(gid, m)]
        return records + [(StreamsGroupTargetAssignmentMetadataKey(group_id=gid), None),
                          (StreamsGroupTopologyKey(group_id=gid), None), (StreamsGroupMetadataKey(group_id=gid), None)]

    def task_processes(self) -> TaskProcesses:
        """The processes holding each task, as each member is assigned it or is still revoking it."""
        held = TaskProcesses()
        for m in self.members.values():
            for tasks in (m.assigned, m.pending_revocation):
                for kind, where in ((tasks.active, None), (tasks.standby, held.standby), (tasks.warmup, held.warmup)):
                    for sub, ps in kind.items():
                        for p in ps:
                            if where is None:
                                held.active[(sub, p)] = m.process_id
                            else:
                                where.setdefault((sub, p), set()).add(m.process_id)
        return held


# ---------------------------------------------------------------- topology


def configure_topology(topology: Topology, topics: MetadataView) -> ConfiguredTopology:
    """Kafka's InternalTopicManager.configureTopics: the source topics must exist; a repartition
    topic without a fixed count gets the most partitions of the subtopologies writing to it; a
    changelog gets one partition per task of its subtopology."""
    out = ConfiguredTopology()
    missing_sources = sorted({t for s in topology.subtopologies for t in s.source_topics if topics.get(t) is None})
    if missing_sources:
        out.status.append((StatusCode.MISSING_SOURCE_TOPICS, f"Source topics {', '.join(missing_sources)} are missing."))
        return out
    repartition: dict[str, int] = {}
    fixed = {r.name: r.partitions for s in topology.subtopologies for r in s.repartition_source_topics
             if r.partitions > 0}
    repartition.update(fixed)

    def count_of(sub_id: str) -> int | None:
        sub = next(s for s in topology.subtopologies if s.subtopology_id == sub_id)
        counts = []
        for t in sub.source_topics:
            info = topics.get(t)
            counts.append(info.num_partitions if info is not None else 0)
        for r in sub.repartition_source_topics:
            if r.name not in repartition:
                return None
            counts.append(repartition[r.name])
        return max(counts) if counts else None

    # Repartition topics: sized from their writers, until nothing changes.
    changed = True
    while changed:
        changed = False
        for s in topology.subtopologies:
            n = count_of(s.subtopology_id)
            if n is None:
                continue
            for sink in s.repartition_sink_topics:
                if sink not in fixed and repartition.get(sink, 0) < n:
                    repartition[sink] = n
                    changed = True
    if repartition:
        try:
            for s in topology.subtopologies:
                for group in copartition_groups(s):
                    _copartition(group, repartition, set(fixed), topics)
        except _Incorrect as e:
            out.status.append((StatusCode.INCORRECTLY_PARTITIONED_TOPICS, str(e)))
            return out
    for s in topology.subtopologies:
        n = count_of(s.subtopology_id)
        if n is None:
            out.status.append((StatusCode.INCORRECTLY_PARTITIONED_TOPICS,
                               f"The partition count of the repartition topics of subtopology {s.subtopology_id} "
                               "could not be determined."))
            return out
        out.tasks[s.subtopology_id] = n
    needs: list[TopicNeed] = []
    for s in topology.subtopologies:
        for r in s.repartition_source_topics:
            needs.append(TopicNeed(r.name, repartition[r.name], tuple((c.key, c.value) for c in r.topic_configs),
                                   r.replication_factor))
        for c in s.state_changelog_topics:
            needs.append(TopicNeed(c.name, out.tasks[s.subtopology_id],
                                   tuple((k.key, k.value) for k in c.topic_configs), c.replication_factor))
    for need in needs:
        info = topics.get(need.name)
        if info is None:
            if need not in out.missing_internal:
                out.missing_internal.append(need)
        elif info.num_partitions != need.partitions:
            out.status.append((StatusCode.INCORRECTLY_PARTITIONED_TOPICS,
                               f"Existing internal topic {need.name} has invalid number of partitions: expected "
                               f"{need.partitions}, but found {info.num_partitions}."))
    return out


class _Incorrect(Exception):
    """A copartition group whose topics cannot have one partition count."""


def copartition_groups(sub: Subtopology) -> list[set[str]]:
    """A subtopology's copartition groups by topic name (the request names them by index into
    its source and repartition source topics)."""
    return [{sub.source_topics[i] for i in g.source_topics}
            | {sub.repartition_source_topics[i].name for i in g.repartition_source_topics}
            for g in sub.copartition_groups]


def _copartition(group: set[str], repartition: dict[str, int], fixed: set[str], topics: MetadataView) -> None:
    """Kafka's CopartitionedTopicsEnforcer: the topics of a copartition group get one partition
    count. With external topics among them it is theirs (which must agree); of repartition topics
    alone, that of the fixed ones (which must agree) or else the largest. A flexible repartition
    topic takes it; a fixed one that differs is an error."""
    def show(counts: Mapping[str, int]) -> str:  # as Java prints a TreeMap
        return "{" + ", ".join(f"{t}={n}" for t, n in sorted(counts.items())) + "}"
    inner = {t: repartition[t] for t in group if t in repartition}
    external = {}
    for t in group - set(inner):
        info = topics.get(t)
        external[t] = info.num_partitions if info is not None else 0
    if not external:
        if fixed:
            counts = {repartition[t] for t in fixed if t in repartition}
            if len(counts) > 1:
                raise _Incorrect(f"Following topics do not have the same number of partitions: [{show(inner)}]")
            n = counts.pop() if counts else max(inner.values())
        else:
            n = max(inner.values())
    else:
        if len(set(external.values())) > 1:
            raise _Incorrect(f"Following topics do not have the same number of partitions: [{show(external)}]")
        n = next(iter(external.values()))
    for t, had in inner.items():
        if t in fixed and had != n:
            raise _Incorrect(f"Number of partitions [{had}] of repartition topic [{t}] doesn't match number of "
                             f"partitions [{n}] of the source topic.")
        repartition[t] = n


def partition_hash(topology: Topology | None, topics: MetadataView) -> int:
    """What moves the group epoch when a topic the topology reads changes."""
    if topology is None:
        return 0
    names = sorted({t for s in topology.subtopologies for t in s.source_topics}
                   | {r.name for s in topology.subtopologies for r in s.repartition_source_topics}
                   | {c.name for s in topology.subtopologies for c in s.state_changelog_topics})
    counts = []
    for n in names:
        info = topics.get(n)
        counts.append((n, info.num_partitions if info is not None else -1))
    return hash(tuple(counts))


# ---------------------------------------------------------------- assignor


def assign(members: Mapping[str, StreamsGroupMember], tasks: Mapping[str, int],
           previous: Mapping[str, Assignment], num_standby_replicas: int) -> dict[str, Assignment]:
    """A sticky assignor (after Kafka's StickyTaskAssignor): every active task stays with the
    member that has it in the previous target while that member stays under its fair share;
    the rest go to the least loaded members. Standby replicas go to the least loaded members of
    other processes than the task's active one."""
    ids = sorted(members)
    if not ids:
        return {}
    all_tasks = [(sub, p) for sub in sorted(tasks) for p in range(tasks[sub])]
    active: dict[str, set[tuple[str, int]]] = {m: set() for m in ids}
    fair = -(-len(all_tasks) // len(ids))  # ceil
    unassigned = []
    owner_of = {(sub, p): m for m, a in previous.items() if m in active
                for sub, ps in a.active.items() for p in ps}
    for task in all_tasks:
        m = owner_of.get(task)
        if m is not None and len(active[m]) < fair:
            active[m].add(task)
        else:
            unassigned.append(task)
    for task in unassigned:
        m = min(ids, key=lambda i: (len(active[i]), i))
        active[m].add(task)

    standby: dict[str, set[tuple[str, int]]] = {m: set() for m in ids}
    if num_standby_replicas > 0:
        active_owner = {t: m for m, ts in active.items() for t in ts}
        prev_standby = {m: {(sub, p) for sub, ps in a.standby.items() for p in ps} for m, a in previous.items()}
        for task in all_tasks:
            used = {members[active_owner[task]].process_id}
            for _ in range(num_standby_replicas):
                candidates = [m for m in ids if members[m].process_id not in used]
                if not candidates:
                    break
                # Sticky: a member that had the standby before keeps it.
                m = min(candidates, key=lambda i: (task not in prev_standby.get(i, set()),
                                                   len(active[i]) + len(standby[i]), i))
                standby[m].add(task)
                used.add(members[m].process_id)
    return {m: Assignment(active=_tasks(active[m]), standby=_tasks(standby[m])) for m in ids}


def _tasks(pairs: set[tuple[str, int]]) -> dict[str, frozenset[int]]:
    out: dict[str, set[int]] = {}
    for sub, p in pairs:
        out.setdefault(sub, set()).add(p)
    return {sub: frozenset(ps) for sub, ps in out.items()}


def _minus(a: Tasks, b: Tasks) -> dict[str, frozenset[int]]:
    return {sub: ps - b.get(sub, frozenset()) for sub, ps in a.items() if ps - b.get(sub, frozenset())}


def _intersects(a: Tasks, b: Tasks) -> bool:
    return any(ps & b.get(sub, frozenset()) for sub, ps in a.items())


# ---------------------------------------------------------------- StreamsGroupHeartbeat


@dataclass
class StreamsHeartbeatRequest:
    """StreamsGroupHeartbeat's fields, None where the member sent no change."""

    group_id: str
    member_id: str
    member_epoch: int
    rebalance_timeout_ms: int = -1
    instance_id: str | None = None
    rack_id: str | None = None
    topology: Topology | None = None
    active_tasks: Tasks | None = None
    standby_tasks: Tasks | None = None
    warmup_tasks: Tasks | None = None
    process_id: str | None = None
    user_endpoint: tuple[str, int] | None = None
    client_tags: tuple[tuple[str, str], ...] | None = None
    shutdown_application: bool = False
    client_id: str = ""
    client_host: str = ""
    endpoint_information_epoch: int = -1  # the latest the member received
    task_offsets: Mapping[tuple[str, int], int] | None = None
    task_end_offsets: Mapping[tuple[str, int], int] | None = None


@dataclass
class StreamsHeartbeatResult:
    error: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    acceptable_recovery_lag: int = 0
    task_offset_interval_ms: int = 0
    status: list[tuple[StatusCode, str]] = field(default_factory=list)
    assignment: Assignment | None = None  # None: unchanged since the member's last heartbeat
    endpoint_information_epoch: int = 0
    session_timeout_ms: int | None = None
    cancel_session: bool = False
    missing_internal_topics: list[TopicNeed] = field(default_factory=list)
    # None: the member has the group's endpoint information epoch already.
    partitions_by_user_endpoint: list[EndpointPartitions] | None = None
    revocation_timeout_ms: int | None = None  # the member must revoke within it (re)arm
    cancel_revocation: bool = False
    initial_delay_ms: int | None = None  # the group's initial rebalance delay started: ``assign_delayed`` after it


def validate(req: StreamsHeartbeatRequest) -> None:
    """Kafka's checks of a StreamsGroupHeartbeat before it looks at the group (INVALID_REQUEST)."""
    def invalid(message: str) -> HeartbeatError:
        return HeartbeatError(ErrorCode.INVALID_REQUEST, message)
    # What Kafka 4.3.1's coordinator does not support yet, refused first, as it refuses them.
    if req.instance_id is not None:
        raise invalid("Static membership is not yet supported.")
    if req.task_offsets is not None:
        raise invalid("TaskOffsets are not supported yet.")
    if req.task_end_offsets is not None:
        raise invalid("TaskEndOffsets are not supported yet.")
    if req.warmup_tasks:
        raise invalid("WarmupTasks are not supported yet.")
    if req.topology is not None and any(s.source_topic_regex for s in req.topology.subtopologies):
        raise invalid("Regular expressions for source topics are not supported yet.")
    for value, what in ((req.member_id, "MemberId"), (req.group_id, "GroupId"), (req.rack_id, "RackId")):
        if value is not None and not value.strip():
            raise invalid(f"{what} can't be empty.")
    if req.member_epoch == 0:
        if req.rebalance_timeout_ms == -1:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        for tasks, what in ((req.active_tasks, "ActiveTasks"), (req.standby_tasks, "StandbyTasks"),
                            (req.warmup_tasks, "WarmupTasks")):
            if tasks:
                raise invalid(f"{what} must be empty when (re-)joining.")
        if req.topology is None:
            raise invalid("Topology must be non-null when (re-)joining.")
        for s in req.topology.subtopologies:
            for c in s.state_changelog_topics:
                if c.partitions != 0:
                    raise HeartbeatError(ErrorCode.STREAMS_INVALID_TOPOLOGY,
                                         f"Changelog topic {c.name} must have an undefined partition count, "
                                         f"but it is set to {c.partitions}.")
    elif req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise invalid("InstanceId can't be null.")  # a static member's leave, without one (they are refused)
    elif req.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise invalid(f"MemberEpoch is {req.member_epoch}, but must be greater than or equal to -2.")
    given = [t is not None for t in (req.active_tasks, req.standby_tasks, req.warmup_tasks)]
    if any(given) and not all(given):
        raise invalid("If one task-type is non-null, all must be non-null.")
    if req.member_epoch != 0 and req.topology is not None:
        raise invalid("Topology can only be provided when (re-)joining.")


def heartbeat(group: StreamsGroup, req: StreamsHeartbeatRequest, topics: MetadataView,
              config: StreamsGroupConfig, now_ms: float) -> StreamsHeartbeatResult:
    """Answer a validated heartbeat of a member that is not leaving, changing ``group``
    (``now_ms``: the coordinator's monotonic clock)."""
    member = _member_for(group, req, config)
    joined = req.member_id not in group.members
    first = not group.members  # the first member of a new (or emptied) group

    status: list[tuple[StatusCode, str]] = []
    bump = joined
    if req.topology is not None:
        # As Kafka 4.3.1: the first topology is the group's for good; an older one is stale (said
        # below), any other change is refused, even by the only member of the group.
        if group.topology is None:
            group.topology = req.topology
            bump = True
        elif req.topology.epoch >= group.topology.epoch and not _same_topology(req.topology, group.topology):
            raise HeartbeatError(ErrorCode.INVALID_REQUEST, "Topology updates are not supported yet.")
    # Fields the member did not send (None; -1 for the rebalance timeout) stay as they were.
    updated = dataclasses.replace(
        member, rack_id=_or(req.rack_id, member.rack_id),
        rebalance_timeout_ms=_or(None if req.rebalance_timeout_ms == -1 else req.rebalance_timeout_ms,
                                 member.rebalance_timeout_ms),
        topology_epoch=_or(req.topology.epoch if req.topology is not None else None, member.topology_epoch),
        process_id=_or(req.process_id, member.process_id), user_endpoint=_or(req.user_endpoint, member.user_endpoint),
        client_tags=_or(req.client_tags, member.client_tags), client_id=req.client_id, client_host=req.client_host)
    if updated.process_id != member.process_id or updated.client_tags != member.client_tags:
        bump = True
    group.members[req.member_id] = updated
    if group.topology is not None and updated.topology_epoch < group.topology.epoch:
        status.append((StatusCode.STALE_TOPOLOGY, f"The member's topology epoch {updated.topology_epoch} is behind "
                                                  f"the group's topology epoch {group.topology.epoch}."))
    if req.shutdown_application and group.shutdown_requested_by is None:
        group.shutdown_requested_by = req.member_id

    hashed = partition_hash(group.topology, topics)
    if hashed != group.partition_hash:
        group.partition_hash = hashed
        bump = True
    if bump or group.configured is None:
        group.configured = configure_topology(group.topology, topics) if group.topology is not None else None
    configs = assignment_configs(config)
    if configs != group.assignment_configs:
        group.assignment_configs = configs
        bump = True
    if bump:
        # Members waiting out the initial rebalance delay (at epoch 1, with no tasks) are behind it.
        group.group_epoch = next_group_epoch(group.group_epoch)
    configured = group.configured
    start_delay_ms = None
    if first and config.initial_rebalance_delay_ms > 0 and not group.initial_delay_running:
        group.initial_delay_running = True
        start_delay_ms = config.initial_rebalance_delay_ms

    if group.group_epoch > group.target_epoch:
        if group.initial_delay_running:
            # No assignment before the delay ends (``assign_delayed``): the members joined so far wait at epoch 1.
            status.append((StatusCode.ASSIGNMENT_DELAYED,
                           "Assignment delayed due to the configured initial rebalance delay."))
            group.target_epoch = max(group.target_epoch, 1)
        elif not assignment_due(group.assigned_at_ms, now_ms, config.assignment_interval_ms):
            # Too soon after the last one: the members keep the present target until a heartbeat after it.
            status.append((StatusCode.ASSIGNMENT_DELAYED, "Assignment delayed due to the configured assignment "
                                                          "interval."))
        else:
            _assign_target(group, config, now_ms)
    status += _group_status(group)

    before, was_revoking = updated.assigned, updated.state == MemberState.UNREVOKED_TASKS
    owned = None if req.active_tasks is None or req.standby_tasks is None or req.warmup_tasks is None else \
        Assignment(active=req.active_tasks, standby=req.standby_tasks, warmup=req.warmup_tasks)
    updated = _reconcile(group, updated, owned)
    group.members[req.member_id] = updated
    if (req.member_epoch == 0 or updated.assigned != before) and updated.user_endpoint is not None:
        # As Kafka: what an endpoint serves moved, so every member learns the partitions again.
        group.endpoint_information_epoch += 1
    result = StreamsHeartbeatResult(
        member_id=req.member_id, member_epoch=updated.member_epoch, heartbeat_interval_ms=config.heartbeat_interval_ms,
        acceptable_recovery_lag=ACCEPTABLE_RECOVERY_LAG, task_offset_interval_ms=TASK_OFFSET_INTERVAL_MS,
        status=status,
        endpoint_information_epoch=group.endpoint_information_epoch,
        session_timeout_ms=config.session_timeout_ms,
        missing_internal_topics=list(configured.missing_internal) if configured is not None else [],
        initial_delay_ms=start_delay_ms)
    if req.member_epoch == 0 or updated.assigned != before or req.active_tasks is None and joined:
        result.assignment = updated.assigned
    revoking = updated.state == MemberState.UNREVOKED_TASKS
    if revoking and not was_revoking:
        result.revocation_timeout_ms = max(updated.rebalance_timeout_ms, 0)
    elif was_revoking and not revoking:
        result.cancel_revocation = True
    if req.endpoint_information_epoch != group.endpoint_information_epoch:
        result.partitions_by_user_endpoint = endpoint_partitions(group, topics)
    return result


def assignment_configs(config: StreamsGroupConfig) -> dict[str, str]:
    """The settings the assignment depends on, as Kafka 4.3.1 records them."""
    return {"num.standby.replicas": str(config.num_standby_replicas)}


def _same_topology(a: Topology, b: Topology) -> bool:
    """Whether two topologies are the same (their subtopologies in any order)."""
    return a.epoch == b.epoch and {s.subtopology_id: s for s in a.subtopologies} == \
        {s.subtopology_id: s for s in b.subtopologies}


def _assign_target(group: StreamsGroup, config: StreamsGroupConfig, now_ms: float) -> None:
    """A new target assignment for every member, at the group epoch."""
    configured = group.configured
    tasks = configured.tasks if configured is not None and configured.ready else {}
    group.target = assign(group.members, tasks, group.target, config.num_standby_replicas)
    group.target_epoch = group.group_epoch
    group.assigned_at_ms = now_ms


def assign_delayed(group: StreamsGroup, config: StreamsGroupConfig, now_ms: float) -> bool:
    """The initial rebalance delay ended: one target assignment for all the members that joined
    meanwhile (they take it at their next heartbeat). Whether the target changed."""
    group.initial_delay_running = False
    if not group.members or group.group_epoch <= group.target_epoch:
        return False
    _assign_target(group, config, now_ms)
    return True


def _member_for(group: StreamsGroup, req: StreamsHeartbeatRequest, config: StreamsGroupConfig) -> StreamsGroupMember:
    """The member the heartbeat is from, its epoch checked; a new one for a member joining."""
    member = group.members.get(req.member_id)
    if member is None:
        if req.member_epoch != 0:
            raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {req.member_id} is not a member of group {group.group_id}.")
        if len(group.members) >= config.max_size:
            raise HeartbeatError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                 f"The streams group has reached its maximum capacity of {config.max_size} members.")
        return StreamsGroupMember(req.member_id)
    if req.member_epoch != 0 or req.member_id in group.members:
        _check_epoch(member, req.member_epoch, req.active_tasks)
    return member


def _group_status(group: StreamsGroup) -> list[tuple[StatusCode, str]]:
    """Why the group's topology cannot run (yet), and a requested shutdown."""
    status: list[tuple[StatusCode, str]] = []
    configured = group.configured
    if configured is not None:
        status += configured.status
        if configured.missing_internal:
            status.append((StatusCode.MISSING_INTERNAL_TOPICS, "Internal topics are missing: "
                           f"{', '.join(t.name for t in configured.missing_internal)}"))
    if group.shutdown_requested_by is not None:
        status.append((StatusCode.SHUTDOWN_APPLICATION,
                       f"Streams group member {group.shutdown_requested_by} encountered a fatal error and requested a "
                       "shutdown for the entire application."))
    return status


def endpoint_partitions(group: StreamsGroup, topics: MetadataView) -> list[EndpointPartitions]:
    """Kafka's EndpointToPartitionsManager for every member with an application endpoint: a
    task's partition of each of its subtopology's source and repartition-source topics (a topic
    with fewer partitions than the task's ids has only those it has)."""
    if group.topology is None or group.configured is None or not group.configured.ready:
        return []
    subs = {s.subtopology_id: s for s in group.topology.subtopologies}

    def partitions(tasks: Tasks) -> list[tuple[str, list[int]]]:
        out = []
        for sub_id, ps in sorted(tasks.items()):
            sub = subs.get(sub_id)
            if sub is None:
                continue
            for topic in sorted({*sub.source_topics, *(r.name for r in sub.repartition_source_topics)}):
                info = topics.get(topic)
                count = info.num_partitions if info is not None else 0
                out.append((topic, sorted(ps)[:count]))
        return out
    return [EndpointPartitions(m.user_endpoint[0], m.user_endpoint[1], partitions(m.assigned.active),
                               partitions(m.assigned.standby))
            for m in group.members.values() if m.user_endpoint is not None]


def _or(given: T | None, current: T) -> T:
    return current if given is None else given


def _reconcile(group: StreamsGroup, member: StreamsGroupMember, owned: Assignment | None) -> StreamsGroupMember:
    """Kafka's reconciliation of a member towards its target (its CurrentAssignmentBuilder): the
    tasks it must give up first, active, standby or warm-up (it keeps its epoch until it reports
    them gone); then the target's tasks that nobody still holds. ``owned``: what the member
    reported it holds, None when it did not say."""
    if member.state == MemberState.UNREVOKED_TASKS:
        if owned is None or _any_in(owned, member.pending_revocation):
            return member  # still revoking (a member reports its tasks once they change)
        return _next_assignment(group, member, member.member_epoch + 1, owned)
    if member.state == MemberState.STABLE and member.member_epoch == group.target_epoch:
        return member
    return _next_assignment(group, member, member.member_epoch, owned)


def _next_assignment(group: StreamsGroup, member: StreamsGroupMember, epoch: int,
                     owned: Assignment | None) -> StreamsGroupMember:
    target = group.target.get(member.member_id, Assignment())
    held, me = group.task_processes(), member.process_id

    # An active task is released once no member has it active and this process has it neither as
    # standby nor warm-up; a standby or warm-up task once this process has it in no role.
    def active_unreleased(t: tuple[str, int]) -> bool:
        return t in held.active or held.on(t, me)

    def other_unreleased(t: tuple[str, int]) -> bool:
        return held.active.get(t) == me or held.on(t, me)

    kept, revoked, added, unreleased = {}, {}, {}, False
    for kind, blocked in (("active", active_unreleased), ("standby", other_unreleased), ("warmup", other_unreleased)):
        current: Tasks = getattr(member.assigned, kind)
        wanted: Tasks = getattr(target, kind)
        kept[kind] = {sub: ps & wanted.get(sub, frozenset()) for sub, ps in current.items()
                      if ps & wanted.get(sub, frozenset())}
        revoked[kind] = _minus(current, wanted)
        free: dict[str, frozenset[int]] = {}
        for sub, ps in _minus(wanted, current).items():
            ready = frozenset(p for p in ps if not blocked((sub, p)))
            unreleased |= ready != ps
            if ready:
                free[sub] = ready
        added[kind] = free
    revoke = Assignment(**revoked)
    keep = Assignment(**kept)
    if _count(revoke) and (owned is None or _any_in(owned, revoke)):
        return dataclasses.replace(member, state=MemberState.UNREVOKED_TASKS, pending_revocation=revoke,
                                   assigned=keep, **_epoch(member, epoch))
    if any(added.values()):
        keep = Assignment(**{kind: {**kept[kind], **{sub: kept[kind].get(sub, frozenset()) | ps
                                                      for sub, ps in added[kind].items()}}
                             for kind in kept})
    state = MemberState.UNRELEASED_TASKS if unreleased else MemberState.STABLE
    return dataclasses.replace(member, state=state, pending_revocation=Assignment(), assigned=keep,
                               **_epoch(member, group.target_epoch))


def _epoch(member: StreamsGroupMember, epoch: int) -> dict[str, int]:
    """The member's epoch fields at ``epoch``: the previous one moves only when it changes."""
    if epoch == member.member_epoch:
        return {"member_epoch": epoch}
    return {"member_epoch": epoch, "previous_member_epoch": member.member_epoch}


def _any_in(a: Assignment, b: Assignment) -> bool:
    """Whether ``a`` holds any task of ``b`` in the same role."""
    return _intersects(a.active, b.active) or _intersects(a.standby, b.standby) or _intersects(a.warmup, b.warmup)


def _count(a: Assignment) -> int:
    return sum(len(ps) for tasks in (a.active, a.standby, a.warmup) for ps in tasks.values())


def leave(group: StreamsGroup, member_id: str, shutdown_application: bool = False) -> StreamsHeartbeatResult:
    """A member leaving (epoch -1; static members, hence the temporary leave of -2, are refused
    by ``validate`` as Kafka 4.3.1 refuses them), perhaps asking the others to shut down."""
    if member_id not in group.members:
        raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                             f"Member {member_id} is not a member of group {group.group_id}.")
    if shutdown_application and group.shutdown_requested_by is None:
        group.shutdown_requested_by = member_id
    fence(group, member_id)
    return StreamsHeartbeatResult(member_id=member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH, cancel_session=True)


def fence(group: StreamsGroup, member_id: str) -> None:
    """Remove a member (it left, or its session expired); the group epoch moves so that the
    target assignment is computed again without it."""
    group.members.pop(member_id, None)
    group.target.pop(member_id, None)
    group.gone_members.add(member_id)
    group.group_epoch += 1
    if not group.members:
        group.shutdown_requested_by = None


def _check_epoch(member: StreamsGroupMember, received: int, owned: Tasks | None) -> None:
    if received > member.member_epoch:
        raise fenced_epoch("streams", received, member.member_epoch, "tasks")
    if received < member.member_epoch:
        # The previous epoch is accepted while the member owns no more than it was given:
        # the response that carried the new one may have been lost.
        allowed = received == member.previous_member_epoch and (
            owned is None or not _minus(owned, member.assigned.active))
        if not allowed:
            raise fenced_epoch("streams", received, member.member_epoch, "tasks")


# ---------------------------------------------------------------- records of __consumer_offsets


def _task_ids(cls: type, tasks: Tasks) -> list:
    return [cls(subtopology_id=s, partitions=sorted(ps)) for s, ps in sorted(tasks.items()) if ps]


def _tasks_of(ids: list) -> dict[str, frozenset[int]]:
    return {t.subtopology_id: frozenset(t.partitions) for t in ids if t.partitions}


def _topic_infos(cls: type, kv: type, infos: list) -> list:
    return [cls(name=t.name, partitions=t.partitions, replication_factor=t.replication_factor,
                topic_configs=[kv(key=c.key, value=c.value) for c in t.topic_configs]) for t in infos]


def _copy_topology(topology: object, top: type, sub: type, info: type, kv: type, copart: type) -> object:
    """The topology as another of the schemas' identical shapes (request <-> record)."""
    return top(epoch=topology.epoch, subtopologies=[sub(  # type: ignore[attr-defined]
        subtopology_id=s.subtopology_id, source_topics=list(s.source_topics),
        source_topic_regex=list(s.source_topic_regex),
        state_changelog_topics=_topic_infos(info, kv, s.state_changelog_topics),
        repartition_sink_topics=list(s.repartition_sink_topics),
        repartition_source_topics=_topic_infos(info, kv, s.repartition_source_topics),
        copartition_groups=[copart(source_topics=list(c.source_topics), source_topic_regex=list(c.source_topic_regex),
                                   repartition_source_topics=list(c.repartition_source_topics))
                            for c in s.copartition_groups])
        for s in topology.subtopologies])  # type: ignore[attr-defined]


def snapshot(group: StreamsGroup) -> list[Record]:
    """The group's state as the ``StreamsGroup*`` records: written where they differ from the
    last ones written, and replayed (``StreamsGroup.replay``) when a coordinator loads the group."""
    gid = group.group_id
    records: list[Record] = [(StreamsGroupMetadataKey(group_id=gid), StreamsGroupMetadataValue(
        epoch=group.group_epoch, metadata_hash=0,  # the partition hash is worked out again on load
        validated_topology_epoch=group.topology.epoch  # -1 until the topology can run, as Kafka records it
        if group.topology is not None and group.configured is not None and group.configured.ready else -1,
        last_assignment_configs=[mdv.LastAssignmentConfig(key=k, value=v)
                                 for k, v in sorted(group.assignment_configs.items())]))]
    if group.topology is not None:
        records.append((StreamsGroupTopologyKey(group_id=gid), _copy_topology(
            group.topology, StreamsGroupTopologyValue, tv.Subtopology, tv.TopicInfo, tv.TopicConfig,
            tv.CopartitionGroup)))
    for m in group.members.values():
        records.append((StreamsGroupMemberMetadataKey(group_id=gid, member_id=m.member_id),
                        StreamsGroupMemberMetadataValue(
                            instance_id=m.instance_id, rack_id=m.rack_id, client_id=m.client_id,
                            client_host=m.client_host, rebalance_timeout_ms=m.rebalance_timeout_ms,
                            topology_epoch=m.topology_epoch, process_id=m.process_id,
                            user_endpoint=None if m.user_endpoint is None
                            else mv.Endpoint(host=m.user_endpoint[0], port=m.user_endpoint[1]),
                            client_tags=[mv.KeyValue(key=k, value=v) for k, v in m.client_tags])))
        target = group.target.get(m.member_id, Assignment())
        records.append((StreamsGroupTargetAssignmentMemberKey(group_id=gid, member_id=m.member_id),
                        StreamsGroupTargetAssignmentMemberValue(
                            active_tasks=_task_ids(tav.TaskIds, target.active),
                            standby_tasks=_task_ids(tav.TaskIds, target.standby),
                            warmup_tasks=_task_ids(tav.TaskIds, target.warmup))))
        records.append((StreamsGroupCurrentMemberAssignmentKey(group_id=gid, member_id=m.member_id),
                        StreamsGroupCurrentMemberAssignmentValue(
                            member_epoch=m.member_epoch, previous_member_epoch=m.previous_member_epoch,
                            state=int(m.state), active_tasks=_task_ids(cav.TaskIds, m.assigned.active),
                            standby_tasks=_task_ids(cav.TaskIds, m.assigned.standby),
                            warmup_tasks=_task_ids(cav.TaskIds, m.assigned.warmup),
                            active_tasks_pending_revocation=_task_ids(cav.TaskIds, m.pending_revocation.active),
                            standby_tasks_pending_revocation=_task_ids(cav.TaskIds, m.pending_revocation.standby),
                            warmup_tasks_pending_revocation=_task_ids(cav.TaskIds, m.pending_revocation.warmup))))
    records.append((StreamsGroupTargetAssignmentMetadataKey(group_id=gid),
                    StreamsGroupTargetAssignmentMetadataValue(assignment_epoch=group.target_epoch)))
    return records


def member_tombstones(group_id: str, member_id: str) -> list[Record]:
    return [(StreamsGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member_id), None),
            (StreamsGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id), None),
            (StreamsGroupMemberMetadataKey(group_id=group_id, member_id=member_id), None)]


def _replay(self: StreamsGroup, key: object, value: object) -> None:
    """Apply one loaded record (``value`` None: a tombstone)."""
    if isinstance(key, StreamsGroupMetadataKey):
        if isinstance(value, StreamsGroupMetadataValue):
            self.group_epoch = value.epoch
            self.assignment_configs = {c.key: c.value for c in value.last_assignment_configs or []}
    elif isinstance(key, StreamsGroupTopologyKey):
        self.topology = None if value is None else _copy_topology(  # type: ignore[assignment]
            value, Topology, rq.Subtopology, rq.TopicInfo, rq.KeyValue, rq.CopartitionGroup)
        self.configured = None
    elif isinstance(key, StreamsGroupMemberMetadataKey):
        if value is None:
            self.members.pop(key.member_id, None)
            self.target.pop(key.member_id, None)
            return
        assert isinstance(value, StreamsGroupMemberMetadataValue)
        old = self.members.get(key.member_id) or StreamsGroupMember(key.member_id)
        endpoint = value.user_endpoint
        self.members[key.member_id] = dataclasses.replace(
            old, instance_id=value.instance_id, rack_id=value.rack_id, client_id=value.client_id,
            client_host=value.client_host, rebalance_timeout_ms=value.rebalance_timeout_ms,
            topology_epoch=value.topology_epoch, process_id=value.process_id,
            user_endpoint=None if endpoint is None else (endpoint.host, endpoint.port),
            client_tags=tuple((t.key, t.value) for t in value.client_tags))
    elif isinstance(key, StreamsGroupCurrentMemberAssignmentKey):
        if value is None or key.member_id not in self.members and not isinstance(
                value, StreamsGroupCurrentMemberAssignmentValue):
            return
        assert isinstance(value, StreamsGroupCurrentMemberAssignmentValue)
        old = self.members.get(key.member_id) or StreamsGroupMember(key.member_id)
        self.members[key.member_id] = dataclasses.replace(
            old, member_epoch=value.member_epoch, previous_member_epoch=value.previous_member_epoch,
            state=MemberState.of(value.state),
            assigned=Assignment(active=_tasks_of(value.active_tasks), standby=_tasks_of(value.standby_tasks),
                                warmup=_tasks_of(value.warmup_tasks)),
            pending_revocation=Assignment(active=_tasks_of(value.active_tasks_pending_revocation),
                                          standby=_tasks_of(value.standby_tasks_pending_revocation),
                                          warmup=_tasks_of(value.warmup_tasks_pending_revocation)))
    elif isinstance(key, StreamsGroupTargetAssignmentMemberKey):
        if value is None:
            self.target.pop(key.member_id, None)
        else:
            assert isinstance(value, StreamsGroupTargetAssignmentMemberValue)
            self.target[key.member_id] = Assignment(active=_tasks_of(value.active_tasks),
                                                    standby=_tasks_of(value.standby_tasks),
                                                    warmup=_tasks_of(value.warmup_tasks))
    elif isinstance(key, StreamsGroupTargetAssignmentMetadataKey):
        if isinstance(value, StreamsGroupTargetAssignmentMetadataValue):
            self.target_epoch = value.assignment_epoch

