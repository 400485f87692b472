"""OAUTHBEARER (RFC 7628) as Kafka speaks it, both sides.

The broker validates a token one of two ways: Kafka's unsecured tokens for development (JWTs
with ``alg: none`` and no signature, as OAuthBearerUnsecuredValidatorCallbackHandler checks
them: an ``exp`` in the future, a principal claim, any required scopes), or signed JWTs
checked against the keys of a JWKS endpoint or file (PyJWT; audience, issuer, the subject and
scope claims' names, clock skew), as OAuthBearerValidatorCallbackHandler. A refused token is
answered with RFC 7628's JSON error as the challenge, written as Kafka writes it
(``{"status":"invalid_token"}``; ``insufficient_scope`` adds the first missing required scope);
the client acknowledges it with a lone 0x01 and only then does authentication fail, with that
same JSON as the message. The reason goes to the broker's log only, as Kafka's.

A client sends a token it was given, or makes an unsecured one from Kafka's
``unsecuredLogin*`` JAAS options or librdkafka's ``sasl.oauthbearer.config``."""

from __future__ import annotations

import base64
import json
import time
import urllib.request
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

from rivulet.common.time import SYSTEM_CLOCK
from rivulet.security.principal import USER_TYPE, KafkaPrincipal
from rivulet.security.sasl import SaslAuthenticationError, SaslError

if TYPE_CHECKING:
    import jwt  # imported where used: PyJWT is needed for signed tokens only

OAUTHBEARER = "OAUTHBEARER"
_SEP = "\x01"


class TokenError(Exception):
    """A token refused; ``status`` is RFC 7628's (invalid_token, insufficient_scope), ``scope``
    the required scope the token lacks."""

    def __init__(self, message: str, status: str = "invalid_token", scope: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.scope = scope

    def json_error(self) -> str:
        """The client's view of the refusal, byte for byte as Kafka's OAuthBearerSaslServer writes it."""
        text = '{"status":%s' % json.dumps(self.status)
        if self.scope is not None:
            text += ', "scope":%s' % json.dumps(self.scope)
        return text + "}"


@dataclass(frozen=True)
class ValidToken:
    principal: str
    expiry_ms: int
    scopes: frozenset[str] = frozenset()


TokenValidator = Callable[[str], ValidToken]


def _b64url_json(part: str) -> dict[str, Any]:  # Any: a JWT's JSON, claims of any shape
    try:
        value = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    except (ValueError, json.JSONDecodeError):
        raise TokenError("the token is not a JWT: a part is not base64url-encoded JSON") from None
    if not isinstance(value, dict):
        raise TokenError("the token is not a JWT: a part is not a JSON object")
    return value


def _scopes(value: Any) -> frozenset[str]:
    if value is None:
        return frozenset()
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list):
        return frozenset(str(v) for v in value)
    raise TokenError("the scope claim is neither a string nor a list")


