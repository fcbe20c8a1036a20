"""Regressions for what an outside fuzzing campaign found (issue: no request may hang, exhaust or
crash the broker). Each case goes through a live broker process and checks Kafka's answer, that
the event loop kept serving (ApiVersions round trips within a second meanwhile), bounded memory,
and that nothing but at most one INFO line was logged for it (no traceback).
"""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest
from clients.broker import BrokerProcess
from server.wire import WireClient

from pybroker.protocol.api_keys import REQUEST_CLASSES, VALID_VERSIONS, ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.frame import decode_response, encode_request
from pybroker.protocol.messages import (
    CreateTopicsRequest,
    FetchRequest,
    MetadataRequest,
    ProduceRequest,
)
from pybroker.records.batch import build_batch
from pybroker.server.api_versions import SUPPORTED

from .harness import (
    Prober,
    assert_clean_output,
    client_round_trip,
    connections_from,
    output_since,
    output_size,
    reset,
    rss_kib,
    unread_bytes,
    wait_until,
)

# The frames as the campaign reported them (size prefix included).
CREATE_PARTITIONS_2_POW_28 = bytes.fromhex(
    "000000250025000200000006000772646b61666b610002066361702d611000000000000000ea600000")
METADATA_V11_TOPIC_ID = bytes.fromhex(
    "000000440003000b00000002000772646b61666b61000300000000000000000000000000000000066361702d6100"
    "00000000000000007f00000000000000066361702d6200000000")


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory):
    b = BrokerProcess(tmp_path_factory.mktemp("findings") / "data")
    b.start()
    yield b
    b.close()


@pytest.fixture
def clean(node: BrokerProcess):
    """The broker's output from this test on must hold no traceback or ERROR line."""
    offset = output_size(node)
    yield offset
    assert node.is_running(), "the broker died:\n" + node.output_tail()
    assert_clean_output(node, offset)


