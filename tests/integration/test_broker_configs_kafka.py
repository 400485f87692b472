"""Dynamic broker configs refused, and segment sizes bounded, side by side with a real Apache
Kafka 4.3.1 broker: the same AlterConfigs, IncrementalAlterConfigs, CreateTopics and
DescribeConfigs requests to both, the same error codes and messages."""

from __future__ import annotations

import asyncio

import pytest

pytestmark = [pytest.mark.java, pytest.mark.integration]

BROKER = 4
TOPIC = 2

# (resource name, configs) that Kafka refuses on a BROKER resource, each sent with and without
# validate_only, by both AlterConfigs and IncrementalAlterConfigs; none changes anything.
REFUSED = [
    ("1", [("log.retention.ms", "abc")]), ("1", [("log.retention.bytes", "")]),
    ("1", [("log.segment.bytes", "100")]), ("1", [("log.segment.bytes", "1048575")]),
    ("1", [("log.cleaner.threads", "-1")]), ("1", [("message.max.bytes", "-5")]),
    ("1", [("compression.type", "bogus")]), ("1", [("num.io.threads", "0")]),
    ("1", [("max.connections", "-1")]), ("1", [("min.insync.replicas", "0")]),
    ("1", [("min.insync.replicas", "2")]), ("1", [("broker.id", "5")]),
    ("1", [("log.cleaner.threads", "3")]),
    ("1", [("num.io.threads", "17")]), ("1", [("num.io.threads", "3")]), ("", [("background.threads", "21")]),
    ("1", [("group.consumer.session.timeout.ms", "1")]), ("1", [("log.retention.ms", "x"), ("broker.id", "3")]),
    ("", [("log.retention.ms", "abc")]), ("", [("log.segment.bytes", "1048575")]),
    ("", [("min.insync.replicas", "0")]), ("", [("broker.id", "5")]),
    ("", [("listeners", "PLAINTEXT://127.0.0.1:1")]),
    ("2", [("log.retention.ms", "abc")]), ("2", [("log.retention.ms", "1000")]),
    ("x", [("log.retention.ms", "1000")]), ("-1", [("log.retention.ms", "1000")]),
]


def probe(bootstrap: str) -> dict:
    """What a broker answers to the same config requests."""
    from rivulet.client.connection import BrokerConnection
    from rivulet.protocol.messages import alter_configs_request as acq
    from rivulet.protocol.messages import create_topics_request as ctq
    from rivulet.protocol.messages import describe_configs_request as dcq
    from rivulet.protocol.messages import incremental_alter_configs_request as iac

    out: dict = {}

    async def main() -> None:
        host, port = bootstrap.split(":")
        c = await BrokerConnection(host, int(port)).connect()

        async def incremental(rtype: int, name: str, configs: list, validate_only: bool) -> tuple:
            r = await c.send(iac.IncrementalAlterConfigsRequest(validate_only=validate_only, resources=[
                iac.AlterConfigsResource(resource_type=rtype, resource_name=name, configs=[
                    iac.AlterableConfig(name=n, config_operation=0, value=v) for n, v in configs])]))
            return r.responses[0].error_code, r.responses[0].error_message or None

        async def legacy(rtype: int, name: str, configs: list, validate_only: bool) -> tuple:
            r = await c.send(acq.AlterConfigsRequest(validate_only=validate_only, resources=[acq.AlterConfigsResource(
                resource_type=rtype, resource_name=name, configs=[
                    acq.AlterableConfig(name=n, value=v) for n, v in configs])]))
            return r.responses[0].error_code, r.responses[0].error_message or None

        async def create(name: str, configs: list, validate_only: bool) -> tuple:
            r = await c.send(ctq.CreateTopicsRequest(validate_only=validate_only, timeout_ms=15000, topics=[
                ctq.CreatableTopic(name=name, num_partitions=1, replication_factor=1, assignments=[], configs=[
                    ctq.CreatableTopicConfig(name=n, value=v) for n, v in configs])]))
            return r.topics[0].error_code, r.topics[0].error_message or None

        async def describe(rtype: int, name: str, keys: list[str] | None = None) -> tuple:
            r = await c.send(dcq.DescribeConfigsRequest(include_synonyms=True, resources=[
                dcq.DescribeConfigsResource(resource_type=rtype, resource_name=name, configuration_keys=keys)]))
            res = r.results[0]
            return res.error_code, res.error_message or None, sorted(
                (e.name, e.value, e.config_source, tuple((s.name, s.value, s.source) for s in e.synonyms))
                for e in res.configs if keys is not None or "segment.bytes" in e.name)

        for name, configs in REFUSED:
            for validate_only in (True, False):
                out[f"incremental {name!r} {configs} {validate_only}"] = await incremental(
                    BROKER, name, configs, validate_only)
                out[f"legacy {name!r} {configs} {validate_only}"] = await legacy(BROKER, name, configs, validate_only)
        out["taken"] = await incremental(BROKER, "1", [("log.segment.bytes", "1048576")], True)
        out["describe 2"] = (await describe(BROKER, "2", ["log.segment.bytes"]))[:2]
        out["describe x"] = (await describe(BROKER, "x", ["log.segment.bytes"]))[:2]

        for configs in ([("segment.bytes", "100")], [("segment.bytes", "1048575")], [("segment.bytes", "1048576")],
                        [("segment.bytes", "abc")], [("internal.segment.bytes", "1")],
                        [("internal.segment.bytes", "abc")], [("cleanup.policy", "bogus")],
                        [("segment.bytes", "100"), ("internal.segment.bytes", "100")]):
            out[f"create {configs}"] = await create("validated", configs, True)
        out["create small"] = await create("small", [("internal.segment.bytes", "1000")], False)
        out["create plain"] = await create("plain", [], False)
        # Kafka's broker may answer UNKNOWN_TOPIC_OR_PARTITION until it applies the new topics' metadata.
        for topic in ("small", "plain"):
            for _ in range(300):
                if (await describe(TOPIC, topic, ["segment.bytes"]))[0] == 0:
                    break
                await asyncio.sleep(0.05)
        out["describe small"] = await describe(TOPIC, "small", ["segment.bytes", "internal.segment.bytes"])
        out["describe small, every config"] = await describe(TOPIC, "small")
        out["describe plain, every config"] = await describe(TOPIC, "plain")
        for configs in ([("segment.bytes", "100")], [("internal.segment.bytes", "1")]):
            out[f"topic incremental {configs}"] = await incremental(TOPIC, "plain", configs, True)
            out[f"topic legacy {configs}"] = await legacy(TOPIC, "plain", configs, True)
        await c.close()

    asyncio.run(main())
    return out


def test_rivulet_answers_as_kafka_does(kafka_ref, broker_factory):
    # server.properties as the reference broker has them (it sets min.insync.replicas=1 too)
    rivulet = broker_factory({"node.id": "1", "min.insync.replicas": "1"})
    theirs, ours = probe(kafka_ref), probe(rivulet.bootstrap)
    assert theirs["create small"] == (0, None) and theirs["taken"] == (0, None)  # the probe did what it means to
    for key in theirs:
        assert ours[key] == theirs[key], key
