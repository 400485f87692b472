"""Durable partition logs in Kafka's on-disk layout."""

from rivulet.storage.checkpoints import read_or_create_meta
from rivulet.storage.config import (
    TOPIC_CONFIG_SYNONYMS,
    TOPIC_LIST_CONFIGS,
    TOPIC_CONFIGS,
    ConfigEntry,
    ConfigSource,
    ConfigType,
    LogConfig,
    describe_topic_configs,
)
from rivulet.storage.log import FetchDataInfo, Log, LogAppendInfo, UnexpectedAppendOffsetError
from rivulet.storage.manager import LogManager

__all__ = [
    "TOPIC_CONFIGS",
    "TOPIC_CONFIG_SYNONYMS",
    "TOPIC_LIST_CONFIGS",
    "ConfigEntry",
    "ConfigSource",
    "ConfigType",
    "FetchDataInfo",
    "Log",
    "LogAppendInfo",
    "LogConfig",
    "LogManager",
    "UnexpectedAppendOffsetError",
    "describe_topic_configs",
    "read_or_create_meta",
]
