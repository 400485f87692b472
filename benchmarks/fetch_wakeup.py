"""Inside the broker: from a Produce request's arrival to the waiting Fetch's answer written.

The end-to-end figures (``produce_consume.latency``) carry the producer's linger, the clients'
threads and, on a shared machine, its scheduling; this times the broker's own part of them. A
broker is started with its connection and replica manager wrapped to take clock readings (the
Produce frame parsed, the DelayedFetch completed, each answer handed to the socket), loaded by
``produce_consume.latency`` on one partition, and for each Produce the delays to the events
that follow it are reported as percentiles:

    python -m benchmarks.fetch_wakeup --rate 50000 --seconds 4 [--rounds 3]

The wrapping adds a few microseconds per request; it is the same on any tree measured.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import runpy
import sys
import tempfile
import time
import uuid

EVENTS = ("fetch_completed", "sent_fetch", "sent_produce")


def _serve(argv: list[str]) -> None:
    """The broker process: wrap, then run ``python -m rivulet ...`` as given after ``--``."""
    import rivulet.replication.replica_manager as rm
    import rivulet.server.network as net

    clock = time.perf_counter
    events: list[tuple[str, float]] = []
    on_frame, flush, on_complete = net.KafkaConnection._on_frame, net.KafkaConnection._flush, rm.DelayedFetch.on_complete

    def timed_on_frame(self: net.KafkaConnection, frame: bytearray) -> None:
        if frame[0] == 0 and frame[1] == 0:  # API key 0: Produce
            events.append(("produce", clock()))
        on_frame(self, frame)

    def timed_flush(self: net.KafkaConnection) -> None:
        keys = [s.header.api_key for s in self.pending if s.ready]
        flush(self)
        now = clock()
        events.extend((("sent_produce", "sent_fetch")[k], now) for k in keys if k in (0, 1))

    def timed_on_complete(self: rm.DelayedFetch) -> None:
        events.append(("fetch_completed", clock()))
        on_complete(self)

    net.KafkaConnection._on_frame = timed_on_frame  # type: ignore[method-assign]
    net.KafkaConnection._flush = timed_flush  # type: ignore[method-assign]
    rm.DelayedFetch.on_complete = timed_on_complete  # type: ignore[method-assign]
    out = os.environ["FETCH_WAKEUP_OUT"]
    atexit.register(lambda: json.dump(events, open(out, "w")))
    rest = argv[argv.index("--") + 1:]
    sys.argv = ["rivulet", *rest[rest.index("rivulet") + 1:]]
    runpy.run_module("rivulet", run_name="__main__")


def delays(events: list[tuple[str, float]]) -> dict[str, list[float]]:
    """For each Produce followed by a completed fetch and both answers before the next
    Produce: ms from its arrival to each event."""
    out: dict[str, list[float]] = {e: [] for e in EVENTS}
    for i, (kind, t) in enumerate(events):
        if kind != "produce":
            continue
        seen: dict[str, float] = {}
        for kind2, t2 in events[i + 1:]:
            if kind2 == "produce":
                break
            seen.setdefault(kind2, t2)
        if all(e in seen for e in EVENTS):
            for e in EVENTS:
                out[e].append((seen[e] - t) * 1000)
    return out


def run(rate: int, seconds: float) -> dict[str, object]:
    from benchmarks.produce_consume import create_topic, latency
    from rivulet.testing import BrokerProcess

    with tempfile.TemporaryDirectory(prefix="fetch-wakeup-") as d:
        out = os.path.join(d, "events.json")
        os.environ["FETCH_WAKEUP_OUT"] = out
        broker = BrokerProcess(prefix=[sys.executable, "-m", "benchmarks.fetch_wakeup", "--serve", "--"])
        with broker:
            warm = f"warm-{uuid.uuid4().hex[:6]}"
            create_topic(broker.bootstrap, warm, 1)
            latency(broker.bootstrap, warm, rate, 1.0, linger_ms=5)
            topic = f"lat-{uuid.uuid4().hex[:6]}"
            create_topic(broker.bootstrap, topic, 1)
            load = os.getloadavg()[0]
            e2e = latency(broker.bootstrap, topic, rate, seconds, linger_ms=5)
            broker.stop()  # a clean exit writes the events
        with open(out) as f:
            d_ms = delays([tuple(e) for e in json.load(f)])

    def pct(v: list[float], q: float) -> float:
        v = sorted(v)
        return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")
    return {"rate": rate, "load": round(load, 2), "produces": len(d_ms["sent_fetch"]),
            "end_to_end_p50": round(e2e["p50"], 3), "end_to_end_p99": round(e2e["p99"], 3),
            **{f"{e}_{q}": round(pct(v, p), 3) for e, v in d_ms.items() for q, p in (("p50", .5), ("p90", .9))}}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        _serve(sys.argv)
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=int, action="append", help="msg/s (repeatable; default 5000 and 50000)")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    for _ in range(args.rounds):
        for rate in args.rate or [5000, 50000]:
            print(json.dumps(run(rate, args.seconds)), flush=True)


if __name__ == "__main__":
    main()
