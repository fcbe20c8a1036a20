"""Bad input over raw sockets: each case gets Kafka's answer (an error code, or the connection
closed) while another connection, opened before, keeps working and new ones are accepted.

Requests are built by tests/clients/rawkafka.py, not by pybroker's protocol code."""

from __future__ import annotations

import struct
import time

import pytest

from . import rawkafka as rk
from .adapters import confluent_consume, confluent_consumer
from .helpers import now_ms

MAX_REQUEST = 102_400
BROKER_OVERRIDES = {"socket.request.max.bytes": str(MAX_REQUEST)}

NONE, CORRUPT_MESSAGE, UNSUPPORTED_VERSION, INVALID_RECORD = 0, 2, 35, 87


def connect(broker) -> rk.Connection:
    return rk.Connection(broker.host, broker.port)


def assert_serves(conn: rk.Connection, correlation_id: int = 4242) -> None:
    cid, body = conn.request(rk.api_versions_v0(correlation_id))
    assert cid == correlation_id
    error, ranges = rk.parse_api_versions_v0(body)
    assert error == NONE and rk.API_API_VERSIONS in ranges


def ensure_topic(broker, topic: str) -> None:
    """Auto-create through Metadata v1 and wait until partition 0 has a leader."""
    with connect(broker) as conn:
        deadline = time.monotonic() + 10
        while True:
            _, body = conn.request(rk.metadata_v1(7, [topic]))
            _, _, topics = rk.parse_metadata_v1(body)
            t = topics[0]
            if (
                t.error_code == NONE
                and t.partitions.get(0, (-1, -1))[0] == NONE
                and t.partitions[0][1] >= 0
            ):
                return
            assert time.monotonic() < deadline, f"topic {topic} not ready: {t}"
            time.sleep(0.1)


def high_watermark(broker, topic: str) -> int:
    from confluent_kafka import TopicPartition

    consumer = confluent_consumer(broker.bootstrap)
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1]
    finally:
        consumer.close()


@pytest.fixture
def bystander(broker):
    """A healthy connection opened before the bad input; checked again afterwards."""
    conn = connect(broker)
    assert_serves(conn, 1)
    yield conn
    assert_serves(conn, 2)
    conn.close()
    with connect(broker) as fresh:
        assert_serves(fresh, 3)


# -- framing ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(rk.frame(b"\x00\x03"), id="shorter-than-header"),
        pytest.param(
            rk.frame(rk.request_header(rk.API_METADATA, 1, 9) + b"\x00\x00\x00\x05\x00"),
            id="truncated-metadata-body",
        ),
        pytest.param(struct.pack(">i", -5) + b"\x00" * 8, id="negative-size"),
        pytest.param(
            rk.frame(
                rk.request_header(rk.API_METADATA, 1, 9, client_id=None)[:-2]
                + b"\x7f\xff"
                + b"x" * 3
            ),
            id="client-id-overruns-frame",
        ),
    ],
)
def test_garbage_frame_closes_connection(broker, bystander, payload):
    with connect(broker) as conn:
        conn.send(payload)
        assert conn.is_closed_by_peer()


def test_oversized_frame_closes_connection(broker, bystander):
    with connect(broker) as conn:
        # Only the size is sent: the broker must refuse on the size alone, not read 100 KB+.
        conn.send(struct.pack(">i", MAX_REQUEST + 1))
        assert conn.is_closed_by_peer()


def test_unknown_api_key_closes_connection(broker, bystander):
    with connect(broker) as conn:
        conn.send(rk.frame(rk.request_header(9999, 0, 11)))
        assert conn.is_closed_by_peer()


def test_unsupported_api_versions_version_gets_v0_error_with_ranges(broker, bystander):
    with connect(broker) as conn:
        # As librdkafka does for its newest version: flexible header v2, then a body.
        body = b"\x05rawk\x021\x00"  # compact strings client_software_name/version, no tags
        cid, resp = conn.request(
            rk.frame(rk.request_header(rk.API_API_VERSIONS, 127, 77, flexible=True) + body)
        )
        assert cid == 77
        error, ranges = rk.parse_api_versions_v0(resp)
        assert error == UNSUPPORTED_VERSION
        # Kafka (KIP-511) lists ApiVersions' own range here, so the client can retry.
        lo, hi = ranges[rk.API_API_VERSIONS]
        assert lo == 0 and hi >= 3
        # The connection stays usable, at a supported version.
        assert_serves(conn, 78)


# -- produce validation -----------------------------------------------------------------------


def produce(broker, topic: str, batch: bytes, correlation_id: int = 21) -> tuple[int, int]:
    with connect(broker) as conn:
        cid, body = conn.request(rk.produce_v3(correlation_id, topic, 0, batch))
        assert cid == correlation_id
        return rk.parse_produce_v3(body)[(topic, 0)]


def test_valid_raw_produce_is_stored(broker, bystander, topic):
    ensure_topic(broker, topic)
    ts = now_ms()
    batch = rk.record_batch(rk.BatchSpec(ts, [(b"k1", b"v1"), (None, b"v2")]))
    assert produce(broker, topic, batch) == (NONE, 0)
    got = confluent_consume(broker.bootstrap, topic, count=2)
    assert [(r.key, r.value, r.offset, r.timestamp_ms) for r in got] == [
        (b"k1", b"v1", 0, ts),
        (None, b"v2", 1, ts),
    ]


@pytest.mark.parametrize(
    "spec, want",
    [
        pytest.param(dict(corrupt_crc=True), CORRUPT_MESSAGE, id="bad-crc"),
        pytest.param(dict(records_count=3), INVALID_RECORD, id="count-above-last-offset-delta"),
        pytest.param(dict(last_offset_delta=0), INVALID_RECORD, id="last-offset-delta-too-small"),
    ],
)
def test_invalid_batch_is_rejected(broker, bystander, topic, spec, want):
    ensure_topic(broker, topic)
    ts = now_ms()
    bad = rk.record_batch(rk.BatchSpec(ts, [(b"a", b"1"), (b"b", b"2")], **spec))
    with connect(broker) as conn:
        cid, body = conn.request(rk.produce_v3(31, topic, 0, bad))
        assert cid == 31
        error, _ = rk.parse_produce_v3(body)[(topic, 0)]
        assert error == want
        # Nothing was appended, and the same connection still produces.
        good = rk.record_batch(rk.BatchSpec(ts, [(b"ok", b"ok")]))
        cid, body = conn.request(rk.produce_v3(32, topic, 0, good))
        assert rk.parse_produce_v3(body)[(topic, 0)] == (NONE, 0)
    assert high_watermark(broker, topic) == 1


def test_control_batch_from_client_is_rejected(broker, bystander, topic):
    ensure_topic(broker, topic)
    assert produce(broker, topic, rk.control_batch(now_ms()))[0] == INVALID_RECORD
    assert high_watermark(broker, topic) == 0


def test_acks_zero_gets_no_response(broker, bystander, topic):
    ensure_topic(broker, topic)
    with connect(broker) as conn:
        batch = rk.record_batch(rk.BatchSpec(now_ms(), [(b"k", b"fire-and-forget")]))
        conn.send(rk.produce_v3(51, topic, 0, batch, acks=0))
        # The next answer on this connection is for the next request, not for the produce.
        cid, body = conn.request(rk.api_versions_v0(52))
        assert cid == 52
        assert rk.parse_api_versions_v0(body)[0] == NONE
    got = confluent_consume(broker.bootstrap, topic, count=1)
    assert [(r.key, r.value, r.offset) for r in got] == [(b"k", b"fire-and-forget", 0)]
