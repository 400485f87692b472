"""`rivulet groups list|describe|delete|reset-offsets|delete-offsets`: Kafka's
kafka-consumer-groups tool, kafka-share-groups for share groups (KIP-932), and kafka-streams-groups
for streams groups (KIP-1071: StreamsGroupDescribe, --verbose for its wider layouts).

Like Kafka's tools it is a user of the admin client: DescribeGroups, OffsetFetch and ListOffsets
for describe (offsets and lag), DeleteGroups, and a standalone offset commit (allowed only
while the group is inactive) for reset-offsets. A share group is described with
ShareGroupDescribe and DescribeShareGroupOffsets (start offsets and lag), with the in-flight
records from ReadShareGroupState sent to each partition's share coordinator, and its offsets are
reset and deleted with Alter/DeleteShareGroupOffsets. reset-offsets is a dry run unless
--execute is given, as in Kafka.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import re
import sys
from dataclasses import dataclass, field

from rivulet.cli.common import CliError, add_connection_args, client_config, run_command
from rivulet.cli.output import Column, add_format_arg, print_json, print_table, progress
from rivulet.client.admin.client import AsyncAdminClient
from rivulet.client.core import EARLIEST, LATEST
from rivulet.common.time import now_ms
from rivulet.common.types import TopicPartition as TP
from rivulet.protocol.consumer_protocol import decode_assignment
from rivulet.protocol.errors import ErrorCode, ApiError
from rivulet.protocol.messages import streams_group_describe_response as sgdr
from rivulet.share.persister import in_flight_count, snapshot_of_read


@dataclass
class MemberInfo:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: list[TP] = field(default_factory=list)


@dataclass
class GroupInfo:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberInfo]
    coordinator: tuple[int, str, int]
    streams: sgdr.DescribedGroup | None = None  # a streams group's StreamsGroupDescribe entry


async def describe_group(admin: AsyncAdminClient, group_id: str) -> GroupInfo:
    coordinator = await admin.group_coordinator(group_id)
    (g,) = await admin.describe_groups([group_id])
    if g.error_code:
        raise ApiError(ErrorCode(g.error_code), f"DescribeGroups {group_id}")
    if g.group_state == "Dead" and admin.client.api_version(coordinator.node_id, 69) is not None:
        # Not a classic group: perhaps a KIP-848 one, which ConsumerGroupDescribe describes.
        cg = await admin.consumer_group_describe(group_id)
        if not cg.error_code:
            return GroupInfo(group_id, cg.group_state, "consumer", cg.assignor_name, [
                MemberInfo(m.member_id, m.instance_id, m.client_id, m.client_host,
                           [(tp.topic_name, p) for tp in m.assignment.topic_partitions for p in tp.partitions])
                for m in cg.members], (coordinator.node_id, coordinator.host, coordinator.port))
    if g.group_state == "Dead" and admin.client.api_version(coordinator.node_id, 77) is not None:
        # Or a KIP-932 share group, which ShareGroupDescribe describes.
        sg = await admin.share_group_describe(group_id)
        if not sg.error_code:
            return GroupInfo(group_id, sg.group_state, "share", sg.assignor_name, [
                MemberInfo(m.member_id, None, m.client_id, m.client_host,
                           [(tp.topic_name, p) for tp in m.assignment.topic_partitions for p in tp.partitions])
                for m in sg.members], (coordinator.node_id, coordinator.host, coordinator.port))
    if g.group_state == "Dead" and admin.client.api_version(coordinator.node_id, 89) is not None:
        # Or a KIP-1071 streams group, which StreamsGroupDescribe describes.
        st = await admin.streams_group_describe(group_id)
        if not st.error_code:
            return GroupInfo(group_id, st.group_state, "streams", "", [
                MemberInfo(m.member_id, m.instance_id, m.client_id, m.client_host) for m in st.members],
                (coordinator.node_id, coordinator.host, coordinator.port), streams=st)
    members = []
    for m in g.members:
        assignment: list[TP] = []
        if g.protocol_type == "consumer" and m.member_assignment:
            try:
                assignment = decode_assignment(bytes(m.member_assignment))[0]
            except Exception:
                assignment = []
        members.append(MemberInfo(m.member_id, m.group_instance_id, m.client_id, m.client_host, assignment))
    return GroupInfo(group_id, g.group_state, g.protocol_type, g.protocol_data, members,
                     (coordinator.node_id, coordinator.host, coordinator.port))


async def committed(admin: AsyncAdminClient, group_id: str) -> dict[TP, int]:
    found = await admin.committed_offsets(group_id)
    return {tp: om.offset for tp, om in found.items() if om is not None}


async def topic_partitions(admin: AsyncAdminClient, topics: list[str]) -> dict[str, list[int]]:
    md = await admin.metadata(topics)
    out = {}
    for t in md.topics:
        if t.error_code:
            raise ApiError(ErrorCode(t.error_code), f"topic {t.name}")
        out[t.name] = sorted(p.partition_index for p in t.partitions)
    return out


async def list_offsets(admin: AsyncAdminClient, tps: list[TP], timestamp: int,
                       isolation_level: int = 0) -> dict[TP, int]:
    """Offsets for a timestamp (or LATEST / EARLIEST); -1 where no record qualifies.
    Under read_committed (``isolation_level=1``) LATEST is the last stable offset."""
    if not tps:
        return {}
    found = await admin.list_offsets({tp: timestamp for tp in tps}, isolation_level)
    return {tp: offset for tp, (offset, _) in found.items()}


# ---------------------------------------------------------------- output

OFFSET_COLUMNS = [Column("GROUP", "group"), Column("TOPIC", "topic"), Column("PARTITION", "partition"),
                  Column("CURRENT-OFFSET", "current_offset"), Column("LOG-END-OFFSET", "log_end_offset"),
                  Column("LAG", "lag"), Column("CONSUMER-ID", "consumer_id"), Column("HOST", "host"),
                  Column("CLIENT-ID", "client_id")]
MEMBER_COLUMNS = [Column("GROUP", "group"), Column("CONSUMER-ID", "consumer_id"),
                  Column("GROUP-INSTANCE-ID", "group_instance_id"), Column("HOST", "host"),
                  Column("CLIENT-ID", "client_id"), Column("#PARTITIONS", "partitions"),
                  Column("ASSIGNMENT", "assignment")]
STATE_COLUMNS = [Column("GROUP", "group"), Column("COORDINATOR (ID)", "coordinator"),
                 Column("ASSIGNMENT-STRATEGY", "assignment_strategy"), Column("STATE", "state"),
                 Column("#MEMBERS", "members")]
# kafka-share-groups' layouts for share groups.
# IN-FLIGHT is Rivulet's own, after kafka-share-groups' columns.
SHARE_OFFSET_COLUMNS = [Column("GROUP", "group"), Column("TOPIC", "topic"), Column("PARTITION", "partition"),
                        Column("START-OFFSET", "start_offset"), Column("LAG", "lag"), Column("IN-FLIGHT", "in_flight")]
SHARE_MEMBER_COLUMNS = [Column("GROUP", "group"), Column("CONSUMER-ID", "consumer_id"), Column("HOST", "host"),
                        Column("CLIENT-ID", "client_id"), Column("#PARTITIONS", "partitions"),
                        Column("ASSIGNMENT", "assignment")]
SHARE_STATE_COLUMNS = [Column("GROUP", "group"), Column("COORDINATOR (ID)", "coordinator"),
                       Column("STATE", "state"), Column("#MEMBERS", "members")]
# kafka-streams-groups' layouts for streams groups (--verbose: the wider ones).
STREAMS_OFFSET_COLUMNS = [Column("GROUP", "group"), Column("TOPIC", "topic"), Column("PARTITION", "partition"),
                          Column("OFFSET-LAG", "offset_lag")]
STREAMS_OFFSET_COLUMNS_VERBOSE = [*STREAMS_OFFSET_COLUMNS[:3], Column("CURRENT-OFFSET", "current_offset"),
                                  Column("LEADER-EPOCH", "leader_epoch"), Column("LOG-END-OFFSET", "log_end_offset"),
                                  STREAMS_OFFSET_COLUMNS[3]]
STREAMS_MEMBER_COLUMNS = [Column("GROUP", "group"), Column("MEMBER", "member"), Column("PROCESS", "process"),
                          Column("CLIENT-ID", "client_id"), Column("ASSIGNMENTS", "assignments")]
STREAMS_MEMBER_COLUMNS_VERBOSE = [Column("GROUP", "group"), Column("TARGET-ASSIGNMENT-EPOCH", "target_assignment_epoch"),
                                  Column("TOPOLOGY-EPOCH", "topology_epoch"), Column("MEMBER", "member"),
                                  Column("MEMBER-PROTOCOL", "member_protocol"), Column("MEMBER-EPOCH", "member_epoch"),
                                  *STREAMS_MEMBER_COLUMNS[2:]]
STREAMS_STATE_COLUMNS = [Column("GROUP", "group"), Column("COORDINATOR (ID)", "coordinator"),
                         Column("STATE", "state"), Column("#MEMBERS", "members")]
STREAMS_STATE_COLUMNS_VERBOSE = [*STREAMS_STATE_COLUMNS[:3], Column("GROUP-EPOCH", "group_epoch"),
                                 Column("TARGET-ASSIGNMENT-EPOCH", "target_assignment_epoch"), STREAMS_STATE_COLUMNS[3]]
RESET_COLUMNS = [Column("GROUP", "group"), Column("TOPIC", "topic"), Column("PARTITION", "partition"),
                 Column("NEW-OFFSET", "new_offset")]


# OFFSET_COLUMNS: group, topic, partition, current offset, log end, lag, member, host, client.
OffsetRow = tuple[str, str, int, int | None, int | None, int | None, str | None, str | None, str | None]


async def describe_offsets_rows(admin: AsyncAdminClient, info: GroupInfo, isolation_level: int = 0
                                ) -> list[OffsetRow]:
    """One row per partition, OFFSET_COLUMNS; None where there is no value (shown as '-')."""
    positions = await committed(admin, info.group_id)
    owner: dict[TP, MemberInfo] = {}
    for m in info.members:
        for tp in m.assignment:
            owner[TP(*tp)] = m
    tps = sorted(set(positions) | set(owner))
    ends = await list_offsets(admin, tps, LATEST, isolation_level)
    rows: list[OffsetRow] = []
    for tp in tps:
        cur = positions.get(tp)
        end = ends.get(tp, -1)
        lag = None if cur is None or end < 0 else max(end - cur, 0)
        m = owner.get(tp)
        rows.append((info.group_id, tp[0], tp[1], cur, None if end < 0 else end, lag,
                     m.member_id if m else None, m.host if m else None, m.client_id if m else None))
    return rows


def parse_datetime(s: str) -> int:
    """Kafka's --to-datetime: 'YYYY-MM-DDTHH:mm:SS.sss' with an optional zone (local time without)."""
    text = s.strip().replace("Z", "+00:00")
    t = dt.datetime.fromisoformat(text)
    if t.tzinfo is None:
        t = t.astimezone()
    return int(t.timestamp() * 1000)


