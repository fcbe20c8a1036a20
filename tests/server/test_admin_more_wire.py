"""ACLs (no authorizer), ElectLeaders, partition reassignments, DescribeProducers,
ListTransactions and DescribeTransactions over the wire (our codec, a live embedded broker),
at every advertised version, with Kafka's answers for a single KRaft node.
"""

from __future__ import annotations

import itertools
import time
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    AddPartitionsToTxnRequest,
    AlterPartitionReassignmentsRequest,
    CreateAclsRequest,
    CreateTopicsRequest,
    DeleteAclsRequest,
    DescribeAclsRequest,
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    ElectLeadersRequest,
    EndTxnRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    ListPartitionReassignmentsRequest,
    ListTransactionsRequest,
    MetadataRequest,
    ProduceRequest,
)
from pybroker.records.batch import build_batch
from pybroker.server.api_versions import SUPPORTED
from pybroker.testing import EmbeddedBroker

from .wire import WireClient

OVERRIDES = {"transaction.state.log.num.partitions": "3", "offsets.topic.num.partitions": "3"}
NODE_ID = 1
ANY, TOPIC, GROUP = 1, 2, 3  # ResourceType
PATTERN_ANY, LITERAL, PREFIXED = 1, 3, 4  # PatternType
OP_ANY, OP_READ, OP_WRITE = 1, 3, 4  # AclOperation
PERM_ANY, DENY, ALLOW = 1, 2, 3  # AclPermissionType
PREFERRED, UNCLEAN = 0, 1
NOT_NEEDED = (Errors.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition.")
_n = itertools.count()


def versions(api: int) -> list[int]:
    lo, hi = SUPPORTED[api]
    return list(range(lo, hi + 1))


def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(overrides=OVERRIDES) as b:
        yield b


def new_topic(wire, partitions: int = 1) -> str:
    name = f"more-{next(_n)}-{uuid.uuid4().hex[:6]}"
    req = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1)], timeout_ms=5000)
    assert wire.request(ApiKey.CREATE_TOPICS, 7, req).topics[0].error_code == 0
    return name


def all_topic_names(wire) -> set[str]:
    return {t.name for t in wire.request(ApiKey.METADATA, 12, MetadataRequest(topics=None)).topics}


# ------------------------------------------------------------------------------------- ACLs


def test_describe_acls_every_version_answers_security_disabled(wire):
    for v in versions(ApiKey.DESCRIBE_ACLS):
        for resource_type, name, pattern in [(ANY, None, PATTERN_ANY), (TOPIC, "t", LITERAL), (GROUP, "g", PREFIXED)]:
            r = wire.request(ApiKey.DESCRIBE_ACLS, v, DescribeAclsRequest(
                resource_type_filter=resource_type, resource_name_filter=name, pattern_type_filter=pattern,
                principal_filter=None, host_filter=None, operation=OP_ANY, permission_type=PERM_ANY))
            assert (r.error_code, r.error_message, r.resources) == (
                Errors.SECURITY_DISABLED, "No Authorizer is configured on the broker", [])


def acl_creation(name: str, op: int = OP_READ) -> CreateAclsRequest.AclCreation:
    return CreateAclsRequest.AclCreation(resource_type=TOPIC, resource_name=name, resource_pattern_type=LITERAL,
                                         principal="User:alice", host="*", operation=op, permission_type=ALLOW)


def test_create_acls_every_version_fails_each_creation(wire):
    for v in versions(ApiKey.CREATE_ACLS):
        for n in (0, 1, 3):
            r = wire.request(ApiKey.CREATE_ACLS, v, CreateAclsRequest(
                creations=[acl_creation(f"t{i}") for i in range(n)]))
            assert [(c.error_code, c.error_message) for c in r.results] == [
                (Errors.SECURITY_DISABLED, "No Authorizer is configured.")] * n


def acl_filter(name: str | None, pattern: int = LITERAL) -> DeleteAclsRequest.DeleteAclsFilter:
    return DeleteAclsRequest.DeleteAclsFilter(resource_type_filter=TOPIC, resource_name_filter=name,
                                              pattern_type_filter=pattern, principal_filter=None,
                                              host_filter=None, operation=OP_ANY, permission_type=PERM_ANY)


