"""The client core: every request a Rivulet client makes, as data and pure functions.

For each call this module says how to build the request, how to read the answer (into plain
result types, or a raised ``ApiError``), what an error code asks of the caller (retry,
refresh metadata, find the coordinator again, or give up) and how long to wait before the next
attempt. Nothing here does I/O: the asyncio client (``KafkaClient``) and the blocking client
(``rivulet.client.blocking``) send what it builds and feed back what comes in, as h11 and
aiokafka separate protocol logic from transports. The tests exercise it without sockets.
"""

from __future__ import annotations

import enum
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Generic, Iterable, Mapping, NamedTuple, Protocol, TypeVar

from rivulet.common.types import TopicPartition as TP
from rivulet.protocol import fetch_session as fs
from rivulet.protocol import framing
from rivulet.protocol.errors import ErrorCode, ApiError
from rivulet.protocol.schema import ZERO_UUID, Request, Struct
from rivulet.protocol.messages import (
    consumer_group_describe_request as cgdq,
    consumer_group_heartbeat_request as cghq,
    share_group_heartbeat_request as sghq,
    create_acls_request as caq,
    create_acls_response as car,
    delete_acls_request as daq,
    delete_acls_response as dar,
    describe_acls_request as dsaq,
    describe_acls_response as dsar,
    add_offsets_to_txn_request as aotq,
    add_partitions_to_txn_request as aptq,
    add_partitions_to_txn_response as aptr,
    alter_client_quotas_request as acqq,
    alter_client_quotas_response as acqr,
    alter_configs_request as acq,
    alter_configs_response as acr,
    alter_user_scram_credentials_request as ausq,
    alter_user_scram_credentials_response as ausr,
    api_versions_request as avq,
    api_versions_response as avr,
    create_partitions_request as cpq,
    create_partitions_response as cpr,
    create_topics_request as ctq,
    create_topics_response as ctr,
    delete_groups_request as dgq,
    delete_groups_response as dgr,
    delete_records_request as drq,
    delete_records_response as drr,
    delete_topics_request as dtq,
    delete_topics_response as dtr,
    describe_client_quotas_request as dcqq,
    describe_client_quotas_response as dcqr,
    describe_configs_request as dcq,
    describe_log_dirs_request as dldq,
    describe_log_dirs_response as dldr,
    list_config_resources_request as lcrq,
    list_config_resources_response as lcrr,
    describe_user_scram_credentials_request as dusq,
    describe_user_scram_credentials_response as dusr,
    describe_configs_response as dcr,
    describe_groups_request as dgrq,
    describe_groups_response as dgrr,
    end_txn_request as etq,
    fetch_request as fq,
    fetch_response as fr,
    find_coordinator_request as fcq,
    find_coordinator_response as fcr,
    heartbeat_request as hbq,
    incremental_alter_configs_request as iacq,
    incremental_alter_configs_response as iacr,
    init_producer_id_request as ipq,
    init_producer_id_response as ipr,
    join_group_request as jgq,
    leave_group_request as lvq,
    list_groups_request as lgq,
    list_groups_response as lgr,
    list_offsets_request as loq,
    list_offsets_response as lor,
    metadata_request as mq,
    offset_commit_request as ocq,
    offset_commit_response as ocr,
    offset_delete_request as odq,
    offset_delete_response as odr,
    offset_fetch_request as ofq,
    offset_fetch_response as ofr,
    offset_for_leader_epoch_request as oleq,
    offset_for_leader_epoch_response as oler,
    produce_request as prq,
    share_group_describe_request as sgdq,
    streams_group_describe_request as stgdq,
    sync_group_request as sgq,
    txn_offset_commit_request as tocq,
    txn_offset_commit_response as tocr,
)
from rivulet.security.acls import AclBinding, AclBindingFilter, binding_of

T = TypeVar("T")
V = TypeVar("V")
R = TypeVar("R", bound=Struct)  # a request's response message

# Versions above these change a request's shape or meaning in ways the clients do not use:
# topic ids instead of names (Produce and Fetch v13+, OffsetCommit v10+), grouped OffsetFetch
# (v8+), broker-to-broker batching (AddPartitionsToTxn v4+), transaction.version 2 (Produce
# v12, TxnOffsetCommit v5, EndTxn v5), two-phase commit (InitProducerId v6), a top-level
# error (Metadata v13), GROUP_ID_NOT_FOUND for a missing group (DescribeGroups v6). Brokers
# support the caps; the codec knows Kafka 4.3's newest versions.
MAX_VERSIONS: dict[int, int] = {
    0: 11,   # Produce
    1: 12,   # Fetch
    3: 12,   # Metadata
    8: 9,    # OffsetCommit
    9: 7,    # OffsetFetch
    15: 5,   # DescribeGroups
    22: 5,   # InitProducerId
    24: 3,   # AddPartitionsToTxn
    26: 4,   # EndTxn
    28: 4,   # TxnOffsetCommit
}

EARLIEST = -2
LATEST = -1
MAX_TIMESTAMP = -3

GROUP = 0            # FindCoordinator key types
TRANSACTION = 1
SHARE = 2            # a share partition's key, "group:topicId:partition"


# ---------------------------------------------------------------------------- backoff


@dataclass(frozen=True, slots=True)
class Backoff:
    """Kafka's retry backoff: ``retry.backoff.ms`` doubled per failed attempt up to
    ``retry.backoff.max.ms``, each wait spread by +-20% so that clients do not retry in step."""

    initial_ms: float = 100
    max_ms: float = 1000
    multiplier: float = 2.0
    jitter: float = 0.2

    def delay_ms(self, attempts: int, uniform: Callable[[float, float], float] = random.uniform) -> float:
        """Milliseconds to wait before the next retry, ``attempts`` retries made so far: the
        initial backoff before the first."""
        if self.max_ms <= self.initial_ms:
            return self.max_ms
        raw = self.initial_ms * self.multiplier ** min(max(attempts, 0), 64)
        if self.jitter > 0:
            raw *= uniform(1 - self.jitter, 1 + self.jitter)
        return min(raw, self.max_ms)

    def delay(self, attempts: int) -> float:
        """The same in seconds, for sleeping."""
        return self.delay_ms(attempts) / 1000


@dataclass(slots=True)
class Attempts:
    """Failures of one operation so far, against an optional deadline (monotonic seconds)."""

    backoff: Backoff
    deadline: float | None = None
    failures: int = 0
    clock: Callable[[], float] = time.monotonic

    def next_delay(self) -> float:
        """Seconds to wait before trying again; 0 when the deadline leaves no time."""
        d = self.backoff.delay(self.failures)
        self.failures += 1
        if self.deadline is not None:
            d = min(d, max(0.0, self.deadline - self.clock()))
        return d

    def expired(self) -> bool:
        return self.deadline is not None and self.clock() >= self.deadline


# ---------------------------------------------------------------------------- errors


class Action(enum.Enum):
    """What an error code asks of the client that got it."""

    OK = "ok"
    RETRY = "retry"                            # the same request again, after a backoff
    REFRESH_METADATA = "refresh metadata"      # the leader moved or is unknown: ask Metadata, retry
    FIND_COORDINATOR = "find coordinator"      # the coordinator moved: FindCoordinator, retry
    FAIL = "fail"


