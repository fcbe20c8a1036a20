"""Consumer groups with kafka-python 3.0 (JoinGroup v7, SyncGroup v5, Heartbeat v4,
LeaveGroup v5, OffsetCommit v8, OffsetFetch v8, FindCoordinator v6), and one group mixing
kafka-python, confluent-kafka and aiokafka members.

Members run in their own processes (group_member.py); partitions spread over them and move
when one joins, leaves (close(): commit + LeaveGroup) or is SIGKILLed (session timeout). The
group never skips a record and, in clean handovers, never consumes one twice.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import TopicPartition as ConfluentTP
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from .adapters import confluent_consumer, kafka_python_common
from .group_helpers import (
    AIOKAFKA_GROUP_CONF,
    CLASSIC_GROUP_APIS,
    CONFLUENT_GROUP_CONF,
    GROUP_BROKER_OVERRIDES,
    KAFKA_PYTHON_GROUP_CONF,
    Members,
    all_tps,
    assert_none_skipped,
    assert_none_twice,
    confluent_describe_group,
    create_topic,
    kafka_python_committed,
    merge,
    produce_to_partitions,
    require_apis,
    wait_all_consumed,
    wait_for_assignments,
    wait_until,
)

BROKER_OVERRIDES = GROUP_BROKER_OVERRIDES
ASSIGNORS = {
    "range": "kafka.coordinator.assignors.range.RangePartitionAssignor",
    "roundrobin": "kafka.coordinator.assignors.roundrobin.RoundRobinPartitionAssignor",
    "cooperative-sticky": "kafka.coordinator.assignors.cooperative_sticky.CooperativeStickyAssignor",
}


@pytest.fixture(autouse=True)
def _classic_group_apis(broker):
    require_apis(broker.bootstrap, CLASSIC_GROUP_APIS)


@pytest.fixture
def members():
    started = Members()
    yield started
    started.kill_all()


def conf(strategy: str = "range", **extra) -> dict:
    return (
        KAFKA_PYTHON_GROUP_CONF | {"partition_assignment_strategy": [ASSIGNORS[strategy]]} | extra
    )


@pytest.mark.parametrize("strategy", ["roundrobin", "cooperative-sticky"])
def test_partitions_move_on_join_and_clean_leave(broker, topic, members, strategy):
    partitions = 4
    create_topic(broker.bootstrap, topic, partitions)
    group = "g-" + topic
    tps = all_tps(topic, partitions)
    start = lambda name: members.start(  # noqa: E731
        "kafka-python", broker.bootstrap, group, [topic], conf(strategy), name=name
    )
    a = start("A")
    wait_for_assignments([a], tps)
    produced = produce_to_partitions(broker.bootstrap, topic, range(partitions), 4, "one")
    wait_all_consumed([a], topic, produced)

    b = start("B")
    split = wait_for_assignments([a, b], tps)
    assert sorted(len(s) for s in split.values()) == [2, 2], split
    produced = merge(
        produced, produce_to_partitions(broker.bootstrap, topic, range(partitions), 4, "two")
    )
    wait_all_consumed([a, b], topic, produced)

    b.close()
    wait_for_assignments([a], tps)
    produced = merge(
        produced, produce_to_partitions(broker.bootstrap, topic, range(partitions), 4, "three")
    )
    wait_all_consumed([a, b], topic, produced)
    assert_none_skipped([a, b], topic, produced)
    assert_none_twice([a, b], topic)
    assert not (a.errors() or b.errors()), members.describe()
    if strategy == "cooperative-sticky":
        # Incremental: A gave up only what B took, never everything.
        revoked = [e for e in a.rebalance_events() if e["ev"] == "revoked" and e["tps"]]
        assert revoked and all(len(e["tps"]) < partitions for e in revoked), a.rebalance_events()
    a.close()


def test_member_killed_partitions_move_after_session_timeout(broker, topic, members):
    partitions = 4
    create_topic(broker.bootstrap, topic, partitions)
    group = "g-" + topic
    tps = all_tps(topic, partitions)
    short = conf(session_timeout_ms=3000)
    a = members.start("kafka-python", broker.bootstrap, group, [topic], short, name="A")
    wait_for_assignments([a], tps)
    b = members.start("kafka-python", broker.bootstrap, group, [topic], short, name="B")
    wait_for_assignments([a, b], tps)
    produced = produce_to_partitions(broker.bootstrap, topic, range(partitions), 5, "before")
    wait_all_consumed([a, b], topic, produced)
    b.kill()
    produced = merge(
        produced, produce_to_partitions(broker.bootstrap, topic, range(partitions), 5, "after")
    )
    wait_for_assignments([a], tps, timeout=30)
    wait_all_consumed([a, b], topic, produced)
    assert_none_skipped([a, b], topic, produced)
    a.close()


def test_static_member_restart_without_rebalance(broker, topic, members):
    partitions = 4
    create_topic(broker.bootstrap, topic, partitions)
    group = "g-" + topic
    tps = all_tps(topic, partitions)
    static = conf(session_timeout_ms=10_000)
    a = members.start(
        "kafka-python",
        broker.bootstrap,
        group,
        [topic],
        static | {"group_instance_id": "kp-a"},
        name="A",
    )
    wait_for_assignments([a], tps)
    b = members.start(
        "kafka-python",
        broker.bootstrap,
        group,
        [topic],
        static | {"group_instance_id": "kp-b"},
        name="B",
    )
    split = wait_for_assignments([a, b], tps)
    a_events = len(a.rebalance_events())
    b.kill()
    b2 = members.start(
        "kafka-python",
        broker.bootstrap,
        group,
        [topic],
        static | {"group_instance_id": "kp-b"},
        name="B2",
    )
    wait_until(lambda: b2.assignment() == split["B"], 20, what="B2 to get B's partitions back")
    produced = produce_to_partitions(broker.bootstrap, topic, range(partitions), 3, "after")
    wait_all_consumed([a, b2], topic, produced)
    deadline = time.monotonic() + 3.0  # several heartbeat intervals with no rebalance
    while time.monotonic() < deadline:
        assert len(a.rebalance_events()) == a_events, f"A saw a rebalance: {a.rebalance_events()}"
        time.sleep(0.1)
    desc = confluent_describe_group(broker.bootstrap, group)
    assert sorted(m.group_instance_id for m in desc.members) == ["kp-a", "kp-b"]
    a.close()
    b2.close()


def test_commit_with_metadata_and_committed(broker, topic):
    """commit() / commit_async() with OffsetAndMetadata; committed(metadata=True) reads them
    back (OffsetCommit v8 / OffsetFetch v8); another client sees the same offsets."""
    create_topic(broker.bootstrap, topic, 2)
    produce_to_partitions(broker.bootstrap, topic, range(2), 5, "kp")
    group = "g-" + topic
    consumer = KafkaConsumer(
        **kafka_python_common(broker.bootstrap), group_id=group, enable_auto_commit=False
    )
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    try:
        consumer.assign([tp0, tp1])
        assert consumer.committed(tp0) is None
        consumer.commit({tp0: OffsetAndMetadata(2, "kafka-python \u2713", -1)})
        # With nothing fetched yet, the position comes from the committed offset.
        assert consumer.position(tp0) == 2
        done: list = []
        consumer.commit_async(
            {tp1: OffsetAndMetadata(4, "async", -1)},
            callback=lambda offsets, resp: done.append(resp),
        )
        wait_until(
            lambda: consumer.poll(timeout_ms=50) is not None and done, 15, what="commit_async"
        )
        assert not isinstance(done[0], Exception), done[0]
        got0 = consumer.committed(tp0, metadata=True)
        got1 = consumer.committed(tp1, metadata=True)
        assert (got0.offset, got0.metadata) == (2, "kafka-python \u2713")
        assert (got1.offset, got1.metadata) == (4, "async")
    finally:
        consumer.close(autocommit=False)
    assert kafka_python_committed(broker.bootstrap, group) == {
        (topic, 0): (2, "kafka-python \u2713"),
        (topic, 1): (4, "async"),
    }
    # librdkafka reads the offsets too (not the metadata: see kafka_python_committed).
    other = confluent_consumer(broker.bootstrap, **{"group.id": group})
    try:
        got = other.committed([ConfluentTP(topic, 0), ConfluentTP(topic, 1)], timeout=10)
        assert [(tp.offset, tp.error) for tp in got] == [(2, None), (4, None)]
    finally:
        other.close()


def test_mixed_clients_share_one_group(broker, topic, members):
    """confluent-kafka, kafka-python and aiokafka members agree on the roundrobin protocol;
    the coordinator picks it, each gets two partitions; one leaves, one dies; the last owns
    everything and the group skipped nothing."""
    partitions = 6
    create_topic(broker.bootstrap, topic, partitions)
    group = "g-" + topic
    tps = all_tps(topic, partitions)
    short = {"session": 3000}
    c = members.start(
        "confluent",
        broker.bootstrap,
        group,
        [topic],
        CONFLUENT_GROUP_CONF
        | {"partition.assignment.strategy": "roundrobin", "session.timeout.ms": short["session"]},
        name="confluent",
    )
    wait_for_assignments([c], tps)
    k = members.start(
        "kafka-python",
        broker.bootstrap,
        group,
        [topic],
        conf("roundrobin", session_timeout_ms=short["session"]),
        name="kafka-python",
    )
    a = members.start(
        "aiokafka",
        broker.bootstrap,
        group,
        [topic],
        AIOKAFKA_GROUP_CONF | {"session_timeout_ms": short["session"]},
        name="aiokafka",
    )
    split = wait_for_assignments([c, k, a], tps, timeout=40)
    assert sorted(len(s) for s in split.values()) == [2, 2, 2], split
    desc = confluent_describe_group(broker.bootstrap, group)
    assert desc.partition_assignor == "roundrobin"
    assert len(desc.members) == 3
    produced = produce_to_partitions(broker.bootstrap, topic, range(partitions), 3, "one")
    wait_all_consumed([c, k, a], topic, produced)

    k.close()
    wait_for_assignments([c, a], tps, timeout=40)
    produced = merge(
        produced, produce_to_partitions(broker.bootstrap, topic, range(partitions), 3, "two")
    )
    wait_all_consumed([c, k, a], topic, produced)
    assert_none_twice([c, k, a], topic)

    a.kill()
    wait_for_assignments([c], tps, timeout=40)
    produced = merge(
        produced, produce_to_partitions(broker.bootstrap, topic, range(partitions), 3, "three")
    )
    wait_all_consumed([c, k, a], topic, produced)
    assert_none_skipped([c, k, a], topic, produced)
    c.close()
