"""The in-memory share persister's summary and initialization (ReadShareGroupStateSummary,
InitializeShareGroupState)."""

from __future__ import annotations

import pytest

from rivulet.common.types import TopicPartition
from rivulet.share import InMemorySharePersister, RecordState, SharePartitionSnapshot, ShareStateSummary, StateBatch

pytestmark = pytest.mark.fast

TP = TopicPartition("t", 0)


def test_summary_counts_delivery_complete_records_from_the_start_offset() -> None:
    p = InMemorySharePersister()
    assert p.read_summary("g", TP) is None
    p.write_state("g", TP, SharePartitionSnapshot(10, (
        StateBatch(8, 11, RecordState.ACKNOWLEDGED, 1),  # 8 and 9 are before the start: not counted
        StateBatch(12, 14, RecordState.AVAILABLE, 1),
        StateBatch(15, 16, RecordState.ARCHIVED, 5),
        StateBatch(17, 17, RecordState.ACKNOWLEDGED, 2),
    )))
    assert p.read_summary("g", TP) == ShareStateSummary(start_offset=10, delivery_complete_count=5)
    assert p.read_summary("other", TP) is None


def test_initialize_replaces_the_state_with_a_fresh_start() -> None:
    p = InMemorySharePersister()
    p.write_state("g", TP, SharePartitionSnapshot(3, (StateBatch(3, 4, RecordState.ACKNOWLEDGED, 1),)))
    p.initialize_state("g", TP, 8)
    assert p.read_state("g", TP) == SharePartitionSnapshot(8, ())
    assert p.read_summary("g", TP) == ShareStateSummary(8, 0)
    p.delete_state("g", TP)
    assert p.read_summary("g", TP) is None
