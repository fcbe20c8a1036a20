"""GROUP config resources (KIP-848 dynamic group configs) with confluent-kafka 2.16.

- The third step of confluent-kafka-python's upstream
  tests/integration/admin/test_incremental_alter_configs.py (its consumer-group-protocol
  run): SET consumer.session.timeout.ms on "test-group", then describe shows exactly that
  one non-default entry.
- Sources as the client maps them (GROUP_CONFIG / DEFAULT_CONFIG), DELETE, validate_only, and
  a refused value surfacing as INVALID_CONFIG with Kafka's message.
- The node runs with confluent-kafka's harness setting group.share.min.record.lock.duration.ms
  (tests/common TestUtils.broker_conf): the share bounds come from it, typed (the raw string
  once made every GROUP alter fail with an internal error that closed the connection).
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

from .adapters import confluent_admin
from .test_admin_extra import REQ

# confluent-kafka-python's integration harness (tests/common/__init__.py broker_conf) sets these.
BROKER_OVERRIDES = {
    "group.share.record.lock.duration.ms": "1000",
    "group.share.min.record.lock.duration.ms": "1000",
}


def group_resource(name: str, *entries: ConfigEntry) -> ConfigResource:
    return ConfigResource(ResourceType.GROUP, name, incremental_configs=list(entries))


def describe(admin, name: str) -> dict:
    resource = ConfigResource(ResourceType.GROUP, name)
    return admin.describe_configs([resource], **REQ)[resource].result(timeout=20)


def non_default(admin, name: str) -> list[str]:
    return sorted(str(e) for e in describe(admin, name).values() if not e.is_default)


def test_confluent_incremental_alter_configs_group_step(broker):
    """Upstream's GROUP step, verbatim in what it checks."""
    admin = confluent_admin(broker.bootstrap)
    res_group = group_resource("test-group", ConfigEntry(
        "consumer.session.timeout.ms", "50000", incremental_operation=AlterConfigOpType.SET))
    fs = admin.incremental_alter_configs([res_group], **REQ)
    assert len(fs) == 1 and fs[res_group].result(timeout=20) is None
    assert non_default(admin, "test-group") == ['consumer.session.timeout.ms="50000"']


def test_confluent_group_config_sources_delete_and_validate_only(broker):
    admin = confluent_admin(broker.bootstrap)
    name = "gcc-sources"
    entry = ConfigEntry("consumer.heartbeat.interval.ms", "6000", incremental_operation=AlterConfigOpType.SET)
    fs = admin.incremental_alter_configs([group_resource(name, entry)], validate_only=True, **REQ)
    assert [f.result(timeout=20) for f in fs.values()] == [None]
    assert non_default(admin, name) == []
    fs = admin.incremental_alter_configs([group_resource(name, entry)], **REQ)
    assert [f.result(timeout=20) for f in fs.values()] == [None]
    configs = describe(admin, name)
    assert configs["consumer.heartbeat.interval.ms"].source == ConfigSource.GROUP_CONFIG.value
    assert configs["consumer.session.timeout.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["consumer.session.timeout.ms"].value == "45000"  # Kafka's group.consumer default
    fs = admin.incremental_alter_configs([group_resource(name, ConfigEntry(
        "consumer.heartbeat.interval.ms", None, incremental_operation=AlterConfigOpType.DELETE))], **REQ)
    assert [f.result(timeout=20) for f in fs.values()] == [None]
    assert non_default(admin, name) == []


def test_confluent_refused_group_config(broker):
    admin = confluent_admin(broker.bootstrap)
    res = group_resource("gcc-bad", ConfigEntry("consumer.session.timeout.ms", "1000",
                                                incremental_operation=AlterConfigOpType.SET))
    with pytest.raises(KafkaException) as exc:
        admin.incremental_alter_configs([res], **REQ)[res].result(timeout=20)
    err = exc.value.args[0]
    assert err.code() == KafkaError.INVALID_CONFIG
    assert "consumer.session.timeout.ms must be greater than or equal to " \
           "group.consumer.min.session.timeout.ms" in err.str()
    assert non_default(admin, "gcc-bad") == []


def test_confluent_group_config_bounds_from_share_broker_configs(broker):
    """share.record.lock.duration.ms may go down to the node's group.share.min.record.lock.duration.ms
    (1000 here; Kafka's default, 15000, would refuse 1500), its default is the node's
    group.share.record.lock.duration.ms, and the upper bound is still checked."""
    admin = confluent_admin(broker.bootstrap)
    name = "gcc-share-bounds"
    assert describe(admin, name)["share.record.lock.duration.ms"].value == "1000"
    res = group_resource(name, ConfigEntry("share.record.lock.duration.ms", "1500",
                                           incremental_operation=AlterConfigOpType.SET))
    assert admin.incremental_alter_configs([res], **REQ)[res].result(timeout=20) is None
    assert non_default(admin, name) == ['share.record.lock.duration.ms="1500"']
    res = group_resource(name, ConfigEntry("share.record.lock.duration.ms", "60001",
                                           incremental_operation=AlterConfigOpType.SET))
    with pytest.raises(KafkaException) as exc:
        admin.incremental_alter_configs([res], **REQ)[res].result(timeout=20)
    err = exc.value.args[0]
    assert err.code() == KafkaError.INVALID_CONFIG
    assert "share.record.lock.duration.ms must be less than or equal to " \
           "group.share.max.record.lock.duration.ms" in err.str()
