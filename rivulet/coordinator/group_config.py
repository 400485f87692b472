"""Group configs: the per-group settings a GROUP config resource (type 32) holds, the 17 that
Kafka 4.3.1's GroupConfig defines (KIP-848, KIP-932 share groups, KIP-1071 streams groups),
with its defaults, bounds and error messages (checked against a 4.3.1 broker).

A group's overrides are set with IncrementalAlterConfigs (or AlterConfigs) and need no group:
clients set up a share group before its first member joins. Each name's default is the
broker's ``group.<name>`` property where one exists (``group.consumer.session.timeout.ms``
...), else the group config's own default. Values are validated as Kafka does: the type and
lower bound of each definition, then the broker's min/max bounds, then a session timeout
longer than its heartbeat interval (INVALID_CONFIG).

``GroupConfigs`` holds every group's overrides, keeps them in a ``GroupConfigStore`` (one
node's dynamic configs file, or ZooKeeper's /config/groups/<group> in a cluster) and gives
the coordinator each group's values in force (``get``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from rivulet.common.config import ConfigDef, ConfigError, ConfigKey, ConfigType, UpdateMode, at_least, one_of
from rivulet.coordinator.consumer_heartbeat import ConsumerGroupConfig
from rivulet.coordinator.share_group import ShareGroupConfig
from rivulet.coordinator.streams_group import StreamsGroupConfig
from rivulet.protocol.errors import ApiError, ErrorCode

_I, _S, _B = ConfigType.INT, ConfigType.STRING, ConfigType.BOOLEAN
_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$", re.IGNORECASE)


def _auto_offset_reset(v: Any) -> str | None:
    text = str(v).strip().lower()
    if text in ("earliest", "latest"):
        return None
    if text.startswith("by_duration:"):
        m = _DURATION.match(text[len("by_duration:"):].strip())
        if m and any(m.groups()):
            return None
    return (f"Invalid value `{v}` for configuration share.auto.offset.reset. The value must be either 'earliest', "
            "'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.")


def _key(name: str, ctype: ConfigType, default: Any, validator: Any, doc: str) -> ConfigKey:
    return ConfigKey(name, ctype, default, validator, doc, update_mode=UpdateMode.PER_TOPIC)


GROUP_CONFIGS = ConfigDef([
    _key("consumer.session.timeout.ms", _I, 45000, at_least(1),
         "The timeout to detect client failures when using the consumer group protocol."),
    _key("consumer.heartbeat.interval.ms", _I, 5000, at_least(1),
         "The heartbeat interval given to the members of a consumer group."),
    _key("consumer.assignment.interval.ms", _I, 1000, at_least(0),
         "The minimum interval between two target assignment computations of a consumer group."),
    _key("share.session.timeout.ms", _I, 45000, at_least(1),
         "The timeout to detect client failures when using the share group protocol."),
    _key("share.heartbeat.interval.ms", _I, 5000, at_least(1),
         "The heartbeat interval given to the members of a share group."),
    _key("share.record.lock.duration.ms", _I, 30000, at_least(1000),
         "The record acquisition lock duration in milliseconds for share groups."),
    _key("share.delivery.count.limit", _I, 5, at_least(2),
         "The maximum number of delivery attempts for a record delivered to a share group."),
    _key("share.partition.max.record.locks", _I, 2000, at_least(100),
         "Share-group record lock limit per share-partition."),
    _key("share.auto.offset.reset", _S, "latest", _auto_offset_reset,
         "The strategy to initialize the share-partition start offset: earliest, latest, or "
         "by_duration:<ISO-8601 duration> from the current timestamp."),
    _key("share.isolation.level", _S, "read_uncommitted", one_of("read_committed", "read_uncommitted"),
         "Controls how to read records written transactionally: read_committed delivers only committed "
         "transactional records, read_uncommitted every record."),
    _key("share.renew.acknowledge.enable", _B, True, None,
         "Whether the renew acknowledge type is enabled for the share group."),
    _key("share.assignment.interval.ms", _I, 1000, at_least(0),
         "The minimum interval between two target assignment computations of a share group."),
    _key("streams.session.timeout.ms", _I, 45000, at_least(1),
         "The timeout to detect client failures when using the streams group protocol."),
    _key("streams.heartbeat.interval.ms", _I, 5000, at_least(1),
         "The heartbeat interval given to the members of a streams group."),
    _key("streams.num.standby.replicas", _I, 0, at_least(0),
         "The number of standby replicas for each task."),
    _key("streams.initial.rebalance.delay.ms", _I, 3000, at_least(0),
         "The amount of time the group coordinator waits for more streams clients to join a new group "
         "before performing the first rebalance."),
    _key("streams.assignment.interval.ms", _I, 1000, at_least(0),
         "The minimum interval between two target assignment computations of a streams group."),
])

# Group config -> the broker property that is its default (Kafka's "group." prefix).
BROKER_SYNONYM_PREFIX = "group."

# (config, lower-bound broker property, upper-bound broker property); None: no such bound.
_BOUNDS: tuple[tuple[str, str | None, str | None], ...] = (
    ("consumer.heartbeat.interval.ms", "group.consumer.min.heartbeat.interval.ms",
     "group.consumer.max.heartbeat.interval.ms"),
    ("consumer.session.timeout.ms", "group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms"),
    ("consumer.assignment.interval.ms", "group.consumer.min.assignment.interval.ms",
     "group.consumer.max.assignment.interval.ms"),
    ("share.heartbeat.interval.ms", "group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms"),
    ("share.session.timeout.ms", "group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms"),
    ("share.record.lock.duration.ms", "group.share.min.record.lock.duration.ms",
     "group.share.max.record.lock.duration.ms"),
    ("share.delivery.count.limit", "group.share.min.delivery.count.limit", "group.share.max.delivery.count.limit"),
    ("share.partition.max.record.locks", "group.share.min.partition.max.record.locks",
     "group.share.max.partition.max.record.locks"),
    ("share.assignment.interval.ms", "group.share.min.assignment.interval.ms",
     "group.share.max.assignment.interval.ms"),
    ("streams.heartbeat.interval.ms", "group.streams.min.heartbeat.interval.ms",
     "group.streams.max.heartbeat.interval.ms"),
    ("streams.session.timeout.ms", "group.streams.min.session.timeout.ms", "group.streams.max.session.timeout.ms"),
    ("streams.num.standby.replicas", None, "group.streams.max.standby.replicas"),
    ("streams.assignment.interval.ms", "group.streams.min.assignment.interval.ms",
     "group.streams.max.assignment.interval.ms"),
)
_SESSION_OVER_HEARTBEAT = (
    ("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"),
    ("share.session.timeout.ms", "share.heartbeat.interval.ms"),
    ("streams.session.timeout.ms", "streams.heartbeat.interval.ms"),
)


# The broker's assignment intervals, which Kafka 4.3.1 lets change at run time (its
# GroupCoordinatorConfig.RECONFIGURABLE_CONFIGS), within their static min/max bounds.
DYNAMIC_INTERVALS = tuple(f"group.{kind}.assignment.interval.ms" for kind in ("consumer", "share", "streams"))


class GroupConfigError(ValueError):
    """A group config Kafka refuses (INVALID_CONFIG)."""


def broker_synonym(name: str) -> str:
    return BROKER_SYNONYM_PREFIX + name


def validate_group_configs(configs: Mapping[str, str | None], broker: Mapping[str, Any]) -> dict[str, Any]:
    """The parsed values of a group's whole set of overrides, or GroupConfigError as Kafka's
    GroupConfig.validate words it. Names absent take the group configs' own defaults, as
    Kafka checks them; ``broker`` holds the broker's parsed min/max properties."""
    unknown = [n for n in configs if n not in GROUP_CONFIGS]
    if unknown:
        raise GroupConfigError(f"Unknown group config name: {unknown[0]}")
    nulls = [n for n, v in configs.items() if v is None]
    if nulls:
        raise GroupConfigError(f"Null value not supported for group configs: {','.join(nulls)}")
    values = GROUP_CONFIGS.defaults()
    for name, raw in configs.items():
        try:
            values[name] = GROUP_CONFIGS[name].parse(raw)
        except ConfigError as e:
            raise GroupConfigError(f"Invalid value {raw} for configuration {name}: {e.reason}") from None
    for name, lo, hi in _BOUNDS:
        if lo is not None and lo in broker and values[name] < broker[lo]:
            raise GroupConfigError(f"{name} must be greater than or equal to {lo}")
        if hi is not None and hi in broker and values[name] > broker[hi]:
            raise GroupConfigError(f"{name} must be less than or equal to {hi}")
    for session, heartbeat in _SESSION_OVER_HEARTBEAT:
        if values[session] <= values[heartbeat]:
            raise GroupConfigError(f"{session} must be greater than {heartbeat}")
    return values


