"""pybroker.protocol.outbound.OutboundConnection against a scripted peer on loopback: the
answer to a request; a wrong correlation id, an early close, a frame size out of range and a
timeout each fail the exchange and close the connection, so the next request starts on a
fresh one; an unencodable request raises RequestEncodingError (not a connection error) and
leaves the connection open."""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.testing

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import ProtocolError
from pybroker.protocol.frame import decode_request, encode_response
from pybroker.protocol.messages import FindCoordinatorRequest, FindCoordinatorResponse
from pybroker.protocol.outbound import (
    CONNECTION_ERRORS,
    STALE_CHECK_S,
    OutboundConnection,
    RequestEncodingError,
    receive_frame,
)

V = 2  # FindCoordinator v2: non-flexible, one key


def answer(correlation_id: int, node_id: int) -> bytes:
    body = FindCoordinatorResponse(error_code=0, node_id=node_id, host="h", port=1)
    return b"".join(bytes(c) for c in encode_response(ApiKey.FIND_COORDINATOR, V, correlation_id, body))


# what the peer does with the n-th request it reads (on whatever connection): returns the bytes
# to send back, or None to close that connection without answering; "hang" never answers
Script = Callable[[int, int], bytes | None | str]


async def serve(script: Script, connections: list[int], *,
                task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    count = 0
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]

    async def handle(stream: trio.SocketStream) -> None:
        nonlocal count
        connections.append(1)
        async with stream:
            while True:
                try:
                    frame = await receive_frame(stream)
                except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError):
                    return
                header, _body = decode_request(frame)
                count += 1
                reply = script(count, header.correlation_id)
                if reply == "hang":
                    await trio.sleep_forever()
                if reply is None:
                    return
                assert isinstance(reply, bytes)
                await stream.send_all(reply)

    async with trio.open_nursery() as nursery:
        task_status.started(port)
        await trio.serve_listeners(handle, listeners, handler_nursery=nursery)


def request() -> FindCoordinatorRequest:
    return FindCoordinatorRequest(key="g", key_type=0)


def run(script: Script, body: Callable[[OutboundConnection, tuple[str, int], list[int]], Awaitable[None]]) -> None:
    async def main() -> None:
        connections: list[int] = []
        async with trio.open_nursery() as nursery:
            port = await nursery.start(serve, script, connections)
            conn = OutboundConnection("test-client")
            try:
                with trio.fail_after(30):  # a hung test fails instead of hanging CI
                    await body(conn, ("127.0.0.1", port), connections)
            finally:
                await conn.aclose()
                nursery.cancel_scope.cancel()

    trio.run(main)


def test_requests_share_one_connection_and_get_their_answers():
    async def body(conn, address, connections):
        for n in range(1, 4):
            resp = await conn.request(address, ApiKey.FIND_COORDINATOR, V, request())
            assert resp.node_id == n
        assert len(connections) == 1

    run(lambda n, cid: answer(cid, n), body)


def test_a_wrong_correlation_id_fails_and_the_next_request_reconnects():
    async def body(conn, address, connections):
        with pytest.raises(ProtocolError, match="correlation id"):
            await conn.request(address, ApiKey.FIND_COORDINATOR, V, request())
        assert not conn.connected
        resp = await conn.request(address, ApiKey.FIND_COORDINATOR, V, request())
        assert resp.node_id == 2
        assert len(connections) == 2

    run(lambda n, cid: answer(cid + 1000 if n == 1 else cid, n), body)


def test_a_peer_closing_without_answering_is_a_connection_error():
    async def body(conn, address, connections):
        with pytest.raises(CONNECTION_ERRORS):
            await conn.request(address, ApiKey.FIND_COORDINATOR, V, request())
        assert not conn.connected
        assert (await conn.request(address, ApiKey.FIND_COORDINATOR, V, request())).node_id == 2

    run(lambda n, cid: None if n == 1 else answer(cid, n), body)


def test_a_frame_size_out_of_range_is_a_protocol_error():
    async def body(conn, address, connections):
        with pytest.raises(ProtocolError, match="frame size"):
            await conn.request(address, ApiKey.FIND_COORDINATOR, V, request())
        assert (await conn.request(address, ApiKey.FIND_COORDINATOR, V, request())).node_id == 2
        assert len(connections) == 2

    run(lambda n, cid: struct.pack(">i", -5) if n == 1 else answer(cid, n), body)


def test_a_timeout_closes_the_connection_so_a_late_answer_is_never_taken_for_the_next():
    async def body(conn, address, connections):
        with pytest.raises(trio.TooSlowError):
            await conn.request(address, ApiKey.FIND_COORDINATOR, V, request(), timeout_s=0.2)
        assert not conn.connected
        assert (await conn.request(address, ApiKey.FIND_COORDINATOR, V, request())).node_id == 2
        assert len(connections) == 2

    run(lambda n, cid: "hang" if n == 1 else answer(cid, n), body)


def test_an_unencodable_request_is_not_a_connection_error_and_keeps_the_connection():
    async def body(conn, address, connections):
        assert (await conn.request(address, ApiKey.FIND_COORDINATOR, V, request())).node_id == 1
        bad = FindCoordinatorRequest(key="g", key_type=1000)  # int8 field out of range
        with pytest.raises(RequestEncodingError) as info:
            await conn.request(address, ApiKey.FIND_COORDINATOR, V, bad)
        assert not isinstance(info.value, CONNECTION_ERRORS)
        assert conn.connected
        assert (await conn.request(address, ApiKey.FIND_COORDINATOR, V, request())).node_id == 2
        assert len(connections) == 1

    run(lambda n, cid: answer(cid, n), body)


def test_a_caller_supplied_correlation_id_is_the_one_checked():
    async def body(conn, address, connections):
        resp = await conn.request(address, ApiKey.FIND_COORDINATOR, V, request(), correlation_id=77)
        assert resp.node_id == 77

    run(lambda n, cid: answer(cid, cid), body)


def test_a_kept_connection_the_peer_closed_while_idle_is_replaced_before_use():
    """A peer that closes an idle connection (its connections.max.idle.ms) between two requests:
    the next request goes out on a new connection instead of failing."""

    async def main() -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        address = ("127.0.0.1", listeners[0].socket.getsockname()[1])
        closed = trio.Event()
        accepted: list[int] = []

        async def answer_once_then_close(stream: trio.SocketStream) -> None:
            accepted.append(1)
            async with stream:
                header, _body = decode_request(await receive_frame(stream))
                await stream.send_all(answer(header.correlation_id, len(accepted)))
            closed.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.serve_listeners, answer_once_then_close, listeners)
            conn = OutboundConnection("test-client")
            with trio.fail_after(30):
                assert (await conn.request(address, ApiKey.FIND_COORDINATOR, V, request())).node_id == 1
                await closed.wait()
                await trio.sleep(2 * STALE_CHECK_S)
                assert (await conn.request(address, ApiKey.FIND_COORDINATOR, V, request())).node_id == 2
            await conn.aclose()
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0.01))