def raw_exchange(port: int, frame: bytes, timeout_s: float = 5.0) -> bytes | None:
    """Send one frame; the response frame (without size), or None if the broker closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(frame)
        head = b""
        while len(head) < 4:
            chunk = s.recv(4 - len(head))
            if not chunk:
                return None
            head += chunk
        size = struct.unpack(">i", head)[0]
        body = b""
        while len(body) < size:
            chunk = s.recv(size - len(body))
            if not chunk:
                raise AssertionError("response cut short")
            body += chunk
        return body


def create_topic(port: int, name: str, partitions: int) -> None:
    w = WireClient("127.0.0.1", port, timeout_s=120)
    try:
        req = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=1, assignments=[], configs=[])],
            timeout_ms=120000, validate_only=False)
        resp = w.request(ApiKey.CREATE_TOPICS, 5, req)
        assert resp.topics[0].error_code == 0, resp
    finally:
        w.close()


def test_create_partitions_of_2_pow_28_is_refused_at_once(node: BrokerProcess, clean: int) -> None:
    create_topic(node.port, "cap-a", 1)
    rss_before = rss_kib(node.pid)
    prober = Prober(node.port)
    try:
        body = raw_exchange(node.port, CREATE_PARTITIONS_2_POW_28)
        prober.round_trip()
    finally:
        prober.close()
    assert body is not None
    cid, resp = decode_response(ApiKey.CREATE_PARTITIONS, 2, body)
    assert cid == 6
    [result] = resp.results
    assert (result.name, result.error_code) == ("cap-a", Errors.POLICY_VIOLATION)
    assert result.error_message == "Unable to perform excessively large batch operation."
    assert rss_kib(node.pid) - rss_before < 32 * 1024
    # nothing was added
    w = WireClient("127.0.0.1", node.port)
    meta = w.request(ApiKey.METADATA, 12, MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name="cap-a", topic_id=bytes(16))],
        allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    w.close()
    assert len(meta.topics[0].partitions) == 1


def test_create_topics_past_10000_partitions_fail_whole_request(node: BrokerProcess, clean: int) -> None:
    w = WireClient("127.0.0.1", node.port)
    try:
        def topic(name: str, n: int) -> CreateTopicsRequest.CreatableTopic:
            return CreateTopicsRequest.CreatableTopic(name=name, num_partitions=n, replication_factor=1,
                                                      assignments=[], configs=[])
        for topics in ([topic("huge-a", 1 << 28)], [topic("split-a", 6000), topic("split-b", 4001)]):
            resp = w.request(ApiKey.CREATE_TOPICS, 5, CreateTopicsRequest(topics=topics, timeout_ms=5000,
                                                                          validate_only=False))
            assert [(t.name, t.error_code, t.error_message) for t in resp.topics] == [
                (t.name, Errors.POLICY_VIOLATION, "Excessively large number of partitions per request.")
                for t in topics]
        meta = w.request(ApiKey.METADATA, 12, MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                                               include_topic_authorized_operations=False))
        assert not {"huge-a", "split-a", "split-b"} & {t.name for t in meta.topics}
    finally:
        w.close()


def test_large_legal_create_keeps_the_loop_serving(node: BrokerProcess, clean: int) -> None:
    """1,000 partitions' directories and files are made off the event loop: ApiVersions round trips
    keep completing within a second while they are, and every partition serves afterwards."""
    done = threading.Event()
    errors: list[BaseException] = []

    def create() -> None:
        try:
            create_topic(node.port, "wide", 1000)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            done.set()

    prober = Prober(node.port, timeout_s=1.0)
    t = threading.Thread(target=create)
    t.start()
    trips = 0
    try:
        while not done.is_set():
            prober.round_trip()  # raises socket.timeout if the loop stalls for a second
            trips += 1
            time.sleep(0.02)
    finally:
        prober.close()
        t.join(120)
    assert not errors, errors
    assert trips > 0
    w = WireClient("127.0.0.1", node.port)
    try:
        batch = build_batch([(0, b"k", b"last", ())])
        resp = w.request(ApiKey.PRODUCE, 9, ProduceRequest(transactional_id=None, acks=-1, timeout_ms=5000,
            topic_data=[ProduceRequest.TopicProduceData(name="wide", partition_data=[
                ProduceRequest.PartitionProduceData(index=999, records=batch)])]))
        assert resp.responses[0].partition_responses[0].error_code == 0
    finally:
        w.close()


def test_declared_frame_sizes_cost_memory_only_as_bytes_arrive(node: BrokerProcess, clean: int) -> None:
    """20 connections each announce a 100 MB request and send one byte: ~2 GB before the fix."""
    before = rss_kib(node.pid)
    socks = []
    try:
        for _ in range(20):
            s = socket.create_connection(("127.0.0.1", node.port), timeout=5)
            s.sendall(struct.pack(">i", 100_000_000) + b"x")
            socks.append(s)
        ports = {s.getsockname()[1] for s in socks}
        wait_until(lambda: connections_from(node.pid, ports) == 20 and unread_bytes(node.pid, ports) == 0, 20,
                   "the broker to read every connection's bytes")
        prober = Prober(node.port)
        prober.round_trip()
        prober.close()
        assert rss_kib(node.pid) - before < 64 * 1024, (before, rss_kib(node.pid))
    finally:
        for s in socks:
            reset(s)
    client_round_trip(node.bootstrap)


def test_api_keys_this_node_does_not_serve_close_the_connection_cleanly(node: BrokerProcess, clean: int) -> None:
    from protocol.protocol_strategies import example

    offset = clean
    unserved = sorted(k for k in VALID_VERSIONS if k in REQUEST_CLASSES and k not in SUPPORTED)
    assert ApiKey.CONTROLLED_SHUTDOWN in unserved
    for key in unserved:
        version = VALID_VERSIONS[key][1]
        frame = encode_request(key, version, 7, "fuzz", example(REQUEST_CLASSES[key], version))
        assert raw_exchange(node.port, frame) is None, f"{ApiKey(key).name} was answered"
    text = output_since(node, offset)
    closes = [line for line in text.splitlines() if "is not enabled" in line]
    assert len(closes) == len(unserved) and all(" INFO " in line for line in closes), text[-2000:]


def test_fetch_with_negative_partition_max_bytes_answers_unknown_server_error(node: BrokerProcess,
                                                                              clean: int) -> None:
    create_topic(node.port, "negmax", 2)
    w = WireClient("127.0.0.1", node.port)
    try:
        req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                           session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(
                               topic="negmax", partitions=[
                                   FetchRequest.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0,
                                                               log_start_offset=-1, partition_max_bytes=-5),
                                   FetchRequest.FetchPartition(partition=1, current_leader_epoch=-1, fetch_offset=0,
                                                               log_start_offset=-1, partition_max_bytes=1000)])],
                           forgotten_topics_data=[], rack_id="")
        resp = w.request(ApiKey.FETCH, 11, req)
    finally:
        w.close()
    codes = [p.error_code for p in resp.responses[0].partitions]
    assert codes == [Errors.UNKNOWN_SERVER_ERROR, 0]


def test_metadata_v11_naming_topics_by_id_is_an_invalid_request(node: BrokerProcess, clean: int) -> None:
    body = raw_exchange(node.port, METADATA_V11_TOPIC_ID)
    assert body is not None
    cid, resp = decode_response(ApiKey.METADATA, 11, body)
    assert cid == 2
    assert [(t.name, t.error_code) for t in resp.topics] == [
        ("cap-a", Errors.INVALID_REQUEST), ("cap-b", Errors.INVALID_REQUEST)]
    # a null name before v12: Kafka echoes it as ""
    w = WireClient("127.0.0.1", node.port)
    try:
        resp = w.request(ApiKey.METADATA, 11, MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=None, topic_id=bytes(16))],
            allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    finally:
        w.close()
    assert [(t.name, t.error_code) for t in resp.topics] == [("", Errors.INVALID_REQUEST)]


def test_parked_fetches_are_released_when_their_clients_reset(node: BrokerProcess, clean: int) -> None:
    """200 fetches parked for 60 s whose clients reset: the broker lets go of them (and their
    sockets) at once, not when the wait expires."""
    create_topic(node.port, "parked", 1)
    req = FetchRequest(replica_id=-1, max_wait_ms=60000, min_bytes=1 << 20, max_bytes=1 << 20, isolation_level=0,
                       session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(
                           topic="parked", partitions=[FetchRequest.FetchPartition(
                               partition=0, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
                               partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id="")
    frame = encode_request(ApiKey.FETCH, 11, 1, "parked", req)
    socks = []
    try:
        for _ in range(200):
            s = socket.create_connection(("127.0.0.1", node.port), timeout=5)
            s.sendall(frame)
            socks.append(s)
        ports = {s.getsockname()[1] for s in socks}
        wait_until(lambda: connections_from(node.pid, ports) == 200 and unread_bytes(node.pid, ports) == 0, 20,
                   "the broker to read 200 fetches")
        for s in socks[:3]:  # parked, not answered
            s.settimeout(0.05)
            with pytest.raises(TimeoutError):
                s.recv(1)
    finally:
        for s in socks:
            reset(s)
    wait_until(lambda: connections_from(node.pid, ports) == 0, 20, "the parked fetches' sockets to be closed")
    client_round_trip(node.bootstrap)
