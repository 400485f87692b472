"""Client quotas (KIP-13, KIP-124, KIP-219, KIP-546): produce and fetch byte rates and the
request-time percentage, per user and client id, as Kafka's ClientQuotaManager keeps them.

Each quota type has its own ``ClientQuotaManager``: a windowed ``Rate`` per quota sensor
(``quota.window.num`` samples of ``quota.window.size.seconds``), measured against the quota
that Kafka's precedence picks for the connection's (user, client id):

1. /config/users/<user>/clients/<client-id>
2. /config/users/<user>/clients/<default>
3. /config/users/<user>
4. /config/users/<default>/clients/<client-id>
5. /config/users/<default>/clients/<default>
6. /config/users/<default>
7. /config/clients/<client-id>
8. /config/clients/<default>

Clients whose quota comes from the same entity share one sensor (Kafka's metric tags): a
client-id default gives each client id its own rate, a user quota one rate for all of that
user's client ids. A value is recorded first and then checked; over the bound, the throttle
time is how long the measured window must grow for the rate to fall back to the bound. Until
listeners authenticate, every connection's user is Kafka's ``ANONYMOUS`` principal.

``controller_mutation_rate`` (KIP-599) counts partitions created and deleted in a token bucket
per sensor; ``connection_creation_rate`` (KIP-612) new connections per IP address.

``ClientQuotas`` holds the configured entities (what DescribeClientQuotas shows and
AlterClientQuotas changes, validated as Kafka's controller validates them), persists them
through a ``QuotaStore`` and hands each change to the managers at once, so it applies to
connections already open.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import socket
from dataclasses import dataclass
from typing import Iterable, Mapping, Protocol, Sequence

from rivulet.common.time import Clock
from rivulet.protocol.errors import ApiError, ErrorCode

log = logging.getLogger(__name__)

USER, CLIENT_ID, IP = "user", "client-id", "ip"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"

# Quota keys an entity may carry, with the type of Kafka's quota config: LONG and INT values
# must be whole numbers in range, DOUBLE ones may be fractional.
LONG, INT, DOUBLE = "LONG", "INT", "DOUBLE"
LONG_MAX, INT_MAX = float(2**63 - 1), float(2**31 - 1)  # compared as Java compares a double
CLIENT_QUOTA_KEYS: dict[str, str] = {PRODUCER_BYTE_RATE: LONG, CONSUMER_BYTE_RATE: LONG,
                                     REQUEST_PERCENTAGE: DOUBLE, CONTROLLER_MUTATION_RATE: DOUBLE}
IP_QUOTA_KEYS: dict[str, str] = {CONNECTION_CREATION_RATE: INT}

# DescribeClientQuotas match types
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2

# An entity: its components as (entity type, name) sorted by type; a name of None is the default.
QuotaEntity = tuple[tuple[str, "str | None"], ...]

INACTIVE_SENSOR_EXPIRY_MS = 3600 * 1000  # Kafka drops a client's sensors after an idle hour
NANOS_TO_PERCENTAGE_PER_SECOND = 100.0 / 1e9


def entity_of(components: Mapping[str, str | None]) -> QuotaEntity:
    return tuple(sorted(components.items()))


def _kafka_entity(entity: Iterable[tuple[str, str | None]]) -> str:
    """An entity as Kafka's ClientQuotaEntity prints in its error messages."""
    return "ClientQuotaEntity(entries={" + ", ".join(f"{t}={'null' if n is None else n}" for t, n in entity) + "})"


def _valid_ip_entity(name: str | None) -> bool:
    """An IP literal or a name that resolves (Kafka's InetAddress.getByName), or the default."""
    if name is None:
        return True
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        pass
    try:
        socket.getaddrinfo(name, None)
        return True
    except (OSError, UnicodeError):
        return False


