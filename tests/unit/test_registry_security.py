"""The schema registry's authentication and its mapping of subjects and routes onto the broker's
topic and cluster ACLs (rivulet.registry.security), and the SCRAM password check it uses."""

from __future__ import annotations

import base64

import pytest

from rivulet.registry.errors import RestError
from rivulet.registry.security import (Caller, RegistryAuthenticator, SubjectAuthorizer, required,
                                       subject_topic)
from rivulet.security.acls import AclOperation as Op
from rivulet.security.acls import ResourceType
from rivulet.security.principal import KafkaPrincipal
from rivulet.server.scram import ScramCredentials
from rivulet.security.scram import SCRAM_SHA_512, ScramCredential

pytestmark = pytest.mark.fast


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_subjects_are_guarded_by_their_topic():
    assert subject_topic("orders-value") == "orders"
    assert subject_topic("orders-key") == "orders"
    assert subject_topic("com.acme.Order") == "com.acme.Order"
    assert subject_topic("-value") == "-value"


@pytest.mark.parametrize("rule,method,need", [
    ("/subjects/<subject>/versions", "POST", (Op.WRITE, True)),
    ("/subjects/<subject>/versions", "GET", (Op.DESCRIBE, True)),
    ("/subjects/<subject>", "POST", (Op.DESCRIBE, True)),  # a look-up
    ("/subjects/<subject>/versions/<version>", "DELETE", (Op.DELETE, True)),
    ("/subjects/<subject>", "DELETE", (Op.DELETE, True)),
    ("/compatibility/subjects/<subject>/versions/<version>", "POST", (Op.DESCRIBE, True)),
    ("/config/<subject>", "PUT", (Op.ALTER_CONFIGS, True)),
    ("/config/<subject>", "GET", (Op.DESCRIBE_CONFIGS, True)),
    ("/mode/<subject>", "DELETE", (Op.ALTER_CONFIGS, True)),
    ("/config", "PUT", (Op.ALTER_CONFIGS, False)),
    ("/mode", "GET", (Op.DESCRIBE_CONFIGS, False)),
    ("/subjects", "GET", None),  # filtered
    ("/schemas/ids/<int:schema_id>", "GET", None),  # by the subjects that use it
    ("/schemas/types", "GET", None),
])
def test_routes_need_operations(rule, method, need):
    assert required(rule, method) == need


def test_authorizer_asks_about_the_topic_or_the_cluster():
    asked = []

    def authorize(principal, host, op, resource_type, name):
        asked.append((str(principal), host, op, resource_type, name))
        return name == "orders"
    authz = SubjectAuthorizer(authorize)
    alice = Caller(KafkaPrincipal("User", "alice"), "10.0.0.1")
    authz.check(alice, Op.WRITE, "orders-value")
    with pytest.raises(RestError) as e:
        authz.check(alice, Op.ALTER_CONFIGS, None)
    assert (e.value.status, e.value.error_code) == (403, 40301)
    assert e.value.message == "User alice is denied operation AlterConfigs on the registry"
    assert asked == [("User:alice", "10.0.0.1", Op.WRITE, ResourceType.TOPIC, "orders"),
                     ("User:alice", "10.0.0.1", Op.ALTER_CONFIGS, ResourceType.CLUSTER, "kafka-cluster")]
    assert authz.readable(alice, ["orders-key", "secret-value", "orders-value"]) == {"orders-key", "orders-value"}


def test_authentication():
    auth = RegistryAuthenticator(lambda u, p: (u, p) == ("alice", "pw"), lambda dn: KafkaPrincipal("User", dn[3:]))
    assert auth.caller(basic("alice", "pw"), None, "h").principal == KafkaPrincipal("User", "alice")
    assert auth.caller(None, "CN=app", "h").principal == KafkaPrincipal("User", "app")
    for header in (basic("alice", "bad"), "Basic !!!", "Bearer x", basic("", "pw"), None):
        with pytest.raises(RestError) as e:
            auth.caller(header, None, "h")
        assert (e.value.status, e.value.error_code) == (401, 40101), header
    # Without basic authentication, an Authorization header is not looked at.
    assert RegistryAuthenticator().caller(basic("x", "y"), None, "h").principal == KafkaPrincipal.ANONYMOUS


def test_scram_passwords_verify_against_stored_credentials():
    creds = ScramCredentials()
    creds.set_user("sue", {"SCRAM-SHA-512": ScramCredential.from_password(SCRAM_SHA_512, "sue-secret", 4096).to_text()})
    assert creds.verify_password("sue", "sue-secret")
    assert not creds.verify_password("sue", "sue-secreT")
    assert not creds.verify_password("nobody", "sue-secret")
    assert creds.verify_password("sue", "sue-secret")  # remembered
    # A new password replaces the credential: the old one is right no more.
    creds.set_user("sue", {"SCRAM-SHA-512": ScramCredential.from_password(SCRAM_SHA_512, "new", 4096).to_text()})
    assert not creds.verify_password("sue", "sue-secret")
    assert creds.verify_password("sue", "new")


def test_registry_client_takes_credentials_from_its_url():
    from rivulet.registry.client import RegistryClient
    c = RegistryClient("https://alice:s%40cret@registry.example:8081/")
    assert c.url == "https://registry.example:8081"  # the credentials are sent, not shown
