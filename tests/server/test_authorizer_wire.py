"""StandardAuthorizer on the wire: ACL management (Create/Describe/DeleteAcls rules and messages,
ACLs kept across a restart) and enforcement (DENY ACLs turn Produce/Fetch/Metadata/group requests
into the *_AUTHORIZATION_FAILED codes KafkaApis answers; allow.everyone.if.no.acl.found; super.users).
The caller is always User:ANONYMOUS from 127.0.0.1 (no SASL)."""

from __future__ import annotations

import pytest

from pybroker.acl import AclOperation as Op
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    CreateAclsRequest,
    CreateTopicsRequest,
    DeleteAclsRequest,
    DescribeAclsRequest,
    DescribeClusterRequest,
    DescribeGroupsRequest,
    FetchRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    InitProducerIdRequest,
    JoinGroupRequest,
    ListGroupsRequest,
    ListOffsetsRequest,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    ProduceRequest,
)
from pybroker.records.batch import build_batch
from pybroker.testing import EmbeddedBroker

from .wire import WireClient

ANY, MATCH, LITERAL, PREFIXED = 1, 2, 3, 4  # PatternType
R_ANY, TOPIC, GROUP, CLUSTER, TXN_ID = 1, 2, 3, 4, 5  # ResourceType
P_ANY, DENY, ALLOW = 1, 2, 3  # AclPermissionType
ME = "User:ANONYMOUS"
AUTHORIZER = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
OPEN = {**AUTHORIZER, "allow.everyone.if.no.acl.found": "true"}


# ---------------------------------------------------------------------------- helpers

def creation(rtype: int, name: str, pattern: int, principal: str, op: int, perm: int,
             host: str = "*") -> CreateAclsRequest.AclCreation:
    return CreateAclsRequest.AclCreation(resource_type=rtype, resource_name=name, resource_pattern_type=pattern,
                                         principal=principal, host=host, operation=op, permission_type=perm)


def create(w: WireClient, *creations: CreateAclsRequest.AclCreation, v: int = 3) -> list[tuple[int, str | None]]:
    r = w.request(ApiKey.CREATE_ACLS, v, CreateAclsRequest(creations=list(creations)))
    return [(x.error_code, x.error_message) for x in r.results]


def describe(w: WireClient, rtype: int = R_ANY, name: str | None = None, pattern: int = ANY,
             principal: str | None = None, host: str | None = None, op: int = Op.ANY, perm: int = P_ANY,
             v: int = 3) -> tuple[int, set[tuple]]:
    r = w.request(ApiKey.DESCRIBE_ACLS, v, DescribeAclsRequest(
        resource_type_filter=rtype, resource_name_filter=name, pattern_type_filter=pattern,
        principal_filter=principal, host_filter=host, operation=op, permission_type=perm))
    return r.error_code, {(res.resource_type, res.resource_name, res.pattern_type, a.principal, a.host,
                           a.operation, a.permission_type) for res in r.resources for a in res.acls}


def delete_filter(rtype: int = R_ANY, name: str | None = None, pattern: int = ANY, principal: str | None = None,
                  op: int = Op.ANY, perm: int = P_ANY) -> DeleteAclsRequest.DeleteAclsFilter:
    return DeleteAclsRequest.DeleteAclsFilter(resource_type_filter=rtype, resource_name_filter=name,
                                              pattern_type_filter=pattern, principal_filter=principal,
                                              host_filter=None, operation=op, permission_type=perm)


def delete(w: WireClient, *filters: DeleteAclsRequest.DeleteAclsFilter, v: int = 3) -> list[tuple[int, set]]:
    r = w.request(ApiKey.DELETE_ACLS, v, DeleteAclsRequest(filters=list(filters)))
    return [(fr.error_code, {(a.resource_type, a.resource_name, a.pattern_type, a.principal, a.host, a.operation,
                              a.permission_type) for a in fr.matching_acls}) for fr in r.filter_results]


