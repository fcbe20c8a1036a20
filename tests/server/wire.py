"""A blocking Kafka wire client on the project's own codec, for tests that speak the
protocol directly (every API/version, bad input). Bounded by socket timeouts."""

from __future__ import annotations

import socket
import struct
from typing import Any

from pybroker.protocol.frame import decode_response, encode_request


class WireClient:
    def __init__(self, host: str, port: int, timeout_s: float = 15.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.correlation_id = 0

    def send(self, api_key: int, version: int, body: Any, client_id: str | None = "wire-test") -> int:
        self.correlation_id += 1
        self.sock.sendall(encode_request(api_key, version, self.correlation_id, client_id, body))
        return self.correlation_id

    def recv_frame(self) -> bytes:
        size = struct.unpack(">i", self._recv_exact(4))[0]
        return self._recv_exact(size)

    def receive(self, api_key: int, version: int) -> tuple[int, Any]:
        return decode_response(api_key, version, self.recv_frame())

    def request(self, api_key: int, version: int, body: Any) -> Any:
        cid = self.send(api_key, version, body)
        got_cid, resp = self.receive(api_key, version)
        assert got_cid == cid
        return resp

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by broker")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()
