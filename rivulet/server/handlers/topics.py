"""Request handlers of topic metadata and topic administration: Metadata,
DescribeTopicPartitions, DescribeCluster, CreateTopics, DeleteTopics, CreatePartitions."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

from rivulet.common.cluster import NodeEndpoint
from rivulet.common.types import TopicPartition
from rivulet.protocol.errors import DEFAULT_MESSAGES, ApiError, ErrorCode
from rivulet.protocol.framing import RequestHeader
from rivulet.protocol.messages import (
    create_partitions_response as cpr,
    create_topics_response as ctr,
    delete_topics_response as dtr,
    describe_cluster_response as dcr,
    describe_topic_partitions_response as dtpr,
    metadata_response as mr,
)
from rivulet.protocol.messages.create_partitions_request import CreatePartitionsRequest, CreatePartitionsTopic
from rivulet.protocol.messages.create_topics_request import CreatableTopic, CreateTopicsRequest
from rivulet.protocol.messages.delete_topics_request import DeleteTopicsRequest
from rivulet.protocol.messages.describe_cluster_request import DescribeClusterRequest
from rivulet.protocol.messages.describe_topic_partitions_request import DescribeTopicPartitionsRequest
from rivulet.protocol.messages.metadata_request import MetadataRequest
from rivulet.protocol.schema import ZERO_UUID
from rivulet.replication.internal_log import InternalTopicCoordinator
from rivulet.replication.metadata_cache import MetadataCache
from rivulet.replication.replica_manager import ReplicaManager
from rivulet.security.acls import AclOperation as Op, ResourceType
from rivulet.server.acls import OPERATIONS_NOT_REQUESTED, Authz
from rivulet.server.answer import Answer
from rivulet.server.config import BrokerConfig
from rivulet.server.handlers import Handler
from rivulet.server.internal_topics import ClusterInternalTopics
from rivulet.server.metadata import INTERNAL_TOPICS, validate_topic_name
from rivulet.server.network import KafkaConnection, Listener
from rivulet.server.quotas import ControllerMutationQuota, ControllerMutationQuotaManager
from rivulet.server.topics import TopicManager, check_manual_assignment, check_partition_increase
from rivulet.server.zk_cluster import ZkClusterMember

log = logging.getLogger(__name__)

# Kafka's controller refuses a request that would create more partitions than this at once:
# such batches ran it out of memory.
MAX_PARTITIONS_PER_BATCH = 10_000
# How long a Metadata request that reaches a just-started cluster broker waits for the controller's
# first UpdateMetadata before it is answered from the empty view.
FIRST_METADATA_WAIT_S = 10.0


@dataclass(frozen=True, slots=True)
class PartitionView:
    """A partition as this broker describes it to clients (Metadata, DescribeTopicPartitions)."""

    index: int
    leader: int             # -1: no live leader
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline: list[int]
    elr: list[int] = field(default_factory=list)  # KIP-966: eligible leader replicas
    last_known_elr: list[int] = field(default_factory=list)


@contextmanager
def errors_into(res: ctr.CreatableTopicResult | dtr.DeletableTopicResult) -> Iterator[None]:
    """An ApiError raised inside becomes ``res``'s error_code and error_message."""
    try:
        yield
    except ApiError as e:
        res.error_code = e.code
        res.error_message = e.message


def _creatable_result(name: str) -> ctr.CreatableTopicResult:
    return ctr.CreatableTopicResult(name=name, error_code=0, error_message=None, topic_id=ZERO_UUID,
                                    num_partitions=-1, replication_factor=-1, configs=None)


def _requested_partitions(req: CreateTopicsRequest, default_partitions: int) -> int:
    total = 0
    for t in req.topics:
        if t.assignments:
            total += len(t.assignments)
        elif t.num_partitions == -1:
            total += default_partitions
        elif t.num_partitions > 0:
            total += t.num_partitions
    return total