# Kafka's InvalidMetadataException family: what the client knows of leaders is stale.
METADATA_ERRORS: frozenset[int] = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.REPLICA_NOT_AVAILABLE, ErrorCode.BROKER_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_ID,
    ErrorCode.INCONSISTENT_TOPIC_ID,
})
COORDINATOR_ERRORS: frozenset[int] = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})
# Retriable where they stand: the same broker will answer differently later.
RETRY_ERRORS: frozenset[int] = frozenset({
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.NETWORK_EXCEPTION, ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    ErrorCode.OFFSET_NOT_AVAILABLE, ErrorCode.UNSTABLE_OFFSET_COMMIT, ErrorCode.THROTTLING_QUOTA_EXCEEDED,
    ErrorCode.CORRUPT_MESSAGE, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
    ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH,
})
RETRIABLE: frozenset[int] = METADATA_ERRORS | COORDINATOR_ERRORS | RETRY_ERRORS

# A transactional producer with one of these can no longer be used: another instance took
# over its transactional id, or it may not use it.
TXN_FATAL_ERRORS: frozenset[int] = frozenset({
    ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED,
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ErrorCode.UNSUPPORTED_VERSION, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, ErrorCode.INVALID_TRANSACTION_TIMEOUT,
})


def action(code: int) -> Action:
    if code == 0:
        return Action.OK
    if code in COORDINATOR_ERRORS:
        return Action.FIND_COORDINATOR
    if code in METADATA_ERRORS:
        return Action.REFRESH_METADATA
    if code in RETRY_ERRORS:
        return Action.RETRY
    return Action.FAIL


def check(code: int, what: str | None = None) -> None:
    """Raise the broker's error for a non-zero code."""
    if code:
        raise ApiError(ErrorCode(code), what)


def first_error(codes: Iterable[int]) -> int:
    """The error that counts among several partitions' codes: OPERATION_NOT_ATTEMPTED only
    accompanies another partition's real error."""
    codes = [c for c in codes if c]
    real = [c for c in codes if c != ErrorCode.OPERATION_NOT_ATTEMPTED]
    return (real or codes or [0])[0]


