"""Every API at every version ApiVersions advertises, against a live embedded broker.

Each request is built with the project's codec, sent over a real socket, and the answer
decoded at the same version: the broker must answer every advertised version correctly,
not only the ones today's clients happen to pick.
"""

from __future__ import annotations

import time

import pytest

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    AlterPartitionReassignmentsRequest,
    AlterUserScramCredentialsRequest,
    ApiVersionsRequest,
    CreateAclsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteAclsRequest,
    DeleteTopicsRequest,
    DescribeAclsRequest,
    DescribeClusterRequest,
    DescribeConfigsRequest,
    DescribeProducersRequest,
    DescribeTopicPartitionsRequest,
    DescribeTransactionsRequest,
    DescribeUserScramCredentialsRequest,
    ElectLeadersRequest,
    FetchRequest,
    InitProducerIdRequest,
    ListOffsetsRequest,
    ListPartitionReassignmentsRequest,
    ListTransactionsRequest,
    MetadataRequest,
    OffsetForLeaderEpochRequest,
    ProduceRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)
from pybroker.records.batch import build_batch, iter_batch_records, iter_batches
from pybroker.server.api_versions import SUPPORTED


def versions(api: ApiKey) -> list[int]:
    lo, hi = SUPPORTED[api]
    return list(range(lo, hi + 1))




def create_topic(wire, name, partitions=1):
    req = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1)], timeout_ms=5000)
    resp = wire.request(ApiKey.CREATE_TOPICS, 7, req)
    assert resp.topics[0].error_code == 0, resp
    return resp.topics[0].topic_id


def produce(wire, topic, values, version=9, partition=0, now=None, topic_id=bytes(16)):
    """v13+ names the topic by `topic_id` only (the name is not on the wire)."""
    now = now if now is not None else int(time.time() * 1000)
    batch = build_batch([(now, b"k", v, [("h", b"1")]) for v in values])
    req = ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, topic_id=topic_id,
        partition_data=[ProduceRequest.PartitionProduceData(index=partition, records=batch)])])
    resp = wire.request(ApiKey.PRODUCE, version, req)
    return resp.responses[0].partition_responses[0]


def test_api_versions_every_version_lists_exactly_what_is_supported(wire):
    for v in versions(ApiKey.API_VERSIONS):
        req = ApiVersionsRequest(client_software_name="wire-test", client_software_version="1.0") if v >= 3 \
            else ApiVersionsRequest()
        resp = wire.request(ApiKey.API_VERSIONS, v, req)
        assert resp.error_code == 0
        assert {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys} == {
            int(k): r for k, r in SUPPORTED.items()}


def test_metadata_every_version_auto_creates_and_describes(wire):
    for v in versions(ApiKey.METADATA):
        name = f"lv-md-{v}"
        req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)],
                              allow_auto_topic_creation=True)
        resp = wire.request(ApiKey.METADATA, v, req)
        assert [b.node_id for b in resp.brokers] == [1]
        (t,) = resp.topics
        assert (t.name, t.error_code, len(t.partitions)) == (name, 0, 1)
        assert t.partitions[0].leader_id == 1
        if v >= 10:
            assert t.topic_id != bytes(16)
        if v >= 1:
            assert resp.controller_id == 1
        if v >= 13:  # KIP-1102: the top-level error code; a Kafka broker answers 0
            assert resp.error_code == 0
    # v4+ with auto-creation off leaves an unknown topic unknown
    resp = wire.request(ApiKey.METADATA, 12, MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name="lv-md-none")], allow_auto_topic_creation=False))
    assert resp.topics[0].error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
    # v0's empty list and v1+'s null both mean every topic
    all0 = wire.request(ApiKey.METADATA, 0, MetadataRequest(topics=[]))
    all1 = wire.request(ApiKey.METADATA, 1, MetadataRequest(topics=None))
    assert {t.name for t in all0.topics} == {t.name for t in all1.topics} >= {f"lv-md-{v}" for v in range(13)}


def test_metadata_by_topic_id_and_invalid_names(wire):
    tid = create_topic(wire, "lv-md-byid")
    resp = wire.request(ApiKey.METADATA, 12, MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(topic_id=tid, name=None)]))
    assert (resp.topics[0].name, resp.topics[0].error_code) == ("lv-md-byid", 0)
    resp = wire.request(ApiKey.METADATA, 12, MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(topic_id=b"\x07" * 16, name=None)]))
    assert resp.topics[0].error_code == Errors.UNKNOWN_TOPIC_ID
    resp = wire.request(ApiKey.METADATA, 12, MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name="bad/name")], allow_auto_topic_creation=True))
    assert resp.topics[0].error_code == Errors.INVALID_TOPIC_EXCEPTION


