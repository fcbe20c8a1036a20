"""Regressions for what the cluster-RPC fuzzer (test_cluster_fuzz.py) found on the controller and
broker listeners. Each case goes to a live node process over the wire (one node, combined roles,
with a controller listener: it is its own active controller and quorum leader), checks Kafka's
answer, that the connection stays open for the next request, and that the node logged no
traceback, ERROR or CRITICAL line for it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import pytest
from clients.broker import BrokerProcess
from server.wire import WireClient

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.frame import encode_request
from pybroker.protocol.messages import (
    AlterPartitionRequest,
    ApiVersionsRequest,
    CreateAclsRequest,
    CreateTopicsRequest,
    DefaultPrincipalData,
    DeleteAclsRequest,
    DescribeQuorumRequest,
    EnvelopeRequest,
    EnvelopeResponse,
    ListPartitionReassignmentsRequest,
    MetadataRequest,
)
from tests.cluster.harness import free_ports, wait_until

from .cluster_view import read_metadata_image
from .harness import assert_clean_output, output_size

LOCALHOST = bytes([127, 0, 0, 1])


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    (controller_port,) = free_ports(1)
    b = BrokerProcess(tmp_path_factory.mktemp("cluster-findings") / "data", overrides={
        "listeners": f"PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:{controller_port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"})
    b.controller_port = controller_port  # type: ignore[attr-defined]
    b.start()
    yield b
    b.close()


@pytest.fixture
def controller(node: BrokerProcess) -> Iterator[WireClient]:
    """A connection to the node's controller listener; afterwards the node must be running, the
    connection still answer, and the node's output hold no traceback or ERROR line."""
    offset = output_size(node)
    w = WireClient("127.0.0.1", node.controller_port, timeout_s=15)  # type: ignore[attr-defined]
    yield w
    try:
        assert w.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(
            client_software_name="wire-test", client_software_version="1")).error_code == 0
    finally:
        w.close()
    assert node.is_running(), "the node died:\n" + node.output_tail()
    assert_clean_output(node, offset)


def principal(kind: str = "User", name: str = "ANONYMOUS", version: int = 0) -> bytes:
    return struct.pack(">h", version) + DefaultPrincipalData(type=kind, name=name, token_authenticated=False).encode(0)


def inner(api_key: int, version: int, body: object) -> bytes:
    return encode_request(api_key, version, 41, "inner-client", body)[4:]


LIST_REASSIGNMENTS = inner(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0,
                           ListPartitionReassignmentsRequest(timeout_ms=1000, topics=None))


def envelope(w: WireClient, request_data: bytes, request_principal: bytes | None, address: bytes) -> EnvelopeResponse:
    return w.request(ApiKey.ENVELOPE, 0, EnvelopeRequest(request_data=request_data,
                                                         request_principal=request_principal,
                                                         client_host_address=address))


@pytest.mark.parametrize("bad", [b"", None, b"\x00", b"\x00\x07" + bytes(10), b"\x00\x00\x05abc"],
                         ids=["empty", "null", "one-byte", "version-7", "cut-short"])
def test_envelope_with_an_undecodable_principal_is_principal_deserialization_failure(
        controller: WireClient, bad: bytes | None) -> None:
    """A one-byte principal raised struct.error (a traceback and a closed connection); an unknown
    version closed the connection; an empty one passed as User:ANONYMOUS. Kafka's EnvelopeUtils
    answers all of them PRINCIPAL_DESERIALIZATION_FAILURE."""
    resp = envelope(controller, LIST_REASSIGNMENTS, bad, LOCALHOST)
    assert (resp.error_code, resp.response_data) == (Errors.PRINCIPAL_DESERIALIZATION_FAILURE, None)


@pytest.mark.parametrize("address", [b"", b"\x01\x02\x03", bytes(5), bytes(17)],
                         ids=["empty", "3-bytes", "5-bytes", "17-bytes"])
def test_envelope_with_a_client_address_of_neither_4_nor_16_bytes_is_invalid_request(
        controller: WireClient, address: bytes) -> None:
    resp = envelope(controller, LIST_REASSIGNMENTS, principal(), address)
    assert (resp.error_code, resp.response_data) == (Errors.INVALID_REQUEST, None)