def test_delete_acls_every_version_fails_each_filter(wire):
    for v in versions(ApiKey.DELETE_ACLS):
        for filters in ([], [acl_filter("a")], [acl_filter(None, PATTERN_ANY), acl_filter("b", PREFIXED)]):
            r = wire.request(ApiKey.DELETE_ACLS, v, DeleteAclsRequest(filters=filters))
            assert [(f.error_code, f.error_message, f.matching_acls) for f in r.filter_results] == [
                (Errors.SECURITY_DISABLED, "No Authorizer is configured.", [])] * len(filters)


@pytest.mark.parametrize("api,body", [
    (ApiKey.DESCRIBE_ACLS, DescribeAclsRequest(resource_type_filter=0, resource_name_filter=None,
                                               pattern_type_filter=LITERAL, principal_filter=None, host_filter=None,
                                               operation=OP_ANY, permission_type=PERM_ANY)),
    (ApiKey.DESCRIBE_ACLS, DescribeAclsRequest(resource_type_filter=TOPIC, resource_name_filter=None,
                                               pattern_type_filter=LITERAL, principal_filter=None, host_filter=None,
                                               operation=0, permission_type=PERM_ANY)),
    (ApiKey.CREATE_ACLS, CreateAclsRequest(creations=[acl_creation("ok"), acl_creation("bad", op=0)])),
    (ApiKey.DELETE_ACLS, DeleteAclsRequest(filters=[acl_filter("x", pattern=0)])),
])
def test_acl_request_with_unknown_elements_is_unparseable_and_closes_the_connection(broker, wire, api, body):
    # Kafka's request classes throw while parsing such a request; the socket server then
    # closes the connection instead of answering
    wire.send(api, SUPPORTED[api][1], body)
    with pytest.raises((ConnectionError, OSError)):
        wire.recv_frame()
    other = WireClient("127.0.0.1", broker.port)
    try:
        assert other.request(ApiKey.CREATE_ACLS, 3, CreateAclsRequest(creations=[])).results == []
    finally:
        other.close()


# ----------------------------------------------------------------------------- ElectLeaders


def elect(wire, v, election_type, topic_partitions):
    req = ElectLeadersRequest(election_type=election_type, timeout_ms=5000, topic_partitions=None
                              if topic_partitions is None else [ElectLeadersRequest.TopicPartitions(topic=t, partitions=ps)
                                                                for t, ps in topic_partitions.items()])
    return wire.request(ApiKey.ELECT_LEADERS, v, req)


def results(resp) -> dict[str, list[tuple[int, int, str | None]]]:
    return {r.topic: [(p.partition_id, p.error_code, p.error_message) for p in r.partition_result]
            for r in resp.replica_election_results}


def test_elect_leaders_every_version_and_type_is_not_needed_on_one_node(wire):
    t = new_topic(wire, 3)
    for v in versions(ApiKey.ELECT_LEADERS):
        for election_type in ([PREFERRED, UNCLEAN] if v >= 1 else [PREFERRED]):
            r = elect(wire, v, election_type, {t: [2, 0, 1]})
            assert r.error_code == 0
            assert results(r) == {t: [(2, *NOT_NEEDED), (0, *NOT_NEEDED), (1, *NOT_NEEDED)]}


