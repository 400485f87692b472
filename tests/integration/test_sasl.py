"""SASL on a real broker: each client connects with PLAIN (and the other mechanisms), produces,
consumes in a group and commits; wrong credentials fail fast and clearly while the broker
keeps serving the others."""

from __future__ import annotations

import json
import socket
import struct
import time
import uuid

import pytest
from client_round_trips import (
    aiokafka_round_trip,
    java_round_trip,
    kafka_python_round_trip,
    kcat_consume_in_group,
    kcat_produce,
)
from test_bad_input import is_closed, read_frame

from rivulet.protocol import framing
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages.metadata_request import MetadataRequest
from rivulet.protocol.messages.sasl_handshake_request import SaslHandshakeRequest
from rivulet.testing import BrokerProcess, free_port

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
def broker(tls_certs):
    """SASL_PLAINTEXT on ``port``, and SASL_SSL on ``ssl_port`` (TLS with the test CA)."""
    b = BrokerProcess()
    b.ssl_port = free_port()
    plain, tls = sasl_overrides(b.port), sasl_overrides(b.ssl_port, "SASL_SSL")
    b.overrides.update({**plain, **tls, "listeners": f"{plain['listeners']},{tls['listeners'].replace('127.0.0.1', 'localhost')}",
                        **tls_certs.broker_ssl_props("listener.name.sasl_ssl."), "offsets.topic.num.partitions": "3"})
    b.start()
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


def first_error(conf: dict):
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
    # Kafka's message: the JSON error alone; why the token was refused stays in the broker's log.
    assert '{"status":"invalid_token"}' in err.str() and "expired" not in err.str()
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


def test_a_failed_authentication_is_answered_after_the_configured_delay():
    """connection.failed.authentication.delay.ms: the broker counts the failure at once but holds
    its answer back (a password guesser waits out each attempt), then answers and closes."""
    from test_metrics_endpoint import scrape, total

    mport = free_port()
    b = sasl_broker(**{"connection.failed.authentication.delay.ms": "10000",
                       "metrics.listener": f"http://127.0.0.1:{mport}"})
    try:
        with socket.create_connection(("127.0.0.1", b.port)) as s:
            s.sendall(_request(SaslHandshakeRequest(mechanism="GSSAPI"), 1))
            failed = "kafka_server_socket_server_metrics_failed_authentication_total"
            deadline = time.monotonic() + 30
            while total(scrape(mport), failed, listener="SASL_PLAINTEXT") < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert total(scrape(mport), failed, listener="SASL_PLAINTEXT") == 1
            s.setblocking(False)
            with pytest.raises(BlockingIOError):  # refused, and not answered yet
                s.recv(1)
            s.setblocking(True)
            s.settimeout(30)
            _, resp = framing.decode_response(read_frame(s), 17, 1)
            assert resp.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
            assert is_closed(s)
    finally:
        b.stop()


def test_a_large_frame_before_authentication_closes_the_connection(broker):
    """sasl.server.max.receive.size (512 KiB): nothing bigger is read from a stranger."""
    with socket.create_connection(("127.0.0.1", broker.port)) as s:
        s.sendall(struct.pack(">i", 600_000) + b"\0" * 1000)
        assert is_closed(s)


def test_sasl_requests_on_a_plaintext_listener_get_illegal_sasl_state():
    from rivulet.protocol.messages.sasl_authenticate_request import SaslAuthenticateRequest
    with BrokerProcess() as b, socket.create_connection(("127.0.0.1", b.port)) as s:
        s.sendall(_request(SaslHandshakeRequest(mechanism="PLAIN"), 1))
        assert framing.decode_response(read_frame(s), 17, 1)[1].error_code == ErrorCode.ILLEGAL_SASL_STATE
        s.sendall(_request(SaslAuthenticateRequest(auth_bytes=b"x"), 2, 2))
        assert framing.decode_response(read_frame(s), 36, 2)[1].error_code == ErrorCode.ILLEGAL_SASL_STATE


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
    t = topic_name()

    def throttled(conf: dict) -> int:
        seen: list[int] = []
        p = confluent_kafka.Producer({**conf, "linger.ms": 0,
                                      "throttle_cb": lambda ev: seen.append(ev.throttle_time)})
        p.produce(t, b"x" * 30_000)  # three times alice's rate over the quota window
        assert p.flush(30) == 0
        p.poll(0.5)
        return max(seen, default=0)
    try:
        assert throttled(ck_conf(broker, "PLAIN", "alice", "alice-secret")) > 0
        assert throttled(admin_conf) == 0
    finally:  # the module's broker serves alice in the tests that follow
        alter(admin, {"user": "alice"}, {"producer_byte_rate": None})
        admin.close()


