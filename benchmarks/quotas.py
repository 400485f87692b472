"""A producer above its quota: the byte rate the broker accepts from it, per 10 s.

    python -m benchmarks.quotas --quota 1000000 --seconds 30

A confluent-kafka producer with its own client id produces as fast as it can to a broker
where that client id has a ``producer_byte_rate`` quota (set with AlterClientQuotas through
Rivulet's admin client). Accepted payload bytes are counted by the broker's append time
(the topic is made with ``message.timestamp.type=LogAppendTime`` and read back after the run);
the throttle times are librdkafka's ``throttle_cb``. docs/performance.md records the
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
    acked: list[tuple[float, int]] = field(default_factory=list)  # (broker's append time s, payload bytes)
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

    The topic stamps each batch with the broker's clock (LogAppendTime) and the accepted bytes
    are read back from the log afterwards: timed by the broker, not by when this process got
    round to an acknowledgement (a starved client sees them bunched), and the same for acks=0,
    which has none."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    from rivulet.admin import NewTopic
    run = Run(quota)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.create_topics([NewTopic(topic, 1, config={"message.timestamp.type": "LogAppendTime"})])[topic].result(30)
    finally:
        admin.close()

    def throttled(event) -> None:  # confluent_kafka.ThrottleEvent
        run.throttles.append(int(event.throttle_time * 1000))

    p = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5, "acks": acks,
                  "batch.size": batch_size, "throttle_cb": throttled, "queue.buffering.max.kbytes": 4096})
    payload = b"x" * value_size
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        try:
            p.produce(topic, payload, partition=0)
        except BufferError:
            p.poll(0.01)
            continue
        p.poll(0)
    p.purge(in_queue=True)  # what was not sent when time ran out does not count
    p.flush(30)
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-quota-bench",
                       "enable.auto.commit": False})
    try:
        end = reader.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        reader.assign([TopicPartition(topic, 0, 0)])
        seen = 0
        while seen < end:
            for m in reader.consume(10000, timeout=5):
                if m.error() is None:
                    run.acked.append((m.timestamp()[1] / 1000, len(m.value())))
                    seen = m.offset() + 1
    finally:
        reader.close()
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
