"""SocketServer's idle sweep on virtual time (trio's MockClock, real loopback sockets): a connection
quiet for connections.max.idle.ms is closed (its peer reads EOF), one with a request in hand or
bytes still trickling in is not, a negative value turns expiry off, and a quiet connection's
buffers are released. The accept loop's back-off when accept() runs out of descriptors."""

from __future__ import annotations

import errno
import logging
import struct
from collections.abc import Awaitable, Callable

import trio
import trio.testing

from pybroker.config import Endpoint
from pybroker.net import server as servermod
from pybroker.net.connection import Connection
from pybroker.net.server import SocketServer, sweep_period

IDLE_MS = 600_000  # Kafka's default
ANSWER = [struct.pack(">i", 4) + b"pong"]


async def answer_at_once(conn: Connection, frame: bytearray | memoryview) -> list[bytes]:
    return ANSWER


def request(body: bytes = b"ping") -> bytes:
    return struct.pack(">i", len(body)) + body


async def read_answer(stream: trio.SocketStream) -> bytes:
    data = b""
    while len(data) < 8:
        chunk = await stream.receive_some(8 - len(data))
        if not chunk:
            raise ConnectionError("closed before the answer")
        data += chunk
    return data


async def eof_at(stream: trio.SocketStream) -> float:
    """The trio time at which the peer closed (nothing else may arrive meanwhile); fails after
    three idle times."""
    with trio.fail_after(3 * IDLE_MS / 1000):
        assert await stream.receive_some(100) == b""
    return trio.current_time()


def run_server(scenario: Callable[[SocketServer, int], Awaitable[None]], *, max_idle_ms: int = IDLE_MS,
               handler=answer_at_once) -> None:
    async def main() -> None:
        server = SocketServer([Endpoint("PLAINTEXT", "127.0.0.1", 0)], handler, 1 << 20, max_idle_ms=max_idle_ms)
        async with trio.open_nursery() as nursery:
            bound = await nursery.start(server.serve, nursery)
            await scenario(server, bound[0].port)
            server.begin_shutdown()
            assert await server.wait_idle(60)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0.01))


def test_sweep_period_is_a_tenth_of_the_idle_time_within_bounds():
    assert sweep_period(600_000) == 10.0
    assert sweep_period(20_000) == 2.0
    assert sweep_period(10) == 0.05
    assert sweep_period(-1) == 10.0


def test_a_connection_idle_for_connections_max_idle_ms_is_closed():
    async def scenario(server: SocketServer, port: int) -> None:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(request())
        assert await read_answer(stream) == ANSWER[0]
        last = trio.current_time()
        closed = await eof_at(stream)
        # never early; late by at most two sweep periods
        assert IDLE_MS / 1000 <= closed - last <= IDLE_MS / 1000 + 2 * sweep_period(IDLE_MS)
        await stream.aclose()
        assert await server.wait_idle(1)  # and its task has ended

    run_server(scenario)


def test_requests_keep_a_connection_open_past_the_idle_time():
    async def scenario(server: SocketServer, port: int) -> None:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        start = trio.current_time()
        while trio.current_time() - start < 3 * IDLE_MS / 1000:
            await stream.send_all(request())
            assert await read_answer(stream) == ANSWER[0]
            await trio.sleep(IDLE_MS / 1000 / 2)
        await stream.aclose()

    run_server(scenario)


def test_a_request_in_hand_is_not_idle_however_long_it_waits():
    """A request parked for twice the idle time (a long fetch in a purgatory) keeps its connection;
    the idle time counts from its answer."""

    async def parked(conn: Connection, frame: bytearray | memoryview) -> list[bytes]:
        await trio.sleep(2 * IDLE_MS / 1000)
        return ANSWER

    async def scenario(server: SocketServer, port: int) -> None:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(request())
        assert await read_answer(stream) == ANSWER[0]
        answered = trio.current_time()
        closed = await eof_at(stream)
        assert IDLE_MS / 1000 <= closed - answered <= IDLE_MS / 1000 + 2 * sweep_period(IDLE_MS)
        await stream.aclose()

    run_server(scenario, handler=parked)