# ---------------------------------------------------------------- every client, every mechanism
# (mechanism, user, password); OAUTHBEARER's principal comes from an unsecured token.
CREDENTIALS = [("PLAIN", "alice", "alice-secret"), ("SCRAM-SHA-256", *SCRAM_USERS["SCRAM-SHA-256"]),
               ("SCRAM-SHA-512", *SCRAM_USERS["SCRAM-SHA-512"]), ("OAUTHBEARER", "olivia", "")]


def _endpoint(broker, tls: bool) -> tuple[str, str]:
    return (f"localhost:{broker.ssl_port}", "SASL_SSL") if tls else (broker.bootstrap, "SASL_PLAINTEXT")


def _token(user: str) -> str:
    from rivulet.security.oauthbearer import unsecured_token
    return unsecured_token(user, 3600)


def _python_client(broker, tls: bool, mechanism: str, user: str, password: str, tokens) -> tuple[str, dict]:
    """kafka-python's and aiokafka's SASL settings (the same names)."""
    bootstrap, protocol = _endpoint(broker, tls)
    conf: dict = {"security_protocol": protocol, "sasl_mechanism": mechanism}
    conf.update({"sasl_oauth_token_provider": tokens} if mechanism == "OAUTHBEARER"
                else {"sasl_plain_username": user, "sasl_plain_password": password})
    return bootstrap, conf


def _cases():
    for mechanism, user, password in CREDENTIALS:
        yield pytest.param(mechanism, user, password, False, id=mechanism)
    yield pytest.param("PLAIN", "alice", "alice-secret", True, id="PLAIN-over-TLS")


@pytest.mark.parametrize("mechanism,user,password,tls", list(_cases()))
def test_kafka_python(broker, tls_certs, mechanism, user, password, tls):
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Tokens(AbstractTokenProvider):
        def token(self) -> str:
            return _token(user)
    bootstrap, conf = _python_client(broker, tls, mechanism, user, password, Tokens())
    if tls:
        conf["ssl_cafile"] = str(tls_certs.ca.pem)
    kafka_python_round_trip(bootstrap, conf, topic_name(), topic_name(), 5)


@pytest.mark.parametrize("mechanism,user,password,tls", list(_cases()))
def test_aiokafka(broker, tls_certs, mechanism, user, password, tls):
    from aiokafka.abc import AbstractTokenProvider
    from aiokafka.helpers import create_ssl_context

    class Tokens(AbstractTokenProvider):
        async def token(self) -> str:
            return _token(user)
    bootstrap, conf = _python_client(broker, tls, mechanism, user, password, Tokens())
    if tls:
        conf["ssl_context"] = create_ssl_context(cafile=str(tls_certs.ca.pem))
    aiokafka_round_trip(bootstrap, conf, topic_name(), topic_name(), 5)


def _librdkafka_version(kcat: str) -> tuple[int, ...]:
    import re
    import subprocess
    out = subprocess.run([kcat, "-V"], capture_output=True, text=True).stdout
    m = re.search(r"librdkafka (\d+)\.(\d+)\.(\d+)", out)
    assert m, out
    return tuple(int(x) for x in m.groups())


@pytest.mark.parametrize("mechanism,user,password,tls", list(_cases()))
def test_kcat(broker, tls_certs, mechanism, user, password, tls):
    import shutil
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    assert kcat, "kcat is installed by scripts/setup.sh"
    bootstrap, protocol = _endpoint(broker, tls)
    opts = ["-X", f"security.protocol={protocol}", "-X", f"sasl.mechanisms={mechanism}"]
    opts += (["-X", "enable.sasl.oauthbearer.unsecure.jwt=true", "-X", f"sasl.oauthbearer.config=principal={user}"]
             if mechanism == "OAUTHBEARER" else ["-X", f"sasl.username={user}", "-X", f"sasl.password={password}"])
    if tls:
        opts += ["-X", f"ssl.ca.location={tls_certs.ca.pem}"]
    topic, group = topic_name(), topic_name()
    r = kcat_produce(kcat, bootstrap, opts, topic, 3)
    if mechanism.startswith("SCRAM") and _librdkafka_version(kcat) < (2, 6, 1):
        # librdkafka before 2.6.1 repeats its nonce in the client-final message; Kafka 4 (and
        # Rivulet) refuse it, as RFC 5802 requires.
        assert r.returncode != 0 and f"invalid credentials with SASL mechanism {mechanism}" in r.stderr.decode()
        return
    assert r.returncode == 0, r.stderr
    kcat_consume_in_group(kcat, bootstrap, opts, topic, group, 3)
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({**ck_conf(broker, "PLAIN", "admin", "admin-secret"), "group.id": group})
    assert c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 3
    c.close()


