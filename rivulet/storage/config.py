"""Topic-level log configuration: Kafka's topic config definitions (on the shared config
framework), their broker synonyms, and the DescribeConfigs entries of a topic."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rivulet.common.config import (
    LONG_MAX,
    LONG_MIN,
    ConfigDef,
    ConfigEntry,
    ConfigError,
    ConfigKey,
    ConfigSource,
    ConfigType,
    Importance,
    UpdateMode,
    Validator,
    at_least,
    between,
    each_of,
    one_of,
    parse_value,
)
from rivulet.protocol.errors import ApiError, ErrorCode

__all__ = ["ConfigEntry", "ConfigSource", "ConfigType", "LogConfig", "TOPIC_CONFIGS", "TOPIC_CONFIG_SYNONYMS",
           "TOPIC_LIST_CONFIGS", "describe_topic_configs", "segment_size_configs"]

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"
# Kafka 4.x's lower bound of segment.bytes and log.segment.bytes (internal.segment.bytes has none).
SEGMENT_BYTES_MIN = 1024 * 1024


def segment_size_configs(size: int) -> dict[str, str]:
    """The topic config giving an internal topic (__consumer_offsets, __transaction_state,
    __share_group_state) segments of ``size`` bytes. Their broker properties
    (``offsets.topic.segment.bytes`` ...) go down to 1 byte, below segment.bytes' bound, so a
    smaller size is set as ``internal.segment.bytes``, which has none."""
    key = "segment.bytes" if size >= SEGMENT_BYTES_MIN else "internal.segment.bytes"
    return {key: str(size)}


COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
ICEBERG_MODE_NONE = "none"
ICEBERG_KEY_VALUE = "key_value"
ICEBERG_SCHEMA_ID_PREFIX = "value_schema_id_prefix"
ICEBERG_SCHEMA_LATEST = "value_schema_latest"
ICEBERG_MODES = (ICEBERG_MODE_NONE, ICEBERG_KEY_VALUE, ICEBERG_SCHEMA_ID_PREFIX, ICEBERG_SCHEMA_LATEST)
ICEBERG_DROP = "drop"
ICEBERG_DLQ = "dlq"
# The columns of a key_value table that a partition spec may name, with their Iceberg types.
ICEBERG_SPEC_COLUMNS = {"key": "binary", "partition": "int", "offset": "long", "timestamp": "timestamptz"}
_TIME_TRANSFORMS = ("year", "month", "day", "hour")


@dataclass(frozen=True, slots=True)
class SpecField:
    """One field of ``iceberg.partition.spec``: a transform of a column (``width`` is bucket's
    count or truncate's width, else 0)."""

    transform: str  # identity, year, month, day, hour, bucket or truncate
    column: str
    width: int = 0


def parse_partition_spec(text: str) -> tuple[SpecField, ...]:
    """``iceberg.partition.spec``, as Redpanda writes it: ``(hour(timestamp), bucket(16, key))``,
    a column alone for identity, ``()`` for an unpartitioned table. Raises ValueError."""
    body = text.strip()
    if not (body.startswith("(") and body.endswith(")")):
        raise ValueError("a partition spec is a parenthesized list such as (hour(timestamp)); () for none")
    body = body[1:-1].strip()
    fields: list[SpecField] = []
    for item in _split_top_level(body) if body else []:
        fields.append(_spec_field(item.strip()))
    columns = [f.column for f in fields]
    if len(set(columns)) != len(columns):
        raise ValueError("each column may be partitioned by one transform only")
    return tuple(fields)


def _split_top_level(body: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, c in enumerate(body):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth < 0:
                raise ValueError("unbalanced parentheses")
        elif c == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    if depth:
        raise ValueError("unbalanced parentheses")
    parts.append(body[start:])
    return parts


def _spec_field(item: str) -> SpecField:
    if "(" not in item:
        column, transform, args = item, "identity", []
    else:
        transform, _, rest = item.partition("(")
        transform = transform.strip()
        if not rest.endswith(")"):
            raise ValueError(f"{item!r} is not transform(column)")
        args = [a.strip() for a in rest[:-1].split(",")]
        column = args[-1]
    if column not in ICEBERG_SPEC_COLUMNS:
        raise ValueError(f"unknown column {column!r}; a partition spec may name {', '.join(ICEBERG_SPEC_COLUMNS)}")
    if transform in _TIME_TRANSFORMS or transform == "identity":
        if transform != "identity" and column != "timestamp":
            raise ValueError(f"{transform} applies to timestamp only")
        if transform != "identity" and len(args) != 1:
            raise ValueError(f"{transform} takes one column")
        return SpecField(transform, column)
    if transform in ("bucket", "truncate"):
        if len(args) != 2 or not args[0].isdigit() or int(args[0]) < 1:
            raise ValueError(f"{transform} takes a positive width and a column: {transform}(16, key)")
        if column == "timestamp":
            raise ValueError(f"{transform} does not apply to timestamp")
        return SpecField(transform, column, int(args[0]))
    raise ValueError(f"unknown transform {transform!r}; known: identity, {', '.join(_TIME_TRANSFORMS)}, "
                     "bucket, truncate")


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
    # Kafka's internal.segment.bytes: when set, the segment size instead of segment.bytes, with
    # no lower bound (for tests that need small segments); not described unless set.
    internal_segment_bytes: int | None = None
    segment_index_bytes: int = 10 * 1024 * 1024
    segment_jitter_ms: int = 0
    segment_ms: int = 604_800_000
    unclean_leader_election_enable: bool = False
    # Tiered storage settings, accepted and reported as Kafka does; Rivulet keeps every
    # segment locally, so remote storage stays off.
    remote_storage_enable: bool = False
    local_retention_ms: int = -2  # -2: follow retention.ms
    local_retention_bytes: int = -2  # -2: follow retention.bytes
    remote_log_copy_disable: bool = False
    remote_log_delete_on_disable: bool = False
    # Topics as Iceberg tables (rivulet/iceberg, docs/iceberg.md).
    iceberg_mode: str = ICEBERG_MODE_NONE
    iceberg_target_lag_ms: int = 60_000
    iceberg_partition_spec: str = "(hour(timestamp))"
    iceberg_invalid_record_action: str = ICEBERG_DLQ
    iceberg_snapshot_max_age_ms: int = 432_000_000  # Iceberg's history.expire.max-snapshot-age-ms default: 5 days

    @property
    def segment_size(self) -> int:
        """The size at which a segment is rolled."""
        return self.segment_bytes if self.internal_segment_bytes is None else self.internal_segment_bytes

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

        Raises ``ApiError(INVALID_CONFIG)`` for unknown names or bad values.
        """
        base = defaults if defaults is not None else cls()
        for name in topic_overrides:  # Kafka's LogConfig.validateNames, before any value
            if TOPIC_CONFIGS.get(name) is None and INTERNAL_TOPIC_CONFIGS.get(name) is None:
                raise ApiError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
        changes: dict[str, Any] = {}
        # ConfigDef.parse reads the values in definition order: the first bad one there is reported.
        for name in sorted(topic_overrides, key=_definition_rank):
            raw = topic_overrides[name]
            key = TOPIC_CONFIGS.get(name) or INTERNAL_TOPIC_CONFIGS[name]
            try:
                changes[_attr(name)] = key.parse(raw)
            except ConfigError as e:
                raise _invalid(name, raw, e.reason) from None
        return dataclasses.replace(base, **changes) if changes else base

    @classmethod
    def from_broker_props(cls, props: Mapping[str, str]) -> LogConfig:
        """Build broker-wide defaults from server.properties names (log.segment.bytes, ...).

        Unrelated broker properties are ignored; bad values raise INVALID_CONFIG.
        """
        changes: dict[str, Any] = {}
        for key in TOPIC_CONFIGS:
            for broker_name, scale in _BROKER_SYNONYMS[key.name]:
                if broker_name in props and str(props[broker_name]).strip() != "":
                    changes[_attr(key.name)] = _from_broker(key, broker_name, str(props[broker_name]), scale)
                    break
        return cls(**changes)

    def to_props(self) -> dict[str, str]:
        """Every topic config as Kafka would print it."""
        # Each property is the LogConfig field _attr names (the table is TOPIC_CONFIGS).
        return {k.name: k.render(getattr(self, _attr(k.name))) or "" for k in TOPIC_CONFIGS}



# -- definitions -------------------------------------------------------------------------

def _gzip_level(v: int) -> str | None:
    return None if v == -1 or 1 <= v <= 9 else "Value must be -1 or between 1 and 9"


def _no_tiered_storage(enabled: bool) -> str | None:
    if enabled:
        return ("Tiered Storage functionality is disabled in the broker. Topic cannot be configured with "
                "remote log storage.")
    return None


def _iceberg_mode(mode: str) -> str | None:
    if mode not in ICEBERG_MODES:
        return f"String must be one of: {', '.join(ICEBERG_MODES)}"
    return None


def _partition_spec(text: str) -> str | None:
    try:
        parse_partition_spec(text)
    except ValueError as e:
        return str(e)
    return None


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(LogConfig)}


def _attr(name: str) -> str:
    return name.replace(".", "_")


def _t(name: str, ctype: ConfigType, validator: Validator | None, broker: tuple[tuple[str, int], ...],
       doc: str) -> tuple[ConfigKey, tuple[tuple[str, int], ...]]:
    key = ConfigKey(name, ctype, _DEFAULTS[_attr(name)], validator, doc, Importance.MEDIUM, UpdateMode.PER_TOPIC)
    return key, broker


_S, _I, _L, _D, _B, _LS = (ConfigType.STRING, ConfigType.INT, ConfigType.LONG, ConfigType.DOUBLE,
                           ConfigType.BOOLEAN, ConfigType.LIST)
_H, _M = 3_600_000, 60_000

# (definition, broker properties that set its default, most specific first, with the factor
# that converts their unit to the topic config's, e.g. hours -> ms), in Kafka 4.3's LogConfig
# definition order (see _RANKS), then Rivulet's own.
_DEFS = [
    _t("segment.bytes", _I, at_least(SEGMENT_BYTES_MIN), (("log.segment.bytes", 1),),
       "Size at which a segment is rolled; at least 1 MiB."),
    _t("segment.ms", _L, at_least(1), (("log.roll.ms", 1), ("log.roll.hours", _H)),
       "Age at which a segment is rolled even if not full."),
    _t("segment.jitter.ms", _L, at_least(0), (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", _H)),
       "Most random jitter subtracted from segment.ms."),
    _t("segment.index.bytes", _I, at_least(4), (("log.index.size.max.bytes", 1),),
       "Largest size of a segment's offset or time index."),
    _t("flush.messages", _L, at_least(1), (("log.flush.interval.messages", 1),),
       "Records appended before an fsync."),
    _t("flush.ms", _L, at_least(0), (("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1)),
       "Longest time a record waits before an fsync."),
    _t("retention.bytes", _L, None, (("log.retention.bytes", 1),),
       "Largest size of a partition before old segments are deleted; -1 for no limit."),
    _t("retention.ms", _L, at_least(-1),
       (("log.retention.ms", 1), ("log.retention.minutes", _M), ("log.retention.hours", _H)),
       "How long a segment is kept before it is deleted; -1 keeps it forever."),
    _t("max.message.bytes", _I, at_least(0), (("message.max.bytes", 1),), "Largest record batch accepted."),
    _t("index.interval.bytes", _I, at_least(0), (("log.index.interval.bytes", 1),),
       "Bytes of records between two offset-index entries."),
    _t("delete.retention.ms", _L, at_least(0), (("log.cleaner.delete.retention.ms", 1),),
       "How long tombstones and transaction markers survive compaction."),
    _t("min.compaction.lag.ms", _L, at_least(0), (("log.cleaner.min.compaction.lag.ms", 1),),
       "Youngest a record may be and still be compacted."),
    _t("max.compaction.lag.ms", _L, at_least(1), (("log.cleaner.max.compaction.lag.ms", 1),),
       "Oldest a record may get before its segment must be compacted."),
    _t("file.delete.delay.ms", _L, at_least(0), (("log.segment.delete.delay.ms", 1),),
       "Wait before a deleted segment's files are removed."),
    _t("min.cleanable.dirty.ratio", _D, between(0, 1), (("log.cleaner.min.cleanable.ratio", 1),),
       "Dirty share of the log above which it is compacted."),
    _t("cleanup.policy", _LS, each_of("compact", "delete"), (("log.cleanup.policy", 1),),
       "delete removes old segments by time and size; compact keeps the latest record per key; both may be given."),
    _t("unclean.leader.election.enable", _B, None, (("unclean.leader.election.enable", 1),),
       "Allow an out-of-sync replica to lead (accepted; one replica here)."),
    _t("min.insync.replicas", _I, at_least(1), (("min.insync.replicas", 1),),
       "Replicas that must have a write before acks=all is answered."),
    _t("compression.type", _S, one_of(*COMPRESSION_TYPES), (("compression.type", 1),),
       "Codec batches are stored with; producer keeps the producer's own."),
    _t("compression.gzip.level", _I, _gzip_level, (("compression.gzip.level", 1),),
       "gzip level used when the broker compresses."),
    _t("compression.lz4.level", _I, between(1, 17), (("compression.lz4.level", 1),),
       "lz4 level used when the broker compresses."),
    _t("compression.zstd.level", _I, between(-131072, 22), (("compression.zstd.level", 1),),
       "zstd level used when the broker compresses."),
    _t("preallocate", _B, None, (("log.preallocate", 1),), "Preallocate segment files (accepted; no effect)."),
    _t("message.timestamp.type", _S, one_of(CREATE_TIME, LOG_APPEND_TIME), (("log.message.timestamp.type", 1),),
       "CreateTime keeps the producer's timestamps; LogAppendTime stamps batches with the broker's clock."),
    _t("message.timestamp.before.max.ms", _L, at_least(0), (("log.message.timestamp.before.max.ms", 1),),
       "How far in the past a CreateTime timestamp may be."),
    _t("message.timestamp.after.max.ms", _L, at_least(0), (("log.message.timestamp.after.max.ms", 1),),
       "How far in the future a CreateTime timestamp may be."),
    _t("leader.replication.throttled.replicas", _LS, None, (),
       "Leader replicas whose replication is throttled (accepted; Rivulet does not throttle)."),
    _t("follower.replication.throttled.replicas", _LS, None, (),
       "Follower replicas whose replication is throttled (accepted; Rivulet does not throttle)."),
    _t("remote.storage.enable", _B, _no_tiered_storage, (),
       "Tier old segments to remote storage. Rivulet has no tiered storage, so only false is accepted."),
    _t("local.retention.ms", _L, at_least(-2), (("log.local.retention.ms", 1),),
       "With remote storage, how long segments stay on local disk; -2 follows retention.ms."),
    _t("local.retention.bytes", _L, at_least(-2), (("log.local.retention.bytes", 1),),
       "With remote storage, local size limit of a partition; -2 follows retention.bytes."),
    _t("remote.log.copy.disable", _B, None, (), "Stop copying segments to remote storage (accepted; no effect)."),
    _t("remote.log.delete.on.disable", _B, None, (),
       "Delete remote data when remote storage is turned off (accepted; no effect)."),
    # Topics as Iceberg tables (Redpanda's redpanda.iceberg.* without the prefix; docs/iceberg.md).
    _t("iceberg.mode", _S, _iceberg_mode, (),
       "Whether the topic is also an Iceberg table (rivulet.<topic> in the broker's catalog): none, or "
       "key_value (key and value as bytes with partition, offset, timestamp and headers), "
       "value_schema_id_prefix (values in the schema registry's wire format become a typed value column from "
       "their registered schema) or value_schema_latest (unprefixed values read with the subject <topic>-value's "
       "latest schema)."),
    _t("iceberg.target.lag.ms", _L, at_least(1), (),
       "How stale the table may get: records are committed to it within about this long of being committed "
       "to the log."),
    _t("iceberg.partition.spec", _S, _partition_spec, (),
       "The table's partitioning: transforms of its columns in parentheses, such as (hour(timestamp)), "
       "(day(timestamp), bucket(16, key)) or () for none; read when the table is created."),
    _t("iceberg.invalid.record.action", _S, one_of(ICEBERG_DROP, ICEBERG_DLQ), (),
       "What happens to a record the table's schema cannot hold (the schema modes): drop it (counted and "
       "logged), or dlq, put it with the reason in the dead-letter table rivulet.<topic>~dlq. key_value holds "
       "every record."),
    _t("iceberg.snapshot.max.age.ms", _L, at_least(-1), (),
       "How long the table's snapshots are kept before its commits expire them (rows are never removed; the "
       "current snapshot always stays); -1 keeps them all. Also set as the table's "
       "history.expire.max-snapshot-age-ms, so that an engine's expire_snapshots uses the same age."),
]

TOPIC_CONFIGS = ConfigDef(key for key, _ in _DEFS)
# Topic configs Kafka defines as internal: a client may set them, DescribeConfigs shows them
# only where set, and they are not documented.
INTERNAL_TOPIC_CONFIGS = ConfigDef([
    ConfigKey("internal.segment.bytes", _I, None, None, "Size at which a segment is rolled, instead of "
              "segment.bytes and without its lower bound; for tests only.", Importance.LOW, UpdateMode.PER_TOPIC),
])
_BROKER_SYNONYMS: dict[str, tuple[tuple[str, int], ...]] = {key.name: broker for key, broker in _DEFS}
# ConfigDef.parse reads the values in definition order and reports the first bad one: the
# definitions above are in Kafka 4.3's LogConfig order, internal.segment.bytes (its last) after
# Rivulet's own iceberg.* ones, whose place Kafka does not fix.
_RANKS = {name: i for i, name in enumerate((*TOPIC_CONFIGS.names(), *INTERNAL_TOPIC_CONFIGS.names()))}


def _definition_rank(name: str) -> int:
    return _RANKS[name]
# Topic config name -> broker property names that set its default (DescribeConfigs synonyms).
# Broker configs whose Kafka default is null (a coarser one, such as log.retention.hours, is
# used): Kafka lists no DEFAULT_CONFIG synonym for the topic config they stand for.
_BROKER_NAMES_WITHOUT_DEFAULT = frozenset({"log.retention.ms", "log.roll.ms", "log.roll.jitter.ms",
                                           "log.flush.interval.ms"})
TOPIC_CONFIG_SYNONYMS: dict[str, tuple[str, ...]] = {n: tuple(b for b, _ in s) for n, s in _BROKER_SYNONYMS.items()}
# Topic configs whose value is a list (IncrementalAlterConfigs APPEND/SUBTRACT).
TOPIC_LIST_CONFIGS = frozenset(k.name for k in TOPIC_CONFIGS if k.type is ConfigType.LIST)

assert {*TOPIC_CONFIGS.names(), *INTERNAL_TOPIC_CONFIGS.names()} == {
    f.name.replace("_", ".") for f in dataclasses.fields(LogConfig)}


def _invalid(name: str, raw: Any, reason: str) -> ApiError:
    return ApiError(ErrorCode.INVALID_CONFIG, f"Invalid value {raw} for configuration {name}: {reason}")


def _from_broker(key: ConfigKey, broker_name: str, raw: str, scale: int) -> Any:
    """A broker synonym's value in the topic config's unit."""
    try:
        value = parse_value(key.type, raw)
    except ValueError as e:
        raise _invalid(broker_name, raw, str(e)) from None
    if key.type in (ConfigType.INT, ConfigType.LONG):
        value = max(LONG_MIN, min(LONG_MAX, value * scale))
        if key.name == "retention.ms" and value < 0:
            value = -1  # the broker reads any negative retention as "no limit"
    reason = key.validator(value) if key.validator is not None else None
    if reason:
        raise _invalid(broker_name, raw, reason)
    return value


# -- DescribeConfigs -------------------------------------------------------------------


def describe_topic_configs(
    overrides: Mapping[str, str],
    defaults: LogConfig,
    broker_props: Mapping[str, str] | None = None,
    dynamic_levels: Sequence[tuple[Mapping[str, str], ConfigSource]] = (),
) -> list[ConfigEntry]:
    """Every topic config with its effective value and where that value comes from.

    ``overrides`` are the topic's own settings; ``defaults`` the broker-wide
    LogConfig. With ``broker_props`` (server.properties) a default counts as a
    static broker setting only if one of its broker names was set there; without
    it, any value differing from Kafka's own default does. ``dynamic_levels`` are the
    dynamic broker configs, most specific first, each with its source. Topic configs
    are never read-only.
    """
    out: list[ConfigEntry] = []
    for key in sorted(TOPIC_CONFIGS, key=lambda k: k.name):
        broker = _BROKER_SYNONYMS[key.name]
        kafka_default = key.render(key.default) or ""
        broker_value = key.render(getattr(defaults, _attr(key.name))) or ""
        synonyms: list[tuple[str, str | None, ConfigSource]] = []
        if key.name in overrides:
            synonyms.append((key.name, str(overrides[key.name]).strip(), ConfigSource.DYNAMIC_TOPIC_CONFIG))
        for values, level_source in dynamic_levels:
            synonyms += [(b, str(values[b]).strip(), level_source) for b, _ in broker if b in values]
        if broker_props is not None:
            for b, _ in broker:
                if b in broker_props:
                    synonyms.append((b, str(broker_props[b]).strip(), ConfigSource.STATIC_BROKER_CONFIG))
        elif broker and broker_value != kafka_default:
            synonyms.append((broker[0][0], broker_value, ConfigSource.STATIC_BROKER_CONFIG))
        if broker and broker[0][0] not in _BROKER_NAMES_WITHOUT_DEFAULT:
            synonyms.append((broker[0][0], kafka_default, ConfigSource.DEFAULT_CONFIG))
        value: str | None
        if key.name in overrides:
            value, source = synonyms[0][1], ConfigSource.DYNAMIC_TOPIC_CONFIG
        elif synonyms and synonyms[0][2] is not ConfigSource.DEFAULT_CONFIG:
            value, source = broker_value, synonyms[0][2]
        else:
            value, source = broker_value, ConfigSource.DEFAULT_CONFIG
        out.append(
            ConfigEntry(
                name=key.name,
                value=value,
                is_default=source is ConfigSource.DEFAULT_CONFIG,
                source=source,
                config_type=key.type,
                read_only=False,
                sensitive=key.sensitive,
                synonyms=tuple(synonyms),
                documentation=key.doc,
            )
        )
    for key in INTERNAL_TOPIC_CONFIGS:
        if key.name in overrides:
            value = str(overrides[key.name]).strip()
            out.append(ConfigEntry(name=key.name, value=value, is_default=False, source=ConfigSource.DYNAMIC_TOPIC_CONFIG,
                                   config_type=key.type, read_only=False, sensitive=key.sensitive,
                                   synonyms=((key.name, value, ConfigSource.DYNAMIC_TOPIC_CONFIG),),
                                   documentation=key.doc))
    return sorted(out, key=lambda e: e.name)
