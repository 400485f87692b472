"""KIP-714 on the broker (server/client_metrics.py): subscription configs as Kafka validates
them, matching, subscription ids, and the push-interval throttling of Get and Push."""

from __future__ import annotations

import gzip
import uuid

import pytest

from rivulet.common.config import ConfigSource
from rivulet.common.time import MockClock
from rivulet.protocol import compression
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.protocol.messages.get_telemetry_subscriptions_request import GetTelemetrySubscriptionsRequest
from rivulet.protocol.messages.push_telemetry_request import PushTelemetryRequest
from rivulet.server.client_metrics import (
    ClientContext,
    ClientMetricsManager,
    LastPayloads,
    describe_subscription,
    java_uuid_hash,
    matches,
    parse_subscription,
    subscription_id,
)

pytestmark = pytest.mark.fast

JAVA = ClientContext("app-1", "apache-kafka-java", "4.3.1", "10.0.0.7", 51234)
RDKAFKA = ClientContext("rd-1", "confluent-kafka-python", "2.16.0-rdkafka-2.16.0", "10.0.0.8", 40000)


class MemoryStore:
    def __init__(self) -> None:
        self.saved: dict[str, dict[str, str]] = {}

    def load_client_metrics(self) -> dict[str, dict[str, str]]:
        return {n: dict(c) for n, c in self.saved.items()}

    def store_client_metrics(self, name: str, configs) -> None:
        if configs:
            self.saved[name] = dict(configs)
        else:
            self.saved.pop(name, None)


def code_of(fn, *args) -> ErrorCode:
    with pytest.raises(ApiError) as e:
        fn(*args)
    return e.value.code


# ------------------------------------------------------------------ configs
def test_configs_validated_as_kafka_does():
    sub = parse_subscription("s", {"metrics": "org.apache.kafka.producer., org.apache.kafka.consumer.",
                                   "interval.ms": "1000", "match": "client_software_name=apache-kafka-java"})
    assert sub.metrics == ("org.apache.kafka.producer.", "org.apache.kafka.consumer.")
    assert sub.interval_ms == 1000
    assert parse_subscription("s", {"metrics": "*"}).interval_ms == 300_000
    assert code_of(parse_subscription, "", {"metrics": "*"}) == ErrorCode.INVALID_REQUEST
    assert code_of(parse_subscription, "s", {"colour": "blue"}) == ErrorCode.INVALID_REQUEST
    assert code_of(parse_subscription, "s", {"interval.ms": "often"}) == ErrorCode.INVALID_CONFIG
    assert code_of(parse_subscription, "s", {"interval.ms": "99"}) == ErrorCode.INVALID_REQUEST
    assert code_of(parse_subscription, "s", {"interval.ms": "3600001"}) == ErrorCode.INVALID_REQUEST
    parse_subscription("s", {"interval.ms": "100"})
    parse_subscription("s", {"interval.ms": "3600000"})
    for bad in ("client_colour=red", "client_id", "client_id=a=b", "client_id=(unclosed", "client_id=(?<=a)b"):
        assert code_of(parse_subscription, "s", {"match": bad}) == ErrorCode.INVALID_CONFIG, bad


def test_described_with_defaults_and_sources():
    entries = {e.name: e for e in describe_subscription({"metrics": "a., b.", "interval.ms": "1000"})}
    assert list(entries) == ["interval.ms", "match", "metrics"]
    assert entries["metrics"].value == "a.,b."
    assert entries["metrics"].source == ConfigSource.CLIENT_METRICS_CONFIG == 7
    assert entries["metrics"].synonyms == (("metrics", "a.,b.", ConfigSource.CLIENT_METRICS_CONFIG),)
    assert entries["match"].value == "" and entries["match"].source == ConfigSource.DEFAULT_CONFIG
    assert {e.name: e.value for e in describe_subscription({})} == {"interval.ms": "300000", "match": "",
                                                                    "metrics": ""}