# ---------------------------------------------------------------- rate sampling
class _Sample:
    __slots__ = ("value", "events", "start_ms", "last_event_ms")

    def __init__(self, now_ms: int) -> None:
        self.reset(now_ms)

    def reset(self, now_ms: int) -> None:
        self.value = 0.0
        self.events = 0
        self.start_ms = now_ms
        self.last_event_ms = now_ms


class Rate:
    """Kafka's ``Rate`` over a ``WindowedSum``: the sum of the retained samples divided by
    the time they span, where a span shorter than ``samples - 1`` whole windows counts as
    that many (a first burst is judged over the full window, not over the few ms it took)."""

    def __init__(self, samples: int, window_ms: int) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self._ring: list[_Sample] = []
        self._current = 0

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._ring:
            self._ring.append(_Sample(now_ms))
        return self._ring[self._current]

    def record(self, value: float, now_ms: int) -> None:
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.window_ms:
            # One slot more than the samples measured: the oldest may still overlap the window.
            self._current = (self._current + 1) % (self.samples + 1)
            if self._current >= len(self._ring):
                sample = _Sample(now_ms)
                self._ring.append(sample)
            else:
                sample = self._ring[self._current]
                sample.reset(now_ms)
        sample.value += value
        sample.events += 1
        sample.last_event_ms = now_ms

    def _purge(self, now_ms: int) -> None:
        expire = self.samples * self.window_ms
        for s in self._ring:
            if now_ms - s.last_event_ms >= expire:
                s.reset(now_ms)

    def window_size_ms(self, now_ms: int) -> int:
        """The time the measurement spans, as Kafka's ``Rate.windowSize``."""
        self._purge(now_ms)
        if not self._ring:
            self._ring.append(_Sample(now_ms))
        elapsed = now_ms - min(s.start_ms for s in self._ring)
        full = elapsed // self.window_ms
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(elapsed, 1)

    def measure(self, now_ms: int) -> float:
        """Per second."""
        self._purge(now_ms)
        total = sum(s.value for s in self._ring)
        return total / (self.window_size_ms(now_ms) / 1000.0)

    @property
    def last_event_ms(self) -> int:
        return max((s.last_event_ms for s in self._ring), default=0)


def java_round(x: float) -> int:
    """Java's Math.round: halves go up."""
    return math.floor(x + 0.5)


def throttle_time_ms(measured: float, bound: float, window_size_ms: int) -> int:
    """Kafka's QuotaUtils.throttleTime: the time that brings ``measured`` back to ``bound``
    if nothing more is recorded."""
    return java_round((measured - bound) / bound * window_size_ms)


