"""Request handlers of the transaction APIs, in front of the TransactionCoordinator.

InitProducerId, AddPartitionsToTxn (client v0-3 and the batched broker form v4+),
AddOffsetsToTxn, EndTxn, WriteTxnMarkers, DescribeTransactions, ListTransactions and
DescribeProducers. Error codes older clients cannot read are mapped as Kafka maps them.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Callable

from rivulet.common.cluster import ConfigValues, MetadataView
from rivulet.common.types import TV_EPOCH_BUMP, TopicPartition
from rivulet.coordinator.group_coordinator import GroupCoordinator
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.framing import RequestHeader
from rivulet.protocol.messages import (
    add_offsets_to_txn_response as aotr,
    add_partitions_to_txn_response as aptr,
    describe_producers_response as dpr,
    describe_transactions_response as dtxr,
    end_txn_response as etr,
    init_producer_id_response as ipr,
    list_transactions_response as ltr,
    write_txn_markers_response as wtmr,
)
from rivulet.protocol.messages.add_offsets_to_txn_request import AddOffsetsToTxnRequest
from rivulet.protocol.messages.add_partitions_to_txn_request import AddPartitionsToTxnRequest
from rivulet.protocol.messages.describe_producers_request import DescribeProducersRequest
from rivulet.protocol.messages.describe_transactions_request import DescribeTransactionsRequest
from rivulet.protocol.messages.end_txn_request import EndTxnRequest
from rivulet.protocol.messages.init_producer_id_request import InitProducerIdRequest
from rivulet.protocol.messages.list_transactions_request import ListTransactionsRequest
from rivulet.protocol.messages.write_txn_markers_request import WritableTxnMarker, WriteTxnMarkersRequest
from rivulet.replication.metadata_cache import MetadataCache
from rivulet.replication.replica_manager import ReplicaManager
from rivulet.security.acls import AclOperation as Op, ResourceType
from rivulet.server.acls import Authz
from rivulet.server.answer import Answer, Reply
from rivulet.server.handlers import Handler, partition_count
from rivulet.server.metadata import INTERNAL_TOPICS
from rivulet.server.network import KafkaConnection
from rivulet.transaction.coordinator import TransactionCoordinator
from rivulet.transaction.markers import GROUP_METADATA_TOPIC_NAME
from rivulet.transaction.metadata import NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from rivulet.transaction.txn_log import partition_for

def _fenced_for(version: int, first_with_fenced: int, err: ErrorCode) -> ErrorCode:
    """Clients before KIP-588 know PRODUCER_FENCED as INVALID_PRODUCER_EPOCH."""
    if version < first_with_fenced and err == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return err


def _respond(run: Callable[[Callable[[Any], None]], None]) -> Answer:
    """Run ``run(callback)``, where the callback receives the finished response."""
    reply: Reply[Any] = Reply(lambda response: response)
    run(reply)
    return reply.answer()


@dataclass(eq=False)
class TransactionHandlers:
    coordinator: TransactionCoordinator
    groups: GroupCoordinator
    replica_manager: ReplicaManager
    metadata: MetadataView
    config: ConfigValues
    authz: Authz
    # Cluster mode: which partitions exist is the controller's word (UpdateMetadata).
    metadata_cache: MetadataCache | None = None

    def handlers(self) -> dict[int, Handler]:
        return {
            22: self.handle_init_producer_id, 24: self.handle_add_partitions_to_txn,
            25: self.handle_add_offsets_to_txn, 26: self.handle_end_txn, 27: self.handle_write_txn_markers,
            61: self.handle_describe_producers, 65: self.handle_describe_transactions,
            66: self.handle_list_transactions,
        }

    # -- InitProducerId ----------------------------------------------------------------------------

    def handle_init_producer_id(
        self, header: RequestHeader, req: InitProducerIdRequest, conn: KafkaConnection
    ) -> Answer:
        v = header.api_version
        pid, epoch = (req.producer_id, req.producer_epoch) if v >= 3 else (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)

        def response(err: ErrorCode, producer_id: int, producer_epoch: int) -> ipr.InitProducerIdResponse:
            return ipr.InitProducerIdResponse(throttle_time_ms=0, error_code=_fenced_for(v, 4, err),
                                              producer_id=producer_id, producer_epoch=producer_epoch)

        # As Kafka: WRITE on the transactional id; an idempotent producer IDEMPOTENT_WRITE on the
        # cluster or WRITE on some topic.
        tid = req.transactional_id
        if tid is not None and not self.authz.transactional_id(conn, Op.WRITE, tid):
            return response(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        if tid is None and not self.authz.cluster(conn, Op.IDEMPOTENT_WRITE) and \
                not self.authz.by_resource_type(conn, Op.WRITE, ResourceType.TOPIC):
            return response(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        if pid == NO_PRODUCER_ID and epoch == NO_PRODUCER_EPOCH:
            expected = None
        elif pid == NO_PRODUCER_ID or epoch == NO_PRODUCER_EPOCH:
            return response(ErrorCode.INVALID_REQUEST, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        else:
            expected = (pid, epoch)
        return _respond(lambda cb: self.coordinator.handle_init_producer_id(
            req.transactional_id, req.transaction_timeout_ms, expected,
            lambda err, p, e: cb(response(err, p, e))))

    # -- AddPartitionsToTxn ------------------------------------------------------------------------

    def _check_partitions(self, topics: list, writable: set[str] | None
                          ) -> tuple[dict[TopicPartition, ErrorCode], set[TopicPartition]]:
        """``writable``: the topics a client may add (None: a broker's request, all of them)."""
        errors: dict[TopicPartition, ErrorCode] = {}
        ok: set[TopicPartition] = set()
        for t in topics:
            count = partition_count(self.metadata, self.metadata_cache, t.name)
            for p in t.partitions:
                tp = TopicPartition(t.name, p)
                if writable is not None and t.name not in writable:
                    errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                elif not 0 <= p < count:
                    errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    ok.add(tp)
        return errors, ok

    @staticmethod
    def _topic_results(errors: dict[TopicPartition, ErrorCode]) -> list[aptr.AddPartitionsToTxnTopicResult]:
        by_topic: dict[str, list[aptr.AddPartitionsToTxnPartitionResult]] = {}
        for tp, err in errors.items():
            by_topic.setdefault(tp.topic, []).append(
                aptr.AddPartitionsToTxnPartitionResult(partition_index=tp.partition, partition_error_code=err))
        return [aptr.AddPartitionsToTxnTopicResult(name=n, results_by_partition=ps) for n, ps in by_topic.items()]

    def _add_one(self, version: int, tid: str, pid: int, epoch: int, topics: list, verify_only: bool,
                 done: Callable[[dict[TopicPartition, ErrorCode]], None], conn: KafkaConnection) -> None:
        writable = None
        if version < 4:
            # A client's request: WRITE on the transactional id and on each topic (never an internal one).
            if not self.authz.transactional_id(conn, Op.WRITE, tid):
                done({TopicPartition(t.name, p): ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                      for t in topics for p in t.partitions})
                return
            writable = self.authz.allowed(conn, Op.WRITE, ResourceType.TOPIC,
                                          (t.name for t in topics if t.name not in INTERNAL_TOPICS))
        errors, ok = self._check_partitions(topics, writable)
        if errors:
            # One bad partition fails the whole transaction's request; the rest were not attempted.
            done({**errors, **{tp: ErrorCode.OPERATION_NOT_ATTEMPTED for tp in ok}})
            return
        if verify_only:
            done(self.coordinator.handle_verify_partitions(tid, pid, epoch, ok))
            return
        # v4+ comes from a leader adding a partition for a Produce or TxnOffsetCommit of a
        # transaction.version 2 producer (Kafka's transactionVersionForAddPartitionsToTxn).
        self.coordinator.handle_add_partitions(tid, pid, epoch, ok,
                                               lambda err: done({tp: _fenced_for(version, 2, err) for tp in ok}),
                                               client_transaction_version=TV_EPOCH_BUMP if version >= 4 else 0)

    def handle_add_partitions_to_txn(
        self, header: RequestHeader, req: AddPartitionsToTxnRequest, conn: KafkaConnection
    ) -> Answer:
        v = header.api_version
        if v < 4:
            def run3(cb: Callable[[Any], None]) -> None:
                self._add_one(v, req.v3_and_below_transactional_id, req.v3_and_below_producer_id,
                              req.v3_and_below_producer_epoch, req.v3_and_below_topics, False,
                              lambda errs: cb(aptr.AddPartitionsToTxnResponse(
                                  throttle_time_ms=0, results_by_topic_v3_and_below=self._topic_results(errs))),
                              conn)
            return _respond(run3)
        if not self.authz.cluster(conn, Op.CLUSTER_ACTION):  # v4+ is brokers' own request
            return aptr.AddPartitionsToTxnResponse(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                                   results_by_transaction=[])

        def run4(cb: Callable[[Any], None]) -> None:
            results: list[aptr.AddPartitionsToTxnResult | None] = [None] * len(req.transactions)
            remaining = [len(req.transactions)]

            def finish() -> None:
                cb(aptr.AddPartitionsToTxnResponse(throttle_time_ms=0, error_code=0,
                                                   results_by_transaction=list(results)))

            if not req.transactions:
                finish()
                return
            for i, t in enumerate(req.transactions):
                def one(errs: dict[TopicPartition, ErrorCode], i: int = i, tid: str = t.transactional_id) -> None:
                    results[i] = aptr.AddPartitionsToTxnResult(transactional_id=tid,
                                                               topic_results=self._topic_results(errs))
                    remaining[0] -= 1
                    if remaining[0] == 0:
                        finish()
                self._add_one(v, t.transactional_id, t.producer_id, t.producer_epoch, t.topics, t.verify_only, one,
                              conn)
        return _respond(run4)

    # -- AddOffsetsToTxn -----------------------------------------------------------------------------

    def _offsets_partition(self, group_id: str) -> int:
        if self.groups.manager is not None:
            return self.groups.partition_for(group_id)
        info = self.metadata.get(GROUP_METADATA_TOPIC_NAME)
        n = info.num_partitions if info else self.config["offsets.topic.num.partitions"]
        return partition_for(group_id, n)

    def handle_add_offsets_to_txn(
        self, header: RequestHeader, req: AddOffsetsToTxnRequest, conn: KafkaConnection
    ) -> Answer:
        v = header.api_version
        if not self.authz.transactional_id(conn, Op.WRITE, req.transactional_id):
            return aotr.AddOffsetsToTxnResponse(throttle_time_ms=0,
                                                error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if not self.authz.group(conn, Op.READ, req.group_id):
            return aotr.AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
        tp = TopicPartition(GROUP_METADATA_TOPIC_NAME, self._offsets_partition(req.group_id))
        return _respond(lambda cb: self.coordinator.handle_add_partitions(
            req.transactional_id, req.producer_id, req.producer_epoch, {tp},
            lambda err: cb(aotr.AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=_fenced_for(v, 2, err)))))

    # -- EndTxn ----------------------------------------------------------------------------------------

    def handle_end_txn(self, header: RequestHeader, req: EndTxnRequest, conn: KafkaConnection) -> Answer:
        v = header.api_version
        if not self.authz.transactional_id(conn, Op.WRITE, req.transactional_id):
            return etr.EndTxnResponse(throttle_time_ms=0, error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if v >= 5:
            # KIP-890 part 2: the epoch goes up at every EndTxn; the answer names the producer's next.
            # Decided by the version alone, as Kafka (transactionVersionForEndTxn); refused below level 2.
            return _respond(lambda cb: self.coordinator.handle_end_transaction_tv2(
                req.transactional_id, req.producer_id, req.producer_epoch, req.committed,
                lambda err, pid, epoch: cb(etr.EndTxnResponse(throttle_time_ms=0, error_code=err, producer_id=pid,
                                                              producer_epoch=epoch))))
        return _respond(lambda cb: self.coordinator.handle_end_transaction(
            req.transactional_id, req.producer_id, req.producer_epoch, req.committed,
            lambda err: cb(etr.EndTxnResponse(throttle_time_ms=0, error_code=_fenced_for(v, 2, err),
                                              producer_id=req.producer_id, producer_epoch=req.producer_epoch))))

    # -- WriteTxnMarkers -------------------------------------------------------------------------------

    def handle_write_txn_markers(
        self, header: RequestHeader, req: WriteTxnMarkersRequest, conn: KafkaConnection
    ) -> Answer:
        rm = self.replica_manager
        if not self.authz.cluster(conn, Op.CLUSTER_ACTION):  # brokers only: every partition refused
            return wtmr.WriteTxnMarkersResponse(markers=[wtmr.WritableTxnMarkerResult(
                producer_id=m.producer_id, topics=[wtmr.WritableTxnMarkerTopicResult(name=t.name, partitions=[
                    wtmr.WritableTxnMarkerPartitionResult(partition_index=p,
                                                          error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
                    for p in t.partition_indexes]) for t in m.topics]) for m in req.markers])
        results: list[wtmr.WritableTxnMarkerResult | None] = [None] * len(req.markers)
        remaining = [len(req.markers)]
        reply: Reply[None] = Reply(lambda _: wtmr.WriteTxnMarkersResponse(markers=list(results)))

        def finish() -> None:
            reply(None)

        def marker_done(i: int, m: WritableTxnMarker, errs: dict[TopicPartition, ErrorCode]) -> None:
            offsets = [tp.partition for tp, e in errs.items() if e == ErrorCode.NONE
                       and tp.topic == GROUP_METADATA_TOPIC_NAME]
            if offsets:
                # Offsets committed in the transaction become visible (or vanish) with the marker.
                self.coordinator.markers.notify_offsets_completed(m.producer_id, offsets, m.transaction_result)
            by_topic: dict[str, list[wtmr.WritableTxnMarkerPartitionResult]] = {}
            for tp, e in errs.items():
                by_topic.setdefault(tp.topic, []).append(
                    wtmr.WritableTxnMarkerPartitionResult(partition_index=tp.partition, error_code=e))
            results[i] = wtmr.WritableTxnMarkerResult(producer_id=m.producer_id, topics=[
                wtmr.WritableTxnMarkerTopicResult(name=n, partitions=ps) for n, ps in by_topic.items()])
            remaining[0] -= 1
            if remaining[0] == 0:
                finish()

        if not req.markers:
            finish()
        for i, m in enumerate(req.markers):
            tps = [TopicPartition(t.name, p) for t in m.topics for p in t.partition_indexes]
            # v2 names the transaction's version (KIP-1228), by which the marker's epoch is checked.
            result = rm.append_txn_markers(m.producer_id, m.producer_epoch, m.coordinator_epoch, m.transaction_result,
                                           tps, timeout_ms=30_000,
                                           transaction_version=m.transaction_version if header.api_version >= 2 else 0)

            def convert(res: dict) -> dict[TopicPartition, ErrorCode]:
                return {tp: ErrorCode(r.error) for tp, r in res.items()}

            if isinstance(result, asyncio.Future):
                def done(f: asyncio.Future, i: int = i, m: WritableTxnMarker = m) -> None:
                    if f.cancelled() or f.exception() is not None:
                        errs = {TopicPartition(t.name, p): ErrorCode.UNKNOWN_SERVER_ERROR
                                for t in m.topics for p in t.partition_indexes}
                    else:
                        errs = convert(f.result())
                    marker_done(i, m, errs)
                result.add_done_callback(done)
            else:
                marker_done(i, m, convert(result))
        return reply.answer()

    # -- Describe / List ---------------------------------------------------------------------------

    def handle_describe_transactions(
        self, header: RequestHeader, req: DescribeTransactionsRequest, conn: KafkaConnection
    ) -> dtxr.DescribeTransactionsResponse:
        states = []
        for tid in req.transactional_ids:
            st = dtxr.TransactionState(error_code=0, transactional_id=tid, transaction_state="",
                                       transaction_timeout_ms=0, transaction_start_time_ms=-1, producer_id=-1,
                                       producer_epoch=-1, topics=[])
            if not self.authz.transactional_id(conn, Op.DESCRIBE, tid):
                st.error_code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                states.append(st)
                continue
            err, md = self.coordinator.describe(tid)
            st.error_code = err
            if md is not None:
                by_topic: dict[str, list[int]] = {}
                # Partitions of topics the principal may not describe are left out, as Kafka does.
                describable = self.authz.allowed(conn, Op.DESCRIBE, ResourceType.TOPIC,
                                                 (tp.topic for tp in md.topic_partitions))
                for tp in sorted((tp for tp in md.topic_partitions if tp.topic in describable),
                                 key=lambda x: (x.topic, x.partition)):
                    by_topic.setdefault(tp.topic, []).append(tp.partition)
                st.topics = [dtxr.TopicData(topic=t, partitions=ps) for t, ps in by_topic.items()]
                st.producer_id = md.producer_id
                st.producer_epoch = md.producer_epoch
                st.transaction_state = md.state.state_name
                st.transaction_timeout_ms = md.txn_timeout_ms
                st.transaction_start_time_ms = md.txn_start_timestamp
            states.append(st)
        return dtxr.DescribeTransactionsResponse(throttle_time_ms=0, transaction_states=states)

    def handle_list_transactions(
        self, header: RequestHeader, req: ListTransactionsRequest, conn: KafkaConnection
    ) -> ltr.ListTransactionsResponse:
        if not self.coordinator.active:
            return ltr.ListTransactionsResponse(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                                unknown_state_filters=[], transaction_states=[])
        duration = req.duration_filter if header.api_version >= 1 else -1
        pattern = req.transactional_id_pattern if header.api_version >= 2 else None
        err, unknown, found = self.coordinator.state_manager.list_transaction_states(
            set(req.producer_id_filters), set(req.state_filters), duration, pattern)
        visible = self.authz.allowed(conn, Op.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                                     (md.transactional_id for md in found))
        found = [md for md in found if md.transactional_id in visible]
        return ltr.ListTransactionsResponse(
            throttle_time_ms=0, error_code=err, unknown_state_filters=unknown,
            transaction_states=[ltr.TransactionState(transactional_id=md.transactional_id, producer_id=md.producer_id,
                                                     transaction_state=md.state.state_name) for md in found])

    # -- DescribeProducers -------------------------------------------------------------------------

    def handle_describe_producers(
        self, header: RequestHeader, req: DescribeProducersRequest, conn: KafkaConnection
    ) -> dpr.DescribeProducersResponse:
        rm = self.replica_manager
        topics = []
        readable = self.authz.allowed(conn, Op.READ, ResourceType.TOPIC, (t.name for t in req.topics))
        for t in req.topics:
            parts = []
            for i in t.partition_indexes:
                r = dpr.PartitionResponse(partition_index=i, error_code=0, error_message=None, active_producers=[])
                p = rm.partitions.get(TopicPartition(t.name, i))
                if t.name not in readable:
                    r.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                elif p is None or p.deleted:
                    r.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    for pid, e in sorted(p.log.active_producers().items()):
                        r.active_producers.append(dpr.ProducerState(
                            producer_id=pid, producer_epoch=e.producer_epoch, last_sequence=e.last_seq,
                            last_timestamp=e.last_timestamp, coordinator_epoch=e.coordinator_epoch,
                            current_txn_start_offset=-1 if e.current_txn_first_offset is None
                            else e.current_txn_first_offset))
                parts.append(r)
            topics.append(dpr.TopicResponse(name=t.name, partitions=parts))
        return dpr.DescribeProducersResponse(throttle_time_ms=0, topics=topics)
