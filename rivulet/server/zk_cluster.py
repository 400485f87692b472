"""A broker's membership of a ZooKeeper-mode cluster (``zookeeper.connect`` set).

At construction, before the broker serves anything, it connects to ZooKeeper, creates
Kafka's top-level znodes and settles the broker's identity as Kafka's KafkaServer does: the
cluster id from /cluster/id, the broker id from the configuration, else from meta.properties,
else generated through /brokers/seqid. ``start`` registers the broker (ephemeral
/brokers/ids/<id>) and starts its candidate controller; ``controlled_shutdown`` asks the
controller to move leaderships away; ``stop`` deregisters. It keeps a view of the live
brokers and the controller id (watches on /brokers/ids and /controller), and writes topic
creations and deletion requests to ZooKeeper for the controller to act on, as Kafka 2.x's
brokers do.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import os
import uuid
from dataclasses import dataclass, replace
from collections.abc import Callable, Collection, Coroutine, Iterable, Mapping, Sequence

from kazoo.client import KazooState
from kazoo.exceptions import KazooException, NodeExistsError

from rivulet.client.connection import PLAINTEXT_CONNECTOR, BrokerConnector
from rivulet.common.config import load_properties
from rivulet.common.logs import cause
from rivulet.common.time import SYSTEM_CLOCK, Clock
from rivulet.controller.channel import ControllerChannelManager, inter_broker_endpoint
from rivulet.controller.controller import ControllerConfig, KafkaController
from rivulet.controller.placement import BrokerRack, assign_replicas_to_brokers
from rivulet.controller.zk_client import BrokerIdInUseError, KafkaZkClient, Watcher, ZkBridge
from rivulet.controller.zk_data import (
    ACL_CHANGE_PATHS, BROKER_CONFIG_ENTITY, DEFAULT_ENTITY, GROUP_CONFIG_ENTITY, BrokerRegistration, ConfigChange,
    EndPoint, TopicAssignment,
)
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.protocol.messages.controlled_shutdown_request import ControlledShutdownRequest
from rivulet.security.acls import AccessControlEntry, AclBinding, AclChange, ResourcePattern
from rivulet.security.scram import SCRAM_MECHANISM_NAMES
from rivulet.server.config import BrokerConfig, ConfigError
from rivulet.server.delegation_tokens import TokenInformation
from rivulet.server.dynamic_config import MIN_ISR
from rivulet.server.features import FinalizedFeatures
from rivulet.storage.checkpoints import random_kafka_uuid

CLIENT_METRICS = "client-metrics"  # Kafka's config entity type for KIP-714 subscriptions

log = logging.getLogger(__name__)

META_PROPERTIES = "meta.properties"
# Past the session timeout, how long a registration waits for ZooKeeper to expire the old
# session that holds this broker's id (ZooKeeper checks expiries once per tick).
REGISTRATION_WAIT_MARGIN_S = 5.0


def _stored_identity(log_dirs: list[str]) -> tuple[int | None, str | None]:
    """The broker id and cluster id a previous start wrote into the log dirs' meta.properties."""
    for d in log_dirs:
        path = os.path.join(d, META_PROPERTIES)
        if os.path.exists(path):
            props = load_properties(path)
            stored = props.get("broker.id", props.get("node.id"))
            return (int(stored) if stored is not None else None), props.get("cluster.id")
    return None, None


