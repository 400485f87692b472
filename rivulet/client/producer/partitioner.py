"""Partitioners: every ``partitioner`` value librdkafka accepts.

The default is librdkafka's (and so confluent-kafka's) ``consistent_random``: a keyed record
goes to ``crc32(key) % n``, so a confluent-kafka script keeps its keys where they were when
it switches to Rivulet. ``murmur2_random`` is Java's BuiltInPartitioner
(``toPositive(murmur2(key)) % n``); ``fnv1a_random`` is Sarama's. A null key (and, for
``consistent_random``, an empty one) is left to the sticky partitioner under every
partitioner but ``random``, as librdkafka does: such records stick to one partition until its
batch fills or is sent (KIP-480), which keeps batches large when busy and still spreads a
slow producer's records.

murmur2 runs in C when the optional accelerator ``rivulet.protocol._speedups`` is built
(and RIVULET_NO_SPEEDUPS is not set); ``_py_murmur2`` is the pure-Python reference.
"""

from __future__ import annotations

import os
import random
import struct
import zlib
from functools import lru_cache
from typing import TYPE_CHECKING, Callable, Sequence

if TYPE_CHECKING:
    from rivulet.client.core import TopicMeta
    from rivulet.client.producer.accumulator import ProducerBatch

# The C murmur2 of rivulet.protocol._speedups (exact bytes only), unless RIVULET_NO_SPEEDUPS=1.
_c_murmur2: Callable[[bytes], int] | None = None
if os.environ.get("RIVULET_NO_SPEEDUPS", "") in ("", "0"):
    try:
        from rivulet.protocol._speedups import murmur2 as _c_murmur2
    except ImportError:  # not built, or built before it had murmur2
        pass

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def _py_murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 of ``data`` as a signed int, bit-for-bit what Java's Utils.murmur2 returns.

    The pure-Python version: what ``murmur2`` runs without the C accelerator, or for an
    argument that is not exactly ``bytes``, and the reference the C version is tested against.
    """
    length = len(data)
    h = (_SEED ^ length) & _MASK
    n4 = length >> 2
    if n4:
        for (k,) in struct.iter_unpack("<I", data[: n4 * 4]):
            k = (k * _M) & _MASK
            k ^= k >> 24
            k = (k * _M) & _MASK
            h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail:
        base = n4 * 4
        if tail == 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h ^= data[base]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


if _c_murmur2 is None:
    murmur2 = _py_murmur2
else:
    def murmur2(data: bytes) -> int:
        """Kafka's 32-bit murmur2 of ``data`` as a signed int, bit-for-bit what Java's Utils.murmur2 returns."""
        return _c_murmur2(data) if type(data) is bytes else _py_murmur2(data)  # type: ignore[misc]


def to_positive(n: int) -> int:
    """Java's Utils.toPositive: clear the sign bit (not abs(), which differs for MIN_VALUE)."""
    return n & 0x7FFFFFFF


@lru_cache(maxsize=65536)
def _py_murmur2_positive(key: bytes) -> int:
    # Keys repeat a lot in practice (user ids, device ids); the pure-Python hash is the
    # expensive part of partitioning, so remember recent ones.
    return _py_murmur2(key) & 0x7FFFFFFF


if _c_murmur2 is None:
    _murmur2_positive = _py_murmur2_positive
else:
    def _murmur2_positive(key: bytes) -> int:
        # The C hash of a short key costs less than an lru_cache lookup.
        if type(key) is bytes:
            return _c_murmur2(key) & 0x7FFFFFFF  # type: ignore[misc]
        return _py_murmur2_positive(key)


@lru_cache(maxsize=65536)
def _crc32(key: bytes) -> int:
    return zlib.crc32(key)


def murmur2_partition(key: bytes, num_partitions: int) -> int:
    return _murmur2_positive(key) % num_partitions


def _check_partition_args(key: bytes, partition_count: int) -> None:
    if not isinstance(key, (bytes, bytearray, memoryview)):
        raise TypeError(f"a bytes-like object is required, not '{type(key).__name__}'")
    if not isinstance(partition_count, int) or isinstance(partition_count, bool):
        raise TypeError("partition_count must be an int")
    if partition_count <= 0:
        raise ValueError(f"partition_count must be > 0, got {partition_count}")


# confluent-kafka's module-level functions: the partition librdkafka's partitioner gives a key.
def murmur2_of(key: bytes, partition_count: int) -> int:
    """confluent_kafka.murmur2: the partition of ``key`` under murmur2 (Java's)."""
    _check_partition_args(key, partition_count)
    return _murmur2_positive(bytes(key)) % partition_count