def test_create_topics_every_version(wire):
    for v in versions(ApiKey.CREATE_TOPICS):
        req = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name=f"lv-ct-{v}", num_partitions=2, replication_factor=1,
            configs=[CreateTopicsRequest.CreatableTopicConfig(name="retention.ms", value="1000")])],
            timeout_ms=5000)
        (r,) = wire.request(ApiKey.CREATE_TOPICS, v, req).topics
        assert r.error_code == 0, r
        if v >= 5:
            assert r.num_partitions == 2 and r.replication_factor == 1
            assert {c.name: c.value for c in r.configs}["retention.ms"] == "1000"
        if v >= 7:
            assert r.topic_id != bytes(16)
        (again,) = wire.request(ApiKey.CREATE_TOPICS, v, req).topics
        assert again.error_code == Errors.TOPIC_ALREADY_EXISTS


@pytest.mark.parametrize("np,rf,configs,code", [
    (0, 1, [], Errors.INVALID_PARTITIONS),
    (1, 3, [], Errors.INVALID_REPLICATION_FACTOR),
    (1, 1, [("retention.ms", "soon")], Errors.INVALID_CONFIG),
    (1, 1, [("no.such.config", "1")], Errors.INVALID_CONFIG),
])
def test_create_topics_rejects_bad_specs(wire, np, rf, configs, code):
    req = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=f"lv-bad-{np}-{rf}-{len(configs)}", num_partitions=np, replication_factor=rf,
        configs=[CreateTopicsRequest.CreatableTopicConfig(name=k, value=v) for k, v in configs])])
    (r,) = wire.request(ApiKey.CREATE_TOPICS, 7, req).topics
    assert r.error_code == code
    assert r.error_message


def test_create_partitions_every_version(wire):
    for v in versions(ApiKey.CREATE_PARTITIONS):
        name = f"lv-cp-{v}"
        create_topic(wire, name)
        req = CreatePartitionsRequest(topics=[CreatePartitionsRequest.CreatePartitionsTopic(
            name=name, count=3, assignments=None)], timeout_ms=5000, validate_only=False)
        (r,) = wire.request(ApiKey.CREATE_PARTITIONS, v, req).results
        assert r.error_code == 0, r
        md = wire.request(ApiKey.METADATA, 12, MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=name)]))
        assert len(md.topics[0].partitions) == 3
        req.topics[0].count = 2
        (r,) = wire.request(ApiKey.CREATE_PARTITIONS, v, req).results
        assert r.error_code == Errors.INVALID_PARTITIONS


def test_delete_topics_every_version(wire):
    for v in versions(ApiKey.DELETE_TOPICS):
        name = f"lv-dt-{v}"
        tid = create_topic(wire, name)
        if v >= 6:
            req = DeleteTopicsRequest(topics=[DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=tid)],
                                      timeout_ms=5000)
        else:
            req = DeleteTopicsRequest(topic_names=[name], timeout_ms=5000)
        (r,) = wire.request(ApiKey.DELETE_TOPICS, v, req).responses
        assert r.error_code == 0, r
        md = wire.request(ApiKey.METADATA, 12, MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=name)], allow_auto_topic_creation=False))
        assert md.topics[0].error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
        (r,) = wire.request(ApiKey.DELETE_TOPICS, v, req).responses
        assert r.error_code in (Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.UNKNOWN_TOPIC_ID)


def test_produce_every_version_then_fetch_every_version(wire):
    topic = "lv-pf"
    tid = create_topic(wire, topic)
    offsets = []
    for v in versions(ApiKey.PRODUCE):
        r = produce(wire, topic, [b"v%d" % v], version=v, topic_id=tid)
        if v < 3:
            assert r.error_code == Errors.UNSUPPORTED_VERSION
        else:
            assert r.error_code == 0, r
            offsets.append(r.base_offset)
    assert offsets == list(range(len(offsets)))
    n = len(offsets)
    for v in versions(ApiKey.FETCH):
        part = FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20,
                                           current_leader_epoch=-1, log_start_offset=-1)
        ft = FetchRequest.FetchTopic(topic=topic if v < 13 else "", topic_id=tid if v >= 13 else bytes(16),
                                     partitions=[part])
        req = FetchRequest(replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                           session_id=0, session_epoch=-1, topics=[ft])
        resp = wire.request(ApiKey.FETCH, v, req)
        (pd,) = resp.responses[0].partitions
        assert pd.error_code == 0 and pd.high_watermark == n
        values = [r.value for _, b in iter_batches(bytes(pd.records)) for r in iter_batch_records(b)[1]]
        assert values == [b"v%d" % v for v in range(3, versions(ApiKey.PRODUCE)[-1] + 1)]
        if v >= 13:
            assert resp.responses[0].topic_id == tid


