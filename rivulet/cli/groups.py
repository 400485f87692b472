"""`rivulet groups list|describe|delete|reset-offsets`: Kafka's kafka-consumer-groups tool.

Talks to the group's coordinator with Rivulet's own codec: FindCoordinator, DescribeGroups,
OffsetFetch and ListOffsets for describe (offsets and lag), DeleteGroups, and OffsetCommit
with generation -1 (a standalone commit, allowed only while the group is inactive) for
reset-offsets. reset-offsets is a dry run unless --execute is given, as in Kafka.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys
from dataclasses import dataclass, field
from typing import Any

from rivulet.client.admin import parse_bootstrap
from rivulet.client.connection import BrokerConnection
from rivulet.protocol.errors import ErrorCode, KafkaError
from rivulet.protocol.messages import (
    delete_groups_request as dgq,
    describe_groups_request as dsq,
    find_coordinator_request as fcq,
    list_groups_request as lgq,
    list_offsets_request as loq,
    metadata_request as mq,
    offset_commit_request as ocq,
    offset_fetch_request as ofq,
)
from rivulet.protocol.messages.consumer_protocol_assignment import ConsumerProtocolAssignment

LATEST, EARLIEST = -1, -2


def _check(code: int, what: str) -> None:
    if code:
        raise KafkaError(ErrorCode(code), what)


def decode_assignment(data: bytes) -> list[tuple[str, int]]:
    """Partitions of a consumer-protocol assignment (int16 version, then the struct)."""
    if len(data) < 2:
        return []
    version = min(int.from_bytes(data[:2], "big", signed=True), 3)
    a = ConsumerProtocolAssignment.decode(bytes(data), max(version, 0), 2)
    return [(tp.topic, p) for tp in a.assigned_partitions for p in tp.partitions]


@dataclass
class MemberInfo:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: list[tuple[str, int]] = field(default_factory=list)


@dataclass
class GroupInfo:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberInfo]
    coordinator: tuple[int, str, int]


class GroupAdmin:
    """The admin calls the tool needs, each sent to the broker that serves it."""

    def __init__(self, bootstrap_servers: str, client_id: str = "rivulet-groups") -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.client_id = client_id
        self._conns: dict[tuple[str, int], BrokerConnection] = {}

    async def _conn(self, host: str | None = None, port: int | None = None) -> BrokerConnection:
        targets = [(host, port)] if host is not None else self.bootstrap
        last: Exception | None = None
        for h, p in targets:
            c = self._conns.get((h, p))
            if c is not None and not c.closed:
                return c
            try:
                c = await BrokerConnection(h, p, self.client_id).connect()
                self._conns[(h, p)] = c
                return c
            except OSError as e:
                last = e
        raise ConnectionError(f"cannot reach {targets}: {last}")

    async def close(self) -> None:
        for c in self._conns.values():
            await c.close()

    async def coordinator(self, group_id: str, retries: int = 20) -> tuple[int, str, int]:
        """(node id, host, port), retrying while the coordinator loads or is unavailable."""
        for _ in range(retries):
            c = await self._conn()
            v = c.version_for(10)
            req = fcq.FindCoordinatorRequest(key=group_id, key_type=0, coordinator_keys=[group_id])
            resp = await c.send(req, version=v)
            if v >= 4:
                r = resp.coordinators[0]
                err, node = r.error_code, (r.node_id, r.host, r.port)
            else:
                err, node = resp.error_code, (resp.node_id, resp.host, resp.port)
            if err in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
                await asyncio.sleep(0.2)
                continue
            _check(err, f"FindCoordinator for group {group_id}")
            return node
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"no coordinator for group {group_id}")

    async def _coord_conn(self, group_id: str) -> tuple[BrokerConnection, tuple[int, str, int]]:
        node = await self.coordinator(group_id)
        return await self._conn(node[1], node[2]), node

    async def list_groups(self) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) across every broker."""
        c = await self._conn()
        md = await c.send(mq.MetadataRequest(topics=[], allow_auto_topic_creation=False))
        out: dict[str, tuple[str, str, str]] = {}
        for b in md.brokers:
            bc = await self._conn(b.host, b.port)
            resp = await bc.send(lgq.ListGroupsRequest(states_filter=[], types_filter=[]))
            _check(resp.error_code, "ListGroups")
            for g in resp.groups:
                out[g.group_id] = (g.group_id, g.protocol_type, g.group_state or "")
        return sorted(out.values())

    async def describe(self, group_id: str) -> GroupInfo:
        c, node = await self._coord_conn(group_id)
        resp = await c.send(dsq.DescribeGroupsRequest(groups=[group_id], include_authorized_operations=False))
        g = resp.groups[0]
        _check(g.error_code, f"DescribeGroups {group_id}")
        members = []
        for m in g.members:
            assignment: list[tuple[str, int]] = []
            if g.protocol_type == "consumer" and m.member_assignment:
                try:
                    assignment = decode_assignment(m.member_assignment)
                except Exception:
                    assignment = []
            members.append(MemberInfo(m.member_id, m.group_instance_id, m.client_id, m.client_host, assignment))
        return GroupInfo(group_id, g.group_state, g.protocol_type, g.protocol_data, members, node)

    async def committed(self, group_id: str) -> dict[tuple[str, int], tuple[int, str]]:
        c, _ = await self._coord_conn(group_id)
        v = c.version_for(9)
        if v >= 8:
            req = ofq.OffsetFetchRequest(groups=[ofq.OffsetFetchRequestGroup(group_id=group_id, topics=None)],
                                         require_stable=False)
        else:
            req = ofq.OffsetFetchRequest(group_id=group_id, topics=None, require_stable=False)
        resp = await c.send(req, version=v)
        out = {}
        if v >= 8:
            grp = resp.groups[0]
            _check(grp.error_code, f"OffsetFetch {group_id}")
            topics = [(t.name, t.partitions) for t in grp.topics]
        else:
            _check(resp.error_code, f"OffsetFetch {group_id}")
            topics = [(t.name, t.partitions) for t in resp.topics]
        for name, parts in topics:
            for p in parts:
                if p.error_code == 0 and p.committed_offset >= 0:
                    out[(name, p.partition_index)] = (p.committed_offset, p.metadata or "")
        return out

    async def topic_partitions(self, topics: list[str] | None) -> dict[str, list[int]]:
        c = await self._conn()
        md = await c.send(mq.MetadataRequest(
            topics=None if topics is None else [mq.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False))
        out = {}
        for t in md.topics:
            if t.error_code:
                raise KafkaError(ErrorCode(t.error_code), f"topic {t.name}")
            if t.is_internal and topics is None:
                continue
            out[t.name] = sorted(p.partition_index for p in t.partitions)
        return out

    async def list_offsets(self, tps: list[tuple[str, int]], timestamp: int,
                           isolation_level: int = 0) -> dict[tuple[str, int], int]:
        """Offsets for a timestamp (or LATEST / EARLIEST); -1 where no record qualifies.
        Under read_committed (``isolation_level=1``) LATEST is the last stable offset."""
        if not tps:
            return {}
        c = await self._conn()
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        req = loq.ListOffsetsRequest(replica_id=-1, isolation_level=isolation_level, topics=[
            loq.ListOffsetsTopic(name=t, partitions=[loq.ListOffsetsPartition(partition_index=p, timestamp=timestamp)
                                                     for p in ps]) for t, ps in by_topic.items()])
        resp = await c.send(req)
        out = {}
        for t in resp.topics:
            for p in t.partitions:
                _check(p.error_code, f"ListOffsets {t.name}-{p.partition_index}")
                out[(t.name, p.partition_index)] = p.offset
        return out

    async def delete_groups(self, group_ids: list[str]) -> dict[str, int]:
        out = {}
        for gid in group_ids:
            c, _ = await self._coord_conn(gid)
            resp = await c.send(dgq.DeleteGroupsRequest(groups_names=[gid]))
            for r in resp.results:
                out[r.group_id] = r.error_code
        return out

    async def commit(self, group_id: str, offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        c, _ = await self._coord_conn(group_id)
        by_topic: dict[str, list[ocq.OffsetCommitRequestPartition]] = {}
        for (t, p), off in sorted(offsets.items()):
            by_topic.setdefault(t, []).append(ocq.OffsetCommitRequestPartition(
                partition_index=p, committed_offset=off, committed_leader_epoch=-1, committed_metadata=""))
        req = ocq.OffsetCommitRequest(group_id=group_id, generation_id_or_member_epoch=-1, member_id="",
                                      group_instance_id=None, retention_time_ms=-1, topics=[
                                          ocq.OffsetCommitRequestTopic(name=t, partitions=ps)
                                          for t, ps in by_topic.items()])
        resp = await c.send(req)
        return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


# ---------------------------------------------------------------- output

def _table(rows: list[list[Any]]) -> str:
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(" ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows)


async def describe_offsets_rows(admin: GroupAdmin, info: GroupInfo, isolation_level: int = 0) -> list[list[Any]]:
    committed = await admin.committed(info.group_id)
    owner: dict[tuple[str, int], MemberInfo] = {}
    for m in info.members:
        for tp in m.assignment:
            owner[tp] = m
    tps = sorted(set(committed) | set(owner))
    ends = await admin.list_offsets(tps, LATEST, isolation_level)
    rows = [["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
             "CLIENT-ID"]]
    for tp in tps:
        cur = committed.get(tp, (None, ""))[0]
        end = ends.get(tp, -1)
        lag = "-" if cur is None or end < 0 else max(end - cur, 0)
        m = owner.get(tp)
        rows.append([info.group_id, tp[0], tp[1], "-" if cur is None else cur, "-" if end < 0 else end, lag,
                     m.member_id if m else "-", m.host if m else "-", m.client_id if m else "-"])
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


async def compute_reset(admin: GroupAdmin, args: argparse.Namespace) -> dict[tuple[str, int], int]:
    if args.all_topics:
        committed = await admin.committed(args.group)
        tps = sorted(committed)
    else:
        tps = []
        specs = [parse_topic_spec(t) for t in args.topic]
        known = await admin.topic_partitions([name for name, _ in specs])
        for name, parts in specs:
            tps += [(name, p) for p in (parts if parts is not None else known[name])]
    if args.to_earliest:
        return await admin.list_offsets(tps, EARLIEST)
    latest = await admin.list_offsets(tps, LATEST, _isolation(args))
    if args.to_latest:
        return latest
    if args.to_offset is not None:
        earliest = await admin.list_offsets(tps, EARLIEST)
        # Out-of-range targets are clamped into [log start, log end], as Kafka's tool does.
        return {tp: min(max(args.to_offset, earliest[tp]), latest[tp]) for tp in tps}
    ts = parse_datetime(args.to_datetime)
    found = await admin.list_offsets(tps, ts)
    return {tp: (off if off >= 0 else latest[tp]) for tp, off in found.items()}


def _isolation(args: argparse.Namespace) -> int:
    return 1 if args.isolation_level == "read_committed" else 0


async def _run(args: argparse.Namespace) -> int:
    admin = GroupAdmin(args.bootstrap_server)
    try:
        if args.action == "list":
            for gid, ptype, state in await admin.list_groups():
                print(f"{gid}\t{state}" if args.state else gid)
            return 0
        if args.action == "describe":
            info = await admin.describe(args.group)
            if info.state == "Dead":
                print(f"Error: Consumer group '{args.group}' does not exist.", file=sys.stderr)
                return 1
            if args.state:
                print(_table([["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                              [info.group_id, f"{info.coordinator[1]}:{info.coordinator[2]} ({info.coordinator[0]})",
                               info.protocol or "", info.state, len(info.members)]]))
                return 0
            if not info.members:
                print(f"\nConsumer group '{args.group}' has no active members.")
            elif info.state in ("PreparingRebalance", "CompletingRebalance"):
                print(f"\nWarning: Consumer group '{args.group}' is rebalancing.")
            if args.members:
                rows = [["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]]
                for m in info.members:
                    assignment = ",".join(f"{t}({p})" for t, p in sorted(m.assignment)) or "-"
                    rows.append([info.group_id, m.member_id, m.group_instance_id or "-", m.host, m.client_id,
                                 len(m.assignment), assignment])
                if len(rows) > 1:
                    print()
                    print(_table(rows))
                return 0
            rows = await describe_offsets_rows(admin, info, _isolation(args))
            print()
            print(_table(rows))
            return 0
        if args.action == "delete":
            results = await admin.delete_groups([args.group])
            failed = {g: e for g, e in results.items() if e}
            if failed:
                for g, e in failed.items():
                    reason = {ErrorCode.NON_EMPTY_GROUP: "The group is not empty.",
                              ErrorCode.GROUP_ID_NOT_FOUND: "The group id does not exist."}.get(e, ErrorCode(e).name)
                    print(f"Error: Deletion of consumer group '{g}' failed due to: {reason}", file=sys.stderr)
                return 1
            print(f"Deletion of requested consumer groups ('{args.group}') was successful.")
            return 0
        if args.action == "reset-offsets":
            info = await admin.describe(args.group)
            if info.state not in ("Empty", "Dead"):
                print(f"Error: Assignments can only be reset if the group '{args.group}' is inactive, but the "
                      f"current state is {info.state}.", file=sys.stderr)
                return 1
            new = await compute_reset(admin, args)
            rows = [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]]
            rows += [[args.group, t, p, off] for (t, p), off in sorted(new.items())]
            if args.execute:
                errors = await admin.commit(args.group, new)
                bad = {tp: e for tp, e in errors.items() if e}
                if bad:
                    for (t, p), e in sorted(bad.items()):
                        print(f"Error: failed to reset {t}-{p}: {ErrorCode(e).name}", file=sys.stderr)
                    return 1
            elif not args.dry_run:
                print("WARN: No action will be performed as the --execute option is missing. Add --execute to "
                      "reset the offsets, or --dry-run to keep this behaviour explicitly.", file=sys.stderr)
            print()
            print(_table(rows))
            return 0
        return 2
    except KafkaError as e:
        print(f"rivulet groups {args.action}: {e}", file=sys.stderr)
        return 1
    except (ConnectionError, OSError) as e:
        print(f"rivulet groups {args.action}: cannot reach {args.bootstrap_server}: {e}", file=sys.stderr)
        return 1
    finally:
        await admin.close()


def groups_main(args: argparse.Namespace) -> int:
    if args.action in ("describe", "delete", "reset-offsets") and not args.group:
        print(f"rivulet groups {args.action}: --group is required", file=sys.stderr)
        return 2
    if args.action == "reset-offsets":
        targets = [args.to_earliest, args.to_latest, args.to_offset is not None, args.to_datetime is not None]
        if sum(bool(t) for t in targets) != 1:
            print("rivulet groups reset-offsets: give exactly one of --to-earliest, --to-latest, --to-offset, "
                  "--to-datetime", file=sys.stderr)
            return 2
        if not args.topic and not args.all_topics:
            print("rivulet groups reset-offsets: one of --topic or --all-topics is required", file=sys.stderr)
            return 2
        if args.execute and args.dry_run:
            print("rivulet groups reset-offsets: --execute and --dry-run are exclusive", file=sys.stderr)
            return 2
    return asyncio.run(_run(args))


def add_parser(sub: Any) -> None:
    g = sub.add_parser("groups", help="list, describe, delete consumer groups and reset their offsets")
    g.add_argument("action", choices=["list", "describe", "delete", "reset-offsets"])
    g.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    g.add_argument("--group")
    g.add_argument("--members", action="store_true", help="describe: members and their assignments")
    g.add_argument("--state", action="store_true", help="describe: state, coordinator and strategy")
    g.add_argument("--topic", action="append", metavar="TOPIC[:P,P...]", help="reset-offsets: topics to reset")
    g.add_argument("--all-topics", action="store_true", help="reset-offsets: every topic the group committed")
    g.add_argument("--to-earliest", action="store_true")
    g.add_argument("--to-latest", action="store_true")
    g.add_argument("--to-offset", type=int)
    g.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss")
    g.add_argument("--isolation-level", choices=["read_uncommitted", "read_committed"], default="read_uncommitted",
                   help="describe, reset-offsets --to-latest: log end offset (default, as Kafka's tool) or "
                        "the last stable offset, where open transactions begin")
    g.add_argument("--execute", action="store_true")
    g.add_argument("--dry-run", action="store_true")
    g.set_defaults(func=groups_main)
