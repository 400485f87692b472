"""Java's String.hashCode and what Kafka's behaviour shows of it: ``Utils.abs`` of it picks a
coordinator's partition (``common/placement.py``), and it orders a java.util.HashSet of names
as Kafka prints one (the dynamic broker-config errors, ``server/dynamic_config.py``)."""

from __future__ import annotations

from typing import Iterable


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


def java_hash_set_order(names: Iterable[str]) -> list[str]:
    """``names`` in the order a java.util.HashSet filled with them iterates (and prints): by
    bucket, ``(h ^ h >>> 16) & (capacity - 1)``, the capacity 16 doubled while the set is over
    three quarters full; names sharing a bucket keep the order given."""
    distinct = list(dict.fromkeys(names))
    capacity = 16
    while len(distinct) > capacity * 3 // 4:
        capacity *= 2

    def bucket(name: str) -> int:
        h = java_string_hashcode(name) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)
    return sorted(distinct, key=bucket)
