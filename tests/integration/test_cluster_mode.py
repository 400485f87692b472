"""Brokers in ZooKeeper mode, as real processes against a real ZooKeeper: registration in
Kafka's format, every broker listing the cluster, topics created through any broker and
given leaders by the controller, controller failover after kill -9, controlled shutdown,
broker id generation."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from kazoo.exceptions import NoNodeError

from rivulet.admin import AdminClient, NewTopic
from rivulet.client.connection import BrokerConnection
from rivulet.protocol.errors import ErrorCode
from rivulet.testing import BrokerProcess
from tests.cluster import ZkCluster, describe_cluster, eventually

pytestmark = [pytest.mark.integration, pytest.mark.cluster]


@pytest.fixture
def cluster(zk_connect):
    c = ZkCluster(zk_connect)
    yield c
    c.close()


def test_registration_listing_and_topics_through_any_broker(cluster):
    for i in (1, 2, 3):
        cluster.start(i, **({"broker.rack": "r%d" % i}))
    eventually(lambda: sorted(cluster.zk.get_children("/brokers/ids")) == ["1", "2", "3"], what="registrations")
    reg = cluster.json("/brokers/ids/2")
    b2 = cluster.brokers[2]
    assert reg["version"] == 5 and reg["rack"] == "r2" and reg["port"] == b2.port
    assert reg["endpoints"] == [f"PLAINTEXT://127.0.0.1:{b2.port}"]
    assert reg["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"}
    eventually(lambda: cluster.controller() is not None, what="a controller")
    cid = cluster.controller()
    assert int(cluster.zk.get("/controller_epoch")[0]) >= 1
    assert json.loads(cluster.zk.get("/cluster/id")[0])["id"]
    for b in cluster.brokers.values():
        eventually(lambda b=b: describe_cluster(b) == (cid, [1, 2, 3]), what="DescribeCluster from every broker")
        md = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=10)
        assert sorted(md.brokers) == [1, 2, 3] and md.controller_id == cid

    admin = AdminClient({"bootstrap.servers": b2.bootstrap})
    assert admin.create_topics([NewTopic("orders", 3, 3, config={"retention.ms": "60000"})])["orders"].result(30) \
        is None
    too_many = admin.create_topics([NewTopic("wide", 1, 4)])["wide"]
    with pytest.raises(Exception) as e:
        too_many.result(30)
    assert e.value.args[0].code() == ErrorCode.INVALID_REPLICATION_FACTOR
    topic = cluster.json("/brokers/topics/orders")
    assert topic["version"] == 3 and topic["topic_id"] and sorted(topic["partitions"]) == ["0", "1", "2"]
    assert all(sorted(r) == [1, 2, 3] for r in topic["partitions"].values())
    # rack-aware placement spreads the leaders over the three racks
    assert sorted(r[0] for r in topic["partitions"].values()) == [1, 2, 3]
    assert cluster.json("/config/topics/orders") == {"version": 1, "config": {"retention.ms": "60000"}}
    for p in range(3):
        path = f"/brokers/topics/orders/partitions/{p}/state"
        eventually(lambda path=path: cluster.zk.exists(path), what="partition state")
        state = cluster.json(path)
        assert state["leader"] == topic["partitions"][str(p)][0] and sorted(state["isr"]) == [1, 2, 3]
        assert state["leader_epoch"] == 0 and state["version"] == 1

    # every broker serves the controller's view: leader and ISR of each partition
    leaders = {p: cluster.json(f"/brokers/topics/orders/partitions/{p}/state")["leader"] for p in range(3)}

    def served(b: BrokerProcess) -> bool:
        t = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics("orders", timeout=10).topics["orders"]
        return t.error is None and {p: (pm.leader, sorted(pm.isrs), sorted(pm.replicas))
                                    for p, pm in t.partitions.items()} == \
            {p: (leaders[p], [1, 2, 3], [1, 2, 3]) for p in range(3)}
    for b in cluster.brokers.values():
        eventually(lambda b=b: served(b), what="Metadata with leaders and ISRs from every broker")

    assert admin.delete_topics(["orders"])["orders"].result(30) is None
    # The controller removes the topic's znode, then its config, then the deletion request, one
    # write at a time as Kafka's TopicDeletionManager does: wait for the last one.
    eventually(lambda: not cluster.zk.exists("/brokers/topics/orders")
               and cluster.zk.get_children("/admin/delete_topics") == [], what="the deletion")
    assert not cluster.zk.exists("/config/topics/orders")



def test_a_topic_deleted_as_soon_as_created(cluster):
    """sarama's TestFuncAdminDeleteTopic: CreateTopics then DeleteTopics at once, on one
    connection. The create's answer can come before the controller's UpdateMetadata tells the
    broker of the topic; the delete still finds it, as Kafka's controller does."""
    from rivulet.client import core

    for i in (1, 2, 3):
        cluster.start(i)
    cluster.wait_for_brokers([1, 2, 3])

    async def create_and_delete(broker: BrokerProcess, rounds: int) -> list[tuple[int, int]]:
        conn = await BrokerConnection("127.0.0.1", broker.port).connect(10)
        out = []
        try:
            for n in range(rounds):
                name = f"brief-{broker.port}-{n}"
                created = await conn.send(core.create_topics_request([NewTopic(name, 1, 1)], timeout_ms=30000))
                deleted = await conn.send(core.delete_topics_request([name], timeout_ms=30000))
                out.append((created.topics[0].error_code, deleted.responses[0].error_code))
        finally:
            await conn.close()
        return out

    for b in cluster.brokers.values():
        assert asyncio.run(create_and_delete(b, 5)) == [(ErrorCode.NONE, ErrorCode.NONE)] * 5

