"""Consumer groups with real clients: librdkafka (confluent-kafka), kafka-python and aiokafka
join, rebalance, commit and resume against a real broker process."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

pytestmark = pytest.mark.integration

SESSION_MS = 6000  # the broker's group.min.session.timeout.ms
HEARTBEAT_MS = 500


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(15)


def produce(bootstrap: str, topic: str, n: int, partitions: int, start: int = 0) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    for i in range(start, start + n):
        p.produce(topic, value=str(i).encode(), key=str(i).encode(), partition=i % partitions)
    assert p.flush(30) == 0


def ck_consumer(bootstrap: str, group: str, **extra):
    from confluent_kafka import Consumer
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "session.timeout.ms": SESSION_MS,
                     "heartbeat.interval.ms": HEARTBEAT_MS, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "fetch.wait.max.ms": 50, **extra})


def is_balanced(assignments: list[set], total: int) -> bool:
    union = set().union(*assignments)
    sizes = [len(a) for a in assignments]
    return (len(union) == total == sum(sizes) and max(sizes) - min(sizes) <= 1
            and all(a for a in assignments))


def poll_until(consumers, pred, timeout: float = 40.0) -> None:
    """Poll librdkafka consumers (assignments change only inside poll) until pred() holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in consumers:
            c.poll(0.05)
        if pred():
            return
    raise AssertionError("condition not reached in time")


def ck_assignments(consumers) -> list[set]:
    return [{(tp.topic, tp.partition) for tp in c.assignment()} for c in consumers]


# ---------------------------------------------------------------- confluent-kafka (librdkafka)

def test_confluent_balanced_assignment_and_scaling(broker):
    topic, group = name("t"), name("g")
    create_topic(broker.bootstrap, topic, 6)
    cs = [ck_consumer(broker.bootstrap, group) for _ in range(2)]
    try:
        for c in cs:
            c.subscribe([topic])
        poll_until(cs, lambda: is_balanced(ck_assignments(cs), 6))
        assert sorted(len(a) for a in ck_assignments(cs)) == [3, 3]
        # a third member joins: everyone is rebalanced to two partitions
        cs.append(ck_consumer(broker.bootstrap, group))
        cs[-1].subscribe([topic])
        poll_until(cs, lambda: is_balanced(ck_assignments(cs), 6) and len(ck_assignments(cs)[-1]) == 2)
        assert sorted(len(a) for a in ck_assignments(cs)) == [2, 2, 2]
        # one leaves (LeaveGroup on close): the other two take over its partitions
        cs.pop(0).close()
        poll_until(cs, lambda: is_balanced(ck_assignments(cs), 6))
        assert sorted(len(a) for a in ck_assignments(cs)) == [3, 3]
    finally:
        for c in cs:
            c.close()


def test_confluent_consumes_everything_once_and_commits(broker):
    topic, group = name("t"), name("g")
    create_topic(broker.bootstrap, topic, 6)
    produce(broker.bootstrap, topic, 300, 6)
    cs = [ck_consumer(broker.bootstrap, group) for _ in range(3)]
    seen: list[bytes] = []
    try:
        for c in cs:
            c.subscribe([topic])
        deadline = time.monotonic() + 40
        while len(seen) < 300 and time.monotonic() < deadline:
            for c in cs:
                m = c.poll(0.05)
                if m is not None and m.error() is None:
                    seen.append(m.value())
                    c.commit(message=m, asynchronous=False)
        assert sorted(seen, key=int) == [str(i).encode() for i in range(300)]
        from confluent_kafka import TopicPartition
        committed = cs[0].committed([TopicPartition(topic, p) for p in range(6)], timeout=10)
        assert [tp.offset for tp in committed] == [50] * 6
    finally:
        for c in cs:
            c.close()


