"""KIP-1263's assignment interval and KAFKA-20268's first epoch for consumer and share groups,
side by side with a real Apache Kafka 4.3.1 broker: the same ConsumerGroupHeartbeat and
ShareGroupHeartbeat sequences to both, the same member epochs, assignments and described epochs."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rivulet.client import core
from rivulet.client.connection import BrokerConnection
from rivulet.protocol.messages import consumer_group_describe_request as cgdq
from rivulet.protocol.messages import consumer_group_heartbeat_request as cghq
from rivulet.protocol.messages import create_topics_request as ctq
from rivulet.protocol.messages import describe_configs_request as dcq
from rivulet.protocol.messages import incremental_alter_configs_request as iacq
from rivulet.protocol.messages import share_group_describe_request as sgdq
from rivulet.protocol.messages import share_group_heartbeat_request as sghq
from tests.group_members import set_group_configs, until

pytestmark = [pytest.mark.java, pytest.mark.integration]

PARTITIONS = 4


def _count(assignment: Any) -> int | None:
    return None if assignment is None else sum(len(t.partitions) for t in assignment.topic_partitions)


class Probe:
    """One connection that drives members of a consumer or share group by raw heartbeats."""

    def __init__(self, conn: BrokerConnection, kind: str, group: str, topic: str) -> None:
        self.conn, self.kind, self.group, self.topic = conn, kind, group, topic
        self.epochs: dict[str, int] = {}

    async def beat(self, member: str, owned: list[Any] | None = None) -> tuple[int, int | None, int]:
        """(member epoch, partitions in the answer or None, heartbeat interval) of one heartbeat."""
        epoch = self.epochs.get(member, 0)
        if self.kind == "consumer":
            req: Any = cghq.ConsumerGroupHeartbeatRequest(
                group_id=self.group, member_id=member, member_epoch=epoch,
                rebalance_timeout_ms=30000 if epoch == 0 else -1,
                subscribed_topic_names=[self.topic] if epoch == 0 else None,
                topic_partitions=[] if epoch == 0 else owned)
        else:
            req = sghq.ShareGroupHeartbeatRequest(group_id=self.group, member_id=member, member_epoch=epoch,
                                                  subscribed_topic_names=[self.topic] if epoch == 0 else None)
        r = await self.conn.send(req)
        assert r.error_code == 0, (r.error_code, r.error_message)
        self.epochs[member] = r.member_epoch
        return r.member_epoch, _count(r.assignment), r.heartbeat_interval_ms

    async def describe(self) -> tuple[str, int, int, list[tuple[str, int]]]:
        """(state, group epoch, assignment epoch, each member's epoch)."""
        if self.kind == "consumer":
            g = (await self.conn.send(cgdq.ConsumerGroupDescribeRequest(
                group_ids=[self.group], include_authorized_operations=False))).groups[0]
        else:
            g = (await self.conn.send(sgdq.ShareGroupDescribeRequest(
                group_ids=[self.group], include_authorized_operations=False))).groups[0]
        assert g.error_code == 0, (g.error_code, g.error_message)
        return g.group_state, g.group_epoch, g.assignment_epoch, sorted((m.member_id, m.member_epoch)
                                                                        for m in g.members)


async def _prepare(conn: BrokerConnection, kind: str, group: str, topic: str, configs: dict[str, str]) -> Probe:
    """The topic created and known to the group coordinator (Kafka's learns of it a while after
    it is created: a member of another group is assigned its partitions first), and the group's
    configs set."""
    r = await conn.send(ctq.CreateTopicsRequest(topics=[ctq.CreatableTopic(
        name=topic, num_partitions=PARTITIONS, replication_factor=1, assignments=[], configs=[])],
        timeout_ms=10000, validate_only=False))
    assert r.topics[0].error_code == 0

    async def known() -> bool:
        for g in (group, f"{group}-scout"):
            if core.read_find_coordinator(await conn.send(core.find_coordinator_request(g, 0)))[0] != 0:
                return False  # Kafka creates __consumer_offsets when a coordinator is first looked for
        r = await conn.send(cghq.ConsumerGroupHeartbeatRequest(
            group_id=f"{group}-scout", member_id="scout", member_epoch=0, rebalance_timeout_ms=30000,
            subscribed_topic_names=[topic], topic_partitions=[]))
        if r.error_code != 0:
            return False  # its __consumer_offsets partition is still loading
        await conn.send(cghq.ConsumerGroupHeartbeatRequest(group_id=f"{group}-scout", member_id="scout",
                                                          member_epoch=-1))
        return _count(r.assignment) == PARTITIONS
    await until(known, "the topic known to the group coordinator")
    if configs:
        await set_group_configs(conn, group, configs)
    return Probe(conn, kind, group, topic)


async def _consumer_two_join(conn: BrokerConnection, group: str, configs: dict[str, str]) -> dict[str, Any]:
    """a joins, b joins at once: their answers and the group then; then both heartbeat (a
    reporting what it owns) until b reaches that group epoch: the group's epochs then."""
    p = await _prepare(conn, "consumer", group, f"{group}-t", configs)
    shown: dict[str, Any] = {"a joins": await p.beat("a"), "b joins": await p.beat("b")}
    shown["then"] = await p.describe()
    owned: dict[str, Any] = {}

    async def b_moved() -> bool:
        for m in ("a", "b"):
            r = await p.conn.send(cghq.ConsumerGroupHeartbeatRequest(
                group_id=group, member_id=m, member_epoch=p.epochs[m], rebalance_timeout_ms=-1,
                topic_partitions=owned.get(m, [])))
            assert r.error_code == 0, (r.error_code, r.error_message)
            p.epochs[m] = r.member_epoch
            if r.assignment is not None:
                owned[m] = [cghq.TopicPartitions(topic_id=t.topic_id, partitions=t.partitions)
                            for t in r.assignment.topic_partitions]
        return p.epochs["b"] == shown["then"][1]
    await until(b_moved, "b at the group epoch")
    shown["after"] = (await p.describe())[1:3]  # (who computed it first is a matter of timing)
    return shown


async def _share_two_join(conn: BrokerConnection, group: str) -> dict[str, Any]:
    """a joins, b joins at once: their epochs and partitions, and the group then: none yet, as
    a share group's partitions are assigned only once their share state is initialized (after
    a's first heartbeat). Then both heartbeat until each holds its half: the group's epochs then
    (how many moves it took is a matter of timing: Kafka's initialization takes a while)."""
    p = await _prepare(conn, "share", group, f"{group}-t", {})
    a, b = await p.beat("a"), await p.beat("b")
    shown: dict[str, Any] = {"epochs": (a[0], b[0]), "partitions": (a[1], b[1]),
                             "heartbeat interval": (a[2], b[2]), "then": await p.describe()}
    held = {"a": a[1] or 0, "b": b[1] or 0}

    async def halves() -> bool:
        for m in ("a", "b"):
            _epoch, count, _ = await p.beat(m)
            if count is not None:
                held[m] = count
        return held == {"a": PARTITIONS // 2, "b": PARTITIONS // 2}
    await until(halves, "each member holding half the partitions")
    state, group_epoch, assignment_epoch, members = await p.describe()
    shown["settled"] = (state, group_epoch == assignment_epoch, {e == group_epoch for _m, e in members})
    return shown


async def _set_broker_interval(conn: BrokerConnection, value: str | None) -> None:
    """group.consumer.assignment.interval.ms at the cluster level (None: removed), once every
    broker reports it (Kafka applies it from its metadata log a moment later)."""
    name = "group.consumer.assignment.interval.ms"
    r = await conn.send(iacq.IncrementalAlterConfigsRequest(validate_only=False, resources=[
        iacq.AlterConfigsResource(resource_type=4, resource_name="", configs=[
            iacq.AlterableConfig(name=name, config_operation=0 if value is not None else 1, value=value)])]))
    assert r.responses[0].error_code == 0, r.responses[0].error_message

    async def applied() -> bool:
        d = await conn.send(dcq.DescribeConfigsRequest(resources=[dcq.DescribeConfigsResource(
            resource_type=4, resource_name="1", configuration_keys=[name])]))
        return d.results[0].configs[0].value == (value if value is not None else "1000")
    await until(applied, f"{name} at {value}")


def probe(bootstrap: str) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        host, port = bootstrap.rsplit(":", 1)
        conn = await BrokerConnection(host, int(port), client_id="interval-it").connect(10)
        try:
            shown = {"consumer": await _consumer_two_join(conn, "interval-consumer", {}),
                     "consumer, interval 0": await _consumer_two_join(
                         conn, "interval-consumer-0", {"consumer.assignment.interval.ms": "0"}),
                     "share": await _share_two_join(conn, "interval-share")}
            # The broker's interval is a dynamic config: at 0, a group without its own assigns at once.
            await _set_broker_interval(conn, "0")
            try:
                shown["consumer, broker interval 0"] = await _consumer_two_join(conn, "interval-consumer-dyn", {})
            finally:
                await _set_broker_interval(conn, None)
            return shown
        finally:
            await conn.close()
    return asyncio.run(main())


@pytest.mark.timeout(600)
def test_the_assignment_interval_and_the_first_epoch_as_kafka(kafka_ref, broker_factory):
    """A new group's first assignment is at once, at epoch 2. A member joining within
    consumer.assignment.interval.ms (1 s by default) moves the group epoch to 3 but gets the
    target of epoch 2 (nothing) until a heartbeat after the interval computes the next; with a
    group's interval at 0 it gets epoch 3 at once. The share group's epochs go alike, its
    partitions assigned only once their share state is initialized."""
    rivulet = broker_factory({"node.id": "1", "group.initial.rebalance.delay.ms": "0"})
    ours, theirs = probe(rivulet.bootstrap), probe(kafka_ref)
    assert ours == theirs
    consumer = ours["consumer"]
    assert (consumer["a joins"], consumer["b joins"]) == ((2, PARTITIONS, 5000), (2, 0, 5000))
    assert consumer["then"] == ("Assigning", 3, 2, [("a", 2), ("b", 2)])
    assert consumer["after"] == (3, 3)
    at_once = ours["consumer, interval 0"]
    assert at_once["b joins"] == (3, 0, 5000) and at_once["then"][1:3] == (3, 3)
    assert ours["consumer, broker interval 0"]["b joins"] == (3, 0, 5000)
    share = ours["share"]
    assert share["epochs"] == (2, 2) and share["partitions"] == (0, 0)
    assert share["then"] == ("Stable", 3, 2, [("a", 2), ("b", 2)])
    assert share["settled"] == ("Stable", True, {True})


async def _classic_then_consumer(conn: BrokerConnection, bootstrap: str, group: str) -> dict[str, Any]:
    """Two confluent-kafka members of the classic protocol (range) share the topic; then a member
    of the consumer protocol joins, which turns the group into a consumer group. What its first
    heartbeat gets and the group's epochs then, relative to the converted group's epoch (the
    classic generation, whichever it was)."""
    import threading

    from confluent_kafka import Consumer

    topic = f"{group}-t"
    await _prepare(conn, "consumer", group, topic, {})
    assigned: dict[str, int] = {}
    stop = threading.Event()

    def run(name: str) -> None:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "classic",
                      "partition.assignment.strategy": "range", "session.timeout.ms": 10000,
                      "heartbeat.interval.ms": 500, "enable.auto.commit": False})

        def on_assign(_c: Any, parts: list[Any]) -> None:
            assigned[name] = len(parts)
        c.subscribe([topic], on_assign=on_assign)
        try:
            while not stop.is_set():
                c.poll(0.2)
        finally:
            c.close()
    threads = [threading.Thread(target=run, args=(n,), daemon=True) for n in ("x", "y")]
    for t in threads:
        t.start()
    try:
        async def shared() -> bool:
            return sum(assigned.values()) == PARTITIONS and len(assigned) == 2 and all(assigned.values())
        await until(shared, "the classic members sharing the topic")
        p = Probe(conn, "consumer", group, topic)
        epoch, parts, _ = await p.beat("c")
        state, group_epoch, assignment_epoch, members = await p.describe()
        return {"c's epoch": epoch - group_epoch, "c's partitions": parts, "state": state,
                "assignment epoch": assignment_epoch - group_epoch, "members": len(members)}
    finally:
        stop.set()
        for t in threads:
            t.join(30)


def conversion_probe(bootstrap: str) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        host, port = bootstrap.rsplit(":", 1)
        conn = await BrokerConnection(host, int(port), client_id="interval-it").connect(10)
        try:
            return await _classic_then_consumer(conn, bootstrap, "interval-converted")
        finally:
            await conn.close()
    return asyncio.run(main())


@pytest.mark.timeout(600)
def test_a_converted_classic_group_assigns_its_first_consumer_member_at_once_as_kafka(kafka_ref, broker_factory):
    """Kafka 4.3.1 makes a classic group's consumer group at the classic generation with a target
    assignment stamped 0 (the classic leader computed it): the member of the consumer protocol
    that converts it moves the group epoch, and its first heartbeat computes the new target at
    once rather than a consumer.assignment.interval.ms later (its epoch is the group's)."""
    rivulet = broker_factory({"node.id": "1", "group.initial.rebalance.delay.ms": "0"})
    ours, theirs = conversion_probe(rivulet.bootstrap), conversion_probe(kafka_ref)
    assert ours == theirs
    assert ours["c's epoch"] == 0 and ours["assignment epoch"] == 0 and ours["members"] == 3
