"""GROUP config resources (type 32) through real clients, on one node and on a ZooKeeper
cluster: set before any member exists, validated as Kafka 4.3 validates them, described with
their sources, listed by ListConfigResources, and still there after a restart."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from tests.cluster import eventually, three_brokers

pytestmark = pytest.mark.integration

GROUP_CONFIG_SOURCE = 8
DEFAULT_CONFIG_SOURCE = 5


def _admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def _group(name: str):
    from confluent_kafka.admin import ConfigResource, ResourceType

    return ConfigResource(ResourceType.GROUP, name)


def _alter(admin, group: str, sets: dict[str, str], deletes: tuple[str, ...] = (), validate_only: bool = False):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    ops = [ConfigEntry(n, v, incremental_operation=AlterConfigOpType.SET) for n, v in sets.items()]
    ops += [ConfigEntry(n, None, incremental_operation=AlterConfigOpType.DELETE) for n in deletes]
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=ops)
    return admin.incremental_alter_configs([res], validate_only=validate_only)[res].result(30)


def _error_of(fn) -> tuple[int, str]:
    try:
        fn()
    except Exception as e:
        err = e.args[0]
        return err.code(), err.str()
    raise AssertionError("expected an error")


def _describe(admin, group: str) -> dict:
    res = _group(group)
    return admin.describe_configs([res])[res].result(30)


def _list_config_resources(bootstrap: str, types: list[int], version: int = 1) -> tuple[int, set[tuple[str, int]]]:
    from rivulet.client.connection import BrokerConnection
    from rivulet.protocol.messages.list_config_resources_request import ListConfigResourcesRequest

    async def ask() -> tuple[int, set[tuple[str, int]]]:
        host, port = bootstrap.split(",")[0].split(":")
        conn = await BrokerConnection(host, int(port)).connect()
        try:
            resp = await conn.send(ListConfigResourcesRequest(resource_types=types), version=version)
            return resp.error_code, {(r.resource_name, r.resource_type) for r in resp.config_resources}
        finally:
            await conn.close()

    return asyncio.run(ask())


def _incremental(bootstrap: str, rtype: int, name: str, ops: list[tuple[str, int, str | None]]
                 ) -> tuple[int, str | None]:
    from rivulet.client.connection import BrokerConnection
    from rivulet.protocol.messages import incremental_alter_configs_request as iac

    async def alter() -> tuple[int, str | None]:
        host, port = bootstrap.split(",")[0].split(":")
        conn = await BrokerConnection(host, int(port)).connect()
        try:
            resp = await conn.send(iac.IncrementalAlterConfigsRequest(validate_only=False, resources=[
                iac.AlterConfigsResource(resource_type=rtype, resource_name=name, configs=[
                    iac.AlterableConfig(name=n, config_operation=op, value=v) for n, op, v in ops])]))
            return resp.responses[0].error_code, resp.responses[0].error_message
        finally:
            await conn.close()

    return asyncio.run(alter())


def test_group_configs_on_one_node_survive_a_restart(broker_factory):
    from confluent_kafka import KafkaError

    b = broker_factory({"group.consumer.heartbeat.interval.ms": "6000"})
    admin = _admin(b.bootstrap)
    group = f"share-{uuid.uuid4().hex[:6]}"  # no member has ever joined it

    before = _describe(admin, group)
    assert before["consumer.session.timeout.ms"].value == "45000"
    assert before["consumer.session.timeout.ms"].source == DEFAULT_CONFIG_SOURCE
    assert before["consumer.heartbeat.interval.ms"].value == "6000"  # the broker's group.consumer.*
    assert before["consumer.heartbeat.interval.ms"].source == 4  # STATIC_BROKER_CONFIG
    assert before["share.auto.offset.reset"].value == "latest"
    assert before["share.isolation.level"].value == "read_uncommitted"
    assert before["consumer.assignment.interval.ms"].value == "1000"
    assert len(before) == 17  # Kafka 4.3.1's group configs

    _alter(admin, group, {"consumer.session.timeout.ms": "50000", "share.auto.offset.reset": "earliest",
                          "share.isolation.level": "read_committed", "share.record.lock.duration.ms": "20000"})
    after = _describe(admin, group)
    assert after["consumer.session.timeout.ms"].value == "50000"
    assert after["consumer.session.timeout.ms"].source == GROUP_CONFIG_SOURCE
    assert after["share.auto.offset.reset"].value == "earliest"
    assert after["share.isolation.level"].value == "read_committed"
    assert after["share.record.lock.duration.ms"].value == "20000"

    # Kafka's validation: the broker's bounds, known names, values of the right kind.
    bad = [({"consumer.session.timeout.ms": "30000"}, "consumer.session.timeout.ms must be greater than or equal "
            "to group.consumer.min.session.timeout.ms"),
           ({"consumer.heartbeat.interval.ms": "20000"}, "consumer.heartbeat.interval.ms must be less than or equal "
            "to group.consumer.max.heartbeat.interval.ms"),
           ({"no.such.config": "1"}, "Unknown group config name: no.such.config"),
           ({"share.isolation.level": "sometimes"}, "share.isolation.level"),
           ({"share.auto.offset.reset": "by_duration:PT1H"}, None)]
    for sets, message in bad:
        if message is None:
            _alter(admin, group, sets, validate_only=True)
            continue
        code, text = _error_of(lambda: _alter(admin, group, sets))
        assert code == KafkaError.INVALID_CONFIG, sets
        assert message in text, text
    assert _describe(admin, group)["share.auto.offset.reset"].value == "earliest"  # validate_only kept it

    _alter(admin, group, {}, deletes=("share.record.lock.duration.ms",))
    assert _describe(admin, group)["share.record.lock.duration.ms"].source != GROUP_CONFIG_SOURCE

    # What Kafka 4.3.1 answers, word for word.
    assert _incremental(b.bootstrap, 32, "", [("consumer.session.timeout.ms", 0, "50000")]) == (
        KafkaError.INVALID_REQUEST, "Default group resources are not allowed.")
    assert _incremental(b.bootstrap, 32, group, [("consumer.session.timeout.ms", 2, "1")]) == (
        KafkaError.INVALID_CONFIG, "Can't APPEND to key consumer.session.timeout.ms because its type is not LIST.")

    assert _incremental(b.bootstrap, 16, "producers", [("metrics", 0, "org.apache.kafka.producer.")]) == (0, None)
    code, found = _list_config_resources(b.bootstrap, [32])
    assert code == 0 and found == {(group, 32)}
    code, found = _list_config_resources(b.bootstrap, [])
    assert {(group, 32), ("1", 4), ("1", 8), ("producers", 16)} <= found
    assert _list_config_resources(b.bootstrap, [64])[0] == KafkaError.UNSUPPORTED_VERSION
    # v0 was ListClientMetricsResources: subscriptions only (v0 carries no resource type).
    code, found = _list_config_resources(b.bootstrap, [], version=0)
    assert code == 0 and {name for name, _ in found} == {"producers"}

    b.restart()
    admin = _admin(b.bootstrap)
    again = _describe(admin, group)
    assert again["consumer.session.timeout.ms"].value == "50000"
    assert again["consumer.session.timeout.ms"].source == GROUP_CONFIG_SOURCE
    assert again["share.isolation.level"].value == "read_committed"
    assert _list_config_resources(b.bootstrap, [32])[1] == {(group, 32)}


def test_group_configs_in_a_zookeeper_cluster(zk_connect):
    group = f"cfg-{uuid.uuid4().hex[:6]}"
    with three_brokers(zk_connect) as cluster:
        _alter(_admin(cluster.brokers[1].bootstrap), group, {"consumer.heartbeat.interval.ms": "7000",
                                                             "share.delivery.count.limit": "3"})
        assert cluster.json(f"/config/groups/{group}")["config"] == {"consumer.heartbeat.interval.ms": "7000",
                                                                     "share.delivery.count.limit": "3"}
        # Every broker follows the change notification.
        for i in (2, 3):
            admin = _admin(cluster.brokers[i].bootstrap)
            eventually(lambda: _describe(admin, group)["consumer.heartbeat.interval.ms"].value == "7000", 30,
                       f"broker {i} to see the group's config")
        cluster.brokers[2].stop()
        cluster.brokers[2].start()
        # Back in the cluster first: until the controller's metadata reaches it, a client finds
        # no broker to send the request to.
        cluster.wait_for_brokers([1, 2, 3])
        described = _describe(_admin(cluster.brokers[2].bootstrap), group)
        assert described["share.delivery.count.limit"].value == "3"
        assert described["share.delivery.count.limit"].source == GROUP_CONFIG_SOURCE
        assert _list_config_resources(cluster.brokers[2].bootstrap, [32])[1] == {(group, 32)}


def test_the_configs_cli_describes_and_alters_groups(broker):
    import subprocess
    import sys

    def rivulet(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "rivulet", "configs", *args, "-b", broker.bootstrap],
                              capture_output=True, text=True, timeout=60)

    def table(*args: str) -> list[list[str]]:
        r = rivulet(*args)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
        return [line.split() for line in r.stdout.splitlines()[1:]]

    group = f"cli-{uuid.uuid4().hex[:6]}"
    g = ("--entity-type", "groups", "--entity-name", group)
    done = rivulet("alter", *g, "--set", "share.auto.offset.reset=earliest", "--set", "share.delivery.count.limit=4")
    assert done.returncode == 0 and f"Completed updating config for group {group}." in done.stdout, done.stderr
    assert table("describe", *g) == [["share.auto.offset.reset", "earliest", "GROUP_CONFIG"],
                                     ["share.delivery.count.limit", "4", "GROUP_CONFIG"]]
    assert ["consumer.session.timeout.ms", "45000", "DEFAULT_CONFIG"] in table("describe", *g, "--all")
    assert [group, "share.delivery.count.limit", "4", "GROUP_CONFIG"] in table("describe", "--entity-type", "groups")
    refused = rivulet("alter", *g, "--set", "share.delivery.count.limit=1")
    assert refused.returncode == 1 and "INVALID_CONFIG" in refused.stderr, refused.stderr
    assert rivulet("alter", *g, "--delete", "share.delivery.count.limit").returncode == 0
    assert table("describe", *g) == [["share.auto.offset.reset", "earliest", "GROUP_CONFIG"]]


def test_rivulets_own_admin_client_takes_resource_type_group(broker):
    """As confluent-kafka does, ResourceType.GROUP names a GROUP config resource (type 32)."""
    from rivulet.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    group = f"own-{uuid.uuid4().hex[:6]}"
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.isolation.level", "read_committed", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(30)
    described = admin.describe_configs([ConfigResource(ResourceType.GROUP, group)])
    entries = next(iter(described.values())).result(30)
    assert (entries["share.isolation.level"].value, entries["share.isolation.level"].source) == \
        ("read_committed", GROUP_CONFIG_SOURCE)


def test_broker_level_group_config_synonyms(broker_factory):
    """A group config set at broker level lists the static value, then the default, as Kafka
    4.3.1 lists them (include_synonyms=True); a group's own value comes first. confluent-kafka's
    ConfigEntry.synonyms, a dict by name, keeps only the last of the two (against Kafka too)."""
    from rivulet.client.connection import BrokerConnection
    from rivulet.protocol.messages import describe_configs_request as dcq

    b = broker_factory({"group.share.record.lock.duration.ms": "45000"})
    group = f"syn-{uuid.uuid4().hex[:6]}"
    name = "share.record.lock.duration.ms"

    async def synonyms(version: int) -> list[tuple]:
        conn = await BrokerConnection("127.0.0.1", b.port).connect(10)
        try:
            r = await conn.send(dcq.DescribeConfigsRequest(include_synonyms=True, resources=[
                dcq.DescribeConfigsResource(resource_type=32, resource_name=group, configuration_keys=[name])]),
                version=version)
        finally:
            await conn.close()
        (entry,) = r.results[0].configs
        return [(entry.value, entry.config_source)] + [(s.name, s.value, s.source) for s in entry.synonyms]

    static, default = ("group." + name, "45000", 4), ("group." + name, "30000", DEFAULT_CONFIG_SOURCE)
    for version in (1, 4):
        assert asyncio.run(synonyms(version)) == [("45000", 4), static, default], version
    _alter(_admin(b.bootstrap), group, {name: "20000"})
    assert asyncio.run(synonyms(4)) == [("20000", GROUP_CONFIG_SOURCE), (name, "20000", GROUP_CONFIG_SOURCE),
                                        static, default]
