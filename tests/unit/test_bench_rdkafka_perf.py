"""What the benchmark harness reads from rdkafka_performance's output (no broker, no binary)."""

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
