"""The sink: Spark's Kafka sink columns, written so that a replayed micro-batch adds nothing.

Each Spark task writes its rows in one Kafka transaction, with Rivulet's transactional
producer, whose transactional id is derived from (query id, partition id) and stays the same
across batches, retries and restarts. The marker, the offsets group "<transactional id>" has
committed, holds the next batch id the id has not yet written. A worker's first task of a
partition calls init_transactions (InitProducerId), which fences any other producer of the id
and ends what it left open, then reads the marker. If the marker says batch N is done, the
replay writes nothing. Otherwise the task commits ``N + 1`` to the marker inside its
transaction (TxnOffsetCommit), produces its rows and commits: rows and marker become visible
together, or not at all. The worker keeps the producer, and what it knows of the marker, for
its next task of the partition: as long as no other InitProducerId fenced it, no one else has
written since (its epoch is checked before it takes a row). See docs/spark.md.

Readers of the output topic must read committed data (isolation.level=read_committed,
librdkafka's default; this source and Spark's take ``kafka.isolation.level``) to not see
aborted attempts.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from itertools import chain
from typing import TYPE_CHECKING, Callable, Iterator, Mapping

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from rivulet.client import blocking, core
from rivulet.client.types import ConsumerGroupMetadata, Payload, TopicPartition
from rivulet.common.time import now_ms
from rivulet.protocol.compression import CODEC_IDS
from rivulet.protocol.errors import ErrorCode
from rivulet.spark._worker import freeze_imported
from rivulet.spark._options import PRODUCER_REFUSED, SINK_KAFKA_OPTIONS, SINK_OPTIONS, read_options, security_options
from rivulet.protocol.records import Record

if TYPE_CHECKING:
    import pyarrow as pa

    from rivulet.client.errors import KafkaError
    from rivulet.client.sync import Producer
    from rivulet.client.types import Message

log = logging.getLogger("rivulet.spark")

# A sink producer's configuration: its values hashable, as WorkerProducers keeps producers by it.
SinkProducerConf = dict[str, str | int]
QUERY_ID_KEY = "sql.streaming.queryId"
BATCH_ID_KEY = "streaming.sql.batchId"


def _bool(v: object) -> bool:
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
    security: dict[str, str] = field(default_factory=dict)  # security.protocol, sasl.* and ssl.*

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "SinkOptions":
        o, bootstrap = read_options(options, PRODUCER_REFUSED, SINK_KAFKA_OPTIONS, SINK_OPTIONS, "sink")
        # As in Spark's Kafka sink: the topic option, else save(path) names the topic.
        opts = cls(bootstrap=bootstrap, topic=(o.get("topic") or o.get("path") or "").strip() or None,
                   security=security_options(o))
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
        opts.security = security_options(o)
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


def _as_bytes(v: Payload) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode("utf-8")
    return bytes(v)


def iter_rows(batches: Iterator[pa.RecordBatch], default_topic: str | None) -> Iterator[tuple[str, int | None, Record]]:
    """(topic, partition or None, record) for each row of Arrow record batches."""
    now = now_ms()
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


def _peek(batches: Iterator[pa.RecordBatch]) -> tuple[pa.RecordBatch | None, Iterator[pa.RecordBatch]]:
    """The first non-empty batch, and an iterator that still yields it."""
    for rb in batches:
        if rb.num_rows:
            return rb, chain([rb], batches)
    return None, iter(())


def _first_topic(rb: pa.RecordBatch, default_topic: str | None) -> str:
    if default_topic is not None:
        return default_topic
    names = {name.lower(): i for i, name in enumerate(rb.schema.names)}
    t = rb.column(names["topic"])[0].as_py()
    if t is None:
        raise ValueError("a row has a null topic; set the option 'topic' for a default")
    return t


# ---------------------------------------------------------------- one task's write


def transactional_id(write_id: str, partition_id: int) -> str:
    return f"rivulet-spark-{write_id}-{partition_id}"


def _producer_conf(opts: SinkOptions, transactional: str | None) -> SinkProducerConf:
    conf: SinkProducerConf = {
        **opts.security, "bootstrap.servers": opts.bootstrap, "client.id": "rivulet-spark", "enable.idempotence": True,
        "acks": "all", "linger.ms": 5, "batch.size": opts.batch_bytes,
        # Keyed rows go where Spark's Kafka sink (the Java producer) puts them.
        "partitioner": "murmur2_random",
        "compression.type": {v: k for k, v in CODEC_IDS.items()}[opts.compression], **opts.security}
    if transactional is not None:
        conf["transactional.id"] = transactional
        conf["transaction.timeout.ms"] = opts.transaction_timeout_ms
    return conf


@dataclass
class KeptProducer:
    """A producer a worker keeps, with what it knows of its marker: the next batch id its
    transactional id has not written (-1: none written; unused without a transactional id).
    Only the producer holding the transactional id's latest epoch can have committed since it
    read the marker, so this stays true until another InitProducerId for the id fences it."""

    producer: Producer
    written_up_to: int = -1
    marker_topic: str = ""  # where its last marker went: a topic that exists


class WorkerProducers:
    """The producers a Python worker keeps between tasks, by their whole configuration
    (transactional id included), so that the next micro-batch's task for the same partition
    reuses its producer: no InitProducerId, no marker read, no new connections. PySpark runs
    one task at a time in a worker and keeps the worker for later tasks
    (spark.python.worker.reuse).

    Only a producer that ended its last task cleanly (committed, or found the batch written)
    is given back; any failure closes it. Whether a kept transactional producer may still
    write is the coordinator's to say: ``write_partition`` has its epoch checked before it
    takes a row."""

    def __init__(self, limit: int = 16) -> None:
        self.limit = limit  # idle producers kept; the least recently used beyond it are closed
        self._idle: OrderedDict[tuple[tuple[str, str | int], ...], KeptProducer] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _key(conf: SinkProducerConf) -> tuple[tuple[str, str | int], ...]:
        return tuple(sorted(conf.items()))

    def take(self, conf: SinkProducerConf) -> KeptProducer | None:
        """The kept producer of this configuration, if any (it is no longer kept)."""
        with self._lock:
            return self._idle.pop(self._key(conf), None)

    def give_back(self, conf: SinkProducerConf, kept: KeptProducer) -> None:
        with self._lock:
            old = self._idle.pop(self._key(conf), None)
            self._idle[self._key(conf)] = kept
            evicted = [old] if old is not None else []
            while len(self._idle) > self.limit:
                evicted.append(self._idle.popitem(last=False)[1])
        for e in evicted:
            _close_quietly(e.producer)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = list(self._idle.values()), OrderedDict()
        for k in idle:
            _close_quietly(k.producer)


def _new_producer(conf: SinkProducerConf) -> Producer:
    from rivulet import Producer
    return Producer(conf)


def _close_quietly(p: Producer) -> None:
    try:
        p.close(5)
    except Exception as e:
        log.warning("could not close a producer: %s", e)


# This process's producers: a Python worker's, kept from task to task.
PRODUCERS = WorkerProducers()


def _bytes_column(col: pa.Array) -> list[bytes | None]:
    """A string or binary Arrow column as bytes (strings re-typed in Arrow, not per row)."""
    import pyarrow as pa
    if pa.types.is_string(col.type):
        col = col.cast(pa.binary())
    elif pa.types.is_large_string(col.type):
        col = col.cast(pa.large_binary())
    return col.to_pylist()


def _produce_rows(p: Producer, batches: Iterator[pa.RecordBatch], topic: str | None,
                  on_delivery: Callable | None = None) -> int:
    """Queue every row; ``on_delivery`` is called per record (a transaction needs none: a
    record that fails makes its commit fail)."""
    produce = p.produce
    rows = 0
    for rb in batches:
        n = rb.num_rows
        if n == 0:
            continue
        names = {name.lower(): i for i, name in enumerate(rb.schema.names)}
        if topic is None or "partition" in names or "headers" in names:
            for t, part, rec in iter_rows([rb], topic):  # rows that choose their own topic, partition or headers
                _produce(p, t, rec.value, rec.key, -1 if part is None else part, on_delivery, rec.timestamp,
                         rec.headers or None)
            rows += n
            continue
        # The common case: the topic option, keys and values only; one loop, no object per row.
        now = now_ms()
        values = _bytes_column(rb.column(names["value"]))
        keys = _bytes_column(rb.column(names["key"])) if "key" in names else [None] * n
        for k, v in zip(keys, values, strict=True):
            try:
                produce(topic, v, k, -1, on_delivery, now)
            except BufferError:
                _produce(p, topic, v, k, -1, on_delivery, now, None)
        rows += n
    return rows


def _produce(p: Producer, topic: str, value: bytes | None, key: bytes | None, partition: int,
             on_delivery: Callable | None, timestamp: int, headers: list[tuple[str, bytes | None]] | None) -> None:
    """One record, waiting for room in the producer's queue when it is full."""
    while True:
        try:
            p.produce(topic, value, key, partition, on_delivery, timestamp, headers)
            return
        except BufferError:
            p.poll(0.1)


