"""Request handlers of CreateDelegationToken (38), RenewDelegationToken (39),
ExpireDelegationToken (40) and DescribeDelegationToken (41), in front of ``DelegationTokens``
(``server/delegation_tokens.py``), with Kafka's broker-side checks: no token requests over an
unauthenticated connection or one authenticated with a token; a token for another owner needs
CREATE_TOKENS on that USER; describing another's token needs DESCRIBE on the DELEGATION_TOKEN
or DESCRIBE_TOKENS on its owner's USER."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.protocol.framing import RequestHeader
from rivulet.protocol.messages import (
    create_delegation_token_response as cdr,
    describe_delegation_token_response as ddr,
    expire_delegation_token_response as edr,
    renew_delegation_token_response as rdr,
)
from rivulet.protocol.messages.create_delegation_token_request import CreateDelegationTokenRequest
from rivulet.protocol.messages.describe_delegation_token_request import DescribeDelegationTokenRequest
from rivulet.protocol.messages.expire_delegation_token_request import ExpireDelegationTokenRequest
from rivulet.protocol.messages.renew_delegation_token_request import RenewDelegationTokenRequest
from rivulet.security.acls import AclOperation, ResourceType
from rivulet.security.principal import KafkaPrincipal
from rivulet.server.acls import Authz
from rivulet.server.delegation_tokens import DelegationTokens, eligible_to_describe
from rivulet.server.handlers import Handler
from rivulet.server.network import KafkaConnection

R = TypeVar("R")
# A request refused here has timestamps -1, one the tokens refuse 0 (Kafka's broker and
# controller answers).
_ERROR_TIMESTAMP = -1
_TOKEN_ERROR_TIMESTAMP = 0


def _token_requests_allowed(conn: KafkaConnection) -> bool:
    """Kafka's allowTokenRequests: not over PLAINTEXT, not from a one-way SSL (anonymous) client,
    not from a connection that authenticated with a token."""
    protocol = conn.listener.security_protocol
    return not (conn.principal.token_authenticated or protocol == "PLAINTEXT" or
                (protocol == "SSL" and conn.principal == KafkaPrincipal.ANONYMOUS))


def _answer(work: Awaitable[R], on_error: Callable[[ErrorCode, int], R], error_timestamp: int
            ) -> asyncio.Future[R]:
    async def run() -> R:
        try:
            return await work
        except ApiError as e:
            return on_error(e.code, error_timestamp)
    return asyncio.ensure_future(run())


# Renew and expire answer alike: the token's new expiry, or an error with its timestamp.
E = TypeVar("E", rdr.RenewDelegationTokenResponse, edr.ExpireDelegationTokenResponse)


def _expiry_change(conn: KafkaConnection, response: type[E], change: Callable[[], Awaitable[int]]
                   ) -> E | asyncio.Future[E]:
    def refused(code: ErrorCode, timestamp: int = _ERROR_TIMESTAMP) -> E:
        return response(error_code=code, expiry_timestamp_ms=timestamp, throttle_time_ms=0)
    if not _token_requests_allowed(conn):
        return refused(ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)

    async def changed() -> E:
        return response(error_code=0, expiry_timestamp_ms=await change(), throttle_time_ms=0)
    return _answer(changed(), refused, _TOKEN_ERROR_TIMESTAMP)


class DelegationTokenHandlers:
    def __init__(self, tokens: DelegationTokens, authz: Authz) -> None:
        self.tokens = tokens
        self.authz = authz

    def handlers(self) -> dict[int, Handler]:
        return {38: self.handle_create, 39: self.handle_renew, 40: self.handle_expire, 41: self.handle_describe}

    def handle_create(self, header: RequestHeader, req: CreateDelegationTokenRequest, conn: KafkaConnection
                      ) -> cdr.CreateDelegationTokenResponse | asyncio.Future[cdr.CreateDelegationTokenResponse]:
        requester = conn.principal
        owner = KafkaPrincipal(req.owner_principal_type or "User", req.owner_principal_name) \
            if req.owner_principal_name else requester

        def refused(code: ErrorCode, _timestamp: int = _ERROR_TIMESTAMP) -> cdr.CreateDelegationTokenResponse:
            return cdr.CreateDelegationTokenResponse(
                error_code=code, principal_type=owner.principal_type, principal_name=owner.name,
                token_requester_principal_type=requester.principal_type, token_requester_principal_name=requester.name,
                issue_timestamp_ms=_ERROR_TIMESTAMP, expiry_timestamp_ms=_ERROR_TIMESTAMP,
                max_timestamp_ms=_ERROR_TIMESTAMP, token_id="", hmac=b"", throttle_time_ms=0)
        if not _token_requests_allowed(conn):
            return refused(ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)
        if owner != requester and not self.authz.authorize(conn, AclOperation.CREATE_TOKENS, ResourceType.USER,
                                                           str(owner)):
            return refused(ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED)
        renewers = [KafkaPrincipal(r.principal_type, r.principal_name) for r in req.renewers]

        async def create() -> cdr.CreateDelegationTokenResponse:
            token, mac = await self.tokens.create(requester, owner, renewers, req.max_lifetime_ms)
            return cdr.CreateDelegationTokenResponse(
                error_code=0, principal_type=owner.principal_type, principal_name=owner.name,
                token_requester_principal_type=requester.principal_type, token_requester_principal_name=requester.name,
                issue_timestamp_ms=token.issue_ms, expiry_timestamp_ms=token.expiry_ms, max_timestamp_ms=token.max_ms,
                token_id=token.token_id, hmac=mac, throttle_time_ms=0)
        return _answer(create(), refused, _ERROR_TIMESTAMP)

    def handle_renew(self, header: RequestHeader, req: RenewDelegationTokenRequest, conn: KafkaConnection
                     ) -> rdr.RenewDelegationTokenResponse | asyncio.Future[rdr.RenewDelegationTokenResponse]:
        return _expiry_change(conn, rdr.RenewDelegationTokenResponse,
                              lambda: self.tokens.renew(conn.principal, bytes(req.hmac), req.renew_period_ms))

    def handle_expire(self, header: RequestHeader, req: ExpireDelegationTokenRequest, conn: KafkaConnection
                      ) -> edr.ExpireDelegationTokenResponse | asyncio.Future[edr.ExpireDelegationTokenResponse]:
        return _expiry_change(conn, edr.ExpireDelegationTokenResponse,
                              lambda: self.tokens.expire(conn.principal, bytes(req.hmac), req.expiry_time_period_ms))

    def handle_describe(self, header: RequestHeader, req: DescribeDelegationTokenRequest, conn: KafkaConnection
                        ) -> ddr.DescribeDelegationTokenResponse:
        def answer(code: ErrorCode, tokens: list[ddr.DescribedDelegationToken]) -> ddr.DescribeDelegationTokenResponse:
            return ddr.DescribeDelegationTokenResponse(error_code=code, tokens=tokens, throttle_time_ms=0)
        if not _token_requests_allowed(conn):
            return answer(ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, [])
        if not self.tokens.enabled:
            return answer(ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED, [])
        if req.owners is not None and not req.owners:  # an empty list asks for nothing
            return answer(ErrorCode.NONE, [])
        owners = None if req.owners is None else [KafkaPrincipal(o.principal_type, o.principal_name)
                                                  for o in req.owners]
        eligible = eligible_to_describe(
            conn.principal, owners,
            lambda token_id: self.authz.authorize(conn, AclOperation.DESCRIBE, ResourceType.DELEGATION_TOKEN, token_id),
            lambda owner: self.authz.authorize(conn, AclOperation.DESCRIBE_TOKENS, ResourceType.USER, str(owner)))
        return answer(ErrorCode.NONE, [
            ddr.DescribedDelegationToken(
                principal_type=t.owner.principal_type, principal_name=t.owner.name,
                token_requester_principal_type=t.requester.principal_type,
                token_requester_principal_name=t.requester.name, issue_timestamp=t.issue_ms,
                expiry_timestamp=t.expiry_ms, max_timestamp=t.max_ms, token_id=t.token_id, hmac=mac,
                renewers=[ddr.DescribedDelegationTokenRenewer(principal_type=r.principal_type, principal_name=r.name)
                          for r in t.renewers])
            for t, mac in self.tokens.describe(eligible)])
