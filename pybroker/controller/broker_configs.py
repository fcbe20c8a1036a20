"""BROKER config resources in the metadata log (Kafka's ConfigurationControlManager, KIP-226/KIP-966).

A BROKER resource is named by a node id (per-broker dynamic configs) or "" (the cluster-wide
default). Its configs are ConfigRecords with resource_type 4; the image keeps them under
`image.configs[(4, name)]` like topic configs. The broker has already validated names, keys
and values (server/dynamic_config.py, Kafka's ConfigAdminManager); what is decided here is
what the controller decides in Kafka:

- a BROKER change writes one ConfigRecord per named key even when the value is unchanged
  (KAFKA-14136: the record is what makes every broker reload); AlterConfigs also removes the
  keys it does not name (value None);
- while eligible.leader.replicas.version >= 1 (KIP-966) a per-broker min.insync.replicas
  cannot be set or removed, and the cluster-level one cannot be removed (INVALID_CONFIG);
- ELR safety records (maybeGenerateElrSafetyRecords): enabling ELR writes a cluster-level
  min.insync.replicas equal to the static one when there is none, and removes every
  per-broker min.insync.replicas, ahead of the FeatureLevelRecord;
- activation of an empty log whose bootstrap features enable ELR appends the cluster-level
  min.insync.replicas (the static value) after the bootstrap records
  (ActivationRecordsGenerator.recordsForEmptyLog).
A min.insync.replicas change under ELR also clears the ELR of the partitions it governs
(Kafka writes a ClearElrRecord; pybroker the equivalent PartitionChangeRecords, in the same
batch: ReplicationControl.elr_clears_for_config_changes).

Pure functions over the image's config map; the caller (QuorumController) holds its lock.
"""

from __future__ import annotations

import re
from collections.abc import Container, Mapping, Sequence
from typing import Any

from pybroker.config import BROKER_CONFIGS, BrokerConfig, ConfigError, format_value
from pybroker.controller.features import ELIGIBLE_LEADER_REPLICAS_VERSION
from pybroker.protocol import messages as m
from pybroker.protocol.errors import Errors

RESOURCE_BROKER = 4
_INT32_TEXT = re.compile(r"[+-]?[0-9]+")  # what Java's Integer.valueOf parses (range checked apart)
MIN_INSYNC_REPLICAS = "min.insync.replicas"
# IncrementalAlterConfigs operations (Kafka's AlterConfigOp.OpType ids)
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3

Configs = Mapping[tuple[int, str], Mapping[str, str]]

_BROKER_MIN_ISR = f"Broker-level {MIN_INSYNC_REPLICAS} cannot be altered while ELR is enabled."
_CLUSTER_MIN_ISR = f"Cluster-level {MIN_INSYNC_REPLICAS} cannot be removed while ELR is enabled."


def elr_enabled(features: Mapping[str, int]) -> bool:
    """FeatureControlManager.isElrFeatureEnabled."""
    return features.get(ELIGIBLE_LEADER_REPLICAS_VERSION, 0) >= 1


def static_min_insync_replicas(config: BrokerConfig) -> int:
    """KafkaConfigSchema.getStaticallyConfiguredMinInsyncReplicas: the value from
    server.properties / --override, else the default (1). Dynamic values never count."""
    raw = config.overrides.get(MIN_INSYNC_REPLICAS, config.file_props.get(MIN_INSYNC_REPLICAS))
    d = BROKER_CONFIGS[MIN_INSYNC_REPLICAS]
    if raw is None:
        return int(d.default)
    try:
        return int(d.parse(raw))
    except ConfigError:  # the static config was validated at start; keep Kafka's default
        return int(d.default)


def broker_name_error(name: str, node_ids: Container[int]) -> tuple[int, str] | None:
    """ControllerConfigurationValidator.validateBrokerName, then QuorumController's
    ConfigResourceExistenceChecker: a BROKER resource is "" (cluster default) or a base-10 int32
    naming a registered broker or a controller (`node_ids`). A name a broker listener would have
    refused can still reach the controller on its own listener; kept out of the log, since every
    reader of these records takes a non-empty name for a node id."""
    if not name:
        return None
    if not _INT32_TEXT.fullmatch(name) or not -2**31 <= int(name) < 2**31:
        return Errors.INVALID_REQUEST, "Unable to parse broker name as a base 10 number."
    node_id = int(name)
    if node_id < 0:
        return Errors.INVALID_REQUEST, "Invalid negative broker ID."
    if node_id not in node_ids:
        return Errors.BROKER_ID_NOT_REGISTERED, f"No node with id {node_id} found."
    return None