def parse_topic_spec(spec: str) -> tuple[str, list[int] | None]:
    """'topic' or 'topic:0,2,5' as Kafka's --topic takes it."""
    if ":" in spec:
        name, parts = spec.split(":", 1)
        return name, [int(p) for p in parts.split(",") if p.strip()]
    return spec, None


_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$")


def parse_duration_ms(s: str) -> int:
    """Kafka's --by-duration: an ISO-8601 duration as Java's Duration parses it, 'PnDTnHnMn.nS'."""
    m = _DURATION.match(s.strip().upper())
    if not m or s.strip().upper() in ("P", "PT"):
        raise ValueError(f"--by-duration: '{s}' is not a duration like P1DT2H3M4.5S")
    d, h, mi, sec = (float(x) if x else 0.0 for x in m.groups())
    return int(((d * 24 + h) * 60 + mi) * 60_000 + sec * 1000)


def read_offsets_file(path: str) -> dict[str, dict[TP, int]]:
    """--from-file: the CSV --export writes, 'topic,partition,offset' or 'group,topic,partition,offset'."""
    out: dict[str, dict[TP, int]] = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            cells = [c.strip() for c in line.strip().split(",")]
            if cells == [""]:
                continue
            if len(cells) == 3:
                cells.insert(0, "")
            if len(cells) != 4:
                raise ValueError(f"{path}:{n}: expected topic,partition,offset or group,topic,partition,offset")
            g, topic, part, off = cells
            out.setdefault(g, {})[TP(topic, int(part))] = int(off)
    return out


