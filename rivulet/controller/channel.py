"""How the controller talks to brokers: Kafka's ControllerChannelManager and
ControllerBrokerRequestBatch.

``RequestBatch`` collects the LeaderAndIsr, UpdateMetadata and StopReplica entries one
controller event decides, then builds one request of each kind per broker from the
``ControllerContext``. ``ControllerChannelManager`` keeps one queue and one sender task per
live broker and sends each request in order over ``rivulet.client.connection``, reconnecting
with backoff; a broker that does not speak an API gets a warning, not an endless retry.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Protocol

from rivulet.client.connection import PLAINTEXT_CONNECTOR, BrokerConnection, BrokerConnector
from rivulet.common.logs import RateLimitFilter
from rivulet.common.types import TopicPartition
from rivulet.controller.context import LEADER_DURING_DELETE, ControllerContext
from rivulet.controller.zk_data import BrokerRegistration
from rivulet.protocol.errors import ApiError
from rivulet.protocol.messages import leader_and_isr_request as lair
from rivulet.protocol.messages import stop_replica_request as srr
from rivulet.protocol.messages import update_metadata_request as umr
from rivulet.protocol.schema import ZERO_UUID, Struct

log = logging.getLogger(__name__)
# A broker that stays unreachable is logged once per interval while the sends are retried.
log.addFilter(RateLimitFilter(level=logging.INFO))

SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
ResponseCallback = Callable[[Struct | None], object]


class ControllerChannel(Protocol):
    """Where the controller's requests go (the channel manager, or a test's recorder)."""

    def add_broker(self, broker: BrokerRegistration) -> None: ...

    def remove_broker(self, broker_id: int) -> None: ...

    def send(self, broker_id: int, request: Struct, callback: ResponseCallback | None = None) -> None: ...

    async def close(self) -> None: ...


@dataclass
class RequestBatch:
    """The requests of one controller event, keyed by destination broker."""

    controller_id: int
    listener: str = "PLAINTEXT"  # the inter-broker listener: where followers find leaders
    leader_and_isr: dict[int, dict[TopicPartition, bool]] = field(default_factory=lambda: defaultdict(dict))
    update_metadata_brokers: set[int] = field(default_factory=set)
    update_metadata_partitions: set[TopicPartition] = field(default_factory=set)
    stop_replica: dict[int, dict[TopicPartition, bool]] = field(default_factory=lambda: defaultdict(dict))

    def add_leader_and_isr(self, brokers: list[int], tp: TopicPartition, is_new: bool = False) -> None:
        """Tell ``brokers`` the partition's current leadership (and that they replicate it); the
        partition goes into the UpdateMetadata of every live broker too, as Kafka does."""
        for b in brokers:
            self.leader_and_isr[b][tp] = is_new or self.leader_and_isr[b].get(tp, False)
        self.update_metadata_partitions.add(tp)

    def add_update_metadata(self, brokers: set[int], partitions: list[TopicPartition]) -> None:
        self.update_metadata_brokers |= brokers
        self.update_metadata_partitions.update(partitions)

    def add_stop_replica(self, broker: int, tp: TopicPartition, delete: bool) -> None:
        self.stop_replica[broker][tp] = delete or self.stop_replica[broker].get(tp, False)

    # ------------------------------------------------------------ building and sending
    @property
    def publishes_metadata(self) -> bool:
        """Whether sending it sends UpdateMetadata."""
        return bool(self.update_metadata_brokers or self.update_metadata_partitions or self.leader_and_isr)

    def send(self, ctx: ControllerContext, channel: ControllerChannel,
             stop_replica_callback: Callable[[int, set[str], Struct | None], object] | None = None,
             update_metadata_callback: Callable[[int, Struct | None], object] | None = None) -> None:
        """``stop_replica_callback`` gets each StopReplica's broker, the topics it deleted
        replicas of, and the response (None if the broker could not take it);
        ``update_metadata_callback`` each UpdateMetadata's broker and response."""
        for b, parts in self.leader_and_isr.items():
            if b in ctx.live_brokers and parts:
                channel.send(b, self.build_leader_and_isr(ctx, b, parts))
        if self.update_metadata_partitions or self.leader_and_isr:
            self.update_metadata_brokers |= ctx.live_ids
        for b in sorted(self.update_metadata_brokers & ctx.live_ids):
            um_cb = None if update_metadata_callback is None else (
                lambda r, b=b: update_metadata_callback(b, r))
            channel.send(b, self.build_update_metadata(ctx, b, self.update_metadata_partitions), um_cb)
        for b, parts in self.stop_replica.items():
            if b in ctx.live_brokers and parts:
                deleted = {tp.topic for tp, delete in parts.items() if delete}
                cb = None if stop_replica_callback is None else (
                    lambda r, b=b, d=deleted: stop_replica_callback(b, d, r))
                channel.send(b, self.build_stop_replica(ctx, b, parts), cb)
        self.leader_and_isr.clear()
        self.update_metadata_brokers.clear()
        self.update_metadata_partitions.clear()
        self.stop_replica.clear()

    def build_leader_and_isr(self, ctx: ControllerContext, broker: int,
                             parts: dict[TopicPartition, bool]) -> lair.LeaderAndIsrRequest:
        topics: dict[str, list[lair.LeaderAndIsrPartitionState]] = defaultdict(list)
        leaders: set[int] = set()
        for tp, is_new in sorted(parts.items()):
            s = ctx.leadership.get(tp)
            if s is None:
                continue
            a = ctx.assignments[tp.topic]
            leaders.add(s.leader)
            topics[tp.topic].append(lair.LeaderAndIsrPartitionState(
                topic_name=tp.topic, partition_index=tp.partition, controller_epoch=s.controller_epoch,
                leader=s.leader, leader_epoch=s.leader_epoch, isr=list(s.isr), partition_epoch=s.partition_epoch,
                replicas=ctx.replicas(tp), adding_replicas=list(a.adding.get(tp.partition, [])),
                removing_replicas=list(a.removing.get(tp.partition, [])), is_new=is_new,
                leader_recovery_state=s.leader_recovery_state))
        live_leaders = []
        for lid in sorted(leaders):
            ep = inter_broker_endpoint(ctx.live_brokers.get(lid), self.listener)
            if ep is not None:
                live_leaders.append(lair.LeaderAndIsrLiveLeader(broker_id=lid, host_name=ep[0], port=ep[1]))
        return lair.LeaderAndIsrRequest(
            controller_id=self.controller_id, controller_epoch=ctx.epoch.epoch,
            broker_epoch=ctx.broker_epoch(broker), type=0,
            topic_states=[lair.LeaderAndIsrTopicState(topic_name=t, topic_id=ctx.topic_id(t) or ZERO_UUID,
                                                      partition_states=ps) for t, ps in topics.items()],
            live_leaders=live_leaders)

    def build_update_metadata(self, ctx: ControllerContext, broker: int,
                              partitions: set[TopicPartition]) -> umr.UpdateMetadataRequest:
        topics: dict[str, list[umr.UpdateMetadataPartitionState]] = defaultdict(list)
        for tp in sorted(partitions):
            s = ctx.leadership.get(tp)
            if s is None or tp.topic not in ctx.assignments:
                continue
            leader = LEADER_DURING_DELETE if tp.topic in ctx.topics_to_delete else s.leader
            topics[tp.topic].append(umr.UpdateMetadataPartitionState(
                topic_name=tp.topic, partition_index=tp.partition, controller_epoch=s.controller_epoch,
                leader=leader, leader_epoch=s.leader_epoch, isr=list(s.isr), zk_version=s.partition_epoch,
                replicas=ctx.replicas(tp), offline_replicas=ctx.offline_replicas(tp),
                eligible_leader_replicas=list(s.eligible_leader_replicas), last_known_elr=list(s.last_known_elr)))
        return umr.UpdateMetadataRequest(
            controller_id=self.controller_id, controller_epoch=ctx.epoch.epoch,
            broker_epoch=ctx.broker_epoch(broker),
            topic_states=[umr.UpdateMetadataTopicState(topic_name=t, topic_id=ctx.topic_id(t) or ZERO_UUID,
                                                       partition_states=ps) for t, ps in topics.items()],
            live_brokers=[_update_metadata_broker(b) for _, b in sorted(ctx.live_brokers.items())])

    def build_stop_replica(self, ctx: ControllerContext, broker: int,
                           parts: dict[TopicPartition, bool]) -> srr.StopReplicaRequest:
        topics: dict[str, list[srr.StopReplicaPartitionState]] = defaultdict(list)
        for tp, delete in sorted(parts.items()):
            s = ctx.leadership.get(tp)
            # Kafka's sentinel epochs: -2 for a deletion (any epoch), else the current one
            epoch = -2 if delete else (s.leader_epoch if s is not None else -1)
            topics[tp.topic].append(srr.StopReplicaPartitionState(
                partition_index=tp.partition, leader_epoch=epoch, delete_partition=delete))
        return srr.StopReplicaRequest(
            controller_id=self.controller_id, controller_epoch=ctx.epoch.epoch,
            broker_epoch=ctx.broker_epoch(broker),
            topic_states=[srr.StopReplicaTopicState(topic_name=t, partition_states=ps) for t, ps in topics.items()])


