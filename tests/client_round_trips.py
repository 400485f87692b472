"""One produce / consume-in-a-group / commit round trip per third-party client, shared by the
TLS and SASL tests: each takes the client's own connection settings."""

from __future__ import annotations

import asyncio
import subprocess
from typing import Any


def kafka_python_round_trip(bootstrap: str, conf: dict[str, Any], topic: str, group: str, n: int = 10) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    p = KafkaProducer(bootstrap_servers=bootstrap, **conf)
    for i in range(n):
        p.send(topic, f"v{i}".encode(), partition=0)
    p.flush(30)
    p.close()
    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                      enable_auto_commit=False, consumer_timeout_ms=20000, **conf)
    got = []
    for m in c:
        got.append(m.value)
        if len(got) == n:
            break
    c.commit()
    assert c.committed(TopicPartition(topic, 0)) == n
    c.close()
    assert got == [f"v{i}".encode() for i in range(n)]


def aiokafka_round_trip(bootstrap: str, conf: dict[str, Any], topic: str, group: str, n: int = 10) -> None:
    """``conf``: keyword arguments of both AIOKafkaProducer and AIOKafkaConsumer."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    async def run() -> tuple[list[bytes], int]:
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, **conf)
        await p.start()
        try:
            for i in range(n):
                await p.send_and_wait(topic, f"v{i}".encode(), partition=0)
        finally:
            await p.stop()
        c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, **conf)
        await c.start()
        try:
            got = []
            async with asyncio.timeout(60):
                async for m in c:
                    got.append(m.value)
                    if len(got) == n:
                        break
            await c.commit()
            return got, await c.committed(TopicPartition(topic, 0))
        finally:
            await c.stop()

    got, committed = asyncio.run(run())
    assert got == [f"v{i}".encode() for i in range(n)]
    assert committed == n


def kcat_produce(kcat: str, bootstrap: str, opts: list[str], topic: str, n: int) -> subprocess.CompletedProcess:
    return subprocess.run([kcat, "-b", bootstrap, *opts, "-P", "-t", topic, "-p", "0"],
                          input=b"".join(f"m{i}\n".encode() for i in range(n)), capture_output=True, timeout=60)


def kcat_consume_in_group(kcat: str, bootstrap: str, opts: list[str], topic: str, group: str, n: int) -> None:
    """Read ``n`` records as a member of ``group``, committing as it goes."""
    r = subprocess.run([kcat, "-b", bootstrap, *opts, "-G", group, "-X", "auto.offset.reset=earliest",
                        "-X", "enable.auto.commit=true", "-X", "auto.commit.interval.ms=100",
                        "-c", str(n), "-f", "%s\n", topic], capture_output=True, timeout=90)
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().split() == [f"m{i}" for i in range(n)]


def java_round_trip(bootstrap: str, props: dict[str, Any], topic: str, group: str, n: int,
                    committed_via: dict[str, Any]) -> None:
    """Kafka's Java client (its perf tools): ProducerPerformance writes ``n`` records and
    ConsumerPerformance reads them in ``group``, committing on close; confluent-kafka with
    ``committed_via`` (its connection settings) then finds the commit."""
    import java_tools as jt
    reason = jt.java_available()
    assert reason is None, f"Kafka's Java tools are needed: {reason}"
    produced = jt.producer_perf(bootstrap, topic, num_records=n, record_size=100,
                                props={**props, "max.block.ms": 20_000, "delivery.timeout.ms": 30_000})
    assert produced.records == n
    consumed = jt.consumer_perf(bootstrap, topic, num_records=n, group=group,
                                props={**props, "default.api.timeout.ms": 20_000})
    assert consumed.records == n
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({**committed_via, "group.id": group})
    assert c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == n
    c.close()