# ------------------------------------------------------------------ matching and ids
def test_match_needs_every_pattern_to_match_the_whole_attribute():
    instance = uuid.uuid4()
    sub = parse_subscription("s", {"match": "client_software_name=apache-kafka-.*,client_source_port=5\\d+"})
    assert matches(sub, JAVA.attributes(instance))
    assert not matches(sub, RDKAFKA.attributes(instance))
    assert not matches(parse_subscription("s", {"match": "client_software_name=apache"}), JAVA.attributes(instance))
    assert matches(parse_subscription("s", {"match": f"client_instance_id={instance}"}), JAVA.attributes(instance))
    assert matches(parse_subscription("s", {"metrics": "*"}), RDKAFKA.attributes(instance))  # no pattern: all
    unknown = ClientContext(None, "unknown", "unknown", "10.0.0.1", 1)
    assert not matches(parse_subscription("s", {"match": "client_id=.*"}), unknown.attributes(instance))


def test_subscription_id_follows_metrics_interval_and_instance():
    a, b = uuid.uuid4(), uuid.uuid4()
    base = subscription_id(frozenset({"x.", "y."}), 1000, a)
    assert base == subscription_id(frozenset({"y.", "x."}), 1000, a)
    assert base != subscription_id(frozenset({"x."}), 1000, a)
    assert base != subscription_id(frozenset({"x.", "y."}), 2000, a)
    assert base != subscription_id(frozenset({"x.", "y."}), 1000, b)
    assert -2**31 <= base < 2**31
    # Kafka's Uuid.hashCode: the halves XORed, then the 32-bit halves of that.
    assert java_uuid_hash(uuid.UUID(int=(1 << 64) | 3)) == 2
    assert java_uuid_hash(uuid.UUID(int=0xFFFFFFFF00000000 << 64)) == -1


# ------------------------------------------------------------------ the manager
def manager(**subs: dict[str, str]) -> tuple[ClientMetricsManager, MockClock, MemoryStore]:
    clock, store = MockClock(), MemoryStore()
    m = ClientMetricsManager(store, clock, max_bytes=1024)
    for name, configs in subs.items():
        m.alter(name, configs, validate_only=False)
    return m, clock, store


def get(m: ClientMetricsManager, instance: uuid.UUID | None = None, ctx: ClientContext = JAVA):
    return m.get_subscriptions(GetTelemetrySubscriptionsRequest(client_instance_id=instance or uuid.UUID(int=0)),
                               ctx)


def push(m: ClientMetricsManager, r, data: bytes = b"otlp", codec: int = 0, terminating: bool = False,
         ctx: ClientContext = JAVA):
    return m.push(PushTelemetryRequest(client_instance_id=r.client_instance_id, subscription_id=r.subscription_id,
                                       terminating=terminating, compression_type=codec, metrics=data), ctx).error_code


def test_no_subscription_asks_for_nothing_at_the_default_interval():
    m, _, _ = manager()
    r = get(m)
    assert r.error_code == 0 and r.client_instance_id.int != 0
    assert r.requested_metrics == [] and r.push_interval_ms == 300_000
    assert r.accepted_compression_types == [4, 3, 1, 2] and r.delta_temporality and r.telemetry_max_bytes == 1024


def test_matching_subscriptions_union_metrics_and_shortest_interval():
    m, _, _ = manager(java={"metrics": "org.apache.kafka.producer.", "interval.ms": "2000",
                            "match": "client_software_name=apache-kafka-java"},
                      all={"metrics": "org.apache.kafka.consumer.", "interval.ms": "5000"},
                      slow={"metrics": "x.", "interval.ms": "3600000", "match": "client_id=rd-.*"})
    r = get(m)
    assert sorted(r.requested_metrics) == ["org.apache.kafka.consumer.", "org.apache.kafka.producer."]
    assert r.push_interval_ms == 2000
    rd = get(m, ctx=RDKAFKA)
    assert sorted(rd.requested_metrics) == ["org.apache.kafka.consumer.", "x."]
    assert rd.push_interval_ms == 5000
    m.alter("star", {"metrics": "*"}, validate_only=False)
    assert get(m, ctx=RDKAFKA).requested_metrics == ["*"]


