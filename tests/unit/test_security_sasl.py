"""Unit tests of the SASL pieces: Kafka's JAAS syntax, the mechanisms' state machines (both
sides), and the broker's per-connection authentication state."""

from __future__ import annotations

import pytest

from rivulet.common.config import ConfigError
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages.sasl_authenticate_request import SaslAuthenticateRequest
from rivulet.protocol.messages.sasl_handshake_request import SaslHandshakeRequest
from rivulet.security.jaas import JaasError, parse_jaas_config, single_entry
from rivulet.security.principal import KafkaPrincipal
from rivulet.security.sasl import AuthenticationFailed, PlainClient, PlainServer, SaslAuthenticationError
from rivulet.server.authentication import sasl_listener_config
from rivulet.server.config import BrokerConfig

pytestmark = pytest.mark.fast

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')


def test_jaas_entry_with_quoted_and_bare_values():
    e = single_entry('org.apache.kafka.common.security.plain.PlainLoginModule Required\n'
                     '  user_a="p;w=\\"x\\"" user_b=bare  unsecuredLoginLifetimeSeconds=\'60\' ;')
    assert e.login_module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert e.flag == "required"
    assert e.options == {"user_a": 'p;w="x"', "user_b": "bare", "unsecuredLoginLifetimeSeconds": "60"}


@pytest.mark.parametrize("text,message", [
    ('Module required a="b"', "must end with ';'"),
    ('Module a="b";', "control flag"),
    ('Module required a;', "name=value"),
    ('Module required a="b', "unterminated"),
])
def test_jaas_errors(text, message):
    with pytest.raises(JaasError, match=message):
        parse_jaas_config(text)


def test_sasl_jaas_config_holds_one_module():
    assert len(parse_jaas_config("A required; B optional x=1;")) == 2
    with pytest.raises(JaasError, match="exactly one login module"):
        single_entry("A required; B optional x=1;")


def _plain_server() -> PlainServer:
    return PlainServer(lambda u, p: (u, p) == ("alice", "alice-secret"))


def test_plain_round_trip():
    server = _plain_server()
    client = PlainClient("alice", "alice-secret")
    assert server.evaluate(client.initial_response()) == b""
    assert server.complete and server.principal() == KafkaPrincipal("User", "alice")


@pytest.mark.parametrize("token,message", [
    (b"\x00alice\x00wrong", "Invalid username or password"),
    (b"\x00alice", "expected 3 tokens, got 2"),
    (b"\x00\x00pw", "username not specified"),
    (b"\x00alice\x00", "password not specified"),
    (b"bob\x00alice\x00alice-secret", "authorization id that is different from username"),
])
def test_plain_failures(token, message):
    server = _plain_server()
    with pytest.raises(SaslAuthenticationError, match=message):
        server.evaluate(token)
    assert not server.complete


def _no_scram(user: str, mechanism: str) -> None:
    return None


def _session(props: dict[str, str] | None = None, now: list[int] | None = None):
    clock = now if now is not None else [1_000]
    cfg = BrokerConfig({"listeners": "SASL_PLAINTEXT://127.0.0.1:9092", "sasl.enabled.mechanisms": "PLAIN",
                        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS, **(props or {})})
    return sasl_listener_config(cfg, "SASL_PLAINTEXT", _no_scram).new_session(("127.0.0.1", 1), lambda: clock[0])