def test_elect_leaders_unknown_topic_and_partition(wire):
    t = new_topic(wire, 2)
    for v in versions(ApiKey.ELECT_LEADERS):
        r = elect(wire, v, PREFERRED, {t: [0, 7], "more-no-such-topic": [0]})
        assert results(r) == {
            t: [(0, *NOT_NEEDED), (7, Errors.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {t}-7")],
            "more-no-such-topic": [(0, Errors.UNKNOWN_TOPIC_OR_PARTITION, "No such topic as more-no-such-topic")]}


def test_elect_leaders_for_all_partitions_lists_every_topic_without_partitions(wire):
    t1, t2 = new_topic(wire, 1), new_topic(wire, 4)
    for v in versions(ApiKey.ELECT_LEADERS):
        for election_type in ([PREFERRED, UNCLEAN] if v >= 1 else [PREFERRED]):
            r = elect(wire, v, election_type, None)
            assert r.error_code == 0
            got = results(r)
            # Kafka leaves out the partitions whose election was not needed: all of them here
            assert {t1, t2} <= set(got)
            assert set(got) == all_topic_names(wire)
            assert all(parts == [] for parts in got.values())


def test_elect_leaders_empty_list_answers_nothing(wire):
    for v in versions(ApiKey.ELECT_LEADERS):
        r = elect(wire, v, PREFERRED, {})
        assert (r.error_code, r.replica_election_results) == (0, [])


@pytest.mark.parametrize("election_type", [2, -1, 127])
def test_elect_leaders_unknown_election_type_is_invalid_request(wire, election_type):
    t = new_topic(wire, 2)
    message = f"Unknown election type {election_type}"
    for v in [v for v in versions(ApiKey.ELECT_LEADERS) if v >= 1]:
        r = elect(wire, v, election_type, {t: [0, 1], "more-missing": [3]})
        assert r.error_code == Errors.INVALID_REQUEST
        assert results(r) == {t: [(0, Errors.INVALID_REQUEST, message), (1, Errors.INVALID_REQUEST, message)],
                              "more-missing": [(3, Errors.INVALID_REQUEST, message)]}
        r = elect(wire, v, election_type, None)
        assert (r.error_code, r.replica_election_results) == (Errors.INVALID_REQUEST, [])


# -------------------------------------------------------------------- partition reassignments


def list_reassignments(wire, v, topics):
    req = ListPartitionReassignmentsRequest(timeout_ms=5000, topics=None if topics is None else [
        ListPartitionReassignmentsRequest.ListPartitionReassignmentsTopics(name=t, partition_indexes=ps)
        for t, ps in topics.items()])
    return wire.request(ApiKey.LIST_PARTITION_REASSIGNMENTS, v, req)


def alter_reassignments(wire, v, topics):
    """topics: {name: [(partition, replicas or None)]} -> response."""
    req = AlterPartitionReassignmentsRequest(timeout_ms=5000, topics=[
        AlterPartitionReassignmentsRequest.ReassignableTopic(name=t, partitions=[
            AlterPartitionReassignmentsRequest.ReassignablePartition(partition_index=p, replicas=r) for p, r in ps])
        for t, ps in topics.items()])
    return wire.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, v, req)


def test_list_partition_reassignments_every_version_is_empty(wire):
    t = new_topic(wire, 2)
    for v in versions(ApiKey.LIST_PARTITION_REASSIGNMENTS):
        for topics in (None, {}, {t: [0, 1]}, {t: [9], "more-no-such-topic": [0]}):
            r = list_reassignments(wire, v, topics)
            # unknown topics and partitions are skipped silently, as Kafka's controller does
            assert (r.error_code, r.error_message, r.topics) == (0, None, [])


def test_alter_partition_reassignments_every_version(wire, broker):
    t = new_topic(wire, 2)
    for v in versions(ApiKey.ALTER_PARTITION_REASSIGNMENTS):
        r = alter_reassignments(wire, v, {
            t: [(0, [NODE_ID]), (1, None), (0, [NODE_ID, 2]), (1, [NODE_ID, NODE_ID]), (0, []), (5, [NODE_ID])],
            "more-no-such-topic": [(0, [NODE_ID])]})
        assert (r.error_code, r.error_message) == (0, None)
        got = {(x.name, p.partition_index, i): (p.error_code, p.error_message)
               for x in r.responses for i, p in enumerate(x.partitions)}
        assert got == {
            (t, 0, 0): (0, None),
            (t, 1, 1): (Errors.NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress."),
            (t, 0, 2): (Errors.INVALID_REPLICA_ASSIGNMENT,
                        "The manual partition assignment includes broker 2, but no such broker is registered."),
            (t, 1, 3): (Errors.INVALID_REPLICA_ASSIGNMENT,
                        f"The manual partition assignment includes the broker {NODE_ID} more than once."),
            (t, 0, 4): (Errors.INVALID_REPLICA_ASSIGNMENT,
                        "The manual partition assignment includes an empty replica list."),
            (t, 5, 5): (Errors.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {t}:5."),
            ("more-no-such-topic", 0, 0): (Errors.UNKNOWN_TOPIC_OR_PARTITION,
                                           "Unable to find a topic named more-no-such-topic."),
        }
        # the no-op changed nothing and started nothing
        assert list_reassignments(wire, 0, None).topics == []
        md = wire.request(ApiKey.METADATA, 12, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=t)]))
        assert [(p.partition_index, p.leader_id, p.replica_nodes) for p in md.topics[0].partitions] == [
            (0, NODE_ID, [NODE_ID]), (1, NODE_ID, [NODE_ID])]


def test_alter_partition_reassignments_empty_request(wire):
    for v in versions(ApiKey.ALTER_PARTITION_REASSIGNMENTS):
        r = alter_reassignments(wire, v, {})
        # Kafka's controller answers its response defaults: the error message is "" here
        assert (r.error_code, r.error_message, r.responses) == (0, "", [])


