"""SASL on a real broker: each client connects with PLAIN (and the other mechanisms), produces,
consumes in a group and commits; wrong credentials fail fast and clearly while the broker
keeps serving the others."""

from __future__ import annotations

import socket
import struct
import time
import uuid

import pytest
from test_bad_input import is_closed, read_frame

from rivulet.protocol import framing
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages.metadata_request import MetadataRequest
from rivulet.protocol.messages.sasl_handshake_request import SaslHandshakeRequest
from rivulet.testing import BrokerProcess

pytestmark = pytest.mark.integration

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
OAUTH_JAAS = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
ALL_MECHANISMS = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER"
SCRAM_USERS = {"SCRAM-SHA-256": ("sam", "sam-secret"), "SCRAM-SHA-512": ("sue", "sue-secret")}


def sasl_overrides(port: int, listener: str = "SASL_PLAINTEXT", mechanisms: str = ALL_MECHANISMS) -> dict[str, str]:
    prefix = f"listener.name.{listener.lower()}"
    return {
        "listeners": f"{listener}://127.0.0.1:{port}",
        "sasl.enabled.mechanisms": mechanisms,
        f"{prefix}.plain.sasl.jaas.config": PLAIN_JAAS,
        f"{prefix}.scram-sha-256.sasl.jaas.config": SCRAM_JAAS,
        f"{prefix}.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
        f"{prefix}.oauthbearer.sasl.jaas.config": OAUTH_JAAS,
    }


def sasl_broker(**extra: str) -> BrokerProcess:
    b = BrokerProcess()
    b.overrides.update({**sasl_overrides(b.port), **extra})
    return b.start()


def add_scram_users(bootstrap: str, protocol: str = "SASL_PLAINTEXT", **tls: str) -> None:
    """The SCRAM users, made over PLAIN by the admin (AlterUserScramCredentials)."""
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
    a = AdminClient({"bootstrap.servers": bootstrap, "security.protocol": protocol, "sasl.mechanism": "PLAIN",
                     "sasl.username": "admin", "sasl.password": "admin-secret", **tls})
    upserts = [UserScramCredentialUpsertion(user, ScramCredentialInfo(getattr(ScramMechanism, mech.replace("-", "_")),
                                                                      4096 if mech.endswith("256") else 8192),
                                            password.encode())
               for mech, (user, password) in SCRAM_USERS.items()]
    for f in a.alter_user_scram_credentials(upserts).values():
        f.result(30)
    described = {u: f.result(30) for u, f in a.describe_user_scram_credentials(["sam", "sue"]).items()}
    assert [(i.mechanism, i.iterations) for i in described["sue"].scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_512, 8192)]


@pytest.fixture(scope="module")
def broker():
    b = sasl_broker()
    add_scram_users(b.bootstrap)
    yield b
    b.cleanup()