def test_cooperative_sticky(broker):
    topic, group = name("t"), name("g")
    create_topic(broker.bootstrap, topic, 6)
    revoked: list[list] = [[], [], []]

    def consumer(i):
        c = ck_consumer(broker.bootstrap, group, **{"partition.assignment.strategy": "cooperative-sticky"})
        c.subscribe([topic], on_revoke=lambda _c, parts: revoked[i].append({(p.topic, p.partition) for p in parts}))
        return c

    cs = [consumer(0), consumer(1)]
    try:
        poll_until(cs, lambda: is_balanced(ck_assignments(cs), 6))
        before = ck_assignments(cs)
        seen_revokes = [len(r) for r in revoked]
        cs.append(consumer(2))
        poll_until(cs, lambda: is_balanced(ck_assignments(cs), 6) and len(ck_assignments(cs)[2]) == 2)
        after = ck_assignments(cs)
        # incremental: the first two kept most of what they had and only gave up one partition each
        for i in (0, 1):
            assert len(after[i] & before[i]) == 2
            assert all(len(r) <= 1 for r in revoked[i][seen_revokes[i]:])
    finally:
        for c in cs:
            c.close()


CHILD = r"""
import json, sys, time
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "session.timeout.ms": 6000,
              "heartbeat.interval.ms": 500, "auto.offset.reset": "earliest", "enable.auto.commit": False})
c.subscribe([sys.argv[3]])
last = None
while True:
    c.poll(0.1)
    a = sorted(tp.partition for tp in c.assignment())
    if a != last:
        print(json.dumps(a), flush=True)
        last = a
"""


def test_sigkilled_consumer_is_removed_after_session_timeout(broker):
    topic, group = name("t"), name("g")
    create_topic(broker.bootstrap, topic, 6)
    child = subprocess.Popen([sys.executable, "-c", CHILD, broker.bootstrap, group, topic],
                             stdout=subprocess.PIPE, text=True)
    reports: list[list[int]] = []
    threading.Thread(target=lambda: [reports.append(json.loads(ln)) for ln in child.stdout], daemon=True).start()
    local = ck_consumer(broker.bootstrap, group)
    try:
        local.subscribe([topic])
        child_parts: list[int] = []
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            local.poll(0.05)
            child_parts = reports[-1] if reports else []
            if len(child_parts) == 3 and len(local.assignment()) == 3:
                break
        assert len(child_parts) == 3 and len(local.assignment()) == 3
        os.kill(child.pid, signal.SIGKILL)  # no LeaveGroup: only the session timeout can notice
        child.wait()
        poll_until([local], lambda: len(local.assignment()) == 6, timeout=40)
        assert {tp.partition for tp in local.assignment()} == set(range(6))
    finally:
        if child.poll() is None:
            child.kill()
        local.close()


def test_static_member_restart_within_session_timeout_causes_no_rebalance(broker):
    topic, group = name("t"), name("g")
    create_topic(broker.bootstrap, topic, 4)
    assigns = []
    dyn = ck_consumer(broker.bootstrap, group)
    dyn.subscribe([topic], on_assign=lambda _c, parts: assigns.append(len(parts)))
    static = ck_consumer(broker.bootstrap, group, **{"group.instance.id": "static-1", "session.timeout.ms": 10000})
    static.subscribe([topic])
    try:
        poll_until([dyn, static], lambda: is_balanced(ck_assignments([dyn, static]), 4))
        static_parts = ck_assignments([static])[0]
        rebalances_seen = len(assigns)
        static.close()  # a static member sends no LeaveGroup
        static = ck_consumer(broker.bootstrap, group, **{"group.instance.id": "static-1",
                                                          "session.timeout.ms": 10000})
        static.subscribe([topic])
        poll_until([dyn, static], lambda: ck_assignments([static])[0] == static_parts, timeout=20)
        deadline = time.monotonic() + 3  # give a rebalance, if any, the time to show
        while time.monotonic() < deadline:
            dyn.poll(0.05)
            static.poll(0.05)
        assert len(assigns) == rebalances_seen  # the dynamic member never saw a rebalance
        assert ck_assignments([static])[0] == static_parts
    finally:
        dyn.close()
        static.close()


# ---------------------------------------------------------------- kafka-python and aiokafka

