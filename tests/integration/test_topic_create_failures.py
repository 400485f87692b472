"""A topic creation that runs out of file descriptors halfway is rolled back, and start-up after
a creation or deletion cut short by kill -9 is clean."""

from __future__ import annotations

import os
import re
import resource
import time

import pytest

from rivulet.testing import BrokerProcess
from tests.integration.test_durability import consume_all

pytestmark = pytest.mark.integration

KEEP = "keep"


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    errors: list = []
    for v in values:
        p.produce(topic, value=v, partition=0, on_delivery=lambda err, msg: err is None or errors.append(err))
    assert p.flush(30) == 0 and not errors, errors


def partition_dirs(data_dir: str, topic: str) -> list[str]:
    """Every directory of ``topic``'s partitions, live or renamed for deletion."""
    return [n for n in os.listdir(data_dir) if re.match(re.escape(topic) + r"-\d+($|\.)", n)]


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def start_with_keep_topic(broker: BrokerProcess) -> list[bytes]:
    from confluent_kafka.admin import AdminClient, NewTopic
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(KEEP, num_partitions=3, replication_factor=1)])[KEEP].result(30)
    values = [f"v{i}".encode() for i in range(50)]
    produce(broker.bootstrap, KEEP, values)
    return values


def restarted_cleanly(broker: BrokerProcess, values: list[bytes]) -> None:
    """After kill -9: the broker starts, serves what it had and has nothing of "big"."""
    from confluent_kafka.admin import AdminClient, NewTopic
    broker.kill()
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topics = admin.list_topics(timeout=30).topics
    assert KEEP in topics and "big" not in topics
    assert partition_dirs(broker.data_dir, "big") == [], "start-up removes what the interrupted operation left"
    assert [v for _, v in consume_all(broker.bootstrap, KEEP, 3, len(values))[0]] == values
    # The name is free again, with nothing of the old attempt in the way.
    admin.create_topics([NewTopic("big", num_partitions=4, replication_factor=1)])["big"].result(30)
    produce(broker.bootstrap, "big", [b"again"])
    assert "Traceback" not in broker.output()


def test_running_out_of_descriptors_halfway_rolls_the_creation_back():
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    broker = BrokerProcess()
    try:
        values = start_with_keep_topic(broker)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.list_topics(timeout=30)  # its connection is open before the limit drops
        pid = broker.proc.pid
        before = open_fds(pid)
        # About 100 more descriptors: far fewer than 2,000 partitions need.
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (before + 100, before + 100))
        with pytest.raises(KafkaException) as e:
            admin.create_topics([NewTopic("big", num_partitions=2000, replication_factor=1)],
                                operation_timeout=120, request_timeout=120)["big"].result(120)
        err = e.value.args[0]
        assert err.code() == KafkaError.KAFKA_STORAGE_ERROR, err
        assert "open-file limit" in err.str(), err.str()
        # Rolled back: not in the metadata, nothing on disk, every descriptor given back.
        assert "big" not in admin.list_topics(timeout=30).topics
        assert partition_dirs(broker.data_dir, "big") == []
        assert open_fds(pid) <= before + 2
        # The log dir stays online: the other topics are served, and smaller topics still fit.
        more = [f"w{i}".encode() for i in range(20)]
        produce(broker.bootstrap, KEEP, more)
        values += more
        admin.create_topics([NewTopic("small", num_partitions=5, replication_factor=1)])["small"].result(30)
        assert "is offline" not in broker.output()
        assert broker.proc.poll() is None
        restarted_cleanly(broker, values)
        assert "small" in admin.list_topics(timeout=30).topics
    finally:
        broker.cleanup()


def wait_for(condition, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.002)


