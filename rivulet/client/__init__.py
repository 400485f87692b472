"""Rivulet's Kafka client. Public names live in ``rivulet``, ``rivulet.aio`` and ``rivulet.admin``.

The parts follow the Java client's and aiokafka's division:

* the shared core: ``core`` (sans I/O: every request built and read once, the retry and backoff
  decisions), ``connection`` (one broker connection: pipelined requests, version negotiation),
  ``client`` (the asyncio transport: connections per broker, cluster view, refreshes),
  ``blocking`` (the blocking transport, for Spark's workers), ``config``, ``errors``, ``types``,
  ``stats``, ``wakeup`` and ``loop`` (an event loop on a thread of its own);
* ``producer/``: partitioners, RecordAccumulator, the sender and KafkaProducer (idempotence),
  the TransactionManager;
* ``consumer/``: SubscriptionState, Fetcher, partition assignors, ConsumerCoordinator (classic
  groups), ConsumerMembership (KIP-848 groups) and KafkaConsumer;
* ``share/``: ShareSessionHandler and Acknowledgements, ShareConsumeRequestManager,
  ShareMembershipManager and ShareConsumerImpl (KIP-932);
* ``admin/``: the admin clients;
* ``sync`` and ``serialization``: the blocking, confluent-kafka-shaped facade over the asyncio
  parts, and its serializers.

The public names below load on first use, so that the broker, which imports only
``client.connection``, does not load the rest.
"""

from __future__ import annotations

import importlib
from typing import Any

_PUBLIC = {
    "Producer": "rivulet.client.sync",
    "Consumer": "rivulet.client.sync",
    "ShareConsumer": "rivulet.client.sync",
    "SerializingProducer": "rivulet.client.serialization",
    "DeserializingConsumer": "rivulet.client.serialization",
    "AIOProducer": "rivulet.client.producer.producer",
    "AIOConsumer": "rivulet.client.consumer.consumer",
    "NoOffsetForPartitionError": "rivulet.client.consumer.consumer",
    "AIOShareConsumer": "rivulet.client.share.consumer",
    "AcknowledgeType": "rivulet.common.types",
    "AsyncAdminClient": "rivulet.client.admin.client",
    "AdminClient": "rivulet.client.admin.client",
    "ConsumerGroupMetadata": "rivulet.client.types",
    "TopicPartition": "rivulet.client.types",
    "Message": "rivulet.client.types",
    "ShareMessage": "rivulet.client.types",
    "KafkaError": "rivulet.client.errors",
    "KafkaException": "rivulet.client.errors",
    "ConfigException": "rivulet.client.errors",
}

__all__ = list(_PUBLIC)


def __getattr__(name: str) -> Any:  # the client's names, imported on first use; each has its own type
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'rivulet.client' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