async def compute_reset(admin: AsyncAdminClient, group: str, args: argparse.Namespace,
                        from_file: dict[TP, int] | None = None, share: bool = False) -> dict[TP, int]:
    """The new offsets; for a share group (``share``) the current ones are its start offsets."""
    if share:
        current = {tp: o.start_offset for tp, o in (await admin.list_share_group_offsets(group)).items()
                   if o is not None}
    else:
        current = await committed(admin, group)
    if from_file is not None:
        tps = sorted(from_file)
    elif args.all_topics:
        tps = sorted(current)
    else:
        tps = []
        specs = [parse_topic_spec(t) for t in args.topic]
        known = await topic_partitions(admin, [name for name, _ in specs])
        for name, parts in specs:
            tps += [TP(name, p) for p in (parts if parts is not None else known[name])]
    earliest = await list_offsets(admin, tps, EARLIEST)
    latest = await list_offsets(admin, tps, LATEST, _isolation(args))

    def clamp(tp: TP, off: int) -> int:
        # Out-of-range targets are clamped into [log start, log end], as Kafka's tool does.
        return min(max(off, earliest[tp]), latest[tp])
    if from_file is not None:
        return {tp: clamp(tp, off) for tp, off in from_file.items()}
    if args.to_earliest:
        return earliest
    if args.to_latest:
        return latest
    if args.to_current:
        return {tp: current.get(tp, latest[tp]) for tp in tps}
    if args.to_offset is not None:
        return {tp: clamp(tp, args.to_offset) for tp in tps}
    if args.shift_by is not None:
        without = [f"{t}-{p}" for t, p in tps if (t, p) not in current]
        if without:
            raise CliError(f"Cannot shift offset for partition {without[0]} since there is no current committed "
                           "offset")
        return {tp: clamp(tp, current[tp] + args.shift_by) for tp in tps}
    if args.by_duration is not None:
        ts = now_ms() - parse_duration_ms(args.by_duration)
    else:
        ts = parse_datetime(args.to_datetime)
    found = await list_offsets(admin, tps, ts)
    return {tp: (off if off >= 0 else latest[tp]) for tp, off in found.items()}


