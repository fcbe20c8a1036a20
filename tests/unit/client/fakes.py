"""A scripted in-memory socket for BrokerConnection tests: it decodes each request frame
with the server-side codec and queues the responder's answer bytes."""

from __future__ import annotations

import struct

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.frame import decode_request, encode_response
from pybroker.protocol.messages import ApiVersionsResponse, MetadataResponse


def api_versions_body(ranges: dict[int, tuple[int, int]]) -> ApiVersionsResponse:
    return ApiVersionsResponse(error_code=0, api_keys=[
        ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in ranges.items()])


class FakeSocket:
    """Answers each complete request frame with `responder(header, body) -> bytes`, and hands
    the answer back in pieces of the sizes in `chunks` (cycled)."""

    def __init__(self, responder, chunks=(1 << 20,)) -> None:
        self.responder = responder
        self.chunks = list(chunks)
        self.sent = bytearray()
        self.inbox = bytearray()
        self.requests: list = []
        self.closed = False
        self.timeouts: list[float] = []
        self._n = 0

    def settimeout(self, t: float) -> None:
        self.timeouts.append(t)

    def send(self, data) -> int:
        self.sent += bytes(data)
        while len(self.sent) >= 4:
            (size,) = struct.unpack_from(">i", self.sent, 0)
            if len(self.sent) < 4 + size:
                break
            frame = bytes(self.sent[4:4 + size])
            del self.sent[:4 + size]
            header, body = decode_request(frame)
            self.requests.append((header, body))
            self.inbox += self.responder(header, body)
        return len(data)

    def recv(self, n: int) -> bytes:
        if not self.inbox:
            return b""  # peer closed
        size = min(n, self.chunks[self._n % len(self.chunks)])
        self._n += 1
        out = bytes(self.inbox[:size])
        del self.inbox[:size]
        return out

    def close(self) -> None:
        self.closed = True


def serve(ranges, metadata=None):
    """A responder: ApiVersions with `ranges`, Metadata with a fixed body."""
    def responder(header, body):
        if header.request_api_key == ApiKey.API_VERSIONS:
            return b"".join(encode_response(ApiKey.API_VERSIONS, header.request_api_version,
                                            header.correlation_id, api_versions_body(ranges)))
        resp = metadata or MetadataResponse(cluster_id="c1", controller_id=1)
        return b"".join(encode_response(header.request_api_key, header.request_api_version,
                                        header.correlation_id, resp))
    return responder
