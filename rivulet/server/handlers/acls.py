"""Request handlers of DescribeAcls (29), CreateAcls (30) and DeleteAcls (31), in front of the
``AclManager`` (``server/acls.py``). Reading ACLs needs DESCRIBE on the cluster, changing
them ALTER; without an authorizer every answer is SECURITY_DISABLED."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from rivulet.protocol.errors import ApiError, ErrorCode, ProtocolDecodeError
from rivulet.protocol.framing import RequestHeader
from rivulet.protocol.messages import (
    create_acls_response as car,
    delete_acls_response as dar,
    describe_acls_response as dsr,
)
from rivulet.protocol.messages.create_acls_request import CreateAclsRequest
from rivulet.protocol.messages.delete_acls_request import DeleteAclsFilter, DeleteAclsRequest
from rivulet.protocol.messages.describe_acls_request import DescribeAclsRequest
from rivulet.security.acls import (
    AccessControlEntry,
    AclBindingFilter,
    AclOperation,
    ResourcePattern,
    binding_of,
    filter_of,
    names_unknown,
    unbuildable,
)
from rivulet.server.acls import NO_AUTHORIZER, AclManager, Authz
from rivulet.server.handlers import Handler
from rivulet.server.network import KafkaConnection


def _filter(f: DescribeAclsRequest | DeleteAclsFilter) -> AclBindingFilter:
    _refuse_unknown(f.resource_type_filter, f.pattern_type_filter, f.operation, f.permission_type)
    return filter_of(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter, f.principal_filter,
                     f.host_filter, f.operation, f.permission_type)


def _refuse_unknown(resource_type: int, pattern_type: int, operation: int, permission_type: int) -> None:
    if names_unknown(resource_type, pattern_type, operation, permission_type):
        # Kafka fails to parse the request and closes the connection (the connection does so here).
        raise ProtocolDecodeError("an ACL element is UNKNOWN")


def _cluster_denied() -> ApiError:
    return ApiError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)


@dataclass(eq=False)
class AclHandlers:
    acls: AclManager
    authz: Authz

    def handlers(self) -> dict[int, Handler]:
        return {29: self.handle_describe_acls, 30: self.handle_create_acls, 31: self.handle_delete_acls}

    def _check(self, conn: KafkaConnection, op: AclOperation) -> ApiError | None:
        """The one authorization step of the three APIs (SECURITY_DISABLED comes first)."""
        if self.acls.authorizer is None:
            return ApiError(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
        return None if self.authz.cluster(conn, op) else _cluster_denied()

    def handle_describe_acls(self, header: RequestHeader, req: DescribeAclsRequest,
                             conn: KafkaConnection) -> dsr.DescribeAclsResponse:
        f = _filter(req)  # before authorization: Kafka reads the request first
        try:
            refused = self._check(conn, AclOperation.DESCRIBE)
            if refused is not None:
                raise refused
            found = self.acls.describe(f)
        except ApiError as e:
            return dsr.DescribeAclsResponse(throttle_time_ms=0, error_code=e.code, error_message=e.message,
                                            resources=[])
        by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
        for b in found:
            by_pattern.setdefault(b.pattern, []).append(b.entry)
        resources = [dsr.DescribeAclsResource(
            resource_type=p.resource_type, resource_name=p.name, pattern_type=p.pattern_type,
            acls=[dsr.AclDescription(principal=e.principal, host=e.host, operation=e.operation,
                                     permission_type=e.permission_type)
                  for e in sorted(entries, key=lambda e: (e.principal, e.host, e.operation, e.permission_type))])
            for p, entries in sorted(by_pattern.items(), key=lambda kv: (kv[0].resource_type, kv[0].name,
                                                                         kv[0].pattern_type))]
        # Kafka answers an empty message, not a null one, when all went well.
        return dsr.DescribeAclsResponse(throttle_time_ms=0, error_code=0, error_message="", resources=resources)

    def handle_create_acls(self, header: RequestHeader, req: CreateAclsRequest,
                           conn: KafkaConnection) -> car.CreateAclsResponse | asyncio.Future[car.CreateAclsResponse]:
        for c in req.creations:
            _refuse_unknown(c.resource_type, c.resource_pattern_type, c.operation, c.permission_type)
        refused = self._check(conn, AclOperation.ALTER)
        if refused is not None:
            return car.CreateAclsResponse(throttle_time_ms=0, results=[
                car.AclCreationResult(error_code=refused.code, error_message=refused.message)
                for _ in req.creations])
        bindings = [binding_of(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host,
                               c.operation, c.permission_type) for c in req.creations]
        if any(unbuildable(b) for b in bindings):
            return car.CreateAclsResponse(throttle_time_ms=0, results=[
                car.AclCreationResult(error_code=ErrorCode.UNKNOWN_SERVER_ERROR, error_message=None)
                for _ in req.creations])

        async def create() -> car.CreateAclsResponse:
            results = await self.acls.create(bindings)
            return car.CreateAclsResponse(throttle_time_ms=0, results=[
                car.AclCreationResult(error_code=0, error_message="") if r is None else
                car.AclCreationResult(error_code=r.code, error_message=r.message) for r in results])
        return asyncio.ensure_future(create())

    def handle_delete_acls(self, header: RequestHeader, req: DeleteAclsRequest,
                           conn: KafkaConnection) -> dar.DeleteAclsResponse | asyncio.Future[dar.DeleteAclsResponse]:
        filters = [_filter(f) for f in req.filters]
        refused = self._check(conn, AclOperation.ALTER)
        if refused is not None:
            return dar.DeleteAclsResponse(throttle_time_ms=0, filter_results=[
                dar.DeleteAclsFilterResult(error_code=refused.code, error_message=refused.message, matching_acls=[])
                for _ in req.filters])

        async def delete() -> dar.DeleteAclsResponse:
            results = await self.acls.delete(filters)
            out = []
            for r in results:
                if isinstance(r, ApiError):
                    out.append(dar.DeleteAclsFilterResult(error_code=r.code, error_message=r.message,
                                                          matching_acls=[]))
                    continue
                out.append(dar.DeleteAclsFilterResult(error_code=0, error_message=None, matching_acls=[
                    dar.DeleteAclsMatchingAcl(
                        error_code=0, error_message=None, resource_type=b.pattern.resource_type,
                        resource_name=b.pattern.name, pattern_type=b.pattern.pattern_type,
                        principal=b.entry.principal, host=b.entry.host, operation=b.entry.operation,
                        permission_type=b.entry.permission_type) for b in r]))
            return dar.DeleteAclsResponse(throttle_time_ms=0, filter_results=out)
        return asyncio.ensure_future(delete())
