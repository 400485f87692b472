"""Prometheus collectors that read the broker's state when scraped.

Names follow Kafka's JMX metrics as a JMX exporter writes them: the MBean's domain, type and
name lower-cased and joined with ``_``, other characters ``_`` too
(``kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec`` is
``kafka_server_brokertopicmetrics_bytesin_total``, socket-server-metrics' connection-count
``kafka_server_socket_server_metrics_connection_count``), rates as counters (``..._total``),
times in seconds. What Kafka has no MBean for is named ``rivulet_...``; consumer lag takes the
names of the common Kafka exporter (``kafka_consumergroup_lag``).

Every ``collect`` runs on the event loop (``exporter.py`` hops there), so the state it reads
does not change under it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from rivulet.coordinator.group_coordinator import GroupCoordinator
from rivulet.delayed.purgatory import DelayedOperationPurgatory
from rivulet.iceberg.translator import IcebergTranslator, PartitionTranslation
from rivulet.replication.partition import PartitionStats
from rivulet.replication.replica_manager import ReplicaManager
from rivulet.server.fetch_session import FetchSessionCache
from rivulet.server.metrics.requests import BUCKETS, PHASES, Histogram, RequestMetrics, error_name
from rivulet.server.socket_server import SocketServer
from rivulet.server.zk_cluster import ZkClusterMember

__all__ = ["BrokerCollector", "GroupLagCollector", "IcebergCollector", "RequestCollector", "histogram_buckets"]

_LE = [*(repr(b) for b in BUCKETS), "+Inf"]


def histogram_buckets(h: Histogram) -> list[tuple[str, float]]:
    """Cumulative (le, count) pairs, as Prometheus wants them."""
    out = []
    total = 0
    for le, n in zip(_LE, list(h.counts)):
        total += n
        out.append((le, total))
    return out


class RequestCollector(Collector):
    """kafka.network:type=RequestMetrics: RequestsPerSec{request,version}, ErrorsPerSec{request,error}
    and the time histograms per request."""

    def __init__(self, metrics: RequestMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        m = self.metrics
        requests = CounterMetricFamily("kafka_network_requestmetrics_requests", "Requests answered, per API and "
                                       "version (Fetch split into FetchConsumer and FetchFollower).",
                                       labels=["request", "version"])
        for (request, version), n in list(m.requests.items()):
            requests.add_metric([request, str(version)], n)
        yield requests
        errors = CounterMetricFamily("kafka_network_requestmetrics_errors", "Error codes in answers, per API and "
                                     "error (NONE included, as Kafka counts them).", labels=["request", "error"])
        for (request, code), n in list(m.errors.items()):
            errors.add_metric([request, error_name(code)], n)
        yield errors
        families = [HistogramMetricFamily(f"kafka_network_requestmetrics_{phase}_seconds",
                                          f"Kafka's {phase} per request, in seconds.", labels=["request"])
                    for phase in PHASES]
        for request, timings in list(m.timings.items()):
            for family, h in zip(families, timings.phases):
                family.add_metric([request], histogram_buckets(h), h.sum)
        yield from families


# BrokerTopicMetrics, in the order of _stat_values: (name, documentation).
_TOPIC_COUNTERS: tuple[tuple[str, str], ...] = (
    ("bytesin", "Bytes appended by producers."),
    ("messagesin", "Records appended by producers."),
    ("bytesout", "Record bytes sent to consumers (followers' are replication)."),
    ("messagesout", "Records sent to consumers, counted from batch headers (Rivulet's; Kafka has no such meter)."),
    ("totalproducerequests", "Produce requests, counted per partition."),
    ("failedproducerequests", "Produce requests that failed, per partition."),
    ("totalfetchrequests", "Fetch requests, counted per partition."),
    ("failedfetchrequests", "Fetch requests that failed, per partition."),
    ("replicationbytesin", "Bytes appended from the leader, as a follower."),
    ("replicationbytesout", "Record bytes sent to followers."),
)


class BrokerCollector(Collector):
    """Topics, logs, replication, purgatories, connections and the controller: what Kafka's
    BrokerTopicMetrics, Log, ReplicaManager, DelayedOperationPurgatory, socket-server-metrics
    and KafkaController MBeans show."""

    def __init__(self, replica_manager: ReplicaManager, socket_server: SocketServer,
                 purgatories: Iterable[DelayedOperationPurgatory], cluster: ZkClusterMember | None,
                 fetch_sessions: FetchSessionCache) -> None:
        self.replica_manager = replica_manager
        self.fetch_sessions = fetch_sessions
        self.socket_server = socket_server
        self.purgatories = list(purgatories)
        self.cluster = cluster

    def collect(self) -> Iterator[Metric]:
        yield from self._topics_and_logs()
        yield from self._purgatories()
        yield from self._sockets()
        yield from self._controller()
        yield from self._fetch_sessions()

    def _fetch_sessions(self) -> Iterator[Metric]:
        """Kafka's kafka.server:type=FetchSessionCache gauges and eviction meter."""
        cache = self.fetch_sessions
        yield GaugeMetricFamily("kafka_server_fetchsessioncache_numincrementalfetchsessions",
                                "Incremental fetch sessions kept.", value=cache.num_sessions())
        yield GaugeMetricFamily("kafka_server_fetchsessioncache_numincrementalfetchpartitionscached",
                                "Partitions of the incremental fetch sessions kept.", value=cache.num_partitions_cached())
        yield CounterMetricFamily("kafka_server_fetchsessioncache_incrementalfetchsessionevictions",
                                  "Fetch sessions evicted (Kafka's IncrementalFetchSessionEvictionsPerSec).",
                                  value=cache.evictions())

    def _topics_and_logs(self) -> Iterator[Metric]:
        rm = self.replica_manager
        per_topic: dict[str, list[int]] = {}
        size = GaugeMetricFamily("kafka_log_log_size", "Bytes of the partition's log.", labels=["topic", "partition"])
        segments = GaugeMetricFamily("kafka_log_log_numlogsegments", "Segments of the partition's log.",
                                     labels=["topic", "partition"])
        leo = GaugeMetricFamily("kafka_log_log_logendoffset", "The partition's log end offset.",
                                labels=["topic", "partition"])
        lso = GaugeMetricFamily("kafka_log_log_logstartoffset", "The partition's log start offset.",
                                labels=["topic", "partition"])
        under_replicated = under_min_isr = leaders = shrinks = expands = 0
        for tp, p in list(rm.partitions.items()):
            if p.deleted:
                continue
            labels = [tp.topic, str(tp.partition)]
            lg = p.log
            size.add_metric(labels, lg.size_in_bytes)
            segments.add_metric(labels, len(lg.segment_base_offsets()))
            leo.add_metric(labels, lg.log_end_offset)
            lso.add_metric(labels, lg.log_start_offset)
            stats = p.stats
            shrinks += stats.isr_shrinks
            expands += stats.isr_expands
            if p.is_leader:
                leaders += 1
                if len(p.isr) < len(p.replicas):
                    under_replicated += 1
                if len(p.isr) < p.effective_min_isr:
                    under_min_isr += 1
            sums = per_topic.setdefault(tp.topic, [0] * len(_TOPIC_COUNTERS))
            for i, value in enumerate(_stat_values(stats)):
                sums[i] += value
        for i, (name, doc) in enumerate(_TOPIC_COUNTERS):
            family = CounterMetricFamily(f"kafka_server_brokertopicmetrics_{name}", doc, labels=["topic"])
            for topic, sums in per_topic.items():
                family.add_metric([topic], sums[i])
            yield family
        yield from (size, segments, leo, lso)
        yield GaugeMetricFamily("kafka_server_replicamanager_partitioncount", "Partitions on this broker.",
                                value=len(rm.partitions))
        yield GaugeMetricFamily("kafka_server_replicamanager_leadercount", "Partitions this broker leads.",
                                value=leaders)
        yield GaugeMetricFamily("kafka_server_replicamanager_underreplicatedpartitions",
                                "Partitions led here whose ISR is smaller than their replicas.", value=under_replicated)
        yield GaugeMetricFamily("kafka_server_replicamanager_underminisrpartitioncount",
                                "Partitions led here whose ISR is below min.insync.replicas.", value=under_min_isr)
        yield GaugeMetricFamily("kafka_server_replicamanager_offlinereplicacount",
                                "Replicas whose log directory is offline.", value=len(rm.offline_partitions))
        yield CounterMetricFamily("kafka_server_replicamanager_isrshrinks", "ISR shrinks of partitions led here.",
                                  value=shrinks)
        yield CounterMetricFamily("kafka_server_replicamanager_isrexpands", "ISR expansions of partitions led here.",
                                  value=expands)

    def _purgatories(self) -> Iterator[Metric]:
        size = GaugeMetricFamily("kafka_server_delayedoperationpurgatory_purgatorysize",
                                 "Watch-list entries (an operation counts once per key).", labels=["delayedoperation"])
        delayed = GaugeMetricFamily("kafka_server_delayedoperationpurgatory_numdelayedoperations",
                                    "Operations waiting.", labels=["delayedoperation"])
        expires = CounterMetricFamily("kafka_server_delayedoperationpurgatory_expires",
                                      "Operations that expired (Kafka's DelayedFetchMetrics and DelayedProduceMetrics "
                                      "ExpiresPerSec).", labels=["delayedoperation"])
        for purgatory in self.purgatories:
            size.add_metric([purgatory.name], purgatory.watched())
            delayed.add_metric([purgatory.name], purgatory.delayed())
            expires.add_metric([purgatory.name], purgatory.expirations())
        yield from (size, delayed, expires)

    def _sockets(self) -> Iterator[Metric]:
        server = self.socket_server
        count = GaugeMetricFamily("kafka_server_socket_server_metrics_connection_count", "Open connections.",
                                  labels=["listener"])
        per_listener = Counter(conn.listener.name for conn in list(server.connections))
        for listener, n in per_listener.items():
            count.add_metric([listener], n)
        yield count
        ok = CounterMetricFamily("kafka_server_socket_server_metrics_successful_authentication",
                                 "Connections that authenticated (SASL, or a TLS client certificate).",
                                 labels=["listener"])
        for listener, n in list(server.authentications.items()):
            ok.add_metric([listener], n)
        yield ok
        failed = CounterMetricFamily("kafka_server_socket_server_metrics_failed_authentication",
                                     "Failed authentications.", labels=["listener"])
        for listener, n in list(server.authentication_failures.items()):
            failed.add_metric([listener], n)
        yield failed
        sender = server.file_sender
        yield CounterMetricFamily("rivulet_network_zero_copy_sends", "Fetch answers sent from the segment files "
                                  "with sendfile.", value=sender.sends if sender is not None else 0)
        yield CounterMetricFamily("rivulet_network_zero_copy_bytes", "Record bytes sent with sendfile.",
                                  value=sender.region_bytes_sent if sender is not None else 0)
        yield CounterMetricFamily("rivulet_network_tls_sender_sends", "Fetch answers over TLS read, encrypted and "
                                  "sent by a sender thread.", value=sender.tls_sends if sender is not None else 0)
        yield CounterMetricFamily("rivulet_network_tls_sender_bytes", "Record bytes sent by TLS sender threads.",
                                  value=sender.tls_region_bytes_sent if sender is not None else 0)

    def _controller(self) -> Iterator[Metric]:
        controller = self.cluster.controller if self.cluster is not None else None
        # One node is its own controller; in a cluster, the broker whose /controller znode won.
        active = 1 if controller is None and self.cluster is None else int(controller is not None
                                                                          and controller.is_active)
        yield GaugeMetricFamily("kafka_controller_kafkacontroller_activecontrollercount",
                                "1 on the active controller.", value=active)
        offline = 0
        if controller is not None and controller.ctx is not None:
            offline = sum(1 for state in controller.ctx.leadership.values() if state.leader < 0)
        elif self.cluster is None:
            offline = len(self.replica_manager.offline_partitions)
        yield GaugeMetricFamily("kafka_controller_kafkacontroller_offlinepartitionscount",
                                "Partitions without a leader (reported by the active controller).", value=offline)


