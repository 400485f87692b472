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


def sasl_broker(mechanisms: str = "PLAIN", **extra: str) -> BrokerProcess:
    b = BrokerProcess()
    b.overrides.update({
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{b.port}",
        "sasl.enabled.mechanisms": mechanisms,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        **extra,
    })
    return b.start()


@pytest.fixture(scope="module")
def broker():
    b = sasl_broker()
    yield b
    b.cleanup()


def ck_conf(broker: BrokerProcess, mechanism: str, user: str, password: str) -> dict:
    return {"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


def ck_round_trip(conf: dict, topic: str, n: int = 5) -> None:
    """Produce ``n`` records, read them in a group, commit, and find the commit."""
    import confluent_kafka
    p = confluent_kafka.Producer(conf)
    for i in range(n):
        p.produce(topic, f"v{i}".encode())
    assert p.flush(30) == 0
    c = confluent_kafka.Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
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
    committed = c.committed([confluent_kafka.TopicPartition(topic, 0)], timeout=10)
    assert committed[0].offset == n
    c.close()


def topic_name() -> str:
    return f"sasl-{uuid.uuid4().hex[:8]}"


def test_confluent_kafka_plain(broker):
    ck_round_trip(ck_conf(broker, "PLAIN", "alice", "alice-secret"), topic_name())


def test_wrong_password_fails_fast_and_clearly_and_others_carry_on(broker):
    import confluent_kafka
    errors: list = []
    p = confluent_kafka.Producer({**ck_conf(broker, "PLAIN", "alice", "not-her-password"),
                                  "error_cb": errors.append})
    deadline = time.monotonic() + 20
    while not errors and time.monotonic() < deadline:
        p.poll(0.2)
    assert errors and errors[0].code() == confluent_kafka.KafkaError._AUTHENTICATION
    assert "Authentication failed: Invalid username or password" in errors[0].str()
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
        assert resp.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM and resp.mechanisms == ["PLAIN"]
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
    b.overrides.update({"listeners": f"SASL_PLAINTEXT://127.0.0.1:{b.port}", "sasl.enabled.mechanisms": "PLAIN"})
    try:
        with pytest.raises(RuntimeError, match="listener.name.sasl_plaintext.plain.sasl.jaas.config"):
            b.start()
    finally:
        b.cleanup()
