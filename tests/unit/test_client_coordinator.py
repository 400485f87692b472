"""The group coordinator's reactions to heartbeat and commit answers (no broker needed)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace as NS

import pytest

from rivulet.client.consumer.assignors import make_assignors
from rivulet.client.client import KafkaClient
from rivulet.client.config import resolve
from rivulet.client.consumer.coordinator import (
    STABLE,
    UNJOINED,
    ConsumerCoordinator,
    GroupConsumer,
    RebalanceNeeded,
)
from rivulet.client.consumer.subscription import OffsetAndMetadata, SubscriptionState
from rivulet.protocol.errors import ErrorCode

pytestmark = pytest.mark.fast


class FakeConsumer(GroupConsumer):
    """The consumer as the coordinator sees it: what it was told."""

    def __init__(self) -> None:
        self.woken = 0
        self.fenced: list = []
        self.reports: list = []
        self.polling = False
        self.polled_at = 0.0

    def wake(self) -> None:
        self.woken += 1

    def fence(self, tps) -> None:
        self.fenced.append(sorted(tps))

    def report(self, err) -> None:
        self.reports.append(err)

    def in_poll(self) -> bool:
        return self.polling

    def last_poll(self) -> float:
        return self.polled_at


def coordinator(answer, **conf):
    c = resolve({"bootstrap.servers": "127.0.0.1:1", "group.id": "g", **conf}, "consumer")
    subs = SubscriptionState()
    subs.subscribe(["t"])
    subs.assign_from_subscribed([("t", 0), ("t", 1)])
    consumer = FakeConsumer()
    coord = ConsumerCoordinator(consumer, KafkaClient(c), subs, c, make_assignors(c["partition.assignment.strategy"]))
    coord.coordinator, coord.generation, coord.member_id, coord.state = 1, 5, "m-1", STABLE
    coord.rejoin_needed = False
    sent: list = []

    async def send(req, timeout=None):
        sent.append(req)
        return answer(req)
    coord._send = send
    return coord, consumer, sent


def heartbeat(coord) -> None:
    asyncio.run(coord._heartbeat_once())


def test_heartbeat_ok_keeps_the_membership():
    coord, consumer, sent = coordinator(lambda req: NS(error_code=0))
    heartbeat(coord)
    assert (sent[0].group_id, sent[0].generation_id, sent[0].member_id) == ("g", 5, "m-1")
    assert not coord.rejoin_needed and coord.generation == 5 and consumer.fenced == []


def test_rebalance_in_progress_asks_to_rejoin_and_keeps_partitions():
    coord, consumer, _ = coordinator(lambda req: NS(error_code=ErrorCode.REBALANCE_IN_PROGRESS))
    heartbeat(coord)
    assert coord.rejoin_needed and coord.generation == 5 and coord.member_id == "m-1"
    assert consumer.fenced == [] and not coord.partitions_lost


def test_illegal_generation_loses_partitions_but_keeps_the_member_id():
    coord, consumer, _ = coordinator(lambda req: NS(error_code=ErrorCode.ILLEGAL_GENERATION))
    heartbeat(coord)
    assert coord.rejoin_needed and coord.generation == -1 and coord.member_id == "m-1"
    assert coord.state == UNJOINED and coord.partitions_lost
    assert consumer.fenced == [[("t", 0), ("t", 1)]]


def test_unknown_member_id_starts_over_without_a_member_id():
    coord, consumer, _ = coordinator(lambda req: NS(error_code=ErrorCode.UNKNOWN_MEMBER_ID))
    heartbeat(coord)
    assert coord.rejoin_needed and coord.generation == -1 and coord.member_id == ""
    assert coord.partitions_lost and consumer.fenced


@pytest.mark.parametrize("code", [ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE])
def test_coordinator_errors_send_it_looking_for_the_coordinator(code):
    coord, consumer, _ = coordinator(lambda req: NS(error_code=code))
    heartbeat(coord)
    assert coord.coordinator is None and consumer.woken
    assert coord.generation == 5  # the membership may well survive the move


def test_session_timeout_without_answers_marks_the_coordinator_dead():
    coord, consumer, sent = coordinator(lambda req: NS(error_code=0), **{"session.timeout.ms": 1000,
                                                                          "heartbeat.interval.ms": 100})
    coord.last_heartbeat_ok -= 5  # nothing answered for five seconds

    async def one_round():
        task = asyncio.get_running_loop().create_task(coord._heartbeat_loop())
        await asyncio.sleep(0.3)
        coord.closing = True
        task.cancel()
    consumer.polling = True  # the application is polling: only the session matters here
    asyncio.run(one_round())
    assert coord.coordinator is None


def test_commit_carries_the_generation_and_maps_errors():
    answers = iter([ErrorCode.NONE, ErrorCode.ILLEGAL_GENERATION])

    def answer(req):
        code = next(answers)
        return NS(topics=[NS(name="t", partitions=[NS(partition_index=0, error_code=code)])])
    coord, consumer, sent = coordinator(answer)
    asyncio.run(coord.commit({("t", 0): OffsetAndMetadata(42)}))
    req = sent[0]
    assert (req.generation_id_or_member_epoch, req.member_id) == (5, "m-1")
    assert req.topics[0].partitions[0].committed_offset == 42
    assert coord.subs.state(("t", 0)).committed.offset == 42
    with pytest.raises(Exception, match="ILLEGAL_GENERATION"):
        asyncio.run(coord.commit({("t", 0): OffsetAndMetadata(43)}))
    assert coord.rejoin_needed and coord.generation == -1


def test_commit_to_a_group_that_is_gone_starts_over_without_a_member_id():
    """Kafka 4 answers OffsetCommit v9+ from a member of a deleted group with GROUP_ID_NOT_FOUND."""
    coord, consumer, _ = coordinator(lambda req: NS(topics=[NS(name="t", partitions=[
        NS(partition_index=0, error_code=ErrorCode.GROUP_ID_NOT_FOUND)])]))
    with pytest.raises(Exception, match="GROUP_ID_NOT_FOUND"):
        asyncio.run(coord.commit({("t", 0): OffsetAndMetadata(7)}))
    assert coord.rejoin_needed and coord.generation == -1 and coord.member_id == ""


@pytest.mark.parametrize("lost_at", ["JoinGroup", "SyncGroup"])
def test_a_connection_lost_mid_rebalance_leaves_the_rejoin_to_do(lost_at):
    """The coordinator's broker dies while the join is under way: the consumer looks for the
    coordinator again and then joins again. (With the rejoin flag left clear, a consumer whose
    SyncGroup was cut off by a kill -9 never rejoined: no heartbeats, no fetches, for good.)"""
    joined = NS(error_code=0, generation_id=1, member_id="m-1", protocol_name="range", leader="m-0",
                skip_assignment=False, members=[])
    coord, consumer, sent = coordinator(lambda req: joined)
    coord.state, coord.generation, coord.rejoin_needed = UNJOINED, -1, True

    async def send(node, req, kind=None, timeout=None):
        sent.append(req)
        if type(req).__name__.startswith(lost_at):
            raise ConnectionError("connection closed by the broker")
        return joined
    coord.client.send = send
    del coord._send  # the real one, which turns a lost connection into a rebalance to redo
    with pytest.raises(RebalanceNeeded):
        asyncio.run(coord._join_and_sync())
    assert [type(r).__name__ for r in sent][-1].startswith(lost_at)
    assert coord.coordinator is None and consumer.woken
    assert coord.need_rejoin()
