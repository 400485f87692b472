"""KIP-890's produce-time check in cluster mode (Kafka's AddPartitionsToTxnManager): before a
transactional batch opens a transaction on a partition, its leader asks the transactional
id's coordinator, wherever it runs, whether the partition is part of the transaction: the
local coordinator directly, another broker with AddPartitionsToTxn v4 (verify_only)."""

from __future__ import annotations

import logging

from rivulet.common.types import TopicPartition
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.protocol.messages import add_partitions_to_txn_request as aptq
from rivulet.replication.link import PLAINTEXT_CONNECTOR, BrokerConnector, BrokerLink
from rivulet.replication.metadata_cache import MetadataCache
from rivulet.replication.replica_manager import TxnVerifier
from rivulet.transaction.txn_log import TRANSACTION_STATE_TOPIC_NAME, partition_for

log = logging.getLogger(__name__)


class ClusterTxnVerifier:
    def __init__(self, node_id: int, cache: MetadataCache, listener: str, local: TxnVerifier,
                 request_timeout_ms: int = 30000, connector: BrokerConnector = PLAINTEXT_CONNECTOR, *,
                 verification_enabled: bool = True) -> None:
        """``local`` answers for the transactional ids this broker coordinates;
        ``verification_enabled`` is transaction.partition.verification.enable."""
        self.node_id = node_id
        self.connector = connector
        self.cache = cache
        self.listener = listener
        self.local = local
        self.verification_enabled = verification_enabled
        self._links: dict[int, BrokerLink] = {}
        self.request_timeout_ms = request_timeout_ms

    async def verify(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                     tp: TopicPartition) -> ErrorCode:
        if not self.verification_enabled:
            return ErrorCode.NONE
        if not transactional_id:
            return ErrorCode.INVALID_TXN_STATE
        n = self.cache.num_partitions(TRANSACTION_STATE_TOPIC_NAME) or 0
        if n <= 0:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        leader, _epoch, endpoint = self.cache.leader_and_endpoint(
            TopicPartition(TRANSACTION_STATE_TOPIC_NAME, partition_for(transactional_id, n)), self.listener)
        if leader == self.node_id:
            return self.local.verify_produce(transactional_id, producer_id, producer_epoch, tp)
        if endpoint is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        req = aptq.AddPartitionsToTxnRequest(transactions=[aptq.AddPartitionsToTxnTransaction(
            transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
            verify_only=True, topics=[aptq.AddPartitionsToTxnTopic(name=tp.topic, partitions=[tp.partition])])])
        link = self._links.setdefault(leader, BrokerLink(f"broker-{self.node_id}-txn-verify", self.request_timeout_ms,
                                                                 self.connector))
        try:
            conn = await link.connection(leader, endpoint.host, endpoint.port)
            resp = await conn.send(req, conn.version_for(req.API_KEY, 5))
        except (ConnectionError, OSError, TimeoutError, ApiError) as e:
            log.info("verifying %s with broker %d failed: %s", transactional_id, leader, e)
            await link.drop()
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if resp.error_code != ErrorCode.NONE:
            return ErrorCode(resp.error_code)
        for t in resp.results_by_transaction:
            for topic in t.topic_results:
                for p in topic.results_by_partition:
                    if topic.name == tp.topic and p.partition_index == tp.partition:
                        return ErrorCode(p.partition_error_code)
        return ErrorCode.UNKNOWN_SERVER_ERROR

    async def close(self) -> None:
        for link in self._links.values():
            await link.drop()
