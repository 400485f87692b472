"""Admin clients: ``AsyncAdminClient`` (asyncio, plain values) and ``AdminClient`` (confluent-kafka's
shape: every call returns futures, keyed by what it was about).

Topic and config changes go to the controller, ListOffsets and DeleteRecords to each partition's
leader, group requests to the group's coordinator (found with FindCoordinator).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import time
import weakref
from dataclasses import dataclass, field
from enum import Enum, IntEnum
from typing import Awaitable, Callable, Coroutine, Hashable, Iterable, Mapping, TypeVar

from rivulet.client import core
from rivulet.client import errors as E
from rivulet.client.client import KafkaClient
from rivulet.client.config import ClientConf, ConfigValue, parse_bootstrap, resolve
from rivulet.client.loop import LoopThread, ThreadStopper
from rivulet.client.types import ClusterMetadata, TopicPartition
# Re-exported: DescribeConfigs' config_source codes, IncrementalAlterConfigs' operations.
from rivulet.common.config import AlterConfigOpType, ConfigSource
from rivulet.common.types import TopicPartition as TP
from rivulet.common.types import share_coordinator_key
from rivulet.protocol.consumer_protocol import decode_assignment
from rivulet.protocol.errors import ErrorCode, ApiError
from rivulet.protocol.messages import alter_share_group_offsets_request as asgoq
from rivulet.protocol.messages import consumer_group_describe_response as cgdr
from rivulet.protocol.messages import create_topics_response as ctr
from rivulet.protocol.messages import delete_share_group_offsets_request as dsgodq
from rivulet.protocol.messages import describe_configs_response as dcr
from rivulet.protocol.messages import describe_groups_response as dgr
from rivulet.protocol.messages import describe_share_group_offsets_request as dsgoq
from rivulet.protocol.messages import metadata_response as mr
from rivulet.protocol.messages import read_share_group_state_request as rsgsq
from rivulet.protocol.messages import read_share_group_state_response as rsgsr
from rivulet.protocol.messages import share_group_describe_response as sgdr
from rivulet.protocol.messages import streams_group_describe_response as stgdr
from rivulet.protocol.schema import ZERO_UUID, Request, Struct
from rivulet.security.acls import AclBinding, AclBindingFilter
from rivulet.security.scram import BY_TYPE as SCRAM_BY_TYPE
from rivulet.security.scram import MECHANISMS as SCRAM_MECHANISMS
from rivulet.security.scram import salted_password

RESOURCE_TOPIC = 2
RESOURCE_CLIENT_METRICS = 16  # a KIP-714 client metrics subscription (a config resource only)
RESOURCE_GROUP_CONFIG = 32  # a GROUP config resource (ResourceType.GROUP is the ACL resource type)

R = TypeVar("R", bound=Struct)  # a request's response message
T = TypeVar("T")  # what a response says of one partition
V = TypeVar("V")  # what a request asks of one partition
K = TypeVar("K", bound=Hashable)
check = core.check


def _raise_for(code: int, message: str | None, what: str) -> None:
    """Raise the broker's error with its message, else naming the request."""
    if code:
        raise ApiError(ErrorCode(code), message or what)


# ---------------------------------------------------------------------------- value types


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    BROKER = 4


class ConsumerGroupState(Enum):
    UNKNOWN = "Unknown"
    PREPARING_REBALANCING = "PreparingRebalance"
    COMPLETING_REBALANCING = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"
    EMPTY = "Empty"

    @classmethod
    def parse(cls, s: str) -> ConsumerGroupState:
        for v in cls:
            if v.value == s:
                return v
        return cls.UNKNOWN


class NewTopic:
    def __init__(self, topic: str, num_partitions: int = -1, replication_factor: int = -1,
                 replica_assignment: list[list[int]] | None = None, config: dict[str, str] | None = None) -> None:
        self.topic = topic
        self.num_partitions = num_partitions
        self.replication_factor = replication_factor
        self.replica_assignment = replica_assignment
        self.config = dict(config or {})

    def __repr__(self) -> str:
        return f"NewTopic(topic={self.topic},num_partitions={self.num_partitions})"


class NewPartitions:
    def __init__(self, topic: str, new_total_count: int, replica_assignment: list[list[int]] | None = None) -> None:
        self.topic = topic
        self.new_total_count = new_total_count
        self.replica_assignment = replica_assignment


class ConfigEntry:
    def __init__(self, name: str, value: str | None, source: int = ConfigSource.UNKNOWN_CONFIG,
                 is_read_only: bool = False, is_default: bool = False, is_sensitive: bool = False,
                 is_synonym: bool = False, synonyms: dict[str, ConfigEntry] | None = None,
                 incremental_operation: AlterConfigOpType | None = None) -> None:
        self.name = name
        self.value = value
        self.source = ConfigSource(source) if source in ConfigSource._value2member_map_ else source
        self.is_read_only = is_read_only
        self.is_default = is_default
        self.is_sensitive = is_sensitive
        self.is_synonym = is_synonym
        self.synonyms = synonyms or {}
        self.incremental_operation = incremental_operation

    def __repr__(self) -> str:
        return f"ConfigEntry({self.name}=\"{self.value}\")"

    def __str__(self) -> str:
        return f"{self.name}=\"{self.value}\""


