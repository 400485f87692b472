"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677): credentials as Kafka stores them, and
both sides of the exchange as sans-IO state machines.

A stored credential keeps the salt, StoredKey, ServerKey and iteration count, never the
password; its text form is Kafka's (``salt=...,stored_key=...,server_key=...,iterations=N``,
base64), as ZooKeeper's /config/users/<user> holds it."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from dataclasses import dataclass
from typing import Callable, Protocol

from rivulet.security.principal import USER_TYPE, KafkaPrincipal
from rivulet.security.sasl import SaslAuthenticationError, SaslError


@dataclass(frozen=True)
class ScramMechanism:
    name: str
    hash_name: str
    type_code: int  # AlterUserScramCredentials' mechanism byte
    min_iterations: int = 4096


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", "sha256", 1)
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", "sha512", 2)
MECHANISMS = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
BY_TYPE = {m.type_code: m for m in MECHANISMS.values()}
SCRAM_MECHANISM_NAMES = tuple(MECHANISMS)
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096


def _hmac(mech: ScramMechanism, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, mech.hash_name).digest()


def _h(mech: ScramMechanism, data: bytes) -> bytes:
    return hashlib.new(mech.hash_name, data).digest()


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b))


def salted_password(mech: ScramMechanism, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(mech.hash_name, password.encode(), salt, iterations)


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_salted_password(cls, mech: ScramMechanism, salted: bytes, salt: bytes, iterations: int
                             ) -> ScramCredential:
        client_key = _hmac(mech, salted, b"Client Key")
        return cls(salt, _h(mech, client_key), _hmac(mech, salted, b"Server Key"), iterations)

    @classmethod
    def from_password(cls, mech: ScramMechanism, password: str, iterations: int = DEFAULT_ITERATIONS,
                      salt: bytes | None = None) -> ScramCredential:
        salt = salt if salt is not None else os.urandom(32)
        return cls.from_salted_password(mech, salted_password(mech, password, salt, iterations), salt, iterations)

    def to_text(self) -> str:
        b64 = base64.b64encode
        return (f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
                f"server_key={b64(self.server_key).decode()},iterations={self.iterations}")

    @classmethod
    def from_text(cls, text: str) -> ScramCredential:
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        try:
            return cls(base64.b64decode(fields["salt"]), base64.b64decode(fields["stored_key"]),
                       base64.b64decode(fields["server_key"]), int(fields["iterations"]))
        except (KeyError, ValueError) as e:
            raise ValueError(f"not a SCRAM credential: {e}") from None


def _nonce() -> str:
    return base64.b64encode(os.urandom(24)).decode().replace(",", "-")


def _sasl_name(user: str) -> str:
    return user.replace("=", "=3D").replace(",", "=2C")


def _user(sasl_name: str) -> str:
    if re.search(r"=(?!2C|3D)", sasl_name):
        raise SaslError("Invalid username: " + sasl_name)
    return sasl_name.replace("=2C", ",").replace("=3D", "=")


def _attributes(message: str) -> dict[str, str]:
    out = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise SaslError(f"Invalid SCRAM message attribute '{part[:20]}'")
        out[key] = value
    return out


_CLIENT_FIRST = re.compile(r"^n,(?:a=(?P<authzid>[^,]*))?,(?P<bare>n=(?P<name>[^,]*),r=(?P<nonce>[^,]+)(?P<ext>(?:,[^,]+)*))$")


class TokenLookup(Protocol):
    """A delegation token's credential by token id and mechanism name: (credential, owner name,
    expiry ms), or None for no live token."""

    def __call__(self, token_id: str, mechanism: str) -> tuple[ScramCredential, str, int] | None: ...


class ScramServer:
    """The broker's side: client-first -> server-first, client-final -> server-final. With
    ``tokens``, a client-first message carrying the ``tokenauth=true`` extension authenticates a
    delegation token (its id as user name) and the client is the token's owner."""

    def __init__(self, mech: ScramMechanism, lookup: Callable[[str, str], ScramCredential | None],
                 tokens: TokenLookup | None = None) -> None:
        self.mechanism = mech.name
        self._mech = mech
        self._lookup = lookup
        self._tokens = tokens
        self._token_owner: str | None = None
        self._token_expiry_ms: int | None = None
        self._state = "first"
        self._user: str | None = None
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""

    def evaluate(self, response: bytes) -> bytes:
        try:
            text = response.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslError("SCRAM message is not UTF-8") from None
        if self._state == "first":
            return self._first(text)
        if self._state == "final":
            return self._final(text)
        raise SaslError(f"Unexpected SCRAM message in state {self._state}")

    def _first(self, text: str) -> bytes:
        self._state = "failed"
        m = _CLIENT_FIRST.match(text)
        if m is None:
            raise SaslError("Invalid SCRAM client first message")
        user = _user(m["name"])
        extensions = dict(e.partition("=")[::2] for e in m["ext"].split(",") if e)
        if extensions.get("tokenauth", "").lower() == "true":
            found = self._tokens(user, self.mechanism) if self._tokens is not None else None
            if found is None:
                raise SaslError("Authentication failed: Invalid user credentials")
            credential, self._token_owner, self._token_expiry_ms = found
        else:
            credential = self._lookup(user, self.mechanism)
        if credential is None:
            raise SaslError("Authentication failed: Invalid user credentials")
        if m["authzid"] and m["authzid"] != user:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username")
        if credential.iterations < self._mech.min_iterations:
            raise SaslError(f"Iterations {credential.iterations} is less than the minimum "
                            f"{self._mech.min_iterations} for {self.mechanism}")
        self._user, self._credential = user, credential
        self._client_first_bare = m["bare"]
        self._nonce = m["nonce"] + _nonce()
        self._server_first = (f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},"
                              f"i={credential.iterations}")
        self._state = "final"
        return self._server_first.encode()

    def _final(self, text: str) -> bytes:
        self._state = "failed"
        without_proof, sep, proof_b64 = text.rpartition(",p=")
        if not sep:
            raise SaslError("Invalid SCRAM client final message")
        attrs = _attributes(without_proof)
        if attrs.get("r") != self._nonce:
            raise SaslError("Invalid client nonce in the final client message.")
        assert self._credential is not None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = _hmac(self._mech, self._credential.stored_key, auth_message)
        try:
            client_key = _xor(base64.b64decode(proof_b64, validate=True), signature)
        except ValueError:
            raise SaslError("Invalid SCRAM client proof") from None
        if not hmac.compare_digest(_h(self._mech, client_key), self._credential.stored_key):
            raise SaslError("Invalid client credentials")
        server_signature = _hmac(self._mech, self._credential.server_key, auth_message)
        self._credential = None
        self._state = "complete"
        return b"v=" + base64.b64encode(server_signature)

    @property
    def complete(self) -> bool:
        return self._state == "complete"

    def principal(self) -> KafkaPrincipal:
        assert self._user is not None
        if self._token_owner is not None:
            return KafkaPrincipal(USER_TYPE, self._token_owner, token_authenticated=True)
        return KafkaPrincipal(USER_TYPE, self._user)

    def credential_expiry_ms(self) -> int | None:
        """A token's session ends when the token expires (KIP-368's credential lifetime)."""
        return self._token_expiry_ms


