"""Request and response frames: size prefix, headers, body codecs.

Wire format: every frame is an int32 size followed by that many bytes. A request is
header + body, the header being v1 (api_key int16, api_version int16, correlation_id
int32, client_id nullable int16-prefixed string) for classic versions and v2 (the same
plus a tagged-field section; client_id stays int16-prefixed) for flexible ones. A
response is header + body, the header being v0 (correlation_id) or v1 (+ tagged fields)
for flexible versions, except ApiVersions whose response header is always v0.

Conventions: `decode_*` take the frame *without* its size prefix (the connection reads
the size, then the frame); `encode_*` return frames *with* the prefix.

Server side: `decode_request`, `encode_response`, `encode_api_versions_unsupported`.
Client side (tests, CLI, Spark connector): `encode_request`, `decode_response`.
Errors: `UnknownApiKeyError`, `UnsupportedVersionError` and `ProtocolError` from
pybroker.protocol.errors, carrying whatever header fields were read. Kafka closes the
connection on all three, except that an ApiVersions request at an unsupported version is
answered with `encode_api_versions_unsupported` (CLIENTS.md pitfall 2).
Concurrency: pure functions.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

from pybroker.protocol._generated.api_versions_response import ApiVersionsResponse
from pybroker.protocol._generated.request_header import RequestHeader
from pybroker.protocol.api_keys import (
    REQUEST_CLASSES,
    RESPONSE_CLASSES,
    VALID_VERSIONS,
    ApiKey,
    request_header_version,
    response_header_version,
)
from pybroker.protocol.api_message import ApiMessage, as_memoryview
from pybroker.protocol.chunks import Chunk, FileRegion
from pybroker.protocol.errors import ProtocolError, UnknownApiKeyError, UnsupportedVersionError
from pybroker.protocol.primitives import MalformedDataError, read_tagged_fields_raw

__all__ = [
    "RequestHeader",
    "decode_request",
    "encode_response",
    "encode_api_versions_unsupported",
    "encode_request",
    "decode_response",
    "frame_size",
]

_KEY_VERSION_CORRELATION = struct.Struct(">hhi")
_INT32 = struct.Struct(">i")
_DECODE_ERRORS = (
    struct.error,
    IndexError,
    ValueError,
    TypeError,
    MalformedDataError,
    OverflowError,
)
_HEADER_DECODERS = RequestHeader._DECODERS


def decode_request(
    frame: bytes | bytearray | memoryview,
    supported: Mapping[int, tuple[int, int]] | None = None,
) -> tuple[RequestHeader, ApiMessage]:
    """Parse a request frame (no size prefix) into (header, body).

    `supported` narrows the accepted versions per api key (default: every version the
    specs define). The body's `records` fields are memoryview slices of `frame`.
    """
    mv = as_memoryview(frame)
    try:
        api_key, api_version, correlation_id = _KEY_VERSION_CORRELATION.unpack_from(mv, 0)
    except struct.error:
        raise ProtocolError(f"request header truncated ({len(mv)} bytes)") from None
    versions = VALID_VERSIONS.get(api_key)
    if versions is None:
        raise UnknownApiKeyError(
            f"unknown api key {api_key}",
            correlation_id=correlation_id,
            api_key=api_key,
            api_version=api_version,
        )
    header_version = request_header_version(api_key, api_version)
    try:
        header, pos = _HEADER_DECODERS[header_version](mv, 0)
    except _DECODE_ERRORS as e:
        raise ProtocolError(
            f"malformed request header: {e}",
            correlation_id=correlation_id,
            api_key=api_key,
            api_version=api_version,
        ) from e
    if supported is not None:
        enabled = supported.get(api_key)
        if enabled is None:
            # a key the codec knows but this node does not serve: Kafka's SocketServer refuses it
            # before decoding the body ("... which is not enabled") and closes the connection
            raise UnknownApiKeyError(
                f"api key {api_key} ({ApiKey(api_key).name}) v{api_version} is not enabled",
                correlation_id=correlation_id,
                api_key=api_key,
                api_version=api_version,
                client_id=header.client_id,
            )
        versions = enabled
    if not versions[0] <= api_version <= versions[1]:
        raise UnsupportedVersionError(
            f"{ApiKey(api_key).name} v{api_version} is not supported (range {versions[0]}-{versions[1]})",
            correlation_id=correlation_id,
            api_key=api_key,
            api_version=api_version,
            client_id=header.client_id,
        )
    cls = REQUEST_CLASSES[api_key]
    try:
        body, _end = cls._DECODERS[api_version](mv, pos)
    except _DECODE_ERRORS as e:
        raise ProtocolError(
            f"malformed {cls.__name__} v{api_version}: {e}",
            correlation_id=correlation_id,
            api_key=api_key,
            api_version=api_version,
            client_id=header.client_id,
        ) from e
    return header, body


def frame_size(chunks: list[Any]) -> int:
    """Total byte length of a list of chunks (bytes-like or FileRegion)."""
    n = 0
    for c in chunks:
        n += c.length if type(c) is FileRegion else len(c)
    return n


def encode_response(
    api_key: int, api_version: int, correlation_id: int, body: ApiMessage
) -> list[Chunk]:
    """A response frame with its size prefix, as its encoded pieces in order (bytes-like
    pieces and FileRegions); the connection joins the bytes and sendfiles the regions."""
    parts = body.encode_parts(api_version)
    if response_header_version(api_key, api_version) == 0:
        size = 4 + frame_size(parts)
        head = _INT32.pack(size) + _INT32.pack(correlation_id)
    else:
        size = 5 + frame_size(parts)
        head = _INT32.pack(size) + _INT32.pack(correlation_id) + b"\x00"
    parts.insert(0, head)
    return parts


def encode_api_versions_unsupported(
    correlation_id: int, min_version: int = 0, max_version: int = 4
) -> list[Chunk]:
    """Answer an ApiVersions request whose version we do not speak.

    Kafka replies with a v0 body (header v0) holding UNSUPPORTED_VERSION (35) and one
    entry: the ApiVersions range itself (ApiVersionsRequest.getErrorResponse). The client
    retries at a version in that range (kafka-python at its max, librdkafka at 0).
    """
    body = ApiVersionsResponse(
        error_code=35,
        api_keys=[
            ApiVersionsResponse.ApiVersion(
                api_key=int(ApiKey.API_VERSIONS), min_version=min_version, max_version=max_version
            )
        ],
    )
    return encode_response(ApiKey.API_VERSIONS, 0, correlation_id, body)


def encode_request(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, body: ApiMessage
) -> bytes:
    """A request frame with its size prefix (client side)."""
    header = RequestHeader(
        request_api_key=api_key,
        request_api_version=api_version,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    head = header.encode(request_header_version(api_key, api_version))
    payload = body.encode(api_version)
    return _INT32.pack(len(head) + len(payload)) + head + payload


def decode_response(
    api_key: int, api_version: int, frame: bytes | bytearray | memoryview
) -> tuple[int, ApiMessage]:
    """Parse a response frame (no size prefix) into (correlation_id, body)."""
    mv = as_memoryview(frame)
    cls = RESPONSE_CLASSES.get(api_key)
    if cls is None:
        raise UnknownApiKeyError(f"unknown api key {api_key}", api_key=api_key)
    decoder = cls._DECODERS.get(api_version)
    if decoder is None:
        raise UnsupportedVersionError(
            f"{cls.__name__} has no version {api_version}", api_key=api_key, api_version=api_version
        )
    correlation_id = None
    try:
        (correlation_id,) = _INT32.unpack_from(mv, 0)
        pos = 4
        if response_header_version(api_key, api_version) == 1:
            _tags, pos = read_tagged_fields_raw(mv, pos)
        body, _end = decoder(mv, pos)
    except _DECODE_ERRORS as e:
        raise ProtocolError(
            f"malformed {cls.__name__} v{api_version}: {e}",
            correlation_id=correlation_id,
            api_key=api_key,
            api_version=api_version,
        ) from e
    return correlation_id, body
