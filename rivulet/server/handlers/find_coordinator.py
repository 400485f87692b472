"""FindCoordinator (API 10): key type 0 resolves through the group coordinator, key type 1
through the transaction coordinator, key type 2 (a share partition's "group:topicId:partition",
which brokers ask) through the share coordinator; in cluster mode to the leader of the key's
partition of ``__consumer_offsets``, ``__transaction_state`` or ``__share_group_state``, which
the first request has the controller create, as Kafka's brokers do."""

from __future__ import annotations

from collections.abc import Callable

from rivulet.common.types import TopicPartition
from rivulet.coordinator.group_coordinator import GroupCoordinator
from rivulet.coordinator.offsets_topic import GROUP_METADATA_TOPIC_NAME
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.framing import RequestHeader
from rivulet.protocol.messages import find_coordinator_response as fcr
from rivulet.protocol.messages.find_coordinator_request import FindCoordinatorRequest
from rivulet.replication.metadata_cache import MetadataCache
from rivulet.security.acls import AclOperation as Op, ResourceType
from rivulet.server.acls import Authz
from rivulet.server.handlers import Handler
from rivulet.server.internal_topics import ClusterInternalTopics
from rivulet.server.network import KafkaConnection
from rivulet.share.coordinator import SHARE_GROUP_STATE_TOPIC_NAME, ShareCoordinator
from rivulet.transaction.coordinator import TransactionCoordinator
from rivulet.transaction.txn_log import TRANSACTION_STATE_TOPIC_NAME

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
SHARE_KEY_TYPE = 2

# Kafka's default exception messages for the errors FindCoordinator reports.
_MESSAGES = {
    ErrorCode.NONE: "NONE",
    ErrorCode.COORDINATOR_NOT_AVAILABLE: "The coordinator is not available.",
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: "The coordinator is loading and hence can't process requests.",
    ErrorCode.NOT_COORDINATOR: "This is not the correct coordinator.",
    ErrorCode.INVALID_REQUEST: "This most likely occurs because of a request being malformed by the client "
                               "library or the message was sent to an incompatible broker. See the broker logs "
                               "for more details.",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "Transactional Id authorization failed.",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
}


def _valid_share_key(key: str) -> bool:
    """"groupId:topicId:partition" (the group id may itself hold colons)."""
    parts = key.rsplit(":", 2)
    return len(parts) == 3 and bool(parts[0]) and bool(parts[1]) and parts[2].lstrip("-").isdigit() \
        and int(parts[2]) >= 0


