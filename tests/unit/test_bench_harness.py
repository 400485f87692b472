"""What the benchmark harness reads from rdkafka_performance and /proc, and how it reports (no broker, no binary)."""

from __future__ import annotations

import pytest

from benchmarks.rdkafka_perf import RdkafkaPerfError, consumer_args, parse_consumer, parse_producer, producer_args

pytestmark = pytest.mark.fast

PRODUCER_OUT = """\
% Sending 200000 messages of size 100 bytes
% 11 backpressures for 200000 produce calls: 0.006% backpressure rate
% 200000 messages produced (20000000 bytes), 199990 delivered (offset 68150, 10 failed) in 281ms: \
710972 msgs/s and 71.10 MB/s, 11 produce failures, 0 in queue, no compression
"""

CONSUMER_OUT = """\
% 0 messages (0 bytes) consumed in 0ms: 0 msgs/s (0.00 MB/s)
% Consumer reached end of t1 [1] message queue at offset 21665
% 200000 messages (20000000 bytes) consumed in 92ms: 2168703 msgs/s (216.87 MB/s)
% Average application fetch latency: 2us
"""


def test_producer_summary_counts_delivered_records_only():
    s = parse_producer(PRODUCER_OUT)
    assert (s.records, s.bytes, s.ms, s.failed) == (199_990, 19_999_000, 281, 10)
    assert (s.records_per_sec, s.mb_per_sec) == (710_972.0, 71.10)


def test_consumer_takes_the_last_summary_not_the_initial_zero_line():
    s = parse_consumer(CONSUMER_OUT)
    assert (s.records, s.bytes, s.ms, s.records_per_sec, s.mb_per_sec) == (200_000, 20_000_000, 92, 2_168_703.0, 216.87)


def test_missing_summaries_raise():
    with pytest.raises(RdkafkaPerfError):
        parse_producer(CONSUMER_OUT)
    with pytest.raises(RdkafkaPerfError):
        parse_consumer("% Sending 10 messages of size 100 bytes\n")


def test_command_lines():
    p = producer_args("h:1", "t", 1000, 100, "all", compression="zstd")
    assert p[:6] == ["-P", "-t", "t", "-b", "h:1", "-s"]
    assert p[p.index("-a") + 1] == "-1" and p[p.index("-z") + 1] == "zstd"
    assert "linger.ms=10" in p and "batch.size=1000000" in p
    one = producer_args("h:1", "t", 1, 1, "1")
    assert one[one.index("-a") + 1] == "1" and "-z" not in one
    c = consumer_args("h:1", "t", 3, 50)
    assert [c[i + 1] for i, a in enumerate(c) if a == "-p"] == ["0", "1", "2"]
    assert c[c.index("-o") + 1] == "beginning" and c[c.index("-c") + 1] == "50"
    tail = consumer_args("h:1", "t", 2, 10, tail=5)  # the last 5 records of each partition
    assert tail[tail.index("-o") + 1] == "-5"


# ---------------------------------------------------------------------------- benchmarks.compare's accounting


def test_cpu_seconds_from_a_stat_line_whose_name_holds_spaces_and_parentheses():
    from benchmarks.compare import stat_cpu_seconds

    # fields 14 and 15 (utime, stime) are 250 and 50 ticks
    stat = "4242 (java (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 30 0 12345 0 0"
    assert stat_cpu_seconds(stat, 100) == (2.5, 0.5)


def test_cpu_use_as_a_share_of_one_core():
    from benchmarks.compare import CpuUse

    use = CpuUse(user=1.5, system=0.5, wall=4.0)
    assert use.seconds == 2.0 and use.percent_of_core(4.0) == 50.0 and use.percent_of_core(1.0) == 200.0
    assert use.percent_of_core(0.0) == 0.0