def by_topic(tps: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    """Partitions grouped by topic, in the order given."""
    out: dict[str, list[int]] = {}
    for t, p in tps:
        out.setdefault(t, []).append(p)
    return out


@dataclass(slots=True)
class PartitionResults(Generic[T]):
    """A per-partition answer: values where it succeeded, error codes where it did not."""

    ok: dict[TP, T] = field(default_factory=dict)
    errors: dict[TP, int] = field(default_factory=dict)

    def first_error(self) -> int:
        return first_error(self.errors.values())

    def raise_first(self, what: str) -> None:
        for tp, code in self.errors.items():
            raise ApiError(ErrorCode(code), f"{what} {tp.topic}-{tp.partition}")


def read_partitions(topics: Iterable[Struct], value_of: Callable[[Struct], T]) -> PartitionResults[T]:
    """Sort a per-partition answer (topics of partitions with ``error_code``) into results."""
    out: PartitionResults[T] = PartitionResults()
    for t in topics:
        for p in t.partitions:
            tp = TP(t.name, p.partition_index)
            if p.error_code:
                out.errors[tp] = p.error_code
            else:
                out.ok[tp] = value_of(p)
    return out


# ---------------------------------------------------------------------------- connections


def api_versions_request(software_version: str | None = "0.1.0") -> avq.ApiVersionsRequest:
    """The first request on a connection (v3+ names the client; ``None`` for the v0 retry)."""
    if software_version is None:
        return avq.ApiVersionsRequest()
    return avq.ApiVersionsRequest(client_software_name="rivulet", client_software_version=software_version)


def read_api_versions(resp: avr.ApiVersionsResponse, broker: str) -> dict[int, tuple[int, int]]:
    """{api key: (min version, max version)} the broker supports."""
    check(resp.error_code, f"ApiVersions to {broker}")
    return {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}


def pick_version(api_key: int, theirs: tuple[int, int] | None, cap: int | None = None) -> int:
    """The highest version of ``api_key`` both sides speak (and at most ``cap``, or the
    core's cap for requests whose newer shapes the clients do not use)."""
    ours = framing.request_class(api_key).VALID_VERSIONS
    if theirs is None:
        raise ApiError(ErrorCode.UNSUPPORTED_VERSION, f"the broker does not support {framing.api_name(api_key)}")
    hi = min(ours[1], theirs[1], cap if cap is not None else MAX_VERSIONS.get(api_key, ours[1]))
    if hi < max(ours[0], theirs[0]):
        raise ApiError(ErrorCode.UNSUPPORTED_VERSION,
                       f"no common version of {framing.api_name(api_key)} with the broker")
    return hi


# ---------------------------------------------------------------------------- produce and fetch


def produce_request(transactional_id: str | None, acks: int, timeout_ms: int,
                    batches: Mapping[tuple[str, int], bytes]) -> prq.ProduceRequest:
    """Produce of one encoded record batch (bytes-like, not copied) per partition."""
    topics: dict[str, list[prq.PartitionProduceData]] = {}
    for (t, p), data in batches.items():
        topics.setdefault(t, []).append(prq.PartitionProduceData(index=p, records=data))
    return prq.ProduceRequest(transactional_id=transactional_id, acks=acks, timeout_ms=timeout_ms,
                              topic_data=[prq.TopicProduceData(name=t, partition_data=ps) for t, ps in topics.items()])



class FetchPosition(NamedTuple):
    """Where a Fetch reads a partition from, with the epochs KIP-320 checks it against.

    ``current_leader_epoch`` is the leader epoch the client's metadata has (the broker fences
    a stale or newer one); ``last_fetched_epoch`` is the epoch of the batch before ``offset``
    (the leader answers a DivergingEpoch when its log differs there). -1: not known.
    """

    offset: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1


# Fetch names topics by id from v13 (KIP-516): the clients go past MAX_VERSIONS[1] only when the
# metadata gave every topic of the request its id.
FETCH_MAX_VERSION_WITH_IDS = 17


def fetch_version_cap(topic_ids: Mapping[str, uuid.UUID | None], topics: Iterable[str]) -> int | None:
    """The highest Fetch version for ``topics``: v17 when each has a known id, else the core's
    cap (v12); pass it to ``pick_version``."""
    with_ids = all((topic_ids.get(t) or ZERO_UUID) != ZERO_UUID for t in topics)
    return FETCH_MAX_VERSION_WITH_IDS if with_ids else None


def fetch_request(positions: Mapping[tuple[str, int], FetchPosition], max_wait_ms: int, min_bytes: int,
                  max_bytes: int, partition_max_bytes: int, isolation_level: int = 0,
                  topic_ids: Mapping[str, uuid.UUID | None] | None = None) -> fq.FetchRequest:
    """A sessionless Fetch of each partition from its position; ``topic_ids`` names the topics
    for v13+ (see ``fetch_version``)."""
    ids = topic_ids or {}
    wanted = {tp: fetch_partition(pos, ids.get(tp[0]), partition_max_bytes) for tp, pos in positions.items()}
    return session_fetch_request(fs.FetchRequestData.sessionless(wanted), 0, max_wait_ms, min_bytes, max_bytes,
                                 isolation_level)


def fetch_partition(pos: FetchPosition, topic_id: uuid.UUID | None, partition_max_bytes: int) -> fs.PartitionFetch:
    """What a consumer's Fetch asks of one partition (no log start: that is a follower's)."""
    return fs.PartitionFetch(topic_id or ZERO_UUID, pos.offset, pos.current_leader_epoch, pos.last_fetched_epoch,
                             -1, partition_max_bytes)


def session_fetch_request(data: fs.FetchRequestData, version: int, max_wait_ms: int, min_bytes: int,
                          max_bytes: int, isolation_level: int = 0) -> fq.FetchRequest:
    """A consumer's Fetch of what a fetch session sends (``version`` decides what it forgets)."""
    return fq.FetchRequest(
        cluster_id=None, replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
        isolation_level=isolation_level, session_id=data.session_id, session_epoch=data.epoch,
        topics=data.topics(), forgotten_topics_data=data.forgotten_topics(version), rack_id="")


def fetch_response_topic(t: fr.FetchableTopicResponse, names: Mapping[uuid.UUID, str]) -> str | None:
    """The topic a Fetch answer's entry is for: its name up to v12, its id from v13."""
    return t.topic or names.get(t.topic_id)


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    """The leader's answer for an epoch: the largest epoch it has at or below the one asked
    about, and the offset where that epoch ends. (-1, -1): the leader knows no such epoch."""

    epoch: int
    end_offset: int

    @property
    def undefined(self) -> bool:
        return self.epoch < 0 or self.end_offset < 0


def diverging_epoch(pd: fr.PartitionData) -> EpochEndOffset | None:
    """A Fetch partition answer's DivergingEpoch (v12+): the log differs from the fetcher's
    before the fetch offset, so nothing was returned."""
    d = pd.diverging_epoch
    if d is None or d.epoch < 0:
        return None
    return EpochEndOffset(d.epoch, d.end_offset)


# A consumer's OffsetsForLeaderEpoch (v3+ names who asks; a replica sends its broker id).
CONSUMER_REPLICA_ID = -1


def offsets_for_leader_epoch_request(epochs: Mapping[tuple[str, int], tuple[int, int]]
                                     ) -> oleq.OffsetForLeaderEpochRequest:
    """OffsetsForLeaderEpoch for {partition: (current leader epoch, epoch to look up)}."""
    topics: dict[str, list[oleq.OffsetForLeaderPartition]] = {}
    for (t, p), (current, epoch) in epochs.items():
        topics.setdefault(t, []).append(oleq.OffsetForLeaderPartition(
            partition=p, current_leader_epoch=current, leader_epoch=epoch))
    return oleq.OffsetForLeaderEpochRequest(
        replica_id=CONSUMER_REPLICA_ID,
        topics=[oleq.OffsetForLeaderTopic(topic=t, partitions=ps) for t, ps in topics.items()])


def read_offsets_for_leader_epoch(resp: oler.OffsetForLeaderEpochResponse) -> PartitionResults[EpochEndOffset]:
    out: PartitionResults[EpochEndOffset] = PartitionResults()
    for t in resp.topics:
        for p in t.partitions:
            tp = TP(t.topic, p.partition)
            if p.error_code:
                out.errors[tp] = p.error_code
            else:
                out.ok[tp] = EpochEndOffset(p.leader_epoch, p.end_offset)
    return out


# ---------------------------------------------------------------------------- metadata


def metadata_request(topics: Iterable[str] | None, allow_auto_create: bool = False) -> mq.MetadataRequest:
    """Metadata for ``topics`` (None: every topic; empty: brokers only)."""
    names = None if topics is None else sorted(set(topics))
    return mq.MetadataRequest(
        topics=None if names is None else [mq.MetadataRequestTopic(name=t) for t in names],
        allow_auto_topic_creation=allow_auto_create, include_topic_authorized_operations=False)


@dataclass(slots=True)
class PartitionMeta:
    partition: int
    leader: int
    leader_epoch: int
    error: int


@dataclass(slots=True)
class TopicMeta:
    name: str
    topic_id: uuid.UUID | None
    error: int
    is_internal: bool
    partitions: dict[int, PartitionMeta] = field(default_factory=dict)
    available: list[int] = field(default_factory=list)  # partitions with a leader

    @property
    def num_partitions(self) -> int:
        return len(self.partitions)


class Cluster:
    """What the last Metadata responses said: brokers, topics and partition leaders."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.brokers: dict[int, tuple[str, int]] = {}
        self.topics: dict[str, TopicMeta] = {}
        self.cluster_id: str | None = None
        self.controller_id = -1
        self.version = 0
        self.updated_at = 0.0
        self.all_topics_known = False
        self._clock = clock

    def update(self, resp: mq.MetadataResponse, requested: Iterable[str] | None) -> None:
        """Take in a Metadata answer to a request for ``requested`` (None: every topic)."""
        self.brokers = {b.node_id: (b.host, b.port) for b in resp.brokers}
        self.cluster_id = resp.cluster_id
        self.controller_id = resp.controller_id
        fresh: dict[str, TopicMeta] = {}
        for t in resp.topics:
            tm = TopicMeta(t.name, t.topic_id, t.error_code, t.is_internal)
            known = self.topics.get(t.name)
            same_topic = known is not None and known.topic_id == t.topic_id
            for p in t.partitions:
                pm = PartitionMeta(p.partition_index, p.leader_id, p.leader_epoch, p.error_code)
                old = known.partitions.get(p.partition_index) if same_topic else None
                if old is not None and pm.leader_epoch < old.leader_epoch and old.leader in self.brokers:
                    # KIP-320: a broker that has not heard of the latest leader yet answered;
                    # what we know is newer.
                    pm = old
                tm.partitions[p.partition_index] = pm
                if pm.leader >= 0 and pm.leader in self.brokers:
                    tm.available.append(p.partition_index)
            tm.available.sort()
            fresh[t.name] = tm
        if requested is None:
            # In place: producers on other threads hold this dict (one C-level update each).
            for gone in set(self.topics) - set(fresh):
                self.topics.pop(gone, None)
            self.topics.update(fresh)
            self.all_topics_known = True
        else:
            for name in requested:
                self.topics.pop(name, None)
            self.topics.update(fresh)
        self.version += 1
        self.updated_at = self._clock()

    def topic(self, name: str) -> TopicMeta | None:
        return self.topics.get(name)

    def leader(self, topic: str, partition: int) -> int:
        t = self.topics.get(topic)
        if t is None:
            return -1
        p = t.partitions.get(partition)
        if p is None or p.leader not in self.brokers:
            return -1
        return p.leader

    def leader_epoch(self, topic: str, partition: int) -> int:
        """The partition's leader epoch as the metadata says; -1 when unknown."""
        t = self.topics.get(topic)
        p = t.partitions.get(partition) if t is not None else None
        return p.leader_epoch if p is not None else -1

    def add_brokers(self, endpoints: Iterable[tuple[int, str, int]]) -> None:
        """Brokers an answer named along with a new leader (KIP-951 node endpoints)."""
        for node, host, port in endpoints:
            self.brokers.setdefault(node, (host, port))

    def new_leader(self, topic: str, partition: int, leader: int, leader_epoch: int) -> bool:
        """A broker named the partition's current leader (KIP-951) in an error answer; taken
        when it is newer than what the metadata said. True if taken."""
        t = self.topics.get(topic)
        p = t.partitions.get(partition) if t is not None else None
        if p is None or leader < 0 or leader_epoch < p.leader_epoch or leader not in self.brokers:
            return False
        if leader_epoch == p.leader_epoch and p.leader == leader:
            return False
        t.partitions[partition] = PartitionMeta(partition, leader, leader_epoch, 0)
        if partition not in t.available:
            t.available = sorted([*t.available, partition])
        self.version += 1
        return True

    def forget_leader(self, topic: str, partition: int) -> None:
        """A leader turned out stale: the next lookup asks for fresh metadata."""
        t = self.topics.get(topic)
        p = t.partitions.get(partition) if t is not None else None
        if p is not None:
            p.leader = -1

    def partition_counts(self, names: Iterable[str] | None = None, include_internal: bool = False
                         ) -> dict[str, int]:
        """{topic: partition count} of the known topics without an error (``names`` only, if given)."""
        wanted = None if names is None else set(names)
        return {n: t.num_partitions for n, t in self.topics.items()
                if not t.error and (wanted is None or n in wanted)
                and (include_internal or wanted is not None or not (t.is_internal or n.startswith("__")))}

    def no_leader_error(self, topic: str) -> int:
        """The error to report for a partition without a known leader."""
        tm = self.topics.get(topic)
        return tm.error if tm is not None and tm.error else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


# ---------------------------------------------------------------------------- coordinators


@dataclass(frozen=True, slots=True)
class Coordinator:
    node_id: int
    host: str
    port: int


def find_coordinator_request(key: str, key_type: int = GROUP) -> fcq.FindCoordinatorRequest:
    """FindCoordinator for a group (0) or transactional id (1); fits every version."""
    return fcq.FindCoordinatorRequest(key=key, key_type=key_type, coordinator_keys=[key])


def read_find_coordinator(resp: fcr.FindCoordinatorResponse) -> tuple[int, Coordinator | None, str | None]:
    """(error code, coordinator when found, error message), from a single-key (v0-v3) or batched
    (v4+) answer alike."""
    if resp.coordinators:
        c = resp.coordinators[0]
        code, node, host, port, msg = c.error_code, c.node_id, c.host, c.port, c.error_message
    else:
        code, node, host, port, msg = resp.error_code, resp.node_id, resp.host, resp.port, resp.error_message
    return code, (Coordinator(node, host, port) if code == 0 else None), msg


# ---------------------------------------------------------------------------- retry decisions
# The retry loops both transports run, as state machines over answers (as h11 is over bytes): the
# transport sends what the machine asks for, hands it the answer or its own failure to get one,
# and gets back the result, a Retry (sleep its delay, then go round again), or the ApiError that
# ends the operation. The asyncio transport (``client.py``) and the blocking one (``blocking.py``)
# drive the same machines; only the sending and the sleeping are theirs.


@dataclass(frozen=True, slots=True)
class Retry:
    """Go round again after ``delay`` seconds."""

    delay: float


class CoordinatorLookup:
    """FindCoordinator for ``key`` until a broker names its coordinator, whose address goes into
    ``cluster``. A retriable error (the coordinator loading or moving, no broker answering) waits
    out the backoff; a fatal one, or any once the attempts' deadline has passed, is raised."""

    def __init__(self, key: str, key_type: int, attempts: Attempts, cluster: Cluster) -> None:
        self.key, self.key_type, self.attempts, self.cluster = key, key_type, attempts, cluster

    def request(self) -> fcq.FindCoordinatorRequest:
        return find_coordinator_request(self.key, self.key_type)

    def on_response(self, resp: fcr.FindCoordinatorResponse) -> Coordinator | Retry:
        code, found, msg = read_find_coordinator(resp)
        if found is None:
            return self._failed(code, msg)
        self.cluster.brokers.setdefault(found.node_id, (found.host, found.port))
        return found

    def on_unreachable(self, exc: BaseException) -> Retry:
        """No broker answered: the coordinator is as good as unavailable."""
        return self._failed(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(exc))

    def _failed(self, code: int, msg: str | None) -> Retry:
        if action(code) == Action.FAIL or self.attempts.expired():
            raise ApiError(ErrorCode(code), msg or f"FindCoordinator for {self.key!r}")
        return Retry(self.attempts.next_delay())


class CoordinatorCall(Generic[R]):
    """``request`` to ``key``'s coordinator, sent again (after looking the coordinator up again)
    while ``error_of(answer)`` asks to retry or find the coordinator. Any other answer is the
    caller's to read, partition errors included. Once out of time, a retriable answer is handed
    back when ``answer_when_out_of_time`` (the caller reads its error), else raised."""

    def __init__(self, key: str, key_type: int, request: Request[R], error_of: Callable[[R], int], attempts: Attempts,
                 answer_when_out_of_time: bool = True) -> None:
        self.key, self.key_type, self.request, self.error_of = key, key_type, request, error_of
        self.attempts = attempts
        self.answer_when_out_of_time = answer_when_out_of_time

    def on_response(self, resp: R) -> R | Retry:
        """The answer to return, or a Retry."""
        code = self.error_of(resp)
        if action(code) not in (Action.RETRY, Action.FIND_COORDINATOR):
            return resp
        if self.answer_when_out_of_time and self.attempts.expired():
            return resp
        return self._again(code)

    def on_unreachable(self) -> Retry:
        """The coordinator did not answer (its connection failed)."""
        return self._again(ErrorCode.COORDINATOR_NOT_AVAILABLE)

    def _again(self, code: int) -> Retry:
        if self.attempts.expired():
            raise ApiError(ErrorCode(code), f"{type(self.request).__name__} to the coordinator of {self.key!r}")
        return Retry(self.attempts.next_delay())


class LeaderRetry(Generic[V, T]):
    """Requests to partitions' leaders (ListOffsets, DeleteRecords, ...), each partition asked
    again while its answer says the leader moved or is not ready (its leader is forgotten, so the
    transport refreshes metadata before the next round) and while it has no leader to ask. An
    error that cannot be retried, a coordinator error among them, is raised for its partition.
    Out of time, a round that leaves partitions unanswered raises LEADER_NOT_AVAILABLE for them;
    with ``deadline_per_answer`` (the admin client's way) a retriable partition error is raised
    as soon as it comes after the deadline."""

    def __init__(self, items: Mapping[TP, V], what: str, attempts: Attempts, cluster: Cluster,
                 deadline_per_answer: bool = False) -> None:
        self.remaining: dict[TP, V] = dict(items)
        self.found: dict[TP, T] = {}
        self.what, self.attempts, self.cluster = what, attempts, cluster
        self.deadline_per_answer = deadline_per_answer

    def on_results(self, res: PartitionResults[T]) -> None:
        """One leader's answer, as the request's reader sorted it."""
        for tp, value in res.ok.items():
            self.found[tp] = value
            self.remaining.pop(tp, None)
        for tp, code in res.errors.items():
            if action(code) in (Action.FAIL, Action.FIND_COORDINATOR) or (
                    self.deadline_per_answer and self.attempts.expired()):
                raise ApiError(ErrorCode(code), f"{self.what} {tp[0]}-{tp[1]}")
            self.cluster.forget_leader(*tp)

    def next_round(self) -> Retry | None:
        """None when every partition has its answer, else the wait before the next round."""
        if not self.remaining:
            return None
        if self.attempts.expired():
            raise ApiError(ErrorCode.LEADER_NOT_AVAILABLE,
                           f"{self.what}: no leader answered for {sorted(self.remaining)[:5]}")
        return Retry(self.attempts.next_delay())


# ---------------------------------------------------------------------------- offsets


@dataclass(frozen=True, slots=True)
class ListedOffset:
    offset: int            # -1 when no record matches a timestamp
    timestamp: int
    leader_epoch: int | None = None


def list_offsets_request(specs: Mapping[tuple[str, int], int], isolation_level: int = 0,
                         timeout_ms: int = 30000) -> loq.ListOffsetsRequest:
    """ListOffsets for {partition: timestamp, or LATEST / EARLIEST / MAX_TIMESTAMP}. Under
    read_committed (``isolation_level=1``) LATEST is the last stable offset."""
    topics: dict[str, list[loq.ListOffsetsPartition]] = {}
    for (t, p), ts in specs.items():
        topics.setdefault(t, []).append(loq.ListOffsetsPartition(
            partition_index=p, current_leader_epoch=-1, timestamp=ts, max_num_offsets=1))
    return loq.ListOffsetsRequest(replica_id=-1, isolation_level=isolation_level, timeout_ms=timeout_ms,
                                  topics=[loq.ListOffsetsTopic(name=t, partitions=ps) for t, ps in topics.items()])


def read_list_offsets(resp: lor.ListOffsetsResponse) -> PartitionResults[ListedOffset]:
    return read_partitions(resp.topics, lambda p: ListedOffset(
        p.offset, p.timestamp, p.leader_epoch if p.leader_epoch >= 0 else None))


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed (or to-be-committed) position: the next offset to consume."""

    offset: int
    metadata: str | None = None
    leader_epoch: int | None = None


# KIP-848's heartbeats (ConsumerGroupHeartbeat, ShareGroupHeartbeat): the epochs that leave
# the group, and the errors after which a member may not go on.
LEAVE_EPOCH, STATIC_LEAVE_EPOCH = -1, -2
HEARTBEAT_FATAL_ERRORS: frozenset[int] = frozenset({
    ErrorCode.GROUP_AUTHORIZATION_FAILED, ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.INVALID_REQUEST,
    ErrorCode.UNSUPPORTED_ASSIGNOR, ErrorCode.UNSUPPORTED_VERSION, ErrorCode.GROUP_MAX_SIZE_REACHED,
    ErrorCode.FENCED_INSTANCE_ID, ErrorCode.UNRELEASED_INSTANCE_ID, ErrorCode.INVALID_REGULAR_EXPRESSION,
    ErrorCode.GROUP_ID_NOT_FOUND,
})


def consumer_group_heartbeat_request(group: str, member_id: str, epoch: int, instance_id: str | None,
                                     rack: str | None, rebalance_timeout_ms: int, topics: list[str],
                                     assignor: str | None, owned: list[tuple[uuid.UUID, list[int]]]
                                     ) -> cghq.ConsumerGroupHeartbeatRequest:
    """ConsumerGroupHeartbeat (KIP-848) with the member's whole state each time: its
    subscription, what it owns, and at epoch 0 (joining) nothing owned."""
    return cghq.ConsumerGroupHeartbeatRequest(
        group_id=group, member_id=member_id, member_epoch=epoch, instance_id=instance_id, rack_id=rack,
        rebalance_timeout_ms=rebalance_timeout_ms, subscribed_topic_names=topics, subscribed_topic_regex=None,
        server_assignor=assignor,
        topic_partitions=[cghq.TopicPartitions(topic_id=t, partitions=ps) for t, ps in owned] if epoch else [])


def share_group_heartbeat_request(group: str, member_id: str, epoch: int, rack: str | None,
                                  topics: list[str] | None) -> sghq.ShareGroupHeartbeatRequest:
    """ShareGroupHeartbeat (KIP-932): the subscription when joining or when it changed (None:
    unchanged); a share member owns nothing the broker must be told of."""
    return sghq.ShareGroupHeartbeatRequest(group_id=group, member_id=member_id, member_epoch=epoch, rack_id=rack,
                                           subscribed_topic_names=topics)


def offset_fetch_request(group: str, tps: Iterable[tuple[str, int]] | None,
                         require_stable: bool = True) -> ofq.OffsetFetchRequest:
    """The group's committed offsets for ``tps`` (None: every partition it has committed)."""
    topics = None
    if tps is not None:
        topics = [ofq.OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in by_topic(tps).items()]
    return ofq.OffsetFetchRequest(group_id=group, topics=topics, require_stable=require_stable)


def read_offset_fetch(resp: ofr.OffsetFetchResponse) -> PartitionResults[OffsetAndMetadata | None]:
    """{partition: committed position, None where nothing is committed}; a group-level error
    comes back as the error of a ``("", -1)`` entry so one retry rule covers both levels."""
    out: PartitionResults[OffsetAndMetadata | None] = PartitionResults()
    if resp.error_code:
        out.errors[TP("", -1)] = resp.error_code
        return out
    return read_partitions(resp.topics, lambda p: OffsetAndMetadata(
        p.committed_offset, p.metadata, p.committed_leader_epoch if p.committed_leader_epoch >= 0 else None)
        if p.committed_offset >= 0 else None)


def offset_fetch_error(resp: ofr.OffsetFetchResponse) -> int:
    """What decides whether to retry an OffsetFetch: the group's error, or a partition's
    UNSTABLE_OFFSET_COMMIT (a transaction still writes offsets to it). Other partition errors
    are the partition's answer."""
    if resp.error_code:
        return resp.error_code
    unstable = any(p.error_code == ErrorCode.UNSTABLE_OFFSET_COMMIT for t in resp.topics for p in t.partitions)
    return ErrorCode.UNSTABLE_OFFSET_COMMIT if unstable else 0


def offset_commit_request(group: str, offsets: Mapping[tuple[str, int], OffsetAndMetadata],
                          generation: int = -1, member_id: str = "",
                          group_instance_id: str | None = None) -> ocq.OffsetCommitRequest:
    """OffsetCommit; generation -1 and no member is a standalone commit (allowed while the
    group has no members), as a consumer using assign() or an admin tool makes."""
    topics: dict[str, list[ocq.OffsetCommitRequestPartition]] = {}
    for (t, p), om in offsets.items():
        topics.setdefault(t, []).append(ocq.OffsetCommitRequestPartition(
            partition_index=p, committed_offset=om.offset,
            committed_leader_epoch=om.leader_epoch if om.leader_epoch is not None else -1,
            commit_timestamp=-1, committed_metadata=om.metadata or ""))
    return ocq.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
        group_instance_id=group_instance_id, retention_time_ms=-1,
        topics=[ocq.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in topics.items()])


