"""The broker's CPU per consumed GB with rdkafka_performance as the consumer, trees A/B alternated.

Issue 32's consume rows (``compare --only base``) run for about a second each on a shared
two-core machine, so their rates swing with whatever else runs. What a change to the Fetch
path does shows more steadily in the broker's own CPU for the same bytes: this starts one
broker per source tree (``--tree``, each broker importing Rivulet from that tree), produces
the same records to each (the rows' rdkafka_performance producer: 4 partitions,
``linger.ms=10``, ``batch.size=1000000``, acks=1), reads them once untimed, then alternates
timed consume runs between the trees. Each run reports the rate, the broker's CPU
(``/proc/<pid>/stat`` utime + stime, all threads) and the generator's (its rusage), per GB
and per million records, and the 1-minute load average before and after.

    python -m benchmarks.consume_cpu --tree /tmp/base --tree . --size 1024 --records 1000000 --rounds 2
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
from pathlib import Path

_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from benchmarks import rdkafka_perf  # noqa: E402
from benchmarks.produce_consume import create_topic, wait_for_leaders  # noqa: E402
from rivulet.testing import BrokerProcess  # noqa: E402

PARTITIONS = 4
_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of the whole process, every thread."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def context_switches(pid: int) -> int:
    """Voluntary and involuntary context switches of the process's threads (those alive now)."""
    n = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
                        n += int(line.split()[1])
        except OSError:  # the thread ended meanwhile
            pass
    return n


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.consume_cpu", description=__doc__.split("\n")[0])
    ap.add_argument("--tree", action="append", required=True,
                    help="a source tree (its C extensions built), optionally with broker overrides: "
                         "PATH::key=value,key=value")
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--runs", type=int, default=1, help="consume runs of a tree in each round")
    args = ap.parse_args(argv)
    trees = list(args.tree)
    brokers: list[BrokerProcess] = []
    topic = f"cpu-{args.size}"
    try:
        for tree in trees:
            path, _, props = tree.partition("::")
            overrides = dict(kv.split("=", 1) for kv in props.split(",") if kv)
            b = BrokerProcess(overrides, prefix=["env", f"PYTHONPATH={Path(path).resolve()}"]).start()
            brokers.append(b)
            create_topic(b.bootstrap, topic, PARTITIONS)
            wait_for_leaders(b.bootstrap, [topic])
            rdkafka_perf.produce(b.bootstrap, topic, args.records, args.size, "1")
            rdkafka_perf.consume(b.bootstrap, topic, PARTITIONS, args.records)  # warm, untimed
        per_tree: dict[str, list[tuple[float, float, float]]] = {t: [] for t in trees}
        for rnd in range(args.rounds):
            for tree, b in zip(trees, brokers, strict=True):
                for _ in range(args.runs):
                    assert b.proc is not None
                    load0 = os.getloadavg()[0]
                    x0, c0, g0 = context_switches(b.proc.pid), cpu_seconds(b.proc.pid), children_cpu()
                    s = rdkafka_perf.consume(b.bootstrap, topic, PARTITIONS, args.records)
                    c1, g1, x1 = cpu_seconds(b.proc.pid), children_cpu(), context_switches(b.proc.pid)
                    load1 = os.getloadavg()[0]
                    gb = s.bytes / 1e9
                    broker_gb, gen_gb = (c1 - c0) / gb, (g1 - g0) / gb
                    per_tree[tree].append((s.records_per_sec, broker_gb, gen_gb))
                    print(f"round {rnd + 1} {tree}: {s.records_per_sec:,.0f} records/s, broker {c1 - c0:.2f} s "
                          f"({broker_gb:.3f} s/GB, {(c1 - c0) / s.records * 1e9:.0f} ns/record), generator "
                          f"{g1 - g0:.2f} s ({gen_gb:.3f} s/GB), broker context switches {(x1 - x0) / gb:,.0f}/GB, "
                          f"load {load0:.2f}-{load1:.2f}", flush=True)
        for tree, rows in per_tree.items():
            print(f"{tree}: median {statistics.median(r[0] for r in rows):,.0f} records/s, broker "
                  f"{statistics.median(r[1] for r in rows):.3f} s/GB "
                  f"({min(r[1] for r in rows):.3f}-{max(r[1] for r in rows):.3f}), generator "
                  f"{statistics.median(r[2] for r in rows):.3f} s/GB")
    finally:
        for b in brokers:
            b.cleanup()  # its data dir too: gigabytes of records
    return 0


if __name__ == "__main__":
    sys.exit(main())
