"""TransactionCoordinator: producer ids, epochs and the two-phase commit (Kafka's, TV1).

InitProducerId hands out producer ids (and epochs for transactional ids, KIP-360 bumps
included); AddPartitionsToTxn/AddOffsetsToTxn move a transaction to Ongoing; EndTxn writes
PrepareCommit/PrepareAbort, answers the client, then the marker writer finishes it. Ongoing
transactions past their timeout are fenced and aborted; idle transactional ids expire.
Every handler answers through a callback, possibly after an append completes.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable, ParamSpec

from rivulet.common.cluster import ConfigValues, InternalTopicCreator, MetadataView, NodeEndpoint
from rivulet.common.time import SYSTEM_CLOCK, Clock
from rivulet.common.types import TV_EPOCH_BUMP, TopicPartition
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.replication.internal_log import InternalTopicCoordinator
from rivulet.replication.replica_manager import ReplicaManager
from rivulet.transaction.markers import MarkerChannel, TransactionMarkerWriter, TxnOffsetsListener
from rivulet.transaction.metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    SHORT_MAX,
    TransactionMetadata,
    TxnState,
    TxnTransitMetadata,
    is_epoch_exhausted,
)
from rivulet.transaction.producer_id_manager import ProducerIdGenerator
from rivulet.transaction.state_manager import CoordinatorEpochAndTxnMetadata, TransactionStateManager
from rivulet.transaction.txn_log import TRANSACTION_STATE_TOPIC_NAME
from rivulet.storage.config import segment_size_configs

log = logging.getLogger(__name__)

S = TxnState
InitCallback = Callable[[ErrorCode, int, int], None]  # (error, producer id, epoch)
ErrorCallback = Callable[[ErrorCode], None]
EndTxnCallback = Callable[[ErrorCode, int, int], None]  # (error, the producer's next id, its next epoch)


_Answer = ParamSpec("_Answer")


def _debug_answer(callback: Callable[_Answer, None], asked: Callable[[], tuple[object, ...]],
                  line: str) -> Callable[_Answer, None]:
    """``callback``, logging ``line`` at DEBUG before it runs: the request's ``asked()``, then the
    answer's values (an error by its name). With DEBUG off when the request comes, ``callback``
    itself: nothing is formatted."""
    if not log.isEnabledFor(logging.DEBUG):
        return callback

    def logged(*answer: _Answer.args, **kw: _Answer.kwargs) -> None:
        log.debug(line, *asked(), *(a.name if isinstance(a, ErrorCode) else a for a in answer))
        callback(*answer, **kw)
    return logged


def _tv2_valid_epoch(md: TransactionMetadata, epoch: int, from_client: bool, is_epoch_fence: bool,
                     retry_on_epoch_bump: bool, is_retry: bool) -> bool:
    """Kafka's TV2 epoch rule: the same epoch is the next EndTxn, the one below a retry, by state."""
    if is_epoch_fence:
        return (not from_client or epoch == md.producer_epoch) and epoch >= md.producer_epoch
    if md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
        return retry_on_epoch_bump
    if md.state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
        return is_retry or epoch == md.producer_epoch
    return epoch == md.producer_epoch


def _tv2_next_state(state: TxnState, commit: bool, is_retry: bool) -> tuple[TxnState, bool] | ErrorCode | None:
    """(next state, nothing open) for a TV2 EndTxn in ``state``; an error to answer; or None for
    a retry of an EndTxn already done."""
    if state == S.ONGOING:
        return (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT), False
    if state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
        if is_retry and commit == (state == S.COMPLETE_COMMIT):
            return None
        if is_retry or commit:
            # Kafka 4.3.1's answer, observed: a commit retried into CompleteAbort too (KAFKA-20785,
            # after 4.3.1, answers that one PRODUCER_FENCED).
            return ErrorCode.INVALID_TXN_STATE
        return S.PREPARE_ABORT, True  # a new, empty transaction aborted
    if state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
        return ErrorCode.CONCURRENT_TRANSACTIONS if commit == (state == S.PREPARE_COMMIT) else \
            ErrorCode.INVALID_TXN_STATE
    if state == S.EMPTY:
        return ErrorCode.INVALID_TXN_STATE if commit else (S.PREPARE_ABORT, True)
    raise RuntimeError(f"Found a transaction in state {state}. This is illegal as we should never have "
                       "transitioned to this state.")


