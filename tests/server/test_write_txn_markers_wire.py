"""WriteTxnMarkers (api 27) on the wire, v1 and v2: a marker lands in a partition this node leads
and ends the producer's open transaction there (the last stable offset moves past it); an
unknown partition is UNKNOWN_TOPIC_OR_PARTITION; a stale producer epoch INVALID_PRODUCER_EPOCH,
and from v2 a transaction version 2 marker at the producer's own epoch too (KIP-1228); with an
authorizer, ALTER or CLUSTER_ACTION on the cluster is required (Kafka's KafkaApis)."""

from __future__ import annotations

import pytest

from pybroker.acl import AclOperation as Op
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    CreateAclsRequest,
    InitProducerIdRequest,
    ListOffsetsRequest,
    ProduceRequest,
    WriteTxnMarkersRequest,
)
from pybroker.records.batch import build_batch
from pybroker.testing import EmbeddedBroker

from .test_authorizer_wire import (
    AUTHORIZER,
    CLUSTER,
    DENY,
    LITERAL,
    ME,
    OPEN,
    make_topic,
    produce,
)
from .wire import WireClient

R = WriteTxnMarkersRequest


def markers(producer_id: int, producer_epoch: int, commit: bool, *tps: tuple[str, int],
            coordinator_epoch: int = 0, transaction_version: int = 0) -> WriteTxnMarkersRequest:
    return R(markers=[R.WritableTxnMarker(
        producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=commit,
        coordinator_epoch=coordinator_epoch, transaction_version=transaction_version,
        topics=[R.WritableTxnMarkerTopic(name=t, partition_indexes=[p]) for t, p in tps])])


def codes(resp) -> dict[tuple[str, int], int]:  # type: ignore[no-untyped-def]
    return {(t.name, p.partition_index): p.error_code for m in resp.markers for t in m.topics for p in t.partitions}


def last_stable_offset(w: WireClient, topic: str) -> int:
    req = ListOffsetsRequest(replica_id=-1, isolation_level=1, topics=[ListOffsetsRequest.ListOffsetsTopic(
        name=topic, partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1,
                                                                         timestamp=-1)])])
    p = w.request(ApiKey.LIST_OFFSETS, 7, req).topics[0].partitions[0]
    assert p.error_code == 0
    return int(p.offset)


@pytest.fixture
def node(tmp_path):
    brokers: list[EmbeddedBroker] = []

    def start(**overrides: str) -> WireClient:
        b = EmbeddedBroker(log_dir=str(tmp_path / f"data-{len(brokers)}"), overrides=overrides).start()
        brokers.append(b)
        return WireClient("127.0.0.1", b.port)

    yield start
    for b in brokers:
        b.stop()


@pytest.mark.parametrize("version", [1, 2])
def test_a_marker_ends_the_open_transaction_of_a_partition_led_here(node, version):
    w = node()
    make_topic(w, "wtm")
    init = w.request(ApiKey.INIT_PRODUCER_ID, 4, InitProducerIdRequest(
        transactional_id=None, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1))
    pid, epoch = init.producer_id, init.producer_epoch
    assert init.error_code == 0
    # a transactional batch nobody coordinates here: only the marker can end it
    batch = build_batch([(0, None, b"v", ())], producer_id=pid, producer_epoch=epoch, base_sequence=0,
                        transactional=True)
    resp = w.request(ApiKey.PRODUCE, 9, ProduceRequest(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name="wtm", partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=batch)])]))
    assert resp.responses[0].partition_responses[0].error_code == 0
    assert last_stable_offset(w, "wtm") == 0
    got = w.request(ApiKey.WRITE_TXN_MARKERS, version, markers(pid, epoch, True, ("wtm", 0), ("nope", 0),
                                                                coordinator_epoch=3))
    assert codes(got) == {("wtm", 0): 0, ("nope", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION}
    assert got.markers[0].producer_id == pid
    assert last_stable_offset(w, "wtm") == 2  # the record and the COMMIT marker
    # a marker at the next producer epoch (a coordinator's fencing abort) bumps the epoch in the log
    bumped = w.request(ApiKey.WRITE_TXN_MARKERS, version, markers(pid, epoch + 1, False, ("wtm", 0),
                                                                   coordinator_epoch=3))
    assert codes(bumped) == {("wtm", 0): 0}
    stale_epoch = w.request(ApiKey.WRITE_TXN_MARKERS, version, markers(pid, epoch, False, ("wtm", 0),
                                                                        coordinator_epoch=3))
    assert codes(stale_epoch) == {("wtm", 0): Errors.INVALID_PRODUCER_EPOCH}
    stale_coordinator = w.request(ApiKey.WRITE_TXN_MARKERS, version, markers(pid, epoch + 1, False, ("wtm", 0),
                                                                              coordinator_epoch=2))
    assert codes(stale_coordinator) == {("wtm", 0): Errors.TRANSACTION_COORDINATOR_FENCED}
    assert last_stable_offset(w, "wtm") == 3  # only the two accepted markers were appended
    w.close()


def open_transaction(w: WireClient, topic: str) -> tuple[int, int]:
    init = w.request(ApiKey.INIT_PRODUCER_ID, 4, InitProducerIdRequest(
        transactional_id=None, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1))
    batch = build_batch([(0, None, b"v", ())], producer_id=init.producer_id, producer_epoch=init.producer_epoch,
                        base_sequence=0, transactional=True)
    resp = w.request(ApiKey.PRODUCE, 9, ProduceRequest(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=batch)])]))
    assert resp.responses[0].partition_responses[0].error_code == 0
    return init.producer_id, init.producer_epoch


