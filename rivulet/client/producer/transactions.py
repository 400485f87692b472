"""Transactions for the producer: the coordinator conversation and the transaction's state.

The shape follows confluent-kafka (and Kafka's Java ``TransactionManager``):

    init_transactions()      FindCoordinator(key_type=1), InitProducerId(transactional id)
    begin_transaction()      local only
    produce(...)             the first batch to a new partition waits for AddPartitionsToTxn
    send_offsets_to_transaction(offsets, group_metadata)
                             AddOffsetsToTxn, then TxnOffsetCommit to the group's coordinator
    commit_transaction()     flush, then EndTxn(commit)
    abort_transaction()      drop what is queued, let what is in flight finish, EndTxn(abort)

Errors are raised as ``KafkaException`` whose ``KafkaError`` says ``retriable()`` (the call may
be repeated), ``fatal()`` (the producer is fenced or otherwise unusable: close it) or
``txn_requires_abort()`` (abort the transaction, then carry on).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable, Coroutine, Iterable, Protocol, TypeVar

from rivulet.client import client, core
from rivulet.client.client import KafkaClient
from rivulet.client import errors as E
from rivulet.client.errors import KafkaError, KafkaException
from rivulet.client.producer.accumulator import ProducerBatch
from rivulet.client.types import ConsumerGroupMetadata, TopicPartition
from rivulet.common.types import TopicPartition as TP
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.schema import Request, Struct
from rivulet.protocol.errors import ApiError as ProtocolError

log = logging.getLogger("rivulet.producer.txn")
R = TypeVar("R", bound=Struct)  # a request's response message

NET_ERRORS = (*client.NET_ERRORS, EOFError)

FATAL_CODES = core.TXN_FATAL_ERRORS

UNINIT, READY, IN_TXN, COMMITTING, ABORTING, ABORTABLE, FATAL = (
    "uninitialized", "ready", "in transaction", "committing", "aborting", "abortable error", "fatal error")


class TxnError(KafkaError):
    """A ``KafkaError`` that can also say the transaction must be aborted."""

    __slots__ = ("_abort",)

    def __init__(self, error: int, reason: str | None = None, fatal: bool = False,
                 retriable: bool | None = None, txn_requires_abort: bool = False) -> None:
        super().__init__(error, reason, fatal=fatal, retriable=retriable)
        self._abort = txn_requires_abort and not fatal

    def txn_requires_abort(self) -> bool:
        return self._abort


def fatal_error(code: int, reason: str | None = None) -> TxnError:
    return TxnError(code, reason, fatal=True, retriable=False)


def abortable_error(code: int, reason: str | None = None) -> TxnError:
    return TxnError(code, reason, retriable=False, txn_requires_abort=True)


def _as_txn_error(err: KafkaError, abortable: bool) -> TxnError:
    if isinstance(err, TxnError):
        return err
    if err.code() in FATAL_CODES or err.fatal():
        return fatal_error(err.code(), err.str())
    if abortable:
        return abortable_error(err.code(), err.str())
    return TxnError(err.code(), err.str(), retriable=err.retriable())


class TxnProducer(Protocol):
    """What the TransactionManager asks of the producer it serves. The producer hands it one at
    construction, so that the manager neither imports the producer nor reads its private state."""

    def fence(self, err: KafkaError) -> None:
        """A fatal transaction error: the producer refuses everything from now on."""

    def accept_records(self, on: bool) -> None:
        """Let produce() append (a transaction began) or not (it is ending)."""

    def new_producer_id(self, pid: core.ProducerIdAndEpoch) -> None:
        """InitProducerId's answer: number everything queued afresh under it."""

    def producer_id(self) -> core.ProducerIdAndEpoch: ...

    def epoch_bump_needed(self) -> bool:
        """Sequences of a partition could not be reconciled: a new epoch is needed."""

    def create_task(self, coro: Coroutine[object, object, None]) -> asyncio.Task: ...

    def fail_partitions(self, tps: set[TP], err: KafkaError) -> None:
        """Fail the queued batches of partitions that cannot join the transaction."""

    def wake(self) -> None:
        """Let the sender look again (a partition joined the transaction, or could not)."""

    async def flush(self, timeout: float) -> int:
        """Send what is queued and wait for it; what is left unsent."""

    def purge_queued(self, err: KafkaError) -> None:
        """Fail every record still queued (the transaction aborts)."""

    def requests_in_flight(self) -> bool: ...