def inter_broker_endpoint(b: BrokerRegistration | None, listener: str) -> tuple[str, int] | None:
    """The broker's endpoint on ``listener`` (else its first one, for a broker that names it otherwise)."""
    if b is None or not b.endpoints:
        return None
    e = b.endpoint(listener) or b.endpoints[0]
    return e.host, e.port


def _update_metadata_broker(b: BrokerRegistration) -> umr.UpdateMetadataBroker:
    return umr.UpdateMetadataBroker(
        id=b.broker_id, rack=b.rack,
        endpoints=[umr.UpdateMetadataEndpoint(port=e.port, host=e.host, listener=e.listener,
                                              security_protocol=SECURITY_PROTOCOL_IDS.get(e.security_protocol, 0))
                   for e in b.endpoints])


class _BrokerSender:
    def __init__(self, broker: BrokerRegistration, listener: str, client_id: str, request_timeout_ms: int,
                 backoff_s: float, connector: BrokerConnector) -> None:
        self.broker = broker
        self.connector = connector
        self.listener = listener
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.backoff_s = backoff_s
        self.queue: asyncio.Queue[tuple[Struct, ResponseCallback | None]] = asyncio.Queue()
        self.conn: BrokerConnection | None = None
        self.refused: set[str] = set()
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"controller-to-{broker.broker_id}")

    async def _connection(self) -> BrokerConnection:
        while self.conn is None or self.conn.closed:
            ep = inter_broker_endpoint(self.broker, self.listener)
            assert ep is not None
            conn = self.connector.connection(ep[0], ep[1], self.client_id, self.request_timeout_ms,
                                             self.broker.broker_id)
            try:
                self.conn = await conn.connect(timeout=self.request_timeout_ms / 1000)
            except (OSError, ApiError) as e:
                log.debug("controller cannot reach broker %d yet: %s", self.broker.broker_id, e)
                await asyncio.sleep(self.backoff_s)
        return self.conn

    async def _run(self) -> None:
        while True:
            request, callback = await self.queue.get()
            while True:
                conn = await self._connection()
                try:
                    version = conn.version_for(request.API_KEY)
                except ApiError as e:
                    name = type(request).__name__
                    # Once per kind: a broker without the API refuses every one of them.
                    (log.debug if name in self.refused else log.warning)(
                        "broker %d cannot take %s (%s); not sent", self.broker.broker_id, name, e,
                        extra={"kind": f"{name} refused by broker {self.broker.broker_id}"})
                    self.refused.add(name)
                    response = None
                    break
                try:
                    response = await conn.send(request, version)
                    break
                except (OSError, ApiError) as e:
                    broker_id = self.broker.broker_id
                    log.info("sending %s to broker %d failed (%s); retrying", type(request).__name__, broker_id, e,
                             extra={"kind": f"failed sends to broker {broker_id}"})
                    await asyncio.sleep(self.backoff_s)
            if callback is not None:
                try:
                    callback(response)
                except Exception:
                    log.exception("controller response callback failed")

    async def close(self) -> None:
        self.task.cancel()
        try:
            await self.task
        except (asyncio.CancelledError, Exception):
            pass
        if self.conn is not None:
            await self.conn.close()


