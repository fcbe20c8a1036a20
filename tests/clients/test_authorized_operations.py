"""Authorized operations as real clients read them from a node with no authorizer: every
operation the resource type supports (Kafka's AclEntry.supportedOperations)."""

from __future__ import annotations

from confluent_kafka import TopicCollection
from confluent_kafka.admin import NewTopic

from .adapters import confluent_admin, kafka_python_admin

TOPIC_OPS = {"READ", "WRITE", "CREATE", "DESCRIBE", "DELETE", "ALTER", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}
CLUSTER_OPS = {"CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "ALTER",
               "DESCRIBE"}


def test_confluent_describe_cluster_and_topics_with_authorized_operations(broker, topic):
    admin = confluent_admin(broker.bootstrap)
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=20)
    cluster = admin.describe_cluster(include_authorized_operations=True, request_timeout=15).result(timeout=20)
    assert {op.name for op in cluster.authorized_operations} == CLUSTER_OPS
    plain = admin.describe_cluster(request_timeout=15).result(timeout=20)
    assert not plain.authorized_operations  # not asked: INT32_MIN -> none reported
    desc = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True,
                                 request_timeout=15)[topic].result(timeout=20)
    assert {op.name for op in desc.authorized_operations} == TOPIC_OPS
    assert len(desc.partitions) == 2


def test_kafka_python_describe_cluster_and_topics_with_authorized_operations(broker, topic):
    admin = kafka_python_admin(broker.bootstrap)
    try:
        from kafka.admin import NewTopic as KNewTopic

        admin.create_topics([KNewTopic(topic, 1, 1)])
        cluster = admin.describe_cluster()
        assert set(cluster["authorized_operations"]) == CLUSTER_OPS
        (desc,) = admin.describe_topics([topic])
        assert set(desc["authorized_operations"]) == TOPIC_OPS
    finally:
        admin.close()
