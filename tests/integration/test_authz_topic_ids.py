"""Authorization answers that name what was asked, with an authorizer and SASL/PLAIN users:
a topic asked for by name with an all-zero topic id beside it (Metadata v10+, DeleteTopics
v6) is asked for by name, and its TOPIC_AUTHORIZATION_FAILED carries the name, so that the
client can tell which topic was refused; ACL filters with a principal that is
not ``Type:name`` match literally. The answers asserted here are Kafka 4.3.1's
(tests/integration/test_authz_answers_kafka.py compares the two brokers side by side)."""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path

import pytest
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
from rivulet.protocol.messages import delete_topics_request as dtq, metadata_request as mq, metadata_response as mr
from rivulet.protocol.schema import ZERO_UUID

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from authz_brokers import ALICE, ALICE_ACLS, secured_rivulet, setup_topics_and_acls  # noqa: E402

pytestmark = pytest.mark.integration

RANDOM_ID = uuid.UUID("11111111-2222-3333-4444-555555555555")
AUTH_FAILED = "Topic authorization failed."


@pytest.fixture(scope="module")
def secured():
    b, ports = secured_rivulet()
    try:
        yield b, ports.sasl, asyncio.run(setup_topics_and_acls(ports.plain))
    finally:
        b.cleanup()


def _topics(r: mr.MetadataResponse) -> list[tuple]:
    return sorted((t.name or "", str(t.topic_id), t.error_code, len(t.partitions)) for t in r.topics)


def test_metadata_names_the_refused_topic_asked_by_name(secured):
    _, sasl, ids = secured

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


def test_delete_topics_by_name_and_by_id(secured):
    _, sasl, ids = secured

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
    assert len(admin.describe_acls(_acl_filter("User:alice")).result(30)) == len(ALICE_ACLS)  # none deleted
    f = _acl_filter("User:*")
    assert admin.delete_acls([f])[f].result(30) == [everyone]
