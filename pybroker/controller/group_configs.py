"""GROUP config resources (resource type 32, KIP-848 dynamic group configs): Kafka's GroupConfig.

A GROUP resource is named by a group id (the group need not exist); its overrides are
ConfigRecords with resource_type 32, kept by the image under `image.configs[(32, group)]`
like topic configs, so they survive restarts by replaying __cluster_metadata.

Keys, types, lower bounds and defaults follow Kafka 4.2's GroupConfig. A key's default is
the broker config backing it (GroupCoordinatorConfig.extractGroupConfigMap, and
ShareGroupConfig's for the share keys), read from this node's config: pybroker has no share
or streams groups, but it knows their group.share.* / group.streams.* broker configs, typed
and bounded as Kafka's, so a harness that sets them (confluent-kafka's sets
group.share.min.record.lock.duration.ms=1000) moves these bounds as on Kafka. Validation (ControllerConfigurationValidator for GROUP ->
GroupConfigManager.validate -> GroupConfig.validate) runs on the resource's whole
resulting override set merged over those defaults:
- an empty name -> INVALID_REQUEST "Default group resources are not allowed.";
- an unknown key -> INVALID_CONFIG "Unknown group config name: <key>";
- a value that does not parse or is below the key's bound -> INVALID_CONFIG (ConfigDef's
  messages);
- ranges against the group.consumer/share/streams.min/max.* broker configs, then
  session timeout > heartbeat interval, with GroupConfig's messages (INVALID_CONFIG).
Records follow ConfigurationControlManager: only changed keys are written (GROUP is not
BROKER); APPEND / SUBTRACT are refused (no GROUP key is a LIST); AlterConfigs removes the
stored keys it does not name.

Pure functions over the image's config map; the caller (QuorumController) holds its lock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pybroker.controller.broker_configs import OP_APPEND, OP_SET, OP_SUBTRACT
from pybroker.protocol import messages as m
from pybroker.protocol.errors import Errors, KafkaError

RESOURCE_GROUP = 32
_OP_NAMES = {OP_APPEND: "APPEND", OP_SUBTRACT: "SUBTRACT"}

CONSUMER_SESSION_TIMEOUT_MS = "consumer.session.timeout.ms"
CONSUMER_HEARTBEAT_INTERVAL_MS = "consumer.heartbeat.interval.ms"


@dataclass(frozen=True)
class GroupKey:
    name: str
    type: str  # "int" | "string" | "boolean"
    broker_key: str | None  # the broker config giving the default, when pybroker has it
    kafka_default: Any  # Kafka's default of that broker config
    at_least: int | None = None
    choices: tuple[str, ...] = ()


# Kafka 4.2 GroupConfig, in its definition order.
GROUP_KEYS: tuple[GroupKey, ...] = (
    GroupKey(CONSUMER_SESSION_TIMEOUT_MS, "int", "group.consumer.session.timeout.ms", 45000, 1),
    GroupKey(CONSUMER_HEARTBEAT_INTERVAL_MS, "int", "group.consumer.heartbeat.interval.ms", 5000, 1),
    GroupKey("share.session.timeout.ms", "int", "group.share.session.timeout.ms", 45000, 1),
    GroupKey("share.heartbeat.interval.ms", "int", "group.share.heartbeat.interval.ms", 5000, 1),
    GroupKey("share.record.lock.duration.ms", "int", "group.share.record.lock.duration.ms", 30000, 1000),
    GroupKey("share.delivery.count.limit", "int", "group.share.delivery.count.limit", 5, 2),
    GroupKey("share.partition.max.record.locks", "int", "group.share.partition.max.record.locks", 2000, 100),
    GroupKey("share.auto.offset.reset", "string", None, "latest"),
    GroupKey("share.isolation.level", "string", None, "read_uncommitted",
             choices=("read_committed", "read_uncommitted")),
    # KIP-1222's RENEW acknowledgement, allowed per group (no broker config behind it)
    GroupKey("share.renew.acknowledge.enable", "boolean", None, True),
    GroupKey("streams.session.timeout.ms", "int", "group.streams.session.timeout.ms", 45000, 1),
    GroupKey("streams.heartbeat.interval.ms", "int", "group.streams.heartbeat.interval.ms", 5000, 1),
    GroupKey("streams.num.standby.replicas", "int", "group.streams.num.standby.replicas", 0, 0),
    GroupKey("streams.initial.rebalance.delay.ms", "int", "group.streams.initial.rebalance.delay.ms", 3000, 0),
)
GROUP_KEY_BY_NAME = {k.name: k for k in GROUP_KEYS}

# The broker bounds GroupConfig.validateValues checks: (group key, broker min key, Kafka min,
# broker max key, Kafka max); every broker key is a typed config of this node (config.py).
_RANGES = (
    (CONSUMER_HEARTBEAT_INTERVAL_MS, "group.consumer.min.heartbeat.interval.ms", 5000,
     "group.consumer.max.heartbeat.interval.ms", 15000),
    (CONSUMER_SESSION_TIMEOUT_MS, "group.consumer.min.session.timeout.ms", 45000,
     "group.consumer.max.session.timeout.ms", 60000),
    ("share.heartbeat.interval.ms", "group.share.min.heartbeat.interval.ms", 5000,
     "group.share.max.heartbeat.interval.ms", 15000),
    ("share.session.timeout.ms", "group.share.min.session.timeout.ms", 45000,
     "group.share.max.session.timeout.ms", 60000),
    ("share.record.lock.duration.ms", "group.share.min.record.lock.duration.ms", 15000,
     "group.share.max.record.lock.duration.ms", 60000),
    ("share.delivery.count.limit", "group.share.min.delivery.count.limit", 2,
     "group.share.max.delivery.count.limit", 10),
    ("share.partition.max.record.locks", "group.share.min.partition.max.record.locks", 100,
     "group.share.max.partition.max.record.locks", 10000),
    ("streams.heartbeat.interval.ms", "group.streams.min.heartbeat.interval.ms", 5000,
     "group.streams.max.heartbeat.interval.ms", 15000),
    ("streams.session.timeout.ms", "group.streams.min.session.timeout.ms", 45000,
     "group.streams.max.session.timeout.ms", 60000),
    ("streams.num.standby.replicas", None, None, "group.streams.max.standby.replicas", 2),
)
_SESSION_OVER_HEARTBEAT = (
    (CONSUMER_SESSION_TIMEOUT_MS, CONSUMER_HEARTBEAT_INTERVAL_MS),
    ("share.session.timeout.ms", "share.heartbeat.interval.ms"),
    ("streams.session.timeout.ms", "streams.heartbeat.interval.ms"),
)


def _broker_value(config: Any, key: str | None, kafka_default: Any) -> Any:
    if key is None:
        return kafka_default
    value = config.get(key, kafka_default) if config is not None else kafka_default
    return kafka_default if value is None else value


def defaults(config: Any) -> dict[str, Any]:
    """extractGroupConfigMap: each group key's default, typed."""
    return {k.name: _broker_value(config, k.broker_key, k.kafka_default) for k in GROUP_KEYS}


