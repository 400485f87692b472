"""The broker's CPU per consumed GB with rdkafka_performance as the consumer, trees A/B alternated.

Issue 32's consume rows (``compare --only base``) run for about a second each on a shared
two-core machine, so their rates swing with whatever else runs. What a change to the Fetch
path does shows more steadily in the broker's own CPU for the same bytes: this starts one
broker per source tree (``--tree``, each broker importing Rivulet from that tree), produces
the same records to each (the rows' rdkafka_performance producer: 4 partitions,
``linger.ms=10``, ``batch.size=1000000``, acks=1), reads them once untimed, then alternates
timed consume runs between the trees. Each run reports the rate, the broker's CPU
(``/proc/<pid>/stat`` utime + stime, all threads) and the generator's (its rusage), per GB
and per million records, its context switches and minor page faults per GB, and the 1-minute load
average before and after. Each broker runs in its tree's directory (``python -m`` would otherwise
import the working directory's Rivulet whatever PYTHONPATH says).

    python -m benchmarks.consume_cpu --tree /tmp/base --tree . --size 1024 --records 1000000 --rounds 2

``--security tls|sasl_ssl`` gives each broker ``compare``'s secured listener (TLS 1.3, SCRAM-SHA-512
for ``sasl_ssl``) beside PLAINTEXT; the records are produced and consumed over it.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
from pathlib import Path

_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from benchmarks import rdkafka_perf  # noqa: E402
from benchmarks.compare import Security, wait_metadata  # noqa: E402
from benchmarks.produce_consume import create_topic, wait_for_leaders  # noqa: E402
from rivulet.testing import BrokerProcess, free_port  # noqa: E402

PARTITIONS = 4
_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of the whole process, every thread."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def minor_faults(pid: int) -> int:
    """Minor page faults of the whole process, every thread."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


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
    ap.add_argument("--security", choices=("plaintext", "tls", "sasl_ssl"), default="plaintext")
    args = ap.parse_args(argv)
    trees = list(args.tree)
    security = Security.named(args.security, Path(tempfile.mkdtemp(prefix="rivulet-consume-cpu-")))
    x = rdkafka_perf.config_args(security.client_conf())
    brokers: list[BrokerProcess] = []
    load_bootstraps: list[str] = []
    topic = f"cpu-{args.size}"
    try:
        for tree in trees:
            path, _, props = tree.partition("::")
            overrides = dict(kv.split("=", 1) for kv in props.split(",") if kv)
            # In the tree's own directory: ``python -m`` puts the working directory on sys.path
            # ahead of PYTHONPATH, so from another checkout every broker would run that one's code.
            b = BrokerProcess({**security.broker_props(), **overrides},
                              prefix=["env", "-C", str(Path(path).resolve()), f"PYTHONPATH={Path(path).resolve()}"])
            lbs = b.bootstrap
            if security.secured:
                secured = free_port()
                lbs = f"127.0.0.1:{secured}"
                b.overrides["listeners"] = f"PLAINTEXT://{b.bootstrap},{security.protocol}://{lbs}"
                b.overrides["inter.broker.listener.name"] = "PLAINTEXT"
            b.start()
            brokers.append(b)
            load_bootstraps.append(lbs)
            if security.scram:
                security.add_user(b.bootstrap)
            if security.secured:
                wait_metadata(lbs, conf=security.client_conf())
            create_topic(b.bootstrap, topic, PARTITIONS)
            wait_for_leaders(b.bootstrap, [topic])
            rdkafka_perf.produce(lbs, topic, args.records, args.size, "1", extra=x)
            rdkafka_perf.consume(lbs, topic, PARTITIONS, args.records, extra=x)  # warm, untimed
        per_tree: dict[str, list[tuple[float, float, float]]] = {t: [] for t in trees}
        for rnd in range(args.rounds):
            for tree, b, lbs in zip(trees, brokers, load_bootstraps, strict=True):
                for _ in range(args.runs):
                    assert b.proc is not None
                    load0 = os.getloadavg()[0]
                    f0, x0 = minor_faults(b.proc.pid), context_switches(b.proc.pid)
                    c0, g0 = cpu_seconds(b.proc.pid), children_cpu()
                    s = rdkafka_perf.consume(lbs, topic, PARTITIONS, args.records, extra=x)
                    c1, g1 = cpu_seconds(b.proc.pid), children_cpu()
                    x1, f1 = context_switches(b.proc.pid), minor_faults(b.proc.pid)
                    load1 = os.getloadavg()[0]
                    gb = s.bytes / 1e9
                    broker_gb, gen_gb = (c1 - c0) / gb, (g1 - g0) / gb
                    per_tree[tree].append((s.records_per_sec, broker_gb, gen_gb))
                    print(f"round {rnd + 1} {tree}: {s.records_per_sec:,.0f} records/s, broker {c1 - c0:.2f} s "
                          f"({broker_gb:.3f} s/GB, {(c1 - c0) / s.records * 1e9:.0f} ns/record), generator "
                          f"{g1 - g0:.2f} s ({gen_gb:.3f} s/GB), broker context switches {(x1 - x0) / gb:,.0f}/GB, "
                          f"minor faults {(f1 - f0) / gb:,.0f}/GB, "
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
