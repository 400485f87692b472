"""Rivulet alone under ``benchmarks.compare``'s ``many10k`` consume load, to iterate on it.

Ten topics of 1,000 partitions on one broker, filled once (``--records`` x 1 KiB, acks=1, by
ten ``rdkafka_performance`` producers as ``measure_many10k`` runs them) in ``--data``; each run
restarts the broker on that data and runs ten ``rdkafka_performance`` consumers at once, one
per topic, every partition from the beginning. Most of their Fetches name 1,000 partitions and
carry records for a few (librdkafka keeps no fetch session), so the broker's CPU per Fetch and
per partition named is the figure: CPU from ``/proc`` over the consumers' run, Fetches and
partitions from the broker's own counters (its metrics endpoint). ``--tree`` runs the broker
from another checkout (``PYTHONPATH``), alternating with this one, for before/after pairs;
``RIVULET_NO_SPEEDUPS=1`` in the environment reaches the broker too. ``--py-spy OUT`` records
a raw profile of the broker over each run.

``--caught-up N`` then sends N more Fetches from one connection, each naming one topic's 1,000
partitions at their log end offsets (``max_wait_ms=0``, no session, Fetch v12 as a
sessionless client sends them), so each answers every partition with nothing to read: the
broker's CPU over them, per Fetch and per partition, is what a full fetch of caught-up
partitions costs, without the record reads and sends of the consumers' run.

    python -m benchmarks.consume_many --data /tmp/many10k --rounds 3 --tree /path/to/main --caught-up 200
"""

from __future__ import annotations

import argparse
import os
import urllib.request
from pathlib import Path

from benchmarks import rdkafka_perf
from benchmarks.compare import MANY10K_PARTITIONS_EACH, MANY10K_TOPICS, _create_large, _rdk_parallel
from benchmarks.produce_consume import wait_for_leaders
from benchmarks.produce_many import cpu_seconds, start_py_spy, stop_py_spy
from rivulet.client.blocking import BlockingConnection
from rivulet.protocol.messages import fetch_request as fq, list_offsets_request as loq
from rivulet.testing import BrokerProcess, free_port


