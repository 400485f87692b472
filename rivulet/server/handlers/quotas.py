"""Request handlers of DescribeClientQuotas (48) and AlterClientQuotas (49), in front of
``ClientQuotas`` (``server/quotas.py``)."""

from __future__ import annotations
from dataclasses import dataclass

from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.protocol.framing import RequestHeader
from rivulet.protocol.messages import alter_client_quotas_response as acqr, describe_client_quotas_response as dcqr
from rivulet.protocol.messages.alter_client_quotas_request import AlterClientQuotasRequest
from rivulet.protocol.messages.describe_client_quotas_request import DescribeClientQuotasRequest
from rivulet.security.acls import AclOperation
from rivulet.server.acls import Authz
from rivulet.server.handlers import Handler
from rivulet.server.network import KafkaConnection
from rivulet.server.quotas import ClientQuotas, QuotaOp


@dataclass(eq=False)
class QuotaHandlers:
    quotas: ClientQuotas
    authz: Authz

    def handlers(self) -> dict[int, Handler]:
        return {48: self.handle_describe_client_quotas, 49: self.handle_alter_client_quotas}

    def handle_describe_client_quotas(
        self, header: RequestHeader, req: DescribeClientQuotasRequest, conn: KafkaConnection
    ) -> dcqr.DescribeClientQuotasResponse:
        try:
            if not self.authz.cluster(conn, AclOperation.DESCRIBE_CONFIGS):
                raise ApiError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
            found = self.quotas.describe([(c.entity_type, c.match_type, c.match) for c in req.components], req.strict)
        except ApiError as e:
            return dcqr.DescribeClientQuotasResponse(throttle_time_ms=0, error_code=e.code,
                                                     error_message=e.message, entries=None)
        entries = [dcqr.EntryData(
            entity=[dcqr.EntityData(entity_type=t, entity_name=n) for t, n in entity],
            values=[dcqr.ValueData(key=k, value=v) for k, v in sorted(values.items())]) for entity, values in found]
        return dcqr.DescribeClientQuotasResponse(throttle_time_ms=0, error_code=0, error_message=None,
                                                 entries=entries)

    def handle_alter_client_quotas(
        self, header: RequestHeader, req: AlterClientQuotasRequest, conn: KafkaConnection
    ) -> acqr.AlterClientQuotasResponse:
        if not self.authz.cluster(conn, AclOperation.ALTER_CONFIGS):
            return acqr.AlterClientQuotasResponse(throttle_time_ms=0, entries=[acqr.EntryData(
                error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message="Cluster authorization failed.",
                entity=[acqr.EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity])
                for entry in req.entries])
        results = self.quotas.alter(
            [([(e.entity_type, e.entity_name) for e in entry.entity],
              [QuotaOp(op.key, op.value, op.remove) for op in entry.ops]) for entry in req.entries],
            validate_only=req.validate_only)
        out = []
        for entry, result in zip(req.entries, results):
            code, message = (result.code, result.message) if isinstance(result, ApiError) else (result, None)
            out.append(acqr.EntryData(error_code=code, error_message=message, entity=[
                acqr.EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity]))
        return acqr.AlterClientQuotasResponse(throttle_time_ms=0, entries=out)
