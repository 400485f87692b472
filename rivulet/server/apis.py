"""KafkaApis: one handler per API key, turning decoded requests into responses.

Handlers return a response object, a Future of one, or NO_RESPONSE. They hold no state of
their own: topics live in the MetadataStore, data in the ReplicaManager's partitions,
groups in the GroupCoordinator.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any, Callable

from rivulet.protocol import framing
from rivulet.protocol.errors import ErrorCode, KafkaError
from rivulet.protocol.messages import (
    api_versions_response as avr,
    create_partitions_response as cpr,
    create_topics_response as ctr,
    delete_records_response as drr,
    delete_topics_response as dtr,
    describe_cluster_response as dcr,
    describe_configs_response as dcfr,
    alter_configs_response as acr,
    incremental_alter_configs_response as iacr,
    fetch_response as fr,
    list_offsets_response as lor,
    metadata_response as mr,
    offset_for_leader_epoch_response as ofler,
    produce_response as pr,
)
from rivulet.replication.partition import TopicPartition
from rivulet.replication.replica_manager import FetchParams, FetchRequestPartition, FetchResult, ProduceResult
from rivulet.server.config import LIST_PROPERTIES
from rivulet.server.dynamic_config import apply_incremental, broker_values_in_force, describe_broker_configs
from rivulet.server.network import NO_RESPONSE
from rivulet.storage.config import TOPIC_LIST_CONFIGS

if TYPE_CHECKING:
    from rivulet.server.broker import Broker
    from rivulet.server.network import KafkaConnection

log = logging.getLogger(__name__)

# API key -> (min, max) versions Rivulet implements. Produce starts at v0 because librdkafka
# turns compression off when the broker does not advertise the oldest versions.
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    0: (0, 11),   # Produce
    1: (4, 17),   # Fetch
    2: (1, 10),   # ListOffsets
    3: (0, 12),   # Metadata
    18: (0, 4),   # ApiVersions
    19: (2, 7),   # CreateTopics
    20: (1, 6),   # DeleteTopics
    21: (0, 2),   # DeleteRecords
    23: (2, 4),   # OffsetForLeaderEpoch
    32: (1, 4),   # DescribeConfigs
    33: (0, 2),   # AlterConfigs
    37: (0, 3),   # CreatePartitions
    44: (0, 1),   # IncrementalAlterConfigs
    60: (0, 1),   # DescribeCluster
}

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
LIST_OFFSETS_LATEST = -1
LIST_OFFSETS_EARLIEST = -2
LIST_OFFSETS_MAX_TIMESTAMP = -3
# Authorized-operation bit fields (bit n = AclOperation code n) as Kafka answers them without an
# authorizer: every operation the resource type supports.
# topic: READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11
TOPIC_AUTHORIZED_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
# cluster: CREATE 5, ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11,
# IDEMPOTENT_WRITE 12
CLUSTER_AUTHORIZED_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))
LIST_OFFSETS_EARLIEST_LOCAL = -4
LIST_OFFSETS_LATEST_TIERED = -5


def now_ms() -> int:
    return int(time.time() * 1000)


class KafkaApis:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.connections: set[KafkaConnection] = set()
        self.supported = dict(SUPPORTED_VERSIONS)
        self.handlers: dict[int, Callable[[framing.RequestHeader, Any, KafkaConnection], Any]] = {
            0: self.handle_produce,
            1: self.handle_fetch,
            2: self.handle_list_offsets,
            3: self.handle_metadata,
            18: self.handle_api_versions,
            19: self.handle_create_topics,
            20: self.handle_delete_topics,
            21: self.handle_delete_records,
            23: self.handle_offset_for_leader_epoch,
            32: self.handle_describe_configs,
            33: self.handle_alter_configs,
            37: self.handle_create_partitions,
            44: self.handle_incremental_alter_configs,
            60: self.handle_describe_cluster,
        }

    def register(self, api_key: int, versions: tuple[int, int], handler: Callable) -> None:
        """Other components (the group coordinator, transactions) add their APIs here."""
        self.supported[api_key] = versions
        self.handlers[api_key] = handler

    # ------------------------------------------------------------ dispatch
    def handle(self, header: framing.RequestHeader, body: Any, conn: KafkaConnection) -> Any:
        rng = self.supported.get(header.api_key)
        if rng is None or not rng[0] <= header.api_version <= rng[1]:
            if header.api_key == framing.API_VERSIONS_KEY:
                return self.api_versions_error(ErrorCode.UNSUPPORTED_VERSION)
            raise_unsupported = framing.request_class(header.api_key).NAME
            log.warning("unsupported %s v%d from %s; closing", raise_unsupported, header.api_version, conn.peer)
            conn.close()
            return NO_RESPONSE
        return self.handlers[header.api_key](header, body, conn)

    # ------------------------------------------------------------ ApiVersions
    def _api_keys(self) -> list[avr.ApiVersion]:
        return [avr.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                for k, (lo, hi) in sorted(self.supported.items())]

    def api_versions_error(self, code: ErrorCode) -> avr.ApiVersionsResponse:
        return avr.ApiVersionsResponse(error_code=code, api_keys=self._api_keys())

    def handle_api_versions(self, header, req, conn) -> avr.ApiVersionsResponse:
        resp = avr.ApiVersionsResponse(error_code=0, api_keys=self._api_keys(), throttle_time_ms=0)
        if header.api_version >= 3:
            import re
            valid = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")
            if not valid.match(req.client_software_name or "") or not valid.match(req.client_software_version or ""):
                resp.error_code = ErrorCode.INVALID_REQUEST
        resp.finalized_features_epoch = -1
        return resp

    # ------------------------------------------------------------ Metadata
    def _broker_list(self) -> list[mr.MetadataResponseBroker]:
        _, host, port = self.broker.advertised_listener
        return [mr.MetadataResponseBroker(node_id=self.broker.node_id, host=host, port=port, rack=None)]

    def handle_metadata(self, header, req, conn) -> mr.MetadataResponse:
        v = header.api_version
        b = self.broker
        meta = b.metadata
        topics_out: list[mr.MetadataResponseTopic] = []
        if req.topics is None or (v == 0 and not req.topics):
            wanted = [(name, None) for name in meta.topics]
            explicit = False
        else:
            wanted = [(t.name, getattr(t, "topic_id", None)) for t in req.topics]
            explicit = True
        allow_auto = (req.allow_auto_topic_creation if v >= 4 else True) and b.config["auto.create.topics.enable"]
        for name, topic_id in wanted:
            t = mr.MetadataResponseTopic(name=name, topic_id=topic_id or _zero_uuid(), is_internal=False,
                                         partitions=[], error_code=0)
            if name is None:
                info = meta.by_id.get(topic_id) if topic_id is not None else None
                if info is None:
                    t.error_code = ErrorCode.UNKNOWN_TOPIC_ID
                    topics_out.append(t)
                    continue
                name = t.name = info.name
            info = meta.get(name)
            if info is None and explicit:
                try:
                    from rivulet.server.metadata import validate_topic_name
                    validate_topic_name(name)
                except KafkaError:
                    t.error_code = ErrorCode.INVALID_TOPIC_EXCEPTION
                    topics_out.append(t)
                    continue
                if allow_auto and not name.startswith("__"):
                    try:
                        info = b.create_topic(name, b.config["num.partitions"], b.config["default.replication.factor"], {})
                    except KafkaError as e:
                        t.error_code = e.code
                        topics_out.append(t)
                        continue
                else:
                    t.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    topics_out.append(t)
                    continue
            t.topic_id = info.topic_id
            t.is_internal = info.is_internal
            for i in range(info.num_partitions):
                p = b.replica_manager.partitions.get(TopicPartition(name, i))
                epoch = p.leader_epoch if p else 0
                t.partitions.append(mr.MetadataResponsePartition(
                    error_code=0, partition_index=i, leader_id=b.node_id, leader_epoch=epoch,
                    replica_nodes=[b.node_id], isr_nodes=[b.node_id], offline_replicas=[]))
            topics_out.append(t)
        resp = mr.MetadataResponse(
            throttle_time_ms=0, brokers=self._broker_list(), cluster_id=b.cluster_id,
            controller_id=b.node_id, topics=topics_out)
        # No authorizer: as Kafka, every supported operation is authorized when asked for.
        if v >= 8 and req.include_topic_authorized_operations:
            for t in topics_out:
                if t.error_code != ErrorCode.UNKNOWN_TOPIC_ID:  # Kafka leaves those at the default
                    t.topic_authorized_operations = TOPIC_AUTHORIZED_OPERATIONS
        if 8 <= v <= 10 and req.include_cluster_authorized_operations:
            resp.cluster_authorized_operations = CLUSTER_AUTHORIZED_OPERATIONS
        return resp

    def handle_describe_cluster(self, header, req, conn) -> dcr.DescribeClusterResponse:
        b = self.broker
        _, host, port = b.advertised_listener
        return dcr.DescribeClusterResponse(
            throttle_time_ms=0, error_code=0, error_message=None, endpoint_type=1, cluster_id=b.cluster_id,
            controller_id=b.node_id,
            brokers=[dcr.DescribeClusterBroker(broker_id=b.node_id, host=host, port=port, rack=None)],
            cluster_authorized_operations=CLUSTER_AUTHORIZED_OPERATIONS if req.include_cluster_authorized_operations
            else -2147483648)

    # ------------------------------------------------------------ Produce
    def handle_produce(self, header, req, conn) -> Any:
        b = self.broker
        acks = req.acks
        entries: dict[TopicPartition, Any] = {}
        early: dict[TopicPartition, ProduceResult] = {}
        for td in req.topic_data:
            name = td.name
            info = b.metadata.get(name)
            for pd in td.partition_data:
                tp = TopicPartition(name, pd.index)
                if acks not in (0, 1, -1):
                    early[tp] = ProduceResult(error=ErrorCode.INVALID_REQUIRED_ACKS)
                elif info is None or not 0 <= pd.index < info.num_partitions:
                    early[tp] = ProduceResult(error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                elif info.is_internal:
                    early[tp] = ProduceResult(error=ErrorCode.INVALID_TOPIC_EXCEPTION,
                                              message=f"Cannot append to internal topic {name}")
                else:
                    entries[tp] = pd.records
        transactional_id = req.transactional_id if header.api_version >= 3 else None
        if transactional_id is None and any(_first_batch_is_transactional(r) for r in entries.values()):
            # Kafka refuses transactional records without a transactional id outright.
            for tp in entries:
                early[tp] = ProduceResult(error=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            entries = {}
        result = b.replica_manager.append_records(
            entries, required_acks=acks, timeout_ms=req.timeout_ms,
            max_message_bytes=b.max_message_bytes, log_append_time=b.uses_log_append_time,
            transactional_id=transactional_id)
        if acks == 0:
            return NO_RESPONSE

        def build(results: dict[TopicPartition, ProduceResult]) -> pr.ProduceResponse:
            results = {**early, **results}
            by_topic: dict[str, list[pr.PartitionProduceResponse]] = {}
            for td in req.topic_data:
                for pd in td.partition_data:
                    r = results[TopicPartition(td.name, pd.index)]
                    by_topic.setdefault(td.name, []).append(pr.PartitionProduceResponse(
                        index=pd.index, error_code=r.error, base_offset=r.base_offset,
                        log_append_time_ms=r.log_append_time, log_start_offset=r.log_start_offset,
                        record_errors=[pr.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m)
                                       for i, m in r.record_errors or ()],
                        error_message=r.message))
            return pr.ProduceResponse(
                responses=[pr.TopicProduceResponse(name=n, partition_responses=ps) for n, ps in by_topic.items()],
                throttle_time_ms=0)

        return _then(result, build)

    # ------------------------------------------------------------ Fetch
    def handle_fetch(self, header, req, conn) -> Any:
        b = self.broker
        v = header.api_version
        meta = b.metadata
        # KIP-227: Rivulet keeps no fetch sessions. A full fetch (epoch 0 or -1) is answered
        # with session id 0, which tells every client to keep sending full fetches.
        if req.session_epoch > 0 or (req.session_id != 0 and req.session_epoch != -1):
            return fr.FetchResponse(throttle_time_ms=0, error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                                    session_id=0, responses=[])
        replica_id = req.replica_state.replica_id if v >= 15 else req.replica_id
        params = FetchParams(replica_id=replica_id, max_wait_ms=req.max_wait_ms, min_bytes=req.min_bytes,
                             max_bytes=req.max_bytes if v >= 3 else 2**31 - 1,
                             isolation_level=req.isolation_level if v >= 4 else 0)
        errors: dict[tuple[str, int], ErrorCode] = {}
        order: list[tuple[Any, str, int]] = []  # (topic id, topic name, partition)
        for ft in req.topics:
            name = ft.topic
            if v >= 13:
                info = meta.by_id.get(ft.topic_id)
                name = info.name if info else None
            for fp in ft.partitions:
                order.append((getattr(ft, "topic_id", None), name, fp.partition))
                if name is None:
                    errors[(str(ft.topic_id), fp.partition)] = ErrorCode.UNKNOWN_TOPIC_ID
                    continue
                params.partitions.append(FetchRequestPartition(
                    TopicPartition(name, fp.partition), fp.fetch_offset, fp.partition_max_bytes,
                    fp.current_leader_epoch if v >= 9 else -1))
        result = b.replica_manager.fetch_messages(params)

        def build(results: dict[TopicPartition, FetchResult]) -> fr.FetchResponse:
            topics: list[fr.FetchableTopicResponse] = []
            last_key = None
            for topic_id, name, part in order:
                key = topic_id if v >= 13 else name
                if not topics or key != last_key:
                    topics.append(fr.FetchableTopicResponse(topic=name or "", topic_id=topic_id or _zero_uuid(),
                                                            partitions=[]))
                    last_key = key
                if name is None:
                    topics[-1].partitions.append(fr.PartitionData(
                        partition_index=part, error_code=ErrorCode.UNKNOWN_TOPIC_ID, high_watermark=-1,
                        last_stable_offset=-1, log_start_offset=-1, aborted_transactions=None,
                        preferred_read_replica=-1, records=b""))
                    continue
                r = results[TopicPartition(name, part)]
                aborted = None
                if params.isolation_level != 0 and r.aborted_transactions is not None:
                    aborted = [fr.AbortedTransaction(producer_id=pid, first_offset=first)
                               for pid, first in r.aborted_transactions]
                topics[-1].partitions.append(fr.PartitionData(
                    partition_index=part, error_code=r.error, high_watermark=r.high_watermark,
                    last_stable_offset=r.last_stable_offset, log_start_offset=r.log_start_offset,
                    aborted_transactions=aborted,
                    preferred_read_replica=-1, records=r.records if r.records is not None else b""))
            return fr.FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=topics)

        return _then(result, build)

    # ------------------------------------------------------------ ListOffsets
    def handle_list_offsets(self, header, req, conn) -> lor.ListOffsetsResponse:
        b = self.broker
        out = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                r = lor.ListOffsetsPartitionResponse(partition_index=p.partition_index, error_code=0,
                                                     timestamp=-1, offset=-1, leader_epoch=-1, old_style_offsets=[])
                try:
                    part = b.replica_manager.get_partition_or_error(TopicPartition(t.name, p.partition_index))
                    part.check_leader_epoch(p.current_leader_epoch if header.api_version >= 4 else -1)
                    lg = part.log
                    ts = p.timestamp
                    isolation = req.isolation_level if header.api_version >= 2 else 0
                    # Lookups by time never answer an offset a consumer of that isolation cannot read yet.
                    fetchable = part.last_stable_offset if isolation == 1 else part.high_watermark
                    if ts == LIST_OFFSETS_LATEST:
                        r.offset = part.last_stable_offset if isolation == 1 else part.high_watermark
                        r.leader_epoch = part.leader_epoch
                    elif ts == LIST_OFFSETS_LATEST_TIERED:
                        pass  # no tiered storage: as Kafka without remote storage, offset -1 and epoch -1
                    elif ts == LIST_OFFSETS_EARLIEST or ts == LIST_OFFSETS_EARLIEST_LOCAL:
                        r.offset = lg.log_start_offset
                        r.leader_epoch = lg.epoch_for_offset(r.offset)
                    elif ts == LIST_OFFSETS_MAX_TIMESTAMP:
                        found = lg.max_timestamp_offset()
                        if found is not None and found[0] < fetchable:
                            r.offset, r.timestamp = found
                            r.leader_epoch = lg.epoch_for_offset(r.offset)
                    elif ts < 0:
                        raise KafkaError(ErrorCode.INVALID_REQUEST)
                    else:
                        found = lg.fetch_offset_by_timestamp(ts)
                        if found is not None and found[0] < fetchable:
                            r.offset, r.timestamp = found
                            r.leader_epoch = lg.epoch_for_offset(r.offset)
                except KafkaError as e:
                    r.error_code = e.code
                parts.append(r)
            out.append(lor.ListOffsetsTopicResponse(name=t.name, partitions=parts))
        return lor.ListOffsetsResponse(throttle_time_ms=0, topics=out)

    # ------------------------------------------------------------ OffsetForLeaderEpoch
    def handle_offset_for_leader_epoch(self, header, req, conn) -> ofler.OffsetForLeaderEpochResponse:
        b = self.broker
        topics = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                r = ofler.EpochEndOffset(error_code=0, partition=p.partition, leader_epoch=-1, end_offset=-1)
                try:
                    part = b.replica_manager.get_partition_or_error(TopicPartition(t.topic, p.partition))
                    part.check_leader_epoch(p.current_leader_epoch)
                    r.leader_epoch, r.end_offset = part.log.end_offset_for_epoch(p.leader_epoch)
                except KafkaError as e:
                    r.error_code = e.code
                parts.append(r)
            topics.append(ofler.OffsetForLeaderTopicResult(topic=t.topic, partitions=parts))
        return ofler.OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)

    # ------------------------------------------------------------ topic admin
    def handle_create_topics(self, header, req, conn) -> ctr.CreateTopicsResponse:
        b = self.broker
        results = []
        seen: dict[str, int] = {}
        for t in req.topics:
            seen[t.name] = seen.get(t.name, 0) + 1
        for t in req.topics:
            res = ctr.CreatableTopicResult(name=t.name, error_code=0, error_message=None, topic_id=_zero_uuid(),
                                           num_partitions=-1, replication_factor=-1, configs=None)
            try:
                if seen[t.name] > 1:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, f"Create topics request from client contains "
                                     f"multiple entries for the following topics: {t.name}")
                if t.assignments:
                    if t.num_partitions != -1 or t.replication_factor != -1:
                        raise KafkaError(ErrorCode.INVALID_REQUEST, "Both numPartitions or replicationFactor and "
                                         "replicasAssignments were set. Both cannot be used at the same time.")
                    num = len(t.assignments)
                    rf = len(t.assignments[0].broker_ids)
                    for a in t.assignments:
                        if any(bid != b.node_id for bid in a.broker_ids):
                            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                             f"Unknown broker in replica assignment {a.broker_ids}")
                else:
                    num = b.config["num.partitions"] if t.num_partitions == -1 else t.num_partitions
                    rf = b.config["default.replication.factor"] if t.replication_factor == -1 else t.replication_factor
                configs = {c.name: c.value for c in t.configs}
                info = b.create_topic(t.name, num, rf, configs, validate_only=req.validate_only)
                res.num_partitions = num
                res.replication_factor = rf
                res.topic_id = info.topic_id if info else _zero_uuid()
                res.configs = self._topic_config_entries(t.name, configs, ctr.CreatableTopicConfigs)
            except KafkaError as e:
                res.error_code = e.code
                res.error_message = e.message
            results.append(res)
        return ctr.CreateTopicsResponse(throttle_time_ms=0, topics=results)

    def _topic_config_entries(self, topic: str, overrides: dict[str, str], cls: type) -> list:
        out = []
        for e in self.broker.describe_topic_configs(overrides):
            out.append(cls(name=e.name, value=e.value, read_only=e.read_only,
                           config_source=int(e.source), is_sensitive=e.sensitive))
        return out

    def handle_delete_topics(self, header, req, conn) -> dtr.DeleteTopicsResponse:
        b = self.broker
        targets: list[tuple[str | None, Any]] = []
        if header.api_version >= 6:
            targets = [(t.name, t.topic_id) for t in req.topics]
        else:
            targets = [(n, None) for n in req.topic_names]
        results = []
        for name, topic_id in targets:
            res = dtr.DeletableTopicResult(name=name, topic_id=topic_id or _zero_uuid(), error_code=0,
                                           error_message=None)
            try:
                if not b.config["delete.topic.enable"]:
                    raise KafkaError(ErrorCode.TOPIC_DELETION_DISABLED)
                if name is None:
                    info = b.metadata.by_id.get(topic_id)
                    if info is None:
                        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID)
                    name = res.name = info.name
                info = b.metadata.get(name)
                if info is None:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                res.topic_id = info.topic_id
                b.delete_topic(name)
            except KafkaError as e:
                res.error_code = e.code
                res.error_message = e.message
            results.append(res)
        return dtr.DeleteTopicsResponse(throttle_time_ms=0, responses=results)

    def handle_create_partitions(self, header, req, conn) -> cpr.CreatePartitionsResponse:
        b = self.broker
        results = []
        for t in req.topics:
            res = cpr.CreatePartitionsTopicResult(name=t.name, error_code=0, error_message=None)
            try:
                info = b.metadata.get(t.name)
                if info is None:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                if t.count < info.num_partitions:
                    raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"Topic currently has {info.num_partitions} "
                                     f"partitions, which is higher than the requested {t.count}.")
                if t.count == info.num_partitions:
                    raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                                     f"Topic already has {info.num_partitions} partitions.")
                if t.assignments is not None and len(t.assignments) != t.count - info.num_partitions:
                    raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Increasing the number of partitions by "
                                     f"{t.count - info.num_partitions} but {len(t.assignments)} assignments provided.")
                if not req.validate_only:
                    b.add_partitions(t.name, t.count)
            except KafkaError as e:
                res.error_code = e.code
                res.error_message = e.message
            results.append(res)
        return cpr.CreatePartitionsResponse(throttle_time_ms=0, results=results)

    def handle_delete_records(self, header, req, conn) -> drr.DeleteRecordsResponse:
        b = self.broker
        topics = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                r = drr.DeleteRecordsPartitionResult(partition_index=p.partition_index, low_watermark=-1, error_code=0)
                try:
                    part = b.replica_manager.get_partition_or_error(TopicPartition(t.name, p.partition_index))
                    offset = part.high_watermark if p.offset == -1 else p.offset
                    if offset < 0 or offset > part.high_watermark:
                        raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE)
                    part.log.delete_records_before(offset)
                    r.low_watermark = part.log.log_start_offset
                    b.replica_manager.fetch_purgatory.check_and_complete(part.tp)
                except KafkaError as e:
                    r.error_code = e.code
                parts.append(r)
            topics.append(drr.DeleteRecordsTopicResult(name=t.name, partitions=parts))
        return drr.DeleteRecordsResponse(throttle_time_ms=0, topics=topics)

    # ------------------------------------------------------------ configs
    def handle_describe_configs(self, header, req, conn) -> dcfr.DescribeConfigsResponse:
        b = self.broker
        results = []
        for res in req.resources:
            out = dcfr.DescribeConfigsResult(error_code=0, error_message=None, resource_type=res.resource_type,
                                             resource_name=res.resource_name, configs=[])
            wanted = set(res.configuration_keys) if res.configuration_keys is not None else None
            try:
                if res.resource_type == RESOURCE_TOPIC:
                    info = b.metadata.get(res.resource_name)
                    if info is None:
                        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    entries = b.describe_topic_configs(info.configs)
                elif res.resource_type == RESOURCE_BROKER:
                    entries = describe_broker_configs(b.config, b.dynamic_config, res.resource_name)
                elif res.resource_type == RESOURCE_BROKER_LOGGER:
                    entries = []
                else:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {res.resource_type}")
                for e in entries:
                    if wanted is not None and e.name not in wanted:
                        continue
                    synonyms = [dcfr.DescribeConfigsSynonym(name=n, value=v, source=int(s)) for n, v, s in e.synonyms]
                    out.configs.append(dcfr.DescribeConfigsResourceResult(
                        name=e.name, value=e.value, read_only=e.read_only, is_default=e.is_default,
                        config_source=int(e.source), is_sensitive=e.sensitive,
                        synonyms=synonyms if req.include_synonyms else [], config_type=int(e.config_type),
                        documentation=e.documentation if req.include_documentation else None))
            except KafkaError as e:
                out.error_code = e.code
                out.error_message = e.message
            results.append(out)
        return dcfr.DescribeConfigsResponse(throttle_time_ms=0, results=results)

    def handle_alter_configs(self, header, req, conn) -> acr.AlterConfigsResponse:
        b = self.broker
        out = []
        for res in req.resources:
            r = acr.AlterConfigsResourceResponse(error_code=0, error_message=None, resource_type=res.resource_type,
                                                 resource_name=res.resource_name)
            try:
                new = {c.name: c.value for c in res.configs if c.value is not None}
                if res.resource_type == RESOURCE_BROKER:
                    b.alter_broker_configs(res.resource_name, new, validate_only=req.validate_only)
                    out.append(r)
                    continue
                self._check_topic_resource(res.resource_type, res.resource_name)
                b.alter_topic_configs(res.resource_name, new, validate_only=req.validate_only)
            except KafkaError as e:
                r.error_code, r.error_message = e.code, e.message
            out.append(r)
        return acr.AlterConfigsResponse(throttle_time_ms=0, responses=out)

    def handle_incremental_alter_configs(self, header, req, conn) -> iacr.IncrementalAlterConfigsResponse:
        b = self.broker
        out = []
        for res in req.resources:
            r = iacr.AlterConfigsResourceResponse(error_code=0, error_message=None, resource_type=res.resource_type,
                                                  resource_name=res.resource_name)
            try:
                if res.resource_type == RESOURCE_BROKER:
                    level = b.dynamic_config.level(res.resource_name)
                    in_force = broker_values_in_force(b.config, b.dynamic_config)
                    new = apply_incremental(b.dynamic_config.levels[level], res.configs, in_force, LIST_PROPERTIES)
                    b.alter_broker_configs(res.resource_name, new, validate_only=req.validate_only)
                    out.append(r)
                    continue
                self._check_topic_resource(res.resource_type, res.resource_name)
                current = apply_incremental(b.metadata.get(res.resource_name).configs, res.configs,
                                            b.topic_config_values(res.resource_name), TOPIC_LIST_CONFIGS)
                b.alter_topic_configs(res.resource_name, current, validate_only=req.validate_only)
            except KafkaError as e:
                r.error_code, r.error_message = e.code, e.message
            out.append(r)
        return iacr.IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=out)

    def _check_topic_resource(self, rtype: int, name: str) -> None:
        if rtype != RESOURCE_TOPIC:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {rtype}")
        if self.broker.metadata.get(name) is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


def _then(result: Any, build: Callable[[Any], Any]) -> Any:
    """Apply build now, or when the future resolves."""
    if isinstance(result, asyncio.Future):
        out = asyncio.get_running_loop().create_future()

        def done(f: asyncio.Future) -> None:
            if f.cancelled():
                out.cancel()
            elif f.exception() is not None:
                out.set_exception(f.exception())
            else:
                try:
                    out.set_result(build(f.result()))
                except Exception as e:  # surfaced by the connection, which logs and closes
                    out.set_exception(e)
        result.add_done_callback(done)
        return out
    return build(result)


def _first_batch_is_transactional(records: Any) -> bool:
    """The transactional attribute bit of a records field's first v2 batch."""
    if not records or len(records) < 23 or records[16] != 2:
        return False
    return bool(records[22] & 0x10)  # attributes: int16 at offset 21, the bit in its low byte


def _zero_uuid():
    from rivulet.protocol.schema import ZERO_UUID
    return ZERO_UUID
