"""Dynamic broker configs: what AlterConfigs and IncrementalAlterConfigs set on a BROKER
resource, as Kafka's DynamicBrokerConfig keeps them.

A config set for this broker (resource name = its node id) wins over one set as the
cluster-wide default (resource name ""), which wins over server.properties. Kafka keeps both
in its metadata log; this single node keeps them in ``dynamic-broker-configs.json`` in its
first log dir, rewritten atomically on every change, so they survive a restart. A ZooKeeper
cluster keeps both levels where ZooKeeper-era Kafka did, /config/brokers/<default> and
/config/brokers/<id> (``SharedBrokerConfigs``, the broker's ``ZkClusterMember``), with a
change notification that every broker follows, so that a cluster-level change reaches them all.

Which configs may change is read from the broker's definitions (``server/config.py``): a
read-only one is refused ("Cannot update these configs dynamically"), a per-broker one is
refused at the cluster-default level, and a name Rivulet does not know is stored as given, as
Kafka stores custom configs. The log.* defaults (and message.max.bytes, compression.type,
min.insync.replicas) take effect at once on every topic without its own override; a
``Reconfigurable`` (the connection limits) is handed its new values, after validating them;
the rest (thread counts, listeners and the like) are recorded and reported, since Rivulet has
nothing to resize or rebind at run time. As in Kafka 4.1+ (KIP-966's eligible leader
replicas, on by default), min.insync.replicas is a cluster-level setting: the broker writes
it at the cluster-default level from server.properties when none is there, refuses it per
broker, and refuses to remove it; topics report it as DYNAMIC_DEFAULT_BROKER_CONFIG.

The client quotas that AlterClientQuotas sets (``server/quotas.py``) are kept in the same
file, under ``client-quotas``: Kafka keeps them beside the dynamic configs too; so are a
single node's ACLs, under ``acls``, and its users' SCRAM credentials, under
``scram-credentials``, its KIP-714 subscriptions (CLIENT_METRICS resources), under
``client-metrics``, its groups' configs, under ``group-configs``, and its finalized feature
levels, under ``finalized-features``, and its delegation tokens, under ``delegation-tokens`` (a
cluster keeps these in ZooKeeper).
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Collection, Mapping, Protocol, Sequence

from rivulet.common.config import (
    AlterConfigOp, AlterConfigOpType, ConfigEntry, ConfigError, ConfigSource, ConfigType, UpdateMode, parse_value)
from rivulet.common.java_hash import java_hash_set_order
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.security.acls import AclBinding, AclChange, ResourcePattern, bindings_from_json, bindings_to_json
from rivulet.server.config import (BROKER_CONFIGS, CORDON_ALL, KAFKA_DYNAMIC_ORDER, BrokerConfig,
                                   cleaner_threads_problem, cordoned_dirs_problem, synonyms_of)
from rivulet.server.delegation_tokens import TokenInformation
from rivulet.server.features import FinalizedFeatures
from rivulet.storage.checkpoints import write_atomic
from rivulet.storage.manager import LogManager

log = logging.getLogger(__name__)

FILE_NAME = "dynamic-broker-configs.json"
CLUSTER_DEFAULT = ""
CLIENT_QUOTAS = "client-quotas"
ACLS = "acls"
SCRAM_CREDENTIALS = "scram-credentials"
CLIENT_METRICS = "client-metrics"
GROUP_CONFIGS = "group-configs"
FINALIZED_FEATURES = "finalized-features"
DELEGATION_TOKENS = "delegation-tokens"

MIN_ISR = "min.insync.replicas"
CLEANER_THREADS = "log.cleaner.threads"
CLEANER_DEDUPE_BUFFER = "log.cleaner.dedupe.buffer.size"
CORDONED_DIRS = "cordoned.log.dirs"
_DYNAMIC_RANK = {name: i for i, name in enumerate(KAFKA_DYNAMIC_ORDER)}


class Reconfigurable(Protocol):
    """A component whose settings change at run time (Kafka's Reconfigurable)."""

    def reconfigurable_configs(self) -> frozenset[str]: ...

    # Any: parsed property values, each of its property's type (common/config.py).
    def validate_reconfiguration(self, values: Mapping[str, Any]) -> None:
        """Raise ConfigError (INVALID_REQUEST) when the parsed values in force would not work, or
        an ApiError with the code Kafka answers for them."""

    def reconfigure(self, values: Mapping[str, Any]) -> None: ...


def _java_set(names: list[str]) -> str:
    return f"[{', '.join(java_hash_set_order(names))}]"


def _refused_reconfiguration(reason: str) -> ApiError:
    """How Kafka's broker words a value a reconfigurable component refuses (its exception
    wrapped in a ConfigException, then in INVALID_REQUEST)."""
    return ApiError(ErrorCode.INVALID_REQUEST, "Invalid value org.apache.kafka.common.config.ConfigException: "
                    f"{reason} for configuration Invalid dynamic configuration")


class SharedBrokerConfigs(Protocol):
    """Where a cluster keeps its dynamic broker configs for every broker: a level is "" (the
    cluster default) or a broker's id."""

    def load_broker_level(self, level: str) -> dict[str, str] | None:
        """The level as the cluster holds it; None when it was never written."""

    def init_broker_level(self, level: str, configs: dict[str, str]) -> dict[str, str]:
        """Write ``configs`` unless the level exists (another broker first); what it holds then."""

    def write_broker_level(self, level: str, configs: dict[str, str], altered: Collection[str]) -> None:
        """Replace the level for every broker, naming the configs the change ``altered``."""


class ThreadCounts:
    """Kafka's thread pools resize at run time within half and double of their current sizes;
    Rivulet has no such pools to resize, but refuses the same values in the same words."""

    POOLS = frozenset({"num.io.threads", "num.network.threads", "num.replica.fetchers",
                       "num.recovery.threads.per.data.dir", "background.threads"})
    CLEANER = CLEANER_THREADS

    def __init__(self) -> None:
        self.current: dict[str, int] = {}

    def reconfigurable_configs(self) -> frozenset[str]:
        return self.POOLS | {self.CLEANER}

    def validate_reconfiguration(self, values: Mapping[str, Any]) -> None:
        for name in sorted(values):
            new, old = values[name], self.current[name]
            if new == old:
                continue
            if name == self.CLEANER:
                if new < old // 2:
                    raise _refused_reconfiguration(f"Log cleaner threads cannot be reduced to less than half "
                                                   f"the current value {old}")
                if new > old * 2:
                    raise _refused_reconfiguration(f"Log cleaner threads cannot be increased to more than double "
                                                   f"the current value {old}")
                continue
            failed = f"Dynamic thread count update validation failed for {name}={new}, value should "
            if new < old // 2:
                raise _refused_reconfiguration(failed + f"be at least half the current value {old}")
            if new > old * 2:
                raise _refused_reconfiguration(failed + f"not be greater than double the current value {old}")

    def reconfigure(self, values: Mapping[str, Any]) -> None:
        self.current = dict(values)


class CordonedLogDirs:
    """cordoned.log.dirs (KIP-1066) into the log manager, at start-up and when it changes:
    ``*`` cordons every dir, other entries (checked against log.dirs) name one each."""

    def __init__(self, log_manager: LogManager, log_dirs: Sequence[str]) -> None:
        self.log_manager = log_manager
        self.log_dirs = list(log_dirs)

    def reconfigurable_configs(self) -> frozenset[str]:
        return frozenset({CORDONED_DIRS})

    def validate_reconfiguration(self, values: Mapping[str, Any]) -> None:
        pass  # DynamicBrokerConfig.validate applies Kafka's rule first, in its words

    def reconfigure(self, values: Mapping[str, Any]) -> None:
        cordoned = values[CORDONED_DIRS] or ()
        self.log_manager.cordon(self.log_dirs if CORDON_ALL in cordoned else cordoned)


class DynamicBrokerConfig:
    """The dynamic configs of one broker: ``levels[""]`` (cluster default) and ``levels[id]``."""

    def __init__(self, log_dir: str, node_id: int, static: Mapping[str, Any] | None = None,
                 shared: SharedBrokerConfigs | None = None) -> None:
        """``shared``: a cluster's store of both levels (ZooKeeper), read here and kept current
        by ``apply_shared``; without it both live in the file."""
        self.path = os.path.join(log_dir, FILE_NAME)
        self.node_id = str(node_id)
        self.static: Mapping[str, Any] = static or {}  # parsed server.properties values
        self.shared = shared
        self._reconfigurables: list[Reconfigurable] = []
        self.levels: dict[str, dict[str, str]] = {CLUSTER_DEFAULT: {}, self.node_id: {}}
        self.client_quotas: list[tuple[dict[str, str | None], dict[str, float]]] = []
        self.acls: list[AclBinding] = []
        self.scram_credentials: dict[str, dict[str, str]] = {}
        self.client_metrics: dict[str, dict[str, str]] = {}
        self.group_configs: dict[str, dict[str, str]] = {}
        self.finalized_features: FinalizedFeatures | None = None
        self.delegation_tokens: dict[str, TokenInformation] = {}
        try:
            with open(self.path, encoding="utf-8") as f:
                saved = json.load(f)
            for level in (CLUSTER_DEFAULT, self.node_id):
                self.levels[level] = {str(k): str(v) for k, v in saved.get(level, {}).items()}
            self.client_quotas = [({str(t): None if n is None else str(n) for t, n in q["entity"].items()},
                                   {str(k): float(v) for k, v in q["quotas"].items()})
                                  for q in saved.get(CLIENT_QUOTAS, [])]
            self.acls = bindings_from_json(saved.get(ACLS, []))
            self.scram_credentials = {str(u): {str(m): str(c) for m, c in creds.items()}
                                      for u, creds in saved.get(SCRAM_CREDENTIALS, {}).items()}
            self.client_metrics = {str(n): {str(k): str(v) for k, v in c.items()}
                                   for n, c in saved.get(CLIENT_METRICS, {}).items()}
            self.group_configs = {str(g): {str(n): str(v) for n, v in configs.items()}
                                  for g, configs in saved.get(GROUP_CONFIGS, {}).items()}
            if FINALIZED_FEATURES in saved:
                features = saved[FINALIZED_FEATURES]
                self.finalized_features = FinalizedFeatures(
                    {str(n): int(v) for n, v in features["levels"].items()}, int(features["epoch"]))
            self.delegation_tokens = {str(i): TokenInformation.from_json(str(i), t)
                                      for i, t in saved.get(DELEGATION_TOKENS, {}).items()}
        except FileNotFoundError:
            pass
        except (ValueError, AttributeError, KeyError, TypeError) as e:  # losing them beats refusing to start
            log.warning("ignoring unreadable %s: %s", self.path, e)
        if shared is not None:
            self._join_cluster(shared)

    def _static_min_isr(self) -> str:
        return str(self.static.get(MIN_ISR, BROKER_CONFIGS[MIN_ISR].default))

    def _join_cluster(self, shared: SharedBrokerConfigs) -> None:
        """Both levels from the cluster's store (blocking, at construction). The first broker
        of a cluster that kept them in files seeds the cluster default from its file (with
        min.insync.replicas, as ``ensure_cluster_min_isr``); a broker whose file default differs
        from what the cluster then holds keeps its own values in force as its per-broker
        overrides (but min.insync.replicas, cluster-level only), seeding its level once. The
        file keeps no levels after that."""
        from_file = {level: dict(configs) for level, configs in self.levels.items()}
        default = shared.load_broker_level(CLUSTER_DEFAULT)
        if default is None:
            default = shared.init_broker_level(CLUSTER_DEFAULT, {MIN_ISR: self._static_min_isr(),
                                                                 **from_file[CLUSTER_DEFAULT]})
        own = shared.load_broker_level(self.node_id)
        if own is None:
            kept = {n: v for n, v in from_file[CLUSTER_DEFAULT].items() if n != MIN_ISR and default.get(n) != v}
            if kept:
                log.info("keeping this broker's cluster-default values %s, which the cluster default does not "
                         "hold, in force as its own dynamic configs", kept)
            seed = {**kept, **from_file[self.node_id]}
            seed.pop(MIN_ISR, None)
            own = shared.init_broker_level(self.node_id, seed) if seed else {}
        if MIN_ISR not in default:  # written by another tool: as ensure_cluster_min_isr
            default = {**default, MIN_ISR: self._static_min_isr()}
            shared.write_broker_level(CLUSTER_DEFAULT, default, ())
        if MIN_ISR in own:  # never per broker (ensure_cluster_min_isr)
            own = {n: v for n, v in own.items() if n != MIN_ISR}
            shared.write_broker_level(self.node_id, own, {MIN_ISR})
        self.levels = {CLUSTER_DEFAULT: dict(default), self.node_id: dict(own)}
        if any(from_file.values()):
            self._save()  # the levels leave the file

    def apply_shared(self, level: str, configs: dict[str, str]) -> bool:
        """A level as the cluster's store now holds it (its change notification); False for a
        level that is not this broker's."""
        if level not in (CLUSTER_DEFAULT, self.node_id):
            return False
        self._set_level(level, configs)
        return True

    def ensure_cluster_min_isr(self) -> None:
        """As a Kafka 4.1+ cluster with eligible leader replicas (KIP-966) does: min.insync.replicas
        is a cluster-level dynamic config, written from server.properties when the cluster has
        none yet, and never a per-broker one (ConfigurationControlManager's ELR safety records).
        A cluster's store was seen to at construction (``_join_cluster``)."""
        if self.shared is not None:
            return
        changed = False
        if MIN_ISR not in self.levels[CLUSTER_DEFAULT]:
            self.levels[CLUSTER_DEFAULT][MIN_ISR] = self._static_min_isr()
            changed = True
        if self.levels[self.node_id].pop(MIN_ISR, None) is not None:
            changed = True
        if changed:
            self._save()

    def level(self, resource_name: str, altering: bool = False) -> str:
        """The level a BROKER resource names, refused (INVALID_REQUEST) as Kafka words it: an
        alteration is checked against this node's id, a description may also name the default."""
        if resource_name in (CLUSTER_DEFAULT, self.node_id):
            return resource_name
        if not resource_name.lstrip("-").isdigit():
            raise ApiError(ErrorCode.INVALID_REQUEST, f"{'Node' if altering else 'Broker'} id must be an integer, "
                           f"but it is: {resource_name}")
        expected = self.node_id if altering else f"{self.node_id} or empty string"
        raise ApiError(ErrorCode.INVALID_REQUEST,
                       f"Unexpected broker id, expected {expected}, but received {resource_name}")

    def effective(self) -> dict[str, str]:
        """Dynamic values in force: the broker's own over the cluster default."""
        return {**self.levels[CLUSTER_DEFAULT], **self.levels[self.node_id]}

    def described_levels(self) -> list[tuple[dict[str, str], ConfigSource]]:
        """The two levels, most specific first, with the source DescribeConfigs reports."""
        return [(self.levels[self.node_id], ConfigSource.DYNAMIC_BROKER_CONFIG),
                (self.levels[CLUSTER_DEFAULT], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)]

    def add_reconfigurable(self, r: Reconfigurable) -> None:
        """Hand ``r`` its values in force now, and again whenever one of them changes."""
        self._reconfigurables.append(r)
        r.reconfigure(self._in_force(r, self.effective()))

    def _in_force(self, r: Reconfigurable, effective: Mapping[str, str]) -> dict[str, Any]:
        return {n: BROKER_CONFIGS[n].parse(effective[n]) if n in effective else self.static.get(n)
                for n in r.reconfigurable_configs()}

    def _effective_value(self, effective: Mapping[str, str], name: str) -> Any:
        """``name``'s parsed value once ``effective`` is in force: dynamic, else static, else default."""
        raw = effective.get(name)
        return BROKER_CONFIGS[name].parse(raw) if raw is not None else \
            self.static.get(name, BROKER_CONFIGS[name].default)

    def with_level(self, level: str, configs: dict[str, str]) -> dict[str, str]:
        """The dynamic values in force once ``level`` holds ``configs``."""
        if level == CLUSTER_DEFAULT:
            return {**configs, **self.levels[self.node_id]}
        return {**self.levels[CLUSTER_DEFAULT], **configs}

    def validate(self, configs: dict[str, str], per_broker: bool = True) -> None:
        """Refuse what Kafka 4.3.1 refuses, in its order (DynamicBrokerConfig.validateConfigs):
        read-only configs, values their definitions reject, per-broker configs at the cluster
        level, then values a reconfigurable component cannot take (all INVALID_REQUEST: Kafka's
        broker turns every failed validation of a dynamic broker config into one, KAFKA-13609),
        then, as its controller does, a per-broker min.insync.replicas or the cluster-level one
        removed (INVALID_CONFIG). Kafka names the configs refused as a HashSet prints them, and of
        several bad values the first in its definition order (``KAFKA_DYNAMIC_ORDER``)."""
        static = [n for n in configs if n in BROKER_CONFIGS and not BROKER_CONFIGS[n].dynamic]
        if static:
            raise ApiError(ErrorCode.INVALID_REQUEST, f"Cannot update these configs dynamically: {_java_set(static)}")
        for name in sorted(configs.keys() & _DYNAMIC_RANK.keys(), key=_DYNAMIC_RANK.__getitem__):
            raw = configs[name]  # in Kafka's definition order; a custom config is not parsed
            try:
                BROKER_CONFIGS[name].parse(raw)
            except ConfigError as e:
                raise ApiError(ErrorCode.INVALID_REQUEST, f"Invalid value {raw} for configuration {name}: "
                                 f"{e.reason}") from None
        if not per_broker:
            own = [n for n in configs if n in BROKER_CONFIGS and BROKER_CONFIGS[n].update_mode is UpdateMode.PER_BROKER]
            if own:
                raise ApiError(ErrorCode.INVALID_REQUEST, "Cannot update these configs at default cluster level, "
                                 f"broker id must be specified: {_java_set(own)}")
        effective = self.with_level(self.node_id if per_broker else CLUSTER_DEFAULT, configs)
        if configs.get(CORDONED_DIRS) is not None:
            static_dirs = self.static.get("log.dirs") or self.static.get("log.dir") or ()
            problem = cordoned_dirs_problem(BROKER_CONFIGS[CORDONED_DIRS].parse(configs[CORDONED_DIRS]), static_dirs)
            if problem is not None:
                raise ApiError(ErrorCode.INVALID_REQUEST, problem)
        if CLEANER_THREADS in configs or CLEANER_DEDUPE_BUFFER in configs:
            # Kafka builds the whole KafkaConfig first, its rules before any component's check.
            threads, buffer = (self._effective_value(effective, name) for name in (CLEANER_THREADS, CLEANER_DEDUPE_BUFFER))
            problem = cleaner_threads_problem(threads, buffer)
            if problem is not None:
                raise ApiError(ErrorCode.INVALID_REQUEST, problem if threads < 1 else f"requirement failed: {problem}")
        for r in self._reconfigurables:
            if r.reconfigurable_configs() & configs.keys():
                try:
                    r.validate_reconfiguration(self._in_force(r, effective))
                except ConfigError as e:
                    raise ApiError(ErrorCode.INVALID_REQUEST, str(e)) from None
        if per_broker and MIN_ISR in configs:
            raise ApiError(ErrorCode.INVALID_CONFIG, f"Broker-level {MIN_ISR} cannot be altered while ELR is enabled.")
        if not per_broker and MIN_ISR in self.levels[CLUSTER_DEFAULT] and MIN_ISR not in configs:
            raise ApiError(ErrorCode.INVALID_CONFIG, f"Cluster-level {MIN_ISR} cannot be removed while ELR is enabled.")

    def replace(self, level: str, configs: dict[str, str], named: Collection[str] = ()) -> None:
        """Set a level, in force here at once: saved in the file, or written to the cluster's
        store for every broker, naming what changed and what the request ``named`` (a
        cluster-level config named is altered even when its value stays, as in Kafka)."""
        old = self.levels[level]
        self._set_level(level, configs)
        if self.shared is None:
            self._save()
        else:
            altered = set(named) | {n for n in old.keys() | configs.keys() if old.get(n) != configs.get(n)}
            self.shared.write_broker_level(level, dict(configs), altered)

    def _set_level(self, level: str, configs: dict[str, str]) -> None:
        before = self.effective()
        self.levels[level] = dict(configs)
        after = self.effective()
        changed = {n for n in before.keys() | after.keys() if before.get(n) != after.get(n)}
        for r in self._reconfigurables:
            if r.reconfigurable_configs() & changed:
                r.reconfigure(self._in_force(r, after))

    def load_client_quotas(self) -> list[tuple[dict[str, str | None], dict[str, float]]]:
        return [(dict(e), dict(v)) for e, v in self.client_quotas]

    def save_client_quotas(self, quotas: list[tuple[dict[str, str | None], dict[str, float]]]) -> None:
        self.client_quotas = [(dict(e), dict(v)) for e, v in quotas]
        self._save()

    def load_scram_credentials(self) -> dict[str, dict[str, str]]:
        return {u: dict(c) for u, c in self.scram_credentials.items()}

    async def store_scram_credentials(self, user: str, credentials: Mapping[str, str]) -> None:
        """One node keeps its users' SCRAM credentials here (a ``ScramStore``)."""
        self._store_entry(self.scram_credentials, user, credentials)

    def load_client_metrics(self) -> dict[str, dict[str, str]]:
        return {n: dict(c) for n, c in self.client_metrics.items()}

    def store_client_metrics(self, name: str, configs: Mapping[str, str]) -> None:
        """One node keeps its client metrics subscriptions here (a ``ClientMetricsStore``)."""
        self._store_entry(self.client_metrics, name, configs)

    def load_group_configs(self) -> dict[str, dict[str, str]]:
        return {g: dict(c) for g, c in self.group_configs.items()}

    async def store_group_config(self, group_id: str, configs: Mapping[str, str]) -> None:
        """One node keeps its groups' configs here (a ``GroupConfigStore``)."""
        self._store_entry(self.group_configs, group_id, configs)

    async def read_group_config(self, group_id: str) -> dict[str, str]:
        return dict(self.group_configs.get(group_id, {}))

    def _store_entry(self, entries: dict[str, dict[str, str]], name: str, values: Mapping[str, str]) -> None:
        """Set ``name``'s values, or remove it when they are empty, and save."""
        if values:
            entries[name] = dict(values)
        else:
            entries.pop(name, None)
        self._save()

    def init_finalized_features(self, defaults: Mapping[str, int]) -> FinalizedFeatures:
        """One node keeps its finalized feature levels here (a ``FeatureStore``); the defaults
        are written with the first change, so that starting writes nothing (a full disk)."""
        if self.finalized_features is None:
            self.finalized_features = FinalizedFeatures(dict(defaults), 0)
        return self.finalized_features

    async def read_finalized_features(self) -> FinalizedFeatures:
        assert self.finalized_features is not None
        return self.finalized_features

    async def write_finalized_features(self, levels: Mapping[str, int], expected_epoch: int
                                       ) -> FinalizedFeatures | None:
        if self.finalized_features is not None and self.finalized_features.epoch != expected_epoch:
            return None
        self.finalized_features = FinalizedFeatures(dict(levels), expected_epoch + 1)
        self._save()
        return self.finalized_features

    def load_delegation_tokens(self) -> list[TokenInformation]:
        return list(self.delegation_tokens.values())

    async def store_delegation_token(self, token: TokenInformation) -> None:
        """One node keeps its delegation tokens here (a ``TokenStore``)."""
        self.delegation_tokens[token.token_id] = token
        self._save()

    async def remove_delegation_token(self, token_id: str) -> None:
        if self.delegation_tokens.pop(token_id, None) is not None:
            self._save()

    def load_acls(self) -> list[AclBinding]:
        return list(self.acls)

    async def store_acls(self, changes: Mapping[ResourcePattern, AclChange], bindings: Sequence[AclBinding]) -> None:
        """One node keeps its ACLs here, beside the quotas (an ``AclStore``)."""
        self.acls = list(bindings)
        self._save()

    def _save(self) -> None:
        doc: dict[str, Any] = dict(self.levels) if self.shared is None else {}
        if self.client_quotas:
            doc[CLIENT_QUOTAS] = [{"entity": e, "quotas": v} for e, v in self.client_quotas]
        if self.acls:
            doc[ACLS] = bindings_to_json(self.acls)
        if self.scram_credentials:
            doc[SCRAM_CREDENTIALS] = self.scram_credentials
        if self.client_metrics:
            doc[CLIENT_METRICS] = self.client_metrics
        if self.group_configs:
            doc[GROUP_CONFIGS] = self.group_configs
        if self.delegation_tokens:
            doc[DELEGATION_TOKENS] = {i: t.to_json() for i, t in self.delegation_tokens.items()}
        if self.finalized_features is not None and self.finalized_features.epoch > 0:
            doc[FINALIZED_FEATURES] = {"levels": dict(self.finalized_features.levels),
                                       "epoch": self.finalized_features.epoch}
        write_atomic(self.path, json.dumps(doc, indent=1, sort_keys=True) + "\n")


def describe_broker_configs(config: BrokerConfig, dynamic: DynamicBrokerConfig,
                            resource_name: str) -> list[ConfigEntry]:
    """DescribeConfigs entries of a BROKER resource: every config for this broker's id, only
    the cluster-wide dynamic ones for the default (""). A config is read-only unless Kafka can
    update it dynamically; a PASSWORD's value is never shown."""
    cluster_level = dynamic.level(resource_name) == ""
    node, cluster = dynamic.levels[dynamic.node_id], dynamic.levels[""]
    static = config.items()
    names = list(cluster) if cluster_level else [*static, *(n for n in {**cluster, **node} if n not in static)]
    levels = broker_levels(config, dynamic)
    if cluster_level:  # the default level shows its own values only
        levels = levels[1:2]
    out = []
    for name in (sorted(names) if cluster_level else names):
        key = BROKER_CONFIGS.get(name)
        synonyms = broker_synonyms(name, levels)
        source = synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG
        if source in (ConfigSource.DYNAMIC_BROKER_CONFIG, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG):
            value = synonyms[0][1]
        else:  # the parsed value, rendered as Kafka prints it
            value = key.render(static[name]) if key is not None else None
        sensitive = key is None or key.sensitive  # a custom config's type is unknown: hidden, as Kafka does
        if sensitive:
            value, synonyms = None, [(n, None, s) for n, _, s in synonyms]
        out.append(ConfigEntry(
            name=name, value=value, is_default=source is ConfigSource.DEFAULT_CONFIG, source=source,
            config_type=key.type if key is not None else ConfigType.UNKNOWN,
            read_only=key is None or not key.dynamic, sensitive=sensitive, synonyms=tuple(synonyms),
            documentation=key.doc if key is not None else None))
    return out


def broker_levels(config: BrokerConfig, dynamic: DynamicBrokerConfig) -> list[tuple[dict[str, str], ConfigSource]]:
    """Every level a broker config's value may come from, most specific first."""
    return [(dynamic.levels[dynamic.node_id], ConfigSource.DYNAMIC_BROKER_CONFIG),
            (dynamic.levels[CLUSTER_DEFAULT], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
            ({n: str(v).strip() for n, v in config.originals.items()}, ConfigSource.STATIC_BROKER_CONFIG),
            ({k.name: k.render(k.default) for k in BROKER_CONFIGS if k.default is not None},
             ConfigSource.DEFAULT_CONFIG)]


def broker_synonyms(name: str, levels: list[tuple[dict[str, str], ConfigSource]]
                    ) -> list[tuple[str, str | None, ConfigSource]]:
    """Kafka lists a config's synonyms (log.retention.ms/minutes/hours ...) level by level,
    most specific first, starting from the first entry under the config's own name."""
    group = synonyms_of(name)
    synonyms: list[tuple[str, str | None, ConfigSource]] = [
        (n, values[n], source) for values, source in levels for n in group if n in values]
    while synonyms and synonyms[0][0] != name:
        synonyms.pop(0)
    return synonyms


def broker_values_in_force(config: BrokerConfig, dynamic: DynamicBrokerConfig) -> dict[str, str | None]:
    """Every broker config's value in force as text (the base of APPEND and SUBTRACT)."""
    out: dict[str, str | None] = {n: BROKER_CONFIGS[n].render(v) for n, v in config.items().items()}
    out.update(dynamic.effective())
    return out


def apply_incremental(current: dict[str, str], ops: Sequence[AlterConfigOp], defaults: dict[str, str] | None = None,
                      list_configs: frozenset[str] = frozenset()) -> dict[str, str]:
    """IncrementalAlterConfigs' SET, DELETE, APPEND and SUBTRACT on a config map. APPEND and
    SUBTRACT start from the value in force (``defaults`` when the map has none) and are only
    for list configs, as in Kafka."""
    out = dict(current)
    for c in ops:
        if c.config_operation == AlterConfigOpType.SET:
            out[c.name] = c.value
        elif c.config_operation == AlterConfigOpType.DELETE:
            out.pop(c.name, None)
        elif c.config_operation in (AlterConfigOpType.APPEND, AlterConfigOpType.SUBTRACT):
            if c.name not in list_configs:
                raise ApiError(ErrorCode.INVALID_CONFIG, f"Can't {AlterConfigOpType(c.config_operation).name} "
                                                         f"to key {c.name} because its type is not LIST.")
            base = out.get(c.name, (defaults or {}).get(c.name, ""))
            items = list(parse_value(ConfigType.LIST, base or ""))
            vals = parse_value(ConfigType.LIST, c.value or "")
            if c.config_operation == AlterConfigOpType.APPEND:
                items += [x for x in vals if x not in items]
            else:
                items = [x for x in items if x not in vals]
            out[c.name] = ",".join(items)
        else:
            raise ApiError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {c.config_operation}")
    return out
