"""Fakes for driving the GroupCoordinator without a broker: a manual timer, an in-memory
__consumer_offsets, and members that record what they were answered. (No tests here.)"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from rivulet.common.cluster import NodeEndpoint
from rivulet.common.time import MockClock
from rivulet.common.types import TopicPartition
from rivulet.coordinator.group_coordinator import GroupCoordinator
from rivulet.coordinator.group_metadata import JoinGroupResult, SyncGroupResult
from rivulet.coordinator.offsets_topic import GROUP_METADATA_TOPIC_NAME
from rivulet.delayed import Timer
from rivulet.protocol import records as rec
from rivulet.protocol.errors import ErrorCode
from rivulet.replication.replica_manager import ProduceResult, TxnOperation
from rivulet.server.acls import Authz
from rivulet.server.handlers.groups import GroupHandlers

CONFIG = {
    "group.min.session.timeout.ms": 6000,
    "group.max.session.timeout.ms": 1800000,
    "group.max.size": 2147483647,
    "group.initial.rebalance.delay.ms": 0,
    "offsets.topic.num.partitions": 4,
    "offsets.topic.segment.bytes": 104857600,
    "offsets.retention.minutes": 10080,
    "offsets.retention.check.interval.ms": 600000,
    "offsets.commit.timeout.ms": 5000,
    "offset.metadata.max.bytes": 4096,
}


@dataclass
class FetchInfo:
    records: bytes


class MemLog:
    """Batches kept in memory with real offsets; enough of storage.Log for loading."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, int, bytes]] = []  # (base, last, bytes)
        self.log_start_offset = 0
        self.log_end_offset = 0

    def append(self, data: bytes) -> int:
        buf = bytearray(data)
        h = rec.parse_batch_header(buf, 0)
        base = self.log_end_offset
        rec.set_base_offset(buf, 0, base)
        last = base + h.last_offset_delta
        self.batches.append((base, last, bytes(buf)))
        self.log_end_offset = last + 1
        return base

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None, min_one_batch: bool = True) -> FetchInfo:
        out = bytearray()
        for base, last, data in self.batches:
            if last < offset:
                continue
            if max_offset is not None and base >= max_offset:
                break
            if out and len(out) + len(data) > max_bytes:
                break
            out += data
        return FetchInfo(bytes(out))

    def records(self) -> list[rec.Record]:
        out = []
        for _, _, data in self.batches:
            for b in rec.decode_records(data):
                out.extend(b.records)
        return out


class FakePartition:
    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.log = MemLog()


