"""Per-topic storage settings (Kafka's LogConfig), under Kafka's topic-level config names.

`LogConfig` is an immutable dataclass whose attributes are the snake_case of Kafka's topic
config names (`segment.bytes` -> `segment_bytes`). It is built from broker defaults
(`LogConfig.from_broker_props`, Kafka's `log.*` names) and then topic overrides
(`with_overrides`, topic names). Defaults are Kafka's.

Deliberate simplifications: `segment.jitter.ms` is honoured as a fixed value (no random jitter,
so tests are deterministic); `message.timestamp.before/after.max.ms` are carried but enforced by the
caller's validation, not by the log.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

LONG_MAX = 2**63 - 1

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"

# topic config name -> attribute
TOPIC_CONFIG_NAMES: dict[str, str] = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "segment.jitter.ms": "segment_jitter_ms",
    "segment.index.bytes": "segment_index_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "flush.messages": "flush_messages",
    "flush.ms": "flush_ms",
    "message.timestamp.type": "message_timestamp_type",
    "message.timestamp.before.max.ms": "message_timestamp_before_max_ms",
    "message.timestamp.after.max.ms": "message_timestamp_after_max_ms",
    "max.message.bytes": "max_message_bytes",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "cleanup.policy": "cleanup_policy",
    "delete.retention.ms": "delete_retention_ms",
    "file.delete.delay.ms": "file_delete_delay_ms",
    "min.cleanable.dirty.ratio": "min_cleanable_dirty_ratio",
    "min.compaction.lag.ms": "min_compaction_lag_ms",
    "max.compaction.lag.ms": "max_compaction_lag_ms",
    "min.insync.replicas": "min_insync_replicas",
    "unclean.leader.election.enable": "unclean_leader_election_enable",
    "compression.type": "compression_type",
    "preallocate": "preallocate",
}

# broker (server.properties) name -> topic config name. Hours/minutes variants are handled in
# from_broker_props because they need unit conversion.
BROKER_CONFIG_NAMES: dict[str, str] = {
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.roll.jitter.ms": "segment.jitter.ms",
    "log.index.size.max.bytes": "segment.index.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "log.message.timestamp.type": "message.timestamp.type",
    "log.message.timestamp.before.max.ms": "message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms": "message.timestamp.after.max.ms",
    "message.max.bytes": "max.message.bytes",
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "log.cleanup.policy": "cleanup.policy",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.segment.delete.delay.ms": "file.delete.delay.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "compression.type": "compression.type",
    "log.preallocate": "preallocate",
}

# Kafka's *.hours / *.minutes fallbacks: (name, topic name, ms per unit). The ms variant wins,
# and earlier rows beat later ones (log.retention.minutes over log.retention.hours).
_UNIT_FALLBACKS = (
    ("log.roll.hours", "segment.ms", 3_600_000),
    ("log.roll.jitter.hours", "segment.jitter.ms", 3_600_000),
    ("log.retention.minutes", "retention.ms", 60_000),
    ("log.retention.hours", "retention.ms", 3_600_000),
)

_COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3_600_000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    message_timestamp_type: str = CREATE_TIME
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    max_message_bytes: int = 1024 * 1024 + 12
    retention_ms: int = 7 * 24 * 3_600_000
    retention_bytes: int = -1
    cleanup_policy: str = "delete"
    delete_retention_ms: int = 86_400_000
    file_delete_delay_ms: int = 60_000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    compression_type: str = "producer"
    preallocate: bool = False

    def __post_init__(self) -> None:
        def need(cond: bool, name: str, what: str) -> None:
            if not cond:
                raise ValueError(f"invalid value for {name}: {what}")

        # Kafka's lower bounds (LogConfig's ConfigDef validators).
        need(self.segment_bytes >= 14, "segment.bytes", f"{self.segment_bytes} < 14")
        need(self.segment_ms >= 1, "segment.ms", f"{self.segment_ms} < 1")
        need(self.segment_jitter_ms >= 0, "segment.jitter.ms", "negative")
        need(self.segment_index_bytes >= 4, "segment.index.bytes", f"{self.segment_index_bytes} < 4")
        need(self.index_interval_bytes >= 0, "index.interval.bytes", "negative")
        need(self.flush_messages >= 1, "flush.messages", f"{self.flush_messages} < 1")
        need(self.flush_ms >= 0, "flush.ms", "negative")
        need(self.message_timestamp_type in (CREATE_TIME, LOG_APPEND_TIME),
             "message.timestamp.type", f"{self.message_timestamp_type!r} is not CreateTime or LogAppendTime")
        need(self.max_message_bytes >= 0, "max.message.bytes", "negative")
        need(self.retention_ms >= -1, "retention.ms", f"{self.retention_ms} < -1")
        for policy in self.cleanup_policy.split(","):
            need(policy.strip() in ("delete", "compact", ""), "cleanup.policy", repr(self.cleanup_policy))
        need(0.0 <= self.min_cleanable_dirty_ratio <= 1.0, "min.cleanable.dirty.ratio", "not in [0, 1]")
        need(self.min_insync_replicas >= 1, "min.insync.replicas", f"{self.min_insync_replicas} < 1")
        need(self.compression_type in _COMPRESSION_TYPES, "compression.type", repr(self.compression_type))

    @property
    def max_index_size(self) -> int:
        return self.segment_index_bytes

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == LOG_APPEND_TIME

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    def with_overrides(self, overrides: Mapping[str, Any]) -> LogConfig:
        """A copy with topic-level overrides applied (Kafka's topic config names; values str or typed)."""
        changes: dict[str, Any] = {}
        for name, value in overrides.items():
            attr = TOPIC_CONFIG_NAMES.get(name)
            if attr is None:
                continue  # not a storage setting (e.g. a broker-only or unknown name): ignored here
            changes[attr] = _coerce(name, attr, value)
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_broker_props(cls, props: Mapping[str, Any]) -> LogConfig:
        """Broker defaults from server.properties names (log.segment.bytes, log.roll.hours, ...)."""
        topic: dict[str, Any] = {}
        for broker_name, unit_topic_name, unit_ms in _UNIT_FALLBACKS:
            if props.get(broker_name) is not None and unit_topic_name not in topic:
                topic[unit_topic_name] = int(props[broker_name]) * unit_ms
        for broker_name, topic_name in BROKER_CONFIG_NAMES.items():
            if props.get(broker_name) is not None:
                topic[topic_name] = props[broker_name]
        return cls().with_overrides(topic)


def _coerce(name: str, attr: str, value: Any) -> Any:
    field_type = type(getattr(LogConfig(), attr))
    try:
        if field_type is bool:
            if isinstance(value, str):
                if value.strip().lower() not in ("true", "false"):
                    raise ValueError(value)
                return value.strip().lower() == "true"
            return bool(value)
        if field_type is int:
            return int(str(value).strip()) if isinstance(value, str) else int(value)
        if field_type is float:
            return float(value)
        return str(value).strip()
    except ValueError:
        raise ValueError(f"invalid value for {name}: {value!r} is not a {field_type.__name__}") from None