def test_list_offsets_every_version(wire):
    topic = "lv-lo"
    create_topic(wire, topic)
    now = int(time.time() * 1000)
    for i in range(3):  # distinct timestamps: the max is in the last batch, at offset 4
        assert produce(wire, topic, [b"a", b"b"], now=now - 3000 + 1000 * i).error_code == 0
    for v in versions(ApiKey.LIST_OFFSETS):
        def ask(ts, v=v):
            req = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[ListOffsetsRequest.ListOffsetsTopic(
                name=topic, partitions=[ListOffsetsRequest.ListOffsetsPartition(
                    partition_index=0, timestamp=ts, current_leader_epoch=-1)])])
            return wire.request(ApiKey.LIST_OFFSETS, v, req).topics[0].partitions[0]
        latest, earliest = ask(-1), ask(-2)
        assert (latest.error_code, latest.offset) == (0, 6)
        assert (earliest.error_code, earliest.offset) == (0, 0)
        by_time = ask(0)
        assert by_time.offset == 0
        future = ask(int(time.time() * 1000) + 3_600_000)
        assert future.offset == -1
        if v >= 4:
            assert latest.leader_epoch == 0
        mx = ask(-3)
        if v >= 7:
            assert (mx.error_code, mx.offset, mx.timestamp) == (0, 4, now - 1000)
        else:
            assert mx.error_code == Errors.UNSUPPORTED_VERSION
        # tiered-storage timestamps on a node without tiered storage: -5 latest tiered (v9+) and -6
        # earliest pending upload (v11+, KIP-1023) have no offset; older versions may not ask
        for special, first in ((-5, 9), (-6, 11)):
            got = ask(special)
            if v >= first:
                assert (got.error_code, got.offset, got.timestamp, got.leader_epoch) == (0, -1, -1, -1)
            else:
                assert (got.error_code, got.offset) == (Errors.UNSUPPORTED_VERSION, -1)


def test_offset_for_leader_epoch_every_version(wire):
    topic = "lv-ofle"
    create_topic(wire, topic)
    produce(wire, topic, [b"x", b"y", b"z"])
    for v in versions(ApiKey.OFFSET_FOR_LEADER_EPOCH):
        req = OffsetForLeaderEpochRequest(replica_id=-1, topics=[OffsetForLeaderEpochRequest.OffsetForLeaderTopic(
            topic=topic, partitions=[OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
                partition=0, current_leader_epoch=0, leader_epoch=0)])])
        (p,) = wire.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, v, req).topics[0].partitions
        assert (p.error_code, p.leader_epoch, p.end_offset) == (0, 0, 3)
        req.topics[0].partitions[0].current_leader_epoch = 5
        (p,) = wire.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, v, req).topics[0].partitions
        assert p.error_code == Errors.UNKNOWN_LEADER_EPOCH


def test_init_producer_id_every_version_gives_fresh_ids(wire):
    seen = set()
    for v in versions(ApiKey.INIT_PRODUCER_ID):
        r = wire.request(ApiKey.INIT_PRODUCER_ID, v, InitProducerIdRequest(
            transactional_id=None, transaction_timeout_ms=60000))
        assert r.error_code == 0 and r.producer_epoch == 0 and r.producer_id >= 0
        seen.add(r.producer_id)
    assert len(seen) == len(versions(ApiKey.INIT_PRODUCER_ID))
    r = wire.request(ApiKey.INIT_PRODUCER_ID, 4, InitProducerIdRequest(
        transactional_id="tx", transaction_timeout_ms=900_001))
    assert r.error_code == Errors.INVALID_TRANSACTION_TIMEOUT


