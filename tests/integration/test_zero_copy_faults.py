"""Faults under Fetch answers sent from segment files, whose record sets (FileRegions) borrow
their segment's descriptor and pin the segment open until sent, read or dropped.

Answers here are big and many-partitioned (hundreds to thousands of regions each). A client
that stops reading while DeleteRecords, retention or topic deletion removes the segments its
answer pins holds no one else up, and once it goes (closed, killed, or timed out by the broker)
every descriptor on those files is closed; a topic recreated, or a follower truncation, under a
pending answer never crashes the broker; thousands of regions in flight cost no descriptors of
their own. Descriptors are counted from /proc/<broker pid>/fd."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import uuid

import pytest
from ck_helpers import ck_consume_values
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic,
                                   ResourceType)

from rivulet.protocol import framing
from rivulet.protocol.messages import fetch_request as fq
from rivulet.testing import BrokerProcess
from tests.cluster import ZkCluster, eventually

pytestmark = pytest.mark.integration

PARTITIONS = 200
RECORDS = 4  # per partition, one batch each: two segments, the first closed
VALUE_SIZE = 20_000  # a batch is a FileRegion (>= 16 KiB) on its own
SEGMENT_BYTES = 48 * 1024  # two batches a segment
IDLE_MS = 10_000  # connections.max.idle.ms: a send that makes no progress this long is dropped


@pytest.fixture(scope="module")
def broker():
    proc = BrokerProcess({
        "connections.max.idle.ms": str(IDLE_MS),
        "log.segment.delete.delay.ms": "0",
        "log.retention.check.interval.ms": "500",
        "log.initial.task.delay.ms": "0",
        "offsets.topic.num.partitions": "1",
    })
    proc.start()
    yield proc
    proc.cleanup()


def value(tag: str, p: int, i: int, size: int = VALUE_SIZE) -> bytes:
    """Incompressible, so that on disk (and in answers) records are as big as they look."""
    head = f"{tag}:{p}:{i}:".encode()
    return head + random.Random(head).randbytes(size - len(head))


def create(broker: BrokerProcess, topic: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config={"internal.segment.bytes": str(SEGMENT_BYTES)})],
                        request_timeout=60)[topic].result(60)


def fill(broker: BrokerProcess, topic: str, tag: str, partitions: int = PARTITIONS, records: int = RECORDS,
         size: int = VALUE_SIZE) -> None:
    # One record a batch (batch.size below two records), so the segments roll where expected.
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "batch.size": size + 1000})
    for i in range(records):
        for part in range(partitions):
            p.produce(topic, value(tag, part, i, size), partition=part)
        p.flush(60)
    assert p.flush(60) == 0


def read_all(broker: BrokerProcess, topic: str, partitions: int, want: int) -> dict[int, list[bytes]]:
    return ck_consume_values(broker.bootstrap, topic, partitions, want,
                             {"fetch.max.bytes": 50_000_000, "max.partition.fetch.bytes": 1_000_000})


def fetch_frame(topic: str, partitions: int, partition_max_bytes: int = 64 * 1024, correlation_id: int = 1) -> bytes:
    req = fq.FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=50_000_000, isolation_level=0, session_id=0,
        session_epoch=-1, topics=[fq.FetchTopic(topic=topic, partitions=[fq.FetchPartition(
            partition=part, fetch_offset=0, partition_max_bytes=partition_max_bytes, current_leader_epoch=-1,
            log_start_offset=-1, last_fetched_epoch=-1) for part in range(partitions)])],
        forgotten_topics_data=[], rack_id="")
    return framing.encode_request(req, 12, correlation_id, "zero-copy-faults")


def stalled_fetch(broker: BrokerProcess, frames: list[bytes]) -> socket.socket:
    """A connection that sends ``frames`` and reads nothing; returned once the first answer
    has begun to arrive (its regions are then pinned by a sender thread)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect((broker.host, broker.port))
    s.settimeout(30)
    s.sendall(b"".join(frames))
    assert len(s.recv(4, socket.MSG_PEEK)) == 4
    return s


def pid(broker: BrokerProcess) -> int:
    assert broker.proc is not None and broker.proc.poll() is None, "the broker died"
    return broker.proc.pid


