"""SASL on the broker's connections, as Kafka's SaslServerAuthenticator.

A connection on a SASL_PLAINTEXT or SASL_SSL listener gets a ``SaslSession``. Until it has
authenticated, only ApiVersions, SaslHandshake and SaslAuthenticate are served: any other
request closes the connection. After a v0 SaslHandshake the tokens come as raw size-prefixed
frames (old clients); after v1, in SaslAuthenticate requests. A failure is answered with
SASL_AUTHENTICATION_FAILED and a message, logged once (never with the secret), and the
connection is closed once the answer is written.

Re-authentication (KIP-368): the session lifetime is the smaller of the mechanism's
``connections.max.reauth.ms`` and the credential's own expiry (an OAUTHBEARER token's exp),
returned in SaslAuthenticate v1+. A SaslHandshake on an authenticated connection starts a new
exchange that must end with the same principal and mechanism; any other request arriving
after the session expired closes the connection.
"""

from __future__ import annotations

import hmac
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, NoReturn

from rivulet.common.config import ConfigError
from rivulet.common.logs import RateLimitFilter
from rivulet.protocol import framing
from rivulet.protocol.schema import Struct
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages.sasl_authenticate_response import SaslAuthenticateResponse
from rivulet.protocol.messages.sasl_handshake_response import SaslHandshakeResponse
from rivulet.security.client_config import SaslCredentials, sasl_credentials
from rivulet.security.jaas import (
    OAUTHBEARER_LOGIN_MODULE,
    PLAIN_LOGIN_MODULE,
    SCRAM_LOGIN_MODULE,
    JaasError,
    single_entry,
)
from rivulet.security.oauthbearer import (
    OAUTHBEARER,
    JwtValidator,
    OAuthBearerServer,
    TokenValidator,
    UnsecuredValidator,
)
from rivulet.security.principal import KafkaPrincipal
from rivulet.security.sasl import (
    PLAIN,
    AuthenticationFailed,
    PlainServer,
    SaslAuthenticationError,
    SaslError,
    SaslServer,
    plain_users,
)
from rivulet.security.scram import MECHANISMS as SCRAM_MECHANISMS
from rivulet.security.scram import ScramCredential, ScramServer, TokenLookup
from rivulet.server.config import SASL_PROTOCOLS, BrokerConfig

log = logging.getLogger("rivulet.server.authentication")
# A client retrying bad credentials in a loop gets one line per interval, with a count.
log.addFilter(RateLimitFilter(level=logging.INFO))

SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36


@dataclass
class SaslListenerConfig:
    """One SASL listener's mechanisms: which are enabled, how to make each one's server, and
    each one's ``connections.max.reauth.ms``."""

    listener: str
    mechanisms: tuple[str, ...]
    servers: dict[str, Callable[[], SaslServer]]
    reauth_ms: dict[str, int] = field(default_factory=dict)
    max_receive_size: int = 524288  # sasl.server.max.receive.size

    def new_session(self, peer: tuple[str, int], now_ms: Callable[[], int]) -> SaslSession:
        return SaslSession(self, peer, now_ms)


# Session states.
HANDSHAKE, AUTHENTICATE, COMPLETE = "handshake", "authenticate", "complete"