def consistent_of(key: bytes, partition_count: int) -> int:
    """confluent_kafka.consistent: the partition of ``key`` under CRC32 (librdkafka's default)."""
    _check_partition_args(key, partition_count)
    return zlib.crc32(key) % partition_count


def fnv1a_of(key: bytes, partition_count: int) -> int:
    """confluent_kafka.fnv1a: the partition of ``key`` under FNV-1a (Sarama's)."""
    _check_partition_args(key, partition_count)
    return fnv1a(bytes(key)) % partition_count


# A partitioner gets (key bytes or None, number of partitions, partitions with a leader) and
# returns a partition, or -1 for "no key: let the sticky partitioner choose".
Partitioner = Callable[[bytes | None, int, Sequence[int]], int]


_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193


def fnv1a(data: bytes) -> int:
    """librdkafka's fnv1a hash of ``data``: 32-bit FNV-1a read as a signed int, then its absolute value.

    The absolute value is Sarama's NewHashPartitioner, which librdkafka copies; -2**31 stays 2**31.
    """
    h = _FNV_OFFSET
    for b in data:
        h = ((h ^ b) * _FNV_PRIME) & _MASK
    return (-h) & _MASK if h & 0x80000000 else h


@lru_cache(maxsize=65536)
def _fnv1a_cached(key: bytes) -> int:
    return fnv1a(key)


# Every partitioner returns -1 for a null key: librdkafka hands null keys to its sticky
# partitioner whatever the partitioner is, except ``random``.
def _murmur2_random(key: bytes | None, n: int, available: Sequence[int]) -> int:
    if key is None:
        return -1
    if type(key) is bytes and _c_murmur2 is not None:  # the producer's keys: one C call
        return (_c_murmur2(key) & 0x7FFFFFFF) % n
    return _murmur2_positive(key) % n


def _consistent_random(key: bytes | None, n: int, available: Sequence[int]) -> int:
    # librdkafka treats an empty key as none here (and only here).
    return -1 if not key else _crc32(key) % n


def _consistent(key: bytes | None, n: int, available: Sequence[int]) -> int:
    return -1 if key is None else _crc32(key) % n


def _fnv1a(key: bytes | None, n: int, available: Sequence[int]) -> int:
    return -1 if key is None else _fnv1a_cached(key) % n


def partitioner_for(name: str, rng: random.Random) -> Partitioner:
    """The producer's partitioner: ``random`` draws from the producer's own generator, so
    that no other thread's draws change where its records go."""
    if name == "random":
        return lambda key, n, available: rng.choice(available) if available else rng.randrange(n)
    return PARTITIONERS[name]


# The random and non-random variants differ only for null keys, which librdkafka's sticky
# partitioner takes in both cases. ``random`` itself needs a generator: partitioner_for.
PARTITIONERS: dict[str, Partitioner] = {
    "consistent_random": _consistent_random,
    "consistent": _consistent,
    "murmur2_random": _murmur2_random,
    "murmur2": _murmur2_random,
    "fnv1a_random": _fnv1a,
    "fnv1a": _fnv1a,
}


class StickyPartitions:
    """The partition each topic's keyless records currently go to.

    A topic moves to another partition when the batch it was filling is closed, so that
    keyless records build full batches on one partition at a time.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._current: dict[str, int] = {}
        # The producer's shortcut for the next keyless record of a topic: (topic metadata,
        # open batch of the current partition). Dropped whenever the partition changes.
        self.open: dict[str, tuple[TopicMeta, ProducerBatch]] = {}

    def partition(self, topic: str, num_partitions: int, available: Sequence[int]) -> int:
        """Called by the producer for a record without a key."""
        p = self._current.get(topic)
        if p is None or p >= num_partitions:
            p = self._choose(num_partitions, available, None)
            self._current[topic] = p
            self.open.pop(topic, None)
        return p

    def batch_closed(self, topic: str, partition: int, num_partitions: int, available: Sequence[int]) -> None:
        """Called by the producer's sender when a batch of the sticky partition closes."""
        if self._current.get(topic) == partition:
            self._current[topic] = self._choose(num_partitions, available, partition)
            self.open.pop(topic, None)

    def _choose(self, n: int, available: Sequence[int], previous: int | None) -> int:
        pool = [p for p in available if p != previous] or list(available) or list(range(n))
        return self._rng.choice(pool)
