"""SharePartitionManager: share sessions, acquiring from the log, ShareFetch long polls."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass

import pytest

from rivulet.common.time import MockClock
from rivulet.common.types import TopicPartition
from rivulet.delayed import Timer
from rivulet.protocol import records as rec
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.replication.replica_manager import ReplicaManager
from rivulet.share import AcknowledgementBatch, AcquiredRecords, InMemorySharePersister, RecordState
from rivulet.share.persister import SharePartitionKey
from rivulet.protocol.records import aborted_batches
from rivulet.share.manager import ShareFetchRequestData, SharePartitionManager, subtract_ranges
from rivulet.storage import Log, LogConfig

pytestmark = pytest.mark.fast

TP = TopicPartition("t", 0)
TID = uuid.uuid4()
ACCEPT, RELEASE, RENEW = 1, 2, 4


@dataclass
class Settings:
    share_record_lock_duration_ms: int = 1000
    share_delivery_count_limit: int = 5
    share_partition_max_record_locks: int = 2000
    share_auto_offset_reset: str = "earliest"
    share_isolation_level: str = "read_uncommitted"
    share_renew_acknowledge_enable: bool = True


class Env:
    def __init__(self, tmp_path, settings: Settings, log_config: LogConfig | None = None) -> None:
        self.timer = Timer()  # manual: time moves with advance_clock only
        self.rm = ReplicaManager(0, self.timer)
        self.log = Log(str(tmp_path / "t-0"), log_config or LogConfig())
        self.partition = self.rm.new_partition(TP, TID, self.log)
        self.rm.add_partition(self.partition)
        self.persister = InMemorySharePersister()
        self.manager = SharePartitionManager(self.rm, self.timer, MockClock(), lambda _g: settings, self.persister)

    def produce(self, n: int, value_bytes: int = 0) -> None:
        batch = rec.encode_batch([rec.Record(0, 1_700_000_000_000 + i, None, (b"v%d" % i).ljust(value_bytes, b"."), [])
                                  for i in range(n)])
        res = self.rm.append_records({TP: bytearray(batch)}, required_acks=1, timeout_ms=1000)
        assert res[TP].error == ErrorCode.NONE

    async def read_state(self):
        await self.manager.writes_done()
        return await self.persister.read_state(SharePartitionKey("g", TID, TP.partition))

    def open(self, member: str) -> None:
        self.manager.update_session("g", member, 0, {TP: TID})

    async def fetch(self, member: str, max_wait_ms: int = 0, max_records: int = 500):
        await self.manager.ensure_loaded("g", [TP])  # the first fetch reads the persister first
        return self.manager.fetch(ShareFetchRequestData("g", member, [TP], max_wait_ms, 1 << 20, max_records), {})

    def close(self) -> None:
        self.rm.shutdown()
        self.timer.shutdown()
        self.log.close()


def run(tmp_path, body, settings: Settings | None = None, log_config: LogConfig | None = None):
    async def main():
        env = Env(tmp_path, settings or Settings(), log_config)
        try:
            await body(env)
        finally:
            env.close()
    asyncio.run(main())


def ranges(result) -> list[tuple[int, int, int]]:
    r = result[TP]
    assert r.error == ErrorCode.NONE
    return [(a.first_offset, a.last_offset, a.delivery_count) for a in r.acquired]


def test_session_epochs(tmp_path) -> None:
    async def body(env: Env) -> None:
        m = env.manager
        with pytest.raises(ApiError) as e:
            m.update_session("g", "m1", 1, {})
        assert e.value.code is ErrorCode.SHARE_SESSION_NOT_FOUND
        env.open("m1")
        m.update_session("g", "m1", 1, {})
        with pytest.raises(ApiError) as e:
            m.update_session("g", "m1", 1, {})
        assert e.value.code is ErrorCode.INVALID_SHARE_SESSION_EPOCH
        m.update_session("g", "m1", 2, {}, forgotten=[TP])
        assert m.session_partitions("g", "m1") == {}
        env.open("m1")  # epoch 0 starts over
        assert m.session_partitions("g", "m1") == {TP: TID}
        m.update_session("g", "m1", 1, {})
        m.close_session("g", "m1")
        with pytest.raises(ApiError) as e:
            m.check_session("g", "m1", -1)
        assert e.value.code is ErrorCode.SHARE_SESSION_NOT_FOUND

    run(tmp_path, body)


def test_share_sessions_are_capped_per_broker(tmp_path) -> None:
    async def body(env: Env) -> None:
        m = env.manager
        m.max_sessions = 2
        env.open("m1")
        env.open("m2")
        with pytest.raises(ApiError) as e:
            env.open("m3")
        assert e.value.code is ErrorCode.SHARE_SESSION_LIMIT_REACHED
        env.open("m2")  # a member's new session replaces its old one
        m.close_session("g", "m1")
        env.open("m3")

    run(tmp_path, body)


def test_fetch_acquires_and_returns_only_acquired_batches(tmp_path) -> None:
    async def body(env: Env) -> None:
        for _ in range(3):
            env.produce(5)
        env.open("m1")
        got = await env.fetch("m1", max_records=7)
        assert ranges(got) == [(0, 9, 1)]  # rounded up to the second log batch
        batches = [(h.base_offset, h.last_offset) for _, h in rec.iter_batches(got[TP].records)]
        assert batches == [(0, 4), (5, 9)]
        env.open("m2")
        assert ranges(await env.fetch("m2")) == [(10, 14, 1)]
        assert ranges(await env.fetch("m2")) == []

    run(tmp_path, body)


def batches_of(result) -> list[tuple[int, int]]:
    return [(h.base_offset, h.last_offset) for _, h in rec.iter_batches(result[TP].records)]


def test_fetch_reads_the_log_on_until_max_records_are_acquired(tmp_path) -> None:
    # 2,000 records of 100 B lie well past a fetch's first read of the log.
    async def body(env: Env) -> None:
        for _ in range(300):
            env.produce(10, value_bytes=100)
        env.open("m1")
        got = await env.fetch("m1", max_records=2000)
        assert ranges(got) == [(0, 1999, 1)]
        assert batches_of(got) == [(i, i + 9) for i in range(0, 2000, 10)]
        assert ranges(await env.fetch("m1", max_records=2000)) == [(2000, 2999, 1)]

    run(tmp_path, body, Settings(share_partition_max_record_locks=5000))


def test_fetch_returns_every_batch_from_the_first_acquired_record_to_the_last(tmp_path) -> None:
    # m2 gets released records at the log's start and new ones far past it, with m1's in
    # between: the answer holds the batches in between too, as one slice of the log.
    async def body(env: Env) -> None:
        for _ in range(300):
            env.produce(10, value_bytes=100)
        env.open("m1")
        assert ranges(await env.fetch("m1", max_records=1000)) == [(0, 999, 1)]
        env.manager.acknowledge("g", "m1", TP, [AcknowledgementBatch(0, 9, [RELEASE])], renew_allowed=True)
        env.open("m2")
        got = await env.fetch("m2", max_records=20)
        assert ranges(got) == [(0, 9, 2), (1000, 1009, 1)]
        assert batches_of(got) == [(i, i + 9) for i in range(0, 1010, 10)]

    run(tmp_path, body)


def test_fetch_takes_the_batches_one_read_of_max_bytes_holds(tmp_path) -> None:
    async def body(env: Env) -> None:
        for _ in range(300):
            env.produce(10, value_bytes=100)
        env.open("m1")
        await env.manager.ensure_loaded("g", [TP])
        max_bytes = 150_000
        got = env.manager.fetch(ShareFetchRequestData("g", "m1", [TP], 0, max_bytes, 3000), {})
        records = got[TP].records
        batch_bytes = len(records) // len(batches_of(got))
        assert len(records) <= max_bytes < len(records) + batch_bytes
        assert ranges(got) == [(0, batches_of(got)[-1][1], 1)]

    run(tmp_path, body)


def test_fetch_takes_records_from_one_segment_as_a_log_read_does(tmp_path) -> None:
    async def body(env: Env) -> None:
        for _ in range(300):
            env.produce(10, value_bytes=100)
        second = env.log.segment_base_offsets()[1]
        env.open("m1")
        assert ranges(await env.fetch("m1", max_records=2000)) == [(0, second - 1, 1)]
        assert ranges(await env.fetch("m1", max_records=10))[0][0] == second

    run(tmp_path, body, log_config=LogConfig(segment_bytes=100_000))


def test_latest_reset_starts_at_the_high_watermark(tmp_path) -> None:
    async def body(env: Env) -> None:
        env.produce(5)
        env.open("m1")
        assert ranges(await env.fetch("m1")) == []
        env.produce(2)
        assert ranges(await env.fetch("m1")) == [(5, 6, 1)]

    run(tmp_path, body, Settings(share_auto_offset_reset="latest"))


class _NewerInStore:
    """A group config store whose copy is newer than what this broker was told so far, as
    ZooKeeper's is while a change notification is on its way."""

    def __init__(self) -> None:
        self.stored = {"g": {"share.auto.offset.reset": "earliest"}}
        self.reads = 0

    def load_group_configs(self) -> dict[str, dict[str, str]]:
        return {}

    async def store_group_config(self, group_id: str, configs) -> None:
        self.stored[group_id] = dict(configs)

    async def read_group_config(self, group_id: str) -> dict[str, str]:
        self.reads += 1
        return dict(self.stored.get(group_id, {}))


