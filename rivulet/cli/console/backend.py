"""The console's view of a cluster, through Rivulet's own admin client and consumer only.

Flask serves requests on threads; the client is asyncio. One event loop runs on a thread of
its own with one admin client, and each page's question is a coroutine run there."""

from __future__ import annotations

import argparse
import asyncio
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import TypeVar

from rivulet.cli.console.render import LagHistory
from rivulet.cli.topics import TableStatus, table_status
from rivulet.cli.groups import GroupInfo, committed, compute_reset, describe_group, describe_offsets_rows, \
    list_offsets
from rivulet.client.config import ClientConf
from rivulet.client.admin.client import AsyncAdminClient, ConfigSource
from rivulet.client.consumer.consumer import AIOConsumer
from rivulet.client.core import EARLIEST, LATEST
from rivulet.client.types import TopicPartition
from rivulet.common.types import TopicPartition as TP
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.security.acls import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

T = TypeVar("T")

RESET_STRATEGIES = ("earliest", "latest", "offset", "shift", "datetime")
# What the ACL form offers: the values a new binding may take.
ACL_RESOURCE_TYPES = tuple(t for t in ResourceType if t not in (ResourceType.UNKNOWN, ResourceType.ANY))
ACL_PATTERN_TYPES = (PatternType.LITERAL, PatternType.PREFIXED)
ACL_OPERATIONS = tuple(o for o in AclOperation if o not in (AclOperation.UNKNOWN, AclOperation.ANY))
ACL_PERMISSIONS = (AclPermissionType.ALLOW, AclPermissionType.DENY)
# Each partition of a reset: (the committed offset, if any; the offset the reset commits).
ResetPlan = dict[TP, tuple[int | None, int]]


@dataclass
class Broker:
    node_id: int
    host: str
    port: int
    rack: str | None
    controller: bool


@dataclass
class PartitionRow:
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    start: int
    end: int
    size: int  # bytes of the leader's log; -1 when the broker did not say

    @property
    def messages(self) -> int:
        return max(self.end - self.start, 0)


@dataclass
class TopicRow:
    name: str
    internal: bool
    partitions: list[PartitionRow]
    configs: dict[str, str]
    error: str | None = None
    overrides: frozenset[str] = frozenset()  # configs set on the topic itself, not defaults

    @property
    def messages(self) -> int:
        return sum(p.messages for p in self.partitions)

    @property
    def size(self) -> int:
        return -1 if any(p.size < 0 for p in self.partitions) else sum(p.size for p in self.partitions)

    @property
    def under_replicated(self) -> int:
        return sum(len(p.isr) < len(p.replicas) for p in self.partitions)


@dataclass
class Record:
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


@dataclass
class LagRow:
    topic: str
    partition: int
    committed: int | None
    end: int | None
    lag: int | None
    member: str | None
    client_id: str | None
    host: str | None


@dataclass
class GroupSummary:
    group_id: str
    protocol_type: str
    state: str
    members: int | None
    lag: int | None  # over the partitions with a committed offset


def reset_args(topic: str | None, strategy: str, value: str) -> argparse.Namespace:
    """The form's choice as `rivulet groups reset-offsets` arguments, so that the console plans
    a reset exactly as the command does (clamping into the log's range included)."""
    if strategy not in RESET_STRATEGIES:
        raise ValueError(f"unknown reset strategy '{strategy}'")
    number = None
    if strategy in ("offset", "shift"):
        try:
            number = int(value)
        except ValueError:
            raise ValueError(f"'{value}' is not a whole number") from None
    if strategy == "datetime" and not value.strip():
        raise ValueError("give a date and time such as 2026-01-31T12:00:00")
    return argparse.Namespace(
        all_topics=topic is None, topic=[topic] if topic else [], to_earliest=strategy == "earliest",
        to_latest=strategy == "latest", to_current=False, to_offset=number if strategy == "offset" else None,
        shift_by=number if strategy == "shift" else None, by_duration=None,
        to_datetime=value.strip() if strategy == "datetime" else None, isolation_level="read_uncommitted")


def acl_binding(resource_type: str, name: str, pattern_type: str, principal: str, host: str, operation: str,
                permission: str) -> AclBinding:
    """The binding the ACL form names (enum names in any case). The cluster resource needs no
    name; a missing host is any host. The broker validates the rest, as it does for any client."""
    rt = ResourceType.parse(resource_type)
    name = name.strip() or (CLUSTER_NAME if rt is ResourceType.CLUSTER else "")
    return AclBinding(ResourcePattern(rt, name, PatternType.parse(pattern_type)),
                      AccessControlEntry(principal.strip(), host.strip() or "*", AclOperation.parse(operation),
                                         AclPermissionType.parse(permission)))


