"""Creating and deleting a large topic leaves the event loop free: another client's Metadata and
Produce requests are answered while it happens, not after."""

from __future__ import annotations

import os
import threading
import time

import pytest

from benchmarks.topic_create_latency import PROBE_TOPIC, Probe
from rivulet.testing import BrokerProcess

pytestmark = pytest.mark.integration

PARTITIONS = 2000


def answered_during(done: list[tuple[float, float]], start: float, end: float) -> int:
    """Requests due after ``start`` whose answer arrived before ``end``."""
    return sum(1 for due, ms in done if due >= start and due + ms / 1000 < end)


def test_other_clients_are_served_while_a_2000_partition_topic_is_created_and_deleted():
    from confluent_kafka.admin import AdminClient, NewTopic

    with BrokerProcess() as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(PROBE_TOPIC, num_partitions=1, replication_factor=1)])[PROBE_TOPIC].result(30)
        probe = Probe(interval=0.002)
        th = threading.Thread(target=probe.run, args=(broker.bootstrap,), daemon=True)
        th.start()
        try:
            while len(probe.produce) < 5:  # the probe's connections are up before the big request
                time.sleep(0.05)
            t0 = time.perf_counter()
            admin.create_topics([NewTopic("big", num_partitions=PARTITIONS, replication_factor=1)],
                                operation_timeout=300, request_timeout=300)["big"].result(300)
            t1 = time.perf_counter()
            md = admin.list_topics("big", timeout=30).topics["big"]
            assert md.error is None and len(md.partitions) == PARTITIONS
            leader = admin.list_topics(PROBE_TOPIC, timeout=30).topics[PROBE_TOPIC].partitions[0].leader
            assert leader >= 0 and all(p.leader == leader and p.error is None for p in md.partitions.values())
            admin.delete_topics(["big"], operation_timeout=300, request_timeout=300)["big"].result(300)
        finally:
            probe.stop()
            th.join(120)
        assert not probe.errors, probe.errors[:5]
        # While the creation ran, the probe's requests (one at a time: each waits for its answer)
        # were answered, both kinds: a blocked loop would have answered none before it ended.
        during_md, during_produce = answered_during(probe.metadata, t0, t1), answered_during(probe.produce, t0, t1)
        assert during_md >= 5 and during_produce >= 5, (during_md, during_produce, t1 - t0)
        assert "big" not in admin.list_topics(timeout=30).topics
        assert not [n for n in os.listdir(broker.data_dir) if n.startswith("big-")]
