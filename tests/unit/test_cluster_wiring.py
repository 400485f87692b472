"""A broker in cluster mode, in process, driven over its socket by a test that plays the
controller: LeaderAndIsr, UpdateMetadata and StopReplica go through the real wire, and
Metadata, Produce and Fetch answer from what they set up."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from controller_requests import Part, leader_and_isr, stop_replica, update_metadata

from rivulet.client import core
from rivulet.client.connection import BrokerConnection
from rivulet.protocol import records as rec
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages.metadata_request import MetadataRequest
from rivulet.server.broker import Broker
from rivulet.server.config import BrokerConfig

pytestmark = pytest.mark.fast

TID = uuid.uuid4()


async def cluster_broker(path, node_id: int = 1) -> Broker:
    b = Broker(BrokerConfig({"log.dirs": str(path), "listeners": "PLAINTEXT://127.0.0.1:0", "node.id": str(node_id),
                             "offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1",
                             "log.cleaner.enable": "false"}), cluster_mode=True)
    await b.start()
    return b


def test_controller_requests_over_the_wire_set_leadership_and_metadata(tmp_path):
    async def main():
        b = await cluster_broker(tmp_path)
        conn = await BrokerConnection("127.0.0.1", b.bound_ports[0]).connect()
        try:
            assert all(conn.has_api(k) for k in (4, 5, 6))
            brokers = {1: ("127.0.0.1", b.bound_ports[0]), 2: ("127.0.0.1", 1)}
            parts = [Part("t", 0, 1, 3, [1, 2], [1, 2]), Part("t", 1, 2, 4, [2, 1], [2, 1])]
            um = await conn.send(update_metadata(5, parts, {"t": TID}, brokers, controller_id=2,
                                                 racks={1: "a", 2: "b"}))
            assert um.error_code == ErrorCode.NONE
            lai = await conn.send(leader_and_isr(5, parts, {"t": TID}, brokers))
            assert lai.error_code == ErrorCode.NONE
            assert [(e.partition_index, e.error_code) for t in lai.topics for e in t.partition_errors] == \
                [(0, 0), (1, 0)]
            assert b.replica_manager.partitions[core_tp("t", 0)].is_leader
            assert b.replica_manager.partitions[core_tp("t", 1)].leader_id == 2

            md = await conn.send(MetadataRequest(topics=None, allow_auto_topic_creation=False))
            assert md.controller_id == 2
            assert [(x.node_id, x.rack) for x in md.brokers] == [(1, "a"), (2, "b")]
            (t,) = md.topics
            assert t.topic_id == TID
            assert [(p.partition_index, p.leader_id, p.leader_epoch, p.isr_nodes) for p in t.partitions] == \
                [(0, 1, 3, [1, 2]), (1, 2, 4, [2, 1])]

            batch = rec.encode_batch([rec.Record(0, 0, None, b"v", [])])
            pr = await conn.send(core.produce_request(None, 1, 5000, {("t", 0): batch, ("t", 1): batch}))
            errors = {p.index: p.error_code for p in pr.responses[0].partition_responses}
            assert errors == {0: ErrorCode.NONE, 1: ErrorCode.NOT_LEADER_OR_FOLLOWER}
            # KIP-951: the answer names the current leader and where it listens.
            moved = pr.responses[0].partition_responses[1]
            assert (moved.current_leader.leader_id, moved.current_leader.leader_epoch) == (2, 4)
            assert [(n.node_id, n.port, n.rack) for n in pr.node_endpoints] == [(2, 1, "b")]
            # A consumer with an old leader epoch is fenced, and told the current leader too.
            fetch = core.fetch_request({("t", 1): core.FetchPosition(0, 3, -1)}, 0, 1, 1 << 20, 1 << 20)
            fetch.topics[0].topic_id = TID
            fr = await conn.send(fetch, 16)
            part = fr.responses[0].partitions[0]
            assert part.error_code == ErrorCode.FENCED_LEADER_EPOCH
            assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (2, 4)
            assert [(n.node_id, n.host, n.port) for n in fr.node_endpoints] == [(2, "127.0.0.1", 1)]

            # An older controller is fenced; the current one stops and deletes the followed replica.
            stale = await conn.send(leader_and_isr(4, parts, {"t": TID}, brokers))
            assert stale.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
            sr = await conn.send(stop_replica(5, {("t", 1): (4, True)}))
            assert sr.error_code == 0 and [e.error_code for e in sr.partition_errors] == [0]
            assert core_tp("t", 1) not in b.replica_manager.partitions
            assert b.log_manager.get_log("t", 1) is None
        finally:
            await conn.close()
            await b.shutdown()
    asyncio.run(main())


def test_a_stale_broker_epoch_is_refused(tmp_path):
    async def main():
        b = await cluster_broker(tmp_path)
        b.broker_epoch = 100
        conn = await BrokerConnection("127.0.0.1", b.bound_ports[0]).connect()
        try:
            brokers = {1: ("127.0.0.1", b.bound_ports[0])}
            parts = [Part("t", 0, 1, 0, [1], [1])]
            r = await conn.send(leader_and_isr(1, parts, {"t": TID}, brokers, broker_epoch=99))
            assert r.error_code == ErrorCode.STALE_BROKER_EPOCH and not b.replica_manager.partitions.get(
                core_tp("t", 0))
            r = await conn.send(update_metadata(1, parts, {"t": TID}, brokers, broker_epoch=99))
            assert r.error_code == ErrorCode.STALE_BROKER_EPOCH
            r = await conn.send(leader_and_isr(1, parts, {"t": TID}, brokers, broker_epoch=100))
            assert r.error_code == ErrorCode.NONE
        finally:
            await conn.close()
            await b.shutdown()
    asyncio.run(main())


def test_single_node_mode_does_not_serve_the_controllers_requests(tmp_path):
    async def main():
        b = Broker(BrokerConfig({"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0",
                                 "log.cleaner.enable": "false", "offsets.topic.num.partitions": "1",
                                 "transaction.state.log.num.partitions": "1"}))
        await b.start()
        conn = await BrokerConnection("127.0.0.1", b.bound_ports[0]).connect()
        try:
            assert not any(conn.has_api(k) for k in (4, 5, 6))
        finally:
            await conn.close()
            await b.shutdown()
    asyncio.run(main())


def core_tp(topic: str, partition: int):
    from rivulet.common.types import TopicPartition
    return TopicPartition(topic, partition)
