"""A history check in the manner of Jepsen's Kafka workload: a 3-broker ZooKeeper-mode cluster
takes acks=all writes of unique values from an idempotent producer while a nemesis, one fault
at a time, kills a partition leader with kill -9 (then restarts it), pauses one with SIGSTOP
(then resumes it) and kills the controller. Afterwards every acknowledged (partition, offset,
value) must be read back and no offset may show two values."""

from __future__ import annotations

import threading
import time

import confluent_kafka
import pytest
from cluster import ZkCluster, eventually
from history import History

from rivulet.admin import AdminClient, NewTopic

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

TOPIC = "jepsen"
PARTITIONS = 3
ROUNDS = 6  # faults, one after another: kill a leader, pause a leader, kill the controller, twice
BROKER = {"replica.lag.time.max.ms": "3000", "replica.fetch.wait.max.ms": "100", "replica.fetch.backoff.ms": "200",
          "offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1"}


class Writer(threading.Thread):
    """Writes v0, v1, ... round-robin over the partitions until stopped; acks go to the history."""

    def __init__(self, bootstrap: str, history: History) -> None:
        super().__init__(daemon=True)
        self.history = history
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.sent = 0
        self.failed = 0
        self.producer = confluent_kafka.Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
            "message.timeout.ms": 30000, "linger.ms": 5, "retry.backoff.ms": 100})

    def _report(self, err, msg) -> None:
        with self.lock:
            if err is None:
                self.history.ack(msg.partition(), msg.offset(), msg.value())
            else:
                self.failed += 1

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            try:
                self.producer.produce(TOPIC, f"v{i}".encode(), partition=i % PARTITIONS, on_delivery=self._report)
                i += 1
            except BufferError:
                pass
            self.producer.poll(0.01)
        self.sent = i
        self.producer.flush(60)


def leader_of(cluster: ZkCluster, partition: int) -> int:
    try:
        return cluster.partition_state(TOPIC, partition)["leader"]
    except Exception:
        return -1


def healthy(cluster: ZkCluster) -> bool:
    """Every partition has its three replicas in the ISR again."""
    try:
        return all(sorted(cluster.partition_state(TOPIC, p)["isr"]) == [1, 2, 3] for p in range(PARTITIONS))
    except Exception:
        return False


def test_acknowledged_writes_survive_leader_kills_pauses_and_controller_kills(zk_connect):
    cluster = ZkCluster(zk_connect)
    try:
        for i in (1, 2, 3):
            cluster.start(i, **BROKER)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        eventually(lambda: len(admin.list_topics(timeout=10).brokers) == 3, what="three brokers")
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[TOPIC].result(30)
        eventually(lambda: healthy(cluster), what="leaders and full ISRs")

        history = History()
        writer = Writer(cluster.bootstrap, history)
        writer.start()
        for n in range(ROUNDS):
            time.sleep(2)
            kind = n % 3
            if kind == 0:  # kill -9 the leader of a partition, then bring it back
                victim = leader_of(cluster, n % PARTITIONS)
                cluster.brokers[victim].kill()
                eventually(lambda v=victim: leader_of(cluster, n % PARTITIONS) not in (v, -1), what="a new leader")
                time.sleep(2)
                cluster.brokers[victim].start()
            elif kind == 1:  # SIGSTOP a leader past its session timeout, then resume it
                victim = leader_of(cluster, n % PARTITIONS)
                cluster.brokers[victim].pause()
                try:
                    eventually(lambda v=victim: leader_of(cluster, n % PARTITIONS) not in (v, -1),
                               what="a new leader while paused")
                    time.sleep(1)
                finally:
                    cluster.brokers[victim].resume()
            else:  # kill -9 the controller, then bring it back
                victim = cluster.controller()
                cluster.brokers[victim].kill()
                eventually(lambda v=victim: cluster.controller() not in (None, v), what="a new controller")
                time.sleep(1)
                cluster.brokers[victim].start()
            eventually(lambda: healthy(cluster), timeout=60, what=f"recovery after fault {n}")
        writer.stop.set()
        writer.join(120)
        assert not writer.is_alive()

        acked = len(history.acked)
        assert acked > 0
        consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "checker",
                                             "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        try:
            consumer.assign([confluent_kafka.TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
            history.new_read_sequence()
            ends = {p: consumer.get_watermark_offsets(confluent_kafka.TopicPartition(TOPIC, p), timeout=10)[1]
                    for p in range(PARTITIONS)}
            done = {p: 0 for p in range(PARTITIONS)}
            deadline = time.monotonic() + 120
            while any(done[p] < ends[p] for p in done) and time.monotonic() < deadline:
                m = consumer.poll(0.5)
                if m is None or m.error():
                    continue
                history.read(m.partition(), m.offset(), m.value())
                done[m.partition()] = m.offset() + 1
        finally:
            consumer.close()
        anomalies = history.check()
        print(f"history: {acked} acknowledged, {writer.failed} failed, {len(history.seen)} offsets read")
        assert not anomalies, f"{anomalies.summary()} ({acked} acknowledged, {writer.failed} failed)"
    finally:
        cluster.close()
