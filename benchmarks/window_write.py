"""The pipeline's output path alone: from the driver's write of a micro-batch's window rows to
a read_committed reader holding them.

    python -m benchmarks.window_write --writes 40 --rows 5

Each write is what the pipeline's foreachBatch does with a batch that closed windows through
Rivulet's sink (``write_from_driver``: one transaction of the driver's kept producer with the
batch's marker), or the same rows at least once (``transactional=false``), on a broker of its
own. A librdkafka consumer (read_committed, as the latency benchmark's reader) waits on the
output topic; each write's "readable" is the moment it holds the write's last row. Kept
producers are warmed by a first write that is left out. ``--steps`` times a kept producer's
transaction step by step (the marker's AddOffsetsToTxn and TxnOffsetCommit, the rows, EndTxn),
in the order ``write_partition`` takes them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import uuid
from collections.abc import Callable

from confluent_kafka import OFFSET_END, Consumer, TopicPartition

from benchmarks.spark_source import load_average
from rivulet.testing import BrokerProcess


class Reader(threading.Thread):
    """The moment each row (by its value) was first returned to a read_committed consumer."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, fetch_wait_ms: int) -> None:
        super().__init__(name="reader", daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ww-{uuid.uuid4().hex[:6]}",
                                  "isolation.level": "read_committed", "enable.auto.commit": False,
                                  "fetch.wait.max.ms": fetch_wait_ms, "fetch.error.backoff.ms": 5})
        self.consumer.assign([TopicPartition(topic, p, OFFSET_END) for p in range(partitions)])
        self.seen: dict[bytes, float] = {}
        self.cond = threading.Condition()
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            m = self.consumer.poll(0.05)
            if m is None or m.error():
                continue
            with self.cond:
                self.seen.setdefault(m.value(), time.perf_counter())
                self.cond.notify_all()
        self.consumer.close()

    def wait_for(self, values: list[bytes], timeout: float = 30) -> float:
        with self.cond:
            if not self.cond.wait_for(lambda: all(v in self.seen for v in values), timeout):
                raise TimeoutError(f"rows not readable within {timeout} s")
            return max(self.seen[v] for v in values)


def rows_table(tag: str, n: int):
    import pyarrow as pa
    values = [json.dumps({"window": tag, "category": f"c{i}", "orders": 400 + i}) for i in range(n)]
    return pa.table({"key": [f"c{i}" for i in range(n)], "value": values}), [v.encode() for v in values]


def timed(label: str, reader: Reader, writes: int, rows: int, write: Callable[[object, int], None]) -> None:
    ends, visible = [], []
    for i in range(writes + 1):
        table, values = rows_table(f"{label}-{i}", rows)
        t0 = time.perf_counter()
        write(table, i)
        t1 = time.perf_counter()
        seen = reader.wait_for(values)
        if i:  # the first warms the kept producer up
            ends.append((t1 - t0) * 1000)
            visible.append((seen - t0) * 1000)
        time.sleep(0.05)
    print(f"| {label} | {writes} | {statistics.median(ends):.1f} / {max(ends):.1f} "
          f"| {statistics.median(visible):.1f} / {max(visible):.1f} | {load_average():.1f} |", flush=True)


def steps(bootstrap: str, topic: str, writes: int, rows: int) -> None:
    """A kept producer's transaction, step by step, as write_partition takes them."""
    from rivulet.spark.sink import SinkOptions, _add_marker, _new_producer, _produce_rows, _producer_conf
    opts = SinkOptions.parse({"kafka.bootstrap.servers": bootstrap, "topic": topic})
    tid = f"rivulet-spark-steps-{uuid.uuid4().hex[:6]}"
    p = _new_producer(_producer_conf(opts, tid))
    p.init_transactions(30)
    took: dict[str, list[float]] = {"begin + marker (AddOffsetsToTxn, TxnOffsetCommit)": [],
                                    "rows queued": [], "commit (AddPartitionsToTxn, Produce, EndTxn)": []}
    names = list(took)
    for i in range(writes + 1):
        table, _ = rows_table(f"steps-{i}", rows)
        t = [time.perf_counter()]
        p.begin_transaction()
        _add_marker(p, topic, tid, i, 30)
        t.append(time.perf_counter())
        _produce_rows(p, iter(table.to_batches()), topic)
        t.append(time.perf_counter())
        p.commit_transaction(30)
        t.append(time.perf_counter())
        if i:
            for k, name in enumerate(names):
                took[name].append((t[k + 1] - t[k]) * 1000)
        time.sleep(0.05)
    p.close(5)
    for name in names:
        print(f"  {name}: median {statistics.median(took[name]):.1f} ms, max {max(took[name]):.1f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--writes", type=int, default=40)
    ap.add_argument("--rows", type=int, default=5, help="window rows per write (the pipeline: one per category)")
    ap.add_argument("--steps", action="store_true", help="also time a kept producer's transaction step by step")
    args = ap.parse_args()

    from confluent_kafka.admin import AdminClient, NewTopic

    from rivulet.spark.sink import SinkOptions, write_from_driver
    broker = BrokerProcess({}).start()
    try:
        topic = "windows"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
        print("| write | writes | write returns, median / max ms | readable after the write's start, "
              "median / max ms | load |\n|---|---:|---|---|---:|")
        for fetch_wait in (5, 500):
            reader = Reader(broker.bootstrap, topic, 2, fetch_wait)
            reader.start()
            time.sleep(2)  # assigned and fetching
            query = uuid.uuid4().hex
            for transactional in ("true", "false"):
                opts = SinkOptions.parse({"kafka.bootstrap.servers": broker.bootstrap, "topic": topic,
                                          "transactional": transactional})
                label = (f"{'one transaction with its marker' if transactional == 'true' else 'at least once'}, "
                         f"reader's fetch.wait.max.ms {fetch_wait}")
                timed(label, reader, args.writes, args.rows,
                      lambda table, i, opts=opts, query=query: write_from_driver(opts, table, query, i))
            reader.halt.set()
            reader.join()
        if args.steps:
            steps(broker.bootstrap, topic, args.writes, args.rows)
    finally:
        broker.cleanup()


if __name__ == "__main__":
    main()
