"""Durable share-partition state (KIP-932's share coordinator, ``__share_group_state``): a broker
killed with kill -9 and started again on its data keeps what members acknowledged, and the
records they held acquired come back."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from rivulet.testing import BrokerProcess
from tests.cluster import eventually, three_brokers
from tests.integration.test_replication_faults import BROKER_CONFIG
from tests.integration.test_share_groups import share_topic

# A member in explicit acknowledgement mode: it accepts the records of its first poll at even
# offsets, holds the others acquired, commits, reports both and waits to be killed.
MEMBER = r"""
import json, sys
from confluent_kafka import AcknowledgeType, ShareConsumer
bootstrap, topic, group = sys.argv[1:4]
c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"})
c.subscribe([topic])
while True:
    got = [m for m in c.poll(1.0) if m.error() is None]
    if len(got) >= 2:
        break
    for m in got:  # too few to split: handed back (explicit mode acknowledges all before the next poll)
        c.acknowledge(m, AcknowledgeType.RELEASE)
    if got:
        c.commit_sync(30)
acked = [m for m in got if m.offset() % 2 == 0]
held = [m for m in got if m.offset() % 2 == 1]
for m in acked:
    c.acknowledge(m, AcknowledgeType.ACCEPT)
result = c.commit_sync(30)
assert all(v is None for v in result.values()), result
print(json.dumps({"acked": [[m.value().decode(), m.partition()] for m in acked],
                  "held": [[m.value().decode(), m.partition()] for m in held]}), flush=True)
sys.stdin.read()
"""


SHARE_GROUP_CONFIG = {"group.share.min.heartbeat.interval.ms": "500", "group.share.heartbeat.interval.ms": "500",
                      "group.share.min.session.timeout.ms": "6000", "group.share.session.timeout.ms": "6000"}


def start_member(bootstrap: str, topic: str, group: str) -> tuple[subprocess.Popen, dict]:
    """The member of ``MEMBER`` and what it reported: values acknowledged and held, with partitions."""
    member = subprocess.Popen([sys.executable, "-c", MEMBER, bootstrap, topic, group],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = member.stdout.readline()
    assert line, f"the member reported nothing (exit {member.poll()})"
    return member, json.loads(line)


def check_state_kept(bootstrap: str, topic: str, group: str, n: int, report: dict) -> None:
    """A new member never gets an acknowledged record, and gets every held one again (delivered
    a second time where their state was written) and every other record."""
    from confluent_kafka import ShareConsumer

    acked, held = {v for v, _ in report["acked"]}, {v for v, _ in report["held"]}
    assert acked and held
    # Held records of a partition with acknowledged ones were written with it (as Available).
    written = {v for v, p in report["held"] if p in {q for _, q in report["acked"]}}
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.subscribe([topic])
        expected = {str(i) for i in range(n)} - acked
        seen: dict[str, int] = {}

        def poll() -> None:
            for m in consumer.poll(0.5):
                if m.error() is None:
                    seen.setdefault(m.value().decode(), m.delivery_count())
        deadline = time.monotonic() + 90
        while not expected <= seen.keys():
            assert time.monotonic() < deadline, f"missing: {sorted(expected - seen.keys())}"
            poll()
        settle = time.monotonic() + 3  # nothing acknowledged turns up later either
        while time.monotonic() < settle:
            poll()
        assert not acked & seen.keys(), f"acknowledged records delivered again: {sorted(acked & seen.keys())}"
        assert all(seen[v] == 2 for v in written), {v: seen[v] for v in written}
    finally:
        consumer.close()


@pytest.mark.integration
def test_kill_9_keeps_acknowledged_share_state_and_brings_back_acquired_records():
    """confluent-kafka's ShareConsumer acknowledges some records and holds others; the broker is
    killed with kill -9 (the member too) and started again on its data: the state is as the
    member left it."""
    b = BrokerProcess(SHARE_GROUP_CONFIG)
    b.start()
    member = None
    try:
        topic, group, n = "share-durable", "share-durable", 40
        share_topic(b.bootstrap, topic, group, n)
        member, report = start_member(b.bootstrap, topic, group)
        b.kill()  # kill -9: no controlled shutdown, no flush
        member.kill()
        member.wait()
        b.start()
        check_state_kept(b.bootstrap, topic, group, n, report)
    finally:
        if member is not None and member.poll() is None:
            member.kill()
        b.cleanup()


@pytest.mark.integration
@pytest.mark.cluster
def test_share_state_survives_a_leader_change(zk_connect):
    """Three brokers: the share partition's leader is killed with kill -9 while a member holds
    records; the new leader reads the state from the share coordinator (``__share_group_state``
    replicated three times, its coordinator here or on another broker) and goes on from it."""
    config = {**BROKER_CONFIG, **SHARE_GROUP_CONFIG, "share.coordinator.state.topic.num.partitions": "3"}
    with three_brokers(zk_connect, **config) as cluster:
        topic, group, n = "share-ha", "share-ha", 40
        share_topic(cluster.bootstrap, topic, group, n, partitions=1, replication_factor=3)
        eventually(lambda: sorted(cluster.partition_state(topic, 0)["isr"]) == [1, 2, 3], what="a full ISR")
        member, report = start_member(cluster.bootstrap, topic, group)
        try:
            leader = cluster.partition_state(topic, 0)["leader"]
            cluster.brokers[leader].kill()
            member.kill()
            member.wait()
            eventually(lambda: cluster.partition_state(topic, 0)["leader"] not in (leader, -1), 60, "a new leader")
            live = ",".join(b.bootstrap for i, b in cluster.brokers.items() if i != leader)
            check_state_kept(live, topic, group, n, report)
        finally:
            if member.poll() is None:
                member.kill()