@dataclass(eq=False)
class TopicHandlers:
    topics: TopicManager
    replica_manager: ReplicaManager
    config: BrokerConfig
    node: NodeEndpoint
    cluster_id: str
    mutation_quotas: ControllerMutationQuotaManager
    authz: Authz
    # Cluster mode: brokers, leaders and ISRs as the controller's UpdateMetadata stated them.
    metadata_cache: MetadataCache | None = None
    # ZooKeeper mode: topic creations and deletions are written to ZooKeeper, for the controller
    # to carry out, as Kafka 2.x's brokers do.
    cluster: ZkClusterMember | None = None
    # The coordinators by the name of their internal topic: Metadata asking for one, with
    # auto-creation, has it made as for its coordinator (on a single node by the coordinator,
    # in cluster mode by the controller, through the FindCoordinator's path).
    internal_topics: Mapping[str, InternalTopicCoordinator] = field(default_factory=dict)
    cluster_internal_topics: ClusterInternalTopics | None = None

    def handlers(self) -> dict[int, Handler]:
        return {3: self.handle_metadata, 19: self.handle_create_topics, 20: self.handle_delete_topics,
                37: self.handle_create_partitions, 60: self.handle_describe_cluster,
                75: self.handle_describe_topic_partitions}

    # ------------------------------------------------------------ Metadata
    def _live_brokers(self, listener: Listener) -> list[tuple[int, str, int, str | None]]:
        """(id, host, port, rack) of every live broker on the listener the client came in on."""
        cache = self.metadata_cache
        if cache is None:
            n = listener.advertised or self.node
            return [(self.node.node_id, n.host, n.port, None)]
        out = []
        for b in cache.alive_brokers():
            e = b.endpoint(listener.name)
            if e is not None:
                out.append((b.broker_id, e.host, e.port, b.rack))
        return out

    def _controller_id(self) -> int:
        cache = self.metadata_cache
        if cache is None:
            return self.node.node_id
        return cache.controller_id if cache.controller_id is not None else -1

    def _broker_list(self, listener: Listener) -> list[mr.MetadataResponseBroker]:
        return [mr.MetadataResponseBroker(node_id=i, host=h, port=p, rack=r)
                for i, h, p, r in self._live_brokers(listener)]

    def _fenced_here(self, topic: str, partition: int, leader: int) -> bool:
        """This broker, named leader, has stopped leading: its ZooKeeper session expired."""
        return leader == self.node.node_id and self.replica_manager.is_fenced(TopicPartition(topic, partition))

    def _partition_views(self, name: str) -> list[PartitionView] | None:
        """The topic's partitions: the controller's view in cluster mode, else this broker's
        own (the only replica of each). None if the topic is unknown here."""
        cache = self.metadata_cache
        if cache is not None:
            if not cache.contains_topic(name):
                return None
            alive = cache.brokers
            return [PartitionView(i, st.leader if st.leader in alive and not self._fenced_here(name, i, st.leader)
                                  else -1, st.leader_epoch, list(st.replicas), list(st.isr), list(st.offline_replicas),
                                  list(st.eligible_leader_replicas), list(st.last_known_elr))
                    for i, st in sorted(cache.partitions(name).items())]
        info = self.topics.get(name)
        if info is None:
            return None
        node_id = self.node.node_id
        rm = self.replica_manager
        out = []
        for i in range(info.num_partitions):
            tp = TopicPartition(name, i)
            p = rm.partitions.get(tp)
            epoch = p.leader_epoch if p else 0
            if p.log.offline if p is not None else tp in rm.offline_partitions:
                # The only replica's log dir failed: no leader, as Kafka's controller reports it.
                out.append(PartitionView(i, -1, epoch, [node_id], [], [node_id]))
            else:
                out.append(PartitionView(i, node_id, epoch, [node_id], [node_id], []))
        return out

    def _metadata_partitions(self, name: str, v: int) -> list[mr.MetadataResponsePartition]:
        out = []
        for pv in self._partition_views(name) or ():
            error = ErrorCode.NONE
            replicas, isr = pv.replicas, pv.isr
            if v == 0 and self.metadata_cache is not None:
                # Version 0 clients are told about unavailable replicas and see only live ones.
                alive = self.metadata_cache.brokers
                live_replicas = [r for r in replicas if r in alive]
                live_isr = [r for r in isr if r in alive]
                if len(live_replicas) < len(replicas) or len(live_isr) < len(isr):
                    error = ErrorCode.REPLICA_NOT_AVAILABLE
                replicas, isr = live_replicas, live_isr
            if pv.leader < 0:
                error = ErrorCode.LEADER_NOT_AVAILABLE
            out.append(mr.MetadataResponsePartition(
                error_code=error, partition_index=pv.index, leader_id=pv.leader, leader_epoch=pv.leader_epoch,
                replica_nodes=replicas, isr_nodes=isr, offline_replicas=pv.offline))
        return out

    def _requested_topics(self, req: MetadataRequest) -> tuple[list[str], list[mr.MetadataResponseTopic]]:
        """The names a Metadata request asks about, and the answers for ids this broker does not
        know, as Kafka reads the request: an all-zero topic id means "by name"; once any entry
        carries an id, the request is by id and names beside ids are ignored (v12+)."""
        ids = list(dict.fromkeys(t.topic_id for t in req.topics if t.topic_id != ZERO_UUID))
        if not ids:
            names = [t.name for t in req.topics]
            if None in names:
                # Kafka fails the whole request on a null name without an id (v12+).
                raise ApiError(ErrorCode.UNKNOWN_SERVER_ERROR)
            return list(dict.fromkeys(names)), []
        known, unknown = [], []
        for topic_id in ids:
            name = self._resolve_topic_id(topic_id)
            if name is None:
                unknown.append(mr.MetadataResponseTopic(name=None, topic_id=topic_id, is_internal=False,
                                                        partitions=[], error_code=ErrorCode.UNKNOWN_TOPIC_ID))
            else:
                known.append(name)
        return known, unknown

    @staticmethod
    def _metadata_refused(req: MetadataRequest, code: ErrorCode) -> mr.MetadataResponse:
        """A Metadata request failed as a whole: each topic asked for carries the error."""
        return mr.MetadataResponse(throttle_time_ms=0, brokers=[], cluster_id=None, controller_id=-1, topics=[
            mr.MetadataResponseTopic(name=t.name or "", topic_id=t.topic_id, is_internal=False, partitions=[],
                                     error_code=code) for t in req.topics or ()])

    def handle_metadata(self, header: RequestHeader, req: MetadataRequest, conn: KafkaConnection) -> Answer:
        cache = self.metadata_cache
        if cache is None or cache.initialized:
            return self._metadata(header, req, conn)
        # A Kafka 4.3 broker serves no request before it has caught up with the cluster's metadata;
        # answered now, the response would name no broker at all (librdkafka was seen to lose a
        # consumer's join over one). So it waits for the controller's first UpdateMetadata.
        answer: asyncio.Future[mr.MetadataResponse] = asyncio.get_running_loop().create_future()

        def respond() -> None:
            if not answer.done():
                answer.set_result(self._metadata(header, req, conn))

        cache.on_first_update(respond)
        asyncio.get_running_loop().call_later(FIRST_METADATA_WAIT_S, respond)
        return answer

    def _metadata(self, header: RequestHeader, req: MetadataRequest, conn: KafkaConnection) -> mr.MetadataResponse:
        v = header.api_version
        topics = self.topics
        topics_out: list[mr.MetadataResponseTopic] = []
        cache = self.metadata_cache
        by_id = False
        if req.topics is None or (v == 0 and not req.topics):
            wanted = cache.topic_names() if cache is not None else topics.topic_names()
            explicit = False
        else:
            if v in (10, 11) and any(t.name is None or t.topic_id != ZERO_UUID for t in req.topics):
                return self._metadata_refused(req, ErrorCode.INVALID_REQUEST)  # ids came with v12
            try:
                wanted, topics_out = self._requested_topics(req)
            except ApiError as e:
                return self._metadata_refused(req, e.code)
            by_id = any(t.topic_id != ZERO_UUID for t in req.topics)
            explicit = True
        allow_auto = (req.allow_auto_topic_creation if v >= 4 else True) and self.config["auto.create.topics.enable"]
        # Authorization, as Kafka: a topic the principal may not describe is left out of a listing
        # of every topic and answered TOPIC_AUTHORIZATION_FAILED when asked for (after the others);
        # auto-creation needs CREATE on the cluster or the topic.
        refused: list[mr.MetadataResponseTopic] = []
        may_create_any = allow_auto and self.authz.cluster(conn, Op.CREATE)
        for name in wanted:
            t = mr.MetadataResponseTopic(name=name, topic_id=ZERO_UUID, is_internal=False, partitions=[],
                                         error_code=0)
            if not self.authz.topic(conn, Op.DESCRIBE, name):
                if explicit:
                    # Asked for by id: the id, not the name (ids disclose nothing); by name: the name.
                    refused.append(mr.MetadataResponseTopic(
                        name=None if by_id else name, topic_id=self._topic_id(name) if by_id else ZERO_UUID,
                        is_internal=False, partitions=[], error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            if cache is not None and cache.contains_topic(name):
                t.topic_id = cache.topic_id(name) or ZERO_UUID
                t.is_internal = name in INTERNAL_TOPICS
                t.partitions = self._metadata_partitions(name, v)
                topics_out.append(t)
                continue
            info = topics.get(name)
            if info is None and explicit and allow_auto and not may_create_any and \
                    not self.authz.topic(conn, Op.CREATE, name):
                refused.append(mr.MetadataResponseTopic(
                    name=name, topic_id=ZERO_UUID, is_internal=name in INTERNAL_TOPICS, partitions=[],
                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            if info is None and explicit:
                t.is_internal = name in INTERNAL_TOPICS  # Kafka says so of a topic not made yet too
                try:
                    validate_topic_name(name)
                except ApiError:
                    t.error_code = ErrorCode.INVALID_TOPIC_EXCEPTION
                    topics_out.append(t)
                    continue
                maker = self.internal_topics.get(name) if allow_auto else None
                if maker is not None:
                    # Kafka 4.3 makes it as for its coordinator (its partitions and configs) and
                    # answers UNKNOWN_TOPIC_OR_PARTITION meanwhile.
                    if self.cluster_internal_topics is not None:
                        self.cluster_internal_topics.create_when_missing(name)
                    else:
                        maker.make_topic_when_missing()
                    t.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    topics_out.append(t)
                    continue
                if allow_auto and not name.startswith("__"):
                    # Kafka 4.3's broker hands the creation to its controller and answers at once
                    # UNKNOWN_TOPIC_OR_PARTITION, also while another request's creation of it is in
                    # flight (DefaultAutoTopicCreationManager): the client finds it when it asks again.
                    t.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    if self.cluster is not None:
                        self._auto_create_in_cluster(self.cluster, name)
                    else:
                        try:
                            topics.create_topic(name, self.config["num.partitions"],
                                                self.config["default.replication.factor"], {})
                        except ApiError as e:
                            # Kafka's answer does not carry the controller's refusal; it logs it.
                            if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                                log.warning("Auto topic creation failed for %s: %s", name, e)
                    topics_out.append(t)
                    continue
                t.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                topics_out.append(t)
                continue
            t.topic_id = info.topic_id
            t.is_internal = info.is_internal
            if cache is not None:
                # Created, but the controller has not told this broker its leaders yet.
                t.error_code = ErrorCode.LEADER_NOT_AVAILABLE
                topics_out.append(t)
                continue
            t.partitions = self._metadata_partitions(name, v)
            topics_out.append(t)
        if v >= 8 and req.include_topic_authorized_operations:
            for t in topics_out:
                if t.error_code != ErrorCode.UNKNOWN_TOPIC_ID:  # Kafka leaves those at the default
                    t.topic_authorized_operations = self.authz.operations(conn, ResourceType.TOPIC, t.name)
        resp = mr.MetadataResponse(
            throttle_time_ms=0, brokers=self._broker_list(conn.listener), cluster_id=self.cluster_id,
            controller_id=self._controller_id(), topics=topics_out + refused)
        if 8 <= v <= 10 and req.include_cluster_authorized_operations:
            resp.cluster_authorized_operations = self._cluster_operations(conn)
        return resp

    def _cluster_operations(self, conn: KafkaConnection) -> int:
        """What Metadata and DescribeCluster report: nothing without DESCRIBE on the cluster."""
        if not self.authz.cluster(conn, Op.DESCRIBE):
            return 0
        return self.authz.operations(conn, ResourceType.CLUSTER, "kafka-cluster")

    # ------------------------------------------------------------ DescribeTopicPartitions
    def handle_describe_topic_partitions(
        self, header: RequestHeader, req: DescribeTopicPartitionsRequest, conn: KafkaConnection
    ) -> dtpr.DescribeTopicPartitionsResponse:
        """KIP-966's paged describe: topics in name order from the cursor on, at most
        min(``max.request.partition.size.limit``, the request's limit) partitions, and a cursor to
        the first partition left out."""
        resp = dtpr.DescribeTopicPartitionsResponse(throttle_time_ms=0, topics=[], next_cursor=None)
        cursor = req.cursor
        after = cursor.topic_name if cursor is not None else ""
        fetch_all = not req.topics
        if fetch_all:
            cache = self.metadata_cache
            names = {n for n in (cache.topic_names() if cache is not None else self.topics.topic_names())
                     if n >= after}
        else:
            names = {t.name for t in req.topics if t.name >= after}
            if cursor is not None and cursor.topic_name not in names:
                # The cursor's topic must be one of those asked for.
                resp.topics = [dtpr.DescribeTopicPartitionsResponseTopic(
                    error_code=ErrorCode.INVALID_REQUEST, name=t.name, topic_id=ZERO_UUID, partitions=[])
                    for t in req.topics]
                return resp
        # Topics the principal may not describe: left out of a listing of all, refused when named.
        hidden = names - self.authz.allowed(conn, Op.DESCRIBE, ResourceType.TOPIC, names)
        names -= hidden
        refused = [] if fetch_all else [dtpr.DescribeTopicPartitionsResponseTopic(
            error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=n, topic_id=ZERO_UUID, is_internal=False,
            partitions=[]) for n in sorted(hidden)]
        remaining = min(self.config["max.request.partition.size.limit"], req.response_partition_limit)
        for name in sorted(names):
            if remaining <= 0:
                # The next page starts with this topic; it may not even exist.
                resp.next_cursor = dtpr.Cursor(topic_name=name, partition_index=0)
                break
            views = self._partition_views(name)
            if views is None:
                if not fetch_all:
                    try:
                        validate_topic_name(name)
                        error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    except ApiError:
                        error = ErrorCode.INVALID_TOPIC_EXCEPTION
                    resp.topics.append(dtpr.DescribeTopicPartitionsResponseTopic(
                        error_code=error, name=name, topic_id=ZERO_UUID, is_internal=name in INTERNAL_TOPICS,
                        partitions=[], topic_authorized_operations=self.authz.operations(conn, ResourceType.TOPIC,
                                                                                         name)))
                continue
            start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
            page = [pv for pv in views if pv.index >= start][:remaining]
            resp.topics.append(dtpr.DescribeTopicPartitionsResponseTopic(
                error_code=0, name=name, topic_id=self._topic_id(name), is_internal=name in INTERNAL_TOPICS,
                topic_authorized_operations=self.authz.operations(conn, ResourceType.TOPIC, name),
                partitions=[dtpr.DescribeTopicPartitionsResponsePartition(
                    error_code=0, partition_index=pv.index, leader_id=pv.leader, leader_epoch=pv.leader_epoch,
                    replica_nodes=pv.replicas, isr_nodes=pv.isr, eligible_leader_replicas=pv.elr, last_known_elr=pv.last_known_elr,
                    offline_replicas=pv.offline) for pv in page]))
            if page and page[-1].index + 1 < len(views):
                resp.next_cursor = dtpr.Cursor(topic_name=name, partition_index=page[-1].index + 1)
                break
            remaining -= len(page)
        resp.topics.extend(refused)
        return resp

    def _topic_id(self, name: str) -> uuid.UUID:
        cache = self.metadata_cache
        if cache is not None and cache.contains_topic(name):
            return cache.topic_id(name) or ZERO_UUID
        info = self.topics.get(name)
        return info.topic_id if info is not None else ZERO_UUID

    def handle_describe_cluster(
        self, header: RequestHeader, req: DescribeClusterRequest, conn: KafkaConnection
    ) -> dcr.DescribeClusterResponse:
        return dcr.DescribeClusterResponse(
            throttle_time_ms=0, error_code=0, error_message=None, endpoint_type=1, cluster_id=self.cluster_id,
            controller_id=self._controller_id(),
            brokers=[dcr.DescribeClusterBroker(broker_id=i, host=h, port=p, rack=r)
                     for i, h, p, r in self._live_brokers(conn.listener)],
            cluster_authorized_operations=self._cluster_operations(conn) if req.include_cluster_authorized_operations
            else OPERATIONS_NOT_REQUESTED)

    # ------------------------------------------------------------ topic admin
    def handle_create_topics(
        self, header: RequestHeader, req: CreateTopicsRequest, conn: KafkaConnection
    ) -> Answer:
        if _requested_partitions(req, self.config["num.partitions"]) > MAX_PARTITIONS_PER_BATCH:
            # Kafka's controller refuses the whole request before allocating anything for it.
            return ctr.CreateTopicsResponse(throttle_time_ms=0, topics=[
                ctr.CreatableTopicResult(name=t.name, error_code=ErrorCode.POLICY_VIOLATION,
                                         error_message="Excessively large number of partitions per request.",
                                         topic_id=ZERO_UUID, num_partitions=-1, replication_factor=-1, configs=None)
                for t in req.topics])
        quota = self._mutation_quota(header, conn, strict_since=6)
        # The logs are made on a worker thread: the answer comes when every topic is done.
        return asyncio.ensure_future(self._create_topics(req, quota, conn))

    def _mutation_quota(self, header: RequestHeader, conn: KafkaConnection, strict_since: int) -> ControllerMutationQuota:
        return self.mutation_quotas.quota_for(conn.user, header.client_id or "",
                                              strict=header.api_version >= strict_since)

    @staticmethod
    def _throttle(quota: ControllerMutationQuota, conn: KafkaConnection) -> int:
        """controller_mutation_rate's throttle time for the answer; the connection is muted for it."""
        ms = quota.throttle_time_ms()
        conn.throttle(ms)
        return ms

    async def _create_topics(self, req: CreateTopicsRequest, quota: ControllerMutationQuota,
                             conn: KafkaConnection) -> ctr.CreateTopicsResponse:
        cluster = self.cluster
        if cluster is not None:
            await cluster.refresh_brokers(watch=False)  # placement sees every broker registered by now
        brokers = cluster.live_broker_ids() if cluster is not None else {self.node.node_id}
        seen = Counter(t.name for t in req.topics)
        # Authorization, as Kafka: CREATE on the cluster or on each topic; the created topic's
        # configs are told only with DESCRIBE_CONFIGS on it.
        names = [t.name for t in req.topics]
        creatable = set(names) if self.authz.cluster(conn, Op.CREATE) else \
            self.authz.allowed(conn, Op.CREATE, ResourceType.TOPIC, names)
        configs_visible = self.authz.allowed(conn, Op.DESCRIBE_CONFIGS, ResourceType.TOPIC, names)
        results = []
        for t in req.topics:
            res = _creatable_result(t.name)
            with errors_into(res):
                if seen[t.name] == 1 and t.name not in creatable:
                    raise ApiError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
                num, rf, assignment = self._plan_topic(t, seen, brokers)
                configs = {c.name: c.value for c in t.configs}
                self.topics.validate_new_topic(t.name, num, rf, configs)
                quota.record(num)  # after the topic's own checks, as Kafka's controller
                if cluster is None:
                    info = await self.topics.create_topic_off_loop(t.name, num, rf, configs,
                                                                   validate_only=req.validate_only)
                    topic_id = info.topic_id if info else ZERO_UUID
                else:
                    if assignment is None:
                        assignment = cluster.assign_replicas(num, rf)
                    topic_id = ZERO_UUID if req.validate_only else \
                        await cluster.create_topic(t.name, assignment, configs)
                res.num_partitions, res.replication_factor, res.topic_id = num, rf, topic_id
                if t.name in configs_visible:
                    res.configs = self._topic_config_entries(t.name, configs, ctr.CreatableTopicConfigs)
                else:
                    res.topic_config_error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            results.append(res)
        return ctr.CreateTopicsResponse(throttle_time_ms=self._throttle(quota, conn), topics=results)

    def _plan_topic(self, t: CreatableTopic, seen: Counter, brokers: set[int]
                    ) -> tuple[int, int, dict[int, list[int]] | None]:
        """Partition count, replication factor and the explicit assignment (if any) of a topic to
        create, after the request-level checks."""
        if seen[t.name] > 1:
            raise ApiError(ErrorCode.INVALID_REQUEST, f"Create topics request from client contains "
                             f"multiple entries for the following topics: {t.name}")
        if not t.assignments:
            num = self.config["num.partitions"] if t.num_partitions == -1 else t.num_partitions
            rf = self.config["default.replication.factor"] if t.replication_factor == -1 else t.replication_factor
            return num, rf, None
        if t.num_partitions != -1 or t.replication_factor != -1:
            raise ApiError(ErrorCode.INVALID_REQUEST, "Both numPartitions or replicationFactor and "
                             "replicasAssignments were set. Both cannot be used at the same time.")
        planned: dict[int, list[int]] = {}
        rf = None
        for a in t.assignments:
            if a.partition_index in planned:
                raise ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                               f"Found multiple manual partition assignments for partition {a.partition_index}")
            check_manual_assignment(a.broker_ids, brokers, rf)
            rf = len(a.broker_ids)
            planned[a.partition_index] = list(a.broker_ids)
        if any(i not in planned for i in range(len(planned))):
            raise ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           "partitions should be a consecutive 0-based integer sequence")
        return len(planned), len(t.assignments[0].broker_ids), planned

    def _auto_create_in_cluster(self, cluster: ZkClusterMember, name: str) -> None:
        async def create() -> None:
            try:
                rf = min(self.config["default.replication.factor"], max(1, len(cluster.live_broker_ids())))
                await cluster.create_topic(name, cluster.assign_replicas(self.config["num.partitions"], rf), {})
            except ApiError as e:
                if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    log.info("auto-creating topic %s failed: %s", name, e)

        asyncio.ensure_future(create())

    def _topic_config_entries(self, topic: str, overrides: dict[str, str], cls: type) -> list:
        out = []
        for e in self.topics.describe_topic_configs(overrides):
            out.append(cls(name=e.name, value=e.value, read_only=e.read_only,
                           config_source=int(e.source), is_sensitive=e.sensitive))
        return out

    def handle_delete_topics(
        self, header: RequestHeader, req: DeleteTopicsRequest, conn: KafkaConnection
    ) -> Answer:
        if header.api_version >= 6:
            targets = [(t.name, t.topic_id) for t in req.topics]
        else:
            targets = [(n, ZERO_UUID) for n in req.topic_names]
        quota = self._mutation_quota(header, conn, strict_since=5)
        # The logs are closed and renamed on a worker thread: the answer comes when that is done.
        return asyncio.ensure_future(self._delete_topics(targets, quota, conn))

    def _resolve_topic_id(self, topic_id: uuid.UUID) -> str | None:
        cache = self.metadata_cache
        name = cache.topic_name(topic_id) if cache is not None else None
        if name is None:
            info = self.topics.by_id(topic_id)
            name = info.name if info is not None else None
        return name

    def _topics_to_delete(self, targets: list[tuple[str | None, uuid.UUID]], conn: KafkaConnection,
                          results: list[dtr.DeletableTopicResult], existing: set[str]) -> dict[str, uuid.UUID]:
        """The topics a DeleteTopics request may delete (name -> id as asked, zero when asked
        by name), the refusals added to ``results``, as Kafka's controller sorts them: an entry
        names a topic by name (its id all zero) or by id, never both; names and ids asked twice
        are refused; then authorization (a topic asked for by id is named only to who may
        describe it), then existence."""
        def refuse(name: str | None, topic_id: uuid.UUID, code: ErrorCode, message: str | None = None) -> None:
            results.append(dtr.DeletableTopicResult(name=name, topic_id=topic_id, error_code=code,
                                                    error_message=message or DEFAULT_MESSAGES.get(code)))

        names: Counter[str] = Counter()
        ids: Counter[uuid.UUID] = Counter()
        for name, topic_id in targets:
            if name is None and topic_id == ZERO_UUID:
                refuse(None, ZERO_UUID, ErrorCode.INVALID_REQUEST, "Neither topic name nor id were specified.")
            elif name is None:
                ids[topic_id] += 1
            elif topic_id == ZERO_UUID:
                names[name] += 1
            else:
                refuse(name, topic_id, ErrorCode.INVALID_REQUEST, "You may not specify both topic name and topic id.")
        for name in [n for n, k in names.items() if k > 1]:
            del names[name]
            refuse(name, ZERO_UUID, ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
        for topic_id in [i for i, k in ids.items() if k > 1]:
            del ids[topic_id]
            refuse(None, topic_id, ErrorCode.INVALID_REQUEST, "Duplicate topic id.")
        by_id: dict[uuid.UUID, str] = {}
        for topic_id in ids:
            found = self._resolve_topic_id(topic_id)
            if found is None:
                refuse(None, topic_id, ErrorCode.UNKNOWN_TOPIC_ID)
            else:
                by_id[topic_id] = found
        asked = set(names) | set(by_id.values())
        if self.authz.cluster(conn, Op.DELETE):
            describable = deletable = asked
        else:
            describable = self.authz.allowed(conn, Op.DESCRIBE, ResourceType.TOPIC, asked)
            deletable = self.authz.allowed(conn, Op.DELETE, ResourceType.TOPIC, asked)
        out: dict[str, uuid.UUID] = {}
        for topic_id, name in by_id.items():
            if name in deletable:
                out[name] = topic_id
            else:
                refuse(name if name in describable else None, topic_id, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        for name in names:
            if name not in describable:
                refuse(name, ZERO_UUID, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            elif name not in existing:
                refuse(name, ZERO_UUID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            elif name not in deletable:
                refuse(name, ZERO_UUID, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            elif name in out:
                # Its id was asked for too: Kafka refuses the name and drops the id.
                refuse(name, self._topic_id(name), ErrorCode.INVALID_REQUEST,
                       "The provided topic name maps to an ID that was already supplied.")
                del out[name]
            else:
                out[name] = ZERO_UUID
        return out

    def _exists(self, name: str) -> bool:
        cache = self.metadata_cache
        if cache is not None and cache.contains_topic(name):
            return True
        return self.topics.get(name) is not None

    async def _existing(self, names: list[str]) -> set[str]:
        """Those of ``names`` that exist. In a cluster that is also a topic ZooKeeper has and this
        broker's metadata has not heard of yet: one just created, whose CreateTopics answer can
        come before the controller's UpdateMetadata does. Kafka's controller, which answers
        DeleteTopics, knows a topic once it has created it (sarama deletes one at once)."""
        found = {n for n in names if self._exists(n)}
        if self.cluster is not None:
            for name in set(names) - found:
                if await self.cluster.topic_exists(name):
                    found.add(name)
        return found

    async def _delete_topics(self, targets: list[tuple[str | None, uuid.UUID]], quota: ControllerMutationQuota,
                             conn: KafkaConnection) -> dtr.DeleteTopicsResponse:
        results: list[dtr.DeletableTopicResult] = []
        if not self.config["delete.topic.enable"]:
            results = [dtr.DeletableTopicResult(name=name, topic_id=topic_id, error_code=ErrorCode.TOPIC_DELETION_DISABLED,
                                                error_message=None) for name, topic_id in targets]
            return dtr.DeleteTopicsResponse(throttle_time_ms=self._throttle(quota, conn), responses=results)
        topics = self.topics
        cache = self.metadata_cache
        existing = await self._existing([name for name, _ in targets if name is not None])
        for name, topic_id in self._topics_to_delete(targets, conn, results, existing).items():
            res = dtr.DeletableTopicResult(name=name, topic_id=topic_id, error_code=0, error_message=None)
            with errors_into(res):
                if self.cluster is not None:
                    if cache is not None and cache.contains_topic(name):
                        res.topic_id = cache.topic_id(name) or ZERO_UUID
                        quota.record(cache.num_partitions(name) or 0)
                    await self.cluster.delete_topic(name)  # the controller carries it out
                else:
                    info = topics.get(name)
                    if info is None:  # deleted meanwhile
                        raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, DEFAULT_MESSAGES[ErrorCode.UNKNOWN_TOPIC_OR_PARTITION])
                    res.topic_id = info.topic_id
                    quota.record(info.num_partitions)
                    await topics.delete_topic(name)
            results.append(res)
        return dtr.DeleteTopicsResponse(throttle_time_ms=self._throttle(quota, conn), responses=results)

    async def _add_partitions_in_cluster(self, cluster: ZkClusterMember, t: CreatePartitionsTopic,
                                         validate_only: bool) -> None:
        """Kafka 2.x's way: the grown assignment is written to ZooKeeper and the controller,
        watching the topic, gives the new partitions their leaders."""
        current = await cluster.topic_assignment(t.name)
        if current is None:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        old = len(current.replicas)
        await cluster.refresh_brokers(watch=False)
        given = None if t.assignments is None else [list(a.broker_ids) for a in t.assignments]
        check_partition_increase(t.name, old, t.count, given, cluster.live_broker_ids(), len(current.replicas[0]))
        if given is not None:
            added = {old + i: replicas for i, replicas in enumerate(given)}
        else:
            added = cluster.assign_replicas(t.count - old, len(current.replicas[0]), start_partition_id=old)
        if not validate_only:
            await cluster.add_partitions(t.name, added)

    def handle_create_partitions(
        self, header: RequestHeader, req: CreatePartitionsRequest, conn: KafkaConnection
    ) -> Answer:
        added = 0
        for t in req.topics:
            info = self.topics.get(t.name)
            if info is not None and t.count > info.num_partitions:
                added += t.count - info.num_partitions
        if added > MAX_PARTITIONS_PER_BATCH:
            return cpr.CreatePartitionsResponse(throttle_time_ms=0, results=[
                cpr.CreatePartitionsTopicResult(name=t.name, error_code=ErrorCode.POLICY_VIOLATION,
                                                error_message="Unable to perform excessively large batch operation.")
                for t in req.topics])
        quota = self._mutation_quota(header, conn, strict_since=3)
        return asyncio.ensure_future(self._create_partitions(req, quota, conn))

    async def _create_partitions(self, req: CreatePartitionsRequest, quota: ControllerMutationQuota,
                                 conn: KafkaConnection) -> cpr.CreatePartitionsResponse:
        results = []
        alterable = self.authz.allowed(conn, Op.ALTER, ResourceType.TOPIC, (t.name for t in req.topics))
        for t in req.topics:
            res = cpr.CreatePartitionsTopicResult(name=t.name, error_code=0, error_message=None)
            try:
                if t.name not in alterable:
                    raise ApiError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "The topic authorization is failed.")
                info = self.topics.get(t.name)
                if info is not None and t.count > info.num_partitions:
                    quota.record(t.count - info.num_partitions)
                if self.cluster is not None:
                    await self._add_partitions_in_cluster(self.cluster, t, req.validate_only)
                else:
                    await self.topics.add_partitions(t.name, t.count,
                                                     None if t.assignments is None else
                                                     [list(a.broker_ids) for a in t.assignments],
                                                     validate_only=req.validate_only)
            except ApiError as e:
                res.error_code = e.code
                res.error_message = e.message
            results.append(res)
        return cpr.CreatePartitionsResponse(throttle_time_ms=self._throttle(quota, conn), results=results)