@dataclass(frozen=True)
class GroupConfig:
    """One group's values in force: its overrides over the broker's defaults."""

    consumer_session_timeout_ms: int
    consumer_heartbeat_interval_ms: int
    consumer_assignment_interval_ms: int
    share_session_timeout_ms: int
    share_heartbeat_interval_ms: int
    share_record_lock_duration_ms: int
    share_delivery_count_limit: int
    share_partition_max_record_locks: int
    share_auto_offset_reset: str
    share_isolation_level: str
    share_renew_acknowledge_enable: bool
    share_assignment_interval_ms: int
    streams_session_timeout_ms: int
    streams_heartbeat_interval_ms: int
    streams_num_standby_replicas: int
    streams_initial_rebalance_delay_ms: int
    streams_assignment_interval_ms: int

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> GroupConfig:
        return cls(**{n.replace(".", "_"): values[n] for n in GROUP_CONFIGS.names()})


class GroupConfigStore(Protocol):
    def load_group_configs(self) -> dict[str, dict[str, str]]:
        """group id -> its overrides"""
        ...

    async def store_group_config(self, group_id: str, configs: Mapping[str, str]) -> None:
        """Replace ``group_id``'s overrides (none left: the group has none)."""
        ...

    async def read_group_config(self, group_id: str) -> dict[str, str]:
        """``group_id``'s overrides as stored now (a cluster's may be newer than its notification)."""
        ...