def test_session_handshake_then_authenticate():
    s = _session()
    assert not s.intercepts(18)  # ApiVersions goes to KafkaApis
    assert s.intercepts(3)
    r = s.handle(17, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    assert r.error_code == 0 and r.mechanisms == ["PLAIN"] and not s.raw_tokens
    r = s.handle(36, 2, SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00alice-secret"))
    assert r.error_code == 0 and r.session_lifetime_ms == 0
    assert s.principal == KafkaPrincipal("User", "alice") and s.authenticated
    assert not s.intercepts(3) and not s.intercepts(36) and s.intercepts(17)
    assert not s.session_expired()


def test_session_refuses_other_requests_and_mechanisms():
    s = _session()
    with pytest.raises(AuthenticationFailed) as e:
        s.handle(3, 1, None)
    assert e.value.response is None
    s = _session()
    with pytest.raises(AuthenticationFailed) as e:
        s.handle(17, 1, SaslHandshakeRequest(mechanism="SCRAM-SHA-256"))
    assert e.value.response.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert e.value.response.mechanisms == ["PLAIN"]
    s = _session()
    s.handle(17, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    with pytest.raises(AuthenticationFailed) as e:
        s.handle(17, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    assert e.value.response.error_code == ErrorCode.ILLEGAL_SASL_STATE
    s = _session()
    s.handle(17, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    with pytest.raises(AuthenticationFailed) as e:
        s.handle(36, 1, SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00nope"))
    assert e.value.response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert e.value.response.error_message == "Authentication failed: Invalid username or password"
    assert s.principal is None


def test_reauthentication_keeps_the_principal_and_renews_the_session():
    now = [1_000]
    s = _session({"connections.max.reauth.ms": "60000"}, now)
    s.handle(17, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    r = s.handle(36, 1, SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00alice-secret"))
    assert r.session_lifetime_ms == 60_000
    now[0] += 60_001
    assert s.session_expired()
    s.handle(17, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    assert not s.authenticated
    r = s.handle(36, 1, SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00alice-secret"))
    assert r.session_lifetime_ms == 60_000 and not s.session_expired()
    s.handle(17, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    with pytest.raises(AuthenticationFailed) as e:
        s.handle(36, 1, SaslAuthenticateRequest(auth_bytes=b"\x00admin\x00admin-secret"))
    assert e.value.response.error_message == "Cannot change principals during re-authentication"


def test_listener_overrides_per_mechanism():
    s = _session({"listener.name.sasl_plaintext.plain.connections.max.reauth.ms": "5000"})
    s.handle(17, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    assert s.handle(36, 1, SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00alice-secret")).session_lifetime_ms == 5000


@pytest.mark.parametrize("props,message", [
    ({}, "GSSAPI enabled on listener SASL_PLAINTEXT is not supported"),
    ({"sasl.enabled.mechanisms": "PLAIN"}, "set listener.name.sasl_plaintext.plain.sasl.jaas.config"),
    ({"sasl.enabled.mechanisms": "PLAIN", "listener.name.sasl_plaintext.plain.sasl.jaas.config":
      "org.apache.kafka.common.security.scram.ScramLoginModule required;"}, "PLAIN needs"),
    ({"listener.name.sasl_plaintext.nosuch.property": "1"}, "unknown property"),
])
def test_listener_config_errors(props, message):
    with pytest.raises(ConfigError, match=message):
        cfg = BrokerConfig({"listeners": "SASL_PLAINTEXT://127.0.0.1:9092", **props})
        sasl_listener_config(cfg, "SASL_PLAINTEXT", _no_scram)


def test_oauthbearer_unsecured_round_trip_and_refusals():
    from rivulet.security.oauthbearer import OAuthBearerClient, OAuthBearerServer, UnsecuredValidator, unsecured_token
    now = [1_700_000_000_000]
    validator = UnsecuredValidator.from_options({"unsecuredValidatorRequiredScope": "kafka"}, lambda: now[0])
    token = unsecured_token("alice", 60, scopes=("kafka",), now_s=now[0] / 1000)
    server, client = OAuthBearerServer(validator), OAuthBearerClient(lambda: token)
    assert server.evaluate(client.initial_response()) == b""
    assert client.evaluate(b"") is None and client.complete
    assert server.principal() == KafkaPrincipal("User", "alice")
    assert server.credential_expiry_ms() == now[0] + 60_000
    # Expired: the JSON error first, then the failure once the client acknowledges it.
    now[0] += 61_000
    server, client = OAuthBearerServer(validator), OAuthBearerClient(lambda: token)
    challenge = server.evaluate(client.initial_response())
    assert challenge == b'{"status":"invalid_token"}'
    with pytest.raises(SaslAuthenticationError) as refused:
        server.evaluate(client.evaluate(challenge))
    # The client is told what Kafka tells it; the reason is for the broker's log.
    assert str(refused.value) == '{"status":"invalid_token"}' and "expired" in str(refused.value.detail)
    no_scope = unsecured_token("alice", 60, now_s=now[0] / 1000)
    server = OAuthBearerServer(validator)
    challenge = server.evaluate(OAuthBearerClient(lambda: no_scope).initial_response())
    assert challenge == b'{"status":"insufficient_scope", "scope":"kafka"}'


def test_oauthbearer_required_scope_is_space_delimited_and_the_first_missing_one_is_named():
    """Kafka's unsecuredValidatorRequiredScope is a space-delimited list, checked in order."""
    from rivulet.security.oauthbearer import OAuthBearerClient, OAuthBearerServer, UnsecuredValidator, unsecured_token
    validator = UnsecuredValidator.from_options({"unsecuredValidatorRequiredScope": " write  read "})
    assert validator.required_scopes == ("write", "read")
    both = unsecured_token("alice", 60, scopes=("read", "write"))
    assert validator(both).principal == "alice"
    server = OAuthBearerServer(validator)
    challenge = server.evaluate(OAuthBearerClient(lambda: unsecured_token("alice", 60, scopes=("read",)))
                                .initial_response())
    assert challenge == b'{"status":"insufficient_scope", "scope":"write"}'


def test_oauthbearer_jwt_against_a_jwks_file(tmp_path):
    import json
    import time

    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa

    from rivulet.security.oauthbearer import JwtValidator, TokenError
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwk.update(kid="k1", alg="RS256", use="sig")
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [jwk]}))
    v = JwtValidator((tmp_path / "jwks.json").as_uri(), audiences=("kafka",), issuer="https://issuer")
    claims = {"sub": "svc", "aud": "kafka", "iss": "https://issuer", "exp": int(time.time()) + 300, "scope": "a b"}
    good = jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})
    assert v(good).principal == "svc" and v(good).scopes == {"a", "b"}
    for bad in ({**claims, "aud": "other"}, {**claims, "iss": "x"}, {**claims, "exp": int(time.time()) - 100}):
        with pytest.raises(TokenError):
            v(jwt.encode(bad, key, algorithm="RS256", headers={"kid": "k1"}))
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with pytest.raises(TokenError, match="Signature"):
        v(jwt.encode(claims, other, algorithm="RS256", headers={"kid": "k1"}))


@pytest.mark.parametrize("props,message", [
    ({"security.protocol": "PLAINTEXT", "sasl.username": "u"}, "sasl.username set, but security.protocol is PLAINTEXT"),
    ({"security.protocol": "SASL_PLAINTEXT"}, "GSSAPI is not supported"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "u"}, "needs sasl.username"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
      "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;"}, "PLAIN needs"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
      "sasl.oauthbearer.config": "principal=p"}, "enable.sasl.oauthbearer.unsecure.jwt=true"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER"}, "needs a token"),
])
def test_client_sasl_settings_refused(props, message):
    from rivulet.security.client_config import sasl_credentials
    with pytest.raises(ValueError, match=message):
        sasl_credentials(props)


def test_client_sasl_settings():
    from rivulet.security.client_config import sasl_credentials
    from rivulet.security.oauthbearer import UnsecuredValidator
    from rivulet.security.scram import ScramClient
    assert sasl_credentials({"security.protocol": "plaintext"}) is None
    c = sasl_credentials({"security.protocol": "sasl_plaintext", "sasl.mechanisms": "scram-sha-256",
                          "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                              'username="u" password="p";'})
    assert (c.mechanism, c.username, c.password) == ("SCRAM-SHA-256", "u", "p")
    assert isinstance(c.new_client(), ScramClient)
    for props in ({"sasl.oauthbearer.config": "principal=pat lifeSeconds=60", "enable.sasl.oauthbearer.unsecure.jwt": True},
                  {"sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                                       'unsecuredLoginStringClaim_sub="pat" unsecuredLoginLifetimeSeconds="60";'}):
        c = sasl_credentials({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", **props})
        assert c.token is not None and UnsecuredValidator()(c.token()).principal == "pat"


def test_inter_broker_sasl_uses_the_listener_jaas_of_its_mechanism():
    from rivulet.server.authentication import inter_broker_sasl
    props = {"listeners": "REPL://127.0.0.1:9093", "listener.security.protocol.map": "REPL:SASL_PLAINTEXT",
             "inter.broker.listener.name": "REPL", "sasl.enabled.mechanisms": "PLAIN",
             "listener.name.repl.plain.sasl.jaas.config": PLAIN_JAAS}
    with pytest.raises(ConfigError, match="must be included in sasl.enabled.mechanisms"):
        inter_broker_sasl(BrokerConfig(props), "REPL")  # the default is GSSAPI
    creds = inter_broker_sasl(BrokerConfig({**props, "sasl.mechanism.inter.broker.protocol": "PLAIN"}), "REPL")
    assert (creds.mechanism, creds.username, creds.password) == ("PLAIN", "admin", "admin-secret")
