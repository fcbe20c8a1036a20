"""A client connection over TLS (Kafka's SslTransportLayer): the same request loop as plaintext,
with Python's `ssl` doing the record layer through memory BIOs.

Transport: `ssl.SSLObject` over two `ssl.MemoryBIO`s; this class moves ciphertext between them
and the non-blocking socket with the same raw syscalls and trio waits as the plaintext
Connection (os.read / os.write + wait_readable / wait_writable), so the request loop,
buffering, idle sweep and parking are unchanged. Chosen by measurement (bench/tls/transport.py;
bench/README.md, "TLS"): trio.SSLStream does the same MemoryBIO dance behind a stream API and
costs half as much CPU again; a non-blocking ssl.SSLSocket on the fd (OpenSSL doing the socket
I/O, no BIO copies) measured no cheaper, and would lose the raw peek `_wait_peer_gone` needs.

Handshake: `handshake()` runs before the first request, bounded by the server's handshake
timeout (net/server.py); a failure (a plaintext client on the TLS port, an untrusted client
certificate, a peer that stops half way) closes the socket and nothing else. The principal is
built from the verified peer certificate right after it (`principal_of`, the listener's
ssl.principal.mapping.rules), User:ANONYMOUS without one.

Fetch responses: sendfile cannot encrypt, so file regions are read (pread, `_FILE_CHUNK` at a
time into one reused buffer) and written through the TLS object: one extra copy into user space
and the encryption itself, both per byte served (bench/README.md, "TLS"). Kernel TLS (OpenSSL's
SSL_sendfile) would remove the copy but is not reachable from Python's ssl module.

Concurrency: as Connection, one task per connection on the trio thread.
"""

from __future__ import annotations

import logging
import os
import ssl
from collections.abc import Callable
from typing import Any, Protocol

import trio

from pybroker.net.connection import Connection, ConnectionClosed
from pybroker.protocol.chunks import FileRegion

log = logging.getLogger("pybroker.net")

_RAW_READ = 256 * 1024  # ciphertext read per syscall (as the plaintext receive buffer's cap)
_WRITE_CHUNK = 256 * 1024  # plaintext encrypted per flush: bounds the outgoing BIO
_FILE_CHUNK = 256 * 1024  # file region bytes read per pread when no sendfile is possible


class TlsListener(Protocol):
    """What the server needs of a TLS listener (security/ssl_factory.ListenerSsl): read per new
    connection, so a reconfigured listener's next connection gets the new context."""

    context: ssl.SSLContext
    principal_of: Callable[[bytes | None], str]


class TlsChannelBuilder:
    """The channel builder of an SSL listener (net/server.ChannelBuilder): TlsConnections, the
    handshake, the principal from the client certificate."""

    def __init__(self, listener: TlsListener) -> None:
        self.listener = listener

    def create(self, sock: trio.socket.SocketType, peer: Any, listener_name: str) -> Connection:
        return TlsConnection(sock, peer, listener_name, self.listener.context)

    async def authenticate(self, conn: Connection) -> bool:
        assert isinstance(conn, TlsConnection)
        try:
            await conn.handshake()
        except (OSError, ConnectionClosed, trio.BrokenResourceError) as exc:
            reason = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
            log.info("failed TLS handshake from %s on %s: %s", conn.peer, conn.listener_name, reason)
            return False
        try:
            conn.principal = self.listener.principal_of(conn.peer_certificate())
        except ValueError as exc:  # ssl.principal.mapping.rules mapped no name
            log.info("failed authentication of %s on %s: %s", conn.peer, conn.listener_name, exc)
            return False
        return True


