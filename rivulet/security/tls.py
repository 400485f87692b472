"""TLS contexts from Kafka's ``ssl.*`` properties, for the broker's listeners and for clients.

Key and trust stores are PEM (files, or inline in ``ssl.keystore.key``,
``ssl.keystore.certificate.chain`` and ``ssl.truststore.certificates``) or PKCS12, read with
``cryptography``. Kafka's default store type is JKS; as Java's own JKS keystore does, a
PKCS12 file is read under that type, and a real JKS file is refused with the way out.

Python's ``ssl`` loads a private key only from a file: the key is written, encrypted under a
one-time password, to a private temporary file that is removed as soon as it is loaded.
"""

from __future__ import annotations

import _ssl
import ctypes
import dataclasses
import functools
import logging
import os
import secrets
import ssl
import tempfile
from dataclasses import dataclass
from typing import Any, Mapping

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.hazmat.primitives.serialization import pkcs12

from rivulet.common.config import ConfigError

log = logging.getLogger(__name__)

__all__ = ["SslConfig", "TlsError", "client_context", "client_ssl_config", "peer_dn", "server_context", "ssl_config"]

PROTOCOL_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1, "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
STORE_TYPES = ("JKS", "PKCS12", "PEM")
CLIENT_AUTH = ("required", "requested", "none")
_JKS_MAGIC = b"\xfe\xed\xfe\xed"


class TlsError(ConfigError):
    """A TLS setting that cannot be used; the message names the property."""


@dataclass(frozen=True)
class SslConfig:
    """The ``ssl.*`` values one side uses (Kafka 4.3's names and defaults)."""

    keystore_type: str = "JKS"
    keystore_location: str | None = None
    keystore_password: str | None = None
    key_password: str | None = None
    keystore_certificate_chain: str | None = None
    keystore_key: str | None = None
    truststore_type: str = "JKS"
    truststore_location: str | None = None
    truststore_password: str | None = None
    truststore_certificates: str | None = None
    protocol: str = "TLSv1.3"
    enabled_protocols: tuple[str, ...] = ("TLSv1.2", "TLSv1.3")
    cipher_suites: tuple[str, ...] = ()
    endpoint_identification_algorithm: str | None = "https"
    client_auth: str = "none"
    # librdkafka's client settings that Java's names do not cover.
    ca_directory: str | None = None
    verify_certificates: bool = True


_FIELDS = {
    "ssl.keystore.type": "keystore_type", "ssl.keystore.location": "keystore_location",
    "ssl.keystore.password": "keystore_password", "ssl.key.password": "key_password",
    "ssl.keystore.certificate.chain": "keystore_certificate_chain", "ssl.keystore.key": "keystore_key",
    "ssl.truststore.type": "truststore_type", "ssl.truststore.location": "truststore_location",
    "ssl.truststore.password": "truststore_password", "ssl.truststore.certificates": "truststore_certificates",
    "ssl.protocol": "protocol", "ssl.enabled.protocols": "enabled_protocols",
    "ssl.cipher.suites": "cipher_suites",
    "ssl.endpoint.identification.algorithm": "endpoint_identification_algorithm",
    "ssl.client.auth": "client_auth",
}


def _as_tuple(v: Any) -> tuple[str, ...]:
    if v is None:
        return ()
    if isinstance(v, str):
        return tuple(s.strip() for s in v.split(",") if s.strip())
    return tuple(str(s).strip() for s in v if str(s).strip())


def ssl_config(values: Mapping[str, Any]) -> SslConfig:
    """An ``SslConfig`` from ``ssl.*`` values (typed or strings); absent ones take Kafka's defaults."""
    kw: dict[str, Any] = {}
    for prop, attr in _FIELDS.items():
        if prop not in values or values[prop] is None:
            continue
        v = values[prop]
        if attr in ("enabled_protocols", "cipher_suites"):
            kw[attr] = _as_tuple(v)
        elif attr in ("keystore_type", "truststore_type"):
            kw[attr] = str(v).strip().upper()
        elif attr == "client_auth":
            kw[attr] = str(v).strip().lower()
        else:
            kw[attr] = str(v) if attr not in ("keystore_key", "keystore_certificate_chain",
                                              "truststore_certificates") else str(v).strip()
    cfg = SslConfig(**kw)
    _validate(cfg)
    return cfg


