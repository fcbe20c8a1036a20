"""Hand-checked encodings: what real clients put on the wire, byte for byte."""

from __future__ import annotations

import struct

import pytest

from pybroker.protocol import primitives as p
from pybroker.protocol.chunks import FileRegion
from pybroker.protocol.errors import UnsupportedVersionError
from pybroker.protocol.frame import (
    decode_request,
    decode_response,
    encode_api_versions_unsupported,
    encode_request,
    encode_response,
)
from pybroker.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FetchResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
)

# ApiVersions v3 as librdkafka 2.x sends it: header v2 (client_id keeps its int16 length
# even though the header is flexible), then compact strings and an empty tag section.
LIBRDKAFKA_API_VERSIONS_V3 = (
    b"\x00\x00\x00\x25"  # size 37
    b"\x00\x12\x00\x03\x00\x00\x00\x01"  # api_key 18, version 3, correlation 1
    b"\x00\x07rdkafka"  # client_id, int16 length
    b"\x00"  # header tags
    b"\x0blibrdkafka"  # compact string: length + 1 = 11
    b"\x072.16.0"
    b"\x00"  # body tags
)


def test_librdkafka_api_versions_v3_request_decodes() -> None:
    header, body = decode_request(LIBRDKAFKA_API_VERSIONS_V3[4:])
    assert (header.request_api_key, header.request_api_version) == (18, 3)
    assert header.correlation_id == 1
    assert header.client_id == "rdkafka"
    assert body == ApiVersionsRequest(
        client_software_name="librdkafka", client_software_version="2.16.0"
    )


def test_librdkafka_api_versions_v3_request_encodes_identically() -> None:
    body = ApiVersionsRequest(client_software_name="librdkafka", client_software_version="2.16.0")
    assert encode_request(18, 3, 1, "rdkafka", body) == LIBRDKAFKA_API_VERSIONS_V3


def test_metadata_request_v0_is_a_plain_topic_array() -> None:
    body = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="a")])
    assert body.encode(0) == b"\x00\x00\x00\x01\x00\x01a"
    frame = encode_request(3, 0, 42, "c", body)
    assert (
        frame == b"\x00\x00\x00\x12" + b"\x00\x03\x00\x00\x00\x00\x00\x2a\x00\x01c" + body.encode(0)
    )


def test_metadata_request_null_topics_means_all_topics_from_v1() -> None:
    # v1+ null array = all topics; v9+ compact null (0) then two bools and tags
    assert MetadataRequest(topics=None).encode(1) == b"\xff\xff\xff\xff"
    assert MetadataRequest(topics=None, allow_auto_topic_creation=True).encode(9) == (
        b"\x00\x01\x00\x00\x00"
    )


def test_metadata_request_null_topics_rejected_at_v0() -> None:
    with pytest.raises(ValueError):
        MetadataRequest(topics=None).encode(0)


def test_compact_strings_and_arrays() -> None:
    assert p.compact_string("") == b"\x01"
    assert p.compact_nullable_string(None) == b"\x00"
    assert p.compact_string("ab") == b"\x03ab"
    long = "x" * 200  # length + 1 = 201 needs a two-byte varint
    assert p.compact_string(long)[:2] == b"\xc9\x01"
    assert p.read_compact_string(p.compact_string(long), 0) == (long, 202)
    assert p.compact_length(0) == b"\x01"
    assert p.uvarint(300) == b"\xac\x02"
    assert p.read_uvarint(b"\xac\x02", 0) == (300, 2)
    assert p.varint(-1) == b"\x01" and p.read_varint(b"\x01", 0) == (-1, 1)
    assert p.read_varlong(p.varlong(-(2**40)), 0) == (-(2**40), len(p.varlong(-(2**40))))


def test_api_versions_response_v3_tagged_fields_in_tag_order() -> None:
    body = ApiVersionsResponse(
        error_code=0,
        api_keys=[ApiVersionsResponse.ApiVersion(api_key=0, min_version=0, max_version=11)],
        throttle_time_ms=0,
        finalized_features_epoch=5,
        zk_migration_ready=True,
    )
    wire = body.encode(3)
    assert wire == (
        b"\x00\x00"  # error_code
        b"\x02\x00\x00\x00\x00\x00\x0b\x00"  # 1 api key + its tags
        b"\x00\x00\x00\x00"  # throttle
        b"\x02"  # two tagged fields
        b"\x01\x08\x00\x00\x00\x00\x00\x00\x00\x05"  # tag 1: FinalizedFeaturesEpoch
        b"\x03\x01\x01"  # tag 3: ZkMigrationReady
    )
    assert ApiVersionsResponse.decode(wire, 3) == body


def test_default_tagged_fields_are_not_written() -> None:
    body = ApiVersionsResponse(error_code=0, api_keys=[])
    assert body.encode(3) == b"\x00\x00\x01\x00\x00\x00\x00\x00"


