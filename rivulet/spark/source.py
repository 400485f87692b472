"""The source: Spark's Kafka source options and semantics over Rivulet's wire client.

Offsets are Spark's Kafka offsets: ``{topic: {partition: offset}}`` JSON, ends exclusive, -2
for earliest and -1 for latest in user-given JSON. The driver side (planning) resolves offsets
and splits ranges; the executor side (``read_range``) fetches one range and yields Arrow
record batches. Everything that crosses to executors is plain data: the reader keeps its
connections in attributes that are dropped when pickled.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import ssl
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, ParamSpec, TypeVar

from pyspark.sql.datasource import (DataSourceReader, DataSourceStreamReader, InputPartition,
                                    SimpleDataSourceStreamReader)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from rivulet.protocol.errors import ErrorCode, ApiError
from rivulet.client import blocking, core
from rivulet.client.blocking import BlockingClient, BlockingConnection, Pending
from rivulet.client.connection import AuthenticationFailed, NotKafkaBroker
from rivulet.security.client_config import sasl_credentials
from rivulet.client.core import EARLIEST, LATEST
from rivulet.common.time import SYSTEM_CLOCK
from rivulet.common.types import TopicPartition as TP
from rivulet.client.config import ssl_context
from rivulet.spark._options import (CONSUMER_REFUSED, SOURCE_KAFKA_OPTIONS, SOURCE_OPTIONS, read_options,
                                    security_options)
from rivulet.spark._values import ValueFormat, decode_batch
from rivulet.spark._worker import freeze_imported
from rivulet.protocol.messages import fetch_request as fq, fetch_response as fr

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("rivulet.spark")

BACKOFF = core.Backoff()  # Kafka's defaults: 100 ms doubling to 1 s, with jitter
API_TIMEOUT_S = 60  # Kafka's default.api.timeout.ms
OffsetMap = dict[TP, int]
_P = ParamSpec("_P")
_T = TypeVar("_T")

FAIL_ON_DATA_LOSS_HINT = (
    "Some data may have been lost: the offsets are gone from the broker (aged out by retention, "
    "removed by DeleteRecords, or the topic was deleted) before the query read them. If losing "
    "them is acceptable, set the source option failOnDataLoss to false and the query will skip "
    "them with a warning.")
SKIP_HINT = ("Skipping them because failOnDataLoss is false; set it to true to fail the query "
             "on data loss instead.")


class DataLossError(RuntimeError):
    """Offsets the query must read are no longer in the log (failOnDataLoss=true)."""


@dataclass(frozen=True)
class TimestampBound:
    """startingTimestamp / endingTimestamp (``every``), or the ...OffsetsByTimestamp JSON
    (``by_partition``): the first offset whose timestamp is at or after the time."""

    every: int | None = None
    by_partition: OffsetMap | None = None


Bound = str | OffsetMap | TimestampBound
_DURATION = re.compile(r"^\s*(\d+)\s*(us|ms|s|m|min|h|d)?\s*$", re.IGNORECASE)
_DURATION_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str, name: str) -> int:
    """Spark's time strings: '15m', '30s', '500ms', '2h'; a bare number is milliseconds."""
    m = _DURATION.match(text)
    if not m:
        raise ValueError(f"option {name}: expected a duration like 15m, 30s or 500ms, got {text!r}")
    return int(int(m.group(1)) * _DURATION_MS[(m.group(2) or "ms").lower()])


def not_transient(e: BaseException) -> bool:
    """A failed TLS handshake or SASL authentication, or a peer that is not Kafka: retrying cannot
    help (Kafka's SslAuthenticationException and SaslAuthenticationException are not retriable)."""
    return (isinstance(e, (AuthenticationFailed, NotKafkaBroker, ssl.SSLError))
            or isinstance(e.__cause__, ssl.SSLError))


def report_data_loss(message: str, fail: bool) -> None:
    if fail:
        raise DataLossError(f"{message}. {FAIL_ON_DATA_LOSS_HINT}")
    log.warning("%s. %s", message, SKIP_HINT)


# ---------------------------------------------------------------- options



def _bool(v: object, name: str) -> bool:
    s = str(v).strip().lower()
    if s in ("true", "1", "yes"):
        return True
    if s in ("false", "0", "no"):
        return False
    raise ValueError(f"option {name} must be true or false, got {v!r}")


def _positive(o: Mapping[str, str], key: str, default: int | None) -> int | None:
    """Option ``key`` (lower case) as a positive int, or ``default`` when not given."""
    if key not in o:
        return default
    n = int(o[key])
    if n <= 0:
        raise ValueError(f"option {key} must be positive, got {n}")
    return n


def parse_offsets_json(text: str, name: str) -> OffsetMap:
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise ValueError(f"option {name}: expected earliest, latest or JSON like "
                         f'{{"topicA":{{"0":23,"1":-1}}}}, got {text!r} ({e})') from None
    if not isinstance(obj, dict):
        raise ValueError(f"option {name}: expected a JSON object of topics, got {text!r}")
    out: OffsetMap = {}
    for topic, parts in obj.items():
        if not isinstance(parts, dict):
            raise ValueError(f"option {name}: expected {{partition: offset}} for topic {topic!r}")
        for p, off in parts.items():
            out[(str(topic), int(p))] = int(off)
    return out