def make_topic(w: WireClient, name: str) -> None:
    t = CreateTopicsRequest.CreatableTopic(name=name, num_partitions=1, replication_factor=1, assignments=[],
                                           configs=[])
    r = w.request(ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(topics=[t], timeout_ms=10_000, validate_only=False))
    assert r.topics[0].error_code in (0, Errors.TOPIC_ALREADY_EXISTS)


def produce(w: WireClient, topic: str, transactional_id: str | None = None) -> int:
    batch = build_batch([(0, b"k", b"v", [])])
    req = ProduceRequest(transactional_id=transactional_id, acks=1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=batch)])])
    r = w.request(ApiKey.PRODUCE, 9, req)
    return r.responses[0].partition_responses[0].error_code


def fetch(w: WireClient, topic: str) -> int:
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                       session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                           FetchRequest.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0,
                                                       log_start_offset=-1, partition_max_bytes=1 << 20)])],
                       forgotten_topics_data=[], rack_id="")
    r = w.request(ApiKey.FETCH, 12, req)
    return r.responses[0].partitions[0].error_code


def metadata(w: WireClient, topics: list[str] | None, auto_create: bool = False, v: int = 12) -> dict:
    req = MetadataRequest(topics=None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t)
                                                              for t in topics],
                          allow_auto_topic_creation=auto_create, include_topic_authorized_operations=True)
    return {t.name: t for t in w.request(ApiKey.METADATA, v, req).topics}


def ops(bits: int) -> set[Op]:
    return {op for op in Op if bits & (1 << op)}


@pytest.fixture
def node(tmp_path):
    brokers: list[EmbeddedBroker] = []

    def start(**overrides: str) -> EmbeddedBroker:
        b = EmbeddedBroker(log_dir=str(tmp_path / "data"), overrides=overrides).start()
        brokers.append(b)
        return b

    yield start
    for b in brokers:
        b.stop()


@pytest.fixture
def open_node(node):
    """An authorizer that allows everything on resources without ACLs (the trivup setup)."""
    return node(**OPEN)


@pytest.fixture
def wire(open_node):
    c = WireClient("127.0.0.1", open_node.port)
    yield c
    c.close()


# ---------------------------------------------------------------------------- management

def test_create_describe_delete_round_trip(wire):
    acls = [creation(TOPIC, "t1", LITERAL, "User:alice", Op.READ, ALLOW),
            creation(TOPIC, "pre", PREFIXED, "User:bob", Op.WRITE, DENY),
            creation(GROUP, "g", PREFIXED, "User:bob", Op.ALL, ALLOW)]
    assert create(wire, *acls) == [(0, None)] * 3
    code, everything = describe(wire)
    assert code == 0
    assert everything == {(TOPIC, "t1", LITERAL, "User:alice", "*", Op.READ, ALLOW),
                          (TOPIC, "pre", PREFIXED, "User:bob", "*", Op.WRITE, DENY),
                          (GROUP, "g", PREFIXED, "User:bob", "*", Op.ALL, ALLOW)}
    assert describe(wire, pattern=PREFIXED)[1] == {a for a in everything if a[2] == PREFIXED}
    assert describe(wire, rtype=TOPIC)[1] == {a for a in everything if a[0] == TOPIC}
    assert describe(wire, principal="User:bob", op=Op.WRITE)[1] == {
        (TOPIC, "pre", PREFIXED, "User:bob", "*", Op.WRITE, DENY)}
    # MATCH: the ACLs that apply to a resource of that name (prefix "pre" covers "prefix-topic")
    assert describe(wire, rtype=TOPIC, name="prefix-topic", pattern=MATCH)[1] == {
        (TOPIC, "pre", PREFIXED, "User:bob", "*", Op.WRITE, DENY)}
    # a literal name filter with a concrete pattern type matches exactly
    assert describe(wire, rtype=TOPIC, name="prefix-topic", pattern=PREFIXED)[1] == set()
    [(code, deleted)] = delete(wire, delete_filter(pattern=PREFIXED))
    assert code == 0 and deleted == {a for a in everything if a[2] == PREFIXED}
    assert describe(wire)[1] == {(TOPIC, "t1", LITERAL, "User:alice", "*", Op.READ, ALLOW)}


