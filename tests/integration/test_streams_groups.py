"""KIP-1071 streams groups against a real broker, with raw StreamsGroupHeartbeat and
StreamsGroupDescribe requests through Rivulet's own connection: a member's topology gets its
internal topics created, a second member gets tasks once the first revoked them, the group survives a
broker restart, a silent member's
session expires and its tasks move, and the group is listed with its type; Kafka's
kafka-streams-groups.sh lists and describes it as it does a group on Kafka 4.3.1. Kafka Streams
4.3.1's word count on one broker, on three (ZooKeeper mode, RF 3) and on Kafka 4.3.1, through
the kill -9 of one of its two instances, with the same output."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable, TypeVar

import pytest

from rivulet.client import core
from rivulet.client.connection import BrokerConnection
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages import create_topics_request as ctq
from rivulet.protocol.messages import describe_groups_request as dgrq
from rivulet.protocol.messages import join_group_request as jgq
from rivulet.protocol.messages import list_groups_request as lgq
from rivulet.protocol.messages import metadata_request as mq
from rivulet.protocol.messages import offset_commit_request as ocq
from rivulet.protocol.messages import streams_group_describe_request as sgdq
from rivulet.protocol.messages import streams_group_heartbeat_request as sghq
from rivulet.testing import BrokerProcess
from tests import java_tools as jt
from tests.cluster import three_brokers
from tests.group_members import RawMember, beat_until, find_coordinator, set_group_configs, until, while_beating
from tests.integration.test_replication_faults import BROKER_CONFIG, create_topic

pytestmark = pytest.mark.integration

# Short sessions so that a silent member is fenced within seconds (the bounds allow it).
BROKER = {"group.streams.min.session.timeout.ms": "2000", "group.streams.session.timeout.ms": "3000",
          "group.streams.min.heartbeat.interval.ms": "500", "group.streams.heartbeat.interval.ms": "500"}
GROUP, TOPIC = "wordcount", "streams-it-input"
REPARTITION, CHANGELOG = "wordcount-counts-repartition", "wordcount-counts-changelog"

TOPOLOGY = sghq.Topology(epoch=1, subtopologies=[
    sghq.Subtopology(subtopology_id="0", source_topics=[TOPIC], source_topic_regex=[], state_changelog_topics=[],
                     repartition_sink_topics=[REPARTITION], repartition_source_topics=[], copartition_groups=[]),
    sghq.Subtopology(subtopology_id="1", source_topics=[], source_topic_regex=[],
                     state_changelog_topics=[sghq.TopicInfo(name=CHANGELOG, topic_configs=[])],
                     repartition_sink_topics=[],
                     repartition_source_topics=[sghq.TopicInfo(name=REPARTITION, topic_configs=[])],
                     copartition_groups=[]),
])


def tasks(ids: list[Any] | None) -> set[tuple[str, int]] | None:
    return None if ids is None else {(t.subtopology_id, p) for t in ids for p in t.partitions}


def ids(held: set[tuple[str, int]]) -> list[sghq.TaskIds]:
    subs = sorted({s for s, _ in held})
    return [sghq.TaskIds(subtopology_id=s, partitions=sorted(p for t, p in held if t == s)) for s in subs]


class Member(RawMember):
    """A member as Kafka Streams runs one: it reports the tasks it holds, and takes what it is given
    (``revokes`` False: it never gives a task up, as a member stuck in its revocation)."""

    def __init__(self, conn: BrokerConnection, member_id: str, rebalance_timeout_ms: int = 30000,
                 endpoint: tuple[str, int] | None = None, revokes: bool = True, group: str = GROUP,
                 topology: sghq.Topology = TOPOLOGY) -> None:
        super().__init__(conn, member_id)
        self.active: set[tuple[str, int]] = set()
        self.rebalance_timeout_ms, self.endpoint, self.revokes = rebalance_timeout_ms, endpoint, revokes
        self.group, self.topology = group, topology
        self.endpoint_epoch = -1

    def request(self) -> sghq.StreamsGroupHeartbeatRequest:
        joining = self.epoch == 0
        return sghq.StreamsGroupHeartbeatRequest(
            group_id=self.group, member_id=self.member_id, member_epoch=self.epoch,
            endpoint_information_epoch=self.endpoint_epoch,
            rebalance_timeout_ms=self.rebalance_timeout_ms if joining else -1,
            topology=self.topology if joining else None,
            active_tasks=ids(self.active), standby_tasks=[], warmup_tasks=[], process_id=self.member_id + "-p",
            user_endpoint=None if self.endpoint is None else sghq.Endpoint(host=self.endpoint[0],
                                                                          port=self.endpoint[1]),
            client_tags=[], task_offsets=None, task_end_offsets=None, shutdown_application=False)

    def took(self, response: Any) -> None:
        self.endpoint_epoch = response.endpoint_information_epoch
        if response.active_tasks is not None:
            given = tasks(response.active_tasks) or set()
            self.active = given if self.revokes else self.active | given


def test_streams_group_lifecycle():
    b = BrokerProcess(BROKER)
    b.start()
    try:
        asyncio.run(_lifecycle(b))
    finally:
        b.cleanup()


async def _lifecycle(b: BrokerProcess) -> None:
    conn = await BrokerConnection("127.0.0.1", b.port, client_id="streams-it").connect(10)
    try:
        await find_coordinator(conn, GROUP)
        assert conn.has_api(88) and conn.has_api(89)
        r = await conn.send(ctq.CreateTopicsRequest(topics=[ctq.CreatableTopic(
            name=TOPIC, num_partitions=2, replication_factor=1, assignments=[], configs=[])], timeout_ms=10000,
            validate_only=False))
        assert r.topics[0].error_code == 0

        # The first member: the group's initial rebalance delay runs (the broker's default, 3 s; it
        # waits at epoch 1) and its internal topics are missing, then created, then it has every task.
        a = Member(conn, "a")
        first = await a.beat()
        assert (first.member_epoch, first.heartbeat_interval_ms) == (1, 500)
        assert [(s.status_code, s.status_detail) for s in first.status] == [
            (5, "Assignment delayed due to the configured initial rebalance delay."),  # ASSIGNMENT_DELAYED
            (3, f"Internal topics are missing: {REPARTITION}, {CHANGELOG}")]  # MISSING_INTERNAL_TOPICS
        assert first.active_tasks == []

        await beat_until([a], lambda: len(a.active) == 4, "the internal topics and the tasks")
        assert not (await a.beat()).status
        assert a.active == {("0", 0), ("0", 1), ("1", 0), ("1", 1)}
        md = await conn.send(mq.MetadataRequest(topics=[mq.MetadataRequestTopic(name=REPARTITION),
                                                        mq.MetadataRequestTopic(name=CHANGELOG)],
                                                allow_auto_topic_creation=False))
        assert {t.name: len(t.partitions) for t in md.topics} == {REPARTITION: 2, CHANGELOG: 2}

        # A second member: a gives up half its tasks first, then b has them.
        b_member = Member(conn, "b")
        await b_member.beat()
        assert b_member.active == set()

        await beat_until([a, b_member], lambda: len(a.active) == 2 and len(b_member.active) == 2, "the tasks shared")
        assert a.active.isdisjoint(b_member.active) and a.epoch == b_member.epoch

        # Members commit offsets at their current epoch (Kafka Streams' OffsetCommit).
        async def commit(member: str, epoch: int) -> int:
            r = await conn.send(ocq.OffsetCommitRequest(
                group_id=GROUP, generation_id_or_member_epoch=epoch, member_id=member, topics=[
                    ocq.OffsetCommitRequestTopic(name=TOPIC, partitions=[ocq.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=0)])]), version=9)
            return r.topics[0].partitions[0].error_code
        assert await commit("a", a.epoch) == 0
        assert await commit("a", a.epoch - 1) == ErrorCode.STALE_MEMBER_EPOCH
        assert await commit("ghost", a.epoch) == ErrorCode.UNKNOWN_MEMBER_ID

        d = (await conn.send(sgdq.StreamsGroupDescribeRequest(group_ids=[GROUP],
                                                              include_authorized_operations=False))).groups[0]
        assert (d.error_code, d.group_state, d.topology.epoch) == (0, "Stable", 1)
        assert sorted(m.member_id for m in d.members) == ["a", "b"]
        assert {m.member_id: m.process_id for m in d.members} == {"a": "a-p", "b": "b-p"}
        listed = await conn.send(lgq.ListGroupsRequest(states_filter=[], types_filter=["streams"]))
        assert [(g.group_id, g.group_type, g.protocol_type, g.group_state) for g in listed.groups] == \
            [(GROUP, "streams", "streams", "Stable")]
        # `rivulet groups` shows the streams group as kafka-streams-groups does.
        def cli(*args: str) -> str:
            r = subprocess.run([sys.executable, "-m", "rivulet", "groups", *args, "--bootstrap-server", b.bootstrap],
                               capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr
            return r.stdout
        assert (await while_beating([a, b_member], lambda: cli("list", "--type", "streams"))).split() == [GROUP]
        members = (await while_beating([a, b_member], lambda: cli("describe", "--group", GROUP, "--members")))
        lines = members.splitlines()
        assert lines[0].split() == ["GROUP", "MEMBER", "PROCESS", "CLIENT-ID", "ASSIGNMENTS"]
        rows = sorted(line.split(None, 4) for line in lines[1:] if line.strip())
        assert [r[:4] for r in rows] == [[GROUP, "a", "a-p", "streams-it"], [GROUP, "b", "b-p", "streams-it"]]
        assert all(r[4].startswith("ACTIVE: ") for r in rows)
        state = json.loads(await while_beating([a, b_member], lambda: cli(
            "describe", "--group", GROUP, "--state", "--verbose", "--format", "json")))
        assert [(s["group"], s["state"], s["group_epoch"] == s["target_assignment_epoch"], s["members"])
                for s in state] == [(GROUP, "Stable", True, 2)]
        lag = json.loads(await while_beating([a, b_member], lambda: cli(
            "describe", "--group", GROUP, "--verbose", "--format", "json")))
        assert sorted((r["topic"], r["partition"], r["current_offset"]) for r in lag) == [
            (TOPIC, 0, 0), (TOPIC, 1, None), (REPARTITION, 0, None), (REPARTITION, 1, None)]
        # DescribeGroups, the classic API: v6 says what the group is (KIP-1043), older versions a Dead group.
        for version, expected in ((5, (0, "Dead", None)),
                                  (6, (ErrorCode.GROUP_ID_NOT_FOUND, "", f"Group {GROUP} is not a classic group."))):
            g = (await conn.send(dgrq.DescribeGroupsRequest(groups=[GROUP], include_authorized_operations=False),
                                 version=version)).groups[0]
            assert (g.error_code, g.group_state, g.error_message if version >= 6 else None) == expected
        # A classic member cannot take its id.
        j = await conn.send(jgq.JoinGroupRequest(group_id=GROUP, session_timeout_ms=10000,
                                                 rebalance_timeout_ms=10000, member_id="", protocol_type="consumer",
                                                 protocols=[jgq.JoinGroupRequestProtocol(name="range",
                                                                                         metadata=b"")]))
        assert j.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL

        # A restart keeps the group: members, epochs, tasks and topology come back from __consumer_offsets.
        before = {m.member_id: (m.member_epoch, m.assignment) for m in d.members}
        await conn.close()
        b.restart()
        conn = await BrokerConnection("127.0.0.1", b.port, client_id="streams-it").connect(10)
        a.conn = b_member.conn = conn

        async def reloaded():
            r = await conn.send(sgdq.StreamsGroupDescribeRequest(group_ids=[GROUP], include_authorized_operations=False))
            return r.groups[0] if r.groups[0].error_code == 0 else None
        d = await until(reloaded, "the group loaded again")
        assert {m.member_id: (m.member_epoch, m.assignment) for m in d.members} == before
        assert (d.group_state, d.topology.epoch) == ("Stable", 1)
        held = set(a.active)
        r = await a.beat()
        assert r.member_epoch == a.epoch and a.active == held

        # b falls silent: its session expires and a takes every task back.
        await beat_until([a], lambda: len(a.active) == 4, "b's session to expire")
        d = (await conn.send(sgdq.StreamsGroupDescribeRequest(group_ids=[GROUP],
                                                              include_authorized_operations=False))).groups[0]
        assert [m.member_id for m in d.members] == ["a"]

        # A member that leaves ends the group's membership.
        gone = await conn.send(sghq.StreamsGroupHeartbeatRequest(
            group_id=GROUP, member_id="a", member_epoch=-1, endpoint_information_epoch=0, rebalance_timeout_ms=-1,
            shutdown_application=False))
        assert (gone.error_code, gone.member_epoch) == (0, -1)
        d = (await conn.send(sgdq.StreamsGroupDescribeRequest(group_ids=[GROUP],
                                                              include_authorized_operations=False))).groups[0]
        assert (d.group_state, d.members) == ("Empty", [])
    finally:
        await conn.close()


def test_a_member_that_does_not_revoke_in_its_rebalance_timeout_is_fenced():
    b = BrokerProcess(BROKER)
    b.start()
    try:
        asyncio.run(_revocation(b))
    finally:
        b.cleanup()


async def _revocation(b: BrokerProcess) -> None:
    conn = await BrokerConnection("127.0.0.1", b.port, client_id="streams-it").connect(10)
    try:
        await find_coordinator(conn, GROUP)
        r = await conn.send(ctq.CreateTopicsRequest(topics=[ctq.CreatableTopic(
            name=TOPIC, num_partitions=2, replication_factor=1, assignments=[], configs=[])], timeout_ms=10000,
            validate_only=False))
        assert r.topics[0].error_code == 0
        # a serves Interactive Queries at an endpoint; it is told which partitions it holds there.
        a = Member(conn, "a", rebalance_timeout_ms=3000, endpoint=("a-host", 7001), revokes=False)
        await beat_until([a], lambda: len(a.active) == 4, "the tasks")
        a.endpoint_epoch = -1
        r = await a.beat()
        assert [(e.user_endpoint.host, e.user_endpoint.port, sorted((t.topic, tuple(t.partitions))
                                                                    for t in e.active_partitions))
                for e in r.partitions_by_user_endpoint] == \
            [("a-host", 7001, [(TOPIC, (0, 1)), (REPARTITION, (0, 1))])]
        assert (await a.beat()).partitions_by_user_endpoint is None  # up to date
        # What Kafka 4.3.1's coordinator does not support yet is refused, with its messages.
        for field, value, message in (
                ("instance_id", "i-1", "Static membership is not yet supported."),
                ("task_offsets", [], "TaskOffsets are not supported yet."),
                ("task_end_offsets", [], "TaskEndOffsets are not supported yet."),
                ("warmup_tasks", [sghq.TaskIds(subtopology_id="0", partitions=[0])], "WarmupTasks are not supported yet.")):
            req = a.request()
            setattr(req, field, value)
            r = await conn.send(req)
            assert (r.error_code, r.error_message) == (ErrorCode.INVALID_REQUEST, message)

        # b joins; a is told to give half its tasks up and never does: after its rebalance
        # timeout (3 s) it is fenced, though it keeps heartbeating, and b has every task.
        b_member = Member(conn, "b")
        await b_member.beat()

        async def a_fenced() -> bool:
            r = await conn.send(a.request())
            if r.error_code != 0:
                return r.error_code == ErrorCode.UNKNOWN_MEMBER_ID
            a.took(r)
            await b_member.beat()
            return False
        await until(a_fenced, "a fenced for not revoking")
        await beat_until([b_member], lambda: len(b_member.active) == 4, "b to take every task")
    finally:
        await conn.close()


T = TypeVar("T")


def side_by_side(probe: Callable[[str], T], kafka_bootstrap: str) -> tuple[T, T]:
    """What `probe` sees on a fresh Rivulet broker with the streams test sessions, then on
    the reference Kafka broker."""
    b = BrokerProcess(STREAMS_SESSIONS)
    b.start()
    try:
        ours = probe(b.bootstrap)
    finally:
        b.cleanup()
    return ours, probe(kafka_bootstrap)


@pytest.mark.java
@pytest.mark.timeout(600)
def test_kafka_streams_groups_tool_describes_a_streams_group(java, kafka_streams_ref):
    """kafka-streams-groups.sh's list and describe (state, members, offsets) against Rivulet and
    against Kafka 4.3.1, each with one member holding every task: the same columns, group state,
    epochs, members, assignments and offsets."""
    ours, theirs = side_by_side(lambda bootstrap: asyncio.run(_tool(bootstrap)), kafka_streams_ref)
    assert ours == theirs
    assert ours["list"] == [GROUP]
    # A new group's first epoch is 2, the internal topics' creation moves it to 3 (as Kafka 4.3.1 counts).
    assert [(s["STATE"], s["#MEMBERS"], s["GROUP-EPOCH"]) for s in ours["state"]] == [("Stable", "1", "3")]
    assert ours["members"][2] == [["ACTIVE:", "0:[0,1];", "1:[0,1];", "TARGET-ACTIVE:", "0:[0,1];", "1:[0,1];"]]


async def _tool(bootstrap: str) -> dict[str, Any]:
    """What kafka-streams-groups.sh shows of the group with one member ("a") that holds every
    task, less what differs by broker (hosts, ids)."""
    host, port = bootstrap.rsplit(":", 1)
    conn = await BrokerConnection(host, int(port), client_id="streams-it").connect(10)
    try:
        r = await conn.send(ctq.CreateTopicsRequest(topics=[ctq.CreatableTopic(
            name=TOPIC, num_partitions=2, replication_factor=1, assignments=[], configs=[])], timeout_ms=10000,
            validate_only=False))
        assert r.topics[0].error_code == 0
        a = Member(conn, "a")

        async def coordinator() -> bool:
            # Kafka creates __consumer_offsets when a coordinator is first looked for, then loads it.
            if core.read_find_coordinator(await conn.send(core.find_coordinator_request(GROUP, 0)))[0] != 0:
                return False
            d = await conn.send(sgdq.StreamsGroupDescribeRequest(group_ids=[GROUP], include_authorized_operations=False))
            return d.groups[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
        await until(coordinator, "the group's coordinator")
        await beat_until([a], lambda: len(a.active) == 4, "the tasks")

        def tool(*args: str) -> str:
            return jt.run_tool(jt.STREAMS_GROUP_COMMAND, ["--bootstrap-server", bootstrap, *args], timeout=60).stdout
        shown: dict[str, Any] = {"list": (await while_beating([a], lambda: tool("--list"))).split()}
        state = await while_beating([a], lambda: jt.streams_group_command(
            bootstrap, ["--describe", "--group", GROUP, "--state", "--verbose"]))
        epochs = {s["GROUP-EPOCH"] for s in state} | {s["TARGET-ASSIGNMENT-EPOCH"] for s in state}
        shown["state"] = [{k: v for k, v in s.items() if k != "COORDINATOR"} for s in state]
        # The assignments column has spaces: the fields before it are read, and it whole.
        members = (await while_beating([a], lambda: tool("--describe", "--group", GROUP, "--members",
                                                         "--verbose"))).splitlines()
        header = members[0].split()
        rows = [dict(zip(header[:8], line.split()[:8], strict=True)) for line in members[1:] if line.strip()]
        epochs |= {r[k] for r in rows for k in ("TARGET-ASSIGNMENT-EPOCH", "MEMBER-EPOCH")}
        assert len(epochs) == 1, epochs  # the group, its target assignment and the member agree
        shown["members"] = [header, rows,
                            [line[line.index("ACTIVE:"):].split() for line in members[1:] if "ACTIVE:" in line]]
        offsets = await while_beating([a], lambda: jt.streams_group_command(
            bootstrap, ["--describe", "--group", GROUP, "--offsets", "--verbose"]))
        shown["offsets"] = sorted(tuple(sorted(o.items())) for o in offsets)
        return shown
    finally:
        await conn.close()


def one_store(app: str) -> sghq.Topology:
    """An application reading ``<app>-input`` into a store: one subtopology, whose changelog is
    ``<app>-store-changelog``."""
    return sghq.Topology(epoch=1, subtopologies=[sghq.Subtopology(
        subtopology_id="0", source_topics=[f"{app}-input"], source_topic_regex=[],
        state_changelog_topics=[sghq.TopicInfo(name=f"{app}-store-changelog", topic_configs=[])],
        repartition_sink_topics=[], repartition_source_topics=[], copartition_groups=[])])


@pytest.mark.java
@pytest.mark.timeout(600)
def test_the_initial_rebalance_delay_and_the_assignment_interval_as_kafka(java, kafka_streams_ref):
    """Two members joining one after the other, answered alike by Rivulet and Kafka 4.3.1. With a
    group's streams.initial.rebalance.delay.ms (2 s, a group config over the brokers' 0) both wait at
    epoch 1 with no tasks and ASSIGNMENT_DELAYED, then one assignment gives both their tasks at the
    group epoch. Without it (group.streams.assignment.interval.ms, 1 s by default) the first has
    every task at once and the second waits for the interval, ASSIGNMENT_DELAYED meanwhile."""
    def both(bootstrap: str) -> list[dict[str, Any]]:
        return [asyncio.run(_two_join(bootstrap, "delayed-app", {"streams.initial.rebalance.delay.ms": "2000"})),
                asyncio.run(_two_join(bootstrap, "interval-app", {}))]
    ours, theirs = side_by_side(both, kafka_streams_ref)
    assert ours == theirs
    delayed, interval = ours
    assert delayed["joined"] == [(1, [5], 0), (1, [5], 0)]
    assert delayed["waiting"] == ("Assigning", 3, 1)
    assert delayed["assigned"] == ((3, 3), [1, 1], ("Stable", 3, 3))  # two tasks, one each
    assert interval["joined"] == [(2, [], 2), (2, [5], 0)]
    assert interval["waiting"] == ("Assigning", 3, 2)
    assert interval["assigned"] == ((2, 3), [2, 1], ("Stable", 3, 3))  # a had both; b's came once a gave one up


async def _two_join(bootstrap: str, app: str, group_configs: dict[str, str]) -> dict[str, Any]:
    """What two members joining ``app`` (with these group configs) are answered: their joins
    (epoch, status codes, tasks), the group just after (state, group and target epochs), and each
    one's first answer with tasks (epoch, tasks) and the group then. The group's topics exist
    beforehand, so that only the delays hold an assignment back."""
    host, port = bootstrap.rsplit(":", 1)
    conn = await BrokerConnection(host, int(port), client_id="streams-it").connect(10)
    try:
        r = await conn.send(ctq.CreateTopicsRequest(topics=[ctq.CreatableTopic(
            name=name, num_partitions=2, replication_factor=1, assignments=[], configs=[])
            for name in (f"{app}-input", f"{app}-store-changelog")], timeout_ms=10000, validate_only=False))
        assert [t.error_code for t in r.topics] == [0, 0]

        async def known() -> bool:
            # Kafka's coordinator learns of new topics a while after they are created: a member of
            # another group finds the source topic before the test's members join.
            probe = Member(conn, "probe", group=f"{app}-probe", topology=one_store(app))
            if core.read_find_coordinator(await conn.send(core.find_coordinator_request(probe.group, 0)))[0] != 0:
                return False  # Kafka creates __consumer_offsets when a coordinator is first looked for
            r = await conn.send(probe.request())
            if r.error_code != 0:
                return False
            await conn.send(sghq.StreamsGroupHeartbeatRequest(
                group_id=probe.group, member_id="probe", member_epoch=-1, endpoint_information_epoch=0,
                rebalance_timeout_ms=-1, shutdown_application=False))
            return all(s.status_code != 1 for s in r.status)  # no MISSING_SOURCE_TOPICS
        await until(known, "the topics known to the group coordinator")
        if group_configs:
            await set_group_configs(conn, app, group_configs)

        async def describe() -> Any:
            return (await conn.send(sgdq.StreamsGroupDescribeRequest(group_ids=[app],
                                                                     include_authorized_operations=False))).groups[0]

        async def coordinator() -> bool:
            if core.read_find_coordinator(await conn.send(core.find_coordinator_request(app, 0)))[0] != 0:
                return False
            return (await describe()).error_code == ErrorCode.GROUP_ID_NOT_FOUND
        await until(coordinator, "the group's coordinator")
        members = [Member(conn, m, group=app, topology=one_store(app)) for m in ("a", "b")]
        shown: dict[str, Any] = {"joined": []}
        for m in members:
            r = await m.beat()
            shown["joined"].append((r.member_epoch, [s.status_code for s in r.status], len(tasks(r.active_tasks))))
        d = await describe()
        shown["waiting"] = (d.group_state, d.group_epoch, d.assignment_epoch)
        statuses: set[int] = set()
        first_tasks: dict[str, tuple[int, int]] = {}  # member -> (epoch, tasks) of its first answer with tasks
        for m in members:
            if m.active:
                first_tasks[m.member_id] = (m.epoch, len(m.active))

        async def step() -> bool:
            for m in members:
                r = await m.beat()
                statuses.update(s.status_code for s in r.status)
                if m.active and m.member_id not in first_tasks:
                    first_tasks[m.member_id] = (r.member_epoch, len(m.active))
            return len(first_tasks) == 2 and len({m.epoch for m in members}) == 1 and \
                (await describe()).group_state == "Stable"
        await until(step, "the assignment")
        assert statuses <= {5}, (bootstrap, app, statuses, shown)  # nothing but the delays held them back
        d = await describe()
        shown["assigned"] = (tuple(first_tasks[m][0] for m in ("a", "b")), [first_tasks[m][1] for m in ("a", "b")],
                             (d.group_state, d.group_epoch, d.assignment_epoch))
        return shown
    finally:
        await conn.close()


@pytest.mark.java
@pytest.mark.timeout(600)
def test_stale_and_changed_topologies_standbys_and_shutdown_as_kafka(java, kafka_streams_ref):
    """What Kafka 4.3.1 answers, and Rivulet alike: a member with an older topology is told it is
    stale at every heartbeat; a newer topology is INVALID_REQUEST, even in an emptied group; a
    changed streams.num.standby.replicas moves the group epoch; a shutdown request names the member."""
    ours, theirs = side_by_side(lambda bootstrap: asyncio.run(_topology_answers(bootstrap)), kafka_streams_ref)
    assert ours == theirs
    assert ours["stale"][1] == [(0, "The member's topology epoch 0 is behind the group's topology epoch 1.")]
    assert ours["newer"] == ours["newer when empty"] == (ErrorCode.INVALID_REQUEST,
                                                           "Topology updates are not supported yet.")
    assert ours["standby epochs"][1] == ours["standby epochs"][0] + 1


async def _topology_answers(bootstrap: str) -> dict[str, Any]:
    app = "topology-app"
    shown: dict[str, Any] = {"joined": await _two_join(bootstrap, app, {"streams.assignment.interval.ms": "0"})}
    host, port = bootstrap.rsplit(":", 1)
    conn = await BrokerConnection(host, int(port), client_id="streams-it").connect(10)
    try:
        def answer(r: Any) -> tuple[int, list[tuple[int, str]]]:
            assert r.error_code == 0, (r.error_code, r.error_message)
            return r.member_epoch, [(s.status_code, s.status_detail) for s in r.status]

        async def leave(member_id: str) -> None:
            r = await conn.send(sghq.StreamsGroupHeartbeatRequest(
                group_id=app, member_id=member_id, member_epoch=-1, endpoint_information_epoch=0,
                rebalance_timeout_ms=-1, shutdown_application=False))
            assert r.error_code == 0

        async def group_epoch() -> int:
            return (await conn.send(sgdq.StreamsGroupDescribeRequest(
                group_ids=[app], include_authorized_operations=False))).groups[0].group_epoch

        def with_epoch(epoch: int) -> sghq.Topology:
            topology = one_store(app)
            topology.epoch = epoch
            return topology
        for m in ("a", "b"):  # the two members of _two_join, silent now
            await leave(m)
        old = Member(conn, "old", group=app, topology=with_epoch(0))
        shown["stale"] = [answer(await conn.send(old.request())), None]
        old.epoch = shown["stale"][0][0]
        shown["stale"][1] = answer(await conn.send(old.request()))[1]
        newer = await conn.send(Member(conn, "new", group=app, topology=with_epoch(2)).request())
        shown["newer"] = (newer.error_code, newer.error_message)

        before = await group_epoch()
        await set_group_configs(conn, app, {"streams.num.standby.replicas": "1"})

        async def moved() -> int | None:
            # Kafka's coordinator takes a group config from its metadata log, which a heartbeat
            # sent at once can outrun on a busy machine: the next one then moves the epoch.
            await old.beat()
            epoch = await group_epoch()
            return epoch if epoch != before else None
        shown["standby epochs"] = (before, await until(moved, "the group epoch to move"))
        request = old.request()
        request.shutdown_application = True
        shown["shutdown"] = answer(await conn.send(request))[1]
        await leave("old")
        newer = await conn.send(Member(conn, "new", group=app, topology=with_epoch(2)).request())
        shown["newer when empty"] = (newer.error_code, newer.error_message)
        return shown
    finally:
        await conn.close()


# ---------------------------------------------------------------- Kafka Streams 4.3.1 itself

WORD_COUNT = Path(__file__).resolve().parents[1] / "java" / "StreamsWordCount.java"


def word_counts(lines: list[str]) -> dict[str, int]:
    """The batch recount: what the application's last count of each word must be."""
    counts: dict[str, int] = {}
    for line in lines:
        for w in re.split(r"\W+", line.lower()):
            counts[w] = counts.get(w, 0) + 1
    return counts


