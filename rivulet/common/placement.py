"""Which partition of a coordinator's internal topic owns a key, as Kafka places it:
``Utils.abs(key.hashCode()) % partitions`` (groups, transactional ids, share partitions)."""

from __future__ import annotations

from rivulet.common.java_hash import java_abs, java_string_hashcode


def partition_for(key: str, num_partitions: int) -> int:
    """The internal-topic partition (and so the coordinator) owning ``key``."""
    return java_abs(java_string_hashcode(key)) % num_partitions
