"""The load generators of benchmarks.compare's issue 32 rows, against a real Rivulet broker:
franz-go's transactional txnperf and Kafka's Java KafkaShareConsumer in ShareAcks.java."""

from __future__ import annotations

import shutil
import uuid

import pytest

from benchmarks import share_groups, txn_perf
from benchmarks.transactions import count_committed, create_topic
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
