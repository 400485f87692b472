"""Topics as Iceberg tables: what translation costs (issue 31, "Costs"). Four measurements:

* ``sidebyside``: the same produce load and then the same consume load (librdkafka's
  ``rdkafka_performance``, records of 100 B, 4 partitions, acks=1, linger.ms=10,
  batch.size=1000000) against a fresh broker whose topic has ``iceberg.mode=none``, then
  ``key_value``, alternating for ``--rounds`` rounds; records/s, MB/s, the generator's and the
  broker's CPU (and its event loop's thread's), and the ratio on/off. A short target lag (``--side-lag-ms``, 2 s) makes the
  translation run while the load does; 10,000 untimed records first wait for the table, so
  the one-off start of translation (imports, the table's creation) is not in the figures.
* ``lag``: ``rdkafka_performance -r`` paces 100 B records at ``--rate`` (50,000/s) for
  ``--seconds`` into a ``key_value`` topic, once per ``--lag-ms`` value; every second the
  table's committed next offsets (from the catalog) against the partitions' high watermarks:
  the lag in records and in seconds (since the newest record the table holds was appended),
  max and p95, and the data files and commits the run made (so the files a day at that rate).
* ``paced``: a load that does not saturate: ``rdkafka_performance -r`` paces ``--paced-rate``
  (300,000) records/s of 100 B for ``--paced-seconds`` (20) against a fresh broker with
  ``iceberg.mode=none``, then ``key_value`` (target lag ``--side-lag-ms``), alternating for
  ``--rounds``; the rate achieved and the broker's CPU (and its event loop's thread's).
* ``translate``: ``TopicTable.commit`` of ``--commit-records`` records of random 100 B values
  (key_value) into a fresh SQLite catalog, no broker, one thread: records/s on one core (run it under
  ``taskset -c 0``: pyarrow's own thread pools would otherwise use the other core too).

    python -m benchmarks.rdkafka_perf build           # once: rdkafka_performance into the cache
    python -m benchmarks.iceberg                      # all three
    python -m benchmarks.iceberg sidebyside --records 10000000 --rounds 2
    python -m benchmarks.iceberg paced --paced-rate 300000 --paced-seconds 20 --rounds 2
    python -m benchmarks.iceberg lag --lag-ms 10000 60000 --seconds 90
    taskset -c 0 python -m benchmarks.iceberg translate

docs/performance.md records the results.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from pyiceberg.catalog import Catalog  # noqa: E402

from benchmarks import rdkafka_perf  # noqa: E402
from benchmarks.compare import stat_cpu_seconds, wait_metadata, with_cpu  # noqa: E402
from benchmarks.produce_consume import wait_for_leaders  # noqa: E402
from rivulet.iceberg.catalog import CatalogSettings, open_catalog  # noqa: E402
from rivulet.iceberg.offsets import PartitionSlice  # noqa: E402
from rivulet.iceberg.table import TopicTable, read_state, table_identifier  # noqa: E402
from rivulet.protocol import records as rec  # noqa: E402
from rivulet.storage.config import parse_partition_spec  # noqa: E402
from rivulet.testing import BrokerProcess  # noqa: E402

PARTITIONS = 4
SIZE = 100
TOPIC = "load"
TIMEOUT = 1800.0
WARMUP = 10_000


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _broker() -> BrokerProcess:
    b = BrokerProcess({"num.partitions": str(PARTITIONS)})
    b.start()
    wait_metadata(b.bootstrap)
    return b


def _create(bootstrap: str, mode: str, lag_ms: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config={
        "iceberg.mode": mode, "iceberg.target.lag.ms": str(lag_ms)})])[TOPIC].result(30)
    wait_for_leaders(bootstrap, [TOPIC])


def _catalog(data_dir: str) -> Catalog:
    return open_catalog(CatalogSettings.resolve("", "", data_dir))


def table_offsets(catalog: Catalog) -> int:
    """Records the table holds: the sum of its committed next offsets (0 before it exists)."""
    state = read_state(catalog, TOPIC)
    return sum(state.next_offsets.values()) if state else 0


# ---------------------------------------------------------------------------- side by side


@dataclass
class Load:
    rps: float
    mbps: float
    gen_pct: float  # the load generator's CPU, % of one core
    broker_pct: float
    loop_pct: float  # of which the broker's main thread (the event loop's)


def _main_thread_seconds(pid: int) -> float:
    return sum(stat_cpu_seconds(Path(f"/proc/{pid}/task/{pid}/stat").read_text(), os.sysconf("SC_CLK_TCK")))


def _load(pid: int, fn) -> Load:
    loop0 = _main_thread_seconds(pid)
    s, gen, brk = with_cpu(pid, fn)
    loop = 100.0 * (_main_thread_seconds(pid) - loop0) / gen.wall
    over = min(s.ms / 1000, gen.wall) or gen.wall
    return Load(s.records_per_sec, s.mb_per_sec, gen.percent_of_core(over), brk.percent_of_core(over), loop)


def side_round(mode: str, records: int, lag_ms: int) -> tuple[Load, Load, int]:
    """Produce then consume ``records`` on a fresh broker; also the records the table held when
    the consumer finished (translation ran meanwhile when that is above 0)."""
    b = _broker()
    try:
        _create(b.bootstrap, mode, lag_ms)
        # Untimed: the first translation imports pyiceberg and pyarrow and makes the table, a
        # second of CPU once per broker that would otherwise land in the measured window.
        rdkafka_perf.produce(b.bootstrap, TOPIC, WARMUP, SIZE, "1", timeout=TIMEOUT)
        deadline = time.monotonic() + lag_ms / 1000 + 60
        while mode != "none" and table_offsets(_catalog(b.data_dir)) < WARMUP:
            if time.monotonic() > deadline:
                raise RuntimeError("the warm-up records never reached the table")
            time.sleep(0.2)
        pid = b.proc.pid
        prod = _load(pid, functools.partial(rdkafka_perf.produce, b.bootstrap, TOPIC, records, SIZE, "1",
                                            timeout=TIMEOUT))
        cons = _load(pid, functools.partial(rdkafka_perf.consume, b.bootstrap, TOPIC, PARTITIONS, records + WARMUP,
                                            timeout=TIMEOUT))
        held = table_offsets(_catalog(b.data_dir)) if mode != "none" else 0
        return prod, cons, held
    finally:
        b.cleanup()


def sidebyside(args: argparse.Namespace) -> None:
    runs: dict[str, list[tuple[Load, Load, int]]] = {"none": [], "key_value": []}
    for r in range(args.rounds):
        for mode in ("none", "key_value"):
            prod, cons, held = side_round(mode, args.records, args.side_lag_ms)
            runs[mode].append((prod, cons, held))
            log(f"round {r + 1} {mode}: produce {prod.rps:,.0f} records/s {prod.mbps:.1f} MB/s "
                f"(generator {prod.gen_pct:.0f}%, broker {prod.broker_pct:.0f}% of a core, its event loop's "
                f"thread {prod.loop_pct:.0f}%); consume {cons.rps:,.0f} records/s {cons.mbps:.1f} MB/s "
                f"(generator {cons.gen_pct:.0f}%, broker {cons.broker_pct:.0f}%, loop {cons.loop_pct:.0f}%); "
                f"table held {held:,} records after the consume")
    print(f"\nside by side: {args.records:,} records of {SIZE} B, {PARTITIONS} partitions, acks=1, "
          f"{args.rounds} rounds alternating, iceberg.target.lag.ms={args.side_lag_ms} for key_value\n")
    print("| iceberg.mode | produce records/s | produce MB/s | consume records/s | consume MB/s | "
          "table rows after the consume |")
    print("| --- | --- | --- | --- | --- | --- |")
    means = {}
    for mode, rs in runs.items():
        p = statistics.mean(x[0].rps for x in rs)
        c = statistics.mean(x[1].rps for x in rs)
        means[mode] = (p, c)
        print(f"| {mode} | {p:,.0f} ({', '.join(f'{x[0].rps:,.0f}' for x in rs)}) | "
              f"{statistics.mean(x[0].mbps for x in rs):.1f} | {c:,.0f} ({', '.join(f'{x[1].rps:,.0f}' for x in rs)}) | "
              f"{statistics.mean(x[1].mbps for x in rs):.1f} | "
              f"{'-' if mode == 'none' else ', '.join(f'{x[2]:,}' for x in rs)} |")
    (p0, c0), (p1, c1) = means["none"], means["key_value"]
    print(f"\non/off: produce {p1 / p0:.3f} ({p1 / p0 - 1:+.1%}), consume {c1 / c0:.3f} ({c1 / c0 - 1:+.1%})")


def paced(args: argparse.Namespace) -> None:
    count = args.paced_rate * args.paced_seconds
    runs: dict[str, list[tuple[Load, int]]] = {"none": [], "key_value": []}
    for r in range(args.rounds):
        for mode in ("none", "key_value"):
            b = _broker()
            try:
                _create(b.bootstrap, mode, args.side_lag_ms)
                rdkafka_perf.produce(b.bootstrap, TOPIC, WARMUP, SIZE, "1", timeout=TIMEOUT)  # untimed, as above
                deadline = time.monotonic() + args.side_lag_ms / 1000 + 60
                while mode != "none" and table_offsets(_catalog(b.data_dir)) < WARMUP:
                    if time.monotonic() > deadline:
                        raise RuntimeError("the warm-up records never reached the table")
                    time.sleep(0.2)
                prod = _load(b.proc.pid, functools.partial(rdkafka_perf.produce, b.bootstrap, TOPIC, count, SIZE, "1",
                                                           extra=["-r", str(args.paced_rate)], timeout=TIMEOUT))
                held = table_offsets(_catalog(b.data_dir)) if mode != "none" else 0
            finally:
                b.cleanup()
            runs[mode].append((prod, held))
            log(f"round {r + 1} {mode}: {prod.rps:,.0f} records/s of {args.paced_rate:,} asked (generator "
                f"{prod.gen_pct:.0f}%, broker {prod.broker_pct:.0f}% of a core, its event loop's thread "
                f"{prod.loop_pct:.0f}%); table held {held:,} records at the end")
    print(f"\npaced: rdkafka_performance -r {args.paced_rate} for {count:,} records of {SIZE} B, {PARTITIONS} "
          f"partitions, acks=1, {args.rounds} rounds alternating, iceberg.target.lag.ms={args.side_lag_ms} for key_value\n")
    print("| iceberg.mode | records/s (rounds) | broker CPU, % of a core | event loop's thread | table rows at the end |")
    print("| --- | --- | --- | --- | --- |")
    for mode, rs in runs.items():
        print(f"| {mode} | {statistics.mean(x[0].rps for x in rs):,.0f} ({', '.join(f'{x[0].rps:,.0f}' for x in rs)}) | "
              f"{', '.join(f'{x[0].broker_pct:.0f}' for x in rs)} | {', '.join(f'{x[0].loop_pct:.0f}' for x in rs)} | "
              f"{'-' if mode == 'none' else ', '.join(f'{x[1]:,}' for x in rs)} |")


# ---------------------------------------------------------------------------- lag under load


def _percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))] if s else 0.0


def _appended_at(history: list[tuple[float, int]], total: int) -> float | None:
    """When the log's end first reached ``total`` records, interpolated between samples."""
    for (t0, h0), (t1, h1) in zip(history, history[1:], strict=False):
        if h1 >= total:
            return t1 if h1 == h0 else t0 + (t1 - t0) * max(0, total - h0) / (h1 - h0)
    return history[0][0] if history and history[0][1] >= total else None


