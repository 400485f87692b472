"""The Iceberg translator's tick looks only at the partitions of topics whose iceberg.mode is
set (TopicManager.table_partitions, which the broker gives it): none at all while no topic has
one, however many partitions the broker holds."""

from __future__ import annotations

import asyncio

import pytest

from rivulet.server.broker import Broker
from tests.unit.test_broker_wiring import started

pytestmark = pytest.mark.fast


def test_only_table_topics_partitions_are_walked(tmp_path) -> None:
    async def main() -> None:
        b: Broker = await started(tmp_path)
        try:
            topics = b.topics
            assert topics is not None and b.iceberg is not None
            topics.create_topic("plain", 8, 1, {})
            topics.create_topic("other", 4, 1, {"iceberg.mode": "none"})
            assert len(b.replica_manager.partitions) >= 12
            assert topics.table_partitions() == []
            b.iceberg._tick()  # the broker gives the translator this view: nothing to look at
            assert b.iceberg.topics == {}

            topics.alter_topic_configs("plain", {"iceberg.mode": "key_value"})
            assert sorted(p.tp.partition for p in topics.table_partitions()) == list(range(8))
            topics.create_topic("orders", 2, 1, {"iceberg.mode": "key_value"})
            assert sorted((p.tp.topic, p.tp.partition) for p in topics.table_partitions()) == \
                [("orders", 0), ("orders", 1)] + [("plain", i) for i in range(8)]
            topics.alter_topic_configs("plain", {})
            assert {p.tp.topic for p in topics.table_partitions()} == {"orders"}
            await topics.delete_topic("orders")
            assert topics.table_partitions() == []
        finally:
            await b.shutdown()
    asyncio.run(main())
