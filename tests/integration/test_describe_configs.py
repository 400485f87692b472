"""DescribeConfigs answers each entry's type and read-only flag as Kafka 4.3 does, read
through real clients (kafka-python reads config_type, confluent-kafka is_read_only).

Kafka's rule: a broker entry is read-only unless its own name is one of the configs the broker
can update dynamically (DynamicBrokerConfig's reconfigurable set); a topic entry never is.
"""

from __future__ import annotations

import uuid

import pytest

pytestmark = pytest.mark.integration

# name -> (type, read_only) as a Kafka 4.3 broker answers them.
KAFKA_BROKER_ENTRIES = {
    "node.id": ("INT", True),
    "broker.id": ("INT", True),
    "num.partitions": ("INT", True),
    "default.replication.factor": ("INT", True),
    "log.dirs": ("LIST", True),
    "listeners": ("LIST", False),  # per-broker dynamic
    "advertised.listeners": ("LIST", True),
    "process.roles": ("LIST", True),
    "auto.create.topics.enable": ("BOOLEAN", True),
    "log.retention.ms": ("LONG", False),
    "log.retention.hours": ("INT", True),  # only the first synonym is dynamic
    "log.retention.bytes": ("LONG", False),
    "log.segment.bytes": ("INT", False),
    "log.roll.ms": ("LONG", False),
    "log.cleanup.policy": ("LIST", False),
    "log.cleaner.min.cleanable.ratio": ("DOUBLE", False),
    "log.cleaner.backoff.ms": ("LONG", False),
    "log.cleaner.enable": ("BOOLEAN", True),
    "message.max.bytes": ("INT", False),
    "compression.type": ("STRING", False),
    "min.insync.replicas": ("INT", False),
    "offsets.topic.replication.factor": ("SHORT", True),
    "offsets.retention.check.interval.ms": ("LONG", True),
    "connections.max.idle.ms": ("LONG", True),
    "socket.request.max.bytes": ("INT", True),
    "background.threads": ("INT", False),
    "producer.id.expiration.ms": ("INT", False),
    "inter.broker.listener.name": ("STRING", True),
}

KAFKA_TOPIC_ENTRIES = {
    "retention.ms": "LONG",
    "retention.bytes": "LONG",
    "segment.bytes": "INT",
    "cleanup.policy": "LIST",
    "min.cleanable.dirty.ratio": "DOUBLE",
    "preallocate": "BOOLEAN",
    "compression.type": "STRING",
    "message.timestamp.type": "STRING",
    "max.message.bytes": "INT",
    "remote.storage.enable": "BOOLEAN",
    "local.retention.ms": "LONG",
}


