"""A cluster-mode broker whose ZooKeeper session expires registers again, with a new broker
epoch, and is controller again if nobody else is."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from kazoo.client import KazooClient

from rivulet.controller.zk_client import KafkaZkClient
from rivulet.controller.zk_data import TopicAssignment
from rivulet.security.acls import (
    AccessControlEntry, AclBinding, AclOperation, AclPermissionType, PatternType, ResourcePattern, ResourceType,
)
from rivulet.server.broker import Broker
from rivulet.server.config import BrokerConfig
from rivulet.testing import free_port

pytestmark = [pytest.mark.integration, pytest.mark.cluster]


def test_registration_returns_after_a_session_expiry(zk_connect, tmp_path):
    async def main() -> None:
        broker = Broker(BrokerConfig({"broker.id": "7", "listeners": f"PLAINTEXT://127.0.0.1:{free_port()}",
                                      "log.dirs": str(tmp_path), "zookeeper.connect": zk_connect,
                                      "zookeeper.session.timeout.ms": "6000"}))
        await broker.start()
        loop = asyncio.get_running_loop()
        admin = KazooClient(hosts=zk_connect)
        await loop.run_in_executor(None, lambda: admin.start(timeout=15))
        try:
            assert broker.cluster is not None
            first_epoch = broker.broker_epoch
            assert first_epoch > 0 and admin.exists("/brokers/ids/7").czxid == first_epoch
            # The first election runs after start() returns: let it finish, or the expiry below
            # interrupts it and the election after it is the first (epoch 1).
            async with asyncio.timeout(30):
                while not (broker.cluster.controller is not None and broker.cluster.controller.is_active):
                    await asyncio.sleep(0.1)
            assert int(admin.get("/controller_epoch")[0]) == 1
            # Another client attaches to the broker's session and closes it: the server expires it.
            session_id, password = broker.cluster.client.zk.client_id
            twin = KazooClient(hosts=zk_connect, client_id=(session_id, password))
            await loop.run_in_executor(None, lambda: (twin.start(timeout=15), twin.stop(), twin.close()))
            async with asyncio.timeout(30):
                while broker.broker_epoch == first_epoch or admin.exists("/brokers/ids/7") is None:
                    await asyncio.sleep(0.1)
            assert admin.exists("/brokers/ids/7").czxid == broker.broker_epoch > first_epoch
            async with asyncio.timeout(30):
                while not (admin.exists("/controller") and json.loads(admin.get("/controller")[0])["brokerid"] == 7
                           and broker.cluster.controller is not None and broker.cluster.controller.is_active):
                    await asyncio.sleep(0.1)
            assert int(admin.get("/controller_epoch")[0]) == 2
        finally:
            admin.stop()
            admin.close()
            await broker.shutdown()

    asyncio.run(main())


def test_watches_are_armed_again_after_a_session_expiry(zk_connect, tmp_path):
    """After a new session, as Kafka's brokers, the broker reads again and watches again the
    topics, the config change notifications and the ACL change notifications: a change made
    while its session was gone and one made in the new session both reach it."""
    async def main() -> None:
        broker = Broker(BrokerConfig({"broker.id": "7", "listeners": f"PLAINTEXT://127.0.0.1:{free_port()}",
                                      "log.dirs": str(tmp_path), "zookeeper.connect": zk_connect,
                                      "zookeeper.session.timeout.ms": "6000",
                                      "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}))
        await broker.start()
        loop = asyncio.get_running_loop()
        admin = KafkaZkClient(zk_connect)
        await loop.run_in_executor(None, admin.start)
        cluster = broker.cluster
        assert cluster is not None

        RETENTIONS = {"before": 1000, "while-expired": 2000, "after": 3000}

        def acl(name: str) -> AclBinding:
            return AclBinding(ResourcePattern(ResourceType.TOPIC, name, PatternType.LITERAL),
                              AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW))

        async def change(suffix: str) -> None:
            """What another broker's admin requests write: a topic, a topic config change, an ACL."""
            await loop.run_in_executor(None, lambda: (
                admin.create_topic(TopicAssignment(f"new-{suffix}", uuid.uuid4(), {0: [7]}),
                                   {"retention.ms": "1234"}),
                admin.set_entity_config("topics", "old", {"retention.ms": str(RETENTIONS[suffix])}),
                admin.update_acls(acl(suffix).pattern, [acl(suffix).entry], [])))

        async def seen(suffix: str) -> None:
            async with asyncio.timeout(30):  # a TimeoutError here: not seen
                while not (cluster.topic_configs.get(f"new-{suffix}") == {"retention.ms": "1234"}
                           and cluster.topic_configs.get("old") == {"retention.ms": str(RETENTIONS[suffix])}
                           and broker.acls.describe(acl(suffix).to_filter()) == [acl(suffix)]):
                    await asyncio.sleep(0.1)

        try:
            await loop.run_in_executor(None, admin.create_topic, TopicAssignment("old", uuid.uuid4(), {0: [7]}), {})
            await change("before")
            await seen("before")
            first_epoch = broker.broker_epoch
            session_id, password = cluster.client.zk.client_id
            twin = KazooClient(hosts=zk_connect, client_id=(session_id, password))
            await loop.run_in_executor(None, lambda: (twin.start(timeout=15), twin.stop(), twin.close()))
            await change("while-expired")  # most likely before the broker has a new session
            async with asyncio.timeout(30):
                while broker.broker_epoch == first_epoch:
                    await asyncio.sleep(0.1)
            await seen("while-expired")
            await change("after")
            await seen("after")
            assert cluster.topic_configs["old"] == {"retention.ms": "3000"}
        finally:
            await loop.run_in_executor(None, admin.close)
            await broker.shutdown()

    asyncio.run(main())
