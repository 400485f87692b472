"""Producer ids in ZooKeeper mode: brokers take disjoint blocks from /latest_producer_id_block,
recorded in Kafka's format, so two brokers never hand out the same id."""

from __future__ import annotations

import json

import pytest

from rivulet.controller.producer_ids import ZkProducerIdManager
from rivulet.controller.zk_client import KafkaZkClient

pytestmark = [pytest.mark.integration, pytest.mark.cluster]


def test_two_brokers_take_disjoint_blocks(zk_connect):
    clients = [KafkaZkClient(zk_connect), KafkaZkClient(zk_connect)]
    for c in clients:
        c.start()
    try:
        one, two = ZkProducerIdManager(clients[0], 1, block_size=3), ZkProducerIdManager(clients[1], 2, block_size=3)
        ids = [one.generate_producer_id(), two.generate_producer_id(), one.generate_producer_id(),
               one.generate_producer_id(), one.generate_producer_id(), two.generate_producer_id()]
        assert ids == [0, 3, 1, 2, 6, 4]
        doc = json.loads(clients[0].zk.get("/latest_producer_id_block")[0])
        assert doc == {"version": 1, "broker": 1, "block_start": "6", "block_end": "8"}
        # A restarted broker starts after the last block taken.
        assert ZkProducerIdManager(clients[1], 2, block_size=3).generate_producer_id() == 9
    finally:
        for c in clients:
            c.close()
