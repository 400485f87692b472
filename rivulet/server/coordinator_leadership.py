"""Coordinators move with leadership (cluster mode): the group coordinator serves the groups
of the ``__consumer_offsets`` partitions this broker leads, the transaction coordinator the
ids of its ``__transaction_state`` partitions and the share coordinator the share-partition
states of its ``__share_group_state`` partitions, loading each on election and dropping it
on resignation (clients get NOT_COORDINATOR in between), as Kafka's onLeadershipChange."""

from __future__ import annotations

from rivulet.coordinator.group_coordinator import GroupCoordinator
from rivulet.coordinator.offsets_topic import GROUP_METADATA_TOPIC_NAME
from rivulet.replication.partition import Partition
from rivulet.share.coordinator import SHARE_GROUP_STATE_TOPIC_NAME, ShareCoordinator
from rivulet.transaction.coordinator import TransactionCoordinator
from rivulet.transaction.txn_log import TRANSACTION_STATE_TOPIC_NAME


class CoordinatorLeadership:
    """The ReplicaManager's ``LeadershipListener`` for the coordinators' internal topics."""

    def __init__(self, groups: GroupCoordinator, transactions: TransactionCoordinator,
                 shares: ShareCoordinator) -> None:
        self.groups = groups
        self.transactions = transactions
        self.shares = shares

    def on_leadership_change(self, leaders: list[Partition], followers: list[Partition]) -> None:
        for p in leaders:
            if p.tp.topic == GROUP_METADATA_TOPIC_NAME:
                self.groups.on_become_leader(p.tp.partition)
            elif p.tp.topic == TRANSACTION_STATE_TOPIC_NAME:
                self.transactions.on_become_leader(p.tp.partition, p.leader_epoch)
            elif p.tp.topic == SHARE_GROUP_STATE_TOPIC_NAME:
                self.shares.on_become_leader(p.tp.partition)
        for p in followers:
            if p.tp.topic == GROUP_METADATA_TOPIC_NAME:
                self.groups.on_resign(p.tp.partition)
            elif p.tp.topic == TRANSACTION_STATE_TOPIC_NAME:
                self.transactions.on_resign(p.tp.partition)
            elif p.tp.topic == SHARE_GROUP_STATE_TOPIC_NAME:
                self.shares.on_resign(p.tp.partition)
