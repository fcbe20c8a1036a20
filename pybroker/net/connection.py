"""One client connection: read a frame, dispatch it, write the answer, repeat.

Framing: a 4-byte big-endian size, then the request (header + body). A size above
socket.request.max.bytes (or negative) closes the connection, as Kafka's
InvalidReceiveException does; so do unknown API keys and undecodable requests. An
unsupported ApiVersions version is answered (v0 body, UNSUPPORTED_VERSION) so clients
can retry at a version we know; other unsupported versions close the connection.

Concurrency: one request in flight per connection, answered in order (Kafka mutes a
channel while its request is processed). Responses are lists of chunks: bytes go out with
send, `FileRegion`s with sendfile straight from the page cache.

Receive buffer: sized to what the connection receives. It starts at `_RECV_MIN` (4 KiB: most
requests fit, and an idle connection costs kilobytes), grows to fit a small frame that does not
fit, and doubles up to `_RECV_CHUNK` (256 KiB) whenever frames straddle its end, which only a
peer that sends faster than it is answered (pipelining) makes happen: such a connection reads
256 KiB per syscall after six doublings, as it always did. A lockstep client (one request, wait
for the answer) empties the buffer with every frame and never grows it. `release_buffers()`
(called by the server's idle sweep, net/server.py) drops the receive and frame buffers of a
connection that has been quiet, so one that was busy once does not hold 256 KiB + its frame
buffer for the rest of its life. After every wait the reader checks whether the buffer was
swapped, so the sweep may release it while the task waits with nothing buffered.

Idle accounting for the sweep costs the hot path nothing new: `requests` already counts frames,
and `waits` counts the reads that found nothing and parked (a wait costs an epoll round trip;
the increment is noise beside it). A connection whose `requests + waits` has not moved between
two sweeps, and which is not `busy`, has done no I/O meanwhile.

Quota throttling (KIP-219): a handler that throttles the client sets `throttle_deadline`
(trio time); after writing the response the connection reads nothing more until then, as
Kafka keeps a throttled channel muted. Shutdown cuts the wait short.
"""

from __future__ import annotations

import errno
import logging
import os
import socket as _stdsocket
import struct
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import trio

from pybroker._native import zerocopy
from pybroker.protocol.chunks import Chunk, FileRegion

log = logging.getLogger("pybroker.net")

_SIZE = struct.Struct(">i")
ANONYMOUS = "User:ANONYMOUS"  # KafkaPrincipal.ANONYMOUS (security/authorizer.py has the same)
_RECV_MIN = 4 * 1024  # a new (or released) receive buffer
_RECV_CHUNK = 256 * 1024  # the most a receive buffer grows to
_SMALL_FRAME = 16 * 1024  # below this, slicing the receive buffer is cheaper than anything else
_FRAME_MIN = 32 * 1024  # the first size of a frame buffer
_REUSE_MAX = 8 * 1024 * 1024  # a larger frame buffer is not kept per connection
_PREAD_MAX = 32 * 1024  # file regions up to this size are read and written with the header


class ConnectionClosed(Exception):
    """The peer closed its end."""


class Parkable(Protocol):
    """A delayed operation a request waits on (pybroker.purgatory.DelayedOperation)."""

    completed: bool
    waker: trio.CancelScope | None

    def force_complete(self) -> bool: ...

    async def wait(self) -> None: ...


class RequestMeter(Protocol):
    """What times a request (pybroker.metrics.request_metrics): seconds of one clock."""

    def record(self, start: float, handled: float, end: float, remote_s: float, size: int) -> None: ...


class CloseConnection(Exception):
    """Raised by a handler: close this connection without answering (Kafka's behaviour for
    unknown APIs, unsupported versions and undecodable requests)."""


