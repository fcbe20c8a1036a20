"""Topic config changes, DeleteRecords and DescribeLogDirs through the clients' admin APIs:

- confluent-kafka AdminClient: alter_configs (AlterConfigs v2), incremental_alter_configs
  (IncrementalAlterConfigs v1), delete_records (DeleteRecords v2), describe_configs and
  list_offsets after (the checks of confluent-kafka-python's own integration tests);
- kafka-python KafkaAdminClient: alter_configs (incremental by default, legacy when forced),
  describe_configs, delete_records, describe_log_dirs;
- aiokafka AIOKafkaAdminClient: alter_configs (AlterConfigs v1), describe_configs,
  delete_records.

Each change is checked the way an application would see it: DescribeConfigs, ListOffsets
(earliest), a produce the new limit refuses, and consuming from the beginning.
"""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from .adapters import (
    DEADLINE_S,
    aiokafka_common,
    aiokafka_consume,
    confluent_admin,
    confluent_consume,
    confluent_produce,
    confluent_producer,
    kafka_python_admin,
    kafka_python_consume,
    kafka_python_produce,
)
from .helpers import Rec, numbered

REQ = {"request_timeout": 15}


def create(bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    admin = confluent_admin(bootstrap)  # keep a reference: the future dies with the client
    fs = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                       config=config or {})], **REQ)
    fs[name].result(timeout=20)


def confluent_configs(admin, topic: str) -> dict[str, tuple[str, bool]]:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([resource], **REQ)[resource].result(timeout=20)
    return {name: (e.value, e.is_default) for name, e in configs.items()}


def non_default(admin, topic: str) -> list[str]:
    """confluent-kafka-python's integration-test view: sorted str() of non-default entries."""
    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([resource], **REQ)[resource].result(timeout=20)
    return sorted(str(e) for e in configs.values() if not e.is_default)


def confluent_earliest(admin, topic: str, partition: int = 0) -> int:
    tp = TopicPartition(topic, partition)
    return admin.list_offsets({tp: OffsetSpec.earliest()}, **REQ)[tp].result(timeout=20).offset


# --------------------------------------------------------------------------------------------
# confluent-kafka


def test_confluent_alter_configs_replaces_and_describe_shows_it(broker, topic):
    create(broker.bootstrap, topic, 2, {"compression.type": "gzip", "retention.ms": "123456"})
    admin = confluent_admin(broker.bootstrap)
    assert confluent_configs(admin, topic)["compression.type"] == ("gzip", False)
    # as confluent-kafka-python's test_basic_operations does
    resource = ConfigResource(ResourceType.TOPIC, topic)
    resource.set_config("file.delete.delay.ms", 12345)
    resource.set_config("compression.type", "snappy")
    assert admin.alter_configs([resource], **REQ)[resource].result(timeout=20) is None
    configs = confluent_configs(admin, topic)
    assert configs["file.delete.delay.ms"] == ("12345", False)
    assert configs["compression.type"] == ("snappy", False)
    # legacy AlterConfigs replaced the whole set: retention.ms is back to its default
    assert configs["retention.ms"] == ("604800000", True)
    # the topic still works, now recompressing to snappy
    recs = numbered(5)
    assert confluent_produce(broker.bootstrap, topic, recs) == list(range(5))
    assert confluent_consume(broker.bootstrap, topic, count=5) == recs


def test_confluent_alter_configs_errors_per_resource(broker, topic):
    create(broker.bootstrap, topic)
    admin = confluent_admin(broker.bootstrap)
    bad_value = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.ms": "soon"})
    missing = ConfigResource(ResourceType.TOPIC, topic + "-missing", set_config={"retention.ms": "1"})
    fs = admin.alter_configs([bad_value, missing], **REQ)
    with pytest.raises(KafkaException) as bad:
        fs[bad_value].result(timeout=20)
    assert bad.value.args[0].code() == KafkaError.INVALID_CONFIG
    with pytest.raises(KafkaException) as unknown:
        fs[missing].result(timeout=20)
    assert unknown.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    broker_res = ConfigResource(ResourceType.BROKER, str(broker.node_id),
                                set_config={"num.partitions": "3"})
    with pytest.raises(KafkaException) as not_dynamic:
        admin.alter_configs([broker_res], **REQ)[broker_res].result(timeout=20)
    assert not_dynamic.value.args[0].code() == KafkaError.INVALID_REQUEST
    assert "Cannot update these configs dynamically" in not_dynamic.value.args[0].str()


