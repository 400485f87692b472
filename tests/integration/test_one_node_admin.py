"""ElectLeaders, AlterPartitionReassignments and ListPartitionReassignments on a single broker,
answered as a one-node Kafka 4.3.1 answers them (the messages are Kafka's; the side-by-side
test in test_authz_answers_kafka.py compares every case): no election is needed, no
reassignment is under way, a reassignment to the one broker completes at once. With
confluent-kafka's AdminClient and with Kafka's own kafka-leader-election and
kafka-reassign-partitions tools."""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

import pytest
from confluent_kafka import ElectionType, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from rivulet.client.connection import BrokerConnection
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages import (
    alter_partition_reassignments_request as apq,
    api_versions_request as avq,
    elect_leaders_request as elq,
    list_partition_reassignments_request as lpq,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import java_tools as jt  # noqa: E402

pytestmark = pytest.mark.integration

TOPIC = "one-node-admin"
NOT_REGISTERED = "The manual partition assignment includes broker 2, but no such broker is registered."


@pytest.fixture(scope="module")
def one_node(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(30)
    return broker, admin


def test_the_apis_are_listed(one_node):
    broker, _ = one_node

    async def main() -> dict[int, tuple[int, int]]:
        c = await BrokerConnection("127.0.0.1", broker.port).connect(10)
        r = await c.send(avq.ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        await c.close()
        return {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}

    listed = asyncio.run(main())
    assert (listed.get(43), listed.get(45), listed.get(46)) == ((0, 2), (0, 1), (0, 0))
    assert 7 not in listed and 56 not in listed  # the brokers' own requests stay cluster-only


def test_elect_leaders_with_the_admin_client(one_node):
    _, admin = one_node
    asked = [TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1), TopicPartition(TOPIC, 9),
             TopicPartition("no-such-topic", 0)]
    for election in (ElectionType.PREFERRED, ElectionType.UNCLEAN):
        got = admin.elect_leaders(election, asked).result(30)
        codes = {(tp.topic, tp.partition): err.code() if err is not None else None for tp, err in got.items()}
        assert codes == {(TOPIC, 0): KafkaError.ELECTION_NOT_NEEDED, (TOPIC, 1): KafkaError.ELECTION_NOT_NEEDED,
                         (TOPIC, 9): KafkaError.UNKNOWN_TOPIC_OR_PART,
                         ("no-such-topic", 0): KafkaError.UNKNOWN_TOPIC_OR_PART}, election
    # every partition: only those that changed or failed are reported, so nothing
    assert admin.elect_leaders(ElectionType.PREFERRED, None).result(30) == {}



def test_elect_leaders_with_a_timeout_of_zero_times_out(one_node):
    """kafka-go's ElectLeaders sends a timeout of 0 unless told otherwise; Kafka's controller
    takes it as a deadline already passed and elects nothing (its TestClientElectLeaders fails
    against Kafka 4.3.1 for it). A timeout of 1 ms is enough to be answered."""
    broker, _ = one_node

    async def elect(version: int, timeout_ms: int) -> tuple[int | None, list[tuple[int, int]]]:
        c = await BrokerConnection("127.0.0.1", broker.port).connect(10)
        try:
            r = await c.send(elq.ElectLeadersRequest(election_type=0, timeout_ms=timeout_ms, topic_partitions=[
                elq.TopicPartitions(topic=TOPIC, partitions=[0, 1])]), version=version)
        finally:
            await c.close()
        return (r.error_code if version >= 1 else None,
                [(p.partition_id, p.error_code) for t in r.replica_election_results for p in t.partition_result])

    for v in (0, 1, 2):
        timed_out = ErrorCode.REQUEST_TIMED_OUT if v >= 1 else None
        assert asyncio.run(elect(v, 0)) == (timed_out, [(0, ErrorCode.REQUEST_TIMED_OUT),
                                                          (1, ErrorCode.REQUEST_TIMED_OUT)]), v
        answered = ErrorCode.NONE if v >= 1 else None
        assert asyncio.run(elect(v, 1)) == (answered, [(0, ErrorCode.ELECTION_NOT_NEEDED),
                                                         (1, ErrorCode.ELECTION_NOT_NEEDED)]), v

def test_reassignments(one_node):
    broker, _ = one_node

    async def main() -> dict:
        c = await BrokerConnection("127.0.0.1", broker.port).connect(10)
        out = {}
        for key, partition, replicas in (("to this broker", 0, [1]), ("to another", 0, [2]), ("cancel", 0, None),
                                         ("unknown partition", 9, [1])):
            r = await c.send(apq.AlterPartitionReassignmentsRequest(timeout_ms=10000, topics=[apq.ReassignableTopic(
                name=TOPIC, partitions=[apq.ReassignablePartition(partition_index=partition, replicas=replicas)])]))
            out[key] = (r.error_code, [(p.error_code, p.error_message) for t in r.responses for p in t.partitions])
        r = await c.send(lpq.ListPartitionReassignmentsRequest(timeout_ms=10000, topics=None))
        out["list"] = (r.error_code, r.topics)
        await c.close()
        return out

    assert asyncio.run(main()) == {
        "to this broker": (0, [(0, None)]),
        "to another": (0, [(ErrorCode.INVALID_REPLICA_ASSIGNMENT, NOT_REGISTERED)]),
        "cancel": (0, [(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None)]),
        "unknown partition": (0, [(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {TOPIC}:9.")]),
        "list": (0, []),
    }


@pytest.mark.java
def test_kafka_tools(java, one_node):
    broker, _ = one_node
    elected = jt.run_tool("org.apache.kafka.tools.LeaderElectionCommand", [
        "--bootstrap-server", broker.bootstrap, "--election-type", "PREFERRED", "--topic", TOPIC, "--partition", "0"])
    assert f"Valid replica already elected for partitions {TOPIC}-0" in elected.stdout
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump({"version": 1, "partitions": [{"topic": TOPIC, "partition": 1, "replicas": [1]}]}, f)
        f.flush()
        tool = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
        started = jt.run_tool(tool, ["--bootstrap-server", broker.bootstrap, "--reassignment-json-file", f.name,
                                     "--execute"])
        assert f"Successfully started partition reassignment for {TOPIC}-1" in started.stdout
        verified = jt.run_tool(tool, ["--bootstrap-server", broker.bootstrap, "--reassignment-json-file", f.name,
                                      "--verify"])
    assert f"Reassignment of partition {TOPIC}-1 is completed." in verified.stdout
