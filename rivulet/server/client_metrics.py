"""Client telemetry (KIP-714) on the broker, as Kafka's ClientMetricsManager.

Subscriptions are CLIENT_METRICS config resources (IncrementalAlterConfigs, DescribeConfigs):
each names metric prefixes (``metrics``), a push interval (``interval.ms``) and the clients it
applies to (``match``: attribute=regex pairs, all of which must match the whole attribute;
RE2 here where Kafka uses Java's regex). A client asks GetTelemetrySubscriptions which
metrics to push and how often, then pushes them with PushTelemetry; the broker checks the
push (interval, subscription id, compression, size), decompresses it and hands it to its
``TelemetryReceiver``. Nothing matching a client: an empty metrics list, and it pushes nothing.

Where subscriptions are kept is the ``ClientMetricsStore``'s business: one node keeps them in
its dynamic configs' file, a cluster in ZooKeeper's /config/client-metrics/<name> (with a
change notification so that every broker re-reads the subscription).
"""

from __future__ import annotations

import logging
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Mapping, Protocol

import re2
from crc32c import crc32c

from rivulet.common.config import ConfigEntry, ConfigSource, ConfigType, parse_value, render_value
from rivulet.common.time import Clock
from rivulet.protocol import compression
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.protocol.messages.get_telemetry_subscriptions_request import GetTelemetrySubscriptionsRequest
from rivulet.protocol.messages.get_telemetry_subscriptions_response import GetTelemetrySubscriptionsResponse
from rivulet.protocol.messages.push_telemetry_request import PushTelemetryRequest
from rivulet.protocol.messages.push_telemetry_response import PushTelemetryResponse

log = logging.getLogger(__name__)

METRICS = "metrics"
INTERVAL_MS = "interval.ms"
MATCH = "match"
ALL_METRICS = "*"
DEFAULT_INTERVAL_MS = 5 * 60 * 1000
MIN_INTERVAL_MS = 100
MAX_INTERVAL_MS = 3_600_000

# What a ``match`` entry may test.
MATCH_ATTRIBUTES = frozenset({"client_instance_id", "client_id", "client_software_name", "client_software_version",
                              "client_source_address", "client_source_port"})

# The subscription configs: type, default (as text) and documentation.
CONFIGS: dict[str, tuple[ConfigType, str, str]] = {
    INTERVAL_MS: (ConfigType.INT, str(DEFAULT_INTERVAL_MS), "How often matching clients push, in ms."),
    MATCH: (ConfigType.LIST, "", "The clients this subscription applies to: attribute=regex pairs."),
    METRICS: (ConfigType.LIST, "", "Prefixes of the metric names to push; * for all of them."),
}

# In the broker's order of preference: a client compresses with the first it supports.
ACCEPTED_COMPRESSION = (compression.ZSTD, compression.LZ4, compression.GZIP, compression.SNAPPY)
CACHE_MAX_SIZE = 16384  # client instances kept per broker
CACHE_EXPIRY_MS = 60_000  # at least; three push intervals when longer
_RESERVED_IDS = frozenset({uuid.UUID(int=0), uuid.UUID(int=1)})

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a bad pattern is answered to the client, not logged on stderr


# ------------------------------------------------------------------ subscriptions
@dataclass(frozen=True)
class Subscription:
    name: str
    metrics: tuple[str, ...]
    interval_ms: int
    match: Mapping[str, "re2._Regexp"]


def parse_match(patterns: tuple[str, ...]) -> dict[str, "re2._Regexp"]:
    """``attribute=regex`` entries, each compiled (INVALID_CONFIG when one is not valid)."""
    out = {}
    for p in patterns:
        parts = p.split("=")
        while len(parts) > 1 and parts[-1] == "":  # as Java's split, which drops trailing empties
            parts.pop()
        if len(parts) != 2 or parts[0].strip() not in MATCH_ATTRIBUTES:
            raise ApiError(ErrorCode.INVALID_CONFIG, f"Illegal client matching pattern: {p}")
        try:
            out[parts[0].strip()] = re2.compile(parts[1].strip(), _RE2_OPTIONS)
        except re2.error:
            raise ApiError(ErrorCode.INVALID_CONFIG, f"Illegal client matching pattern: {p}") from None
    return out


