"""The replication throttle configs (KIP-73) through confluent-kafka's AdminClient, as Kafka
answers them: the broker rates leader/follower.replication.throttled.rate (dynamic-only: listed
where set, with their source and synonyms; a bad value INVALID_REQUEST with ConfigDef's text) and
the topic lists leader/follower.replication.throttled.replicas (`*` or partition:broker items;
anything else INVALID_CONFIG with ThrottledReplicaListValidator's text), through
incremental_alter_configs, the deprecated alter_configs and create_topics. The throttles' effect
is tests/cluster/test_replication_throttle.py's."""

from __future__ import annotations

import warnings

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from .adapters import confluent_admin
from .test_admin_extra import REQ, create

RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
LISTS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
LIST_RULE = ("must be the literal '*' or a list of replicas in the following format: "
             "[partitionId]:[brokerId],[partitionId]:[brokerId],...")


def describe(admin, resource):
    return admin.describe_configs([resource], **REQ)[resource].result(timeout=20)


def incremental(admin, rtype, name, **ops):
    """ops: key (dots as __) -> value, None deletes."""
    res = ConfigResource(rtype, name, incremental_configs=[
        ConfigEntry(k.replace("__", "."), v, incremental_operation=AlterConfigOpType.DELETE if v is None
                    else AlterConfigOpType.SET) for k, v in ops.items()])
    return admin.incremental_alter_configs([res], **REQ)[res]


def failure(future) -> tuple[int, str]:
    with pytest.raises(KafkaException) as info:
        future.result(timeout=20)
    return info.value.args[0].code(), info.value.args[0].str()


def test_broker_throttle_rates_alter_describe_and_refuse_bad_values(broker):
    admin = confluent_admin(broker.bootstrap)
    node = str(broker.node_id)
    this = ConfigResource(ResourceType.BROKER, node)
    assert not set(RATES) & set(describe(admin, this))  # dynamic-only: not listed while unset
    try:
        incremental(admin, ResourceType.BROKER, node, leader__replication__throttled__rate="1000000",
                    follower__replication__throttled__rate="2000000").result(timeout=20)
        got = describe(admin, this)
        for name, value in zip(RATES, ("1000000", "2000000"), strict=True):
            e = got[name]
            assert (e.value, e.source, e.is_read_only, e.is_sensitive) == (
                value, ConfigSource.DYNAMIC_BROKER_CONFIG.value, False, False)
            # no DEFAULT_CONFIG synonym: Kafka's KafkaConfig does not define them
            assert [(s.name, s.value, s.source) for s in e.synonyms.values()] == [
                (name, value, ConfigSource.DYNAMIC_BROKER_CONFIG.value)]
        code, text = failure(incremental(admin, ResourceType.BROKER, node,
                                         leader__replication__throttled__rate="fast"))
        assert code == KafkaError.INVALID_REQUEST
        assert text == ("Invalid value fast for configuration leader.replication.throttled.rate: Not a number of "
                        "type LONG")
        code, text = failure(incremental(admin, ResourceType.BROKER, node,
                                         follower__replication__throttled__rate="-1"))
        assert code == KafkaError.INVALID_REQUEST
        assert text == "Invalid value -1 for configuration follower.replication.throttled.rate: Value must be at least 0"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # alter_configs is deprecated in the client
            legacy = ConfigResource(ResourceType.BROKER, node, set_config={RATES[0]: "9223372036854775808"})
            code, text = failure(admin.alter_configs([legacy], **REQ)[legacy])
        assert code == KafkaError.INVALID_REQUEST and "Not a number of type LONG" in text
        assert describe(admin, this)[RATES[0]].value == "1000000"  # the refused changes changed nothing
    finally:
        incremental(admin, ResourceType.BROKER, node, leader__replication__throttled__rate=None,
                    follower__replication__throttled__rate=None).result(timeout=20)
    assert not set(RATES) & set(describe(admin, this))


def test_topic_throttled_replicas_validate_as_kafka_does(broker, topic):
    create(broker.bootstrap, topic, 2)
    admin = confluent_admin(broker.bootstrap)
    t = ConfigResource(ResourceType.TOPIC, topic)
    got = describe(admin, t)
    for name in LISTS:  # a topic config with an empty default and no broker synonym
        assert (got[name].value, got[name].source) == ("", ConfigSource.DEFAULT_CONFIG.value)
    incremental(admin, ResourceType.TOPIC, topic, leader__replication__throttled__replicas="0:1,1:1",
                follower__replication__throttled__replicas="*").result(timeout=20)
    got = describe(admin, t)
    assert (got[LISTS[0]].value, got[LISTS[0]].source) == ("0:1,1:1", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert got[LISTS[1]].value == "*"

    code, text = failure(incremental(admin, ResourceType.TOPIC, topic,
                                     follower__replication__throttled__replicas="0:1,all"))
    assert code == KafkaError.INVALID_CONFIG
    assert text == f"Invalid value [0:1, all] for configuration {LISTS[1]}: {LISTS[1]} {LIST_RULE}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        legacy = ConfigResource(ResourceType.TOPIC, topic, set_config={LISTS[0]: "*,0:1"})
        code, text = failure(admin.alter_configs([legacy], **REQ)[legacy])
    assert code == KafkaError.INVALID_CONFIG
    assert text == f"Invalid value [*, 0:1] for configuration {LISTS[0]}: {LISTS[0]} {LIST_RULE}"
    assert describe(admin, t)[LISTS[0]].value == "0:1,1:1"  # unchanged
    fs = admin.create_topics([NewTopic(topic + "-bad", 1, 1, config={LISTS[0]: "0-1"})], **REQ)
    code, text = failure(fs[topic + "-bad"])
    assert code == KafkaError.INVALID_CONFIG and text.endswith(f"{LISTS[0]} {LIST_RULE}")
