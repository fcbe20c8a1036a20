"""All partition logs of a node, across its log dirs (Kafka's LogManager).

Each log dir root holds `meta.properties`, `recovery-point-offset-checkpoint`,
`log-start-offset-checkpoint`, `replication-offset-checkpoint` (high watermarks, supplied by the
server) and, between a clean shutdown and the next start, the `.kafka_cleanshutdown` marker.
Partition dirs are `<topic>-<partition>`; a deleted partition is first renamed to
`<topic>-<partition>.<32 hex>-delete` and removed later (Kafka's layout), so a crash mid-delete
leaves a dir that the next `load()` finishes removing.

A partition being moved to another dir (AlterReplicaLogDirs) is copied into
`<other dir>/<topic>-<partition>.<32 hex>-future` (log/future_log.py) and swapped in by
`replace_current_with_future`: the old dir is renamed `-delete` first, then the future dir takes
the partition's name. At `load()` a `-future` dir whose partition still has a current log is an
interrupted copy and is removed (the original stays); one without a current log was cut short
between the two renames and is completed.

Startup: `load(now_ms)` is synchronous and meant for a worker thread. It formats/validates
meta.properties, then per dir: if the clean shutdown marker is present no segment is scanned
(recovery points are taken as the log end), otherwise every log recovers from its checkpointed
recovery point (CRC scan, torn-tail truncation, index rebuild, producer-state rebuild). The
marker is deleted once the dir is loaded, so a crash afterwards is treated as unclean.

Shutdown: `shutdown()` flushes every log, closes it (producer snapshots, trimmed indexes), writes
the checkpoints and then the marker.

Concurrency: `load`, `checkpoint`, `shutdown` and `purge_deleted` block on disk and run in a
worker thread; `delete_log` is quick (a rename) and runs on the event loop; `get_or_create_log`
runs on the loop at start-up and, through `create_logs`, in a worker thread for new partitions.
`_lock` guards the log table against those threads.
"""

from __future__ import annotations

import os
import shutil
import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from pybroker.log.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
    fsync_dir,
)
from pybroker.log.config import LogConfig
from pybroker.log.errors import KafkaStorageError, LogError
from pybroker.log.future_log import FutureLogCopy, parse_future_dir_name
from pybroker.log.log import UnifiedLog, log_dir_name, parse_log_dir_name
from pybroker.log.meta_properties import MetaProperties, ensure_log_dirs
from pybroker.log.producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
METADATA_LOG_DIR_NAME = "__cluster_metadata-0"
DELETE_DIR_SUFFIX = "-delete"

TopicPartition = tuple[str, int]
MAX_FILE_NAME = 255


def delete_dir_name(topic: str, partition: int) -> str:
    """`<topic>-<partition>.<32 hex>-delete`, the topic cut so the name fits a file name (Kafka's
    logDirNameWithSuffixCappedLength: a 249-character topic plus the suffix is 292 characters)."""
    suffix = f"-{partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
    return topic[: MAX_FILE_NAME - len(suffix)] + suffix


