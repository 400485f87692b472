"""Each partitioner must put a key where librdkafka (and, for murmur2_random, Java's client) does.

The vectors were computed with the Java client itself (kafka-clients 4.3.1:
``Utils.murmur2(key.getBytes(UTF_8))`` and ``Utils.toPositive(h) % n``).
"""

from __future__ import annotations

import zlib

import pytest

from rivulet.client.producer.partitioner import PARTITIONERS, StickyPartitions, fnv1a, murmur2, murmur2_partition, to_positive

pytestmark = pytest.mark.fast

# key, Utils.murmur2, partition of 3, of 7, of 100
JAVA_VECTORS = [
    ("", 275646681, 0, 2, 81),
    ("a", -1563381124, 1, 5, 24),
    ("ab", 316155434, 2, 0, 34),
    ("abc", 479470107, 0, 4, 7),
    ("abcd", -1323649548, 2, 5, 0),
    ("21", -973932308, 0, 3, 40),
    ("foobar", -790332482, 0, 0, 66),
    ("key-0", 29210041, 1, 0, 41),
    ("key-1", 193331640, 0, 5, 40),
    ("key-17", 956945460, 0, 2, 60),
    ("hello world", 1221641059, 1, 2, 59),
    ("a-little-bit-long-string", -985981536, 2, 1, 12),
    ("a-little-bit-longer-string", -1486304829, 2, 0, 19),
    ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971, 2, 3, 77),
    ("\u00e9t\u00e9-\u4e2d\u6587", 425354145, 0, 6, 45),
]


@pytest.mark.parametrize("key,h,p3,p7,p100", JAVA_VECTORS)
def test_murmur2_matches_java(key, h, p3, p7, p100):
    b = key.encode()
    assert murmur2(b) == h
    assert murmur2_partition(b, 3) == p3
    assert murmur2_partition(b, 7) == p7
    assert murmur2_partition(b, 100) == p100
    assert PARTITIONERS["murmur2_random"](b, 7, list(range(7))) == p7


def test_murmur2_binary_key():
    assert murmur2(bytes(range(256))) == -1948347274


def test_to_positive_is_not_abs():
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0  # abs() would overflow in Java; the mask does not
    assert to_positive(5) == 5


def test_null_key_is_left_to_the_sticky_partitioner():
    assert PARTITIONERS["murmur2_random"](None, 5, [0, 1, 2, 3, 4]) == -1
    assert PARTITIONERS["consistent_random"](None, 5, [0, 1, 2, 3, 4]) == -1
    assert PARTITIONERS["consistent_random"](b"", 5, [0, 1, 2, 3, 4]) == -1  # as librdkafka
    assert PARTITIONERS["murmur2_random"](b"", 5, [0, 1, 2, 3, 4]) == murmur2_partition(b"", 5)
    # librdkafka gives null keys to its sticky partitioner under every partitioner but random.
    for name in ("murmur2", "consistent", "fnv1a", "fnv1a_random"):
        assert PARTITIONERS[name](None, 5, [0, 1, 2, 3, 4]) == -1
    assert PARTITIONERS["murmur2"](b"", 5, [0, 1, 2, 3, 4]) == murmur2_partition(b"", 5)
    assert PARTITIONERS["fnv1a_random"](b"", 5, [0, 1, 2, 3, 4]) == 0x7EE3623B % 5
    assert PARTITIONERS["consistent"](b"", 5, [0, 1, 2, 3, 4]) == 0


# librdkafka's unit-test vectors for rd_fnv1a (FNV-1a 32, absolute value as Sarama takes it).
_UNALIGNED = b"PreAmbleWillBeRemoved,ThePrePartThatIs"
FNV1A_VECTORS = [
    (b"kafka", 0x0D33C4E1), (b"giberish123456789", 0x77A58295),
    (b"1234", 0x023BDD03), (b"234", 0x2DEA3CD2), (b"34", 0x740FA83E), (b"4", 0x310CA263),
    (_UNALIGNED, 0x65CBD69C), (_UNALIGNED[1:], 0x6E49C79A), (_UNALIGNED[2:], 0x69EED356),
    (_UNALIGNED[3:], 0x6ABCC023), (b"", 0x7EE3623B),
]


@pytest.mark.parametrize("key,h", FNV1A_VECTORS)
def test_fnv1a_known_vectors(key, h):
    assert fnv1a(key) == h
    assert PARTITIONERS["fnv1a"](key, 7, list(range(7))) == h % 7
    assert PARTITIONERS["fnv1a_random"](key, 100, list(range(100))) == h % 100


# CRC-32 (IEEE, as rd_crc32 computes it): 123456789 is the standard check value.
CRC32_VECTORS = [(b"123456789", 0xCBF43926), (b"kafka", 0x5BBC7517), (b"a", 0xE8B7BE43)]


@pytest.mark.parametrize("key,h", CRC32_VECTORS)
def test_consistent_random_is_crc32(key, h):
    for n in (3, 7):
        assert PARTITIONERS["consistent_random"](key, n, list(range(n))) == h % n
        assert PARTITIONERS["consistent"](key, n, list(range(n))) == h % n


def test_default_is_librdkafkas_consistent_random():
    from rivulet.client.config import resolve
    assert resolve({"bootstrap.servers": "h:9092"}, "producer")["partitioner"] == "consistent_random"


def test_consistent_is_crc32_like_librdkafka():
    for key in (b"a", b"key-3", b"\x00\xff"):
        assert PARTITIONERS["consistent"](key, 6, list(range(6))) == zlib.crc32(key) % 6


def test_sticky_partition_holds_until_its_batch_closes():
    s = StickyPartitions()
    avail = [0, 1, 2, 3]
    first = s.partition("t", 4, avail)
    assert all(s.partition("t", 4, avail) == first for _ in range(50))
    s.batch_closed("t", first, 4, avail)
    second = s.partition("t", 4, avail)
    assert second != first and second in avail
    s.batch_closed("t", first, 4, avail)  # closing a batch of another partition does not move it
    assert s.partition("t", 4, avail) == second


def test_sticky_uses_only_available_partitions():
    s = StickyPartitions()
    for _ in range(20):
        s.batch_closed("t", s.partition("t", 4, [2]), 4, [2])
        assert s.partition("t", 4, [2]) == 2


def test_module_functions_have_confluent_kafkas_shape():
    import rivulet
    keys = [b"kafka", b"", b"user-12345", bytes(range(40))]
    for n in (1, 7, 100):
        for k in keys:
            assert rivulet.murmur2(k, n) == murmur2_partition(k, n)
            assert rivulet.consistent(k, n) == zlib.crc32(k) % n
            assert rivulet.fnv1a(k, n) == fnv1a(k) % n
    with pytest.raises(ValueError):
        rivulet.murmur2(b"k", 0)
    with pytest.raises(TypeError):
        rivulet.fnv1a("k", 3)


def test_module_functions_agree_with_confluent_kafka():
    ck = pytest.importorskip("confluent_kafka")
    if not hasattr(ck, "fnv1a"):
        pytest.skip("this confluent-kafka has no partitioner functions")
    import rivulet
    for n in (3, 7, 64):
        for k in [f"user-{i}".encode() for i in range(50)] + [b"", b"\x00\xff\x80"]:
            assert (rivulet.murmur2(k, n), rivulet.consistent(k, n), rivulet.fnv1a(k, n)) == \
                (ck.murmur2(k, n), ck.consistent(k, n), ck.fnv1a(k, n)), k
