"""All partitions hosted here, kept in step with the metadata image (Kafka's ReplicaManager).

The request paths' entry points, each called once by its handler (which decodes, authorizes
and encodes): `append_records` (Produce: Partition.append_records_to_leader per partition, then
a DelayedProduce for acks=all; `handle_produce_append` verifies a transactional one first),
`fetch_messages` / `read_from_log` (Fetch: Partition.fetch_records and read_records per
partition, then a DelayedFetch below fetch.min.bytes, which completes through `read_from_log`
too) and `delete_records` (DeleteRecords: Partition.delete_records_on_leader, then a
DelayedDeleteRecords). Each returns its per-partition results and the delayed operation, if any,
for the handler to await on its connection.

Owns the produce, fetch and delete-records purgatories: an append completes waiting fetches on
that partition at once (`check_and_complete`), acks=all produces wait in the produce purgatory
until the high watermark passes their last offset, and a DeleteRecords waits in the
delete-records purgatory until the low watermark (`low_watermark`) reaches its offset. The
log's own background work is the LogManager's, as in Kafka (docs/ARCHITECTURE.md, "Background
tasks"): flushing (an append here calls `LogManager.maybe_flush`), retention, the cleaner,
segment and log deletion, producer-id expiration and the recovery-point / log-start-offset
checkpoints. This keeps the high watermarks' checkpoint (`run_high_watermark_checkpointer`).

Replication (docs/ARCHITECTURE.md, "Partition replication"): each metadata change makes a
hosted partition leader (makeLeader: the new epoch starts at the log end, followers' states
reset) or follower (makeFollower: stop serving, hand it to the ReplicaFetcherManager, which
truncates by leader epoch and then fetches). On the leader, follower fetches update the
followers' states (`update_follower_fetch_state`), which moves the high watermark and proposes
ISR expansions; `run_isr_expiration` proposes shrinks; proposals go to the controller through
the AlterPartitionManager, and an accepted one changes the ISR at once.

Scale (thousands of partitions): no event-loop step walks every partition. Metadata changes
touch the topics they name; partitions are also indexed by topic (the coordinators' view); the
periodic passes (the high-watermark checkpoint, ISR expiration) yield to the loop every
`_PASS_CHUNK` partitions.
Log directories are created and renamed away in worker threads, `_CREATE_CHUNK` at a time.

Concurrency: trio thread only; blocking work goes through `spawn` (a nursery's start_soon).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Sequence
from typing import Any

import trio

from pybroker._native.errors import RecordError
from pybroker.clock import SYSTEM_CLOCK, Clock
from pybroker.config import BrokerConfig, format_value
from pybroker.errors import KafkaError
from pybroker.log.config import LogConfig
from pybroker.log.errors import LogError, RecordValidationError
from pybroker.log.log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    mark_segments_deleted,
)
from pybroker.log.log_append_info import LogAppendInfo
from pybroker.log.manager import LogManager
from pybroker.log.remote.remote_log_segment_metadata import TopicIdPartition
from pybroker.metadata.image import RESOURCE_TOPIC, MetadataImage
from pybroker.metrics.broker_topic_stats import BrokerTopicStats
from pybroker.protocol.errors import Errors
from pybroker.purgatory.purgatory import DelayedOperationPurgatory
from pybroker.purgatory.timer import SystemTimer
from pybroker.records.batch import ATTRIBUTES_OFFSET, TRANSACTIONAL_FLAG
from pybroker.replication.alter_partition_manager import AlterPartitionItem, AlterPartitionManager
from pybroker.replication.delayed_delete_records import (
    DelayedDeleteRecords,
    DeleteRecordsPartitionStatus,
)
from pybroker.replication.delayed_fetch import DelayedFetch
from pybroker.replication.delayed_produce import DelayedProduce, ProducePartitionStatus
from pybroker.replication.delayed_remote_fetch import DelayedRemoteFetch
from pybroker.replication.fetch_params import (
    FETCH_LOG_END as FETCH_LOG_END,  # re-exported: the fetch vocabulary's old home
)
from pybroker.replication.fetch_params import (
    READ_COMMITTED,
    ZERO_TOPIC_ID,
    FetchInfo,
    FetchParams,
    LogRead,
)
from pybroker.replication.leader_end_point import LeaderEndPointFactory, remote_leader_end_points
from pybroker.replication.partition import Partition
from pybroker.replication.remote_log_manager import RemoteLogManager
from pybroker.replication.remote_log_reader import (
    RemoteLogReader,
    RemoteStorageFetchInfo,
    remote_log_reader,
)
from pybroker.replication.replica_fetcher_manager import ReplicaFetcherManager
from pybroker.replication.replica_selector import ReplicaView, replica_selector
from pybroker.replication.replication_quota_manager import (
    FOLLOWER_REPLICATION,
    FOLLOWER_THROTTLED_REPLICAS,
    LEADER_REPLICATION,
    LEADER_THROTTLED_REPLICAS,
    ReplicationQuotaManager,
)
from pybroker.replication.transaction_verification import (
    ADD_PARTITIONS_RETRY_BACKOFF_S,
    ADD_PARTITIONS_RETRY_MAX_S,
    ProduceEntry,
    TransactionSupportedOperation,
    TransactionVerifier,
    transaction_error,
    transactional_producer,
)

log = logging.getLogger("pybroker.replica")

TopicPartition = tuple[str, int]
_CREATE_CHUNK = 500  # partitions created per worker-thread call (then published on the loop)
_PASS_CHUNK = 500  # partitions a periodic pass visits between two yields to the event loop
_PUBLISH_CHUNK = 100  # new partitions published between two yields (each builds a Partition)
_TXN_ATTRIBUTE_BYTE = ATTRIBUTES_OFFSET + 1  # the batch attributes' low byte: the transactional bit
_GLOBAL_RECORDS = frozenset({"FeatureLevelRecord", "RegisterBrokerRecord", "FenceBrokerRecord",
                             "UnfenceBrokerRecord", "BrokerRegistrationChangeRecord"})


# AlterPartition answers after which the leader waits for the metadata image instead of retrying
# (Kafka's Partition.handleAlterPartitionError)
_ISR_GIVE_UP = frozenset({Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.FENCED_LEADER_EPOCH, Errors.INVALID_UPDATE_VERSION,
                          Errors.INELIGIBLE_REPLICA, Errors.NEW_LEADER_ELECTED, Errors.UNKNOWN_TOPIC_ID})
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


def error_name(code: int) -> str:
    try:
        return Errors(code).name
    except ValueError:
        return str(code)


def check_leader_epoch(p: Partition, current_leader_epoch: int) -> int:
    """Kafka's Partition.checkCurrentLeaderEpoch: 0, FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH."""
    return p.check_current_leader_epoch(current_leader_epoch)


def _touches_everything(record: Any) -> bool:
    """Records after which every hosted partition is re-examined (broker-level configs change
    every topic's defaults; broker records may change leadership)."""
    kind = type(record).__name__
    if kind == "ConfigRecord":
        return bool(record.resource_type != RESOURCE_TOPIC)
    return kind in _GLOBAL_RECORDS


def _drain(steps: Generator[None, None, Any]) -> Any:
    """Run a stepwise pass (a generator that pauses between chunks) to its end; its result."""
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value


async def _drain_async(steps: Generator[None, None, Any]) -> Any:
    """`_drain`, yielding to the event loop at each pause."""
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value
        await trio.lowlevel.checkpoint()


def _now_ms() -> int:
    """The replication quotas' clock: trio's, in milliseconds (docs: clock.py)."""
    return int(trio.current_time() * 1000)


def log_config(defaults: dict[str, Any], overrides: dict[str, str] | None = None) -> LogConfig:
    """The storage LogConfig of a topic: broker-derived defaults, then the topic's overrides."""
    merged = {k: format_value(v) for k, v in defaults.items()}
    merged.update(overrides or {})
    return LogConfig().with_overrides(merged)