def kp_consumer(bootstrap: str, group: str, topic: str, **extra):
    from kafka import KafkaConsumer
    return KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, session_timeout_ms=SESSION_MS,
                         heartbeat_interval_ms=HEARTBEAT_MS, auto_offset_reset="earliest",
                         enable_auto_commit=False, fetch_max_wait_ms=50, **extra)


def kp_assignments(consumers) -> list[set]:
    return [{(tp.topic, tp.partition) for tp in c.assignment()} for c in consumers]


def test_kafka_python_balanced_group(broker):
    topic, group = name("t"), name("g")
    create_topic(broker.bootstrap, topic, 6)
    produce(broker.bootstrap, topic, 60, 6)
    cs = [kp_consumer(broker.bootstrap, group, topic) for _ in range(3)]
    seen = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for c in cs:
                for recs in c.poll(timeout_ms=50).values():
                    seen.extend(r.value for r in recs)
                    c.commit()
            if is_balanced(kp_assignments(cs), 6) and len(seen) >= 60:
                break
        assert is_balanced(kp_assignments(cs), 6)
        assert sorted(kp_assignments(cs), key=sorted) and sorted(len(a) for a in kp_assignments(cs)) == [2, 2, 2]
        assert sorted(set(seen), key=int) == [str(i).encode() for i in range(60)]
    finally:
        for c in cs:
            c.close()


def test_mixed_librdkafka_and_kafka_python_group(broker):
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    topic, group = name("t"), name("g")
    create_topic(broker.bootstrap, topic, 6)
    ck = [ck_consumer(broker.bootstrap, group, **{"partition.assignment.strategy": "roundrobin"}) for _ in range(2)]
    kp = kp_consumer(broker.bootstrap, group, topic, partition_assignment_strategy=[RoundRobinPartitionAssignor])
    try:
        for c in ck:
            c.subscribe([topic])

        def all_assigned():
            kp.poll(timeout_ms=20)
            return is_balanced(ck_assignments(ck) + kp_assignments([kp]), 6)

        poll_until(ck, all_assigned, timeout=60)
        assert sorted(len(a) for a in ck_assignments(ck) + kp_assignments([kp])) == [2, 2, 2]
    finally:
        for c in ck:
            c.close()
        kp.close()


def test_aiokafka_balanced_group(broker):
    from aiokafka import AIOKafkaConsumer

    topic, group = name("t"), name("g")
    create_topic(broker.bootstrap, topic, 6)
    produce(broker.bootstrap, topic, 60, 6)

    async def run():
        cs = [AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                               session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS,
                               auto_offset_reset="earliest", enable_auto_commit=False) for _ in range(3)]
        seen = []
        try:
            for c in cs:
                await c.start()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                for c in cs:
                    got = await c.getmany(timeout_ms=50)
                    for recs in got.values():
                        seen.extend(r.value for r in recs)
                    if got:
                        await c.commit()
                a = [{(tp.topic, tp.partition) for tp in c.assignment()} for c in cs]
                if is_balanced(a, 6) and len(set(seen)) >= 60:
                    return a, seen
            raise AssertionError("group did not settle")
        finally:
            for c in cs:
                await c.stop()

    assignments, seen = asyncio.run(run())
    assert sorted(len(a) for a in assignments) == [2, 2, 2]
    assert sorted(set(seen), key=int) == [str(i).encode() for i in range(60)]


# ---------------------------------------------------------------- durability and administration

