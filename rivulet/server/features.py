"""Feature levels (KIP-584): the versions of each feature this broker supports, the levels the
cluster has finalized, and UpdateFeatures' rules, as Kafka's FeatureControlManager applies them.

A broker lists both in ApiVersions (v3+); clients read ``group.version``, ``share.version`` and
``transaction.version`` there. The finalized levels live with the ``FeatureStore``: ZooKeeper's
/feature znode in a cluster (its znode version is the epoch, as Kafka's ZooKeeper mode), the
broker's own metadata on one node. Rivulet supports a level only where it implements what the
level turns on. A new cluster (or one new node) finalizes the highest supported levels, as
Kafka 4.3's (transaction.version 2, eligible.leader.replicas.version 1); an existing cluster
keeps its stored levels.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from rivulet.protocol.errors import ApiError, ErrorCode

log = logging.getLogger(__name__)

GROUP_VERSION = "group.version"
SHARE_VERSION = "share.version"
TRANSACTION_VERSION = "transaction.version"
STREAMS_VERSION = "streams.version"
ELR_VERSION = "eligible.leader.replicas.version"

# How often UpdateFeatures re-reads and re-validates when another broker changed the levels first.
_MAX_CONFLICT_RETRIES = 5


def supported_features(share_groups_enabled: bool) -> dict[str, tuple[int, int]]:
    """feature -> (min, max) level this broker can run at. group.version 1 is KIP-848's consumer
    protocol; share.version 1 is KIP-932's share groups, which ``group.share.enable`` can keep out."""
    return {
        GROUP_VERSION: (0, 1),
        SHARE_VERSION: (0, 1 if share_groups_enabled else 0),
        TRANSACTION_VERSION: (0, 2),  # 2: KIP-890 part 2 (epoch bump at every EndTxn, implicit adds)
        STREAMS_VERSION: (0, 1),  # 1: KIP-1071's streams groups
        ELR_VERSION: (0, 1),  # 1: KIP-966's eligible leader replicas
    }


class UpgradeType(enum.IntEnum):
    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3


@dataclass(frozen=True)
class FinalizedFeatures:
    """The cluster's finalized levels (features at level 0 are absent) and their epoch."""

    levels: Mapping[str, int]
    epoch: int


@dataclass(frozen=True)
class FeatureUpdate:
    feature: str
    level: int
    upgrade_type: int  # an UpgradeType code; anything else is refused as Kafka's UNKNOWN


class FeatureStore(Protocol):
    def init_finalized_features(self, defaults: Mapping[str, int]) -> FinalizedFeatures:
        """The stored levels, or ``defaults`` stored now when none are (a new cluster). Blocking,
        at construction."""
        ...

    async def read_finalized_features(self) -> FinalizedFeatures:
        ...

    async def write_finalized_features(self, levels: Mapping[str, int], expected_epoch: int
                                       ) -> FinalizedFeatures | None:
        """Store ``levels`` if the stored epoch is still ``expected_epoch``; None if it is not."""
        ...


class FeatureLevels:
    """This broker's supported features and the cluster's finalized levels, kept current."""

    def __init__(self, node_id: int, supported: Mapping[str, tuple[int, int]], store: FeatureStore,
                 peers: Callable[[], Mapping[int, Mapping[str, tuple[int, int]]]] = dict) -> None:
        """``peers``: the other live brokers' supported features (a cluster's registrations),
        which an update must fit as well as this broker's."""
        self.node_id = node_id
        self.supported = dict(supported)
        self.store = store
        self.peers = peers
        # A new cluster starts at the highest level of everything Rivulet implements, as Kafka
        # 4.3's new clusters finalize the highest level of every feature they support.
        self.finalized = store.init_finalized_features({n: hi for n, (_lo, hi) in self.supported.items() if hi > 0})

    def level(self, feature: str) -> int:
        """The finalized level in force here: never above what this broker supports."""
        return min(self.finalized.levels.get(feature, 0), self.supported.get(feature, (0, 0))[1])

    def set_finalized(self, finalized: FinalizedFeatures) -> None:
        """The levels as stored (changed here or, in a cluster, by another broker)."""
        if finalized.epoch >= self.finalized.epoch:
            self.finalized = finalized

    # ------------------------------------------------------------ UpdateFeatures
    def _not_supported(self, feature: str, level: int) -> str | None:
        for who, ranges in [(f"Local controller {self.node_id}", self.supported),
                            *((f"broker {b}", r) for b, r in sorted(self.peers().items()) if b != self.node_id)]:
            lo, hi = ranges.get(feature, (0, 0))
            if not lo <= level <= hi:
                return f"{who} does not support this feature." if hi == 0 else \
                    f"{who} only supports versions {lo}-{hi}"
        return None

    def check(self, update: FeatureUpdate, levels: Mapping[str, int]) -> ApiError | None:
        """Kafka's checks of one update against the current ``levels``, in its order."""
        def invalid(why: str) -> ApiError:
            return ApiError(ErrorCode.INVALID_UPDATE_VERSION,
                            f"Invalid update version {update.level} for feature {update.feature}. {why}")
        if update.upgrade_type not in UpgradeType.__members__.values():
            return invalid("The controller does not support the given upgrade type.")
        current = levels.get(update.feature, 0)
        if update.level < 0:
            return invalid("A feature version cannot be less than 0.")
        reason = self._not_supported(update.feature, update.level)
        if reason is not None:
            return invalid(reason)
        if update.level < current and update.upgrade_type == UpgradeType.UPGRADE:
            return invalid("Can't downgrade the version of this feature without setting the upgrade type to "
                           "either safe or unsafe downgrade.")
        if update.level > current and update.upgrade_type != UpgradeType.UPGRADE:
            return invalid("Can't downgrade to a newer version.")
        return None

    async def update(self, updates: Sequence[FeatureUpdate], validate_only: bool) -> ApiError | None:
        """Apply every update, or none: the first feature's error (Kafka's controller answers
        the whole request with it)."""
        for _ in range(_MAX_CONFLICT_RETRIES):
            current = self.finalized
            levels = dict(current.levels)
            for u in updates:
                error = self.check(u, current.levels)
                if error is not None:
                    return ApiError(error.code, "The update failed for all features since the following feature "
                                                f"had an error: {error.message}")
                if u.level == 0:
                    levels.pop(u.feature, None)
                else:
                    levels[u.feature] = u.level
            if validate_only:
                return None
            # Written even when nothing seems to change: this broker's view may be behind the store.
            stored = await self.store.write_finalized_features(levels, current.epoch)
            if stored is not None:
                log.info("finalized features now %s (epoch %d)", dict(sorted(stored.levels.items())), stored.epoch)
                self.set_finalized(stored)
                return None
            self.set_finalized(await self.store.read_finalized_features())
        return ApiError(ErrorCode.FEATURE_UPDATE_FAILED, "The finalized features kept changing; try again")
