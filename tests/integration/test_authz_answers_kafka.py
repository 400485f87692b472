"""Authorization answers side by side with a real Apache Kafka 4.3.1 broker with an authorizer
(StandardAuthorizer, SASL/PLAIN): the same requests to both, the same answers.

- Topics asked for by name (an all-zero topic id beside the name) or by id, by a principal
  that may describe some of them: Metadata (v9-v13), DescribeTopicPartitions, Fetch and
  Produce by name and by id, DeleteTopics v5 and v6 (names, ids, both, neither, duplicates,
  unknown ones), error codes and messages included.
- DescribeAcls and DeleteAcls with every filter field varied alone: unknown codes, the
  UNKNOWN code (Kafka closes the connection), names, principals and hosts that are not what
  a binding holds (``*``, ``alice``, ``User:``, ``""``), MATCH patterns.
- Kafka's own producer (ProducerPerformance) as a principal that may not describe its topic
  fails at once, as against Kafka.
- DescribeQuorum (every version) by a principal without DESCRIBE on the cluster, and for
  partitions other than ``__cluster_metadata``-0 alone: error codes and messages, the shape of the
  answer (its values are the control plane's, docs/compatibility.md).
- On the one node: ElectLeaders, AlterPartitionReassignments and ListPartitionReassignments
  (every version, known and unknown topics and partitions, targets this broker, another one,
  none, twice, cancels); group configs set at broker level, described with their synonyms.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from rivulet.client.connection import BrokerConnection
from rivulet.protocol import records
from rivulet.protocol.messages import (
    alter_partition_reassignments_request as apq,
    create_acls_request as caq,
    create_topics_request as ctq,
    delete_acls_request as daq,
    delete_topics_request as dtq,
    describe_acls_request as dsq,
    describe_configs_request as dcq,
    describe_quorum_request as dqq,
    describe_topic_partitions_request as dtpq,
    elect_leaders_request as elq,
    fetch_request as fq,
    incremental_alter_configs_request as iac,
    list_partition_reassignments_request as lpq,
    metadata_request as mq,
    produce_request as pq,
)
from rivulet.protocol.schema import ZERO_UUID

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import java_tools as jt  # noqa: E402
from kafka_compare import read_until_changed  # noqa: E402
from authz_brokers import ALICE, ALICE_JAAS, Ports, secured_kafka, secured_rivulet, setup_topics_and_acls  # noqa: E402

pytestmark = [pytest.mark.java, pytest.mark.integration]

RANDOM_ID = uuid.UUID("11111111-2222-3333-4444-555555555555")
# Group configs set at broker level, on both brokers (points of comparison for their synonyms).
BROKER_GROUP_CONFIGS = {"group.share.record.lock.duration.ms": "45000", "group.share.delivery.count.limit": "7",
                        "group.consumer.session.timeout.ms": "50000"}


@pytest.fixture(scope="module")
def kafka_secured(java: None):
    """Apache Kafka 4.3.1 with the authorizer; failing to start it fails the tests."""
    ref, ports = secured_kafka(BROKER_GROUP_CONFIGS)
    try:
        yield ports
    finally:
        ref.stop()
        ref.cleanup()


@pytest.fixture(scope="module")
def rivulet_secured():
    b, ports = secured_rivulet({"node.id": "1", **BROKER_GROUP_CONFIGS})
    try:
        yield ports
    finally:
        b.cleanup()


# ------------------------------------------------------------------ topics by name and by id
async def _topic_probe(ports: Ports) -> dict[str, Any]:
    ids = await setup_topics_and_acls(ports.plain)
    label = {v: k for k, v in ids.items()} | {RANDOM_ID: "random", ZERO_UUID: "0"}
    alice = await BrokerConnection("127.0.0.1", ports.sasl, sasl=ALICE).connect(10)
    for _ in range(100):  # Kafka's broker applies the new ACLs a moment after answering CreateAcls
        r = await alice.send(mq.MetadataRequest(topics=[mq.MetadataRequestTopic(name="open")],
                                                allow_auto_topic_creation=False))
        if r.topics[0].error_code == 0:
            break
        await asyncio.sleep(0.1)
    out: dict[str, Any] = {}

    def tid(i: uuid.UUID) -> str:
        return label.get(i, "another id")

    async def metadata(key: str, v: int, asked: list[tuple[str | None, uuid.UUID]], ops: bool = False) -> None:
        r = await alice.send(mq.MetadataRequest(
            topics=[mq.MetadataRequestTopic(name=n, topic_id=i) for n, i in asked], allow_auto_topic_creation=False,
            include_topic_authorized_operations=ops), version=v)
        out[key] = (sorted((t.name or "~", tid(t.topic_id), t.error_code, t.is_internal, len(t.partitions),
                            t.topic_authorized_operations) for t in r.topics),
                    len(r.brokers), r.cluster_id is None, r.controller_id)

    s, o = ids["secret"], ids["open"]
    for v in (9, 10, 12, 13):
        await metadata(f"v{v} by name", v, [("secret", ZERO_UUID), ("open", ZERO_UUID), ("missing", ZERO_UUID)])
    await metadata("by id", 12, [(None, s), (None, o)], ops=True)
    await metadata("unknown id", 12, [(None, RANDOM_ID)])
    await metadata("names beside ids", 12, [("open", ZERO_UUID), (None, s)])
    await metadata("name and id", 12, [("secret", o)])
    await metadata("no name no id", 12, [(None, ZERO_UUID)])
    await metadata("id at v10", 10, [("open", o)])
    await metadata("operations", 13, [("secret", ZERO_UUID), ("open", ZERO_UUID)], ops=True)

    r = await alice.send(dtpq.DescribeTopicPartitionsRequest(
        topics=[dtpq.TopicRequest(name=n) for n in ("secret", "open", "missing")], response_partition_limit=100))
    out["describe partitions"] = sorted((t.name, tid(t.topic_id), t.error_code, len(t.partitions)) for t in r.topics)
    asked = (("secret", s), ("open", o), ("missing", RANDOM_ID))
    for v in (12, 13, 18):
        r = await alice.send(fq.FetchRequest(
            replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
            session_epoch=-1, topics=[fq.FetchTopic(topic=n, topic_id=i, partitions=[fq.FetchPartition(
                partition=0, fetch_offset=0, partition_max_bytes=1 << 20, current_leader_epoch=-1, log_start_offset=-1,
                last_fetched_epoch=-1)]) for n, i in asked], forgotten_topics_data=[], rack_id=""), version=v)
        out[f"fetch v{v}"] = (r.error_code, sorted((t.topic, tid(t.topic_id), [
            (p.partition_index, p.error_code) for p in t.partitions]) for t in r.responses))
    batch = records.encode_batch([records.Record(0, None, None, b"v", [])])
    for v in (12, 13):
        r = await alice.send(pq.ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
            pq.TopicProduceData(name=n, topic_id=i, partition_data=[pq.PartitionProduceData(index=0, records=batch)])
            for n, i in asked]), version=v)
        out[f"produce v{v}"] = sorted((t.name, tid(t.topic_id), [(p.index, p.error_code, p.error_message)
                                                                   for p in t.partition_responses]) for t in r.responses)

    async def delete(key: str, v: int, asked: list[tuple[str | None, uuid.UUID]]) -> None:
        r = await alice.send(dtq.DeleteTopicsRequest(
            topics=[dtq.DeleteTopicState(name=n, topic_id=i) for n, i in asked],
            topic_names=[n or "" for n, _ in asked], timeout_ms=15000), version=v)
        out[key] = sorted((t.name or "~", tid(t.topic_id), t.error_code, t.error_message) for t in r.responses)

    z = ZERO_UUID
    for key, asked in (
            ("secret by name", [("secret", z)]), ("secret by id", [(None, s)]),
            ("describable by name", [("nodelete", z)]), ("describable by id", [(None, ids["nodelete"])]),
            ("neither", [(None, z)]), ("both", [("del1", ids["del1"])]), ("unknown id", [(None, RANDOM_ID)]),
            ("missing, deletable", [("del-missing", z)]), ("missing, describable only", [("gone-desc", z)]),
            ("missing, hidden", [("gone", z)]), ("name twice", [("del3", z), ("del3", z)]),
            ("id twice", [(None, ids["del3"]), (None, ids["del3"])]),
            ("name and its id", [("del3", z), (None, ids["del3"])])):
        await delete(f"delete v6 {key}", 6, asked)
    await delete("delete v5", 5, [("secret", z), ("open", z)])
    await delete("delete v6 deleted", 6, [("del1", z), (None, ids["del2"])])
    await alice.close()
    return out


def test_topic_answers_by_name_and_by_id_as_kafka(kafka_secured, rivulet_secured):
    theirs, ours = asyncio.run(_topic_probe(kafka_secured)), asyncio.run(_topic_probe(rivulet_secured))
    assert theirs["delete v6 deleted"][0][2] == 0  # the probe did what it means to on Kafka
    assert {k: v for k, v in ours.items() if v != theirs[k]} == {}, theirs


def test_java_producer_fails_at_once_on_a_topic_it_may_not_describe(rivulet_secured):
    """Kafka's producer asks by name with a zero id; without the name in the refusal it cannot
    tell which topic was refused and blocks for max.block.ms."""
    with tempfile.NamedTemporaryFile("w", suffix=".properties") as f:
        f.write(f"bootstrap.servers=127.0.0.1:{rivulet_secured.sasl}\nsecurity.protocol=SASL_PLAINTEXT\n"
                f"sasl.mechanism=PLAIN\nsasl.jaas.config={ALICE_JAAS}\nmax.block.ms=120000\n")
        f.flush()
        started = time.monotonic()
        run = jt.run_tool("org.apache.kafka.tools.ProducerPerformance", [
            "--topic", "secret", "--num-records", "1", "--record-size", "10", "--throughput", "-1",
            "--command-config", f.name], check=False, timeout=240)
    assert "Not authorized to access topics: [secret]" in run.stderr, run.stderr[-3000:]
    assert time.monotonic() - started < 110, "the producer waited out max.block.ms"


# ------------------------------------------------------------------ ACL filters
BINDINGS = [  # resource type, name, pattern type, principal, host, operation, permission type
    (2, "t1", 3, "User:alice", "*", 3, 3), (2, "t1", 3, "User:*", "*", 4, 3),
    (2, "pre", 4, "User:bob", "127.0.0.1", 8, 2), (2, "*", 3, "User:alice", "*", 8, 3),
    (3, "g", 3, "User:alice", "*", 2, 3), (4, "kafka-cluster", 3, "User:ops", "*", 7, 3),
    (2, "t1", 3, "Group:devs", "*", 3, 3),
]
EVERYTHING = dict(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
                  host_filter=None, operation=1, permission_type=1)
FILTERS: list[tuple[str, dict[str, Any]]] = [("everything", {})]
for _field, _values in (("resource_type_filter", [0, 2, 3, 4, 5, 7, 99, -1]),
                        ("resource_name_filter", ["", "*", "t1", "t1x", "pre", "prefix", "kafka-cluster"]),
                        ("pattern_type_filter", [0, 2, 3, 4, 99]),
                        ("principal_filter", ["", "*", "User:*", "alice", "User:alice", "User:", ":x", "Group:devs",
                                              "user:alice"]),
                        ("host_filter", ["", "*", "127.0.0.1", "nope"]),
                        ("operation", [0, 2, 3, 8, 99]),
                        ("permission_type", [0, 2, 3, 99])):
    FILTERS += [(f"{_field}={v!r}", {_field: v}) for v in _values]
FILTERS += [("match t1", dict(resource_type_filter=2, resource_name_filter="t1", pattern_type_filter=2)),
            ("match prefix", dict(resource_type_filter=2, resource_name_filter="prefix", pattern_type_filter=2)),
            ("match, no name", dict(pattern_type_filter=2)),
            ("any type, t1 literal", dict(resource_name_filter="t1", pattern_type_filter=3))]


def _creation(b: tuple) -> caq.AclCreation:
    t, n, p, principal, host, op, perm = b
    return caq.AclCreation(resource_type=t, resource_name=n, resource_pattern_type=p, principal=principal,
                           host=host, operation=op, permission_type=perm)


async def _acl_probe(ports: Ports) -> dict[str, Any]:
    """Each filter alone, to DescribeAcls (v1, v3) and to DeleteAcls (the bindings made again
    before each); "closed" where the broker closes the connection."""
    out: dict[str, Any] = {}
    conn: BrokerConnection | None = None

    async def send(req: Any, version: int | None = None) -> Any:
        nonlocal conn
        if conn is None:
            conn = await BrokerConnection("127.0.0.1", ports.plain).connect(10)
        try:
            return await conn.send(req, version=version)
        except Exception:
            await conn.close()
            conn = None
            return None

    async def listing() -> list[tuple]:
        r = await send(dsq.DescribeAclsRequest(**EVERYTHING))
        return sorted((x.resource_type, x.resource_name, x.pattern_type, a.principal, a.host, a.operation,
                       a.permission_type) for x in r.resources for a in x.acls)

    async def listing_becomes(want: list[tuple]) -> None:
        for _ in range(100):  # Kafka's broker applies ACL changes a moment after answering them
            if await listing() == want:
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"the ACLs did not become {want}: {await listing()}")

    async def bindings_made() -> None:
        r = await send(caq.CreateAclsRequest(creations=[_creation(b) for b in BINDINGS]))
        assert [x.error_code for x in r.results] == [0] * len(BINDINGS)
        await listing_becomes(sorted(BINDINGS))

    await send(daq.DeleteAclsRequest(filters=[daq.DeleteAclsFilter(**EVERYTHING)]))
    await listing_becomes([])
    await bindings_made()
    for v in (1, 3):
        for key, change in FILTERS:
            r = await send(dsq.DescribeAclsRequest(**{**EVERYTHING, **change}), version=v)
            out[f"describe v{v} {key}"] = "closed" if r is None else (r.error_code, r.error_message, sorted(
                (x.resource_type, x.resource_name, x.pattern_type, a.principal, a.host, a.operation, a.permission_type)
                for x in r.resources for a in x.acls))
    for key, change in FILTERS:
        await bindings_made()
        r = await send(daq.DeleteAclsRequest(filters=[daq.DeleteAclsFilter(**{**EVERYTHING, **change})]), version=3)
        out[f"delete {key}"] = "closed" if r is None else [(f.error_code, f.error_message, sorted(
            (m.error_code, m.error_message, m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host,
             m.operation, m.permission_type) for m in f.matching_acls)) for f in r.filter_results]
    await bindings_made()
    r = await send(daq.DeleteAclsRequest(filters=[daq.DeleteAclsFilter(**{**EVERYTHING, **change}) for change in (
        {"principal_filter": "User:ops"}, {"operation": 99}, {"principal_filter": "*"})]), version=3)
    out["delete, three filters"] = [(f.error_code, f.error_message, len(f.matching_acls)) for f in r.filter_results]
    r = await send(daq.DeleteAclsRequest(filters=[daq.DeleteAclsFilter(**{**EVERYTHING, **change}) for change in (
        {"principal_filter": "User:bob"}, {"operation": 0})]), version=3)
    out["delete, one filter UNKNOWN"] = "closed" if r is None else "answered"
    if conn is not None:
        await conn.close()
    return out


def test_acl_filters_as_kafka(kafka_secured, rivulet_secured):
    theirs, ours = asyncio.run(_acl_probe(kafka_secured)), asyncio.run(_acl_probe(rivulet_secured))
    assert theirs["describe v3 principal_filter='User:alice'"][2]  # the probe did what it means to on Kafka
    assert {k: v for k, v in ours.items() if v != theirs[k]} == {}, theirs


# ------------------------------------------------------------------ CreateAcls
CREATION = (2, "c", 3, "User:a", "*", 3, 3)
CREATIONS: list[tuple[str, list[tuple]]] = [("valid", [CREATION])]
for _i, _values in ((0, [1, 3, 4, 99]), (1, ["", "kafka-cluster", "a/b"]), (2, [1, 2, 4, 99]),
                    (3, ["", "alice", "User:", ":bob", "user:a"]), (4, ["", "nope"]), (5, [1, 2, 4, 7, 99]),
                    (6, [1, 2, 99])):
    CREATIONS += [(f"field {_i}={v!r}", [(*CREATION[:_i], v, *CREATION[_i + 1:])]) for v in _values]
CREATIONS += [("valid beside ANY", [(2, "beside", 3, "User:a", "*", 3, 3), (2, "c", 3, "User:a", "*", 1, 3)]),
              ("valid beside no colon", [(2, "beside2", 3, "User:a", "*", 3, 3), (2, "c", 3, "alice", "*", 3, 3)]),
              ("CLUSTER misnamed and ANY", [(4, "x", 3, "User:a", "*", 1, 3)])]


async def _create_acls_probe(ports: Ports) -> dict[str, Any]:
    """Each creation (or pair) alone to CreateAcls v3, then what DescribeAcls lists."""
    out: dict[str, Any] = {}
    conn = await BrokerConnection("127.0.0.1", ports.plain).connect(10)
    try:
        await conn.send(daq.DeleteAclsRequest(filters=[daq.DeleteAclsFilter(**EVERYTHING)]))
        for key, creations in CREATIONS:
            r = await conn.send(caq.CreateAclsRequest(creations=[_creation(b) for b in creations]))
            out[key] = [(x.error_code, x.error_message) for x in r.results]
        listed: list[tuple] = []
        for _ in range(100):  # Kafka's broker applies ACL changes a moment after answering them
            r = await conn.send(dsq.DescribeAclsRequest(**EVERYTHING))
            listed = sorted((x.resource_type, x.resource_name, x.pattern_type, a.principal, a.host, a.operation,
                             a.permission_type) for x in r.resources for a in x.acls)
            if len(listed) == sum(r == (0, "") for v in out.values() for r in v):
                break
            await asyncio.sleep(0.1)
        out["listed"] = listed
        await conn.send(daq.DeleteAclsRequest(filters=[daq.DeleteAclsFilter(**EVERYTHING)]))
    finally:
        await conn.close()
    return out


def test_create_acls_as_kafka(kafka_secured, rivulet_secured):
    theirs, ours = asyncio.run(_create_acls_probe(kafka_secured)), asyncio.run(_create_acls_probe(rivulet_secured))
    assert theirs["valid"] == [(0, "")]  # the probe did what it means to on Kafka
    assert {k: v for k, v in ours.items() if v != theirs[k]} == {}, theirs


# ------------------------------------------------------------------ the one node's admin APIs
async def _admin_probe(ports: Ports) -> dict[str, Any]:
    c = await BrokerConnection("127.0.0.1", ports.plain).connect(10)
    out: dict[str, Any] = {}
    r = await c.send(ctq.CreateTopicsRequest(topics=[ctq.CreatableTopic(
        name="admin-t", num_partitions=2, replication_factor=1, assignments=[], configs=[])], timeout_ms=15000,
        validate_only=False))
    assert r.topics[0].error_code == 0
    for v in (0, 1, 2):
        for key, election, asked in (("preferred", 0, [("admin-t", [0, 1, 7]), ("missing", [0])]),
                                     ("unclean", 1, [("admin-t", [0])]), ("all", 0, None), ("all unclean", 1, None),
                                     ("none", 0, [])):
            r = await c.send(elq.ElectLeadersRequest(election_type=election, timeout_ms=5000, topic_partitions=None
                                                     if asked is None else [elq.TopicPartitions(topic=t, partitions=ps)
                                                                            for t, ps in asked]), version=v)
            out[f"elect v{v} {key}"] = (r.error_code, sorted(
                (t.topic, p.partition_id, p.error_code, p.error_message)
                for t in r.replica_election_results for p in t.partition_result))
    targets = [("this broker", "admin-t", 0, [1]), ("another broker", "admin-t", 0, [2]), ("none", "admin-t", 0, []),
               ("twice", "admin-t", 0, [1, 1]), ("cancel", "admin-t", 0, None), ("missing topic", "missing", 0, [1]),
               ("missing partition", "admin-t", 9, [1]), ("more replicas", "admin-t", 1, [1, 2]),
               ("negative", "admin-t", 0, [-1]), ("cancel, missing topic", "missing", 0, None)]
    for v in (0, 1):
        for key, topic, partition, replicas in targets:
            extra = {"allow_replication_factor_change": False} if v == 1 else {}
            r = await c.send(apq.AlterPartitionReassignmentsRequest(timeout_ms=5000, topics=[apq.ReassignableTopic(
                name=topic, partitions=[apq.ReassignablePartition(partition_index=partition, replicas=replicas)])],
                **extra), version=v)
            out[f"reassign v{v} {key}"] = (r.error_code, r.error_message, sorted(
                (t.name, p.partition_index, p.error_code, p.error_message) for t in r.responses for p in t.partitions))
        r = await c.send(apq.AlterPartitionReassignmentsRequest(timeout_ms=5000, topics=[]), version=v)
        out[f"reassign v{v} nothing"] = (r.error_code, r.error_message, r.responses)
    for key, topics in (("all", None), ("some", [("admin-t", [0, 1, 5]), ("missing", [0])]), ("none", [])):
        r = await c.send(lpq.ListPartitionReassignmentsRequest(timeout_ms=5000, topics=None if topics is None else [
            lpq.ListPartitionReassignmentsTopics(name=t, partition_indexes=ps) for t, ps in topics]))
        out[f"list {key}"] = (r.error_code, r.error_message, r.topics)
    await c.close()
    return out


def test_one_node_admin_answers_as_kafka(kafka_secured, rivulet_secured):
    theirs, ours = asyncio.run(_admin_probe(kafka_secured)), asyncio.run(_admin_probe(rivulet_secured))
    assert theirs["reassign v0 this broker"][2] == [("admin-t", 0, 0, None)]  # the probe did what it means to
    assert {k: v for k, v in ours.items() if v != theirs[k]} == {}, theirs


async def _group_config_probe(ports: Ports) -> dict[str, Any]:
    c = await BrokerConnection("127.0.0.1", ports.plain).connect(10)
    out: dict[str, Any] = {}

    async def describe(rtype: int, name: str, keys: list[str] | None, synonyms: bool = True, v: int = 4) -> list:
        r = await c.send(dcq.DescribeConfigsRequest(include_synonyms=synonyms, resources=[dcq.DescribeConfigsResource(
            resource_type=rtype, resource_name=name, configuration_keys=keys)]), version=v)
        res = r.results[0]
        return [res.error_code, res.error_message or None, sorted(
            (e.name, e.value, e.config_source, e.read_only, [(x.name, x.value, x.source) for x in e.synonyms or ()])
            for e in res.configs)]

    out["every group config"] = await describe(32, "cfg-g1", None)
    for v in (1, 4):
        out[f"one, v{v}"] = await describe(32, "cfg-g1", ["share.record.lock.duration.ms"], v=v)
    out["no synonyms"] = await describe(32, "cfg-g1", ["share.record.lock.duration.ms"], synonyms=False)
    r = await c.send(iac.IncrementalAlterConfigsRequest(validate_only=False, resources=[iac.AlterConfigsResource(
        resource_type=32, resource_name="cfg-g2", configs=[iac.AlterableConfig(
            name="share.record.lock.duration.ms", config_operation=0, value="20000")])]))
    assert r.responses[0].error_code == 0
    want = ["share.record.lock.duration.ms", "consumer.session.timeout.ms"]
    out["group's own value"] = await read_until_changed(lambda: describe(32, "cfg-g2", want),
                                                        await describe(32, "cfg-g1", want))
    out["broker"] = await describe(4, "1", sorted(BROKER_GROUP_CONFIGS))
    await c.close()
    return out


def test_broker_level_group_config_synonyms_as_kafka(kafka_secured, rivulet_secured):
    theirs, ours = asyncio.run(_group_config_probe(kafka_secured)), asyncio.run(_group_config_probe(rivulet_secured))
    static = ("group.share.record.lock.duration.ms", "45000", 4)
    assert theirs["one, v4"][2][0][4][0] == static  # Kafka lists the static value first
    assert {k: v for k, v in ours.items() if v != theirs[k]} == {}, theirs


async def _quorum_probe(ports: Ports) -> dict[str, Any]:
    # No topics or ACLs needed (the module's first probe made them): alice holds none on the
    # cluster, so DESCRIBE CLUSTER is refused her either way.
    out: dict[str, Any] = {}
    alice = await BrokerConnection("127.0.0.1", ports.sasl, sasl=ALICE).connect(10)
    admin = await BrokerConnection("127.0.0.1", ports.plain).connect(10)
    asked = {"quorum": [("__cluster_metadata", [0])], "partition 1": [("__cluster_metadata", [1])],
             "two partitions": [("__cluster_metadata", [0, 1])], "another topic": [("orders", [0])],
             "two topics": [("__cluster_metadata", [0]), ("orders", [0])], "nothing": []}
    for v in (0, 1, 2):
        for who, conn in (("alice", alice), ("admin", admin)):
            for key, topics in asked.items():
                r = await conn.send(dqq.DescribeQuorumRequest(topics=[dqq.TopicData(topic_name=t, partitions=[
                    dqq.PartitionData(partition_index=p) for p in ps]) for t, ps in topics]), version=v)
                out[f"v{v} {who} {key}"] = (r.error_code, r.error_message, [(t.topic_name, [(
                    p.partition_index, p.error_code, p.error_message, len(p.current_voters), len(p.observers),
                    p.leader_epoch >= 0, p.high_watermark >= 0) for p in t.partitions]) for t in r.topics],
                    [(n.node_id == r.topics[0].partitions[0].leader_id, len(n.listeners)) for n in r.nodes])
    await alice.close()
    await admin.close()
    return out


def test_describe_quorum_answers_as_kafka(kafka_secured, rivulet_secured):
    theirs, ours = asyncio.run(_quorum_probe(kafka_secured)), asyncio.run(_quorum_probe(rivulet_secured))
    assert theirs["v2 alice quorum"][0] == 31 and theirs["v2 admin quorum"][2][0][1][0][1] == 0  # as meant
    assert {k: v for k, v in ours.items() if v != theirs[k]} == {}, theirs