def test_a_partition_without_state_starts_from_the_stored_group_config(tmp_path) -> None:
    """share.auto.offset.reset set on another broker, its notification not here yet: the share
    partition re-reads the group's configs before it takes its start, and starts at earliest."""
    from rivulet.coordinator.group_config import GroupConfigs

    async def body(env: Env) -> None:
        store = _NewerInStore()
        configs = GroupConfigs({}, store)
        assert configs.get("g").share_auto_offset_reset == "latest"
        env.manager = SharePartitionManager(env.rm, env.timer, MockClock(), configs.get, env.persister,
                                            reread_settings=configs.reread)
        env.produce(3)
        env.open("m1")
        assert ranges(await env.fetch("m1")) == [(0, 2, 1)]
        assert store.reads == 1 and configs.get("g").share_auto_offset_reset == "earliest"
        env.produce(1)
        assert ranges(await env.fetch("m1")) == [(3, 3, 1)]
        assert store.reads == 1  # loaded once: later fetches use the configs known

    run(tmp_path, body)


def test_long_poll_completes_when_records_arrive(tmp_path) -> None:
    async def body(env: Env) -> None:
        env.open("m1")
        fut = await env.fetch("m1", max_wait_ms=60_000)
        assert isinstance(fut, asyncio.Future) and not fut.done()
        env.produce(3)
        assert fut.done() and ranges(fut.result()) == [(0, 2, 1)]

    run(tmp_path, body)