def lag_run(lag_ms: int, rate: int, seconds: int) -> dict[str, float]:
    b = _broker()
    try:
        _create(b.bootstrap, "key_value", lag_ms)
        count = rate * seconds
        consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "iceberg-bench"})
        catalog = _catalog(b.data_dir)
        argv = rdkafka_perf.producer_args(b.bootstrap, TOPIC, count, SIZE, "1", extra=["-r", str(rate)])
        outs: list[str] = []
        errors: list[BaseException] = []

        def produce() -> None:
            try:
                outs.extend(rdkafka_perf.run_many([argv], timeout=seconds * 3 + 60))
            except BaseException as e:  # reported below
                errors.append(e)
        gen = threading.Thread(target=produce, daemon=True)
        t_start = time.monotonic()
        gen.start()
        history: list[tuple[float, int]] = []
        lags_r: list[float] = []
        lags_s: list[float] = []
        next_tick = t_start
        caught_up_after = None
        produced_at = None
        while True:
            next_tick += 1.0
            time.sleep(max(0.0, next_tick - time.monotonic()))
            now = time.monotonic()
            hw = sum(consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1] for p in range(PARTITIONS))
            held = table_offsets(catalog)
            history.append((now, hw))
            if gen.is_alive() or produced_at is None:
                appended = _appended_at(history, held) if held else None
                lags_r.append(hw - held)
                lags_s.append(now - (appended if appended is not None else t_start))
            if not gen.is_alive() and produced_at is None:
                produced_at = now
            if produced_at is not None and held >= count:
                caught_up_after = now - produced_at
                break
            if produced_at is not None and now - produced_at > lag_ms / 1000 * 2 + 60:
                break
        consumer.close()
        if errors:
            raise errors[0]
        s = rdkafka_perf.parse_producer(outs[0])
        table = catalog.load_table(table_identifier(TOPIC))
        listing = table.inspect.files()
        files = listing.num_rows
        file_mb = sum(listing.column("file_size_in_bytes").to_pylist()) / max(1, files) / 1e6
        commits = len(table.metadata.snapshots)
        produce_s = s.ms / 1000
        res = {"lag_ms": lag_ms, "rate": s.records_per_sec, "records": s.records, "produce_s": produce_s,
               "max_r": max(lags_r), "p95_r": _percentile(lags_r, 0.95), "max_s": max(lags_s),
               "p95_s": _percentile(lags_s, 0.95), "caught_up_s": caught_up_after if caught_up_after is not None else -1,
               "files": files, "file_mb": file_mb, "commits": commits, "files_per_commit": files / max(1, commits),
               "files_per_day": files / produce_s * 86400}
        log(f"lag {lag_ms} ms: {res}")
        return res
    finally:
        b.cleanup()