def parse_subscription(name: str, props: Mapping[str, str]) -> Subscription:
    """A subscription's configs checked as Kafka checks them: an empty name or an unknown
    config is INVALID_REQUEST, as is an interval outside 100 ms to one hour; a value that does
    not parse, or a bad match pattern, is INVALID_CONFIG."""
    if not name:
        raise ApiError(ErrorCode.INVALID_REQUEST, "Subscription name can't be empty")
    for key in props:
        if key not in CONFIGS:
            raise ApiError(ErrorCode.INVALID_REQUEST, f"Unknown client metrics configuration: {key}")
    values = {}
    for key, (ctype, default, _) in CONFIGS.items():
        raw = props.get(key)
        try:
            values[key] = parse_value(ctype, default if raw is None else raw)
        except ValueError as e:
            raise ApiError(ErrorCode.INVALID_CONFIG, f"Invalid value {raw} for configuration {key}: {e}") from None
    interval = values[INTERVAL_MS]
    if INTERVAL_MS in props and not MIN_INTERVAL_MS <= interval <= MAX_INTERVAL_MS:
        raise ApiError(ErrorCode.INVALID_REQUEST, f"Invalid value {interval} for {INTERVAL_MS}, interval must be "
                       f"between {MIN_INTERVAL_MS} and {MAX_INTERVAL_MS} (1 hour)")
    return Subscription(name, values[METRICS], interval, parse_match(values[MATCH]))


def describe_subscription(props: Mapping[str, str]) -> list[ConfigEntry]:
    """DescribeConfigs' entries: every config, set ones from the subscription, the rest defaults
    (a subscription that does not exist is all defaults, as in Kafka)."""
    out = []
    for name, (ctype, default, doc) in sorted(CONFIGS.items()):
        raw = props.get(name)
        value = render_value(ctype, parse_value(ctype, default if raw is None else raw))
        synonyms = () if raw is None else ((name, value, ConfigSource.CLIENT_METRICS_CONFIG),)
        out.append(ConfigEntry(name=name, value=value, is_default=raw is None,
                               source=ConfigSource.DEFAULT_CONFIG if raw is None else ConfigSource.CLIENT_METRICS_CONFIG,
                               config_type=ctype, synonyms=synonyms, documentation=doc))
    return out


# ------------------------------------------------------------------ client instances
@dataclass(frozen=True)
class ClientContext:
    """Who sent a telemetry request: what ``match`` patterns test."""

    client_id: str | None
    software_name: str | None
    software_version: str | None
    address: str | None
    port: int | None
    connection: object = None  # the connection, to forget its client instances when it closes

    def attributes(self, instance_id: uuid.UUID) -> dict[str, str | None]:
        return {"client_instance_id": str(instance_id), "client_id": self.client_id,
                "client_software_name": self.software_name, "client_software_version": self.software_version,
                "client_source_address": self.address,
                "client_source_port": None if self.port is None else str(self.port)}


def matches(sub: Subscription, attributes: Mapping[str, str | None]) -> bool:
    """Every pattern matches its whole attribute (no pattern: every client)."""
    for attr, pattern in sub.match.items():
        value = attributes.get(attr)
        if value is None or pattern.fullmatch(value) is None:
            return False
    return True


def java_uuid_hash(u: uuid.UUID) -> int:
    """Kafka's Uuid.hashCode, as a signed 32-bit int."""
    h = (u.int >> 64) ^ (u.int & 0xFFFF_FFFF_FFFF_FFFF)
    return _int32((h >> 32) ^ h)


def _int32(v: int) -> int:
    v &= 0xFFFF_FFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def subscription_id(metrics: frozenset[str], interval_ms: int, instance_id: uuid.UUID) -> int:
    """CRC-32C of the metrics and interval, XORed with the instance id's hash, as Kafka computes
    it (metrics in sorted order: Kafka's follows its hash set, an order no client relies on)."""
    text = "[" + ", ".join(sorted(metrics)) + "]" + str(interval_ms)
    return _int32(crc32c(text.encode()) ^ java_uuid_hash(instance_id))


