"""ACLs in cluster mode: kept in ZooKeeper as Kafka's ZooKeeper-mode authorizer keeps them
(/kafka-acl/<ResourceType>/<name>, /kafka-acl-extended/prefixed/..., change notifications under
/kafka-acl-changes and /kafka-acl-extended-changes), so that an ACL created through one broker
is enforced by every broker, and a broker that starts later reads them all."""

from __future__ import annotations

import asyncio
import json

import pytest
from confluent_kafka import admin as ck

from cluster import ZkCluster, eventually
from rivulet.client.connection import BrokerConnection
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages import list_offsets_request as loq

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

AUTHZ = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
         "allow.everyone.if.no.acl.found": "true"}
EVERYTHING = ck.AclBindingFilter(ck.ResourceType.ANY, None, ck.ResourcePatternType.ANY, None, None,
                                 ck.AclOperation.ANY, ck.AclPermissionType.ANY)
DENY_SECRET = ck.AclBinding(ck.ResourceType.TOPIC, "secret", ck.ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
                            ck.AclOperation.READ, ck.AclPermissionType.DENY)
PAY = ck.AclBinding(ck.ResourceType.TOPIC, "pay-", ck.ResourcePatternType.PREFIXED, "User:alice", "*",
                    ck.AclOperation.WRITE, ck.AclPermissionType.ALLOW)


def list_offsets_error(port: int, topic: str) -> str:
    async def ask() -> str:
        conn = await BrokerConnection("127.0.0.1", port).connect(10)
        try:
            r = await conn.send(loq.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
                loq.ListOffsetsTopic(name=topic, partitions=[loq.ListOffsetsPartition(
                    partition_index=0, current_leader_epoch=-1, timestamp=-1)])]))
            return ErrorCode(r.topics[0].partitions[0].error_code).name
        finally:
            await conn.close()
    return asyncio.run(ask())


def test_acls_in_zookeeper_followed_by_every_broker(zk_connect):
    cluster = ZkCluster(zk_connect)
    try:
        b1, b2 = cluster.start(1, **AUTHZ), cluster.start(2, **AUTHZ)
        cluster.wait_for_brokers([1, 2])
        admin1 = ck.AdminClient({"bootstrap.servers": b1.bootstrap})
        admin2 = ck.AdminClient({"bootstrap.servers": b2.bootstrap})
        for f in admin1.create_acls([DENY_SECRET, PAY]).values():
            f.result(30)

        # Kafka's znodes and documents
        assert cluster.json("/kafka-acl/Topic/secret") == {"version": 1, "acls": [
            {"principal": "User:ANONYMOUS", "permissionType": "Deny", "operation": "Read", "host": "*"}]}
        assert cluster.json("/kafka-acl-extended/prefixed/Topic/pay-")["acls"] == [
            {"principal": "User:alice", "permissionType": "Allow", "operation": "Write", "host": "*"}]
        literal = cluster.zk.get_children("/kafka-acl-changes")
        assert [cluster.zk.get(f"/kafka-acl-changes/{c}")[0] for c in literal] == [b"TOPIC:secret"]
        [extended] = cluster.zk.get_children("/kafka-acl-extended-changes")
        assert json.loads(cluster.zk.get(f"/kafka-acl-extended-changes/{extended}")[0]) == {
            "version": 1, "resourceType": "TOPIC", "name": "pay-", "patternType": "PREFIXED"}

        # the other broker follows the notifications and enforces them
        # (librdkafka sends DescribeAcls to any broker it knows, so broker 2's own view is shown
        # by what it enforces)
        eventually(lambda: set(admin2.describe_acls(EVERYTHING).result(30)) == {DENY_SECRET, PAY}, 30,
                   "the cluster to show the ACLs")
        eventually(lambda: list_offsets_error(b2.port, "secret") == "TOPIC_AUTHORIZATION_FAILED", 30,
                   "broker 2 to enforce the deny")
        assert list_offsets_error(b2.port, "open") != "TOPIC_AUTHORIZATION_FAILED"

        # a broker started later reads them at start-up
        b3 = cluster.start(3, **AUTHZ)
        cluster.wait_for_brokers([1, 2, 3])
        admin3 = ck.AdminClient({"bootstrap.servers": b3.bootstrap})
        assert set(admin3.describe_acls(EVERYTHING).result(30)) == {DENY_SECRET, PAY}

        # deleting through another broker removes the znode and reaches the first
        deny_filter = ck.AclBindingFilter(ck.ResourceType.TOPIC, "secret", ck.ResourcePatternType.LITERAL, None, None,
                                       ck.AclOperation.ANY, ck.AclPermissionType.DENY)
        assert admin2.delete_acls([deny_filter])[deny_filter].result(30) == [DENY_SECRET]
        assert not cluster.zk.exists("/kafka-acl/Topic/secret")
        eventually(lambda: admin1.describe_acls(EVERYTHING).result(30) == [PAY], 30, "broker 1 to see the deletion")
        eventually(lambda: list_offsets_error(b1.port, "secret") != "TOPIC_AUTHORIZATION_FAILED", 30,
                   "broker 1 to stop denying")
    finally:
        cluster.close()
