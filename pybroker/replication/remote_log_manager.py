"""Tiered storage's background work on a node (Kafka's RemoteLogManager, KIP-405): copying rolled
segments to remote storage, expiring remote segments, and keeping each hosted tiered log's view
of what is remote.

Who calls it: the replica manager tells it of every leadership change, config change and
partition removal of a tiered partition (`on_partition`, `stop_partition`; Kafka's
onLeadershipChange / stopPartitions); server/broker.py builds it with the node's
RemoteStorageManager (RSM, the bytes) and RemoteLogMetadataManager (RLMM, the
`__remote_log_metadata` topic) when remote.log.storage.system.enable is true, and runs `run()`
in its nursery. The remote reads are pybroker/replication/remote_log_reader.py's.

One trio task per tiered partition hosted here, every remote.log.manager.task.interval.ms
(first run at once), in the role the partition has here:

- leader, copy (Kafka's RLMCopyTask; not with remote.log.copy.disable): on its first run the
  log start offset is raised to the first remote segment's start and the highest offset in
  remote storage is found from the RLMM (the latest epoch of this log's epoch cache with a
  finished segment); then every rolled segment whose successor starts at or below the last
  stable offset (min(HW, first open transaction)) and that ends above what is copied is
  uploaded: COPY_SEGMENT_STARTED (RLMM), the segment, offset/time/transaction indexes, the
  producer snapshot at its end and the leader-epoch checkpoint up to its end (RSM; a new
  segment id per attempt), COPY_SEGMENT_FINISHED (RLMM), then the log's
  highest_offset_in_remote_storage moves (local retention may now remove it). A failed upload
  is deleted from the store again (DELETE_SEGMENT_STARTED/FINISHED) and retried on the next run.
  A crash between STARTED and FINISHED leaves a STARTED segment: the expiration below deletes it
  (it is never counted as remote, so the copy starts over from what is finished: resumable).
  Deliberate difference: Kafka removes such a segment only once retention reaches it (and a
  copy the RSM refused at once); here the leader removes it on its next run when this node
  started it (a copy of this node in flight is known), or `DEAD_COPY_INTERVALS` task intervals
  after another node started it.
  Copies share remote.log.manager.copy.max.bytes.per.second (Kafka's RLMQuotaManager, a
  SimpleRate over remote.log.manager.copy.quota.window.num windows of .window.size.seconds):
  a copy waits while the node's copy rate is above it. A progress line is logged per segment
  when the backlog is at least `BACKLOG_LOG_SEGMENTS` segments.
- leader, expiration (Kafka's RLMExpirationTask): over the RLMM's segments in this log's leader
  epoch lineage, oldest first: below the log start offset (DeleteRecords, or an earlier run),
  older than retention.ms (its largest timestamp), or beyond retention.bytes (remote + the part
  only local); the log start offset moves past them first, then each goes
  (DELETE_SEGMENT_STARTED, RSM delete, DELETE_SEGMENT_FINISHED). Segments left in
  DELETE_SEGMENT_STARTED (a failed delete) or COPY_SEGMENT_STARTED (a dead copy, see above) go too, and so do segments whose epochs all precede the log's earliest epoch
  (outside the lineage: an unclean election).
- follower (Kafka's RLMFollowerTask): the highest offset in remote storage from the RLMM, so the
  follower's local retention removes only what is copied.
- KIP-950: remote.storage.enable turned off with remote.log.delete.on.disable: the leader deletes
  every remote segment and the log start offset moves up to the local one.
- topic deletion (`stop_partition(delete_remote=True)`, on the replica that led the partition
  last; Kafka's stopPartitions has every replica try, which races on the metadata states):
  RemotePartitionDeleteMetadata
  DELETE_PARTITION_MARKED, STARTED, each segment DELETE_SEGMENT_STARTED, RSM delete,
  DELETE_SEGMENT_FINISHED, then DELETE_PARTITION_FINISHED.

Concurrency: the tasks run on the trio thread; every RSM and RLMM call blocks (network, object
store) and runs in a worker thread (`trio.to_thread.run_sync`, at most
remote.log.manager.thread.pool.size at once); the log is read and changed on the trio thread
only. A leadership change cancels the partition's task (a worker-thread call in flight finishes
first, off the loop) and starts one in the new role.
"""

