"""Rivulet alone under ``benchmarks.compare``'s ``many`` produce load, to iterate on it.

Ten ``rdkafka_performance`` producers at once, each to its own topic of 100 partitions (1,000
in all), 1 KiB records at acks=1, against one Rivulet broker (``rivulet.testing.BrokerProcess``)
after an untimed warm-up; as compare.py counts them, records over the wall time from the first
start to the last exit. Next to the rate: the broker's CPU over the run and its event loop
thread's alone (``/proc/<pid>/task/<pid>/stat``), which is what sets the pace when it nears a
full core. ``--py-spy OUT`` records a profile of the broker over each run (py-spy on PATH).

    python -m benchmarks.produce_many --rounds 3
    python -m benchmarks.produce_many --rounds 1 --py-spy /tmp/many.txt
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import time

from benchmarks import rdkafka_perf
from benchmarks.compare import MANY_PARTITIONS_EACH, MANY_TOPICS, _create, _rdk_parallel, _topic
from rivulet.testing import BrokerProcess


def cpu_seconds(pid: int, tid: int | None = None) -> float:
    """user+sys of a process, or of one of its threads."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    with open(path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_py_spy(pid: int, out: str | None) -> subprocess.Popen | None:
    """A raw py-spy profile of ``pid`` (all threads, idle included) into ``out``, or None without one."""
    if not out:
        return None
    spy = subprocess.Popen([shutil.which("py-spy") or "py-spy", "record", "-r", "200", "--idle", "--nonblocking",
                            "--format", "raw", "-o", out, "--pid", str(pid)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # attached before the load starts
    return spy


def stop_py_spy(spy: subprocess.Popen | None) -> None:
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records", type=int, default=1_000_000, help="in all, split over the producers")
    ap.add_argument("--py-spy", dest="py_spy", help="write a raw py-spy profile of each run here (suffixed .N)")
    args = ap.parse_args()
    rdkafka_perf.require_binary()
    each = max(1, args.records // MANY_TOPICS)
    broker = BrokerProcess({"inter.broker.listener.name": "PLAINTEXT"}).start()
    try:
        bs = broker.bootstrap
        warm = _topic("warm")
        _create(bs, [warm], MANY_PARTITIONS_EACH)
        rdkafka_perf.run_many([rdkafka_perf.producer_args(bs, warm, each // 3 or 1, 1024, "1")])
        assert broker.proc is not None
        pid = broker.proc.pid
        for r in range(args.rounds):
            topics = [_topic(f"many{i}") for i in range(MANY_TOPICS)]
            _create(bs, topics, MANY_PARTITIONS_EACH)
            spy = start_py_spy(pid, args.py_spy and f"{args.py_spy}.{r}")
            load = os.getloadavg()[0]
            cpu0, loop0 = cpu_seconds(pid), cpu_seconds(pid, pid)
            rate = _rdk_parallel([rdkafka_perf.producer_args(bs, t, each, 1024, "1") for t in topics],
                                 rdkafka_perf.parse_producer, each)
            cpu, loop = cpu_seconds(pid) - cpu0, cpu_seconds(pid, pid) - loop0
            stop_py_spy(spy)
            print(f"round {r + 1}: {rate.records_per_sec:,.0f} records/s over {rate.seconds:.2f} s; broker CPU "
                  f"{cpu:.2f} s ({cpu / rate.seconds:.0%} of a core), its event loop thread {loop:.2f} s; "
                  f"1-minute load average {load:.2f} -> {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