# ---------------------------------------------------------------- the managers
class _Default:
    """The ``<default>`` user or client id of a quota entity (never a real name)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<default>"


DEFAULT = _Default()

NO_QUOTAS, CLIENT_ID_QUOTA, USER_QUOTA, USER_CLIENT_ID_QUOTA = 0, 1, 2, 4


@dataclass(frozen=True, slots=True)
class ManagerEntity:
    """A quota level as a manager sees it: the user part and the client-id part, either of
    which may be absent (None) or the default."""

    user: str | _Default | None
    client_id: str | _Default | None

    @property
    def kind(self) -> int:
        if self.user is not None and self.client_id is not None:
            return USER_CLIENT_ID_QUOTA
        if self.user is not None:
            return USER_QUOTA
        return CLIENT_ID_QUOTA if self.client_id is not None else NO_QUOTAS


class _Sensor:
    __slots__ = ("rate", "bound")

    def __init__(self, rate: Rate, bound: float | None) -> None:
        self.rate = rate
        self.bound = bound


class ClientQuotaManager:
    """One quota type's sensors and configured quotas (Kafka's ClientQuotaManager with its
    default quota callback)."""

    def __init__(self, quota_type: str, samples: int, window_seconds: int, clock: Clock,
                 max_throttle_ms: int | None = None) -> None:
        self.quota_type = quota_type
        self.samples = samples
        self.window_ms = window_seconds * 1000
        self.clock = clock
        self.max_throttle_ms = max_throttle_ms
        self.overridden: dict[ManagerEntity, float] = {}
        self._kinds: dict[int, int] = {}  # entity kind -> how many entities of it have a quota
        self.quota_types_enabled = NO_QUOTAS
        self.sensors: dict[tuple[str, str], _Sensor] = {}
        self._next_expiry_check = 0

    def now_ms(self) -> int:
        return int(self.clock.monotonic_ms())

    def quotas_enabled(self) -> bool:
        return self.quota_types_enabled != NO_QUOTAS

    # ------------------------------------------------------------ resolution
    def metric_tags(self, user: str, client_id: str) -> tuple[str, str]:
        """Which sensor (user tag, client-id tag) the connection's usage counts on."""
        enabled = self.quota_types_enabled
        if enabled in (NO_QUOTAS, CLIENT_ID_QUOTA):
            return "", client_id
        if enabled == USER_QUOTA:
            return user, ""
        if enabled == USER_CLIENT_ID_QUOTA:
            return user, client_id
        has = self.overridden.__contains__
        if has(ManagerEntity(user, client_id)) or has(ManagerEntity(user, DEFAULT)):
            return user, client_id
        if has(ManagerEntity(user, None)):
            return user, ""
        if has(ManagerEntity(DEFAULT, client_id)) or has(ManagerEntity(DEFAULT, DEFAULT)):
            return user, client_id
        if has(ManagerEntity(DEFAULT, None)):
            return user, ""
        return "", client_id

    def quota_limit(self, tags: tuple[str, str]) -> float | None:
        """The quota of a sensor, by Kafka's precedence; None when nothing applies."""
        user, client_id = tags
        candidates: Sequence[ManagerEntity]
        if user and client_id:
            candidates = (ManagerEntity(user, client_id), ManagerEntity(user, DEFAULT),
                          ManagerEntity(DEFAULT, client_id), ManagerEntity(DEFAULT, DEFAULT))
        elif user:
            candidates = (ManagerEntity(user, None), ManagerEntity(DEFAULT, None))
        elif client_id:
            candidates = (ManagerEntity(None, client_id), ManagerEntity(None, DEFAULT))
        else:
            return None
        for e in candidates:
            bound = self.overridden.get(e)
            if bound is not None:
                return bound
        return None

    def quota(self, user: str, client_id: str) -> float | None:
        return self.quota_limit(self.metric_tags(user, client_id))

    # ------------------------------------------------------------ recording
    def _sensor(self, user: str, client_id: str, now_ms: int) -> _Sensor:
        tags = self.metric_tags(user, client_id)
        sensor = self.sensors.get(tags)
        if sensor is None:
            if now_ms >= self._next_expiry_check:
                self._expire_sensors(now_ms)
            sensor = self.sensors[tags] = _Sensor(Rate(self.samples, self.window_ms), self.quota_limit(tags))
        return sensor

    def _expire_sensors(self, now_ms: int) -> None:
        self._next_expiry_check = now_ms + 60_000
        for tags in [t for t, s in self.sensors.items() if now_ms - s.rate.last_event_ms >= INACTIVE_SENSOR_EXPIRY_MS]:
            del self.sensors[tags]

    def record_and_get_throttle_time_ms(self, user: str, client_id: str, value: float,
                                        now_ms: int | None = None) -> int:
        """Record ``value`` and return how long the client must wait (0 within its quota)."""
        if now_ms is None:
            now_ms = self.now_ms()
        sensor = self._sensor(user, client_id, now_ms)
        sensor.rate.record(value, now_ms)
        bound = sensor.bound
        if bound is None:
            return 0
        measured = sensor.rate.measure(now_ms)
        if measured <= bound:
            return 0
        ms = throttle_time_ms(measured, bound, sensor.rate.window_size_ms(now_ms))
        if self.max_throttle_ms is not None:
            ms = min(ms, self.max_throttle_ms)
        return max(ms, 0)

    def maybe_record_and_get_throttle_time_ms(self, user: str, client_id: str, value: float,
                                              now_ms: int | None = None) -> int:
        if not self.quotas_enabled():
            return 0
        return self.record_and_get_throttle_time_ms(user, client_id, value, now_ms)

    def record_no_throttle(self, user: str, client_id: str, value: float, now_ms: int | None = None) -> None:
        if now_ms is None:
            now_ms = self.now_ms()
        self._sensor(user, client_id, now_ms).rate.record(value, now_ms)

    def unrecord(self, user: str, client_id: str, value: float, now_ms: int | None = None) -> None:
        """Take back a recorded value (a throttled fetch answers empty)."""
        self.record_no_throttle(user, client_id, -value, now_ms)

    def max_value_in_quota_window(self, user: str, client_id: str) -> float:
        """The most that can be recorded at once without certain throttling (bounds a fetch)."""
        if not self.quotas_enabled():
            return math.inf
        limit = self.quota(user, client_id)
        if limit is None:
            return math.inf
        return limit * (self.samples - 1) * self.window_ms / 1000

    # ------------------------------------------------------------ configuration
    def update_quota(self, entity: ManagerEntity, bound: float | None) -> None:
        """Set (or with None remove) the quota of one level; open sensors take it at once."""
        had = entity in self.overridden
        if bound is not None:
            self.overridden[entity] = bound
            if not had:
                self._kinds[entity.kind] = self._kinds.get(entity.kind, 0) + 1
                self.quota_types_enabled |= entity.kind
        elif had:
            del self.overridden[entity]
            left = self._kinds[entity.kind] = self._kinds.get(entity.kind, 1) - 1
            if left <= 0:
                self.quota_types_enabled &= ~entity.kind
        log.info("%s quota for %s: %s", self.quota_type, entity, bound)
        for tags, sensor in self.sensors.items():
            sensor.bound = self.quota_limit(tags)


