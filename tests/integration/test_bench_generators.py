"""The load generators of benchmarks.compare's issue 32 rows, against a real Rivulet broker:
franz-go's transactional txnperf and Kafka's Java KafkaShareConsumer in ShareAcks.java; and the
even fill the many-partition consume rows read."""

from __future__ import annotations

import shutil
import uuid

import pytest

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from benchmarks import compare, share_groups, txn_perf
from benchmarks.transactions import count_committed, create_topic
from rivulet.client.blocking import BlockingConnection
from rivulet.protocol.messages import fetch_request as fq
from rivulet.protocol.records import iter_batches
from rivulet.testing import BrokerProcess


@pytest.mark.go
def test_txnperf_commits_every_record_in_whole_transactions(broker):
    if shutil.which("go") is None:
        pytest.skip("Go is not installed, so txnperf cannot be built")
    topic = f"txnperf-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, 2)
    s = txn_perf.run(broker.bootstrap, topic, 1_050, 100, 100, f"txnperf-{uuid.uuid4().hex[:6]}", timeout=120)
    assert (s.records, s.transactions) == (1_000, 10) and s.seconds > 0
    # the warm-up transaction was aborted: exactly the counted records are committed
    assert count_committed(broker.bootstrap, topic, 2) == 1_000


@pytest.mark.java
def test_share_acks_counts_every_acknowledgement(java):
    # Short heartbeats: the join is not what this checks.
    b = BrokerProcess({"group.share.min.heartbeat.interval.ms": "500", "group.share.heartbeat.interval.ms": "500"})
    b.start()
    try:
        topic = share_groups.fill(b.bootstrap, 2_000, 10)
        f = share_groups.java_share_figures(b.bootstrap, topic, 2_000, 2, timeout=120)
        assert f.records >= 2_000 and 0 < f.first_ack_s <= f.seconds and 0 < f.first_batch <= f.records
    finally:
        b.cleanup()


def test_the_even_fill_appends_the_same_count_to_every_partition_in_one_batch_each(broker):
    topic = f"fill-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, 4)
    skew = Producer({"bootstrap.servers": broker.bootstrap})
    for _ in range(7):  # a layout of the produce row's kind before it: all in one partition
        skew.produce(topic, b"x", partition=0)
    assert skew.flush(30) == 0
    results: dict[str, float] = {}
    compare.fill_layout(results, "rivulet", "k", broker.bootstrap, [topic], 4, 25)
    assert (results["k.layout_min"], results["k.layout_median"], results["k.layout_max"]) == (25, 25, 25)
    ends = compare.log_ends(broker.bootstrap, [topic], 4)
    assert [ends[(topic, p)] for p in range(4)] == [32, 25, 25, 25]
    host, port = broker.bootstrap.rsplit(":", 1)
    conn = BlockingConnection(host, int(port))
    try:
        answer = conn.request(fq.FetchRequest(
            replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
            session_epoch=-1, forgotten_topics_data=[], rack_id="",
            topics=[fq.FetchTopic(topic=topic, partitions=[
                fq.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=ends[(topic, p)] - 25,
                                  last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)
                for p in range(4)])]), 12)
    finally:
        conn.close()
    for part in answer.responses[0].partitions:
        batches = [h for _, h in iter_batches(bytes(part.records))]
        assert [(h.base_offset, h.records_count) for h in batches] == [(ends[(topic, part.partition_index)] - 25, 25)]


@pytest.mark.parametrize("kind", ["rivulet", pytest.param("kafka", marks=pytest.mark.java)])
def test_the_many_partition_topics_get_their_128_kib_index_on_both_brokers(kind, request):
    if kind == "kafka":
        request.getfixturevalue("java")
    b = compare.Broker(kind, compare.Security("PLAINTEXT"))
    try:
        b.start()
        topic = f"idx-{uuid.uuid4().hex[:6]}"
        compare._create_large(b.bootstrap, [topic], 3, 60.0, compare.MANY_TOPIC_CONFIG)
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        configs = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
        entries = next(iter(configs.values())).result(30)
    finally:
        b.close()
    assert entries["segment.index.bytes"].value == compare.MANY_TOPIC_CONFIG["segment.index.bytes"]