def read_offset_commit(resp: ocr.OffsetCommitResponse) -> PartitionResults[None]:
    return read_partitions(resp.topics, lambda p: None)


# ---------------------------------------------------------------------------- group membership


def join_group_request(group: str, member_id: str, group_instance_id: str | None, session_timeout_ms: int,
                       rebalance_timeout_ms: int, protocols: Iterable[tuple[str, bytes]],
                       reason: str | None = None, protocol_type: str = "consumer") -> jgq.JoinGroupRequest:
    """JoinGroup offering ``protocols`` ((assignor name, subscription metadata), by preference)."""
    return jgq.JoinGroupRequest(
        group_id=group, session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=rebalance_timeout_ms,
        member_id=member_id, group_instance_id=group_instance_id, protocol_type=protocol_type,
        protocols=[jgq.JoinGroupRequestProtocol(name=n, metadata=m) for n, m in protocols], reason=reason)


def sync_group_request(group: str, generation: int, member_id: str, group_instance_id: str | None,
                       protocol: str | None, assignments: Mapping[str, bytes],
                       protocol_type: str = "consumer") -> sgq.SyncGroupRequest:
    """SyncGroup; the leader sends every member's assignment, the others none."""
    return sgq.SyncGroupRequest(
        group_id=group, generation_id=generation, member_id=member_id, group_instance_id=group_instance_id,
        protocol_type=protocol_type, protocol_name=protocol,
        assignments=[sgq.SyncGroupRequestAssignment(member_id=m, assignment=a) for m, a in assignments.items()])


