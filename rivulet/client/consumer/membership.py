"""ConsumerMembership: group membership with KIP-848's protocol (``group.protocol=consumer``),
as Java's ConsumerMembershipManager and its heartbeat request manager.

The broker assigns. A member keeps one member id for its life, heartbeats its subscription
and the partitions it owns with ConsumerGroupHeartbeat, and reconciles towards what the broker
sends: partitions taken away are committed and revoked first (on_revoke), then the new ones
are added (on_assign), and the next heartbeat, sent at once, tells the broker it is done.
UNKNOWN_MEMBER_ID and FENCED_MEMBER_EPOCH mean its partitions are lost (on_lost) and it joins
again at epoch 0 under the same id. Discovery, commits (the member epoch in place of the
generation) and fetching committed offsets are the classic coordinator's.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

from rivulet.client import core
from rivulet.client import errors as E
from rivulet.client.config import ConsumerConfig
from rivulet.client.client import NET_ERRORS, KafkaClient, wait_event
from rivulet.client.consumer.coordinator import STABLE, UNJOINED, ConsumerCoordinator, GroupConsumer, RebalanceNeeded
from rivulet.client.consumer.subscription import SubscriptionState
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages.consumer_group_heartbeat_request import ConsumerGroupHeartbeatRequest

log = logging.getLogger("rivulet.consumer")

class ConsumerMembership(ConsumerCoordinator):
    def __init__(self, consumer: GroupConsumer, client: KafkaClient, subs: SubscriptionState,
                 conf: ConsumerConfig) -> None:
        super().__init__(consumer, client, subs, conf, [])
        self.member_id = str(uuid.uuid4())
        self.remote_assignor: str | None = conf["group.remote.assignor"]
        self.heartbeat_interval = 5.0  # until the broker says
        self._next_beat = 0.0  # monotonic time the next heartbeat is due
        self._ack_now = False

    # ------------------------------------------------------------ joining
    def need_rejoin(self) -> bool:
        """Asked by the consumer's main task on each step."""
        return self.subs.partitions_auto_assigned and (self.generation < 0 or self.rejoin_needed)

    async def ensure_active_group(self) -> None:
        """Called by the consumer's main task (holding its rebalance lock): join at epoch 0, or
        again after the membership was lost; the heartbeat task does the rest."""
        await self.ensure_coordinator_ready()
        self._start_heartbeat()
        owned = self.subs.assigned_partitions()
        if self.partitions_lost and owned:
            await self.consumer.partitions_gone(owned, lost=True)
        self.partitions_lost = False
        if self.need_rejoin() and not self.closing:
            self.rejoin_needed = False
            try:
                await self._heartbeat_once(joining=True)
            except RebalanceNeeded as e:
                log.debug("group %s: join restarts: %s", self.group_id, e)
                self.rejoin_needed = True

    # ------------------------------------------------------------ heartbeats
    async def _heartbeat_loop(self) -> None:
        while not self.closing:
            await self._until_next_beat()
            self._ack_now = False
            if self.closing:
                return
            if self._poll_timed_out(time.monotonic()) or self.coordinator is None or self.generation < 0:
                self._next_beat = time.monotonic() + self.heartbeat_interval
                continue
            try:
                async with self.consumer.rebalancing:
                    await self._heartbeat_once()
            except asyncio.CancelledError:
                raise
            except RebalanceNeeded as e:
                log.debug("heartbeat: %s", e)
            except Exception as e:
                log.debug("heartbeat failed: %s", e)

    async def _until_next_beat(self) -> None:
        """Sleep until the next heartbeat is due, or an acknowledgement is (``_ack_now``). A
        wake-up without one recomputes the due time: the join's response, sent outside this
        loop, gave the interval the broker wants."""
        while not self._ack_now and not self.closing:
            delay = self._next_beat - time.monotonic()
            if delay <= 0:
                return
            self._hb_wake.clear()
            await wait_event(self._hb_wake, delay)

    def _request(self, epoch: int) -> ConsumerGroupHeartbeatRequest:
        owned: dict[str, list[int]] = {}
        for t, p in self.subs.assigned_partitions():
            owned.setdefault(t, []).append(p)
        ids = {t: tm.topic_id for t in owned if (tm := self.client.cluster.topics.get(t)) is not None}
        return core.consumer_group_heartbeat_request(
            self.group_id, self.member_id, epoch, self.instance_id, self.rack, self.rebalance_timeout_ms,
            sorted(self.subs.subscription), self.remote_assignor,
            [(ids[t], sorted(ps)) for t, ps in owned.items() if ids.get(t) is not None])

    async def _heartbeat_once(self, joining: bool = False) -> None:
        epoch = 0 if joining or self.generation < 0 else self.generation
        self._next_beat = time.monotonic() + self.heartbeat_interval
        resp = await self._send(self._request(epoch))
        code = resp.error_code
        if code:
            self._on_error(ErrorCode(code), resp.error_message)
            return
        self.last_heartbeat_ok = time.monotonic()
        self.generation = resp.member_epoch
        interval = max(resp.heartbeat_interval_ms, 100) / 1000
        if interval != self.heartbeat_interval:
            self.heartbeat_interval = interval
            self._next_beat = time.monotonic() + interval
            self._hb_wake.set()  # the loop waits for the interval it knew
        self.state = STABLE
        if resp.assignment is not None:
            await self._reconcile([(tp.topic_id, list(tp.partitions)) for tp in resp.assignment.topic_partitions])

    def _on_error(self, code: ErrorCode, message: str | None) -> None:
        name = code.name
        if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH):
            log.info("group %s: heartbeat says %s; joining again", self.group_id, name)
            self.reset_generation(False, name)  # the member id stays
        elif code in core.COORDINATOR_ERRORS:
            self.coordinator_dead(name)
        elif code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            if self.generation < 0:
                self.request_rejoin(name)  # the join is tried again on the next step
        elif code in core.HEARTBEAT_FATAL_ERRORS:
            self.fatal = E.KafkaError(code, f"ConsumerGroupHeartbeat failed: {name}: {message or ''}".rstrip(": "),
                                      fatal=True)
            self.consumer.report(self.fatal)
        else:
            log.warning("group %s: heartbeat error %s %s", self.group_id, name, message or "")

    async def _reconcile(self, assignment: list[tuple[uuid.UUID, list[int]]]) -> None:
        names = await self._names([t for t, _ in assignment])
        target = {(names[t], p) for t, ps in assignment if t in names for p in ps}
        owned = set(self.subs.assignment)
        revoked, added = sorted(owned - target), sorted(target - owned)
        if revoked:
            await self.consumer.commit_before_revoke(revoked)
            await self.consumer.partitions_gone(revoked, lost=False)
        if added or not owned:
            await self.consumer.partitions_assigned(added, incremental=True)
        if revoked or added:
            self._ack_now = True  # tell the broker at once what we own now
            self._hb_wake.set()
            log.info("group %s epoch %d: member %s owns %d partition(s)", self.group_id, self.generation,
                     self.member_id, len(self.subs.assignment))

    async def _names(self, topic_ids: list[uuid.UUID]) -> dict[uuid.UUID, str]:
        return await self.client.topic_names(topic_ids, self.subs.subscription)

    # ------------------------------------------------------------ leaving
    async def maybe_leave_group(self, reason: str) -> None:
        """A heartbeat at epoch -1 (-2 for a static member, which keeps its place)."""
        if self.coordinator is not None and self.generation >= 0:
            epoch = core.STATIC_LEAVE_EPOCH if self.instance_id is not None else core.LEAVE_EPOCH
            try:
                await self._send(self._request(epoch), timeout=min(self.request_timeout, 5.0))
            except (RebalanceNeeded, *NET_ERRORS) as e:
                log.debug("leaving the group failed: %s", e)
        self.generation = -1
        self.state = UNJOINED
