"""Sending a 4 MiB file region to a socket: sendfile (native/pure twin) vs read+send."""

import os
import socket
import threading

import pytest
from _impls import impl_module

SIZE = 4 << 20


@pytest.fixture(scope="module")
def region(tmp_path_factory):
    path = tmp_path_factory.mktemp("zc") / "segment.log"
    path.write_bytes(os.urandom(SIZE))
    fd = os.open(path, os.O_RDONLY)
    yield fd
    os.close(fd)


@pytest.fixture
def sink():
    a, b = socket.socketpair()
    stop = threading.Event()

    def drain():
        while not stop.is_set():
            try:
                if not b.recv(1 << 20):
                    return
            except OSError:
                return
    t = threading.Thread(target=drain, daemon=True)
    t.start()
    yield a
    stop.set()
    a.close()
    t.join(timeout=5)
    b.close()


@pytest.mark.parametrize("impl", ["native", "pure", "library"])
def test_send_region(benchmark, impl, region, sink):
    benchmark.group = "send 4MiB file region"
    sink.setblocking(True)  # the drain thread keeps it moving; partial sends still happen
    if impl == "library":
        def run():
            sent = 0
            while sent < SIZE:
                chunk = os.pread(region, min(1 << 18, SIZE - sent), sent)
                sink.sendall(chunk)
                sent += len(chunk)
            return sent
    else:
        sendfile = impl_module("zerocopy", impl).sendfile

        def run():
            sent = 0
            while sent < SIZE:
                sent += sendfile(sink.fileno(), region, sent, SIZE - sent)
            return sent
    assert benchmark(run) == SIZE