def _isolation(args: argparse.Namespace) -> int:
    return 1 if args.isolation_level == "read_committed" else 0


async def _run(args: argparse.Namespace) -> int:
    admin = AsyncAdminClient(client_config(args, **{"client.id": "rivulet-groups"}))
    try:
        if args.action == "list":
            found = sorted(g for g in set(await admin.list_groups()) if args.type in (None, g[1]))
            if args.format == "json":
                print_json([{"group": gid, "protocol_type": ptype, "state": state} for gid, ptype, state in found])
                return 0
            for gid, ptype, state in found:
                print(f"{gid}\t{state}" if args.state else gid)
            return 0
        if args.action == "describe":
            info = await describe_group(admin, args.group)
            if info.state == "Dead":
                print(f"Error: Consumer group '{args.group}' does not exist.", file=sys.stderr)
                return 1
            return await _describe(admin, info, args)
        if args.action == "delete":
            results = await admin.delete_groups([args.group])
            failed = {g: e.code for g, e in results.items() if e is not None}
            if failed:
                for g, e in failed.items():
                    reason = {ErrorCode.NON_EMPTY_GROUP: "The group is not empty.",
                              ErrorCode.GROUP_ID_NOT_FOUND: "The group id does not exist."}.get(e, ErrorCode(e).name)
                    print(f"Error: Deletion of consumer group '{g}' failed due to: {reason}", file=sys.stderr)
                return 1
            print(f"Deletion of requested consumer groups ('{args.group}') was successful.")
            return 0
        if args.action == "reset-offsets":
            return await _reset_offsets(admin, args)
        if args.action == "delete-offsets":
            return await _delete_offsets(admin, args)
        return 2
    finally:
        await admin.close()


async def _describe(admin: AsyncAdminClient, info: GroupInfo, args: argparse.Namespace) -> int:
    """Kafka's layouts in text, the same columns as JSON objects with --format json."""
    if info.protocol_type == "share":
        return await _describe_share(admin, info, args)
    if info.streams is not None:
        return await _describe_streams(admin, info, info.streams, args)
    text = args.format == "text"
    if args.state:
        _print_state(info, text)
        return 0
    if text and not info.members:
        print(f"\nConsumer group '{args.group}' has no active members.")
    elif text and info.state in ("PreparingRebalance", "CompletingRebalance"):
        print(f"\nWarning: Consumer group '{args.group}' is rebalancing.")
    if args.members:
        _print_members(MEMBER_COLUMNS, [[info.group_id, m.member_id, m.group_instance_id or None, m.host,
                                         m.client_id, len(m.assignment), sorted(m.assignment)]
                                        for m in info.members], text)
        return 0
    rows = await describe_offsets_rows(admin, info, _isolation(args))
    if text:
        print()
    print_table(OFFSET_COLUMNS, rows, args.format, kafka=True)
    return 0


