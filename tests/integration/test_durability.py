"""kill -9 during steady production: every acknowledged record survives, in order, once."""

from __future__ import annotations

import glob
import os
import threading
import time

import pytest

from rivulet.testing import BrokerProcess

pytestmark = pytest.mark.integration


def consume_all(bootstrap: str, topic: str, partitions: int, expect: int, timeout: float = 60) -> dict[int, list]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "durability-check", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: dict[int, list] = {p: [] for p in range(partitions)}
    eof: set[int] = set()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (len(eof) < partitions or sum(map(len, out.values())) < expect):
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            if m.error().code() == -191:  # _PARTITION_EOF
                eof.add(m.partition())
                continue
            raise AssertionError(m.error())
        out[m.partition()].append((m.offset(), m.value()))
    c.close()
    return out


@pytest.mark.parametrize("tear_tail", [False, True], ids=["kill9", "kill9-torn-tail"])
def test_acked_records_survive_kill9(tear_tail):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    broker = BrokerProcess({"log.flush.interval.messages": "1"}).start()
    try:
        topic = "durable"
        parts = 3
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, num_partitions=parts, replication_factor=1)])[topic].result(30)
        acked: dict[int, list[bytes]] = {p: [] for p in range(parts)}
        lock = threading.Lock()

        def on_delivery(err, msg):
            if err is None:
                with lock:
                    acked[msg.partition()].append(msg.value())

        p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 2,
                      "message.timeout.ms": 3000, "retries": 0, "enable.idempotence": False})
        i = 0
        killed = False
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                p.produce(topic, value=f"rec-{i:08d}".encode(), partition=i % parts, on_delivery=on_delivery)
            except BufferError:
                p.poll(0.01)
                continue
            i += 1
            p.poll(0)
            with lock:
                n_acked = sum(map(len, acked.values()))
            if not killed and n_acked >= 3000:
                broker.kill()  # kill -9 while records are still in flight
                killed = True
                break
        assert killed, "production never reached the kill point"
        p.flush(10)  # whatever was in flight now fails: the broker is gone
        with lock:
            snapshot = {k: list(v) for k, v in acked.items()}
        assert sum(map(len, snapshot.values())) >= 3000

        if tear_tail:
            # A torn write: a partial batch header at the end of each active segment.
            for d in glob.glob(os.path.join(broker.data_dir, f"{topic}-*")):
                segs = sorted(glob.glob(os.path.join(d, "*.log")))
                with open(segs[-1], "ab") as fh:
                    fh.write(b"\x00\x00\x00\x00\x00\x00\x00\x07\x00\x00\x01\x00garbage")

        broker.start()
        got = consume_all(broker.bootstrap, topic, parts, sum(map(len, snapshot.values())))
        for part in range(parts):
            values = [v for _, v in got[part]]
            offsets = [o for o, _ in got[part]]
            assert offsets == list(range(len(offsets))), "offsets must be dense"
            assert len(values) == len(set(values)), "no duplicates"
            # Every acknowledged record is there, in production order.
            assert values[: len(snapshot[part])] == snapshot[part]
            # Anything beyond was written but unacknowledged, still in order.
            assert values == sorted(values)
    finally:
        broker.cleanup()