class ClientRequestQuotaManager(ClientQuotaManager):
    """``request_percentage``: time spent handling a client's requests, as a percentage of one
    thread, with throttling bounded by one quota window as Kafka's is."""

    def __init__(self, samples: int, window_seconds: int, clock: Clock) -> None:
        super().__init__("Request", samples, window_seconds, clock, max_throttle_ms=window_seconds * 1000)

    def record_request_time(self, user: str, client_id: str, nanos: int, now_ms: int | None = None) -> int:
        if not self.quotas_enabled():
            return 0
        return self.record_and_get_throttle_time_ms(user, client_id, nanos * NANOS_TO_PERCENTAGE_PER_SECOND, now_ms)


class TokenBucket:
    """Kafka's TokenBucket (KIP-599): credits refill at the quota's rate up to a burst of
    ``samples * window`` seconds' worth; recording takes credits and may leave them negative."""

    __slots__ = ("tokens", "last_ms")

    def __init__(self) -> None:
        self.tokens: float | None = None  # full until first used (Kafka's refill from time 0)
        self.last_ms = 0

    def _refill(self, rate: float, burst: float, now_ms: int) -> None:
        if self.tokens is None:
            self.tokens = burst
        else:
            self.tokens = min(burst, self.tokens + rate * (now_ms - self.last_ms) / 1000)
        self.last_ms = now_ms

    def measure(self, rate: float, burst: float, now_ms: int) -> float:
        self._refill(rate, burst, now_ms)
        assert self.tokens is not None
        return self.tokens

    def record(self, value: float, rate: float, burst: float, now_ms: int) -> None:
        self._refill(rate, burst, now_ms)
        assert self.tokens is not None
        self.tokens = min(burst, self.tokens - value)


