"""One outbound request/response connection between pybroker nodes (the client half of Kafka's
NetworkClient, reduced to what inter-node traffic needs).

Wire format: Kafka's request frames (int32 size, request header, body) from
pybroker.protocol.frame; one request in flight per connection, so a response is the next frame
and must carry the request's correlation id. No ApiVersions exchange: pybroker nodes speak the
same versions.

Users: the replica fetcher (Fetch, OffsetForLeaderEpoch to a leader), the transaction marker
channel (WriteTxnMarkers), the controller channel (forwarded admin requests, AlterPartition,
broker heartbeats) and the Raft network channel (Vote, Fetch, ... between voters). Each keeps
its own retry policy; this module only moves frames.

Failures: anything that breaks the exchange — a refused or reset connection, EOF, a frame size
out of range, a response that does not decode or answers another correlation id, or the
caller's timeout cancelling the exchange mid-way — closes the connection, so the next request
starts on a fresh one (a half-read response would desynchronise the stream). The caller sees
these as CONNECTION_ERRORS (trio.TooSlowError when it set a deadline). An encoding error is a
bug in the request, not a network failure: it raises RequestEncodingError and leaves the connection
open, so a caller's retry loop does not mistake it for a dead peer and retry until its timeout.

A kept connection the peer has closed meanwhile (its connections.max.idle.ms expiry: 10 minutes
without a request, as between two transactions' AddPartitionsToTxn or markers) is noticed before
it is used: one unused for `STALE_CHECK_S` or more is polled, and a readable one (EOF, a reset, or
bytes nobody asked for) is replaced by a new connection instead of failing the request. (Kafka's
NetworkClient closes its own connections idle that long instead.) A connection in steady use (a
follower's fetches) never pays for the poll.

TLS: with an `ssl_context` (the peer's listener is SSL: the node's client context for it,
security/ssl_factory.client_context) the TCP stream is wrapped in a trio.SSLStream and the
handshake runs as part of connecting, under the caller's timeout; the server name is the
address's host (checked against the peer's certificate when the context checks host names).
A failed handshake is an ssl.SSLError, one of CONNECTION_ERRORS (OSError), retried as any refused
connection.

SASL: with `sasl` (the peer's listener is SASL_PLAINTEXT or SASL_SSL) the login runs right after
the TCP (and TLS) connect, under the same timeout (protocol/sasl_client.py); a refused login is a
SaslClientError, a ConnectionError, so it is retried and logged as a refused connection is.

Concurrency: a trio.Lock serialises requests of several tasks on one connection; the close on
failure is shielded so a cancelled caller still releases the socket.
"""

from __future__ import annotations

import contextlib
import select
import ssl
import struct
from typing import Any

import trio

from pybroker.protocol._generated.api_keys import ApiKey
from pybroker.protocol.api_message import ApiMessage
from pybroker.protocol.errors import ProtocolError
from pybroker.protocol.frame import decode_response, encode_request
from pybroker.protocol.messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from pybroker.protocol.sasl_client import (
    BLOCKING_MECHANISMS,
    SaslClientConfig,
    SaslClientError,
    tokens,
)

_INT32 = struct.Struct(">i")

# Kafka's socket.request.max.bytes is 100 MiB for requests; responses between nodes are bounded
# by replica.fetch.response.max.bytes (10 MiB default) but a misconfigured node may ask for
# more: large enough for any legitimate response, small enough to catch a desynchronised stream.
MAX_FRAME_BYTES = 256 * 1024 * 1024
STALE_CHECK_S = 1.0  # a kept connection unused this long is polled for a close by the peer before use

# What a failed exchange raises (the connection is closed by then).
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError, EOFError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, ProtocolError)


class RequestEncodingError(Exception):
    """A request this node cannot encode: a bug in the request, never retried as a network
    failure (not one of CONNECTION_ERRORS, although the codec raises ProtocolError subclasses
    such as UnsupportedVersionError for some of these)."""


async def receive_exactly(stream: trio.abc.ReceiveStream, n: int) -> bytearray:
    """`n` bytes from `stream`; EOFError if the peer closes first."""
    buf = bytearray()
    while len(buf) < n:
        chunk = await stream.receive_some(n - len(buf))
        if not chunk:
            raise EOFError("connection closed by the peer")
        buf += chunk
    return buf


async def receive_frame(stream: trio.abc.ReceiveStream, max_bytes: int = MAX_FRAME_BYTES) -> bytearray:
    """One size-prefixed frame's payload; ProtocolError for a size out of range."""
    (size,) = _INT32.unpack(await receive_exactly(stream, 4))
    if not 0 <= size <= max_bytes:
        raise ProtocolError(f"frame size {size} out of range")
    return await receive_exactly(stream, size)


