"""The broker's own logs: JSON lines in a rotating file, per-logger levels, the slow-request
log and rate-limited warnings, on a real broker process."""

from __future__ import annotations

import json
import socket
import struct
from pathlib import Path

import pytest

from rivulet.testing import BrokerProcess

pytestmark = pytest.mark.integration


def _json_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_json_log_file_rotates_and_logs_every_request_at_threshold_zero(tmp_path):
    import confluent_kafka

    log_file = tmp_path / "logs" / "broker.log"
    broker = BrokerProcess(
        {"log.file.max.bytes": "20000", "log.file.backup.count": "2", "request.log.threshold.ms": "0"},
        args=["--log-format", "json", "--log-file", str(log_file),
              "--log-level", "warning,rivulet.server.requests=info"])
    with broker:
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "client.id": "log-test",
                                             "linger.ms": 0})
        for i in range(150):
            producer.produce("logged", b"v%d" % i)
            producer.flush(10)
        for _ in range(20):  # hostile input: each closes its connection, and is logged once per interval
            with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as s:
                s.sendall(struct.pack(">i", -1))
                assert s.recv(16) == b""
        stdout = broker.output()
    files = sorted(p.name for p in log_file.parent.iterdir())
    assert files == ["broker.log", "broker.log.1", "broker.log.2"]
    records = [r for name in files for r in _json_lines(log_file.parent / name)]
    assert records, "the log file holds JSON lines"
    requests = [r for r in records if r["logger"] == "rivulet.server.requests"]
    produces = [r for r in requests if r["api"] == "Produce" and r["client_id"] == "log-test"]
    assert produces, "threshold 0 logs every request"
    p = produces[-1]
    assert p["message"].startswith("slow request Produce v")
    assert p["level"] == "INFO" and p["principal"] == "User:ANONYMOUS" and p["listener"] == "PLAINTEXT"
    for key in ("total_ms", "queue_ms", "local_ms", "remote_ms", "response_queue_ms", "send_ms", "throttle_ms"):
        assert p[key] >= 0
    assert p["total_ms"] >= p["local_ms"]
    # Per-logger levels: the root is at warning, so the other loggers' INFO lines are left out.
    assert {r["logger"] for r in records if r["level"] == "INFO"} == {"rivulet.server.requests"}
    oversized = [r for r in records if r.get("kind") == "oversized request"]
    assert len(oversized) == 1, oversized
    assert "rivulet.server.requests" not in stdout  # the file, not stderr


def test_a_bad_log_level_stops_the_broker_with_a_message(tmp_path):
    broker = BrokerProcess(args=["--log-level", "rivulet=loud"])
    with pytest.raises(RuntimeError, match="unknown log level 'loud'"):
        broker.start(timeout=20)