class TransactionCoordinator(InternalTopicCoordinator):
    def __init__(self, config: ConfigValues, replica_manager: ReplicaManager, metadata: MetadataView,
                 topic_creator: InternalTopicCreator, node: NodeEndpoint, producer_ids: ProducerIdGenerator,
                 offsets_listener: TxnOffsetsListener, clock: Clock = SYSTEM_CLOCK,
                 marker_channel: MarkerChannel | None = None, *,
                 transaction_version: Callable[[], int]) -> None:
        """``marker_channel`` (cluster mode): how markers reach partitions other brokers lead;
        ``transaction_version``: the finalized transaction.version."""
        super().__init__(replica_manager, metadata, topic_creator, node, clock)
        cfg = self.config = config
        self.producer_ids = producer_ids
        self.state_manager = TransactionStateManager(cfg, replica_manager, transaction_version, clock)
        self.markers = TransactionMarkerWriter(self.state_manager, replica_manager, metadata, offsets_listener,
                                              marker_channel)
        self.active = False
        self.shutting_down = False
        self.verification_enabled: bool = cfg["transaction.partition.verification.enable"]
        self._tasks: list[asyncio.Task] = []

    # -- lifecycle ---------------------------------------------------------------------------------

    def state_topic_configs(self, replication_factor: int) -> dict[str, str]:
        """The configs __transaction_state is created with; its min.insync.replicas is at most
        its replication factor, so that a single broker can run transactions."""
        cfg = self.config
        min_isr = min(cfg["transaction.state.log.min.isr"], replication_factor)
        return {"cleanup.policy": "compact", **segment_size_configs(cfg["transaction.state.log.segment.bytes"]),
                "compression.type": "uncompressed", "min.insync.replicas": str(min_isr),
                "unclean.leader.election.enable": "false"}

    def internal_topic(self) -> tuple[str, int, dict[str, str]]:
        return (TRANSACTION_STATE_TOPIC_NAME, self.config["transaction.state.log.num.partitions"],
                self.state_topic_configs(1))

    def startup(self, *, lead_all: bool = True) -> None:
        """``lead_all``: single-node mode, this node leads every __transaction_state partition
        (from start-up if the data dir holds the topic, else once the first FindCoordinator has
        made it)."""
        cfg = self.config
        sm = self.state_manager
        sm.startup(self._start_leading(lead_all))
        loop = asyncio.get_running_loop()
        self._lead_existing_topic()
        self._tasks.append(loop.create_task(self._every(
            cfg["transaction.abort.timed.out.transaction.cleanup.interval.ms"], self.abort_timed_out_transactions)))
        self._tasks.append(loop.create_task(self._every(
            cfg["transaction.remove.expired.transaction.cleanup.interval.ms"],
            sm.remove_expired_transactional_ids)))
        self.active = True

    def _lead_every_partition(self, num_partitions: int) -> None:
        self.state_manager.add_loading(range(num_partitions))
        self._tasks.append(asyncio.get_running_loop().create_task(self._load_all(num_partitions)))

    async def _load_all(self, n: int) -> None:
        for p in range(n):
            part = self.replica_manager.partitions.get(TopicPartition(TRANSACTION_STATE_TOPIC_NAME, p))
            epoch = part.leader_epoch if part is not None else 0
            try:
                await self.state_manager.load_partition(p, epoch, self.markers.add_txn_markers_to_send)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("loading %s-%d failed", TRANSACTION_STATE_TOPIC_NAME, p)

    def on_become_leader(self, partition: int, coordinator_epoch: int) -> None:
        """This node now leads __transaction_state-<partition>: load it (its ids answer
        COORDINATOR_LOAD_IN_PROGRESS meanwhile), with the leader epoch as coordinator epoch."""
        sm = self.state_manager
        sm.add_loading((partition,))

        async def load() -> None:
            try:
                await sm.load_partition(partition, coordinator_epoch, self.markers.add_txn_markers_to_send)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("loading %s-%d failed", TRANSACTION_STATE_TOPIC_NAME, partition)

        task = asyncio.get_running_loop().create_task(load())
        self._tasks.append(task)
        task.add_done_callback(lambda t: self._tasks.remove(t) if t in self._tasks else None)

    def on_resign(self, partition: int) -> None:
        """Leadership of __transaction_state-<partition> moved away: its ids answer NOT_COORDINATOR."""
        self.state_manager.remove_partition(partition)

    async def _every(self, interval_ms: int, fn: Callable[[], None]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                fn()
            except Exception:
                log.exception("%s failed", fn)

    def shutdown(self) -> None:
        self.active = False
        self.shutting_down = True
        self._stop_creation()
        for t in self._tasks:
            t.cancel()
        self._tasks.clear()
        self.markers.shutdown()
        self.state_manager.shutdown()

    def find_coordinator(self, transactional_id: str) -> tuple[ErrorCode, int, str, int]:
        """FindCoordinator key type 1: this node, as leader of every __transaction_state
        partition; COORDINATOR_NOT_AVAILABLE while the topic is being made (the first call starts that)."""
        if not self.active or not self._topic_led():
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        tp = TopicPartition(TRANSACTION_STATE_TOPIC_NAME, self.state_manager.partition_for(transactional_id))
        if self.replica_manager.partitions.get(tp) is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        return ErrorCode.NONE, self.node.node_id, self.node.host, self.node.port

    def partition_for(self, transactional_id: str) -> int:
        return self.state_manager.partition_for(transactional_id)

    # -- InitProducerId ------------------------------------------------------------------------------

    def _generate_producer_id(self) -> int:
        return self.producer_ids.generate_producer_id()

    def handle_init_producer_id(self, transactional_id: str | None, timeout_ms: int,
                                expected: tuple[int, int] | None, callback: InitCallback) -> None:
        def fail(err: ErrorCode) -> None:
            callback(err, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)

        if transactional_id is None:
            # Idempotent producers always get a fresh id at epoch 0.
            try:
                callback(ErrorCode.NONE, self._generate_producer_id(), 0)
            except ApiError as e:
                fail(e.code)
            return
        if not transactional_id:
            return fail(ErrorCode.INVALID_REQUEST)
        sm = self.state_manager
        if not sm.validate_transaction_timeout_ms(timeout_ms):
            return fail(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        err, found = sm.get_transaction_state(transactional_id)
        if err == ErrorCode.NONE and found is None:
            try:
                pid = self._generate_producer_id()
            except ApiError as e:
                return fail(e.code)
            created = TransactionMetadata(transactional_id, pid, NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_PRODUCER_EPOCH,
                                          timeout_ms, S.EMPTY, set(), -1, self.clock.milliseconds())
            err, found = sm.put_transaction_state_if_not_exists(created)
        if err != ErrorCode.NONE:
            return fail(err)
        coordinator_epoch, md = found.coordinator_epoch, found.metadata
        outcome = self._prepare_init_producer_id_transit(transactional_id, timeout_ms, md, expected)
        if isinstance(outcome, ErrorCode):
            return fail(outcome)
        if outcome.txn_state == S.PREPARE_EPOCH_FENCE:
            # Abort the open transaction first; the client retries and then gets the bump.
            def after_abort(e: ErrorCode) -> None:
                fail(e if e != ErrorCode.NONE else ErrorCode.CONCURRENT_TRANSACTIONS)
            self._abort_fenced(transactional_id, outcome, after_abort)
            return

        def after_append(e: ErrorCode) -> None:
            if e == ErrorCode.NONE:
                log.info("Initialized transactionalId %s with producerId %d and producer epoch %d on partition "
                         "%s-%d", transactional_id, outcome.producer_id, outcome.producer_epoch,
                         TRANSACTION_STATE_TOPIC_NAME, sm.partition_for(transactional_id))
                callback(ErrorCode.NONE, outcome.producer_id, outcome.producer_epoch)
            else:
                fail(e)
        sm.append_transaction_to_log(transactional_id, coordinator_epoch, outcome, after_append)

    def _prepare_init_producer_id_transit(self, transactional_id: str, timeout_ms: int, md: TransactionMetadata,
                                          expected: tuple[int, int] | None) -> ErrorCode | TxnTransitMetadata:
        def valid_producer_id(pid: int, epoch: int) -> bool:
            # Accept a just-created id, the current id, or a retry after an epoch-exhausting rotation.
            return (md.producer_epoch == NO_PRODUCER_EPOCH or pid == md.producer_id
                    or (pid == md.last_producer_id and is_epoch_exhausted(epoch)))

        if md.pending_transition_in_progress:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if expected is not None and not valid_producer_id(*expected):
            return ErrorCode.PRODUCER_FENCED
        if md.state in (S.PREPARE_ABORT, S.PREPARE_COMMIT):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if md.state in (S.COMPLETE_ABORT, S.COMPLETE_COMMIT, S.EMPTY):
            if md.is_producer_epoch_exhausted and (expected is None or expected[1] == md.producer_epoch):
                try:
                    pid = self._generate_producer_id()
                except ApiError as e:
                    return e.code
                return md.prepare_producer_id_rotation(pid, timeout_ms, self.clock.milliseconds(), expected is not None)
            transit = md.prepare_increment_producer_epoch(timeout_ms, None if expected is None else expected[1],
                                                          self.clock.milliseconds())
            if transit is None:
                log.info("Expected producer epoch %s does not match current producer epoch %d or previous producer "
                         "epoch %d", expected and expected[1], md.producer_epoch, md.last_producer_epoch)
                return ErrorCode.PRODUCER_FENCED
            return transit
        if md.state == S.ONGOING:
            return md.prepare_fence_producer_epoch()
        raise RuntimeError(f"Found transactionalId {transactional_id} with state {md.state}. This is illegal as we "
                           "should never have transitioned to this state.")

    def transaction_version(self) -> int:
        """The finalized transaction.version this coordinator works at."""
        return self.state_manager.transaction_version()

    def _existing(self, transactional_id: str) -> tuple[ErrorCode, CoordinatorEpochAndTxnMetadata | None]:
        """An id's state, or (without it) the error its request is answered with: INVALID_REQUEST
        for an empty id, the state manager's (loading, not the coordinator), and
        INVALID_PRODUCER_ID_MAPPING for an id this coordinator does not know."""
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST, None
        err, found = self.state_manager.get_transaction_state(transactional_id)
        if err == ErrorCode.NONE and found is None:
            err = ErrorCode.INVALID_PRODUCER_ID_MAPPING
        return err, found if err == ErrorCode.NONE else None

    # -- AddPartitionsToTxn / AddOffsetsToTxn -----------------------------------------------------------

    def handle_add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                              partitions: set[TopicPartition], callback: ErrorCallback,
                              client_transaction_version: int = 0) -> None:
        """``client_transaction_version`` 2: a leader adding the partition for a producer of
        transaction.version 2, whose EndTxn will bump the epoch (kept with the transaction)."""
        callback = _debug_answer(
            callback, lambda: (sorted(map(str, partitions)), transactional_id, producer_id, producer_epoch,
                               client_transaction_version),
            "AddPartitions %s to %s at producer %d epoch %d (client version %d) answered %s")
        err, found = self._existing(transactional_id)
        if found is None:
            return callback(err)
        md = found.metadata
        if md.producer_id != producer_id:
            return callback(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if md.producer_epoch != producer_epoch:
            return callback(ErrorCode.PRODUCER_FENCED)
        if md.pending_transition_in_progress or md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return callback(ErrorCode.CONCURRENT_TRANSACTIONS)
        if md.state == S.ONGOING and partitions <= md.topic_partitions:
            return callback(ErrorCode.NONE)  # nothing new to record
        if client_transaction_version >= TV_EPOCH_BUMP and self.transaction_version() < TV_EPOCH_BUMP:
            # A transaction.version 2 add (Produce v12, TxnOffsetCommit v5) below level 2: Kafka
            # 4.3.1 refuses its log write, UNSUPPORTED_VERSION (leaving its pending transition, so
            # the id answers CONCURRENT_TRANSACTIONS from then on; not here).
            return callback(ErrorCode.UNSUPPORTED_VERSION)
        transit = md.prepare_add_partitions(partitions, self.clock.milliseconds(), client_transaction_version)
        self.state_manager.append_transaction_to_log(transactional_id, found.coordinator_epoch, transit, callback)

    def verify_produce(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                       tp: TopicPartition) -> ErrorCode:
        """The ReplicaManager's KIP-890 check before a transactional batch opens a transaction on ``tp``."""
        if not self.verification_enabled:
            return ErrorCode.NONE
        if not transactional_id:
            return ErrorCode.INVALID_TXN_STATE
        return self.handle_verify_partitions(transactional_id, producer_id, producer_epoch, {tp})[tp]

    def add_partition(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                      tp: TopicPartition, callback: ErrorCallback) -> None:
        """The ReplicaManager's implicit add for a Produce v12 (KIP-890 part 2), at client version 2."""
        if not transactional_id:
            return callback(ErrorCode.INVALID_TXN_STATE)
        self.handle_add_partitions(transactional_id, producer_id, producer_epoch, {tp}, callback,
                                   client_transaction_version=TV_EPOCH_BUMP)

    def handle_verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                 partitions: set[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn v4+ verify_only: is each partition part of the open transaction?
        One that is not: TRANSACTION_ABORTABLE, as Kafka's coordinator answers (the asking leader
        turns it into INVALID_TXN_STATE for an old client)."""
        err, found = self._existing(transactional_id)
        if found is not None:
            md = found.metadata
            if md.producer_id != producer_id:
                err = ErrorCode.INVALID_PRODUCER_ID_MAPPING
            elif md.producer_epoch != producer_epoch:
                err = ErrorCode.PRODUCER_FENCED
            elif md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                err = ErrorCode.CONCURRENT_TRANSACTIONS
            else:
                return {tp: ErrorCode.NONE if tp in md.topic_partitions else ErrorCode.TRANSACTION_ABORTABLE
                        for tp in partitions}
        return {tp: err for tp in partitions}

    # -- EndTxn ----------------------------------------------------------------------------------------

    def handle_end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                               callback: ErrorCallback) -> None:
        self._end_transaction(transactional_id, producer_id, producer_epoch, commit, from_client=True,
                              callback=callback)

    def _end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool, *,
                         from_client: bool, callback: ErrorCallback) -> None:
        err, found = self._existing(transactional_id)
        if found is None:
            return callback(err)
        sm = self.state_manager
        md, coordinator_epoch = found.metadata, found.coordinator_epoch
        is_epoch_fence = False

        def invalid_state() -> ErrorCode:
            log.debug("TransactionalId %s's state is %s, but received transaction marker result to send: %s",
                      transactional_id, md.state.state_name, "COMMIT" if commit else "ABORT")
            return ErrorCode.INVALID_TXN_STATE

        if md.producer_id != producer_id:
            return callback(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        # Clients must name the current epoch; the coordinator's own aborts may carry a bumped one.
        if (from_client and producer_epoch != md.producer_epoch) or producer_epoch < md.producer_epoch:
            return callback(ErrorCode.PRODUCER_FENCED)
        if md.pending_transition_in_progress and md.pending_state != S.PREPARE_EPOCH_FENCE:
            return callback(ErrorCode.CONCURRENT_TRANSACTIONS)
        state = md.state
        if state == S.ONGOING:
            next_state = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
            if next_state == S.PREPARE_ABORT and md.pending_state == S.PREPARE_EPOCH_FENCE:
                # The fence continues as this abort, with the bumped epoch.
                is_epoch_fence = True
                md.pending_state = None
                md.producer_epoch = producer_epoch
                md.last_producer_epoch = NO_PRODUCER_EPOCH
            transit = md.prepare_abort_or_commit(next_state, self.clock.milliseconds())
        elif state == S.COMPLETE_COMMIT:
            return callback(ErrorCode.NONE if commit else invalid_state())
        elif state == S.COMPLETE_ABORT:
            return callback(ErrorCode.NONE if not commit else invalid_state())
        elif state == S.PREPARE_COMMIT:
            return callback(ErrorCode.CONCURRENT_TRANSACTIONS if commit else invalid_state())
        elif state == S.PREPARE_ABORT:
            return callback(ErrorCode.CONCURRENT_TRANSACTIONS if not commit else invalid_state())
        elif state == S.EMPTY:
            return callback(invalid_state())
        else:
            raise RuntimeError(f"Found transactionalId {transactional_id} with state {state}. This is illegal as we "
                               "should never have transitioned to this state.")

        def after_prepare(e: ErrorCode) -> None:
            if e != ErrorCode.NONE:
                log.info("Aborting sending of transaction markers and returning %s error to client for %s's "
                         "EndTransaction request", e.name, transactional_id)
                if is_epoch_fence:
                    err2, f2 = sm.get_transaction_state(transactional_id)
                    if err2 == ErrorCode.NONE and f2 is not None and f2.coordinator_epoch == coordinator_epoch:
                        f2.metadata.has_failed_epoch_fence = True
                return callback(e)
            err2, f2 = sm.get_transaction_state(transactional_id)
            if err2 != ErrorCode.NONE:
                return callback(err2)
            if f2 is None:
                raise RuntimeError(f"The coordinator still owns the transaction partition for {transactional_id}, "
                                   "but there is no metadata in the cache; this is not expected")
            if f2.coordinator_epoch != coordinator_epoch:
                return callback(ErrorCode.NOT_COORDINATOR)
            m2 = f2.metadata
            if m2.producer_id != producer_id:
                return callback(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
            if m2.producer_epoch != producer_epoch:
                return callback(ErrorCode.PRODUCER_FENCED)
            if m2.pending_transition_in_progress:
                return callback(ErrorCode.CONCURRENT_TRANSACTIONS)
            if m2.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT) or (m2.state == S.PREPARE_COMMIT) != commit:
                return callback(invalid_state())
            complete = m2.prepare_complete(self.clock.milliseconds())
            # The decision is durable: answer now, finish with the markers.
            callback(ErrorCode.NONE)
            self.markers.add_txn_markers_to_send(coordinator_epoch, commit, m2, complete)

        sm.append_transaction_to_log(transactional_id, coordinator_epoch, transit, after_prepare)

    # -- EndTxn with transaction.version 2 (KIP-890 part 2; not finalized yet) -------------------------------

    def handle_end_transaction_tv2(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                   commit: bool, callback: EndTxnCallback) -> None:
        """EndTxn v5: every commit or abort bumps the epoch, and the answer names the id and
        epoch the producer continues with. A retry (the epoch one below, or the last epoch of
        the previous id after a rotation) is answered from the state the first attempt left.
        Below transaction.version 2 one that would prepare a commit or abort is refused."""
        callback = _debug_answer(
            callback, lambda: ("commit" if commit else "abort", transactional_id, producer_id, producer_epoch),
            "EndTxn(%s) of %s at producer %d epoch %d answered %s (%d, %d)")
        self._end_transaction_tv2(transactional_id, producer_id, producer_epoch, commit, from_client=True,
                                  callback=callback)

    def _end_transaction_tv2(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool, *,
                             from_client: bool, callback: EndTxnCallback) -> None:
        def fail(e: ErrorCode) -> None:
            callback(e, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)

        err, found = self._existing(transactional_id)
        if found is None:
            return fail(err)
        md, coordinator_epoch = found.metadata, found.coordinator_epoch
        # The coordinator's own abort (timeout, or a new instance) of a transaction it fenced.
        is_epoch_fence = md.pending_state == S.PREPARE_EPOCH_FENCE
        retry_on_epoch_bump = not is_epoch_fence and md.producer_epoch == producer_epoch + 1
        retry_on_overflow = (not is_epoch_fence and md.last_producer_id == producer_id
                             and producer_epoch == SHORT_MAX - 1 and md.producer_epoch == 0)
        is_retry = retry_on_epoch_bump or retry_on_overflow
        # Pending first, before the producer id too, as Kafka 4.3.1 (KAFKA-18464): an empty abort
        # right after a commit waits for the commit to complete rather than fencing its producer.
        if md.pending_transition_in_progress and not is_epoch_fence:
            return fail(ErrorCode.CONCURRENT_TRANSACTIONS)
        if md.producer_id != producer_id and not retry_on_overflow:
            return fail(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if not _tv2_valid_epoch(md, producer_epoch, from_client, is_epoch_fence, retry_on_epoch_bump, is_retry):
            return fail(ErrorCode.PRODUCER_FENCED)
        outcome = _tv2_next_state(md.state, commit, is_retry)
        if outcome is None:
            return callback(ErrorCode.NONE, md.producer_id, md.producer_epoch)  # answered before
        if isinstance(outcome, ErrorCode):
            if outcome == ErrorCode.INVALID_TXN_STATE:
                log.debug("TransactionalId %s's state is %s, but received transaction marker result to send: %s",
                          transactional_id, md.state.state_name, "COMMIT" if commit else "ABORT")
            return fail(outcome)
        next_state, no_partition_added = outcome
        if from_client and self.transaction_version() < TV_EPOCH_BUMP:
            # As Kafka 4.3.1, whose log write of the version 2 transition is refused there (its
            # pending transition then stays, and the id answers CONCURRENT_TRANSACTIONS; not here).
            return fail(ErrorCode.UNSUPPORTED_VERSION)
        next_producer_id = NO_PRODUCER_ID
        if md.is_producer_epoch_exhausted:
            # This bump uses the last epoch: the producer moves to a new id when it completes.
            try:
                next_producer_id = self._generate_producer_id()
            except ApiError as e:
                return fail(e.code)
        if is_epoch_fence:
            # The fence's epoch was never written: under TV2 the abort's own bump is the only one
            # (KAFKA-19367), so the client's abort with its old epoch later reads as a retry.
            md.pending_state = None
        transit = md.prepare_abort_or_commit(next_state, self.clock.milliseconds(), TV_EPOCH_BUMP,
                                             next_producer_id, no_partition_added)
        self.state_manager.append_transaction_to_log(
            transactional_id, coordinator_epoch, transit,
            lambda e: self._tv2_after_prepare(e, transactional_id, coordinator_epoch, transit, commit, fail, callback))

    def _tv2_after_prepare(self, err: ErrorCode, transactional_id: str, coordinator_epoch: int,
                           transit: TxnTransitMetadata, commit: bool, fail: Callable[[ErrorCode], None],
                           callback: EndTxnCallback) -> None:
        """PrepareCommit/PrepareAbort is in the log: answer, then have the markers written."""
        if err != ErrorCode.NONE:
            log.info("Aborting sending of transaction markers and returning %s error to client for %s's "
                     "EndTransaction request", err.name, transactional_id)
            return fail(err)
        err, found = self.state_manager.get_transaction_state(transactional_id)
        if err != ErrorCode.NONE:
            return fail(err)
        if found is None:
            raise RuntimeError(f"The coordinator still owns the transaction partition for {transactional_id}, "
                               "but there is no metadata in the cache; this is not expected")
        md = found.metadata
        if found.coordinator_epoch != coordinator_epoch:
            err = ErrorCode.NOT_COORDINATOR
        elif md.producer_id != transit.producer_id:
            err = ErrorCode.INVALID_PRODUCER_ID_MAPPING
        elif md.producer_epoch != transit.producer_epoch:
            err = ErrorCode.PRODUCER_FENCED
        elif md.pending_transition_in_progress:
            err = ErrorCode.CONCURRENT_TRANSACTIONS
        elif md.state != (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT):
            err = ErrorCode.INVALID_TXN_STATE
        if err != ErrorCode.NONE:
            return fail(err)
        complete = md.prepare_complete(self.clock.milliseconds())
        # The producer continues as the completed transaction will leave it.
        callback(ErrorCode.NONE, complete.producer_id, complete.producer_epoch)
        self.markers.add_txn_markers_to_send(coordinator_epoch, commit, md, complete)

    # -- timeouts --------------------------------------------------------------------------------------

    def abort_timed_out_transactions(self) -> None:
        sm = self.state_manager
        for tid, pid, _epoch in sm.timed_out_transactions():
            err, found = sm.get_transaction_state(tid)
            if err != ErrorCode.NONE or found is None:
                continue
            md = found.metadata
            if md.producer_id != pid or md.pending_transition_in_progress:
                continue
            fence = md.prepare_fence_producer_epoch()
            log.info("aborting transaction of %s (producer %d) after its timeout of %d ms", tid, pid, md.txn_timeout_ms)

            def done(e: ErrorCode, tid: str = tid) -> None:
                if e == ErrorCode.NONE:
                    log.info("Completed rollback of ongoing transaction for transactionalId %s due to timeout", tid)
                elif e in (ErrorCode.INVALID_PRODUCER_ID_MAPPING, ErrorCode.PRODUCER_FENCED,
                           ErrorCode.CONCURRENT_TRANSACTIONS):
                    log.debug("rollback of %s cancelled: %s", tid, e.name)
                else:
                    log.warning("rollback of %s failed: %s", tid, e.name)
            self._abort_fenced(tid, fence, done)

    def _abort_fenced(self, transactional_id: str, fence: TxnTransitMetadata, callback: ErrorCallback) -> None:
        """The coordinator's own abort of a transaction it is fencing (timeout, new instance), at
        the cluster's transaction.version as Kafka's: from 2 the abort's bump is the fence."""
        if self.transaction_version() >= TV_EPOCH_BUMP:
            self._end_transaction_tv2(transactional_id, fence.producer_id, fence.producer_epoch, False,
                                      from_client=False, callback=lambda e, _pid, _epoch: callback(e))
        else:
            self._end_transaction(transactional_id, fence.producer_id, fence.producer_epoch, False,
                                  from_client=False, callback=callback)

    # -- Describe / List ---------------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> tuple[ErrorCode, TransactionMetadata | None]:
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST, None
        err, found = self.state_manager.get_transaction_state(transactional_id)
        if err != ErrorCode.NONE:
            return err, None
        if found is None or found.metadata.state == S.DEAD:
            return ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, None
        return ErrorCode.NONE, found.metadata
