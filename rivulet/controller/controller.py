"""KafkaController: the ZooKeeper-era controller, one elected among the brokers.

Every broker runs one; the one whose ephemeral /controller znode wins is active. It loads the
cluster from ZooKeeper (a new controller resumes from what the last one wrote), then reacts
to events one at a time, as Kafka's ControllerEventManager: brokers coming and going
(/brokers/ids), topics created (/brokers/topics) and deleted (/admin/delete_topics), ISR
changes from leaders (AlterPartition) and brokers shutting down (ControlledShutdown). Its
decisions are written to ZooKeeper first, fenced by its epoch, then sent to the brokers as
LeaderAndIsr, UpdateMetadata and StopReplica. A controller that finds its epoch gone
(ControllerMovedError) or its session lost resigns.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, replace
from typing import TypeVar

from kazoo.client import KazooState
from kazoo.exceptions import KazooException

from rivulet.common.logs import cause
from rivulet.common.time import SYSTEM_CLOCK, Clock
from rivulet.common.types import TopicPartition
from rivulet.controller import election
from rivulet.controller.election import NO_LEADER
from rivulet.controller.channel import ControllerChannel, RequestBatch
from rivulet.controller.context import ControllerContext, QuorumDescription, ReplicaProgress
from rivulet.controller.zk_client import ControllerEpoch, ControllerMovedError, KafkaZkClient, ZkBridge
from rivulet.controller.zk_data import BROKER_CONFIG_ENTITY, DEFAULT_ENTITY, LeaderAndIsr
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages import alter_partition_request as apq
from rivulet.protocol.messages import alter_partition_response as aps
from rivulet.protocol.messages import controlled_shutdown_response as csr
from rivulet.protocol.messages.update_metadata_response import UpdateMetadataResponse
from rivulet.protocol.schema import Struct

log = logging.getLogger(__name__)

T = TypeVar("T")
MAX_STATE_WRITE_ATTEMPTS = 5
# A preferred replica back in the ISR gets its leadership back after this, not at the next
# periodic check: the other partitions of its broker that catch up meanwhile move with it.
REJOIN_REBALANCE_DELAY_S = 3.0
MIN_ISR = "min.insync.replicas"


@dataclass(frozen=True)
class ControllerConfig:
    broker_id: int
    unclean_leader_election_enable: bool = False
    delete_topic_enable: bool = True
    inter_broker_listener: str = "PLAINTEXT"
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_s: float = 300.0
    leader_imbalance_per_broker_percentage: int = 10
    # The min ISR of a topic without its own (KIP-966's ELR needs it; see _min_isr).
    min_insync_replicas: int = 1


PREFERRED, UNCLEAN = 0, 1  # ElectLeaders' election types


class KafkaController:
    def __init__(self, config: ControllerConfig, zk: ZkBridge, channel_factory: Callable[[], ControllerChannel],
                 elr_enabled: Callable[[], bool], clock: Clock = SYSTEM_CLOCK) -> None:
        """``elr_enabled``: whether the cluster runs at eligible.leader.replicas.version 1 (KIP-966),
        read at each partition change, as Kafka's controller reads its feature level."""
        self.config = config
        self.elr_enabled = elr_enabled
        self.broker_id = config.broker_id
        self.zk = zk
        self.client: KafkaZkClient = zk.client
        self.channel_factory = channel_factory
        self.clock = clock
        self.ctx: ControllerContext | None = None
        self.channel: ControllerChannel | None = None
        self.active_controller_id: int | None = None
        self._events: asyncio.Queue[Callable[[], Awaitable[None]]] = asyncio.Queue()
        self._task: asyncio.Task | None = None
        self._rebalancer: asyncio.Task | None = None
        self._rebalance_soon: asyncio.TimerHandle | None = None
        self._lost_session = False
        self._watchers: dict[object, Callable[..., object]] = {}

    # ------------------------------------------------------------ lifecycle
    @property
    def is_active(self) -> bool:
        return self.ctx is not None

    @property
    def epoch(self) -> int:
        return -1 if self.ctx is None else self.ctx.epoch.epoch

    def startup(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="controller-events")
        self.zk.on_state(self._on_session_state)
        self.enqueue(self._elect)

    async def shutdown(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        await self._resign(delete_znode=True)

    def enqueue(self, event: Callable[[], Awaitable[None]]) -> None:
        self._events.put_nowait(event)

    async def call(self, event: Callable[[], Awaitable[T]]) -> T:
        """Run ``event`` in the event task (after the events before it) and return its result."""
        fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()

        async def run() -> None:
            try:
                fut.set_result(await event())
            except Exception as e:
                fut.set_exception(e)

        self.enqueue(run)
        return await fut

    async def _run(self) -> None:
        while True:
            event = await self._events.get()
            try:
                await event()
            except ControllerMovedError as e:
                log.warning("controller %d lost its epoch (%s); resigning", self.broker_id, e)
                await self._resign(delete_znode=False)
                self.enqueue(self._elect)
            except KazooException as e:
                # Expected while ZooKeeper is away (an expired session, a lost connection): one
                # line with the cause, no traceback.
                log.warning("controller %d: an event failed on ZooKeeper: %s", self.broker_id, cause(e))
            except Exception:
                log.exception("controller event failed")

    def _watch(self, event: Callable[[], Awaitable[None]], key: object = None) -> Callable[..., object]:
        """The ZooKeeper watch that queues ``event``, one per ``key`` (default: the event): kazoo
        keeps a path's watchers in a set, so arming it again never doubles its events."""
        key = event if key is None else key
        watcher = self._watchers.get(key)
        if watcher is None:
            watcher = self._watchers[key] = self.zk.on_loop(lambda: self.enqueue(event))
        return watcher

    def _on_session_state(self, state: KazooState) -> None:
        if state == KazooState.LOST:
            self._lost_session = True
            self.enqueue(self._on_session_lost)
        elif state == KazooState.CONNECTED and self._lost_session:
            self._lost_session = False
            self.enqueue(self._elect)
        elif state == KazooState.CONNECTED:
            self.enqueue(self._on_reconnected)

    async def _on_reconnected(self) -> None:
        """Back within the session: kazoo fired every watch when the connection dropped, and a
        re-read that failed then left its watch unarmed; read everything watched again."""
        await self._elect()
        ctx = self.ctx
        if ctx is None:
            return
        await self._on_broker_change()
        await self._on_topic_change()
        for topic in sorted(ctx.assignments):
            await self._on_partition_modification(topic)
        await self._on_topic_deletion()

    async def _on_session_lost(self) -> None:
        if self.is_active:
            log.warning("controller %d lost its ZooKeeper session; resigning", self.broker_id)
        await self._resign(delete_znode=False)

    # ------------------------------------------------------------ election
    async def _elect(self) -> None:
        current = await self.zk.run(self.client.get_controller_id, self._watch(self._on_controller_change))
        if current is not None:
            self.active_controller_id = current
            if current != self.broker_id and self.is_active:
                await self._resign(delete_znode=False)
            if current != self.broker_id or self.is_active:
                return
        epoch = await self.zk.run(self.client.try_elect_controller, self.broker_id, self.clock.milliseconds())
        if epoch is None:
            self.active_controller_id = await self.zk.run(self.client.get_controller_id,
                                                          self._watch(self._on_controller_change))
            return
        self.active_controller_id = self.broker_id
        log.info("broker %d is the controller, epoch %d", self.broker_id, epoch.epoch)
        await self._on_failover(epoch)

    async def _on_controller_change(self) -> None:
        await self._elect()

    async def _resign(self, delete_znode: bool) -> None:
        ctx, channel = self.ctx, self.channel
        self.ctx = self.channel = None
        if self._rebalancer is not None:
            self._rebalancer.cancel()
            self._rebalancer = None
        if self._rebalance_soon is not None:
            self._rebalance_soon.cancel()
            self._rebalance_soon = None
        if channel is not None:
            await channel.close()
        if ctx is not None:
            log.info("controller %d resigns (epoch %d)", self.broker_id, ctx.epoch.epoch)
            if delete_znode:
                try:
                    await self.zk.run(self.client.resign_controller, ctx.epoch)
                except Exception:
                    pass

    async def _on_failover(self, epoch: ControllerEpoch) -> None:
        ctx = self.ctx = ControllerContext(epoch, published_offset=self.client.last_zxid)  # its election's
        self.channel = self.channel_factory()
        ctx.live_brokers = await self.zk.run(self.client.get_all_brokers, self._watch(self._on_broker_change))
        ctx.accounted = await self.zk.run(self.client.get_accounted_registrations)
        for b in ctx.live_brokers.values():
            self.channel.add_broker(b)
        topics = await self.zk.run(self.client.get_all_topics, self._watch(self._on_topic_change))
        for t in topics:
            await self._load_topic(t)
        ctx.leadership = await self.zk.run(self.client.get_partition_states, ctx.partitions())
        deletions = await self.zk.run(self.client.get_topic_deletions, self._watch(self._on_topic_deletion))
        # As Kafka's: first every broker learns the live brokers and the partitions as they are.
        first = self._batch()
        first.add_update_metadata(ctx.live_ids, ctx.partitions())
        self._send(first)
        batch = self._batch()
        new = [tp for tp in ctx.partitions() if tp not in ctx.leadership]
        await self._init_partitions(new, batch)
        await self._handle_unclean_starts(self._unaccounted_unclean_starts(), batch)
        await self._handle_lost_replicas(set(), batch, everything=True)
        for tp in ctx.partitions():
            if tp in ctx.leadership:
                batch.add_leader_and_isr([r for r in ctx.replicas(tp) if r in ctx.live_brokers], tp)
        for tp in ctx.partitions():  # reassignments a previous controller left ongoing
            await self._maybe_complete_reassignment(tp, batch)
        self._send(batch)
        await self._account_registrations()
        if deletions:
            await self._on_topic_deletion()
        if self.config.auto_leader_rebalance_enable:
            self._rebalancer = asyncio.get_running_loop().create_task(self._rebalance_periodically())

    def _batch(self) -> RequestBatch:
        return RequestBatch(self.broker_id, self.config.inter_broker_listener)

    def _send(self, batch: RequestBatch) -> None:
        ctx = self.ctx
        if ctx is not None and self.channel is not None:
            if batch.publishes_metadata:
                ctx.published_offset = max(ctx.published_offset, self.client.last_zxid)
            offset = ctx.published_offset
            batch.send(ctx, self.channel, self._on_stop_replica_response,
                       lambda b, r: self._on_metadata_applied(ctx, b, offset, r))

    def _on_metadata_applied(self, ctx: ControllerContext, broker: int, offset: int, response: Struct | None) -> None:
        """A broker applied the UpdateMetadata of ``offset``: where DescribeQuorum places it. It
        has caught up when nothing newer was published since, as a KRaft observer whose fetch
        reached the leader's end."""
        if not isinstance(response, UpdateMetadataResponse) or response.error_code != ErrorCode.NONE:
            return
        now = self.clock.milliseconds()
        prev = ctx.applied.get(broker, ReplicaProgress(broker))
        caught_up = now if offset >= ctx.published_offset else prev.last_caught_up_timestamp
        ctx.applied[broker] = ReplicaProgress(broker, max(offset, prev.log_end_offset), now, caught_up)

    def describe_quorum(self) -> QuorumDescription | None:
        """The control plane as a KRaft quorum (None unless this broker is the active controller):
        this controller the leader and only voter, at the offset it published; the other live
        brokers observers, at the offset of the last UpdateMetadata each applied."""
        ctx = self.ctx
        if ctx is None:
            return None
        now = self.clock.milliseconds()
        leader = ReplicaProgress(self.broker_id, ctx.published_offset, now, now)
        observers = [ctx.applied.get(b, ReplicaProgress(b)) for b in sorted(ctx.live_brokers) if b != self.broker_id]
        reg = ctx.live_brokers.get(self.broker_id)
        ep = None if reg is None else reg.endpoint(self.config.inter_broker_listener)
        endpoints = [] if ep is None else [(ep.listener, ep.host, ep.port)]
        return QuorumDescription(self.broker_id, ctx.epoch.epoch, ctx.published_offset, [leader], observers,
                                 {self.broker_id: endpoints})

    # ------------------------------------------------------------ topics
    async def _load_topic(self, topic: str) -> list[TopicPartition]:
        """Read (and watch) a topic's assignment into the context; returns partitions it did not have."""
        ctx = self.ctx
        assert ctx is not None
        a = await self.zk.run(self.client.get_topic_assignment, topic,
                              self._watch(lambda: self._on_partition_modification(topic), ("partitions", topic)))
        if a is None:
            return []
        if a.topic_id is None:  # a topic written by an older tool: give it an id, as Kafka does
            a.topic_id = uuid.uuid4()
            await self.zk.run(self.client.set_topic_assignment, a, ctx.epoch)
        old = ctx.assignments.get(topic)
        ctx.assignments[topic] = a
        return [TopicPartition(topic, p) for p in sorted(a.replicas) if old is None or p not in old.replicas]

    async def _on_topic_change(self) -> None:
        ctx = self.ctx
        if ctx is None:
            return
        topics = set(await self.zk.run(self.client.get_all_topics, self._watch(self._on_topic_change)))
        for gone in set(ctx.assignments) - topics:
            self._forget_topic(ctx, gone)
        new: list[TopicPartition] = []
        for t in sorted(topics - set(ctx.assignments)):
            new += await self._load_topic(t)
        if new:
            batch = self._batch()
            await self._init_partitions(new, batch)
            self._send(batch)

    def _forget_topic(self, ctx: ControllerContext, topic: str) -> None:
        ctx.remove_topic(topic)
        self._watchers.pop(("partitions", topic), None)  # a topic made again later gets a new one

    async def _on_partition_modification(self, topic: str) -> None:
        ctx = self.ctx
        if ctx is None or topic not in ctx.assignments:
            return
        new = await self._load_topic(topic)
        if new:
            batch = self._batch()
            await self._init_partitions(new, batch)
            self._send(batch)

    async def _init_partitions(self, tps: list[TopicPartition], batch: RequestBatch) -> None:
        """New partitions: the first live replica leads, the live replicas are the ISR."""
        ctx = self.ctx
        assert ctx is not None
        states: list[tuple[TopicPartition, LeaderAndIsr]] = []
        for tp in tps:
            live = [r for r in ctx.replicas(tp) if ctx.is_live(r)]
            if not live:
                log.error("partition %s has no live replica among %s; it stays without a leader", tp, ctx.replicas(tp))
                continue
            states.append((tp, LeaderAndIsr(live[0], 0, tuple(live), ctx.epoch.epoch)))
        if not states:
            return
        created = await self.zk.run(self.client.create_partition_states, states, ctx.epoch)
        for (tp, state), written in zip(states, created, strict=True):
            if written is None:  # already initialised (by a controller before us)
                written = await self.zk.run(self.client.get_partition_state, tp)
                if written is None:
                    continue
            ctx.leadership[tp] = written
            batch.add_leader_and_isr(list(state.isr), tp, is_new=True)

    async def _on_topic_deletion(self) -> None:
        ctx = self.ctx
        if ctx is None:
            return
        requested = await self.zk.run(self.client.get_topic_deletions, self._watch(self._on_topic_deletion))
        for topic in requested:
            if not self.config.delete_topic_enable or topic not in ctx.assignments:
                if not self.config.delete_topic_enable:
                    log.info("delete.topic.enable is false: dropping the request to delete %s", topic)
                await self.zk.run(self.client.drop_topic_deletion_request, topic)
                continue
            if topic in ctx.topics_to_delete:
                continue  # under way
            # As Kafka's TopicDeletionManager: every replica deletes its log (StopReplica with
            # deletion) before the znodes go; a replica on a dead broker waits for its return.
            ctx.topics_to_delete.add(topic)
            ctx.deletion_pending[topic] = {r for tp in ctx.partitions(topic) for r in ctx.replicas(tp)}
            batch = self._batch()
            batch.add_update_metadata(ctx.live_ids, ctx.partitions(topic))  # leader -2: being deleted
            self._add_deletions(topic, ctx.live_ids, batch)
            self._send(batch)
            if not ctx.deletion_pending[topic]:
                await self._complete_deletion(topic)

    def _add_deletions(self, topic: str, brokers: set[int], batch: RequestBatch) -> None:
        ctx = self.ctx
        assert ctx is not None
        for tp in ctx.partitions(topic):
            for r in ctx.replicas(tp):
                if r in brokers and r in ctx.deletion_pending.get(topic, ()):
                    batch.add_stop_replica(r, tp, delete=True)

    def _on_stop_replica_response(self, broker: int, deleted: set[str], response: Struct | None) -> None:
        if deleted and (response is None or response.error_code == ErrorCode.NONE):
            failed = set() if response is None else {
                e.topic_name for e in response.partition_errors if e.error_code != ErrorCode.NONE}
            self.enqueue(lambda: self._replicas_deleted(broker, deleted - failed))

    async def _replicas_deleted(self, broker: int, topics: set[str]) -> None:
        ctx = self.ctx
        if ctx is None:
            return
        for topic in topics:
            pending = ctx.deletion_pending.get(topic)
            if pending is not None and broker in pending:
                pending.discard(broker)
                if not pending:
                    await self._complete_deletion(topic)

    async def _complete_deletion(self, topic: str) -> None:
        ctx = self.ctx
        assert ctx is not None
        await self.zk.run(self.client.delete_topic_znodes, topic, ctx.epoch)
        self._forget_topic(ctx, topic)
        log.info("deleted topic %s", topic)

    # ------------------------------------------------------------ brokers
    async def _on_broker_change(self) -> None:
        ctx = self.ctx
        if ctx is None:
            return
        current = await self.zk.run(self.client.get_all_brokers, self._watch(self._on_broker_change))
        dead = {b for b in ctx.live_brokers if b not in current}
        bounced = {b for b, reg in current.items() if b in ctx.live_brokers and ctx.live_brokers[b].epoch != reg.epoch}
        new = {b for b in current if b not in ctx.live_brokers} | bounced
        if not dead and not new:
            return
        log.info("brokers changed: new %s, dead %s, bounced %s", sorted(new - bounced), sorted(dead), sorted(bounced))
        assert self.channel is not None
        for b in dead | bounced:
            ctx.live_brokers.pop(b, None)
            ctx.shutting_down.discard(b)
            self.channel.remove_broker(b)
        batch = self._batch()
        if dead | bounced:
            await self._handle_lost_replicas(dead | bounced, batch)
        await self._handle_unclean_starts({b for b in new if not current[b].clean_start}, batch)
        for b in new:
            ctx.live_brokers[b] = current[b]
            self.channel.add_broker(current[b])
        if new:
            # The new brokers learn the cluster before their replicas' LeaderAndIsr, as Kafka's.
            first = self._batch()
            first.add_update_metadata(new, ctx.partitions())
            first.add_update_metadata(ctx.live_ids, [])
            self._send(first)
            self._on_broker_startup(new, batch)
            await self._elect_offline(batch)
        batch.add_update_metadata(ctx.live_ids, [])
        self._send(batch)
        if new:
            await self._account_registrations()

    async def _handle_unclean_starts(self, unclean: set[int], batch: RequestBatch) -> None:
        """At eligible.leader.replicas.version 1, as Kafka's handleBrokerUncleanShutdown: a broker
        registering without a clean start may have lost records it acknowledged, so before it
        counts as live it leaves every ISR and ELR it is in (the last known leader stays)."""
        ctx = self.ctx
        assert ctx is not None
        if not unclean or not self.elr_enabled():
            return
        log.info("brokers %s started without a clean shutdown: they leave every ISR and ELR", sorted(unclean))
        for tp in [tp for tp, s in ctx.leadership.items()
                   if any(b in s.isr or b in s.eligible_leader_replicas for b in unclean)]:
            await self._update_state(tp, batch, self._elr_transition(
                await self._min_isr(tp.topic), lambda s: tuple(i for i in s.isr if i not in unclean),
                ctx.leadable_ids - unclean, unclean))

    def _unaccounted_unclean_starts(self) -> set[int]:
        """At failover: the live brokers whose registration has no clean start and is not the one
        the last controller dealt with. They registered while no controller was active (or it
        died before their event), so no controller has removed them from the ISRs and ELRs; until
        one does, none could have rejoined any. With no record at all (a new cluster, or the
        first controller of a version that keeps it), nothing tells an old unclean start from
        a new one: removing every broker that ever started uncleanly could empty whole ISRs,
        so none is taken for unhandled then."""
        ctx = self.ctx
        assert ctx is not None
        accounted = ctx.accounted
        if accounted is None:
            return set()
        return {b for b, reg in ctx.live_brokers.items() if not reg.clean_start and accounted.get(b) != reg.epoch}

    async def _account_registrations(self) -> None:
        """Record the live brokers' registrations as dealt with (after their ISR and ELR changes
        are written, so that a controller dying in between leaves them for the next one)."""
        ctx = self.ctx
        assert ctx is not None
        epochs = {**(ctx.accounted or {}), **{b: reg.epoch for b, reg in ctx.live_brokers.items()}}
        if epochs != ctx.accounted:
            await self.zk.run(self.client.set_accounted_registrations, epochs, ctx.epoch)
            ctx.accounted = epochs

    def _on_broker_startup(self, new: set[int], batch: RequestBatch) -> None:
        ctx = self.ctx
        assert ctx is not None
        for b in new:
            for tp in ctx.partitions_on_broker(b):
                if tp in ctx.leadership and tp.topic not in ctx.topics_to_delete:
                    batch.add_leader_and_isr([b], tp)
        for topic in ctx.topics_to_delete:  # replicas that were offline delete now
            self._add_deletions(topic, new, batch)

    async def _elect_offline(self, batch: RequestBatch) -> None:
        """Elect a leader for every partition whose leader is not live, now that brokers returned."""
        ctx = self.ctx
        assert ctx is not None
        offline = [tp for tp, s in ctx.leadership.items() if not ctx.is_live(s.leader)]
        await self._handle_lost_replicas(set(), batch, only=offline)

    async def _handle_lost_replicas(self, lost: set[int], batch: RequestBatch, everything: bool = False,
                                    only: list[TopicPartition] | None = None) -> None:
        """Partitions whose leader is gone get a new one from the ISR; brokers that are gone
        leave the ISR (the last member stays, so that it can lead again cleanly)."""
        ctx = self.ctx
        assert ctx is not None
        candidates = only if only is not None else [
            tp for tp, s in ctx.leadership.items()
            if everything or s.leader in lost or any(i in lost for i in s.isr)]
        for tp in candidates:
            if self.elr_enabled():
                await self._update_state(tp, batch, self._elr_transition(
                    await self._min_isr(tp.topic), lambda s: tuple(i for i in s.isr if i in ctx.live_brokers),
                    ctx.leadable_ids))
            else:
                await self._update_state(tp, batch, self._offline_transition)

    def _offline_transition(self, tp: TopicPartition, s: LeaderAndIsr, unclean: bool) -> LeaderAndIsr | None:
        ctx = self.ctx
        assert ctx is not None
        live = ctx.leadable_ids
        if ctx.is_live(s.leader):
            isr = tuple(i for i in s.isr if i in ctx.live_brokers)
            return None if isr == s.isr else s.new_leader(s.leader, isr, ctx.epoch.epoch)
        e = election.offline_partition_leader(ctx.replicas(tp), s.isr, live, unclean)
        if e is not None:
            if e.unclean:
                log.warning("unclean leader election for %s: %d leads, data may be lost", tp, e.leader)
            return s.new_leader(e.leader, e.isr, ctx.epoch.epoch)
        if s.leader == NO_LEADER:
            return None
        remaining = tuple(i for i in s.isr if i in ctx.live_brokers)
        keep = remaining or ((s.leader,) if s.leader in s.isr else s.isr[:1])
        log.error("partition %s has no live in-sync replica: it is offline (ISR %s)", tp, list(keep))
        return s.new_leader(NO_LEADER, keep, ctx.epoch.epoch)

    def _elr_transition(self, min_isr: int, target_isr: Callable[[LeaderAndIsr], tuple[int, ...]], live: set[int],
                        unclean_shutdown: Collection[int] = ()
                        ) -> Callable[[TopicPartition, LeaderAndIsr, bool], LeaderAndIsr | None]:
        """At eligible.leader.replicas.version 1: the partition's ISR becomes ``target_isr`` of its
        state, and its ELR, leader and last known leader follow Kafka 4.3's rules
        (``election.elr_change``; ``unclean_shutdown`` brokers are never eligible); the ISR may become empty. Any change bumps the leader epoch,
        as every state change the controller makes here does, so that the replicas take it."""
        def transition(tp: TopicPartition, s: LeaderAndIsr, unclean: bool) -> LeaderAndIsr | None:
            ctx = self.ctx
            assert ctx is not None
            before = election.ElrState(s.leader, s.isr, s.eligible_leader_replicas, s.last_known_elr,
                                       s.leader_recovery_state == 1)
            e = election.elr_change(ctx.replicas(tp), before, target_isr(s), live, min_isr, unclean,
                                    unclean_shutdown)
            if e == before:
                return None
            if e.recovering and not before.recovering:
                log.warning("unclean leader election for %s: %d leads, data may be lost", tp, e.leader)
            elif e.leader == NO_LEADER and s.leader != NO_LEADER:
                log.error("partition %s has no live in-sync or eligible replica: it is offline (ELR %s)", tp,
                          list(e.elr))
            return replace(s.new_leader(e.leader, e.isr, ctx.epoch.epoch), eligible_leader_replicas=e.elr,
                           last_known_elr=e.last_known_elr, leader_recovery_state=1 if e.recovering else 0)
        return transition

    async def _min_isr(self, topic: str) -> int:
        """The topic's min.insync.replicas, else the cluster-level dynamic one
        (/config/brokers/<default>), else the controller's own (a per-broker one is refused
        while ELR is on), capped at its replica count as its leader caps it."""
        v = (await self.zk.run(self.client.get_entity_config, "topics", topic)).get(MIN_ISR)
        if v is None or not v.strip().isdigit():
            v = (await self.zk.run(self.client.get_entity_config, BROKER_CONFIG_ENTITY, DEFAULT_ENTITY)).get(MIN_ISR)
        min_isr = int(v) if v is not None and v.strip().isdigit() else self.config.min_insync_replicas
        ctx = self.ctx
        assert ctx is not None
        replicas = ctx.assignments[topic].replicas if topic in ctx.assignments else {}
        return max(1, min(min_isr, max((len(r) for r in replicas.values()), default=1)))

    def min_isr_altered(self, topic: str | None) -> None:
        """A topic's min.insync.replicas changed, or (None) the cluster-level one was set, even
        to its value: the eligible leader replicas it guarded no longer hold (told by the
        broker's config change notifications)."""
        self.enqueue(lambda: self._clear_elr(topic))

    async def _clear_elr(self, topic: str | None) -> None:
        """At eligible.leader.replicas.version 1, empty the ELR and the last known ELR of the
        topic's partitions (None: every partition), as Kafka's ClearElrRecord. Here the leader
        epoch moves too: that is what makes the replicas take a new state (and its partition epoch)."""
        ctx = self.ctx
        if ctx is None or not self.elr_enabled():
            return
        batch = self._batch()
        for tp in ctx.partitions(topic):
            s = ctx.leadership.get(tp)
            if s is not None and (s.eligible_leader_replicas or s.last_known_elr):
                await self._update_state(tp, batch, self._without_elr)
        self._send(batch)

    def _without_elr(self, _tp: TopicPartition, s: LeaderAndIsr, _unclean: bool) -> LeaderAndIsr | None:
        ctx = self.ctx
        assert ctx is not None
        if not (s.eligible_leader_replicas or s.last_known_elr):
            return None
        return replace(s.new_leader(s.leader, s.isr, ctx.epoch.epoch), eligible_leader_replicas=(), last_known_elr=())

    async def _unclean_enabled(self, topic: str) -> bool:
        configs = await self.zk.run(self.client.get_entity_config, "topics", topic)
        v = configs.get("unclean.leader.election.enable")
        return self.config.unclean_leader_election_enable if v is None else v.strip().lower() == "true"

    async def _update_state(self, tp: TopicPartition, batch: RequestBatch,
                            transition: Callable[[TopicPartition, LeaderAndIsr, bool], LeaderAndIsr | None]) -> None:
        """Apply ``transition`` to the partition's state with a conditional write, re-reading the
        znode when its version moved; on success tell the live replicas."""
        ctx = self.ctx
        assert ctx is not None
        unclean: bool | None = None
        for _ in range(MAX_STATE_WRITE_ATTEMPTS):
            s = ctx.leadership.get(tp)
            if s is None:
                return
            new = transition(tp, s, False)
            if not ctx.is_live((new or s).leader):  # leaderless unless an out-of-sync replica may lead
                if unclean is None:
                    unclean = await self._unclean_enabled(tp.topic)
                if unclean:
                    new = transition(tp, s, True)
            if new is None:
                return
            if (new.eligible_leader_replicas or new.last_known_elr) and not self.elr_enabled():
                # Left from eligible.leader.replicas.version 1: with ELR off they no longer hold
                # (the HW may pass min ISR), so each partition's next change forgets them, as Kafka's.
                new = replace(new, eligible_leader_replicas=(), last_known_elr=())
            written = await self.zk.run(self.client.update_partition_state, tp, new, ctx.epoch)
            if written is not None:
                ctx.leadership[tp] = written
                batch.add_leader_and_isr([r for r in ctx.replicas(tp) if r in ctx.live_brokers], tp)
                return
            fresh = await self.zk.run(self.client.get_partition_state, tp)
            if fresh is None:
                return
            ctx.leadership[tp] = fresh
        log.error("could not update the state of %s after %d attempts", tp, MAX_STATE_WRITE_ATTEMPTS)

    # ------------------------------------------------------------ partition reassignment
    # Kafka's (KIP-455): the replicas become the target plus the original ones (adding and
    # removing recorded in the topic's znode), the new ones catch up as followers, and once the
    # whole target is in the ISR a target replica leads and the removed ones are deleted.
    async def alter_reassignments(self, wanted: dict[TopicPartition, list[int] | None],
                                  allow_rf_change: bool = True) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        """AlterPartitionReassignments: the target replicas of each partition (None cancels);
        without ``allow_rf_change`` (v1, KIP-860) a target must keep the replication factor."""
        return await self.call(lambda: self._alter_reassignments(wanted, allow_rf_change))

    async def _alter_reassignments(self, wanted: dict[TopicPartition, list[int] | None], allow_rf_change: bool
                                   ) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        ctx = self.ctx
        if ctx is None:
            return {tp: (ErrorCode.NOT_CONTROLLER, None) for tp in wanted}
        out: dict[TopicPartition, tuple[ErrorCode, str | None]] = {}
        batch = self._batch()
        for tp, target in wanted.items():
            a = ctx.assignments.get(tp.topic)
            if a is None or tp.partition not in a.replicas or tp not in ctx.leadership \
                    or tp.topic in ctx.topics_to_delete:
                out[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
                continue
            adding = a.adding.get(tp.partition, [])
            original = [r for r in a.replicas[tp.partition] if r not in adding]
            if target is None:
                if not adding and not a.removing.get(tp.partition):
                    out[tp] = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, f"No ongoing reassignment for {tp}.")
                    continue
                target = original
            elif not target or len(set(target)) != len(target):
                out[tp] = (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"The proposed assignment {target} is empty or has duplicate brokers.")
                continue
            elif any(b not in ctx.live_brokers for b in target):
                out[tp] = (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"Replica assignment has brokers that are not alive. Replica list: {target}, "
                           f"live broker list: {sorted(ctx.live_brokers)}")
                continue
            elif not allow_rf_change and len(target) != len(original):
                out[tp] = (ErrorCode.INVALID_REPLICATION_FACTOR,
                           f"The replication factor is changed from {len(original)} to {len(target)}")
                continue
            await self._start_reassignment(tp, original, target, batch)
            out[tp] = (ErrorCode.NONE, None)
        self._send(batch)
        return out

    async def _write_assignment(self, topic: str) -> None:
        ctx = self.ctx
        assert ctx is not None
        await self.zk.run(self.client.set_topic_assignment, ctx.assignments[topic], ctx.epoch)

    async def _start_reassignment(self, tp: TopicPartition, original: list[int], target: list[int],
                                  batch: RequestBatch) -> None:
        ctx = self.ctx
        assert ctx is not None
        a = ctx.assignments[tp.topic]
        adding = [r for r in target if r not in original]
        removing = [r for r in original if r not in target]
        a.replicas[tp.partition] = target + removing
        for field_, value in ((a.adding, adding), (a.removing, removing)):
            if value:
                field_[tp.partition] = value
            else:
                field_.pop(tp.partition, None)
        await self._write_assignment(tp.topic)
        log.info("reassigning %s from %s to %s", tp, original, target)
        if adding or removing:
            # A new leader epoch tells every replica, the new ones too, who leads.
            await self._update_state(tp, batch, lambda _tp, st, _u: st.new_leader(st.leader, st.isr, ctx.epoch.epoch))
        await self._maybe_complete_reassignment(tp, batch)

    async def _maybe_complete_reassignment(self, tp: TopicPartition, batch: RequestBatch) -> None:
        ctx = self.ctx
        assert ctx is not None
        a = ctx.assignments.get(tp.topic)
        s = ctx.leadership.get(tp)
        if a is None or s is None:
            return
        removing = a.removing.get(tp.partition, [])
        if not removing and not a.adding.get(tp.partition):
            return
        target = [r for r in a.replicas[tp.partition] if r not in removing]
        if not all(r in s.isr for r in target):
            return  # the new replicas are still catching up
        leader = s.leader if s.leader in target and ctx.is_live(s.leader) else \
            next((r for r in target if ctx.is_live(r) and r in s.isr), None)
        if leader is None:
            return
        isr = tuple(i for i in s.isr if i in target)
        await self._update_state(tp, batch, await self._completion_transition(tp, leader, isr))
        for r in removing:
            if r in ctx.live_brokers:
                batch.add_stop_replica(r, tp, delete=True)
        a.replicas[tp.partition] = target
        a.adding.pop(tp.partition, None)
        a.removing.pop(tp.partition, None)
        await self._write_assignment(tp.topic)
        batch.add_leader_and_isr([r for r in target if r in ctx.live_brokers], tp)
        log.info("reassignment of %s completed: replicas %s, leader %d", tp, target, leader)

    async def _completion_transition(self, tp: TopicPartition, leader: int, isr: tuple[int, ...]
                                     ) -> Callable[[TopicPartition, LeaderAndIsr, bool], LeaderAndIsr | None]:
        """A reassignment's last step: ``leader`` leads, the ISR restricted to the target. At
        eligible.leader.replicas.version 1 that ISR goes through the ELR rule as any of Kafka's
        partition changes (its min ISR counts the replicas before the step, removed ones included,
        and a removed replica may stay listed, as Kafka's builder leaves it); with a leader, no
        last known leader."""
        ctx = self.ctx
        assert ctx is not None
        if not self.elr_enabled():
            return lambda _tp, st, _u: st.new_leader(leader, isr, ctx.epoch.epoch)
        min_isr = await self._min_isr(tp.topic)
        return lambda _tp, st, _u: replace(
            st.new_leader(leader, isr, ctx.epoch.epoch), last_known_elr=(),
            eligible_leader_replicas=election.eligible_leader_replicas(st.isr, isr, st.eligible_leader_replicas,
                                                                       min_isr))

    async def list_reassignments(self, tps: list[TopicPartition] | None
                                 ) -> dict[TopicPartition, tuple[list[int], list[int], list[int]]] | None:
        """ListPartitionReassignments: replicas, adding and removing of each ongoing one (None
        when this broker is not the controller). An event as in Kafka, so a controller that has
        just taken over answers from the state it loaded, not from half of it."""
        return await self.call(lambda: self._list_reassignments(tps))

    async def _list_reassignments(self, tps: list[TopicPartition] | None
                                  ) -> dict[TopicPartition, tuple[list[int], list[int], list[int]]] | None:
        ctx = self.ctx
        if ctx is None:
            return None
        out = {}
        for tp in (tps if tps is not None else ctx.partitions()):
            a = ctx.assignments.get(tp.topic)
            if a is None or tp.partition not in a.replicas:
                continue
            adding, removing = a.adding.get(tp.partition, []), a.removing.get(tp.partition, [])
            if adding or removing:
                out[tp] = (list(a.replicas[tp.partition]), list(adding), list(removing))
        return out

    # ------------------------------------------------------------ preferred leaders
    async def elect_leaders(self, election_type: int, partitions: list[TopicPartition] | None
                            ) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        """ElectLeaders: the outcome per partition (all partitions when ``partitions`` is None)."""
        return await self.call(lambda: self._elect_leaders(election_type, partitions))

    async def _elect_leaders(self, election_type: int, partitions: list[TopicPartition] | None
                             ) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        ctx = self.ctx
        if ctx is None:
            return {tp: (ErrorCode.NOT_CONTROLLER, None) for tp in partitions or []}
        out: dict[TopicPartition, tuple[ErrorCode, str | None]] = {}
        batch = self._batch()
        for tp in (partitions if partitions is not None else ctx.partitions()):
            s = ctx.leadership.get(tp)
            if s is None or tp.topic in ctx.topics_to_delete:
                out[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
                continue
            replicas = ctx.replicas(tp)
            if self.elr_enabled():
                out[tp] = await self._elect_with_elr(election_type, tp, s, batch)
                continue
            if election_type == PREFERRED:
                if s.leader == replicas[0]:
                    out[tp] = (ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition.")
                    continue
                e = election.preferred_replica_leader(replicas, s.isr, ctx.leadable_ids)
                failed = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
            else:
                if ctx.is_live(s.leader):
                    out[tp] = (ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition.")
                    continue
                e = election.offline_partition_leader(replicas, s.isr, ctx.leadable_ids, unclean_enabled=True)
                failed = ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
            if e is None:
                out[tp] = (failed, f"Failed to elect leader for partition {tp} under strategy "
                                   f"{'Preferred' if election_type == PREFERRED else 'Offline'}"
                                   "PartitionLeaderElectionStrategy")
                continue
            await self._update_state(tp, batch, lambda _tp, st, _u, e=e: st.new_leader(e.leader, e.isr, ctx.epoch.epoch))
            elected = ctx.leadership[tp].leader == e.leader
            out[tp] = (ErrorCode.NONE, None) if elected else (failed, "The partition state changed meanwhile.")
        self._send(batch)
        return out

    async def _elect_with_elr(self, election_type: int, tp: TopicPartition, s: LeaderAndIsr, batch: RequestBatch
                              ) -> tuple[ErrorCode, str | None]:
        """ElectLeaders at eligible.leader.replicas.version 1: PREFERRED may take the preferred
        replica from the ELR when the ISR is empty; UNCLEAN goes through the ISR, the ELR and the
        last known leader before any out-of-sync replica (``election.elr_change``)."""
        ctx = self.ctx
        assert ctx is not None
        replicas = ctx.replicas(tp)
        led_already = s.leader == replicas[0] if election_type == PREFERRED else ctx.is_live(s.leader)
        if led_already:
            return ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."
        before = election.ElrState(s.leader, s.isr, s.eligible_leader_replicas, s.last_known_elr,
                                   s.leader_recovery_state == 1)
        if election_type == PREFERRED:
            failed = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
            e = election.preferred_elr_leader(replicas, before, ctx.leadable_ids)
        else:
            failed = ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
            e = election.elr_change(replicas, before, tuple(i for i in s.isr if i in ctx.live_brokers),
                                    ctx.leadable_ids, await self._min_isr(tp.topic), unclean_enabled=True)
        if e is None or e.leader == NO_LEADER:
            return failed, (f"Failed to elect leader for partition {tp} under strategy "
                            f"{'Preferred' if election_type == PREFERRED else 'Offline'}PartitionLeaderElectionStrategy")
        await self._update_state(tp, batch, lambda _tp, st, _u, e=e: replace(
            st.new_leader(e.leader, e.isr, ctx.epoch.epoch), eligible_leader_replicas=e.elr,
            last_known_elr=e.last_known_elr, leader_recovery_state=1 if e.recovering else 0))
        elected = ctx.leadership[tp].leader == e.leader
        return (ErrorCode.NONE, None) if elected else (failed, "The partition state changed meanwhile.")

    async def _rebalance_periodically(self) -> None:
        """auto.leader.rebalance.enable: every leader.imbalance.check.interval.seconds, a broker
        leading too few of the partitions it is preferred for gets them back."""
        while True:
            await asyncio.sleep(self.config.leader_imbalance_check_interval_s)
            self.enqueue(self._check_leader_imbalance)

    def _on_isr_expanded(self, tp: TopicPartition, old_isr: tuple[int, ...], new_isr: tuple[int, ...]) -> None:
        """A partition's preferred replica rejoined its ISR while another broker leads it (after a
        broker's return, or after every broker re-registered at once when ZooKeeper came back and
        the first one took every leadership): check the imbalance soon rather than after up to
        leader.imbalance.check.interval.seconds. The check keeps its threshold."""
        ctx = self.ctx
        if ctx is None or not self.config.auto_leader_rebalance_enable or self._rebalance_soon is not None:
            return
        preferred = ctx.replicas(tp)[:1]
        if not preferred or preferred[0] in old_isr or preferred[0] not in new_isr \
                or ctx.leadership[tp].leader == preferred[0]:
            return
        self._rebalance_soon = asyncio.get_running_loop().call_later(
            REJOIN_REBALANCE_DELAY_S, self._rebalance_after_rejoin)

    def _rebalance_after_rejoin(self) -> None:
        self._rebalance_soon = None
        self.enqueue(self._check_leader_imbalance)

    async def _check_leader_imbalance(self) -> None:
        ctx = self.ctx
        if ctx is None:
            return
        moves: list[TopicPartition] = []
        for broker in ctx.leadable_ids:
            preferred_here = [tp for tp in ctx.partitions() if tp in ctx.leadership and ctx.replicas(tp)[:1] == [broker]
                              and tp.topic not in ctx.topics_to_delete]
            if not preferred_here:
                continue
            not_led = [tp for tp in preferred_here if ctx.leadership[tp].leader != broker]
            if len(not_led) * 100 > self.config.leader_imbalance_per_broker_percentage * len(preferred_here):
                moves += [tp for tp in not_led if broker in ctx.leadership[tp].isr]
        if moves:
            log.info("leader imbalance: moving %d partition(s) back to their preferred leaders", len(moves))
            await self._elect_leaders(PREFERRED, moves)

    # ------------------------------------------------------------ requests from brokers
    async def alter_partition(self, req: apq.AlterPartitionRequest, version: int) -> aps.AlterPartitionResponse:
        try:
            return await self.call(lambda: self._alter_partition(req, version))
        except KazooException as e:
            # This controller lost ZooKeeper mid-change (its session expired): as Kafka's, a
            # controller that cannot write answers NOT_CONTROLLER, and the leader asks the next one.
            log.info("AlterPartition from broker %d not applied: %r", req.broker_id, e)
            return aps.AlterPartitionResponse(error_code=ErrorCode.NOT_CONTROLLER, topics=[])

    async def _alter_partition(self, req: apq.AlterPartitionRequest, version: int) -> aps.AlterPartitionResponse:
        ctx = self.ctx
        if ctx is None:
            return aps.AlterPartitionResponse(error_code=ErrorCode.NOT_CONTROLLER, topics=[])
        if req.broker_epoch != -1 and req.broker_epoch != ctx.broker_epoch(req.broker_id):
            return aps.AlterPartitionResponse(error_code=ErrorCode.STALE_BROKER_EPOCH, topics=[])
        by_id = {a.topic_id: t for t, a in ctx.assignments.items() if a.topic_id is not None}
        batch = self._batch()
        topics = []
        for t in req.topics:
            name = by_id.get(t.topic_id) if version >= 2 else t.topic_name
            parts = []
            for p in t.partitions:
                parts.append(await self._alter_one(req.broker_id, name, p, version, batch))
            topics.append(aps.TopicData(topic_name=t.topic_name if version < 2 else "", topic_id=t.topic_id,
                                        partitions=parts))
        self._send(batch)
        return aps.AlterPartitionResponse(error_code=ErrorCode.NONE, topics=topics)

    async def _alter_one(self, broker_id: int, topic: str | None, p: apq.PartitionData, version: int,
                         batch: RequestBatch) -> aps.PartitionData:
        ctx = self.ctx
        assert ctx is not None

        def answer(code: ErrorCode, s: LeaderAndIsr | None = None) -> aps.PartitionData:
            if s is None:
                return aps.PartitionData(partition_index=p.partition_index, error_code=code)
            return aps.PartitionData(partition_index=p.partition_index, error_code=code, leader_id=s.leader,
                                     leader_epoch=s.leader_epoch, isr=list(s.isr),
                                     leader_recovery_state=s.leader_recovery_state, partition_epoch=s.partition_epoch)

        tp = TopicPartition(topic or "", p.partition_index)
        s = ctx.leadership.get(tp) if topic is not None else None
        if s is None or tp.topic in ctx.topics_to_delete:
            return answer(ErrorCode.UNKNOWN_TOPIC_ID if version >= 2 and topic is None
                          else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if s.leader != broker_id:
            return answer(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if p.leader_epoch < s.leader_epoch:
            return answer(ErrorCode.FENCED_LEADER_EPOCH)
        new_isr = tuple(b.broker_id for b in p.new_isr_with_epochs) if version >= 3 else tuple(p.new_isr)
        if p.leader_epoch == s.leader_epoch and new_isr == s.isr and \
                p.leader_recovery_state == s.leader_recovery_state:
            return answer(ErrorCode.NONE, s)  # already applied (a retry)
        if p.partition_epoch != s.partition_epoch or p.leader_epoch > s.leader_epoch:
            return answer(ErrorCode.INVALID_UPDATE_VERSION)
        stale = [b.broker_id for b in p.new_isr_with_epochs
                 if b.broker_epoch != -1 and b.broker_epoch != ctx.broker_epoch(b.broker_id)] if version >= 3 else []
        ineligible = [b for b in new_isr if not ctx.is_live(b) or b not in ctx.replicas(tp)] + stale
        if ineligible or broker_id not in new_isr:
            return answer(ErrorCode.INELIGIBLE_REPLICA if version >= 1 else ErrorCode.OPERATION_NOT_ATTEMPTED)
        proposed = LeaderAndIsr(s.leader, s.leader_epoch, new_isr, ctx.epoch.epoch, s.partition_epoch,
                                p.leader_recovery_state)
        if self.elr_enabled():
            elr = election.eligible_leader_replicas(s.isr, new_isr, s.eligible_leader_replicas,
                                                    await self._min_isr(tp.topic))
            proposed = replace(proposed, eligible_leader_replicas=elr)
        written = await self.zk.run(self.client.update_partition_state, tp, proposed, ctx.epoch)
        if written is None:
            fresh = await self.zk.run(self.client.get_partition_state, tp)
            if fresh is not None:
                ctx.leadership[tp] = fresh
            return answer(ErrorCode.INVALID_UPDATE_VERSION)
        ctx.leadership[tp] = written
        log.info("ISR of %s is now %s (asked by its leader %d)", tp, list(new_isr), broker_id)
        self._on_isr_expanded(tp, s.isr, new_isr)
        batch.add_update_metadata(ctx.live_ids, [tp])
        # The answer is the ISR change; a reassignment it completes comes as LeaderAndIsr.
        await self._maybe_complete_reassignment(tp, batch)
        return answer(ErrorCode.NONE, written)

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> csr.ControlledShutdownResponse:
        return await self.call(lambda: self._controlled_shutdown(broker_id, broker_epoch))

    async def _controlled_shutdown(self, broker_id: int, broker_epoch: int) -> csr.ControlledShutdownResponse:
        ctx = self.ctx
        if ctx is None:
            return csr.ControlledShutdownResponse(error_code=ErrorCode.NOT_CONTROLLER, remaining_partitions=[])
        if broker_id not in ctx.live_brokers:
            return csr.ControlledShutdownResponse(error_code=ErrorCode.BROKER_NOT_AVAILABLE, remaining_partitions=[])
        if broker_epoch != -1 and broker_epoch != ctx.broker_epoch(broker_id):
            return csr.ControlledShutdownResponse(error_code=ErrorCode.STALE_BROKER_EPOCH, remaining_partitions=[])
        ctx.shutting_down.add(broker_id)
        log.info("broker %d is shutting down; moving its leaderships away", broker_id)
        batch = self._batch()
        for tp in ctx.partitions_on_broker(broker_id):
            if len(ctx.replicas(tp)) <= 1 or tp not in ctx.leadership:
                continue
            if self.elr_enabled():
                await self._update_state(tp, batch, self._elr_transition(
                    await self._min_isr(tp.topic), lambda s: tuple(i for i in s.isr if i != broker_id),
                    ctx.leadable_ids))
            else:
                await self._update_state(tp, batch, self._shutdown_transition(broker_id))
            if ctx.leadership[tp].leader != broker_id:
                batch.add_stop_replica(broker_id, tp, delete=False)
        self._send(batch)
        remaining = [tp for tp in ctx.partitions_led_by(broker_id) if len(ctx.replicas(tp)) > 1]
        return csr.ControlledShutdownResponse(
            error_code=ErrorCode.NONE,
            remaining_partitions=[csr.RemainingPartition(topic_name=tp.topic, partition_index=tp.partition)
                                  for tp in sorted(remaining)])

    def _shutdown_transition(self, broker_id: int
                             ) -> Callable[[TopicPartition, LeaderAndIsr, bool], LeaderAndIsr | None]:
        def transition(tp: TopicPartition, s: LeaderAndIsr, _unclean: bool) -> LeaderAndIsr | None:
            ctx = self.ctx
            assert ctx is not None
            if s.leader == broker_id:
                e = election.controlled_shutdown_leader(ctx.replicas(tp), s.isr, ctx.live_ids, ctx.shutting_down)
                return None if e is None else s.new_leader(e.leader, e.isr, ctx.epoch.epoch)
            if broker_id in s.isr and len(s.isr) > 1:
                return s.new_leader(s.leader, tuple(i for i in s.isr if i != broker_id), ctx.epoch.epoch)
            return None
        return transition
