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
from typing import TYPE_CHECKING, Any, Callable, Iterable

from rivulet.client import errors as E
from rivulet.client.connection import RequestTimedOut
from rivulet.client.errors import KafkaError, KafkaException
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.errors import KafkaError as ProtocolError
from rivulet.protocol.messages import add_offsets_to_txn_request as aotq
from rivulet.protocol.messages import add_partitions_to_txn_request as aptq
from rivulet.protocol.messages import end_txn_request as etq
from rivulet.protocol.messages import init_producer_id_request as ipq
from rivulet.protocol.messages import txn_offset_commit_request as tocq

if TYPE_CHECKING:
    from rivulet.client.producer import AIOProducer

log = logging.getLogger("rivulet.producer.txn")

NET_ERRORS = (ConnectionError, OSError, asyncio.TimeoutError, RequestTimedOut, EOFError)

# Answers that mean "ask again, maybe elsewhere, after a pause".
_COORD_MOVED = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})
_COORD_RETRY = frozenset({ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS,
                          ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NETWORK_EXCEPTION,
                          ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE,
                          ErrorCode.NOT_LEADER_OR_FOLLOWER})
# The producer can no longer be used: another instance took over the transactional id, or it
# is not allowed to use it.
FATAL_CODES = frozenset(c for c in (
    ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED,
    getattr(ErrorCode, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", None),
    getattr(ErrorCode, "CLUSTER_AUTHORIZATION_FAILED", None),
    getattr(ErrorCode, "UNSUPPORTED_VERSION", None), getattr(ErrorCode, "UNSUPPORTED_FOR_MESSAGE_FORMAT", None),
    getattr(ErrorCode, "INVALID_TRANSACTION_TIMEOUT", None)) if c is not None)

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


class ConsumerGroupMetadata:
    """What ``Consumer.consumer_group_metadata()`` returns, for ``send_offsets_to_transaction``."""

    __slots__ = ("group_id", "generation_id", "member_id", "group_instance_id")

    def __init__(self, group_id: str, generation_id: int = -1, member_id: str = "",
                 group_instance_id: str | None = None) -> None:
        self.group_id = group_id
        self.generation_id = generation_id
        self.member_id = member_id
        self.group_instance_id = group_instance_id

    def __repr__(self) -> str:
        return (f"ConsumerGroupMetadata(group_id={self.group_id!r}, generation_id={self.generation_id}, "
                f"member_id={self.member_id!r})")


class TransactionManager:
    def __init__(self, producer: AIOProducer, transactional_id: str, timeout_ms: int) -> None:
        self.p = producer
        self.client = producer.client
        self.tid = transactional_id
        self.timeout_ms = timeout_ms
        self.state = UNINIT
        self.error: TxnError | None = None
        self.coordinator: int | None = None
        self.added: set[tuple[str, int]] = set()  # partitions the coordinator knows are in the txn
        self.pending: set[tuple[str, int]] = set()  # being added right now
        self.offsets_added = False
        self.adding: asyncio.Task | None = None
        self.backoff = producer.backoff

    # ------------------------------------------------------------ state
    def can_send(self, b: Any) -> bool:
        return (b.topic, b.partition) in self.added and self.state in (IN_TXN, COMMITTING)

    def set_abortable(self, err: KafkaError) -> None:
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
        e = err if isinstance(err, TxnError) and err.fatal() else fatal_error(err.code(), err.str())
        self.state = FATAL
        self.error = e
        self.p._fatal = e
        self.p._accepting = False

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
        backoff = self.backoff
        while True:
            try:
                code, node, msg = await self.client.find_coordinator(key, key_type)
                if code == 0:
                    return node
                if code in FATAL_CODES or code in (ErrorCode.GROUP_AUTHORIZATION_FAILED, ErrorCode.INVALID_REQUEST):
                    raise KafkaException(fatal_error(code, msg) if key_type == 1 else
                                         abortable_error(code, msg))
                log.debug("FindCoordinator(%s): %s", key, ErrorCode(code).name)
            except NET_ERRORS as e:
                log.debug("FindCoordinator(%s) failed: %s", key, e)
            self._check_deadline(deadline, f"looking up the coordinator of {key!r}")
            await asyncio.sleep(min(backoff, max(0.0, deadline - time.monotonic())))
            backoff = min(backoff * 2, 1.0)

    @staticmethod
    def _check_deadline(deadline: float, what: str) -> None:
        if time.monotonic() >= deadline:
            raise KafkaException(TxnError(E.LOCAL_CODES["_TIMED_OUT"], f"timed out {what}", retriable=True))

    async def _call(self, req: Any, error_of: Callable[[Any], int], deadline: float, *, group: str | None = None,
                    abortable: bool = True, max_version: int | None = None) -> Any:
        """Send ``req`` to the transaction coordinator (or ``group``'s), retrying what can be retried."""
        backoff = self.backoff
        name = type(req).__name__.replace("Request", "")
        node: int | None = None
        while True:
            if group is None:
                if self.coordinator is None:
                    self.coordinator = await self._find_coordinator(self.tid, 1, deadline)
                node = self.coordinator
            elif node is None:
                node = await self._find_coordinator(group, 0, deadline)
            code: int
            try:
                left = max(0.1, deadline - time.monotonic())
                resp = await self.client.send(node, req, timeout=min(left, self.p.request_timeout_ms / 1000) + 1,
                                              max_version=max_version)
                code = error_of(resp)
            except ProtocolError as e:
                code = int(e.code)
            except NET_ERRORS as e:
                log.debug("%s to broker %s failed: %s", name, node, e)
                code = ErrorCode.COORDINATOR_NOT_AVAILABLE
            if code == 0:
                return resp
            if code in _COORD_MOVED:
                if group is None:
                    self.coordinator = None
                else:
                    node = None
            elif code not in _COORD_RETRY:
                msg = f"{name} for transactional id {self.tid!r}: {ErrorCode(code).name}"
                if code in FATAL_CODES:
                    raise KafkaException(fatal_error(code, msg))
                raise KafkaException(abortable_error(code, msg) if abortable else
                                     TxnError(code, msg, retriable=False))
            self._check_deadline(deadline, f"waiting for {name} ({ErrorCode(code).name})")
            await asyncio.sleep(min(backoff, max(0.0, deadline - time.monotonic())))
            backoff = min(backoff * 2, 1.0)

    def _fail(self, exc: KafkaException) -> None:
        """Record what a failed coordinator call means for the transaction."""
        err = exc.error
        if err.fatal():
            self.set_fatal(err)
        elif isinstance(err, TxnError) and err.txn_requires_abort():
            self.set_abortable(err)

    # ------------------------------------------------------------ the API
    async def init(self, deadline: float) -> None:
        self._raise_fatal()
        if self.state not in (UNINIT, READY):
            raise KafkaException(TxnError(E.LOCAL_CODES["_STATE"],
                                          f"init_transactions: the producer is {self.state}", retriable=False))
        await self._init_pid(deadline)
        self.state = READY

    async def _init_pid(self, deadline: float) -> None:
        req = ipq.InitProducerIdRequest(transactional_id=self.tid, transaction_timeout_ms=self.timeout_ms,
                                        producer_id=-1, producer_epoch=-1)
        try:
            resp = await self._call(req, lambda r: r.error_code, deadline, abortable=False)
        except KafkaException as e:
            if e.error.fatal():
                self.set_fatal(e.error)
            raise
        p = self.p
        with p.acc.lock:
            p.idem.reset(resp.producer_id, resp.producer_epoch)
            p.idem.enabled = True
            for b in p.acc.all_batches():
                b.reset_sequence()
        log.debug("%s: producer id %d epoch %d", self.tid, resp.producer_id, resp.producer_epoch)

    def begin(self) -> None:
        self._require(READY, what="begin_transaction")
        self.state = IN_TXN
        self.error = None
        self.added.clear()
        self.pending.clear()
        self.offsets_added = False
        self.p._accepting = not self.p._closed

    def partitions_to_add(self, keys: Iterable[tuple[str, int]]) -> None:
        """Called by the sender under the accumulator's lock: start AddPartitionsToTxn for new ones."""
        if self.state != IN_TXN and self.state != COMMITTING:
            return
        if self.adding is not None and not self.adding.done():
            return
        new = [tp for tp in keys if tp not in self.added]
        if not new:
            return
        self.pending = set(new)
        self.adding = self.p.loop.create_task(self._add_partitions(sorted(self.pending)))

    async def _add_partitions(self, tps: list[tuple[str, int]]) -> None:
        by_topic: dict[str, list[int]] = {}
        for t, part in tps:
            by_topic.setdefault(t, []).append(part)
        p = self.p
        req = aptq.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=self.tid, v3_and_below_producer_id=p.idem.producer_id,
            v3_and_below_producer_epoch=p.idem.epoch,
            v3_and_below_topics=[aptq.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in by_topic.items()])

        def first_error(r: Any) -> int:
            if r.error_code:
                return r.error_code
            codes = [x.partition_error_code for t in r.results_by_topic_v3_and_below
                     for x in t.results_by_partition if x.partition_error_code]
            # OPERATION_NOT_ATTEMPTED only accompanies the real error of another partition.
            real = [c for c in codes if c != getattr(ErrorCode, "OPERATION_NOT_ATTEMPTED", -9999)]
            return (real or codes or [0])[0]
        try:
            await self._call(req, first_error, time.monotonic() + self.timeout_ms / 1000, max_version=3)
            self.added.update(tps)
        except KafkaException as e:
            self._fail(e)
            if not e.error.fatal():
                self.set_abortable(e.error)
            # The batches of these partitions can never go out in this transaction.
            p._fail_partitions(set(tps), self.error or e.error)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.exception("AddPartitionsToTxn failed")
            self.set_abortable(KafkaError.from_exception(e))
            p._fail_partitions(set(tps), self.error)
        finally:
            self.pending = set()
            p._wake()

    async def send_offsets(self, offsets: list[Any], meta: ConsumerGroupMetadata, deadline: float) -> None:
        self._require(IN_TXN, what="send_offsets_to_transaction")
        if not isinstance(meta, ConsumerGroupMetadata) and not hasattr(meta, "group_id"):
            raise KafkaException(TxnError(E.LOCAL_CODES["_INVALID_ARG"],
                                          "group_metadata must come from Consumer.consumer_group_metadata()",
                                          retriable=False))
        p = self.p
        try:
            if not self.offsets_added or self.offsets_added != meta.group_id:
                await self._call(aotq.AddOffsetsToTxnRequest(
                    transactional_id=self.tid, producer_id=p.idem.producer_id, producer_epoch=p.idem.epoch,
                    group_id=meta.group_id), lambda r: r.error_code, deadline)
                self.offsets_added = meta.group_id
            by_topic: dict[str, list[Any]] = {}
            for tp in offsets:
                by_topic.setdefault(tp.topic, []).append(tocq.TxnOffsetCommitRequestPartition(
                    partition_index=tp.partition, committed_offset=tp.offset,
                    committed_leader_epoch=getattr(tp, "leader_epoch", None) or -1,
                    committed_metadata=getattr(tp, "metadata", None)))
            req = tocq.TxnOffsetCommitRequest(
                transactional_id=self.tid, group_id=meta.group_id, producer_id=p.idem.producer_id,
                producer_epoch=p.idem.epoch, generation_id=meta.generation_id, member_id=meta.member_id or "",
                group_instance_id=meta.group_instance_id,
                topics=[tocq.TxnOffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()])

            def first_error(r: Any) -> int:
                return next((x.error_code for t in r.topics for x in t.partitions if x.error_code), 0)
            await self._call(req, first_error, deadline, group=meta.group_id)
        except KafkaException as e:
            self._fail(e)
            raise

    async def end(self, commit: bool, deadline: float) -> None:
        p = self.p
        what = "commit_transaction" if commit else "abort_transaction"
        if commit:
            self._require(IN_TXN, COMMITTING, what=what)
        else:
            self._require(IN_TXN, COMMITTING, ABORTING, ABORTABLE, what=what)
        p._accepting = False
        if commit:
            self.state = COMMITTING
            await p.flush(max(0.0, deadline - time.monotonic()))
            if p.outstanding > 0 and self.state == COMMITTING:
                raise KafkaException(TxnError(E.LOCAL_CODES["_TIMED_OUT"],
                                              "commit_transaction: timed out flushing", retriable=True))
            self._raise_fatal()
            if self.state == ABORTABLE:
                raise KafkaException(self.error)
        else:
            self.state = ABORTING
            p._fail_queued(E.local("_PURGE_QUEUE", "Local: Purged in queue (transaction aborted)"))
            while p._requests_in_flight() or (self.adding is not None and not self.adding.done()):
                self._check_deadline(deadline, "waiting for requests in flight before aborting")
                await asyncio.sleep(0.005)
            self._raise_fatal()
        if self.added or self.offsets_added:
            try:
                await self._call(etq.EndTxnRequest(transactional_id=self.tid, producer_id=p.idem.producer_id,
                                                   producer_epoch=p.idem.epoch, committed=commit),
                                 lambda r: r.error_code, deadline, abortable=commit)
            except KafkaException as e:
                self._fail(e)
                raise
        if p.idem.reset_needed:
            # Sequences of an aborted partition could not be reconciled: bump the epoch.
            await self._init_pid(deadline)
        self.state = READY
        self.error = None
        self.added.clear()
        self.offsets_added = False
