"""Auto topic creation with a non-default num.partitions, and its switch turned off.

Producers and Metadata requests for an unknown topic create it with num.partitions
partitions (CLIENTS.md: every producer relies on this); with auto.create.topics.enable=false
the topic stays unknown."""

from __future__ import annotations

import time

import pytest

from . import rawkafka as rk
from .adapters import aiokafka_produce, confluent_admin, confluent_produce, kafka_python_produce
from .helpers import numbered

BROKER_OVERRIDES = {"num.partitions": "3"}
UNKNOWN_TOPIC_OR_PARTITION = 3


def raw_metadata(node, topic: str) -> rk.TopicMetadata:
    with rk.Connection(node.host, node.port) as conn:
        _, body = conn.request(rk.metadata_v1(1, [topic]))
        return rk.parse_metadata_v1(body)[2][0]


def partition_count(node, topic: str) -> int:
    t = confluent_admin(node.bootstrap).list_topics(timeout=10).topics.get(topic)
    return 0 if t is None or t.error is not None else len(t.partitions)


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka"])
def test_produce_creates_topic_with_num_partitions(broker, topic, client):
    produce = {
        "confluent": confluent_produce,
        "kafka-python": kafka_python_produce,
        "aiokafka": aiokafka_produce,
    }[client]
    assert produce(broker.bootstrap, topic, numbered(2), partition=2) == [0, 1]
    assert partition_count(broker, topic) == 3


def test_metadata_v1_creates_topic(broker, topic):
    deadline = time.monotonic() + 10
    while True:
        t = raw_metadata(broker, topic)
        # Kafka answers the creating request with LEADER_NOT_AVAILABLE (5) or the new topic.
        assert t.error_code in (0, 5), t
        if t.error_code == 0 and len(t.partitions) == 3:
            break
        assert time.monotonic() < deadline, t
        time.sleep(0.1)
    assert sorted(t.partitions) == [0, 1, 2]
    assert all(err == 0 and leader == 1 for err, leader in t.partitions.values())


def test_auto_create_disabled(broker_factory, topic):
    node = broker_factory(**{"auto.create.topics.enable": "false"})
    for _ in range(3):
        t = raw_metadata(node, topic)
        assert t.error_code == UNKNOWN_TOPIC_OR_PARTITION, t
        time.sleep(0.1)
    assert partition_count(node, topic) == 0