def test_describe_groups_acls_per_resource_pattern(wire):
    create(wire, creation(TOPIC, "same", LITERAL, "User:a", Op.READ, ALLOW),
           creation(TOPIC, "same", LITERAL, "User:b", Op.WRITE, ALLOW),
           creation(TOPIC, "same", PREFIXED, "User:a", Op.READ, ALLOW))
    r = wire.request(ApiKey.DESCRIBE_ACLS, 3, DescribeAclsRequest(
        resource_type_filter=TOPIC, resource_name_filter=None, pattern_type_filter=ANY, principal_filter=None,
        host_filter=None, operation=Op.ANY, permission_type=P_ANY))
    shape = sorted((res.pattern_type, len(res.acls)) for res in r.resources)
    assert shape == [(LITERAL, 2), (PREFIXED, 1)]


def test_creating_an_existing_acl_succeeds_once(wire):
    a = creation(TOPIC, "dup", LITERAL, "User:a", Op.READ, ALLOW)
    assert create(wire, a, a) == [(0, None), (0, None)]
    assert create(wire, a) == [(0, None)]
    assert len(describe(wire, name="dup")[1]) == 1
    [(code, deleted)] = delete(wire, delete_filter(name="dup"))
    assert len(deleted) == 1


@pytest.mark.parametrize("bad, message", [
    (creation(CLUSTER, "not-the-cluster", LITERAL, "User:a", Op.ALTER, ALLOW),
     "The only valid name for the CLUSTER resource is kafka-cluster"),
    (creation(TOPIC, "", LITERAL, "User:a", Op.READ, ALLOW), "Invalid empty resource name"),
    (creation(TOPIC, "t", LITERAL, "alice", Op.READ, ALLOW),
     "Could not parse principal from `alice` (no colon is present separating the principal type from the "
     "principal name)"),
    (creation(99, "t", LITERAL, "User:a", Op.READ, ALLOW), "Invalid resourceType UNKNOWN"),
    (creation(TOPIC, "t", 99, "User:a", Op.READ, ALLOW), "Invalid patternType UNKNOWN"),
    (creation(TOPIC, "t", LITERAL, "User:a", 99, ALLOW), "Invalid operation UNKNOWN"),
    (creation(TOPIC, "t", LITERAL, "User:a", Op.READ, 99), "Invalid permissionType UNKNOWN"),
])
def test_create_acls_rejects_invalid_bindings_with_kafkas_messages(wire, bad, message):
    good = creation(TOPIC, "fine", LITERAL, "User:a", Op.READ, ALLOW)
    assert create(wire, good, bad) == [(0, None), (Errors.INVALID_REQUEST, message)]
    assert describe(wire)[1] == {(TOPIC, "fine", LITERAL, "User:a", "*", Op.READ, ALLOW)}


@pytest.mark.parametrize("bad", [
    creation(R_ANY, "t", LITERAL, "User:a", Op.READ, ALLOW),
    creation(TOPIC, "t", MATCH, "User:a", Op.READ, ALLOW),
    creation(TOPIC, "t", ANY, "User:a", Op.READ, ALLOW),
    creation(TOPIC, "t", LITERAL, "User:a", Op.ANY, ALLOW),
    creation(TOPIC, "t", LITERAL, "User:a", Op.READ, P_ANY),
])
def test_create_acls_with_a_filter_only_value_fails_the_whole_request(wire, bad):
    # Kafka cannot build an AclBinding from it: IllegalArgumentException -> every creation fails
    good = creation(TOPIC, "fine", LITERAL, "User:a", Op.READ, ALLOW)
    assert create(wire, good, bad) == [(Errors.UNKNOWN_SERVER_ERROR, None)] * 2
    assert describe(wire)[1] == set()