# Short streams sessions, on Rivulet and on Kafka alike, so that a killed instance's tasks move
# within seconds rather than after Kafka's 45 s. No initial rebalance delay on either (a group's own
# streams.initial.rebalance.delay.ms sets one: test_the_initial_rebalance_delay_as_kafka).
STREAMS_SESSIONS = {"group.streams.min.session.timeout.ms": "2000", "group.streams.session.timeout.ms": "6000",
                    "group.streams.min.heartbeat.interval.ms": "500", "group.streams.heartbeat.interval.ms": "500",
                    "group.streams.initial.rebalance.delay.ms": "0"}
WC_APP, WC_INPUT, WC_OUTPUT = "wc-app", "wc-input", "wc-output"
WC_PARTITIONS = 4  # of the input, hence of the repartition and changelog topics: 4 tasks per subtopology
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
LINES = [" ".join(WORDS[(i * 3 + j) % len(WORDS)] for j in range(1 + i % 4)) for i in range(300)]


def describe_streams_group(bootstrap: str, group: str) -> Any:
    """StreamsGroupDescribe of ``group``, from whichever of the brokers coordinates it."""
    async def ask() -> Any:
        found = None
        for address in bootstrap.split(","):
            host, port = address.rsplit(":", 1)
            conn = await BrokerConnection(host, int(port)).connect(10)
            try:
                found = (await conn.send(sgdq.StreamsGroupDescribeRequest(
                    group_ids=[group], include_authorized_operations=False))).groups[0]
            finally:
                await conn.close()
            if found.error_code != ErrorCode.NOT_COORDINATOR:
                return found
        return found
    return asyncio.run(ask())


