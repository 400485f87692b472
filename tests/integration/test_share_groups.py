"""KIP-932 share groups against a real broker, with raw ShareGroupHeartbeat and
ShareGroupDescribe requests through Rivulet's own connection: members join and share the
partitions, a silent member's session expires, the group is listed with its type, other
kinds of group cannot take its id, it survives a broker restart, and an empty one is deleted."""

from __future__ import annotations

import asyncio
import difflib
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from rivulet.client.admin.client import AsyncAdminClient
from rivulet.client.connection import BrokerConnection
from rivulet.client.types import ShareMessage
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages import consumer_group_heartbeat_request as cghq
from rivulet.protocol.messages import create_topics_request as ctq
from rivulet.protocol.messages import delete_groups_request as dgq
from rivulet.protocol.messages import describe_groups_request as dgrq
from rivulet.protocol.messages import join_group_request as jgq
from rivulet.protocol.messages import list_groups_request as lgq
from rivulet.protocol.messages import metadata_request as mq
from rivulet.protocol.messages import share_group_describe_request as sgdq
from rivulet.protocol.messages import share_group_heartbeat_request as sghq
from rivulet.testing import BrokerProcess
from tests.group_members import RawMember, find_coordinator, until, while_beating

pytestmark = pytest.mark.integration

# Short sessions so that a silent member is fenced within seconds (the bounds allow it).
BROKER = {"group.share.min.session.timeout.ms": "2000", "group.share.session.timeout.ms": "4000",
          "group.share.min.heartbeat.interval.ms": "500", "group.share.heartbeat.interval.ms": "500"}
GROUP, TOPIC = "share-it", "share-it-topic"


async def connect(b: BrokerProcess) -> BrokerConnection:
    return await BrokerConnection("127.0.0.1", b.port, client_id="share-it").connect(10)


async def beat(conn: BrokerConnection, member: str, epoch: int, topics: list[str] | None = None,
               group: str = GROUP) -> Any:
    return await conn.send(sghq.ShareGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=epoch,
                                                           subscribed_topic_names=topics))


async def describe(conn: BrokerConnection, group: str = GROUP):
    r = await conn.send(sgdq.ShareGroupDescribeRequest(group_ids=[group], include_authorized_operations=True))
    return r.groups[0]


HELD: dict[str, set[int]] = {}


def parts(resp) -> set[int]:
    """The member's partitions: its answer's assignment, else (none sent: unchanged) its last."""
    if resp.assignment is not None:
        HELD[resp.member_id] = {p for tp in resp.assignment.topic_partitions for p in tp.partitions}
    return HELD[resp.member_id]


class ShareMember(RawMember):
    """A member that keeps its epoch and subscription, for heartbeats while something else runs."""

    def __init__(self, conn: BrokerConnection, member_id: str, epoch: int) -> None:
        super().__init__(conn, member_id)
        self.epoch = epoch

    def request(self) -> sghq.ShareGroupHeartbeatRequest:
        return sghq.ShareGroupHeartbeatRequest(group_id=GROUP, member_id=self.member_id, member_epoch=self.epoch)

    def took(self, response: Any) -> None:
        parts(response)


def run_cli(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rivulet", "groups", *args, "--bootstrap-server", bootstrap],
                          capture_output=True, text=True, timeout=60)


def test_share_group_lifecycle():
    # Every change assigned at once (no group.share.assignment.interval.ms), so that epochs follow joins.
    b = BrokerProcess({**BROKER, "group.share.assignment.interval.ms": "0"})
    b.start()
    try:
        asyncio.run(_lifecycle(b))
    finally:
        b.cleanup()