# ------------------------------------------------------------------------- DescribeProducers


def init_pid(wire, tid=None, timeout_ms=60000):
    for _ in range(100):
        r = wire.request(ApiKey.INIT_PRODUCER_ID, 4, InitProducerIdRequest(
            transactional_id=tid, transaction_timeout_ms=timeout_ms, producer_id=-1, producer_epoch=-1))
        if r.error_code not in (Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.NOT_COORDINATOR,
                                Errors.CONCURRENT_TRANSACTIONS):
            break
        time.sleep(0.05)
    assert r.error_code == 0, r
    return r.producer_id, r.producer_epoch


def produce(wire, topic, partition, n, pid=-1, epoch=-1, seq=-1, ts=None, transactional=False):
    ts = now_ms() if ts is None else ts
    batch = build_batch([(ts + i, None, b"v%d" % i, ()) for i in range(n)], producer_id=pid, producer_epoch=epoch,
                        base_sequence=seq, transactional=transactional)
    req = ProduceRequest(acks=-1, timeout_ms=5000, transactional_id=None, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=partition, records=batch)])])
    r = wire.request(ApiKey.PRODUCE, 9, req).responses[0].partition_responses[0]
    assert r.error_code == 0, r
    return r.base_offset


def describe_producers(wire, topics):
    req = DescribeProducersRequest(topics=[DescribeProducersRequest.TopicRequest(name=t, partition_indexes=ps)
                                           for t, ps in topics.items()])
    (v,) = versions(ApiKey.DESCRIBE_PRODUCERS)
    return wire.request(ApiKey.DESCRIBE_PRODUCERS, v, req)


def producer_rows(partition_response):
    return [(s.producer_id, s.producer_epoch, s.last_sequence, s.last_timestamp, s.coordinator_epoch,
             s.current_txn_start_offset) for s in partition_response.active_producers]


def test_describe_producers_lists_idempotent_producers_per_partition(wire):
    t = new_topic(wire, 2)
    (a, ea), (b, eb) = init_pid(wire), init_pid(wire)
    ts = now_ms() - 10_000
    produce(wire, t, 0, 3, a, ea, 0, ts)
    produce(wire, t, 0, 2, a, ea, 3, ts + 100)
    produce(wire, t, 0, 1, b, eb, 0, ts + 200)
    produce(wire, t, 1, 4, b, eb, 0, ts + 300)
    produce(wire, t, 1, 1)  # not idempotent: no producer state
    (resp,) = describe_producers(wire, {t: [1, 0]}).topics
    assert resp.name == t
    p1, p0 = resp.partitions
    assert (p1.partition_index, p1.error_code, p1.error_message) == (1, 0, None)
    assert (p0.partition_index, p0.error_code, p0.error_message) == (0, 0, None)
    # last timestamp: the last batch's max timestamp; no marker seen, so coordinator epoch -1
    assert producer_rows(p0) == sorted([(a, ea, 4, ts + 101, -1, -1), (b, eb, 0, ts + 200, -1, -1)])
    assert producer_rows(p1) == [(b, eb, 3, ts + 303, -1, -1)]


def test_describe_producers_errors(wire):
    t = new_topic(wire, 1)
    r = describe_producers(wire, {t: [0, 3], "more-no-such-topic": [0, 1], "bad/name": [0], "": [2]})
    got = {(x.name, p.partition_index): (p.error_code, p.error_message, p.active_producers)
           for x in r.topics for p in x.partitions}
    assert got[(t, 0)] == (0, None, [])
    # a missing partition of a known topic: ReplicaManager's error, no message
    assert got[(t, 3)] == (Errors.UNKNOWN_TOPIC_OR_PARTITION, None, [])
    unknown = (Errors.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.", [])
    assert got[("more-no-such-topic", 0)] == got[("more-no-such-topic", 1)] == unknown
    for name, p in (("bad/name", 0), ("", 2)):
        code, message, producers = got[(name, p)]
        assert code == Errors.INVALID_TOPIC_EXCEPTION and message and producers == []
    assert [x.name for x in r.topics] == [t, "more-no-such-topic", "bad/name", ""]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 5), st.integers(0, 5000)), min_size=1, max_size=8))
