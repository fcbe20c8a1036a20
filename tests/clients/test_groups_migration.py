"""KIP-848 online migration (group.consumer.migration.policy=bidirectional, Kafka 4's default)
with real clients: a classic group is upgraded when a group.protocol=consumer member joins it,
its classic members stay in the consumer group (JoinGroup/SyncGroup/Heartbeat against the
server-side assignment), and when the consumer-protocol member leaves the group is downgraded
back to a classic group that rebalances.

The first test is confluent-kafka-python's upstream integration test
(test_consumer_group_migration: classic + consumer members for roundrobin, range and
cooperative-sticky, group type read with AdminClient.describe_consumer_groups); the second
puts a kafka-python / aiokafka classic member next to a librdkafka consumer-protocol member.
Members run in their own processes (group_member.py); every wait is bounded.
"""

from __future__ import annotations

import pytest
from confluent_kafka import ConsumerGroupType

from .group_helpers import (
    AIOKAFKA_GROUP_CONF,
    CLASSIC_GROUP_APIS,
    CONFLUENT_GROUP_CONF,
    GROUP_BROKER_OVERRIDES,
    KAFKA_PYTHON_GROUP_CONF,
    KIP848_APIS,
    Members,
    all_tps,
    assert_none_skipped,
    confluent_describe_group,
    create_topic,
    merge,
    produce_to_partitions,
    require_apis,
    wait_all_consumed,
    wait_for_assignments,
    wait_until,
)

BROKER_OVERRIDES = GROUP_BROKER_OVERRIDES | {
    "group.consumer.min.session.timeout.ms": "1000",
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.heartbeat.interval.ms": "500",
}
PARTITIONS = 10


@pytest.fixture(autouse=True)
def _group_apis(broker):
    require_apis(broker.bootstrap, CLASSIC_GROUP_APIS | KIP848_APIS, {68: 1})


@pytest.fixture
def members():
    started = Members()
    yield started
    started.kill_all()


def wait_group_type(bootstrap: str, group: str, want) -> None:
    wait_until(
        lambda: confluent_describe_group(bootstrap, group).type == want,
        20,
        what=f"describe_consumer_groups to report {want}",
    )


def each_has(split: dict, n: int) -> bool:
    return sorted(len(s) for s in split.values()) == [n] * len(split)


@pytest.mark.parametrize("strategy", ["roundrobin", "range", "cooperative-sticky"])
def test_consumer_group_migration(broker, topic, members, strategy):
    create_topic(broker.bootstrap, topic, PARTITIONS)
    group = "g-" + topic
    tps = all_tps(topic, PARTITIONS)
    classic_conf = CONFLUENT_GROUP_CONF | {
        "group.protocol": "classic",
        "partition.assignment.strategy": strategy,
    }
    consumer_conf = {"group.protocol": "consumer", "max.poll.interval.ms": 30_000}

    consumer = members.start(
        "confluent", broker.bootstrap, group, [topic], classic_conf, name="classic"
    )
    wait_for_assignments([consumer], tps)
    wait_group_type(broker.bootstrap, group, ConsumerGroupType.CLASSIC)
    produced = produce_to_partitions(broker.bootstrap, topic, range(PARTITIONS), 2, "one")
    wait_all_consumed([consumer], topic, produced)

    consumer2 = members.start(
        "confluent", broker.bootstrap, group, [topic], consumer_conf, name="consumer"
    )
    split = wait_for_assignments([consumer, consumer2], tps, timeout=40)
    assert each_has(split, 5), split
    wait_group_type(broker.bootstrap, group, ConsumerGroupType.CONSUMER)
    desc = confluent_describe_group(broker.bootstrap, group)
    assert len(desc.members) == 2
    produced = merge(
        produced, produce_to_partitions(broker.bootstrap, topic, range(PARTITIONS), 2, "two")
    )
    wait_all_consumed([consumer, consumer2], topic, produced)

    consumer2.close()
    wait_for_assignments([consumer], tps, timeout=40)
    wait_group_type(broker.bootstrap, group, ConsumerGroupType.CLASSIC)
    produced = merge(
        produced, produce_to_partitions(broker.bootstrap, topic, range(PARTITIONS), 2, "three")
    )
    wait_all_consumed([consumer, consumer2], topic, produced)
    assert_none_skipped([consumer, consumer2], topic, produced)
    assert not (consumer.errors() or consumer2.errors()), members.describe()
    consumer.close()


CLASSIC_CLIENTS = {
    "kafka-python": KAFKA_PYTHON_GROUP_CONF
    | {
        "partition_assignment_strategy": [
            "kafka.coordinator.assignors.roundrobin.RoundRobinPartitionAssignor"
        ]
    },
    "aiokafka": AIOKAFKA_GROUP_CONF
    | {
        "partition_assignment_strategy": [
            "aiokafka.coordinator.assignors.roundrobin.RoundRobinPartitionAssignor"
        ]
    },
}


@pytest.mark.parametrize("client", sorted(CLASSIC_CLIENTS))
def test_python_classic_member_shares_a_group_with_a_librdkafka_consumer_member(
    broker, topic, members, client
):
    partitions = 4
    create_topic(broker.bootstrap, topic, partitions)
    group = "g-" + topic
    tps = all_tps(topic, partitions)
    classic = members.start(
        client, broker.bootstrap, group, [topic], CLASSIC_CLIENTS[client], name=client
    )
    wait_for_assignments([classic], tps)
    produced = produce_to_partitions(broker.bootstrap, topic, range(partitions), 3, "one")
    wait_all_consumed([classic], topic, produced)

    modern = members.start(
        "confluent",
        broker.bootstrap,
        group,
        [topic],
        {"group.protocol": "consumer", "max.poll.interval.ms": 30_000},
        name="librdkafka",
    )
    split = wait_for_assignments([classic, modern], tps, timeout=40)
    assert each_has(split, 2), split
    wait_group_type(broker.bootstrap, group, ConsumerGroupType.CONSUMER)
    produced = merge(
        produced, produce_to_partitions(broker.bootstrap, topic, range(partitions), 3, "two")
    )
    wait_all_consumed([classic, modern], topic, produced)

    modern.close()
    wait_for_assignments([classic], tps, timeout=40)
    wait_group_type(broker.bootstrap, group, ConsumerGroupType.CLASSIC)
    produced = merge(
        produced, produce_to_partitions(broker.bootstrap, topic, range(partitions), 3, "three")
    )
    wait_all_consumed([classic, modern], topic, produced)
    assert_none_skipped([classic, modern], topic, produced)
    assert not (classic.errors() or modern.errors()), members.describe()
    classic.close()
