"""Group configs, ListConfigResources and min.insync.replicas side by side with a real Apache
Kafka 4.3.1 broker: the same requests to both, the same answers (names, values, types,
sources, synonyms, error codes and messages); and Kafka's kafka-configs tool on groups."""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import java_tools as jt  # noqa: E402
from kafka_compare import read_until_changed  # noqa: E402

pytestmark = [pytest.mark.java, pytest.mark.integration]

ADMIN_PROPS = {"request.timeout.ms": 15_000, "default.api.timeout.ms": 20_000}

# (config, operation, value) sets that Kafka refuses, or takes, each validated only.
OPS = [
    [("consumer.session.timeout.ms", 0, "30000")], [("consumer.session.timeout.ms", 0, "70000")],
    [("consumer.heartbeat.interval.ms", 0, "20000")], [("no.such", 0, "1")],
    [("share.isolation.level", 0, "sometimes")], [("share.auto.offset.reset", 0, "none")],
    [("share.record.lock.duration.ms", 0, "999")], [("share.delivery.count.limit", 0, "11")],
    [("streams.num.standby.replicas", 0, "3")], [("consumer.session.timeout.ms", 2, "1")],
    [("consumer.session.timeout.ms", 0, "soon")], [("consumer.session.timeout.ms", 1, None)],
    [("share.auto.offset.reset", 0, "by_duration:PT1H")], [("consumer.assignment.interval.ms", 0, "1")],
    [("share.heartbeat.interval.ms", 0, "15000")], [("share.partition.max.record.locks", 0, "99")],
    [("consumer.assignment.interval.ms", 0, "15001")], [("share.assignment.interval.ms", 0, "-1")],
    [("streams.assignment.interval.ms", 0, "15000")], [("share.assignment.interval.ms", 0, "20000")],
]