def test_a_transaction_version_2_marker_must_bump_the_epoch(node):
    """KIP-1228: the coordinator of a TV2 transaction ends it at epoch + 1, so a TV2 marker at the
    producer's current epoch (late, or from the previous transaction) is INVALID_PRODUCER_EPOCH;
    the same marker as TV0 (v1, or v2 with version 0) is accepted."""
    w = node()
    make_topic(w, "wtm2")
    pid, epoch = open_transaction(w, "wtm2")
    same = w.request(ApiKey.WRITE_TXN_MARKERS, 2, markers(pid, epoch, True, ("wtm2", 0), transaction_version=2))
    assert codes(same) == {("wtm2", 0): Errors.INVALID_PRODUCER_EPOCH}
    assert last_stable_offset(w, "wtm2") == 0  # still open
    bumped = w.request(ApiKey.WRITE_TXN_MARKERS, 2, markers(pid, epoch + 1, True, ("wtm2", 0), transaction_version=2))
    assert codes(bumped) == {("wtm2", 0): 0}
    assert last_stable_offset(w, "wtm2") == 2
    # the next transaction at the bumped epoch starts at sequence 0 (the marker reset the sequence)
    batch = build_batch([(0, None, b"w", ())], producer_id=pid, producer_epoch=epoch + 1, base_sequence=0,
                        transactional=True)
    resp = w.request(ApiKey.PRODUCE, 9, ProduceRequest(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name="wtm2", partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=batch)])]))
    assert resp.responses[0].partition_responses[0].error_code == 0
    for version, tv in ((1, 0), (2, 0)):  # a classic marker at the current epoch is fine
        got = w.request(ApiKey.WRITE_TXN_MARKERS, version, markers(pid, epoch + 1, False, ("wtm2", 0),
                                                                   transaction_version=tv))
        assert codes(got) == {("wtm2", 0): 0}
    w.close()


def test_version_0_is_no_longer_spoken(node):
    """Kafka 4 removed WriteTxnMarkers v0 (KIP-896): the connection is closed, as for any version
    a broker does not advertise."""
    w = node()
    w.send(ApiKey.WRITE_TXN_MARKERS, 0, markers(1, 0, True, ("t", 0)))
    with pytest.raises(ConnectionError):
        w.recv_frame()
    w.close()


def test_write_txn_markers_needs_cluster_action(node):
    closed = node(**AUTHORIZER)  # no ACLs, allow.everyone.if.no.acl.found=false
    got = closed.request(ApiKey.WRITE_TXN_MARKERS, 1, markers(1, 0, True, ("t", 0)))
    assert codes(got) == {("t", 0): Errors.CLUSTER_AUTHORIZATION_FAILED}
    closed.close()
    w = node(**OPEN)
    make_topic(w, "acl-wtm")
    assert codes(w.request(ApiKey.WRITE_TXN_MARKERS, 1, markers(1, 0, True, ("acl-wtm", 0)))) == {("acl-wtm", 0): 0}
    acl = CreateAclsRequest.AclCreation(resource_type=CLUSTER, resource_name="kafka-cluster",
                                        resource_pattern_type=LITERAL, principal=ME, host="*",
                                        operation=Op.CLUSTER_ACTION, permission_type=DENY)
    assert w.request(ApiKey.CREATE_ACLS, 3, CreateAclsRequest(creations=[acl])).results[0].error_code == 0
    assert codes(w.request(ApiKey.WRITE_TXN_MARKERS, 1, markers(1, 0, True, ("acl-wtm", 0)))) == {
        ("acl-wtm", 0): Errors.CLUSTER_AUTHORIZATION_FAILED}
    assert produce(w, "acl-wtm") == 0  # other APIs are untouched by the CLUSTER_ACTION deny
    w.close()
