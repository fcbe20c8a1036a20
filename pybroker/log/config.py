"""Per-topic storage settings (Kafka's LogConfig), built from the one topic-config table.

The table is `pybroker.config.TOPIC_CONFIGS`: every topic-level config's name, type, Kafka
default, validator and broker synonym. It sits in the bottom layer (pybroker/config.py imports
nothing of pybroker), so the log reads it without importing the server layer, and the broker
config, CreateTopics/AlterConfigs validation, DescribeConfigs and this class all see the same
facts. `LogConfig` adds nothing to it but a typed attribute per config (the snake_case of the
name: `segment.bytes` -> `segment_bytes`), whose default, parsing and validation come from the
table; the module refuses to import if the attributes and the table ever differ.

Values: `LogConfig(segment_bytes=...)` and `with_overrides({"segment.bytes": "1000"})` take
typed values or the strings of a properties file / the metadata log, parsed as Kafka's
ConfigDef does; list configs (cleanup.policy) become tuples. Bad values raise ConfigError (a
ValueError naming the setting). Topic values over broker defaults are merged by the caller
(BrokerConfig.topic_defaults() then the topic's overrides).

Deliberate simplifications: `segment.jitter.ms` is honoured as a fixed value (no random
jitter, so tests are deterministic).

Tiered storage (KIP-405): `remote_storage_enable` tiers the topic only on a node with
remote.log.storage.system.enable (UnifiedLog.remote_log_enabled decides, with the node's
setting); `local_retention_ms_effective` / `local_retention_bytes_effective` are Kafka's
LogConfig.localRetentionMs/Bytes (-2: the total retention.ms / retention.bytes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pybroker.config import LONG_MAX, TOPIC_CONFIGS, ConfigDef

__all__ = ["CREATE_TIME", "LOG_APPEND_TIME", "LONG_MAX", "LogConfig", "attribute_name"]

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"


def attribute_name(config_name: str) -> str:
    """`segment.bytes` -> `segment_bytes`."""
    return config_name.replace(".", "_")


_DEFS: dict[str, ConfigDef] = {attribute_name(name): d for name, (d, _syn) in TOPIC_CONFIGS.items()}


def _default(config_name: str) -> Any:
    value = TOPIC_CONFIGS[config_name][0].default
    return tuple(value) if isinstance(value, list) else value


@dataclass(frozen=True, slots=True)
class LogConfig:
    """One attribute per entry of TOPIC_CONFIGS, alphabetical (checked at import)."""

    cleanup_policy: tuple[str, ...] = _default("cleanup.policy")
    compression_gzip_level: int = _default("compression.gzip.level")
    compression_lz4_level: int = _default("compression.lz4.level")
    compression_type: str = _default("compression.type")
    compression_zstd_level: int = _default("compression.zstd.level")
    delete_retention_ms: int = _default("delete.retention.ms")
    file_delete_delay_ms: int = _default("file.delete.delay.ms")
    flush_messages: int = _default("flush.messages")
    flush_ms: int = _default("flush.ms")
    follower_replication_throttled_replicas: tuple[str, ...] = _default("follower.replication.throttled.replicas")
    index_interval_bytes: int = _default("index.interval.bytes")
    leader_replication_throttled_replicas: tuple[str, ...] = _default("leader.replication.throttled.replicas")
    local_retention_bytes: int = _default("local.retention.bytes")
    local_retention_ms: int = _default("local.retention.ms")
    max_compaction_lag_ms: int = _default("max.compaction.lag.ms")
    max_message_bytes: int = _default("max.message.bytes")
    message_timestamp_after_max_ms: int = _default("message.timestamp.after.max.ms")
    message_timestamp_before_max_ms: int = _default("message.timestamp.before.max.ms")
    message_timestamp_type: str = _default("message.timestamp.type")
    min_cleanable_dirty_ratio: float = _default("min.cleanable.dirty.ratio")
    min_compaction_lag_ms: int = _default("min.compaction.lag.ms")
    min_insync_replicas: int = _default("min.insync.replicas")
    preallocate: bool = _default("preallocate")
    remote_log_copy_disable: bool = _default("remote.log.copy.disable")
    remote_log_delete_on_disable: bool = _default("remote.log.delete.on.disable")
    remote_storage_enable: bool = _default("remote.storage.enable")
    retention_bytes: int = _default("retention.bytes")
    retention_ms: int = _default("retention.ms")
    segment_bytes: int = _default("segment.bytes")
    segment_index_bytes: int = _default("segment.index.bytes")
    segment_jitter_ms: int = _default("segment.jitter.ms")
    segment_ms: int = _default("segment.ms")
    unclean_leader_election_enable: bool = _default("unclean.leader.election.enable")
    # derived, not a config: cached because the produce path reads it per batch
    compact: bool = field(init=False, repr=False, compare=False, default=False)

    def __post_init__(self) -> None:
        # parse strings and validate every value with the table's definition
        for attr, d in _DEFS.items():
            raw = getattr(self, attr)
            value = d.parse(raw)
            if d.validator is not None:
                d.validator(d.name, list(value) if isinstance(value, tuple) else value)
            if isinstance(value, list):
                value = tuple(value)
            if value is not raw:
                object.__setattr__(self, attr, value)
        object.__setattr__(self, "compact", "compact" in self.cleanup_policy)

    @property
    def max_index_size(self) -> int:
        return self.segment_index_bytes

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == LOG_APPEND_TIME

    @property
    def local_retention_ms_effective(self) -> int:
        """Kafka's LogConfig.localRetentionMs: local.retention.ms, -2 meaning retention.ms."""
        return self.retention_ms if self.local_retention_ms == -2 else self.local_retention_ms

    @property
    def local_retention_bytes_effective(self) -> int:
        """Kafka's LogConfig.localRetentionBytes: local.retention.bytes, -2 meaning retention.bytes."""
        return self.retention_bytes if self.local_retention_bytes == -2 else self.local_retention_bytes

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    def compression_level(self, codec_name: str) -> int | None:
        """The topic's compression.<codec>.level (Kafka's levels: gzip -1 = zlib's default,
        lz4 9 = the fast compressor); None for codecs without a level (snappy)."""
        return getattr(self, f"compression_{codec_name}_level", None)

    def with_overrides(self, overrides: Mapping[str, Any]) -> LogConfig:
        """A copy with topic-level settings applied (topic config names; values str or typed).
        Names that are not topic configs are ignored (broker-only or unknown keys)."""
        changes = {attribute_name(name): value for name, value in overrides.items()
                   if attribute_name(name) in _DEFS}
        return dataclasses.replace(self, **changes)


def _check_against_table() -> None:
    fields = {f.name for f in dataclasses.fields(LogConfig) if f.init}
    if fields != set(_DEFS):
        raise ImportError(f"LogConfig and TOPIC_CONFIGS differ: only in LogConfig {sorted(fields - set(_DEFS))}, "
                          f"only in the table {sorted(set(_DEFS) - fields)}")


_check_against_table()
