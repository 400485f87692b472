"""The share-group offset admin APIs (KIP-932) against a real broker: Rivulet's admin client
alters an empty share group's start offsets (making the group), describes them with their lag,
a share consumer then reads from there, a group with members refuses, and the offsets are
deleted; Kafka's error codes for unknown topics and partitions and other kinds of group."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import pytest

from rivulet.client.admin.client import AsyncAdminClient, SharePartitionOffsetInfo
from rivulet.common.types import TopicPartition as TP
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.testing import BrokerProcess

pytestmark = pytest.mark.integration

TOPIC, N = "sgo-topic", 20


def produce(bootstrap: str) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(N):
        p.produce(TOPIC, b"%d" % i, partition=i % 2)
    assert p.flush(30) == 0


def test_share_group_offsets_admin():
    with BrokerProcess({"group.share.min.heartbeat.interval.ms": "500",
                        "group.share.heartbeat.interval.ms": "500"}) as b:
        asyncio.run(_create(b.bootstrap))
        produce(b.bootstrap)  # 10 records on each partition
        asyncio.run(_admin(b.bootstrap))


def test_altered_offsets_survive_a_restart():
    """The group (its ShareGroupStatePartitionMetadata in __consumer_offsets) and the start
    offsets (the share coordinator's __share_group_state) come back after a restart."""
    with BrokerProcess({}) as b:
        asyncio.run(_create(b.bootstrap))
        produce(b.bootstrap)

        async def alter() -> None:
            async with AsyncAdminClient({"bootstrap.servers": b.bootstrap}) as admin:
                assert await admin.alter_share_group_offsets("kept", {TP(TOPIC, 0): 6, TP(TOPIC, 1): 2}) == {
                    TP(TOPIC, 0): None, TP(TOPIC, 1): None}
        asyncio.run(alter())
        b.restart()

        async def described() -> dict:
            async with AsyncAdminClient({"bootstrap.servers": b.bootstrap}) as admin:
                assert ("kept", "share", "Empty") in await admin.list_groups()
                return await admin.list_share_group_offsets("kept")
        assert asyncio.run(described()) == {TP(TOPIC, 0): SharePartitionOffsetInfo(6, 0, 4),
                                            TP(TOPIC, 1): SharePartitionOffsetInfo(2, 0, 8)}


async def _create(bootstrap: str) -> None:
    async with AsyncAdminClient({"bootstrap.servers": bootstrap}) as admin:
        await admin.create_topic(TOPIC, 2, 1)


async def _admin(bootstrap: str) -> None:
    async with AsyncAdminClient({"bootstrap.servers": bootstrap}) as admin:
        # Nothing yet: a group that does not exist has no state to describe.
        assert await admin.list_share_group_offsets("sgo") == {}
        assert await admin.list_share_group_offsets("sgo", [TP(TOPIC, 0)]) == {TP(TOPIC, 0): None}

        # Alter makes the (empty) share group; unknown topics and partitions are refused one by one.
        got = await admin.alter_share_group_offsets("sgo", {TP(TOPIC, 0): 4, TP(TOPIC, 1): 7, TP(TOPIC, 5): 0,
                                                            TP("no-such-topic", 0): 1})
        assert got[TP(TOPIC, 0)] is None and got[TP(TOPIC, 1)] is None
        assert got[TP(TOPIC, 5)].code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert got[TP("no-such-topic", 0)].code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert ("sgo", "share", "Empty") in await admin.list_groups()

        offsets = {TP(TOPIC, 0): SharePartitionOffsetInfo(4, 0, 6), TP(TOPIC, 1): SharePartitionOffsetInfo(7, 0, 3)}
        assert await admin.list_share_group_offsets("sgo") == offsets
        assert await admin.list_share_group_offsets("sgo", [TP(TOPIC, 0), TP(TOPIC, 1), TP("gone", 0)]) == \
            {**offsets, TP("gone", 0): None}

        # A consumer group's id is not a share group's.
        await admin.alter_group_offsets("classic", {TP(TOPIC, 0): 1})
        with pytest.raises(ApiError) as e:
            await admin.alter_share_group_offsets("classic", {TP(TOPIC, 0): 1})
        assert e.value.code == ErrorCode.GROUP_ID_NOT_FOUND
        with pytest.raises(ApiError) as e:
            await admin.delete_share_group_offsets("nobody", [TOPIC])
        assert e.value.code == ErrorCode.GROUP_ID_NOT_FOUND

        # A share consumer reads from the altered start offsets: the records past them only.
        from confluent_kafka import ShareConsumer
        c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "sgo"})
        try:
            c.subscribe([TOPIC])
            seen: set[bytes] = set()
            want = {b"%d" % i for i in range(N) if (i % 2 == 0 and i // 2 >= 4) or (i % 2 == 1 and i // 2 >= 7)}
            deadline = time.monotonic() + 60
            while seen != want:
                assert time.monotonic() < deadline, f"read {sorted(seen)}, want {sorted(want)}"
                seen |= {m.value() for m in c.poll(0.2) if m.error() is None}
                assert seen <= want
            # While it is a member, the group's offsets cannot change.
            with pytest.raises(ApiError) as e:
                await admin.alter_share_group_offsets("sgo", {TP(TOPIC, 0): 0})
            assert e.value.code == ErrorCode.NON_EMPTY_GROUP
            with pytest.raises(ApiError) as e:
                await admin.delete_share_group_offsets("sgo", [TOPIC])
            assert e.value.code == ErrorCode.NON_EMPTY_GROUP
            # The records it acknowledged are no longer lag.
            deadline = time.monotonic() + 60
            while True:
                lags = {tp: i.lag for tp, i in (await admin.list_share_group_offsets("sgo")).items()}
                if lags == {TP(TOPIC, 0): 0, TP(TOPIC, 1): 0}:
                    break
                assert time.monotonic() < deadline, lags
                c.poll(0.2)
        finally:
            c.close()

        # Empty again: its state of the topic is deleted; a topic without state is no error.
        deadline = time.monotonic() + 30
        while ("sgo", "share", "Empty") not in await admin.list_groups():
            assert time.monotonic() < deadline
            await asyncio.sleep(0.2)
        got = await admin.delete_share_group_offsets("sgo", [TOPIC, "no-such-topic"])
        assert got[TOPIC] is None and got["no-such-topic"].code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert await admin.list_share_group_offsets("sgo") == {}
        assert await admin.list_share_group_offsets("sgo", [TP(TOPIC, 0)]) == {TP(TOPIC, 0): None}
        assert await admin.delete_share_group_offsets("sgo", [TOPIC]) == {TOPIC: None}


@pytest.mark.java
def test_kafka_share_groups_tool():
    """Kafka's kafka-share-groups (4.3, the Java Admin's alterShareGroupOffsets,
    listShareGroupOffsets and deleteShareGroupOffsets): reset an empty group's offsets, describe
    them with their lag, delete them."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import java_tools as jt
    reason = jt.java_available()
    assert reason is None, f"Kafka's Java tools are needed: {reason}"
    with BrokerProcess({}) as b:
        asyncio.run(_create(b.bootstrap))
        produce(b.bootstrap)
        rows = jt.share_group_command(b.bootstrap, ["--reset-offsets", "--group", "jsg", "--topic", TOPIC,
                                                    "--to-earliest", "--execute"])
        assert sorted((r["PARTITION"], r["NEW-OFFSET"]) for r in rows) == [("0", "0"), ("1", "0")]
        rows = jt.share_group_command(b.bootstrap, ["--describe", "--group", "jsg", "--offsets"])
        assert sorted((r["TOPIC"], r["PARTITION"], r["START-OFFSET"], r["LAG"]) for r in rows) == [
            (TOPIC, "0", "0", "10"), (TOPIC, "1", "0", "10")]
        rows = jt.share_group_command(b.bootstrap, ["--describe", "--group", "jsg", "--state"])
        assert [(r["GROUP"], r["STATE"], r["#MEMBERS"]) for r in rows] == [("jsg", "Empty", "0")]
        rows = jt.share_group_command(b.bootstrap, ["--reset-offsets", "--group", "jsg", "--topic", f"{TOPIC}:1",
                                                    "--to-latest", "--execute"])
        assert [(r["PARTITION"], r["NEW-OFFSET"]) for r in rows] == [("1", "10")]
        rows = jt.share_group_command(b.bootstrap, ["--describe", "--group", "jsg", "--offsets"])
        assert sorted((r["PARTITION"], r["START-OFFSET"], r["LAG"]) for r in rows) == [("0", "0", "10"),
                                                                                        ("1", "10", "0")]
        run = jt.run_tool(jt.SHARE_GROUP_COMMAND, ["--bootstrap-server", b.bootstrap, "--delete-offsets",
                                                   "--group", "jsg", "--topic", TOPIC])
        assert TOPIC in run.stdout and "Successful" in run.stdout, run.stdout
        run = jt.run_tool(jt.SHARE_GROUP_COMMAND, ["--bootstrap-server", b.bootstrap, "--describe", "--group", "jsg",
                                                   "--offsets"])
        assert "has no offset information" in run.stdout, run.stdout


def groups_cli(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rivulet", "groups", *args, "--bootstrap-server", bootstrap],
                          capture_output=True, text=True, timeout=60)


def _new_share_group(bootstrap: str, group: str, start_offset: int) -> subprocess.CompletedProcess:
    """The topic with its records, and a share group made by resetting its start offsets."""
    asyncio.run(_create(bootstrap))
    produce(bootstrap)
    r = groups_cli(bootstrap, "reset-offsets", "--group", group, "--topic", TOPIC, "--to-offset", str(start_offset),
                   "--share", "--execute")
    assert r.returncode == 0, r.stderr
    return r


def test_rivulet_groups_cli_on_a_share_group():
    """`rivulet groups` in the manner of kafka-share-groups: reset a new share group's start
    offsets, describe them with their lag, the members and their assignment, shift them, delete them."""
    from confluent_kafka import ShareConsumer
    with BrokerProcess({"group.share.min.heartbeat.interval.ms": "500",
                        "group.share.heartbeat.interval.ms": "500"}) as b:
        r = _new_share_group(b.bootstrap, "cli", 3)
        assert [ln.split() for ln in r.stdout.split("\n") if ln.startswith("cli ")] == [
            ["cli", TOPIC, "0", "3"], ["cli", TOPIC, "1", "3"]]
        r = groups_cli(b.bootstrap, "describe", "--group", "cli", "--format", "json")
        assert json.loads(r.stdout) == [{"group": "cli", "topic": TOPIC, "partition": p, "start_offset": 3, "lag": 7,
                                         "in_flight": 0} for p in (0, 1)]
        r = groups_cli(b.bootstrap, "describe", "--group", "cli", "--state")
        assert r.stdout.split("\n")[0].split() == ["GROUP", "COORDINATOR", "(ID)", "STATE", "#MEMBERS"]
        assert r.stdout.split("\n")[1].split()[-2:] == ["Empty", "0"]

        c = ShareConsumer({"bootstrap.servers": b.bootstrap, "group.id": "cli", "client.id": "cli-member"})
        try:
            c.subscribe([TOPIC])
            deadline = time.monotonic() + 60
            while True:
                c.poll(0.2)
                rows = json.loads(groups_cli(b.bootstrap, "describe", "--group", "cli", "--members",
                                             "--format", "json").stdout)
                if rows and rows[0]["partitions"] == 2:
                    break
                assert time.monotonic() < deadline, rows
            assert rows[0]["client_id"] == "cli-member"
            assert rows[0]["assignment"] == [{"topic": TOPIC, "partition": 0}, {"topic": TOPIC, "partition": 1}]
            r = groups_cli(b.bootstrap, "reset-offsets", "--group", "cli", "--topic", TOPIC, "--to-earliest",
                           "--execute")
            assert r.returncode != 0 and "inactive" in r.stderr
        finally:
            c.close()
        deadline = time.monotonic() + 30
        while "Empty" not in groups_cli(b.bootstrap, "describe", "--group", "cli", "--state").stdout:
            assert time.monotonic() < deadline
        # Altered, the state starts afresh: nothing past the start offsets is acknowledged.
        for move in (["--topic", TOPIC, "--to-offset", "4"], ["--topic", f"{TOPIC}:1", "--shift-by", "-1"]):
            r = groups_cli(b.bootstrap, "reset-offsets", "--group", "cli", *move, "--execute")
            assert r.returncode == 0, r.stderr
        rows = json.loads(groups_cli(b.bootstrap, "describe", "--group", "cli", "--format", "json").stdout)
        assert [(x["partition"], x["start_offset"], x["lag"]) for x in rows] == [(0, 4, 6), (1, 3, 7)]
        _holds_and_acknowledges(b.bootstrap, {0: 4, 1: 3})
        deadline = time.monotonic() + 30
        while "Empty" not in groups_cli(b.bootstrap, "describe", "--group", "cli", "--state").stdout:
            assert time.monotonic() < deadline
        r = groups_cli(b.bootstrap, "delete-offsets", "--group", "cli", "--topic", TOPIC)
        assert r.returncode == 0 and f"{TOPIC} Successful" in " ".join(r.stdout.split()), r.stdout
        r = groups_cli(b.bootstrap, "describe", "--group", "cli")
        assert "Share group 'cli' has no offset information." in r.stdout


def _holds_and_acknowledges(bootstrap: str, starts: dict[int, int]) -> None:
    """A member acquires records, accepts the first and third of each partition it got and
    holds the rest: IN-FLIGHT counts the held ones once the acknowledgements are written (a
    partition with none written has nothing in flight in the persisted state)."""
    from rivulet import ShareConsumer
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "cli", "share.acknowledgement.mode": "explicit"})
    try:
        c.subscribe([TOPIC])
        deadline = time.monotonic() + 60
        got: list = []
        while not got:
            got = [m for m in c.poll(1.0) if m.error() is None]
            assert time.monotonic() < deadline
        firsts = {p: [m.offset() for m in got if m.partition() == p] for p in starts}
        # A fetch acquires every record of a partition here (all of them fit in one).
        assert all(offsets in ([], list(range(starts[p], N // 2))) for p, offsets in firsts.items()), firsts
        accepted = {p: {offsets[0], offsets[2]} if offsets else set() for p, offsets in firsts.items()}
        for m in got:
            if m.offset() in accepted[m.partition()]:
                c.acknowledge(m)
        assert all(e is None for e in c.commit_sync().values())
        expected = {p: N // 2 - starts[p] - len(accepted[p]) if accepted[p] else 0 for p in starts}
        assert any(expected.values())
        r = groups_cli(bootstrap, "describe", "--group", "cli")
        header, *lines = [ln.split() for ln in r.stdout.strip().split("\n")]
        assert header == ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG", "IN-FLIGHT"], r.stdout
        assert {int(ln[2]): int(ln[5]) for ln in lines} == expected, r.stdout
        rows = json.loads(groups_cli(bootstrap, "describe", "--group", "cli", "--format", "json").stdout)
        # The first record accepted, the start offset moved past it; the lag counts the held ones too.
        assert [(x["start_offset"], x["lag"], x["in_flight"]) for x in rows if accepted[x["partition"]]] == [
            (starts[p] + 1, expected[p], expected[p]) for p in sorted(starts) if accepted[p]]
    finally:
        c.close()


def test_groups_cli_in_flight_without_cluster_action():
    """ReadShareGroupState is a broker's request (CLUSTER_ACTION on the cluster, as Apache Kafka
    checks it): a principal denied it sees the start offsets and lag, and '-' as IN-FLIGHT."""
    with BrokerProcess({"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                        "allow.everyone.if.no.acl.found": "true"}) as b:
        _new_share_group(b.bootstrap, "deny", 2)
        r = groups_cli(b.bootstrap, "describe", "--group", "deny", "--format", "json")
        assert [x["in_flight"] for x in json.loads(r.stdout)] == [0, 0], r.stdout
        r = subprocess.run([sys.executable, "-m", "rivulet", "acls", "add", "--cluster", "--deny-principal",
                            "User:ANONYMOUS", "--operation", "ClusterAction", "--bootstrap-server", b.bootstrap],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        r = groups_cli(b.bootstrap, "describe", "--group", "deny")
        assert r.returncode == 0, r.stderr
        assert [ln.split() for ln in r.stdout.strip().split("\n")[1:]] == [
            ["deny", TOPIC, str(p), "2", "8", "-"] for p in (0, 1)], r.stdout


@pytest.mark.cluster
def test_share_group_offsets_on_a_cluster(zk_connect):
    """Three brokers, each leading a partition: the group's coordinator describes the lag of
    partitions other brokers lead with their answer to ListOffsets, as Kafka's does."""
    from confluent_kafka import Producer

    from tests.cluster import three_brokers
    from tests.integration.test_replication_faults import BROKER_CONFIG, create_topic

    with three_brokers(zk_connect, **BROKER_CONFIG) as cluster:
        create_topic(cluster, "sgo-c", 3)
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for i in range(30):
            p.produce("sgo-c", b"%d" % i, partition=i % 3)
        assert p.flush(60) == 0
        leaders = {cluster.partition_state("sgo-c", i)["leader"] for i in range(3)}

        async def run() -> dict:
            async with AsyncAdminClient({"bootstrap.servers": cluster.bootstrap}) as admin:
                got = await admin.alter_share_group_offsets("sgo-c", {TP("sgo-c", i): 2 for i in range(3)})
                assert got == {TP("sgo-c", i): None for i in range(3)}
                return await admin.list_share_group_offsets("sgo-c")
        assert len(leaders) > 1  # some partition is led away from the group's coordinator
        assert asyncio.run(run()) == {TP("sgo-c", i): SharePartitionOffsetInfo(2, 0, 8) for i in range(3)}
