"""Two brokers in cluster mode in one process, over real sockets; the test plays the controller
(LeaderAndIsr, UpdateMetadata, StopReplica). Followers fetch, acks=all waits for them, a
leadership change truncates the old leader's unreplicated tail, and the replicas' logs end up
byte-identical."""

from __future__ import annotations

import asyncio
import threading
import uuid

import pytest
from controller_requests import Part, leader_and_isr, stop_replica, update_metadata

from rivulet.client import core
from rivulet.client.connection import BrokerConnection
from rivulet.common.types import TopicPartition
from rivulet.protocol import records as rec
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages import delete_records_request as drq
from rivulet.protocol.messages import init_producer_id_request as ipq
from rivulet.protocol.messages import produce_request as prq
from rivulet.replication.replica_manager import FetchParams, FetchRequestPartition
from rivulet.server.broker import Broker
from rivulet.server.config import BrokerConfig

pytestmark = pytest.mark.fast

TID = uuid.uuid4()
TP = TopicPartition("t", 0)


class Cluster:
    def __init__(self, root) -> None:
        self.root = root
        self.brokers: dict[int, Broker] = {}
        self.conns: dict[int, BrokerConnection] = {}
        self.controller_epoch = 1

    async def start(self, *ids: int, **overrides: str) -> None:
        for i in ids:
            b = Broker(BrokerConfig({
                "log.dirs": str(self.root / f"b{i}"), "listeners": "PLAINTEXT://127.0.0.1:0", "node.id": str(i),
                "offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1",
                "log.cleaner.enable": "false", "replica.fetch.wait.max.ms": "50",
                "replica.fetch.backoff.ms": "50", **overrides}), cluster_mode=True)
            await b.start()
            self.brokers[i] = b
            self.conns[i] = await BrokerConnection("127.0.0.1", b.bound_ports[0]).connect()

    @property
    def addresses(self) -> dict[int, tuple[str, int]]:
        return {i: ("127.0.0.1", b.bound_ports[0]) for i, b in self.brokers.items()}

    async def lead(self, leader: int, epoch: int, isr: list[int], replicas: list[int] = (1, 2),
                   topic: str = "t") -> None:
        parts = [Part(topic, 0, leader, epoch, list(isr), list(replicas), partition_epoch=epoch)]
        ids = {topic: TID if topic == "t" else uuid.uuid5(TID, topic)}
        for i, conn in self.conns.items():
            um = await conn.send(update_metadata(self.controller_epoch, parts, ids, self.addresses,
                                                 racks={1: "a", 2: "b"}))
            assert um.error_code == 0
            if i not in replicas:
                continue  # as the controller: LeaderAndIsr goes to the replicas only
            r = await conn.send(leader_and_isr(self.controller_epoch, parts, ids, self.addresses))
            assert r.error_code == 0 and r.topics[0].partition_errors[0].error_code == 0

    async def produce(self, broker: int, values: list[bytes], acks: int = -1) -> int:
        batch = rec.encode_batch([rec.Record(0, 0, None, v, []) for v in values])
        resp = await self.conns[broker].send(core.produce_request(None, acks, 10_000, {("t", 0): batch}))
        p = resp.responses[0].partition_responses[0]
        assert p.error_code == ErrorCode.NONE, ErrorCode(p.error_code).name
        return p.base_offset

    def log(self, broker: int):
        return self.brokers[broker].replica_manager.partitions[TP].log

    def contents(self, broker: int) -> bytes:
        lg = self.log(broker)
        return bytes(lg.read(lg.log_start_offset, 1 << 30, max_offset=lg.log_end_offset).records or b"")

    async def close(self) -> None:
        for conn in self.conns.values():
            await conn.close()
        for b in self.brokers.values():
            await b.shutdown()


async def until(cond, what: str, limit: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"never happened: {what}")
        await asyncio.sleep(0.02)


