"""DescribeQuorum (API 55) answered by the ZooKeeper-era control plane, as docs/compatibility.md
maps it: ``__cluster_metadata`` partition 0 led by the active controller at the controller
epoch, its high watermark the zxid of the metadata the controller last published, the other
live brokers observers at the offset of the last UpdateMetadata each applied. One node is
its own leader at epoch 0, at the count of its metadata changes."""

from __future__ import annotations

import asyncio

import pytest
from kafka import KafkaAdminClient

from rivulet.admin import AdminClient, NewTopic
from rivulet.client.connection import BrokerConnection
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages import describe_quorum_request as dq
from rivulet.protocol.messages.describe_quorum_response import DescribeQuorumResponse
from tests import java_tools as jt
from tests.cluster import ZkCluster, eventually

pytestmark = [pytest.mark.integration]


def _request(topic: str = "__cluster_metadata", partitions: tuple[int, ...] = (0,)) -> dq.DescribeQuorumRequest:
    return dq.DescribeQuorumRequest(topics=[dq.TopicData(topic_name=topic, partitions=[
        dq.PartitionData(partition_index=p) for p in partitions])])


def _send(port: int, request: dq.DescribeQuorumRequest, version: int = 2) -> DescribeQuorumResponse:
    async def go() -> DescribeQuorumResponse:
        conn = await BrokerConnection("127.0.0.1", port).connect(10)
        try:
            return await conn.send(request, version)
        finally:
            await conn.close()
    return asyncio.run(go())


def test_one_node_leads_its_own_quorum(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        before = admin.describe_metadata_quorum()
        part = before["topics"][0]["partitions"][0]
        assert before["topics"][0]["topic_name"] == "__cluster_metadata" and part["error"] is None
        assert (part["partition_index"], part["leader_id"], part["leader_epoch"]) == (0, 1, 0)
        assert [v["replica_id"] for v in part["current_voters"]] == [1] and part["observers"] == []
        assert part["current_voters"][0]["log_end_offset"] == part["high_watermark"] >= 0
        assert before["nodes"] == [{"node_id": 1, "listeners": [
            {"name": "PLAINTEXT", "host": "127.0.0.1", "port": broker.port}]}]
    finally:
        admin.close()
    # A metadata change moves the offset on.
    assert AdminClient({"bootstrap.servers": broker.bootstrap}).create_topics(
        [NewTopic("quorum-moves", 1, 1)])["quorum-moves"].result(30) is None
    after = _send(broker.port, _request()).topics[0].partitions[0]
    assert after.high_watermark > part["high_watermark"]


def test_a_request_for_another_partition_is_unknown(broker):
    for request in (_request("orders"), _request(partitions=(1,)), _request(partitions=(0, 1))):
        r = _send(broker.port, request)
        assert r.error_code == ErrorCode.NONE
        asked = [(t.topic_name, [p.partition_index for p in t.partitions]) for t in request.topics]
        assert [(t.topic_name, [p.partition_index for p in t.partitions]) for t in r.topics] == asked
        assert {p.error_code for t in r.topics for p in t.partitions} == {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    v0 = _send(broker.port, _request(), version=0)
    assert v0.topics[0].partitions[0].error_code == ErrorCode.NONE and v0.nodes == []


@pytest.mark.cluster
def test_three_brokers_every_one_answers_with_the_controller_as_leader(zk_connect):
    cluster = ZkCluster(zk_connect)
    try:
        for i in (1, 2, 3):
            cluster.start(i)
        cluster.wait_for_brokers([1, 2, 3])
        cid = cluster.controller()
        epoch = int(cluster.zk.get("/controller_epoch")[0])

        def caught_up(port: int) -> bool:
            p = _send(port, _request()).topics[0].partitions[0]
            return p.error_code == ErrorCode.NONE and all(
                o.log_end_offset == p.high_watermark and o.last_caught_up_timestamp > 0 for o in p.observers)
        for b in cluster.brokers.values():
            eventually(lambda b=b: caught_up(b.port), what="every observer at the high watermark")
            p = _send(b.port, _request()).topics[0].partitions[0]
            assert (p.leader_id, p.leader_epoch) == (cid, epoch)
            assert [v.replica_id for v in p.current_voters] == [cid]
            assert sorted(o.replica_id for o in p.observers) == sorted({1, 2, 3} - {cid})
        first = _send(cluster.brokers[1].port, _request())
        hw = first.topics[0].partitions[0].high_watermark
        # a zxid of the ZooKeeper this cluster runs on: no newer than the latest transaction
        cluster.zk.exists("/")  # a read answers with the server's latest zxid
        assert 0 < hw <= cluster.zk.last_zxid
        assert first.nodes[0].node_id == cid and first.nodes[0].listeners[0].port == cluster.brokers[cid].port

        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        assert admin.create_topics([NewTopic("quorum-orders", 2, 3)])["quorum-orders"].result(30) is None
        eventually(lambda: _send(cluster.brokers[1].port, _request()).topics[0].partitions[0].high_watermark > hw,
                   what="the offset moves on with a new topic")

        # Failover: the next controller leads at the next epoch, from a higher offset.
        hw = _send(cluster.brokers[1].port, _request()).topics[0].partitions[0].high_watermark
        cluster.brokers[cid].stop()
        survivor = next(b for i, b in cluster.brokers.items() if i != cid)

        def moved() -> bool:
            p = _send(survivor.port, _request()).topics[0].partitions[0]
            return p.error_code == ErrorCode.NONE and p.leader_id not in (cid, 0) and p.leader_epoch == epoch + 1
        eventually(moved, what="the new controller leads the quorum")
        assert _send(survivor.port, _request()).topics[0].partitions[0].high_watermark > hw
    finally:
        cluster.close()


@pytest.mark.java
@pytest.mark.cluster
def test_kafka_metadata_quorum_tool_describes_the_cluster(zk_connect):
    """Kafka's own kafka-metadata-quorum.sh, through any broker."""
    reason = jt.java_available()
    if reason is not None:
        pytest.skip(reason)
    cluster = ZkCluster(zk_connect)
    try:
        for i in (1, 2, 3):
            cluster.start(i)
        cluster.wait_for_brokers([1, 2, 3])
        cid = cluster.controller()
        other = next(b for i, b in cluster.brokers.items() if i != cid)
        eventually(lambda: all(o.log_end_offset >= 0 for o in _send(other.port, _request()).topics[0]
                               .partitions[0].observers), what="every observer placed")
        tool = "org.apache.kafka.tools.MetadataQuorumCommand"
        status = jt.run_tool(tool, ["--bootstrap-server", other.bootstrap, "describe", "--status"]).stdout
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        assert int(fields["LeaderId"]) == cid
        assert int(fields["LeaderEpoch"]) == int(cluster.zk.get("/controller_epoch")[0])
        assert int(fields["HighWatermark"]) > 0
        assert f'"id": {cid}' in fields["CurrentVoters"] and f"127.0.0.1:{cluster.brokers[cid].port}" in status
        assert all(f'"id": {i}' in fields["CurrentObservers"] for i in {1, 2, 3} - {cid})
        replication = jt.run_tool(tool, ["--bootstrap-server", other.bootstrap, "describe", "--replication"]).stdout
        rows = {int(r.split()[0]): r.split()[-1] for r in replication.splitlines()[1:] if r.strip()}
        assert rows == {i: "Leader" if i == cid else "Observer" for i in (1, 2, 3)}, replication
    finally:
        cluster.close()