def test_describe_configs_every_version(wire):
    topic = "lv-dc"
    req = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=topic, num_partitions=1, replication_factor=1,
        configs=[CreateTopicsRequest.CreatableTopicConfig(name="cleanup.policy", value="compact")])])
    assert wire.request(ApiKey.CREATE_TOPICS, 7, req).topics[0].error_code == 0
    for v in versions(ApiKey.DESCRIBE_CONFIGS):
        req = DescribeConfigsRequest(resources=[
            DescribeConfigsRequest.DescribeConfigsResource(resource_type=2, resource_name=topic,
                                                           configuration_keys=None),
            DescribeConfigsRequest.DescribeConfigsResource(resource_type=4, resource_name="1",
                                                           configuration_keys=["node.id", "num.partitions"]),
            DescribeConfigsRequest.DescribeConfigsResource(resource_type=2, resource_name="lv-dc-missing",
                                                           configuration_keys=None),
        ], include_synonyms=True)
        t, b, missing = wire.request(ApiKey.DESCRIBE_CONFIGS, v, req).results
        cfg = {c.name: c for c in t.configs}
        assert cfg["cleanup.policy"].value == "compact"
        assert cfg["cleanup.policy"].config_source == 1  # DYNAMIC_TOPIC_CONFIG
        assert cfg["segment.bytes"].value == "1073741824"
        assert cfg["segment.bytes"].config_source == 5  # DEFAULT_CONFIG
        assert cfg["cleanup.policy"].synonyms[0].name == "cleanup.policy"
        assert {c.name: c.value for c in b.configs} == {"node.id": "1", "num.partitions": "1"}
        assert missing.error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION


def test_describe_cluster_every_version(wire):
    for v in versions(ApiKey.DESCRIBE_CLUSTER):
        for include_fenced in (False, True):
            r = wire.request(ApiKey.DESCRIBE_CLUSTER, v, DescribeClusterRequest(include_fenced_brokers=include_fenced)
                             if v >= 2 else DescribeClusterRequest())
            assert r.error_code == 0 and r.controller_id == 1 and len(r.cluster_id) == 22
            assert [(b.broker_id, b.host, b.is_fenced) for b in r.brokers] == [(1, "127.0.0.1", False)]


def test_acl_apis_every_version_answer_security_disabled(wire):
    # no authorizer: Kafka's AclApis answers SECURITY_DISABLED (server/acls.py)
    for v in versions(ApiKey.DESCRIBE_ACLS):
        r = wire.request(ApiKey.DESCRIBE_ACLS, v, DescribeAclsRequest(
            resource_type_filter=2, resource_name_filter="t", pattern_type_filter=3, principal_filter=None,
            host_filter=None, operation=1, permission_type=1))
        assert (r.error_code, r.resources) == (Errors.SECURITY_DISABLED, [])
    for v in versions(ApiKey.CREATE_ACLS):
        r = wire.request(ApiKey.CREATE_ACLS, v, CreateAclsRequest(creations=[CreateAclsRequest.AclCreation(
            resource_type=2, resource_name="t", resource_pattern_type=3, principal="User:a", host="*",
            operation=3, permission_type=3)]))
        assert [c.error_code for c in r.results] == [Errors.SECURITY_DISABLED]
    for v in versions(ApiKey.DELETE_ACLS):
        r = wire.request(ApiKey.DELETE_ACLS, v, DeleteAclsRequest(filters=[DeleteAclsRequest.DeleteAclsFilter(
            resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
            host_filter=None, operation=1, permission_type=1)]))
        assert [(f.error_code, f.matching_acls) for f in r.filter_results] == [(Errors.SECURITY_DISABLED, [])]