def lag(args: argparse.Namespace) -> None:
    rows = [lag_run(ms, args.rate, args.seconds) for ms in args.lag_ms]
    print(f"\nlag: key_value, rdkafka_performance -r {args.rate} for {args.seconds} s, {SIZE} B, "
          f"{PARTITIONS} partitions, acks=1; sampled every second\n")
    print("| iceberg.target.lag.ms | produced records/s | lag max (records) | lag p95 (records) | lag max (s) | "
          "lag p95 (s) | table complete after the last record | commits | data files | MB a file | "
          "files a day at this rate |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['lag_ms']:.0f} | {r['rate']:,.0f} | {r['max_r']:,.0f} | {r['p95_r']:,.0f} | {r['max_s']:.1f} | "
              f"{r['p95_s']:.1f} | {r['caught_up_s']:.1f} s | {r['commits']:.0f} | {r['files']:.0f} | {r['file_mb']:.1f} | "
              f"{r['files_per_day']:,.0f} |")


# ---------------------------------------------------------------------------- translation on one core


def _slices(start: int, per_partition: int, batch: int = 1000) -> list[PartitionSlice]:
    """Keyless records of random 100 B values (no dictionary encoding, no compression helps),
    one timestamp a millisecond apart per offset."""
    ts = int(time.time() * 1000)
    out = []
    for p in range(PARTITIONS):
        chunks = [rec.encode_batch([rec.Record(o, ts + o - base, None, os.urandom(SIZE), [])
                                    for o in range(base, base + batch)],
                                   base_offset=base, base_timestamp=ts)
                  for base in range(start, start + per_partition, batch)]
        out.append(PartitionSlice(p, start, start + per_partition, chunks, []))
    return out