async def _lifecycle(b: BrokerProcess) -> None:
    conn = await connect(b)
    try:
        await find_coordinator(conn, GROUP)
        assert conn.has_api(76) and conn.has_api(77)
        assert conn.version_for(76) == 1 and conn.version_for(77) == 1
        r = await conn.send(ctq.CreateTopicsRequest(topics=[ctq.CreatableTopic(
            name=TOPIC, num_partitions=2, replication_factor=1, assignments=[], configs=[])], timeout_ms=10000,
            validate_only=False))
        assert r.topics[0].error_code == 0
        md = await conn.send(mq.MetadataRequest(topics=[mq.MetadataRequestTopic(name=TOPIC)],
                                                allow_auto_topic_creation=False))
        topic_id = md.topics[0].topic_id

        # A member joins: the group epoch, the configured heartbeat interval, and no partitions until
        # their share state is initialized (after this answer); a heartbeat after that gets them all.
        r1 = await beat(conn, "m1", 0, [TOPIC])
        parts(r1)
        assert (r1.error_code, r1.member_id, r1.member_epoch, r1.heartbeat_interval_ms) == (0, "m1", 2, 500)
        assert r1.assignment.topic_partitions == []

        async def assigned():
            nonlocal r1
            r1 = await beat(conn, "m1", r1.member_epoch)
            return parts(r1)
        await until(assigned, "m1's partitions, once their share state is initialized")
        assert r1.member_epoch == 3
        assert [(tp.topic_id, sorted(tp.partitions)) for tp in r1.assignment.topic_partitions] == \
            [(topic_id, [0, 1])]
        # Two more: three members over two partitions share them, none idles.
        r2 = await beat(conn, "m2", 0, [TOPIC])
        r3 = await beat(conn, "m3", 0, [TOPIC])
        parts(r2), parts(r3)
        assert (r2.member_epoch, r3.member_epoch) == (4, 5)
        r1 = await beat(conn, "m1", 3)
        r2 = await beat(conn, "m2", 4)
        assert (r1.member_epoch, r2.member_epoch) == (5, 5)
        sizes = sorted(len(parts(r)) for r in (r1, r2, r3))
        assert sizes == [1, 1, 2] and parts(r1) | parts(r2) | parts(r3) == {0, 1}

        # Errors as Kafka answers them.
        bad = await beat(conn, "m1", 9)
        assert bad.error_code == ErrorCode.FENCED_MEMBER_EPOCH
        bad = await beat(conn, "ghost", 3)
        assert (bad.error_code, bad.error_message) == (ErrorCode.UNKNOWN_MEMBER_ID,
                                                       f"Member ghost is not a member of group {GROUP}.")
        bad = await beat(conn, "m9", 0)
        assert (bad.error_code, bad.error_message) == (ErrorCode.INVALID_REQUEST,
                                                       "SubscribedTopicNames must be set in first request.")
        bad = await beat(conn, "m1", 1, group="no-such-share-group")
        assert bad.error_code == ErrorCode.GROUP_ID_NOT_FOUND

        d = await describe(conn)
        assert (d.error_code, d.group_state, d.group_epoch, d.assignment_epoch, d.assignor_name) == \
            (0, "Stable", 5, 5, "simple")
        assert sorted(m.member_id for m in d.members) == ["m1", "m2", "m3"]
        assert all(m.subscribed_topic_names == [TOPIC] and m.client_id == "share-it" for m in d.members)
        assert {tp.topic_name for m in d.members for tp in m.assignment.topic_partitions} == {TOPIC}
        # `rivulet groups describe` shows the share group's members and state (they keep
        # heartbeating meanwhile: a slow CLI start must not outlast their sessions).
        alive = [ShareMember(conn, m, r.member_epoch) for m, r in (("m1", r1), ("m2", r2), ("m3", r3))]
        members = await while_beating(alive, lambda: run_cli(b.bootstrap, "describe", "--group", GROUP, "--members"))
        assert members.returncode == 0, members.stderr
        assert sorted(line.split()[1] for line in members.stdout.splitlines()[2:] if line.strip()) == \
            ["m1", "m2", "m3"]
        state = await while_beating(alive, lambda: run_cli(b.bootstrap, "describe", "--group", GROUP, "--state",
                                                           "--format", "json"))
        assert state.returncode == 0, state.stderr
        assert (json.loads(state.stdout)["state"], json.loads(state.stdout)["assignment_strategy"],
                json.loads(state.stdout)["members"]) == ("Stable", "simple", 3)

        # Listed with its type; other kinds of group cannot use its id.
        listed = await conn.send(lgq.ListGroupsRequest(states_filter=[], types_filter=["share"]))
        assert [(g.group_id, g.group_type, g.protocol_type, g.group_state) for g in listed.groups] == \
            [(GROUP, "share", "share", "Stable")]
        classic = await conn.send(dgrq.DescribeGroupsRequest(groups=[GROUP], include_authorized_operations=False),
                                 version=6)
        assert (classic.groups[0].error_code, classic.groups[0].error_message) == \
            (ErrorCode.GROUP_ID_NOT_FOUND, f"Group {GROUP} is not a classic group.")
        cg = await conn.send(cghq.ConsumerGroupHeartbeatRequest(
            group_id=GROUP, member_id="c1", member_epoch=0, rebalance_timeout_ms=30000,
            subscribed_topic_names=[TOPIC], topic_partitions=[]))
        assert (cg.error_code, cg.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND,
                                                     f"Group {GROUP} is not a consumer group.")
        join = await conn.send(jgq.JoinGroupRequest(
            group_id=GROUP, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
            group_instance_id=None, protocol_type="consumer", protocols=[jgq.JoinGroupRequestProtocol(
                name="range", metadata=b"")], reason=None))
        assert join.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        deleted = await conn.send(dgq.DeleteGroupsRequest(groups_names=[GROUP]))
        assert deleted.results[0].error_code == ErrorCode.NON_EMPTY_GROUP

        # m3 falls silent: its session expires and the others take its place.
        async def keep_alive_and_check():
            nonlocal r1, r2
            d = await describe(conn)
            r1 = await beat(conn, "m1", r1.member_epoch)
            r2 = await beat(conn, "m2", r2.member_epoch)
            parts(r1), parts(r2)
            return d if sorted(m.member_id for m in d.members) == ["m1", "m2"] else None
        d = await until(keep_alive_and_check, "m3's session to expire")
        assert d.group_epoch == 6
        r1 = await beat(conn, "m1", r1.member_epoch)
        r2 = await beat(conn, "m2", r2.member_epoch)
        assert (r1.member_epoch, r2.member_epoch) == (6, 6)
        assert parts(r1) | parts(r2) == {0, 1} and len(parts(r1)) == len(parts(r2)) == 1
    finally:
        await conn.close()

    # A restart keeps the group: its members, epochs and assignment come back from __consumer_offsets.
    b.restart()
    conn = await connect(b)
    try:
        async def loaded():
            d = await describe(conn)
            return d if d.error_code == 0 else None
        d = await until(loaded, "the group to load")
        assert (d.group_state, d.group_epoch, d.assignment_epoch) == ("Stable", 6, 6)
        assert sorted((m.member_id, m.member_epoch) for m in d.members) == [("m1", 6), ("m2", 6)]
        r1 = await beat(conn, "m1", 6)
        assert (r1.error_code, r1.member_epoch) == (0, 6)
        # Both leave; the empty group is deleted, and is gone.
        assert (await beat(conn, "m1", -1)).member_epoch == -1
        assert (await beat(conn, "m2", -1)).error_code == 0
        d = await describe(conn)
        assert (d.group_state, d.members) == ("Empty", [])
        deleted = await conn.send(dgq.DeleteGroupsRequest(groups_names=[GROUP]))
        assert deleted.results[0].error_code == 0
        d = await describe(conn)
        assert (d.error_code, d.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, f"Group {GROUP} not found.")
    finally:
        await conn.close()


