"""AlterReplicaLogDirs on a real broker with two log dirs: a replica moves while it is produced
to, no acknowledged record is lost, and the move survives a restart."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid

import pytest

from rivulet.client.connection import BrokerConnection
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages import alter_replica_log_dirs_request as arlq
from rivulet.protocol.messages import describe_log_dirs_request as dlq

pytestmark = pytest.mark.integration


async def _send(broker, request, version: int):
    host, port = broker.bootstrap.split(":")
    conn = await BrokerConnection(host, int(port)).connect()
    try:
        return await conn.send(request, version=version)
    finally:
        await conn.close()


def _where(broker, topic: str) -> dict[str, tuple[bool, int]]:
    """{log dir: (is the future replica, offset lag)} for ``topic``-0."""
    resp = asyncio.run(_send(broker, dlq.DescribeLogDirsRequest(topics=[
        dlq.DescribableLogDirTopic(topic=topic, partitions=[0])]), 4))
    return {r.log_dir: (p.is_future_key, p.offset_lag) for r in resp.results for t in r.topics for p in t.partitions}


def _alter(broker, path: str, topic: str, partition: int = 0) -> int:
    resp = asyncio.run(_send(broker, arlq.AlterReplicaLogDirsRequest(dirs=[arlq.AlterReplicaLogDir(
        path=path, topics=[arlq.AlterReplicaLogDirTopic(name=topic, partitions=[partition])])]), 2))
    return resp.results[0].partitions[0].error_code


def test_a_replica_moves_between_log_dirs_under_load(broker_factory, tmp_path):
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    dirs = [str(tmp_path / "disk-a"), str(tmp_path / "disk-b")]
    broker = broker_factory({"log.dirs": ",".join(dirs)})
    topic = f"move-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"internal.segment.bytes": "262144"})])[topic].result(30)
    acked: list[bytes] = []
    stop = threading.Event()

    def produce() -> None:
        p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5})
        i = 0
        while not stop.is_set():
            v = b"%08d" % i + b"x" * 200
            p.produce(topic, v, on_delivery=lambda err, m: acked.append(m.value()) if err is None else None)
            p.poll(0)
            i += 1
            if i % 500 == 0:
                time.sleep(0.01)
        p.flush(30)

    writer = threading.Thread(target=produce)
    writer.start()
    try:
        deadline = time.monotonic() + 60
        while len(acked) < 20000 and time.monotonic() < deadline:
            time.sleep(0.1)
        source = next(iter(_where(broker, topic)))
        target = next(d for d in dirs if d != source)
        assert _alter(broker, target, topic) == 0
        assert _alter(broker, str(tmp_path / "nowhere"), topic) == ErrorCode.LOG_DIR_NOT_FOUND
        assert _alter(broker, target, topic, partition=7) == ErrorCode.REPLICA_NOT_AVAILABLE
        deadline = time.monotonic() + 120
        while _where(broker, topic) != {target: (False, 0)} and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _where(broker, topic) == {target: (False, 0)}
        time.sleep(1)  # produced to after the move too
    finally:
        stop.set()
        writer.join(60)
    assert not os.path.exists(os.path.join(source, f"{topic}-0"))

    def read_all() -> list[bytes]:
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": uuid.uuid4().hex,
                      "auto.offset.reset": "earliest", "enable.partition.eof": True})
        c.subscribe([topic])
        out: list[bytes] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            m = c.poll(1)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    break
                continue
            out.append(m.value())
        c.close()
        return out

    got = read_all()
    assert got == sorted(got) and len(set(got)) == len(got)
    assert set(acked) <= set(got) and len(acked) > 20000
    broker.restart()
    assert read_all() == got
