"""SaslHandshake (17) and SaslAuthenticate (36) as KafkaApis sees them: the connection's
authenticator (``server/authentication.py``) takes them while a SASL connection
authenticates, so one reaching here came on a connection with nothing (more) to authenticate
and is answered ILLEGAL_SASL_STATE, as Kafka's KafkaApis answers."""

from __future__ import annotations

from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.framing import RequestHeader
from rivulet.protocol.messages.sasl_authenticate_request import SaslAuthenticateRequest
from rivulet.protocol.messages.sasl_authenticate_response import SaslAuthenticateResponse
from rivulet.protocol.messages.sasl_handshake_request import SaslHandshakeRequest
from rivulet.protocol.messages.sasl_handshake_response import SaslHandshakeResponse
from rivulet.server.handlers import Handler
from rivulet.server.network import KafkaConnection


class SaslHandlers:
    def handlers(self) -> dict[int, Handler]:
        return {17: self.handle_sasl_handshake, 36: self.handle_sasl_authenticate}

    def handle_sasl_handshake(self, header: RequestHeader, req: SaslHandshakeRequest,
                              conn: KafkaConnection) -> SaslHandshakeResponse:
        return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])

    def handle_sasl_authenticate(self, header: RequestHeader, req: SaslAuthenticateRequest,
                                 conn: KafkaConnection) -> SaslAuthenticateResponse:
        return SaslAuthenticateResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, auth_bytes=b"", session_lifetime_ms=0,
                                        error_message="SaslAuthenticate request received after successful "
                                                      "authentication")