def fd_targets(broker: BrokerProcess) -> list[str]:
    base = f"/proc/{pid(broker)}/fd"
    out = []
    for n in os.listdir(base):
        try:
            out.append(os.readlink(f"{base}/{n}"))
        except FileNotFoundError:  # closed meanwhile
            pass
    return out


def topic_fds(broker: BrokerProcess, topic: str) -> list[str]:
    """The broker's descriptors on ``topic``'s files, its deleted dirs' included."""
    prefix = os.path.join(os.path.realpath(broker.data_dir), topic + "-")
    return [t for t in fd_targets(broker) if t.startswith(prefix)]


def gone(target: str) -> bool:
    return target.endswith(" (deleted)") or ".deleted" in target or "-delete/" in target


@pytest.mark.parametrize("removal, ending", [("delete_records", "closed"), ("delete_records", "timed_out"),
                                              ("retention", "closed")])
def test_a_stalled_answer_outlives_removed_segments_and_releases_them_when_it_ends(broker, removal, ending):
    topic = f"zcf-{uuid.uuid4().hex[:8]}"
    create(broker, topic)
    fill(broker, topic, "a")
    baseline = len(topic_fds(broker, topic))
    s = stalled_fetch(broker, [fetch_frame(topic, PARTITIONS)])
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        if removal == "delete_records":
            done = admin.delete_records([TopicPartition(topic, p, 2) for p in range(PARTITIONS)], request_timeout=60)
            for f in done.values():
                assert f.result(60).low_watermark == 2
        else:
            # Below the active segment's size: retention removes exactly the first segment.
            res = ConfigResource(ResourceType.TOPIC, topic,
                                 incremental_configs=[ConfigEntry("retention.bytes", "30000",
                                                                  incremental_operation=AlterConfigOpType.SET)])
            admin.incremental_alter_configs([res])[res].result(60)
        firsts = [os.path.join(broker.data_dir, f"{topic}-{p}", "00000000000000000000.log") for p in range(PARTITIONS)]
        eventually(lambda: not any(os.path.exists(f) for f in firsts), what="the first segments' files removed")
        # The stalled answer still pins first segments, open though removed.
        assert any(gone(t) for t in topic_fds(broker, topic))
        # Everyone else is served meanwhile: the records left, every partition's.
        got = read_all(broker, topic, PARTITIONS, PARTITIONS * (RECORDS - 2))
        assert got == {p: [value("a", p, i) for i in range(2, RECORDS)] for p in range(PARTITIONS)}
        if ending == "closed":
            s.close()
        # else the broker drops the send after connections.max.idle.ms without progress
        eventually(lambda: not any(gone(t) for t in topic_fds(broker, topic)), timeout=IDLE_MS / 1000 + 30,
                   what="the removed segments' descriptors closed")
        assert len(topic_fds(broker, topic)) <= baseline
        if ending == "timed_out":
            s.settimeout(30)
            while s.recv(1 << 20):  # what the broker wrote, then its close
                pass
    finally:
        s.close()
    assert read_all(broker, topic, PARTITIONS, PARTITIONS * (RECORDS - 2)) == got


def test_a_topic_deleted_and_recreated_under_a_stalled_answer(broker):
    topic = f"zcf-{uuid.uuid4().hex[:8]}"
    create(broker, topic)
    fill(broker, topic, "old")
    s = stalled_fetch(broker, [fetch_frame(topic, PARTITIONS)])
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.delete_topics([topic], request_timeout=60)[topic].result(60)
        eventually(lambda: topic not in admin.list_topics(timeout=10).topics, what="the topic gone")
        eventually(lambda: _created(admin, topic), what="the topic created again")
        fill(broker, topic, "new", records=2)
        assert read_all(broker, topic, PARTITIONS, PARTITIONS * 2) == \
            {p: [value("new", p, i) for i in range(2)] for p in range(PARTITIONS)}
        # The stalled client gets the old records whole, or its connection closed; nothing else.
        s.settimeout(30)
        answer = bytearray()
        try:
            while chunk := s.recv(1 << 20):
                answer += chunk
                if len(answer) >= 4 and len(answer) - 4 >= int.from_bytes(answer[:4], "big"):
                    break
        except ConnectionResetError:
            pass
        size = int.from_bytes(answer[:4], "big")
        if len(answer) - 4 >= size:
            body = bytes(answer[4:4 + size])
            _, resp = framing.decode_response(body, 1, 12)
            assert resp.error_code == 0
            (t,) = resp.responses
            assert sorted(p.partition_index for p in t.partitions) == list(range(PARTITIONS))
            for p in range(PARTITIONS):
                assert value("old", p, 0) in body and value("new", p, 0) not in body
    finally:
        s.close()
    eventually(lambda: not any(gone(t) for t in topic_fds(broker, topic)), what="the old topic's descriptors closed")
    assert read_all(broker, topic, PARTITIONS, PARTITIONS * 2) == \
        {p: [value("new", p, i) for i in range(2)] for p in range(PARTITIONS)}