def _counters(port: int) -> tuple[float, float]:
    """(consumer Fetch requests answered, partitions they named) from the metrics endpoint."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    fetches = partitions = 0.0
    for line in text.splitlines():
        if line.startswith("kafka_network_requestmetrics_requests_total{") and 'request="FetchConsumer"' in line:
            fetches += float(line.rsplit(" ", 1)[1])
        elif line.startswith("kafka_server_brokertopicmetrics_totalfetchrequests_total{"):
            partitions += float(line.rsplit(" ", 1)[1])
    return fetches, partitions


CAUGHT_UP_VERSION = 12  # topics by name; the version librdkafka's sessionless Fetches resemble


def _caught_up(bs: str, pid: int, topics: list[str], count: int) -> tuple[float, int]:
    """Broker CPU over ``count`` Fetches of caught-up partitions (round robin over ``topics``),
    and the partitions they named."""
    host, port = bs.rsplit(":", 1)
    conn = BlockingConnection(host, int(port))
    try:
        ends = conn.request(loq.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
            loq.ListOffsetsTopic(name=t, partitions=[loq.ListOffsetsPartition(partition_index=i, timestamp=-1)
                                                     for i in range(MANY10K_PARTITIONS_EACH)])
            for t in topics]), 5)
        requests = [fq.FetchRequest(
            replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=50 << 20, isolation_level=0, session_id=0,
            session_epoch=-1, forgotten_topics_data=[], rack_id="",
            topics=[fq.FetchTopic(topic=t.name, partitions=[
                fq.FetchPartition(partition=p.partition_index, current_leader_epoch=-1, fetch_offset=p.offset,
                                  last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)
                for p in t.partitions])]) for t in ends.topics]
        cpu0 = cpu_seconds(pid)
        named = 0
        for i in range(count):
            req = requests[i % len(requests)]
            answer = conn.request(req, CAUGHT_UP_VERSION)
            named += len(req.topics[0].partitions)
            if any(p.records for t in answer.responses for p in t.partitions):
                raise RuntimeError("a caught-up Fetch carried records")
        return cpu_seconds(pid) - cpu0, named
    finally:
        conn.close()


def _broker(data: str, tree: str) -> tuple[BrokerProcess, int]:
    # The broker's rivulet comes from this checkout: ``python -m`` puts the working directory
    # ahead of PYTHONPATH, so the broker starts in it.
    os.environ["PYTHONPATH"] = tree
    port = free_port()
    b = BrokerProcess({"inter.broker.listener.name": "PLAINTEXT", "metrics.listener": f"http://127.0.0.1:{port}"},
                      data_dir=data)
    here = os.getcwd()
    os.chdir(tree)
    try:
        return b.start(timeout=300), port  # loading 10,000 partitions takes long on a busy machine
    finally:
        os.chdir(here)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="the broker's data dir, filled on first use")
    ap.add_argument("--records", type=int, default=30_000, help="records of 1 KiB per topic")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tree", help="another checkout to alternate with this one (before/after)")
    ap.add_argument("--py-spy", dest="py_spy", help="write a raw py-spy profile of each run here (suffixed .ROUND.TREE)")
    ap.add_argument("--caught-up", dest="caught_up", type=int, default=0,
                    help="then this many Fetches of 1,000 caught-up partitions each")
    ap.add_argument("--only-caught-up", dest="only_caught_up", action="store_true",
                    help="skip the consumers: only the caught-up Fetches")
    args = ap.parse_args()
    rdkafka_perf.require_binary()
    here = str(Path(__file__).resolve().parent.parent)
    topics = [f"many10k-{i}" for i in range(MANY10K_TOPICS)]
    if not (Path(args.data) / "filled").exists():
        Path(args.data).mkdir(parents=True, exist_ok=True)
        broker, _ = _broker(args.data, here)
        try:
            _create_large(broker.bootstrap, topics, MANY10K_PARTITIONS_EACH, 600)
            _rdk_parallel([rdkafka_perf.producer_args(broker.bootstrap, t, args.records, 1024, "1") for t in topics],
                          rdkafka_perf.parse_producer, args.records)
        finally:
            broker.stop()
        (Path(args.data) / "filled").touch()
    trees = [here] if args.tree is None else [args.tree, here]
    for r in range(args.rounds):
        for tree in trees:
            broker, port = _broker(args.data, tree)
            try:
                bs = broker.bootstrap
                wait_for_leaders(bs, topics)
                assert broker.proc is not None
                pid = broker.proc.pid
                spy = start_py_spy(pid, args.py_spy and f"{args.py_spy}.{r}.{Path(tree).name}")
                if not args.only_caught_up:
                    load = os.getloadavg()[0]
                    f0, p0 = _counters(port)
                    cpu0, loop0 = cpu_seconds(pid), cpu_seconds(pid, pid)
                    rate = _rdk_parallel([rdkafka_perf.consumer_args(bs, t, MANY10K_PARTITIONS_EACH, args.records)
                                          for t in topics], rdkafka_perf.parse_consumer, args.records)
                    cpu, loop = cpu_seconds(pid) - cpu0, cpu_seconds(pid, pid) - loop0
                    f1, p1 = _counters(port)
                caught_up = _caught_up(bs, pid, topics, args.caught_up) if args.caught_up else None
                stop_py_spy(spy)
            finally:
                broker.stop()
            if not args.only_caught_up:
                fetches, parts = f1 - f0, p1 - p0
                print(f"round {r + 1} {tree}: {rate.records_per_sec:,.0f} records/s; broker CPU {cpu:.2f} s "
                      f"(loop thread {loop:.2f} s), {fetches:.0f} Fetches naming {parts:,.0f} partitions: "
                      f"{cpu / fetches * 1e3:.2f} ms a Fetch, {cpu / parts * 1e6:.2f} us a partition named, "
                      f"{cpu / (args.records * len(topics)) * 1e6:.2f} us a record; 1-minute load average "
                      f"{load:.2f} -> {os.getloadavg()[0]:.2f}", flush=True)
            if caught_up is not None:
                cu_cpu, cu_named = caught_up
                print(f"round {r + 1} {tree}: {args.caught_up} Fetches of caught-up partitions: broker CPU {cu_cpu:.2f} s, "
                      f"{cu_cpu / args.caught_up * 1e3:.2f} ms a Fetch, {cu_cpu / cu_named * 1e6:.2f} us a partition; "
                      f"1-minute load average {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