class ConfigResource:
    Type = ResourceType

    def __init__(self, restype: ResourceType | int | str, name: str, set_config: dict[str, str] | None = None,
                 described_configs: dict[str, ConfigEntry] | None = None, error: E.KafkaError | None = None,
                 incremental_configs: list[ConfigEntry] | None = None) -> None:
        if isinstance(restype, str):
            restype = ResourceType[restype.upper()]
        self.restype = ResourceType(restype)
        self.name = name
        self.set_config_dict = dict(set_config or {})
        self.incremental_configs = list(incremental_configs or [])
        self.configs = described_configs
        self.error = error

    @property
    def config_resource_type(self) -> int:
        """The resource type configs requests carry: a group's is 32 (as confluent-kafka maps it)."""
        return RESOURCE_GROUP_CONFIG if self.restype == ResourceType.GROUP else int(self.restype)

    def set_config(self, name: str, value: str, overwrite: bool = True) -> None:
        if not overwrite and name in self.set_config_dict:
            return
        self.set_config_dict[name] = value

    def add_incremental_config(self, config: ConfigEntry) -> None:
        self.incremental_configs.append(config)

    def __hash__(self) -> int:
        return hash((self.restype, self.name))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConfigResource) and (self.restype, self.name) == (other.restype, other.name)

    def __repr__(self) -> str:
        return f"ConfigResource({self.restype.name},{self.name})"


class OffsetSpec:
    """Which offset list_offsets() looks for: earliest, latest, max_timestamp or a time."""

    def __init__(self, value: int) -> None:
        self._value = value

    @classmethod
    def earliest(cls) -> OffsetSpec:
        return cls(-2)

    @classmethod
    def latest(cls) -> OffsetSpec:
        return cls(-1)

    @classmethod
    def max_timestamp(cls) -> OffsetSpec:
        return cls(-3)

    @classmethod
    def for_timestamp(cls, timestamp: int) -> OffsetSpec:
        return cls(timestamp)


@dataclass
class ListOffsetsResultInfo:
    offset: int
    timestamp: int
    leader_epoch: int | None = None


@dataclass
class DeletedRecords:
    low_watermark: int


@dataclass
class ConsumerGroupListing:
    group_id: str
    is_simple_consumer_group: bool
    state: ConsumerGroupState = ConsumerGroupState.UNKNOWN
    type: str | None = None


@dataclass
class ListConsumerGroupsResult:
    valid: list[ConsumerGroupListing] = field(default_factory=list)
    errors: list[E.KafkaException] = field(default_factory=list)


@dataclass
class MemberAssignment:
    topic_partitions: list[TopicPartition] = field(default_factory=list)


@dataclass
class MemberDescription:
    member_id: str
    client_id: str
    host: str
    assignment: MemberAssignment
    group_instance_id: str | None = None


@dataclass
class Node:
    id: int
    host: str
    port: int
    rack: str | None = None


@dataclass
class ConsumerGroupDescription:
    group_id: str
    is_simple_consumer_group: bool
    members: list[MemberDescription]
    partition_assignor: str
    state: ConsumerGroupState
    coordinator: Node | None = None


@dataclass
class ConsumerGroupTopicPartitions:
    group_id: str
    topic_partitions: list[TopicPartition] | None = None


@dataclass
class SharePartitionOffsetInfo:
    """A share group's position on one partition (Kafka's SharePartitionOffsetInfo): the
    share-partition start offset, and the records from it to the partition's end not yet
    acknowledged or archived (None where the broker does not say)."""

    start_offset: int
    leader_epoch: int | None = None
    lag: int | None = None


@dataclass
class DescribeClusterResult:
    cluster_id: str | None
    controller: Node | None
    nodes: list[Node]


class ClientQuotaEntity:
    """A quota entity, as the Java Admin's: {entity type: name}, a name of None being the default."""

    USER = "user"
    CLIENT_ID = "client-id"
    IP = "ip"

    def __init__(self, entries: dict[str, str | None]) -> None:
        self.entries = dict(entries)

    @property
    def parts(self) -> core.QuotaEntityParts:
        return tuple(sorted(self.entries.items(), key=lambda kv: kv[0]))

    def __hash__(self) -> int:
        return hash(self.parts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ClientQuotaEntity) and self.parts == other.parts

    def __repr__(self) -> str:
        return f"ClientQuotaEntity({self.entries!r})"


@dataclass(frozen=True)
class ClientQuotaFilterComponent:
    """One component of a ``ClientQuotaFilter``: an exact name, the default, or any name."""

    entity_type: str
    match_type: int  # 0 exact, 1 default, 2 any specified
    match: str | None = None

    @classmethod
    def of_entity(cls, entity_type: str, name: str) -> ClientQuotaFilterComponent:
        return cls(entity_type, 0, name)

    @classmethod
    def of_default_entity(cls, entity_type: str) -> ClientQuotaFilterComponent:
        return cls(entity_type, 1, None)

    @classmethod
    def of_entity_type(cls, entity_type: str) -> ClientQuotaFilterComponent:
        return cls(entity_type, 2, None)


@dataclass(frozen=True)
class ClientQuotaFilter:
    """Which quota entities DescribeClientQuotas returns: ``contains`` those with at least the
    components, ``contains_only`` those with exactly them, ``all`` every entity."""

    components: tuple[ClientQuotaFilterComponent, ...] = ()
    strict: bool = False

    @classmethod
    def contains(cls, components: Iterable[ClientQuotaFilterComponent]) -> ClientQuotaFilter:
        return cls(tuple(components), False)

    @classmethod
    def contains_only(cls, components: Iterable[ClientQuotaFilterComponent]) -> ClientQuotaFilter:
        return cls(tuple(components), True)

    @classmethod
    def all(cls) -> ClientQuotaFilter:
        return cls((), False)