def test_controller_failover_after_kill_9_and_controlled_shutdown(cluster):
    for i in (1, 2, 3):
        cluster.start(i)
    eventually(lambda: cluster.controller() is not None, what="a controller")
    first = cluster.controller()
    epoch = int(cluster.zk.get("/controller_epoch")[0])
    survivor = next(b for i, b in cluster.brokers.items() if i != first)
    admin = AdminClient({"bootstrap.servers": survivor.bootstrap})
    admin.create_topics([NewTopic("events", 3, 3)])["events"].result(30)
    eventually(lambda: all(cluster.zk.exists(f"/brokers/topics/events/partitions/{p}/state") for p in range(3)))

    cluster.brokers[first].kill()  # kill -9: its session lingers until the timeout
    eventually(lambda: cluster.controller() not in (None, first), what="a new controller")
    assert int(cluster.zk.get("/controller_epoch")[0]) == epoch + 1
    new = cluster.controller()
    eventually(lambda: describe_cluster(survivor)[0] == new, what="the survivors to name the new controller")
    # the dead broker led one partition: it has a new leader from the ISR, and left every ISR
    for p in range(3):
        eventually(lambda p=p: first not in cluster.json(f"/brokers/topics/events/partitions/{p}/state")["isr"])
        assert cluster.json(f"/brokers/topics/events/partitions/{p}/state")["leader"] != first

    # a graceful stop moves leadership away first (controlled shutdown)
    leaving = next(i for i in cluster.brokers if i not in (first, new))
    led = [p for p in range(3) if cluster.json(f"/brokers/topics/events/partitions/{p}/state")["leader"] == leaving]
    assert cluster.brokers[leaving].stop(timeout=60) == 0
    for p in led:
        state = cluster.json(f"/brokers/topics/events/partitions/{p}/state")
        assert state["leader"] == new and state["isr"] == [new]


def test_broker_id_generation_and_restart_keep_the_id(cluster):
    b = cluster.start(None)
    eventually(lambda: cluster.zk.get_children("/brokers/ids") == ["1001"], what="a generated id")
    b.restart()
    eventually(lambda: cluster.zk.get_children("/brokers/ids") == ["1001"], what="the same id after a restart")


