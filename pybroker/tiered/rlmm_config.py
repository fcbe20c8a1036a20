"""The topic-based RLMM's configuration (Kafka's TopicBasedRemoteLogMetadataManagerConfig): the
broker's `rlmm.config.`-prefixed properties (`remote.log.metadata.manager.impl.prefix`) with the
prefix already stripped by the caller.

Keys, Kafka's names and defaults:
    remote.log.metadata.topic.replication.factor          short, 3 (>= 1); a standalone node
        that leaves it unset uses 1, as it does for offsets.topic.replication.factor
    remote.log.metadata.topic.num.partitions              int, 50 (>= 1)
    remote.log.metadata.topic.retention.ms                long, -1 (unlimited) or > 0
    remote.log.metadata.consume.wait.ms                   long, 120000 (>= 0): how long a write
        waits for this node's consumer to read it back
    remote.log.metadata.initialization.retry.max.timeout.ms  long, 120000 (>= 0)
    remote.log.metadata.initialization.retry.interval.ms     long, 100 (>= 0)
    remote.log.metadata.common.client.<key>   a client property for the producer, consumer and
    remote.log.metadata.producer.<key>        admin client (common), the producer only, or the
    remote.log.metadata.consumer.<key>        consumer only; a specific one wins over common
Client properties pybroker's clients act on (others are logged once and ignored, as a Kafka
client warns of unused ones): bootstrap.servers; request.timeout.ms, retries, retry.backoff.ms
(all clients); linger.ms, batch.size, max.request.size (producer); fetch.max.wait.ms,
fetch.min.bytes, fetch.max.bytes, max.partition.fetch.bytes (consumer); and the security keys
(security.protocol, ssl.*, sasl.*), which the caller's security factory turns into the
clients' TLS/SASL settings. Kafka's fixed settings win over the user's: client.id
`__remote_log_metadata_client_<node id>_producer` / `_consumer`, acks=all, auto.offset.reset
earliest, no auto commit.

Errors: ConfigError, one line naming the key (Kafka's ConfigException text).
Concurrency: immutable once built.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pybroker.config import ConfigDef, ConfigError, at_least

log = logging.getLogger(__name__)

REMOTE_LOG_METADATA_TOPIC_NAME = "__remote_log_metadata"
REMOTE_LOG_METADATA_CLIENT_PREFIX = "__remote_log_metadata_client"

TOPIC_REPLICATION_FACTOR = "remote.log.metadata.topic.replication.factor"
TOPIC_PARTITIONS = "remote.log.metadata.topic.num.partitions"
TOPIC_RETENTION_MS = "remote.log.metadata.topic.retention.ms"
CONSUME_WAIT_MS = "remote.log.metadata.consume.wait.ms"
INITIALIZATION_RETRY_MAX_TIMEOUT_MS = "remote.log.metadata.initialization.retry.max.timeout.ms"
INITIALIZATION_RETRY_INTERVAL_MS = "remote.log.metadata.initialization.retry.interval.ms"
COMMON_CLIENT_PREFIX = "remote.log.metadata.common.client."
PRODUCER_PREFIX = "remote.log.metadata.producer."
CONSUMER_PREFIX = "remote.log.metadata.consumer."

RLMM_CONFIG_DEFS = (
    ConfigDef(TOPIC_REPLICATION_FACTOR, "short", 3, at_least(1)),
    ConfigDef(TOPIC_PARTITIONS, "int", 50, at_least(1)),
    ConfigDef(TOPIC_RETENTION_MS, "long", -1),
    ConfigDef(CONSUME_WAIT_MS, "long", 120_000, at_least(0)),
    ConfigDef(INITIALIZATION_RETRY_MAX_TIMEOUT_MS, "long", 120_000, at_least(0)),
    ConfigDef(INITIALIZATION_RETRY_INTERVAL_MS, "long", 100, at_least(0)),
)

# the client properties pybroker's Producer / Consumer / AdminClient act on (see the docstring)
_COMMON_KEYS = frozenset({"bootstrap.servers", "request.timeout.ms", "retries", "retry.backoff.ms", "client.id"})
_PRODUCER_KEYS = _COMMON_KEYS | {"linger.ms", "batch.size", "max.request.size", "acks", "enable.idempotence",
                                 "max.in.flight.requests.per.connection", "key.serializer", "value.serializer"}
_CONSUMER_KEYS = _COMMON_KEYS | {"fetch.max.wait.ms", "fetch.min.bytes", "fetch.max.bytes",
                                 "max.partition.fetch.bytes", "auto.offset.reset", "enable.auto.commit",
                                 "exclude.internal.topics", "key.deserializer", "value.deserializer"}


def is_security_key(key: str) -> bool:
    return key == "security.protocol" or key.startswith(("ssl.", "sasl."))


def _int(props: Mapping[str, str], key: str, default: int, prefix: str) -> int:
    raw = props.get(key)
    if raw is None:
        return default
    try:
        return int(str(raw).strip())
    except ValueError:
        raise ConfigError(f"Invalid value {raw} for configuration {prefix}{key}: Expected value to be a number") from None


@dataclass(frozen=True)
class ClientProps:
    """One client's merged properties (common, then its own), as strings."""

    props: dict[str, str]
    prefix: str  # for messages: the rlmm key prefix these came from

    def int(self, key: str, default: int) -> int:
        return _int(self.props, key, default, self.prefix)

    def security_props(self) -> dict[str, str]:
        return {k: v for k, v in self.props.items() if is_security_key(k)}


