"""librdkafka-shaped statistics for ``stats_cb``: the counters a client keeps, and the JSON.

The document has the layout of librdkafka's STATISTICS.md (top level, ``brokers`` keyed
``host:port/id``, ``topics`` with ``partitions`` keyed by number as a string) for the fields
Rivulet knows; times are microseconds except ``time`` (seconds) and ``metadata_age`` (ms).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from rivulet.client.core import Cluster
from rivulet.common.types import TopicPartition as TP

log = logging.getLogger("rivulet.client")
_instances = itertools.count(1)


@dataclass(slots=True)
class Traffic:
    """Requests and records one way or the other, for a broker or a partition."""
    tx: int = 0
    txbytes: int = 0
    rx: int = 0
    rxbytes: int = 0
    txmsgs: int = 0
    rxmsgs: int = 0
    txerrs: int = 0


@dataclass
class ClientStats:
    client_id: str
    kind: str  # "producer" or "consumer"
    name: str = ""
    created: float = field(default_factory=time.monotonic)
    totals: Traffic = field(default_factory=Traffic)
    brokers: dict[int, Traffic] = field(default_factory=lambda: defaultdict(Traffic))
    partitions: dict[TP, Traffic] = field(default_factory=lambda: defaultdict(Traffic))

    def __post_init__(self) -> None:
        self.name = self.name or f"{self.client_id}#{self.kind}-{next(_instances)}"

    def sent(self, node: int, nbytes: int) -> None:
        """Counted by the producer's sender for each request to a broker."""
        b = self.brokers[node]
        b.tx += 1
        b.txbytes += nbytes
        self.totals.tx += 1
        self.totals.txbytes += nbytes

    def received(self, node: int, nbytes: int = 0) -> None:
        """Counted by the producer's sender for each answer."""
        b = self.brokers[node]
        b.rx += 1
        b.rxbytes += nbytes
        self.totals.rx += 1
        self.totals.rxbytes += nbytes

    def failed(self, node: int) -> None:
        """Counted by the producer's sender for each failed request."""
        self.brokers[node].txerrs += 1

    def records_out(self, tp: TP, count: int, nbytes: int) -> None:
        """Counted by the producer for records acknowledged."""
        p = self.partitions[tp]
        p.txmsgs += count
        p.txbytes += nbytes
        self.totals.txmsgs += count

    def records_in(self, tp: TP, count: int, nbytes: int) -> None:
        """Counted by the consumer's Fetcher for records fetched."""
        p = self.partitions[tp]
        p.rxmsgs += count
        p.rxbytes += nbytes
        self.totals.rxmsgs += count

    def render(self, cluster: Cluster, connected: Callable[[int], bool], msg_cnt: int, msg_size: int,
               queued: Iterable[tuple[TP, int, int]] = (), extra: Mapping[TP, Mapping[str, object]] = {}) -> str:
        """The JSON document; ``queued`` gives (partition, records, bytes) waiting (to be sent, or
        fetched and not yet consumed); ``extra`` more fields per partition (a consumer's offsets)."""
        now = time.monotonic()
        queue: dict[TP, tuple[int, int]] = {tp: (n, size) for tp, n, size in queued}
        brokers = {}
        for node, (host, port) in sorted(cluster.brokers.items()):
            t = self.brokers.get(node, Traffic())
            brokers[f"{host}:{port}/{node}"] = {
                "name": f"{host}:{port}/{node}", "nodeid": node, "nodename": f"{host}:{port}",
                "source": "learned", "state": "UP" if connected(node) else "DOWN",
                "tx": t.tx, "txbytes": t.txbytes, "txerrs": t.txerrs, "rx": t.rx, "rxbytes": t.rxbytes,
                "toppars": {f"{tp[0]}-{tp[1]}": {"topic": tp[0], "partition": tp[1]}
                            for tp in self._led_by(cluster, node)},
            }
        metadata_age_ms = int((now - cluster.updated_at) * 1000) if cluster.updated_at else 0
        topics = {}
        names = {tp[0] for tp in self.partitions} | {tp[0] for tp in queue} | {tp[0] for tp in extra}
        for topic in sorted(names):
            tm = cluster.topics.get(topic)
            parts = {}
            numbers = set(tm.partitions) if tm is not None else set()
            numbers |= {tp[1] for tp in self.partitions if tp[0] == topic}
            for p in sorted(numbers):
                t = self.partitions.get((topic, p), Traffic())
                leader = tm.partitions[p].leader if tm is not None and p in tm.partitions else -1
                n, size = queue.get((topic, p), (0, 0))
                parts[str(p)] = {
                    "partition": p, "broker": leader, "leader": leader, "desired": False, "unknown": False,
                    "msgq_cnt": n, "msgq_bytes": size, "txmsgs": t.txmsgs, "txbytes": t.txbytes,
                    "rxmsgs": t.rxmsgs, "rxbytes": t.rxbytes, "msgs": t.txmsgs + t.rxmsgs + n,
                    **extra.get(TP(topic, p), {}),
                }
            topics[topic] = {"topic": topic, "metadata_age": metadata_age_ms, "partitions": parts}
        doc = {
            "name": self.name, "client_id": self.client_id, "type": self.kind,
            "ts": int(now * 1_000_000), "time": int(time.time()), "age": int((now - self.created) * 1_000_000),
            "msg_cnt": msg_cnt, "msg_size": msg_size, "metadata_cache_cnt": len(cluster.topics),
            "tx": self.totals.tx, "tx_bytes": self.totals.txbytes, "rx": self.totals.rx,
            "rx_bytes": self.totals.rxbytes,
            "txmsgs": self.totals.txmsgs, "txmsg_bytes": sum(p.txbytes for p in self.partitions.values()),
            "rxmsgs": self.totals.rxmsgs, "rxmsg_bytes": sum(p.rxbytes for p in self.partitions.values()),
            "brokers": brokers, "topics": topics,
        }
        return json.dumps(doc)

    @staticmethod
    def _led_by(cluster: Cluster, node: int) -> list[TP]:
        return [(t, p) for t, tm in cluster.topics.items() for p, pm in tm.partitions.items() if pm.leader == node]


async def emit_every(interval: float, render: Callable[[], str], deliver: Callable[[str], None],
                     closed: Callable[[], bool]) -> None:
    """Hand ``render()`` to ``deliver`` every ``interval`` seconds until ``closed()`` (a client's task)."""
    while not closed():
        await asyncio.sleep(interval)
        deliver(render())


def run_stats_cb(cb: Callable[[str], object] | None, doc: str) -> int:
    """Call the application's stats_cb; what it raises is logged, not passed on. Returns 1 (one event served)."""
    try:
        if cb is not None:
            cb(doc)
    except Exception:
        log.exception("stats_cb raised")
    return 1
