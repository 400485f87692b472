"""BROKER_LOGGER config resources (KIP-412): the broker's loggers and their levels, described
and altered at run time as Kafka 4.3.1 does it for its log4j loggers, here on Python's
``logging``. Log4j's level names stand for Python's (WARN for WARNING, FATAL for CRITICAL, TRACE
below DEBUG)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from rivulet.common.config import AlterConfigOp, AlterConfigOpType, ConfigEntry, ConfigSource, ConfigType
from rivulet.protocol.errors import ApiError, ErrorCode

ROOT = "root"
TRACE = 5
_LEVELS = {"TRACE": TRACE, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING,
           "ERROR": logging.ERROR, "FATAL": logging.CRITICAL}
_VALID = ", ".join(sorted(_LEVELS))


def _level_name(level: int) -> str:
    for name, value in sorted(_LEVELS.items(), key=lambda kv: -kv[1]):
        if level >= value:
            return name
    return "TRACE"


def _logger(name: str) -> logging.Logger | None:
    if name == ROOT:
        return logging.getLogger()
    found = logging.Logger.manager.loggerDict.get(name)
    return found if isinstance(found, logging.Logger) else None


def check_resource(name: str, node_id: int) -> None:
    """A logger resource is named by this broker's id, as in Kafka."""
    if not name:
        raise ApiError(ErrorCode.INVALID_REQUEST, "Broker id must not be empty")
    if name != str(node_id):
        raise ApiError(ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {node_id} but received {name}")


def describe() -> list[ConfigEntry]:
    """Every logger the broker has, with its level in force."""
    names = [ROOT, *sorted(n for n, lg in logging.Logger.manager.loggerDict.items() if isinstance(lg, logging.Logger))]
    out = []
    for name in names:
        lg = _logger(name)
        assert lg is not None
        out.append(ConfigEntry(name=name, value=_level_name(lg.getEffectiveLevel()), is_default=False,
                               source=ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG, config_type=ConfigType.STRING))
    return out


def alter(ops: Sequence[AlterConfigOp], validate_only: bool) -> None:
    """Check every operation (Kafka's checks and messages), then, unless ``validate_only``,
    apply them: SET a level, DELETE to inherit the parent's."""
    for op in ops:
        if op.config_operation in (AlterConfigOpType.APPEND, AlterConfigOpType.SUBTRACT):
            raise ApiError(ErrorCode.INVALID_REQUEST, f"{AlterConfigOpType(op.config_operation).name} operation "
                           "is not allowed for the BROKER_LOGGER resource")
        if _logger(op.name) is None:
            raise ApiError(ErrorCode.INVALID_CONFIG, f"Logger {op.name} does not exist!")
        if op.config_operation == AlterConfigOpType.SET and op.value not in _LEVELS:
            raise ApiError(ErrorCode.INVALID_CONFIG, f"Cannot set the log level of {op.name} to {op.value} as it "
                           f"is not a supported log level. Valid log levels are {_VALID}")
        if op.config_operation == AlterConfigOpType.DELETE and op.name == ROOT:
            raise ApiError(ErrorCode.INVALID_REQUEST, f"Removing the log level of the {ROOT} logger is not allowed")
    if validate_only:
        return
    for op in ops:
        lg = _logger(op.name)
        assert lg is not None
        lg.setLevel(_LEVELS[op.value] if op.config_operation == AlterConfigOpType.SET and op.value else logging.NOTSET)
