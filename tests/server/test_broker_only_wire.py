"""Broker-only APIs on one node's three kinds of listener (server/broker_only.py,
server/controller_apis.py), fast: CLIENT (PLAINTEXT, clients), INTERNAL (PLAINTEXT, the
inter-broker listener) and CONTROLLER (SASL/PLAIN: User:broker, a super user, and alice).

StandardAuthorizer with allow.everyone.if.no.acl.found=true and one ACL: User:ANONYMOUS may
CLUSTER_ACTION the cluster (a node on a PLAINTEXT inter-broker listener is User:ANONYMOUS). A
client on CLIENT is User:ANONYMOUS too, so Kafka, which checks only CLUSTER_ACTION, would act on
its WriteTxnMarkers; pybroker refuses broker-only requests off the inter-broker and controller
listeners. alice, on the controller listener, has no CLUSTER_ACTION.
The slow 3-node version, with follower fetches and AlterPartition against a real ISR, is
tests/security/test_broker_only_apis.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pybroker.acl import AclOperation, AclPermissionType, PatternType, ResourceType
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    AddPartitionsToTxnRequest,
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    CreateAclsRequest,
    DescribeQuorumRequest,
    FetchRequest,
    InitProducerIdRequest,
    MetadataRequest,
    ProduceRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)
from pybroker.records.batch import build_batch
from pybroker.testing import EmbeddedBroker

from .test_authorizer_wire import make_topic
from .test_write_txn_markers_wire import codes, markers
from .wire import WireClient

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
        'password="broker-secret" user_broker="broker-secret" user_alice="alice-secret";')
DENIED = Errors.CLUSTER_AUTHORIZATION_FAILED


class Node:
    def __init__(self, broker: EmbeddedBroker) -> None:
        self.broker = broker
        bound = {e.listener_name: e.port for e in broker._broker.bound}  # type: ignore[union-attr]
        self.client_port = bound["CLIENT"]
        self.internal_port = bound["INTERNAL"]
        self.controller_port = broker.controller_port

    def client(self) -> WireClient:
        return WireClient("127.0.0.1", self.client_port)

    def internal(self) -> WireClient:
        return WireClient("127.0.0.1", self.internal_port)

    def controller(self, user: str, password: str) -> WireClient:
        w = WireClient("127.0.0.1", self.controller_port)
        assert w.request(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
        auth = w.request(ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(
            auth_bytes=f"\0{user}\0{password}".encode()))
        assert auth.error_code == 0, auth
        return w


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    overrides = {
        "listeners": "CLIENT://127.0.0.1:0,INTERNAL://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "inter.broker.listener.name": "INTERNAL",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "true",
        "super.users": "User:broker",
    }
    with EmbeddedBroker(log_dir=str(tmp_path_factory.mktemp("broker-only")), overrides=overrides) as b:
        n = Node(b)
        w = n.client()
        acl = CreateAclsRequest.AclCreation(
            resource_type=ResourceType.CLUSTER, resource_name="kafka-cluster", resource_pattern_type=PatternType.LITERAL,
            principal="User:ANONYMOUS", host="*", operation=AclOperation.CLUSTER_ACTION,
            permission_type=AclPermissionType.ALLOW)
        assert w.request(ApiKey.CREATE_ACLS, 3, CreateAclsRequest(creations=[acl])).results[0].error_code == 0
        w.close()
        yield n


def _produce(w: WireClient, topic: str, pid: int, epoch: int, seq: int) -> int:
    batch = build_batch([(0, None, b"v", ())], producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    resp = w.request(ApiKey.PRODUCE, 9, ProduceRequest(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=batch)])]))
    return int(resp.responses[0].partition_responses[0].error_code)


def _idempotent_producer(w: WireClient, topic: str) -> tuple[int, int]:
    init = w.request(ApiKey.INIT_PRODUCER_ID, 4, InitProducerIdRequest(
        transactional_id=None, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1))
    assert init.error_code == 0
    assert _produce(w, topic, init.producer_id, init.producer_epoch, 0) == 0
    return init.producer_id, init.producer_epoch


def test_write_txn_markers_on_a_client_listener_cannot_fence_an_idempotent_producer(node: Node) -> None:
    w = node.client()
    make_topic(w, "fence-me")
    pid, epoch = _idempotent_producer(w, "fence-me")
    forged = w.request(ApiKey.WRITE_TXN_MARKERS, 1, markers(pid, 32767, False, ("fence-me", 0)))
    assert codes(forged) == {("fence-me", 0): DENIED}
    assert _produce(w, "fence-me", pid, epoch, 1) == 0  # the producer goes on


def test_write_txn_markers_on_the_inter_broker_listener_follow_kafkas_producer_epoch_rules(node: Node) -> None:
    """What a node's marker does, as Kafka's ProducerAppendInfo.appendEndTxnMarker: a marker for a
    producer with no transaction open is written and its newer epoch becomes the producer's, so
    the producer's older epoch is refused from then on; an older marker epoch is refused."""
    w = node.client()
    make_topic(w, "node-markers")
    pid, epoch = _idempotent_producer(w, "node-markers")
    i = node.internal()
    assert codes(i.request(ApiKey.WRITE_TXN_MARKERS, 1, markers(pid, epoch + 1, False, ("node-markers", 0)))) == \
        {("node-markers", 0): 0}
    assert _produce(w, "node-markers", pid, epoch, 1) == Errors.INVALID_PRODUCER_EPOCH
    assert codes(i.request(ApiKey.WRITE_TXN_MARKERS, 1, markers(pid, epoch, False, ("node-markers", 0)))) == \
        {("node-markers", 0): Errors.INVALID_PRODUCER_EPOCH}


