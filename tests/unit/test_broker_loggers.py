"""BROKER_LOGGER resources: Python's loggers described and altered with Kafka 4.3.1's checks
and messages (its answers to the same requests are in tests/java/admin_probe_kafka.txt)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest

from rivulet.common.config import AlterConfigOpType as OpType
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.server import broker_loggers as bl


@dataclass
class Op:
    name: str
    config_operation: int
    value: str | None = None


@pytest.fixture
def logger():
    lg = logging.getLogger("rivulet.test.broker_loggers")
    root_level = logging.getLogger().level
    yield lg
    lg.setLevel(logging.NOTSET)
    logging.getLogger().setLevel(root_level)


def levels() -> dict[str, str | None]:
    return {e.name: e.value for e in bl.describe()}


def test_describe_lists_root_and_each_logger_with_its_level_in_force(logger):
    logging.getLogger().setLevel(logging.WARNING)
    described = levels()
    assert described["root"] == "WARN" and described[logger.name] == "WARN"
    assert next(iter(described)) == "root"


def test_set_and_delete_levels(logger):
    logging.getLogger().setLevel(logging.INFO)
    bl.alter([Op(logger.name, OpType.SET, "TRACE")], validate_only=False)
    assert levels()[logger.name] == "TRACE" and logger.isEnabledFor(bl.TRACE)
    bl.alter([Op(logger.name, OpType.SET, "FATAL")], validate_only=True)
    assert levels()[logger.name] == "TRACE"
    bl.alter([Op(logger.name, OpType.DELETE)], validate_only=False)
    assert levels()[logger.name] == "INFO"  # the root's again


@pytest.mark.parametrize("op, code, message", [
    (Op("root", OpType.SET, "LOUD"), ErrorCode.INVALID_CONFIG, "Cannot set the log level of root to LOUD as it is not "
     "a supported log level. Valid log levels are DEBUG, ERROR, FATAL, INFO, TRACE, WARN"),
    (Op("root", OpType.DELETE), ErrorCode.INVALID_REQUEST, "Removing the log level of the root logger is not allowed"),
    (Op("root", OpType.APPEND, "INFO"), ErrorCode.INVALID_REQUEST,
     "APPEND operation is not allowed for the BROKER_LOGGER resource"),
    (Op("no.such.logger", OpType.SET, "INFO"), ErrorCode.INVALID_CONFIG, "Logger no.such.logger does not exist!"),
])
def test_refusals_change_nothing(logger, op, code, message):
    before = levels()
    with pytest.raises(ApiError) as e:
        bl.alter([Op(logger.name, OpType.SET, "DEBUG"), op], validate_only=False)
    assert (e.value.code, e.value.message) == (code, message)
    assert levels() == before


def test_the_resource_is_this_brokers_id():
    bl.check_resource("1", 1)
    for name, message in (("", "Broker id must not be empty"), ("2", "Unexpected broker id, expected 1 but received 2")):
        with pytest.raises(ApiError) as e:
            bl.check_resource(name, 1)
        assert (e.value.code, e.value.message) == (ErrorCode.INVALID_REQUEST, message)