def test_internal_topics_are_created_in_zookeeper_and_groups_commit(cluster):
    """__consumer_offsets and __transaction_state are created in ZooKeeper on first need, with
    their replication factors and configs; a group consumes and commits across the brokers."""
    from rivulet import Consumer, Producer

    for i in (1, 2, 3):
        cluster.start(i)
    eventually(lambda: cluster.controller() is not None and cluster.registered() == [1, 2, 3], what="the brokers")
    bootstrap = cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # a broker learns of the others through its watch: it may place before it saw the last one
    eventually(lambda: admin.create_topics([NewTopic("events", 2, 3)])["events"].exception(30) is None,
               what="the topic")
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})

    def produce(*values: bytes) -> None:
        for v in values:
            producer.produce("events", v, key=v)
        assert producer.flush(30) == 0

    def consume(n: int) -> list[bytes]:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "g1", "auto.offset.reset": "earliest",
                      "enable.auto.commit": False})
        c.subscribe(["events"])
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                got.append(m.value())
        c.commit(asynchronous=False)
        c.close()
        return got

    produce(*(b"v%d" % i for i in range(10)))
    assert sorted(consume(10)) == sorted(b"v%d" % i for i in range(10))
    offsets = cluster.json("/brokers/topics/__consumer_offsets")
    assert len(offsets["partitions"]) == 50 and all(len(r) == 3 for r in offsets["partitions"].values())
    assert cluster.json("/config/topics/__consumer_offsets")["config"]["cleanup.policy"] == "compact"
    produce(b"later")
    assert consume(1) == [b"later"]  # the group resumes from its committed offsets

    Producer({"bootstrap.servers": bootstrap, "transactional.id": "tx-1"}).init_transactions(60)
    txn_topic = cluster.json("/brokers/topics/__transaction_state")
    assert len(txn_topic["partitions"]) == 50 and all(len(r) == 3 for r in txn_topic["partitions"].values())


def test_metadata_naming_an_internal_topic_has_the_controller_create_it(cluster):
    """As Kafka 4.3.1: Metadata naming __consumer_offsets, __transaction_state or
    __share_group_state with auto-creation allowed answers UNKNOWN_TOPIC_OR_PARTITION, internal,
    and has the topic made as for its coordinator (its partition count, replication factor and
    configs); without auto-creation nothing is made."""
    from rivulet.protocol.messages import metadata_request as mq

    counts = {"__consumer_offsets": 5, "__transaction_state": 3, "__share_group_state": 4}
    for i in (1, 2, 3):
        cluster.start(i, **{"offsets.topic.num.partitions": "5", "transaction.state.log.num.partitions": "3",
                            "share.coordinator.state.topic.num.partitions": "4"})
    cluster.wait_for_brokers([1, 2, 3])
    b = cluster.brokers[2]

    async def metadata(auto_create: bool) -> dict[str, tuple[int, bool, int]]:
        conn = await BrokerConnection("127.0.0.1", b.port).connect(10)
        try:
            resp = await conn.send(mq.MetadataRequest(topics=[mq.MetadataRequestTopic(name=n) for n in counts],
                                                      allow_auto_topic_creation=auto_create), 12)
        finally:
            await conn.close()
        return {t.name: (t.error_code, t.is_internal, len(t.partitions)) for t in resp.topics}

    unknown = {n: (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, True, 0) for n in counts}
    assert asyncio.run(metadata(False)) == unknown
    time.sleep(1)  # a creation, had one been started, would be in ZooKeeper by now
    assert not set(counts) & set(cluster.zk.get_children("/brokers/topics"))
    assert asyncio.run(metadata(True)) == unknown
    eventually(lambda: asyncio.run(metadata(False)) == {n: (ErrorCode.NONE, True, c) for n, c in counts.items()},
               60, "the internal topics with their leaders")
    for name, count in counts.items():
        assigned = cluster.json(f"/brokers/topics/{name}")["partitions"]
        assert len(assigned) == count and all(sorted(r) == [1, 2, 3] for r in assigned.values())
        configs = cluster.json(f"/config/topics/{name}")["config"]
        assert configs["cleanup.policy"] == "compact"
    assert cluster.json("/config/topics/__transaction_state")["config"]["min.insync.replicas"] == "2"