def ck_conf(broker: BrokerProcess, mechanism: str, user: str, password: str) -> dict:
    return {"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


def ck_round_trip(conf: dict, topic: str, n: int = 5) -> None:
    """Produce ``n`` records, read them in a group, commit, and find the commit."""
    import confluent_kafka
    round_trip(confluent_kafka, conf, topic, n)


def round_trip(client, conf: dict, topic: str, n: int = 5) -> None:
    """With ``client`` (confluent_kafka or rivulet, the same shape)."""
    p = client.Producer(conf)
    for i in range(n):
        p.produce(topic, f"v{i}".encode())
    assert p.flush(30) == 0
    if hasattr(p, "close"):
        p.close()
    c = client.Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None:
            assert m.error() is None, m.error()
            got.append(m.value())
    assert got == [f"v{i}".encode() for i in range(n)]
    c.commit(asynchronous=False)
    assert c.committed([client.TopicPartition(topic, 0)], timeout=10)[0].offset == n
    c.close()


def topic_name() -> str:
    return f"sasl-{uuid.uuid4().hex[:8]}"


def test_confluent_kafka_plain(broker):
    ck_round_trip(ck_conf(broker, "PLAIN", "alice", "alice-secret"), topic_name())


@pytest.mark.parametrize("mechanism", list(SCRAM_USERS))
def test_confluent_kafka_scram(broker, mechanism):
    ck_round_trip(ck_conf(broker, mechanism, *SCRAM_USERS[mechanism]), topic_name())


def test_confluent_kafka_oauthbearer_unsecured(broker):
    ck_round_trip({"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                   "sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": True,
                   "sasl.oauthbearer.config": "principal=olivia"}, topic_name())


def first_error(conf: dict) -> "confluent_kafka.KafkaError":  # noqa: F821
    import confluent_kafka
    errors: list = []
    p = confluent_kafka.Producer({**conf, "error_cb": errors.append})
    deadline = time.monotonic() + 20
    while not errors and time.monotonic() < deadline:
        p.poll(0.2)
    assert errors, "no error reported"
    return errors[0]


def test_wrong_scram_password_and_expired_token_fail_clearly(broker):
    import confluent_kafka
    err = first_error(ck_conf(broker, "SCRAM-SHA-512", "sue", "wrong"))
    assert err.code() == confluent_kafka.KafkaError._AUTHENTICATION
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in err.str()
    from rivulet.security.oauthbearer import unsecured_token
    expired = unsecured_token("olivia", lifetime_s=60, now_s=time.time() - 3600)
    err = first_error({"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                       "sasl.mechanism": "OAUTHBEARER",
                       "oauth_cb": lambda _config: (expired, time.time() + 3600, "olivia")})
    assert err.code() == confluent_kafka.KafkaError._AUTHENTICATION
    assert "invalid_token" in err.str() and "expired" in err.str()
    ck_round_trip(ck_conf(broker, "SCRAM-SHA-512", "sue", "sue-secret"), topic_name())


def test_wrong_password_fails_fast_and_clearly_and_others_carry_on(broker):
    import confluent_kafka
    err = first_error(ck_conf(broker, "PLAIN", "alice", "not-her-password"))
    assert err.code() == confluent_kafka.KafkaError._AUTHENTICATION
    assert "Authentication failed: Invalid username or password" in err.str()
    ck_round_trip(ck_conf(broker, "PLAIN", "admin", "admin-secret"), topic_name())
    # Logged once per failure, never with the password.
    out = broker.output()
    assert "not-her-password" not in out


def _request(body, version: int, correlation_id: int = 1) -> bytes:
    return framing.encode_request(body, version, correlation_id, "sasl-test")


def test_requests_before_authentication_close_the_connection(broker):
    with socket.create_connection(("127.0.0.1", broker.port)) as s:
        s.sendall(_request(MetadataRequest(topics=[]), 1))
        assert is_closed(s)


def test_unsupported_mechanism_is_answered_then_closed(broker):
    with socket.create_connection(("127.0.0.1", broker.port)) as s:
        s.sendall(_request(SaslHandshakeRequest(mechanism="GSSAPI"), 1))
        corr, resp = framing.decode_response(read_frame(s), 17, 1)
        assert resp.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM and resp.mechanisms == ALL_MECHANISMS.split(",")
        assert is_closed(s)


def test_v0_handshake_takes_a_raw_token(broker):
    """Old clients: after SaslHandshake v0 the token is a bare frame, and so is the answer."""
    with socket.create_connection(("127.0.0.1", broker.port)) as s:
        s.sendall(_request(SaslHandshakeRequest(mechanism="PLAIN"), 0))
        assert framing.decode_response(read_frame(s), 17, 0)[1].error_code == 0
        token = b"\x00alice\x00alice-secret"
        s.sendall(struct.pack(">i", len(token)) + token)
        assert read_frame(s) == b""
        s.sendall(_request(MetadataRequest(topics=[]), 1, correlation_id=7))  # now Metadata is served
        assert framing.decode_response(read_frame(s), 3, 1)[0] == 7


def test_sasl_listener_without_jaas_stops_start_up():
    b = BrokerProcess()
    b.overrides.update({**sasl_overrides(b.port)})
    del b.overrides["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    try:
        with pytest.raises(RuntimeError, match="listener.name.sasl_plaintext.plain.sasl.jaas.config"):
            b.start()
    finally:
        b.cleanup()


@pytest.mark.parametrize("mechanism,conf", [
    ("PLAIN", {"sasl.username": "alice", "sasl.password": "alice-secret"}),
    ("SCRAM-SHA-256", {"sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                           'username="sam" password="sam-secret";'}),
    ("SCRAM-SHA-512", {"sasl.username": "sue", "sasl.password": "sue-secret"}),
    ("OAUTHBEARER", {"sasl.jaas.config": 'org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule '
                                         'required unsecuredLoginStringClaim_sub="olivia";'}),
])
def test_rivulet_client(broker, mechanism, conf):
    import rivulet
    round_trip(rivulet, {"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                        "sasl.mechanism": mechanism, **conf}, topic_name())


def test_rivulet_client_wrong_password_is_reported_and_the_admin_fails_fast(broker):
    from rivulet.admin import AdminClient
    from rivulet.client.errors import KafkaError
    errors: list = []
    conf = {"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "sam", "sasl.password": "wrong", "error_cb": errors.append}
    a = AdminClient(conf)
    t0 = time.monotonic()
    with pytest.raises(Exception, match="SASL authentication error: Authentication failed during authentication"):
        a.list_topics(timeout=20)
    assert time.monotonic() - t0 < 15  # refused at once, not retried until the timeout
    a.close()
    from rivulet import Producer
    p = Producer(conf)
    p.produce("any", b"v")
    assert p.flush(3) == 1
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION
    assert "Authentication failed during authentication due to invalid credentials" in errors[0].str()
    p.close(0)


def test_cli_with_command_config(broker, tmp_path):
    import subprocess
    import sys
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
                     'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required '
                     'username="sue" password="sue-secret";\n')
    t = topic_name()

    def cli(*args: str, config=props) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "rivulet", *args, "-b", broker.bootstrap, "--command-config",
                               str(config)], capture_output=True, text=True, timeout=60)
    assert cli("topics", "create", "--topic", t).returncode == 0
    assert t in cli("topics", "list").stdout
    bad = tmp_path / "bad.properties"
    bad.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=alice\n"
                   "sasl.password=wrong\n")
    r = cli("topics", "list", config=bad)
    assert r.returncode != 0 and "Authentication failed: Invalid username or password" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    typo = tmp_path / "typo.properties"
    typo.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.usernme=alice\n")
    r = cli("topics", "list", config=typo)
    assert r.returncode != 0 and "sasl.usernme" in r.stderr


def test_user_quota_applies_to_the_authenticated_principal(broker):
    """A producer_byte_rate for user alice throttles the PLAIN principal alice, not the admin."""
    import confluent_kafka
    from test_client_quotas import alter

    from rivulet.admin import AdminClient
    admin_conf = ck_conf(broker, "PLAIN", "admin", "admin-secret")
    admin = AdminClient(admin_conf)
    alter(admin, {"user": "alice"}, {"producer_byte_rate": 1024})
    admin.close()
    t = topic_name()

    def throttled(conf: dict) -> int:
        seen: list[int] = []
        p = confluent_kafka.Producer({**conf, "linger.ms": 0,
                                      "throttle_cb": lambda ev: seen.append(ev.throttle_time)})
        p.produce(t, b"x" * 30_000)  # three times alice's rate over the quota window
        assert p.flush(30) == 0
        p.poll(0.5)
        return max(seen, default=0)
    assert throttled(ck_conf(broker, "PLAIN", "alice", "alice-secret")) > 0
    assert throttled(admin_conf) == 0
