"""The in-memory share persister: summary and initialization (ReadShareGroupStateSummary,
InitializeShareGroupState) and the coordinator's epoch checks; the in-flight count over a
persisted state (`rivulet groups describe`'s IN-FLIGHT) and the share coordinator key."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from rivulet.common.types import share_coordinator_key
from rivulet.delayed import Timer
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.protocol.messages import read_share_group_state_response as rsr
from rivulet.share import (
    AcknowledgementBatch,
    InMemorySharePersister,
    SharePartition,
    RecordState,
    SharePartitionKey,
    SharePartitionSnapshot,
    ShareStateSummary,
    StateBatch,
)
from rivulet.share.persister import in_flight_count, snapshot_of_read

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


def test_in_flight_counts_records_from_the_start_offset_neither_acknowledged_nor_archived() -> None:
    snapshot = SharePartitionSnapshot(10, (
        StateBatch(8, 11, RecordState.AVAILABLE, 1),  # 8 and 9 are before the start: not counted
        StateBatch(12, 13, RecordState.ACKNOWLEDGED, 1),
        StateBatch(14, 16, RecordState.AVAILABLE, 2),
        StateBatch(17, 18, RecordState.ARCHIVED, 5),
        StateBatch(20, 20, RecordState.ACQUIRED, 1),  # 19: a gap, in no batch
    ))
    assert in_flight_count(snapshot) == 2 + 3 + 1
    assert in_flight_count(SharePartitionSnapshot(5, ())) == 0
    assert in_flight_count(SharePartitionSnapshot(30, snapshot.state_batches)) == 0


def test_in_flight_of_a_leaders_state_counts_acquired_and_released_records() -> None:
    """What the leader writes: acquired records as Available, so they count as in flight with
    the released ones; acknowledged and rejected ones do not."""
    timer = Timer()
    try:
        sp = SharePartition(0, timer, lock_duration_ms=1000)
        sp.acquire("m", [(0, 9)], max_records=10)
        sp.acknowledge("m", [AcknowledgementBatch(0, 2, [1]), AcknowledgementBatch(3, 3, [3]),
                             AcknowledgementBatch(4, 4, [2])])  # accept 0-2, reject 3, release 4
        snapshot = sp.snapshot()
        assert snapshot.start_offset == 4
        assert in_flight_count(snapshot) == 6  # 4 released, 5-9 still acquired
    finally:
        timer.shutdown()


def test_snapshot_of_a_read_answer() -> None:
    assert snapshot_of_read(rsr.PartitionResult(partition=0, error_code=0, state_epoch=0, start_offset=-1,
                                                state_batches=[])) is None
    batches = [rsr.StateBatch(first_offset=4, last_offset=6, delivery_state=0, delivery_count=1),
               rsr.StateBatch(first_offset=7, last_offset=7, delivery_state=2, delivery_count=1)]
    found = snapshot_of_read(rsr.PartitionResult(partition=0, error_code=0, state_epoch=3, start_offset=4,
                                                 state_batches=batches))
    assert found == SharePartitionSnapshot(4, (StateBatch(4, 6, RecordState.AVAILABLE, 1),
                                               StateBatch(7, 7, RecordState.ACKNOWLEDGED, 1)), 3)
    assert in_flight_count(found) == 3


def test_share_coordinator_key_names_the_topic_by_its_base64_id() -> None:
    topic_id = uuid.UUID("0a0b0c0d-0000-0000-0000-0000000000ff")
    assert share_coordinator_key("g", topic_id, 3) == "g:CgsMDQAAAAAAAAAAAAAA_w:3"
    assert SharePartitionKey("g", topic_id, 3).coordinator_key() == "g:CgsMDQAAAAAAAAAAAAAA_w:3"