def test_disabled_share_groups_are_not_offered():
    b = BrokerProcess({"group.share.enable": "false"})
    b.start()

    async def main() -> None:
        conn = await connect(b)
        try:
            assert not conn.has_api(76) and not conn.has_api(77)
            assert conn.has_api(68)
        finally:
            await conn.close()
    try:
        asyncio.run(main())
    finally:
        b.cleanup()


def share_topic(bootstrap: str, topic: str, group: str, n: int, partitions: int = 2, replication_factor: int = 1
                ) -> Any:
    """A 2-partition topic (by default) holding records "0".."n-1" (round robin over the
    partitions), and ``group`` set to read from the start (share.auto.offset.reset is a group
    config, default latest). Returns the confluent-kafka admin client it used."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, \
        ResourceType
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, replication_factor)])[topic].result(30)
    for f in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])]).values():
        f.result(30)
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        p.produce(topic, b"%d" % i, partition=i % partitions)
    assert p.flush(30) == 0
    return admin


def share_consumer_class(client: str) -> Any:
    """confluent-kafka's ShareConsumer, Rivulet's own, or Kafka's Java one behind the same calls."""
    if client == "confluent":
        from confluent_kafka import ShareConsumer
    elif client == "java":
        return JavaShareConsumer
    else:
        from rivulet import ShareConsumer
    return ShareConsumer