def active_tasks(member: Any) -> set[tuple[str, int]]:
    return tasks(member.assignment.active_tasks) or set()


def run_word_count(bootstrap: str, tmp_path: Path, replication_factor: int | None = None) -> dict[str, list[int]]:
    """Kafka Streams 4.3.1's word count with group.protocol=streams (exactly-once) on the brokers
    at ``bootstrap``, whose input and output topics exist: two instances share the tasks; one is
    killed with kill -9 and the other takes its tasks over. Each word's counts in the order the
    (read_committed) output has them; checked against a batch recount."""
    from confluent_kafka import Consumer, Producer

    cp = jt.streams_classpath()
    work = tmp_path / bootstrap.split(",")[0].replace(":", "-")
    apps: list[subprocess.Popen] = []

    def start(name: str) -> subprocess.Popen:
        args = [bootstrap, WC_APP, WC_INPUT, WC_OUTPUT, str(work / name), "exactly_once_v2"]
        app = subprocess.Popen(jt.program_command(WORD_COUNT, [*args, *([] if replication_factor is None
                                                                    else [str(replication_factor)])], cp=cp),
                               stdout=open(tmp_path / f"{work.name}-{name}.log", "wb"), stderr=subprocess.STDOUT)
        apps.append(app)
        return app

    work.mkdir()
    try:
        first, second = start("one"), start("two")
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})

        def produce(batch: list[str]) -> None:
            for i, line in enumerate(batch):
                producer.produce(WC_INPUT, line.encode(), key=str(i).encode())
            assert producer.flush(30) == 0

        all_tasks = {(s, p) for s in ("0", "1") for p in range(WC_PARTITIONS)}

        async def shared() -> Any:
            d = await asyncio.to_thread(describe_streams_group, bootstrap, WC_APP)
            held = [active_tasks(m) for m in d.members] if d.error_code == 0 else []
            return d if d.group_state == "Stable" and len(held) == 2 and all(held) and \
                set().union(*held) == all_tasks and sum(map(len, held)) == len(all_tasks) else None
        d = asyncio.run(until(shared, "two instances sharing the tasks", timeout=120))
        owner = {m.process_id: active_tasks(m) for m in d.members}
        produce(LINES[:150])

        reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "wc-reader",
                           "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
        reader.subscribe([WC_OUTPUT])
        seen: dict[str, list[int]] = {}

        def read_until(expected: dict[str, int], timeout: float = 180) -> None:
            deadline = time.monotonic() + timeout
            while {w: c[-1] for w, c in seen.items()} != expected:
                assert time.monotonic() < deadline, f"counts {seen} never reached {expected}"
                m = reader.poll(0.5)
                if m is not None and not m.error():
                    seen.setdefault(m.key().decode(), []).append(int(m.value().decode()))
        read_until(word_counts(LINES[:150]))

        second.kill()  # kill -9: no leave, its session must expire
        second.wait(30)
        produce(LINES[150:])

        async def taken_over() -> Any:
            d = await asyncio.to_thread(describe_streams_group, bootstrap, WC_APP)
            return d if d.group_state == "Stable" and len(d.members) == 1 and \
                active_tasks(d.members[0]) == all_tasks else None
        survivor = asyncio.run(until(taken_over, "the survivor to take the killed instance's tasks", timeout=120))
        assert owner[survivor.members[0].process_id] < all_tasks  # it had only its share before
        read_until(word_counts(LINES))
        assert first.poll() is None, "the surviving instance stopped"
        reader.close()
        return seen
    finally:
        for app in apps:
            if app.poll() is None:
                app.terminate()
                try:
                    app.wait(30)
                except subprocess.TimeoutExpired:
                    app.kill()


