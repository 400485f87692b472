"""KIP-848 consumer groups (``group.protocol=consumer``) with real clients against a real
broker: the broker assigns, members join and leave without stopping the others, a partition
is never owned by two members at once, a killed member's partitions move once its session
expires, and the group survives a broker restart."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

import rivulet
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from rivulet.testing import BrokerProcess

pytestmark = pytest.mark.integration

# Short sessions so that a killed member is noticed within seconds (the bounds allow it).
BROKER = {"group.consumer.min.session.timeout.ms": "3000", "group.consumer.session.timeout.ms": "6000",
          "group.consumer.min.heartbeat.interval.ms": "500", "group.consumer.heartbeat.interval.ms": "500"}


@pytest.fixture(scope="module")
def broker():
    b = BrokerProcess(BROKER)
    b.start()
    yield b
    b.cleanup()


def make_topic(bootstrap: str, partitions: int, records: int) -> str:
    topic = f"kip848-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(records):
        p.produce(topic, b"%d" % i, key=b"%d" % i)
    assert p.flush(30) == 0
    return topic


class Owners:
    """Who owns each partition, from the members' own rebalance callbacks, all run on this
    thread: a partition given to a member while another still holds it is recorded."""

    def __init__(self) -> None:
        self.owner: dict[int, str] = {}
        self.overlaps: list[str] = []
        self.moves = 0

    def assigned(self, name: str, partitions: list[int]) -> None:
        for p in partitions:
            if p in self.owner and self.owner[p] != name:
                self.overlaps.append(f"{p} to {name} while {self.owner[p]} owns it")
            self.owner[p] = name
            self.moves += 1

    def revoked(self, name: str, partitions: list[int]) -> None:
        for p in partitions:
            if self.owner.get(p) == name:
                del self.owner[p]

    def callbacks(self, name: str) -> dict:
        def on_assign(_c, parts):
            self.assigned(name, [tp.partition for tp in parts])

        def on_revoke(_c, parts):
            self.revoked(name, [tp.partition for tp in parts])
        return {"on_assign": on_assign, "on_revoke": on_revoke, "on_lost": on_revoke}


def consumer(bootstrap: str, group: str, kind: str = "confluent", **extra) -> Consumer:
    """confluent-kafka's consumer, or Rivulet's own (the same API)."""
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "enable.auto.commit": False, **extra}
    return Consumer(conf) if kind == "confluent" else rivulet.Consumer(conf)


def tp_class(kind: str) -> type:
    return TopicPartition if kind == "confluent" else rivulet.TopicPartition


def drain(members: dict[str, Consumer], seen: dict[bytes, str], until, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not until() and time.monotonic() < deadline:
        for name, c in members.items():
            # A batch per member per round: one message each would let idle members' waits
            # starve the one with a backlog.
            for m in c.consume(200, 0.05):
                assert not m.error() or m.error().code() == KafkaError._PARTITION_EOF, m.error()
                if not m.error():
                    seen.setdefault(m.value(), name)
                    c.commit(m, asynchronous=True)


@pytest.mark.parametrize("kind", ["confluent", "rivulet"])
def test_members_scale_up_and_down_and_no_partition_has_two_owners(broker, kind):
    """1 to 10 members and back to 5 while consuming."""
    topic = make_topic(broker.bootstrap, 10, 3000)
    group = uuid.uuid4().hex
    owners = Owners()
    members: dict[str, Consumer] = {}
    seen: dict[bytes, str] = {}

    def join(name: str) -> None:
        members[name] = consumer(broker.bootstrap, group, kind)
        members[name].subscribe([topic], **owners.callbacks(name))

    try:
        join("m0")
        drain(members, seen, lambda: len(seen) >= 300, 30)
        for i in range(1, 10):
            join(f"m{i}")
            drain(members, seen,
                  lambda: len(owners.owner) == 10 and len(set(owners.owner.values())) == len(members), 60)
            assert len(set(owners.owner.values())) == len(members), owners.owner
        for name in ("m9", "m7", "m5", "m3", "m1"):
            members.pop(name).close()
            drain(members, seen, lambda: len(owners.owner) == 10 and set(owners.owner.values()) == set(members), 60)
            assert set(owners.owner.values()) == set(members), owners.owner
        drain(members, seen, lambda: len(seen) == 3000, 60)
    finally:
        for c in members.values():
            c.close()
    assert owners.overlaps == []
    assert len(seen) == 3000 and owners.moves > 10
    # The broker assigned: the group is a consumer group and describes itself as one.
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    listed = admin.list_consumer_groups().result(30)
    assert any(g.group_id == group and g.type.name == "CONSUMER" for g in listed.valid)


@pytest.mark.parametrize("kind", ["confluent", "rivulet"])
def test_a_killed_member_loses_its_partitions_when_its_session_expires(broker, tmp_path, kind):
    topic = make_topic(broker.bootstrap, 4, 400)
    group = uuid.uuid4().hex
    script = tmp_path / "member.py"
    module = "confluent_kafka" if kind == "confluent" else "rivulet"
    script.write_text(textwrap.dedent(f"""
        from {module} import Consumer
        c = Consumer({{"bootstrap.servers": "{broker.bootstrap}", "group.id": "{group}",
                      "group.protocol": "consumer", "auto.offset.reset": "earliest",
                      "enable.auto.commit": False}})
        c.subscribe(["{topic}"], on_assign=lambda _c, ps: print("assigned", len(ps), flush=True))
        while True:
            c.poll(0.2)
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    survivor = consumer(broker.bootstrap, group, kind)
    try:
        assert proc.stdout.readline().startswith("assigned")
        owners = Owners()
        seen: dict[bytes, str] = {}  # from the start: the poll that assigns may return a record too
        survivor.subscribe([topic], **owners.callbacks("survivor"))
        drain({"survivor": survivor}, seen, lambda: len(owners.owner) == 2, 30)
        assert sorted(owners.owner) in ([0, 1], [2, 3]), owners.owner
        proc.kill()  # kill -9: no leave, only the session says it is gone
        proc.wait()
        drain({"survivor": survivor}, seen, lambda: len(owners.owner) == 4 and len(seen) == 400, 60)
        # It committed nothing, so the survivor reads every record, its partitions' too.
        missing = sorted(set(range(400)) - {int(v) for v in seen})
        assert len(owners.owner) == 4 and not missing and owners.overlaps == [], (
            missing, survivor.committed([tp_class(kind)(topic, p) for p in range(4)], 10),
            survivor.position([tp_class(kind)(topic, p) for p in range(4)]))
    finally:
        survivor.close()
        proc.kill()