def _validate(cfg: SslConfig) -> None:
    for prop, value in (("ssl.keystore.type", cfg.keystore_type), ("ssl.truststore.type", cfg.truststore_type)):
        if value not in STORE_TYPES:
            raise TlsError(f"{prop}={value} is not supported: use PKCS12 or PEM")
    if cfg.client_auth not in CLIENT_AUTH:
        raise TlsError(f"ssl.client.auth={cfg.client_auth} is not one of {', '.join(CLIENT_AUTH)}")
    for p in cfg.enabled_protocols:
        if p not in PROTOCOL_VERSIONS:
            raise TlsError(f"ssl.enabled.protocols: unknown protocol {p}; known: {', '.join(PROTOCOL_VERSIONS)}")
    if cfg.protocol not in PROTOCOL_VERSIONS and cfg.protocol not in ("TLS", "SSL"):
        raise TlsError(f"ssl.protocol: unknown protocol {cfg.protocol}")
    alg = (cfg.endpoint_identification_algorithm or "").strip().lower()
    if alg not in ("", "https"):
        raise TlsError(f"ssl.endpoint.identification.algorithm={alg}: only https or empty is supported")
    if cfg.keystore_key and not cfg.keystore_certificate_chain or \
            cfg.keystore_certificate_chain and not cfg.keystore_key:
        raise TlsError("ssl.keystore.key and ssl.keystore.certificate.chain go together")
    if cfg.keystore_key and cfg.keystore_location:
        raise TlsError("ssl.keystore.key and ssl.keystore.location cannot both be set")
    if cfg.truststore_certificates and cfg.truststore_location:
        raise TlsError("ssl.truststore.certificates and ssl.truststore.location cannot both be set")
    if (cfg.keystore_key or cfg.keystore_certificate_chain) and cfg.keystore_type != "PEM":
        raise TlsError("ssl.keystore.key and ssl.keystore.certificate.chain need ssl.keystore.type=PEM")
    if cfg.truststore_certificates and cfg.truststore_type != "PEM":
        raise TlsError("ssl.truststore.certificates needs ssl.truststore.type=PEM")
    if cfg.keystore_type == "PEM" and cfg.keystore_password:
        raise TlsError("SSL key store password cannot be specified with PEM format, only key password may be "
                       "specified (ssl.key.password)")
    if cfg.truststore_type == "PEM" and cfg.truststore_password:
        raise TlsError("SSL trust store password cannot be specified with PEM format")


