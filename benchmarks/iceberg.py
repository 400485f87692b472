"""Topics as Iceberg tables: what translation costs the produce path, and how far the table
lags. The same produce load (confluent-kafka, records of 100 B, acks=all) runs against a fresh
broker with the topic's iceberg.mode none and then key_value; for the latter, the time from the
last acknowledged record until the table holds every record.

    python -m benchmarks.iceberg                       # starts its own brokers
    python -m benchmarks.iceberg --records 1000000 --lag-ms 5000

docs/iceberg.md records the results.
"""

from __future__ import annotations

import argparse
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from rivulet.iceberg.catalog import CatalogSettings, open_catalog
from rivulet.iceberg.offsets import next_offsets
from rivulet.testing import BrokerProcess

VALUE = b"x" * 100


def produce(bootstrap: str, topic: str, records: int) -> float:
    """Records/s of one producer, from the first produce to the last acknowledgement."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    t0 = time.perf_counter()
    for i in range(records):
        while True:
            try:
                p.produce(topic, VALUE, key=str(i % 1000).encode())
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(120) == 0
    return records / (time.perf_counter() - t0)


def table_records(data_dir: str, topic: str) -> int:
    try:
        table = open_catalog(CatalogSettings.resolve("", "", data_dir)).load_table(("rivulet", topic))
    except Exception:  # not made yet
        return 0
    snap = table.current_snapshot()
    return sum(next_offsets(snap.summary.additional_properties if snap and snap.summary else {}).values())


def run(mode: str, records: int, partitions: int, lag_ms: int) -> tuple[float, float | None]:
    with BrokerProcess({"num.partitions": str(partitions)}) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("load", partitions, 1, config={
            "iceberg.mode": mode, "iceberg.target.lag.ms": str(lag_ms)})])["load"].result(30)
        rate = produce(b.bootstrap, "load", records)
        if mode == "none":
            return rate, None
        t0 = time.perf_counter()
        while table_records(b.data_dir, "load") < records:
            time.sleep(0.1)
        return rate, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--lag-ms", type=int, default=5000)
    args = ap.parse_args()
    off, _ = run("none", args.records, args.partitions, args.lag_ms)
    on, catch_up = run("key_value", args.records, args.partitions, args.lag_ms)
    print("| iceberg.mode | produce records/s | table complete after the last ack |")
    print("| --- | --- | --- |")
    print(f"| none | {off:,.0f} | - |")
    print(f"| key_value (iceberg.target.lag.ms={args.lag_ms}) | {on:,.0f} ({on / off - 1:+.0%}) | {catch_up:.1f} s |")


if __name__ == "__main__":
    main()
