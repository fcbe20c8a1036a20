"""All partitions hosted here, kept in step with the metadata image (Kafka's ReplicaManager).

Owns the produce and fetch purgatories: an append completes waiting fetches on that
partition at once (`check_and_complete`), and acks=all produces wait in the produce
purgatory until the high watermark passes their last offset. Flushing follows the log's
flush policy and runs in a worker thread, at most one per partition at a time.

Concurrency: trio thread only; blocking work goes through `spawn` (a nursery's start_soon).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import trio

from pybroker.clock import SYSTEM_CLOCK, Clock
from pybroker.config import BrokerConfig, format_value
from pybroker.log.config import LogConfig
from pybroker.log.errors import LogError
from pybroker.log.log import EARLIEST_LOCAL_TIMESTAMP, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from pybroker.log.log_append_info import LogAppendInfo
from pybroker.log.manager import LogManager
from pybroker.metadata.image import RESOURCE_TOPIC, MetadataImage
from pybroker.metrics.broker_topic_stats import BrokerTopicStats
from pybroker.metrics.histogram import Histogram
from pybroker.protocol.errors import Errors
from pybroker.purgatory.purgatory import DelayedOperationPurgatory
from pybroker.purgatory.timer import SystemTimer
from pybroker.replication.partition import Partition

log = logging.getLogger("pybroker.replica")

TopicPartition = tuple[str, int]
_CREATE_CHUNK = 500  # partitions created per worker-thread call (then published on the loop)
_GLOBAL_RECORDS = frozenset({"FeatureLevelRecord", "RegisterBrokerRecord", "FenceBrokerRecord",
                             "UnfenceBrokerRecord", "BrokerRegistrationChangeRecord"})


READ_COMMITTED = 1  # Fetch / ListOffsets isolation_level


class LogRead:
    """One partition of a fetch (Kafka's FetchPartitionStatus + LogReadResult): what to read, and
    once `read_from_log` ran, what it found. `partition` is None when the request already failed
    for this partition (`error_code` says why)."""

    __slots__ = ("partition", "fetch_offset", "max_bytes", "error_code", "regions", "size", "high_watermark",
                 "last_stable_offset", "log_start_offset", "aborted")

    def __init__(self, partition: Partition | None, fetch_offset: int, max_bytes: int, error_code: int = 0) -> None:
        self.partition = partition
        self.fetch_offset = fetch_offset
        self.max_bytes = max_bytes
        self.error_code = error_code
        self.regions: list[Any] | None = None  # FileRegions to sendfile
        self.size = 0
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1
        self.aborted: list[tuple[int, int]] | None = None  # (producer id, first offset), read_committed


def check_leader_epoch(p: Partition, current_leader_epoch: int) -> int:
    """Kafka's Partition.checkCurrentLeaderEpoch: 0, FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH."""
    if current_leader_epoch < 0:
        return 0
    if current_leader_epoch < p.leader_epoch:
        return Errors.FENCED_LEADER_EPOCH
    if current_leader_epoch > p.leader_epoch:
        return Errors.UNKNOWN_LEADER_EPOCH
    return 0


def _touches_everything(record: Any) -> bool:
    """Records after which every hosted partition is re-examined (broker-level configs change
    every topic's defaults; broker records may change leadership)."""
    kind = type(record).__name__
    if kind == "ConfigRecord":
        return bool(record.resource_type != RESOURCE_TOPIC)
    return kind in _GLOBAL_RECORDS


def log_config(defaults: dict[str, Any], overrides: dict[str, str] | None = None) -> LogConfig:
    """The storage LogConfig of a topic: broker-derived defaults, then the topic's overrides."""
    merged = {k: format_value(v) for k, v in defaults.items()}
    merged.update(overrides or {})
    return LogConfig().with_overrides(merged)


class ReplicaManager:
    def __init__(self, config: BrokerConfig, log_manager: LogManager, image: MetadataImage,
                 timer: SystemTimer, spawn: Callable[..., Any], clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.node_id = config.node_id
        self.log_manager = log_manager
        self.image = image
        self.timer = timer
        self.spawn = spawn
        self.clock = clock
        self.partitions: dict[TopicPartition, Partition] = {}
        self.fetch_purgatory = DelayedOperationPurgatory("Fetch", timer)
        self.produce_purgatory = DelayedOperationPurgatory("Produce", timer)
        self._hw_checkpoint: dict[TopicPartition, int] = {}
        # metrics (pybroker/metrics): bumped in place here, read only when scraped
        self.topic_stats = BrokerTopicStats()  # Kafka's BrokerTopicStats: messages/bytes in and out per topic
        self.log_flush_stats = Histogram()  # Kafka's LogFlushRateAndTimeMs
        self.isr_shrinks = self.isr_expands = self.failed_isr_updates = 0  # nothing changes an ISR yet

    # ------------------------------------------------------------------ metadata

    def log_config_for(self, topic: str) -> LogConfig:
        return log_config(self.config.topic_defaults(), self.image.topic_configs(topic))

    def load_high_watermarks(self) -> None:
        self._hw_checkpoint = self.log_manager.read_high_watermarks()

    def apply_metadata(self) -> None:
        """Bring the hosted partitions in step with the whole image, creating logs on this thread
        (start-up, before serving: the logs found on disk are already open)."""
        configs: dict[str, LogConfig] = {}
        for tp, t, reg in self._plan(None):
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
        todo = self._plan(records)
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
            for (tp, t, _reg), plog in zip(chunk, logs, strict=True):
                if isinstance(plog, Exception):
                    # Kafka takes the log dir offline; this partition stays offline on this node
                    log.error("cannot create the log of %s-%d: %s", tp[0], tp[1], plog)
                    continue
                current = self.image.topics_by_id.get(t.topic_id)
                if current is None or tp[1] not in current.partitions:
                    continue  # gone while its files were made: a later change removes them
                self._publish(tp, t, current.partitions[tp[1]], plog, configs[t.name])

    def _plan(self, records: list[Any] | None) -> list[tuple[TopicPartition, Any, Any]]:
        """Apply leadership/config changes and deletions for the topics `records` touch (all topics
        when None); return the partitions this node must now create, as (tp, topic, registration)."""
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
                return []
            topics = [t for t in (self.image.topics_by_id.get(i) for i in ids) if t is not None]
            topics += [t for t in (self.image.topics_by_name.get(n) for n in names) if t is not None]
            scope = ids | {t.topic_id for t in topics}
        todo: list[tuple[TopicPartition, Any, Any]] = []
        wanted: set[TopicPartition] = set()
        for t in topics:
            config = None
            for pid, reg in t.partitions.items():
                if self.node_id not in reg.replicas:
                    continue
                tp = (t.name, pid)
                wanted.add(tp)
                p = self.partitions.get(tp)
                if p is None or p.topic_id != t.topic_id:
                    if p is not None:  # same name, new topic id: the old log goes
                        self._delete_partition(tp)
                    todo.append((tp, t, reg))
                else:
                    p.leader_id, p.leader_epoch = reg.leader, reg.leader_epoch
                    p.partition_epoch, p.replicas, p.isr = reg.partition_epoch, list(reg.replicas), list(reg.isr)
                    if config is None:
                        config = self.log_config_for(t.name)
                    p.log.config = config
        doomed = [tp for tp, p in self.partitions.items()
                  if tp not in wanted and (scope is None or p.topic_id in scope)]
        for tp in doomed:
            self._delete_partition(tp)
        return todo

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
        if p.is_leader:
            plog.maybe_assign_epoch_start_offset(reg.leader_epoch, plog.log_end_offset)
        p.maybe_increment_high_watermark()

    def _delete_partition(self, tp: TopicPartition) -> None:
        gone = self.partitions.pop(tp, None)
        if gone is not None:
            self.topic_stats.remove_partition(gone.stats)
        self.fetch_purgatory.check_and_complete(tp)
        try:
            deleted = self.log_manager.delete_log(*tp)
        except OSError as exc:  # the log is forgotten; its files stay for an operator
            log.error("cannot delete the log of %s-%d: %s", tp[0], tp[1], exc)
            return
        if deleted is not None:
            self.spawn(trio.to_thread.run_sync, self.log_manager.purge_deleted)

    def get_partition(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get((topic, partition))

    def leader_partitions(self, topic: str) -> dict[int, Partition]:
        """The partitions of `topic` this node leads (the coordinators' PartitionWriter view)."""
        return {p.partition: p for (t, _), p in self.partitions.items() if t == topic and p.is_leader}

    # ------------------------------------------------------------------ reads (Kafka's readFromLog)

    def leader_partition(self, topic: str | None, partition: int, current_leader_epoch: int = -1
                         ) -> Partition | int:
        """The partition if this node leads it at `current_leader_epoch` (-1: any), else the error
        code a read answers: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER,
        FENCED_LEADER_EPOCH (the client's epoch is older) or UNKNOWN_LEADER_EPOCH (newer).
        Kafka's getPartitionOrException + Partition.checkCurrentLeaderEpoch."""
        p = self.partitions.get((topic, partition)) if topic is not None else None
        if p is None:
            # Kafka's getPartitionOrError: a partition of the cluster hosted elsewhere
            t = self.image.topics_by_name.get(topic) if topic is not None else None
            if t is not None and partition in t.partitions:
                return Errors.NOT_LEADER_OR_FOLLOWER
            return Errors.UNKNOWN_TOPIC_OR_PARTITION
        if not p.is_leader:
            return Errors.NOT_LEADER_OR_FOLLOWER
        return check_leader_epoch(p, current_leader_epoch) or p

    def read_from_log(self, reads: list[LogRead], max_bytes: int, isolation: int) -> int:
        """Read each partition (Kafka's ReplicaManager.readFromLog): batches from the one holding the
        fetch offset up to the high watermark (read_uncommitted) or the last stable offset
        (read_committed), within the read's max_bytes and the request's `max_bytes`; the first
        partition with data may exceed both by one batch (minOneMessage), so a consumer always
        progresses. Fills each LogRead's result fields; returns the total bytes read. Reads with
        an error, or without a partition, are left alone."""
        total = 0
        min_one = True
        for r in reads:
            p = r.partition
            if p is None or r.error_code:
                continue
            plog = p.log
            r.high_watermark = plog.high_watermark
            r.last_stable_offset = p.last_stable_offset
            r.log_start_offset = plog.log_start_offset
            limit = min(r.max_bytes, max(0, max_bytes - total))
            upper = r.last_stable_offset if isolation == READ_COMMITTED else r.high_watermark
            try:
                info = plog.read(r.fetch_offset, limit, upper, min_one)
            except LogError as exc:
                r.error_code = exc.error_code
                r.regions = None
                r.size = 0
                continue
            r.size = info.size
            if info.size:
                r.regions = info.regions
                total += info.size
                if isolation == READ_COMMITTED:
                    r.aborted = [(a.producer_id, a.first_offset)
                                 for a in plog.txn_index.collect(r.fetch_offset, r.last_stable_offset)]
                min_one = False
            else:
                r.regions = None
                r.aborted = None
        return total

    def bytes_available(self, reads: list[LogRead], isolation: int, need: int) -> bool:
        """Whether reading now would return at least `need` bytes, or some read would now fail (a
        parked fetch must then answer): Kafka's DelayedFetch.tryComplete accumulation."""
        have = 0
        for r in reads:
            p = r.partition
            if p is None:
                continue
            if self.partitions.get((p.topic, p.partition)) is not p:
                return True  # deleted or replaced meanwhile
            upper = p.last_stable_offset if isolation == READ_COMMITTED else p.log.high_watermark
            if upper > r.fetch_offset:
                if need <= 1:
                    return True
                try:
                    have += p.log.read(r.fetch_offset, max(need, r.max_bytes), upper, True).size
                except LogError:
                    return True  # the offset became invalid: answer now with the error
                if have >= need:
                    return True
        return False

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

    def last_offset_for_leader_epoch(self, topic: str, partition: int, current_leader_epoch: int,
                                     leader_epoch: int) -> tuple[int, int, int]:
        """OffsetForLeaderEpoch for one partition: (error code, epoch, end offset)."""
        p = self.leader_partition(topic, partition, current_leader_epoch)
        if isinstance(p, int):
            return p, -1, -1
        epoch, end = p.log.end_offset_for_epoch(leader_epoch)
        return 0, epoch, end

    # ------------------------------------------------------------------ append

    def append(self, partition: Partition, batch: bytearray | memoryview, timestamp_type: str | None = None,
               origin: str = "client", header: tuple | None = None) -> LogAppendInfo:
        """Append one validated batch as leader; raises pybroker.log.errors.LogError subclasses.
        origin: "client" or "coordinator"; header: the batch's parsed header when the caller
        validated it (UnifiedLog.append_as_leader)."""
        info = partition.log.append_as_leader(batch, partition.leader_epoch, self.clock.wall_ms(), timestamp_type, origin,
                                              header)
        # Kafka's appendToLocalLog marks MessagesIn/BytesIn for every append that succeeded, duplicates too
        stats = partition.stats
        stats.messages_in += info.last_offset - info.first_offset + 1
        stats.bytes_in += len(batch)
        if not info.duplicate:
            self.after_append(partition)
        return info

    def after_append(self, partition: Partition) -> None:
        tp = (partition.topic, partition.partition)
        if partition.maybe_increment_high_watermark():
            self.produce_purgatory.check_and_complete(tp)
        self.fetch_purgatory.check_and_complete(tp)
        plog = partition.log
        if not partition.flushing and plog.needs_flush(self.clock.wall_ms()):
            partition.flushing = True
            self.spawn(self._flush, partition)

    async def _flush(self, partition: Partition) -> None:
        plog = partition.log

        def flush() -> float | None:
            """Seconds the flush took, None when there was nothing to flush (not a sample)."""
            before = plog.recovery_point
            started = time.perf_counter()
            plog.flush(now_ms=self.clock.wall_ms())
            return time.perf_counter() - started if plog.recovery_point != before else None

        try:
            took = await trio.to_thread.run_sync(flush)
            if took is not None:
                self.log_flush_stats.update(took * 1000.0)  # on the loop: the histogram is not shared
        except Exception:  # a failed fsync must not kill the broker; Kafka marks the dir offline
            log.exception("flush of %s failed", partition)
        finally:
            partition.flushing = False

    # ------------------------------------------------------------------ deletion

    def schedule_segment_deletion(self, plog: Any, segments: list[Any]) -> None:
        """Remove detached segments' files after file.delete.delay.ms, off the event loop (the
        delay lets fetch responses already holding their file regions finish)."""
        if segments:
            self.spawn(self._delete_later, plog, segments, plog.config.file_delete_delay_ms)

    async def _delete_later(self, plog: Any, segments: list[Any], delay_ms: int) -> None:
        try:
            await trio.sleep(delay_ms / 1000)
        finally:
            # shielded: at shutdown the files still go (a restart would remove them anyway)
            with trio.CancelScope(shield=True):
                try:
                    await trio.to_thread.run_sync(plog.delete_segment_files, segments)
                except OSError:
                    log.exception("removing deleted segments of %s failed", plog)

    def enforce_retention(self, now_ms: int) -> int:
        """One pass of Kafka's log retention over every hosted log; returns segments removed."""
        removed = 0
        for p in list(self.partitions.values()):
            start = p.log.retention_start_offset(now_ms)
            if start is None:
                continue
            doomed = p.log.delete_records_before(start)
            removed += len(doomed)
            self.schedule_segment_deletion(p.log, doomed)
        return removed

    async def run_retention(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Every log.retention.check.interval.ms, delete segments retention no longer keeps."""
        task_status.started()
        interval_s = self.config["log.retention.check.interval.ms"] / 1000
        while True:
            await trio.sleep(interval_s)
            removed = self.enforce_retention(self.clock.wall_ms())
            if removed:
                log.info("retention removed %d segment(s)", removed)

    async def run_producer_expiration(self, *,
                                      task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Every producer.id.expiration.check.interval.ms, forget the producers idle for
        producer.id.expiration.ms in every hosted log (Kafka's UnifiedLog.removeExpiredProducers)."""
        task_status.started()
        interval_s = self.config["producer.id.expiration.check.interval.ms"] / 1000
        while True:
            await trio.sleep(interval_s)
            now = self.clock.wall_ms()
            for p in list(self.partitions.values()):
                p.log.remove_expired_producers(now)

    async def run_cleaner(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Kafka's LogCleaner: compact logs with cleanup.policy=compact (pybroker/log/cleaner.py),
        then sleep log.cleaner.backoff.ms when a pass found nothing to clean."""
        from pybroker.log.cleaner import LogCleaner

        task_status.started()
        if not self.config["log.cleaner.enable"]:
            return
        cleaner = LogCleaner(self.log_manager, self.schedule_segment_deletion)
        while True:
            # read every pass: log.cleaner.backoff.ms is a dynamic broker config
            backoff_s = max(0.01, self.config["log.cleaner.backoff.ms"] / 1000)
            logs = [p.log for p in list(self.partitions.values()) if p.log.config.compact]
            try:
                cleaned = await cleaner.clean_logs(logs, self.clock.wall_ms())
            except Exception:  # a cleaner bug must not take the broker down; Kafka marks the dir
                log.exception("log cleaner pass failed")
                cleaned = 0
            if not cleaned:
                await trio.sleep(backoff_s)
            else:
                await trio.lowlevel.checkpoint()

    # ------------------------------------------------------------------ background

    def high_watermarks(self) -> dict[TopicPartition, int]:
        return {tp: p.log.high_watermark for tp, p in self.partitions.items()}

    async def run_checkpointer(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Write recovery-point / HW checkpoints every log.flush.offset.checkpoint.interval.ms,
        and flush logs whose flush.ms elapsed (Kafka's log flusher)."""
        task_status.started()
        interval_s = max(0.1, self.config["log.flush.offset.checkpoint.interval.ms"] / 1000)
        flush_interval_ms = self.config["log.flush.scheduler.interval.ms"]
        tick = min(interval_s, flush_interval_ms / 1000) if flush_interval_ms < 2**62 else interval_s
        last_checkpoint = trio.current_time()
        while True:
            await trio.sleep(max(0.05, tick))
            for p in list(self.partitions.values()):
                if not p.flushing and p.log.needs_flush(self.clock.wall_ms()):
                    p.flushing = True
                    self.spawn(self._flush, p)
            if trio.current_time() - last_checkpoint >= interval_s:
                last_checkpoint = trio.current_time()
                hws = self.high_watermarks()
                try:
                    await trio.to_thread.run_sync(self.log_manager.checkpoint, hws)
                except Exception:
                    log.exception("checkpoint failed")
