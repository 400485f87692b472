"""The sink: Spark's Kafka sink columns, written so that a replayed micro-batch adds nothing.

Each Spark task writes its rows in one Kafka transaction whose transactional id is derived
from (query id, partition id) and stays the same across retries and restarts. Before writing,
the task calls InitProducerId, which fences any earlier attempt and aborts what that attempt
left open; it then reads its marker, the offsets group "<transactional id>" has committed,
which hold the next batch id this task has not yet written. If the marker says batch N is
done, the replay writes nothing. Otherwise the task produces its rows,
commits ``N + 1`` to the marker inside the same transaction (TxnOffsetCommit), and commits:
the rows and the marker become visible together, or not at all. See docs/spark.md.

Readers of the output topic must read committed data (isolation.level=read_committed,
librdkafka's default; this source and Spark's take ``kafka.isolation.level``) to not see
aborted attempts.
"""

from __future__ import annotations

import json
import logging
import random
import time
import uuid
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, Iterator, Mapping

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from rivulet.client.partitioner import murmur2_partition
from rivulet.protocol.compression import CODEC_IDS
from rivulet.protocol.errors import ErrorCode, KafkaError
from rivulet.protocol.messages import (
    add_offsets_to_txn_request as aotq,
    add_partitions_to_txn_request as aptq,
    end_txn_request as etq,
    init_producer_id_request as ipq,
    produce_request as prq,
    txn_offset_commit_request as tocq,
)
from rivulet.protocol.records import Record, encode_batch
from rivulet.spark import _wire
from rivulet.spark._wire import COORDINATOR_RETRIABLE, RETRIABLE, TP, Cluster

log = logging.getLogger("rivulet.spark")

QUERY_ID_KEY = "sql.streaming.queryId"
BATCH_ID_KEY = "streaming.sql.batchId"


def _bool(v: Any) -> bool:
    return str(v).strip().lower() in ("true", "1", "yes")


@dataclass
class SinkOptions:
    bootstrap: str
    topic: str | None = None
    transactional: bool = True
    idempotency_key: str = ""
    transaction_timeout_ms: int = 300_000
    batch_bytes: int = 1 << 20
    compression: int = 0
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "SinkOptions":
        o = {str(k).lower(): str(v) for k, v in options.items()}
        bootstrap = o.get("kafka.bootstrap.servers") or o.get("bootstrap.servers")
        if not bootstrap:
            raise ValueError("option kafka.bootstrap.servers (or bootstrap.servers) must be set")
        # As in Spark's Kafka sink: the topic option, else save(path) names the topic.
        opts = cls(bootstrap=bootstrap, topic=(o.get("topic") or o.get("path") or "").strip() or None)
        opts.transactional = _bool(o.get("transactional", "true"))
        opts.idempotency_key = o.get("idempotencykey", "")
        if "kafka.transaction.timeout.ms" in o:
            opts.transaction_timeout_ms = int(o["kafka.transaction.timeout.ms"])
        if "kafka.batch.size" in o:
            opts.batch_bytes = max(1024, int(o["kafka.batch.size"]))
        codec = o.get("kafka.compression.type", "none").strip().lower()
        if codec not in CODEC_IDS:
            raise ValueError(f"kafka.compression.type must be one of {sorted(CODEC_IDS)}, got {codec!r}")
        opts.compression = CODEC_IDS[codec]
        opts.extra = {k[6:]: v for k, v in o.items() if k.startswith("kafka.")}
        return opts


