"""Tiered storage's configuration: RemoteLogManagerConfig's broker keys and defaults, the plug-in
prefixes, and LogConfig's topic validation rules with Kafka's messages (the live
INVALID_CONFIG answers are in tests/server/test_tiered_copy.py)."""

from __future__ import annotations

from typing import Any

import pytest

from pybroker.config import BrokerConfig, ConfigError, validate_tiered_topic_configs
from pybroker.log.config import LogConfig


def effective(**overrides: Any) -> dict[str, Any]:
    cfg = BrokerConfig().topic_defaults()
    cfg.update({"remote.storage.enable": True, **{k.replace("_", "."): v for k, v in overrides.items()}})
    return cfg


def test_broker_keys_have_kafkas_defaults() -> None:
    cfg = BrokerConfig()
    assert cfg["remote.log.storage.system.enable"] is False
    assert cfg["remote.log.storage.manager.impl.prefix"] == "rsm.config."
    assert cfg["remote.log.metadata.manager.impl.prefix"] == "rlmm.config."
    assert cfg["remote.log.metadata.manager.class.name"] == \
        "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager"
    assert cfg["remote.log.manager.task.interval.ms"] == 30000
    assert cfg["remote.log.manager.copy.max.bytes.per.second"] == 2**63 - 1
    assert cfg["remote.log.manager.copy.quota.window.num"] == 11
    assert cfg["remote.log.reader.threads"] == 10
    assert cfg["remote.log.index.file.cache.total.size.bytes"] == 1024 * 1024 * 1024
    assert cfg["remote.fetch.max.wait.ms"] == 500
    assert (cfg["log.local.retention.ms"], cfg["log.local.retention.bytes"]) == (-2, -2)
    topic = LogConfig()
    assert (topic.remote_storage_enable, topic.remote_log_copy_disable, topic.remote_log_delete_on_disable) == \
        (False, False, False)


def test_plugin_keys_are_passed_on_stripped_and_not_warned_about() -> None:
    cfg = BrokerConfig({"rsm.config.storage.root": "/data/remote", "rsm.config.chunk.size": "4096",
                        "rlmm.config.remote.log.metadata.topic.num.partitions": "5", "not.a.key": "1"})
    assert cfg.prefixed("rsm.config.") == {"storage.root": "/data/remote", "chunk.size": "4096"}
    assert cfg.prefixed("rlmm.config.") == {"remote.log.metadata.topic.num.partitions": "5"}
    assert cfg.warnings == ["unknown configuration key 'not.a.key' was supplied but isn't a known config"]


def test_local_retention_is_at_least_minus_two() -> None:
    with pytest.raises(ConfigError, match="Value must be at least -2"):
        LogConfig().with_overrides({"local.retention.ms": "-3"})


def test_broker_local_retention_checked_when_the_system_is_on() -> None:
    with pytest.raises(ConfigError, match="Value must not be more than retention.bytes property value: 100"):
        BrokerConfig({"remote.log.storage.system.enable": "true", "log.retention.bytes": "100",
                      "log.local.retention.bytes": "200"})
    BrokerConfig({"log.retention.bytes": "100", "log.local.retention.bytes": "200"})  # off: not checked


@pytest.mark.parametrize(("overrides", "message"), [
    ({"cleanup.policy": ["compact", "delete"]}, "Remote log storage is unsupported for the compacted topics"),
    ({"retention.ms": 1000, "local.retention.ms": 2000},
     "Invalid value 2000 for configuration local.retention.ms: Value must not be more than retention.ms property "
     "value: 1000"),
    ({"retention.ms": 1000, "local.retention.ms": -1},
     "Invalid value -1 for configuration local.retention.ms: Value must not be -1 as retention.ms value is set "
     "as 1000."),
    ({"retention.bytes": 100, "local.retention.bytes": 101},
     "Invalid value 101 for configuration local.retention.bytes: Value must not be more than retention.bytes "
     "property value: 100"),
    ({"remote.log.copy.disable": True, "retention.bytes": 100, "local.retention.bytes": 50},
     "When `remote.log.copy.disable` is set to true, the `local.retention.bytes` and `retention.bytes` must be "
     "set to the identical value because there will be no more logs copied to the remote storage."),
])
def test_topic_rules_refuse_with_kafkas_messages(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_tiered_topic_configs({}, effective(**{k.replace(".", "_"): v for k, v in overrides.items()}), True)
    assert str(info.value) == message


def test_topic_rules_accept_what_kafka_accepts() -> None:
    # unbounded total retention: any local retention; -2 local: the total's
    validate_tiered_topic_configs({}, effective(retention_ms=-1, local_retention_ms=10**12), True)
    validate_tiered_topic_configs({}, effective(retention_bytes=100, local_retention_bytes=-2), True)
    validate_tiered_topic_configs({}, effective(remote_log_copy_disable=True), True)
    # not tiered: none of the rules apply, even on a node without the system
    validate_tiered_topic_configs({}, {**effective(cleanup_policy=["compact"]), "remote.storage.enable": False},
                                  False)


def test_tiering_needs_the_system_enabled() -> None:
    with pytest.raises(ConfigError, match="^Tiered Storage functionality is disabled in the broker. Topic cannot "
                                          "be configured with remote log storage.$"):
        validate_tiered_topic_configs({}, effective(), False)


def test_kip950_turning_tiering_off_needs_delete_on_disable() -> None:
    off = {**effective(), "remote.storage.enable": False}
    with pytest.raises(ConfigError, match="^It is invalid to disable remote storage without deleting remote data"):
        validate_tiered_topic_configs({"remote.storage.enable": "true"}, off, True)
    validate_tiered_topic_configs({"remote.storage.enable": "true"},
                                  {**off, "remote.log.delete.on.disable": True}, True)
    validate_tiered_topic_configs({}, off, True)  # it was never on