def parse(key: GroupKey, raw: str) -> Any:
    """ConfigDef.parse for one group key: the typed value, or INVALID_CONFIG."""
    s = raw.strip()
    if key.type == "int":
        try:
            v = int(s)
            if not -2**31 <= v < 2**31:
                raise ValueError
        except ValueError:
            raise KafkaError(Errors.INVALID_CONFIG, f"Invalid value {raw} for configuration {key.name}: "
                                   "Not a number of type INT") from None
        if key.at_least is not None and v < key.at_least:
            raise KafkaError(Errors.INVALID_CONFIG, f"Invalid value {v} for configuration {key.name}: "
                                   f"Value must be at least {key.at_least}")
        return v
    if key.type == "boolean":
        # ConfigDef.parseType BOOLEAN: true/false in any case, after trimming
        if s.lower() not in ("true", "false"):
            raise KafkaError(Errors.INVALID_CONFIG, f"Invalid value {s} for configuration {key.name}: "
                                   "Expected value to be either true or false")
        return s.lower() == "true"
    if key.choices and s not in key.choices:
        raise KafkaError(Errors.INVALID_CONFIG, f"Invalid value {s} for configuration {key.name}: "
                               f"String must be one of: {', '.join(key.choices)}")
    if key.name == "share.auto.offset.reset" and not _valid_auto_offset_reset(s):
        raise KafkaError(Errors.INVALID_CONFIG, f"Invalid value {s} for configuration {key.name}: "
                               "the value must be either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS.>'.")
    return s