def _print_state(info: GroupInfo, text: bool) -> None:
    """--state: Kafka's layout (kafka-share-groups' has no assignment strategy), or JSON."""
    node, host, port = info.coordinator
    if not text:
        print_json({"group": info.group_id, "coordinator": {"id": node, "host": host, "port": port},
                    "assignment_strategy": info.protocol or None, "state": info.state,
                    "members": len(info.members)})
    elif info.protocol_type == "share":
        print_table(SHARE_STATE_COLUMNS, [[info.group_id, f"{host}:{port} ({node})", info.state,
                                           len(info.members)]], kafka=True)
    else:
        print_table(STATE_COLUMNS, [[info.group_id, f"{host}:{port} ({node})", info.protocol or "", info.state,
                                     len(info.members)]], kafka=True)


def _print_members(columns: list[Column], rows: list[list[object]], text: bool) -> None:
    """Member rows whose last cell is the assignment, a list of (topic, partition)."""
    if not text:
        for r in rows:
            r[-1] = [{"topic": t, "partition": p} for t, p in r[-1]]
        print_table(columns, rows, "json")
    elif rows:
        for r in rows:
            r[-1] = ",".join(f"{t}({p})" for t, p in r[-1]) or None
        print()
        print_table(columns, rows, kafka=True)


async def share_in_flight(admin: AsyncAdminClient, group_id: str, tps: list[TP]) -> dict[TP, int | None]:
    """Each share partition's in-flight records as its share coordinator last persisted them
    (``in_flight_count``); None where the coordinator refuses ReadShareGroupState (Kafka does,
    without CLUSTER_ACTION) or has no state."""
    if not tps:
        return {}
    found = await admin.read_share_group_state(group_id, tps)
    out: dict[TP, int | None] = {}
    for tp, result in found.items():
        snapshot = None if isinstance(result, ApiError) else snapshot_of_read(result)
        out[tp] = None if snapshot is None or snapshot.start_offset < 0 else in_flight_count(snapshot)
    return out


async def _describe_share(admin: AsyncAdminClient, info: GroupInfo, args: argparse.Namespace) -> int:
    """kafka-share-groups --describe: the start offset and lag of each partition the group has
    state for (the lag counts the records from the start offset to the partition's end not yet
    acknowledged or archived, those in flight among them) and Rivulet's in-flight count,
    --members, or --state."""
    text = args.format == "text"
    if args.state:
        _print_state(info, text)
        return 0
    if args.members:
        if text and not info.members:
            print(f"\nShare group '{args.group}' has no active members.")
        _print_members(SHARE_MEMBER_COLUMNS, [[info.group_id, m.member_id, m.host, m.client_id, len(m.assignment),
                                               sorted(m.assignment)] for m in info.members], text)
        return 0
    offsets = await admin.list_share_group_offsets(info.group_id)
    in_flight = await share_in_flight(admin, info.group_id, [tp for tp, o in offsets.items() if o is not None])
    rows = [[info.group_id, t, p, o.start_offset if o else None, o.lag if o else None, in_flight.get(TP(t, p))]
            for (t, p), o in sorted(offsets.items())]
    if text and not rows:
        print(f"\nShare group '{args.group}' has no offset information.")
        return 0
    if text:
        print()
    print_table(SHARE_OFFSET_COLUMNS, rows, args.format, kafka=True)
    return 0


def _task_text(kind: str, tasks: list[sgdr.TaskIds]) -> str:
    """kafka-streams-groups' assignment cell part: ``ACTIVE: 0:[0,1]; 1:[0,1];`` (none: nothing)."""
    parts = [f"{t.subtopology_id}:[{','.join(str(p) for p in sorted(t.partitions))}];"
             for t in sorted(tasks, key=lambda t: t.subtopology_id) if t.partitions]
    return f"{kind}: {' '.join(parts)}" if parts else ""