def offsets_to_json(offsets: Mapping[TP, int]) -> dict[str, dict[str, int]]:
    """Spark's Kafka offset layout: topics sorted, partitions sorted numerically."""
    out: dict[str, dict[str, int]] = {}
    for (t, p) in sorted(offsets):
        out.setdefault(t, {})[str(p)] = int(offsets[(t, p)])
    return out


def offsets_from_json(obj: Mapping[str, Mapping[str, int]] | None) -> OffsetMap:
    return {(t, int(p)): int(o) for t, parts in (obj or {}).items() for p, o in parts.items()}


@dataclass
class SourceOptions:
    """The reader's options, parsed once on the driver; picklable."""

    bootstrap: str
    subscribe: list[str] | None = None
    pattern: str | None = None
    assign: list[TP] | None = None
    starting: Bound = "latest"
    ending: Bound = "latest"
    # startingOffsetsByTimestampStrategy: what a partition with no record at or after the
    # starting time gets: "error" fails the query, "latest" starts at the end
    timestamp_strategy: str = "error"
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    read_committed: bool = False
    group_id: str = ""
    commit_offsets: bool = False
    # readOnDriver: the driver's planner process reads each micro-batch (RivuletDriverStreamReader)
    read_on_driver: bool = False
    fetch_max_bytes: int = 16 << 20
    fetch_max_wait_ms: int = 500
    check_crcs: bool = True
    poll_timeout_ms: int = 120_000
    extra: dict[str, str] = field(default_factory=dict)
    security: dict[str, str] = field(default_factory=dict)  # security.protocol, sasl.* and ssl.*
    # valueFormat: values decoded through a schema registry (its reader schema set at planning)
    value_format: ValueFormat | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool) -> "SourceOptions":
        o, bootstrap = read_options(options, CONSUMER_REFUSED, SOURCE_KAFKA_OPTIONS, SOURCE_OPTIONS, "source")
        strategies = [k for k in ("subscribe", "subscribepattern", "assign") if o.get(k, "").strip()]
        if len(strategies) != 1:
            raise ValueError("exactly one of the options subscribe, subscribePattern or assign must be set, "
                             f"got {strategies or 'none'}")
        opts = cls(bootstrap=bootstrap, security=security_options(o))
        if "subscribe" in strategies:
            opts.subscribe = sorted({t.strip() for t in o["subscribe"].split(",") if t.strip()})
            if not opts.subscribe:
                raise ValueError("option subscribe names no topic")
        elif "subscribepattern" in strategies:
            opts.pattern = o["subscribepattern"].strip()
            re.compile(opts.pattern)
        else:
            try:
                spec = json.loads(o["assign"])
                opts.assign = sorted({(str(t), int(p)) for t, ps in spec.items() for p in ps})
            except (ValueError, AttributeError, TypeError):
                raise ValueError(f'option assign: expected JSON like {{"topicA":[0,1]}}, got {o["assign"]!r}') \
                    from None
        opts.starting = cls._bound(o.get("startingoffsets", "latest" if streaming else "earliest"),
                                   "startingOffsets")
        if opts.starting == "latest" and not streaming:
            raise ValueError("startingOffsets=latest is not valid for batch queries")
        if isinstance(opts.starting, dict) and not streaming and LATEST in opts.starting.values():
            raise ValueError("startingOffsets: -1 (latest) is not valid for batch queries")
        if "endingoffsets" in o:
            if streaming:
                raise ValueError("endingOffsets is not valid for streaming queries")
            opts.ending = cls._bound(o["endingoffsets"], "endingOffsets")
            if opts.ending == "earliest" or (isinstance(opts.ending, dict) and EARLIEST in opts.ending.values()):
                raise ValueError("endingOffsets: earliest (-2) is not valid")
        # Spark's precedence: ...Timestamp over ...OffsetsByTimestamp over ...Offsets.
        start_ts, end_ts = cls._timestamp_bound(o, "starting"), cls._timestamp_bound(o, "ending")
        if start_ts is not None:
            opts.starting = start_ts
        if end_ts is not None:
            if streaming:
                raise ValueError("endingTimestamp / endingOffsetsByTimestamp are not valid for streaming queries")
            opts.ending = end_ts
        strategy = o.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
        if strategy not in ("error", "latest"):
            raise ValueError(f"option startingOffsetsByTimestampStrategy must be error or latest, got {strategy!r}")
        opts.timestamp_strategy = strategy
        if "maxtriggerdelay" in o:
            opts.max_trigger_delay_ms = parse_duration_ms(o["maxtriggerdelay"], "maxTriggerDelay")
        opts.max_offsets_per_trigger = _positive(o, "maxoffsetspertrigger", opts.max_offsets_per_trigger)
        opts.min_partitions = _positive(o, "minpartitions", opts.min_partitions)
        opts.max_records_per_partition = _positive(o, "maxrecordsperpartition", opts.max_records_per_partition)
        opts.min_offsets_per_trigger = _positive(o, "minoffsetspertrigger", opts.min_offsets_per_trigger)
        if (opts.min_offsets_per_trigger is not None and opts.max_offsets_per_trigger is not None
                and opts.min_offsets_per_trigger > opts.max_offsets_per_trigger):
            raise ValueError(f"minOffsetsPerTrigger ({opts.min_offsets_per_trigger}) is higher than "
                             f"maxOffsetsPerTrigger ({opts.max_offsets_per_trigger})")
        opts.fail_on_data_loss = _bool(o.get("failondataloss", "true"), "failOnDataLoss")
        opts.include_headers = _bool(o.get("includeheaders", "false"), "includeHeaders")
        iso = o.get("kafka.isolation.level", "read_uncommitted").strip().lower()  # Spark's default
        if iso not in ("read_committed", "read_uncommitted"):
            raise ValueError(f"kafka.isolation.level must be read_committed or read_uncommitted, got {iso!r}")
        opts.read_committed = iso == "read_committed"
        opts.commit_offsets = _bool(o.get("commitoffsets", "false"), "commitOffsets")
        opts.read_on_driver = _bool(o.get("readondriver", "false"), "readOnDriver")
        if opts.read_on_driver and not streaming:
            raise ValueError("readOnDriver is only for streaming queries")
        opts.check_crcs = _bool(o.get("kafka.check.crcs", "true"), "kafka.check.crcs")
        opts.fetch_max_bytes = int(o.get("kafka.fetch.max.bytes", opts.fetch_max_bytes))
        opts.fetch_max_wait_ms = int(o.get("kafka.fetch.max.wait.ms", opts.fetch_max_wait_ms))
        opts.poll_timeout_ms = int(o.get("kafkaconsumer.polltimeoutms", opts.poll_timeout_ms))
        opts.value_format = ValueFormat.parse(o, opts.subscribe)
        # Only commitOffsets=true uses a group (Spark's source commits nothing): kafka.group.id
        # if given, else a group named after what the query reads, stable across restarts.
        opts.group_id = o.get("kafka.group.id", "")
        if not opts.group_id:
            what = json.dumps([opts.subscribe, opts.pattern, opts.assign, bootstrap], sort_keys=True)
            prefix = o.get("groupidprefix", "spark-rivulet-source")
            opts.group_id = f"{prefix}-{hashlib.sha1(what.encode()).hexdigest()[:12]}"
        return opts

    @staticmethod
    def _timestamp_bound(o: Mapping[str, str], side: str) -> TimestampBound | None:
        if f"{side}timestamp" in o:
            try:
                return TimestampBound(every=int(o[f"{side}timestamp"]))
            except ValueError:
                raise ValueError(f"option {side}Timestamp must be milliseconds since the epoch, "
                                 f"got {o[side + 'timestamp']!r}") from None
        if f"{side}offsetsbytimestamp" in o:
            return TimestampBound(by_partition=parse_offsets_json(o[f"{side}offsetsbytimestamp"],
                                                                  f"{side}OffsetsByTimestamp"))
        return None

    @staticmethod
    def _bound(v: str, name: str) -> str | OffsetMap:
        s = v.strip()
        if s.lower() in ("earliest", "latest"):
            return s.lower()
        return parse_offsets_json(s, name)

    @property
    def isolation_level(self) -> int:
        return 1 if self.read_committed else 0