def test_topic_configs_live_in_zookeeper(cluster):
    """A topic's configs are written to /config/topics with a change notification, and every
    broker applies and describes them."""
    from rivulet.admin import ConfigResource, ResourceType

    for i in (1, 2):
        cluster.start(i)
    eventually(lambda: cluster.controller() is not None and cluster.registered() == [1, 2], what="the brokers")
    a1 = AdminClient({"bootstrap.servers": cluster.brokers[1].bootstrap})
    eventually(lambda: a1.create_topics([NewTopic("logs", 1, 2, config={"retention.ms": "60000"})])["logs"]
               .exception(30) is None, what="the topic")

    def described(broker: int) -> dict[str, str]:
        admin = AdminClient({"bootstrap.servers": cluster.brokers[broker].bootstrap})
        res = admin.describe_configs([ConfigResource(ResourceType.TOPIC, "logs")])
        try:
            return {k: v.value for k, v in next(iter(res.values())).result(30).items()}
        except Exception:  # UNKNOWN_TOPIC_OR_PARTITION until the controller told this broker
            return {}

    for b in (1, 2):
        eventually(lambda b=b: described(b).get("retention.ms") == "60000", what=f"broker {b}'s view")
    res = a1.alter_configs([ConfigResource(ResourceType.TOPIC, "logs", set_config={"retention.ms": "120000",
                                                                                  "cleanup.policy": "compact"})])
    next(iter(res.values())).result(30)
    eventually(lambda: cluster.json("/config/topics/logs")["config"] == {"retention.ms": "120000",
                                                                        "cleanup.policy": "compact"})
    def notified() -> bool:
        for c in cluster.zk.get_children("/config/changes"):
            try:
                doc = json.loads(cluster.zk.get(f"/config/changes/{c}")[0])
            except NoNodeError:  # purged between the listing and the read
                continue
            if doc["entity_path"] == "topics/logs" and doc.get("altered") == ["cleanup.policy", "retention.ms"]:
                return True
        return False
    eventually(notified,
        what="the change notification")
    eventually(lambda: described(2).get("cleanup.policy") == "compact", what="the change on the other broker")


def test_create_partitions_grows_the_assignment_and_the_controller_leads_them(cluster):
    from rivulet.admin import NewPartitions

    for i in (1, 2):
        cluster.start(i)
    eventually(lambda: cluster.controller() is not None and cluster.registered() == [1, 2], what="the brokers")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    eventually(lambda: admin.create_topics([NewTopic("grow", 1, 2)])["grow"].exception(30) is None, what="the topic")
    assert admin.create_partitions([NewPartitions("grow", 3)])["grow"].result(30) is None
    topic = cluster.json("/brokers/topics/grow")
    assert sorted(topic["partitions"]) == ["0", "1", "2"] and all(sorted(r) == [1, 2]
                                                                  for r in topic["partitions"].values())
    for p in (1, 2):
        eventually(lambda p=p: cluster.zk.exists(f"/brokers/topics/grow/partitions/{p}/state"), what="new leaders")
    eventually(lambda: len(admin.list_topics("grow", timeout=10).topics["grow"].partitions) == 3,
               what="Metadata with three partitions")
    shrink = admin.create_partitions([NewPartitions("grow", 2)])["grow"]
    with pytest.raises(Exception) as e:
        shrink.result(30)
    assert e.value.args[0].code() == ErrorCode.INVALID_PARTITIONS


def test_elect_leaders_is_answered_by_the_controller(cluster):
    from rivulet.protocol.messages.elect_leaders_request import ElectLeadersRequest

    for i in (1, 2):
        cluster.start(i)
    eventually(lambda: cluster.controller() is not None and cluster.registered() == [1, 2], what="the brokers")

    def elect(broker: int) -> int:
        async def ask() -> int:
            b = cluster.brokers[broker]
            conn = await BrokerConnection("127.0.0.1", b.port).connect(10)
            try:
                r = await conn.send(ElectLeadersRequest(election_type=0, topic_partitions=None, timeout_ms=5000))
            finally:
                await conn.close()
            assert r.error_code != 0 or r.replica_election_results == []  # nothing to move
            return r.error_code
        return asyncio.run(ask())

    controller = cluster.controller()
    other = next(i for i in (1, 2) if i != controller)
    assert elect(controller) == ErrorCode.NONE
    assert elect(other) == ErrorCode.NOT_CONTROLLER