def test_types_and_read_only_flags_match_kafka(broker):
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    topic = f"types-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"retention.ms": "60000"})])[topic].result(30)

    kadmin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        got = kadmin.describe_configs([KConfigResource(ConfigResourceType.BROKER, "1"),
                                       KConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
    finally:
        kadmin.close()
    brokers, topics = got["broker"]["1"], got["topic"][topic]
    for name, (ctype, read_only) in KAFKA_BROKER_ENTRIES.items():
        assert (brokers[name]["config_type"], brokers[name]["read_only"]) == (ctype, read_only), name
    for name, ctype in KAFKA_TOPIC_ENTRIES.items():
        assert (topics[name]["config_type"], topics[name]["read_only"]) == (ctype, False), name
    assert all(e["config_type"] != "UNKNOWN" for e in brokers.values())
    assert all(not e["read_only"] for e in topics.values())
    assert topics["retention.ms"]["value"] == "60000"

    node = ConfigResource(ConfigResource.Type.BROKER, "1")
    entries = admin.describe_configs([node])[node].result(30)
    for name, (_, read_only) in KAFKA_BROKER_ENTRIES.items():
        assert entries[name].is_read_only is read_only, name
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    assert not any(e.is_read_only for e in admin.describe_configs([res])[res].result(30).values())


def test_alter_refuses_what_the_definitions_call_read_only(broker):
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def set_(name: str, value: str) -> int | None:
        res = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
        try:
            admin.incremental_alter_configs([res], validate_only=True)[res].result(30)
        except Exception as e:
            return e.args[0].code()
        return None

    assert set_("num.partitions", "3") == KafkaError.INVALID_REQUEST
    assert set_("log.retention.hours", "3") == KafkaError.INVALID_REQUEST
    assert set_("log.retention.ms", "3") is None
    assert set_("log.cleaner.backoff.ms", "100") is None
    # Kafka's broker answers INVALID_REQUEST for any dynamic broker config it cannot validate
    assert set_("log.cleaner.backoff.ms", "soon") == KafkaError.INVALID_REQUEST


def test_documentation_comes_with_each_entry_when_asked(broker):
    import asyncio

    from rivulet.client.connection import BrokerConnection
    from rivulet.protocol.messages import describe_configs_request as dcq

    async def describe(include_documentation: bool) -> dict:
        host, port = broker.bootstrap.split(":")
        conn = await BrokerConnection(host, int(port)).connect()
        try:
            resp = await conn.send(dcq.DescribeConfigsRequest(
                include_synonyms=True, include_documentation=include_documentation,
                resources=[dcq.DescribeConfigsResource(resource_type=4, resource_name="1",
                                                       configuration_keys=["num.partitions", "log.retention.ms"])]))
            return {c.name: c for c in resp.results[0].configs}
        finally:
            await conn.close()

    with_docs = asyncio.run(describe(True))
    assert set(with_docs) == {"num.partitions", "log.retention.ms"}
    assert "partition" in with_docs["num.partitions"].documentation
    assert with_docs["num.partitions"].synonyms[-1].source == 5  # DEFAULT_CONFIG
    assert asyncio.run(describe(False))["num.partitions"].documentation is None


def _describe_raw(bootstrap: str, rtype: int, name: str, synonyms: bool = False) -> dict:
    import asyncio

    from rivulet.client.connection import BrokerConnection
    from rivulet.protocol.messages import describe_configs_request as dcq

    async def describe() -> dict:
        host, port = bootstrap.split(":")
        conn = await BrokerConnection(host, int(port)).connect()
        try:
            resp = await conn.send(dcq.DescribeConfigsRequest(include_synonyms=synonyms, resources=[
                dcq.DescribeConfigsResource(resource_type=rtype, resource_name=name, configuration_keys=None)]))
            return {c.name: (c.value, c.config_source, [(s.name, s.value, s.source) for s in c.synonyms])
                    if synonyms else (c.value, c.config_source) for c in resp.results[0].configs}
        finally:
            await conn.close()
    return asyncio.run(describe())


def _alter_cluster_min_isr(bootstrap: str, op: int, value: str | None) -> tuple[int, str | None]:
    import asyncio

    from rivulet.client.connection import BrokerConnection
    from rivulet.protocol.messages import incremental_alter_configs_request as iacq

    async def alter() -> tuple[int, str | None]:
        host, port = bootstrap.split(":")
        conn = await BrokerConnection(host, int(port)).connect()
        try:
            resp = await conn.send(iacq.IncrementalAlterConfigsRequest(validate_only=False, resources=[
                iacq.AlterConfigsResource(resource_type=4, resource_name="", configs=[
                    iacq.AlterableConfig(name="min.insync.replicas", config_operation=op, value=value)])]))
            return resp.responses[0].error_code, resp.responses[0].error_message
        finally:
            await conn.close()
    return asyncio.run(alter())


def test_min_insync_replicas_is_a_cluster_level_setting_as_in_kafka_4_1(broker_factory):
    """KIP-966 (eligible leader replicas, on by default since Kafka 4.1): the cluster keeps
    min.insync.replicas at the cluster-default level, written from server.properties; topics
    report it from there, a broker may not set its own, and it cannot be removed."""
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

    b = broker_factory({"min.insync.replicas": "2"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    topic = f"misr-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)

    def describe(res: ConfigResource) -> dict:
        return admin.describe_configs([res])[res].result(30)

    topic_res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entry = describe(topic_res)["min.insync.replicas"]
    assert (entry.value, entry.source) == ("2", 3)  # DYNAMIC_DEFAULT_BROKER_CONFIG, not a topic default
    assert _describe_raw(b.bootstrap, 4, "") == {"min.insync.replicas": ("2", 3)}  # the cluster-default level
    synonyms = _describe_raw(b.bootstrap, 2, topic, synonyms=True)["min.insync.replicas"]
    assert synonyms == ("2", 3, [("min.insync.replicas", "2", 3), ("min.insync.replicas", "2", 4),
                                 ("min.insync.replicas", "1", 5)])
    node_entry = describe(ConfigResource(ConfigResource.Type.BROKER, "1"))["min.insync.replicas"]
    assert (node_entry.value, node_entry.source) == ("2", 3)

    res = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
        ConfigEntry("min.insync.replicas", "1", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(Exception) as refused:
        admin.incremental_alter_configs([res])[res].result(30)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert "Broker-level min.insync.replicas cannot be altered while ELR is enabled." in refused.value.args[0].str()
    assert _alter_cluster_min_isr(b.bootstrap, 1, None) == (
        KafkaError.INVALID_CONFIG, "Cluster-level min.insync.replicas cannot be removed while ELR is enabled.")
    assert _alter_cluster_min_isr(b.bootstrap, 0, "1") == (0, None)
    assert describe(topic_res)["min.insync.replicas"].value == "1"

    b.restart()  # the cluster-level value is kept, not written again from server.properties
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    assert describe(topic_res)["min.insync.replicas"].value == "1"
