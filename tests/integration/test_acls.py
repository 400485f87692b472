"""CreateAcls, DescribeAcls and DeleteAcls on a real broker through Kafka's own clients'
admin APIs: SECURITY_DISABLED without an authorizer, validation errors, and ACLs kept across
a restart."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType as KpResourceType,
)
from kafka.errors import SecurityDisabledError

pytestmark = pytest.mark.integration

AUTHZ = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
         "allow.everyone.if.no.acl.found": "true"}


def binding(name: str, op: AclOperation = AclOperation.READ, pt: ResourcePatternType = ResourcePatternType.LITERAL,
            principal: str = "User:alice") -> AclBinding:
    return AclBinding(ResourceType.TOPIC, name, pt, principal, "*", op, AclPermissionType.ALLOW)


EVERYTHING = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                              AclPermissionType.ANY)


def test_security_disabled_without_authorizer(broker_factory):
    broker = broker_factory()
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        with pytest.raises(SecurityDisabledError):
            kp.describe_acls(ACLFilter(principal=None, host=None, operation=ACLOperation.ANY,
                                       permission_type=ACLPermissionType.ANY,
                                       resource_pattern=ResourcePatternFilter(KpResourceType.ANY, None,
                                                                              ACLResourcePatternType.ANY)))
    finally:
        kp.close()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    with pytest.raises(KafkaException) as e:
        admin.create_acls([binding("t")])[binding("t")].result(30)
    assert e.value.args[0].name() == "SECURITY_DISABLED"


def test_create_describe_delete_and_restart(broker_factory):
    broker = broker_factory(AUTHZ)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    made = [binding("orders"), binding("pay-", AclOperation.WRITE, ResourcePatternType.PREFIXED),
            binding("orders", AclOperation.DESCRIBE, principal="User:bob")]
    for f in admin.create_acls(made).values():
        f.result(30)
    assert set(admin.describe_acls(EVERYTHING).result(30)) == set(made)
    only_bob = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, "User:bob", None,
                                AclOperation.ANY, AclPermissionType.ANY)
    assert admin.describe_acls(only_bob).result(30) == [made[2]]
    match = AclBindingFilter(ResourceType.TOPIC, "pay-eu", ResourcePatternType.MATCH, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    assert admin.describe_acls(match).result(30) == [made[1]]

    broker.restart()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert set(admin.describe_acls(EVERYTHING).result(30)) == set(made)
    deleted = admin.delete_acls([only_bob])[only_bob].result(30)
    assert deleted == [made[2]]
    assert set(admin.describe_acls(EVERYTHING).result(30)) == set(made[:2])


def test_invalid_bindings_refused(broker_factory):
    admin = AdminClient({"bootstrap.servers": broker_factory(AUTHZ).bootstrap})
    bad = AclBinding(ResourceType.BROKER, "not-the-cluster", ResourcePatternType.LITERAL, "User:a", "*",
                     AclOperation.ALTER, AclPermissionType.ALLOW)
    with pytest.raises(KafkaException) as e:
        admin.create_acls([bad])[bad].result(30)
    assert e.value.args[0].name() == "INVALID_REQUEST"
    assert admin.describe_acls(EVERYTHING).result(30) == []


def test_create_acls_accepts_and_refuses_what_kafka_does(broker_factory):
    """As Kafka 4.3 (the broker's checks of the name, then its controller's of the binding): any
    operation on any resource type, a principal that only needs its colon (User: and :bob are
    principals) and any host are accepted; a principal without a colon and an empty resource
    name are refused with Kafka's messages."""
    admin = AdminClient({"bootstrap.servers": broker_factory(AUTHZ).bootstrap})

    def acl(name: str, principal: str = "User:a", host: str = "*", op: AclOperation = AclOperation.READ,
            rt: ResourceType = ResourceType.TOPIC) -> AclBinding:
        return AclBinding(rt, name, ResourcePatternType.LITERAL, principal, host, op, AclPermissionType.ALLOW)

    accepted = [acl("g", op=AclOperation.WRITE, rt=ResourceType.GROUP), acl("t", principal="User:"),
                acl("t", principal=":bob"), acl("t", host="")]
    for binding, future in admin.create_acls(accepted).items():
        assert future.result(30) is None, binding
    assert set(admin.describe_acls(EVERYTHING).result(30)) == set(accepted)
    refused = {acl("t", principal="alice"): "Could not parse principal from `alice` (no colon is present "
               "separating the principal type from the principal name)",
               acl(""): "Invalid empty resource name"}
    for binding, future in admin.create_acls(list(refused)).items():
        with pytest.raises(KafkaException) as e:
            future.result(30)
        assert (e.value.args[0].name(), e.value.args[0].str()) == ("INVALID_REQUEST", refused[binding])
    assert set(admin.describe_acls(EVERYTHING).result(30)) == set(accepted)