def _log_failure(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("reading the cluster from ZooKeeper failed: %s", cause(task.exception()))


def _ignore(_name: str, _configs: dict[str, str]) -> object:
    return None


def _altered(change: ConfigChange, old: Mapping[str, str], new: Mapping[str, str]) -> frozenset[str]:
    """The configs a change altered: as its writer named them, else those whose value moved."""
    if change.altered is not None:
        return change.altered
    return frozenset(n for n in old.keys() | new.keys() if old.get(n) != new.get(n))


def _broker_entity(level: str) -> str:
    """A level of dynamic broker configs ("" the cluster default, else a broker id) as its znode's name."""
    return DEFAULT_ENTITY if level == "" else level


class SessionHealth(enum.Enum):
    """What a broker knows of its ZooKeeper session, for its leaderships."""

    EXPIRED = "expired"  # ZooKeeper said so: the controller treats this broker as dead
    PRESUMED_EXPIRED = "presumed expired"  # no contact for the session timeout: it has expired there
    RESUMED = "resumed"  # reconnected within the session: nothing was taken away


@dataclass(frozen=True)
class ClusterChangeListeners:
    """Who is told of what ZooKeeper's watches and change notifications bring, from ``start``."""

    topic_config: Callable[[str, dict[str, str]], object] = _ignore  # new topics and their changes
    # dynamic broker configs: the cluster default ("") or this broker's own (its id)
    broker_config: Callable[[str, dict[str, str]], object] = _ignore
    user_config: Callable[[str, dict[str, str]], object] = _ignore  # SCRAM credentials
    client_metrics: Callable[[str, dict[str, str]], object] = _ignore  # KIP-714 subscriptions
    group_config: Callable[[str, dict[str, str]], object] = _ignore
    acls: Callable[[ResourcePattern, set[AccessControlEntry]], object] = lambda _p, _e: None
    features: Callable[[FinalizedFeatures], object] = lambda _f: None  # /feature changed
    # a delegation token created, renewed or expired (None: removed)
    delegation_token: Callable[[str, TokenInformation | None], object] = lambda _i, _t: None
    # The session expired, is presumed expired (out of reach for its timeout), or resumed.
    session_health: Callable[[SessionHealth], object] = lambda _h: None


class ZkClusterMember:
    def __init__(self, config: BrokerConfig, clock: Clock = SYSTEM_CLOCK,
                 connector: BrokerConnector = PLAINTEXT_CONNECTOR) -> None:
        """``connector``: how this broker reaches the others (the inter-broker listener's TLS)."""
        self.config = config
        self.connector = connector
        self.clock = clock
        self.listener = config.inter_broker_listener
        self.client = KafkaZkClient(config["zookeeper.connect"], config["zookeeper.session.timeout.ms"],
                                    config["zookeeper.connection.timeout.ms"])
        # Blocking, but at construction: the broker's loop serves nothing yet.
        self.client.start()
        try:
            self.client.create_top_level_paths()
            self.broker_id, self.cluster_id = self._resolve_identity()
            # Every topic's config overrides, before a replica is made; kept current by watches.
            self._last_change = max((n for n, _ in self.client.get_config_changes()), default="")
            self.topic_configs: dict[str, dict[str, str]] = {
                t: self.client.get_entity_config("topics", t) for t in self.client.get_all_topics()}
            # Users' configs (their SCRAM credentials), read before any listener authenticates.
            self.user_configs: dict[str, dict[str, str]] = {
                u: self.client.get_entity_config("users", u) for u in self.client.get_entity_names("users")}
            # KIP-714 subscriptions (/config/client-metrics/<name>), before any client asks for one.
            self.client_metrics: dict[str, dict[str, str]] = {
                n: self.client.get_entity_config(CLIENT_METRICS, n) for n in self.client.get_entity_names(CLIENT_METRICS)}
            # The dynamic broker configs (cluster default and this broker's), as last read or written.
            self.broker_configs: dict[str, dict[str, str]] = {}
            # Groups' configs, kept current by their change notifications.
            self.group_configs: dict[str, dict[str, str]] = {
                g: self.client.get_entity_config(GROUP_CONFIG_ENTITY, g)
                for g in self.client.get_entity_names(GROUP_CONFIG_ENTITY)}
            # ACLs (Kafka's ZooKeeper-mode authorizer), kept current by their change notifications.
            self.client.create_acl_paths()
            self._last_acl_change = {path: max((n for n, _ in self.client.get_acl_changes(path)), default="")
                                     for path in ACL_CHANGE_PATHS}
            self.acls = self.client.get_all_acls()
            # Delegation tokens, kept current by their change notifications.
            self._last_token_change = max((n for n, _ in self.client.get_token_changes()), default="")
            self.delegation_tokens = [t for t in (self._read_token(i) for i in self.client.get_delegation_token_ids())
                                      if t is not None]
        except BaseException:
            self.client.close()
            raise
        self.bridge: ZkBridge | None = None
        self.controller: KafkaController | None = None
        self.registration: BrokerRegistration | None = None
        self.broker_epoch = -1
        self._brokers: dict[int, BrokerRegistration] = {}
        self._controller_id = -1
        self._session_lost = False
        self._on_registered: Callable[[int], object] = lambda _epoch: None
        self._presumed_expiry: asyncio.TimerHandle | None = None
        self._presumed_expired = False
        self._watchers: dict[str, Watcher] = {}
        self.changes = ClusterChangeListeners()

    def _resolve_identity(self) -> tuple[int, str]:
        cfg = self.config
        stored_id, stored_cluster = _stored_identity(cfg.log_dirs)
        cluster_id = self.client.get_or_create_cluster_id(stored_cluster or cfg["cluster.id"] or random_kafka_uuid())
        if stored_cluster is not None and stored_cluster != cluster_id:
            raise ConfigError(f"The Cluster ID {cluster_id} doesn't match stored clusterId {stored_cluster} in "
                              "meta.properties. The broker is trying to join the wrong cluster. Configured "
                              "zookeeper.connect may be wrong.")
        configured = cfg.node_id if cfg.is_set("broker.id") or cfg.is_set("node.id") else -1
        max_reserved = cfg["reserved.broker.max.id"]
        if configured >= 0:
            if cfg["broker.id.generation.enable"] and configured > max_reserved:
                raise ConfigError(f"broker.id must be greater than or equal to -1 and not greater than "
                                  f"reserved.broker.max.id ({max_reserved})")
            if stored_id is not None and stored_id != configured:
                raise ConfigError(f"Configured broker.id {configured} doesn't match stored broker.id "
                                  f"Some({stored_id}) in meta.properties.")
            return configured, cluster_id
        if stored_id is not None:
            return stored_id, cluster_id
        if not cfg["broker.id.generation.enable"]:
            raise ConfigError("broker.id is required when broker.id.generation.enable is false")
        generated = self.client.generate_broker_sequence_id() + max_reserved
        log.info("generated broker id %d", generated)
        return generated, cluster_id

    # ------------------------------------------------------------ lifecycle
    def prepare(self, elr_enabled: Callable[[], bool]) -> KafkaController:
        """Build the bridge and this broker's candidate controller (on the running loop, before
        the request handlers that reach the controller are built); ``start`` starts them.
        ``elr_enabled``: whether eligible.leader.replicas.version 1 is finalized."""
        cfg = self.config
        bridge = self.bridge = ZkBridge(self.client)
        self.controller = KafkaController(
            ControllerConfig(self.broker_id, cfg["unclean.leader.election.enable"], cfg["delete.topic.enable"],
                             self.listener, cfg["auto.leader.rebalance.enable"],
                             cfg["leader.imbalance.check.interval.seconds"],
                             cfg["leader.imbalance.per.broker.percentage"], cfg["min.insync.replicas"]),
            bridge, lambda: ControllerChannelManager(self.broker_id, self.listener, cfg["controller.socket.timeout.ms"],
                                                     connector=self.connector),
            elr_enabled, self.clock)
        return self.controller

    async def start(self, endpoints: list[EndPoint], on_registered: Callable[[int], object],
                    changes: ClusterChangeListeners, supported_features: Mapping[str, tuple[int, int]],
                    clean_start: bool) -> None:
        """Register this broker and read the cluster (brokers, controller, topics' configs, ACLs),
        before the listeners serve anyone, as Kafka's KafkaServer registers before it processes
        requests; ``start_controller`` then starts its candidate controller. ``on_registered``
        gets the broker epoch of each registration (again after a lost session); ``changes`` is
        told of what the watches armed here bring. The registration carries the
        ``supported_features``, which an UpdateFeatures on any broker checks, and ``clean_start``:
        whether every log dir was shut down cleanly before this process (KIP-966)."""
        self._on_registered = on_registered
        self.changes = changes
        assert self.bridge is not None and self.controller is not None, "prepare() first"
        # The inter-broker listener first: where the controller and followers reach this broker.
        endpoints = sorted(endpoints, key=lambda e: e.listener != self.listener)
        self.registration = BrokerRegistration(self.broker_id, tuple(endpoints), self.config["broker.rack"],
                                               timestamp_ms=self.clock.milliseconds(),
                                               features=dict(supported_features), clean_start=clean_start)
        await self._register()
        # Later registrations of this process (a new session) lost no log: they vouch for it.
        self.registration = replace(self.registration, clean_start=True)
        self.bridge.on_state(self._on_session_state)
        await self._read_cluster()

    async def _read_cluster(self) -> None:
        """Read the cluster and arm every watch: at start, and again whenever the connection
        comes back, as Kafka's brokers re-read on a new session. kazoo keeps no watch over a
        lost connection (it fires them all then, and a re-read that fails, as every one does
        when the session expired, leaves its watch unarmed); what changed meanwhile is read here."""
        await self.refresh_brokers()
        await self._refresh_controller()
        await self._watch_topics()
        await self._on_config_changes()
        for path in ACL_CHANGE_PATHS:
            await self._on_acl_changes(path)
        await self._on_feature_change()
        await self._on_token_changes()

    def _watcher(self, key: str, event: Callable[[], Coroutine[object, object, None]]) -> Watcher:
        """The one watcher of ``key``: kazoo keeps a path's watchers in a set, so arming it again
        (after a reconnection, beside the re-read its firing started) never doubles its events."""
        assert self.bridge is not None
        watcher = self._watchers.get(key)
        if watcher is None:
            watcher = self._watchers[key] = self.bridge.on_loop(lambda: self._spawn(event()))
        return watcher

    def start_controller(self) -> None:
        """Once the listeners serve: the controller's first requests go to this broker too."""
        assert self.controller is not None, "prepare() first"
        self.controller.startup()

    async def _register(self) -> None:
        assert self.bridge is not None and self.registration is not None
        # An earlier life of this broker, killed less than a session ago, may still hold the
        # znode: wait for ZooKeeper to expire it rather than fail (a supervisor need not retry).
        wait_s = self.config["zookeeper.session.timeout.ms"] / 1000 + REGISTRATION_WAIT_MARGIN_S
        self.broker_epoch = await self.bridge.run(self.client.register_broker, self.registration, wait_s)
        self._on_registered(self.broker_epoch)
        log.info("registered broker %d at %s (broker epoch %d)", self.broker_id,
                 ", ".join(e.connection_string for e in self.registration.endpoints), self.broker_epoch)

    def _on_session_state(self, state: KazooState) -> None:
        self._watch_suspension(state)
        if state == KazooState.LOST:
            self._session_lost = True
            self._presumed_expired = False
            log.warning("the ZooKeeper session expired: broker %d is unregistered until it reconnects", self.broker_id)
            self.changes.session_health(SessionHealth.EXPIRED)
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            asyncio.get_running_loop().create_task(self._after_new_session())
        elif state == KazooState.CONNECTED:
            self._spawn(self._read_cluster())
            if self._presumed_expired:
                self._presumed_expired = False
                log.warning("broker %d reconnected to ZooKeeper within its session: it leads its partitions again",
                            self.broker_id)
                self.changes.session_health(SessionHealth.RESUMED)

    def _watch_suspension(self, state: KazooState) -> None:
        """A broker cut off from ZooKeeper learns that its session expired only when it gets
        through again; the others have moved its leaderships long before. kazoo suspends the
        session after at least a third of the session timeout without an answer, so two
        thirds later the server has gone the full timeout without hearing from this broker and
        expired the session: from then on it is presumed expired."""
        if self._presumed_expiry is not None:
            self._presumed_expiry.cancel()
            self._presumed_expiry = None
        if state == KazooState.SUSPENDED and not self._session_lost:
            delay = self.config["zookeeper.session.timeout.ms"] * 2 / 3 / 1000
            self._presumed_expiry = asyncio.get_running_loop().call_later(delay, self._presume_expired)

    def _presume_expired(self) -> None:
        self._presumed_expiry = None
        self._presumed_expired = True
        log.warning("broker %d has not reached ZooKeeper for its session timeout: its session has expired there, "
                    "so it stops leading partitions whose followers are cut off too", self.broker_id)
        self.changes.session_health(SessionHealth.PRESUMED_EXPIRED)

    async def _after_new_session(self) -> None:
        try:
            await self._register()
            await self._read_cluster()
        except (KazooException, BrokerIdInUseError) as e:
            # Expected when ZooKeeper goes again (the new session expired or was cut): one line.
            log.warning("re-registration after a new ZooKeeper session failed: %s", cause(e))
        except Exception:
            log.exception("re-registration after a new ZooKeeper session failed")

    async def refresh_brokers(self, watch: bool = True) -> None:
        """Read the live brokers again; ``watch`` re-arms the watch that calls this on a change
        (a request that only wants a current view leaves the armed one alone)."""
        assert self.bridge is not None
        watcher = self._watcher("brokers", self.refresh_brokers) if watch else None
        self._brokers = await self.bridge.run(self.client.get_all_brokers, watcher)

    async def _watch_topics(self) -> None:
        """New topics: read their configs as soon as they appear, before the controller's
        LeaderAndIsr makes their replicas here (it reads and writes more first)."""
        assert self.bridge is not None
        topics = await self.bridge.run(self.client.get_all_topics, self._watcher("topics", self._watch_topics))
        for t in topics:
            if t not in self.topic_configs:
                self._set_topic_config(t, await self.bridge.run(self.client.get_entity_config, "topics", t))
        for gone in set(self.topic_configs) - set(topics):
            del self.topic_configs[gone]

    async def _on_config_changes(self) -> None:
        """Kafka's config change notifications: re-read each entity named after the last one seen."""
        assert self.bridge is not None
        changes = await self.bridge.run(self.client.get_config_changes,
                                        self._watcher("config changes", self._on_config_changes))
        for name, change in changes:
            if name <= self._last_change:
                continue
            self._last_change = name
            entity_type, _, entity_name = change.entity_path.partition("/")
            if entity_type == "topics":
                old = self.topic_configs.get(entity_name, {})
                configs = await self.bridge.run(self.client.get_entity_config, "topics", entity_name)
                self._set_topic_config(entity_name, configs)
                if MIN_ISR in _altered(change, old, configs):
                    self._min_isr_altered(entity_name)
            elif entity_type == BROKER_CONFIG_ENTITY and entity_name in (DEFAULT_ENTITY, str(self.broker_id)):
                old = self.broker_configs.get(entity_name, {})
                configs = self.broker_configs[entity_name] = await self.bridge.run(
                    self.client.get_entity_config, BROKER_CONFIG_ENTITY, entity_name)
                self.changes.broker_config("" if entity_name == DEFAULT_ENTITY else entity_name, configs)
                if entity_name == DEFAULT_ENTITY and MIN_ISR in _altered(change, old, configs):
                    self._min_isr_altered(None)
            elif entity_type == "users" and "/" not in entity_name:
                configs = await self.bridge.run(self.client.get_entity_config, "users", entity_name)
                self.user_configs[entity_name] = configs
                self.changes.user_config(entity_name, configs)
            elif entity_type == CLIENT_METRICS:
                configs = await self.bridge.run(self.client.get_entity_config, CLIENT_METRICS, entity_name)
                self.client_metrics[entity_name] = configs
                self.changes.client_metrics(entity_name, configs)
            elif entity_type == GROUP_CONFIG_ENTITY:
                configs = await self.bridge.run(self.client.get_entity_config, GROUP_CONFIG_ENTITY, entity_name)
                self.group_configs[entity_name] = configs
                self.changes.group_config(entity_name, configs)

    async def read_topic_configs(self, topics: Iterable[str]) -> None:
        """The topics' configs read from ZooKeeper now, as Kafka's brokers read
        /config/topics/<t> when they make a replica's log: the watch that tells this broker of
        a new topic can land after the controller's LeaderAndIsr. A read that fails (bounded by
        the session timeout) leaves the configs known so far, with a warning."""
        assert self.bridge is not None
        timeout = self.config["zookeeper.session.timeout.ms"] / 1000
        for t in topics:
            try:
                configs = await asyncio.wait_for(self.bridge.run(self.client.get_entity_config, "topics", t), timeout)
            except (KazooException, TimeoutError) as e:
                log.warning("topic %s: reading its config from ZooKeeper failed (%s); its new replicas use the "
                            "configs known so far", t, cause(e))
                continue
            self._set_topic_config(t, configs)

    def _set_topic_config(self, name: str, configs: dict[str, str]) -> None:
        if self.topic_configs.get(name) != configs:
            self.topic_configs[name] = configs
            self.changes.topic_config(name, configs)

    async def _on_acl_changes(self, change_path: str) -> None:
        """Kafka's ACL change notifications: re-read each pattern named after the last one seen."""
        assert self.bridge is not None
        changes = await self.bridge.run(self.client.get_acl_changes, change_path, self._watcher(
            change_path, lambda: self._on_acl_changes(change_path)))
        for name, pattern in changes:
            if name <= self._last_acl_change[change_path]:
                continue
            self._last_acl_change[change_path] = name
            entries, _version = await self.bridge.run(self.client.get_acls, pattern)
            self._set_acls(pattern, entries)

    def _set_acls(self, pattern: ResourcePattern, entries: set[AccessControlEntry]) -> None:
        if entries:
            self.acls[pattern] = entries
        else:
            self.acls.pop(pattern, None)
        self.changes.acls(pattern, entries)

    def _read_token(self, token_id: str) -> TokenInformation | None:
        data = self.client.get_delegation_token(token_id)
        try:
            return None if data is None else TokenInformation.from_json(token_id, json.loads(data))
        except (ValueError, KeyError, TypeError) as e:
            log.warning("ignoring unreadable delegation token %s: %s", token_id, e)
            return None

    async def _on_token_changes(self) -> None:
        assert self.bridge is not None
        changes = await self.bridge.run(self.client.get_token_changes,
                                        self.bridge.on_loop(lambda: self._spawn(self._on_token_changes())))
        for name, token_id in changes:
            if name <= self._last_token_change:
                continue
            self._last_token_change = name
            self.changes.delegation_token(token_id, await self.bridge.run(self._read_token, token_id))

    def load_delegation_tokens(self) -> list[TokenInformation]:
        return list(self.delegation_tokens)

    async def store_delegation_token(self, token: TokenInformation) -> None:
        """A token into /delegation_token/tokens/<id>, with the change notification that makes
        every broker re-read it (a ``TokenStore``)."""
        assert self.bridge is not None
        await self.bridge.run(self.client.set_delegation_token, token.token_id, json.dumps(token.to_json()).encode())

    async def remove_delegation_token(self, token_id: str) -> None:
        assert self.bridge is not None
        await self.bridge.run(self.client.set_delegation_token, token_id, None)

    async def _on_feature_change(self) -> None:
        assert self.bridge is not None
        levels, version = await self.bridge.run(self.client.get_features,
                                                self.bridge.on_loop(lambda: self._spawn(self._on_feature_change())))
        self.changes.features(FinalizedFeatures(levels, version))

    def init_finalized_features(self, defaults: Mapping[str, int]) -> FinalizedFeatures:
        """/feature's levels, created with ``defaults`` by the first broker of a new cluster (a
        ``FeatureStore``; blocking, at construction); its znode version is the epoch."""
        levels, version = self.client.get_or_create_features(dict(defaults))
        return FinalizedFeatures(levels, version)

    async def read_finalized_features(self) -> FinalizedFeatures:
        assert self.bridge is not None
        levels, version = await self.bridge.run(self.client.get_features)
        return FinalizedFeatures(levels, version)

    async def write_finalized_features(self, levels: Mapping[str, int], expected_epoch: int
                                       ) -> FinalizedFeatures | None:
        assert self.bridge is not None
        version = await self.bridge.run(self.client.set_features, dict(levels), expected_epoch)
        return None if version is None else FinalizedFeatures(dict(levels), version)

    def supported_features(self) -> dict[int, dict[str, tuple[int, int]]]:
        """Each live broker's supported features, as registered."""
        return {b: dict(r.features) for b, r in self._brokers.items()}

    def load_acls(self) -> list[AclBinding]:
        return [AclBinding(p, e) for p, entries in self.acls.items() for e in entries]

    async def store_acls(self, changes: Mapping[ResourcePattern, AclChange], bindings: Sequence[AclBinding]) -> None:
        """Each pattern's change written to its znode, with the notification that every broker
        follows (an ``AclStore``); this broker takes what ZooKeeper then holds."""
        assert self.bridge is not None
        for pattern, (added, removed) in changes.items():
            self._set_acls(pattern, await self.bridge.run(self.client.update_acls, pattern, added, removed))

    def load_scram_credentials(self) -> dict[str, dict[str, str]]:
        return {u: dict(c) for u, c in self.user_configs.items()}

    async def store_scram_credentials(self, user: str, credentials: Mapping[str, str]) -> None:
        """A user's SCRAM credentials into /config/users/<user> (its other entries kept), with
        the change notification that makes every broker re-read them (a ``ScramStore``)."""
        assert self.bridge is not None
        await self.bridge.run(self.client.update_entity_config, "users", user, SCRAM_MECHANISM_NAMES,
                              dict(credentials))

    def load_client_metrics(self) -> dict[str, dict[str, str]]:
        return {n: dict(c) for n, c in self.client_metrics.items() if c}

    def store_client_metrics(self, name: str, configs: Mapping[str, str]) -> None:
        """A subscription into /config/client-metrics/<name>, with the change notification that
        makes every broker re-read it (a ``ClientMetricsStore``); in force here at once."""
        assert self.bridge is not None
        self.client_metrics[name] = dict(configs)
        self._spawn(self.bridge.run(self.client.set_entity_config, CLIENT_METRICS, name, dict(configs)))
    def load_group_configs(self) -> dict[str, dict[str, str]]:
        return {g: dict(c) for g, c in self.group_configs.items() if c}

    async def store_group_config(self, group_id: str, configs: Mapping[str, str]) -> None:
        """A group's configs into /config/groups/<group>, with the change notification that
        makes every broker re-read them (a ``GroupConfigStore``)."""
        assert self.bridge is not None
        self.group_configs[group_id] = dict(configs)
        await self.bridge.run(self.client.set_entity_config, GROUP_CONFIG_ENTITY, group_id, dict(configs))

    async def read_group_config(self, group_id: str) -> dict[str, str]:
        """/config/groups/<group> read now; the configs known so far when the read fails
        (bounded by the session timeout), with a warning."""
        assert self.bridge is not None
        try:
            configs = await asyncio.wait_for(self.bridge.run(
                self.client.get_entity_config, GROUP_CONFIG_ENTITY, group_id),
                self.config["zookeeper.session.timeout.ms"] / 1000)
        except (KazooException, TimeoutError) as e:
            log.warning("group %s: reading its config from ZooKeeper failed (%s); using the configs known so far",
                        group_id, cause(e))
            return dict(self.group_configs.get(group_id, {}))
        self.group_configs[group_id] = configs
        return dict(configs)

    def write_topic_config(self, name: str, configs: dict[str, str]) -> None:
        """Persist a topic's overrides with a change notification for the other brokers, naming
        the configs whose value changed."""
        assert self.bridge is not None
        old = self.topic_configs.get(name, {})
        altered = {n for n in old.keys() | configs.keys() if old.get(n) != configs.get(n)}
        self.topic_configs[name] = dict(configs)
        self._spawn(self.bridge.run(self.client.set_entity_config, "topics", name, dict(configs), altered))

    def _min_isr_altered(self, topic: str | None) -> None:
        """A notification altered a topic's min.insync.replicas (or, None, the cluster-level
        one; the writer's own notification names what it altered too): the controller, when
        it is this broker's, clears the eligible leader replicas it guards."""
        if self.controller is not None:
            self.controller.min_isr_altered(topic)

    # ------------------------------------------------------------ dynamic broker configs (SharedBrokerConfigs)
    def load_broker_level(self, level: str) -> dict[str, str] | None:
        """/config/brokers/<default> or /config/brokers/<id>, read now (blocking, at construction)."""
        configs = self.client.find_entity_config(BROKER_CONFIG_ENTITY, _broker_entity(level))
        if configs is not None:
            self.broker_configs[_broker_entity(level)] = dict(configs)
        return configs

    def init_broker_level(self, level: str, configs: dict[str, str]) -> dict[str, str]:
        """Create the level's znode unless another broker did first (blocking, at construction)."""
        held = self.client.create_entity_config(BROKER_CONFIG_ENTITY, _broker_entity(level), dict(configs))
        self.broker_configs[_broker_entity(level)] = dict(held)
        return held

    def write_broker_level(self, level: str, configs: dict[str, str], altered: Collection[str]) -> None:
        """A level into its znode with a change notification naming the ``altered`` configs,
        which every broker follows; in force here already. Blocking before ``prepare`` (at
        construction), else written in the background as topic configs are."""
        entity = _broker_entity(level)
        self.broker_configs[entity] = dict(configs)
        if self.bridge is None:
            self.client.set_entity_config(BROKER_CONFIG_ENTITY, entity, dict(configs), sorted(altered))
        else:
            self._spawn(self.bridge.run(self.client.set_entity_config, BROKER_CONFIG_ENTITY, entity, dict(configs),
                                        sorted(altered)))

    async def _refresh_controller(self) -> None:
        assert self.bridge is not None
        cid = await self.bridge.run(self.client.get_controller_id,
                                    self._watcher("controller", self._refresh_controller))
        self._controller_id = -1 if cid is None else cid

    def _spawn(self, coro: Coroutine[object, object, None]) -> None:
        asyncio.get_running_loop().create_task(coro).add_done_callback(_log_failure)

    async def controlled_shutdown(self) -> bool:
        """Ask the controller to move this broker's leaderships away (Kafka's controlled shutdown);
        True once it has none left, False after controlled.shutdown.max.retries attempts. An
        attempt fails at once while ZooKeeper is unreachable (no controller can act then), and
        none waits longer than controller.socket.timeout.ms, so that a broker cut off from
        ZooKeeper stops, uncleanly, after about max.retries x retry.backoff.ms."""
        cfg = self.config
        backoff = cfg["controlled.shutdown.retry.backoff.ms"] / 1000
        timeout = cfg["controller.socket.timeout.ms"] / 1000
        for attempt in range(1, cfg["controlled.shutdown.max.retries"] + 1):
            try:
                if not self.client.connected:
                    raise ConnectionError("ZooKeeper is not reachable")
                remaining = await asyncio.wait_for(self._ask_controller_to_shut_down(), timeout)
                if remaining == 0:
                    log.info("controlled shutdown of broker %d succeeded", self.broker_id)
                    return True
                log.info("controlled shutdown attempt %d: %d partition(s) still led here", attempt, remaining)
            except (OSError, ApiError, KazooException, TimeoutError) as e:
                log.info("controlled shutdown attempt %d failed: %s", attempt, cause(e))
            await asyncio.sleep(backoff)
        log.warning("controlled shutdown of broker %d did not complete after %d attempts; stopping uncleanly",
                    self.broker_id, cfg["controlled.shutdown.max.retries"])
        return False

    async def _ask_controller_to_shut_down(self) -> int:
        assert self.bridge is not None
        await self._refresh_controller()
        controller = self._brokers.get(self._controller_id) or await self.bridge.run(
            self.client.get_broker, self._controller_id)
        ep = inter_broker_endpoint(controller, self.listener)
        if ep is None:
            raise ApiError(ErrorCode.NOT_CONTROLLER, "no controller is available")
        conn = await self.connector.connection(ep[0], ep[1], f"broker-{self.broker_id}",
                                               self.config["controller.socket.timeout.ms"]).connect(5.0)
        try:
            resp = await conn.send(ControlledShutdownRequest(broker_id=self.broker_id, broker_epoch=self.broker_epoch))
        finally:
            await conn.close()
        if resp.error_code != ErrorCode.NONE:
            raise ApiError(resp.error_code)
        return len(resp.remaining_partitions)

    async def stop(self) -> None:
        """Resign, deregister and close the session, never waiting on ZooKeeper unbounded: when
        it is unreachable (or does not answer within the session timeout) the session is
        abandoned, which fails every call waiting on it; ZooKeeper then expires the znodes."""
        if self._presumed_expiry is not None:
            self._presumed_expiry.cancel()
        if not self.client.connected:
            await self._abandon_session("ZooKeeper is not reachable")
        try:
            await asyncio.wait_for(self._leave(), self.config["zookeeper.session.timeout.ms"] / 1000)
        except TimeoutError:
            await self._abandon_session("ZooKeeper did not answer within zookeeper.session.timeout.ms")
        if self.bridge is not None:
            await self.bridge.close()
        else:
            self.client.close()

    async def _leave(self) -> None:
        if self.controller is not None:
            await self.controller.shutdown()
        if self.bridge is not None and self.registration is not None and self.client.connected:
            try:
                await self.bridge.run(self.client.deregister_broker, self.broker_id)
            except KazooException as e:
                log.info("deregistering broker %d failed: %s", self.broker_id, cause(e))

    async def _abandon_session(self, why: str) -> None:
        log.warning("%s: closing the session without deregistering broker %d (ZooKeeper expires its "
                    "znodes)", why, self.broker_id)
        await asyncio.get_running_loop().run_in_executor(None, self.client.abandon_session)

    # ------------------------------------------------------------ topic administration
    def assign_replicas(self, num_partitions: int, replication_factor: int,
                        start_partition_id: int = -1) -> dict[int, list[int]]:
        """Placement over the live brokers, rack-aware when they have racks (Kafka's AdminUtils)."""
        return assign_replicas_to_brokers([BrokerRack(b.broker_id, b.rack) for b in self._brokers.values()],
                                          num_partitions, replication_factor, start_partition_id=start_partition_id)

    def live_broker_ids(self) -> set[int]:
        return set(self._brokers)

    async def create_topic(self, name: str, assignment: dict[int, list[int]], configs: dict[str, str]) -> uuid.UUID:
        """Write the topic for the controller to create; TOPIC_ALREADY_EXISTS if it is there."""
        assert self.bridge is not None
        topic_id = uuid.uuid4()
        try:
            await self.bridge.run(self.client.create_topic, TopicAssignment(name, topic_id, assignment), configs)
        except NodeExistsError:
            raise ApiError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.") from None
        return topic_id

    async def topic_assignment(self, name: str) -> TopicAssignment | None:
        assert self.bridge is not None
        return await self.bridge.run(self.client.get_topic_assignment, name)

    async def add_partitions(self, name: str, added: dict[int, list[int]]) -> None:
        """Grow the topic's assignment; the controller, watching it, makes the new partitions."""
        assert self.bridge is not None
        if not await self.bridge.run(self.client.add_topic_partitions, name, added):
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)

    async def topic_exists(self, name: str) -> bool:
        assert self.bridge is not None
        return await self.bridge.run(self.client.get_topic_assignment, name) is not None

    async def delete_topic(self, name: str) -> None:
        """Request the deletion; the controller carries it out."""
        assert self.bridge is not None
        if not await self.topic_exists(name):
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        await self.bridge.run(self.client.request_topic_deletion, name)