def test_delete_acls_with_unknown_filter_parts_and_overlapping_filters(wire):
    create(wire, creation(TOPIC, "a", LITERAL, "User:x", Op.READ, ALLOW),
           creation(TOPIC, "b", LITERAL, "User:x", Op.READ, ALLOW))
    results = delete(wire, delete_filter(rtype=99), delete_filter(op=99), delete_filter(name="a"),
                     delete_filter(rtype=TOPIC))
    assert [code for code, _ in results] == [Errors.INVALID_REQUEST, Errors.INVALID_REQUEST, 0, 0]
    # every filter lists what it matched, even an ACL an earlier filter of the request also removed
    assert {a[1] for a in results[2][1]} == {"a"}
    assert {a[1] for a in results[3][1]} == {"a", "b"}
    assert describe(wire)[1] == set()
    r = wire.request(ApiKey.DELETE_ACLS, 3, DeleteAclsRequest(filters=[delete_filter(rtype=99)]))
    assert r.filter_results[0].error_message == "Unknown patternFilter."


def test_acls_survive_a_restart(node):
    b = node(**OPEN)
    w = WireClient("127.0.0.1", b.port)
    create(w, creation(TOPIC, "kept", LITERAL, "User:a", Op.READ, ALLOW),
           creation(TOPIC, "gone", LITERAL, "User:a", Op.READ, ALLOW))
    delete(w, delete_filter(name="gone"))
    w.close()
    b.stop()
    b2 = node(**OPEN)
    w = WireClient("127.0.0.1", b2.port)
    try:
        assert describe(w)[1] == {(TOPIC, "kept", LITERAL, "User:a", "*", Op.READ, ALLOW)}
    finally:
        w.close()


def test_acl_apis_need_cluster_describe_and_alter(node):
    b = node(**OPEN)
    w = WireClient("127.0.0.1", b.port)
    try:
        create(w, creation(CLUSTER, "kafka-cluster", LITERAL, ME, Op.ALTER, DENY),
               creation(CLUSTER, "kafka-cluster", LITERAL, ME, Op.DESCRIBE, ALLOW))
        assert describe(w)[0] == 0
        assert create(w, creation(TOPIC, "x", LITERAL, "User:a", Op.READ, ALLOW)) == [
            (Errors.CLUSTER_AUTHORIZATION_FAILED, None)]
        assert [c for c, _ in delete(w, delete_filter())] == [Errors.CLUSTER_AUTHORIZATION_FAILED]
        assert len(describe(w)[1]) == 2
    finally:
        w.close()


# ---------------------------------------------------------------------------- enforcement

def test_deny_acls_fail_produce_fetch_and_metadata(wire):
    make_topic(wire, "open-topic")
    make_topic(wire, "closed-topic")
    assert produce(wire, "open-topic") == 0
    assert fetch(wire, "open-topic") == 0
    create(wire, creation(TOPIC, "closed", PREFIXED, ME, Op.ALL, DENY))
    assert produce(wire, "closed-topic") == Errors.TOPIC_AUTHORIZATION_FAILED
    assert fetch(wire, "closed-topic") == Errors.TOPIC_AUTHORIZATION_FAILED
    named = metadata(wire, ["open-topic", "closed-topic"])
    assert named["open-topic"].error_code == 0
    assert named["closed-topic"].error_code == Errors.TOPIC_AUTHORIZATION_FAILED
    assert named["closed-topic"].partitions == []
    # all-topics metadata silently leaves the topic out
    assert "closed-topic" not in metadata(wire, None) and "open-topic" in metadata(wire, None)
    # ops bitfield: everything on a topic without ACLs
    assert ops(named["open-topic"].topic_authorized_operations) == {
        Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}


