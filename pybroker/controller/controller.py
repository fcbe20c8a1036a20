"""The active controller (Kafka's QuorumController, reduced), on the KRaft quorum.

Every node with the controller role runs one; it is *active* only on the Raft leader of
__cluster_metadata, from the moment the leader-change event reaches it through the metadata
loader (so it has seen every record committed before its epoch) until leadership goes. Every
change is decided here against the committed image, appended as one batch of metadata records
through the Raft driver, committed by the quorum, replayed into this node's image by the loader
(as on every other node) and published to this node's components; only then does the operation
answer. So a CreateTopics answer from the active controller means the partitions this node
hosts already serve, and a restart that replays the log rebuilds exactly what clients saw.
Operations are serialised by one trio lock (Kafka's controller event queue): validation sees
the image as of the previous committed change. An operation on a node that is not (or stops
being) the active controller fails with NOT_CONTROLLER (if leadership is lost after the append,
the change may or may not have committed, as in Kafka).

On first activation of a new cluster (no metadata.version in the image) the controller writes
the bootstrap records: the feature levels (from `bootstrap.checkpoint` when
`pybroker storage format` wrote one, else Kafka 4.2's defaults) and the cluster-level
min.insync.replicas ConfigRecord ELR needs.

Validation follows Kafka's ReplicationControlManager: topic names (INVALID_TOPIC_EXCEPTION),
partition counts (INVALID_PARTITIONS), replication factors (INVALID_REPLICATION_FACTOR, above
the unfenced broker count), manual assignments (INVALID_REPLICA_ASSIGNMENT), topic configs
(INVALID_CONFIG). Placement is Kafka's StripedReplicaPlacer (controller/replica_placer.py).
Topic config changes follow ConfigurationControlManager: a ConfigRecord per changed key
(value None removes the override), validated as the whole resulting override set. Broker
registration, heartbeats and fencing: controller/cluster_control.py; the elections they cause,
ElectLeaders and the periodic leader checks: controller/replication_control.py.

**Deliberate difference until issue 9 (replication):** a partition's ISR is written as its
leader alone, not every replica: followers hold empty logs and do not fetch yet, so listing them
in the ISR would claim copies that do not exist (min.insync.replicas above 1 then answers
NOT_ENOUGH_REPLICAS, honestly).
"""

from __future__ import annotations

import logging
import re
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio

from pybroker.config import (
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigError,
    format_value,
    validate_tiered_topic_configs,
    validate_topic_configs,
)
from pybroker.controller import acls as acl_control
from pybroker.controller import (
    broker_configs,
    client_quotas,
    delegation_tokens,
    group_configs,
    replication_control,
    scram,
)
from pybroker.controller import features as feature_control
from pybroker.controller.alter_partition import alter_partition as alter_partition_rules
from pybroker.controller.broker_configs import OP_APPEND, OP_DELETE, OP_SET, OP_SUBTRACT
from pybroker.controller.cluster_control import (
    CONTROLLED_SHUTDOWN,
    BrokerHeartbeatManager,
    fence_records,
    heartbeat,
    registration_records,
)
from pybroker.controller.replica_placer import StripedReplicaPlacer, UsableBroker
from pybroker.controller.replication_control import ReplicationControl
from pybroker.metadata.image import RESOURCE_TOPIC, MetadataImage
from pybroker.protocol import messages as m
from pybroker.protocol.errors import Errors, KafkaError
from pybroker.raft.errors import NotLeaderError

log = logging.getLogger("pybroker.controller")

# 4.2-IV1: the level Kafka 4.2 writes at format time; why pybroker may claim it: controller/features.py
METADATA_VERSION = feature_control.BOOTSTRAP_METADATA_VERSION
PRODUCER_ID_BLOCK_SIZE = 1000
# QuorumController.MAX_RECORDS_PER_USER_OP: no user operation may write more records than one
# controller batch holds (Kafka's BoundedList; over it the whole request fails POLICY_VIOLATION).
MAX_RECORDS_PER_USER_OP = 10000
# ReplicationControlManager.MAX_PARTITIONS_PER_BATCH: checked on the request, before anything is built.
MAX_PARTITIONS_PER_BATCH = 10000
UNCLEAN_CHECK_INTERVAL_S = 300.0  # QuorumController's uncleanLeaderElectionCheckIntervalMs (5 minutes)
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


