"""Delegation tokens (KIP-48): issued, renewed, expired and described with Kafka's rules, and
the SCRAM credentials a client authenticates with when it presents one (``tokenauth=true``).

A token is its id and its HMAC (HmacSHA512 of the id under ``delegation.token.secret.key``):
the id is the SCRAM user name, the base64 HMAC the password. Only the token's information is
stored (the ``TokenStore``: ZooKeeper's /delegation_token/tokens/<id> in a cluster, as Kafka's
ZooKeeper mode, the broker's own metadata on one node); every broker derives the HMAC from the
shared secret and its own SCRAM credentials from the HMAC.
"""

from __future__ import annotations

import base64
import hashlib
import hmac as hmac_lib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from rivulet.common.time import Clock
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.security.principal import USER_TYPE, KafkaPrincipal
from rivulet.security.scram import MECHANISMS, ScramCredential
from rivulet.storage.checkpoints import random_kafka_uuid

log = logging.getLogger(__name__)

_ZNODE_VERSION = 3  # Kafka's DelegationTokenInfoZNode with the token requester (KIP-373)


@dataclass(frozen=True)
class TokenInformation:
    token_id: str
    owner: KafkaPrincipal
    requester: KafkaPrincipal
    renewers: tuple[KafkaPrincipal, ...]
    issue_ms: int
    max_ms: int
    expiry_ms: int

    def owner_or_renewer(self, principal: KafkaPrincipal) -> bool:
        return principal in (self.owner, self.requester) or principal in self.renewers

    def to_json(self) -> dict[str, Any]:  # Any: JSON, as from_json's
        """Kafka's DelegationTokenInfoZNode (the id is the znode's name)."""
        return {"version": _ZNODE_VERSION, "owner": str(self.owner), "tokenRequester": str(self.requester),
                "renewers": [str(r) for r in self.renewers], "issueTimestamp": self.issue_ms,
                "maxTimestamp": self.max_ms, "expiryTimestamp": self.expiry_ms}

    @classmethod
    def from_json(cls, token_id: str, doc: Mapping[str, Any]) -> TokenInformation:
        owner = KafkaPrincipal.parse(str(doc["owner"]))
        return cls(token_id, owner, KafkaPrincipal.parse(str(doc.get("tokenRequester", doc["owner"]))),
                   tuple(KafkaPrincipal.parse(str(r)) for r in doc.get("renewers", ())),
                   int(doc["issueTimestamp"]), int(doc["maxTimestamp"]), int(doc["expiryTimestamp"]))


class TokenStore(Protocol):
    def load_delegation_tokens(self) -> list[TokenInformation]:
        ...

    async def store_delegation_token(self, token: TokenInformation) -> None:
        ...

    async def remove_delegation_token(self, token_id: str) -> None:
        ...


@dataclass(frozen=True)
class TokenSettings:
    secret_key: str | None  # None: delegation tokens are disabled
    max_lifetime_ms: int
    expiry_time_ms: int


