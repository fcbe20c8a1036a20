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
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from pybroker.protocol.errors import ProtocolError
from pybroker.protocol.frame import decode_request, encode_response
from pybroker.protocol.outbound import CONNECTION_ERRORS, OutboundConnection, receive_frame
from pybroker.protocol.sasl_client import SaslClientConfig
from pybroker.raft import raft_util as ru
from pybroker.raft.raft_message import InboundResponse, OutboundRequest

log = logging.getLogger(__name__)

MAX_FRAME_BYTES = 128 * 1024 * 1024
CLIENT_ID_PREFIX = "raft-client-"


class _Peer:
    def __init__(self, channel: KafkaNetworkChannel, node_id: int) -> None:
        self.channel = channel
        self.node_id = node_id
        self.send, self.receive = trio.open_memory_channel(math.inf)
        self.conn = OutboundConnection(channel.client_id, channel.ssl_context, channel.sasl)

    async def run(self) -> None:
        try:
            async for request in self.receive:
                await self._round_trip(request)
        finally:
            await self.conn.aclose()

    async def _round_trip(self, request: OutboundRequest) -> None:
        channel = self.channel
        error = None
        assert request.address is not None
        try:
            body = await self.conn.request(request.address, request.api_key, request.api_version, request.body,
                                           timeout_s=channel.request_timeout_ms / 1000,
                                           correlation_id=request.correlation_id)
        except trio.TooSlowError:
            error = ru.REQUEST_TIMED_OUT
        except CONNECTION_ERRORS as exc:
            log.debug("raft request to %s failed: %s", self.node_id, exc)
            error = ru.BROKER_NOT_AVAILABLE
        if error is not None:
            body = ru.error_response(request.api_key, error)
        channel.deliver(InboundResponse(self.node_id, request.correlation_id, request.api_key, body))


class KafkaNetworkChannel:
    """Sends OutboundRequests; their answers reach `deliver` (the driver's inbox)."""

    def __init__(self, nursery: trio.Nursery, deliver: Callable[[InboundResponse], None], *,
                 request_timeout_ms: int, client_id: str, ssl_context: ssl.SSLContext | None = None,
                 sasl: SaslClientConfig | None = None) -> None:
        self.ssl_context = ssl_context  # the controller listener's client TLS, None when it is plaintext
        self.sasl = sasl  # its SASL login, None unless it is SASL_*
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
            frame = await receive_frame(stream, MAX_FRAME_BYTES)
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
