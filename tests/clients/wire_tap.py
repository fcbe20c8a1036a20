"""A counting TCP relay for Kafka connections: what a client and the broker actually exchange.

Start it, point the broker's advertised listener at it (`advertised.listeners=PLAINTEXT://
127.0.0.1:<tap.port>`) and the client's bootstrap at it, and every connection of the client runs
through it. It relays bytes unchanged and records, per request, the API key and version, the
session fields of Fetch requests, and the sizes of the request and response frames (with their
4-byte size prefix: bytes on the wire above TCP).

Threads: one accepting, two per connection (blocking sockets); `exchanges` is appended under
a lock. Loopback only. Used by tests/clients/test_fetch_sessions.py and bench/fetch_sessions.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections import deque
from dataclasses import dataclass

_FRAME = struct.Struct(">i")
_REQ_HEADER = struct.Struct(">hhi")  # api key, api version, correlation id
_FETCH = 1


@dataclass
class Exchange:
    connection: int
    api_key: int
    api_version: int
    request_bytes: int
    response_bytes: int
    session_id: int | None = None  # Fetch v7+ only
    session_epoch: int | None = None


class _Frames:
    """Splits a byte stream into Kafka frames (size prefix included)."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self.buf += data
        out = []
        while len(self.buf) >= 4:
            (size,) = _FRAME.unpack_from(self.buf)
            if len(self.buf) < 4 + size:
                break
            out.append(bytes(self.buf[:4 + size]))
            del self.buf[:4 + size]
        return out


def _fetch_session_fields(frame: bytes, version: int) -> tuple[int | None, int | None]:
    """(session id, epoch) of a Fetch request frame, read after the request header."""
    if version < 7:
        return None, None
    pos = 4 + 8  # size, api key, version, correlation id
    (n,) = struct.unpack_from(">h", frame, pos)  # client id (a nullable string, also in flexible headers)
    pos += 2 + max(n, 0)
    if version >= 12:  # flexible: the header's tagged fields (none from real clients: one zero byte)
        tags = frame[pos]
        pos += 1
        if tags:
            return None, None
    if version < 15:
        pos += 4  # replica id
    pos += 4 + 4 + 4 + 1  # max wait, min bytes, max bytes, isolation level
    return struct.unpack_from(">ii", frame, pos)


class WireTap:
    def __init__(self, target_host: str = "127.0.0.1", target_port: int = 0) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.exchanges: list[Exchange] = []
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._closed = False
        self._connections = 0

    def start(self, target_port: int | None = None) -> WireTap:
        if target_port is not None:
            self.target = (self.target[0], target_port)
        threading.Thread(target=self._accept, daemon=True, name="wire-tap-accept").start()
        return self

    def fetches(self) -> list[Exchange]:
        with self._lock:
            return [e for e in self.exchanges if e.api_key == _FETCH]

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._socks += [client, server]
                self._connections += 1
                conn = self._connections
            pending: deque[tuple[int, int, int, int, int | None, int | None]] = deque()
            threading.Thread(target=self._requests, args=(conn, client, server, pending), daemon=True).start()
            threading.Thread(target=self._responses, args=(conn, server, client, pending), daemon=True).start()

    def _requests(self, conn: int, src: socket.socket, dst: socket.socket, pending: deque) -> None:
        frames = _Frames()
        try:
            while data := src.recv(1 << 16):
                for f in frames.feed(data):
                    key, version, corr = _REQ_HEADER.unpack_from(f, 4)
                    sid, epoch = _fetch_session_fields(f, version) if key == _FETCH else (None, None)
                    pending.append((corr, key, version, len(f), sid, epoch))
                dst.sendall(data)
        except OSError:
            pass
        finally:
            _shut(dst)

    def _responses(self, conn: int, src: socket.socket, dst: socket.socket, pending: deque) -> None:
        frames = _Frames()
        try:
            while data := src.recv(1 << 16):
                for f in frames.feed(data):
                    (corr,) = struct.unpack_from(">i", f, 4)
                    while pending:  # requests without a response (acks=0) are skipped
                        rc, key, version, size, sid, epoch = pending.popleft()
                        if rc == corr:
                            with self._lock:
                                self.exchanges.append(Exchange(conn, key, version, size, len(f), sid, epoch))
                            break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            _shut(dst)

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            socks = list(self._socks)
        for s in socks:
            _shut(s)
            s.close()


def _shut(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