def _written_up_to(opts: SinkOptions, tid: str) -> tuple[int, str]:
    """The marker: the next batch id the task of ``tid`` has not written (-1: none written),
    and the topic it is kept on ("" if none)."""
    # Every marker the group holds: the rows' first topic may differ between attempts.
    marks = blocking.pooled(opts.bootstrap, "rivulet-spark", opts.security).committed(tid, None, require_stable=True)
    best = max(marks.items(), key=lambda m: m[1].offset, default=None)
    return (best[1].offset, best[0].topic) if best is not None else (-1, "")


def write_partition(opts: SinkOptions, batches: Iterator[pa.RecordBatch], write_id: str, batch_id: int,
                    partition_id: int, producers: WorkerProducers | None = PRODUCERS,
                    in_worker: bool = True) -> SinkCommit:
    """Write one task's rows once per (write id, batch id, partition id), whatever the retries.
    ``producers``: where the producer is kept for the next batch (None: closed at the end, for
    a write id no later task uses). ``in_worker``: False when the driver writes."""
    if in_worker:
        freeze_imported()
    first, batches = _peek(iter(batches))
    if first is None:
        return SinkCommit(partition_id, 0, False)
    if not opts.transactional:
        return _write_plain(opts, batches, partition_id, producers)
    tid = transactional_id(write_id, partition_id)
    marker_topic = _first_topic(first, opts.topic)
    timeout = opts.transaction_timeout_ms / 1000
    conf = _producer_conf(opts, tid)
    kept = producers.take(conf) if producers is not None else None
    k = kept or KeptProducer(_new_producer(conf))
    try:
        if kept is not None and k.written_up_to < batch_id + 1:
            k.producer.begin_transaction()
            try:
                # A kept producer's marker goes first: its AddOffsetsToTxn has the coordinator
                # check the producer's epoch before a row is taken, so a producer that another
                # attempt's InitProducerId fenced is found out while the task can start afresh.
                # (To the topic of its last marker: this batch's may not exist yet.)
                _add_marker(k.producer, k.marker_topic, tid, batch_id, timeout)
            except Exception as e:
                log.info("%s: the producer kept from an earlier task cannot write (%s); initializing a new one",
                         tid, e)
                _close_quietly(k.producer)
                kept, k = None, KeptProducer(_new_producer(conf))
        if kept is None:
            k.producer.init_transactions(timeout)  # fences earlier attempts and ends what they left open
            k.written_up_to, k.marker_topic = _written_up_to(opts, tid)
        if k.written_up_to >= batch_id + 1:  # a kept producer's own commit, or the marker read
            skipped = sum(rb.num_rows for rb in batches)
            log.info("%s: batch %d was already written; skipping %d rows", tid, batch_id, skipped)
            _keep(producers, conf, k)
            return SinkCommit(partition_id, 0, True, tid)
        if kept is None:
            k.producer.begin_transaction()
        rows = _produce_rows(k.producer, batches, opts.topic)
        if kept is None:  # after the rows, which create the topic if it is new
            _add_marker(k.producer, marker_topic, tid, batch_id, timeout)
            k.marker_topic = marker_topic
        k.producer.commit_transaction(timeout)  # fails if a record failed
        k.written_up_to = batch_id + 1
        _keep(producers, conf, k)
        return SinkCommit(partition_id, rows, False, tid)
    except BaseException:
        try:
            k.producer.abort_transaction(30)
        except Exception as e:  # the next attempt's InitProducerId aborts it anyway
            log.warning("could not abort transaction %s: %s", tid, e)
        _close_quietly(k.producer)
        blocking.discard(opts.bootstrap, opts.security)
        raise