def test_long_poll_times_out_empty(tmp_path) -> None:
    async def body(env: Env) -> None:
        env.open("m1")
        fut = await env.fetch("m1", max_wait_ms=500)
        env.timer.advance_clock(500)
        assert fut.done() and ranges(fut.result()) == []

    run(tmp_path, body)


def _expire(env: Env) -> None:
    env.timer.advance_clock(1000)


def _release(env: Env) -> None:
    r = env.manager.acknowledge("g", "m1", TP, [AcknowledgementBatch(0, 2, [RELEASE])], renew_allowed=True)
    assert r.acknowledge_error == ErrorCode.NONE


def _close_session(env: Env) -> None:
    env.manager.close_session("g", "m1")


def _close_connection(env: Env) -> None:
    env.manager.connection_closed("conn-1")


@pytest.mark.parametrize("event", [_expire, _release, _close_session, _close_connection])
def test_records_held_by_one_member_go_to_a_waiting_one(tmp_path, event) -> None:
    # m1 acquires, m2's long poll waits; the lock expiring, a release, m1's session closing or
    # its connection closing hands the records to m2, delivered a second time.
    async def body(env: Env) -> None:
        env.produce(3)
        env.manager.update_session("g", "m1", 0, {TP: TID}, owner="conn-1")
        env.manager.update_session("g", "m2", 0, {TP: TID}, owner="conn-2")
        assert ranges(await env.fetch("m1")) == [(0, 2, 1)]
        fut = await env.fetch("m2", max_wait_ms=60_000)
        assert isinstance(fut, asyncio.Future) and not fut.done()
        event(env)
        assert fut.done() and ranges(fut.result()) == [(0, 2, 2)]
        assert set(env.manager.sessions) >= {("g", "m2")}

    run(tmp_path, body)


