"""SaslHandshake (17) and SaslAuthenticate (36) after authentication (Kafka's KafkaApis
handleSaslHandshakeRequest / handleSaslAuthenticateRequest).

The exchange itself runs before the first request, in the listener's channel (net/sasl.py), and
so does a re-authentication (KIP-368: a SaslHandshake on a connection whose session expires). A
request that reaches a handler arrives on an authenticated or a non-SASL connection where no
re-authentication is possible (no session expiry, or one begun less than a second ago), and is
answered ILLEGAL_SASL_STATE (34), as Kafka answers it.

`illegal_state_response` is what the exchange (net/sasl.py) answers when another request comes
where a SaslAuthenticate was due: that request's own error response with ILLEGAL_SASL_STATE
(Kafka's buildResponseOnAuthenticateFailure with getErrorResponse), for the APIs that have one
(server/error_responses.py); None (closed without an answer) for the others.
Concurrency: pure functions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pybroker.protocol.chunks import Chunk
from pybroker.protocol.errors import Errors, ProtocolError
from pybroker.protocol.frame import decode_request, encode_response
from pybroker.protocol.messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from pybroker.server.api_versions import SUPPORTED
from pybroker.server.error_responses import ERROR_RESPONSES

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


def illegal_state_response(frame: bytes | bytearray, message: str) -> list[Chunk] | None:
    """The request's own error response carrying ILLEGAL_SASL_STATE and `message`, or None."""
    try:
        header, body = decode_request(frame, SUPPORTED)
    except ProtocolError:
        return None
    build = ERROR_RESPONSES.get(header.request_api_key)
    if build is None:
        return None
    version = header.request_api_version
    return encode_response(header.request_api_key, version, header.correlation_id,
                           build(body, version, Errors.ILLEGAL_SASL_STATE, message))