class Connection:
    """State of one client connection (what handlers may need to know about it)."""

    __slots__ = ("sock", "peer", "listener_name", "client_software_name", "client_software_version",
                 "_buf", "_start", "_end", "_frame_buf", "busy", "requests", "waits", "fd", "waited",
                 "throttle_deadline", "_throttle_scope", "request_meter", "remote_s", "idle_mark", "idle_since",
                 "principal", "token_authenticated", "sasl_session", "close_hooks")

    def __init__(self, sock: trio.socket.SocketType, peer: Any, listener_name: str) -> None:
        self.sock = sock
        self.peer = peer
        self.listener_name = listener_name
        self.client_software_name = ""
        self.client_software_version = ""
        self._buf = bytearray(_RECV_MIN)
        self._start = 0
        self._end = 0
        self._frame_buf: bytearray | None = None
        self.busy = False
        self.requests = 0
        self.waits = 0  # reads that found nothing and waited (idle accounting, see the module docstring)
        self.fd = sock.fileno()
        self.waited = False  # did this connection yield to the scheduler since the last check?
        self.throttle_deadline = 0.0  # trio time until which no request is read (quota throttling)
        self._throttle_scope: trio.CancelScope | None = None
        # request metrics (pybroker/metrics/request_metrics.py), only with the metrics endpoint on:
        # the dispatcher sets the meter of the request in hand; `park` adds its purgatory wait
        self.request_meter: RequestMeter | None = None
        self.remote_s = 0.0
        # the idle sweep's bookkeeping (SocketServer): `requests + waits` when it last looked (-1:
        # busy or not looked at yet), and the trio time from which the connection counts as quiet
        self.idle_mark = -1
        self.idle_since = 0.0
        # the authenticated principal (Kafka's KafkaPrincipal as "Type:name"): User:ANONYMOUS on
        # PLAINTEXT and on SSL without a client certificate; set by the server after a TLS handshake
        self.principal = ANONYMOUS
        # logged in with a delegation token (KafkaPrincipal.tokenAuthenticated): no token APIs then
        self.token_authenticated = False
        # the SASL session (net/sasl.SaslSession: mechanism, expiry for KIP-368), None unless SASL
        self.sasl_session: Any = None
        # run once when the connection ends (a share session belongs to its connection:
        # share/share_session.py); each must not block nor raise
        self.close_hooks: list[Callable[[], None]] = []

    @property
    def buffer_bytes(self) -> int:
        """Bytes of receive and frame buffer this connection holds."""
        return len(self._buf) + (len(self._frame_buf) if self._frame_buf is not None else 0)

    def release_buffers(self) -> None:
        """Drop the receive and frame buffers of a quiet connection (the next read allocates
        `_RECV_MIN`). Leaves a receive buffer holding bytes alone. Safe while the connection's task
        waits: after a wait, `_fill` starts over on the buffer it finds."""
        if self._start == self._end and len(self._buf) > 0:
            self._buf = bytearray()
            self._start = self._end = 0
        self._frame_buf = None  # a frame being read is held by the reader, not by this cache

    def close_idle(self) -> None:
        """Shutdown: wake a connection parked waiting for its next request (it reads EOF)."""
        if self._throttle_scope is not None:
            self._throttle_scope.cancel()
        if not self.busy:
            try:
                self.sock.shutdown(_stdsocket.SHUT_RD)
            except OSError:
                pass

    async def wait_throttled(self) -> None:
        """Stay muted until throttle_deadline (or shutdown), then clear it."""
        with trio.CancelScope(deadline=self.throttle_deadline) as scope:
            self._throttle_scope = scope
            await trio.sleep_forever()
        self._throttle_scope = None
        self.throttle_deadline = 0.0

    # ------------------------------------------------------------------ reading

    async def _fill(self, need: int) -> None:
        """Ensure at least `need` (<= _RECV_CHUNK) buffered bytes after _start."""
        while self._end - self._start < need:
            if len(self._buf) - self._start < need:
                self._make_room(need)
            buf = self._buf
            view = memoryview(buf)
            n = -1
            while n < 0:
                try:
                    n = os.readv(self.fd, (view[self._end:],))
                except BlockingIOError:
                    # Plain non-blocking syscalls and trio's wait primitives: trio's socket
                    # wrappers cost a context manager and two checkpoints per call, a third of a
                    # small request's CPU.
                    self.waited = True
                    self.waits += 1
                    await trio.lowlevel.wait_readable(self.fd)
                    if self._buf is not buf:
                        break  # the idle sweep released the buffer meanwhile: start over
            if n == 0:
                raise ConnectionClosed()
            if n > 0:
                self._end += n

    def _make_room(self, need: int) -> None:
        """Make the buffer's tail hold `need` bytes from _start: grow it when it is smaller than
        _RECV_CHUNK (frames straddling its end mean the peer sends in bulk), else compact."""
        have = self._end - self._start
        size = len(self._buf)
        if size < _RECV_CHUNK:
            new_size = max(_RECV_MIN, 2 * size)
            while new_size < need:
                new_size *= 2
            buf = bytearray(min(new_size, _RECV_CHUNK))
            buf[:have] = memoryview(self._buf)[self._start:self._end]
            self._buf = buf
        else:
            # compact: move the partial frame to the front
            self._buf[:have] = self._buf[self._start:self._end]
        self._start, self._end = 0, have

    async def _recv_into(self, view: memoryview) -> int:
        while True:
            try:
                return os.readv(self.fd, (view,))
            except BlockingIOError:
                self.waited = True
                self.waits += 1
                await trio.lowlevel.wait_readable(self.fd)

    async def read_frame(self, max_bytes: int) -> bytearray | memoryview | None:
        """The next request frame (without its size), or None when the size is out of bounds.

        The frame is writable (Produce assigns offsets in place). Small frames are sliced
        out of the receive buffer. Larger ones are read straight into a per-connection
        frame buffer that is reused once nothing refers to the previous frame any more, so
        a stream of 1 MiB produce requests neither copies each frame twice nor touches
        fresh pages for every request; the receive buffer never grows for them.
        """
        await self._fill(4)
        (size,) = _SIZE.unpack_from(self._buf, self._start)
        if size < 0 or size > max_bytes:
            return None
        start = self._start + 4
        if size <= _SMALL_FRAME:
            await self._fill(4 + size)
            start = self._start + 4
            frame = self._buf[start:start + size]
            self._start = start + size
            if self._start == self._end:
                self._start = self._end = 0
            return frame
        have = min(self._end - start, size)
        buf = self._free_frame_buffer(size)
        if buf is None:
            # Memory follows the bytes received, not the size a peer declares: start with what
            # has arrived (at least _FRAME_MIN) and double as more comes, up to the size. A peer
            # that announces 100 MB and sends one byte costs 32 KiB, not 100 MB. (The doublings
            # are paid once: the buffer is kept for the connection's next large frame.)
            buf = bytearray(min(size, max(_FRAME_MIN, 2 * have)))
        buf[:have] = self._buf[start:start + have]
        self._start = start + have
        if self._start == self._end:
            self._start = self._end = 0
        while have < size:
            if have == len(buf):
                buf += bytes(min(len(buf), size - len(buf)))  # no view of buf is alive here
            with memoryview(buf) as view:
                # never past the frame: a reused buffer may be longer, and what follows the
                # frame is the next (pipelined) request
                n = await self._recv_into(view[have:min(len(buf), size)])
            if n == 0:
                raise ConnectionClosed()
            have += n
        self._frame_buf = buf if len(buf) <= _REUSE_MAX else None
        return memoryview(buf)[:size]

    def _free_frame_buffer(self, size: int) -> bytearray | None:
        """The kept frame buffer if it can hold `size` bytes and no view of the last frame is alive."""
        buf = self._frame_buf
        # 3 = this attribute + the local + getrefcount's argument: no live view of the last frame
        if buf is not None and len(buf) >= size and sys.getrefcount(buf) == 3:
            return buf
        return None

    async def park(self, op: Parkable) -> None:
        """Await a request parked in a purgatory (`op.wait()`), watching the peer meanwhile.

        A peer that closes or resets its connection while its request waits (a long fetch
        max wait) would otherwise keep the operation, its memory and this socket until the
        wait expires: the operation is completed at once and ConnectionClosed ends the
        connection. Bytes that arrive meanwhile (a pipelined request) are kept for the next
        read; the watch then stops and the wait goes on.
        """
        parked = time.perf_counter()
        if not op.completed:
            gone = False
            with trio.CancelScope() as scope:
                op.waker = scope  # completion cancels the watch
                gone = await self._wait_peer_gone()
            op.waker = None
            if gone:
                op.force_complete()
                raise ConnectionClosed()
        await op.wait()
        self.remote_s += time.perf_counter() - parked  # Kafka's RemoteTimeMs

    async def _wait_peer_gone(self) -> bool:
        """True once the peer has closed or reset; False when it sent data or nothing can be read."""
        while self._end < len(self._buf):
            await trio.lowlevel.wait_readable(self.fd)
            try:
                with memoryview(self._buf) as view:
                    n = os.readv(self.fd, (view[self._end:],))
            except BlockingIOError:
                continue
            except OSError:
                return True  # ECONNRESET and friends
            if n == 0:
                return True
            self._end += n
            return False
        return False

    # ------------------------------------------------------------------ writing

    async def write(self, chunks: Sequence[Chunk]) -> None:
        """Send a response: bytes pieces joined into one write, large file regions sendfile'd."""
        pending: list[bytes | bytearray | memoryview] = []
        for chunk in chunks:
            if type(chunk) is FileRegion:
                if chunk.length <= _PREAD_MAX:
                    # small regions: one pread into the single write beats a sendfile plus an
                    # extra write for the bytes after it (a tailing consumer's fetch is all
                    # small regions); the data was just written, so it is in the page cache
                    data = os.pread(chunk.fd, chunk.length, chunk.position)
                    if len(data) != chunk.length:
                        raise ConnectionAbortedError("log data vanished while answering a fetch")
                    pending.append(data)
                    continue
                if pending:
                    await self._send_all(b"".join(pending))
                    pending = []
                await self._sendfile(chunk)
            else:
                pending.append(chunk)  # type: ignore[arg-type]
        if pending:
            await self._send_all(pending[0] if len(pending) == 1 else b"".join(pending))

    async def _send_all(self, data: bytes | bytearray | memoryview) -> None:
        try:
            n = os.write(self.fd, data)
        except BlockingIOError:
            n = 0
        if n == len(data):
            return
        view = memoryview(data).cast("B")[n:]
        while view:
            self.waited = True
            await trio.lowlevel.wait_writable(self.fd)
            try:
                view = view[os.write(self.fd, view):]
            except BlockingIOError:
                pass

    async def _sendfile(self, region: FileRegion) -> None:
        fd = self.fd
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
                if pos >= os.fstat(region.fd).st_size:
                    # the segment was cut under us: the frame cannot be completed, so drop the
                    # connection (the client retries) rather than spin
                    raise ConnectionAbortedError("log data vanished while answering a fetch")
                self.waited = True
                await trio.lowlevel.wait_writable(fd)
                continue
            pos += n
            remaining -= n