def test_deleted_partitions_take_their_share_state(tmp_path) -> None:
    async def body(env: Env) -> None:
        env.produce(3)
        env.open("m1")
        await env.fetch("m1")
        env.manager.acknowledge("g", "m1", TP, [AcknowledgementBatch(0, 0, [ACCEPT])], renew_allowed=True)
        assert await env.read_state() is not None
        env.manager.on_partitions_deleted([TP])
        assert env.manager.partitions == {} and env.timer.size == 0
        assert await env.read_state() is None
        assert env.manager.session_partitions("g", "m1") == {}

    run(tmp_path, body)


def test_acknowledge_errors(tmp_path) -> None:
    async def body(env: Env) -> None:
        env.produce(3)
        env.open("m1")
        m = env.manager
        # nothing acquired yet on this partition
        r = m.acknowledge("g", "m1", TP, [AcknowledgementBatch(0, 2, [ACCEPT])], renew_allowed=True)
        assert r.acknowledge_error == ErrorCode.INVALID_RECORD_STATE
        await env.fetch("m1")
        r = m.acknowledge("g", "m1", TP, [AcknowledgementBatch(0, 2, [RENEW])], renew_allowed=False)  # below v2
        assert r.acknowledge_error == ErrorCode.INVALID_REQUEST
        r = m.acknowledge("g", "m2", TP, [AcknowledgementBatch(0, 2, [ACCEPT])], renew_allowed=True)
        assert r.acknowledge_error == ErrorCode.INVALID_RECORD_STATE
        r = m.acknowledge("g", "m1", TopicPartition("nope", 0), [AcknowledgementBatch(0, 0, [ACCEPT])],
                          renew_allowed=True)
        assert r.acknowledge_error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    run(tmp_path, body)


def test_state_survives_a_leadership_move_through_the_persister(tmp_path) -> None:
    async def body(env: Env) -> None:
        env.produce(5)
        env.open("m1")
        await env.fetch("m1")
        env.manager.acknowledge("g", "m1", TP, [AcknowledgementBatch(0, 1, [ACCEPT])], renew_allowed=True)
        env.manager.on_leadership_change([], [env.partition])
        assert env.manager.partitions == {} and env.timer.size == 0
        snap = await env.read_state()
        assert snap is not None and snap.start_offset == 2
        # Leading again: acknowledged records are not redelivered, acquired ones come back.
        assert ranges(await env.fetch("m1")) == [(2, 4, 2)]

    run(tmp_path, body)


def _headers(*batches: bytes):
    return [h for b in batches for _, h in rec.iter_batches(b)]


def test_aborted_batches_are_found_as_a_read_committed_consumer_finds_them() -> None:
    def data(base: int, pid: int, n: int = 2) -> bytes:
        return rec.encode_batch([rec.Record(i, 0, None, b"x", []) for i in range(n)], base_offset=base,
                                producer_id=pid, producer_epoch=0, base_sequence=0, transactional=pid >= 0)

    def marker(base: int, pid: int, kind) -> bytes:
        return rec.encode_control_batch(kind, producer_id=pid, producer_epoch=0, coordinator_epoch=0,
                                        base_offset=base, timestamp=0)

    headers = _headers(data(0, 7), data(2, 8), data(4, -1), marker(6, 7, rec.ControlRecordType.ABORT),
                       marker(7, 8, rec.ControlRecordType.COMMIT), data(8, 7))
    # producer 7 aborted the transaction it began at 0; producer 8 committed; 8.. is a new one of 7's
    assert aborted_batches(headers, [(7, 0)]) == [(0, 1)]
    assert aborted_batches(headers, [(7, 0), (7, 8)]) == [(0, 1), (8, 9)]
    assert aborted_batches(headers, []) == []


def test_archived_aborted_records_are_cut_from_the_acquired_ranges() -> None:
    acquired = [AcquiredRecords(0, 9, 1), AcquiredRecords(12, 14, 2)]
    assert subtract_ranges(acquired, [(0, 1), (5, 6), (12, 14)]) == [AcquiredRecords(2, 4, 1), AcquiredRecords(7, 9, 1)]


def test_acknowledgements_share_a_write_not_sent_yet(tmp_path) -> None:
    writes = []

    class Counting(InMemorySharePersister):
        async def write_state(self, key, snapshot, **kw) -> None:
            writes.append(snapshot)
            await super().write_state(key, snapshot, **kw)

    async def body(env: Env) -> None:
        env.manager.persister = env.persister = Counting()
        env.produce(5)
        env.open("m1")
        await env.fetch("m1")
        results = [env.manager.acknowledge("g", "m1", TP, [AcknowledgementBatch(o, o, [ACCEPT])], renew_allowed=True)
                   for o in range(5)]
        assert len({id(r.persisted) for r in results}) == 5  # each answer waits on its own
        await asyncio.gather(*(r.persisted for r in results))
        assert all(r.acknowledge_error == ErrorCode.NONE for r in results)
        assert len(writes) == 1 and writes[0].start_offset == 5  # one write carried all five
        snap = await env.read_state()
        assert snap is not None and snap.start_offset == 5

    run(tmp_path, body)


