"""TopicManager: topics and their configs, for the request handlers and the coordinators.

It owns the metadata store's changes and the LogConfig in force for each topic, opens and
removes partitions in the ReplicaManager and the LogManager, and applies topic and dynamic
broker config changes to the logs. It is the coordinators' metadata view and internal-topic
creator.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Collection, Sequence
from typing import Callable, Protocol, TypeVar

from rivulet.common.types import TopicPartition
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.replication.partition import Partition
from rivulet.replication.metadata_cache import MetadataCache
from rivulet.replication.replica_manager import ReplicaManager
from rivulet.server.config import BrokerConfig
from rivulet.server.dynamic_config import DynamicBrokerConfig
from rivulet.server.metadata import MetadataStore, TopicInfo, validate_topic_name
from rivulet.storage import Log, LogConfig, LogManager, describe_topic_configs
from rivulet.storage.config import ICEBERG_MODE_NONE
from rivulet.storage.log_dir_failure import KafkaStorageError

log = logging.getLogger(__name__)

T = TypeVar("T")
# How Kafka's controller refuses a placement on a broker whose log dirs are all cordoned.
ALL_CORDONED = "All brokers are currently fenced, or have all their log directories cordoned."
PartitionsDeleted = Callable[[list[TopicPartition]], object]


def check_manual_assignment(replicas: Sequence[int], registered: Collection[int],
                            replication_factor: int | None = None) -> None:
    """One partition's replica list given by hand, checked as Kafka's controller checks it
    (its messages, in its order: brokers in id order, the count against the partitions before)."""
    if not replicas:
        raise ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                       "The manual partition assignment includes an empty replica list.")
    previous = None
    for broker in sorted(replicas):
        if broker not in registered:
            raise ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"The manual partition assignment includes "
                           f"broker {broker}, but no such broker is registered.")
        if broker == previous:
            raise ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"The manual partition assignment includes "
                           f"the broker {broker} more than once.")
        previous = broker
    if replication_factor is not None and len(replicas) != replication_factor:
        raise ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"The manual partition assignment includes a "
                       f"partition with {len(replicas)} replica(s), but this is not consistent with previous "
                       f"partitions, which have {replication_factor} replica(s).")


def check_partition_increase(name: str, old: int, count: int, assignments: Sequence[Sequence[int]] | None,
                             registered: Collection[int], replication_factor: int) -> None:
    """CreatePartitions' checks of the new count and of the replica lists given with it, with
    Kafka 4's (KRaft controller's) messages."""
    if count == old:
        raise ApiError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {old} partition(s).")
    if count < old:
        raise ApiError(ErrorCode.INVALID_PARTITIONS, f"The topic {name} currently has {old} partition(s); "
                       f"{count} would not be an increase.")
    if assignments is not None:
        if len(assignments) != count - old:
            raise ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Attempted to add {count - old} additional "
                           f"partition(s), but only {len(assignments)} assignment(s) were specified.")
        for replicas in assignments:
            check_manual_assignment(replicas, registered, replication_factor)


class TopicConfigStore(Protocol):
    """Cluster mode: where topic configs live for every broker (ZooKeeper's /config/topics)."""

    def write_topic_config(self, name: str, configs: dict[str, str]) -> None: ...


def broker_props(config: BrokerConfig, dynamic_config: DynamicBrokerConfig) -> dict[str, str]:
    """server.properties with the dynamic broker configs in force over it."""
    return {**config.originals, **dynamic_config.effective()}


class TopicManager:
    def __init__(self, config: BrokerConfig, metadata: MetadataStore, log_manager: LogManager,
                 replica_manager: ReplicaManager, dynamic_config: DynamicBrokerConfig, *,
                 metadata_cache: MetadataCache | None = None, config_store: TopicConfigStore | None = None,
                 on_partitions_deleted: PartitionsDeleted | None = None) -> None:
        """Cluster mode gives ``metadata_cache``, the topics as the controller stated them
        (UpdateMetadata), and ``config_store``, where topic configs are written for every
        broker (ZooKeeper). ``on_partitions_deleted`` is told of a deleted topic's partitions
        (the coordinators drop their state)."""
        self.config = config
        self.metadata = metadata
        self.log_manager = log_manager
        self.replica_manager = replica_manager
        self.dynamic_config = dynamic_config
        self.log_defaults = LogConfig.from_broker_props(broker_props(config, dynamic_config))
        self._log_configs: dict[str, LogConfig] = {}
        # The topics whose iceberg.mode is set, kept with _log_configs: the Iceberg translator
        # looks at their partitions only, and at nothing while there are none.
        self._table_topics: set[str] = set()
        # Topics whose logs a worker thread is creating, or closing for deletion.
        self._creating: set[str] = set()
        self._deleting: set[str] = set()
        self._file_work: set[asyncio.Future] = set()
        self._internal_creations: dict[str, asyncio.Future[TopicInfo]] = {}
        # CreatePartitions one at a time: each is checked against the count the last one left.
        self._alter_lock = asyncio.Lock()
        # False in cluster mode: replicas open when the controller's LeaderAndIsr names them.
        self.opens_partitions = True
        self.metadata_cache = metadata_cache
        self.config_store = config_store
        # Cluster mode: each topic's config overrides as ZooKeeper holds them.
        self._cluster_configs: dict[str, dict[str, str]] = {}
        self.on_partitions_deleted = on_partitions_deleted

    # ------------------------------------------------------------ the metadata view
    # In cluster mode the topics are the controller's (the metadata cache) and their configs
    # ZooKeeper's (``apply_topic_config``, internal topics' included since FindCoordinator has
    # them created there); configs the local store holds stand in until ZooKeeper's arrive.
    def get(self, name: str) -> TopicInfo | None:
        cache = self.metadata_cache
        if cache is not None and cache.contains_topic(name):
            local = self.metadata.get(name)
            configs = self._cluster_configs.get(name, local.configs if local is not None else {})
            return TopicInfo(name, cache.topic_id(name) or uuid.UUID(int=0), cache.num_partitions(name) or 0,
                             dict(configs))
        return self.metadata.get(name)

    def topic_id(self, name: str) -> uuid.UUID | None:
        info = self.get(name)
        return None if info is None else info.topic_id

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        cache = self.metadata_cache
        name = cache.topic_name(topic_id) if cache is not None else None
        if name is None:
            info = self.metadata.by_id.get(topic_id)
            name = info.name if info is not None else None
        return name

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        cache = self.metadata_cache
        name = cache.topic_name(topic_id) if cache is not None else None
        return self.get(name) if name is not None else self.metadata.by_id.get(topic_id)

    def topic_names(self) -> list[str]:
        if self.metadata_cache is not None:
            return self.metadata_cache.topic_names()
        return list(self.metadata.topics)

    def partition_racks(self, topic: str, partition: int) -> frozenset[str]:
        if self.metadata_cache is not None:
            return self.metadata_cache.partition_racks(topic, partition)
        rack = self.config["broker.rack"]  # a single node holds every replica
        return frozenset((rack,)) if rack else frozenset()

    # ------------------------------------------------------------ start-up
    def open_all(self, *, open_partitions: bool = True) -> None:
        """A partition for every topic partition in the metadata (logs of partitions it does not
        hold were deleted by ``LogManager.startup``). In cluster mode (``open_partitions``
        false) only the configs are loaded: the controller's LeaderAndIsr opens each replica
        (``log_for_replica``)."""
        self.opens_partitions = open_partitions
        for info in list(self.metadata.topics.values()):
            self._set_log_config(info.name, self._make_log_config(info.configs))
            if open_partitions:
                for i in range(info.num_partitions):
                    self._open_partition(info, i)

    # ------------------------------------------------------------ replicas (cluster mode)
    def log_for_replica(self, tp: TopicPartition, topic_id: uuid.UUID) -> Log:
        """The replica's log with its topic's config: created when this node has none yet; one
        recovered at start-up was loaded with the defaults (the topic configs come from
        ZooKeeper after the logs), so it takes the topic's now."""
        cfg = self._log_configs.get(tp.topic, self.log_defaults)
        lg = self.log_manager.get_log(tp.topic, tp.partition)
        if lg is not None:
            if lg.config is not cfg:
                lg.update_config(cfg)
            if lg.topic_id is None:
                lg.assign_topic_id(topic_id)
            return lg
        if self.log_manager.is_offline_partition(tp):
            raise KafkaStorageError(f"the log directory of {tp.topic}-{tp.partition} is offline")
        return self.log_manager.create_log(tp.topic, tp.partition, cfg, topic_id)

    def open_replica_logs(self, replicas: list[tuple[TopicPartition, uuid.UUID]]) -> None:
        """The logs of new replicas (a LeaderAndIsr naming many), each topic's made in one batch:
        one fsync of the parent dir, not one each. Safe on a worker thread. A failure is left
        for ``log_for_replica`` to meet again and answer, partition by partition."""
        missing: dict[tuple[str, uuid.UUID], list[int]] = {}
        for tp, topic_id in replicas:
            if self.log_manager.get_log(tp.topic, tp.partition) is None \
                    and not self.log_manager.is_offline_partition(tp):
                missing.setdefault((tp.topic, topic_id), []).append(tp.partition)
        for (topic, topic_id), indexes in missing.items():
            try:
                self.log_manager.create_logs(topic, indexes, self._log_configs.get(topic, self.log_defaults),
                                             topic_id)
            except ApiError:
                pass

    def delete_replica_log(self, tp: TopicPartition) -> None:
        self.log_manager.delete_log(tp.topic, tp.partition)

    def _set_log_config(self, name: str, cfg: LogConfig | None) -> None:
        """The topic's LogConfig in force (None: the topic is gone)."""
        if cfg is None:
            self._log_configs.pop(name, None)
        else:
            self._log_configs[name] = cfg
        if cfg is not None and cfg.iceberg_mode != ICEBERG_MODE_NONE:
            self._table_topics.add(name)
        else:
            self._table_topics.discard(name)

    def table_partitions(self) -> list[Partition]:
        """This broker's partitions of the topics whose iceberg.mode is set (none walked while
        no topic has one)."""
        out: list[Partition] = []
        for name in self._table_topics:
            info = self.get(name)
            for i in range(info.num_partitions if info is not None else 0):
                p = self.replica_manager.partitions.get(TopicPartition(name, i))
                if p is not None:
                    out.append(p)
        return out

    def _make_log_config(self, overrides: dict[str, str]) -> LogConfig:
        return LogConfig.from_props(overrides, self.log_defaults)

    def _open_partition(self, info: TopicInfo, index: int) -> Partition | None:
        cfg = self._log_configs[info.name]
        lg = self.log_manager.get_log(info.name, index)
        if lg is None:
            tp = TopicPartition(info.name, index)
            if self.log_manager.is_offline_partition(tp):
                # Its log dir could not be loaded: offline until restart, never re-created elsewhere.
                self.replica_manager.offline_partitions.add(tp)
                return None
            lg = self.log_manager.create_log(info.name, index, cfg, info.topic_id)
        else:
            lg.update_config(cfg)
            if lg.topic_id is None:
                lg.assign_topic_id(info.topic_id)
        p = self.replica_manager.new_partition(TopicPartition(info.name, index), info.topic_id, lg)
        self.replica_manager.add_partition(p)
        return p

    # ------------------------------------------------------------ topics
    def _check_create(self, name: str, num_partitions: int, replication_factor: int,
                      configs: dict[str, str]) -> LogConfig:
        cfg = self.validate_new_topic(name, num_partitions, replication_factor, configs)
        if self.log_manager.all_cordoned():
            raise ApiError(ErrorCode.INVALID_REPLICATION_FACTOR, f"Unable to replicate the partition "
                           f"{replication_factor} time(s): {ALL_CORDONED}")
        if replication_factor > 1:
            raise ApiError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             f"Unable to replicate the partition {replication_factor} time(s): "
                             "The target replication factor of "
                             f"{replication_factor} cannot be reached because only 1 broker(s) are registered or some "
                             "brokers have all their log directories cordoned.")
        return cfg

    def validate_new_topic(self, name: str, num_partitions: int, replication_factor: int,
                           configs: dict[str, str]) -> LogConfig:
        """The checks of a topic creation that do not depend on the brokers; its LogConfig."""
        validate_topic_name(name)
        if self.metadata.get(name) is not None or name in self._creating:
            raise ApiError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        if name in self._deleting:
            raise ApiError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' is marked for deletion.")
        other = self.metadata.collides(name)
        if other is not None:
            raise ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                             f"Topic '{name}' collides with existing topic: {other}")
        if num_partitions <= 0:
            raise ApiError(ErrorCode.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value.")
        if replication_factor <= 0:
            raise ApiError(ErrorCode.INVALID_REPLICATION_FACTOR,
                           "Replication factor must be larger than 0, or -1 to use the default value.")
        return self._make_log_config(configs)  # raises INVALID_CONFIG with the reason

    def create_topic(self, name: str, num_partitions: int, replication_factor: int, configs: dict[str, str],
                     validate_only: bool = False) -> TopicInfo | None:
        """Create a topic on the calling thread (auto-creation, small topics); see ``create_topic_off_loop``."""
        cfg = self._check_create(name, num_partitions, replication_factor, configs)
        if validate_only:
            return None
        topic_id = uuid.uuid4()
        partitions = self._build_partitions(name, range(num_partitions), cfg, topic_id)
        return self._commit_topic(name, configs, partitions, cfg)

    async def create_topic_off_loop(self, name: str, num_partitions: int, replication_factor: int,
                                    configs: dict[str, str], validate_only: bool = False) -> TopicInfo | None:
        """Create a topic with its logs made on a worker thread, so the loop keeps serving.

        All or nothing: the logs first (removed again if one fails: out of descriptors, a full
        disk), then the durable metadata, then the partitions, in one step on the loop. The
        topic is invisible until then; a crash before the metadata is written leaves logs that
        start-up deletes unread."""
        cfg = self._check_create(name, num_partitions, replication_factor, configs)
        if validate_only:
            return None
        return await self._create_off_loop(name, num_partitions, configs, cfg)

    async def _create_off_loop(self, name: str, num_partitions: int, configs: dict[str, str],
                               cfg: LogConfig) -> TopicInfo:
        self._creating.add(name)
        try:
            partitions = await self.off_loop(self._build_partitions, name, range(num_partitions), cfg, uuid.uuid4())
            return self._commit_topic(name, configs, partitions, cfg)
        finally:
            self._creating.discard(name)

    def off_loop(self, fn: Callable[..., T], *args: object) -> asyncio.Future[T]:
        """Run file work on a worker thread; ``drain`` waits for all of it."""
        fut = asyncio.get_running_loop().run_in_executor(None, fn, *args)
        self._file_work.add(fut)
        fut.add_done_callback(self._file_work.discard)
        return fut

    async def drain(self) -> None:
        """Wait for the file work of topic operations under way (before the logs are closed at
        shutdown): each then has its logs made or removed, never half."""
        while self._file_work:
            await asyncio.wait(list(self._file_work))

    def _build_partitions(self, name: str, indexes: range, cfg: LogConfig,
                          topic_id: uuid.UUID) -> list[Partition]:
        """The file work of new partitions, safe on a worker thread as nothing serves them yet:
        their logs, all or none, and each Partition (becoming leader writes its epoch file)."""
        logs = self.log_manager.create_logs(name, indexes, cfg, topic_id)
        try:
            return [self.replica_manager.new_partition(TopicPartition(name, lg.partition), topic_id, lg) for lg in logs]
        except BaseException:
            self._discard_logs(name, indexes)
            raise

    def _discard_logs(self, name: str, indexes: range) -> None:
        self.log_manager.remove_deleted(self.log_manager.delete_logs((name, i) for i in indexes))

    def _commit_topic(self, name: str, configs: dict[str, str], partitions: list[Partition],
                      cfg: LogConfig) -> TopicInfo:
        """Record a topic whose partitions are built, then serve them; undo the logs if recording fails."""
        n = len(partitions)
        try:
            info = self.metadata.add(name, n, configs, topic_id=partitions[0].topic_id)
        except OSError as e:
            self._discard_logs(name, range(n))
            raise KafkaStorageError(f"recording topic {name} failed: {e}") from e
        self._set_log_config(name, cfg)
        for p in partitions:
            self.replica_manager.add_partition(p)
        log.info("created topic %s with %d partition(s)", name, n)
        return info

    async def ensure_internal_topic_off_loop(self, name: str, num_partitions: int,
                                             configs: dict[str, str]) -> TopicInfo:
        """A coordinator's internal topic, made on a single node when first needed (in cluster
        mode the controller makes it): its logs are made on a worker thread, as a created
        topic's are, so other clients are answered meanwhile. Callers asking at once share one
        creation."""
        info = self.metadata.get(name)
        if info is not None:
            return info
        if not self.opens_partitions:
            raise ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{name} is made by the controller")
        pending = self._internal_creations.get(name)
        if pending is None:
            pending = self._internal_creations[name] = asyncio.ensure_future(
                self._create_off_loop(name, num_partitions, configs, self._make_log_config(configs)))
            pending.add_done_callback(lambda _: self._internal_creations.pop(name, None))
        # Shielded: a caller given up on does not cancel the creation others wait for.
        return await asyncio.shield(pending)

    async def delete_topic(self, name: str) -> None:
        """Forget the topic (durably) and stop serving it at once; its logs are closed, renamed for
        deletion and removed on a worker thread before the answer."""
        try:
            info = self.metadata.remove(name)
        except OSError as e:
            raise KafkaStorageError(f"recording the deletion of topic {name} failed: {e}") from e
        if info is None:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        deleted = [TopicPartition(name, i) for i in range(info.num_partitions)]
        for tp in deleted:
            self.replica_manager.remove_partition(tp)
        self._set_log_config(name, None)
        if self.on_partitions_deleted is not None:
            self.on_partitions_deleted(deleted)
        self._deleting.add(name)
        try:
            await self.off_loop(self._discard_logs, name, range(info.num_partitions))
        finally:
            self._deleting.discard(name)
        log.info("deleted topic %s", name)

    async def add_partitions(self, name: str, count: int, assignments: Sequence[Sequence[int]] | None = None,
                             validate_only: bool = False) -> None:
        """Grow a topic to ``count`` partitions (``assignments``: the replica lists the request
        gave, each of which can only name this node). The new logs are made on a worker thread,
        all or none, then recorded and served."""
        async with self._alter_lock:
            info = self.metadata.get(name)
            if info is None:
                raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            old = info.num_partitions
            check_partition_increase(name, old, count, assignments, (self.config.node_id,), 1)
            if self.log_manager.all_cordoned():
                raise ApiError(ErrorCode.INVALID_REPLICATION_FACTOR, ALL_CORDONED)
            if validate_only:
                return
            added = range(old, count)
            partitions = await self.off_loop(self._build_partitions, name, added, self._log_configs[name],
                                              info.topic_id)
            try:
                if self.metadata.get(name) is not info:
                    raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)  # deleted meanwhile
                self.metadata.set_partitions(name, count)
            except (ApiError, OSError) as e:
                self._discard_logs(name, added)
                if isinstance(e, ApiError):
                    raise
                raise KafkaStorageError(f"recording the new partitions of {name} failed: {e}") from e
            for p in partitions:
                self.replica_manager.add_partition(p)

    # ------------------------------------------------------------ configs
    def alter_topic_configs(self, name: str, configs: dict[str, str], validate_only: bool = False) -> None:
        cfg = self._make_log_config(configs)
        if validate_only:
            return
        if self.config_store is not None:
            # Cluster mode: in force here at once; ZooKeeper tells the other brokers.
            self.config_store.write_topic_config(name, configs)
            self.apply_topic_config(name, configs)
            return
        self.metadata.set_configs(name, configs)
        self._set_log_config(name, cfg)
        info = self.metadata.get(name)
        for i in range(info.num_partitions):
            p = self.replica_manager.partitions.get(TopicPartition(name, i))
            if p is not None:
                p.log.update_config(cfg)

    def apply_topic_config(self, name: str, configs: dict[str, str]) -> None:
        """Cluster mode: a topic's overrides as ZooKeeper holds them, for its replicas here now
        and later (an invalid one, written by another tool, is logged and left out)."""
        try:
            cfg = self._make_log_config(configs)
        except ApiError as e:
            log.warning("topic %s: ignoring its config %s: %s", name, configs, e.message)
            return
        self._cluster_configs[name] = dict(configs)
        self._set_log_config(name, cfg)
        for tp, p in list(self.replica_manager.partitions.items()):
            if tp.topic == name:
                p.log.update_config(cfg)

    def describe_topic_configs(self, overrides: dict[str, str]) -> list:
        """A ConfigEntry for every topic-level config."""
        return describe_topic_configs(overrides, self.log_defaults, self.config.originals,
                                      self.dynamic_config.described_levels())

    def broker_props(self) -> dict[str, str]:
        return broker_props(self.config, self.dynamic_config)

    def topic_config_values(self, name: str) -> dict[str, str]:
        """Every topic config's value in force for ``name`` (for APPEND and SUBTRACT)."""
        return self._log_configs.get(name, self.log_defaults).to_props()

    def alter_broker_configs(self, resource_name: str, configs: dict[str, str], validate_only: bool = False,
                             named: Collection[str] = ()) -> None:
        """Replace the dynamic configs of one level (this broker's id, or "" for the cluster
        default), ``named`` by the request; the log.* defaults reach every topic without its own
        override at once (in a cluster, on every broker through ZooKeeper)."""
        dyn = self.dynamic_config
        level = dyn.level(resource_name, altering=True)
        dyn.validate(configs, per_broker=level != "")
        in_force = dyn.with_level(level, configs)
        try:
            defaults = LogConfig.from_broker_props({**self.config.originals, **in_force})
        except ApiError as e:  # a dynamic broker config Kafka's broker refuses is INVALID_REQUEST
            raise ApiError(ErrorCode.INVALID_REQUEST, e.message) from None
        if validate_only:
            return
        dyn.replace(level, configs, named)
        self._apply_log_defaults(defaults)
        log.info("dynamic broker configs (%s) now %s", "cluster default" if level == "" else f"broker {level}",
                 configs)

    def apply_broker_configs(self, level: str, configs: dict[str, str]) -> None:
        """Cluster mode: a level of dynamic broker configs as ZooKeeper now holds it (written
        through any broker); one whose log defaults do not parse is logged and left out."""
        dyn = self.dynamic_config
        try:
            defaults = LogConfig.from_broker_props({**self.config.originals, **dyn.with_level(level, configs)})
        except ApiError as e:
            log.warning("ignoring dynamic broker configs %s: %s", configs, e.message)
            return
        if dyn.apply_shared(level, configs):  # False: not this broker's level
            self._apply_log_defaults(defaults)

    def _apply_log_defaults(self, defaults: LogConfig) -> None:
        """New log defaults into every topic's config and its logs here."""
        self.log_defaults = defaults
        for info in list(self.metadata.topics.values()):
            cfg = self._make_log_config(info.configs)
            self._set_log_config(info.name, cfg)
            for i in range(info.num_partitions):
                p = self.replica_manager.partitions.get(TopicPartition(info.name, i))
                if p is not None:
                    p.log.update_config(cfg)
        for name, overrides in list(self._cluster_configs.items()):
            self.apply_topic_config(name, overrides)