def test_push_interval_throttles_get_and_push():
    m, clock, _ = manager(s={"metrics": "*", "interval.ms": "1000"})
    r = get(m)
    assert get(m, r.client_instance_id).error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert push(m, r) == 0  # straight after a Get: accepted whatever the time
    clock.sleep(500)
    assert push(m, r) == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    clock.sleep(500)
    assert push(m, r) == 0
    clock.sleep(999)
    assert get(m, r.client_instance_id).error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    clock.sleep(1)
    assert get(m, r.client_instance_id).error_code == 0
    assert isinstance(m.receiver, LastPayloads) and m.receiver.pushes == 2
    assert m.receiver.last[r.client_instance_id].data == b"otlp"


def test_changed_subscription_answers_unknown_subscription_id_then_get_is_allowed():
    m, clock, _ = manager(s={"metrics": "a.", "interval.ms": "1000"})
    r = get(m)
    assert push(m, r) == 0
    m.alter("s", {"metrics": "a.,b.", "interval.ms": "1000"}, validate_only=False)
    clock.sleep(1000)
    assert push(m, r) == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    r2 = get(m, r.client_instance_id)  # not throttled: the client must learn the new subscription
    assert r2.error_code == 0 and r2.subscription_id != r.subscription_id
    assert sorted(r2.requested_metrics) == ["a.", "b."]


def test_push_errors_as_kafka_answers_them():
    m, clock, _ = manager(s={"metrics": "*", "interval.ms": "100"})
    r = get(m)
    assert m.push(PushTelemetryRequest(client_instance_id=uuid.UUID(int=0), subscription_id=r.subscription_id,
                                       metrics=b"x"), JAVA).error_code == ErrorCode.INVALID_REQUEST
    assert push(m, r, codec=7) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    clock.sleep(100)
    assert get(m, r.client_instance_id).error_code == 0  # allowed after UNSUPPORTED_COMPRESSION_TYPE
    assert push(m, r, data=b"x" * 1025) == ErrorCode.TELEMETRY_TOO_LARGE
    clock.sleep(100)
    assert push(m, r, data=b"not gzip", codec=compression.GZIP) == ErrorCode.INVALID_RECORD
    clock.sleep(100)
    assert push(m, r, data=gzip.compress(b"z" * 5000), codec=compression.GZIP) == ErrorCode.TELEMETRY_TOO_LARGE
    clock.sleep(100)
    for codec in (compression.GZIP, compression.SNAPPY, compression.LZ4, compression.ZSTD):
        assert push(m, r, data=compression.compress(codec, b"metrics!"), codec=codec) == 0
        assert m.receiver.last[r.client_instance_id].data == b"metrics!"
        clock.sleep(100)


def test_terminating_push_is_accepted_early_and_is_the_last():
    m, clock, _ = manager(s={"metrics": "*", "interval.ms": "1000"})
    r = get(m)
    assert push(m, r) == 0
    assert push(m, r, terminating=True) == 0  # before the interval: accepted
    clock.sleep(1000)
    assert push(m, r) == ErrorCode.INVALID_REQUEST


def test_instances_expire_and_are_forgotten_with_their_connection():
    m, clock, _ = manager(s={"metrics": "*", "interval.ms": "1000"})
    r = get(m)
    assert r.client_instance_id in m.instances
    clock.sleep(60_000)
    get(m)  # any request sweeps the expired
    assert r.client_instance_id not in m.instances
    conn = object()
    ctx = ClientContext("c", "n", "v", "127.0.0.1", 1, conn)
    r = get(m, ctx=ctx)
    m.connection_closed(conn)
    assert r.client_instance_id not in m.instances
    # A push from a forgotten instance starts it again, with the same subscription.
    assert push(m, r, ctx=ctx) == 0
    payload = m.receiver.last[r.client_instance_id]
    assert payload.context.client_id == "c" and payload.context.connection is None  # receivers keep no connection


def test_subscriptions_are_stored_and_reloaded():
    m, clock, store = manager(s={"metrics": "a.", "interval.ms": "1000"})
    m.alter("v", {"metrics": "b."}, validate_only=True)
    assert store.saved == {"s": {"metrics": "a.", "interval.ms": "1000"}}
    again = ClientMetricsManager(store, clock, max_bytes=1024)
    assert again.names() == ["s"] and again.subscriptions["s"].interval_ms == 1000
    again.alter("s", {}, validate_only=False)
    assert store.saved == {} and again.names() == []
    assert get(again).requested_metrics == []