Handler = Callable[[Connection, bytearray | memoryview], Awaitable[Sequence[Chunk] | None]]


async def serve_connection(conn: Connection, handler: Handler, max_request_bytes: int,
                           shutting_down: Callable[[], bool],
                           timer: Callable[[], float] | None = None) -> None:
    """The request loop of one connection; returns when the peer closes or we must close.

    With a `timer` (the metrics endpoint is on), each request is timed from its frame read to its
    answer written and handed to the meter the dispatcher set (Kafka's RequestChannel metrics)."""
    sock = conn.sock
    try:
        sock.setsockopt(_stdsocket.IPPROTO_TCP, _stdsocket.TCP_NODELAY, 1)
    except OSError:
        pass
    try:
        while not shutting_down():
            frame = await conn.read_frame(max_request_bytes)
            if frame is None:
                log.info("closing connection from %s: frame size above socket.request.max.bytes "
                         "(%d) or negative", conn.peer, max_request_bytes)
                return
            conn.busy = True
            conn.requests += 1
            if timer is not None:
                start = timer()
                size = len(frame)
                conn.remote_s = 0.0
            try:
                chunks = await handler(conn, frame)
            except CloseConnection as exc:
                log.info("closing connection from %s: %s", conn.peer, exc)
                return
            frame = None  # release the frame buffer for reuse before writing the answer
            if timer is not None:
                handled = timer()
            if chunks is not None:
                await conn.write(chunks)
            conn.busy = False
            if timer is not None and conn.request_meter is not None:
                conn.request_meter.record(start, handled, timer(), conn.remote_s, size)
                conn.request_meter = None
            if conn.throttle_deadline and not shutting_down():
                await conn.wait_throttled()
            elif not conn.waited:
                # a pipelining client whose data is always ready would never block: let the
                # other tasks run before its next request
                await trio.lowlevel.checkpoint()
            conn.waited = False
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
        for hook in conn.close_hooks:
            try:
                hook()
            except Exception:
                log.exception("connection %s: a close hook failed", conn.peer)
