"""Which partition of a coordinator's internal topic owns a key, as Kafka places them:
``Utils.abs(key.hashCode()) % partitions`` (groups, transactional ids, share partitions)."""

from __future__ import annotations


def java_string_hashcode(s: str) -> int:
    """Java's String.hashCode: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units, int32."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def java_abs(n: int) -> int:
    """Kafka's Utils.abs: Integer.MIN_VALUE maps to 0 rather than staying negative."""
    return 0 if n == -0x80000000 else abs(n)


def partition_for(key: str, num_partitions: int) -> int:
    """The internal-topic partition (and so the coordinator) owning ``key``."""
    return java_abs(java_string_hashcode(key)) % num_partitions