class ScramClient:
    """A client's side; checks the server's signature, so a broker that does not hold the
    credential cannot pass itself off."""

    def __init__(self, mechanism: str, username: str, password: str, token_auth: bool = False) -> None:
        """``token_auth``: ``username`` is a delegation token's id and ``password`` its base64
        HMAC (the ``tokenauth=true`` extension)."""
        if mechanism not in MECHANISMS:
            raise ValueError(f"unknown SCRAM mechanism {mechanism}")
        self.mechanism = mechanism
        self._mech = MECHANISMS[mechanism]
        self._username, self._password = username, password
        self._nonce = _nonce()
        self._client_first_bare = f"n={_sasl_name(username)},r={self._nonce}" + (",tokenauth=true" if token_auth else "")
        self._server_signature = b""
        self._state = "first"

    def initial_response(self) -> bytes:
        return ("n,," + self._client_first_bare).encode()

    def evaluate(self, challenge: bytes) -> bytes | None:
        text = challenge.decode("utf-8", "replace")
        if self._state == "first":
            attrs = _attributes(text)
            nonce, salt, iterations = attrs.get("r", ""), attrs.get("s"), attrs.get("i")
            if not nonce.startswith(self._nonce) or salt is None or iterations is None:
                raise SaslError("Invalid SCRAM server first message")
            if int(iterations) < self._mech.min_iterations:
                raise SaslError(f"Requested iterations {iterations} is less than the minimum "
                                f"{self._mech.min_iterations} for {self.mechanism}")
            salted = salted_password(self._mech, self._password, base64.b64decode(salt), int(iterations))
            without_proof = f"c=biws,r={nonce}"
            auth_message = f"{self._client_first_bare},{text},{without_proof}".encode()
            client_key = _hmac(self._mech, salted, b"Client Key")
            proof = _xor(client_key, _hmac(self._mech, _h(self._mech, client_key), auth_message))
            self._server_signature = _hmac(self._mech, _hmac(self._mech, salted, b"Server Key"), auth_message)
            self._state = "final"
            return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
        if self._state == "final":
            attrs = _attributes(text)
            if "e" in attrs:
                raise SaslAuthenticationError(f"SCRAM authentication failed: {attrs['e']}")
            if not hmac.compare_digest(base64.b64decode(attrs.get("v", "")), self._server_signature):
                raise SaslError("Invalid server signature in the SCRAM server final message")
            self._state = "complete"
            return None
        raise SaslError(f"Unexpected SCRAM challenge in state {self._state}")

    @property
    def complete(self) -> bool:
        return self._state == "complete"