@pytest.mark.java
@pytest.mark.parametrize("mechanism,user,password,tls", list(_cases()))
def test_java_client(broker, tls_certs, mechanism, user, password, tls):
    """Kafka's Java client (its perf tools) with sasl.jaas.config; ConsumerPerformance
    consumes in a group and commits on close."""
    bootstrap, protocol = _endpoint(broker, tls)
    module = {"PLAIN": "plain.PlainLoginModule", "OAUTHBEARER": "oauthbearer.OAuthBearerLoginModule"}.get(
        mechanism, "scram.ScramLoginModule")
    options = (f'unsecuredLoginStringClaim_sub="{user}"' if mechanism == "OAUTHBEARER"
               else f'username="{user}" password="{password}"')
    props = {"security.protocol": protocol, "sasl.mechanism": mechanism, "request.timeout.ms": 15_000,
             "sasl.jaas.config": f"org.apache.kafka.common.security.{module} required {options};"}
    if tls:
        props.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(tls_certs.ca.pem)})
    java_round_trip(bootstrap, props, topic_name(), topic_name(), 500, ck_conf(broker, "PLAIN", "admin", "admin-secret"))


def test_users_cli_adds_lists_and_removes_scram_users(broker, tmp_path):
    import subprocess
    import sys
    admin = tmp_path / "admin.properties"
    admin.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=admin\n"
                     "sasl.password=admin-secret\n")

    def users(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "rivulet", "users", *args, "-b", broker.bootstrap,
                               "--command-config", str(admin)], input=stdin, capture_output=True, text=True,
                              timeout=60)
    r = users("add", "--user", "carl", "--mechanism", "SCRAM-SHA-256", "--mechanism", "SCRAM-SHA-512",
              "--iterations", "8192", stdin="carl-secret\n")
    assert r.returncode == 0, r.stderr
    r = users("list", "--user", "carl")
    assert r.stdout.strip() == "carl\tSCRAM-SHA-256=[iterations=8192], SCRAM-SHA-512=[iterations=8192]"
    r = users("list", "--user", "carl", "--format", "json")
    assert json.loads(r.stdout) == [{"user": "carl", "credentials": [
        {"mechanism": "SCRAM-SHA-256", "iterations": 8192}, {"mechanism": "SCRAM-SHA-512", "iterations": 8192}]}]
    ck_round_trip(ck_conf(broker, "SCRAM-SHA-512", "carl", "carl-secret"), topic_name())
    r = users("add", "--user", "carl", "--mechanism", "SCRAM-SHA-256", "--iterations", "100", "--password", "x")
    assert r.returncode == 2 and "Too few iterations" in r.stderr
    assert users("remove", "--user", "carl").returncode == 0
    r = users("list", "--user", "carl")
    assert r.returncode == 1 and "does not exist" in r.stderr
    r = users("remove", "--user", "carl", "--mechanism", "SCRAM-SHA-256")
    assert r.returncode == 1 and "Attempt to delete a user credential that does not exist" in r.stderr
    assert "invalid credentials" in first_error(ck_conf(broker, "SCRAM-SHA-512", "carl", "carl-secret")).str()


