"""Writing transaction markers (Kafka's TransactionMarkerChannelManager).

Once PrepareCommit/PrepareAbort is in the transaction log, a COMMIT/ABORT control batch
goes to every partition of the transaction. Kafka sends WriteTxnMarkers to each leader;
partitions this node leads (every partition in single-node mode) get their markers appended
straight through the ReplicaManager, the others through a ``MarkerChannel`` (cluster mode),
with the same per-partition error handling: written partitions leave the transaction,
retriable failures are retried, a fenced epoch abandons the attempt. When no
partition is left the CompleteCommit/CompleteAbort record is written. Markers on
``__consumer_offsets`` partitions then make the group coordinator materialise (or drop) the
transaction's offsets.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Iterable, Protocol

from rivulet.common.cluster import MetadataView
from rivulet.common.types import TopicPartition
from rivulet.protocol.errors import ErrorCode
from rivulet.replication.replica_manager import ProduceResult, ReplicaManager
from rivulet.transaction.metadata import TransactionMetadata, TxnState, TxnTransitMetadata
from rivulet.transaction.state_manager import TransactionStateManager

log = logging.getLogger(__name__)

GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"
RETRY_BACKOFF_S = 0.1
REQUEST_TIMEOUT_MS = 30_000  # Kafka's request.timeout.ms for WriteTxnMarkers
_FATAL = frozenset({ErrorCode.CORRUPT_MESSAGE, ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE,
                    ErrorCode.INVALID_REQUIRED_ACKS})
_ABANDON = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED})


@dataclass(slots=True)
class PendingCompleteTxn:
    transactional_id: str
    coordinator_epoch: int
    metadata: TransactionMetadata
    transit: TxnTransitMetadata
    commit: bool


class TxnOffsetsListener(Protocol):
    """The group coordinator's side of a transaction's end: once the COMMIT/ABORT marker is
    durable in these ``__consumer_offsets`` partitions, the producer's pending offsets there
    become committed (or are dropped)."""

    def on_transaction_completed(self, producer_id: int, partitions: Iterable[int], commit: bool) -> None: ...


class MarkerChannel(Protocol):
    """Where partitions are led and how markers reach other leaders (cluster mode)."""

    def partition_exists(self, tp: TopicPartition) -> bool: ...

    def leader_of(self, tp: TopicPartition) -> int: ...

    async def write(self, broker_id: int, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                    commit: bool, tps: list[TopicPartition], transaction_version: int
                    ) -> dict[TopicPartition, ErrorCode]: ...


class TransactionMarkerWriter:
    def __init__(self, state: TransactionStateManager, replica_manager: ReplicaManager, metadata: MetadataView,
                 offsets_listener: TxnOffsetsListener, channel: MarkerChannel | None = None) -> None:
        """``channel`` (cluster mode): partitions led by other brokers get their markers
        through WriteTxnMarkers."""
        self.state = state
        self.metadata = metadata
        self.replica_manager = replica_manager
        self.offsets_listener = offsets_listener
        self.shutting_down = False
        self.pending: dict[str, PendingCompleteTxn] = {}
        self._tasks: set[asyncio.Task] = set()
        self.markers_written = 0
        self.channel = channel

    def add_txn_markers_to_send(self, coordinator_epoch: int, commit: bool, md: TransactionMetadata,
                                transit: TxnTransitMetadata) -> None:
        p = PendingCompleteTxn(md.transactional_id, coordinator_epoch, md, transit, commit)
        self.pending[md.transactional_id] = p
        task = asyncio.get_running_loop().create_task(self._send(p, md.producer_id, md.producer_epoch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _still_current(self, p: PendingCompleteTxn) -> bool:
        if self.pending.get(p.transactional_id) is not p:
            return False
        err, found = self.state.get_transaction_state(p.transactional_id)
        if err != ErrorCode.NONE or found is None or found.coordinator_epoch != p.coordinator_epoch \
                or found.metadata is not p.metadata:
            self.pending.pop(p.transactional_id, None)  # emigrated or reloaded: no longer ours
            return False
        return True

    async def _send(self, p: PendingCompleteTxn, producer_id: int, producer_epoch: int) -> None:
        md = p.metadata
        try:
            while self._still_current(p) and not self.shutting_down:
                targets = []
                for tp in list(md.topic_partitions):
                    if not self._exists(tp):
                        # A deleted topic cannot take its marker; skip it, as Kafka does.
                        log.info("skipping marker for %s of %s: the partition no longer exists", tp,
                                 p.transactional_id)
                        md.remove_partition(tp)
                    else:
                        targets.append(tp)
                if not targets:
                    break
                result, remote = await self._write(p, producer_id, producer_epoch, targets)
                if not self._still_current(p):
                    return
                retry = self._handle_results(p, producer_id, result, remote)
                if retry is None:
                    return  # abandoned
                if not retry:
                    break
                await asyncio.sleep(RETRY_BACKOFF_S)
            if self._still_current(p) and not md.topic_partitions:
                self._write_completion(p)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("writing transaction markers for %s failed", p.transactional_id)

    def _exists(self, tp: TopicPartition) -> bool:
        if self.channel is not None:
            return self.channel.partition_exists(tp)
        info = self.metadata.get(tp.topic)
        return info is not None and tp.partition < info.num_partitions

    async def _write(self, p: PendingCompleteTxn, producer_id: int, producer_epoch: int,
                     targets: list[TopicPartition]) -> tuple[dict[TopicPartition, ProduceResult], set[TopicPartition]]:
        """Each partition's marker: appended here when this node leads it, else sent to its
        leader. Returns the results and the partitions written remotely."""
        local, remote = targets, {}
        if self.channel is not None:
            local, remote = [], {}
            for tp in targets:
                leader = self.channel.leader_of(tp)
                if leader == self.replica_manager.node_id:
                    local.append(tp)
                else:
                    remote.setdefault(leader, []).append(tp)
        results: dict[TopicPartition, ProduceResult] = {}
        tv = p.metadata.client_transaction_version  # the leaders check the marker's epoch by it (KIP-1228)
        sends = []
        for leader, tps in remote.items():
            if leader < 0:
                results.update({tp: ProduceResult(error=ErrorCode.NOT_LEADER_OR_FOLLOWER) for tp in tps})
            else:
                sends.append(self.channel.write(leader, producer_id, producer_epoch, p.coordinator_epoch, p.commit, tps,
                                                tv))
        if local:
            result = self.replica_manager.append_txn_markers(
                producer_id, producer_epoch, p.coordinator_epoch, p.commit, local, timeout_ms=REQUEST_TIMEOUT_MS,
                transaction_version=tv)
            if isinstance(result, asyncio.Future):
                result = await result
            results.update(result)
        for answer in await asyncio.gather(*sends):
            results.update({tp: ProduceResult(error=err) for tp, err in answer.items()})
        return results, {tp for tps in remote.values() for tp in tps}

    def _handle_results(self, p: PendingCompleteTxn, producer_id: int,
                        results: dict[TopicPartition, ProduceResult],
                        remote: set[TopicPartition] = frozenset()) -> bool | None:
        """True: retry the remaining partitions; False: all written; None: give up."""
        md = p.metadata
        written_offsets: list[int] = []
        retry = False
        for tp, r in results.items():
            err = ErrorCode(r.error)
            if err == ErrorCode.NONE:
                self.markers_written += 1
                md.remove_partition(tp)
                if tp.topic == GROUP_METADATA_TOPIC_NAME and tp not in remote:
                    # (A remote leader completes the offsets in its own group coordinator.)
                    written_offsets.append(tp.partition)
            elif err in _FATAL:
                raise RuntimeError(f"Received fatal error {err.name} while sending txn marker for "
                                   f"{p.transactional_id} to {tp}")
            elif err in _ABANDON:
                # The producer or the coordinator moved on: this transaction no longer needs markers.
                log.info("abandoning markers of %s: %s on %s", p.transactional_id, err.name, tp)
                self.pending.pop(p.transactional_id, None)
                return None
            else:
                log.debug("retrying marker for %s on %s after %s", p.transactional_id, tp, err.name)
                retry = True
        if written_offsets:
            self.notify_offsets_completed(producer_id, written_offsets, p.commit)
        return retry

    def notify_offsets_completed(self, producer_id: int, partitions: list[int], commit: bool) -> None:
        try:
            self.offsets_listener.on_transaction_completed(producer_id, partitions, commit)
        except Exception:
            log.exception("completing transactional offsets of producer %d failed", producer_id)

    def _write_completion(self, p: PendingCompleteTxn) -> None:
        def done(err: ErrorCode) -> None:
            if err == ErrorCode.NONE:
                log.debug("completed %s of %s", "commit" if p.commit else "abort", p.transactional_id)
                if self.pending.get(p.transactional_id) is p:
                    del self.pending[p.transactional_id]
            elif err == ErrorCode.COORDINATOR_NOT_AVAILABLE:
                # Transient: keep the pending state and write the completion again.
                log.warning("writing completion of %s failed with %s; retrying", p.transactional_id, err.name)
                asyncio.get_running_loop().call_later(RETRY_BACKOFF_S, self._retry_completion, p)
            else:
                log.info("completion of %s not written: %s", p.transactional_id, err.name)
                self.pending.pop(p.transactional_id, None)

        self.state.append_transaction_to_log(p.transactional_id, p.coordinator_epoch, p.transit, done,
                                             retry_on_error=lambda e: e == ErrorCode.COORDINATOR_NOT_AVAILABLE)

    def _retry_completion(self, p: PendingCompleteTxn) -> None:
        if self._still_current(p) and not self.shutting_down and \
                p.metadata.pending_state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            self._write_completion(p)

    def remove_markers_for_partition(self, txn_partition: int) -> None:
        for tid in [t for t in self.pending if self.state.partition_for(t) == txn_partition]:
            del self.pending[tid]

    def shutdown(self) -> None:
        self.shutting_down = True
        for t in list(self._tasks):
            t.cancel()
        self.pending.clear()
