"""The broker's CPU per Fetch of many caught-up partitions, with and without a fetch session.

One topic of ``--partitions`` partitions (empty: every fetch position is the log end) on one
broker; from one connection, ``--fetches`` Fetches (v17, topic ids, ``max_wait_ms=0``) of:

- ``sessionless``: epoch -1, every partition named, every one answered (librdkafka's shape);
- ``full``: epoch 0, the same request opening a new session each time (the old one closed);
- ``incremental``: one session opened once, then epochs 1, 2, ... naming no partition, answered
  none (Java's consumer, franz-go, kafka-python once caught up).

Broker CPU from ``/proc`` over each kind, per Fetch and per partition in the session or named.
``--tree`` runs a second broker from another checkout, alternating with this one (a checkout
without sessions answers the incremental kind FETCH_SESSION_ID_NOT_FOUND: skipped there).

``--consumer SECONDS`` then runs Rivulet's consumer (this checkout's, which opens a session
wherever the broker keeps them) on every partition, caught up, ``fetch.wait.max.ms=100``, for
that long: the broker's CPU over the span, per second, and the consumer's incremental Fetches.
``--rdkafka SECONDS`` then does the same with librdkafka's consumer (confluent-kafka), which keeps
no fetch session: each of its waiting Fetches names every partition.

    python -m benchmarks.fetch_session_broker --partitions 1000 --fetches 300 --rounds 2 --tree /path/to/main
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from benchmarks.compare import _create_large
from benchmarks.produce_many import cpu_seconds
from rivulet.client.blocking import BlockingConnection
from rivulet.protocol.messages import fetch_request as fq, metadata_request as mq
from rivulet.testing import BrokerProcess

VERSION = 17
TOPIC = "fetch-sessions"


def _request(topic_id, partitions: int, session_id: int, epoch: int, named: bool) -> fq.FetchRequest:
    return fq.FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=50 << 20, isolation_level=0, session_id=session_id,
        session_epoch=epoch, forgotten_topics_data=[], rack_id="",
        topics=[fq.FetchTopic(topic=TOPIC, topic_id=topic_id, partitions=[
            fq.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                              log_start_offset=-1, partition_max_bytes=1 << 20)
            for p in range(partitions)])] if named else [])


def _run(bs: str, pid: int, partitions: int, fetches: int) -> dict[str, float | None]:
    host, port = bs.rsplit(":", 1)
    conn = BlockingConnection(host, int(port))
    out: dict[str, float | None] = {}
    try:
        md = conn.request(mq.MetadataRequest(topics=None), 12)
        tid = next(t.topic_id for t in md.topics if t.name == TOPIC)
        every = _request(tid, partitions, 0, -1, True)
        cpu0 = cpu_seconds(pid)
        for _ in range(fetches):
            answer = conn.request(every, VERSION)
            assert sum(len(t.partitions) for t in answer.responses) == partitions
        out["sessionless"] = cpu_seconds(pid) - cpu0
        sid = 0
        cpu0 = cpu_seconds(pid)
        for _ in range(fetches):
            answer = conn.request(_request(tid, partitions, sid, 0, True), VERSION)
            sid = answer.session_id
        out["full"] = cpu_seconds(pid) - cpu0
        if sid == 0:  # a broker that keeps no session
            out["incremental"] = None
            return out
        nothing = _request(tid, partitions, sid, 1, False)
        cpu0 = cpu_seconds(pid)
        for epoch in range(1, fetches + 1):
            nothing.session_epoch = epoch
            answer = conn.request(nothing, VERSION)
            assert answer.error_code == 0 and not answer.responses
        out["incremental"] = cpu_seconds(pid) - cpu0
        return out
    finally:
        conn.close()


def _consumer(bs: str, pid: int, partitions: int, seconds: float) -> tuple[float, int]:
    """Broker CPU while a caught-up consumer polls, and how many of its Fetches were incremental."""
    import time

    from rivulet import OFFSET_END, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bs, "fetch.wait.max.ms": 100, "enable.partition.eof": False,
                  "group.id": "fetch-session-broker"})
    c.assign([TopicPartition(TOPIC, p, OFFSET_END) for p in range(partitions)])
    try:
        end = time.monotonic() + 3
        while time.monotonic() < end:  # positions found, a session opened
            c.consume(100, 0.2)
        sessions = c._aio.fetcher.sessions

        def incremental() -> int:
            return sum(h.incremental_requests for h in list(sessions.values()))

        i0 = incremental()
        cpu0 = cpu_seconds(pid)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            assert not c.consume(100, 0.2)
        cpu = cpu_seconds(pid) - cpu0
        return cpu, incremental() - i0
    finally:
        c.close()


def _rdkafka(bs: str, pid: int, partitions: int, seconds: float) -> float:
    """Broker CPU while librdkafka's consumer, caught up, polls (sessionless waiting Fetches)."""
    import time

    from confluent_kafka import OFFSET_END, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bs, "fetch.wait.max.ms": 100, "enable.partition.eof": False,
                  "group.id": "fetch-session-broker-rd"})
    c.assign([TopicPartition(TOPIC, p, OFFSET_END) for p in range(partitions)])
    try:
        end = time.monotonic() + 3
        while time.monotonic() < end:  # positions found
            c.consume(100, 0.2)
        cpu0 = cpu_seconds(pid)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            assert not c.consume(100, 0.2)
        return cpu_seconds(pid) - cpu0
    finally:
        c.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--fetches", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--tree", help="another checkout to alternate with this one (before/after)")
    ap.add_argument("--consumer", type=float, default=0.0, help="then a caught-up consumer for this many seconds")
    ap.add_argument("--rdkafka", type=float, default=0.0,
                    help="then a caught-up librdkafka consumer (no fetch session) for this many seconds")
    args = ap.parse_args()
    here = str(Path(__file__).resolve().parent.parent)
    trees = [here] if args.tree is None else [args.tree, here]
    for r in range(args.rounds):
        for tree in trees:
            os.environ["PYTHONPATH"] = tree
            broker = BrokerProcess()
            cwd = os.getcwd()
            os.chdir(tree)  # ``python -m`` puts the working directory ahead of PYTHONPATH
            try:
                broker.start(timeout=300)
            finally:
                os.chdir(cwd)
            try:
                _create_large(broker.bootstrap, [TOPIC], args.partitions, 600)
                assert broker.proc is not None
                cpu = _run(broker.bootstrap, broker.proc.pid, args.partitions, args.fetches)
                polled = _consumer(broker.bootstrap, broker.proc.pid, args.partitions, args.consumer) \
                    if args.consumer else None
                rd_cpu = _rdkafka(broker.bootstrap, broker.proc.pid, args.partitions, args.rdkafka) \
                    if args.rdkafka else None
            finally:
                broker.cleanup()
            figures = ", ".join(
                f"{kind} {'-' if s is None else f'{s / args.fetches * 1e3:.2f} ms a Fetch ({s / args.fetches / args.partitions * 1e6:.2f} us a partition)'}"
                for kind, s in cpu.items())
            print(f"round {r + 1} {tree}: {args.partitions} partitions, {args.fetches} Fetches each: {figures}; "
                  f"1-minute load average {os.getloadavg()[0]:.2f}", flush=True)
            if polled is not None:
                c_cpu, c_incremental = polled
                print(f"round {r + 1} {tree}: a caught-up consumer for {args.consumer:.0f} s: broker CPU "
                      f"{c_cpu / args.consumer * 1e3:.0f} ms a second, {c_incremental} incremental Fetches; "
                      f"1-minute load average {os.getloadavg()[0]:.2f}", flush=True)
            if rd_cpu is not None:
                print(f"round {r + 1} {tree}: a caught-up librdkafka consumer for {args.rdkafka:.0f} s: broker CPU "
                      f"{rd_cpu / args.rdkafka * 1e3:.0f} ms a second; "
                      f"1-minute load average {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
