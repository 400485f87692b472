"""Request handlers of DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), in
front of ``ScramCredentials`` (``server/scram.py``). Describing needs DESCRIBE on the cluster,
altering ALTER, as Kafka's."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.protocol.framing import RequestHeader
from rivulet.protocol.messages import (
    alter_user_scram_credentials_response as aur,
    describe_user_scram_credentials_response as dur,
)
from rivulet.protocol.messages.alter_user_scram_credentials_request import AlterUserScramCredentialsRequest
from rivulet.protocol.messages.describe_user_scram_credentials_request import DescribeUserScramCredentialsRequest
from rivulet.security.acls import AclOperation
from rivulet.server.acls import Authz
from rivulet.server.handlers import Handler
from rivulet.server.network import KafkaConnection
from rivulet.server.scram import ScramCredentials, Upsertion


@dataclass(eq=False)
class ScramHandlers:
    credentials: ScramCredentials
    authz: Authz

    def handlers(self) -> dict[int, Handler]:
        return {50: self.handle_describe, 51: self.handle_alter}

    def handle_describe(self, header: RequestHeader, req: DescribeUserScramCredentialsRequest,
                        conn: KafkaConnection) -> dur.DescribeUserScramCredentialsResponse:
        if not self.authz.cluster(conn, AclOperation.DESCRIBE):
            return dur.DescribeUserScramCredentialsResponse(
                throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=None, results=[])
        users = None if req.users is None else [u.name for u in req.users]
        results = []
        for user, found in self.credentials.describe(users):
            if isinstance(found, ApiError):
                results.append(dur.DescribeUserScramCredentialsResult(
                    user=user, error_code=found.code, error_message=found.message, credential_infos=[]))
            else:
                results.append(dur.DescribeUserScramCredentialsResult(
                    user=user, error_code=0, error_message=None,
                    credential_infos=[dur.CredentialInfo(mechanism=m, iterations=i) for m, i in found]))
        return dur.DescribeUserScramCredentialsResponse(throttle_time_ms=0, error_code=0, error_message=None,
                                                        results=results)

    def handle_alter(self, header: RequestHeader, req: AlterUserScramCredentialsRequest, conn: KafkaConnection
                     ) -> aur.AlterUserScramCredentialsResponse | asyncio.Future[aur.AlterUserScramCredentialsResponse]:
        users = list(dict.fromkeys([d.name for d in req.deletions] + [u.name for u in req.upsertions]))
        if not self.authz.cluster(conn, AclOperation.ALTER):
            return aur.AlterUserScramCredentialsResponse(throttle_time_ms=0, results=[
                aur.AlterUserScramCredentialsResult(user=u, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                                    error_message=None) for u in users])

        async def alter() -> aur.AlterUserScramCredentialsResponse:
            results = await self.credentials.alter(
                [(d.name, d.mechanism) for d in req.deletions],
                [Upsertion(u.name, u.mechanism, u.iterations, bytes(u.salt), bytes(u.salted_password))
                 for u in req.upsertions])
            return aur.AlterUserScramCredentialsResponse(throttle_time_ms=0, results=[
                aur.AlterUserScramCredentialsResult(user=user, error_code=0 if e is None else e.code,
                                                    error_message=None if e is None else e.message)
                for user, e in results])
        return asyncio.ensure_future(alter())
