"""The slow-request log, in the manner of Kafka's request logger: a request whose handling
took at least ``request.log.threshold.ms`` is logged at INFO by ``rivulet.server.requests``,
naming the API, version, client id, principal and where its time went; with that logger at
DEBUG every request is logged. The connection takes the clock readings once for this and for
the request metrics (``metrics/requests.py``, whose phases these are).

What counts against the threshold is the broker's own time (queue, local and send): waiting
in a purgatory is mostly what the client asked for (a long poll's max wait, acks=all, a
rebalance), and waiting behind earlier answers on the same connection is their time, not
this request's. Both are shown in the line.
"""

from __future__ import annotations

import logging

from rivulet.protocol import framing
from rivulet.protocol.schema import Struct
from rivulet.server.metrics.requests import throttle_ms
from rivulet.server.network import KafkaConnection

log = logging.getLogger("rivulet.server.requests")


class RequestLog:
    def __init__(self, threshold_ms: int) -> None:
        self.threshold_ms = threshold_ms  # -1: only at DEBUG

    def enabled(self) -> bool:
        """Whether it logs anything with the levels set at start-up."""
        return self.threshold_ms >= 0 and log.isEnabledFor(logging.INFO) or log.isEnabledFor(logging.DEBUG)

    def request_completed(self, conn: KafkaConnection, header: framing.RequestHeader, request: str,
                          received: float, dispatched: float, handled: float, completed: float,
                          write_start: float, sent: float, response: object) -> None:
        queue, local, send = dispatched - received, handled - dispatched, sent - write_start
        slow = 0 <= self.threshold_ms <= (queue + local + send) * 1000
        level = logging.INFO if slow else logging.DEBUG
        if not log.isEnabledFor(level):
            return
        ms = {"total_ms": sent - received, "queue_ms": queue, "local_ms": local, "remote_ms": completed - handled,
              "response_queue_ms": write_start - completed, "send_ms": send}
        ms = {k: round(v * 1000, 3) for k, v in ms.items()}
        throttle = throttle_ms(response) if isinstance(response, Struct) else 0
        principal = str(conn.principal)
        peer = f"{conn.peer[0]}:{conn.peer[1]}"
        log.log(level, "%s %s v%d from client id '%s' (%s at %s on %s, correlation id %d): %.1f ms; queue %.1f, "
                "local %.1f, remote %.1f, response queue %.1f, send %.1f; throttled %d ms",
                "slow request" if slow else "request", request, header.api_version, header.client_id or "",
                principal, peer, conn.listener.name, header.correlation_id, ms["total_ms"], ms["queue_ms"],
                ms["local_ms"], ms["remote_ms"], ms["response_queue_ms"], ms["send_ms"], throttle,
                extra={"api": request, "api_version": header.api_version, "correlation_id": header.correlation_id,
                       "client_id": header.client_id, "principal": principal, "peer": peer,
                       "listener": conn.listener.name, "security_protocol": conn.listener.security_protocol,
                       "client_software": f"{conn.client_software_name}/{conn.client_software_version}",
                       "throttle_ms": throttle, **ms})
