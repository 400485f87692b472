"""Replication under real faults, on three cluster-mode broker processes and a real ZooKeeper:
kill -9 of a partition leader under acks=all loses no acknowledged record, consumers go on from
the new leader, and the ISR shrinks and grows back; a leader frozen with SIGSTOP and resumed
after the leadership moved truncates what it alone had, and every replica ends byte-identical;
below min.insync.replicas the high watermark waits for the ISR; at eligible.leader.replicas.version
1 (KIP-966) replicas that leave the ISR below min ISR stay eligible, a clean one leads alone
when back and an unclean one does not, even back while no controller was active, and Kafka's
Java Admin reads the eligible replicas.
The records acknowledged and read back are checked as Jepsen's Kafka workload checks them
(tests/history.py)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from rivulet.client.connection import BrokerConnection
from rivulet.protocol import records as rec
from rivulet.protocol.messages import describe_topic_partitions_request as dtpq
from rivulet.protocol.messages.api_versions_request import ApiVersionsRequest
from tests.cluster import ZkCluster, eventually, three_brokers
from tests.history import History

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

BROKER_CONFIG = {
    "replica.lag.time.max.ms": "2000",
    "default.replication.factor": "3",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "3",
    "unclean.leader.election.enable": "false",
}
# Small segments, so that faults land across segment rolls (Kafka's internal.segment.bytes:
# segment.bytes may not go below 1 MiB).
SEGMENT_CONFIG = {"internal.segment.bytes": "262144"}


@pytest.fixture
def cluster(zk_connect):
    with three_brokers(zk_connect, **BROKER_CONFIG) as c:
        yield c


def create_topic(cluster: ZkCluster, topic: str, partitions: int = 1, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 3, config={**SEGMENT_CONFIG, **config})],
                        request_timeout=60)[topic].result(90)
    for p in range(partitions):
        eventually(lambda p=p: cluster.zk.exists(f"/brokers/topics/{topic}/partitions/{p}/state")
                   and sorted(cluster.partition_state(topic, p)["isr"]) == [1, 2, 3], what="a leader and full ISR")
    # The controller's UpdateMetadata reaches each broker a moment after ZooKeeper has the
    # state, as in Kafka: wait until every broker answers Metadata with the topic's leaders.
    for b in cluster.brokers.values():
        eventually(lambda b=b: _leaders_known(b.bootstrap, topic, partitions),
                   what=f"broker at {b.bootstrap} to know {topic}'s leaders")


def _leaders_known(bootstrap: str, topic: str, partitions: int) -> bool:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    t = md.topics.get(topic)
    return (t is not None and t.error is None and len(t.partitions) == partitions
            and all(p.leader >= 0 for p in t.partitions.values()))


class Writer(threading.Thread):
    """Produces unique values as fast as the cluster takes them; records what was acknowledged."""

    def __init__(self, cluster: ZkCluster, topic: str, history: History, **conf: object) -> None:
        super().__init__(daemon=True)
        self.history = history
        self.topic = topic
        self.stop = threading.Event()
        self.acked = 0
        self.failed = 0
        self.producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5,
                                  "message.timeout.ms": 60000, **conf})

    def _report(self, err, msg) -> None:
        if err is None:
            self.history.ack(msg.partition(), msg.offset(), msg.value())
            self.acked += 1
        else:
            self.failed += 1

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            try:
                self.producer.produce(self.topic, b"%s-%08d" % (uuid.uuid4().hex[:6].encode(), i),
                                      on_delivery=self._report)
                i += 1
            except BufferError:
                self.producer.poll(0.05)
            self.producer.poll(0)
            if i % 200 == 0:
                time.sleep(0.005)
        self.producer.flush(60)

    def wait_for(self, n: int, timeout: float = 90) -> None:
        start = self.acked
        eventually(lambda: self.acked >= start + n, timeout, f"{n} more acknowledged records")

    def finish(self) -> None:
        self.stop.set()
        self.join(90)


class Reader(threading.Thread):
    """Reads along while the faults happen: as a group member, or assigned every partition."""

    def __init__(self, cluster: ZkCluster, topic: str, group: str | None = None, partitions: int = 1) -> None:
        super().__init__(daemon=True)
        self.history = History()
        self.count = 0
        self.stop = threading.Event()
        self.consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group or uuid.uuid4().hex,
                                  "auto.offset.reset": "earliest", "enable.auto.commit": group is not None})
        if group is not None:
            self.consumer.subscribe([topic])
        else:
            self.consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])

    def run(self) -> None:
        self.history.new_read_sequence()
        while not self.stop.is_set():
            m = self.consumer.poll(0.5)
            if m is not None and not m.error():
                self.history.read(m.partition(), m.offset(), m.value())
                self.count += 1
        self.consumer.close()

    def check_against(self, acknowledged: History) -> str | None:
        """Stop; what it read agrees with the acknowledgements (no offset with two values, nothing
        twice, no going back), or what did not."""
        self.stop.set()
        self.join(30)
        for (p, o), value in acknowledged.acked.items():
            self.history.ack(p, o, value)
        a = self.history.check()
        return a.summary() if a.inconsistent or a.duplicate or a.nonmonotonic else None


def read_back(cluster: ZkCluster, topic: str, history: History, partitions: int = 1) -> int:
    """Every record up to the end of each partition, into the history; how many were read."""
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": uuid.uuid4().hex,
                  "enable.auto.commit": False, "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    history.new_read_sequence()
    done: set[int] = set()
    n = 0
    deadline = time.monotonic() + 90
    while len(done) < partitions and time.monotonic() < deadline:
        m = c.poll(1)
        if m is None:
            continue
        if m.error():
            if m.error().code() == -191:  # _PARTITION_EOF
                done.add(m.partition())
            continue
        history.read(m.partition(), m.offset(), m.value())
        n += 1
    c.close()
    assert len(done) == partitions, "the partitions were not read to their end"
    return n


def test_kill_9_of_the_leader_loses_no_acknowledged_record(cluster):
    topic = f"kill-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, topic, **{"min.insync.replicas": "2"})
    history = History()
    writer = Writer(cluster, topic, history, acks="all", **{"enable.idempotence": True})
    # A group consumer reads along the whole time: it must go on from the new leader.
    reader = Reader(cluster, topic, group=f"g-{topic}")
    writer.start()
    reader.start()
    try:
        writer.wait_for(3000)
        old = cluster.partition_state(topic, 0)
        leader = old["leader"]
        cluster.brokers[leader].kill()
        eventually(lambda: cluster.partition_state(topic, 0)["leader"] not in (leader, -1), 60, "a new leader")
        state = cluster.partition_state(topic, 0)
        assert state["leader_epoch"] > old["leader_epoch"]
        writer.wait_for(3000)  # acks=all goes on with two replicas in the ISR
        eventually(lambda: leader not in cluster.partition_state(topic, 0)["isr"], 60, "the ISR to shrink")
        before = reader.count
        eventually(lambda: reader.count > before + 1000, 60, "the consumer to go on from the new leader")

        cluster.restart(leader)
        eventually(lambda: sorted(cluster.partition_state(topic, 0)["isr"]) == [1, 2, 3], 90,
                   "the restarted broker to catch up and rejoin the ISR")
        writer.wait_for(1000)
    finally:
        writer.finish()
    assert writer.acked > 7000
    read = read_back(cluster, topic, history)
    anomalies = history.check()
    assert not anomalies, anomalies.summary()
    assert read >= writer.acked
    problem = reader.check_against(history)
    assert problem is None, problem


def _log_bytes(data_dir: str, topic: str, below: int) -> bytes:
    """The partition's record batches that end below ``below``, as one byte string, read from the
    segment files on disk (segment boundaries differ between replicas; the batches do not)."""
    d = os.path.join(data_dir, f"{topic}-0")
    out = bytearray()
    for name in sorted(n for n in os.listdir(d) if n.endswith(".log")):
        with open(os.path.join(d, name), "rb") as f:
            data = f.read()
        for pos, h in rec.iter_batches(data):
            if h.base_offset + h.last_offset_delta < below:
                out += data[pos:pos + h.size]
    return bytes(out)


def _log_end(data_dir: str, topic: str) -> int:
    d = os.path.join(data_dir, f"{topic}-0")
    end = 0
    for name in sorted(n for n in os.listdir(d) if n.endswith(".log")):
        with open(os.path.join(d, name), "rb") as f:
            for _, h in rec.iter_batches(f.read()):
                end = max(end, h.base_offset + h.last_offset_delta + 1)
    return end


def test_a_paused_leader_truncates_its_divergent_tail_and_every_replica_converges(cluster):
    topic = f"pause-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, topic, **{"min.insync.replicas": "1"})
    history = History()
    # acks=1: the leader acknowledges before its followers have the records, so the tail it
    # alone holds when it freezes diverges from what the next leader writes.
    # Short timeouts: what was sent to the frozen leader fails soon and the rest goes to the next.
    writer = Writer(cluster, topic, history, acks=1, **{"enable.idempotence": False, "retries": 0,
                                                         "request.timeout.ms": 3000, "message.timeout.ms": 6000})
    writer.start()
    try:
        writer.wait_for(5000)
        old = cluster.partition_state(topic, 0)
        leader = old["leader"]
        frozen = cluster.brokers[leader]
        frozen.pause()
        # Its ZooKeeper session expires; the controller elects a leader from the ISR.
        eventually(lambda: cluster.partition_state(topic, 0)["leader"] not in (leader, -1), 60, "a new leader")
        writer.wait_for(3000)
        end_while_frozen = _log_end(frozen.data_dir, topic)
        frozen.resume()
        eventually(lambda: sorted(cluster.partition_state(topic, 0)["isr"]) == [1, 2, 3], 90,
                   "the resumed broker to rejoin the ISR")
    finally:
        writer.finish()
    new_leader = cluster.partition_state(topic, 0)["leader"]
    eventually(lambda: len({_log_end(b.data_dir, topic) for b in cluster.brokers.values()}) == 1, 60,
               "every replica to reach the leader's log end")
    end = _log_end(cluster.brokers[new_leader].data_dir, topic)
    reference = _log_bytes(cluster.brokers[new_leader].data_dir, topic, end)
    assert reference
    for i, b in cluster.brokers.items():
        assert _log_bytes(b.data_dir, topic, end) == reference, f"broker {i}'s log differs from the leader's"
    reads = History()
    read_back(cluster, topic, reads)
    anomalies = reads.check()
    assert not anomalies.inconsistent and not anomalies.duplicate and not anomalies.nonmonotonic, \
        anomalies.summary()
    # acks=1 may lose what the frozen leader alone acknowledged, and only that: every record
    # acknowledged before it froze, below where the next leader's epoch began, was read back.
    diverged_at = _epoch_start(cluster.brokers[new_leader].data_dir, topic, old["leader_epoch"] + 1)
    lost = [(o, v) for (p, o), v in history.acked.items() if o < diverged_at and v not in reads.seen.get((p, o), ())]
    assert not lost, lost[:5]
    # The new leader's epoch began inside what the frozen leader had: a follower never holds
    # more than its leader. Whatever the frozen broker had past that point is gone now.
    assert diverged_at <= end_while_frozen


def _epoch_start(data_dir: str, topic: str, epoch: int) -> int:
    """Where ``epoch`` (or the first later one) begins, from the leader-epoch checkpoint."""
    with open(os.path.join(data_dir, f"{topic}-0", "leader-epoch-checkpoint")) as f:
        lines = f.read().split("\n")
    entries = [tuple(map(int, line.split())) for line in lines[2:] if line.strip()]
    return min((start for e, start in entries if e >= epoch), default=1 << 62)


# Faults one after another: 12 take about a minute and a half, each of the three kinds several
# times (RIVULET_CHAOS_ROUNDS for more, and RIVULET_CHAOS_SEED for another sequence).
CHAOS_ROUNDS = int(os.environ.get("RIVULET_CHAOS_ROUNDS", "12"))


@pytest.mark.timeout(900)  # each round waits for the ISRs to be whole again: slower on a busy machine
def test_history_stays_linear_through_leader_kills_pauses_and_controller_kills(cluster):
    """Jepsen's Kafka workload in small: producers at acks=all with idempotence and a reader
    run while a nemesis kills partition leaders (kill -9), freezes them (SIGSTOP past the
    ZooKeeper session) and kills the controller, one broker at a time. Afterwards
    every acknowledged record is read back at its offset, and no offset ever shows two values."""
    import random

    topic = f"chaos-{uuid.uuid4().hex[:6]}"
    partitions = 3
    create_topic(cluster, topic, partitions, **{"min.insync.replicas": "2"})
    history = History()
    writer = Writer(cluster, topic, history, acks="all", **{"enable.idempotence": True})
    reader = Reader(cluster, topic, partitions=partitions)
    rng = random.Random(int(os.environ.get("RIVULET_CHAOS_SEED", "320")))
    done: list[str] = []
    writer.start()
    reader.start()
    try:
        writer.wait_for(2000)
        while len(done) < CHAOS_ROUNDS:
            action = rng.choice(["kill-leader", "pause-leader", "kill-controller"])
            if action == "kill-controller":
                victim = cluster.controller()
            else:
                victim = cluster.partition_state(topic, rng.randrange(partitions))["leader"]
            if victim is None or victim not in cluster.brokers:
                time.sleep(1)
                continue
            broker = cluster.brokers[victim]
            if action == "pause-leader":
                broker.pause()
                time.sleep(rng.uniform(5, 8))  # past the session timeout: the leadership moves
                broker.resume()
            else:
                broker.kill()
                time.sleep(rng.uniform(1, 4))
                cluster.restart(victim)
            done.append(f"{action} {victim}")
            # One fault at a time: back to three live brokers and full ISRs before the next.
            try:
                eventually(lambda: cluster.registered() == [1, 2, 3], 60, "the broker to register again")
                for p in range(partitions):
                    eventually(lambda p=p: sorted(cluster.partition_state(topic, p)["isr"]) == [1, 2, 3], 120,
                               f"partition {p}'s ISR to be whole again after {action} {victim}")
            except AssertionError as e:
                states = {p: cluster.partition_state(topic, p) for p in range(partitions)}
                logs = "\n".join(f"--- broker {i}:\n{b.output()[-3000:]}" for i, b in cluster.brokers.items())
                raise AssertionError(f"{e} (after {done}; controller {cluster.controller()}, registered "
                                     f"{cluster.registered()}, states {states})\n{logs}") from None
            writer.wait_for(500)
    finally:
        writer.finish()
    assert len(done) == CHAOS_ROUNDS, done
    read_back(cluster, topic, history, partitions)
    anomalies = history.check()
    assert not anomalies, f"{anomalies.summary()} after {done}"
    problem = reader.check_against(history)
    assert problem is None, f"{problem} after {done}"


def test_the_high_watermark_waits_for_min_isr_after_two_followers_die(cluster):
    """Kafka 4's leader (KIP-966's strict min ISR): with min.insync.replicas=2 and both followers
    killed (-9), an acks=1 record is acknowledged but stays above the high watermark, unread,
    until a follower is back in the ISR; then it is read. acks=all is refused meanwhile."""
    topic = f"minisr-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, topic, **{"min.insync.replicas": "2"})
    leader = cluster.partition_state(topic, 0)["leader"]
    p1 = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1", "enable.idempotence": False})
    for i in range(5):
        p1.produce(topic, f"before-{i}".encode())
    assert p1.flush(60) == 0
    c = Consumer({"bootstrap.servers": cluster.brokers[leader].bootstrap, "group.id": f"g-{topic}",
                  "enable.auto.commit": False})
    # acks=1 answers before the followers fetch: the five are committed once the HW covers them.
    eventually(lambda: c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30) == (0, 5), 60,
               "the high watermark to cover the first five")
    followers = [b for b in cluster.brokers if b != leader]
    for b in followers:
        cluster.brokers[b].kill()
    eventually(lambda: cluster.partition_state(topic, 0)["isr"] == [leader], 60, "the ISR to shrink to the leader")
    leader_bootstrap = cluster.brokers[leader].bootstrap
    results: list = []
    p1 = Producer({"bootstrap.servers": leader_bootstrap, "acks": "1", "enable.idempotence": False})
    p1.produce(topic, b"under-min-isr", on_delivery=lambda err, msg: results.append((err, msg.offset())))
    assert p1.flush(60) == 0
    assert results == [(None, 5)]  # acknowledged at offset 5
    pall = Producer({"bootstrap.servers": leader_bootstrap, "acks": "all", "enable.idempotence": False,
                     "message.timeout.ms": 5000})
    refused: list = []
    pall.produce(topic, b"refused", on_delivery=lambda err, msg: refused.append(err))
    pall.flush(30)
    assert refused and refused[0] is not None and refused[0].name() in ("NOT_ENOUGH_REPLICAS", "_MSG_TIMED_OUT")
    try:
        # The leader's ISR is its own alone, so its high watermark cannot have moved past 5.
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30) == (0, 5)
        cluster.restart(followers[0])
        eventually(lambda: len(cluster.partition_state(topic, 0)["isr"]) == 2, 90, "a follower back in the ISR")
        eventually(lambda: c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1] >= 6, 60,
                   "the high watermark to cover the record")
        c.assign([TopicPartition(topic, 0, 5)])
        got = None
        for _ in range(60):
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                got = (m.offset(), m.value())
                break
        assert got == (5, b"under-min-isr")
    finally:
        c.close()


ELR = "eligible.leader.replicas.version"
ELR_DESCRIBE = Path(__file__).resolve().parents[1] / "java" / "ElrDescribe.java"


def _ask(bootstrap: str, request, version: int):
    async def go():
        host, port = bootstrap.rsplit(":", 1)
        conn = await BrokerConnection(host, int(port)).connect(10)
        try:
            return await conn.send(request, version=version)
        finally:
            await conn.close()
    return asyncio.run(go())


def _finalized_elr(bootstrap: str) -> int:
    r = _ask(bootstrap, ApiVersionsRequest(client_software_name="test", client_software_version="1"), 4)
    return next((f.max_version_level for f in r.finalized_features if f.name == ELR), 0)


def _described(bootstrap: str, topic: str) -> tuple[int, list[int], list[int], list[int]] | None:
    """DescribeTopicPartitions of partition 0: leader, ISR, ELR, last known ELR; None from a
    broker not yet told of the topic (one just restarted)."""
    r = _ask(bootstrap, dtpq.DescribeTopicPartitionsRequest(topics=[dtpq.TopicRequest(name=topic)],
                                                            response_partition_limit=10), 0)
    if not r.topics[0].partitions:
        return None
    p = r.topics[0].partitions[0]
    return p.leader_id, sorted(p.isr_nodes), sorted(p.eligible_leader_replicas), sorted(p.last_known_elr)


def _elr_state(cluster: ZkCluster, topic: str) -> tuple[int, list[int], list[int], list[int]]:
    s = cluster.partition_state(topic, 0)
    return (s["leader"], sorted(s["isr"]), sorted(s.get("eligible_leader_replicas", [])),
            sorted(s.get("last_known_elr", [])))


def test_at_elr_version_1_eligible_replicas_keep_acknowledged_records_through_losing_every_replica(cluster):
    """KIP-966 on real brokers, at eligible.leader.replicas.version 1 as a new cluster finalizes
    it (Kafka 4.3.1's); RF 3 (brokers 1-3, broker 4 hosts no replica and is the controller once
    the others are down), min ISR 2, an acks=all producer. Follower 3 killed (-9): the ISR keeps min ISR, no ELR. Follower 2 stopped
    (SIGTERM, a controlled shutdown): below min ISR, it waits in the ELR. Leader 1 killed (-9):
    no leader, an empty ISR, both in the ELR, 1 the last known leader. The controller (4) killed
    too, 1 back after its kill -9 (no clean start) while no controller is active: the next
    controller's failover (1's own) takes it out of the ELR, and it is not elected; 2 back
    (clean) leads alone, and every acknowledged record is read from it."""
    cluster.start(4, **BROKER_CONFIG)
    cluster.wait_for_brokers([1, 2, 3, 4])
    b4 = cluster.brokers[4].bootstrap
    for b in cluster.brokers.values():
        assert _finalized_elr(b.bootstrap) == 1, f"broker at {b.bootstrap} not at {ELR} 1"
    topic = f"elr-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": b4})
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[1, 2, 3]], config={"min.insync.replicas": "2"})],
                        request_timeout=60)[topic].result(90)
    eventually(lambda: cluster.zk.exists(f"/brokers/topics/{topic}/partitions/0/state")
               and _elr_state(cluster, topic) == (1, [1, 2, 3], [], []), 60, "leader 1 and a full ISR")
    for b in cluster.brokers.values():
        eventually(lambda b=b: _leaders_known(b.bootstrap, topic, 1), what=f"{b.bootstrap} to know the leader")
    history = History()
    writer = Writer(cluster, topic, history, acks="all", **{"enable.idempotence": True})
    writer.start()
    try:
        writer.wait_for(2000)
        cluster.brokers[3].kill()
        eventually(lambda: _elr_state(cluster, topic)[1] == [1, 2], 60, "3 out of the ISR")
        assert _elr_state(cluster, topic) == (1, [1, 2], [], [])
        writer.wait_for(2000)  # acks=all goes on at min ISR
    finally:
        writer.finish()
    assert writer.acked >= 4000
    eventually(lambda: _described(b4, topic) == (1, [1, 2], [], []), 30, "broker 4 to describe the ISR [1, 2]")

    cluster.brokers[2].stop(timeout=60)  # SIGTERM: a controlled shutdown, clean
    assert _elr_state(cluster, topic) == (1, [1], [2], [])
    eventually(lambda: _described(b4, topic) == (1, [1], [2], []), 30, "the ELR [2] described")

    cluster.brokers[1].kill()
    eventually(lambda: _elr_state(cluster, topic)[0] == -1, 60, "the partition to lose its leader")
    assert _elr_state(cluster, topic) == (-1, [], [1, 2], [1])
    eventually(lambda: _described(b4, topic) == (-1, [], [1, 2], [1]), 30, "the leaderless state described")

    # The controller (4, the last one up) killed too: 1 comes back after its kill -9 (no
    # clean-shutdown marker) while no controller is active, and is elected controller itself
    # after registering. Its failover finds 1's registration newer than the one the last
    # controller accounted for: 1 leaves the ELR and is not elected.
    assert cluster.controller() == 4
    cluster.brokers[4].kill()
    cluster.restart(1)
    eventually(lambda: cluster.controller() == 1 and _elr_state(cluster, topic)[2] == [2], 60,
               "1 to become controller and take itself out of the ELR")
    assert _elr_state(cluster, topic) == (-1, [], [2], [1])  # not elected
    assert "clean_start" not in cluster.json("/brokers/ids/1")
    czxid = cluster.zk.exists("/brokers/ids/1").czxid
    eventually(lambda: cluster.json("/rivulet/accounted_registrations")["brokers"].get("1") == czxid, 30,
               "1's registration accounted for")
    cluster.restart(4)
    eventually(lambda: _described(b4, topic) == (-1, [], [2], [1]), 30, "1 out of the ELR described")

    cluster.restart(2)  # clean
    eventually(lambda: _elr_state(cluster, topic)[0] == 2, 60, "2 to lead from the ELR")
    assert cluster.json("/brokers/ids/2")["clean_start"] is True
    eventually(lambda: _elr_state(cluster, topic) == (2, [1, 2], [], []), 90, "1 to catch up from 2")
    read = read_back(cluster, topic, history)
    anomalies = history.check()
    assert not anomalies, anomalies.summary()
    assert read >= writer.acked


def _java_describe(bootstrap: str, *topics: str) -> list[str]:
    """tests/java/ElrDescribe.java: Kafka's Java Admin describeTopics, a line per partition."""
    from tests import java_tools as jt

    p = subprocess.run(jt.program_command(ELR_DESCRIBE, [bootstrap, *topics]), capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout.splitlines()


@pytest.mark.java
def test_at_elr_version_1_a_paused_leader_stays_eligible_and_unclean_comes_last(java, cluster):
    """KIP-966 on real brokers, two topics on brokers 1-3 (RF 3, min ISR 2; broker 4 hosts no
    replica and stays up), A with unclean.leader.election.enable=false and B with true.
    Follower 3 killed (-9): the ISRs keep min ISR. Leader 1 frozen (SIGSTOP) past its
    ZooKeeper session: it leaves the ISR into the ELR, 2 leads. 2 stopped (SIGTERM): no leader,
    an empty ISR, the ELR [1, 2], 2 the last known leader. 3 back after its kill -9 (no clean
    start, never eligible): A stays leaderless, while B, whose ISR, ELR and last known leader
    are all down, elects it uncleanly. 1 resumed (the same process, so a clean start) is still
    eligible: it leads A, with every record acknowledged before the faults, and 3 follows it;
    on B it follows 3. Kafka's Java Admin describeTopics reads the leaderless A's ELR and last
    known ELR (elr(), lastKnownElr()) and B's empty ones."""
    cluster.start(4, **BROKER_CONFIG)
    cluster.wait_for_brokers([1, 2, 3, 4])
    b4 = cluster.brokers[4].bootstrap
    suffix = uuid.uuid4().hex[:6]
    a, b = f"elr-a-{suffix}", f"elr-b-{suffix}"
    admin = AdminClient({"bootstrap.servers": b4})
    futures = admin.create_topics([
        NewTopic(t, 1, replica_assignment=[[1, 2, 3]],
                 config={"min.insync.replicas": "2", "unclean.leader.election.enable": unclean})
        for t, unclean in ((a, "false"), (b, "true"))], request_timeout=60)
    for f in futures.values():
        f.result(90)
    both = (a, b)

    def states_are(want: tuple[int, list[int], list[int], list[int]], *topics: str) -> bool:
        return all(cluster.zk.exists(f"/brokers/topics/{t}/partitions/0/state") and _elr_state(cluster, t) == want
                   for t in topics)

    eventually(lambda: states_are((1, [1, 2, 3], [], []), *both), 60, "leader 1 and a full ISR on both")
    for broker in cluster.brokers.values():
        for t in both:
            eventually(lambda t=t, broker=broker: _leaders_known(broker.bootstrap, t, 1),
                       what=f"{broker.bootstrap} to know {t}'s leader")
    history = History()
    producer = Producer({"bootstrap.servers": b4, "acks": "all", "enable.idempotence": True})
    for i in range(200):
        producer.produce(a, b"before-%04d" % i,
                         on_delivery=lambda err, m: err is None and history.ack(m.partition(), m.offset(), m.value()))
    assert producer.flush(60) == 0 and len(history.acked) == 200

    cluster.brokers[3].kill()
    eventually(lambda: states_are((1, [1, 2], [], []), *both), 60, "3 out of both ISRs")

    cluster.brokers[1].pause()  # past its ZooKeeper session: the controller takes it for gone
    eventually(lambda: states_are((2, [2], [1], []), *both), 60, "frozen 1 out of the ISR, into the ELR")
    eventually(lambda: _described(b4, a) == (2, [2], [1], []), 30, "the ELR [1] described")

    assert cluster.brokers[2].stop(timeout=60) == 0  # a controlled shutdown, clean
    eventually(lambda: states_are((-1, [], [1, 2], [2]), *both), 60, "no leader, both eligible, 2 the last")

    cluster.restart(3)  # after kill -9: no clean start
    eventually(lambda: 3 in cluster.registered() and _elr_state(cluster, b)[0] == 3, 60,
               "3 to lead B uncleanly")
    assert _elr_state(cluster, b) == (3, [3], [], [])
    assert _elr_state(cluster, a) == (-1, [], [1, 2], [2])  # unclean elections off: no leader
    eventually(lambda: _described(b4, a) == (-1, [], [1, 2], [2]), 30, "A's leaderless state described")
    # Kafka's Java Admin reads both lists: ids the live brokers (DescribeCluster) do not list
    # become placeholder nodes, as Kafka 4.3.1's DescribeTopicPartitionsResponse maps them.
    eventually(lambda: _described(b4, b) == (3, [3], [], []), 30, "B's unclean leader described")
    assert _java_describe(b4, a, b) == [
        f"{a}-0 leader=none isr=[] elr=[1:offline, 2:offline] lastKnownElr=[2:offline]",
        f"{b}-0 leader=3:live isr=[3:live] elr=[] lastKnownElr=[]",
    ]

    cluster.brokers[1].resume()  # a new session, the same process: still eligible
    eventually(lambda: _elr_state(cluster, a)[0] == 1, 60, "1 to lead A from the ELR")
    assert cluster.json("/brokers/ids/1")["clean_start"] is True
    # Unclean elections off and 2 the last known leader: 1 could lead only from the ELR. It led
    # alone (ISR [1], 2 still eligible) until 3, live, caught up: back at min ISR, no ELR.
    eventually(lambda: _elr_state(cluster, a) == (1, [1, 3], [], []), 90, "3 to follow 1 on A")
    eventually(lambda: _elr_state(cluster, b) == (3, [1, 3], [], []), 90, "1 to follow 3 on B")
    read_back(cluster, a, history)
    anomalies = history.check()
    assert not anomalies, anomalies.summary()