class ControllerMutationQuota:
    """One request's controller_mutation_rate (Kafka's Strict- and
    PermissiveControllerMutationQuota): partitions created or deleted are recorded one topic at
    a time. Strict (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+): a topic is
    refused with THROTTLING_QUOTA_EXCEEDED while the credits are below zero. Permissive (older
    versions): everything is done, and the answer is throttled."""

    def __init__(self, manager: ControllerMutationQuotaManager | None, tags: tuple[str, str], strict: bool) -> None:
        self.manager = manager
        self.tags = tags
        self.strict = strict
        self._throttle_ms = 0
        self._throttled_at = 0

    def record(self, partitions: int) -> None:
        m = self.manager
        if m is None:
            return
        bucket, rate, burst, now = m.bucket(self.tags)
        if rate is None:
            return
        if self.strict:
            tokens = bucket.measure(rate, burst, now)
            if tokens < 0:
                self._throttled(tokens, rate, now)
                raise ApiError(ErrorCode.THROTTLING_QUOTA_EXCEEDED, "The throttling quota has been exceeded.")
            bucket.record(partitions, rate, burst, now)
        else:
            bucket.record(partitions, rate, burst, now)
            tokens = bucket.measure(rate, burst, now)
            if tokens < 0:
                self._throttled(tokens, rate, now)

    def _throttled(self, tokens: float, rate: float, now: int) -> None:
        self._throttle_ms = java_round(-tokens / rate * 1000)
        self._throttled_at = now

    def throttle_time_ms(self) -> int:
        """The throttle time recorded, less the time since (the answer may come later)."""
        if self.manager is None or not self._throttle_ms:
            return 0
        return max(0, self._throttle_ms - (self.manager.now_ms() - self._throttled_at))


class ControllerMutationQuotaManager(ClientQuotaManager):
    """``controller_mutation_rate`` per user and client id, with Kafka's precedence, measured with
    a TokenBucket per sensor instead of a Rate."""

    def __init__(self, samples: int, window_seconds: int, clock: Clock) -> None:
        super().__init__("ControllerMutation", samples, window_seconds, clock)
        self.buckets: dict[tuple[str, str], TokenBucket] = {}

    def bucket(self, tags: tuple[str, str]) -> tuple[TokenBucket, float | None, float, int]:
        """The sensor's bucket, its rate (None: no quota applies), its burst and the time now."""
        rate = self.quota_limit(tags)
        bucket = self.buckets.get(tags)
        if bucket is None:
            bucket = self.buckets[tags] = TokenBucket()
        burst = self.samples * self.window_ms / 1000 * rate if rate is not None else 0.0
        return bucket, rate, burst, self.now_ms()

    def quota_for(self, user: str, client_id: str, strict: bool) -> ControllerMutationQuota:
        if not self.quotas_enabled():
            return ControllerMutationQuota(None, ("", ""), strict)
        return ControllerMutationQuota(self, self.metric_tags(user, client_id), strict)


class ConnectionRateQuotas:
    """``connection_creation_rate`` per IP address (KIP-612): new connections per second from
    one address, set for the address or as the IP default. As Kafka does, a connection over the
    rate is not counted and not served, and is closed after the throttle time (at most one
    quota window)."""

    def __init__(self, samples: int, window_seconds: int, clock: Clock) -> None:
        self.samples = samples
        self.window_ms = window_seconds * 1000
        self.clock = clock
        self.overrides: dict[str, float] = {}
        self.default: float | None = None
        self.sensors: dict[str, _Sensor] = {}
        self._next_expiry_check = 0

    def quota(self, ip: str) -> float | None:
        return self.overrides.get(_normal_ip(ip), self.default)

    def update(self, ip: str | None, rate: float | None) -> None:
        """Set (None: remove) the rate of one address, or with ``ip`` None the default."""
        if ip is None:
            self.default = rate
        else:
            address = _resolve_ip(ip)
            if rate is None:
                self.overrides.pop(address, None)
            else:
                self.overrides[address] = rate
        for address, sensor in self.sensors.items():
            sensor.bound = self.quota(address)

    def throttle_ms(self, ip: str) -> int:
        """Record a new connection from ``ip``: 0 if it may be served, else how long it is held
        before it is closed (the connection is then not counted against the rate)."""
        address = _normal_ip(ip)
        bound = self.quota(address)
        if bound is None:
            return 0
        now = int(self.clock.monotonic_ms())
        sensor = self.sensors.get(address)
        if sensor is None:
            if now >= self._next_expiry_check:
                self._next_expiry_check = now + 60_000
                for a in [a for a, s in self.sensors.items() if now - s.rate.last_event_ms >= INACTIVE_SENSOR_EXPIRY_MS]:
                    del self.sensors[a]
            sensor = self.sensors[address] = _Sensor(Rate(self.samples, self.window_ms), bound)
        sensor.rate.record(1.0, now)
        measured = sensor.rate.measure(now)
        if measured <= bound:
            return 0
        sensor.rate.record(-1.0, now)
        return max(min(throttle_time_ms(measured, bound, sensor.rate.window_size_ms(now)), self.window_ms), 0)


