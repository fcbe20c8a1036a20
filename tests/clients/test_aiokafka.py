"""aiokafka 0.14 against one pybroker node: produce matrix, idempotence, offsets, admin API,
auto topic creation. Each test runs its own event loop with asyncio.run."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import InvalidPartitionsError

from .adapters import (
    DEADLINE_S,
    aiokafka_common,
    aiokafka_consume,
    aiokafka_consumer,
    aiokafka_poll,
    aiokafka_produce,
    aiokafka_produce_async,
    aiokafka_producer,
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

TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR = 36, 37, 38
UNKNOWN_TOPIC_OR_PARTITION = 3


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


async def with_admin(bootstrap: str, fn):
    admin = AIOKafkaAdminClient(**aiokafka_common(bootstrap))
    await asyncio.wait_for(admin.start(), DEADLINE_S)
    try:
        return await fn(admin)
    finally:
        await admin.close()


def admin_call(broker, fn):
    return run(with_admin(broker.bootstrap, fn))


def partition_ids(broker, name: str) -> list[int]:
    async def describe(admin):
        return await admin.describe_topics([name])

    topics = [t for t in admin_call(broker, describe) if t["topic"] == name]
    if not topics or topics[0]["error_code"] != 0:
        return []
    return sorted(p["partition"] for p in topics[0]["partitions"])


def create_errors(broker, *topics: NewTopic) -> dict[str, int]:
    async def create(admin):
        return await admin.create_topics(list(topics))

    return {name: code for name, code, *_ in admin_call(broker, create).topic_errors}


# -- produce / consume ------------------------------------------------------------------------


@pytest.mark.parametrize("acks", ACKS)
@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume_round_trip(broker, topic, codec, acks):
    recs = sample_records()
    offsets = aiokafka_produce(broker.bootstrap, topic, recs, acks=acks, codec=codec)
    if acks != 0:
        assert offsets == list(range(len(recs)))
    assert_same_records(recs, aiokafka_consume(broker.bootstrap, topic, count=len(recs)))


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_idempotent_produce(broker, topic, codec):
    recs = numbered(40)

    async def produce_twice():
        first = await aiokafka_produce_async(
            broker.bootstrap, topic, recs[:20], codec=codec, idempotent=True
        )
        second = await aiokafka_produce_async(
            broker.bootstrap, topic, recs[20:], codec=codec, idempotent=True
        )
        return first + second

    assert run(produce_twice()) == list(range(40))
    assert_same_records(recs, aiokafka_consume(broker.bootstrap, topic, count=40))


def test_consume_from_offset(broker, topic):
    recs = numbered(10)
    aiokafka_produce(broker.bootstrap, topic, recs)
    assert_same_records(
        recs[5:], aiokafka_consume(broker.bootstrap, topic, start=5, count=5), first_offset=5
    )


def test_consume_from_timestamp(broker, topic):
    base = now_ms() - 10_000
    recs = numbered(10, base_ts=base)
    aiokafka_produce(broker.bootstrap, topic, recs)
    got = aiokafka_consume(broker.bootstrap, topic, start=("timestamp", base + 8), count=2)
    assert_same_records(recs[8:], got, first_offset=8)


def test_consume_from_latest_sees_only_new_records(broker, topic):
    aiokafka_produce(broker.bootstrap, topic, numbered(3, b"old"))
    new = numbered(2, b"new")

    async def scenario():
        consumer = aiokafka_consumer(broker.bootstrap)
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_end(tp)
            assert await consumer.position(tp) == 3
            await aiokafka_produce_async(broker.bootstrap, topic, new)
            return await aiokafka_poll(consumer, 2)
        finally:
            await consumer.stop()

    assert_same_records(new, run(scenario()), first_offset=3)


def test_list_offsets(broker, topic):
    base = now_ms() - 20_000
    ts = [base, base + 7, base + 1]
    aiokafka_produce(broker.bootstrap, topic, [Rec(None, b"x", (), t) for t in ts])

    async def query():
        consumer = aiokafka_consumer(broker.bootstrap)
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            begin = await consumer.beginning_offsets([tp])
            end = await consumer.end_offsets([tp])
            hit = await consumer.offsets_for_times({tp: base + 5})
            miss = await consumer.offsets_for_times({tp: base + 8})
            return begin[tp], end[tp], hit[tp], miss[tp]
        finally:
            await consumer.stop()

    begin, end, hit, miss = run(query())
    assert (begin, end) == (0, 3)
    assert (hit.offset, hit.timestamp) == (1, base + 7)
    assert miss is None


# -- admin ------------------------------------------------------------------------------------


def test_create_topic_then_already_exists(broker, topic):
    assert create_errors(broker, NewTopic(topic, 2, 1)) == {topic: 0}
    wait_until(lambda: partition_ids(broker, topic) == [0, 1], what="2 partitions")
    assert create_errors(broker, NewTopic(topic, 2, 1)) == {topic: TOPIC_ALREADY_EXISTS}


def test_create_topic_invalid_arguments(broker, topic):
    assert create_errors(broker, NewTopic(topic, 0, 1)) == {topic: INVALID_PARTITIONS}
    assert create_errors(broker, NewTopic(topic, 1, 2)) == {topic: INVALID_REPLICATION_FACTOR}

    # Not describe_topics: aiokafka's Metadata for named topics allows auto-creation.
    async def listed(admin):
        return await admin.list_topics()

    assert topic not in admin_call(broker, listed)


def test_delete_topic(broker, topic):
    assert create_errors(broker, NewTopic(topic, 1, 1)) == {topic: 0}

    async def delete(admin):
        return await admin.delete_topics([topic])

    assert dict(admin_call(broker, delete).topic_error_codes) == {topic: 0}

    async def listed(admin):
        return await admin.list_topics()

    wait_until(lambda: topic not in admin_call(broker, listed), what="topic gone")
    assert dict(admin_call(broker, delete).topic_error_codes) == {topic: UNKNOWN_TOPIC_OR_PARTITION}


def test_create_partitions(broker, topic):
    assert create_errors(broker, NewTopic(topic, 1, 1)) == {topic: 0}

    async def grow(admin):
        return await admin.create_partitions({topic: NewPartitions(4)})

    admin_call(broker, grow)
    wait_until(lambda: partition_ids(broker, topic) == [0, 1, 2, 3], what="4 partitions")

    async def shrink(admin):
        return await admin.create_partitions({topic: NewPartitions(2)})

    with pytest.raises(InvalidPartitionsError):
        admin_call(broker, shrink)


def test_describe_configs(broker, topic):
    assert create_errors(
        broker, NewTopic(topic, 1, 1, topic_configs={"retention.ms": "99999"})
    ) == {topic: 0}

    async def describe(admin):
        return await admin.describe_configs(
            [
                ConfigResource(ConfigResourceType.TOPIC, topic),
                ConfigResource(ConfigResourceType.BROKER, "1"),
            ]
        )

    values: dict[tuple[int, str], dict[str, str]] = {}
    for response in admin_call(broker, describe):
        for error_code, _msg, rtype, rname, entries in response.resources:
            assert error_code == 0
            values[(rtype, rname)] = {e[0]: e[1] for e in entries}
    topic_cfg = values[(ConfigResourceType.TOPIC, topic)]
    assert topic_cfg["retention.ms"] == "99999"
    assert topic_cfg["cleanup.policy"] == "delete"
    assert topic_cfg["segment.bytes"] == str(1024**3)
    assert values[(ConfigResourceType.BROKER, "1")]["node.id"] == "1"


def test_describe_cluster(broker):
    async def describe(admin):
        return await admin.describe_cluster()

    cluster = admin_call(broker, describe)
    assert [(b["node_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [
        (1, broker.host, broker.port)
    ]
    assert cluster["controller_id"] == 1
    assert cluster["cluster_id"]


def test_auto_create_on_produce(broker, topic):
    recs = numbered(2)
    aiokafka_produce(broker.bootstrap, topic, recs, partition=None)
    assert partition_ids(broker, topic) == [0]
    assert_same_records(recs, aiokafka_consume(broker.bootstrap, topic, count=2))


def test_auto_create_on_metadata(broker, topic):
    async def ask():
        producer = aiokafka_producer(broker.bootstrap)
        await producer.start()
        try:
            return await asyncio.wait_for(producer.partitions_for(topic), DEADLINE_S)
        finally:
            await producer.stop()

    assert run(ask()) == {0}