def test_deny_write_only_keeps_read_and_describe(wire):
    make_topic(wire, "ro-topic")
    create(wire, creation(TOPIC, "ro-topic", LITERAL, ME, Op.WRITE, DENY),
           creation(TOPIC, "ro-topic", LITERAL, "User:*", Op.READ, ALLOW))
    assert produce(wire, "ro-topic") == Errors.TOPIC_AUTHORIZATION_FAILED
    assert fetch(wire, "ro-topic") == 0
    t = metadata(wire, ["ro-topic"])["ro-topic"]
    assert t.error_code == 0  # READ ALLOW implies DESCRIBE
    assert ops(t.topic_authorized_operations) == {Op.READ, Op.DESCRIBE}


def test_acl_on_another_host_does_not_apply(wire):
    make_topic(wire, "hosts")
    create(wire, creation(TOPIC, "hosts", LITERAL, ME, Op.WRITE, DENY, host="10.9.9.9"),
           creation(TOPIC, "hosts", LITERAL, ME, Op.WRITE, ALLOW, host="127.0.0.1"))
    assert produce(wire, "hosts") == 0


def test_auto_create_needs_create(wire):
    create(wire, creation(CLUSTER, "kafka-cluster", LITERAL, ME, Op.CREATE, DENY),
           creation(TOPIC, "auto-", PREFIXED, ME, Op.DESCRIBE, ALLOW),
           creation(TOPIC, "auto-ok", PREFIXED, ME, Op.CREATE, ALLOW))
    got = metadata(wire, ["auto-no", "auto-ok-1"], auto_create=True)
    assert got["auto-no"].error_code == Errors.TOPIC_AUTHORIZATION_FAILED
    assert got["auto-ok-1"].error_code == 0
    assert "auto-no" not in metadata(wire, None)


