"""Cluster mode: the coordinators' internal topics (``__consumer_offsets``,
``__transaction_state``, ``__share_group_state``) made when first asked for, by the controller,
as Kafka's brokers have them made: the first FindCoordinator of their kind, or Metadata naming
one with auto-creation allowed. (On a single node each coordinator makes its own,
``InternalTopicCoordinator``.)"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from kazoo.exceptions import KazooException

from rivulet.coordinator.group_coordinator import GroupCoordinator
from rivulet.coordinator.offsets_topic import GROUP_METADATA_TOPIC_NAME
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.server.config import BrokerConfig
from rivulet.server.zk_cluster import ZkClusterMember
from rivulet.share.coordinator import SHARE_GROUP_STATE_TOPIC_NAME, ShareCoordinator
from rivulet.transaction.coordinator import TransactionCoordinator
from rivulet.transaction.txn_log import TRANSACTION_STATE_TOPIC_NAME

log = logging.getLogger(__name__)


class ClusterInternalTopics:
    """Writes a missing internal topic to ZooKeeper for the controller to create, with its
    coordinator's partition count, replication factor and configs; one creation in flight per
    topic, however many requests ask meanwhile."""

    def __init__(self, config: BrokerConfig, cluster: ZkClusterMember, groups: GroupCoordinator,
                 transactions: TransactionCoordinator, shares: ShareCoordinator | None) -> None:
        self.config = config
        self.cluster = cluster
        # topic -> (its config prefix, its configs for a replication factor)
        self._specs: dict[str, tuple[str, Callable[[int], dict[str, str]]]] = {
            GROUP_METADATA_TOPIC_NAME: ("offsets.topic", lambda _rf: groups.offsets_topic_configs()),
            TRANSACTION_STATE_TOPIC_NAME: ("transaction.state.log", transactions.state_topic_configs),
        }
        if shares is not None:
            self._specs[SHARE_GROUP_STATE_TOPIC_NAME] = ("share.coordinator.state.topic", shares.state_topic_configs)
        self._creating: dict[str, asyncio.Task[None]] = {}

    def create_when_missing(self, name: str) -> None:
        """Have ``name`` created unless a creation is under way. With fewer live brokers than
        its replication factor it waits for more (the next request tries again), as Kafka does
        while a cluster starts."""
        prefix, configs = self._specs[name]
        if name in self._creating:
            return
        rf_key = f"{prefix}.replication.factor"
        rf = self.config[rf_key]
        live = len(self.cluster.live_broker_ids())
        if live < rf:
            log.warning("Number of alive brokers '%d' does not meet the required replication factor '%d' for "
                        "the topic %s (configured via '%s'). This error can be ignored if the cluster is starting "
                        "up and not all brokers are up yet.", live, rf, name, rf_key)
            return
        assignment = self.cluster.assign_replicas(self.config[f"{prefix}.num.partitions"], rf)
        task = asyncio.get_running_loop().create_task(self._create(name, assignment, configs(rf)))
        self._creating[name] = task
        task.add_done_callback(lambda _t: self._creating.pop(name, None))

    async def _create(self, name: str, assignment: dict[int, list[int]], configs: dict[str, str]) -> None:
        try:
            await self.cluster.create_topic(name, assignment, configs)
            log.info("created internal topic %s with %d partition(s)", name, len(assignment))
        except ApiError as e:
            if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:  # another broker was first
                log.warning("creating internal topic %s failed: %s", name, e)
        except (KazooException, TimeoutError) as e:
            # A lost or expired ZooKeeper session: the next request asking for it tries again.
            log.warning("creating internal topic %s failed: %r", name, e)
        except Exception:
            log.exception("creating internal topic %s failed", name)
