"""The share-group offset admin APIs (KIP-932) as Kafka's group coordinator serves them:
DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets.

A share group has no committed offsets: its "offsets" are the share-partition start offsets
(SPSO) kept in the share partitions' state, which the coordinator reads and changes through a
``ShareStateStore`` (the broker wires the share partitions' persister behind it: the
coordinator never imports them). What the group records itself is which partitions have state,
in ``ShareGroupStatePartitionMetadata``: Alter moves partitions through initializing to
initialized, Delete moves topics through deleting to gone, each step appended before the
next, as Kafka does.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Protocol

from rivulet.common.cluster import MetadataView
from rivulet.common.types import TopicPartition
from rivulet.coordinator import share_group
from rivulet.coordinator.share_group import Record, ShareGroup
from rivulet.protocol.errors import ApiError, ErrorCode

__all__ = [
    "PartitionEndsView",
    "ShareOffsetsPartition",
    "ShareOffsetsResult",
    "ShareOffsetsTopic",
    "ShareStateStore",
    "alter_plan",
    "delete_plan",
]

UNINITIALIZED = -1  # a start offset or lag not known (Kafka's PartitionFactory)
UNKNOWN_PARTITION_MESSAGE = "This server does not host this topic-partition."
NON_EMPTY_MESSAGE = "The group is not empty."


class ShareStateStore(Protocol):
    """The share partitions' state as the coordinator reaches it (Kafka's Persister calls);
    failures raise ``ApiError``."""

    async def share_state_summary(self, group_id: str, tp: TopicPartition) -> tuple[int, int, int] | None:
        """ReadShareGroupStateSummary: (start offset, delivery-complete count, leader epoch),
        None without state."""
        ...

    async def initialize_share_state(self, group_id: str, tp: TopicPartition, start_offset: int) -> None:
        """InitializeShareGroupState: the partition's state starts afresh at ``start_offset``."""
        ...

    async def delete_share_state(self, group_id: str, tps: list[TopicPartition]) -> None:
        """DeleteShareGroupState for these partitions."""
        ...


