"""API key table, header versions and the Kafka error code table."""

from __future__ import annotations

from pybroker.protocol.api_keys import (
    FIRST_FLEXIBLE_VERSION,
    METADATA_RECORD_CLASSES,
    REQUEST_CLASSES,
    RESPONSE_CLASSES,
    VALID_VERSIONS,
    ApiKey,
    request_header_version,
    response_header_version,
)
from pybroker.protocol.errors import Errors, KafkaError
from pybroker.protocol.messages import ApiVersionsRequest, FetchResponse, TopicRecord


def test_api_keys_use_kafkas_names() -> None:
    assert ApiKey.PRODUCE == 0 and ApiKey.FETCH == 1 and ApiKey.LIST_OFFSETS == 2
    assert ApiKey.API_VERSIONS == 18 and ApiKey.INIT_PRODUCER_ID == 22
    assert ApiKey.OFFSET_FOR_LEADER_EPOCH == 23 and ApiKey.CONSUMER_GROUP_HEARTBEAT == 68
    assert ApiKey.DESCRIBE_TOPIC_PARTITIONS == 75


def test_version_facts_come_from_the_specs() -> None:
    # the 2024 snapshot's ranges, widened to Kafka 4.2's by tools/kafka-protocol-overlay
    assert VALID_VERSIONS[ApiKey.PRODUCE] == (0, 13)
    assert VALID_VERSIONS[ApiKey.FETCH] == (0, 18)
    assert VALID_VERSIONS[ApiKey.LIST_CONFIG_RESOURCES] == (0, 1)
    assert FIRST_FLEXIBLE_VERSION[ApiKey.API_VERSIONS] == 3
    assert FIRST_FLEXIBLE_VERSION[ApiKey.METADATA] == 9


def test_class_maps_resolve_lazily_to_generated_classes() -> None:
    assert REQUEST_CLASSES[18] is ApiVersionsRequest
    assert RESPONSE_CLASSES[1] is FetchResponse
    assert METADATA_RECORD_CLASSES[2] is TopicRecord
    assert set(REQUEST_CLASSES) == set(RESPONSE_CLASSES) == set(VALID_VERSIONS)
    assert REQUEST_CLASSES.get(9999) is None


def test_header_versions() -> None:
    assert request_header_version(ApiKey.METADATA, 8) == 1
    assert request_header_version(ApiKey.METADATA, 9) == 2
    assert request_header_version(ApiKey.CONTROLLED_SHUTDOWN, 0) == 0
    assert response_header_version(ApiKey.METADATA, 9) == 1
    assert response_header_version(ApiKey.METADATA, 8) == 0
    assert response_header_version(ApiKey.API_VERSIONS, 3) == 0


def test_error_codes_and_retriable_flags() -> None:
    assert Errors.NONE == 0 and Errors.UNKNOWN_SERVER_ERROR == -1
    assert Errors.OFFSET_OUT_OF_RANGE == 1 and Errors.UNKNOWN_TOPIC_OR_PARTITION == 3
    assert Errors.UNSUPPORTED_VERSION == 35 and Errors.INVALID_REQUEST == 42
    assert Errors.PRODUCER_FENCED == 90 and Errors.UNKNOWN_TOPIC_ID == 100
    assert Errors.TRANSACTION_ABORTABLE == 120
    assert Errors.NOT_LEADER_OR_FOLLOWER.retriable and Errors.NOT_COORDINATOR.retriable
    assert Errors.CORRUPT_MESSAGE.retriable  # CorruptRecordException is retriable in Kafka
    assert not Errors.TOPIC_AUTHORIZATION_FAILED.retriable
    assert not Errors.INVALID_PRODUCER_EPOCH.retriable
    codes = [e.value for e in Errors]
    assert len(codes) == len(set(codes))
    assert codes == sorted(codes)
    assert set(range(-1, 134)) == set(codes)


def test_kafka_error_carries_code_and_message() -> None:
    err = KafkaError(Errors.NOT_COORDINATOR, "moved")
    assert err.code is Errors.NOT_COORDINATOR and err.message == "moved" and err.retriable
    assert KafkaError(31000).code is Errors.UNKNOWN_SERVER_ERROR
    assert Errors.for_code(6) is Errors.NOT_LEADER_OR_FOLLOWER
