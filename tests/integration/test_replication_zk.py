"""Both halves of cluster mode together, in one process: a real ZooKeeper, the controller with
its channel to the brokers, and three brokers in cluster mode on real sockets. A topic with
three replicas gets leaders and followers, acks=all waits for the ISR, and after the leader's
loss the controller's new leader serves every acknowledged record, its follower in step."""

from __future__ import annotations

import asyncio

import pytest

from rivulet.client import core
from rivulet.client.connection import BrokerConnection
from rivulet.common.types import TopicPartition
from rivulet.controller import zk_data as z
from rivulet.controller.channel import ControllerChannelManager
from rivulet.controller.controller import ControllerConfig, KafkaController
from rivulet.controller.zk_client import KafkaZkClient, ZkBridge
from rivulet.protocol import records as rec
from rivulet.protocol.errors import ErrorCode
from rivulet.replication.replica_manager import LeaderEndpoint
from rivulet.server.broker import Broker
from rivulet.server.config import BrokerConfig
from rivulet.server.metrics.collectors import BrokerCollector

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

TP = TopicPartition("orders", 0)


async def eventually(check, what: str, timeout: float = 30.0) -> None:
    try:
        async with asyncio.timeout(timeout):
            while not check():
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"never happened: {what}") from None


def metric(broker: Broker, family: str) -> float:
    """A broker-state metric as the endpoint's collector reads it, summed over its series."""
    collector = BrokerCollector(broker.replica_manager, broker.socket_server, [], broker.cluster,
                                broker.fetch_sessions)
    return sum(s.value for f in collector.collect() if f.name == family for s in f.samples)


class ZkCluster:
    def __init__(self, connect: str, root) -> None:
        self.connect = connect
        self.root = root
        self.brokers: dict[int, Broker] = {}
        self.sessions: dict[int, KafkaZkClient] = {}
        self.admin = self._client()
        self.admin.create_top_level_paths()
        self.controller: KafkaController | None = None

    def _client(self) -> KafkaZkClient:
        c = KafkaZkClient(self.connect, session_timeout_ms=6000)
        c.start()
        return c

    async def start_broker(self, i: int, **overrides: str) -> Broker:
        b = Broker(BrokerConfig({
            "log.dirs": str(self.root / f"b{i}"), "listeners": "PLAINTEXT://127.0.0.1:0", "node.id": str(i),
            "offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1",
            "log.cleaner.enable": "false", "replica.fetch.wait.max.ms": "50", "replica.fetch.backoff.ms": "50", **overrides}),
            cluster_mode=True)
        await b.start()
        session = self.sessions[i] = self._client()
        b.broker_epoch = session.register_broker(z.BrokerRegistration(
            i, (z.EndPoint("PLAINTEXT", "127.0.0.1", b.bound_ports[0]),), rack=f"r{i}"))
        self.brokers[i] = b
        return b

    async def kill_broker(self, i: int) -> None:
        """The broker's ZooKeeper session ends (as a kill -9 ends it) and it stops serving."""
        self.sessions.pop(i).close()
        await self.brokers.pop(i).shutdown()

    def start_controller(self, i: int) -> None:
        controller = self.controller = KafkaController(ControllerConfig(i), ZkBridge(self._client()),
                                                       lambda: ControllerChannelManager(i, backoff_ms=50),
                                                       lambda: False)
        controller.startup()
        # The controller's broker answers AlterPartition (the route the broker's own wiring adds).
        apis = self.brokers[i].apis
        apis.versions[56] = (0, 3)
        apis.handlers[56] = lambda header, req, conn: asyncio.ensure_future(
            controller.alter_partition(req, header.api_version))

    def partition(self, i: int):
        return self.brokers[i].replica_manager.partitions.get(TP)

    async def close(self) -> None:
        if self.controller is not None:
            await self.controller.shutdown()
            await self.controller.zk.close()
        for i in list(self.brokers):
            self.sessions.pop(i).close()
            await self.brokers.pop(i).shutdown()
        self.admin.close()


async def produce(b: Broker, values: list[bytes], acks: int = -1) -> tuple[int, int]:
    conn = await BrokerConnection("127.0.0.1", b.bound_ports[0]).connect()
    try:
        batch = rec.encode_batch([rec.Record(0, 0, None, v, []) for v in values])
        resp = await conn.send(core.produce_request(None, acks, 15_000, {("orders", 0): batch}))
        p = resp.responses[0].partition_responses[0]
        return p.error_code, p.base_offset
    finally:
        await conn.close()


def values_of(b: Broker) -> list[bytes]:
    lg = b.replica_manager.partitions[TP].log
    data = bytes(lg.read(lg.log_start_offset, 1 << 30, max_offset=lg.high_watermark).records or b"")
    return [r.value for pos, _h in rec.iter_batches(data) for r in rec.decode_batch(data, pos).records]