# ---------------------------------------------------------------- stores
def _read(path: str, prop: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise TlsError(f"{prop}={path} cannot be read: {e.strerror or e}") from None


def _pkcs12(data: bytes, password: str | None, prop: str) -> tuple[PrivateKeyTypes | None, list[x509.Certificate]]:
    if data[:4] == _JKS_MAGIC:
        raise TlsError(f"{prop} is a JKS keystore, which Rivulet cannot read: convert it with "
                       "keytool -importkeystore -deststoretype PKCS12, or use PEM")
    try:
        key, cert, extra = pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    except ValueError as e:
        raise TlsError(f"{prop} cannot be read as PKCS12 (wrong password?): {e}") from None
    certs = ([cert] if cert is not None else []) + list(extra or [])
    return key, certs


def _pem_certs(data: bytes, prop: str) -> list[x509.Certificate]:
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError as e:
        raise TlsError(f"{prop} holds no PEM certificate: {e}") from None
    return certs


def _pem_key(data: bytes, password: str | None, prop: str) -> PrivateKeyTypes:
    try:
        return serialization.load_pem_private_key(data, password.encode() if password else None)
    except (ValueError, TypeError) as e:
        raise TlsError(f"{prop}: the private key cannot be read (ssl.key.password?): {e}") from None


def load_keystore(cfg: SslConfig) -> tuple[PrivateKeyTypes, list[x509.Certificate]] | None:
    """The private key and certificate chain this side presents, or None when none is configured."""
    if cfg.keystore_key:
        return (_pem_key(cfg.keystore_key.encode(), cfg.key_password, "ssl.keystore.key"),
                _pem_certs(cfg.keystore_certificate_chain.encode(), "ssl.keystore.certificate.chain"))
    if not cfg.keystore_location:
        return None
    data = _read(cfg.keystore_location, "ssl.keystore.location")
    if cfg.keystore_type == "PEM":
        return _pem_key(data, cfg.key_password, "ssl.keystore.location"), _pem_certs(data, "ssl.keystore.location")
    key, certs = _pkcs12(data, cfg.keystore_password, "ssl.keystore.location")
    if key is None or not certs:
        raise TlsError(f"ssl.keystore.location={cfg.keystore_location} holds no private key with its certificate")
    return key, certs


def load_truststore(cfg: SslConfig) -> list[x509.Certificate] | None:
    """The certificates this side trusts, or None for the system's defaults."""
    if cfg.truststore_certificates:
        return _pem_certs(cfg.truststore_certificates.encode(), "ssl.truststore.certificates")
    if not cfg.truststore_location:
        return None
    data = _read(cfg.truststore_location, "ssl.truststore.location")
    if cfg.truststore_type == "PEM":
        return _pem_certs(data, "ssl.truststore.location")
    key, certs = _pkcs12(data, cfg.truststore_password, "ssl.truststore.location")
    if not certs:
        # Java writes trusted certificates as PKCS12 bags that older readers skip.
        try:
            certs = [c.certificate for c in pkcs12.load_pkcs12(
                data, cfg.truststore_password.encode() if cfg.truststore_password else None).additional_certs]
        except ValueError:
            certs = []
    if not certs:
        raise TlsError(f"ssl.truststore.location={cfg.truststore_location} holds no certificate")
    return certs


def _load_key_into(ctx: ssl.SSLContext, key: PrivateKeyTypes, certs: list[x509.Certificate]) -> None:
    once = secrets.token_urlsafe(24)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.BestAvailableEncryption(once.encode()))
    pem += b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)
    fd, path = tempfile.mkstemp(prefix="rivulet-key-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        ctx.load_cert_chain(path, password=once)
    except ssl.SSLError as e:
        raise TlsError(f"the key store's key does not match its certificate: {e}") from None
    finally:
        os.unlink(path)


# ---------------------------------------------------------------- contexts
def _cipher_name(name: str) -> str:
    """An IANA suite name (Java's) as OpenSSL names it; OpenSSL names pass unchanged."""
    if not name.startswith("TLS_") or "_WITH_" not in name:
        return name
    kx, cipher = name[4:].split("_WITH_", 1)
    cipher = cipher.replace("AES_128", "AES128").replace("AES_256", "AES256").replace("CHACHA20_POLY1305_SHA256",
                                                                                        "CHACHA20_POLY1305")
    kx = {"RSA": "", "ECDHE_RSA": "ECDHE-RSA", "ECDHE_ECDSA": "ECDHE-ECDSA", "DHE_RSA": "DHE-RSA"}.get(kx, kx)
    return "-".join(p for p in (kx.replace("_", "-"), cipher.replace("_", "-")) if p)


def _base(ctx: ssl.SSLContext, cfg: SslConfig) -> ssl.SSLContext:
    versions = sorted(PROTOCOL_VERSIONS[p] for p in cfg.enabled_protocols) or [ssl.TLSVersion.TLSv1_2]
    try:
        ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
    except ValueError as e:
        raise TlsError(f"ssl.enabled.protocols={','.join(cfg.enabled_protocols)}: {e}") from None
    tls12 = [s for s in cfg.cipher_suites if not (s.startswith("TLS_") and "_WITH_" not in s)]
    if tls12:
        try:
            ctx.set_ciphers(":".join(_cipher_name(s) for s in tls12))
        except ssl.SSLError:
            raise TlsError(f"ssl.cipher.suites={','.join(cfg.cipher_suites)}: no suite this OpenSSL knows") from None
    trusted = load_truststore(cfg)
    if cfg.ca_directory:
        ctx.load_verify_locations(capath=cfg.ca_directory)
    elif trusted is None:
        ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH if ctx.protocol == ssl.PROTOCOL_TLS_SERVER
                               else ssl.Purpose.SERVER_AUTH)
    else:
        ctx.load_verify_locations(cadata="".join(c.public_bytes(serialization.Encoding.PEM).decode()
                                                 for c in trusted))
    store = load_keystore(cfg)
    if store is not None:
        _load_key_into(ctx, *store)
    return ctx


