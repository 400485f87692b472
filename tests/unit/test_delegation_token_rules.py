"""Delegation tokens' rules (Kafka's DelegationTokenControlManager and KafkaApis checks), and
SCRAM authentication with a token (tokenauth=true)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac

import pytest

from rivulet.common.time import MockClock
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.security.principal import KafkaPrincipal
from rivulet.security.sasl import SaslError
from rivulet.security.scram import MECHANISMS, ScramClient, ScramServer
from rivulet.server.delegation_tokens import DelegationTokens, TokenInformation, TokenSettings, eligible_to_describe

HOUR, DAY = 3_600_000, 86_400_000
ALICE, BOB, CAROL = (KafkaPrincipal("User", n) for n in ("alice", "bob", "carol"))


class MemoryStore:
    def __init__(self) -> None:
        self.tokens: dict[str, TokenInformation] = {}

    def load_delegation_tokens(self) -> list[TokenInformation]:
        return list(self.tokens.values())

    async def store_delegation_token(self, token: TokenInformation) -> None:
        self.tokens[token.token_id] = token

    async def remove_delegation_token(self, token_id: str) -> None:
        self.tokens.pop(token_id, None)


def tokens(secret: str | None = "s3cret", store: MemoryStore | None = None) -> tuple[DelegationTokens, MockClock]:
    clock = MockClock()
    return DelegationTokens(TokenSettings(secret, 7 * DAY, DAY), store or MemoryStore(), clock), clock


def run(coro):
    return asyncio.run(coro)


def error_of(coro) -> ErrorCode:
    with pytest.raises(ApiError) as e:
        run(coro)
    return e.value.code


def test_create_gives_kafkas_timestamps_and_hmac():
    t, clock = tokens()
    now = clock.milliseconds()
    token, mac = run(t.create(ALICE, None, [BOB], -1))
    assert (token.owner, token.requester, token.renewers) == (ALICE, ALICE, (BOB,))
    assert (token.issue_ms, token.expiry_ms, token.max_ms) == (now, now + DAY, now + 7 * DAY)
    assert mac == hmac.new(b"s3cret", token.token_id.encode(), hashlib.sha512).digest()
    # A shorter max lifetime bounds the expiry too; a longer one is cut to the broker's.
    short, _ = run(t.create(ALICE, None, [], HOUR))
    assert (short.expiry_ms, short.max_ms) == (now + HOUR, now + HOUR)
    long, _ = run(t.create(ALICE, BOB, [], 30 * DAY))
    assert (long.owner, long.requester, long.max_ms) == (BOB, ALICE, now + 7 * DAY)


def test_disabled_without_a_secret_and_renewers_must_be_users():
    t, _ = tokens(secret=None)
    assert not t.enabled
    assert error_of(t.create(ALICE, None, [], -1)) == ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
    assert error_of(t.renew(ALICE, b"x", -1)) == ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
    t, _ = tokens()
    assert error_of(t.create(ALICE, None, [KafkaPrincipal("Group", "g")], -1)) == ErrorCode.INVALID_PRINCIPAL_TYPE


def test_renew_is_for_owner_and_renewers_and_never_past_the_max():
    t, clock = tokens()
    token, mac = run(t.create(ALICE, None, [BOB], 2 * DAY))
    assert error_of(t.renew(ALICE, b"not a token", -1)) == ErrorCode.DELEGATION_TOKEN_NOT_FOUND
    assert error_of(t.renew(CAROL, mac, -1)) == ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH
    clock.sleep(HOUR)
    assert run(t.renew(BOB, mac, HOUR)) == clock.milliseconds() + HOUR
    # No more than delegation.token.expiry.time.ms at a time, whatever is asked.
    assert run(t.renew(ALICE, mac, 5 * DAY)) == clock.milliseconds() + DAY
    clock.sleep(DAY - HOUR)
    assert run(t.renew(ALICE, mac, -1)) == token.max_ms  # capped by the max lifetime
    clock.sleep(DAY + 1)
    assert error_of(t.renew(ALICE, mac, -1)) == ErrorCode.DELEGATION_TOKEN_EXPIRED


def test_expire_now_or_later_and_the_expiry_check():
    store = MemoryStore()
    t, clock = tokens(store=store)
    a, mac_a = run(t.create(ALICE, None, [], -1))
    b, mac_b = run(t.create(ALICE, None, [], -1))
    assert error_of(t.expire(BOB, mac_a, -1)) == ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH
    assert run(t.expire(ALICE, mac_a, -1)) == clock.milliseconds()
    assert a.token_id not in t.tokens and a.token_id not in store.tokens
    assert error_of(t.expire(ALICE, mac_a, -1)) == ErrorCode.DELEGATION_TOKEN_NOT_FOUND
    assert run(t.expire(ALICE, mac_b, HOUR)) == clock.milliseconds() + HOUR
    clock.sleep(HOUR)
    assert run(t.remove_expired()) == 0  # expiry is not yet passed
    clock.sleep(1)
    assert t.lookup(b.token_id, "SCRAM-SHA-256") is None  # refused at once, before the check
    assert run(t.remove_expired()) == 1
    assert not t.tokens and not store.tokens


def test_tokens_are_reloaded_from_the_store():
    store = MemoryStore()
    t, _ = tokens(store=store)
    token, mac = run(t.create(ALICE, None, [BOB], -1))
    again, _ = tokens(store=store)
    assert again.tokens == {token.token_id: token}
    assert run(again.renew(BOB, mac, -1)) > 0
    assert TokenInformation.from_json(token.token_id, token.to_json()) == token


def test_describe_filter_is_kafkas():
    t, _ = tokens()
    mine, _ = run(t.create(ALICE, None, [], -1))
    renewable, _ = run(t.create(CAROL, None, [ALICE], -1))
    other, _ = run(t.create(BOB, None, [], -1))
    def ids(requester, owners=None, token_ok=lambda _i: False, owner_ok=lambda _o: False):
        return {tok.token_id for tok, _ in t.describe(eligible_to_describe(requester, owners, token_ok, owner_ok))}
    assert ids(ALICE) == {mine.token_id, renewable.token_id}
    assert ids(ALICE, [CAROL]) == {renewable.token_id}
    assert ids(ALICE, token_ok=lambda i: i == other.token_id) == {mine.token_id, renewable.token_id, other.token_id}
    assert ids(CAROL, owner_ok=lambda o: o == BOB) == {renewable.token_id, other.token_id}


def authenticate(server: ScramServer, client: ScramClient) -> None:
    final = client.evaluate(server.evaluate(client.initial_response()))
    assert final is not None
    client.evaluate(server.evaluate(final))
    assert server.complete and client.complete


@pytest.mark.parametrize("mechanism", list(MECHANISMS))
def test_scram_with_a_token_authenticates_its_owner(mechanism):
    t, clock = tokens()
    token, mac = run(t.create(ALICE, None, [], HOUR))
    password = base64.b64encode(mac).decode()
    users = lambda _u, _m: None  # noqa: E731 - no SCRAM users: only the token can pass
    server = ScramServer(MECHANISMS[mechanism], users, t.lookup)
    authenticate(server, ScramClient(mechanism, token.token_id, password, token_auth=True))
    principal = server.principal()
    assert principal == ALICE and principal.token_authenticated
    assert server.credential_expiry_ms() == token.expiry_ms
    # Without tokenauth=true the token id is just an unknown user.
    with pytest.raises(SaslError):
        ScramServer(MECHANISMS[mechanism], users, t.lookup).evaluate(
            ScramClient(mechanism, token.token_id, password).initial_response())
    # A wrong HMAC and an expired token fail.
    with pytest.raises(SaslError):
        authenticate(ScramServer(MECHANISMS[mechanism], users, t.lookup),
                     ScramClient(mechanism, token.token_id, "d3Jvbmc=", token_auth=True))
    clock.sleep(HOUR + 1)
    with pytest.raises(SaslError):
        authenticate(ScramServer(MECHANISMS[mechanism], users, t.lookup),
                     ScramClient(mechanism, token.token_id, password, token_auth=True))
