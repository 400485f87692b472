"""Configuration: Kafka property names in, clear errors at construction for anything wrong."""

from __future__ import annotations

import collections.abc
import logging
import types
import typing

import pytest

from rivulet.client.config import AdminConfig, ConsumerConfig, ProducerConfig, describe, resolve
from rivulet.client.errors import ConfigException, KafkaError, KafkaException

pytestmark = pytest.mark.fast

B = {"bootstrap.servers": "127.0.0.1:1"}


def _accepts(hint: object, value: object) -> bool:
    """Whether ``value`` is of the type ``hint`` (the unions, tuples and callables the resolved
    configurations use)."""
    if isinstance(hint, types.UnionType):
        return any(_accepts(h, value) for h in hint.__args__)
    if hint is type(None):
        return value is None
    origin = typing.get_origin(hint)
    if origin is collections.abc.Callable:
        return callable(value)
    if origin is tuple:
        return isinstance(value, tuple) and all(isinstance(v, str) for v in value)
    return isinstance(value, hint) and not (hint is int and isinstance(value, bool))  # type: ignore[arg-type]


@pytest.mark.parametrize("role, typed", [("producer", ProducerConfig), ("consumer", ConsumerConfig),
                                         ("admin", AdminConfig)])
def test_resolved_types_match_the_properties(role, typed):
    """A role's TypedDict names exactly its properties, and types what resolve makes of them:
    defaults, and values given (the callbacks and a logger among them)."""
    hints = typing.get_type_hints(typed)
    assert set(hints) == {p.name for p in describe(role)}
    given = {"error_cb": print, "stats_cb": print, "logger": logging.getLogger("t"), "oauth_cb": print,
             "security.protocol": "sasl_plaintext", "sasl.mechanism": "OAUTHBEARER"}
    if role == "producer":
        given |= {"on_delivery": print, "transactional.id": "t", "linger.ms": 1}
    if role == "consumer":
        given |= {"on_commit": print, "group.id": "g"}
    c = resolve({**B, **given}, role)
    assert set(c) == set(hints)
    wrong = {k: (hints[k], v) for k, v in c.items() if not _accepts(hints[k], v)}
    assert not wrong


def test_defaults_and_types():
    c = resolve({**B, "linger.ms": "7", "acks": "1", "enable.idempotence": "false"}, "producer")
    assert c["linger.ms"] == 7.0 and c["acks"] == 1 and c["enable.idempotence"] is False
    assert c["compression.type"] == "none" and c["client.id"] == "rivulet"
    c = resolve({**B, "group.id": "g"}, "consumer")
    assert c["auto.offset.reset"] == "latest" and c["enable.auto.commit"] is True
    assert c["partition.assignment.strategy"] == ("range", "roundrobin")


def test_unknown_property_names_it():
    with pytest.raises(ConfigException, match="linger.mss") as ei:
        resolve({**B, "linger.mss": 5}, "producer")
    assert isinstance(ei.value, KafkaException) and isinstance(ei.value, ValueError)
    assert ei.value.args[0].code() == KafkaError._INVALID_ARG


@pytest.mark.parametrize("role,prop,value", [
    ("producer", "acks", "2"),
    ("producer", "linger.ms", -1),
    ("producer", "linger.ms", "soon"),
    ("producer", "batch.size", 0),
    ("producer", "compression.type", "brotli"),
    ("producer", "enable.idempotence", "maybe"),
    ("producer", "retries", True),
    ("producer", "on_delivery", "not callable"),
    ("consumer", "auto.offset.reset", "sometimes"),
    ("consumer", "isolation.level", "read_dirty"),
    ("consumer", "partition.assignment.strategy", "sticky-ish"),
    ("consumer", "session.timeout.ms", 0),
    ("consumer", "fetch.min.bytes", 2.5),
    ("admin", "bootstrap.servers", "host:notaport"),
])
def test_invalid_values(role, prop, value):
    conf = {**B, prop: value}
    with pytest.raises(ConfigException, match=prop.replace(".", r"\.")):
        resolve(conf, role)


