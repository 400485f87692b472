"""Kafka's znode formats: each decodes the JSON a ZooKeeper-mode Kafka 3.x cluster writes, and
encodes back to the same document (key order aside, which Kafka's JSON writer does not fix)."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace

import pytest

from rivulet.common.types import TopicPartition
from rivulet.controller import zk_data as z

pytestmark = pytest.mark.fast


def same_json(a: bytes, b: bytes) -> bool:
    return json.loads(a) == json.loads(b)


def test_paths_are_kafkas():
    tp = TopicPartition("orders", 3)
    assert z.broker_path(7) == "/brokers/ids/7"
    assert z.topic_path("orders") == "/brokers/topics/orders"
    assert z.partitions_path("orders") == "/brokers/topics/orders/partitions"
    assert z.partition_state_path(tp) == "/brokers/topics/orders/partitions/3/state"
    assert z.config_path("topics", "orders") == "/config/topics/orders"
    assert z.delete_topic_path("orders") == "/admin/delete_topics/orders"
    assert set(z.PERSISTENT_PATHS) >= {
        "/consumers", "/brokers/ids", "/brokers/topics", "/brokers/seqid", "/config/changes",
        "/admin/delete_topics", "/isr_change_notification", "/latest_producer_id_block",
        "/log_dir_event_notification", "/config/topics", "/config/clients", "/config/users",
        "/config/brokers", "/config/ips"}


KAFKA_BROKER = (b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
                b'"endpoints":["PLAINTEXT://localhost:9092"],"jmx_port":-1,"port":9092,'
                b'"host":"localhost","version":5,"timestamp":"1700000000123"}')


def test_broker_registration_round_trip():
    b = z.BrokerRegistration.decode(1, KAFKA_BROKER, epoch=4294967321)
    assert b.broker_id == 1 and b.epoch == 4294967321
    assert b.endpoints == (z.EndPoint("PLAINTEXT", "localhost", 9092, "PLAINTEXT"),)
    assert b.rack is None and b.jmx_port == -1 and b.timestamp_ms == 1700000000123
    assert b.features == {}
    assert same_json(b.encode(), KAFKA_BROKER)


def test_broker_registration_with_listeners_rack_and_features():
    doc = (b'{"features":{"metadata.version":{"min_version":1,"max_version":14}},'
           b'"listener_security_protocol_map":{"CLIENT":"SSL","REPLICATION":"PLAINTEXT"},'
           b'"endpoints":["CLIENT://[::1]:9093","REPLICATION://host1:9094"],"rack":"dc1",'
           b'"jmx_port":9999,"port":9094,"host":"host1","version":5,"timestamp":"5"}')
    b = z.BrokerRegistration.decode(2, doc)
    assert b.endpoint("CLIENT") == z.EndPoint("CLIENT", "::1", 9093, "SSL")
    assert b.endpoint("REPLICATION") == z.EndPoint("REPLICATION", "host1", 9094, "PLAINTEXT")
    assert b.endpoint("OTHER") is None
    assert b.rack == "dc1" and b.features == {"metadata.version": (1, 14)}
    # host/port name the first PLAINTEXT endpoint, for clients from before endpoint lists
    assert same_json(b.encode(), doc)


def test_broker_registration_clean_start_round_trip():
    # Rivulet's key, only when true; Kafka's znode (without it) reads as an unclean start.
    assert z.BrokerRegistration.decode(1, KAFKA_BROKER).clean_start is False
    clean = replace(z.BrokerRegistration.decode(1, KAFKA_BROKER), clean_start=True)
    assert json.loads(clean.encode())["clean_start"] is True
    assert z.BrokerRegistration.decode(1, clean.encode()) == clean
    assert z.BrokerRegistration.decode(1, KAFKA_BROKER.replace(b'"version":5', b'"clean_start":"true","version":5')
                                       ).clean_start is False  # only JSON true vouches


def test_accounted_registrations_round_trip():
    # Rivulet's own znode: broker id -> the czxid of the registration a controller dealt with.
    data = z.encode_accounted_registrations({3: 0x200000011, 1: 0x100000004})
    assert json.loads(data) == {"version": 1, "brokers": {"1": 0x100000004, "3": 0x200000011}}
    assert z.decode_accounted_registrations(data) == {1: 0x100000004, 3: 0x200000011}
    assert z.decode_accounted_registrations(b'{"version":1}') == {}


def test_broker_registration_without_plaintext_has_no_host():
    b = z.BrokerRegistration(7, (z.EndPoint("SSL", "h", 1, "SSL"),))
    doc = json.loads(b.encode())
    assert doc["host"] is None and doc["port"] == -1 and "rack" not in doc


def test_broker_registration_version_1_and_errors():
    b = z.BrokerRegistration.decode(3, b'{"version":1,"host":"h","port":9092,"jmx_port":-1,"timestamp":"1"}')
    assert b.endpoints == (z.EndPoint("PLAINTEXT", "h", 9092),)
    with pytest.raises(ValueError):
        z.BrokerRegistration.decode(3, b'{"version":0,"host":"h","port":1}')
    with pytest.raises(ValueError):
        z.BrokerRegistration.decode(3, b'[1]')


def test_controller_and_epoch():
    kafka = b'{"version":1,"brokerid":2,"timestamp":"1700000000000"}'
    assert z.decode_controller(kafka) == 2
    assert same_json(z.encode_controller(2, 1700000000000), kafka)
    # a 3.4+ controller's znode (migration-capable) still names the broker
    assert z.decode_controller(b'{"version":2,"brokerid":5,"timestamp":"1","kraftControllerEpoch":-1}') == 5
    assert z.encode_controller_epoch(12) == b"12"
    assert z.decode_controller_epoch(b"12") == 12


def test_cluster_id():
    kafka = b'{"version":"1","id":"m1XhYv3kTGqkTRnzHn9qyA"}'
    assert z.decode_cluster_id(kafka) == "m1XhYv3kTGqkTRnzHn9qyA"
    assert same_json(z.encode_cluster_id("m1XhYv3kTGqkTRnzHn9qyA"), kafka)


KAFKA_TOPIC = (b'{"partitions":{"0":[1,2,3],"1":[2,3,1]},"topic_id":"2Dp0TN0sQGK0G7UFiXiv2Q",'
               b'"adding_replicas":{},"removing_replicas":{},"version":3}')


def test_topic_assignment_round_trip():
    t = z.TopicAssignment.decode("orders", KAFKA_TOPIC)
    assert t.topic == "orders"
    assert t.replicas == {0: [1, 2, 3], 1: [2, 3, 1]}
    assert t.adding == {} and t.removing == {}
    assert t.topic_id is not None and z._uuid_to_kafka(t.topic_id) == "2Dp0TN0sQGK0G7UFiXiv2Q"
    assert same_json(t.encode(), KAFKA_TOPIC)


def test_topic_assignment_during_a_reassignment_and_without_id():
    doc = (b'{"partitions":{"0":[1,2,3,4]},"adding_replicas":{"0":[4]},'
           b'"removing_replicas":{"0":[1]},"version":3}')
    t = z.TopicAssignment.decode("t", doc)
    assert t.topic_id is None and t.adding == {0: [4]} and t.removing == {0: [1]}
    assert same_json(t.encode(), doc)
    # a version 1 znode (Kafka 0.x/1.x) has only partitions
    old = z.TopicAssignment.decode("t", b'{"version":1,"partitions":{"0":[0,1]}}')
    assert old.replicas == {0: [0, 1]} and old.topic_id is None


def test_kafka_uuid_form():
    u = uuid.uuid4()
    s = z._uuid_to_kafka(u)
    assert len(s) == 22 and "=" not in s
    assert z._uuid_from_kafka(s) == u
    assert z._uuid_from_kafka(str(u)) == u


KAFKA_STATE = b'{"controller_epoch":4,"leader":2,"version":1,"leader_epoch":7,"isr":[2,3]}'


def test_partition_state_round_trip():
    s = z.LeaderAndIsr.decode(KAFKA_STATE, zk_version=9)
    assert s == z.LeaderAndIsr(leader=2, leader_epoch=7, isr=(2, 3), controller_epoch=4, partition_epoch=9)
    assert same_json(s.encode(), KAFKA_STATE)


def test_partition_state_recovering_and_transitions():
    doc = b'{"controller_epoch":4,"leader":2,"version":1,"leader_epoch":7,"isr":[2],"leader_recovery_state":1}'
    s = z.LeaderAndIsr.decode(doc, zk_version=1)
    assert s.leader_recovery_state == 1
    assert same_json(s.encode(), doc)
    moved = s.new_leader(3, (3,), controller_epoch=5)
    assert (moved.leader, moved.leader_epoch, moved.isr, moved.controller_epoch) == (3, 8, (3,), 5)
    shrunk = z.LeaderAndIsr.decode(KAFKA_STATE, 2).new_isr((2,), controller_epoch=4)
    assert (shrunk.leader, shrunk.leader_epoch, shrunk.isr) == (2, 7, (2,))


def test_partition_state_eligible_leader_replicas():
    """KIP-966's two lists ride in the state znode when set, and are absent (read as empty) in
    every znode written without them, a Kafka 3.x one included."""
    plain = z.LeaderAndIsr.decode(KAFKA_STATE, zk_version=9)
    assert plain.eligible_leader_replicas == () and plain.last_known_elr == ()
    assert b"elr" not in plain.encode() and b"eligible" not in plain.encode()
    doc = (b'{"controller_epoch":4,"leader":-1,"version":1,"leader_epoch":7,"isr":[],'
           b'"eligible_leader_replicas":[1,3],"last_known_elr":[2]}')
    s = z.LeaderAndIsr.decode(doc, zk_version=3)
    assert (s.leader, s.isr, s.eligible_leader_replicas, s.last_known_elr) == (-1, (), (1, 3), (2,))
    assert same_json(s.encode(), doc)
    # the leader and ISR transitions keep them; a write keeps them with the znode's new version
    moved = s.new_leader(3, (3,), controller_epoch=5).written(4)
    assert (moved.leader_epoch, moved.partition_epoch, moved.eligible_leader_replicas, moved.last_known_elr) == \
        (8, 4, (1, 3), (2,))


def test_entity_config_and_change_notification():
    kafka = b'{"version":1,"config":{"retention.ms":"1000","cleanup.policy":"compact"}}'
    assert z.decode_entity_config(kafka) == {"retention.ms": "1000", "cleanup.policy": "compact"}
    assert same_json(z.encode_entity_config({"retention.ms": "1000", "cleanup.policy": "compact"}), kafka)
    assert z.decode_entity_config(None) == {} and z.decode_entity_config(b"") == {}
    change = b'{"version":2,"entity_path":"topics/orders"}'
    assert z.decode_config_change(change) == z.ConfigChange("topics/orders", None)
    assert same_json(z.encode_config_change("topics/orders"), change)
    # Rivulet's writers name the configs they altered, in a key Kafka's readers skip.
    named = z.encode_config_change("brokers/<default>", {"min.insync.replicas"})
    assert same_json(named, b'{"version":2,"entity_path":"brokers/<default>","altered":["min.insync.replicas"]}')
    assert z.decode_config_change(named) == z.ConfigChange("brokers/<default>", frozenset({"min.insync.replicas"}))


def test_reassignment():
    kafka = b'{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2]}]}'
    moves = z.decode_reassignment(kafka)
    assert moves == {TopicPartition("t", 0): [1, 2]}
    assert same_json(z.encode_reassignment(moves), kafka)
