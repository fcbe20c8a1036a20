"""LogConfig is built from the one topic-config table (pybroker.config.TOPIC_CONFIGS)."""

from __future__ import annotations

import pytest

from pybroker.config import TOPIC_CONFIGS, BrokerConfig
from pybroker.log.config import LONG_MAX, LogConfig, attribute_name
from pybroker.replication.replica_manager import log_config


def test_kafka_defaults():
    c = LogConfig()
    assert (c.segment_bytes, c.segment_ms, c.segment_index_bytes, c.index_interval_bytes) == (
        1073741824, 604800000, 10485760, 4096)
    assert (c.flush_messages, c.flush_ms, c.max_message_bytes) == (LONG_MAX, LONG_MAX, 1048588)
    assert c.message_timestamp_type == "CreateTime" and c.cleanup_policy == ("delete",)
    # Kafka 4.0 (KIP-1030): a record may be at most an hour ahead of the broker's clock
    assert (c.message_timestamp_after_max_ms, c.message_timestamp_before_max_ms) == (3_600_000, LONG_MAX)
    assert (c.compression_gzip_level, c.compression_lz4_level, c.compression_zstd_level) == (-1, 9, 3)


def test_every_topic_config_is_an_attribute_with_the_tables_default():
    c = LogConfig()
    for name, (d, _) in TOPIC_CONFIGS.items():
        value = getattr(c, attribute_name(name))
        assert value == (tuple(d.default) if isinstance(d.default, list) else d.default), name


def test_broker_defaults_reach_the_log_config_through_their_synonyms():
    cfg = BrokerConfig({"log.segment.bytes": "2048", "log.roll.hours": "2", "log.retention.minutes": "5",
                        "log.retention.hours": "1", "log.flush.interval.messages": "10",
                        "message.max.bytes": "999", "log.message.timestamp.type": "LogAppendTime",
                        "compression.gzip.level": "9", "log.message.timestamp.after.max.ms": "5"})
    c = log_config(cfg.topic_defaults())
    assert c.segment_bytes == 2048 and c.segment_ms == 7_200_000
    assert c.retention_ms == 300_000  # minutes beat hours
    assert c.flush_messages == 10 and c.max_message_bytes == 999 and c.log_append_time
    assert c.compression_gzip_level == 9 and c.message_timestamp_after_max_ms == 5
    assert log_config(BrokerConfig({"log.roll.hours": "2", "log.roll.ms": "5"}).topic_defaults()).segment_ms == 5


def test_topic_overrides():
    base = LogConfig(segment_bytes=4096)
    c = base.with_overrides({"segment.bytes": "1000", "cleanup.policy": "compact,delete",
                             "preallocate": "true", "compression.gzip.level": "1", "not.a.log.config": "x"})
    assert c.segment_bytes == 1000 and c.compact and c.delete and c.preallocate
    assert c.cleanup_policy == ("compact", "delete") and c.compression_level("gzip") == 1
    assert c.compression_level("snappy") is None
    assert base.segment_bytes == 4096 and not base.compact


@pytest.mark.parametrize("name,value", [("segment.bytes", "10"), ("segment.bytes", "big"),
                                        ("message.timestamp.type", "WallTime"),
                                        ("preallocate", "maybe"), ("cleanup.policy", "archive"),
                                        ("compression.gzip.level", "10"), ("compression.gzip.level", "0"),
                                        ("compression.lz4.level", "0"), ("compression.zstd.level", "23"),
                                        ("min.cleanable.dirty.ratio", "1.5")])
def test_invalid_values_name_the_setting(name, value):
    with pytest.raises(ValueError, match=name.replace(".", r"\.")):
        LogConfig().with_overrides({name: value})
