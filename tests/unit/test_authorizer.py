"""The authorizer's decisions (StandardAuthorizer semantics) and ACL binding/filter validation."""

from __future__ import annotations

import pytest

from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.security.acls import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation as Op,
    AclPermissionType as Perm,
    PatternType as PT,
    ResourcePattern,
    ResourceType as RT,
)
from rivulet.security.authorizer import StandardAuthorizer, parse_super_users
from rivulet.security.principal import KafkaPrincipal

pytestmark = pytest.mark.fast

ALICE = KafkaPrincipal.parse("User:alice")
BOB = KafkaPrincipal.parse("User:bob")
HOST = "10.0.0.1"


def acl(rt: RT, name: str, op: Op, perm: Perm = Perm.ALLOW, principal: str = "User:alice",
        host: str = "*", pt: PT = PT.LITERAL) -> AclBinding:
    return AclBinding(ResourcePattern(rt, name, pt), AccessControlEntry(principal, host, op, perm))


def authz(*bindings: AclBinding, **kw: object) -> StandardAuthorizer:
    a = StandardAuthorizer(**kw)  # type: ignore[arg-type]
    for b in bindings:
        a.add(b)
    return a


def test_no_acls_denies_unless_allow_everyone() -> None:
    assert not authz().authorize(ALICE, HOST, Op.READ, RT.TOPIC, "t")
    assert authz(allow_everyone_if_no_acl_found=True).authorize(ALICE, HOST, Op.READ, RT.TOPIC, "t")


def test_allow_everyone_only_where_no_acl_applies() -> None:
    a = authz(acl(RT.TOPIC, "t", Op.READ, principal="User:bob"), allow_everyone_if_no_acl_found=True)
    assert not a.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "t")  # an ACL exists on t
    assert a.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "other")


def test_super_user_bypasses_deny() -> None:
    a = authz(acl(RT.TOPIC, "*", Op.ALL, Perm.DENY, principal="User:*"), super_users={"User:alice"})
    assert a.authorize(ALICE, HOST, Op.DELETE, RT.TOPIC, "t")
    assert not a.authorize(BOB, HOST, Op.DELETE, RT.TOPIC, "t")


def test_parse_super_users() -> None:
    assert parse_super_users("User:a; User:b;;") == {"User:a", "User:b"}
    assert parse_super_users(None) == frozenset()


def test_literal_prefixed_and_wildcard_patterns() -> None:
    a = authz(acl(RT.TOPIC, "orders", Op.READ), acl(RT.TOPIC, "pay-", Op.WRITE, pt=PT.PREFIXED),
              acl(RT.GROUP, "*", Op.READ))
    assert a.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "orders")
    assert not a.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "orders2")
    assert a.authorize(ALICE, HOST, Op.WRITE, RT.TOPIC, "pay-eu")
    assert a.authorize(ALICE, HOST, Op.WRITE, RT.TOPIC, "pay-")
    assert not a.authorize(ALICE, HOST, Op.WRITE, RT.TOPIC, "pay")
    assert a.authorize(ALICE, HOST, Op.READ, RT.GROUP, "any-group")
    assert not a.authorize(ALICE, HOST, Op.READ, RT.TRANSACTIONAL_ID, "any-group")


def test_deny_wins_over_allow() -> None:
    a = authz(acl(RT.TOPIC, "*", Op.ALL), acl(RT.TOPIC, "secret", Op.READ, Perm.DENY))
    assert a.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "public")
    assert not a.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "secret")
    assert a.authorize(ALICE, HOST, Op.WRITE, RT.TOPIC, "secret")  # deny was of READ only
    b = authz(acl(RT.TOPIC, "t", Op.READ), acl(RT.TOPIC, "t", Op.ALL, Perm.DENY, pt=PT.PREFIXED))
    assert not b.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "t")


def test_deny_of_read_does_not_deny_describe() -> None:
    a = authz(acl(RT.TOPIC, "t", Op.DESCRIBE), acl(RT.TOPIC, "t", Op.READ, Perm.DENY))
    assert a.authorize(ALICE, HOST, Op.DESCRIBE, RT.TOPIC, "t")


def test_principal_and_wildcard_principal() -> None:
    a = authz(acl(RT.TOPIC, "t", Op.READ, principal="User:*"), acl(RT.TOPIC, "u", Op.READ))
    assert a.authorize(BOB, HOST, Op.READ, RT.TOPIC, "t")
    assert not a.authorize(BOB, HOST, Op.READ, RT.TOPIC, "u")


def test_host_matching() -> None:
    a = authz(acl(RT.TOPIC, "t", Op.READ, host="10.0.0.1"))
    assert a.authorize(ALICE, "10.0.0.1", Op.READ, RT.TOPIC, "t")
    assert not a.authorize(ALICE, "10.0.0.2", Op.READ, RT.TOPIC, "t")
    d = authz(acl(RT.TOPIC, "t", Op.READ), acl(RT.TOPIC, "t", Op.READ, Perm.DENY, host="10.0.0.2"))
    assert d.authorize(ALICE, "10.0.0.1", Op.READ, RT.TOPIC, "t")
    assert not d.authorize(ALICE, "10.0.0.2", Op.READ, RT.TOPIC, "t")


