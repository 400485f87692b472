"""TLS from Kafka's ssl.* properties: stores (PEM files, inline PEM, PKCS12), the settings
refused, and an SSL listener in process: the principal of a client certificate, ANONYMOUS
without one, and clear refusals of a stranger's certificate and of plaintext."""

from __future__ import annotations

import asyncio
import ssl

import pytest

from rivulet.protocol import framing
from rivulet.protocol.messages.api_versions_request import ApiVersionsRequest
from rivulet.security import tls
from rivulet.security.ssl_principal import SslPrincipalMapper
from rivulet.server.network import Listener
from rivulet.server.socket_server import SocketServer, SocketServerConfig
from tls_certs import PASSWORD

pytestmark = pytest.mark.fast


def test_defaults_are_kafkas():
    cfg = tls.ssl_config({})
    assert (cfg.keystore_type, cfg.truststore_type, cfg.protocol) == ("JKS", "JKS", "TLSv1.3")
    assert cfg.enabled_protocols == ("TLSv1.2", "TLSv1.3")
    assert cfg.endpoint_identification_algorithm == "https"
    assert cfg.client_auth == "none"


@pytest.mark.parametrize("props,message", [
    ({"ssl.keystore.type": "BKS"}, "ssl.keystore.type=BKS is not supported"),
    ({"ssl.client.auth": "maybe"}, "ssl.client.auth=maybe"),
    ({"ssl.enabled.protocols": "TLSv1.4"}, "unknown protocol TLSv1.4"),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.key": "k"}, "go together"),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.location": "/x", "ssl.keystore.password": "p"},
     "SSL key store password cannot be specified with PEM format"),
    ({"ssl.endpoint.identification.algorithm": "ldap"}, "ssl.endpoint.identification.algorithm=ldap"),
])
def test_refused_settings(props, message):
    with pytest.raises(tls.TlsError, match=message):
        tls.ssl_config(props)


def test_server_context_needs_a_key_store():
    with pytest.raises(tls.TlsError, match="needs a key store"):
        tls.server_context(tls.ssl_config({}))


def test_stores_in_every_form(tls_certs):
    c = tls_certs
    pem_files = tls.ssl_config(c.broker_ssl_props())
    p12 = tls.ssl_config(c.broker_ssl_props(pkcs12_stores=True))
    inline = tls.ssl_config({"ssl.keystore.type": "PEM", "ssl.keystore.key": c.broker.pem_key(),
                             "ssl.keystore.certificate.chain": c.broker.pem_chain(),
                             "ssl.truststore.type": "PEM", "ssl.truststore.certificates": c.ca.pem.read_text()})
    # A JKS-typed store that is really PKCS12 reads as Java's JKS keystore reads it.
    jks_named = tls.ssl_config({"ssl.keystore.location": str(c.broker.p12), "ssl.keystore.password": PASSWORD,
                                "ssl.truststore.location": str(c.ca.truststore_p12),
                                "ssl.truststore.password": PASSWORD})
    for cfg in (pem_files, p12, inline, jks_named):
        key, chain = tls.load_keystore(cfg)
        assert chain[0] == c.broker.cert_obj
        assert tls.load_truststore(cfg) == [c.ca.cert]
        assert isinstance(tls.server_context(cfg), ssl.SSLContext)


def test_wrong_passwords_and_jks_are_named(tls_certs, tmp_path):
    c = tls_certs
    with pytest.raises(tls.TlsError, match="ssl.keystore.location"):
        tls.load_keystore(tls.ssl_config({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(c.broker.p12),
                                          "ssl.keystore.password": "wrong"}))
    with pytest.raises(tls.TlsError, match="private key cannot be read"):
        tls.load_keystore(tls.ssl_config({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(c.broker.keystore),
                                          "ssl.key.password": "wrong"}))
    jks = tmp_path / "ks.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed" + bytes(60))
    with pytest.raises(tls.TlsError, match="JKS keystore"):
        tls.load_keystore(tls.ssl_config({"ssl.keystore.location": str(jks), "ssl.keystore.password": "x"}))
    with pytest.raises(tls.TlsError, match="cannot be read"):
        tls.load_keystore(tls.ssl_config({"ssl.keystore.location": str(tmp_path / "none.p12")}))


def test_cipher_suites_take_java_names(tls_certs):
    props = {**tls_certs.broker_ssl_props(), "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"}
    ctx = tls.server_context(tls.ssl_config(props))
    names = {c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"}
    assert names == {"ECDHE-ECDSA-AES128-GCM-SHA256"}
    with pytest.raises(tls.TlsError, match="ssl.cipher.suites"):
        tls.server_context(tls.ssl_config({**props, "ssl.cipher.suites": "TLS_NO_SUCH_WITH_THING"}))


# ------------------------------------------------------------ an SSL listener in process
class _Recorder:
    """A request handler that notes each connection's principal and answers ApiVersions."""

    def __init__(self) -> None:
        self.principals: list[str] = []

    def handle(self, header, body, conn):
        from rivulet.protocol.messages import api_versions_response as avr
        self.principals.append(str(conn.principal))
        return avr.ApiVersionsResponse(error_code=0, api_keys=[], throttle_time_ms=0)

    def api_versions_error(self, code):
        raise AssertionError("not expected")


async def _api_versions(port: int, context: ssl.SSLContext | None) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context,
                                                   server_hostname="localhost" if context else None)
    try:
        writer.write(framing.encode_request(ApiVersionsRequest(), 0, 1, "t"))
        await writer.drain()
        size = int.from_bytes(await reader.readexactly(4), "big")
        return await reader.readexactly(size)
    finally:
        writer.close()