def heartbeat_request(group: str, generation: int, member_id: str,
                      group_instance_id: str | None) -> hbq.HeartbeatRequest:
    return hbq.HeartbeatRequest(group_id=group, generation_id=generation, member_id=member_id,
                                group_instance_id=group_instance_id)


def leave_group_request(group: str, member_id: str, reason: str | None = None) -> lvq.LeaveGroupRequest:
    """LeaveGroup for one dynamic member (v0-v2 name it directly, v3+ in the member list)."""
    return lvq.LeaveGroupRequest(group_id=group, member_id=member_id, members=[
        lvq.MemberIdentity(member_id=member_id, group_instance_id=None, reason=reason)])


# ---------------------------------------------------------------------------- transactions


@dataclass(frozen=True, slots=True)
class ProducerIdAndEpoch:
    producer_id: int
    epoch: int


def init_producer_id_request(transactional_id: str | None, transaction_timeout_ms: int,
                             producer_id: int = -1, epoch: int = -1) -> ipq.InitProducerIdRequest:
    """A producer id for an idempotent producer (no transactional id) or a transactional one;
    for the latter it fences earlier producers with the id and ends what they left open."""
    return ipq.InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout_ms=transaction_timeout_ms,
                                     producer_id=producer_id, producer_epoch=epoch)


