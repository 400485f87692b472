"""TopicManager's topic creation, growth and deletion with the file work on a worker thread:
invisible until done, all or none, and what other requests see meanwhile."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Callable

import pytest

from rivulet.client import core
from rivulet.client.connection import BrokerConnection
from rivulet.protocol import records as rec
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.protocol.messages import metadata_request as mq
from rivulet.server.broker import Broker
from rivulet.storage.log_dir_failure import KafkaStorageError
from tests.unit.test_broker_wiring import started

pytestmark = pytest.mark.fast


def with_broker(tmp_path, body: Callable[[Broker], Awaitable[None]]) -> None:
    """Run ``body`` against an in-process broker on ``tmp_path``."""
    async def main() -> None:
        b = await started(tmp_path)
        try:
            await body(b)
        finally:
            await b.shutdown()
    asyncio.run(main())


def dirs_of(path, topic: str) -> list[str]:
    return sorted(n for n in os.listdir(path) if n.startswith(f"{topic}-"))


def gate_creation(b: Broker, at: int, *, fail: bool = False) -> tuple[threading.Event, threading.Event]:
    """Make the worker thread stop before creating partition ``at``: ``reached`` is set then, and
    it goes on (or fails, out of descriptors) once ``go`` is set."""
    reached, go = threading.Event(), threading.Event()
    real = b.log_manager._create_log  # each new log of a batch

    def create_log(topic, partition, *args, **kw):
        if partition == at:
            assert threading.current_thread() is not threading.main_thread()  # not the loop's thread
            reached.set()
            go.wait(10)
            if fail:
                raise KafkaStorageError("creating the log failed: Too many open files")
        return real(topic, partition, *args, **kw)

    b.log_manager._create_log = create_log
    return reached, go


async def until(event: threading.Event) -> None:
    while not event.is_set():
        await asyncio.sleep(0.01)


def test_a_topic_is_invisible_until_every_partition_exists(tmp_path):
    async def body(b: Broker) -> None:
        topics = b.topics
        topics.create_topic("other", 1, 1, {})
        conn = await BrokerConnection("127.0.0.1", b.bound_ports[0]).connect()
        reached, go = gate_creation(b, 5)
        creating = asyncio.ensure_future(topics.create_topic_off_loop("big", 8, 1, {}))
        await until(reached)
        # The worker thread is held halfway: another client's requests are answered meanwhile.
        md = await conn.send(mq.MetadataRequest(topics=[mq.MetadataRequestTopic(name="other"),
                                                        mq.MetadataRequestTopic(name="big")],
                                                allow_auto_topic_creation=True))
        assert [(t.name, t.error_code) for t in md.topics] == \
            [("other", ErrorCode.NONE), ("big", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]  # being created, as Kafka
        batch = rec.encode_batch([rec.Record(0, 0, None, b"v", [])])
        pr = await conn.send(core.produce_request(None, 1, 5000, {("other", 0): batch}))
        assert [p.error_code for p in pr.responses[0].partition_responses] == [ErrorCode.NONE]
        await conn.close()
        # Halfway: the loop answers, the topic is not there yet, and its name is taken.
        assert topics.get("big") is None and dirs_of(tmp_path, "big")
        for again in (lambda: topics.create_topic("big", 1, 1, {}),
                      lambda: topics.create_topic_off_loop("big", 1, 1, {})):
            with pytest.raises(ApiError) as e:
                r = again()
                if asyncio.iscoroutine(r):
                    await r
            assert e.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
        go.set()
        info = await creating
        assert topics.get("big") is info and info.num_partitions == 8
        assert all(("big", i) in b.replica_manager.partitions for i in range(8))

    with_broker(tmp_path, body)


def test_a_failure_halfway_removes_what_was_made(tmp_path):
    async def body(b: Broker) -> None:
        topics = b.topics
        reached, go = gate_creation(b, 5, fail=True)
        go.set()
        with pytest.raises(KafkaStorageError):
            await topics.create_topic_off_loop("big", 8, 1, {})
        assert topics.get("big") is None and dirs_of(tmp_path, "big") == []
        assert not [lg for lg in b.log_manager.all_logs() if lg.topic == "big"]
        assert not [tp for tp in b.replica_manager.partitions if tp[0] == "big"]
        assert b.log_manager.online_dirs()  # not a disk fault
        # Growing a topic fails the same way, and the topic keeps its partitions.
        topics.create_topic("small", 2, 1, {})
        with pytest.raises(KafkaStorageError):
            await topics.add_partitions("small", 8)
        assert topics.get("small").num_partitions == 2 and dirs_of(tmp_path, "small") == ["small-0", "small-1"]

    with_broker(tmp_path, body)


def test_add_partitions_checks_against_the_current_count(tmp_path):
    async def body(b: Broker) -> None:
        topics = b.topics
        topics.create_topic("t", 2, 1, {})
        node = b.config.node_id
        # Kafka 4.3.1's controller's checks and messages, in its order.
        for count, assignments, code, message in (
                (1, None, ErrorCode.INVALID_PARTITIONS, "The topic t currently has 2 partition(s); 1 would not be an increase."),
                (2, None, ErrorCode.INVALID_PARTITIONS, "Topic already has 2 partition(s)."),
                (4, [[node]], ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                 "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified."),
                (3, [[99]], ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                 "The manual partition assignment includes broker 99, but no such broker is registered."),
                (3, [[node, node]], ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                 f"The manual partition assignment includes the broker {node} more than once."),
                (3, [[]], ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                 "The manual partition assignment includes an empty replica list.")):
            with pytest.raises(ApiError) as e:
                await topics.add_partitions("t", count, assignments)
            assert (e.value.code, e.value.message) == (code, message)
        with pytest.raises(ApiError) as e:
            await topics.add_partitions("nope", 4)
        assert e.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        await topics.add_partitions("t", 4, validate_only=True)
        assert topics.get("t").num_partitions == 2
        # Two at once: the second is checked against what the first left.
        first = asyncio.ensure_future(topics.add_partitions("t", 4))
        await asyncio.sleep(0)  # the first holds the lock while its logs are made
        with pytest.raises(ApiError) as e:
            await topics.add_partitions("t", 4)
        assert e.value.code == ErrorCode.INVALID_PARTITIONS
        await first
        assert topics.get("t").num_partitions == 4 and dirs_of(tmp_path, "t") == [f"t-{i}" for i in range(4)]

    with_broker(tmp_path, body)


def test_deletion_stops_serving_at_once_and_frees_the_name_when_done(tmp_path):
    async def body(b: Broker) -> None:
        topics = b.topics
        topics.create_topic("t", 3, 1, {})
        deleting = asyncio.ensure_future(topics.delete_topic("t"))
        await asyncio.sleep(0)  # the deletion has started: forgotten, its logs going
        assert topics.get("t") is None and not [tp for tp in b.replica_manager.partitions if tp[0] == "t"]
        with pytest.raises(ApiError) as e:
            topics.create_topic("t", 1, 1, {})
        assert e.value.code == ErrorCode.TOPIC_ALREADY_EXISTS and "marked for deletion" in e.value.message
        await deleting
        assert dirs_of(tmp_path, "t") == []
        topics.create_topic("t", 1, 1, {})  # the name is free again
        with pytest.raises(ApiError) as e:
            await topics.delete_topic("nope")
        assert e.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    with_broker(tmp_path, body)


def test_shutdown_waits_for_a_creation_under_way(tmp_path):
    async def main() -> None:
        b = await started(tmp_path)
        reached, go = gate_creation(b, 3)
        creating = asyncio.ensure_future(b.topics.create_topic_off_loop("big", 6, 1, {}))
        await until(reached)
        stopping = asyncio.ensure_future(b.shutdown())
        await asyncio.sleep(0.05)
        assert not stopping.done()  # the logs are not closed under the worker's feet
        go.set()
        await stopping
        assert (await creating).num_partitions == 6
        # Every log made was closed by the shutdown: the next start finds the whole topic.
        b2 = await started(tmp_path)
        try:
            assert b2.topics.get("big").num_partitions == 6
            assert all(("big", i) in b2.replica_manager.partitions for i in range(6))
        finally:
            await b2.shutdown()
    asyncio.run(main())


def test_auto_creation_answers_unknown_topic_then_the_topic(tmp_path):
    """Kafka 4.3 answers the Metadata request that starts an auto-creation with
    UNKNOWN_TOPIC_OR_PARTITION (the creation goes to the controller); the topic is there when
    the client asks again. aiokafka's suite saw Kafka answer so for every topic it made."""
    async def body(b: Broker) -> None:
        conn = await BrokerConnection("127.0.0.1", b.bound_ports[0]).connect()

        async def ask(name: str, auto: bool) -> list:
            md = await conn.send(mq.MetadataRequest(topics=[mq.MetadataRequestTopic(name=name)],
                                                    allow_auto_topic_creation=auto))
            return [(t.name, t.error_code, len(t.partitions), t.is_internal) for t in md.topics]

        assert await ask("fresh", True) == [("fresh", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 0, False)]
        assert b.topics.get("fresh") is not None
        partitions = b.config["num.partitions"]
        assert await ask("fresh", True) == [("fresh", ErrorCode.NONE, partitions, False)]
        assert await ask("absent", False) == [("absent", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 0, False)]
        assert b.topics.get("absent") is None
        await conn.close()

    with_broker(tmp_path, body)