def test_ratio_is_the_median_of_per_round_ratios_with_their_range():
    from benchmarks.compare import ratio, spread

    runs = {"rivulet": [{"x": 150.0, "t": 1.0}, {"x": 160.0, "t": 2.0}, {"x": 100.0}],
            "kafka": [{"x": 100.0, "t": 4.0}, {"x": 100.0, "t": 4.0}, {"x": 50.0}]}
    assert ratio(runs, "x", True) == "1.60 (1.50-2.00)"
    assert ratio(runs, "t", False) == "3.00 (2.00-4.00)"  # times: Kafka / Rivulet
    assert ratio({"rivulet": [{"x": 1.0}], "kafka": [{}]}, "x", True) == "n/a"
    assert ratio({"rivulet": [{"x": 3.0}], "kafka": [{"x": 2.0}]}, "x", True) == "1.50"
    assert spread([90.0, 100.0, 110.0]) == "20%" and spread([5.0]) == "-"


def test_the_consume_layout_is_a_figure_of_each_broker_beside_the_other(monkeypatch):
    from benchmarks import compare

    monkeypatch.setattr(compare, "FIGURES", [])  # main() declares them once
    monkeypatch.setattr(compare, "THROUGHPUTS", [])
    compare._declare_figures()
    runs = {"rivulet": [{"rdk_cons_many10k.layout_min": 12, "rdk_cons_many10k.layout_median": 30.5,
                         "rdk_cons_many10k.layout_max": 51}],
            "kafka": [{"rdk_cons_many10k.layout_min": 12, "rdk_cons_many10k.layout_median": 30.0,
                       "rdk_cons_many10k.layout_max": 102}]}
    rows = {ln.split(" | ")[0]: ln for ln in compare.table(runs)}
    assert rows["| consume 10,000 partitions: records read from a partition, fewest"].endswith("| 12 | 12 | 1.00 | - / - |")
    assert "| 30.5 | 30 |" in rows["| consume 10,000 partitions: records read from a partition, median"]
    assert "| 51 | 102 | 0.50 |" in rows["| consume 10,000 partitions: records read from a partition, most"]
    assert not any("1,000 partitions: records" in ln for ln in rows)  # the many rows did not run


def test_security_gives_brokers_and_clients_matching_properties(tmp_path):
    from benchmarks.compare import Security
    from benchmarks.rdkafka_perf import config_args

    plain = Security.named("plaintext", tmp_path / "none")
    assert not plain.secured and plain.broker_props() == {} and plain.client_conf() == {}
    tls = Security.named("tls", tmp_path / "tls")
    props, conf = tls.broker_props(), tls.client_conf()
    assert props["ssl.enabled.protocols"] == "TLSv1.3" and props["ssl.keystore.type"] == "PKCS12"
    assert not any(k.startswith("sasl.") or ".sasl." in k for k in props)
    assert conf == {"security.protocol": "SSL", "ssl.ca.location": str(tls.certs.ca.pem)}
    assert config_args(conf) == ["-X", "security.protocol=SSL", "-X", f"ssl.ca.location={tls.certs.ca.pem}"]
    scram = Security.named("sasl_ssl", tmp_path / "scram")
    props, conf, java = scram.broker_props(), scram.client_conf(), scram.java_props()
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert "ScramLoginModule" in props["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"]
    assert (conf["security.protocol"], conf["sasl.mechanism"]) == ("SASL_SSL", "SCRAM-SHA-512")
    assert f'username="{conf["sasl.username"]}" password="{conf["sasl.password"]}"' in java["sasl.jaas.config"]
    assert java["ssl.truststore.location"] == str(scram.certs.ca.pem)


def test_run_many_collects_each_output_in_order_and_raises_on_a_failure(tmp_path, monkeypatch):
    from benchmarks import rdkafka_perf

    fake = tmp_path / "rdkafka_performance"
    # Prints a consumer summary with its first argument as the count; exits 3 when that is 0.
    fake.write_text('#!/bin/sh\n[ "$1" = 0 ] && { echo broken >&2; exit 3; }\n'
                    'echo "% $1 messages (100 bytes) consumed in 5ms: 200 msgs/s (0.02 MB/s)"\n')
    fake.chmod(0o755)
    monkeypatch.setattr(rdkafka_perf, "require_binary", lambda: fake)
    outs = rdkafka_perf.run_many([["7"], ["9"]], timeout=30)
    assert [rdkafka_perf.parse_consumer(o).records for o in outs] == [7, 9]
    with pytest.raises(RdkafkaPerfError, match="exited 3"):
        rdkafka_perf.run_many([["1"], ["0"]], timeout=30)


