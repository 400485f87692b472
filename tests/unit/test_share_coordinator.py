"""The share coordinator: one shard's snapshot and update records, their replay and cadence
(pure), and the coordinator inside an in-process broker writing ``__share_group_state`` and
reading it back after a restart."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from rivulet.common.placement import partition_for
from rivulet.common.types import TopicPartition
from rivulet.protocol import records as rec
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.server.broker import Broker
from rivulet.server.config import BrokerConfig
from rivulet.share import RecordState, SharePartitionKey, SharePartitionSnapshot, ShareStateSummary, StateBatch
from rivulet.share.coordinator import SHARE_GROUP_STATE_TOPIC_NAME
from rivulet.share.coordinator_shard import ShareCoordinatorShard, combine_batches, decode_record
from tests.in_process import cache_led_by, in_loop, running, with_broker

pytestmark = pytest.mark.fast

TID = uuid.UUID("12345678-1234-5678-1234-567812345678")
KEY = SharePartitionKey("g", TID, 0)
AV, ACK, ARC = RecordState.AVAILABLE, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED


def b(first: int, last: int, state: RecordState = ACK, count: int = 1) -> StateBatch:
    return StateBatch(first, last, state, count)


def write(shard: ShareCoordinatorShard, start: int, batches, *, state_epoch: int = 0, leader_epoch: int = 0,
          key: SharePartitionKey = KEY):
    """Write as the coordinator does: the record, then its replay once appended."""
    k, v = shard.write(key, state_epoch=state_epoch, leader_epoch=leader_epoch, start_offset=start,
                       batches=batches, now_ms=1000)
    shard.replay(k, v)
    return decode_record(k, v)


def test_coordinator_key_and_its_partition_are_kafkas() -> None:
    # Kafka's Uuid.toString is URL-safe base64 without padding.
    assert KEY.coordinator_key() == "g:EjRWeBI0VngSNFZ4EjRWeA:0"
    assert 0 <= partition_for(KEY.coordinator_key(), 50) < 50


def test_combine_lays_newer_batches_over_older_ones_from_the_start_offset() -> None:
    current = (b(0, 9, AV, 1),)
    assert combine_batches(current, (b(3, 4, ACK, 1),), 0) == (b(0, 2, AV, 1), b(3, 4, ACK, 1), b(5, 9, AV, 1))
    # cut at the start offset; touching batches of one state and count join
    assert combine_batches(current, (b(3, 9, AV, 1),), 2) == (b(2, 9, AV, 1),)
    # within one write, a later batch wins where they overlap
    assert combine_batches((), (b(0, 4, AV, 2), b(2, 3, ARC, 5)), 0) == (b(0, 1, AV, 2), b(2, 3, ARC, 5),
                                                                       b(4, 4, AV, 2))


def test_combine_matches_a_per_offset_model() -> None:
    import random
    rng = random.Random(7)

    def runs(n: int, lo: int = 0, hi: int = 60, disjoint: bool = True) -> tuple[StateBatch, ...]:
        out, at = [], lo
        for _ in range(n):
            first = rng.randint(at, hi) if disjoint else rng.randint(lo, hi)
            last = first + rng.randint(0, 6)
            out.append(b(first, last, rng.choice([AV, ACK, ARC]), rng.randint(1, 3)))
            if disjoint:
                at = last + 1
                if at > hi:
                    break
        return tuple(out)

    for _ in range(300):
        current = combine_batches((), runs(rng.randint(0, 8)), 0)
        new = runs(rng.randint(0, 8), disjoint=rng.random() < 0.7)
        start = rng.randint(0, 20)
        model: dict[int, tuple] = {}
        for batch in list(current) + list(new):  # later wins
            for o in range(batch.first_offset, batch.last_offset + 1):
                model[o] = (batch.delivery_state, batch.delivery_count)
        got = combine_batches(current, new, start)
        flat = {o: (x.delivery_state, x.delivery_count) for x in got for o in range(x.first_offset, x.last_offset + 1)}
        assert flat == {o: v for o, v in model.items() if o >= start}
        assert all(x.last_offset < y.first_offset for x, y in zip(got, got[1:]))
        assert all(x.last_offset + 1 < y.first_offset or (x.delivery_state, x.delivery_count) !=
                   (y.delivery_state, y.delivery_count) for x, y in zip(got, got[1:]))


def test_first_write_is_a_snapshot_then_updates_until_the_cadence_then_a_new_snapshot() -> None:
    shard = ShareCoordinatorShard(snapshot_update_records_per_snapshot=2)
    kinds = []
    for i in range(6):
        _, value, is_snapshot = write(shard, i, (b(i, i, ACK),))
        kinds.append((is_snapshot, value.snapshot_epoch))
    # snapshot epoch 0, two updates of it, snapshot epoch 1, two updates, snapshot epoch 2
    assert kinds == [(True, 0), (False, 0), (False, 0), (True, 1), (False, 1), (False, 1)]
    state = shard.states[KEY]
    assert state.start_offset == 5 and state.state_batches == (b(5, 5, ACK),)


def test_replaying_the_records_rebuilds_the_same_state() -> None:
    shard = ShareCoordinatorShard(snapshot_update_records_per_snapshot=3)
    records = []
    for start, batches in [(0, (b(0, 9, AV, 1),)), (0, (b(0, 2, ACK),)), (3, (b(3, 4, ARC, 5), b(5, 9, AV, 2))),
                           (3, (b(5, 5, ACK),)), (6, (b(6, 9, AV, 2),)), (6, (b(6, 7, ACK),))]:
        k, v = shard.write(KEY, state_epoch=0, leader_epoch=0, start_offset=start, batches=batches, now_ms=5)
        shard.replay(k, v)
        records.append((k, v))
    other = ShareCoordinatorShard(snapshot_update_records_per_snapshot=3)
    for k, v in records:
        other.replay(k, v)
    assert other.states == shard.states
    assert shard.states[KEY].snapshot() == SharePartitionSnapshot(6, (b(6, 7, ACK), b(8, 9, AV, 2)), 0)
    # Compaction keeps the last record of each key: the last snapshot and the last update.
    # Updates carry the whole window here, so those two alone give the same state.
    last = {k: v for k, v in records}
    compacted = ShareCoordinatorShard()
    for k, v in records:
        if last[k] is v:
            compacted.replay(k, v)
    assert compacted.states[KEY].snapshot() == shard.states[KEY].snapshot()


def test_epochs_fence_and_deletes_tombstone_both_keys() -> None:
    shard = ShareCoordinatorShard()
    write(shard, 0, (b(0, 0),), leader_epoch=4)
    with pytest.raises(ApiError) as e:
        shard.write(KEY, state_epoch=0, leader_epoch=3, start_offset=0, batches=(), now_ms=0)
    assert e.value.code == ErrorCode.FENCED_LEADER_EPOCH
    with pytest.raises(ApiError) as e:
        shard.read(KEY, leader_epoch=3)
    assert e.value.code == ErrorCode.FENCED_LEADER_EPOCH
    assert shard.read(KEY, leader_epoch=6) is not None  # a new leader fences the old one's writes
    with pytest.raises(ApiError) as e:
        shard.write(KEY, state_epoch=0, leader_epoch=4, start_offset=0, batches=(), now_ms=0)
    assert e.value.code == ErrorCode.FENCED_LEADER_EPOCH
    k, v = shard.initialize(KEY, state_epoch=1, start_offset=10, now_ms=0)
    shard.replay(k, v)
    assert shard.summary(KEY, -1) == ShareStateSummary(10, 0, 1, -1)
    with pytest.raises(ApiError) as e:
        shard.write(KEY, state_epoch=0, leader_epoch=7, start_offset=0, batches=(), now_ms=0)
    assert e.value.code == ErrorCode.FENCED_STATE_EPOCH
    tombstones = shard.delete(KEY)
    assert [v for _, v in tombstones] == [None, None] and len({k for k, _ in tombstones}) == 2
    for k, v in tombstones:
        shard.replay(k, v)
    assert shard.read(KEY, -1) is None and shard.delete(KEY) == []


async def start(path: Path) -> Broker:
    broker = Broker(BrokerConfig({"log.dirs": str(path), "listeners": "PLAINTEXT://127.0.0.1:0",
                                  "offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1",
                                  "share.coordinator.state.topic.num.partitions": "3",
                                  "share.coordinator.snapshot.update.records.per.snapshot": "2",
                                  "log.cleaner.enable": "false"}))
    await broker.start()
    return broker


@in_loop
async def test_state_is_written_to_share_group_state_and_reloaded_after_a_restart(tmp_path: Path) -> None:
    keys = [SharePartitionKey("g", TID, p) for p in range(4)]

    async with running(start(tmp_path)) as broker:
        persister = broker.share_persister
        assert await persister.read_state(keys[0]) is None
        for i in range(5):
            for k in keys:
                await persister.write_state(k, SharePartitionSnapshot(i, (b(i, i + 2, AV, 1),)), leader_epoch=0)
        await persister.initialize_state(keys[3], 100)
        await persister.delete_state(keys[2])
        records = []
        for p in range(3):
            lg = broker.replica_manager.partitions[TopicPartition(SHARE_GROUP_STATE_TOPIC_NAME, p)].log
            data = lg.read(0, 1 << 20, max_offset=lg.log_end_offset).records
            records += [decode_record(bytes(r.key), None if r.value is None else bytes(r.value))
                        for batch in rec.decode_records(data) for r in batch.records]
        k0 = [(is_snap, v.snapshot_epoch) for k, v, is_snap in records if k == keys[0]]
        assert k0 == [(True, 0), (False, 0), (False, 0), (True, 1), (False, 1)]

    async with running(start(tmp_path)) as broker:
        persister = broker.share_persister
        got = await persister.read_state(keys[0], leader_epoch=1)
        assert got == SharePartitionSnapshot(4, (b(4, 6, AV, 1),), 0)
        assert await persister.read_state(keys[1]) == got
        assert await persister.read_state(keys[2]) is None
        assert await persister.read_summary(keys[3]) == ShareStateSummary(100, 0, 1, -1)
        with pytest.raises(ApiError) as e:  # the read above recorded leader epoch 1
            await persister.write_state(keys[0], got, leader_epoch=0)
        assert e.value.code == ErrorCode.FENCED_LEADER_EPOCH


@with_broker(start)
async def test_a_persister_on_another_broker_reaches_the_coordinator_over_the_share_state_apis(broker: Broker) -> None:
    """The persister of a broker that does not lead the key's partition sends Write/Read/
    Initialize/DeleteShareGroupState and ReadShareGroupStateSummary to the one that does: here a
    persister told (by its metadata) that the in-process broker leads every partition."""
    from rivulet.replication.link import BrokerLinks
    from rivulet.share.state_persister import CoordinatorSharePersister

    await broker.share_persister.read_state(KEY)  # makes the topic on this single node
    remote = CoordinatorSharePersister(broker.share_coordinator, BrokerLinks(
        "share-state", 99, cache_led_by(broker, SHARE_GROUP_STATE_TOPIC_NAME, 3), "PLAINTEXT",
        request_timeout_ms=10_000))
    try:
        assert await remote.read_state(KEY) is None and await remote.read_summary(KEY) is None
        snap = SharePartitionSnapshot(3, (b(3, 4, ACK), b(5, 9, AV, 2)))
        await remote.write_state(KEY, snap, leader_epoch=2)
        assert await remote.read_state(KEY, leader_epoch=2) == snap
        assert await broker.share_coordinator.read_state(KEY) == snap  # the one written there
        assert await remote.read_summary(KEY) == ShareStateSummary(3, 2, 0, 2)
        with pytest.raises(ApiError) as e:
            await remote.write_state(KEY, snap, leader_epoch=1)
        assert e.value.code == ErrorCode.FENCED_LEADER_EPOCH
        await remote.initialize_state(KEY, 20)
        assert await remote.read_state(KEY) == SharePartitionSnapshot(20, (), 1)
        await remote.delete_state(KEY)
        assert await remote.read_state(KEY) is None
    finally:
        await remote.close()


@with_broker(start)
async def test_find_coordinator_key_type_share(broker: Broker) -> None:
    """Key type SHARE (2) names a share partition "group:topicId:partition" and came with v6."""
    from rivulet.client.connection import BrokerConnection
    from rivulet.protocol.messages.find_coordinator_request import FindCoordinatorRequest

    conn = await BrokerConnection("127.0.0.1", broker.node.port).connect(10)
    try:
        async def ask(key: str, version: int) -> tuple[int, int]:
            resp = await conn.send(FindCoordinatorRequest(key_type=2, coordinator_keys=[key]), version)
            c = resp.coordinators[0]
            return c.error_code, c.node_id
        # As Kafka 4.3.1: the first ask has __share_group_state made and is told to come back.
        assert await ask(KEY.coordinator_key(), 6) == (ErrorCode.COORDINATOR_NOT_AVAILABLE, -1)
        while (answer := await ask(KEY.coordinator_key(), 6))[0] == ErrorCode.COORDINATOR_NOT_AVAILABLE:
            await asyncio.sleep(0.01)
        assert answer == (ErrorCode.NONE, broker.node.node_id)
        assert await ask(KEY.coordinator_key(), 5) == (ErrorCode.INVALID_REQUEST, -1)
        assert await ask("no-partition", 6) == (ErrorCode.INVALID_REQUEST, -1)
    finally:
        await conn.close()


@with_broker(start)
async def test_share_group_state_is_created_off_the_event_loop_while_other_clients_are_answered(broker: Broker) -> None:
    """The first use of the share coordinator makes ``__share_group_state``'s logs on a worker
    thread: held there (slow storage), another client's Metadata is answered meanwhile, and
    callers arriving together share the one creation."""
    import threading

    from rivulet.client.connection import BrokerConnection
    from rivulet.protocol.messages.metadata_request import MetadataRequest

    started, release = threading.Event(), threading.Event()
    made: list[str] = []
    create_logs = broker.log_manager.create_logs

    def slow_create_logs(name, *args, **kwargs):
        made.append(name)
        started.set()
        assert release.wait(30), "the test never released the creation"
        return create_logs(name, *args, **kwargs)

    broker.log_manager.create_logs = slow_create_logs
    conn = await BrokerConnection("127.0.0.1", broker.node.port).connect(10)
    try:
        reads = [asyncio.ensure_future(broker.share_persister.read_state(SharePartitionKey("g", TID, p)))
                 for p in range(3)]
        assert await asyncio.get_running_loop().run_in_executor(None, started.wait, 30)
        resp = await conn.send(MetadataRequest(topics=None), 12)  # answered mid-creation
        assert resp.brokers[0].node_id == broker.node.node_id
        assert SHARE_GROUP_STATE_TOPIC_NAME not in {t.name for t in resp.topics}
        assert not any(r.done() for r in reads)
        release.set()
        assert await asyncio.gather(*reads) == [None, None, None]
        assert made == [SHARE_GROUP_STATE_TOPIC_NAME]  # one creation for the three callers
        assert broker.topics.get(SHARE_GROUP_STATE_TOPIC_NAME).num_partitions == 3
        for p in range(3):
            assert TopicPartition(SHARE_GROUP_STATE_TOPIC_NAME, p) in broker.replica_manager.partitions
    finally:
        release.set()
        await conn.close()
