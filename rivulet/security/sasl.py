"""SASL mechanisms as sans-IO state machines, for the broker (``SaslServer``) and the clients
(``SaslClient``). Bytes in, bytes out: the broker's authenticator and the clients' connections
carry the tokens in SaslAuthenticate requests (or raw frames after a v0 handshake).

A mechanism's server raises ``SaslAuthenticationError`` when the client may read why
(Kafka's SaslAuthenticationException), and ``SaslError`` otherwise: the broker then answers
with a generic message naming only the mechanism, so that nothing about stored credentials
leaks to an unauthenticated client."""

from __future__ import annotations

from typing import Callable, Generator, Protocol

from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages.sasl_authenticate_request import SaslAuthenticateRequest
from rivulet.protocol.messages.sasl_handshake_request import SaslHandshakeRequest
from rivulet.protocol.schema import Request, Struct
from rivulet.security.principal import USER_TYPE, KafkaPrincipal


class SaslError(Exception):
    """Authentication failed; the client gets a generic message."""


class SaslAuthenticationError(SaslError):
    """Authentication failed with a message meant for the client; ``detail``, when given, is
    the reason for the broker's log only (Kafka keeps a refused token's reason off the wire)."""

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.detail = detail


class AuthenticationFailed(Exception):
    """The broker closes the connection, after writing ``response`` when there is one."""

    def __init__(self, response: Struct | None = None) -> None:
        super().__init__()
        self.response = response


class SaslServer(Protocol):
    mechanism: str

    def evaluate(self, response: bytes) -> bytes:
        """The next challenge for the client's ``response``; raises SaslError on failure."""
        ...

    @property
    def complete(self) -> bool: ...

    def principal(self) -> KafkaPrincipal:
        """Who authenticated (once complete)."""
        ...

    def credential_expiry_ms(self) -> int | None:
        """When the credential expires (epoch ms; a token's ``exp``), else None."""
        ...


class SaslClient(Protocol):
    mechanism: str

    def initial_response(self) -> bytes: ...

    def evaluate(self, challenge: bytes) -> bytes | None:
        """The answer to a server challenge, or None when there is nothing more to send."""
        ...

    @property
    def complete(self) -> bool: ...


# ---------------------------------------------------------------- PLAIN (RFC 4616)
PLAIN = "PLAIN"


class PlainServer:
    """PLAIN on the broker: ``authzid NUL authcid NUL passwd``, checked against the
    ``user_<name>="<password>"`` options of the listener's PlainLoginModule."""

    mechanism = PLAIN

    def __init__(self, verify: Callable[[str, str], bool]) -> None:
        self._verify = verify
        self._user: str | None = None

    def evaluate(self, response: bytes) -> bytes:
        parts = response.decode("utf-8", "replace").split("\x00")
        if len(parts) != 3:
            raise SaslAuthenticationError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, user, password = parts
        if not user:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        if not self._verify(user, password):
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username")
        self._user = user
        return b""

    @property
    def complete(self) -> bool:
        return self._user is not None

    def principal(self) -> KafkaPrincipal:
        assert self._user is not None
        return KafkaPrincipal(USER_TYPE, self._user)

    def credential_expiry_ms(self) -> int | None:
        return None


def plain_users(options: dict[str, str]) -> dict[str, str]:
    """The ``user_<name>`` options of a PlainLoginModule: name -> password."""
    return {k[len("user_"):]: v for k, v in options.items() if k.startswith("user_")}


class PlainClient:
    mechanism = PLAIN

    def __init__(self, username: str, password: str) -> None:
        self.username, self.password = username, password
        self._sent = False

    def initial_response(self) -> bytes:
        self._sent = True
        return b"\x00" + self.username.encode() + b"\x00" + self.password.encode()

    def evaluate(self, challenge: bytes) -> bytes | None:
        return None

    @property
    def complete(self) -> bool:
        return self._sent


# ---------------------------------------------------------------- a client's exchange
def client_exchange(client: SaslClient) -> Generator[Request[Struct], Struct, int]:
    """The client's side of authentication as Kafka requests: send each request this yields
    and send back its response; returns the session lifetime in ms (0: none). Raises
    SaslAuthenticationError with the broker's message when it refuses."""
    resp = yield SaslHandshakeRequest(mechanism=client.mechanism)
    if resp.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM:
        raise SaslAuthenticationError(f"Unsupported SASL mechanism {client.mechanism}: the broker's listener "
                                      f"enables {', '.join(resp.mechanisms or []) or 'none'}")
    if resp.error_code:
        raise SaslAuthenticationError(f"SaslHandshake failed: {ErrorCode(resp.error_code).name}")
    token: bytes | None = client.initial_response()
    lifetime = 0
    while token is not None:
        resp = yield SaslAuthenticateRequest(auth_bytes=token)
        if resp.error_code:
            raise SaslAuthenticationError(resp.error_message or ErrorCode(resp.error_code).name)
        lifetime = resp.session_lifetime_ms or 0
        token = client.evaluate(bytes(resp.auth_bytes or b""))
        if token is None and not client.complete:
            raise SaslError(f"SASL/{client.mechanism} ended before the exchange completed")
    return lifetime