def test_unknown_tagged_fields_survive_decode_and_encode() -> None:
    wire = (
        b"\x00\x00\x01\x00\x00\x00\x00" + b"\x02" + b"\x01\x08" + bytes(7) + b"\x09" + b"\x07\x02hi"
    )
    body = ApiVersionsResponse.decode(wire, 3)
    assert body.finalized_features_epoch == 9
    assert body.unknown_tagged_fields == [(7, b"hi")]
    assert body.encode(3) == wire


def test_api_versions_response_header_is_v0_even_when_flexible() -> None:
    body = ApiVersionsResponse(error_code=0, api_keys=[])
    frame = b"".join(encode_response(18, 3, 7, body))
    # size, correlation id, then the body at once: no header tag byte
    assert frame == struct.pack(">ii", 4 + 8, 7) + body.encode(3)
    assert decode_response(18, 3, frame[4:]) == (7, body)


def test_flexible_responses_carry_a_header_tag_byte() -> None:
    body = MetadataResponse(brokers=[], topics=[])
    frame = b"".join(encode_response(3, 9, 7, body))
    assert frame[4:9] == b"\x00\x00\x00\x07\x00"
    assert decode_response(3, 9, frame[4:]) == (7, body)


def test_unsupported_api_versions_answer_is_v0_with_error_35_and_the_range() -> None:
    frame = b"".join(encode_api_versions_unsupported(9, 0, 4))
    assert frame == (
        b"\x00\x00\x00\x10\x00\x00\x00\x09"  # size 16, correlation 9, header v0
        b"\x00\x23"  # UNSUPPORTED_VERSION
        b"\x00\x00\x00\x01\x00\x12\x00\x00\x00\x04"  # [ApiVersions 0..4]
    )


def test_produce_request_records_decode_as_zero_copy_views() -> None:
    batch = bytes(range(70))
    body = ProduceRequest(
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="t",
                partition_data=[ProduceRequest.PartitionProduceData(index=3, records=batch)],
            )
        ],
    )
    frame = bytearray(encode_request(0, 9, 5, "p", body))
    _, decoded = decode_request(frame[4:])
    records = decoded.topic_data[0].partition_data[0].records
    assert type(records) is memoryview and bytes(records) == batch
    buf = memoryview(frame)[4:]
    _, decoded = decode_request(buf)
    view = decoded.topic_data[0].partition_data[0].records
    frame[-4] ^= 0xFF  # last batch byte (3 tag bytes follow): the view aliases the frame
    assert bytes(view) != batch


def test_fetch_response_keeps_file_regions_as_separate_chunks(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "seg.log"
    path.write_bytes(b"HEAD" + bytes(range(100)) + b"TAIL")
    with open(path, "rb") as f:
        region = FileRegion(f.fileno(), 4, 100)
        body = FetchResponse(
            responses=[
                FetchResponse.FetchableTopicResponse(
                    topic="t",
                    partitions=[
                        FetchResponse.PartitionData(
                            partition_index=0, high_watermark=1, records=[b"ab", region]
                        )
                    ],
                )
            ]
        )
        chunks = encode_response(1, 11, 3, body)
        assert region in chunks
        size = struct.unpack(">i", chunks[0][:4])[0]
        total = sum(c.length if isinstance(c, FileRegion) else len(c) for c in chunks)
        assert size == total - 4
        # the encoded bytes with the region read back decode to the same data
        decoded = FetchResponse.decode(body.encode(11), 11)
        assert bytes(decoded.responses[0].partitions[0].records) == b"ab" + bytes(range(100))


def test_non_default_field_absent_at_version_is_rejected_unless_ignorable() -> None:
    body = ProduceRequest(transactional_id="txn", acks=1, timeout_ms=1, topic_data=[])
    with pytest.raises(UnsupportedVersionError) as e:
        body.encode(2)
    assert e.value.api_version == 2
    assert body.encode(3)  # present from v3
    # FetchResponse.topic_id is ignorable: silently dropped before v13
    fr = FetchResponse(
        responses=[FetchResponse.FetchableTopicResponse(topic="t", topic_id=b"\x01" * 16)]
    )
    assert FetchResponse.decode(fr.encode(12), 12).responses[0].topic_id == bytes(16)


def test_defaults_follow_the_spec() -> None:
    pd = FetchResponse.PartitionData()
    assert pd.last_stable_offset == -1 and pd.log_start_offset == -1
    assert pd.preferred_read_replica == -1 and pd.records is None
    assert pd.aborted_transactions == [] and pd.diverging_epoch is None
    assert ProduceRequest().transactional_id is None and ProduceRequest().topic_data == []
    assert MetadataRequest().topics == []
