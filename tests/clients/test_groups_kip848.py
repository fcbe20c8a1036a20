"""KIP-848, the consumer rebalance protocol, with librdkafka 2.16's group.protocol=consumer.

The broker runs the assignment (group.remote.assignor = the server-side "uniform" or "range"
assignor), members talk ConsumerGroupHeartbeat (v1; librdkafka sends nothing else and, without
it advertised, loops on FindCoordinator silently — CLIENTS.md pitfall 12), admins read
ConsumerGroupDescribe; assignments are by topic id; rebalances are incremental (a member keeps
its partitions while others join); a member that leaves sends member_epoch -1 and one that
dies is fenced after group.consumer.session.timeout.ms.
"""

from __future__ import annotations

import pytest
from confluent_kafka import ConsumerGroupState, ConsumerGroupType

from .adapters import confluent_admin
from .group_helpers import (
    GROUP_BROKER_OVERRIDES,
    KIP848_APIS,
    Members,
    all_tps,
    assert_never_emptied,
    assert_none_skipped,
    assert_none_twice,
    confluent_describe_group,
    create_topic,
    merge,
    produce_to_partitions,
    require_apis,
    wait_all_consumed,
    wait_committed,
    wait_for_assignments,
    wait_until,
)

# Kafka's KIP-848 defaults are 45 s sessions and 5 s heartbeats, with minima of the same
# size; these keep "member died" to seconds.
BROKER_OVERRIDES = GROUP_BROKER_OVERRIDES | {
    "group.consumer.min.session.timeout.ms": "1000",
    "group.consumer.session.timeout.ms": "4000",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.heartbeat.interval.ms": "500",
}


@pytest.fixture(autouse=True)
def _kip848_apis(broker):
    require_apis(broker.bootstrap, KIP848_APIS | {8: "OffsetCommit", 9: "OffsetFetch"}, {68: 1})


@pytest.fixture
def members():
    started = Members()
    yield started
    started.kill_all()


def conf(assignor: str | None = None) -> dict:
    c = {"group.protocol": "consumer", "max.poll.interval.ms": 30_000}
    if assignor:
        c["group.remote.assignor"] = assignor
    return c


def described_assignments(desc) -> dict[str, frozenset]:
    return {
        m.member_id: frozenset((tp.topic, tp.partition) for tp in m.assignment.topic_partitions)
        for m in desc.members
    }


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_server_side_assignment_join_and_leave(broker, topic, members, assignor):
    partitions = 4
    create_topic(broker.bootstrap, topic, partitions)
    group = "g-" + topic
    tps = all_tps(topic, partitions)
    a = members.start("confluent", broker.bootstrap, group, [topic], conf(assignor), name="A")
    wait_for_assignments([a], tps)
    produced = produce_to_partitions(broker.bootstrap, topic, range(partitions), 4, "one")
    wait_all_consumed([a], topic, produced)

    b = members.start("confluent", broker.bootstrap, group, [topic], conf(assignor), name="B")
    split = wait_for_assignments([a, b], tps)
    assert sorted(len(s) for s in split.values()) == [2, 2], split
    if assignor == "range":
        assert sorted(sorted(p for _, p in s) for s in split.values()) == [[0, 1], [2, 3]], split
    # Incremental: A gave B only what B took; it never had to give up all.
    assert_never_emptied(a)
    produced = merge(
        produced, produce_to_partitions(broker.bootstrap, topic, range(partitions), 4, "two")
    )
    wait_all_consumed([a, b], topic, produced)

    desc = wait_until(
        lambda: (
            (d := confluent_describe_group(broker.bootstrap, group)).state
            == ConsumerGroupState.STABLE
            and d
        ),
        15,
        what="ConsumerGroupDescribe to report Stable",
    )
    assert desc.type == ConsumerGroupType.CONSUMER
    assert desc.partition_assignor == assignor
    assert desc.is_simple_consumer_group is False
    assert sorted(described_assignments(desc).values(), key=sorted) == sorted(
        split.values(), key=sorted
    )
    for m in desc.members:
        assert m.target_assignment is not None
        assert {(tp.topic, tp.partition) for tp in m.target_assignment.topic_partitions} == {
            (tp.topic, tp.partition) for tp in m.assignment.topic_partitions
        }
    admin = confluent_admin(broker.bootstrap)
    listed = admin.list_consumer_groups(request_timeout=15).result(timeout=20)
    mine = [g for g in listed.valid if g.group_id == group]
    assert len(mine) == 1 and mine[0].type == ConsumerGroupType.CONSUMER, listed.valid

    b.close()  # ConsumerGroupHeartbeat with member_epoch -1
    wait_for_assignments([a], tps)
    produced = merge(
        produced, produce_to_partitions(broker.bootstrap, topic, range(partitions), 4, "three")
    )
    wait_all_consumed([a, b], topic, produced)
    assert_none_skipped([a, b], topic, produced)
    assert_none_twice([a, b], topic)
    assert not (a.errors() or b.errors()), members.describe()
    a.close()
    wait_committed(broker.bootstrap, group, topic, {p: 12 for p in range(partitions)})
    desc = confluent_describe_group(broker.bootstrap, group)
    assert desc.state == ConsumerGroupState.EMPTY and desc.members == []


def test_member_killed_is_fenced_after_session_timeout(broker, topic, members):
    partitions = 4
    create_topic(broker.bootstrap, topic, partitions)
    group = "g-" + topic
    tps = all_tps(topic, partitions)
    a = members.start("confluent", broker.bootstrap, group, [topic], conf(), name="A")
    wait_for_assignments([a], tps)
    b = members.start("confluent", broker.bootstrap, group, [topic], conf(), name="B")
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
    desc = wait_until(
        lambda: len((d := confluent_describe_group(broker.bootstrap, group)).members) == 1 and d,
        15,
        what="the fenced member to leave the description",
    )
    assert desc.type == ConsumerGroupType.CONSUMER
    a.close()


def test_consumer_protocol_commits_and_next_member_resumes(broker, topic, members):
    """OffsetCommit/OffsetFetch with member epochs: a member consumes and leaves; the next
    one starts from its commits, reading nothing twice and skipping nothing."""
    create_topic(broker.bootstrap, topic, 2)
    group = "g-" + topic
    tps = all_tps(topic, 2)
    first = produce_to_partitions(broker.bootstrap, topic, range(2), 5, "first")
    a = members.start("confluent", broker.bootstrap, group, [topic], conf(), name="A")
    wait_for_assignments([a], tps)
    wait_all_consumed([a], topic, first)
    a.close()
    wait_committed(broker.bootstrap, group, topic, {0: 5, 1: 5})

    second = produce_to_partitions(broker.bootstrap, topic, range(2), 3, "second")
    b = members.start("confluent", broker.bootstrap, group, [topic], conf(), name="B")
    wait_for_assignments([b], tps)
    wait_all_consumed([b], topic, second)
    assert_none_twice([a, b], topic)
    assert_none_skipped([a, b], topic, merge(first, second))
    b.close()
    wait_committed(broker.bootstrap, group, topic, {0: 8, 1: 8})