@pytest.mark.parametrize("granted", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE, Op.ALL])
def test_operations_implying_describe(granted: Op) -> None:
    assert authz(acl(RT.TOPIC, "t", granted)).authorize(ALICE, HOST, Op.DESCRIBE, RT.TOPIC, "t")


@pytest.mark.parametrize("granted", [Op.CREATE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS])
def test_operations_not_implying_describe(granted: Op) -> None:
    assert not authz(acl(RT.TOPIC, "t", granted)).authorize(ALICE, HOST, Op.DESCRIBE, RT.TOPIC, "t")


def test_alter_configs_implies_describe_configs_only() -> None:
    a = authz(acl(RT.CLUSTER, "kafka-cluster", Op.ALTER_CONFIGS))
    assert a.authorize(ALICE, HOST, Op.DESCRIBE_CONFIGS, RT.CLUSTER, "kafka-cluster")
    assert not a.authorize(ALICE, HOST, Op.ALTER, RT.CLUSTER, "kafka-cluster")
    assert not authz(acl(RT.TOPIC, "t", Op.READ)).authorize(ALICE, HOST, Op.WRITE, RT.TOPIC, "t")


def test_all_grants_every_operation() -> None:
    a = authz(acl(RT.TOPIC, "t", Op.ALL))
    assert a.authorized_operations(ALICE, HOST, RT.TOPIC, "t") == {
        Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}
    assert authz(acl(RT.GROUP, "g", Op.READ)).authorized_operations(ALICE, HOST, RT.GROUP, "g") == {
        Op.READ, Op.DESCRIBE}


@pytest.mark.parametrize("rt,name,op", [(RT.TRANSACTIONAL_ID, "tx", Op.WRITE), (RT.USER, "User:bob", Op.CREATE_TOKENS),
                                        (RT.DELEGATION_TOKEN, "tok", Op.DESCRIBE)])
def test_other_resource_types(rt: RT, name: str, op: Op) -> None:
    a = authz(acl(rt, name, op))
    assert a.authorize(ALICE, HOST, op, rt, name)
    assert not a.authorize(BOB, HOST, op, rt, name)


def test_authorize_by_resource_type() -> None:
    assert authz(acl(RT.TOPIC, "t", Op.WRITE)).authorize_by_resource_type(ALICE, HOST, Op.WRITE, RT.TOPIC)
    assert not authz(acl(RT.TOPIC, "t", Op.READ)).authorize_by_resource_type(ALICE, HOST, Op.WRITE, RT.TOPIC)
    denied = authz(acl(RT.TOPIC, "t", Op.WRITE), acl(RT.TOPIC, "t", Op.WRITE, Perm.DENY))
    assert not denied.authorize_by_resource_type(ALICE, HOST, Op.WRITE, RT.TOPIC)
    prefixed = authz(acl(RT.TOPIC, "ab", Op.WRITE, pt=PT.PREFIXED), acl(RT.TOPIC, "a", Op.WRITE, Perm.DENY, pt=PT.PREFIXED))
    assert not prefixed.authorize_by_resource_type(ALICE, HOST, Op.WRITE, RT.TOPIC)
    wildcard_deny = authz(acl(RT.TOPIC, "t", Op.WRITE), acl(RT.TOPIC, "*", Op.WRITE, Perm.DENY))
    assert not wildcard_deny.authorize_by_resource_type(ALICE, HOST, Op.WRITE, RT.TOPIC)
    assert authz(super_users={"User:alice"}).authorize_by_resource_type(ALICE, HOST, Op.WRITE, RT.TOPIC)
    assert authz(allow_everyone_if_no_acl_found=True).authorize_by_resource_type(ALICE, HOST, Op.WRITE, RT.TOPIC)


def test_remove_and_replace() -> None:
    b = acl(RT.TOPIC, "t", Op.READ)
    a = authz(b)
    a.remove(b)
    assert a.bindings() == []
    a.replace(b.pattern, [b.entry])
    assert a.bindings() == [b]
    a.replace(b.pattern, [])
    assert a.bindings() == []