class SaslSession:
    """One connection's authentication state (see the module's docstring)."""

    def __init__(self, config: SaslListenerConfig, peer: tuple[str, int], now_ms: Callable[[], int]) -> None:
        self.config = config
        self.peer = peer
        self.now_ms = now_ms
        self.state = HANDSHAKE
        self.raw_tokens = False  # after a v0 handshake
        self.principal: KafkaPrincipal | None = None
        self.mechanism: str | None = None
        self.expires_at_ms: int | None = None
        self._server: SaslServer | None = None
        self._reauthenticating = False

    @property
    def authenticated(self) -> bool:
        return self.principal is not None and not self._reauthenticating

    def receive_limit(self) -> int | None:
        return None if self.authenticated else self.config.max_receive_size

    def session_expired(self) -> bool:
        return self.expires_at_ms is not None and self.now_ms() > self.expires_at_ms

    def intercepts(self, api_key: int) -> bool:
        """Whether this request is the authenticator's rather than KafkaApis'."""
        if self.state != COMPLETE:
            return api_key != framing.API_VERSIONS_KEY or self.state != HANDSHAKE or self._reauthenticating
        return api_key == SASL_HANDSHAKE_KEY

    # ------------------------------------------------------------ requests
    def handle(self, api_key: int, api_version: int, body: Struct) -> Struct:
        """The answer to a SASL request (or a request during authentication); raises
        AuthenticationFailed when the connection must close."""
        name = framing.request_class(api_key).NAME
        if self.state == COMPLETE:
            # A handshake on an authenticated connection: re-authentication (KIP-368).
            self.state = HANDSHAKE
            self._reauthenticating = True
        if self.state == HANDSHAKE:
            if api_key != SASL_HANDSHAKE_KEY:
                self._fail(f"Unexpected Kafka request of type {name} during SASL handshake.")
            return self._handshake(api_version, body.mechanism)
        if api_key != SASL_AUTHENTICATE_KEY:
            message = f"Unexpected Kafka request of type {name} during SASL authentication."
            response = None
            if api_key == SASL_HANDSHAKE_KEY:
                response = SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
            self._fail(message, response)
        return self._authenticate(api_version, bytes(body.auth_bytes or b""))

    def raw_token(self, token: bytes) -> bytes:
        """A v0 client's token; the challenge to write back as a raw frame."""
        try:
            challenge = self._evaluate(token)
        except SaslError as e:
            self._fail(self._failure_message(e), detail=_detail(e))
        if self._server is not None and self._server.complete:
            self._completed()
        return challenge

    def _handshake(self, version: int, mechanism: str) -> SaslHandshakeResponse:
        enabled = list(self.config.mechanisms)
        if mechanism not in self.config.mechanisms or mechanism not in self.config.servers:
            self._fail(f"Unsupported SASL mechanism {mechanism}",
                       SaslHandshakeResponse(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=enabled))
        if self._reauthenticating and mechanism != self.mechanism:
            self._fail(f"SASL mechanism '{mechanism}' requested by client is not supported for re-authentication "
                       f"of mechanism '{self.mechanism}'",
                       SaslHandshakeResponse(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=enabled))
        self.mechanism = mechanism
        self._server = self.config.servers[mechanism]()
        self.state = AUTHENTICATE
        self.raw_tokens = version == 0
        return SaslHandshakeResponse(error_code=0, mechanisms=enabled)

    def _authenticate(self, version: int, token: bytes) -> SaslAuthenticateResponse:
        try:
            challenge = self._evaluate(token)
        except SaslError as e:
            message = self._failure_message(e)
            self._fail(message, SaslAuthenticateResponse(
                error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=message, auth_bytes=b"",
                session_lifetime_ms=0), detail=_detail(e))
        lifetime = 0
        if self._server is not None and self._server.complete:
            lifetime = self._completed()
        return SaslAuthenticateResponse(error_code=0, error_message=None, auth_bytes=challenge,
                                        session_lifetime_ms=lifetime)

    def _evaluate(self, token: bytes) -> bytes:
        assert self._server is not None
        return self._server.evaluate(token)

    def _completed(self) -> int:
        """Record the principal and the session's end; the session lifetime in ms (0: none)."""
        assert self._server is not None and self.mechanism is not None
        principal = self._server.principal()
        if self._reauthenticating and principal != self.principal:
            self._fail(f"Cannot change principals during re-authentication from {self.principal}: {principal}",
                       SaslAuthenticateResponse(
                           error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, auth_bytes=b"", session_lifetime_ms=0,
                           error_message="Cannot change principals during re-authentication"))
        now = self.now_ms()
        max_reauth = self.config.reauth_ms.get(self.mechanism, 0)
        expiry = self._server.credential_expiry_ms()
        lifetime = 0
        self.expires_at_ms = None
        if expiry is not None or max_reauth > 0:
            candidates = ([expiry - now] if expiry is not None else []) + ([max_reauth] if max_reauth > 0 else [])
            lifetime = max(0, min(candidates))
            self.expires_at_ms = now + lifetime
        self.principal = principal
        self.state = COMPLETE
        self._reauthenticating = False
        self._server = None
        self.raw_tokens = False
        log.debug("%s authenticated as %s with %s on %s", self.peer, principal, self.mechanism, self.config.listener)
        return lifetime

    def _failure_message(self, e: SaslError) -> str:
        if isinstance(e, SaslAuthenticationError):
            return str(e)
        what = "re-authentication" if self._reauthenticating else "authentication"
        return f"Authentication failed during {what} due to invalid credentials with SASL mechanism {self.mechanism}"

    def _fail(self, message: str, response: Struct | None = None, detail: str | None = None) -> NoReturn:
        # Once per failure, with the peer and the reason; the tokens (secrets) are never logged.
        log.info("Failed authentication with %s:%s on listener %s (%s)%s", self.peer[0], self.peer[1],
                 self.config.listener, message, f": {detail}" if detail else "")
        self._server = None
        raise AuthenticationFailed(response)


def _detail(e: SaslError) -> str | None:
    return e.detail if isinstance(e, SaslAuthenticationError) else None


# ---------------------------------------------------------------- building a listener's mechanisms
def _jaas_options(config: BrokerConfig, listener: str, mechanism: str) -> dict[str, str]:
    """The options of the listener's JAAS entry for ``mechanism``, which Kafka requires."""
    text = config.listener_value(listener, "sasl.jaas.config", mechanism)
    prop = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    if not text:
        raise ConfigError(f"SASL mechanism {mechanism} on listener {listener} needs its JAAS configuration: "
                          f"set {prop}")
    try:
        entry = single_entry(text, prop)
    except JaasError as e:
        raise ConfigError(str(e), prop) from None
    expected = _LOGIN_MODULES[mechanism]
    if entry.login_module != expected:
        raise ConfigError(f"{prop} names login module {entry.login_module}; {mechanism} needs {expected}", prop)
    return entry.options


