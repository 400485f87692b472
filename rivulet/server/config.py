"""Broker configuration, by Kafka's property names.

Every property Rivulet reads has a type, a default and (where it matters) a check. Kafka's
common deployment properties that have no meaning for a single Python process (thread
counts, socket buffers, quorum settings) are accepted and ignored, so an existing
server.properties works unchanged; any other unknown name stops start-up with a clear message.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

LONG_MAX = 2**63 - 1


class ConfigError(ValueError):
    """An unknown or invalid broker property."""


def _bool(v: str) -> bool:
    s = v.strip().lower()
    if s not in ("true", "false"):
        raise ValueError("expected true or false")
    return s == "true"


def _list(v: str) -> list[str]:
    return [x.strip() for x in v.split(",") if x.strip()]


@dataclass(frozen=True)
class Prop:
    name: str
    parse: Callable[[str], Any]
    default: Any
    check: Callable[[Any], bool] | None = None
    doc: str = ""


def _p(name: str, parse: Callable[[str], Any], default: Any, check: Callable[[Any], bool] | None = None,
       doc: str = "") -> Prop:
    return Prop(name, parse, default, check, doc)


_nonneg = lambda x: x >= 0  # noqa: E731
_pos = lambda x: x > 0  # noqa: E731

PROPS: dict[str, Prop] = {p.name: p for p in [
    _p("node.id", int, 1, _nonneg),
    _p("broker.id", int, None),
    _p("process.roles", _list, ["broker", "controller"]),
    _p("listeners", _list, ["PLAINTEXT://127.0.0.1:9092"]),
    _p("advertised.listeners", _list, None),
    _p("listener.security.protocol.map", str, "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"),
    _p("inter.broker.listener.name", str, "PLAINTEXT"),
    _p("controller.listener.names", str, "CONTROLLER"),
    _p("cluster.id", str, None),
    _p("log.dirs", _list, None),
    _p("log.dir", _list, ["./rivulet-data"]),
    _p("num.partitions", int, 1, _pos),
    _p("default.replication.factor", int, 1, _pos),
    _p("auto.create.topics.enable", _bool, True),
    _p("delete.topic.enable", _bool, True),
    _p("log.retention.ms", int, None),
    _p("log.retention.minutes", int, None),
    _p("log.retention.hours", int, 168),
    _p("log.retention.bytes", int, -1),
    _p("log.segment.bytes", int, 1073741824, lambda x: x >= 14),
    _p("log.roll.ms", int, None),
    _p("log.roll.hours", int, 168, _pos),
    _p("log.segment.delete.delay.ms", int, 60000, _nonneg),
    _p("log.index.interval.bytes", int, 4096, _nonneg),
    _p("log.index.size.max.bytes", int, 10485760, lambda x: x >= 4),
    _p("log.flush.interval.messages", int, LONG_MAX, _pos),
    _p("log.flush.interval.ms", int, None),
    _p("log.flush.scheduler.interval.ms", int, LONG_MAX),
    _p("log.flush.offset.checkpoint.interval.ms", int, 60000, _nonneg),
    _p("log.flush.start.offset.checkpoint.interval.ms", int, 60000, _nonneg),
    _p("log.retention.check.interval.ms", int, 300000, _pos),
    _p("log.cleanup.policy", _list, ["delete"]),
    _p("log.cleaner.enable", _bool, True),
    _p("log.cleaner.backoff.ms", int, 15000, _nonneg),
    _p("log.cleaner.delete.retention.ms", int, 86400000, _nonneg),
    _p("log.cleaner.min.compaction.lag.ms", int, 0, _nonneg),
    _p("log.cleaner.min.cleanable.ratio", float, 0.5),
    _p("log.message.timestamp.type", str, "CreateTime", lambda x: x in ("CreateTime", "LogAppendTime")),
    _p("log.message.timestamp.before.max.ms", int, LONG_MAX, _nonneg),
    _p("log.message.timestamp.after.max.ms", int, 3600000, _nonneg),
    _p("message.max.bytes", int, 1048588, _nonneg),
    _p("compression.type", str, "producer",
       lambda x: x in ("producer", "none", "gzip", "snappy", "lz4", "zstd", "uncompressed")),
    _p("min.insync.replicas", int, 1, _pos),
    _p("socket.request.max.bytes", int, 104857600, _pos),
    _p("connections.max.idle.ms", int, 600000, _pos),
    _p("replica.fetch.max.bytes", int, 1048576),
    _p("fetch.max.bytes", int, 57671680, _nonneg),
    _p("group.initial.rebalance.delay.ms", int, 3000, _nonneg),
    _p("group.min.session.timeout.ms", int, 6000, _nonneg),
    _p("group.max.session.timeout.ms", int, 1800000, _nonneg),
    _p("group.max.size", int, 2147483647, _pos),
    _p("offsets.topic.num.partitions", int, 50, _pos),
    _p("offsets.topic.replication.factor", int, 3, _pos),
    _p("offsets.topic.segment.bytes", int, 104857600, _pos),
    _p("offsets.retention.minutes", int, 10080, _pos),
    _p("offsets.retention.check.interval.ms", int, 600000, _pos),
    _p("offsets.commit.timeout.ms", int, 5000, _pos),
    _p("offset.metadata.max.bytes", int, 4096, _nonneg),
    _p("transaction.state.log.num.partitions", int, 50, _pos),
    _p("transaction.max.timeout.ms", int, 900000, _pos),
    _p("transactional.id.expiration.ms", int, 604800000, _pos),
    _p("transaction.state.log.segment.bytes", int, 104857600, _pos),
    _p("transaction.partition.verification.enable", _bool, True),
    _p("transaction.state.log.load.buffer.size", int, 5242880, _pos),
    _p("transaction.abort.timed.out.transaction.cleanup.interval.ms", int, 10000, _pos),
    _p("transaction.remove.expired.transaction.cleanup.interval.ms", int, 3600000, _pos),
    _p("producer.id.expiration.ms", int, 86400000, _pos),
    _p("producer.id.expiration.check.interval.ms", int, 600000, _pos),
    _p("fetch.purgatory.purge.interval.requests", int, 1000, _pos),
    _p("producer.purgatory.purge.interval.requests", int, 1000, _pos),
]}

# Properties whose value is a comma-separated list (IncrementalAlterConfigs APPEND/SUBTRACT).
LIST_PROPERTIES = frozenset(name for name, prop in PROPS.items() if prop.parse is _list)

# Kafka properties that a stock server.properties carries but that mean nothing here.
ACCEPTED_WITHOUT_EFFECT = {
    "num.network.threads", "num.io.threads", "socket.send.buffer.bytes", "socket.receive.buffer.bytes",
    "num.recovery.threads.per.data.dir", "transaction.state.log.replication.factor",
    "transaction.state.log.min.isr", "controller.quorum.voters", "controller.quorum.bootstrap.servers",
    "num.replica.fetchers", "queued.max.requests", "background.threads", "log.preallocate",
    "unclean.leader.election.enable", "replica.lag.time.max.ms", "auto.leader.rebalance.enable",
    "share.coordinator.state.topic.replication.factor", "share.coordinator.state.topic.min.isr",
    "group.coordinator.rebalance.protocols", "log.cleaner.threads", "confluent.support.metrics.enable",
    "metadata.log.dir", "initial.broker.registration.timeout.ms", "controller.quorum.election.timeout.ms",
}


class BrokerConfig:
    """Typed access to broker properties: ``cfg["log.segment.bytes"]``."""

    def __init__(self, props: dict[str, str] | None = None) -> None:
        self.originals = dict(props or {})
        self._values: dict[str, Any] = {}
        errors = []
        for name, raw in self.originals.items():
            if name in ACCEPTED_WITHOUT_EFFECT:
                continue
            prop = PROPS.get(name)
            if prop is None:
                errors.append(f"unknown property '{name}'")
                continue
            try:
                value = prop.parse(str(raw))
            except ValueError as e:
                errors.append(f"invalid value '{raw}' for '{name}': {e}")
                continue
            if prop.check is not None and not prop.check(value):
                errors.append(f"invalid value '{raw}' for '{name}'")
                continue
            self._values[name] = value
        if errors:
            raise ConfigError("; ".join(errors))
        self.listeners = [parse_listener(x) for x in self["listeners"]]
        adv = self["advertised.listeners"]
        self.advertised_listeners = [parse_listener(x) for x in adv] if adv else self.listeners
        for name, host, port in self.advertised_listeners:
            if host in ("", "0.0.0.0", "::"):
                raise ConfigError(f"advertised listener {name} needs a concrete host, not '{host}'")

    def __getitem__(self, name: str) -> Any:
        if name in self._values:
            return self._values[name]
        return PROPS[name].default

    def is_set(self, name: str) -> bool:
        return name in self._values

    @property
    def node_id(self) -> int:
        return self["broker.id"] if self.is_set("broker.id") and not self.is_set("node.id") else self["node.id"]

    @property
    def log_dirs(self) -> list[str]:
        return self["log.dirs"] or self["log.dir"]

    @property
    def retention_ms(self) -> int:
        if self["log.retention.ms"] is not None:
            return self["log.retention.ms"]
        if self["log.retention.minutes"] is not None:
            return self["log.retention.minutes"] * 60_000
        return self["log.retention.hours"] * 3_600_000

    @property
    def roll_ms(self) -> int:
        if self["log.roll.ms"] is not None:
            return self["log.roll.ms"]
        return self["log.roll.hours"] * 3_600_000

    def items(self) -> dict[str, Any]:
        """Every known property with its effective value, for DescribeConfigs on the broker."""
        return {name: self[name] for name in PROPS}


def parse_listener(spec: str) -> tuple[str, str, int]:
    """'PLAINTEXT://host:port' -> (name, host, port)."""
    if "://" not in spec:
        raise ConfigError(f"listener '{spec}' is not of the form NAME://host:port")
    name, rest = spec.split("://", 1)
    host, sep, port = rest.rpartition(":")
    if not sep:
        raise ConfigError(f"listener '{spec}' has no port")
    try:
        p = int(port)
    except ValueError:
        raise ConfigError(f"listener '{spec}' has a bad port") from None
    if not 0 <= p <= 65535:
        raise ConfigError(f"listener '{spec}' has a bad port")
    return name, host.strip("[]"), p


def load_properties(path: str | Path) -> dict[str, str]:
    """Read a Java-style .properties file (key=value or key: value, # and ! comments)."""
    props: dict[str, str] = {}
    text = Path(path).read_text()
    for lineno, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s[0] in "#!":
            continue
        for sep in ("=", ":"):
            if sep in s:
                k, v = s.split(sep, 1)
                props[k.strip()] = v.strip()
                break
        else:
            raise ConfigError(f"{path}:{lineno}: expected key=value, got '{s}'")
    return props