def test_parallel_rows_check_each_count_and_time_by_the_wall_or_the_longest_own_window(tmp_path, monkeypatch):
    """``_rdk_parallel`` serves the many-topic rows (one count, the wall time) and the split
    consume row (a count per process, the longest of their own windows) with one shortfall check."""
    from types import SimpleNamespace

    from benchmarks import compare, rdkafka_perf

    fake = tmp_path / "rdkafka_performance"
    # A consumer summary: $1 records of 100 bytes each, consumed in $2 ms.
    fake.write_text('#!/bin/sh\necho "% $1 messages ($(($1 * 100)) bytes) consumed in $2ms: 1 msgs/s (0.00 MB/s)"\n')
    fake.chmod(0o755)
    monkeypatch.setattr(rdkafka_perf, "require_binary", lambda: fake)
    own = compare._rdk_parallel([["300", "2000"], ["100", "500"]], rdkafka_perf.parse_consumer, [300, 100],
                                own_windows=True)
    assert (own.records_per_sec, own.mb_per_sec, own.seconds) == (200.0, 0.02, 2.0)
    with pytest.raises(RdkafkaPerfError, match="1 of 2 processes fell short of \\[300, 101\\]"):
        compare._rdk_parallel([["300", "2000"], ["100", "500"]], rdkafka_perf.parse_consumer, [300, 101],
                              own_windows=True)
    with pytest.raises(RdkafkaPerfError, match="2 of 2 processes fell short"):
        compare._rdk_parallel([["300", "2000"], ["100", "500"]], rdkafka_perf.parse_consumer, 301)
    clock = iter([10.0, 14.0])  # the wall clock at the start and after the last exit
    monkeypatch.setattr(compare, "time", SimpleNamespace(monotonic=lambda: next(clock)))
    wall = compare._rdk_parallel([["300", "2000"], ["100", "500"]], rdkafka_perf.parse_consumer, 100)
    assert (wall.records_per_sec, wall.mb_per_sec, wall.seconds) == (100.0, 0.01, 4.0)


# ---------------------------------------------------------------------------- issue 32's rows


def test_txnperf_summary_and_rate():
    from benchmarks.txn_perf import TxnPerfError, parse_summary

    s = parse_summary("records=20000 transactions=200 seconds=0.250000\n")
    assert (s.records, s.transactions, s.seconds) == (20_000, 200, 0.25)
    assert s.records_per_sec == 80_000.0 and s.mb_per_sec(100) == 8.0
    with pytest.raises(TxnPerfError):
        parse_summary("commit: INVALID_TXN_STATE\n")


def test_share_acks_summary():
    from benchmarks.share_groups import ShareRunError, parse_java_summary

    f = parse_java_summary("acked 10500 seconds 7.000000 first 5.000000 batch 500 failed 0 "
                           "acks 21 largest 2000 empty 3 emptys 0.250\n")
    assert (f.records, f.seconds, f.first_ack_s, f.first_batch) == (10_500, 7.0, 5.0, 500)
    assert f.rate == 1_500.0 and f.steady_rate == 5_000.0  # the join and the first batch left out
    assert (f.acks, f.largest_ack, f.empty_polls, f.empty_poll_s) == (21, 2000, 3, 0.25)
    assert f.trips() == "21 acknowledgement callbacks (500 records each, at most 2,000), 3 empty polls (0.25 s)"
    with pytest.raises(ShareRunError):
        parse_java_summary("acked 10 seconds 1.0 failed 0\n")


def test_share_steady_rate_needs_more_than_the_first_batch():
    from benchmarks.compare import share_rate
    from benchmarks.share_groups import ShareFigures

    assert ShareFigures(500, 5.0, 5.0, 500).steady_rate is None
    with pytest.raises(RuntimeError, match="no steady rate"):
        share_rate(ShareFigures(500, 5.0, 5.0, 500))
    r = share_rate(ShareFigures(2_500, 3.0, 1.0, 500))
    assert (r.records_per_sec, r.mb_per_sec, r.seconds) == (1_000.0, 0.1, 2.0)