@pytest.fixture(scope="module")
def kafka_streams_ref(java) -> Iterator[str]:
    """Kafka 4.3.1 (one KRaft node) with the streams sessions of these tests; its streams.version
    is 1 on a new cluster, so the streams rebalance protocol needs no other setting."""
    from conftest import running_kafka

    with running_kafka(STREAMS_SESSIONS, heap="512m") as bootstrap:
        yield bootstrap


@pytest.mark.java
@pytest.mark.cluster
@pytest.mark.timeout(600)
def test_kafka_streams_word_count_on_three_brokers_and_on_kafka(java, zk_connect, kafka_streams_ref, tmp_path):
    """The word count on three Rivulet brokers (RF 3, min.insync.replicas 2, its internal topics
    too), then on Kafka 4.3.1 with the same input: each has each word's counts 1, 2, ... n in
    order (exactly-once: nothing counted twice across the kill), n the batch recount."""
    from confluent_kafka.admin import AdminClient, NewTopic

    expected = {w: list(range(1, n + 1)) for w, n in word_counts(LINES).items()}
    with three_brokers(zk_connect, **BROKER_CONFIG, **STREAMS_SESSIONS, **{
            "min.insync.replicas": "2", "group.initial.rebalance.delay.ms": "0",
            "transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2",
            "transaction.state.log.num.partitions": "3"}) as cluster:
        for t in (WC_INPUT, WC_OUTPUT):
            create_topic(cluster, t, WC_PARTITIONS)
        ours = run_word_count(cluster.bootstrap, tmp_path, replication_factor=3)
        topology = describe_streams_group(cluster.bootstrap, WC_APP).topology
        internal = {t.name for s in topology.subtopologies
                    for t in [*s.repartition_source_topics, *s.state_changelog_topics]}
        assert len(internal) == 2
        # Created by the controller with the replication factor the application asked for.
        assert {t: sorted(len(cluster.json(f"/brokers/topics/{t}")["partitions"][str(p)]) for p in range(WC_PARTITIONS))
                for t in internal} == {t: [3] * WC_PARTITIONS for t in internal}
    assert ours == expected

    admin = AdminClient({"bootstrap.servers": kafka_streams_ref})
    for t in (WC_INPUT, WC_OUTPUT):
        admin.create_topics([NewTopic(t, WC_PARTITIONS, 1)])[t].result(30)
    theirs = run_word_count(kafka_streams_ref, tmp_path)
    assert theirs == ours


@pytest.mark.java
def test_kafka_streams_word_count_with_the_streams_protocol(java, tmp_path):
    """The same on one Rivulet broker, its internal topics created on the node itself."""
    from confluent_kafka.admin import AdminClient, NewTopic

    b = BrokerProcess({**STREAMS_SESSIONS, "transaction.state.log.replication.factor": "1",
                       "transaction.state.log.min.isr": "1"})
    b.start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        for t in (WC_INPUT, WC_OUTPUT):
            admin.create_topics([NewTopic(t, WC_PARTITIONS, 1)])[t].result(30)
        assert run_word_count(b.bootstrap, tmp_path) == {w: list(range(1, n + 1)) for w, n in
                                                         word_counts(LINES).items()}
    finally:
        b.cleanup()
