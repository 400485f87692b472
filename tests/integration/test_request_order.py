"""Requests pipelined on one connection are processed one after another, as Kafka's muted
channel has them: on a 3-broker cluster (offsets topic RF=3), an OffsetCommit followed at once
by an OffsetFetch of the same group on the same coordinator connection (a consumer's
commitAsync then committed()) must see the commit, though the commit waits for its
replication before it is answered."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from rivulet.client import core
from rivulet.client.connection import BrokerConnection
from rivulet.common.types import TopicPartition
from tests.cluster import ZkCluster, eventually, find_coordinator, three_brokers
from tests.integration.test_replication_faults import BROKER_CONFIG, create_topic

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

ROUNDS = 10


@pytest.fixture
def cluster(zk_connect):
    with three_brokers(zk_connect, **BROKER_CONFIG) as c:
        yield c


def group_coordinator(cluster: ZkCluster, group: str) -> int:
    found = [-1]

    def ask() -> bool:
        found[0] = find_coordinator(cluster.brokers[1], group)
        return found[0] >= 0
    eventually(ask, 60, f"a coordinator for {group}")
    return found[0]


def test_an_offset_fetch_pipelined_behind_a_commit_sees_the_commit(cluster):
    topic, group = f"order-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, topic, 1)
    coordinator = cluster.brokers[group_coordinator(cluster, group)]
    tp = TopicPartition(topic, 0)

    async def go() -> list[tuple[int, object]]:
        conn = await BrokerConnection("127.0.0.1", coordinator.port).connect(10)
        seen: list[tuple[int, object]] = []
        try:
            # The group's offsets partition may still be loading: one commit on its own first.
            async def settled() -> bool:
                resp = await conn.send(core.offset_commit_request(group, {(topic, 0): core.OffsetAndMetadata(0)}))
                return not core.read_offset_commit(resp).errors
            for _ in range(60):
                if await settled():
                    break
                await asyncio.sleep(0.5)
            else:
                raise AssertionError(f"group {group} never took a commit")
            for i in range(1, ROUNDS + 1):
                committed = conn.send_nowait(core.offset_commit_request(
                    group, {(topic, 0): core.OffsetAndMetadata(100 * i)}))
                # Both kinds of client: require_stable (the Java consumer's committed()) or not.
                fetched = conn.send_nowait(core.offset_fetch_request(group, [(topic, 0)], require_stable=i % 2 == 0))
                commit = core.read_offset_commit(await conn.wait(committed))
                assert not commit.errors, commit.errors
                offsets = core.read_offset_fetch(await conn.wait(fetched))
                got = offsets.ok.get(tp)
                seen.append((100 * i, got.offset if got is not None else f"error {offsets.errors}"
                             if offsets.errors else "nothing committed"))
        finally:
            await conn.close()
        return seen

    seen = asyncio.run(go())
    assert len(seen) == ROUNDS
    # Each fetch ran after the commit before it had been answered: it reads that commit.
    assert [got for _, got in seen] == [want for want, _ in seen], seen