@pytest.mark.parametrize("data, code", [
    (b"", Errors.UNSUPPORTED_VERSION),  # no header
    (b"\x03\xe7\x00\x00\x00\x00\x00\x01", Errors.UNSUPPORTED_VERSION),  # api key 999
    (LIST_REASSIGNMENTS[:-3], Errors.UNSUPPORTED_VERSION),  # the body cut short
    (struct.pack(">hh", ApiKey.LIST_PARTITION_REASSIGNMENTS, 99) + LIST_REASSIGNMENTS[4:],
     Errors.UNSUPPORTED_VERSION),  # v99
    (inner(ApiKey.METADATA, 12, MetadataRequest(topics=None, allow_auto_topic_creation=False)),
     Errors.INVALID_REQUEST),  # not forwardable
], ids=["empty", "unknown-key", "truncated", "unsupported-version", "not-forwardable"])
def test_envelope_whose_inner_request_cannot_be_forwarded(controller: WireClient, data: bytes, code: int) -> None:
    """Kafka's EnvelopeUtils: an inner request that does not parse is UNSUPPORTED_VERSION (so the
    envelope's own faults stay apart), an API that is not forwarded INVALID_REQUEST."""
    resp = envelope(controller, data, principal(), LOCALHOST)
    assert (resp.error_code, resp.response_data) == (code, None)


def test_a_valid_envelope_is_still_answered_with_the_inner_response(controller: WireClient) -> None:
    for data in (LIST_REASSIGNMENTS, inner(ApiKey.DESCRIBE_QUORUM, 1, DescribeQuorumRequest(topics=[
            DescribeQuorumRequest.TopicData(topic_name="__cluster_metadata",
                                            partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)])]))):
        resp = envelope(controller, data, principal("User", "admin"), bytes(16))
        assert resp.error_code == 0
        assert struct.unpack_from(">i", resp.response_data)[0] == 41  # the inner correlation id


ACL_WITH_UNKNOWN = [
    inner(ApiKey.CREATE_ACLS, 2, CreateAclsRequest(creations=[CreateAclsRequest.AclCreation(
        resource_type=0, resource_name="t", resource_pattern_type=3, principal="User:a", host="*", operation=2,
        permission_type=3)])),
    inner(ApiKey.DELETE_ACLS, 2, DeleteAclsRequest(filters=[DeleteAclsRequest.DeleteAclsFilter(
        resource_type_filter=2, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
        host_filter=None, operation=0, permission_type=1)])),
]


@pytest.mark.parametrize("data", ACL_WITH_UNKNOWN, ids=["create-acls", "delete-acls"])
def test_envelope_around_acls_with_unknown_elements_is_unsupported_version(controller: WireClient,
                                                                          data: bytes) -> None:
    """CreateAcls/DeleteAcls naming an UNKNOWN resource type or operation: Kafka fails to parse
    them, and closes a client's own connection (as pybroker does); inside an envelope the
    forwarding broker's connection was closed too. Kafka's EnvelopeUtils answers the envelope
    UNSUPPORTED_VERSION."""
    resp = envelope(controller, data, principal(), LOCALHOST)
    assert (resp.error_code, resp.response_data) == (Errors.UNSUPPORTED_VERSION, None)


def test_alter_partition_with_an_invalid_leader_recovery_state_is_refused_and_never_written(
        node: BrokerProcess, controller: WireClient) -> None:
    """An AlterPartition from the partition's real leader at its real broker, leader and partition
    epochs, whose leader recovery state is neither RECOVERED (0) nor RECOVERING (1): it was
    accepted and the value written into a PartitionChangeRecord. Now INVALID_REQUEST for the
    partition, and the metadata log keeps RECOVERED."""
    w = WireClient("127.0.0.1", node.port)
    try:
        resp = w.request(ApiKey.CREATE_TOPICS, 5, CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name="lrs", num_partitions=1, replication_factor=1, assignments=[], configs=[])], timeout_ms=30000,
            validate_only=False))
        assert resp.topics[0].error_code == 0
    finally:
        w.close()

    def registration() -> tuple[Any, Any] | None:
        image = read_metadata_image(node.log_dir)
        topic = image.topics_by_name.get("lrs")
        return (image, topic) if topic is not None and 1 in image.brokers else None

    image, topic = wait_until(registration, 30, "the topic in the node's metadata log")
    part = topic.partitions[0]
    for state in (127, 2, -1):
        req = AlterPartitionRequest(broker_id=1, broker_epoch=image.brokers[1].epoch, topics=[
            AlterPartitionRequest.TopicData(topic_id=topic.topic_id, partitions=[AlterPartitionRequest.PartitionData(
                partition_index=0, leader_epoch=part.leader_epoch, partition_epoch=part.partition_epoch,
                new_isr_with_epochs=[AlterPartitionRequest.BrokerState(broker_id=1, broker_epoch=-1)],
                leader_recovery_state=state)])])
        resp = controller.request(ApiKey.ALTER_PARTITION, 3, req)
        assert resp.error_code == 0
        assert resp.topics[0].partitions[0].error_code == Errors.INVALID_REQUEST, state
    after = read_metadata_image(node.log_dir).topics_by_name["lrs"].partitions[0]
    assert (after.leader_recovery_state, after.partition_epoch) == (0, part.partition_epoch)