def show_acl(b: AclBinding) -> str:
    """One binding as a sentence: ``ALLOW User:alice from * to READ TOPIC orders (LITERAL)``."""
    p, e = b.pattern, b.entry
    return f"{e.permission_type.name} {e.principal} from {e.host} to {e.operation.name} " \
           f"{p.resource_type.name} {p.name} ({p.pattern_type.name})"


class ClusterView:
    def __init__(self, conf: ClientConf) -> None:
        self.conf = dict(conf)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="console-client", daemon=True)
        self._thread.start()
        self.admin: AsyncAdminClient = self._run(self._make_admin())
        self.lag_history: dict[str, LagHistory] = {}

    async def _make_admin(self) -> AsyncAdminClient:
        return AsyncAdminClient({**self.conf, "client.id": "rivulet-console"})

    def _run(self, coro: Coroutine[object, object, T], timeout: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def close(self) -> None:
        try:
            self._run(self.admin.close(), 10)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)

    # ------------------------------------------------------------ cluster and topics

    def cluster(self) -> tuple[str | None, list[Broker]]:
        md = self._run(self.admin.describe_cluster())
        return md.cluster_id, sorted((Broker(b.node_id, b.host, b.port, b.rack, b.node_id == md.controller_id)
                                      for b in md.brokers), key=lambda b: b.node_id)

    def topics(self, with_configs: bool = False, names: list[str] | None = None) -> list[TopicRow]:
        return self._run(self._topics(with_configs, names))

    async def _topics(self, with_configs: bool, names: list[str] | None) -> list[TopicRow]:
        md = await self.admin.metadata(names)
        tps = [TP(t.name, p.partition_index) for t in md.topics if not t.error_code for p in t.partitions]
        starts = await list_offsets(self.admin, tps, EARLIEST)
        ends = await list_offsets(self.admin, tps, LATEST)
        sizes = await self._leader_sizes({p.leader_id for t in md.topics for p in t.partitions})
        out = []
        for t in sorted(md.topics, key=lambda t: t.name):
            if t.error_code:
                out.append(TopicRow(t.name, False, [], {}, ErrorCode(t.error_code).name))
                continue
            configs, overrides = {}, frozenset()
            if with_configs:
                described = await self.admin.describe_topic_configs(t.name)
                configs = {c.name: c.value for c in described if c.value is not None}
                overrides = frozenset(c.name for c in described if c.config_source == ConfigSource.DYNAMIC_TOPIC_CONFIG)
            parts = [PartitionRow(p.partition_index, p.leader_id, list(p.replica_nodes), list(p.isr_nodes),
                                  starts.get(TP(t.name, p.partition_index), -1),
                                  ends.get(TP(t.name, p.partition_index), -1),
                                  sizes.get((p.leader_id, TP(t.name, p.partition_index)), -1))
                     for p in sorted(t.partitions, key=lambda p: p.partition_index)]
            out.append(TopicRow(t.name, bool(t.is_internal), parts, configs, overrides=overrides))
        return out

    async def _leader_sizes(self, leaders: set[int]) -> dict[tuple[int, TP], int]:
        """(broker, partition) -> the bytes of that broker's log of the partition."""
        out: dict[tuple[int, TP], int] = {}
        for node in sorted(n for n in leaders if n >= 0):
            try:
                dirs = await self.admin.describe_log_dirs(node)
            except ApiError:  # not allowed to ask, say: the sizes stay unknown
                continue
            for sizes in dirs.values():
                for tp, size in sizes.items():
                    out[(node, tp)] = size
        return out

    def table_status(self, topic: TopicRow) -> TableStatus:
        """The topic's Iceberg table, as ``rivulet topics describe`` reads it."""
        return self._run(table_status(self.admin, self.conf, topic.name,
                                      {p.partition: p.leader for p in topic.partitions}))

    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     configs: dict[str, str] | None = None) -> None:
        self._run(self.admin.create_topic(name, partitions, replication_factor, configs or {}))

    def alter_topic_configs(self, name: str, set_: dict[str, str], delete: list[str]) -> None:
        self._run(self.admin.alter_topic_configs(name, set_, delete))

    def delete_topic(self, name: str) -> None:
        self._run(self.admin.delete_topic(name))

    def records(self, topic: str, partition: int, offset: int | None, timestamp: int | None,
                limit: int) -> list[Record]:
        """Up to ``limit`` records of one partition from ``offset`` (or the first at or after
        ``timestamp``; else the last ``limit`` records)."""
        return self._run(self._records(topic, partition, offset, timestamp, limit))

    async def _records(self, topic: str, partition: int, offset: int | None, timestamp: int | None,
                       limit: int) -> list[Record]:
        tp = TP(topic, partition)
        start = (await list_offsets(self.admin, [tp], EARLIEST))[tp]
        end = (await list_offsets(self.admin, [tp], LATEST))[tp]
        if timestamp is not None:
            offset = (await list_offsets(self.admin, [tp], timestamp))[tp]
            if offset < 0:
                return []
        elif offset is None:
            offset = max(start, end - limit)
        offset = max(offset, start)
        if offset >= end:
            return []
        consumer = AIOConsumer({**self.conf, "group.id": "rivulet-console", "enable.auto.commit": False,
                                "client.id": "rivulet-console"})
        out: list[Record] = []
        try:
            consumer.assign([TopicPartition(topic, partition, offset)])
            tries = 0
            while len(out) < limit and tries < 20:
                tries += 1
                for m in await consumer.consume(limit - len(out), 0.5):
                    if m.error() is not None:
                        continue
                    out.append(Record(m.partition(), m.offset(), m.timestamp()[1], m.key(), m.value(),
                                      list(m.headers() or [])))
                if out and out[-1].offset + 1 >= end:
                    break
        finally:
            await consumer.close()
        return out[:limit]

    def acls(self) -> list[AclBinding] | None:
        """Every ACL binding, sorted; None when the cluster has no authorizer."""
        try:
            found = self._run(self.admin.describe_acls(AclBindingFilter()))
        except ApiError as e:
            if e.code == ErrorCode.SECURITY_DISABLED:
                return None
            raise
        return sorted(found, key=lambda b: (b.pattern.resource_type.name, b.pattern.name, b.entry.principal,
                                            b.entry.operation.name))

    def create_acl(self, binding: AclBinding) -> None:
        (error,) = self._run(self.admin.create_acls([binding]))
        if error is not None:
            raise error

    def delete_acl(self, binding: AclBinding) -> int:
        """Delete this binding alone; how many the broker deleted (0 if it was already gone)."""
        (result,) = self._run(self.admin.delete_acls([binding.to_filter()]))
        if isinstance(result, ApiError):
            raise result
        return len(result)

    # ------------------------------------------------------------ groups

    def groups(self) -> list[tuple[str, str, str]]:
        return sorted(set(self._run(self.admin.list_groups())))

    def group_summaries(self) -> list[GroupSummary]:
        return self._run(self._group_summaries())

    async def _group_summaries(self) -> list[GroupSummary]:
        out = []
        for gid, ptype, state in sorted(set(await self.admin.list_groups())):
            if ptype not in ("consumer", ""):  # Connect's and others' groups commit no offsets
                out.append(GroupSummary(gid, ptype, state, None, None))
                continue
            info, rows = await self._group(gid)
            lags = [r.lag for r in rows if r.lag is not None]
            out.append(GroupSummary(gid, info.protocol_type or ptype, info.state, len(info.members),
                                    sum(lags) if lags else None))
        return out

    def group(self, group_id: str) -> tuple[GroupInfo, list[LagRow]]:
        info, rows = self._run(self._group(group_id))
        self.lag_history.setdefault(group_id, LagHistory()).add(
            {TP(r.topic, r.partition): r.lag for r in rows if r.lag is not None})
        return info, rows

    async def _group(self, group_id: str) -> tuple[GroupInfo, list[LagRow]]:
        info = await describe_group(self.admin, group_id)
        rows = [LagRow(topic, part, cur, end, lag, member, client, host)
                for _, topic, part, cur, end, lag, member, host, client in
                await describe_offsets_rows(self.admin, info)]
        return info, rows

    def reset_plan(self, group_id: str, topic: str | None, strategy: str, value: str) -> ResetPlan:
        """Each partition's committed offset and the offset a reset would commit."""
        return self._run(self._reset_plan(group_id, topic, strategy, value))

    async def _reset_plan(self, group_id: str, topic: str | None, strategy: str,
                          value: str) -> ResetPlan:
        args = reset_args(topic, strategy, value)
        current = await committed(self.admin, group_id)
        new = await compute_reset(self.admin, group_id, args)
        return {tp: (current.get(tp), off) for tp, off in sorted(new.items())}

    def apply_reset(self, group_id: str, topic: str | None, strategy: str, value: str) -> ResetPlan:
        """Commit the planned offsets; the group must be inactive, as Kafka's tool requires."""
        return self._run(self._apply_reset(group_id, topic, strategy, value))

    async def _apply_reset(self, group_id: str, topic: str | None, strategy: str,
                           value: str) -> ResetPlan:
        info = await describe_group(self.admin, group_id)
        if info.state not in ("Empty", "Dead"):
            raise ValueError(f"Assignments can only be reset if the group '{group_id}' is inactive, but the "
                             f"current state is {info.state}.")
        plan = await self._reset_plan(group_id, topic, strategy, value)
        errors = await self.admin.alter_group_offsets(group_id, {tp: new for tp, (_, new) in plan.items()})
        bad = {tp: e for tp, e in errors.items() if e is not None}
        if bad:
            (t, p), e = min(bad.items())
            raise ApiError(e.code, f"reset of {t}-{p}")
        return plan