def test_reassignment_end_to_end(cluster):
    """AlterPartitionReassignments to the controller: the new replica catches up through real
    replication, joins the ISR, and the old one is dropped; the records stay readable."""
    from rivulet import Producer
    from rivulet.protocol.messages import alter_partition_reassignments_request as apr
    from rivulet.protocol.messages.list_partition_reassignments_request import ListPartitionReassignmentsRequest

    for i in (1, 2, 3):
        cluster.start(i)
    eventually(lambda: cluster.controller() is not None and cluster.registered() == [1, 2, 3], what="the brokers")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    eventually(lambda: admin.create_topics([NewTopic("moving", replica_assignment=[[1, 2]])])["moving"]
               .exception(30) is None, what="the topic")
    eventually(lambda: cluster.zk.exists("/brokers/topics/moving/partitions/0/state"), what="a leader")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(20):
        producer.produce("moving", b"r%d" % i, partition=0)
    assert producer.flush(30) == 0

    def to_controller(request):
        async def ask():
            b = cluster.brokers[cluster.controller()]
            conn = await BrokerConnection("127.0.0.1", b.port).connect(10)
            try:
                return await conn.send(request)
            finally:
                await conn.close()
        return asyncio.run(ask())

    r = to_controller(apr.AlterPartitionReassignmentsRequest(timeout_ms=30000, topics=[apr.ReassignableTopic(
        name="moving", partitions=[apr.ReassignablePartition(partition_index=0, replicas=[2, 3])])]))
    assert r.error_code == 0 and r.responses[0].partitions[0].error_code == 0
    eventually(lambda: cluster.json("/brokers/topics/moving")["partitions"]["0"] == [2, 3], timeout=60,
               what="the reassignment to complete")
    assert cluster.json("/brokers/topics/moving")["adding_replicas"] == {}
    state = cluster.partition_state("moving", 0)
    assert state["leader"] in (2, 3) and sorted(state["isr"]) == [2, 3]
    listed = to_controller(ListPartitionReassignmentsRequest(timeout_ms=30000, topics=None))
    assert listed.error_code == 0 and listed.topics == []
    end = admin.list_topics("moving", timeout=10).topics["moving"].partitions[0]
    assert sorted(end.replicas) == [2, 3]


def test_a_new_broker_answers_metadata_only_once_the_controller_has_told_it(cluster):
    """As a Kafka 4.3 broker serves nobody before it has caught up with the metadata, a
    Metadata request to a just-started broker waits for the controller's first UpdateMetadata
    rather than answer with no broker at all (librdkafka lost a consumer's join over that)."""
    from rivulet.protocol.messages import metadata_request as mq

    slow = {"zookeeper.session.timeout.ms": "20000"}  # the paused controller keeps its session
    cluster.start(1, **slow)
    cluster.wait_for_brokers([1])
    cluster.brokers[1].pause()  # the controller: nobody tells the new broker anything meanwhile
    try:
        b2 = cluster.start(2, **slow)

        async def ask() -> list[int]:
            conn = await BrokerConnection("127.0.0.1", b2.port, client_id="md").connect(10)
            try:
                asking = asyncio.ensure_future(conn.send(mq.MetadataRequest(topics=None)))
                await asyncio.sleep(1.5)
                assert not asking.done(), f"answered before the controller spoke: {asking.result()}"
                cluster.brokers[1].resume()
                response = await asyncio.wait_for(asking, 30)
                return sorted(b.node_id for b in response.brokers)
            finally:
                await conn.close()

        assert asyncio.run(ask()) == [1, 2]
    finally:
        cluster.brokers[1].resume()


def _cluster_default(broker: BrokerProcess, set_min_isr: str | None = None) -> dict[str, tuple[str, int]]:
    """The cluster-default level (BROKER resource ""), which confluent-kafka cannot name, as
    ``broker`` describes it: name -> (value, source); after setting min.insync.replicas there."""
    from rivulet.protocol.messages import describe_configs_request as dcq
    from rivulet.protocol.messages import incremental_alter_configs_request as iacq

    async def go() -> dict[str, tuple[str, int]]:
        conn = await BrokerConnection(broker.host, broker.port).connect(10)
        try:
            if set_min_isr is not None:
                resp = await conn.send(iacq.IncrementalAlterConfigsRequest(validate_only=False, resources=[
                    iacq.AlterConfigsResource(resource_type=4, resource_name="", configs=[
                        iacq.AlterableConfig(name="min.insync.replicas", config_operation=0, value=set_min_isr)])]))
                assert resp.responses[0].error_code == 0, resp
            resp = await conn.send(dcq.DescribeConfigsRequest(resources=[dcq.DescribeConfigsResource(
                resource_type=4, resource_name="", configuration_keys=None)]))
            return {c.name: (c.value, c.config_source) for c in resp.results[0].configs}
        finally:
            await conn.close()
    return asyncio.run(go())


