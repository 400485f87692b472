"""The broker's schema registry on https with authentication and authorization, driven by
confluent-kafka's SchemaRegistryClient: HTTP basic against the broker's PLAIN and SCRAM users
(basic.auth.user.info), a client certificate's principal (ssl.certificate.location), and the
broker's topic ACLs guarding each topic's subjects, with Confluent's 401 and 403 bodies."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType,
                                   ResourceType)
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from conftest import wait_for_registry
from rivulet.testing import BrokerProcess, free_port

pytestmark = pytest.mark.integration

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
V1 = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]}
V2 = {**V1, "fields": V1["fields"] + [{"name": "n", "type": "int", "default": 0}]}


@pytest.fixture(scope="module")
def secured(tls_certs):
    """(url, the CA's file, the broker): https, basic auth, certificates requested, ACLs on."""
    port, sasl = free_port(), free_port()
    b = BrokerProcess({
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        # The PLAINTEXT listener (the registry's own client, and the tests' administrator) is ANONYMOUS.
        "super.users": "User:admin;User:ANONYMOUS",
        "sasl.enabled.mechanisms": "PLAIN", "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "schema.registry.listeners": f"https://localhost:{port}",
        "schema.registry.authentication.method": "BASIC",
        "schema.registry.ssl.client.authentication": "REQUESTED",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]*),OU=eng.*$/$1/L",
        **tls_certs.broker_ssl_props()})
    b.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{sasl}"
    b.start()
    url, ca = f"https://localhost:{port}", str(tls_certs.ca.pem)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
    for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "sam", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"sam-secret")]).values():
        f.result(30)
    acls = [AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, principal, "*", op,
                       AclPermissionType.ALLOW)
            for principal, op in (("User:alice", AclOperation.WRITE), ("User:app", AclOperation.READ))]
    for f in admin.create_acls(acls).values():
        f.result(30)
    wait_for_registry(url, verify=ca, auth=("admin", "admin-secret"))
    yield url, ca, b
    b.cleanup()


def client(url: str, ca: str, **conf: str) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": url, "ssl.ca.location": ca, **conf})


def refused(fn, *args) -> tuple[int, int]:
    with pytest.raises(SchemaRegistryError) as e:
        fn(*args)
    return e.value.http_status_code, e.value.error_code


def test_basic_auth_and_subject_acls(secured):
    url, ca, _ = secured
    admin = client(url, ca, **{"basic.auth.user.info": "admin:admin-secret"})
    alice = client(url, ca, **{"basic.auth.user.info": "alice:alice-secret"})
    secret = admin.register_schema("secret-value", Schema(json.dumps({**V1, "name": "Secret"}), "AVRO"))

    # alice may WRITE topic orders: register and read its subjects, nothing else.
    first = alice.register_schema("orders-value", Schema(json.dumps(V1), "AVRO"))
    alice.register_schema("orders-value", Schema(json.dumps(V2), "AVRO"))
    assert alice.get_latest_version("orders-value").version == 2
    assert alice.get_schema(first).schema_str is not None
    assert alice.get_subjects() == ["orders-value"]  # secret-value is left out
    assert refused(alice.get_latest_version, "secret-value") == (403, 40301)
    assert refused(alice.get_schema, secret) == (403, 40301)
    assert refused(alice.delete_subject, "orders-value") == (403, 40301)  # needs DELETE
    assert refused(alice.set_compatibility, "orders-value", "NONE") == (403, 40301)  # needs ALTER_CONFIGS
    assert refused(alice.set_compatibility, None, "NONE") == (403, 40301)  # the registry's: the cluster's
    assert refused(alice.register_schema, "other-value", Schema(json.dumps(V1), "AVRO")) == (403, 40301)
    assert sorted(admin.get_subjects()) == ["orders-value", "secret-value"]

    # Rivulet's own client (the Spark source's, the console's) with the credentials in its URL.
    import ssl
    from rivulet.registry.client import RegistryClient
    own = RegistryClient(url.replace("https://", "https://alice:alice-secret@"),
                         ssl_context=ssl.create_default_context(cafile=ca))
    assert own.subjects() == ["orders-value"] and own.latest("orders-value").schema_id == first + 1

    # The body is Confluent's.
    r = httpx.get(f"{url}/subjects/secret-value/versions", verify=ca, auth=("alice", "alice-secret"))
    assert (r.status_code, r.json()) == (403, {"error_code": 40301, "message": "User alice is denied operation "
                                                "Describe on Subject: secret-value"})


def test_unauthenticated_and_wrong_passwords_get_401(secured):
    url, ca, _ = secured
    for conf in ({}, {"basic.auth.user.info": "alice:wrong"}, {"basic.auth.user.info": "nobody:x"},
                 {"basic.auth.user.info": "sam:wrong"}):
        assert refused(client(url, ca, **conf).get_subjects) == (401, 40101), conf
    r = httpx.get(f"{url}/subjects", verify=ca)
    assert r.status_code == 401 and r.json()["error_code"] == 40101
    assert r.headers["WWW-Authenticate"].startswith("Basic")


def test_scram_users_authenticate_and_need_acls_too(secured):
    url, ca, _ = secured
    sam = client(url, ca, **{"basic.auth.user.info": "sam:sam-secret"})
    assert sam.get_subjects() == []  # authenticated, and reads nothing
    assert refused(sam.get_latest_version, "orders-value") == (403, 40301)


def test_client_certificate_principal(secured, tls_certs):
    url, ca, _ = secured
    subject = "orders-value"
    client(url, ca, **{"basic.auth.user.info": "alice:alice-secret"}).register_schema(
        subject, Schema(json.dumps(V1), "AVRO"))
    app = client(url, ca, **{"ssl.certificate.location": str(tls_certs.client.cert),
                             "ssl.key.location": str(tls_certs.client.key)})
    # User:app may READ topic orders (which implies DESCRIBE): it reads the subject, and may not write it.
    assert app.get_latest_version(subject).subject == subject
    assert refused(app.register_schema, subject, Schema(json.dumps({**V2, "name": f"X{uuid.uuid4().hex[:4]}"}),
                                                        "AVRO")) == (403, 40301)
