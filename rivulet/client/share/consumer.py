"""AIOShareConsumer: a member of a share group (KIP-932), as Java's ShareConsumerImpl, with
confluent-kafka's ShareConsumer calls (the blocking ``rivulet.ShareConsumer`` runs it).

``poll`` returns a batch of acquired records. With ``share.acknowledgement.mode=implicit``
(the default) the next ``poll``, ``commit_sync``, ``commit_async`` or ``close`` accepts the
whole previous batch; with ``explicit`` the application acknowledges each record
(``acknowledge``: ACCEPT, RELEASE, REJECT or RENEW) before it polls again. Acknowledgements
ride on the next ShareFetch, or go alone with ShareAcknowledge from the commits and ``close``.
Membership is ``ShareMembership``'s, fetching the ``ShareFetcher``'s.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable

from rivulet.client import errors as E
from rivulet.client.client import KafkaClient, wait_event
from rivulet.client.config import ClientConf, ConfigValue, resolve
from rivulet.client.share.fetcher import AckResult, ShareFetcher
from rivulet.client.share.membership import ShareMembership
from rivulet.client.share.session import Acknowledgements
from rivulet.common.types import AcknowledgeType
from rivulet.client.types import Message, ShareMessage, TopicPartition
from rivulet.common.types import TopicPartition as TP

log = logging.getLogger("rivulet.consumer")

AckCallback = Callable[[dict[TopicPartition, set[int]], E.KafkaException | None], None]


def _state_error(reason: str) -> E.KafkaException:
    return E.KafkaException(E.local("_STATE", reason))


class AIOShareConsumer:
    def __init__(self, conf: ClientConf | None = None, *, dispatch_callbacks: bool = True,
                 **kwargs: ConfigValue) -> None:
        c = resolve(conf, "consumer", kwargs)
        if not c["group.id"]:
            raise E.ConfigException("group.id is required by a share consumer")
        self.conf = c
        self.explicit = c["share.acknowledgement.mode"] == "explicit"
        self.client = KafkaClient(c)
        self.error_cb: Callable | None = c["error_cb"]
        # The member id is the client's own, as in KIP-932: the broker never assigns one.
        member_id = str(uuid.uuid4())
        self.fetcher = ShareFetcher(self.client, c["group.id"], member_id, c, self._report)
        self.membership = ShareMembership(self.client, c["group.id"], member_id, c["client.rack"] or None,
                                          self.fetcher.assign, self._report)
        self.on_acknowledgement: AckCallback | None = None
        # Whether poll and the commits run the callback themselves (the blocking facade runs
        # it on the application's thread instead).
        self.dispatch_callbacks = dispatch_callbacks
        self._batch: dict[TP, dict[int, ShareMessage]] = {}   # the last poll's records
        self._acks: dict[TP, Acknowledgements] = {}          # explicit ones given since
        self._renewed: dict[TP, dict[int, ShareMessage]] = {}  # renewed: still to be acknowledged
        self._errors: list[Message] = []
        self._commits: set[asyncio.Task] = set()
        self._started = False
        self._closed = False

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if not self._started:
            self._started = True
            self.client.start_metadata_refresh()
            self.fetcher.start()

    async def __aenter__(self) -> AIOShareConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise _state_error("the share consumer is closed")

    def _report(self, err: E.KafkaError) -> None:
        self._errors.append(Message(None, -1, error=err))
        if self.error_cb is not None:
            E.call_error_cb(self.error_cb, err)
        self.fetcher.arrived.set()

    # ------------------------------------------------------------ subscription
    def subscribe(self, topics: list[str]) -> None:
        self._check_open()
        if len(set(topics)) != len(topics) or any(not t for t in topics):
            raise ValueError("topics must be distinct, non-empty names")
        if not topics:
            raise ValueError("subscribe() needs topics; unsubscribe() leaves the group")
        self.client.set_topics(topics)
        self.membership.subscribe(topics)

    def subscription(self) -> list[str]:
        self._check_open()
        return list(self.membership.subscription)

    async def unsubscribe(self) -> None:
        self._check_open()
        await self._send_acks(close=True)
        await self.membership.unsubscribe()
        self.fetcher.buffer.clear()
        self.client.set_topics(())

    # ------------------------------------------------------------ polling
    async def poll(self, timeout: float | None = None) -> list[Message]:
        """A batch of records acquired for this member (and error events), waiting up to
        ``timeout`` seconds (None: forever) for the first."""
        self._check_open()
        if not self.membership.subscription:
            raise _state_error("the share consumer is not subscribed to any topic")
        self._settle_batch()
        f = self.fetcher
        f.holding = False
        self._hand_acks()
        f.wake()
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        while not f.buffer and not self._errors:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            f.arrived.clear()
            await wait_event(f.arrived, left)
            self._dispatch()
        self._dispatch()
        out: list[Message] = self._errors
        self._errors = []
        n = min(len(f.buffer), self.fetcher.max_records)
        take, batch = f.buffer.popleft, self._batch
        for _ in range(n):
            m = take()
            held = batch.get(key := (m._topic or "", m._partition))
            if held is None:
                held = batch[key] = {}
            held[m._offset] = m
            out.append(m)
        f.holding = bool(self._batch)
        return out

    def _settle_batch(self) -> None:
        """Before a poll: in implicit mode the last batch is accepted; in explicit mode every one
        of its records must have been acknowledged."""
        if self.explicit:
            missing = sum(len(ms) for ms in self._batch.values())
            if missing:
                raise _state_error(f"{missing} record(s) of the last poll are not acknowledged "
                                   f"(share.acknowledgement.mode=explicit)")
        else:
            for tp, ms in self._batch.items():
                self._acks.setdefault(tp, Acknowledgements()).add_all(ms, AcknowledgeType.ACCEPT)
        self._batch = {}

    def _hand_acks(self) -> None:
        if self._acks:
            self.fetcher.add_acks(self._acks)
            self._acks = {}

    # ------------------------------------------------------------ acknowledging
    def acknowledge(self, message: Message, ack_type: int = AcknowledgeType.ACCEPT) -> None:
        """Record how ``message`` ends (sent with the next poll or commit)."""
        if not isinstance(message, Message):
            raise TypeError("acknowledge() takes a Message returned by poll()")
        self.acknowledge_offset(message.topic() or "", message.partition(), message.offset(), ack_type)

    def acknowledge_offset(self, topic: str, partition: int, offset: int,
                           ack_type: int = AcknowledgeType.ACCEPT) -> None:
        self._check_open()
        try:
            kind = AcknowledgeType(ack_type)
        except ValueError:
            raise ValueError(f"invalid acknowledge type {ack_type!r}") from None
        if partition < 0 or offset < 0:
            raise ValueError("partition and offset must not be negative")
        if not self.explicit:
            raise _state_error("acknowledge() needs share.acknowledgement.mode=explicit")
        tp = (topic, partition)
        held = self._batch.get(tp, {})
        renewed = self._renewed.setdefault(tp, {})
        m = held.pop(offset, None) or renewed.pop(offset, None)
        if m is None:
            raise _state_error(f"{topic}-{partition} offset {offset} is not in flight")
        self._acks.setdefault(tp, Acknowledgements()).add(offset, kind)
        if kind is AcknowledgeType.RENEW:
            renewed[offset] = m  # still to be acknowledged for good

    def set_acknowledgement_commit_callback(self, callback: AckCallback | None) -> None:
        self._check_open()
        self.on_acknowledgement = callback

    async def commit_sync(self, timeout: float | None = 60.0) -> dict[TopicPartition, E.KafkaException | None]:
        """Send the acknowledgements waiting (implicit mode: the last batch, accepted) and wait
        for the brokers' answers: each partition's outcome."""
        self._check_open()
        self._settle_implicit()
        results = await asyncio.wait_for(self._send_acks(), None if timeout is None or timeout < 0 else timeout)
        self._dispatch()
        return {TopicPartition(tp[0], tp[1]): (E.KafkaException(err) if err is not None else None)
                for tp, _offsets, err in results}

    async def commit_async(self) -> None:
        """Send the acknowledgements waiting; their outcome goes to the callback."""
        self._check_open()
        self._settle_implicit()
        task = asyncio.get_running_loop().create_task(self._send_acks())
        self._commits.add(task)
        task.add_done_callback(self._commits.discard)

    def _settle_implicit(self) -> None:
        if not self.explicit:
            self._settle_batch()

    async def _send_acks(self, *, close: bool = False) -> list[AckResult]:
        self._hand_acks()
        return await self.fetcher.acknowledge_now(close=close)

    def take_reports(self) -> list[tuple[dict[TopicPartition, set[int]], E.KafkaException | None]]:
        """Acknowledgement outcomes not yet told, grouped by error, for the callback."""
        results, self.fetcher.results = self.fetcher.results, []
        grouped: dict[E.KafkaError | None, dict[TopicPartition, set[int]]] = {}
        for tp, offsets, err in results:
            grouped.setdefault(err, {}).setdefault(TopicPartition(tp[0], tp[1]), set()).update(offsets)
        return [(offs, None if err is None else E.KafkaException(err)) for err, offs in grouped.items()]

    def _dispatch(self) -> None:
        if not self.dispatch_callbacks:
            return
        reports = self.take_reports()
        cb = self.on_acknowledgement
        if cb is not None:
            for offsets, exc in reports:
                try:
                    cb(offsets, exc)
                except Exception:
                    log.exception("acknowledgement commit callback raised")

    # ------------------------------------------------------------ closing
    async def close(self) -> None:
        """Accept the last batch (implicit mode), send what waits and end the share sessions
        (what is still held is released), leave the group."""
        if self._closed:
            return
        self._settle_implicit()
        try:
            await self.fetcher.close()
            for t in list(self._commits):
                try:
                    await t
                except Exception:
                    pass
            await self._send_acks(close=True)
            await self.membership.close()
            self._dispatch()
        finally:
            self._closed = True
            await self.client.close()