def write_from_driver(opts: SinkOptions, table: pa.Table, query_id: str, batch_id: int) -> SinkCommit:
    """Write a micro-batch's few rows (an Arrow table in foreachBatch) from the driver, in one
    transaction, once per (query, batch, topic) whatever the replays.

    The same scheme as a task's write, with the transactional id
    ``rivulet-spark-<query id>-fb-<topic>-driver-0``: the driver's process keeps its producer
    from batch to batch (always the same process, so never fenced by a sibling, as a Python
    worker's can be), a restarted driver's InitProducerId fences the old one's, and the marker
    makes a replayed batch a no-op. What it saves is the Spark job of a Python data source
    write (planning and committing in Python processes beside the driver, a Python worker per
    task), which costs far more than the transaction for a handful of rows. A replay gives
    the batch the same rows, so it takes the same path."""
    return write_partition(opts, iter(table.to_batches()), f"{query_id}-fb-{opts.topic or ''}-driver", batch_id, 0,
                           in_worker=False)


def _add_marker(p: Producer, topic: str, tid: str, batch_id: int, timeout: float) -> None:
    """The marker ``batch_id + 1`` into the transaction (AddOffsetsToTxn, TxnOffsetCommit)."""
    p.send_offsets_to_transaction([TopicPartition(topic, 0, batch_id + 1, json.dumps({"batch": batch_id}))],
                                  ConsumerGroupMetadata(tid), timeout)