# ---------------------------------------------------------------- unsecured tokens
@dataclass(frozen=True)
class UnsecuredValidator:
    """Kafka's unsecured validator, with its ``unsecuredValidator*`` JAAS options."""

    principal_claim: str = "sub"
    scope_claim: str = "scope"
    required_scopes: tuple[str, ...] = ()
    clock_skew_ms: int = 0
    now_ms: Callable[[], int] = field(default=SYSTEM_CLOCK.milliseconds)

    @classmethod
    def from_options(cls, options: Mapping[str, str], now_ms: Callable[[], int] | None = None) -> UnsecuredValidator:
        kw: dict[str, Any] = {
            "principal_claim": options.get("unsecuredValidatorPrincipalClaimName", "sub") or "sub",
            "scope_claim": options.get("unsecuredValidatorScopeClaimName", "scope") or "scope",
            # Space-delimited, as Kafka's OAuthBearerScopeUtils.parseScope reads it; order kept.
            "required_scopes": tuple(options.get("unsecuredValidatorRequiredScope", "").split()),
            "clock_skew_ms": int(options.get("unsecuredValidatorAllowableClockSkewMs", "0") or 0),
        }
        if now_ms is not None:
            kw["now_ms"] = now_ms
        return cls(**kw)

    def __call__(self, token: str) -> ValidToken:
        parts = token.split(".")
        if len(parts) != 3:
            raise TokenError(f"an unsecured JWS has three parts, this token has {len(parts)}")
        header, claims = _b64url_json(parts[0]), _b64url_json(parts[1])
        if parts[2]:
            raise TokenError("an unsecured JWS must have an empty signature")
        if header.get("alg", "none") != "none":
            raise TokenError(f"an unsecured JWS must have alg none, not {header.get('alg')}")
        now = self.now_ms()
        exp = claims.get("exp")
        if not isinstance(exp, (int, float)):
            raise TokenError("the token has no numeric exp (expiration time) claim")
        expiry_ms = int(exp * 1000)
        if now - self.clock_skew_ms >= expiry_ms:
            raise TokenError(f"the token expired at {expiry_ms} ms, before the current time {now} ms")
        iat = claims.get("iat")
        if isinstance(iat, (int, float)) and int(iat * 1000) > now + self.clock_skew_ms:
            raise TokenError(f"the token was issued at {int(iat * 1000)} ms, after the current time {now} ms")
        principal = claims.get(self.principal_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise TokenError(f"the token has no principal claim '{self.principal_claim}'")
        scopes = _scopes(claims.get(self.scope_claim))
        missing = [s for s in self.required_scopes if s not in scopes]
        if missing:
            raise TokenError(f"the token lacks the required scope(s) {', '.join(missing)}",
                             "insufficient_scope", missing[0])
        return ValidToken(principal, expiry_ms, scopes)


def unsecured_token(principal: str, lifetime_s: int = 3600, principal_claim: str = "sub",
                    scope_claim: str = "scope", scopes: tuple[str, ...] = (),
                    claims: Mapping[str, Any] | None = None, now_s: float | None = None) -> str:
    """An unsecured JWT (``alg: none``) as Kafka's and librdkafka's unsecured logins make."""
    now = time.time() if now_s is None else now_s
    body: dict[str, Any] = {"iat": now, "exp": now + lifetime_s, principal_claim: principal, **(claims or {})}
    if scopes:
        body[scope_claim] = list(scopes)

    def enc(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj, separators=(",", ":")).encode()).decode().rstrip("=")
    return f"{enc({'alg': 'none'})}.{enc(body)}."


