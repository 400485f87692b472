"""Rivulet's own client doing transactions, checked with confluent-kafka as the reader."""

from __future__ import annotations

import uuid

import pytest

from rivulet.client.errors import KafkaException
from rivulet.client.sync import Consumer, Producer
from rivulet.client.types import TopicPartition
from test_idempotence import create_topic, topic_name
from test_transactions import consume

pytestmark = pytest.mark.integration


def producer(bootstrap: str, tid: str, **conf) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 1, **conf})
    p.init_transactions(30)
    return p


def test_commit_visible_abort_not(broker):
    topic = topic_name("ctxn")
    create_topic(broker.bootstrap, topic, 2)
    p = producer(broker.bootstrap, "ctxn-" + uuid.uuid4().hex[:6])
    reports = []
    try:
        p.begin_transaction()
        for i in range(10):
            p.produce(topic, f"c{i}".encode(), key=str(i).encode(), on_delivery=lambda e, m: reports.append(e))
        p.commit_transaction(30)
        assert reports == [None] * 10

        p.begin_transaction()
        for i in range(5):
            p.produce(topic, f"a{i}".encode(), key=str(i).encode())
        p.flush(30)  # written to the log, then aborted
        p.abort_transaction(30)

        p.begin_transaction()
        p.produce(topic, b"c-last", partition=0)
        p.commit_transaction(30)
    finally:
        p.close(10)
    committed = consume(broker.bootstrap, topic, "read_committed", partitions=2)
    assert sorted(committed) == sorted([f"c{i}".encode() for i in range(10)] + [b"c-last"])
    everything = consume(broker.bootstrap, topic, "read_uncommitted", partitions=2)
    assert sorted(everything) == sorted(committed + [f"a{i}".encode() for i in range(5)])


def test_produce_outside_transaction_is_refused(broker):
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "ctxn-" + uuid.uuid4().hex[:6]})
    try:
        with pytest.raises(KafkaException):
            p.produce("whatever", b"x")  # before init_transactions
        p.init_transactions(30)
        with pytest.raises(KafkaException):
            p.produce("whatever", b"x")  # before begin_transaction
        with pytest.raises(KafkaException):
            p.commit_transaction(5)
    finally:
        p.close(5)


def test_send_offsets_commit_only_on_commit(broker):
    from confluent_kafka import Consumer as CKConsumer
    from confluent_kafka import TopicPartition as CKTP
    src = topic_name("ctxn-src")
    dst = topic_name("ctxn-dst")
    create_topic(broker.bootstrap, src, 1)
    create_topic(broker.bootstrap, dst, 1)
    group = "ctxn-g-" + uuid.uuid4().hex[:6]
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.subscribe([src])
    for _ in range(50):
        c.poll(0.2)
        if c.assignment():
            break
    meta = c.consumer_group_metadata()
    assert meta.group_id == group and meta.generation_id >= 0 and meta.member_id
    p = producer(broker.bootstrap, "ctxn-" + uuid.uuid4().hex[:6])

    def committed() -> int:
        ck = CKConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "isolation.level": "read_committed"})
        try:
            return ck.committed([CKTP(src, 0)], timeout=20)[0].offset
        finally:
            ck.close()
    try:
        p.begin_transaction()
        p.produce(dst, b"out-1")
        p.send_offsets_to_transaction([TopicPartition(src, 0, 7)], meta, 30)
        p.abort_transaction(30)
        assert committed() < 0  # nothing committed

        p.begin_transaction()
        p.produce(dst, b"out-2")
        p.send_offsets_to_transaction([TopicPartition(src, 0, 11)], c.consumer_group_metadata(), 30)
        p.commit_transaction(30)
        assert committed() == 11
    finally:
        p.close(10)
        c.close()
    assert consume(broker.bootstrap, dst, "read_committed") == [b"out-2"]


def test_second_producer_fences_the_first(broker):
    topic = topic_name("ctxn-fence")
    create_topic(broker.bootstrap, topic, 1)
    tid = "ctxn-fence-" + uuid.uuid4().hex[:6]
    p1 = producer(broker.bootstrap, tid)
    p2 = None
    try:
        p1.begin_transaction()
        p1.produce(topic, b"zombie")
        p1.flush(30)
        p2 = producer(broker.bootstrap, tid)  # fences p1 and aborts its open transaction
        with pytest.raises(KafkaException) as ei:
            p1.commit_transaction(30)
        assert ei.value.args[0].fatal()
        assert not ei.value.args[0].txn_requires_abort()
        # ...and it stays unusable.
        with pytest.raises(KafkaException) as ei:
            p1.begin_transaction()
        assert ei.value.args[0].fatal()

        p2.begin_transaction()
        p2.produce(topic, b"survivor")
        p2.commit_transaction(30)
    finally:
        p1.close(5)
        if p2 is not None:
            p2.close(10)
    assert consume(broker.bootstrap, topic, "read_committed") == [b"survivor"]
    assert consume(broker.bootstrap, topic, "read_uncommitted") == [b"zombie", b"survivor"]


def test_failed_delivery_requires_abort(broker):
    topic = topic_name("ctxn-big")
    create_topic(broker.bootstrap, topic, 1)
    p = producer(broker.bootstrap, "ctxn-" + uuid.uuid4().hex[:6], **{"max.request.size": 50_000_000})
    errors = []
    try:
        p.begin_transaction()
        p.produce(topic, b"small-1")
        p.produce(topic, b"x" * 20_000_000, partition=0, on_delivery=lambda e, m: errors.append(e))
        with pytest.raises(KafkaException) as ei:
            p.commit_transaction(30)
        err = ei.value.args[0]
        assert err.txn_requires_abort() and not err.fatal() and not err.retriable()
        assert errors and errors[0] is not None
        p.abort_transaction(30)

        p.begin_transaction()
        p.produce(topic, b"small-2")
        p.commit_transaction(30)
    finally:
        p.close(10)
    assert consume(broker.bootstrap, topic, "read_committed") == [b"small-2"]


def test_asyncio_producer_transactions(broker):
    import asyncio

    from rivulet.client.producer.producer import AIOProducer
    topic = topic_name("ctxn-aio")
    create_topic(broker.bootstrap, topic, 1)

    async def run() -> None:
        p = AIOProducer({"bootstrap.servers": broker.bootstrap, "transactional.id": "ctxn-" + uuid.uuid4().hex[:6]})
        await p.start()
        try:
            await p.init_transactions(30)
            p.begin_transaction()
            fut = await p.send(topic, b"aio-aborted")
            await fut
            await p.abort_transaction(30)
            p.begin_transaction()
            fut = await p.send(topic, b"aio-committed")
            await p.commit_transaction(30)
            assert (await fut).offset() >= 0
        finally:
            await p.close(10)
    asyncio.run(run())
    assert consume(broker.bootstrap, topic, "read_committed") == [b"aio-committed"]
