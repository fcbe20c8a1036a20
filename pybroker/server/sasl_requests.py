"""SaslHandshake (17) and SaslAuthenticate (36) after authentication (Kafka's KafkaApis
handleSaslHandshakeRequest / handleSaslAuthenticateRequest).

The exchange itself runs before the first request, in the listener's channel (net/sasl.py). A
request that reaches a handler arrives on an authenticated or a non-SASL connection, where both
are answered ILLEGAL_SASL_STATE (34), as Kafka answers them when re-authentication
(connections.max.reauth.ms, KIP-368) is off.
Concurrency: pure handlers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext


def handle_sasl_handshake(broker: Broker, ctx: RequestContext, req: SaslHandshakeRequest) -> SaslHandshakeResponse:
    return SaslHandshakeResponse(error_code=Errors.ILLEGAL_SASL_STATE, mechanisms=[])


def handle_sasl_authenticate(broker: Broker, ctx: RequestContext, req: SaslAuthenticateRequest
                             ) -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(error_code=Errors.ILLEGAL_SASL_STATE,
                                    error_message="SaslAuthenticate request received after successful authentication",
                                    auth_bytes=b"", session_lifetime_ms=0)
