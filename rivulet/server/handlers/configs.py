"""Request handlers of DescribeConfigs, AlterConfigs and IncrementalAlterConfigs, for topic,
broker and client metrics (KIP-714 subscriptions, ``server/client_metrics.py``) resources."""

from __future__ import annotations

from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.protocol.framing import RequestHeader
from rivulet.protocol.messages import (
    alter_configs_response as acr,
    describe_configs_response as dcfr,
    incremental_alter_configs_response as iacr,
)
from rivulet.protocol.messages.alter_configs_request import AlterConfigsRequest
from rivulet.protocol.messages.describe_configs_request import DescribeConfigsRequest
from rivulet.protocol.messages.incremental_alter_configs_request import IncrementalAlterConfigsRequest
from rivulet.security.acls import AclOperation
from rivulet.server import client_metrics as cm_configs
from rivulet.server.acls import Authz
from rivulet.server.client_metrics import ClientMetricsManager
from rivulet.server.config import LIST_PROPERTIES, BrokerConfig
from rivulet.server.dynamic_config import apply_incremental, broker_values_in_force, describe_broker_configs
from rivulet.server.handlers import Handler
from rivulet.server.network import KafkaConnection
from rivulet.server.topics import TopicManager
from rivulet.storage.config import TOPIC_LIST_CONFIGS

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
RESOURCE_CLIENT_METRICS = 16
_CLUSTER_RESOURCES = (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER, RESOURCE_CLIENT_METRICS)


class ConfigHandlers:
    def __init__(self, topics: TopicManager, config: BrokerConfig, authz: Authz,
                 client_metrics: ClientMetricsManager) -> None:
        self.topics = topics
        self.config = config
        self.authz = authz
        self.client_metrics = client_metrics

    def _authorize(self, conn: KafkaConnection, op: AclOperation, rtype: int, name: str) -> None:
        """As Kafka: a broker, its loggers or client metrics need ``op`` on the cluster, a topic on itself."""
        if rtype in _CLUSTER_RESOURCES:
            if not self.authz.cluster(conn, op):
                raise ApiError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
        elif rtype == RESOURCE_TOPIC and not self.authz.topic(conn, op, name):
            raise ApiError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.")

    def handlers(self) -> dict[int, Handler]:
        return {32: self.handle_describe_configs, 33: self.handle_alter_configs,
                44: self.handle_incremental_alter_configs}

    # ------------------------------------------------------------ configs
    def handle_describe_configs(
        self, header: RequestHeader, req: DescribeConfigsRequest, conn: KafkaConnection
    ) -> dcfr.DescribeConfigsResponse:
        b = self.topics
        results = []
        for res in req.resources:
            out = dcfr.DescribeConfigsResult(error_code=0, error_message=None, resource_type=res.resource_type,
                                             resource_name=res.resource_name, configs=[])
            wanted = set(res.configuration_keys) if res.configuration_keys is not None else None
            try:
                self._authorize(conn, AclOperation.DESCRIBE_CONFIGS, res.resource_type, res.resource_name)
                if res.resource_type == RESOURCE_TOPIC:
                    info = b.get(res.resource_name)
                    if info is None:
                        raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    entries = b.describe_topic_configs(info.configs)
                elif res.resource_type == RESOURCE_BROKER:
                    entries = describe_broker_configs(self.config, b.dynamic_config, res.resource_name)
                elif res.resource_type == RESOURCE_BROKER_LOGGER:
                    entries = []
                elif res.resource_type == RESOURCE_CLIENT_METRICS:
                    entries = self.client_metrics.describe(res.resource_name)
                else:
                    raise ApiError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {res.resource_type}")
                for e in entries:
                    if wanted is not None and e.name not in wanted:
                        continue
                    synonyms = [dcfr.DescribeConfigsSynonym(name=n, value=v, source=int(s)) for n, v, s in e.synonyms]
                    out.configs.append(dcfr.DescribeConfigsResourceResult(
                        name=e.name, value=e.value, read_only=e.read_only, is_default=e.is_default,
                        config_source=int(e.source), is_sensitive=e.sensitive,
                        synonyms=synonyms if req.include_synonyms else [], config_type=int(e.config_type),
                        documentation=e.documentation if req.include_documentation else None))
            except ApiError as e:
                out.error_code = e.code
                out.error_message = e.message
            results.append(out)
        return dcfr.DescribeConfigsResponse(throttle_time_ms=0, results=results)

    def handle_alter_configs(
        self, header: RequestHeader, req: AlterConfigsRequest, conn: KafkaConnection
    ) -> acr.AlterConfigsResponse:
        b = self.topics
        out = []
        for res in req.resources:
            r = acr.AlterConfigsResourceResponse(error_code=0, error_message=None, resource_type=res.resource_type,
                                                 resource_name=res.resource_name)
            try:
                self._authorize(conn, AclOperation.ALTER_CONFIGS, res.resource_type, res.resource_name)
                new = {c.name: c.value for c in res.configs if c.value is not None}
                if res.resource_type == RESOURCE_BROKER:
                    b.alter_broker_configs(res.resource_name, new, validate_only=req.validate_only)
                    out.append(r)
                    continue
                if res.resource_type == RESOURCE_CLIENT_METRICS:
                    self.client_metrics.alter(res.resource_name, new, validate_only=req.validate_only)
                    out.append(r)
                    continue
                self._check_topic_resource(res.resource_type, res.resource_name)
                b.alter_topic_configs(res.resource_name, new, validate_only=req.validate_only)
            except ApiError as e:
                r.error_code, r.error_message = e.code, e.message
            out.append(r)
        return acr.AlterConfigsResponse(throttle_time_ms=0, responses=out)

    def handle_incremental_alter_configs(
        self, header: RequestHeader, req: IncrementalAlterConfigsRequest, conn: KafkaConnection
    ) -> iacr.IncrementalAlterConfigsResponse:
        b = self.topics
        out = []
        for res in req.resources:
            r = iacr.AlterConfigsResourceResponse(error_code=0, error_message=None, resource_type=res.resource_type,
                                                  resource_name=res.resource_name)
            try:
                self._authorize(conn, AclOperation.ALTER_CONFIGS, res.resource_type, res.resource_name)
                if res.resource_type == RESOURCE_BROKER:
                    level = b.dynamic_config.level(res.resource_name)
                    in_force = broker_values_in_force(self.config, b.dynamic_config)
                    new = apply_incremental(b.dynamic_config.levels[level], res.configs, in_force, LIST_PROPERTIES)
                    b.alter_broker_configs(res.resource_name, new, validate_only=req.validate_only)
                    out.append(r)
                    continue
                if res.resource_type == RESOURCE_CLIENT_METRICS:
                    cm = self.client_metrics
                    new = apply_incremental(cm.current(res.resource_name), res.configs, None, cm_configs.LIST_CONFIGS)
                    cm.alter(res.resource_name, new, validate_only=req.validate_only)
                    out.append(r)
                    continue
                self._check_topic_resource(res.resource_type, res.resource_name)
                current = apply_incremental(b.get(res.resource_name).configs, res.configs,
                                            b.topic_config_values(res.resource_name), TOPIC_LIST_CONFIGS)
                b.alter_topic_configs(res.resource_name, current, validate_only=req.validate_only)
            except ApiError as e:
                r.error_code, r.error_message = e.code, e.message
            out.append(r)
        return iacr.IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=out)

    def _check_topic_resource(self, rtype: int, name: str) -> None:
        if rtype != RESOURCE_TOPIC:
            raise ApiError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {rtype}")
        if self.topics.get(name) is None:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
