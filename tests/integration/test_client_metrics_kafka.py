"""CLIENT_METRICS config resources (KIP-714's subscriptions) side by side with a real Apache
Kafka 4.3.1 broker: the same DescribeConfigs, IncrementalAlterConfigs, AlterConfigs and
ListConfigResources requests to both, the same answers (values, types, sources, synonyms,
error codes)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kafka_compare import read_until_changed  # noqa: E402

pytestmark = [pytest.mark.java, pytest.mark.integration]

CM = 16
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

# Operations each broker takes or refuses, validated only.
OPS = [
    [("metrics", SET, "org.apache.kafka.producer.")], [("interval.ms", SET, "99")], [("interval.ms", SET, "100")],
    [("interval.ms", SET, "3600000")], [("interval.ms", SET, "3600001")], [("interval.ms", SET, "soon")],
    [("interval.ms", APPEND, "5")], [("no.such", SET, "1")], [("match", SET, "client_id=app-.*")],
    [("match", SET, "client_colour=red")], [("match", SET, "client_id")], [("match", SET, "client_id=a=b")],
    [("match", SET, "client_id=(")], [("match", SET, "client_software_name=java,client_source_port=\\d+")],
    [("metrics", APPEND, "a.")], [("metrics", DELETE, None)], [("metrics", SET, "*")],
]


def probe(bootstrap: str) -> dict:
    """What a broker answers to the same client-metrics requests."""
    from rivulet.client.connection import BrokerConnection
    from rivulet.protocol.messages import alter_configs_request as acq
    from rivulet.protocol.messages import describe_configs_request as dcq
    from rivulet.protocol.messages import incremental_alter_configs_request as iac
    from rivulet.protocol.messages.list_config_resources_request import ListConfigResourcesRequest

    sub, other = "probe-sub", "probe-sub-2"
    out: dict = {}

    async def main() -> None:
        host, port = bootstrap.split(":")
        c = await BrokerConnection(host, int(port)).connect()

        async def describe(name: str) -> tuple:
            r = await c.send(dcq.DescribeConfigsRequest(include_synonyms=True, resources=[
                dcq.DescribeConfigsResource(resource_type=CM, resource_name=name, configuration_keys=None)]))
            res = r.results[0]
            return res.error_code, sorted(
                (e.name, e.value, e.config_source, e.config_type, e.read_only, e.is_sensitive,
                 tuple((s.name, s.value, s.source) for s in e.synonyms)) for e in res.configs)

        async def alter(name: str, ops: list, validate_only: bool) -> int:
            r = await c.send(iac.IncrementalAlterConfigsRequest(validate_only=validate_only, resources=[
                iac.AlterConfigsResource(resource_type=CM, resource_name=name, configs=[
                    iac.AlterableConfig(name=n, config_operation=o, value=v) for n, o, v in ops])]))
            return r.responses[0].error_code

        async def listed() -> list:
            r = await c.send(ListConfigResourcesRequest(resource_types=[CM]), version=1)
            return [r.error_code, sorted((x.resource_name, x.resource_type) for x in r.config_resources)]

        out["describe none"] = await describe(sub)
        out["describe unnamed"] = await describe("")
        out["validated"] = [await alter(sub, ops, True) for ops in OPS]
        out["unnamed"] = await alter("", [("metrics", SET, "*")], False)
        out["listed before"] = await listed()
        out["set"] = await alter(sub, [("metrics", SET, "org.apache.kafka.producer., org.apache.kafka.consumer."),
                                       ("interval.ms", SET, "2000"), ("match", SET, "client_id=app-.*")], False)
        out["append"] = await alter(sub, [("metrics", APPEND, "org.apache.kafka.stream.")], False)
        out["subtract"] = await alter(sub, [("metrics", SUBTRACT, "org.apache.kafka.consumer.")], False)
        out["after"] = await read_until_changed(lambda: describe(sub), out["describe none"])
        r = await c.send(acq.AlterConfigsRequest(validate_only=False, resources=[acq.AlterConfigsResource(
            resource_type=CM, resource_name=other, configs=[acq.AlterableConfig(name="metrics", value="*")])]))
        out["legacy"] = r.responses[0].error_code
        out["legacy described"] = await read_until_changed(lambda: describe(other), out["describe none"])
        out["listed"] = await read_until_changed(listed, out["listed before"])
        out["emptied"] = await alter(sub, [("metrics", DELETE, None), ("interval.ms", DELETE, None),
                                           ("match", DELETE, None)], False)
        out["emptied described"] = await read_until_changed(lambda: describe(sub), out["after"])
        out["listed after"] = await read_until_changed(listed, out["listed"])
        await c.close()

    asyncio.run(main())
    return out


def test_rivulet_answers_as_kafka_does(kafka_ref, broker_factory):
    rivulet = broker_factory({"node.id": "1"})
    theirs, ours = probe(kafka_ref), probe(rivulet.bootstrap)
    assert theirs["set"] == 0  # the probe did what it means to on Kafka
    differ = [f"{key}: ours {ours[key]}, Kafka {theirs[key]}" for key in theirs if ours[key] != theirs[key]]
    assert not differ, "\n".join(differ)
