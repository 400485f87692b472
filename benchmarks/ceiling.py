"""The rows a load generator holds, against a broker that costs nothing (issue 32, item 3).

No broker can do better on a row than its load generator against answers that take no work.
This runs each row on up to four targets, alternating round by round on the same machine, with
the rows' settings from ``benchmarks.compare``:

- ``instant``: ``instant_fetch``'s proxy (Fetch answered from one batch in memory, Produce
  acknowledged at once, nothing read or stored; everything else passed to a Rivulet broker
  behind it);
- ``instant_io``: the same proxy doing the work no broker avoids: answers read from 1 GiB of
  memory in turn (a stored topic's bytes are not in the CPU's cache), records written to files
  (the page cache) before the acknowledgement;
- ``rivulet`` and ``kafka`` (Apache Kafka 4.3.1).

Each instant target's rate over Kafka's is the most a broker could reach on the row here, and
Rivulet's over it how much of that Rivulet reaches::

    python -m benchmarks.ceiling --rounds 2
    python -m benchmarks.ceiling --rows rdk_cons_100,java_prod_100_all --targets instant_io,rivulet,kafka

Every broker stays up through the run (idle ones cost well under 1% of a core), and one untimed
pass of every row on every target comes first: Kafka's JIT compiles its paths, and each process
touches its memory before the timed rounds (see ``compare.warm_machine``).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import tempfile
from dataclasses import dataclass
from typing import Callable

from benchmarks import compare, rdkafka_perf
from benchmarks.instant_fetch import Acks, Answers, PARTITIONS, Proxy, full_batch
from rivulet.testing import BrokerProcess

# key: (tool, record size, acks); consume rows read what rdkafka_performance wrote at acks=1.
ROWS: dict[str, tuple[str, int, str]] = {
    "rdk_cons_100": ("rdk_cons", 100, "1"),
    "rdk_cons_1024": ("rdk_cons", 1024, "1"),
    "java_prod_100_all": ("java_prod", 100, "all"),
    "java_prod_1024_1": ("java_prod", 1024, "1"),
    "java_prod_1024_all": ("java_prod", 1024, "all"),
    "java_cons_100": ("java_cons", 100, "1"),
    "java_cons_1024": ("java_cons", 1024, "1"),
}
TARGETS = ("instant", "instant_io", "rivulet", "kafka")
RING = 256  # buffers a partition for instant_io: 4 x 256 x 1 MiB answers, 1 GiB apart in memory


@dataclass(frozen=True)
class Figure:
    records_per_sec: float
    generator_pct: float  # of a core, over the row's own window
    broker_pct: float
    load: float


class InstantBroker:
    """The proxy in front of a Rivulet broker that answers the rest (Metadata, groups, offsets);
    it serves one record size, the one its stored batch holds. With ``io``, it does the work no
    broker avoids: Fetch answers come from 1 GiB of memory in turn, as a stored topic's would,
    and Produce writes the records to files before it answers."""

    def __init__(self, size: int, io: bool = False) -> None:
        self.upstream = BrokerProcess({"group.initial.rebalance.delay.ms": "0"})
        batch, count = full_batch(size)
        self.acks = Acks(tempfile.mkdtemp(prefix="rivulet-instant-") if io else None)
        self.proxy = Proxy(self.upstream.port, Answers(batch, count, RING if io else 1), self.acks)
        self.upstream.overrides["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{self.proxy.port}"

    def start(self) -> None:
        self.upstream.start()
        compare.wait_metadata(self.bootstrap)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.proxy.port}"

    def close(self) -> None:
        self.proxy.close()
        self.acks.close()
        if self.acks.write_dir is not None:
            shutil.rmtree(self.acks.write_dir, ignore_errors=True)
        self.upstream.stop()
        self.upstream.cleanup()


def _run_row(key: str, count: int, bs: str, lbs: str, fill: bool, pids: list[int], drop_caches: bool) -> Figure:
    tool, size, acks = ROWS[key]
    topic = compare._topic(key.replace("_", "-"))
    if tool == "java_prod" and drop_caches:
        compare.drop_page_cache()
    compare._create(bs, [topic], PARTITIONS)
    if tool != "java_prod" and fill:  # outside the window, as compare fills its consume rows
        compare._rdk_produce(lbs, topic, count, size, "1")
    run: Callable[[], compare.Rate]
    if tool == "rdk_cons":
        run = functools.partial(compare._rdk_consume, lbs, topic, PARTITIONS, count)
    elif tool == "java_cons":
        run = functools.partial(compare._java_consume, lbs, topic, count, {})
    else:
        run = functools.partial(compare._java_produce, lbs, topic, count, size, acks, {})
    load = os.getloadavg()[0]
    rate, gen, brk = compare.with_cpu_of(pids, run)
    over = min(rate.seconds, gen.wall) or gen.wall
    return Figure(rate.records_per_sec, gen.percent_of_core(over), brk.percent_of_core(over), load)


def measure(rows: list[str], targets: list[str], rounds: int, records_100: int, records_1k: int,
            drop_caches: bool = False) -> dict[str, dict[str, list[Figure]]]:
    sizes = sorted({ROWS[k][1] for k in rows})
    instants = {(t, size): InstantBroker(size, io=t == "instant_io")
                for t in targets if t.startswith("instant") for size in sizes}
    rivulet = compare.Broker("rivulet", compare.Security("PLAINTEXT"))
    kafka = compare.Broker("kafka", compare.Security("PLAINTEXT"))
    out: dict[str, dict[str, list[Figure]]] = {k: {t: [] for t in targets} for k in rows}
    try:
        for i in instants.values():
            i.start()
        if "rivulet" in targets:
            rivulet.start()
        if "kafka" in targets:
            kafka.start()
        for n in range(rounds + 1):  # the first untimed
            order = targets if n % 2 else targets[::-1]
            for key in rows:
                count = records_100 if ROWS[key][1] == 100 else records_1k
                if n == 0:
                    count = max(1000, count // 3)
                for target in order:
                    if target.startswith("instant"):
                        i = instants[(target, ROWS[key][1])]
                        cpu0 = i.proxy.cpu_s  # its threads add their CPU as their connections end
                        f = _run_row(key, count, i.bootstrap, i.bootstrap, False, [i.upstream.proc.pid], drop_caches)
                        proxy_s = i.proxy.cpu_s - cpu0
                    else:
                        b = rivulet if target == "rivulet" else kafka
                        f = _run_row(key, count, b.bootstrap, b.load_bootstrap, True, [b.pid], drop_caches)
                        proxy_s = 0.0
                    label = "warm-up" if n == 0 else f"round {n}"
                    compare.log(f"{label}: {key} on {target}: {f.records_per_sec:,.0f} records/s, generator "
                                f"{f.generator_pct:.0f}%, broker {f.broker_pct:.0f}%"
                                + (f" (+ proxy {proxy_s:.2f} s)" if target.startswith("instant") else "")
                                + f", load {f.load:.2f}")
                    if n:
                        out[key][target].append(f)
    finally:
        for b in (kafka, rivulet):
            b.close()
        for i in instants.values():
            i.close()
    return out


def _ratio(by: dict[str, list[Figure]], med: dict[str, float], a: str, b: str) -> str:
    """The medians' ratio, and the range of the rounds' own ratios."""
    each = [x.records_per_sec / y.records_per_sec for x, y in zip(by[a], by[b], strict=True)]
    return f"{med[a] / med[b]:.2f} ({min(each):.2f}-{max(each):.2f})"


def report(out: dict[str, dict[str, list[Figure]]], targets: list[str]) -> str:
    """A markdown table: each target's records/s over Kafka's (median and the rounds' range),
    Rivulet's over each instant target's, the medians and the generator's CPU."""
    pairs = [(t, "kafka") for t in targets if t != "kafka" and "kafka" in targets]
    pairs += [("rivulet", t) for t in targets if t.startswith("instant") and "rivulet" in targets]
    head = [f"{a} / {b}" for a, b in pairs]
    lines = [f"| row | {' | '.join(head)} | records/s ({', '.join(targets)}) | generator % of a core | load |",
             "| --- |" + " ---: |" * len(pairs) + " --- | --- | --- |"]
    for key, by in out.items():
        if not all(by[t] for t in targets):
            continue
        med = {t: statistics.median(f.records_per_sec for f in by[t]) for t in targets}
        gen = {t: statistics.median(f.generator_pct for f in by[t]) for t in targets}
        loads = [f.load for t in targets for f in by[t]]
        ratios = " | ".join(_ratio(by, med, a, b) for a, b in pairs)
        lines.append(f"| {key} | {ratios} | {' / '.join(f'{med[t]:,.0f}' for t in targets)} | "
                     f"{' / '.join(f'{gen[t]:.0f}' for t in targets)} | {min(loads):.1f}-{max(loads):.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, of: {', '.join(ROWS)}")
    ap.add_argument("--targets", default=",".join(TARGETS), help=f"comma-separated, of: {', '.join(TARGETS)}")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--records-100", type=int, default=3_000_000)
    ap.add_argument("--records-1k", type=int, default=1_000_000)
    ap.add_argument("--drop-caches", action="store_true", help="drop the page cache before each produce row "
                    "(root; see compare.drop_page_cache)")
    ap.add_argument("--json", help="write every figure here")
    args = ap.parse_args(argv)
    rows = [r for r in args.rows.split(",") if r]
    unknown = [r for r in rows if r not in ROWS]
    targets = [t for t in args.targets.split(",") if t]
    unknown += [t for t in targets if t not in TARGETS]
    if unknown:
        ap.error(f"unknown rows or targets: {', '.join(unknown)}")
    rdkafka_perf.require_binary()
    out = measure(rows, targets, args.rounds, args.records_100, args.records_1k, args.drop_caches)
    print(report(out, targets))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({k: {t: [vars(x) for x in v] for t, v in by.items()} for k, by in out.items()}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
