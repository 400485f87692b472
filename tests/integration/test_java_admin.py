"""Kafka's Java ``Admin`` against Rivulet, answered as Kafka 4.3.1 answers it.

tests/java/AdminProbe.java runs a fixed script of Admin calls (valid and invalid inputs across
topics, configs, offsets, log dirs, elections, reassignments, groups, share groups,
transactions, features, quotas, SCRAM, ACLs, delegation tokens) and prints one normalized line
per call. Its lines from a Kafka 4.3.1 broker are kept in tests/java/admin_probe_kafka.txt;
the ``-m java`` test asserts Rivulet prints the same, but for the lines listed in
``KNOWN_DIFFERENCES`` (each with why). Re-record the file with ``python tests/java_admin_probe.py
--record``.

The differences the probe found are also pinned here without Java, with Rivulet's own client
(raw requests) and confluent-kafka: each of them was a wrong answer to the Java client.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from rivulet.client.connection import BrokerConnection
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages import (
    create_partitions_request as cpq,
    create_topics_request as ctq,
    describe_configs_request as dcq,
    incremental_alter_configs_request as iacq,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from java_admin_probe import (  # noqa: E402
    BROKER_CONFIGS,
    KNOWN_DIFFERENCES,
    broker_names_differences,
    golden_lines,
    run_probe,
)

pytestmark = pytest.mark.integration


def _send(broker, request):
    async def main():
        c = await BrokerConnection("127.0.0.1", broker.port).connect(10)
        try:
            return await c.send(request)
        finally:
            await c.close()
    return asyncio.run(main())


def test_max_timestamp_of_an_empty_partition_and_below_the_log_start(broker):
    """ListOffsets MAX_TIMESTAMP on a partition with no records is offset -1 (the answer used to
    fail to encode, so the Java client timed out), and after DeleteRecords past the record it
    names, that record with its batch's epoch, as Kafka 4.3.1."""
    t = f"maxts-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    from confluent_kafka.admin import NewTopic
    admin.create_topics([NewTopic(t, 2, 1)])[t].result(30)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(10):
        p.produce(t, value=b"v", partition=0, timestamp=1000 + (i * 7 % 10))
        p.flush(10)
    p0, p1 = TopicPartition(t, 0), TopicPartition(t, 1)
    got = admin.list_offsets({p0: OffsetSpec.max_timestamp(), p1: OffsetSpec.max_timestamp()})
    assert (got[p0].result(30).offset, got[p0].result(30).timestamp) == (7, 1009)
    assert (got[p1].result(30).offset, got[p1].result(30).timestamp) == (-1, -1)
    admin.delete_records([TopicPartition(t, 0, 10)])[TopicPartition(t, 0, 10)].result(30)
    after = admin.list_offsets({p0: OffsetSpec.max_timestamp()})[p0].result(30)
    assert (after.offset, after.timestamp, after.leader_epoch) == (7, 1009, 0)


