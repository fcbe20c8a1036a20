"""rlmm.config keys (Kafka's TopicBasedRemoteLogMetadataManagerConfig names, defaults and
checks) and RemoteLogMetadataTopicPartitioner's placement, against values computed with Java's
Objects.hash and Kafka's Utils.murmur2."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from pybroker.config import ConfigError
from pybroker.log.remote.remote_log_segment_metadata import TopicIdPartition
from pybroker.protocol.client_security import PLAINTEXT, ClientSecurity
from pybroker.tiered.rlmm_config import TopicBasedRemoteLogMetadataManagerConfig as Config
from pybroker.tiered.topic_based_rlmm import (
    RemoteLogMetadataTopicPartitioner,
    TopicBasedRemoteLogMetadataManager,
)


def test_defaults_are_kafkas() -> None:
    c = Config.parse({}, node_id=7)
    assert (c.metadata_topic_replication_factor, c.metadata_topic_partitions_count, c.metadata_topic_retention_ms,
            c.consume_wait_ms, c.initialization_retry_max_timeout_ms, c.initialization_retry_interval_ms) == \
        (3, 50, -1, 120_000, 120_000, 100)
    assert c.client_id_prefix == "__remote_log_metadata_client_7"
    assert c.topic_configs() == {"retention.ms": "-1", "cleanup.policy": "delete", "remote.storage.enable": "false"}


def test_a_standalone_node_uses_replication_factor_one_unless_set() -> None:
    assert Config.parse({}, node_id=1, standalone=True).metadata_topic_replication_factor == 1
    assert Config.parse({"remote.log.metadata.topic.replication.factor": "2"}, node_id=1,
                        standalone=True).metadata_topic_replication_factor == 2


def test_client_properties_merge_common_then_specific() -> None:
    c = Config.parse({"remote.log.metadata.common.client.request.timeout.ms": "5000",
                      "remote.log.metadata.common.client.bootstrap.servers": "h:1",
                      "remote.log.metadata.producer.request.timeout.ms": "7000",
                      "remote.log.metadata.consumer.fetch.max.wait.ms": "50",
                      "remote.log.metadata.common.client.security.protocol": "SSL"}, node_id=1)
    assert c.producer.int("request.timeout.ms", 0) == 7000 and c.consumer.int("request.timeout.ms", 0) == 5000
    assert c.consumer.int("fetch.max.wait.ms", 0) == 50 and c.producer.props["bootstrap.servers"] == "h:1"
    assert c.common.security_props() == {"security.protocol": "SSL"}


@pytest.mark.parametrize("key, value, message", [
    ("remote.log.metadata.topic.num.partitions", "0", "Value must be at least 1"),
    ("remote.log.metadata.topic.replication.factor", "40000", "Expected value to be a short"),
    ("remote.log.metadata.topic.retention.ms", "0", "Invalid metadata topic retention in millis: 0"),
    ("remote.log.metadata.consume.wait.ms", "-1", "Value must be at least 0"),
    ("remote.log.metadata.initialization.retry.interval.ms", "x", "Expected value to be a long"),
])
def test_bad_values_are_config_errors_naming_the_key(key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as e:
        Config.parse({key: value}, node_id=1)
    assert key in str(e.value)


def test_security_keys_in_the_client_properties_override_the_listeners() -> None:
    props = {"remote.log.metadata.common.client.security.protocol": "SASL_PLAINTEXT"}
    with pytest.raises(ConfigError, match="sasl.mechanism"):  # checked as Kafka client properties (GSSAPI default)
        TopicBasedRemoteLogMetadataManager(bootstrap_servers="h:1", node_id=1, configs=props)
    seen: list[dict[str, str]] = []

    def factory(p: Mapping[str, str]) -> ClientSecurity:
        seen.append(dict(p))
        return PLAINTEXT

    TopicBasedRemoteLogMetadataManager(bootstrap_servers="h:1", node_id=1, configs=props, security_factory=factory)
    assert seen == [{"security.protocol": "SASL_PLAINTEXT"}] * 3  # common, producer, consumer


def _tid(msb: int, lsb: int) -> bytes:
    return (msb & (2**64 - 1)).to_bytes(8, "big") + (lsb & (2**64 - 1)).to_bytes(8, "big")


# (topic id msb, lsb, partition, metadata partitions) -> Kafka's choice, from jshell with
# java.util.Objects.hash and org.apache.kafka.common.utils.Utils.murmur2
@pytest.mark.parametrize("msb, lsb, partition, n, expected", [
    (0x0102030405060708, 0x090A0B0C0D0E0F10, 0, 50, 13),
    (0x0102030405060708, 0x090A0B0C0D0E0F10, 7, 50, 18),
    (0xF102030405060708 - 2**64, 0x890A0B0C0D0E0F10 - 2**64, 12345, 50, 22),
    (-1, -2, 3, 7, 3),
    (0x1234567890ABCDEF, 0xFEDCBA0987654321 - 2**64, 0, 1000, 33),
])
def test_partitioner_places_as_kafka(msb: int, lsb: int, partition: int, n: int, expected: int) -> None:
    tp = TopicIdPartition(_tid(msb, lsb), "any-name", partition)  # the name plays no part
    assert RemoteLogMetadataTopicPartitioner(n).metadata_partition(tp) == expected
