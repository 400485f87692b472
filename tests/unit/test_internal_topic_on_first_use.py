"""On a single node a coordinator's internal topic is made when first needed, as Kafka 4.3.1's
brokers make it (``InternalTopicCoordinator``): shown with the group coordinator over fakes."""

from __future__ import annotations

import asyncio

import pytest

from rivulet.coordinator.offsets_topic import GROUP_METADATA_TOPIC_NAME
from rivulet.protocol.errors import ErrorCode

from test_group_support import FakeCluster, Member, new_coordinator

pytestmark = pytest.mark.fast

NOT_AVAILABLE = (ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1)


def test_a_new_broker_makes_the_topic_on_the_first_find_coordinator_then_leads_it():
    async def main() -> None:
        b = FakeCluster(holds_offsets_topic=False, **{"offsets.topic.num.partitions": 3})
        c = new_coordinator(b)
        c.startup()
        try:
            assert b.metadata.get(GROUP_METADATA_TOPIC_NAME) is None  # nothing at start-up
            m = Member(c, "g")
            m.join()
            assert m.join_result.error == ErrorCode.NOT_COORDINATOR  # no FindCoordinator made it
            assert b.internal_creations == []
            # Asked twice while it is made: one creation; both told to come back.
            assert c.find_group_coordinator("g") == NOT_AVAILABLE
            assert c.find_group_coordinator("other") == NOT_AVAILABLE
            while c.find_group_coordinator("g") == NOT_AVAILABLE:
                await asyncio.sleep(0)
            assert b.internal_creations == [GROUP_METADATA_TOPIC_NAME]
            topic = b.metadata.get(GROUP_METADATA_TOPIC_NAME)
            assert topic.num_partitions == 3 and topic.configs == c.offsets_topic_configs()
            await c.wait_loaded()
            assert c.find_group_coordinator("g") == (ErrorCode.NONE, b.node.node_id, b.node.host, b.node.port)
            m.join()
            assert m.join_result.error in (ErrorCode.MEMBER_ID_REQUIRED, ErrorCode.NONE)
            # A restart over the same data dir leads the topic from start-up, making nothing.
            c.shutdown()
            c = new_coordinator(b)
            c.startup()
            await c.wait_loaded()
            assert c.find_group_coordinator("g")[0] == ErrorCode.NONE
            assert b.internal_creations == [GROUP_METADATA_TOPIC_NAME]
        finally:
            c.shutdown()
    asyncio.run(main())


def test_partitions_are_counted_from_the_topic_the_data_dir_holds():
    """A topic made with another count (an earlier setting) keeps its count: keys hash over it."""
    b = FakeCluster(holds_offsets_topic=False, **{"offsets.topic.num.partitions": 7})
    b.make_internal_topic(GROUP_METADATA_TOPIC_NAME, 2, {})
    c = new_coordinator(b)
    c.startup()
    assert c.manager.num_partitions == 2
    assert c.manager.owned_partitions == {0, 1}
    c.shutdown()
