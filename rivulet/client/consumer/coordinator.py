"""ConsumerCoordinator: group membership (classic protocol), heartbeats and offset commits.

The life of a member, as in Java's AbstractCoordinator/ConsumerCoordinator:

1. ensure_coordinator_ready: FindCoordinator until a broker names the group's coordinator.
2. ensure_active_group: JoinGroup (repeated once with the member id the broker hands out,
   KIP-394), then SyncGroup; the leader runs the assignor over every member's subscription.
   Eager assignors revoke everything before joining; cooperative-sticky keeps its partitions,
   revokes only what the new assignment takes away, and rejoins once to let them move.
3. A heartbeat task keeps the membership alive every heartbeat.interval.ms. Its answers drive
   rebalances: REBALANCE_IN_PROGRESS asks to rejoin; ILLEGAL_GENERATION and UNKNOWN_MEMBER_ID
   mean the membership is gone (partitions lost, rejoin; the member id is dropped for the
   latter); NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, a broken connection, or no successful
   heartbeat within session.timeout.ms mark the coordinator dead, and it is looked up again.
   It also watches max.poll.interval.ms: an application that stops polling leaves the group
   (LeaveGroup), and rejoins on its next poll.
4. Commits (OffsetCommit) carry the generation and member id; OffsetFetch reads them back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Protocol, TypeVar

from rivulet.client import core
from rivulet.client import errors as E
from rivulet.client.config import ConsumerConfig
from rivulet.client.consumer.assignors import Assignor, Member
from rivulet.client.client import NET_ERRORS, KafkaClient, cancel_and_wait, wait_event
from rivulet.client.consumer.subscription import OffsetAndMetadata, SubscriptionState
from rivulet.protocol.consumer_protocol import (
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from rivulet.common.types import TopicPartition as TP
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages.join_group_response import JoinGroupResponseMember
from rivulet.protocol.schema import Request, Struct
from rivulet.protocol.errors import ApiError as ProtocolError

log = logging.getLogger("rivulet.consumer")
R = TypeVar("R", bound=Struct)  # a request's response message

_COORDINATOR_ERRORS = core.COORDINATOR_ERRORS

UNJOINED, REBALANCING, STABLE = "unjoined", "rebalancing", "stable"


class RebalanceNeeded(Exception):
    """The join or sync has to start over (after whatever fixed the cause)."""


class GroupConsumer(Protocol):
    """What group membership (ConsumerCoordinator, ConsumerMembership) asks of the consumer it
    serves. The consumer hands one over at construction, so the membership neither imports the
    consumer nor reads its private state."""

    @property
    def rebalancing(self) -> asyncio.Lock:
        """Held while the membership changes the assignment; close() waits for it."""

    def wake(self) -> None:
        """Let the consumer's main task look again (coordinator, joins, positions)."""

    def fence(self, tps: Iterable[TP]) -> None:
        """Hand out no more records of these partitions: others may own them already."""

    async def partitions_assigned(self, tps: list[TP], incremental: bool) -> None:
        """Take on partitions (on_assign first); ``incremental`` adds to what is owned."""

    async def partitions_gone(self, tps: list[TP], lost: bool) -> None:
        """Give partitions up: on_lost when the membership was lost, else on_revoke."""

    async def commit_before_revoke(self, partitions: list[TP] | None = None) -> None:
        """With auto-commit, commit the positions of partitions about to be given up (None: all)."""

    def report(self, err: E.KafkaError) -> None:
        """An error event for the application's next poll()."""

    def in_poll(self) -> bool:
        """A poll() is running now."""

    def last_poll(self) -> float:
        """When poll() was last called (monotonic seconds), for max.poll.interval.ms."""