def _client(c, cert=None, trust=None) -> ssl.SSLContext:
    props = {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(trust or c.ca.pem)}
    if cert is not None:
        props.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(cert.keystore),
                      "ssl.key.password": PASSWORD})
    return tls.client_context(tls.ssl_config(props))


@pytest.mark.parametrize("client_auth", ["required", "requested"])
def test_ssl_listener_principals_and_refusals(tls_certs, client_auth):
    c = tls_certs

    async def run() -> None:
        ctx = tls.server_context(tls.ssl_config(c.broker_ssl_props(client_auth=client_auth)))
        server = SocketServer(SocketServerConfig(max_request_bytes=1 << 20, connections_max_idle_ms=60000))
        port = await server.bind("127.0.0.1", 0, Listener("SSL", "SSL", ctx, SslPrincipalMapper(
            "RULE:^CN=([^,]*),OU=eng.*$/$1@eng/L,DEFAULT")))
        handler = _Recorder()
        await server.start_serving(handler)
        try:
            assert await _api_versions(port, _client(c, c.client))
            # A stranger's certificate and a plaintext client fail at once; the listener serves on.
            with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
                async with asyncio.timeout(5):
                    await _api_versions(port, _client(c, c.stranger))
            with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
                async with asyncio.timeout(5):
                    await _api_versions(port, None)
            # A client that trusts another CA refuses the broker.
            with pytest.raises(ssl.SSLCertVerificationError):
                await _api_versions(port, _client(c, c.client, trust=c.other_ca.pem))
            if client_auth == "requested":
                assert await _api_versions(port, _client(c))
            else:
                with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
                    async with asyncio.timeout(5):
                        await _api_versions(port, _client(c))
            assert await _api_versions(port, _client(c, c.client))
        finally:
            server.close()
        expected = ["User:app@eng"] + (["User:ANONYMOUS"] if client_auth == "requested" else []) + ["User:app@eng"]
        assert handler.principals == expected

    asyncio.run(run())


def test_client_settings_in_librdkafkas_and_javas_names(tls_certs):
    c = tls_certs
    rdkafka = tls.client_ssl_config({"ssl.ca.location": str(c.ca.pem), "ssl.certificate.location": str(c.client.cert),
                                     "ssl.key.location": str(c.client.key_enc), "ssl.key.password": PASSWORD})
    inline = tls.client_ssl_config({"ssl.ca.pem": c.ca.pem.read_text(), "ssl.certificate.pem": c.client.pem_chain(),
                                    "ssl.key.pem": c.client.pem_key()})
    java = tls.client_ssl_config({"ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(c.ca.truststore_p12),
                                  "ssl.truststore.password": PASSWORD, "ssl.keystore.location": str(c.client.p12),
                                  "ssl.keystore.password": PASSWORD})
    for cfg in (rdkafka, inline, java):
        assert tls.load_keystore(cfg)[1][0] == c.client.cert_obj
        assert tls.load_truststore(cfg) == [c.ca.cert]
        ctx = tls.client_context(cfg)
        assert ctx.check_hostname and ctx.verify_mode == ssl.CERT_REQUIRED
    directory = tls.client_ssl_config({"ssl.ca.location": str(c.ca.pem.parent)})
    assert directory.ca_directory == str(c.ca.pem.parent)
    unchecked = tls.client_context(tls.client_ssl_config({"enable.ssl.certificate.verification": False}))
    assert unchecked.verify_mode == ssl.CERT_NONE and not unchecked.check_hostname
    no_names = tls.client_context(tls.client_ssl_config({"ssl.endpoint.identification.algorithm": "none"}))
    assert not no_names.check_hostname and no_names.verify_mode == ssl.CERT_REQUIRED
    with pytest.raises(tls.TlsError, match="needs its key"):
        tls.client_ssl_config({"ssl.certificate.location": str(c.client.cert)})
    with pytest.raises(tls.TlsError, match="ssl.ca.location=/nowhere"):
        tls.client_ssl_config({"ssl.ca.location": "/nowhere"})



@pytest.mark.parametrize("client_auth", ["required", "requested"])
def test_certificate_request_names_the_trusted_cas(tls_certs, client_auth):
    """As Java (so Kafka) does, the certificate request names the trust store's CAs, so a
    client such as librdkafka offers a certificate the broker will accept, or none, instead of
    one it refuses. Seen in a TLS 1.2 handshake, where the request is in the clear: the second
    CA, trusted here but in no certificate the broker sends, is named in the server's flight."""
    c = tls_certs
    props = {k: v for k, v in c.broker_ssl_props(client_auth=client_auth).items() if k != "ssl.truststore.location"}
    props.update({"ssl.truststore.certificates": c.ca.pem.read_text() + c.other_ca.pem.read_text(),
                  "ssl.enabled.protocols": "TLSv1.2"})
    flight = _server_first_flight(props, c.ca.pem)
    assert c.other_ca.cert.subject.public_bytes() in flight
    assert c.ca.cert.subject.public_bytes() in flight
    # Without client certificates, no request at all.
    props["ssl.client.auth"] = "none"
    assert c.other_ca.cert.subject.public_bytes() not in _server_first_flight(props, c.ca.pem)


def _server_first_flight(props: dict[str, str], ca_pem) -> bytes:
    """What a listener of ``props`` sends in answer to a client's hello (in memory, no socket)."""
    s_in, s_out, c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    server = tls.server_context(tls.ssl_config(props)).wrap_bio(s_in, s_out, server_side=True)
    client = ssl.create_default_context(cafile=str(ca_pem)).wrap_bio(c_in, c_out, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        client.do_handshake()
    s_in.write(c_out.read())
    with pytest.raises(ssl.SSLWantReadError):
        server.do_handshake()
    return s_out.read()