class LogManager:
    def __init__(self, log_dirs: Sequence[str | os.PathLike[str]], node_id: int, *,
                 cluster_id: str | None = None, default_config: LogConfig | None = None,
                 topic_config: Callable[[str], LogConfig] | None = None,
                 producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS) -> None:
        """`topic_config(topic)` returns the topic's LogConfig (broker defaults + overrides) for
        logs found on disk; it defaults to `default_config` for every topic."""
        self.log_dirs = [Path(d) for d in log_dirs]
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.default_config = default_config or LogConfig()
        self._topic_config = topic_config or (lambda _topic: self.default_config)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.meta: dict[Path, MetaProperties] = {}
        self.logs: dict[TopicPartition, UnifiedLog] = {}
        self._log_dir_of: dict[TopicPartition, Path] = {}
        self._dir_counts: dict[Path, int] = {}  # partitions per log dir, for _next_log_dir
        self._pending_deletes: list[tuple[Path, UnifiedLog | None]] = []
        self._lock = threading.Lock()
        self.had_clean_shutdown: dict[Path, bool] = {}
        # partitions with a move in progress -> the FutureLogCopy being built (event loop only)
        self.future_logs: dict[TopicPartition, FutureLogCopy] = {}

    # -- startup ---------------------------------------------------------------------------
    def load(self, now_ms: int) -> None:
        """Format/validate the dirs and open (recovering if needed) every log. Blocking."""
        self.cluster_id, self.meta = ensure_log_dirs(self.log_dirs, self.node_id, self.cluster_id)
        futures: list[tuple[Path, TopicPartition]] = []
        for log_dir in self.log_dirs:
            marker = log_dir / CLEAN_SHUTDOWN_FILE
            clean = marker.exists()
            self.had_clean_shutdown[log_dir] = clean
            recovery_points = OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT).read()
            start_offsets = OffsetCheckpointFile(log_dir / LOG_START_OFFSET_CHECKPOINT).read()
            for child in sorted(log_dir.iterdir()):
                if not child.is_dir():
                    continue
                if child.name.endswith(DELETE_DIR_SUFFIX):
                    self._pending_deletes.append((child, None))
                    continue
                if child.name == METADATA_LOG_DIR_NAME:
                    continue  # the KRaft metadata log is opened by the controller, not here
                future_tp = parse_future_dir_name(child.name)
                if future_tp is not None:
                    futures.append((child, future_tp))
                    continue
                tp = parse_log_dir_name(child.name)
                if tp is None:
                    continue  # -future / -stray dirs and foreign dirs are left alone
                if tp in self.logs:
                    raise KafkaStorageError(f"duplicate log directories for {tp[0]}-{tp[1]}: "
                                            f"{self._log_dir_of[tp] / child.name} and {child}")
                log = UnifiedLog(child, self._topic_config(tp[0]), topic=tp[0], partition=tp[1],
                                 log_start_offset=start_offsets.get(tp, 0),
                                 recovery_point=recovery_points.get(tp, 0),
                                 clean_shutdown=clean, now_ms=now_ms,
                                 producer_id_expiration_ms=self.producer_id_expiration_ms)
                self.logs[tp] = log
                self._set_dir(tp, log_dir)
            if clean:
                marker.unlink()
                fsync_dir(log_dir)
        for child, tp in futures:
            self._resolve_future_dir(child, tp, now_ms)
        self.purge_deleted()

    def _resolve_future_dir(self, child: Path, tp: TopicPartition, now_ms: int) -> None:
        """Drop an interrupted copy; complete a swap cut short between its two renames."""
        log_dir = child.parent
        if tp in self.logs:
            shutil.rmtree(child, ignore_errors=True)
            fsync_dir(log_dir)
            return
        target = log_dir / log_dir_name(*tp)
        os.replace(child, target)
        fsync_dir(log_dir)
        # the swap happened after a complete copy, but its tail was not fsynced: recover it all
        self.logs[tp] = UnifiedLog(target, self._topic_config(tp[0]), topic=tp[0], partition=tp[1],
                                   clean_shutdown=False, now_ms=now_ms,
                                   producer_id_expiration_ms=self.producer_id_expiration_ms)
        self._set_dir(tp, log_dir)

    def read_high_watermarks(self) -> dict[TopicPartition, int]:
        """The replication-offset-checkpoint of every dir (for the replica manager)."""
        out: dict[TopicPartition, int] = {}
        for log_dir in self.log_dirs:
            out.update(OffsetCheckpointFile(log_dir / REPLICATION_OFFSET_CHECKPOINT).read())
        return out

    # -- log table -------------------------------------------------------------------------
    def get_log(self, topic: str, partition: int) -> UnifiedLog | None:
        return self.logs.get((topic, partition))

    def get_or_create_log(self, topic: str, partition: int, topic_id: bytes | None,
                          config: LogConfig | None = None, *, now_ms: int = 0) -> UnifiedLog:
        tp = (topic, partition)
        log = self.logs.get(tp)
        if log is not None:
            if topic_id is not None and log.topic_id is None:
                from pybroker.log.log import write_partition_metadata

                write_partition_metadata(log.dir, topic_id)
                log.topic_id = topic_id
            return log
        with self._lock:
            log_dir = self._next_log_dir()
        log = UnifiedLog(log_dir / log_dir_name(topic, partition), config or self._topic_config(topic),
                         topic=topic, partition=partition, topic_id=topic_id, now_ms=now_ms,
                         producer_id_expiration_ms=self.producer_id_expiration_ms)
        with self._lock:
            self.logs[tp] = log
            self._set_dir(tp, log_dir)
        return log

    def create_logs(self, specs: list[tuple[str, int, bytes | None, LogConfig, int | None]], now_ms: int
                    ) -> list[UnifiedLog | Exception]:
        """get_or_create_log for many partitions, (topic, partition, topic id, config, leader epoch)
        each; a leader epoch (None when this node does not lead) starts at the log end offset, so
        its fsynced leader-epoch-checkpoint is written here too. A partition that cannot be made
        (a disk error, a stale directory of another topic id) gets its exception in the result
        instead of a log; the others are made. Blocking (directories, files, preallocated indexes,
        fsyncs): meant for a worker thread."""
        logs: list[UnifiedLog | Exception] = []
        for topic, partition, topic_id, config, leader_epoch in specs:
            try:
                log = self.get_or_create_log(topic, partition, topic_id, config, now_ms=now_ms)
                if leader_epoch is not None:
                    log.maybe_assign_epoch_start_offset(leader_epoch, log.log_end_offset)
            except (OSError, LogError) as exc:
                logs.append(exc)
            else:
                logs.append(log)
        return logs

    def _next_log_dir(self) -> Path:
        """The dir holding the fewest partitions (Kafka's placement rule)."""
        return min(self.log_dirs, key=lambda d: self._dir_counts.get(d, 0))

    def _set_dir(self, tp: TopicPartition, log_dir: Path) -> None:
        self._pop_dir(tp)
        self._log_dir_of[tp] = log_dir
        self._dir_counts[log_dir] = self._dir_counts.get(log_dir, 0) + 1

    def _pop_dir(self, tp: TopicPartition) -> Path | None:
        log_dir = self._log_dir_of.pop(tp, None)
        if log_dir is not None:
            self._dir_counts[log_dir] -= 1
        return log_dir

    def delete_log(self, topic: str, partition: int) -> Path | None:
        """Rename the partition dir to `<tp>.<uuid hex>-delete` and forget the log.

        Files are closed and removed later by `purge_deleted()` (run it in a worker thread), which
        also gives in-flight sendfile regions time to finish.
        """
        tp = (topic, partition)
        with self._lock:
            log = self.logs.pop(tp, None)
            log_dir = self._pop_dir(tp)
        if log is None or log_dir is None:
            return None
        target = log_dir / delete_dir_name(topic, partition)
        os.replace(log.dir, target)
        fsync_dir(log_dir)
        self._pending_deletes.append((target, log))
        return target

    def log_dir_of(self, topic: str, partition: int) -> Path | None:
        return self._log_dir_of.get((topic, partition))

    def replace_current_with_future(self, log: UnifiedLog, future_dir: Path, recovery_point: int, *,
                                    now_ms: int) -> UnifiedLog:
        """Swap a finished `-future` copy in for `log` (Kafka's replaceCurrentWithFutureLog).

        Event loop, right after `FutureLogCopy.finish()`: the current dir is renamed `-delete`
        (closed and removed later by `purge_deleted`, so in-flight reads finish), the future dir
        takes the partition's name, and the new log is opened there with the current log's start
        offset, high watermark and config; `recovery_point` is where the copier's fsyncs end
        (FutureLogCopy.finish). On failure the renames are undone and the
        current log stays.
        """
        tp = (log.topic, log.partition)
        src_root = self._log_dir_of[tp]
        dst_root = future_dir.parent
        target = dst_root / log_dir_name(*tp)
        deleted = src_root / delete_dir_name(*tp)
        os.replace(log.dir, deleted)
        try:
            os.replace(future_dir, target)
            try:
                fsync_dir(src_root)
                fsync_dir(dst_root)
                new_log = UnifiedLog(target, log.config, topic=log.topic, partition=log.partition,
                                     log_start_offset=log.log_start_offset,
                                     recovery_point=recovery_point,
                                     topic_id=log.topic_id, clean_shutdown=True, now_ms=now_ms,
                                     producer_id_expiration_ms=self.producer_id_expiration_ms)
            except BaseException:
                os.replace(target, future_dir)
                raise
        except BaseException:
            os.replace(deleted, log.dir)
            raise
        new_log.recovery_point = min(max(recovery_point, new_log.log_start_offset), new_log.log_end_offset)
        new_log.high_watermark = log.high_watermark
        new_log.last_flush_ms = log.last_flush_ms
        with self._lock:
            self.logs[tp] = new_log
            self._set_dir(tp, dst_root)
        log.dir = deleted
        self._pending_deletes.append((deleted, log))
        return new_log

    def purge_deleted(self) -> int:
        """Close and remove renamed `-delete` dirs; blocking. Returns how many were removed."""
        pending, self._pending_deletes = self._pending_deletes, []
        for path, log in pending:
            if log is not None:
                log.close_handlers()
            shutil.rmtree(path, ignore_errors=True)
        return len(pending)

    # -- checkpoints -----------------------------------------------------------------------
    def checkpoint(self, high_watermarks: dict[TopicPartition, int] | None = None) -> None:
        """Write recovery-point and log-start-offset checkpoints (and HWs when given). Blocking."""
        with self._lock:
            by_dir: dict[Path, list[tuple[TopicPartition, UnifiedLog]]] = {d: [] for d in self.log_dirs}
            for tp, log in self.logs.items():
                by_dir[self._log_dir_of[tp]].append((tp, log))
        for log_dir, entries in by_dir.items():
            OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT).write(
                {tp: log.recovery_point for tp, log in entries})
            # Kafka lists only logs whose start offset moved past their first segment.
            OffsetCheckpointFile(log_dir / LOG_START_OFFSET_CHECKPOINT).write(
                {tp: log.log_start_offset for tp, log in entries
                 if log.log_start_offset > log.segments[0].base_offset})
            if high_watermarks is not None:
                OffsetCheckpointFile(log_dir / REPLICATION_OFFSET_CHECKPOINT).write(
                    {tp: high_watermarks[tp] for tp, _ in entries if tp in high_watermarks})

    def shutdown(self, now_ms: int, high_watermarks: dict[TopicPartition, int] | None = None) -> None:
        """Flush and close every log, write checkpoints, then the clean-shutdown marker. Blocking."""
        for log in list(self.logs.values()):
            log.flush(now_ms=now_ms)
        for log in list(self.logs.values()):
            log.close()
        self.checkpoint(high_watermarks)
        self.purge_deleted()
        for log_dir in self.log_dirs:
            fd = os.open(log_dir / CLEAN_SHUTDOWN_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_dir(log_dir)