def test_manual_replica_assignments_are_checked_as_kafka(broker):
    """CreateTopics and CreatePartitions check each replica list as Kafka's controller does
    (INVALID_REPLICA_ASSIGNMENT, its messages), not as a replication factor."""
    node = 1
    t = f"assign-{uuid.uuid4().hex[:6]}"

    def create(name: str, lists: dict[int, list[int]]):
        topic = ctq.CreatableTopic(name=name, num_partitions=-1, replication_factor=-1, configs=[], assignments=[
            ctq.CreatableReplicaAssignment(partition_index=i, broker_ids=b) for i, b in lists.items()])
        r = _send(broker, ctq.CreateTopicsRequest(topics=[topic], timeout_ms=10000, validate_only=False)).topics[0]
        return r.error_code, r.error_message

    assert create(t + "-dup", {0: [node, node]}) == (
        ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"The manual partition assignment includes the broker {node} more than once.")
    assert create(t + "-gap", {0: [node], 2: [node]}) == (
        ErrorCode.INVALID_REPLICA_ASSIGNMENT, "partitions should be a consecutive 0-based integer sequence")
    assert create(t + "-empty", {0: []}) == (
        ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list.")
    assert create(t, {0: [node]}) == (ErrorCode.NONE, None)

    def plain(name: str, partitions: int, rf: int):
        topic = ctq.CreatableTopic(name=name, num_partitions=partitions, replication_factor=rf, configs=[], assignments=[])
        r = _send(broker, ctq.CreateTopicsRequest(topics=[topic], timeout_ms=10000, validate_only=True)).topics[0]
        return r.error_code, r.error_message

    assert plain(t + "-p0", 0, 1) == (ErrorCode.INVALID_PARTITIONS,
                                     "Number of partitions was set to an invalid non-positive value.")
    assert plain(t + "-rf0", 1, 0) == (ErrorCode.INVALID_REPLICATION_FACTOR,
                                      "Replication factor must be larger than 0, or -1 to use the default value.")
    assert plain(t + "-rf3", 1, 3) == (ErrorCode.INVALID_REPLICATION_FACTOR, "Unable to replicate the partition 3 "
                                       "time(s): The target replication factor of 3 cannot be reached because only 1 "
                                       "broker(s) are registered or some brokers have all their log directories cordoned.")

    def grow(count: int, lists: list[list[int]]):
        topic = cpq.CreatePartitionsTopic(name=t, count=count, assignments=[
            cpq.CreatePartitionsAssignment(broker_ids=b) for b in lists])
        r = _send(broker, cpq.CreatePartitionsRequest(topics=[topic], timeout_ms=10000, validate_only=False)).results[0]
        return r.error_code, r.error_message

    assert grow(2, [[99]]) == (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                               "The manual partition assignment includes broker 99, but no such broker is registered.")
    assert grow(3, [[node]]) == (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified.")
    assert grow(2, [[]]) == (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             "The manual partition assignment includes an empty replica list.")
    assert grow(1, []) == (ErrorCode.INVALID_PARTITIONS, "Topic already has 1 partition(s).")
    assert grow(2, [[node]]) == (ErrorCode.NONE, None)


def test_config_requests_check_names_and_keys_as_kafka(broker):
    """DescribeConfigs of a topic name no topic can have is INVALID_TOPIC_EXCEPTION; an
    alteration naming one key twice is INVALID_REQUEST, and nothing of it is applied."""
    r = _send(broker, dcq.DescribeConfigsRequest(resources=[dcq.DescribeConfigsResource(
        resource_type=2, resource_name="bad/name", configuration_keys=None)],
        include_synonyms=False, include_documentation=False)).results[0]
    assert (r.error_code, r.error_message) == (
        ErrorCode.INVALID_TOPIC_EXCEPTION,
        "Topic name is invalid: 'bad/name' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'")
    r = _send(broker, dcq.DescribeConfigsRequest(resources=[dcq.DescribeConfigsResource(
        resource_type=2, resource_name="no-such-topic", configuration_keys=None)],
        include_synonyms=False, include_documentation=False)).results[0]
    assert (r.error_code, r.error_message) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "")
    r = _send(broker, iacq.IncrementalAlterConfigsRequest(resources=[iacq.AlterConfigsResource(
        resource_type=2, resource_name="no-such-topic", configs=[
            iacq.AlterableConfig(name="retention.ms", config_operation=0, value="1")])], validate_only=False)).responses[0]
    assert (r.error_code, r.error_message) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                               "The topic 'no-such-topic' does not exist.")
    t = f"dupkey-{uuid.uuid4().hex[:6]}"
    from confluent_kafka.admin import ConfigResource, NewTopic
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(t, 1, 1)])[t].result(30)
    ops = [iacq.AlterableConfig(name="retention.ms", config_operation=0, value=v) for v in ("5000", "6000")]
    r = _send(broker, iacq.IncrementalAlterConfigsRequest(resources=[iacq.AlterConfigsResource(
        resource_type=2, resource_name=t, configs=ops)], validate_only=False)).responses[0]
    assert (r.error_code, r.error_message) == (ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    res = ConfigResource(ConfigResource.Type.TOPIC, t)
    assert admin.describe_configs([res])[res].result(30)["retention.ms"].is_default


@pytest.mark.java
def test_java_admin_probe_matches_kafka(java, broker_factory, tmp_path):
    """Every line of the probe equal to Kafka 4.3.1's, but the known differences."""
    broker = broker_factory(BROKER_CONFIGS)
    ours = run_probe(broker.bootstrap, tmp_path / "probe.err")
    kafka = golden_lines()
    assert set(ours) == set(kafka), "the probe's steps changed: re-record the golden file"
    differ = {name: (kafka[name], ours[name]) for name in kafka
              if name not in KNOWN_DIFFERENCES and ours[name] != kafka[name]}
    assert not differ, (tmp_path / "probe.err").read_text()[-4000:] + "\n" + \
        "\n".join(f"{n}\n  kafka:   {k}\n  rivulet: {r}" for n, (k, r) in differ.items())
    # Kafka's broker configs, each listed as Kafka lists it (name, source, read-only, sensitive).
    names = "configs.broker.names"
    assert broker_names_differences(kafka[names], ours[names]) == {}
