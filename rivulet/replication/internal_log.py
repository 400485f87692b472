"""A coordinator's internal partitions (``__consumer_offsets``, ``__transaction_state``,
``__share_group_state``): what the coordinator works with, how a failed append of its records is
answered, and replaying a partition into memory when the coordinator becomes its leader."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from rivulet.common.cluster import InternalTopicCreator, MetadataView, NodeEndpoint
from rivulet.common.time import Clock
from rivulet.protocol import records as rec
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.storage import Log

if TYPE_CHECKING:
    from rivulet.replication.replica_manager import ReplicaManager

log = logging.getLogger(__name__)


@dataclass(eq=False, repr=False)  # identity, as any coordinator
class InternalTopicCoordinator:
    """The collaborators of a coordinator whose state lives in an internal topic's partitions:
    it appends to and reads them through the replica manager, has the topic created when first
    needed, and answers FindCoordinator for the partitions it leads."""

    replica_manager: ReplicaManager
    metadata: MetadataView
    topic_creator: InternalTopicCreator
    node: NodeEndpoint
    clock: Clock

    def _partition_count(self, topic: str, configured: int, configs: dict[str, str], lead_all: bool) -> int:
        """How many partitions the coordinator's topic has. ``lead_all`` (single-node mode): this
        node leads them all, and the topic is created now unless it exists. In cluster mode the
        first FindCoordinator has the controller create it, and the partitions this node leads
        come through ``on_become_leader``."""
        if not lead_all:
            return configured
        return self.topic_creator.ensure_internal_topic(topic, configured, configs).num_partitions


def coordinator_append_error(code: ErrorCode) -> ErrorCode:
    """How a coordinator answers a failed append of its records (Kafka's mapping)."""
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return code


async def replay_log(lg: Log, apply: Callable[[rec.Record], None], *, buffer_size: int,
                     stopped: Callable[[], bool] = lambda: False) -> None:
    """Hand every data record from the log start to the end as it is now to ``apply``, in
    chunks of about ``buffer_size`` bytes, yielding to the event loop between chunks."""
    offset = lg.log_start_offset
    end = lg.log_end_offset
    while offset < end and not stopped():
        try:
            data = lg.read(offset, buffer_size, max_offset=end, min_one_batch=True).records
        except ApiError as e:
            log.warning("reading %s at %d failed: %s", lg, offset, e)
            break
        if not data:
            break
        last = offset
        for batch in rec.decode_records(data):
            last = batch.header.next_offset
            if batch.header.is_control:
                continue
            for r in batch.records:
                if r.offset >= offset:
                    apply(r)
        if last <= offset:
            break
        offset = last
        await asyncio.sleep(0)