def test_leader_loss_keeps_every_acknowledged_record(zk_connect, tmp_path):
    async def main():
        c = ZkCluster(zk_connect, tmp_path)
        try:
            for i in (1, 2, 3):
                await c.start_broker(i)
            c.start_controller(3)
            c.admin.create_topic(z.TopicAssignment("orders", None, {0: [1, 2, 3]}), {})
            await eventually(lambda: all(c.partition(i) is not None for i in (1, 2, 3)), "replicas created")
            assert c.partition(1).is_leader and c.partition(1).isr == [1, 2, 3]
            md = c.brokers[2].metadata_cache
            await eventually(lambda: md.partition(TP) is not None, "UpdateMetadata")
            assert md.partition(TP).leader == 1 and md.controller_id == 3 and md.alive_broker(1).rack == "r1"

            acked = []
            for n in range(5):
                values = [f"v{n}-{k}".encode() for k in range(3)]
                err, base = await produce(c.brokers[1], values)
                assert err == ErrorCode.NONE and base == 3 * n
                acked += values
            await eventually(lambda: all(c.partition(i).high_watermark == 15 for i in (2, 3)), "followers' HW")

            await c.kill_broker(1)
            await eventually(lambda: c.partition(2).is_leader or c.partition(3).is_leader, "a new leader")
            leader = 2 if c.partition(2).is_leader else 3
            follower = 5 - leader
            assert c.partition(leader).isr == sorted([2, 3]) and c.partition(leader).leader_epoch == 1
            await eventually(lambda: c.brokers[follower].replica_manager.partitions[TP].leader_id == leader,
                             "the follower follows the new leader")
            err, base = await produce(c.brokers[leader], [b"after"])
            assert (err, base) == (ErrorCode.NONE, 15)
            acked.append(b"after")
            assert values_of(c.brokers[leader]) == acked
            await eventually(lambda: c.partition(follower).high_watermark == 16, "the follower catches up")
            assert values_of(c.brokers[follower]) == acked
            assert c.partition(follower).log.epoch_entries() == c.partition(leader).log.epoch_entries()
        finally:
            await c.close()
    asyncio.run(main())


def test_a_paused_follower_leaves_the_isr_and_rejoins_once_caught_up(zk_connect, tmp_path):
    async def main():
        c = ZkCluster(zk_connect, tmp_path)
        try:
            for i in (1, 2, 3):
                await c.start_broker(i, **{"replica.lag.time.max.ms": "600"})
            c.start_controller(3)
            c.admin.create_topic(z.TopicAssignment("orders", None, {0: [1, 2, 3]}), {})
            await eventually(lambda: all(c.partition(i) is not None for i in (1, 2, 3)), "replicas created")
            await eventually(lambda: c.brokers[1].metadata_cache.controller_id == 3, "UpdateMetadata")
            leader = c.partition(1)
            assert (await produce(c.brokers[1], [b"a"]))[0] == ErrorCode.NONE

            # Broker 2's fetcher pauses (as a SIGSTOPped follower) and falls behind a write: the
            # leader drops it from the ISR through the controller, and acks=all stops waiting for it.
            fetchers = c.brokers[2].replica_fetchers
            fetchers.remove_partitions([TP])
            assert (await produce(c.brokers[1], [b"b"], acks=1))[0] == ErrorCode.NONE
            await eventually(lambda: leader.isr == [1, 3], "the ISR shrinks")
            assert c.admin.get_partition_state(TP).isr == (1, 3)
            # What the leader's metrics endpoint would show.
            assert metric(c.brokers[1], "kafka_server_replicamanager_underreplicatedpartitions") == 1
            assert metric(c.brokers[1], "kafka_server_replicamanager_isrshrinks") == 1
            assert (await produce(c.brokers[1], [b"c"]))[0] == ErrorCode.NONE
            await eventually(lambda: c.brokers[1].metadata_cache.partition(TP).isr == [1, 3], "metadata follows")

            # It resumes, catches up, and is taken back.
            endpoint = LeaderEndpoint(1, "127.0.0.1", c.brokers[1].bound_ports[0])
            fetchers.add_partitions(endpoint, [c.partition(2)])
            await eventually(lambda: leader.isr == [1, 2, 3], "the ISR expands")
            assert c.admin.get_partition_state(TP).isr == (1, 2, 3)
            assert metric(c.brokers[1], "kafka_server_replicamanager_underreplicatedpartitions") == 0
            assert metric(c.brokers[1], "kafka_server_replicamanager_isrexpands") == 1
            assert metric(c.brokers[1], "kafka_server_brokertopicmetrics_replicationbytesout") > 0
            assert metric(c.brokers[2], "kafka_server_brokertopicmetrics_replicationbytesin") > 0
            await eventually(lambda: c.partition(2).high_watermark == 3, "the follower's HW")
            assert values_of(c.brokers[2]) == values_of(c.brokers[1]) == [b"a", b"b", b"c"]
        finally:
            await c.close()
    asyncio.run(main())
