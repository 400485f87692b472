"""Records of ``__transaction_state``: version-prefixed TransactionLogKey/Value, as Kafka writes them.

The key is the transactional id (key version 0); the value is the transaction's metadata, or
null for a tombstone when an expired transactional id is removed. Values are written at
version 0 while transaction.version is 0, at version 1 (flexible, Kafka's from
transaction.version 1) with the previous and next producer ids and the client's transaction
version as tagged fields; both are read.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from rivulet.common.placement import partition_for as coordinator_partition
from rivulet.common.types import TopicPartition
from rivulet.protocol.messages.transaction_log_key import TransactionLogKey
from rivulet.protocol.messages.transaction_log_value import PartitionsSchema, TransactionLogValue
from rivulet.transaction.metadata import NO_PRODUCER_EPOCH, TransactionMetadata, TxnState, \
    TxnTransitMetadata

TRANSACTION_STATE_TOPIC_NAME = "__transaction_state"
KEY_VERSION = 0
VALUE_VERSION = 0
_VERSION = struct.Struct(">h")


def partition_for(key: str, num_partitions: int) -> int:
    """The internal-topic partition owning a transactional id (or group id)."""
    return coordinator_partition(key, num_partitions)


def key_to_bytes(transactional_id: str) -> bytes:
    return _VERSION.pack(KEY_VERSION) + TransactionLogKey(transactional_id=transactional_id).encode(KEY_VERSION)


def value_version_for(transaction_version: int) -> int:
    """The value version Kafka writes at a finalized transaction.version."""
    return 1 if transaction_version >= 1 else 0


def value_to_bytes(t: TxnTransitMetadata, value_version: int = VALUE_VERSION) -> bytes:
    if t.txn_state == TxnState.EMPTY and t.topic_partitions:
        raise ValueError(f"Transaction is not expected to have any partitions since its state is {t.txn_state}: {t}")
    partitions = None
    if t.txn_state != TxnState.EMPTY:
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(t.topic_partitions, key=lambda x: (x.topic, x.partition)):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        partitions = [PartitionsSchema(topic=topic, partition_ids=ids) for topic, ids in by_topic.items()]
    value = TransactionLogValue(
        producer_id=t.producer_id, producer_epoch=t.producer_epoch, transaction_timeout_ms=t.txn_timeout_ms,
        transaction_status=t.txn_state.id, transaction_partitions=partitions,
        transaction_last_update_timestamp_ms=t.txn_last_update_timestamp,
        transaction_start_timestamp_ms=t.txn_start_timestamp,
        previous_producer_id=t.last_producer_id, next_producer_id=t.next_producer_id,
        client_transaction_version=t.client_transaction_version)
    # Version 0 has no place for the tagged fields: they are left out there.
    return _VERSION.pack(value_version) + value.encode(value_version)


@dataclass(frozen=True, slots=True)
class UnknownKey:
    version: int


def read_key(data: bytes) -> str | UnknownKey:
    (version,) = _VERSION.unpack_from(data, 0)
    if version > TransactionLogKey.VALID_VERSIONS[1] or version < 0:
        return UnknownKey(version)
    return TransactionLogKey.decode(data, version, 2).transactional_id


def read_value(transactional_id: str, data: bytes | None) -> TransactionMetadata | None:
    """The metadata a value describes; None for a tombstone."""
    if data is None:
        return None
    _, v = TransactionLogValue.decode_versioned(data, "Unknown version {} from the transaction log message value")
    state = TxnState.from_id(v.transaction_status)
    partitions = set()
    for p in v.transaction_partitions or ():
        for i in p.partition_ids:
            partitions.add(TopicPartition(p.topic, i))
    return TransactionMetadata(
        transactional_id=transactional_id, producer_id=v.producer_id, last_producer_id=v.previous_producer_id,
        producer_epoch=v.producer_epoch, last_producer_epoch=NO_PRODUCER_EPOCH,
        txn_timeout_ms=v.transaction_timeout_ms, state=state, topic_partitions=partitions,
        txn_start_timestamp=v.transaction_start_timestamp_ms,
        txn_last_update_timestamp=v.transaction_last_update_timestamp_ms,
        next_producer_id=v.next_producer_id, client_transaction_version=v.client_transaction_version)
