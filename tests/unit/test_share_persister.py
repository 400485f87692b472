"""The in-memory share persister: summary and initialization (ReadShareGroupStateSummary,
InitializeShareGroupState) and the coordinator's epoch checks."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.share import (
    InMemorySharePersister,
    RecordState,
    SharePartitionKey,
    SharePartitionSnapshot,
    ShareStateSummary,
    StateBatch,
)

pytestmark = pytest.mark.fast

KEY = SharePartitionKey("g", uuid.UUID(int=7), 0)


def test_summary_counts_delivery_complete_records_from_the_start_offset() -> None:
    async def main() -> None:
        p = InMemorySharePersister()
        assert await p.read_summary(KEY) is None
        await p.write_state(KEY, SharePartitionSnapshot(10, (
            StateBatch(8, 11, RecordState.ACKNOWLEDGED, 1),  # 8 and 9 are before the start: not counted
            StateBatch(12, 14, RecordState.AVAILABLE, 1),
            StateBatch(15, 16, RecordState.ARCHIVED, 5),
            StateBatch(17, 17, RecordState.ACKNOWLEDGED, 2),
        )))
        assert await p.read_summary(KEY) == ShareStateSummary(start_offset=10, delivery_complete_count=5)
        assert await p.read_summary(SharePartitionKey("other", KEY.topic_id, 0)) is None
    asyncio.run(main())


def test_initialize_replaces_the_state_with_a_fresh_start() -> None:
    async def main() -> None:
        p = InMemorySharePersister()
        await p.write_state(KEY, SharePartitionSnapshot(3, (StateBatch(3, 4, RecordState.ACKNOWLEDGED, 1),)))
        await p.initialize_state(KEY, 8)
        assert await p.read_state(KEY) == SharePartitionSnapshot(8, (), state_epoch=1)
        assert await p.read_summary(KEY) == ShareStateSummary(8, 0, state_epoch=1)
        await p.delete_state(KEY)
        assert await p.read_summary(KEY) is None
    asyncio.run(main())


def test_epochs_fence_old_writers_and_leaders() -> None:
    async def main() -> None:
        p = InMemorySharePersister()
        await p.write_state(KEY, SharePartitionSnapshot(0, ()), leader_epoch=3)
        with pytest.raises(ApiError) as e:
            await p.read_state(KEY, leader_epoch=2)
        assert e.value.code == ErrorCode.FENCED_LEADER_EPOCH
        await p.initialize_state(KEY, 5)  # an admin reset: state epoch 1
        with pytest.raises(ApiError) as e:
            await p.write_state(KEY, SharePartitionSnapshot(0, (), state_epoch=0), leader_epoch=3)
        assert e.value.code == ErrorCode.FENCED_STATE_EPOCH
        with pytest.raises(ApiError) as e:
            await p.initialize_state(KEY, 5, state_epoch=0)
        assert e.value.code == ErrorCode.FENCED_STATE_EPOCH
        # initialized with -1: no state yet, share.auto.offset.reset decides
        await p.initialize_state(KEY, -1)
        assert await p.read_state(KEY) == SharePartitionSnapshot(-1, (), state_epoch=2)
    asyncio.run(main())