def test_followers_replicate_and_a_new_leader_truncates_the_old_ones_tail(tmp_path):
    async def main():
        c = Cluster(tmp_path)
        await c.start(1, 2)
        try:
            await c.lead(1, 0, [1, 2])
            # acks=all is answered once broker 2 has fetched the records (the HW moved past them).
            assert await c.produce(1, [b"a", b"b"]) == 0
            assert await c.produce(1, [b"c"]) == 2
            assert c.log(1).high_watermark == 3
            await until(lambda: c.log(2).high_watermark == 3, "the follower learns the HW")
            assert c.contents(2) == c.contents(1)
            assert c.log(2).epoch_entries() == [(0, 0)]

            # Broker 2 stops following; broker 1 takes writes alone that never reach it.
            assert (await c.conns[2].send(stop_replica(c.controller_epoch, {("t", 0): (0, False)}))).error_code == 0
            await c.lead(1, 1, [1])
            await c.produce(1, [b"lost-1", b"lost-2"], acks=1)
            assert c.log(1).log_end_offset == 5
            # Leadership moves to broker 2 (unclean, as after losing broker 1): 1 must cut offsets 3-4.
            await c.lead(2, 2, [2])
            await c.produce(2, [b"d"], acks=1)
            await until(lambda: c.log(1).log_end_offset == c.log(2).log_end_offset == 4
                        and c.log(1).high_watermark == 4, "the old leader truncates and catches up")
            assert c.contents(1) == c.contents(2)
            data = c.contents(1)
            values = [r.value for pos, _h in rec.iter_batches(data) for r in rec.decode_batch(data, pos).records]
            assert values == [b"a", b"b", b"c", b"d"]
            assert c.log(1).epoch_entries() == c.log(2).epoch_entries() == [(0, 0), (2, 3)]
        finally:
            await c.close()
    asyncio.run(main())


def test_an_old_leader_that_wrote_nothing_in_its_epoch_follows_again(tmp_path):
    # Broker 1 leads epoch 1 and writes nothing in it (as one paused right after its election);
    # its epoch cache still starts epoch 1 at its log end. The new leader has no epoch 1, so it
    # answers with a diverging epoch that ends exactly at that log end: the follower must drop
    # its empty epoch, not fetch the same divergence forever.
    async def main():
        c = Cluster(tmp_path)
        await c.start(1, 2)
        try:
            await c.lead(1, 0, [1, 2])
            assert await c.produce(1, [b"a", b"b", b"c"]) == 0
            await c.lead(1, 1, [1, 2])
            assert c.log(1).epoch_entries() == [(0, 0), (1, 3)]
            await c.lead(2, 2, [1, 2])
            assert await c.produce(2, [b"d"], acks=1) == 3
            await until(lambda: c.log(1).log_end_offset == 4, "the old leader fetches from the new one")
            assert c.contents(1) == c.contents(2)
            assert c.log(1).epoch_entries() == c.log(2).epoch_entries() == [(0, 0), (2, 3)]
        finally:
            await c.close()
    asyncio.run(main())


def test_leader_and_isr_makes_new_replicas_logs_off_the_loop(tmp_path):
    # Hundreds of new replicas (a new __consumer_offsets) take seconds of file work: it runs on
    # a worker thread, and the broker answers everyone else meanwhile.
    async def main():
        c = Cluster(tmp_path)
        await c.start(1, 2)
        reached, go = threading.Event(), threading.Event()
        try:
            b = c.brokers[2]
            real = b.log_manager._create_log  # each new log of the batch

            def create_log(topic, partition, *args, **kw):
                if topic == "many" and partition == 2:
                    assert threading.current_thread() is not threading.main_thread()
                    reached.set()
                    go.wait(10)
                return real(topic, partition, *args, **kw)

            b.log_manager._create_log = create_log
            # The broker holds Metadata until it has heard from the controller once.
            assert (await c.conns[2].send(update_metadata(c.controller_epoch, [], {}, c.addresses))).error_code == 0
            parts = [Part("many", i, 1, 0, [1, 2], [1, 2], partition_epoch=0) for i in range(4)]
            sending = asyncio.ensure_future(c.conns[2].send(
                leader_and_isr(c.controller_epoch, parts, {"many": uuid.uuid5(TID, "many")}, c.addresses)))
            await until(reached.is_set, "the worker thread reaches partition 2")
            other = await BrokerConnection("127.0.0.1", b.bound_ports[0]).connect()  # ApiVersions answered
            md = await other.send(core.metadata_request(["t"]))
            assert md.cluster_id and not sending.done()
            await other.close()
            go.set()
            resp = await sending
            assert resp.error_code == 0
            assert [e.error_code for t in resp.topics for e in t.partition_errors] == [0, 0, 0, 0]
            assert all(TopicPartition("many", i) in b.replica_manager.partitions for i in range(4))
            assert b.replica_manager.partitions[TopicPartition("many", 3)].leader_id == 1
        finally:
            go.set()
            await c.close()
    asyncio.run(main())