def validate_schema(schema: StructType, opts: SinkOptions) -> None:
    """The columns Spark's Kafka sink takes, with its types; other columns are ignored."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in fields:
        raise ValueError("the sink needs a 'value' column (string or binary)")
    for name in ("key", "value"):
        if name in fields and not isinstance(fields[name], (StringType, BinaryType)):
            raise ValueError(f"column {name!r} must be string or binary, not {fields[name].simpleString()}")
    if "topic" in fields and not isinstance(fields["topic"], StringType):
        raise ValueError(f"column 'topic' must be a string, not {fields['topic'].simpleString()}")
    if "topic" not in fields and opts.topic is None:
        raise ValueError("no topic: set the option 'topic' or give a 'topic' column")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise ValueError(f"column 'partition' must be an int, not {fields['partition'].simpleString()}")
    if "headers" in fields:
        t = fields["headers"]
        ok = isinstance(t, ArrayType) and isinstance(t.elementType, StructType) and \
            [f.name for f in t.elementType.fields] == ["key", "value"] and \
            isinstance(t.elementType.fields[0].dataType, StringType) and \
            isinstance(t.elementType.fields[1].dataType, BinaryType)
        if not ok:
            raise ValueError("column 'headers' must be array<struct<key: string, value: binary>>, "
                             f"not {t.simpleString()}")


@dataclass
class SinkCommit(WriterCommitMessage):
    partition_id: int
    rows: int
    skipped: bool
    transactional_id: str = ""


# ---------------------------------------------------------------- rows


def _as_bytes(v: Any) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode("utf-8")
    return bytes(v)


def iter_rows(batches: Iterator[Any], default_topic: str | None) -> Iterator[tuple[str, int | None, Record]]:
    """(topic, partition or None, record) for each row of Arrow record batches."""
    now = int(time.time() * 1000)
    for rb in batches:
        n = rb.num_rows
        if n == 0:
            continue
        names = {name.lower(): i for i, name in enumerate(rb.schema.names)}
        values = rb.column(names["value"]).to_pylist()
        keys = rb.column(names["key"]).to_pylist() if "key" in names else [None] * n
        if default_topic is not None:
            topics = [default_topic] * n
        else:
            topics = rb.column(names["topic"]).to_pylist()
        parts = rb.column(names["partition"]).to_pylist() if "partition" in names else [None] * n
        headers = rb.column(names["headers"]).to_pylist() if "headers" in names else None
        for i in range(n):
            t = topics[i]
            if t is None:
                raise ValueError("a row has a null topic; set the option 'topic' for a default")
            hs = headers[i] if headers is not None else None
            hl = [(h["key"], _as_bytes(h["value"])) for h in hs] if hs else []
            yield t, parts[i], Record(0, now, _as_bytes(keys[i]), _as_bytes(values[i]), hl)


def _peek(batches: Iterator[Any]) -> tuple[Any, Iterator[Any]]:
    """The first non-empty batch, and an iterator that still yields it."""
    for rb in batches:
        if rb.num_rows:
            return rb, chain([rb], batches)
    return None, iter(())


def _first_topic(rb: Any, default_topic: str | None) -> str:
    if default_topic is not None:
        return default_topic
    names = {name.lower(): i for i, name in enumerate(rb.schema.names)}
    t = rb.column(names["topic"])[0].as_py()
    if t is None:
        raise ValueError("a row has a null topic; set the option 'topic' for a default")
    return t


# ---------------------------------------------------------------- transactional producer


class TxnProducer:
    """The transactional producer protocol, minimal: one transaction, blocking, on the codec."""

    def __init__(self, cluster: Cluster, transactional_id: str, timeout_ms: int, compression: int = 0,
                 batch_bytes: int = 1 << 20) -> None:
        self.cluster = cluster
        self.tid = transactional_id
        self.timeout_ms = timeout_ms
        self.compression = compression
        self.batch_bytes = batch_bytes
        self.pid = -1
        self.epoch = -1
        self.seq: dict[TP, int] = {}
        self.added: set[TP] = set()
        self.pending: dict[TP, list[Record]] = {}
        self.pending_bytes: dict[TP, int] = {}
        self.sticky: dict[str, int] = {}
        self.counts: dict[str, int] = {}
        self.rows = 0

    # -------------------------------------------------- coordinator calls
    def _txn_call(self, req: Any, ok: Any = None, attempts: int = 40) -> Any:
        code = ErrorCode.NONE
        for attempt in range(attempts):
            node = self.cluster.coordinator(self.tid, 1)
            try:
                resp = self.cluster.conn(node).request(req)
            except (OSError, ConnectionError):
                self.cluster.drop(node)
                time.sleep(0.1)
                continue
            code = ErrorCode(getattr(resp, "error_code", 0) or (ok(resp) if ok else 0))
            if code == ErrorCode.NONE:
                return resp
            if code not in COORDINATOR_RETRIABLE:
                raise KafkaError(code, f"{type(req).__name__} for transactional id {self.tid!r}")
            time.sleep(min(0.02 * 2 ** attempt, 0.5))
        raise KafkaError(code, f"{type(req).__name__} for {self.tid!r}: retries exhausted")

    def init(self) -> None:
        """InitProducerId: fences earlier attempts and aborts (or completes) what they left open."""
        resp = self._txn_call(ipq.InitProducerIdRequest(transactional_id=self.tid,
                                                        transaction_timeout_ms=self.timeout_ms))
        self.pid, self.epoch = resp.producer_id, resp.producer_epoch

    def _add_partitions(self, tps: list[TP]) -> None:
        new = sorted(set(tps) - self.added)
        if not new:
            return
        by_topic: dict[str, list[int]] = {}
        for t, p in new:
            by_topic.setdefault(t, []).append(p)
        req = aptq.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=self.tid, v3_and_below_producer_id=self.pid,
            v3_and_below_producer_epoch=self.epoch,
            v3_and_below_topics=[aptq.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in by_topic.items()])

        def first_error(r: Any) -> int:
            return next((p.partition_error_code for t in r.results_by_topic_v3_and_below
                         for p in t.results_by_partition if p.partition_error_code), 0)
        self._txn_call(req, first_error)
        self.added.update(new)

    # -------------------------------------------------- data
    def partition_for(self, topic: str, partition: int | None, key: bytes | None) -> int:
        n = self.counts.get(topic)  # asked once per task: partitions may have been added
        if n is None:
            found = self.cluster.metadata([topic], auto_create=True)
            n = found.get(topic)
            if n is None:
                time.sleep(0.5)  # auto-created just now: ask again
                n = self.cluster.metadata([topic], auto_create=True).get(topic)
            if n is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} does not exist")
            self.counts[topic] = n
        if partition is not None:
            if not 0 <= partition < n:
                raise ValueError(f"partition {partition} is out of range for topic {topic!r} ({n} partitions)")
            return partition
        if key is not None:
            return murmur2_partition(key, n)
        p = self.sticky.get(topic)
        if p is None:
            p = self.sticky[topic] = random.randrange(n)
        return p

    def append(self, topic: str, partition: int | None, rec: Record) -> None:
        tp = (topic, self.partition_for(topic, partition, rec.key))
        lst = self.pending.get(tp)
        if lst is None:
            lst = self.pending[tp] = []
            self.pending_bytes[tp] = 0
        lst.append(rec)
        self.rows += 1
        size = self.pending_bytes[tp] + len(rec.value or b"") + len(rec.key or b"") + 16
        self.pending_bytes[tp] = size
        if size >= self.batch_bytes:
            if partition is None and rec.key is None:
                # Unkeyed rows stick to one partition per batch, then move on (Kafka's sticky).
                self.sticky[topic] = random.randrange(self.counts[topic])
            self.flush([tp])

    def flush(self, tps: list[TP] | None = None) -> None:
        tps = [tp for tp in (list(self.pending) if tps is None else tps) if self.pending.get(tp)]
        if not tps:
            return
        self._add_partitions(tps)
        by_node: dict[int, dict[TP, bytes]] = {}
        for tp in tps:
            recs = self.pending.pop(tp)
            self.pending_bytes.pop(tp, None)
            seq = self.seq.get(tp, 0)
            blob = encode_batch(recs, compression=self.compression, producer_id=self.pid,
                                producer_epoch=self.epoch, base_sequence=seq, transactional=True)
            self.seq[tp] = (seq + len(recs)) & 0x7FFFFFFF
            by_node.setdefault(self.cluster.leader(tp), {})[tp] = blob
        for batches in by_node.values():
            self._produce(batches)

    def _produce(self, batches: dict[TP, bytes], attempts: int = 20) -> None:
        todo = dict(batches)
        for attempt in range(attempts):
            by_node: dict[int, dict[TP, bytes]] = {}
            for tp, blob in todo.items():
                by_node.setdefault(self.cluster.leader(tp), {})[tp] = blob
            for node, part in by_node.items():
                topics: dict[str, list] = {}
                for (t, p), blob in part.items():
                    topics.setdefault(t, []).append(prq.PartitionProduceData(index=p, records=blob))
                req = prq.ProduceRequest(transactional_id=self.tid, acks=-1, timeout_ms=30000,
                                         topic_data=[prq.TopicProduceData(name=t, partition_data=ps)
                                                     for t, ps in topics.items()])
                try:
                    resp = self.cluster.conn(node).request(req)
                except (OSError, ConnectionError):
                    self.cluster.drop(node)
                    continue
                for tr in resp.responses:
                    for pr in tr.partition_responses:
                        tp = (tr.name, pr.index)
                        code = pr.error_code
                        if code in (0, ErrorCode.DUPLICATE_SEQUENCE_NUMBER):
                            todo.pop(tp, None)
                        elif code in RETRIABLE:
                            self.cluster.leaders.pop(tp, None)
                        else:
                            raise KafkaError(ErrorCode(code), f"Produce to {tp[0]}-{tp[1]}: {pr.error_message or ''}")
            if not todo:
                return
            time.sleep(min(0.05 * 2 ** attempt, 1.0))
        raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"Produce to {sorted(todo)}: retries exhausted")

    # -------------------------------------------------- end
    def commit(self, marker: TP, next_batch: int, metadata: str) -> None:
        """Flush, record the marker in the transaction, and commit."""
        self.flush()
        group = self.tid
        self._txn_call(aotq.AddOffsetsToTxnRequest(transactional_id=self.tid, producer_id=self.pid,
                                                   producer_epoch=self.epoch, group_id=group))
        req = tocq.TxnOffsetCommitRequest(
            transactional_id=self.tid, group_id=group, producer_id=self.pid, producer_epoch=self.epoch,
            generation_id=-1, member_id="", topics=[tocq.TxnOffsetCommitRequestTopic(
                name=marker[0], partitions=[tocq.TxnOffsetCommitRequestPartition(
                    partition_index=marker[1], committed_offset=next_batch, committed_metadata=metadata)])])
        self._group_call(group, req)
        self.end(True)

    def _group_call(self, group: str, req: Any, attempts: int = 40) -> None:
        code = ErrorCode.NONE
        for attempt in range(attempts):
            node = self.cluster.coordinator(group, 0)
            try:
                resp = self.cluster.conn(node).request(req)
            except (OSError, ConnectionError):
                self.cluster.drop(node)
                time.sleep(0.1)
                continue
            code = ErrorCode(next((p.error_code for t in resp.topics for p in t.partitions if p.error_code), 0))
            if code == ErrorCode.NONE:
                return
            if code not in COORDINATOR_RETRIABLE:
                raise KafkaError(code, f"TxnOffsetCommit for group {group!r}")
            time.sleep(min(0.02 * 2 ** attempt, 0.5))
        raise KafkaError(code, f"TxnOffsetCommit for group {group!r}: retries exhausted")

    def end(self, commit: bool) -> None:
        self._txn_call(etq.EndTxnRequest(transactional_id=self.tid, producer_id=self.pid,
                                         producer_epoch=self.epoch, committed=commit))

    def abort(self) -> None:
        if self.pid >= 0:
            try:
                self.end(False)
            except Exception as e:  # the next attempt's InitProducerId aborts it anyway
                log.warning("could not abort transaction %s: %s", self.tid, e)


# ---------------------------------------------------------------- one task's write


def transactional_id(write_id: str, partition_id: int) -> str:
    return f"rivulet-spark-{write_id}-{partition_id}"


def write_partition(opts: SinkOptions, batches: Iterator[Any], write_id: str, batch_id: int,
                    partition_id: int) -> SinkCommit:
    """Write one task's rows once per (write id, batch id, partition id), whatever the retries."""
    first, batches = _peek(iter(batches))
    if first is None:
        return SinkCommit(partition_id, 0, False)
    if not opts.transactional:
        return _write_plain(opts, batches, partition_id)
    tid = transactional_id(write_id, partition_id)
    marker = (_first_topic(first, opts.topic), 0)
    cluster = _wire.pooled(opts.bootstrap)
    txn = TxnProducer(cluster, tid, opts.transaction_timeout_ms, opts.compression, opts.batch_bytes)
    try:
        txn.init()
        # Every marker the group holds: the rows' first topic may differ between attempts.
        done = max([off for off, _ in cluster.committed(tid, None, require_stable=True).values()] or [-1])
        if done >= batch_id + 1:
            skipped = sum(rb.num_rows for rb in batches)
            log.info("%s: batch %d was already written; skipping %d rows", tid, batch_id, skipped)
            return SinkCommit(partition_id, 0, True, tid)
        for topic, part, rec in iter_rows(batches, opts.topic):
            txn.append(topic, part, rec)
        meta = json.dumps({"batch": batch_id, "rows": txn.rows})
        txn.commit(marker, batch_id + 1, meta)
        return SinkCommit(partition_id, txn.rows, False, tid)
    except BaseException:
        txn.abort()
        _wire.discard(opts.bootstrap)
        raise