def read_init_producer_id(resp: ipr.InitProducerIdResponse) -> tuple[int, ProducerIdAndEpoch | None]:
    if resp.error_code:
        return resp.error_code, None
    return 0, ProducerIdAndEpoch(resp.producer_id, resp.producer_epoch)


def add_partitions_to_txn_request(transactional_id: str, pid: ProducerIdAndEpoch,
                                  tps: Iterable[tuple[str, int]]) -> aptq.AddPartitionsToTxnRequest:
    return aptq.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=transactional_id, v3_and_below_producer_id=pid.producer_id,
        v3_and_below_producer_epoch=pid.epoch,
        v3_and_below_topics=[aptq.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in by_topic(tps).items()])


def add_partitions_to_txn_error(resp: aptr.AddPartitionsToTxnResponse) -> int:
    if resp.error_code:
        return resp.error_code
    return first_error(x.partition_error_code for t in resp.results_by_topic_v3_and_below
                       for x in t.results_by_partition)


def add_offsets_to_txn_request(transactional_id: str, pid: ProducerIdAndEpoch,
                               group: str) -> aotq.AddOffsetsToTxnRequest:
    return aotq.AddOffsetsToTxnRequest(transactional_id=transactional_id, producer_id=pid.producer_id,
                                       producer_epoch=pid.epoch, group_id=group)


def txn_offset_commit_request(transactional_id: str, pid: ProducerIdAndEpoch, group: str,
                              offsets: Mapping[tuple[str, int], OffsetAndMetadata], generation: int = -1,
                              member_id: str = "", group_instance_id: str | None = None
                              ) -> tocq.TxnOffsetCommitRequest:
    topics: dict[str, list[tocq.TxnOffsetCommitRequestPartition]] = {}
    for (t, p), om in offsets.items():
        topics.setdefault(t, []).append(tocq.TxnOffsetCommitRequestPartition(
            partition_index=p, committed_offset=om.offset,
            committed_leader_epoch=om.leader_epoch if om.leader_epoch is not None else -1,
            committed_metadata=om.metadata))
    return tocq.TxnOffsetCommitRequest(
        transactional_id=transactional_id, group_id=group, producer_id=pid.producer_id, producer_epoch=pid.epoch,
        generation_id=generation, member_id=member_id, group_instance_id=group_instance_id,
        topics=[tocq.TxnOffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in topics.items()])


def txn_offset_commit_error(resp: tocr.TxnOffsetCommitResponse) -> int:
    return first_error(x.error_code for t in resp.topics for x in t.partitions)


def end_txn_request(transactional_id: str, pid: ProducerIdAndEpoch, commit: bool) -> etq.EndTxnRequest:
    return etq.EndTxnRequest(transactional_id=transactional_id, producer_id=pid.producer_id,
                             producer_epoch=pid.epoch, committed=commit)


def error_code(resp: Struct) -> int:
    """The top-level error of answers that carry one (InitProducerId, AddOffsetsToTxn, EndTxn...)."""
    return resp.error_code


# ---------------------------------------------------------------------------- admin


class TopicSpec(Protocol):
    """A topic to create, as the admin client's NewTopic holds it."""

    topic: str
    num_partitions: int
    replication_factor: int
    replica_assignment: list[list[int]] | None
    config: dict[str, str]


def create_topics_request(topics: Iterable[TopicSpec], timeout_ms: int, validate_only: bool = False
                          ) -> ctq.CreateTopicsRequest:
    """CreateTopics for NewTopic-shaped values (topic, num_partitions, replication_factor,
    replica_assignment, config)."""
    return ctq.CreateTopicsRequest(topics=[
        ctq.CreatableTopic(
            name=t.topic, num_partitions=t.num_partitions if not t.replica_assignment else -1,
            replication_factor=t.replication_factor if not t.replica_assignment else -1,
            assignments=[ctq.CreatableReplicaAssignment(partition_index=i, broker_ids=list(r))
                         for i, r in enumerate(t.replica_assignment or [])],
            configs=[ctq.CreatableTopicConfig(name=k, value=str(v)) for k, v in t.config.items()])
        for t in topics], timeout_ms=timeout_ms, validate_only=validate_only)