class ConsumerCoordinator:
    def __init__(self, consumer: GroupConsumer, client: KafkaClient, subs: SubscriptionState,
                 conf: ConsumerConfig, assignors: list[Assignor]) -> None:
        self.consumer = consumer
        self.client = client
        self.subs = subs
        group_id = conf["group.id"]
        assert group_id is not None  # the consumer makes one only with a group.id
        self.group_id = group_id
        self.instance_id: str | None = conf["group.instance.id"]
        self.session_timeout_ms: int = conf["session.timeout.ms"]
        self.rebalance_timeout_ms: int = conf["max.poll.interval.ms"]
        self.heartbeat_interval = conf["heartbeat.interval.ms"] / 1000
        self.max_poll_interval = conf["max.poll.interval.ms"] / 1000
        self.backoff = conf["retry.backoff.ms"] / 1000
        self.request_timeout = conf["request.timeout.ms"] / 1000
        self.rack: str | None = conf["client.rack"]
        self.assignors = assignors
        self.cooperative = bool(assignors) and all(a.cooperative for a in assignors)
        self.coordinator: int | None = None
        self.generation = -1
        self.member_id = ""
        self.protocol: str | None = None
        self.leader_id = ""
        self.state = UNJOINED
        self.rejoin_needed = True
        self.rejoin_reason = ""
        self.partitions_lost = False
        self.poll_expired = False
        self.last_heartbeat_ok = time.monotonic()
        self.metadata_snapshot: dict[str, int] = {}
        self._hb_task: asyncio.Task | None = None
        self._hb_wake = asyncio.Event()
        self.fatal: E.KafkaError | None = None
        self.closing = False
        self.discoveries = 0  # coordinators found so far (1 + rediscoveries)

    # ------------------------------------------------------------ coordinator discovery
    def coordinator_unknown(self) -> bool:
        """Asked by the consumer's main task before it (re)joins."""
        return self.coordinator is None

    async def ensure_coordinator_ready(self, deadline: float | None = None) -> int:
        """Called by ensure_active_group, commits and offset fetches: FindCoordinator until found."""
        while self.coordinator is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise E.KafkaException(E.local("_TIMED_OUT", "timed out looking up the group coordinator"))
            try:
                found = await self.client.coordinator(self.group_id, core.GROUP, deadline)
            except ProtocolError as e:
                if core.action(e.code) == core.Action.FAIL:
                    raise E.KafkaException(E.broker_error(e.code, e.message)) from None
                log.debug("FindCoordinator: %s", e)  # still none after request.timeout.ms: go on
                continue
            self.coordinator = found.node_id
            self.discoveries += 1
            self.last_heartbeat_ok = time.monotonic()
            log.debug("group %s: coordinator is broker %d", self.group_id, found.node_id)
        return self.coordinator

    def coordinator_dead(self, why: str) -> None:
        """Called on a failed request or heartbeat: forget the coordinator, look it up again."""
        if self.coordinator is not None:
            log.info("group %s: coordinator %d is unavailable (%s); looking it up again", self.group_id,
                     self.coordinator, why)
            self.client.close_connection(self.coordinator, "group")
            self.coordinator = None
            self.consumer.wake()

    async def _send(self, req: Request[R], timeout: float | None = None) -> R:
        node = self.coordinator
        if node is None:
            raise RebalanceNeeded("coordinator unknown")
        try:
            return await self.client.send(node, req, kind="group", timeout=timeout)
        except NET_ERRORS as e:
            self.coordinator_dead(str(e) or type(e).__name__)
            raise RebalanceNeeded(str(e)) from e

    # ------------------------------------------------------------ membership
    def request_rejoin(self, reason: str) -> None:
        """Called by the consumer (subscription or pattern matches changed) and the heartbeats."""
        if not self.rejoin_needed:
            log.debug("group %s: rejoin requested: %s", self.group_id, reason)
        self.rejoin_needed = True
        self.rejoin_reason = reason
        self.consumer.wake()

    def reset_generation(self, drop_member_id: bool, reason: str) -> None:
        """The membership is gone: what we own is lost, and we join again."""
        self.generation = -1
        if drop_member_id:
            self.member_id = ""
        self.state = UNJOINED
        if self.subs.assignment:
            self.partitions_lost = True
            # Others may own them already: hand out nothing more of them.
            self.consumer.fence(self.subs.assignment)
        self.request_rejoin(reason)

    def need_rejoin(self) -> bool:
        """Asked by the consumer's main task on each step."""
        if not self.subs.partitions_auto_assigned:
            return False
        return self.rejoin_needed or self._metadata_changed()

    def _metadata_changed(self) -> bool:
        if self.state != STABLE:
            return False
        cluster = self.client.cluster.topics
        topics = self.subs.group_subscription if self.leader_id == self.member_id else self.subs.subscription
        for t in topics | set(self.metadata_snapshot):
            tm = cluster.get(t)
            n = tm.num_partitions if tm is not None and not tm.error else 0
            if n != self.metadata_snapshot.get(t, 0):
                if tm is None:
                    continue  # not fetched yet; do not read absence as deletion
                self.request_rejoin(f"partitions of {t} changed ({self.metadata_snapshot.get(t, 0)} -> {n})")
                return True
        return False

    def _snapshot(self, topics: set[str]) -> dict[str, int]:
        out = {}
        for t in topics:
            tm = self.client.cluster.topics.get(t)
            if tm is not None and not tm.error and tm.num_partitions:
                out[t] = tm.num_partitions
        return out

    async def ensure_active_group(self) -> None:
        """Join (and sync) until a stable membership or until something else needs doing."""
        await self.ensure_coordinator_ready()
        self._start_heartbeat()
        while self.need_rejoin() and not self.closing:
            if self.coordinator is None:
                await self.ensure_coordinator_ready()
            await self._on_join_prepare()
            try:
                assigned = await self._join_and_sync()
            except RebalanceNeeded as e:
                log.debug("group %s: rebalance restarts: %s", self.group_id, e)
                if self.coordinator is None:
                    await self.ensure_coordinator_ready()
                continue
            await self._on_join_complete(assigned)

    async def _on_join_prepare(self) -> None:
        owned = self.subs.assigned_partitions()
        if self.partitions_lost and owned:
            self.partitions_lost = False
            await self.consumer.partitions_gone(owned, lost=True)
        elif not self.cooperative and owned and self.generation >= 0:
            # Eager: commit and give everything up before the group reshuffles it.
            await self.consumer.commit_before_revoke()
            await self.consumer.partitions_gone(owned, lost=False)
        self.partitions_lost = False
        self.state = REBALANCING

    async def _join_and_sync(self) -> list[TP]:
        # Cleared before the JoinGroup so that a rejoin asked for meanwhile is not lost; until
        # the SyncGroup answers, any failure (a refusal, a lost connection, a timeout) leaves it
        # set, as Java's rejoinNeeded stays set until the sync succeeds. (A broker killed between
        # the two once left it clear: the consumer never joined again, heartbeat nor fetched.)
        self.rejoin_needed = False
        try:
            return await self._join_and_sync_once()
        except BaseException:
            self.rejoin_needed = True
            raise

    async def _join_and_sync_once(self) -> list[TP]:
        topics = sorted(self.subs.subscription)
        owned = sorted(self.subs.assignment)
        protocols = []
        for a in self.assignors:
            meta = encode_subscription(Subscription(topics, a.user_data(self.generation), owned,
                                                    self.generation, self.rack))
            protocols.append((a.name, meta))
        req = core.join_group_request(self.group_id, self.member_id, self.instance_id, self.session_timeout_ms,
                                      self.rebalance_timeout_ms, protocols, self.rejoin_reason or None)
        resp = await self._send(req, timeout=self.rebalance_timeout_ms / 1000 + self.request_timeout)
        code = resp.error_code
        if code:
            if code == ErrorCode.MEMBER_ID_REQUIRED:
                self.member_id = resp.member_id
                raise RebalanceNeeded("member id assigned")
            if code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
                raise RebalanceNeeded("unknown member id")
            if code in _COORDINATOR_ERRORS:
                self.coordinator_dead(ErrorCode(code).name)
                raise RebalanceNeeded(ErrorCode(code).name)
            if code in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                        ErrorCode.ILLEGAL_GENERATION):
                await asyncio.sleep(self.backoff)
                raise RebalanceNeeded(ErrorCode(code).name)
            err = E.broker_error(code, f"JoinGroup failed: {ErrorCode(code).name}")
            if code in (ErrorCode.FENCED_INSTANCE_ID, ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                        ErrorCode.GROUP_MAX_SIZE_REACHED, ErrorCode.INVALID_SESSION_TIMEOUT,
                        ErrorCode.GROUP_AUTHORIZATION_FAILED, ErrorCode.INVALID_GROUP_ID,
                        ErrorCode.UNSUPPORTED_VERSION):
                self.fatal = E.KafkaError(code, err.str(), fatal=True)
            raise E.KafkaException(err)
        self.generation = resp.generation_id
        self.member_id = resp.member_id
        self.protocol = resp.protocol_name
        self.leader_id = resp.leader
        assignments: dict[str, bytes] = {}
        if resp.leader == resp.member_id and not resp.skip_assignment:
            assignments = await self._assign(resp.protocol_name, resp.members)
        sreq = core.sync_group_request(self.group_id, self.generation, self.member_id, self.instance_id,
                                       self.protocol, assignments)
        sresp = await self._send(sreq, timeout=self.rebalance_timeout_ms / 1000 + self.request_timeout)
        code = sresp.error_code
        if code:
            if code == ErrorCode.REBALANCE_IN_PROGRESS:
                raise RebalanceNeeded("rebalance in progress")
            if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
                self.reset_generation(code == ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode(code).name)
                raise RebalanceNeeded(ErrorCode(code).name)
            if code in _COORDINATOR_ERRORS:
                self.coordinator_dead(ErrorCode(code).name)
                raise RebalanceNeeded(ErrorCode(code).name)
            raise E.KafkaException(E.broker_error(code, f"SyncGroup failed: {ErrorCode(code).name}"))
        assigned, _ = decode_assignment(sresp.assignment)
        return assigned

    async def _assign(self, protocol: str, members_raw: list[JoinGroupResponseMember]) -> dict[str, bytes]:
        assignor = next((a for a in self.assignors if a.name == protocol), None)
        if assignor is None:
            raise E.KafkaException(E.local("_UNKNOWN_PROTOCOL", f"group chose unknown assignor {protocol!r}"))
        members = []
        for m in members_raw:
            try:
                sub = decode_subscription(bytes(m.metadata))
            except Exception as e:
                log.warning("group %s: member %s sent unreadable metadata: %s", self.group_id, m.member_id, e)
                sub = Subscription([])
            members.append(Member(m.member_id, m.group_instance_id, sub))
        topics = {t for m in members for t in m.subscription.topics}
        self.subs.group_subscribe(topics)
        self.client.add_topics(topics)
        try:
            await self.client.fetch_metadata(topics | self.client.wanted_topics, allow_auto_create=False)
        except NET_ERRORS as e:
            log.debug("metadata before assignment failed: %s", e)
        partitions = self._snapshot(topics)
        result = assignor.assign(partitions, members)
        log.debug("group %s generation %d: %s assigned %s", self.group_id, self.generation, protocol, result)
        return {mid: encode_assignment(tps) for mid, tps in result.items()}

    async def _on_join_complete(self, assigned: list[TP]) -> None:
        self.state = STABLE
        self.last_heartbeat_ok = time.monotonic()
        self._hb_wake.set()
        topics = self.subs.group_subscription if self.leader_id == self.member_id else self.subs.subscription
        self.metadata_snapshot = self._snapshot(topics)
        assigned_set = set(assigned)
        if self.cooperative:
            owned = set(self.subs.assignment)
            revoked = sorted(owned - assigned_set)
            added = sorted(assigned_set - owned)
            if revoked:
                await self.consumer.commit_before_revoke(revoked)
                await self.consumer.partitions_gone(revoked, lost=False)
                # The partitions we let go can now move: one more round hands them over.
                self.request_rejoin("partitions revoked in a cooperative rebalance")
            await self.consumer.partitions_assigned(added, incremental=True)
        else:
            await self.consumer.partitions_assigned(sorted(assigned_set), incremental=False)
        log.info("group %s generation %d: member %s assigned %d partition(s)", self.group_id, self.generation,
                 self.member_id, len(self.subs.assignment))

    # ------------------------------------------------------------ heartbeats
    def _start_heartbeat(self) -> None:
        if self._hb_task is None or self._hb_task.done():
            self._hb_task = asyncio.get_running_loop().create_task(self._heartbeat_loop())

    async def _heartbeat_loop(self) -> None:
        while not self.closing:
            self._hb_wake.clear()
            await wait_event(self._hb_wake, self.heartbeat_interval)
            if self.closing:
                return
            now = time.monotonic()
            if self._poll_timed_out(now):
                continue
            if self.state != STABLE or self.coordinator is None or self.generation < 0:
                continue
            if now - self.last_heartbeat_ok > self.session_timeout_ms / 1000:
                self.coordinator_dead("no heartbeat answered within session.timeout.ms")
                continue
            try:
                await self._heartbeat_once()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.debug("heartbeat failed: %s", e)

    def poll_resumed(self) -> bool:
        """The application polls again: a max.poll.interval.ms expiry is over. True when there
        was one (the consumer's loop then rejoins)."""
        if not self.poll_expired:
            return False
        self.poll_expired = False
        return True

    def _poll_timed_out(self, now: float) -> bool:
        c = self.consumer
        if self.poll_expired or c.in_poll() or self.generation < 0:
            return self.poll_expired
        if now - c.last_poll() > self.max_poll_interval:
            log.warning("group %s: max.poll.interval.ms (%d ms) exceeded: poll() was not called in time; "
                        "leaving the group", self.group_id, int(self.max_poll_interval * 1000))
            self.poll_expired = True
            c.report(E.local("_MAX_POLL_EXCEEDED",
                              f"Application maximum poll interval ({int(self.max_poll_interval * 1000)}ms) "
                              f"exceeded by {int((now - c.last_poll() - self.max_poll_interval) * 1000)}ms"))
            asyncio.get_running_loop().create_task(self._leave_after_poll_timeout())
            return True
        return False

    async def _leave_after_poll_timeout(self) -> None:
        self.consumer.fence(self.subs.assignment)
        await self.maybe_leave_group("consumer poll timeout has expired")
        self.reset_generation(True, "poll timeout expired")

    async def _heartbeat_once(self) -> None:
        req = core.heartbeat_request(self.group_id, self.generation, self.member_id, self.instance_id)
        gen = self.generation
        try:
            resp = await self._send(req)
        except RebalanceNeeded:
            return
        code = resp.error_code
        if code == 0:
            self.last_heartbeat_ok = time.monotonic()
            return
        if gen != self.generation:
            return  # answered for a generation we already left behind
        name = ErrorCode(code).name
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            self.last_heartbeat_ok = time.monotonic()
            self.request_rejoin("group is rebalancing")
        elif code in (ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID):
            log.info("group %s: heartbeat says %s; rejoining", self.group_id, name)
            self.reset_generation(code == ErrorCode.UNKNOWN_MEMBER_ID, name)
        elif code in _COORDINATOR_ERRORS or code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            self.coordinator_dead(name)
        elif code == ErrorCode.FENCED_INSTANCE_ID:
            self.fatal = E.KafkaError(code, "another consumer with this group.instance.id joined", fatal=True)
            self.consumer.report(self.fatal)
        else:
            log.warning("group %s: heartbeat error %s", self.group_id, name)

    async def maybe_leave_group(self, reason: str) -> None:
        """LeaveGroup, unless static (a static member keeps its place across restarts)."""
        if self.coordinator is not None and self.member_id and self.instance_id is None and self.generation >= 0:
            try:
                await self._send(core.leave_group_request(self.group_id, self.member_id, reason),
                                 timeout=min(self.request_timeout, 5.0))
            except (RebalanceNeeded, *NET_ERRORS, ProtocolError) as e:
                log.debug("LeaveGroup failed: %s", e)
        self.generation = -1
        self.member_id = ""
        self.state = UNJOINED

    async def close(self) -> None:
        """Called by the consumer's close(): stop heartbeating and leave the group."""
        self.closing = True
        await cancel_and_wait(self._hb_task)

    # ------------------------------------------------------------ offsets
    async def commit(self, offsets: dict[TP, OffsetAndMetadata], retry_until: float | None = None,
                     retry: bool = True) -> None:
        """OffsetCommit; waits for a coordinator until ``retry_until`` (monotonic), if given, and
        retries coordinator moves until then unless ``retry`` is false (asynchronous commits)."""
        if not offsets:
            return
        while True:
            try:
                await self.ensure_coordinator_ready(retry_until)
                await self._commit_once(offsets)
                return
            except RebalanceNeeded as e:
                if not retry or retry_until is None or time.monotonic() >= retry_until:
                    raise E.KafkaException(E.local("_TRANSPORT", f"commit failed: {e}")) from None
                await asyncio.sleep(self.backoff)

    async def _commit_once(self, offsets: dict[TP, OffsetAndMetadata]) -> None:
        # A member commits with its generation even while the group prepares a rebalance (the
        # broker accepts that, and it is how revoked partitions' offsets get saved).
        member = self.generation >= 0 and self.subs.partitions_auto_assigned
        req = core.offset_commit_request(
            self.group_id, offsets, self.generation if member else -1, self.member_id if member else "",
            self.instance_id if member else None)
        res = core.read_offset_commit(await self._send(req))
        for tp in res.ok:
            if tp in offsets:
                self.subs.committed(tp, offsets[tp])
        first_error = res.first_error()
        if not first_error:
            log.debug("group %s: committed %s (generation %d)", self.group_id,
                      {f"{t}-{p}": om.offset for (t, p), om in offsets.items()}, self.generation if member else -1)
            return
        code = first_error
        if code in _COORDINATOR_ERRORS or code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            self.coordinator_dead(ErrorCode(code).name)
            raise RebalanceNeeded(ErrorCode(code).name)
        if code in (ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.GROUP_ID_NOT_FOUND):
            # GROUP_ID_NOT_FOUND (OffsetCommit v9+): the group is gone, and the member id with it.
            self.reset_generation(code != ErrorCode.ILLEGAL_GENERATION, ErrorCode(code).name)
        elif code == ErrorCode.REBALANCE_IN_PROGRESS:
            self.request_rejoin("commit during rebalance")
        raise E.KafkaException(E.broker_error(code, f"OffsetCommit failed: {ErrorCode(code).name}"))

    async def fetch_committed(self, partitions: list[TP], deadline: float | None = None
                              ) -> dict[TP, OffsetAndMetadata | None]:
        """Called by the consumer's updateFetchPositions and committed(): OffsetFetch."""
        req = core.offset_fetch_request(self.group_id, partitions, require_stable=True)
        while True:
            try:
                await self.ensure_coordinator_ready(deadline)
                resp = await self._send(req)
            except RebalanceNeeded:
                if deadline is not None and time.monotonic() >= deadline:
                    raise E.KafkaException(E.local("_TIMED_OUT", "timed out fetching committed offsets")) from None
                await asyncio.sleep(self.backoff)
                continue
            res = core.read_offset_fetch(resp)
            code = res.errors.get(TP("", -1), 0)
            retry = code in _COORDINATOR_ERRORS or code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            if code in _COORDINATOR_ERRORS:
                self.coordinator_dead(ErrorCode(code).name)
            out: dict[TP, OffsetAndMetadata | None] = {}
            if not code:
                for tp, pcode in res.errors.items():
                    if pcode == ErrorCode.UNSTABLE_OFFSET_COMMIT:
                        retry = True
                    elif pcode != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                        raise E.KafkaException(E.broker_error(pcode, "OffsetFetch failed"))
                out.update(res.ok)
            elif not retry:
                raise E.KafkaException(E.broker_error(code, "OffsetFetch failed"))
            if not retry:
                return out
            if deadline is not None and time.monotonic() >= deadline:
                raise E.KafkaException(E.local("_TIMED_OUT", "timed out fetching committed offsets"))
            await asyncio.sleep(self.backoff)