def test_transactional_and_idempotent_producer_rules(wire):
    make_topic(wire, "txn-topic")
    create(wire, creation(TXN_ID, "tx-denied", LITERAL, ME, Op.WRITE, DENY))
    r = wire.request(ApiKey.INIT_PRODUCER_ID, 4, InitProducerIdRequest(
        transactional_id="tx-denied", transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1))
    assert r.error_code == Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    idempotent = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000, producer_id=-1,
                                       producer_epoch=-1)
    assert wire.request(ApiKey.INIT_PRODUCER_ID, 4, idempotent).error_code == 0
    # IDEMPOTENT_WRITE denied on the cluster and WRITE denied on every topic -> CLUSTER_AUTHORIZATION_FAILED
    create(wire, creation(CLUSTER, "kafka-cluster", LITERAL, ME, Op.IDEMPOTENT_WRITE, DENY),
           creation(TOPIC, "*", LITERAL, ME, Op.WRITE, DENY))
    assert wire.request(ApiKey.INIT_PRODUCER_ID, 4, idempotent).error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
    # a transactional batch needs WRITE on its transactional id
    batch = build_batch([(0, b"k", b"v", [])], producer_id=1, producer_epoch=0, base_sequence=0,
                        transactional=True)
    req = ProduceRequest(transactional_id="tx-denied", acks=1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name="txn-topic", partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=batch)])])
    r = wire.request(ApiKey.PRODUCE, 9, req)
    assert r.responses[0].partition_responses[0].error_code == Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_group_requests_need_group_acls(wire):
    make_topic(wire, "g-topic")
    create(wire, creation(GROUP, "locked", PREFIXED, ME, Op.ALL, DENY))
    join = JoinGroupRequest(group_id="locked-1", session_timeout_ms=10000, rebalance_timeout_ms=10000,
                            member_id="", group_instance_id=None, protocol_type="consumer",
                            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")],
                            reason=None)
    assert wire.request(ApiKey.JOIN_GROUP, 9, join).error_code == Errors.GROUP_AUTHORIZATION_FAILED
    hb = HeartbeatRequest(group_id="locked-1", generation_id=1, member_id="m", group_instance_id=None)
    assert wire.request(ApiKey.HEARTBEAT, 4, hb).error_code == Errors.GROUP_AUTHORIZATION_FAILED
    fc = wire.request(ApiKey.FIND_COORDINATOR, 4, FindCoordinatorRequest(key_type=0, coordinator_keys=["locked-1",
                                                                                                      "free"]))
    assert [c.error_code for c in fc.coordinators] == [Errors.GROUP_AUTHORIZATION_FAILED, 0]
    commit = OffsetCommitRequest(group_id="locked-1", generation_id_or_member_epoch=-1, member_id="",
                                 group_instance_id=None, retention_time_ms=-1, topics=[
                                     OffsetCommitRequest.OffsetCommitRequestTopic(name="g-topic", partitions=[
                                         OffsetCommitRequest.OffsetCommitRequestPartition(
                                             partition_index=0, committed_offset=0, committed_leader_epoch=-1,
                                             committed_metadata="")])])
    r = wire.request(ApiKey.OFFSET_COMMIT, 8, commit)
    assert r.topics[0].partitions[0].error_code == Errors.GROUP_AUTHORIZATION_FAILED
    r = wire.request(ApiKey.OFFSET_FETCH, 8, OffsetFetchRequest(groups=[
        OffsetFetchRequest.OffsetFetchRequestGroup(group_id="locked-1", topics=None)], require_stable=False))
    assert r.groups[0].error_code == Errors.GROUP_AUTHORIZATION_FAILED
    d = wire.request(ApiKey.DESCRIBE_GROUPS, 5, DescribeGroupsRequest(groups=["locked-1", "free"],
                                                                      include_authorized_operations=True))
    by_id = {g.group_id: g for g in d.groups}
    assert by_id["locked-1"].error_code == Errors.GROUP_AUTHORIZATION_FAILED
    assert ops(by_id["free"].authorized_operations) == {Op.READ, Op.DESCRIBE, Op.DELETE}
    # a commit to an allowed group for a topic the caller may not READ
    create(wire, creation(TOPIC, "g-topic", LITERAL, ME, Op.READ, DENY))
    commit.group_id = "free"
    r = wire.request(ApiKey.OFFSET_COMMIT, 8, commit)
    assert r.topics[0].partitions[0].error_code == Errors.TOPIC_AUTHORIZATION_FAILED


def test_list_groups_hides_groups_without_describe(wire):
    make_topic(wire, "lg-topic")
    commit = OffsetCommitRequest(group_id="", generation_id_or_member_epoch=-1, member_id="",
                                 group_instance_id=None, retention_time_ms=-1, topics=[
                                     OffsetCommitRequest.OffsetCommitRequestTopic(name="lg-topic", partitions=[
                                         OffsetCommitRequest.OffsetCommitRequestPartition(
                                             partition_index=0, committed_offset=0, committed_leader_epoch=-1,
                                             committed_metadata="")])])
    for g in ("visible-g", "hidden-g"):
        commit.group_id = g
        assert wire.request(ApiKey.OFFSET_COMMIT, 8, commit).topics[0].partitions[0].error_code == 0
    listed = {g.group_id for g in wire.request(ApiKey.LIST_GROUPS, 4, ListGroupsRequest(states_filter=[])).groups}
    assert {"visible-g", "hidden-g"} <= listed
    create(wire, creation(GROUP, "hidden-g", LITERAL, ME, Op.DESCRIBE, DENY),
           creation(CLUSTER, "kafka-cluster", LITERAL, ME, Op.DESCRIBE, DENY))
    listed = {g.group_id for g in wire.request(ApiKey.LIST_GROUPS, 4, ListGroupsRequest(states_filter=[])).groups}
    assert "visible-g" in listed and "hidden-g" not in listed