class TransactionManager:
    def __init__(self, producer: TxnProducer, client: KafkaClient, request_timeout_ms: int,
                 transactional_id: str, timeout_ms: int) -> None:
        self.p = producer
        self.client = client
        self.request_timeout_ms = request_timeout_ms
        self.tid = transactional_id
        self.timeout_ms = timeout_ms
        self.state = UNINIT
        self.error: TxnError | None = None
        self.coordinator: int | None = None
        # The last group's coordinator (send_offsets_to_transaction), kept as Kafka's
        # TransactionManager keeps it: a transaction a micro-batch asks no FindCoordinator.
        self.group_coordinator: tuple[str, int] | None = None
        self.added: set[TP] = set()  # partitions the coordinator knows are in the txn
        self.pending: set[TP] = set()  # being added right now
        self.offsets_added = False
        self.adding: asyncio.Task | None = None
        self.backoff = self.client.backoff

    # ------------------------------------------------------------ state
    def can_send(self, b: ProducerBatch) -> bool:
        """Asked by the producer's sender: may this batch go out in the transaction now?"""
        return (b.topic, b.partition) in self.added and self.state in (IN_TXN, COMMITTING)

    def set_abortable(self, err: KafkaError) -> None:
        """Called by the producer when a batch of the transaction fails."""
        if self.state in (FATAL,):
            return
        if err.code() in FATAL_CODES or err.fatal():
            self.set_fatal(err)
            return
        if self.error is None:
            self.error = _as_txn_error(err, True)
        if self.state in (IN_TXN, COMMITTING):
            self.state = ABORTABLE

    def set_fatal(self, err: KafkaError) -> None:
        """Called by the producer when a batch is fenced (PRODUCER_FENCED and the like)."""
        e = err if isinstance(err, TxnError) and err.fatal() else fatal_error(err.code(), err.str())
        self.state = FATAL
        self.error = e
        self.p.fence(e)

    def _raise_fatal(self) -> None:
        if self.state == FATAL:
            raise KafkaException(self.error)

    def _require(self, *states: str, what: str) -> None:
        self._raise_fatal()
        if self.state not in states:
            if self.state == ABORTABLE and self.error is not None:
                raise KafkaException(self.error)
            raise KafkaException(TxnError(E.LOCAL_CODES["_STATE"],
                                          f"{what}: the producer is {self.state}", retriable=False))

    # ------------------------------------------------------------ coordinator plumbing
    async def _find_coordinator(self, key: str, key_type: int, deadline: float) -> int:
        try:
            return (await self.client.coordinator(key, key_type, deadline)).node_id
        except ProtocolError as e:
            if core.action(e.code) != core.Action.FAIL:  # retriable, but the deadline passed
                raise KafkaException(TxnError(E.LOCAL_CODES["_TIMED_OUT"], f"timed out looking up the coordinator "
                                              f"of {key!r} ({e.code.name})", retriable=True)) from None
            # As Kafka's TransactionManager: the transaction coordinator's errors are fatal, a
            # group coordinator's (for send_offsets_to_transaction) abort the transaction.
            raise KafkaException(fatal_error(e.code, e.message) if key_type == core.TRANSACTION else
                                 abortable_error(e.code, e.message)) from None

    @staticmethod
    def _check_deadline(deadline: float, what: str) -> None:
        if time.monotonic() >= deadline:
            raise KafkaException(TxnError(E.LOCAL_CODES["_TIMED_OUT"], f"timed out {what}", retriable=True))

    async def _call(self, req: Request[R], error_of: Callable[[R], int], deadline: float, *, group: str | None = None,
                    abortable: bool = True, max_version: int | None = None) -> R:
        """Send ``req`` to the transaction coordinator (or ``group``'s), retrying what can be retried."""
        attempts = core.Attempts(self.backoff, deadline)
        name = type(req).__name__.replace("Request", "")
        node: int | None = None
        while True:
            if group is None:
                if self.coordinator is None:
                    self.coordinator = await self._find_coordinator(self.tid, 1, deadline)
                node = self.coordinator
            elif node is None:
                if self.group_coordinator is None or self.group_coordinator[0] != group:
                    self.group_coordinator = (group, await self._find_coordinator(group, 0, deadline))
                node = self.group_coordinator[1]
            code: int
            try:
                left = max(0.1, deadline - time.monotonic())
                resp = await self.client.send(node, req, timeout=min(left, self.request_timeout_ms / 1000) + 1,
                                              max_version=max_version)
                code = error_of(resp)
            except ProtocolError as e:
                code = int(e.code)
            except NET_ERRORS as e:
                log.debug("%s to broker %s failed: %s", name, node, e)
                code = ErrorCode.COORDINATOR_NOT_AVAILABLE
            if code == 0:
                return resp
            act = core.action(code)
            if act == core.Action.FIND_COORDINATOR:
                if group is None:
                    self.coordinator = None
                else:
                    node = None
                    self.group_coordinator = None
            elif act == core.Action.FAIL:
                msg = f"{name} for transactional id {self.tid!r}: {ErrorCode(code).name}"
                if code in FATAL_CODES:
                    raise KafkaException(fatal_error(code, msg))
                raise KafkaException(abortable_error(code, msg) if abortable else
                                     TxnError(code, msg, retriable=False))
            self._check_deadline(deadline, f"waiting for {name} ({ErrorCode(code).name})")
            await asyncio.sleep(attempts.next_delay())

    def _fail(self, exc: KafkaException) -> None:
        """Record what a failed coordinator call means for the transaction."""
        err = exc.error
        if err.fatal():
            self.set_fatal(err)
        elif isinstance(err, TxnError) and err.txn_requires_abort():
            self.set_abortable(err)

    # ------------------------------------------------------------ the API
    async def init(self, deadline: float) -> None:
        """Called by AIOProducer.init_transactions."""
        self._raise_fatal()
        if self.state not in (UNINIT, READY):
            raise KafkaException(TxnError(E.LOCAL_CODES["_STATE"],
                                          f"init_transactions: the producer is {self.state}", retriable=False))
        await self._init_pid(deadline)
        self.state = READY

    async def _init_pid(self, deadline: float) -> None:
        req = core.init_producer_id_request(self.tid, self.timeout_ms)
        try:
            resp = await self._call(req, core.error_code, deadline, abortable=False)
        except KafkaException as e:
            if e.error.fatal():
                self.set_fatal(e.error)
            raise
        _, pid = core.read_init_producer_id(resp)
        assert pid is not None  # _call returns only an answer without error
        self.p.new_producer_id(pid)
        log.debug("%s: producer id %d epoch %d", self.tid, pid.producer_id, pid.epoch)

    def begin(self) -> None:
        """Called by AIOProducer.begin_transaction."""
        self._require(READY, what="begin_transaction")
        self.state = IN_TXN
        self.error = None
        self.added.clear()
        self.pending.clear()
        self.offsets_added = False
        self.p.accept_records(True)

    def partitions_to_add(self, keys: Iterable[TP]) -> None:
        """Called by the sender under the accumulator's lock: start AddPartitionsToTxn for new ones."""
        if self.state != IN_TXN and self.state != COMMITTING:
            return
        if self.adding is not None and not self.adding.done():
            return
        new = [tp for tp in keys if tp not in self.added]
        if not new:
            return
        self.pending = set(new)
        self.adding = self.p.create_task(self._add_partitions(sorted(self.pending)))

    def _pid(self) -> core.ProducerIdAndEpoch:
        return self.p.producer_id()

    async def _add_partitions(self, tps: list[TP]) -> None:
        p = self.p
        req = core.add_partitions_to_txn_request(self.tid, self._pid(), tps)
        try:
            await self._call(req, core.add_partitions_to_txn_error, time.monotonic() + self.timeout_ms / 1000)
            self.added.update(tps)
        except KafkaException as e:
            self._fail(e)
            if not e.error.fatal():
                self.set_abortable(e.error)
            # The batches of these partitions can never go out in this transaction.
            p.fail_partitions(set(tps), self.error or e.error)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.exception("AddPartitionsToTxn failed")
            self.set_abortable(KafkaError.from_exception(e))
            p.fail_partitions(set(tps), self.error)
        finally:
            self.pending = set()
            p.wake()

    async def send_offsets(self, offsets: list[TopicPartition], meta: ConsumerGroupMetadata, deadline: float) -> None:
        """Called by AIOProducer.send_offsets_to_transaction."""
        self._require(IN_TXN, what="send_offsets_to_transaction")
        if not isinstance(meta, ConsumerGroupMetadata):  # checked: the application passes it
            raise KafkaException(TxnError(E.LOCAL_CODES["_INVALID_ARG"],
                                          "group_metadata must come from Consumer.consumer_group_metadata()",
                                          retriable=False))
        try:
            if not self.offsets_added or self.offsets_added != meta.group_id:
                await self._call(core.add_offsets_to_txn_request(self.tid, self._pid(), meta.group_id),
                                 core.error_code, deadline)
                self.offsets_added = meta.group_id
            positions = {TP(tp.topic, tp.partition): core.OffsetAndMetadata(
                tp.offset, tp.metadata, tp.leader_epoch) for tp in offsets}
            req = core.txn_offset_commit_request(self.tid, self._pid(), meta.group_id, positions,
                                                 meta.generation_id, meta.member_id or "", meta.group_instance_id)
            await self._call(req, core.txn_offset_commit_error, deadline, group=meta.group_id)
        except KafkaException as e:
            self._fail(e)
            raise

    async def end(self, commit: bool, deadline: float) -> None:
        """Called by AIOProducer.commit_transaction and abort_transaction."""
        p = self.p
        what = "commit_transaction" if commit else "abort_transaction"
        if commit:
            self._require(IN_TXN, COMMITTING, what=what)
        else:
            self._require(IN_TXN, COMMITTING, ABORTING, ABORTABLE, what=what)
        p.accept_records(False)
        if commit:
            self.state = COMMITTING
            left = await p.flush(max(0.0, deadline - time.monotonic()))
            if left > 0 and self.state == COMMITTING:
                raise KafkaException(TxnError(E.LOCAL_CODES["_TIMED_OUT"],
                                              "commit_transaction: timed out flushing", retriable=True))
            self._raise_fatal()
            if self.state == ABORTABLE:
                raise KafkaException(self.error)
        else:
            self.state = ABORTING
            p.purge_queued(E.local("_PURGE_QUEUE", "Local: Purged in queue (transaction aborted)"))
            while p.requests_in_flight() or (self.adding is not None and not self.adding.done()):
                self._check_deadline(deadline, "waiting for requests in flight before aborting")
                await asyncio.sleep(0.005)
            self._raise_fatal()
        if self.added or self.offsets_added:
            try:
                await self._call(core.end_txn_request(self.tid, self._pid(), commit),
                                 core.error_code, deadline, abortable=commit)
            except KafkaException as e:
                self._fail(e)
                raise
        if p.epoch_bump_needed():
            # Sequences of an aborted partition could not be reconciled: bump the epoch.
            await self._init_pid(deadline)
        self.state = READY
        self.error = None
        self.added.clear()
        self.offsets_added = False
