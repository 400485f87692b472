"""ShareMembership: a share consumer's membership of its share group (KIP-932), as Java's
ShareMembershipManager and its heartbeat request manager.

The member picks its id (a UUID, kept for life) and heartbeats with ShareGroupHeartbeat: at
epoch 0 with its subscription, later with its epoch (and the subscription again when it
changed). Members share partitions, so there is nothing to revoke: each answer's assignment
is taken as it is and handed to the fetcher. UNKNOWN_MEMBER_ID and FENCED_MEMBER_EPOCH mean
joining again at epoch 0; epoch -1 leaves. The coordinator is found, and found again, by the
client's ``send_to_coordinator``, as for the other groups.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from rivulet.client import core
from rivulet.client import errors as E
from rivulet.client.client import NET_ERRORS, KafkaClient, cancel_and_wait, wait_event
from rivulet.common.types import TopicPartition as TP
from rivulet.protocol.errors import ApiError, ErrorCode

log = logging.getLogger("rivulet.consumer")


class ShareMembership:
    def __init__(self, client: KafkaClient, group_id: str, member_id: str, rack: str | None,
                 on_assignment: Callable[[set[TP]], None], on_fatal: Callable[[E.KafkaError], None]) -> None:
        self.client = client
        self.group_id = group_id
        self.rack = rack
        self.member_id = member_id
        self.epoch = 0
        self.subscription: list[str] = []
        self._sub_sent: list[str] | None = None   # the subscription the broker has from us
        self.assignment: set[TP] = set()
        self.heartbeat_interval = 5.0  # until the broker says
        self.on_assignment = on_assignment
        self.on_fatal = on_fatal
        self.fatal: E.KafkaError | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.closing = False

    def subscribe(self, topics: list[str]) -> None:
        """Called by AIOShareConsumer.subscribe."""
        self.subscription = sorted(set(topics))
        self.fatal = None
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._loop())
        self._wake.set()

    async def unsubscribe(self) -> None:
        """Called by AIOShareConsumer.unsubscribe: leave the group."""
        self.subscription = []
        await self._stop()
        await self.leave()

    async def _stop(self) -> None:
        t, self._task = self._task, None
        await cancel_and_wait(t)

    async def _loop(self) -> None:
        while not self.closing and self.fatal is None:
            self._wake.clear()
            try:
                await self._heartbeat()
            except asyncio.CancelledError:
                raise
            except (ApiError, *NET_ERRORS) as e:
                log.debug("share group %s: heartbeat failed: %s", self.group_id, e)
                self.heartbeat_interval = min(self.heartbeat_interval, self.client.retry_backoff * 10)
            await wait_event(self._wake, self.heartbeat_interval)

    async def _heartbeat(self) -> None:
        if not self.subscription:
            return
        joining = self.epoch == 0
        topics = self.subscription if joining or self.subscription != self._sub_sent else None
        req = core.share_group_heartbeat_request(self.group_id, self.member_id, self.epoch, self.rack, topics)
        started = time.monotonic()
        resp = await self.client.send_to_coordinator(self.group_id, core.GROUP, req, lambda r: r.error_code)
        code = resp.error_code
        if code:
            self._on_error(ErrorCode(code), resp.error_message)
            return
        if topics is not None:
            self._sub_sent = topics
        self.epoch = resp.member_epoch
        self.heartbeat_interval = max(resp.heartbeat_interval_ms, 100) / 1000
        log.debug("share group %s: member %s epoch %d (%.0f ms)", self.group_id, self.member_id, self.epoch,
                  (time.monotonic() - started) * 1000)
        if resp.assignment is not None:
            wanted = [(tp.topic_id, list(tp.partitions)) for tp in resp.assignment.topic_partitions]
            names = await self.client.topic_names([t for t, _ in wanted], self.subscription)
            self.assignment = {(names[t], p) for t, ps in wanted if t in names for p in ps}
            self.on_assignment(self.assignment)

    def _on_error(self, code: ErrorCode, message: str | None) -> None:
        if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH):
            log.info("share group %s: heartbeat says %s; joining again", self.group_id, code.name)
            self.epoch = 0
            self._wake.set()
        elif code in core.HEARTBEAT_FATAL_ERRORS:
            self.fatal = E.KafkaError(code, f"ShareGroupHeartbeat failed: {code.name}: {message or ''}".rstrip(": "),
                                      fatal=True)
            self.on_fatal(self.fatal)
        else:
            log.warning("share group %s: heartbeat error %s %s", self.group_id, code.name, message or "")

    async def leave(self) -> None:
        """Epoch -1: the group gives this member's partitions to the others at once."""
        if self.epoch > 0:
            req = core.share_group_heartbeat_request(self.group_id, self.member_id, core.LEAVE_EPOCH, self.rack, None)
            try:
                await self.client.send_to_coordinator(self.group_id, core.GROUP, req, lambda r: r.error_code,
                                                      deadline=time.monotonic() + 5.0)
            except (ApiError, *NET_ERRORS) as e:
                log.debug("leaving share group %s failed: %s", self.group_id, e)
        self.epoch = 0
        self._sub_sent = None
        self.assignment = set()
        self.on_assignment(set())

    async def close(self) -> None:
        """Called by AIOShareConsumer.close: leave the group."""
        self.closing = True
        await self._stop()
        await self.leave()
