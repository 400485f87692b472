"""The metrics endpoint's pure parts: request names, error codes and throttle times read from
responses, the request histograms, the messages-out count from batch headers, and
metrics.listener's form."""

from __future__ import annotations

import pytest

from rivulet.protocol.messages import fetch_response as fr
from rivulet.protocol.messages import produce_response as pr
from rivulet.protocol.messages.fetch_request import FetchRequest, ReplicaState
from rivulet.protocol.messages.metadata_request import MetadataRequest
from rivulet.protocol.records import Record, count_records, encode_batch
from rivulet.server.config import BrokerConfig, ConfigError, parse_metrics_listener
from rivulet.server.metrics.collectors import RequestCollector, histogram_buckets
from rivulet.server.metrics.requests import BUCKETS, PHASES, RequestMetrics, count_errors, request_name, throttle_ms

pytestmark = pytest.mark.fast


def test_request_names_split_fetch_as_kafka_does():
    assert request_name(3, MetadataRequest()) == "Metadata"
    assert request_name(1, FetchRequest(replica_id=-1)) == "FetchConsumer"
    assert request_name(1, FetchRequest(replica_id=2)) == "FetchFollower"
    # v15+: the replica id travels in ReplicaState.
    assert request_name(1, FetchRequest(replica_id=-1, replica_state=ReplicaState(replica_id=3))) == "FetchFollower"
    assert request_name(44, None) == "IncrementalAlterConfigs"


def test_error_codes_are_read_from_every_level():
    resp = fr.FetchResponse(error_code=0, throttle_time_ms=7, responses=[
        fr.FetchableTopicResponse(topic="a", partitions=[fr.PartitionData(partition_index=0, error_code=0),
                                                          fr.PartitionData(partition_index=1, error_code=6)]),
        fr.FetchableTopicResponse(topic="b", partitions=[fr.PartitionData(partition_index=0, error_code=3)])])
    counted: dict = {}
    count_errors(resp, "FetchConsumer", counted)
    assert counted == {("FetchConsumer", 0): 2, ("FetchConsumer", 3): 1, ("FetchConsumer", 6): 1}
    assert throttle_ms(resp) == 7
    produce = pr.ProduceResponse(responses=[pr.TopicProduceResponse(
        name="a", partition_responses=[pr.PartitionProduceResponse(index=0, error_code=0)])])
    counted = {}
    count_errors(produce, "Produce", counted)
    assert counted == {("Produce", 0): 1}  # no top-level error code in Produce
    assert throttle_ms(produce) == 0


def test_a_request_is_counted_and_timed_per_phase():
    m = RequestMetrics()
    resp = pr.ProduceResponse(responses=[pr.TopicProduceResponse(
        name="a", partition_responses=[pr.PartitionProduceResponse(index=0, error_code=19)])], throttle_time_ms=20)
    # read at 0, dispatched at 0.1 ms, handled at 0.3 ms, answered at 2.3 ms, written from 3.3 to 3.4 ms.
    m.record("Produce", 9, 0.0, 0.0001, 0.0003, 0.0023, 0.0033, 0.0034, resp)
    m.record("Produce", 9, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, None)  # acks=0: no answer
    assert m.requests == {("Produce", 9): 2}
    assert m.errors == {("Produce", 19): 1}
    phases = dict(zip(PHASES, m.timings["Produce"].phases))
    assert phases["remotetime"].sum == pytest.approx(0.002)
    assert phases["throttletime"].sum == pytest.approx(0.02)
    assert phases["totaltime"].sum == pytest.approx(0.0034)
    buckets = histogram_buckets(phases["remotetime"])
    assert buckets[-1] == ("+Inf", 2) and len(buckets) == len(BUCKETS) + 1
    assert dict(buckets)["0.0025"] == 2 and dict(buckets)["0.001"] == 1
    families = {f.name: f for f in RequestCollector(m).collect()}
    assert [s.value for s in families["kafka_network_requestmetrics_errors"].samples] == [1]
    assert families["kafka_network_requestmetrics_errors"].samples[0].labels == {
        "request": "Produce", "error": "NOT_ENOUGH_REPLICAS"}
    assert families["kafka_network_requestmetrics_requests"].samples[0].labels == {"request": "Produce",
                                                                                    "version": "9"}


def test_messages_out_are_counted_from_batch_headers():
    one = encode_batch([Record(offset=i, timestamp=1, key=None, value=b"x", headers=[]) for i in range(5)])
    two = encode_batch([Record(offset=5, timestamp=1, key=b"k", value=b"y" * 100, headers=[])], base_offset=5)
    assert count_records(one + two) == 6
    assert count_records(one + two[:30]) == 5  # a batch cut at max_bytes is not counted
    assert count_records(b"") == 0


def test_metrics_listener_form():
    assert parse_metrics_listener("http://127.0.0.1:9404") == ("127.0.0.1", 9404)
    assert parse_metrics_listener("http://:9404/") == ("", 9404)
    for bad in ("127.0.0.1:9404", "https://h:1", "http://h", "http://h:1/metrics", "http://h:x"):
        with pytest.raises(ValueError):
            parse_metrics_listener(bad)
    with pytest.raises(ConfigError, match="metrics.listener"):
        BrokerConfig({"metrics.listener": "tcp://h:1"})
    assert BrokerConfig({})["metrics.listener"] == ""


