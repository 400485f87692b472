"""A client's SASL settings from Kafka's client properties, as both librdkafka and the Java
client name them: ``security.protocol``, ``sasl.mechanism`` (librdkafka: ``sasl.mechanisms``),
``sasl.username``/``sasl.password`` (librdkafka), ``sasl.jaas.config`` (Java), and for
OAUTHBEARER ``sasl.oauthbearer.config`` with ``enable.sasl.oauthbearer.unsecure.jwt``
(librdkafka's unsecured tokens), an ``oauth_cb`` (confluent-kafka's token callback) or Kafka's
``unsecuredLogin*`` JAAS options. Rivulet's client, its CLI, Spark and the broker's own
inter-broker connections all build their SASL clients here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from rivulet.security.jaas import (
    OAUTHBEARER_LOGIN_MODULE,
    PLAIN_LOGIN_MODULE,
    SCRAM_LOGIN_MODULE,
    JaasError,
    single_entry,
)
from rivulet.security.oauthbearer import OAUTHBEARER, OAuthBearerClient, unsecured_token
from rivulet.security.sasl import PLAIN, PlainClient, SaslClient
from rivulet.security.scram import MECHANISMS as SCRAM_MECHANISMS
from rivulet.security.scram import ScramClient

SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
# The SASL properties this module reads; any of them on a non-SASL protocol is an error.
SASL_PROPERTIES = ("sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password", "sasl.jaas.config",
                   "sasl.oauthbearer.config", "enable.sasl.oauthbearer.unsecure.jwt", "oauth_cb")
_MODULES = {PLAIN: PLAIN_LOGIN_MODULE, OAUTHBEARER: OAUTHBEARER_LOGIN_MODULE,
            **{m: SCRAM_LOGIN_MODULE for m in SCRAM_MECHANISMS}}


@dataclass(frozen=True)
class SaslCredentials:
    """What a client authenticates with; ``new_client`` makes a fresh exchange per connection."""

    mechanism: str
    username: str = ""
    password: str = field(default="", repr=False)
    token: Callable[[], str] | None = field(default=None, repr=False)
    extensions: Mapping[str, str] = field(default_factory=dict)

    def new_client(self) -> SaslClient:
        if self.mechanism == PLAIN:
            return PlainClient(self.username, self.password)
        if self.mechanism in SCRAM_MECHANISMS:
            return ScramClient(self.mechanism, self.username, self.password,
                               token_auth=self.extensions.get("tokenauth", "").lower() == "true")
        assert self.token is not None
        return OAuthBearerClient(self.token, self.extensions)


def _unsecured_from_jaas(options: Mapping[str, str]) -> Callable[[], str]:
    """Kafka's unsecured login: ``unsecuredLoginStringClaim_<name>``, ``...NumberClaim_``,
    ``...ListClaim_`` (first character is the separator), the principal and scope claim
    names and ``unsecuredLoginLifetimeSeconds``."""
    claims: dict[str, Any] = {}
    for key, value in options.items():
        for prefix, convert in (("unsecuredLoginStringClaim_", str), ("unsecuredLoginNumberClaim_", float),
                                ("unsecuredLoginListClaim_", lambda v: v[1:].split(v[0]) if v else [])):
            if key.startswith(prefix):
                try:
                    claims[key[len(prefix):]] = convert(value)
                except ValueError:
                    raise ValueError(f"sasl.jaas.config: {key} is not a number") from None
    principal_claim = options.get("unsecuredLoginPrincipalClaimName", "sub")
    principal = claims.pop(principal_claim, None)
    if not principal:
        raise ValueError(f"sasl.jaas.config: OAuthBearerLoginModule needs unsecuredLoginStringClaim_{principal_claim} "
                         "(the principal of its unsecured token)")
    lifetime = int(options.get("unsecuredLoginLifetimeSeconds", "3600"))
    return lambda: unsecured_token(str(principal), lifetime, principal_claim, claims=claims)


def _unsecured_from_librdkafka(config: str) -> Callable[[], str]:
    """librdkafka's ``sasl.oauthbearer.config``: ``principal=<p> [scope=a,b] [lifeSeconds=N]
    [principalClaimName=..] [scopeClaimName=..]``."""
    opts = dict(part.partition("=")[::2] for part in config.split())
    principal = opts.get("principal")
    if not principal:
        raise ValueError("sasl.oauthbearer.config needs principal=<name> for an unsecured token")
    lifetime = int(opts.get("lifeSeconds", "3600"))
    scopes = tuple(s for s in opts.get("scope", "").split(",") if s)
    principal_claim, scope_claim = opts.get("principalClaimName", "sub"), opts.get("scopeClaimName", "scope")
    return lambda: unsecured_token(principal, lifetime, principal_claim, scope_claim, scopes)


def sasl_credentials(props: Mapping[str, Any]) -> SaslCredentials | None:
    """The SASL settings of a client's properties (None: the protocol is not SASL). ValueError
    names what is missing, unknown or inconsistent."""
    protocol = str(props.get("security.protocol") or "PLAINTEXT").upper()
    given = [k for k in SASL_PROPERTIES if props.get(k) not in (None, "", False)]
    if protocol not in SASL_PROTOCOLS:
        if given:
            raise ValueError(f"{', '.join(given)} set, but security.protocol is {protocol}: SASL needs "
                             "SASL_PLAINTEXT or SASL_SSL")
        return None
    mechanism = str(props.get("sasl.mechanism") or props.get("sasl.mechanisms") or "GSSAPI").upper()
    if mechanism not in _MODULES:
        raise ValueError(f"sasl.mechanism {mechanism} is not supported; use one of {', '.join(_MODULES)}")
    options: dict[str, str] = {}
    if props.get("sasl.jaas.config"):
        try:
            entry = single_entry(str(props["sasl.jaas.config"]))
        except JaasError as e:
            raise ValueError(str(e)) from None
        if entry.login_module != _MODULES[mechanism]:
            raise ValueError(f"sasl.jaas.config names {entry.login_module}; sasl.mechanism {mechanism} needs "
                             f"{_MODULES[mechanism]}")
        options = dict(entry.options)
    if mechanism == OAUTHBEARER:
        if props.get("oauth_cb") is not None:
            callback = props["oauth_cb"]
            config = str(props.get("sasl.oauthbearer.config") or "")
            return SaslCredentials(mechanism, token=lambda: str(callback(config)[0]))
        if props.get("sasl.oauthbearer.config"):
            if not props.get("enable.sasl.oauthbearer.unsecure.jwt"):
                raise ValueError("sasl.oauthbearer.config makes an unsecured token only with "
                                 "enable.sasl.oauthbearer.unsecure.jwt=true (or give an oauth_cb)")
            return SaslCredentials(mechanism, token=_unsecured_from_librdkafka(str(props["sasl.oauthbearer.config"])))
        if options:
            return SaslCredentials(mechanism, token=_unsecured_from_jaas(options),
                                   extensions={k[len("unsecuredLoginExtension_"):]: v for k, v in options.items()
                                               if k.startswith("unsecuredLoginExtension_")})
        raise ValueError("sasl.mechanism OAUTHBEARER needs a token: oauth_cb, sasl.oauthbearer.config with "
                         "enable.sasl.oauthbearer.unsecure.jwt=true, or sasl.jaas.config")
    username = props.get("sasl.username") or options.get("username")
    password = props.get("sasl.password") or options.get("password")
    if not username or not password:
        raise ValueError(f"sasl.mechanism {mechanism} needs sasl.username and sasl.password (or username and "
                         "password in sasl.jaas.config)")
    # Java's ScramLoginModule option tokenauth=true: the user name and password are a delegation token's.
    token_auth = {"tokenauth": "true"} if options.get("tokenauth", "").lower() == "true" else {}
    return SaslCredentials(mechanism, str(username), str(password), extensions=token_auth)