def test_describe_producers_matches_what_each_producer_appended(wire, appends):
    """Property: for any interleaving of idempotent appends by up to three producers, each
    producer's row has its last sequence (records so far - 1) and its last batch's max
    timestamp; producers that appended nothing are absent."""
    t = new_topic(wire, 1)
    pids = [init_pid(wire) for _ in range(3)]
    base = now_ms() - 100_000
    expected: dict[int, tuple[int, int, int]] = {}
    for who, n, dt in appends:
        pid, epoch = pids[who]
        seq = expected[pid][1] + 1 if pid in expected else 0
        produce(wire, t, 0, n, pid, epoch, seq, base + dt)
        expected[pid] = (epoch, seq + n - 1, base + dt + n - 1)
    (p,) = describe_producers(wire, {t: [0]}).topics[0].partitions
    assert producer_rows(p) == sorted((pid, e, s, ts, -1, -1) for pid, (e, s, ts) in expected.items())


# ------------------------------------------------------------- ListTransactions / Describe


def find_txn_coordinator(wire, tid):
    r = wire.request(ApiKey.FIND_COORDINATOR, 4, FindCoordinatorRequest(key_type=1, coordinator_keys=[tid]))
    assert r.coordinators[0].error_code == 0


def add_partitions(wire, tid, pid, epoch, topic, partitions):
    req = AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic, partitions=partitions)])
    r = wire.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, req)
    assert all(p.partition_error_code == 0 for t in r.results_by_topic_v3_and_below for p in t.results_by_partition)


def end_txn(wire, tid, pid, epoch, commit):
    r = wire.request(ApiKey.END_TXN, 4, EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                                      committed=commit))
    assert r.error_code == 0


def list_txns(wire, v, states=(), pids=(), duration=-1):
    req = ListTransactionsRequest(state_filters=list(states), producer_id_filters=list(pids),
                                  duration_filter=duration if v >= 1 else -1)
    return wire.request(ApiKey.LIST_TRANSACTIONS, v, req)


def describe_txns(wire, tids):
    (v,) = versions(ApiKey.DESCRIBE_TRANSACTIONS)
    return wire.request(ApiKey.DESCRIBE_TRANSACTIONS, v, DescribeTransactionsRequest(transactional_ids=list(tids)))


@pytest.fixture(scope="module")
def txns(broker):
    """Four transactional ids left in Empty, Ongoing (two partitions), CompleteCommit and
    CompleteAbort: {state name: (transactional id, producer id, epoch)} + the data topic."""
    wire = WireClient("127.0.0.1", broker.port)
    try:
        topic = new_topic(wire, 3)
        tag = uuid.uuid4().hex[:6]
        out = {}
        for state in ("Empty", "Ongoing", "CompleteCommit", "CompleteAbort"):
            tid = f"txn-{state}-{tag}"
            find_txn_coordinator(wire, tid)
            pid, epoch = init_pid(wire, tid, timeout_ms=45000)
            if state != "Empty":
                add_partitions(wire, tid, pid, epoch, topic, [2, 0])
                produce(wire, topic, 2, 2, pid, epoch, 0, transactional=True)
            if state.startswith("Complete"):
                end_txn(wire, tid, pid, epoch, commit=state == "CompleteCommit")
            out[state] = (tid, pid, epoch)
        return topic, out
    finally:
        wire.close()


def ours(resp, txns) -> dict[str, tuple[int, str]]:
    tids = {tid for tid, _, _ in txns[1].values()}
    return {s.transactional_id: (s.producer_id, s.transaction_state) for s in resp.transaction_states
            if s.transactional_id in tids}


def test_list_transactions_every_version_lists_states_by_kafka_name(wire, txns):
    _, by_state = txns
    everything = {tid: (pid, state) for state, (tid, pid, _) in by_state.items()}
    for v in versions(ApiKey.LIST_TRANSACTIONS):
        r = list_txns(wire, v)
        assert (r.error_code, r.unknown_state_filters) == (0, [])
        assert ours(r, txns) == everything
        r = list_txns(wire, v, states=["Ongoing", "CompleteAbort"])
        assert ours(r, txns) == {by_state[s][0]: (by_state[s][1], s) for s in ("Ongoing", "CompleteAbort")}
        assert all(s.transaction_state in ("Ongoing", "CompleteAbort") for s in r.transaction_states)
        pid = by_state["CompleteCommit"][1]
        r = list_txns(wire, v, pids=[pid])
        assert [(s.transactional_id, s.producer_id, s.transaction_state) for s in r.transaction_states] == [
            (by_state["CompleteCommit"][0], pid, "CompleteCommit")]
        r = list_txns(wire, v, pids=[pid], states=["Ongoing"])
        assert r.transaction_states == []