def test_accepting_records_frees_locks_for_a_waiting_fetch(tmp_path) -> None:
    # At group.share.partition.max.record.locks a fetch waits; accepting the held records moves
    # the start offset, frees their locks and completes it at once, not after max_wait_ms.
    async def body(env: Env) -> None:
        env.produce(5)
        env.open("m1")
        assert ranges(await env.fetch("m1", max_records=1)) == [(0, 4, 1)]  # whole batch
        env.produce(3)
        fut = await env.fetch("m1", max_wait_ms=60_000)
        assert isinstance(fut, asyncio.Future) and not fut.done()
        r = env.manager.acknowledge("g", "m1", TP, [AcknowledgementBatch(0, 4, [ACCEPT])], renew_allowed=True)
        assert r.acknowledge_error == ErrorCode.NONE
        assert fut.done() and ranges(fut.result()) == [(5, 7, 1)]

    run(tmp_path, body, Settings(share_partition_max_record_locks=5))


def test_a_closed_connections_long_poll_takes_nothing(tmp_path) -> None:
    # m1's connection closes while m1 holds records and long-polls for more: its poll ends
    # empty, and the released records stay Available for the next member, delivered twice.
    async def body(env: Env) -> None:
        env.produce(3)
        env.manager.update_session("g", "m1", 0, {TP: TID}, owner="conn-1")
        assert ranges(await env.fetch("m1")) == [(0, 2, 1)]
        fut = await env.fetch("m1", max_wait_ms=60_000)
        assert isinstance(fut, asyncio.Future) and not fut.done()
        env.manager.connection_closed("conn-1")
        assert fut.done() and ranges(fut.result()) == []
        env.open("m2")
        assert ranges(await env.fetch("m2")) == [(0, 2, 2)]

    run(tmp_path, body)


def test_a_partition_both_listed_and_forgotten_leaves_the_session(tmp_path) -> None:
    async def body(env: Env) -> None:
        env.open("m1")
        # Listed to carry acknowledgements and forgotten in the same request: added, then removed.
        env.manager.update_session("g", "m1", 1, {TP: TID}, forgotten=[TP])
        assert env.manager.session_partitions("g", "m1") == {}

    run(tmp_path, body)


def test_a_batch_acquired_in_part_goes_back_cut_down_to_the_acquired_records(tmp_path) -> None:
    # One stored batch of 300 records under a lock limit of 100: each fetch acquires 100 of
    # them and answers only those (a batch holding them alone), not all 300 each time.
    async def body(env: Env) -> None:
        env.produce(300, value_bytes=100)
        env.open("m1")
        for first in (0, 100, 200):
            got = await env.fetch("m1", max_records=500)
            assert ranges(got) == [(first, first + 99, 1)]
            [(base, last)] = batches_of(got)
            assert (base, last) == (0, 299)
            assert [r.offset for r in rec.decode_batch(got[TP].records).records] == list(range(first, first + 100))
            env.manager.acknowledge("g", "m1", TP, [AcknowledgementBatch(first, first + 99, [ACCEPT])],
                                    renew_allowed=True)

    run(tmp_path, body, Settings(share_partition_max_record_locks=100))


