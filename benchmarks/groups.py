"""Group coordinator figures against a Rivulet broker process.

* rebalance: N members (one connection each, Rivulet's own client) start at once and run a
  consumer's group loop (join, sync, heartbeat every --heartbeat-ms, rejoin on
  REBALANCE_IN_PROGRESS); the time until every member is synced on the same generation, i.e.
  the group is Stable with all N. The initial rebalance delay is 0, so the figure is the
  coordinator's work plus the rejoin round trips, not a configured wait.
* heartbeats: the N members then heartbeat as fast as the broker answers (a window of
  requests in flight per connection) for a few seconds; answered heartbeats per second. The
  client is Python on the same machine, so this is a lower bound for the broker.
* in-process: the same two figures for the coordinator object alone (no sockets, no codec).

* protocols (``--compare-protocols``): classic (librdkafka's eager range, and
  cooperative-sticky) against KIP-848's consumer protocol, with confluent-kafka consumers that
  consume a topic of 2 x N partitions fed all along: N members form the group (start -> every
  partition owned), then one more joins, then one leaves. For each change, the time until
  the group settles, and the consumption pause: how long the partitions that changed hands (or,
  eager, all of them) had no owner, the longest and the sum. Every member's rebalance callbacks
  run in this process, polled in turn; timings are those callbacks'.

    python -m benchmarks.groups                  # starts its own broker
    python -m benchmarks.groups --members 50 --bootstrap host:port
    python -m benchmarks.groups --compare-protocols --members 10 50
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid

from rivulet.client.config import parse_bootstrap
from rivulet.client.connection import BrokerConnection
from rivulet.protocol.messages import (
    consumer_protocol_assignment as cpa,
    consumer_protocol_subscription as cps,
    find_coordinator_request as fcq,
    heartbeat_request as hbq,
    join_group_request as jgq,
    sync_group_request as sgq,
)
from rivulet.testing import BrokerProcess

MEMBER_ID_REQUIRED = 79
UNKNOWN_MEMBER_ID = 25
# protocol_run gives up waiting for a change to settle after this many seconds (and reports them).
SETTLE_TIMEOUT = 120.0


def subscription(topic: str) -> bytes:
    return b"\x00\x01" + cps.ConsumerProtocolSubscription(topics=[topic], user_data=None,
                                                          owned_partitions=[]).encode(1)


def assignment(topic: str, partitions: list[int]) -> bytes:
    return b"\x00\x01" + cpa.ConsumerProtocolAssignment(
        assigned_partitions=[cpa.TopicPartition(topic=topic, partitions=partitions)], user_data=None).encode(1)


class Member:
    """A consumer's group loop: join, sync (the leader assigns one partition each), heartbeat,
    and rejoin whenever a heartbeat or sync says a rebalance is in progress."""

    def __init__(self, conn: BrokerConnection, group: str, heartbeat_ms: int) -> None:
        self.c = conn
        self.group = group
        self.heartbeat_ms = heartbeat_ms
        self.member_id = ""
        self.generation = -1
        self.synced_generation = -1
        self.stop = False
        self.rebalances = 0

    async def join(self) -> object:
        req = jgq.JoinGroupRequest(group_id=self.group, session_timeout_ms=30000, rebalance_timeout_ms=60000,
                                   member_id=self.member_id, group_instance_id=None, protocol_type="consumer",
                                   protocols=[jgq.JoinGroupRequestProtocol(name="range",
                                                                           metadata=subscription("bench-topic"))])
        r = await self.c.send(req, version=9)
        if r.error_code == MEMBER_ID_REQUIRED:
            req.member_id = r.member_id
            r = await self.c.send(req, version=9)
        return r

    async def run(self) -> None:
        while not self.stop:
            j = await self.join()
            if j.error_code:
                if j.error_code == UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                await asyncio.sleep(0.01)
                continue
            self.member_id, self.generation = j.member_id, j.generation_id
            self.rebalances += 1
            plan = [sgq.SyncGroupRequestAssignment(member_id=m.member_id,
                                                   assignment=assignment("bench-topic", [i]))
                    for i, m in enumerate(j.members)]  # empty unless this member leads
            s = await self.c.send(sgq.SyncGroupRequest(
                group_id=self.group, generation_id=self.generation, member_id=self.member_id,
                group_instance_id=None, protocol_type="consumer", protocol_name="range", assignments=plan), version=5)
            if s.error_code:
                continue
            self.synced_generation = self.generation
            while not self.stop:
                await asyncio.sleep(self.heartbeat_ms / 1000)
                h = await self.c.send(hbq.HeartbeatRequest(group_id=self.group, generation_id=self.generation,
                                                           member_id=self.member_id, group_instance_id=None),
                                      version=4)
                if h.error_code:
                    self.synced_generation = -1
                    break


async def rebalance(host: str, port: int, group: str, n: int, heartbeat_ms: int) -> tuple[float, list, int]:
    """Seconds from the first JoinGroup until all n members are synced on one generation."""
    conns = [await BrokerConnection(host, port, f"bench-{i}").connect() for i in range(n)]
    # As clients do, untimed: the first FindCoordinator has the broker make __consumer_offsets.
    while True:
        found = await conns[0].send(fcq.FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), version=4)
        if found.coordinators[0].error_code == 0:
            break
        await asyncio.sleep(0.05)
    members = [Member(c, group, heartbeat_ms) for c in conns]
    t0 = time.perf_counter()
    tasks = [asyncio.get_running_loop().create_task(m.run()) for m in members]
    while True:
        gens = {m.synced_generation for m in members}
        if len(gens) == 1 and -1 not in gens:
            break
        await asyncio.sleep(0.002)
    elapsed = time.perf_counter() - t0
    for m in members:
        m.stop = True
    await asyncio.gather(*tasks)
    return elapsed, members, members[0].generation


async def heartbeats(members: list, group: str, seconds: float, window: int = 16) -> float:
    done = 0
    stop = time.perf_counter() + seconds

    async def member(m: Member) -> None:
        nonlocal done
        c = m.c
        req = hbq.HeartbeatRequest(group_id=group, generation_id=m.generation, member_id=m.member_id,
                                   group_instance_id=None)

        async def one() -> None:
            nonlocal done
            while time.perf_counter() < stop:
                r = await c.send(req, version=4)
                assert r.error_code == 0, r.error_code
                done += 1

        await asyncio.gather(*(one() for _ in range(window)))

    t0 = time.perf_counter()
    await asyncio.gather(*(member(m) for m in members))
    return done / (time.perf_counter() - t0)


def in_process(n: int, heartbeats_total: int = 200_000) -> tuple[float, float]:
    """Stable time and heartbeats/s of the coordinator object itself (fake log, manual timer)."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit"))
    from test_group_support import Member, make_coordinator

    c, b = make_coordinator()
    members = [Member(c, "g", f"m{i}", session_timeout_ms=30000) for i in range(n)]
    t0 = time.perf_counter()
    for m in members:
        m.join_fully()
    while members[0].join_result.error != 0:
        b.advance(1)
    leader = next(m for m in members if m.join_result.members)
    for m in members:
        if m is not leader:
            m.sync()
    leader.sync({m.member_id: b"a" for m in members})
    stable = time.perf_counter() - t0
    assert c.manager.get_group("g").state.value == "Stable"
    t0 = time.perf_counter()
    for i in range(heartbeats_total):
        members[i % n].heartbeat()
    return stable, heartbeats_total / (time.perf_counter() - t0)