def test_list_transactions_unknown_state_filters_are_echoed_and_match_nothing(wire, txns):
    for v in versions(ApiKey.LIST_TRANSACTIONS):
        r = list_txns(wire, v, states=["Ongoing", "Bogus", "ongoing"])
        assert r.error_code == 0
        assert sorted(r.unknown_state_filters) == ["Bogus", "ongoing"]
        assert set(ours(r, txns).values()) == {(txns[1]["Ongoing"][1], "Ongoing")}
        r = list_txns(wire, v, states=["Bogus"])
        assert (r.unknown_state_filters, r.transaction_states) == (["Bogus"], [])


def test_list_transactions_v1_duration_filter(wire, txns):
    _, by_state = txns
    if 1 not in versions(ApiKey.LIST_TRANSACTIONS):
        pytest.fail("ListTransactions v1 (DurationFilter, KIP-994) is expected to be advertised")
    # every transaction here started moments ago; Kafka compares now - start, so the Empty one
    # (start -1: never started) passes any duration filter
    r = list_txns(wire, 1, duration=3_600_000)
    assert ours(r, txns) == {by_state["Empty"][0]: (by_state["Empty"][1], "Empty")}
    r = list_txns(wire, 1, duration=-1)
    assert len(ours(r, txns)) == 4


def test_describe_transactions(wire, txns):
    topic, by_state = txns
    tids = [by_state[s][0] for s in ("Ongoing", "Empty", "CompleteCommit", "CompleteAbort")]
    before = now_ms()
    r = describe_txns(wire, tids + ["txn-never-seen", ""])
    got = {s.transactional_id: s for s in r.transaction_states}
    assert [s.transactional_id for s in r.transaction_states] == tids + ["txn-never-seen", ""]
    ongoing = got[by_state["Ongoing"][0]]
    assert (ongoing.error_code, ongoing.transaction_state, ongoing.producer_id, ongoing.producer_epoch,
            ongoing.transaction_timeout_ms) == (0, "Ongoing", by_state["Ongoing"][1], by_state["Ongoing"][2], 45000)
    assert 0 < ongoing.transaction_start_time_ms <= before
    assert [(t.topic, t.partitions) for t in ongoing.topics] == [(topic, [0, 2])]
    empty = got[by_state["Empty"][0]]
    assert (empty.error_code, empty.transaction_state, empty.transaction_start_time_ms, empty.topics) == (
        0, "Empty", -1, [])
    for state in ("CompleteCommit", "CompleteAbort"):
        done = got[by_state[state][0]]
        assert (done.error_code, done.transaction_state, done.producer_id, done.topics) == (
            0, state, by_state[state][1], [])
    missing = got["txn-never-seen"]
    # an error entry keeps the response's defaults
    assert (missing.error_code, missing.transaction_state, missing.producer_id, missing.producer_epoch,
            missing.transaction_timeout_ms, missing.transaction_start_time_ms, missing.topics) == (
        Errors.TRANSACTIONAL_ID_NOT_FOUND, "", 0, 0, 0, 0, [])
    assert got[""].error_code == Errors.INVALID_REQUEST


def test_describe_producers_shows_the_open_transaction_start_offset(wire, txns):
    topic, by_state = txns
    (p,) = describe_producers(wire, {topic: [2]}).topics[0].partitions
    rows = {row[0]: row for row in producer_rows(p)}
    ongoing_pid = by_state["Ongoing"][1]
    # the ongoing transaction's first batch is still open; the finished ones are closed
    assert rows[ongoing_pid][5] >= 0
    for state in ("CompleteCommit", "CompleteAbort"):
        assert rows[by_state[state][1]][5] == -1
    assert by_state["Empty"][1] not in rows
    assert sorted(r[5] for r in rows.values() if r[5] >= 0) == [rows[ongoing_pid][5]]


def test_transactions_before_the_coordinator_topic_exists():
    # no __transaction_state yet: nothing to list, and no partition coordinates any id
    with EmbeddedBroker(overrides=OVERRIDES) as b:
        wire = WireClient("127.0.0.1", b.port)
        try:
            for v in versions(ApiKey.LIST_TRANSACTIONS):
                r = list_txns(wire, v)
                assert (r.error_code, r.transaction_states) == (0, [])
            (s,) = describe_txns(wire, ["t"]).transaction_states
            assert (s.transactional_id, s.error_code) == ("t", Errors.NOT_COORDINATOR)
        finally:
            wire.close()