def _rivulet(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rivulet", *args], capture_output=True, text=True, timeout=60)


def test_cli_add_list_remove(broker_factory):
    broker = broker_factory(AUTHZ)
    b = ["-b", broker.bootstrap]
    r = _rivulet("acls", "add", *b, "--allow-principal", "User:alice", "--operation", "read",
                 "--operation", "describe", "--topic", "orders")
    assert r.returncode == 0, r.stderr
    r = _rivulet("acls", "add", *b, "--allow-principal", "User:app", "--consumer", "--topic", "pay-",
                 "--group", "app", "--resource-pattern-type", "prefixed")
    assert r.returncode == 0, r.stderr
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert set(admin.describe_acls(EVERYTHING).result(30)) == {
        binding("orders"), binding("orders", AclOperation.DESCRIBE),
        binding("pay-", AclOperation.READ, ResourcePatternType.PREFIXED, "User:app"),
        binding("pay-", AclOperation.DESCRIBE, ResourcePatternType.PREFIXED, "User:app"),
        AclBinding(ResourceType.GROUP, "app", ResourcePatternType.PREFIXED, "User:app", "*", AclOperation.READ,
                   AclPermissionType.ALLOW)}
    listed = _rivulet("acls", "list", *b, "--principal", "User:alice")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.strip().splitlines()
    assert lines[0].split() == ["PRINCIPAL", "HOST", "RESOURCE-TYPE", "RESOURCE-NAME", "PATTERN", "OPERATION",
                                "PERMISSION"]
    assert [line.split() for line in lines[1:]] == [
        ["User:alice", "*", "TOPIC", "orders", "LITERAL", "READ", "ALLOW"],
        ["User:alice", "*", "TOPIC", "orders", "LITERAL", "DESCRIBE", "ALLOW"]]
    as_json = json.loads(_rivulet("acls", "list", *b, "--principal", "User:alice", "--format", "json").stdout)
    assert as_json == [{"principal": "User:alice", "host": "*", "resource_type": "TOPIC", "resource_name": "orders",
                        "pattern_type": "LITERAL", "operation": op, "permission": "ALLOW"}
                       for op in ("READ", "DESCRIBE")]
    r = _rivulet("acls", "remove", *b, "--principal", "User:app")
    assert r.returncode == 0 and "Removed 3 ACL(s)" in r.stdout, r.stdout + r.stderr
    assert len(admin.describe_acls(EVERYTHING).result(30)) == 2
    refused = _rivulet("acls", "add", *b, "--allow-principal", "User:x", "--operation", "read", "--cluster")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "ResourceType Cluster only supports operations" in refused.stderr, refused.stderr


def test_kafka_python_admin(broker_factory):
    broker = broker_factory(AUTHZ)
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        acl = ACL("User:bob", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW,
                  ResourcePattern(KpResourceType.TOPIC, "events"))
        result = kp.create_acls([acl])
        assert result["failed"] == [] and len(result["succeeded"]) == 1
        every = ACLFilter(principal=None, host=None, operation=ACLOperation.ANY, permission_type=ACLPermissionType.ANY,
                          resource_pattern=ResourcePatternFilter(KpResourceType.ANY, None, ACLResourcePatternType.ANY))
        found, error = kp.describe_acls(every)
        assert [(a.principal, a.operation, a.resource_pattern.resource_name) for a in found] == [
            ("User:bob", ACLOperation.WRITE, "events")]
        deleted = kp.delete_acls([every])
        assert len(deleted[0][1]) == 1
        assert kp.describe_acls(every)[0] == []
    finally:
        kp.close()