class FindCoordinatorHandler:
    def __init__(self, groups: GroupCoordinator, transactions: TransactionCoordinator, authz: Authz,
                 metadata_cache: MetadataCache | None = None, internal_topics: ClusterInternalTopics | None = None,
                 shares: ShareCoordinator | None = None) -> None:
        self.groups = groups
        self.shares = shares
        self.authz = authz
        self.transactions = transactions
        # Cluster mode: the coordinator is the leader of the key's internal partition.
        self.metadata_cache = metadata_cache
        self.internal_topics = internal_topics

    def handlers(self) -> dict[int, Handler]:
        return {10: self.handle_find_coordinator}

    def _authorized(self, conn: KafkaConnection, key_type: int, key: str) -> ErrorCode:
        """DESCRIBE on the group or the transactional id, as Kafka checks before looking."""
        if key_type == GROUP_KEY_TYPE and not self.authz.group(conn, Op.DESCRIBE, key):
            return ErrorCode.GROUP_AUTHORIZATION_FAILED
        if key_type == TRANSACTION_KEY_TYPE and not self.authz.authorize(conn, Op.DESCRIBE,
                                                                       ResourceType.TRANSACTIONAL_ID, key):
            return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        if key_type == SHARE_KEY_TYPE:
            if not self.authz.cluster(conn, Op.CLUSTER_ACTION):
                return ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            if not _valid_share_key(key):
                return ErrorCode.INVALID_REQUEST
        return ErrorCode.NONE

    def _resolve(self, key_type: int, key: str, conn: KafkaConnection) -> tuple[ErrorCode, int, str, int]:
        """The coordinator of ``key`` as clients on the connection's listener reach it."""
        refused = self._authorized(conn, key_type, key)
        if refused:
            return refused, -1, "", -1
        listener = conn.listener
        if self.metadata_cache is None:
            own = self._own_coordinator(key_type, key)
            if own[0] == ErrorCode.NONE and listener.advertised is not None:
                return own[0], own[1], listener.advertised.host, listener.advertised.port
            return own
        return self._resolve_in_cluster(key_type, key, listener.name)

    def _own_coordinator(self, key_type: int, key: str) -> tuple[ErrorCode, int, str, int]:
        if key_type == GROUP_KEY_TYPE:
            return self.groups.find_group_coordinator(key)
        if key_type == TRANSACTION_KEY_TYPE:
            return self.transactions.find_coordinator(key)
        if key_type == SHARE_KEY_TYPE and self.shares is not None:
            return self.shares.find_coordinator(key)
        if key_type == SHARE_KEY_TYPE:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        return ErrorCode.INVALID_REQUEST, -1, "", -1

    def _resolve_in_cluster(self, key_type: int, key: str, listener: str) -> tuple[ErrorCode, int, str, int]:
        assert self.metadata_cache is not None
        if key_type == GROUP_KEY_TYPE:
            active, topic = self.groups.is_active, GROUP_METADATA_TOPIC_NAME
            partition_for: Callable[[str], int] = self.groups.partition_for
        elif key_type == TRANSACTION_KEY_TYPE:
            active, topic, partition_for = (self.transactions.active, TRANSACTION_STATE_TOPIC_NAME,
                                            self.transactions.partition_for)
        elif key_type == SHARE_KEY_TYPE and self.shares is not None:
            active, topic, partition_for = self.shares.active, SHARE_GROUP_STATE_TOPIC_NAME, self.shares.partition_for
        else:
            return ErrorCode.INVALID_REQUEST, -1, "", -1
        # Cluster mode: the leader of the key's partition of the internal topic.
        if not active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        if not self.metadata_cache.contains_topic(topic):
            # Made by the controller; COORDINATOR_NOT_AVAILABLE until its leaders are known.
            if self.internal_topics is not None:
                self.internal_topics.create_when_missing(topic)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        return self._leader_of(TopicPartition(topic, partition_for(key)), listener)

    def _leader_of(self, tp: TopicPartition, listener: str) -> tuple[ErrorCode, int, str, int]:
        assert self.metadata_cache is not None
        leader, _epoch, endpoint = self.metadata_cache.leader_and_endpoint(tp, listener)
        if endpoint is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        return ErrorCode.NONE, leader, endpoint.host, endpoint.port

    @staticmethod
    def _invalid(_key_type: int, _key: str, _conn: KafkaConnection) -> tuple[ErrorCode, int, str, int]:
        return ErrorCode.INVALID_REQUEST, -1, "", -1

    def handle_find_coordinator(
        self, header: RequestHeader, req: FindCoordinatorRequest, conn: KafkaConnection
    ) -> fcr.FindCoordinatorResponse:
        v = header.api_version
        key_type = req.key_type if v >= 1 else GROUP_KEY_TYPE
        # The share key type came with v6.
        resolve = self._invalid if key_type == SHARE_KEY_TYPE and v < 6 else self._resolve
        if v < 4:
            err, node, host, port = resolve(key_type, req.key, conn)
            if err != ErrorCode.NONE:
                node, host, port = -1, "", -1
            return fcr.FindCoordinatorResponse(throttle_time_ms=0, error_code=err, error_message=_MESSAGES.get(err),
                                               node_id=node, host=host, port=port)
        out = []
        for key in req.coordinator_keys:
            err, node, host, port = resolve(key_type, key, conn)
            if err != ErrorCode.NONE:
                node, host, port = -1, "", -1
            out.append(fcr.Coordinator(key=key, node_id=node, host=host, port=port, error_code=err,
                                       error_message=None if err == ErrorCode.NONE else _MESSAGES.get(err)))
        return fcr.FindCoordinatorResponse(throttle_time_ms=0, coordinators=out)
