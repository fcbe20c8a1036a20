"""Dynamic broker configs (KIP-226) and KIP-966's cluster-level min.insync.replicas with real clients.

- confluent-kafka-python's upstream tests/integration/admin/test_incremental_alter_configs.py
  (written against a Kafka 4.2 broker): both steps, with the min.insync.replicas entry every
  topic reports because the controller wrote the cluster-level value at activation. (Its third
  step, GROUP configs, runs upstream only with the consumer group protocol; it is reproduced in
  tests/clients/test_group_configs.py.)
- BROKER resources through confluent-kafka (per-broker and the cluster-wide default "") and
  kafka-python 3.0.12 (per-broker only: its admin client refuses a non-integer broker name):
  alter, describe with sources and synonyms, Kafka's errors, and the value taking effect.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

from .adapters import confluent_admin, kafka_python_admin
from .test_admin_extra import REQ, create, non_default


def describe(admin, resource):
    return admin.describe_configs([resource], **REQ)[resource].result(timeout=20)


def test_confluent_incremental_alter_configs_upstream_flow(broker, topic):
    """confluent-kafka-python's test_incremental_alter_configs against a Kafka 4.2 broker."""
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
    assert len(fs) == 2 and [f.result(timeout=20) for f in fs.values()] == [None, None]
    assert non_default(admin, first) == ['cleanup.policy="delete,compact"', 'compression.type="gzip"',
                                         'min.insync.replicas="1"', 'retention.ms="10000"']
    assert non_default(admin, second) == ['cleanup.policy=""', 'compression.type="gzip"',
                                          'min.insync.replicas="1"', 'retention.ms="5000"']
    # the min.insync.replicas entry is the cluster-level dynamic default, not a topic override
    entry = describe(admin, ConfigResource(ResourceType.TOPIC, first))["min.insync.replicas"]
    assert entry.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    # second step: delete an entry and change another
    res2 = ConfigResource(ResourceType.TOPIC, second, incremental_configs=[
        ConfigEntry("compression.type", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("retention.ms", "10000", incremental_operation=AlterConfigOpType.SET)])
    fs = admin.incremental_alter_configs([res2], **REQ)
    assert len(fs) == 1 and fs[res2].result(timeout=20) is None
    assert non_default(admin, second) == ['cleanup.policy=""', 'min.insync.replicas="1"', 'retention.ms="10000"']


def test_confluent_broker_resources_alter_and_describe(broker, topic):
    # librdkafka refuses an empty resource name, so the cluster-wide default ("") is covered
    # by tests/server/test_dynamic_configs_wire.py; here the per-broker resource
    admin = confluent_admin(broker.bootstrap)
    node = str(broker.node_id)
    this = ConfigResource(ResourceType.BROKER, node, incremental_configs=[
        ConfigEntry("log.retention.ms", "86400000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("log.cleaner.backoff.ms", "1000", incremental_operation=AlterConfigOpType.SET)])
    assert admin.incremental_alter_configs([this], **REQ)[this].result(timeout=20) is None
    try:
        mine = describe(admin, ConfigResource(ResourceType.BROKER, node))
        e = mine["log.cleaner.backoff.ms"]
        assert (e.value, e.source, e.is_read_only) == ("1000", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False)
        e = mine["log.retention.ms"]
        assert (e.value, e.source) == ("86400000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        # (confluent keys synonyms by name, so a chain that repeats a name shows its last entry)
        assert [(s.name, s.value, s.source) for s in e.synonyms.values()] == [
            ("log.retention.ms", "86400000", ConfigSource.DYNAMIC_BROKER_CONFIG.value),
            ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG.value)]
        m = mine["min.insync.replicas"]
        assert (m.value, m.source) == ("1", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
        assert mine["log.dirs"].is_read_only and mine["log.dirs"].source == ConfigSource.STATIC_BROKER_CONFIG.value
        # a topic without an override now reports (and uses) the broker value
        create(broker.bootstrap, topic)
        t = describe(admin, ConfigResource(ResourceType.TOPIC, topic))["retention.ms"]
        assert (t.value, t.source) == ("86400000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        # Kafka's errors
        bad = ConfigResource(ResourceType.BROKER, node, incremental_configs=[
            ConfigEntry("log.dirs", "/x", incremental_operation=AlterConfigOpType.SET)])
        with pytest.raises(KafkaException) as info:
            admin.incremental_alter_configs([bad], **REQ)[bad].result(timeout=20)
        assert info.value.args[0].code() == KafkaError.INVALID_REQUEST
        assert "Cannot update these configs dynamically: Set(log.dirs)" in info.value.args[0].str()
        elr = ConfigResource(ResourceType.BROKER, node, incremental_configs=[
            ConfigEntry("min.insync.replicas", "1", incremental_operation=AlterConfigOpType.SET)])
        with pytest.raises(KafkaException) as info:
            admin.incremental_alter_configs([elr], **REQ)[elr].result(timeout=20)
        assert info.value.args[0].code() == KafkaError.INVALID_CONFIG
        assert "Broker-level min.insync.replicas cannot be altered while ELR is enabled." in info.value.args[0].str()
    finally:
        undo = ConfigResource(ResourceType.BROKER, node, incremental_configs=[
            ConfigEntry("log.retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
            ConfigEntry("log.cleaner.backoff.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
        admin.incremental_alter_configs([undo], **REQ)[undo].result(timeout=20)
    assert describe(admin, ConfigResource(ResourceType.TOPIC, topic))["retention.ms"].value == "604800000"


def test_kafka_python_broker_resource_alter_describe_and_reset(broker_factory):
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType as KType

    node = broker_factory()
    admin = kafka_python_admin(node.bootstrap)
    name = str(node.node_id)
    try:
        # the default path is IncrementalAlterConfigs (the broker advertises it)
        res = KConfigResource(KType.BROKER, name, configs={"log.cleaner.backoff.ms": "2000",
                                                           "message.max.bytes": "2000000"})
        assert admin.alter_configs([res]) == {"broker": {name: "OK"}}
        # kafka-python's default "modified" view leaves out sources 3-5, so the cluster-level
        # min.insync.replicas (DYNAMIC_DEFAULT_BROKER_CONFIG) is not listed
        got = admin.describe_configs([KConfigResource(KType.BROKER, name)], include_synonyms=True)["broker"][name]
        assert {k: (v["value"], v["config_source"]) for k, v in got.items()} == {
            "log.cleaner.backoff.ms": ("2000", "DYNAMIC_BROKER_CONFIG"),
            "message.max.bytes": ("2000000", "DYNAMIC_BROKER_CONFIG")}
        assert [(s["name"], s["value"], s["source"]) for s in got["message.max.bytes"]["synonyms"]] == [
            ("message.max.bytes", "2000000", "DYNAMIC_BROKER_CONFIG"),
            ("message.max.bytes", "1048588", "DEFAULT_CONFIG")]
        # legacy AlterConfigs: the client re-sends the other modified keys itself
        res = KConfigResource(KType.BROKER, name, configs={"log.cleaner.backoff.ms": "3000"})
        assert admin.alter_configs([res], incremental=False) == {"broker": {name: "OK"}}
        got = admin.describe_configs([KConfigResource(KType.BROKER, name)])["broker"][name]
        assert got["log.cleaner.backoff.ms"]["value"] == "3000"
        assert got["message.max.bytes"]["value"] == "2000000"
        # a read-only key: Kafka's message (the client's own check is skipped)
        res = KConfigResource(KType.BROKER, name, configs={"log.dirs": "/x"})
        assert admin.alter_configs([res], raise_on_unknown=False) == {"broker": {name: (
            "[Error 42] InvalidRequestError: Cannot update these configs dynamically: Set(log.dirs)")}}
        # reset_configs deletes the dynamic values
        admin.reset_configs([KConfigResource(KType.BROKER, name, configs=["message.max.bytes",
                                                                           "log.cleaner.backoff.ms"])])
        got = admin.describe_configs([KConfigResource(KType.BROKER, name)])["broker"][name]
        assert got == {}
        res = KConfigResource(KType.BROKER, name, configs={"num.io.threads": "4"})
        assert admin.alter_configs([res]) == {"broker": {name: "OK"}}
    finally:
        admin.close()
    node.restart()
    admin = kafka_python_admin(node.bootstrap)
    try:
        got = admin.describe_configs([KConfigResource(KType.BROKER, name)])["broker"][name]
        assert {k: (v["value"], v["config_source"]) for k, v in got.items()} == {
            "num.io.threads": ("4", "DYNAMIC_BROKER_CONFIG")}
        every = admin.describe_configs([KConfigResource(KType.BROKER, name, configs=["min.insync.replicas"])],
                                       config_filter="all")["broker"][name]
        assert every["min.insync.replicas"]["config_source"] == "DYNAMIC_DEFAULT_BROKER_CONFIG"
    finally:
        admin.close()
