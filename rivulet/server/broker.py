"""The broker process: builds storage, replication, the coordinators, the request dispatcher
and the network, and hands each its collaborators.

Start-up order follows Kafka's: recover the logs, load topic metadata, open a partition for
every topic partition, start the coordinators, then listen. Shutdown stops listening,
completes pending delayed operations, flushes the logs and writes the checkpoints.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import ssl
import time
from typing import TYPE_CHECKING, Callable

from rivulet.common.cluster import NodeEndpoint
from rivulet.common.time import SYSTEM_CLOCK, Clock
from rivulet.controller.producer_ids import ZkProducerIdManager
from rivulet.controller.zk_data import EndPoint
from rivulet.coordinator.group_config import GroupConfigs
from rivulet.coordinator.group_coordinator import GroupCoordinator
from rivulet.delayed import Timer
from rivulet.iceberg.catalog import CatalogSettings
from rivulet.iceberg.translator import IcebergTranslator
from rivulet.registry.client import RegistryClient, SubjectLookup, registry_client_tls
from rivulet.replication.alter_partition import ControllerAlterPartitionManager
from rivulet.replication.fetcher import FetcherConfig, ReplicaFetcherManager
from rivulet.replication.link import BrokerLinks
from rivulet.replication.log_dir_mover import ReplicaAlterLogDirsManager
from rivulet.replication.metadata_cache import MetadataCache
from rivulet.replication.replica_manager import ReplicaManager
from rivulet.server.apis import KafkaApis
from rivulet.server.fetch_session import FetchSessionCache
from rivulet.security import tls
from rivulet.security.authorizer import StandardAuthorizer
from rivulet.security.ssl_principal import SslPrincipalMapper, principal_from_dn
from rivulet.server.config import (BROKER_CONFIGS, LAST_PUSH_RECEIVER, PROMETHEUS_TELEMETRY, BrokerConfig,
                                   ConfigError, parse_registry_listener)
from rivulet.server.coordinator_leadership import CoordinatorLeadership
from rivulet.server.acls import AclManager, Authz, build_authorizer
from rivulet.server.client_metrics import ClientMetricsManager, EveryReceiver, LastPayloads, TelemetryReceiver
from rivulet.server.dynamic_config import CordonedLogDirs, DynamicBrokerConfig, ThreadCounts
from rivulet.server.delegation_tokens import DelegationTokens, TokenSettings
from rivulet.server.features import ELR_VERSION, TRANSACTION_VERSION, FeatureLevels, supported_features
from rivulet.server.fd_limit import describe as describe_fd_limit
from rivulet.server.group_topics import GroupTopicCreation
from rivulet.server.fd_limit import raise_open_file_limit
from rivulet.server.metadata import MetadataStore
from rivulet.server.metrics.collectors import BrokerCollector, GroupLagCollector, IcebergCollector, RequestCollector
from rivulet.server.metrics.exporter import MetricsExporter
from rivulet.server.metrics.requests import RequestMetrics
from rivulet.server.metrics.telemetry import ClientTelemetryExporter
from rivulet.server.authentication import (SaslListenerConfig, SaslSession, inter_broker_sasl, plain_users_of,
                                           sasl_listener_config)
from rivulet.server.config import SASL_PROTOCOLS
from rivulet.server.quotas import ClientQuotas
from rivulet.client.connection import PLAINTEXT_CONNECTOR, BrokerConnector
from rivulet.server.network import Listener
from rivulet.server.scram import ScramCredentials
from rivulet.server.partition_ends import PartitionEnds
from rivulet.server.request_log import RequestLog
from rivulet.server.socket_server import SocketServer, SocketServerConfig
from rivulet.server.topics import TopicManager, broker_props
from rivulet.server.relays import PartitionEvents, ReplicaLogsRelay, TxnVerifierRelay
from rivulet.server.zk_cluster import ClusterChangeListeners, SessionHealth, ZkClusterMember
from rivulet.share.coordinator import ShareCoordinator, ShareCoordinatorConfig
from rivulet.share.manager import SharePartitionManager
from rivulet.share.state_persister import CoordinatorSharePersister
from rivulet.storage import LogConfig, LogManager, read_or_create_meta
from rivulet.storage.cleaner import LogCleaner
from rivulet.storage.log_dir_failure import AllLogDirsOfflineError
from rivulet.storage.manager import TooManyOpenFilesError
from rivulet.transaction.coordinator import TransactionCoordinator
from rivulet.transaction.marker_channel import InterBrokerMarkerChannel
from rivulet.transaction.remote_verifier import ClusterTxnVerifier, LocalTxnVerifier
from rivulet.transaction.producer_id_manager import ProducerIdGenerator, ProducerIdManager

if TYPE_CHECKING:  # the registry is imported only when configured (_schema_registry)
    from rivulet.registry.security import RegistrySecurity
    from rivulet.registry.server import SchemaRegistryServer

log = logging.getLogger(__name__)
# BrokerLinks purposes whose requests time out after request.timeout.ms, as Kafka's
# TransactionMarkerChannelManager, AddPartitionsToTxnManager and share state persister do.
_REQUEST_TIMEOUT_LINKS = frozenset({"txn-markers", "txn-verify", "share-state"})

# Logs given retention between two turns of the event loop.
RETENTION_SLICE = 64


def inter_broker_connector(config: BrokerConfig) -> BrokerConnector:
    """The broker's client side towards other brokers: TLS when the inter-broker listener is
    SSL or SASL_SSL, with that listener's ssl.* settings (its key store is this broker's client
    certificate when the others ask for one)."""
    listener = config.inter_broker_listener
    protocol = config.inter_broker_security_protocol()
    sasl = inter_broker_sasl(config, listener) if protocol in SASL_PROTOCOLS else None
    if protocol not in ("SSL", "SASL_SSL"):
        return PLAINTEXT_CONNECTOR if sasl is None else BrokerConnector(sasl=sasl)
    return BrokerConnector(tls.client_context(tls.ssl_config(config.listener_props(listener))), sasl)


def _schema_registry() -> type[SchemaRegistryServer]:
    """The registry's class, imported only when configured: its schema libraries are an
    extra (``pip install 'rivulet[registry]'``)."""
    try:
        from rivulet.registry.server import SchemaRegistryServer
    except ImportError as e:
        raise ConfigError(f"schema.registry.listeners needs the registry extra (pip install 'rivulet[registry]'): "
                          f"{e}") from None
    return SchemaRegistryServer


def _registry_tls(config: BrokerConfig) -> ssl.SSLContext:
    """An https registry listener's context: the broker-wide ssl.* key and trust stores, client
    certificates per schema.registry.ssl.client.authentication."""
    props = {k.name: config[k.name] for k in BROKER_CONFIGS}
    props["ssl.client.auth"] = config["schema.registry.ssl.client.authentication"].lower()
    try:
        return tls.server_context(tls.ssl_config(props))
    except tls.TlsError as e:
        raise ConfigError(f"schema.registry.listeners (https): {e}") from None


def _registry_forward_tls(config: BrokerConfig) -> ssl.SSLContext:
    """How a registry forwards a change to the writer's https listener: trusting the broker's
    trust store, presenting its key store."""
    return tls.client_context(tls.ssl_config({k.name: config[k.name] for k in BROKER_CONFIGS}))


def _registry_security(config: BrokerConfig, scram: ScramCredentials,
                       authorizer: StandardAuthorizer | None) -> RegistrySecurity | None:
    """The registry's callers authenticated as the broker's (its SASL users, its certificate
    principals) and authorized with its ACLs; None when it asks nothing of them."""
    from rivulet.registry.security import RegistryAuthenticator, RegistrySecurity, SubjectAuthorizer
    basic = config["schema.registry.authentication.method"].upper() == "BASIC"
    certificates = config["schema.registry.ssl.client.authentication"].upper() != "NONE" and \
        parse_registry_listener(config["schema.registry.listeners"][0])[0] == "https"
    if not basic and not certificates and authorizer is None:
        return None
    passwords = None
    if basic:
        plain = plain_users_of(config)

        def passwords(user: str, password: str) -> bool:
            known = plain.get(user)
            if known is not None and hmac.compare_digest(known.encode(), password.encode()):
                return True
            return scram.verify_password(user, password)
    mapper = SslPrincipalMapper(config["ssl.principal.mapping.rules"]) if certificates else None
    certificate = (lambda dn: principal_from_dn(dn, mapper)) if mapper is not None else None
    return RegistrySecurity(RegistryAuthenticator(passwords, certificate),
                            SubjectAuthorizer(authorizer.authorize) if authorizer is not None else None)


class Broker:
    def __init__(self, config: BrokerConfig, clock: Clock = SYSTEM_CLOCK, *, cluster_mode: bool = False) -> None:
        """``cluster_mode``: a controller decides leadership (LeaderAndIsr, UpdateMetadata,
        StopReplica); without it this node leads every partition alone, as before. With
        ``zookeeper.connect`` set it is on, and the broker joins the cluster through ZooKeeper
        (its id and the cluster id settled there, its registration, its candidate controller)."""
        self.config = config
        self.clock = clock
        # How this broker reaches the others: the inter-broker listener's security protocol.
        self.connector = inter_broker_connector(config)
        self.cluster: ZkClusterMember | None = (ZkClusterMember(config, clock, self.connector)
                                                if config["zookeeper.connect"] else None)
        self.cluster_mode = cluster_mode or self.cluster is not None
        self.node_id = self.cluster.broker_id if self.cluster is not None else config.node_id
        self.metadata_cache: MetadataCache | None = MetadataCache(self.node_id) if self.cluster_mode else None
        # The czxid of this broker's /brokers/ids znode, once registered (-1 before).
        self.broker_epoch = -1
        self.replica_fetchers: ReplicaFetcherManager | None = None
        self.marker_channel: InterBrokerMarkerChannel | None = None
        self.txn_verifier: ClusterTxnVerifier | None = None
        self.alter_partition: ControllerAlterPartitionManager | None = None
        self._listener_name, host, port = config.advertised_listeners[0]
        self.node = NodeEndpoint(self.node_id, host, port)
        # In a cluster both levels live in ZooKeeper, read (and migrated from the file) here.
        self.dynamic_config = DynamicBrokerConfig(config.log_dirs[0], self.node_id, config.items(), self.cluster)
        # Client quotas are kept beside the dynamic configs and apply from the first request.
        self.quotas = ClientQuotas(config["quota.window.num"], config["quota.window.size.seconds"], clock,
                                   store=self.dynamic_config, controller_samples=config["controller.quota.window.num"],
                                   controller_window_seconds=config["controller.quota.window.size.seconds"])
        self.log_manager = LogManager(config.log_dirs,
                                      LogConfig.from_broker_props(broker_props(config, self.dynamic_config)),
                                      producer_id_expiration_ms=config["producer.id.expiration.ms"],
                                      time_ms=clock.milliseconds)
        self.cluster_id = read_or_create_meta(config.log_dirs[0], self.node_id,
                                              self.cluster.cluster_id if self.cluster else config["cluster.id"])
        self.metadata = MetadataStore(config.log_dirs[0], self.cluster_id)
        self.timer: Timer | None = None
        self.replica_manager: ReplicaManager | None = None
        self.topics: TopicManager | None = None
        self.group_coordinator: GroupCoordinator | None = None
        self.log_cleaner: LogCleaner | None = None
        self.log_dir_mover: ReplicaAlterLogDirsManager | None = None
        self.transaction_coordinator: TransactionCoordinator | None = None
        self.share_coordinator: ShareCoordinator | None = None
        self.share_persister: CoordinatorSharePersister | None = None
        self.partition_ends: PartitionEnds | None = None
        self.quorum_links: BrokerLinks | None = None  # DescribeQuorum forwarded to the controller
        self.share_partitions: SharePartitionManager | None = None
        self.apis: KafkaApis | None = None
        self.iceberg: IcebergTranslator | None = None
        # metrics.listener: the Prometheus endpoint, and the request timings it shows.
        self.metrics = MetricsExporter(config["metrics.listener"]) if config["metrics.listener"] else None
        # schema.registry.listeners: the schema registry, a client of this broker (bound with the listeners).
        self.schema_registry: SchemaRegistryServer | None = None
        if config["schema.registry.listeners"]:
            scheme, host, port = parse_registry_listener(config["schema.registry.listeners"][0])
            self.schema_registry = _schema_registry()(
                host, port, config["schema.registry.kafkastore.topic"],
                config["schema.registry.kafkastore.topic.replication.factor"] if self.cluster_mode else 1,
                wait_for_replicas=self.cluster_mode, tls=_registry_tls(config) if scheme == "https" else None,
                forward_tls=_registry_forward_tls(config) if scheme == "https" else None)
        request_log = RequestLog(config["request.log.threshold.ms"])
        self.socket_server = SocketServer(SocketServerConfig(
            max_request_bytes=config["socket.request.max.bytes"],
            connections_max_idle_ms=config["connections.max.idle.ms"],
            max_connections=config["max.connections"],
            max_connections_per_ip=config["max.connections.per.ip"],
            max_connections_per_ip_overrides=config["max.connections.per.ip.overrides"],
            queued_max_request_bytes=config["queued.max.request.bytes"],
            send_buffer_bytes=config["socket.send.buffer.bytes"],
            receive_buffer_bytes=config["socket.receive.buffer.bytes"],
            listen_backlog_size=config["socket.listen.backlog.size"],
            failed_authentication_delay_ms=config["connection.failed.authentication.delay.ms"]),
            self.quotas.connection_rates,
            request_metrics=RequestMetrics() if self.metrics is not None else None,
            request_log=request_log if request_log.enabled() else None)
        self.dynamic_config.add_reconfigurable(self.socket_server.quotas)
        self.dynamic_config.add_reconfigurable(ThreadCounts())
        self.dynamic_config.add_reconfigurable(CordonedLogDirs(self.log_manager, config.log_dirs))
        self.metrics_port: int | None = None
        self.bound_ports: list[int] = []
        self.scram = ScramCredentials(self.cluster if self.cluster is not None else self.dynamic_config)
        # KIP-714 subscriptions: in ZooKeeper in a cluster, in this broker's metadata otherwise.
        receivers: list[TelemetryReceiver] = []
        if LAST_PUSH_RECEIVER in config["metric.reporters"]:
            receivers.append(LastPayloads())
        self.client_telemetry: ClientTelemetryExporter | None = None
        if PROMETHEUS_TELEMETRY in config["metric.reporters"]:  # with metrics.listener, as BrokerConfig checks
            self.client_telemetry = ClientTelemetryExporter(clock)
            receivers.append(self.client_telemetry)
        receiver = None if not receivers else receivers[0] if len(receivers) == 1 else EveryReceiver(receivers)
        self.client_metrics = ClientMetricsManager(self.cluster if self.cluster is not None else self.dynamic_config,
                                                   clock, config["telemetry.max.bytes"], receiver)
        # Group configs (GROUP config resources): in ZooKeeper in a cluster, else beside the dynamic configs.
        self.group_configs = GroupConfigs(config.items(),
                                          self.cluster if self.cluster is not None else self.dynamic_config)
        self.dynamic_config.add_reconfigurable(self.group_configs)
        # Finalized feature levels: ZooKeeper's /feature in a cluster, this broker's metadata otherwise.
        self.features = FeatureLevels(
            self.node_id, supported_features(config["group.share.enable"]),
            self.cluster if self.cluster is not None else self.dynamic_config,
            self.cluster.supported_features if self.cluster is not None else dict)
        # Delegation tokens: in ZooKeeper in a cluster, in this broker's metadata otherwise.
        self.delegation_tokens = DelegationTokens(
            TokenSettings(config["delegation.token.secret.key"] or config["delegation.token.master.key"],
                          config["delegation.token.max.lifetime.ms"], config["delegation.token.expiry.time.ms"]),
            self.cluster if self.cluster is not None else self.dynamic_config, clock)
        # Built before anything binds, so that a SASL set-up Rivulet cannot serve stops start-up.
        self.sasl_listeners: dict[str, SaslListenerConfig] = {
            name: sasl_listener_config(config, name, self.scram.lookup, self.delegation_tokens.lookup) for name, protocol in config.security_protocols.items()
            if protocol in SASL_PROTOCOLS and name not in config["controller.listener.names"]}
        # Built here so that a TLS setting that cannot work stops the broker before it binds.
        self.listeners = self._build_listeners()
        self._tasks: list[asyncio.Task] = []
        self._stopped = asyncio.Event()
        self.started = False

    @property
    def advertised_listener(self) -> tuple[str, str, int]:
        return self._listener_name, self.node.host, self.node.port

    @property
    def bound_listener(self) -> tuple[str, str, int]:
        """The advertised listener as bound: (name, host, port), its port the one bound once started."""
        served = self._served_listeners()
        bound = [(name, host, port) for (name, host, _), port
                 in zip(served, self.bound_ports or [p for _, _, p in served])]
        return next((x for x in bound if x[0] == self._listener_name), bound[0] if bound else self.advertised_listener)

    def _authenticator(self, listener: str) -> Callable[[tuple[str, int]], SaslSession] | None:
        """Each connection's SASL state on a SASL listener; None on the others."""
        sasl = self.sasl_listeners.get(listener)
        if sasl is None:
            return None
        return lambda peer: sasl.new_session(peer, self.clock.milliseconds)

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Build and start every part; a start that fails part-way (a setting only a part
        checks, a port taken, ZooKeeper refusing the id) stops what it started before it
        raises, so that the listeners, the log directories' locks and the tasks are let go."""
        try:
            await self._start_parts()
        except Exception:
            try:
                await self.shutdown()
            except Exception:
                log.exception("stopping what had started failed")
            raise

    async def _start_parts(self) -> None:
        """The composition root: every part is built here with its collaborators, in the order
        the broker starts them (Kafka's: bind, recover the logs, the replica and topic managers,
        the coordinators, the request handlers, then serve and register). The three cycles
        (the replica manager calls back parts built on it) go through ``relays``."""
        t0 = time.monotonic()
        cfg = self.config
        fd_limit = raise_open_file_limit()
        await self._bind()
        loop = asyncio.get_running_loop()
        timer = self.timer = Timer(loop)
        cache = self.metadata_cache
        replica_logs, partition_events, local_txn_check = ReplicaLogsRelay(), PartitionEvents(), TxnVerifierRelay()
        if cache is not None:
            self._build_cluster_links(local_txn_check)
        rm = self.replica_manager = ReplicaManager(
            self.node_id, timer,
            produce_purge_interval=cfg["producer.purgatory.purge.interval.requests"],
            fetch_purge_interval=cfg["fetch.purgatory.purge.interval.requests"], clock=self.clock,
            replica_lag_time_max_ms=cfg["replica.lag.time.max.ms"],
            # Cluster mode: replicas come from LeaderAndIsr, followers fetch from their leaders,
            # leaders propose ISR changes to the controller.
            replica_logs=replica_logs if cache is not None else None, alter_partition=self.alter_partition,
            metadata_cache=cache, replica_selector=cfg["replica.selector.class"] if cache is not None else None,
            fetchers=self._replica_fetchers if cache is not None else None,
            leadership=partition_events,
            txn_verifier=self.txn_verifier if self.txn_verifier is not None else LocalTxnVerifier(local_txn_check),
            add_retry_backoff_ms=cfg["add.partitions.to.txn.retry.backoff.ms"],
            add_retry_max_ms=min(cfg["add.partitions.to.txn.retry.backoff.max.ms"], cfg["request.timeout.ms"]))
        await self._recover_logs()
        topics = self.topics = TopicManager(cfg, self.metadata, self.log_manager, rm, self.dynamic_config,
                                            metadata_cache=cache, config_store=self.cluster,
                                            on_partitions_deleted=partition_events.on_partitions_deleted)
        topics.open_all(open_partitions=not self.cluster_mode)
        if self.cluster is not None:
            # Topic configs are ZooKeeper's: every topic's now, and each change as it is noticed.
            for name, overrides in self.cluster.topic_configs.items():
                topics.apply_topic_config(name, overrides)
        if cache is not None:
            replica_logs.bind(topics)
            self._tasks.append(loop.create_task(self._isr_expiration(rm)))
        log.info("%s", describe_fd_limit(fd_limit, len(rm.partitions)))
        if cfg["log.cleaner.enable"]:
            # One cleaner serves every compacted log (__consumer_offsets, __transaction_state, users').
            self.log_cleaner = LogCleaner(self.log_manager, backoff_ms=cfg["log.cleaner.backoff.ms"],
                                          time_ms=self.clock.milliseconds)
            self.log_cleaner.start()
        # Share-partition state in __share_group_state: served locally, or by the partition's leader.
        shares = self.share_coordinator = ShareCoordinator(ShareCoordinatorConfig.from_config(cfg), rm, topics,
                                                           topics, self.node, self.clock)
        self.share_persister = CoordinatorSharePersister(shares, self._links("share-state"))
        share = self.share_partitions = SharePartitionManager(
            rm, timer, self.clock, self.group_configs.get, self.share_persister,
            max_sessions=cfg["group.share.max.share.sessions"], topic_id=topics.topic_id,
            reread_settings=self.group_configs.reread)
        self.partition_ends = PartitionEnds(rm, self._links("partition-ends"))
        # A deleted share group takes its share partitions' state with it (Kafka's DeleteShareGroupState).
        groups = self.group_coordinator = GroupCoordinator(
            cfg, rm, topics, topics, self.node, timer, self.clock, self.group_configs,
            streams_topics=GroupTopicCreation(topics, self.cluster, cfg["default.replication.factor"]),
            share_state=share, partition_ends=self.partition_ends, on_share_group_deleted=share.delete_group_state)
        # Markers on __consumer_offsets complete the producer's pending offsets in the group coordinator.
        txns = self.transaction_coordinator = TransactionCoordinator(
            cfg, rm, topics, topics, self.node, self._producer_ids(), offsets_listener=groups,
            clock=self.clock, marker_channel=self.marker_channel,
            transaction_version=lambda: self.features.level(TRANSACTION_VERSION))
        local_txn_check.bind(txns)
        # As Kafka does, committed offsets and share state of deleted partitions go too.
        partition_events.bind(
            leadership=[CoordinatorLeadership(groups, txns, shares), share] if self.cluster_mode else [share],
            deletions=[groups.on_partitions_deleted, share.on_partitions_deleted])
        groups.startup(lead_all=not self.cluster_mode)
        txns.startup(lead_all=not self.cluster_mode)
        shares.startup(lead_all=not self.cluster_mode)
        if self.cluster is not None:
            self.cluster.prepare(lambda: self.features.level(ELR_VERSION) >= 1)
        self.log_dir_mover = ReplicaAlterLogDirsManager(rm, self.log_manager)
        authorizer = build_authorizer(cfg)
        # ACLs live in ZooKeeper in a cluster (every broker follows their change notifications),
        # in this broker's metadata otherwise.
        self.acls = AclManager(authorizer, self.cluster if self.cluster is not None else self.dynamic_config)
        if cache is not None:
            self.quorum_links = self._links("describe-quorum")
        self.fetch_sessions = FetchSessionCache(cfg["max.incremental.fetch.session.cache.slots"])
        self.apis = KafkaApis(replica_manager=rm, group_coordinator=groups, txn_coordinator=txns, topics=topics,
                              config=cfg, clock=self.clock, node=self.node, cluster_id=self.cluster_id,
                              metadata_cache=cache, broker_epoch=lambda: self.broker_epoch,
                              quotas=self.quotas, cluster=self.cluster, log_dir_mover=self.log_dir_mover,
                              authz=Authz(authorizer), acls=self.acls, scram=self.scram,
                              client_metrics=self.client_metrics, group_configs=self.group_configs,
                              share_partitions=share, share_coordinator=shares, features=self.features,
                              delegation_tokens=self.delegation_tokens, fetch_sessions=self.fetch_sessions,
                              controller_links=self.quorum_links)
        # Topics with iceberg.mode: their leaders here translate them into their tables, the
        # schema modes reading an external registry when one is named, else this broker's own.
        registry_url = cfg["iceberg.schema.registry.url"]
        schemas: SubjectLookup | None = self.schema_registry
        if registry_url:
            try:
                tls = registry_client_tls(registry_url, cfg["iceberg.schema.registry.ssl.ca.location"],
                                          cfg["iceberg.schema.registry.ssl.certificate.location"],
                                          cfg["iceberg.schema.registry.ssl.key.location"])
            except (OSError, ssl.SSLError) as e:
                raise ConfigError(f"iceberg.schema.registry.ssl.*: {e}") from None
            schemas = RegistryClient(registry_url, cfg["iceberg.schema.registry.basic.auth.user.info"] or "", tls)
        self.iceberg = IcebergTranslator(
            topics.table_partitions,
            CatalogSettings.resolve(cfg["iceberg.catalog.uri"], cfg["iceberg.catalog.warehouse"], cfg.log_dirs[0],
                                    cfg["iceberg.catalog.type"], cfg["iceberg.catalog.credential"] or "",
                                    cfg["iceberg.catalog.token"] or ""),
            cfg["iceberg.translation.max.bytes"], self.clock, schemas)
        if self.metrics is not None:
            self._add_collectors(rm, groups, self.iceberg)
        if self.cluster is not None:
            # As Kafka's KafkaServer: registered before any request is read, so that a broker
            # that cannot register (yet) answers nobody; the listeners are bound, not listening.
            await self.cluster.start(self._endpoints(), self._on_registered, ClusterChangeListeners(
                topic_config=topics.apply_topic_config, broker_config=topics.apply_broker_configs,
                user_config=self.scram.set_user,
                client_metrics=self.client_metrics.set_subscription, group_config=self.group_configs.set_group,
                acls=authorizer.replace if authorizer is not None else ClusterChangeListeners.acls,
                session_health=self._on_session_health, features=self.features.set_finalized,
                delegation_token=self.delegation_tokens.set_token),
                self.features.supported, self.log_manager.clean_start)
        await self.socket_server.start_serving(self.apis)
        if self.cluster is not None:
            self.cluster.start_controller()
        if self.schema_registry is not None:
            # Off the loop: in a cluster it opens a ZooKeeper session of its own (its writer's election).
            await loop.run_in_executor(None, self.schema_registry.start, {"bootstrap.servers": self._registry_bootstrap()},
                                       self.node.host, cfg["zookeeper.connect"] or "",
                                       _registry_security(cfg, self.scram, authorizer))
        self._tasks.append(loop.create_task(self._housekeeping()))
        self.iceberg.start()
        if self.delegation_tokens.enabled:
            self._tasks.append(loop.create_task(self._expire_delegation_tokens()))
        self.started = True
        log.info("started in %.0f ms", (time.monotonic() - t0) * 1000)

    async def _bind(self) -> None:
        """Open the listeners (and the metrics endpoint) before anything loads or writes, so
        that a port in use stops the broker first; an ephemeral port is advertised as bound."""
        for (_name, host, port), listener in zip(self._served_listeners(), self.listeners):
            bound = await self.socket_server.bind(host, port, listener)
            self.bound_ports.append(bound)
            if listener.advertised is not None:
                listener.advertised.take_bound_port(bound)
        if self.metrics is not None:
            self.metrics_port = await self.metrics.bind()
        if self.schema_registry is not None:
            self.schema_registry.bind()
        cfg = self.config
        if self.bound_ports and cfg.advertised_listeners is cfg.listeners:
            self.node.take_bound_port(self.bound_ports[0])

    async def _recover_logs(self) -> None:
        """Recovery of large logs is long file work: a worker thread, the loop stays free.
        Nothing reads the LogManager until it returns. Logs of partitions the metadata does not
        hold (a create or delete cut short by a crash) are deleted unread; in cluster mode the
        controller decides which replicas this node keeps."""
        try:
            await asyncio.get_running_loop().run_in_executor(
                None, self.log_manager.startup, None, None if self.cluster_mode else self.metadata.holds)
        except TooManyOpenFilesError:
            self.log_manager.release_locks()
            raise
        offline = self.log_manager.failure_channel.offline_dirs()
        if offline and not self.log_manager.online_dirs():
            self.log_manager.release_locks()
            raise AllLogDirsOfflineError(offline)
        for d, why in offline.items():
            log.error("starting with log directory %s offline (%s): its partitions answer KAFKA_STORAGE_ERROR; "
                      "fix the fault and restart to recover it", d, why)
        self.dynamic_config.ensure_cluster_min_isr()  # the log dirs exist now

    def _links(self, purpose: str) -> BrokerLinks:
        """This broker's connections of one purpose to the others, on the inter-broker listener
        (none reachable on a single node, which has no metadata cache). Those Kafka's broker
        makes with its own network clients (transaction markers, KIP-890's checks, share state)
        time out after request.timeout.ms; the rest after replica.socket.timeout.ms."""
        cfg = self.config
        timeout = cfg["request.timeout.ms"] if purpose in _REQUEST_TIMEOUT_LINKS else cfg["replica.socket.timeout.ms"]
        return BrokerLinks(purpose, self.node_id, self.metadata_cache, cfg.inter_broker_listener, timeout,
                           self.connector)

    def _build_cluster_links(self, local_txn_check: TxnVerifierRelay) -> None:
        """Cluster mode's links to other brokers that the replica and transaction managers use:
        AlterPartition to the controller, WriteTxnMarkers to the partitions' leaders, and
        KIP-890's check with the transactional id's coordinator wherever it runs."""
        self.alter_partition = ControllerAlterPartitionManager(self._links("alter-partition"),
                                                               lambda: self.broker_epoch)
        self.alter_partition.start()
        self.marker_channel = InterBrokerMarkerChannel(self._links("txn-markers"))
        self.txn_verifier = ClusterTxnVerifier(
            self._links("txn-verify"), local_txn_check,
            verification_enabled=self.config["transaction.partition.verification.enable"])

    def _replica_fetchers(self, rm: ReplicaManager) -> ReplicaFetcherManager:
        """The replica manager's fetchers (it builds them on itself, as Kafka's does)."""
        cfg = self.config
        self.replica_fetchers = ReplicaFetcherManager(rm, self.node_id, FetcherConfig(
            max_wait_ms=cfg["replica.fetch.wait.max.ms"], min_bytes=cfg["replica.fetch.min.bytes"],
            max_bytes=cfg["replica.fetch.max.bytes"], response_max_bytes=cfg["replica.fetch.response.max.bytes"],
            backoff_ms=cfg["replica.fetch.backoff.ms"], request_timeout_ms=cfg["replica.socket.timeout.ms"]),
            broker_epoch=lambda: self.broker_epoch, connector=self.connector)
        return self.replica_fetchers

    def _add_collectors(self, rm: ReplicaManager, groups: GroupCoordinator, iceberg: IcebergTranslator) -> None:
        assert self.metrics is not None and self.socket_server.request_metrics is not None
        purgatories = [rm.produce_purgatory, rm.fetch_purgatory, groups.heartbeat_purgatory,
                       groups.rebalance_purgatory]
        self.metrics.add([RequestCollector(self.socket_server.request_metrics),
                          BrokerCollector(rm, self.socket_server, purgatories, self.cluster,
                                          self.fetch_sessions),
                          GroupLagCollector(groups, rm), IcebergCollector(iceberg)])
        if self.client_telemetry is not None:
            self.metrics.add([self.client_telemetry])

    def _served_listeners(self) -> list[tuple[str, str, int]]:
        return [x for x in self.config.listeners if x[0] not in self.config["controller.listener.names"]]

    def _build_listeners(self) -> list[Listener]:
        """Each listener this broker opens, with its TLS context (``listener.name.<l>.ssl.*``
        over the broker-wide ``ssl.*``) and the endpoint clients on it are given."""
        cfg = self.config
        advertised = {n: (h, p) for n, h, p in cfg.advertised_listeners}
        out = []
        for name, host, port in self._served_listeners():
            protocol = cfg.security_protocols[name]
            props = cfg.listener_props(name)
            context = mapper = None
            if protocol == "SASL_SSL":
                # KIP-684: a SASL_SSL listener asks for client certificates only when its own
                # listener.name.<l>.ssl.client.auth says so; the broker-wide value is for SSL.
                props["ssl.client.auth"] = cfg.listener_overrides.get((name.lower(), ""), {}).get(
                    "ssl.client.auth", "none")
            if protocol in ("SSL", "SASL_SSL"):
                context = tls.server_context(tls.ssl_config(props))
            if protocol == "SSL":
                try:
                    mapper = SslPrincipalMapper(props["ssl.principal.mapping.rules"])
                except ValueError as e:
                    raise ConfigError(f"ssl.principal.mapping.rules: {e}") from None
            if name == self._listener_name:
                endpoint = self.node
            else:
                adv_host, adv_port = advertised.get(name, (host, port))
                endpoint = NodeEndpoint(self.node_id, adv_host, adv_port)
            out.append(Listener(name, protocol, context, mapper, endpoint, self._authenticator(name)))
        return out

    def _producer_ids(self) -> ProducerIdGenerator:
        """Ids unique across the cluster: blocks from ZooKeeper in cluster mode, else the log dir's mark."""
        if self.cluster is not None:
            return ZkProducerIdManager(self.cluster.client, self.node_id)
        return ProducerIdManager(self.config.log_dirs[0])

    async def _expire_delegation_tokens(self) -> None:
        # As Kafka's delegation-token-expiry task: every delegation.token.expiry.check.interval.ms.
        every = self.config["delegation.token.expiry.check.interval.ms"] / 1000
        while True:
            await asyncio.sleep(every)
            try:
                await self.delegation_tokens.remove_expired()
            except Exception:
                log.exception("removing expired delegation tokens failed; will retry")

    async def _isr_expiration(self, rm: ReplicaManager) -> None:
        # As Kafka's isr-expiration task: every half of replica.lag.time.max.ms.
        every = self.config["replica.lag.time.max.ms"] / 2000
        while True:
            await asyncio.sleep(every)
            try:
                rm.maybe_shrink_isrs()
            except Exception:
                log.exception("ISR expiration failed; will retry")

    def _on_registered(self, broker_epoch: int) -> None:
        self.broker_epoch = broker_epoch

    def _on_session_health(self, health: SessionHealth) -> None:
        """A broker whose session expired stops leading: the controller has others lead its
        partitions, and the clients waiting on it must go to them. One whose session resumed
        leads again."""
        rm, cache = self.replica_manager, self.metadata_cache
        assert rm is not None and cache is not None
        if health == SessionHealth.RESUMED:
            changed = rm.unfence_leaderships()
            cache.set_self_fenced(False)
        else:
            quiet_ms = None if health == SessionHealth.EXPIRED else self.config["zookeeper.session.timeout.ms"] // 2
            changed = rm.fence_leaderships(quiet_ms)
            # Out of the cluster as the controller sees it: Metadata stops listing this broker.
            if changed or health == SessionHealth.EXPIRED:
                cache.set_self_fenced(True)
        if changed:
            log.warning("ZooKeeper session %s: %s %d partition(s) here", health.value,
                        "leading again" if health == SessionHealth.RESUMED else "no longer leading", len(changed))

    def _registry_bootstrap(self) -> str:
        """This broker's address on the listener the schema registry's clients use."""
        name = self.config.registry_client_listener()
        ep = next(e for e in self._endpoints() if e.listener == name)
        return f"[{ep.host}]:{ep.port}" if ":" in ep.host else f"{ep.host}:{ep.port}"

    def _endpoints(self) -> list[EndPoint]:
        """The advertised listeners as registered in ZooKeeper, with the ports actually bound."""
        cfg = self.config
        bound = dict(zip([n for n, _, _ in cfg.listeners if n not in cfg["controller.listener.names"]],
                         self.bound_ports))
        return [EndPoint(name, host, port or bound.get(name, port), cfg.security_protocols.get(name, "PLAINTEXT"))
                for name, host, port in cfg.advertised_listeners if name not in cfg["controller.listener.names"]]

    async def shutdown(self) -> None:
        if self.cluster is not None and self.cluster.registration is not None and \
                self.config["controlled.shutdown.enable"]:
            # While still serving: this broker may be the controller that answers it.
            await self.cluster.controlled_shutdown()
        if self.schema_registry is not None:
            # Its clients need this broker while they close: before the listeners.
            await asyncio.get_running_loop().run_in_executor(None, self.schema_registry.close)
        self.socket_server.close()
        if self.metrics is not None:
            await self.metrics.close()
        if self.replica_fetchers is not None:
            await self.replica_fetchers.shutdown()
        for channel in (self.alter_partition, self.marker_channel, self.txn_verifier, self.share_persister,
                        self.partition_ends, self.quorum_links):
            if channel is not None:
                await channel.close()
        if self.iceberg is not None:
            await self.iceberg.close()  # before the logs close: a translation reads them
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        for part in (self.transaction_coordinator, self.share_coordinator, self.log_cleaner, self.log_dir_mover,
                     self.group_coordinator, self.replica_manager, self.timer):
            if part is not None:
                part.shutdown()
        if self.cluster is not None:
            await self.cluster.stop()
        if self.topics is not None:
            await self.topics.drain()  # a topic being created or deleted: its logs all made or all gone
        offline = await asyncio.get_running_loop().run_in_executor(None, self.log_manager.shutdown)
        for d, why in offline.items():
            log.error("log directory %s was not shut down cleanly (%s); the next start recovers it once "
                      "the fault is fixed (space freed on a full disk)", d, why)
        self._stopped.set()

    async def _housekeeping(self) -> None:
        """Retention, time-based flush and checkpoints, each on its own Kafka interval."""
        cfg = self.config
        now_ms = self.clock.milliseconds
        retention_every = cfg["log.retention.check.interval.ms"] / 1000
        checkpoint_every = cfg["log.flush.offset.checkpoint.interval.ms"] / 1000
        flush_every = min(cfg["log.flush.scheduler.interval.ms"], 1000) / 1000
        loop = asyncio.get_running_loop()
        expire_every = cfg["producer.id.expiration.check.interval.ms"] / 1000
        # Kafka's LogManager runs its first retention pass and checkpoint after the initial
        # task delay, then every interval.
        first = cfg["log.initial.task.delay.ms"] / 1000
        next_retention = loop.time() + first
        next_checkpoint = loop.time() + first
        next_expiry = loop.time() + expire_every
        while True:
            await asyncio.sleep(flush_every)
            try:
                await loop.run_in_executor(None, self.log_manager.flush_dirty, now_ms())
                if loop.time() >= next_retention:
                    next_retention = loop.time() + retention_every
                    for i, _ in enumerate(self.log_manager.cleanup_steps(now_ms())):
                        if i % RETENTION_SLICE == RETENTION_SLICE - 1:
                            await asyncio.sleep(0)  # requests are served between slices of logs
                # Segments deleted by retention or DeleteRecords were renamed on the loop; the
                # unlinking, which can take long for large files, runs here.
                doomed = self.log_manager.take_due_deletions(now_ms())
                if doomed:
                    await loop.run_in_executor(None, self.log_manager.remove_files, doomed)
                if loop.time() >= next_expiry:
                    next_expiry = loop.time() + expire_every
                    self.log_manager.remove_expired_producers(now_ms())
                if loop.time() >= next_checkpoint:
                    next_checkpoint = loop.time() + checkpoint_every
                    await loop.run_in_executor(None, self.log_manager.checkpoint)
            except Exception:
                log.exception("housekeeping failed; will retry")

    async def wait_stopped(self) -> None:
        await self._stopped.wait()
