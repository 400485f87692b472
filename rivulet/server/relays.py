"""The broker's three cycles, each through one small named interface bound once.

The replica manager is built first, and the topic manager and the coordinators are built on
it; yet it calls back into them: it opens a replica's log with its topic's config, tells the
coordinators which internal partitions this broker now leads, and asks the transaction
coordinator before a transactional batch opens a transaction (KIP-890). Kafka breaks these
cycles the same way, with callbacks handed to ``ReplicaManager``. Each relay below is given
at construction to the part built first and bound, exactly once, by the composition root
(``Broker.start``) to the part built after it; a call through an unbound relay is a bug in
the start order and says so.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence

from rivulet.common.types import TopicPartition
from rivulet.protocol.errors import ErrorCode
from rivulet.replication.partition import Partition
from rivulet.replication.replica_manager import LeadershipListener, ReplicaLogs
from rivulet.storage.log import Log
from rivulet.transaction.remote_verifier import TxnVerifier


class UnboundRelay(RuntimeError):
    def __init__(self, what: str) -> None:
        super().__init__(f"{what} was called before the broker built its target")


class ReplicaLogsRelay:
    """The replica manager's ``ReplicaLogs``: the topic manager, built on the replica manager."""

    def __init__(self) -> None:
        self._target: ReplicaLogs | None = None

    def bind(self, target: ReplicaLogs) -> None:
        assert self._target is None, "bound twice"
        self._target = target

    def _get(self) -> ReplicaLogs:
        if self._target is None:
            raise UnboundRelay("ReplicaLogs")
        return self._target

    def log_for_replica(self, tp: TopicPartition, topic_id: uuid.UUID) -> Log:
        return self._get().log_for_replica(tp, topic_id)

    def open_replica_logs(self, replicas: list[tuple[TopicPartition, uuid.UUID]]) -> None:
        self._get().open_replica_logs(replicas)

    def delete_replica_log(self, tp: TopicPartition) -> None:
        self._get().delete_replica_log(tp)


class PartitionEvents:
    """What happens to partitions, for the coordinators and share partitions built after the
    replica and topic managers: leadership changes (the replica manager's
    ``LeadershipListener``) and deleted topics' partitions (the topic manager's)."""

    def __init__(self) -> None:
        self._leadership: Sequence[LeadershipListener] | None = None
        self._deletions: Sequence[Callable[[list[TopicPartition]], object]] = ()

    def bind(self, leadership: Sequence[LeadershipListener],
             deletions: Sequence[Callable[[list[TopicPartition]], object]]) -> None:
        assert self._leadership is None, "bound twice"
        self._leadership = tuple(leadership)
        self._deletions = tuple(deletions)

    def on_leadership_change(self, leaders: list[Partition], followers: list[Partition]) -> None:
        if self._leadership is None:
            raise UnboundRelay("LeadershipListener")
        for listener in self._leadership:
            listener.on_leadership_change(leaders, followers)

    def on_partitions_deleted(self, tps: list[TopicPartition]) -> None:
        if self._leadership is None:
            raise UnboundRelay("on_partitions_deleted")
        for listener in self._deletions:
            listener(tps)


class TxnVerifierRelay:
    """KIP-890's local check (``TxnVerifier``): the transaction coordinator, built on the
    replica manager that asks it."""

    def __init__(self) -> None:
        self._target: TxnVerifier | None = None

    def bind(self, target: TxnVerifier) -> None:
        assert self._target is None, "bound twice"
        self._target = target

    def verify_produce(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                       tp: TopicPartition) -> ErrorCode:
        if self._target is None:
            raise UnboundRelay("TxnVerifier")
        return self._target.verify_produce(transactional_id, producer_id, producer_epoch, tp)

    def add_partition(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                      tp: TopicPartition, callback: Callable[[ErrorCode], None]) -> None:
        if self._target is None:
            raise UnboundRelay("TxnVerifier")
        self._target.add_partition(transactional_id, producer_id, producer_epoch, tp, callback)
