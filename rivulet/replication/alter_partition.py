"""The leader's side of ISR changes (Kafka's AlterPartitionManager): proposals from the
partitions are batched into AlterPartition requests to the controller, found in the metadata
cache. The controller's answer (the committed state, or the error that refused it) goes back
to the proposing partition; a missing controller, a lost connection or NOT_CONTROLLER is
retried after ``retry_backoff_ms``, never reported."""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from typing import Callable, Mapping

from rivulet.common.logs import RateLimitFilter
from rivulet.common.types import TopicPartition
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.protocol.messages import alter_partition_request as apq
from rivulet.replication.link import BrokerLinks
from rivulet.replication.partition import AlterPartitionCallback, LeaderAndIsr

log = logging.getLogger(__name__)
# A controller that stays unreachable is logged once per interval while the proposals are retried.
log.addFilter(RateLimitFilter(level=logging.INFO))

_RETRIABLE = {ErrorCode.NOT_CONTROLLER, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.STALE_BROKER_EPOCH}


@dataclass(slots=True)
class _Pending:
    tp: TopicPartition
    topic_id: uuid.UUID
    proposed: LeaderAndIsr
    on_result: AlterPartitionCallback
    broker_epochs: Mapping[int, int]


class ControllerAlterPartitionManager:
    """An ``AlterPartitionManager`` that sends to the controller over the inter-broker listener."""

    def __init__(self, links: BrokerLinks, broker_epoch: Callable[[], int], retry_backoff_ms: int = 100) -> None:
        """``links``: to the controller, found in its metadata cache; ``broker_epoch``: this
        broker's registration epoch (KIP-903), sent with each proposal."""
        self.links = links
        self.broker_epoch = broker_epoch
        self.retry_backoff_ms = retry_backoff_ms
        self._queue: dict[TopicPartition, _Pending] = {}
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="alter-partition")

    def submit(self, tp: TopicPartition, topic_id: uuid.UUID, proposed: LeaderAndIsr,
               on_result: AlterPartitionCallback, broker_epochs: Mapping[int, int]) -> None:
        # A newer proposal for the same partition replaces one not sent yet.
        self._queue[tp] = _Pending(tp, topic_id, proposed, on_result, broker_epochs)
        self._wakeup.set()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        await self.links.close()

    async def _run(self) -> None:
        while True:
            if not self._queue:
                self._wakeup.clear()
                await self._wakeup.wait()
            batch, self._queue = self._queue, {}
            try:
                retry = await self._send(batch)
            except asyncio.CancelledError:
                raise
            except (ConnectionError, OSError, TimeoutError, ApiError) as e:
                log.info("AlterPartition to the controller failed (%s); retrying", e)
                await self.links.close()  # its one connection, to the controller
                retry = list(batch.values())
            for p in retry:
                self._queue.setdefault(p.tp, p)
            if retry:
                await asyncio.sleep(self.retry_backoff_ms / 1000)

    async def _send(self, batch: dict[TopicPartition, _Pending]) -> list[_Pending]:
        cid = self.links.cache.controller_id if self.links.cache is not None else None
        if cid is None:
            raise ConnectionError("no controller known")
        conn = await self.links.connection(cid)
        v = conn.version_for(apq.AlterPartitionRequest.API_KEY, 3)
        by_topic: dict[str, list[apq.PartitionData]] = {}
        ids: dict[str, uuid.UUID] = {}
        own_epoch = self.broker_epoch()
        for p in batch.values():
            ids[p.tp.topic] = p.topic_id
            pr = p.proposed
            epochs = [own_epoch if b == self.links.node_id else p.broker_epochs.get(b, -1) for b in pr.isr]
            by_topic.setdefault(p.tp.topic, []).append(apq.PartitionData(
                partition_index=p.tp.partition, leader_epoch=pr.leader_epoch, new_isr=list(pr.isr),
                new_isr_with_epochs=[apq.BrokerState(broker_id=b, broker_epoch=e) for b, e in zip(pr.isr, epochs)],
                leader_recovery_state=0, partition_epoch=pr.partition_epoch))
        req = apq.AlterPartitionRequest(broker_id=self.links.node_id, broker_epoch=own_epoch, topics=[
            apq.TopicData(topic_name=t, topic_id=ids[t], partitions=ps) for t, ps in by_topic.items()])
        resp = await conn.send(req, v)
        top = ErrorCode(resp.error_code)
        if top != ErrorCode.NONE:
            if top in _RETRIABLE:
                log.debug("AlterPartition to broker %s: %s; retrying", cid, top.name)
                return list(batch.values())
            for p in batch.values():
                p.on_result(top)
            return []
        names = {tid: t for t, tid in ids.items()}
        answered: set[TopicPartition] = set()
        retry = []
        for t in resp.topics:
            topic = names.get(t.topic_id, "") if v >= 2 else t.topic_name
            for r in t.partitions:
                tp = TopicPartition(topic, r.partition_index)
                p = batch.get(tp)
                if p is None:
                    continue
                answered.add(tp)
                err = ErrorCode(r.error_code)
                if err in _RETRIABLE:
                    retry.append(p)
                elif err != ErrorCode.NONE:
                    p.on_result(err)
                else:
                    p.on_result(LeaderAndIsr(r.leader_id, r.leader_epoch, list(r.isr), r.partition_epoch))
        retry.extend(p for tp, p in batch.items() if tp not in answered)
        return retry