@dataclass(frozen=True)
class TopicBasedRemoteLogMetadataManagerConfig:
    metadata_topic_replication_factor: int
    metadata_topic_partitions_count: int
    metadata_topic_retention_ms: int
    consume_wait_ms: int
    initialization_retry_max_timeout_ms: int
    initialization_retry_interval_ms: int
    client_id_prefix: str
    common: ClientProps
    producer: ClientProps
    consumer: ClientProps
    replication_factor_set: bool = field(default=False)

    @classmethod
    def parse(cls, configs: Mapping[str, Any], *, node_id: int, standalone: bool = False
              ) -> TopicBasedRemoteLogMetadataManagerConfig:
        """ConfigError (one line) for a bad value."""
        values: dict[str, Any] = {}
        for d in RLMM_CONFIG_DEFS:
            raw = configs.get(d.name)
            value = d.default if raw is None else d.parse(raw)
            if d.validator is not None:
                d.validator(d.name, value)
            values[d.name] = value
        retention = values[TOPIC_RETENTION_MS]
        if retention != -1 and retention <= 0:
            raise ConfigError(f"Invalid value {retention} for configuration {TOPIC_RETENTION_MS}: "
                              f"Invalid metadata topic retention in millis: {retention}")
        rf_set = configs.get(TOPIC_REPLICATION_FACTOR) is not None
        rf = values[TOPIC_REPLICATION_FACTOR] if rf_set or not standalone else 1
        common: dict[str, str] = {}
        producer: dict[str, str] = {}
        consumer: dict[str, str] = {}
        for key, value in configs.items():
            for prefix, into in ((COMMON_CLIENT_PREFIX, common), (PRODUCER_PREFIX, producer),
                                 (CONSUMER_PREFIX, consumer)):
                if key.startswith(prefix):
                    into[key[len(prefix):]] = str(value)
        prefix = f"{REMOTE_LOG_METADATA_CLIENT_PREFIX}_{node_id}"
        for name, own, known in (("producer", producer, _PRODUCER_KEYS), ("consumer", consumer, _CONSUMER_KEYS)):
            ignored = sorted(k for k in {**common, **own} if k not in known and not is_security_key(k))
            if ignored:
                log.warning("remote log metadata %s: ignoring client properties pybroker's client does not "
                            "use: %s", name, ", ".join(ignored))
        return cls(
            metadata_topic_replication_factor=rf,
            metadata_topic_partitions_count=values[TOPIC_PARTITIONS],
            metadata_topic_retention_ms=retention,
            consume_wait_ms=values[CONSUME_WAIT_MS],
            initialization_retry_max_timeout_ms=values[INITIALIZATION_RETRY_MAX_TIMEOUT_MS],
            initialization_retry_interval_ms=values[INITIALIZATION_RETRY_INTERVAL_MS],
            client_id_prefix=prefix,
            common=ClientProps(dict(common), COMMON_CLIENT_PREFIX),
            producer=ClientProps({**common, **producer}, PRODUCER_PREFIX),
            consumer=ClientProps({**common, **consumer}, CONSUMER_PREFIX),
            replication_factor_set=rf_set,
        )

    def topic_configs(self) -> dict[str, str]:
        """The configs Kafka creates `__remote_log_metadata` with."""
        return {"retention.ms": str(self.metadata_topic_retention_ms), "cleanup.policy": "delete",
                "remote.storage.enable": "false"}


__all__ = ["COMMON_CLIENT_PREFIX", "CONSUMER_PREFIX", "CONSUME_WAIT_MS", "INITIALIZATION_RETRY_INTERVAL_MS",
           "INITIALIZATION_RETRY_MAX_TIMEOUT_MS", "PRODUCER_PREFIX", "REMOTE_LOG_METADATA_TOPIC_NAME",
           "RLMM_CONFIG_DEFS", "TOPIC_PARTITIONS", "TOPIC_REPLICATION_FACTOR", "TOPIC_RETENTION_MS",
           "ClientProps", "TopicBasedRemoteLogMetadataManagerConfig", "is_security_key"]
