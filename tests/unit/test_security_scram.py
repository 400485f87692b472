"""SCRAM: RFC 7677's exchange, both state machines against each other, Kafka's credential
text, and the broker's credential APIs' validation."""

from __future__ import annotations

import asyncio
import base64

import pytest

from rivulet.protocol.errors import ErrorCode
from rivulet.security import scram
from rivulet.security.principal import KafkaPrincipal
from rivulet.security.sasl import SaslAuthenticationError, SaslError
from rivulet.security.scram import SCRAM_SHA_256, SCRAM_SHA_512, ScramClient, ScramCredential, ScramServer
from rivulet.server.scram import ScramCredentials, Upsertion

pytestmark = pytest.mark.fast

RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")


def test_rfc7677_example(monkeypatch):
    nonces = iter(["rOprNGfwEbeRWgbNEkqO", "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"])
    monkeypatch.setattr(scram, "_nonce", lambda: next(nonces))
    client = ScramClient("SCRAM-SHA-256", "user", "pencil")
    credential = ScramCredential.from_password(SCRAM_SHA_256, "pencil", 4096, RFC_SALT)
    server = ScramServer(SCRAM_SHA_256, lambda u, m: credential if (u, m) == ("user", "SCRAM-SHA-256") else None)
    assert client.initial_response() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    first = server.evaluate(client.initial_response())
    assert first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = client.evaluate(first)
    assert final == (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert server.evaluate(final) == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert client.evaluate(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=") is None
    assert server.complete and client.complete and server.principal() == KafkaPrincipal("User", "user")


@pytest.mark.parametrize("mech", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_wrong_password_and_unknown_user(mech):
    cred = ScramCredential.from_password(mech, "secret")
    lookup = {("al,ice=", mech.name): cred}.get
    client = ScramClient(mech.name, "al,ice=", "secret")
    server = ScramServer(mech, lambda u, m: lookup((u, m)))
    assert client.evaluate(server.evaluate(client.initial_response())) is not None
    bad = ScramClient(mech.name, "al,ice=", "wrong")
    server = ScramServer(mech, lambda u, m: lookup((u, m)))
    with pytest.raises(SaslError) as e:
        server.evaluate(bad.evaluate(server.evaluate(bad.initial_response())))
    assert not isinstance(e.value, SaslAuthenticationError)  # the client gets the generic message
    with pytest.raises(SaslError, match="Invalid user credentials"):
        ScramServer(mech, lambda u, m: None).evaluate(ScramClient(mech.name, "bob", "x").initial_response())


def test_credential_text_round_trip():
    cred = ScramCredential.from_password(SCRAM_SHA_512, "pw", 8192)
    text = cred.to_text()
    assert text.startswith("salt=") and ",stored_key=" in text and text.endswith(",iterations=8192")
    assert ScramCredential.from_text(text) == cred


class MemoryStore:
    def __init__(self) -> None:
        self.saved: dict[str, dict[str, str]] = {}

    def load_scram_credentials(self) -> dict[str, dict[str, str]]:
        return dict(self.saved)

    async def store_scram_credentials(self, user, credentials) -> None:
        self.saved[user] = dict(credentials)


def _upsert(user: str, mech: int = 1, iterations: int = 4096) -> Upsertion:
    salted = scram.salted_password(scram.BY_TYPE.get(mech, SCRAM_SHA_256), "pw", b"salt", iterations)
    return Upsertion(user, mech, iterations, b"salt", salted)


def test_alter_and_describe_validation():
    store = MemoryStore()
    creds = ScramCredentials(store)
    results = dict(asyncio.run(creds.alter([("nobody", 1)], [
        _upsert("alice"), _upsert("alice", 2), _upsert("", 1), _upsert("bob", 9), _upsert("carol", 1, 100),
        _upsert("dave", 1, 20000), _upsert("erin", 2, 8192)])))
    assert results["nobody"].code == ErrorCode.RESOURCE_NOT_FOUND
    assert results["alice"].code == ErrorCode.DUPLICATE_RESOURCE
    assert results[""].code == ErrorCode.UNACCEPTABLE_CREDENTIAL
    assert results["bob"].code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert results["carol"].message == "Too few iterations"
    assert results["dave"].message == "Too many iterations"
    assert results["erin"] is None
    assert creds.lookup("erin", "SCRAM-SHA-512").iterations == 8192 and "erin" in store.saved
    assert ScramCredentials(store).lookup("erin", "SCRAM-SHA-512") == creds.lookup("erin", "SCRAM-SHA-512")
    described = dict(creds.describe(None))
    assert described == {"erin": [(2, 8192)]}
    described = dict(creds.describe(["erin", "zed", "zed"]))
    assert described["zed"].code == ErrorCode.DUPLICATE_RESOURCE
    assert dict(creds.describe(["zed"]))["zed"].code == ErrorCode.RESOURCE_NOT_FOUND
    assert dict(asyncio.run(creds.alter([("erin", 2)], []))) == {"erin": None}
    assert creds.lookup("erin", "SCRAM-SHA-512") is None and store.saved["erin"] == {}