def test_confluent_incremental_alter_configs_like_upstream(broker, topic):
    """confluent-kafka-python's test_incremental_alter_configs, step by step (a fresh node has
    KIP-966's cluster-level min.insync.replicas, which every topic reports as non-default)."""
    first, second = topic + "-a", topic + "-b"
    for name in (first, second):
        create(broker.bootstrap, name, 2, {"compression.type": "gzip"})
    admin = confluent_admin(broker.bootstrap)
    res1 = ConfigResource(ResourceType.TOPIC, first, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
        ConfigEntry("retention.ms", "10000", incremental_operation=AlterConfigOpType.SET)])
    res2 = ConfigResource(ResourceType.TOPIC, second, incremental_configs=[
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT),
        ConfigEntry("retention.ms", "5000", incremental_operation=AlterConfigOpType.SET)])
    fs = admin.incremental_alter_configs([res1, res2], **REQ)
    assert [f.result(timeout=20) for f in fs.values()] == [None, None]
    assert non_default(admin, first) == ['cleanup.policy="delete,compact"', 'compression.type="gzip"',
                                         'min.insync.replicas="1"', 'retention.ms="10000"']
    assert non_default(admin, second) == ['cleanup.policy=""', 'compression.type="gzip"',
                                          'min.insync.replicas="1"', 'retention.ms="5000"']
    res2 = ConfigResource(ResourceType.TOPIC, second, incremental_configs=[
        ConfigEntry("compression.type", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("retention.ms", "10000", incremental_operation=AlterConfigOpType.SET)])
    assert admin.incremental_alter_configs([res2], **REQ)[res2].result(timeout=20) is None
    assert non_default(admin, second) == ['cleanup.policy=""', 'min.insync.replicas="1"', 'retention.ms="10000"']


def test_confluent_lowered_max_message_bytes_refuses_large_records(broker, topic):
    create(broker.bootstrap, topic)
    admin = confluent_admin(broker.bootstrap)
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("max.message.bytes", "1000", incremental_operation=AlterConfigOpType.SET)])
    assert admin.incremental_alter_configs([res], **REQ)[res].result(timeout=20) is None
    assert confluent_configs(admin, topic)["max.message.bytes"] == ("1000", False)
    producer = confluent_producer(broker.bootstrap, **{"message.send.max.retries": 0})
    errors: list[KafkaError] = []
    producer.produce(topic, value=b"x" * 4000, partition=0, on_delivery=lambda err, _m: errors.append(err))
    assert producer.flush(DEADLINE_S + 5) == 0
    assert [e.code() for e in errors] == [KafkaError.MSG_SIZE_TOO_LARGE]
    small = [Rec(b"k", b"small", (), None)]
    offsets = confluent_produce(broker.bootstrap, topic, small)
    assert offsets == [0]


def test_confluent_delete_records_like_upstream(broker, topic):
    create(broker.bootstrap, topic)
    admin = confluent_admin(broker.bootstrap)
    recs = numbered(3)
    assert confluent_produce(broker.bootstrap, topic, recs) == [0, 1, 2]
    assert confluent_earliest(admin, topic) == 0
    fs = admin.delete_records([TopicPartition(topic, 0, 2)], **REQ)
    deleted = list(fs.values())[0].result(timeout=20)
    assert deleted.low_watermark == 2 == confluent_earliest(admin, topic)
    got = confluent_consume(broker.bootstrap, topic, count=1)
    assert got == recs[2:] and got[0].offset == 2
    # beyond the high watermark: OFFSET_OUT_OF_RANGE for that partition
    fs = admin.delete_records([TopicPartition(topic, 0, 10)], **REQ)
    with pytest.raises(KafkaException) as exc:
        list(fs.values())[0].result(timeout=20)
    assert exc.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE
    # OFFSET_END (-1) means the high watermark
    fs = admin.delete_records([TopicPartition(topic, 0, -1)], **REQ)
    assert list(fs.values())[0].result(timeout=20).low_watermark == 3


# --------------------------------------------------------------------------------------------
# kafka-python


