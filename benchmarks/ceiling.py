"""The rows a load generator holds, against a broker that costs nothing (issue 32, item 3).

Where both brokers run a row below the generator's limit, no broker can do better than the
generator against an answer that takes no work. This runs each such row three ways, alternating
round by round on the same machine: against ``instant_fetch``'s proxy (Fetch answered from one
batch in memory, Produce acknowledged at once, nothing read or stored; everything else passed to
a Rivulet broker behind it), against Rivulet, and against Apache Kafka 4.3.1, each with the rows'
settings from ``benchmarks.compare``. The proxy's rate over Kafka's is the most any broker could
reach on the row here; Rivulet's over the proxy's says how much of it Rivulet reaches::

    python -m benchmarks.ceiling --rounds 2
    python -m benchmarks.ceiling --rows rdk_cons_100,java_prod_100_all --rounds 3

Every broker stays up through the run (idle ones cost well under 1% of a core), and one untimed
pass of every row on every target comes first: Kafka's JIT compiles its paths, and each process
touches its memory before the timed rounds (see ``compare.warm_machine``).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
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
TARGETS = ("instant", "rivulet", "kafka")


@dataclass(frozen=True)
class Figure:
    records_per_sec: float
    generator_pct: float  # of a core, over the row's own window
    broker_pct: float
    load: float


class InstantBroker:
    """The proxy in front of a Rivulet broker that answers the rest (Metadata, groups, offsets);
    it serves one record size, the one its stored batch holds."""

    def __init__(self, size: int) -> None:
        self.upstream = BrokerProcess({"group.initial.rebalance.delay.ms": "0"})
        batch, count = full_batch(size)
        self.proxy = Proxy(self.upstream.port, Answers(batch, count), Acks())
        self.upstream.overrides["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{self.proxy.port}"

    def start(self) -> None:
        self.upstream.start()
        compare.wait_metadata(self.bootstrap)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.proxy.port}"

    def close(self) -> None:
        self.proxy.close()
        self.upstream.stop()
        self.upstream.cleanup()


def _run_row(key: str, count: int, bs: str, lbs: str, fill: bool, pids: list[int]) -> Figure:
    tool, size, acks = ROWS[key]
    topic = compare._topic(key.replace("_", "-"))
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


def measure(rows: list[str], rounds: int, records_100: int, records_1k: int) -> dict[str, dict[str, list[Figure]]]:
    instants = {size: InstantBroker(size) for size in sorted({ROWS[k][1] for k in rows})}
    rivulet = compare.Broker("rivulet", compare.Security("PLAINTEXT"))
    kafka = compare.Broker("kafka", compare.Security("PLAINTEXT"))
    out: dict[str, dict[str, list[Figure]]] = {k: {t: [] for t in TARGETS} for k in rows}
    try:
        for i in instants.values():
            i.start()
        rivulet.start()
        kafka.start()
        for n in range(rounds + 1):  # the first untimed
            order = TARGETS if n % 2 else tuple(reversed(TARGETS))
            for key in rows:
                count = records_100 if ROWS[key][1] == 100 else records_1k
                if n == 0:
                    count = max(1000, count // 3)
                for target in order:
                    if target == "instant":
                        i = instants[ROWS[key][1]]
                        cpu0 = i.proxy.cpu_s  # its threads add their CPU as their connections end
                        f = _run_row(key, count, i.bootstrap, i.bootstrap, False, [i.upstream.proc.pid])
                        proxy_s = i.proxy.cpu_s - cpu0
                    else:
                        b = rivulet if target == "rivulet" else kafka
                        f = _run_row(key, count, b.bootstrap, b.load_bootstrap, True, [b.pid])
                        proxy_s = 0.0
                    label = "warm-up" if n == 0 else f"round {n}"
                    compare.log(f"{label}: {key} on {target}: {f.records_per_sec:,.0f} records/s, generator "
                                f"{f.generator_pct:.0f}%, broker {f.broker_pct:.0f}%"
                                + (f" (+ proxy {proxy_s:.2f} s)" if target == "instant" else "")
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


def report(out: dict[str, dict[str, list[Figure]]]) -> str:
    lines = ["| row | instant / Kafka | Rivulet / Kafka | Rivulet / instant | records/s (instant, Rivulet, Kafka) "
             "| generator % (instant, Rivulet, Kafka) | load |",
             "| --- | ---: | ---: | ---: | --- | --- | --- |"]
    for key, by in out.items():
        if not all(by[t] for t in TARGETS):
            continue
        med = {t: statistics.median(f.records_per_sec for f in by[t]) for t in TARGETS}
        gen = {t: statistics.median(f.generator_pct for f in by[t]) for t in TARGETS}
        loads = [f.load for t in TARGETS for f in by[t]]

        lines.append(f"| {key} | {_ratio(by, med, 'instant', 'kafka')} | {_ratio(by, med, 'rivulet', 'kafka')} | "
                     f"{_ratio(by, med, 'rivulet', 'instant')} | {med['instant']:,.0f} / {med['rivulet']:,.0f} / "
                     f"{med['kafka']:,.0f} | {gen['instant']:.0f} / {gen['rivulet']:.0f} / {gen['kafka']:.0f} | "
                     f"{min(loads):.1f}-{max(loads):.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, of: {', '.join(ROWS)}")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--records-100", type=int, default=3_000_000)
    ap.add_argument("--records-1k", type=int, default=1_000_000)
    ap.add_argument("--json", help="write every figure here")
    args = ap.parse_args(argv)
    rows = [r for r in args.rows.split(",") if r]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        ap.error(f"unknown rows: {', '.join(unknown)}")
    rdkafka_perf.require_binary()
    out = measure(rows, args.rounds, args.records_100, args.records_1k)
    print(report(out))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({k: {t: [vars(x) for x in v] for t, v in by.items()} for k, by in out.items()}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
