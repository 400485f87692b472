"""The share-group offset APIs' pure steps: DescribeShareGroupOffsets' rows and lag, and the
ShareGroupStatePartitionMetadata records AlterShareGroupOffsets and DeleteShareGroupOffsets
write (initializing, initialized, deleting)."""

from __future__ import annotations

import asyncio

import pytest

from rivulet.common.types import TopicPartition
from rivulet.coordinator import share_offsets as so
from rivulet.coordinator.share_group import ShareGroup
from rivulet.protocol.errors import ErrorCode
from test_consumer_group import Topics

pytestmark = pytest.mark.fast

TOPICS = Topics(a=2, b=1)
A, B = TOPICS.get("a").topic_id, TOPICS.get("b").topic_id


class State:
    def __init__(self) -> None:
        self.summaries: dict[tuple[str, TopicPartition], tuple[int, int, int]] = {}

    async def share_state_summary(self, group_id: str, tp: TopicPartition) -> tuple[int, int, int] | None:
        return self.summaries.get((group_id, tp))

    async def initialize_share_state(self, group_id: str, tp: TopicPartition, start_offset: int) -> None:
        self.summaries[(group_id, tp)] = (start_offset, 0, -1)

    async def delete_share_state(self, group_id: str, tps: list[TopicPartition]) -> None:
        for tp in tps:
            self.summaries.pop((group_id, tp), None)


class Ends:
    """Partition ends where "a"'s leader answers and "b"'s does not."""

    async def latest_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: 20 for tp in tps if tp.topic == "a"}


def replay(group: ShareGroup, records) -> None:
    for key, value in records:
        group.replay(key, value)


def test_describe_rows_lag_and_unknown_topics_last() -> None:
    state = State()
    state.summaries[("g", TopicPartition("a", 0))] = (4, 3, 2)
    state.summaries[("g", TopicPartition("b", 0))] = (2, 0, 0)
    rows = asyncio.run(so.describe("g", [("gone", [0]), ("a", [0, 1]), ("b", [0])], TOPICS, state, Ends()))
    assert [t.name for t in rows] == ["a", "b", "gone"]
    # The partition's end is not known here (another broker leads it): its lag is not either.
    assert (rows[1].partitions[0].start_offset, rows[1].partitions[0].lag) == (2, -1)
    a = rows[0]
    assert a.topic_id == A
    assert (a.partitions[0].start_offset, a.partitions[0].lag, a.partitions[0].leader_epoch) == (4, 13, 2)  # 20 - 4 - 3
    assert (a.partitions[1].start_offset, a.partitions[1].lag, a.partitions[1].error) == (-1, -1, ErrorCode.NONE)
    assert rows[2].topic_id.int == 0 and rows[2].partitions[0].start_offset == -1


def test_alter_records_initializing_then_initialized() -> None:
    group = ShareGroup("g")
    topics, offsets, records = so.alter_plan(group, [("a", [(0, 5), (3, 1)]), ("nope", [(0, 1)])], TOPICS)
    assert offsets == {TopicPartition("a", 0): 5}
    assert [(t.name, [(p.partition, p.error) for p in t.partitions]) for t in topics] == [
        ("a", [(0, ErrorCode.NONE), (3, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]),
        ("nope", [(0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)])]
    replay(group, records)
    assert group.initializing == {A: ("a", frozenset({0}))} and group.initialized == {}
    replay(group, [so.initialized_record(group, offsets, TOPICS)])
    assert group.initializing == {} and group.initialized == {A: ("a", frozenset({0}))}
    assert so.initialized_partitions(group, TOPICS) == [("a", [0])]


def test_delete_moves_topics_through_deleting() -> None:
    group = ShareGroup("g")
    replay(group, [group.state_partitions_record({A: ("a", frozenset({0, 1})), B: ("b", frozenset({0}))})])
    to_delete, others, records = so.delete_plan(group, ["a", "nope"], TOPICS)
    assert to_delete == {A: ("a", [TopicPartition("a", 0), TopicPartition("a", 1)])}
    assert [(t.name, t.error) for t in others] == [("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    replay(group, records)
    assert group.deleting == {A: "a"} and set(group.initialized) == {B}
    # A topic still being deleted is deleted again, every partition of it.
    again, _others, _records = so.delete_plan(group, ["a"], TOPICS)
    assert again == to_delete
    replay(group, [so.deleted_record(group, {A})])
    assert group.deleting == {} and set(group.initialized) == {B}
    # A topic the group has no state for is answered without error.
    nothing, others, records = so.delete_plan(group, ["a"], TOPICS)
    assert nothing == {} and records == [] and [(t.name, t.error, t.topic_id) for t in others] == [
        ("a", ErrorCode.NONE, A)]
