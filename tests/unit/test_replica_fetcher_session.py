"""The replica fetcher's requests in a fetch session (KIP-227), against a scripted leader: the
full fetch, incremental ones naming only what changed, forgotten partitions, starting over
after a session error, and the close when the last partition leaves. Rivulet's broker keeps
no sessions today, so only a scripted leader makes the fetcher use one; the cluster tests
cover a real leader."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace as NS

import pytest

from rivulet.common.types import TopicPartition
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages import fetch_request as fq
from rivulet.protocol.messages import fetch_response as fr
from rivulet.replication.fetcher import FetcherConfig, ReplicaFetcher, _FetchState
from rivulet.replication.replica_manager import LeaderEndpoint

pytestmark = pytest.mark.fast

A = uuid.uuid4()


class Leader:
    """Answers each Fetch with the next scripted (error, session id, partitions answered)."""

    def __init__(self, *answers: tuple[int, int, list[int]]) -> None:
        self.answers = list(answers)
        self.requests: list[fq.FetchRequest] = []
        self.closed = False

    def version_for(self, api_key: int, cap: int) -> int:
        return cap

    async def send(self, req: fq.FetchRequest, version: int, timeout: float | None = None) -> fr.FetchResponse:
        self.requests.append(req)
        code, session_id, parts = self.answers.pop(0)
        return fr.FetchResponse(throttle_time_ms=0, error_code=code, session_id=session_id, responses=[
            fr.FetchableTopicResponse(topic_id=A, partitions=[
                fr.PartitionData(partition_index=p, high_watermark=5, log_start_offset=0) for p in parts])]
            if parts else [])


def partition(p: int, leo: int = 5) -> NS:
    log = NS(log_end_offset=leo, latest_epoch=3, log_start_offset=0, high_watermark=5)
    return NS(tp=TopicPartition("a", p), topic_id=A, leader_epoch=3, deleted=False, is_leader=False, log=log,
              update_follower_high_watermark=lambda hw: None)


def fetcher() -> ReplicaFetcher:
    rm = NS(fetch_purgatory=NS(check_and_complete=lambda tp: None))
    return ReplicaFetcher(LeaderEndpoint(1, "127.0.0.1", 1), rm, 2, FetcherConfig(), lambda: 7)


def sent(req: fq.FetchRequest) -> tuple[int, int, list[int], list[int]]:
    return (req.session_id, req.session_epoch, [p.partition for t in req.topics for p in t.partitions],
            [p for t in req.forgotten_topics_data for p in t.partitions])


def test_fetches_in_a_session_with_its_leader() -> None:
    async def run() -> None:
        f = fetcher()
        p0, p1, p2 = partition(0), partition(1), partition(2)
        states = [_FetchState(p) for p in (p0, p1, p2)]
        leader = Leader((0, 9, [0, 1, 2]), (0, 9, []), (0, 9, [1]),
                        (ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0, []), (0, 10, [0, 1]))
        await f._fetch(leader, states)
        await f._fetch(leader, states)  # nothing changed: nothing named
        p1.log.log_end_offset = 8
        await f._fetch(leader, states[:2])  # p1 moved on, p2 left (truncating, delayed)
        await f._fetch(leader, states[:2])
        await f._fetch(leader, states[:2])
        assert [sent(r) for r in leader.requests] == [
            (0, 0, [0, 1, 2], []), (9, 1, [], []), (9, 2, [1], [2]),
            (9, 3, [], []),  # refused: a full fetch follows, closing session 9
            (9, 0, [0, 1], [])]
        assert (f.session.session_id, f.session.epoch) == (10, 1)
    asyncio.run(run())


def test_a_leader_without_sessions_gets_full_fetches() -> None:
    async def run() -> None:
        f = fetcher()
        states = [_FetchState(partition(0))]
        leader = Leader((0, 0, [0]), (0, 0, [0]))
        await f._fetch(leader, states)
        await f._fetch(leader, states)
        assert [sent(r) for r in leader.requests] == [(0, 0, [0], []), (0, 0, [0], [])]
    asyncio.run(run())


def test_the_session_is_closed_when_the_last_partition_leaves() -> None:
    async def run() -> None:
        f = fetcher()
        leader = Leader((0, 9, [0]), (0, 0, []))
        await f._fetch(leader, [_FetchState(partition(0))])
        f._link.open_connection = lambda: leader  # the scripted leader as the link's open connection
        await f.close(end_session=True)
        assert sent(leader.requests[-1]) == (9, -1, [], [])
        assert f.session.session_id == 0
    asyncio.run(run())
