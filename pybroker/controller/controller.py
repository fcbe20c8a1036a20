"""The active controller of a one-voter quorum (Kafka's QuorumController, reduced).

Every change is decided here, written as metadata records to __cluster_metadata, made
durable, and only then replayed into the image that request handlers read: so a restart
that replays the log rebuilds exactly what clients saw. Operations are serialised by one
trio lock (Kafka's controller event queue): validation sees the image as of the previous
committed change.

Validation follows Kafka's ReplicationControlManager: topic names (INVALID_TOPIC_EXCEPTION),
partition counts (INVALID_PARTITIONS), replication factors (INVALID_REPLICATION_FACTOR),
manual assignments (INVALID_REPLICA_ASSIGNMENT), topic configs (INVALID_CONFIG).
Topic config changes follow ConfigurationControlManager: a ConfigRecord per changed key
(value None removes the override), validated as the whole resulting override set.
"""

from __future__ import annotations

import logging
import os
import re
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from pybroker.config import (
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigError,
    format_value,
    validate_topic_configs,
)
from pybroker.controller import acls as acl_control
from pybroker.controller import broker_configs, client_quotas, group_configs, scram
from pybroker.controller import features as feature_control
from pybroker.controller.broker_configs import OP_APPEND, OP_DELETE, OP_SET, OP_SUBTRACT
from pybroker.controller.metadata_log import MetadataLog
from pybroker.metadata.image import RESOURCE_TOPIC, MetadataImage
from pybroker.protocol import messages as m
from pybroker.protocol.errors import Errors, KafkaError

log = logging.getLogger("pybroker.controller")

# 4.2-IV1: the level Kafka 4.2 writes at format time; why pybroker may claim it: controller/features.py
METADATA_VERSION = feature_control.BOOTSTRAP_METADATA_VERSION
PRODUCER_ID_BLOCK_SIZE = 1000
# QuorumController.MAX_RECORDS_PER_USER_OP: no user operation may write more records than one
# controller batch holds (Kafka's BoundedList; over it the whole request fails POLICY_VIOLATION).
MAX_RECORDS_PER_USER_OP = 10000
# ReplicationControlManager.MAX_PARTITIONS_PER_BATCH: checked on the request, before anything is built.
MAX_PARTITIONS_PER_BATCH = 10000
EXCESSIVE_BATCH = "Unable to perform excessively large batch operation."
EXCESSIVE_PARTITIONS = "Excessively large number of partitions per request."
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME = 249
# IncrementalAlterConfigs operations (Kafka's AlterConfigOp.OpType ids)
_OP_NAMES = {OP_SET: "SET", OP_DELETE: "DELETE", OP_APPEND: "APPEND", OP_SUBTRACT: "SUBTRACT"}


@dataclass
class TopicResult:
    name: str
    error: int = 0
    message: str | None = None
    topic_id: bytes = bytes(16)
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, Any] = field(default_factory=dict)


def new_topic_id() -> bytes:
    """A random non-zero 16-byte id whose base64 form does not start with '-' (Kafka's rule)."""
    while True:
        b = uuid.uuid4().bytes
        if b != bytes(16) and (b[0] >> 2) != 62:  # base64url '-' is 62
            return b


def validate_topic_name(name: str | None) -> str | None:
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return "Topic name cannot be \".\" or \"..\""
    if len(name) > MAX_TOPIC_NAME:
        return f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME} characters, topic name: {name}"
    if not _LEGAL_TOPIC.match(name):
        return (f"Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, "
                "'.', '_' and '-'")
    return None


