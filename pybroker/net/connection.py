"""One client connection: read a frame, dispatch it, write the answer, repeat.

Framing: a 4-byte big-endian size, then the request (header + body). A size above
socket.request.max.bytes (or negative) closes the connection, as Kafka's
InvalidReceiveException does; so do unknown API keys and undecodable requests. An
unsupported ApiVersions version is answered (v0 body, UNSUPPORTED_VERSION) so clients
can retry at a version we know; other unsupported versions close the connection.

Concurrency: one request in flight per connection, answered in order (Kafka mutes a
channel while its request is processed). Responses are lists of chunks: bytes go out with
send, `FileRegion`s with sendfile straight from the page cache.
"""

from __future__ import annotations

import errno
import logging
import socket as _stdsocket
import struct
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio

from pybroker._native import zerocopy
from pybroker.protocol.chunks import Chunk, FileRegion

log = logging.getLogger("pybroker.net")

_SIZE = struct.Struct(">i")
_RECV_CHUNK = 256 * 1024


class ConnectionClosed(Exception):
    """The peer closed its end."""


class CloseConnection(Exception):
    """Raised by a handler: close this connection without answering (Kafka's behaviour for
    unknown APIs, unsupported versions and undecodable requests)."""


class Connection:
    """State of one client connection (what handlers may need to know about it)."""

    __slots__ = ("sock", "peer", "listener_name", "client_software_name", "client_software_version",
                 "_buf", "_start", "_end", "busy", "read_scope", "requests")

    def __init__(self, sock: trio.socket.SocketType, peer: Any, listener_name: str) -> None:
        self.sock = sock
        self.peer = peer
        self.listener_name = listener_name
        self.client_software_name = ""
        self.client_software_version = ""
        self._buf = bytearray(_RECV_CHUNK)
        self._start = 0
        self._end = 0
        self.busy = False
        self.read_scope: trio.CancelScope | None = None
        self.requests = 0

    # ------------------------------------------------------------------ reading

    async def _fill(self, need: int) -> None:
        """Ensure at least `need` (<= the buffer size) buffered bytes after _start."""
        have = self._end - self._start
        if have >= need:
            return
        if len(self._buf) - self._start < need:
            # compact: move the partial frame to the front
            self._buf[:have] = self._buf[self._start:self._end]
            self._start, self._end = 0, have
        view = memoryview(self._buf)
        while self._end - self._start < need:
            n = await self.sock.recv_into(view[self._end:], len(self._buf) - self._end)
            if n == 0:
                raise ConnectionClosed()
            self._end += n

    async def read_frame(self, max_bytes: int) -> bytearray | None:
        """The next request frame (without its size), or None when the size is out of bounds.

        The frame is a fresh bytearray (writable, so Produce can assign offsets in place).
        Frames larger than the receive buffer are read straight into their own bytearray,
        so a 1 MiB produce is copied once, and the buffer never grows.
        """
        await self._fill(4)
        (size,) = _SIZE.unpack_from(self._buf, self._start)
        if size < 0 or size > max_bytes:
            return None
        start = self._start + 4
        if size + 4 <= len(self._buf):
            await self._fill(4 + size)
            start = self._start + 4
            frame = self._buf[start:start + size]
            self._start = start + size
            if self._start == self._end:
                self._start = self._end = 0
            return frame
        frame = bytearray(size)
        have = self._end - start
        frame[:have] = self._buf[start:self._end]
        self._start = self._end = 0
        view = memoryview(frame)
        while have < size:
            n = await self.sock.recv_into(view[have:], size - have)
            if n == 0:
                raise ConnectionClosed()
            have += n
        return frame

    # ------------------------------------------------------------------ writing

    async def write(self, chunks: Sequence[Chunk]) -> None:
        pending: list[bytes | bytearray | memoryview] = []
        for chunk in chunks:
            if isinstance(chunk, FileRegion):
                if pending:
                    await self._send_bytes(b"".join(pending))
                    pending = []
                await self._sendfile(chunk)
            else:
                pending.append(chunk)
        if pending:
            await self._send_bytes(pending[0] if len(pending) == 1 else b"".join(pending))

    async def _send_bytes(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        while view:
            n = await self.sock.send(view)
            view = view[n:]

    async def _sendfile(self, region: FileRegion) -> None:
        fd = self.sock.fileno()
        pos, remaining = region.position, region.length
        while remaining > 0:
            try:
                n = zerocopy.sendfile(fd, region.fd, pos, remaining)
            except OSError as exc:
                if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                    n = 0
                else:
                    raise
            if n == 0:
                await trio.lowlevel.wait_writable(self.sock)
                continue
            pos += n
            remaining -= n
        await trio.lowlevel.checkpoint()


Handler = Callable[[Connection, bytes], Awaitable[Sequence[Chunk] | None]]


async def serve_connection(conn: Connection, handler: Handler, max_request_bytes: int,
                           shutting_down: Callable[[], bool]) -> None:
    """The request loop of one connection; returns when the peer closes or we must close."""
    sock = conn.sock
    try:
        sock.setsockopt(_stdsocket.IPPROTO_TCP, _stdsocket.TCP_NODELAY, 1)
    except OSError:
        pass
    try:
        while not shutting_down():
            with trio.CancelScope() as scope:
                conn.read_scope = scope
                frame = await conn.read_frame(max_request_bytes)
            conn.read_scope = None
            if scope.cancelled_caught:
                return
            if frame is None:
                log.info("closing connection from %s: frame size above socket.request.max.bytes "
                         "(%d) or negative", conn.peer, max_request_bytes)
                return
            conn.busy = True
            conn.requests += 1
            try:
                chunks = await handler(conn, frame)
            except CloseConnection as exc:
                log.info("closing connection from %s: %s", conn.peer, exc)
                return
            if chunks is not None:
                await conn.write(chunks)
            conn.busy = False
    except ConnectionClosed:
        return
    except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        log.debug("connection %s ended: %s", conn.peer, exc)
        return
    except Exception:
        # a bug must cost one connection, never the broker
        log.exception("closing connection from %s after an internal error", conn.peer)
        return
    finally:
        conn.busy = False
        sock.close()
