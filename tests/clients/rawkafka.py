"""A tiny hand-written Kafka request encoder for the bad-input tests.

Independent of pybroker's own protocol code on purpose: a bug shared by the broker's codec and
the test's codec would otherwise go unseen. Covers only what the tests send: request header v1
(and v2 for flexible ApiVersions), ApiVersions v0, Metadata v1, Produce v3, and record batch v2
(CRC-32C via the `crc32c` package). All integers are big-endian, as on the wire.

Connections are blocking sockets with a timeout; `recv_frame` returns None when the peer closed.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import crc32c

API_PRODUCE, API_METADATA, API_API_VERSIONS = 0, 3, 18


# -- primitives -------------------------------------------------------------------------------


def string(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def zigzag_varint(n: int) -> bytes:
    """Kafka's signed varint/varlong: zigzag, then 7 bits per byte, low group first."""
    z = (n << 1) ^ (n >> 63)
    z &= (1 << 64) - 1
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def request_header(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: str | None = "rawkafka",
    flexible: bool = False,
) -> bytes:
    """Header v1 (v2 when flexible: an empty tagged-field section follows client_id)."""
    head = struct.pack(">hhi", api_key, api_version, correlation_id) + string(client_id)
    return head + (b"\x00" if flexible else b"")


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


# -- record batch v2 --------------------------------------------------------------------------


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[bytes, bytes | None]] = (),
) -> bytes:
    def blob(b: bytes | None) -> bytes:
        return zigzag_varint(-1) if b is None else zigzag_varint(len(b)) + b

    body = (
        b"\x00"
        + zigzag_varint(timestamp_delta)
        + zigzag_varint(offset_delta)
        + blob(key)
        + blob(value)
        + zigzag_varint(len(headers))
        + b"".join(zigzag_varint(len(k)) + k + blob(v) for k, v in headers)
    )
    return zigzag_varint(len(body)) + body


@dataclass
class BatchSpec:
    """Fields of a record batch v2 header; defaults are what a plain client sends."""

    base_timestamp: int
    records: Sequence[tuple[bytes | None, bytes | None]]
    attributes: int = 0
    last_offset_delta: int | None = None  # None: len(records) - 1
    records_count: int | None = None  # None: len(records)
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    corrupt_crc: bool = False


def record_batch(spec: BatchSpec) -> bytes:
    records = b"".join(encode_record(i, 0, k, v) for i, (k, v) in enumerate(spec.records))
    last_delta = len(spec.records) - 1 if spec.last_offset_delta is None else spec.last_offset_delta
    count = len(spec.records) if spec.records_count is None else spec.records_count
    after_crc = (
        struct.pack(
            ">hiqqqhii",
            spec.attributes,
            last_delta,
            spec.base_timestamp,
            spec.base_timestamp,
            spec.producer_id,
            spec.producer_epoch,
            spec.base_sequence,
            count,
        )
        + records
    )
    crc = crc32c.crc32c(after_crc)
    if spec.corrupt_crc:
        crc ^= 0xDEADBEEF
    # batchLength counts from partitionLeaderEpoch (offset 12) to the end.
    batch_length = 4 + 1 + 4 + len(after_crc)
    return struct.pack(">qiibI", 0, batch_length, -1, 2, crc) + after_crc


def control_batch(base_timestamp: int, producer_id: int = 1000, producer_epoch: int = 0) -> bytes:
    """A transactional control batch holding one ABORT marker (key: version 0, type 0)."""
    key = struct.pack(">hh", 0, 0)
    value = struct.pack(">hi", 0, 0)  # version, coordinator epoch
    return record_batch(
        BatchSpec(
            base_timestamp,
            [(key, value)],
            attributes=0x10 | 0x20,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=-1,
        )
    )


# -- request bodies ---------------------------------------------------------------------------


def api_versions_v0(correlation_id: int) -> bytes:
    return frame(request_header(API_API_VERSIONS, 0, correlation_id))


