"""The topic-partition key used everywhere inside Rivulet (broker, coordinators, client)."""

from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    """A (topic, partition) key. A tuple, so ``("t", 0)`` is equal to and hashes as
    ``TopicPartition("t", 0)``. The client's public, confluent-kafka-shaped
    ``rivulet.TopicPartition`` (with offset and error) is a different, user-facing type."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"