async def run(bootstrap: str, n: int, seconds: float, heartbeat_ms: int) -> tuple[float, int, float]:
    host, port = parse_bootstrap(bootstrap)[0]
    group = f"bench-{uuid.uuid4().hex[:8]}"
    elapsed, members, generation = await rebalance(host, port, group, n, heartbeat_ms)
    rate = await heartbeats(members, group, seconds)
    for m in members:
        await m.c.close()
    return elapsed, generation, rate


def report(n: int, heartbeat_ms: int, wire: tuple[float, int, float]) -> None:
    elapsed, generation, rate = wire
    stable_ip, rate_ip = in_process(n)  # outside the event loop: the fake broker loads synchronously
    print(f"{'figure':<44} {'value':>14}")
    print(f"{f'{n} members start -> all synced, Stable (wire)':<44} {elapsed * 1000:>11.1f} ms")
    print(f"{'  generations it took / heartbeat interval':<44} {generation:>8} / {heartbeat_ms} ms")
    print(f"{'heartbeats answered per second (wire)':<44} {rate:>12,.0f}/s")
    print(f"{f'{n} members: join -> Stable (in-process)':<44} {stable_ip * 1000:>11.1f} ms")
    print(f"{'heartbeats per second (in-process)':<44} {rate_ip:>12,.0f}/s")


class Ownership:
    """Who owns each partition and since when, from the members' callbacks."""

    def __init__(self) -> None:
        self.owner: dict[int, str] = {}
        self.released: dict[int, float] = {}  # partition -> when its owner let it go
        self.gaps: list[float] = []  # how long each handed-over partition had no owner

    def callbacks(self, name: str) -> dict:
        def on_assign(_c: object, parts: list) -> None:
            now = time.perf_counter()
            for tp in parts:
                self.owner[tp.partition] = name
                if tp.partition in self.released:
                    self.gaps.append(now - self.released.pop(tp.partition))

        def on_revoke(_c: object, parts: list) -> None:
            now = time.perf_counter()
            for tp in parts:
                if self.owner.get(tp.partition) == name:
                    del self.owner[tp.partition]
                    self.released[tp.partition] = now
        return {"on_assign": on_assign, "on_revoke": on_revoke, "on_lost": on_revoke}


