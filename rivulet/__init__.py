"""Rivulet: a Kafka-protocol event-streaming broker in Python, and its client.

The client's blocking API has confluent-kafka's shape, so switching is a change of import:

    from rivulet import Producer, Consumer, TopicPartition, KafkaError, KafkaException
    from rivulet.admin import AdminClient, NewTopic
    from rivulet import SerializingProducer, DeserializingConsumer
    from rivulet.serialization import StringSerializer, IntegerDeserializer
    from rivulet.aio import AIOProducer, AIOConsumer     # the asyncio core

Client names load on first use, so the broker does not import the client.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_CLIENT_NAMES = {
    "Producer": "rivulet.client.sync",
    "Consumer": "rivulet.client.sync",
    "ShareConsumer": "rivulet.client.sync",
    "AcknowledgeType": "rivulet.common.types",
    "TopicPartition": "rivulet.client.types",
    "Message": "rivulet.client.types",
    "OFFSET_BEGINNING": "rivulet.client.types",
    "OFFSET_END": "rivulet.client.types",
    "OFFSET_STORED": "rivulet.client.types",
    "OFFSET_INVALID": "rivulet.client.types",
    "TIMESTAMP_NOT_AVAILABLE": "rivulet.client.types",
    "TIMESTAMP_CREATE_TIME": "rivulet.client.types",
    "TIMESTAMP_LOG_APPEND_TIME": "rivulet.client.types",
    "KafkaError": "rivulet.client.errors",
    "KafkaException": "rivulet.client.errors",
    "ConfigException": "rivulet.client.errors",
    "NoOffsetForPartitionError": "rivulet.client.consumer.consumer",
    "murmur2": "rivulet.client.producer.partitioner:murmur2_of",
    "consistent": "rivulet.client.producer.partitioner:consistent_of",
    "fnv1a": "rivulet.client.producer.partitioner:fnv1a_of",
    "ConsumerGroupMetadata": "rivulet.client.types",
    "SerializingProducer": "rivulet.client.serialization",
    "DeserializingConsumer": "rivulet.client.serialization",
}

__all__ = ["__version__", "version", "libversion", *_CLIENT_NAMES]


def version() -> tuple[str, int]:
    """(version string, version int), like confluent_kafka.version()."""
    major, minor, patch = (int(x) for x in __version__.split("."))
    return __version__, (major << 24) | (minor << 16) | (patch << 8)


libversion = version


def __getattr__(name: str) -> Any:  # the client's names, imported on first use; each has its own type
    module = _CLIENT_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'rivulet' has no attribute {name!r}")
    import importlib
    module, _, attr = module.partition(":")  # "module:attribute" when the names differ
    value = getattr(importlib.import_module(module), attr or name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_CLIENT_NAMES))
