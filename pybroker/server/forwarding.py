"""Admin requests reach the active controller (KIP-590 forwarding: Kafka's ForwardingManager and
the Envelope API, as Kafka 4 brokers forward).

Broker side (`forward`): a request for an API in FORWARDED_APIS, arriving on a broker listener
of a node whose own controller is not the active one, is wrapped whole, header and body as the
client sent them, in an EnvelopeRequest with the caller's principal (Kafka's DefaultPrincipalData
bytes, int16 version first) and IP address, and sent to the active controller's controller
listener (server/controller_channel.py; NOT_CONTROLLER answers are retried on the new
controller until request.timeout.ms). The envelope's response_data is the inner response,
header included, for the original correlation id: it goes back to the client byte for byte.
Outcomes as Kafka's: no controller in time -> the API's error response with
REQUEST_TIMED_OUT; an envelope-level error -> UNKNOWN_SERVER_ERROR; UNSUPPORTED_VERSION ->
the client connection is closed. IncrementalAlterConfigs and AlterConfigs check BROKER
resources on the receiving broker first and forward the rest from their handler
(`forward_body`), as Kafka's ConfigAdminManager does.

Controller side (server/controller_apis.py `_envelope`): the inner request runs through the same
handler, with a context built from the envelope (its principal and client address,
`forwarded=True`); a handler refusing with NOT_CONTROLLER makes the envelope answer NOT_CONTROLLER,
so the forwarding broker retries at the new controller (Kafka's RequestChannel does the same).
An envelope that cannot be opened is answered with the envelope's error code, as Kafka's
EnvelopeUtils: an undecodable principal PRINCIPAL_DESERIALIZATION_FAILURE, a client address of
other than 4 or 16 bytes INVALID_REQUEST, an inner request that does not parse at its version
UNSUPPORTED_VERSION, one for an API that is not forwarded INVALID_REQUEST
(`decode_principal`, `forwarded_peer`, `unwrap`).

Concurrency: trio thread; a forwarded request holds its client connection until answered.
"""

from __future__ import annotations

import ipaddress
import logging
import struct
from typing import TYPE_CHECKING, Any

from pybroker.net.connection import CloseConnection
from pybroker.protocol.api_keys import VALID_VERSIONS, ApiKey
from pybroker.protocol.chunks import Chunk
from pybroker.protocol.errors import Errors, KafkaError, ProtocolError, UnknownApiKeyError
from pybroker.protocol.frame import decode_request, encode_request, encode_response
from pybroker.protocol.messages import DefaultPrincipalData, EnvelopeRequest, EnvelopeResponse
from pybroker.server.controller_channel import ControllerUnavailable
from pybroker.server.error_responses import ERROR_RESPONSES

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

log = logging.getLogger("pybroker.forwarding")

ENVELOPE_VERSION = 0
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")

# forwarded whole by the dispatcher (KafkaApis.maybeForwardToController / forwardToControllerOrFail)
FORWARDED_APIS = frozenset({
    ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.CREATE_PARTITIONS, ApiKey.CREATE_ACLS,
    ApiKey.DELETE_ACLS, ApiKey.ALTER_CLIENT_QUOTAS, ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
    ApiKey.UPDATE_FEATURES, ApiKey.ELECT_LEADERS, ApiKey.ALTER_PARTITION_REASSIGNMENTS,
    ApiKey.LIST_PARTITION_REASSIGNMENTS, ApiKey.DESCRIBE_QUORUM,
})
# forwarded by their handlers after the broker's own checks (delegation tokens: allowTokenRequests)
HANDLER_FORWARDED_APIS = frozenset({ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS,
                                    ApiKey.CREATE_DELEGATION_TOKEN, ApiKey.RENEW_DELEGATION_TOKEN,
                                    ApiKey.EXPIRE_DELEGATION_TOKEN})
ENVELOPED_APIS = FORWARDED_APIS | HANDLER_FORWARDED_APIS


def encode_principal(principal: str) -> bytes:
    """Kafka's DefaultKafkaPrincipalBuilder.serialize: version-prefixed DefaultPrincipalData."""
    kind, _, name = principal.partition(":")
    return _INT16.pack(0) + DefaultPrincipalData(type=kind, name=name, token_authenticated=False).encode(0)


def decode_principal(data: bytes | memoryview | None) -> str:
    """Kafka's DefaultKafkaPrincipalBuilder.deserialize: "type:name" from version-prefixed
    DefaultPrincipalData. KafkaError(PRINCIPAL_DESERIALIZATION_FAILURE) for anything else (none,
    too short, an unknown version, a malformed body), as Kafka's EnvelopeUtils answers."""
    try:
        (version,) = _INT16.unpack_from(data or b"", 0)
        body = DefaultPrincipalData.decode(memoryview(data or b"")[2:], version)
    except (struct.error, ProtocolError) as exc:
        raise KafkaError(Errors.PRINCIPAL_DESERIALIZATION_FAILURE,
                         f"Failed to deserialize client principal from envelope: {exc}") from None
    return f"{body.type}:{body.name}"


def _client_address(ctx: RequestContext) -> bytes:
    peer = ctx.conn.peer
    host = peer[0] if isinstance(peer, tuple) else peer
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).packed
    except ValueError:
        return ipaddress.ip_address("127.0.0.1").packed