def test_partition_admin_every_version(wire):
    create_topic(wire, "lv-pa", partitions=2)
    for v in versions(ApiKey.ELECT_LEADERS):
        r = wire.request(ApiKey.ELECT_LEADERS, v, ElectLeadersRequest(election_type=0, timeout_ms=5000,
                         topic_partitions=[ElectLeadersRequest.TopicPartitions(topic="lv-pa", partitions=[0, 1])]))
        assert [(p.partition_id, p.error_code) for p in r.replica_election_results[0].partition_result] == [
            (0, Errors.ELECTION_NOT_NEEDED), (1, Errors.ELECTION_NOT_NEEDED)]
    for v in versions(ApiKey.ALTER_PARTITION_REASSIGNMENTS):
        for allow in (True, False) if v >= 1 else (True,):
            r = wire.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, v, AlterPartitionReassignmentsRequest(
                timeout_ms=5000, allow_replication_factor_change=allow, topics=[
                    AlterPartitionReassignmentsRequest.ReassignableTopic(name="lv-pa", partitions=[
                        AlterPartitionReassignmentsRequest.ReassignablePartition(partition_index=0, replicas=[1]),
                        AlterPartitionReassignmentsRequest.ReassignablePartition(partition_index=1, replicas=None)])]))
            assert [p.error_code for p in r.responses[0].partitions] == [0, Errors.NO_REASSIGNMENT_IN_PROGRESS]
            assert r.allow_replication_factor_change == allow  # v1 echoes the request's flag
    for v in versions(ApiKey.LIST_PARTITION_REASSIGNMENTS):
        r = wire.request(ApiKey.LIST_PARTITION_REASSIGNMENTS, v, ListPartitionReassignmentsRequest(
            timeout_ms=5000, topics=None))
        assert (r.error_code, r.topics) == (0, [])


def test_transaction_tooling_every_version(wire):
    create_topic(wire, "lv-dp")
    pid = wire.request(ApiKey.INIT_PRODUCER_ID, 4, InitProducerIdRequest(
        transactional_id=None, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1)).producer_id
    batch = build_batch([(int(time.time() * 1000), None, b"x", ())], producer_id=pid, producer_epoch=0,
                        base_sequence=0)
    req = ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name="lv-dp", partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)])])
    assert wire.request(ApiKey.PRODUCE, 9, req).responses[0].partition_responses[0].error_code == 0
    for v in versions(ApiKey.DESCRIBE_PRODUCERS):
        r = wire.request(ApiKey.DESCRIBE_PRODUCERS, v, DescribeProducersRequest(topics=[
            DescribeProducersRequest.TopicRequest(name="lv-dp", partition_indexes=[0])]))
        (p,) = r.topics[0].partitions
        assert [(s.producer_id, s.producer_epoch, s.last_sequence) for s in p.active_producers] == [(pid, 0, 0)]
    for v in versions(ApiKey.LIST_TRANSACTIONS):
        r = wire.request(ApiKey.LIST_TRANSACTIONS, v, ListTransactionsRequest(
            state_filters=["NoSuchState"], producer_id_filters=[], duration_filter=-1,
            transactional_id_pattern=".*" if v >= 2 else None))
        assert (r.error_code, r.unknown_state_filters, r.transaction_states) == (0, ["NoSuchState"], [])
        if v >= 2:  # KIP-1152: an invalid pattern fails the whole listing
            r = wire.request(ApiKey.LIST_TRANSACTIONS, v, ListTransactionsRequest(
                state_filters=[], producer_id_filters=[], duration_filter=-1, transactional_id_pattern="(unclosed"))
            assert (r.error_code, r.transaction_states) == (Errors.INVALID_REGULAR_EXPRESSION, [])
    for v in versions(ApiKey.DESCRIBE_TRANSACTIONS):
        r = wire.request(ApiKey.DESCRIBE_TRANSACTIONS, v, DescribeTransactionsRequest(transactional_ids=[""]))
        assert [s.error_code for s in r.transaction_states] == [Errors.INVALID_REQUEST]


def test_scram_credentials_every_version(wire):
    up = AlterUserScramCredentialsRequest.ScramCredentialUpsertion
    for v in versions(ApiKey.ALTER_USER_SCRAM_CREDENTIALS):
        r = wire.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, v, AlterUserScramCredentialsRequest(
            upsertions=[up(name=f"lv-user-{v}", mechanism=2, iterations=4096, salt=b"salt",
                           salted_password=bytes(64))], deletions=[]))
        assert [(x.user, x.error_code) for x in r.results] == [(f"lv-user-{v}", 0)]
    for v in versions(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS):
        r = wire.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, v, DescribeUserScramCredentialsRequest(
            users=[DescribeUserScramCredentialsRequest.UserName(name="lv-user-0")]))
        assert [(x.user, x.error_code, [(c.mechanism, c.iterations) for c in x.credential_infos])
                for x in r.results] == [("lv-user-0", 0, [(2, 4096)])]