def test_a_frame_trickling_in_slower_than_the_idle_time_is_not_idle():
    """Kafka counts any read as activity: a request whose bytes take longer than the idle time to
    arrive (one byte a minute) is read to its end and answered."""

    async def scenario(server: SocketServer, port: int) -> None:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        frame = request(b"x" * 20)
        for i in range(len(frame)):
            await stream.send_all(frame[i:i + 1])
            await trio.sleep(60)
        assert await read_answer(stream) == ANSWER[0]
        await stream.aclose()

    run_server(scenario)


def test_a_negative_idle_time_never_closes():
    async def scenario(server: SocketServer, port: int) -> None:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await trio.sleep(10 * IDLE_MS / 1000)
        await stream.send_all(request())
        assert await read_answer(stream) == ANSWER[0]
        await stream.aclose()

    run_server(scenario, max_idle_ms=-1)


def test_a_quiet_connection_releases_its_buffers_and_still_serves():
    async def scenario(server: SocketServer, port: int) -> None:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        # pipelined requests grow the receive buffer; a large one leaves a frame buffer behind
        await stream.send_all(request(b"r" * 1000) * 600 + request(b"L" * 100_000))
        for _ in range(601):
            await read_answer(stream)
        (conn,) = server.connections
        assert conn.buffer_bytes > 256 * 1024
        await trio.sleep(3 * sweep_period(IDLE_MS))
        assert conn.buffer_bytes == 0
        await stream.send_all(request())
        assert await read_answer(stream) == ANSWER[0]
        await stream.aclose()

    run_server(scenario)


def test_running_out_of_descriptors_backs_off_logs_once_and_accepts_again(monkeypatch, caplog):
    """accept() failing with EMFILE (the process is at RLIMIT_NOFILE) must not end the node: the
    loop waits ACCEPT_BACKOFF_S between tries, logs one WARNING for the burst, keeps serving the
    connections it has, and accepts the waiting ones once accept works again.
    (tests/fuzz/test_fuzz_findings_net.py runs the real thing in a process with a low limit.)"""
    failing = {"n": 0}
    real_accept = trio.SocketListener.accept

    async def accept(self: trio.SocketListener) -> trio.SocketStream:
        if failing["n"]:
            failing["n"] -= 1
            await trio.lowlevel.checkpoint()
            raise OSError(errno.EMFILE, "Too many open files")
        return await real_accept(self)

    monkeypatch.setattr(trio.SocketListener, "accept", accept)
    caplog.set_level(logging.INFO, logger="pybroker.net")

    async def scenario(server: SocketServer, port: int) -> None:
        served = await trio.open_tcp_stream("127.0.0.1", port)
        await served.send_all(request())
        assert await read_answer(served) == ANSWER[0]
        failing["n"] = 50  # five seconds of failed accepts at 100 ms each
        started = trio.current_time()
        # the loop waits in an accept that already works: this connection takes it, the next
        # accept fails
        kick = await trio.open_tcp_stream("127.0.0.1", port)
        waiting = await trio.open_tcp_stream("127.0.0.1", port)  # sits in the listen backlog
        for _ in range(20):  # the open connection is served throughout
            await served.send_all(request())
            assert await read_answer(served) == ANSWER[0]
            await trio.sleep(0.1)
        await waiting.send_all(request())
        assert await read_answer(waiting) == ANSWER[0]
        assert failing["n"] == 0 and trio.current_time() - started >= 49 * servermod.ACCEPT_BACKOFF_S
        for stream in (served, kick, waiting):
            await stream.aclose()

    run_server(scenario)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "Too many open files" in warnings[0].getMessage(), caplog.text
    assert any("accepting connections on" in r.getMessage() and "again" in r.getMessage()
               for r in caplog.records if r.levelno == logging.INFO), caplog.text