def metadata_v1(correlation_id: int, topics: Sequence[str] | None) -> bytes:
    body = (
        struct.pack(">i", -1)
        if topics is None
        else (struct.pack(">i", len(topics)) + b"".join(string(t) for t in topics))
    )
    return frame(request_header(API_METADATA, 1, correlation_id) + body)


def produce_v3(
    correlation_id: int,
    topic: str,
    partition: int,
    records: bytes,
    acks: int = -1,
    timeout_ms: int = 10_000,
) -> bytes:
    body = (
        string(None)
        + struct.pack(">hi", acks, timeout_ms)
        + struct.pack(">i", 1)
        + string(topic)
        + struct.pack(">i", 1)
        + struct.pack(">i", partition)
        + struct.pack(">i", len(records))
        + records
    )
    return frame(request_header(API_PRODUCE, 3, correlation_id) + body)


# -- responses --------------------------------------------------------------------------------


class Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str):
        values = struct.unpack_from(">" + fmt, self.data, self.pos)
        self.pos += struct.calcsize(">" + fmt)
        return values if len(values) > 1 else values[0]

    def string(self) -> str | None:
        n = self.take("h")
        if n < 0:
            return None
        s = self.data[self.pos : self.pos + n].decode()
        self.pos += n
        return s


def parse_api_versions_v0(body: bytes) -> tuple[int, dict[int, tuple[int, int]]]:
    """(error_code, {api_key: (min_version, max_version)}) from a v0 body (header stripped)."""
    r = Reader(body)
    error = r.take("h")
    ranges = {}
    for _ in range(r.take("i")):
        key, lo, hi = r.take("hhh")
        ranges[key] = (lo, hi)
    return error, ranges


@dataclass
class TopicMetadata:
    error_code: int
    name: str
    partitions: dict[int, tuple[int, int]]  # partition -> (error_code, leader_id)


def parse_metadata_v1(body: bytes) -> tuple[list[tuple[int, str, int]], int, list[TopicMetadata]]:
    r = Reader(body)
    brokers = []
    for _ in range(r.take("i")):
        node_id = r.take("i")
        host = r.string()
        port = r.take("i")
        r.string()  # rack
        brokers.append((node_id, host, port))
    controller = r.take("i")
    topics = []
    for _ in range(r.take("i")):
        err = r.take("h")
        name = r.string()
        r.take("b")  # is_internal
        parts = {}
        for _ in range(r.take("i")):
            perr, index, leader = r.take("hii")
            for _ in range(2):  # replica_nodes, isr_nodes: skipped
                n = r.take("i")
                r.pos += 4 * max(n, 0)
            parts[index] = (perr, leader)
        topics.append(TopicMetadata(err, name, parts))
    return brokers, controller, topics


def parse_produce_v3(body: bytes) -> dict[tuple[str, int], tuple[int, int]]:
    """{(topic, partition): (error_code, base_offset)}; throttle_time_ms follows the topics."""
    r = Reader(body)
    out = {}
    for _ in range(r.take("i")):
        name = r.string()
        for _ in range(r.take("i")):
            partition, error, base_offset, _log_append_time = r.take("ihqq")
            out[(name, partition)] = (error, base_offset)
    return out


# -- connection -------------------------------------------------------------------------------


class Connection:
    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _recv_exact(self, n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    def recv_frame(self) -> tuple[int, bytes] | None:
        """(correlation_id, body after a v0 response header), or None if the peer closed.
        Raises socket.timeout if nothing arrives within the socket timeout."""
        size = self._recv_exact(4)
        if size is None:
            return None
        (n,) = struct.unpack(">i", size)
        payload = self._recv_exact(n)
        if payload is None:
            return None
        (correlation_id,) = struct.unpack_from(">i", payload)
        return correlation_id, payload[4:]

    def request(self, data: bytes) -> tuple[int, bytes]:
        self.send(data)
        response = self.recv_frame()
        assert response is not None, "broker closed the connection instead of answering"
        return response

    def is_closed_by_peer(self, timeout: float = 10.0) -> bool:
        """True when the peer closes (EOF or reset) within `timeout` without sending data."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(4096)
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False
        assert data == b"", f"expected the connection to be closed, got {data[:64]!r}"
        return True

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