def _timeout_s(broker: Broker) -> float:
    return float(broker.config["request.timeout.ms"]) / 1000


async def _send_envelope(broker: Broker, ctx: RequestContext, request_data: bytes) -> EnvelopeResponse | None:
    """The envelope's answer; None when no controller answered in time."""
    env = EnvelopeRequest(request_data=request_data, request_principal=encode_principal(ctx.principal),
                          client_host_address=_client_address(ctx))
    try:
        resp: EnvelopeResponse = await broker.forwarding_channel.send(ApiKey.ENVELOPE, ENVELOPE_VERSION, env,
                                                                      _timeout_s(broker))
    except ControllerUnavailable as exc:
        log.info("forwarding %s from %s failed: %s", ApiKey(ctx.api_key).name, ctx.conn.peer, exc)
        return None
    return resp


def _error_chunks(ctx: RequestContext, body: Any, code: int, message: str | None) -> list[Chunk]:
    build = ERROR_RESPONSES.get(ctx.api_key)
    if build is None:
        raise CloseConnection(f"{ApiKey(ctx.api_key).name}: forwarding failed ({Errors(code).name})")
    return encode_response(ctx.api_key, ctx.api_version, ctx.correlation_id, build(body, ctx.api_version, code, message))


async def forward(broker: Broker, ctx: RequestContext, frame: bytes | bytearray | memoryview, body: Any) -> list[Chunk]:
    """Forward a whole client request to the active controller; the response frame to send."""
    resp = await _send_envelope(broker, ctx, bytes(frame))
    if resp is None:
        return _error_chunks(ctx, body, Errors.REQUEST_TIMED_OUT, "Timed out waiting for the active controller")
    if resp.error_code == Errors.UNSUPPORTED_VERSION:
        raise CloseConnection("the controller does not support this request version")
    if resp.error_code or resp.response_data is None:
        return _error_chunks(ctx, body, Errors.UNKNOWN_SERVER_ERROR, None)
    data = bytes(resp.response_data)
    return [_INT32.pack(len(data)) + data]


async def forward_body(broker: Broker, ctx: RequestContext, body: Any) -> Any:
    """Forward `body` (a request of ctx's API and version, e.g. the part of an AlterConfigs the
    broker did not answer itself) and return the controller's decoded response. Raises
    KafkaError(REQUEST_TIMED_OUT / UNKNOWN_SERVER_ERROR) when it cannot."""
    from pybroker.protocol.frame import decode_response

    frame = encode_request(ctx.api_key, ctx.api_version, ctx.correlation_id, ctx.client_id, body)[4:]
    resp = await _send_envelope(broker, ctx, frame)
    if resp is None:
        raise KafkaError(Errors.REQUEST_TIMED_OUT, "Timed out waiting for the active controller")
    if resp.error_code or resp.response_data is None:
        raise KafkaError(Errors.UNKNOWN_SERVER_ERROR, None)
    _, inner = decode_response(ctx.api_key, ctx.api_version, bytes(resp.response_data))
    return inner


def forwarded_peer(address: bytes | memoryview) -> tuple[str, int]:
    """The client's address an envelope carries (4 or 16 bytes, Java's InetAddress.getByAddress);
    KafkaError(INVALID_REQUEST) for any other length."""
    try:
        return str(ipaddress.ip_address(bytes(address))), 0
    except ValueError:
        raise KafkaError(Errors.INVALID_REQUEST, "Failed to parse client address from envelope") from None


def unwrap(env: EnvelopeRequest, supported: dict[int, tuple[int, int]]) -> tuple[Any, Any]:
    """(inner header, inner body) of an envelope, or KafkaError with Kafka's EnvelopeUtils code:
    UNSUPPORTED_VERSION when the inner header or body cannot be parsed at its version (so that
    the envelope's own faults, INVALID_REQUEST, stay apart), INVALID_REQUEST for an API that is
    not forwarded."""
    try:
        header, inner = decode_request(bytes(env.request_data), supported)
    except UnknownApiKeyError as exc:
        log.info("refusing an envelope: %s", exc)
        if exc.api_key in VALID_VERSIONS:  # known, but not served here: not forwardable
            raise KafkaError(Errors.INVALID_REQUEST, str(exc)) from None
        raise KafkaError(Errors.UNSUPPORTED_VERSION, f"Failed to parse request header from envelope: {exc}") from None
    except ProtocolError as exc:
        log.info("refusing an envelope: %s", exc)
        raise KafkaError(Errors.UNSUPPORTED_VERSION, f"Failed to parse forwarded request: {exc}") from None
    if header.request_api_key not in ENVELOPED_APIS:
        log.info("refusing an envelope holding %s", ApiKey(header.request_api_key).name)
        raise KafkaError(Errors.INVALID_REQUEST,
                         f"API {ApiKey(header.request_api_key).name} is not enabled or is not eligible for forwarding")
    return header, inner


def envelope_answer(api_key: int, version: int, correlation_id: int, response: Any) -> EnvelopeResponse:
    data = b"".join(bytes(c) for c in encode_response(api_key, version, correlation_id, response))
    return EnvelopeResponse(response_data=data[4:], error_code=0)