def _assignments(m: sgdr.Member, verbose: bool) -> str:
    kinds = [("ACTIVE", m.assignment.active_tasks), ("STANDBY", m.assignment.standby_tasks),
             ("WARMUP", m.assignment.warmup_tasks)]
    if verbose:
        kinds += [("TARGET-ACTIVE", m.target_assignment.active_tasks),
                  ("TARGET-STANDBY", m.target_assignment.standby_tasks),
                  ("TARGET-WARMUP", m.target_assignment.warmup_tasks)]
    return " ".join(t for t in (_task_text(k, tasks) for k, tasks in kinds) if t)


def _streams_partitions(d: sgdr.DescribedGroup) -> list[TP]:
    """The partitions the members' active tasks read: each task's partition of its subtopology's
    source and repartition-source topics, as kafka-streams-groups lists them."""
    reads = {s.subtopology_id: [*s.source_topics, *(r.name for r in s.repartition_source_topics)]
             for s in (d.topology.subtopologies if d.topology is not None else [])}
    return sorted({TP(t, p) for m in d.members for task in m.assignment.active_tasks
                   for t in reads.get(task.subtopology_id, []) for p in task.partitions})


async def _describe_streams(admin: AsyncAdminClient, info: GroupInfo, d: sgdr.DescribedGroup,
                            args: argparse.Namespace) -> int:
    """kafka-streams-groups --describe: the offset lag of the partitions the active tasks read
    (--verbose: the committed and end offsets too), --members with their tasks, or --state."""
    text, verbose = args.format == "text", args.verbose
    if args.state:
        node, host, port = info.coordinator
        row = [info.group_id, f"{host}:{port} ({node})", info.state, len(d.members)]
        if verbose:
            row[3:3] = [d.group_epoch, d.assignment_epoch]
        print_table(STREAMS_STATE_COLUMNS_VERBOSE if verbose else STREAMS_STATE_COLUMNS, [row], args.format,
                    kafka=True)
        return 0
    if text and not d.members:
        print(f"\nStreams group '{args.group}' has no active members.", file=sys.stderr)
        return 0
    if args.members:
        rows: list[list[object]] = []
        for m in d.members:
            row: list[object] = [info.group_id, m.member_id, m.process_id, m.client_id, _assignments(m, verbose)]
            if verbose:
                row[1:2] = [d.assignment_epoch, d.topology.epoch if d.topology is not None else None, m.member_id,
                            "classic" if m.is_classic else "streams", m.member_epoch]
            rows.append(row)
        print_table(STREAMS_MEMBER_COLUMNS_VERBOSE if verbose else STREAMS_MEMBER_COLUMNS, rows, args.format,
                    kafka=True)
        return 0
    tps = _streams_partitions(d)
    positions = await committed(admin, info.group_id)
    ends = await list_offsets(admin, tps, LATEST, _isolation(args))
    starts = await list_offsets(admin, tps, EARLIEST)
    rows = []
    for tp in tps:
        end, cur = ends.get(tp, -1), positions.get(tp)
        lag = None if end < 0 else max(end - (cur if cur is not None else max(starts.get(tp, 0), 0)), 0)
        rows.append([info.group_id, tp[0], tp[1], cur, None, None if end < 0 else end, lag] if verbose
                    else [info.group_id, tp[0], tp[1], lag])
    print_table(STREAMS_OFFSET_COLUMNS_VERBOSE if verbose else STREAMS_OFFSET_COLUMNS, rows, args.format, kafka=True)
    return 0


async def _delete_offsets(admin: AsyncAdminClient, args: argparse.Namespace) -> int:
    """Kafka's --delete-offsets: the group forgets its committed offsets of the named
    partitions (all of a topic's when none are named); refused while it reads them. A share
    group forgets its state of whole topics, as kafka-share-groups --delete-offsets."""
    if (await describe_group(admin, args.group)).protocol_type == "share":
        return await _delete_share_offsets(admin, args)
    specs = [parse_topic_spec(t) for t in args.topic]
    known = await topic_partitions(admin, [name for name, parts in specs if parts is None])
    tps = [TP(name, p) for name, parts in specs for p in (parts if parts is not None else known[name])]
    try:
        results = await admin.delete_group_offsets(args.group, tps)
    except ApiError as e:
        reason = {ErrorCode.GROUP_ID_NOT_FOUND: f"group '{args.group}' does not exist",
                  ErrorCode.NON_EMPTY_GROUP: f"group '{args.group}' has members; offsets can be deleted only "
                                             "from an empty group"}.get(e.code, e.code.name)
        raise CliError(f"cannot delete offsets: {reason}") from None
    rows = [[t, p, "Successful" if err is None else f"Error: {err.code.name}"]
            for (t, p), err in sorted(results.items())]
    print_table([Column("TOPIC", "topic"), Column("PARTITION", "partition"), Column("STATUS", "status")], rows,
                kafka=True)
    return 1 if any(err is not None for err in results.values()) else 0


