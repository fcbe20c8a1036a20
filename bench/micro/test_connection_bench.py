"""The request loop of one connection (net/connection.py): frames read off a TCP socket, handed to a
handler, answered.

`serve_connection` on the broker end of a loopback TCP connection, with a handler that answers at
once (a 16-byte response frame), driven from the same trio run by a client task that writes
pre-encoded request frames and counts the answers. The time per request covers both ends (the
client's share is the same in every case); what varies between cases is the receive path:

- pipelined-100B: 100-byte frames, 64 in flight: many frames per read, sliced out of the receive
  buffer (a producer's or a tailing consumer's connection under load);
- lockstep-100B: 100-byte frames, one in flight: every read finds nothing and waits (most clients'
  metadata, offset and group requests);
- pipelined-8KiB: 8 KiB frames, 16 in flight: small frames that span reads;
- pipelined-1MiB: 1 MiB frames, 4 in flight: the frame-buffer path of large produce requests.

Run: `python -m pytest bench/micro/test_connection_bench.py --benchmark-only`.
"""

from __future__ import annotations

import struct

import pytest
import trio

from pybroker.net.connection import Connection, serve_connection

ANSWER = [struct.pack(">i", 12) + bytes(12)]
CASES = {  # name: (frame bytes, requests per round, in flight)
    "pipelined-100B": (100, 20000, 64),
    "lockstep-100B": (100, 5000, 1),
    "pipelined-8KiB": (8192, 5000, 16),
    "pipelined-1MiB": (1 << 20, 200, 4),
}


async def _handler(conn: Connection, frame: bytearray | memoryview) -> list[bytes]:
    return ANSWER


def run_round(frame_bytes: int, requests: int, in_flight: int) -> None:
    frame = struct.pack(">i", frame_bytes) + bytes(frame_bytes)

    async def main() -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        client = await trio.open_tcp_stream("127.0.0.1", port)
        server = await listeners[0].accept()
        conn = Connection(server.socket, None, "PLAINTEXT")
        answered = 0

        async def send_frames(n: int) -> None:
            await client.send_all(frame * n if frame_bytes < 65536 else frame)
            for _ in range(n - 1 if frame_bytes >= 65536 else 0):
                await client.send_all(frame)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_connection, conn, _handler, 1 << 30, lambda: False)
            await send_frames(in_flight)
            sent = in_flight
            pending = b""
            while answered < requests:
                data = await client.receive_some(65536)
                pending += data
                got = len(pending) // 16
                pending = pending[got * 16:]
                answered += got
                more = min(got, requests - sent)
                if more > 0:
                    await send_frames(more)
                    sent += more
            await client.aclose()
        for lst in listeners:
            await lst.aclose()

    trio.run(main)


@pytest.mark.parametrize("case", list(CASES))
def test_connection_read_path(benchmark, case: str) -> None:
    frame_bytes, requests, in_flight = CASES[case]
    benchmark.group = f"connection {case}"
    benchmark.extra_info["requests"] = requests
    benchmark.pedantic(run_round, args=(frame_bytes, requests, in_flight), rounds=7, warmup_rounds=1)