@dataclass(frozen=True)
class ClientQuotaAlterationOp:
    """Set ``key`` to ``value``; a value of None removes the quota."""

    key: str
    value: float | None


@dataclass
class ClientQuotaAlteration:
    entity: ClientQuotaEntity
    ops: list[ClientQuotaAlterationOp]


# ---------------------------------------------------------------------------- asyncio


class AsyncAdminClient:
    """Admin operations as coroutines; broker errors raise ``rivulet.protocol.errors.KafkaError``."""

    def __init__(self, bootstrap_servers: str | ClientConf, client_id: str = "rivulet-admin",
                 request_timeout_ms: int = 30000) -> None:
        if isinstance(bootstrap_servers, Mapping):
            conf = resolve(bootstrap_servers, "admin")
        else:
            conf = resolve({"bootstrap.servers": bootstrap_servers, "client.id": client_id,
                            "request.timeout.ms": request_timeout_ms}, "admin")
        self.conf = conf
        self.bootstrap = parse_bootstrap(conf["bootstrap.servers"])
        self.client_id = conf["client.id"]
        self.request_timeout_ms: int = conf["request.timeout.ms"]
        self.client = KafkaClient(conf)

    async def close(self) -> None:
        await self.client.close()

    async def __aenter__(self) -> AsyncAdminClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _controller(self) -> int:
        c = self.client.cluster
        if c.controller_id < 0 or c.controller_id not in c.brokers:
            await self.client.fetch_metadata([])
        cid = self.client.cluster.controller_id
        return cid if cid in self.client.cluster.brokers else -1

    async def _to_controller(self, req: Request[R]) -> R:
        node = await self._controller()
        if node < 0:
            return await self.client.send_any(req)
        return await self.client.send(node, req)

    # ------------------------------------------------------------ topics
    async def metadata(self, topics: list[str] | None = None, allow_auto_create: bool = False) -> mr.MetadataResponse:
        return await self.client.fetch_metadata(topics, allow_auto_create)

    async def create_topics(self, topics: list[NewTopic], validate_only: bool = False
                            ) -> dict[str, ctr.CreatableTopicResult | ApiError]:
        """Create several topics; {name: the broker's CreatableTopicResult or a ApiError}."""
        return core.read_create_topics(await self._to_controller(
            core.create_topics_request(topics, self.request_timeout_ms, validate_only)))

    async def create_topic(self, name: str, partitions: int = -1, replication_factor: int = -1,
                           configs: dict[str, str] | None = None, validate_only: bool = False
                           ) -> ctr.CreatableTopicResult:
        r = (await self.create_topics([NewTopic(name, partitions, replication_factor, config=configs)],
                                      validate_only))[name]
        if isinstance(r, ApiError):
            raise r
        return r

    async def delete_topics(self, names: list[str]) -> dict[str, ApiError | None]:
        return core.read_delete_topics(await self._to_controller(
            core.delete_topics_request(names, self.request_timeout_ms)))

    async def delete_topic(self, name: str) -> None:
        err = (await self.delete_topics([name])).get(name)
        if err is not None:
            raise err

    async def create_partitions(self, name: str, count: int, validate_only: bool = False) -> None:
        core.read_create_partitions(await self._to_controller(
            core.create_partitions_request(name, count, self.request_timeout_ms, validate_only)))

    # ------------------------------------------------------------ configs
    async def describe_configs(self, resource_type: int, name: str, keys: list[str] | None = None
                               ) -> list[dcr.DescribeConfigsResourceResult]:
        req = core.describe_configs_request(resource_type, name, keys)
        # A broker's own configs come from that broker; the cluster default ("") from any.
        resp = await (self.client.send(int(name), req) if resource_type == ResourceType.BROKER and name
                      else self._to_controller(req))
        return core.read_describe_configs(resp)

    async def describe_log_dirs(self, node_id: int) -> dict[str, dict[TP, int]]:
        """Broker ``node_id``'s log dirs: the size in bytes of each partition's log in each."""
        return core.read_describe_log_dirs(await self.client.send(node_id, core.describe_log_dirs_request()))

    async def list_config_resources(self, resource_types: Iterable[int] = ()) -> list[tuple[str, int]]:
        """(name, config resource type) of every config resource of ``resource_types``."""
        return core.read_list_config_resources(await self._to_controller(
            core.list_config_resources_request(resource_types)))

    async def describe_topic_configs(self, name: str) -> list[dcr.DescribeConfigsResourceResult]:
        return await self.describe_configs(RESOURCE_TOPIC, name)

    async def alter_topic_configs(self, name: str, set_: dict[str, str], delete: list[str] | None = None) -> None:
        ops = [(k, AlterConfigOpType.SET, v) for k, v in set_.items()]
        ops += [(k, AlterConfigOpType.DELETE, None) for k in delete or []]
        await self.incremental_alter_configs(RESOURCE_TOPIC, name, ops)

    async def incremental_alter_configs(self, resource_type: int, name: str,
                                        ops: list[tuple[str, int, str | None]], validate_only: bool = False) -> None:
        core.read_alter_configs(await self._to_controller(
            core.incremental_alter_configs_request(resource_type, name, ops, validate_only)))

    async def alter_configs(self, resource_type: int, name: str, configs: dict[str, str],
                            validate_only: bool = False) -> None:
        """The legacy AlterConfigs: replaces the resource's whole set of overrides."""
        core.read_alter_configs(await self._to_controller(
            core.alter_configs_request(resource_type, name, configs, validate_only)))

    # ------------------------------------------------------------ client quotas
    async def describe_client_quotas(self, quota_filter: ClientQuotaFilter | None = None
                                     ) -> dict[ClientQuotaEntity, dict[str, float]]:
        f = quota_filter or ClientQuotaFilter.all()
        resp = await self.client.send_any(core.describe_client_quotas_request(
            [(c.entity_type, c.match_type, c.match) for c in f.components], f.strict))
        return {ClientQuotaEntity(dict(parts)): values
                for parts, values in core.read_describe_client_quotas(resp).items()}

    async def alter_client_quotas(self, alterations: list[ClientQuotaAlteration], validate_only: bool = False
                                  ) -> dict[ClientQuotaEntity, ApiError | None]:
        """Apply the alterations; {entity: None, or the broker's error for it}."""
        resp = await self._to_controller(core.alter_client_quotas_request(
            [(a.entity.parts, {op.key: op.value for op in a.ops}) for a in alterations], validate_only))
        return {ClientQuotaEntity(dict(parts)): err for parts, err in core.read_alter_client_quotas(resp).items()}

    # ------------------------------------------------------------ ACLs
    async def create_acls(self, bindings: list[AclBinding]) -> list[ApiError | None]:
        """Per binding, in order: None when created, else the broker's error for it."""
        return core.read_create_acls(await self.client.send_any(core.create_acls_request(bindings)))

    async def describe_acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        return core.read_describe_acls(await self.client.send_any(core.describe_acls_request(acl_filter)))

    async def delete_acls(self, filters: list[AclBindingFilter]) -> list[list[AclBinding] | ApiError]:
        """Per filter, in order: the ACLs it deleted, or the broker's error for it."""
        return core.read_delete_acls(await self.client.send_any(core.delete_acls_request(filters)))

    # ------------------------------------------------------------ SCRAM credentials
    async def describe_user_scram_credentials(self, users: list[str] | None = None
                                              ) -> dict[str, ApiError | list[tuple[str, int]]]:
        """{user: [(mechanism name, iterations)], or the broker's error for it}."""
        found = core.read_describe_user_scram_credentials(
            await self.client.send_any(core.describe_user_scram_credentials_request(users)))
        return {u: v if isinstance(v, ApiError) else [(SCRAM_BY_TYPE[m].name, i) for m, i in v if m in SCRAM_BY_TYPE]
                for u, v in found.items()}

    async def alter_user_scram_credentials(self, upsertions: list[tuple[str, str, str, int]],
                                           deletions: list[tuple[str, str]]) -> dict[str, ApiError | None]:
        """``upsertions``: (user, mechanism, password, iterations), salted here, so the password
        never leaves the client; ``deletions``: (user, mechanism). {user: None or its error}."""
        ups = []
        for user, mechanism, password, iterations in upsertions:
            mech = SCRAM_MECHANISMS[mechanism]
            salt = os.urandom(32)
            ups.append((user, mech.type_code, iterations, salt, salted_password(mech, password, salt, iterations)))
        resp = await self._to_controller(core.alter_user_scram_credentials_request(
            [(u, SCRAM_MECHANISMS[m].type_code) for u, m in deletions], ups))
        return core.read_alter_user_scram_credentials(resp)

    # ------------------------------------------------------------ partitions' data
    async def _by_leader(self, tps: Iterable[TP]) -> dict[int, list[TP]]:
        tps = list(tps)
        if any(self.client.cluster.leader(t, p) < 0 for t, p in tps):
            await self.client.fetch_metadata({t for t, _ in tps})
        out: dict[int, list[TP]] = {}
        for tp in tps:
            leader = self.client.cluster.leader(*tp)
            if leader < 0:
                raise ApiError(ErrorCode(self.client.cluster.no_leader_error(tp[0])), f"{tp[0]}-{tp[1]}: no leader")
            out.setdefault(leader, []).append(tp)
        return out

    async def _per_leader(self, items: dict[TP, V], build: Callable[[dict[TP, V]], Request[R]],
                          read: Callable[[R], core.PartitionResults[T]], what: str) -> dict[TP, T]:
        """Send ``build(part of items)`` to each partition's leader and merge what ``read``
        finds, retrying partitions whose leader moved."""
        retry: core.LeaderRetry[V, T] = core.LeaderRetry(
            items, what, core.Attempts(self.client.backoff, time.monotonic() + self.request_timeout_ms / 1000),
            self.client.cluster, deadline_per_answer=True)
        while True:
            for node, tps in (await self._by_leader(retry.remaining)).items():
                retry.on_results(read(await self.client.send(node, build({tp: items[tp] for tp in tps}))))
            step = retry.next_round()
            if step is None:
                return retry.found
            await asyncio.sleep(step.delay)

    async def list_offsets(self, specs: dict[TP, int], isolation_level: int = 0) -> dict[TP, tuple[int, int]]:
        """{(topic, partition): timestamp or -1 latest / -2 earliest / -3 max timestamp} ->
        {(topic, partition): (offset, timestamp)}."""
        found = await self._per_leader(
            specs, lambda part: core.list_offsets_request(part, isolation_level, self.request_timeout_ms),
            core.read_list_offsets, "ListOffsets")
        return {tp: (r.offset, r.timestamp) for tp, r in found.items()}

    async def delete_records(self, offsets: dict[TP, int]) -> dict[TP, int]:
        """Delete everything before each offset (-1: the high watermark); returns low watermarks."""
        return await self._per_leader(
            offsets, lambda part: core.delete_records_request(part, self.request_timeout_ms),
            core.read_delete_records, "DeleteRecords")

    # ------------------------------------------------------------ groups
    async def group_coordinator(self, group_id: str) -> core.Coordinator:
        return await self.client.coordinator(group_id, core.GROUP)

    async def _coordinator(self, group_id: str) -> int:
        return (await self.group_coordinator(group_id)).node_id

    async def list_groups(self, states: list[str] | None = None) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) of every group on every broker."""
        if not self.client.cluster.brokers:
            await self.client.fetch_metadata([])
        out = []
        for node in list(self.client.cluster.brokers):
            resp = await self.client.send(node, core.list_groups_request(states or []))
            out += [(g.group_id, g.protocol_type, g.state) for g in core.read_list_groups(resp)]
        return out

    async def describe_groups(self, group_ids: list[str]) -> list[dgr.DescribedGroup]:
        out = []
        for gid in group_ids:
            resp = await self.client.send_to_coordinator(
                gid, core.GROUP, core.describe_groups_request([gid]), lambda r: r.groups[0].error_code)
            out += core.read_describe_groups(resp)
        return out

    async def consumer_group_describe(self, group_id: str) -> cgdr.DescribedGroup:
        """ConsumerGroupDescribe of a KIP-848 group (its described-group entry; a classic group
        answers GROUP_ID_NOT_FOUND in it)."""
        resp = await self.client.send_to_coordinator(
            group_id, core.GROUP, core.consumer_group_describe_request([group_id]),
            lambda r: r.groups[0].error_code)
        return resp.groups[0]

    async def share_group_describe(self, group_id: str) -> sgdr.DescribedGroup:
        """ShareGroupDescribe of a KIP-932 share group (its described-group entry; another kind
        of group answers GROUP_ID_NOT_FOUND in it)."""
        resp = await self.client.send_to_coordinator(
            group_id, core.GROUP, core.share_group_describe_request([group_id]), lambda r: r.groups[0].error_code)
        return resp.groups[0]

    async def streams_group_describe(self, group_id: str) -> stgdr.DescribedGroup:
        """StreamsGroupDescribe of a KIP-1071 streams group (its described-group entry; another
        kind of group answers GROUP_ID_NOT_FOUND in it)."""
        resp = await self.client.send_to_coordinator(
            group_id, core.GROUP, core.streams_group_describe_request([group_id]), lambda r: r.groups[0].error_code)
        return resp.groups[0]

    async def delete_groups(self, group_ids: list[str]) -> dict[str, ApiError | None]:
        out: dict[str, ApiError | None] = {}
        for gid in group_ids:
            resp = await self.client.send_to_coordinator(
                gid, core.GROUP, core.delete_groups_request([gid]), lambda r: r.results[0].error_code)
            for g, code in core.read_delete_groups(resp).items():
                out[g] = ApiError(ErrorCode(code)) if code else None
        return out

    async def delete_group_offsets(self, group_id: str, partitions: list[TP]) -> dict[TP, ApiError | None]:
        """Kafka's deleteConsumerGroupOffsets; a group-level error (GROUP_ID_NOT_FOUND,
        NON_EMPTY_GROUP...) raises, a partition the group still reads gets
        GROUP_SUBSCRIBED_TO_TOPIC in its entry."""
        resp = await self.client.send_to_coordinator(
            group_id, core.GROUP, core.offset_delete_request(group_id, partitions), lambda r: r.error_code)
        return {tp: ApiError(ErrorCode(c)) if c else None for tp, c in core.read_offset_delete(resp).items()}

    async def committed_offsets(self, group_id: str, partitions: list[TP] | None = None,
                                require_stable: bool = False) -> dict[TP, core.OffsetAndMetadata | None]:
        """The group's committed positions (every partition it committed when ``partitions`` is None)."""
        resp = await self.client.send_to_coordinator(
            group_id, core.GROUP, core.offset_fetch_request(group_id, partitions, require_stable),
            core.offset_fetch_error)
        res = core.read_offset_fetch(resp)
        check(res.errors.get(TP("", -1), 0), "OffsetFetch")
        return res.ok

    async def list_group_offsets(self, group_id: str, partitions: list[TP] | None = None) -> dict[TP, int]:
        found = await self.committed_offsets(group_id, partitions)
        return {tp: (om.offset if om is not None else -1) for tp, om in found.items()}

    async def alter_group_offsets(self, group_id: str, offsets: dict[TP, int]) -> dict[TP, ApiError | None]:
        """Kafka's alterConsumerGroupOffsets: a standalone commit, which the broker accepts only
        while the group has no members."""
        req = core.offset_commit_request(group_id, {tp: core.OffsetAndMetadata(o) for tp, o in offsets.items()})
        resp = await self.client.send_to_coordinator(group_id, core.GROUP, req,
                                                     lambda r: core.read_offset_commit(r).first_error())
        res = core.read_offset_commit(resp)
        out: dict[TP, ApiError | None] = {tp: None for tp in res.ok}
        out.update({tp: ApiError(ErrorCode(c)) for tp, c in res.errors.items()})
        return out

    # ------------------------------------------------------------ share-group offsets (KIP-932)
    async def list_share_group_offsets(self, group_id: str, partitions: list[TP] | None = None
                                       ) -> dict[TP, SharePartitionOffsetInfo | None]:
        """Kafka's listShareGroupOffsets: the group's start offset and lag on each partition
        (every partition it has state for when ``partitions`` is None); None where it has none.
        A group-level error raises, a partition's too."""
        topics = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for tp in partitions:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            topics = [dsgoq.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps)
                      for t, ps in by_topic.items()]
        req = dsgoq.DescribeShareGroupOffsetsRequest(groups=[
            dsgoq.DescribeShareGroupOffsetsRequestGroup(group_id=group_id, topics=topics)])
        resp = await self.client.send_to_coordinator(group_id, core.GROUP, req, lambda r: r.groups[0].error_code)
        group = resp.groups[0]
        _raise_for(group.error_code, group.error_message, "DescribeShareGroupOffsets")
        out: dict[TP, SharePartitionOffsetInfo | None] = {}
        for t in group.topics:
            for p in t.partitions:
                _raise_for(p.error_code, p.error_message, "DescribeShareGroupOffsets")
                out[TP(t.topic_name, p.partition_index)] = None if p.start_offset < 0 else SharePartitionOffsetInfo(
                    p.start_offset, p.leader_epoch if p.leader_epoch >= 0 else None, p.lag if p.lag >= 0 else None)
        return out

    async def alter_share_group_offsets(self, group_id: str, offsets: dict[TP, int]) -> dict[TP, ApiError | None]:
        """Kafka's alterShareGroupOffsets: new start offsets for an empty share group (made if
        there is none). A group-level error (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND...) raises."""
        by_topic: dict[str, list[asgoq.AlterShareGroupOffsetsRequestPartition]] = {}
        for tp, offset in offsets.items():
            by_topic.setdefault(tp.topic, []).append(
                asgoq.AlterShareGroupOffsetsRequestPartition(partition_index=tp.partition, start_offset=offset))
        req = asgoq.AlterShareGroupOffsetsRequest(group_id=group_id, topics=[
            asgoq.AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps) for t, ps in by_topic.items()])
        resp = await self.client.send_to_coordinator(group_id, core.GROUP, req, lambda r: r.error_code)
        _raise_for(resp.error_code, resp.error_message, "AlterShareGroupOffsets")
        return {TP(t.topic_name, p.partition_index): ApiError(ErrorCode(p.error_code), p.error_message)
                if p.error_code else None for t in resp.responses for p in t.partitions}

    async def delete_share_group_offsets(self, group_id: str, topics: list[str]) -> dict[str, ApiError | None]:
        """Kafka's deleteShareGroupOffsets: an empty share group forgets its state of these
        topics. A group-level error raises; each topic's outcome is in its entry."""
        req = dsgodq.DeleteShareGroupOffsetsRequest(group_id=group_id, topics=[
            dsgodq.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics])
        resp = await self.client.send_to_coordinator(group_id, core.GROUP, req, lambda r: r.error_code)
        _raise_for(resp.error_code, resp.error_message, "DeleteShareGroupOffsets")
        return {t.topic_name: ApiError(ErrorCode(t.error_code), t.error_message) if t.error_code else None
                for t in resp.responses}

    async def read_share_group_state(self, group_id: str, partitions: list[TP]
                                     ) -> dict[TP, rsgsr.PartitionResult | ApiError]:
        """ReadShareGroupState of each share partition from its share coordinator (FindCoordinator
        key type SHARE): the state as last written to ``__share_group_state``. A broker's request,
        which Kafka answers only to principals with CLUSTER_ACTION and lists on its inter-broker
        listener only: a refusal is the partition's ApiError (CLUSTER_AUTHORIZATION_FAILED,
        UNSUPPORTED_VERSION), as is an error in its answer."""
        md = await self.metadata(sorted({tp.topic for tp in partitions}))
        ids = {t.name: t.topic_id for t in md.topics if not t.error_code}

        async def one(tp: TP) -> rsgsr.PartitionResult | ApiError:
            topic_id = ids.get(tp.topic, ZERO_UUID)
            if topic_id == ZERO_UUID:
                return ApiError(ErrorCode.UNKNOWN_TOPIC_ID, f"no topic id for {tp.topic}")
            req = rsgsq.ReadShareGroupStateRequest(group_id=group_id, topics=[rsgsq.ReadStateData(
                topic_id=topic_id, partitions=[rsgsq.PartitionData(partition=tp.partition, leader_epoch=-1)])])
            try:
                resp = await self.client.send_to_coordinator(
                    share_coordinator_key(group_id, topic_id, tp.partition), core.SHARE, req,
                    lambda r: r.results[0].partitions[0].error_code)
            except ApiError as e:
                return e
            result = resp.results[0].partitions[0]
            return ApiError(ErrorCode(result.error_code), result.error_message) if result.error_code else result
        found = await asyncio.gather(*(one(tp) for tp in partitions))
        return dict(zip(partitions, found))

    async def describe_cluster(self) -> mr.MetadataResponse:
        return await self.client.fetch_metadata([])