def test_coordinators_move_with_the_internal_partitions_leadership(tmp_path):
    async def main():
        c = Cluster(tmp_path)
        await c.start(1, 2)
        try:
            async def coordinator(broker: int) -> tuple[int, int]:
                r = await c.conns[broker].send(core.find_coordinator_request("g", 0), 3)
                return r.error_code, r.node_id

            # No leader known yet for __consumer_offsets-0.
            assert (await coordinator(1))[0] == ErrorCode.COORDINATOR_NOT_AVAILABLE
            await c.lead(1, 0, [1, 2], topic="__consumer_offsets")
            assert await coordinator(1) == (0, 1) and await coordinator(2) == (0, 1)
            g1 = c.brokers[1].group_coordinator
            await g1.wait_loaded()
            assert g1.manager.is_group_local("g") and not c.brokers[2].group_coordinator.manager.is_group_local("g")
            await c.lead(2, 1, [1, 2], topic="__consumer_offsets")
            assert await coordinator(1) == (0, 2)
            await c.brokers[2].group_coordinator.wait_loaded()
            assert not g1.manager.is_group_local("g")
            assert c.brokers[2].group_coordinator.manager.is_group_local("g")

            # The transaction coordinator likewise, with the leader epoch as its coordinator epoch.
            await c.lead(2, 3, [1, 2], topic="__transaction_state")
            r = await c.conns[1].send(core.find_coordinator_request("tx", 1), 3)
            assert (r.error_code, r.node_id) == (0, 2)
            sm2 = c.brokers[2].transaction_coordinator.state_manager
            await until(lambda: 0 in sm2.cache, "the transaction state partition loads")
            assert sm2.cache[0].coordinator_epoch == 3
            await c.lead(1, 4, [1, 2], topic="__transaction_state")
            assert 0 not in sm2.cache
            assert sm2.get_transaction_state("tx")[0] == ErrorCode.NOT_COORDINATOR
        finally:
            await c.close()
    asyncio.run(main())


def test_a_consumer_in_a_followers_rack_is_sent_to_that_follower(tmp_path):
    async def main():
        c = Cluster(tmp_path)
        await c.start(1, 2, **{"replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector"})
        try:
            await c.lead(1, 0, [1, 2])
            await c.produce(1, [b"a", b"b"])
            await until(lambda: c.log(2).high_watermark == 2, "the follower learns the HW")

            async def fetch(broker: int, rack: str, version: int = 11):
                req = core.fetch_request({("t", 0): core.FetchPosition(0, -1, -1)}, 0, 1, 1 << 20, 1 << 20)
                req.rack_id = rack
                resp = await c.conns[broker].send(req, version)
                return resp.responses[0].partitions[0]

            near = await fetch(1, "b")
            assert near.error_code == 0 and near.preferred_read_replica == 2 and not near.records
            same = await fetch(1, "a")
            assert same.preferred_read_replica == -1 and same.records
            # The follower serves the consumer up to its HW.
            there = await fetch(2, "b")
            assert there.error_code == 0 and there.high_watermark == 2 and bytes(there.records) == c.contents(1)
            # A consumer without client metadata (before v11) is refused by a follower.
            assert (await fetch(2, "", version=10)).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
            # Caught up, a consumer that would wait is sent to the follower at once, as Kafka does.
            tp = TopicPartition("t", 0)
            answer = c.brokers[1].replica_manager.fetch_messages(FetchParams(
                replica_id=-1, max_wait_ms=60_000, min_bytes=1, max_bytes=1 << 20, client_rack="b",
                fetch_only_leader=False, partitions=[FetchRequestPartition(tp, 2, 1 << 20)]))
            assert isinstance(answer, dict) and answer[tp].preferred_read_replica == 2
        finally:
            await c.close()
    asyncio.run(main())