def read_create_topics(resp: ctr.CreateTopicsResponse) -> dict[str, ctr.CreatableTopicResult | ApiError]:
    """{name: the broker's CreatableTopicResult, or the ApiError it reported}."""
    return {r.name: ApiError(ErrorCode(r.error_code), r.error_message) if r.error_code else r
            for r in resp.topics}


def delete_topics_request(names: Iterable[str], timeout_ms: int) -> dtq.DeleteTopicsRequest:
    names = list(names)
    return dtq.DeleteTopicsRequest(topic_names=names, topics=[dtq.DeleteTopicState(name=n) for n in names],
                                   timeout_ms=timeout_ms)


def read_delete_topics(resp: dtr.DeleteTopicsResponse) -> dict[str, ApiError | None]:
    return {r.name: ApiError(ErrorCode(r.error_code), r.error_message) if r.error_code else None
            for r in resp.responses}


def create_partitions_request(topic: str, count: int, timeout_ms: int, validate_only: bool = False
                              ) -> cpq.CreatePartitionsRequest:
    return cpq.CreatePartitionsRequest(topics=[cpq.CreatePartitionsTopic(name=topic, count=count, assignments=None)],
                                       timeout_ms=timeout_ms, validate_only=validate_only)


def read_create_partitions(resp: cpr.CreatePartitionsResponse) -> None:
    r = resp.results[0]
    check(r.error_code, r.error_message)


def describe_configs_request(resource_type: int, name: str, keys: list[str] | None = None
                             ) -> dcq.DescribeConfigsRequest:
    return dcq.DescribeConfigsRequest(
        resources=[dcq.DescribeConfigsResource(resource_type=int(resource_type), resource_name=name,
                                               configuration_keys=keys)],
        include_synonyms=True, include_documentation=False)


def read_describe_configs(resp: dcr.DescribeConfigsResponse) -> list[dcr.DescribeConfigsResourceResult]:
    r = resp.results[0]
    check(r.error_code, r.error_message)
    return r.configs


def list_config_resources_request(resource_types: Iterable[int] = ()) -> lcrq.ListConfigResourcesRequest:
    """Every config resource of these types (none: every type the broker lists), KIP-1142."""
    return lcrq.ListConfigResourcesRequest(resource_types=[int(t) for t in resource_types])


def read_list_config_resources(resp: lcrr.ListConfigResourcesResponse) -> list[tuple[str, int]]:
    check(resp.error_code, None)
    return [(r.resource_name, r.resource_type) for r in resp.config_resources]


def describe_log_dirs_request() -> dldq.DescribeLogDirsRequest:
    """Every log dir of the broker it is sent to, with every partition in it (topics null)."""
    return dldq.DescribeLogDirsRequest(topics=None)


def read_describe_log_dirs(resp: dldr.DescribeLogDirsResponse) -> dict[str, dict[TP, int]]:
    """Log dir -> the size in bytes of each partition's log in it (a future replica's, being
    moved there, left out); an offline dir answers with no partitions."""
    check(resp.error_code, "DescribeLogDirs")
    return {d.log_dir: {TP(t.name, p.partition_index): p.partition_size
                        for t in d.topics for p in t.partitions if not p.is_future_key}
            for d in resp.results}


def incremental_alter_configs_request(resource_type: int, name: str, ops: Iterable[tuple[str, int, str | None]],
                                      validate_only: bool = False) -> iacq.IncrementalAlterConfigsRequest:
    """``ops``: (name, operation: SET 0 / DELETE 1 / APPEND 2 / SUBTRACT 3, value)."""
    return iacq.IncrementalAlterConfigsRequest(
        resources=[iacq.AlterConfigsResource(
            resource_type=int(resource_type), resource_name=name,
            configs=[iacq.AlterableConfig(name=k, config_operation=int(op), value=v) for k, op, v in ops])],
        validate_only=validate_only)


def alter_configs_request(resource_type: int, name: str, configs: Mapping[str, str],
                          validate_only: bool = False) -> acq.AlterConfigsRequest:
    """The legacy AlterConfigs: replaces the resource's whole set of overrides."""
    return acq.AlterConfigsRequest(
        resources=[acq.AlterConfigsResource(
            resource_type=int(resource_type), resource_name=name,
            configs=[acq.AlterableConfig(name=k, value=v) for k, v in configs.items()])],
        validate_only=validate_only)


def read_alter_configs(resp: acr.AlterConfigsResponse | iacr.IncrementalAlterConfigsResponse) -> None:
    """The answer of AlterConfigs and IncrementalAlterConfigs alike."""
    r = resp.responses[0]
    check(r.error_code, r.error_message)


# A quota entity on the wire: its (entity type, name) components; a name of None is the default.
QuotaEntityParts = tuple[tuple[str, "str | None"], ...]


def describe_client_quotas_request(components: Iterable[tuple[str, int, str | None]],
                                   strict: bool) -> dcqq.DescribeClientQuotasRequest:
    """``components``: (entity type, match type: exact 0 / default 1 / any specified 2, match)."""
    return dcqq.DescribeClientQuotasRequest(
        components=[dcqq.ComponentData(entity_type=t, match_type=m, match=n) for t, m, n in components],
        strict=strict)


def read_describe_client_quotas(resp: dcqr.DescribeClientQuotasResponse) -> dict[QuotaEntityParts, dict[str, float]]:
    check(resp.error_code, resp.error_message)
    return {tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)):
            {v.key: v.value for v in entry.values} for entry in resp.entries or []}


def alter_client_quotas_request(entries: Iterable[tuple[QuotaEntityParts, Mapping[str, float | None]]],
                                validate_only: bool = False) -> acqq.AlterClientQuotasRequest:
    """``entries``: (entity, {quota key: new value, or None to remove it})."""
    return acqq.AlterClientQuotasRequest(entries=[acqq.EntryData(
        entity=[acqq.EntityData(entity_type=t, entity_name=n) for t, n in entity],
        ops=[acqq.OpData(key=k, value=0.0 if v is None else float(v), remove=v is None) for k, v in ops.items()])
        for entity, ops in entries], validate_only=validate_only)


def read_alter_client_quotas(resp: acqr.AlterClientQuotasResponse) -> dict[QuotaEntityParts, ApiError | None]:
    return {tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)):
            ApiError(ErrorCode(entry.error_code), entry.error_message) if entry.error_code else None
            for entry in resp.entries}


def describe_user_scram_credentials_request(users: Iterable[str] | None) -> dusq.DescribeUserScramCredentialsRequest:
    """``users`` None: every user with a SCRAM credential."""
    return dusq.DescribeUserScramCredentialsRequest(
        users=None if users is None else [dusq.UserName(name=u) for u in users])