def test_sasl_requests_every_version_on_a_plaintext_listener_are_illegal_state(wire):
    """No SASL exchange on PLAINTEXT (nor after one): ILLEGAL_SASL_STATE, as KafkaApis answers."""
    for v in versions(ApiKey.SASL_HANDSHAKE):
        r = wire.request(ApiKey.SASL_HANDSHAKE, v, SaslHandshakeRequest(mechanism="PLAIN"))
        assert (r.error_code, r.mechanisms) == (Errors.ILLEGAL_SASL_STATE, [])
    for v in versions(ApiKey.SASL_AUTHENTICATE):
        r = wire.request(ApiKey.SASL_AUTHENTICATE, v, SaslAuthenticateRequest(auth_bytes=b"\0a\0b"))
        assert (r.error_code, r.auth_bytes) == (Errors.ILLEGAL_SASL_STATE, b"")
        assert r.error_message == "SaslAuthenticate request received after successful authentication"


def test_describe_topic_partitions_every_version(wire):
    tid = create_topic(wire, "lv-dtp", partitions=3)
    for v in versions(ApiKey.DESCRIBE_TOPIC_PARTITIONS):
        r = wire.request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, v, DescribeTopicPartitionsRequest(
            topics=[DescribeTopicPartitionsRequest.TopicRequest(name="lv-dtp")], response_partition_limit=2,
            cursor=None))
        (t,) = r.topics
        assert (t.error_code, t.topic_id, [p.partition_index for p in t.partitions]) == (0, tid, [0, 1])
        assert (r.next_cursor.topic_name, r.next_cursor.partition_index) == ("lv-dtp", 2)


def test_describe_quorum_and_update_features_every_version(broker, wire):
    # (imported here: other API families share this module's import block)
    from pybroker.protocol.messages import DescribeQuorumRequest, UpdateFeaturesRequest

    for v in versions(ApiKey.DESCRIBE_QUORUM):
        r = wire.request(ApiKey.DESCRIBE_QUORUM, v, DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
            topic_name="__cluster_metadata", partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)])]))
        (p,) = r.topics[0].partitions
        assert (r.error_code, p.error_code, p.leader_id, [s.replica_id for s in p.current_voters]) == (
            0, 0, broker.config.node_id, [broker.config.node_id])
        assert p.current_voters[0].log_end_offset == p.high_watermark > 0
        assert [n.node_id for n in r.nodes] == ([broker.config.node_id] if v >= 2 else [])
    for v in versions(ApiKey.UPDATE_FEATURES):
        key = UpdateFeaturesRequest.FeatureUpdateKey
        ok = wire.request(ApiKey.UPDATE_FEATURES, v, UpdateFeaturesRequest(
            timeout_ms=5000, feature_updates=[key(feature="metadata.version", max_version_level=29)]))
        assert (ok.error_code, [(x.feature, x.error_code) for x in ok.results]) == (
            0, [("metadata.version", 0)] if v <= 1 else [])
        bad = wire.request(ApiKey.UPDATE_FEATURES, v, UpdateFeaturesRequest(
            timeout_ms=5000, feature_updates=[key(feature="metadata.version", max_version_level=99)]))
        assert (bad.error_code, bad.results) == (Errors.INVALID_UPDATE_VERSION, [])


def test_client_quotas_every_version(wire):
    # (imported here: other API families share this module's import block)
    from pybroker.protocol.messages import AlterClientQuotasRequest, DescribeClientQuotasRequest

    entry, entity, op = (AlterClientQuotasRequest.EntryData, AlterClientQuotasRequest.EntityData,
                         AlterClientQuotasRequest.OpData)
    for v in versions(ApiKey.ALTER_CLIENT_QUOTAS):
        r = wire.request(ApiKey.ALTER_CLIENT_QUOTAS, v, AlterClientQuotasRequest(entries=[
            entry(entity=[entity(entity_type="user", entity_name=f"lv-{v}"),
                          entity(entity_type="client-id", entity_name=None)],
                  ops=[op(key="producer_byte_rate", value=1000.0 + v, remove=False)]),
            entry(entity=[entity(entity_type="user", entity_name="lv-bad")],
                  ops=[op(key="producer_byte_rate", value=-1.0, remove=False)])], validate_only=False))
        assert [(x.error_code, x.error_message, [(e.entity_type, e.entity_name) for e in x.entity])
                for x in r.entries] == [
            (0, None, [("client-id", None), ("user", f"lv-{v}")]),
            (Errors.INVALID_REQUEST, "Quota producer_byte_rate must be greater than 0", [("user", "lv-bad")])]
    comp = DescribeClientQuotasRequest.ComponentData
    for v in versions(ApiKey.DESCRIBE_CLIENT_QUOTAS):
        r = wire.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, v, DescribeClientQuotasRequest(
            components=[comp(entity_type="user", match_type=0, match="lv-0"),
                        comp(entity_type="client-id", match_type=1, match=None)], strict=True))
        assert (r.error_code, [([(e.entity_type, e.entity_name) for e in x.entity],
                                [(q.key, q.value) for q in x.values]) for x in r.entries]) == (
            0, [([("client-id", None), ("user", "lv-0")], [("producer_byte_rate", 1000.0)])])
        bad = wire.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, v, DescribeClientQuotasRequest(
            components=[comp(entity_type="user", match_type=0, match=None)], strict=False))
        assert (bad.error_code, bad.entries) == (Errors.INVALID_REQUEST, None)


