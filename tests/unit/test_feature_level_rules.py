"""Feature levels: UpdateFeatures' validation as Kafka's FeatureControlManager, and the store."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from rivulet.protocol.errors import ErrorCode
from rivulet.server.features import (
    FeatureLevels, FeatureUpdate, FinalizedFeatures, UpgradeType, supported_features,
)

UP, SAFE, UNSAFE = UpgradeType.UPGRADE, UpgradeType.SAFE_DOWNGRADE, UpgradeType.UNSAFE_DOWNGRADE


class MemoryStore:
    def __init__(self) -> None:
        self.stored: FinalizedFeatures | None = None
        self.writes = 0

    def init_finalized_features(self, defaults: Mapping[str, int]) -> FinalizedFeatures:
        if self.stored is None:
            self.stored = FinalizedFeatures(dict(defaults), 0)
        return self.stored

    async def read_finalized_features(self) -> FinalizedFeatures:
        assert self.stored is not None
        return self.stored

    async def write_finalized_features(self, levels: Mapping[str, int], expected_epoch: int
                                       ) -> FinalizedFeatures | None:
        assert self.stored is not None
        if self.stored.epoch != expected_epoch:
            return None
        self.writes += 1
        self.stored = FinalizedFeatures(dict(levels), expected_epoch + 1)
        return self.stored


def update(f: FeatureLevels, *updates: tuple[str, int, int], validate_only: bool = False):
    return asyncio.run(f.update([FeatureUpdate(*u) for u in updates], validate_only))


def test_a_new_cluster_finalizes_what_rivulet_implements():
    f = FeatureLevels(1, supported_features(True), MemoryStore())
    # transaction.version 2 and eligible.leader.replicas.version 1 as Kafka 4.3.1's new clusters
    # (its Admin describeFeatures, tests/java/admin_probe_kafka.txt).
    assert dict(f.finalized.levels) == {"eligible.leader.replicas.version": 1, "group.version": 1,
                                        "share.version": 1, "streams.version": 1, "transaction.version": 2}
    assert f.finalized.epoch == 0
    off = FeatureLevels(1, supported_features(False), MemoryStore())
    assert dict(off.finalized.levels) == {"eligible.leader.replicas.version": 1, "group.version": 1,
                                          "streams.version": 1, "transaction.version": 2}
    assert off.level("share.version") == 0


def test_downgrade_and_upgrade_need_the_right_type_and_persist():
    store = MemoryStore()
    f = FeatureLevels(1, supported_features(True), store)
    e = update(f, ("group.version", 0, UP))
    assert e is not None and e.code == ErrorCode.INVALID_UPDATE_VERSION
    assert e.message == ("The update failed for all features since the following feature had an error: Invalid "
                         "update version 0 for feature group.version. Can't downgrade the version of this feature "
                         "without setting the upgrade type to either safe or unsafe downgrade.")
    assert update(f, ("group.version", 0, SAFE), validate_only=True) is None
    assert f.level("group.version") == 1 and store.writes == 0
    assert update(f, ("group.version", 0, UNSAFE)) is None
    assert f.level("group.version") == 0 and store.stored == FinalizedFeatures(
        {"eligible.leader.replicas.version": 1, "share.version": 1, "streams.version": 1,
         "transaction.version": 2}, 1)
    e = update(f, ("group.version", 1, SAFE))
    assert e is not None and "Can't downgrade to a newer version." in (e.message or "")
    assert update(f, ("group.version", 1, UP)) is None
    assert f.finalized.epoch == 2


def test_levels_outside_the_supported_ranges_are_refused_as_kafka():
    f = FeatureLevels(3, supported_features(True), MemoryStore(),
                      peers=lambda: {3: supported_features(True), 4: supported_features(False)})
    cases = {
        ("transaction.version", 3, UP): "Local controller 3 only supports versions 0-2",
        ("eligible.leader.replicas.version", 2, UP): "Local controller 3 only supports versions 0-1",
        ("group.version", 2, UP): "Local controller 3 only supports versions 0-1",
        ("no.such.feature", 1, UP): "Local controller 3 does not support this feature.",
        ("group.version", -1, SAFE): "A feature version cannot be less than 0.",
        ("group.version", 1, 0): "The controller does not support the given upgrade type.",
    }
    for u, why in cases.items():
        e = update(f, u)
        assert e is not None and e.code == ErrorCode.INVALID_UPDATE_VERSION and (e.message or "").endswith(why), u
    # Another live broker without share groups: share.version 1 is not for the cluster.
    f = FeatureLevels(3, supported_features(True), MemoryStore(), peers=lambda: {4: supported_features(False)})
    assert update(f, ("share.version", 0, SAFE)) is None
    e = update(f, ("share.version", 1, UP))
    assert e is not None and (e.message or "").endswith("broker 4 does not support this feature.")
    # One bad update fails them all.
    e = update(f, ("group.version", 0, SAFE), ("transaction.version", 3, UP))
    assert e is not None and f.level("group.version") == 1


def test_an_existing_cluster_keeps_its_stored_transaction_version_until_upgraded():
    """Levels stored before transaction.version 2 was supported stay as they are (0: absent);
    UpdateFeatures takes them up, once every live broker supports the level."""
    store = MemoryStore()
    store.stored = FinalizedFeatures({"group.version": 1, "share.version": 1, "streams.version": 1}, 3)
    old_peer = {**supported_features(True), "transaction.version": (0, 0)}
    f = FeatureLevels(1, supported_features(True), store, peers=lambda: {2: old_peer})
    assert f.level("transaction.version") == 0
    e = update(f, ("transaction.version", 2, UP))
    assert e is not None and (e.message or "").endswith("broker 2 does not support this feature.")
    f = FeatureLevels(1, supported_features(True), store, peers=lambda: {2: supported_features(True)})
    assert update(f, ("transaction.version", 1, UP)) is None and f.level("transaction.version") == 1
    assert update(f, ("transaction.version", 2, UP)) is None and f.level("transaction.version") == 2
    assert store.stored == FinalizedFeatures({"group.version": 1, "share.version": 1, "streams.version": 1,
                                              "transaction.version": 2}, 5)


def test_an_existing_cluster_keeps_eligible_leader_replicas_off_until_upgraded():
    """Levels stored before Rivulet finalized eligible.leader.replicas.version 1 on a new cluster
    stay at 0 (absent); UpdateFeatures takes it to 1 once every live broker supports it, and back
    to 0 (a safe downgrade, as Kafka's)."""
    store = MemoryStore()
    store.stored = FinalizedFeatures({"group.version": 1, "share.version": 1, "streams.version": 1,
                                      "transaction.version": 2}, 3)
    old_peer = {**supported_features(True), "eligible.leader.replicas.version": (0, 0)}
    f = FeatureLevels(1, supported_features(True), store, peers=lambda: {2: old_peer})
    assert supported_features(True)["eligible.leader.replicas.version"] == (0, 1)
    assert f.level("eligible.leader.replicas.version") == 0 and "eligible.leader.replicas.version" not in store.stored.levels
    e = update(f, ("eligible.leader.replicas.version", 1, UP))
    assert e is not None and (e.message or "").endswith("broker 2 does not support this feature.")
    f = FeatureLevels(1, supported_features(True), store, peers=lambda: {2: supported_features(True)})
    assert update(f, ("eligible.leader.replicas.version", 1, UP)) is None
    assert f.level("eligible.leader.replicas.version") == 1 and store.stored.levels["eligible.leader.replicas.version"] == 1
    assert update(f, ("eligible.leader.replicas.version", 0, SAFE)) is None
    assert f.level("eligible.leader.replicas.version") == 0 and "eligible.leader.replicas.version" not in store.stored.levels


def test_a_concurrent_change_is_read_and_revalidated():
    store = MemoryStore()
    f = FeatureLevels(1, supported_features(True), store)
    store.stored = FinalizedFeatures({"share.version": 1}, 5)  # another broker took group.version to 0
    assert update(f, ("group.version", 1, UP)) is None
    assert store.stored == FinalizedFeatures({"share.version": 1, "group.version": 1}, 6)
    assert f.finalized == store.stored