def read_describe_user_scram_credentials(resp: dusr.DescribeUserScramCredentialsResponse
                                         ) -> dict[str, ApiError | list[tuple[int, int]]]:
    """{user: [(mechanism type, iterations)], or its error}; a request-wide error raises."""
    if resp.error_code:
        raise ApiError(ErrorCode(resp.error_code), resp.error_message)
    return {r.user: ApiError(ErrorCode(r.error_code), r.error_message) if r.error_code
            else [(c.mechanism, c.iterations) for c in r.credential_infos] for r in resp.results}


def alter_user_scram_credentials_request(deletions: Iterable[tuple[str, int]],
                                         upsertions: Iterable[tuple[str, int, int, bytes, bytes]]
                                         ) -> ausq.AlterUserScramCredentialsRequest:
    """``deletions``: (user, mechanism type); ``upsertions``: (user, mechanism type,
    iterations, salt, salted password)."""
    return ausq.AlterUserScramCredentialsRequest(
        deletions=[ausq.ScramCredentialDeletion(name=u, mechanism=m) for u, m in deletions],
        upsertions=[ausq.ScramCredentialUpsertion(name=u, mechanism=m, iterations=i, salt=s, salted_password=p)
                    for u, m, i, s, p in upsertions])


def read_alter_user_scram_credentials(resp: ausr.AlterUserScramCredentialsResponse) -> dict[str, ApiError | None]:
    return {r.user: ApiError(ErrorCode(r.error_code), r.error_message) if r.error_code else None
            for r in resp.results}


def delete_records_request(offsets: Mapping[tuple[str, int], int], timeout_ms: int) -> drq.DeleteRecordsRequest:
    topics: dict[str, list[drq.DeleteRecordsPartition]] = {}
    for (t, p), off in offsets.items():
        topics.setdefault(t, []).append(drq.DeleteRecordsPartition(partition_index=p, offset=off))
    return drq.DeleteRecordsRequest(topics=[drq.DeleteRecordsTopic(name=t, partitions=ps) for t, ps in topics.items()],
                                    timeout_ms=timeout_ms)


def read_delete_records(resp: drr.DeleteRecordsResponse) -> PartitionResults[int]:
    """{partition: its new low watermark}."""
    return read_partitions(resp.topics, lambda p: p.low_watermark)


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str


def list_groups_request(states: Iterable[str] = ()) -> lgq.ListGroupsRequest:
    return lgq.ListGroupsRequest(states_filter=list(states), types_filter=[])


def read_list_groups(resp: lgr.ListGroupsResponse) -> list[GroupListing]:
    check(resp.error_code, "ListGroups")
    return [GroupListing(g.group_id, g.protocol_type, g.group_state or "") for g in resp.groups]


def consumer_group_describe_request(group_ids: Iterable[str]) -> cgdq.ConsumerGroupDescribeRequest:
    return cgdq.ConsumerGroupDescribeRequest(group_ids=list(group_ids), include_authorized_operations=False)


def share_group_describe_request(group_ids: Iterable[str]) -> sgdq.ShareGroupDescribeRequest:
    return sgdq.ShareGroupDescribeRequest(group_ids=list(group_ids), include_authorized_operations=False)


def streams_group_describe_request(group_ids: Iterable[str]) -> stgdq.StreamsGroupDescribeRequest:
    return stgdq.StreamsGroupDescribeRequest(group_ids=list(group_ids), include_authorized_operations=False)


def describe_groups_request(group_ids: Iterable[str]) -> dgrq.DescribeGroupsRequest:
    return dgrq.DescribeGroupsRequest(groups=list(group_ids), include_authorized_operations=False)


def read_describe_groups(resp: dgrr.DescribeGroupsResponse) -> list[dgrr.DescribedGroup]:
    """The described groups (each with its own error code; COORDINATOR errors mean retry)."""
    return list(resp.groups)


def delete_groups_request(group_ids: Iterable[str]) -> dgq.DeleteGroupsRequest:
    return dgq.DeleteGroupsRequest(groups_names=list(group_ids))


def read_delete_groups(resp: dgr.DeleteGroupsResponse) -> dict[str, int]:
    return {r.group_id: r.error_code for r in resp.results}


def offset_delete_request(group_id: str, partitions: Iterable[TP]) -> odq.OffsetDeleteRequest:
    """Kafka's deleteConsumerGroupOffsets: forget the group's committed offsets of these
    partitions (the broker refuses partitions the group is still subscribed to)."""
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(p)
    return odq.OffsetDeleteRequest(group_id=group_id, topics=[
        odq.OffsetDeleteRequestTopic(name=t, partitions=[odq.OffsetDeleteRequestPartition(partition_index=p)
                                                         for p in sorted(ps)])
        for t, ps in by_topic.items()])


def read_offset_delete(resp: odr.OffsetDeleteResponse) -> dict[TP, int]:
    """Each partition's error code; a group-level error raises."""
    check(resp.error_code, "OffsetDelete")
    return {TP(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


# ---------------------------------------------------------------- ACLs
def create_acls_request(bindings: Iterable[AclBinding]) -> caq.CreateAclsRequest:
    return caq.CreateAclsRequest(creations=[caq.AclCreation(
        resource_type=int(b.pattern.resource_type), resource_name=b.pattern.name,
        resource_pattern_type=int(b.pattern.pattern_type), principal=b.entry.principal, host=b.entry.host,
        operation=int(b.entry.operation), permission_type=int(b.entry.permission_type)) for b in bindings])


def read_create_acls(resp: car.CreateAclsResponse) -> list[ApiError | None]:
    return [ApiError(ErrorCode(r.error_code), r.error_message) if r.error_code else None for r in resp.results]


def _filter_fields(f: AclBindingFilter) -> dict[str, int | str | None]:
    return dict(resource_type_filter=int(f.resource_type), resource_name_filter=f.name,
                pattern_type_filter=int(f.pattern_type), principal_filter=f.principal, host_filter=f.host,
                operation=int(f.operation), permission_type=int(f.permission_type))


def describe_acls_request(f: AclBindingFilter) -> dsaq.DescribeAclsRequest:
    return dsaq.DescribeAclsRequest(**_filter_fields(f))


def read_describe_acls(resp: dsar.DescribeAclsResponse) -> list[AclBinding]:
    check(resp.error_code, resp.error_message)
    return [binding_of(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation,
                     a.permission_type) for r in resp.resources for a in r.acls]


def delete_acls_request(filters: Iterable[AclBindingFilter]) -> daq.DeleteAclsRequest:
    return daq.DeleteAclsRequest(filters=[daq.DeleteAclsFilter(**_filter_fields(f)) for f in filters])


def read_delete_acls(resp: dar.DeleteAclsResponse) -> list[list[AclBinding] | ApiError]:
    """Per filter, in order: the ACLs it deleted, or the broker's error."""
    return [ApiError(ErrorCode(r.error_code), r.error_message) if r.error_code else
            [binding_of(m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host, m.operation,
                      m.permission_type) for m in r.matching_acls] for r in resp.filter_results]
