"""Consumer groups with aiokafka 0.14 (JoinGroup v0-v5, SyncGroup v0-v3, Heartbeat v1,
OffsetCommit v2-v3, OffsetFetch v1-v3, FindCoordinator v1): old request versions the
coordinator must still serve exactly as Kafka does.

Members run in their own processes (group_member.py): partitions spread and move when one
joins, leaves (stop(): commit + LeaveGroup) or is SIGKILLed; nothing skipped, nothing twice
in clean handovers; static membership; commits with metadata read back.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from .adapters import DEADLINE_S, aiokafka_common
from .group_helpers import (
    AIOKAFKA_GROUP_CONF,
    CLASSIC_GROUP_APIS,
    GROUP_BROKER_OVERRIDES,
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
    "roundrobin": "aiokafka.coordinator.assignors.roundrobin.RoundRobinPartitionAssignor",
    "sticky": "aiokafka.coordinator.assignors.sticky.sticky_assignor.StickyPartitionAssignor",
}


@pytest.fixture(autouse=True)
def _classic_group_apis(broker):
    require_apis(broker.bootstrap, CLASSIC_GROUP_APIS)


@pytest.fixture
def members():
    started = Members()
    yield started
    started.kill_all()


def conf(strategy: str = "roundrobin", **extra) -> dict:
    return AIOKAFKA_GROUP_CONF | {"partition_assignment_strategy": [ASSIGNORS[strategy]]} | extra


@pytest.mark.parametrize("strategy", ["roundrobin", "sticky"])
def test_partitions_move_on_join_and_clean_leave(broker, topic, members, strategy):
    partitions = 4
    create_topic(broker.bootstrap, topic, partitions)
    group = "g-" + topic
    tps = all_tps(topic, partitions)
    start = lambda name: members.start(  # noqa: E731
        "aiokafka", broker.bootstrap, group, [topic], conf(strategy), name=name
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
    desc = confluent_describe_group(broker.bootstrap, group)
    assert desc.partition_assignor == strategy
    assert len(desc.members) == 2

    b.close()
    wait_for_assignments([a], tps)
    produced = merge(
        produced, produce_to_partitions(broker.bootstrap, topic, range(partitions), 4, "three")
    )
    wait_all_consumed([a, b], topic, produced)
    assert_none_skipped([a, b], topic, produced)
    assert_none_twice([a, b], topic)
    assert not (a.errors() or b.errors()), members.describe()
    a.close()


def test_member_killed_partitions_move_after_session_timeout(broker, topic, members):
    partitions = 4
    create_topic(broker.bootstrap, topic, partitions)
    group = "g-" + topic
    tps = all_tps(topic, partitions)
    short = conf(session_timeout_ms=3000)
    a = members.start("aiokafka", broker.bootstrap, group, [topic], short, name="A")
    wait_for_assignments([a], tps)
    b = members.start("aiokafka", broker.bootstrap, group, [topic], short, name="B")
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
        "aiokafka",
        broker.bootstrap,
        group,
        [topic],
        static | {"group_instance_id": "aio-a"},
        name="A",
    )
    wait_for_assignments([a], tps)
    b = members.start(
        "aiokafka",
        broker.bootstrap,
        group,
        [topic],
        static | {"group_instance_id": "aio-b"},
        name="B",
    )
    split = wait_for_assignments([a, b], tps)
    a_events = len(a.rebalance_events())
    b.kill()
    b2 = members.start(
        "aiokafka",
        broker.bootstrap,
        group,
        [topic],
        static | {"group_instance_id": "aio-b"},
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
    assert sorted(m.group_instance_id for m in desc.members) == ["aio-a", "aio-b"]
    a.close()
    b2.close()


def test_commit_with_metadata_and_committed(broker, topic):
    """OffsetCommit v2/v3 and OffsetFetch v1-v3 (aiokafka's only versions): offsets and
    metadata strings round-trip; the group is Empty afterwards."""
    create_topic(broker.bootstrap, topic, 2)
    produce_to_partitions(broker.bootstrap, topic, range(2), 6, "aio")
    group = "g-" + topic
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)

    async def run() -> tuple:
        consumer = AIOKafkaConsumer(
            **aiokafka_common(broker.bootstrap), group_id=group, enable_auto_commit=False
        )
        await asyncio.wait_for(consumer.start(), DEADLINE_S)
        try:
            consumer.assign([tp0, tp1])
            before = await asyncio.wait_for(consumer.committed(tp0), DEADLINE_S)
            await asyncio.wait_for(
                consumer.commit(
                    {tp0: OffsetAndMetadata(4, "aio \u00fc"), tp1: OffsetAndMetadata(6, "")}
                ),
                DEADLINE_S,
            )
            after = (
                await asyncio.wait_for(consumer.committed(tp0), DEADLINE_S),
                await asyncio.wait_for(consumer.committed(tp1), DEADLINE_S),
            )
        finally:
            await asyncio.wait_for(consumer.stop(), DEADLINE_S)
        # A fresh consumer starts from the commit. (The first one cannot be asked: right after
        # assign() it found no committed offset and aiokafka resets the position to "latest"
        # in the background, racing the commit -- a client-side race, seen in FINDINGS.md.)
        resumed = AIOKafkaConsumer(
            **aiokafka_common(broker.bootstrap), group_id=group, enable_auto_commit=False
        )
        await asyncio.wait_for(resumed.start(), DEADLINE_S)
        try:
            resumed.assign([tp0, tp1])
            position = await asyncio.wait_for(resumed.position(tp0), DEADLINE_S)
            record = await asyncio.wait_for(resumed.getone(tp0), DEADLINE_S)
            return before, after, position, record
        finally:
            await asyncio.wait_for(resumed.stop(), DEADLINE_S)

    before, after, position, record = asyncio.run(run())
    assert before is None
    assert after == (4, 6)
    assert position == 4
    assert (record.offset, record.value) == (4, b"aio-0-4")
    assert kafka_python_committed(broker.bootstrap, group) == {
        (topic, 0): (4, "aio \u00fc"),
        (topic, 1): (6, ""),
    }
    from confluent_kafka import ConsumerGroupState

    assert confluent_describe_group(broker.bootstrap, group).state == ConsumerGroupState.EMPTY
