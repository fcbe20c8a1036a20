"""Group coordinator settings (Kafka's GroupCoordinatorConfig), read once from the broker config."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def _int(cfg: Any, name: str, default: int) -> int:
    # every key is declared in pybroker.config (typed and validated there); plain mappings
    # in unit tests may leave some out
    value = cfg.get(name, default)
    return default if value is None else int(value)


def _list(cfg: Any, name: str, default: tuple[str, ...]) -> tuple[str, ...]:
    value = cfg.get(name, default)
    if value is None:
        return default
    if isinstance(value, str):
        value = [v for v in value.split(",")]
    out = tuple(v.strip() for v in value if v.strip())
    return out or default


# group.consumer.migration.policy (Kafka's ConsumerGroupMigrationPolicy): name -> (upgrade, downgrade)
MIGRATION_POLICIES: dict[str, tuple[bool, bool]] = {
    "bidirectional": (True, True),
    "upgrade": (True, False),
    "downgrade": (False, True),
    "disabled": (False, False),
}


def parse_migration_policy(value: Any) -> str:
    """Kafka's ConsumerGroupMigrationPolicy.parse: case-insensitive; unknown or null -> disabled."""
    name = str(value).strip().lower() if value is not None else ""
    return name if name in MIGRATION_POLICIES else "disabled"


@dataclass(frozen=True)
class GroupConfig:
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    max_size: int = 2**31 - 1
    initial_rebalance_delay_ms: int = 3000
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600000
    offsets_topic_num_partitions: int = 50
    offsets_commit_timeout_ms: int = 5000
    # KIP-848 consumer groups
    consumer_group_session_timeout_ms: int = 45000
    consumer_group_heartbeat_interval_ms: int = 5000
    consumer_group_max_size: int = 2**31 - 1
    consumer_group_assignors: tuple[str, ...] = ("uniform", "range")
    consumer_group_migration_policy: str = "bidirectional"
    # KIP-932 share groups
    share_group_session_timeout_ms: int = 45000
    share_group_heartbeat_interval_ms: int = 5000
    share_group_max_size: int = 200
    share_group_assignors: tuple[str, ...] = ("simple",)
    share_group_initialize_retry_interval_ms: int = 30000

    @property
    def upgrade_enabled(self) -> bool:
        return MIGRATION_POLICIES[parse_migration_policy(self.consumer_group_migration_policy)][0]

    @property
    def downgrade_enabled(self) -> bool:
        return MIGRATION_POLICIES[parse_migration_policy(self.consumer_group_migration_policy)][1]

    @classmethod
    def from_broker_config(cls, cfg: Any) -> GroupConfig:
        return cls(
            min_session_timeout_ms=_int(cfg, "group.min.session.timeout.ms", 6000),
            max_session_timeout_ms=_int(cfg, "group.max.session.timeout.ms", 1800000),
            max_size=_int(cfg, "group.max.size", 2**31 - 1),
            initial_rebalance_delay_ms=_int(cfg, "group.initial.rebalance.delay.ms", 3000),
            offset_metadata_max_bytes=_int(cfg, "offset.metadata.max.bytes", 4096),
            offsets_retention_ms=_int(cfg, "offsets.retention.minutes", 10080) * 60 * 1000,
            offsets_retention_check_interval_ms=_int(cfg, "offsets.retention.check.interval.ms", 600000),
            offsets_topic_num_partitions=_int(cfg, "offsets.topic.num.partitions", 50),
            offsets_commit_timeout_ms=_int(cfg, "offsets.commit.timeout.ms", 5000),
            consumer_group_session_timeout_ms=_int(cfg, "group.consumer.session.timeout.ms", 45000),
            consumer_group_heartbeat_interval_ms=_int(cfg, "group.consumer.heartbeat.interval.ms", 5000),
            consumer_group_max_size=_int(cfg, "group.consumer.max.size", 2**31 - 1),
            consumer_group_assignors=_list(cfg, "group.consumer.assignors", ("uniform", "range")),
            consumer_group_migration_policy=parse_migration_policy(
                cfg.get("group.consumer.migration.policy", "bidirectional")),
            share_group_session_timeout_ms=_int(cfg, "group.share.session.timeout.ms", 45000),
            share_group_heartbeat_interval_ms=_int(cfg, "group.share.heartbeat.interval.ms", 5000),
            share_group_max_size=_int(cfg, "group.share.max.size", 200),
            share_group_assignors=_list(cfg, "group.share.assignors", ("simple",)),
            share_group_initialize_retry_interval_ms=_int(cfg, "group.share.initialize.retry.interval.ms", 30000),
        )
