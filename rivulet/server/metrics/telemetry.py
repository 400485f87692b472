"""KIP-714 client metrics on the Prometheus endpoint: the OTLP ``MetricsData`` clients push
(decoded with opentelemetry-proto) become series named after the OTLP metric in Prometheus
style (``org.apache.kafka.producer.record.queue.time.avg`` is
``org_apache_kafka_producer_record_queue_time_avg``), labelled with what the broker knows of
the client (client_instance_id, client_id, client_software_name and _version,
client_source_address and _port), the push's resource attributes and each data point's own
(node_id, topic, partition, ...).

Gauges and non-monotonic sums are gauges; monotonic sums counters (delta sums added up).
Histograms and summaries, which Kafka's clients do not send, are left out. A client's series
go when it has not pushed for max(60 s, three push intervals), as the broker forgets its
client instances.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import AGGREGATION_TEMPORALITY_DELTA, MetricsData, NumberDataPoint
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric as OtlpMetric
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from rivulet.common.time import Clock
from rivulet.server.client_metrics import TelemetryPayload

__all__ = ["ClientTelemetryExporter", "prometheus_name"]

log = logging.getLogger(__name__)

MIN_RETENTION_MS = 60_000
_NOT_NAME = re.compile(r"[^a-zA-Z0-9_]")

Labels = tuple[tuple[str, str], ...]


def prometheus_name(name: str) -> str:
    """An OTLP metric or attribute name as a Prometheus name: what is not a letter, a digit
    or ``_`` becomes ``_``, and a leading digit gets a ``_`` before it."""
    out = _NOT_NAME.sub("_", name)
    return "_" + out if not out or out[0].isdigit() else out


def _text(v: AnyValue) -> str:
    kind = v.WhichOneof("value")
    if kind == "string_value":
        return v.string_value
    if kind == "bool_value":
        return "true" if v.bool_value else "false"
    if kind == "int_value":
        return str(v.int_value)
    if kind == "double_value":
        return repr(v.double_value)
    return ""


def _labels(attributes: Iterable[KeyValue]) -> dict[str, str]:
    return {prometheus_name(kv.key): _text(kv.value) for kv in attributes}


def _value(point: NumberDataPoint) -> float:
    return point.as_double if point.WhichOneof("value") == "as_double" else float(point.as_int)


@dataclass
class _Series:
    kind: str  # "gauge" or "counter"
    doc: str
    values: dict[Labels, float] = field(default_factory=dict)


@dataclass
class _Client:
    expires_at_ms: int
    series: dict[str, _Series] = field(default_factory=dict)


class ClientTelemetryExporter(Collector):
    """A ``TelemetryReceiver`` (``metric.reporters``) and the collector that shows what it
    received; both run on the event loop."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.clients: dict[uuid.UUID, _Client] = {}
        self.undecodable = 0

    def export_metrics(self, payload: TelemetryPayload) -> None:
        try:
            data = MetricsData.FromString(payload.data)
        except DecodeError as e:
            self.undecodable += 1
            log.debug("client %s pushed telemetry that is not OTLP metrics: %s", payload.client_instance_id, e)
            return
        now = self.clock.milliseconds()
        client = self.clients.get(payload.client_instance_id)
        if client is None:
            client = self.clients[payload.client_instance_id] = _Client(0)
        client.expires_at_ms = now + max(MIN_RETENTION_MS, 3 * payload.push_interval_ms)
        known = {k: v for k, v in payload.context.attributes(payload.client_instance_id).items() if v is not None}
        for resource_metrics in data.resource_metrics:
            resource = _labels(resource_metrics.resource.attributes)
            for scope in resource_metrics.scope_metrics:
                for metric in scope.metrics:
                    self._add(client, metric, resource, known)

    def _add(self, client: _Client, metric: OtlpMetric, resource: dict[str, str], known: dict[str, str]) -> None:
        kind = metric.WhichOneof("data")
        delta = False
        if kind == "gauge":
            points = metric.gauge.data_points
            typ = "gauge"
        elif kind == "sum":
            total = metric.sum
            points = total.data_points
            typ = "counter" if total.is_monotonic else "gauge"
            delta = total.aggregation_temporality == AGGREGATION_TEMPORALITY_DELTA
        else:
            return
        name = prometheus_name(metric.name)
        if typ == "counter" and name.endswith("_total"):
            name = name[:-len("_total")]
        series = client.series.get(name)
        if series is None:
            series = client.series[name] = _Series(typ, metric.description or metric.name)
        elif series.kind != typ:
            return  # a client that changes a metric's type keeps the first
        for point in points:
            labels = tuple(sorted({**resource, **_labels(point.attributes), **known}.items()))
            value = _value(point)
            if delta:
                value += series.values.get(labels, 0.0)
            series.values[labels] = value

    def collect(self) -> Iterator[Metric]:
        now = self.clock.milliseconds()
        for instance in [i for i, c in self.clients.items() if c.expires_at_ms <= now]:
            del self.clients[instance]
        families: dict[str, Metric] = {}
        for client in self.clients.values():
            for name, series in client.series.items():
                family = families.get(name)
                if family is None:
                    family = families[name] = Metric(name, series.doc, series.kind)
                elif family.type != series.kind:
                    continue
                sample = name + "_total" if series.kind == "counter" else name
                for labels, value in series.values.items():
                    family.add_sample(sample, dict(labels), value)
        yield from families.values()
