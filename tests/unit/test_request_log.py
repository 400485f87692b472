"""The slow-request log: what counts against the threshold, and what a line carries."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pytest

from rivulet.protocol import framing
from rivulet.protocol.messages.produce_response import ProduceResponse
from rivulet.security.principal import KafkaPrincipal
from rivulet.server.network import Listener
from rivulet.server.request_log import RequestLog

pytestmark = pytest.mark.fast


@dataclass
class Conn:
    principal: KafkaPrincipal = KafkaPrincipal("User", "alice")
    peer: tuple[str, int] = ("10.0.0.7", 50123)
    listener: Listener = field(default_factory=lambda: Listener("SASL_PLAINTEXT", "SASL_PLAINTEXT"))
    client_software_name: str = "librdkafka"
    client_software_version: str = "2.16.0"


HEADER = framing.RequestHeader(0, 9, 42, "orders-app")


def completed(log: RequestLog, queue: float, local: float, remote: float, response_queue: float, send: float,
              response: object = None) -> None:
    # Clock readings in seconds, as the connection takes them.
    received = 100.0
    dispatched = received + queue
    handled = dispatched + local
    done = handled + remote
    write_start = done + response_queue
    conn: object = Conn()
    log.request_completed(conn, HEADER, "Produce", received, dispatched, handled, done,  # type: ignore[arg-type]
                          write_start, write_start + send, response)


def test_the_brokers_own_time_counts_and_waiting_does_not(caplog):
    log = RequestLog(threshold_ms=100)
    with caplog.at_level(logging.INFO, logger="rivulet.server.requests"):
        completed(log, 0.001, 0.002, 5.0, 3.0, 0.001)  # a long purgatory wait and a long queue: not slow
        completed(log, 0.001, 0.15, 0.0, 0.0, 0.001)  # 152 ms of its own
    (record,) = caplog.records
    assert record.levelno == logging.INFO
    assert record.getMessage().startswith("slow request Produce v9 from client id 'orders-app' "
                                          "(User:alice at 10.0.0.7:50123 on SASL_PLAINTEXT, correlation id 42): "
                                          "152.0 ms; queue 1.0, local 150.0, remote 0.0")
    fields = record.__dict__
    assert (fields["api"], fields["api_version"], fields["client_id"], fields["principal"]) == \
        ("Produce", 9, "orders-app", "User:alice")
    assert (fields["listener"], fields["security_protocol"], fields["client_software"]) == \
        ("SASL_PLAINTEXT", "SASL_PLAINTEXT", "librdkafka/2.16.0")
    assert fields["local_ms"] == 150.0 and fields["total_ms"] == 152.0 and fields["throttle_ms"] == 0


def test_threshold_zero_logs_every_request_and_minus_one_none(caplog):
    with caplog.at_level(logging.INFO, logger="rivulet.server.requests"):
        completed(RequestLog(0), 0, 0, 0, 0, 0)
        completed(RequestLog(-1), 1.0, 1.0, 1.0, 1.0, 1.0)
        assert not RequestLog(-1).enabled() and RequestLog(0).enabled()
    assert len(caplog.records) == 1


def test_at_debug_every_request_is_logged_and_the_throttle_time_shows(caplog):
    response = ProduceResponse()
    response.throttle_time_ms = 250
    with caplog.at_level(logging.DEBUG, logger="rivulet.server.requests"):
        assert RequestLog(-1).enabled()
        completed(RequestLog(-1), 0, 0.001, 0, 0, 0, response)
    (record,) = caplog.records
    assert record.levelno == logging.DEBUG and record.getMessage().startswith("request Produce v9")
    assert record.__dict__["throttle_ms"] == 250 and record.getMessage().endswith("throttled 250 ms")