def test_default_deny_without_acls_and_super_users(node):
    b = node(**AUTHORIZER)  # allow.everyone.if.no.acl.found=false
    w = WireClient("127.0.0.1", b.port)
    try:
        assert describe(w)[0] == Errors.CLUSTER_AUTHORIZATION_FAILED
        assert metadata(w, None) == {}
        r = w.request(ApiKey.DESCRIBE_CLUSTER, 1, DescribeClusterRequest(include_cluster_authorized_operations=True,
                                                                         endpoint_type=1))
        assert r.cluster_authorized_operations == 0
    finally:
        w.close()
    b.stop()
    b = node(**AUTHORIZER, **{"super.users": "User:admin;User:ANONYMOUS"})
    w = WireClient("127.0.0.1", b.port)
    try:
        make_topic(w, "su-topic")
        assert produce(w, "su-topic") == 0
        create(w, creation(TOPIC, "su-topic", LITERAL, ME, Op.ALL, DENY))
        assert produce(w, "su-topic") == 0  # super users ignore DENY ACLs
    finally:
        w.close()


def test_allow_acl_opens_a_default_deny_broker(node):
    b = node(**AUTHORIZER, **{"super.users": "User:ANONYMOUS"})
    w = WireClient("127.0.0.1", b.port)
    make_topic(w, "granted")
    make_topic(w, "other")
    create(w, creation(TOPIC, "granted", LITERAL, "User:*", Op.WRITE, ALLOW))
    w.close()
    b.stop()
    b = node(**AUTHORIZER)  # same data dir, ANONYMOUS no longer a super user
    w = WireClient("127.0.0.1", b.port)
    try:
        assert produce(w, "granted") == 0
        assert produce(w, "other") == Errors.TOPIC_AUTHORIZATION_FAILED
        assert set(metadata(w, None)) == {"granted"}  # WRITE implies DESCRIBE
        lo = w.request(ApiKey.LIST_OFFSETS, 7, ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
            ListOffsetsRequest.ListOffsetsTopic(name="granted", partitions=[
                ListOffsetsRequest.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1,
                                                        timestamp=-1)])]))
        assert lo.topics[0].partitions[0].error_code == 0
    finally:
        w.close()


def test_unknown_authorizer_class_is_a_config_error():
    from pybroker.config import BrokerConfig, ConfigError

    with pytest.raises(ConfigError, match="authorizer.class.name"):
        BrokerConfig({"authorizer.class.name": "com.example.Nope"})
    with pytest.raises(ConfigError, match="super.users"):
        BrokerConfig({"super.users": "admin"})


