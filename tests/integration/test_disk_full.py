"""A real full disk (a small tmpfs): acknowledged records survive filling it, freeing it and kill -9."""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time

import pytest

from rivulet.testing import BrokerProcess
from tests.integration.test_durability import consume_all

pytestmark = pytest.mark.integration


@pytest.fixture
def small_fs():
    mnt = tempfile.mkdtemp(prefix="rivulet-tmpfs-")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", mnt], capture_output=True, text=True)
    if r.returncode != 0:
        os.rmdir(mnt)
        pytest.skip(f"cannot mount a small tmpfs here (needs root and mount rights): {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", mnt], check=False)
        os.rmdir(mnt)


def files(root: str) -> dict[str, int]:
    """Every file under ``root`` with its size (the lock file, rewritten with the PID, aside)."""
    out = {}
    for d, _dirs, names in os.walk(root):
        for n in names:
            if n != ".lock":
                out[os.path.relpath(os.path.join(d, n), root)] = os.path.getsize(os.path.join(d, n))
    return out


def _produce(bootstrap: str, topic: str, start: int, seconds: float, acked: list[bytes],
             errors: list[str]) -> int:
    from confluent_kafka import Producer
    lock = threading.Lock()

    def on_delivery(err, msg):
        with lock:
            if err is None:
                acked.append(msg.value())
            else:
                errors.append(err.name())

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "message.timeout.ms": 5000})
    i = start
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            p.produce(topic, value=f"rec-{i:08d}".encode() + b"x" * 1000, partition=0, on_delivery=on_delivery)
            i += 1
        except BufferError:
            pass
        p.poll(0.001)
    p.flush(15)
    return i


def test_full_disk_loses_no_acknowledged_record(small_fs, tmp_path):
    from confluent_kafka.admin import AdminClient, NewTopic

    ballast = os.path.join(small_fs, "ballast")
    with open(ballast, "wb") as f:
        f.write(b"\0" * (5 << 20))
    data = os.path.join(small_fs, "data")
    os.makedirs(data)
    broker = BrokerProcess(data_dir=data)
    broker.log_path = tmp_path / "broker-stdout.log"  # off the full disk
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("full", num_partitions=1, replication_factor=1)])["full"].result(30)
        acked: list[bytes] = []
        errors: list[str] = []
        # About 3 MiB free: far more than that is offered, so the disk fills.
        n = _produce(broker.bootstrap, "full", 0, 8, acked, errors)
        assert acked, "nothing was acknowledged before the disk filled"
        assert "KAFKA_STORAGE_ERROR" in errors or "_MSG_TIMED_OUT" in errors, errors[:5]
        assert broker.proc is not None and broker.proc.poll() is None, "the broker must stay up"
        assert "is offline" in broker.output(), "the broker says which log dir failed"
        part = admin.list_topics("full", timeout=10).topics["full"].partitions[0]
        assert part.leader == -1 and part.error is not None and part.error.name() == "LEADER_NOT_AVAILABLE"
        os.unlink(ballast)  # space returns
        n = _produce(broker.bootstrap, "full", n, 2, acked, errors)
        broker.kill()
        broker.start()
        _produce(broker.bootstrap, "full", n, 1, acked, errors)
        got = consume_all(broker.bootstrap, "full", 1, len(acked))[0]
        values = [v for _, v in got]
        assert [o for o, _ in got] == list(range(len(got))), "offsets must be dense"
        assert len(values) == len(set(values)), "every record once"
        assert values == sorted(values), "in production order"
        missing = set(acked) - set(values)
        assert not missing, f"{len(missing)} acknowledged records lost"
        rc = broker.stop()
        assert rc == 0, broker.output()[-3000:]
    finally:
        broker.cleanup()


def test_stop_and_start_with_a_full_disk(small_fs, tmp_path):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    data = os.path.join(small_fs, "data")
    os.makedirs(data)
    broker = BrokerProcess(data_dir=data)
    broker.log_path = tmp_path / "broker-stdout.log"
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("t", num_partitions=2, replication_factor=1)])["t"].result(30)
        p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
        acked: list[bytes] = []
        for i in range(1000):
            p.produce("t", value=f"{i:06d}".encode() * 50, partition=0,
                      on_delivery=lambda err, msg: err is None and acked.append(msg.value()))
        assert p.flush(15) == 0 and len(acked) == 1000
        ballast = os.path.join(small_fs, "ballast")
        fd = os.open(ballast, os.O_WRONLY | os.O_CREAT, 0o644)
        for chunk in (65536, 4096, 1):  # to the last byte: not even a small checkpoint fits
            try:
                while True:
                    os.write(fd, b"\0" * chunk)
            except OSError:
                pass
        os.close(fd)
        assert broker.stop() == 0, broker.output()[-3000:]
        assert "Traceback" not in broker.output()
        assert "was not shut down cleanly" in broker.output(), "the stop says the dir is left for recovery"
        on_disk = files(data)
        # Kafka would take the dir offline (an IOException while loading) and, with no other dir,
        # stop. Rivulet recovers it read-only instead: nothing written, reads served, writes
        # refused with KAFKA_STORAGE_ERROR, and one line saying what is wrong.
        broker.start()
        said = [line for line in broker.output().splitlines() if "the disk is full" in line]
        assert len(said) == 1 and "read-only" in said[0] and "Free space and restart" in said[0], said
        got = consume_all(broker.bootstrap, "t", 2, len(acked))[0]
        assert [v for _, v in got] == acked, "every acknowledged record is readable"
        refused: list[str] = []
        p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "retries": 0,
                      "enable.idempotence": False, "message.timeout.ms": 10000})
        p.produce("t", value=b"no room", partition=0, on_delivery=lambda err, msg: refused.append(err and err.name()))
        p.flush(15)
        assert refused == ["KAFKA_STORAGE_ERROR"], refused
        # An idempotent producer cannot even get a producer id (its block is recorded on disk):
        # InitProducerId answers COORDINATOR_LOAD_IN_PROGRESS, as Kafka does without a block.
        p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "message.timeout.ms": 3000})
        p.produce("t", value=b"no id", partition=0, on_delivery=lambda err, msg: refused.append(err and err.name()))
        p.flush(15)
        assert refused[1] is not None, refused
        assert broker.stop() == 0, broker.output()[-3000:]
        assert "Traceback" not in broker.output()
        assert files(data) == on_disk, "a read-only recovery changes nothing on disk"
        # Space returns: the operator restarts, the dir is recovered fully and takes writes again.
        os.unlink(ballast)
        broker.start()
        got = consume_all(broker.bootstrap, "t", 2, len(acked))[0]
        assert [v for _, v in got] == acked
        p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
        p.produce("t", value=b"room again", partition=0, on_delivery=lambda err, msg: err is None and acked.append(msg.value()))
        assert p.flush(15) == 0 and acked[-1] == b"room again"
        assert [v for _, v in consume_all(broker.bootstrap, "t", 2, len(acked))[0]] == acked
    finally:
        broker.cleanup()