from __future__ import annotations

import logging
import os
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import trio

from pybroker.clock import SYSTEM_CLOCK, Clock
from pybroker.config import BrokerConfig
from pybroker.log.errors import OffsetOutOfRangeError
from pybroker.log.log import UnifiedLog
from pybroker.log.producer_state import snapshot_file, write_snapshot
from pybroker.log.remote.remote_log_metadata_manager import RemoteLogMetadataManager
from pybroker.log.remote.remote_log_segment_metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from pybroker.log.remote.remote_storage_manager import (
    LogSegmentData,
    RemoteStorageError,
    RemoteStorageManager,
)
from pybroker.log.segment import LogSegment
from pybroker.log.txn_index import _ENTRY as TXN_ENTRY
from pybroker.metrics.remote_log_metrics import RemoteLogMetrics
from pybroker.metrics.stats import SimpleRate

logger = logging.getLogger("pybroker.remote_log_manager")

BACKLOG_LOG_SEGMENTS = 10  # a copy backlog this long gets a progress line per segment
DEAD_COPY_INTERVALS = 10  # another node's unfinished copy this many task intervals old is dead
_T = TypeVar("_T")


class HostedPartition(Protocol):
    """What the remote log manager reads of a replica manager's Partition."""

    topic: str
    partition: int
    topic_id: bytes
    log: UnifiedLog
    leader_epoch: int

    @property
    def is_leader(self) -> bool: ...


@dataclass
class _PartitionTask:
    partition: HostedPartition
    tip: TopicIdPartition
    leader: bool
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    copied_offset: int | None = None  # Kafka's copiedOffsetOption: None until found from the RLMM
    log_start_updated: bool = False
    was_tiered: bool = True
    registered: bool = False  # the RLMM was told about this partition


def leader_epoch_checkpoint_bytes(entries: list[tuple[int, int]]) -> bytes:
    """A leader-epoch-checkpoint file's bytes (version 0, count, "epoch offset" lines), what
    Kafka's copy uploads as the LEADER_EPOCH index."""
    lines = ["0", str(len(entries)), *(f"{e} {o}" for e, o in entries)]
    return ("\n".join(lines) + "\n").encode("ascii")


def segment_txn_index_bytes(plog: UnifiedLog, base_offset: int, next_base_offset: int) -> bytes:
    """The .txnindex of one segment as Kafka keeps it (the aborted transactions whose ABORT
    marker is in the segment), from pybroker's one index per log."""
    return b"".join(TXN_ENTRY.pack(0, e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset)
                    for e in plog.txn_index.entries if base_offset <= e.last_offset < next_base_offset)


def is_within_leader_epochs(metadata: RemoteLogSegmentMetadata, log_end_offset: int,
                            leader_epochs: list[tuple[int, int]]) -> bool:
    """Kafka's RemoteLogManager.isRemoteSegmentWithinLeaderEpochs: the segment's epochs and their
    start offsets agree with the log's leader epoch lineage (`leader_epochs`: (epoch, start)
    ascending, epochs without records left out)."""
    if not leader_epochs or not metadata.segment_leader_epochs:
        return False
    seg = _filter_empty_epochs(list(metadata.segment_leader_epochs))
    lineage = dict(leader_epochs)
    epochs = [e for e, _ in leader_epochs]
    seg_last = seg[-1][0]
    if seg_last < epochs[0] or seg_last > epochs[-1]:
        return False
    firsts = [e for e, _ in seg if e >= epochs[0]]
    if not firsts:
        return False
    seg_first = firsts[0]
    seg_map = dict(seg)
    seg_epochs = [e for e, _ in seg]

    def higher(keys: list[int], mapping: dict[int, int], epoch: int) -> tuple[int, int] | None:
        later = [k for k in keys if k > epoch]
        return (later[0], mapping[later[0]]) if later else None

    for epoch, offset in seg:
        if epoch < seg_first:
            continue
        if epoch not in lineage:
            return False
        if epoch == seg_first and epochs.index(epoch) > 0 and offset < lineage[epoch]:
            return False
        if epoch == seg_last:
            nxt = higher(epochs, lineage, epoch)
            if nxt is not None and metadata.end_offset > nxt[1] - 1:
                return False
        elif higher(epochs, lineage, epoch) != higher(seg_epochs, seg_map, epoch):
            return False
    return metadata.end_offset < log_end_offset