def _created(admin: AdminClient, topic: str) -> bool:
    try:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1, config={"internal.segment.bytes": str(SEGMENT_BYTES)})],
                            request_timeout=60)[topic].result(60)
    except Exception as e:  # the old one still being deleted: try again
        return "TOPIC_ALREADY_EXISTS" in str(e) and topic in admin.list_topics(timeout=10).topics \
            and _leaders(admin, topic)
    return True


def _leaders(admin: AdminClient, topic: str) -> bool:
    t = admin.list_topics(topic, timeout=10).topics.get(topic)
    return t is not None and t.error is None and len(t.partitions) == PARTITIONS


def test_thousands_of_regions_in_flight_cost_no_descriptors(broker):
    many, clients, pipelined = 2000, 6, 3
    topic = f"zcf-{uuid.uuid4().hex[:8]}"
    create(broker, topic, many)
    fill(broker, topic, "m", partitions=many, records=1, size=17_000)
    before = len(fd_targets(broker))
    stalled = []
    try:
        for c in range(clients):
            frames = [fetch_frame(topic, many, 32 * 1024, c * 10 + i) for i in range(pipelined)]
            stalled.append(stalled_fetch(broker, frames))
        # Meanwhile two consumers read it all; then the stalled answers (each of 2000 regions,
        # up to clients x pipelined of them pinned at once) still hold no descriptor of their
        # own: their connections, a sender's copy of each, and a few for the consumers.
        want = {p: [value("m", p, 0, 17_000)] for p in range(many)}
        assert read_all(broker, topic, many, many) == want
        assert read_all(broker, topic, many, many) == want
        held = len(fd_targets(broker))
        assert held <= before + 2 * clients + 16, (before, held)
    finally:
        for s in stalled:
            s.close()
    eventually(lambda: len(fd_targets(broker)) <= before + 4, what="every stalled answer's descriptors released")
    # Nor a pin: the answers queued behind each sent one were dropped unsent, and deleting
    # the topic now closes every descriptor on its files.
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics([topic], request_timeout=60)[topic].result(60)
    eventually(lambda: topic_fds(broker, topic) == [], what="the deleted topic's descriptors closed")


KILLED_CLIENT = """
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
s.connect(("127.0.0.1", int(sys.argv[1])))
s.sendall(bytes.fromhex(sys.stdin.read()))
got = 0
while got < 2_000_000:  # part of the answer, then stop in the middle of it
    got += len(s.recv(65536))
print("mid", flush=True)
time.sleep(600)
"""