def test_a_fetch_goes_on_from_the_rest_of_a_cut_batch_to_the_lock_limit(tmp_path) -> None:
    # Two stored batches of 150 under a lock limit of 100, max records 10 (the Java client asks
    # for 500 against 2,000 locks): once 0-99 are acknowledged, the next fetch takes the rest of
    # the first batch and the next one's first 50, one answer of 100 records in one batch (the
    # two cut batches joined: the Java client acknowledges each batch it polls on its own).
    async def body(env: Env) -> None:
        env.produce(150)
        env.produce(150)
        env.open("m1")
        assert ranges(await env.fetch("m1", max_records=10)) == [(0, 99, 1)]
        acked = {TP: env.manager.acknowledge("g", "m1", TP, [AcknowledgementBatch(0, 99, [ACCEPT])],
                                             renew_allowed=True)}
        got = env.manager.fetch(ShareFetchRequestData("g", "m1", [TP], 0, 1 << 20, 10), acked)
        assert ranges(got) == [(100, 199, 1)]
        assert batches_of(got) == [(0, 299)]
        records = rec.decode_batch(got[TP].records).records
        assert [r.offset for r in records] == list(range(100, 200))
        t0 = 1_700_000_000_000  # each produced batch's records are stamped t0 + their index in it
        assert [r.timestamp for r in records] == [*range(t0 + 100, t0 + 150), *range(t0, t0 + 50)]

    run(tmp_path, body, Settings(share_partition_max_record_locks=100))


def test_a_cut_answer_leaves_out_batches_holding_no_acquired_record(tmp_path) -> None:
    # m1 holds 10-19 (a batch of its own); m2 is then given 0-9 again and new records from the
    # batch of 20-319, cut at the lock limit: its answer holds 0-9 and the cut batch, not 10-19,
    # joined in one batch.
    async def body(env: Env) -> None:
        env.produce(10)
        env.produce(10)
        env.produce(300)
        env.open("m1")
        assert ranges(await env.fetch("m1", max_records=20)) == [(0, 19, 1)]
        env.manager.acknowledge("g", "m1", TP, [AcknowledgementBatch(0, 9, [RELEASE])], renew_allowed=True)
        env.open("m2")
        got = await env.fetch("m2", max_records=500)
        assert ranges(got) == [(0, 9, 2), (20, 109, 1)]
        assert batches_of(got) == [(0, 319)]
        offsets = [r.offset for _, h in rec.iter_batches(got[TP].records)
                   for r in rec.decode_batch(got[TP].records, _).records]
        assert offsets == [*range(10), *range(20, 110)]

    run(tmp_path, body, Settings(share_partition_max_record_locks=110))


def test_freed_locks_go_to_every_waiting_fetch_in_the_same_turn(tmp_path) -> None:
    # As Kafka's purgatory tries each DelayedShareFetch watching the share partition: accepting
    # the six held records frees six locks, and the three waiting members each take their max
    # records (two, a stored batch), oldest first, within the acknowledgement's own call.
    async def body(env: Env) -> None:
        for _ in range(3):
            env.produce(2)
        for m in ("m1", "m2", "m3", "m4"):
            env.open(m)
        assert ranges(await env.fetch("m1", max_records=6)) == [(0, 5, 1)]
        for _ in range(3):
            env.produce(2)
        waiting = [await env.fetch(m, max_wait_ms=60_000, max_records=2) for m in ("m2", "m3", "m4")]
        assert not any(f.done() for f in waiting)
        r = env.manager.acknowledge("g", "m1", TP, [AcknowledgementBatch(0, 5, [ACCEPT])], renew_allowed=True)
        assert r.acknowledge_error == ErrorCode.NONE
        assert [ranges(f.result()) for f in waiting] == [[(6, 7, 1)], [(8, 9, 1)], [(10, 11, 1)]]

    run(tmp_path, body, Settings(share_partition_max_record_locks=6))


def _min_bytes_fetch(env: Env, min_bytes: int, max_wait_ms: int = 60_000):
    return env.manager.fetch(ShareFetchRequestData("g", "m1", [TP], max_wait_ms, 1 << 20, 500,
                                                   min_bytes=min_bytes), {})


def test_a_share_fetch_waits_for_its_min_bytes(tmp_path) -> None:
    # Kafka's DelayedShareFetch completes once MinBytes lie between the next fetch offset and
    # the high watermark: three small records are not enough, the fetch takes none of them and
    # waits; the next append passes MinBytes and the fetch acquires everything there is.
    async def body(env: Env) -> None:
        env.produce(3, value_bytes=100)
        env.open("m1")
        await env.manager.ensure_loaded("g", [TP])
        fut = _min_bytes_fetch(env, 5000)
        assert isinstance(fut, asyncio.Future) and not fut.done()
        assert env.manager.partitions[("g", TP)].end_offset == 0  # nothing acquired meanwhile
        env.produce(20, value_bytes=100)
        assert not fut.done()
        env.produce(30, value_bytes=100)
        assert fut.done() and ranges(fut.result()) == [(0, 52, 1)]

    run(tmp_path, body)


