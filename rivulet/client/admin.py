"""Admin clients: ``AsyncAdminClient`` (asyncio, plain values) and ``AdminClient`` (confluent-kafka's
shape: every call returns futures, keyed by what it was about).

Topic and config changes go to the controller, ListOffsets and DeleteRecords to each partition's
leader, group requests to the group's coordinator (found with FindCoordinator).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import weakref
from dataclasses import dataclass, field
from enum import Enum, IntEnum
from typing import Any, Iterable

from rivulet.client import errors as E
from rivulet.client.assignors import decode_assignment
from rivulet.client.client import KafkaClient, parse_bootstrap  # noqa: F401  (re-exported for older imports)
from rivulet.client.config import resolve
from rivulet.client.types import ClusterMetadata, TopicPartition
from rivulet.protocol.errors import ErrorCode, KafkaError
from rivulet.protocol.messages import (
    alter_configs_request as acq,
    create_partitions_request as cpq,
    create_topics_request as ctq,
    delete_groups_request as dgq,
    delete_records_request as drq,
    delete_topics_request as dtq,
    describe_configs_request as dcq,
    describe_groups_request as dgrq,
    find_coordinator_request as fcq,
    incremental_alter_configs_request as iacq,
    list_groups_request as lgq,
    list_offsets_request as loq,
    offset_fetch_request as ofq,
)

RESOURCE_TOPIC = 2
TP = tuple[str, int]


def check(code: int, message: str | None = None) -> None:
    if code:
        raise KafkaError(ErrorCode(code), message)


# ---------------------------------------------------------------------------- value types


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    BROKER = 4


class AlterConfigOpType(IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class ConfigSource(IntEnum):
    UNKNOWN_CONFIG = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


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
                 described_configs: Any = None, error: Any = None,
                 incremental_configs: list[ConfigEntry] | None = None) -> None:
        if isinstance(restype, str):
            restype = ResourceType[restype.upper()]
        self.restype = ResourceType(restype)
        self.name = name
        self.set_config_dict = dict(set_config or {})
        self.incremental_configs = list(incremental_configs or [])
        self.configs = described_configs
        self.error = error

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
    errors: list[Any] = field(default_factory=list)


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
class DescribeClusterResult:
    cluster_id: str | None
    controller: Node | None
    nodes: list[Node]


# ---------------------------------------------------------------------------- asyncio


class AsyncAdminClient:
    """Admin operations as coroutines; broker errors raise ``rivulet.protocol.errors.KafkaError``."""

    def __init__(self, bootstrap_servers: str | dict[str, Any], client_id: str = "rivulet-admin",
                 request_timeout_ms: int = 30000) -> None:
        if isinstance(bootstrap_servers, dict):
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

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _controller(self) -> int:
        c = self.client.cluster
        if c.controller_id < 0 or c.controller_id not in c.brokers:
            await self.client.fetch_metadata([])
        cid = self.client.cluster.controller_id
        return cid if cid in self.client.cluster.brokers else -1

    async def _to_controller(self, req: Any) -> Any:
        node = await self._controller()
        if node < 0:
            return await self.client.send_any(req)
        return await self.client.send(node, req)

    # ------------------------------------------------------------ topics
    async def metadata(self, topics: list[str] | None = None, allow_auto_create: bool = False) -> Any:
        return await self.client.fetch_metadata(topics, allow_auto_create)

    async def create_topics(self, topics: list[NewTopic], validate_only: bool = False
                            ) -> dict[str, Any]:
        """Create several topics; {name: the broker's CreatableTopicResult or a KafkaError}."""
        req = ctq.CreateTopicsRequest(topics=[
            ctq.CreatableTopic(
                name=t.topic, num_partitions=t.num_partitions if not t.replica_assignment else -1,
                replication_factor=t.replication_factor if not t.replica_assignment else -1,
                assignments=[ctq.CreatableReplicaAssignment(partition_index=i, broker_ids=list(r))
                             for i, r in enumerate(t.replica_assignment or [])],
                configs=[ctq.CreatableTopicConfig(name=k, value=str(v)) for k, v in t.config.items()])
            for t in topics], timeout_ms=self.request_timeout_ms, validate_only=validate_only)
        resp = await self._to_controller(req)
        out: dict[str, Any] = {}
        for r in resp.topics:
            out[r.name] = KafkaError(ErrorCode(r.error_code), r.error_message) if r.error_code else r
        return out

    async def create_topic(self, name: str, partitions: int = -1, replication_factor: int = -1,
                           configs: dict[str, str] | None = None, validate_only: bool = False) -> Any:
        r = (await self.create_topics([NewTopic(name, partitions, replication_factor, config=configs)],
                                      validate_only))[name]
        if isinstance(r, KafkaError):
            raise r
        return r

    async def delete_topics(self, names: list[str]) -> dict[str, KafkaError | None]:
        resp = await self._to_controller(dtq.DeleteTopicsRequest(
            topic_names=list(names), topics=[dtq.DeleteTopicState(name=n) for n in names],
            timeout_ms=self.request_timeout_ms))
        return {r.name: KafkaError(ErrorCode(r.error_code), getattr(r, "error_message", None)) if r.error_code
                else None for r in resp.responses}

    async def delete_topic(self, name: str) -> None:
        err = (await self.delete_topics([name])).get(name)
        if err is not None:
            raise err

    async def create_partitions(self, name: str, count: int, validate_only: bool = False) -> None:
        resp = await self._to_controller(cpq.CreatePartitionsRequest(
            topics=[cpq.CreatePartitionsTopic(name=name, count=count, assignments=None)],
            timeout_ms=self.request_timeout_ms, validate_only=validate_only))
        r = resp.results[0]
        check(r.error_code, r.error_message)

    # ------------------------------------------------------------ configs
    async def describe_configs(self, resource_type: int, name: str, keys: list[str] | None = None) -> list[Any]:
        req = dcq.DescribeConfigsRequest(
            resources=[dcq.DescribeConfigsResource(resource_type=int(resource_type), resource_name=name,
                                                   configuration_keys=keys)],
            include_synonyms=True, include_documentation=False)
        resp = await (self._to_controller(req) if resource_type != ResourceType.BROKER
                      else self.client.send(int(name), req))
        r = resp.results[0]
        check(r.error_code, r.error_message)
        return r.configs

    async def describe_topic_configs(self, name: str) -> list[Any]:
        return await self.describe_configs(RESOURCE_TOPIC, name)

    async def alter_topic_configs(self, name: str, set_: dict[str, str], delete: list[str] | None = None) -> None:
        ops = [(k, AlterConfigOpType.SET, v) for k, v in set_.items()]
        ops += [(k, AlterConfigOpType.DELETE, None) for k in delete or []]
        await self.incremental_alter_configs(RESOURCE_TOPIC, name, ops)

    async def incremental_alter_configs(self, resource_type: int, name: str,
                                        ops: list[tuple[str, int, str | None]], validate_only: bool = False) -> None:
        req = iacq.IncrementalAlterConfigsRequest(
            resources=[iacq.AlterConfigsResource(
                resource_type=int(resource_type), resource_name=name,
                configs=[iacq.AlterableConfig(name=k, config_operation=int(op), value=v) for k, op, v in ops])],
            validate_only=validate_only)
        resp = await self._to_controller(req)
        r = resp.responses[0]
        check(r.error_code, r.error_message)

    async def alter_configs(self, resource_type: int, name: str, configs: dict[str, str],
                            validate_only: bool = False) -> None:
        """The legacy AlterConfigs: replaces the resource's whole set of overrides."""
        req = acq.AlterConfigsRequest(
            resources=[acq.AlterConfigsResource(
                resource_type=int(resource_type), resource_name=name,
                configs=[acq.AlterableConfig(name=k, value=v) for k, v in configs.items()])],
            validate_only=validate_only)
        resp = await self._to_controller(req)
        r = resp.responses[0]
        check(r.error_code, r.error_message)

    # ------------------------------------------------------------ partitions' data
    async def _by_leader(self, tps: Iterable[TP]) -> dict[int, list[TP]]:
        tps = list(tps)
        topics = {t for t, _ in tps}
        if any(self.client.cluster.leader(t, p) < 0 for t, p in tps):
            await self.client.fetch_metadata(topics)
        out: dict[int, list[TP]] = {}
        for tp in tps:
            leader = self.client.cluster.leader(*tp)
            if leader < 0:
                tm = self.client.cluster.topics.get(tp[0])
                code = tm.error if tm is not None and tm.error else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                raise KafkaError(ErrorCode(code), f"{tp[0]}-{tp[1]}: no leader")
            out.setdefault(leader, []).append(tp)
        return out

    async def list_offsets(self, specs: dict[TP, int], isolation_level: int = 0) -> dict[TP, tuple[int, int]]:
        """{(topic, partition): timestamp or -1 latest / -2 earliest / -3 max timestamp} ->
        {(topic, partition): (offset, timestamp)}."""
        out: dict[TP, tuple[int, int]] = {}
        for node, tps in (await self._by_leader(specs)).items():
            topics: dict[str, list[loq.ListOffsetsPartition]] = {}
            for t, p in tps:
                topics.setdefault(t, []).append(loq.ListOffsetsPartition(
                    partition_index=p, current_leader_epoch=-1, timestamp=specs[(t, p)], max_num_offsets=1))
            resp = await self.client.send(node, loq.ListOffsetsRequest(
                replica_id=-1, isolation_level=isolation_level, timeout_ms=self.request_timeout_ms,
                topics=[loq.ListOffsetsTopic(name=t, partitions=ps) for t, ps in topics.items()]))
            for t in resp.topics:
                for p in t.partitions:
                    check(p.error_code, f"ListOffsets {t.name}-{p.partition_index}")
                    out[(t.name, p.partition_index)] = (p.offset, p.timestamp)
        return out

    async def delete_records(self, offsets: dict[TP, int]) -> dict[TP, int]:
        """Delete everything before each offset (-1: the high watermark); returns low watermarks."""
        out: dict[TP, int] = {}
        for node, tps in (await self._by_leader(offsets)).items():
            topics: dict[str, list[drq.DeleteRecordsPartition]] = {}
            for t, p in tps:
                topics.setdefault(t, []).append(drq.DeleteRecordsPartition(partition_index=p, offset=offsets[(t, p)]))
            resp = await self.client.send(node, drq.DeleteRecordsRequest(
                topics=[drq.DeleteRecordsTopic(name=t, partitions=ps) for t, ps in topics.items()],
                timeout_ms=self.request_timeout_ms))
            for t in resp.topics:
                for p in t.partitions:
                    check(p.error_code, f"DeleteRecords {t.name}-{p.partition_index}")
                    out[(t.name, p.partition_index)] = p.low_watermark
        return out

    # ------------------------------------------------------------ groups
    async def _coordinator(self, group_id: str) -> int:
        for _ in range(20):
            resp = await self.client.send_any(fcq.FindCoordinatorRequest(
                key=group_id, key_type=0, coordinator_keys=[group_id]))
            if resp.coordinators:
                c = resp.coordinators[0]
                code, node, host, port = c.error_code, c.node_id, c.host, c.port
            else:
                code, node, host, port = resp.error_code, resp.node_id, resp.host, resp.port
            if code == 0:
                self.client.cluster.brokers.setdefault(node, (host, port))
                return node
            if code not in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                            ErrorCode.NOT_COORDINATOR):
                raise KafkaError(ErrorCode(code), f"FindCoordinator for {group_id}")
            await asyncio.sleep(0.1)
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"no coordinator for {group_id}")

    async def list_groups(self, states: list[str] | None = None) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) of every group on every broker."""
        if not self.client.cluster.brokers:
            await self.client.fetch_metadata([])
        out = []
        for node in list(self.client.cluster.brokers):
            resp = await self.client.send(node, lgq.ListGroupsRequest(states_filter=list(states or []),
                                                                      types_filter=[]))
            check(resp.error_code, "ListGroups")
            out += [(g.group_id, g.protocol_type, getattr(g, "group_state", "") or "") for g in resp.groups]
        return out

    async def describe_groups(self, group_ids: list[str]) -> list[Any]:
        out = []
        for gid in group_ids:
            node = await self._coordinator(gid)
            resp = await self.client.send(node, dgrq.DescribeGroupsRequest(groups=[gid],
                                                                           include_authorized_operations=False))
            out += resp.groups
        return out

    async def delete_groups(self, group_ids: list[str]) -> dict[str, KafkaError | None]:
        out: dict[str, KafkaError | None] = {}
        for gid in group_ids:
            node = await self._coordinator(gid)
            resp = await self.client.send(node, dgq.DeleteGroupsRequest(groups_names=[gid]))
            for r in resp.results:
                out[r.group_id] = KafkaError(ErrorCode(r.error_code)) if r.error_code else None
        return out

    async def list_group_offsets(self, group_id: str, partitions: list[TP] | None = None) -> dict[TP, int]:
        node = await self._coordinator(group_id)
        topics = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for t, p in partitions:
                by_topic.setdefault(t, []).append(p)
            topics = [ofq.OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in by_topic.items()]
        resp = await self.client.send(node, ofq.OffsetFetchRequest(group_id=group_id, topics=topics,
                                                                   require_stable=False))
        check(getattr(resp, "error_code", 0), "OffsetFetch")
        return {(t.name, p.partition_index): p.committed_offset for t in resp.topics for p in t.partitions
                if p.error_code == 0}

    async def describe_cluster(self) -> Any:
        return await self.client.fetch_metadata([])


# ---------------------------------------------------------------------------- confluent-kafka shape


def _future() -> concurrent.futures.Future:
    f: concurrent.futures.Future = concurrent.futures.Future()
    f.set_running_or_notify_cancel()
    return f


def _exc(e: BaseException) -> E.KafkaException:
    if isinstance(e, KafkaError):
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

    def __init__(self, conf: dict[str, Any] | None = None, **kwargs: Any) -> None:
        from rivulet.client.sync import LoopThread, _stop_thread
        config = resolve(conf, "admin", kwargs)
        self._lt = LoopThread("rivulet-admin")
        self._finalizer = weakref.finalize(self, _stop_thread, self._lt)
        self._aio = AsyncAdminClient(dict(config))

    def _spawn(self, coro: Any) -> None:
        self._lt.submit(coro)

    def _per_key(self, keys: list[Any], work: Any) -> dict[Any, concurrent.futures.Future]:
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
            return {k: (v if isinstance(v, KafkaError) else None) for k, v in res.items()}
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
            out: dict[str, Any] = {}
            for np in new_partitions:
                try:
                    await self._aio.create_partitions(np.topic, np.new_total_count, validate_only)
                    out[np.topic] = None
                except KafkaError as e:
                    out[np.topic] = e
            return out
        return self._per_key([p.topic for p in new_partitions], work)

    def describe_configs(self, resources: list[ConfigResource], request_timeout: float = 30
                         ) -> dict[ConfigResource, concurrent.futures.Future]:
        async def work() -> dict:
            out: dict[ConfigResource, Any] = {}
            for r in resources:
                try:
                    configs = await self._aio.describe_configs(r.restype, r.name)
                    out[r] = {c.name: ConfigEntry(
                        c.name, c.value, c.config_source, c.read_only, c.config_source == ConfigSource.DEFAULT_CONFIG,
                        c.is_sensitive, False,
                        {s.name: ConfigEntry(s.name, s.value, s.source, is_synonym=True) for s in c.synonyms or []})
                        for c in configs}
                except KafkaError as e:
                    out[r] = e
            return out
        return self._per_key(list(resources), work)

    def alter_configs(self, resources: list[ConfigResource], request_timeout: float = 30,
                      validate_only: bool = False) -> dict[ConfigResource, concurrent.futures.Future]:
        async def work() -> dict:
            out: dict[ConfigResource, Any] = {}
            for r in resources:
                try:
                    await self._aio.alter_configs(r.restype, r.name, r.set_config_dict, validate_only)
                    out[r] = None
                except KafkaError as e:
                    out[r] = e
            return out
        return self._per_key(list(resources), work)

    def incremental_alter_configs(self, resources: list[ConfigResource], request_timeout: float = 30,
                                  validate_only: bool = False) -> dict[ConfigResource, concurrent.futures.Future]:
        async def work() -> dict:
            out: dict[ConfigResource, Any] = {}
            for r in resources:
                ops = [(c.name, c.incremental_operation if c.incremental_operation is not None
                        else AlterConfigOpType.SET, c.value) for c in r.incremental_configs]
                try:
                    await self._aio.incremental_alter_configs(r.restype, r.name, ops, validate_only)
                    out[r] = None
                except KafkaError as e:
                    out[r] = e
            return out
        return self._per_key(list(resources), work)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        resp = self._lt.run(self._aio.metadata(None if topic is None else [topic]),
                            None if timeout is None or timeout < 0 else timeout)
        return ClusterMetadata.from_response(resp)

    def describe_cluster(self, request_timeout: float = 30) -> concurrent.futures.Future:
        async def work() -> dict:
            md = await self._aio.describe_cluster()
            nodes = [Node(b.node_id, b.host, b.port, getattr(b, "rack", None)) for b in md.brokers]
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

    def list_consumer_groups(self, request_timeout: float = 30, states: Any = None) -> concurrent.futures.Future:
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
            out: dict[str, Any] = {}
            for g in await self._aio.describe_groups(list(group_ids)):
                if g.error_code:
                    out[g.group_id] = KafkaError(ErrorCode(g.error_code), f"DescribeGroups {g.group_id}")
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
                                                     getattr(m, "group_instance_id", None)))
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
            out: dict[str, Any] = {}
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

    def __exit__(self, *exc: Any) -> None:
        self.close()