class TlsConnection(Connection):
    __slots__ = ("_tls", "_incoming", "_outgoing", "_file_buf")

    def __init__(self, sock: trio.socket.SocketType, peer: Any, listener_name: str,
                 context: ssl.SSLContext) -> None:
        super().__init__(sock, peer, listener_name)
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._file_buf: bytearray | None = None

    # ------------------------------------------------------------------ handshake

    async def handshake(self) -> None:
        """Complete the server handshake; ssl.SSLError / ConnectionClosed / OSError on failure."""
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._flush()
                await self._feed()
            except ssl.SSLError:
                # the alert OpenSSL wrote (unknown CA, no certificate...) tells the client why;
                # sent if the socket takes it at once, never waited for
                try:
                    os.write(self.fd, self._outgoing.read())
                except OSError:
                    pass
                raise
        await self._flush()

    def peer_certificate(self) -> bytes | None:
        """The verified peer certificate (DER), None when the client sent none."""
        return self._tls.getpeercert(binary_form=True)

    @property
    def cipher(self) -> tuple[str, str, int] | None:
        return self._tls.cipher()

    # ------------------------------------------------------------------ ciphertext moves

    async def _feed(self) -> None:
        """Move the next ciphertext the socket has into the incoming BIO (waiting for some);
        EOF is passed on, so the TLS object reports the close."""
        while True:
            try:
                data = os.read(self.fd, _RAW_READ)
            except BlockingIOError:
                self.waited = True
                self.waits += 1
                await trio.lowlevel.wait_readable(self.fd)
                continue
            if data:
                self._incoming.write(data)
            else:
                self._incoming.write_eof()
            return

    async def _flush(self) -> None:
        if self._outgoing.pending:
            await Connection._send_all(self, self._outgoing.read())

    # ------------------------------------------------------------------ reading

    def _decrypt_into(self, view: memoryview) -> int:
        """Plaintext bytes decrypted into `view`: n > 0, 0 at the peer's close, -1 for 'feed me'."""
        try:
            return int(self._tls.read(len(view), view))  # with a buffer: the count read
        except ssl.SSLWantReadError:
            return -1
        except ssl.SSLZeroReturnError:
            return 0
        except ssl.SSLError as exc:
            if self._incoming.eof:
                return 0  # EOF without close_notify: the peer went away
            raise ConnectionAbortedError(f"TLS error: {exc.reason or exc}") from None

    async def _fill(self, need: int) -> None:
        while self._end - self._start < need:
            if len(self._buf) - self._start < need:
                self._make_room(need)
            # decrypt straight into the receive buffer; the buffer is fetched again after every
            # wait (the idle sweep may release it meanwhile, Connection._fill)
            with memoryview(self._buf) as view:
                n = self._decrypt_into(view[self._end:])
            if n == 0:
                raise ConnectionClosed()
            if n > 0:
                self._end += n
                continue
            await self._flush()  # what reading produced (TLS 1.3 post-handshake messages)
            await self._feed()

    async def _recv_into(self, view: memoryview) -> int:
        while True:
            n = self._decrypt_into(view)
            if n >= 0:
                return n
            await self._flush()
            await self._feed()

    async def _wait_peer_gone(self) -> bool:
        if self._tls.pending() or self._incoming.pending:
            return False  # a pipelined request is already here
        while True:
            await trio.lowlevel.wait_readable(self.fd)
            try:
                data = os.read(self.fd, _RAW_READ)
            except BlockingIOError:
                continue
            except OSError:
                return True
            if not data:
                return True
            self._incoming.write(data)  # decrypted by the next read
            return False

    # ------------------------------------------------------------------ writing

    async def _send_all(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data).cast("B")
        for i in range(0, len(view), _WRITE_CHUNK):
            self._tls.write(view[i:i + _WRITE_CHUNK])
            await Connection._send_all(self, self._outgoing.read())

    async def _sendfile(self, region: FileRegion) -> None:
        buf = self._file_buf
        if buf is None:
            buf = self._file_buf = bytearray(_FILE_CHUNK)
        pos, remaining = region.position, region.length
        with memoryview(buf) as view:
            while remaining > 0:
                n = os.preadv(region.fd, (view[:min(remaining, _FILE_CHUNK)],), pos)
                if n == 0:
                    raise ConnectionAbortedError("log data vanished while answering a fetch")
                await self._send_all(view[:n])
                pos += n
                remaining -= n

    def release_buffers(self) -> None:
        super().release_buffers()
        self._file_buf = None
