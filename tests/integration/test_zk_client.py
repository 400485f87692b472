"""The control plane's ZooKeeper client against a real ZooKeeper: Kafka's znodes and formats,
the controller election with epoch fencing, conditional partition-state writes, the bridge to
the asyncio loop."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from kazoo.client import KazooClient

from rivulet.common.types import TopicPartition
from rivulet.controller import zk_data as z
from rivulet.controller.zk_client import (
    BrokerIdInUseError,
    ControllerMovedError,
    KafkaZkClient,
    ZkBridge,
)

pytestmark = [pytest.mark.integration, pytest.mark.cluster]


@pytest.fixture
def zkc(zk_connect):
    clients: list[KafkaZkClient] = []

    def make() -> KafkaZkClient:
        c = KafkaZkClient(zk_connect, session_timeout_ms=6000)
        c.start()
        clients.append(c)
        return c

    yield make
    for c in clients:
        c.close()


def raw(zk_connect: str) -> KazooClient:
    k = KazooClient(hosts=zk_connect)
    k.start(timeout=15)
    return k


def test_top_level_paths_and_cluster_id(zkc, zk_connect):
    a, b = zkc(), zkc()
    a.create_top_level_paths()
    b.create_top_level_paths()  # idempotent, as every broker runs it
    assert a.get_or_create_cluster_id("first") == "first"
    assert b.get_or_create_cluster_id("second") == "first"
    k = raw(zk_connect)
    try:
        for path in z.PERSISTENT_PATHS:
            assert k.exists(path), path
        assert json.loads(k.get("/cluster/id")[0]) == {"version": "1", "id": "first"}
    finally:
        k.stop()


def test_broker_registration_is_ephemeral_and_in_kafkas_format(zkc, zk_connect):
    a = zkc()
    a.create_top_level_paths()
    info = z.BrokerRegistration(1, (z.EndPoint("PLAINTEXT", "127.0.0.1", 9092),), rack="r1", timestamp_ms=5)
    epoch = a.register_broker(info)
    assert epoch > 0
    assert a.register_broker(info) == epoch  # the same session may write it again
    k = raw(zk_connect)
    try:
        doc = json.loads(k.get("/brokers/ids/1")[0])
        assert doc["version"] == 5 and doc["endpoints"] == ["PLAINTEXT://127.0.0.1:9092"]
        assert doc["rack"] == "r1" and doc["host"] == "127.0.0.1" and doc["port"] == 9092
        b = zkc()
        with pytest.raises(BrokerIdInUseError):
            b.register_broker(info)
        assert b.get_all_brokers() == {1: z.BrokerRegistration.decode(1, k.get("/brokers/ids/1")[0], epoch)}
        a.close()  # the session ends: its registration goes with it
        assert b.get_broker_ids() == []
        assert b.register_broker(info) > epoch
    finally:
        k.stop()


def test_broker_sequence_ids_increase(zkc):
    a = zkc()
    a.create_top_level_paths()
    first = a.generate_broker_sequence_id()
    assert zkc().generate_broker_sequence_id() == first + 1


def test_controller_election_and_fencing(zkc):
    a, b = zkc(), zkc()
    a.create_top_level_paths()
    ea = a.try_elect_controller(1, 100)
    assert ea is not None and ea.epoch == 1
    assert b.try_elect_controller(2, 100) is None
    assert b.get_controller_id() == 1
    assert a.try_elect_controller(1, 100) == ea  # a retried election by the winner
    a.close()
    eb = b.try_elect_controller(2, 200)
    assert eb is not None and eb.epoch == 2 and b.get_controller_id() == 2
    # the old controller's epoch no longer passes the fence
    tp = TopicPartition("t", 0)
    b.create_topic(z.TopicAssignment("t", None, {0: [2]}), {})
    with pytest.raises(ControllerMovedError):
        b.create_partition_state(tp, z.LeaderAndIsr(2, 0, (2,), 1), ea)
    assert b.create_partition_state(tp, z.LeaderAndIsr(2, 0, (2,), 2), eb) is not None


def test_controller_watch_fires_on_loss(zkc):
    a, b = zkc(), zkc()
    a.create_top_level_paths()
    assert a.try_elect_controller(1, 1) is not None
    fired = threading.Event()
    assert b.get_controller_id(watch=lambda e: fired.set()) == 1
    a.close()
    assert fired.wait(15)
    assert b.get_controller_id() is None


def test_topics_and_conditional_partition_state(zkc, zk_connect):
    a = zkc()
    a.create_top_level_paths()
    epoch = a.try_elect_controller(1, 1)
    assignment = z.TopicAssignment("orders", None, {0: [1, 2], 1: [2, 1]})
    a.create_topic(assignment, {"retention.ms": "1000"})
    with pytest.raises(Exception):
        a.create_topic(assignment, {})
    assert a.get_all_topics() == ["orders"]
    assert a.get_topic_assignment("orders").replicas == {0: [1, 2], 1: [2, 1]}
    assert a.get_entity_config("topics", "orders") == {"retention.ms": "1000"}
    tp = TopicPartition("orders", 0)
    first = a.create_partition_state(tp, z.LeaderAndIsr(1, 0, (1, 2), epoch.epoch), epoch)
    assert first.partition_epoch == 0
    assert a.create_partition_state(tp, first, epoch) is None  # it exists
    shrunk = a.update_partition_state(tp, first.new_isr((1,), epoch.epoch), epoch)
    assert shrunk.isr == (1,) and shrunk.partition_epoch == 1
    assert a.update_partition_state(tp, first.new_isr((2,), epoch.epoch), epoch) is None  # stale version
    assert a.get_partition_states([tp, TopicPartition("orders", 1)]) == {tp: shrunk}
    k = raw(zk_connect)
    try:
        doc = json.loads(k.get("/brokers/topics/orders/partitions/0/state")[0])
        assert doc == {"controller_epoch": 1, "leader": 1, "version": 1, "leader_epoch": 0, "isr": [1]}
        a.request_topic_deletion("orders")
        assert a.get_topic_deletions() == ["orders"] and a.is_topic_marked_for_deletion("orders")
        a.delete_topic_znodes("orders", epoch)
        assert a.get_all_topics() == [] and a.get_topic_deletions() == []
        assert not k.exists("/config/topics/orders")
    finally:
        k.stop()


def test_config_change_notifications(zkc):
    a = zkc()
    a.create_top_level_paths()
    a.set_entity_config("topics", "t", {"cleanup.policy": "compact"})
    a.set_entity_config("brokers", "<default>", {"log.retention.ms": "5"}, ["log.retention.ms"])
    changes = a.get_config_changes()
    assert [c for _, c in changes] == [z.ConfigChange("topics/t"),
                                       z.ConfigChange("brokers/<default>", frozenset({"log.retention.ms"}))]
    assert all(name.startswith("config_change_") for name, _ in changes)
    a.delete_config_changes([changes[0][0]])
    assert [c.entity_path for _, c in a.get_config_changes()] == ["brokers/<default>"]
    # Created once: a second writer gets what the first wrote, and no notification.
    assert a.find_entity_config("brokers", "1") is None
    assert a.create_entity_config("brokers", "1", {"a": "1"}) == {"a": "1"}
    assert a.create_entity_config("brokers", "1", {"a": "2"}) == {"a": "1"}
    assert a.find_entity_config("brokers", "1") == {"a": "1"}
    assert [c.entity_path for _, c in a.get_config_changes()] == ["brokers/<default>", "brokers/1"]


def test_bridge_runs_calls_off_the_loop_and_delivers_watches_on_it(zkc):
    a = zkc()
    a.create_top_level_paths()

    async def main() -> None:
        bridge = ZkBridge(a)
        loop_thread = threading.get_ident()
        seen: list[int] = []
        assert await bridge.run(threading.get_ident) != loop_thread
        changed = asyncio.Event()

        def on_change() -> None:
            seen.append(threading.get_ident())
            changed.set()

        assert await bridge.run(a.get_broker_ids, bridge.on_loop(on_change)) == []
        await bridge.run(a.register_broker, z.BrokerRegistration(3, (z.EndPoint("PLAINTEXT", "h", 1),)))
        await asyncio.wait_for(changed.wait(), 15)
        assert seen == [loop_thread]
        await bridge.close()

    asyncio.run(main())


def test_a_new_topics_partition_states_in_one_pipelined_batch(zkc):
    a = zkc()
    a.create_top_level_paths()
    epoch = a.try_elect_controller(1, 1)
    a.create_topic(z.TopicAssignment("wide", None, {p: [1] for p in range(50)}), {})
    tps = [TopicPartition("wide", p) for p in range(50)]
    earlier = a.create_partition_state(tps[7], z.LeaderAndIsr(1, 0, (1,), epoch.epoch), epoch)
    states = [(tp, z.LeaderAndIsr(1, 0, (1,), epoch.epoch)) for tp in tps]
    written = a.create_partition_states(states, epoch)
    assert written[7] is None  # it had one already
    assert all(w == z.LeaderAndIsr(1, 0, (1,), epoch.epoch, 0) for i, w in enumerate(written) if i != 7)
    assert a.get_partition_states(tps) == {tp: earlier if tp.partition == 7 else written[tp.partition] for tp in tps}
    stale = epoch
    b = zkc()
    a.close()
    assert b.try_elect_controller(2, 2) is not None
    b.create_topic(z.TopicAssignment("late", None, {0: [2]}), {})
    with pytest.raises(ControllerMovedError):  # a controller that lost its epoch writes nothing
        b.create_partition_states([(TopicPartition("late", 0), z.LeaderAndIsr(2, 0, (2,), 1))], stale)
    assert b.get_partition_states([TopicPartition("late", 0)]) == {}