class RaftWriter(Protocol):
    """What the controller needs of the Raft layer (pybroker.raft.RaftDriver)."""

    def append(self, records: list[Any]) -> int: ...

    async def wait_for_commit(self, offset: int) -> None: ...


class AppliedOffsets(Protocol):
    """What the controller needs of the metadata loader (pybroker.metadata.loader)."""

    async def wait_for_offset(self, offset: int) -> None: ...


class QuorumController:
    def __init__(self, config: BrokerConfig, image: MetadataImage, raft: RaftWriter, loader: AppliedOffsets, *,
                 cluster_id: str, now_ms: Callable[[], int],
                 next_append_offset: Callable[[], int | None] = lambda: None,
                 bootstrap_records: Callable[[], list[Any] | None] = lambda: None,
                 placer: StripedReplicaPlacer | None = None) -> None:
        self.config = config
        self.image = image
        self.raft = raft
        self.loader = loader
        self.cluster_id = cluster_id
        self.now_ms = now_ms
        self._next_append_offset = next_append_offset
        self._bootstrap_records = bootstrap_records
        self.placer = placer or StripedReplicaPlacer()
        self.replication = ReplicationControl(config, image)  # elections (controller/replication_control.py)
        self._lock = trio.Lock()
        self.active = False
        self.epoch = -1  # the Raft epoch this controller is (or is becoming) active in
        self.heartbeats: BrokerHeartbeatManager | None = None
        self._leader_events = trio.open_memory_channel[Any](100)
        self.activated = trio.Event()  # set on each activation (tests, start-up)
        # (node id, incarnation id) of the broker in this process (cluster_control.registration_records)
        self.local_incarnation: tuple[int, bytes] | None = None

    # ------------------------------------------------------------------ leadership

    def handle_leader_change(self, leader: Any) -> None:
        """A loader leader listener: never waits (activation commits, which needs the loader)."""
        if not leader.is_leader(self.config.node_id):
            self._deactivate()
        try:
            self._leader_events[0].send_nowait(leader)
        except trio.WouldBlock:  # pragma: no cover - 100 leader changes pending
            log.warning("controller leader-change queue full; dropping %s", leader)

    def _deactivate(self) -> None:
        if self.active:
            log.info("node %d is no longer the active controller (epoch %d)", self.config.node_id, self.epoch)
        self.active = False
        self.heartbeats = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Activation on leader changes, and the active controller's session timer."""
        task_status.started()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._fence_stale_brokers)
            nursery.start_soon(self._leader_checks)
            nursery.start_soon(self._sweep_expired_delegation_tokens)
            async for leader in self._leader_events[1]:
                if leader.is_leader(self.config.node_id):
                    await self._activate(leader.epoch)
                else:
                    self._deactivate()

    async def _activate(self, epoch: int) -> None:
        async with self._lock:
            self.epoch = epoch
            now = self.now_ms()
            heartbeats = BrokerHeartbeatManager(self.config["broker.session.timeout.ms"])
            for b in self.image.brokers.values():
                heartbeats.register(b.broker_id, b.fenced, now)  # a fresh session for every broker
                if b.in_controlled_shutdown and not b.fenced:  # still shutting down: carry on
                    heartbeats.maybe_update_controlled_shutdown_offset(b.broker_id, self.image.offset)
            records: list[Any] = []
            if "metadata.version" not in self.image.features:
                # a new cluster: the bootstrap feature levels (older data dirs keep theirs), then
                # KIP-966's cluster-level min.insync.replicas when they enable ELR
                boot = self._bootstrap_records()
                records.extend(boot if boot else feature_control.bootstrap_records(METADATA_VERSION))
                levels = {r.name: r.feature_level for r in records if type(r).__name__ == "FeatureLevelRecord"}
                records.extend(broker_configs.activation_records(
                    levels, broker_configs.static_min_insync_replicas(self.config)))
            try:
                if records:
                    await self._append_and_wait(records)
            except KafkaError as exc:
                log.warning("activation in epoch %d failed: %s", epoch, exc.message)
                return
            if self.epoch != epoch:
                return
            self.heartbeats = heartbeats
            self.active = True
            log.info("node %d is the active controller (epoch %d)", self.config.node_id, epoch)
            self.activated.set()
            self.activated = trio.Event()

    async def _fence_stale_brokers(self) -> None:
        """Fence unfenced brokers whose heartbeats stopped for broker.session.timeout.ms
        (Kafka's maybeFenceStaleBroker), when the first session expires: Kafka schedules the
        check at the heartbeat manager's next expiry (rescheduleMaybeFenceStaleBrokers). A check
        every quarter of a session fenced up to 2.25 s late at the default 9 s. One broker per
        batch, as Kafka's one-broker events: each batch's elections see the previous one's."""
        idle_s = max(0.05, self.config["broker.session.timeout.ms"] / 4000)  # no session to watch
        while True:
            hb = self.heartbeats
            delay_s = idle_s
            expiry = hb.next_expiry_ms() if self.active and hb is not None else None
            if expiry is not None:  # a heartbeat meanwhile only makes this wake-up find nothing
                delay_s = min(idle_s, max(0.005, (expiry - self.now_ms()) / 1000))
            await trio.sleep(delay_s)
            hb = self.heartbeats
            if not self.active or hb is None:
                continue
            stale = hb.stale_brokers(self.now_ms())
            if not stale:
                continue
            async with self._lock:
                hb = self.heartbeats
                if not self.active or hb is None:
                    continue
                for broker_id in hb.stale_brokers(self.now_ms()):
                    records = fence_records([broker_id], self.image.brokers, self.replication)
                    hb.touch(broker_id, True, -1, self.now_ms())
                    try:
                        offset = await self._commit(records, user_op=False)
                    except KafkaError:
                        break
                    # the end of a failover's controller part (bench/replication reads this line)
                    log.info("Fenced broker %d: %d record(s) committed at offset %d", broker_id, len(records), offset)

    async def _leader_checks(self) -> None:
        """The active controller's periodic elections: preferred leaders back in place every
        leader.imbalance.check.interval.seconds when auto.leader.rebalance.enable (Kafka's
        maybeBalancePartitionLeaders), and unclean elections for leaderless partitions of topics
        that allow them every 5 minutes (maybeElectUncleanLeaders). A batch that hit the
        per-check limit runs again at once."""
        next_balance = next_unclean = 0.0
        while True:
            now = trio.current_time()
            balance_s = float(self.config["leader.imbalance.check.interval.seconds"])
            if not self.active:
                next_balance, next_unclean = now + balance_s, now + UNCLEAN_CHECK_INTERVAL_S
                await trio.sleep(min(balance_s, 1.0))
                continue
            if now >= next_balance:
                more = False
                if self.config["auto.leader.rebalance.enable"]:
                    more = await self._periodic(self.replication.maybe_balance_partition_leaders)
                next_balance = now if more else now + balance_s
            if now >= next_unclean:
                more = await self._periodic(self.replication.maybe_elect_unclean_leaders)
                next_unclean = now if more else now + UNCLEAN_CHECK_INTERVAL_S
            await trio.sleep_until(max(trio.current_time() + 0.01, min(next_balance, next_unclean)))

    async def _periodic(self, build: Callable[[], list[Any]]) -> bool:
        """Commit what `build` decides; True when it hit the per-check election limit."""
        async with self._lock:
            if not self.active:
                return False
            records = build()
            try:
                await self._commit(records, user_op=False)
            except KafkaError:
                return False
            return len(records) >= replication_control.MAX_ELECTIONS_PER_IMBALANCE

    # ------------------------------------------------------------------ commit path

    async def _append_and_wait(self, records: list[Any]) -> int:
        try:
            offset = self.raft.append(records)
            await self.raft.wait_for_commit(offset)
        except NotLeaderError as exc:
            self._deactivate()
            raise KafkaError(Errors.NOT_CONTROLLER, f"The controller lost leadership: {exc}") from None
        await self.loader.wait_for_offset(offset)
        return offset

    def _check_active(self) -> None:
        if not self.active:
            raise KafkaError(Errors.NOT_CONTROLLER, f"node {self.config.node_id} is not the active controller")

    async def _commit(self, records: list[Any], user_op: bool = True) -> int:
        """Append atomically (one batch), wait for the quorum to commit it and for this node's
        loader to have applied and published it; returns the last record's offset (-1: nothing).
        KafkaError(NOT_CONTROLLER) when this node is not (or stops being) the active controller.
        Only a user operation is bounded by MAX_RECORDS_PER_USER_OP: a broker's fencing or
        controlled shutdown changes every partition it hosts, as many as there are."""
        self._check_active()
        if not records:
            return -1
        if user_op and len(records) > MAX_RECORDS_PER_USER_OP:
            raise KafkaError(Errors.POLICY_VIOLATION, EXCESSIVE_BATCH)
        return await self._append_and_wait(records)

    # ------------------------------------------------------------------ broker membership (KIP-631)

    async def register_broker(self, req: Any) -> tuple[int, int, str | None]:
        """BrokerRegistration: (error, broker epoch, message). The epoch is the offset the
        RegisterBrokerRecord is written at, as Kafka's."""
        async with self._lock:
            self._check_active()
            assert self.heartbeats is not None
            new_epoch = self._next_append_offset()
            if new_epoch is None:
                raise KafkaError(Errors.NOT_CONTROLLER, "not the Raft leader")
            try:
                records, epoch = registration_records(req, self.cluster_id, self.image.brokers, self.image.features,
                                                      self.heartbeats, new_epoch, self.now_ms(),
                                                      self.local_incarnation, self.replication)
            except KafkaError as exc:
                if exc.code == Errors.NOT_CONTROLLER:
                    raise
                log.info("refused the registration of broker %d: %s", req.broker_id, exc.message)
                return int(exc.code), -1, exc.message
            await self._commit(records, user_op=False)
            return 0, epoch, None

    async def broker_heartbeat(self, req: Any) -> tuple[int, bool, bool, bool]:
        """BrokerHeartbeat: (error, is_caught_up, is_fenced, should_shut_down). A heartbeat that
        changes nothing answers without the lock; a state change (fencing, unfencing, controlled
        shutdown) commits its records (the partitions' moves with the broker's) first."""
        self._check_active()
        hb = self.heartbeats
        assert hb is not None
        try:
            probe = heartbeat(req, self.image.brokers, hb, self.now_ms(), quiet=True,
                              transitions=self.replication, dry_run=True)
        except KafkaError as exc:
            return int(exc.code), False, True, False
        if probe.state == probe.previous and probe.state != CONTROLLED_SHUTDOWN:
            hb.touch(req.broker_id, probe.is_fenced, req.current_metadata_offset, self.now_ms())
            return 0, probe.is_caught_up, probe.is_fenced, probe.should_shut_down
        async with self._lock:
            # decided again under the lock: another heartbeat may have changed the state
            hb = self.heartbeats
            self._check_active()
            assert hb is not None
            try:
                outcome = heartbeat(req, self.image.brokers, hb, self.now_ms(), transitions=self.replication)
            except KafkaError as exc:
                return int(exc.code), False, True, False
            offset = await self._commit(outcome.records, user_op=False)
            if outcome.state == CONTROLLED_SHUTDOWN:
                # granted once every active broker has applied this far (lowest_active_offset)
                hb.maybe_update_controlled_shutdown_offset(req.broker_id, offset if offset >= 0 else self.image.offset)
        return 0, outcome.is_caught_up, outcome.is_fenced, outcome.should_shut_down

    async def elect_leaders(self, election_type: int, requested: Sequence[tuple[str, Sequence[int]]] | None
                            ) -> list[tuple[str, list[tuple[int, int, str | None]]]]:
        """ElectLeaders (PREFERRED 0, UNCLEAN 1): per topic, (partition, error, message); the
        elections commit as one batch before the answer (controller/replication_control.py)."""
        async with self._lock:
            self._check_active()
            records, results = self.replication.elect_leaders(election_type, requested)
            await self._commit(records)
            return results

    async def alter_partition_reassignments(
            self, requested: Sequence[tuple[str, Sequence[tuple[int, Sequence[int] | None]]]],
            allow_rf_change: bool = True,
    ) -> list[tuple[str, list[tuple[int, int, str | None]]]]:
        """AlterPartitionReassignments: per topic, (partition, error, message); every change
        commits as one batch (Kafka's ControllerResult.atomicOf). allow_rf_change: KIP-860."""
        async with self._lock:
            self._check_active()
            records: list[Any] = []
            out = [(name, [(pid, *self.replication.alter_partition_reassignment(name, pid, target, records,
                                                                                allow_rf_change))
                           for pid, target in partitions])
                   for name, partitions in requested]
            await self._commit(records)
            return out

    def list_partition_reassignments(self, requested: Sequence[tuple[str, Sequence[int]]] | None
                                     ) -> list[tuple[str, list[tuple[int, list[int], list[int], list[int]]]]]:
        self._check_active()
        return self.replication.list_partition_reassignments(requested)

    # ------------------------------------------------------------------ topics

    def _live_brokers(self) -> list[int]:
        return sorted(b for b, reg in self.image.brokers.items() if not reg.fenced and not reg.in_controlled_shutdown)

    def _place(self, num_partitions: int, rf: int) -> list[list[int]]:
        usable = [UsableBroker(b, self.image.brokers[b].rack) for b in self._live_brokers()]
        return self.placer.place(num_partitions, rf, usable)

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
                               "are registered and unfenced.")
                return res
            res.num_partitions, res.replication_factor = np_, rf_
        try:
            parsed = validate_topic_configs(configs)
            effective = self.config.topic_defaults()
            effective.update(parsed)
            validate_tiered_topic_configs({}, effective, self.config["remote.log.storage.system.enable"])
        except ConfigError as exc:
            res.error, res.message = Errors.INVALID_CONFIG, str(exc)
            return res
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
                     else self._place(res.num_partitions, res.replication_factor))
        for p, replicas in enumerate(placement):
            recs.append(m.PartitionRecord(partition_id=p, topic_id=tid, replicas=replicas, isr=initial_isr(replicas),
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
                if t.name.startswith("__") and t.name in ("__consumer_offsets", "__transaction_state",
                                                          "__share_group_state"):
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
                                    f"Unable to replicate the partition {rf} time(s): The target replication "
                                    f"factor of {rf} cannot be reached because only {len(live)} broker(s) "
                                    "are registered and unfenced."))
                        continue
                    placement = self._place(add, rf)
                out.append((name, 0, None))
                if validate_only:
                    continue
                tid = t.topic_id
                for i, replicas in enumerate(placement):
                    records.append(m.PartitionRecord(
                        partition_id=current + i, topic_id=tid, replicas=replicas, isr=initial_isr(replicas),
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
            effective = self.config.topic_defaults()
            effective.update(parsed)
            validate_tiered_topic_configs(current, effective, self.config["remote.log.storage.system.enable"])
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
            records += self.replication.elr_clears_for_config_changes(records)
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
            records += self.replication.elr_clears_for_config_changes(records)
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
        """BROKER resources: (name, [(key, op, value)]) when incremental, else (name, {key: value}),
        keys and values validated by the broker that received them (none when sent to the
        controller listener directly, as in Kafka); names checked here (broker_name_error).
        ConfigRecords as controller/broker_configs.py decides them, one batch; one (error,
        message) per resource, in order."""
        async with self._lock:
            out: list[tuple[int, str | None]] = []
            records: list[Any] = []
            node_ids = {*self.image.brokers, *self.config.quorum_voters, self.config.node_id}
            for name, change in resources:
                refused = broker_configs.broker_name_error(name, node_ids)
                if refused is not None:
                    out.append(refused)
                    continue
                build = broker_configs.incremental_records if incremental else broker_configs.legacy_records
                code, msg, recs = build(self.image.configs, self.image.features, name, change)
                out.append((code, msg))
                if not code and not validate_only:
                    records.extend(recs)
            records += self.replication.elr_clears_for_config_changes(records)
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

    # ------------------------------------------------------------------ ISR changes (controller/alter_partition.py)

    async def alter_partition(self, req: Any, version: int) -> Any:
        """AlterPartition from a partition leader: validate against the image, append the ISR
        changes in one batch, answer once committed (NOT_CONTROLLER if leadership is lost)."""
        async with self._lock:
            self._check_active()
            records, response = alter_partition_rules(self.image, req, version, self.replication)
            await self._commit(records)
            return response

    # ------------------------------------------------------------------ producer ids

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int = -1) -> tuple[int, int]:
        """A block of producer ids for `broker_id` (Kafka's ProducerIdControlManager): (first id,
        block length). STALE_BROKER_EPOCH when `broker_epoch` (>= 0) is not the broker's."""
        async with self._lock:
            self._check_active()
            reg = self.image.brokers.get(broker_id)
            if broker_epoch >= 0 and (reg is None or reg.epoch != broker_epoch):
                raise KafkaError(Errors.STALE_BROKER_EPOCH, f"Expected broker epoch "
                                 f"{reg.epoch if reg else -1}, but got broker epoch {broker_epoch}")
            start = self.image.next_producer_id
            await self._commit([m.ProducerIdsRecord(broker_id=broker_id, broker_epoch=broker_epoch,
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

    # ------------------------------------------------------------------ delegation tokens (KIP-48)

    def token_settings(self) -> delegation_tokens.TokenSettings:
        cfg = self.config
        return delegation_tokens.TokenSettings(cfg["delegation.token.secret.key"] or None,
                                               cfg["delegation.token.max.lifetime.ms"],
                                               cfg["delegation.token.expiry.time.ms"])

    async def create_delegation_token(self, requester: str, owner: str, renewers: Sequence[tuple[str, str]],
                                      max_lifetime_ms: int) -> delegation_tokens.CreateResult:
        """DelegationTokenControlManager.createDelegationToken: one DelegationTokenRecord."""
        async with self._lock:
            version = self.image.features.get("metadata.version", METADATA_VERSION)
            records, result = delegation_tokens.create(self.token_settings(), version, self.now_ms(), requester,
                                                       owner, renewers, max_lifetime_ms)
            await self._commit(records)
            return result

    async def renew_delegation_token(self, principal: str, hmac: bytes, renew_period_ms: int
                                     ) -> delegation_tokens.ExpiryResult:
        async with self._lock:
            version = self.image.features.get("metadata.version", METADATA_VERSION)
            result = delegation_tokens.renew(self.token_settings(), version, self.image.delegation_tokens,
                                             self.now_ms(), principal, hmac, renew_period_ms)
            await self._commit(result.records)
            return result

    async def expire_delegation_token(self, principal: str, hmac: bytes, expiry_time_period_ms: int
                                      ) -> delegation_tokens.ExpiryResult:
        async with self._lock:
            version = self.image.features.get("metadata.version", METADATA_VERSION)
            result = delegation_tokens.expire(self.token_settings(), version, self.image.delegation_tokens,
                                              self.now_ms(), principal, hmac, expiry_time_period_ms)
            await self._commit(result.records)
            return result

    async def _sweep_expired_delegation_tokens(self) -> None:
        """The active controller removes expired tokens every
        delegation.token.expiry.check.interval.ms when tokens are enabled (Kafka's
        maybeScheduleNextExpiredDelegationTokenSweep)."""
        interval_s = self.config["delegation.token.expiry.check.interval.ms"] / 1000
        while True:
            await trio.sleep(interval_s)
            if not self.active or not self.config["delegation.token.secret.key"]:
                continue
            async with self._lock:
                if not self.active:
                    continue
                records = delegation_tokens.sweep(self.image.delegation_tokens, self.now_ms())
                for r in records:
                    log.info("Delegation token expired for token: %s", r.token_id)
                try:
                    await self._commit(records, user_op=False)
                except KafkaError:
                    continue

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


def initial_isr(replicas: Sequence[int]) -> list[int]:
    """The ISR a new partition is written with: all its replicas, as Kafka's (every log is empty,
    so every replica is in sync; a replica that never fetches leaves it after
    replica.lag.time.max.ms)."""
    return list(replicas)
