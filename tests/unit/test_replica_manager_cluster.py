"""The ReplicaManager under a controller: LeaderAndIsr makes this node lead or follow (with
controller and leader epoch fencing), StopReplica stops and deletes replicas, and the
MetadataCache holds what UpdateMetadata says."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid

import pytest

from rivulet.common.time import MockClock
from rivulet.common.types import TopicPartition
from rivulet.delayed import Timer
from rivulet.protocol.errors import ErrorCode
from rivulet.replication.metadata_cache import (
    LEADER_DURING_DELETE,
    BrokerEndpoint,
    LiveBroker,
    MetadataCache,
    MetadataUpdate,
    PartitionMetadata,
)
from rivulet.replication.partition import Partition, PartitionState
from rivulet.replication.replica_manager import LeaderAndIsrPartition, LeaderEndpoint, ReplicaManager
from rivulet.storage import Log, LogConfig

pytestmark = pytest.mark.fast

T0 = 1_700_000_000_000
TID = uuid.uuid4()
TP = TopicPartition("t", 0)
NODE = 1
B2 = LeaderEndpoint(2, "127.0.0.1", 9002)


class Logs:
    """Replica logs in a temporary directory (the TopicManager's role)."""

    def __init__(self, root) -> None:
        self.root = root
        self.logs: dict[TopicPartition, Log] = {}
        self.deleted: list[TopicPartition] = []

    def log_for_replica(self, tp: TopicPartition, topic_id: uuid.UUID) -> Log:
        if tp not in self.logs:
            self.logs[tp] = Log(str(self.root / f"{tp.topic}-{tp.partition}"), LogConfig())
        return self.logs[tp]

    def open_replica_logs(self, replicas: list[tuple[TopicPartition, uuid.UUID]]) -> None:
        for tp, topic_id in replicas:
            self.log_for_replica(tp, topic_id)

    def delete_replica_log(self, tp: TopicPartition) -> None:
        lg = self.logs.pop(tp, None)
        if lg is not None:
            lg.close()
        self.deleted.append(tp)


class Fetchers:
    def __init__(self) -> None:
        self.following: dict[TopicPartition, LeaderEndpoint] = {}
        self.removed: list[TopicPartition] = []

    def add_partitions(self, leader: LeaderEndpoint, partitions: list[Partition]) -> None:
        for p in partitions:
            self.following[p.tp] = leader

    def remove_partitions(self, tps) -> None:
        for tp in tps:
            self.removed.append(tp)
            self.following.pop(tp, None)


class Leadership:
    def __init__(self) -> None:
        self.changes: list[tuple[list[TopicPartition], list[TopicPartition]]] = []

    def on_leadership_change(self, leaders, followers) -> None:
        self.changes.append(([p.tp for p in leaders], [p.tp for p in followers]))


@pytest.fixture
def rm(tmp_path):
    loop = asyncio.new_event_loop()
    timer = Timer(loop)
    logs = Logs(tmp_path)
    m = ReplicaManager(NODE, timer, clock=MockClock(wall_ms=T0), replica_logs=logs,
                       fetchers=lambda _rm: Fetchers(), leadership=Leadership())
    yield m
    m.shutdown()
    timer.shutdown()
    for lg in logs.logs.values():
        lg.close()
    loop.close()


def state(leader: int, epoch: int, isr=(1, 2), replicas=(1, 2), controller_epoch: int = 1) -> PartitionState:
    return PartitionState(controller_epoch=controller_epoch, leader=leader, leader_epoch=epoch, isr=list(isr),
                          partition_epoch=epoch, replicas=list(replicas))


def lai(rm: ReplicaManager, *states: PartitionState, controller_epoch: int = 1, tp: TopicPartition = TP,
        topic_id: uuid.UUID = TID):
    return rm.become_leader_or_follower(0, controller_epoch, [LeaderAndIsrPartition(tp, topic_id, s) for s in states],
                                        {2: B2})


def test_leader_and_isr_creates_the_replica_and_leads(rm) -> None:
    top, errors = lai(rm, state(NODE, 0))
    assert top == ErrorCode.NONE and errors == {TP: ErrorCode.NONE}
    p = rm.partitions[TP]
    assert p.is_leader and p.leader_epoch == 0 and p.isr == [1, 2]
    assert p.log.epoch_entries() == [(0, 0)]
    assert rm.leadership.changes == [([TP], [])]
    assert TP in rm.fetchers.removed  # nothing fetches for a partition this node leads


def test_follower_fetches_from_the_live_leader(rm) -> None:
    lai(rm, state(2, 3))
    p = rm.partitions[TP]
    assert not p.is_leader and p.leader_id == 2 and p.leader_epoch == 3
    assert rm.fetchers.following == {TP: B2}
    # A new epoch of the same leader: it starts over from that leader (truncating first).
    lai(rm, state(2, 4))
    assert rm.fetchers.following == {TP: B2} and rm.fetchers.removed.count(TP) == 2


def test_a_leader_not_among_the_live_ones_gets_no_fetcher(rm) -> None:
    rm.become_leader_or_follower(0, 1, [LeaderAndIsrPartition(TP, TID, state(3, 1, replicas=(1, 3)))], {2: B2})
    assert rm.partitions[TP].leader_id == 3 and TP not in rm.fetchers.following


def test_stale_controller_epoch_refuses_the_whole_request(rm) -> None:
    lai(rm, state(NODE, 1), controller_epoch=5)
    top, errors = lai(rm, state(2, 2), controller_epoch=4)
    assert top == ErrorCode.STALE_CONTROLLER_EPOCH and errors == {TP: ErrorCode.STALE_CONTROLLER_EPOCH}
    assert rm.partitions[TP].is_leader


def test_an_older_or_equal_leader_epoch_is_not_applied(rm) -> None:
    lai(rm, state(NODE, 5))
    assert lai(rm, state(2, 4))[1] == {TP: ErrorCode.STALE_CONTROLLER_EPOCH}
    # The same epoch again, for the same topic id, is answered as done; for another topic id it is stale.
    assert lai(rm, state(2, 5))[1] == {TP: ErrorCode.NONE}
    assert lai(rm, state(2, 5), topic_id=uuid.uuid4())[1] == {TP: ErrorCode.STALE_CONTROLLER_EPOCH}
    assert rm.partitions[TP].is_leader and rm.partitions[TP].leader_epoch == 5


def test_a_partition_whose_replicas_leave_this_node_out_is_unknown(rm) -> None:
    assert lai(rm, state(2, 1, isr=(2, 3), replicas=(2, 3)))[1] == {TP: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert TP not in rm.partitions


def test_a_partition_opened_single_node_style_is_adopted_by_the_first_leader_and_isr(rm, tmp_path) -> None:
    lg = rm.replica_logs.log_for_replica(TP, TID)
    rm.add_partition(rm.new_partition(TP, TID, lg))  # leads alone, epoch 0, no controller yet
    assert lai(rm, state(2, 0))[1] == {TP: ErrorCode.NONE}
    p = rm.partitions[TP]
    assert p.leader_id == 2 and p.listener is rm and rm.fetchers.following == {TP: B2}


def test_leadership_moves_from_leader_to_follower(rm) -> None:
    lai(rm, state(NODE, 1))
    lai(rm, state(2, 2))
    p = rm.partitions[TP]
    assert not p.is_leader and p.followers == {}
    assert rm.leadership.changes[-1] == ([], [TP])


def test_stop_replica_fences_older_leader_epochs_and_deletes(rm) -> None:
    lai(rm, state(2, 5))
    top, errors = rm.stop_replicas(0, 1, {TP: (4, True)})
    assert top == ErrorCode.NONE and errors == {TP: ErrorCode.FENCED_LEADER_EPOCH}
    assert TP in rm.partitions
    # Without deletion the replica stays, only its fetcher stops.
    assert rm.stop_replicas(0, 1, {TP: (5, False)})[1] == {TP: ErrorCode.NONE}
    assert TP in rm.partitions and TP not in rm.fetchers.following
    assert rm.stop_replicas(0, 1, {TP: (-2, True)})[1] == {TP: ErrorCode.NONE}
    assert TP not in rm.partitions and rm.replica_logs.deleted == [TP]
    assert rm.stop_replicas(0, 0, {TP: (-1, True)})[0] == ErrorCode.STALE_CONTROLLER_EPOCH


def test_stopping_a_led_partition_with_deletion_resigns_it(rm) -> None:
    lai(rm, state(NODE, 1))
    rm.stop_replicas(0, 1, {TP: (1, True)})
    assert rm.leadership.changes[-1] == ([], [TP])


# ---------------------------------------------------------------- the metadata cache

def _update(partitions, brokers=(1, 2), controller: int = 2, ids=None) -> MetadataUpdate:
    return MetadataUpdate(controller, 1, [LiveBroker(b, (BrokerEndpoint("PLAINTEXT", "h", 9000 + b),),
                                                     rack=f"r{b}") for b in brokers],
                          partitions, ids or {"t": TID})


def test_metadata_cache_answers_leaders_brokers_and_ids() -> None:
    c = MetadataCache(1)
    c.update(_update({TP: PartitionMetadata(2, 7, [1, 2], [1, 2]),
                      TopicPartition("t", 1): PartitionMetadata(1, 3, [1], [1, 2])}))
    assert c.controller_id == 2 and [b.broker_id for b in c.alive_brokers()] == [1, 2]
    assert c.alive_broker(2).rack == "r2"
    assert c.num_partitions("t") == 2 and c.topic_id("t") == TID and c.topic_name(TID) == "t"
    leader, epoch, ep = c.leader_and_endpoint(TP, "PLAINTEXT")
    assert (leader, epoch, ep.port) == (2, 7, 9002)
    assert c.leader_and_endpoint(TP, "OTHER")[2] is None
    assert c.leader_and_endpoint(TopicPartition("u", 0), "PLAINTEXT") == (-1, -1, None)


def test_metadata_cache_deletes_partitions_and_forgets_empty_topics() -> None:
    c = MetadataCache(1)
    c.update(_update({TP: PartitionMetadata(2, 7, [1, 2], [1, 2])}))
    deleted = c.update(_update({TP: PartitionMetadata(LEADER_DURING_DELETE, 8, [], [])}, brokers=(1,)))
    assert deleted == [TP] and not c.contains_topic("t") and c.topic_name(TID) is None
    assert c.alive_broker(2) is None


def test_update_metadata_from_an_older_controller_epoch_is_refused() -> None:
    c = MetadataCache(1)
    rm = ReplicaManager(1, Timer(), metadata_cache=c)
    newer = dataclasses.replace(_update({TP: PartitionMetadata(2, 7, [1, 2], [1, 2])}), controller_epoch=2)
    assert rm.maybe_update_metadata_cache(newer) == ErrorCode.NONE and rm.controller_epoch == 2
    stale = _update({TP: PartitionMetadata(1, 8, [1], [1, 2])})  # controller epoch 1
    assert rm.maybe_update_metadata_cache(stale) == ErrorCode.STALE_CONTROLLER_EPOCH
    assert c.leader_and_endpoint(TP, "PLAINTEXT")[:2] == (2, 7)
    rm.shutdown()


# ---------------------------------------------------------------- the leader's side of follower fetches

@contextlib.asynccontextmanager
async def running_rm(tmp_path):
    timer = Timer(asyncio.get_running_loop())
    logs = Logs(tmp_path)
    rm = ReplicaManager(NODE, timer, clock=MockClock(wall_ms=T0), replica_logs=logs)
    try:
        yield rm
    finally:
        rm.shutdown()
        timer.shutdown()
        for lg in logs.logs.values():
            lg.close()


def _batch(n: int = 1) -> bytearray:
    from rivulet.protocol import records as rec
    return bytearray(rec.encode_batch([rec.Record(0, T0, None, b"v", []) for _ in range(n)]))


def _follower_fetch(rm: ReplicaManager, offset: int, last_epoch: int = -1, replica: int = 2, wait: int = 0):
    from rivulet.replication.replica_manager import FetchParams, FetchRequestPartition
    params = FetchParams(replica_id=replica, max_wait_ms=wait, min_bytes=1, max_bytes=1 << 20,
                         partitions=[FetchRequestPartition(TP, offset, 1 << 20, -1, 0, last_epoch)])
    return rm.fetch_messages(params)


def _consumer_fetch(rm: ReplicaManager, offset: int, epoch: int = -1, only_leader: bool = True):
    from rivulet.replication.replica_manager import FetchParams, FetchRequestPartition
    params = FetchParams(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                         partitions=[FetchRequestPartition(TP, offset, 1 << 20, epoch)],
                         fetch_only_leader=only_leader)
    return rm.read_from_local_log(params)[TP]


def test_acks_all_completes_when_the_follower_fetch_moves_the_hw(tmp_path) -> None:
    async def main():
        async with running_rm(tmp_path) as rm:
            lai(rm, state(NODE, 1))
            fut = rm.append_records({TP: _batch(3)}, required_acks=-1, timeout_ms=30_000)
            assert isinstance(fut, asyncio.Future) and not fut.done()
            # Consumers read up to the HW only: nothing yet.
            assert _consumer_fetch(rm, 0).records == b""
            res = _follower_fetch(rm, 0)[TP]
            assert res.error == ErrorCode.NONE and res.records and res.high_watermark == 0
            assert not fut.done()
            res = _follower_fetch(rm, 3)[TP]  # the follower has all three: the HW moves
            assert res.high_watermark == 3
            assert fut.done() and fut.result()[TP].error == ErrorCode.NONE
            assert _consumer_fetch(rm, 0).records
    asyncio.run(main())


def test_min_insync_replicas_refuses_acks_all_and_after_append(tmp_path) -> None:
    async def main():
        async with running_rm(tmp_path) as rm:
            lai(rm, state(NODE, 1, isr=(1,)))
            rm.partitions[TP].log.config = LogConfig(min_insync_replicas=2)
            res = rm.append_records({TP: _batch()}, required_acks=-1, timeout_ms=1000)
            assert res[TP].error == ErrorCode.NOT_ENOUGH_REPLICAS
            assert rm.append_records({TP: _batch()}, required_acks=1, timeout_ms=1000)[TP].error == ErrorCode.NONE
    asyncio.run(main())


def test_a_follower_with_a_divergent_epoch_is_told_where_to_truncate(tmp_path) -> None:
    async def main():
        async with running_rm(tmp_path) as rm:
            lai(rm, state(NODE, 1))
            rm.append_records({TP: _batch(2)}, required_acks=1, timeout_ms=1000)  # epoch 1: offsets 0-1
            lai(rm, state(NODE, 3))
            rm.append_records({TP: _batch(2)}, required_acks=1, timeout_ms=1000)  # epoch 3: offsets 2-3
            # The follower wrote epoch 2 up to offset 5 under another leader: epoch 1 ends at 2 here.
            res = _follower_fetch(rm, 5, last_epoch=2)[TP]
            assert res.diverging_epoch == (1, 2) and res.records == b""
            # In step with us: records.
            res = _follower_fetch(rm, 2, last_epoch=1)[TP]
            assert res.diverging_epoch is None and res.records
            # Consumers naming an old or a future epoch are fenced.
            assert _consumer_fetch(rm, 0, epoch=1).error == ErrorCode.FENCED_LEADER_EPOCH
            assert _consumer_fetch(rm, 0, epoch=4).error == ErrorCode.UNKNOWN_LEADER_EPOCH
            lai(rm, state(2, 4))
            assert _consumer_fetch(rm, 0).error == ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert _consumer_fetch(rm, 0, only_leader=False).error == ErrorCode.NONE  # KIP-392 reads
    asyncio.run(main())


def test_a_waiting_follower_fetch_completes_when_its_last_epoch_diverges(tmp_path) -> None:
    # Kafka's DelayedFetch case H: the leader's log no longer holds the follower's last fetched
    # epoch up to its fetch offset, while the log end stays past that offset (no case F).
    from rivulet.protocol import records as rec
    from rivulet.replication.replica_manager import FetchParams, FetchRequestPartition

    async def main():
        async with running_rm(tmp_path) as rm:
            lai(rm, state(NODE, 1))
            rm.append_records({TP: _batch(3)}, required_acks=1, timeout_ms=1000)  # epoch 1: offsets 0-2
            params = FetchParams(replica_id=2, max_wait_ms=60_000, min_bytes=1 << 20, max_bytes=1 << 20,
                                 partitions=[FetchRequestPartition(TP, 3, 1 << 20, -1, 0, 1)])
            fut = rm.fetch_messages(params)
            assert not fut.done()
            lg = rm.partitions[TP].log
            lg.truncate_to(1)
            data = _batch(3)
            lg.append_as_leader(data, rec.validate_produce_records(data, max_batch_size=1 << 20),
                                leader_epoch=2, now_ms=T0)  # epoch 2 from offset 1: the log end is 4
            rm.fetch_purgatory.check_and_complete(TP)
            assert fut.done()
            assert fut.result()[TP].diverging_epoch == (1, 1)
    asyncio.run(main())


# ---------------------------------------------------------------- a ZooKeeper session that expired

def test_a_fenced_leader_fails_its_waiting_acks_all_writes_at_once_and_refuses_new_ones(tmp_path) -> None:
    async def main():
        async with running_rm(tmp_path) as rm:
            lai(rm, state(NODE, 1))
            fut = rm.append_records({TP: _batch(3)}, required_acks=-1, timeout_ms=30_000)
            assert isinstance(fut, asyncio.Future) and not fut.done()
            assert rm.fence_leaderships() == [TP]
            assert fut.done() and fut.result()[TP].error == ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert rm.is_fenced(TP) and not rm.partitions[TP].is_leader
            res = rm.append_records({TP: _batch()}, required_acks=-1, timeout_ms=1000)
            assert res[TP].error == ErrorCode.NOT_LEADER_OR_FOLLOWER
            # The session turned out alive: it leads again, in the same epoch.
            assert rm.unfence_leaderships() == [TP]
            assert rm.partitions[TP].is_leader and rm.partitions[TP].leader_epoch == 1
    asyncio.run(main())


def test_a_presumed_expiry_fences_only_leaders_whose_followers_went_quiet(rm) -> None:
    lai(rm, state(NODE, 1))
    lai(rm, state(NODE, 1, isr=(1,)), tp=TopicPartition("alone", 0))
    clock = rm.clock
    _follower_fetch(rm, 0)
    # A ZooKeeper outage alone: the follower still fetches, the leader goes on.
    assert rm.fence_leaderships(quiet_ms=3000) == []
    clock.sleep(3000)
    # Cut off from its follower too: nothing can be committed here any more. A partition whose
    # ISR is this broker alone cannot be led by anyone else: it goes on.
    assert rm.fence_leaderships(quiet_ms=3000) == [TP]


def test_leader_and_isr_lifts_the_fence(rm) -> None:
    lai(rm, state(NODE, 1))
    rm.fence_leaderships()
    lai(rm, state(NODE, 2))  # the controller elected this broker again after its return
    assert rm.partitions[TP].is_leader and not rm.is_fenced(TP)


def test_metadata_cache_leaves_out_its_own_broker_while_fenced() -> None:
    c = MetadataCache(1)
    c.update(_update({TP: PartitionMetadata(1, 7, [1, 2], [1, 2])}))
    c.set_self_fenced(True)
    assert [b.broker_id for b in c.alive_brokers()] == [2]
    c.set_self_fenced(False)  # the session resumed
    assert [b.broker_id for b in c.alive_brokers()] == [1, 2]
    c.set_self_fenced(True)
    c.update(_update({TP: PartitionMetadata(2, 8, [2], [1, 2])}))  # the controller's word replaces it
    c.set_self_fenced(False)
    assert [b.broker_id for b in c.alive_brokers()] == [1, 2]


# ---------------------------------------------------------------- KIP-890's check keeps a producer's order

TP2 = TopicPartition("t", 1)
PID = 7


def _txn_batch(seq: int, n: int = 2) -> bytearray:
    from rivulet.protocol import records as rec
    return bytearray(rec.encode_batch([rec.Record(0, T0, None, b"v", []) for _ in range(n)], producer_id=PID,
                                      producer_epoch=0, base_sequence=seq, transactional=True))


class HeldVerifier:
    """The coordinator's answers: NONE, at once except for the first question about each
    partition in ``held``, whose answer waits for ``release`` (a coordinator slow to answer)."""

    def __init__(self, held: set[TopicPartition]) -> None:
        self.held = held
        self.release = asyncio.Event()
        self.asked: list[TopicPartition] = []

    async def verify(self, transactional_id, producer_id, producer_epoch, tp) -> ErrorCode:
        self.asked.append(tp)
        if tp in self.held:
            self.held.discard(tp)
            await self.release.wait()
        return ErrorCode.NONE


@contextlib.asynccontextmanager
async def verifying_rm(tmp_path, verifier: HeldVerifier):
    timer = Timer(asyncio.get_running_loop())
    logs = Logs(tmp_path)
    rm = ReplicaManager(NODE, timer, clock=MockClock(wall_ms=T0), replica_logs=logs, txn_verifier=verifier)
    try:
        for tp in (TP, TP2):
            lai(rm, state(NODE, 1, isr=(1,), replicas=(1,)), tp=tp)
        yield rm
    finally:
        rm.shutdown()
        timer.shutdown()
        for lg in logs.logs.values():
            lg.close()


async def _answer(result) -> dict:
    return await result if isinstance(result, asyncio.Future) else result


def _sequences(rm: ReplicaManager, tp: TopicPartition) -> list[int]:
    from rivulet.protocol import records as rec
    data = _consumer_fetch_tp(rm, tp)
    return [h.base_sequence for _pos, h in rec.iter_batches(data)]


async def _pipelined(rm: ReplicaManager, verifier: HeldVerifier, first: dict, second: dict) -> tuple[dict, dict]:
    """Two requests of one transactional producer sent back to back while the coordinator holds
    its answer; enough loop turns for the second to overtake if it could; then the answers."""
    a = rm.append_records(first, required_acks=1, timeout_ms=1000, transactional_id="tx")
    b = rm.append_records(second, required_acks=1, timeout_ms=1000, transactional_id="tx")
    for _ in range(10):
        await asyncio.sleep(0)
    verifier.release.set()
    return await _answer(a), await _answer(b)


def _consumer_fetch_tp(rm: ReplicaManager, tp: TopicPartition) -> bytes:
    from rivulet.replication.replica_manager import FetchParams, FetchRequestPartition
    params = FetchParams(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                         partitions=[FetchRequestPartition(tp, 0, 1 << 20, -1)])
    return bytes(rm.read_from_local_log(params)[tp].records)


def test_a_request_waiting_for_the_coordinator_keeps_its_producers_next_request_behind(tmp_path) -> None:
    # franz-go pipelines a producer's requests; Kafka reads the next only once the last is
    # answered. The second request opens nothing, yet must not append before the first.
    async def main():
        verifier = HeldVerifier({TP2})
        async with verifying_rm(tmp_path, verifier) as rm:
            opened = await _answer(rm.append_records({TP: _txn_batch(0)}, required_acks=1, timeout_ms=1000,
                                                     transactional_id="tx"))
            assert opened[TP].error == ErrorCode.NONE
            first, second = await _pipelined(rm, verifier, {TP: _txn_batch(2), TP2: _txn_batch(0)},
                                             {TP: _txn_batch(4)})
            assert {tp: r.error for tp, r in first.items()} == {TP: ErrorCode.NONE, TP2: ErrorCode.NONE}
            assert second[TP].error == ErrorCode.NONE
            assert _sequences(rm, TP) == [0, 2, 4]
    asyncio.run(main())


def test_verifications_answered_out_of_order_append_in_request_order(tmp_path) -> None:
    async def main():
        verifier = HeldVerifier({TP})
        async with verifying_rm(tmp_path, verifier) as rm:
            first, second = await _pipelined(rm, verifier, {TP: _txn_batch(0)}, {TP: _txn_batch(2)})
            assert first[TP].error == ErrorCode.NONE and second[TP].error == ErrorCode.NONE
            assert _sequences(rm, TP) == [0, 2]
            # The second was asked about after the first had opened the transaction: not at all.
            assert verifier.asked == [TP]
    asyncio.run(main())


def test_other_producers_do_not_wait_for_a_producers_verification(tmp_path) -> None:
    from rivulet.protocol import records as rec

    async def main():
        verifier = HeldVerifier({TP})
        async with verifying_rm(tmp_path, verifier) as rm:
            waiting = rm.append_records({TP: _txn_batch(0)}, required_acks=1, timeout_ms=1000, transactional_id="tx")
            other = bytearray(rec.encode_batch([rec.Record(0, T0, None, b"v", [])], producer_id=PID + 1,
                                               producer_epoch=0, base_sequence=0))
            res = rm.append_records({TP: other}, required_acks=1, timeout_ms=1000)
            assert isinstance(res, dict) and res[TP].error == ErrorCode.NONE
            verifier.release.set()
            assert (await _answer(waiting))[TP].error == ErrorCode.NONE
    asyncio.run(main())


class _BusyCoordinator:
    """An async verifier whose coordinator answers CONCURRENT_TRANSACTIONS ``busy`` times, then NONE."""

    def __init__(self, busy: int) -> None:
        self.busy = busy
        self.asked = 0

    async def _answer(self) -> ErrorCode:
        self.asked += 1
        return ErrorCode.CONCURRENT_TRANSACTIONS if self.asked <= self.busy else ErrorCode.NONE

    async def verify(self, transactional_id, producer_id, producer_epoch, tp) -> ErrorCode:
        return await self._answer()

    async def add(self, transactional_id, producer_id, producer_epoch, tp) -> ErrorCode:
        return await self._answer()


@pytest.mark.parametrize("busy,max_ms,answer,asked", [
    (2, 1000, ErrorCode.NONE, 3),  # the previous end completes within the retries: appended
    (10_000, 0, ErrorCode.CONCURRENT_TRANSACTIONS, 1),  # no retry time: the producer retries
])
def test_concurrent_transactions_is_asked_again_for_add_partitions_to_txn_retry_backoff_max_ms(
        busy, max_ms, answer, asked) -> None:
    """Kafka's ReplicaManager asks the coordinator again every add.partitions.to.txn.retry.backoff.ms
    while it answers CONCURRENT_TRANSACTIONS, for up to .max.ms, for checks and adds alike."""
    async def main() -> None:
        timer = Timer(asyncio.get_running_loop())
        coordinator = _BusyCoordinator(busy)
        rm = ReplicaManager(NODE, timer, txn_verifier=coordinator, add_retry_backoff_ms=1,
                            add_retry_max_ms=max_ms)
        try:
            tp = TopicPartition("t", 0)
            assert await rm._verify_partition("tx", 1, 0, tp) == answer
            assert coordinator.asked == asked
            coordinator.asked = 0
            assert await rm._add_partition("tx", 1, 0, tp) == answer
            assert coordinator.asked == asked
        finally:
            rm.shutdown()
            timer.shutdown()
    asyncio.run(main())
