"""Rivulet alone under ``benchmarks.compare``'s produce rows over TLS or SASL_SSL, with the
broker's CPU per MB and its event loop thread's share, to see where decryption runs.

One Rivulet broker is started as ``compare --security`` starts it (TLS 1.3, SCRAM-SHA-512 for
``sasl_ssl``); after an untimed warm-up, each round produces ``--records`` records of
``--size`` bytes with ``rdkafka_performance`` (4 partitions, ``linger.ms=10``,
``batch.size=1000000``). Per round: records/s, the broker's CPU (user+sys of all its threads)
per MB and its event loop thread's (``/proc/<pid>/task/<pid>/stat``): how much of the broker's
work the loop does, which is where decryption runs. ``--py-spy OUT`` records a profile of each
round (py-spy on PATH).

    python -m benchmarks.tls_produce --security sasl_ssl --size 1024 --acks all --rounds 3
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from benchmarks import compare, rdkafka_perf
from benchmarks.produce_many import cpu_seconds, start_py_spy, stop_py_spy

PARTITIONS = 4


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--security", choices=("tls", "sasl_ssl"), default="sasl_ssl")
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--acks", choices=("1", "all"), default="all")
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--py-spy", dest="py_spy", help="write a raw py-spy profile of each round here (suffixed .N)")
    args = ap.parse_args()
    rdkafka_perf.require_binary()
    security = compare.Security.named(args.security, Path(tempfile.mkdtemp(prefix="rivulet-tls-produce-")))
    broker = compare.Broker("rivulet", security)
    broker.start()
    conf = rdkafka_perf.config_args(security.client_conf())
    try:
        warm = compare._topic("warm")
        compare._create(broker.bootstrap, [warm], PARTITIONS)
        rdkafka_perf.produce(broker.load_bootstrap, warm, max(1, args.records // 10), args.size, args.acks, extra=conf)
        pid = broker.pid
        for r in range(args.rounds):
            topic = compare._topic(f"tls-{args.size}")
            compare._create(broker.bootstrap, [topic], PARTITIONS)
            spy = start_py_spy(pid, args.py_spy and f"{args.py_spy}.{r}")
            load = os.getloadavg()[0]
            cpu0, loop0 = cpu_seconds(pid), cpu_seconds(pid, pid)
            s = rdkafka_perf.produce(broker.load_bootstrap, topic, args.records, args.size, args.acks, extra=conf)
            cpu, loop = cpu_seconds(pid) - cpu0, cpu_seconds(pid, pid) - loop0
            stop_py_spy(spy)
            mb = args.records * args.size / 1e6
            print(f"round {r + 1}: {s.records_per_sec:,.0f} "
                  f"records/s; broker CPU {cpu / mb * 1e3:.2f} ms a MB, its event loop "
                  f"{loop / mb * 1e3:.2f} ms a MB ({loop / max(cpu, 1e-9):.0%} of the broker's), loop busy "
                  f"{loop / (args.records / s.records_per_sec):.0%} of the run; 1-minute load average "
                  f"{load:.2f} -> {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        broker.close()


if __name__ == "__main__":
    main()