def _push(exporter, instance, metrics_data, interval_ms=1000, client_id="app"):
    from rivulet.server.client_metrics import ClientContext, TelemetryPayload
    ctx = ClientContext(client_id, "confluent-kafka-python", "2.16.1", "127.0.0.1", 5555)
    exporter.export_metrics(TelemetryPayload(instance, ctx, 0, metrics_data.SerializeToString(), interval_ms, False))


def test_client_telemetry_becomes_prometheus_series():
    import uuid

    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.metrics.v1 import metrics_pb2 as m

    from rivulet.common.time import MockClock
    from rivulet.server.metrics.telemetry import ClientTelemetryExporter, prometheus_name

    def point(value, **attrs):
        p = m.NumberDataPoint(attributes=[KeyValue(key=k.replace("_", "."), value=AnyValue(string_value=v))
                                          for k, v in attrs.items()])
        if isinstance(value, int):
            p.as_int = value
        else:
            p.as_double = value
        return p

    data = m.MetricsData(resource_metrics=[m.ResourceMetrics(scope_metrics=[m.ScopeMetrics(metrics=[
        m.Metric(name="org.apache.kafka.producer.record.queue.time.avg",
                 gauge=m.Gauge(data_points=[point(1.5)])),
        m.Metric(name="org.apache.kafka.producer.node.request.total", sum=m.Sum(
            is_monotonic=True, aggregation_temporality=m.AGGREGATION_TEMPORALITY_DELTA,
            data_points=[point(3, node_id="1")])),
    ])])])
    clock = MockClock()
    exporter = ClientTelemetryExporter(clock)
    instance = uuid.uuid4()
    _push(exporter, instance, data)
    _push(exporter, instance, data)  # a delta sum adds up
    families = {f.name: f for f in exporter.collect()}
    gauge = families["org_apache_kafka_producer_record_queue_time_avg"]
    assert gauge.type == "gauge" and gauge.samples[0].value == 1.5
    labels = gauge.samples[0].labels
    assert labels["client_instance_id"] == str(instance) and labels["client_id"] == "app"
    assert labels["client_software_name"] == "confluent-kafka-python" and labels["client_source_port"] == "5555"
    counter = families["org_apache_kafka_producer_node_request"]
    assert counter.type == "counter"
    assert [(s.name, s.labels["node_id"], s.value) for s in counter.samples] == [
        ("org_apache_kafka_producer_node_request_total", "1", 6.0)]
    # Not pushed for max(60 s, three intervals): forgotten.
    clock.sleep(60_001)
    assert list(exporter.collect()) == []
    assert prometheus_name("a.b-c") == "a_b_c" and prometheus_name("1x") == "_1x"
    from rivulet.server.client_metrics import ClientContext, TelemetryPayload
    exporter.export_metrics(TelemetryPayload(instance, ClientContext(None, None, None, None, None), 0, b"\xff\xff",
                                             1000, False))
    assert exporter.undecodable == 1


def test_a_broker_serves_its_metrics_off_the_loop_and_closes_the_endpoint(tmp_path):
    """In-process: metrics.listener on an ephemeral port; a scrape from another thread is
    collected on the broker's loop; shutdown closes the port."""
    import asyncio
    import urllib.error
    import urllib.request

    from rivulet.server.broker import Broker
    from rivulet.server.config import PROMETHEUS_TELEMETRY

    def fetch(port: int) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
            return r.read().decode()

    async def main() -> None:
        b = Broker(BrokerConfig({"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0",
                                 "metrics.listener": "http://127.0.0.1:0", "log.cleaner.enable": "false",
                                 "offsets.topic.num.partitions": "1", "metric.reporters": PROMETHEUS_TELEMETRY}))
        await b.start()
        try:
            assert b.metrics_port
            text = await asyncio.get_running_loop().run_in_executor(None, fetch, b.metrics_port)
            for name in ("kafka_server_replicamanager_partitioncount", "process_cpu_seconds_total",
                         "rivulet_metrics_collect_seconds", "rivulet_event_loop_lag_seconds_bucket"):
                assert name in text
        finally:
            await b.shutdown()
        with pytest.raises(urllib.error.URLError):
            await asyncio.get_running_loop().run_in_executor(None, fetch, b.metrics_port)

    asyncio.run(main())
    with pytest.raises(ConfigError, match="needs metrics.listener"):
        BrokerConfig({"metric.reporters": PROMETHEUS_TELEMETRY})


def test_gc_pauses_are_timed_per_generation() -> None:
    import gc

    from rivulet.server.metrics.exporter import GcPauses

    pauses = GcPauses()
    pauses.install()
    try:
        gc.collect()
        gc.collect(0)
    finally:
        pauses.uninstall()
    assert pauses._callback not in gc.callbacks
    counts = [sum(h.counts) for h in pauses.histograms]
    assert counts[2] >= 1 and counts[0] >= 1
    assert pauses.histograms[2].sum > 0
    family = next(iter(pauses.collect()))
    assert family.name == "rivulet_gc_pause_seconds"
    assert {s.labels["generation"] for s in family.samples} == {"0", "1", "2"}