def test_committed_offsets_survive_broker_kill(broker_factory):
    from confluent_kafka import TopicPartition
    b = broker_factory({})
    topic, group = name("t"), name("g")
    create_topic(b.bootstrap, topic, 3)
    produce(b.bootstrap, topic, 90, 3)
    c = ck_consumer(b.bootstrap, group)
    c.subscribe([topic])
    seen: list[int] = []

    def consume_until(n: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while len(seen) < n and time.monotonic() < deadline:
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                seen.append(int(m.value()))
                c.commit(message=m, asynchronous=False)  # committed before the next one is taken

    try:
        consume_until(45)
        committed = {tp.partition: tp.offset for tp in c.committed(
            [TopicPartition(topic, p) for p in range(3)], timeout=10)}
        b.kill()  # kill -9: no flush, no clean shutdown
        b.start()
        produce(b.bootstrap, topic, 30, 3, start=90)
        consume_until(120)
    finally:
        c.close()
    assert sorted(seen) == list(range(120))  # nothing lost, nothing twice
    # a new consumer of the group starts exactly at the committed offsets: nothing left
    c2 = ck_consumer(b.bootstrap, group)
    try:
        final = {tp.partition: tp.offset for tp in c2.committed(
            [TopicPartition(topic, p) for p in range(3)], timeout=15)}
        assert final == {0: 40, 1: 40, 2: 40}
        assert all(final[p] >= committed[p] for p in range(3))
        c2.subscribe([topic])
        extra = []
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            m = c2.poll(0.1)
            if m is not None and m.error() is None:
                extra.append(m.value())
            if c2.assignment() and time.monotonic() > deadline - 4:
                break
        assert extra == []
    finally:
        c2.close()


def test_restart_resumes_from_committed_offsets_after_kill(broker_factory):
    """Commit part of a topic, kill -9 the broker, restart: a new consumer resumes exactly there."""
    from confluent_kafka import TopicPartition
    b = broker_factory({})
    topic, group = name("t"), name("g")
    create_topic(b.bootstrap, topic, 2)
    produce(b.bootstrap, topic, 40, 2)
    c = ck_consumer(b.bootstrap, group)
    c.commit(offsets=[TopicPartition(topic, 0, 7), TopicPartition(topic, 1, 13)], asynchronous=False)
    c.close()
    b.kill()
    b.start()
    c = ck_consumer(b.bootstrap, group)
    c.subscribe([topic])
    got = []
    try:
        deadline = time.monotonic() + 40
        while len(got) < 20 and time.monotonic() < deadline:
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                got.append((m.partition(), m.offset()))
    finally:
        c.close()
    firsts = {p: min(o for q, o in got if q == p) for p in (0, 1)}
    assert firsts == {0: 7, 1: 13}
    assert len(got) == len(set(got)) == 20


def test_admin_client_describe_offsets_and_delete(broker):
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient
    topic, group = name("t"), name("g")
    create_topic(broker.bootstrap, topic, 2)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    c = ck_consumer(broker.bootstrap, group, **{"client.id": "describe-me"})
    c.subscribe([topic])
    try:
        poll_until([c], lambda: len(c.assignment()) == 2)
        c.commit(offsets=[TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 0)], asynchronous=False)
        listed = admin.list_consumer_groups().result(10)
        assert group in {g.group_id for g in listed.valid}
        desc = admin.describe_consumer_groups([group])[group].result(10)
        assert str(desc.state).endswith("STABLE") and desc.partition_assignor in ("range", "roundrobin")
        (member,) = desc.members
        assert member.client_id == "describe-me" and member.host == "/127.0.0.1"
        assert {(tp.topic, tp.partition) for tp in member.assignment.topic_partitions} == {(topic, 0), (topic, 1)}
        offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(10)
        assert {(tp.partition, tp.offset) for tp in offsets.topic_partitions} == {(0, 3), (1, 0)}
        deleted = admin.delete_consumer_groups([group])[group]
        with pytest.raises(Exception) as e:
            deleted.result(10)
        assert "NON_EMPTY_GROUP" in str(e.value) or "not empty" in str(e.value).lower()
    finally:
        c.close()
    admin.delete_consumer_groups([group])[group].result(10)
    after = admin.list_consumer_groups().result(10)
    assert group not in {g.group_id for g in after.valid}


def run_cli(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rivulet", "groups", *args, "--bootstrap-server", bootstrap],
                          capture_output=True, text=True, timeout=60)