class DelegationTokens:
    """Every token of the cluster, by id and by HMAC, with their SCRAM credentials."""

    def __init__(self, settings: TokenSettings, store: TokenStore, clock: Clock) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        self.tokens: dict[str, TokenInformation] = {}
        self._by_hmac: dict[bytes, str] = {}
        self._credentials: dict[str, dict[str, ScramCredential]] = {}
        if self.enabled:
            for token in store.load_delegation_tokens():
                self.set_token(token.token_id, token)

    @property
    def enabled(self) -> bool:
        return self.settings.secret_key is not None

    def hmac(self, token_id: str) -> bytes:
        assert self.settings.secret_key is not None
        return hmac_lib.new(self.settings.secret_key.encode(), token_id.encode(), hashlib.sha512).digest()

    def set_token(self, token_id: str, token: TokenInformation | None) -> None:
        """A token as stored (changed here or, in a cluster, by another broker); None: removed."""
        if not self.enabled:
            return
        mac = self.hmac(token_id)
        if token is None:
            self.tokens.pop(token_id, None)
            self._by_hmac.pop(mac, None)
            self._credentials.pop(token_id, None)
            return
        if token_id not in self._credentials:
            password = base64.b64encode(mac).decode()
            self._credentials[token_id] = {name: ScramCredential.from_password(m, password)
                                           for name, m in MECHANISMS.items()}
        self.tokens[token_id] = token
        self._by_hmac[mac] = token_id

    def lookup(self, token_id: str, mechanism: str) -> tuple[ScramCredential, str, int] | None:
        """What SCRAM authenticates a live token against (an expired one authenticates nobody):
        its credential, its owner's name (who the client is) and its expiry (a ``TokenLookup``)."""
        token = self.tokens.get(token_id)
        if token is None or min(token.expiry_ms, token.max_ms) < self.clock.milliseconds():
            return None
        credential = self._credentials[token_id].get(mechanism)
        return None if credential is None else (credential, token.owner.name, token.expiry_ms)

    async def _put(self, token: TokenInformation) -> None:
        await self.store.store_delegation_token(token)
        self.set_token(token.token_id, token)

    # ------------------------------------------------------------ the requests
    async def create(self, requester: KafkaPrincipal, owner: KafkaPrincipal | None,
                     renewers: Sequence[KafkaPrincipal], max_lifetime_ms: int) -> tuple[TokenInformation, bytes]:
        """A new token for ``owner`` (the requester when None); ApiError as Kafka's controller."""
        if not self.enabled:
            raise ApiError(ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED)
        if any(r.principal_type != USER_TYPE for r in renewers):
            raise ApiError(ErrorCode.INVALID_PRINCIPAL_TYPE)
        now = self.clock.milliseconds()
        lifetime = self.settings.max_lifetime_ms
        if max_lifetime_ms > 0:
            lifetime = min(lifetime, max_lifetime_ms)
        max_ms = now + lifetime
        token = TokenInformation(random_kafka_uuid(), owner or requester, requester, tuple(renewers), now, max_ms,
                                 min(max_ms, now + self.settings.expiry_time_ms))
        await self._put(token)
        return token, self.hmac(token.token_id)

    def _renewable(self, principal: KafkaPrincipal, mac: bytes) -> TokenInformation:
        if not self.enabled:
            raise ApiError(ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED)
        token_id = self._by_hmac.get(bytes(mac))
        token = self.tokens.get(token_id) if token_id is not None else None
        if token is None:
            raise ApiError(ErrorCode.DELEGATION_TOKEN_NOT_FOUND)
        now = self.clock.milliseconds()
        if token.max_ms < now or token.expiry_ms < now:
            raise ApiError(ErrorCode.DELEGATION_TOKEN_EXPIRED)
        if principal != token.owner and principal not in token.renewers:
            raise ApiError(ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH)
        return token

    async def renew(self, principal: KafkaPrincipal, mac: bytes, renew_period_ms: int) -> int:
        """The new expiry: at most ``delegation.token.expiry.time.ms`` on, never past the token's
        max lifetime."""
        token = self._renewable(principal, mac)
        period = self.settings.expiry_time_ms
        if renew_period_ms > 0:
            period = min(period, renew_period_ms)
        expiry = min(token.max_ms, self.clock.milliseconds() + period)
        await self._put(replace(token, expiry_ms=expiry))
        return expiry

    async def expire(self, principal: KafkaPrincipal, mac: bytes, expiry_period_ms: int) -> int:
        """A negative period removes the token now; another sets its expiry that far on."""
        token = self._renewable(principal, mac)
        now = self.clock.milliseconds()
        if expiry_period_ms < 0:
            await self.store.remove_delegation_token(token.token_id)
            self.set_token(token.token_id, None)
            return now
        expiry = min(token.max_ms, now + expiry_period_ms)
        await self._put(replace(token, expiry_ms=expiry))
        return expiry

    def describe(self, eligible: Callable[[TokenInformation], bool]) -> list[tuple[TokenInformation, bytes]]:
        return [(t, self.hmac(t.token_id)) for _, t in sorted(self.tokens.items()) if eligible(t)]

    async def remove_expired(self) -> int:
        """Kafka's token expiry check: every token past its expiry is removed."""
        now = self.clock.milliseconds()
        gone = [t for t in self.tokens.values() if t.expiry_ms < now or t.max_ms < now]
        for token in gone:
            log.info("delegation token %s of %s expired; removing it", token.token_id, token.owner)
            await self.store.remove_delegation_token(token.token_id)
            self.set_token(token.token_id, None)
        return len(gone)


def eligible_to_describe(requester: KafkaPrincipal, owners: Sequence[KafkaPrincipal] | None,
                         may_describe_token: Callable[[str], bool],
                         may_describe_owner: Callable[[KafkaPrincipal], bool]) -> Callable[[TokenInformation], bool]:
    """Kafka's filter: the tokens of the asked owners (every owner when None) that the requester
    owns, requested or may renew, or may describe through DESCRIBE on the token or
    DESCRIBE_TOKENS on its owner."""
    def eligible(token: TokenInformation) -> bool:
        if owners is not None and not any(token.owner_or_renewer(o) for o in owners):
            return False
        return token.owner_or_renewer(requester) or may_describe_token(token.token_id) or \
            may_describe_owner(token.owner)
    return eligible
