"""kafka-python 3.0 against one pybroker node: produce matrix (idempotent by default),
offsets, admin API, auto topic creation. Records must come back byte for byte."""

from __future__ import annotations

import pytest
from kafka import TopicPartition
from kafka import errors as Errors
from kafka.admin import ConfigResource, NewTopic, OffsetSpec

from .adapters import (
    kafka_python_admin,
    kafka_python_consume,
    kafka_python_consumer,
    kafka_python_poll,
    kafka_python_produce,
    kafka_python_producer,
)
from .helpers import (
    ACKS,
    CODECS,
    Rec,
    assert_same_records,
    now_ms,
    numbered,
    sample_records,
    wait_until,
)


@pytest.fixture
def admin(broker):
    client = kafka_python_admin(broker.bootstrap)
    yield client
    client.close()


def partition_ids(admin, name: str) -> list[int]:
    topics = [t for t in admin.describe_topics([name]) if t["name"] == name]
    if not topics or topics[0]["error_code"] != 0:
        return []
    return sorted(p["partition_index"] for p in topics[0]["partitions"])


# -- produce / consume ------------------------------------------------------------------------


@pytest.mark.parametrize("acks", ACKS)
@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume_round_trip(broker, topic, codec, acks):
    """acks=all runs with the client's defaults, i.e. idempotently (InitProducerId, sequences).
    kafka-python refuses None header values on send, so they are empty here."""
    recs = sample_records(null_header_values=False)
    offsets = kafka_python_produce(broker.bootstrap, topic, recs, acks=acks, codec=codec)
    if acks != 0:
        assert offsets == list(range(len(recs)))
    assert_same_records(recs, kafka_python_consume(broker.bootstrap, topic, count=len(recs)))


def test_default_producer_is_idempotent(broker, topic):
    producer = kafka_python_producer(broker.bootstrap)  # no acks, no enable_idempotence
    try:
        assert producer.config["enable_idempotence"] is True
        recs = numbered(30)
        offsets = kafka_python_produce(broker.bootstrap, topic, recs, producer=producer)
        assert offsets == list(range(30))
        # Several batches from the same producer id: sequences must have been accepted in order.
        more = numbered(30, b"more")
        assert kafka_python_produce(broker.bootstrap, topic, more, producer=producer) == list(
            range(30, 60)
        )
    finally:
        producer.close(timeout=5)
    assert_same_records(recs + more, kafka_python_consume(broker.bootstrap, topic, count=60))


def test_consume_from_offset(broker, topic):
    recs = numbered(10)
    kafka_python_produce(broker.bootstrap, topic, recs)
    got = kafka_python_consume(broker.bootstrap, topic, start=6, count=4)
    assert_same_records(recs[6:], got, first_offset=6)


def test_consume_from_timestamp(broker, topic):
    base = now_ms() - 10_000
    recs = numbered(10, base_ts=base)
    kafka_python_produce(broker.bootstrap, topic, recs)
    got = kafka_python_consume(broker.bootstrap, topic, start=("timestamp", base + 3), count=7)
    assert_same_records(recs[3:], got, first_offset=3)


def test_consume_from_latest_sees_only_new_records(broker, topic):
    kafka_python_produce(broker.bootstrap, topic, numbered(3, b"old"))
    consumer = kafka_python_consumer(broker.bootstrap)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_end(tp)
        assert consumer.position(tp, timeout_ms=10_000) == 3
        new = numbered(3, b"new")
        kafka_python_produce(broker.bootstrap, topic, new)
        assert_same_records(new, kafka_python_poll(consumer, 3), first_offset=3)
    finally:
        consumer.close(autocommit=False)


def test_list_offsets(broker, topic):
    base = now_ms() - 20_000
    ts = [base, base + 1, base + 50, base + 2, base + 3]
    kafka_python_produce(
        broker.bootstrap, topic, [Rec(b"k", b"v%d" % i, (), t) for i, t in enumerate(ts)]
    )
    tp = TopicPartition(topic, 0)
    consumer = kafka_python_consumer(broker.bootstrap)
    try:
        assert consumer.beginning_offsets([tp], timeout_ms=10_000) == {tp: 0}
        assert consumer.end_offsets([tp], timeout_ms=10_000) == {tp: 5}
        found = consumer.offsets_for_times({tp: base + 2}, timeout_ms=10_000)[tp]
        assert (found.offset, found.timestamp) == (2, base + 50)
        assert consumer.offsets_for_times({tp: base + 51}, timeout_ms=10_000)[tp] is None
    finally:
        consumer.close(autocommit=False)
    admin = kafka_python_admin(broker.bootstrap)
    try:
        res = admin.list_partition_offsets({tp: OffsetSpec.MAX_TIMESTAMP})[tp]
        assert (res.offset, res.timestamp) == (2, base + 50)
        assert admin.list_partition_offsets({tp: OffsetSpec.EARLIEST})[tp].offset == 0
        assert admin.list_partition_offsets({tp: OffsetSpec.LATEST})[tp].offset == 5
    finally:
        admin.close()


# -- admin ------------------------------------------------------------------------------------


def test_create_topic_then_already_exists(broker, admin, topic):
    admin.create_topics({topic: {"num_partitions": 3, "replication_factor": 1}})
    wait_until(lambda: partition_ids(admin, topic) == [0, 1, 2], what="3 partitions")
    with pytest.raises(Errors.TopicAlreadyExistsError):
        admin.create_topics({topic: {"num_partitions": 3, "replication_factor": 1}})