def _stat_values(stats: PartitionStats) -> tuple[int, ...]:
    return (stats.bytes_in, stats.messages_in, stats.bytes_out, stats.messages_out, stats.produce_requests,
            stats.failed_produce_requests, stats.fetch_requests, stats.failed_fetch_requests,
            stats.replication_bytes_in, stats.replication_bytes_out)


class GroupLagCollector(Collector):
    """Committed offsets and lag of the groups this broker coordinates, against the high
    watermark of partitions it leads (what the broker knows; a partition led elsewhere has
    no lag here)."""

    def __init__(self, groups: GroupCoordinator, replica_manager: ReplicaManager) -> None:
        self.groups = groups
        self.replica_manager = replica_manager

    def collect(self) -> Iterator[Metric]:
        labels = ["consumergroup", "topic", "partition"]
        current = GaugeMetricFamily("kafka_consumergroup_current_offset", "The group's committed offset.",
                                    labels=labels)
        lag = GaugeMetricFamily("kafka_consumergroup_lag", "High watermark minus the committed offset.",
                                labels=labels)
        manager = self.groups.manager
        partitions = self.replica_manager.partitions
        for group in manager.current_groups() if manager is not None else ():
            for tp, om in group.all_offsets().items():
                values = [group.group_id, tp.topic, str(tp.partition)]
                current.add_metric(values, om.committed_offset)
                p = partitions.get(tp)
                if p is not None and p.is_leader and not p.deleted:
                    lag.add_metric(values, max(0, p.high_watermark - om.committed_offset))
        yield current
        yield lag


