"""Micro-benchmarks of the hot protocol paths: ProduceRequest decode, FetchResponse encode.

One topic, one partition, at the versions current clients use (librdkafka 2.16 sends
Produce v10 and Fetch v12-16; kcat Produce v7 / Fetch v11). Run:
    pytest bench/micro/test_protocol_bench.py --benchmark-only
"""

from __future__ import annotations

import pytest

from pybroker.protocol.chunks import FileRegion
from pybroker.protocol.frame import decode_request, encode_request, encode_response
from pybroker.protocol.messages import FetchResponse, ProduceRequest


def _produce() -> ProduceRequest:
    return ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="bench-topic",
                partition_data=[
                    ProduceRequest.PartitionProduceData(index=0, records=bytes(16 * 1024))
                ],
            )
        ],
    )


def _fetch(version: int) -> FetchResponse:
    return FetchResponse(
        responses=[
            FetchResponse.FetchableTopicResponse(
                topic="bench-topic" if version < 13 else "",
                topic_id=b"\x07" * 16,
                partitions=[
                    FetchResponse.PartitionData(
                        partition_index=0,
                        high_watermark=1000,
                        last_stable_offset=1000,
                        log_start_offset=0,
                        records=[FileRegion(3, 4096, 1024 * 1024)],
                    )
                ],
            )
        ]
    )


@pytest.mark.parametrize("version", [7, 10])
def test_produce_request_decode_body(benchmark, version: int) -> None:  # type: ignore[no-untyped-def]
    wire = _produce().encode(version)
    result = benchmark(ProduceRequest.decode, wire, version)
    assert result.topic_data[0].partition_data[0].records.nbytes == 16 * 1024


@pytest.mark.parametrize("version", [7, 10])
def test_produce_request_decode_frame(benchmark, version: int) -> None:  # type: ignore[no-untyped-def]
    frame = memoryview(encode_request(0, version, 1, "rdkafka", _produce()))[4:]
    header, body = benchmark(decode_request, frame)
    assert header.request_api_version == version


@pytest.mark.parametrize("version", [11, 12, 16])
def test_fetch_response_encode_body(benchmark, version: int) -> None:  # type: ignore[no-untyped-def]
    body = _fetch(version)
    parts = benchmark(body.encode_parts, version)
    assert any(type(p) is FileRegion for p in parts)


@pytest.mark.parametrize("version", [11, 12, 16])
def test_fetch_response_encode_frame(benchmark, version: int) -> None:  # type: ignore[no-untyped-def]
    body = _fetch(version)
    chunks = benchmark(encode_response, 1, version, 42, body)
    assert len(chunks) >= 2
