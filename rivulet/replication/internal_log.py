"""A coordinator's internal partitions (``__consumer_offsets``, ``__transaction_state``,
``__share_group_state``): what the coordinator works with, how a failed append of its records is
answered, and replaying a partition into memory when the coordinator becomes its leader."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
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
    needed, and answers FindCoordinator for the partitions it leads.

    On a single node (``lead_all``) this node leads every partition of the topic. As Kafka's
    brokers, it makes the topic only when first needed (the first FindCoordinator for it, or
    the share coordinator's first use), its logs on a worker thread, then leads them all; a
    topic the data dir already holds is led from start-up. In cluster mode the first
    FindCoordinator has the controller create it, and the partitions this node leads come
    through ``on_become_leader``."""

    replica_manager: ReplicaManager
    metadata: MetadataView
    topic_creator: InternalTopicCreator
    node: NodeEndpoint
    clock: Clock
    _lead_all: bool = field(default=False, init=False)
    _leading_all: bool = field(default=False, init=False)
    _creation: asyncio.Future[None] | None = field(default=None, init=False)

    def internal_topic(self) -> tuple[str, int, dict[str, str]]:
        """The coordinator's topic: its name, configured partition count and the configs it is
        created with."""
        raise NotImplementedError

    def _lead_every_partition(self, num_partitions: int) -> None:
        """Single node: take every partition of the topic (load each)."""
        raise NotImplementedError

    def _start_leading(self, lead_all: bool) -> int:
        """At start-up: how many partitions the topic has (the configured count until it exists,
        and always in cluster mode, where the metadata comes later)."""
        self._lead_all = lead_all
        name, configured, _ = self.internal_topic()
        topic = self.metadata.get(name) if lead_all else None
        return configured if topic is None else topic.num_partitions

    def _lead_existing_topic(self) -> None:
        """Single node, start-up: lead the topic's partitions now if the data dir holds it."""
        topic = self.metadata.get(self.internal_topic()[0]) if self._lead_all else None
        if topic is not None:
            self._leading_all = True
            self._lead_every_partition(topic.num_partitions)

    def _topic_led(self) -> bool:
        """Whether this node leads the topic's partitions (always true in cluster mode, where each
        is checked on its own). On a single node the first call without the topic starts its
        creation, and the answer stays false until it is made."""
        if not self._lead_all or self._leading_all:
            return True
        self._create_topic()
        return False

    def make_topic_when_missing(self) -> None:
        """Metadata naming the topic, auto-creation allowed (single node): have it made, as the
        first FindCoordinator would, as Kafka's broker makes an internal topic asked for so."""
        self._topic_led()

    def _create_topic(self) -> asyncio.Future[None]:
        """Make the topic (its logs on a worker thread, so the loop keeps serving other clients),
        then lead every partition. One creation for all who ask."""
        if self._creation is None or self._creation.done():
            name, configured, configs = self.internal_topic()

            async def create() -> None:
                topic = await self.topic_creator.ensure_internal_topic_off_loop(name, configured, configs)
                if not self._leading_all:
                    self._leading_all = True
                    self._lead_every_partition(topic.num_partitions)

            def failed(f: asyncio.Future[None]) -> None:
                e = None if f.cancelled() else f.exception()
                if isinstance(e, (ApiError, OSError)):
                    # Expected (a full or read-only disk): one line; the next FindCoordinator
                    # tries again, and answers COORDINATOR_NOT_AVAILABLE until then.
                    log.warning("could not create %s: %s", name, e)
                elif e is not None:
                    log.error("creating %s failed", name, exc_info=e)
            self._creation = asyncio.ensure_future(create())
            self._creation.add_done_callback(failed)
        return self._creation

    def _stop_creation(self) -> None:
        """Shutdown: lead nothing more (the topic manager's creation itself runs on; shutdown waits for it)."""
        if self._creation is not None:
            self._creation.cancel()


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