def test_a_consumer_killed_mid_answer_leaves_no_pins(broker):
    topic = f"zcf-{uuid.uuid4().hex[:8]}"
    create(broker, topic)
    fill(broker, topic, "k")
    procs = []
    try:
        for i in range(3):
            p = subprocess.Popen([sys.executable, "-c", KILLED_CLIENT, str(broker.port)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
            p.stdin.write(fetch_frame(topic, PARTITIONS, correlation_id=i).hex())
            p.stdin.close()
            assert p.stdout.readline().strip() == "mid"
            procs.append(p)
        for p in procs:
            os.kill(p.pid, signal.SIGKILL)
            p.wait(30)
        got = read_all(broker, topic, PARTITIONS, PARTITIONS * RECORDS)
        assert got == {p: [value("k", p, i) for i in range(RECORDS)] for p in range(PARTITIONS)}
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(30)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics([topic], request_timeout=60)[topic].result(60)
    # No pin left behind: deleting the topic closes every descriptor on its files.
    eventually(lambda: topic_fds(broker, topic) == [], what="the deleted topic's descriptors closed")
    assert pid(broker)


@pytest.mark.cluster
def test_a_follower_truncation_under_a_stalled_answer_closes_only_that_connection(zk_connect):
    """Broker 1 leads alone (its follower killed, out of the ISR) and hands a consumer records
    that broker 2 never got; frozen, it loses the lead to broker 2 (unclean election)
    and, resumed as a follower, truncates those records from the very file the consumer's
    stalled answer is still being sent from. That answer's connection is closed (its frame's
    size is fixed); the broker lives on and serves what the new leader has."""
    parts, record = 12, 50_000
    cluster = ZkCluster(zk_connect)
    try:
        leader = cluster.start(1, **{"replica.lag.time.max.ms": "2000"})
        follower = cluster.start(2, **{"replica.lag.time.max.ms": "2000"})
        cluster.wait_for_brokers([1, 2])
        topic = f"zct-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(topic, parts, replica_assignment=[[1, 2]] * parts, config={
            "unclean.leader.election.enable": "true", "min.insync.replicas": "1"})], request_timeout=60)[topic].result(60)
        eventually(lambda: all(state(cluster, topic, p)["isr"] == [1, 2] for p in range(parts)), 60,
                   "both replicas in sync")
        produce(cluster.bootstrap, topic, parts, "kept", 10, record, "all")
        # kill -9, not SIGSTOP: a frozen follower could still take in a fetch answer holding
        # part of the tail and append it once resumed.
        follower.kill()
        produce(leader.bootstrap, topic, parts, "lost", 10, record, "1")
        # The dead follower leaves the ISR: the leader's high watermark takes in the tail.
        eventually(lambda: all(state(cluster, topic, p)["isr"] == [1] for p in range(parts)), 60,
                   "the ISR down to the leader")
        s = stalled_fetch(leader, [fetch_frame(topic, parts, 8_000_000)])
        size = int.from_bytes(s.recv(4, socket.MSG_PEEK), "big")
        assert size > parts * 20 * record  # the tail was in it, and more than socket buffers hold
        try:
            leader.pause()
            cluster.restart(2)
            eventually(lambda: all(state(cluster, topic, p)["leader"] == 2 for p in range(parts)), 60,
                       "broker 2 elected leader")
            produce(follower.bootstrap, topic, parts, "new", 2, record, "1")
            leader.resume()
            logs = [os.path.join(leader.data_dir, f"{topic}-{p}", "00000000000000000000.log") for p in range(parts)]
            eventually(lambda: all(os.path.getsize(f) < 15 * record for f in logs), 60,
                       "the old leader to truncate its tail")
            s.settimeout(30)
            got = 0
            try:
                while chunk := s.recv(1 << 20):
                    got += len(chunk)
            except ConnectionResetError:
                pass
            assert got < 4 + size, "the truncated answer cannot have been sent whole"
        finally:
            s.close()
        assert pid(leader)
        want = {p: [value("kept", p, i, record) for i in range(10)] + [value("new", p, i, record) for i in range(2)]
                for p in range(parts)}
        assert ck_consume_values(cluster.bootstrap, topic, parts, parts * 12) == want
        # The old leader, now a follower, catches up with the new one.
        eventually(lambda: all(sorted(state(cluster, topic, p)["isr"]) == [1, 2] for p in range(parts)), 60,
                   "broker 1 back in sync")
    finally:
        cluster.close()


def state(cluster: ZkCluster, topic: str, partition: int) -> dict:
    """The partition's leader and ISR in ZooKeeper; empty until the controller wrote them."""
    if not cluster.zk.exists(f"/brokers/topics/{topic}/partitions/{partition}/state"):
        return {"leader": None, "isr": None}
    return cluster.partition_state(topic, partition)


def produce(bootstrap: str, topic: str, partitions: int, tag: str, records: int, size: int, acks: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "enable.idempotence": False})
    for i in range(records):
        for part in range(partitions):
            p.produce(topic, value(tag, part, i, size), partition=part)
    assert p.flush(60) == 0