def test_transaction_rows_run_whole_transactions():
    from benchmarks.compare import txn_counts

    assert txn_counts(1_000_000, 200_000) == [(100, 200_000), (10_000, 1_000_000)]
    # rounded down to whole transactions, never below one
    assert txn_counts(25_000, 150) == [(100, 100), (10_000, 20_000)]
    assert txn_counts(10, 10) == [(100, 100), (10_000, 10_000)]


def test_only_skips_every_family_it_does_not_name():
    from benchmarks.compare import PARTS, skipped_parts

    assert skipped_parts({"java"}, None) == {"java"}
    assert skipped_parts(set(), {"txn", "share"}) == set(PARTS) - {"txn", "share"}
    assert "base" in skipped_parts({"share"}, {"txn", "share"})  # --skip still wins


def test_cpu_of_an_in_process_generator_is_this_process(tmp_path):
    import os
    import subprocess

    from benchmarks.compare import with_cpu

    def spin() -> int:
        n, t = 0, os.times()
        while os.times().user - t.user < 0.2:
            n += 1
        return n

    _, gen, _ = with_cpu(os.getpid(), spin, in_process=True)
    assert gen.seconds >= 0.2
    _, gen, _ = with_cpu(os.getpid(), spin)  # counts the reaped children only: none ran
    assert gen.seconds == 0.0
    _, gen, _ = with_cpu(os.getpid(), lambda: subprocess.run(["sh", "-c", "i=0; while [ $i -lt 200000 ]; do "
                                                               "i=$((i+1)); done"], check=True))
    assert gen.seconds > 0.0


# ---------------------------------------------------------------------------- compare's cluster and 10k families


def test_only_keeps_the_named_families_and_skip_still_applies():
    from benchmarks.compare import PARTS, skipped_parts

    assert skipped_parts({"java"}, None) == {"java"}
    left = skipped_parts(set(), {"cluster", "many10k"})
    assert left == set(PARTS) - {"cluster", "many10k"} and "base" in left
    assert skipped_parts({"many10k"}, {"cluster", "many10k"}) == set(PARTS) - {"cluster"}


def test_a_round_keeps_the_load_before_its_first_broker_and_after_its_last():
    from benchmarks.compare import merge_round

    single = {"load_before": 1.0, "load_after": 2.0, "rss": 100.0}
    cluster = {"load_before": 3.0, "load_after": 4.0, "cluster_rss": 300.0}
    assert merge_round([single, cluster]) == {"load_before": 1.0, "load_after": 4.0, "rss": 100.0,
                                              "cluster_rss": 300.0}
    assert merge_round([]) == {}


def _metadata(isrs_by_partition: dict[int, list[int]], leader: int = 1):
    from confluent_kafka.admin import ClusterMetadata, PartitionMetadata, TopicMetadata

    md, topic = ClusterMetadata(), TopicMetadata()
    topic.topic = "t"
    for pid, isrs in isrs_by_partition.items():
        p = PartitionMetadata()
        p.id, p.leader, p.replicas, p.isrs = pid, leader, [1, 2, 3], isrs
        topic.partitions[pid] = p
    md.topics["t"] = topic
    return md


def test_replicated_topics_are_ready_when_every_partition_has_all_replicas_in_sync():
    from benchmarks.compare import replicas_ready

    assert replicas_ready(_metadata({0: [1, 2, 3], 1: [2, 3, 1]}), ["t"], 3)
    assert not replicas_ready(_metadata({0: [1, 2, 3], 1: [2, 3]}), ["t"], 3)
    assert not replicas_ready(_metadata({0: [1, 2, 3]}, leader=-1), ["t"], 3)
    assert not replicas_ready(_metadata({0: [1, 2, 3]}), ["t", "other"], 3)
    assert not replicas_ready(_metadata({}), ["t"], 3)  # no partitions yet


