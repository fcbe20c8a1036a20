"""DescribeTopicPartitions (75) v0 on the wire (KIP-966), against Kafka's
DescribeTopicPartitionsRequestHandler / KRaftMetadataCache.describeTopicResponse rules:
sorted de-duplicated topics, the cursor, the partition budget (capped by
`max.request.partition.size.limit`), next_cursor, unknown/invalid topics, the invalid-cursor
error response and authorized operations.

The module's broker caps the budget at 6 (max.request.partition.size.limit=6).
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybroker.acl import AUTHORIZED_OPERATIONS_OMITTED, TOPIC_OPERATIONS
from pybroker.config import BrokerConfig, ConfigError
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    CreateTopicsRequest,
    DescribeTopicPartitionsRequest,
    FindCoordinatorRequest,
    MetadataRequest,
)
from pybroker.testing import EmbeddedBroker

from .wire import WireClient

CAP = 6
Req = DescribeTopicPartitionsRequest


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(overrides={"max.request.partition.size.limit": CAP,
                                   "offsets.topic.num.partitions": 2}) as b:
        yield b


def create(wire: WireClient, name: str, partitions: int) -> bytes:
    resp = wire.request(ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1)], timeout_ms=5000))
    assert resp.topics[0].error_code == 0, resp
    return resp.topics[0].topic_id


def dtp(wire: WireClient, topics: list[str], limit: int = 2000, cursor: tuple[str, int] | None = None):
    return wire.request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, Req(
        topics=[Req.TopicRequest(name=t) for t in topics], response_partition_limit=limit,
        cursor=None if cursor is None else Req.Cursor(topic_name=cursor[0], partition_index=cursor[1])))


def summary(resp) -> tuple[list[tuple[str, int, list[int]]], tuple[str, int] | None]:
    nc = resp.next_cursor
    return ([(t.name, t.error_code, [p.partition_index for p in t.partitions]) for t in resp.topics],
            None if nc is None else (nc.topic_name, nc.partition_index))


def prefix() -> str:
    return "dtp-" + uuid.uuid4().hex[:8] + "-"


def test_a_topic_is_described_like_kafka_describes_it(wire):
    name = prefix() + "t"
    tid = create(wire, name, 3)
    resp = dtp(wire, [name])
    assert resp.next_cursor is None and resp.throttle_time_ms == 0
    (t,) = resp.topics
    assert (t.error_code, t.name, t.topic_id, t.is_internal, t.topic_authorized_operations) == (
        0, name, tid, False, TOPIC_OPERATIONS)
    assert [(p.error_code, p.partition_index, p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes,
             p.eligible_leader_replicas, p.last_known_elr, p.offline_replicas) for p in t.partitions] == [
        (0, i, 1, 0, [1], [1], [], [], []) for i in range(3)]


def test_unknown_and_invalid_topics(wire):
    p = prefix()
    create(wire, p + "b", 1)
    resp = dtp(wire, [p + "c-missing", p + "b", "bad/name", p + "c-missing"])
    assert summary(resp) == ([("bad/name", Errors.INVALID_TOPIC_EXCEPTION, []),
                              (p + "b", 0, [0]),
                              (p + "c-missing", Errors.UNKNOWN_TOPIC_OR_PARTITION, [])], None)
    for t in resp.topics:
        assert t.topic_authorized_operations == TOPIC_OPERATIONS  # errors included, as Kafka
        if t.error_code:
            assert (t.topic_id, t.is_internal) == (bytes(16), False)


def test_named_topics_are_sorted_and_deduplicated(wire):
    p = prefix()
    for n, count in (("c", 1), ("a", 2), ("b", 1)):
        create(wire, p + n, count)
    assert summary(dtp(wire, [p + "c", p + "a", p + "b", p + "a"])) == (
        [(p + "a", 0, [0, 1]), (p + "b", 0, [0]), (p + "c", 0, [0])], None)


def test_empty_list_is_every_topic_sorted_with_internal_ones_flagged(wire):
    r = wire.request(ApiKey.FIND_COORDINATOR, 6, FindCoordinatorRequest(key_type=0, coordinator_keys=["g"]))
    assert r.coordinators[0].error_code == 0
    p = prefix()
    create(wire, p + "x", 1)
    everything = sorted(t.name for t in wire.request(ApiKey.METADATA, 12, MetadataRequest(
        topics=None, allow_auto_topic_creation=False)).topics)
    seen: list[str] = []
    cursor = None
    for _ in range(1000):
        resp = dtp(wire, [], limit=CAP, cursor=cursor)
        for t in resp.topics:
            assert t.error_code == 0
            assert t.is_internal == (t.name == "__consumer_offsets")
            if not seen or seen[-1] != t.name:
                seen.append(t.name)
        if resp.next_cursor is None:
            break
        cursor = (resp.next_cursor.topic_name, resp.next_cursor.partition_index)
    assert seen == everything
    assert "__consumer_offsets" in seen and p + "x" in seen


def test_the_limit_is_capped_by_max_request_partition_size_limit(wire):
    name = prefix() + "big"
    create(wire, name, CAP + 3)
    assert summary(dtp(wire, [name], limit=100)) == ([(name, 0, list(range(CAP)))], (name, CAP))
    assert summary(dtp(wire, [name], limit=4)) == ([(name, 0, [0, 1, 2, 3])], (name, 4))
    assert summary(dtp(wire, [name], limit=100, cursor=(name, CAP))) == ([(name, 0, [6, 7, 8])], None)


def test_budget_ending_at_a_topic_boundary_points_at_the_next_topic(wire):
    p = prefix()
    create(wire, p + "a", 2)
    create(wire, p + "b", 2)
    assert summary(dtp(wire, [p + "a", p + "b"], limit=2)) == ([(p + "a", 0, [0, 1])], (p + "b", 0))
    # the next topic need not exist (Kafka: the cursor "does not mean this topic exists")
    assert summary(dtp(wire, [p + "a", p + "zz-missing"], limit=2)) == (
        [(p + "a", 0, [0, 1])], (p + "zz-missing", 0))
    # an unknown topic costs no budget
    assert summary(dtp(wire, [p + "a", p + "aa-missing", p + "b"], limit=3)) == (
        [(p + "a", 0, [0, 1]), (p + "aa-missing", Errors.UNKNOWN_TOPIC_OR_PARTITION, []), (p + "b", 0, [0])],
        (p + "b", 1))


def test_cursor_starts_its_topic_mid_way_and_drops_earlier_names(wire):
    p = prefix()
    create(wire, p + "a", 2)
    create(wire, p + "b", 4)
    create(wire, p + "c", 1)
    assert summary(dtp(wire, [p + "c", p + "a", p + "b"], cursor=(p + "b", 2))) == (
        [(p + "b", 0, [2, 3]), (p + "c", 0, [0])], None)
    # a cursor index past the end gives the topic with no partitions
    assert summary(dtp(wire, [p + "b"], cursor=(p + "b", 9))) == ([(p + "b", 0, [])], None)
    # with every topic asked for, the cursor's topic need not exist
    resp = dtp(wire, [], cursor=(p + "bb", 5), limit=CAP)
    assert [t.name for t in resp.topics][:1] == [p + "c"]


def test_a_cursor_outside_the_named_topics_is_an_invalid_request(wire):
    p = prefix()
    create(wire, p + "a", 1)
    create(wire, p + "b", 1)
    for cursor in ((p + "zz", 0), (p + "a0", 0)):
        resp = dtp(wire, [p + "b", p + "a", p + "b"], cursor=cursor)
        assert summary(resp) == ([(p + "b", Errors.INVALID_REQUEST, []), (p + "a", Errors.INVALID_REQUEST, []),
                                  (p + "b", Errors.INVALID_REQUEST, [])], None)
        for t in resp.topics:  # DescribeTopicPartitionsRequest.getErrorResponse leaves the defaults
            assert (t.topic_id, t.is_internal, t.topic_authorized_operations) == (
                bytes(16), False, AUTHORIZED_OPERATIONS_OMITTED)


def test_zero_and_negative_limits(wire):
    p = prefix()
    create(wire, p + "a", 1)
    # Kafka's loop: no budget at the first topic -> cursor there; a negative budget matches neither branch
    assert summary(dtp(wire, [p + "a"], limit=0)) == ([], (p + "a", 0))
    assert summary(dtp(wire, [p + "a"], limit=-1)) == ([], None)


def test_max_request_partition_size_limit_is_validated_like_kafka():
    assert BrokerConfig({"node.id": "1"})["max.request.partition.size.limit"] == 2000
    with pytest.raises(ConfigError, match="Invalid value 0 for configuration max.request.partition.size.limit: "
                                          "Value must be at least 1"):
        BrokerConfig({"node.id": "1", "max.request.partition.size.limit": "0"})


# ---------------------------------------------------------------------------------- property

_TOPIC_SIZES = {"a": 1, "b": 5, "c": 2, "d": 7, "e": 3}


@pytest.fixture(scope="module")
def paged_topics(broker):
    w = WireClient("127.0.0.1", broker.port)
    p = prefix()
    for n, count in _TOPIC_SIZES.items():
        create(w, p + n, count)
    w.close()
    return p


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(limit=st.integers(min_value=1, max_value=12),
       chosen=st.lists(st.sampled_from(sorted(_TOPIC_SIZES)), min_size=1, unique=True),
       shuffle=st.randoms(use_true_random=False))
def test_paging_with_any_limit_yields_each_partition_once_in_order(wire, paged_topics, limit, chosen, shuffle):
    p = paged_topics
    names = [p + n for n in chosen]
    shuffle.shuffle(names)
    expected = [(name, i) for name in sorted(names) for i in range(_TOPIC_SIZES[name[len(p):]])]
    got: list[tuple[str, int]] = []
    cursor = None
    for _ in range(len(expected) + len(names) + 1):
        resp = dtp(wire, names, limit=limit, cursor=cursor)
        page = [(t.name, part.partition_index) for t in resp.topics for part in t.partitions]
        assert 0 < len(page) <= min(limit, CAP) or (not page and resp.next_cursor is not None)
        got.extend(page)
        if resp.next_cursor is None:
            break
        cursor = (resp.next_cursor.topic_name, resp.next_cursor.partition_index)
        # the same topic list each time: the broker drops the names before the cursor's
    else:
        pytest.fail("paging did not end")
    assert got == expected