# The per-partition Iceberg metrics: (family, name, help, the value from a partition's progress).
_ICEBERG_PARTITION_METRICS: tuple[tuple[type[GaugeMetricFamily] | type[CounterMetricFamily], str, str,
                                        Callable[[PartitionTranslation], int]], ...] = (
    (GaugeMetricFamily, "rivulet_iceberg_translation_lag", "Records committed to the log and not yet to the "
     "topic's Iceberg table (the last stable offset less the table's next offset).", lambda pt: pt.lag),
    (CounterMetricFamily, "rivulet_iceberg_records_translated", "Offsets added to the topic's Iceberg table by "
     "this broker (control records and aborted transactions included, as consumer lag counts them).",
     lambda pt: pt.translated),
    (CounterMetricFamily, "rivulet_iceberg_records_skipped", "Offsets removed from the log (retention, "
     "DeleteRecords) before they reached the table.", lambda pt: pt.skipped),
    (CounterMetricFamily, "rivulet_iceberg_records_dead_lettered", "Records the topic's table could not hold "
     "(schema modes), added to its dead-letter table <topic>~dlq by this broker.", lambda pt: pt.dead_lettered),
    (CounterMetricFamily, "rivulet_iceberg_records_dropped", "Records the topic's table could not hold (schema "
     "modes), dropped (iceberg.invalid.record.action=drop).", lambda pt: pt.dropped),
)


class IcebergCollector(Collector):
    """Topics as Iceberg tables (Rivulet's): per partition this broker leads, the records not in
    the table yet and those it translated; per table, its snapshots committed here."""

    def __init__(self, translator: IcebergTranslator) -> None:
        self.translator = translator

    def collect(self) -> Iterator[Metric]:
        families = [(kind(name, text, labels=["topic", "partition"]), value)
                    for kind, name, text, value in _ICEBERG_PARTITION_METRICS]
        commits = CounterMetricFamily("rivulet_iceberg_commits", "Snapshots committed to the topic's table by "
                                      "this broker.", labels=["topic"])
        for topic, t in list(self.translator.topics.items()):
            commits.add_metric([topic], t.commits)
            for partition, pt in list(t.partitions.items()):
                for family, value in families:
                    family.add_metric([topic, str(partition)], value(pt))
        yield from (family for family, _ in families)
        yield commits
