"""The topic-partition key used everywhere inside Rivulet (broker, coordinators, client)."""

from __future__ import annotations

import base64
import uuid
from typing import NamedTuple


class TopicPartition(NamedTuple):
    """A (topic, partition) key. A tuple, so ``("t", 0)`` is equal to and hashes as
    ``TopicPartition("t", 0)``. The client's public, confluent-kafka-shaped
    ``rivulet.TopicPartition`` (with offset and error) is a different, user-facing type."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


def base64_topic_id(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, unpadded."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def share_coordinator_key(group_id: str, topic_id: uuid.UUID, partition: int) -> str:
    """A share partition's key for FindCoordinator (key type SHARE), from which its
    ``__share_group_state`` partition is hashed: ``group:topicId:partition``."""
    return f"{group_id}:{base64_topic_id(topic_id)}:{partition}"