class OutboundConnection:
    """A connection to one node address at a time, reopened on demand (see the module docstring).

    `request()` connects when there is no connection or the address changed (a node that moved,
    or another leader), sends one request and returns the decoded response body."""

    def __init__(self, client_id: str, ssl_context: ssl.SSLContext | None = None,
                 sasl: SaslClientConfig | None = None) -> None:
        self.client_id = client_id
        self.ssl_context = ssl_context
        self.sasl = sasl
        self._lock = trio.Lock()
        self._stream: trio.SocketStream | trio.SSLStream[trio.SocketStream] | None = None
        self._socket: trio.socket.SocketType | None = None
        self._address: tuple[str, int] | None = None
        self._correlation_id = 0
        self._last_used = 0.0  # trio time the last exchange ended

    @property
    def connected(self) -> bool:
        return self._stream is not None

    async def request(self, address: tuple[str, int], api_key: int, version: int, body: ApiMessage, *,
                      timeout_s: float | None = None, correlation_id: int | None = None) -> Any:
        """The response body to `body`; CONNECTION_ERRORS on failure (trio.TooSlowError after
        `timeout_s`, the connection included). `correlation_id`: the caller's own (the Raft
        client numbers its requests), else the next of this connection's."""
        if correlation_id is None:
            self._correlation_id += 1
            correlation_id = self._correlation_id
        # encoded before any I/O: an unencodable request raises here, the connection untouched
        try:
            frame = encode_request(api_key, version, correlation_id, self.client_id, body)
        except (ProtocolError, ValueError) as exc:
            raise RequestEncodingError(f"cannot encode {type(body).__name__} v{version}: {exc}") from exc
        async with self._lock:
            try:
                with trio.fail_after(timeout_s) if timeout_s is not None else contextlib.nullcontext():
                    if self._stream is None or self._address != address or self._closed_by_peer():
                        await self._close()
                        self._stream = await self._connect(address)
                        self._address = address
                    await self._stream.send_all(frame)
                    payload = await receive_frame(self._stream)
                got, response = decode_response(api_key, version, payload)
                if got != correlation_id:
                    raise ProtocolError(f"correlation id {got}, expected {correlation_id}")
            except BaseException:
                await self._close()
                raise
            self._last_used = trio.current_time()
            return response

    async def _connect(self, address: tuple[str, int]) -> trio.SocketStream | trio.SSLStream[trio.SocketStream]:
        tcp = await trio.open_tcp_stream(*address)
        self._socket = tcp.socket
        stream: trio.SocketStream | trio.SSLStream[trio.SocketStream] = tcp
        try:
            if self.ssl_context is not None:
                stream = trio.SSLStream(tcp, self.ssl_context, server_hostname=address[0])
                await stream.do_handshake()
            if self.sasl is not None:
                await self._login(stream, self.sasl, address[0])
        except BaseException:
            with trio.CancelScope(shield=True):
                await tcp.aclose()  # the socket itself: a TLS close_notify could wait on a dead peer
            raise
        return stream

    async def _exchange(self, stream: trio.abc.Stream, api_key: int, version: int, body: ApiMessage) -> Any:
        self._correlation_id += 1
        await stream.send_all(encode_request(api_key, version, self._correlation_id, self.client_id, body))
        got, response = decode_response(api_key, version, await receive_frame(stream))
        if got != self._correlation_id:
            raise ProtocolError(f"correlation id {got}, expected {self._correlation_id}")
        return response

    async def _login(self, stream: trio.abc.Stream, sasl: SaslClientConfig, host: str) -> None:
        """SaslHandshake v1 + SaslAuthenticate v2 until the mechanism is done; SaslClientError.
        A mechanism that may wait on the network for its tokens (GSSAPI asks the KDC) is stepped
        on a worker thread."""
        hs = await self._exchange(stream, ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism=sasl.mechanism))
        assert isinstance(hs, SaslHandshakeResponse)
        if hs.error_code:
            raise SaslClientError(f"SASL mechanism {sasl.mechanism} refused (error {hs.error_code}); the peer offers "
                                  f"{', '.join(hs.mechanisms)}")
        gen = tokens(sasl, host)

        def advance(reply: bytes | None) -> bytes | None:
            """The next token; None when the login is complete."""
            try:
                return next(gen) if reply is None else gen.send(reply)
            except StopIteration:
                return None

        async def step(reply: bytes | None) -> bytes | None:
            if sasl.mechanism in BLOCKING_MECHANISMS:
                # abandoned on cancel: a KDC that does not answer must not outlast the login timeout
                return await trio.to_thread.run_sync(advance, reply, abandon_on_cancel=True)
            return advance(reply)

        token = await step(None)
        while token is not None:
            resp = await self._exchange(stream, ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=token))
            assert isinstance(resp, SaslAuthenticateResponse)
            if resp.error_code:
                raise SaslClientError(f"SASL {sasl.mechanism} login as {sasl.username or 'the token principal'} "
                                      f"refused: {resp.error_message}")
            token = await step(bytes(resp.auth_bytes))

    def _closed_by_peer(self) -> bool:
        """Is the kept connection, unused for STALE_CHECK_S or more, readable (closed by the peer)?
        Nothing is due on it between two exchanges, so anything readable ends it."""
        if self._stream is None or trio.current_time() - self._last_used < STALE_CHECK_S:
            return False
        poller = select.poll()
        assert self._socket is not None
        poller.register(self._socket.fileno(), select.POLLIN)
        return bool(poller.poll(0))

    async def _close(self) -> None:
        stream, self._stream = self._stream, None
        self._address = None
        self._socket = None
        if stream is not None:
            with trio.CancelScope(shield=True):
                await stream.aclose()

    async def aclose(self) -> None:
        await self._close()

