"""Fetch sessions (KIP-227) on a real broker process: raw requests with Rivulet's client codec
for the epochs and errors, and kafka-python's consumer, which opens a session and then sends
incremental fetches."""

from __future__ import annotations

import asyncio
import urllib.request
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rivulet.testing import free_port

pytestmark = pytest.mark.integration

PARTITIONS = 3


def _create(bootstrap: str, topic: str, records_per_partition: int = 0) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    if records_per_partition:
        p = Producer({"bootstrap.servers": bootstrap})
        for i in range(records_per_partition * PARTITIONS):
            p.produce(topic, value=f"v{i}".encode(), partition=i % PARTITIONS)
        assert p.flush(30) == 0


def _fetch(topic: str, topic_id, session_id: int, epoch: int, offsets: dict[int, int], forget: list[int] = ()):
    from rivulet.protocol.messages import fetch_request as fq
    topics = [fq.FetchTopic(topic=topic, topic_id=topic_id, partitions=[fq.FetchPartition(
        partition=p, current_leader_epoch=-1, fetch_offset=o, log_start_offset=-1, partition_max_bytes=1 << 20)
        for p, o in offsets.items()])] if offsets else []
    forgotten = [fq.ForgottenTopic(topic=topic, topic_id=topic_id, partitions=list(forget))] if forget else []
    return fq.FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                           session_id=session_id, session_epoch=epoch, topics=topics,
                           forgotten_topics_data=forgotten, rack_id="")


def _answered(resp) -> dict[int, int]:
    """Partition -> HW of an answer."""
    return {p.partition_index: p.high_watermark for t in resp.responses for p in t.partitions}


def test_session_epochs_and_errors(broker):
    from confluent_kafka import Producer

    from rivulet.client.connection import BrokerConnection
    from rivulet.protocol.messages import metadata_request as mq

    topic = f"fs-{uuid.uuid4().hex[:6]}"
    _create(broker.bootstrap, topic)

    async def run() -> None:
        host, port = broker.bootstrap.split(":")
        conn = await BrokerConnection(host, int(port)).connect()
        md = await conn.send(mq.MetadataRequest(topics=None))
        tid = next(t.topic_id for t in md.topics if t.name == topic)

        def send(req, version: int = 17):  # topic ids (v13+), as Java's consumer
            return conn.send(req, version=version)

        everything = dict.fromkeys(range(PARTITIONS), 0)
        for _ in range(100):  # until the new partitions have their leader
            ready = await send(_fetch(topic, tid, 0, -1, everything))
            if all(p.error_code == 0 for t in ready.responses for p in t.partitions):
                break
            await asyncio.sleep(0.1)
        # Epoch 0 opens a session over every partition, all of them answered.
        full = await send(_fetch(topic, tid, 0, 0, everything))
        sid = full.session_id
        assert full.error_code == 0 and sid != 0 and _answered(full) == {0: 0, 1: 0, 2: 0}
        # Nothing changed: an incremental fetch naming no partition is answered none.
        inc = await send(_fetch(topic, tid, sid, 1, {}))
        assert (inc.error_code, inc.session_id, _answered(inc)) == (0, sid, {})
        # A record on partition 1: only it is answered, though the request names none.
        p = Producer({"bootstrap.servers": broker.bootstrap})
        p.produce(topic, value=b"x", partition=1)
        assert p.flush(30) == 0
        inc = await send(_fetch(topic, tid, sid, 2, {}))
        assert _answered(inc) == {1: 1} and len(inc.responses[0].partitions[0].records) > 0
        # Its position moved on: nothing new to answer.
        inc = await send(_fetch(topic, tid, sid, 3, {1: 1}))
        assert _answered(inc) == {}
        # The same epoch again, an unknown session, names in an id session.
        again = await send(_fetch(topic, tid, sid, 3, {}))
        assert (again.error_code, again.session_id) == (71, 0)
        unknown = await send(_fetch(topic, tid, sid ^ 1, 4, {}))
        assert unknown.error_code == 70
        by_name = await send(_fetch(topic, tid, sid, 4, {}), 12)
        assert by_name.error_code == 106
        # Forgetting partitions: the rest stay; forgetting all closes the session.
        inc = await send(_fetch(topic, tid, sid, 4, {}, forget=[0, 2]))
        assert (inc.error_code, inc.session_id) == (0, sid)
        closed = await send(_fetch(topic, tid, sid, 5, {}, forget=[1]))
        assert (closed.error_code, closed.session_id) == (0, 0)
        assert (await send(_fetch(topic, tid, sid, 6, {}))).error_code == 70
        # Epoch -1 is sessionless, and closes the session it names.
        sid2 = (await send(_fetch(topic, tid, 0, 0, everything))).session_id
        less = await send(_fetch(topic, tid, sid2, -1, everything))
        assert (less.error_code, less.session_id, len(_answered(less))) == (0, 0, PARTITIONS)
        assert (await send(_fetch(topic, tid, sid2, 1, {}))).error_code == 70
        # A fetch waiting in purgatory while another request advances the session: its answer
        # is for an epoch gone by (Kafka 4.3.1 answers the same, with the session id).
        sid3 = (await send(_fetch(topic, tid, 0, 0, {0: 0, 1: 1, 2: 0}))).session_id
        waiting = _fetch(topic, tid, sid3, 1, {})
        waiting.max_wait_ms, waiting.min_bytes = 2000, 1
        pending = asyncio.ensure_future(send(waiting))
        other = await BrokerConnection(host, int(port)).connect()
        await asyncio.sleep(0.5)  # for the first to be read and wait (nothing asserts a duration)
        assert not pending.done()
        ahead = await other.send(_fetch(topic, tid, sid3, 2, {}), version=17)
        assert (ahead.error_code, ahead.session_id, _answered(ahead)) == (0, sid3, {})
        stale = await pending
        assert (stale.error_code, stale.session_id, stale.responses) == (71, sid3, [])
        await other.close()
        await conn.close()

    asyncio.run(run())


def _scrape(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        text = r.read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


def test_kafka_python_consumer_reads_everything_through_a_session(broker_factory):
    from kafka import KafkaConsumer, TopicPartition

    mport = free_port()
    b = broker_factory({"metrics.listener": f"http://127.0.0.1:{mport}"})
    topic = f"fskp-{uuid.uuid4().hex[:6]}"
    per_partition = 200
    _create(b.bootstrap, topic, per_partition)
    c = KafkaConsumer(bootstrap_servers=b.bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                      fetch_max_wait_ms=100, max_partition_fetch_bytes=1024)
    c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    seen: set[tuple[int, int]] = set()
    for _ in range(300):
        for records in c.poll(timeout_ms=200).values():
            seen.update((r.partition, r.offset) for r in records)
        if len(seen) == per_partition * PARTITIONS:
            break
    # The session is open while the consumer is: every record came through it.
    sessions = _scrape(mport, "kafka_server_fetchsessioncache_numincrementalfetchsessions")
    cached = _scrape(mport, "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached")
    c.close()
    assert seen == {(p, o) for p in range(PARTITIONS) for o in range(per_partition)}
    assert sessions == 1 and cached == PARTITIONS
