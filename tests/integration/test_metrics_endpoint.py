"""The Prometheus endpoint (metrics.listener) of a real broker process, scraped while real
clients (confluent-kafka) produce and consume: the counters must match what the clients sent
and what their own statistics say.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
import uuid
from collections import defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from rivulet.testing import free_port

pytestmark = pytest.mark.integration

PARTITIONS = 3
VALUE_SIZE = 4000


def scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name -> [(labels, value)]."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        text = r.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name].append((s.labels, s.value))
    return out


def total(samples: dict, name: str, **labels: str) -> float:
    return sum(v for lbl, v in samples.get(name, []) if all(lbl.get(k) == x for k, x in labels.items()))


class Stats:
    """librdkafka's last statistics (stats_cb)."""

    def __init__(self) -> None:
        self.last: dict = {}

    def __call__(self, raw: str) -> None:
        self.last = json.loads(raw)

    def requests(self, api: str) -> int:
        return sum(b.get("req", {}).get(api, 0) for b in self.last.get("brokers", {}).values())


def produce(producer: Producer, topic: str, start: int, n: int) -> int:
    """Sends n records; returns their key and value bytes."""
    sent = 0
    for i in range(start, start + n):
        key, value = f"key-{i}".encode(), bytes([i % 251]) * VALUE_SIZE
        producer.produce(topic, value, key, partition=i % PARTITIONS)
        sent += len(key) + len(value)
        producer.poll(0)
    assert producer.flush(30) == 0
    return sent


def bytes_in_bounds(sent: int, records: int) -> tuple[int, int]:
    """What BytesIn may count for ``records`` of ``sent`` key and value bytes: the batches as
    written, so each record's framing (9 to 16 bytes at these sizes) and each batch's 61-byte
    header come on top. Batches number from one a partition to one a record: how many the
    producer sends is its timing (a loaded machine once gave 345 for 600 records)."""
    return sent + 9 * records + 61 * PARTITIONS, sent + (16 + 61) * records


def settle_stats(client: Producer | Consumer, stats: Stats, ready) -> None:
    """Poll until a statistics report shows ``ready`` and its request counts equal the report
    before it (reports come every 100 ms): a report can show every record transmitted while
    the last request's count is not in it yet (once 5 Produce where the broker had answered 6)."""
    previous = None
    for _ in range(200):
        client.poll(0.05)
        if not stats.last:
            continue
        counts = {k: b.get("req") for k, b in stats.last.get("brokers", {}).items()}
        if stats.last is not previous and ready(stats) and previous is not None and counts == \
                {k: b.get("req") for k, b in previous.get("brokers", {}).items()}:
            return
        previous = stats.last
    raise AssertionError(f"librdkafka's statistics never settled: "
                         f"{ {k: b.get('req') for k, b in stats.last.get('brokers', {}).items()} }")