class PartitionEndsView(Protocol):
    """Partitions' latest offsets, for the lag (Kafka's PartitionMetadataClient)."""

    async def latest_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The latest offset of each partition whose leader answers; the others are left out."""
        ...


@dataclass
class ShareOffsetsPartition:
    partition: int
    start_offset: int = UNINITIALIZED
    leader_epoch: int = 0
    lag: int = UNINITIALIZED
    error: ErrorCode = ErrorCode.NONE
    error_message: str | None = None


@dataclass
class ShareOffsetsTopic:
    name: str
    topic_id: uuid.UUID = uuid.UUID(int=0)
    partitions: list[ShareOffsetsPartition] = field(default_factory=list)
    error: ErrorCode = ErrorCode.NONE  # DeleteShareGroupOffsets answers per topic
    error_message: str | None = None


@dataclass
class ShareOffsetsResult:
    error: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    topics: list[ShareOffsetsTopic] = field(default_factory=list)


async def describe(group_id: str, requested: list[tuple[str, list[int]]], metadata: MetadataView,
                   state: ShareStateStore, ends: PartitionEndsView) -> list[ShareOffsetsTopic]:
    """DescribeShareGroupOffsets for named partitions. As Kafka, the group need not exist: a
    partition without state (or of a topic that does not exist) has start offset -1; the lag
    is the latest offset less the start offset and the delivery-complete records past it."""
    known: list[ShareOffsetsTopic] = []
    unknown: list[ShareOffsetsTopic] = []
    found: dict[TopicPartition, tuple[ShareOffsetsPartition, int]] = {}  # with the delivery-complete count
    for name, partitions in requested:
        info = metadata.get(name)
        if info is None:
            unknown.append(ShareOffsetsTopic(name, partitions=[ShareOffsetsPartition(p) for p in partitions]))
            continue
        topic = ShareOffsetsTopic(name, info.topic_id)
        for p in partitions:
            row = ShareOffsetsPartition(p)
            try:
                summary = await state.share_state_summary(group_id, TopicPartition(name, p))
            except ApiError:
                summary = None  # as Kafka: a failed read is no data, not an error
            if summary is not None and summary[0] != UNINITIALIZED:
                row.start_offset, row.leader_epoch = summary[0], max(summary[2], 0)
                if summary[1] != UNINITIALIZED:  # else the lag is not known either
                    found[TopicPartition(name, p)] = (row, summary[1])
            topic.partitions.append(row)
        known.append(topic)
    if found:
        # A partition whose leader does not answer keeps lag -1 (Kafka answers its ListOffsets error).
        latest = await ends.latest_offsets(list(found))
        for tp, end in latest.items():
            row, done = found[tp]
            row.lag = end - row.start_offset - done
    return known + unknown


def initialized_partitions(group: ShareGroup | None, metadata: MetadataView) -> list[tuple[str, list[int]]]:
    """The partitions DescribeShareGroupOffsets without topics describes: those initialized."""
    if group is None:
        return []
    out = []
    for topic_id, (_name, ps) in group.initialized.items():
        name = metadata.topic_name(topic_id)
        if name is not None:
            out.append((name, sorted(ps)))
    return out


def alter_plan(group: ShareGroup, requested: list[tuple[str, list[tuple[int, int]]]], metadata: MetadataView
               ) -> tuple[list[ShareOffsetsTopic], dict[TopicPartition, int], list[Record]]:
    """AlterShareGroupOffsets on an empty share group: the answer per partition, the start
    offsets to initialize, and the record adding them to the initializing partitions."""
    topics: list[ShareOffsetsTopic] = []
    offsets: dict[TopicPartition, int] = {}
    initializing = dict(group.initializing)
    deleting = dict(group.deleting)
    for name, partitions in requested:
        info = metadata.get(name)
        if info is None:
            topics.append(ShareOffsetsTopic(name, partitions=[
                ShareOffsetsPartition(p, error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                      error_message=UNKNOWN_PARTITION_MESSAGE) for p, _ in partitions]))
            continue
        topic = ShareOffsetsTopic(name, info.topic_id)
        valid = set()
        for p, offset in partitions:
            if 0 <= p < info.num_partitions:
                topic.partitions.append(ShareOffsetsPartition(p))
                offsets[TopicPartition(name, p)] = offset
                valid.add(p)
            else:
                topic.partitions.append(ShareOffsetsPartition(p, error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                              error_message=UNKNOWN_PARTITION_MESSAGE))
        if valid:
            _old, have = initializing.get(info.topic_id, (name, frozenset()))
            initializing[info.topic_id] = (name, have | valid)
            deleting.pop(info.topic_id, None)
        topics.append(topic)
    records = [group.state_partitions_record(group.initialized, initializing, deleting)] if offsets else []
    return topics, offsets, records


def initialized_record(group: ShareGroup, offsets: dict[TopicPartition, int], metadata: MetadataView) -> Record:
    """The record that moves the partitions whose state was initialized from initializing to initialized."""
    done: dict[uuid.UUID, tuple[str, set[int]]] = {}
    for tp in offsets:
        info = metadata.get(tp.topic)
        if info is not None:
            done.setdefault(info.topic_id, (tp.topic, set()))[1].add(tp.partition)
    return share_group.initialized_record(group, {t: (name, frozenset(ps)) for t, (name, ps) in done.items()}, {})


def delete_plan(group: ShareGroup, names: list[str], metadata: MetadataView
                ) -> tuple[dict[uuid.UUID, tuple[str, list[TopicPartition]]], list[ShareOffsetsTopic], list[Record]]:
    """DeleteShareGroupOffsets on an empty share group: the topics whose state goes (an
    initialized topic's partitions, or all of a topic already being deleted), the answers of
    the others (an unknown topic, or one without state: nothing to delete), and the record
    moving the topics to deleting."""
    to_delete: dict[uuid.UUID, tuple[str, list[TopicPartition]]] = {}
    others: list[ShareOffsetsTopic] = []
    initialized = dict(group.initialized)
    deleting = dict(group.deleting)
    for name in names:
        info = metadata.get(name)
        if info is None:
            others.append(ShareOffsetsTopic(name, error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                            error_message=UNKNOWN_PARTITION_MESSAGE))
        elif info.topic_id in initialized:
            _name, ps = initialized.pop(info.topic_id)
            to_delete[info.topic_id] = (name, [TopicPartition(name, p) for p in sorted(ps)])
            deleting[info.topic_id] = name
        elif info.topic_id in deleting:
            to_delete[info.topic_id] = (name, [TopicPartition(name, p) for p in range(info.num_partitions)])
        else:
            others.append(ShareOffsetsTopic(name, info.topic_id))
    records = [group.state_partitions_record(initialized, deleting=deleting)] if to_delete else []
    return to_delete, others, records


def deleted_record(group: ShareGroup, deleted: set[uuid.UUID]) -> Record:
    """The record that forgets the topics whose state is gone."""
    return group.state_partitions_record(group.initialized,
                                         deleting={t: n for t, n in group.deleting.items() if t not in deleted})