def _valid_auto_offset_reset(s: str) -> bool:
    low = s.lower()
    if low in ("earliest", "latest"):
        return True
    # by_duration:<ISO-8601 duration> (KIP-1106); the duration must not be negative
    return low.startswith("by_duration:") and low[len("by_duration:"):].startswith("p")


def validate(config: Any, name: str, overrides: Mapping[str, str]) -> dict[str, Any]:
    """ControllerConfigurationValidator for GROUP: the effective typed values, or KafkaError."""
    if not name:
        raise KafkaError(Errors.INVALID_REQUEST, "Default group resources are not allowed.")
    for k in overrides:
        if k not in GROUP_KEY_BY_NAME:
            raise KafkaError(Errors.INVALID_CONFIG, f"Unknown group config name: {k}")
    values = defaults(config)
    for k, raw in overrides.items():
        values[k] = parse(GROUP_KEY_BY_NAME[k], raw)
    for key, min_key, min_default, max_key, max_default in _RANGES:
        if min_key is not None and values[key] < _broker_value(config, min_key, min_default):
            raise KafkaError(Errors.INVALID_CONFIG, f"{key} must be greater than or equal to {min_key}")
        if values[key] > _broker_value(config, max_key, max_default):
            raise KafkaError(Errors.INVALID_CONFIG, f"{key} must be less than or equal to {max_key}")
    for session, heartbeat in _SESSION_OVER_HEARTBEAT:
        if values[session] <= values[heartbeat]:
            raise KafkaError(Errors.INVALID_CONFIG, f"{session} must be greater than {heartbeat}")
    return values


def _record(name: str, key: str, value: str | None) -> Any:
    return m.ConfigRecord(resource_type=RESOURCE_GROUP, resource_name=name, name=key, value=value)


def _check(config: Any, name: str, current: Mapping[str, str], records: list[Any]
           ) -> tuple[int, str | None, list[Any]]:
    after = dict(current)
    for r in records:
        if r.value is None:
            after.pop(r.name, None)
        else:
            after[r.name] = r.value
    try:
        validate(config, name, after)
    except KafkaError as exc:
        return exc.code, exc.message, []
    return 0, None, records


def incremental_records(configs: Mapping[tuple[int, str], Mapping[str, str]], config: Any, name: str,
                        ops: Sequence[tuple[str, int, str | None]]) -> tuple[int, str | None, list[Any]]:
    """incrementalAlterConfigResource for a GROUP resource: (error, message, records)."""
    current = configs.get((RESOURCE_GROUP, name), {})
    records = []
    for key, op, value in ops:
        if op in _OP_NAMES:
            return Errors.INVALID_CONFIG, f"Can't {_OP_NAMES[op]} to key {key} because its type is not LIST.", []
        new = value if op == OP_SET else None
        if new != current.get(key):
            records.append(_record(name, key, new))
    return _check(config, name, current, records)


def legacy_records(configs: Mapping[tuple[int, str], Mapping[str, str]], config: Any, name: str,
                   new_configs: Mapping[str, str]) -> tuple[int, str | None, list[Any]]:
    """legacyAlterConfigResource for a GROUP resource: changed keys written, stored keys the
    request leaves out removed."""
    current = configs.get((RESOURCE_GROUP, name), {})
    records = [_record(name, k, v) for k, v in new_configs.items() if current.get(k) != v]
    records += [_record(name, k, None) for k in current if k not in new_configs]
    return _check(config, name, current, records)