class JavaShareConsumer:
    """Kafka's Java KafkaShareConsumer in explicit acknowledgement mode (ShareMembers.java's
    "explicit" mode, one command line at a time), behind the ShareConsumer calls the tests make."""

    KINDS = {1: "ACCEPT", 2: "RELEASE", 3: "REJECT"}

    def __init__(self, config: dict[str, str]) -> None:
        assert config.get("share.acknowledgement.mode") == "explicit", config
        self._config = config
        self._proc: subprocess.Popen | None = None
        self._callback: Any = None
        self._topic = ""

    def set_acknowledgement_commit_callback(self, callback: Any) -> None:
        self._callback = callback

    def subscribe(self, topics: list[str]) -> None:
        (self._topic,) = topics
        self._proc = subprocess.Popen(java_client_command(self._config["bootstrap.servers"], self._topic,
                                                          self._config["group.id"], "explicit"),
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def _command(self, line: str) -> list[str]:
        """Sends one command; the lines answering it (callback lines handled on the way)."""
        assert self._proc is not None and self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(line + "\n")
        self._proc.stdin.flush()
        answer = []
        while (got := self._proc.stdout.readline()) != "done\n":
            assert got, f"the Java consumer ended (exit {self._proc.poll()}) during {line!r}"
            if got.startswith("acked "):
                error, *offsets = got.split()[1:]
                if self._callback is not None:
                    self._callback({int(p): [int(o) for o in offs.split(",")] for p, offs in
                                    (po.split(":") for po in offsets)}, None if error == "-" else error)
            else:
                answer.append(got)
        return answer

    def poll(self, timeout: float) -> list[ShareMessage]:
        return [ShareMessage(self._topic, int(p), int(o), None, v.encode(), None, 0, -1, None, int(d))
                for p, o, d, v in (line.rstrip("\n").split(" ", 4)[1:]
                                   for line in self._command(f"poll {int(timeout * 1000)}"))]

    def acknowledge(self, record: ShareMessage, kind: int) -> None:
        self._command(f"ack {record.partition()} {record.offset()} {self.KINDS[kind]}")

    def commit_sync(self) -> None:
        self._command("commit")

    def close(self) -> None:
        if self._proc is not None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            try:
                self._proc.wait(30)
            except subprocess.TimeoutExpired:
                self._proc.kill()


@pytest.mark.parametrize("client", ["confluent", "rivulet"])
@pytest.mark.parametrize("members", [1, 3, 8])
def test_share_consumers_read_every_record(client, members):
    """confluent-kafka's ShareConsumer and Rivulet's join through ShareGroupHeartbeat, get their
    share of the partitions from the coordinator and read them with ShareFetch: together the
    members read every record (at least once), and the group is described with them while they run."""
    ShareConsumer = share_consumer_class(client)

    # Assignments at once (no group.share.assignment.interval.ms batching, which
    # test_assignment_interval covers): partitions do not move between members that hold
    # acquired records while the test closes them.
    b = BrokerProcess({"group.share.min.heartbeat.interval.ms": "500", "group.share.heartbeat.interval.ms": "500",
                       "group.share.assignment.interval.ms": "0"})
    b.start()
    consumers: list = []
    try:
        topic, group, n = "share-q", f"share-q-{client}-{members}", 60
        admin = share_topic(b.bootstrap, topic, group, n)
        for _ in range(members):
            c = ShareConsumer({"bootstrap.servers": b.bootstrap, "group.id": group})
            c.subscribe([topic])
            consumers.append(c)
        seen: set[bytes] = set()
        deadline = time.monotonic() + 60
        while len(seen) < n:
            assert time.monotonic() < deadline, f"read {len(seen)} of {n}"
            for c in consumers:
                for m in c.poll(0.2):
                    if m.error() is None:
                        seen.add(m.value())
        assert seen == {b"%d" % i for i in range(n)}

        async def described():
            async with AsyncAdminClient({"bootstrap.servers": b.bootstrap}) as rivulet_admin:
                return await rivulet_admin.share_group_describe(group)
        # Members that joined within group.share.assignment.interval.ms of the first assignment get
        # theirs from a later one, at a heartbeat after the interval: wait for every partition held.
        deadline = time.monotonic() + 30
        while True:
            d = asyncio.run(described())
            held = {p for m in d.members for tp in m.assignment.topic_partitions for p in tp.partitions}
            # Under load one member can read all 60 records before the others have joined.
            if (held == {0, 1} and len(d.members) == members) or time.monotonic() > deadline:
                break
            for c in consumers:
                c.poll(0.2)
        assert (d.error_code, d.group_state, len(d.members)) == (0, "Stable", members)
        assert held == {0, 1}
        if members > 1:
            return
        # Deleted once empty, the group takes its share state along: made again under the same
        # id, it reads everything afresh (nothing is acknowledged any more).
        for c in consumers:
            c.close()
        consumers.clear()
        assert admin.delete_consumer_groups([group])[group].result(30) is None
        again = ShareConsumer({"bootstrap.servers": b.bootstrap, "group.id": group})
        consumers.append(again)
        again.subscribe([topic])
        seen = set()
        deadline = time.monotonic() + 60
        while len(seen) < n:
            assert time.monotonic() < deadline, f"read {len(seen)} of {n} again"
            seen |= {m.value() for m in again.poll(0.2) if m.error() is None}
    finally:
        try:
            close_within(consumers, 60)
        finally:
            b.cleanup()


def close_within(consumers: list, timeout: float) -> None:
    """Close every consumer; a close() that does not return in ``timeout`` seconds fails the
    test instead of holding the run (it stays blocked on a daemon thread)."""
    closer = threading.Thread(target=lambda: [c.close() for c in consumers], daemon=True)
    closer.start()
    closer.join(timeout)
    assert not closer.is_alive(), f"closing the share consumers did not end in {timeout:.0f} s"


JAVA_MEMBERS = Path(__file__).resolve().parents[1] / "java" / "ShareMembers.java"


def java_client_command(*args: str, source: Path = JAVA_MEMBERS) -> list[str]:
    """The java command line running ``source`` (ShareMembers.java) with ``args``, against Kafka's client jars."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import java_tools as jt
    return jt.program_command(source, args)


@pytest.mark.java
@pytest.mark.parametrize("members", [1, 3, 8])
def test_java_share_consumers_read_every_record(members, tmp_path):
    """Kafka's Java KafkaShareConsumer (4.3), 1 to 8 members (threads of one JVM) over two
    partitions: every record is read (at least once) and all are members of the described group."""
    import threading

    b = BrokerProcess({"group.share.min.heartbeat.interval.ms": "500", "group.share.heartbeat.interval.ms": "500"})
    b.start()
    proc = None
    try:
        topic, group, n = "share-java", f"share-java-{members}", 300
        share_topic(b.bootstrap, topic, group, n)
        proc = subprocess.Popen(java_client_command(b.bootstrap, topic, group, str(members)),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=open(tmp_path / "java.log", "ab"), text=True)
        seen: set[str] = set()
        joined: set[str] = set()

        def read() -> None:
            assert proc is not None and proc.stdout is not None
            for line in proc.stdout:
                kind, name, rest = (line.rstrip("\n").split(" ", 2) + ["", ""])[:3]
                if kind == "record":
                    seen.add(rest)
                elif kind == "joined":
                    joined.add(name)
        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + 120
        while len(seen) < n or len(joined) < members:
            assert time.monotonic() < deadline, (len(seen), joined)
            time.sleep(0.2)
        assert seen == {str(i) for i in range(n)}

        async def described():
            async with AsyncAdminClient({"bootstrap.servers": b.bootstrap}) as rivulet_admin:
                return await rivulet_admin.share_group_describe(group)
        d = asyncio.run(described())
        assert (d.error_code, d.group_state) == (0, "Stable")
        assert sorted(m.client_id for m in d.members) == sorted(f"j{i}" for i in range(members))
    finally:
        if proc is not None:
            assert proc.stdin is not None
            proc.stdin.close()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        b.cleanup()


HEARTBEATS = {"group.share.min.heartbeat.interval.ms": "500", "group.share.heartbeat.interval.ms": "500"}
ACCEPT, RELEASE, REJECT = 1, 2, 3

JAVA_EDGES = Path(__file__).resolve().parents[1] / "java" / "ShareEdges.java"
# ShareEdges.java's output against Kafka 4.3.1 (same broker settings, topic prefix masked as P).
KAFKA_EDGES = JAVA_EDGES.with_name("ShareEdges.kafka-4.3.1.txt")
EDGE_SCENARIOS = ["implicit", "explicit", "misuse", "unacked", "limit", "lock", "renew", "close", "async",
                  "admin", "alter", "members", "expiry", "renewoff", "opentxn", "twoparts"]
# Kafka writes a share partition's state with the start offset it had before the
# acknowledgement being written moved it, so its listed start offset trails by one write;
# Rivulet's is the one after (the lag is the same): docs/compatibility.md.
EDGES_KNOWN = {
    "[limit] spso 0 0 lag Optional[0]": "[limit] spso 0 2 lag Optional[0]",
    "[admin] offsets {P-admin-0=0/lag=0, P-admin-1=null}": "[admin] offsets {P-admin-0=3/lag=0, P-admin-1=null}",
    "[alter] offsets {P-alter-0=2/lag=0}": "[alter] offsets {P-alter-0=4/lag=0}",
    "[twoparts] offsets {P-twoparts-0=0/lag=0, P-twoparts-1=0/lag=0}":
        "[twoparts] offsets {P-twoparts-0=1/lag=0, P-twoparts-1=1/lag=0}",
}


@pytest.mark.java
def test_java_share_consumer_edges_match_kafka(tmp_path):
    """Kafka's KafkaShareConsumer and Admin share-group calls at their edges (ShareEdges.java:
    acknowledgement modes and types, misuse, commit results and callbacks, delivery limit, lock
    expiry (and its write), RENEW (and the group refusing it), read_committed over an open transaction, close with pending acknowledgements, the offset and group admin calls) print what
    they printed against Kafka 4.3.1, line for line."""
    b = BrokerProcess({**HEARTBEATS, "group.share.min.record.lock.duration.ms": "1000"})
    b.start()
    try:
        out = subprocess.run(java_client_command(b.bootstrap, "pedges0", *EDGE_SCENARIOS, source=JAVA_EDGES),
                             capture_output=True, text=True, timeout=300)
        (tmp_path / "java.log").write_text(out.stderr)
        got = [line.replace("pedges0", "P") for line in out.stdout.splitlines()]
        expected = [EDGES_KNOWN.get(line, line) for line in KAFKA_EDGES.read_text().splitlines()]
        assert got == expected, "\n".join(difflib.unified_diff(expected, got, "kafka-4.3.1", "rivulet", lineterm=""))
    finally:
        b.cleanup()


def explicit_consumer(client: str, bootstrap: str, group: str, topic: str, acked: list | None = None) -> Any:
    c = share_consumer_class(client)({"bootstrap.servers": bootstrap, "group.id": group,
                                      "share.acknowledgement.mode": "explicit"})
    if acked is not None:
        c.set_acknowledgement_commit_callback(lambda offsets, exc: acked.append((offsets, exc)))
    c.subscribe([topic])
    return c


def share_partition_positions(bootstrap: str, group: str) -> dict[int, tuple[int, int | None]]:
    """Each partition's share-partition start offset and lag, from DescribeShareGroupOffsets."""
    async def read():
        async with AsyncAdminClient({"bootstrap.servers": bootstrap}) as admin:
            return await admin.list_share_group_offsets(group)
    return {tp.partition: (i.start_offset, i.lag) for tp, i in asyncio.run(read()).items() if i is not None}


