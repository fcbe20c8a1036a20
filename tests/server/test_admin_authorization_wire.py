"""Every admin read and write is authorized as Kafka authorizes it (issue 20 item 4).

A node with the StandardAuthorizer and no ACLs (allow.everyone.if.no.acl.found=false), the caller
User:ANONYMOUS: each API answers the refusal Kafka's KafkaApis / ControllerApis give, in the shape
the request's getErrorResponse builds. Then User:ANONYMOUS is granted the operation Kafka checks
(an ALLOW ACL written while it was a super user), and the same request is served. Without the
checks (the code before this change) each refused request was answered as if allowed.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pybroker.acl import AclOperation as Op
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    AlterClientQuotasRequest,
    AlterPartitionReassignmentsRequest,
    AlterUserScramCredentialsRequest,
    DescribeClientQuotasRequest,
    DescribeLogDirsRequest,
    DescribeProducersRequest,
    DescribeQuorumRequest,
    DescribeTransactionsRequest,
    DescribeUserScramCredentialsRequest,
    ElectLeadersRequest,
    ListPartitionReassignmentsRequest,
    ListTransactionsRequest,
    UpdateFeaturesRequest,
)
from pybroker.testing import EmbeddedBroker

from .test_authorizer_wire import (
    ALLOW,
    AUTHORIZER,
    CLUSTER,
    LITERAL,
    ME,
    TOPIC,
    TXN_ID,
    create,
    creation,
    make_topic,
)
from .wire import WireClient

CLUSTER_DENIED = Errors.CLUSTER_AUTHORIZATION_FAILED


@pytest.fixture
def restricted(tmp_path) -> Iterator[WireClient]:
    """A default-deny node where ANONYMOUS has no ACL; topic `t` exists."""
    b = EmbeddedBroker(log_dir=str(tmp_path / "data"), overrides={**AUTHORIZER, "super.users": ME}).start()
    w = WireClient("127.0.0.1", b.port)
    make_topic(w, "t")
    w.close()
    b.stop()
    b = EmbeddedBroker(log_dir=str(tmp_path / "data"), overrides=AUTHORIZER).start()
    w = WireClient("127.0.0.1", b.port)
    yield w
    w.close()
    b.stop()


def grant(tmp_path, *acls) -> tuple[EmbeddedBroker, WireClient]:
    """A node on the same data where ANONYMOUS holds `acls` (written while it was a super user)."""
    b = EmbeddedBroker(log_dir=str(tmp_path / "data"), overrides={**AUTHORIZER, "super.users": ME}).start()
    w = WireClient("127.0.0.1", b.port)
    make_topic(w, "t")
    assert create(w, *acls) == [(0, None)] * len(acls)
    w.close()
    b.stop()
    b = EmbeddedBroker(log_dir=str(tmp_path / "data"), overrides=AUTHORIZER).start()
    return b, WireClient("127.0.0.1", b.port)


def elect(w: WireClient):
    return w.request(ApiKey.ELECT_LEADERS, 2, ElectLeadersRequest(election_type=0, timeout_ms=5000, topic_partitions=[
        ElectLeadersRequest.TopicPartitions(topic="t", partitions=[0])]))


def reassign(w: WireClient):
    return w.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, AlterPartitionReassignmentsRequest(
        timeout_ms=5000, topics=[AlterPartitionReassignmentsRequest.ReassignableTopic(name="t", partitions=[
            AlterPartitionReassignmentsRequest.ReassignablePartition(partition_index=0, replicas=None)])]))


def test_cluster_admin_apis_refuse_without_cluster_acls(restricted):
    w = restricted
    r = elect(w)
    assert r.error_code == CLUSTER_DENIED
    assert [(t.topic, [(p.partition_id, p.error_code) for p in t.partition_result])
            for t in r.replica_election_results] == [("t", [(0, CLUSTER_DENIED)])]
    r = reassign(w)
    assert r.error_code == CLUSTER_DENIED
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in r.responses] == \
        [("t", [(0, CLUSTER_DENIED)])]
    r = w.request(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, ListPartitionReassignmentsRequest(timeout_ms=5000,
                                                                                           topics=None))
    assert r.error_code == CLUSTER_DENIED and r.topics == []
    r = w.request(ApiKey.DESCRIBE_QUORUM, 1, DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
        topic_name="__cluster_metadata", partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)])]))
    assert r.error_code == CLUSTER_DENIED
    r = w.request(ApiKey.DESCRIBE_LOG_DIRS, 4, DescribeLogDirsRequest(topics=None))
    assert r.error_code == CLUSTER_DENIED and r.results == []
    r = w.request(ApiKey.UPDATE_FEATURES, 1, UpdateFeaturesRequest(timeout_ms=5000, feature_updates=[
        UpdateFeaturesRequest.FeatureUpdateKey(feature="metadata.version", max_version_level=1, upgrade_type=1)]))
    assert r.error_code == CLUSTER_DENIED
    r = w.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, DescribeUserScramCredentialsRequest(users=[
        DescribeUserScramCredentialsRequest.UserName(name="alice")]))
    assert r.error_code == CLUSTER_DENIED and [x.error_code for x in r.results] == [CLUSTER_DENIED]
    r = w.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, AlterUserScramCredentialsRequest(
        deletions=[AlterUserScramCredentialsRequest.ScramCredentialDeletion(name="zed", mechanism=1),
                   AlterUserScramCredentialsRequest.ScramCredentialDeletion(name="bob", mechanism=1)],
        upsertions=[]))
    assert [(x.user, x.error_code) for x in r.results] == [("bob", CLUSTER_DENIED), ("zed", CLUSTER_DENIED)]
    r = w.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, DescribeClientQuotasRequest(components=[], strict=False))
    assert r.error_code == CLUSTER_DENIED and r.entries is None
    r = w.request(ApiKey.ALTER_CLIENT_QUOTAS, 1, AlterClientQuotasRequest(entries=[
        AlterClientQuotasRequest.EntryData(entity=[AlterClientQuotasRequest.EntityData(entity_type="user",
                                                                                      entity_name="alice")],
                                           ops=[AlterClientQuotasRequest.OpData(key="producer_byte_rate",
                                                                               value=1000.0, remove=False)])],
        validate_only=False))
    assert [x.error_code for x in r.entries] == [CLUSTER_DENIED]


def test_cluster_acls_let_the_same_requests_through(tmp_path):
    b, w = grant(tmp_path, *(creation(CLUSTER, "kafka-cluster", LITERAL, ME, op, ALLOW)
                             for op in (Op.ALTER, Op.DESCRIBE, Op.ALTER_CONFIGS)))
    try:
        assert elect(w).error_code == 0
        assert reassign(w).error_code == 0
        assert w.request(ApiKey.DESCRIBE_LOG_DIRS, 4, DescribeLogDirsRequest(topics=None)).results
        r = w.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, DescribeClientQuotasRequest(components=[], strict=False))
        assert r.error_code == 0  # ALTER_CONFIGS implies DESCRIBE_CONFIGS
        r = w.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, DescribeUserScramCredentialsRequest(users=[
            DescribeUserScramCredentialsRequest.UserName(name="alice")]))
        assert r.error_code == 0 and [x.error_code for x in r.results] == [Errors.RESOURCE_NOT_FOUND]
    finally:
        w.close()
        b.stop()


def test_producer_and_transaction_reads_follow_topic_and_transactional_id_acls(restricted, tmp_path):
    w = restricted
    r = w.request(ApiKey.DESCRIBE_PRODUCERS, 0, DescribeProducersRequest(topics=[
        DescribeProducersRequest.TopicRequest(name="t", partition_indexes=[0])]))
    p = r.topics[0].partitions[0]
    assert (p.error_code, p.error_message) == (Errors.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.")
    r = w.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, DescribeTransactionsRequest(transactional_ids=["tx"]))
    assert [(s.transactional_id, s.error_code) for s in r.transaction_states] == \
        [("tx", Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)]
    r = w.request(ApiKey.LIST_TRANSACTIONS, 1, ListTransactionsRequest(state_filters=[], producer_id_filters=[],
                                                                      duration_filter=-1))
    assert r.error_code == 0 and r.transaction_states == []
    w.close()


def test_granted_topic_and_transactional_id_reads_are_served(tmp_path):
    b, w = grant(tmp_path, creation(TOPIC, "t", LITERAL, ME, Op.READ, ALLOW),
                 creation(TXN_ID, "tx", LITERAL, ME, Op.DESCRIBE, ALLOW))
    try:
        r = w.request(ApiKey.DESCRIBE_PRODUCERS, 0, DescribeProducersRequest(topics=[
            DescribeProducersRequest.TopicRequest(name="t", partition_indexes=[0])]))
        assert r.topics[0].partitions[0].error_code == 0
        r = w.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, DescribeTransactionsRequest(transactional_ids=["tx"]))
        # allowed: answered by the coordinator lookup (no __transaction_state yet: NOT_COORDINATOR)
        assert r.transaction_states[0].error_code in (Errors.NOT_COORDINATOR, Errors.TRANSACTIONAL_ID_NOT_FOUND,
                                                      Errors.COORDINATOR_LOAD_IN_PROGRESS)
    finally:
        w.close()
        b.stop()
