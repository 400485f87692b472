"""How the broker wires its parts: one clock for every component, topic configs read from
Log.config on append, the node endpoint shared after the listener binds, one handler per
supported API."""

from __future__ import annotations

import asyncio

import pytest

from rivulet.common.time import MockClock
from rivulet.common.types import TopicPartition
from rivulet.protocol import records as rec
from rivulet.protocol.errors import ErrorCode
from rivulet.server.apis import SUPPORTED_VERSIONS
from rivulet.server.broker import Broker
from rivulet.server.config import BrokerConfig

pytestmark = pytest.mark.fast

WALL = 1_650_000_000_000


async def started(path) -> Broker:
    b = Broker(BrokerConfig({"log.dirs": str(path), "listeners": "PLAINTEXT://127.0.0.1:0",
                             "offsets.topic.num.partitions": "2", "transaction.state.log.num.partitions": "2",
                             "log.cleaner.enable": "false"}), clock=MockClock(wall_ms=WALL))
    await b.start()
    return b


async def append(b: Broker, tp: TopicPartition, value: bytes):
    data = rec.encode_batch([rec.Record(0, WALL - 5, None, value, [])])
    res = b.replica_manager.append_records({tp: bytearray(data)}, required_acks=1, timeout_ms=1000)
    if isinstance(res, asyncio.Future):
        res = await res
    return res[tp]


def test_one_clock_and_log_configs_reach_appends(tmp_path):
    async def main():
        b = await started(tmp_path)
        try:
            b.topics.create_topic("stamped", 1, 1, {"message.timestamp.type": "LogAppendTime",
                                                    "max.message.bytes": "200"})
            tp = TopicPartition("stamped", 0)
            ok = await append(b, tp, b"small")
            assert ok.error == ErrorCode.NONE and ok.log_append_time == WALL  # the broker's clock
            too_big = await append(b, tp, b"x" * 500)
            assert too_big.error == ErrorCode.MESSAGE_TOO_LARGE  # the topic's max.message.bytes
            b.topics.alter_topic_configs("stamped", {"max.message.bytes": "2000"})
            assert (await append(b, tp, b"x" * 500)).error == ErrorCode.NONE
            assert b.group_coordinator.clock is b.clock and b.transaction_coordinator.clock is b.clock
        finally:
            await b.shutdown()
    asyncio.run(main())


def test_coordinators_answer_with_the_bound_port_and_every_api_has_a_handler(tmp_path):
    async def main():
        b = await started(tmp_path)
        try:
            port = b.bound_ports[0]
            assert port != 0 and b.advertised_listener[2] == port
            for find, key in ((b.group_coordinator.find_group_coordinator, "g"),
                              (b.transaction_coordinator.find_coordinator, "tx")):
                # The first ask has the coordinator's internal topic made, as Kafka's does.
                while (answer := find(key))[0] == ErrorCode.COORDINATOR_NOT_AVAILABLE:
                    await asyncio.sleep(0.01)
                assert answer == (ErrorCode.NONE, b.node_id, "127.0.0.1", port)
            assert b.apis.handlers.keys() == SUPPORTED_VERSIONS.keys()
        finally:
            await b.shutdown()
    asyncio.run(main())


def test_a_start_that_fails_part_way_lets_go_of_what_it_started(tmp_path):
    """A setting only a part checks (here the Iceberg translator's registry certificate) stops
    the start after the logs were opened and the listener bound: both are let go, so a broker
    started next on the same directory and port starts (the directory's lock would refuse it)."""
    from rivulet.server.config import ConfigError

    conf = {"log.dirs": str(tmp_path), "log.cleaner.enable": "false"}

    async def main():
        probe = Broker(BrokerConfig({**conf, "listeners": "PLAINTEXT://127.0.0.1:0"}))
        await probe.start()
        port = probe.bound_listener[2]
        await probe.shutdown()
        conf["listeners"] = f"PLAINTEXT://127.0.0.1:{port}"
        bad = Broker(BrokerConfig({**conf, "iceberg.schema.registry.url": "https://registry.example:8081",
                                   "iceberg.schema.registry.ssl.ca.location": str(tmp_path / "missing-ca.pem")}))
        with pytest.raises(ConfigError, match="iceberg.schema.registry.ssl"):
            await bad.start()
        good = Broker(BrokerConfig(conf))
        await good.start()
        try:
            assert good.bound_listener[2] == port
        finally:
            await good.shutdown()

    asyncio.run(main())


def test_inter_broker_timeouts_follow_kafkas_configs(tmp_path):
    """What Kafka's broker sends with its own network clients (share state here; transaction
    markers and KIP-890's checks in a cluster) times out after request.timeout.ms, the rest
    after replica.socket.timeout.ms; the controller mutation quota has its own window."""
    async def main():
        b = Broker(BrokerConfig({"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0",
                                 "log.cleaner.enable": "false", "request.timeout.ms": "12345",
                                 "replica.socket.timeout.ms": "23456", "controller.quota.window.num": "4"}))
        await b.start()
        try:
            assert b.share_persister.links.request_timeout_ms == 12345
            assert b.partition_ends.links.request_timeout_ms == 23456
            assert b.quotas.controller_mutation.samples == 4 and b.quotas.produce.samples == 11
        finally:
            await b.shutdown()
    asyncio.run(main())


def test_a_single_node_with_every_log_dir_cordoned_refuses_new_partitions(tmp_path):
    """cordoned.log.dirs=* (KIP-1066), set at run time: new topics and partitions are refused in
    the words of Kafka 4.3.1's controller, an entry that is no log dir is refused as Kafka's
    KafkaConfig refuses it, and uncordoned, topics are made again."""
    from rivulet.protocol.errors import ApiError

    async def main():
        b = await started(tmp_path)
        try:
            b.topics.create_topic("before", 1, 1, {})
            with pytest.raises(ApiError) as e:
                b.topics.alter_broker_configs("1", {"cordoned.log.dirs": "/a,/b"})
            assert (e.value.code, e.value.message) == (
                ErrorCode.INVALID_REQUEST, "requirement failed: All entries in cordoned.log.dirs must be present in "
                "log.dirs or log.dir. Missing entries : /a, /b")
            b.topics.alter_broker_configs("1", {"cordoned.log.dirs": "*"})
            with pytest.raises(ApiError) as e:
                b.topics.create_topic("after", 1, 1, {})
            assert (e.value.code, e.value.message) == (
                ErrorCode.INVALID_REPLICATION_FACTOR, "Unable to replicate the partition 1 time(s): All brokers are "
                "currently fenced, or have all their log directories cordoned.")
            with pytest.raises(ApiError) as e:
                await b.topics.add_partitions("before", 3)
            assert (e.value.code, e.value.message) == (
                ErrorCode.INVALID_REPLICATION_FACTOR, "All brokers are currently fenced, or have all their log "
                "directories cordoned.")
            assert [d.cordoned for d in b.log_manager.describe_dirs()] == [True]
            b.topics.alter_broker_configs("1", {})
            assert b.topics.create_topic("after", 1, 1, {}) is not None
        finally:
            await b.shutdown()
    asyncio.run(main())
