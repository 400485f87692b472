"""Java's HashSet iteration order, as Kafka prints a set of config names in its errors."""

from __future__ import annotations

import pytest

from rivulet.common.java_hash import java_hash_set_order

pytestmark = pytest.mark.fast


def test_hash_set_order_matches_javas():
    # Expected lists printed by OpenJDK 17's `new HashSet<>(names)` and `HashSet.add` in a loop.
    names = ["log.retention.ms", "num.io.threads", "message.max.bytes", "log.cleaner.threads", "background.threads"]
    assert java_hash_set_order(names) == ["log.retention.ms", "message.max.bytes", "num.io.threads",
                                          "log.cleaner.threads", "background.threads"]
    # 20 names: the table doubled to 32 buckets; names sharing a bucket keep their insertion order.
    assert java_hash_set_order([f"k{19 - i}" for i in range(20)]) == [
        "k0", "k1", "k2", "k3", "k4", "k11", "k5", "k10", "k6", "k13", "k7", "k12", "k8", "k15", "k9",
        "k14", "k17", "k16", "k19", "k18"]


def test_hash_set_order_drops_repeats():
    assert java_hash_set_order(["a", "b", "a"]) == ["a", "b"]