def test_batched_add_partitions_to_txn_only_on_the_inter_broker_listener(node: Node) -> None:
    R = AddPartitionsToTxnRequest
    req = R(transactions=[R.AddPartitionsToTxnTransaction(
        transactional_id="nobody", producer_id=1, producer_epoch=0, verify_only=True,
        topics=[R.AddPartitionsToTxnTopic(name="t", partitions=[0])])])
    assert node.client().request(ApiKey.ADD_PARTITIONS_TO_TXN, 4, req).error_code == DENIED
    assert node.internal().request(ApiKey.ADD_PARTITIONS_TO_TXN, 4, req).error_code == 0


def test_follower_fetch_on_a_client_listener_is_topic_authorization_failed(node: Node) -> None:
    w = node.client()
    make_topic(w, "follow-me")
    req = FetchRequest(replica_id=2, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
                       session_epoch=-1, forgotten_topics_data=[], rack_id="", topics=[FetchRequest.FetchTopic(
                           topic="follow-me", partitions=[FetchRequest.FetchPartition(
                               partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])
    assert w.request(ApiKey.FETCH, 12, req).responses[0].partitions[0].error_code == Errors.TOPIC_AUTHORIZATION_FAILED
    # on INTERNAL it reaches the replica checks: 2 is no replica of this partition
    assert node.internal().request(ApiKey.FETCH, 12, req).responses[0].partitions[0].error_code == \
        Errors.NOT_LEADER_OR_FOLLOWER


def _broker_epoch_heartbeats(w: WireClient, **flags: Any) -> int:
    """Guess node 1's broker epoch (small on a new node): the first answer that is not stale."""
    code = -1
    for e in range(0, 200):
        code = w.request(ApiKey.BROKER_HEARTBEAT, 1, BrokerHeartbeatRequest(
            broker_id=1, broker_epoch=e, current_metadata_offset=1 << 40, offline_log_dirs=[], **flags)).error_code
        if code != Errors.STALE_BROKER_EPOCH:
            return int(code)
    return int(code)


def test_broker_heartbeat_from_a_principal_without_cluster_action_changes_nothing(node: Node) -> None:
    alice = node.controller("alice", "alice-secret")
    assert _broker_epoch_heartbeats(alice, want_fence=True, want_shut_down=True) == DENIED
    md = node.client().request(ApiKey.METADATA, 12, MetadataRequest(topics=[]))
    assert [b.node_id for b in md.brokers] == [1]  # still unfenced
    # the node's own principal gets past the check, to the broker epoch (an idle heartbeat)
    assert _broker_epoch_heartbeats(node.controller("broker", "broker-secret")) == 0


def test_alter_partition_from_a_principal_without_cluster_action_is_refused(node: Node) -> None:
    w = node.client()
    make_topic(w, "isr")
    topic = w.request(ApiKey.METADATA, 12, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
        name="isr")])).topics[0]
    req = AlterPartitionRequest(broker_id=1, broker_epoch=0, topics=[AlterPartitionRequest.TopicData(
        topic_id=topic.topic_id, partitions=[AlterPartitionRequest.PartitionData(
            partition_index=0, leader_epoch=0, partition_epoch=0, leader_recovery_state=0,
            new_isr_with_epochs=[AlterPartitionRequest.BrokerState(broker_id=1, broker_epoch=-1)])])])
    assert node.controller("alice", "alice-secret").request(ApiKey.ALTER_PARTITION, 3, req).error_code == DENIED
    # the node itself: past the check, to the broker epoch (0 is not the node's)
    assert node.controller("broker", "broker-secret").request(ApiKey.ALTER_PARTITION, 3, req).error_code == \
        Errors.STALE_BROKER_EPOCH


def test_describe_quorum_needs_describe_on_the_cluster(node: Node) -> None:
    req = DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
        topic_name="__cluster_metadata", partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)])])
    assert node.controller("alice", "alice-secret").request(ApiKey.DESCRIBE_QUORUM, 2, req).error_code == DENIED
    assert node.client().request(ApiKey.DESCRIBE_QUORUM, 2, req).error_code == DENIED  # User:ANONYMOUS
    ok = node.controller("broker", "broker-secret").request(ApiKey.DESCRIBE_QUORUM, 2, req)
    assert ok.error_code == 0 and ok.topics[0].partitions[0].leader_id == 1