@pytest.mark.parametrize("kind", ["confluent", "rivulet"])
def test_the_group_and_its_offsets_survive_a_broker_restart(kind):
    b = BrokerProcess(BROKER)
    b.start()
    try:
        topic = make_topic(b.bootstrap, 3, 300)
        group = uuid.uuid4().hex
        c = consumer(b.bootstrap, group, kind)
        c.subscribe([topic])
        seen: dict[bytes, str] = {}
        drain({"c": c}, seen, lambda: len(seen) == 300, 30)
        c.commit(asynchronous=False)
        member_before = c.memberid()
        b.restart()
        # The member heartbeats to the reloaded group at its epoch and carries on.
        p = Producer({"bootstrap.servers": b.bootstrap})
        for i in range(300, 400):
            p.produce(topic, b"%d" % i, key=b"%d" % i)
        assert p.flush(30) == 0
        drain({"c": c}, seen, lambda: len(seen) == 400, 60)
        assert len(seen) == 400 and c.memberid() == member_before
        c.commit(asynchronous=False)
        c.close()
        # A new member of the same group starts where the group committed.
        again = consumer(b.bootstrap, group)
        again.subscribe([topic])
        drain({"again": again}, {}, lambda: len(again.assignment()) == 3, 30)
        committed = again.committed([TopicPartition(topic, p) for p in range(3)], 10)
        assert sum(tp.offset for tp in committed) == 400
        assert again.poll(2) is None
        again.close()
    finally:
        b.cleanup()


