"""Incremental fetch sessions (KIP-227), kept as Kafka 4.3.1's FetchSessionCache does.

A consumer or follower that opens a session (epoch 0) names its partitions once; later
fetches (epoch n > 0) name only partitions whose request changed and the topics to forget,
and are answered only the partitions with something new. The cache is Kafka's: 8 shards of
``max.incremental.fetch.session.cache.slots / 8`` sessions, a new session in the next shard
round-robin, session ids drawn in the shard's own range, eviction within the shard (a stale
session first, else the least valuable one by (privileged, size, id)). Sans-IO: the Fetch
handler (``server/handlers/records.py``) resolves topics, reads the log and decides with
``must_answer`` which of a session's partitions its answer carries.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterable
from typing import Protocol

from rivulet.common.file_region import FileRegion
from rivulet.common.types import TopicPartition
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.fetch_session import FINAL_EPOCH, INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch
from rivulet.replication.replica_manager import FetchRequestPartition

# Kafka's KafkaBroker.NumFetchSessionCacheShards and MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS:
# constants there, not configs.
NUM_SHARDS = 8
EVICTION_MS = 120_000
_INT_MAX = 2**31 - 1


class PartitionAnswer(Protocol):
    """What the session looks at in one partition's answer: a FetchResult or a PartitionData."""

    high_watermark: int
    log_start_offset: int
    preferred_read_replica: int


def must_answer(cached: CachedPartition, error: int, records: bytes | memoryview | FileRegion | None,
                answer: PartitionAnswer, diverging: bool, update: bool) -> bool:
    """Kafka's CachedPartition.maybeUpdateResponseData: whether an incremental answer carries
    this partition (records, a new HW or log start offset, a preferred read replica, an error,
    a diverging epoch) and, with ``update``, what the session then remembers of it."""
    respond = records is not None and len(records) > 0
    if cached.high_watermark != answer.high_watermark:
        respond = True
        if update:
            cached.high_watermark = answer.high_watermark
    if cached.local_log_start_offset != answer.log_start_offset:
        respond = True
        if update:
            cached.local_log_start_offset = answer.log_start_offset
    if answer.preferred_read_replica != -1:
        respond = True
    if error != 0:
        # Forgetting the HW makes the partition answered again once the error is gone.
        if update:
            cached.high_watermark = -1
        respond = True
    return respond or diverging


class CachedPartition:
    """One partition of a session: the request's last parameters and what was last answered."""

    __slots__ = ("topic", "topic_id", "partition", "fetch_offset", "max_bytes", "leader_epoch",
                 "fetcher_log_start_offset", "last_fetched_epoch", "high_watermark", "local_log_start_offset",
                 "_wanted")

    def __init__(self, topic: str | None, topic_id: uuid.UUID, partition: int, fetch_offset: int, max_bytes: int,
                 leader_epoch: int, fetcher_log_start_offset: int, last_fetched_epoch: int,
                 high_watermark: int = -1, local_log_start_offset: int = -1) -> None:
        self.topic = topic  # None: a topic id this broker did not know (yet)
        self.topic_id = topic_id
        self.partition = partition
        self.fetch_offset = fetch_offset
        self.max_bytes = max_bytes
        self.leader_epoch = leader_epoch
        self.fetcher_log_start_offset = fetcher_log_start_offset
        self.last_fetched_epoch = last_fetched_epoch
        self.high_watermark = high_watermark
        self.local_log_start_offset = local_log_start_offset
        # What the replica manager is asked for, kept until the request's parameters change: a
        # caught-up session's fetches then make no object per partition.
        self._wanted: FetchRequestPartition | None = None

    def update_request(self, other: CachedPartition) -> None:
        self.fetch_offset = other.fetch_offset
        self.max_bytes = other.max_bytes
        self.leader_epoch = other.leader_epoch
        self.fetcher_log_start_offset = other.fetcher_log_start_offset
        self.last_fetched_epoch = other.last_fetched_epoch
        self._wanted = None

    def wanted(self) -> FetchRequestPartition:
        w = self._wanted
        if w is None:
            assert self.topic is not None
            w = self._wanted = FetchRequestPartition(
                TopicPartition(self.topic, self.partition), self.fetch_offset, self.max_bytes, self.leader_epoch,
                self.fetcher_log_start_offset, self.last_fetched_epoch)
        return w


# A session's partitions are keyed by (topic id, partition) when it uses topic ids (Fetch v13+),
# else by (topic name, partition): Kafka's CachedPartition equality.
PartitionKey = tuple[uuid.UUID | str, int]