def produce_sentinels(bootstrap: str, topic: str) -> set[bytes]:
    """One record past everything else in each partition: a record the group would still
    deliver (Available) comes no later than the sentinel behind it."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap})
    for part in (0, 1):
        p.produce(topic, b"end-%d" % part, partition=part)
    assert p.flush(30) == 0
    return {b"end-0", b"end-1"}


@pytest.mark.parametrize("client", ["confluent", "rivulet", pytest.param("java", marks=pytest.mark.java)])
def test_released_records_come_back_and_rejected_or_exhausted_ones_are_archived(client):
    """Explicit acknowledgement: accepted and rejected records are delivered once; a record
    released every time comes back with a higher delivery count until
    group.share.delivery.count.limit, then is archived and never delivered again."""
    limit = 3
    b = BrokerProcess({**HEARTBEATS, "group.share.delivery.count.limit": str(limit)})
    b.start()
    consumers: list = []
    try:
        topic, group, n = "share-acks", f"share-acks-{client}", 30
        share_topic(b.bootstrap, topic, group, n)
        acked: list = []
        c = explicit_consumer(client, b.bootstrap, group, topic, acked)
        consumers.append(c)

        def kind(value: bytes) -> int:
            return ACCEPT if value.startswith(b"end") else (REJECT, RELEASE, ACCEPT)[int(value) % 3]
        deliveries: dict[bytes, list[int]] = {}

        def poll_round() -> None:
            for m in c.poll(0.5):
                assert m.error() is None, m.error()
                deliveries.setdefault(m.value(), []).append(m.delivery_count())
                c.acknowledge(m, kind(m.value()))

        def settled() -> bool:
            return all(len(deliveries.get(b"%d" % i, [])) == (limit if i % 3 == 1 else 1) for i in range(n))
        deadline = time.monotonic() + 120
        while not settled():
            assert time.monotonic() < deadline, deliveries
            poll_round()
        ends = produce_sentinels(b.bootstrap, topic)
        while not ends <= set(deliveries):
            assert time.monotonic() < deadline, deliveries
            poll_round()
        c.commit_sync()
        for i in range(n):
            assert deliveries[b"%d" % i] == (list(range(1, limit + 1)) if i % 3 == 1 else [1]), (i, deliveries)
        assert set(deliveries) == {b"%d" % i for i in range(n)} | ends
        assert [exc for _, exc in acked if exc is not None] == []
        assert sum(len(offsets) for r, _ in acked for offsets in r.values()) == \
            sum(len(d) for d in deliveries.values())
        assert share_partition_positions(b.bootstrap, group) == {0: (n // 2 + 1, 0), 1: (n // 2 + 1, 0)}
    finally:
        for c in consumers:
            c.close()
        b.cleanup()


HOLDER = """
import sys
if sys.argv[1] == "confluent":
    from confluent_kafka import ShareConsumer