def test_alter_replica_log_dirs_every_version(wire):
    from pybroker.protocol.messages import AlterReplicaLogDirsRequest, DescribeLogDirsRequest

    topic = "live-arld"
    create_topic(wire, topic)
    here = next(r.log_dir for r in wire.request(ApiKey.DESCRIBE_LOG_DIRS, 1, DescribeLogDirsRequest(
        topics=None)).results for t in r.topics if t.name == topic)
    assert versions(ApiKey.ALTER_REPLICA_LOG_DIRS) == [1, 2]  # v0 removed by KIP-896
    for v in versions(ApiKey.ALTER_REPLICA_LOG_DIRS):
        req = AlterReplicaLogDirsRequest(dirs=[
            AlterReplicaLogDirsRequest.AlterReplicaLogDir(path=path, topics=[
                AlterReplicaLogDirsRequest.AlterReplicaLogDirTopic(name=topic, partitions=[0])])
            for path in (here, here + "-elsewhere")])
        resp = wire.request(ApiKey.ALTER_REPLICA_LOG_DIRS, v, req)
        # one partition named twice: the later entry wins, as in Kafka's map of partition -> dir
        assert [(t.topic_name, [(p.partition_index, p.error_code) for p in t.partitions])
                for t in resp.results] == [(topic, [(0, Errors.LOG_DIR_NOT_FOUND)])]
        req.dirs = req.dirs[:1]
        resp = wire.request(ApiKey.ALTER_REPLICA_LOG_DIRS, v, req)
        assert resp.results[0].partitions[0].error_code == Errors.NONE


def test_list_config_resources_every_version(wire):
    """KIP-1142: v0 lists client-metrics resources only (none can be configured here), v1 every
    type it knows: groups with configs, client metrics, brokers as BROKER_LOGGER and BROKER, topics."""
    from pybroker.protocol.messages import (
        IncrementalAlterConfigsRequest,
        ListConfigResourcesRequest,
    )

    create_topic(wire, "lv-lcr")
    alter = IncrementalAlterConfigsRequest
    r = wire.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, alter(validate_only=False, resources=[
        alter.AlterConfigsResource(resource_type=32, resource_name="lv-lcr-group", configs=[
            alter.AlterableConfig(name="consumer.session.timeout.ms", config_operation=0, value="50000")])]))
    assert r.responses[0].error_code == 0, r
    for v in versions(ApiKey.LIST_CONFIG_RESOURCES):
        req = ListConfigResourcesRequest(resource_types=[]) if v >= 1 else ListConfigResourcesRequest()
        r = wire.request(ApiKey.LIST_CONFIG_RESOURCES, v, req)
        assert r.error_code == 0
        listed = [(c.resource_type, c.resource_name) for c in r.config_resources]
        if v == 0:
            assert listed == []
            continue
        assert listed[:3] == [(32, "lv-lcr-group"), (8, "1"), (4, "1")]
        assert (2, "lv-lcr") in listed and all(t == 2 for t, _ in listed[3:])
        only = wire.request(ApiKey.LIST_CONFIG_RESOURCES, v, ListConfigResourcesRequest(resource_types=[4, 32]))
        assert [(c.resource_type, c.resource_name) for c in only.config_resources] == [(32, "lv-lcr-group"),
                                                                                     (4, "1")]
        # a type the version does not know (here UNKNOWN 0) fails the request
        bad = wire.request(ApiKey.LIST_CONFIG_RESOURCES, v, ListConfigResourcesRequest(resource_types=[2, 0]))
        assert (bad.error_code, bad.config_resources) == (Errors.UNSUPPORTED_VERSION, [])