def test_dynamic_broker_configs_live_in_zookeeper(cluster):
    """As ZooKeeper-era Kafka: the cluster default of the dynamic broker configs in
    /config/brokers/<default>, a broker's own in /config/brokers/<id>, each with a change
    notification. A cluster-level min.insync.replicas set through broker 1 is described by
    every broker (DYNAMIC_DEFAULT_BROKER_CONFIG) and enforced by broker 2 leading a partition
    (acks=all refused with two in-sync replicas of three); broker 3, restarted, keeps it."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient as KafkaAdmin, AlterConfigOpType, ConfigEntry, ConfigResource

    dynamic_default = 3  # DescribeConfigs' DYNAMIC_DEFAULT_BROKER_CONFIG
    for i in (1, 2, 3):
        cluster.start(i)
    cluster.wait_for_brokers([1, 2, 3])
    # The first broker wrote the cluster-level min ISR (Kafka 4's ELR safety record), from its static one.
    assert cluster.json("/config/brokers/<default>")["config"] == {"min.insync.replicas": "1"}
    admin = AdminClient({"bootstrap.servers": cluster.brokers[1].bootstrap})
    admin.create_topics([NewTopic("guarded", replica_assignment=[[2, 3, 1]])])["guarded"].result(30)

    def isr() -> list[int] | None:
        try:
            return sorted(cluster.partition_state("guarded", 0)["isr"])
        except NoNodeError:  # until the controller writes it
            return None

    eventually(lambda: isr() == [1, 2, 3], what="the topic")
    cluster.brokers[3].kill()
    eventually(lambda: isr() == [1, 2], 60, "broker 3 out of the ISR")

    def produced() -> str | None:
        """An acks=all record to broker 2, leading: None when written, else the error's name."""
        p = Producer({"bootstrap.servers": cluster.brokers[2].bootstrap, "acks": "all", "retries": 0,
                      "enable.idempotence": False, "message.timeout.ms": 10000})
        out: list = []
        p.produce("guarded", b"x", on_delivery=lambda err, _msg: out.append(err))
        p.flush(30)
        return out[0].name() if out and out[0] is not None else None

    assert produced() is None
    assert _cluster_default(cluster.brokers[1], set_min_isr="3")["min.insync.replicas"] == ("3", dynamic_default)
    eventually(lambda: cluster.json("/config/brokers/<default>")["config"] == {"min.insync.replicas": "3"})
    eventually(lambda: _cluster_default(cluster.brokers[2])["min.insync.replicas"] == ("3", dynamic_default),
               what="broker 2 to describe it")
    assert produced() == "NOT_ENOUGH_REPLICAS"
    # A broker's own level: in /config/brokers/<id>, asked of that broker.
    node = ConfigResource(ConfigResource.Type.BROKER, "2", incremental_configs=[
        ConfigEntry("log.retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)])
    admin2 = KafkaAdmin({"bootstrap.servers": cluster.brokers[2].bootstrap})
    admin2.incremental_alter_configs([node])[node].result(30)

    def level(entity: str) -> dict[str, str] | None:
        try:
            return cluster.json(f"/config/brokers/{entity}")["config"]
        except NoNodeError:
            return None

    eventually(lambda: level("2") == {"log.retention.ms": "7200000"}, what="/config/brokers/2")
    cluster.restart(3)
    assert _cluster_default(cluster.brokers[3])["min.insync.replicas"] == ("3", dynamic_default)
    eventually(lambda: isr() == [1, 2, 3], 60, "broker 3 back in the ISR")
    assert produced() is None
