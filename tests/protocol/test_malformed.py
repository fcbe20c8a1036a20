"""Bad request bytes raise the protocol errors, never IndexError or a huge allocation."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pybroker.protocol.errors import (
    Errors,
    ProtocolError,
    UnknownApiKeyError,
    UnsupportedVersionError,
)
from pybroker.protocol.frame import decode_request, decode_response, encode_request
from pybroker.protocol.messages import FetchRequest, MetadataRequest, ProduceRequest
from pybroker.protocol.primitives import MalformedDataError, read_int_array


def _produce() -> ProduceRequest:
    return ProduceRequest(
        transactional_id="tx",
        acks=-1,
        timeout_ms=100,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="topic",
                partition_data=[ProduceRequest.PartitionProduceData(index=0, records=bytes(80))],
            )
        ],
    )


def _fetch() -> FetchRequest:
    return FetchRequest(
        max_wait_ms=500,
        topics=[
            FetchRequest.FetchTopic(
                topic="topic",
                topic_id=bytes(16),
                partitions=[FetchRequest.FetchPartition(partition=0, fetch_offset=5)],
            )
        ],
    )


FRAMES = [
    ("produce_v3", encode_request(0, 3, 11, "c", _produce())[4:]),
    ("produce_v9", encode_request(0, 9, 11, "c", _produce())[4:]),
    ("fetch_v4", encode_request(1, 4, 11, "c", _fetch())[4:]),
    ("fetch_v12", encode_request(1, 12, 11, "c", _fetch())[4:]),
    ("fetch_v16", encode_request(1, 16, 11, "c", _fetch())[4:]),
    (
        "metadata_v12",
        encode_request(
            3, 12, 11, "c", MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="t")])
        )[4:],
    ),
]


@pytest.mark.parametrize("name,frame", FRAMES, ids=[n for n, _ in FRAMES])
def test_every_truncation_raises_protocol_error(name: str, frame: bytes) -> None:
    decode_request(frame)  # the whole frame is fine
    for cut in range(len(frame)):
        with pytest.raises(ProtocolError) as e:
            decode_request(frame[:cut])
        if cut >= 8:
            assert e.value.correlation_id == 11


def test_negative_string_length_is_a_protocol_error() -> None:
    # MetadataRequest v1: one topic whose name length is -5
    frame = struct.pack(">hhih", 3, 1, 4, -1) + struct.pack(">ih", 1, -5)
    with pytest.raises(ProtocolError, match="null value|past the end"):
        decode_request(frame)


def test_null_in_non_nullable_array_is_a_protocol_error() -> None:
    frame = struct.pack(">hhih", 3, 0, 4, -1) + struct.pack(">i", -1)  # Metadata v0: null topics
    with pytest.raises(ProtocolError):
        decode_request(frame)


def test_absurd_array_length_is_rejected_before_allocating() -> None:
    frame = struct.pack(">hhih", 3, 1, 4, -1) + struct.pack(">i", 0x7FFFFFFF) + b"\x00\x01a"
    with pytest.raises(ProtocolError, match="too long"):
        decode_request(frame)
    # compact array: uvarint 0xFFFFFFF (268M elements) in a Metadata v12 body
    header = struct.pack(">hhih", 3, 12, 4, -1) + b"\x00"
    with pytest.raises(ProtocolError, match="too long"):
        decode_request(header + b"\xff\xff\xff\x7f" + b"\x00" * 8)
    # int arrays go through the same guard
    with pytest.raises(MalformedDataError, match="cannot fit"):
        read_int_array(b"\x00" * 8, 0, 2**30, "i", 4)


def test_overlong_varint_is_a_protocol_error() -> None:
    header = struct.pack(">hhih", 3, 12, 4, -1) + b"\x00"
    with pytest.raises(ProtocolError):
        decode_request(header + b"\xff" * 8)


def test_unknown_api_key_carries_the_correlation_id() -> None:
    with pytest.raises(UnknownApiKeyError) as e:
        decode_request(struct.pack(">hhih", 999, 0, 77, -1))
    assert e.value.correlation_id == 77 and e.value.api_key == 999
    assert e.value.code == Errors.INVALID_REQUEST


def test_unsupported_version_carries_the_header() -> None:
    frame = struct.pack(">hhih", 18, 9, 78, 3) + b"abc" + b"\x00"
    with pytest.raises(UnsupportedVersionError) as e:
        decode_request(frame)
    err = e.value
    assert (err.correlation_id, err.api_key, err.api_version, err.client_id) == (78, 18, 9, "abc")
    assert err.code == Errors.UNSUPPORTED_VERSION


def test_supported_ranges_narrow_what_is_accepted() -> None:
    frame = encode_request(0, 2, 5, "c", _produce().__class__(acks=1, timeout_ms=1))[4:]
    decode_request(frame)
    with pytest.raises(UnsupportedVersionError):
        decode_request(frame, supported={0: (3, 11)})


def test_truncated_response_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        decode_response(3, 12, b"\x00\x00\x00\x01\x00\x00")


@settings(max_examples=300, deadline=None)
@given(
    key=st.sampled_from([0, 1, 3, 18, 19, 11, 8, 9]),
    version=st.integers(0, 17),
    body=st.binary(max_size=64),
)
def test_random_bodies_only_raise_protocol_errors(key: int, version: int, body: bytes) -> None:
    frame = struct.pack(">hhih", key, version, 1, -1) + body
    try:
        decode_request(frame)
    except ProtocolError:
        pass


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_bit_flips_in_valid_frames_only_raise_protocol_errors(data: st.DataObject) -> None:
    _, frame = data.draw(st.sampled_from(FRAMES))
    buf = bytearray(frame)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(8, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    try:
        decode_request(bytes(buf))
    except ProtocolError:
        pass
