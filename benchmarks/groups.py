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

    python -m benchmarks.groups                  # starts its own broker
    python -m benchmarks.groups --members 50 --bootstrap host:port
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid

from rivulet.client.admin import parse_bootstrap
from rivulet.client.connection import BrokerConnection
from rivulet.protocol.messages import (
    consumer_protocol_assignment as cpa,
    consumer_protocol_subscription as cps,
    heartbeat_request as hbq,
    join_group_request as jgq,
    sync_group_request as sgq,
)
from rivulet.testing import BrokerProcess

MEMBER_ID_REQUIRED = 79
UNKNOWN_MEMBER_ID = 25


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", help="an already running broker (default: start one)")
    ap.add_argument("--members", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=5.0, help="heartbeat phase length")
    ap.add_argument("--heartbeat-ms", type=int, default=100, help="members' heartbeat interval while joining")
    args = ap.parse_args()
    if args.bootstrap:
        report(args.members, args.heartbeat_ms, asyncio.run(run(args.bootstrap, args.members, args.seconds,
                                                                  args.heartbeat_ms)))
        return
    with BrokerProcess({"group.initial.rebalance.delay.ms": "0"}) as broker:
        wire = asyncio.run(run(broker.bootstrap, args.members, args.seconds, args.heartbeat_ms))
    report(args.members, args.heartbeat_ms, wire)


if __name__ == "__main__":
    main()