def key_of(topic: str | None, topic_id: uuid.UUID, partition: int, uses_topic_ids: bool) -> PartitionKey:
    if uses_topic_ids:
        return (topic_id, partition)
    assert topic is not None
    return (topic, partition)


class FetchSession:
    __slots__ = ("id", "privileged", "partitions", "uses_topic_ids", "creation_ms", "last_used_ms", "epoch",
                 "cached_size", "evictable_by_all", "evictable_by_privileged", "_runs")

    def __init__(self, session_id: int, privileged: bool, partitions: dict[PartitionKey, CachedPartition],
                 uses_topic_ids: bool, now: int) -> None:
        self.id = session_id
        self.privileged = privileged
        # Insertion-ordered: the order the log is read in; a partition that returned records
        # goes to the end, so that fetch.max.bytes does not starve the later ones.
        self.partitions = partitions
        self.uses_topic_ids = uses_topic_ids
        self.creation_ms = now
        self.last_used_ms = now
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.cached_size = -1
        # Which fetchers may evict it, as decided when it was last touched (Kafka's two trees).
        self.evictable_by_all = False
        self.evictable_by_privileged = False
        self._runs: list[Run] | None = None

    def runs(self) -> list[Run]:
        """The partitions in order, in runs of one topic (as an answer groups them); kept until
        the partitions or their order change."""
        runs = self._runs
        if runs is None:
            runs = self._runs = []
            for cp in self.partitions.values():
                if runs and runs[-1][0] == cp.topic_id and runs[-1][1] == cp.topic:
                    runs[-1][2].append(cp)
                else:
                    runs.append((cp.topic_id, cp.topic, [cp]))
        return runs

    def move_to_end(self, cp: CachedPartition) -> None:
        """A partition that returned records is read last next time (Kafka's round robin under
        fetch.max.bytes)."""
        key = key_of(cp.topic, cp.topic_id, cp.partition, self.uses_topic_ids)
        del self.partitions[key]
        self.partitions[key] = cp
        self._runs = None

    def evictable_key(self) -> tuple[bool, int, int]:
        return (self.privileged, self.cached_size, self.id)

    def update(self, added: Iterable[CachedPartition], forgotten: Iterable[PartitionKey]) -> None:
        """Kafka's FetchSession.update: the request's partitions added or their parameters
        updated, then the forgotten ones removed."""
        parts = self.partitions
        for cp in added:
            key = key_of(cp.topic, cp.topic_id, cp.partition, self.uses_topic_ids)
            old = parts.get(key)
            if old is None:
                parts[key] = cp
                self._runs = None
            else:
                old.update_request(cp)
        for key in forgotten:
            if parts.pop(key, None) is not None:
                self._runs = None

    def resolve_names(self, topic_name: TopicNames) -> None:
        """Kafka's maybeResolveUnknownName: a topic id unknown when cached may be known now."""
        runs = self.runs()
        if any(name is None for _, name, _ in runs):
            for cp in self.partitions.values():
                if cp.topic is None:
                    cp.topic = topic_name(cp.topic_id)
            self._runs = None


Run = tuple[uuid.UUID, "str | None", list[CachedPartition]]


class TopicNames(Protocol):
    def __call__(self, topic_id: uuid.UUID) -> str | None: ...


