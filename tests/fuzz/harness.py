"""What the robustness tests observe of a broker process from outside: its memory, its
descriptors, what it logged, and whether a normal client still round-trips.

Concurrency: called from the test's thread; every wait is bounded.
"""

from __future__ import annotations

import os
import socket
import struct
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from clients.broker import BrokerProcess

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.frame import decode_response, encode_request
from pybroker.protocol.messages import ApiVersionsRequest

# what a broker must never write, whatever it is sent
FORBIDDEN = ("Traceback", " ERROR ", " CRITICAL ")


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


Ends = set[int] | set[tuple[int, int]]


def connections_from(pid: int, client_ports: Ends) -> int:
    """How many of the broker's open sockets are connected to one of `client_ports` (our ends), or,
    given (our port, the broker's port) pairs, to exactly those: the kernel hands one ephemeral
    port to several sockets with different destinations, so a bare port of ours can also be the
    source port of another node's connection to this broker."""
    return len(_sockets_to(pid, client_ports))


def unread_bytes(pid: int, client_ports: Ends) -> int:
    """Bytes our connections sent that the broker has not read yet (its sockets' receive queues)."""
    return sum(_sockets_to(pid, client_ports))


def _sockets_to(pid: int, client_ports: Ends) -> list[int]:
    """The receive-queue length of each broker socket connected to one of `client_ports`."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    queues = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            f = line.split()  # sl local rem st tx_queue:rx_queue ... inode
            local_port = int(f[1].rsplit(":", 1)[1], 16)
            remote_port = int(f[2].rsplit(":", 1)[1], 16)
            if f[9] in inodes and (remote_port in client_ports or (remote_port, local_port) in client_ports):
                queues.append(int(f[4].split(":")[1], 16))
    return queues


def output_since(broker: BrokerProcess, offset: int) -> str:
    return broker._read_output(offset).decode("utf-8", "replace")


def output_size(broker: BrokerProcess) -> int:
    try:
        return broker.output_path.stat().st_size
    except FileNotFoundError:
        return 0


def assert_clean_output(broker: BrokerProcess, offset: int) -> None:
    text = output_since(broker, offset)
    bad = [line for line in text.splitlines() if any(f in line for f in FORBIDDEN)]
    assert not bad, "the broker logged:\n" + "\n".join(bad[:20]) + "\n--- tail ---\n" + broker.output_tail(40)


def wait_until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)


def reset(sock: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0), as a crashed or killed client does."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


class Prober:
    """A pre-connected socket that times ApiVersions round trips (is the event loop serving?)."""

    def __init__(self, port: int, timeout_s: float = 1.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self.correlation_id = 0

    def round_trip(self) -> float:
        """One ApiVersions v0 round trip; raises socket.timeout past the timeout."""
        self.correlation_id += 1
        t = time.monotonic()
        self.sock.sendall(encode_request(ApiKey.API_VERSIONS, 0, self.correlation_id, "prober",
                                         ApiVersionsRequest()))
        size = struct.unpack(">i", self._exact(4))[0]
        cid, resp = decode_response(ApiKey.API_VERSIONS, 0, self._exact(size))
        assert cid == self.correlation_id and resp.error_code == 0
        return time.monotonic() - t

    def _exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("broker closed the prober's connection")
            buf += chunk
        return buf

    def close(self) -> None:
        self.sock.close()


# Memory may grow with what the fuzz legitimately creates (topics, groups, producer state), not with
# what frames declare: 20 connections announcing 100 MB each once cost 2 GB.
RSS_GROWTH_LIMIT_KIB = 192 * 1024


@contextmanager
def judged(node: BrokerProcess, seed: int) -> Iterator[None]:
    """Around a fuzz campaign on a started `node`: a normal client round-trips before and after,
    RSS grows less than RSS_GROWTH_LIMIT_KIB, the node logs no traceback or ERROR; a failure
    prints the seed's replay line. The node is closed either way."""
    try:
        offset = output_size(node)
        client_round_trip(node.bootstrap)
        assert node.pid is not None
        before = rss_kib(node.pid)
        yield
        assert node.is_running(), f"seed {seed}: the broker died\n" + node.output_tail()
        client_round_trip(node.bootstrap)
        assert rss_kib(node.pid) - before < RSS_GROWTH_LIMIT_KIB
        assert_clean_output(node, offset)
    except BaseException:
        print(f"replay with PYBROKER_FUZZ_SEED={seed}")
        raise
    finally:
        node.close()


def client_round_trip(bootstrap: str) -> None:
    """confluent-kafka produces three records to a fresh topic and reads them back."""
    from confluent_kafka import Consumer, Producer

    topic = f"roundtrip-{uuid.uuid4().hex[:8]}"
    p = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 20000})
    for i in range(3):
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i)
    assert p.flush(20) == 0, "records not delivered"
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 3 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
        assert sorted(got) == [b"v0", b"v1", b"v2"], got
    finally:
        c.close()
