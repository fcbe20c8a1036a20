"""Framing of the per-connection reader: any split of the byte stream gives the same frames."""

from __future__ import annotations

import struct

import trio
import trio.lowlevel
from hypothesis import given, settings
from hypothesis import strategies as st

from pybroker.net import connection as connmod
from pybroker.net.connection import Connection


def frames_through(frames, chunk_sizes, max_bytes=1 << 24, release=False):
    """The frames read off a socketpair fed in `chunk_sizes` pieces; `release`: the idle sweep
    releases the connection's buffers after every piece (while the reader waits)."""
    wire = b"".join(struct.pack(">i", len(f)) + f for f in frames)
    got = []

    async def main():
        a, b = trio.socket.socketpair()
        conn = Connection(b, None, "PLAINTEXT")

        async def writer():
            pos, i = 0, 0
            while pos < len(wire):
                n = chunk_sizes[i % len(chunk_sizes)]
                await a.send(wire[pos:pos + n])
                pos += n
                i += 1
                await trio.lowlevel.checkpoint()
                if release:
                    conn.release_buffers()
            a.close()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer)
            for _ in frames:
                got.append(await conn.read_frame(max_bytes))
        b.close()

    trio.run(main)
    return got


@settings(max_examples=40, deadline=None)
@given(st.lists(st.binary(max_size=3000), min_size=1, max_size=6),
       st.lists(st.integers(1, 5000), min_size=1, max_size=5))
def test_any_split_yields_the_same_frames(frames, chunk_sizes):
    assert frames_through(frames, chunk_sizes) == frames


@settings(max_examples=40, deadline=None)
@given(st.lists(st.binary(max_size=40000), min_size=1, max_size=6),
       st.lists(st.integers(700, 50000), min_size=1, max_size=5))
def test_releasing_buffers_between_reads_loses_no_byte(frames, chunk_sizes):
    """The idle sweep may release a connection's buffers whenever its task waits; a buffer that
    holds part of a frame is kept, and nothing read is lost or read twice."""
    assert frames_through(frames, chunk_sizes, release=True) == frames


def receive_buffer_after(frames, in_flight):
    """The receive buffer's size after `frames` were sent with `in_flight` outstanding at a time."""

    async def main():
        a, b = trio.socket.socketpair()
        conn = Connection(b, None, "PLAINTEXT")
        assert len(conn._buf) == connmod._RECV_MIN
        batches = [frames[i:i + in_flight] for i in range(0, len(frames), in_flight)]
        read = trio.Semaphore(0)

        async def writer():
            for batch in batches:
                view = memoryview(b"".join(struct.pack(">i", len(f)) + f for f in batch))
                while view:
                    view = view[await a.send(view):]
                await read.acquire()  # the next batch once this one is read

        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer)
            for batch in batches:
                for f in batch:
                    assert bytes(await conn.read_frame(1 << 24)) == f
                read.release()
        a.close()
        b.close()
        return len(conn._buf)

    return trio.run(main)


def test_a_lockstep_client_keeps_the_smallest_receive_buffer():
    assert receive_buffer_after([b"m" * 200] * 100, in_flight=1) == connmod._RECV_MIN


def test_a_small_frame_larger_than_the_buffer_grows_it_to_fit():
    assert receive_buffer_after([b"p" * 9000], in_flight=1) == 16 * 1024


def test_a_pipelining_client_grows_the_receive_buffer_to_the_full_chunk():
    """Frames that straddle the buffer's end (a peer sending faster than it is answered) double it
    until one read takes _RECV_CHUNK, as every connection's buffer was before."""
    assert receive_buffer_after([b"q" * 1000] * 2000, in_flight=500) == connmod._RECV_CHUNK


def test_released_buffers_cost_nothing_and_come_back_on_the_next_frame():
    async def main():
        a, b = trio.socket.socketpair()
        conn = Connection(b, None, "PLAINTEXT")
        await a.send(struct.pack(">i", 100_000) + bytes(100_000))
        assert len(await conn.read_frame(1 << 20)) == 100_000
        assert conn.buffer_bytes >= 100_000  # the kept frame buffer
        conn.release_buffers()
        assert conn.buffer_bytes == 0
        await a.send(struct.pack(">i", 3) + b"abc")
        assert bytes(await conn.read_frame(1 << 20)) == b"abc"
        assert conn.buffer_bytes == connmod._RECV_MIN
        a.close()
        b.close()

    trio.run(main)


def test_frames_larger_than_the_buffer_keep_the_buffer_small(monkeypatch):
    monkeypatch.setattr(connmod, "_RECV_CHUNK", 1024)
    monkeypatch.setattr(connmod, "_SMALL_FRAME", 100)
    frames = [b"a" * 10, bytes(range(256)) * 40, b"b" * 5, b"c" * 3000]
    got = frames_through(frames, [700, 3, 4096])
    assert got == frames
    for f in got:  # writable: produce assigns offsets in place
        memoryview(f)[0:1] = b"z"


def test_frame_buffer_is_reused_only_when_no_view_of_the_last_frame_is_alive(monkeypatch):
    monkeypatch.setattr(connmod, "_SMALL_FRAME", 10)
    big = [bytes([i]) * 5000 for i in range(4)]

    async def main():
        a, b = trio.socket.socketpair()
        conn = Connection(b, None, "PLAINTEXT")
        for f in big:
            await a.send(struct.pack(">i", len(f)) + f)
        first = await conn.read_frame(1 << 20)
        kept = first[100:200]  # a live slice, like a records field still being used
        del first
        second = await conn.read_frame(1 << 20)
        assert bytes(kept) == big[0][100:200] and bytes(second) == big[1]  # nothing overwritten
        buffer_of_second = id(second.obj)  # an id, not a reference (a reference would pin it)
        del second, kept
        third = await conn.read_frame(1 << 20)
        assert id(third.obj) == buffer_of_second and bytes(third) == big[2]  # released, so reused
        a.close()
        b.close()

    trio.run(main)


def test_oversized_or_negative_sizes_are_refused():
    async def main(size_field):
        a, b = trio.socket.socketpair()
        conn = Connection(b, None, "PLAINTEXT")
        await a.send(struct.pack(">i", size_field) + b"x" * 8)
        result = await conn.read_frame(100)
        a.close()
        b.close()
        return result

    assert trio.run(main, 101) is None
    assert trio.run(main, -1) is None
    assert trio.run(main, 8) == bytearray(b"x" * 8)


def test_a_reused_larger_frame_buffer_never_reads_past_the_frame():
    """A kept frame buffer larger than the next frame must not take in the bytes after that frame
    (the start of a pipelined request): librdkafka pipelines produce requests, and reading past
    the frame made the broker see a garbage size and reset the connection (duplicates on retry)."""
    sizes = [3 * connmod._RECV_CHUNK, 2 * connmod._RECV_CHUNK + 17, 40, connmod._RECV_CHUNK + 5, 7]
    frames = [bytes([i + 1]) * n for i, n in enumerate(sizes)]
    wire = b"".join(struct.pack(">i", len(f)) + f for f in frames)

    async def main():
        a, b = trio.socket.socketpair()
        conn = Connection(b, None, "PLAINTEXT")
        got = []

        async def writer():
            view = memoryview(wire)
            while view:
                view = view[await a.send(view):]
            a.close()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer)
            for _ in frames:
                frame = await conn.read_frame(1 << 24)
                got.append(bytes(frame))
                del frame  # released, as the request loop does: the buffer is reused
        b.close()
        return got

    assert trio.run(main) == frames
