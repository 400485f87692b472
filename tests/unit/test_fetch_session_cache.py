"""The fetch session cache (KIP-227) as Kafka 4.3.1's FetchSessionCache and FetchManager keep it."""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass

import pytest

from rivulet.protocol.errors import ErrorCode
from rivulet.server.fetch_session import (
    EVICTION_MS,
    NUM_SHARDS,
    CachedPartition,
    FetchSession,
    FetchSessionCache,
    must_answer,
    next_epoch,
)

pytestmark = pytest.mark.fast

ZERO = uuid.UUID(int=0)


def _cp(topic: str, p: int, offset: int = 0) -> CachedPartition:
    return CachedPartition(topic, ZERO, p, offset, 1 << 20, -1, -1, -1)


def _parts(n: int, topic: str = "t") -> dict:
    return {(topic, i): _cp(topic, i) for i in range(n)}


@dataclass
class _Answer:
    high_watermark: int = 10
    log_start_offset: int = 0
    preferred_read_replica: int = -1


def test_epochs_as_kafka():
    assert next_epoch(0) == 1 and next_epoch(5) == 6
    assert next_epoch(2**31 - 1) == 1  # wraps past 0, which would mean a new session
    assert next_epoch(-1) == -1


def test_new_session_ids_are_nonzero_unique_and_in_their_shard():
    cache = FetchSessionCache(1000, random.Random(1))
    ids = [cache.create(0, False, False, _parts(1)) for _ in range(80)]
    assert 0 not in ids and len(set(ids)) == 80
    for sid in ids:
        session = cache.get(sid)
        assert session is not None and session.epoch == 1
        assert cache.shard_of(sid).sessions[sid] is session
    # Round robin over the 8 shards: 10 sessions each.
    assert [len(s.sessions) for s in cache.shards] == [10] * NUM_SHARDS
    assert cache.num_sessions() == 80 and cache.num_partitions_cached() == 80


def test_incremental_epoch_and_id_errors():
    cache = FetchSessionCache(1000, random.Random(2))
    sid = cache.create(0, False, False, _parts(2))
    assert cache.incremental(0, sid + 1, 1, False, [], []) == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert cache.incremental(0, sid, 2, False, [], []) == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    # A session opened with names (v < 13) is not continued with ids, nor the reverse.
    assert cache.incremental(0, sid, 1, True, [], []) == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    session = cache.incremental(0, sid, 1, False, [], [])
    assert isinstance(session, FetchSession) and session.epoch == 2
    # The same epoch again (a duplicate request) is refused.
    assert cache.incremental(0, sid, 1, False, [], []) == ErrorCode.INVALID_FETCH_SESSION_EPOCH


def test_incremental_adds_updates_and_forgets():
    cache = FetchSessionCache(1000, random.Random(3))
    sid = cache.create(0, False, False, _parts(2))
    session = cache.incremental(0, sid, 1, False, [_cp("t", 1, offset=7), _cp("u", 0)], [("t", 0)])
    assert isinstance(session, FetchSession)
    assert list(session.partitions) == [("t", 1), ("u", 0)]
    assert session.partitions[("t", 1)].fetch_offset == 7
    assert cache.num_partitions_cached() == 2
    # Forgetting every partition closes the session: the request is served without one.
    assert cache.incremental(0, sid, 2, False, [], [("t", 1), ("u", 0)]) is None
    assert cache.get(sid) is None and cache.num_partitions_cached() == 0