def _record(name: str, key: str, value: str | None) -> Any:
    return m.ConfigRecord(resource_type=RESOURCE_BROKER, resource_name=name, name=key, value=value)


def activation_records(bootstrap_features: Mapping[str, int], static_min_isr: int) -> list[Any]:
    """The records an empty log's activation appends after the bootstrap records."""
    if bootstrap_features.get(ELIGIBLE_LEADER_REPLICAS_VERSION, 0) > 0:
        return [_record("", MIN_INSYNC_REPLICAS, str(static_min_isr))]
    return []


def elr_safety_records(configs: Configs, static_min_isr: int) -> list[Any]:
    """ConfigurationControlManager.maybeGenerateElrSafetyRecords (nothing when ELR's configs
    are already in place)."""
    records = []
    if MIN_INSYNC_REPLICAS not in configs.get((RESOURCE_BROKER, ""), {}):
        records.append(_record("", MIN_INSYNC_REPLICAS, str(static_min_isr)))
    brokers = sorted(int(name) for (rtype, name), cfgs in configs.items()
                     if rtype == RESOURCE_BROKER and name and MIN_INSYNC_REPLICAS in cfgs)
    records.extend(_record(str(b), MIN_INSYNC_REPLICAS, None) for b in brokers)
    return records


def _elr_error(name: str, key: str, value: str | None, elr: bool) -> str | None:
    """validateAlterConfig's ELR rules for one ConfigRecord of a BROKER resource."""
    if not elr or key != MIN_INSYNC_REPLICAS:
        return None
    if name:
        return _BROKER_MIN_ISR
    if value is None:
        return _CLUSTER_MIN_ISR
    return None


def list_default(key: str) -> str:
    """KafkaConfigSchema.getDefault for a BROKER key, as the string APPEND/SUBTRACT start from."""
    d = BROKER_CONFIGS.get(key)
    return (format_value(d.default) or "") if d is not None else ""


def apply_op(current: str | None, key: str, op: int, value: str | None) -> str | None:
    """One IncrementalAlterConfigs operation on a stored value (Kafka's getParts for
    APPEND/SUBTRACT: the default when unset, empty parts dropped)."""
    if op == OP_SET:
        return value
    if op == OP_DELETE:
        return None
    return merge_list(current if current is not None else list_default(key), op, value)


def merge_list(base: str, op: int, value: str | None) -> str:
    """APPEND (items not already there) or SUBTRACT `value`'s comma-separated items to/from
    the list `base`; empty parts dropped (Kafka's getParts). Shared by every resource type."""
    parts = [p for p in base.split(",") if p]
    for item in (value or "").split(","):
        if op == OP_APPEND and item not in parts:
            parts.append(item)
        elif op == OP_SUBTRACT and item in parts:
            parts.remove(item)
    return ",".join(parts)


def incremental_records(configs: Configs, features: Mapping[str, int], name: str,
                        ops: Sequence[tuple[str, int, str | None]]) -> tuple[int, str | None, list[Any]]:
    """incrementalAlterConfigResource for a BROKER resource: (error, message, records)."""
    current = configs.get((RESOURCE_BROKER, name), {})
    elr = elr_enabled(features)
    records = []
    for key, op, value in ops:
        if op in (OP_APPEND, OP_SUBTRACT):
            d = BROKER_CONFIGS.get(key)
            if d is None or d.type != "list":
                verb = "APPEND" if op == OP_APPEND else "SUBTRACT"
                return Errors.INVALID_CONFIG, f"Can't {verb} to key {key} because its type is not LIST.", []
        new = apply_op(current.get(key), key, op, value)
        records.append(_record(name, key, new))
    for r in records:
        err = _elr_error(name, r.name, r.value, elr)
        if err:
            return Errors.INVALID_CONFIG, err, []
    return 0, None, records


def legacy_records(configs: Configs, features: Mapping[str, int], name: str,
                   new_configs: Mapping[str, str]) -> tuple[int, str | None, list[Any]]:
    """legacyAlterConfigResource for a BROKER resource: every named key is written, every
    stored key the request leaves out is removed."""
    current = configs.get((RESOURCE_BROKER, name), {})
    elr = elr_enabled(features)
    explicit = [_record(name, k, v) for k, v in new_configs.items()]
    implicit = [_record(name, k, None) for k in current if k not in new_configs]
    for r in explicit + implicit:
        err = _elr_error(name, r.name, r.value, elr)
        if err:
            return Errors.INVALID_CONFIG, err, []
    return 0, None, explicit + implicit
