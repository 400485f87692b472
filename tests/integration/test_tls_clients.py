"""TLS and mutual TLS with every client: confluent-kafka, kafka-python, aiokafka, kcat and
Rivulet's own each connect, produce, consume in a group and commit. One broker has three
listeners: PLAINTEXT, SSL (server authentication only) and MTLS (an SSL listener whose
``listener.name.mtls.ssl.client.auth=required``). A stranger's certificate and a plaintext
client on a TLS port fail at once, and the broker serves everyone else meanwhile."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
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
from tls_certs import PASSWORD

from rivulet.testing import BrokerProcess, free_port

pytestmark = pytest.mark.integration


class TlsBroker:
    def __init__(self, proc: BrokerProcess, ssl_port: int, mtls_port: int) -> None:
        self.proc = proc
        self.plain = proc.bootstrap
        self.ssl = f"127.0.0.1:{ssl_port}"
        self.mtls = f"127.0.0.1:{mtls_port}"
        self.ssl_port, self.mtls_port = ssl_port, mtls_port


@pytest.fixture(scope="module")
def tls_broker(tls_certs):
    ssl_port, mtls_port = free_port(), free_port()
    proc = BrokerProcess({})
    proc.overrides.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{proc.port},SSL://127.0.0.1:{ssl_port},MTLS://localhost:{mtls_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
        **tls_certs.broker_ssl_props(),
        # The mutual-TLS listener reads PKCS12 stores, the other PEM files.
        **tls_certs.broker_ssl_props("listener.name.mtls.", client_auth="required", pkcs12_stores=True),
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]*),OU=eng.*$/$1/L,DEFAULT",
        "offsets.topic.num.partitions": "3",
    })
    proc.start()
    yield TlsBroker(proc, ssl_port, mtls_port)
    proc.cleanup()


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def librdkafka_conf(certs, mutual: bool) -> dict[str, str]:
    conf = {"security.protocol": "SSL", "ssl.ca.location": str(certs.ca.pem)}
    if mutual:
        conf.update({"ssl.certificate.location": str(certs.client.cert), "ssl.key.location": str(certs.client.key_enc),
                     "ssl.key.password": PASSWORD})
    return conf


@pytest.mark.parametrize("mutual", [False, True], ids=["tls", "mtls"])
def test_confluent_kafka(tls_broker, tls_certs, mutual):
    from confluent_kafka import Consumer, Producer
    bootstrap = tls_broker.mtls if mutual else tls_broker.ssl
    conf = {"bootstrap.servers": bootstrap, **librdkafka_conf(tls_certs, mutual)}
    topic, group = topic_name("ck-tls"), topic_name("g")
    p = Producer({**conf, "linger.ms": 5})
    for i in range(20):
        p.produce(topic, f"v{i}".encode(), f"k{i}".encode())
    assert p.flush(30) == 0
    c = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 20 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.commit(asynchronous=False)
    committed = c.committed([__import__("confluent_kafka").TopicPartition(topic, 0)], timeout=10)
    c.close()
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(20))
    assert committed[0].offset == 20


def kafka_python_conf(certs, mutual: bool) -> dict:
    conf = {"security_protocol": "SSL", "ssl_cafile": str(certs.ca.pem)}
    if mutual:
        conf.update({"ssl_certfile": str(certs.client.cert), "ssl_keyfile": str(certs.client.key_enc),
                     "ssl_password": PASSWORD})
    return conf


@pytest.mark.parametrize("mutual", [False, True], ids=["tls", "mtls"])
def test_kafka_python(tls_broker, tls_certs, mutual):
    bootstrap = tls_broker.mtls if mutual else tls_broker.ssl
    conf = kafka_python_conf(tls_certs, mutual)
    kafka_python_round_trip(bootstrap, conf, topic_name("kp-tls"), topic_name("g"))


@pytest.mark.parametrize("mutual", [False, True], ids=["tls", "mtls"])
def test_aiokafka(tls_broker, tls_certs, mutual):
    from aiokafka.helpers import create_ssl_context
    bootstrap = tls_broker.mtls if mutual else tls_broker.ssl
    kw = {"cafile": str(tls_certs.ca.pem)}
    if mutual:
        kw.update(certfile=str(tls_certs.client.cert), keyfile=str(tls_certs.client.key_enc), password=PASSWORD)
    aiokafka_round_trip(bootstrap, {"security_protocol": "SSL", "ssl_context": create_ssl_context(**kw)},
                        topic_name("aio-tls"), topic_name("g"))


@pytest.mark.parametrize("mutual", [False, True], ids=["tls", "mtls"])
def test_kcat(tls_broker, tls_certs, mutual):
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    assert kcat, "kcat is installed by scripts/setup.sh"
    bootstrap = tls_broker.mtls if mutual else tls_broker.ssl
    opts = []
    for k, v in librdkafka_conf(tls_certs, mutual).items():
        opts += ["-X", f"{k}={v}"]
    topic, group = topic_name("kcat-tls"), topic_name("g")
    r = kcat_produce(kcat, bootstrap, opts, topic, 5)
    assert r.returncode == 0, r.stderr
    kcat_consume_in_group(kcat, bootstrap, opts, topic, group, 5)
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": tls_broker.plain, "group.id": group})
    assert c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 5
    c.close()


def test_metadata_answers_the_listener_of_the_connection(tls_broker, tls_certs):
    from confluent_kafka.admin import AdminClient
    for bootstrap, mutual in ((tls_broker.ssl, False), (tls_broker.mtls, True), (tls_broker.plain, None)):
        conf = {} if mutual is None else librdkafka_conf(tls_certs, mutual)
        md = AdminClient({"bootstrap.servers": bootstrap, **conf}).list_topics(timeout=20)
        (broker,) = md.brokers.values()
        host = "localhost" if bootstrap == tls_broker.mtls else "127.0.0.1"
        assert f"{broker.host}:{broker.port}" == f"{host}:{bootstrap.rpartition(':')[2]}"


def _ssl_handshake(port: int, context: ssl.SSLContext) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as s:
            # TLS 1.3 sends the refusal of a client certificate after the client's handshake.
            s.sendall(b"\0\0\0\0")
            if not s.recv(1):
                raise ConnectionError("closed by the broker")


def test_strangers_fail_fast_and_everyone_else_is_served(tls_broker, tls_certs):
    from confluent_kafka import Producer
    c = tls_certs
    stranger = ssl.create_default_context(cafile=str(c.ca.pem))
    stranger.load_cert_chain(str(c.stranger.cert), str(c.stranger.key_enc), password=PASSWORD)
    # Refused with the alert, as Kafka sends it, not just a closed connection.
    with pytest.raises(ssl.SSLError, match="UNKNOWN_CA"):
        _ssl_handshake(tls_broker.mtls_port, stranger)
    # A plaintext Kafka request on a TLS port: the broker answers with a TLS alert at most,
    # and closes the connection without waiting for anything more.
    with socket.create_connection(("127.0.0.1", tls_broker.ssl_port), timeout=20) as s:
        s.sendall(b"\x00\x00\x00\x0e\x00\x12\x00\x00\x00\x00\x00\x01\x00\x04test")
        while s.recv(100):
            pass
    # No certificate at all on the mutual-TLS listener.
    with pytest.raises(ssl.SSLError, match="CERTIFICATE_REQUIRED"):
        _ssl_handshake(tls_broker.mtls_port, ssl.create_default_context(cafile=str(c.ca.pem)))
    # librdkafka with the stranger's certificate reports the failure instead of hanging.
    errors = []
    p = Producer({"bootstrap.servers": tls_broker.mtls, "security.protocol": "SSL",
                  "ssl.ca.location": str(c.ca.pem), "ssl.certificate.location": str(c.stranger.cert),
                  "ssl.key.location": str(c.stranger.key_enc), "ssl.key.password": PASSWORD,
                  "error_cb": lambda e: errors.append(e), "message.timeout.ms": 3000})
    p.produce(topic_name("stranger"), b"x")
    p.flush(10)
    assert errors, "librdkafka reported no error"
    # Meanwhile everyone else is served, on every listener.
    for bootstrap, conf in ((tls_broker.plain, {}), (tls_broker.ssl, librdkafka_conf(c, False)),
                            (tls_broker.mtls, librdkafka_conf(c, True))):
        ok = Producer({"bootstrap.servers": bootstrap, **conf})
        ok.produce(topic_name("ok"), b"x")
        assert ok.flush(30) == 0
    assert tls_broker.proc.proc.poll() is None


@pytest.mark.parametrize("mutual", [False, True], ids=["tls", "mtls"])
def test_rivulet_client(tls_broker, tls_certs, mutual):
    from rivulet import Consumer, Producer, TopicPartition
    bootstrap = tls_broker.mtls if mutual else tls_broker.ssl
    # librdkafka's names for the CA and the client's key; Java's for a PKCS12 key store.
    conf = {"bootstrap.servers": bootstrap, "security.protocol": "SSL", "ssl.ca.location": str(tls_certs.ca.pem)}
    if mutual:
        conf.update({"ssl.keystore.location": str(tls_certs.client.p12), "ssl.keystore.password": PASSWORD})
    topic, group = topic_name("rv-tls"), topic_name("g")
    p = Producer(conf)
    for i in range(10):
        p.produce(topic, f"v{i}".encode(), partition=0)
    assert p.flush(30) == 0
    p.close()
    c = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 10 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.commit(asynchronous=False)
    assert c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 10
    c.close()
    assert got == [f"v{i}".encode() for i in range(10)]


def test_rivulet_client_refuses_a_broker_it_does_not_trust(tls_broker, tls_certs):
    from rivulet import Producer
    errors = []
    p = Producer({"bootstrap.servers": tls_broker.ssl, "security.protocol": "SSL",
                  "ssl.ca.location": str(tls_certs.other_ca.pem), "error_cb": errors.append,
                  "message.timeout.ms": 3000})
    p.produce(topic_name("untrusted"), b"x")
    assert p.flush(10) == 1 or errors
    p.close()
    assert any("certificate verify failed" in str(e) for e in errors), errors


def test_sasl_ssl_listener_carries_sasl_over_tls(tls_certs):
    """SASL_SSL: TLS from this side, SASL PLAIN from the sasl side, on one listener."""
    from confluent_kafka import Consumer, Producer
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            'username="admin" password="admin-secret" user_alice="alice-secret";')
    b = BrokerProcess()
    sasl_port = free_port()
    b.overrides.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SASL_SSL://localhost:{sasl_port}",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": jaas,
        **tls_certs.broker_ssl_props("listener.name.sasl_ssl."),
        # KIP-684: the broker-wide ssl.client.auth is not for SASL_SSL listeners.
        "ssl.client.auth": "required",
    })
    b.start()
    try:
        conf = {"bootstrap.servers": f"localhost:{sasl_port}", "security.protocol": "SASL_SSL",
                "ssl.ca.location": str(tls_certs.ca.pem), "sasl.mechanism": "PLAIN",
                "sasl.username": "alice", "sasl.password": "alice-secret"}
        topic = topic_name("sasl-ssl")
        p = Producer(conf)
        p.produce(topic, b"over tls")
        assert p.flush(30) == 0
        c = Consumer({**conf, "group.id": topic, "auto.offset.reset": "earliest"})
        c.subscribe([topic])
        deadline = time.monotonic() + 60
        m = None
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                break
        c.close()
        assert m is not None and m.value() == b"over tls"
        # Rivulet's own client, SASL over TLS.
        from rivulet import Producer as RivuletProducer
        rp = RivuletProducer(conf)
        rp.produce(topic, b"rivulet over tls")
        assert rp.flush(30) == 0
        rp.close()
        # A wrong password over TLS fails as over plaintext.
        errors = []
        bad = Producer({**conf, "sasl.password": "wrong", "error_cb": errors.append})
        bad.produce(topic, b"x")
        bad.flush(5)
        assert any("Authentication failed" in str(e) or "SASL" in str(e) for e in errors), errors
    finally:
        b.cleanup()


@pytest.mark.java
@pytest.mark.parametrize("mutual", [False, True], ids=["tls", "mtls"])
def test_java_client(tls_broker, tls_certs, mutual):
    """Kafka's own Java client (its perf tools): a PEM trust store, and for mutual TLS a
    PKCS12 key store; ConsumerPerformance consumes in a group and commits on close."""
    bootstrap = tls_broker.mtls if mutual else tls_broker.ssl
    props = {"security.protocol": "SSL", "ssl.truststore.type": "PEM",
             "ssl.truststore.location": str(tls_certs.ca.pem), "request.timeout.ms": 15_000}
    if mutual:
        props.update({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(tls_certs.client.p12),
                      "ssl.keystore.password": PASSWORD, "ssl.key.password": PASSWORD})
    java_round_trip(bootstrap, props, topic_name("java-tls"), topic_name("g"), 2000,
                    {"bootstrap.servers": tls_broker.plain})


def test_cli_over_mutual_tls(tls_broker, tls_certs, tmp_path):
    """The CLI takes the client properties from --command-config, as Kafka's tools do; a
    security setting it does not know is an error, not a plaintext connection."""
    import sys
    cfg = tmp_path / "client.properties"
    cfg.write_text(f"security.protocol=SSL\nssl.ca.location={tls_certs.ca.pem}\n"
                   f"ssl.certificate.location={tls_certs.client.cert}\nssl.key.location={tls_certs.client.key_enc}\n"
                   f"ssl.key.password={PASSWORD}\n")
    topic = topic_name("cli-tls")

    def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "rivulet", *args, "-b", tls_broker.mtls,
                               "--command-config", str(cfg)], input=stdin, capture_output=True, text=True,
                              timeout=90)

    r = cli("produce", "-t", topic, "-q", stdin="a\nb\n")
    assert r.returncode == 0, r.stderr
    r = cli("consume", "-t", topic, "-G", topic, "-o", "beginning", "-c", "2")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["a", "b"]
    cfg.write_text(f"security.protocol=SSL\nssl.ca.locaton={tls_certs.ca.pem}\n")
    r = cli("topics", "list")
    assert r.returncode != 0 and "ssl.ca.locaton" in r.stderr


def test_blocking_client_over_mutual_tls(tls_broker, tls_certs):
    """The blocking transport (Spark's workers use it) with the same settings, pooled by them."""
    from confluent_kafka import Producer

    from rivulet.client import blocking
    from rivulet.client.config import ssl_context
    topic = topic_name("blocking-tls")
    p = Producer({"bootstrap.servers": tls_broker.plain})
    for i in range(7):
        p.produce(topic, b"x", partition=0)
    assert p.flush(30) == 0
    security = {"security.protocol": "SSL", "ssl.ca.location": str(tls_certs.ca.pem),
                "ssl.certificate.location": str(tls_certs.client.cert), "ssl.key.location": str(tls_certs.client.key)}
    client = blocking.pooled(tls_broker.mtls, "t", security)
    try:
        assert client is blocking.pooled(tls_broker.mtls, "t", dict(security))
        assert client.metadata([topic]) == {topic: 1}
        assert client.list_offsets({(topic, 0): -1}) == {(topic, 0): 7}
        client.commit_offsets(topic, {(topic, 0): 5})
        assert client.committed(topic, [(topic, 0)])[(topic, 0)].offset == 5
    finally:
        blocking.discard(tls_broker.mtls, security)
    untrusting = ssl_context({**security, "ssl.ca.location": str(tls_certs.other_ca.pem)})
    with pytest.raises(ConnectionError, match="certificate verify failed"):
        blocking.BlockingClient(tls_broker.mtls, ssl_context=untrusting).metadata([topic])