@dataclass
class ClientInstance:
    instance_id: uuid.UUID
    context: ClientContext
    subscription_id: int
    subscription_version: int
    metrics: frozenset[str]
    push_interval_ms: int
    last_get_ms: int = 0
    last_push_ms: int = 0
    terminating: bool = False
    last_error: ErrorCode = ErrorCode.NONE
    expires_at_ms: int = 0

    def may_get(self, now_ms: int) -> bool:
        """A GetTelemetrySubscriptions is due a push interval after the last request."""
        if now_ms - max(self.last_get_ms, self.last_push_ms) >= self.push_interval_ms:
            self.last_get_ms = now_ms
            return True
        return False

    def may_push(self, now_ms: int) -> bool:
        """A push is due a push interval after the last one, or at once after a Get (clients
        jitter the interval between half and one and a half of it)."""
        ok = self.last_get_ms > self.last_push_ms or now_ms - self.last_push_ms >= self.push_interval_ms
        if ok:
            self.last_push_ms = now_ms
        return ok


def new_instance(instance_id: uuid.UUID, context: ClientContext, subscriptions: Mapping[str, Subscription],
                 version: int) -> ClientInstance:
    """The instance as the subscriptions that match it define it: the union of their metrics
    (``*`` alone when one asks for all) and the shortest of their intervals, capped at the default."""
    attributes = context.attributes(instance_id)
    interval = DEFAULT_INTERVAL_MS
    metrics: set[str] = set()
    for sub in subscriptions.values():
        if matches(sub, attributes):
            metrics.update(sub.metrics)
            interval = min(interval, sub.interval_ms)
    if ALL_METRICS in metrics:
        metrics = {ALL_METRICS}
    frozen = frozenset(metrics)
    return ClientInstance(instance_id, context, subscription_id(frozen, interval, instance_id), version, frozen,
                          interval)


# ------------------------------------------------------------------ receivers and stores
@dataclass(frozen=True)
class TelemetryPayload:
    """One accepted push: its metrics decompressed (OTLP ``MetricsData``, protobuf-encoded)."""

    client_instance_id: uuid.UUID
    context: ClientContext
    compression_type: int
    data: bytes
    push_interval_ms: int
    terminating: bool


class TelemetryReceiver(Protocol):
    """Where accepted pushes go (an exporter plugs in here)."""

    def export_metrics(self, payload: TelemetryPayload) -> None: ...


@dataclass
class LastPayloads:
    """The receiver the broker has without an exporter: the last push of each client instance."""

    limit: int = CACHE_MAX_SIZE
    last: OrderedDict[uuid.UUID, TelemetryPayload] = field(default_factory=OrderedDict)
    pushes: int = 0

    def export_metrics(self, payload: TelemetryPayload) -> None:
        self.pushes += 1
        self.last[payload.client_instance_id] = payload
        self.last.move_to_end(payload.client_instance_id)
        while len(self.last) > self.limit:
            self.last.popitem(last=False)


@dataclass
class EveryReceiver:
    """Several receivers (metric.reporters lists more than one): each gets every push."""

    receivers: list[TelemetryReceiver]

    def export_metrics(self, payload: TelemetryPayload) -> None:
        for receiver in self.receivers:
            receiver.export_metrics(payload)


class ClientMetricsStore(Protocol):
    def load_client_metrics(self) -> dict[str, dict[str, str]]:
        """subscription name -> its configs"""
        ...

    def store_client_metrics(self, name: str, configs: Mapping[str, str]) -> None:
        """Replace a subscription's configs (none left: it is removed); in a cluster the write
        to ZooKeeper completes in the background, as topic configs' do."""
        ...