def test_a_static_member_restarts_into_its_own_partitions(broker):
    topic = make_topic(broker.bootstrap, 4, 0)
    group = uuid.uuid4().hex
    owners = Owners()
    members = {name: consumer(broker.bootstrap, group, **{"group.instance.id": name}) for name in ("s1", "s2")}
    try:
        for name, c in members.items():
            c.subscribe([topic], **owners.callbacks(name))
        drain(members, {}, lambda: len(owners.owner) == 4 and len(set(owners.owner.values())) == 2, 30)
        before = dict(owners.owner)
        moves = owners.moves
        members.pop("s1").close()  # a static member leaves for now (epoch -2): s2 keeps its own
        members["s1"] = consumer(broker.bootstrap, group, **{"group.instance.id": "s1"})
        members["s1"].subscribe([topic], **owners.callbacks("s1"))
        drain(members, {}, lambda: owners.owner == before, 30)
        assert owners.owner == before and owners.overlaps == []
        assert owners.moves == moves + sum(1 for n in before.values() if n == "s1")  # s2 never moved
    finally:
        for c in members.values():
            c.close()


def test_a_consumer_group_is_described_and_refused_to_classic_members(broker):
    topic = make_topic(broker.bootstrap, 2, 10)
    group = uuid.uuid4().hex
    c = consumer(broker.bootstrap, group, **{"group.remote.assignor": "range"})
    c.subscribe([topic])
    drain({"c": c}, {}, lambda: len(c.assignment()) == 2, 30)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    described = admin.describe_consumer_groups([group])[group].result(30)
    assert described.type.name == "CONSUMER" and described.state.name == "STABLE"
    assert described.partition_assignor == "range" and len(described.members) == 1
    assert sorted(tp.partition for tp in described.members[0].assignment.topic_partitions) == [0, 1]
    # Rivulet's CLI, as kafka-consumer-groups, describes it with ConsumerGroupDescribe.
    shown = subprocess.run([sys.executable, "-m", "rivulet", "groups", "describe", "-b", broker.bootstrap,
                            "--group", group], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    rows = [line.split() for line in shown.stdout.splitlines() if line.startswith(group)]
    assert sorted((r[1], r[2]) for r in rows) == [(topic, "0"), (topic, "1")]
    state = subprocess.run([sys.executable, "-m", "rivulet", "groups", "describe", "-b", broker.bootstrap,
                            "--group", group, "--state"], capture_output=True, text=True, timeout=60)
    assert "range" in state.stdout and "Stable" in state.stdout, state.stdout + state.stderr
    c.close()


def group_type(bootstrap: str, group: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the answer comes
    listed = admin.list_consumer_groups().result(30)
    return next((g.type.name for g in listed.valid if g.group_id == group), "")


# librdkafka's cooperative-sticky assignor writes user data into each assignment, which the
# conversion would lose: Kafka refuses to upgrade such a group, and so does Rivulet.
@pytest.mark.parametrize("kind,strategy", [("confluent", "range"), ("rivulet", "cooperative-sticky")])
def test_a_mixed_group_converts_online_and_back(broker, kind, strategy):
    """Classic members form a group; a member of the consumer protocol joins and the group
    becomes a consumer group with the classic members in it; when it leaves, the group is
    classic again. Every record is read, and no partition ever has two owners."""
    topic = make_topic(broker.bootstrap, 6, 3000)
    group = uuid.uuid4().hex
    owners = Owners()
    members: dict[str, Consumer] = {}
    seen: dict[bytes, str] = {}

    def join(name: str, protocol: str) -> None:
        extra = {"group.protocol": protocol}
        if protocol == "classic":
            extra.update({"partition.assignment.strategy": strategy, "session.timeout.ms": 6000,
                          "heartbeat.interval.ms": 500})
        members[name] = consumer(broker.bootstrap, group, kind if protocol == "classic" else "confluent", **extra)
        members[name].subscribe([topic], **owners.callbacks(name))

    def spread() -> bool:
        return len(owners.owner) == 6 and set(owners.owner.values()) == set(members)

    try:
        join("classic-1", "classic")
        join("classic-2", "classic")
        drain(members, seen, spread, 60)
        assert spread(), owners.owner
        assert group_type(broker.bootstrap, group) == "CLASSIC"
        join("new", "consumer")
        drain(members, seen, spread, 60)
        assert spread(), owners.owner
        assert group_type(broker.bootstrap, group) == "CONSUMER"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        described = admin.describe_consumer_groups([group])[group].result(30)
        assert len(described.members) == 3
        members.pop("new").close()
        drain(members, seen, lambda: spread() and group_type(broker.bootstrap, group) == "CLASSIC", 60)
        assert spread() and group_type(broker.bootstrap, group) == "CLASSIC", owners.owner
        drain(members, seen, lambda: len(seen) == 3000, 60)
    except AssertionError:
        print(broker.output()[-4000:])
        raise
    finally:
        for c in members.values():
            c.close()
    assert owners.overlaps == []
    assert len(seen) == 3000


@pytest.mark.java
def test_java_consumer_with_the_consumer_protocol(broker):
    from tests.client_round_trips import java_round_trip
    topic = make_topic(broker.bootstrap, 1, 0)
    java_round_trip(broker.bootstrap, {"group.protocol": "consumer", "request.timeout.ms": 15_000}, topic,
                    uuid.uuid4().hex, 500,
                    {"bootstrap.servers": broker.bootstrap})


class JavaMembers:
    """A JVM running tests/java/GroupMembers.java: Kafka's Java consumers, one per thread,
    added and removed by name. Its lines feed ``owners`` (when ``tracked``) and ``seen``."""

    SOURCE = Path(__file__).resolve().parents[1] / "java" / "GroupMembers.java"

    def __init__(self, bootstrap: str, topic: str, group: str, owners: Owners, seen: dict, log: Path,
                 tracked: bool = True) -> None:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        import java_tools as jt
        self.owners, self.seen, self.tracked = owners, seen, tracked
        self.joined: set[str] = set()
        self.lock = threading.Lock()
        self.proc = subprocess.Popen(
            jt.program_command(self.SOURCE, [bootstrap, topic, group, "consumer"]), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=open(log, "ab"), text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            kind, name, rest = (line.rstrip("\n").split(" ", 2) + ["", ""])[:3]
            with self.lock:
                if kind == "record":
                    self.seen.setdefault(rest.encode(), name)
                elif kind in ("assigned", "revoked", "lost"):
                    self.joined.add(name)
                    parts = [int(p) for p in rest.strip("[]").split(",") if p]
                    if self.tracked:
                        (self.owners.assigned if kind == "assigned" else self.owners.revoked)(name, parts)

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()  # type: ignore[union-attr]
                self.proc.wait(60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()


def wait_until(cond, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.1)
    return cond()


@pytest.mark.java
def test_java_consumers_scale_to_ten_survive_kill_and_restart(tmp_path):
    """Kafka's Java consumer with group.protocol=consumer: 1 to 10 members and back to 5, one
    killed with kill -9, then a broker restart; every record is read and no partition ever has
    two owners (each member's rebalance callbacks, in the order they ran)."""
    b = BrokerProcess(BROKER)
    b.start()
    owners, seen = Owners(), {}
    members = victim = None
    try:
        topic = make_topic(b.bootstrap, 10, 2000)
        group = uuid.uuid4().hex
        members = JavaMembers(b.bootstrap, topic, group, owners, seen, tmp_path / "java.log")
        names: list[str] = []

        def spread() -> bool:
            with members.lock:
                return len(owners.owner) == 10 and set(owners.owner.values()) == set(names)
        for i in range(10):
            names.append(f"m{i}")
            members.send(f"add m{i}")
            assert wait_until(spread, 90), (names, owners.owner)
        for name in ["m9", "m8", "m7", "m6", "m5"]:
            names.remove(name)
            members.send(f"remove {name}")
            assert wait_until(spread, 90), (names, owners.owner)
        # A member in a JVM of its own is killed: the others get its partitions when its
        # session expires (its own callbacks never run, so it is not tracked as an owner).
        victim = JavaMembers(b.bootstrap, topic, group, owners, seen, tmp_path / "victim.log", tracked=False)
        victim.send("add victim")
        assert wait_until(lambda: "victim" in victim.joined and len(set(owners.owner.values())) < 6
                          and len(owners.owner) < 10, 90), owners.owner
        victim.proc.kill()
        victim.proc.wait()
        assert wait_until(spread, 90), (names, owners.owner)
        b.restart()
        p = Producer({"bootstrap.servers": b.bootstrap})
        for i in range(2000, 3000):
            p.produce(topic, b"%d" % i, key=b"%d" % i)
        assert p.flush(30) == 0
        assert wait_until(lambda: len(seen) == 3000, 120), len(seen)
        assert spread(), owners.owner
    finally:
        for m in (members, victim):
            if m is not None:
                m.close()
        b.cleanup()
    assert owners.overlaps == []
    assert set(seen) == {b"%d" % i for i in range(3000)}