async def _delete_share_offsets(admin: AsyncAdminClient, args: argparse.Namespace) -> int:
    topics = list(dict.fromkeys(parse_topic_spec(t)[0] for t in args.topic))
    try:
        results = await admin.delete_share_group_offsets(args.group, topics)
    except ApiError as e:
        reason = {ErrorCode.NON_EMPTY_GROUP: f"share group '{args.group}' has members; offsets can be deleted only "
                                             "from an empty group"}.get(e.code, e.message or e.code.name)
        raise CliError(f"cannot delete offsets: {reason}") from None
    rows = [[t, "Successful" if err is None else f"Error: {err.message or err.code.name}"]
            for t, err in sorted(results.items())]
    print()
    print_table([Column("TOPIC", "topic"), Column("STATUS", "status")], rows, kafka=True)
    return 1 if any(err is not None for err in results.values()) else 0


async def _reset_offsets(admin: AsyncAdminClient, args: argparse.Namespace) -> int:
    try:
        from_file = read_offsets_file(args.from_file) if args.from_file else None
    except OSError as e:
        raise CliError(f"cannot read --from-file {args.from_file}: {e.strerror}", 2) from None
    except ValueError as e:
        raise CliError(str(e), 2) from None
    if args.all_groups:
        groups = sorted({gid for gid, ptype, _ in await admin.list_groups() if ptype in ("consumer", "")})
    else:
        groups = [args.group]
    plans: dict[str, dict[TP, int]] = {}
    share_groups: set[str] = set()
    with progress("planning", len(groups), "groups") as bar:
        for group in groups:
            info = await describe_group(admin, group)
            if info.state not in ("Empty", "Dead"):
                raise CliError(f"Assignments can only be reset if the group '{group}' is inactive, but the "
                               f"current state is {info.state}.")
            given = None
            if from_file is not None:
                given = from_file.get(group, from_file.get("", {}))
            if info.protocol_type == "share" or args.share:
                share_groups.add(group)
            plans[group] = await compute_reset(admin, group, args, given, share=group in share_groups)
            bar.advance()
    if args.execute:
        with progress("resetting", sum(len(new) for new in plans.values()), "partitions") as bar:
            for group, new in plans.items():
                bar.update(f"resetting {group}")
                # A share group's start offsets (kafka-share-groups --reset-offsets), else committed offsets.
                alter = admin.alter_share_group_offsets if group in share_groups else admin.alter_group_offsets
                errors = await alter(group, new)
                bad = {tp: e for tp, e in errors.items() if e is not None}
                if bad:
                    (t, p), e = min(bad.items())
                    raise CliError(f"failed to reset {t}-{p} of group '{group}': {e.code.name}")
                bar.advance(len(new))
    elif not args.dry_run:
        print("WARN: No action will be performed as the --execute option is missing. Add --execute to "
              "reset the offsets, or --dry-run to keep this behaviour explicitly.", file=sys.stderr)
    if args.export:
        for group, new in plans.items():
            for (t, p), off in sorted(new.items()):
                print(f"{group},{t},{p},{off}" if args.all_groups else f"{t},{p},{off}")
        return 0
    rows = [[group, t, p, off] for group, new in plans.items() for (t, p), off in sorted(new.items())]
    print()
    print_table(RESET_COLUMNS, rows, kafka=True)
    return 0