@functools.cache
def _openssl() -> ctypes.CDLL | None:
    """The OpenSSL that Python's ``ssl`` runs on (symbols found through its ``_ssl`` module)."""
    try:
        lib = ctypes.CDLL(_ssl.__file__)
        for name, args, res in (("SSL_CTX_get_options", [ctypes.c_void_p], ctypes.c_uint64),
                                ("SSL_CTX_get_verify_mode", [ctypes.c_void_p], ctypes.c_int),
                                ("SSL_CTX_add_client_CA", [ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int),
                                ("d2i_X509", [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long], ctypes.c_void_p),
                                ("X509_free", [ctypes.c_void_p], None)):
            fn = getattr(lib, name)  # attribute access keeps the function, and its types, on lib
            fn.argtypes, fn.restype = args, res
    except (AttributeError, OSError) as e:
        log.debug("OpenSSL not reachable for the certificate request's CA names: %s", e)
        return None
    return lib


def _name_trusted_issuers(ctx: ssl.SSLContext, trusted: list[x509.Certificate]) -> None:
    """Name the trust store's CAs in the certificate request, as Java (so Kafka) does: a client
    then offers a certificate one of them issued, or none (librdkafka, Java), rather than one
    the broker refuses. Python's ``ssl`` has no call for OpenSSL's ``SSL_CTX_add_client_CA``,
    so it is called on the ``SSL_CTX`` the context wraps (CPython's first field after the
    object header), once options and verify mode read there match the context's; otherwise
    the request names no CA, as it did before."""
    lib = _openssl()
    if lib is None:
        return
    ptr = ctypes.c_void_p.from_address(id(ctx) + object.__basicsize__).value
    verify = {ssl.CERT_OPTIONAL: 1, ssl.CERT_REQUIRED: 3}[ctx.verify_mode]  # SSL_VERIFY_PEER (| FAIL_IF_NO_PEER_CERT)
    if not ptr or lib.SSL_CTX_get_options(ptr) != int(ctx.options) or lib.SSL_CTX_get_verify_mode(ptr) != verify:
        log.debug("the SSL context's OpenSSL object was not found: the certificate request names no CA")
        return
    for cert in trusted:
        der = cert.public_bytes(serialization.Encoding.DER)
        buf = ctypes.create_string_buffer(der, len(der))
        cursor = ctypes.c_void_p(ctypes.addressof(buf))
        x = lib.d2i_X509(None, ctypes.byref(cursor), len(der))
        if x:
            lib.SSL_CTX_add_client_CA(ptr, x)  # copies the subject name
            lib.X509_free(x)


def server_context(cfg: SslConfig) -> ssl.SSLContext:
    """A listener's context: its key store, and client certificates per ``ssl.client.auth``."""
    if load_keystore(cfg) is None:
        raise TlsError("an SSL listener needs a key store: ssl.keystore.location, or ssl.keystore.key with "
                       "ssl.keystore.certificate.chain")
    ctx = _base(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), cfg)
    ctx.verify_mode = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL,
                       "none": ssl.CERT_NONE}[cfg.client_auth]
    trusted = load_truststore(cfg) if ctx.verify_mode != ssl.CERT_NONE and not cfg.ca_directory else None
    if trusted:
        _name_trusted_issuers(ctx, trusted)
    return ctx


def client_context(cfg: SslConfig) -> ssl.SSLContext:
    """A client's context: the broker's certificate checked against the trust store and, with
    ``ssl.endpoint.identification.algorithm=https`` (the default), against the host name."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = cfg.verify_certificates and \
        (cfg.endpoint_identification_algorithm or "").strip().lower() == "https"
    ctx.verify_mode = ssl.CERT_REQUIRED if cfg.verify_certificates else ssl.CERT_NONE
    return _base(ctx, cfg)


def client_ssl_config(conf: Mapping[str, Any]) -> SslConfig:
    """A client's ``SslConfig`` from its properties: Java's ``ssl.*`` names, and librdkafka's
    (``ssl.ca.location``, ``ssl.certificate.location``, ``ssl.key.location`` and their
    ``.pem`` forms, ``enable.ssl.certificate.verification``) where it names them otherwise."""
    values = {k: v for k, v in conf.items() if k in _FIELDS and v is not None}
    ca = conf.get("ssl.ca.location")
    if ca and not os.path.exists(ca):
        raise TlsError(f"ssl.ca.location={ca} does not exist")
    if ca and os.path.isdir(ca):
        values["ca_directory"] = ca
    elif ca:
        values.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": ca})
    if conf.get("ssl.ca.pem"):
        values.update({"ssl.truststore.type": "PEM", "ssl.truststore.certificates": conf["ssl.ca.pem"]})
    chain = conf.get("ssl.certificate.pem") or (
        _read(conf["ssl.certificate.location"], "ssl.certificate.location").decode()
        if conf.get("ssl.certificate.location") else None)
    key = conf.get("ssl.key.pem") or (
        _read(conf["ssl.key.location"], "ssl.key.location").decode() if conf.get("ssl.key.location") else None)
    if bool(chain) != bool(key):
        raise TlsError("a client certificate needs its key: set ssl.certificate.location (or .pem) and "
                       "ssl.key.location (or .pem) together")
    if chain:
        values.update({"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": chain,
                       "ssl.keystore.key": key})
    alg = values.get("ssl.endpoint.identification.algorithm")
    if alg is not None and str(alg).strip().lower() == "none":
        values["ssl.endpoint.identification.algorithm"] = ""
    directory = values.pop("ca_directory", None)
    cfg = ssl_config(values)
    if directory or conf.get("enable.ssl.certificate.verification") is False:
        cfg = dataclasses.replace(cfg, ca_directory=directory,
                                  verify_certificates=conf.get("enable.ssl.certificate.verification") is not False)
    return cfg


def peer_dn(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> str | None:
    """The peer certificate's subject as an RFC 2253 name, or None when it presented none."""
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    return x509.load_der_x509_certificate(der).subject.rfc4514_string()
