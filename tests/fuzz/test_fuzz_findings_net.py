"""Regressions for the campaign's connection-level findings, each against a live broker process:

3. accept() running out of descriptors (RLIMIT_NOFILE) ended the node;
4. connections.max.idle.ms was never applied, and every connection held a 256 KiB receive buffer;
5. the metrics endpoint ran a thread per connection, without a cap or a timeout, and half-sent
   requests starved the Kafka port.

Each checks that the node lives, logs no traceback or ERROR, and serves real clients afterwards.
Waits are bounded and on conditions (a socket's EOF, the broker's descriptor or socket counts).
"""

from __future__ import annotations

import gzip
import os
import re
import resource
import socket
import struct
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from clients.broker import BrokerProcess
from metrics.scrape import Scrape, metrics_url_from_log, scrape

from pybroker.metrics import prometheus
from pybroker.net.server import ACCEPT_BACKOFF_S
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.frame import decode_response, encode_request
from pybroker.protocol.messages import ApiVersionsRequest, CreateTopicsRequest, FetchRequest

from .harness import (
    FORBIDDEN,
    Prober,
    assert_clean_output,
    client_round_trip,
    connections_from,
    open_fds,
    output_since,
    output_size,
    reset,
    rss_kib,
    unread_bytes,
    wait_until,
)


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def peer_ports(pid: int, port: int) -> set[int]:
    """The remote ports of the broker's connections accepted on `port` (its clients' ends)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            f = line.split()  # sl local rem st ... inode
            if f[9] in inodes and int(f[1].rsplit(":", 1)[1], 16) == port and f[3] == "01":  # ESTABLISHED
                ports.add(int(f[2].rsplit(":", 1)[1], 16))
    return ports


def api_versions(sock: socket.socket, correlation_id: int = 1) -> None:
    sock.sendall(encode_request(ApiKey.API_VERSIONS, 0, correlation_id, "idle", ApiVersionsRequest()))
    size = struct.unpack(">i", recv_exactly(sock, 4))[0]
    cid, resp = decode_response(ApiKey.API_VERSIONS, 0, recv_exactly(sock, size))
    assert cid == correlation_id and resp.error_code == 0


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed by the broker")
        buf += chunk
    return buf


def sees_eof(sock: socket.socket, timeout_s: float) -> bool:
    """True when the broker closes `sock` within `timeout_s` (and sends nothing before)."""
    sock.settimeout(timeout_s)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


# ------------------------------------------------------------------ 3. out of descriptors


def test_running_out_of_descriptors_does_not_end_the_node(tmp_path: Path) -> None:
    """At RLIMIT_NOFILE 256, 400 plain connections made accept() raise EMFILE out of the accept
    loop and the node exited. Now it logs one WARNING for the burst, keeps serving the connections
    it has, and accepts again once descriptors are free."""
    node = BrokerProcess(tmp_path / "data")
    node.start()
    try:
        offset = output_size(node)
        prober = Prober(node.port, timeout_s=10)
        prober.round_trip()
        assert node.pid is not None and open_fds(node.pid) < 200, open_fds(node.pid)
        resource.prlimit(node.pid, resource.RLIMIT_NOFILE, (256, 256))
        socks = []
        try:
            for _ in range(400):  # those the broker cannot accept wait in its listen backlog
                socks.append(socket.create_connection(("127.0.0.1", node.port), timeout=10))
            wait_until(lambda: "cannot accept connections" in output_since(node, offset), 30,
                       "the broker to log that accept failed")
            assert node.is_running(), node.output_tail()
            # hold the burst for ten retries while an open connection keeps being served
            held_until = time.monotonic() + 10 * ACCEPT_BACKOFF_S
            while time.monotonic() < held_until:
                prober.round_trip()
            assert open_fds(node.pid) >= 250
        finally:
            for s in socks:
                reset(s)
        wait_until(lambda: "accepting connections on" in output_since(node, offset), 30,
                   "the broker to accept again")
        wait_until(lambda: open_fds(node.pid) < 200, 30, "the closed connections' descriptors to be freed")
        prober.round_trip()
        prober.close()
        client_round_trip(node.bootstrap)  # confluent-kafka: new connections, a topic, produce and consume
        text = output_since(node, offset)
        warnings = [line for line in text.splitlines() if "cannot accept connections" in line]
        # one WARNING per burst, not per failed accept: draining the reset connections still in the
        # backlog can run the descriptors out once more (a loaded CI run saw a second, short burst)
        assert 1 <= len(warnings) <= 3 and all(" WARNING " in w for w in warnings), "\n".join(warnings[:5])
        failed = [int(n) for n in re.findall(r"accepting connections on \S+ again after [\d.]+ s \((\d+) accepts failed\)",
                                            text)]
        assert failed and sum(failed) > len(warnings), text[-2000:]  # one line for a burst of failures
        assert node.is_running()
        # Whatever else opened a file during the burst failed too (a high watermark checkpoint
        # logs an ERROR and is written at the next tick): allowed, as long as that was the cause.
        records = re.split(r"\n(?=\d{4}-\d\d-\d\d \d\d:)", text)
        bad = [r for r in records if any(f in r for f in FORBIDDEN) and "[Errno 24] Too many open files" not in r]
        assert not bad, "the broker logged:\n" + "\n".join(bad[:5])
    finally:
        node.close()


# ------------------------------------------------------------------ 4. idle connections

IDLE_MS = 2000


@pytest.fixture(scope="module")
def idle_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("idle") / "data",
                      overrides={"connections.max.idle.ms": str(IDLE_MS), "offsets.topic.num.partitions": "1",
                                 "group.initial.rebalance.delay.ms": "0"})
    b.start()
    yield b
    b.close()


def test_a_connection_idle_for_connections_max_idle_ms_is_closed(idle_node: BrokerProcess) -> None:
    offset = output_size(idle_node)
    with socket.create_connection(("127.0.0.1", idle_node.port), timeout=10) as s:
        api_versions(s)
        assert sees_eof(s, timeout_s=30)
    assert_clean_output(idle_node, offset)


def test_a_fetch_parked_longer_than_the_idle_time_is_answered(idle_node: BrokerProcess) -> None:
    """A request waiting in a purgatory is not idleness: a fetch parked for 3x the idle time gets
    its (empty) answer, then the connection goes idle and is closed."""
    offset = output_size(idle_node)
    with socket.create_connection(("127.0.0.1", idle_node.port), timeout=30) as s:
        create = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name="idle-parked", num_partitions=1, replication_factor=1, assignments=[], configs=[])],
            timeout_ms=10000, validate_only=False)
        s.sendall(encode_request(ApiKey.CREATE_TOPICS, 5, 1, "idle", create))
        size = struct.unpack(">i", recv_exactly(s, 4))[0]
        recv_exactly(s, size)
        fetch = FetchRequest(replica_id=-1, max_wait_ms=3 * IDLE_MS, min_bytes=1 << 20, max_bytes=1 << 20,
                             isolation_level=0, session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(
                                 topic="idle-parked", partitions=[FetchRequest.FetchPartition(
                                     partition=0, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
                                     partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id="")
        s.sendall(encode_request(ApiKey.FETCH, 11, 2, "idle", fetch))
        size = struct.unpack(">i", recv_exactly(s, 4))[0]
        cid, resp = decode_response(ApiKey.FETCH, 11, recv_exactly(s, size))
        assert cid == 2 and resp.error_code == 0
        assert sees_eof(s, timeout_s=30)
    assert_clean_output(idle_node, offset)


def test_clients_keep_working_across_an_idle_close(idle_node: BrokerProcess) -> None:
    """confluent-kafka and kafka-python producers whose connections the broker closed for idleness
    reconnect and deliver."""
    from confluent_kafka import Producer
    from kafka import KafkaProducer

    offset = output_size(idle_node)
    ck = Producer({"bootstrap.servers": idle_node.bootstrap, "message.timeout.ms": 20000})
    kp = KafkaProducer(bootstrap_servers=idle_node.bootstrap, request_timeout_ms=20000)
    try:
        for round_ in range(2):
            ck.produce("idle-clients", value=b"ck%d" % round_)
            assert ck.flush(20) == 0
            kp.send("idle-clients", value=b"kp%d" % round_).get(timeout=20)
            assert idle_node.pid is not None
            ports = peer_ports(idle_node.pid, idle_node.port)
            assert ports
            # every connection the clients have now is closed by the broker once idle
            wait_until(lambda ports=ports: connections_from(idle_node.pid, ports) == 0, 30,
                       "the broker to close the clients' idle connections")
    finally:
        kp.close(timeout=10)
    client_round_trip(idle_node.bootstrap)
    assert_clean_output(idle_node, offset)


def test_idle_and_slow_connections_cost_kilobytes_each(tmp_path: Path) -> None:
    """1,000 connections that sent one request and went idle held a 256 KiB receive buffer each
    (RSS 40 -> 299 MB), and 200 slow ones in the middle of a 1 MB request another 256 KiB of
    frame buffer. Now a receive buffer starts at 4 KiB and a frame buffer at 32 KiB."""
    idle, slow = 1000, 200
    node = BrokerProcess(tmp_path / "data")
    node.start()
    socks: list[socket.socket] = []
    try:
        assert node.pid is not None
        warm = socket.create_connection(("127.0.0.1", node.port), timeout=10)
        api_versions(warm)  # the code paths of a request are loaded before measuring
        before = rss_kib(node.pid)
        for i in range(idle):
            s = socket.create_connection(("127.0.0.1", node.port), timeout=10)
            api_versions(s, i + 1)
            socks.append(s)
        for _ in range(slow):
            s = socket.create_connection(("127.0.0.1", node.port), timeout=10)
            s.sendall(struct.pack(">i", 1_000_000) + bytes(1000))
            socks.append(s)
        ports = {s.getsockname()[1] for s in socks}
        wait_until(lambda: len(peer_ports(node.pid, node.port) & ports) == idle + slow
                   and unread_bytes(node.pid, ports) == 0, 30, "the broker to read every connection's bytes")
        grown = rss_kib(node.pid) - before
        # the old code grew by more than 256 KiB a connection; a task, a socket and a 4 KiB buffer
        # are ~10 KiB, a slow one's frame buffer 32 KiB more
        assert grown < (idle + slow) * 32, f"RSS grew {grown} KiB for {idle} idle and {slow} slow connections"
        warm.close()
    finally:
        for s in socks:
            s.close()
        node.close()


# ------------------------------------------------------------------ 5. the metrics endpoint


@pytest.fixture(scope="module")
def metrics_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, str]]:
    b = BrokerProcess(tmp_path_factory.mktemp("metrics-net") / "data",
                      overrides={"metrics.listener": "http://127.0.0.1:0"})
    b.start()
    yield b, metrics_url_from_log(b.output_path)
    b.close()


def test_half_sent_scrapes_neither_make_threads_nor_starve_the_kafka_port(
        metrics_node: tuple[BrokerProcess, str]) -> None:
    """200 connections that send `GET /metr` and stop: the old endpoint ran a thread for each, with
    no timeout (1,500 of them made ApiVersions take seconds). Now the thread count stays put, the
    Kafka port answers, a full scrape is served meanwhile, and the server closes every half-sent
    connection (at once when evicted, else after HEADER_TIMEOUT_S)."""
    node, url = metrics_node
    assert node.pid is not None
    offset = output_size(node)
    scrape(url)  # the rendering thread exists before counting
    baseline = threads(node.pid)
    host, port = url.removeprefix("http://").split("/")[0].rsplit(":", 1)
    prober = Prober(node.port, timeout_s=10)
    socks = []
    try:
        for _ in range(200):
            s = socket.create_connection((host, int(port)), timeout=10)
            s.sendall(b"GET /metr")
            socks.append(s)
        for _ in range(5):
            prober.round_trip()
        assert threads(node.pid) <= baseline + 2, (baseline, threads(node.pid))
        during = scrape(url, timeout_s=10)
        assert during.value("kafka_server_kafkaserver_brokerstate") == 3
        assert threads(node.pid) <= baseline + 2, (baseline, threads(node.pid))
        deadline = time.monotonic() + prometheus.HEADER_TIMEOUT_S + 20
        for s in socks:
            assert sees_eof(s, max(0.1, deadline - time.monotonic())), "a half-sent request was kept open"
    finally:
        for s in socks:
            s.close()
    prober.round_trip()
    prober.close()
    assert scrape(url).value("kafka_server_kafkaserver_brokerstate") == 3
    client_round_trip(node.bootstrap)
    assert_clean_output(node, offset)


def test_scrapes_keep_prometheus_client_content_negotiation(metrics_node: tuple[BrokerProcess, str]) -> None:
    """The endpoint answers as prometheus_client's app does: text by default, OpenMetrics when
    asked, gzip when accepted, `name[]` filters; other methods 405, a garbled request 400."""
    node, url = metrics_node

    def get(headers: dict[str, str], target: str = url) -> tuple[int, dict[str, str], bytes]:
        with urllib.request.urlopen(urllib.request.Request(target, headers=headers), timeout=15) as r:
            return r.status, dict(r.headers.items()), r.read()

    status, headers, body = get({})
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    assert Scrape(body.decode(), headers["Content-Type"]).value("kafka_server_kafkaserver_brokerstate") == 3
    _, headers, body = get({"Accept": "application/openmetrics-text; version=1.0.0"})
    assert headers["Content-Type"].startswith("application/openmetrics-text") and body.endswith(b"# EOF\n")
    _, headers, body = get({"Accept-Encoding": "gzip"})
    assert headers["Content-Encoding"] == "gzip" and b"kafka_server_kafkaserver_brokerstate" in gzip.decompress(body)
    _, _, body = get({}, url + "?name[]=kafka_server_kafkaserver_brokerstate")
    names = {line.split("{")[0].split(" ")[0] for line in body.decode().splitlines() if not line.startswith("#")}
    assert names == {"kafka_server_kafkaserver_brokerstate"}
    host, port = url.removeprefix("http://").split("/")[0].rsplit(":", 1)
    for raw, code in ((b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", b"405"),
                      (b"garbage\r\n\r\n", b"400")):
        with socket.create_connection((host, int(port)), timeout=15) as s:
            s.sendall(raw)
            answer = b""
            while chunk := s.recv(65536):
                answer += chunk
            assert answer.split(b" ")[1] == code, answer[:200]