def test_kafka_cluster_nodes_share_one_quorum_and_cluster_id():
    from benchmarks.reference.kafka import KafkaCluster, KafkaReference

    cluster = KafkaCluster(3, overrides={"min.insync.replicas": "2"})
    try:
        props = [n.properties for n in cluster.nodes]
        voters = {p["controller.quorum.voters"] for p in props}
        assert len(voters) == 1 and len({n.cluster_id for n in cluster.nodes}) == 1
        assert voters.pop() == ",".join(f"{i + 1}@127.0.0.1:{n.controller_port}" for i, n in enumerate(cluster.nodes))
        assert [p["node.id"] for p in props] == ["1", "2", "3"]
        for p in props:
            assert p["min.insync.replicas"] == "2"
            assert (p["offsets.topic.replication.factor"], p["transaction.state.log.min.isr"]) == ("3", "2")
        assert cluster.bootstrap == ",".join(n.bootstrap for n in cluster.nodes)
    finally:
        cluster.cleanup()
    alone = KafkaReference()
    try:  # a single node is still its own only voter, internal topics at RF 1
        assert alone.properties["controller.quorum.voters"] == f"1@127.0.0.1:{alone.controller_port}"
        assert alone.properties["offsets.topic.replication.factor"] == "1"
    finally:
        alone.cleanup()


def test_the_open_files_limit_is_raised_only_when_short_and_possible():
    import resource

    from benchmarks.compare import open_files_limit

    assert open_files_limit(20000, 20000, 16384) is None
    assert open_files_limit(1024, 20000, 16384) == 16384
    assert open_files_limit(1024, resource.RLIM_INFINITY, 16384) == 16384
    assert open_files_limit(resource.RLIM_INFINITY, resource.RLIM_INFINITY, 16384) is None
    with pytest.raises(ValueError, match="hard limit of open files is 4096"):
        open_files_limit(1024, 4096, 16384)


def test_fetch_wakeup_times_each_produce_to_the_events_before_the_next_one():
    from benchmarks.fetch_wakeup import delays
    events = [("produce", 1.0), ("fetch_completed", 1.0002), ("sent_fetch", 1.0003), ("sent_produce", 1.0004),
              ("produce", 2.0), ("sent_produce", 2.0001),  # nothing waited: left out
              ("produce", 3.0), ("fetch_completed", 3.001), ("sent_produce", 3.002), ("sent_fetch", 3.003)]
    d = delays(events)
    assert [round(v, 3) for v in d["sent_fetch"]] == [0.3, 3.0]
    assert [round(v, 3) for v in d["sent_produce"]] == [0.4, 2.0]
    assert [round(v, 3) for v in d["fetch_completed"]] == [0.2, 1.0]


# ---------------------------------------------------------------------------- the Java tools' client metrics

JAVA_METRICS_OUT = """\
3000000 records sent, 1146425.0 records/sec (109.33 MB/sec), 61.40 ms avg latency, 331.00 ms max latency, \
50 ms 50th, 120 ms 95th, 200 ms 99th, 300 ms 99.9th.

Metric Name                                                                  Value
producer-metrics:batch-size-avg:{client-id=perf-producer-client}           : 407130.000
producer-metrics:records-per-request-avg:{client-id=perf-producer-client}  : 3,851.500
producer-metrics:request-latency-avg:{client-id=perf-producer-client}      : NaN
producer-node-metrics:request-total:{client-id=perf-producer-client, node-id=node--1} : 2.000
producer-node-metrics:request-total:{client-id=perf-producer-client, node-id=node-1}  : 780.000
producer-topic-metrics:byte-total:{client-id=perf-producer-client, topic=t}  : 33017238.000
"""


def test_java_metrics_keep_the_broker_node_and_drop_the_bootstrap_and_per_topic_figures():
    from benchmarks.java_shape import metrics

    m = metrics(JAVA_METRICS_OUT)
    assert m["producer-metrics:batch-size-avg"] == 407130.0
    assert m["producer-metrics:records-per-request-avg"] == 3851.5  # the thousands separator
    assert m["producer-node-metrics:request-total:node"] == 780.0  # node-1, not the bootstrap's node--1
    assert not any("byte-total" in k for k in m)
    assert m["producer-metrics:request-latency-avg"] != m["producer-metrics:request-latency-avg"]  # NaN kept as NaN