def test_filters_match_as_kafka() -> None:
    lit = acl(RT.TOPIC, "orders", Op.READ)
    wild = acl(RT.TOPIC, "*", Op.READ)
    pre = acl(RT.TOPIC, "ord", Op.READ, pt=PT.PREFIXED)
    other = acl(RT.GROUP, "orders", Op.READ, principal="User:bob", host="1.2.3.4")
    a = authz(lit, wild, pre, other)
    assert set(a.matching(AclBindingFilter())) == {lit, wild, pre, other}
    assert set(a.matching(AclBindingFilter(RT.TOPIC, "orders", PT.MATCH))) == {lit, wild, pre}
    assert set(a.matching(AclBindingFilter(RT.TOPIC, "orders", PT.ANY))) == {lit}
    assert set(a.matching(AclBindingFilter(RT.TOPIC, "ord", PT.PREFIXED))) == {pre}
    assert set(a.matching(AclBindingFilter(RT.TOPIC, None, PT.LITERAL))) == {lit, wild}
    assert set(a.matching(AclBindingFilter(principal="User:bob"))) == {other}
    assert set(a.matching(AclBindingFilter(host="1.2.3.4"))) == {other}
    assert set(a.matching(AclBindingFilter(operation=Op.WRITE))) == set()
    assert set(a.matching(AclBindingFilter(permission_type=Perm.DENY))) == set()


@pytest.mark.parametrize("binding,message", [
    # Kafka 4.3's order: the broker checks the name, then its controller the binding
    (acl(RT.CLUSTER, "other", Op.ANY), "The only valid name for the CLUSTER resource is kafka-cluster"),
    (acl(RT.ANY, "", Op.READ), "Invalid empty resource name"),
    (acl(RT.ANY, "t", Op.READ), "Invalid resourceType ANY"), (acl(RT.UNKNOWN, "t", Op.READ), "Invalid resourceType UNKNOWN"),
    (acl(RT.TOPIC, "t", Op.READ, pt=PT.MATCH), "Invalid patternType MATCH"),
    (acl(RT.TOPIC, "t", Op.READ, pt=PT.ANY), "Invalid patternType ANY"),
    (acl(RT.TOPIC, "t", Op.ANY), "Invalid operation ANY"),
    (acl(RT.TOPIC, "t", Op.READ, Perm.ANY), "Invalid permissionType ANY"),
    (acl(RT.TOPIC, "t", Op.READ, principal="alice"), "Could not parse principal from `alice` (no colon is present "
     "separating the principal type from the principal name)"),
])
def test_invalid_bindings(binding: AclBinding, message: str) -> None:
    with pytest.raises(ApiError) as e:
        binding.validate()
    assert (e.value.code, e.value.message) == (ErrorCode.INVALID_REQUEST, message)


def test_valid_bindings_and_filters() -> None:
    acl(RT.CLUSTER, "kafka-cluster", Op.ALTER).validate()
    acl(RT.TOPIC, "p", Op.ALL, pt=PT.PREFIXED).validate()
    # Kafka takes any operation on any resource type, any host and any principal with a colon
    acl(RT.CLUSTER, "kafka-cluster", Op.READ).validate()
    acl(RT.GROUP, "g", Op.WRITE).validate()
    acl(RT.TOPIC, "t", Op.READ, principal="User:").validate()
    acl(RT.TOPIC, "t", Op.READ, principal=":bob").validate()
    acl(RT.TOPIC, "t", Op.READ, host="").validate()
    AclBindingFilter(pattern_type=PT.MATCH).validate()
    # Kafka's DeleteAcls checks: codes it does not know; a principal is compared as it is
    AclBindingFilter(principal="nobody").validate()
    AclBindingFilter(principal="*").validate()
    for f, message in ((AclBindingFilter(resource_type=RT.UNKNOWN), "Unknown patternFilter."),
                       (AclBindingFilter(pattern_type=PT.UNKNOWN), "Unknown patternFilter."),
                       (AclBindingFilter(operation=Op.UNKNOWN), "Unknown entryFilter."),
                       (AclBindingFilter(permission_type=Perm.UNKNOWN), "Unknown entryFilter.")):
        with pytest.raises(ApiError) as e:
            f.validate()
        assert (e.value.code, e.value.message) == (ErrorCode.INVALID_REQUEST, message)


def test_a_binding_as_a_filter_matches_it_alone() -> None:
    b = acl(RT.TOPIC, "orders", Op.READ, Perm.DENY, host="10.0.0.1", pt=PT.PREFIXED)
    others = [acl(RT.TOPIC, "orders", Op.READ, Perm.DENY, pt=PT.PREFIXED),
              acl(RT.TOPIC, "orders", Op.READ, Perm.DENY, host="10.0.0.1"),
              acl(RT.TOPIC, "orders", Op.READ, Perm.ALLOW, host="10.0.0.1", pt=PT.PREFIXED),
              acl(RT.TOPIC, "orders", Op.WRITE, Perm.DENY, host="10.0.0.1", pt=PT.PREFIXED),
              acl(RT.TOPIC, "ord", Op.READ, Perm.DENY, host="10.0.0.1", pt=PT.PREFIXED),
              acl(RT.GROUP, "orders", Op.READ, Perm.DENY, host="10.0.0.1", pt=PT.PREFIXED),
              acl(RT.TOPIC, "orders", Op.READ, Perm.DENY, "User:bob", "10.0.0.1", PT.PREFIXED)]
    assert set(authz(b, *others).matching(b.to_filter())) == {b}