def probe(bootstrap: str) -> dict:
    """What a broker answers to the same group-config requests."""
    from rivulet.client.connection import BrokerConnection
    from rivulet.protocol.messages import alter_configs_request as acq
    from rivulet.protocol.messages import create_topics_request as ctq
    from rivulet.protocol.messages import describe_configs_request as dcq
    from rivulet.protocol.messages import incremental_alter_configs_request as iac
    from rivulet.protocol.messages.list_config_resources_request import ListConfigResourcesRequest

    group, other, topic = "probe-group", "probe-group-2", "probe-topic"  # each broker is fresh
    out: dict = {}

    async def main() -> None:
        host, port = bootstrap.split(":")
        c = await BrokerConnection(host, int(port)).connect()

        async def describe(rtype: int, name: str, keys: list[str] | None = None) -> tuple:
            r = await c.send(dcq.DescribeConfigsRequest(include_synonyms=True, resources=[
                dcq.DescribeConfigsResource(resource_type=rtype, resource_name=name, configuration_keys=keys)]))
            res = r.results[0]
            return res.error_code, res.error_message or None, sorted(
                (e.name, e.value, e.config_source, e.config_type, e.read_only,
                 tuple((s.name, s.value, s.source) for s in e.synonyms)) for e in res.configs)

        async def alter(name: str, ops: list, validate_only: bool) -> tuple:
            r = await c.send(iac.IncrementalAlterConfigsRequest(validate_only=validate_only, resources=[
                iac.AlterConfigsResource(resource_type=32, resource_name=name, configs=[
                    iac.AlterableConfig(name=n, config_operation=o, value=v) for n, o, v in ops])]))
            return r.responses[0].error_code, r.responses[0].error_message or None

        async def listed(types: list[int], version: int) -> tuple:
            r = await c.send(ListConfigResourcesRequest(resource_types=types), version=version)
            return (r.error_code, sorted((x.resource_name, x.resource_type) for x in r.config_resources
                                         if version == 0 or x.resource_name in (group, other)))

        out["describe"] = await describe(32, group)
        out["describe unnamed"] = await describe(32, "")
        out["refused"] = [await alter(group, ops, True) for ops in OPS]
        out["unnamed"] = await alter("", [("consumer.session.timeout.ms", 0, "50000")], False)
        out["set"] = await alter(group, [("consumer.session.timeout.ms", 0, "50000"),
                                         ("share.isolation.level", 0, "read_committed")], False)
        out["after"] = await read_until_changed(lambda: describe(32, group), out["describe"])
        r = await c.send(acq.AlterConfigsRequest(validate_only=False, resources=[acq.AlterConfigsResource(
            resource_type=32, resource_name=other, configs=[acq.AlterableConfig(name="share.delivery.count.limit",
                                                                                value="3")])]))
        out["legacy"] = r.responses[0].error_code
        # both groups listed once the legacy change shows, so the three lists below see it
        await read_until_changed(lambda: listed([32], 1), (0, [(group, 32)]))
        for types, version in (([32], 1), ([64], 1), ([], 0)):
            out[f"list {types} v{version}"] = await listed(types, version)
        await c.send(ctq.CreateTopicsRequest(topics=[ctq.CreatableTopic(
            name=topic, num_partitions=1, replication_factor=1, assignments=[], configs=[])], timeout_ms=15000))
        # Kafka's broker may answer UNKNOWN_TOPIC_OR_PARTITION until it applies the new topic's metadata.
        first = await describe(2, topic, ["min.insync.replicas"])
        out["topic min isr"] = first if first[0] != 3 else await read_until_changed(
            lambda: describe(2, topic, ["min.insync.replicas"]), first, tries=300)
        out["cluster level"] = await describe(4, "")
        out["broker min isr"] = await describe(4, "1", ["min.insync.replicas", "group.consumer.session.timeout.ms"])
        out["intervals"] = await describe(4, "1", [f"group.{kind}.{bound}assignment.interval.ms"
                                                    for kind in ("consumer", "share", "streams")
                                                    for bound in ("", "min.", "max.")])

        async def alter_broker(name: str, value: str) -> tuple:
            r = await c.send(iac.IncrementalAlterConfigsRequest(validate_only=True, resources=[
                iac.AlterConfigsResource(resource_type=4, resource_name="1", configs=[
                    iac.AlterableConfig(name=name, config_operation=0, value=value)])]))
            return r.responses[0].error_code, r.responses[0].error_message or None
        out["dynamic intervals"] = [await alter_broker(n, v) for n, v in (
            ("group.consumer.assignment.interval.ms", "20000"), ("group.share.assignment.interval.ms", "500"),
            ("group.streams.assignment.interval.ms", "15000"), ("group.consumer.min.assignment.interval.ms", "5"))]
        await c.close()

    asyncio.run(main())
    return out


def test_rivulet_answers_as_kafka_does(kafka_ref, broker_factory):
    # server.properties as the reference broker has them (it sets min.insync.replicas=1 too)
    rivulet = broker_factory({"node.id": "1", "group.initial.rebalance.delay.ms": "0", "min.insync.replicas": "1"})
    theirs, ours = probe(kafka_ref), probe(rivulet.bootstrap)
    assert theirs["set"] == (0, None)  # the probe did what it means to on Kafka
    for key in theirs:
        assert ours[key] == theirs[key], key


def test_kafka_configs_tool_on_groups(java, broker):
    group = f"tool-{uuid.uuid4().hex[:6]}"

    def configs(*args: str) -> str:
        return jt.config_command(broker.bootstrap, list(args), admin_props=ADMIN_PROPS, timeout=90).stdout

    done = configs("--alter", "--entity-type", "groups", "--entity-name", group,
                   "--add-config", "consumer.heartbeat.interval.ms=6000,share.auto.offset.reset=earliest")
    assert f"Completed updating config for group {group}." in done
    described = configs("--describe", "--entity-type", "groups", "--entity-name", group)
    assert "consumer.heartbeat.interval.ms=6000" in described and "share.auto.offset.reset=earliest" in described
    configs("--alter", "--entity-type", "groups", "--entity-name", group, "--delete-config",
            "share.auto.offset.reset")
    described = configs("--describe", "--entity-type", "groups", "--entity-name", group)
    assert "share.auto.offset.reset=earliest" not in described
    assert group in configs("--describe", "--entity-type", "groups")  # every group, through ListConfigResources