class ReplicaManager:
    def __init__(self, config: BrokerConfig, log_manager: LogManager, image: MetadataImage,
                 timer: SystemTimer, spawn: Callable[..., Any], clock: Clock = SYSTEM_CLOCK,
                 leader_end_points: LeaderEndPointFactory | None = None) -> None:
        self.config = config
        self.node_id = config.node_id
        self.log_manager = log_manager
        self.image = image
        self.timer = timer
        self.spawn = spawn
        self.clock = clock
        self.partitions: dict[TopicPartition, Partition] = {}
        self._by_topic: dict[str, dict[int, Partition]] = {}  # topic -> its partitions here
        self._topic_names: dict[bytes, str] = {}  # topic id -> name, of the topics hosted here
        # called after each batch of new partitions is published: a node that owns its process
        # freezes them into the collector's permanent generation (server/broker.py)
        self.after_create: Callable[[], None] | None = None
        self.fetch_purgatory = DelayedOperationPurgatory("Fetch", timer)
        self.produce_purgatory = DelayedOperationPurgatory("Produce", timer)
        self.delete_records_purgatory = DelayedOperationPurgatory("DeleteRecords", timer)
        self._hw_checkpoint: dict[TopicPartition, int] = {}
        # metrics (pybroker/metrics): bumped in place here, read only when scraped
        self.topic_stats = BrokerTopicStats()  # Kafka's BrokerTopicStats: messages/bytes in and out per topic
        self.isr_shrinks = self.isr_expands = self.failed_isr_updates = 0  # Kafka's IsrShrinks/ExpandsPerSec
        # replication: the follower side (fetchers) and the leader's ISR changes to the controller;
        # the node gives `alter_partition_manager` its controller channel (server/broker.py);
        # `leader_end_points` makes each fetcher's leader (the network's when not given)
        self.fetcher_manager = ReplicaFetcherManager(
            self, leader_end_points or remote_leader_end_points(config, image))
        self.alter_partition_manager: AlterPartitionManager | None = None
        # KIP-890: a transactional Produce's partitions verified with (added to) the transaction
        # by the transaction coordinators (server/broker.py gives it theirs)
        self.add_partitions_manager: TransactionVerifier | None = None
        # KIP-392: the consumer fetches' preferred read replica (replica.selector.class)
        self.replica_selector = replica_selector(config["replica.selector.class"])
        # KIP-73 replication throttles: the partitions from the topics' throttled-replicas configs
        # (here), the rates from the dynamic broker configs (server/dynamic_config.py)
        windows = (config["replication.quota.window.num"], config["replication.quota.window.size.seconds"])
        self.leader_quota = ReplicationQuotaManager(LEADER_REPLICATION, *windows)
        self.follower_quota = ReplicationQuotaManager(FOLLOWER_REPLICATION, *windows)
        # tiered storage (KIP-405), the read side: `remote_log_reader` is made from the remote log
        # manager's RSM and RLMM when it is attached (`attach_remote_log_manager`); a consumer's
        # fetch below a tiered partition's local log start is read back through it in a
        # DelayedRemoteFetch, a follower's answered OFFSET_MOVED_TO_TIERED_STORAGE
        self.remote_log_reader: RemoteLogReader | None = None
        self.remote_fetch_purgatory = DelayedOperationPurgatory("RemoteFetch", timer)
        self.remote_fetch_expired = 0  # Kafka's DelayedRemoteFetchMetrics ExpiresPerSec (a total)
        self.remote_fetch_throttled = 0  # remote reads not scheduled while over the fetch quota
        # followers built from remote storage (Kafka's BuildRemoteLogAuxStateRequestsPerSec and
        # BuildRemoteLogAuxStateErrorsPerSec, totals; replica_fetcher.py)
        self.build_remote_log_aux_state_requests = self.failed_build_remote_log_aux_state = 0
        # tiered storage (KIP-405): set by server/broker.py when remote.log.storage.system.enable;
        # told of every leadership/config change and removal of a hosted partition
        self.remote_log_manager: RemoteLogManager | None = None

    # ------------------------------------------------------------------ tiered storage (the RemoteLogManager's hooks)

    def attach_remote_log_manager(self, rlm: RemoteLogManager) -> None:
        """Give this node's RemoteLogManager the hosted partitions' roles from now on (and the
        ones already published), and let its expiration's log start offset moves reach the
        log manager (the local segments below it) and waiting DeleteRecords."""
        self.remote_log_manager = rlm
        rlm.on_segments_detached = self.log_manager.schedule_segment_deletion
        self.remote_log_reader = remote_log_reader(self.config, rlm.rsm, rlm.rlmm)  # the read side (tread)

        def moved(p: Any) -> None:
            self.delete_records_purgatory.check_and_complete((p.topic, p.partition))

        rlm.on_log_start_offset_moved = moved
        for p in self.partitions.values():
            rlm.on_partition(p)

    def _rlm_on_partition(self, p: Partition) -> None:
        if self.remote_log_manager is not None:
            self.remote_log_manager.on_partition(p)

    # ------------------------------------------------------------------ metadata

    def log_config_for(self, topic: str) -> LogConfig:
        return log_config(self.config.topic_defaults(), self.image.topic_configs(topic))

    def load_high_watermarks(self) -> None:
        self._hw_checkpoint = self.log_manager.read_high_watermarks()

    def apply_metadata(self) -> None:
        """Bring the hosted partitions in step with the whole image, creating logs on this thread
        (start-up, before serving: the logs found on disk are already open)."""
        configs: dict[str, LogConfig] = {}
        self.update_replication_throttles(None)
        todo, doomed = _drain(self._plan(None))
        self.log_manager.remove_logs(doomed)
        for tp, t, reg in todo:
            config = configs.get(t.name)
            if config is None:
                config = configs[t.name] = self.log_config_for(t.name)
            self._publish(tp, t, reg, self.log_manager.get_or_create_log(
                t.name, tp[1], t.topic_id, config, now_ms=self.clock.wall_ms()), config)

    async def apply_metadata_records(self, records: list[Any] | None) -> None:
        """A controller listener: apply what `records` changed (Kafka's ReplicaManager.applyDelta).

        Leadership and config changes apply at once; new partitions' directories and files are
        created in a worker thread (thousands of them take seconds of disk work), then published
        here. The controller awaits this before answering, so a CreateTopics answer still means
        the partitions serve. `records` None: look at every topic (a loaded metadata snapshot).
        """
        self.update_replication_throttles(records)
        todo, doomed = await _drain_async(self._plan(records))
        if doomed:  # renamed away before a log of the same name may be created again
            await trio.to_thread.run_sync(self.log_manager.remove_logs, doomed)
        now = self.clock.wall_ms()
        configs: dict[str, LogConfig] = {}  # one LogConfig per topic, not per partition
        for i in range(0, len(todo), _CREATE_CHUNK):
            chunk = todo[i:i + _CREATE_CHUNK]
            specs = []
            for tp, t, reg in chunk:
                config = configs.get(t.name)
                if config is None:
                    config = configs[t.name] = self.log_config_for(t.name)
                specs.append((t.name, tp[1], t.topic_id, config,
                              reg.leader_epoch if reg.leader == self.node_id else None))
            logs = await trio.to_thread.run_sync(self.log_manager.create_logs, specs, now)
            for j, ((tp, t, _reg), plog) in enumerate(zip(chunk, logs, strict=True)):
                if j and j % _PUBLISH_CHUNK == 0:
                    await trio.lowlevel.checkpoint()
                if isinstance(plog, Exception):
                    # Kafka takes the log dir offline; this partition stays offline on this node
                    log.error("cannot create the log of %s-%d: %s", tp[0], tp[1], plog)
                    continue
                current = self.image.topics_by_id.get(t.topic_id)
                if current is None or tp[1] not in current.partitions:
                    continue  # gone while its files were made: a later change removes them
                self._publish(tp, t, current.partitions[tp[1]], plog, configs[t.name])
            if self.after_create is not None:
                self.after_create()

    def update_replication_throttles(self, records: list[Any] | None) -> None:
        """Kafka's TopicConfigHandler for the throttled-replicas configs: re-read them for the
        topics whose configs changed (all topics with overrides when `records` is None); a
        deleted topic's throttles go. Touches only the named topics and the throttled ones."""
        image = self.image
        if records is None:
            names = {name for (rtype, name) in image.configs if rtype == RESOURCE_TOPIC}
        else:
            names = set()
            removed = False
            for r in records:
                kind = type(r).__name__
                if kind == "ConfigRecord" and r.resource_type == RESOURCE_TOPIC:
                    names.add(r.resource_name)
                elif kind == "RemoveTopicRecord":
                    removed = True
            if not names and not removed:
                return
        for quota in (self.leader_quota, self.follower_quota):
            names.update(quota.throttled_topics())
        for name in names:
            configs = image.topic_configs(name) if name in image.topics_by_name else {}
            self.leader_quota.update_topic(name, configs.get(LEADER_THROTTLED_REPLICAS), self.node_id)
            self.follower_quota.update_topic(name, configs.get(FOLLOWER_THROTTLED_REPLICAS), self.node_id)

    def _plan(self, records: list[Any] | None) -> Generator[
            None, None, tuple[list[tuple[TopicPartition, Any, Any]], list[tuple[Any, Any]]]]:
        """Apply leadership/config changes and deletions for the topics `records` touch (all topics
        when None); return the partitions this node must now create, as (tp, topic, registration),
        and the logs of the partitions it dropped, for `LogManager.remove_logs` (a worker thread). A
        generator that pauses every `_PASS_CHUNK` partitions, so the event loop can serve others
        while thousands change (`_drain_async`); each partition changes whole."""
        if records is None or any(_touches_everything(r) for r in records):
            topics = list(self.image.topics_by_name.values())
            scope = None
        else:
            ids: set[bytes] = set()
            names: set[str] = set()
            for r in records:
                tid = getattr(r, "topic_id", None)
                if tid is not None:
                    ids.add(tid.bytes if hasattr(tid, "bytes") else bytes(tid))
                elif type(r).__name__ == "ConfigRecord" and r.resource_type == RESOURCE_TOPIC:
                    names.add(r.resource_name)
            if not ids and not names:
                return [], []
            found = [self.image.topics_by_id.get(i) for i in ids]
            found += [self.image.topics_by_name.get(n) for n in names]
            # once each: a new topic's records name it by id and, with its configs, by name
            topics = list({t.topic_id: t for t in found if t is not None}.values())
            scope = ids | {t.topic_id for t in topics}
        todo: list[tuple[TopicPartition, Any, Any]] = []
        detached: list[tuple[Any, Any]] = []
        wanted: set[TopicPartition] = set()
        visited = 0
        for t in topics:
            config = None
            for pid, reg in t.partitions.items():
                visited += 1
                if visited % _PASS_CHUNK == 0:
                    yield
                if self.node_id not in reg.replicas:
                    continue
                tp = (t.name, pid)
                wanted.add(tp)
                p = self.partitions.get(tp)
                if p is None or p.topic_id != t.topic_id:
                    if p is not None:  # same name, new topic id: the old log goes
                        self._delete_partition(tp, detached)
                    todo.append((tp, t, reg))
                else:
                    self._apply_registration(p, reg)
                    if config is None:
                        config = self.log_config_for(t.name)
                    p.log.config = config
                    self.log_manager.track_compacted(p.log)
                    self._rlm_on_partition(p)  # remote.storage.enable may have changed
        if scope is None:
            candidates: list[TopicPartition] = list(self.partitions)
        else:  # only partitions of the topic ids in scope can go (a removed topic has no name left)
            candidates = []
            for tid in scope:
                name = self._topic_names.get(tid)
                if name is not None:
                    candidates += [(name, pid) for pid in self._by_topic.get(name, {})]
        for tp in candidates:
            visited += 1
            if visited % _PASS_CHUNK == 0:
                yield
            p = self.partitions.get(tp)
            if p is not None and tp not in wanted and (scope is None or p.topic_id in scope):
                self._delete_partition(tp, detached)
        return todo, detached

    def _publish(self, tp: TopicPartition, t: Any, reg: Any, plog: Any, config: LogConfig) -> None:
        plog.config = config  # a log found on disk at start-up was opened with defaults
        old = self.partitions.get(tp)
        if old is not None:
            self.topic_stats.remove_partition(old.stats)
        p = Partition(t.name, tp[1], t.topic_id, plog, self.node_id, reg.leader, reg.leader_epoch,
                      reg.partition_epoch, list(reg.replicas), list(reg.isr),
                      self.topic_stats.add_partition(t.name))
        hw = self._hw_checkpoint.pop(tp, None)
        plog.high_watermark = min(hw, plog.log_end_offset) if hw is not None else 0
        self.partitions[tp] = p
        self._by_topic.setdefault(t.name, {})[tp[1]] = p
        self._topic_names[t.topic_id] = t.name
        self.log_manager.track_compacted(plog)
        if p.is_leader:
            p.make_leader(self.clock.wall_ms())
            self._maybe_advance_hw(p)
        else:
            self._make_follower(p)
        self._rlm_on_partition(p)

    # ------------------------------------------------------------------ leadership (Kafka's makeLeader/makeFollower)

    def _apply_registration(self, p: Partition, reg: Any) -> None:
        """A hosted partition's registration changed in the image: take the new leader, epochs,
        replicas and ISR, and become leader or follower when the leader or its epoch moved."""
        was_leader, old_leader, old_epoch = p.is_leader, p.leader_id, p.leader_epoch
        if reg.partition_epoch != p.partition_epoch:
            p.pending_isr = None  # the committed state moved on (Kafka's CommittedPartitionState)
        p.leader_id, p.leader_epoch = reg.leader, reg.leader_epoch
        p.partition_epoch, p.replicas, p.isr = reg.partition_epoch, list(reg.replicas), list(reg.isr)
        tp = (p.topic, p.partition)
        now = self.clock.wall_ms()
        if p.is_leader:
            if not was_leader or reg.leader_epoch != old_epoch:
                self.fetcher_manager.remove_partition(tp)
                p.make_leader(now, is_new_leader=not was_leader)
                log.info("%s-%d: leader at epoch %d from offset %d (ISR %s)", p.topic, p.partition, p.leader_epoch,
                         p.log.log_end_offset, p.isr)
            else:
                p.update_replicas(now)
            self._maybe_advance_hw(p)
        elif was_leader or old_leader != reg.leader or old_epoch != reg.leader_epoch \
                or self.fetcher_manager.fetch_state(tp) is None:
            self._make_follower(p)
            if old_leader != reg.leader:
                log.info("%s-%d: follower of %d at epoch %d (leader was %d)", p.topic, p.partition, p.leader_id,
                         p.leader_epoch, old_leader)
        # waiting produces and fetches see the new state (a lost leadership answers them); so do
        # waiting DeleteRecords: a follower fenced, or no longer a replica, stops holding the low
        # watermark (Kafka re-checks those only when the low or high watermark rises)
        self.produce_purgatory.check_and_complete(tp)
        self.fetch_purgatory.check_and_complete(tp)
        self.delete_records_purgatory.check_and_complete(tp)
        self._rlm_on_partition(p)

    def _make_follower(self, p: Partition) -> None:
        """Stop leading `p` and fetch it from its leader, truncating first by leader epoch."""
        p.make_follower()
        tp = (p.topic, p.partition)
        if p.leader_id >= 0 and p.leader_id != self.node_id:
            self.fetcher_manager.add_partition(p)
            log.debug("%s-%d: follower of %d at epoch %d", p.topic, p.partition, p.leader_id, p.leader_epoch)
        else:
            self.fetcher_manager.remove_partition(tp)

    def _delete_partition(self, tp: TopicPartition, detached: list[tuple[Any, Any]]) -> None:
        """Unpublish the partition and forget its log (no disk work): the caller hands `detached`
        to `LogManager.remove_logs` in a worker thread."""
        self.fetcher_manager.remove_partition(tp)
        gone = self.partitions.pop(tp, None)
        if gone is not None and self.remote_log_manager is not None:
            # Kafka's stopPartitions: a deleted topic's remote data goes too
            self.remote_log_manager.stop_partition(
                tp[0], tp[1], gone.topic_id, delete_remote=gone.topic_id not in self.image.topics_by_id)
        if gone is not None:
            self.topic_stats.remove_partition(gone.stats)
            by_topic = self._by_topic.get(tp[0])
            if by_topic is not None:
                by_topic.pop(tp[1], None)
                if not by_topic:
                    del self._by_topic[tp[0]]
                    self._topic_names.pop(gone.topic_id, None)
        self.fetch_purgatory.check_and_complete(tp)
        self.produce_purgatory.check_and_complete(tp)
        self.delete_records_purgatory.check_and_complete(tp)
        found = self.log_manager.detach_log(*tp)
        if found is not None:
            detached.append(found)

    def get_partition(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get((topic, partition))

    def leader_partitions(self, topic: str) -> dict[int, Partition]:
        """The partitions of `topic` this node leads (the coordinators' PartitionWriter view)."""
        return {pid: p for pid, p in self._by_topic.get(topic, {}).items() if p.is_leader}

    # ------------------------------------------------------------------ fetch (Kafka's fetchMessages / readFromLog)

    def not_hosted_error(self, topic: str | None, partition: int) -> int:
        """What a request for a partition not hosted here is answered (Kafka's getPartitionOrError):
        NOT_LEADER_OR_FOLLOWER for a partition of the cluster (the client looks for its leader),
        else UNKNOWN_TOPIC_OR_PARTITION."""
        t = self.image.topics_by_name.get(topic) if topic is not None else None
        if t is not None and partition in t.partitions:
            return Errors.NOT_LEADER_OR_FOLLOWER
        return Errors.UNKNOWN_TOPIC_OR_PARTITION

    def leader_partition(self, topic: str | None, partition: int, current_leader_epoch: int = -1
                         ) -> Partition | int:
        """The partition if this node leads it at `current_leader_epoch` (-1: any), else the error
        code a read answers: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER,
        FENCED_LEADER_EPOCH (the client's epoch is older) or UNKNOWN_LEADER_EPOCH (newer).
        Kafka's getPartitionOrException + Partition.checkCurrentLeaderEpoch."""
        p = self.partitions.get((topic, partition)) if topic is not None else None
        if p is None:
            return self.not_hosted_error(topic, partition)
        if not p.is_leader:
            return Errors.NOT_LEADER_OR_FOLLOWER
        return p.check_current_leader_epoch(current_leader_epoch) or p

    def readable_partition(self, topic: str | None, partition: int, current_leader_epoch: int = -1,
                           leader_only: bool = True) -> Partition | int:
        """`leader_partition`, except that a fetch that may read from a follower (a consumer's
        Fetch v11+, KIP-392: Kafka's FetchParams.fetchOnlyLeader false) also gets a partition this
        node follows, under the same leader epoch check (Kafka's localLogWithEpochOrThrow)."""
        if leader_only:
            return self.leader_partition(topic, partition, current_leader_epoch)
        p = self.partitions.get((topic, partition)) if topic is not None else None
        if p is None or p.is_leader:
            return self.leader_partition(topic, partition, current_leader_epoch)
        return p.check_current_leader_epoch(current_leader_epoch) or p

    def preferred_read_replica(self, p: Partition, client_rack: str | None, fetch_offset: int,
                               listener_name: str) -> int:
        """The replica a consumer fetching `p` at `fetch_offset` should read from instead of this
        leader, or -1 (Kafka's ReplicaManager.findPreferredReadReplica): the candidates are the
        leader and the followers in the ISR whose log covers the fetch offset and whose broker is
        registered, unfenced and has the client's listener; the selector picks one, and the
        leader itself is never sent back."""
        selector = self.replica_selector
        if selector is None or not p.is_leader:
            return -1
        brokers = self.image.brokers
        now = self.clock.wall_ms()

        def rack_of(broker_id: int) -> str | None:
            b = brokers.get(broker_id)
            if b is None or b.fenced or not any(ep[0] == listener_name for ep in b.endpoints):
                return None  # Kafka's Node.noNode(): no rack, never selected
            return b.rack

        candidates = []
        for replica, state in p.remote.items():
            if (replica in p.isr and state.log_end_offset >= fetch_offset
                    and state.log_start_offset <= fetch_offset):
                candidates.append(ReplicaView(replica, rack_of(replica), state.log_end_offset,
                                              now - state.last_caught_up_ms))
        leader = ReplicaView(self.node_id, rack_of(self.node_id), p.log.log_end_offset, 0)
        candidates.append(leader)
        chosen = selector.select(client_rack, candidates, leader)
        if chosen == leader or rack_of(chosen.broker_id) is None:
            return -1
        return chosen.broker_id

    def fetch_messages(self, params: FetchParams, infos: Sequence[FetchInfo]
                       ) -> tuple[list[LogRead], DelayedFetch | DelayedRemoteFetch | None]:
        """A Fetch's partitions (Kafka's ReplicaManager.fetchMessages): read them now
        (`read_from_log`), and answer at once when the fetch may not wait (max_wait_ms <= 0, no
        partition), found min_bytes, or some partition failed, diverges or has a preferred read
        replica; otherwise park it as a DelayedFetch in the fetch purgatory, which reads again,
        through `read_from_log`, when it completes. Returns one LogRead per info, in order, and
        the operation the caller awaits (`Connection.park`) before answering, or None. Never
        awaits: the caller parks."""
        reads = [LogRead(None, i.fetch_offset, i.max_bytes, 0, i.topic or "", i.partition, i.topic_id,
                         i.leader_epoch, i.last_fetched_epoch, i.fetcher_log_start_offset) for i in infos]
        total = self.read_from_log(params, reads)
        remote = self._remote_fetch(params, reads)
        if remote is not None:
            return reads, remote
        if params.max_wait_ms <= 0 or not reads or total >= params.min_bytes:
            return reads, None
        for r in reads:  # Kafka answers at once when a partition failed, diverges or should go elsewhere
            if r.error_code or r.preferred_read_replica >= 0 or r.diverging_epoch is not None:
                return reads, None
        op = DelayedFetch(params, reads, self)
        if self.fetch_purgatory.try_complete_else_watch(op, [(r.topic, r.partition_index) for r in reads]):
            return reads, None
        return reads, op

    def _remote_fetch(self, params: FetchParams, reads: list[LogRead]) -> DelayedRemoteFetch | None:
        """Kafka's processRemoteFetch: the first partition `read_from_log` left to remote
        storage is read on a reader thread, in a DelayedRemoteFetch the handler awaits (even
        when the others found enough: the response waits for it, as Kafka's); the other such
        partitions are answered empty and asked again. None when no partition needs it."""
        first: LogRead | None = None
        for r in reads:
            if r.remote_fetch is not None:
                if first is None:
                    first = r
                else:
                    r.remote_fetch = None
        reader = self.remote_log_reader
        if first is None or first.remote_fetch is None or reader is None:
            return None
        op = DelayedRemoteFetch(params, reads, first, first.remote_fetch, reader, self,
                                int(self.config["remote.fetch.max.wait.ms"]))  # dynamic
        self.spawn(op.run)
        self.remote_fetch_purgatory.try_complete_else_watch(op, [op.key])
        return op

    def _read_remote(self, p: Partition, r: LogRead, params: FetchParams, max_bytes: int, min_one: bool) -> None:
        """`r`'s offset is only in remote storage (Partition.is_remote_offset), Kafka's
        handleOffsetOutOfRangeError: a follower gets OFFSET_MOVED_TO_TIERED_STORAGE with the
        leader's offsets (it then builds its state from remote storage, replica_fetcher.py); a
        consumer's read is left to a DelayedRemoteFetch (`r.remote_fetch`), unless the remote
        fetch quota is exceeded: then the partition is answered empty, without an error."""
        p.read_offsets(r)
        reader = self.remote_log_reader
        if params.is_from_follower:
            r.error_code = Errors.OFFSET_MOVED_TO_TIERED_STORAGE
            return
        if reader is None:
            return  # the node is still attaching its remote log manager: empty, asked again
        # the dynamic broker configs (remote.log.manager.fetch.max.bytes.per.second,
        # remote.log.index.file.cache.total.size.bytes) take effect on the next remote read
        reader.quota.bytes_per_second = self.config["remote.log.manager.fetch.max.bytes.per.second"]
        cache_bytes = self.config["remote.log.index.file.cache.total.size.bytes"]
        if cache_bytes != reader.index_cache.max_size_bytes:
            self.spawn(trio.to_thread.run_sync, reader.index_cache.resize, cache_bytes)  # may delete files
            reader.index_cache.max_size_bytes = cache_bytes
        if reader.quota.throttle_time_ms() > 0:
            self.remote_fetch_throttled += 1
            return
        r.remote_fetch = RemoteStorageFetchInfo(
            TopicIdPartition(p.topic_id, p.topic, p.partition), r.fetch_offset, r.max_bytes, max_bytes, min_one,
            params.hard_max_bytes_limit, params.isolation == READ_COMMITTED,
            tuple(p.log.leader_epoch_cache.entries()))

    def read_from_log(self, params: FetchParams, reads: list[LogRead], from_purgatory: bool = False) -> int:
        """Decide and read each partition of a fetch (Kafka's ReplicaManager.readFromLog); fills each
        LogRead, returns the bytes read. Per partition, in Kafka's order: not hosted
        (`not_hosted_error`); a topic id that is not the hosted partition's (INCONSISTENT_TOPIC_ID:
        a session kept the name of a topic deleted and made again); a negative partition max bytes
        (UNKNOWN_SERVER_ERROR, which Kafka's log read raises); the partition's own rules
        (`Partition.fetch_records`: leader, epochs, follower membership, diverging epoch). A
        refused partition's LogRead has no `partition`. Then a follower's fetch offset is recorded
        as its log end offset (`update_follower_fetch_state`: ISR expansion, high watermark,
        waiting produces and fetches), before the read so its answer carries the high watermark
        it moved; a consumer's fetch from the leader may get a preferred read replica (KIP-392).
        `from_purgatory`: a parked fetch's completing read, which decides again but does not
        record a follower's fetch twice (Kafka's readFromPurgatory).

        The reads (`Partition.read_records`): up to the high watermark (read_uncommitted), the
        last stable offset (read_committed) or the log end offset (a follower), within the
        partition's max_bytes and what is left of the request's; the first partition with data
        may exceed both by one batch (minOneMessage), so a consumer always progresses. As in
        Kafka, a later partition whose first batch does not fit what is left is answered empty
        (Fetch v3+; v0-2 gets the partial batch). A diverging epoch, a preferred read replica and
        a follower the leader throttle holds back (KIP-73, `should_leader_throttle`) are answered
        with the offsets only.

        **Deliberate difference:** a read cut by a byte limit ends at the last whole batch.
        Kafka's LogSegment.read slices bytes, so its responses end with the head of the next
        batch, which the client cannot use and fetches again: with librdkafka's 1 MB producer
        batches and its 1 MiB max.partition.fetch.bytes that was 4.6% of every response, and
        with batches a little over half the limit it is nearly half. Clients accept both shapes
        (a whole-batch response is what a Kafka broker sends whenever the limit falls on a
        boundary). Pinned by tests/server/test_fetch_limits.py.
        """
        partitions = self.partitions
        replica_id = params.replica_id
        from_follower = replica_id >= 0
        selector = None if params.fetch_only_leader else self.replica_selector
        quota = self.leader_quota if from_follower else None
        isolation = params.isolation
        hard_limit = params.hard_max_bytes_limit
        max_bytes = params.max_bytes
        total = 0
        min_one = True
        bad_size_logged = False
        # tiered storage on this node (remote.log.storage.system.enable): only then can a read be remote
        remote_enabled = self.log_manager.remote_storage_system_enable
        for r in reads:
            if from_purgatory:  # decided again from the start, as Kafka's readFromLog does
                r.error_code = 0
                r.preferred_read_replica = -1
                r.diverging_epoch = None
            r.remote_fetch = None
            p = partitions.get((r.topic, r.partition_index))
            if p is None:
                r.partition = None
                r.error_code = self.not_hosted_error(r.topic, r.partition_index)
                continue
            if r.topic_id != ZERO_TOPIC_ID and r.topic_id != p.topic_id:
                r.partition = None
                r.error_code = Errors.INCONSISTENT_TOPIC_ID
                continue
            if r.max_bytes < 0:
                r.partition = None
                r.error_code = Errors.UNKNOWN_SERVER_ERROR
                if not bad_size_logged:  # one line per request, however many partitions
                    bad_size_logged = True
                    log.info("fetch (replica id %d): invalid partition_max_bytes %d for %s-%d", replica_id,
                             r.max_bytes, r.topic, r.partition_index)
                continue
            code = p.fetch_records(params, r)
            if not code and from_follower and self._stale_broker_epoch(replica_id, params.replica_epoch):
                code = Errors.NOT_LEADER_OR_FOLLOWER
            if code:
                r.partition = None
                r.error_code = code
                continue
            r.partition = p
            if r.diverging_epoch is not None:
                p.read_offsets(r)  # KIP-320: the fetcher truncates first
                continue
            if from_follower:
                if not from_purgatory:
                    self.update_follower_fetch_state(p, replica_id, r.fetch_offset, params.replica_epoch,
                                                     r.fetcher_log_start_offset)
                if quota is not None and quota.is_throttled(p.topic, p.partition) and \
                        self.should_leader_throttle(p, replica_id):
                    p.read_offsets(r)  # the follower asks again
                    continue
            elif selector is not None and p.leader_id == p.local_id:
                preferred = self.preferred_read_replica(p, params.client_rack, r.fetch_offset, params.listener_name)
                if preferred >= 0:
                    r.preferred_read_replica = preferred
                    p.read_offsets(r)  # KIP-392: the consumer goes to that replica
                    continue
            if remote_enabled and p.is_remote_offset(r.fetch_offset):
                self._read_remote(p, r, params, max(0, max_bytes - total), min_one)
                if r.error_code:
                    if r.error_code != Errors.OFFSET_MOVED_TO_TIERED_STORAGE:
                        r.partition = None
                    continue
                if from_purgatory:
                    r.remote_fetch = None  # a parked local fetch's read: answered empty, asked again
                continue
            size = p.read_records(r, min(r.max_bytes, max(0, max_bytes - total)), isolation, min_one, hard_limit)
            if size:
                total += size
                min_one = False
        return total

    def should_leader_throttle(self, p: Partition, replica_id: int) -> bool:
        """Kafka's shouldLeaderThrottle: follower `replica_id` is not in `p`'s ISR, `p` is in this
        node's leader.replication.throttled.replicas and the leader quota is exceeded."""
        return self.leader_quota.should_throttle(p.topic, p.partition, replica_id in p.isr, _now_ms())

    def record_leader_replication(self, reads: list[LogRead]) -> None:
        """The bytes a follower's fetch response carries for throttled partitions count against
        the leader quota, whether that follower is in the ISR or not (Kafka's
        sizeOfThrottledPartitions, recorded as the response is sent)."""
        quota = self.leader_quota
        if not quota.throttled_topics():
            return
        size = 0
        for r in reads:
            p = r.partition
            if p is not None and r.size and r.regions and not r.error_code and quota.is_throttled(p.topic, p.partition):
                size += r.size
        if size:
            quota.record(size, _now_ms())

    def fetch_offset(self, topic: str, partition: int, timestamp: int, isolation: int,
                     current_leader_epoch: int = -1) -> tuple[int, int, int, int]:
        """ListOffsets for one partition (Kafka's ReplicaManager.fetchOffsetForTimestamp):
        (error code, offset, timestamp, leader epoch), -1 where there is none. -1 latest is the
        high watermark (the last stable offset for read_committed); a timestamp whose first
        offset is not yet committed answers "no offset", as Kafka does."""
        p = self.leader_partition(topic, partition, current_leader_epoch)
        if isinstance(p, int):
            return p, -1, -1, -1
        upper = p.last_stable_offset if isolation == READ_COMMITTED else p.high_watermark
        if timestamp == LATEST_TIMESTAMP:
            latest = p.log.latest_epoch()
            return 0, upper, -1, latest if latest is not None else -1
        found = p.log.fetch_offset_by_timestamp(timestamp)
        if found is None:
            return 0, -1, -1, -1
        if timestamp not in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP) and found.offset >= upper:
            return 0, -1, -1, -1
        return 0, found.offset, found.timestamp, found.leader_epoch if found.leader_epoch is not None else -1

    async def fetch_offset_with_remote(self, topic: str, partition: int, timestamp: int, isolation: int,
                                       current_leader_epoch: int = -1) -> tuple[int, int, int, int]:
        """`fetch_offset`, and for a timestamp target on a tiered partition whose log starts
        below its local log start, the remote segments searched first (Kafka's
        fetchOffsetForTimestamp through RemoteLogManager.findOffsetByTimestamp, on a reader
        thread): the first record at or after the timestamp there, else the local log's answer.
        A store that fails answers UNKNOWN_SERVER_ERROR (Kafka's for a RemoteStorageException),
        one slower than remote.list.offsets.request.timeout.ms REQUEST_TIMED_OUT."""
        reader = self.remote_log_reader
        p = self.partitions.get((topic, partition))
        if (timestamp < 0 or reader is None or p is None or p.leader_id != p.local_id
                or not p.is_remote_offset(p.log.log_start_offset)):
            return self.fetch_offset(topic, partition, timestamp, isolation, current_leader_epoch)
        code = p.check_current_leader_epoch(current_leader_epoch)
        if code:
            return code, -1, -1, -1
        tp = TopicIdPartition(p.topic_id, p.topic, p.partition)
        timeout_s = int(self.config["remote.list.offsets.request.timeout.ms"]) / 1000
        try:
            with trio.fail_after(timeout_s):
                found = await reader.find_offset_by_timestamp_async(
                    tp, timestamp, p.log.log_start_offset, p.log.leader_epoch_cache.entries(),
                    p.log.local_log_start_offset)
        except trio.TooSlowError:
            return Errors.REQUEST_TIMED_OUT, -1, -1, -1
        except Exception as exc:
            log.warning("ListOffsets of %s-%d at timestamp %d: the remote search failed: %s", topic, partition,
                        timestamp, exc)
            return Errors.UNKNOWN_SERVER_ERROR, -1, -1, -1
        if found is None or self.partitions.get((topic, partition)) is not p:
            return self.fetch_offset(topic, partition, timestamp, isolation, current_leader_epoch)
        upper = p.last_stable_offset if isolation == READ_COMMITTED else p.high_watermark
        if found.offset >= upper:
            return 0, -1, -1, -1
        return 0, found.offset, found.timestamp, found.leader_epoch if found.leader_epoch is not None else -1

    def last_offset_for_leader_epoch(self, topic: str, partition: int, current_leader_epoch: int,
                                     leader_epoch: int) -> tuple[int, int, int]:
        """OffsetForLeaderEpoch for one partition: (error code, epoch, end offset)."""
        p = self.leader_partition(topic, partition, current_leader_epoch)
        if isinstance(p, int):
            return p, -1, -1
        epoch, end = p.log.end_offset_for_epoch(leader_epoch)
        return 0, epoch, end

    # ------------------------------------------------------------------ produce (Kafka's appendRecords)

    async def handle_produce_append(self, timeout_ms: int, required_acks: int, entries: Sequence[ProduceEntry],
                                    transactional_id: str | None = None,
                                    operation: int = TransactionSupportedOperation.ADD_PARTITION,
                                    ) -> tuple[list[ProducePartitionStatus], DelayedProduce | None]:
        """A Produce's data (Kafka's ReplicaManager.handleProduceAppend): with a transactional id,
        its transactional partitions are first verified with, or added to, the transaction
        (replication/transaction_verification.py, through `add_partitions_manager`); a partition
        the coordinator refuses is answered its error and not appended. Then `append_records`.
        Raises KafkaError INVALID_PRODUCER_ID_MAPPING (the whole request) when the transactional
        batches are two producers'. Awaits only the coordinator; a Produce without a transactional
        id has nothing to verify and calls `append_records` directly."""
        errors: dict[TopicPartition, tuple[int, str | None]] | None = None
        producer, txn_partitions = transactional_producer(entries)  # one byte per batch without any
        if producer is not None and transactional_id is not None and self.add_partitions_manager is not None:
            errors = await self._verify_transaction(transactional_id, producer, txn_partitions, operation)
        return self.append_records(timeout_ms, required_acks, entries, errors)

    async def _verify_transaction(self, transactional_id: str, producer: tuple[int, int],
                                  partitions: list[TopicPartition], operation: int
                                  ) -> dict[TopicPartition, tuple[int, str | None]]:
        """The coordinator's answers for the transactional partitions led here whose producer has
        no transaction open on them yet (KIP-890); only the refused ones, mapped for the client."""
        pid, epoch = producer
        wanted = []
        for tp in partitions:
            p = self.partitions.get(tp)
            if p is None or not p.is_leader:
                continue  # answered by the append (NOT_LEADER_OR_FOLLOWER, unknown partition)
            if not p.has_ongoing_transaction(pid, epoch):
                wanted.append(tp)
        manager = self.add_partitions_manager
        if not wanted or manager is None:
            return {}
        if operation != TransactionSupportedOperation.ADD_PARTITION:  # TRANSACTION_ABORTABLE from v11 on
            codes = await manager.add_or_verify(transactional_id, pid, epoch, wanted, False,
                                                operation == TransactionSupportedOperation.GENERIC_ERROR_SUPPORTED)
        else:
            deadline = trio.current_time() + min(ADD_PARTITIONS_RETRY_MAX_S, self.config["request.timeout.ms"] / 1000)
            while True:
                codes = await manager.add_or_verify(transactional_id, pid, epoch, wanted, True)
                if Errors.CONCURRENT_TRANSACTIONS not in codes.values() or trio.current_time() >= deadline:
                    break
                await trio.sleep(ADD_PARTITIONS_RETRY_BACKOFF_S)
        return {tp: transaction_error(code, operation) for tp, code in codes.items() if code}

    def append_records(self, timeout_ms: int, required_acks: int, entries: Sequence[ProduceEntry],
                       pre_append_errors: dict[TopicPartition, tuple[int, str | None]] | None = None,
                       ) -> tuple[list[ProducePartitionStatus], DelayedProduce | None]:
        """Append each entry's batch as leader (Kafka's appendRecords + appendToLocalLog): one
        status per entry, in order. Raises KafkaError INVALID_PRODUCER_ID_MAPPING for the whole
        request when its transactional batches are two producers'. Per partition: an error found before (the transaction
        coordinator's, `pre_append_errors`), not hosted here (`not_hosted_error`, with Kafka's
        "This server does not host this topic-partition." for an unknown one), then the
        partition's rules and the log's validation and append (`Partition.append_records_to_leader`,
        its KafkaError's code and message, with the per-record errors of a RecordValidationError).
        The high watermark moves and waiting fetches are tried after each append (`after_append`).
        MessagesIn/BytesIn and the Total/FailedProduceRequests meters count each entry.

        With acks=all, the appended partitions wait as one DelayedProduce in the produce purgatory
        (the high watermark must pass each batch) unless they are done already: the operation is
        returned for the caller to await (`Connection.park`), after which the statuses hold the
        answers. Never awaits. All entries share one `now` from the injected clock (validation
        timestamps, LogAppendTime, segment rolls)."""
        for _, _, records in entries:  # INVALID_PRODUCER_ID_MAPPING; inline: one byte per batch without any
            if len(records) > _TXN_ATTRIBUTE_BYTE and records[_TXN_ATTRIBUTE_BYTE] & TRANSACTIONAL_FLAG:
                transactional_producer(entries)
                break
        now_ms = self.clock.wall_ms()
        partitions = self.partitions
        stats = self.topic_stats
        results: list[ProducePartitionStatus] = []
        appended = False
        for topic, index, records in entries:
            status = ProducePartitionStatus(topic, index)
            results.append(status)
            error = pre_append_errors.get((topic, index)) if pre_append_errors else None
            p = partitions.get((topic, index))
            if error is not None:
                status.fail(*error)
            elif p is None:
                code = self.not_hosted_error(topic, index)
                status.fail(code, "This server does not host this topic-partition."
                            if code == Errors.UNKNOWN_TOPIC_OR_PARTITION else None)
            else:
                try:
                    info = p.append_records_to_leader(records, required_acks, now_ms)
                except RecordValidationError as exc:
                    status.fail(exc.error_code, str(exc), list(exc.record_errors))
                except (LogError, RecordError) as exc:
                    status.fail(exc.error_code, str(exc))
                except KafkaError as exc:  # the partition's own: not leader, not enough replicas
                    status.fail(exc.error_code, exc.message)
                else:
                    # `_appended`, inlined: a call is a measurable share of a small request
                    pstats = p.stats
                    pstats.messages_in += info.last_offset - info.first_offset + 1
                    pstats.bytes_in += len(records)
                    if not info.duplicate:
                        self.after_append(p)
                    status.base_offset = info.first_offset
                    status.log_append_time_ms = info.log_append_time
                    status.log_start_offset = info.log_start_offset
                    status.required_offset = info.last_offset + 1
                    appended = True
            stats.record_produce(topic, status.error_code)  # metrics, before any wait (Kafka's appendToLocalLog)
        if required_acks != -1 or not appended:
            return results, None
        op = DelayedProduce(max(0, timeout_ms), [s for s in results if not s.error_code], self)
        if self.produce_purgatory.try_complete_else_watch(op, [(s.topic, s.partition) for s in op.statuses]):
            return results, None
        return results, op

    def append(self, partition: Partition, batch: bytearray | memoryview, timestamp_type: str | None = None,
               origin: str = "client", header: tuple | None = None, transaction_version: int = 0) -> LogAppendInfo:
        """Append one batch this node built (a coordinator's records, a transaction marker) as
        leader, without the client's validation; raises pybroker.log.errors.LogError subclasses.
        origin: "client" or "coordinator" (the producer-state checks); header: the batch's parsed
        header when the caller has it; transaction_version: a marker's (KIP-1228)."""
        info = partition.log.append_as_leader(batch, partition.leader_epoch, self.clock.wall_ms(), timestamp_type, origin,
                                              header, transaction_version)
        self._appended(partition, info, len(batch))
        return info

    def _appended(self, partition: Partition, info: LogAppendInfo, size: int) -> None:
        # Kafka's appendToLocalLog marks MessagesIn/BytesIn for every append that succeeded,
        # duplicates too; BytesIn counts the request's bytes (before a recompression)
        stats = partition.stats
        stats.messages_in += info.last_offset - info.first_offset + 1
        stats.bytes_in += size
        if not info.duplicate:
            self.after_append(partition)

    def after_append(self, partition: Partition) -> None:
        tp = (partition.topic, partition.partition)
        if not partition.epoch_committed and partition.first_append_ms < 0:
            partition.first_append_ms = self.clock.wall_ms()
        if partition.maybe_increment_high_watermark(self.clock.wall_ms(), self.config["replica.lag.time.max.ms"],
                                                 self._eligible):
            self.log_first_commit(partition)
            self.produce_purgatory.check_and_complete(tp)
        self.fetch_purgatory.check_and_complete(tp)  # consumers at the HW, followers at the log end
        self.log_manager.maybe_flush(partition.log)

    def after_follower_append(self, partition: Partition) -> None:
        """A fetcher appended to a followed partition: the flush policy applies as on a leader."""
        self.log_manager.maybe_flush(partition.log)

    # ------------------------------------------------------------------ followers and the ISR (leader side)

    def _maybe_advance_hw(self, p: Partition) -> bool:
        """Move the HW if the followers allow it; then waiting acks=all produces and consumer
        fetches are checked (Kafka's tryCompleteDelayedRequests)."""
        if p.maybe_increment_high_watermark(self.clock.wall_ms(), self.config["replica.lag.time.max.ms"],
                                                 self._eligible):
            self.log_first_commit(p)
            tp = (p.topic, p.partition)
            self.produce_purgatory.check_and_complete(tp)
            self.fetch_purgatory.check_and_complete(tp)
            return True
        return False

    def log_first_commit(self, p: Partition) -> None:
        """Once per leadership, when the HW first covers a record of this leader epoch: how long
        after taking the lead the followers first fetched, the first record arrived and it
        committed (a failover's time on the new leader; bench/replication reads this line)."""
        if p.epoch_committed or p.log.high_watermark <= p.leader_epoch_start_offset:
            return
        p.epoch_committed = True
        since = p.led_since_ms
        fetches = ", ".join(f"{r}: +{t - since}" for r, t in sorted(p.first_fetch_ms.items())) or "none"
        append = f"+{p.first_append_ms - since}" if p.first_append_ms >= 0 else "none"
        log.info("%s-%d: leader epoch %d's first record committed (HW %d) +%d ms after taking the lead; first "
                 "append %s ms; followers' first fetches (ms) %s", p.topic, p.partition, p.leader_epoch,
                 p.log.high_watermark, self.clock.wall_ms() - since, append, fetches)

    def update_follower_fetch_state(self, p: Partition, replica_id: int, fetch_offset: int,
                                    broker_epoch: int = -1, log_start_offset: int = -1) -> None:
        """A follower fetches `p` from this leader at `fetch_offset` (its log end offset): record it,
        propose it for the ISR once caught up, and move the HW (Kafka's updateFollowerFetchState)."""
        plog = p.log
        if not plog.log_start_offset <= fetch_offset <= plog.log_end_offset:
            return  # the read answers OFFSET_OUT_OF_RANGE; the follower's state stays as it was
        if not p.update_follower_fetch_state(replica_id, fetch_offset, plog.log_end_offset, self.clock.wall_ms(),
                                             broker_epoch, log_start_offset):
            return
        if p.pending_isr is None and p.is_expansion_candidate(replica_id) and self._eligible(replica_id):
            self._propose_isr(p, p.isr + [replica_id], expand=True)
        self._maybe_advance_hw(p)
        tp = (p.topic, p.partition)
        if self.delete_records_purgatory.watching(tp):
            # the follower's log start offset may have reached a waiting DeleteRecords' offset
            # (Kafka compares the low watermark before and after; trying the waiting ones is the same)
            self.delete_records_purgatory.check_and_complete(tp)

    def _stale_broker_epoch(self, broker_id: int, broker_epoch: int) -> bool:
        """KIP-903 (Kafka's Replica.updateFetchStateOrThrow): a follower's fetch whose ReplicaState
        names a broker epoch older than the one this node's metadata has for that live broker
        comes from a previous incarnation and must not move the follower's state
        (NOT_LEADER_OR_FOLLOWER). -1 (a fetch before v15) is not checked, as in Kafka."""
        if broker_epoch < 0:
            return False
        reg = self.image.brokers.get(broker_id)
        return reg is not None and not reg.fenced and reg.epoch > broker_epoch

    def _eligible(self, broker_id: int) -> bool:
        """A broker the controller accepts in an ISR: registered, unfenced, not shutting down."""
        reg = self.image.brokers.get(broker_id)
        return reg is not None and not reg.fenced and not reg.in_controlled_shutdown

    def _alive(self, broker_id: int) -> bool:
        """A registered, unfenced broker (Kafka's MetadataCache.hasAliveBroker)."""
        reg = self.image.brokers.get(broker_id)
        return reg is not None and not reg.fenced

    def low_watermark(self, p: Partition) -> int:
        """The low watermark of a partition led here (Kafka's Partition.lowWatermarkIfLeader): the
        smallest log start offset among the leader and its followers on live brokers."""
        return p.low_watermark_if_leader(self._alive)

    def maybe_shrink_isr(self, p: Partition, now_ms: int) -> bool:
        """Propose the ISR without the followers that lagged replica.lag.time.max.ms (Kafka's
        maybeShrinkIsr); True if a proposal went out."""
        if not p.is_leader or p.pending_isr is not None or len(p.isr) < 2:
            return False
        out = p.out_of_sync_replicas(now_ms, self.config["replica.lag.time.max.ms"])
        if not out:
            return False
        new_isr = [r for r in p.isr if r not in out]
        log.info("%s-%d: shrinking the ISR from %s to %s (out of sync: %s; log end %d, HW %d)", p.topic,
                 p.partition, p.isr, new_isr, out, p.log.log_end_offset, p.log.high_watermark)
        return self._propose_isr(p, new_isr, expand=False)

    def _propose_isr(self, p: Partition, new_isr: list[int], *, expand: bool) -> bool:
        manager = self.alter_partition_manager
        if manager is None:
            return False
        tp = (p.topic, p.partition)
        epochs = {b: reg.epoch for b in new_isr if (reg := self.image.brokers.get(b)) is not None}
        leader_epoch = p.leader_epoch

        def answered(code: int, found: Any) -> None:
            if self.partitions.get(tp) is not p or not p.is_leader or p.leader_epoch != leader_epoch:
                return  # the partition moved on meanwhile
            if p.pending_isr is new_isr:
                p.pending_isr = None
            if code == 0 and found is not None:
                if expand:
                    self.isr_expands += 1
                else:
                    self.isr_shrinks += 1
                if found.partition_epoch > p.partition_epoch and found.leader_epoch == p.leader_epoch:
                    p.isr, p.partition_epoch = list(found.isr), found.partition_epoch
                log.info("%s-%d: ISR now %s (partition epoch %d)", p.topic, p.partition, p.isr, p.partition_epoch)
            else:
                self.failed_isr_updates += 1
                level = logging.DEBUG if code in _ISR_GIVE_UP else logging.INFO
                log.log(level, "%s-%d: AlterPartition to ISR %s failed: %s", p.topic, p.partition, new_isr,
                        error_name(code))
            self._maybe_advance_hw(p)
            self.produce_purgatory.check_and_complete(tp)

        item = AlterPartitionItem(p.topic, p.partition, p.topic_id, p.leader_epoch, p.partition_epoch, list(new_isr),
                                  epochs, answered)
        if not manager.submit(item):
            return False
        p.pending_isr = new_isr
        return True

    async def run_isr_expiration(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Every replica.lag.time.max.ms / 2, shrink the ISRs whose followers fell behind (Kafka's
        isr-expiration task), yielding to the loop every `_PASS_CHUNK` partitions."""
        task_status.started()
        while True:
            await trio.sleep(max(0.01, self.config["replica.lag.time.max.ms"] / 2000))
            now = self.clock.wall_ms()
            for i, p in enumerate(list(self.partitions.values())):
                if i and i % _PASS_CHUNK == 0:
                    await trio.lowlevel.checkpoint()
                if p.remote and p.is_leader:
                    self.maybe_shrink_isr(p, now)

    # ------------------------------------------------------------------ deletion

    async def delete_records(self, timeout_ms: int, offsets: Sequence[tuple[str, int, int]],
                             allow_internal_topic_deletion: bool = False
                             ) -> tuple[list[DeleteRecordsPartitionStatus], DelayedDeleteRecords | None]:
        """DeleteRecords for (topic, partition, offset) entries (Kafka's ReplicaManager.deleteRecords
        + deleteRecordsOnLocalLog): one status per entry, in order. Per partition: an internal
        topic is INVALID_TOPIC_EXCEPTION (unless `allow_internal_topic_deletion`: the share
        coordinator pruning __share_group_state, as Kafka's flag of that name); not hosted here
        `not_hosted_error`; then the partition's
        rules (`Partition.delete_records_on_leader`: NOT_LEADER_OR_FOLLOWER, POLICY_VIOLATION,
        OFFSET_OUT_OF_RANGE). The log start offset moves at once; the segments wholly below it are
        renamed `*.deleted` in a worker thread before this returns (so a crash after the answer
        finishes their deletion on restart) and removed after file.delete.delay.ms
        (`LogManager.schedule_segment_deletion`). The partitions whose low watermark is still
        below their offset wait as one DelayedDeleteRecords in the delete-records purgatory,
        returned for the caller to await (`Connection.park`); then the statuses hold the answers."""
        statuses: list[DeleteRecordsPartitionStatus] = []
        doomed: list[tuple[Any, list[Any]]] = []
        for topic, index, offset in offsets:
            status = DeleteRecordsPartitionStatus(topic, index)
            statuses.append(status)
            p = self.partitions.get((topic, index))
            if topic in INTERNAL_TOPICS and not allow_internal_topic_deletion:
                status.error_code = Errors.INVALID_TOPIC_EXCEPTION
            elif p is None:
                status.error_code = self.not_hosted_error(topic, index)
            else:
                try:
                    target, low, segments = p.delete_records_on_leader(offset, self._alive)
                except KafkaError as exc:
                    status.error_code = exc.error_code
                    continue
                if segments:
                    doomed.append((p.log, segments))
                status.required_offset = target
                status.low_watermark = low
        if doomed:
            try:
                await trio.to_thread.run_sync(mark_segments_deleted, [s for _, segments in doomed for s in segments])
            except OSError:  # the deletion task tries again; the log start offset has moved anyway
                log.exception("renaming the segments DeleteRecords detached failed")
            for plog, segments in doomed:
                self.log_manager.schedule_segment_deletion(plog, segments)
        waiting = [s for s in statuses if not s.error_code and s.low_watermark < s.required_offset]
        if not waiting:
            return statuses, None
        op = DelayedDeleteRecords(max(0, timeout_ms), waiting, self)
        if self.delete_records_purgatory.try_complete_else_watch(op, [(s.topic, s.partition) for s in waiting]):
            return statuses, None
        return statuses, op

    # ------------------------------------------------------------------ background

    def high_watermarks(self) -> dict[TopicPartition, int]:
        return {tp: p.log.high_watermark for tp, p in self.partitions.items()}

    async def _high_watermarks_chunked(self) -> dict[TopicPartition, int]:
        """high_watermarks(), yielding to the loop every `_PASS_CHUNK` partitions."""
        out: dict[TopicPartition, int] = {}
        for i, (tp, p) in enumerate(list(self.partitions.items())):
            if i and i % _PASS_CHUNK == 0:
                await trio.lowlevel.checkpoint()
            out[tp] = p.log.high_watermark
        return out

    async def run_high_watermark_checkpointer(self, *,
                                              task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                                              ) -> None:
        """Write the high watermarks to each dir's replication-offset-checkpoint every
        replica.high.watermark.checkpoint.interval.ms (Kafka's highwatermark-checkpoint task, a
        ReplicaManager one: the HW is replication state). A crash loses at most that much of the
        HW, which a restarted follower truncates from and a restarted leader serves from."""
        task_status.started()
        interval_s = max(0.1, self.config["replica.high.watermark.checkpoint.interval.ms"] / 1000)
        while True:
            await trio.sleep(interval_s)
            hws = await self._high_watermarks_chunked()
            try:
                await trio.to_thread.run_sync(self.log_manager.checkpoint_high_watermarks, hws)
            except Exception:
                log.exception("high watermark checkpoint failed")
