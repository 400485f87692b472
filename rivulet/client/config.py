"""Client configuration: Kafka property names in, typed and validated settings out.

Every property the client understands is declared once below on the shared config framework
(``rivulet.common.config``): its type, default, validator and documentation, with the roles it
applies to and the spellings librdkafka (confluent-kafka) and Java users know it by.
Construction fails with a ConfigException naming the property for an unknown name or a bad
value; a property of the other role (``group.id`` given to a producer) is ignored with a
warning, as librdkafka does, because shared base configs are common.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypedDict, cast, overload

from rivulet.client.errors import ConfigException, KafkaError
from rivulet.security.client_config import sasl_credentials
from rivulet.common.config import (
    INT_MAX,
    ConfigDef,
    ConfigError,
    ConfigKey,
    ConfigType,
    Importance,
    Validator,
    at_least,
    between,
    parse_value,
)

log = logging.getLogger("rivulet.client")

P, C, A = "producer", "consumer", "admin"
ALL = frozenset((P, C, A))
PROD = frozenset((P,))
CONS = frozenset((C,))

INT32_MAX = INT_MAX
B, S, I, L, D, LS, CL, PW = (ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.INT, ConfigType.LONG,
                             ConfigType.DOUBLE, ConfigType.LIST, ConfigType.CLASS, ConfigType.PASSWORD)
# security.protocol's spellings (canonical: lower case, as librdkafka prints them).
SECURITY_PROTOCOL_SPELLINGS = ("plaintext", "PLAINTEXT=plaintext", "ssl", "SSL=ssl", "sasl_plaintext",
                               "SASL_PLAINTEXT=sasl_plaintext", "sasl_ssl", "SASL_SSL=sasl_ssl")
HIGH, MEDIUM, LOW = Importance.HIGH, Importance.MEDIUM, Importance.LOW


@dataclass(frozen=True)
class Prop:
    """A client property: its definition, the roles that take it, and the other spellings
    librdkafka (confluent-kafka) users know it by."""

    key: ConfigKey
    roles: frozenset[str]
    aliases: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.key.name

    @property
    def default(self) -> ConfigValue:
        return self.key.default


def _range(lo: float | None, hi: float | None) -> Validator | None:
    if lo is not None and hi is not None:
        return between(lo, hi)
    return at_least(lo) if lo is not None else None


def _choices(*pairs: str, **canonical: int) -> Callable[[object], str | int]:
    """An enum property's spellings, given as 'spelling=canonical' or 'name', or as keywords
    whose value is the canonical Python value."""
    table: dict[str, str | int] = dict(canonical)
    for p in pairs:
        k, _, v = p.partition("=")
        table[k] = v or k

    def convert(value: object) -> str | int:
        key = str(value).strip()
        if key in table:
            return table[key]
        if key.lower() in table:
            return table[key.lower()]
        raise ValueError(f"expected one of {', '.join(sorted(table))}")

    return convert


def _lower_list(value: object) -> tuple[str, ...]:
    items = tuple(x.lower() for x in parse_value(ConfigType.LIST, value))
    if not items:
        raise ValueError("the list is empty")
    return items


def _callable(value: object) -> object:
    if not callable(value):
        raise ValueError("expected a callable")
    return value


def _p(name: str, ctype: ConfigType, default: ConfigValue, roles: frozenset[str], doc: str, *aliases: str,
       lo: float | None = None, hi: float | None = None, convert: Callable[[object], object] | None = None,
       importance: Importance = MEDIUM, ignored: bool = False) -> Prop:
    key = ConfigKey(name, ctype, default, _range(lo, hi), doc, importance, ignored=ignored, convert=convert)
    return Prop(key, roles, aliases)


_ANY = lambda v: v  # noqa: E731  (an object passed through as given, e.g. a logger)

Callback = Callable[..., object]
"""A callback property (on_delivery, on_commit, oauth_cb): called with what librdkafka passes."""
ConfigValue = str | int | float | bool | Sequence[str] | Callback | logging.Logger | None
"""What a property may be given as: its value, or its text (a properties file's, -X's)."""
ClientConf = Mapping[str, object]
"""A client's configuration as users pass it: Kafka's (or librdkafka's) property names, each
with a ConfigValue, which ``resolve`` checks (a resolved configuration is one too)."""

# The resolved configurations: every property of a role under its canonical name, typed as
# ``resolve`` leaves it (PROPS below is the one definition; tests/unit/test_client_config.py
# holds these to it).
_CommonConfig = TypedDict("_CommonConfig", {
    "bootstrap.servers": str,
    "client.id": str,
    "request.timeout.ms": int,
    "retry.backoff.ms": int,
    "retry.backoff.max.ms": int,
    "reconnect.backoff.ms": int,
    "reconnect.backoff.max.ms": int,
    "metadata.max.age.ms": int,
    "socket.connection.setup.timeout.ms": int,
    "security.protocol": str,
    "ssl.ca.location": str | None,
    "ssl.ca.pem": str | None,
    "ssl.certificate.location": str | None,
    "ssl.certificate.pem": str | None,
    "ssl.key.location": str | None,
    "ssl.key.pem": str | None,
    "ssl.key.password": str | None,
    "ssl.keystore.type": str | None,
    "ssl.keystore.location": str | None,
    "ssl.keystore.password": str | None,
    "ssl.keystore.key": str | None,
    "ssl.keystore.certificate.chain": str | None,
    "ssl.truststore.type": str | None,
    "ssl.truststore.location": str | None,
    "ssl.truststore.password": str | None,
    "ssl.truststore.certificates": str | None,
    "ssl.endpoint.identification.algorithm": str,
    "enable.ssl.certificate.verification": bool,
    "ssl.enabled.protocols": tuple[str, ...],
    "ssl.protocol": str,
    "ssl.cipher.suites": tuple[str, ...],
    "sasl.mechanism": str | None,
    "sasl.username": str | None,
    "sasl.password": str | None,
    "sasl.jaas.config": str | None,
    "sasl.oauthbearer.config": str | None,
    "enable.sasl.oauthbearer.unsecure.jwt": bool,
    "oauth_cb": Callback | None,
    "client.rack": str | None,
    "error_cb": Callable[[KafkaError], object] | None,
    "logger": logging.Logger | None,
    "topic.metadata.propagation.max.ms": int,
    "allow.auto.create.topics": bool,
    "stats_cb": Callable[[str], object] | None,
    "throttle_cb": Callback | None,
    "statistics.interval.ms": int,
    "debug": str | None,
    "api.version.request": bool,
    "broker.address.family": str,
    "connections.max.idle.ms": int,
    "socket.keepalive.enable": bool,
    "socket.nagle.disable": bool,
    "log_level": int,
})
_ProducerProps = TypedDict("_ProducerProps", {
    "acks": int,
    "linger.ms": float,
    "batch.size": int,
    "batch.num.messages": int,
    "compression.type": str,
    "compression.level": int,
    "enable.idempotence": bool,  # as allow.auto.create.topics: unset, resolve decides
    "max.in.flight.requests.per.connection": int,
    "retries": int,
    "delivery.timeout.ms": int,
    "max.request.size": int,
    "queue.buffering.max.messages": int,
    "queue.buffering.max.kbytes": int,
    "max.block.ms": int,
    "partitioner": str,
    "on_delivery": Callback | None,
    "delivery.report.only.error": bool,
    "transactional.id": str | None,
    "transaction.timeout.ms": int,
    "sticky.partitioning.linger.ms": int,
})
_ConsumerProps = TypedDict("_ConsumerProps", {
    "group.id": str | None,
    "group.instance.id": str | None,
    "group.protocol": str,
    "group.remote.assignor": str | None,
    "auto.offset.reset": str,
    "enable.auto.commit": bool,
    "auto.commit.interval.ms": int,
    "enable.auto.offset.store": bool,
    "session.timeout.ms": int,
    "heartbeat.interval.ms": int,
    "max.poll.interval.ms": int,
    "partition.assignment.strategy": tuple[str, ...],
    "isolation.level": str,
    "fetch.min.bytes": int,
    "fetch.max.wait.ms": int,
    "fetch.max.bytes": int,
    "max.partition.fetch.bytes": int,
    "queued.max.messages.kbytes": int,
    "queued.min.messages": int,
    "max.poll.records": int,
    "share.acknowledgement.mode": str,
    "check.crcs": bool,
    "enable.partition.eof": bool,
    "on_commit": Callback | None,
    "exclude.internal.topics": bool,
})


class ProducerConfig(_CommonConfig, _ProducerProps):
    """A producer's resolved configuration."""


class ConsumerConfig(_CommonConfig, _ConsumerProps):
    """A consumer's (or share consumer's) resolved configuration."""


AdminConfig = _CommonConfig
"""An admin client's resolved configuration (the properties every client takes)."""
CommonConfig = _CommonConfig
"""What every client's resolved configuration holds: what the connections read."""

PROPS: list[Prop] = [
    # ---- common
    _p("bootstrap.servers", S, None, ALL, "Brokers to contact first, host:port comma-separated.",
       "metadata.broker.list", importance=HIGH),
    _p("client.id", S, "rivulet", ALL, "Name sent with every request, for the broker's logs and quotas."),
    _p("request.timeout.ms", I, 30000, ALL, "How long to wait for a broker's answer before retrying.",
       "socket.timeout.ms", lo=1, hi=INT32_MAX),
    _p("retry.backoff.ms", L, 100, ALL, "First wait before retrying a failed request.", lo=1, hi=300000),
    _p("retry.backoff.max.ms", L, 1000, ALL, "Longest wait between retries; the wait doubles up to it.",
       lo=1, hi=300000),
    _p("reconnect.backoff.ms", L, 50, ALL, "First wait before reconnecting to a broker.", lo=0, hi=3600000),
    _p("reconnect.backoff.max.ms", L, 1000, ALL, "Longest wait before reconnecting.", lo=0, hi=3600000),
    _p("metadata.max.age.ms", L, 300000, ALL, "Metadata older than this is refreshed.",
       "topic.metadata.refresh.interval.ms", lo=1),
    _p("socket.connection.setup.timeout.ms", L, 30000, ALL, "How long connecting may take: TCP, TLS and "
       "the broker's answer to ApiVersions (the rivulet commands wait 5000).", lo=1000),
    _p("security.protocol", S, "plaintext", ALL, "How to reach the brokers: plaintext, ssl (TLS; the "
       "ssl.* properties below), sasl_plaintext or sasl_ssl (SASL; the sasl.* properties).", convert=_choices(*SECURITY_PROTOCOL_SPELLINGS)),
    # TLS: Java's names, and librdkafka's where it names them otherwise.
    _p("ssl.ca.location", S, None, ALL, "CA certificates (PEM file or directory) the broker's certificate is "
       "checked against (librdkafka)."),
    _p("ssl.ca.pem", PW, None, ALL, "CA certificates in PEM, inline (librdkafka)."),
    _p("ssl.certificate.location", S, None, ALL, "This client's certificate chain, a PEM file (librdkafka)."),
    _p("ssl.certificate.pem", PW, None, ALL, "This client's certificate chain in PEM, inline (librdkafka)."),
    _p("ssl.key.location", S, None, ALL, "This client's private key, a PEM file (librdkafka)."),
    _p("ssl.key.pem", PW, None, ALL, "This client's private key in PEM, inline (librdkafka)."),
    _p("ssl.key.password", PW, None, ALL, "Password of the private key."),
    _p("ssl.keystore.type", S, None, ALL, "Key store format, PKCS12 or PEM (Java; default JKS, which reads "
       "a PKCS12 file); librdkafka's ssl.keystore.location is always PKCS12."),
    _p("ssl.keystore.location", S, None, ALL, "The key store: this client's key and certificate chain."),
    _p("ssl.keystore.password", PW, None, ALL, "Password of a PKCS12 key store."),
    _p("ssl.keystore.key", PW, None, ALL, "This client's private key in PEM, inline (Java)."),
    _p("ssl.keystore.certificate.chain", PW, None, ALL, "This client's certificate chain in PEM, inline (Java)."),
    _p("ssl.truststore.type", S, None, ALL, "Trust store format, PKCS12 or PEM (Java)."),
    _p("ssl.truststore.location", S, None, ALL, "The trust store file (Java)."),
    _p("ssl.truststore.password", PW, None, ALL, "Password of a PKCS12 trust store (Java)."),
    _p("ssl.truststore.certificates", PW, None, ALL, "Trusted certificates in PEM, inline (Java)."),
    _p("ssl.endpoint.identification.algorithm", S, "https", ALL, "https checks the broker's host name "
       "against its certificate; none (or empty) does not."),
    _p("enable.ssl.certificate.verification", B, True, ALL, "Check the broker's certificate at all "
       "(librdkafka)."),
    _p("ssl.enabled.protocols", LS, ("TLSv1.2", "TLSv1.3"), ALL, "TLS versions allowed (Java)."),
    _p("ssl.protocol", S, "TLSv1.3", ALL, "The TLS protocol (Java)."),
    _p("ssl.cipher.suites", LS, (), ALL, "TLS 1.2 cipher suites allowed (IANA or OpenSSL names)."),
    _p("sasl.mechanism", S, None, ALL, "SASL mechanism: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER "
       "(unset, Kafka's GSSAPI, which Rivulet does not speak).",
       "sasl.mechanisms"),
    _p("sasl.username", S, None, ALL, "SASL username for PLAIN and SCRAM (librdkafka's name)."),
    _p("sasl.password", PW, None, ALL, "SASL password for PLAIN and SCRAM (librdkafka's name)."),
    _p("sasl.jaas.config", PW, None, ALL, "The Java client's JAAS configuration: PlainLoginModule or "
       "ScramLoginModule with username and password, or OAuthBearerLoginModule's unsecuredLogin* options."),
    _p("sasl.oauthbearer.config", S, None, ALL, "librdkafka's unsecured token settings: principal=<name> "
       "[scope=a,b] [lifeSeconds=N]."),
    _p("enable.sasl.oauthbearer.unsecure.jwt", B, False, ALL, "Make unsecured OAUTHBEARER tokens from "
       "sasl.oauthbearer.config (development only)."),
    _p("oauth_cb", CL, None, ALL, "OAUTHBEARER token callback: called with sasl.oauthbearer.config, returns "
       "(token, expiry time in seconds since the epoch, principal[, extensions]).", convert=_callable),
    _p("client.rack", S, None, ALL, "The rack of this client, sent to the broker."),
    _p("error_cb", CL, None, ALL, "Called with a KafkaError for errors outside any one request.",
       convert=_callable),
    _p("logger", CL, None, ALL, "A logging.Logger to log to instead of 'rivulet.client'.", convert=_ANY),
    _p("topic.metadata.propagation.max.ms", I, 30000, ALL, "How long a topic the broker does not know may "
       "still be being created; then a producer fails its records with UNKNOWN_TOPIC_OR_PART.", lo=0,
       hi=3600000),
    _p("allow.auto.create.topics", B, None, ALL, "Let metadata requests create missing topics (default: "
       "false for consumers, true otherwise)."),
    # Accepted so existing confluent-kafka configs keep working; no effect here.
    _p("stats_cb", CL, None, ALL, "Called from poll() with librdkafka's JSON statistics every "
       "statistics.interval.ms (producers and consumers; the admin client does not call it).",
       convert=_callable),
    _p("throttle_cb", CL, None, ALL, "librdkafka throttle callback.", convert=_callable, ignored=True),
    _p("statistics.interval.ms", I, 0, ALL, "How often stats_cb is called; 0 turns statistics off.",
       lo=0, hi=86400000),
    _p("debug", S, None, ALL, "librdkafka debug contexts.", ignored=True),
    _p("api.version.request", B, True, ALL, "librdkafka ApiVersions switch.", ignored=True),
    _p("broker.address.family", S, "any", ALL, "librdkafka address family.", convert=_choices("any", "v4", "v6"),
       ignored=True),
    _p("connections.max.idle.ms", L, 0, ALL, "Idle connection timeout.", ignored=True),
    _p("socket.keepalive.enable", B, False, ALL, "TCP keepalive.", ignored=True),
    _p("socket.nagle.disable", B, True, ALL, "TCP_NODELAY (always set).", ignored=True),
    _p("log_level", I, 6, ALL, "librdkafka syslog level.", ignored=True),
    # ---- producer
    _p("acks", S, -1, PROD, "Replicas that must have a batch before it counts as sent: all (-1), 1 or 0.",
       "request.required.acks", convert=_choices(**{"all": -1, "-1": -1, "0": 0, "1": 1}), importance=HIGH),
    _p("linger.ms", D, 5.0, PROD, "How long a batch may wait for more records before it is sent.",
       "queue.buffering.max.ms", lo=0, hi=900000),
    _p("batch.size", I, 1000000, PROD, "Largest batch per partition, in bytes.", lo=1, hi=INT32_MAX),
    _p("batch.num.messages", I, 10000, PROD, "Most records in one batch.", lo=1, hi=1000000),
    _p("compression.type", S, "none", PROD, "Codec for batches: none, gzip, snappy, lz4 or zstd.",
       "compression.codec", convert=_choices("none", "gzip", "snappy", "lz4", "zstd", "uncompressed=none"),
       importance=HIGH),
    _p("compression.level", I, -1, PROD, "Codec level; -1 for the codec's default.", lo=-1, hi=22),
    _p("enable.idempotence", B, None, PROD, "Exactly-once writes per partition (on unless settings rule it out)."),
    _p("max.in.flight.requests.per.connection", I, 5, PROD, "Produce requests in flight per broker.",
       "max.in.flight", lo=1, hi=1000000),
    _p("retries", I, INT32_MAX, PROD, "How often a failed batch is retried.", "message.send.max.retries",
       lo=0, hi=INT32_MAX),
    _p("delivery.timeout.ms", I, 120000, PROD, "Longest time from produce() to the delivery report.",
       "message.timeout.ms", lo=0, hi=INT32_MAX),
    _p("max.request.size", I, 1048576, PROD, "Largest produce request.", "message.max.bytes", lo=1000,
       hi=1000000000),
    _p("queue.buffering.max.messages", I, 100000, PROD, "Most records waiting to be sent.", lo=1, hi=INT32_MAX),
    _p("queue.buffering.max.kbytes", I, 1048576, PROD, "Most KiB of records waiting to be sent.", lo=1,
       hi=INT32_MAX),
    _p("max.block.ms", L, 60000, PROD, "How long produce() may block when the queue is full.", lo=0),
    _p("partitioner", S, "consistent_random", PROD, "How keys map to partitions (librdkafka's names; "
       "murmur2_random is Java's).",
       convert=_choices("consistent_random", "consistent", "murmur2_random", "murmur2", "fnv1a_random", "fnv1a",
                        "random")),
    _p("on_delivery", CL, None, PROD, "Called with (err, msg) for each record.", "delivery.report.cb",
       convert=_callable),
    _p("delivery.report.only.error", B, False, PROD, "Report failed deliveries only."),
    _p("transactional.id", S, None, PROD, "Makes the producer transactional, with this stable id."),
    _p("transaction.timeout.ms", I, 60000, PROD, "The broker aborts a transaction open longer than this.",
       lo=1000, hi=INT32_MAX),
    _p("sticky.partitioning.linger.ms", I, 10, PROD, "librdkafka sticky partitioning.", ignored=True),
    # ---- consumer
    _p("group.id", S, None, CONS, "The consumer group to join; needed for subscribe() and commits.",
       importance=HIGH),
    _p("group.instance.id", S, None, CONS, "A static member id: a restart within the session timeout keeps "
       "the assignment."),
    _p("group.protocol", S, "classic", CONS, "The group protocol: classic (JoinGroup and SyncGroup, the "
       "client assigns) or consumer (KIP-848: the broker assigns, rebalances are incremental).",
       convert=_choices("classic", "consumer")),
    _p("group.remote.assignor", S, None, CONS, "With group.protocol=consumer, the broker-side assignor to "
       "ask for (uniform or range); unset, the broker's default."),
    _p("auto.offset.reset", S, "latest", CONS, "Where to start without a committed offset: earliest, latest "
       "or none (an error).", convert=_choices("earliest", "smallest=earliest", "beginning=earliest", "latest",
                                               "largest=latest", "end=latest", "none", "error=none"),
       importance=HIGH),
    _p("enable.auto.commit", B, True, CONS, "Commit consumed positions in the background."),
    _p("auto.commit.interval.ms", I, 5000, CONS, "How often positions are committed automatically.", lo=0),
    _p("enable.auto.offset.store", B, True, CONS, "Store a record's offset for commit when it is returned."),
    _p("session.timeout.ms", I, 45000, CONS, "A member silent this long leaves the group.", lo=1, hi=3600000),
    _p("heartbeat.interval.ms", I, 3000, CONS, "How often the member heartbeats.", lo=1, hi=3600000),
    _p("max.poll.interval.ms", I, 300000, CONS, "Longest gap between poll() calls before the member leaves.",
       lo=1, hi=86400000),
    _p("partition.assignment.strategy", LS, ("range", "roundrobin"), CONS, "Assignors offered to the group: "
       "range, roundrobin, cooperative-sticky.", convert=_lower_list),
    _p("isolation.level", S, "read_committed", CONS, "read_committed hides aborted and open transactions.",
       convert=_choices("read_committed", "read_uncommitted")),
    _p("fetch.min.bytes", I, 1, CONS, "Bytes a fetch waits for before it is answered.", lo=1, hi=100000000),
    _p("fetch.max.wait.ms", I, 500, CONS, "Longest a fetch waits for fetch.min.bytes.", "fetch.wait.max.ms",
       lo=0, hi=300000),
    _p("fetch.max.bytes", I, 52428800, CONS, "Largest fetch response asked for.", lo=0, hi=INT32_MAX),
    _p("max.partition.fetch.bytes", I, 1048576, CONS, "Largest data per partition in a fetch.",
       "fetch.message.max.bytes", lo=1, hi=INT32_MAX),
    # librdkafka buffers 64 MiB; a quarter keeps the garbage collector's scans of buffered
    # Message objects short and still holds several full fetch responses.
    _p("queued.max.messages.kbytes", I, 16384, CONS, "Most KiB of fetched records buffered.", lo=1, hi=2097151),
    _p("queued.min.messages", I, 100000, CONS, "librdkafka prefetch threshold.", lo=1, ignored=True),
    _p("max.poll.records", I, 500, CONS, "Most records one poll returns.", lo=1),
    _p("share.acknowledgement.mode", S, "implicit", CONS, "A share consumer's acknowledgements: implicit (the "
       "next poll or commit accepts the last batch) or explicit (acknowledge() each record).",
       convert=_choices("implicit", "explicit")),
    _p("check.crcs", B, False, CONS, "Verify each batch's CRC."),
    _p("enable.partition.eof", B, False, CONS, "Report reaching the end of a partition."),
    _p("on_commit", CL, None, CONS, "Called with (err, partitions) after each commit.", convert=_callable),
    _p("exclude.internal.topics", B, True, CONS, "Never match internal topics when subscribing by pattern."),
]

CLIENT_CONFIGS = ConfigDef(p.key for p in PROPS)
BY_NAME: dict[str, Prop] = {}
for _prop in PROPS:
    BY_NAME[_prop.name] = _prop
    for _a in _prop.aliases:
        BY_NAME[_a] = _prop

ASSIGNORS = ("range", "roundrobin", "cooperative-sticky")


def _coerce(p: Prop, given: str, value: object) -> ConfigValue:
    if value is None and p.key.type in (ConfigType.STRING, ConfigType.CLASS, ConfigType.PASSWORD):
        return None
    try:
        return p.key.parse(value)
    except ConfigError as e:
        raise ConfigException(f"Invalid value {value!r} for configuration property \"{given}\": {e.reason}") \
            from None


@overload
def resolve(conf: ClientConf | None, role: Literal["producer"], extra: ClientConf | None = None) -> ProducerConfig:
    ...


@overload
def resolve(conf: ClientConf | None, role: Literal["consumer"], extra: ClientConf | None = None) -> ConsumerConfig:
    ...


@overload
def resolve(conf: ClientConf | None, role: Literal["admin"], extra: ClientConf | None = None) -> AdminConfig:
    ...


def resolve(conf: ClientConf | None, role: str, extra: ClientConf | None = None
            ) -> ProducerConfig | ConsumerConfig | AdminConfig:
    """Validate ``conf`` (and ``extra``, keyword arguments) for a producer, consumer or admin
    client: a fresh dict of every property of the role, defaults filled in."""
    if conf is not None and not isinstance(conf, Mapping):
        raise ConfigException(f"expected a dict of configuration properties, got {type(conf).__name__}")
    merged = dict(conf or {})
    merged.update(extra or {})
    out: dict[str, ConfigValue] = {}
    explicit: set[str] = set()
    for given, value in merged.items():
        p = BY_NAME.get(given)
        if p is None:
            raise ConfigException(f"No such configuration property: \"{given}\"")
        if role not in p.roles:
            log.warning("configuration property %s is a %s property and is ignored by this %s",
                        given, "/".join(sorted(p.roles)), role)
            continue
        if p.name in explicit:
            raise ConfigException(f"configuration property \"{p.name}\" is given twice (as \"{given}\")")
        explicit.add(p.name)
        out[p.name] = _coerce(p, given, value)
    for p in PROPS:
        if role in p.roles and p.name not in out:
            out[p.name] = p.default
    # The dict holds each property of the role under its name, parsed to its type: the
    # TypedDicts above, which a test holds to PROPS.
    c = cast(ProducerConfig, out) if role == P else cast(ConsumerConfig, out) if role == C else cast(AdminConfig, out)
    _check_common(c, explicit)
    if role == P:
        _check_producer(cast(ProducerConfig, c))
    elif role == C:
        _check_consumer(cast(ConsumerConfig, c))
    if c["allow.auto.create.topics"] is None:  # unset: false for consumers, true otherwise
        c["allow.auto.create.topics"] = role != C
    return c


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    """``bootstrap.servers`` as (host, port) pairs; called by both transports and the admin client."""
    out = []
    for item in servers.split(","):
        item = item.strip()
        if not item:
            continue
        if "://" in item:
            item = item.split("://", 1)[1]
        host, sep, port = item.rpartition(":")
        if not sep:
            host, port = item, "9092"
        try:
            port_n = int(port)
        except ValueError:
            raise ValueError(f"invalid port in {item!r}") from None
        if not 0 < port_n < 65536:
            raise ValueError(f"invalid port in {item!r}")
        out.append((host.strip("[]") or "localhost", port_n))
    if not out:
        raise ValueError("bootstrap.servers is empty")
    return out


def _check_common(c: CommonConfig, explicit: set[str]) -> None:
    if not c["bootstrap.servers"]:
        raise ConfigException("bootstrap.servers must be set")
    try:
        sasl_credentials({k: v for k, v in c.items() if k in explicit or k == "security.protocol"})
    except ValueError as e:
        raise ConfigException(str(e)) from None
    try:
        parse_bootstrap(c["bootstrap.servers"])
    except ValueError as e:
        raise ConfigException(f"Invalid value for configuration property \"bootstrap.servers\": {e}") from None


def _check_producer(c: ProducerConfig) -> None:
    if c["transactional.id"] is not None:
        # A transactional producer is an idempotent one, acks=all (as in Java and librdkafka).
        if not c["transactional.id"]:
            raise ConfigException("transactional.id must not be empty")
        if c["enable.idempotence"] is False:
            raise ConfigException("transactional.id requires enable.idempotence=true")
        if c["acks"] != -1:
            raise ConfigException("transactional.id requires acks=all")
        c["enable.idempotence"] = True
    idem = c["enable.idempotence"]
    if idem:  # explicitly on: conflicting settings are errors, as in Java
        if c["acks"] != -1:
            raise ConfigException("enable.idempotence=true requires acks=all")
        if c["max.in.flight.requests.per.connection"] > 5:
            raise ConfigException("enable.idempotence=true requires max.in.flight.requests.per.connection <= 5")
        if c["retries"] == 0:
            raise ConfigException("enable.idempotence=true requires retries > 0")
    elif idem is None:  # on by default unless other settings rule it out
        c["enable.idempotence"] = (c["acks"] == -1 and c["max.in.flight.requests.per.connection"] <= 5
                                   and c["retries"] > 0)
    if c["compression.level"] != -1:
        limits = {"gzip": 9, "lz4": 12, "zstd": 22, "snappy": 0, "none": 0}
        if c["compression.level"] > limits[c["compression.type"]]:
            raise ConfigException(f"compression.level {c['compression.level']} is out of range for "
                                  f"{c['compression.type']}")


def _check_consumer(c: ConsumerConfig) -> None:
    if c["heartbeat.interval.ms"] >= c["session.timeout.ms"]:
        raise ConfigException("heartbeat.interval.ms must be lower than session.timeout.ms")
    for name in c["partition.assignment.strategy"]:
        if name not in ASSIGNORS:
            raise ConfigException(f"Invalid value for configuration property \"partition.assignment.strategy\": "
                                  f"unknown assignor {name!r}; expected one of {', '.join(ASSIGNORS)}")
    strategies = c["partition.assignment.strategy"]
    if "cooperative-sticky" in strategies and len(strategies) > 1:
        # librdkafka refuses to mix eager and cooperative protocols in one member.
        raise ConfigException("partition.assignment.strategy: cooperative-sticky cannot be combined "
                              "with eager assignors")
    if c["group.instance.id"] is not None and not c["group.instance.id"]:
        raise ConfigException("group.instance.id must not be empty")


def describe(role: str) -> list[Prop]:
    """The properties a role accepts (for documentation and the CLI's -X help)."""
    return [p for p in PROPS if role in p.roles]


def ssl_context(conf: ClientConf) -> ssl.SSLContext | None:
    """The TLS context ``security.protocol`` asks for (None for plaintext); a setting that
    cannot work is a ConfigException naming it."""
    # Typed by each property's definition: a resolved Config, or strings (Spark's options).
    typed: dict[str, ConfigValue] = {}
    for k, v in conf.items():
        if k.startswith("ssl.") or k == "enable.ssl.certificate.verification":
            if k not in BY_NAME:
                raise ConfigException(f"No such configuration property: \"{k}\"")
            typed[k] = _coerce(BY_NAME[k], k, v)
    if str(conf.get("security.protocol") or "").lower() not in ("ssl", "sasl_ssl"):
        return None
    # Imported here: it brings in cryptography (about 40 ms), which a plaintext client such as
    # the Spark source's per-query planner process never needs.
    from rivulet.security import tls
    try:
        return tls.client_context(tls.client_ssl_config(typed))
    except ConfigError as e:
        raise ConfigException(str(e)) from None