@pytest.mark.parametrize("group_protocol", ["classic", "consumer"])
def test_counters_match_what_clients_sent(broker_factory, group_protocol):
    mport = free_port()
    broker = broker_factory({"metrics.listener": f"http://127.0.0.1:{mport}"})
    topic = f"metrics-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)

    before = scrape(mport)
    assert total(before, "kafka_network_requestmetrics_requests_total", request="Produce") == 0
    assert total(before, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert total(before, "process_resident_memory_bytes") > 0

    stats = Stats()
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20, "compression.type": "none",
                         "statistics.interval.ms": 100, "stats_cb": stats, "enable.idempotence": False})
    half = 600
    sent = produce(producer, topic, 0, half)
    # Mid-run: what has been acknowledged so far is counted, exactly.
    mid = scrape(mport)
    assert total(mid, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == half
    low, high = bytes_in_bounds(sent, half)
    assert low <= total(mid, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic) <= high

    sent += produce(producer, topic, half, half)
    settle_stats(producer, stats, lambda s: s.last.get("txmsgs") == 2 * half and s.requests("Produce") > 0)
    produce_requests = stats.requests("Produce")

    consumed_target = 700
    group = f"g-{uuid.uuid4().hex[:6]}"
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest",
                         "group.protocol": group_protocol})
    consumer.subscribe([topic])
    consumed = 0
    read_from: set[int] = set()
    deadline = time.monotonic() + 120
    # At least the target, and from every partition, so that each has a committed offset (the
    # consumer may well start with only some of them).
    while (consumed < consumed_target or len(read_from) < PARTITIONS) and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is None or m.error():
            continue
        consumed += 1
        read_from.add(m.partition())
    assert consumed >= consumed_target and len(read_from) == PARTITIONS
    consumer.commit(asynchronous=False)
    committed = {tp.partition: tp.offset for tp in consumer.committed(
        [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)}

    after = scrape(mport)
    n = 2 * half
    assert total(after, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == n
    bytes_in = total(after, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic)
    low, high = bytes_in_bounds(sent, n)
    assert low <= bytes_in <= high, (sent, bytes_in)
    # The consumer fetched at least what it consumed (it prefetches), never more than there is.
    assert consumed <= total(after, "kafka_server_brokertopicmetrics_messagesout_total", topic=topic) <= n
    assert total(after, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) <= bytes_in

    # Request counts: the broker answered exactly what librdkafka says it sent.
    assert total(after, "kafka_network_requestmetrics_requests_total", request="Produce") == produce_requests
    assert total(after, "kafka_network_requestmetrics_totaltime_seconds_count", request="Produce") == produce_requests
    assert total(after, "kafka_network_requestmetrics_errors_total", request="Produce", error="NONE") >= produce_requests
    assert total(after, "kafka_network_requestmetrics_requests_total", request="OffsetCommit") == 1
    assert total(after, "kafka_server_brokertopicmetrics_totalproducerequests_total", topic=topic) >= produce_requests

    # Lag as the broker knows it: the high watermark minus the committed offset, per partition.
    assert sum(committed.values()) == consumed
    for p in range(PARTITIONS):
        end = sum(1 for i in range(n) if i % PARTITIONS == p)
        assert total(after, "kafka_consumergroup_current_offset", consumergroup=group, topic=topic,
                     partition=str(p)) == committed[p]
        assert total(after, "kafka_consumergroup_lag", consumergroup=group, topic=topic,
                     partition=str(p)) == end - committed[p]
        assert total(after, "kafka_log_log_logendoffset", topic=topic, partition=str(p)) == end
        assert total(after, "kafka_log_log_numlogsegments", topic=topic, partition=str(p)) >= 1
    assert total(after, "kafka_consumergroup_lag", consumergroup=group) == n - consumed
    assert total(after, "kafka_server_socket_server_metrics_connection_count") >= 2
    assert "kafka_server_delayedoperationpurgatory_purgatorysize" in after
    assert "rivulet_event_loop_lag_seconds_count" in after
    consumer.close()


DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"
_PROMQL_WORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
                 "group_right"}


def promql_metric_names(expr: str) -> set[str]:
    """The metric names a PromQL query (or a Grafana label_values() query) reads."""
    lv = re.match(r"\s*label_values\(\s*([a-zA-Z_:][\w:]*)", expr)
    if lv:
        return {lv.group(1)}
    s = re.sub(r"\{[^}]*\}", " ", expr)  # label matchers
    s = re.sub(r"\[[^\]]*\]", " ", s)  # range selectors
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    names = set()
    for m in re.finditer(r"(?<![\w.$])[a-zA-Z_:][\w:]*", s):
        if s[m.end():].lstrip().startswith("(") or m.group() in _PROMQL_WORDS:
            continue  # a function or an operator
        names.add(m.group())
    return names


def test_promql_metric_names():
    assert promql_metric_names('histogram_quantile(0.99, sum by (request, le) (rate(a_bucket{x="y"}[5m])))') == \
        {"a_bucket"}
    assert promql_metric_names("sum(rate(a_sum[$__rate_interval])) / sum(rate(a_count[1m]))") == {"a_sum", "a_count"}
    assert promql_metric_names('label_values(kafka_log_log_size{instance=~"$instance"}, topic)') == \
        {"kafka_log_log_size"}


def exported_names(port: int) -> set[str]:
    """Every sample name the broker's endpoint can show, from one scrape."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        text = r.read().decode()
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(s.name for s in family.samples)
        if family.type == "counter":
            names.add(family.name + "_total")
        elif family.type == "histogram":
            names.update(family.name + suffix for suffix in ("_bucket", "_sum", "_count"))
    return names


def test_grafana_dashboard_reads_only_exported_metrics(broker_factory):
    mport = free_port()
    broker = broker_factory({"metrics.listener": f"http://127.0.0.1:{mport}"})
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    queries += [v["query"]["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    assert len(queries) > 30
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert all(t["datasource"]["uid"] == "${datasource}" for p in dashboard["panels"] for t in p.get("targets", []))
    # Some traffic first, so that labelled series exist as well as their families.
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce("dash", b"v", b"k")
    assert producer.flush(30) == 0
    exported = exported_names(mport)
    missing = {q: promql_metric_names(q) - exported for q in queries if promql_metric_names(q) - exported}
    assert not missing
    assert all(promql_metric_names(q) for q in queries)


def test_client_telemetry_is_exported_with_the_clients_labels(broker_factory):
    """KIP-714: librdkafka pushes the metrics its subscription asks for; they appear on the
    endpoint under Prometheus names, labelled with the client's id and software."""
    import asyncio

    from rivulet.client.admin.client import AsyncAdminClient
    from rivulet.server.config import PROMETHEUS_TELEMETRY

    mport = free_port()
    broker = broker_factory({"metrics.listener": f"http://127.0.0.1:{mport}", "metric.reporters": PROMETHEUS_TELEMETRY})

    async def subscribe() -> None:
        async with AsyncAdminClient({"bootstrap.servers": broker.bootstrap}) as admin:
            await admin.incremental_alter_configs(16, "producers", [("metrics", 0, "org.apache.kafka.producer."),
                                                                    ("interval.ms", 0, "1000")])
    asyncio.run(subscribe())
    producer = Producer({"bootstrap.servers": broker.bootstrap, "client.id": "telemetry-app", "linger.ms": 5})
    deadline = time.monotonic() + 60
    pushed: list = []
    while not pushed and time.monotonic() < deadline:
        producer.produce("telemetry", b"v")
        producer.flush(10)
        samples = scrape(mport)
        pushed = [(name, lbl) for name, values in samples.items() if name.startswith("org_apache_kafka_producer_")
                  for lbl, _ in values]
        time.sleep(0.2)
    assert pushed, "no client metrics on the endpoint"
    labels = pushed[0][1]
    assert labels["client_id"] == "telemetry-app"
    assert labels["client_software_name"] == "confluent-kafka-python"
    assert len(labels["client_instance_id"]) == 36


def test_connections_and_authentications_per_listener():
    from test_sasl import ck_conf, first_error, sasl_overrides

    from rivulet.testing import BrokerProcess

    mport = free_port()
    broker = BrokerProcess()
    broker.overrides.update({**sasl_overrides(broker.port), "metrics.listener": f"http://127.0.0.1:{mport}"})
    with broker:
        first_error(ck_conf(broker, "PLAIN", "alice", "not-her-password"))
        producer = Producer(ck_conf(broker, "PLAIN", "admin", "admin-secret"))
        producer.produce("sasl-metrics", b"v")
        assert producer.flush(30) == 0
        samples = scrape(mport)
        assert total(samples, "kafka_server_socket_server_metrics_failed_authentication_total",
                     listener="SASL_PLAINTEXT") >= 1
        assert total(samples, "kafka_server_socket_server_metrics_successful_authentication_total",
                     listener="SASL_PLAINTEXT") >= 1
        assert total(samples, "kafka_server_socket_server_metrics_connection_count", listener="SASL_PLAINTEXT") >= 1
        assert total(samples, "kafka_network_requestmetrics_requests_total", request="SaslAuthenticate") >= 2
