"""Transaction metadata and its state machine (Kafka's TransactionMetadata).

Every change goes in two steps, as in Kafka: ``prepare_*`` computes the target
(a TxnTransitMetadata) and marks the transition pending; once the record is in the
transaction log, ``complete_transition_to`` applies it. A pending transition makes
concurrent requests answer CONCURRENT_TRANSACTIONS.

Transitions carry the client's transaction version. At 2 (KIP-890 part 2) every commit or
abort bumps the epoch, an exhausted epoch moves to ``next_producer_id`` when the transaction
completes, and an abort may start from Empty/Complete*. Version 2 is not finalized yet: only
transitions prepared with ``client_transaction_version=2`` take those paths.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from rivulet.common.types import TV_EPOCH_BUMP, TopicPartition

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
SHORT_MAX = 32767


class TxnState(Enum):
    """(id in the transaction log, name in DescribeTransactions/ListTransactions)."""

    EMPTY = (0, "Empty")
    ONGOING = (1, "Ongoing")
    PREPARE_COMMIT = (2, "PrepareCommit")
    PREPARE_ABORT = (3, "PrepareAbort")
    COMPLETE_COMMIT = (4, "CompleteCommit")
    COMPLETE_ABORT = (5, "CompleteAbort")
    DEAD = (6, "Dead")
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    @property
    def id(self) -> int:
        return self.value[0]

    @property
    def state_name(self) -> str:
        return self.value[1]

    @classmethod
    def from_id(cls, state_id: int) -> TxnState:
        for s in cls:
            if s.id == state_id:
                return s
        raise ValueError(f"Unknown transaction state id {state_id} from the transaction status message")

    @classmethod
    def from_name(cls, name: str) -> TxnState | None:
        for s in cls:
            if s.state_name == name:
                return s
        return None

    @property
    def is_expiration_allowed(self) -> bool:
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


S = TxnState
VALID_PREVIOUS_STATES: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}


_ENDED = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})


def is_epoch_exhausted(epoch: int) -> bool:
    """Short.MaxValue stays unused so the coordinator can always fence one more time."""
    return epoch >= SHORT_MAX - 1


class IllegalTxnStateError(RuntimeError):
    """A transition Kafka treats as impossible (a bug, not a client error)."""


@dataclass(frozen=True, slots=True)
class TxnTransitMetadata:
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    txn_state: TxnState
    topic_partitions: frozenset[TopicPartition]
    txn_start_timestamp: int
    txn_last_update_timestamp: int
    # TV2: the id the producer moves to when this transaction completes (its epoch ran out).
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0

    @property
    def supports_epoch_bump(self) -> bool:
        return self.client_transaction_version >= TV_EPOCH_BUMP


@dataclass(eq=False)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TxnState
    topic_partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    pending_state: TxnState | None = None
    # A failed epoch-fence write: the next fence reuses the bumped epoch (never returned to a client).
    has_failed_epoch_fence: bool = False
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0

    def __repr__(self) -> str:
        return (f"TransactionMetadata(transactionalId={self.transactional_id}, producerId={self.producer_id}, "
                f"producerEpoch={self.producer_epoch}, txnTimeoutMs={self.txn_timeout_ms}, "
                f"state={self.state.state_name}, pendingState={self.pending_state}, "
                f"topicPartitions={sorted(map(str, self.topic_partitions))}, "
                f"txnStartTimestamp={self.txn_start_timestamp}, txnLastUpdateTimestamp={self.txn_last_update_timestamp})")

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    @property
    def has_pending_transaction(self) -> bool:
        return self.state in (S.ONGOING, S.PREPARE_ABORT, S.PREPARE_COMMIT)

    def remove_partition(self, tp: TopicPartition) -> None:
        """A marker reached ``tp``."""
        if self.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            raise IllegalTxnStateError(
                f"Transaction metadata's current state is {self.state}, and its pending state is {self.pending_state} "
                "while trying to remove partitions whose txn marker has been sent, this is not expected")
        self.topic_partitions.discard(tp)

    # -- preparing transitions ----------------------------------------------------------------

    def prepare_no_transit(self) -> TxnTransitMetadata:
        return TxnTransitMetadata(self.producer_id, self.last_producer_id, self.producer_epoch,
                                  self.last_producer_epoch, self.txn_timeout_ms, self.state,
                                  frozenset(self.topic_partitions), self.txn_start_timestamp,
                                  self.txn_last_update_timestamp, self.next_producer_id,
                                  self.client_transaction_version)

    def prepare_fence_producer_epoch(self) -> TxnTransitMetadata:
        if self.producer_epoch == SHORT_MAX:
            raise IllegalTxnStateError("Cannot fence producer with epoch equal to Short.MaxValue since this would "
                                       "overflow")
        bumped = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._prepare(S.PREPARE_EPOCH_FENCE, self.producer_id, bumped, NO_PRODUCER_EPOCH, self.txn_timeout_ms,
                             frozenset(self.topic_partitions), self.txn_start_timestamp,
                             self.txn_last_update_timestamp)

    def prepare_increment_producer_epoch(self, new_timeout_ms: int, expected_epoch: int | None,
                                         now_ms: int) -> TxnTransitMetadata | None:
        """None means PRODUCER_FENCED: the caller's epoch is neither current nor the last one."""
        if self.is_producer_epoch_exhausted:
            raise IllegalTxnStateError(f"Cannot allocate any more producer epochs for producerId {self.producer_id}")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            # A new producer instance: bump, and forget the previous epoch.
            next_epoch, last_epoch = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            # The same producer recovering (KIP-360): bump and remember the old epoch.
            next_epoch, last_epoch = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            # A retry of a bump whose answer was lost: answer the same epoch again.
            next_epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        else:
            return None
        return self._prepare(S.EMPTY, self.producer_id, next_epoch, last_epoch, new_timeout_ms, frozenset(), -1, now_ms)

    def prepare_producer_id_rotation(self, new_producer_id: int, new_timeout_ms: int, now_ms: int,
                                     record_last_epoch: bool) -> TxnTransitMetadata:
        if self.has_pending_transaction:
            raise IllegalTxnStateError("Cannot rotate producer ids while a transaction is still pending")
        return self._prepare(S.EMPTY, new_producer_id, 0,
                             self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
                             new_timeout_ms, frozenset(), -1, now_ms)

    def prepare_add_partitions(self, added: set[TopicPartition], now_ms: int,
                               client_transaction_version: int = 0) -> TxnTransitMetadata:
        start = now_ms if self.state in (S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT) else self.txn_start_timestamp
        return self._prepare(S.ONGOING, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                             self.txn_timeout_ms, frozenset(self.topic_partitions | added), start, now_ms,
                             client_transaction_version=client_transaction_version)

    def prepare_abort_or_commit(self, new_state: TxnState, now_ms: int, client_transaction_version: int = 0,
                                next_producer_id: int = NO_PRODUCER_ID,
                                no_partition_added: bool = False) -> TxnTransitMetadata:
        """``client_transaction_version`` 2: the epoch goes up by one (the client gets it in
        EndTxn's answer) and the old one is remembered for a retry; ``next_producer_id`` is
        the id to move to on completion when the epoch is exhausted; ``no_partition_added``:
        an abort from Empty/Complete*, which starts its transaction now."""
        epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        if client_transaction_version >= TV_EPOCH_BUMP:
            # An abort at Short.MaxValue goes through unbumped, so the producer can recover.
            if not (epoch == SHORT_MAX and new_state == S.PREPARE_ABORT):
                epoch += 1
            last_epoch = self.producer_epoch
        start = now_ms if no_partition_added else self.txn_start_timestamp
        return self._prepare(new_state, self.producer_id, epoch, last_epoch, self.txn_timeout_ms,
                             frozenset(self.topic_partitions), start, now_ms, next_producer_id=next_producer_id,
                             client_transaction_version=client_transaction_version)

    def prepare_complete(self, now_ms: int) -> TxnTransitMetadata:
        new_state = S.COMPLETE_COMMIT if self.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
        self.has_failed_epoch_fence = False  # the fence reached the log
        producer_id, epoch = self.producer_id, self.producer_epoch
        if self.client_transaction_version >= TV_EPOCH_BUMP and self.next_producer_id != NO_PRODUCER_ID:
            # The epoch ran out: the producer continues as the next id at epoch 0; the last
            # epoch stays the one the client saw last.
            producer_id, epoch = self.next_producer_id, 0
        return self._prepare(new_state, producer_id, epoch, self.last_producer_epoch,
                             self.txn_timeout_ms, frozenset(), self.txn_start_timestamp, now_ms,
                             client_transaction_version=self.client_transaction_version)

    def prepare_dead(self) -> TxnTransitMetadata:
        return self._prepare(S.DEAD, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                             self.txn_timeout_ms, frozenset(), self.txn_start_timestamp,
                             self.txn_last_update_timestamp)

    def _prepare(self, new_state: TxnState, producer_id: int, epoch: int, last_epoch: int, timeout_ms: int,
                 partitions: frozenset[TopicPartition], start_ts: int, update_ts: int, *,
                 next_producer_id: int = NO_PRODUCER_ID, client_transaction_version: int | None = None
                 ) -> TxnTransitMetadata:
        """``client_transaction_version`` None keeps the transaction's own."""
        tv = self.client_transaction_version if client_transaction_version is None else client_transaction_version
        if self.pending_state is not None:
            raise IllegalTxnStateError(f"Preparing transaction state transition to {new_state} while it already a "
                                       f"pending state {self.pending_state}")
        if producer_id < 0:
            raise ValueError(f"Illegal new producer id {producer_id}")
        if new_state != S.DEAD and epoch < 0:
            raise ValueError(f"Illegal new producer epoch {epoch}")
        # TV2 may abort with nothing open: Empty/Complete* -> PrepareAbort.
        tv2_empty_abort = new_state == S.PREPARE_ABORT and tv >= TV_EPOCH_BUMP and self.state in _ENDED
        if self.state not in VALID_PREVIOUS_STATES[new_state] and not tv2_empty_abort:
            raise IllegalTxnStateError(f"Preparing transaction state transition to {new_state} failed since the "
                                       f"target state {new_state} is not a valid previous state of the current "
                                       f"state {self.state}")
        self.pending_state = new_state
        return TxnTransitMetadata(producer_id, self.producer_id, epoch, last_epoch, timeout_ms, new_state, partitions,
                                  start_ts, update_ts, next_producer_id, tv)

    # -- completing them ---------------------------------------------------------------------------

    def complete_transition_to(self, t: TxnTransitMetadata) -> None:
        """Apply ``t`` once its record is durable; checks Kafka's invariants."""
        to_state = self.pending_state
        if to_state is None:
            raise IllegalTxnStateError(f"TransactionalId {self.transactional_id} completing transaction state "
                                       "transition while it does not have a pending state")
        if to_state != t.txn_state:
            self._fail(t)
        same_producer = t.producer_epoch == self.producer_epoch and t.producer_id == self.producer_id
        if to_state == S.EMPTY:
            bump = t.producer_epoch == self.producer_epoch + 1 or (t.producer_epoch == 0
                                                                    and t.producer_id != self.producer_id)
            if (self.producer_epoch != t.producer_epoch and not bump) or t.topic_partitions or \
                    t.txn_start_timestamp != -1:
                self._fail(t)
            self.txn_timeout_ms = t.txn_timeout_ms
            self.producer_epoch = t.producer_epoch
            self.last_producer_epoch = t.last_producer_epoch
            self.producer_id = t.producer_id
            self.last_producer_id = t.last_producer_id
        elif to_state == S.ONGOING:
            if not same_producer or not self.topic_partitions <= t.topic_partitions or \
                    self.txn_timeout_ms != t.txn_timeout_ms:
                self._fail(t)
            self.txn_start_timestamp = t.txn_start_timestamp
            self.topic_partitions |= t.topic_partitions
        elif to_state in (S.PREPARE_ABORT, S.PREPARE_COMMIT):
            start_ok = self.txn_start_timestamp == t.txn_start_timestamp
            if t.supports_epoch_bump:
                # The epoch went up by one from this one; an abort with nothing open starts now.
                producer_ok = t.last_producer_epoch == self.producer_epoch and t.producer_id == self.producer_id
                start_ok = start_ok or (to_state == S.PREPARE_ABORT and self.state in _ENDED)
            else:
                producer_ok = same_producer
            if not producer_ok or set(self.topic_partitions) != t.topic_partitions or \
                    self.txn_timeout_ms != t.txn_timeout_ms or not start_ok:
                self._fail(t)
            if t.supports_epoch_bump:
                self._take_producer(t)
                self.txn_start_timestamp = t.txn_start_timestamp
        elif to_state in (S.COMPLETE_ABORT, S.COMPLETE_COMMIT):
            if t.supports_epoch_bump and t.producer_epoch == 0:
                # Moved to the next producer id: the last epoch stays, the old id becomes the previous.
                producer_ok = t.last_producer_epoch == self.last_producer_epoch and \
                    t.last_producer_id == self.producer_id
            else:
                producer_ok = same_producer
            if not producer_ok or self.txn_timeout_ms != t.txn_timeout_ms or t.txn_start_timestamp == -1:
                self._fail(t)
            if t.supports_epoch_bump:
                self._take_producer(t)
            self.txn_start_timestamp = t.txn_start_timestamp
            self.topic_partitions.clear()
        elif to_state == S.PREPARE_EPOCH_FENCE:
            self._fail(t)  # a fence always continues as PrepareAbort
        else:
            raise IllegalTxnStateError(f"TransactionalId {self.transactional_id} is trying to complete a transition "
                                       f"to {to_state}; an expiring id is only removed from the cache")
        self.txn_last_update_timestamp = t.txn_last_update_timestamp
        self.next_producer_id = t.next_producer_id
        self.client_transaction_version = t.client_transaction_version
        self.pending_state = None
        self.state = to_state

    def _take_producer(self, t: TxnTransitMetadata) -> None:
        """TV2 transitions move the producer's id and epochs along (Kafka applies them always)."""
        self.producer_id = t.producer_id
        self.last_producer_id = t.last_producer_id
        self.producer_epoch = t.producer_epoch
        self.last_producer_epoch = t.last_producer_epoch

    def _fail(self, t: TxnTransitMetadata) -> None:
        raise IllegalTxnStateError(f"TransactionalId {self.transactional_id} failed transition to state {t} due to "
                                   f"unexpected metadata; current {self!r}")
