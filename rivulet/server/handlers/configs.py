"""Request handlers of DescribeConfigs, AlterConfigs and IncrementalAlterConfigs, for topic,
broker, client metrics (KIP-714 subscriptions, ``server/client_metrics.py``) and group
(``coordinator/group_config.py``) resources, and ListConfigResources."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Callable, TypeVar

from rivulet.common.config import ConfigEntry, ConfigSource
from rivulet.coordinator.group_config import (
    GROUP_CONFIGS, GroupConfigError, GroupConfigs, broker_synonym,
)
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.protocol.framing import RequestHeader
from rivulet.protocol.messages import (
    alter_configs_response as acr,
    describe_configs_response as dcfr,
    incremental_alter_configs_response as iacr,
    list_config_resources_response as lcrr,
)
from rivulet.protocol.messages.alter_configs_request import AlterConfigsRequest, AlterConfigsResource
from rivulet.protocol.messages.describe_configs_request import DescribeConfigsRequest
from rivulet.protocol.messages.incremental_alter_configs_request import (
    AlterConfigsResource as IncrementalAlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from rivulet.protocol.messages.list_config_resources_request import ListConfigResourcesRequest
from rivulet.replication.metadata_cache import MetadataCache
from rivulet.security.acls import AclOperation
from rivulet.server import broker_loggers
from rivulet.server.acls import Authz
from rivulet.server.client_metrics import ClientMetricsManager
from rivulet.server.config import BROKER_CONFIGS, LIST_PROPERTIES, BrokerConfig
from rivulet.server.dynamic_config import (
    apply_incremental, broker_levels, broker_synonyms, broker_values_in_force, describe_broker_configs,
)
from rivulet.server.handlers import Handler
from rivulet.server.metadata import validate_topic_name
from rivulet.server.network import KafkaConnection
from rivulet.server.topics import TopicManager
from rivulet.storage.config import TOPIC_LIST_CONFIGS

T = TypeVar("T")
R = TypeVar("R", AlterConfigsResource, IncrementalAlterConfigsResource)
A = TypeVar("A", acr.AlterConfigsResourceResponse, iacr.AlterConfigsResourceResponse)

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
RESOURCE_CLIENT_METRICS = 16
RESOURCE_GROUP = 32
_CLUSTER_RESOURCES = (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER, RESOURCE_CLIENT_METRICS)
# What ListConfigResources lists, by version (v0 was ListClientMetricsResources).
LISTABLE_V0 = frozenset({RESOURCE_CLIENT_METRICS})
LISTABLE = frozenset({RESOURCE_TOPIC, RESOURCE_BROKER, RESOURCE_BROKER_LOGGER, RESOURCE_CLIENT_METRICS, RESOURCE_GROUP})


@dataclass(eq=False)
class ConfigHandlers:
    topics: TopicManager
    config: BrokerConfig
    authz: Authz
    client_metrics: ClientMetricsManager
    groups: GroupConfigs
    # Cluster mode: the live brokers ListConfigResources lists.
    metadata_cache: MetadataCache | None = None

    def _authorize(self, conn: KafkaConnection, op: AclOperation, rtype: int, name: str) -> None:
        """As Kafka: a broker, its loggers or client metrics need ``op`` on the cluster, a topic or
        a group on itself."""
        if rtype in _CLUSTER_RESOURCES:
            if not self.authz.cluster(conn, op):
                raise ApiError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
        elif rtype == RESOURCE_TOPIC and not self.authz.topic(conn, op, name):
            raise ApiError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.")
        elif rtype == RESOURCE_GROUP and not self.authz.group(conn, op, name):
            raise ApiError(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")

    def handlers(self) -> dict[int, Handler]:
        return {32: self.handle_describe_configs, 33: self.handle_alter_configs,
                44: self.handle_incremental_alter_configs, 74: self.handle_list_config_resources}

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
                        validate_topic_name(res.resource_name)  # a name no topic can have: Kafka says so
                        raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "")  # Kafka's message is empty
                    entries = b.describe_topic_configs(info.configs)
                elif res.resource_type == RESOURCE_BROKER:
                    entries = describe_broker_configs(self.config, b.dynamic_config, res.resource_name)
                elif res.resource_type == RESOURCE_BROKER_LOGGER:
                    broker_loggers.check_resource(res.resource_name, self.config.node_id)
                    entries = broker_loggers.describe()
                elif res.resource_type == RESOURCE_CLIENT_METRICS:
                    entries = self.client_metrics.describe(res.resource_name)
                elif res.resource_type == RESOURCE_GROUP:
                    entries = self._describe_group(res.resource_name)
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
    ) -> acr.AlterConfigsResponse | asyncio.Future[acr.AlterConfigsResponse]:
        def values(res: AlterConfigsResource) -> dict[str, str | None]:
            """A whole new set of configs; a group's keeps its null values for the validation."""
            if res.resource_type == RESOURCE_GROUP:
                return {c.name: c.value for c in res.configs}
            if res.resource_type not in (RESOURCE_BROKER, RESOURCE_CLIENT_METRICS):
                self._check_topic_resource(res.resource_type, res.resource_name)
            return {c.name: c.value for c in res.configs if c.value is not None}

        return self._alter(conn, req.resources, req.validate_only, values, acr.AlterConfigsResourceResponse,
                           lambda out: acr.AlterConfigsResponse(throttle_time_ms=0, responses=out))

    def handle_incremental_alter_configs(
        self, header: RequestHeader, req: IncrementalAlterConfigsRequest, conn: KafkaConnection
    ) -> iacr.IncrementalAlterConfigsResponse | asyncio.Future[iacr.IncrementalAlterConfigsResponse]:
        b = self.topics

        def values(res: IncrementalAlterConfigsResource) -> dict[str, str | None]:
            """The resource's configs with the operations applied."""
            name = res.resource_name
            if res.resource_type == RESOURCE_GROUP:
                return dict(apply_incremental(self.groups.configs_of(name), res.configs))
            if res.resource_type == RESOURCE_BROKER:
                level = b.dynamic_config.level(name, altering=True)
                in_force = broker_values_in_force(self.config, b.dynamic_config)
                return dict(apply_incremental(b.dynamic_config.levels[level], res.configs, in_force, LIST_PROPERTIES))
            if res.resource_type == RESOURCE_BROKER_LOGGER:
                # Levels are no stored configs: checked and applied here, nothing left to set.
                broker_loggers.check_resource(name, self.config.node_id)
                broker_loggers.alter(res.configs, req.validate_only)
                return {}
            if res.resource_type == RESOURCE_CLIENT_METRICS:
                # Kafka 4.3's controller knows no config types for client metrics, so it refuses
                # APPEND and SUBTRACT on every one of them (INVALID_CONFIG), lists included.
                return dict(apply_incremental(self.client_metrics.current(name), res.configs))
            self._check_topic_resource(res.resource_type, name)
            return dict(apply_incremental(b.get(name).configs, res.configs, b.topic_config_values(name),
                                          TOPIC_LIST_CONFIGS))

        return self._alter(conn, req.resources, req.validate_only, values, iacr.AlterConfigsResourceResponse,
                           lambda out: iacr.IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=out))

    def _alter(self, conn: KafkaConnection, resources: list[R], validate_only: bool,
               values: Callable[[R], dict[str, str | None]], result: Callable[..., A],
               respond: Callable[[list[A]], T]) -> T | asyncio.Future[T]:
        """AlterConfigs and IncrementalAlterConfigs: each resource authorized, its new configs
        (``values``) validated, then set, or for a group staged and stored after the loop."""
        b = self.topics
        out = []
        staged: dict[str, dict[str, str]] = {}
        for res in resources:
            rtype, name = res.resource_type, res.resource_name
            r = result(error_code=0, error_message=None, resource_type=rtype, resource_name=name)
            try:
                self._authorize(conn, AclOperation.ALTER_CONFIGS, rtype, name)
                names = [c.name for c in res.configs]
                if len(set(names)) != len(names):
                    raise ApiError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
                new = values(res)
                if rtype == RESOURCE_GROUP:
                    self._stage_group(name, new, staged)
                    out.append(r)
                    continue
                if rtype == RESOURCE_BROKER_LOGGER:  # applied by ``values``
                    out.append(r)
                    continue
                set_values = {n: v for n, v in new.items() if v is not None}
                if rtype == RESOURCE_BROKER:
                    b.alter_broker_configs(name, set_values, validate_only=validate_only, named=names)
                elif rtype == RESOURCE_CLIENT_METRICS:
                    self.client_metrics.alter(name, set_values, validate_only=validate_only)
                else:
                    b.alter_topic_configs(name, set_values, validate_only=validate_only)
            except ApiError as e:
                r.error_code, r.error_message = e.code, e.message
            out.append(r)
        return self._commit_groups(staged, validate_only, out, lambda: respond(out))

    def _check_topic_resource(self, rtype: int, name: str) -> None:
        if rtype != RESOURCE_TOPIC:
            raise ApiError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {rtype}")
        if self.topics.get(name) is None:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")

    # ------------------------------------------------------------ groups
    @staticmethod
    def _check_group_name(name: str, altering: bool = False) -> None:
        if not name:
            raise ApiError(ErrorCode.INVALID_REQUEST, "Default group resources are not allowed." if altering
                           else "Group name must not be empty")

    def _stage_group(self, group_id: str, configs: dict[str, str | None], staged: dict[str, dict[str, str]]) -> None:
        """Validate a group's whole new set of configs (INVALID_CONFIG as Kafka words it) and
        keep it for the commit after the loop."""
        self._check_group_name(group_id, altering=True)
        try:
            self.groups.validate(configs)
        except GroupConfigError as e:
            raise ApiError(ErrorCode.INVALID_CONFIG, str(e)) from None
        staged[group_id] = {n: v for n, v in configs.items() if v is not None}

    def _commit_groups(self, staged: dict[str, dict[str, str]], validate_only: bool, results: list,
                       build: Callable[[], T]) -> T | asyncio.Future[T]:
        """Store the groups' new configs (in ZooKeeper, a round trip), then answer."""
        if validate_only or not staged:
            return build()

        async def commit() -> T:
            for r in results:
                configs = staged.get(r.resource_name) if r.resource_type == RESOURCE_GROUP else None
                if configs is None or r.error_code:
                    continue
                try:
                    await self.groups.alter(r.resource_name, configs)
                except Exception as e:  # a lost ZooKeeper session, a full disk
                    r.error_code, r.error_message = ErrorCode.UNKNOWN_SERVER_ERROR, str(e)
            return build()
        return asyncio.ensure_future(commit())

    def _describe_group(self, group_id: str) -> list[ConfigEntry]:
        """As Kafka's ConfigHelper: each group config with its value in force; its synonyms are
        the group's override (GROUP_CONFIG), then the broker's ``group.<name>`` at each level
        where it is set, else the group config's own default."""
        self._check_group_name(group_id)
        overrides = self.groups.configs_of(group_id)
        defaults = self.groups.defaults()
        levels = broker_levels(self.config, self.topics.dynamic_config)
        out = []
        for key in sorted(GROUP_CONFIGS, key=lambda k: k.name):
            name = key.name
            value = overrides[name] if name in overrides else key.render(defaults[name])
            synonym = broker_synonym(name)
            if synonym in BROKER_CONFIGS:
                synonyms = broker_synonyms(synonym, levels)
            else:
                synonyms = [(name, key.render(key.default), ConfigSource.DEFAULT_CONFIG)]
            if name in overrides:
                synonyms.insert(0, (name, value, ConfigSource.GROUP_CONFIG))
            source = synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG
            out.append(ConfigEntry(name=name, value=value, is_default=source is ConfigSource.DEFAULT_CONFIG,
                                   source=source, config_type=key.type, read_only=False, sensitive=False,
                                   synonyms=tuple(synonyms), documentation=key.doc))
        return out

    # ------------------------------------------------------------ ListConfigResources
    def handle_list_config_resources(
        self, header: RequestHeader, req: ListConfigResourcesRequest, conn: KafkaConnection
    ) -> lcrr.ListConfigResourcesResponse:
        """As Kafka's KafkaApis: DESCRIBE_CONFIGS on the cluster; no type asked means every type
        the version lists; a type it does not list is UNSUPPORTED_VERSION."""
        resp = lcrr.ListConfigResourcesResponse(throttle_time_ms=0, error_code=0, config_resources=[])
        if not self.authz.cluster(conn, AclOperation.DESCRIBE_CONFIGS):
            resp.error_code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            return resp
        listable = LISTABLE_V0 if header.api_version == 0 else LISTABLE
        wanted = set(req.resource_types or ()) or set(listable)
        if not wanted <= listable:
            resp.error_code = ErrorCode.UNSUPPORTED_VERSION
            return resp
        names: list[tuple[str, int]] = []
        if RESOURCE_GROUP in wanted:
            names += [(g, RESOURCE_GROUP) for g in self.groups.group_ids()]
        if RESOURCE_CLIENT_METRICS in wanted:
            names += [(n, RESOURCE_CLIENT_METRICS) for n in sorted(self.client_metrics.names())]
        if wanted & {RESOURCE_BROKER, RESOURCE_BROKER_LOGGER}:
            brokers = sorted(b.broker_id for b in self.metadata_cache.alive_brokers()) \
                if self.metadata_cache is not None else [self.config.node_id]
            for rtype in (RESOURCE_BROKER_LOGGER, RESOURCE_BROKER):
                if rtype in wanted:
                    names += [(str(b), rtype) for b in brokers]
        if RESOURCE_TOPIC in wanted:
            names += [(t, RESOURCE_TOPIC) for t in sorted(self.topics.topic_names())]
        resp.config_resources = [lcrr.ConfigResource(resource_name=n, resource_type=t) for n, t in names]
        return resp
