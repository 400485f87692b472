"""Dynamic broker configs: what AlterConfigs and IncrementalAlterConfigs set on a BROKER
resource, as Kafka's DynamicBrokerConfig keeps them.

A config set for this broker (resource name = its node id) wins over one set as the
cluster-wide default (resource name ""), which wins over server.properties. Kafka keeps both
in its metadata log; this single node keeps them in ``dynamic-broker-configs.json`` in its
first log dir, rewritten atomically on every change, so they survive a restart.

Configs Kafka only reads at start-up are refused ("Cannot update these configs dynamically").
A name Rivulet does not know is stored as given, as Kafka stores custom configs. The log.*
defaults (and message.max.bytes, compression.type, min.insync.replicas) take effect at once on
every topic without its own override; the rest (thread counts and the like) are recorded and
reported, since Rivulet has nothing to resize.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from rivulet.protocol.errors import ErrorCode, KafkaError
from rivulet.server.config import ACCEPTED_WITHOUT_EFFECT, PROPS
from rivulet.storage.checkpoints import write_atomic
from rivulet.storage.config import ConfigSource

log = logging.getLogger(__name__)

FILE_NAME = "dynamic-broker-configs.json"
CLUSTER_DEFAULT = ""

# Known configs Kafka reads only at start-up (its read-only broker configs).
STATIC_ONLY = frozenset({
    "node.id", "broker.id", "process.roles", "log.dirs", "log.dir", "metadata.log.dir", "cluster.id",
    "listeners", "advertised.listeners", "listener.security.protocol.map", "inter.broker.listener.name",
    "controller.listener.names", "controller.quorum.voters", "controller.quorum.bootstrap.servers",
    "offsets.topic.num.partitions", "offsets.topic.replication.factor", "offsets.topic.segment.bytes",
    "offsets.retention.minutes", "offsets.retention.check.interval.ms", "offsets.commit.timeout.ms",
    "offset.metadata.max.bytes", "transaction.state.log.num.partitions", "transaction.state.log.replication.factor",
    "transaction.state.log.segment.bytes", "transaction.state.log.min.isr", "transaction.state.log.load.buffer.size",
    "transaction.max.timeout.ms", "transactional.id.expiration.ms",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms",
    "transaction.remove.expired.transaction.cleanup.interval.ms", "producer.id.expiration.check.interval.ms",
    "group.initial.rebalance.delay.ms", "group.min.session.timeout.ms", "group.max.session.timeout.ms",
    "group.max.size", "auto.create.topics.enable", "delete.topic.enable", "num.partitions",
    "default.replication.factor", "socket.request.max.bytes", "connections.max.idle.ms",
    "log.retention.check.interval.ms", "log.flush.scheduler.interval.ms", "log.flush.offset.checkpoint.interval.ms",
    "log.flush.start.offset.checkpoint.interval.ms", "log.cleaner.enable", "log.cleaner.backoff.ms",
    "fetch.purgatory.purge.interval.requests", "producer.purgatory.purge.interval.requests", "replica.fetch.max.bytes",
    "fetch.max.bytes", "queued.max.requests", "socket.send.buffer.bytes", "socket.receive.buffer.bytes",
    "initial.broker.registration.timeout.ms", "controller.quorum.election.timeout.ms",
    "auto.leader.rebalance.enable", "replica.lag.time.max.ms", "group.coordinator.rebalance.protocols",
})


class DynamicBrokerConfig:
    """The dynamic configs of one broker: ``levels[""]`` (cluster default) and ``levels[id]``."""

    def __init__(self, log_dir: str, node_id: int) -> None:
        self.path = os.path.join(log_dir, FILE_NAME)
        self.node_id = str(node_id)
        self.levels: dict[str, dict[str, str]] = {CLUSTER_DEFAULT: {}, self.node_id: {}}
        try:
            with open(self.path, encoding="utf-8") as f:
                saved = json.load(f)
            for level in (CLUSTER_DEFAULT, self.node_id):
                self.levels[level] = {str(k): str(v) for k, v in saved.get(level, {}).items()}
        except FileNotFoundError:
            pass
        except (ValueError, AttributeError) as e:  # losing them beats refusing to start
            log.warning("ignoring unreadable %s: %s", self.path, e)

    def level(self, resource_name: str) -> str:
        if resource_name not in (CLUSTER_DEFAULT, self.node_id):
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Unexpected broker id, expected {self.node_id} or empty string, but received "
                             f"{resource_name}")
        return resource_name

    def effective(self) -> dict[str, str]:
        """Dynamic values in force: the broker's own over the cluster default."""
        return {**self.levels[CLUSTER_DEFAULT], **self.levels[self.node_id]}

    def source_of(self, name: str) -> ConfigSource | None:
        if name in self.levels[self.node_id]:
            return ConfigSource.DYNAMIC_BROKER_CONFIG
        if name in self.levels[CLUSTER_DEFAULT]:
            return ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        return None

    @staticmethod
    def validate(configs: dict[str, str]) -> None:
        static = sorted(n for n in configs if n in STATIC_ONLY)
        if static:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Cannot update these configs dynamically: {static}")
        for name, raw in configs.items():
            prop = PROPS.get(name)
            if prop is None or name in ACCEPTED_WITHOUT_EFFECT:
                continue  # a custom config, or one Rivulet accepts without effect
            try:
                value = prop.parse(str(raw))
            except ValueError as e:
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid value {raw} for configuration {name}: {e}") \
                    from None
            if prop.check is not None and not prop.check(value):
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid value {raw} for configuration {name}")

    def replace(self, level: str, configs: dict[str, str]) -> None:
        self.levels[level] = dict(configs)
        self._save()

    def _save(self) -> None:
        write_atomic(self.path, json.dumps(self.levels, indent=1, sort_keys=True) + "\n")


def apply_incremental(current: dict[str, str], ops: list[Any], defaults: dict[str, str] | None = None,
                      list_configs: frozenset[str] = frozenset()) -> dict[str, str]:
    """IncrementalAlterConfigs' SET (0), DELETE (1), APPEND (2) and SUBTRACT (3) on a config
    map. APPEND and SUBTRACT start from the value in force (``defaults`` when the map has
    none) and are only for list configs, as in Kafka."""
    out = dict(current)
    for c in ops:
        if c.config_operation == 0:
            out[c.name] = c.value
        elif c.config_operation == 1:
            out.pop(c.name, None)
        elif c.config_operation in (2, 3):
            if c.name not in list_configs:
                raise KafkaError(ErrorCode.INVALID_CONFIG,
                                 f"Config {c.name} is not a list: APPEND and SUBTRACT apply to list configs only")
            base = out.get(c.name, (defaults or {}).get(c.name, ""))
            items = [x.strip() for x in (base or "").split(",") if x.strip()]
            vals = [x.strip() for x in (c.value or "").split(",") if x.strip()]
            if c.config_operation == 2:
                items += [x for x in vals if x not in items]
            else:
                items = [x for x in items if x not in vals]
            out[c.name] = ",".join(items)
        else:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {c.config_operation}")
    return out
