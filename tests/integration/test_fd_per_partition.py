"""A broker holds about one descriptor per written partition (its active segment's .log), not
three: the indexes keep their entries in memory and open their files only to write them. After
kill -9, whose index entries were still in memory, recovery rebuilds them and every record is
there, found from any offset."""

from __future__ import annotations

import os
import time

import pytest

from rivulet.testing import BrokerProcess

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to count descriptors"),
]

PARTITIONS = 500
ROUNDS = 3  # batches per partition: with index.interval.bytes=1 each after the first is indexed


def _fds(broker: BrokerProcess) -> int:
    assert broker.proc is not None
    return len(os.listdir(f"/proc/{broker.proc.pid}/fd"))


def _log_fds(broker: BrokerProcess, topic: str) -> int:
    """Descriptors on the topic's files (readlink of each of the broker's descriptors)."""
    assert broker.proc is not None
    n = 0
    for fd in os.listdir(f"/proc/{broker.proc.pid}/fd"):
        try:
            target = os.readlink(f"/proc/{broker.proc.pid}/fd/{fd}")
        except OSError:
            continue
        n += f"/{topic}-" in target
    return n


def _consume_from(bootstrap: str, topic: str, offset: int, expect: int, timeout: float = 90) -> dict[int, list]:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "fd-check", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, offset) for p in range(PARTITIONS)])
    got: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    n = 0
    deadline = time.monotonic() + timeout
    while n < expect and time.monotonic() < deadline:
        for m in c.consume(1000, 0.5):
            if m.error():
                raise AssertionError(m.error())
            got[m.partition()].append((m.offset(), m.value()))
            n += 1
    c.close()
    return got


def test_descriptors_stay_about_one_per_partition_and_records_survive_kill9():
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = "wide"
    broker = BrokerProcess().start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1,
                                      config={"index.interval.bytes": "1"})])[topic].result(60)
        p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "1", "linger.ms": 0})
        p.produce(topic, value=b"warm-up", partition=0)
        assert p.flush(30) == 0
        before = _fds(broker)
        assert _log_fds(broker, topic) == PARTITIONS  # one .log each

        failures: list[object] = []

        def on_delivery(err, _msg):
            if err is not None:
                failures.append(err)

        for r in range(ROUNDS):
            for part in range(PARTITIONS):
                p.produce(topic, value=f"r{r}-p{part}".encode() + b"x" * 1000, partition=part,
                          on_delivery=on_delivery)
            assert p.flush(60) == 0  # one batch a partition a round
        assert failures == []
        # Every partition's active segment has index entries now; they hold no descriptor.
        assert _log_fds(broker, topic) == PARTITIONS
        grown = _fds(broker) - before
        assert grown < 50, f"{grown} more descriptors after writing {PARTITIONS} partitions"

        broker.kill()  # the index entries held in memory are lost
        broker.start()
        total = PARTITIONS * ROUNDS + 1
        got = _consume_from(broker.bootstrap, topic, 0, total)
        assert sum(map(len, got.values())) == total
        for part in range(PARTITIONS):
            values = [v for _, v in got[part] if v != b"warm-up"]
            assert [v[:len(f"r0-p{part}")] for v in values] == [f"r{r}-p{part}".encode() for r in range(ROUNDS)]
        # From the last batch's offset (partition 0's is one further, after the warm-up record):
        # the rebuilt index finds it.
        last = _consume_from(broker.bootstrap, topic, ROUNDS - 1, PARTITIONS + 1)
        for part in range(PARTITIONS):
            want = [f"r{r}-p{part}".encode() for r in range(ROUNDS - 1 - (part == 0), ROUNDS)]
            assert [v[:len(want[0])] for _, v in last[part]] == want
        assert _log_fds(broker, topic) == PARTITIONS
    finally:
        broker.cleanup()