def protocol_run(bootstrap: str, n: int, protocol: str, strategy: str,
                 changes: tuple[str, ...] = ("join", "leave")) -> dict[str, tuple[float, float, float]]:
    """{change: (seconds to settle, longest pause, summed pause)} for start, then each of
    ``changes`` (join, leave) in turn."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    partitions = 2 * n
    topic, group = f"bench-{uuid.uuid4().hex[:8]}", f"bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    # The clock starts once every partition takes a write. A broker still creating the topic's
    # logs holds the members' first joins back and then lets them in at once, in one generation
    # (Kafka 4.3.1 took 2.8 s for 200 partitions on a busy machine); Rivulet's are there at
    # once and the members join as they start. Either way that is topic creation, not the group.
    for i in range(partitions):
        producer.produce(topic, b"x", partition=i)
    if producer.flush(60):
        raise RuntimeError(f"{topic}: not every partition took a write within 60 s")
    own = Ownership()
    members: dict[str, Consumer] = {}

    def add(name: str) -> None:
        conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "latest",
                "enable.auto.commit": False, "group.protocol": protocol}
        if protocol == "classic":
            conf["partition.assignment.strategy"] = strategy
        members[name] = Consumer(conf)
        members[name].subscribe([topic], **own.callbacks(name))

    def settle(settled) -> float:
        t0 = fed = time.perf_counter()
        while not settled() and time.perf_counter() - t0 < SETTLE_TIMEOUT:
            if time.perf_counter() - fed >= 0.5:  # a record per partition twice a second: a feed, not a load
                fed = time.perf_counter()
                for i in range(partitions):
                    producer.produce(topic, b"x", partition=i)
            producer.poll(0)
            for c in list(members.values()):
                c.poll(0)
            time.sleep(0.005)
        return time.perf_counter() - t0

    def spread() -> bool:
        return len(own.owner) == partitions and set(own.owner.values()) == set(members) and not own.released

    out: dict[str, tuple[float, float, float]] = {}
    for i in range(n):
        add(f"m{i}")
    took = settle(spread)
    out["start"] = (took, 0.0, 0.0)
    for change in changes:
        own.gaps.clear()
        if change == "join":
            add(f"m{n}")
        else:
            members.pop("m0").close()
        took = settle(spread)
        out[change] = (took, max(own.gaps, default=0.0), sum(own.gaps))
    for c in members.values():
        c.close()
    producer.flush(10)
    return out


def compare_protocols(bootstrap: str, sizes: list[int]) -> None:
    runs = [("classic", "range"), ("classic", "cooperative-sticky"), ("consumer", "-")]
    print(f"{'members':>7} {'protocol':<30} {'change':<6} {'settled':>9} {'longest pause':>14} {'summed pause':>13}")
    for n in sizes:
        for protocol, strategy in runs:
            label = protocol if protocol == "consumer" else f"classic ({strategy})"
            for change, (took, longest, summed) in protocol_run(bootstrap, n, protocol, strategy).items():
                print(f"{n:>7} {label:<30} {change:<6} {took:>8.2f}s {longest:>13.2f}s {summed:>12.2f}s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", help="an already running broker (default: start one)")
    ap.add_argument("--members", type=int, nargs="+", default=[50])
    ap.add_argument("--compare-protocols", action="store_true",
                    help="classic against KIP-848's consumer protocol, with confluent-kafka")
    ap.add_argument("--seconds", type=float, default=5.0, help="heartbeat phase length")
    ap.add_argument("--heartbeat-ms", type=int, default=100, help="members' heartbeat interval while joining")
    args = ap.parse_args()
    if args.compare_protocols:
        if args.bootstrap:
            compare_protocols(args.bootstrap, args.members)
            return
        with BrokerProcess({"group.initial.rebalance.delay.ms": "0"}) as broker:
            compare_protocols(broker.bootstrap, args.members)
        return
    n = args.members[0]
    if args.bootstrap:
        report(n, args.heartbeat_ms, asyncio.run(run(args.bootstrap, n, args.seconds, args.heartbeat_ms)))
        return
    with BrokerProcess({"group.initial.rebalance.delay.ms": "0"}) as broker:
        wire = asyncio.run(run(broker.bootstrap, n, args.seconds, args.heartbeat_ms))
    report(n, args.heartbeat_ms, wire)


if __name__ == "__main__":
    main()
