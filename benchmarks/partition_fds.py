"""The descriptors a Rivulet broker holds after producing to many partitions evenly.

Creates ``--topics`` topics of ``--partitions-each`` partitions (the many10k topics' config:
128 KiB indexes), then writes ``--rounds`` batches of ``--per`` 1 KiB records to every
partition (compare.py's even fill, once a round: from the second on each batch gets index
entries), and counts the broker's descriptors by kind from /proc after creation and after
each round. Rivulet only; the process's open-file limit is whatever the shell gives it.

    python -m benchmarks.partition_fds                     # 10 x 1,000 partitions, 2 rounds
    python -m benchmarks.partition_fds --topics 5          # 5,000
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import time

from benchmarks.compare import MANY_TOPIC_CONFIG, _create_large, fill_evenly
from rivulet.testing import BrokerProcess


def fds_by_kind(pid: int) -> dict[str, int]:
    """The process's descriptors: segment files by suffix, sockets, the rest."""
    kinds: collections.Counter[str] = collections.Counter()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:"):
            kinds["socket"] += 1
        elif target.endswith((".log", ".index", ".timeindex", ".txnindex")):
            kinds[target.rsplit(".", 1)[1]] += 1
        else:
            kinds["other"] += 1
    kinds["total"] = sum(kinds.values())
    return dict(kinds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topics", type=int, default=10)
    ap.add_argument("--partitions-each", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--per", type=int, default=10, help="1 KiB records a partition a round (one batch)")
    args = ap.parse_args()
    topics = [f"fds{i}" for i in range(args.topics)]
    out: dict[str, object] = {"open_file_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
                              "partitions": args.topics * args.partitions_each}
    with BrokerProcess() as broker:
        assert broker.proc is not None
        pid = broker.proc.pid
        t0 = time.monotonic()
        _create_large(broker.bootstrap, topics, args.partitions_each, 300.0, MANY_TOPIC_CONFIG)
        out["create_s"] = round(time.monotonic() - t0, 1)
        out["after_create"] = fds_by_kind(pid)
        print(json.dumps(out), flush=True)
        for r in range(args.rounds):
            t0 = time.monotonic()
            try:
                fill_evenly(broker.bootstrap, topics, args.partitions_each, args.per, 1024)
            except RuntimeError as e:
                out[f"round{r + 1}_failed"] = str(e)[:300]
            out[f"round{r + 1}_s"] = round(time.monotonic() - t0, 1)
            out[f"after_round{r + 1}"] = fds_by_kind(pid)
            print(json.dumps(out), flush=True)
            if f"round{r + 1}_failed" in out:
                break
        out["offline"] = "is offline" in broker.output_tail()
        out["load_1min"] = os.getloadavg()[0]
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
