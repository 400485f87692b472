"""FindCoordinator (API 10): key type 0 resolves through the group coordinator, key type 1
through the transaction coordinator; in cluster mode to the leader of the key's partition of
``__consumer_offsets`` or ``__transaction_state``."""

from __future__ import annotations

from rivulet.common.types import TopicPartition
from rivulet.coordinator.group_coordinator import GroupCoordinator
from rivulet.coordinator.offsets_topic import GROUP_METADATA_TOPIC_NAME
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.framing import RequestHeader
from rivulet.protocol.messages import find_coordinator_response as fcr
from rivulet.protocol.messages.find_coordinator_request import FindCoordinatorRequest
from rivulet.replication.metadata_cache import MetadataCache
from rivulet.server.handlers import Handler
from rivulet.server.network import KafkaConnection
from rivulet.transaction.coordinator import TransactionCoordinator
from rivulet.transaction.txn_log import TRANSACTION_STATE_TOPIC_NAME

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1

# Kafka's default exception messages for the errors FindCoordinator reports.
_MESSAGES = {
    ErrorCode.NONE: "NONE",
    ErrorCode.COORDINATOR_NOT_AVAILABLE: "The coordinator is not available.",
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: "The coordinator is loading and hence can't process requests.",
    ErrorCode.NOT_COORDINATOR: "This is not the correct coordinator.",
    ErrorCode.INVALID_REQUEST: "This most likely occurs because of a request being malformed by the client "
                               "library or the message was sent to an incompatible broker. See the broker logs "
                               "for more details.",
}


class FindCoordinatorHandler:
    def __init__(self, groups: GroupCoordinator, transactions: TransactionCoordinator,
                 metadata_cache: MetadataCache | None = None, listener: str = "PLAINTEXT") -> None:
        self.groups = groups
        self.transactions = transactions
        # Cluster mode: the coordinator is the leader of the key's internal partition.
        self.metadata_cache = metadata_cache
        self.listener = listener

    def handlers(self) -> dict[int, Handler]:
        return {10: self.handle_find_coordinator}

    def _resolve(self, key_type: int, key: str) -> tuple[ErrorCode, int, str, int]:
        if key_type == GROUP_KEY_TYPE:
            if self.metadata_cache is not None:
                if not self.groups.is_active:
                    return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
                return self._leader_of(TopicPartition(GROUP_METADATA_TOPIC_NAME, self.groups.partition_for(key)))
            return self.groups.find_group_coordinator(key)
        if key_type == TRANSACTION_KEY_TYPE:
            if self.metadata_cache is not None:
                if not self.transactions.active:
                    return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
                return self._leader_of(TopicPartition(TRANSACTION_STATE_TOPIC_NAME,
                                                      self.transactions.partition_for(key)))
            return self.transactions.find_coordinator(key)
        return ErrorCode.INVALID_REQUEST, -1, "", -1

    def _leader_of(self, tp: TopicPartition) -> tuple[ErrorCode, int, str, int]:
        assert self.metadata_cache is not None
        leader, _epoch, endpoint = self.metadata_cache.leader_and_endpoint(tp, self.listener)
        if endpoint is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        return ErrorCode.NONE, leader, endpoint.host, endpoint.port

    def handle_find_coordinator(
        self, header: RequestHeader, req: FindCoordinatorRequest, conn: KafkaConnection
    ) -> fcr.FindCoordinatorResponse:
        v = header.api_version
        key_type = req.key_type if v >= 1 else GROUP_KEY_TYPE
        if v < 4:
            err, node, host, port = self._resolve(key_type, req.key)
            if err != ErrorCode.NONE:
                node, host, port = -1, "", -1
            return fcr.FindCoordinatorResponse(throttle_time_ms=0, error_code=err, error_message=_MESSAGES.get(err),
                                               node_id=node, host=host, port=port)
        out = []
        for key in req.coordinator_keys:
            err, node, host, port = self._resolve(key_type, key)
            if err != ErrorCode.NONE:
                node, host, port = -1, "", -1
            out.append(fcr.Coordinator(key=key, node_id=node, host=host, port=port, error_code=err,
                                       error_message=None if err == ErrorCode.NONE else _MESSAGES.get(err)))
        return fcr.FindCoordinatorResponse(throttle_time_ms=0, coordinators=out)