@pytest.mark.parametrize("cut_short", ["creation", "deletion"])
def test_kill_during_a_large_creation_or_deletion_then_restart(cut_short):
    from confluent_kafka.admin import AdminClient, NewTopic

    broker = BrokerProcess()
    try:
        values = start_with_keep_topic(broker)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        created = admin.create_topics([NewTopic("big", num_partitions=2000, replication_factor=1)],
                                      operation_timeout=120, request_timeout=120)["big"]
        if cut_short == "creation":
            wait_for(lambda: len(partition_dirs(broker.data_dir, "big")) >= 100)
            made = len(partition_dirs(broker.data_dir, "big"))
            assert 100 <= made < 2000 and not created.done(), made  # killed halfway
        else:
            created.result(120)
            admin.delete_topics(["big"], operation_timeout=120, request_timeout=120)
            wait_for(lambda: any(n.endswith("-delete") for n in partition_dirs(broker.data_dir, "big")))
            left = partition_dirs(broker.data_dir, "big")
            assert any(n.endswith("-delete") for n in left), "killed while the deletion was under way"
        restarted_cleanly(broker, values)
    finally:
        broker.cleanup()


def test_start_up_with_too_few_descriptors_says_so_and_changes_nothing():
    import subprocess
    import sys

    from confluent_kafka.admin import AdminClient, NewTopic

    broker = BrokerProcess()
    try:
        values = start_with_keep_topic(broker)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("wide", num_partitions=400, replication_factor=1)],
                            operation_timeout=120)["wide"].result(120)
        assert broker.stop() == 0
        args = [sys.executable, "-m", "rivulet", "broker", "--log-level", "warning"]
        for k, v in broker.overrides.items():
            args += ["--override", f"{k}={v}"]
        limit = 300  # fewer descriptors than the partitions' logs need (the hard limit too)
        run = subprocess.run(args, capture_output=True, text=True, timeout=120,
                             preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)))
        assert run.returncode != 0
        said = run.stderr.strip().splitlines()
        assert len(said) == 1 and "cannot start" in said[0] and "out of file descriptors" in said[0], run.stderr
        assert f"the open-file limit is {limit}" in said[0] and "ulimit -n" in said[0]
        assert "offline" not in run.stderr + run.stdout and "Traceback" not in run.stderr
        # With the limit raised it starts and serves everything.
        broker.start()
        assert len(AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=30)
                   .topics["wide"].partitions) == 400
        assert [v for _, v in consume_all(broker.bootstrap, KEEP, 3, len(values))[0]] == values
    finally:
        broker.cleanup()


def test_a_created_topic_survives_kill9_right_after_the_answer():
    # A new log's files are written without fsync (its first flush syncs them), so what must hold
    # is that a topic CreateTopics answered survives kill -9, and that a partition.metadata lost
    # anyway (a power failure before the first flush) is written again when the partition opens.
    from confluent_kafka.admin import AdminClient, NewTopic

    from rivulet.storage.checkpoints import read_partition_metadata

    broker = BrokerProcess()
    try:
        values = start_with_keep_topic(broker)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("wide", num_partitions=300, replication_factor=1)],
                            operation_timeout=120, request_timeout=120)["wide"].result(120)
        broker.kill()
        topic_id = read_partition_metadata(os.path.join(broker.data_dir, "wide-4"))
        assert topic_id is not None
        os.unlink(os.path.join(broker.data_dir, "wide-5", "partition.metadata"))
        broker.start()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        parts = admin.list_topics(timeout=30).topics["wide"].partitions
        assert len(parts) == 300 and all(p.leader >= 0 and p.error is None for p in parts.values())
        assert read_partition_metadata(os.path.join(broker.data_dir, "wide-5")) == topic_id
        produce(broker.bootstrap, "wide", [b"after"])
        assert [v for _, v in consume_all(broker.bootstrap, "wide", 300, 1)[0]] == [b"after"]
        assert [v for _, v in consume_all(broker.bootstrap, KEEP, 3, len(values))[0]] == values
        assert "Traceback" not in broker.output()
    finally:
        broker.cleanup()