def _write_plain(opts: SinkOptions, batches: Iterator[Any], partition_id: int) -> SinkCommit:
    """At-least-once, through Rivulet's idempotent producer (transactional=false)."""
    from rivulet import Producer
    conf = {"bootstrap.servers": opts.bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 5, "compression.type": {v: k for k, v in CODEC_IDS.items()}[opts.compression]}
    errors: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)

    p = Producer(conf)
    rows = 0
    try:
        for topic, part, rec in iter_rows(batches, opts.topic):
            while True:
                try:
                    p.produce(topic, rec.value, rec.key, -1 if part is None else part, on_delivery=on_delivery,
                              headers=rec.headers or None)
                    break
                except BufferError:
                    p.poll(0.1)
            rows += 1
        left = p.flush(120)
    finally:
        p.close(30)
    if errors or left:
        raise RuntimeError(f"{len(errors)} records failed, {left} undelivered: {errors[:3]}")
    return SinkCommit(partition_id, rows, False)


# ---------------------------------------------------------------- Spark writers


def _task_ids() -> tuple[str | None, int | None, int]:
    from pyspark import TaskContext
    ctx = TaskContext.get()
    if ctx is None:
        raise RuntimeError("the rivulet sink must run inside a Spark task")
    qid = ctx.getLocalProperty(QUERY_ID_KEY)
    bid = ctx.getLocalProperty(BATCH_ID_KEY)
    return qid, (int(bid) if bid is not None else None), ctx.partitionId()