class FakeReplicaManager:
    """Appends land at once; with ``defer`` set they wait until ``release()``."""

    def __init__(self) -> None:
        self.partitions: dict[TopicPartition, FakePartition] = {}
        self.defer = False
        self.deferred: list[tuple[asyncio.Future, dict]] = []
        self.fail_with: ErrorCode | None = None
        self.appends = 0

    def append_records(self, entries, *, required_acks, timeout_ms, internal=False):
        self.appends += 1
        results = {}
        for tp, data in entries.items():
            p = self.partitions.get(tp)
            if p is None:
                results[tp] = ProduceResult(error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            elif self.fail_with is not None:
                results[tp] = ProduceResult(error=self.fail_with)
            else:
                results[tp] = ProduceResult(base_offset=p.log.append(data))
        if self.defer and required_acks != 0:
            fut = asyncio.get_running_loop().create_future()
            self.deferred.append((fut, results))
            return fut
        return results

    def release(self) -> None:
        pending, self.deferred = self.deferred, []
        for fut, results in pending:
            fut.set_result(results)


@dataclass
class TopicInfo:
    name: str
    num_partitions: int
    configs: dict = field(default_factory=dict)
    topic_id: uuid.UUID = field(default_factory=uuid.uuid4)


class FakeMetadata:
    def __init__(self) -> None:
        self.topics: dict[str, TopicInfo] = {}

    def get(self, name: str):
        return self.topics.get(name)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return next((t.name for t in self.topics.values() if t.topic_id == topic_id), None)

    def topic_names(self) -> list[str]:
        return list(self.topics)

    def partition_racks(self, topic: str, partition: int) -> frozenset[str]:
        return frozenset()


class FakeCluster:
    """The group coordinator's collaborators: config, replica manager, metadata view, this
    node, timer and clock; it is also the internal-topic creator and the streams groups' topic creator."""

    def __init__(self, *, holds_offsets_topic: bool = True, **overrides: Any) -> None:
        """``holds_offsets_topic``: the data dir already holds __consumer_offsets (a broker's
        restart), so the coordinator leads it from start-up; else a new broker's."""
        self.config = {**CONFIG, **overrides}
        self.node = NodeEndpoint(1, "127.0.0.1", 9092)
        self.clock = MockClock(wall_ms=1_700_000_000_000)
        self.timer = Timer()
        self.replica_manager = FakeReplicaManager()
        self.metadata = FakeMetadata()
        self.internal_creations: list[str] = []
        if holds_offsets_topic:
            self.make_internal_topic(GROUP_METADATA_TOPIC_NAME, self.config["offsets.topic.num.partitions"], {})

    @property
    def now(self) -> int:
        return self.clock.milliseconds()

    async def ensure_internal_topic_off_loop(self, name: str, partitions: int, configs: dict[str, str]) -> TopicInfo:
        self.internal_creations.append(name)
        await asyncio.sleep(0)  # the logs are made on a worker thread: the loop turns meanwhile
        return self.make_internal_topic(name, partitions, configs)

    def make_internal_topic(self, name: str, partitions: int, configs: dict[str, str]) -> TopicInfo:
        info = self.metadata.get(name)
        if info is None:
            info = self.metadata.topics[name] = TopicInfo(name, partitions, configs)
            for i in range(partitions):
                tp = TopicPartition(name, i)
                self.replica_manager.partitions[tp] = FakePartition(tp)
        return info

    def add_topic(self, name: str, partitions: int) -> None:
        self.metadata.topics[name] = TopicInfo(name, partitions)

    async def create_group_topic(self, name: str, partitions: int, replication_factor: int,
                                 configs: dict[str, str]) -> None:
        self.metadata.topics[name] = TopicInfo(name, partitions, configs)

    def advance(self, ms: int) -> None:
        """Move both clocks: the timer's (sessions, rebalances) and the wall clock (offsets)."""
        self.clock.sleep(ms)
        self.timer.advance_clock(self.timer.now_ms + ms)


def new_coordinator(b: FakeCluster, on_share_group_deleted: Callable[[str, list[TopicPartition]], None] | None = None
                    ) -> GroupCoordinator:
    """A coordinator (not started) over ``b``'s collaborators, e.g. the same log after a restart."""
    return GroupCoordinator(b.config, b.replica_manager, b.metadata, b, b.node, b.timer, b.clock,
                            streams_topics=b, on_share_group_deleted=on_share_group_deleted)


def make_coordinator(on_share_group_deleted: Callable[[str, list[TopicPartition]], None] | None = None,
                     **overrides: Any) -> tuple[GroupCoordinator, FakeCluster]:
    b = FakeCluster(**overrides)
    c = new_coordinator(b, on_share_group_deleted)
    c.startup()
    return c, b


async def _checked_never_added(transactional_id: str, producer_id: int, producer_epoch: int,
                               tp: TopicPartition, operation: TxnOperation) -> ErrorCode:
    """No transaction coordinator here: every offsets partition passes KIP-890's check, and none
    is added below transaction.version 2."""
    if operation is TxnOperation.ADD_PARTITION:
        raise AssertionError("an offsets partition added to a transaction below transaction.version 2")
    return ErrorCode.NONE


def group_handlers(c: GroupCoordinator, b: FakeCluster) -> GroupHandlers:
    """The group APIs over ``c`` with no authorizer, at transaction.version 0: no TxnOffsetCommit
    adds the group's offsets partition to a transaction there, and none is refused by KIP-890's
    check (tests/unit/test_txn_coordinator.py covers both against a real broker)."""
    return GroupHandlers(c, b.metadata, b.clock, Authz(None), _checked_never_added)


class Member:
    """A client of the coordinator that records its last answers."""

    def __init__(self, c: GroupCoordinator, group: str, client_id: str = "client", instance_id: str | None = None,
                 session_timeout_ms: int = 10000, rebalance_timeout_ms: int = 30000,
                 protocols: list[tuple[str, bytes]] | None = None, protocol_type: str = "consumer") -> None:
        self.c = c
        self.group = group
        self.client_id = client_id
        self.instance_id = instance_id
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.protocols = protocols if protocols is not None else [("range", b"meta-" + client_id.encode())]
        self.protocol_type = protocol_type
        self.member_id = ""
        self.generation = -1
        self.joins: list[JoinGroupResult] = []
        self.syncs: list[SyncGroupResult] = []

    @property
    def join_result(self) -> JoinGroupResult | None:
        return self.joins[-1] if self.joins else None

    @property
    def sync_result(self) -> SyncGroupResult | None:
        return self.syncs[-1] if self.syncs else None

    def _on_join(self, r: JoinGroupResult) -> None:
        self.joins.append(r)
        if r.error in (ErrorCode.NONE, ErrorCode.MEMBER_ID_REQUIRED):
            self.member_id = r.member_id
        if r.error == ErrorCode.NONE:
            self.generation = r.generation_id

    def join(self, version: int = 9, reason: str | None = None) -> None:
        self.c.handle_join_group(
            self.group, self.member_id, self.instance_id,
            require_known_member_id=version >= 4 and self.instance_id is None,
            support_skipping_assignment=version >= 9, client_id=self.client_id, client_host="/127.0.0.1",
            rebalance_timeout_ms=self.rebalance_timeout_ms, session_timeout_ms=self.session_timeout_ms,
            protocol_type=self.protocol_type, protocols=self.protocols, callback=self._on_join, reason=reason)

    def join_fully(self) -> None:
        """JoinGroup, answering MEMBER_ID_REQUIRED like a v4+ client does."""
        self.join()
        if self.join_result is not None and self.join_result.error == ErrorCode.MEMBER_ID_REQUIRED:
            self.join()

    def sync(self, assignment: dict[str, bytes] | None = None, generation: int | None = None,
             protocol_type: str | None = None, protocol_name: str | None = None) -> None:
        self.c.handle_sync_group(self.group, self.generation if generation is None else generation, self.member_id,
                                 protocol_type, protocol_name, self.instance_id, assignment or {},
                                 self.syncs.append)

    def heartbeat(self, generation: int | None = None) -> ErrorCode:
        return self.c.handle_heartbeat(self.group, self.member_id, self.instance_id,
                                       self.generation if generation is None else generation)

    def leave(self) -> tuple[ErrorCode, list]:
        out: list = []
        self.c.handle_leave_group(self.group, [(self.member_id, self.instance_id, None)],
                                  lambda top, members: out.append((top, members)))
        return out[0]