def test_a_share_fetch_short_of_min_bytes_takes_what_there_is_at_max_wait(tmp_path) -> None:
    async def body(env: Env) -> None:
        env.produce(3)
        env.open("m1")
        await env.manager.ensure_loaded("g", [TP])
        fut = _min_bytes_fetch(env, 1 << 20, max_wait_ms=500)
        assert isinstance(fut, asyncio.Future) and not fut.done()
        env.timer.advance_clock(500)
        assert fut.done() and ranges(fut.result()) == [(0, 2, 1)]

    run(tmp_path, body)


def test_released_records_count_toward_min_bytes(tmp_path) -> None:
    # m1 holds every record; m2 waits for more bytes than the new records bring. m1 releasing
    # its records moves the next fetch offset back to them: their bytes count, and m2 completes.
    async def body(env: Env) -> None:
        env.produce(40, value_bytes=100)
        env.open("m1")
        env.open("m2")
        assert ranges(await env.fetch("m1")) == [(0, 39, 1)]
        env.produce(3, value_bytes=100)
        fut = env.manager.fetch(ShareFetchRequestData("g", "m2", [TP], 60_000, 1 << 20, 500, min_bytes=3000), {})
        assert isinstance(fut, asyncio.Future) and not fut.done()
        r = env.manager.acknowledge("g", "m1", TP, [AcknowledgementBatch(0, 39, [RELEASE])], renew_allowed=True)
        assert r.acknowledge_error == ErrorCode.NONE
        assert fut.done() and ranges(fut.result()) == [(0, 39, 2), (40, 42, 1)]

    run(tmp_path, body)


def test_closing_a_session_writes_only_partitions_it_held_records_of(tmp_path) -> None:
    # As Kafka: a member that fetched nothing from a partition leaves no state for it behind,
    # so ListShareGroupOffsets still shows the partition without a start offset.
    async def body(env: Env) -> None:
        env.open("m1")
        assert ranges(await env.fetch("m1")) == []
        env.manager.close_session("g", "m1")
        assert await env.read_state() is None
        env.produce(3)
        env.open("m2")
        assert ranges(await env.fetch("m2")) == [(0, 2, 1)]
        env.manager.close_session("g", "m2")  # releases its records: written
        state = await env.read_state()
        assert state is not None and state.start_offset == 0
        assert [(b.first_offset, b.last_offset, b.delivery_count) for b in state.state_batches] == [(0, 2, 1)]

    run(tmp_path, body)


def test_an_expired_acquisition_lock_is_written(tmp_path) -> None:
    # As Kafka: the records a lock expiry releases (or archives, at the delivery limit) are
    # written, so their delivery counts survive a restart.
    async def body(env: Env) -> None:
        env.produce(2)
        env.open("m1")
        assert ranges(await env.fetch("m1")) == [(0, 1, 1)]
        env.timer.advance_clock(1000)
        state = await env.read_state()
        assert state is not None
        assert [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                for b in state.state_batches] == [(0, 1, RecordState.AVAILABLE, 1)]
        assert ranges(await env.fetch("m1")) == [(0, 1, 2)]
        env.timer.advance_clock(2000)  # the second delivery (locked at 1000) was the last
        state = await env.read_state()
        assert state is not None and state.start_offset == 2

    run(tmp_path, body, Settings(share_delivery_count_limit=2))


def test_renew_refused_by_the_group_is_an_invalid_record_state(tmp_path) -> None:
    # As Kafka (ShareConsumerTest.testRenewAcknowledgementDisabled): with the group's
    # share.renew.acknowledge.enable false, a RENEW fails with INVALID_RECORD_STATE.
    async def body(env: Env) -> None:
        env.produce(1)
        env.open("m1")
        assert ranges(await env.fetch("m1")) == [(0, 0, 1)]
        r = env.manager.acknowledge("g", "m1", TP, [AcknowledgementBatch(0, 0, [RENEW])], renew_allowed=True)
        assert r.acknowledge_error == ErrorCode.INVALID_RECORD_STATE
        r = env.manager.acknowledge("g", "m1", TP, [AcknowledgementBatch(0, 0, [ACCEPT])], renew_allowed=True)
        assert r.acknowledge_error == ErrorCode.NONE

    run(tmp_path, body, Settings(share_renew_acknowledge_enable=False))