def groups_main(args: argparse.Namespace) -> int:
    if args.action == "delete-offsets" and not args.topic:
        print("rivulet groups delete-offsets: --topic is required", file=sys.stderr)
        return 2
    if args.action in ("describe", "delete", "delete-offsets") and not args.group or (
            args.action == "reset-offsets" and not args.group and not args.all_groups):
        print(f"rivulet groups {args.action}: --group is required", file=sys.stderr)
        return 2
    if args.action == "reset-offsets":
        targets = [args.to_earliest, args.to_latest, args.to_current, args.to_offset is not None,
                   args.shift_by is not None, args.to_datetime is not None, args.by_duration is not None,
                   args.from_file is not None]
        if sum(bool(t) for t in targets) != 1:
            print("rivulet groups reset-offsets: give exactly one of --to-earliest, --to-latest, --to-current, "
                  "--to-offset, --shift-by, --to-datetime, --by-duration, --from-file", file=sys.stderr)
            return 2
        if args.by_duration is not None:
            try:
                parse_duration_ms(args.by_duration)
            except ValueError as e:
                print(f"rivulet groups reset-offsets: {e}", file=sys.stderr)
                return 2
        if not args.topic and not args.all_topics and args.from_file is None:
            print("rivulet groups reset-offsets: one of --topic or --all-topics is required", file=sys.stderr)
            return 2
        if args.execute and args.dry_run:
            print("rivulet groups reset-offsets: --execute and --dry-run are exclusive", file=sys.stderr)
            return 2
    return run_command(f"groups {args.action}", args, lambda: asyncio.run(_run(args)))


SHARE_DESCRIBE_HELP = (
    "describe on a share group: START-OFFSET and LAG as kafka-share-groups shows them, and IN-FLIGHT, the "
    "records from the start offset to the end of the in-flight window that are neither acknowledged nor "
    "archived, as the share coordinator last persisted them: records acquired since the last state write "
    "(an acknowledgement of any type, a member's share session ending) are not counted until the next one, "
    "and a record still acquired at that write counts as in flight. '-' where the broker refuses ReadShareGroupState "
    "(Apache Kafka does, without CLUSTER_ACTION) or the group has no state there.")


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    g = sub.add_parser("groups", help="list, describe, delete consumer groups and reset their offsets",
                       epilog=SHARE_DESCRIBE_HELP)
    g.add_argument("action", choices=["list", "describe", "delete", "reset-offsets", "delete-offsets"],
                   help="what to do")
    add_connection_args(g)
    g.add_argument("--group", help="the consumer group (describe, delete, reset-offsets)")
    g.add_argument("--members", action="store_true", help="describe: members and their assignments")
    g.add_argument("--state", action="store_true", help="describe: state, coordinator and strategy")
    g.add_argument("--verbose", action="store_true",
                   help="describe of a streams group: kafka-streams-groups' wider layouts (epochs, offsets)")
    g.add_argument("--type", choices=["consumer", "share", "streams"],
                   help="list: only the groups of this protocol type (streams: as kafka-streams-groups --list)")
    g.add_argument("--topic", action="append", metavar="TOPIC[:P,P...]", help="reset-offsets, delete-offsets: the topics (and partitions)")
    g.add_argument("--all-topics", action="store_true", help="reset-offsets: every topic the group committed")
    g.add_argument("--to-earliest", action="store_true", help="reset-offsets: to each partition's log start")
    g.add_argument("--to-latest", action="store_true", help="reset-offsets: to each partition's log end")
    g.add_argument("--to-offset", type=int, help="reset-offsets: to this offset (clamped into the log's range)")
    g.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss",
                   help="reset-offsets: to the first record at or after this time (local time without a zone)")
    g.add_argument("--isolation-level", choices=["read_uncommitted", "read_committed"], default="read_uncommitted",
                   help="describe, reset-offsets --to-latest: log end offset (default, as Kafka's tool) or "
                        "the last stable offset, where open transactions begin")
    g.add_argument("--to-current", action="store_true",
                   help="reset-offsets: to the committed offset (the log end where none is committed)")
    g.add_argument("--shift-by", type=int, metavar="N", help="reset-offsets: move each committed offset by N")
    g.add_argument("--by-duration", metavar="PnDTnHnMnS",
                   help="reset-offsets: to the first record at or after now minus this ISO-8601 duration")
    g.add_argument("--from-file", metavar="CSV",
                   help="reset-offsets: to the offsets in this CSV (topic,partition,offset), as --export writes")
    g.add_argument("--all-groups", action="store_true", help="reset-offsets: every consumer group")
    g.add_argument("--share", action="store_true",
                   help="reset-offsets: the group is a share group, made if it does not exist yet (its "
                        "share-partition start offsets are set, as kafka-share-groups --reset-offsets)")
    g.add_argument("--export", action="store_true",
                   help="reset-offsets: print the new offsets as CSV, for --from-file")
    g.add_argument("--execute", action="store_true", help="reset-offsets: apply the new offsets")
    g.add_argument("--dry-run", action="store_true", help="reset-offsets: only show the new offsets (the default)")
    add_format_arg(g)
    g.set_defaults(func=groups_main)
