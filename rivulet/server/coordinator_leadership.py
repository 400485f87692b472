"""Coordinators move with leadership (cluster mode): the group coordinator serves the groups
of the ``__consumer_offsets`` partitions this broker leads and the transaction coordinator
the ids of its ``__transaction_state`` partitions, loading each on election and dropping it
on resignation (clients get NOT_COORDINATOR in between), as Kafka's onLeadershipChange."""

from __future__ import annotations

from rivulet.coordinator.group_coordinator import GroupCoordinator
from rivulet.coordinator.offsets_topic import GROUP_METADATA_TOPIC_NAME
from rivulet.replication.partition import Partition
from rivulet.transaction.coordinator import TransactionCoordinator
from rivulet.transaction.txn_log import TRANSACTION_STATE_TOPIC_NAME


class CoordinatorLeadership:
    """The ReplicaManager's ``LeadershipListener`` for the two internal topics."""

    def __init__(self, groups: GroupCoordinator, transactions: TransactionCoordinator) -> None:
        self.groups = groups
        self.transactions = transactions

    def on_leadership_change(self, leaders: list[Partition], followers: list[Partition]) -> None:
        for p in leaders:
            if p.tp.topic == GROUP_METADATA_TOPIC_NAME:
                self.groups.on_become_leader(p.tp.partition)
            elif p.tp.topic == TRANSACTION_STATE_TOPIC_NAME:
                self.transactions.on_become_leader(p.tp.partition, p.leader_epoch)
        for p in followers:
            if p.tp.topic == GROUP_METADATA_TOPIC_NAME:
                self.groups.on_resign(p.tp.partition)
            elif p.tp.topic == TRANSACTION_STATE_TOPIC_NAME:
                self.transactions.on_resign(p.tp.partition)