def test_kafka_python_alter_configs_incremental_and_legacy(broker, topic):
    from kafka.admin import AlterConfigOp
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType as KType

    create(broker.bootstrap, topic, 1, {"retention.ms": "123456"})
    admin = kafka_python_admin(broker.bootstrap)
    try:
        # the default path uses IncrementalAlterConfigs (the broker advertises it)
        res = KConfigResource(KType.TOPIC, topic, configs={
            "cleanup.policy": (AlterConfigOp.APPEND, "compact"), "max.message.bytes": "5000"})
        assert admin.alter_configs([res]) == {"topic": {topic: "OK"}}
        modified = admin.describe_configs([KConfigResource(KType.TOPIC, topic)])["topic"][topic]
        assert {k: v["value"] for k, v in modified.items()} == {
            "cleanup.policy": "delete,compact", "max.message.bytes": "5000", "retention.ms": "123456"}
        assert modified["max.message.bytes"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        # forced legacy AlterConfigs: the client re-sends the other modified keys itself
        res = KConfigResource(KType.TOPIC, topic, configs={"retention.ms": "777"})
        assert admin.alter_configs([res], incremental=False) == {"topic": {topic: "OK"}}
        modified = admin.describe_configs([KConfigResource(KType.TOPIC, topic)])["topic"][topic]
        assert {k: v["value"] for k, v in modified.items()} == {
            "cleanup.policy": "delete,compact", "max.message.bytes": "5000", "retention.ms": "777"}
        # reset_configs deletes overrides (IncrementalAlterConfigs DELETE)
        admin.reset_configs([KConfigResource(KType.TOPIC, topic, configs=["retention.ms"])])
        modified = admin.describe_configs([KConfigResource(KType.TOPIC, topic)])["topic"][topic]
        assert set(modified) == {"cleanup.policy", "max.message.bytes"}
        bad = KConfigResource(KType.TOPIC, topic, configs={"retention.ms": "-5"})
        result = admin.alter_configs([bad])["topic"][topic]
        assert result.startswith("[Error 40] InvalidConfigurationError: ") and "retention.ms" in result
    finally:
        admin.close()


def test_kafka_python_delete_records_and_describe_log_dirs(broker, topic):
    from kafka import TopicPartition as KTopicPartition

    create(broker.bootstrap, topic, 2)
    recs = numbered(6)
    assert kafka_python_produce(broker.bootstrap, topic, recs, idempotent=False) == list(range(6))
    admin = kafka_python_admin(broker.bootstrap)
    try:
        tp = KTopicPartition(topic, 0)
        result = admin.delete_records({tp: 4})
        assert result[tp]["low_watermark"] == 4 and result[tp]["error_code"] == 0
        dirs = admin.describe_log_dirs()
        assert [d["broker"] for d in dirs] == [broker.node_id]
        (log_dir,) = dirs[0]["log_dirs"]
        assert log_dir["error_code"] == 0
        mine = {t["name"]: t for t in log_dir["topics"]}[topic]
        sizes = {p["partition_index"]: p["partition_size"] for p in mine["partitions"]}
        assert sizes[0] > 0 and sizes[1] == 0
        assert log_dir["total_bytes"] >= log_dir["usable_bytes"] > 0
    finally:
        admin.close()
    got = kafka_python_consume(broker.bootstrap, topic, count=2)
    assert got == recs[4:] and [r.offset for r in got] == [4, 5]


# --------------------------------------------------------------------------------------------
# aiokafka


async def _aiokafka_admin_flow(bootstrap: str, topic: str) -> dict:
    from aiokafka import TopicPartition as ATopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
    from aiokafka.admin.config_resource import ConfigResource as AConfigResource
    from aiokafka.admin.config_resource import ConfigResourceType as AType

    conf = aiokafka_common(bootstrap)
    conf.pop("metadata_max_age_ms")
    admin = AIOKafkaAdminClient(**conf)
    await asyncio.wait_for(admin.start(), DEADLINE_S)
    try:
        altered = await admin.alter_configs([AConfigResource(AType.TOPIC, topic, configs={
            "retention.ms": "4242", "segment.bytes": "1048576"})])
        described = await admin.describe_configs([AConfigResource(AType.TOPIC, topic)])
        deleted = await admin.delete_records({ATopicPartition(topic, 0): RecordsToDelete(3)}, timeout_ms=5000)
        return {
            "alter": [(r[0], r[2], r[3]) for resp in altered for r in resp.resources],
            "configs": {c[0]: c[1] for resp in described for res in resp.resources for c in res[4]},
            "deleted": {tp.partition: lw for tp, lw in deleted.items()},
        }
    finally:
        await asyncio.wait_for(admin.close(), DEADLINE_S)


def test_aiokafka_alter_configs_and_delete_records(broker, topic):
    create(broker.bootstrap, topic, 1, {"cleanup.policy": "delete"})
    recs = numbered(5)
    assert confluent_produce(broker.bootstrap, topic, recs) == list(range(5))
    out = asyncio.run(_aiokafka_admin_flow(broker.bootstrap, topic))
    assert out["alter"] == [(0, 2, topic)]
    # legacy AlterConfigs replaced the set: cleanup.policy's override is gone
    assert out["configs"]["retention.ms"] == "4242"
    assert out["configs"]["segment.bytes"] == "1048576"
    assert out["deleted"] == {0: 3}
    admin = confluent_admin(broker.bootstrap)
    assert confluent_earliest(admin, topic) == 3
    assert confluent_configs(admin, topic)["cleanup.policy"] == ("delete", True)
    got = aiokafka_consume(broker.bootstrap, topic, count=2)
    assert got == recs[3:] and [r.offset for r in got] == [3, 4]
