"""Errors as confluent-kafka's users know them: a ``KafkaError`` value and a ``KafkaException``.

``KafkaError`` is a value (not an exception) carrying a code, a name and a message, so that
delivery reports and ``Message.error()`` can hand it out; ``KafkaException`` wraps one when
something has to be raised. Broker error codes keep their wire values; ``name()`` gives
librdkafka's spelling where it differs from Kafka's (``UNKNOWN_TOPIC_OR_PART``), and both
resolve as attributes (``KafkaError.UNKNOWN_TOPIC_OR_PARTITION`` too); client-side
conditions use librdkafka's negative codes (``_PARTITION_EOF``, ``_MSG_TIMED_OUT``...).
"""

from __future__ import annotations

import logging
from typing import Callable

from rivulet.client import core
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.errors import ApiError as ProtocolError

# librdkafka's local (client-side) error codes, by the names confluent-kafka exposes.
LOCAL_CODES: dict[str, int] = {
    "_BAD_MSG": -199, "_BAD_COMPRESSION": -198, "_DESTROY": -197, "_FAIL": -196, "_TRANSPORT": -195,
    "_CRIT_SYS_RESOURCE": -194, "_RESOLVE": -193, "_MSG_TIMED_OUT": -192, "_PARTITION_EOF": -191,
    "_UNKNOWN_PARTITION": -190, "_FS": -189, "_UNKNOWN_TOPIC": -188, "_ALL_BROKERS_DOWN": -187,
    "_INVALID_ARG": -186, "_TIMED_OUT": -185, "_QUEUE_FULL": -184, "_ISR_INSUFF": -183,
    "_NODE_UPDATE": -182, "_SSL": -181, "_WAIT_COORD": -180, "_UNKNOWN_GROUP": -179,
    "_IN_PROGRESS": -178, "_PREV_IN_PROGRESS": -177, "_EXISTING_SUBSCRIPTION": -176,
    "_ASSIGN_PARTITIONS": -175, "_REVOKE_PARTITIONS": -174, "_CONFLICT": -173, "_STATE": -172,
    "_UNKNOWN_PROTOCOL": -171, "_NOT_IMPLEMENTED": -170, "_AUTHENTICATION": -169, "_NO_OFFSET": -168,
    "_OUTDATED": -167, "_TIMED_OUT_QUEUE": -166, "_UNSUPPORTED_FEATURE": -165, "_WAIT_CACHE": -164,
    "_INTR": -163, "_KEY_SERIALIZATION": -162, "_VALUE_SERIALIZATION": -161,
    "_KEY_DESERIALIZATION": -160, "_VALUE_DESERIALIZATION": -159, "_PARTIAL": -158,
    "_READ_ONLY": -157, "_NOENT": -156, "_UNDERFLOW": -155, "_INVALID_TYPE": -154, "_RETRY": -153,
    "_PURGE_QUEUE": -152, "_PURGE_INFLIGHT": -151, "_FATAL": -150, "_INCONSISTENT": -149,
    "_GAPLESS_GUARANTEE": -148, "_MAX_POLL_EXCEEDED": -147, "_UNKNOWN_BROKER": -146,
    "_NOT_CONFIGURED": -145, "_FENCED": -144, "_APPLICATION": -143, "_ASSIGNMENT_LOST": -142,
    "_NOOP": -141, "_AUTO_OFFSET_RESET": -140, "_LOG_TRUNCATION": -139,
}

# Where librdkafka's name for a broker error differs from Kafka's.
_RDKAFKA_ALIASES: dict[str, int] = {
    "NO_ERROR": 0, "UNKNOWN": -1, "INVALID_MSG": 2, "UNKNOWN_TOPIC_OR_PART": 3, "INVALID_MSG_SIZE": 4,
    "NOT_LEADER_FOR_PARTITION": 6, "MSG_SIZE_TOO_LARGE": 10, "STALE_CTRL_EPOCH": 11, "TOPIC_EXCEPTION": 17,
}

_NAMES: dict[int, str] = {v: k for k, v in LOCAL_CODES.items()}
_NAMES.update({int(c): c.name for c in ErrorCode})
# name() gives librdkafka's spelling, as confluent-kafka's KafkaError.name() does.
_NAMES.update({code: name for name, code in _RDKAFKA_ALIASES.items()})

# Broker errors a client retries by itself (Kafka's RetriableException subclasses, as the
# client core classes them), with librdkafka's retriable REBALANCE_IN_PROGRESS and local codes.
RETRIABLE_CODES: frozenset[int] = core.RETRIABLE | {
    ErrorCode.REBALANCE_IN_PROGRESS,
    LOCAL_CODES["_TRANSPORT"], LOCAL_CODES["_TIMED_OUT"], LOCAL_CODES["_ALL_BROKERS_DOWN"],
}


