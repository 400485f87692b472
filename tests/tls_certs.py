"""Test certificates, made fresh for each test session with ``cryptography``: a CA, a broker
certificate for 127.0.0.1 and localhost, client certificates, and a second CA whose
certificates the broker must refuse. Written as PEM files and as PKCS12 stores."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID

PASSWORD = "test-secret"


def _name(cn: str, ou: str | None = None, o: str | None = "Rivulet Tests") -> x509.Name:
    attrs = []
    if o:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, o))
    if ou:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou))
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


@dataclass
class Issued:
    """One key and certificate, with its files: ``key`` (PEM, PKCS8, unencrypted), ``key_enc``
    (encrypted with PASSWORD), ``cert`` (PEM chain: the certificate, then its CA), ``keystore``
    (PEM key + chain in one file) and ``p12`` (PKCS12 under PASSWORD)."""

    name: str
    key_obj: ec.EllipticCurvePrivateKey
    cert_obj: x509.Certificate
    key: Path
    key_enc: Path
    cert: Path
    keystore: Path
    p12: Path

    def pem_key(self) -> str:
        return self.key.read_text()

    def pem_chain(self) -> str:
        return self.cert.read_text()


class Authority:
    def __init__(self, directory: Path, name: str) -> None:
        self.dir = directory
        self.name = name
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        subject = _name(f"{name} CA")
        self.cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(days=1))
                     .not_valid_after(now + datetime.timedelta(days=30))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                                    critical=True)
                     .sign(self.key, hashes.SHA256()))
        self.pem = directory / f"{name}-ca.pem"
        self.pem.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        self.truststore_p12 = directory / f"{name}-truststore.p12"
        self.truststore_p12.write_bytes(pkcs12.serialize_key_and_certificates(
            None, None, None, [self.cert], serialization.BestAvailableEncryption(PASSWORD.encode())))

    def issue(self, file_name: str, cn: str, ou: str | None = None, server: bool = False) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        b = (x509.CertificateBuilder().subject_name(_name(cn, ou)).issuer_name(self.cert.subject)
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - datetime.timedelta(days=1))
             .not_valid_after(now + datetime.timedelta(days=30))
             .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
             .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH,
                                                   x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
        if server:
            b = b.add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        cert = b.sign(self.key, hashes.SHA256())
        d = self.dir
        plain = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption())
        enc = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.BestAvailableEncryption(PASSWORD.encode()))
        chain = cert.public_bytes(serialization.Encoding.PEM) + self.cert.public_bytes(serialization.Encoding.PEM)
        paths = {k: d / f"{file_name}{suffix}" for k, suffix in
                 (("key", ".key"), ("key_enc", "-enc.key"), ("cert", ".pem"), ("keystore", "-keystore.pem"),
                  ("p12", ".p12"))}
        paths["key"].write_bytes(plain)
        paths["key_enc"].write_bytes(enc)
        paths["cert"].write_bytes(chain)
        paths["keystore"].write_bytes(enc + chain)
        paths["p12"].write_bytes(pkcs12.serialize_key_and_certificates(
            file_name.encode(), key, cert, [self.cert], serialization.BestAvailableEncryption(PASSWORD.encode())))
        for p in paths.values():
            p.chmod(0o600)
        return Issued(file_name, key, cert, **paths)


@dataclass
class CertSet:
    ca: Authority
    broker: Issued
    client: Issued
    other_ca: Authority
    stranger: Issued  # a client certificate from other_ca

    def broker_ssl_props(self, prefix: str = "", client_auth: str = "none", pkcs12_stores: bool = False
                         ) -> dict[str, str]:
        """Broker properties for an SSL listener (``prefix``: ``listener.name.<l>.``)."""
        if pkcs12_stores:
            props = {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(self.broker.p12),
                     "ssl.keystore.password": PASSWORD, "ssl.key.password": PASSWORD,
                     "ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(self.ca.truststore_p12),
                     "ssl.truststore.password": PASSWORD}
        else:
            props = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.broker.keystore),
                     "ssl.key.password": PASSWORD, "ssl.truststore.type": "PEM",
                     "ssl.truststore.location": str(self.ca.pem)}
        props["ssl.client.auth"] = client_auth
        return {prefix + k: v for k, v in props.items()}


def make_test_certs(directory: Path) -> CertSet:
    directory.mkdir(parents=True, exist_ok=True)
    ca = Authority(directory, "rivulet-test")
    other = Authority(directory, "other")
    return CertSet(ca=ca, broker=ca.issue("broker", "localhost", server=True),
                     client=ca.issue("client", "app", ou="eng"), other_ca=other,
                     stranger=other.issue("stranger", "mallory", ou="eng"))