def test_admin_and_transaction_apis_honour_deny_acls(wire):
    from pybroker.protocol.messages import (
        AddOffsetsToTxnRequest,
        CreatePartitionsRequest,
        DeleteRecordsRequest,
        DeleteTopicsRequest,
        DescribeConfigsRequest,
        EndTxnRequest,
        IncrementalAlterConfigsRequest,
    )

    make_topic(wire, "adm-open")
    make_topic(wire, "adm-closed")
    create(wire, creation(TOPIC, "adm-closed", LITERAL, ME, Op.ALL, DENY),
           creation(TOPIC, "adm-new-denied", LITERAL, ME, Op.CREATE, DENY),
           creation(CLUSTER, "kafka-cluster", LITERAL, ME, Op.DESCRIBE_CONFIGS, DENY),
           creation(TXN_ID, "tx-no", LITERAL, ME, Op.WRITE, DENY),
           creation(GROUP, "g-no", LITERAL, ME, Op.READ, DENY))
    # CreateTopics: CREATE on the topic (no cluster CREATE ACL -> per topic)
    new = [CreateTopicsRequest.CreatableTopic(name=n, num_partitions=1, replication_factor=1, assignments=[],
                                              configs=[]) for n in ("adm-new-ok", "adm-new-denied")]
    r = wire.request(ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(topics=new, timeout_ms=10_000, validate_only=True))
    assert [(t.name, t.error_code, t.error_message) for t in r.topics] == [
        ("adm-new-ok", 0, None), ("adm-new-denied", Errors.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")]
    # CreatePartitions: ALTER on the topic
    r = wire.request(ApiKey.CREATE_PARTITIONS, 3, CreatePartitionsRequest(topics=[
        CreatePartitionsRequest.CreatePartitionsTopic(name=n, count=2, assignments=None)
        for n in ("adm-open", "adm-closed")], timeout_ms=10_000, validate_only=True))
    assert [r_.error_code for r_ in r.results] == [0, Errors.TOPIC_AUTHORIZATION_FAILED]
    # DescribeConfigs: DESCRIBE_CONFIGS on the topic / cluster
    r = wire.request(ApiKey.DESCRIBE_CONFIGS, 4, DescribeConfigsRequest(resources=[
        DescribeConfigsRequest.DescribeConfigsResource(resource_type=2, resource_name="adm-open",
                                                       configuration_keys=None),
        DescribeConfigsRequest.DescribeConfigsResource(resource_type=2, resource_name="adm-closed",
                                                       configuration_keys=None),
        DescribeConfigsRequest.DescribeConfigsResource(resource_type=4, resource_name="1", configuration_keys=None)],
        include_synonyms=False, include_documentation=False))
    assert [x.error_code for x in r.results] == [0, Errors.TOPIC_AUTHORIZATION_FAILED,
                                                 Errors.CLUSTER_AUTHORIZATION_FAILED]
    # IncrementalAlterConfigs: ALTER_CONFIGS on the topic
    r = wire.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, IncrementalAlterConfigsRequest(resources=[
        IncrementalAlterConfigsRequest.AlterConfigsResource(resource_type=2, resource_name=n, configs=[
            IncrementalAlterConfigsRequest.AlterableConfig(name="retention.ms", config_operation=0, value="1000")])
        for n in ("adm-open", "adm-closed")], validate_only=True))
    assert [x.error_code for x in r.responses] == [0, Errors.TOPIC_AUTHORIZATION_FAILED]
    # ListOffsets (DESCRIBE) and DeleteRecords (DELETE)
    lo = wire.request(ApiKey.LIST_OFFSETS, 7, ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name="adm-closed", partitions=[
            ListOffsetsRequest.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1)])]))
    assert lo.topics[0].partitions[0].error_code == Errors.TOPIC_AUTHORIZATION_FAILED
    r = wire.request(ApiKey.DELETE_RECORDS, 2, DeleteRecordsRequest(topics=[
        DeleteRecordsRequest.DeleteRecordsTopic(name="adm-closed", partitions=[
            DeleteRecordsRequest.DeleteRecordsPartition(partition_index=0, offset=0)])], timeout_ms=5000))
    assert r.topics[0].partitions[0].error_code == Errors.TOPIC_AUTHORIZATION_FAILED
    # DeleteTopics: DESCRIBE + DELETE on the topic
    r = wire.request(ApiKey.DELETE_TOPICS, 6, DeleteTopicsRequest(topics=[
        DeleteTopicsRequest.DeleteTopicState(name="adm-closed", topic_id=bytes(16)),
        DeleteTopicsRequest.DeleteTopicState(name="adm-open", topic_id=bytes(16))], timeout_ms=10_000))
    assert [(x.name, x.error_code) for x in r.responses] == [("adm-closed", Errors.TOPIC_AUTHORIZATION_FAILED),
                                                            ("adm-open", 0)]
    # transactions: WRITE on the transactional id, READ on the group
    r = wire.request(ApiKey.END_TXN, 4, EndTxnRequest(transactional_id="tx-no", producer_id=1, producer_epoch=0,
                                                      committed=True))
    assert r.error_code == Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    r = wire.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, AddOffsetsToTxnRequest(
        transactional_id="tx-ok", producer_id=1, producer_epoch=0, group_id="g-no"))
    assert r.error_code == Errors.GROUP_AUTHORIZATION_FAILED