_RESOLVED_KEPT = 10_000


class GroupConfigs:
    """Every group's config overrides; ``broker`` maps broker property names to the parsed
    values in force (the defaults and the min/max bounds). A ``Reconfigurable`` of the dynamic
    broker configs: a new broker assignment interval is the default of every group without its
    own from then on."""

    def __init__(self, broker: Mapping[str, Any], store: GroupConfigStore | None = None) -> None:
        self.broker: Mapping[str, Any] = broker
        self.store = store
        self.overrides: dict[str, dict[str, str]] = {}
        # Each group's values, made on first use and dropped when its overrides change: a
        # share fetch asks for them several times (lock duration, isolation, renewals).
        self._resolved: dict[str, GroupConfig] = {}
        for group, configs in (store.load_group_configs() if store is not None else {}).items():
            self.set_group(group, configs)

    def defaults(self) -> dict[str, Any]:
        """Each group config's default: the broker's ``group.<name>``, else its own."""
        return {k.name: self.broker.get(broker_synonym(k.name), k.default) for k in GROUP_CONFIGS}

    def get(self, group_id: str) -> GroupConfig:
        resolved = self._resolved.get(group_id)
        if resolved is not None:
            return resolved
        values = self.defaults()
        for name, raw in self.overrides.get(group_id, {}).items():
            key = GROUP_CONFIGS.get(name)
            if key is not None:
                values[name] = key.parse(raw)
        if len(self._resolved) >= _RESOLVED_KEPT:
            self._resolved.clear()  # many groups come and go: bound the memory, not the speed
        resolved = self._resolved[group_id] = GroupConfig.from_values(values)
        return resolved

    def consumer_group_config(self, group_id: str, broker: ConsumerGroupConfig) -> ConsumerGroupConfig:
        """The broker's consumer-group settings with ``group_id``'s own session timeout,
        heartbeat interval and assignment interval over them, for ConsumerGroupHeartbeat."""
        own = self.get(group_id)
        return dataclasses.replace(broker, session_timeout_ms=own.consumer_session_timeout_ms,
                                   heartbeat_interval_ms=own.consumer_heartbeat_interval_ms,
                                   assignment_interval_ms=own.consumer_assignment_interval_ms)

    def share_group_config(self, group_id: str, broker: ShareGroupConfig) -> ShareGroupConfig:
        """The broker's share-group settings with ``group_id``'s own session timeout, heartbeat
        interval and assignment interval over them, for ShareGroupHeartbeat."""
        own = self.get(group_id)
        return dataclasses.replace(broker, session_timeout_ms=own.share_session_timeout_ms,
                                   heartbeat_interval_ms=own.share_heartbeat_interval_ms,
                                   assignment_interval_ms=own.share_assignment_interval_ms)

    def streams_group_config(self, group_id: str, broker: StreamsGroupConfig) -> StreamsGroupConfig:
        """The broker's streams-group settings with ``group_id``'s own session timeout, heartbeat
        interval, standby replicas, initial rebalance delay and assignment interval over them,
        for StreamsGroupHeartbeat."""
        own = self.get(group_id)
        return dataclasses.replace(broker, session_timeout_ms=own.streams_session_timeout_ms,
                                   heartbeat_interval_ms=own.streams_heartbeat_interval_ms,
                                   num_standby_replicas=own.streams_num_standby_replicas,
                                   initial_rebalance_delay_ms=own.streams_initial_rebalance_delay_ms,
                                   assignment_interval_ms=own.streams_assignment_interval_ms)

    def group_ids(self) -> list[str]:
        return sorted(self.overrides)

    # -- the broker's dynamic assignment intervals (a Reconfigurable)

    def reconfigurable_configs(self) -> frozenset[str]:
        return frozenset(DYNAMIC_INTERVALS)

    def validate_reconfiguration(self, values: Mapping[str, Any]) -> None:
        """Within the static bounds, as Kafka 4.3.1 checks and words it (INVALID_REQUEST)."""
        for name in DYNAMIC_INTERVALS:
            kind = name.removeprefix("group.").split(".", 1)[0]
            lo, hi = f"group.{kind}.min.assignment.interval.ms", f"group.{kind}.max.assignment.interval.ms"
            if values[name] < self.broker[lo]:
                raise ApiError(ErrorCode.INVALID_REQUEST, f"{name} must be greater than or equal to {lo}")
            if values[name] > self.broker[hi]:
                raise ApiError(ErrorCode.INVALID_REQUEST, f"{name} must be less than or equal to {hi}")

    def reconfigure(self, values: Mapping[str, Any]) -> None:
        self.broker = {**self.broker, **values}
        self._resolved.clear()

    def configs_of(self, group_id: str) -> dict[str, str]:
        return dict(self.overrides.get(group_id, {}))

    def set_group(self, group_id: str, configs: Mapping[str, str]) -> None:
        """``group_id``'s overrides as stored (a change made here or, in a cluster, elsewhere)."""
        kept = {n: str(v) for n, v in configs.items() if n in GROUP_CONFIGS}
        self._resolved.pop(group_id, None)
        if kept:
            self.overrides[group_id] = kept
        else:
            self.overrides.pop(group_id, None)

    def validate(self, configs: Mapping[str, str | None]) -> None:
        validate_group_configs(configs, self.broker)

    async def reread(self, group_id: str) -> None:
        """Take ``group_id``'s overrides from the store now. A share partition without state
        does before it starts at ``share.auto.offset.reset``: in a cluster, a change made on
        another broker may still be on its way here as a ZooKeeper notification."""
        if self.store is not None:
            self.set_group(group_id, await self.store.read_group_config(group_id))

    async def alter(self, group_id: str, configs: Mapping[str, str]) -> None:
        """Replace ``group_id``'s overrides with ``configs`` (already validated)."""
        self.set_group(group_id, configs)
        if self.store is not None:
            await self.store.store_group_config(group_id, self.configs_of(group_id))