else:
    from rivulet import ShareConsumer
c = ShareConsumer({"bootstrap.servers": sys.argv[2], "group.id": sys.argv[3],
                   "share.acknowledgement.mode": "explicit"})
c.subscribe([sys.argv[4]])
while True:
    held = [m for m in c.poll(1.0) if m.error() is None]
    if held:
        print(" ".join(m.value().decode() for m in held), flush=True);
        break
sys.stdin.read()  # holds them, unacknowledged, until it is killed
"""


@pytest.mark.parametrize("client", ["confluent", "rivulet"])
@pytest.mark.parametrize("how", ["kill -9", "stopped"])
def test_records_of_a_dead_member_come_back(client, how, tmp_path):
    """A member (a real process) acquires records and holds them: killed with SIGKILL, or
    stopped with SIGSTOP so that its connection stays open and only the acquisition lock
    (group.share.record.lock.duration.ms, 2 s here) lets them go. Another member then gets
    every record, the held ones delivered again (the dead member keeps its share of the
    partitions until its group session times out: 4 s here)."""
    import os
    import signal
    b = BrokerProcess({**BROKER, "group.share.min.record.lock.duration.ms": "1000",
                       "group.share.record.lock.duration.ms": "2000"})
    b.start()
    proc = None
    survivor = None
    try:
        topic, group, n = "share-held", f"share-held-{client}", 20
        share_topic(b.bootstrap, topic, group, n)
        proc = subprocess.Popen([sys.executable, "-c", HOLDER, client, b.bootstrap, group, topic],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=open(tmp_path / "holder.log", "wb"), text=True)
        assert proc.stdout is not None
        held = set(proc.stdout.readline().split())
        assert held, (tmp_path / "holder.log").read_text()
        if how == "kill -9":
            proc.kill()
            proc.wait(30)
        else:
            os.kill(proc.pid, signal.SIGSTOP)
        survivor = share_consumer_class("rivulet")({"bootstrap.servers": b.bootstrap, "group.id": group})
        survivor.subscribe([topic])
        counts: dict[str, int] = {}
        deadline = time.monotonic() + 120
        while len(counts) < n:
            assert time.monotonic() < deadline, (held, counts)
            for m in survivor.poll(0.5):
                assert m.error() is None, m.error()
                counts[m.value().decode()] = m.delivery_count()
        assert set(counts) == {str(i) for i in range(n)}
        # Exactly twice: a long poll the killed member left waiting ends with its connection
        # and acquires nothing.
        assert all(counts[v] == 2 for v in held), (held, counts)
        assert all(dc == 1 for v, dc in counts.items() if v not in held), (held, counts)
    finally:
        if survivor is not None:
            survivor.close()
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(30)
        b.cleanup()


@pytest.mark.parametrize("client", ["confluent", "rivulet"])
def test_random_acknowledgements_settle_every_record_once(client):
    """A long run: four explicit members acknowledge each delivery at random (ACCEPT 60 %,
    RELEASE 25 %, REJECT 15 %). Every record ends once: accepted or rejected on its last
    delivery, or released on delivery group.share.delivery.count.limit (archived); each was
    released on every delivery before its last, delivered with counts 1, 2, ... in turn. Every
    acknowledgement succeeded, and once all are settled nothing is delivered again before a
    sentinel record produced after them: the share partitions hold no Available record, and
    DescribeShareGroupOffsets shows each share-partition start offset at the partition's end."""
    import random
    limit, n, members = 4, 10000, 4
    rng = random.Random(932)
    b = BrokerProcess({**HEARTBEATS, "group.share.delivery.count.limit": str(limit)})
    b.start()
    consumers: list = []
    try:
        topic, group = "share-random", f"share-random-{client}"
        share_topic(b.bootstrap, topic, group, n)
        acked: list = []
        consumers += [explicit_consumer(client, b.bootstrap, group, topic, acked) for _ in range(members)]
        history: dict[bytes, list[tuple[int, int]]] = {}   # value -> (delivery count, acknowledge type)
        ends: set[bytes] = set()

        def poll_round() -> None:
            for c in consumers:
                for m in c.poll(0.1):
                    assert m.error() is None, m.error()
                    v = m.value()
                    kind = ACCEPT if v in ends else rng.choices((ACCEPT, RELEASE, REJECT), (60, 25, 15))[0]
                    history.setdefault(v, []).append((m.delivery_count(), kind))
                    c.acknowledge(m, kind)

        def final(h: list[tuple[int, int]]) -> bool:
            dc, kind = h[-1]
            return kind != RELEASE or dc >= limit
        deadline = time.monotonic() + 300
        values = {b"%d" % i for i in range(n)}
        while not (set(history) == values and all(final(h) for h in history.values())):
            assert time.monotonic() < deadline, sum(1 for h in history.values() if final(h))
            poll_round()
        settled = {v: list(h) for v, h in history.items()}
        ends |= produce_sentinels(b.bootstrap, topic)
        while not ends <= set(history):
            assert time.monotonic() < deadline
            poll_round()
        for c in consumers:  # the last acknowledgements go with close, their outcomes to the callback
            c.close()
        consumers.clear()
        # Nothing settled was delivered again.
        assert {v: h for v, h in history.items() if v not in ends} == settled
        for v, h in settled.items():
            assert [dc for dc, _ in h] == list(range(1, len(h) + 1)), (v, h)
            assert all(kind == RELEASE for _, kind in h[:-1]), (v, h)
        outcomes = {"accepted": 0, "rejected": 0, "exhausted": 0}
        for h in settled.values():
            dc, kind = h[-1]
            outcomes["accepted" if kind == ACCEPT else "rejected" if kind == REJECT else "exhausted"] += 1
        assert sum(outcomes.values()) == n and all(outcomes.values()), outcomes
        assert [exc for _, exc in acked if exc is not None] == []
        assert sum(len(offsets) for r, _ in acked for offsets in r.values()) == \
            sum(len(h) for h in history.values())
        # The broker's share-partition state agrees: every record, sentinels included, is
        # Acknowledged or Archived, so each start offset is at the partition's end, with no lag.
        assert share_partition_positions(b.bootstrap, group) == {0: (n // 2 + 1, 0), 1: (n // 2 + 1, 0)}
    finally:
        for c in consumers:
            c.close()
        b.cleanup()


def test_rivulet_share_consumer_acknowledgement_rules_renew_and_commit_async():
    """Rivulet's ShareConsumer as confluent-kafka's: in explicit mode a poll before every record
    of the last one is acknowledged is refused, acknowledge() is refused in implicit mode and
    for a record not in flight; RENEW keeps a record acquired (it is then acknowledged for
    good); commit_sync answers per partition, commit_async through the callback."""
    from rivulet import AcknowledgeType, KafkaException
    from rivulet import ShareConsumer as RivuletShareConsumer
    b = BrokerProcess(HEARTBEATS)
    b.start()
    consumers: list = []
    try:
        topic, group, n = "share-rules", "share-rules", 6
        share_topic(b.bootstrap, topic, group, n)
        implicit = RivuletShareConsumer({"bootstrap.servers": b.bootstrap, "group.id": group + "-other"})
        consumers.append(implicit)
        with pytest.raises(KafkaException):
            implicit.poll(0)  # not subscribed
        acked: list = []
        c = explicit_consumer("rivulet", b.bootstrap, group, topic, acked)
        consumers.append(c)
        with pytest.raises(KafkaException):
            implicit.acknowledge_offset(topic, 0, 0, AcknowledgeType.ACCEPT)  # implicit mode
        deadline = time.monotonic() + 60
        batch: list = []
        while not batch:
            assert time.monotonic() < deadline
            batch = [m for m in c.poll(0.5) if m.error() is None]
        with pytest.raises(KafkaException):
            c.poll(0)  # the batch is not acknowledged
        with pytest.raises(KafkaException):
            c.acknowledge_offset(topic, 0, 999, AcknowledgeType.ACCEPT)  # not in flight
        for m in batch:
            c.acknowledge(m, AcknowledgeType.RENEW)
        renewed = c.commit_sync()
        assert renewed and all(v is None for v in renewed.values()), renewed
        for m in batch:
            c.acknowledge(m, AcknowledgeType.ACCEPT)  # renewed records are still in flight
        c.commit_async()
        seen = {m.value() for m in batch}
        renews = len(batch)
        while len(seen) < n or sum(len(o) for r, _ in acked for o in r.values()) < renews + n:
            assert time.monotonic() < deadline, (seen, acked)
            for m in c.poll(0.2):
                assert m.error() is None, m.error()
                assert m.delivery_count() == 1 and m.value() not in seen
                seen.add(m.value())
                c.acknowledge(m)
            c.commit_async()
        assert [exc for _, exc in acked if exc is not None] == []
        assert seen == {b"%d" % i for i in range(n)}
        implicit.subscribe([topic])
        assert implicit.subscription() == [topic]
        implicit.subscribe([])  # confluent-kafka's unsubscribe()
        assert implicit.subscription() == []
        c.close()
        with pytest.raises(KafkaException):
            c.poll(0)  # closed
    finally:
        for c in consumers:
            c.close()
        b.cleanup()


@pytest.mark.parametrize("client", ["confluent", "rivulet"])
def test_record_lock_limit_cuts_a_stored_batch(client):
    """group.share.partition.max.record.locks=100 and 200 records stored as one batch: the
    share consumer is never handed more than 100 records at a time (the broker acquires part
    of the batch and answers with AcquiredRecords covering only that part, which the client
    delivers alone); once they are acknowledged the rest of the batch follows, each record
    once. Kafka 4.3 would hand out all 200 at once."""
    from rivulet.protocol.messages import produce_request as prq
    from rivulet.protocol.records import Record, encode_batch, iter_batches
    b = BrokerProcess({**HEARTBEATS, "group.share.partition.max.record.locks": "100"})
    b.start()
    consumers: list = []
    try:
        topic, group, n = "share-locks", f"share-locks-{client}", 200
        share_topic(b.bootstrap, topic, group, 0, partitions=1)

        async def one_batch() -> int:
            # Written as one batch by hand: a client's batching is not certain under load (CI
            # once saw librdkafka send the first record of the 200 alone).
            host, port = b.bootstrap.split(":")
            conn = await BrokerConnection(host, int(port)).connect()
            try:
                resp = await conn.send(prq.ProduceRequest(
                    transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[prq.TopicProduceData(
                        name=topic, partition_data=[prq.PartitionProduceData(index=0, records=encode_batch(
                            [Record(i, None, None, b"%d" % i, []) for i in range(n)]))])]))
            finally:
                await conn.close()
            return resp.responses[0].partition_responses[0].error_code

        assert asyncio.run(one_batch()) == 0
        stored = (Path(b.data_dir) / f"{topic}-0" / ("0" * 20 + ".log")).read_bytes()
        assert [(h.base_offset, h.last_offset) for _, h in iter_batches(stored)] == [(0, n - 1)]

        c = explicit_consumer(client, b.bootstrap, group, topic)
        consumers.append(c)
        polls: list[list[int]] = []
        acknowledged = 0
        deadline = time.monotonic() + 90
        while acknowledged < n:
            assert time.monotonic() < deadline, polls
            got = c.poll(0.5)
            if not got:
                continue
            assert all(m.error() is None for m in got), [m.error() for m in got]
            polls.append([m.offset() for m in got])
            for m in got:
                c.acknowledge(m, ACCEPT)
            assert all(v is None for v in c.commit_sync().values())
            acknowledged += len(got)
        assert sorted(o for offsets in polls for o in offsets) == list(range(n))
        assert polls[0] == list(range(100)), polls
    finally:
        for c in consumers:
            c.close()
        b.cleanup()


@pytest.mark.parametrize("client", ["confluent", "rivulet"])
def test_a_share_fetch_waits_for_fetch_min_bytes(client):
    """fetch.min.bytes goes out as the ShareFetch's MinBytes, and the broker, as Kafka's
    DelayedShareFetch does, answers once that many bytes lie from the group's next record to
    the high watermark (or at fetch.wait.max.ms): one small record is not handed out alone,
    it comes with the records produced after it, which pass MinBytes."""
    from confluent_kafka import Producer
    b = BrokerProcess(HEARTBEATS)
    b.start()
    consumers: list = []
    try:
        topic, group, n = "share-min-bytes", f"share-min-bytes-{client}", 100
        share_topic(b.bootstrap, topic, group, 1, partitions=1)  # record "0", a few bytes
        c = share_consumer_class(client)({"bootstrap.servers": b.bootstrap, "group.id": group,
                                          "fetch.min.bytes": 50_000, "fetch.wait.max.ms": 10_000})
        consumers.append(c)
        c.subscribe([topic])
        polls: list[list[bytes]] = []
        settle = time.monotonic() + 3  # the member joins and its ShareFetch waits
        while time.monotonic() < settle:
            if got := [m.value() for m in c.poll(0.5) if m.error() is None]:
                polls.append(got)
        p = Producer({"bootstrap.servers": b.bootstrap})
        for i in range(n):
            p.produce(topic, b"%d" % (i + 1) + b"." * 1024, partition=0)
        assert p.flush(30) == 0
        deadline = time.monotonic() + 60
        while sum(len(got) for got in polls) < n + 1:
            assert time.monotonic() < deadline, polls
            if got := [m.value() for m in c.poll(0.5) if m.error() is None]:
                polls.append(got)
        assert polls[0][0] == b"0" and len(polls[0]) > 1, [len(got) for got in polls]
        assert sorted(v.split(b".")[0] for got in polls for v in got) == sorted(b"%d" % i for i in range(n + 1))
    finally:
        close_within(consumers, 60)
        b.cleanup()
