"""Raft RPCs over TCP (Kafka's KafkaNetworkChannel), and a minimal server for them.

Outbound: one connection per destination, one request in flight on it at a time (the Raft
client never has two in flight to one node anyway), framed with pybroker.protocol.frame
(int32 size, request header v2, body) at the versions in raft_util.RAFT_API_VERSIONS. A
request that cannot be sent or answered within controller.quorum.request.timeout.ms closes the
connection and comes back to the client as an error response: BROKER_NOT_AVAILABLE for a
refused or broken connection, REQUEST_TIMED_OUT for a timeout (as Kafka's channel does for a
disconnect or a timeout). No ApiVersions exchange: pybroker nodes speak the same versions.

Inbound: `serve_raft_connection` reads request frames from one connection and answers each
through a handler (the Raft driver's `handle_request`), one at a time and in order, as every
pybroker connection does. The broker's dispatcher will route Vote, BeginQuorumEpoch,
EndQuorumEpoch, Fetch (from a replica), FetchSnapshot and DescribeQuorum to the same handler;
until then `serve_raft_listeners` serves a controller listener on its own (tests, tools).

Concurrency: trio tasks in the driver's nursery; responses are handed to the driver through a
callback that only enqueues.
"""

from __future__ import annotations

import logging
import math
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from pybroker.protocol.errors import ProtocolError
from pybroker.protocol.frame import decode_request, decode_response, encode_request, encode_response
from pybroker.raft import raft_util as ru
from pybroker.raft.raft_message import InboundResponse, OutboundRequest

log = logging.getLogger(__name__)

_INT32 = struct.Struct(">i")
MAX_FRAME_BYTES = 128 * 1024 * 1024
CLIENT_ID_PREFIX = "raft-client-"


async def receive_exactly(stream: trio.abc.ReceiveStream, n: int) -> bytearray:
    buf = bytearray()
    while len(buf) < n:
        chunk = await stream.receive_some(n - len(buf))
        if not chunk:
            raise EOFError("connection closed")
        buf += chunk
    return buf


async def receive_frame(stream: trio.abc.ReceiveStream) -> bytearray:
    (size,) = _INT32.unpack(await receive_exactly(stream, 4))
    if not 0 <= size <= MAX_FRAME_BYTES:
        raise ProtocolError(f"frame size {size} out of range")
    return await receive_exactly(stream, size)


class _Peer:
    def __init__(self, channel: KafkaNetworkChannel, node_id: int) -> None:
        self.channel = channel
        self.node_id = node_id
        self.send, self.receive = trio.open_memory_channel(math.inf)
        self.stream: trio.SocketStream | None = None
        self.address: tuple[str, int] | None = None

    async def _close(self) -> None:
        stream, self.stream = self.stream, None
        if stream is not None:
            with trio.CancelScope(shield=True):
                await stream.aclose()

    async def run(self) -> None:
        try:
            async for request in self.receive:
                await self._round_trip(request)
        finally:
            await self._close()

    async def _round_trip(self, request: OutboundRequest) -> None:
        channel = self.channel
        error = None
        try:
            with trio.fail_after(channel.request_timeout_ms / 1000):
                if self.stream is None or self.address != request.address:
                    await self._close()
                    assert request.address is not None
                    self.stream = await trio.open_tcp_stream(*request.address)
                    self.address = request.address
                frame = encode_request(request.api_key, request.api_version, request.correlation_id,
                                       channel.client_id, request.body)
                await self.stream.send_all(frame)
                response = await receive_frame(self.stream)
            correlation_id, body = decode_response(request.api_key, request.api_version, response)
            if correlation_id != request.correlation_id:
                raise ProtocolError(f"correlation id {correlation_id}, expected {request.correlation_id}")
        except trio.TooSlowError:
            error = ru.REQUEST_TIMED_OUT
        except (OSError, EOFError, trio.BrokenResourceError, trio.ClosedResourceError, ProtocolError) as exc:
            log.debug("raft request to %s failed: %s", self.node_id, exc)
            error = ru.BROKER_NOT_AVAILABLE
        if error is not None:
            await self._close()
            body = ru.error_response(request.api_key, error)
        channel.deliver(InboundResponse(self.node_id, request.correlation_id, request.api_key, body))


class KafkaNetworkChannel:
    """Sends OutboundRequests; their answers reach `deliver` (the driver's inbox)."""

    def __init__(self, nursery: trio.Nursery, deliver: Callable[[InboundResponse], None], *,
                 request_timeout_ms: int, client_id: str) -> None:
        self.nursery = nursery
        self.deliver = deliver
        self.request_timeout_ms = request_timeout_ms
        self.client_id = client_id
        self._peers: dict[int, _Peer] = {}

    def send(self, request: OutboundRequest) -> None:
        if request.address is None:
            self.deliver(InboundResponse(request.destination, request.correlation_id, request.api_key,
                                         ru.error_response(request.api_key, ru.BROKER_NOT_AVAILABLE)))
            return
        peer = self._peers.get(request.destination)
        if peer is None:
            peer = self._peers[request.destination] = _Peer(self, request.destination)
            self.nursery.start_soon(peer.run)
        peer.send.send_nowait(request)


RaftHandler = Callable[[int, int, Any], Awaitable[Any]]


async def serve_raft_connection(stream: trio.SocketStream, handler: RaftHandler) -> None:
    """Answer Raft requests on one connection until it closes; anything else closes it."""
    try:
        while True:
            frame = await receive_frame(stream)
            header, body = decode_request(frame)
            api_key = header.request_api_key
            if api_key not in ru.RAFT_APIS:
                log.info("closing a controller connection that sent api key %d", api_key)
                return
            response = await handler(api_key, header.request_api_version, body)
            chunks = encode_response(api_key, header.request_api_version, header.correlation_id, response)
            await stream.send_all(b"".join(bytes(c) for c in chunks))
    except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError, ProtocolError):
        pass
    finally:
        with trio.CancelScope(shield=True):
            await stream.aclose()


async def serve_raft_listeners(handler: RaftHandler, listeners: list[trio.SocketListener], *,
                               task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED
                               ) -> None:
    async def on_connection(stream: trio.SocketStream) -> None:
        await serve_raft_connection(stream, handler)

    await trio.serve_listeners(on_connection, listeners, task_status=task_status)