def test_aliases_from_librdkafka():
    c = resolve({"metadata.broker.list": "h:1", "queue.buffering.max.ms": 3, "compression.codec": "lz4",
                 "message.timeout.ms": 1000, "request.required.acks": "all"}, "producer")
    assert c["bootstrap.servers"] == "h:1" and c["linger.ms"] == 3 and c["compression.type"] == "lz4"
    assert c["delivery.timeout.ms"] == 1000 and c["acks"] == -1
    c = resolve({**B, "fetch.wait.max.ms": 50, "auto.offset.reset": "smallest"}, "consumer")
    assert c["fetch.max.wait.ms"] == 50 and c["auto.offset.reset"] == "earliest"


def test_same_property_twice_under_two_names():
    with pytest.raises(ConfigException, match="twice"):
        resolve({**B, "linger.ms": 1, "queue.buffering.max.ms": 2}, "producer")


def test_idempotence_on_by_default_unless_settings_rule_it_out():
    assert resolve(B, "producer")["enable.idempotence"] is True
    assert resolve({**B, "acks": 1}, "producer")["enable.idempotence"] is False
    assert resolve({**B, "max.in.flight.requests.per.connection": 10}, "producer")["enable.idempotence"] is False


@pytest.mark.parametrize("extra", [{"acks": 1}, {"max.in.flight.requests.per.connection": 6}, {"retries": 0}])
def test_explicit_idempotence_conflicts_are_errors(extra):
    with pytest.raises(ConfigException, match="enable.idempotence"):
        resolve({**B, "enable.idempotence": True, **extra}, "producer")


def test_consumer_cross_checks():
    with pytest.raises(ConfigException, match="heartbeat.interval.ms"):
        resolve({**B, "session.timeout.ms": 3000, "heartbeat.interval.ms": 3000}, "consumer")
    with pytest.raises(ConfigException, match="cooperative-sticky"):
        resolve({**B, "partition.assignment.strategy": "range,cooperative-sticky"}, "consumer")
    c = resolve({**B, "partition.assignment.strategy": "cooperative-sticky"}, "consumer")
    assert c["partition.assignment.strategy"] == ("cooperative-sticky",)


def test_other_roles_property_is_ignored_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="rivulet.client"):
        c = resolve({**B, "group.id": "g"}, "producer")
    assert "group.id" not in c
    assert "group.id" in caplog.text


def test_missing_bootstrap():
    with pytest.raises(ConfigException, match="bootstrap.servers"):
        resolve({}, "producer")


def test_transactional_id_implies_idempotence_and_rejects_contradictions():
    conf = resolve({**B, "transactional.id": "t"}, "producer")
    assert conf["enable.idempotence"] is True
    with pytest.raises(ConfigException, match="transactional.id"):
        resolve({**B, "transactional.id": "t", "enable.idempotence": False}, "producer")
    with pytest.raises(ConfigException, match="transactional.id"):
        resolve({**B, "transactional.id": ""}, "producer")


def test_clients_validate_before_connecting():
    from rivulet import Consumer, Producer
    with pytest.raises(ConfigException, match="No such configuration property"):
        Producer({**B, "no.such.thing": 1})
    with pytest.raises(ConfigException, match="auto.offset.reset"):
        Consumer({**B, "group.id": "g", "auto.offset.reset": "nope"})


def test_error_values_look_like_confluent_kafka():
    e = KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)
    assert e.code() == 3 and e.name() == "UNKNOWN_TOPIC_OR_PART" and e.retriable()  # librdkafka's name
    assert KafkaError.UNKNOWN_TOPIC_OR_PARTITION == KafkaError.UNKNOWN_TOPIC_OR_PART == 3
    assert KafkaError._PARTITION_EOF == -191 and KafkaError(KafkaError._PARTITION_EOF).name() == "_PARTITION_EOF"
    assert KafkaError(KafkaError._MSG_TIMED_OUT, "x").str() == "x"
    # Without a reason, librdkafka's form of description.
    assert KafkaError(3).str() == "Broker: Unknown topic or partition"
    assert str(KafkaError(3)) == 'KafkaError{code=UNKNOWN_TOPIC_OR_PART,val=3,str="Broker: Unknown topic or partition"}'
    assert KafkaError(KafkaError._MSG_TIMED_OUT).str() == "Local: Msg timed out"
    assert KafkaError(0).str() == "Success"
    assert e == 3 and e == KafkaError(3)