class QuorumController:
    def __init__(self, config: BrokerConfig, image: MetadataImage, metadata_log: MetadataLog) -> None:
        self.config = config
        self.image = image
        self.log = metadata_log
        self._lock = trio.Lock()
        # called in order after each commit; one may return an awaitable, awaited before the next
        self.listeners: list[Callable[[list[Any]], Awaitable[None] | None]] = []
        self.broker_epoch = -1

    # ------------------------------------------------------------------ commit path

    async def _commit(self, records: list[Any]) -> None:
        """Append atomically, make durable, replay into the image, tell listeners."""
        if not records:
            return
        if len(records) > MAX_RECORDS_PER_USER_OP:
            raise KafkaError(Errors.POLICY_VIOLATION, EXCESSIVE_BATCH)
        base = await self.log.append(records)
        for i, r in enumerate(records):
            self.image.replay(r, base + i)
        for listener in self.listeners:
            pending = listener(records)
            if pending is not None:  # an async listener (the replica manager creating logs)
                await pending

    async def load_and_register(self, endpoints: Sequence[Any], cluster_id: str) -> None:
        """Replay the log into the image, then (re-)register this node with its current endpoints."""
        for offset, record in self.log.read_all():
            self.image.replay(record, offset)
        async with self._lock:
            records: list[Any] = []
            if "metadata.version" not in self.image.features:
                # first start: Kafka 4.2's bootstrap feature levels (older data dirs keep theirs),
                # then KIP-966's cluster-level min.insync.replicas when they enable ELR
                records.extend(feature_control.bootstrap_records(METADATA_VERSION))
                records.extend(broker_configs.activation_records(
                    feature_control.BOOTSTRAP_FEATURES, broker_configs.static_min_insync_replicas(self.config)))
            node_id = self.config.node_id
            prev = self.image.brokers.get(node_id)
            self.broker_epoch = (self.image.offset + 1) if prev is None else max(prev.epoch + 1, self.image.offset + 1)
            records.append(m.RegisterBrokerRecord(
                broker_id=node_id,
                incarnation_id=uuid.uuid4().bytes,
                broker_epoch=self.broker_epoch,
                end_points=[m.RegisterBrokerRecord.BrokerEndpoint(
                    name=ep.listener_name, host=ep.host, port=ep.port, security_protocol=0)
                    for ep in endpoints],
                features=[m.RegisterBrokerRecord.BrokerFeature(
                    name=name, min_supported_version=lo, max_supported_version=hi)
                    for name, (lo, hi) in sorted(feature_control.SUPPORTED_FEATURES.items())],
                rack=None,
                fenced=False,
            ))
            await self._commit(records)

    # ------------------------------------------------------------------ topics

    def _live_brokers(self) -> list[int]:
        return sorted(b for b, reg in self.image.brokers.items() if not reg.fenced)

    def _place(self, num_partitions: int, rf: int, start: int) -> list[list[int]]:
        brokers = self._live_brokers()
        n = len(brokers)
        return [[brokers[(start + p + r) % n] for r in range(rf)] for p in range(num_partitions)]

    def _check_assignment(self, replicas: Sequence[int]) -> str | None:
        if not replicas:
            return "The manual partition assignment includes an empty replica list."
        if len(set(replicas)) != len(replicas):
            return f"The manual partition assignment includes the broker {replicas[0]} more than once."
        for b in replicas:
            if b not in self.image.brokers:
                return f"The manual partition assignment includes broker {b}, but no such broker is registered."
        return None

    def _validate_new_topic(self, name: str, num_partitions: int, rf: int,
                            assignments: Mapping[int, Sequence[int]],
                            configs: Mapping[str, str | None], seen: set[str],
                            collisions: Mapping[str, str]) -> TopicResult:
        res = TopicResult(name)
        msg = validate_topic_name(name)
        if msg:
            res.error, res.message = Errors.INVALID_TOPIC_EXCEPTION, msg
            return res
        if name in self.image.topics_by_name or name in seen:
            res.error, res.message = Errors.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."
            return res
        other = collisions.get(name.replace(".", "_"))
        if other is not None and other != name:
            res.error = Errors.INVALID_TOPIC_EXCEPTION
            res.message = f"Topic '{name}' collides with existing topic: {other}"
            return res
        live = self._live_brokers()
        if assignments:
            if num_partitions != -1 or rf != -1:
                res.error = Errors.INVALID_REQUEST
                res.message = ("A manual partition assignment was specified, but numPartitions or "
                               "replicationFactor was not set to -1.")
                return res
            if sorted(assignments) != list(range(len(assignments))):
                res.error = Errors.INVALID_REPLICA_ASSIGNMENT
                res.message = "partitions should be a consecutive 0-based integer sequence"
                return res
            for reps in assignments.values():
                err = self._check_assignment(reps)
                if err:
                    res.error, res.message = Errors.INVALID_REPLICA_ASSIGNMENT, err
                    return res
            res.num_partitions = len(assignments)
            res.replication_factor = len(assignments[0])
        else:
            np_ = self.config["num.partitions"] if num_partitions == -1 else num_partitions
            rf_ = self.config["default.replication.factor"] if rf == -1 else rf
            if np_ <= 0:
                res.error = Errors.INVALID_PARTITIONS
                res.message = "Number of partitions was set to an invalid non-positive value."
                return res
            if rf_ <= 0:
                res.error = Errors.INVALID_REPLICATION_FACTOR
                res.message = "Replication factor must be larger than 0, or -1 to use the default value."
                return res
            if rf_ > len(live):
                res.error = Errors.INVALID_REPLICATION_FACTOR
                res.message = (f"Unable to replicate the partition {rf_} time(s): The target replication "
                               f"factor of {rf_} cannot be reached because only {len(live)} broker(s) "
                               "are registered.")
                return res
            res.num_partitions, res.replication_factor = np_, rf_
        try:
            parsed = validate_topic_configs(configs)
        except ConfigError as exc:
            res.error, res.message = Errors.INVALID_CONFIG, str(exc)
            return res
        effective = self.config.topic_defaults()
        effective.update(parsed)
        res.configs = effective
        return res

    async def create_topics(self, topics: Sequence[tuple[str, int, int, Mapping[int, Sequence[int]],
                                                         Mapping[str, str | None]]],
                            validate_only: bool = False) -> list[TopicResult]:
        """Create topics: (name, num_partitions, replication_factor, assignments, configs) each.

        Raises KafkaError(POLICY_VIOLATION) for the whole request when it asks for more than
        MAX_PARTITIONS_PER_BATCH partitions or would write more than MAX_RECORDS_PER_USER_OP
        records, before anything is placed or encoded (ReplicationControlManager.createTopics).
        """
        total = 0
        for _name, np_, _rf, assignments, _configs in topics:
            if assignments:
                total += len(assignments)
            elif np_ == -1:
                total += self.config["num.partitions"]
            elif np_ > 0:
                total += np_
        if total > MAX_PARTITIONS_PER_BATCH:
            raise KafkaError(Errors.POLICY_VIOLATION, EXCESSIVE_PARTITIONS)
        async with self._lock:
            results: list[TopicResult] = []
            records: list[Any] = []
            seen: set[str] = set()
            counts = Counter(t[0] for t in topics)
            # Kafka's topicsWithCollisionChars: '.' and '_' collide in metric names
            collisions = {n.replace(".", "_"): n for n in self.image.topics_by_name}
            for name, np_, rf, assignments, configs in topics:
                if counts[name] > 1:
                    results.append(TopicResult(name, Errors.INVALID_REQUEST,
                                               "Duplicate topic name."))
                    continue
                res = self._validate_new_topic(name, np_, rf, assignments, configs, seen, collisions)
                results.append(res)
                if res.error or validate_only:
                    continue
                seen.add(name)
                collisions.setdefault(name.replace(".", "_"), name)
                if len(records) + 1 + len(configs) + res.num_partitions > MAX_RECORDS_PER_USER_OP:
                    raise KafkaError(Errors.POLICY_VIOLATION, EXCESSIVE_BATCH)
                res.topic_id = new_topic_id()
                records.extend(self._topic_records(res, assignments, configs))
            await self._commit(records)
            return results

    def _topic_records(self, res: TopicResult, assignments: Mapping[int, Sequence[int]],
                       configs: Mapping[str, str | None]) -> list[Any]:
        tid = res.topic_id
        recs: list[Any] = [m.TopicRecord(name=res.name, topic_id=tid)]
        for k, v in configs.items():
            recs.append(m.ConfigRecord(resource_type=RESOURCE_TOPIC, resource_name=res.name, name=k,
                                       value=format_value(validate_topic_configs({k: v})[k])))
        placement = ([list(assignments[p]) for p in range(res.num_partitions)] if assignments
                     else self._place(res.num_partitions, res.replication_factor, _start_index(res.name)))
        for p, replicas in enumerate(placement):
            recs.append(m.PartitionRecord(partition_id=p, topic_id=tid, replicas=replicas, isr=list(replicas),
                                          removing_replicas=[], adding_replicas=[], leader=replicas[0],
                                          leader_epoch=0, partition_epoch=0))
        return recs

    async def delete_topics(self, names: Sequence[str | None], ids: Sequence[bytes | None]) -> list[
            tuple[str | None, bytes, int, str | None]]:
        """Delete by name or id; returns (name, topic_id, error, message) per entry, in order."""
        async with self._lock:
            out: list[tuple[str | None, bytes, int, str | None]] = []
            records: list[Any] = []
            removed: set[bytes] = set()
            for name, tid in zip(names, ids, strict=True):
                if name is not None and tid is not None and tid != bytes(16):
                    out.append((name, tid, Errors.INVALID_REQUEST, "Only one of name or topic id may be set"))
                    continue
                if name is not None:
                    t = self.image.topics_by_name.get(name)
                    if t is None:
                        out.append((name, bytes(16), Errors.UNKNOWN_TOPIC_OR_PARTITION,
                                    "This server does not host this topic-partition."))
                        continue
                else:
                    t = self.image.topics_by_id.get(tid or bytes(16))
                    if t is None:
                        out.append((None, tid or bytes(16), Errors.UNKNOWN_TOPIC_ID,
                                    "This server does not host this topic ID."))
                        continue
                if t.name.startswith("__") and t.name in ("__consumer_offsets", "__transaction_state"):
                    out.append((t.name, t.topic_id, Errors.TOPIC_DELETION_DISABLED, None))
                    continue
                out.append((t.name, t.topic_id, 0, None))
                if t.topic_id not in removed:
                    removed.add(t.topic_id)
                    records.append(m.RemoveTopicRecord(topic_id=t.topic_id))
            await self._commit(records)
            return out

    async def create_partitions(self, topics: Sequence[tuple[str, int, Sequence[Sequence[int]] | None]],
                                validate_only: bool = False) -> list[tuple[str, int, str | None]]:
        """Increase partition counts: (name, new total count, assignments) -> (name, error, message)."""
        async with self._lock:
            out: list[tuple[str, int, str | None]] = []
            records: list[Any] = []
            counts = Counter(t[0] for t in topics)
            for name, count, assignments in topics:
                if counts[name] > 1:
                    out.append((name, Errors.INVALID_REQUEST, "Duplicate topic name."))
                    continue
                t = self.image.topics_by_name.get(name)
                if t is None:
                    out.append((name, Errors.UNKNOWN_TOPIC_OR_PARTITION,
                                "This server does not host this topic-partition."))
                    continue
                current = len(t.partitions)
                if count < current:
                    out.append((name, Errors.INVALID_PARTITIONS,
                                f"Topic currently has {current} partitions, which is higher than the "
                                f"requested {count}."))
                    continue
                if count == current:
                    out.append((name, Errors.INVALID_PARTITIONS, f"Topic already has {current} partitions."))
                    continue
                add = count - current
                if len(records) + add > MAX_RECORDS_PER_USER_OP:
                    # before any placement: a count of 2**28 must cost nothing (Kafka's BoundedList
                    # fails the same operation, only later)
                    raise KafkaError(Errors.POLICY_VIOLATION, EXCESSIVE_BATCH)
                rf = len(t.partitions[0].replicas) if t.partitions else 1
                if assignments is not None:
                    if len(assignments) != add:
                        out.append((name, Errors.INVALID_REPLICA_ASSIGNMENT,
                                    f"Attempted to add {add} additional partition(s), but only "
                                    f"{len(assignments)} assignment(s) were specified."))
                        continue
                    bad = next((e for e in (self._check_assignment(a) for a in assignments) if e), None)
                    if bad:
                        out.append((name, Errors.INVALID_REPLICA_ASSIGNMENT, bad))
                        continue
                    placement = [list(a) for a in assignments]
                else:
                    live = self._live_brokers()
                    if rf > len(live):
                        out.append((name, Errors.INVALID_REPLICATION_FACTOR,
                                    f"Unable to replicate the partition {rf} time(s): only {len(live)} "
                                    "broker(s) are registered."))
                        continue
                    placement = self._place(add, rf, _start_index(name) + current)
                out.append((name, 0, None))
                if validate_only:
                    continue
                tid = t.topic_id
                for i, replicas in enumerate(placement):
                    records.append(m.PartitionRecord(
                        partition_id=current + i, topic_id=tid, replicas=replicas, isr=list(replicas),
                        removing_replicas=[], adding_replicas=[], leader=replicas[0], leader_epoch=0,
                        partition_epoch=0))
            await self._commit(records)
            return out

    # ------------------------------------------------------------------ topic configs

    def _validate_topic_config_change(self, name: str, current: Mapping[str, str],
                                      changes: Mapping[str, str | None]) -> tuple[int, str | None, list[Any]]:
        """Kafka's ConfigurationControlManager.validateAlterConfig for a TOPIC resource: the
        resulting override set must validate (INVALID_CONFIG), then the topic must exist
        (UNKNOWN_TOPIC_OR_PARTITION). Returns (error, message, ConfigRecords to commit)."""
        if not name:
            return Errors.INVALID_REQUEST, "Default topic resources are not allowed.", []
        msg = validate_topic_name(name)
        if msg:
            return Errors.INVALID_TOPIC_EXCEPTION, msg, []
        merged = dict(current)
        for key, value in changes.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        try:
            parsed = validate_topic_configs(merged)
        except ConfigError as exc:
            return Errors.INVALID_CONFIG, str(exc), []
        if name not in self.image.topics_by_name:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.", []
        records = []
        for key, value in changes.items():
            # stored in the same normalised form CreateTopics writes
            stored = None if value is None else format_value(parsed[key])
            if current.get(key) != stored:
                records.append(m.ConfigRecord(resource_type=RESOURCE_TOPIC, resource_name=name, name=key,
                                              value=stored))
        return 0, None, records

    async def incremental_alter_topic_configs(
            self, resources: Sequence[tuple[str, Sequence[tuple[str, int, str | None]]]],
            validate_only: bool = False) -> list[tuple[int, str | None]]:
        """IncrementalAlterConfigs for TOPIC resources: (topic, [(key, op, value)]) each, ops
        0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT (list-typed keys only). One result per resource,
        in order; a resource whose change fails changes nothing. The caller has already
        rejected duplicate resources/keys and null values (Kafka's ConfigAdminManager)."""
        async with self._lock:
            out: list[tuple[int, str | None]] = []
            records: list[Any] = []
            for name, ops in resources:
                current = dict(self.image.topic_configs(name))
                changes: dict[str, str | None] = {}
                error: tuple[int, str | None] | None = None
                for key, op, value in ops:
                    now = changes[key] if key in changes else current.get(key)
                    if op == OP_SET:
                        changes[key] = value
                    elif op == OP_DELETE:
                        changes[key] = None
                    elif op in (OP_APPEND, OP_SUBTRACT):
                        entry = TOPIC_CONFIGS.get(key)
                        if entry is None or entry[0].type != "list":
                            error = (Errors.INVALID_CONFIG, f"Can't {_OP_NAMES[op]} to key {key} because its type "
                                                            "is not LIST.")
                            break
                        base = now if now is not None else (format_value(entry[0].default) or "")
                        changes[key] = broker_configs.merge_list(base, op, value)
                    else:
                        error = (Errors.INVALID_REQUEST, f"Unknown operations type {op}")
                        break
                if error is None:
                    code, msg, recs = self._validate_topic_config_change(name, current, changes)
                    error = (code, msg)
                    if not code and not validate_only:
                        records.extend(recs)
                out.append(error)
            await self._commit(records)
            return out

    async def legacy_alter_topic_configs(self, resources: Sequence[tuple[str, Mapping[str, str]]],
                                         validate_only: bool = False) -> list[tuple[int, str | None]]:
        """AlterConfigs for TOPIC resources: each (topic, configs) replaces the topic's whole set of
        overrides (keys not named are removed). One (error, message) per resource, in order."""
        async with self._lock:
            out: list[tuple[int, str | None]] = []
            records: list[Any] = []
            for name, configs in resources:
                current = dict(self.image.topic_configs(name))
                changes: dict[str, str | None] = dict(configs)
                for key in current:
                    if key not in configs:
                        changes[key] = None
                code, msg, recs = self._validate_topic_config_change(name, current, changes)
                out.append((code, msg))
                if not code and not validate_only:
                    records.extend(recs)
            await self._commit(records)
            return out

    # ------------------------------------------------------------------ features

    async def update_features(self, updates: Sequence[tuple[str, int, int]],
                              validate_only: bool = False) -> tuple[int, str | None]:
        """UpdateFeatures (Kafka's FeatureControlManager): (feature, level, upgrade type) per
        entry; all or nothing. Returns (error, message) of the first failure, or (0, None)."""
        async with self._lock:
            res = feature_control.validate_updates(self.config.node_id, self.image.features, updates)
            if res.error:
                log.warning("%s", res.message)
                return res.error, res.message
            if not validate_only:
                records = list(res.records or [])
                if any(name == feature_control.ELIGIBLE_LEADER_REPLICAS_VERSION and level > 0
                       for name, level, _ in updates):
                    # ConfigurationControlManager.updateFeatures: ELR's safety configs go first
                    records[:0] = broker_configs.elr_safety_records(
                        self.image.configs, broker_configs.static_min_insync_replicas(self.config))
                await self._commit(records)
            return 0, None

    # ------------------------------------------------------------------ broker configs (KIP-226)

    async def alter_broker_configs(self, resources: Sequence[tuple[str, Any]], incremental: bool,
                                   validate_only: bool = False) -> list[tuple[int, str | None]]:
        """BROKER resources the broker has validated: (name, [(key, op, value)]) when
        incremental, else (name, {key: value}). ConfigRecords as controller/broker_configs.py
        decides them, one batch; one (error, message) per resource, in order."""
        async with self._lock:
            out: list[tuple[int, str | None]] = []
            records: list[Any] = []
            for name, change in resources:
                build = broker_configs.incremental_records if incremental else broker_configs.legacy_records
                code, msg, recs = build(self.image.configs, self.image.features, name, change)
                out.append((code, msg))
                if not code and not validate_only:
                    records.extend(recs)
            await self._commit(records)
            return out

    # ------------------------------------------------------------------ group configs (KIP-848)

    async def alter_group_configs(self, resources: Sequence[tuple[str, Any]], incremental: bool,
                                  validate_only: bool = False) -> list[tuple[int, str | None]]:
        """GROUP resources: (name, [(key, op, value)]) when incremental, else (name, {key: value}).
        Validated and turned into ConfigRecords by controller/group_configs.py, one batch;
        one (error, message) per resource, in order."""
        async with self._lock:
            out: list[tuple[int, str | None]] = []
            records: list[Any] = []
            build = group_configs.incremental_records if incremental else group_configs.legacy_records
            for name, change in resources:
                code, msg, recs = build(self.image.configs, self.config, name, change)
                out.append((code, msg))
                if not code and not validate_only:
                    records.extend(recs)
            await self._commit(records)
            return out

    # ------------------------------------------------------------------ producer ids

    async def allocate_producer_ids(self, broker_id: int) -> tuple[int, int]:
        """A block of producer ids for `broker_id`: (first id, block length)."""
        async with self._lock:
            start = self.image.next_producer_id
            await self._commit([m.ProducerIdsRecord(broker_id=broker_id, broker_epoch=self.broker_epoch,
                                                    next_producer_id=start + PRODUCER_ID_BLOCK_SIZE)])
            return start, PRODUCER_ID_BLOCK_SIZE

    # ------------------------------------------------------------------ SCRAM credentials (KIP-554)

    async def alter_user_scram_credentials(
            self, deletions: Sequence[scram.Deletion], upsertions: Sequence[scram.Upsertion]
    ) -> list[scram.AlterResult]:
        """Kafka's ScramControlManager.alterCredentials: validate against the image, commit the
        UserScramCredentialRecord/RemoveUserScramCredentialRecord batch, one result per user."""
        async with self._lock:
            version = self.image.features.get("metadata.version", METADATA_VERSION)
            records, results = scram.alter_credentials(self.image.scram_credentials, version,
                                                       deletions, upsertions)
            await self._commit(records)
            return results

    # ------------------------------------------------------------------ client quotas (KIP-546)

    async def alter_client_quotas(self, alterations: Sequence[client_quotas.Alteration], resolvable: set[str],
                                  validate_only: bool = False) -> list[client_quotas.AlterResult]:
        """Kafka's ClientQuotaControlManager.alterClientQuotas: validate against the image, commit
        the ClientQuotaRecords as one batch (none when validate_only), one result per entity."""
        async with self._lock:
            records, results = client_quotas.alter_client_quotas(self.image.client_quotas, alterations,
                                                                 resolvable)
            if not validate_only:
                await self._commit(records)
            return results


    # ------------------------------------------------------------------ ACLs (KIP-500 StandardAuthorizer)

    async def create_acls(self, acls: Sequence[acl_control.StandardAcl]) -> list[tuple[int, str | None]]:
        """Kafka's AclControlManager.createAcls: validate, commit the AccessControlEntryRecords as
        one batch, (error, message) per ACL in order."""
        async with self._lock:
            records, results = acl_control.create_acls(self.image.acls, acls)
            await self._commit(records)
            return results

    async def delete_acls(self, filters: Sequence[acl_control.AclBindingFilter]) -> list[acl_control.DeleteResult]:
        """Kafka's AclControlManager.deleteAcls: one result per filter listing the ACLs it matched;
        the RemoveAccessControlEntryRecords are committed as one batch."""
        async with self._lock:
            records, results = acl_control.delete_acls(self.image.acls, filters)
            await self._commit(records)
            return results


def _start_index(name: str) -> int:
    # deterministic spread of partition leaders across brokers, like Kafka's random start index
    return int.from_bytes(os.urandom(2), "big") if not name else sum(name.encode()) & 0xFFFF