class FetchSessionCacheShard:
    """Kafka's FetchSessionCacheShard. At most ``max_entries / 8`` sessions, so the evictable
    sets are scanned rather than kept sorted."""

    def __init__(self, max_entries: int, eviction_ms: int, id_range: int, shard: int,
                 rng: random.Random) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self.id_range = id_range
        self.shard = shard
        self.sessions: dict[int, FetchSession] = {}
        self.total_partitions = 0
        self.evictions = 0
        self._rng = rng

    def new_session_id(self) -> int:
        low, high = max(1, self.shard * self.id_range), (self.shard + 1) * self.id_range
        while True:
            sid = self._rng.randrange(low, high)
            if sid not in self.sessions and sid != INVALID_SESSION_ID:
                return sid

    def maybe_create(self, now: int, privileged: bool, size: int, uses_topic_ids: bool,
                     partitions: dict[PartitionKey, CachedPartition]) -> int:
        """The new session's id, or INVALID_SESSION_ID when the shard admits none."""
        if len(self.sessions) < self.max_entries or self._try_evict(privileged, (privileged, size, 0), now):
            session = FetchSession(self.new_session_id(), privileged, partitions, uses_topic_ids, now)
            self.sessions[session.id] = session
            self.touch(session, now)
            return session.id
        return INVALID_SESSION_ID

    def _try_evict(self, privileged: bool, key: tuple[bool, int, int], now: int) -> bool:
        if not self.sessions:
            return False
        stale = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now - stale.last_used_ms > self.eviction_ms:
            self.remove(stale)
            self.evictions += 1
            return True
        # The least valuable evictable session, and only when worth no more than the new one.
        candidates = [s for s in self.sessions.values()
                      if (s.evictable_by_privileged if privileged else s.evictable_by_all)]
        if not candidates:
            return False
        victim = min(candidates, key=FetchSession.evictable_key)
        if key < victim.evictable_key():
            return False
        self.remove(victim)
        self.evictions += 1
        return True

    def remove(self, session: FetchSession) -> FetchSession | None:
        removed = self.sessions.pop(session.id, None)
        if removed is not None:
            self.total_partitions -= session.cached_size
        return removed

    def touch(self, session: FetchSession, now: int) -> None:
        session.last_used_ms = now
        if session.cached_size != -1:
            self.total_partitions -= session.cached_size
        session.cached_size = len(session.partitions)
        self.total_partitions += session.cached_size
        # A privileged fetcher may evict any unprivileged session, any fetcher one older than the
        # eviction age.
        old = now - session.creation_ms > self.eviction_ms
        session.evictable_by_privileged = old or not session.privileged
        session.evictable_by_all = old


class FetchSessionCache:
    """The broker's fetch sessions: Kafka's FetchSessionCache over its shards, and the part of
    its FetchManager that opens, finds and closes sessions."""

    def __init__(self, max_slots: int, rng: random.Random | None = None) -> None:
        id_range = _INT_MAX // NUM_SHARDS
        self._rng = rng or random.Random()
        self.shards = [FetchSessionCacheShard(max_slots // NUM_SHARDS, EVICTION_MS, id_range, n, self._rng)
                       for n in range(NUM_SHARDS)]
        self._next_shard = 0

    def shard_of(self, session_id: int) -> FetchSessionCacheShard | None:
        n = session_id // self.shards[0].id_range
        return self.shards[n] if 0 <= n < NUM_SHARDS else None

    def get(self, session_id: int) -> FetchSession | None:
        shard = self.shard_of(session_id)
        return None if shard is None else shard.sessions.get(session_id)

    def remove(self, session_id: int) -> None:
        shard = self.shard_of(session_id)
        session = None if shard is None else shard.sessions.get(session_id)
        if shard is not None and session is not None:
            shard.remove(session)

    def create(self, now: int, privileged: bool, uses_topic_ids: bool,
               partitions: dict[PartitionKey, CachedPartition]) -> int:
        """A full fetch's new session over ``partitions`` (its answer's), in the next shard."""
        shard = self.shards[self._next_shard]
        self._next_shard = (self._next_shard + 1) % NUM_SHARDS
        return shard.maybe_create(now, privileged, len(partitions), uses_topic_ids, partitions)

    def incremental(self, now: int, session_id: int, epoch: int, uses_topic_ids: bool,
                    added: Iterable[CachedPartition], forgotten: Iterable[PartitionKey]) -> FetchSession | ErrorCode | None:
        """Kafka's FetchManager.newContext for an incremental fetch: the session updated, its
        epoch advanced; an error code; or None when the update left it empty (it is closed and
        the request is served without a session)."""
        shard = self.shard_of(session_id)
        session = None if shard is None else shard.sessions.get(session_id)
        if shard is None or session is None:
            return ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        if session.epoch != epoch:
            return ErrorCode.INVALID_FETCH_SESSION_EPOCH
        if session.uses_topic_ids != uses_topic_ids:
            return ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
        session.update(added, forgotten)
        if not session.partitions:
            shard.remove(session)
            return None
        shard.touch(session, now)
        session.epoch = next_epoch(session.epoch)
        return session

    # Kafka's FetchSessionCache gauges and the shards' shared eviction meter.
    def num_sessions(self) -> int:
        return sum(len(s.sessions) for s in self.shards)

    def num_partitions_cached(self) -> int:
        return sum(s.total_partitions for s in self.shards)

    def evictions(self) -> int:
        return sum(s.evictions for s in self.shards)


__all__ = ["EVICTION_MS", "FINAL_EPOCH", "INITIAL_EPOCH", "INVALID_SESSION_ID", "NUM_SHARDS", "CachedPartition",
           "FetchSession", "FetchSessionCache", "FetchSessionCacheShard", "PartitionKey", "key_of", "must_answer",
           "next_epoch"]