# ---------------------------------------------------------------- signed tokens (JWKS)
@dataclass
class JwtValidator:
    """Signed JWTs against the keys of ``sasl.oauthbearer.jwks.endpoint.url`` (https, http or
    file), fetched again every ``refresh_ms`` or when a token names an unknown key id."""

    jwks_url: str
    audiences: tuple[str, ...] = ()
    issuer: str | None = None
    sub_claim: str = "sub"
    scope_claim: str = "scope"
    clock_skew_s: int = 30
    refresh_ms: int = 3600000
    now_ms: Callable[[], int] = field(default=SYSTEM_CLOCK.milliseconds)
    _keys: dict[str, jwt.PyJWK] = field(default_factory=dict)
    _fetched_ms: int = -1

    def _load_keys(self) -> None:
        import jwt
        with urllib.request.urlopen(self.jwks_url, timeout=10) as f:  # file:// too
            doc = json.load(f)
        keys = {}
        for jwk in doc.get("keys", []):
            try:
                keys[jwk.get("kid", "")] = jwt.PyJWK(jwk)
            except jwt.PyJWTError:
                continue  # a key of a type PyJWT does not know: Kafka skips it too
        self._keys = keys
        self._fetched_ms = self.now_ms()

    def _key(self, kid: str) -> jwt.PyJWK:
        if self._fetched_ms < 0 or self.now_ms() - self._fetched_ms > self.refresh_ms or kid not in self._keys:
            try:
                self._load_keys()
            except (OSError, ValueError) as e:
                raise TokenError(f"the signing keys could not be read from {self.jwks_url}: {e}") from None
        if kid in self._keys:
            return self._keys[kid]
        if not kid and len(self._keys) == 1:
            return next(iter(self._keys.values()))
        raise TokenError(f"no signing key with key id '{kid}' at {self.jwks_url}")

    def __call__(self, token: str) -> ValidToken:
        import jwt
        try:
            header = jwt.get_unverified_header(token)
            key = self._key(str(header.get("kid", "")))
            claims = jwt.decode(
                token, key=key, algorithms=[header.get("alg", "RS256")], leeway=self.clock_skew_s,
                audience=list(self.audiences) or None, issuer=self.issuer,
                options={"require": ["exp"], "verify_aud": bool(self.audiences), "verify_iss": bool(self.issuer)})
        except jwt.PyJWTError as e:
            raise TokenError(f"the token was refused: {e}") from None
        principal = claims.get(self.sub_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise TokenError(f"the token has no subject claim '{self.sub_claim}'")
        return ValidToken(principal, int(claims["exp"] * 1000), _scopes(claims.get(self.scope_claim)))


# ---------------------------------------------------------------- the exchange
def _client_message(token: str, extensions: Mapping[str, str] | None = None, authzid: str = "") -> bytes:
    gs2 = f"n,{'a=' + authzid if authzid else ''},"
    ext = "".join(f"{k}={v}{_SEP}" for k, v in (extensions or {}).items())
    return f"{gs2}{_SEP}auth=Bearer {token}{_SEP}{ext}{_SEP}".encode()


class OAuthBearerServer:
    mechanism = OAUTHBEARER

    def __init__(self, validate: TokenValidator) -> None:
        self._validate = validate
        self._token: ValidToken | None = None
        self._error: str | None = None
        self._reason: str | None = None

    def evaluate(self, response: bytes) -> bytes:
        if response == _SEP.encode() and self._error is not None:
            raise SaslAuthenticationError(self._error, detail=self._reason)
        if self._error is not None or self._token is not None:
            raise SaslError("Unexpected OAUTHBEARER message")
        text = response.decode("utf-8", "replace")
        gs2, sep, rest = text.partition(_SEP)
        if not sep or not gs2.startswith("n,") or not rest.endswith(_SEP + _SEP) and rest != _SEP:
            raise SaslError("Invalid OAUTHBEARER client first message")
        authzid = gs2[2:].rstrip(",")
        authzid = authzid[2:] if authzid.startswith("a=") else ""
        pairs = dict(kv.partition("=")[::2] for kv in rest.split(_SEP) if kv)
        auth = pairs.get("auth", "")
        if not auth.lower().startswith("bearer "):
            raise SaslError("Invalid OAUTHBEARER client first message: no auth=Bearer token")
        try:
            token = self._validate(auth[7:].strip())
        except TokenError as e:
            # RFC 7628: the error goes as a JSON challenge; the client's 0x01 ends the exchange.
            self._error, self._reason = e.json_error(), str(e)
            return self._error.encode()
        if authzid and authzid != token.principal:
            raise SaslAuthenticationError(f"Authentication failed: Client requested an authorization id "
                                          f"({authzid}) that is different from the token's principal name "
                                          f"({token.principal})")
        self._token = token
        return b""

    @property
    def complete(self) -> bool:
        return self._token is not None

    def principal(self) -> KafkaPrincipal:
        assert self._token is not None
        return KafkaPrincipal(USER_TYPE, self._token.principal)

    def credential_expiry_ms(self) -> int | None:
        return self._token.expiry_ms if self._token is not None else None


class OAuthBearerClient:
    mechanism = OAUTHBEARER

    def __init__(self, token: Callable[[], str], extensions: Mapping[str, str] | None = None) -> None:
        self._token = token
        self._extensions = dict(extensions or {})
        self._state = "initial"

    def initial_response(self) -> bytes:
        self._state = "sent"
        return _client_message(self._token(), self._extensions)

    def evaluate(self, challenge: bytes) -> bytes | None:
        if challenge:
            self._state = "failed"
            return _SEP.encode()  # acknowledge the error; the broker then fails the exchange
        self._state = "complete"
        return None

    @property
    def complete(self) -> bool:
        return self._state == "complete"
