"""The broker process: wires storage, replication, coordinators and the network together.

Start-up order follows Kafka's: recover the logs, load topic metadata, open a partition for
every topic partition, then listen. Shutdown stops listening, completes pending delayed
operations, flushes the logs and writes the checkpoints.
"""

from __future__ import annotations

import asyncio
import logging
import time

from rivulet.coordinator.group_coordinator import GroupCoordinator
from rivulet.delayed import Timer
from rivulet.protocol.errors import ErrorCode, KafkaError
from rivulet.replication.partition import Partition, TopicPartition
from rivulet.replication.replica_manager import ReplicaManager
from rivulet.server.apis import KafkaApis
from rivulet.server.config import BrokerConfig
from rivulet.server.dynamic_config import DynamicBrokerConfig
from rivulet.server.metadata import MetadataStore, TopicInfo, validate_topic_name
from rivulet.server.network import KafkaConnection
from rivulet.storage import LogConfig, LogManager, describe_topic_configs, read_or_create_meta
from rivulet.storage.cleaner import LogCleaner
from rivulet.transaction import TransactionCoordinator

log = logging.getLogger(__name__)


def now_ms() -> int:
    return int(time.time() * 1000)


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id = config.node_id
        self.advertised_listener = config.advertised_listeners[0]
        self.dynamic_config = DynamicBrokerConfig(config.log_dirs[0], config.node_id)
        self.log_defaults = LogConfig.from_broker_props(self.broker_props())
        self.log_manager = LogManager(config.log_dirs, self.log_defaults,
                                      producer_id_expiration_ms=config["producer.id.expiration.ms"])
        self.cluster_id = read_or_create_meta(config.log_dirs[0], self.node_id, config["cluster.id"])
        self.metadata = MetadataStore(config.log_dirs[0], self.cluster_id)
        self.timer: Timer | None = None
        self.replica_manager: ReplicaManager | None = None
        self.group_coordinator: GroupCoordinator | None = None
        self.log_cleaner: LogCleaner | None = None
        self.transaction_coordinator: TransactionCoordinator | None = None
        self.apis = KafkaApis(self)
        self.servers: list[asyncio.base_events.Server] = []
        self.bound_ports: list[int] = []
        self._tasks: list[asyncio.Task] = []
        self._log_configs: dict[str, LogConfig] = {}
        self._stopped = asyncio.Event()
        self.started = False

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        t0 = time.monotonic()
        self.timer = Timer(asyncio.get_running_loop())
        self.replica_manager = ReplicaManager(
            self.node_id, self.timer,
            produce_purge_interval=self.config["producer.purgatory.purge.interval.requests"],
            fetch_purge_interval=self.config["fetch.purgatory.purge.interval.requests"])
        self.log_manager.startup()
        for info in list(self.metadata.topics.values()):
            self._log_configs[info.name] = self._make_log_config(info.configs)
            for i in range(info.num_partitions):
                self._open_partition(info, i)
        self._remove_orphan_logs()
        if self.config["log.cleaner.enable"]:
            # One cleaner serves every compacted log (__consumer_offsets, __transaction_state, users').
            self.log_cleaner = LogCleaner(self.log_manager, backoff_ms=self.config["log.cleaner.backoff.ms"])
            self.log_cleaner.start()
        self.group_coordinator = GroupCoordinator(self)
        self.group_coordinator.register_apis(self.apis)
        self.group_coordinator.startup()
        from rivulet.transaction.apis import TransactionApis
        from rivulet.transaction.txn_offsets import TxnOffsetCommitApi
        self.transaction_coordinator = TransactionCoordinator(self)
        TransactionApis(self.transaction_coordinator).register(self.apis)
        TxnOffsetCommitApi(self).register(self.apis)  # once the group coordinator has the hook
        self.transaction_coordinator.startup()
        self.replica_manager.txn_verifier = self.transaction_coordinator.verify_produce
        # FindCoordinator key type 1 (transactions) resolves through the group coordinator's hook.
        self.group_coordinator.coordinator_resolvers[1] = self.transaction_coordinator.find_coordinator
        for name, host, port in self.config.listeners:
            if name in self.config["controller.listener.names"]:
                continue
            server = await asyncio.get_running_loop().create_server(
                lambda: KafkaConnection(self.apis, self.config["socket.request.max.bytes"]),
                host or None, port, reuse_address=True, backlog=1024)
            self.servers.append(server)
            self.bound_ports.append(server.sockets[0].getsockname()[1])
        if self.bound_ports and self.config.advertised_listeners is self.config.listeners:
            # An ephemeral port (0) is advertised as the port actually bound.
            n, h, p = self.advertised_listener
            self.advertised_listener = (n, h, self.bound_ports[0] if p == 0 else p)
        self._tasks.append(asyncio.get_running_loop().create_task(self._housekeeping()))
        self.started = True
        log.info("started in %.0f ms", (time.monotonic() - t0) * 1000)

    async def shutdown(self) -> None:
        for s in self.servers:
            s.close()
        for conn in list(self.apis.connections):
            conn.close()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        if self.transaction_coordinator is not None:
            self.transaction_coordinator.shutdown()
        if self.log_cleaner is not None:
            self.log_cleaner.shutdown()
        if self.group_coordinator is not None:
            self.group_coordinator.shutdown()
        if self.replica_manager is not None:
            self.replica_manager.shutdown()
        if self.timer is not None:
            self.timer.shutdown()
        await asyncio.get_running_loop().run_in_executor(None, self.log_manager.shutdown)
        self._stopped.set()

    async def _housekeeping(self) -> None:
        """Retention, time-based flush and checkpoints, each on its own Kafka interval."""
        cfg = self.config
        retention_every = cfg["log.retention.check.interval.ms"] / 1000
        checkpoint_every = cfg["log.flush.offset.checkpoint.interval.ms"] / 1000
        flush_every = min(cfg["log.flush.scheduler.interval.ms"], 1000) / 1000
        loop = asyncio.get_running_loop()
        expire_every = cfg["producer.id.expiration.check.interval.ms"] / 1000
        next_retention = loop.time() + retention_every
        next_checkpoint = loop.time() + checkpoint_every
        next_expiry = loop.time() + expire_every
        while True:
            await asyncio.sleep(flush_every)
            try:
                await loop.run_in_executor(None, self.log_manager.flush_dirty, now_ms())
                if loop.time() >= next_retention:
                    next_retention = loop.time() + retention_every
                    self.log_manager.cleanup(now_ms())
                if loop.time() >= next_expiry:
                    next_expiry = loop.time() + expire_every
                    self.log_manager.remove_expired_producers(now_ms())
                if loop.time() >= next_checkpoint:
                    next_checkpoint = loop.time() + checkpoint_every
                    await loop.run_in_executor(None, self.log_manager.checkpoint)
            except Exception:
                log.exception("housekeeping failed; will retry")

    # ------------------------------------------------------------ topics
    def _make_log_config(self, overrides: dict[str, str]) -> LogConfig:
        return LogConfig.from_props(overrides, self.log_defaults)

    def _open_partition(self, info: TopicInfo, index: int) -> Partition:
        cfg = self._log_configs[info.name]
        lg = self.log_manager.get_log(info.name, index)
        if lg is None:
            lg = self.log_manager.create_log(info.name, index, cfg, info.topic_id)
        else:
            lg.update_config(cfg)
        p = Partition(TopicPartition(info.name, index), info.topic_id, lg, self.node_id)
        self.replica_manager.add_partition(p)
        return p

    def _remove_orphan_logs(self) -> None:
        """Partition dirs of topics that were deleted before a crash finished removing them."""
        for lg in list(self.log_manager.all_logs()):
            info = self.metadata.get(lg.topic)
            if info is None or lg.partition >= info.num_partitions:
                log.info("deleting orphaned log %s-%d", lg.topic, lg.partition)
                self.log_manager.delete_log(lg.topic, lg.partition)

    def create_topic(self, name: str, num_partitions: int, replication_factor: int, configs: dict[str, str],
                     validate_only: bool = False) -> TopicInfo | None:
        validate_topic_name(name)
        if self.metadata.get(name) is not None:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        other = self.metadata.collides(name)
        if other is not None:
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                             f"Topic '{name}' collides with existing topic: {other}")
        if num_partitions <= 0:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
        if replication_factor <= 0:
            raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
        if replication_factor > 1:
            raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             f"Unable to replicate the partition {replication_factor} time(s): "
                             "The target replication factor of "
                             f"{replication_factor} cannot be reached because only 1 broker(s) are registered.")
        cfg = self._make_log_config(configs)  # raises INVALID_CONFIG with the reason
        if validate_only:
            return None
        info = self.metadata.add(name, num_partitions, configs)
        self._log_configs[name] = cfg
        for i in range(num_partitions):
            self._open_partition(info, i)
        log.info("created topic %s with %d partition(s)", name, num_partitions)
        return info

    def ensure_internal_topic(self, name: str, num_partitions: int, configs: dict[str, str]) -> TopicInfo:
        info = self.metadata.get(name)
        if info is not None:
            return info
        info = self.metadata.add(name, num_partitions, configs)
        self._log_configs[name] = self._make_log_config(configs)
        for i in range(num_partitions):
            self._open_partition(info, i)
        return info

    def delete_topic(self, name: str) -> None:
        info = self.metadata.remove(name)
        if info is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        for i in range(info.num_partitions):
            self.replica_manager.remove_partition(TopicPartition(name, i))
            self.log_manager.delete_log(name, i)
        self._log_configs.pop(name, None)
        if self.group_coordinator is not None:
            # As Kafka does, committed offsets of deleted partitions go too.
            self.group_coordinator.on_partitions_deleted([(name, i) for i in range(info.num_partitions)])
        log.info("deleted topic %s", name)

    def add_partitions(self, name: str, count: int) -> None:
        info = self.metadata.get(name)
        old = info.num_partitions
        self.metadata.set_partitions(name, count)
        for i in range(old, count):
            self._open_partition(info, i)

    def alter_topic_configs(self, name: str, configs: dict[str, str], validate_only: bool = False) -> None:
        cfg = self._make_log_config(configs)
        if validate_only:
            return
        self.metadata.set_configs(name, configs)
        self._log_configs[name] = cfg
        info = self.metadata.get(name)
        for i in range(info.num_partitions):
            p = self.replica_manager.partitions.get(TopicPartition(name, i))
            if p is not None:
                p.log.update_config(cfg)

    def describe_topic_configs(self, overrides: dict[str, str]) -> list:
        """A ConfigEntry for every topic-level config."""
        return describe_topic_configs(overrides, self.log_defaults, self.broker_props())

    def broker_props(self) -> dict[str, str]:
        """server.properties with the dynamic broker configs in force over it."""
        return {**self.config.originals, **self.dynamic_config.effective()}

    def topic_config_values(self, name: str) -> dict[str, str]:
        """Every topic config's value in force for ``name`` (for APPEND and SUBTRACT)."""
        return self._log_configs.get(name, self.log_defaults).to_props()

    def alter_broker_configs(self, resource_name: str, configs: dict[str, str], validate_only: bool = False) -> None:
        """Replace the dynamic configs of one level (this broker's id, or "" for the cluster
        default); the log.* defaults reach every topic without its own override at once."""
        dyn = self.dynamic_config
        level = dyn.level(resource_name)
        dyn.validate(configs, per_broker=level != "")
        if level == "":
            in_force = {**configs, **dyn.levels[dyn.node_id]}
        else:
            in_force = {**dyn.levels[""], **configs}
        defaults = LogConfig.from_broker_props({**self.config.originals, **in_force})  # INVALID_CONFIG if bad
        if validate_only:
            return
        dyn.replace(level, configs)
        self.log_defaults = defaults
        for info in list(self.metadata.topics.values()):
            cfg = self._make_log_config(info.configs)
            self._log_configs[info.name] = cfg
            for i in range(info.num_partitions):
                p = self.replica_manager.partitions.get(TopicPartition(info.name, i))
                if p is not None:
                    p.log.update_config(cfg)
        log.info("dynamic broker configs (%s) now %s", "cluster default" if level == "" else f"broker {level}",
                 configs)

    def max_message_bytes(self, tp: TopicPartition) -> int:
        cfg = self._log_configs.get(tp.topic)
        return cfg.max_message_bytes if cfg else self.log_defaults.max_message_bytes

    def uses_log_append_time(self, tp: TopicPartition) -> bool:
        cfg = self._log_configs.get(tp.topic)
        return cfg is not None and cfg.log_append_time

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