def test_create_topic_invalid_arguments(broker, admin, topic):
    with pytest.raises(Errors.InvalidPartitionsError):
        admin.create_topics({topic: {"num_partitions": 0, "replication_factor": 1}})
    with pytest.raises(Errors.InvalidReplicationFactorError):
        admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 3}})
    assert topic not in admin.list_topics()


def test_create_topic_with_broker_defaults(broker, admin, topic):
    """CreateTopics v4+: -1 partitions / replication factor mean the broker's defaults."""
    admin.create_topics([topic])
    wait_until(lambda: partition_ids(admin, topic) == [0], what="num.partitions=1")


def test_delete_topic(broker, admin, topic):
    admin.create_topics({topic: {"num_partitions": 2, "replication_factor": 1}})
    admin.delete_topics([topic])
    wait_until(lambda: topic not in admin.list_topics(), what="topic gone")
    with pytest.raises(Errors.UnknownTopicOrPartitionError):
        admin.delete_topics([topic])


def test_create_partitions(broker, admin, topic):
    admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})
    admin.create_partitions({topic: 3})
    wait_until(lambda: partition_ids(admin, topic) == [0, 1, 2], what="3 partitions")
    recs = numbered(2)
    kafka_python_produce(broker.bootstrap, topic, recs, partition=1)
    assert_same_records(recs, kafka_python_consume(broker.bootstrap, topic, partition=1, count=2))
    with pytest.raises(Errors.InvalidPartitionsError):
        admin.create_partitions({topic: 2})


def test_describe_configs(broker, admin, topic):
    admin.create_topics(
        {
            topic: {
                "num_partitions": 1,
                "replication_factor": 1,
                "configs": {"retention.ms": "7654321"},
            }
        }
    )
    out = admin.describe_configs([ConfigResource("TOPIC", topic)], config_filter="ALL")
    configs = out["topic"][topic]
    assert configs["cleanup.policy"]["value"] == "delete"
    assert configs["segment.bytes"]["value"] == str(1024**3)
    assert configs["retention.ms"]["value"] == "7654321"
    assert configs["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    modified = admin.describe_configs([ConfigResource("TOPIC", topic)])["topic"][topic]
    assert set(modified) == {"retention.ms"}
    brokers = admin.describe_configs([ConfigResource("BROKER", "1")], config_filter="ALL")
    assert brokers["broker"]["1"]["node.id"]["value"] == "1"


def test_describe_cluster(broker, admin):
    cluster = admin.describe_cluster()
    assert [(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [
        (1, broker.host, broker.port)
    ]
    assert cluster["controller_id"] == 1
    assert isinstance(cluster["cluster_id"], str) and cluster["cluster_id"]


def test_auto_create_on_produce(broker, admin, topic):
    assert topic not in admin.list_topics()
    recs = numbered(3)
    kafka_python_produce(broker.bootstrap, topic, recs, partition=None)
    assert partition_ids(admin, topic) == [0]
    assert_same_records(recs, kafka_python_consume(broker.bootstrap, topic, count=3))


def test_auto_create_on_metadata(broker, admin, topic):
    producer = kafka_python_producer(broker.bootstrap)
    try:
        # partitions_for asks Metadata with allow_auto_topic_creation=true.
        assert producer.partitions_for(topic) == {0}
    finally:
        producer.close(timeout=5)
    assert partition_ids(admin, topic) == [0]


# -- what the client infers from ApiVersions ---------------------------------------------------


def test_broker_version_inferred_as_kafka_4_2(broker):
    """kafka-python matches the advertised ranges against the ones real brokers advertise
    (upstream test_kafka_version_infer with KAFKA_VERSION=4.2.0)."""
    from kafka.protocol.broker_version_data import BrokerVersionData

    consumer = kafka_python_consumer(broker.bootstrap, api_version=None)
    try:
        assert consumer.config["api_version"] == BrokerVersionData((4, 2, 0)).broker_version
        assert consumer.config["api_version"] == (4, 2)
    finally:
        consumer.close(autocommit=False)
    admin = kafka_python_admin(broker.bootstrap, api_version=None)
    try:
        assert admin.get_broker_version_data(1).broker_version == (4, 2)
    finally:
        admin.close()


def test_list_config_resources(broker, admin, topic):
    """ListConfigResources v1: every listable type by default, or only the asked ones; a group
    is listed once it has a dynamic config."""
    group = f"{topic}-g"
    admin.create_topics([NewTopic(topic, 1, 1)])
    result = admin.alter_configs(
        [ConfigResource("GROUP", group, {"consumer.session.timeout.ms": "50000"})]
    )
    assert result == {"group": {group: "OK"}}
    listed = admin.list_config_resources()
    assert listed["broker"] == ["1"]
    assert listed["broker_logger"] == ["1"]
    assert topic in listed["topic"]
    assert group in listed["group"]
    assert "client_metrics" not in listed  # none are configured
    assert set(admin.list_config_resources(["TOPIC"])) == {"topic"}
    only = admin.list_config_resources(["BROKER", "GROUP"])
    assert only["broker"] == ["1"] and group in only["group"] and set(only) == {"broker", "group"}