# ---------------------------------------------------------------- driver side


class OffsetReader:
    """What the driver asks the broker: partitions, earliest/latest offsets, commits."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._cluster: BlockingClient | None = None

    @property
    def cluster(self) -> BlockingClient:
        if self._cluster is None:
            self._cluster = BlockingClient(self.opts.bootstrap, client_id="rivulet-spark-driver",
                                           sasl=sasl_credentials(self.opts.security),
                                           ssl_context=ssl_context(self.opts.security))
        return self._cluster

    def _retry(self, fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        # Through a leader's death (a new one is elected within seconds): for as long as the
        # Java admin client Spark plans with retries a call (default.api.timeout.ms).
        deadline = time.monotonic() + API_TIMEOUT_S
        attempt = 0
        while True:
            try:
                return fn(*args, **kwargs)
            except (OSError, ConnectionError) as e:
                if not_transient(e):
                    raise
                self.close()
                attempt += 1
                if time.monotonic() >= deadline:
                    raise ConnectionError(f"cannot reach the broker at {self.opts.bootstrap}: {e}") from e
                time.sleep(BACKOFF.delay(attempt))

    def partitions(self) -> set[TP]:
        return self._retry(self._partitions)

    def _partitions(self) -> set[TP]:
        o = self.opts
        if o.assign is not None:
            return set(o.assign)
        if o.subscribe is not None:
            found = self.cluster.metadata(o.subscribe)
        else:
            rx = re.compile(o.pattern or "")
            found = {t: n for t, n in self.cluster.metadata(None).items() if rx.fullmatch(t)}
        return {(t, p) for t, n in found.items() for p in range(n)}

    def list(self, specs: dict[TP, int]) -> OffsetMap:
        if not specs:
            return {}
        return self._retry(self.cluster.list_offsets, specs, self.opts.isolation_level)

    def earliest(self, tps: set[TP] | None = None) -> OffsetMap:
        return self.list({tp: EARLIEST for tp in (self.partitions() if tps is None else tps)})

    def latest(self, tps: set[TP] | None = None) -> OffsetMap:
        return self.list({tp: LATEST for tp in (self.partitions() if tps is None else tps)})

    def resolve(self, bound: Bound, name: str) -> OffsetMap:
        """earliest / latest / specific offsets (with -2 and -1) / times to concrete offsets."""
        tps = self.partitions()
        if isinstance(bound, TimestampBound):
            return self._resolve_times(bound, name, tps)
        if bound == "earliest":
            return self.earliest(tps)
        if bound == "latest":
            return self.latest(tps)
        assert isinstance(bound, dict)
        if set(bound) != tps:
            raise ValueError(
                f"{name} with specific offsets must name every partition the query reads "
                f"(-2 for earliest, -1 for latest). Given: {sorted(bound)}; partitions: {sorted(tps)}")
        special = {tp: off for tp, off in bound.items() if off in (EARLIEST, LATEST)}
        resolved = self.list(special)
        return {tp: resolved.get(tp, off) for tp, off in bound.items()}

    def _resolve_times(self, bound: TimestampBound, name: str, tps: set[TP]) -> OffsetMap:
        if bound.by_partition is not None:
            if set(bound.by_partition) != tps:
                raise ValueError(
                    f"{name}ByTimestamp must name every partition the query reads. "
                    f"Given: {sorted(bound.by_partition)}; partitions: {sorted(tps)}")
            times = dict(bound.by_partition)
        else:
            times = {tp: bound.every for tp in tps}
        found = self.list(times)  # type: ignore[arg-type]
        missing = {tp for tp, off in found.items() if off < 0}
        if missing and name == "startingOffsets" and self.opts.timestamp_strategy == "error":
            tp = min(missing)
            raise ValueError(
                f"No offset matched the timestamp {times[tp]} in partition {tp[0]}-{tp[1]} (no record at or after "
                "it). Set startingOffsetsByTimestampStrategy=latest to start such partitions at their end.")
        if missing:  # Spark: an ending time, or the "latest" strategy, falls back to the end
            found.update(self.latest(missing))
        return found

    def commit(self, offsets: OffsetMap) -> None:
        self._retry(self.cluster.commit_offsets, self.opts.group_id, offsets, "spark-rivulet-source")

    def close(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None


@dataclass
class RangePartition(InputPartition):
    """One Spark task's work: offsets [start, end) of one topic-partition."""

    topic: str
    partition: int
    start: int
    end: int

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        self.topic, self.partition, self.start, self.end = topic, partition, start, end


