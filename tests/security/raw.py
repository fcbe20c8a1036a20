"""A blocking client socket speaking Kafka's size-prefixed frames, for the security suites' wire
checks (what a broker answers, or that it closes). Each suite's `Raw` adds its own connecting and
request shape on top.

Concurrency: one test thread per socket.
"""

from __future__ import annotations

import socket
import struct


class FrameSocket:
    sock: socket.socket
    # what a read takes for the broker having closed; a subclass may add TimeoutError
    closed_errors: tuple[type[OSError], ...] = (ConnectionResetError,)

    def read_frame(self) -> bytes | None:
        """The next frame's bytes, or None once the broker has closed (EOF, or `closed_errors`)."""
        head = self._exactly(4)
        if head is None:
            return None
        return self._exactly(struct.unpack(">i", head)[0])

    def _exactly(self, n: int) -> bytes | None:
        buf = b""
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except self.closed_errors:
                return None
            if not chunk:
                return None
            buf += chunk
        return buf

    def close(self) -> None:
        self.sock.close()
