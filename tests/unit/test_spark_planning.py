"""How the source plans a batch's Spark tasks from its offset ranges (pure logic)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from rivulet.spark.source import (TASK_MIN_RECORDS, RangePartition, RangesPartition,  # noqa: E402
                                  SourceOptions, group_small_ranges, plan_tasks)

pytestmark = pytest.mark.fast


def ranges(sizes: list[int], topic: str = "orders") -> list[RangePartition]:
    """One range per partition, partition p from offset 100 * p."""
    return [RangePartition(topic, p, 100 * p, 100 * p + n) for p, n in enumerate(sizes)]


def offsets(parts: list) -> list[tuple[str, int, int, int]]:
    """Every (topic, partition, start, end) the tasks read, in task order."""
    out = []
    for part in parts:
        for r in part.ranges if isinstance(part, RangesPartition) else [part]:
            out.append((r.topic, r.partition, r.start, r.end))
    return out


def test_a_small_batch_is_one_task_reading_its_ranges_in_partition_order():
    rs = ranges([750, 800, 700, 750])
    parts = group_small_ranges(list(reversed(rs)), None, None)
    assert len(parts) == 1 and isinstance(parts[0], RangesPartition)
    assert offsets(parts) == [("orders", p, 100 * p, 100 * p + n) for p, n in enumerate([750, 800, 700, 750])]


def test_a_middling_batch_shares_fewer_tasks_evenly_and_reads_every_range_once():
    sizes = [TASK_MIN_RECORDS, TASK_MIN_RECORDS // 2, TASK_MIN_RECORDS // 2, TASK_MIN_RECORDS, 10]
    rs = ranges(sizes)
    parts = group_small_ranges(rs, None, None)
    assert len(parts) == sum(sizes) // TASK_MIN_RECORDS == 3
    assert sorted(offsets(parts)) == sorted((r.topic, r.partition, r.start, r.end) for r in rs)
    loads = sorted(sum(r.end - r.start for r in p.ranges) for p in parts)
    assert loads == [TASK_MIN_RECORDS, TASK_MIN_RECORDS, TASK_MIN_RECORDS + 10]


def test_a_big_batch_keeps_a_task_per_range():
    rs = ranges([25_000] * 4)  # the rate benchmark's micro-batch
    assert group_small_ranges(rs, None, None) == rs


def test_min_partitions_and_max_records_per_partition_keep_a_task_per_range():
    rs = ranges([750] * 4)
    assert group_small_ranges(rs, 4, None) == rs
    assert group_small_ranges(rs, 2, None) == rs
    assert group_small_ranges(rs, None, 1000) == rs


def test_the_plan_depends_only_on_the_ranges():
    """A replayed batch (the same offsets, planned again, in any order) gets the same tasks."""
    rs = ranges([9000, 30, 12_000, 8000, 7000, 1], topic="a") + ranges([5000, 4000], topic="b")
    first = offsets(group_small_ranges(rs, None, None))
    assert first == offsets(group_small_ranges(list(reversed(rs)), None, None))
    assert first == offsets(group_small_ranges(sorted(rs, key=lambda r: r.end - r.start), None, None))


def source_options(**extra: str) -> SourceOptions:
    return SourceOptions.parse({"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "orders", **extra},
                               streaming=False)


def test_plan_tasks_drops_empty_ranges_then_groups_the_small_ones():
    rs = ranges([750, 0, 700])
    parts = plan_tasks(rs, source_options())
    assert len(parts) == 1
    assert offsets(parts) == [("orders", 0, 0, 750), ("orders", 2, 200, 900)]


def test_plan_tasks_splits_by_max_records_per_partition_with_a_task_per_piece():
    parts = plan_tasks(ranges([750, 300]), source_options(maxRecordsPerPartition="250"))
    assert offsets(parts) == [("orders", 0, 0, 250), ("orders", 0, 250, 500), ("orders", 0, 500, 750),
                              ("orders", 1, 100, 250), ("orders", 1, 250, 400)]