# ---------------------------------------------------------------------------- confluent-kafka shape


def _future() -> concurrent.futures.Future:
    f: concurrent.futures.Future = concurrent.futures.Future()
    f.set_running_or_notify_cancel()
    return f


def _exc(e: BaseException) -> E.KafkaException:
    if isinstance(e, ApiError):
        return E.KafkaException(E.broker_error(e.code, e.message))
    if isinstance(e, E.KafkaException):
        return e
    return E.KafkaException(E.KafkaError.from_exception(e))


class AdminClient:
    """confluent-kafka's AdminClient: each call returns {key: concurrent.futures.Future}.

        a = AdminClient({"bootstrap.servers": "localhost:9092"})
        for topic, f in a.create_topics([NewTopic("t", 3)]).items():
            f.result()
    """

    def __init__(self, conf: ClientConf | None = None, **kwargs: ConfigValue) -> None:
        config = resolve(conf, "admin", kwargs)
        self._aio = AsyncAdminClient(config)
        self._lt = LoopThread("rivulet-admin")
        self._finalizer = weakref.finalize(self, ThreadStopper(self._lt, self._aio))

    def _spawn(self, coro: Coroutine[object, object, None]) -> None:
        self._lt.submit(coro)

    def _per_resource(self, resources: list[ConfigResource], one: Callable[[ConfigResource], Awaitable[object]]
                      ) -> dict[ConfigResource, concurrent.futures.Future]:
        """``_per_key`` for config work done resource by resource, in order: what ``one(resource)``
        returns, or the ApiError it raises."""
        async def work() -> dict:
            out: dict[ConfigResource, object] = {}
            for r in resources:
                try:
                    out[r] = await one(r)
                except ApiError as e:
                    out[r] = e
            return out
        return self._per_key(list(resources), work)

    def _per_key(self, keys: list[K], work: Callable[[], Awaitable[Mapping[K, object]]]
                 ) -> dict[K, concurrent.futures.Future]:
        """Run ``work()`` -> {key: result or exception} once; one future per key."""
        futs = {k: _future() for k in keys}

        async def run() -> None:
            try:
                results = await work()
            except BaseException as e:
                for f in futs.values():
                    f.set_exception(_exc(e))
                return
            for k, f in futs.items():
                r = results.get(k, None)
                if isinstance(r, BaseException):
                    f.set_exception(_exc(r))
                else:
                    f.set_result(r)
        self._spawn(run())
        return futs

    def create_topics(self, new_topics: list[NewTopic], operation_timeout: float = 0, request_timeout: float = 30,
                      validate_only: bool = False) -> dict[str, concurrent.futures.Future]:
        async def work() -> dict:
            res = await self._aio.create_topics(new_topics, validate_only)
            return {k: (v if isinstance(v, ApiError) else None) for k, v in res.items()}
        return self._per_key([t.topic for t in new_topics], work)

    def delete_topics(self, topics: list[str], operation_timeout: float = 0, request_timeout: float = 30
                      ) -> dict[str, concurrent.futures.Future]:
        async def work() -> dict:
            return await self._aio.delete_topics(list(topics))
        return self._per_key(list(topics), work)

    def create_partitions(self, new_partitions: list[NewPartitions], operation_timeout: float = 0,
                          request_timeout: float = 30, validate_only: bool = False
                          ) -> dict[str, concurrent.futures.Future]:
        async def work() -> dict:
            out: dict[str, object] = {}
            for np in new_partitions:
                try:
                    await self._aio.create_partitions(np.topic, np.new_total_count, validate_only)
                    out[np.topic] = None
                except ApiError as e:
                    out[np.topic] = e
            return out
        return self._per_key([p.topic for p in new_partitions], work)

    def describe_configs(self, resources: list[ConfigResource], request_timeout: float = 30
                         ) -> dict[ConfigResource, concurrent.futures.Future]:
        async def one(r: ConfigResource) -> dict[str, ConfigEntry]:
            configs = await self._aio.describe_configs(r.config_resource_type, r.name)
            return {c.name: ConfigEntry(
                c.name, c.value, c.config_source, c.read_only, c.config_source == ConfigSource.DEFAULT_CONFIG,
                c.is_sensitive, False,
                {s.name: ConfigEntry(s.name, s.value, s.source, is_synonym=True) for s in c.synonyms or []})
                for c in configs}
        return self._per_resource(resources, one)

    def alter_configs(self, resources: list[ConfigResource], request_timeout: float = 30,
                      validate_only: bool = False) -> dict[ConfigResource, concurrent.futures.Future]:
        async def one(r: ConfigResource) -> None:
            await self._aio.alter_configs(r.config_resource_type, r.name, r.set_config_dict, validate_only)
        return self._per_resource(resources, one)

    def incremental_alter_configs(self, resources: list[ConfigResource], request_timeout: float = 30,
                                  validate_only: bool = False) -> dict[ConfigResource, concurrent.futures.Future]:
        async def one(r: ConfigResource) -> None:
            ops = [(c.name, c.incremental_operation if c.incremental_operation is not None
                    else AlterConfigOpType.SET, c.value) for c in r.incremental_configs]
            await self._aio.incremental_alter_configs(r.config_resource_type, r.name, ops, validate_only)
        return self._per_resource(resources, one)

    def describe_client_quotas(self, quota_filter: ClientQuotaFilter | None = None, request_timeout: float = 30
                               ) -> concurrent.futures.Future:
        """A future of {ClientQuotaEntity: {quota key: value}} (the Java Admin's describeClientQuotas)."""
        async def work() -> dict:
            return {0: await self._aio.describe_client_quotas(quota_filter)}
        return self._per_key([0], work)[0]

    def alter_client_quotas(self, alterations: list[ClientQuotaAlteration], request_timeout: float = 30,
                            validate_only: bool = False) -> dict[ClientQuotaEntity, concurrent.futures.Future]:
        """One future per entity, None when its alteration applied."""
        async def work() -> dict:
            return await self._aio.alter_client_quotas(list(alterations), validate_only)
        return self._per_key([a.entity for a in alterations], work)

    def create_acls(self, acls: list[AclBinding], request_timeout: float = 30) -> dict[AclBinding, concurrent.futures.Future]:
        """One future per binding, None once created (confluent-kafka's create_acls)."""
        async def work() -> dict:
            return dict(zip(acls, await self._aio.create_acls(list(acls))))
        return self._per_key(list(acls), work)

    def describe_acls(self, acl_binding_filter: AclBindingFilter, request_timeout: float = 30
                      ) -> concurrent.futures.Future:
        """A future of the matching bindings."""
        async def work() -> dict:
            return {0: await self._aio.describe_acls(acl_binding_filter)}
        return self._per_key([0], work)[0]

    def delete_acls(self, acl_binding_filters: list[AclBindingFilter], request_timeout: float = 30
                    ) -> dict[AclBindingFilter, concurrent.futures.Future]:
        """One future per filter, of the bindings it deleted."""
        async def work() -> dict:
            return dict(zip(acl_binding_filters, await self._aio.delete_acls(list(acl_binding_filters))))
        return self._per_key(list(acl_binding_filters), work)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        resp = self._lt.run(self._aio.metadata(None if topic is None else [topic]),
                            None if timeout is None or timeout < 0 else timeout)
        return ClusterMetadata.from_response(resp)

    def describe_cluster(self, request_timeout: float = 30) -> concurrent.futures.Future:
        async def work() -> dict:
            md = await self._aio.describe_cluster()
            nodes = [Node(b.node_id, b.host, b.port, b.rack) for b in md.brokers]
            ctrl = next((n for n in nodes if n.id == md.controller_id), None)
            return {0: DescribeClusterResult(md.cluster_id, ctrl, nodes)}
        return self._per_key([0], work)[0]

    def list_offsets(self, topic_partition_offsets: dict[TopicPartition, OffsetSpec], isolation_level: int = 0,
                     request_timeout: float = 30) -> dict[TopicPartition, concurrent.futures.Future]:
        specs = {(tp.topic, tp.partition): spec._value for tp, spec in topic_partition_offsets.items()}
        keys = list(topic_partition_offsets)

        async def work() -> dict:
            res = await self._aio.list_offsets(specs, int(isolation_level))
            return {tp: ListOffsetsResultInfo(*res[(tp.topic, tp.partition)]) for tp in keys
                    if (tp.topic, tp.partition) in res}
        return self._per_key(keys, work)

    def delete_records(self, topic_partition_offsets: list[TopicPartition], request_timeout: float = 30,
                       operation_timeout: float = 30) -> dict[TopicPartition, concurrent.futures.Future]:
        keys = list(topic_partition_offsets)

        async def work() -> dict:
            res = await self._aio.delete_records({(tp.topic, tp.partition): tp.offset for tp in keys})
            return {tp: DeletedRecords(res[(tp.topic, tp.partition)]) for tp in keys}
        return self._per_key(keys, work)

    def list_consumer_groups(self, request_timeout: float = 30, states: Iterable[ConsumerGroupState | str] | None = None
                             ) -> concurrent.futures.Future:
        async def work() -> dict:
            wanted = [s.value if isinstance(s, ConsumerGroupState) else str(s) for s in states or []]
            groups = await self._aio.list_groups(wanted)
            return {0: ListConsumerGroupsResult(valid=[
                ConsumerGroupListing(g, ptype == "", ConsumerGroupState.parse(state), "classic")
                for g, ptype, state in groups])}
        return self._per_key([0], work)[0]

    def describe_consumer_groups(self, group_ids: list[str], request_timeout: float = 30,
                                 include_authorized_operations: bool = False
                                 ) -> dict[str, concurrent.futures.Future]:
        async def work() -> dict:
            out: dict[str, object] = {}
            for g in await self._aio.describe_groups(list(group_ids)):
                if g.error_code:
                    out[g.group_id] = ApiError(ErrorCode(g.error_code), f"DescribeGroups {g.group_id}")
                    continue
                members = []
                for m in g.members:
                    try:
                        tps, _ = decode_assignment(bytes(m.member_assignment)) if g.protocol_type == "consumer" \
                            else ([], None)
                    except Exception:
                        tps = []
                    members.append(MemberDescription(m.member_id, m.client_id, m.client_host,
                                                     MemberAssignment([TopicPartition(t, p) for t, p in tps]),
                                                     m.group_instance_id))
                out[g.group_id] = ConsumerGroupDescription(
                    g.group_id, g.protocol_type == "", members, g.protocol_data,
                    ConsumerGroupState.parse(g.group_state))
            return out
        return self._per_key(list(group_ids), work)

    def delete_consumer_groups(self, group_ids: list[str], request_timeout: float = 30
                               ) -> dict[str, concurrent.futures.Future]:
        async def work() -> dict:
            return await self._aio.delete_groups(list(group_ids))
        return self._per_key(list(group_ids), work)

    def list_consumer_group_offsets(self, list_consumer_group_offsets_request: list[ConsumerGroupTopicPartitions],
                                    require_stable: bool = False, request_timeout: float = 30
                                    ) -> dict[str, concurrent.futures.Future]:
        reqs = list(list_consumer_group_offsets_request)

        async def work() -> dict:
            out: dict[str, object] = {}
            for r in reqs:
                parts = None if not r.topic_partitions else [(tp.topic, tp.partition) for tp in r.topic_partitions]
                offs = await self._aio.list_group_offsets(r.group_id, parts)
                out[r.group_id] = ConsumerGroupTopicPartitions(
                    r.group_id, [TopicPartition(t, p, o) for (t, p), o in sorted(offs.items())])
            return out
        return self._per_key([r.group_id for r in reqs], work)

    def close(self) -> None:
        try:
            self._lt.run(self._aio.close(), 10)
        finally:
            self._finalizer()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
