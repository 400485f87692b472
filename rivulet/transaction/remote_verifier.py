"""KIP-890's produce-time check (Kafka's AddPartitionsToTxnManager): before a transactional
batch opens a transaction on a partition, its leader asks the transactional id's coordinator,
wherever it runs, whether the partition is part of the transaction: the local coordinator
directly (``LocalTxnVerifier``; all of it on one node), another broker with AddPartitionsToTxn
v4 (verify_only; ``ClusterTxnVerifier``). For a transaction.version 2 producer (Produce v12) it
asks the coordinator to add it instead. Both are the replica manager's ``AsyncTxnVerifier``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from rivulet.common.types import TopicPartition
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.protocol.messages import add_partitions_to_txn_request as aptq
from rivulet.replication.link import LINK_ERRORS, BrokerLinks
from rivulet.transaction.txn_log import TRANSACTION_STATE_TOPIC_NAME, partition_for

log = logging.getLogger(__name__)


class TxnVerifier(Protocol):
    """This broker's transaction coordinator, as the KIP-890 check asks it."""

    def verify_produce(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                       tp: TopicPartition) -> ErrorCode: ...

    def add_partition(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                      tp: TopicPartition, callback: Callable[[ErrorCode], None]) -> None:
        """KIP-890 part 2: add ``tp`` to the transaction, answering once it is in the log."""
        ...


class LocalTxnVerifier:
    """The ids this broker coordinates (every id on one node): asks its coordinator directly."""

    def __init__(self, coordinator: TxnVerifier) -> None:
        self.coordinator = coordinator

    async def verify(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                     tp: TopicPartition) -> ErrorCode:
        return self.coordinator.verify_produce(transactional_id, producer_id, producer_epoch, tp)

    async def add(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                  tp: TopicPartition) -> ErrorCode:
        """Answered once the coordinator has logged the partition in the transaction."""
        if not transactional_id:
            return ErrorCode.INVALID_TXN_STATE
        answer: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        self.coordinator.add_partition(transactional_id, producer_id, producer_epoch, tp,
                                       lambda err: answer.done() or answer.set_result(err))
        return await answer


class ClusterTxnVerifier:
    def __init__(self, links: BrokerLinks, local: TxnVerifier, *, verification_enabled: bool = True) -> None:
        """``links``: to the transactional ids' coordinators; ``local`` answers for the ids this
        broker coordinates; ``verification_enabled`` is transaction.partition.verification.enable."""
        self.links = links
        self.local = LocalTxnVerifier(local)
        self.verification_enabled = verification_enabled

    async def verify(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                     tp: TopicPartition) -> ErrorCode:
        if not self.verification_enabled:
            return ErrorCode.NONE
        return await self._ask(transactional_id, producer_id, producer_epoch, tp, verify_only=True)

    async def add(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                  tp: TopicPartition) -> ErrorCode:
        """KIP-890 part 2: the coordinator adds ``tp`` (AddPartitionsToTxn v4+ without verify_only)."""
        return await self._ask(transactional_id, producer_id, producer_epoch, tp, verify_only=False)

    async def _ask(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                   tp: TopicPartition, *, verify_only: bool) -> ErrorCode:
        if not transactional_id:
            return ErrorCode.INVALID_TXN_STATE
        cache = self.links.cache
        n = (cache.num_partitions(TRANSACTION_STATE_TOPIC_NAME) or 0) if cache is not None else 0
        if n <= 0:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        leader, endpoint = self.links.leader(
            TopicPartition(TRANSACTION_STATE_TOPIC_NAME, partition_for(transactional_id, n)))
        if leader == self.links.node_id:
            ask = self.local.verify if verify_only else self.local.add
            return await ask(transactional_id, producer_id, producer_epoch, tp)
        if endpoint is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        req = aptq.AddPartitionsToTxnRequest(transactions=[aptq.AddPartitionsToTxnTransaction(
            transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
            verify_only=verify_only, topics=[aptq.AddPartitionsToTxnTopic(name=tp.topic, partitions=[tp.partition])])])
        try:
            resp = await self.links.send(leader, req, 5, endpoint)
        except LINK_ERRORS as e:
            log.info("verifying %s with broker %d failed: %s", transactional_id, leader, e)
            # A lost or timed-out link is NETWORK_EXCEPTION, as Kafka's AddPartitionsToTxnManager
            # gives it; its callers map that (Produce: NOT_ENOUGH_REPLICAS, TxnOffsetCommit:
            # COORDINATOR_LOAD_IN_PROGRESS). A refusal by the link itself stays as it was.
            return ErrorCode.COORDINATOR_NOT_AVAILABLE if isinstance(e, ApiError) else ErrorCode.NETWORK_EXCEPTION
        if resp.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
            # This broker's own right, not the client's: as Kafka, the partition is unverified.
            return ErrorCode.INVALID_TXN_STATE
        if resp.error_code != ErrorCode.NONE:
            return ErrorCode(resp.error_code)
        for t in resp.results_by_transaction:
            for topic in t.topic_results:
                for p in topic.results_by_partition:
                    if topic.name == tp.topic and p.partition_index == tp.partition:
                        return ErrorCode(p.partition_error_code)
        return ErrorCode.UNKNOWN_SERVER_ERROR

    async def close(self) -> None:
        await self.links.close()