class _Codes(type):
    """Lets ``KafkaError.UNKNOWN_TOPIC_OR_PART`` and friends resolve as class attributes."""

    def __getattr__(cls, name: str) -> int:
        if name in LOCAL_CODES:
            return LOCAL_CODES[name]
        if name in _RDKAFKA_ALIASES:
            return _RDKAFKA_ALIASES[name]
        try:
            return int(ErrorCode[name])
        except KeyError:
            raise AttributeError(name) from None


class KafkaError(metaclass=_Codes):
    """An error value: ``code()``, ``name()``, ``str()``, ``retriable()``, ``fatal()``."""

    __slots__ = ("_code", "_reason", "_fatal", "_retriable")

    def __init__(self, error: int, reason: str | None = None, fatal: bool = False,
                 retriable: bool | None = None, txn_requires_abort: bool = False) -> None:
        self._code = int(error)
        self._reason = reason
        self._fatal = fatal
        self._retriable = self._code in RETRIABLE_CODES if retriable is None else retriable

    def code(self) -> int:
        return self._code

    def name(self) -> str:
        return _NAMES.get(self._code, f"ERR_{self._code}")

    def str(self) -> str:
        """The reason given, else a description in librdkafka's form: "Broker: ..." for a
        broker's code, "Local: ..." for the client's own (words derived from the name)."""
        if self._reason:
            return self._reason
        if self._code == 0:
            return "Success"
        name = ErrorCode(self._code).name if self._code in ErrorCode._value2member_map_ else self.name()
        words = name.strip("_").replace("_", " ").capitalize()
        return f"{'Local' if self._code < -1 else 'Broker'}: {words}"

    def retriable(self) -> bool:
        return self._retriable

    def fatal(self) -> bool:
        return self._fatal

    def txn_requires_abort(self) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        if isinstance(other, KafkaError):
            return self._code == other._code
        if isinstance(other, int):
            return self._code == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._code)

    def __bool__(self) -> bool:
        return self._code != 0

    def __repr__(self) -> str:
        return f"KafkaError{{code={self.name()},val={self._code},str=\"{self.str()}\"}}"

    __str__ = __repr__

    @classmethod
    def from_exception(cls, exc: BaseException) -> KafkaError:
        """Map whatever went wrong underneath onto an error value."""
        if isinstance(exc, KafkaException):
            return exc.args[0]
        if isinstance(exc, ProtocolError):
            return cls(int(exc.code), exc.message or exc.code.name)
        if isinstance(exc, (TimeoutError,)):
            return cls(LOCAL_CODES["_TIMED_OUT"], str(exc) or "timed out")
        if isinstance(exc, (ConnectionError, OSError, EOFError)):
            return cls(LOCAL_CODES["_TRANSPORT"], str(exc) or type(exc).__name__)
        return cls(LOCAL_CODES["_FAIL"], f"{type(exc).__name__}: {exc}")


class KafkaException(Exception):
    """Raised by the client; ``args[0]`` is the ``KafkaError``."""

    def __init__(self, error: KafkaError | int | None = None, reason: str | None = None) -> None:
        if not isinstance(error, KafkaError):
            error = KafkaError(LOCAL_CODES["_FAIL"] if error is None else int(error), reason)
        super().__init__(error)

    @property
    def error(self) -> KafkaError:
        return self.args[0]

    def __str__(self) -> str:
        return str(self.args[0])


class ConfigException(KafkaException, ValueError):
    """An unknown configuration property or an invalid value, raised at construction."""

    def __init__(self, reason: str) -> None:
        super().__init__(KafkaError(LOCAL_CODES["_INVALID_ARG"], reason))


def local(name: str, reason: str | None = None, **kw: bool) -> KafkaError:
    """A local (librdkafka-style) error by name, e.g. ``local("_MSG_TIMED_OUT")``."""
    return KafkaError(LOCAL_CODES[name], reason, **kw)


def broker_error(code: int, message: str | None = None) -> KafkaError:
    return KafkaError(code, message or _NAMES.get(int(code)))


def call_error_cb(error_cb: Callable[[KafkaError], object], err: KafkaError) -> None:
    """Hand ``err`` to the application's error_cb; what the callback raises is logged, never
    propagated into the client."""
    try:
        error_cb(err)
    except Exception:
        logging.getLogger("rivulet.client").exception("error_cb raised")