class ControllerChannelManager:
    """One sender per live broker; requests to a broker leave in the order they were queued."""

    def __init__(self, controller_id: int, listener: str = "PLAINTEXT", request_timeout_ms: int = 30000,
                 backoff_ms: int = 100, connector: BrokerConnector = PLAINTEXT_CONNECTOR) -> None:
        self.listener = listener
        self.connector = connector
        self.client_id = f"controller-{controller_id}"
        self.request_timeout_ms = request_timeout_ms
        self.backoff_s = backoff_ms / 1000
        self._senders: dict[int, _BrokerSender] = {}
        self._closing: set[asyncio.Task] = set()

    def add_broker(self, broker: BrokerRegistration) -> None:
        old = self._senders.get(broker.broker_id)
        if old is not None and old.broker.epoch == broker.epoch:
            return
        self.remove_broker(broker.broker_id)
        self._senders[broker.broker_id] = _BrokerSender(broker, self.listener, self.client_id, self.request_timeout_ms,
                                                        self.backoff_s, self.connector)

    def remove_broker(self, broker_id: int) -> None:
        sender = self._senders.pop(broker_id, None)
        if sender is not None:
            t = asyncio.get_running_loop().create_task(sender.close())
            self._closing.add(t)
            t.add_done_callback(self._closing.discard)

    def send(self, broker_id: int, request: Struct, callback: ResponseCallback | None = None) -> None:
        sender = self._senders.get(broker_id)
        if sender is None:
            log.debug("no channel to broker %d; %s dropped", broker_id, type(request).__name__)
            return
        sender.queue.put_nowait((request, callback))

    async def close(self) -> None:
        senders, self._senders = list(self._senders.values()), {}
        for s in senders:
            await s.close()
        for t in list(self._closing):
            await t
