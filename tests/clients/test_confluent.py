"""confluent-kafka 2.16 (librdkafka 2.16) against one pybroker node: produce matrix, offsets,
admin API, auto topic creation. Records must come back byte for byte."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .adapters import (
    confluent_admin,
    confluent_consume,
    confluent_consumer,
    confluent_poll,
    confluent_produce,
)
from .conftest import unique_topic
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

TIMEOUTS = {"request_timeout": 15, "operation_timeout": 10}


def admin_error(future) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        future.result(timeout=20)
    return info.value.args[0]


def create_topic(broker, name: str, partitions: int = 1, config: dict | None = None) -> None:
    admin = confluent_admin(broker.bootstrap)
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})],
        **TIMEOUTS,
    )
    futures[name].result(timeout=20)


def partitions_of(broker, name: str) -> dict[int, object]:
    md = confluent_admin(broker.bootstrap).list_topics(timeout=10)
    t = md.topics.get(name)
    return {} if t is None or t.error is not None else dict(t.partitions)


# -- produce / consume ------------------------------------------------------------------------


@pytest.mark.parametrize("acks", ACKS)
@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume_round_trip(broker, topic, codec, acks):
    recs = sample_records()
    offsets = confluent_produce(broker.bootstrap, topic, recs, acks=acks, codec=codec)
    if acks != 0:
        assert offsets == list(range(len(recs)))
    got = confluent_consume(broker.bootstrap, topic, count=len(recs))
    assert_same_records(recs, got)


def test_idempotent_produce(broker, topic):
    recs = numbered(50)
    offsets = confluent_produce(
        broker.bootstrap,
        topic,
        recs,
        idempotent=True,
        codec="lz4",
        **{"max.in.flight.requests.per.connection": 5, "linger.ms": 0},
    )
    assert offsets == list(range(50))
    assert_same_records(recs, confluent_consume(broker.bootstrap, topic, count=50))


def test_consume_from_offset(broker, topic):
    recs = numbered(10)
    confluent_produce(broker.bootstrap, topic, recs)
    got = confluent_consume(broker.bootstrap, topic, start=7, count=3)
    assert_same_records(recs[7:], got, first_offset=7)


def test_consume_from_timestamp(broker, topic):
    base = now_ms() - 10_000
    recs = numbered(10, base_ts=base)
    confluent_produce(broker.bootstrap, topic, recs)
    got = confluent_consume(broker.bootstrap, topic, start=("timestamp", base + 4), count=6)
    assert_same_records(recs[4:], got, first_offset=4)


def test_consume_from_latest_sees_only_new_records(broker, topic):
    from confluent_kafka import OFFSET_END

    confluent_produce(broker.bootstrap, topic, numbered(3, b"old"))
    consumer = confluent_consumer(broker.bootstrap)
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_END)])
        # Let the fetcher resolve "end" (a ListOffsets) before the new records exist.
        assert confluent_poll(consumer, 1, deadline_s=2.0) == []
        new = numbered(3, b"new")
        confluent_produce(broker.bootstrap, topic, new)
        assert_same_records(new, confluent_poll(consumer, 3), first_offset=3)
    finally:
        consumer.close()


def test_watermarks_and_offsets_for_times(broker, topic):
    base = now_ms() - 20_000
    recs = numbered(5, base_ts=base)
    confluent_produce(broker.bootstrap, topic, recs)
    consumer = confluent_consumer(broker.bootstrap)
    try:
        tp = TopicPartition(topic, 0)
        assert consumer.get_watermark_offsets(tp, timeout=10, cached=False) == (0, 5)
        at = consumer.offsets_for_times([TopicPartition(topic, 0, base + 2)], timeout=10)[0]
        assert (at.error, at.offset) == (None, 2)
        # A timestamp after every record: no such offset, Kafka answers -1 (librdkafka: END).
        after = consumer.offsets_for_times([TopicPartition(topic, 0, base + 10_000)], timeout=10)[0]
        assert after.offset in (-1, 5)
    finally:
        consumer.close()


def test_admin_list_offsets(broker, topic):
    base = now_ms() - 20_000
    ts = [base, base + 1, base + 50, base + 2, base + 3]  # max timestamp at offset 2
    recs = [Rec(b"k", b"v%d" % i, (), t) for i, t in enumerate(ts)]
    confluent_produce(broker.bootstrap, topic, recs)
    admin = confluent_admin(broker.bootstrap)
    tp = TopicPartition(topic, 0)
    specs = {
        "earliest": (OffsetSpec.earliest(), 0),
        "latest": (OffsetSpec.latest(), 5),
        "for_timestamp": (OffsetSpec.for_timestamp(base + 2), 2),
        "max_timestamp": (OffsetSpec.max_timestamp(), 2),
    }
    for name, (spec, want) in specs.items():
        info = admin.list_offsets({tp: spec}, request_timeout=15)[tp].result(timeout=20)
        assert info.offset == want, f"{name}: offset {info.offset}, want {want}"
        if name == "max_timestamp":
            assert info.timestamp == base + 50


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.binary(max_size=40)),
            st.one_of(st.none(), st.binary(max_size=300)),
            st.lists(
                st.tuples(
                    st.text(
                        # utf-8-encodable only: confluent-kafka 2.16.1 segfaults in produce() on a
                        # header key it cannot encode (a lone surrogate) -- see FINDINGS.md
                        st.characters(codec="utf-8", exclude_characters="\x00"),
                        min_size=1, max_size=8,
                    ),
                    st.one_of(st.none(), st.binary(max_size=20)),
                ),
                max_size=3,
            ),
            st.integers(min_value=-3_600_000, max_value=0),
        ),
        min_size=1,
        max_size=8,
    ),
    st.sampled_from(CODECS),
)
def test_any_records_round_trip(broker, records, codec):
    """Property: whatever a producer sends (any bytes, headers, timestamps) comes back."""
    name = unique_topic("prop")
    base = now_ms()
    recs = [Rec(k, v, tuple(h), base + d) for k, v, h, d in records]
    confluent_produce(broker.bootstrap, name, recs, codec=codec)
    assert_same_records(recs, confluent_consume(broker.bootstrap, name, count=len(recs)))


# -- admin ------------------------------------------------------------------------------------


def test_create_topic_then_already_exists(broker, topic):
    create_topic(broker, topic, partitions=3)
    parts = partitions_of(broker, topic)
    assert sorted(parts) == [0, 1, 2]
    for p in parts.values():
        assert (p.leader, list(p.replicas), list(p.isrs)) == (1, [1], [1])
    admin = confluent_admin(broker.bootstrap)
    fut = admin.create_topics(
        [NewTopic(topic, num_partitions=3, replication_factor=1)], **TIMEOUTS
    )[topic]
    assert admin_error(fut).code() == KafkaError.TOPIC_ALREADY_EXISTS


def test_create_topic_invalid_arguments(broker, topic):
    admin = confluent_admin(broker.bootstrap)
    fut = admin.create_topics(
        [NewTopic(topic, num_partitions=0, replication_factor=1)], **TIMEOUTS
    )[topic]
    assert admin_error(fut).code() == KafkaError.INVALID_PARTITIONS
    fut = admin.create_topics(
        [NewTopic(topic, num_partitions=1, replication_factor=3)], **TIMEOUTS
    )[topic]
    assert admin_error(fut).code() == KafkaError.INVALID_REPLICATION_FACTOR
    assert topic not in confluent_admin(broker.bootstrap).list_topics(timeout=10).topics


def test_delete_topic(broker, topic):
    create_topic(broker, topic, partitions=2)
    confluent_produce(broker.bootstrap, topic, numbered(2))
    admin = confluent_admin(broker.bootstrap)
    admin.delete_topics([topic], **TIMEOUTS)[topic].result(timeout=20)
    wait_until(lambda: topic not in admin.list_topics(timeout=10).topics, what="topic gone")
    fut = admin.delete_topics([topic], **TIMEOUTS)[topic]
    assert admin_error(fut).code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_create_partitions(broker, topic):
    create_topic(broker, topic, partitions=1)
    admin = confluent_admin(broker.bootstrap)
    admin.create_partitions([NewPartitions(topic, 3)], **TIMEOUTS)[topic].result(timeout=20)
    wait_until(lambda: sorted(partitions_of(broker, topic)) == [0, 1, 2], what="3 partitions")
    recs = numbered(2)
    confluent_produce(broker.bootstrap, topic, recs, partition=2)
    assert_same_records(recs, confluent_consume(broker.bootstrap, topic, partition=2, count=2))
    for count in (2, 3):  # fewer, or as many as now: both INVALID_PARTITIONS
        fut = admin.create_partitions([NewPartitions(topic, count)], **TIMEOUTS)[topic]
        assert admin_error(fut).code() == KafkaError.INVALID_PARTITIONS
    assert sorted(partitions_of(broker, topic)) == [0, 1, 2]


def test_describe_topic_configs(broker, topic):
    create_topic(broker, topic, config={"retention.ms": "123456"})
    admin = confluent_admin(broker.bootstrap)
    res = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([res], request_timeout=15)[res].result(timeout=20)
    assert configs["cleanup.policy"].value == "delete"
    assert configs["segment.bytes"].value == str(1024**3)
    assert configs["retention.ms"].value == "123456"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert not configs["retention.ms"].is_default
    assert configs["cleanup.policy"].is_default


def test_describe_broker_configs(broker):
    admin = confluent_admin(broker.bootstrap)
    res = ConfigResource(ResourceType.BROKER, "1")
    configs = admin.describe_configs([res], request_timeout=15)[res].result(timeout=20)
    assert configs["node.id"].value == "1"
    assert configs["num.partitions"].value == "1"
    assert configs["auto.create.topics.enable"].value == "true"


def test_describe_cluster(broker):
    admin = confluent_admin(broker.bootstrap)
    cluster = admin.describe_cluster(request_timeout=15).result(timeout=20)
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(1, broker.host, broker.port)]
    assert cluster.controller is not None and cluster.controller.id == 1
    assert isinstance(cluster.cluster_id, str) and cluster.cluster_id


def test_auto_create_on_produce(broker, topic):
    assert topic not in confluent_admin(broker.bootstrap).list_topics(timeout=10).topics
    recs = numbered(3)
    confluent_produce(broker.bootstrap, topic, recs, partition=None)
    assert sorted(partitions_of(broker, topic)) == [0]  # num.partitions=1
    assert_same_records(recs, confluent_consume(broker.bootstrap, topic, count=3))
