"""purge() and stats_cb of the producer, without a broker."""

from __future__ import annotations

import json

import pytest

from rivulet.client.producer.accumulator import PendingRecord, ProducerBatch
from rivulet.client.core import PartitionMeta, TopicMeta
from rivulet.client.producer.producer import AIOProducer

pytestmark = pytest.mark.fast


def producer_with_metadata(**conf) -> AIOProducer:
    p = AIOProducer({"bootstrap.servers": "127.0.0.1:1", "linger.ms": 60000, **conf})
    p._accepting = True
    p.client.cluster.brokers = {1: ("h", 9092)}
    p.client.cluster.topics["t"] = TopicMeta("t", None, 0, False, {q: PartitionMeta(q, 1, 0, 0) for q in range(3)},
                                             [0, 1, 2])
    return p


def test_purge_in_queue_reports_purge_queue_and_empties_the_queue():
    p = producer_with_metadata()
    got = []
    for i in range(10):
        p.produce("t", b"v", f"k{i}".encode(), on_delivery=lambda err, msg: got.append((err, msg)))
    p.produce("later", b"v", on_delivery=lambda err, msg: got.append((err, msg)))  # no metadata yet
    assert p.outstanding == 11
    p.purge(in_queue=False, in_flight=True)
    assert got == []
    p.purge(in_queue=True, in_flight=False)
    assert len(got) == 11
    assert {err.code() for err, _ in got} == {-152}
    assert all(err.name() == "_PURGE_QUEUE" for err, _ in got)
    assert p.outstanding == 0 and p.acc.queued_messages == 0 and p.acc.empty()


def test_purge_in_flight_reports_purge_inflight_and_ignores_the_late_answer():
    p = producer_with_metadata()
    got = []
    b = ProducerBatch("t", 1, 0.0, 1e18)
    b.records.append(PendingRecord(b"k", b"v", None, 0, lambda err, msg: got.append((err, msg))))
    b.has_callbacks = True
    p._produced += 1
    p._sending.add(b)
    p.purge(in_queue=True, in_flight=False)
    assert got == []
    p.purge(in_queue=False, in_flight=True)
    assert [(err.name(), err.code()) for err, _ in got] == [("_PURGE_INFLIGHT", -151)]
    p._succeed(b, 5, -1)  # the broker's answer arrives after the purge: no second report
    assert len(got) == 1 and p.outstanding == 0


def test_stats_have_librdkafkas_shape():
    p = producer_with_metadata(**{"client.id": "app", "stats_cb": lambda s: None, "statistics.interval.ms": 100})
    for i in range(4):
        p.produce("t", b"value", b"key", partition=2)
    for i in range(3):
        p.produce("t", b"value", b"key", partition=0)
    b = p.acc.batches[("t", 2)].popleft()  # as if sent, and acknowledged
    p.stats.sent(1, 120)
    p.stats.received(1)
    p._succeed(b, 0, -1)
    doc = json.loads(p.stats_json())
    assert doc["name"].startswith("app#producer-") and doc["client_id"] == "app" and doc["type"] == "producer"
    assert isinstance(doc["ts"], int) and isinstance(doc["time"], int)
    assert doc["msg_cnt"] == 3 and doc["msg_size"] == p.acc.queued_bytes > 0
    assert doc["txmsgs"] == 4 and doc["txmsg_bytes"] == b.size and doc["rxmsgs"] == 0 and doc["rxmsg_bytes"] == 0
    assert doc["tx"] == 1 and doc["tx_bytes"] == 120 and doc["rx"] == 1
    broker = doc["brokers"]["h:9092/1"]
    assert broker["nodeid"] == 1 and broker["nodename"] == "h:9092" and broker["state"] == "DOWN"
    assert broker["tx"] == 1 and broker["rx"] == 1 and "t-0" in broker["toppars"]
    parts = doc["topics"]["t"]["partitions"]
    assert set(parts) == {"0", "1", "2"}
    assert parts["2"]["txmsgs"] == 4 and parts["2"]["txbytes"] == b.size and parts["2"]["leader"] == 1
    assert parts["0"]["msgq_cnt"] == 3 and parts["2"]["msgq_cnt"] == 0


def test_statistics_interval_is_validated_and_stats_cb_is_not_ignored():
    from rivulet.client.config import BY_NAME, resolve
    assert not BY_NAME["stats_cb"].key.ignored
    c = resolve({"bootstrap.servers": "h:1", "statistics.interval.ms": 500, "stats_cb": print}, "producer")
    assert c["statistics.interval.ms"] == 500 and c["stats_cb"] is print