def test_jvm_threads_grouped_by_role():
    from benchmarks.java_shape import thread_kinds

    kinds = thread_kinds({"java": 1.0, "kafka-producer-": 0.5, "C2 CompilerThre": 0.75, "C1 CompilerThre": 0.25,
                          "GC Thread#0": 0.1, "G1 Conc#0": 0.1, "VM Thread": 0.01})
    assert kinds == pytest.approx({"main": 1.0, "client thread": 0.5, "JIT": 1.0, "GC": 0.2, "other": 0.01})


def test_run_sampled_returns_the_output_and_the_cpu_of_the_process():
    from benchmarks.instant_fetch import run_sampled

    out, cpu, by_thread = run_sampled(["sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; echo done"])
    assert out == "done\n"
    assert cpu > 0.0
    assert set(by_thread) <= {"sh"}
    with pytest.raises(Exception, match="returned non-zero exit status 3"):
        run_sampled(["sh", "-c", "exit 3"])


def test_a_figure_of_several_runs_is_their_median_and_keeps_each_run():
    from benchmarks.compare import median_of_runs
    samples = iter([3.2, 2.2, 3.4, 2.3, 3.3])
    results: dict[str, float] = {}
    median_of_runs(results, "group100_classic", 5, lambda: next(samples))
    assert results == {"group100_classic": 3.2, "group100_classic.run1": 3.2, "group100_classic.run2": 2.2,
                       "group100_classic.run3": 3.4, "group100_classic.run4": 2.3, "group100_classic.run5": 3.3}


def test_every_run_of_a_several_runs_figure_is_pooled_over_the_rounds():
    from benchmarks.compare import pooled_runs
    runs = {"rivulet": [{"g": 3.1, "g.run1": 3.1, "g.run2": 3.2}, {"g": 3.0, "g.run1": 3.0, "g.run2": 3.0}],
            "kafka": [{"g": 2.2, "g.run1": 2.2, "g.run2": 2.2}, {"g": 3.4, "g.run1": 3.4, "g.run2": 3.4}]}
    assert pooled_runs(runs, "g") == ("g, every run (s): Rivulet 3.10, 3.20, 3.00, 3.00; Kafka 2.20, 2.20, 3.40, "
                                      "3.40; their medians 3.05 / 2.80, K/R 0.92")
    assert pooled_runs({"rivulet": [{}], "kafka": [{}]}, "g") is None


def test_the_instant_proxy_acknowledges_produce_at_offsets_counted_per_partition():
    from benchmarks.instant_fetch import Acks
    from rivulet.protocol.messages.produce_request import PartitionProduceData, ProduceRequest, TopicProduceData
    from rivulet.protocol.records import Record, encode_batch

    def batch(n: int) -> bytes:
        return encode_batch([Record(i, 0, None, b"v", []) for i in range(n)], base_timestamp=0)

    acks = Acks()
    req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=1000, topic_data=[TopicProduceData(
        name="t", partition_data=[PartitionProduceData(index=0, records=batch(3) + batch(2)),
                                  PartitionProduceData(index=1, records=batch(4))])])
    first = acks.answer(req, 9)
    again = acks.answer(req, 9)
    assert [(p.index, p.base_offset, p.error_code) for p in first.responses[0].partition_responses] == [(0, 0, 0), (1, 0, 0)]
    assert [(p.index, p.base_offset) for p in again.responses[0].partition_responses] == [(0, 5), (1, 4)]


def test_a_produce_row_drops_the_page_cache_before_its_topic_is_made(monkeypatch):
    from benchmarks import compare
    calls: list[str] = []
    monkeypatch.setattr(compare, "drop_page_cache", lambda: calls.append("drop"))
    compare._dropping_first(lambda: calls.append("create"))()
    compare._dropping_first(None)()
    assert calls == ["drop", "create", "drop"]