def translate(args: argparse.Namespace) -> None:
    per = args.commit_records // PARTITIONS
    with tempfile.TemporaryDirectory(prefix="iceberg-bench-") as tmp:
        table = TopicTable(open_catalog(CatalogSettings.resolve("", "", tmp)), TOPIC, None,
                           parse_partition_spec("(hour(timestamp))"))
        state = table.state()
        rates = []
        for i in range(args.commits):
            slices = _slices(i * per, per)
            w0, c0 = time.perf_counter(), time.process_time()
            state, _ = table.commit(slices, state)
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            rates.append(per * PARTITIONS / wall)
            log(f"commit {i + 1}: {per * PARTITIONS:,} records in {wall:.2f} s ({cpu:.2f} s CPU, all threads): "
                f"{per * PARTITIONS / wall:,.0f} records/s")
    print(f"\ntranslate: TopicTable.commit of {per * PARTITIONS:,} records of {SIZE} B (key_value, "
          f"hour(timestamp)), {args.commits} commits into a fresh SQLite catalog, one thread")
    print(f"records/s: median {statistics.median(rates):,.0f}, min {min(rates):,.0f}, max {max(rates):,.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.iceberg", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", nargs="*", default=[], metavar="{sidebyside,paced,lag,translate}",
                    help="which measurements (default: all four)")
    ap.add_argument("--records", type=int, default=10_000_000, help="sidebyside: records per load")
    ap.add_argument("--rounds", type=int, default=2, help="sidebyside, paced: rounds of none then key_value")
    ap.add_argument("--side-lag-ms", type=int, default=2000, help="sidebyside, paced: key_value's iceberg.target.lag.ms")
    ap.add_argument("--paced-rate", type=int, default=300_000, help="paced: records/s the producer is paced at")
    ap.add_argument("--paced-seconds", type=int, default=20, help="paced: seconds of paced produce")
    ap.add_argument("--rate", type=int, default=50_000, help="lag: records/s the producer is paced at")
    ap.add_argument("--seconds", type=int, default=90, help="lag: seconds of paced produce")
    ap.add_argument("--lag-ms", type=int, nargs="+", default=[10000, 60000], help="lag: iceberg.target.lag.ms values")
    ap.add_argument("--commit-records", type=int, default=200_000, help="translate: records per commit")
    ap.add_argument("--commits", type=int, default=10, help="translate: commits")
    args = ap.parse_args()
    runs = {"sidebyside": sidebyside, "paced": paced, "lag": lag, "translate": translate}
    if unknown := [w for w in args.what if w not in runs]:
        ap.error(f"unknown measurement(s) {', '.join(unknown)}; choose from {', '.join(runs)}")
    what = args.what or list(runs)
    rdkafka_perf.require_binary()
    log(f"load average {os.getloadavg()}")
    for w in what:
        runs[w](args)


if __name__ == "__main__":
    main()