def _keep(producers: WorkerProducers | None, conf: SinkProducerConf, k: KeptProducer) -> None:
    if producers is not None:
        producers.give_back(conf, k)
    else:
        k.producer.close(30)


def marker_prefix(write_id: str) -> str:
    """What the transactional ids, and marker groups, of one write id start with."""
    return transactional_id(write_id, 0)[:-1]


def delete_query_markers(bootstrap: str, query_id: str, security: Mapping[str, str] | None = None) -> list[str]:
    """Delete the marker groups of a streaming query (its own writes and its foreachBatch
    writes). Safe only when no batch of the query can be replayed: every batch in its
    checkpoint's offset log is also in its commit log."""
    from rivulet.client.admin.client import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap, **(security or {})})
    try:
        listed = admin.list_consumer_groups().result(30).valid
    finally:
        admin.close()
    groups = sorted(g.group_id for g in listed if g.group_id.startswith(marker_prefix(query_id)))
    delete_markers(bootstrap, groups, security)
    return groups


def delete_markers(bootstrap: str, groups: list[str], security: Mapping[str, str] | None = None) -> None:
    """Delete marker groups that no retry can need any more (failures only logged: a left-over
    group costs nothing but a line in ``groups list``)."""
    cluster = blocking.pooled(bootstrap, "rivulet-spark", security)
    for g in groups:
        try:
            code = core.read_delete_groups(cluster.send_to_coordinator(
                g, core.GROUP, core.delete_groups_request([g]), lambda r: r.results[0].error_code)).get(g, 0)
        except Exception as e:
            log.warning("could not delete marker group %s: %s", g, e)
            continue
        if code not in (ErrorCode.NONE, ErrorCode.GROUP_ID_NOT_FOUND):
            log.warning("could not delete marker group %s: %s", g, ErrorCode(code).name)


def _write_plain(opts: SinkOptions, batches: Iterator[pa.RecordBatch], partition_id: int,
                 producers: WorkerProducers | None) -> SinkCommit:
    """At-least-once, through Rivulet's idempotent producer (transactional=false)."""
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(err)

    conf = _producer_conf(opts, None)
    k = (producers.take(conf) if producers is not None else None) or KeptProducer(_new_producer(conf))
    try:
        rows = _produce_rows(k.producer, batches, opts.topic, on_delivery)
        left = k.producer.flush(120)
        if errors or left:
            raise RuntimeError(f"{len(errors)} records failed, {left} undelivered: {errors[:3]}")
    except BaseException:
        _close_quietly(k.producer)
        raise
    _keep(producers, conf, k)
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

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
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

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        qid, bid, pid = _task_ids()
        key = self.opts.idempotency_key or (self.opts.topic or "")
        if qid is not None and bid is not None:
            write_id = f"{qid}-fb-{key}" if key else f"{qid}-fb"
            return write_partition(self.opts, iterator, write_id, bid, pid)
        # A job's own write id: no later task will use its producers.
        return write_partition(self.opts, iterator, self.job_id, 0, pid, producers=None)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        # A plain batch job is never replayed once it has committed (a new job is a new write
        # id), so its markers have served; inside foreachBatch they guard the query's replays.
        own = marker_prefix(self.job_id)
        delete_markers(self.opts.bootstrap, sorted({m.transactional_id for m in messages if isinstance(m, SinkCommit)
                                                    and m.transactional_id.startswith(own)}), self.opts.security)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        pass