@dataclass
class RangesPartition(InputPartition):
    """One Spark task's work in a small batch: several ranges, read one after another."""

    ranges: list[RangePartition]

    def __init__(self, ranges: list[RangePartition]) -> None:
        self.ranges = ranges


# Each task of a Python data source costs a fixed hand-over between the JVM and a Python worker,
# more than reading a few thousand records: ranges go together into tasks of at least this many
# offsets (a batch of 4 x 25,000, the rate benchmark's, keeps a task per range).
TASK_MIN_RECORDS = 16_384


def group_small_ranges(ranges: list[RangePartition], min_partitions: int | None,
                       max_records: int | None) -> list[InputPartition]:
    """Spark's tasks for a batch's ranges: one per range, except in a small batch, whose ranges
    share fewer tasks. Only the ranges decide (not timing or load), so a replayed batch gets
    the same tasks, as a sink that keys its writes on the task's partition id needs.
    minPartitions and maxRecordsPerPartition ask for tasks of their own: no grouping then."""
    total = sum(r.end - r.start for r in ranges)
    tasks = min(len(ranges), max(1, total // TASK_MIN_RECORDS))
    if min_partitions or max_records or tasks >= len(ranges):
        return list(ranges)
    groups: list[list[RangePartition]] = [[] for _ in range(tasks)]
    sizes = [0] * tasks
    for r in sorted(ranges, key=lambda r: (-(r.end - r.start), r.topic, r.partition, r.start)):
        i = sizes.index(min(sizes))  # the least loaded task; the first of equals
        groups[i].append(r)
        sizes[i] += r.end - r.start
    return [RangesPartition(sorted(g, key=lambda r: (r.topic, r.partition, r.start))) for g in groups]


def plan_ranges(start: OffsetMap, end: OffsetMap, reader: OffsetReader, fail_on_data_loss: bool) -> list[InputPartition]:
    """Ranges for a batch from ``start`` to ``end``, with Spark's Kafka source's data-loss checks:
    partitions that appeared start at their earliest offset (data loss if that is not 0),
    partitions that disappeared and offsets that went backwards are data loss."""
    new = set(end) - set(start)
    new_start: OffsetMap = reader.earliest(new) if new else {}
    if set(new_start) != new:
        report_data_loss(f"Cannot find the earliest offsets of {sorted(new - set(new_start))}", fail_on_data_loss)
    for tp, off in sorted(new_start.items()):
        if off != 0:
            report_data_loss(f"Added partition {tp[0]}-{tp[1]} starts from {off} instead of 0", fail_on_data_loss)
    gone = set(start) - set(end)
    if gone:
        report_data_loss(f"Partitions {sorted(gone)} are gone", fail_on_data_loss)
    froms = {**start, **new_start}
    ranges: list[RangePartition] = []
    for tp in sorted(end):
        if tp not in froms:
            continue
        a, b = froms[tp], end[tp]
        if b < a:
            report_data_loss(f"Partition {tp[0]}-{tp[1]}'s offset went from {a} back to {b}", fail_on_data_loss)
            continue
        ranges.append(RangePartition(tp[0], tp[1], a, b))
    return plan_tasks(ranges, reader.opts)


def plan_tasks(ranges: list[RangePartition], opts: SourceOptions) -> list[InputPartition]:
    """Spark's tasks for a batch's ranges, for the stream and the batch reader alike: empty
    ranges dropped, big ones split (minPartitions, maxRecordsPerPartition), small ones grouped."""
    split = split_ranges([r for r in ranges if r.end > r.start], opts.min_partitions,
                         opts.max_records_per_partition)
    return group_small_ranges(split, opts.min_partitions, opts.max_records_per_partition)


def split_ranges(ranges: list[RangePartition], min_partitions: int | None,
                 max_records: int | None) -> list[RangePartition]:
    """Split big ranges: none above ``max_records``, and about ``min_partitions`` in all, in
    proportion to size, as Spark's KafkaOffsetRangeCalculator does."""
    def cut(r: RangePartition, parts: int) -> list[RangePartition]:
        size = r.end - r.start
        parts = max(1, min(parts, size))
        bounds = [r.start + size * i // parts for i in range(parts + 1)]
        return [RangePartition(r.topic, r.partition, bounds[i], bounds[i + 1]) for i in range(parts)]

    if max_records:
        ranges = [piece for r in ranges for piece in cut(r, -(-(r.end - r.start) // max_records))]
    if min_partitions and len(ranges) < min_partitions:
        total = sum(r.end - r.start for r in ranges)
        if total > 0:
            ranges = [piece for r in ranges
                      for piece in cut(r, max(1, round((r.end - r.start) / total * min_partitions)))]
    return ranges


def rate_limit(limit: int, start: OffsetMap, latest: OffsetMap, new_start: OffsetMap) -> OffsetMap:
    """Spread ``limit`` records over the partitions in proportion to their backlog, never
    starving a partition with a backlog entirely (Spark's maxOffsetsPerTrigger)."""
    sizes: dict[TP, int] = {}
    for tp, end in latest.items():
        begin = start.get(tp, new_start.get(tp))
        if begin is not None and end - begin > 0:
            sizes[tp] = end - begin
    total = sum(sizes.values())
    if total < 1:
        return dict(latest)
    out: OffsetMap = {}
    for tp, end in latest.items():
        if tp not in sizes:
            out[tp] = end
            continue
        begin = start.get(tp, new_start.get(tp))
        share = limit * sizes[tp] / total
        n = int(share) if share >= 1 else (1 if share > 0 else 0)
        out[tp] = min(end, begin + n)
    return out


class RivuletStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader: admission control, Trigger.AvailableNow, informational commits."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._offsets = OffsetReader(opts)
        self._available_now: OffsetMap | None = None
        self._latest: OffsetMap = {}
        self._reported: OffsetMap = {}
        self._last_trigger_ms = SYSTEM_CLOCK.monotonic_ms()  # for minOffsetsPerTrigger's maxTriggerDelay

    def __getstate__(self) -> dict[str, object]:
        # Executors get only the options: no sockets, no driver state.
        return {"opts": self.opts}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__init__(state["opts"])  # type: ignore[misc]

    def initialOffset(self) -> dict:
        return offsets_to_json(self._offsets.resolve(self.opts.starting, "startingOffsets"))

    def getDefaultReadLimit(self) -> ReadLimit:
        # minOffsetsPerTrigger is applied in latestOffset whatever the limit (there is no
        # composite limit in the Python API); Spark passes ReadAllAvailable for Trigger.Once.
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = self._offsets.latest()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = offsets_from_json(start)
        # Spark asks for the next batch only once the previous one is done, so `start` is
        # processed: report it (Spark calls commit() late or, after the last batch of an
        # AvailableNow run, never).
        self._report_progress(begin)
        if self._available_now is not None:
            latest = dict(self._available_now)
        else:
            latest = self._offsets.latest()
        self._latest = latest
        new = set(latest) - set(begin)
        new_start = self._offsets.earliest(new) if new else {}
        if self._should_wait(begin, latest, new_start, limit):
            return offsets_to_json(begin)  # no batch yet: Spark sees end == start
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(limit.max_rows, begin, latest, new_start)
        else:
            end = latest
        self._last_trigger_ms = SYSTEM_CLOCK.monotonic_ms()
        return offsets_to_json(end)

    def _should_wait(self, begin: OffsetMap, latest: OffsetMap, new_start: OffsetMap, limit: ReadLimit) -> bool:
        """minOffsetsPerTrigger: hold the batch back until that many offsets are waiting or
        maxTriggerDelay has passed since the last one (never under AvailableNow or Once)."""
        wanted = self.opts.min_offsets_per_trigger
        if not wanted or self._available_now is not None or isinstance(limit, ReadAllAvailable):
            return False
        waiting = sum(max(0, end - begin.get(tp, new_start.get(tp, end))) for tp, end in latest.items())
        if waiting >= wanted:
            return False
        return SYSTEM_CLOCK.monotonic_ms() - self._last_trigger_ms < self.opts.max_trigger_delay_ms

    def reportLatestOffset(self) -> dict | None:
        return offsets_to_json(self._latest) if self._latest else None

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return plan_ranges(offsets_from_json(start), offsets_from_json(end), self._offsets,
                           self.opts.fail_on_data_loss)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_task(self.opts, partition)

    def commit(self, end: dict) -> None:
        self._report_progress(offsets_from_json(end))

    def _report_progress(self, offsets: OffsetMap) -> None:
        # Information only (the checkpoint is the source of truth): lets `rivulet groups
        # describe` show how far behind the query is.
        if not self.opts.commit_offsets or not offsets or offsets == self._reported:
            return
        try:
            self._offsets.commit(offsets)
            self._reported = dict(offsets)
        except Exception as e:  # never fail a query over its progress report
            log.warning("could not commit offsets to group %s: %s", self.opts.group_id, e)

    def stop(self) -> None:
        self._offsets.close()


class RivuletDriverStreamReader(SimpleDataSourceStreamReader, SupportsTriggerAvailableNow):
    """readOnDriver=true: the driver's planner process reads each micro-batch when it picks the
    batch's end, and PySpark hands the Arrow batches to the JVM with the plan (its "prefetch and
    cache" of a simple stream reader), so the batch's task reads them from the block manager
    without a Python worker. A batch replayed after a restart is read by one task on an
    executor (``readBetweenOffsets``). Either way a batch is ONE Spark partition, so a sink
    that keys its writes on the task's partition id sees the same plan on a replay.

    Planning (admission control, data-loss checks, offsets) and reading are the stream
    reader's and ``read_task``'s: the offsets JSON is the same."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._planner = RivuletStreamReader(opts)

    def __getstate__(self) -> dict[str, SourceOptions]:
        return {"opts": self.opts}

    def __setstate__(self, state: dict[str, SourceOptions]) -> None:
        self.__init__(state["opts"])  # type: ignore[misc]

    def initialOffset(self) -> dict:
        return self._planner.initialOffset()

    def prepareForTriggerAvailableNow(self) -> None:
        self._planner.prepareForTriggerAvailableNow()

    def read(self, start: dict) -> tuple[Iterator[pa.RecordBatch], dict]:
        # PySpark gives a simple reader no ReadLimit: maxOffsetsPerTrigger and
        # minOffsetsPerTrigger apply here, as the stream reader applies its default limit.
        end = self._planner.latestOffset(start, self._planner.getDefaultReadLimit())
        if offsets_from_json(end) == offsets_from_json(start):
            return iter(()), start  # no batch; the same JSON, which PySpark compares as text
        return self._read(start, end), end

    def readBetweenOffsets(self, start: dict, end: dict) -> Iterator[pa.RecordBatch]:
        return self._read(start, end)

    def _read(self, start: dict, end: dict) -> Iterator[pa.RecordBatch]:
        # A list's iterator: PySpark copies the cached iterator (copy.copy) to send it, which a
        # generator does not allow.
        return iter([batch for part in self._planner.partitions(start, end) for batch in read_task(self.opts, part)])

    def commit(self, end: dict) -> None:
        self._planner.commit(end)


class RivuletBatchReader(DataSourceReader):
    """Batch reader over [startingOffsets, endingOffsets)."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[InputPartition]:
        reader = OffsetReader(self.opts)
        try:
            start = reader.resolve(self.opts.starting, "startingOffsets")
            end = reader.resolve(self.opts.ending, "endingOffsets")
            if set(start) != set(end):
                raise ValueError(f"startingOffsets and endingOffsets name different partitions: "
                                 f"{sorted(set(start) ^ set(end))}")
            ranges = []
            for tp in sorted(end):
                a, b = start[tp], end[tp]
                if b < a:
                    report_data_loss(f"Partition {tp[0]}-{tp[1]}: ending offset {b} is below starting offset {a}",
                                     self.opts.fail_on_data_loss)
                    continue
                ranges.append(RangePartition(tp[0], tp[1], a, b))
            parts = plan_tasks(ranges, self.opts)
        finally:
            reader.close()
        # Spark wants at least one partition; an empty range reads nothing.
        return parts or [RangePartition("", -1, 0, 0)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_task(self.opts, partition)


# ---------------------------------------------------------------- executor side


def _fetch_request(opts: SourceOptions, tp: TP, offset: int, max_bytes: int) -> fq.FetchRequest:
    return core.fetch_request({tp: core.FetchPosition(offset)}, opts.fetch_max_wait_ms, 1, max_bytes, max_bytes, opts.isolation_level)


class _Fetcher:
    """Fetches of one range on one connection, with at most one request ahead."""

    def __init__(self, opts: SourceOptions, tp: TP) -> None:
        self.opts = opts
        self.tp = tp
        self.cluster = blocking.pooled(opts.bootstrap, "rivulet-spark", opts.security)
        self.node = -1
        self.conn: BlockingConnection | None = None
        self.ahead: int | None = None   # offset of the request in flight
        self.pending: Pending[fr.FetchResponse] | None = None  # and the request
        self.bytes_per_record = 1024.0
        self.floor = 0                  # raised when a batch did not fit the size asked for

    def size_for(self, offset: int, end: int) -> int:
        # Ask for about what the range still holds: a small micro-batch range must not pull
        # (and decode) megabytes of backlog behind it.
        want = int((end - offset) * self.bytes_per_record * 1.1) + 65536
        return max(65536, self.floor, min(self.opts.fetch_max_bytes, want))

    def send(self, offset: int, end: int) -> None:
        if self.conn is None:
            self.node = self.cluster.leader(self.tp)
            self.conn = self.cluster.conn(self.node)
        self.pending = self.conn.submit(_fetch_request(self.opts, self.tp, offset, self.size_for(offset, end)))
        self.ahead = offset

    def receive(self) -> tuple[int, fr.PartitionData]:
        assert self.conn is not None and self.ahead is not None and self.pending is not None
        offset, self.ahead = self.ahead, None
        pending, self.pending = self.pending, None
        # The frame is read into the connection's reused buffer: read_range is done with the
        # previous answer (its rows are in Arrow buffers of their own) before it asks for the next.
        resp = self.conn.receive(pending, reuse_buffer=True)
        if resp.error_code:
            raise ApiError(ErrorCode(resp.error_code), "Fetch")
        for t in resp.responses:
            for pd in t.partitions:
                if pd.partition_index == self.tp[1]:
                    return offset, pd
        raise ApiError(ErrorCode.UNKNOWN_SERVER_ERROR, f"Fetch response without {self.tp}")

    def reset(self) -> None:
        """Forget the connection (and whatever it has in flight)."""
        if self.conn is not None:
            self.cluster.drop(self.node)
        self.conn = None
        self.ahead = self.pending = None


def read_task(opts: SourceOptions, part: InputPartition) -> Iterator[pa.RecordBatch]:
    """A task's records: its range, or its ranges one after another."""
    if isinstance(part, RangesPartition):
        for rp in part.ranges:
            yield from read_range(opts, rp)
    else:
        assert isinstance(part, RangePartition), part
        yield from read_range(opts, part)


def read_range(opts: SourceOptions, rp: RangePartition) -> Iterator[pa.RecordBatch]:
    """Yield the records of [rp.start, rp.end) of one partition as Arrow record batches."""
    # The decoder (pyarrow.compute, crc32c, the codecs) only here: the driver-side planner
    # process, one per query, imports this module too and reads no record (unless readOnDriver).
    from rivulet.arrow.records import Chunk, decode_into, next_offset_after
    freeze_imported()
    if rp.end <= rp.start:
        return
    tp = TP(rp.topic, rp.partition)
    end = rp.end
    offset = rp.start
    f = _Fetcher(opts, tp)
    failures = 0
    stalled_since: float | None = None
    # A leader that died is replaced once its ZooKeeper session expires and the controller
    # elects another: as the Java consumer under Spark, keep trying (with fresh metadata) for
    # kafkaConsumer.pollTimeoutMs before failing the task.
    failing_since: float | None = None

    def given_up() -> bool:
        nonlocal failing_since
        failing_since = failing_since or time.monotonic()
        return time.monotonic() - failing_since > opts.poll_timeout_ms / 1000
    try:
        while offset < end:
            try:
                if f.ahead is None:
                    f.send(offset, end)
                asked, pd = f.receive()
            except (OSError, ConnectionError) as e:
                if not_transient(e):
                    raise
                failures += 1
                if given_up():
                    raise ConnectionError(f"fetching {tp[0]}-{tp[1]} at offset {offset}: {e} "
                                          f"(for {opts.poll_timeout_ms} ms)") from e
                f.reset()
                blocking.discard(opts.bootstrap, opts.security)
                f.cluster = blocking.pooled(opts.bootstrap, "rivulet-spark", opts.security)
                time.sleep(BACKOFF.delay(failures))
                continue
            assert asked == offset, (asked, offset)
            code = pd.error_code
            if code == ErrorCode.OFFSET_OUT_OF_RANGE:
                failures += 1
                if failures > 5:
                    raise ApiError(ErrorCode(code), f"Fetch {tp[0]}-{tp[1]} at offset {offset}")
                offset = _out_of_range(f, opts, tp, offset, end)
                continue
            if code in core.RETRIABLE:
                failures += 1
                if given_up():
                    raise ApiError(ErrorCode(code), f"Fetch {tp[0]}-{tp[1]}")
                f.reset()
                f.cluster.cluster.forget_leader(*tp)
                time.sleep(BACKOFF.delay(failures))
                continue
            if code:
                raise ApiError(ErrorCode(code), f"Fetch {tp[0]}-{tp[1]} at offset {offset}")
            failures = 0
            failing_since = None
            records = pd.records
            if records is None or len(records) == 0:
                # Nothing at the offset although planning saw data up to `end`: the log ends
                # before the range does (truncated, or the topic was recreated).
                hw = pd.last_stable_offset if opts.read_committed and pd.last_stable_offset >= 0 \
                    else pd.high_watermark
                if hw <= offset:
                    report_data_loss(f"{tp[0]}-{tp[1]}: offsets [{offset}, {end}) are not in the log "
                                     f"(it ends at {hw})", opts.fail_on_data_loss)
                    return
                stalled_since = stalled_since or time.monotonic()
                if time.monotonic() - stalled_since > opts.poll_timeout_ms / 1000:
                    raise TimeoutError(f"cannot fetch {tp[0]}-{tp[1]} at offset {offset} within "
                                       f"{opts.poll_timeout_ms} ms")
                time.sleep(0.05)
                continue
            stalled_since = None
            nxt = next_offset_after(records, offset, end)
            if nxt <= offset:
                # Only part of a batch came back (a broker without KIP-74): ask for more.
                failures += 1
                if failures > 20:
                    raise ApiError(ErrorCode.CORRUPT_MESSAGE, f"{tp[0]}-{tp[1]}: no complete batch at {offset}")
                f.floor = min(max(2 * len(records), 2 * f.floor, 1 << 20), 1 << 30)
                continue
            if offset < nxt < end:
                f.send(nxt, end)  # the broker reads ahead while this response is decoded
            aborted = [(a.first_offset, a.producer_id) for a in pd.aborted_transactions or []] \
                if opts.read_committed else None
            chunk = Chunk(opts.include_headers, over=records)  # in place: no copy of the records
            dec = decode_into(chunk, records, offset, end, opts.read_committed, aborted, opts.check_crcs)
            if dec.first_offset is not None and dec.first_offset > offset and pd.log_start_offset > offset:
                # Offsets below the log start were deleted before we read them. (Gaps above
                # it are compaction or transaction markers: nothing is lost.)
                report_data_loss(f"{tp[0]}-{tp[1]}: offsets [{offset}, {min(pd.log_start_offset, end)}) "
                                 f"were deleted (log start offset {pd.log_start_offset})", opts.fail_on_data_loss)
            if chunk.n:
                lo, hi = chunk.bounds(offset, end)
                f.bytes_per_record = max(16.0, len(records) / chunk.n)
                if hi > lo:
                    batch = chunk.to_arrow(tp[0], tp[1], lo, hi)
                    yield batch if opts.value_format is None else decode_batch(opts.value_format, batch)
            if dec.next_offset <= offset:
                raise ApiError(ErrorCode.CORRUPT_MESSAGE, f"{tp[0]}-{tp[1]}: no complete batch at offset {offset}")
            if dec.next_offset != nxt and f.ahead is not None:
                f.reset()  # the request sent ahead asked for the wrong offset
            offset = dec.next_offset
    finally:
        if f.ahead is not None:
            f.reset()


def _out_of_range(f: _Fetcher, opts: SourceOptions, tp: TP, offset: int, end: int) -> int:
    """Spark's handling of an offset the log no longer has: fail, or skip to what remains."""
    f.reset()
    bounds = f.cluster.list_offsets({tp: EARLIEST}, opts.isolation_level)
    earliest = bounds[tp]
    latest = f.cluster.list_offsets({tp: LATEST}, opts.isolation_level)[tp]
    report_data_loss(f"{tp[0]}-{tp[1]}: offset {offset} is out of range; the log holds [{earliest}, {latest})",
                     opts.fail_on_data_loss)
    if offset < earliest < end:
        log.warning("%s-%d: skipping offsets [%d, %d)", tp[0], tp[1], offset, earliest)
        return earliest
    if earliest <= offset < latest:
        return offset  # back in range (the log moved under us): try again
    log.warning("%s-%d: skipping offsets [%d, %d)", tp[0], tp[1], offset, end)
    return end
