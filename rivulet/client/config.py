"""Client configuration: Kafka property names in, typed and validated settings out.

Every property the client understands is declared once below with its type, default, the
roles it applies to, and the spellings librdkafka (confluent-kafka) and Java users know it by.
Construction fails with a ConfigException naming the property for an unknown name or a bad
value; a property of the other role (``group.id`` given to a producer) is ignored with a
warning, as librdkafka does, because shared base configs are common.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from rivulet.client.errors import ConfigException

log = logging.getLogger("rivulet.client")

P, C, A = "producer", "consumer", "admin"
ALL = frozenset((P, C, A))
PROD = frozenset((P,))
CONS = frozenset((C,))

INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class Prop:
    name: str
    kind: str  # int, bool, str, enum, list, callable, any
    default: Any
    roles: frozenset[str]
    aliases: tuple[str, ...] = ()
    choices: Mapping[str, Any] | None = None  # accepted spelling -> canonical value
    lo: int | None = None
    hi: int | None = None
    ignored: bool = False  # accepted for compatibility; has no effect
    doc: str = ""


def _e(*pairs: str) -> dict[str, str]:
    """Choices given as 'spelling=canonical' or 'name'."""
    out = {}
    for p in pairs:
        k, _, v = p.partition("=")
        out[k] = v or k
    return out


PROPS: list[Prop] = [
    # ---- common
    Prop("bootstrap.servers", "str", None, ALL, ("metadata.broker.list",)),
    Prop("client.id", "str", "rivulet", ALL),
    Prop("request.timeout.ms", "int", 30000, ALL, ("socket.timeout.ms",), lo=1, hi=INT32_MAX),
    Prop("retry.backoff.ms", "int", 100, ALL, lo=1, hi=300000),
    Prop("retry.backoff.max.ms", "int", 1000, ALL, lo=1, hi=300000),
    Prop("reconnect.backoff.ms", "int", 50, ALL, lo=0, hi=3600000),
    Prop("reconnect.backoff.max.ms", "int", 1000, ALL, lo=0, hi=3600000),
    Prop("metadata.max.age.ms", "int", 300000, ALL, ("topic.metadata.refresh.interval.ms",), lo=1),
    Prop("socket.connection.setup.timeout.ms", "int", 30000, ALL, lo=1000),
    Prop("security.protocol", "enum", "plaintext", ALL, choices=_e("plaintext", "PLAINTEXT=plaintext")),
    Prop("client.rack", "str", None, ALL),
    Prop("error_cb", "callable", None, ALL),
    Prop("logger", "any", None, ALL),
    Prop("allow.auto.create.topics", "bool", None, ALL),
    # Accepted so existing confluent-kafka configs keep working; no effect here.
    Prop("stats_cb", "callable", None, ALL, ignored=True),
    Prop("throttle_cb", "callable", None, ALL, ignored=True),
    Prop("statistics.interval.ms", "int", 0, ALL, ignored=True),
    Prop("debug", "str", None, ALL, ignored=True),
    Prop("api.version.request", "bool", True, ALL, ignored=True),
    Prop("broker.address.family", "enum", "any", ALL, choices=_e("any", "v4", "v6"), ignored=True),
    Prop("connections.max.idle.ms", "int", 0, ALL, ignored=True),
    Prop("socket.keepalive.enable", "bool", False, ALL, ignored=True),
    Prop("socket.nagle.disable", "bool", True, ALL, ignored=True),
    Prop("log_level", "int", 6, ALL, ignored=True),
    # ---- producer
    Prop("acks", "enum", -1, PROD, ("request.required.acks",), choices={"all": -1, "-1": -1, "0": 0, "1": 1}),
    Prop("linger.ms", "float", 5.0, PROD, ("queue.buffering.max.ms",), lo=0, hi=900000),
    Prop("batch.size", "int", 1000000, PROD, lo=1, hi=INT32_MAX),
    Prop("batch.num.messages", "int", 10000, PROD, lo=1, hi=1000000),
    Prop("compression.type", "enum", "none", PROD, ("compression.codec",),
         choices=_e("none", "gzip", "snappy", "lz4", "zstd", "uncompressed=none")),
    Prop("compression.level", "int", -1, PROD, lo=-1, hi=22),
    Prop("enable.idempotence", "bool", None, PROD),
    Prop("max.in.flight.requests.per.connection", "int", 5, PROD, ("max.in.flight",), lo=1, hi=1000000),
    Prop("retries", "int", INT32_MAX, PROD, ("message.send.max.retries",), lo=0, hi=INT32_MAX),
    Prop("delivery.timeout.ms", "int", 120000, PROD, ("message.timeout.ms",), lo=0, hi=INT32_MAX),
    Prop("max.request.size", "int", 1048576, PROD, ("message.max.bytes",), lo=1000, hi=1000000000),
    Prop("queue.buffering.max.messages", "int", 100000, PROD, lo=1, hi=INT32_MAX),
    Prop("queue.buffering.max.kbytes", "int", 1048576, PROD, lo=1, hi=INT32_MAX),
    Prop("max.block.ms", "int", 60000, PROD, lo=0),
    Prop("partitioner", "enum", "murmur2_random", PROD,
         choices=_e("murmur2_random", "murmur2", "consistent_random", "consistent", "random")),
    Prop("on_delivery", "callable", None, PROD, ("delivery.report.cb",)),
    Prop("delivery.report.only.error", "bool", False, PROD),
    Prop("transactional.id", "str", None, PROD),
    Prop("transaction.timeout.ms", "int", 60000, PROD, lo=1000, hi=INT32_MAX),
    Prop("sticky.partitioning.linger.ms", "int", 10, PROD, ignored=True),
    # ---- consumer
    Prop("group.id", "str", None, CONS),
    Prop("group.instance.id", "str", None, CONS),
    Prop("group.protocol", "enum", "classic", CONS, choices=_e("classic")),
    Prop("auto.offset.reset", "enum", "latest", CONS,
         choices=_e("earliest", "smallest=earliest", "beginning=earliest", "latest", "largest=latest",
                    "end=latest", "none", "error=none")),
    Prop("enable.auto.commit", "bool", True, CONS),
    Prop("auto.commit.interval.ms", "int", 5000, CONS, lo=0),
    Prop("enable.auto.offset.store", "bool", True, CONS),
    Prop("session.timeout.ms", "int", 45000, CONS, lo=1, hi=3600000),
    Prop("heartbeat.interval.ms", "int", 3000, CONS, lo=1, hi=3600000),
    Prop("max.poll.interval.ms", "int", 300000, CONS, lo=1, hi=86400000),
    Prop("partition.assignment.strategy", "list", ("range", "roundrobin"), CONS),
    Prop("isolation.level", "enum", "read_committed", CONS,
         choices=_e("read_committed", "read_uncommitted")),
    Prop("fetch.min.bytes", "int", 1, CONS, lo=1, hi=100000000),
    Prop("fetch.max.wait.ms", "int", 500, CONS, ("fetch.wait.max.ms",), lo=0, hi=300000),
    Prop("fetch.max.bytes", "int", 52428800, CONS, lo=0, hi=INT32_MAX),
    Prop("max.partition.fetch.bytes", "int", 1048576, CONS, ("fetch.message.max.bytes",), lo=1, hi=INT32_MAX),
    # librdkafka buffers 64 MiB; a quarter keeps the garbage collector's scans of buffered
    # Message objects short and still holds several full fetch responses.
    Prop("queued.max.messages.kbytes", "int", 16384, CONS, lo=1, hi=2097151),
    Prop("queued.min.messages", "int", 100000, CONS, lo=1, ignored=True),
    Prop("max.poll.records", "int", 500, CONS, lo=1),
    Prop("check.crcs", "bool", False, CONS),
    Prop("enable.partition.eof", "bool", False, CONS),
    Prop("on_commit", "callable", None, CONS),
    Prop("exclude.internal.topics", "bool", True, CONS),
]

BY_NAME: dict[str, Prop] = {}
for _p in PROPS:
    BY_NAME[_p.name] = _p
    for _a in _p.aliases:
        BY_NAME[_a] = _p

ASSIGNORS = ("range", "roundrobin", "cooperative-sticky")


def _coerce(p: Prop, given: str, value: Any) -> Any:
    def bad(why: str) -> ConfigException:
        return ConfigException(f"Invalid value {value!r} for configuration property \"{given}\": {why}")

    if value is None and p.kind in ("str", "callable", "any"):
        return None
    k = p.kind
    if k in ("int", "float"):
        if isinstance(value, bool):
            raise bad("expected a number")
        try:
            v = float(value) if k == "float" else int(str(value).strip()) if isinstance(value, str) else int(value)
        except (TypeError, ValueError):
            raise bad("expected a number") from None
        if k == "int" and isinstance(value, float) and value != int(value):
            raise bad("expected an integer")
        if p.lo is not None and v < p.lo:
            raise bad(f"must be at least {p.lo}")
        if p.hi is not None and v > p.hi:
            raise bad(f"must be at most {p.hi}")
        return v
    if k == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise bad("expected true or false")
    if k == "str":
        if not isinstance(value, str):
            raise bad("expected a string")
        return value
    if k == "enum":
        key = str(value).strip()
        if key in p.choices:
            return p.choices[key]
        if key.lower() in p.choices:
            return p.choices[key.lower()]
        raise bad(f"expected one of {', '.join(sorted(p.choices))}")
    if k == "list":
        items = value.split(",") if isinstance(value, str) else list(value)
        out = tuple(str(i).strip().lower() for i in items if str(i).strip())
        if not out:
            raise bad("the list is empty")
        return out
    if k == "callable":
        if not callable(value):
            raise bad("expected a callable")
        return value
    return value


class Config(dict):
    """Canonical property name -> typed value, defaults filled in."""

    role: str
    explicit: frozenset[str]


def resolve(conf: Mapping[str, Any] | None, role: str, extra: Mapping[str, Any] | None = None) -> Config:
    """Validate ``conf`` for a producer, consumer or admin client."""
    if conf is not None and not isinstance(conf, Mapping):
        raise ConfigException(f"expected a dict of configuration properties, got {type(conf).__name__}")
    merged = dict(conf or {})
    merged.update(extra or {})
    out = Config()
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
    out.role = role
    out.explicit = frozenset(explicit)
    _check(out, role)
    return out


def _check(c: Config, role: str) -> None:
    if not c["bootstrap.servers"]:
        raise ConfigException("bootstrap.servers must be set")
    from rivulet.client.client import parse_bootstrap
    try:
        parse_bootstrap(c["bootstrap.servers"])
    except ValueError as e:
        raise ConfigException(f"Invalid value for configuration property \"bootstrap.servers\": {e}") from None
    if role == P:
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
    if role == C:
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
        if c["allow.auto.create.topics"] is None:
            c["allow.auto.create.topics"] = False
    elif c["allow.auto.create.topics"] is None:
        c["allow.auto.create.topics"] = True


def describe(role: str) -> list[Prop]:
    """The properties a role accepts (for documentation and the CLI's -X help)."""
    return [p for p in PROPS if role in p.roles]


Callback = Callable[..., Any]
