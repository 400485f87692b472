"""What the consumer spends building one Fetch of many partitions, with and without a fetch
session (KIP-227), on one core and without a broker.

Two ways for ``--partitions`` partitions (10 topics), each ``--rounds`` times, CPU time per
request (best and median):

- ``full``: the consumer's ``Fetcher._request`` in a session the broker does not keep (session
  id 0 answers, as Rivulet's broker gives): every partition named, plus the handler's
  bookkeeping and its check of the answer's partitions;
- ``incremental``: the same in a session the broker keeps, when no partition's fetch state
  changed (caught-up partitions): none named.

    python -m benchmarks.fetch_session --partitions 10000 --rounds 30

``--caught-up N`` instead starts Apache Kafka 4.3.1 (benchmarks/reference/kafka.py), which keeps
fetch sessions, puts one record in each of N partitions, and runs a consumer (in a process of
its own, ``fetch.wait.max.ms=100``) that reads them and then stays caught up for ``--seconds``:
its CPU seconds over that span. ``--tree PATH`` runs the consumer from another checkout too,
alternating, ``--pairs`` times, for before/after.

    python -m benchmarks.fetch_session --caught-up 1000 --tree /work/main --pairs 2
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]

TOPICS = 10


def timed(rounds: int, call: Callable[[], object]) -> tuple[float, float]:
    out = []
    for _ in range(rounds):
        t = time.process_time()
        call()
        out.append(time.process_time() - t)
    return min(out) * 1000, statistics.median(out) * 1000


def build_costs(args: argparse.Namespace) -> None:
    from rivulet.client.consumer.fetcher import Fetcher
    from rivulet.protocol.fetch_session import FetchSessionHandler

    each = args.partitions // TOPICS
    ids = {f"t{t}": uuid.uuid4() for t in range(TOPICS)}
    states = [((f"t{t}", p), SimpleNamespace(fetch_offset=100, current_leader_epoch=0, fetch_epoch=0))
              for t in range(TOPICS) for p in range(each)]
    keys = {tp for tp, _ in states}
    # Fetcher._request reads only these of the Fetcher.
    fetcher = SimpleNamespace(partition_max_bytes=1 << 20, max_wait_ms=500, min_bytes=1, max_bytes=50 << 20,
                              isolation=0)

    no_session = FetchSessionHandler(1)

    def full() -> None:
        Fetcher._request(fetcher, no_session, states, ids, 17)
        no_session.handle_response(0, 0, 0, keys)

    kept = FetchSessionHandler(1)
    Fetcher._request(fetcher, kept, states, ids, 17)
    kept.handle_response(0, 9, 0, keys)

    def incremental() -> None:
        Fetcher._request(fetcher, kept, states, ids, 17)
        kept.handle_response(0, 9, 0, set())

    print(f"{len(states)} partitions, CPU ms per request (best / median of {args.rounds})")
    for name, call in (("full", full), ("incremental", incremental)):
        best, median = timed(args.rounds, call)
        print(f"{name:12s} {best:8.2f} {median:8.2f}")


def caught_up_child(bootstrap: str, topic: str, n: int, seconds: float) -> None:
    """Run in the tree measured (only its public client API): read the n records, then poll."""
    from rivulet import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "fetch.wait.max.ms": 100, "enable.partition.eof": False})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(n)])
    got = 0
    deadline = time.monotonic() + 60
    while got < n and time.monotonic() < deadline:
        got += sum(1 for m in c.consume(1000, 0.5) if m.error() is None)
    time.sleep(1)
    t0, c0 = time.monotonic(), time.process_time()
    while time.monotonic() - t0 < seconds:
        c.consume(1000, 0.5)
    cpu = time.process_time() - c0
    c.close()
    print(f"read {got} of {n}; consumer CPU {cpu:.2f} s over {seconds:.0f} s caught up")


def caught_up(args: argparse.Namespace) -> None:
    from benchmarks.reference.kafka import KafkaReference
    from rivulet import Producer
    from rivulet.admin import AdminClient, NewTopic
    n = args.caught_up
    trees = [str(ROOT)] + ([args.tree] if args.tree else [])
    with KafkaReference() as kafka:
        a = AdminClient({"bootstrap.servers": kafka.bootstrap})
        a.create_topics([NewTopic("caught-up", n, 1)])["caught-up"].result(60)
        a.close()
        p = Producer({"bootstrap.servers": kafka.bootstrap})
        for q in range(n):
            p.produce("caught-up", b"x", partition=q)
        p.flush(60)
        p.close()
        for _ in range(args.pairs):
            for tree in trees:
                load = os.getloadavg()[0]
                out = subprocess.run(
                    [sys.executable, __file__, "--child", kafka.bootstrap, "caught-up", str(n), str(args.seconds)],
                    cwd=tree, env=dict(os.environ, PYTHONPATH=tree), capture_output=True, text=True, timeout=300)
                print(f"{tree}: load {load:.2f}; {out.stdout.strip() or out.stderr.strip()[-500:]}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--caught-up", dest="caught_up", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--tree", help="another checkout to alternate with this one (before/after)")
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        bootstrap, topic, n, seconds = args.child
        caught_up_child(bootstrap, topic, int(n), float(seconds))
    elif args.caught_up:
        caught_up(args)
    else:
        build_costs(args)


if __name__ == "__main__":
    main()
