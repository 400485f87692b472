"""KafkaApis: the one request dispatcher, as Kafka's ``KafkaApis``.

It receives its collaborators (replica manager, coordinators, topics, config, clock) when the
broker builds it, holds the one table of supported versions, and routes each decoded request
to its handler in ``server/handlers/``. A handler returns a response, a Future of one, or
NO_RESPONSE (``server/answer.py``); the connection writes answers in request order. Handlers
hold no state of their own: topics live in the TopicManager, data in the ReplicaManager's
partitions, groups and transactions in their coordinators.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any, Callable

from rivulet.common.cluster import NodeEndpoint
from rivulet.common.logs import RateLimitFilter
from rivulet.common.time import Clock
from rivulet.coordinator.group_config import GroupConfigs
from rivulet.coordinator.group_coordinator import GroupCoordinator
from rivulet.protocol import framing
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages import api_versions_response as avr
from rivulet.protocol.messages.api_versions_request import ApiVersionsRequest
from rivulet.replication.log_dir_mover import ReplicaAlterLogDirsManager
from rivulet.replication.metadata_cache import MetadataCache
from rivulet.protocol.schema import Struct
from rivulet.replication.replica_manager import ReplicaManager
from rivulet.server.acls import AclManager, Authz
from rivulet.server.client_metrics import ClientMetricsManager
from rivulet.server.answer import NO_RESPONSE, Answer, then
from rivulet.server.config import BrokerConfig
from rivulet.server.handlers import Handler
from rivulet.server.handlers.acls import AclHandlers
from rivulet.server.handlers.configs import ConfigHandlers
from rivulet.server.delegation_tokens import DelegationTokens
from rivulet.server.handlers.delegation_tokens import DelegationTokenHandlers
from rivulet.server.features import GROUP_VERSION, SHARE_VERSION, STREAMS_VERSION, FeatureLevels
from rivulet.server.handlers.features import FeatureHandlers
from rivulet.server.handlers.controller import CLUSTER_MODE_VERSIONS, ControllerHandlers, PartitionAdmin, \
    PartitionAdminHandlers, QuorumHandlers, QuorumView
from rivulet.server.handlers.find_coordinator import FindCoordinatorHandler
from rivulet.server.handlers.groups import GroupHandlers
from rivulet.server.handlers.log_dirs import LogDirHandlers
from rivulet.server.handlers.quotas import QuotaHandlers
from rivulet.server.fetch_session import FetchSessionCache
from rivulet.server.handlers.records import RecordHandlers
from rivulet.server.handlers.sasl import SaslHandlers
from rivulet.server.handlers.telemetry import TelemetryHandlers
from rivulet.server.handlers.scram import ScramHandlers
from rivulet.server.handlers.share import ShareHandlers
from rivulet.server.handlers.share_offsets import ShareOffsetHandlers
from rivulet.server.handlers.share_state import ShareStateHandlers
from rivulet.server.handlers.streams_groups import StreamsGroupHandlers
from rivulet.server.handlers.replication import INTER_BROKER_VERSIONS, ReplicationHandlers
from rivulet.server.handlers.topics import TopicHandlers
from rivulet.server.handlers.transactions import TransactionHandlers
from rivulet.server.network import KafkaConnection
from rivulet.server.internal_topics import ClusterInternalTopics
from rivulet.replication.link import BrokerLinks
from rivulet.server.one_node_admin import OneNodePartitionAdmin
from rivulet.server.quotas import ClientQuotas
from rivulet.server.scram import ScramCredentials
from rivulet.server.topics import TopicManager
from rivulet.server.zk_cluster import ZkClusterMember
from rivulet.share.coordinator import ShareCoordinator
from rivulet.share.manager import SharePartitionManager
from rivulet.transaction.coordinator import TransactionCoordinator

log = logging.getLogger(__name__)
log.addFilter(RateLimitFilter())  # a client repeating an unsupported request is logged once per interval

# API key -> (min, max) versions Rivulet implements.
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    0: (3, 13),   # Produce (v12+: a transaction.version 2 producer's batches add their partitions)
    1: (4, 18),   # Fetch
    2: (1, 11),   # ListOffsets
    3: (0, 13),   # Metadata
    8: (2, 10),   # OffsetCommit
    9: (1, 10),   # OffsetFetch
    10: (0, 6),   # FindCoordinator
    11: (0, 9),   # JoinGroup
    12: (0, 4),   # Heartbeat
    13: (0, 5),   # LeaveGroup
    14: (0, 5),   # SyncGroup
    15: (0, 6),   # DescribeGroups
    16: (0, 5),   # ListGroups
    17: (0, 1),   # SaslHandshake
    18: (0, 4),   # ApiVersions
    19: (2, 7),   # CreateTopics
    20: (1, 6),   # DeleteTopics
    21: (0, 2),   # DeleteRecords
    22: (0, 5),   # InitProducerId
    23: (2, 4),   # OffsetForLeaderEpoch
    24: (0, 5),   # AddPartitionsToTxn (v4+: brokers' batched form)
    25: (0, 4),   # AddOffsetsToTxn
    26: (0, 5),   # EndTxn (v5: transaction.version 2, the epoch bumped at every end)
    27: (0, 2),   # WriteTxnMarkers
    28: (0, 5),   # TxnOffsetCommit (v5: adds the group's offsets partition, transaction.version 2)
    29: (1, 3),   # DescribeAcls
    30: (1, 3),   # CreateAcls
    31: (1, 3),   # DeleteAcls
    32: (1, 4),   # DescribeConfigs
    33: (0, 2),   # AlterConfigs
    34: (1, 2),   # AlterReplicaLogDirs
    35: (0, 5),   # DescribeLogDirs
    36: (0, 2),   # SaslAuthenticate
    37: (0, 3),   # CreatePartitions
    38: (1, 3),   # CreateDelegationToken (v0 left in Kafka 4.0, KIP-896)
    39: (1, 2),   # RenewDelegationToken
    40: (1, 2),   # ExpireDelegationToken
    41: (1, 3),   # DescribeDelegationToken
    42: (0, 2),   # DeleteGroups
    43: (0, 2),   # ElectLeaders
    44: (0, 1),   # IncrementalAlterConfigs
    45: (0, 1),   # AlterPartitionReassignments
    46: (0, 0),   # ListPartitionReassignments
    47: (0, 0),   # OffsetDelete
    48: (0, 1),   # DescribeClientQuotas
    49: (0, 1),   # AlterClientQuotas
    50: (0, 0),   # DescribeUserScramCredentials
    51: (0, 0),   # AlterUserScramCredentials
    55: (0, 2),   # DescribeQuorum (the ZooKeeper-era controller as the quorum: handlers/controller.py)
    57: (0, 2),   # UpdateFeatures
    60: (0, 2),   # DescribeCluster
    61: (0, 0),   # DescribeProducers
    65: (0, 0),   # DescribeTransactions
    66: (0, 2),   # ListTransactions
    68: (0, 1),   # ConsumerGroupHeartbeat
    69: (0, 1),   # ConsumerGroupDescribe
    71: (0, 0),   # GetTelemetrySubscriptions
    72: (0, 0),   # PushTelemetry
    74: (0, 1),   # ListConfigResources (v0: ListClientMetricsResources)
    75: (0, 0),   # DescribeTopicPartitions
    76: (1, 1),   # ShareGroupHeartbeat (v1 is Kafka 4.3's only version)
    77: (1, 1),   # ShareGroupDescribe
    78: (1, 2),   # ShareFetch (v0 was KIP-932's early access, removed in Kafka 4.1)
    79: (1, 2),   # ShareAcknowledge
    83: (0, 0),   # InitializeShareGroupState
    84: (0, 0),   # ReadShareGroupState
    85: (0, 1),   # WriteShareGroupState
    86: (0, 0),   # DeleteShareGroupState
    87: (0, 1),   # ReadShareGroupStateSummary
    88: (0, 0),   # StreamsGroupHeartbeat
    89: (0, 0),   # StreamsGroupDescribe
    90: (0, 1),   # DescribeShareGroupOffsets (v1 adds the lag)
    91: (0, 0),   # AlterShareGroupOffsets
    92: (0, 0),   # DeleteShareGroupOffsets
}

# The share group APIs: served and listed only while share groups are enabled (group.share.enable,
# standing for Kafka's share.version=1, which gates them all: isShareGroupProtocolEnabled).
SHARE_GROUP_APIS = frozenset({76, 77, 78, 79, 83, 84, 85, 86, 87, 90, 91, 92})

# APIs served only while their feature is finalized at level 1 or more (Kafka's
# isConsumerGroupProtocolEnabled and isShareGroupProtocolEnabled); below it they are not listed.
FEATURE_GATED_APIS: dict[int, str] = {68: GROUP_VERSION, 69: GROUP_VERSION,
                                      **{k: SHARE_VERSION for k in SHARE_GROUP_APIS},
                                      88: STREAMS_VERSION, 89: STREAMS_VERSION}

# GetTelemetrySubscriptions and PushTelemetry: served always, listed in ApiVersions only when a
# telemetry receiver is configured (metric.reporters), as Kafka's ApiVersionManager does.
TELEMETRY_APIS = frozenset({71, 72})
# Advertised below what is served, as Kafka 4 (KAFKA-18659): librdkafka turns compression off
# unless ApiVersions lists Produce from v0, yet a Produce v0-2 is refused (the connection closed).
ADVERTISED_MIN_VERSIONS: dict[int, int] = {0: 0}

# Produce, Fetch and ShareFetch weigh their request time against request_percentage themselves,
# with their byte rates; brokers' own requests are never throttled (Kafka's sendResponseExemptThrottle).
_OWN_THROTTLING = frozenset({0, 1, 78})
_EXEMPT_FROM_REQUEST_QUOTA = frozenset({27, 56, *INTER_BROKER_VERSIONS})

_SOFTWARE_NAME = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")


class KafkaApis:
    def __init__(self, *, replica_manager: ReplicaManager, group_coordinator: GroupCoordinator,
                 txn_coordinator: TransactionCoordinator, topics: TopicManager, config: BrokerConfig,
                 clock: Clock, node: NodeEndpoint, cluster_id: str, quotas: ClientQuotas,
                 log_dir_mover: ReplicaAlterLogDirsManager, authz: Authz, acls: AclManager, scram: ScramCredentials,
                 client_metrics: ClientMetricsManager,
                 group_configs: GroupConfigs, share_partitions: SharePartitionManager,
                 share_coordinator: ShareCoordinator, features: FeatureLevels,
                 delegation_tokens: DelegationTokens, fetch_sessions: FetchSessionCache,
                 metadata_cache: MetadataCache | None = None, broker_epoch: Callable[[], int] | None = None,
                 cluster: ZkClusterMember | None = None, controller_links: BrokerLinks | None = None) -> None:
        """``metadata_cache`` (with ``broker_epoch``, this broker's registration epoch) is given in
        cluster mode only: the controller's requests are then served, and metadata is the cluster's.
        ``cluster`` (ZooKeeper mode) brings this broker's candidate controller, which answers
        AlterPartition and ControlledShutdown, and takes topic creations and deletions; DescribeQuorum
        goes over ``controller_links`` to the controller when this broker is not it."""
        self.quotas = quotas
        self.client_metrics = client_metrics
        self.features = features
        self.handlers: dict[int, Handler] = {18: self.handle_api_versions}
        self.versions = dict(SUPPORTED_VERSIONS)
        if metadata_cache is not None:
            self.versions.update(INTER_BROKER_VERSIONS)
            self.handlers.update(ReplicationHandlers(replica_manager, broker_epoch or (lambda: -1),
                                                     topics.off_loop, authz, topic_configs=cluster).handlers())
        partition_admin: PartitionAdmin
        quorum: QuorumView

        # Cluster mode: FindCoordinator and Metadata have a missing internal topic made by the controller.
        cluster_internal_topics = None if cluster is None else ClusterInternalTopics(
            config, cluster, group_coordinator, txn_coordinator, share_coordinator)
        if cluster is not None and cluster.controller is not None:
            self.versions.update(CLUSTER_MODE_VERSIONS)
            self.handlers.update(ControllerHandlers(cluster.controller, authz).handlers())
            partition_admin = quorum = cluster.controller
        else:
            # One node is its own controller for elections and reassignments, as Kafka's is.
            partition_admin = quorum = OneNodePartitionAdmin(topics, replica_manager, node,
                                                             config.inter_broker_listener, clock)
        for area in (
            PartitionAdminHandlers(partition_admin, authz),
            QuorumHandlers(quorum, authz, metadata_cache, controller_links),
            RecordHandlers(replica_manager, topics, quotas, authz, fetch_sessions, clock, metadata_cache),
            QuotaHandlers(quotas, authz),
            AclHandlers(acls, authz),
            ScramHandlers(scram, authz),
            FeatureHandlers(features, authz),
            DelegationTokenHandlers(delegation_tokens, authz),
            SaslHandlers(),
            LogDirHandlers(topics.log_manager, log_dir_mover, authz),
            TopicHandlers(topics, replica_manager, config, node, cluster_id, quotas.controller_mutation, authz,
                          metadata_cache, cluster,
                          {c.internal_topic()[0]: c for c in (group_coordinator, txn_coordinator, share_coordinator)},
                          cluster_internal_topics),
            ConfigHandlers(topics, config, authz, client_metrics, group_configs, metadata_cache),
            TelemetryHandlers(client_metrics),
            ShareHandlers(share_partitions, topics.topic_name, authz, quotas),
            ShareOffsetHandlers(group_coordinator, authz),
            StreamsGroupHandlers(group_coordinator, authz),
            ShareStateHandlers(share_coordinator, authz),
            GroupHandlers(group_coordinator, topics, clock, authz, replica_manager.join_transaction, metadata_cache),
            FindCoordinatorHandler(group_coordinator, txn_coordinator, authz, metadata_cache, cluster_internal_topics,
                                   share_coordinator),
            TransactionHandlers(txn_coordinator, group_coordinator, replica_manager, topics, config, authz,
                                metadata_cache),
        ):
            self.handlers.update(area.handlers())
        if not group_coordinator.share_groups_enabled:
            for key in SHARE_GROUP_APIS:
                del self.versions[key]
                self.handlers.pop(key, None)
        assert self.handlers.keys() == self.versions.keys(), "every API has a handler and a version range"

    def handle(self, header: framing.RequestHeader, body: Struct, conn: KafkaConnection) -> Answer:
        rng = self.versions.get(header.api_key)
        if rng is None or not rng[0] <= header.api_version <= rng[1] or self._feature_off(header.api_key):
            if header.api_key == framing.API_VERSIONS_KEY:
                return self.api_versions_error(ErrorCode.UNSUPPORTED_VERSION)
            name = framing.request_class(header.api_key).NAME
            log.warning("unsupported %s v%d from %s; closing", name, header.api_version, conn.peer)
            conn.close()
            return NO_RESPONSE
        handler = self.handlers[header.api_key]
        if header.api_key in _OWN_THROTTLING or header.api_key in _EXEMPT_FROM_REQUEST_QUOTA or \
                not self.quotas.request.quotas_enabled():
            return handler(header, body, conn)
        t0 = time.perf_counter_ns()
        answer = handler(header, body, conn)
        spent = time.perf_counter_ns() - t0
        return then(answer, lambda response: self._throttle_request(header, conn, spent, response))

    def _throttle_request(self, header: framing.RequestHeader, conn: KafkaConnection, spent_ns: int,
                          response: Any) -> Any:
        """request_percentage (Kafka's sendResponseMaybeThrottle): record the time the request
        took, and over the quota answer with the throttle time and mute the connection."""
        ms = self.quotas.request.record_request_time(conn.user, header.client_id or "", spent_ns)
        if ms > 0:
            if isinstance(response, Struct) and "throttle_time_ms" in type(response).__slots__:
                response.throttle_time_ms = max(response.throttle_time_ms or 0, ms)
            conn.throttle(ms)
        return response

    # ------------------------------------------------------------ ApiVersions
    def _feature_off(self, api_key: int) -> bool:
        feature = FEATURE_GATED_APIS.get(api_key)
        return feature is not None and self.features.level(feature) < 1

    def _api_keys(self) -> list[avr.ApiVersion]:
        hidden = () if self.client_metrics.receiver_configured else TELEMETRY_APIS
        return [avr.ApiVersion(api_key=k, min_version=ADVERTISED_MIN_VERSIONS.get(k, lo), max_version=hi)
                for k, (lo, hi) in sorted(self.versions.items()) if k not in hidden and not self._feature_off(k)]

    def api_versions_error(self, code: ErrorCode) -> avr.ApiVersionsResponse:
        return avr.ApiVersionsResponse(error_code=code, api_keys=self._api_keys())

    def handle_api_versions(
        self, header: framing.RequestHeader, req: ApiVersionsRequest, conn: KafkaConnection
    ) -> avr.ApiVersionsResponse:
        resp = avr.ApiVersionsResponse(error_code=0, api_keys=self._api_keys(), throttle_time_ms=0)
        if header.api_version >= 3:
            if not _SOFTWARE_NAME.match(req.client_software_name or "") or \
                    not _SOFTWARE_NAME.match(req.client_software_version or ""):
                resp.error_code = ErrorCode.INVALID_REQUEST
            else:
                conn.client_software_name = req.client_software_name
                conn.client_software_version = req.client_software_version
        if header.api_version >= 3:
            # KAFKA-17011: before v4 a supported range starting at 0 could not be sent, so it is left out.
            resp.supported_features = [
                avr.SupportedFeatureKey(name=n, min_version=lo, max_version=hi)
                for n, (lo, hi) in sorted(self.features.supported.items()) if header.api_version >= 4 or lo > 0]
            finalized = self.features.finalized
            resp.finalized_features_epoch = finalized.epoch
            resp.finalized_features = [avr.FinalizedFeatureKey(name=n, max_version_level=v, min_version_level=v)
                                       for n, v in sorted(finalized.levels.items()) if v > 0]
        return resp
