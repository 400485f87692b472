"""confluent-kafka as the reference client in tests: produce records, read them back."""

from __future__ import annotations

import time
import uuid


def ck_produce(bootstrap: str, topic: str, records: list[dict], partition: int | None = 0, **conf) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    errors = []
    for r in records:
        kw = {} if partition is None else {"partition": partition}
        p.produce(topic, value=r["value"], key=r["key"], headers=r["headers"] or None, timestamp=r["timestamp"],
                  on_delivery=lambda err, msg: errors.append(err) if err else None, **kw)
        p.poll(0)
    assert p.flush(30) == 0
    assert errors == []


def ck_consume(bootstrap: str, topic: str, count: int, partition: int = 0, timeout: float = 30) -> list[dict]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-" + topic, "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100})
    c.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        assert m.error() is None, m.error()
        out.append({"key": m.key(), "value": m.value(), "headers": list(m.headers() or []),
                    "timestamp": m.timestamp()[1], "offset": m.offset()})
    c.close()
    return out


def ck_consume_values(bootstrap: str, topic: str, partitions: int, want: int, conf: dict[str, object] | None = None,
                      *, skip_errors: bool = False) -> dict[int, list[bytes]]:
    """The values of partitions 0 to ``partitions - 1`` of ``topic`` by partition, read from the
    beginning by an assigned consumer (``conf`` added to its settings) until ``want`` arrived or
    30 polls in a row brought nothing. A message carrying an error fails the test, unless
    ``skip_errors``: it is then passed over, and the caller's comparison of what arrived finds
    any record it lost."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, "enable.auto.commit": False,
                  **(conf or {})})
    c.assign([TopicPartition(topic, part, OFFSET_BEGINNING) for part in range(partitions)])
    got: dict[int, list[bytes]] = {part: [] for part in range(partitions)}
    n, idle = 0, 0
    while n < want and idle < 30:
        msgs = c.consume(1000, 1.0)
        idle = 0 if msgs else idle + 1
        for m in msgs:
            if m.error() is not None:
                assert skip_errors, m.error()
                continue
            got[m.partition()].append(m.value())
            n += 1
    c.close()
    return got