def test_only_changed_partitions_are_answered():
    cp = _cp("t", 0)
    # New in the session: answered once, then only on a change Kafka counts.
    assert must_answer(cp, 0, b"", _Answer(), False, True)
    assert not must_answer(cp, 0, b"", _Answer(), False, True)
    assert must_answer(cp, 0, b"x", _Answer(), False, True)  # records
    assert must_answer(cp, 0, b"", _Answer(high_watermark=11), False, True)
    assert must_answer(cp, 0, b"", _Answer(high_watermark=11, log_start_offset=3), False, True)
    assert must_answer(cp, 0, b"", _Answer(high_watermark=11, log_start_offset=3, preferred_read_replica=2),
                       False, True)
    assert must_answer(cp, 0, b"", _Answer(high_watermark=11, log_start_offset=3), True, True)  # diverging
    assert not must_answer(cp, 0, b"", _Answer(high_watermark=11, log_start_offset=3), False, True)
    # An error is answered and forgets the HW, so the partition is answered again once it clears.
    assert must_answer(cp, ErrorCode.NOT_LEADER_OR_FOLLOWER, b"", _Answer(high_watermark=-1, log_start_offset=3),
                       False, True)
    assert cp.high_watermark == -1
    assert must_answer(cp, 0, b"", _Answer(high_watermark=11, log_start_offset=3), False, True)
    # Without update nothing is remembered.
    assert must_answer(cp, 0, b"", _Answer(high_watermark=12, log_start_offset=3), False, False)
    assert cp.high_watermark == 11


def test_full_cache_evicts_as_kafka():
    cache = FetchSessionCache(NUM_SHARDS, random.Random(4))  # one session per shard
    shard = cache.shards[0]
    first = shard.maybe_create(0, False, 5, False, _parts(5))
    assert first != 0
    # A recently created session is evictable only by a privileged (follower) fetcher, and only
    # when unprivileged: a larger consumer session does not get in.
    assert shard.maybe_create(1000, False, 50, False, _parts(50)) == 0
    follower = shard.maybe_create(1000, True, 1, False, _parts(1))
    assert follower != 0 and shard.sessions.keys() == {follower} and cache.evictions() == 1
    assert shard.maybe_create(2000, False, 100, False, _parts(100)) == 0
    # Created longer ago than the eviction age (and touched since): evictable by anything worth
    # more by (privileged, size, id), so not by a consumer, nor by a follower as small.
    shard.touch(shard.sessions[follower], 2000 + EVICTION_MS)
    assert shard.maybe_create(2001 + EVICTION_MS, False, 100, False, _parts(100)) == 0
    assert shard.maybe_create(2001 + EVICTION_MS, True, 1, False, _parts(1)) == 0
    assert shard.maybe_create(2001 + EVICTION_MS, True, 2, False, _parts(2)) != 0
    assert cache.evictions() == 2 and cache.num_partitions_cached() == 2


def test_stale_session_is_evicted_by_anyone():
    cache = FetchSessionCache(NUM_SHARDS, random.Random(5))
    shard = cache.shards[0]
    old = shard.maybe_create(0, True, 100, False, _parts(100))
    assert shard.maybe_create(EVICTION_MS, False, 1, False, _parts(1)) == 0
    new = shard.maybe_create(EVICTION_MS + 1, False, 1, False, _parts(1))
    assert new != 0 and old not in shard.sessions and cache.num_partitions_cached() == 1


def test_zero_slots_keep_no_session():
    cache = FetchSessionCache(0, random.Random(6))
    assert cache.create(0, True, True, _parts(3)) == 0 and cache.num_sessions() == 0


def test_runs_follow_the_session_order():
    cache = FetchSessionCache(1000, random.Random(7))
    parts = {**_parts(2, "t"), **_parts(1, "u")}
    session = cache.get(cache.create(0, False, False, parts))
    assert [(name, [cp.partition for cp in cps]) for _, name, cps in session.runs()] == [("t", [0, 1]), ("u", [0])]
    kept = session.runs()
    # An incremental fetch that only moves positions keeps the runs (and each partition's
    # request, rebuilt only for the one that changed).
    wanted = parts[("t", 1)].wanted()
    assert cache.incremental(0, session.id, 1, False, [_cp("t", 0, offset=5)], []) is session
    assert session.runs() is kept and parts[("t", 1)].wanted() is wanted
    assert parts[("t", 0)].wanted().fetch_offset == 5
    # A partition that returned records is read last next time: t/0 now follows u/0.
    session.move_to_end(parts[("t", 0)])
    assert [(name, [cp.partition for cp in cps]) for _, name, cps in session.runs()] == \
        [("t", [1]), ("u", [0]), ("t", [0])]
