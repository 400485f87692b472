"""GetTelemetrySubscriptions (71) and PushTelemetry (72), KIP-714's client telemetry: the
``ClientMetricsManager`` (``server/client_metrics.py``) decides; here the request meets the
connection it came on. As Kafka's KafkaApis, neither needs an ACL, and an unexpected failure
is answered INVALID_REQUEST."""

from __future__ import annotations

import logging
from typing import Callable, TypeVar

from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.framing import RequestHeader
from rivulet.protocol.messages.get_telemetry_subscriptions_request import GetTelemetrySubscriptionsRequest
from rivulet.protocol.messages.get_telemetry_subscriptions_response import GetTelemetrySubscriptionsResponse
from rivulet.protocol.messages.push_telemetry_request import PushTelemetryRequest
from rivulet.protocol.messages.push_telemetry_response import PushTelemetryResponse
from rivulet.server.client_metrics import ClientContext, ClientMetricsManager
from rivulet.server.handlers import Handler
from rivulet.server.network import KafkaConnection

log = logging.getLogger(__name__)

R = TypeVar("R", GetTelemetrySubscriptionsResponse, PushTelemetryResponse)


class TelemetryHandlers:
    def __init__(self, manager: ClientMetricsManager) -> None:
        self.manager = manager

    def handlers(self) -> dict[int, Handler]:
        return {71: self.handle_get_telemetry_subscriptions, 72: self.handle_push_telemetry}

    def _context(self, header: RequestHeader, conn: KafkaConnection) -> ClientContext:
        if self.manager.connection_closed not in conn.close_listeners:
            conn.close_listeners.append(self.manager.connection_closed)
        host, port = conn.peer[0], conn.peer[1]
        return ClientContext(header.client_id, conn.client_software_name, conn.client_software_version,
                             host, port, conn)

    def handle_get_telemetry_subscriptions(self, header: RequestHeader, req: GetTelemetrySubscriptionsRequest,
                                           conn: KafkaConnection) -> GetTelemetrySubscriptionsResponse:
        return self._serve("GetTelemetrySubscriptions", header, conn, lambda context: self.manager.get_subscriptions(
            req, context), GetTelemetrySubscriptionsResponse)

    def handle_push_telemetry(self, header: RequestHeader, req: PushTelemetryRequest,
                              conn: KafkaConnection) -> PushTelemetryResponse:
        return self._serve("PushTelemetry", header, conn, lambda context: self.manager.push(req, context),
                           PushTelemetryResponse)

    def _serve(self, api: str, header: RequestHeader, conn: KafkaConnection, serve: Callable[[ClientContext], R],
               failed: Callable[..., R]) -> R:
        """The manager's answer; INVALID_REQUEST (``failed``) when it fails, as Kafka's handler."""
        try:
            return serve(self._context(header, conn))
        except Exception:
            log.exception("%s from %s failed", api, conn.peer)
            return failed(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST)