class RivuletStreamWriter(DataSourceStreamArrowWriter):
    """Streaming sink: idempotent per (query id, batch id, partition id)."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[Any]) -> SinkCommit:
        qid, bid, pid = _task_ids()
        if qid is None or bid is None:
            raise RuntimeError("no streaming query id / batch id in the task's properties")
        write_id = qid + (f"-{self.opts.idempotency_key}" if self.opts.idempotency_key else "")
        return write_partition(self.opts, iterator, write_id, bid, pid)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        rows = sum(m.rows for m in messages if isinstance(m, SinkCommit))
        skipped = sum(1 for m in messages if isinstance(m, SinkCommit) and m.skipped)
        log.info("batch %d: %d rows written to Rivulet%s", batchId, rows,
                 f" ({skipped} tasks found it already written)" if skipped else "")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("batch %d aborted; its open transactions are aborted by the retry", batchId)


class RivuletBatchWriter(DataSourceArrowWriter):
    """Batch sink. Task retries do not duplicate: the write id is fixed when the job is
    planned. Inside foreachBatch the write id is the streaming query id and batch id, so a
    replayed batch does not duplicate either (give ``idempotencyKey`` to tell apart two
    writes in the same batch)."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts
        self.job_id = uuid.uuid4().hex

    def write(self, iterator: Iterator[Any]) -> SinkCommit:
        qid, bid, pid = _task_ids()
        key = self.opts.idempotency_key or (self.opts.topic or "")
        if qid is not None and bid is not None:
            write_id = f"{qid}-fb-{key}" if key else f"{qid}-fb"
            return write_partition(self.opts, iterator, write_id, bid, pid)
        return write_partition(self.opts, iterator, self.job_id, 0, pid)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        pass
