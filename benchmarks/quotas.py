"""A producer above its quota: the byte rate the broker accepts from it, per 10 s.

    python -m benchmarks.quotas --quota 1000000 --seconds 30

A confluent-kafka producer with its own client id produces as fast as it can to a broker
where that client id has a ``producer_byte_rate`` quota (set with AlterClientQuotas through
Rivulet's admin client). Acknowledged payload bytes are counted by when their delivery report
arrived (with ``--acks 0``, by the growth of the log's end offset); the throttle times are
librdkafka's ``throttle_cb``. docs/performance.md records the
results.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field

from rivulet.admin import AdminClient, ClientQuotaAlteration, ClientQuotaAlterationOp, ClientQuotaEntity
from rivulet.testing import BrokerProcess

CLIENT_ID = "throttled-producer"


@dataclass
class Run:
    quota: float
    acked: list[tuple[float, int]] = field(default_factory=list)  # (monotonic time, payload bytes)
    throttles: list[int] = field(default_factory=list)

    def rate(self, start: float, end: float) -> float:
        return sum(n for t, n in self.acked if start <= t < end) / (end - start)

    def windows(self, seconds: float = 10.0) -> list[float]:
        """Accepted bytes per second over consecutive windows from the first acknowledgement."""
        if not self.acked:
            return []
        t0, last = self.acked[0][0], self.acked[-1][0]
        out = []
        start = t0
        while start + seconds <= last + 1e-9:
            out.append(self.rate(start, start + seconds))
            start += seconds
        return out

    def max_sliding(self, seconds: float = 10.0, step: float = 0.25) -> float:
        if not self.acked:
            return 0.0
        t0, last = self.acked[0][0], self.acked[-1][0]
        best, start = 0.0, t0
        while start + seconds <= last + 1e-9:
            best = max(best, self.rate(start, start + seconds))
            start += step
        return best


def set_quota(bootstrap: str, client_id: str, quota: float) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        entity = ClientQuotaEntity({ClientQuotaEntity.CLIENT_ID: client_id})
        for f in admin.alter_client_quotas(
                [ClientQuotaAlteration(entity, [ClientQuotaAlterationOp("producer_byte_rate", quota)])]).values():
            f.result(30)
    finally:
        admin.close()


def produce_flat_out(bootstrap: str, topic: str, seconds: float, quota: float, value_size: int = 1000,
                     client_id: str = CLIENT_ID, acks: int = 1, batch_size: int = 65536) -> Run:
    """Produce as fast as librdkafka lets us for ``seconds``; what the broker accepted, when.
    With acks=0 there is no acknowledgement: the log's end offset, read twice a second, is."""
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
    run = Run(quota)

    def throttled(event) -> None:  # confluent_kafka.ThrottleEvent
        run.throttles.append(int(event.throttle_time * 1000))

    p = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5, "acks": acks,
                  "batch.size": batch_size, "throttle_cb": throttled, "queue.buffering.max.kbytes": 4096})
    watcher = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-quota-bench"}) if acks == 0 else None
    payload = b"x" * value_size
    last_end = [0]

    def delivered(err, msg) -> None:
        if err is None:
            run.acked.append((time.monotonic(), len(msg.value())))

    def watch() -> None:
        assert watcher is not None
        try:
            end = watcher.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        except KafkaException:  # the topic is created by the first produce
            return
        if end > last_end[0]:
            run.acked.append((time.monotonic(), (end - last_end[0]) * value_size))
            last_end[0] = end

    stop = time.monotonic() + seconds
    next_watch = time.monotonic()
    while time.monotonic() < stop:
        if watcher is not None and time.monotonic() >= next_watch:
            watch()
            next_watch += 0.5
        try:
            p.produce(topic, payload, partition=0, on_delivery=None if acks == 0 else delivered)
        except BufferError:
            p.poll(0.01)
            continue
        p.poll(0)
    p.purge(in_queue=True)  # what was not sent when time ran out does not count
    p.flush(30)
    if watcher is not None:
        watcher.close()
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quota", type=float, default=1_000_000, help="producer_byte_rate, bytes/s")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--acks", type=int, default=1, choices=[0, 1, -1])
    args = ap.parse_args()
    with BrokerProcess() as broker:
        set_quota(broker.bootstrap, CLIENT_ID, args.quota)
        run = produce_flat_out(broker.bootstrap, "quota-bench", args.seconds, args.quota, acks=args.acks)
    windows = run.windows()
    print(f"quota {args.quota:,.0f} B/s; {len(run.throttles)} throttled responses "
          f"(max throttle_time_ms {max(run.throttles, default=0)})")
    for i, r in enumerate(windows):
        print(f"  {i * 10:>3}-{i * 10 + 10:<3} s: {r:,.0f} B/s accepted ({r / args.quota:.3f} of the quota)")
    worst = run.max_sliding()
    print(f"  worst 10 s window: {worst:,.0f} B/s ({worst / args.quota:.3f} of the quota)")


if __name__ == "__main__":
    main()