def _filter_empty_epochs(entries: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Kafka's buildFilteredLeaderEpochMap: drop an epoch whose successor starts at the same offset."""
    out: list[tuple[int, int]] = []
    for i, (epoch, start) in enumerate(entries):
        if i + 1 < len(entries) and entries[i + 1][1] == start:
            continue
        out.append((epoch, start))
    return out


class RemoteLogManager:
    def __init__(self, config: BrokerConfig, node_id: int, rsm: RemoteStorageManager,
                 rlmm: RemoteLogMetadataManager, *, clock: Clock = SYSTEM_CLOCK,
                 metrics: RemoteLogMetrics | None = None,
                 on_log_start_offset_moved: Callable[[HostedPartition], None] | None = None) -> None:
        """`on_log_start_offset_moved(p)` is called (trio thread) after the expiration raised a
        leader's log start offset, so the caller can complete waiting DeleteRecords and hand
        the detached local segments to the log manager; it gets the partition."""
        self.config = config
        self.node_id = node_id
        self.rsm = rsm
        self.rlmm = rlmm
        self.clock = clock
        self.metrics = metrics if metrics is not None else RemoteLogMetrics()
        self.on_log_start_offset_moved = on_log_start_offset_moved
        self.on_segments_detached: Callable[[UnifiedLog, list[LogSegment]], None] | None = None
        pool = config["remote.log.manager.copier.thread.pool.size"]
        if pool is None or pool < 1:
            pool = config["remote.log.manager.thread.pool.size"]
        self._limiter = trio.CapacityLimiter(max(1, int(pool)))
        self._tasks: dict[tuple[str, int], _PartitionTask] = {}
        self._being_copied: set[bytes] = set()  # segment ids whose copy is in flight here
        self._nursery: trio.Nursery | None = None
        self._pending: list[_PartitionTask] = []  # registered before run() started
        self._copy_rate = SimpleRate(config["remote.log.manager.copy.quota.window.num"],
                                     config["remote.log.manager.copy.quota.window.size.seconds"] * 1000)
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------------
    @property
    def interval_s(self) -> float:
        return float(self.config["remote.log.manager.task.interval.ms"]) / 1000

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The partitions' tasks live here until cancelled (the node's shutdown)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for task in self._pending:
                nursery.start_soon(self._partition_loop, task)
            self._pending.clear()
            task_status.started()
            await trio.sleep_forever()

    async def close(self) -> None:
        """Stop using the plug-ins and close them (in a worker thread: they may block)."""
        if self._closed:
            return
        self._closed = True
        for task in self._tasks.values():
            task.scope.cancel()

        def close_all() -> None:
            for closeable in (self.rlmm, self.rsm):
                try:
                    closeable.close()
                except Exception:
                    logger.exception("closing %s failed", type(closeable).__name__)

        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(close_all)

    async def _blocking(self, fn: Callable[..., _T], *args: Any) -> _T:
        return await trio.to_thread.run_sync(fn, *args, limiter=self._limiter)

    # -- the replica manager's hooks (trio thread) ------------------------------------------
    def on_partition(self, p: HostedPartition) -> None:
        """`p` was published, changed leader or epoch, or had its config changed: (re)start its
        task in its current role when its log is tiered (or was, for KIP-950's deletion)."""
        if self._closed:
            return
        tp = (p.topic, p.partition)
        current = self._tasks.get(tp)
        if not p.log.remote_log_enabled and current is None:
            return
        if current is not None and current.partition is p and current.leader == p.is_leader \
                and current.tip.topic_id == p.topic_id:
            return  # same role: the running task sees the new config on its next run
        if current is not None:
            current.scope.cancel()
        task = _PartitionTask(p, TopicIdPartition(p.topic_id, p.topic, p.partition), p.is_leader,
                              registered=current is not None and current.registered)
        self._tasks[tp] = task
        logger.info("%s: remote log %s task scheduled", task.tip, "leader" if task.leader else "follower")
        if self._nursery is None:
            self._pending.append(task)
        else:
            self._nursery.start_soon(self._partition_loop, task)

    def stop_partition(self, topic: str, partition: int, topic_id: bytes, *, delete_remote: bool) -> None:
        """The partition is no longer hosted here (Kafka's stopPartitions): its task stops, the RLMM
        stops following it, and with `delete_remote` (its topic was deleted) its remote data
        goes."""
        task = self._tasks.pop((topic, partition), None)
        if task is not None:
            task.scope.cancel()
        self.metrics.remove_partition(topic, partition)
        if self._closed or task is None:
            return
        tip = TopicIdPartition(topic_id, topic, partition)
        if self._nursery is not None:
            self._nursery.start_soon(self._stop, tip, delete_remote and task.leader)

    async def _stop(self, tip: TopicIdPartition, delete_remote: bool) -> None:
        try:
            if delete_remote:
                await self._delete_remote_partition(tip)
            await self._blocking(self.rlmm.on_stop_partitions, [tip])
        except Exception:
            logger.exception("%s: stopping the remote log partition failed", tip)

    # -- the per-partition task ------------------------------------------------------------
    async def _partition_loop(self, task: _PartitionTask) -> None:
        with task.scope:
            while True:
                try:
                    await self._run_once(task)
                except trio.Cancelled:
                    raise
                except RemoteStorageError as exc:  # the store or the metadata topic: retried
                    logger.warning("%s: remote log task failed, retrying in %s s: %s", task.tip, self.interval_s,
                                   exc)
                except Exception:
                    logger.exception("%s: remote log task failed; retrying in %s s", task.tip, self.interval_s)
                await trio.sleep(self.interval_s)

    async def _run_once(self, task: _PartitionTask) -> None:
        p = task.partition
        plog = p.log
        if not task.registered:
            leaders, followers = ([task.tip], []) if task.leader else ([], [task.tip])
            await self._blocking(self.rlmm.on_partition_leadership_changes, leaders, followers)
            task.registered = True
        if not self.rlmm.is_ready(task.tip):
            return  # the metadata of this partition is still being read
        if not plog.remote_log_enabled:
            if task.leader and plog.config.remote_log_delete_on_disable:
                await self._delete_on_disable(task)
            return
        if not task.leader:
            highest = await self._blocking(self._find_highest_remote_offset, task.tip, plog)
            plog.update_highest_offset_in_remote_storage(highest)
            return
        if not task.log_start_updated:
            start = await self._blocking(self._find_log_start_offset, task.tip, plog)
            self._raise_log_start_offset(p, start)
            task.log_start_updated = True
        if plog.remote_log_copy_enabled:
            await self._copy_segments(task)
        else:
            self._record_lag(task, plog)
        await self._expire(task)

    # -- finding what is remote (worker threads) -------------------------------------------
    def _find_highest_remote_offset(self, tip: TopicIdPartition, plog: UnifiedLog) -> int:
        """Kafka's findHighestRemoteOffset: from the latest epoch of the log's lineage down, the
        first with a finished remote segment; capped by that epoch's end here."""
        cache = plog.leader_epoch_cache
        for epoch, _start in reversed(cache.entries()):
            highest = self.rlmm.highest_offset_for_epoch(tip, epoch)
            if highest is not None:
                _e, end = cache.end_offset_for(epoch, plog.log_end_offset)
                return end - 1 if end <= highest else highest
        return -1

    def _find_log_start_offset(self, tip: TopicIdPartition, plog: UnifiedLog) -> int:
        """Kafka's findLogStartOffset: the start of the first remote segment of the earliest
        epoch of the log's lineage that has one; else the local log start offset."""
        for epoch, _start in plog.leader_epoch_cache.entries():
            for metadata in self.rlmm.list_remote_log_segments(tip, epoch):
                return metadata.start_offset
        return plog.local_log_start_offset

    def _raise_log_start_offset(self, p: HostedPartition, offset: int) -> None:
        """Kafka's updateLogStartOffsetFromRemoteTier: the log start offset only rises, never
        above the high watermark."""
        plog = p.log
        target = min(offset, plog.high_watermark)
        if target <= plog.log_start_offset:
            return
        try:
            doomed = plog.increment_log_start_offset(target)
        except OffsetOutOfRangeError:
            return
        logger.info("%s: log start offset raised to %d from remote storage", p.log, target)
        if doomed and self.on_segments_detached is not None:
            self.on_segments_detached(plog, doomed)
        if self.on_log_start_offset_moved is not None:
            self.on_log_start_offset_moved(p)

    # -- copy (Kafka's RLMCopyTask) ---------------------------------------------------------
    async def _copy_segments(self, task: _PartitionTask) -> None:
        p = task.partition
        plog = p.log
        if task.copied_offset is None:
            task.copied_offset = await self._blocking(self._find_highest_remote_offset, task.tip, plog)
            plog.update_highest_offset_in_remote_storage(task.copied_offset)
            logger.info("%s: found the highest copied remote offset %d after becoming leader", task.tip,
                        task.copied_offset)
        lso = plog.last_stable_offset
        copied = task.copied_offset
        if lso <= 0 or copied >= lso:
            self._record_lag(task, plog)
            return
        from_offset = max(copied + 1, plog.log_start_offset)
        candidates = self._candidate_segments(plog, from_offset, lso)
        if len(candidates) >= BACKLOG_LOG_SEGMENTS:
            logger.info("%s: %d segments (%d bytes) to copy to remote storage", task.tip, len(candidates),
                        sum(s.size for s, _ in candidates))
        for i, (segment, next_base) in enumerate(candidates):
            if p.log is not plog or not p.is_leader or not plog.remote_log_copy_enabled:
                return  # the log moved, or the role or config changed meanwhile
            await self._wait_for_copy_quota()
            self._copy_rate.record(segment.size, int(trio.current_time() * 1000))
            try:
                await self._copy_segment(task, plog, segment, next_base)
            except trio.Cancelled:
                raise
            except Exception:
                self.metrics.topic(task.tip.topic).remote_copy_errors += 1  # Kafka's failedRemoteCopyRequestRate
                raise
            if len(candidates) >= BACKLOG_LOG_SEGMENTS:
                logger.info("%s: copied %d of %d segments to remote storage (up to offset %d)", task.tip,
                            i + 1, len(candidates), next_base - 1)
        self._record_lag(task, plog)

    @staticmethod
    def _candidate_segments(plog: UnifiedLog, from_offset: int, lso: int) -> list[tuple[LogSegment, int]]:
        """Kafka's candidateLogSegments: the segments from the one holding `from_offset`, each
        with its successor's base offset, whose successor starts at or below the LSO (never the
        active segment)."""
        segments = list(plog.segments)
        first = 0
        for i, s in enumerate(segments):
            if s.base_offset <= from_offset:
                first = i
        out = []
        for i in range(first, len(segments) - 1):
            nxt = segments[i + 1].base_offset
            if nxt > lso:
                break
            if nxt - 1 >= from_offset:
                out.append((segments[i], nxt))
        return out

    async def _wait_for_copy_quota(self) -> None:
        """remote.log.manager.copy.max.bytes.per.second (Kafka's RLMQuotaManager.getThrottleTimeMs):
        wait while the node's copy rate is above the bound."""
        bound = float(self.config["remote.log.manager.copy.max.bytes.per.second"])
        while True:
            now_ms = int(trio.current_time() * 1000)
            rate = self._copy_rate.measure(now_ms)
            if rate <= bound:
                return
            window_ms = self._copy_rate.window_size(now_ms)
            wait_ms = min((rate - bound) / bound * window_ms,
                          self._copy_rate.num_samples * self._copy_rate.window_ms)
            self.metrics.copy_throttle_time_ms += wait_ms
            await trio.sleep(max(wait_ms, 1.0) / 1000)

    async def _copy_segment(self, task: _PartitionTask, plog: UnifiedLog, segment: LogSegment,
                            next_base: int) -> None:
        tip = task.tip
        stats = self.metrics.topic(tip.topic)
        end_offset = next_base - 1
        cache = plog.leader_epoch_cache
        epochs = cache.epochs_between(segment.base_offset, end_offset)
        if not epochs:  # a log without epochs (no batch carried one): Kafka requires at least one
            epochs = [(max(cache.latest_epoch() or 0, 0), segment.base_offset)]
        checkpoint = leader_epoch_checkpoint_bytes([(e, o) for e, o in cache.entries() if o < next_base])
        txn_bytes = segment_txn_index_bytes(plog, segment.base_offset, next_base)
        size = segment.size
        segment_id = RemoteLogSegmentId(tip, uuid.uuid4().bytes)
        metadata = RemoteLogSegmentMetadata(
            segment_id, segment.base_offset, end_offset, segment.largest_timestamp(), self.node_id,
            self.clock.wall_ms(), size, tuple(epochs), txn_idx_empty=not txn_bytes)
        snapshot = snapshot_file(plog.dir, next_base)
        logger.info("%s: copying %s to remote storage", tip, segment.log_path.name)
        self._being_copied.add(segment_id.id)
        try:
            await self._blocking(self.rlmm.add_remote_log_segment_metadata, metadata)
            stats.remote_copy_requests += 1
            try:
                custom = await self._blocking(self._upload, metadata, segment, snapshot, txn_bytes, checkpoint, size)
            except Exception as exc:
                logger.warning("%s: copy of %s failed (%s), cleaning segment %s", tip, segment.log_path.name,
                               exc, uuid.UUID(bytes=segment_id.id), exc_info=not isinstance(exc, RemoteStorageError))
                try:
                    await self._delete_segment(metadata)
                except Exception as exc:
                    logger.info("%s: cleanup failed, will retry later: %s", tip, exc)
                raise
            limit = self.config["remote.log.metadata.custom.metadata.max.bytes"]
            if custom is not None and len(custom) > limit:
                logger.warning("%s: custom metadata size %d exceeds configured limit %d; the copied segment "
                               "is removed again", tip, len(custom), limit)
                await self._delete_segment(metadata)
                raise RemoteStorageError("custom metadata size limit exceeded")
            await self._blocking(self.rlmm.update_remote_log_segment_metadata, RemoteLogSegmentMetadataUpdate(
                segment_id, self.clock.wall_ms(), RemoteLogSegmentState.COPY_SEGMENT_FINISHED, self.node_id,
                custom))
        finally:
            self._being_copied.discard(segment_id.id)
        stats.remote_copy_bytes += size
        task.copied_offset = end_offset
        plog.update_highest_offset_in_remote_storage(end_offset)
        logger.info("%s: copied %s to remote storage with segment-id %s", tip, segment.log_path.name,
                    uuid.UUID(bytes=segment_id.id))

    def _upload(self, metadata: RemoteLogSegmentMetadata, segment: LogSegment, snapshot: Path,
                txn_bytes: bytes, checkpoint: bytes, size: int) -> bytes | None:
        """Build the LogSegmentData and hand it to the RSM (worker thread). Index files the
        segment never needed (a small segment has no offset index entry) and the per-segment
        transaction index (pybroker keeps one per log) are written to a temporary dir."""
        with tempfile.TemporaryDirectory(prefix="pybroker-rlm-") as tmp:
            tmpdir = Path(tmp)

            def existing_or_empty(path: Path, name: str) -> Path:
                if path.exists():
                    return path
                empty = tmpdir / name
                empty.write_bytes(b"")
                return empty

            offset_index = existing_or_empty(segment.offset_index.path, "offset.index")
            time_index = existing_or_empty(segment.time_index.path, "time.timeindex")
            txn_index = None
            if txn_bytes:
                txn_index = tmpdir / "segment.txnindex"
                txn_index.write_bytes(txn_bytes)
            if not snapshot.exists():
                # Kafka always has one (taken at roll); a lost one uploads an empty state
                logger.warning("%s: no producer snapshot at %s; uploading an empty producer state",
                               metadata.topic_id_partition, snapshot.name)
                snapshot = tmpdir / snapshot.name
                write_snapshot(snapshot, {}, sync=False)
            data = LogSegmentData(segment.log_path, offset_index, time_index, txn_index, snapshot,
                                  checkpoint, size)
            return self.rsm.copy_log_segment_data(metadata, data)

    def _record_lag(self, task: _PartitionTask, plog: UnifiedLog) -> None:
        """Kafka's RemoteCopyLagBytes/Segments: the rolled segments not yet in remote storage."""
        g = self.metrics.partition(task.tip.topic, task.tip.partition)
        local = plog.only_local_segments()
        g.copy_lag_bytes = max(sum(s.size for s in local) - plog.active_segment.size, 0)
        g.copy_lag_segments = max(len(local) - 1, 0)

    # -- expiration (Kafka's RLMExpirationTask) ---------------------------------------------
    async def _expire(self, task: _PartitionTask) -> None:
        p = task.partition
        plog = p.log
        tip = task.tip
        segments = await self._blocking(lambda: list(self.rlmm.list_remote_log_segments(tip)))
        g = self.metrics.partition(tip.topic, tip.partition)
        g.metadata_count = len(segments)
        g.log_size_bytes = sum(m.segment_size_in_bytes for m in segments
                               if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
        if not segments:
            return
        lineage = _filter_empty_epochs(plog.leader_epoch_cache.entries())
        if not lineage:
            return
        log_end = plog.log_end_offset
        cfg = plog.config
        now = self.clock.wall_ms()
        retention_ms = cfg.retention_ms if cfg.delete else -1
        retention_bytes = cfg.retention_bytes if cfg.delete else -1
        ordered = sorted(segments, key=lambda m: (m.start_offset, m.end_offset))
        valid_finished = [m for m in ordered if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
                          and is_within_leader_epochs(m, log_end, lineage)]
        breached_bytes = 0
        if retention_bytes > -1:
            local_only = sum(s.size for s in plog.only_local_segments())
            total = local_only + sum(m.segment_size_in_bytes for m in valid_finished)
            breached_bytes = max(total - retention_bytes, 0)
        log_start = plog.log_start_offset
        first_epoch = lineage[0][0]
        doomed: list[RemoteLogSegmentMetadata] = []
        new_start: int | None = None
        for m in ordered:
            if m.state == RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
                continue
            if m.remote_log_segment_id.id in self._being_copied:
                continue  # this node's copy in flight
            if m.state == RemoteLogSegmentState.DELETE_SEGMENT_STARTED:
                doomed.append(m)  # a delete that failed: retried
                continue
            if m.state == RemoteLogSegmentState.COPY_SEGMENT_STARTED:
                if self._dead_copy(m, now):
                    doomed.append(m)
                continue
            epochs = [e for e, _ in m.segment_leader_epochs]
            if all(e <= first_epoch for e in epochs) and m.end_offset < log_start:
                doomed.append(m)  # below the log start offset (DeleteRecords, an earlier run)
                continue
            if all(e < first_epoch for e in epochs):
                doomed.append(m)  # outside the lineage (unclean election)
                continue
            if not is_within_leader_epochs(m, log_end, lineage):
                continue
            expired = False
            if retention_ms > -1 and m.max_timestamp_ms <= now - retention_ms:
                expired = True
                breached_bytes = max(0, breached_bytes - m.segment_size_in_bytes)
            elif breached_bytes > 0 and breached_bytes - m.segment_size_in_bytes >= 0:
                expired = True
                breached_bytes -= m.segment_size_in_bytes
            if not expired:
                break  # retention keeps this one, and so every later one
            doomed.append(m)
            new_start = m.end_offset + 1 if new_start is None else max(new_start, m.end_offset + 1)
        if new_start is not None:
            logger.info("%s: remote retention moves the log start offset to %d", tip, new_start)
            self._raise_log_start_offset(p, new_start)
        g.delete_lag_segments = len(doomed)
        g.delete_lag_bytes = sum(m.segment_size_in_bytes for m in doomed)
        for m in doomed:
            try:
                await self._delete_segment(m)
            except Exception:
                logger.warning("%s: remote segment %s could not be deleted; retrying later", tip,
                               uuid.UUID(bytes=m.remote_log_segment_id.id), exc_info=True)
                continue
            g.delete_lag_segments -= 1
            g.delete_lag_bytes -= m.segment_size_in_bytes

    def _dead_copy(self, m: RemoteLogSegmentMetadata, now_ms: int) -> bool:
        """A COPY_SEGMENT_STARTED segment no copy will finish: this node's (every copy of this node
        in flight is in `_being_copied`, so this one died with a crash or restart), or another
        node's older than `DEAD_COPY_INTERVALS` task intervals (that node lost the leadership or
        died; the grace lets an upload it still has in flight end before its objects are
        removed, so none is left behind)."""
        if m.broker_id == self.node_id:
            return True
        return now_ms - m.event_timestamp_ms > DEAD_COPY_INTERVALS * self.config["remote.log.manager.task.interval.ms"]

    async def _delete_segment(self, m: RemoteLogSegmentMetadata) -> None:
        """Kafka's deleteRemoteLogSegment: DELETE_SEGMENT_STARTED, the RSM delete,
        DELETE_SEGMENT_FINISHED (a segment already in DELETE_SEGMENT_STARTED skips the first)."""
        stats = self.metrics.topic(m.topic_id_partition.topic)
        if m.state != RemoteLogSegmentState.DELETE_SEGMENT_STARTED:
            await self._blocking(self.rlmm.update_remote_log_segment_metadata, RemoteLogSegmentMetadataUpdate(
                m.remote_log_segment_id, self.clock.wall_ms(), RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
                self.node_id, m.custom_metadata))
        stats.remote_delete_requests += 1
        try:
            await self._blocking(self.rsm.delete_log_segment_data, m)
        except Exception:
            stats.remote_delete_errors += 1
            raise
        await self._blocking(self.rlmm.update_remote_log_segment_metadata, RemoteLogSegmentMetadataUpdate(
            m.remote_log_segment_id, self.clock.wall_ms(), RemoteLogSegmentState.DELETE_SEGMENT_FINISHED,
            self.node_id, m.custom_metadata))

    # -- KIP-950 and topic deletion ---------------------------------------------------------
    async def _delete_on_disable(self, task: _PartitionTask) -> None:
        """remote.storage.enable turned off with remote.log.delete.on.disable: every remote
        segment goes, then the log start offset rises to the local one."""
        tip = task.tip
        segments = await self._blocking(lambda: list(self.rlmm.list_remote_log_segments(tip)))
        live = [m for m in segments if m.state != RemoteLogSegmentState.DELETE_SEGMENT_FINISHED]
        if live:
            logger.info("%s: tiered storage disabled with remote.log.delete.on.disable: deleting %d remote "
                        "segments", tip, len(live))
        plog = task.partition.log
        self._raise_log_start_offset(task.partition, plog.segments[0].base_offset)
        for m in live:
            await self._delete_segment(m)
        self.metrics.remove_partition(tip.topic, tip.partition)
        if not live and self._tasks.get((tip.topic, tip.partition)) is task:
            del self._tasks[(tip.topic, tip.partition)]
            await self._blocking(self.rlmm.on_stop_partitions, [tip])
            task.scope.cancel()

    async def _delete_remote_partition(self, tip: TopicIdPartition) -> None:
        """Kafka's deleteRemoteLogPartition with its partition delete states."""
        def mark(state: RemotePartitionDeleteState) -> None:
            self.rlmm.put_remote_partition_delete_metadata(
                RemotePartitionDeleteMetadata(tip, state, self.clock.wall_ms(), self.node_id))

        segments = await self._blocking(self._segments_or_none, tip)
        if segments is None:
            return  # nothing of this partition is known here
        await self._blocking(mark, RemotePartitionDeleteState.DELETE_PARTITION_MARKED)
        await self._blocking(mark, RemotePartitionDeleteState.DELETE_PARTITION_STARTED)
        for m in segments:
            if m.state != RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
                await self._delete_segment(m)
        await self._blocking(mark, RemotePartitionDeleteState.DELETE_PARTITION_FINISHED)
        logger.info("%s: remote log data deleted (%d segments)", tip, len(segments))

    def _segments_or_none(self, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata] | None:
        try:
            it: Iterator[RemoteLogSegmentMetadata] = self.rlmm.list_remote_log_segments(tip)
            return list(it)
        except RemoteStorageError:
            return None


def strip_prefix(config: BrokerConfig, prefix_key: str) -> dict[str, str]:
    """The raw broker properties under the prefix `config[prefix_key]`, prefix stripped."""
    return config.prefixed(str(config[prefix_key]))


def remote_index_cache_dir(log_dir: str | os.PathLike[str]) -> Path:
    """Kafka's RemoteIndexCache directory under the first log dir."""
    return Path(log_dir) / "remote-log-index-cache"


__all__ = ["BACKLOG_LOG_SEGMENTS", "HostedPartition", "RemoteLogManager", "is_within_leader_epochs",
           "leader_epoch_checkpoint_bytes", "segment_txn_index_bytes", "strip_prefix"]