def test_a_follower_behind_the_leaders_log_start_starts_over_there(tmp_path):
    async def main():
        c = Cluster(tmp_path)
        await c.start(1, 2)
        try:
            await c.lead(1, 0, [1, 2])
            await c.produce(1, [b"a", b"b", b"c"])
            # Broker 2 stops following and loses its log; broker 1 deletes records below offset 2.
            await c.conns[2].send(stop_replica(c.controller_epoch, {("t", 0): (0, True)}))
            await c.lead(1, 1, [1], replicas=[1])
            await c.produce(1, [b"d"])
            req = drq.DeleteRecordsRequest(timeout_ms=5000, topics=[drq.DeleteRecordsTopic(
                name="t", partitions=[drq.DeleteRecordsPartition(partition_index=0, offset=2)])])
            resp = await c.conns[1].send(req, 2)
            assert resp.topics[0].partitions[0].low_watermark == 2
            # Back as a replica with an empty log: offset 0 is out of range on the leader.
            await c.lead(1, 2, [1], replicas=[1, 2])
            await until(lambda: TP in c.brokers[2].replica_manager.partitions
                        and c.log(2).log_end_offset == 4, "the follower catches up from the leader's log start")
            assert c.log(2).log_start_offset == 2 and c.contents(2) == c.contents(1)
            # DeleteRecords is the leader's: a follower refuses it.
            resp = await c.conns[2].send(req, 2)
            assert resp.topics[0].partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        finally:
            await c.close()
    asyncio.run(main())


def test_a_transaction_commits_on_a_partition_another_broker_leads(tmp_path):
    from rivulet import Producer

    async def main():
        c = Cluster(tmp_path)
        await c.start(1, 2)
        try:
            await c.lead(1, 0, [1, 2], topic="__transaction_state")
            await c.lead(1, 0, [1, 2], topic="__consumer_offsets")
            await c.lead(2, 0, [2, 1])  # "t" is led by broker 2; the coordinator is broker 1
            sm = c.brokers[1].transaction_coordinator.state_manager
            await until(lambda: 0 in sm.cache, "the transaction coordinator loads")

            def transact() -> None:
                p = Producer({"bootstrap.servers": f"127.0.0.1:{c.brokers[1].bound_ports[0]}",
                              "transactional.id": "tx-1"})
                try:
                    p.init_transactions(30)
                    p.begin_transaction()
                    p.produce("t", b"committed", partition=0)
                    p.commit_transaction(30)
                    p.begin_transaction()
                    p.produce("t", b"aborted", partition=0)
                    p.flush(30)
                    p.abort_transaction(30)
                finally:
                    p.close(10)

            await asyncio.to_thread(transact)
            lg = c.log(2)
            # KIP-890 across brokers: broker 2 asks the coordinator (broker 1) before a transactional
            # batch opens a transaction; one the producer never added to its transaction is refused.
            init = await c.conns[1].send(ipq.InitProducerIdRequest(
                transactional_id="tx-2", transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1), 4)
            assert init.error_code == 0
            stray = rec.encode_batch([rec.Record(0, 0, None, b"stray", [])], producer_id=init.producer_id,
                                     producer_epoch=init.producer_epoch, base_sequence=0, transactional=True)
            # As Kafka 4.3.1: INVALID_TXN_STATE up to v10, TRANSACTION_ABORTABLE from v11.
            for version, refused in ((10, ErrorCode.INVALID_TXN_STATE), (11, ErrorCode.TRANSACTION_ABORTABLE)):
                resp = await c.conns[2].send(prq.ProduceRequest(
                    transactional_id="tx-2", acks=-1, timeout_ms=5000, topic_data=[prq.TopicProduceData(
                        name="t", partition_data=[prq.PartitionProduceData(index=0, records=stray)])]), version)
                assert resp.responses[0].partition_responses[0].error_code == refused, version
            # Both markers reached broker 2: nothing is left open and the LSO is the HW.
            await until(lambda: lg.first_unstable_offset is None and c.brokers[2].replica_manager.partitions[TP]
                        .last_stable_offset == lg.log_end_offset == 4, "markers written on the leader")
            data = c.contents(2)
            controls = [h.is_control for _, h in rec.iter_batches(data)]
            assert controls == [False, True, False, True]
        finally:
            await c.close()
    asyncio.run(main())
