"""CreateAcls, DescribeAcls and DeleteAcls on a real broker through Kafka's own clients'
admin APIs: SECURITY_DISABLED without an authorizer, validation errors, and ACLs kept across
a restart."""

from __future__ import annotations

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
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
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
