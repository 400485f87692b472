"""RecordAccumulator batching and the idempotent producer's sequence bookkeeping."""

from __future__ import annotations

import time

import pytest

from rivulet.client.producer.accumulator import RECORD_OVERHEAD, PendingRecord, RecordAccumulator
from rivulet.client.producer.producer import _Idempotence
from rivulet.protocol import records as rec

pytestmark = pytest.mark.fast


def acc(batch_size=1000, batch_num=10000, linger_ms=50.0, delivery_timeout_ms=120000):
    return RecordAccumulator(batch_size, batch_num, linger_ms, delivery_timeout_ms, 100000, 1 << 30)


def add(a: RecordAccumulator, topic="t", partition=0, value=b"x" * 100):
    r = PendingRecord(None, value, None, 1700000000000)
    return a.append(topic, partition, r, RECORD_OVERHEAD + len(value))


def leader(topic, partition):
    return 1 if partition < 2 else 2


def ok(node):
    return True


def test_batch_fills_by_size_then_a_new_one_opens():
    a = acc(batch_size=500)
    opened, full = add(a)
    assert opened and not full
    fulls = [add(a)[1] for _ in range(3)]
    assert fulls == [False, False, True]  # 61 header + 4 * 111 bytes crosses 500
    opened, full = add(a)
    assert opened and not full
    assert [len(b.records) for b in a.batches[("t", 0)]] == [4, 1]


def test_batch_fills_by_record_count():
    a = acc(batch_num=3)
    assert [add(a)[1] for _ in range(3)] == [False, False, True]


def test_linger_decides_readiness():
    a = acc(linger_ms=50)
    add(a)
    now = time.monotonic()
    ready, next_in, unknown = a.ready(now, leader, ok)
    assert ready == set() and 0 < next_in <= 0.05 and not unknown
    ready, _, _ = a.ready(now + 0.06, leader, ok)
    assert ready == {1}


def test_full_batch_and_flush_are_ready_at_once():
    a = acc(batch_num=2, linger_ms=10000)
    add(a, partition=0)
    add(a, partition=0)
    add(a, partition=2)
    now = time.monotonic()
    assert a.ready(now, leader, ok)[0] == {1}
    a.flushing += 1
    assert a.ready(now, leader, ok)[0] == {1, 2}


def test_unknown_leader_is_reported():
    a = acc()
    add(a, topic="nowhere")
    assert a.ready(time.monotonic(), lambda t, p: -1, ok)[2] is True


def test_drain_takes_one_batch_per_partition_of_the_node_within_max_size():
    a = acc(batch_num=2)
    for p in (0, 1, 2):
        for _ in range(4):
            add(a, partition=p)
    now = time.monotonic()
    out = a.drain(1, 10_000_000, leader, now, lambda b: True)
    assert sorted((b.partition, len(b.records)) for b in out) == [(0, 2), (1, 2)]
    out = a.drain(1, 1, leader, now, lambda b: True)  # the first always goes, even if bigger
    assert len(out) == 1
    assert all(b.full for b in out)


def test_reenqueue_orders_by_sequence_and_expiry():
    a = acc(batch_num=1, delivery_timeout_ms=1)
    for _ in range(3):
        add(a)
    batches = a.drain(1, 1 << 30, leader, time.monotonic(), lambda b: True)
    b0 = batches[0]
    rest = list(a.batches[("t", 0)])
    for i, b in enumerate([b0] + rest):
        b.base_sequence = i * 10
    a.batches[("t", 0)].clear()
    for b in reversed([b0] + rest):
        a.reenqueue(b)
    assert [b.base_sequence for b in a.batches[("t", 0)]] == [0, 10, 20]
    expired = a.expired(time.monotonic() + 1)
    assert len(expired) == 3 and not a.batches[("t", 0)]


def test_release_returns_room():
    a = RecordAccumulator(1000, 10000, 0, 1000, 2, 1 << 30)
    add(a)
    add(a)
    assert not a.has_room(10)
    b = a.batches[("t", 0)][0]
    a.release(b)
    assert a.has_room(10) and a.queued_bytes == 0


def test_batches_encode_with_sequences_and_decode_back():
    a = acc()
    for i in range(5):
        a.append("t", 0, PendingRecord(b"k%d" % i, b"v%d" % i, [("h", b"1")], 1700000000000 + i), 20)
    b = a.batches[("t", 0)][0]
    idem = _Idempotence()
    idem.reset(producer_id=77, epoch=3)
    assert idem.can_send(b)
    data = b.encode(0, None)
    (batch,) = list(rec.decode_records(data))
    h = batch.header
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (77, 3, 0)
    assert [(r.key, r.value, r.timestamp) for r in batch.records] == [
        (b"k%d" % i, b"v%d" % i, 1700000000000 + i) for i in range(5)]


def test_idempotence_sequences_and_retry_ordering():
    a = acc(batch_num=2)
    for _ in range(6):
        add(a)
    b1, b2, b3 = list(a.batches[("t", 0)])
    idem = _Idempotence()
    assert not idem.can_send(b1)  # no producer id yet
    idem.reset(1000, 0)
    assert idem.can_send(b1) and idem.can_send(b2)
    assert (b1.base_sequence, b2.base_sequence) == (0, 2)
    b1.attempts = b2.attempts = 1
    # b1 fails and will be retried: it keeps sequence 0 and waits until b2 is answered.
    idem.finished(b1, acked=False)
    b1.attempts = 2
    assert not idem.can_send(b1)
    idem.finished(b2, acked=False)  # b2 got OUT_OF_ORDER_SEQUENCE_NUMBER
    assert idem.can_send(b1) and b1.base_sequence == 0
    assert not idem.can_send(b3)  # nothing new while a retry is in flight
    idem.finished(b1, acked=True)
    assert idem.acked_seq[("t", 0)] == 2
    assert idem.can_send(b3) and b3.base_sequence == 4


def test_at_most_five_batches_in_flight_per_partition():
    a = acc(batch_num=1)
    for _ in range(7):
        add(a)
    idem = _Idempotence()
    idem.reset(1, 0)
    batches = list(a.batches[("t", 0)])
    assert [idem.can_send(b) for b in batches] == [True] * 5 + [False] * 2
