"""Authorization answers that name what was asked, with an authorizer and SASL/PLAIN users:
a topic asked for by name with an all-zero topic id beside it (Metadata v10+, DeleteTopics
v6) is asked for by name, and its TOPIC_AUTHORIZATION_FAILED carries the name, so a real
client fails at once instead of waiting out its timeout; ACL filters with a principal that is
not ``Type:name`` match literally. The answers asserted here are Kafka 4.3.1's
(tests/integration/test_authz_answers_kafka.py compares the two brokers side by side)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from rivulet.client.connection import BrokerConnection
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages import (
    create_acls_request as caq,
    create_topics_request as ctq,
    delete_topics_request as dtq,
    metadata_request as mq,
)
from rivulet.protocol.schema import ZERO_UUID
from rivulet.security.client_config import SaslCredentials
from rivulet.testing import BrokerProcess, free_port

pytestmark = pytest.mark.integration

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
ALICE = SaslCredentials("PLAIN", "alice", "alice-secret")
ALICE_CONF = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN", "sasl.username": "alice",
              "sasl.password": "alice-secret"}
TOPICS = ("secret", "open", "nodelete", "del1", "del2")
RANDOM_ID = uuid.UUID("11111111-2222-3333-4444-555555555555")
AUTH_FAILED = "Topic authorization failed."


async def _setup(port: int) -> dict[str, uuid.UUID]:
    """The topics, and User:alice's ACLs: DESCRIBE on ``open`` and ``nodelete``, DESCRIBE and
    DELETE on ``del*``, nothing on ``secret``."""
    admin = await BrokerConnection("127.0.0.1", port).connect(10)
    r = await admin.send(ctq.CreateTopicsRequest(topics=[ctq.CreatableTopic(
        name=n, num_partitions=1, replication_factor=1, assignments=[], configs=[]) for n in TOPICS],
        timeout_ms=15000, validate_only=False))
    assert [t.error_code for t in r.topics] == [0] * len(TOPICS)
    acls = await admin.send(caq.CreateAclsRequest(creations=[caq.AclCreation(
        resource_type=2, resource_name=n, resource_pattern_type=pt, principal="User:alice", host="*",
        operation=op, permission_type=3)
        for n, pt, op in (("open", 3, 8), ("nodelete", 3, 8), ("del", 4, 6), ("del", 4, 8))]))
    assert [x.error_code for x in acls.results] == [0] * 4
    await admin.close()
    return {t.name: t.topic_id for t in r.topics}


@pytest.fixture(scope="module")
def secured():
    """PLAINTEXT for the administrator (its anonymous principal a super user), SASL_PLAINTEXT
    for User:alice."""
    sasl = free_port()
    b = BrokerProcess({"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                       "super.users": "User:admin;User:ANONYMOUS", "sasl.enabled.mechanisms": "PLAIN",
                       "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
                       "inter.broker.listener.name": "PLAINTEXT"})
    b.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{sasl}"
    b.start()
    try:
        ids = asyncio.run(_setup(b.port))
        yield b, sasl, ids
    finally:
        b.cleanup()


def _topics(r: mq.MetadataRequest) -> list[tuple]:
    return sorted(((t.name or "", str(t.topic_id), t.error_code, len(t.partitions)) for t in r.topics))


def test_metadata_names_the_refused_topic_asked_by_name(secured):
    b, sasl, ids = secured

    async def main() -> dict:
        alice = await BrokerConnection("127.0.0.1", sasl, sasl=ALICE).connect(10)
        out = {}
        for key, version, asked in (
                ("by name", 12, [("secret", ZERO_UUID)]), ("by name v10", 10, [("secret", ZERO_UUID)]),
                ("by id", 12, [(None, ids["secret"])]), ("unknown id", 12, [(None, RANDOM_ID)]),
                # once an id is there, Kafka answers by id and drops the names beside it
                ("mixed", 12, [("open", ZERO_UUID), (None, ids["secret"])]),
                ("name and id", 12, [("secret", ids["open"])]),
                ("id at v10", 10, [("open", ids["open"])])):
            r = await alice.send(mq.MetadataRequest(
                topics=[mq.MetadataRequestTopic(name=n, topic_id=i) for n, i in asked],
                allow_auto_topic_creation=False), version=version)
            out[key] = _topics(r)
        await alice.close()
        return out

    got = asyncio.run(main())
    zero, secret, opened = str(ZERO_UUID), str(ids["secret"]), str(ids["open"])
    assert got == {
        "by name": [("secret", zero, ErrorCode.TOPIC_AUTHORIZATION_FAILED, 0)],
        "by name v10": [("secret", zero, ErrorCode.TOPIC_AUTHORIZATION_FAILED, 0)],
        "by id": [("", secret, ErrorCode.TOPIC_AUTHORIZATION_FAILED, 0)],
        "unknown id": [("", str(RANDOM_ID), ErrorCode.UNKNOWN_TOPIC_ID, 0)],
        "mixed": [("", secret, ErrorCode.TOPIC_AUTHORIZATION_FAILED, 0)],
        "name and id": [("open", opened, ErrorCode.NONE, 1)],
        "id at v10": [("open", opened, ErrorCode.INVALID_REQUEST, 0)],
    }


def test_producer_fails_at_once_on_a_topic_it_may_not_describe(secured):
    """librdkafka asks by name with a zero id: without the name in the answer it could not tell
    which topic was refused and held the message until message.timeout.ms."""
    b, sasl, _ = secured
    p = Producer({"bootstrap.servers": f"127.0.0.1:{sasl}", "message.timeout.ms": 60000, **ALICE_CONF})
    errors: list[KafkaError] = []
    p.produce("secret", b"v", on_delivery=lambda err, msg: errors.append(err))
    started = time.monotonic()
    assert p.flush(45) == 0, "the delivery report never came"
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert time.monotonic() - started < 40  # long before message.timeout.ms


def test_delete_topics_by_name_and_by_id(secured):
    b, sasl, ids = secured

    async def main() -> dict:
        alice = await BrokerConnection("127.0.0.1", sasl, sasl=ALICE).connect(10)
        out = {}
        for key, asked in (("secret by name", [("secret", ZERO_UUID)]), ("secret by id", [(None, ids["secret"])]),
                           ("describable by id", [(None, ids["nodelete"])]),
                           ("neither", [(None, ZERO_UUID)]), ("both", [("del1", ids["del1"])]),
                           ("unknown id", [(None, RANDOM_ID)]), ("missing", [("del-missing", ZERO_UUID)]),
                           ("twice", [("del1", ZERO_UUID), ("del1", ZERO_UUID)]),
                           ("deleted", [("del1", ZERO_UUID), (None, ids["del2"])])):
            r = await alice.send(dtq.DeleteTopicsRequest(topics=[dtq.DeleteTopicState(name=n, topic_id=i)
                                                                 for n, i in asked], timeout_ms=15000), version=6)
            out[key] = sorted((t.name or "", str(t.topic_id), t.error_code, t.error_message) for t in r.responses)
        await alice.close()
        return out

    got = asyncio.run(main())
    zero = str(ZERO_UUID)
    assert got == {
        "secret by name": [("secret", zero, ErrorCode.TOPIC_AUTHORIZATION_FAILED, AUTH_FAILED)],
        "secret by id": [("", str(ids["secret"]), ErrorCode.TOPIC_AUTHORIZATION_FAILED, AUTH_FAILED)],
        "describable by id": [("nodelete", str(ids["nodelete"]), ErrorCode.TOPIC_AUTHORIZATION_FAILED, AUTH_FAILED)],
        "neither": [("", zero, ErrorCode.INVALID_REQUEST, "Neither topic name nor id were specified.")],
        "both": [("del1", str(ids["del1"]), ErrorCode.INVALID_REQUEST,
                  "You may not specify both topic name and topic id.")],
        "unknown id": [("", str(RANDOM_ID), ErrorCode.UNKNOWN_TOPIC_ID, "This server does not host this topic ID.")],
        "missing": [("del-missing", zero, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                     "This server does not host this topic-partition.")],
        "twice": [("del1", zero, ErrorCode.INVALID_REQUEST, "Duplicate topic name.")],
        "deleted": [("del1", str(ids["del1"]), 0, None), ("del2", str(ids["del2"]), 0, None)],
    }


def _acl_filter(principal: str | None) -> AclBindingFilter:
    return AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, principal, None, AclOperation.ANY,
                            AclPermissionType.ANY)


def test_acl_filters_match_principals_literally(secured):
    """A principal filter that is not Type:name (``*``, ``alice``) is no error: it matches the
    bindings whose principal is that string, which CreateAcls never stores, so nothing."""
    b, _, _ = secured
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    everyone = AclBinding(ResourceType.TOPIC, "open", ResourcePatternType.LITERAL, "User:*", "*",
                          AclOperation.READ, AclPermissionType.ALLOW)
    admin.create_acls([everyone])[everyone].result(30)
    for principal in ("*", "alice", "User:", ""):
        assert admin.describe_acls(_acl_filter(principal)).result(30) == [], principal
        f = _acl_filter(principal)
        assert admin.delete_acls([f])[f].result(30) == [], principal
    assert admin.describe_acls(_acl_filter("User:*")).result(30) == [everyone]
    assert len(admin.describe_acls(_acl_filter("User:alice")).result(30)) == 4  # nothing was deleted
    f = _acl_filter("User:*")
    assert admin.delete_acls([f])[f].result(30) == [everyone]