# ------------------------------------------------------------------ the manager
class ClientMetricsManager:
    def __init__(self, store: ClientMetricsStore | None, clock: Clock, max_bytes: int,
                 receiver: TelemetryReceiver | None = None, cache_expiry_ms: int = CACHE_EXPIRY_MS) -> None:
        self.store = store
        self.clock = clock
        self.max_bytes = max_bytes
        self.receiver: TelemetryReceiver = receiver if receiver is not None else LastPayloads()
        # As Kafka: clients are told of telemetry (ApiVersions lists it) only when a reporter that
        # receives it is configured; the requests are answered either way.
        self.receiver_configured = receiver is not None
        self.cache_expiry_ms = cache_expiry_ms
        self.configs: dict[str, dict[str, str]] = {}
        self.subscriptions: dict[str, Subscription] = {}
        self.version = 0  # bumped by every change, so that instances re-evaluate
        self.instances: OrderedDict[uuid.UUID, ClientInstance] = OrderedDict()
        # The instance each connection last made, forgotten with the connection (as Kafka's).
        self._by_connection: dict[object, uuid.UUID] = {}
        for name, configs in (store.load_client_metrics() if store is not None else {}).items():
            self.set_subscription(name, configs)

    # ------------------------------------------------------------ subscriptions
    def set_subscription(self, name: str, configs: Mapping[str, str]) -> None:
        """A subscription as stored (changed here or, in a cluster, on another broker)."""
        if self.configs.get(name, {}) == dict(configs):
            return
        if not configs:
            if self.configs.pop(name, None) is not None:
                self.subscriptions.pop(name, None)
                self.version += 1
            return
        try:
            sub = parse_subscription(name, configs)
        except ApiError as e:
            log.warning("ignoring client metrics subscription %s: %s", name, e.message)
            return
        self.configs[name] = dict(configs)
        self.subscriptions[name] = sub
        self.version += 1

    def names(self) -> list[str]:
        return sorted(self.configs)

    def describe(self, name: str) -> list[ConfigEntry]:
        if not name:
            raise ApiError(ErrorCode.INVALID_REQUEST, "Client metrics subscription name must not be empty")
        return describe_subscription(self.configs.get(name, {}))

    def current(self, name: str) -> dict[str, str]:
        return dict(self.configs.get(name, {}))

    def alter(self, name: str, configs: Mapping[str, str], validate_only: bool) -> None:
        """Replace a subscription's configs (none: remove it), after Kafka's validation."""
        if not name:
            raise ApiError(ErrorCode.INVALID_REQUEST, "Subscription name can't be empty")
        if configs:
            parse_subscription(name, configs)
        if validate_only:
            return
        if self.store is not None:
            self.store.store_client_metrics(name, dict(configs))
        self.set_subscription(name, configs)

    # ------------------------------------------------------------ client instances
    def _instance(self, instance_id: uuid.UUID, context: ClientContext, now_ms: int) -> ClientInstance:
        self._expire(now_ms)
        inst = self.instances.get(instance_id)
        if inst is None or inst.subscription_version < self.version:
            inst = new_instance(instance_id, context if inst is None else inst.context, self.subscriptions,
                                self.version)
            if context.connection is not None:
                self._by_connection[context.connection] = instance_id
        inst.expires_at_ms = now_ms + max(self.cache_expiry_ms, 3 * inst.push_interval_ms)
        self.instances[instance_id] = inst
        self.instances.move_to_end(instance_id)
        while len(self.instances) > CACHE_MAX_SIZE:
            self._forget(next(iter(self.instances)))
        return inst

    def _expire(self, now_ms: int) -> None:
        """Forget instances not heard from for their expiry time, oldest first."""
        while self.instances:
            first = next(iter(self.instances.values()))
            if first.expires_at_ms > now_ms:
                return
            self._forget(first.instance_id)

    def _forget(self, instance_id: uuid.UUID) -> None:
        inst = self.instances.pop(instance_id, None)
        if inst is not None and self._by_connection.get(inst.context.connection) == instance_id:
            del self._by_connection[inst.context.connection]

    def connection_closed(self, connection: object) -> None:
        """The instance a closed connection made is forgotten (a client that pushes again is
        taken as new)."""
        instance_id = self._by_connection.pop(connection, None)
        if instance_id is not None:
            self.instances.pop(instance_id, None)

    def _new_instance_id(self) -> uuid.UUID:
        while True:
            candidate = uuid.uuid4()
            if candidate not in self.instances and candidate not in _RESERVED_IDS:
                return candidate

    # ------------------------------------------------------------ requests
    def get_subscriptions(self, req: GetTelemetrySubscriptionsRequest,
                          context: ClientContext) -> GetTelemetrySubscriptionsResponse:
        now = self.clock.milliseconds()
        instance_id = req.client_instance_id
        if instance_id is None or instance_id.int == 0:
            instance_id = self._new_instance_id()
        inst = self._instance(instance_id, context, now)
        # Asked again before the interval: throttled, unless the last push was refused for a
        # subscription or compression the client must learn anew.
        if not inst.may_get(now) and inst.last_error not in (ErrorCode.UNKNOWN_SUBSCRIPTION_ID,
                                                              ErrorCode.UNSUPPORTED_COMPRESSION_TYPE):
            return GetTelemetrySubscriptionsResponse(throttle_time_ms=0,
                                                     error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED)
        inst.last_error = ErrorCode.NONE
        return GetTelemetrySubscriptionsResponse(
            throttle_time_ms=0, error_code=0, client_instance_id=instance_id, subscription_id=inst.subscription_id,
            accepted_compression_types=[int(c) for c in ACCEPTED_COMPRESSION], push_interval_ms=inst.push_interval_ms,
            telemetry_max_bytes=self.max_bytes, delta_temporality=True, requested_metrics=sorted(inst.metrics))

    def push(self, req: PushTelemetryRequest, context: ClientContext) -> PushTelemetryResponse:
        instance_id = req.client_instance_id
        if instance_id is None or instance_id in _RESERVED_IDS:
            return _push_error(ErrorCode.INVALID_REQUEST)
        now = self.clock.milliseconds()
        inst = self._instance(instance_id, context, now)
        try:
            error = self._check_push(req, inst, now)
        finally:
            inst.terminating = req.terminating
        if error != ErrorCode.NONE:
            inst.last_error = error
            return _push_error(error)
        metrics = req.metrics
        if metrics:
            try:
                data = compression.decompress(req.compression_type, metrics, self.max_bytes)
            except ApiError as e:
                too_large = isinstance(e, compression.DecompressedTooLarge)
                inst.last_error = ErrorCode.TELEMETRY_TOO_LARGE if too_large else ErrorCode.INVALID_RECORD
                log.debug("refused telemetry from %s: %s", instance_id, e.message)
                return _push_error(inst.last_error)
            # Without the connection: a receiver that keeps payloads must not keep connections.
            context = replace(inst.context, connection=None)
            self.receiver.export_metrics(TelemetryPayload(instance_id, context, req.compression_type, data,
                                                          inst.push_interval_ms, req.terminating))
        inst.last_error = ErrorCode.NONE
        return PushTelemetryResponse(throttle_time_ms=0, error_code=0)

    def _check_push(self, req: PushTelemetryRequest, inst: ClientInstance, now: int) -> ErrorCode:
        if inst.terminating:
            return ErrorCode.INVALID_REQUEST  # nothing is accepted after a terminating push
        if not inst.may_push(now) and not req.terminating:
            return ErrorCode.THROTTLING_QUOTA_EXCEEDED
        if req.subscription_id != inst.subscription_id:
            return ErrorCode.UNKNOWN_SUBSCRIPTION_ID
        if req.compression_type not in compression.CODEC_NAMES:
            return ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
        if req.metrics is not None and len(req.metrics) > self.max_bytes:
            return ErrorCode.TELEMETRY_TOO_LARGE
        return ErrorCode.NONE


def _push_error(code: ErrorCode) -> PushTelemetryResponse:
    return PushTelemetryResponse(throttle_time_ms=0, error_code=code)
