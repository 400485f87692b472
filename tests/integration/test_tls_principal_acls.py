"""The principal of a mutual-TLS connection is what ACLs see: the client certificate's DN
mapped by ssl.principal.mapping.rules. A certificate for CN=app may write where User:app is
allowed and gets TOPIC_AUTHORIZATION_FAILED elsewhere; an ACL on the whole DN (the default
rule) matches a second listener's clients."""

from __future__ import annotations

import uuid

import pytest
from tls_certs import PASSWORD

from rivulet.testing import BrokerProcess, free_port

pytestmark = pytest.mark.integration


def test_acls_apply_to_the_certificate_principal(tls_certs):
    from confluent_kafka import KafkaError, Producer
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        NewTopic,
        ResourcePatternType,
        ResourceType,
    )
    mapped, whole = free_port(), free_port()
    b = BrokerProcess({"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                       "super.users": "User:ANONYMOUS"})  # the plaintext listener administers
    b.overrides.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{b.port},MAPPED://127.0.0.1:{mapped},WHOLE://127.0.0.1:{whole}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,MAPPED:SSL,WHOLE:SSL",
        **tls_certs.broker_ssl_props(client_auth="required"),
        "listener.name.mapped.ssl.principal.mapping.rules": "RULE:^CN=([^,]*),OU=eng.*$/$1/L",
    })
    b.start()
    try:
        allowed, denied = f"ok-{uuid.uuid4().hex[:6]}", f"no-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        for f in admin.create_topics([NewTopic(allowed, 1, 1), NewTopic(denied, 1, 1)]).values():
            f.result(30)
        dn = tls_certs.client.cert_obj.subject.rfc4514_string()
        acls = [AclBinding(ResourceType.TOPIC, allowed, ResourcePatternType.LITERAL, principal, "*",
                           AclOperation.WRITE, AclPermissionType.ALLOW)
                for principal in ("User:app", f"User:{dn}")]
        for f in admin.create_acls(acls).values():
            f.result(30)
        for port in (mapped, whole):
            conf = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SSL",
                    "ssl.ca.location": str(tls_certs.ca.pem), "ssl.certificate.location": str(tls_certs.client.cert),
                    "ssl.key.location": str(tls_certs.client.key_enc), "ssl.key.password": PASSWORD,
                    "message.timeout.ms": 10000}
            results: dict[str, object] = {}
            p = Producer(conf)
            for topic in (allowed, denied):
                p.produce(topic, b"x", on_delivery=lambda err, msg, t=topic: results.__setitem__(t, err))
            p.flush(30)
            assert results[allowed] is None, (port, results)
            assert results[denied] is not None and results[denied].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        b.cleanup()
