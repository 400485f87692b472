"""DelayedFetch with real clients: idle consumers long-poll, and appends wake them at once."""

from __future__ import annotations

import json
import time
import uuid

import pytest

pytestmark = pytest.mark.integration


def _consumer(bootstrap: str, topic: str, **extra):
    from confluent_kafka import OFFSET_END, Consumer, TopicPartition
    stats: list[dict] = []
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "lp-" + topic, "enable.auto.commit": False,
                  "statistics.interval.ms": 1000, "stats_cb": lambda s: stats.append(json.loads(s)), **extra})
    c.assign([TopicPartition(topic, 0, OFFSET_END)])
    return c, stats


def _fetch_requests(stats: list[dict]) -> int:
    """Fetch requests sent to the (single) broker according to librdkafka's own counters."""
    last = stats[-1]
    return sum(b.get("req", {}).get("Fetch", 0) for name, b in last["brokers"].items() if b.get("nodeid", -1) >= 0)


def _create(bootstrap: str, topic: str) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce(topic, value=b"warm-up")
    assert p.flush(30) == 0


def test_idle_consumer_long_polls(broker):
    topic = f"idle-{uuid.uuid4().hex[:6]}"
    _create(broker.bootstrap, topic)
    c, stats = _consumer(broker.bootstrap, topic, **{"fetch.wait.max.ms": 500})
    # Let the consumer reach its fetch loop, then watch it idle for a measured span.
    for _ in range(20):
        c.poll(0.1)
    while not stats:
        c.poll(0.1)
    start_count, start = _fetch_requests(stats), time.monotonic()
    n0 = len(stats)
    while len(stats) < n0 + 4:  # about four statistics intervals
        c.poll(0.1)
    elapsed = time.monotonic() - start
    fetches = _fetch_requests(stats) - start_count
    c.close()
    rate = fetches / elapsed
    print(f"idle consumer: {fetches} Fetch requests in {elapsed:.1f}s ({rate:.1f}/s)")
    # fetch.wait.max.ms=500 means about two a second; a busy loop would be hundreds.
    assert fetches >= 1
    assert rate <= 6


def test_append_wakes_a_waiting_fetch(broker):
    from confluent_kafka import Producer
    topic = f"wake-{uuid.uuid4().hex[:6]}"
    _create(broker.bootstrap, topic)
    # A very long wait: if the append did not complete the fetch, delivery would take 20 s.
    c, _ = _consumer(broker.bootstrap, topic, **{"fetch.wait.max.ms": 20000, "fetch.min.bytes": 1})
    for _ in range(20):
        c.poll(0.1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    latencies = []
    for i in range(5):
        sent = time.monotonic()
        p.produce(topic, value=f"ping-{i}".encode())
        p.flush(10)
        deadline = sent + 15
        got = None
        while time.monotonic() < deadline:
            m = c.poll(0.05)
            if m is not None and not m.error():
                got = m
                break
        assert got is not None and got.value() == f"ping-{i}".encode()
        latencies.append((time.monotonic() - sent) * 1000)
    c.close()
    print("produce-to-consume latencies (ms):", [round(x, 1) for x in latencies])
    # Far below the 20 s wait: the append completed the DelayedFetch.
    assert max(latencies) < 15000


async def _waiting_fetch(conn, topic: str, *, min_bytes: int):
    """A Fetch of partition 0 from offset 1 (past the warm-up record) that waits up to 30 s."""
    from rivulet.protocol.messages import fetch_request as fq
    from rivulet.protocol.messages import metadata_request as mq

    md = await conn.send(mq.MetadataRequest(topics=None))
    tid = next(t.topic_id for t in md.topics if t.name == topic)
    return fq.FetchRequest(replica_id=-1, max_wait_ms=30000, min_bytes=min_bytes, max_bytes=1 << 20,
                           isolation_level=0, session_id=0, session_epoch=-1, topics=[fq.FetchTopic(
                               topic=topic, topic_id=tid, partitions=[fq.FetchPartition(
                                   partition=0, current_leader_epoch=-1, fetch_offset=1, log_start_offset=-1,
                                   partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id="")


def test_delete_topic_completes_waiting_fetch(broker):
    """A fetch waiting on a partition that is deleted is answered early with an error."""
    import asyncio

    from rivulet.client.connection import BrokerConnection
    from rivulet.protocol.messages import delete_topics_request as dq

    topic = f"del-{uuid.uuid4().hex[:6]}"
    _create(broker.bootstrap, topic)

    async def run():
        host, port = broker.bootstrap.split(":")
        conn = await BrokerConnection(host, int(port)).connect()
        admin = await BrokerConnection(host, int(port)).connect()
        req = await _waiting_fetch(admin, topic, min_bytes=1)
        pending = asyncio.ensure_future(conn.send(req))
        await asyncio.sleep(0.5)
        assert not pending.done()
        await admin.send(dq.DeleteTopicsRequest(topic_names=[topic], topics=[dq.DeleteTopicState(name=topic)],
                                                timeout_ms=5000))
        resp = await asyncio.wait_for(pending, 10)
        await conn.close()
        await admin.close()
        return resp

    resp = asyncio.run(run())
    part = resp.responses[0].partitions[0]
    assert part.error_code in (3, 100)  # UNKNOWN_TOPIC_OR_PARTITION / UNKNOWN_TOPIC_ID


def test_fetch_waits_for_min_bytes_and_answers_once_with_all_of_them(broker):
    """A waiting fetch counts appended bytes by log position: small appends below min_bytes
    leave it waiting, and the append that reaches min_bytes answers it with every record."""
    import asyncio

    from confluent_kafka import Producer

    from rivulet.client.connection import BrokerConnection
    from rivulet.protocol import records as rec

    topic = f"minbytes-{uuid.uuid4().hex[:6]}"
    _create(broker.bootstrap, topic)  # offset 0
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    values = [bytes([65 + i]) * 500 for i in range(4)]  # batches of about 570 bytes

    def produce(value: bytes) -> None:
        p.produce(topic, value=value, partition=0)
        assert p.flush(10) == 0

    async def run():
        host, port = broker.bootstrap.split(":")
        conn = await BrokerConnection(host, int(port)).connect()
        req = await _waiting_fetch(conn, topic, min_bytes=2000)
        fetch_conn = await BrokerConnection(host, int(port)).connect()
        pending = asyncio.ensure_future(fetch_conn.send(req))
        await asyncio.sleep(0.3)
        for value in values[:3]:  # below min_bytes
            produce(value)
            await asyncio.sleep(0.3)
            assert not pending.done()
        produce(values[3])  # reaches it
        resp = await asyncio.wait_for(pending, 15)
        await conn.close()
        await fetch_conn.close()
        return resp

    resp = asyncio.run(run())
    part = resp.responses[0].partitions[0]
    assert part.error_code == 0
    got = [(r.offset, r.value) for b in rec.decode_records(part.records) for r in b.records]
    assert got == [(1 + i, v) for i, v in enumerate(values)]
