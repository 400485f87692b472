"""Three brokers and a real ZooKeeper through ZooKeeper's faults: killed outright, a broker's
session expired (SIGSTOP past the session timeout), a broker killed and restarted within its
session timeout. The brokers stop, register and log as Kafka's do."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from rivulet.controller.zk_server import ZooKeeperServer
from rivulet.storage.checkpoints import CLEAN_SHUTDOWN
from rivulet.testing import BrokerProcess
from tests.cluster import ZkCluster, eventually, three_brokers

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

SESSION_S = 4  # tests/cluster.py's zookeeper.session.timeout.ms


def _produce(cluster: ZkCluster, topic: str, n: int, timestamp: int = 0) -> None:
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "message.timeout.ms": 60000})
    for i in range(n):
        p.produce(topic, b"v%d" % i, timestamp=timestamp)
    assert p.flush(90) == 0


def _exit_code(b: BrokerProcess, timeout: float) -> int | None:
    """The exit code of a broker sent SIGTERM; None (and killed) if it runs on past ``timeout``."""
    try:
        return b.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        b.proc.send_signal(signal.SIGABRT)  # with PYTHONFAULTHANDLER: where it hangs, in its log
        time.sleep(1)
        b.kill()
        return None


def _expire_session(cluster: ZkCluster, broker_id: int) -> None:
    """SIGSTOP the broker past its session timeout, so that ZooKeeper expires the session; it
    registers again with a new one once resumed."""
    b = cluster.brokers[broker_id]
    old = cluster.zk.exists(f"/brokers/ids/{broker_id}").ephemeralOwner
    b.pause()
    try:
        eventually(lambda: broker_id not in cluster.registered(), 60, f"broker {broker_id}'s session to expire")
    finally:
        b.resume()
    eventually(lambda: (s := cluster.zk.exists(f"/brokers/ids/{broker_id}")) is not None and s.ephemeralOwner != old,
               60, f"broker {broker_id} to register again")
    cluster.wait_for_brokers([1, 2, 3])


@pytest.fixture(scope="module")
def cluster(module_zk_connect):
    with three_brokers(module_zk_connect, **{"default.replication.factor": "3",
                                             "offsets.topic.replication.factor": "3",
                                             "offsets.topic.num.partitions": "3"}) as c:
        yield c


def test_a_new_topics_configs_are_in_force_at_its_first_write(cluster):
    """Point 7: a broker whose session expired has lost its topic watch; a LogAppendTime topic
    led there still gets the broker's timestamps on its first batch, as its config is read
    before the log is made."""
    _expire_session(cluster, 2)
    topic = "lat-first-write"
    from kafka.admin import KafkaAdminClient, NewTopic as KpNewTopic

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=60000)
    try:  # its only replica on the broker whose session expired
        admin.create_topics([KpNewTopic(topic, -1, -1, replica_assignments={0: [2]},
                                        topic_configs={"message.timestamp.type": "LogAppendTime"})])
    finally:
        admin.close()
    eventually(lambda: cluster.zk.exists(f"/brokers/topics/{topic}/partitions/0/state"), 60, "a leader")
    before = int(time.time() * 1000)
    _produce(cluster, topic, 5, timestamp=1000)  # a producer's timestamp far in the past
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{topic}", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = []
        deadline = time.monotonic() + 60
        while len(got) < 5 and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                got.append(m.timestamp())
    finally:
        c.close()
    assert len(got) == 5, got
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME
    assert all(kind == TIMESTAMP_LOG_APPEND_TIME and ts >= before - 60_000 for kind, ts in got), got


def test_logs_after_a_session_expiry_are_one_line_each_with_the_cause(cluster):
    """Point 10: the controller's session expires (SIGSTOP): what it logs then has no
    traceback, no empty reason and no unformatted %s."""
    controller = cluster.controller()
    assert controller is not None
    b = cluster.brokers[controller]
    start = len(b.output())
    _expire_session(cluster, controller)
    time.sleep(2)  # what the resumed broker logs as it catches up
    logged = b.output()[start:]
    assert "Traceback" not in logged, logged
    assert not re.search(r"failed: *$", logged, re.MULTILINE), logged
    assert "%s" not in logged and "%d" not in logged, logged


def test_a_broker_restarted_within_its_session_timeout_waits_and_serves_only_once_registered(cluster):
    """Point 9: kill -9 and start at once, as a supervisor does: the old registration is still
    there; the broker says it waits for it to expire, accepts no connection before it has
    registered, and runs on (no BrokerIdInUseError)."""
    b = cluster.brokers[3]
    # A session well past a broker's start-up on a loaded machine.
    b.stop()
    b.overrides["zookeeper.session.timeout.ms"] = "30000"
    cluster.restart(3)
    cluster.wait_for_brokers([1, 2, 3])
    old = cluster.zk.exists("/brokers/ids/3").ephemeralOwner
    start = len(b.output())
    b.kill()
    assert cluster.zk.exists("/brokers/ids/3").ephemeralOwner == old  # not expired yet
    b.start(timeout=90)  # returns at the first accepted TCP connection
    stat = cluster.zk.exists("/brokers/ids/3")
    assert stat is not None and stat.ephemeralOwner != old, "the broker accepted a connection before registering"
    cluster.wait_for_brokers([1, 2, 3])
    assert b.proc is not None and b.proc.poll() is None
    logged = b.output()[start:]
    assert "BrokerIdInUseError" not in logged and "Traceback" not in logged, logged
    assert len(re.findall(r"broker id 3 is still registered by session 0x[0-9a-f]+ .*waiting up to \d+ s", logged)) == 1, \
        logged


def test_sigterm_stops_a_broker_while_zookeeper_is_down(tmp_path):
    """Point 8: ZooKeeper killed, then SIGTERM to every broker, with Kafka's default
    controlled.shutdown.max.retries (3) and retry.backoff.ms (5000): each gives up its controlled
    shutdown, flushes its logs (clean-shutdown marker) and exits 0."""
    zk = ZooKeeperServer(data_dir=str(tmp_path / "zk")).start()
    try:
        with three_brokers(zk.connect, **{"controlled.shutdown.retry.backoff.ms": "5000",
                                          "default.replication.factor": "3"}) as cluster:
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            admin.create_topics([NewTopic("t", 3)], request_timeout=60)["t"].result(90)
            eventually(lambda: all(cluster.zk.exists(f"/brokers/topics/t/partitions/{p}/state")
                                   and len(cluster.partition_state("t", p)["isr"]) == 3 for p in range(3)), 60,
                       "a full ISR")
            _produce(cluster, "t", 300)
            zk.kill()
            t0 = time.monotonic()
            for b in cluster.brokers.values():
                b.proc.send_signal(signal.SIGTERM)
            codes = {i: _exit_code(b, 120) for i, b in cluster.brokers.items()}
            took = time.monotonic() - t0
            print(f"three brokers stopped {took:.1f} s after SIGTERM with ZooKeeper down")
            assert codes == {1: 0, 2: 0, 3: 0}, (codes, [b.output()[-3000:] for b in cluster.brokers.values()])
            for b in cluster.brokers.values():
                out = b.output()
                assert "did not complete after 3 attempts; stopping uncleanly" in out, out[-3000:]
                assert "Traceback" not in out, out[-3000:]
                assert (Path(b.data_dir) / CLEAN_SHUTDOWN).exists()
    finally:
        zk.cleanup()
