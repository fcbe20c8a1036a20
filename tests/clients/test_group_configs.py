"""GROUP config resources (KIP-848 dynamic group configs) with confluent-kafka 2.16.

- The third step of confluent-kafka-python's upstream
  tests/integration/admin/test_incremental_alter_configs.py (its consumer-group-protocol
  run): SET consumer.session.timeout.ms on "test-group", then describe shows exactly that
  one non-default entry.
- Sources as the client maps them (GROUP_CONFIG / DEFAULT_CONFIG), DELETE, validate_only, and
  a refused value surfacing as INVALID_CONFIG with Kafka's message.
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