def _normal_ip(ip: str) -> str:
    try:
        return str(ipaddress.ip_address(ip.split("%", 1)[0]))
    except ValueError:
        return ip


def _resolve_ip(name: str) -> str:
    """An IP entity's name as the address it stands for (Kafka's InetAddress.getByName)."""
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        pass
    try:
        return str(ipaddress.ip_address(socket.getaddrinfo(name, None)[0][4][0]))
    except (OSError, UnicodeError, IndexError, ValueError):
        return name


# ---------------------------------------------------------------- the configured entities
class QuotaStore(Protocol):
    """Where the configured quotas survive a restart (``DynamicBrokerConfig``)."""

    def load_client_quotas(self) -> list[tuple[dict[str, str | None], dict[str, float]]]: ...

    def save_client_quotas(self, quotas: list[tuple[dict[str, str | None], dict[str, float]]]) -> None: ...


@dataclass(slots=True)
class QuotaOp:
    key: str
    value: float
    remove: bool


class ClientQuotas:
    """The three client quota managers (Kafka's QuotaManagers), the IP connection rates and the
    configured entities."""

    def __init__(self, samples: int, window_seconds: int, clock: Clock, store: QuotaStore | None = None, *,
                 controller_samples: int = 11, controller_window_seconds: int = 1) -> None:
        """``samples`` and ``window_seconds``: quota.window.num and quota.window.size.seconds;
        the controller mutation quota has its own, controller.quota.window.*, as in Kafka."""
        self.produce = ClientQuotaManager("Produce", samples, window_seconds, clock)
        self.fetch = ClientQuotaManager("Fetch", samples, window_seconds, clock)
        self.request = ClientRequestQuotaManager(samples, window_seconds, clock)
        self.controller_mutation = ControllerMutationQuotaManager(controller_samples, controller_window_seconds, clock)
        self.connection_rates = ConnectionRateQuotas(samples, window_seconds, clock)
        self.store = store
        self.entities: dict[QuotaEntity, dict[str, float]] = {}
        for components, values in (store.load_client_quotas() if store is not None else []):
            entity = entity_of(components)
            for key, value in values.items():
                self._apply(entity, key, float(value))

    def consumer_max_bytes(self, user: str, client_id: str, max_bytes: int) -> int:
        """A consumer's Fetch or ShareFetch never asks for more than its quota lets through at once."""
        return int(min(max_bytes, self.fetch.max_value_in_quota_window(user, client_id)))

    def consumer_throttle_ms(self, user: str, client_id: str, spent_ns: int, size: int) -> int:
        """A consumer's Fetch or ShareFetch answer holding ``size`` bytes of records, judged as
        Kafka judges it once it is ready: the request time against request_percentage, the bytes
        against consumer_byte_rate (one sensor for both APIs), the longer throttle time. Over
        either, the answer goes out empty, so its bytes are taken back off the rate."""
        request_ms = self.request.record_request_time(user, client_id, spent_ns)
        fetch_ms = self.fetch.maybe_record_and_get_throttle_time_ms(user, client_id, size)
        ms = max(request_ms, fetch_ms)
        if ms > 0 and self.fetch.quotas_enabled():
            self.fetch.unrecord(user, client_id, size)
        return ms

    def _manager(self, key: str) -> ClientQuotaManager | None:
        return {PRODUCER_BYTE_RATE: self.produce, CONSUMER_BYTE_RATE: self.fetch,
                REQUEST_PERCENTAGE: self.request, CONTROLLER_MUTATION_RATE: self.controller_mutation}.get(key)

    def _apply(self, entity: QuotaEntity, key: str, value: float | None) -> None:
        values = self.entities.setdefault(entity, {})
        if value is None:
            values.pop(key, None)
            if not values:
                del self.entities[entity]
        else:
            values[key] = value
        parts = dict(entity)
        if IP in parts:
            if key == CONNECTION_CREATION_RATE:
                self.connection_rates.update(parts[IP], value)
            return
        manager = self._manager(key)
        if manager is None:
            return
        def part(t: str) -> str | _Default | None:
            if t not in parts:
                return None
            name = parts[t]
            return DEFAULT if name is None else name
        manager.update_quota(ManagerEntity(part(USER), part(CLIENT_ID)), value)

    # ------------------------------------------------------------ AlterClientQuotas
    def alter(self, entries: Iterable[tuple[Sequence[tuple[str, str | None]], Sequence[QuotaOp]]],
              validate_only: bool = False) -> list[ErrorCode | ApiError]:
        """Apply each entry (its entity's components and ops); per entry ErrorCode.NONE or the
        ApiError that refused it, checked as Kafka's controller checks them. A refused entry
        changes nothing; the others apply."""
        results: list[ErrorCode | ApiError] = []
        seen: set[tuple[tuple[str, str | None], ...]] = set()
        changed = False
        for components, ops in entries:
            raw = tuple(sorted(components, key=lambda c: c[0]))
            try:
                keys = [op.key for op in ops]
                if raw in seen or len(set(keys)) != len(keys):
                    # Kafka's controller reports a repeated key under this message too.
                    raise ApiError(ErrorCode.INVALID_REQUEST, f"Ignoring duplicate entity {_kafka_entity(raw)}")
                seen.add(raw)
                entity = self._validate_entity(components)
                changes = self._validate_ops(entity, ops)
            except ApiError as e:
                results.append(e)
                continue
            if not validate_only:
                for key, value in changes.items():
                    if self.entities.get(entity, {}).get(key) != value:
                        self._apply(entity, key, value)
                        changed = True
            results.append(ErrorCode.NONE)
        if changed and self.store is not None:
            self.store.save_client_quotas([(dict(e), dict(v)) for e, v in sorted(
                self.entities.items(), key=lambda kv: [(t, n or "") for t, n in kv[0]])])
        return results

    @staticmethod
    def _validate_entity(components: Sequence[tuple[str, str | None]]) -> QuotaEntity:
        if not components:
            raise ApiError(ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity")
        out: dict[str, str | None] = {}
        for etype, name in components:
            if etype in out:
                raise ApiError(ErrorCode.INVALID_REQUEST,
                               f"Invalid client quota entity, duplicate entity entry {etype}")
            if etype not in (USER, CLIENT_ID, IP):
                raise ApiError(ErrorCode.INVALID_REQUEST, f"Unhandled client quota entity type: {etype}")
            if name is not None and name == "":
                raise ApiError(ErrorCode.INVALID_REQUEST, f"Empty {etype} not supported")
            out[etype] = name
        if IP in out:
            if len(out) > 1:  # Kafka's message, its missing space included
                raise ApiError(ErrorCode.INVALID_REQUEST, "Invalid quota entity combination, IP entity should"
                               "not be combined with User or ClientId")
            if not _valid_ip_entity(out[IP]):
                raise ApiError(ErrorCode.INVALID_REQUEST, f"{out[IP]} is not a valid IP or resolvable host.")
        return entity_of(out)

    @staticmethod
    def _validate_ops(entity: QuotaEntity, ops: Sequence[QuotaOp]) -> dict[str, float | None]:
        keys = IP_QUOTA_KEYS if any(t == IP for t, _ in entity) else CLIENT_QUOTA_KEYS
        out: dict[str, float | None] = {}
        for op in ops:
            if op.remove:
                out[op.key] = None
                continue
            kind = keys.get(op.key)
            if kind is None:
                raise ApiError(ErrorCode.INVALID_REQUEST, f"Invalid configuration key {op.key}")
            if not op.value > 0.0:
                raise ApiError(ErrorCode.INVALID_REQUEST, f"Quota {op.key} must be greater than 0")
            if kind == INT and op.value > INT_MAX:
                raise ApiError(ErrorCode.INVALID_REQUEST, f"Proposed value for {op.key} is too large for an INT.")
            if kind == LONG and op.value > LONG_MAX:
                raise ApiError(ErrorCode.INVALID_REQUEST, f"Proposed value for {op.key} is too large for a LONG.")
            if kind != DOUBLE and abs(math.fmod(op.value, 1.0)) > 1e-6:
                raise ApiError(ErrorCode.INVALID_REQUEST, f"{op.key} cannot be a fractional value.")
            out[op.key] = op.value
        return out

    # ------------------------------------------------------------ DescribeClientQuotas
    def describe(self, components: Sequence[tuple[str, int, str | None]],
                 strict: bool) -> list[tuple[QuotaEntity, dict[str, float]]]:
        """The entities a filter of (entity type, match type, match) components selects, as
        Kafka's ClientQuotasImage.describe; ApiError for a filter Kafka refuses."""
        exact: dict[str, str | None] = {}
        typed: set[str] = set()
        for etype, match_type, match in components:
            if not etype:
                raise ApiError(ErrorCode.INVALID_REQUEST, "Invalid empty entity type.")
            if etype in exact or etype in typed:
                raise ApiError(ErrorCode.INVALID_REQUEST,
                               f"Entity type {etype} cannot appear more than once in the filter.")
            if etype not in (IP, USER, CLIENT_ID):
                raise ApiError(ErrorCode.UNSUPPORTED_VERSION, f"Unsupported entity type {etype}")
            if match_type == MATCH_EXACT:
                if match is None:
                    raise ApiError(ErrorCode.INVALID_REQUEST,
                                   "Request specified MATCH_TYPE_EXACT, but set match string to null.")
                exact[etype] = match
            elif match_type == MATCH_DEFAULT:
                if match is not None:
                    raise ApiError(ErrorCode.INVALID_REQUEST,
                                   "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
                exact[etype] = None
            elif match_type == MATCH_SPECIFIED:
                if match is not None:
                    raise ApiError(ErrorCode.INVALID_REQUEST,
                                   "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
                typed.add(etype)
            else:
                raise ApiError(ErrorCode.INVALID_REQUEST, f"Unknown match type {match_type}")
        if (IP in exact or IP in typed) and ({USER, CLIENT_ID} & (exact.keys() | typed)):
            raise ApiError(ErrorCode.INVALID_REQUEST, "Invalid entity filter component combination. IP filter "
                           "component should not be used with user or clientId filter component.")
        out = []
        for entity, values in self.entities.items():
            parts = dict(entity)
            if not exact and not typed:
                if strict:
                    continue
            elif any(t not in parts or parts[t] != n for t, n in exact.items()) or \
                    any(t not in parts for t in typed):
                continue
            elif strict and len(parts) != len(exact) + len(typed):
                continue
            out.append((entity, dict(values)))
        return out
