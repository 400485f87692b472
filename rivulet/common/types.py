"""The topic-partition key used everywhere inside Rivulet (broker, coordinators, client), and
the acknowledge types of share groups (the client's and the broker's)."""

from __future__ import annotations

import base64
import uuid
from enum import IntEnum
from typing import NamedTuple


class TopicPartition(NamedTuple):
    """A (topic, partition) key. A tuple, so ``("t", 0)`` is equal to and hashes as
    ``TopicPartition("t", 0)``. The client's public, confluent-kafka-shaped
    ``rivulet.TopicPartition`` (with offset and error) is a different, user-facing type."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class AcknowledgeType(IntEnum):
    """How a share group's delivery of a record ends (Kafka's AcknowledgeType): ACCEPT
    (processed), RELEASE (deliver again), REJECT (unprocessable: archived), RENEW (still working
    on it: the acquisition lock restarts)."""

    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


ACKNOWLEDGE_GAP = 0
"""The acknowledge type id, in ShareFetch and ShareAcknowledge, of an acquired offset that holds
no record (a control record, a gap compaction left): archived, as it can never be delivered."""


def base64_topic_id(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, unpadded."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def share_coordinator_key(group_id: str, topic_id: uuid.UUID, partition: int) -> str:
    """A share partition's key for FindCoordinator (key type SHARE), from which its
    ``__share_group_state`` partition is hashed: ``group:topicId:partition``."""
    return f"{group_id}:{base64_topic_id(topic_id)}:{partition}"

# The first transaction.version (KIP-890 part 2) whose clients get a new epoch at every EndTxn,
# whose transactions' markers carry it (KIP-1228), and whose partitions join implicitly.
TV_EPOCH_BUMP = 2