def test_reauthentication_keeps_clients_serving_and_an_expired_session_is_closed(tls_certs):
    """connections.max.reauth.ms=3000 (KIP-368): librdkafka and the Java client re-authenticate
    on their own and keep producing; a connection that does not is closed at its next request
    once the session is over."""
    import confluent_kafka
    b = sasl_broker(**{"connections.max.reauth.ms": "3000"})
    try:
        import json
        conf = ck_conf(b, "PLAIN", "alice", "alice-secret")
        stats: list[dict] = []
        p = confluent_kafka.Producer({**conf, "linger.ms": 0, "statistics.interval.ms": 500,
                                      "stats_cb": lambda j: stats.append(json.loads(j))})
        t = topic_name()
        deadline = time.monotonic() + 8
        sent = 0
        while time.monotonic() < deadline:
            p.produce(t, b"x")
            assert p.flush(10) == 0
            sent += 1
            time.sleep(0.2)
        assert sent > 10
        p.poll(1)
        # Two sessions or more went by on the producer's connection, re-authenticated in place:
        # it never had to connect again.
        node = next(v for v in stats[-1]["brokers"].values() if v["nodeid"] == 1)
        assert node["connects"] == 1 and node["disconnects"] == 0
        from rivulet.protocol.messages.sasl_authenticate_request import SaslAuthenticateRequest
        with socket.create_connection(("127.0.0.1", b.port)) as s:
            s.sendall(_request(SaslHandshakeRequest(mechanism="PLAIN"), 1))
            framing.decode_response(read_frame(s), 17, 1)
            s.sendall(_request(SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00alice-secret"), 1, 2))
            assert framing.decode_response(read_frame(s), 36, 1)[1].session_lifetime_ms == 3000
            s.sendall(_request(MetadataRequest(topics=[]), 1, 3))
            assert framing.decode_response(read_frame(s), 3, 1)[0] == 3
            time.sleep(3.5)
            s.sendall(_request(MetadataRequest(topics=[]), 1, 4))
            assert is_closed(s)
    finally:
        b.cleanup()


def test_a_token_session_ends_with_the_token(broker):
    """OAUTHBEARER: the session lifetime is the token's remaining life."""
    from rivulet.protocol.messages.sasl_authenticate_request import SaslAuthenticateRequest
    from rivulet.security.oauthbearer import OAuthBearerClient, unsecured_token
    token = unsecured_token("olivia", lifetime_s=2)
    with socket.create_connection(("127.0.0.1", broker.port)) as s:
        s.sendall(_request(SaslHandshakeRequest(mechanism="OAUTHBEARER"), 1))
        framing.decode_response(read_frame(s), 17, 1)
        s.sendall(_request(SaslAuthenticateRequest(auth_bytes=OAuthBearerClient(lambda: token).initial_response()),
                           1, 2))
        resp = framing.decode_response(read_frame(s), 36, 1)[1]
        assert resp.error_code == 0 and 0 < resp.session_lifetime_ms <= 2000
        time.sleep(2.5)
        s.sendall(_request(MetadataRequest(topics=[]), 1, 3))
        assert is_closed(s)


def test_oauthbearer_jwt_validated_against_a_jwks_file(tmp_path, monkeypatch):
    """OAuthBearerValidatorCallbackHandler: signed JWTs checked against a JWKS file's keys, the
    audience and the issuer; confluent-kafka hands its token over with oauth_cb. A refused token
    is answered as Kafka answers it (the JSON error alone), its reason logged by the broker."""
    monkeypatch.setenv("RIVULET_LOG", "info")  # the failed-authentication line is at INFO
    import json

    import confluent_kafka
    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwk.update(kid="k1", alg="RS256", use="sig")
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [jwk]}))
    prefix = "listener.name.sasl_plaintext.oauthbearer."
    b = sasl_broker(**{
        f"{prefix}sasl.server.callback.handler.class":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
        "sasl.oauthbearer.jwks.endpoint.url": (tmp_path / "jwks.json").as_uri(),
        "sasl.oauthbearer.expected.audience": "kafka", "sasl.oauthbearer.expected.issuer": "https://issuer.test"})
    try:
        def conf(audience: str) -> dict:
            claims = {"sub": "svc", "aud": audience, "iss": "https://issuer.test", "exp": int(time.time()) + 600}
            token = jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})
            return {"bootstrap.servers": b.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": "OAUTHBEARER", "oauth_cb": lambda _c: (token, claims["exp"], "svc")}
        ck_round_trip(conf("kafka"), topic_name())
        err = first_error(conf("someone-else"))
        assert err.code() == confluent_kafka.KafkaError._AUTHENTICATION
        assert '{"status":"invalid_token"}' in err.str() and "audience" not in err.str().lower()
        deadline = time.monotonic() + 10
        while "audience" not in b.output().lower() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "audience" in b.output().lower(), b.output()[-3000:]
    finally:
        b.cleanup()


def test_scram_users_survive_a_restart():
    b = sasl_broker()
    try:
        add_scram_users(b.bootstrap)
        b.restart()
        ck_round_trip(ck_conf(b, "SCRAM-SHA-256", *SCRAM_USERS["SCRAM-SHA-256"]), topic_name())
    finally:
        b.cleanup()


def test_held_back_authentication_failures_are_summed_up_with_the_last_one_formatted(monkeypatch):
    """The broker logs one failed authentication per 10 s and then sums up the ones it held
    back: the summary shows the last of them as logged, never the message's bare template."""
    from confluent_kafka.admin import AdminClient

    monkeypatch.setenv("RIVULET_LOG", "info")
    b = sasl_broker(**{"sasl.enabled.mechanisms": "PLAIN"})
    try:
        def fail_once() -> None:
            a = AdminClient({"bootstrap.servers": b.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "wrong",
                             "retry.backoff.ms": 5000})
            with pytest.raises(Exception):
                a.list_topics(timeout=3)
        fail_once()
        fail_once()
        time.sleep(11)  # past the 10 s interval: the next failure brings the summary first
        fail_once()
        deadline = time.monotonic() + 20
        while "were not logged" not in b.output() and time.monotonic() < deadline:
            time.sleep(0.2)
        out = b.output()
    finally:
        b.stop()
        b.cleanup()
    summary = [line for line in out.splitlines() if "were not logged" in line]
    assert summary and "the last: Failed authentication with 127.0.0.1:" in summary[0], out[-3000:]
    assert "%s" not in out, out[-3000:]
