from __future__ import annotations

import pytest

from pybroker.log.config import LONG_MAX, LogConfig


def test_kafka_defaults():
    c = LogConfig()
    assert (c.segment_bytes, c.segment_ms, c.segment_index_bytes, c.index_interval_bytes) == (
        1073741824, 604800000, 10485760, 4096)
    assert (c.flush_messages, c.flush_ms, c.max_message_bytes) == (LONG_MAX, LONG_MAX, 1048588)
    assert c.message_timestamp_type == "CreateTime" and c.cleanup_policy == "delete"


def test_broker_names_and_unit_fallbacks():
    c = LogConfig.from_broker_props({"log.segment.bytes": "2048", "log.roll.hours": "2",
                                     "log.retention.hours": "1", "log.retention.minutes": "5",
                                     "log.flush.interval.messages": 10, "message.max.bytes": "999",
                                     "log.message.timestamp.type": "LogAppendTime"})
    assert c.segment_bytes == 2048 and c.segment_ms == 7_200_000
    assert c.retention_ms == 300_000  # minutes beat hours
    assert c.flush_messages == 10 and c.max_message_bytes == 999 and c.log_append_time
    assert LogConfig.from_broker_props({"log.roll.hours": 2, "log.roll.ms": 5}).segment_ms == 5


def test_topic_overrides():
    base = LogConfig.from_broker_props({"log.segment.bytes": 4096})
    c = base.with_overrides({"segment.bytes": "1000", "cleanup.policy": "compact,delete",
                             "preallocate": "true", "not.a.log.config": "x"})
    assert c.segment_bytes == 1000 and c.compact and c.delete and c.preallocate
    assert base.segment_bytes == 4096


@pytest.mark.parametrize("name,value", [("segment.bytes", "10"), ("segment.bytes", "big"),
                                        ("message.timestamp.type", "WallTime"),
                                        ("preallocate", "maybe"), ("cleanup.policy", "archive")])
def test_invalid_values_name_the_setting(name, value):
    with pytest.raises(ValueError, match=name.replace(".", r"\.")):
        LogConfig().with_overrides({name: value})