_LOGIN_MODULES = {PLAIN: PLAIN_LOGIN_MODULE, **{m: SCRAM_LOGIN_MODULE for m in SCRAM_MECHANISMS},
                  OAUTHBEARER: OAUTHBEARER_LOGIN_MODULE}
JWT_VALIDATOR_CLASSES = ("org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
                         "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler")


def _token_validator(config: BrokerConfig, listener: str, options: dict[str, str]) -> TokenValidator:
    """Signed JWTs when the listener's OAUTHBEARER callback handler is Kafka's JWT validator,
    else Kafka's unsecured tokens (its default)."""
    def value(name: str) -> Any:
        return config.listener_value(listener, name, OAUTHBEARER)
    handler = value("sasl.server.callback.handler.class")
    if not handler:
        return UnsecuredValidator.from_options(options)
    if handler not in JWT_VALIDATOR_CLASSES:
        raise ConfigError(f"sasl.server.callback.handler.class {handler} is not supported for OAUTHBEARER; "
                          f"Rivulet validates with {JWT_VALIDATOR_CLASSES[0]} or, unset, unsecured tokens")
    url = value("sasl.oauthbearer.jwks.endpoint.url")
    if not url:
        raise ConfigError("OAUTHBEARER with OAuthBearerValidatorCallbackHandler needs "
                          "sasl.oauthbearer.jwks.endpoint.url")
    return JwtValidator(url, tuple(value("sasl.oauthbearer.expected.audience") or ()),
                        value("sasl.oauthbearer.expected.issuer"), value("sasl.oauthbearer.sub.claim.name"),
                        value("sasl.oauthbearer.scope.claim.name"), value("sasl.oauthbearer.clock.skew.seconds"),
                        value("sasl.oauthbearer.jwks.endpoint.refresh.ms"))


def inter_broker_sasl(config: BrokerConfig, listener: str) -> SaslCredentials:
    """How this broker authenticates to the others on a SASL inter-broker listener: with
    ``sasl.mechanism.inter.broker.protocol`` and the username and password (or unsecured
    token options) of that listener's JAAS configuration for the mechanism, as Kafka's."""
    mechanism = config["sasl.mechanism.inter.broker.protocol"]
    if mechanism not in config.listener_value(listener, "sasl.enabled.mechanisms"):
        raise ConfigError(f"sasl.mechanism.inter.broker.protocol must be included in sasl.enabled.mechanisms when "
                          f"SASL is used for inter-broker communication: {mechanism} is not enabled on {listener}")
    try:
        credentials = sasl_credentials({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
                                        "sasl.jaas.config": config.listener_value(listener, "sasl.jaas.config",
                                                                                  mechanism)})
    except ValueError as e:
        raise ConfigError(f"inter-broker SASL on listener {listener}: {e}") from None
    assert credentials is not None
    return credentials


def plain_users_of(config: BrokerConfig) -> dict[str, str]:
    """The PLAIN users (and passwords) of every SASL listener that enables PLAIN: whom the
    schema registry's HTTP basic authentication also knows."""
    users: dict[str, str] = {}
    for listener, protocol in config.security_protocols.items():
        if protocol in SASL_PROTOCOLS and PLAIN in config.listener_value(listener, "sasl.enabled.mechanisms"):
            users.update(plain_users(_jaas_options(config, listener, PLAIN)))
    return users


def sasl_listener_config(config: BrokerConfig, listener: str,
                         scram: Callable[[str, str], ScramCredential | None],
                         tokens: TokenLookup | None = None) -> SaslListenerConfig:
    """A SASL listener's mechanisms from the broker's properties; ConfigError (start-up stops)
    for a mechanism Rivulet lacks or one without its JAAS configuration. ``tokens``: delegation
    tokens' SCRAM credentials (``tokenauth=true``)."""
    mechanisms = tuple(config.listener_value(listener, "sasl.enabled.mechanisms"))
    servers: dict[str, Callable[[], SaslServer]] = {}
    reauth: dict[str, int] = {}
    for mechanism in mechanisms:
        if mechanism not in _LOGIN_MODULES:
            raise ConfigError(f"SASL mechanism {mechanism} enabled on listener {listener} is not supported by "
                              f"Rivulet; sasl.enabled.mechanisms may name {', '.join(_LOGIN_MODULES)}")
        options = _jaas_options(config, listener, mechanism)
        if mechanism == PLAIN:
            users = plain_users(options)
            servers[mechanism] = lambda users=users: PlainServer(
                lambda u, p: u in users and hmac.compare_digest(users[u].encode(), p.encode()))
        elif mechanism in SCRAM_MECHANISMS:
            servers[mechanism] = lambda m=SCRAM_MECHANISMS[mechanism]: ScramServer(m, scram, tokens)
        else:
            validate = _token_validator(config, listener, options)
            servers[mechanism] = lambda v=validate: OAuthBearerServer(v)
        reauth[mechanism] = config.listener_value(listener, "connections.max.reauth.ms", mechanism)
    return SaslListenerConfig(listener, mechanisms, servers, reauth,
                              config.listener_value(listener, "sasl.server.max.receive.size"))
