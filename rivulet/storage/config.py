"""Topic-level log configuration, with Kafka's names, defaults, validation and broker synonyms."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from rivulet.protocol.errors import ErrorCode, KafkaError

LONG_MAX = (1 << 63) - 1
LONG_MIN = -(1 << 63)
INT_MAX = (1 << 31) - 1
INT_MIN = -(1 << 31)

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")


class ConfigType(IntEnum):
    """DescribeConfigs ``config_type`` codes."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(IntEnum):
    """DescribeConfigs ``config_source`` codes."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Per-topic log settings; attribute names are Kafka's with '.' -> '_'."""

    cleanup_policy: tuple[str, ...] = ("delete",)
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    delete_retention_ms: int = 86_400_000
    file_delete_delay_ms: int = 60_000
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    follower_replication_throttled_replicas: tuple[str, ...] = ()
    index_interval_bytes: int = 4096
    leader_replication_throttled_replicas: tuple[str, ...] = ()
    max_compaction_lag_ms: int = LONG_MAX
    max_message_bytes: int = 1_048_588
    message_timestamp_after_max_ms: int = 3_600_000  # Kafka 4 (KIP-937): one hour
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_type: str = CREATE_TIME
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    min_insync_replicas: int = 1
    preallocate: bool = False
    retention_bytes: int = -1
    retention_ms: int = 604_800_000
    segment_bytes: int = 1 << 30
    segment_index_bytes: int = 10 * 1024 * 1024
    segment_jitter_ms: int = 0
    segment_ms: int = 604_800_000
    unclean_leader_election_enable: bool = False

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == LOG_APPEND_TIME

    @property
    def delete_enabled(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def compact_enabled(self) -> bool:
        return "compact" in self.cleanup_policy

    @classmethod
    def from_props(cls, topic_overrides: Mapping[str, str], defaults: LogConfig | None = None) -> LogConfig:
        """Apply topic-level overrides (Kafka names, string values) on top of ``defaults``.

        Raises ``KafkaError(INVALID_CONFIG)`` for unknown names or bad values.
        """
        base = defaults if defaults is not None else cls()
        changes: dict[str, Any] = {}
        for name, raw in topic_overrides.items():
            d = TOPIC_CONFIGS.get(name)
            if d is None:
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
            changes[d.attr] = d.parse(name, raw)
        return dataclasses.replace(base, **changes) if changes else base

    @classmethod
    def from_broker_props(cls, props: Mapping[str, str]) -> LogConfig:
        """Build broker-wide defaults from server.properties names (log.segment.bytes, ...).

        Unrelated broker properties are ignored; bad values raise INVALID_CONFIG.
        """
        changes: dict[str, Any] = {}
        for d in TOPIC_CONFIGS.values():
            for broker_name, scale in d.broker:
                if broker_name in props and str(props[broker_name]).strip() != "":
                    changes[d.attr] = d.parse(broker_name, str(props[broker_name]), scale=scale, broker=True)
                    break
        return cls(**changes)

    def to_props(self) -> dict[str, str]:
        """Every topic config as Kafka would print it."""
        return {d.name: d.render(getattr(self, d.attr)) for d in TOPIC_CONFIGS.values()}


# -- definitions ---------------------------------------------------------------------

Check = Callable[[Any], "str | None"]


def _at_least(n: int | float) -> Check:
    return lambda v: None if v >= n else f"Value must be at least {n}"


def _between(lo: int | float, hi: int | float) -> Check:
    return lambda v: None if lo <= v <= hi else f"Value must be between {lo} and {hi}"


def _one_of(*choices: str) -> Check:
    return lambda v: None if v in choices else f"String must be one of: {', '.join(choices)}"


def _list_of(*choices: str) -> Check:
    def check(v: tuple[str, ...]) -> str | None:
        bad = [x for x in v if x not in choices]
        return f"Invalid value(s) {', '.join(bad)}; valid values are {', '.join(choices)}" if bad else None

    return check


def _gzip_level(v: int) -> str | None:
    return None if v == -1 or 1 <= v <= 9 else "Value must be -1 or between 1 and 9"


@dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    type: ConfigType
    check: Check | None = None
    # Broker properties that set the default, most specific first, with the factor
    # that converts their unit to this config's (e.g. hours -> ms).
    broker: tuple[tuple[str, int], ...] = ()
    doc: str = ""

    @property
    def attr(self) -> str:
        return self.name.replace(".", "_")

    @property
    def default(self) -> Any:
        return _KAFKA_DEFAULTS[self.attr]

    def parse(self, name: str, raw: str, scale: int = 1, broker: bool = False) -> Any:
        text = str(raw).strip()

        def bad(reason: str) -> KafkaError:
            return KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid value {raw!r} for configuration {name}: {reason}")

        t = self.type
        value: Any
        if t in (ConfigType.INT, ConfigType.LONG, ConfigType.SHORT):
            try:
                value = int(text)
            except ValueError:
                raise bad("Not a number of type " + t.name) from None
            lo, hi = (INT_MIN, INT_MAX) if t is ConfigType.INT else (LONG_MIN, LONG_MAX)
            if not lo <= value <= hi:
                raise bad(f"Not a number of type {t.name}")
            value = max(LONG_MIN, min(LONG_MAX, value * scale))
            if broker and self.name == "retention.ms" and value < 0:
                value = -1  # the broker reads any negative retention as "no limit"
        elif t is ConfigType.DOUBLE:
            try:
                value = float(text)
            except ValueError:
                raise bad("Not a number of type DOUBLE") from None
        elif t is ConfigType.BOOLEAN:
            low = text.lower()
            if low not in ("true", "false"):
                raise bad("Expected value to be either true or false")
            value = low == "true"
        elif t is ConfigType.LIST:
            value = tuple(x.strip() for x in text.split(",") if x.strip())
        else:
            value = text
        if self.check is not None:
            reason = self.check(value)
            if reason:
                raise bad(reason)
        return value

    def render(self, value: Any) -> str:
        if self.type is ConfigType.BOOLEAN:
            return "true" if value else "false"
        if self.type is ConfigType.LIST:
            return ",".join(value)
        return str(value)


_KAFKA_DEFAULTS = {f.name: f.default for f in dataclasses.fields(LogConfig)}

_DEFS = [
    ConfigDef("cleanup.policy", ConfigType.LIST, _list_of("compact", "delete"), (("log.cleanup.policy", 1),)),
    ConfigDef("compression.type", ConfigType.STRING, _one_of(*COMPRESSION_TYPES), (("compression.type", 1),)),
    ConfigDef("compression.gzip.level", ConfigType.INT, _gzip_level, (("compression.gzip.level", 1),)),
    ConfigDef("compression.lz4.level", ConfigType.INT, _between(1, 17), (("compression.lz4.level", 1),)),
    ConfigDef("compression.zstd.level", ConfigType.INT, _between(-131072, 22), (("compression.zstd.level", 1),)),
    ConfigDef(
        "delete.retention.ms", ConfigType.LONG, _at_least(0), (("log.cleaner.delete.retention.ms", 1),)
    ),
    ConfigDef("file.delete.delay.ms", ConfigType.LONG, _at_least(0), (("log.segment.delete.delay.ms", 1),)),
    ConfigDef("flush.messages", ConfigType.LONG, _at_least(1), (("log.flush.interval.messages", 1),)),
    ConfigDef(
        "flush.ms",
        ConfigType.LONG,
        _at_least(0),
        (("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1)),
    ),
    ConfigDef("follower.replication.throttled.replicas", ConfigType.LIST),
    ConfigDef("index.interval.bytes", ConfigType.INT, _at_least(0), (("log.index.interval.bytes", 1),)),
    ConfigDef("leader.replication.throttled.replicas", ConfigType.LIST),
    ConfigDef(
        "max.compaction.lag.ms", ConfigType.LONG, _at_least(1), (("log.cleaner.max.compaction.lag.ms", 1),)
    ),
    ConfigDef("max.message.bytes", ConfigType.INT, _at_least(0), (("message.max.bytes", 1),)),
    ConfigDef(
        "message.timestamp.after.max.ms",
        ConfigType.LONG,
        _at_least(0),
        (("log.message.timestamp.after.max.ms", 1),),
    ),
    ConfigDef(
        "message.timestamp.before.max.ms",
        ConfigType.LONG,
        _at_least(0),
        (("log.message.timestamp.before.max.ms", 1),),
    ),
    ConfigDef(
        "message.timestamp.type",
        ConfigType.STRING,
        _one_of(CREATE_TIME, LOG_APPEND_TIME),
        (("log.message.timestamp.type", 1),),
    ),
    ConfigDef(
        "min.cleanable.dirty.ratio", ConfigType.DOUBLE, _between(0, 1), (("log.cleaner.min.cleanable.ratio", 1),)
    ),
    ConfigDef(
        "min.compaction.lag.ms", ConfigType.LONG, _at_least(0), (("log.cleaner.min.compaction.lag.ms", 1),)
    ),
    ConfigDef("min.insync.replicas", ConfigType.INT, _at_least(1), (("min.insync.replicas", 1),)),
    ConfigDef("preallocate", ConfigType.BOOLEAN, None, (("log.preallocate", 1),)),
    ConfigDef("retention.bytes", ConfigType.LONG, None, (("log.retention.bytes", 1),)),
    ConfigDef(
        "retention.ms",
        ConfigType.LONG,
        _at_least(-1),
        (("log.retention.ms", 1), ("log.retention.minutes", 60_000), ("log.retention.hours", 3_600_000)),
    ),
    ConfigDef("segment.bytes", ConfigType.INT, _at_least(14), (("log.segment.bytes", 1),)),
    ConfigDef("segment.index.bytes", ConfigType.INT, _at_least(4), (("log.index.size.max.bytes", 1),)),
    ConfigDef(
        "segment.jitter.ms",
        ConfigType.LONG,
        _at_least(0),
        (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", 3_600_000)),
    ),
    ConfigDef(
        "segment.ms", ConfigType.LONG, _at_least(1), (("log.roll.ms", 1), ("log.roll.hours", 3_600_000))
    ),
    ConfigDef(
        "unclean.leader.election.enable",
        ConfigType.BOOLEAN,
        None,
        (("unclean.leader.election.enable", 1),),
    ),
]

TOPIC_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in _DEFS}
# Topic config name -> broker property names that set its default (DescribeConfigs synonyms).
TOPIC_CONFIG_SYNONYMS: dict[str, tuple[str, ...]] = {d.name: tuple(b for b, _ in d.broker) for d in _DEFS}

assert set(TOPIC_CONFIGS) == {f.name.replace("_", ".") for f in dataclasses.fields(LogConfig)}


# -- DescribeConfigs -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str
    is_default: bool
    source: ConfigSource
    config_type: ConfigType
    read_only: bool = False
    sensitive: bool = False
    # (name, value, source), most specific first, as DescribeConfigs lists synonyms.
    synonyms: tuple[tuple[str, str, ConfigSource], ...] = ()


def describe_topic_configs(
    overrides: Mapping[str, str],
    defaults: LogConfig,
    broker_props: Mapping[str, str] | None = None,
) -> list[ConfigEntry]:
    """Every topic config with its effective value and where that value comes from.

    ``overrides`` are the topic's own settings; ``defaults`` the broker-wide
    LogConfig. With ``broker_props`` (server.properties) a default counts as a
    static broker setting only if one of its broker names was set there; without
    it, any value differing from Kafka's own default does.
    """
    out: list[ConfigEntry] = []
    for d in sorted(TOPIC_CONFIGS.values(), key=lambda d: d.name):
        kafka_default = d.render(d.default)
        broker_value = d.render(getattr(defaults, d.attr))
        synonyms: list[tuple[str, str, ConfigSource]] = []
        if d.name in overrides:
            synonyms.append((d.name, str(overrides[d.name]).strip(), ConfigSource.DYNAMIC_TOPIC_CONFIG))
        if broker_props is not None:
            for b, _ in d.broker:
                if b in broker_props:
                    synonyms.append((b, str(broker_props[b]).strip(), ConfigSource.STATIC_BROKER_CONFIG))
        elif d.broker and broker_value != kafka_default:
            synonyms.append((d.broker[0][0], broker_value, ConfigSource.STATIC_BROKER_CONFIG))
        if d.broker:
            synonyms.append((d.broker[0][0], kafka_default, ConfigSource.DEFAULT_CONFIG))
        if d.name in overrides:
            value, source = synonyms[0][1], ConfigSource.DYNAMIC_TOPIC_CONFIG
        elif synonyms and synonyms[0][2] is ConfigSource.STATIC_BROKER_CONFIG:
            value, source = broker_value, ConfigSource.STATIC_BROKER_CONFIG
        else:
            value, source = broker_value, ConfigSource.DEFAULT_CONFIG
        out.append(
            ConfigEntry(
                name=d.name,
                value=value,
                is_default=source is ConfigSource.DEFAULT_CONFIG,
                source=source,
                config_type=d.type,
                synonyms=tuple(synonyms),
            )
        )
    return out
