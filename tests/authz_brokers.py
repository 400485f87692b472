"""Brokers with an authorizer for the authorization-answer tests, Rivulet's and (for the
side-by-side tests) Apache Kafka's, laid out alike: a PLAINTEXT listener whose anonymous
principal is a super user (the administrator's) and a SASL_PLAINTEXT listener with PLAIN
users admin and alice. ``setup_topics_and_acls`` gives both the same topics and ACLs."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from rivulet.client.connection import BrokerConnection
from rivulet.protocol.messages import create_acls_request as caq, create_topics_request as ctq
from rivulet.security.client_config import SaslCredentials
from rivulet.testing import BrokerProcess, free_port

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
ALICE = SaslCredentials("PLAIN", "alice", "alice-secret")
ALICE_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="alice-secret";'
AUTHZ = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
         "super.users": "User:admin;User:ANONYMOUS", "sasl.enabled.mechanisms": "PLAIN",
         "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS}
TOPICS = ("secret", "open", "nodelete", "del1", "del2", "del3")
# User:alice may describe ``open``, ``nodelete`` and ``gone-desc`` (which does not exist) and
# describe and delete ``del*``; ``secret`` is not hers at all. (name, pattern type, operation)
# as the wire codes them.
ALICE_ACLS = (("open", 3, 8), ("nodelete", 3, 8), ("gone-desc", 3, 8), ("del", 4, 6), ("del", 4, 8))


@dataclass
class Ports:
    plain: int  # the administrator's
    sasl: int   # alice's


def secured_rivulet(overrides: dict[str, str] | None = None) -> tuple[BrokerProcess, Ports]:
    sasl = free_port()
    b = BrokerProcess({**AUTHZ, "inter.broker.listener.name": "PLAINTEXT", **(overrides or {})})
    b.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{sasl}"
    return b.start(), Ports(b.port, sasl)


def secured_kafka(overrides: dict[str, str] | None = None):  # -> (KafkaReference, Ports), started
    from benchmarks.reference.kafka import TEST_JVM_FLAGS, KafkaReference

    ref = KafkaReference(heap="512m", jvm_flags=TEST_JVM_FLAGS)
    sasl = free_port()
    ref.properties.update({
        **AUTHZ,
        "listeners": f"PLAINTEXT://127.0.0.1:{ref.port},SASL_PLAINTEXT://127.0.0.1:{sasl},"
                     f"CONTROLLER://127.0.0.1:{ref.controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{ref.port},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        **(overrides or {}),
    })
    try:
        ref.start()
    except BaseException:
        ref.cleanup()
        raise
    return ref, Ports(ref.port, sasl)


async def setup_topics_and_acls(port: int) -> dict[str, uuid.UUID]:
    """The topics (one partition each) and alice's ACLs; the topics' ids by name."""
    admin = await BrokerConnection("127.0.0.1", port).connect(10)
    try:
        r = await admin.send(ctq.CreateTopicsRequest(topics=[ctq.CreatableTopic(
            name=n, num_partitions=1, replication_factor=1, assignments=[], configs=[]) for n in TOPICS],
            timeout_ms=15000, validate_only=False))
        assert [t.error_code for t in r.topics] == [0] * len(TOPICS), r
        acls = await admin.send(caq.CreateAclsRequest(creations=[caq.AclCreation(
            resource_type=2, resource_name=n, resource_pattern_type=pt, principal="User:alice", host="*",
            operation=op, permission_type=3) for n, pt, op in ALICE_ACLS]))
        assert [x.error_code for x in acls.results] == [0] * len(ALICE_ACLS), acls
    finally:
        await admin.close()
    return {t.name: t.topic_id for t in r.topics}
