"""Configuration definitions: one declaration per property, in the manner of Kafka's ConfigDef.

A ``ConfigKey`` says what a property is (type, default, validator, documentation,
importance) and whether a running broker may change it (its dynamic update mode). A
``ConfigDef`` is an ordered set of keys that parses a whole property map and reports every
unknown name or bad value at once. The broker's keys live in ``server/config.py``, the topic
keys in ``storage/config.py`` and the client's in ``client/config.py``; the machinery is here.

Values are parsed with Kafka's rules: strings are trimmed; booleans are ``true`` or ``false``
in any case; INT, SHORT and LONG are decimal integers within the Java type's range; a LIST
is comma-separated with blank items dropped. Python values (``True``, ``5``, ``["a"]``) are
accepted as they are, as Kafka's Java client accepts typed objects.
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum, IntEnum
from pathlib import Path
from typing import Any, Protocol

SHORT_MIN, SHORT_MAX = -(1 << 15), (1 << 15) - 1
INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1


class ConfigType(IntEnum):
    """A property's type; the values are DescribeConfigs' ``config_type`` codes."""

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
    """Where a value comes from; the values are DescribeConfigs' ``config_source`` codes."""

    UNKNOWN = 0
    UNKNOWN_CONFIG = 0  # confluent-kafka's name for it, which Rivulet's admin client keeps
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class AlterConfigOpType(IntEnum):
    """IncrementalAlterConfigs' operations; the values are its ``config_operation`` codes."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class AlterConfigOp(Protocol):
    """One IncrementalAlterConfigs operation as a request carries it."""

    name: str
    config_operation: int  # an AlterConfigOpType, or any other code a client sent
    value: str | None


class Importance(str, Enum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


class UpdateMode(str, Enum):
    """Whether a running broker accepts a new value (Kafka's "Update Mode" column)."""

    READ_ONLY = "read-only"
    PER_BROKER = "per-broker"  # per broker only, never as the cluster-wide default
    CLUSTER_WIDE = "cluster-wide"  # per broker or as the cluster-wide default
    PER_TOPIC = "per-topic"  # a topic config: set on each topic, never read-only

    @property
    def dynamic(self) -> bool:
        return self is not UpdateMode.READ_ONLY


class ConfigError(ValueError):
    """An unknown property or a value its definition refuses. ``name``, ``value`` and
    ``reason`` describe a single problem; ``errors`` holds each one when several are reported."""

    def __init__(self, message: str, name: str | None = None, value: Any = None, reason: str = "",
                 errors: list[ConfigError] | None = None) -> None:
        super().__init__(message)
        self.name = name
        self.value = value
        self.reason = reason
        self.errors = errors if errors is not None else [self]


# -- validators: return None when the value is fine, else the reason -----------------------

Validator = Callable[[Any], "str | None"]


def at_least(n: float) -> Validator:
    return lambda v: None if v >= n else f"Value must be at least {n}"


def between(lo: float, hi: float) -> Validator:
    # Kafka's ConfigDef.Range.between, which names the bound crossed
    return lambda v: f"Value must be at least {lo}" if v < lo else f"Value must be no more than {hi}" if v > hi else None


def one_of(*choices: str) -> Validator:
    return lambda v: None if v in choices else f"String must be one of: {', '.join(choices)}"


def one_of_ignoring_case(*choices: str) -> Validator:
    lowered = {c.lower() for c in choices}
    return lambda v: None if v is not None and v.lower() in lowered else \
        f"String must be one of (case insensitive): {', '.join(choices)}"


def each_of(*choices: str) -> Validator:
    """For a LIST: every item must be one of ``choices`` (worded as Kafka's ValidList words it)."""

    def check(v: Iterable[str]) -> str | None:
        return None if all(x in choices for x in v) else f"String must be one of: {', '.join(choices)}"

    return check


# -- parsing and rendering -------------------------------------------------------------------

_RANGES = {
    ConfigType.SHORT: (SHORT_MIN, SHORT_MAX),
    ConfigType.INT: (INT_MIN, INT_MAX),
    ConfigType.LONG: (LONG_MIN, LONG_MAX),
}


# Any in this framework: a property's value, whose type its ConfigType (or convert) decides and
# whose readers (BrokerConfig, LogConfig, the client's TypedDicts) type by property.
def parse_value(ctype: ConfigType, raw: Any) -> Any:
    """``raw`` as a value of ``ctype``; ValueError with the reason when it is not one."""
    if ctype in _RANGES:
        if isinstance(raw, bool):
            raise ValueError(f"Not a number of type {ctype.name}")
        if isinstance(raw, float):
            if not raw.is_integer():
                raise ValueError(f"Not a number of type {ctype.name}")
            raw = int(raw)
        try:
            value = raw if isinstance(raw, int) else int(str(raw).strip())
        except ValueError:
            raise ValueError(f"Not a number of type {ctype.name}") from None
        lo, hi = _RANGES[ctype]
        if not lo <= value <= hi:
            raise ValueError(f"Not a number of type {ctype.name}")
        return value
    if ctype is ConfigType.DOUBLE:
        if isinstance(raw, bool):
            raise ValueError("Not a number of type DOUBLE")
        try:
            return float(raw) if isinstance(raw, (int, float)) else float(str(raw).strip())
        except ValueError:
            raise ValueError("Not a number of type DOUBLE") from None
    if ctype is ConfigType.BOOLEAN:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower() if isinstance(raw, str) else ""
        if text not in ("true", "false"):
            raise ValueError("Expected value to be either true or false")
        return text == "true"
    if ctype is ConfigType.LIST:
        items = raw.split(",") if isinstance(raw, str) else raw
        try:
            return tuple(s for s in (str(x).strip() for x in items) if s)
        except TypeError:
            raise ValueError("Expected a comma-separated list") from None
    if not isinstance(raw, str):
        raise ValueError("Expected value to be a string")
    return raw.strip()


def render_value(ctype: ConfigType, value: Any) -> str | None:
    """A value as Kafka prints it (DescribeConfigs, documentation)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if ctype is ConfigType.LIST and not isinstance(value, str):
        return ",".join(str(x) for x in value)
    if ctype is ConfigType.DOUBLE and isinstance(value, float):
        return java_double(value)
    return str(value)


def java_double(value: float) -> str:
    """Java's Double.toString: positional from 10^-3 up to 10^7, else like 1.0E7 (what Kafka's
    DescribeConfigs shows for log.cleaner.io.max.bytes.per.second's default, Double.MAX_VALUE)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    magnitude = abs(value)
    if magnitude == 0 or 1e-3 <= magnitude < 1e7:
        return repr(value)
    _, digits, exponent = decimal.Decimal(repr(magnitude)).normalize().as_tuple()
    shown = "".join(map(str, digits))
    assert isinstance(exponent, int)
    return f"{'-' if value < 0 else ''}{shown[0]}.{shown[1:] or '0'}E{len(shown) - 1 + exponent}"


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One property's definition."""

    name: str
    type: ConfigType
    default: Any = None
    validator: Validator | None = None
    doc: str = ""
    importance: Importance = Importance.MEDIUM
    update_mode: UpdateMode = UpdateMode.READ_ONLY
    # Accepted so existing configuration files keep working, but Rivulet makes no use of it.
    ignored: bool = False
    # Replaces the type's parsing where a property takes its own spellings (enum aliases,
    # callables); raises ValueError with the reason.
    convert: Callable[[Any], Any] | None = None

    @property
    def dynamic(self) -> bool:
        return self.update_mode.dynamic

    @property
    def sensitive(self) -> bool:
        return self.type is ConfigType.PASSWORD

    def parse(self, raw: Any) -> Any:
        """The typed value of ``raw``; ConfigError naming the property when it is refused."""
        try:
            value = self.convert(raw) if self.convert is not None else parse_value(self.type, raw)
        except ValueError as e:
            raise self.error(raw, str(e)) from None
        if self.validator is not None and value is not None:
            reason = self.validator(value)
            if reason:
                raise self.error(raw, reason)
        return value

    def error(self, raw: Any, reason: str) -> ConfigError:
        return ConfigError(f"invalid value '{raw}' for '{self.name}': {reason}", self.name, raw, reason)

    def render(self, value: Any) -> str | None:
        return render_value(self.type, value)


class ConfigDef:
    """An ordered set of ConfigKeys, looked up by name."""

    def __init__(self, keys: Iterable[ConfigKey] = ()) -> None:
        self._keys: dict[str, ConfigKey] = {}
        for k in keys:
            self.define(k)

    def define(self, key: ConfigKey) -> ConfigDef:
        if key.name in self._keys:
            raise ValueError(f"config {key.name} is defined twice")
        self._keys[key.name] = key
        return self

    def __contains__(self, name: object) -> bool:
        return name in self._keys

    def __getitem__(self, name: str) -> ConfigKey:
        return self._keys[name]

    def get(self, name: str) -> ConfigKey | None:
        return self._keys.get(name)

    def __iter__(self) -> Iterator[ConfigKey]:
        return iter(self._keys.values())

    def __len__(self) -> int:
        return len(self._keys)

    def names(self) -> list[str]:
        return list(self._keys)

    def defaults(self) -> dict[str, Any]:
        return {k.name: k.default for k in self._keys.values()}

    def parse(self, props: Mapping[str, Any]) -> dict[str, Any]:
        """Typed values of ``props``; one ConfigError naming every unknown or refused property."""
        values: dict[str, Any] = {}
        errors: list[ConfigError] = []
        for name, raw in props.items():
            key = self._keys.get(name)
            if key is None:
                errors.append(ConfigError(f"unknown property '{name}'", name, raw, "unknown property"))
                continue
            try:
                values[name] = key.parse(raw)
            except ConfigError as e:
                errors.append(e)
        if errors:
            if len(errors) == 1:
                raise errors[0]
            raise ConfigError("; ".join(str(e) for e in errors), errors=errors)
        return values


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One DescribeConfigs entry: the value in force and where it comes from."""

    name: str
    value: str | None
    is_default: bool
    source: ConfigSource
    config_type: ConfigType
    read_only: bool = False
    sensitive: bool = False
    # (name, value, source), most specific first, as DescribeConfigs lists synonyms.
    synonyms: tuple[tuple[str, str | None, ConfigSource], ...] = ()
    documentation: str | None = None


def load_properties(path: str | Path) -> dict[str, str]:
    """A Java ``.properties`` file as a dict: ``key=value``, ``key: value`` and ``key value``
    lines, ``#`` and ``!`` comments, backslash continuations and escapes."""
    from jproperties import Properties, PropertyError  # imported here: only the broker reads files

    props = Properties()
    try:
        with open(path, "rb") as f:
            props.load(f, "utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text ({e.reason})") from None
    except PropertyError as e:
        raise ConfigError(f"{path}: {e}") from None
    return {k: v.data for k, v in props.items()}