def test_groups_cli(broker):
    from confluent_kafka import TopicPartition
    topic, group = name("t"), name("g")
    create_topic(broker.bootstrap, topic, 2)
    produce(broker.bootstrap, topic, 20, 2)
    c = ck_consumer(broker.bootstrap, group)
    c.subscribe([topic])
    try:
        poll_until([c], lambda: len(c.assignment()) == 2)
        c.commit(offsets=[TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 6)], asynchronous=False)
        r = run_cli(broker.bootstrap, "list")
        assert r.returncode == 0 and group in r.stdout.split()
        r = run_cli(broker.bootstrap, "describe", "--group", group)
        assert r.returncode == 0, r.stderr
        rows = [ln.split() for ln in r.stdout.splitlines() if ln.startswith(group)]
        assert [(row[2], row[3], row[4], row[5]) for row in rows] == [("0", "4", "10", "6"), ("1", "6", "10", "4")]
        assert all(row[7] == "/127.0.0.1" for row in rows)
        r = run_cli(broker.bootstrap, "reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
                    "--execute")
        assert r.returncode == 1 and "inactive" in r.stderr  # the group is Stable
    finally:
        c.close()
    r = run_cli(broker.bootstrap, "reset-offsets", "--group", group, "--topic", topic, "--to-latest")
    assert r.returncode == 0 and " 10" in r.stdout  # dry run shows the plan...
    r = run_cli(broker.bootstrap, "describe", "--group", group)
    assert "has no active members" in r.stdout and [ln.split()[3] for ln in r.stdout.splitlines()
                                                     if ln.startswith(group)] == ["4", "6"]  # ...changes nothing
    r = run_cli(broker.bootstrap, "reset-offsets", "--group", group, "--topic", f"{topic}:1", "--to-offset", "2",
                "--execute")
    assert r.returncode == 0, r.stderr
    r = run_cli(broker.bootstrap, "describe", "--group", group)
    assert [ln.split()[3] for ln in r.stdout.splitlines() if ln.startswith(group)] == ["4", "2"]
    assert run_cli(broker.bootstrap, "delete", "--group", group).returncode == 0
    assert group not in run_cli(broker.bootstrap, "list").stdout.split()


def test_groups_cli_reads_committed_data_only_when_asked(broker):
    """With a transaction open, the log end is past the last stable offset: describe shows the
    log end by default (as Kafka's tool does) and the LSO under --isolation-level read_committed."""
    from confluent_kafka import Producer, TopicPartition
    topic, group = name("t"), name("g")
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, 5, 1)
    c = ck_consumer(broker.bootstrap, group)
    c.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
    c.close()
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": name("tx")})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, value=b"open", partition=0)
    assert p.flush(30) == 0

    def row(*extra: str) -> list[str]:
        r = run_cli(broker.bootstrap, "describe", "--group", group, *extra)
        assert r.returncode == 0, r.stderr
        return [ln.split() for ln in r.stdout.splitlines() if ln.startswith(group)][0]
    try:
        assert row()[3:6] == ["2", "8", "6"]
        assert row("--isolation-level", "read_committed")[3:6] == ["2", "5", "3"]
    finally:
        p.abort_transaction(30)


def test_offsets_topic_is_compacted_and_reloads(broker_factory):
    """Many commits of one partition: the cleaner keeps the last; a restart loads it."""
    from confluent_kafka import TopicPartition
    b = broker_factory({"offsets.topic.num.partitions": "1", "offsets.topic.segment.bytes": "4096",
                        "log.cleaner.backoff.ms": "200"})
    topic, group = name("t"), name("g")
    create_topic(b.bootstrap, topic, 1)
    c = ck_consumer(b.bootstrap, group)
    for i in range(1, 401):
        c.commit(offsets=[TopicPartition(topic, 0, i)], asynchronous=False)
    c.close()

    def log_bytes() -> int:
        return sum(b.segment_bytes("__consumer_offsets-0").values())

    written = 400 * 60  # each commit record is ~60+ bytes
    deadline = time.monotonic() + 30
    while log_bytes() > written / 4 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert log_bytes() < written / 4
    b.kill()
    b.start()
    c = ck_consumer(b.bootstrap, group)
    try:
        (tp,) = c.committed([TopicPartition(topic, 0)], timeout=15)
        assert tp.offset == 400
    finally:
        c.close()
