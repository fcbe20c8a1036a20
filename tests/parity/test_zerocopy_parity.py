"""sendfile over a real non-blocking socketpair with a small send buffer.

Both twins must make progress in partial sends, return 0 when the socket is full, stop at
end of file, and raise the same OSError subclass for real errors. The bytes that arrive
must be exactly the requested file region.
"""

import os
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

TWIN = "zerocopy"


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    """Read-only for every test, so one file serves all generated inputs."""
    payload = os.urandom(600_000)
    path = tmp_path_factory.mktemp("zerocopy") / "00000000000000000000.log"
    path.write_bytes(payload)
    fd = os.open(path, os.O_RDONLY)
    yield fd, payload
    os.close(fd)


def small_pair():
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    a.setblocking(False)
    b.setblocking(False)
    return a, b


def drain(sock):
    chunks = []
    while True:
        try:
            chunk = sock.recv(1 << 16)
        except BlockingIOError:
            return b"".join(chunks)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def transfer(sendfile, fd, offset, count):
    """Send a region through a tiny socket buffer; (received bytes, calls, partial calls)."""
    a, b = small_pair()
    with a, b:
        received = bytearray()
        sent_total = calls = partial = 0
        for _ in range(100_000):  # bounded: each round drains the receiver
            if sent_total == count:
                break
            n = sendfile(a.fileno(), fd, offset + sent_total, count - sent_total)
            calls += 1
            assert 0 <= n <= count - sent_total
            if n < count - sent_total:
                partial += 1
            sent_total += n
            received += drain(b)
        received += drain(b)
        return bytes(received), calls, partial


@settings(max_examples=15, deadline=None)
@given(offset=st.integers(0, 500_000), count=st.integers(0, 300_000))
def test_partial_sends_deliver_the_region(twins, data_file, offset, count):
    fd, payload = data_file
    count = min(count, len(payload) - offset)
    results = []
    for mod in twins:
        received, calls, partial = transfer(mod.sendfile, fd, offset, count)
        assert received == payload[offset:offset + count]
        if count > 200_000:  # far beyond the socket buffers: the kernel must cut it up
            assert partial >= 1 and calls >= 2
        results.append(received)
    assert results[0] == results[1]


def test_full_socket_returns_zero(twins, data_file):
    fd, _ = data_file
    for mod in twins:
        a, b = small_pair()
        with a, b:
            while True:  # fill the socket
                try:
                    a.send(b"x" * 65536)
                except BlockingIOError:
                    break
            assert mod.sendfile(a.fileno(), fd, 0, 1000) == 0


def test_end_of_file_stops(twins, data_file):
    fd, payload = data_file
    for mod in twins:
        a, b = small_pair()
        with a, b:
            assert mod.sendfile(a.fileno(), fd, len(payload), 100) == 0
            assert mod.sendfile(a.fileno(), fd, len(payload) - 10, 100) == 10
            assert drain(b) == payload[-10:]
            assert mod.sendfile(a.fileno(), fd, 0, 0) == 0


def test_errors_match(twins, data_file):
    fd, _ = data_file
    kinds = []
    for mod in twins:
        a, b = small_pair()
        b.close()
        with a:
            with pytest.raises(OSError) as broken:
                mod.sendfile(a.fileno(), fd, 0, 100)
        with pytest.raises(OSError) as bad_fd:
            mod.sendfile(-1, fd, 0, 100)
        with pytest.raises(ValueError):
            mod.sendfile(1, fd, -1, 100)
        kinds.append((broken.type, broken.value.errno, bad_fd.value.errno))
    assert kinds[0] == kinds[1]
