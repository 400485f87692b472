"""Broker properties: Kafka's names, defaults, and clear errors for bad input."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rivulet.server.config import BROKER_CONFIGS, BrokerConfig, ConfigError, load_properties, parse_listener

pytestmark = pytest.mark.fast


def test_defaults_match_kafka():
    c = BrokerConfig()
    assert c.listeners == [("PLAINTEXT", "127.0.0.1", 9092)]
    assert c.log_dirs == ["./rivulet-data"]
    assert c["num.partitions"] == 1
    assert c["auto.create.topics.enable"] is True
    assert c["message.max.bytes"] == 1048588
    assert c["group.initial.rebalance.delay.ms"] == 3000
    assert c["offsets.topic.num.partitions"] == 50
    assert c.retention_ms == 7 * 24 * 3600 * 1000


def test_retention_precedence_ms_over_minutes_over_hours():
    assert BrokerConfig({"log.retention.hours": "1"}).retention_ms == 3_600_000
    assert BrokerConfig({"log.retention.minutes": "2", "log.retention.hours": "1"}).retention_ms == 120_000
    assert BrokerConfig({"log.retention.ms": "5", "log.retention.minutes": "2"}).retention_ms == 5


def test_unknown_and_invalid_properties_are_named():
    with pytest.raises(ConfigError, match="unknown property 'log.segmnet.bytes'"):
        BrokerConfig({"log.segmnet.bytes": "1"})
    with pytest.raises(ConfigError, match="invalid value 'lots' for 'num.partitions'"):
        BrokerConfig({"num.partitions": "lots"})
    with pytest.raises(ConfigError, match="num.partitions"):
        BrokerConfig({"num.partitions": "0"})
    with pytest.raises(ConfigError, match="auto.create.topics.enable"):
        BrokerConfig({"auto.create.topics.enable": "yes"})


def test_stock_server_properties_are_accepted(tmp_path):
    p = tmp_path / "server.properties"
    p.write_text("# comment\nprocess.roles=broker,controller\nnode.id=3\nnum.network.threads=3\n"
                 "listeners=PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093\n"
                 "controller.quorum.voters=3@127.0.0.1:19093\nlog.dirs=/tmp/x\n")
    c = BrokerConfig(load_properties(p))
    assert c.node_id == 3 and c.log_dirs == ["/tmp/x"]


def test_listener_parsing():
    assert parse_listener("PLAINTEXT://[::1]:9092") == ("PLAINTEXT", "::1", 9092)
    with pytest.raises(ConfigError):
        parse_listener("127.0.0.1:9092")
    with pytest.raises(ConfigError):
        parse_listener("PLAINTEXT://host:99999")


def test_cli_reports_bad_property_and_exits_2():
    r = subprocess.run([sys.executable, "-m", "rivulet", "broker", "--override", "no.such.thing=1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "unknown property 'no.such.thing'" in r.stderr


@pytest.mark.fast
@pytest.mark.parametrize("listeners,protocol_map,message", [
    ("INTERNAL://127.0.0.1:9093", None, "listener INTERNAL is not in listener.security.protocol.map"),
    ("PLAINTEXT://127.0.0.1:9093", "PLAINTEXT:TLS", "listener.security.protocol.map entry 'PLAINTEXT:TLS'"),
])
def test_listeners_rivulet_cannot_serve_stop_start_up(listeners, protocol_map, message):
    props = {"listeners": listeners}
    if protocol_map:
        props["listener.security.protocol.map"] = protocol_map
    with pytest.raises(ConfigError) as e:
        BrokerConfig(props)
    assert message in str(e.value)


@pytest.mark.fast
def test_listener_names_map_to_plaintext():
    cfg = BrokerConfig({"listeners": "INTERNAL://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
                        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT"})
    assert cfg.security_protocols == {"INTERNAL": "PLAINTEXT", "CONTROLLER": "PLAINTEXT"}


@pytest.mark.fast
def test_an_ssl_listener_without_a_key_store_stops_start_up(tmp_path):
    from rivulet.server.broker import Broker

    cfg = BrokerConfig({"listeners": "SSL://127.0.0.1:0", "log.dir": str(tmp_path)})
    assert cfg.security_protocols == {"SSL": "SSL"}
    with pytest.raises(ConfigError, match="an SSL listener needs a key store"):
        Broker(cfg)


@pytest.mark.fast
def test_per_listener_settings_override_the_broker_wide_ones():
    cfg = BrokerConfig({"listeners": "INTERNAL://127.0.0.1:9092,EXTERNAL://127.0.0.1:9093",
                        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:SSL",
                        "ssl.client.auth": "requested",
                        "listener.name.external.ssl.client.auth": "required",
                        "listener.name.external.ssl.keystore.location": "/k.p12"})
    assert cfg.listener_props("EXTERNAL")["ssl.client.auth"] == "required"
    assert cfg.listener_props("EXTERNAL")["ssl.keystore.location"] == "/k.p12"
    assert cfg.listener_props("INTERNAL")["ssl.client.auth"] == "requested"
    assert cfg.listener_props("INTERNAL")["ssl.keystore.location"] is None
    assert cfg.security_protocols == {"INTERNAL": "PLAINTEXT", "EXTERNAL": "SSL"}


@pytest.mark.fast
@pytest.mark.parametrize("props,message", [
    ({"listener.name.external.no.such": "1"}, "unknown property 'listener.name.external.no.such'"),
    ({"listener.name.external.ssl.client.auth": "maybe"}, "ssl.client.auth"),
    ({"inter.broker.listener.name": "PLAINTEXT", "security.inter.broker.protocol": "PLAINTEXT"},
     "Only one of inter.broker.listener.name and security.inter.broker.protocol"),
    ({"inter.broker.listener.name": "REPLICATION"}, "inter.broker.listener.name must be a listener name"),
    ({"security.inter.broker.protocol": "SSL"}, "inter.broker.listener.name must be a listener name"),
])
def test_listener_settings_refused(props, message):
    with pytest.raises(ConfigError, match=message):
        BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:9092", **props})


@pytest.mark.fast
def test_inter_broker_listener():
    assert BrokerConfig({}).inter_broker_listener == "PLAINTEXT"
    cfg = BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093",
                        "security.inter.broker.protocol": "SSL"})
    assert (cfg.inter_broker_listener, cfg.inter_broker_security_protocol()) == ("SSL", "SSL")
    cfg = BrokerConfig({"listeners": "CLIENT://127.0.0.1:9092,REPLICATION://127.0.0.1:9093",
                        "listener.security.protocol.map": "CLIENT:PLAINTEXT,REPLICATION:SSL",
                        "inter.broker.listener.name": "REPLICATION"})
    assert (cfg.inter_broker_listener, cfg.inter_broker_security_protocol()) == ("REPLICATION", "SSL")



@pytest.mark.parametrize("listeners,advertised", [
    ("PLAINTEXT://127.0.0.1:9092", "EXTERNAL://broker.example.com:9092"),
    ("INTERNAL://127.0.0.1:9092", "INTERNAL://10.0.0.1:9092,EXTERNAL://broker.example.com:9092"),
])
def test_an_advertised_listener_that_is_not_opened_stops_start_up(listeners, advertised):
    # As Kafka's KafkaConfig: advertised listener names must be among the listeners' names.
    props = {"listeners": listeners, "advertised.listeners": advertised,
             "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT"}
    with pytest.raises(ConfigError, match="advertised.listeners names listener EXTERNAL, which listeners does not"
                       ) as refused:
        BrokerConfig(props)
    r = subprocess.run([sys.executable, "-m", "rivulet", "broker",
                        *[arg for k, v in props.items() for arg in ("--override", f"{k}={v}")]],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [f"rivulet broker: {refused.value}"], r.stderr


@pytest.mark.parametrize("props,rule", [
    ({"queued.max.request.bytes": "1048576"},
     "queued.max.request.bytes must be larger or equal to socket.request.max.bytes"),
    ({"group.consumer.heartbeat.interval.ms": "20000"},
     "group.consumer.heartbeat.interval.ms must be less than or equal to group.consumer.max.heartbeat.interval.ms"),
    ({"group.consumer.min.heartbeat.interval.ms": "20000"},
     "group.consumer.max.heartbeat.interval.ms must be greater than or equal to "
     "group.consumer.min.heartbeat.interval.ms"),
    ({"group.consumer.session.timeout.ms": "30000"},
     "group.consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms"),
    ({"group.consumer.min.session.timeout.ms": "1000", "group.consumer.session.timeout.ms": "5000"},
     "group.consumer.heartbeat.interval.ms must be less than group.consumer.session.timeout.ms"),
    ({"group.share.session.timeout.ms": "90000"},
     "group.share.session.timeout.ms must be less than or equal to group.share.max.session.timeout.ms"),
    ({"group.share.heartbeat.interval.ms": "1000"},
     "group.share.heartbeat.interval.ms must be greater than or equal to group.share.min.heartbeat.interval.ms"),
    ({"group.streams.max.session.timeout.ms": "40000"},
     "group.streams.max.session.timeout.ms must be greater than or equal to group.streams.min.session.timeout.ms"),
    ({"group.streams.num.standby.replicas": "3"},
     "group.streams.num.standby.replicas must be less than or equal to group.streams.max.standby.replicas"),
    ({"group.consumer.assignment.interval.ms": "20000"},
     "group.consumer.assignment.interval.ms must be less than or equal to group.consumer.max.assignment.interval.ms"),
    ({"group.share.min.assignment.interval.ms": "2000"},
     "group.share.assignment.interval.ms must be greater than or equal to group.share.min.assignment.interval.ms"),
    ({"group.streams.max.assignment.interval.ms": "10", "group.streams.min.assignment.interval.ms": "20"},
     "group.streams.max.assignment.interval.ms must be greater than or equal to "
     "group.streams.min.assignment.interval.ms"),
    ({"replica.fetch.wait.max.ms": "31000"}, "replica.socket.timeout.ms should always be at least "
     "replica.fetch.wait.max.ms to prevent unnecessary socket timeouts"),
    ({"replica.lag.time.max.ms": "400"}, "replica.fetch.wait.max.ms should always be less than or equal to "
     "replica.lag.time.max.ms to prevent frequent changes in ISR"),
    ({"max.connections.per.ip": "0"},
     "max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides property is set."),
    # Kafka's rule with its default log.cleaner.dedupe.buffer.size (128 MiB): 127 threads at most.
    ({"log.cleaner.threads": "128"}, "log.cleaner.dedupe.buffer.size must be at least 1MB per cleaner thread."),
    ({"log.cleaner.threads": "4", "log.cleaner.dedupe.buffer.size": "4194304"},  # 1MB each: not more
     "log.cleaner.dedupe.buffer.size must be at least 1MB per cleaner thread."),
    ({"log.cleaner.threads": "0", "replica.lag.time.max.ms": "400"},  # before the replica rules, as Kafka
     "log.cleaner.threads must be at least 1 (Kafka's check that log.cleaner.dedupe.buffer.size is at least 1MB "
     "per cleaner thread divides by it)"),
])
def test_kafka_rules_between_properties_stop_start_up(props, rule):
    # As Kafka's KafkaConfig and GroupCoordinatorConfig: the broker refuses to start.
    with pytest.raises(ConfigError) as refused:
        BrokerConfig(props)
    assert str(refused.value) == rule


@pytest.mark.parametrize("props", [
    {"queued.max.request.bytes": "104857600"},  # equal is enough
    {"queued.max.request.bytes": "0"},  # zero or less: unbounded
    {"group.consumer.min.session.timeout.ms": "1000", "group.consumer.session.timeout.ms": "5001",
     "group.consumer.min.heartbeat.interval.ms": "1000", "group.consumer.heartbeat.interval.ms": "5000"},
    {"max.connections.per.ip": "0", "max.connections.per.ip.overrides": "127.0.0.1:10"},
    {"replica.fetch.wait.max.ms": "30000", "replica.lag.time.max.ms": "30000"},
    {"log.cleaner.threads": "127"},
    {"log.cleaner.threads": "200", "log.cleaner.dedupe.buffer.size": str(201 * 1024 * 1024)},
])
def test_kafka_rules_between_properties_accept_their_bounds(props):
    assert BrokerConfig(props).is_set(next(iter(props)))


@pytest.mark.fast
def test_schema_registry_properties():
    cfg = BrokerConfig({"schema.registry.listeners": "http://127.0.0.1:8081"})
    assert list(cfg["schema.registry.listeners"]) == ["http://127.0.0.1:8081"]
    assert cfg["schema.registry.kafkastore.topic"] == "_schemas"
    assert cfg["schema.registry.kafkastore.topic.replication.factor"] == 3
    assert cfg.registry_client_listener() == "PLAINTEXT"
    assert not BrokerConfig({})["schema.registry.listeners"]  # off by default
    with pytest.raises(ConfigError, match="schema.registry.listeners must be http://host:port"):
        BrokerConfig({"schema.registry.listeners": "https://127.0.0.1:8081/x"})
    # Its clients need a PLAINTEXT listener of the broker.
    with pytest.raises(ConfigError, match="PLAINTEXT listener"):
        BrokerConfig({"schema.registry.listeners": "http://127.0.0.1:8081",
                      "listeners": "SASL_PLAINTEXT://127.0.0.1:9092", "sasl.enabled.mechanisms": "PLAIN"})


def test_a_broker_without_cleaner_threads_stops_at_start_up_in_one_line():
    # Kafka 4.3.1 takes 0 by its ConfigDef (atLeast(0)) and then fails dividing by it.
    r = subprocess.run([sys.executable, "-m", "rivulet", "broker", "--override", "log.cleaner.threads=0"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        "rivulet broker: log.cleaner.threads must be at least 1 (Kafka's check that log.cleaner.dedupe.buffer.size "
        "is at least 1MB per cleaner thread divides by it)"], r.stderr


def test_the_cleaners_other_kafka_properties_are_taken_with_kafkas_defaults_and_java_spelling():
    from rivulet.common.config import java_double
    cfg = BrokerConfig({"log.cleaner.io.buffer.size": "1048576", "log.cleaner.io.buffer.load.factor": "0.75"})
    assert cfg["log.cleaner.io.buffer.size"] == 1048576 and cfg["log.cleaner.io.buffer.load.factor"] == 0.75
    assert cfg["log.cleaner.dedupe.buffer.size"] == 134217728
    # DescribeConfigs shows Java's Double.toString: Kafka's default here is Double.MAX_VALUE.
    assert BROKER_CONFIGS["log.cleaner.io.max.bytes.per.second"].render(cfg["log.cleaner.io.max.bytes.per.second"]) \
        == "1.7976931348623157E308"
    assert [java_double(v) for v in (0.5, 100.0, 1e7, 1e-4, -2.5e10, 0.001)] == \
        ["0.5", "100.0", "1.0E7", "1.0E-4", "-2.5E10", "0.001"]
    with pytest.raises(ConfigError):
        BrokerConfig({"log.cleaner.io.buffer.size": "-1"})


def test_socket_listen_backlog_size_as_kafka():
    # KIP-764: broker-wide, default 50, at least 1.
    assert BrokerConfig()["socket.listen.backlog.size"] == 50
    assert BrokerConfig({"socket.listen.backlog.size": "7"})["socket.listen.backlog.size"] == 7
    with pytest.raises(ConfigError, match="socket.listen.backlog.size"):
        BrokerConfig({"socket.listen.backlog.size": "0"})
